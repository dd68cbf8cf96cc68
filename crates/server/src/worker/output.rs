//! A worker's output side: queued replies go to the socket, and connections that finished are
//! closed once nothing is owed.
//!
//! # What it implements
//! Step 7 of the worker's loop ([`super`]): for each connection with work this step,
//! [`Worker::flush_output`] sends what the socket takes (one `writev` of reply headers and read
//! payloads without copying them together; a TLS connection encrypts them first), and a
//! connection that is closing after its drain is closed once it has nothing in flight and
//! nothing queued (after its TLS close_notify, when it has a session).
//!
//! # Design
//! Sending frees output allowance, so a connection whose buffered input was held back may be
//! decoded again: after each send the charge is settled and the connection is marked for the
//! next step when [`Worker::may_decode`] says so (no EPOLLIN comes for bytes read before).
//! Worked example: 32 read replies of 4 KiB queued on one connection go in one `writev` of 64
//! slices; the socket takes them all, the 32 payload buffers return to the pool.
//!
//! # What it leaves out
//! Reading (`input.rs`).

use super::Worker;
use crate::conn::{Closing, WriteOutcome};
use std::os::fd::AsRawFd;

impl Worker {
    pub(super) fn flush_pending_output(&mut self) {
        let work = self.take_pending();
        for i in work {
            let Some(conn) = self.conns.get(i) else {
                continue;
            };
            if conn.has_output() {
                self.flush_output(i);
            }
            let Some(conn) = self.conns.get(i) else {
                continue;
            };
            if conn.core.closing == Closing::AfterDrain
                && conn.core.inflight_reqs == 0
                && !conn.has_output()
            {
                let notify = self
                    .conns
                    .get_mut(i)
                    .and_then(|c| c.tls.as_mut())
                    .is_some_and(|t| t.close_notify());
                if notify {
                    // Send the TLS close_notify first; close once it is out.
                    self.flush_output(i);
                    self.mark_pending(i);
                    continue;
                }
                self.close(i);
                continue;
            }
            self.settle(i);
            if self.may_decode(i) {
                self.mark_pending(i);
            }
            self.update_interest(i);
        }
    }

    /// Writes as much queued output as the socket takes.
    pub(super) fn flush_output(&mut self, i: usize) {
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        if conn.ring.is_some() {
            // Sent by the next enter; a failure shows in the completion.
            self.ring_flush(i);
            self.settle(i);
            self.update_interest(i);
            return;
        }
        let outcome = match conn.tls.as_mut() {
            Some(tls) => {
                let fd = conn.core.stream.as_raw_fd();
                let (core, pool) = (&mut conn.core, &mut self.pool);
                match tls.pump_out(fd, |buf, max| core.drain_unsent_into(buf, pool, max)) {
                    Ok(()) => WriteOutcome::Sent,
                    Err(_) => {
                        core.discard_output(pool);
                        WriteOutcome::PeerGone
                    }
                }
            }
            None => conn.core.write_out(&mut self.pool),
        };
        if outcome == WriteOutcome::PeerGone {
            conn.core.finish("peer_gone");
            self.mark_pending(i);
        }
        // Output drained below the limit: requests already buffered can be decoded now (no
        // EPOLLIN will come for bytes that were read before).
        self.settle(i);
        if self.may_decode(i) {
            self.mark_pending(i);
        }
        self.update_interest(i);
    }
}
