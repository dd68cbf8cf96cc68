//! What a scheduler reports: [`RoundStats`] for one round (what the caller's loop acts on) and
//! [`SchedulerStats`], the counters one worker's scheduler accumulates for metrics.

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundStats {
    /// Requests released by this round.
    pub submitted: u32,
    /// LC tenants held at their deficit limit with work queued (with `lc_borrows_spare`, once
    /// per hold rather than per revisit).
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
