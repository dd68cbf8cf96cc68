//! The shared bucket: the only state the workers' schedulers share.
//!
//! # What it models
//! In the published dataplane every worker thread runs its own scheduling round over its own
//! tenants; the one global is a token bucket. Latency-critical tenants that earn more than they
//! use donate into it, best-effort tenants that cannot pay for their next request take the
//! difference out of it, and it is emptied periodically — after every worker has run a round —
//! so donations are used promptly or lost, never saved up into a burst that would hurt the LC
//! tenants' tail latency.
//!
//! Alongside the bucket, this handle publishes what the control plane (the admission
//! [`crate::Registry`]) decided and the workers must read every round: the device's current
//! token rate, the BE share per BE tenant, the load mix (read-only or mixed) and the device's
//! prices. All of it is atomics behind one `Arc`: the handle is `Clone + Send + Sync` and a
//! round touches it with a few relaxed loads plus one compare-and-swap per reset epoch.
//!
//! # Reset protocol, worked example
//! Two workers, W0 and W1. The reset state is one atomic word `epoch << 32 | checked_in`.
//! W0 finishes a round in epoch 7: checked_in 0 → 1. W0 runs three more rounds: already
//! checked in for epoch 7, nothing to do. W1 finishes a round: checked_in reaches 2 = workers,
//! so W1 swaps in `8 << 32 | 0` and empties the bucket. A worker that stops calling rounds
//! (an idle thread that blocked) would stall resets, so a bucket older than
//! `bucket_max_age_ns` (default 1 ms) is emptied by the next worker that notices.
//!
//! # What it leaves out
//! Any per-worker fairness in taking from the bucket: first come, first served, as published.
//!
//! # Config keys
//! `bucket_reset`, `bucket_max_age_ns`, `bucket_carry_mtok` in [`crate::SchedulerConfig`].

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::cost::{CostModel, LoadMix};

/// `last_reset_ns` before the first check-in.
const NEVER: u64 = u64::MAX;

/// Counters of the shared bucket, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketStats {
    /// Tokens currently in the bucket, mtok.
    pub balance_mtok: u64,
    /// Total deposited (LC donations and unused BE tokens), mtok.
    pub deposited_mtok: u64,
    /// Total taken by BE tenants, mtok.
    pub taken_mtok: u64,
    /// Total thrown away by resets, mtok.
    pub discarded_mtok: u64,
    /// Number of resets.
    pub resets: u64,
}

#[derive(Debug)]
struct Inner {
    cost: CostModel,
    balance_mtok: AtomicU64,
    be_share_mtok_per_sec: AtomicU64,
    device_rate_mtok_per_sec: AtomicU64,
    /// What LC tenants earn above their reservations, ppm of it (see [`crate::admission`]).
    lc_surge_ppm: AtomicU32,
    /// 0 = mixed, 1 = read-only.
    mix: AtomicU8,
    /// `epoch << 32 | workers checked in this epoch`.
    reset_state: AtomicU64,
    workers: AtomicU32,
    last_reset_ns: AtomicU64,
    /// Bumped when some tenant becomes attached to a second worker.
    span_epoch: AtomicU64,
    /// Bumped when LC reservations change (load-mix flip).
    rates_epoch: AtomicU64,
    /// Bumped when the BE share changes.
    share_epoch: AtomicU64,
    deposited_mtok: AtomicU64,
    taken_mtok: AtomicU64,
    discarded_mtok: AtomicU64,
    resets: AtomicU64,
}

/// Handle on the state shared by all schedulers of one device. `Clone + Send + Sync`.
#[derive(Clone, Debug)]
pub struct SharedBucket {
    inner: Arc<Inner>,
}

/// What a worker's check-in at the end of its round did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CheckIn {
    /// Already checked in for this epoch, or counted without completing it.
    Counted,
    /// This worker completed the epoch (or found the bucket too old) and emptied the bucket.
    Reset,
}

impl SharedBucket {
    /// A fresh, empty bucket for a device with these prices. Normally made by
    /// [`crate::Registry::new`]; public for tests and the simulator.
    pub fn new(cost: CostModel) -> Self {
        SharedBucket {
            inner: Arc::new(Inner {
                cost,
                balance_mtok: AtomicU64::new(0),
                be_share_mtok_per_sec: AtomicU64::new(0),
                device_rate_mtok_per_sec: AtomicU64::new(0),
                lc_surge_ppm: AtomicU32::new(0),
                mix: AtomicU8::new(0),
                reset_state: AtomicU64::new(0),
                workers: AtomicU32::new(0),
                last_reset_ns: AtomicU64::new(NEVER),
                span_epoch: AtomicU64::new(0),
                rates_epoch: AtomicU64::new(0),
                share_epoch: AtomicU64::new(0),
                deposited_mtok: AtomicU64::new(0),
                taken_mtok: AtomicU64::new(0),
                discarded_mtok: AtomicU64::new(0),
                resets: AtomicU64::new(0),
            }),
        }
    }

    /// The device's prices.
    pub fn cost_model(&self) -> CostModel {
        self.inner.cost
    }

    /// Tokens currently in the bucket, mtok.
    pub fn balance_mtok(&self) -> u64 {
        self.inner.balance_mtok.load(Ordering::Relaxed)
    }

    /// What each BE tenant earns, mtok/s.
    pub fn be_share_mtok_per_sec(&self) -> u64 {
        self.inner.be_share_mtok_per_sec.load(Ordering::Relaxed)
    }

    /// The device's token rate for the strictest admitted SLO (after closed-loop scaling), mtok/s.
    pub fn device_rate_mtok_per_sec(&self) -> u64 {
        self.inner.device_rate_mtok_per_sec.load(Ordering::Relaxed)
    }

    /// What every LC tenant earns on top of its reservation, parts per million of it: the
    /// surge the registry carved out of the unreserved rate (see [`crate::admission`]).
    pub fn lc_surge_ppm(&self) -> u32 {
        self.inner.lc_surge_ppm.load(Ordering::Relaxed)
    }

    /// The load mix in force.
    pub fn load_mix(&self) -> LoadMix {
        match self.inner.mix.load(Ordering::Relaxed) {
            1 => LoadMix::ReadOnly,
            _ => LoadMix::Mixed,
        }
    }

    /// Number of schedulers currently sharing this bucket.
    pub fn workers(&self) -> u32 {
        self.inner.workers.load(Ordering::Relaxed)
    }

    /// Counters for metrics.
    pub fn stats(&self) -> BucketStats {
        let i = &self.inner;
        BucketStats {
            balance_mtok: i.balance_mtok.load(Ordering::Relaxed),
            deposited_mtok: i.deposited_mtok.load(Ordering::Relaxed),
            taken_mtok: i.taken_mtok.load(Ordering::Relaxed),
            discarded_mtok: i.discarded_mtok.load(Ordering::Relaxed),
            resets: i.resets.load(Ordering::Relaxed),
        }
    }

    /// Publishes the control plane's decision (registry only).
    pub(crate) fn publish(
        &self,
        device_rate_mtok_per_sec: u64,
        be_share_mtok_per_sec: u64,
        lc_surge_ppm: u32,
        mix: LoadMix,
    ) {
        let i = &self.inner;
        i.device_rate_mtok_per_sec
            .store(device_rate_mtok_per_sec, Ordering::Relaxed);
        let old_surge = i.lc_surge_ppm.swap(lc_surge_ppm, Ordering::AcqRel);
        let old_share = i
            .be_share_mtok_per_sec
            .swap(be_share_mtok_per_sec, Ordering::AcqRel);
        // Either change re-prices what tenants earn: schedulers re-arm their wake times and
        // re-sum their idle aggregates when this epoch moves.
        if old_share != be_share_mtok_per_sec || old_surge != lc_surge_ppm {
            i.share_epoch.fetch_add(1, Ordering::AcqRel);
        }
        let mix_code = match mix {
            LoadMix::Mixed => 0,
            LoadMix::ReadOnly => 1,
        };
        i.mix.store(mix_code, Ordering::Relaxed);
    }

    pub(crate) fn deposit(&self, mtok: u64) {
        if mtok == 0 {
            return;
        }
        self.inner.balance_mtok.fetch_add(mtok, Ordering::AcqRel);
        self.inner.deposited_mtok.fetch_add(mtok, Ordering::Relaxed);
    }

    /// Takes exactly `mtok` if the bucket holds that much; all or nothing.
    pub(crate) fn try_take(&self, mtok: u64) -> bool {
        if mtok == 0 {
            return true;
        }
        let taken = self
            .inner
            .balance_mtok
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| b.checked_sub(mtok))
            .is_ok();
        if taken {
            self.inner.taken_mtok.fetch_add(mtok, Ordering::Relaxed);
        }
        taken
    }

    /// Gives back tokens taken by `try_take` that could not be used.
    pub(crate) fn untake(&self, mtok: u64) {
        self.inner.balance_mtok.fetch_add(mtok, Ordering::AcqRel);
        self.inner.taken_mtok.fetch_sub(mtok, Ordering::Relaxed);
    }

    /// Empties the bucket down to `carry_mtok`.
    fn reset(&self, now_ns: u64, carry_mtok: u64) {
        let i = &self.inner;
        let before = i
            .balance_mtok
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.min(carry_mtok))
            })
            .unwrap_or_else(|b| b);
        let discarded = before.saturating_sub(carry_mtok);
        i.discarded_mtok.fetch_add(discarded, Ordering::Relaxed);
        i.resets.fetch_add(1, Ordering::Relaxed);
        i.last_reset_ns.store(now_ns, Ordering::Relaxed);
    }

    pub(crate) fn join_worker(&self) {
        self.inner.workers.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn leave_worker(&self) {
        self.inner.workers.fetch_sub(1, Ordering::AcqRel);
    }

    /// The current reset epoch.
    #[cfg(test)]
    pub(crate) fn reset_epoch(&self) -> u32 {
        (self.inner.reset_state.load(Ordering::Acquire) >> 32) as u32
    }

    /// A worker reports that it finished a round. `last_epoch` is the epoch it last checked in
    /// for (updated here). Empties the bucket (down to `carry_mtok`) when every worker has
    /// checked in, or when the bucket is older than `max_age_ns`.
    pub(crate) fn check_in(
        &self,
        now_ns: u64,
        last_epoch: &mut Option<u32>,
        max_age_ns: u64,
        carry_mtok: u64,
    ) -> CheckIn {
        let i = &self.inner;
        let mut last_reset_ns = i.last_reset_ns.load(Ordering::Relaxed);
        if last_reset_ns == NEVER {
            // The first check-in starts the age clock.
            last_reset_ns = match i.last_reset_ns.compare_exchange(
                NEVER,
                now_ns,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => now_ns,
                Err(seen) => seen,
            };
        }
        let too_old = now_ns.saturating_sub(last_reset_ns) > max_age_ns;
        let mut state = i.reset_state.load(Ordering::Acquire);
        loop {
            let epoch = (state >> 32) as u32;
            let count = state as u32;
            if *last_epoch == Some(epoch) && !too_old {
                return CheckIn::Counted;
            }
            let counted = if *last_epoch == Some(epoch) {
                count
            } else {
                count + 1
            };
            let workers = i.workers.load(Ordering::Acquire).max(1);
            let complete = counted >= workers || too_old;
            let next = if complete {
                u64::from(epoch.wrapping_add(1)) << 32
            } else {
                (u64::from(epoch) << 32) | u64::from(counted)
            };
            match i.reset_state.compare_exchange_weak(
                state,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if complete {
                        self.reset(now_ns, carry_mtok);
                        // This worker has run a round in the new epoch only when it runs again.
                        *last_epoch = None;
                        return CheckIn::Reset;
                    }
                    *last_epoch = Some(epoch);
                    return CheckIn::Counted;
                }
                Err(seen) => state = seen,
            }
        }
    }

    pub(crate) fn span_epoch(&self) -> u64 {
        self.inner.span_epoch.load(Ordering::Acquire)
    }

    pub(crate) fn bump_span_epoch(&self) {
        self.inner.span_epoch.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn rates_epoch(&self) -> u64 {
        self.inner.rates_epoch.load(Ordering::Acquire)
    }

    pub(crate) fn share_epoch(&self) -> u64 {
        self.inner.share_epoch.load(Ordering::Acquire)
    }

    pub(crate) fn bump_rates_epoch(&self) {
        self.inner.rates_epoch.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::DeviceProfile;

    fn bucket() -> SharedBucket {
        SharedBucket::new(DeviceProfile::reflex_a().cost_model())
    }

    #[test]
    fn take_is_all_or_nothing() {
        let b = bucket();
        b.deposit(1000);
        assert!(!b.try_take(1001));
        assert!(b.try_take(600));
        assert_eq!(b.balance_mtok(), 400);
        assert!(!b.try_take(401));
        assert_eq!(b.stats().taken_mtok, 600);
    }

    #[test]
    fn resets_after_every_worker_checked_in() {
        let b = bucket();
        b.join_worker();
        b.join_worker();
        let (mut w0, mut w1) = (None, None);
        b.deposit(5000);
        assert_eq!(b.check_in(10, &mut w0, u64::MAX, 0), CheckIn::Counted);
        assert_eq!(b.check_in(20, &mut w0, u64::MAX, 0), CheckIn::Counted);
        assert_eq!(b.balance_mtok(), 5000, "one worker alone must not reset");
        assert_eq!(b.check_in(30, &mut w1, u64::MAX, 0), CheckIn::Reset);
        assert_eq!(b.balance_mtok(), 0);
        assert_eq!(b.stats().discarded_mtok, 5000);
        assert_eq!(b.reset_epoch(), 1);
    }

    #[test]
    fn an_old_bucket_is_reset_even_if_a_worker_stalls() {
        let b = bucket();
        b.join_worker();
        b.join_worker();
        let mut w0 = None;
        b.deposit(7);
        assert_eq!(b.check_in(500, &mut w0, 1000, 0), CheckIn::Counted);
        assert_eq!(b.check_in(1400, &mut w0, 1000, 0), CheckIn::Counted);
        assert_eq!(b.check_in(1501, &mut w0, 1000, 0), CheckIn::Reset);
        assert_eq!(b.balance_mtok(), 0);
    }

    #[test]
    fn a_reset_keeps_at_most_the_carry() {
        let b = bucket();
        b.join_worker();
        let mut w0 = None;
        b.deposit(25_000);
        assert_eq!(b.check_in(1, &mut w0, u64::MAX, 10_000), CheckIn::Reset);
        assert_eq!(b.balance_mtok(), 10_000);
        assert_eq!(b.stats().discarded_mtok, 15_000);
        b.try_take(7_000);
        assert_eq!(b.check_in(2, &mut w0, u64::MAX, 10_000), CheckIn::Reset);
        assert_eq!(
            b.balance_mtok(),
            3_000,
            "below the carry: nothing discarded"
        );
        assert_eq!(b.stats().discarded_mtok, 15_000);
    }
}
