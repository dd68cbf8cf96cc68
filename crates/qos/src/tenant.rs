//! Tenants: what they ask for, what admission grants them, and the ledger their tokens live in.
//!
//! # What it models
//! A tenant of the remote-flash server is one client (or group of connections) with one service
//! class. A **latency-critical** (LC) tenant states an SLO: a p95 read-latency target at an IOPS
//! rate, read ratio and request size. Admission turns it into a **reservation** in tokens/s:
//!
//! ```text
//! reservation = IOPS × (r · unit(read) + (1 − r) · unit(write)) × size factor
//! ```
//!
//! Worked example (device "A", mixed load): tenant B of the published experiment, 70 K IOPS,
//! 80 % reads, 4 KB → 70 000 × (0.8 × 1 + 0.2 × 10) × 1 = 196 000 tokens/s
//! = 196 000 000 mtok/s. Tenant A, 120 K IOPS of 4 KB reads, reserves 120 000 tokens/s (or
//! 60 000 if the whole device load is read-only). A **best-effort** (BE) tenant states no SLO
//! and shares what LC tenants leave.
//!
//! # The ledger
//! Each admitted tenant owns one [`TenantHandle`], cheap to clone, pointing at a ledger of
//! atomics: its token balance, when it last earned, and its counters. The ledger is the single
//! place a tenant's tokens live, so a tenant whose connections land on several worker threads
//! earns its reservation once and pays each request once (the "beyond the published design" (a)
//! of remote.md): whichever worker earns first claims the elapsed time, by compare-and-swap on
//! the last-earned timestamp. Counters are readable from any thread (the metrics endpoint) while
//! the workers schedule.
//!
//! # What it leaves out
//! SLOs on write latency or on other percentiles (the published design promises p95 reads).
//!
//! # Config keys
//! None; tenants come from REGISTER requests or the server's `[[tenant]]` config.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cost::{size_units, CostModel, LoadMix, READ_COST_MTOK};

/// Nanoseconds per second, for rate × time products.
pub(crate) const NS_PER_SEC: u128 = 1_000_000_000;

/// Identifier the registry gives an admitted tenant; never reused within one registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TenantId(pub u64);

impl std::fmt::Display for TenantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tenant#{}", self.0)
    }
}

/// A latency-critical tenant's service-level objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LcSlo {
    /// p95 read-latency target, ns (e.g. 500 000 for 500 µs).
    pub p95_read_latency_ns: u64,
    /// Requests per second the tenant will issue and wants served within the target.
    pub iops: u64,
    /// Percentage of the requests that are reads, 0..=100.
    pub read_pct: u8,
    /// Typical request size, bytes (sizes above 4 KB scale the cost).
    pub request_bytes: u64,
}

/// What a best-effort tenant says about its load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeclaredMix {
    /// Reads only: lets the device stay in the cheaper read-only regime.
    ReadOnly,
    /// Reads and writes (the default for BE tenants).
    Mixed,
}

/// A best-effort tenant's registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeSpec {
    /// Its declared load mix.
    pub mix: DeclaredMix,
}

impl Default for BeSpec {
    fn default() -> Self {
        BeSpec {
            mix: DeclaredMix::Mixed,
        }
    }
}

/// What a tenant asks for at registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TenantSpec {
    /// Latency-critical, with an SLO.
    LatencyCritical(LcSlo),
    /// Best-effort.
    BestEffort(BeSpec),
}

impl TenantSpec {
    /// The tenant's class.
    pub fn class(&self) -> TenantClass {
        match self {
            TenantSpec::LatencyCritical(_) => TenantClass::LatencyCritical,
            TenantSpec::BestEffort(_) => TenantClass::BestEffort,
        }
    }

    /// Whether this tenant keeps the device in the read-only regime.
    pub fn declared_mix(&self) -> DeclaredMix {
        match self {
            TenantSpec::LatencyCritical(slo) if slo.read_pct == 100 => DeclaredMix::ReadOnly,
            TenantSpec::LatencyCritical(_) => DeclaredMix::Mixed,
            TenantSpec::BestEffort(be) => be.mix,
        }
    }
}

/// Service class of a tenant: the one enum the server's config (`class = "lc" | "be"`), the
/// simulator's and real runs' results and the scheduler share. It is spelled `lc` / `be`
/// wherever it is read or written (TOML, JSON, tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TenantClass {
    /// Has an SLO and a reservation.
    #[serde(rename = "lc")]
    LatencyCritical,
    /// Shares what is left.
    #[serde(rename = "be")]
    BestEffort,
}

impl TenantClass {
    /// Its spelling in files and tables: `lc` or `be`.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantClass::LatencyCritical => "lc",
            TenantClass::BestEffort => "be",
        }
    }
}

impl std::fmt::Display for TenantClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so width and alignment in tables apply as they do to a `&str`.
        f.pad(self.as_str())
    }
}

/// An LC tenant's reservation in mtok/s under `mix` (rounded up: the device is never promised
/// less than the SLO needs).
pub fn lc_reservation_mtok_per_sec(slo: &LcSlo, cost: &CostModel, mix: LoadMix) -> u64 {
    let read_pct = u128::from(slo.read_pct.min(100));
    let read_mtok = u128::from(match mix {
        LoadMix::Mixed => READ_COST_MTOK,
        LoadMix::ReadOnly => cost.read_only_read_cost_mtok,
    });
    let write_mtok = u128::from(cost.write_cost_mtok);
    let per_request_x100 = read_pct * read_mtok + (100 - read_pct) * write_mtok;
    let total = u128::from(slo.iops) * per_request_x100 * u128::from(size_units(slo.request_bytes));
    u64::try_from(total.div_ceil(100)).unwrap_or(u64::MAX)
}

/// What an LC tenant with this reservation earns under an LC surge of `surge_ppm` (rounded
/// down, so the sum over tenants never exceeds what the registry carved out for them).
pub fn lc_earning_rate_mtok_per_sec(reservation_mtok_per_sec: u64, surge_ppm: u32) -> u64 {
    // Called on every LC visit: 64-bit arithmetic unless the product overflows, which no
    // real reservation does (u128 division is a library call).
    let factor = 1_000_000 + u64::from(surge_ppm);
    match reservation_mtok_per_sec.checked_mul(factor) {
        Some(product) => product / 1_000_000,
        None => {
            let rate = u128::from(reservation_mtok_per_sec) * u128::from(factor) / 1_000_000;
            u64::try_from(rate).unwrap_or(u64::MAX)
        }
    }
}

/// A snapshot of one tenant's counters, for metrics. Monotonic except `balance_mtok` and
/// `requests_queued`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantCounters {
    /// Tokens earned (reservation or BE share × time), mtok.
    pub earned_mtok: u64,
    /// Tokens paid for submitted requests, mtok.
    pub spent_mtok: u64,
    /// Tokens given to the shared bucket, mtok.
    pub donated_mtok: u64,
    /// Tokens a BE tenant took from the shared bucket, mtok.
    pub borrowed_mtok: u64,
    /// Times an LC tenant was visited with work queued and held at its deficit limit (a tenant
    /// whose SLO does not match its traffic keeps hitting it). With `lc_borrows_spare`, the
    /// every-round revisits of a held tenant count once per hold.
    pub deficit_hits: u64,
    /// Requests the scheduler released for submission.
    pub requests_submitted: u64,
    /// Requests waiting in the tenant's queues (all workers).
    pub requests_queued: u64,
    /// Current balance, mtok (negative: an LC tenant in deficit).
    pub balance_mtok: i64,
}

/// The shared, atomic ledger behind a [`TenantHandle`].
#[derive(Debug)]
pub(crate) struct Ledger {
    /// Current earning rate: the LC reservation (updated when the load mix flips); unused for
    /// BE tenants, which earn the BE share published in the shared bucket.
    pub(crate) rate_mtok_per_sec: AtomicU64,
    pub(crate) balance_mtok: AtomicI64,
    /// Time up to which earnings have been credited, with [`CLOCK_STOPPED`] set while an idle
    /// aggregate accounts for them (and before the first earning).
    pub(crate) earned_until_ns: AtomicU64,
    /// Schedulers this tenant is attached to.
    pub(crate) attached_workers: AtomicU32,
    pub(crate) queued: AtomicU64,
    pub(crate) earned_mtok: AtomicU64,
    pub(crate) spent_mtok: AtomicU64,
    pub(crate) donated_mtok: AtomicU64,
    pub(crate) borrowed_mtok: AtomicU64,
    pub(crate) deficit_hits: AtomicU64,
    pub(crate) submitted: AtomicU64,
}

/// Largest cost one request may have, mtok (a billion tokens): keeps every balance far inside
/// `i64` however costs and rates combine.
pub const MAX_REQUEST_COST_MTOK: u64 = 1 << 40;

/// Most a single earning step may credit, mtok: bounds balances after a very long gap between
/// rounds (a billion tokens is hours of any device's full rate).
const MAX_CREDIT_MTOK: u64 = 1 << 40;

/// Bit of the earning-clock word that marks it stopped; the rest is the time credited up to.
const CLOCK_STOPPED: u64 = 1 << 63;

/// Outcome of a best-effort payment attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BePayment {
    /// Paid; `borrowed_mtok` came from the shared bucket.
    Paid { borrowed_mtok: u64 },
    /// Neither the balance nor the bucket can cover it; `need_mtok` is the shortfall.
    CannotPay { need_mtok: u64 },
}

/// Whether a BE payment may draw on the shared bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Borrow {
    /// It may take its shortfall from the bucket.
    Allowed,
    /// Another tenant is first in line for the bucket this round.
    Forbidden,
}

impl Ledger {
    /// Credits `rate` × the time since earnings were last credited (by any worker), up to
    /// `now_ns`. Returns the credit, mtok.
    ///
    /// The clock only advances by the time the whole milli-tokens credited are worth
    /// (`ceil(credit × 1e9 / rate)` ns, never more than elapsed), so fractions carry over to the
    /// next call instead of being lost: a 100 IOPS tenant (100 000 mtok/s) called every 1 µs
    /// earns 1 mtok every 10 µs, its rate. Rounding the clock up to a whole nanosecond loses
    /// under 1 ns of earnings per credit (measured: 0.02 % for a 190 tokens/s tenant credited
    /// every ~5 µs), never over-credits, and keeps the whole state in one atomic word that
    /// workers sharing the tenant can claim by compare-and-swap.
    ///
    /// The word is the time credited up to, plus a *stopped* bit (see [`Self::stop_clock`]). A
    /// stopped clock, or a zero rate (a BE tenant whose share is zero is not paid retroactively
    /// when the share grows), restarts at `now` with no credit. The credited time never moves
    /// backwards, even for a worker whose `now` is stale: another worker may have credited past
    /// it already (we saw exactly that double-pay with two real threads before this rule).
    pub(crate) fn earn(&self, now_ns: u64, rate_mtok_per_sec: u64) -> u64 {
        let mut word = self.earned_until_ns.load(Ordering::Acquire);
        loop {
            let stopped = word & CLOCK_STOPPED != 0;
            let until = word & !CLOCK_STOPPED;
            if stopped || rate_mtok_per_sec == 0 {
                if !stopped && now_ns <= until {
                    return 0;
                }
                let restart = now_ns.max(until) & !CLOCK_STOPPED;
                match self.earned_until_ns.compare_exchange_weak(
                    word,
                    restart,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return 0,
                    Err(seen) => {
                        word = seen;
                        continue;
                    }
                }
            }
            if now_ns <= until {
                return 0;
            }
            let elapsed_ns = now_ns - until;
            let rate = u128::from(rate_mtok_per_sec);
            let credit =
                (rate * u128::from(elapsed_ns) / NS_PER_SEC).min(u128::from(MAX_CREDIT_MTOK));
            if credit == 0 {
                return 0;
            }
            let advance_ns = (credit * NS_PER_SEC).div_ceil(rate) as u64;
            debug_assert!(advance_ns <= elapsed_ns, "credit outran the clock");
            match self.earned_until_ns.compare_exchange_weak(
                word,
                until + advance_ns,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let credit = credit as u64;
                    self.balance_mtok.fetch_add(credit as i64, Ordering::AcqRel);
                    self.earned_mtok.fetch_add(credit, Ordering::Relaxed);
                    return credit;
                }
                Err(seen) => word = seen,
            }
        }
    }

    /// Restarts the earning clock at `at_ns` (or leaves it where it is if it is already
    /// running past that): the time before was accounted elsewhere (an idle aggregate).
    pub(crate) fn earn_from(&self, at_ns: u64) {
        let mut word = self.earned_until_ns.load(Ordering::Acquire);
        loop {
            let stopped = word & CLOCK_STOPPED != 0;
            let until = word & !CLOCK_STOPPED;
            if !stopped && until >= at_ns {
                return;
            }
            let restart = at_ns.max(until) & !CLOCK_STOPPED;
            match self.earned_until_ns.compare_exchange_weak(
                word,
                restart,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(seen) => word = seen,
            }
        }
    }

    /// Stops the earning clock: the tenant went into a scheduler's idle aggregate, which
    /// accounts for its earnings from here on. Whoever earns next (the same worker when it wakes
    /// the tenant, via [`Self::earn_from`], or another worker the tenant spans) restarts it, so
    /// the idle period is never paid twice.
    /// Returns the time earnings had been credited up to (by any worker).
    pub(crate) fn stop_clock(&self) -> u64 {
        self.earned_until_ns
            .fetch_or(CLOCK_STOPPED, Ordering::AcqRel)
            & !CLOCK_STOPPED
    }

    /// An LC payment: succeeds while the balance is above `-deficit_limit_mtok` (the payment
    /// itself may take it below).
    pub(crate) fn try_spend_lc(&self, cost_mtok: u64, deficit_limit_mtok: u64) -> bool {
        let floor = -(deficit_limit_mtok.min(MAX_REQUEST_COST_MTOK) as i64);
        let cost = cost_mtok as i64;
        let paid = self
            .balance_mtok
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b > floor).then_some(b - cost)
            });
        match paid {
            Ok(_) => {
                self.spent_mtok.fetch_add(cost_mtok, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// An LC payment entirely from the shared bucket (all or nothing), for a tenant held at
    /// its deficit limit; its balance is unchanged (the books: spent and borrowed both grow).
    pub(crate) fn borrow_for_lc(
        &self,
        cost_mtok: u64,
        bucket: &crate::bucket::SharedBucket,
    ) -> bool {
        if !bucket.try_take(cost_mtok) {
            return false;
        }
        self.spent_mtok.fetch_add(cost_mtok, Ordering::Relaxed);
        self.borrowed_mtok.fetch_add(cost_mtok, Ordering::Relaxed);
        true
    }

    /// A BE payment: from the balance if it covers the cost, else the difference from the
    /// shared bucket; never leaves the balance negative.
    pub(crate) fn try_spend_be(
        &self,
        cost_mtok: u64,
        bucket: &crate::bucket::SharedBucket,
        borrow: Borrow,
    ) -> BePayment {
        let cost = cost_mtok as i64;
        let mut balance = self.balance_mtok.load(Ordering::Acquire);
        loop {
            debug_assert!(balance >= 0, "BE balance went negative: {balance}");
            if balance >= cost {
                match self.balance_mtok.compare_exchange_weak(
                    balance,
                    balance - cost,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        self.spent_mtok.fetch_add(cost_mtok, Ordering::Relaxed);
                        return BePayment::Paid { borrowed_mtok: 0 };
                    }
                    Err(seen) => {
                        balance = seen;
                        continue;
                    }
                }
            }
            let need_mtok = (cost - balance.max(0)) as u64;
            if borrow == Borrow::Forbidden || !bucket.try_take(need_mtok) {
                return BePayment::CannotPay { need_mtok };
            }
            let need = need_mtok;
            match self.balance_mtok.compare_exchange(
                balance,
                0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.spent_mtok.fetch_add(cost_mtok, Ordering::Relaxed);
                    self.borrowed_mtok.fetch_add(need, Ordering::Relaxed);
                    return BePayment::Paid {
                        borrowed_mtok: need,
                    };
                }
                Err(seen) => {
                    bucket.untake(need);
                    balance = seen;
                }
            }
        }
    }

    /// Donates `pct` % of the balance if it is above `cap_mtok`; returns the donation.
    pub(crate) fn donate_above(&self, cap_mtok: u64, pct: u8) -> u64 {
        let cap = cap_mtok.min(i64::MAX as u64) as i64;
        let pct = i64::from(pct.min(100));
        let before = self
            .balance_mtok
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b > cap).then_some(b - b * pct / 100)
            });
        match before {
            Ok(b) => {
                let donated = (b * pct / 100) as u64;
                self.donated_mtok.fetch_add(donated, Ordering::Relaxed);
                donated
            }
            Err(_) => 0,
        }
    }

    /// Donates the whole (non-negative) balance; returns it.
    pub(crate) fn donate_all(&self) -> u64 {
        let before = self
            .balance_mtok
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b > 0).then_some(0)
            });
        match before {
            Ok(b) => {
                self.donated_mtok.fetch_add(b as u64, Ordering::Relaxed);
                b as u64
            }
            Err(_) => 0,
        }
    }

    /// Accounts tokens earned and donated while idle (in a scheduler's aggregate).
    pub(crate) fn account_idle(&self, mtok: u64) {
        self.earned_mtok.fetch_add(mtok, Ordering::Relaxed);
        self.donated_mtok.fetch_add(mtok, Ordering::Relaxed);
    }
}

/// What the registry hands an admitted tenant. Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug)]
pub struct TenantHandle {
    pub(crate) id: TenantId,
    pub(crate) spec: TenantSpec,
    pub(crate) ledger: Arc<Ledger>,
}

impl TenantHandle {
    pub(crate) fn new(id: TenantId, spec: TenantSpec, rate_mtok_per_sec: u64) -> Self {
        TenantHandle {
            id,
            spec,
            ledger: Arc::new(Ledger {
                rate_mtok_per_sec: AtomicU64::new(rate_mtok_per_sec),
                balance_mtok: AtomicI64::new(0),
                earned_until_ns: AtomicU64::new(CLOCK_STOPPED),
                attached_workers: AtomicU32::new(0),
                queued: AtomicU64::new(0),
                earned_mtok: AtomicU64::new(0),
                spent_mtok: AtomicU64::new(0),
                donated_mtok: AtomicU64::new(0),
                borrowed_mtok: AtomicU64::new(0),
                deficit_hits: AtomicU64::new(0),
                submitted: AtomicU64::new(0),
            }),
        }
    }

    /// The tenant's id.
    pub fn id(&self) -> TenantId {
        self.id
    }

    /// What it registered with.
    pub fn spec(&self) -> &TenantSpec {
        &self.spec
    }

    /// Its class.
    pub fn class(&self) -> TenantClass {
        self.spec.class()
    }

    /// Its current reservation in mtok/s (0 for BE tenants; changes when the device's load
    /// mix flips between read-only and mixed).
    pub fn reservation_mtok_per_sec(&self) -> u64 {
        match self.spec {
            TenantSpec::LatencyCritical(_) => self.ledger.rate_mtok_per_sec.load(Ordering::Relaxed),
            TenantSpec::BestEffort(_) => 0,
        }
    }

    /// Number of schedulers (worker threads) it is attached to.
    pub fn attached_workers(&self) -> u32 {
        self.ledger.attached_workers.load(Ordering::Relaxed)
    }

    /// A snapshot of its counters. Idle tenants' earned/donated counters are brought up to date
    /// lazily (see [`crate::Scheduler::sync_counters`]).
    pub fn counters(&self) -> TenantCounters {
        let l = &self.ledger;
        TenantCounters {
            earned_mtok: l.earned_mtok.load(Ordering::Relaxed),
            spent_mtok: l.spent_mtok.load(Ordering::Relaxed),
            donated_mtok: l.donated_mtok.load(Ordering::Relaxed),
            borrowed_mtok: l.borrowed_mtok.load(Ordering::Relaxed),
            deficit_hits: l.deficit_hits.load(Ordering::Relaxed),
            requests_submitted: l.submitted.load(Ordering::Relaxed),
            requests_queued: l.queued.load(Ordering::Relaxed),
            balance_mtok: l.balance_mtok.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earning_rates_round_down_and_survive_huge_reservations() {
        assert_eq!(
            lc_earning_rate_mtok_per_sec(38_000_000, 500_000),
            57_000_000
        );
        assert_eq!(
            lc_earning_rate_mtok_per_sec(3, 500_000),
            4,
            "4.5 rounds down"
        );
        assert_eq!(lc_earning_rate_mtok_per_sec(7, 0), 7);
        // Past u64 in the product: the 128-bit path gives the same answer.
        assert_eq!(
            lc_earning_rate_mtok_per_sec(u64::MAX / 2, 500_000),
            u64::try_from(u128::from(u64::MAX / 2) * 3 / 2).unwrap()
        );
        assert_eq!(lc_earning_rate_mtok_per_sec(u64::MAX, 500_000), u64::MAX);
    }
    use crate::profile::DeviceProfile;

    #[test]
    fn published_tenants_reservations() {
        let cost = DeviceProfile::reflex_a().cost_model();
        let a = LcSlo {
            p95_read_latency_ns: 500_000,
            iops: 120_000,
            read_pct: 100,
            request_bytes: 4096,
        };
        let b = LcSlo {
            iops: 70_000,
            read_pct: 80,
            ..a
        };
        assert_eq!(
            lc_reservation_mtok_per_sec(&a, &cost, LoadMix::Mixed),
            120_000_000
        );
        assert_eq!(
            lc_reservation_mtok_per_sec(&a, &cost, LoadMix::ReadOnly),
            60_000_000
        );
        assert_eq!(
            lc_reservation_mtok_per_sec(&b, &cost, LoadMix::Mixed),
            196_000_000
        );
        let big = LcSlo {
            request_bytes: 16 * 1024,
            ..b
        };
        assert_eq!(
            lc_reservation_mtok_per_sec(&big, &cost, LoadMix::Mixed),
            4 * 196_000_000
        );
    }

    #[test]
    fn reservation_rounds_up() {
        let cost = DeviceProfile::reflex_a().cost_model();
        // 1 IOPS at 99 % reads: 0.99 × 1000 + 0.01 × 10000 = 1090 mtok/s exactly; 1 IOPS at
        // 33 %: 330 + 6700 = 7030. Both exact; use a read-only odd case instead: 500 × 1 = 500.
        let slo = LcSlo {
            p95_read_latency_ns: 1,
            iops: 3,
            read_pct: 33,
            request_bytes: 1,
        };
        // 3 × (33 × 1000 + 67 × 10000) / 100 = 3 × 703000 / 100 = 21090.
        assert_eq!(
            lc_reservation_mtok_per_sec(&slo, &cost, LoadMix::Mixed),
            21_090
        );
        let odd = CostModel {
            read_only_read_cost_mtok: 333,
            ..cost
        };
        let ro = LcSlo {
            iops: 1,
            read_pct: 100,
            ..slo
        };
        assert_eq!(
            lc_reservation_mtok_per_sec(&ro, &odd, LoadMix::ReadOnly),
            333
        );
    }
}
