//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`): buffers the kernel picks from when a
//! receive completes, so a multishot RECV needs no buffer of its own while it waits.
//!
//! # What it implements
//! [`BufRing`] holds `count` buffers of `buf_bytes` each and the ring of entries that offers
//! them to the kernel (the layout of `struct io_uring_buf_ring`: 16-byte entries, the tail in
//! the first entry's last two bytes). A [`super::Ring`] registers one as buffer group
//! [`BUF_GROUP`] and owns it; a completion that used a buffer carries a [`Provided`] naming it,
//! which the ring's owner reads ([`super::Ring::provided`]) and gives back
//! ([`super::Ring::recycle`]).
//!
//! # Design
//! *Exactly once.* The kernel takes buffers from the ring's head and never writes a buffer
//! again until it is offered anew; a [`Provided`] is the one handle to a taken buffer (not
//! `Clone`), and recycling consumes it, so a buffer is read only while the kernel has let go of
//! it and offered again only once. `held` records which buffers are out, and both directions
//! assert it: a buffer the kernel reports twice, or one recycled that was not out, stops the
//! worker rather than corrupt a receive.
//!
//! *Offering.* Recycling writes the entry at `tail & mask` field by field (entry 0's last two
//! bytes are the tail the kernel reads: writing the whole entry would reset it) and publishes
//! the new tail with a release store, as liburing's `io_uring_buf_ring_add` and `_advance` do.
//! The entry written is never one the kernel may read: the ring has as many entries as
//! buffers, and the buffer being offered was out of it.
//!
//! Worked example: 128 buffers of 16 KiB. A multishot RECV of a connection whose client sent
//! 896 B of requests completes with `result = 896`, `IORING_CQE_F_BUFFER` and buffer id 5 in
//! its flags, and `IORING_CQE_F_MORE` (it stays armed); the worker copies the 896 B into the
//! connection's input and recycles buffer 5, which becomes entry `tail & 127` and is the
//! kernel's again once the tail is published. If 128 completions took every buffer before any
//! came back, the next receive ends the multishot with `-ENOBUFS` (no `F_MORE`); the worker
//! recycles and arms it again.
//!
//! # What it leaves out
//! Incremental consumption (`IOU_PBUF_RING_INC`, one large buffer shared by several
//! receives), kernel-allocated ring memory (`IOU_PBUF_RING_MMAP`) and more than one group.

use std::sync::atomic::{AtomicU16, Ordering};

use super::AlignedBytes;

/// The buffer group id a [`super::Ring`] registers its provided buffers as.
pub const BUF_GROUP: u16 = 0;
/// Bytes of one `struct io_uring_buf`.
const ENTRY_BYTES: usize = 16;
/// Offset of the tail within the ring (the first entry's `resv` field).
const TAIL_OFFSET_BYTES: usize = 14;
/// The kernel pins the ring's memory by pages: it starts on a page and fills whole pages.
const PAGE_BYTES: usize = 4096;

/// A provided buffer the kernel filled, named by a completion: read it with
/// [`super::Ring::provided`], give it back with [`super::Ring::recycle`], once.
#[derive(Debug)]
#[must_use = "a provided buffer not recycled is lost to the ring"]
pub struct Provided {
    bid: u16,
    len: u32,
}

impl Provided {
    /// Bytes the receive wrote.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The buffers and the entry ring of one buffer group (see the module essay).
pub struct BufRing {
    /// The entries the kernel reads (page-aligned, whole pages).
    entries: AlignedBytes,
    /// `count` buffers of `buf_bytes`, buffer `bid` at `bid × buf_bytes`.
    bufs: AlignedBytes,
    count: u16,
    buf_bytes: u32,
    /// The tail as last published.
    tail: u16,
    /// Which buffers are out of the kernel's hands (reported by a completion, not recycled).
    held: Vec<bool>,
    held_count: usize,
}

impl BufRing {
    /// `count` (a power of two, at most 32,768) buffers of `buf_bytes`, all offered to the
    /// kernel once the ring is registered at [`BufRing::ring_addr`].
    pub fn new(count: u16, buf_bytes: u32) -> BufRing {
        assert!(
            count.is_power_of_two() && count <= 1 << 15,
            "a buffer ring of {count} entries"
        );
        assert!(buf_bytes > 0, "empty provided buffers");
        let ring_bytes = (usize::from(count) * ENTRY_BYTES).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        let mut ring = BufRing {
            entries: AlignedBytes::zeroed(ring_bytes, PAGE_BYTES),
            bufs: AlignedBytes::zeroed(usize::from(count) * buf_bytes as usize, PAGE_BYTES),
            count,
            buf_bytes,
            tail: 0,
            held: vec![true; usize::from(count)],
            held_count: usize::from(count),
        };
        for bid in 0..count {
            ring.recycle(Provided { bid, len: 0 });
        }
        ring
    }

    /// The address to register (`io_uring_buf_reg.ring_addr`).
    pub fn ring_addr(&self) -> u64 {
        self.entries.base_ptr() as u64
    }

    /// Entries of the ring (`io_uring_buf_reg.ring_entries`).
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Buffers out of the kernel's hands.
    pub fn held(&self) -> usize {
        self.held_count
    }

    /// Takes note of buffer `bid`, which a completion reports filled with `len` bytes.
    pub fn take(&mut self, bid: u16, len: u32) -> Provided {
        let i = usize::from(bid);
        assert!(
            i < self.held.len() && !self.held[i] && len <= self.buf_bytes,
            "the kernel reported provided buffer {bid} ({len} B) that it did not hold"
        );
        self.held[i] = true;
        self.held_count += 1;
        Provided { bid, len }
    }

    /// The bytes a receive wrote into `p`'s buffer.
    pub fn bytes(&self, p: &Provided) -> &[u8] {
        let i = usize::from(p.bid);
        assert!(self.held[i], "provided buffer {} read while offered", p.bid);
        let offset = i * self.buf_bytes as usize;
        // SAFETY: `p` names buffer `bid`, which lies within `bufs` (`take` checked the id and
        // that `len` ≤ `buf_bytes`); the kernel reported it filled and writes it no more until
        // it is offered again, which takes `p` by value (`recycle`), so no write overlaps the
        // borrow.
        unsafe { std::slice::from_raw_parts(self.bufs.base_ptr().add(offset), p.len as usize) }
    }

    /// Offers `p`'s buffer to the kernel again.
    pub fn recycle(&mut self, p: Provided) {
        let i = usize::from(p.bid);
        assert!(
            i < self.held.len() && self.held[i],
            "provided buffer {} recycled while offered",
            p.bid
        );
        self.held[i] = false;
        self.held_count -= 1;
        let slot = usize::from(self.tail & (self.count - 1));
        let addr = self.bufs.base_ptr() as u64 + (i * self.buf_bytes as usize) as u64;
        let entry = self.entries.base_ptr();
        // SAFETY: `slot` < `count`, so the 16-byte entry lies within `entries`; the kernel
        // reads only the entries from its head to the published tail, at most `count - 1`
        // of them while this buffer was held, so not this one. The writes leave the entry's
        // last two bytes alone (entry 0 holds the tail there). Field offsets are those of
        // `struct io_uring_buf` (addr: 0, len: 8, bid: 12), all naturally aligned.
        unsafe {
            let e = entry.add(slot * ENTRY_BYTES);
            e.cast::<u64>().write(addr);
            e.add(8).cast::<u32>().write(self.buf_bytes);
            e.add(12).cast::<u16>().write(p.bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is 2 bytes at offset 14 of a page-aligned allocation (aligned for a
        // u16), shared with the kernel, which only reads it: an atomic is the right view.
        let tail = unsafe { &*entry.add(TAIL_OFFSET_BYTES).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use crate::sys::{Cqe, Ring, Sqe};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    /// A ring with `count` provided buffers of `bytes`, or `None` after [`testkit::skip`]
    /// where io_uring or provided-buffer rings are refused.
    fn ring_with_buffers(test: &str, count: u16, bytes: u32) -> Option<Ring<Vec<u8>>> {
        let mut ring = match Ring::new(8) {
            Ok(ring) => ring,
            Err(e) => {
                testkit::skip(test, &format!("io_uring is refused here ({e})"));
                return None;
            }
        };
        if let Err(e) = ring.provide_buffers(count, bytes) {
            testkit::skip(
                test,
                &format!("provided-buffer rings are refused here ({e})"),
            );
            return None;
        }
        Some(ring)
    }

    /// Waits for one completion.
    fn next(ring: &mut Ring<Vec<u8>>, out: &mut Vec<Cqe<Vec<u8>>>) -> Cqe<Vec<u8>> {
        while out.is_empty() {
            ring.enter(1, Some(1_000_000_000)).ok();
            ring.reap(out);
        }
        out.remove(0)
    }

    /// One multishot receive takes 40 messages through 4 buffers: each completion names a
    /// buffer the kernel let go of (two held at once are never the same one: `take` asserts
    /// it), holding that message, and each goes back once; every buffer is used in turn, and
    /// none is held at the end.
    #[test]
    fn provided_buffers_come_back_exactly_once() {
        let test = "provided_buffers_come_back_exactly_once";
        let Some(mut ring) = ring_with_buffers(test, 4, 64) else {
            return;
        };
        let (mut client, server) = UnixStream::pair().expect("socketpair");
        assert!(ring
            .push(
                7,
                Sqe::RecvMulti {
                    fd: server.as_raw_fd()
                }
            )
            .is_ok());
        let mut out = Vec::new();
        let mut uses = [0usize; 4];
        let mut kept = Vec::new();
        for m in 0..40u8 {
            let message = [m; 50];
            client.write_all(&message).expect("write");
            let cqe = next(&mut ring, &mut out);
            assert_eq!((cqe.user_data, cqe.result), (7, 50));
            assert!(cqe.more, "the multishot receive stays armed");
            let buf = cqe.buf.expect("a provided buffer");
            assert_eq!(ring.provided(&buf), &message[..]);
            uses[usize::from(buf.bid)] += 1;
            // Hold two at a time: the kernel must pick among the other two.
            kept.push(buf);
            if kept.len() == 2 {
                ring.recycle(kept.remove(0));
            }
            assert_eq!(ring.provided_held(), kept.len());
        }
        for buf in kept.drain(..) {
            ring.recycle(buf);
        }
        assert_eq!(ring.provided_held(), 0);
        assert_eq!(uses, [10; 4], "each buffer in turn");
        assert_eq!(ring.in_flight(), 1, "still armed");
    }

    /// A receive that finds no buffer ends the multishot with ENOBUFS (no F_MORE); once the
    /// buffers are back, a new one takes the rest, in order.
    #[test]
    fn running_out_of_buffers_ends_the_multishot_and_a_new_one_resumes() {
        let test = "running_out_of_buffers_ends_the_multishot_and_a_new_one_resumes";
        let Some(mut ring) = ring_with_buffers(test, 2, 16) else {
            return;
        };
        let (mut client, server) = UnixStream::pair().expect("socketpair");
        let sent: Vec<u8> = (0..100u8).collect();
        client.write_all(&sent).expect("write");
        // End of stream after the bytes: the last multishot ends with 0, not by waiting.
        drop(client);
        let mut got = Vec::new();
        let mut out = Vec::new();
        let mut held = Vec::new();
        let mut arms = 0;
        while got.len() < sent.len() {
            assert!(arms < 10, "no progress after {arms} receives");
            assert!(ring
                .push(
                    3,
                    Sqe::RecvMulti {
                        fd: server.as_raw_fd()
                    }
                )
                .is_ok());
            arms += 1;
            loop {
                let cqe = next(&mut ring, &mut out);
                if let Some(buf) = cqe.buf {
                    got.extend_from_slice(ring.provided(&buf));
                    held.push(buf);
                }
                if !cqe.more {
                    if got.len() < sent.len() {
                        assert_eq!(cqe.result, -libc::ENOBUFS, "ended by the buffers");
                        assert_eq!(held.len(), 2, "it ended when both buffers were out");
                    } else {
                        assert!(cqe.result == 0 || cqe.result == -libc::ENOBUFS);
                    }
                    break;
                }
            }
            assert_eq!(ring.in_flight(), 0, "the multishot is over");
            for buf in held.drain(..) {
                ring.recycle(buf);
            }
        }
        assert_eq!(got, sent, "in order, nothing lost or repeated");
        assert_eq!(arms, 4, "16 B buffers, two per multishot: 100 B take four");
        assert_eq!(ring.provided_held(), 0);
    }
}
