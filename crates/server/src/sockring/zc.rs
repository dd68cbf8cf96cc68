//! Zero-copy sends on the socket ring (`[dataplane] send_zc`): a connection's large replies
//! go out with `IORING_OP_SENDMSG_ZC`, and their pages stay lent until the kernel says it no
//! longer reads them.
//!
//! # What it implements
//! A SENDMSG copies the iovecs' bytes into socket buffers before it completes; a
//! SENDMSG_ZC pins the pages instead and the NIC reads them later. It completes twice: the
//! result (bytes taken, with `IORING_CQE_F_MORE`), then a notification
//! (`IORING_CQE_F_NOTIF`) once every packet that referenced the pages is freed — for TCP,
//! once the peer acknowledged them. Between the two the bytes have left the output queue
//! (the next send may go) but their buffers must not be reused or freed.
//!
//! # Design
//! *Which sends.* [`SockRing::arm_send`](super::SockRing::arm_send) gathers as before; when
//! the message's lent bytes (payload parts, [`sys::SendMsg::lent_bytes`]) reach the ring's
//! threshold ([`SendZc::min_bytes`]) it goes out as SENDMSG_ZC, tagged with a number unique in
//! the ring ([`sys::SendMsg::tag`]). Smaller ones stay SENDMSG: pinning pages and a second
//! completion cost more than copying a few KiB.
//!
//! *Loans, in order.* A connection's [`ZcLoans`] is a FIFO of the zero-copy sends whose
//! notification is awaited, each with the frames that left the output queue since it was
//! taken. At a first completion that says a notification follows, a loan is opened with the
//! send's tag; from then on every frame that leaves the queue — sent whole by this send or a
//! later one, zero-copy or not, or dropped because the peer left — joins the newest loan
//! instead of the buffer pool. A notification marks its loan, and loans leave from the front
//! only while marked: a frame the first send sent in part and the second finished is in the
//! second's loan, freed only once both are notified, whatever order notifications come in.
//! With no loan open, frames go to the pool as on the copying path.
//!
//! *Ending.* A connection taken off the ring first waits for its first completions as
//! before (`Worker::ring_detach`); a connection that stays open (turning to TLS) also waits
//! for its notifications. What is still lent after that — every open loan and the whole
//! output queue, which may hold a frame sent in part — goes to the ring's
//! [`Orphans`], freed when the last of its notifications comes (a peer that stopped
//! acknowledging holds it until its socket's packets are freed); a ring dropped with orphans
//! waits for them like for anything in the kernel, and leaks what never comes back.
//!
//! *Refusals.* The opcode is probed when the switch is on (Linux 6.1); a first zero-copy send
//! that fails with `EINVAL` or `EOPNOTSUPP` (a kernel without usage reports, a socket without
//! zero-copy) turns zero-copy off for the ring and the output goes again by SENDMSG.
//!
//! *Counting.* Each notification reports whether the kernel copied after all
//! ([`sys::NOTIF_USAGE_ZC_COPIED`], asked for with `IORING_SEND_ZC_REPORT_USAGE`):
//! `ullstack_worker_zerocopy_sends_total` and `ullstack_worker_zerocopy_copied_total`; the
//! orphans a worker holds, `ullstack_worker_zerocopy_orphans`. Over loopback every one is
//! copied: the receiving socket gets copies of the pages (`skb_orphan_frags_rx`), so
//! zero-copy there only adds the pinning and the notification.
//!
//! Worked example: an NBD client reads 128 KiB at iodepth 8. A step queues 3 replies: one
//! SENDMSG_ZC of 6 parts (3 headers copied into the message, 3 × 128 KiB payloads lent). Its
//! first completion says 393 264 bytes; the three frames leave the queue into loan 7; the
//! connection's next replies may go at once. The notification for tag 7 arrives later (once
//! the peer acknowledged the bytes), and the three buffers go back to the pool.
//!
//! # Measured: off by default
//! Over loopback the kernel copies every zero-copy send for the receiver, so `large` pays the
//! copy and also the pinning, the page-sized fragments and the notification; the win it
//! exists for (a NIC reading the pages) cannot show there. In `native_saturation`
//! (`ULLSTACK_READ_BYTES=N ULLSTACK_SEND_ZC=off|large`) it served fewer I/Os per second at
//! every size and, in most runs, fewer per server-CPU-second (docs/server.md, *Measuring it
//! here*, has the figures). The switch stays `off`; `large`'s threshold is the usual
//! crossover for a NIC, not one measured here.
//!
//! # What it leaves out
//! Registered buffers: `SEND_ZC` with a fixed buffer index sends one buffer, while a reply is
//! a header and a payload (a fixed-buffer SENDMSG_ZC needs vectored registered sends, Linux
//! 6.15 and later); the file backend's registered read buffers live in its own ring. Frames of
//! a connection that left before its notifications (the ring's [`Orphans`]) are no longer
//! charged to it or its tenant: at most what the kernel had not acknowledged when it closed.

use std::collections::VecDeque;

use crate::buf::BufPool;
use crate::conn::{ConnCore, OutFrame};
use crate::sys;

/// Lent bytes of a message from which `send_zc = "large"` sends it zero-copy: below it,
/// copying into the socket costs less than pinning the pages and reaping a second completion
/// (the crossover published for TCP zero-copy to a NIC sits around 10-16 KiB; one 16 KiB
/// reply is 4 pages). Over loopback there is none (*Measured* above).
pub const SEND_ZC_LARGE_BYTES: usize = 16 * 1024;

/// The socket ring's zero-copy setting: on from `min_bytes` lent bytes per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendZc {
    pub min_bytes: usize,
}

/// What a zero-copy send's notification said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notif {
    /// The send's tag ([`sys::SendMsg::tag`]).
    pub tag: u64,
    /// The kernel copied the data after all.
    pub copied: bool,
}

impl Notif {
    /// The notification a completion with `result` carries for `tag`.
    pub fn from_result(tag: u64, result: i32) -> Notif {
        Notif {
            tag,
            copied: result & sys::NOTIF_USAGE_ZC_COPIED != 0,
        }
    }
}

/// One zero-copy send awaiting its notification, and the frames that left the output queue
/// since it was taken.
struct Loan {
    tag: u64,
    notified: bool,
    frames: Vec<OutFrame>,
    /// The frames' wire bytes, charged to the connection (`ConnCore::zc_lent_bytes`) until
    /// the loan is freed.
    bytes: u64,
}

impl Loan {
    /// Adds `frame` to the loan and its bytes to the connection's charge (`lent`).
    fn take(&mut self, frame: OutFrame, lent: &mut u64) {
        let bytes = frame.wire_bytes() as u64;
        self.bytes += bytes;
        *lent += bytes;
        self.frames.push(frame);
    }
}

/// A connection's zero-copy sends whose pages the kernel may still read (see the module
/// essay, *Loans, in order*).
#[derive(Default)]
pub struct ZcLoans {
    loans: VecDeque<Loan>,
    /// The tag of the zero-copy send in the kernel before its first completion.
    armed: Option<u64>,
}

impl ZcLoans {
    pub fn new() -> ZcLoans {
        ZcLoans::default()
    }

    /// A zero-copy send tagged `tag` went into the kernel.
    pub fn armed(&mut self, tag: u64) {
        debug_assert!(self.armed.is_none(), "two sends on one connection");
        self.armed = Some(tag);
    }

    /// Whether the send in the kernel is zero-copy.
    pub fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// Notifications awaited.
    pub fn outstanding(&self) -> usize {
        self.loans.iter().filter(|l| !l.notified).count()
    }

    /// A send's first completion: `written` bytes of `core`'s output were taken, and
    /// `notif_follows` (`F_MORE`) when it was zero-copy and the kernel will notify. Frames sent
    /// whole go to the newest loan, or to `pool` when none is open.
    pub fn sent(
        &mut self,
        core: &mut ConnCore,
        written: usize,
        notif_follows: bool,
        pool: &mut BufPool,
    ) {
        if let (Some(tag), true) = (self.armed.take(), notif_follows) {
            self.loans.push_back(Loan {
                tag,
                notified: false,
                frames: Vec::new(),
                bytes: 0,
            });
        }
        match self.loans.back_mut() {
            None => core.advance_out(written, pool),
            Some(newest) => {
                let mut lent = 0;
                core.advance_out_with(written, |f| newest.take(f, &mut lent));
                core.zc_lent_bytes += lent;
            }
        }
    }

    /// Drops `core`'s queued output (the peer is gone): to the newest loan while one is open.
    pub fn discard(&mut self, core: &mut ConnCore, pool: &mut BufPool) {
        match self.loans.back_mut() {
            None => core.discard_output(pool),
            Some(newest) => {
                let mut lent = 0;
                core.discard_output_with(|f| newest.take(f, &mut lent));
                core.zc_lent_bytes += lent;
            }
        }
    }

    /// The notification of send `tag`: loans notified from the front on give their frames to
    /// `pool`, and their bytes leave `core`'s charge. False when `tag` is none of this
    /// connection's loans.
    pub fn notified(&mut self, tag: u64, core: &mut ConnCore, pool: &mut BufPool) -> bool {
        let Some(loan) = self.loans.iter_mut().find(|l| l.tag == tag && !l.notified) else {
            return false;
        };
        loan.notified = true;
        while self.loans.front().is_some_and(|l| l.notified) {
            if let Some(done) = self.loans.pop_front() {
                core.zc_lent_bytes -= done.bytes;
                for frame in done.frames {
                    if let Some(p) = frame.payload {
                        pool.give_reply_data(p);
                    }
                }
            }
        }
        true
    }

    /// Everything the kernel may still read, for [`Orphans::adopt`]: the tags awaited and the
    /// frames of every open loan and of `core`'s whole output queue (its front frame may be
    /// partly sent). None when no notification is awaited.
    pub fn surrender(&mut self, core: &mut ConnCore) -> Option<Orphan> {
        if self.loans.is_empty() {
            return None;
        }
        let mut orphan = Orphan {
            waiting: Vec::new(),
            frames: Vec::new(),
        };
        for loan in self.loans.drain(..) {
            if !loan.notified {
                orphan.waiting.push(loan.tag);
            }
            orphan.frames.extend(loan.frames);
        }
        core.discard_output_with(|f| orphan.frames.push(f));
        // The connection is leaving: what it lent is the ring's now (`Orphans`), not charged.
        core.zc_lent_bytes = 0;
        Some(orphan)
    }
}

impl Drop for ZcLoans {
    /// A connection dropped with notifications awaited (not surrendered): its lent frames are
    /// leaked, never freed under the kernel.
    fn drop(&mut self) {
        if self.outstanding() > 0 {
            std::mem::forget(std::mem::take(&mut self.loans));
        }
    }
}

/// Frames of a connection that left the ring before its notifications came.
pub struct Orphan {
    waiting: Vec<u64>,
    frames: Vec<OutFrame>,
}

/// A ring's [`Orphan`]s, each freed when its last notification comes.
#[derive(Default)]
pub struct Orphans {
    list: Vec<Orphan>,
}

impl Orphans {
    pub fn adopt(&mut self, orphan: Orphan) {
        self.list.push(orphan);
    }

    /// Orphans not yet freed.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The notification of send `tag`: frees the orphan it was the last one of.
    pub fn notified(&mut self, tag: u64) {
        let Some(k) = self.list.iter().position(|o| o.waiting.contains(&tag)) else {
            return;
        };
        self.list[k].waiting.retain(|&t| t != tag);
        if self.list[k].waiting.is_empty() {
            self.list.swap_remove(k);
        }
    }

    /// Leaks every orphan (the kernel did not give their sends back).
    pub fn forget(&mut self) {
        std::mem::forget(std::mem::take(&mut self.list));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::{IoBuf, ReplyData};
    use crate::conn::{ConnRef, Head};
    use std::net::{TcpListener, TcpStream};

    /// A connection core on a loopback socket (the core needs one; nothing is sent on it).
    fn core() -> (ConnCore, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("conn");
        let (server, _) = listener.accept().expect("accept");
        let me = ConnRef {
            index: 1,
            generation: 1,
        };
        (ConnCore::new(server, None, me, 0, 0), client)
    }

    /// Queues a 16-byte header and a `len`-byte payload from `pool`; returns the payload's
    /// address.
    fn queue_reply(core: &mut ConnCore, pool: &mut BufPool, len: usize) -> usize {
        let mut buf: IoBuf = pool.take(len);
        let addr = buf.as_mut_ptr() as usize;
        core.push(OutFrame {
            head: Head::inline(&[0u8; 16]),
            payload: Some(ReplyData::Buf(buf)),
        });
        addr
    }

    /// The lending rule: a payload a zero-copy send took is not handed out again before its
    /// notification — not after the first completion, not while an earlier send's
    /// notification is awaited (a frame sent in part by one send and finished by the next) —
    /// and is once the notifications are all in.
    #[test]
    fn a_lent_payload_is_not_reused_before_its_notification() {
        const LEN: usize = 64 * 1024;
        let (mut core, _client) = core();
        let mut pool = BufPool::new();
        let mut loans = ZcLoans::new();
        let first = queue_reply(&mut core, &mut pool, LEN);
        let second = queue_reply(&mut core, &mut pool, LEN);
        assert_ne!(first, second);
        // Send 1 takes the first frame and half the second.
        loans.armed(1);
        loans.sent(&mut core, 16 + LEN + 16 + LEN / 2, true, &mut pool);
        assert_eq!(core.out.len(), 1, "the second frame is sent in part");
        assert_eq!(loans.outstanding(), 1);
        let fresh = pool.take(LEN);
        assert_ne!(
            fresh.as_slice().as_ptr() as usize,
            first,
            "reused before its notif"
        );
        // Send 2 (zero-copy) finishes the second frame.
        loans.armed(2);
        loans.sent(&mut core, LEN / 2, true, &mut pool);
        assert!(core.out.is_empty());
        assert_eq!(loans.outstanding(), 2);
        // Lent frames stay charged to the connection until their notifications.
        assert_eq!(
            core.held_bytes(),
            2 * (16 + LEN) as u64,
            "lent bytes charged"
        );
        // Send 2's notification first: send 1 still reads the second frame's first half, and
        // the first frame; nothing is freed.
        assert!(loans.notified(2, &mut core, &mut pool));
        let again = pool.take(LEN);
        let reused = [first, second];
        assert!(
            !reused.contains(&(again.as_slice().as_ptr() as usize)),
            "reused while send 1's notification is awaited"
        );
        // Send 1's: both loans go, and both payloads are the pool's again.
        assert!(loans.notified(1, &mut core, &mut pool));
        assert_eq!(loans.outstanding(), 0);
        assert_eq!(
            core.held_bytes(),
            0,
            "nothing charged once both are notified"
        );
        assert!(
            !loans.notified(1, &mut core, &mut pool),
            "one notification per send"
        );
        let mut back: Vec<usize> = (0..2)
            .map(|_| pool.take(LEN).as_slice().as_ptr() as usize)
            .collect();
        back.sort_unstable();
        let mut want = vec![first, second];
        want.sort_unstable();
        assert_eq!(
            back, want,
            "both payloads are reusable after the notifications"
        );
        drop((fresh, again));
    }

    /// A copying send completed while a loan is open puts its frames in that loan; a zero-copy
    /// send whose first completion says no notification follows opens none.
    #[test]
    fn copying_sends_behind_a_loan_join_it() {
        const LEN: usize = 32 * 1024;
        let (mut core, _client) = core();
        let mut pool = BufPool::new();
        let mut loans = ZcLoans::new();
        let a = queue_reply(&mut core, &mut pool, LEN);
        let b = queue_reply(&mut core, &mut pool, LEN);
        loans.armed(5);
        loans.sent(&mut core, 16 + LEN, true, &mut pool);
        // A copying send of the second frame.
        loans.sent(&mut core, 16 + LEN, false, &mut pool);
        let taken = pool.take(LEN);
        let at = taken.as_slice().as_ptr() as usize;
        assert!(at != a && at != b, "a frame left its loan early");
        assert!(loans.notified(5, &mut core, &mut pool));
        let back: Vec<IoBuf> = (0..2).map(|_| pool.take(LEN)).collect();
        let mut got: Vec<usize> = back
            .iter()
            .map(|b| b.as_slice().as_ptr() as usize)
            .collect();
        got.sort_unstable();
        let mut want = vec![a, b];
        want.sort_unstable();
        assert_eq!(got, want, "both frames go back with the loan");
        back.into_iter().for_each(|b| pool.give(b));
        // A zero-copy send without a notification (it failed before pinning): no loan, the
        // frame goes straight back.
        let c = queue_reply(&mut core, &mut pool, LEN);
        loans.armed(6);
        loans.sent(&mut core, 16 + LEN, false, &mut pool);
        assert_eq!(loans.outstanding(), 0);
        assert_eq!(pool.take(LEN).as_slice().as_ptr() as usize, c);
        drop(taken);
    }

    /// A surrendered connection's frames (open loans and its queue) wait in the orphans for
    /// every notification they were lent to.
    #[test]
    fn orphans_are_freed_after_their_last_notification() {
        const LEN: usize = 32 * 1024;
        let (mut core, _client) = core();
        let mut pool = BufPool::new();
        let mut loans = ZcLoans::new();
        queue_reply(&mut core, &mut pool, LEN);
        queue_reply(&mut core, &mut pool, LEN);
        loans.armed(8);
        loans.sent(&mut core, 16 + LEN + 10, true, &mut pool);
        loans.armed(9);
        loans.sent(&mut core, 10, true, &mut pool);
        let orphan = loans.surrender(&mut core).expect("loans open");
        assert!(core.out.is_empty() && loans.outstanding() == 0);
        let mut orphans = Orphans::default();
        orphans.adopt(orphan);
        orphans.notified(9);
        assert_eq!(orphans.len(), 1, "still waits for send 8");
        orphans.notified(8);
        assert!(orphans.is_empty());
    }
}
