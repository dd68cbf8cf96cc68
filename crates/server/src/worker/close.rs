//! How a worker's connections end: timeouts, closing one connection, and closing all of them
//! at shutdown within the grace.
//!
//! # What it implements
//! [`Worker::scan_timeouts`] (every [`super::TIMER_SCAN_NS`]) closes connections past their
//! handshake, request or idle deadline; [`Worker::close`] closes one at once, logging its
//! `conn_close` event, detaching its flows and answering nothing more (requests it has at the
//! backend complete into the void, their charge released then); [`Worker::close_all`] ends
//! every connection at shutdown without losing replies already queued.
//!
//! # Design
//! Closing a TCP socket whose receive queue holds unread bytes makes Linux answer with RST and
//! drop the send queue's unsent tail, so at shutdown a connection with unread input or
//! unacknowledged output lingers: its write side is shut (FIN after the queued replies), its
//! input read and dropped, and it is closed once the client acknowledged everything or closed,
//! or after [`super::LINGER_DEADLINE_NS`], or at the grace deadline, whichever comes first.
//! Worked example: at SIGTERM a client has 2 replies unacknowledged in the send queue and keeps
//! pipelining; the worker shuts the write side, reads and drops what the client still sends,
//! and closes when the client's ACK empties the send queue (`shutdown`), or after 2 s
//! (`shutdown_linger`).
//!
//! # What it leaves out
//! Draining (the loop in [`super`] stops reading and lets requests finish first).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use super::{Conn, Session, Worker, LINGER_DEADLINE_NS};
use crate::clock::now_ns;
use crate::conn::{Peer, Protocol};
use crate::memory::Charge;
use crate::sys::{self, SocketQueue};

impl Worker {
    pub(super) fn scan_timeouts(&mut self, now: u64) {
        let idle_ms = self.shared.config.limits.idle_timeout_ms;
        let request_ms = self.shared.config.limits.request_timeout_ms;
        let mut expired = Vec::new();
        for (i, conn) in self.conns.iter_indexed() {
            let handshake = conn.core.handshake_deadline_ns.is_some_and(|d| now >= d);
            let idle = idle_ms > 0
                && conn.core.inflight_reqs == 0
                && now.saturating_sub(conn.core.last_active_ns) > idle_ms * 1_000_000;
            let trickle = request_ms > 0
                && conn
                    .core
                    .partial_since
                    .is_some_and(|(_, since)| now.saturating_sub(since) > request_ms * 1_000_000);
            if handshake {
                expired.push((i, "handshake_timeout"));
            } else if trickle {
                expired.push((i, "request_timeout"));
            } else if idle {
                expired.push((i, "idle_timeout"));
            }
        }
        for (i, reason) in expired {
            self.shared.metrics.protocol_error(reason);
            let peer = self.conns.get(i).map(|c| c.core.peer);
            if let Some(conn) = self.conns.get_mut(i) {
                conn.core.end.get_or_insert(reason);
            }
            if reason == "handshake_timeout" {
                tracing::info!(
                    target: "audit",
                    peer = %Peer(peer.flatten()),
                    "closed: no HELLO / NBD handshake within limits.handshake_timeout_ms"
                );
            } else if reason == "request_timeout" {
                tracing::info!(
                    target: "audit",
                    peer = %Peer(peer.flatten()),
                    "closed: a request was not received whole within limits.request_timeout_ms"
                );
            }
            self.close(i);
        }
    }

    /// Closes a connection now, for `reason` unless one was decided before.
    pub(super) fn close_now(&mut self, i: usize, reason: &'static str) {
        if let Some(conn) = self.conns.get_mut(i) {
            conn.core.end.get_or_insert(reason);
        }
        self.close(i);
    }

    /// Closes a connection now; requests it has at the backend complete into the void.
    pub(super) fn close(&mut self, i: usize) {
        // Nothing the kernel holds may be freed: its operations end first.
        self.ring_detach(i);
        // Every reference to the slot is stale from here on.
        let Some(mut conn) = self.conns.remove(i) else {
            return;
        };
        self.log_close(&conn);
        // Requests still queued or at the backend stay charged until their buffers return.
        self.shared.memory.adjust(
            conn.core.memory_owner,
            conn.core.published,
            Charge::held(conn.core.inflight_bytes),
        );
        let mut unsent = Vec::new();
        match &mut conn.session {
            Session::Native(s) => s.close(&self.shared, &mut self.sched, &mut unsent),
            Session::Nbd(s) => s.close(&self.shared),
        }
        for id in unsent {
            if let Some(req) = self.requests.remove(id.0 as usize) {
                self.release_orphan(&req);
                if let Some(b) = req.buf {
                    self.pool.give(b);
                }
            }
        }
        conn.core.discard_output(&mut self.pool);
        conn.core.release_handshake_slot(&self.shared);
        // Before the close, so no stale event can name this slot (errors: already gone).
        let _ = self.epoll.delete(conn.core.stream.as_raw_fd());
        drop(conn);
        self.in_pending[i] = false;
        self.metrics.connections.dec();
        self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
    }

    /// The `conn_close` event of a connection being closed.
    pub(super) fn log_close(&self, conn: &Conn) {
        let (protocol, tenant) = match &conn.session {
            Session::Native(s) => (Protocol::Native, s.bound().map(|(t, _)| t)),
            Session::Nbd(s) => (Protocol::Nbd, s.bound().map(|(_, t, _)| t)),
        };
        let tenant = tenant
            .filter(|t| (t.0 as usize) < self.shared.tenants.len())
            .map_or("-", |t| self.shared.tenants.get(t).name.as_str());
        let open_ms = now_ns().saturating_sub(conn.core.opened_ns) / 1_000_000;
        tracing::info!(
            event = "conn_close",
            peer = %Peer(conn.core.peer),
            protocol = protocol.name(),
            tenant,
            reason = conn.core.end.unwrap_or("closed"),
            open_ms,
            worker = self.index,
            "connection closed"
        );
    }

    /// Closes every connection at shutdown without losing replies already queued, within the
    /// shutdown grace ending at `grace_deadline_ns`.
    ///
    /// Closing a TCP socket whose receive queue holds unread bytes (a client that kept
    /// pipelining after the drain stopped reading) makes Linux answer with RST and discard the
    /// send queue's unsent tail; data arriving after the close does the same. So a connection
    /// with unread input or unacknowledged output lingers: its write side is shut (FIN after
    /// the queued replies), its input is read and dropped, and it is closed once the client
    /// has acknowledged everything or closed, or after [`LINGER_DEADLINE_NS`] — or at the
    /// grace deadline, whichever comes first. A connection closed at the grace deadline with
    /// requests unanswered, replies unsent or replies not yet taken by its client is counted
    /// as cut ([`crate::shared::Life::cut_connections`]).
    pub(super) fn close_all(&mut self, grace_deadline_ns: u64) {
        // The lingering below reads and queries the sockets itself.
        for i in 0..self.conns.slots() {
            self.ring_detach(i);
        }
        let expired = now_ns() >= grace_deadline_ns;
        let mut cut = 0usize;
        let mut lingering = Vec::new();
        for i in 0..self.conns.slots() {
            let Some(conn) = self.conns.get(i) else {
                continue;
            };
            if expired && (conn.core.inflight_reqs > 0 || conn.has_output()) {
                cut += 1;
                self.close_now(i, "shutdown_grace");
                continue;
            }
            let fd = conn.core.stream.as_raw_fd();
            if sys::socket_queue_bytes(fd, SocketQueue::Receive) > 0
                || sys::socket_queue_bytes(fd, SocketQueue::Send) > 0
            {
                sys::shutdown_write(fd);
                lingering.push(i);
            } else {
                self.close_now(i, "shutdown");
            }
        }
        let deadline = (now_ns() + LINGER_DEADLINE_NS).min(grace_deadline_ns);
        let mut scratch = vec![0u8; 64 * 1024];
        while !lingering.is_empty() && now_ns() < deadline {
            lingering.retain(|&i| {
                let Some(conn) = self.conns.get(i) else {
                    return false;
                };
                let fd = conn.core.stream.as_raw_fd();
                let done = loop {
                    if now_ns() >= deadline {
                        break false;
                    }
                    match sys::read(fd, &mut scratch) {
                        Ok(n) if n > 0 => continue,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            break sys::socket_queue_bytes(fd, SocketQueue::Send) == 0
                        }
                        // EOF or a dead socket: nothing more to deliver.
                        _ => break true,
                    }
                };
                if done {
                    self.close_now(i, "shutdown");
                }
                !done
            });
            if !lingering.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let graceless = now_ns() >= grace_deadline_ns;
        for i in lingering {
            if self.conns.get(i).is_some() {
                if graceless {
                    cut += 1;
                    self.close_now(i, "shutdown_grace");
                } else {
                    self.close_now(i, "shutdown_linger");
                }
            }
        }
        if cut > 0 {
            self.shared.cut_connections.fetch_add(cut, Ordering::AcqRel);
            tracing::warn!(
                event = "stop",
                worker = self.index,
                connections_cut = cut,
                "limits.shutdown_grace_ms passed: connections closed with replies or requests pending"
            );
        }
        // Connections handed over while we were stopping.
        for new in self.inbox.take() {
            self.shared.forget_new_conn(new.peer);
            drop(new);
        }
    }
}
