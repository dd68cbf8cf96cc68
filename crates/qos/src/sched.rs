//! The scheduling round: one worker's token scheduler.
//!
//! (Essay written with the implementation; see the crate docs for the API walk-through.)

use serde::{Deserialize, Serialize};

use crate::bucket::SharedBucket;
use crate::cost::Op;
use crate::tenant::{TenantHandle, TenantId};

/// Opaque id of a request, chosen by the caller (the server's slab index, the simulator's
/// request id). The scheduler never interprets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// A tenant as attached to one scheduler: an index plus a generation, `Copy`, O(1) to use.
/// Keep it with the connection; it goes stale when the tenant is detached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocalTenant {
    index: u32,
    generation: u32,
}

/// How far below zero an LC tenant's balance may go before it is held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeficitLimit {
    /// A fixed number of milli-tokens for every tenant (published default: 50 tokens).
    FixedMtok(u64),
    /// The tenant's reservation × this window (e.g. 100 µs of its rate): scales with the tenant.
    RateWindowNs(u64),
}

/// When the shared bucket is emptied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BucketReset {
    /// After every worker has run a round since the last reset (as published), or when the
    /// bucket is older than `bucket_max_age_ns`.
    AfterEveryWorkerRound,
    /// Never (ablation: lets donations pile up into bursts).
    Never,
}

/// Settings of a scheduler; a `[qos]` table in the server's config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// How far into debt an LC tenant may go.
    pub deficit_limit: DeficitLimit,
    /// Share of an LC balance above its cap that is donated, percent (published: 90).
    pub donate_pct: u8,
    /// An LC tenant's cap is its earnings over this many of the worker's last rounds (published: 3).
    pub cap_rounds: u8,
    /// When the shared bucket is emptied.
    pub bucket_reset: BucketReset,
    /// Empty the bucket at least this often even if a worker stopped running rounds, ns.
    pub bucket_max_age_ns: u64,
}

/// Published deficit limit: 50 tokens.
pub const DEFAULT_DEFICIT_LIMIT_MTOK: u64 = 50_000;

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            deficit_limit: DeficitLimit::FixedMtok(DEFAULT_DEFICIT_LIMIT_MTOK),
            donate_pct: 90,
            cap_rounds: 3,
            bucket_reset: BucketReset::AfterEveryWorkerRound,
            bucket_max_age_ns: 1_000_000,
        }
    }
}

/// A bad scheduler setting.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `donate_pct` above 100.
    #[error("donate_pct = {0}; expected 0..=100")]
    DonatePct(u8),
    /// `cap_rounds` of zero or more than the history kept.
    #[error("cap_rounds = {0}; expected 1..={max}", max = MAX_CAP_ROUNDS)]
    CapRounds(u8),
}

/// Most rounds of history the cap can span.
pub const MAX_CAP_ROUNDS: u8 = 8;

/// Errors of per-request scheduler calls.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// The `LocalTenant` was never attached here or has been detached.
    #[error("tenant slot {index} (generation {generation}) is not attached to this scheduler")]
    NotAttached {
        /// Slot index.
        index: u32,
        /// Generation the caller held.
        generation: u32,
    },
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundStats {
    /// Requests released by this round.
    pub submitted: u32,
    /// LC tenants held at their deficit limit with work queued.
    pub deficit_hits: u32,
    /// Whether this round emptied the shared bucket.
    pub bucket_reset: bool,
}

/// Cumulative counters of one scheduler, for per-worker metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Rounds run.
    pub rounds: u64,
    /// Rounds that found nothing queued (the cheap path).
    pub idle_rounds: u64,
    /// Requests released.
    pub submitted: u64,
    /// Requests queued now.
    pub queued: u64,
    /// Tenants attached now.
    pub tenants: u32,
}

/// One worker's token scheduler. Not `Sync`: each worker owns one; they share only the
/// [`SharedBucket`] and the tenants' ledgers.
#[derive(Debug)]
pub struct Scheduler {
    shared: SharedBucket,
    config: SchedulerConfig,
}

impl Scheduler {
    /// A scheduler for one worker of the device behind `shared`.
    pub fn new(shared: SharedBucket, config: SchedulerConfig) -> Result<Self, ConfigError> {
        let _ = (&shared, &config);
        todo!()
    }

    /// The shared handle this scheduler uses.
    pub fn shared(&self) -> &SharedBucket {
        &self.shared
    }

    /// Its settings.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Makes an admitted tenant schedulable on this worker. Attaching the same tenant to
    /// several workers is allowed: it earns and pays once overall.
    pub fn attach(&mut self, tenant: &TenantHandle) -> LocalTenant {
        let _ = tenant;
        todo!()
    }

    /// Removes a tenant from this worker; its queued (never released) requests are appended to
    /// `unsent` so the caller can fail them.
    pub fn detach(
        &mut self,
        tenant: LocalTenant,
        unsent: &mut Vec<RequestId>,
    ) -> Result<TenantId, SchedError> {
        let _ = (tenant, unsent);
        todo!()
    }

    /// The cost of a request under the load mix in force, mtok.
    pub fn cost_mtok(&self, op: Op, len_bytes: u64) -> u64 {
        self.shared
            .cost_model()
            .request_cost_mtok(op, len_bytes, self.shared.load_mix())
    }

    /// Queues a request of `cost_mtok` for `tenant`. It is released by a later [`Self::round`].
    pub fn enqueue(
        &mut self,
        tenant: LocalTenant,
        cost_mtok: u64,
        request: RequestId,
    ) -> Result<(), SchedError> {
        let _ = (tenant, cost_mtok, request);
        todo!()
    }

    /// Runs one scheduling round at `now_ns` (monotonic, any epoch): appends to `out`, in
    /// order, the requests that may be submitted now. Cheap when nothing is queued.
    pub fn round(&mut self, now_ns: u64, out: &mut Vec<RequestId>) -> RoundStats {
        let _ = (now_ns, out);
        todo!()
    }

    /// Requests queued on this worker.
    pub fn queued(&self) -> u64 {
        todo!()
    }

    /// Brings the lazily kept counters of idle tenants up to date (call before a metrics
    /// scrape; O(tenants)).
    pub fn sync_counters(&mut self) {
        todo!()
    }

    /// Cumulative counters.
    pub fn stats(&self) -> SchedulerStats {
        todo!()
    }

    /// The handle of an attached tenant.
    pub fn tenant(&self, tenant: LocalTenant) -> Result<&TenantHandle, SchedError> {
        let _ = tenant;
        todo!()
    }
}
