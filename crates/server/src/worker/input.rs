//! A worker's input side: one read per readable connection, decoding within the step's budget,
//! the request deadline, the memory charge, and the epoll interest that follows from them.
//!
//! # What it implements
//! Steps 2-3 of the worker's loop ([`super`]): [`Worker::read_conn`] reads once (through the
//! connection's TLS session when it has one), [`Worker::decode_conn`] turns whole frames into
//! checked requests until the budget or the connection's limits stop it, and
//! [`Worker::update_interest`] asks epoll for EPOLLIN only while the connection may take more
//! (its in-flight limits, its input read-ahead and its tenant's memory budget allow) and for
//! EPOLLOUT only while output waits.
//!
//! # Design
//! Hysteresis: a connection being read goes on to its limits; one that stopped is read again
//! once a quarter of its allowance is free ([`Worker::may_decode`]), so a client held at its
//! limit costs one wake-up per batch, not one per completed request. Worked example: limits of
//! 64 requests in flight; a client that keeps 200 queued is read to 64, stops, and is read again
//! when 16 have completed, taking up to 16 more in one step.
//!
//! # What it leaves out
//! Sending (`output.rs`) and closing (`close.rs`).

use std::io;
use std::os::fd::AsRawFd;

use super::{Conn, Session, Worker};
use crate::conn::{Closing, ConnCore, Ctx, Peer, Verdict};
use crate::inplace::{feed_chunk, ChunkDecoder, FrameInput};
use crate::memory::Charge;
use crate::shared::RunState;
use crate::tls::TlsConn;

/// A connection's session as a [`ChunkDecoder`]: decodes from its input buffer or in place
/// from a provided buffer, and stops once the verdict is not [`Verdict::Continue`] or the
/// decode itself began closing the connection (NBD's disconnect, a bad frame answered before
/// the close): what follows then waits in the input buffer, as it did when every byte was
/// there and the decode loop ended at that frame.
struct SessionDecoder<'a, 'c> {
    session: &'a mut Session,
    core: &'a mut ConnCore,
    ctx: &'a mut Ctx<'c>,
    tls: Option<&'a TlsConn>,
    verdict: Verdict,
}

impl ChunkDecoder for SessionDecoder<'_, '_> {
    fn decode<I: FrameInput>(&mut self, input: &mut I) -> bool {
        let was_open = self.core.closing == Closing::Open;
        self.verdict = match &mut *self.session {
            Session::Native(s) => s.decode(
                input,
                self.core,
                self.ctx,
                self.tls.and_then(|t| t.psk_identity()),
            ),
            Session::Nbd(s) => s.decode(input, self.core, self.ctx, self.tls),
        };
        self.verdict == Verdict::Continue && (self.core.closing == Closing::Open || !was_open)
    }
}

impl Worker {
    /// One read from a readable connection.
    pub(super) fn read_conn(&mut self, i: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        if conn.core.closing != Closing::Open || !conn.input.has_room() || conn.ring.is_some() {
            return;
        }
        let fd = conn.core.stream.as_raw_fd();
        let result = match conn.tls.as_mut() {
            Some(tls) => tls.read_from(fd, &mut conn.input),
            None => conn.input.read_from(fd),
        };
        if let Ok(n) = result {
            self.metrics.input_read_bytes.inc_by(n as u64);
        }
        self.metrics
            .input_moved_bytes
            .inc_by(conn.input.take_moved_bytes());
        let mut tls_failed = false;
        match result {
            Ok(0) => {
                // Peer closed its side: finish what is in flight, then close.
                conn.core.finish("client_closed");
            }
            Ok(_) => conn.core.last_active_ns = now,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                if e.kind() == io::ErrorKind::InvalidData {
                    tracing::info!(
                        target: "audit",
                        peer = %Peer(conn.core.peer),
                        error = %e,
                        "TLS failed; closing"
                    );
                    self.shared.metrics.protocol_error("tls");
                    tls_failed = true;
                    conn.core.finish("tls");
                }
                conn.core.finish("read_error");
            }
        }
        if conn.tls.is_some() && !conn.psk_noted {
            self.note_psk(i, tls_failed, now);
        }
        self.note_partial(i, now);
    }

    /// Starts, keeps or clears connection `i`'s request deadline: from the first time its
    /// input was seen holding part of a frame, until a frame is completed (see
    /// `limits.request_timeout_ms`; any byte resets the idle timer, this one only a whole
    /// frame). On TLS, bytes that have not become plaintext yet (part of a record) are part of
    /// a frame too, unless a whole frame waits to be decoded (then the server, not the client,
    /// is behind).
    pub(super) fn note_partial(&mut self, i: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        let consumed = conn.input.consumed_total_bytes();
        let whole_frame_waits =
            conn.input.pending_bytes() > 0 && conn.input.pending_bytes() >= conn.input.want_bytes;
        let owes_record = conn.tls.as_ref().is_some_and(|t| t.owes_record()) && !whole_frame_waits;
        conn.core.partial_since = match conn.core.partial_since {
            _ if !conn.input.incomplete_frame() && !owes_record => None,
            Some((at, since)) if at == consumed => Some((at, since)),
            _ => Some((consumed, now)),
        };
    }

    /// Decodes what a connection's input holds, within the budget, then the provided buffers
    /// a multishot receive filled for it this step, in place where their frames lie whole
    /// ([`crate::inplace`]); each of those buffers goes back to the ring here.
    pub(super) fn decode_conn(&mut self, i: usize, now: u64, budget: &mut usize) {
        let Some(mut conn) = self.conns.take(i) else {
            return;
        };
        let mut ctx = Ctx {
            shared: &self.shared,
            sched: &mut self.sched,
            requests: &mut self.requests,
            pool: &mut self.pool,
            local_flows: &mut self.local_flows,
            budget,
            now_ns: now,
        };
        // The connection's held buffers, swapped with the worker's empty list (no allocation
        // per step: each vector keeps its capacity).
        let mut held = std::mem::take(&mut self.held_scratch);
        if let Some(rc) = conn.ring.as_mut() {
            std::mem::swap(&mut rc.held, &mut held);
        }
        let Conn {
            input,
            core,
            session,
            tls,
            ..
        } = &mut conn;
        let mut decoder = SessionDecoder {
            session,
            core,
            ctx: &mut ctx,
            tls: tls.as_deref(),
            verdict: Verdict::Continue,
        };
        match self.ring.as_mut().filter(|_| !held.is_empty()) {
            None => {
                decoder.decode(input);
            }
            Some(ring) => {
                let mut go_on = true;
                let mut in_place = 0u64;
                for buf in held.drain(..) {
                    let (fed, more) = feed_chunk(input, ring.provided(&buf), go_on, &mut decoder);
                    ring.recycle(buf);
                    go_on = more;
                    in_place += fed.in_place_bytes as u64;
                }
                self.metrics.input_in_place_bytes.inc_by(in_place);
            }
        }
        self.held_scratch = held;
        let verdict = decoder.verdict;
        self.conns.put(i, conn);
        self.note_partial(i, now);
        match verdict {
            Verdict::Continue => self.mark_pending(i),
            Verdict::StartTls => {
                if let Err(reason) = self.start_tls(i) {
                    self.shared.metrics.protocol_error(reason);
                    self.close_now(i, reason);
                    return;
                }
                self.mark_pending(i);
            }
            Verdict::Close(reason) => {
                self.shared.metrics.protocol_error(reason);
                let peer = self.conns.get(i).map(|c| c.core.peer);
                tracing::info!(
                    target: "audit",
                    peer = %Peer(peer.flatten()),
                    reason,
                    "connection closed on bad input"
                );
                // Not at once: what was decoded before the bad input is answered first
                // (`flush_pending_output` closes once nothing is in flight or queued).
                if let Some(conn) = self.conns.get_mut(i) {
                    conn.core.finish(reason);
                }
                self.mark_pending(i);
            }
        }
        self.update_interest(i);
    }

    /// Whether connection `i` holds a whole undecoded frame and should be decoded again: it is
    /// a quarter below its limits (hysteresis: a connection held at its limit is decoded in
    /// batches, not once per completed request; decoding itself goes on up to the limits).
    pub(super) fn may_decode(&self, i: usize) -> bool {
        let Some(conn) = self.conns.get(i) else {
            return false;
        };
        !conn.input.data().is_empty()
            && conn.input.data().len() >= conn.input.want_bytes
            && conn.core.below_resume_mark(&self.shared.config.limits)
            && !conn.core.memory_limited(&self.shared)
    }

    /// Publishes connection `i`'s charge (in-flight payloads, queued output, input buffer, TLS
    /// buffers) to the memory ledger, in all and to its tenant.
    pub(super) fn settle(&mut self, i: usize) {
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        let tls_bytes = conn.tls.as_ref().map_or(0, |t| t.held_bytes());
        let buffers = (conn.input.capacity_bytes() + tls_bytes) as u64;
        let now = Charge::new(conn.core.held_bytes(), buffers);
        self.shared
            .memory
            .adjust(conn.core.memory_owner, conn.core.published, now);
        conn.core.published = now;
    }

    /// Restores reading on connections paused by their tenant's memory budget once the
    /// tenant is under it (checked every step; a blocked worker wakes for its timer scan).
    pub(super) fn resume_memory_paused(&mut self) {
        if self.memory_paused.is_empty() {
            return;
        }
        let paused = std::mem::take(&mut self.memory_paused);
        for i in paused {
            let Some(conn) = self.conns.get_mut(i) else {
                continue;
            };
            if !conn.core.memory_paused {
                // The slot closed (and may have been reused) since it was listed.
                continue;
            }
            if conn.core.memory_limited(&self.shared) {
                self.memory_paused.push(i);
                continue;
            }
            conn.core.memory_paused = false;
            self.mark_pending(i);
            self.update_interest(i);
        }
    }

    /// Sets the epoll interest from the connection's state.
    pub(super) fn update_interest(&mut self, i: usize) {
        let limits = &self.shared.config.limits;
        let running = self.shared.state() == RunState::Running;
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        let reading = conn.core.epoll_events & libc::EPOLLIN as u32 != 0;
        // Hysteresis: a connection being read goes on to its limits; one that stopped is read
        // again once a quarter of its allowance is free.
        let allowed = if reading {
            conn.input.has_room() && conn.core.within_limits(limits)
        } else {
            conn.input.below_resume_mark() && conn.core.below_resume_mark(limits)
        };
        let has_output = conn.has_output();
        let mut want = 0u32;
        if running && allowed {
            if conn.core.memory_limited(&self.shared) {
                if !conn.core.memory_paused {
                    conn.core.memory_paused = true;
                    self.memory_paused.push(i);
                }
            } else {
                want |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
            }
        }
        if has_output {
            want |= libc::EPOLLOUT as u32;
        }
        if conn.ring.is_some() {
            self.ring_interest(i, want);
            return;
        }
        let core = &mut conn.core;
        if want != core.epoll_events {
            if let Err(e) = self
                .epoll
                .modify(core.stream.as_raw_fd(), core.me.token(), want)
            {
                tracing::warn!(error = %e, "epoll interest change failed");
            }
            core.epoll_events = want;
        }
    }
}
