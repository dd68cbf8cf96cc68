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
//! connection's output queue (see [`Ring`], *Loans*); a multishot receive fills buffers the
//! ring itself owns (*Provided buffers*).
//!
//! The bytes of every [`IoBuf`](crate::buf::IoBuf) are an [`AlignedBytes`]: its allocation,
//! the slices over it and its release are here. So is the pipe the file backend's tests read
//! from ([`pipe`]).
//!
//! The io_uring part is split by idea: `sys/ring.rs` holds [`Ring`] and what its submissions
//! carry ([`Sqe`], [`SendMsg`], the receive loans), `sys/bufring.rs` the provided-buffer ring
//! a multishot receive fills ([`Provided`]: a buffer the kernel filled, read through the ring
//! and recycled once).
//!
//! A file volume's registered buffers ([`crate::buf::FixedBufs`]) are registered with each of
//! its rings through [`Ring::register_buffers`], which keeps their owner alive as long as the
//! io_uring, and read into with [`Sqe::ReadFixed`].
//!
//! # What it leaves out
//! Registered files, fixed-buffer writes and sends, and multishot operations other than RECV. Signals are here
//! only as the three calls `signals.rs` builds on (a mask,
//! `pthread_sigmask`, `sigwait`); what they mean for the server is there.

mod bufring;
mod ring;

pub use bufring::{Provided, BUF_GROUP};
pub use ring::{
    lend_spare, take_lent, Cqe, FixedRegions, IoBytes, Ring, SendMsg, SpareLoan, Sqe,
    NOTIF_USAGE_ZC_COPIED, RING_DROP_WAIT_NS, SEND_SMALL_PART_BYTES, SEND_ZC_REPORT_USAGE,
};

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

    /// The allocation's first byte, for addresses handed to the kernel (no reference made).
    fn base_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
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
}
