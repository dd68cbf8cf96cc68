//! SIGHUP no longer ends the process (issue 28's defect: its default action reset every
//! connection): a thread that blocked the signals `ullstack serve` handles takes SIGHUP as
//! `Signal::Hangup`, and SIGTERM as `Signal::Terminate`, from `sigwait`. The signals are sent
//! to that thread alone (`pthread_kill`), so the test harness's other threads are untouched.
//! (`crates/cli/tests/serve_cli.rs` sends them to a real `ullstack serve` process.)

use std::sync::mpsc;
use std::time::Duration;

use server::signals::{block_signals, wait_signal, Signal};

/// Starts a thread that blocks the handled signals and takes one with `sigwait`; sends it
/// `signal` and returns what it took.
fn delivered(signal: libc::c_int) -> Signal {
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        block_signals().expect("block the signals");
        // SAFETY: pthread_self has no preconditions.
        tx.send(unsafe { libc::pthread_self() }).expect("send");
        wait_signal().expect("sigwait")
    });
    let thread = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter blocked its signals");
    // SAFETY: `thread` is the waiter, alive until it took a signal; the signal is blocked
    // in it, so it stays pending until its sigwait takes it.
    let rc = unsafe { libc::pthread_kill(thread, signal) };
    assert_eq!(rc, 0, "pthread_kill");
    waiter.join().expect("waiter")
}

#[test]
fn sighup_is_taken_as_a_reload_not_by_the_default_action() {
    assert_eq!(delivered(libc::SIGHUP), Signal::Hangup);
    assert_eq!(Signal::Hangup.name(), "SIGHUP");
}

#[test]
fn sigterm_and_sigint_are_taken_as_a_stop() {
    assert_eq!(delivered(libc::SIGTERM), Signal::Terminate);
    assert_eq!(delivered(libc::SIGINT), Signal::Interrupt);
}
