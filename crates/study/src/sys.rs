//! The study crate's system calls: the only `unsafe` in the crate, each behind a small safe
//! function with its SAFETY argument. `lock` takes an advisory `flock(2)`; `interrupt` needs a
//! self-pipe and a SIGINT handler that only calls async-signal-safe functions.

use std::fs::File;
use std::os::unix::io::{AsRawFd, FromRawFd, RawFd};

/// `flock(LOCK_EX | LOCK_NB)`: `Ok(false)` when another open file description holds it.
pub fn try_flock(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock only reads the descriptor number, which `file` keeps open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

/// A close-on-exec pipe: its read end as a `File`, and its write end as a raw descriptor that
/// is never closed (a signal handler writes to it for the rest of the process).
pub fn pipe_cloexec() -> std::io::Result<(File, RawFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which has room for them.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fds[0] is the pipe's read end, just created and owned by nothing else.
    let read_end = unsafe { File::from_raw_fd(fds[0]) };
    Ok((read_end, fds[1]))
}

/// Installs `handler` for SIGINT with `SA_RESTART`. The handler must call only
/// async-signal-safe functions (signal-safety(7)): [`write_byte`] and
/// [`die_of_sigint`] are.
pub fn set_sigint_handler(handler: extern "C" fn(libc::c_int)) -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler is an `extern
    // "C" fn(c_int)`, and its callers promise it stays async-signal-safe (this function's doc).
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Restores SIGINT's default action and raises it: the process ends as Ctrl-C would have
/// ended it without a handler. Async-signal-safe.
pub fn die_of_sigint() {
    // SAFETY: signal() and raise() are async-signal-safe (signal-safety(7)); the default
    // action of SIGINT ends the process.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::raise(libc::SIGINT);
    }
}

/// Writes one byte to `fd`, ignoring the outcome (a signal handler has no one to tell).
/// Async-signal-safe.
pub fn write_byte(fd: RawFd, byte: u8) {
    // SAFETY: write() is async-signal-safe; `byte` lives across the call, and a bad or closed
    // `fd` makes write() fail with EBADF, touching no memory.
    unsafe {
        libc::write(fd, (&byte as *const u8).cast(), 1);
    }
}
