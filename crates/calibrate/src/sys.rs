//! The calibrate crate's memory and system-call primitives that need `unsafe`, each behind a
//! small safe interface with its SAFETY argument.
//!
//! [`AlignedBuf`]: a zeroed, 4 KiB-aligned heap buffer, what O_DIRECT asks of a read or write
//! buffer on every block device this measures (the logical block size is at most 4 KiB). The
//! owner hands its pointer to the kernel and keeps the buffer alive until the I/O completed
//! (see [`crate::uring`]); the buffer frees itself on drop.
//!
//! [`SlotRing`]: an io_uring whose reads and writes go only into the aligned buffers it owns,
//! one per slot, freed only when no operation points into them: [`crate::uring`]'s closed
//! loop. [`SockRing`]: an io_uring over one socket receiving into and sending from the two
//! buffers it owns, the NBD prober's ([`crate::nbd`]).

use std::mem::ManuallyDrop;

/// A 4 KiB-aligned buffer for O_DIRECT.
pub struct AlignedBuf {
    /// The first byte; valid for `len` bytes until drop.
    ptr: *mut u8,
    len: usize,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    /// A zeroed buffer of `bytes` bytes (at least 4 KiB are allocated).
    pub fn new(bytes: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(bytes.max(4096), 4096).expect("layout");
        // SAFETY: the layout has a non-zero size; the pointer is checked and freed in Drop.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for a {bytes}-byte buffer");
        AlignedBuf {
            ptr,
            len: bytes,
            layout,
        }
    }

    /// The first byte, for an I/O the kernel does into the buffer; the caller keeps the
    /// buffer alive until that I/O completed.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The buffer's bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `len` (<= the layout's size) zero-initialised bytes owned by
        // `self`, which the `&mut self` borrow keeps alive and unaliased for the slice's life.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// An io_uring whose reads and writes go only into buffers it owns: one [`AlignedBuf`] per
/// slot, at most one operation per slot in flight, the slot's index as the operation's
/// `user_data`. A buffer is freed only when no operation points into it: dropped with
/// operations in flight (a run that failed half-way), the ring leaks its buffers, since the
/// kernel could still write into them.
pub struct SlotRing {
    ring: io_uring::IoUring,
    bufs: Vec<AlignedBuf>,
    in_flight: Vec<bool>,
}

impl SlotRing {
    /// `slots` buffers of `bytes` bytes each, for operations on `ring`.
    pub fn new(ring: io_uring::IoUring, slots: usize, bytes: usize) -> SlotRing {
        SlotRing {
            ring,
            bufs: (0..slots).map(|_| AlignedBuf::new(bytes)).collect(),
            in_flight: vec![false; slots],
        }
    }

    /// Queues a read (`read`) or write of slot `slot`'s whole buffer at byte `offset` of `fd`.
    /// The slot must be free (its previous operation reaped).
    pub fn push(
        &mut self,
        slot: usize,
        fd: io_uring::types::Fd,
        offset: u64,
        read: bool,
    ) -> anyhow::Result<()> {
        assert!(
            !self.in_flight[slot],
            "slot {slot} already has an operation in flight"
        );
        let buf = &self.bufs[slot];
        let len = buf.len as u32;
        let e = if read {
            io_uring::opcode::Read::new(fd, buf.as_mut_ptr(), len)
                .offset(offset)
                .build()
        } else {
            io_uring::opcode::Write::new(fd, buf.as_mut_ptr(), len)
                .offset(offset)
                .build()
        };
        // SAFETY: the entry points into `bufs[slot]`, `len` bytes long, which this ring owns
        // and neither moves (the Vec is never resized) nor frees while `in_flight[slot]` is
        // set (Drop leaks the buffers then); the slot takes no second entry before its
        // completion is reaped.
        unsafe { self.ring.submission().push(&e.user_data(slot as u64)) }
            .map_err(|_| anyhow::anyhow!("io_uring submission queue full"))?;
        self.in_flight[slot] = true;
        Ok(())
    }

    /// Submits what was pushed and waits for at least `want` completions (`io_uring_enter`).
    pub fn submit_and_wait(&mut self, want: usize) -> std::io::Result<usize> {
        self.ring.submit_and_wait(want)
    }

    /// The completions ready, as (slot, result: bytes or -errno); their slots are free again.
    pub fn reap(&mut self) -> Vec<(usize, i32)> {
        let done: Vec<(usize, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for &(slot, _) in &done {
            self.in_flight[slot] = false;
        }
        done
    }
}

impl Drop for SlotRing {
    fn drop(&mut self) {
        if self.in_flight.iter().any(|&f| f) {
            std::mem::forget(std::mem::take(&mut self.bufs));
        }
    }
}

/// User data of a [`SockRing`]'s receive, send and receive-cancel.
pub const RECV_TAG: u64 = 1;
pub const SEND_TAG: u64 = 2;
pub const CANCEL_TAG: u64 = 3;

/// An io_uring over one socket that receives into, and sends from, the two buffers it owns:
/// at most one receive and one send in flight. The buffers are freed only when neither
/// operation is in flight; otherwise they are leaked (the kernel could still write into
/// them), which only a failed run whose socket would not even shut down can cause.
pub struct SockRing {
    ring: io_uring::IoUring,
    recv: ManuallyDrop<Vec<u8>>,
    sending: ManuallyDrop<Vec<u8>>,
    recv_live: bool,
    send_busy: bool,
}

impl SockRing {
    /// A ring of `entries` entries with a receive buffer of `recv_bytes` bytes.
    pub fn new(entries: u32, recv_bytes: usize) -> std::io::Result<SockRing> {
        Ok(SockRing {
            ring: io_uring::IoUring::new(entries)?,
            recv: ManuallyDrop::new(vec![0u8; recv_bytes]),
            sending: ManuallyDrop::new(Vec::new()),
            recv_live: false,
            send_busy: false,
        })
    }

    /// Whether a receive is in flight.
    pub fn recv_live(&self) -> bool {
        self.recv_live
    }

    /// Whether a send is in flight.
    pub fn send_busy(&self) -> bool {
        self.send_busy
    }

    /// The first `n` bytes of the receive buffer: what the completed receive put there.
    pub fn received(&self, n: usize) -> &[u8] {
        assert!(
            !self.recv_live,
            "the receive buffer is read while a receive is in flight"
        );
        &self.recv[..n]
    }

    /// Bytes of the send buffer.
    pub fn sending_len(&self) -> usize {
        self.sending.len()
    }

    /// Swaps `next` with the send buffer, which no send may be using.
    pub fn swap_sending(&mut self, next: &mut Vec<u8>) {
        assert!(
            !self.send_busy,
            "the send buffer is replaced while a send uses it"
        );
        std::mem::swap(next, &mut *self.sending);
    }

    fn push(&mut self, e: io_uring::squeue::Entry) -> anyhow::Result<()> {
        // SAFETY: every entry pushed here points into `recv` or `sending` (or nowhere: the
        // cancel), which outlive it: they are neither moved nor freed while `recv_live` /
        // `send_busy` says an operation uses them (Drop leaks them then), at most one receive
        // and one send are in flight (asserted by the posts), and `sending` is replaced only
        // when no send is in flight (`swap_sending`).
        unsafe { self.ring.submission().push(&e) }
            .map_err(|_| anyhow::anyhow!("io_uring submission queue full"))
    }

    /// Receives into the whole receive buffer from `fd`.
    pub fn post_recv(&mut self, fd: io_uring::types::Fd) -> anyhow::Result<()> {
        assert!(!self.recv_live, "a second receive while one is in flight");
        let e = io_uring::opcode::Recv::new(fd, self.recv.as_mut_ptr(), self.recv.len() as u32)
            .build()
            .user_data(RECV_TAG);
        self.push(e)?;
        self.recv_live = true;
        Ok(())
    }

    /// Sends `sending[from..]` on `fd`.
    pub fn post_send(&mut self, fd: io_uring::types::Fd, from: usize) -> anyhow::Result<()> {
        assert!(!self.send_busy, "a second send while one is in flight");
        let rest = &self.sending[from..];
        let e = io_uring::opcode::Send::new(fd, rest.as_ptr(), rest.len() as u32)
            .build()
            .user_data(SEND_TAG);
        self.push(e)?;
        self.send_busy = true;
        Ok(())
    }

    /// Asks the kernel to cancel the receive in flight (it completes with -ECANCELED, or with
    /// data that arrived first); the cancel's own completion carries [`CANCEL_TAG`].
    pub fn cancel_recv(&mut self) -> anyhow::Result<()> {
        self.push(
            io_uring::opcode::AsyncCancel::new(RECV_TAG)
                .build()
                .user_data(CANCEL_TAG),
        )
    }

    /// Submits what was pushed and waits for one completion, at most `timeout`.
    pub fn submit_and_wait(
        &mut self,
        timeout: &io_uring::types::Timespec,
    ) -> std::io::Result<usize> {
        let args = io_uring::types::SubmitArgs::new().timespec(timeout);
        self.ring.submitter().submit_with_args(1, &args)
    }

    /// The completions ready, as (tag, result); a completed receive or send frees its buffer
    /// for the next one.
    pub fn completions(&mut self) -> Vec<(u64, i32)> {
        let cqes: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for &(tag, _) in &cqes {
            match tag {
                RECV_TAG => self.recv_live = false,
                SEND_TAG => self.send_busy = false,
                _ => {}
            }
        }
        cqes
    }

    /// After the socket was shut down: reaps the receive and the send (both complete at once
    /// on a shut-down socket), waiting at most `stall` for each completion.
    pub fn reap_after_shutdown(&mut self, stall: std::time::Duration) {
        let timeout = io_uring::types::Timespec::from(stall);
        for _ in 0..4 {
            if !self.recv_live && !self.send_busy {
                return;
            }
            if self.submit_and_wait(&timeout).is_err() {
                continue;
            }
            self.completions();
        }
    }
}

impl Drop for SockRing {
    fn drop(&mut self) {
        if !self.recv_live && !self.send_busy {
            // SAFETY: no operation points into the buffers any more (see the type's doc), and
            // each is dropped once, here.
            unsafe {
                ManuallyDrop::drop(&mut self.recv);
                ManuallyDrop::drop(&mut self.sending);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AlignedBuf;

    #[test]
    fn the_buffer_is_zeroed_aligned_and_as_long_as_asked() {
        let mut b = AlignedBuf::new(6000);
        assert_eq!(b.as_mut_ptr() as usize % 4096, 0);
        let s = b.as_mut_slice();
        assert_eq!(s.len(), 6000);
        assert!(s.iter().all(|&x| x == 0));
        s[5999] = 7;
        assert_eq!(b.as_mut_slice()[5999], 7);
    }
}
