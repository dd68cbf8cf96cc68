//! The client crate's system calls: the only `unsafe` in the crate, each behind a small safe
//! function with its SAFETY argument. They serve the bench's sub-millisecond timer
//! (`bench::timer`): a Linux `timerfd` registered with tokio's reactor, and the thread's timer
//! slack.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A non-blocking, close-on-exec CLOCK_MONOTONIC timerfd, registered with the current tokio
/// runtime's reactor for readability.
pub fn monotonic_timerfd() -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: plain syscall with constant arguments; the result is checked before use.
    let raw = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: `owned` is a valid open descriptor; AsyncFd owns it from here on, so it stays
    // open and refers to the same timer for as long as it is registered.
    let fd = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }?;
    Ok(fd)
}

/// Arms the timerfd `fd` to expire once, `after` from now (no interval).
pub fn arm_timerfd(fd: BorrowedFd<'_>, after: Duration) -> io::Result<()> {
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: after.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(after.subsec_nanos() as i32),
        },
    };
    // SAFETY: a valid descriptor borrowed for the call; `spec` outlives the call; the old
    // value is not asked for (null).
    let rc = unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads (and so clears) the timerfd's expiration count; `WouldBlock` if it has not expired.
pub fn read_timerfd(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut expirations = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live 8-byte buffer.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            expirations.as_mut_ptr().cast(),
            expirations.len(),
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Asks the kernel for 1 µs timer slack on the calling thread (default 50 µs). Best effort.
pub fn set_fine_timer_slack() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes an integer and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}
