//! The worker's socket ring: client sockets read and written as io_uring operations
//! (`[dataplane] socket_io = "uring"`).
//!
//! # What it implements
//! One io_uring per worker, created on the worker's thread. Per connection, at most one RECV
//! — multishot into the worker's provided buffers (`socket_recv = "multishot"`), or single-shot
//! into the spare room of its input buffer ([`crate::inbuf::InBuf::begin_recv`],
//! `socket_recv = "single"`) — and at most one SENDMSG (gathering its queued replies,
//! [`crate::conn::ConnCore::gather_out`]) are in the kernel at a time; a re-armed POLL on the
//! worker's epoll descriptor reports what epoll still watches (the wake-up eventfd, TLS
//! connections, the rings of file volumes that keep their own). The worker's file volumes put
//! their reads, writes, syncs and `fallocate`s in this ring too (`file_io = "socket-ring"`,
//! *Guests* below). Everything a step queued goes to the kernel with the step's wait, in one
//! `io_uring_enter` ([`SockRing::enter`]); completions come back as [`Done`]s naming the
//! connection by [`ConnRef`], or, for a file volume, set aside for it.
//!
//! # Design
//! *Buffers stay put until their completion.* The ring is a [`sys::Ring`]: what a submission
//! owns goes into the ring with it and comes back with its completion. A SENDMSG owns its
//! [`sys::SendMsg`] (its `msghdr`, iovecs and a copy of every part of 40 bytes or less: reply
//! headers live inline in the queue, which may move when it grows), taken from this ring's
//! spares and returned to them; its larger parts are payload buffers and heap headers the
//! connection's output queue lends, marked lent (`ConnCore::out_lent`), which forbids
//! dropping or advancing them until the completion. A RECV writes into the spare room of an
//! input buffer the connection lends ([`sys::SpareLoan`]: `InBuf` neither moves, grows nor
//! resets it until `end_recv`). A connection that closes (or turns to TLS) first has its
//! operations cancelled and their completions waited for (the worker's `ring_detach`).
//!
//! *Multishot receives.* A multishot RECV stays armed across completions: each time data
//! arrives the kernel picks a buffer from the worker's provided-buffer ring
//! ([`sys::Ring::provide_buffers`]: [`RECV_BUFS`] buffers of [`RECV_BUF_BYTES`]), receives into
//! it and posts a completion naming it ([`Done::buf`], with [`Done::more`] while it stays
//! armed). The worker holds the buffer with the connection ([`RingConn::held`]) until the
//! step's decode, which parses the frames that lie whole in it where they are and copies into
//! the connection's input only what straddles the buffer's end or what the step's budget
//! leaves ([`crate::inplace`]); it gives the buffer back then, in the step that reaped it
//! (those of connections the budget did not reach are copied and given back after the
//! decodes), so every buffer is the kernel's again before the next enter. A multishot that ends — out of buffers (`-ENOBUFS`), cancelled, end of stream — is
//! armed again by the interest update that follows, if the connection still wants input.
//! Completions are handled in the order they were posted (a connection's bytes arrive in
//! that order).
//!
//! *Flow control as epoll's.* A RECV is armed only while the connection would have EPOLLIN in
//! its interest (room in its read-ahead, under its in-flight limits and its tenant's memory
//! budget), so it reads no more than the epoll path would; a single-shot one armed before the
//! connection hit a limit completes into room it was given then, and a multishot one is
//! cancelled when the connection stops wanting input (bytes it took before the cancel landed
//! join the input: at most what one enter receives).
//!
//! *Guests.* A backend with io_uring work of its own (a file volume) can push into this ring
//! through [`SockRing::host`], a [`HostRing`] that tags the user data with the volume's index
//! (bits 48-61; the volume's own user data stays below 2^48, or has bit 62 for a write run).
//! The ring owns [`IoBuf`]s for that (a socket operation owns none: its memory is lent or
//! provided). [`SockRing::reap`] tells a guest's completion by its opcode — READ, READ_FIXED,
//! WRITE, WRITEV, FSYNC, FALLOCATE are never a socket's — and keeps it, untagged, for
//! [`SockRing::take_guest_done`], which the worker's reap hands to the volume; one that comes
//! during a connection's detach waits there too. A guest's completion ends a wait as a
//! socket's does. A volume's registered buffers are registered on this ring (one volume's:
//! a ring has one registration). Worked example: volume 1's read in its slot 7 goes in with
//! user data `1 << 48 | 7`; its completion comes back as `(1, Cqe { user_data: 7, .. })`.
//!
//! *Ring set-up.* Single issuer with deferred task work where the kernel allows it
//! (completions are posted when the worker enters the ring, never by interrupting it; a
//! multishot receive runs then too, taking what arrived during a coalescing pause in one go),
//! plain otherwise; the opcodes used are probed; anything refused is an error and the worker
//! uses epoll ([`SockRing::new`]). A kernel that refuses provided-buffer rings (before 5.19)
//! or multishot RECV (before 6.0: the first one fails with `EINVAL`) leaves the worker on
//! single-shot receives.
//!
//! *A polled submission queue* (`ring_sqpoll_idle_ms` > 0, [`SockRing::with_sqpoll`]): the
//! ring is set up with `IORING_SETUP_SQPOLL`, a kernel thread of the process (`iou-sqp-PID`,
//! one per worker) that takes the entries as the worker writes the queue's tail and sleeps
//! after `sq_thread_idle` ms without any; the worker enters the kernel only to wait, or to
//! wake the thread (`IORING_SQ_NEED_WAKEUP`, which the io-uring crate checks). Deferred task
//! work needs the submitting task to run it, and the polling thread submits, so such a ring
//! is set up without it: the thread runs the sockets' task work and posts their
//! completions. The thread is the server's CPU, counted as such by the examples (their
//! server threads are `ullstack-*` and `iou-*`). Where the kernel refuses it, the ring is set
//! up as without it, saying so.
//!
//! Worked example: fio iodepth 32 on one NBD connection. A step's one `io_uring_enter` submits
//! the SENDMSG of the last step's 32 replies (64 iovecs, 32 × 16 B headers copied into
//! `SendBufs`) and waits; the RECV armed last step completes with the next 32 requests (896 B);
//! the step decodes them, the memory backend answers inline, the RECV is re-armed and the
//! next SENDMSG queued: one syscall per step where epoll took `epoll_wait`, `read` and `writev`.
//!
//! # What it leaves out
//! A frame that spans provided buffers is assembled in the input buffer (a 4 KiB write in
//! 4 KiB buffers always is: its payload is copied once more than on the single-shot path),
//! incremental buffer consumption and bundles. A guest's operations are not ordered against
//! the sockets' (no links): the worker replies once their completions are reaped, as with a
//! ring of their own. Large replies may go zero-copy (`[dataplane] send_zc`, off by default):
//! see [`zc`].

use std::io::{self, IoSlice};
use std::os::fd::RawFd;

use io_uring::{opcode, IoUring};

use crate::backend::HostRing;
use crate::buf::IoBuf;
use crate::clock::now_ns;
use crate::config::{RingSpin, RingWait, SocketRecv};
use crate::conn::{ConnCore, ConnRef, WRITEV_LARGE_IOVECS, WRITEV_MAX_IOVECS};
use crate::inbuf::InBuf;
use crate::ringwait::{self, BatchWait, SpinSizer};
use crate::sys::{self, Provided, Sqe};

pub mod zc;

pub use zc::{Notif, SendZc, ZcLoans};

/// Submission queue entries (completions: twice that).
const RING_ENTRIES: u32 = 512;
/// Provided buffers of a worker's multishot receives, all back before the next enter. Their
/// total (128 KiB, one read-ahead window) is also the most a connection can receive past its
/// limits: one enter runs a multishot receive until the socket is empty or the buffers are
/// out, and its cancel takes effect at the next. With 128 × 16 KiB a client flooding
/// requests it never reads the answers to held 2.6 MB where the limit is 1 MiB
/// (`tests/bounded.rs`).
const RECV_BUFS: u16 = 32;
/// Bytes of one provided buffer: a batch of 64 own-protocol READ headers or ~146 NBD ones,
/// or a page of a write's payload.
const RECV_BUF_BYTES: u32 = 4096;
/// Where a guest backend's volume index sits in the user data of its operations: above the
/// 48 bits the guest uses for its own, below its bit 62 ([`HostRing::push`]).
const GUEST_VOLUME_SHIFT: u32 = 48;
/// Volumes a socket ring can host: 14 bits (48..=61).
pub const MAX_GUEST_VOLUMES: usize = 1 << 14;
const GUEST_VOLUME_MASK: u64 = ((MAX_GUEST_VOLUMES as u64) - 1) << GUEST_VOLUME_SHIFT;

/// Whether `sqe` is a guest backend's (a file volume's reads, writes, syncs and range
/// operations: opcodes the socket path never uses).
fn is_guest_op<B>(sqe: &Sqe<B>) -> bool {
    matches!(
        sqe,
        Sqe::Read { .. }
            | Sqe::ReadFixed { .. }
            | Sqe::Write { .. }
            | Sqe::Writev { .. }
            | Sqe::Fdatasync { .. }
            | Sqe::Fallocate { .. }
    )
}

/// What a completion was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Recv,
    Send,
    /// The POLL on the epoll descriptor.
    Poll,
    Cancel,
}

impl OpKind {
    fn bits(self) -> u64 {
        match self {
            OpKind::Recv => 0,
            OpKind::Send => 1,
            OpKind::Poll => 2,
            OpKind::Cancel => 3,
        }
    }
}

fn user_data(kind: OpKind, conn: ConnRef) -> u64 {
    (u64::from(conn.generation) << 32) | (u64::from(conn.index) << 2) | kind.bits()
}

/// One completion.
#[derive(Debug)]
pub struct Done {
    pub kind: OpKind,
    pub conn: ConnRef,
    /// Bytes moved, or a negated errno.
    pub result: i32,
    /// A multishot receive's bytes, in a provided buffer: read them with
    /// [`SockRing::provided`], then give the buffer back with [`SockRing::recycle`].
    pub buf: Option<Provided>,
    /// The operation stays armed and completes again (a multishot receive), or a zero-copy
    /// send's notification follows ([`zc`]).
    pub more: bool,
    /// A zero-copy send's notification (its first completion came before).
    pub notif: Option<Notif>,
}

impl Done {
    fn from_cqe(d: u64, result: i32, buf: Option<Provided>, more: bool) -> Done {
        let kind = match d & 3 {
            0 => OpKind::Recv,
            1 => OpKind::Send,
            2 => OpKind::Poll,
            _ => OpKind::Cancel,
        };
        Done {
            kind,
            conn: ConnRef {
                index: ((d & 0xffff_ffff) >> 2) as u32,
                generation: (d >> 32) as u32,
            },
            result,
            buf,
            more,
            notif: None,
        }
    }
}

/// A connection's state on the ring.
pub struct RingConn {
    /// A RECV is in the kernel.
    pub recv: bool,
    /// A SENDMSG is in the kernel.
    pub send: bool,
    /// Listed for a RECV before the next wait (the worker's list).
    pub recv_wanted: bool,
    /// The RECV in the kernel is multishot and a cancel of it was queued (the connection
    /// stopped wanting input): none is queued again until it ends.
    pub recv_cancelled: bool,
    /// Provided buffers a multishot receive filled, in arrival order, waiting for this step's
    /// decode to read them in place ([`crate::inplace`]); recycled by the end of the step.
    pub held: Vec<Provided>,
    /// The batch wait's epoch of its last receive with bytes ([`crate::ringwait::NO_EPOCH`]
    /// before one).
    pub recv_epoch: u64,
    /// Zero-copy sends whose pages the kernel may still read ([`zc`]).
    pub zc: ZcLoans,
}

impl Default for RingConn {
    fn default() -> Self {
        Self::new()
    }
}

impl RingConn {
    pub fn new() -> RingConn {
        RingConn {
            recv: false,
            send: false,
            recv_wanted: false,
            recv_cancelled: false,
            held: Vec::new(),
            recv_epoch: crate::ringwait::NO_EPOCH,
            zc: ZcLoans::new(),
        }
    }

    /// Whether an operation of this connection is in the kernel.
    pub fn busy(&self) -> bool {
        self.recv || self.send
    }
}

/// Points `msg` at up to [`WRITEV_LARGE_IOVECS`] parts of `core`'s queued output (more than
/// [`WRITEV_MAX_IOVECS`] parts are queued: a large reply of page views), as many as its
/// small-part copies allow ([`sys::SendMsg::set_parts`]).
#[cold]
fn set_large_parts(msg: &mut sys::SendMsg, core: &ConnCore) {
    let mut parts: [IoSlice<'_>; WRITEV_LARGE_IOVECS] = [IoSlice::new(&[]); WRITEV_LARGE_IOVECS];
    let count = core.gather_out(&mut parts);
    msg.set_parts(&parts[..count]);
}

/// The socket ring of one worker.
pub struct SockRing {
    /// Carries [`IoBuf`]s: the socket operations own none, a guest file volume's reads and
    /// writes own their request's buffer.
    ring: sys::Ring<IoBuf>,
    /// Entries pushed since the last enter.
    queued: usize,
    /// Message headers of SENDMSGs that completed, for the next ones.
    spare_msgs: Vec<sys::SendMsg>,
    /// Completions reaped, before they become [`Done`]s.
    cqes: Vec<sys::Cqe<IoBuf>>,
    /// Completions of guest backends' operations, for [`SockRing::take_guest_done`].
    guest_done: Vec<sys::Cqe<IoBuf>>,
    /// Guest backends' operations pushed since the ring was made.
    guest_pushed: u64,
    /// How the ring was set up, for the start-up log.
    pub mode: &'static str,
    /// How it receives: multishot when asked for and the kernel took the provided buffers.
    pub recv: SocketRecv,
    /// SENDMSGs queued since the last enter (they complete within it).
    sends_queued: usize,
    /// RECVs in the kernel (armed, not yet ended).
    recvs_armed: usize,
    /// `ring_wait = "batch"`: the completion count of blocking waits.
    pub batch: Option<BatchWait>,
    /// `ring_spin = "sized"`: the spin before a blocking wait.
    pub spin: Option<SpinSizer>,
    /// `ring_wait = "min-wait"` on a kernel that takes it: the batch's bound is the kernel's
    /// minimum wait, and the same enter goes on for one completion past it.
    pub min_wait: bool,
    /// `send_zc`: from how many lent bytes a send goes zero-copy (None: never).
    send_zc: Option<SendZc>,
    /// The tag of the last zero-copy send ([`sys::SendMsg::tag`]).
    zc_tag: u64,
    /// Frames of connections that left the ring before their notifications came (freed at
    /// their last notification, or by this ring's drop once the kernel gave the sends back).
    orphans: zc::Orphans,
}

impl SockRing {
    /// A ring with the opcodes the socket path uses, receiving as `recv` asks (single-shot
    /// where the kernel refuses provided-buffer rings); an error when io_uring or one of the
    /// opcodes is refused. Call on the thread that will use it (single issuer).
    pub fn new(recv: SocketRecv) -> io::Result<SockRing> {
        Self::with_sqpoll(recv, 0)
    }

    /// As [`SockRing::new`], with a kernel thread polling the submission queue when
    /// `sqpoll_idle_ms` > 0 (`IORING_SETUP_SQPOLL`, asleep after that many idle ms); where
    /// the kernel refuses one, the ring is set up as `new` sets it up, saying so.
    pub fn with_sqpoll(recv: SocketRecv, sqpoll_idle_ms: u32) -> io::Result<SockRing> {
        let polled = if sqpoll_idle_ms > 0 {
            // Deferred task work needs the submitting task to run it, which a polling thread
            // is not: the kernel refuses the two together.
            let mut sqpoll = IoUring::builder();
            sqpoll
                .setup_cqsize(RING_ENTRIES * 2)
                .setup_sqpoll(sqpoll_idle_ms);
            match sys::Ring::build(&sqpoll, RING_ENTRIES) {
                Ok(r) => Some((r, "submission queue polled by a kernel thread")),
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "dataplane.ring_sqpoll_idle_ms: IORING_SETUP_SQPOLL refused, the worker submits"
                    );
                    None
                }
            }
        } else {
            None
        };
        let (ring, mode) = match polled {
            Some(r) => r,
            None => Self::build_unpolled()?,
        };
        let mut ring = ring;
        let probe = ring.probe()?;
        for (code, name) in [
            (opcode::Recv::CODE, "RECV"),
            (opcode::SendMsg::CODE, "SENDMSG"),
            (opcode::PollAdd::CODE, "POLL_ADD"),
            (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
        ] {
            if !probe.is_supported(code) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("io_uring opcode {name} not supported"),
                ));
            }
        }
        // Multishot RECV came with Linux 6.0, provided-buffer rings with 5.19: a kernel that
        // takes the ring but not the multishot flag fails the first RECV with EINVAL, and the
        // worker turns to single-shot then (`fall_back_to_single`).
        let recv = match recv {
            SocketRecv::Multishot => match ring.provide_buffers(RECV_BUFS, RECV_BUF_BYTES) {
                Ok(()) => SocketRecv::Multishot,
                Err(e) => {
                    tracing::warn!(error = %e, "provided-buffer ring refused: single-shot RECV");
                    SocketRecv::Single
                }
            },
            SocketRecv::Single => SocketRecv::Single,
        };
        Ok(SockRing {
            ring,
            queued: 0,
            spare_msgs: Vec::new(),
            cqes: Vec::new(),
            guest_done: Vec::new(),
            guest_pushed: 0,
            mode,
            recv,
            sends_queued: 0,
            recvs_armed: 0,
            batch: None,
            spin: None,
            min_wait: false,
            send_zc: None,
            zc_tag: 0,
            orphans: zc::Orphans::default(),
        })
    }

    /// The ring without a polling thread: single issuer with deferred task work where the
    /// kernel allows it, plain otherwise.
    fn build_unpolled() -> io::Result<(sys::Ring<IoBuf>, &'static str)> {
        let mut tuned = IoUring::builder();
        tuned
            .setup_cqsize(RING_ENTRIES * 2)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag();
        match sys::Ring::build(&tuned, RING_ENTRIES) {
            Ok(r) => Ok((r, "single issuer, deferred task work")),
            Err(_) => {
                let mut plain = IoUring::builder();
                plain.setup_cqsize(RING_ENTRIES * 2);
                Ok((sys::Ring::build(&plain, RING_ENTRIES)?, "plain"))
            }
        }
    }

    /// Whether a kernel thread polls the submission queue (`with_sqpoll` and the kernel
    /// took it).
    pub fn is_sqpoll(&self) -> bool {
        self.ring.is_sqpoll()
    }

    /// Sends messages of `zc.min_bytes` lent bytes or more zero-copy; an error (and copying
    /// sends) where the kernel lacks `SENDMSG_ZC` (before Linux 6.1).
    pub fn enable_send_zc(&mut self, zc: SendZc) -> io::Result<()> {
        if !self.ring.probe()?.is_supported(opcode::SendMsgZc::CODE) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring opcode SENDMSG_ZC not supported",
            ));
        }
        self.send_zc = Some(zc);
        Ok(())
    }

    /// Sends copying from now on (the kernel refused a zero-copy send).
    pub fn disable_send_zc(&mut self) {
        self.send_zc = None;
    }

    /// The zero-copy setting in force.
    pub fn send_zc(&self) -> Option<SendZc> {
        self.send_zc
    }

    /// Keeps what a connection leaving the ring still lends until its notifications come.
    pub fn adopt_orphan(&mut self, orphan: zc::Orphan) {
        self.orphans.adopt(orphan);
    }

    /// Orphans waiting for notifications.
    pub fn orphans(&self) -> usize {
        self.orphans.len()
    }

    /// Sets how its blocking waits count and spin; a sized spin measures the sleep-and-wake
    /// cost first (nothing may be in flight: call right after [`SockRing::new`]).
    pub fn configure_wait(&mut self, wait: RingWait, spin: RingSpin, coalesce_ns: u64) {
        self.batch = matches!(wait, RingWait::Batch | RingWait::MinWait)
            .then(|| BatchWait::new(coalesce_ns));
        self.min_wait = wait == RingWait::MinWait && self.ring.has_min_wait();
        if wait == RingWait::MinWait && !self.min_wait {
            tracing::warn!(
                "dataplane.ring_wait = \"min-wait\": the kernel has no min_wait_usec (before Linux 6.12), the batch wait ends at its bound"
            );
        }
        self.spin = match spin {
            RingSpin::Sized => Some(SpinSizer::new(self.measure_wake_cost())),
            RingSpin::Fixed => None,
        };
    }

    /// The thread CPU one timed sleep in this ring costs ([`ringwait::wake_cost_ns`] over
    /// [`ringwait::WAKE_COST_SAMPLES`] sleeps of [`ringwait::WAKE_COST_SLEEP_NS`]).
    fn measure_wake_cost(&mut self) -> u64 {
        let Some(before) = thread_cpu_ns() else {
            return ringwait::DEFAULT_WAKE_COST_NS;
        };
        for _ in 0..ringwait::WAKE_COST_SAMPLES {
            // Nothing is in flight: each wait ends on its timeout (ETIME).
            let _ = self.ring.enter(1, Some(ringwait::WAKE_COST_SLEEP_NS));
        }
        let cpu = thread_cpu_ns().map_or(0, |after| after.saturating_sub(before));
        ringwait::wake_cost_ns(cpu, ringwait::WAKE_COST_SAMPLES)
    }

    /// SENDMSGs queued for the next enter.
    pub fn sends_queued(&self) -> usize {
        self.sends_queued
    }

    /// RECVs in the kernel.
    pub fn recvs_armed(&self) -> usize {
        self.recvs_armed
    }

    /// Whether a completion is posted or deferred task work waits to post one.
    pub fn has_ready(&mut self) -> bool {
        self.ring.has_completions() || self.ring.task_work_pending()
    }

    /// Spins up to `max_ns` reading the completion queue's tail and the task-run flag (no
    /// system call); returns how long until something was ready, or None.
    pub fn spin(&mut self, max_ns: u64) -> Option<u64> {
        let start = now_ns();
        loop {
            if self.has_ready() {
                return Some(now_ns().saturating_sub(start));
            }
            if now_ns().saturating_sub(start) >= max_ns {
                return None;
            }
            std::hint::spin_loop();
        }
    }

    /// Submits what is queued and waits up to `timeout_ns` until `want` completions are posted
    /// (a batch wait; `want` ≤ 1 is [`SockRing::enter`]).
    pub fn enter_want(&mut self, want: usize, timeout_ns: u64) -> bool {
        if want <= 1 || timeout_ns == 0 {
            return self.enter(timeout_ns);
        }
        // ETIME (the bound ended the wait) and EINTR are what a wait may end with.
        let _ = self.ring.enter(want, Some(timeout_ns));
        self.queued = 0;
        self.sends_queued = 0;
        true
    }

    /// The step's blocking wait for `want` completions: up to `bound_ns` as
    /// [`SockRing::enter_want`] waits; with the kernel's minimum wait (`ring_wait =
    /// "min-wait"`) and a bound shorter than `timeout_ns`, the same enter then goes on until
    /// one completion is there (one already there, unreaped — the step's own sends — ends it
    /// at the bound), up to `timeout_ns` in all.
    pub fn enter_batch(&mut self, want: usize, bound_ns: u64, timeout_ns: u64) -> bool {
        if !self.min_wait || want <= 1 || bound_ns == 0 || bound_ns >= timeout_ns {
            return self.enter_want(want, bound_ns);
        }
        // ETIME (the whole timeout passed) and EINTR are what a wait may end with.
        let _ = self.ring.enter_min_wait(want, bound_ns, timeout_ns);
        self.queued = 0;
        self.sends_queued = 0;
        true
    }

    /// Receives single-shot from now on (a kernel that refused a multishot RECV).
    pub fn fall_back_to_single(&mut self) {
        self.recv = SocketRecv::Single;
    }

    /// The bytes a multishot receive left in `buf`.
    pub fn provided(&self, buf: &Provided) -> &[u8] {
        self.ring.provided(buf)
    }

    /// Gives a multishot receive's buffer back to the kernel.
    pub fn recycle(&mut self, buf: Provided) {
        self.ring.recycle(buf);
    }

    /// Provided buffers out of the kernel's hands.
    pub fn provided_held(&self) -> usize {
        self.ring.provided_held()
    }

    /// Pushes one submission, submitting first when the queue is full; gives it back when
    /// the kernel takes no more (the queue stays full after a submit): it was not queued.
    fn push(&mut self, user_data: u64, mut sqe: Sqe<IoBuf>) -> Result<(), Sqe<IoBuf>> {
        for _ in 0..2 {
            match self.ring.push(user_data, sqe) {
                Ok(()) => {
                    self.queued += 1;
                    return Ok(());
                }
                Err(back) => sqe = back,
            }
            if self.ring.submit().is_ok() {
                self.queued = 0;
            }
        }
        Err(sqe)
    }

    /// Queues a RECV for connection `conn`: multishot into the provided buffers, or
    /// single-shot into `input`'s spare room.
    pub fn arm_recv(&mut self, fd: RawFd, conn: ConnRef, rc: &mut RingConn, input: &mut InBuf) {
        debug_assert!(!rc.recv, "two receives on one connection");
        if self.recv == SocketRecv::Multishot {
            // Owns nothing: its buffers are the ring's. Not queued: the next interest update
            // retries.
            if self
                .push(user_data(OpKind::Recv, conn), Sqe::RecvMulti { fd })
                .is_ok()
            {
                rc.recv = true;
                rc.recv_cancelled = false;
                self.recvs_armed += 1;
            }
            return;
        }
        let loan = input.begin_recv();
        // `input` stays lent — not moved, grown or reset — until the worker hands the
        // completion to `InBuf::end_recv` (or leaks it, `ring_detach`).
        if self
            .push(user_data(OpKind::Recv, conn), Sqe::Recv { fd, loan })
            .is_ok()
        {
            rc.recv = true;
            self.recvs_armed += 1;
        } else {
            // Not queued: the kernel never saw the room. The next interest update retries.
            input.end_recv(0);
        }
    }

    /// Queues a SENDMSG of `core`'s queued output (up to [`WRITEV_MAX_IOVECS`] parts, up to
    /// [`WRITEV_LARGE_IOVECS`] when more are queued, with at most [`WRITEV_MAX_IOVECS`] small
    /// parts among them); false when there is nothing to send.
    pub fn arm_send(
        &mut self,
        fd: RawFd,
        conn: ConnRef,
        rc: &mut RingConn,
        core: &mut ConnCore,
    ) -> bool {
        debug_assert!(!rc.send, "two sends on one connection");
        let mut msg = self
            .spare_msgs
            .pop()
            .unwrap_or_else(|| sys::SendMsg::new(WRITEV_MAX_IOVECS));
        {
            let mut parts: [IoSlice<'_>; WRITEV_MAX_IOVECS] =
                [IoSlice::new(&[]); WRITEV_MAX_IOVECS];
            let (count, more) = core.gather_out_more(&mut parts);
            if more {
                set_large_parts(&mut msg, core);
            } else {
                msg.set_parts(&parts[..count]);
            }
        }
        if msg.parts() == 0 {
            self.spare_msgs.push(msg);
            return false;
        }
        let flags = libc::MSG_NOSIGNAL as u32;
        let zero_copy = self
            .send_zc
            .is_some_and(|zc| msg.lent_bytes() >= zc.min_bytes);
        let sqe = if zero_copy {
            self.zc_tag += 1;
            msg.tag = self.zc_tag;
            Sqe::SendMsgZc { fd, msg, flags }
        } else {
            Sqe::SendMsg { fd, msg, flags }
        };
        // The message goes into the ring with the submission; its larger parts are heap
        // buffers of frames in `core.out`, which `out_lent` keeps queued (not dropped, not
        // advanced) until the completion — and, zero-copy, `rc.zc` keeps until the
        // notification.
        if let Err(back) = self.push(user_data(OpKind::Send, conn), sqe) {
            if let Sqe::SendMsg { msg, .. } | Sqe::SendMsgZc { msg, .. } = back {
                self.spare_msgs.push(msg);
            }
            return false;
        }
        if zero_copy {
            rc.zc.armed(self.zc_tag);
        }
        core.out_lent = true;
        rc.send = true;
        self.sends_queued += 1;
        true
    }

    /// Queues a POLL for input on `fd` (the worker's epoll descriptor); false when not queued.
    pub fn arm_poll(&mut self, fd: RawFd) -> bool {
        let me = ConnRef {
            index: 0,
            generation: 0,
        };
        self.push(user_data(OpKind::Poll, me), Sqe::PollIn { fd })
            .is_ok()
    }

    /// Queues the cancellation of connection `conn`'s operation of `kind`; false when not
    /// queued.
    pub fn cancel(&mut self, conn: ConnRef, kind: OpKind) -> bool {
        let target = user_data(kind, conn);
        self.push(user_data(OpKind::Cancel, conn), Sqe::Cancel { target })
            .is_ok()
    }

    /// Entries queued and not yet given to the kernel.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Submits what is queued and waits up to `timeout_ns` (0: not at all) for a completion.
    /// Returns whether a syscall was made (none when nothing is queued, no completion waits to
    /// be posted and the wait is 0).
    pub fn enter(&mut self, timeout_ns: u64) -> bool {
        let ready = self.ring.has_completions();
        if timeout_ns == 0 || ready {
            if self.queued == 0 && !self.ring.task_work_pending() {
                return false;
            }
            // Waits for nothing; asks for events when task work is pending (the crate sets
            // GETEVENTS then), which is what posts deferred completions.
            let _ = self.ring.enter(0, None);
        } else {
            // ETIME (the wait timed out) and EINTR are what a wait may end with.
            let _ = self.ring.enter(1, Some(timeout_ns));
        }
        self.queued = 0;
        self.sends_queued = 0;
        true
    }

    /// Submits what is queued and sleeps `ns` whatever completes meanwhile (the coalescing
    /// pause): the wait asks for more completions than the ring holds, so only the timeout
    /// ends it (or a full completion queue), and the completions are posted as it returns.
    /// One syscall for the step's sends and its pause.
    pub fn enter_hold(&mut self, ns: u64) {
        let want = self.ring.cq_entries() as usize;
        let _ = self.ring.enter(want, Some(ns));
        self.queued = 0;
        self.sends_queued = 0;
    }

    /// Moves every posted completion to `out`; a SENDMSG's message goes back to the spares.
    pub fn reap(&mut self, out: &mut Vec<Done>) {
        self.ring.reap(&mut self.cqes);
        for cqe in self.cqes.drain(..) {
            if is_guest_op(&cqe.sqe) {
                self.guest_done.push(cqe);
                continue;
            }
            let mut done = Done::from_cqe(cqe.user_data, cqe.result, cqe.buf, cqe.more);
            if done.kind == OpKind::Recv && !done.more {
                self.recvs_armed = self.recvs_armed.saturating_sub(1);
            }
            match cqe.sqe {
                Sqe::SendMsgZc { msg, .. } if cqe.notif => {
                    let notif = Notif::from_result(msg.tag, cqe.result);
                    self.orphans.notified(notif.tag);
                    done.notif = Some(notif);
                    done.result = 0;
                    self.spare_msgs.push(msg);
                }
                Sqe::SendMsg { msg, .. } | Sqe::SendMsgZc { msg, .. } => self.spare_msgs.push(msg),
                _ => {}
            }
            out.push(done);
        }
    }
}

impl Drop for SockRing {
    /// With orphans (frames lent to zero-copy sends of connections that left): waits for the
    /// kernel as the ring's own drop would, freeing each orphan at its last notification, and
    /// leaks those whose notifications never came.
    fn drop(&mut self) {
        if self.orphans.is_empty() {
            return;
        }
        let me = ConnRef {
            index: 0,
            generation: 0,
        };
        self.ring.cancel_all(user_data(OpKind::Cancel, me));
        let mut done = Vec::new();
        let drained = self.ring.drain(sys::RING_DROP_WAIT_NS, &mut done);
        for cqe in done {
            if let (Sqe::SendMsgZc { msg, .. }, true) = (&cqe.sqe, cqe.notif) {
                self.orphans.notified(msg.tag);
            }
        }
        if !drained {
            self.orphans.forget();
        }
    }
}

/// Guest backends: a file volume's operations in the socket ring (`[dataplane] file_io =
/// "socket-ring"`; *One ring per worker* in `backend/file.rs`).
impl SockRing {
    /// The ring as volume `volume`'s host (below [`MAX_GUEST_VOLUMES`]): its pushes are
    /// tagged with the volume, and their completions come back from
    /// [`SockRing::take_guest_done`] with it.
    pub fn host(&mut self, volume: usize) -> GuestHost<'_> {
        debug_assert!(volume < MAX_GUEST_VOLUMES);
        GuestHost {
            tag: (volume as u64) << GUEST_VOLUME_SHIFT,
            ring: self,
        }
    }

    /// Whether guest completions wait to be taken.
    pub fn has_guest_done(&self) -> bool {
        !self.guest_done.is_empty()
    }

    /// Takes the guest completions reaped so far, as `(volume, completion)`, each with the
    /// user data its guest pushed.
    pub fn take_guest_done(&mut self) -> impl Iterator<Item = (usize, sys::Cqe<IoBuf>)> + '_ {
        self.guest_done.drain(..).map(|mut cqe| {
            let volume = ((cqe.user_data & GUEST_VOLUME_MASK) >> GUEST_VOLUME_SHIFT) as usize;
            cqe.user_data &= !GUEST_VOLUME_MASK;
            (volume, cqe)
        })
    }

    /// Guest operations pushed since the ring was made.
    pub fn guest_pushed(&self) -> u64 {
        self.guest_pushed
    }
}

/// The socket ring as one volume's host ([`SockRing::host`]).
pub struct GuestHost<'a> {
    ring: &'a mut SockRing,
    tag: u64,
}

impl HostRing for GuestHost<'_> {
    fn push(&mut self, user_data: u64, sqe: Sqe<IoBuf>) -> Result<(), Sqe<IoBuf>> {
        debug_assert_eq!(
            user_data & GUEST_VOLUME_MASK,
            0,
            "a guest's user data too wide"
        );
        self.ring.ring.push(user_data | self.tag, sqe)?;
        self.ring.queued += 1;
        self.ring.guest_pushed += 1;
        Ok(())
    }

    fn is_full(&mut self) -> bool {
        self.ring.ring.is_full()
    }

    fn submit(&mut self) -> io::Result<usize> {
        let n = self.ring.ring.submit()?;
        self.ring.queued = 0;
        Ok(n)
    }

    fn register_buffers(&mut self, home: std::sync::Arc<dyn sys::FixedRegions>) -> io::Result<()> {
        self.ring.ring.register_buffers(home)
    }
}

/// This thread's CPU time, ns (None where the clock is refused).
fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    /// A socket ring and a connected loopback pair (client, server end), or `None` after
    /// [`testkit::skip`] where io_uring is refused (a failure under `ULLSTACK_REQUIRE_TOOLS`).
    fn ring_and_pair(test: &str, recv: SocketRecv) -> Option<(SockRing, TcpStream, TcpStream)> {
        let ring = match SockRing::new(recv) {
            Ok(ring) => ring,
            Err(e) => {
                testkit::skip(test, &format!("io_uring is refused here ({e})"));
                return None;
            }
        };
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("conn");
        let (server, _) = listener.accept().expect("accept");
        Some((ring, client, server))
    }

    /// Connection `index` of generation `generation`.
    fn conn_ref(index: u32, generation: u32) -> ConnRef {
        ConnRef { index, generation }
    }

    /// A second loopback pair (client, server end) beside [`ring_and_pair`]'s.
    fn second_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("conn");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    /// Arms a receive on each of two server ends, as connections 1 and 2 (generation 1); their
    /// references.
    fn arm_two(
        ring: &mut SockRing,
        fds: [std::os::fd::RawFd; 2],
        rcs: &mut [RingConn; 2],
        inputs: &mut [InBuf; 2],
    ) -> [ConnRef; 2] {
        let refs = [1, 2].map(|index| conn_ref(index, 1));
        for (k, fd) in fds.into_iter().enumerate() {
            ring.arm_recv(fd, refs[k], &mut rcs[k], &mut inputs[k]);
        }
        refs
    }

    /// A RECV and a SENDMSG through the ring move bytes both ways, and a RECV with nothing to
    /// read is cancelled and completes as cancelled, its buffer given back.
    #[test]
    fn receives_sends_and_cancels() {
        let Some((mut ring, mut client, server)) =
            ring_and_pair("receives_sends_and_cancels", SocketRecv::Single)
        else {
            return;
        };
        let me = conn_ref(3, 9);
        let mut rc = RingConn::new();
        let mut input = InBuf::new();
        client.write_all(b"hello").expect("write");
        ring.arm_recv(server.as_raw_fd(), me, &mut rc, &mut input);
        let mut done = Vec::new();
        while done.is_empty() {
            ring.enter(1_000_000_000);
            ring.reap(&mut done);
        }
        assert_eq!(done[0].kind, OpKind::Recv);
        assert_eq!(done[0].conn, me);
        assert_eq!(done[0].result, 5);
        input.end_recv(5);
        assert_eq!(input.data(), b"hello");

        let mut core = ConnCore::new(server.try_clone().expect("clone"), None, me, 0, 0);
        core.push_head(b"head");
        core.push_head(&[7u8; 100]);
        assert!(ring.arm_send(server.as_raw_fd(), me, &mut rc, &mut core));
        done.clear();
        while done.is_empty() {
            ring.enter(1_000_000_000);
            ring.reap(&mut done);
        }
        assert_eq!((done[0].kind, done[0].result), (OpKind::Send, 104));
        core.out_lent = false;
        let mut pool = crate::buf::BufPool::new();
        core.advance_out(104, &mut pool);
        assert!(core.out.is_empty());
        let mut got = [0u8; 104];
        client.read_exact(&mut got).expect("read");
        assert_eq!(&got[..4], b"head");

        rc.recv = false;
        ring.arm_recv(server.as_raw_fd(), me, &mut rc, &mut input);
        ring.cancel(me, OpKind::Recv);
        done.clear();
        while !done.iter().any(|d| d.kind == OpKind::Recv) {
            ring.enter(1_000_000_000);
            ring.reap(&mut done);
        }
        let recv = done.iter().find(|d| d.kind == OpKind::Recv).expect("recv");
        assert_eq!(recv.result, -libc::ECANCELED);
        input.end_recv(0);
        assert_eq!(input.data(), b"hello");
    }

    /// A zero-copy send completes twice: its bytes with `more`, then a notification naming
    /// its tag (copied, over loopback); the bytes arrive whole.
    #[test]
    fn a_zero_copy_send_completes_then_notifies() {
        let test = "a_zero_copy_send_completes_then_notifies";
        let Some((mut ring, mut client, server)) = ring_and_pair(test, SocketRecv::Single) else {
            return;
        };
        if let Err(e) = ring.enable_send_zc(SendZc { min_bytes: 4096 }) {
            testkit::skip(test, &format!("SENDMSG_ZC is refused here ({e})"));
            return;
        }
        let me = conn_ref(4, 2);
        let mut rc = RingConn::new();
        let mut core = ConnCore::new(server.try_clone().expect("clone"), None, me, 0, 0);
        let payload: Vec<u8> = (0..64 * 1024u32).map(|k| (k % 251) as u8).collect();
        core.push_head(b"head");
        core.push_head(&payload);
        assert!(ring.arm_send(server.as_raw_fd(), me, &mut rc, &mut core));
        assert!(rc.zc.is_armed(), "64 KiB lent: zero-copy");
        let mut done = Vec::new();
        while done.len() < 2 {
            ring.enter(1_000_000_000);
            ring.reap(&mut done);
        }
        let sent = &done[0];
        assert_eq!((sent.kind, sent.more), (OpKind::Send, true), "{done:?}");
        assert_eq!(sent.result as usize, 4 + payload.len());
        let notif = done[1].notif.expect("a notification");
        assert_eq!((done[1].kind, done[1].conn), (OpKind::Send, me));
        assert!(notif.copied, "loopback copies");
        core.out_lent = false;
        rc.send = false;
        let mut pool = crate::buf::BufPool::new();
        rc.zc.sent(&mut core, sent.result as usize, true, &mut pool);
        assert_eq!(rc.zc.outstanding(), 1);
        assert!(rc.zc.notified(notif.tag, &mut core, &mut pool));
        let mut got = vec![0u8; 4 + payload.len()];
        client.read_exact(&mut got).expect("read");
        assert!(got[4..] == payload[..]);
        // A small message stays a copying send: one completion.
        core.push_head(&[1u8; 100]);
        assert!(ring.arm_send(server.as_raw_fd(), me, &mut rc, &mut core));
        assert!(!rc.zc.is_armed());
    }

    /// A coalescing pause sleeps its time even while a receive completes: the receive's
    /// completion is there when it ends, and nothing woke the thread earlier.
    #[test]
    fn a_hold_sleeps_through_completions() {
        let Some((mut ring, mut client, server)) =
            ring_and_pair("a_hold_sleeps_through_completions", SocketRecv::Single)
        else {
            return;
        };
        let me = conn_ref(1, 1);
        let mut rc = RingConn::new();
        let mut input = InBuf::new();
        ring.arm_recv(server.as_raw_fd(), me, &mut rc, &mut input);
        ring.enter(0);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(2));
            client.write_all(b"x").expect("write");
            client
        });
        let start = std::time::Instant::now();
        ring.enter_hold(20_000_000);
        let slept = start.elapsed();
        let _client = writer.join().expect("writer");
        assert!(
            slept >= std::time::Duration::from_millis(19),
            "the hold ended after {slept:?}"
        );
        let mut done = Vec::new();
        ring.enter(0);
        ring.reap(&mut done);
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(done[0].result, 1);
        input.end_recv(1);
    }

    /// A multishot receive stays armed across completions, its bytes come in provided
    /// buffers that go back to the ring, and a cancel ends it.
    #[test]
    fn a_multishot_receive_stays_armed_until_cancelled() {
        let test = "a_multishot_receive_stays_armed_until_cancelled";
        let Some((mut ring, mut client, server)) = ring_and_pair(test, SocketRecv::Multishot)
        else {
            return;
        };
        if ring.recv != SocketRecv::Multishot {
            testkit::skip(test, "provided-buffer rings are refused here");
            return;
        }
        let me = conn_ref(2, 5);
        let mut rc = RingConn::new();
        let mut input = InBuf::new();
        ring.arm_recv(server.as_raw_fd(), me, &mut rc, &mut input);
        assert!(rc.recv && !input.is_lent(), "multishot lends nothing");
        let mut done = Vec::new();
        for m in 0..3u8 {
            client.write_all(&[m; 10]).expect("write");
            while done.is_empty() {
                ring.enter(1_000_000_000);
                ring.reap(&mut done);
            }
            let d: Done = done.remove(0);
            assert_eq!(
                (d.kind, d.conn, d.result, d.more),
                (OpKind::Recv, me, 10, true)
            );
            let buf = d.buf.expect("a provided buffer");
            input.extend_from_slice(ring.provided(&buf));
            ring.recycle(buf);
        }
        assert_eq!(ring.provided_held(), 0);
        assert_eq!(input.data().len(), 30);
        assert_eq!(&input.data()[20..], &[2u8; 10]);
        assert!(ring.cancel(me, OpKind::Recv));
        while !done.iter().any(|d| d.kind == OpKind::Recv) {
            ring.enter(1_000_000_000);
            ring.reap(&mut done);
        }
        let end = done.iter().find(|d| d.kind == OpKind::Recv).expect("recv");
        assert_eq!((end.result, end.more), (-libc::ECANCELED, false));
        assert!(end.buf.is_none());
    }

    /// A batch wait for two receives is held by one until its bound, and ends early once the
    /// second comes; a spin on the ring sees a receive arrive without entering the kernel.
    #[test]
    fn a_batch_wait_ends_on_its_count_or_its_bound() {
        let test = "a_batch_wait_ends_on_its_count_or_its_bound";
        let Some((mut ring, mut c1, s1)) = ring_and_pair(test, SocketRecv::Single) else {
            return;
        };
        let (mut c2, s2) = second_pair();
        let mut rcs = [RingConn::new(), RingConn::new()];
        let mut inputs = [InBuf::new(), InBuf::new()];
        let refs = arm_two(
            &mut ring,
            [s1.as_raw_fd(), s2.as_raw_fd()],
            &mut rcs,
            &mut inputs,
        );
        assert_eq!(ring.recvs_armed(), 2);
        ring.enter(0);
        // One of two: held to the bound (20 ms here), its completion there at the end.
        c1.write_all(b"a").expect("write");
        let bound = std::time::Duration::from_millis(20);
        let start = std::time::Instant::now();
        ring.enter_want(2, bound.as_nanos() as u64);
        let held = start.elapsed();
        let mut done = Vec::new();
        ring.enter(0);
        ring.reap(&mut done);
        assert!(
            held >= bound - std::time::Duration::from_millis(1),
            "held {held:?}"
        );
        assert_eq!(done.len(), 1, "{done:?}");
        inputs[0].end_recv(1);
        assert_eq!(ring.recvs_armed(), 1);
        // The spin sees the second receive come (no enter while it spins).
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(2));
            c2.write_all(b"b").expect("write");
            c2
        });
        let gap = ring.spin(5_000_000_000);
        let _c2 = writer.join().expect("writer");
        assert!(gap.is_some(), "the spin never saw the receive");
        // Both again: a wait for two ends as soon as both are in, well before its bound.
        ring.enter(0);
        done.clear();
        ring.reap(&mut done);
        assert_eq!(done.len(), 1, "{done:?}");
        inputs[1].end_recv(1);
        rcs = [RingConn::new(), RingConn::new()];
        for (k, fd) in [s1.as_raw_fd(), s2.as_raw_fd()].into_iter().enumerate() {
            ring.arm_recv(fd, refs[k], &mut rcs[k], &mut inputs[k]);
        }
        ring.enter(0);
        c1.write_all(b"c").expect("write");
        _c2.try_clone()
            .expect("clone")
            .write_all(b"d")
            .expect("write");
        let start = std::time::Instant::now();
        let long = std::time::Duration::from_secs(5);
        let mut done = Vec::new();
        while done.len() < 2 && start.elapsed() < long {
            ring.enter_want(2 - done.len(), long.as_nanos() as u64);
            ring.reap(&mut done);
        }
        assert_eq!(done.len(), 2, "{done:?}");
        assert!(
            start.elapsed() < long,
            "the wait for two was held to its bound"
        );
        inputs[0].end_recv(1);
        inputs[1].end_recv(1);
    }

    /// Two connections, each with a receive armed, nothing sent: a batch wait for both with a
    /// 20 ms bound, the second byte written 60 ms in. `batch` ends empty at the bound (the
    /// worker would enter again); `min-wait` goes on in the same enter and ends at the byte,
    /// long before its 5 s timeout.
    #[test]
    fn a_min_wait_goes_on_past_its_bound_for_one_completion() {
        let test = "a_min_wait_goes_on_past_its_bound_for_one_completion";
        let Some((mut ring, _c1, s1)) = ring_and_pair(test, SocketRecv::Single) else {
            return;
        };
        ring.configure_wait(RingWait::MinWait, RingSpin::Fixed, 160_000);
        if !ring.min_wait {
            testkit::skip(test, "the kernel has no min_wait_usec (before Linux 6.12)");
            return;
        }
        let (c2, s2) = second_pair();
        let mut rcs = [RingConn::new(), RingConn::new()];
        let mut inputs = [InBuf::new(), InBuf::new()];
        let refs = arm_two(
            &mut ring,
            [s1.as_raw_fd(), s2.as_raw_fd()],
            &mut rcs,
            &mut inputs,
        );
        ring.enter(0);
        let bound = std::time::Duration::from_millis(20);
        let late = std::time::Duration::from_millis(60);
        let long = std::time::Duration::from_secs(5);
        // `batch`: the bound ends the wait with nothing.
        ring.min_wait = false;
        let start = std::time::Instant::now();
        ring.enter_batch(2, bound.as_nanos() as u64, long.as_nanos() as u64);
        let held = start.elapsed();
        let mut done = Vec::new();
        ring.reap(&mut done);
        assert!(done.is_empty(), "{done:?}");
        assert!(held < late, "batch held {held:?} past its 20 ms bound");
        // `min-wait`: the same wait goes on past the bound and ends at the one byte.
        ring.min_wait = true;
        let writer = std::thread::spawn(move || {
            std::thread::sleep(late);
            let mut c2 = c2;
            c2.write_all(b"b").expect("write");
            c2
        });
        let start = std::time::Instant::now();
        ring.enter_batch(2, bound.as_nanos() as u64, long.as_nanos() as u64);
        let held = start.elapsed();
        let _c2 = writer.join().expect("writer");
        ring.enter(0);
        ring.reap(&mut done);
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!((done[0].conn, done[0].result), (refs[1], 1));
        assert!(
            held >= late - std::time::Duration::from_millis(5) && held < long / 2,
            "min-wait returned after {held:?}: not at the byte (60 ms)"
        );
        inputs[1].end_recv(1);
        // Cancel the other receive before its input buffer goes.
        assert!(ring.cancel(refs[0], OpKind::Recv));
        let start = std::time::Instant::now();
        while rcs[0].recv && start.elapsed() < long {
            ring.enter(1_000_000_000);
            done.clear();
            ring.reap(&mut done);
            if done
                .iter()
                .any(|d| d.conn == refs[0] && d.kind == OpKind::Recv)
            {
                rcs[0].recv = false;
                inputs[0].end_recv(0);
            }
        }
        assert!(!rcs[0].recv, "the cancelled receive never completed");
    }

    /// A ring with a submission-polling thread moves bytes both ways without the worker
    /// submitting, and the thread is one of the process's (`iou-sqp-*`), so its CPU is
    /// counted as the server's where the examples count it.
    #[test]
    fn a_polled_submission_queue_moves_bytes_and_its_thread_is_the_process_s() {
        let test = "a_polled_submission_queue_moves_bytes_and_its_thread_is_the_process_s";
        let mut ring = match SockRing::with_sqpoll(SocketRecv::Single, 10) {
            Ok(ring) => ring,
            Err(e) => {
                testkit::skip(test, &format!("io_uring is refused here ({e})"));
                return;
            }
        };
        if !ring.is_sqpoll() {
            testkit::skip(test, "IORING_SETUP_SQPOLL is refused here");
            return;
        }
        let sqp_threads = || {
            std::fs::read_dir("/proc/self/task")
                .map(|tasks| {
                    tasks
                        .flatten()
                        .filter(|t| {
                            std::fs::read_to_string(t.path().join("comm"))
                                .is_ok_and(|c| c.starts_with("iou-sqp-"))
                        })
                        .count()
                })
                .unwrap_or(0)
        };
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("conn");
        let (server, _) = listener.accept().expect("accept");
        let me = conn_ref(3, 1);
        let mut rc = RingConn::new();
        let mut input = InBuf::new();
        ring.arm_recv(server.as_raw_fd(), me, &mut rc, &mut input);
        client.write_all(b"ping").expect("write");
        let mut done = Vec::new();
        let start = std::time::Instant::now();
        while done.is_empty() && start.elapsed() < std::time::Duration::from_secs(5) {
            ring.enter(1_000_000_000);
            ring.reap(&mut done);
        }
        assert_eq!(
            (done.len(), done[0].kind, done[0].result),
            (1, OpKind::Recv, 4)
        );
        input.end_recv(4);
        assert_eq!(input.pending_bytes(), 4);
        // The thread names itself when it first runs; it has run: it submitted the receive.
        assert!(sqp_threads() >= 1, "no iou-sqp thread in /proc/self/task");
    }

    /// A guest's read goes in through the host tagged with its volume, comes back from
    /// `take_guest_done` with the volume and the user data the guest pushed, buffer filled, and
    /// never as a socket completion; a socket receive in the same enter comes back as one.
    #[test]
    fn a_guest_operation_comes_back_to_its_volume() {
        let Some((mut ring, mut client, server)) = ring_and_pair(
            "a_guest_operation_comes_back_to_its_volume",
            SocketRecv::Single,
        ) else {
            return;
        };
        let file = tempfile_with(b"guest bytes");
        let me = conn_ref(4, 2);
        let mut rc = RingConn::new();
        let mut input = InBuf::new();
        client.write_all(b"ping").expect("write");
        ring.arm_recv(server.as_raw_fd(), me, &mut rc, &mut input);
        let mut buf = IoBuf::zeroed(5);
        buf.set_len(5);
        let read = Sqe::Read {
            fd: file.as_raw_fd(),
            offset_bytes: 6,
            buf,
            from: 0,
        };
        let run_bit = 1u64 << 62;
        assert!(ring.host(3).push(run_bit | 77, read).is_ok());
        assert_eq!(ring.guest_pushed(), 1);
        let mut done = Vec::new();
        let mut guest = Vec::new();
        while done.is_empty() || guest.is_empty() {
            ring.enter(1_000_000_000);
            ring.reap(&mut done);
            guest.extend(ring.take_guest_done());
        }
        assert_eq!(
            (done.len(), done[0].kind, done[0].result),
            (1, OpKind::Recv, 4)
        );
        input.end_recv(4);
        let (volume, cqe) = guest.pop().expect("one guest completion");
        assert_eq!((volume, cqe.user_data, cqe.result), (3, run_bit | 77, 5));
        let Sqe::Read { buf, .. } = cqe.sqe else {
            panic!("a read comes back as a read");
        };
        assert_eq!(buf.as_slice(), b"bytes");
        assert!(!ring.has_guest_done());
    }

    /// A file holding `bytes`, open for reading (its name already removed).
    fn tempfile_with(bytes: &[u8]) -> std::fs::File {
        let path = std::env::temp_dir().join(format!(
            "ullstack-sockring-guest-{}.bin",
            std::process::id()
        ));
        std::fs::write(&path, bytes).expect("write temp file");
        let file = std::fs::File::open(&path).expect("open temp file");
        let _ = std::fs::remove_file(&path);
        file
    }

    /// A sized spin measures the ring's sleep-and-wake at set-up: some CPU, within the cap.
    #[test]
    fn a_sized_spin_measures_the_wake_cost_within_its_cap() {
        let test = "a_sized_spin_measures_the_wake_cost_within_its_cap";
        let ring = match SockRing::new(SocketRecv::Single) {
            Ok(ring) => ring,
            Err(e) => {
                testkit::skip(test, &format!("io_uring is refused here ({e})"));
                return;
            }
        };
        let mut ring = ring;
        ring.configure_wait(RingWait::Batch, RingSpin::Sized, 160_000);
        let w = ring.spin.as_ref().expect("a sized spin").max_spin_ns();
        eprintln!("measured sleep-and-wake: {w} ns of thread CPU");
        assert!((1..=ringwait::MAX_SPIN_NS).contains(&w), "{w} ns");
        assert!(ring.batch.is_some());
        ring.configure_wait(RingWait::First, RingSpin::Fixed, 160_000);
        assert!(ring.spin.is_none() && ring.batch.is_none());
    }
}
