//! SIGINT / SIGTERM → graceful stop, SIGHUP → config reload, without async-signal-safety
//! puzzles.
//!
//! # Design
//! [`block_signals`] blocks the three signals in the calling thread *before* the server's
//! threads are spawned, so every thread inherits the mask and no thread is ever interrupted by
//! them (nor killed: SIGHUP's default action ends a process, which reset every connection
//! before it was handled); [`wait_signal`] then takes the next one synchronously with
//! `sigwait`. The caller (`ullstack serve`'s main thread) loops: SIGHUP →
//! [`crate::ServerHandle::reload`] and wait again; SIGINT or SIGTERM →
//! [`crate::ServerHandle::shutdown`] and exit.
//!
//! Worked example: `systemctl reload ullstack` → `kill -HUP` → the main thread returns from
//! `sigwait` with SIGHUP → the config file is re-read and applied, or refused with the error
//! logged (event `reload`) → back in `sigwait`. `systemctl stop` → SIGTERM → acceptor stops,
//! workers drain within `limits.shutdown_grace_ms` → the process exits 0 (or
//! [`crate::server::EXIT_GRACE_EXPIRED`] when the grace cut connections).

use std::io;

use crate::sys::SignalSet;

/// The signals `ullstack serve` handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT: stop.
    Interrupt,
    /// SIGTERM: stop.
    Terminate,
    /// SIGHUP: reload the config.
    Hangup,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
            Signal::Hangup => "SIGHUP",
        }
    }
}

fn handled_set() -> SignalSet {
    SignalSet::of(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and every thread it spawns afterwards).
pub fn block_signals() -> io::Result<()> {
    handled_set().block()
}

/// Waits for SIGINT, SIGTERM or SIGHUP (blocked beforehand).
pub fn wait_signal() -> io::Result<Signal> {
    Ok(match handled_set().wait()? {
        libc::SIGINT => Signal::Interrupt,
        libc::SIGHUP => Signal::Hangup,
        _ => Signal::Terminate,
    })
}
