//! Safe wrappers for the Linux calls the server makes: epoll, eventfd, read, writev, the
//! socket-queue ioctls, shutdown, listen, poll and the timer slack; io_uring submissions
//! ([`Ring`]); the file backend's questions about its file: `statx` (direct-I/O alignment),
//! `lseek` (data and holes) and `BLKGETSIZE64`; the machine's physical memory (`sysconf`);
//! the aligned allocations behind I/O buffers; and the signal mask and `sigwait` that
//! `signals.rs` uses.
//!
//! # What it implements
//! Every raw `libc` call and every io_uring submission of the crate lives here, each behind a
//! function whose signature cannot be misused: buffers are slices (the kernel writes or reads
//! at most their length) or values an io_uring [`Ring`] owns until their completion,
//! descriptors are borrowed from owners that outlive the call, and results are `io::Result`.
//! The rest of the crate holds no `unsafe`.
//!
//! # Design
//! Thin by intent: one function per syscall, named as the kernel names it, no policy. Worked
//! example: a worker sends 32 read replies with [`writev`] over 64 [`IoSlice`]s (32 headers,
//! 32 payloads) pointing into buffers its output queue owns; `IoSlice` is ABI-compatible with
//! `struct iovec` on Unix (std guarantees it), so the slices go to the kernel as they are.
//!
//! An io_uring operation outlives the call that submits it, so a slice is not enough: a
//! [`Ring`] takes each submission ([`Sqe`]) with what it points at — buffers, iovecs, a
//! message header — and gives it back with its completion ([`Cqe`]), once; dropping a ring
//! cancels what is in the kernel and waits for it, and leaks what never comes back. The file
//! backend's reads and writes give the ring their buffers; the socket path
//! ([`crate::sockring`]) gives it its SENDMSG headers ([`SendMsg`]) and lends it the rest: a
//! receive's room through [`lend_spare`] and [`take_lent`] (the one place a vector's length
//! grows by what the kernel wrote outside a `read` call), a send's large parts from the
//! connection's output queue (see [`Ring`], *Loans*).
//!
//! The bytes of every [`IoBuf`](crate::buf::IoBuf) are an [`AlignedBytes`]: its allocation,
//! the slices over it and its release are here. So is the pipe the file backend's tests read
//! from ([`pipe`]).
//!
//! # What it leaves out
//! Registered buffers and files, multishot operations and provided-buffer rings (none is
//! used). Signals are here only as the three calls `signals.rs` builds on (a mask,
//! `pthread_sigmask`, `sigwait`); what they mean for the server is there.

use std::ffi::CString;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Returns the error of the last call when `rc` is negative.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// An epoll instance.
pub struct Epoll(OwnedFd);

/// One ready descriptor: its registration token and the events that fired.
pub type EpollEvent = libc::epoll_event;

/// An empty event slot for [`Epoll::wait`]'s output array.
pub fn empty_event() -> EpollEvent {
    libc::epoll_event { events: 0, u64: 0 }
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall, no memory passed; the result is checked.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid event for the call's duration (the kernel copies it); the
        // descriptors are plain integers the kernel validates.
        check(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) })?;
        Ok(())
    }

    /// The instance's descriptor (the io_uring socket path polls it).
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Watches `fd` for `events`; [`Epoll::wait`] reports it with `token`.
    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Changes what `fd` is watched for.
    pub fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Stops watching `fd` (before it is closed, so no stale event names its token).
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ns` (0: poll) for events; returns how many slots of `events` are
    /// filled. An interrupted wait returns 0.
    pub fn wait(&self, events: &mut [EpollEvent], timeout_ns: u64) -> usize {
        let timeout = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: the kernel writes at most `max` events into `events`, which has that many
        // slots; `timeout` is a valid timespec; a null sigmask means "leave it".
        let n = unsafe {
            libc::epoll_pwait2(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                max,
                &timeout,
                std::ptr::null(),
            )
        };
        if n < 0 {
            0
        } else {
            n as usize
        }
    }
}

/// A nonblocking eventfd used to wake a thread blocked in poll/epoll.
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall, no memory passed; the result is checked.
        let fd = check(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds one to the counter (wakes a waiter). EAGAIN (counter saturated) is harmless.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: the kernel reads exactly 8 bytes from a valid u64.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter (EAGAIN when it was already zero is harmless).
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: the kernel writes exactly 8 bytes into a valid u64.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// One `read` into `buf`; Ok(0) is end of file.
pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// One `read` into the spare capacity of `buf` (up to `max_bytes` of it), extending its length
/// by what arrived. Ok(0) is end of file (or no spare room).
pub fn read_spare(fd: RawFd, buf: &mut Vec<u8>, max_bytes: usize) -> io::Result<usize> {
    let spare = (buf.capacity() - buf.len()).min(max_bytes);
    if spare == 0 {
        return Ok(0);
    }
    // SAFETY: the kernel writes at most `spare` bytes starting at the vector's length, all
    // within its allocation (`spare` ≤ capacity − len).
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().add(buf.len()).cast(), spare) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel initialized exactly `n` ≤ `spare` bytes past the old length.
    unsafe { buf.set_len(buf.len() + n as usize) };
    Ok(n as usize)
}

/// A vector's spare capacity lent to the kernel by [`lend_spare`]: where a receive may write,
/// and the vector's state when it was lent (checked when the bytes are taken in).
#[derive(Debug, Clone, Copy)]
pub struct SpareLoan {
    /// Where the kernel may write: the vector's first spare byte.
    pub ptr: *mut u8,
    /// How many bytes it may write there.
    pub len: usize,
    base: *const u8,
    old_len: usize,
}

// SAFETY: a loan is an address range and a record of its vector, used only by the thread that
// owns the vector (a worker, moved to its thread before it lends anything).
unsafe impl Send for SpareLoan {}

/// Lends up to `max_bytes` of `buf`'s spare capacity to a receive the caller submits to the
/// kernel (the io_uring socket path). Until the loan is taken back with [`take_lent`], the
/// vector must not be reallocated, shortened or lengthened (`inbuf` pins it).
pub fn lend_spare(buf: &mut Vec<u8>, max_bytes: usize) -> SpareLoan {
    let len = (buf.capacity() - buf.len()).min(max_bytes);
    SpareLoan {
        // In bounds: `buf.len()` ≤ capacity, so the pointer is at most one past the end.
        ptr: buf.as_mut_ptr().wrapping_add(buf.len()),
        len,
        base: buf.as_ptr(),
        old_len: buf.len(),
    }
}

/// Takes in the `received` bytes a completed receive wrote at the start of `loan`: extends
/// `buf`'s length by them. Call only with the byte count the kernel reported for the receive
/// that was given this loan.
pub fn take_lent(buf: &mut Vec<u8>, loan: SpareLoan, received: usize) {
    assert!(
        buf.as_ptr() == loan.base && buf.len() == loan.old_len && received <= loan.len,
        "a lent input buffer changed while the kernel held it"
    );
    // SAFETY: the vector is the one lent (same allocation, same length, checked above), so the
    // `received` ≤ `loan.len` bytes past its length are within its capacity, and the kernel's
    // receive initialized exactly them.
    unsafe { buf.set_len(buf.len() + received) };
}

/// How long dropping a [`Ring`] with operations in the kernel waits for their cancelled
/// completions before it leaks what they hold instead (leaking is safe; freeing memory the
/// kernel may still write is not).
pub const RING_DROP_WAIT_NS: u64 = 5_000_000_000;
/// The longest single wait of [`Ring::drain`], so its deadline holds even if no completion
/// ever comes.
const DRAIN_STEP_NS: u64 = 100_000_000;
/// The kernel user data a cancel carries when the operation it names is not in the kernel: no
/// slot has this index, so the kernel answers ENOENT.
const NO_SLOT: u64 = u64::MAX;

/// Bytes an io_uring operation reads or writes while a [`Ring`] owns the value that holds them
/// (the file backend's `IoBuf`s; a `Vec<u8>`).
pub trait IoBytes: Send + 'static {
    /// The bytes an operation may use. The ring asks once, right after the value moved into
    /// it, and keeps the address until the completion: the slice is borrowed from the value,
    /// so it is memory the value owns (or `'static`), and the ring neither moves nor touches
    /// the value meanwhile.
    fn io_bytes(&mut self) -> &mut [u8];
}

impl IoBytes for Vec<u8> {
    fn io_bytes(&mut self) -> &mut [u8] {
        self
    }
}

/// One io_uring submission and what it points at: the ring owns all of it from
/// [`Ring::push`] until the completion gives it back ([`Cqe::sqe`]). Descriptors are numbers
/// the kernel resolves when it takes the submission; a descriptor closed before then fails the
/// operation, and touches no memory but the submission's.
pub enum Sqe<B> {
    /// `read` at `offset_bytes` into `buf`'s bytes from `from` on.
    Read {
        fd: RawFd,
        offset_bytes: u64,
        buf: B,
        from: usize,
    },
    /// `write` at `offset_bytes` of `buf`'s bytes from `from` on.
    Write {
        fd: RawFd,
        offset_bytes: u64,
        buf: B,
        from: usize,
        rw_flags: i32,
    },
    /// `writev` at `offset_bytes` of all of `bufs`' bytes in order (the ring keeps the iovecs).
    Writev {
        fd: RawFd,
        offset_bytes: u64,
        bufs: Vec<B>,
        rw_flags: i32,
    },
    /// `fdatasync`.
    Fdatasync { fd: RawFd },
    /// `fallocate(mode)` of `len_bytes` at `offset_bytes`.
    Fallocate {
        fd: RawFd,
        offset_bytes: u64,
        len_bytes: u64,
        mode: i32,
    },
    /// `recv` into the room `loan` lends: a loan, not a gift (see [`Ring`], *Loans*).
    Recv { fd: RawFd, loan: SpareLoan },
    /// `sendmsg` of `msg`'s parts.
    SendMsg { fd: RawFd, msg: SendMsg, flags: u32 },
    /// A one-shot poll for input.
    PollIn { fd: RawFd },
    /// `ASYNC_CANCEL` of the operation in the kernel pushed with user data `target` (ENOENT
    /// when there is none).
    Cancel { target: u64 },
}

/// One completion: the user data its submission was pushed with, its result (bytes moved, or
/// a negated errno) and the submission, with everything it held, given back.
pub struct Cqe<B> {
    pub user_data: u64,
    pub result: i32,
    pub sqe: Sqe<B>,
}

/// Parts of this size or less are copied into a [`SendMsg`] (a reply header is at most 40 B
/// and lives inline in an output queue that may move when it grows).
pub const SEND_SMALL_PART_BYTES: usize = 40;

/// The `msghdr`, iovecs and small-part copies of one SENDMSG: point it at the parts with
/// [`set_parts`](Self::set_parts), then push it as a [`Sqe::SendMsg`]. Its iovecs grow to the
/// most parts it was ever pointed at (a large reply of page views: up to `IOV_MAX`); its
/// small-part copies stay as many as it was made with.
pub struct SendMsg {
    msg: libc::msghdr,
    iov: Vec<libc::iovec>,
    small: Vec<[u8; SEND_SMALL_PART_BYTES]>,
    count: usize,
}

// SAFETY: the pointers inside are addresses for the kernel (into the value's own vectors and
// into the parts it was pointed at): this type never reads or writes through them, so moving
// it to another thread races on nothing.
unsafe impl Send for SendMsg {}

const EMPTY_IOVEC: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

impl SendMsg {
    /// A message with room for `small_parts` copies of small parts, pointing at none yet.
    pub fn new(small_parts: usize) -> SendMsg {
        // SAFETY: msghdr is a plain C struct; all zeroes (null pointers, zero lengths) is a
        // valid value of it.
        let msg = unsafe { std::mem::zeroed() };
        SendMsg {
            msg,
            iov: vec![EMPTY_IOVEC; small_parts],
            small: vec![[0; SEND_SMALL_PART_BYTES]; small_parts],
            count: 0,
        }
    }

    /// Points the message at `parts`, or at the longest prefix of them whose small parts fit
    /// its copies; returns how many it took. A part of [`SEND_SMALL_PART_BYTES`] or less is
    /// copied in, a larger one is pointed at where it is (a loan: its owner keeps it in place
    /// until the completion).
    pub fn set_parts(&mut self, parts: &[IoSlice<'_>]) -> usize {
        if self.iov.len() < parts.len() {
            self.iov.resize(parts.len(), EMPTY_IOVEC);
        }
        let mut small = 0;
        let mut count = 0;
        for part in parts {
            let base = if part.len() <= SEND_SMALL_PART_BYTES {
                let Some(copy) = self.small.get_mut(small) else {
                    break;
                };
                copy[..part.len()].copy_from_slice(part);
                small += 1;
                copy.as_ptr()
            } else {
                part.as_ptr()
            };
            self.iov[count] = libc::iovec {
                iov_base: base.cast_mut().cast(),
                iov_len: part.len(),
            };
            count += 1;
        }
        self.count = count;
        count
    }

    /// How many parts it was last pointed at.
    pub fn parts(&self) -> usize {
        self.count
    }

    /// The header as the submission takes it (pointing at this value's iovecs).
    fn header(&mut self) -> *const libc::msghdr {
        self.msg.msg_iov = self.iov.as_mut_ptr();
        self.msg.msg_iovlen = self.count as _;
        &self.msg
    }
}

/// A submission in the kernel, in its place in [`Ring`]'s table.
struct Slot<B> {
    /// The caller's user data.
    user_data: u64,
    /// The submission while it is in the kernel; `None` when the slot is free.
    sqe: Option<Sqe<B>>,
    /// A `Writev`'s iovecs.
    iovecs: Vec<libc::iovec>,
    /// Stands in for a slot leaked with its operation in the kernel: never used again.
    abandoned: bool,
}

impl<B> Slot<B> {
    fn free() -> Slot<B> {
        Slot {
            user_data: 0,
            sqe: None,
            iovecs: Vec::new(),
            abandoned: false,
        }
    }
}

/// An io_uring whose submissions own what they point at.
///
/// *Ownership.* [`Ring::push`] takes a [`Sqe`] — buffers, iovecs, a message header — into a
/// slot of the ring's table and sends the kernel the slot's index as user data; the slot is
/// boxed, so nothing it holds moves when the table grows, and nothing reads, moves or frees it
/// until [`Ring::reap`] takes the completion, which gives the `Sqe` back once, with its result
/// and the caller's user data. So every address an entry carries stays valid until the kernel
/// is done with it, and callers push without `unsafe`.
///
/// *Ending.* [`Ring::cancel_all`] cancels what is in the kernel, [`Ring::drain`] waits for it;
/// dropping a ring with operations in the kernel does both (up to [`RING_DROP_WAIT_NS`]) and
/// leaks, never frees, what the kernel still holds after that.
///
/// *Loans.* Two kinds of memory are lent, not given: a receive's room ([`SpareLoan`], a
/// vector's spare capacity, kept by `InBuf`, which does not grow, reset or free a lent vector
/// and checks at [`take_lent`] that it is the one lent), and the large parts of a [`SendMsg`]
/// (a connection's queued replies, kept by its `out_lent`). Their lenders keep them until the
/// completion, and leak them if it never comes.
///
/// Worked example: the file backend pushes a 4 KiB read into slot 3 with user data 17; the
/// kernel sees user data 3; the completion comes back as `Cqe { user_data: 17, result: 4096,
/// sqe: Sqe::Read { buf, .. } }` and the buffer goes back to the backend's request, once.
pub struct Ring<B: IoBytes> {
    ring: io_uring::IoUring,
    slots: Vec<Box<Slot<B>>>,
    free: Vec<usize>,
    /// Submissions pushed and not yet reaped.
    in_flight: usize,
}

// SAFETY: the raw pointers in the slots (iovecs, message headers, loans) are addresses for the
// kernel into memory the ring owns or its lender keeps; the ring never reads or writes through
// them, so moving it to another thread (with its owner) races on nothing.
unsafe impl<B: IoBytes> Send for Ring<B> {}

impl<B: IoBytes> Ring<B> {
    /// A ring of `entries` submission slots, set up as the kernel's defaults.
    pub fn new(entries: u32) -> io::Result<Ring<B>> {
        Self::build(&io_uring::IoUring::builder(), entries)
    }

    /// A ring of `entries` submission slots set up by `builder`.
    pub fn build(builder: &io_uring::Builder, entries: u32) -> io::Result<Ring<B>> {
        Ok(Ring {
            ring: builder.build(entries)?,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
        })
    }

    /// The opcodes this kernel's io_uring supports.
    pub fn probe(&self) -> io::Result<io_uring::Probe> {
        let mut probe = io_uring::Probe::new();
        self.ring.submitter().register_probe(&mut probe)?;
        Ok(probe)
    }

    /// The ring's descriptor (readable when completions are posted).
    pub fn raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Submissions pushed and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether the submission queue has no room (submit, then push again).
    pub fn is_full(&mut self) -> bool {
        self.ring.submission().is_full()
    }

    /// Whether completions wait to be reaped.
    pub fn has_completions(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Whether the kernel flags deferred task work (completions it posts at the next enter).
    pub fn task_work_pending(&mut self) -> bool {
        self.ring.submission().taskrun()
    }

    /// The completion queue's size.
    pub fn cq_entries(&self) -> u32 {
        self.ring.params().cq_entries()
    }

    /// Pushes `sqe`; its completion carries `user_data`. Gives it back when the submission
    /// queue is full.
    pub fn push(&mut self, user_data: u64, sqe: Sqe<B>) -> Result<(), Sqe<B>> {
        if self.ring.submission().is_full() {
            return Err(sqe);
        }
        let target = match &sqe {
            Sqe::Cancel { target } => self.slot_of(*target).map_or(NO_SLOT, |i| i as u64),
            _ => NO_SLOT,
        };
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Box::new(Slot::free()));
                self.slots.len() - 1
            }
        };
        let slot = &mut *self.slots[index];
        debug_assert!(slot.sqe.is_none() && !slot.abandoned);
        slot.user_data = user_data;
        let sqe = slot.sqe.insert(sqe);
        let entry = entry_of(sqe, &mut slot.iovecs, target).user_data(index as u64);
        // SAFETY: every address in `entry` points at memory that stays valid and in place
        // until the kernel completes it (see *Ownership* and *Loans* above): the buffers,
        // iovecs and message header belong to `sqe` and `slot.iovecs`, inside the boxed slot,
        // which nothing reads, moves or frees until `reap` takes the completion out, or which
        // is leaked (`forget_in_flight`); a receive's room and a message's large parts are
        // kept by their lenders until then.
        let pushed = unsafe { self.ring.submission().push(&entry) }.is_ok();
        assert!(pushed, "the submission queue had room");
        self.in_flight += 1;
        Ok(())
    }

    /// The slot of the operation in the kernel pushed with `user_data` (not a cancel).
    fn slot_of(&self, user_data: u64) -> Option<usize> {
        self.slots.iter().position(|s| {
            s.user_data == user_data
                && s.sqe
                    .as_ref()
                    .is_some_and(|sqe| !matches!(sqe, Sqe::Cancel { .. }))
        })
    }

    /// Gives the kernel what was pushed.
    pub fn submit(&mut self) -> io::Result<usize> {
        self.ring.submit()
    }

    /// Gives the kernel what was pushed and waits until `want` completions are posted, up to
    /// `timeout_ns` (`None`: no limit). A wait of 0 still runs deferred task work.
    pub fn enter(&mut self, want: usize, timeout_ns: Option<u64>) -> io::Result<usize> {
        let ts;
        let mut args = io_uring::types::SubmitArgs::new();
        if let Some(ns) = timeout_ns {
            ts = io_uring::types::Timespec::new()
                .sec(ns / 1_000_000_000)
                .nsec((ns % 1_000_000_000) as u32);
            args = args.timespec(&ts);
        }
        self.ring.submitter().submit_with_args(want, &args)
    }

    /// Moves every posted completion to `out`, each with its submission given back; returns
    /// how many.
    pub fn reap(&mut self, out: &mut Vec<Cqe<B>>) -> usize {
        let before = out.len();
        let slots = &mut self.slots;
        for entry in self.ring.completion() {
            let index = entry.user_data() as usize;
            let Some(slot) = slots.get_mut(index) else {
                debug_assert!(false, "a completion for no slot ({index})");
                continue;
            };
            let Some(sqe) = slot.sqe.take() else {
                // A late completion of a leaked operation: its memory stays leaked.
                debug_assert!(slot.abandoned, "a second completion for slot {index}");
                continue;
            };
            self.free.push(index);
            self.in_flight -= 1;
            out.push(Cqe {
                user_data: slot.user_data,
                result: entry.result(),
                sqe,
            });
        }
        out.len() - before
    }

    /// Pushes a cancel, carrying `user_data`, of every operation in the kernel (submitting
    /// when the queue is full); returns how many were pushed.
    pub fn cancel_all(&mut self, user_data: u64) -> usize {
        let targets: Vec<u64> = (0..self.slots.len())
            .filter(|&i| {
                let s = &self.slots[i];
                s.sqe
                    .as_ref()
                    .is_some_and(|sqe| !matches!(sqe, Sqe::Cancel { .. }))
            })
            .map(|i| self.slots[i].user_data)
            .collect();
        let mut pushed = 0;
        for target in targets {
            let mut sqe = Sqe::Cancel { target };
            loop {
                match self.push(user_data, sqe) {
                    Ok(()) => {
                        pushed += 1;
                        break;
                    }
                    Err(back) if self.submit().is_ok() => sqe = back,
                    Err(_) => return pushed,
                }
            }
        }
        pushed
    }

    /// Waits, up to `wait_ns`, until nothing is in the kernel, moving the completions to
    /// `out`; returns whether nothing is.
    pub fn drain(&mut self, wait_ns: u64, out: &mut Vec<Cqe<B>>) -> bool {
        let start = std::time::Instant::now();
        loop {
            self.reap(out);
            let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if self.in_flight == 0 || waited >= wait_ns {
                return self.in_flight == 0;
            }
            // ETIME (the step's wait ran out), EINTR, EAGAIN, EBUSY: go round again. Anything
            // else (a single-issuer ring entered from another thread: EEXIST) will not change
            // by waiting; what is in the kernel stays there.
            if let Err(e) = self.enter(1, Some((wait_ns - waited).min(DRAIN_STEP_NS))) {
                let again = [libc::ETIME, libc::EINTR, libc::EAGAIN, libc::EBUSY];
                if !e.raw_os_error().is_some_and(|n| again.contains(&n)) {
                    return false;
                }
            }
        }
    }

    /// Leaks whatever is still in the kernel (its slots are never used again): for an
    /// operation the kernel did not give back in time.
    pub fn forget_in_flight(&mut self) {
        for slot in self.slots.iter_mut() {
            if slot.sqe.is_some() {
                let mut stand_in = Box::new(Slot::free());
                stand_in.abandoned = true;
                std::mem::forget(std::mem::replace(slot, stand_in));
            }
        }
        self.in_flight = 0;
    }
}

impl<B: IoBytes> Drop for Ring<B> {
    fn drop(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        self.cancel_all(NO_SLOT);
        let mut done = Vec::new();
        if !self.drain(RING_DROP_WAIT_NS, &mut done) {
            self.forget_in_flight();
        }
    }
}

/// The entry for `sqe`, its pointers taken from `sqe` itself (and `iovecs`, which it fills for
/// a `Writev`); `cancel_target` is the kernel user data a cancel names.
fn entry_of<B: IoBytes>(
    sqe: &mut Sqe<B>,
    iovecs: &mut Vec<libc::iovec>,
    cancel_target: u64,
) -> io_uring::squeue::Entry {
    use io_uring::{opcode, types::Fd};
    match sqe {
        Sqe::Read {
            fd,
            offset_bytes,
            buf,
            from,
        } => {
            let bytes = &mut buf.io_bytes()[*from..];
            opcode::Read::new(Fd(*fd), bytes.as_mut_ptr(), bytes.len() as u32)
                .offset(*offset_bytes)
                .build()
        }
        Sqe::Write {
            fd,
            offset_bytes,
            buf,
            from,
            rw_flags,
        } => {
            let bytes = &mut buf.io_bytes()[*from..];
            opcode::Write::new(Fd(*fd), bytes.as_mut_ptr(), bytes.len() as u32)
                .offset(*offset_bytes)
                .rw_flags(*rw_flags)
                .build()
        }
        Sqe::Writev {
            fd,
            offset_bytes,
            bufs,
            rw_flags,
        } => {
            iovecs.clear();
            iovecs.extend(bufs.iter_mut().map(|b| {
                let bytes = b.io_bytes();
                libc::iovec {
                    iov_base: bytes.as_mut_ptr().cast(),
                    iov_len: bytes.len(),
                }
            }));
            opcode::Writev::new(Fd(*fd), iovecs.as_ptr(), iovecs.len() as u32)
                .offset(*offset_bytes)
                .rw_flags(*rw_flags)
                .build()
        }
        Sqe::Fdatasync { fd } => opcode::Fsync::new(Fd(*fd))
            .flags(io_uring::types::FsyncFlags::DATASYNC)
            .build(),
        Sqe::Fallocate {
            fd,
            offset_bytes,
            len_bytes,
            mode,
        } => opcode::Fallocate::new(Fd(*fd), *len_bytes)
            .offset(*offset_bytes)
            .mode(*mode)
            .build(),
        Sqe::Recv { fd, loan } => {
            opcode::Recv::new(Fd(*fd), loan.ptr, loan.len.min(u32::MAX as usize) as u32).build()
        }
        Sqe::SendMsg { fd, msg, flags } => opcode::SendMsg::new(Fd(*fd), msg.header())
            .flags(*flags)
            .build(),
        Sqe::PollIn { fd } => opcode::PollAdd::new(Fd(*fd), libc::POLLIN as u32).build(),
        Sqe::Cancel { .. } => opcode::AsyncCancel::new(cancel_target).build(),
    }
}

/// An owned, zero-filled heap allocation of `capacity_bytes` at an `align_bytes` boundary: the
/// bytes behind an [`IoBuf`](crate::buf::IoBuf). Like a `Box<[u8]>` whose address meets
/// `O_DIRECT`'s alignment; the slices it hands out cover the whole capacity.
pub struct AlignedBytes {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: the value uniquely owns its allocation (like `Box<[u8]>`); no aliasing handle exists.
unsafe impl Send for AlignedBytes {}

impl AlignedBytes {
    /// A zeroed allocation (a client never sees a previous owner's bytes); `capacity_bytes` > 0
    /// and `align_bytes` a power of two.
    pub fn zeroed(capacity_bytes: usize, align_bytes: usize) -> AlignedBytes {
        assert!(capacity_bytes > 0, "an empty aligned allocation");
        let layout = std::alloc::Layout::from_size_align(capacity_bytes, align_bytes)
            .expect("aligned allocation: size and alignment valid");
        // SAFETY: the layout has a non-zero size (asserted above).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout);
        };
        AlignedBytes { ptr, layout }
    }

    pub fn capacity_bytes(&self) -> usize {
        self.layout.size()
    }

    /// The whole allocation.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `layout.size()` initialized (zeroed at allocation) bytes
        // for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The whole allocation, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBytes {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout, freed once (here).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A pipe's two ends, `(read, write)`, close-on-exec (tests give a file backend a descriptor
/// that is not a regular file).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors the call writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// One `writev` of `parts` (at most `IOV_MAX` are passed); returns bytes written.
pub fn writev(fd: RawFd, parts: &[IoSlice<'_>]) -> io::Result<usize> {
    let count = parts.len().min(1024) as libc::c_int;
    // SAFETY: `IoSlice` is ABI-compatible with `struct iovec` on Unix; each points into a
    // buffer the caller borrows for the call; the kernel only reads them.
    let n = unsafe { libc::writev(fd, parts.as_ptr().cast(), count) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Which socket queue [`socket_queue_bytes`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketQueue {
    /// Received, not yet read (`FIONREAD`).
    Receive,
    /// Sent, not yet acknowledged by the peer (`TIOCOUTQ`).
    Send,
}

/// Bytes in one of a socket's queues; 0 if the query fails.
pub fn socket_queue_bytes(fd: RawFd, queue: SocketQueue) -> usize {
    let request = match queue {
        SocketQueue::Receive => libc::FIONREAD,
        SocketQueue::Send => libc::TIOCOUTQ,
    };
    let mut n: libc::c_int = 0;
    // SAFETY: both requests write one int through the pointer, which points at a valid int.
    let rc = unsafe { libc::ioctl(fd, request, &mut n) };
    if rc < 0 {
        0
    } else {
        n.max(0) as usize
    }
}

/// Shuts a socket's write side (FIN after what is queued); errors are ignored (the socket may
/// already be dead, which is what the caller is finding out).
pub fn shutdown_write(fd: RawFd) {
    // SAFETY: plain syscall on an integer descriptor, no memory passed.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// Sets the accept queue length of a listening socket (`listen` again: Linux takes the new
/// backlog for a socket already listening; it caps it at `net.core.somaxconn`).
pub fn listen(fd: RawFd, backlog: i32) -> io::Result<()> {
    // SAFETY: plain syscall on an integer descriptor, no memory passed.
    check(unsafe { libc::listen(fd, backlog) }).map(|_| ())
}

/// Waits up to `timeout_ms` for any of `fds` to be ready; returns how many are (their
/// `revents` are set). Interrupted: Ok(0).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: the kernel reads and writes exactly `fds.len()` pollfd entries of the slice.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(n as usize)
}

/// Asks for 1 ns timer slack on this thread (the default 50 µs would make a worker sleeping
/// until a device event oversleep it).
pub fn set_fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Direct-I/O alignments of a file, as `statx(STATX_DIOALIGN)` reports them (0: no direct I/O).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DioAlign {
    /// Alignment of the memory a direct read or write uses, bytes.
    pub mem_bytes: u32,
    /// Alignment of a direct read's or write's file offset and length, bytes.
    pub offset_bytes: u32,
}

/// `statx(path, STATX_DIOALIGN)`: the direct-I/O alignments of `path`; `None` when the call
/// fails or the kernel does not report them (before Linux 6.1, or a file system that does not).
pub fn statx_dio_align(path: &Path) -> Option<DioAlign> {
    let cpath = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statx` is a plain C struct; all zeroes is a valid value of it.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `cpath` is a NUL-terminated string and `stx` a writable statx, both alive for
    // the whole call.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            cpath.as_ptr(),
            0,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    Some(DioAlign {
        mem_bytes: stx.stx_dio_mem_align,
        offset_bytes: stx.stx_dio_offset_align,
    })
}

/// What [`lseek`] looks for from an offset on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whence {
    /// `SEEK_DATA`: the next byte of data.
    Data,
    /// `SEEK_HOLE`: the next hole (the end of the file counts as one).
    Hole,
}

/// `lseek(fd, offset_bytes, SEEK_DATA | SEEK_HOLE)`: the offset of the next data or hole at or
/// after `offset_bytes` (ENXIO: none before the end of the file). It moves the descriptor's
/// file offset.
pub fn lseek(fd: BorrowedFd<'_>, offset_bytes: u64, whence: Whence) -> io::Result<u64> {
    let offset = libc::off_t::try_from(offset_bytes)
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let whence = match whence {
        Whence::Data => libc::SEEK_DATA,
        Whence::Hole => libc::SEEK_HOLE,
    };
    // SAFETY: lseek takes integers only; `fd` is borrowed from an owner that outlives the call.
    let rc = unsafe { libc::lseek(fd.as_raw_fd(), offset, whence) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as u64)
}

/// `ioctl(fd, BLKGETSIZE64)`: the size of the block device open as `fd`, bytes (ENOTTY for
/// anything else).
pub fn blkgetsize64(fd: BorrowedFd<'_>) -> io::Result<u64> {
    /// `_IOR(0x12, 114, size_t)` from `<linux/fs.h>`.
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through its pointer, to `bytes`, which lives for the
    // call; `fd` is borrowed from an owner that outlives it.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), BLKGETSIZE64, &mut bytes) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(bytes)
}

/// The machine's physical memory in bytes (`sysconf(_SC_PHYS_PAGES) × _SC_PAGESIZE`), or None
/// when the kernel does not say.
pub fn physical_memory_bytes() -> Option<u64> {
    // SAFETY: sysconf reads a system constant; no memory is passed.
    let (pages, page_bytes) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page_bytes > 0).then(|| pages as u64 * page_bytes as u64)
}

/// A set of signals (`sigset_t`).
pub struct SignalSet(libc::sigset_t);

impl SignalSet {
    /// The set of `signals`.
    pub fn of(signals: &[libc::c_int]) -> SignalSet {
        // SAFETY: sigset_t is plain data; sigemptyset initializes it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t owned here; an invalid signal number only makes
        // sigaddset return EINVAL, leaving the set as it was.
        unsafe {
            libc::sigemptyset(&mut set);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
        }
        SignalSet(set)
    }

    /// Blocks the set in the calling thread (`pthread_sigmask(SIG_BLOCK)`); threads spawned
    /// afterwards inherit the mask.
    pub fn block(&self) -> io::Result<()> {
        // SAFETY: valid set; the old mask is not asked for (null out-pointer).
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &self.0, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    /// Waits for a signal of the set (blocked beforehand) and returns its number (`sigwait`).
    pub fn wait(&self) -> io::Result<libc::c_int> {
        let mut sig: libc::c_int = 0;
        // SAFETY: valid set and out-pointer to a c_int owned here.
        let rc = unsafe { libc::sigwait(&self.0, &mut sig) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    /// A message grows its iovecs to the parts it is pointed at and stops at the first small
    /// part its copies have no room for.
    #[test]
    fn send_msg_takes_large_parts_and_as_many_small_ones_as_it_copies() {
        let big = [7u8; 100];
        let head = [1u8; 16];
        let mut parts = Vec::new();
        for _ in 0..200 {
            parts.push(IoSlice::new(&big));
        }
        let mut msg = SendMsg::new(2);
        assert_eq!(msg.set_parts(&parts), 200, "large parts only: all of them");
        assert_eq!(msg.iov.len(), 200);
        parts.extend([IoSlice::new(&head), IoSlice::new(&big), IoSlice::new(&head)]);
        parts.extend([IoSlice::new(&big), IoSlice::new(&head), IoSlice::new(&big)]);
        assert_eq!(msg.set_parts(&parts), 204, "stops before the third header");
        assert_eq!(msg.parts(), 204);
        assert_eq!(
            msg.iov[200].iov_base.cast_const(),
            msg.small[0].as_ptr().cast()
        );
        assert_eq!(msg.iov[201].iov_base.cast_const(), big.as_ptr().cast());
        assert_eq!(msg.iov[203].iov_len, 100);
    }

    #[test]
    fn writev_gathers_and_read_spare_appends() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let parts = [IoSlice::new(b"head"), IoSlice::new(b"-payload")];
        assert_eq!(writev(server.as_raw_fd(), &parts).expect("writev"), 12);
        let mut got = [0u8; 12];
        client.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"head-payload");

        client.write_all(b"abcdef").expect("write");
        let mut buf = Vec::with_capacity(4);
        buf.extend_from_slice(b"x");
        let mut n = 0;
        while n == 0 {
            n = read_spare(server.as_raw_fd(), &mut buf, 2).expect("read");
        }
        assert_eq!(n, 2, "at most max_bytes");
        assert_eq!(buf, b"xab");
        assert!(socket_queue_bytes(server.as_raw_fd(), SocketQueue::Receive) <= 4);
    }

    #[test]
    fn eventfd_wakes_epoll() {
        let epoll = Epoll::new().expect("epoll");
        let efd = EventFd::new().expect("eventfd");
        epoll.add(efd.raw(), 7, libc::EPOLLIN as u32).expect("add");
        let mut events = [empty_event(); 4];
        assert_eq!(epoll.wait(&mut events, 0), 0);
        efd.signal();
        assert_eq!(epoll.wait(&mut events, 1_000_000_000), 1);
        assert_eq!({ events[0].u64 }, 7);
        efd.drain();
        assert_eq!(epoll.wait(&mut events, 0), 0);
    }

    #[test]
    fn file_calls_answer_what_the_file_is() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("file");
        std::fs::write(&path, [7u8; 4096]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        // Past the end there is no data (ENXIO) and the end is a hole.
        let past = lseek(file.as_fd(), 8192, Whence::Data).expect_err("no data past the end");
        assert_eq!(past.raw_os_error(), Some(libc::ENXIO));
        assert_eq!(lseek(file.as_fd(), 0, Whence::Hole).expect("hole"), 4096);
        assert_eq!(lseek(file.as_fd(), 0, Whence::Data).expect("data"), 0);
        // A regular file is not a block device.
        let err = blkgetsize64(file.as_fd()).expect_err("not a block device");
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY));
        // The alignments, where this kernel and file system report them, are powers of two.
        if let Some(a) = statx_dio_align(&path) {
            for bytes in [a.mem_bytes, a.offset_bytes] {
                assert!(bytes == 0 || bytes.is_power_of_two(), "{a:?}");
            }
        }
    }

    /// A buffer that records when it is freed (a ring must free it only after the kernel is
    /// done with it, and once).
    struct Watched {
        bytes: Vec<u8>,
        freed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl IoBytes for Watched {
        fn io_bytes(&mut self) -> &mut [u8] {
            &mut self.bytes
        }
    }

    impl Drop for Watched {
        fn drop(&mut self) {
            self.freed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Pushes and submits a read of `len` bytes from `fd` into a [`Watched`] buffer; returns
    /// the buffer's count of frees.
    fn push_watched_read(
        ring: &mut Ring<Watched>,
        fd: RawFd,
        len: usize,
    ) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        let freed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let buf = Watched {
            bytes: vec![0; len],
            freed: freed.clone(),
        };
        let sqe = Sqe::Read {
            fd,
            offset_bytes: 0,
            buf,
            from: 0,
        };
        assert!(ring.push(5, sqe).is_ok());
        ring.submit().expect("submit");
        freed
    }

    /// A ring of `entries`, or `None` after [`testkit::skip`] where io_uring is refused.
    fn ring<B: IoBytes>(test: &str, entries: u32) -> Option<Ring<B>> {
        match Ring::new(entries) {
            Ok(ring) => Some(ring),
            Err(e) => {
                testkit::skip(test, &format!("io_uring is refused here ({e})"));
                None
            }
        }
    }

    /// Waits for `n` completions.
    fn wait_for<B: IoBytes>(ring: &mut Ring<B>, n: usize) -> Vec<Cqe<B>> {
        let mut out = Vec::new();
        while out.len() < n {
            ring.enter(1, Some(1_000_000_000)).ok();
            ring.reap(&mut out);
        }
        out
    }

    /// A write and a read through the ring give their buffers back with their completions,
    /// once each, holding what was moved; a write run's buffers come back in order.
    #[test]
    fn a_buffer_comes_back_once_with_its_completion() {
        let Some(mut ring) = ring::<Vec<u8>>("a_buffer_comes_back_once_with_its_completion", 8)
        else {
            return;
        };
        let (rx, tx) = pipe().expect("pipe");
        let write = Sqe::Write {
            fd: tx.as_raw_fd(),
            offset_bytes: 0,
            buf: b"xxhello".to_vec(),
            from: 2,
            rw_flags: 0,
        };
        assert!(ring.push(11, write).is_ok());
        let read = Sqe::Read {
            fd: rx.as_raw_fd(),
            offset_bytes: 0,
            buf: vec![0u8; 5],
            from: 0,
        };
        assert!(ring.push(12, read).is_ok());
        assert_eq!(ring.in_flight(), 2);
        let mut done = wait_for(&mut ring, 2);
        done.sort_by_key(|c| c.user_data);
        assert_eq!((done[0].user_data, done[0].result), (11, 5));
        assert!(matches!(&done[0].sqe, Sqe::Write { buf, .. } if buf == b"xxhello"));
        assert_eq!((done[1].user_data, done[1].result), (12, 5));
        assert!(matches!(&done[1].sqe, Sqe::Read { buf, .. } if buf == b"hello"));
        assert_eq!(ring.in_flight(), 0);
        ring.enter(0, None).ok();
        assert_eq!(ring.reap(&mut done), 0, "no second completion");

        let run = Sqe::Writev {
            fd: tx.as_raw_fd(),
            offset_bytes: 0,
            bufs: vec![b"ab".to_vec(), b"cde".to_vec()],
            rw_flags: 0,
        };
        assert!(ring.push(13, run).is_ok());
        let done = wait_for(&mut ring, 1);
        assert_eq!(done[0].result, 5);
        assert!(
            matches!(&done[0].sqe, Sqe::Writev { bufs, .. } if bufs[0] == b"ab" && bufs[1] == b"cde")
        );
        let mut got = [0u8; 5];
        assert_eq!(super::read(rx.as_raw_fd(), &mut got).expect("read"), 5);
        assert_eq!(&got, b"abcde");
    }

    /// A full submission queue gives the submission back whole; a cancel names an operation
    /// by its user data, and the cancelled operation's buffer comes back with its completion.
    #[test]
    fn a_full_queue_gives_back_and_a_cancel_finds_its_target() {
        let Some(mut ring) =
            ring::<Vec<u8>>("a_full_queue_gives_back_and_a_cancel_finds_its_target", 2)
        else {
            return;
        };
        let (rx, _tx) = pipe().expect("pipe");
        let read = |n| Sqe::Read {
            fd: rx.as_raw_fd(),
            offset_bytes: 0,
            buf: vec![n; 4],
            from: 0,
        };
        assert!(ring.push(1, read(1)).is_ok());
        assert!(ring.push(2, read(2)).is_ok());
        assert!(ring.is_full());
        match ring.push(3, read(3)) {
            Err(Sqe::Read { buf, .. }) => assert_eq!(buf, vec![3; 4]),
            _ => panic!("a full queue takes nothing"),
        }
        ring.submit().expect("submit");
        assert!(ring.push(9, Sqe::Cancel { target: 2 }).is_ok());
        assert!(ring.push(10, Sqe::Cancel { target: 77 }).is_ok());
        let mut done = wait_for(&mut ring, 3);
        done.sort_by_key(|c| c.user_data);
        assert_eq!((done[0].user_data, done[0].result), (2, -libc::ECANCELED));
        assert!(matches!(&done[0].sqe, Sqe::Read { buf, .. } if buf == &vec![2; 4]));
        assert_eq!((done[1].user_data, done[1].result), (9, 0));
        assert_eq!((done[2].user_data, done[2].result), (10, -libc::ENOENT));
        assert_eq!(ring.in_flight(), 1, "read 1 still waits for data");
    }

    /// Dropping a ring with a read in the kernel cancels it and waits for its completion
    /// before freeing its buffer (once): data written afterwards is still in the pipe.
    #[test]
    fn dropping_a_ring_waits_for_the_kernel_before_freeing() {
        let test = "dropping_a_ring_waits_for_the_kernel_before_freeing";
        let Some(mut ring) = ring::<Watched>(test, 4) else {
            return;
        };
        let (rx, tx) = pipe().expect("pipe");
        let freed = push_watched_read(&mut ring, rx.as_raw_fd(), 4096);
        let mut out = Vec::new();
        ring.reap(&mut out);
        assert!(out.is_empty(), "a read of an empty pipe cannot complete");
        assert_eq!(freed.load(std::sync::atomic::Ordering::SeqCst), 0);
        drop(ring);
        assert_eq!(
            freed.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "freed once"
        );
        let mut tx = std::fs::File::from(tx);
        tx.write_all(&[7u8; 4096]).expect("write pipe");
        drop(tx);
        let mut got = Vec::new();
        std::fs::File::from(rx)
            .read_to_end(&mut got)
            .expect("read pipe");
        assert_eq!(got.len(), 4096, "the cancelled read took nothing");
    }

    /// What the kernel is not known to be done with is leaked, never freed: after
    /// `forget_in_flight` a ring drops without waiting and without freeing the buffer.
    #[test]
    fn a_forgotten_operation_leaks_its_buffer() {
        let Some(mut ring) = ring::<Watched>("a_forgotten_operation_leaks_its_buffer", 4) else {
            return;
        };
        let (rx, _tx) = pipe().expect("pipe");
        let freed = push_watched_read(&mut ring, rx.as_raw_fd(), 64);
        ring.forget_in_flight();
        assert_eq!(ring.in_flight(), 0);
        drop(ring);
        assert_eq!(
            freed.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "leaked, not freed"
        );
    }
}
