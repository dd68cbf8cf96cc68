//! The io_uring [`Ring`]: submissions that own what they point at until their completion, and
//! the loans the socket path makes to it (a receive's room, a message's large parts).
//!
//! See [`super`] for the whole module's rules (every `unsafe` of the crate lives under `sys`)
//! and [`Ring`] for ownership, ending and loans; the provided-buffer ring of multishot receives
//! is [`super::bufring`].

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};

use super::bufring::{BufRing, Provided};

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

/// Memory a ring registers for fixed-buffer operations (`IORING_REGISTER_BUFFERS`): the
/// `(address, length)` of each region, by index, each valid and in place for as long as the
/// value lives ([`crate::buf::FixedBufs`]). [`Ring::register_buffers`] keeps the value alive as
/// long as the io_uring.
pub trait FixedRegions: Send + Sync + 'static {
    fn regions(&self) -> &[(usize, usize)];
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
    /// `read` at `offset_bytes` into `buf`'s bytes from `from` on, with `READ_FIXED`: `buf`'s
    /// bytes lie in region `index` of the ring's registered buffers
    /// ([`Ring::register_buffers`]; the kernel checks it and fails the read with EFAULT
    /// otherwise).
    ReadFixed {
        fd: RawFd,
        offset_bytes: u64,
        buf: B,
        from: usize,
        index: u16,
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
    /// A multishot `recv` into the ring's provided buffers ([`Ring::provide_buffers`]): it
    /// completes once per receive, each completion naming the buffer it filled, and stays in
    /// the kernel while they say [`Cqe::more`].
    RecvMulti { fd: RawFd },
    /// `sendmsg` of `msg`'s parts.
    SendMsg { fd: RawFd, msg: SendMsg, flags: u32 },
    /// Zero-copy `sendmsg` of `msg`'s parts (`IORING_OP_SENDMSG_ZC`, asking the notification
    /// to report whether the kernel copied after all): its first completion says
    /// [`Cqe::more`] and gives back [`Sqe::SendMsgZcSent`]; the message comes back with the
    /// notification ([`Cqe::notif`]), once the kernel no longer reads the parts' pages.
    SendMsgZc { fd: RawFd, msg: SendMsg, flags: u32 },
    /// Stands in for a [`Sqe::SendMsgZc`] in its first completion, while its message stays in
    /// the ring until the notification (pushed, a NOP).
    SendMsgZcSent { fd: RawFd },
    /// A one-shot poll for input.
    PollIn { fd: RawFd },
    /// `ASYNC_CANCEL` of the operation in the kernel pushed with user data `target` (ENOENT
    /// when there is none).
    Cancel { target: u64 },
}

/// One completion: the user data its submission was pushed with, its result (bytes moved, or
/// a negated errno) and the submission, with everything it held, given back — or, while a
/// multishot operation goes on ([`Cqe::more`]), a copy of it (a [`Sqe::RecvMulti`] holds
/// nothing).
pub struct Cqe<B> {
    pub user_data: u64,
    pub result: i32,
    pub sqe: Sqe<B>,
    /// The provided buffer the operation filled (give it back with [`Ring::recycle`]).
    pub buf: Option<Provided>,
    /// The operation stays in the kernel and completes again (`IORING_CQE_F_MORE`).
    pub more: bool,
    /// A zero-copy send's notification (`IORING_CQE_F_NOTIF`): the kernel is done with its
    /// pages; `result` says whether it copied them ([`NOTIF_USAGE_ZC_COPIED`]).
    pub notif: bool,
}

/// `IORING_SEND_ZC_REPORT_USAGE` (Linux 6.2): a zero-copy send's notification reports in its
/// result whether the data was copied after all.
pub const SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: the bit of a notification's result that says the kernel
/// copied the data (loopback always does: a local receiver gets copies of the pages).
pub const NOTIF_USAGE_ZC_COPIED: i32 = i32::MIN;

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
    /// Boxed, not a vector: it never grows, and the message stays within a submission's size.
    small: Box<[[u8; SEND_SMALL_PART_BYTES]]>,
    count: usize,
    /// The caller's number for this message (it names a zero-copy send's notification).
    pub tag: u64,
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
            small: vec![[0; SEND_SMALL_PART_BYTES]; small_parts].into_boxed_slice(),
            count: 0,
            tag: 0,
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

    /// Bytes of the parts it points at where they are (not copied in): what a zero-copy send
    /// would pin.
    pub fn lent_bytes(&self) -> usize {
        self.iov[..self.count]
            .iter()
            .filter(|v| v.iov_len > SEND_SMALL_PART_BYTES)
            .map(|v| v.iov_len)
            .sum()
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
    /// A zero-copy send that completed and awaits its notification: no cancel names it.
    notif_due: bool,
}

impl<B> Slot<B> {
    fn free() -> Slot<B> {
        Slot {
            user_data: 0,
            sqe: None,
            iovecs: Vec::new(),
            abandoned: false,
            notif_due: false,
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
/// completion, and leak them if it never comes. A zero-copy send ([`Sqe::SendMsgZc`]) is done
/// with its message's iovecs at its first completion but reads the parts' pages until its
/// notification: its slot, and the message's small-part copies with it, stays taken until
/// then, and the lender keeps the large parts until then too (`sockring::zc`).
///
/// *Provided buffers.* A multishot receive ([`Sqe::RecvMulti`]) points at no memory of its
/// own: the kernel fills buffers of the ring's provided-buffer ring ([`Ring::provide_buffers`],
/// owned by the ring, freed after the io_uring is closed with nothing in the kernel, leaked
/// with what it holds otherwise). Its slot stays taken while completions say `F_MORE`; each
/// completion names the buffer it filled ([`Cqe::buf`]), read with [`Ring::provided`] and
/// given back with [`Ring::recycle`], once.
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
    /// The provided buffers multishot receives fill (declared after `ring`: dropped once the
    /// kernel is done with them, or leaked with what it still holds).
    bufs: Option<BufRing>,
    /// The registered buffers' owner (declared after `ring`: kept until the io_uring is
    /// closed).
    fixed: Option<std::sync::Arc<dyn FixedRegions>>,
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
            bufs: None,
            fixed: None,
        })
    }

    /// Registers `home`'s regions as the ring's fixed buffers (region `i` is buffer index
    /// `i` of [`Sqe::ReadFixed`]); an error where the kernel refuses (the locked-memory limit,
    /// or buffers are registered already). The ring keeps `home` until its io_uring is closed.
    pub fn register_buffers(&mut self, home: std::sync::Arc<dyn FixedRegions>) -> io::Result<()> {
        if self.fixed.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let iovecs: Vec<libc::iovec> = home
            .regions()
            .iter()
            .map(|&(addr, len)| libc::iovec {
                iov_base: addr as *mut libc::c_void,
                iov_len: len,
            })
            .collect();
        // SAFETY: every region is memory `home` owns, valid and in place while `home` lives
        // (`FixedRegions`); this ring keeps `home` until its io_uring is closed (field order),
        // so no fixed operation of this ring can reach memory that was freed. Between
        // operations the kernel only holds the pages pinned and touches none of them.
        unsafe { self.ring.submitter().register_buffers(&iovecs)? };
        self.fixed = Some(home);
        Ok(())
    }

    /// Registers `count` (a power of two) provided buffers of `buf_bytes` as buffer group
    /// [`super::BUF_GROUP`], for [`Sqe::RecvMulti`]; an error where the kernel refuses
    /// (before Linux 5.19) or buffers are registered already.
    pub fn provide_buffers(&mut self, count: u16, buf_bytes: u32) -> io::Result<()> {
        if self.bufs.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let bufs = BufRing::new(count, buf_bytes);
        // SAFETY: the ring's entries and buffers live in `bufs`, which this ring owns from now
        // on and frees only after the io_uring is closed with nothing in the kernel (field
        // order), or leaks (`forget_in_flight`); their allocations never move.
        unsafe {
            self.ring.submitter().register_buf_ring_with_flags(
                bufs.ring_addr(),
                bufs.count(),
                super::BUF_GROUP,
                0,
            )?;
        }
        self.bufs = Some(bufs);
        Ok(())
    }

    /// The bytes a receive wrote into the provided buffer `p` names.
    pub fn provided(&self, p: &Provided) -> &[u8] {
        self.bufs
            .as_ref()
            .expect("a provided buffer from a ring without them")
            .bytes(p)
    }

    /// Gives the provided buffer `p` back to the kernel.
    pub fn recycle(&mut self, p: Provided) {
        self.bufs
            .as_mut()
            .expect("a provided buffer from a ring without them")
            .recycle(p);
    }

    /// Provided buffers out of the kernel's hands (named by completions, not recycled).
    pub fn provided_held(&self) -> usize {
        self.bufs.as_ref().map_or(0, BufRing::held)
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
        if self.ring.submission().is_full()
            || (matches!(sqe, Sqe::RecvMulti { .. }) && self.bufs.is_none())
        {
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
        slot.notif_due = false;
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
                && !s.notif_due
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

    /// Whether the kernel takes a `min_wait_usec` in an enter's arguments
    /// (`IORING_FEAT_MIN_TIMEOUT`, Linux 6.12): [`Ring::enter_min_wait`] needs it.
    pub fn has_min_wait(&self) -> bool {
        self.ring.params().is_feature_min_timeout()
    }

    /// Whether a kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`): submitting
    /// is then writing the queue's tail, and an enter is needed only to wait or to wake it.
    pub fn is_sqpoll(&self) -> bool {
        self.ring.params().is_setup_sqpoll()
    }

    /// Gives the kernel what was pushed and waits up to `min_wait_ns` for `want` completions;
    /// past it, returns as soon as one is posted (or one is there already, unreaped), up to
    /// `timeout_ns` in all: the kernel's min-timeout wait (`io_uring_getevents_arg`'s
    /// `min_wait_usec`, in whole µs, at least one). An `EINVAL` where the kernel lacks it
    /// ([`Ring::has_min_wait`]).
    pub fn enter_min_wait(
        &mut self,
        want: usize,
        min_wait_ns: u64,
        timeout_ns: u64,
    ) -> io::Result<usize> {
        let ts = io_uring::types::Timespec::new()
            .sec(timeout_ns / 1_000_000_000)
            .nsec((timeout_ns % 1_000_000_000) as u32);
        let min_wait_usec = u32::try_from(min_wait_ns / 1_000)
            .unwrap_or(u32::MAX)
            .max(1);
        let args = io_uring::types::SubmitArgs::new()
            .timespec(&ts)
            .min_wait_usec(min_wait_usec);
        self.ring.submitter().submit_with_args(want, &args)
    }

    /// Moves every posted completion to `out`, each with its submission given back; returns
    /// how many.
    pub fn reap(&mut self, out: &mut Vec<Cqe<B>>) -> usize {
        let before = out.len();
        let slots = &mut self.slots;
        let bufs = &mut self.bufs;
        for entry in self.ring.completion() {
            let index = entry.user_data() as usize;
            let flags = entry.flags();
            let result = entry.result();
            // A buffer the kernel filled is the caller's now, whatever became of the slot.
            let buf = io_uring::cqueue::buffer_select(flags).and_then(|bid| {
                let len = u32::try_from(result).unwrap_or(0);
                bufs.as_mut().map(|b| b.take(bid, len))
            });
            let Some(slot) = slots.get_mut(index) else {
                debug_assert!(false, "a completion for no slot ({index})");
                continue;
            };
            let more = io_uring::cqueue::more(flags);
            let sqe = if more {
                // Still in the kernel: the slot stays as it is.
                match &slot.sqe {
                    Some(Sqe::RecvMulti { fd }) => Sqe::RecvMulti { fd: *fd },
                    // Its message stays until the notification.
                    Some(Sqe::SendMsgZc { fd, .. }) => {
                        slot.notif_due = true;
                        Sqe::SendMsgZcSent { fd: *fd }
                    }
                    _ => {
                        debug_assert!(slot.abandoned, "F_MORE on slot {index}");
                        continue;
                    }
                }
            } else {
                let Some(sqe) = slot.sqe.take() else {
                    // A late completion of a leaked operation: its memory stays leaked.
                    debug_assert!(slot.abandoned, "a second completion for slot {index}");
                    continue;
                };
                self.free.push(index);
                self.in_flight -= 1;
                sqe
            };
            out.push(Cqe {
                user_data: slot.user_data,
                result,
                sqe,
                buf,
                more,
                notif: io_uring::cqueue::notif(flags),
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
        if self.in_flight > 0 {
            // A receive still in the kernel may write any offered buffer, a fixed read any
            // registered one.
            std::mem::forget(self.bufs.take());
            std::mem::forget(self.fixed.take());
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
        Sqe::ReadFixed {
            fd,
            offset_bytes,
            buf,
            from,
            index,
        } => {
            let bytes = &mut buf.io_bytes()[*from..];
            opcode::ReadFixed::new(Fd(*fd), bytes.as_mut_ptr(), bytes.len() as u32, *index)
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
        Sqe::RecvMulti { fd } => opcode::RecvMulti::new(Fd(*fd), super::BUF_GROUP).build(),
        Sqe::SendMsg { fd, msg, flags } => opcode::SendMsg::new(Fd(*fd), msg.header())
            .flags(*flags)
            .build(),
        Sqe::SendMsgZc { fd, msg, flags } => opcode::SendMsgZc::new(Fd(*fd), msg.header())
            .ioprio(SEND_ZC_REPORT_USAGE)
            .flags(*flags)
            .build(),
        Sqe::SendMsgZcSent { .. } => opcode::Nop::new().build(),
        Sqe::PollIn { fd } => opcode::PollAdd::new(Fd(*fd), libc::POLLIN as u32).build(),
        Sqe::Cancel { .. } => opcode::AsyncCancel::new(cancel_target).build(),
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::pipe;
    use std::io::{Read, Write};

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
        assert_eq!(crate::sys::read(rx.as_raw_fd(), &mut got).expect("read"), 5);
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

    /// Regions registered by a test: one vector per region.
    struct TestRegions {
        regions: Vec<(usize, usize)>,
    }

    impl FixedRegions for TestRegions {
        fn regions(&self) -> &[(usize, usize)] {
            &self.regions
        }
    }

    /// A fixed read lands in its registered region; one that names a region its buffer does
    /// not lie in fails with EFAULT and writes nothing; a second registration is refused.
    #[test]
    fn a_fixed_read_reads_only_into_its_registered_region() {
        let test = "a_fixed_read_reads_only_into_its_registered_region";
        let Some(mut ring) = ring::<Watched>(test, 4) else {
            return;
        };
        let freed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut bufs: Vec<Watched> = (0..2)
            .map(|_| Watched {
                bytes: vec![0; 64],
                freed: freed.clone(),
            })
            .collect();
        let regions = bufs
            .iter_mut()
            .map(|b| (b.bytes.as_mut_ptr() as usize, b.bytes.len()))
            .collect();
        let home = std::sync::Arc::new(TestRegions { regions });
        if let Err(e) = ring.register_buffers(home.clone()) {
            testkit::skip(test, &format!("registering buffers is refused here ({e})"));
            return;
        }
        assert!(ring.register_buffers(home).is_err(), "registered once");
        let (rx, tx) = pipe().expect("pipe");
        let mut tx = std::fs::File::from(tx);
        tx.write_all(b"fixed!").expect("write pipe");
        let second = bufs.pop().expect("two buffers");
        let first = bufs.pop().expect("two buffers");
        let wrong = Sqe::ReadFixed {
            fd: rx.as_raw_fd(),
            offset_bytes: 0,
            buf: second,
            from: 0,
            index: 0,
        };
        assert!(ring.push(1, wrong).is_ok());
        let done = wait_for(&mut ring, 1);
        assert_eq!(done[0].result, -libc::EFAULT, "buffer 1 is not region 0");
        let right = Sqe::ReadFixed {
            fd: rx.as_raw_fd(),
            offset_bytes: 0,
            buf: first,
            from: 2,
            index: 0,
        };
        assert!(ring.push(2, right).is_ok());
        let done = wait_for(&mut ring, 1);
        assert_eq!(done[0].result, 6);
        assert!(
            matches!(&done[0].sqe, Sqe::ReadFixed { buf, .. } if &buf.bytes[..8] == b"\0\0fixed!")
        );
        // Buffers outlive the ring here (the test owns them): drop the ring first.
        drop(ring);
        drop(done);
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
