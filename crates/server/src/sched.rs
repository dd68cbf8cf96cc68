//! One worker's share of the QoS scheduler, or its FIFO stand-in.
//!
//! # What it implements
//! The dataplane enqueues every checked request here with its cost and takes back, once per loop
//! iteration, the requests that may go to storage now. With `[qos] scheduler = "on"` (the
//! default) that is the `qos` crate's token scheduler: each flow (a tenant's default flow or a
//! REGISTERed one) earns tokens at its reservation or the BE share and pays each request's cost
//! (`ceil(len / 4 KiB) × unit(op)`, writes ~10× reads on device "A"). With `"off"` every request
//! is released in arrival order in the same iteration — the baseline remote.md compares against.
//!
//! # Design
//! A thin adapter so the worker loop has one code path for both modes: [`Flow`] is a qos
//! `LocalTenant` or the FIFO marker, and [`SchedShare::round`] appends released ids in order.
//! Worked example: two 4 KiB reads and a 4 KiB write of a BE tenant with a 100 K tokens/s share
//! arrive in one step; after 50 µs its balance is 5 tokens: the round releases both reads
//! (1 token each) and keeps the write (10 tokens) queued until ~80 µs later.
//!
//! # What it leaves out
//! Nothing of the algorithm: that lives in crate `qos`.

use std::collections::VecDeque;

use crate::config::SchedulerMode;

/// A flow as attached to one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Tokens(qos::LocalTenant),
    Fifo,
}

/// A worker's scheduler.
pub enum SchedShare {
    Tokens(Box<qos::Scheduler>),
    Fifo(VecDeque<qos::RequestId>),
}

impl SchedShare {
    pub fn new(
        mode: SchedulerMode,
        shared: qos::SharedBucket,
        tuning: qos::SchedulerConfig,
    ) -> Result<SchedShare, qos::ConfigError> {
        Ok(match mode {
            SchedulerMode::On => SchedShare::Tokens(Box::new(qos::Scheduler::new(shared, tuning)?)),
            SchedulerMode::Off => SchedShare::Fifo(VecDeque::new()),
        })
    }

    pub fn attach(&mut self, handle: &qos::TenantHandle) -> Flow {
        match self {
            SchedShare::Tokens(s) => Flow::Tokens(s.attach(handle)),
            SchedShare::Fifo(_) => Flow::Fifo,
        }
    }

    /// Detaches a flow; requests it still had queued go to `unsent`.
    pub fn detach(&mut self, flow: Flow, unsent: &mut Vec<qos::RequestId>) {
        if let (SchedShare::Tokens(s), Flow::Tokens(t)) = (self, flow) {
            if let Err(e) = s.detach(t, unsent) {
                debug_assert!(false, "detach of an unattached flow: {e}");
                tracing::warn!(error = %e, "detach of an unattached flow");
            }
        }
    }

    /// The token cost of a request (0 in FIFO mode).
    pub fn cost_mtok(&self, op: qos::Op, len_bytes: u64) -> u64 {
        match self {
            SchedShare::Tokens(s) => s.cost_mtok(op, len_bytes),
            SchedShare::Fifo(_) => 0,
        }
    }

    pub fn enqueue(&mut self, flow: Flow, cost_mtok: u64, id: qos::RequestId) {
        match (self, flow) {
            (SchedShare::Tokens(s), Flow::Tokens(t)) => {
                if let Err(e) = s.enqueue(t, cost_mtok, id) {
                    // A flow is attached before any request of it is enqueued; a stale flow is a
                    // bug in this crate, and the request would be lost: stop here in debug.
                    panic!("enqueue on an unattached flow: {e}");
                }
            }
            (SchedShare::Fifo(q), _) => q.push_back(id),
            (SchedShare::Tokens(_), Flow::Fifo) => unreachable!("FIFO flow on a token scheduler"),
        }
    }

    /// Runs a round at `now_ns`, appending released ids; returns LC deficit hits of the round.
    pub fn round(&mut self, now_ns: u64, out: &mut Vec<qos::RequestId>) -> u32 {
        match self {
            SchedShare::Tokens(s) => s.round(now_ns, out).deficit_hits,
            SchedShare::Fifo(q) => {
                out.extend(q.drain(..));
                0
            }
        }
    }

    pub fn queued(&self) -> u64 {
        match self {
            SchedShare::Tokens(s) => s.queued(),
            SchedShare::Fifo(q) => q.len() as u64,
        }
    }

    /// Queued requests of latency-critical tenants (FIFO mode has no classes: all of them, so
    /// nothing it queues ever waits for a throttled round).
    pub fn queued_lc(&self) -> u64 {
        match self {
            SchedShare::Tokens(s) => s.queued_lc(),
            SchedShare::Fifo(q) => q.len() as u64,
        }
    }

    pub fn sync_counters(&mut self) {
        if let SchedShare::Tokens(s) = self {
            s.sync_counters();
        }
    }
}
