//! SIGINT / SIGTERM → graceful shutdown, without async-signal-safety puzzles.
//!
//! # Design
//! [`block_shutdown_signals`] blocks both signals in the calling thread *before* the server's
//! threads are spawned, so every thread inherits the mask and no thread is ever interrupted by
//! them; [`wait_shutdown_signal`] then takes the next one synchronously with `sigwait`. The
//! caller (`ullstack serve`'s main thread) calls [`crate::ServerHandle::shutdown`] and exits 0.
//! Worked example: `kill -TERM $(pidof ullstack)` → main thread returns from `sigwait` with
//! SIGTERM → acceptor stops, workers drain in-flight I/O and reply → process exits with 0.

use std::io;

fn shutdown_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initializes it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a sigset_t.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
    }
    set
}

/// Blocks SIGINT and SIGTERM in this thread (and every thread it spawns afterwards).
pub fn block_shutdown_signals() -> io::Result<()> {
    let set = shutdown_set();
    // SAFETY: valid set; old mask not needed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits for SIGINT or SIGTERM (blocked beforehand); returns the signal's name.
pub fn wait_shutdown_signal() -> io::Result<&'static str> {
    let set = shutdown_set();
    let mut sig: libc::c_int = 0;
    // SAFETY: valid set and out-pointer.
    let rc = unsafe { libc::sigwait(&set, &mut sig) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(if sig == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    })
}
