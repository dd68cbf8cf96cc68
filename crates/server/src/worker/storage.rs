//! A worker's storage side: the scheduler's round, submission to the volumes' backends, and
//! completions turned into replies.
//!
//! # What it implements
//! Steps 4-6 of the worker's loop ([`super`]): [`Worker::schedule_and_submit`] runs one round
//! of the worker's scheduler share and submits what it released; [`Worker::commit_backends`]
//! hands the socket ring's file completions to their volumes and has each backend submit (or,
//! a guest of the socket ring, push into it); [`Worker::reap`] polls the backends with work and [`Worker::complete`] turns each completion into a reply on its
//! connection, with the tenant's counters and latency. A request's slab index is its scheduler
//! `RequestId` and its backend tag, so each of these is one array access.
//!
//! # Design
//! A request whose connection closed while it waited (its [`crate::conn::ConnRef`] is stale in
//! the connection table) is not submitted, or its completion is dropped; either way its memory
//! charge is released ([`Worker::release_orphan`]) and its buffer returns to the pool. Worked
//! example: a client disconnects with 3 reads at the file backend; they complete into the void
//! and the tenant's held bytes fall by their 12 KiB.
//!
//! # What it leaves out
//! The scheduler itself (crate `qos`) and the backends (`crate::backend`).

use super::Worker;
use crate::backend::{Completion, StorageOp, Submitted};
use crate::buf::{IoBuf, ReplyData};
use crate::clock::now_ns;
use crate::conn::{push_reply, Req};
use crate::memory::Charge;

impl Worker {
    /// One scheduling round; returns how many requests it released to storage.
    pub(super) fn schedule_and_submit(&mut self, now: u64) -> usize {
        self.released.clear();
        // Nothing queued: skip the round (earnings accrue by elapsed time at the next one, and
        // the shared bucket's max-age rule covers resets while this worker is idle).
        if self.sched.queued() == 0 {
            return 0;
        }
        let deficit_hits = self.sched.round(now, &mut self.released);
        let _ = deficit_hits; // per-tenant deficit hits come from the qos ledgers
        let released = std::mem::take(&mut self.released);
        for id in &released {
            self.submit_one(id.0 as usize, now);
        }
        let count = released.len();
        self.released = released;
        count
    }

    pub(super) fn submit_one(&mut self, id: usize, now: u64) {
        let Some(req) = self.requests.get_mut(id) else {
            debug_assert!(false, "released request {id} not in the slab");
            return;
        };
        let alive = self.conns.is_live(req.conn);
        if !alive {
            if let Some(req) = self.requests.remove(id) {
                self.release_orphan(&req);
                if let Some(b) = req.buf {
                    self.pool.give(b);
                }
            }
            return;
        }
        let buf = req.buf.take().unwrap_or_else(IoBuf::empty);
        let (op, class) = (req.op, req.class);
        let volume = req.volume.0 as usize;
        match self.backends[volume].submit(id as u64, op, class, buf) {
            Submitted::Done(c) => self.complete(c, now),
            Submitted::Pending => {}
        }
    }

    /// Step 5's `commit`: backends on their own rings submit what the step queued; guests of
    /// the socket ring first take the completions the step's wait reaped for them (turned
    /// into replies by [`Worker::reap`]), then push what waits — what those completions queued
    /// again first (a refused partial-block write's retry through the page cache), then the
    /// step's new requests — for the next wait's enter to submit.
    ///
    /// First the completions, then one push: a write the file system refused without waiting
    /// claims its stretch for the page cache before a new write of the stretch is offered
    /// direct, as on a ring of its own, where the refusal comes back within the submit and is
    /// requeued before the next step's writes. Pushed the other way round, the retry found
    /// the new direct writes' claim and went direct, blocking (*Coherence* in
    /// `backend/file.rs`; `tests/partial_block_writes.rs` counts the paths).
    pub(super) fn commit_backends(&mut self) {
        if let Some(ring) = self.ring.as_mut().filter(|r| r.has_guest_done()) {
            let mut count = 0u64;
            for (v, cqe) in ring.take_guest_done() {
                if let Some(guest) = self.backends.get_mut(v).and_then(|b| b.ring_guest()) {
                    guest.complete(cqe, &mut self.completions);
                    count += 1;
                }
            }
            self.metrics.socket_ring_file_ops.inc_by(count);
        }
        for (v, b) in self.backends.iter_mut().enumerate() {
            match (self.ring.as_mut(), b.ring_guest().filter(|g| g.hosted())) {
                (Some(ring), Some(guest)) => guest.fill(&mut ring.host(v)),
                _ => b.commit(),
            }
        }
    }

    pub(super) fn reap(&mut self, now: u64) -> bool {
        let mut any = false;
        // Holds the socket ring's file completions already (`commit_backends`).
        let mut out = std::mem::take(&mut self.completions);
        for b in &mut self.backends {
            if b.in_flight() > 0 || b.next_event_ns().is_some() {
                b.poll(now, &mut out);
            }
        }
        for c in out.drain(..) {
            any = true;
            self.complete(c, now);
        }
        self.completions = out;
        any
    }

    /// Turns a finished storage operation into a reply.
    pub(super) fn complete(&mut self, c: Completion, now: u64) {
        let Some(req) = self.requests.remove(c.tag as usize) else {
            debug_assert!(false, "completion for unknown request {}", c.tag);
            return;
        };
        let i = req.conn.index as usize;
        let alive = self.conns.is_current(req.conn);
        let Some(conn) = self.conns.get_mut(i).filter(|_| alive) else {
            self.release_orphan(&req);
            self.pool.give(c.buf);
            return;
        };
        conn.core.inflight_reqs -= 1;
        conn.core.inflight_bytes -= req.accounted_bytes;
        let m = &self.shared.tenant_metrics[req.tenant.0 as usize];
        // A fresh clock read: `now` is the step's start, which is also the request's start
        // when it completes within the step it was read in (memory backend, cached file I/O).
        let latency_ns = now_ns().max(now).saturating_sub(req.start_ns);
        let ok = c.result.is_ok();
        if ok {
            match req.op {
                StorageOp::Read { .. } => {
                    m.reads.inc();
                    m.read_bytes.inc_by(c.buf.len() as u64);
                    m.read_latency.observe(latency_ns as f64 * 1e-9);
                    if req.slo_p95_ns > 0 && latency_ns > req.slo_p95_ns {
                        m.slo_misses.inc();
                    }
                    if let Some(w) = &req.window {
                        w.record(latency_ns);
                    }
                }
                StorageOp::Write { .. } => {
                    m.writes.inc();
                    m.write_bytes.inc_by(c.buf.len() as u64);
                    m.write_latency.observe(latency_ns as f64 * 1e-9);
                }
                StorageOp::WriteZeroes { .. } => {
                    m.writes.inc();
                    m.write_latency.observe(latency_ns as f64 * 1e-9);
                }
                StorageOp::Flush => {
                    m.flushes.inc();
                }
                StorageOp::Trim { .. } => {
                    m.trims.inc();
                }
            }
        } else {
            m.errors.inc();
        }
        let payload = match (&c.result, req.op, c.pages) {
            (Ok(()), StorageOp::Read { .. }, Some(views)) => {
                self.pool.give(c.buf);
                Some(ReplyData::Pages(views))
            }
            (Ok(()), StorageOp::Read { .. }, None) => Some(ReplyData::Buf(c.buf)),
            _ => {
                self.pool.give(c.buf);
                None
            }
        };
        push_reply(&mut conn.core, req.reply, c.result, payload);
        self.mark_pending(i);
    }

    /// Releases the charge of a request whose connection is gone (its buffer is back).
    pub(super) fn release_orphan(&self, req: &Req) {
        self.shared.memory.adjust(
            Some(req.tenant),
            Charge::held(req.accounted_bytes),
            Charge::ZERO,
        );
    }
}
