//! Where the acceptor leaves a worker's new connections, and how it wakes the worker.
//!
//! # What it implements
//! A mutex-guarded list and an eventfd: the acceptor pushes a connection and signals; the
//! worker, woken by the eventfd in its wait, drains the signal and takes the whole list.
//!
//! # Design
//! One lock per accepted connection on the acceptor's side and one per wake-up on the worker's:
//! connections arrive at most at the accept rate, far below the request rate, so nothing
//! lock-free is needed. Worked example: 100 connections accepted while the worker handled one
//! step cost 100 pushes and 100 eventfd writes, one wake-up and one `take` of all 100.
//!
//! # What it leaves out
//! Which worker a connection goes to (the acceptor, [`crate::server`]).

use std::io;
use std::sync::Mutex;

use crate::conn::NewConn;
use crate::sys::EventFd;

/// Where the acceptor leaves new connections for a worker, and how it wakes it.
pub struct WorkerInbox {
    queue: Mutex<Vec<NewConn>>,
    wake: EventFd,
}

impl WorkerInbox {
    pub fn new() -> io::Result<WorkerInbox> {
        Ok(WorkerInbox {
            queue: Mutex::new(Vec::new()),
            wake: EventFd::new()?,
        })
    }

    pub fn push(&self, conn: NewConn) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
        self.wake.signal();
    }

    pub fn wake(&self) {
        self.wake.signal();
    }

    /// Consumes the wake-ups signalled so far.
    pub fn drain_wake(&self) {
        self.wake.drain();
    }

    /// The descriptor that becomes readable on a wake-up (the worker waits on it).
    pub fn wake_fd(&self) -> std::os::fd::RawFd {
        self.wake.raw()
    }

    /// The new connections left so far.
    pub fn take(&self) -> Vec<NewConn> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
