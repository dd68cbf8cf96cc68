//! One dataplane thread's share of the QoS scheduler, or its FIFO stand-in.
//!
//! # What it implements
//! A remote-flash dataplane thread (a worker of `ullstack serve`, or a simulated thread of
//! `ullstack sim`'s remote model) enqueues every checked request here with its cost and takes
//! back, once per loop iteration, the requests that may go to storage now. With
//! `scheduler = "on"` (the default of the server's `[qos]` and of the simulator's `[sim]`) that
//! is this crate's token [`Scheduler`]: each flow (a tenant's default flow or a REGISTERed one)
//! earns tokens at its reservation or the BE share and pays each request's cost
//! (`ceil(len / 4 KiB) × unit(op)`, writes ~10× reads on device "A"). With `"off"` every request
//! is released in arrival order in the same iteration — the baseline the `reflex` study and
//! remote.md compare against.
//!
//! # Design
//! A thin adapter, so a dataplane loop has one code path for both modes, and the server and
//! the simulator run the same one: [`Flow`] is a [`LocalTenant`] or the FIFO marker, and
//! [`SchedShare::round`] appends released ids in order. Worked example: two 4 KiB reads and a
//! 4 KiB write of a BE tenant with a 100 K tokens/s share arrive in one step; after 50 µs its
//! balance is 5 tokens: the round releases both reads (1 token each) and keeps the write
//! (10 tokens) queued until ~80 µs later. `tests/share.rs` checks that the adapter changes no
//! decision of the scheduler's, one thread or several on one bucket, and the FIFO baseline.
//!
//! Prices: [`SchedShare::cost_mtok`] is the scheduler's price under the device's current load
//! mix (a read costs less while every tenant is read-only). In FIFO mode nothing is charged
//! (`enqueue` ignores the cost), and the price it reports, for a tenant's tokens/s, is the
//! profile's mixed-load one.
//!
//! Unpaced requests ([`SchedShare::enqueue_unpaced`]) skip the tokens in both modes: the
//! server queues there the requests of a volume whose own profile never paces it (a memory
//! volume beside flash volumes, whose bucket is the flash device's), so they are released at
//! the next round and charged to no bucket.
//!
//! # What it leaves out
//! Nothing of the algorithm: that is [`Scheduler`]'s. Logging is the caller's:
//! [`SchedShare::detach`] returns the scheduler's error instead.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::{
    ConfigError, CostModel, LoadMix, LocalTenant, Op, RequestId, SchedError, Scheduler,
    SchedulerConfig, SharedBucket, TenantHandle,
};

/// Whether requests pass through the token scheduler (`scheduler = "on" | "off"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerMode {
    /// Every request waits for its tenant's tokens (the product).
    #[default]
    On,
    /// Requests go to storage in arrival order (the "without the scheduler" baseline).
    Off,
}

/// A flow as attached to one thread's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Tokens(LocalTenant),
    /// FIFO mode: no state per flow.
    Fifo,
}

/// One thread's scheduler: the token scheduler or the FIFO baseline.
pub struct SchedShare {
    mode: Mode,
    /// Requests that bypass the tokens ([`SchedShare::enqueue_unpaced`]), released at the
    /// next round in arrival order.
    unpaced: VecDeque<RequestId>,
}

enum Mode {
    Tokens(Box<Scheduler>),
    Fifo {
        queue: VecDeque<RequestId>,
        /// The profile's prices, for [`SchedShare::cost_mtok`] only.
        cost: CostModel,
    },
}

impl SchedShare {
    /// A share of `shared` (the registry's bucket); in FIFO mode only its cost model is kept.
    pub fn new(
        mode: SchedulerMode,
        shared: SharedBucket,
        tuning: SchedulerConfig,
    ) -> Result<SchedShare, ConfigError> {
        let mode = match mode {
            SchedulerMode::On => Mode::Tokens(Box::new(Scheduler::new(shared, tuning)?)),
            SchedulerMode::Off => Mode::Fifo {
                queue: VecDeque::new(),
                cost: shared.cost_model(),
            },
        };
        Ok(SchedShare {
            mode,
            unpaced: VecDeque::new(),
        })
    }

    pub fn attach(&mut self, handle: &TenantHandle) -> Flow {
        match &mut self.mode {
            Mode::Tokens(s) => Flow::Tokens(s.attach(handle)),
            Mode::Fifo { .. } => Flow::Fifo,
        }
    }

    /// Detaches a flow; requests it still had queued go to `unsent` (in FIFO mode they stay
    /// queued and are released in order).
    pub fn detach(&mut self, flow: Flow, unsent: &mut Vec<RequestId>) -> Result<(), SchedError> {
        match (&mut self.mode, flow) {
            (Mode::Tokens(s), Flow::Tokens(t)) => s.detach(t, unsent).map(|_| ()),
            (Mode::Fifo { .. }, Flow::Fifo) => Ok(()),
            _ => unreachable!("a flow of the other scheduler mode"),
        }
    }

    /// The price of a request: the scheduler's under the current load mix; in FIFO mode (where
    /// nothing is charged) the profile's mixed-load price.
    pub fn cost_mtok(&self, op: Op, len_bytes: u64) -> u64 {
        match &self.mode {
            Mode::Tokens(s) => s.cost_mtok(op, len_bytes),
            Mode::Fifo { cost, .. } => cost.request_cost_mtok(op, len_bytes, LoadMix::Mixed),
        }
    }

    /// Queues a request of `cost_mtok` (ignored in FIFO mode). A flow is attached before any
    /// of its requests is enqueued; a stale flow is the caller's bug and would lose the
    /// request, so it panics.
    pub fn enqueue(&mut self, flow: Flow, cost_mtok: u64, id: RequestId) {
        match (&mut self.mode, flow) {
            (Mode::Tokens(s), Flow::Tokens(t)) => {
                if let Err(e) = s.enqueue(t, cost_mtok, id) {
                    panic!("enqueue on an unattached flow: {e}");
                }
            }
            (Mode::Fifo { queue, .. }, Flow::Fifo) => queue.push_back(id),
            _ => unreachable!("a flow of the other scheduler mode"),
        }
    }

    /// Queues a request that no token bucket paces: one of a volume whose profile never paces
    /// it (a memory volume on a server whose bucket is a flash device's). It is released at
    /// the next round, before the paced requests, and charged nothing.
    pub fn enqueue_unpaced(&mut self, id: RequestId) {
        self.unpaced.push_back(id);
    }

    /// Runs a round at `now_ns`, appending released ids to `out` (the unpaced ones first);
    /// returns the round's LC deficit hits (0 in FIFO mode).
    pub fn round(&mut self, now_ns: u64, out: &mut Vec<RequestId>) -> u32 {
        out.extend(self.unpaced.drain(..));
        match &mut self.mode {
            Mode::Tokens(s) => s.round(now_ns, out).deficit_hits,
            Mode::Fifo { queue, .. } => {
                out.extend(queue.drain(..));
                0
            }
        }
    }

    /// Requests held back.
    pub fn queued(&self) -> u64 {
        self.unpaced.len() as u64
            + match &self.mode {
                Mode::Tokens(s) => s.queued(),
                Mode::Fifo { queue, .. } => queue.len() as u64,
            }
    }

    /// Queued requests of latency-critical tenants, and the unpaced ones (FIFO mode has no
    /// classes: all of them), so that nothing released at the next round waits for a
    /// throttled one.
    pub fn queued_lc(&self) -> u64 {
        self.unpaced.len() as u64
            + match &self.mode {
                Mode::Tokens(s) => s.queued_lc(),
                Mode::Fifo { queue, .. } => queue.len() as u64,
            }
    }

    /// Publishes the scheduler's per-tenant counters (nothing in FIFO mode).
    pub fn sync_counters(&mut self) {
        if let Mode::Tokens(s) = &mut self.mode {
            s.sync_counters();
        }
    }
}
