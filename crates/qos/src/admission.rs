//! Admission control: the tenant registry of one device.
//!
//! # What it models
//! The control plane of the published server: a tenant registers an SLO, the server turns it
//! into a token reservation and admits it only if the device can still honour every admitted
//! SLO, then recomputes how many tokens each best-effort tenant gets. Unlike the prototype
//! (SLOs compiled in, a refused tenant never told), every refusal carries a machine code and a
//! sentence naming the numbers that did not fit.
//!
//! # The rules
//! * The device's rate is the profile's rate for the **strictest** p95 target among admitted
//!   LC tenants (including the newcomer), in the load mix that would be in force. A target
//!   stricter than the profile's table is refused.
//! * An LC tenant is admitted iff Σ reservations (including its own) ≤ that rate, and the
//!   LC surge left after it (below) is at least what the LC tenants need to meet their targets
//!   at their rates: Σ reservations × (1 + 2 × s_needed) ≤ that rate, s_needed being the surge
//!   under which the LC tenants' token debt, one pool fed by Poisson arrivals (they pay each
//!   other's bursts through the shared bucket), passes one deficit limit D plus the pool's
//!   earnings over its wait share w of the strictest target less one round with at most 5 %
//!   probability (Cramér–Lundberg's tail; `admission/headroom.rs` derives it). This part of
//!   the rule is on by default (`headroom = AdmissionHeadroom::Slo`, server: `[qos]
//!   admission_headroom = "slo"`); `Off` is the published admission, and with
//!   `lc_surge_pct = 0` it keeps none.
//! * The load mix is read-only iff every tenant declared a read-only load (LC: `read_pct = 100`;
//!   BE: `mix = read-only`). A newcomer that flips it to mixed re-prices every reservation and
//!   is refused if the re-priced sum no longer fits — even a BE tenant.
//! * **LC surge**: every LC tenant *earns* its reservation × (1 + s), where
//!   s = min(`lc_surge_pct`, ½ × unreserved / Σ LC reservations) and unreserved = device rate −
//!   Σ LC reservations (see "The LC surge" below; default `lc_surge_pct` = 50).
//! * BE share = (device rate − Σ LC reservations × (1 + s)) / number of BE tenants, recomputed
//!   at every registration and removal and published through the [`SharedBucket`]. With no LC
//!   tenant the device rate is the table's loosest point.
//!
//! Worked example (device "A", the published scenario 1): A (LC, 120 K IOPS, 100 % reads,
//! 500 µs) and B (LC, 70 K IOPS, 80 % reads, 500 µs) reserve 120 K + 196 K = 316 K of the
//! 420 K tokens/s the device sustains at 500 µs; BE tenants C and D then get
//! (420 K − 316 K) / 2 = 52 K tokens/s each. A third LC tenant asking 120 K IOPS of reads at
//! 500 µs would need 120 K with only 104 K left and is refused with code
//! `ReservationsExceedCapacity`; one asking for 300 µs is refused with `SloTighterThanTable`.
//!
//! With the default surge the same scenario gives A and B s = 52 K / 316 K = 164 556 ppm (half
//! of the 104 K unreserved) and C and D 26 K tokens/s each (`lc_surge_pct = 0`: the published
//! 52 K each, and no surge).
//!
//! # The LC surge: what a reservation promises
//! A reservation is a promise to serve the SLO's IOPS *with* the SLO's latency. Paced at exactly
//! its mean rate, a tenant with random (Poisson) arrivals is a queue at utilization 1: its
//! backlog is a zero-drift random walk that no finite burst allowance bounds in the long run.
//! Issue 9 measured it: 20 K IOPS (90 % reads, 38 K tokens/s reserved, p95 target 500 µs)
//! offered as Poisson arrivals at exactly 20 K IOPS got p95 19–20 ms on an idle memory-backed
//! server, 0.3 ms without the scheduler. So an LC tenant is served faster than its mean while
//! it has a backlog: it earns s above its reservation, out of the unreserved rate, *before*
//! the BE share is computed, so the device is never offered more than its rate (the LC
//! earnings plus the BE shares sum to at most the device rate; `tests/props.rs` checks it after
//! every round). What it earns and does not spend it donates, as ever (an idle LC tenant's
//! earnings go to the shared bucket; an active one donates above its cap), so BE tenants
//! still get the capacity LC tenants leave, through the bucket. Each tenant's surge is its
//! own: one offering far above its reservation is held at reservation × (1 + s) and cannot
//! take another LC tenant's. (At its deficit limit it may also pay from the shared bucket's
//! spare tokens before BE tenants do: see [`crate::sched`].)
//!
//! How much: `cargo run -p qos --example surge_sweep` (the harness of `tests/surge.rs`:
//! simulated clock, 10 µs rounds, the tenant, 2 s; deterministic) prints the
//! scheduler's own p95 wait (arrival to release); next to a BE flood it is, for s = 0: 3.4 ms
//! at 95 % of the reservation offered, 24 ms at 100 %, 182 ms at 110 %; s = 10 %: 1.1 ms at
//! 100 %; s = 25 %: one round (10 µs) at 100 % but 0.51 ms at 110 %; s = 50 %: one round up
//! to 110 % (max 0.9 ms).
//! 50 % is the default: it meets a 500 µs target with the tenant up to 110 % of its
//! reservation and leaves margin for tenants with more writes (at 50 % writes, s = 25 % gives
//! a 46 µs p95 wait, s = 50 % one round).
//!
//! Why at most half of the unreserved rate: the surge first took all of it when the LC
//! reservations left too little for 50 %, and the property test found a BE tenant starved — its
//! share was rounding crumbs, so it lived on the shared bucket alone, which is emptied at every
//! epoch: a BE request costing more than the bucket's carry on the other worker was never
//! paid. Half keeps every BE tenant a share of its own; it also keeps the published scenario's
//! BE tenants at 26 K tokens/s of their own (a zero share made their split follow the bucket's
//! per-turn line: 31 K vs 76 K tokens/s between a read-mostly and a write-mostly tenant; with
//! half, 44 K vs 64 K). In that scenario s = 16.5 % and A and B, Poisson at their full rates,
//! still see a one-round p95 wait (`scenario_one_with_poisson_arrivals`).
//!
//! Designs measured and rejected: a larger fixed burst (deficit limit) alone — at utilization
//! 1 the backlog still grows like √t, and a deep burst lets a tenant dump it on the device at
//! once; s carved from the whole unreserved rate — the starvation above; a fixed headroom at
//! admission (admit Σ reservations × 1.5 ≤ device rate) — it would refuse the published
//! scenario 1 (474 K > 420 K) to serve tenants that mostly need the headroom for bursts.
//! What admission keeps instead is the LC tenants' own need (`admission/headroom.rs`): the
//! published scenario 1 needs s ≥ 10.3 % and gets 16.5 %, admitted (scaled to a tenth on the
//! server's 50 µs round, as the reflex study runs it: 16.3 %); four of the tenants at
//! 90 % of the device (s = 5.2 %, needing 11.0 %) are not, which admitted waited 240-399 µs
//! at p95 in the scheduler alone.
//! Guarantee, precisely: an admitted LC tenant whose requests arrive as a Poisson stream at no
//! more than its SLO's IOPS, with its SLO's read ratio and size, is released by the scheduler
//! within its share of its target (`SCHED_WAIT_SHARE_PCT`) at p95 when admission keeps the
//! headroom (`AdmissionHeadroom::Slo`, the default; off, only while the surge left covers the
//! need), to the accuracy of the tail estimate (checked against the scheduler in
//! `admission/headroom.rs`): it refuses any tenant after which the surge would fall below what
//! the admitted tenants need for that
//! (`admission/headroom.rs`); the device then serves it within the rest of its target when
//! the profile's rate is right for the device (what the closed loop, [`crate::vrate`],
//! corrects). A lower closed-loop scale does not evict (below), so the surge may then shrink
//! under the need until tenants leave.
//!
//! # Closed-loop scaling
//! [`Registry::set_rate_scale_ppm`] scales the table's rate (parts per million, 1 000 000 = the
//! calibrated rate). The closed-loop controller ([`crate::vrate`]) drives it; admission and the
//! BE share use the scaled rate. Lowering it never evicts an admitted tenant: the BE share just
//! shrinks, possibly to zero.
//!
//! # What it leaves out
//! Placement across devices. (Renegotiating admitted SLOs, and retiring tenants a scheduler
//! still holds, in one all-or-nothing step: [`Registry::reconfigure`], `admission/reconfigure.rs`.)
//!
//! # Config keys
//! `max_tenants`, `lc_surge_pct` (server: `[qos] lc_surge_pct`), `deficit_limit` (server:
//! `[qos.tuning] deficit_limit`), `round_ns`, `headroom` (server: `[qos] admission_headroom`)
//! in [`RegistryConfig`]; the device profile.

mod headroom;
mod reconfigure;
pub use headroom::{needed_surge_ppm, SCHED_WAIT_SHARE_PCT};
use headroom::{HeadroomModel, LcPool, Pooling};
pub use reconfigure::{Reconfiguration, ReconfigureError, Reconfigured};

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::bucket::SharedBucket;
use crate::cost::{LoadMix, MTOK_PER_TOKEN};
use crate::profile::DeviceProfile;
use crate::sched::{DeficitLimit, DEFAULT_DEFICIT_LIMIT_MTOK};
use crate::tenant::{
    lc_reservation_mtok_per_sec, DeclaredMix, LcSlo, TenantHandle, TenantId, TenantSpec,
};

/// The calibrated rate, in parts per million of itself.
pub const RATE_SCALE_UNITY_PPM: u32 = 1_000_000;

/// Settings of the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// Most tenants admitted at once (bounds memory; 65 536 by default).
    pub max_tenants: u32,
    /// LC surge: every LC tenant earns up to this percentage above its reservation, carved out
    /// of the unreserved rate before the BE share (see the module essay). 0: paced at exactly
    /// the reservation, as published (and no headroom kept: see `admission/headroom.rs`).
    pub lc_surge_pct: u32,
    /// The schedulers' deficit limit (`[qos.tuning] deficit_limit`): the burst an LC tenant
    /// may take ahead of its earnings, which the headroom rule counts on.
    pub deficit_limit: DeficitLimit,
    /// The longest a released request waits for the schedulers' next round, ns (headroom rule).
    pub round_ns: u64,
    /// Whether admission keeps the headroom each LC tenant needs (`admission/headroom.rs`).
    pub headroom: AdmissionHeadroom,
    /// The schedulers' `lc_borrows_spare` (`[qos.tuning]`): whether an LC tenant at its deficit
    /// limit pays from the other LC tenants' spare tokens, so the headroom rule may count
    /// them as one pool.
    pub lc_borrows_spare: bool,
}

/// What admission keeps free beside the reservations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionHeadroom {
    /// Nothing: Σ reservations ≤ the device rate, as published (the surge shrinks as they
    /// fill it).
    Off,
    /// The surge the LC tenants need to meet their targets at their rates with Poisson
    /// arrivals (the default).
    #[default]
    Slo,
}

/// Default LC surge, percent of the reservation (chosen by measurement: see the module essay).
pub const DEFAULT_LC_SURGE_PCT: u32 = 50;

/// Largest accepted LC surge, percent.
pub const MAX_LC_SURGE_PCT: u32 = 1_000;

/// The round length the headroom rule assumes unless told (the simulated schedulers' round).
pub const DEFAULT_ROUND_NS: u64 = 10_000;

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            max_tenants: 65_536,
            lc_surge_pct: DEFAULT_LC_SURGE_PCT,
            deficit_limit: DeficitLimit::FixedMtok(DEFAULT_DEFICIT_LIMIT_MTOK),
            round_ns: DEFAULT_ROUND_NS,
            headroom: AdmissionHeadroom::Slo,
            lc_borrows_spare: true,
        }
    }
}

/// Machine-readable reason for a refused registration; stable numbers for the wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u16)]
pub enum RefusalCode {
    /// The SLO is malformed (zero IOPS, read ratio above 100 %, ...).
    InvalidSlo = 1,
    /// The p95 target is stricter than the device profile's tightest point.
    SloTighterThanTable = 2,
    /// The reservations would exceed the device's rate for the strictest SLO.
    ReservationsExceedCapacity = 3,
    /// The registry is full.
    TooManyTenants = 4,
    /// The reservations would fit, but not with the headroom the LC tenants need to meet
    /// their targets at their rates.
    HeadroomExceedsCapacity = 5,
}

impl RefusalCode {
    /// The wire value.
    pub fn as_u16(self) -> u16 {
        self as u16
    }
}

/// Why a registration was refused. `Display` is the human-readable reason, [`Refusal::code`]
/// the machine code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The SLO is malformed.
    #[error("invalid SLO: {reason}")]
    InvalidSlo {
        /// What is wrong, naming the value and what was expected.
        reason: String,
    },
    /// The p95 target is stricter than the device can be calibrated to promise.
    #[error("p95 read-latency target {p95_read_latency_ns} ns is tighter than this device's tightest calibrated point ({tightest_ns} ns); ask for {tightest_ns} ns or more")]
    SloTighterThanTable {
        /// The target asked for.
        p95_read_latency_ns: u64,
        /// The profile's tightest point.
        tightest_ns: u64,
    },
    /// Not enough tokens left.
    #[error("reservation of {} tokens/s does not fit: {} of the device's {} tokens/s at the strictest p95 target ({strictest_p95_ns} ns, {mix:?} load) are already reserved, {} remain", tokens(*.requested_mtok_per_sec), tokens(*.reserved_mtok_per_sec), tokens(*.capacity_mtok_per_sec), tokens(.capacity_mtok_per_sec.saturating_sub(*.reserved_mtok_per_sec)))]
    ReservationsExceedCapacity {
        /// The newcomer's reservation, mtok/s (0 for a BE tenant whose mix flip re-priced the
        /// others).
        requested_mtok_per_sec: u64,
        /// What the other LC tenants would reserve (re-priced to the new mix), mtok/s.
        reserved_mtok_per_sec: u64,
        /// The device's rate at the strictest target, mtok/s.
        capacity_mtok_per_sec: u64,
        /// The strictest target including the newcomer's, ns.
        strictest_p95_ns: u64,
        /// The load mix the check was made in.
        mix: LoadMix,
    },
    /// The reservations fit, but the LC surge left would be below what the LC tenants need.
    #[error("reservation of {} tokens/s leaves too little headroom: the LC tenants need a surge of {} % above their reservations to meet their p95 targets with Poisson arrivals at their rates (the headroom rule in docs/server.md), so Σ reservations × (1 + 2 × {} %) must fit in the device's {} tokens/s (at {strictest_p95_ns} ns, {mix:?} load); with it the reservations would be {} tokens/s, leaving a surge of {} % (at most lc_surge_pct = {lc_surge_pct} %)", tokens(*.requested_mtok_per_sec), pct(*.needed_surge_ppm), pct(*.needed_surge_ppm), tokens(*.capacity_mtok_per_sec), tokens(.reserved_mtok_per_sec.saturating_add(*.requested_mtok_per_sec)), pct(*.surge_left_ppm))]
    HeadroomExceedsCapacity {
        /// The newcomer's reservation, mtok/s (0 for a BE tenant that flips the mix).
        requested_mtok_per_sec: u64,
        /// What the other LC tenants reserve (in the new mix), mtok/s.
        reserved_mtok_per_sec: u64,
        /// The device's rate at the strictest target, mtok/s.
        capacity_mtok_per_sec: u64,
        /// The largest surge an LC tenant of the new set needs, ppm.
        needed_surge_ppm: u32,
        /// The surge the new set would get, ppm.
        surge_left_ppm: u32,
        /// `lc_surge_pct`.
        lc_surge_pct: u32,
        /// The strictest target including the newcomer's, ns.
        strictest_p95_ns: u64,
        /// The load mix the check was made in.
        mix: LoadMix,
    },
    /// The registry is full.
    #[error("too many tenants: the registry holds its limit of {limit}")]
    TooManyTenants {
        /// `max_tenants`.
        limit: u32,
    },
}

/// A ppm figure as a percentage with one decimal.
fn pct(ppm: u32) -> String {
    format!("{}.{}", ppm / 10_000, ppm % 10_000 / 1_000)
}

fn tokens(mtok: u64) -> String {
    let whole = mtok / MTOK_PER_TOKEN;
    let frac = mtok % MTOK_PER_TOKEN;
    if frac == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{frac:03}")
    }
}

impl Refusal {
    /// The machine code.
    pub fn code(&self) -> RefusalCode {
        match self {
            Refusal::InvalidSlo { .. } => RefusalCode::InvalidSlo,
            Refusal::SloTighterThanTable { .. } => RefusalCode::SloTighterThanTable,
            Refusal::ReservationsExceedCapacity { .. } => RefusalCode::ReservationsExceedCapacity,
            Refusal::TooManyTenants { .. } => RefusalCode::TooManyTenants,
            Refusal::HeadroomExceedsCapacity { .. } => RefusalCode::HeadroomExceedsCapacity,
        }
    }
}

/// Errors of registry operations other than admission.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// No such tenant.
    #[error("unknown tenant {0}")]
    UnknownTenant(TenantId),
    /// The tenant is still attached to schedulers; detach it from every worker first.
    #[error("{id} is still attached to {workers} scheduler(s); detach it from every worker before unregistering")]
    StillAttached {
        /// The tenant.
        id: TenantId,
        /// Schedulers it is attached to.
        workers: u32,
    },
    /// A rate scale of zero would stop the device.
    #[error("rate scale {ppm} ppm is out of range; expected 1..={max} ppm")]
    BadRateScale {
        /// The value given.
        ppm: u32,
        /// The largest accepted.
        max: u32,
    },
}

/// The device's current allocation, for metrics and the control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// Load mix in force.
    pub mix: LoadMix,
    /// Strictest admitted p95 target, if any LC tenant.
    pub strictest_p95_ns: Option<u64>,
    /// Device rate after scaling, mtok/s.
    pub device_rate_mtok_per_sec: u64,
    /// Σ LC reservations, mtok/s.
    pub lc_reserved_mtok_per_sec: u64,
    /// Number of LC tenants.
    pub lc_tenants: u32,
    /// Number of BE tenants.
    pub be_tenants: u32,
    /// Each BE tenant's share, mtok/s.
    pub be_share_mtok_per_sec: u64,
    /// Closed-loop scale applied to the table's rate, ppm.
    pub rate_scale_ppm: u32,
    /// What each LC tenant earns above its reservation, ppm of it.
    pub lc_surge_ppm: u32,
}

/// Largest accepted rate scale: 4× the calibration (closed-loop correction is for small errors).
pub const RATE_SCALE_MAX_PPM: u32 = 4 * RATE_SCALE_UNITY_PPM;

/// The tenant registry and admission control of one device.
#[derive(Debug)]
pub struct Registry {
    profile: DeviceProfile,
    config: RegistryConfig,
    shared: SharedBucket,
    tenants: BTreeMap<TenantId, TenantHandle>,
    next_id: u64,
    /// Multiset of admitted LC p95 targets.
    slo_targets: BTreeMap<u64, u32>,
    /// Σ LC reservations priced for each mix.
    lc_sum_mixed_mtok_per_sec: u64,
    lc_sum_read_only_mtok_per_sec: u64,
    lc_tenants: u32,
    be_tenants: u32,
    /// Tenants that declared a mixed load.
    mixed_tenants: u32,
    rate_scale_ppm: u32,
    /// The admitted LC tenants as the headroom rule counts them, priced for each mix
    /// (`admission/headroom.rs`).
    pool_mixed: LcPool,
    pool_read_only: LcPool,
}

impl Registry {
    /// An empty registry for a device. An `lc_surge_pct` above [`MAX_LC_SURGE_PCT`] is taken
    /// as that maximum.
    pub fn new(profile: DeviceProfile, config: RegistryConfig) -> Self {
        let config = RegistryConfig {
            lc_surge_pct: config.lc_surge_pct.min(MAX_LC_SURGE_PCT),
            ..config
        };
        let shared = SharedBucket::new(profile.cost_model());
        let mut registry = Registry {
            profile,
            config,
            shared,
            tenants: BTreeMap::new(),
            next_id: 1,
            slo_targets: BTreeMap::new(),
            lc_sum_mixed_mtok_per_sec: 0,
            lc_sum_read_only_mtok_per_sec: 0,
            lc_tenants: 0,
            be_tenants: 0,
            mixed_tenants: 0,
            rate_scale_ppm: RATE_SCALE_UNITY_PPM,
            pool_mixed: LcPool::default(),
            pool_read_only: LcPool::default(),
        };
        registry.publish();
        registry
    }

    /// The handle every worker's [`crate::Scheduler`] is built on.
    pub fn shared(&self) -> SharedBucket {
        self.shared.clone()
    }

    /// The device profile.
    pub fn profile(&self) -> &DeviceProfile {
        &self.profile
    }

    /// An admitted tenant.
    pub fn get(&self, id: TenantId) -> Option<&TenantHandle> {
        self.tenants.get(&id)
    }

    /// All admitted tenants, by id.
    pub fn tenants(&self) -> impl Iterator<Item = &TenantHandle> {
        self.tenants.values()
    }

    /// The current allocation.
    pub fn capacity(&self) -> Capacity {
        let mix = self.mix();
        Capacity {
            mix,
            strictest_p95_ns: self.slo_targets.keys().next().copied(),
            device_rate_mtok_per_sec: self.shared.device_rate_mtok_per_sec(),
            lc_reserved_mtok_per_sec: self.lc_sum(mix),
            lc_tenants: self.lc_tenants,
            be_tenants: self.be_tenants,
            be_share_mtok_per_sec: self.shared.be_share_mtok_per_sec(),
            rate_scale_ppm: self.rate_scale_ppm,
            lc_surge_ppm: self.shared.lc_surge_ppm(),
        }
    }

    /// Checks a registration without making it; `Ok` carries the reservation it would get,
    /// mtok/s (0 for BE).
    pub fn check(&self, spec: &TenantSpec) -> Result<u64, Refusal> {
        if self.tenants.len() >= self.config.max_tenants as usize {
            return Err(Refusal::TooManyTenants {
                limit: self.config.max_tenants,
            });
        }
        if let TenantSpec::LatencyCritical(slo) = spec {
            validate_slo(slo)?;
        }
        let mixed_after = self.mixed_tenants + u32::from(spec.declared_mix() == DeclaredMix::Mixed);
        let mix = mix_for(mixed_after, self.tenants.len() + 1);
        let own_mtok_per_sec = match spec {
            TenantSpec::LatencyCritical(slo) => {
                lc_reservation_mtok_per_sec(slo, &self.profile.cost_model(), mix)
            }
            TenantSpec::BestEffort(_) => 0,
        };
        let own_target = match spec {
            TenantSpec::LatencyCritical(slo) => Some(slo.p95_read_latency_ns),
            TenantSpec::BestEffort(_) => None,
        };
        let strictest = match (self.slo_targets.keys().next().copied(), own_target) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(strictest_p95_ns) = strictest else {
            return Ok(0); // BE tenant, no LC tenant: nothing to protect.
        };
        let capacity_mtok_per_sec = match self.scaled_rate(strictest_p95_ns, mix) {
            Ok(rate) => rate,
            Err(tightest_ns) => {
                return Err(Refusal::SloTighterThanTable {
                    p95_read_latency_ns: own_target.unwrap_or(strictest_p95_ns),
                    tightest_ns,
                })
            }
        };
        let reserved_mtok_per_sec = self.lc_sum(mix);
        let needed = reserved_mtok_per_sec.saturating_add(own_mtok_per_sec);
        // A BE newcomer only needs checking when it flips the mix (re-pricing the others).
        let flips_mix = mix != self.mix() && !self.tenants.is_empty();
        if (own_target.is_some() || flips_mix) && needed > capacity_mtok_per_sec {
            return Err(Refusal::ReservationsExceedCapacity {
                requested_mtok_per_sec: own_mtok_per_sec,
                reserved_mtok_per_sec,
                capacity_mtok_per_sec,
                strictest_p95_ns,
                mix,
            });
        }
        if own_target.is_some() || flips_mix {
            let mut pool = self.pool(mix).clone();
            if let TenantSpec::LatencyCritical(slo) = spec {
                pool.count(
                    slo,
                    &self.profile.cost_model(),
                    mix,
                    &self.headroom_model(),
                    true,
                );
            }
            let needed_surge_ppm = pool.needed_surge_ppm(&self.headroom_model());
            let surge_left_ppm = lc_surge(
                self.config.lc_surge_pct,
                needed,
                capacity_mtok_per_sec.saturating_sub(needed) / 2,
            )
            .0;
            let keep =
                self.config.headroom == AdmissionHeadroom::Slo && self.config.lc_surge_pct > 0;
            if keep && needed_surge_ppm > surge_left_ppm {
                return Err(Refusal::HeadroomExceedsCapacity {
                    requested_mtok_per_sec: own_mtok_per_sec,
                    reserved_mtok_per_sec,
                    capacity_mtok_per_sec,
                    needed_surge_ppm,
                    surge_left_ppm,
                    lc_surge_pct: self.config.lc_surge_pct,
                    strictest_p95_ns,
                    mix,
                });
            }
        }
        Ok(own_mtok_per_sec)
    }

    /// How the headroom rule is set up (`admission/headroom.rs`).
    fn headroom_model(&self) -> HeadroomModel {
        HeadroomModel {
            deficit_limit: self.config.deficit_limit,
            round_ns: self.config.round_ns,
            pooling: if self.config.lc_borrows_spare {
                Pooling::Pooled
            } else {
                Pooling::Alone
            },
        }
    }

    fn pool(&self, mix: LoadMix) -> &LcPool {
        match mix {
            LoadMix::Mixed => &self.pool_mixed,
            LoadMix::ReadOnly => &self.pool_read_only,
        }
    }

    /// Counts (`add`) or uncounts an LC tenant in the headroom pools of both mixes.
    fn count_needed_surge(&mut self, slo: &LcSlo, add: bool) {
        let cost = self.profile.cost_model();
        let model = self.headroom_model();
        self.pool_mixed
            .count(slo, &cost, LoadMix::Mixed, &model, add);
        self.pool_read_only
            .count(slo, &cost, LoadMix::ReadOnly, &model, add);
    }

    /// Admits a tenant or says why not.
    pub fn register(&mut self, spec: TenantSpec) -> Result<TenantHandle, Refusal> {
        let old_mix = self.mix();
        self.check(&spec)?;
        let id = TenantId(self.next_id);
        self.next_id += 1;
        let cost = self.profile.cost_model();
        if spec.declared_mix() == DeclaredMix::Mixed {
            self.mixed_tenants += 1;
        }
        let new_mix = mix_for(self.mixed_tenants, self.tenants.len() + 1);
        let rate = match &spec {
            TenantSpec::LatencyCritical(slo) => {
                *self.slo_targets.entry(slo.p95_read_latency_ns).or_insert(0) += 1;
                self.lc_sum_mixed_mtok_per_sec +=
                    lc_reservation_mtok_per_sec(slo, &cost, LoadMix::Mixed);
                self.lc_sum_read_only_mtok_per_sec +=
                    lc_reservation_mtok_per_sec(slo, &cost, LoadMix::ReadOnly);
                self.lc_tenants += 1;
                self.count_needed_surge(slo, true);
                lc_reservation_mtok_per_sec(slo, &cost, new_mix)
            }
            TenantSpec::BestEffort(_) => {
                self.be_tenants += 1;
                0
            }
        };
        let handle = TenantHandle::new(id, spec, rate);
        self.tenants.insert(id, handle.clone());
        if new_mix != old_mix {
            self.reprice(new_mix);
        }
        self.publish();
        Ok(handle)
    }

    /// Removes a tenant that no scheduler holds any more.
    pub fn unregister(&mut self, id: TenantId) -> Result<(), RegistryError> {
        let handle = self
            .tenants
            .get(&id)
            .ok_or(RegistryError::UnknownTenant(id))?;
        let workers = handle.attached_workers();
        if workers > 0 {
            return Err(RegistryError::StillAttached { id, workers });
        }
        let old_mix = self.mix();
        let spec = *handle.spec();
        self.tenants.remove(&id);
        let cost = self.profile.cost_model();
        if spec.declared_mix() == DeclaredMix::Mixed {
            self.mixed_tenants -= 1;
        }
        match &spec {
            TenantSpec::LatencyCritical(slo) => {
                let target = slo.p95_read_latency_ns;
                match self.slo_targets.get_mut(&target) {
                    Some(n) if *n > 1 => *n -= 1,
                    _ => {
                        self.slo_targets.remove(&target);
                    }
                }
                self.lc_sum_mixed_mtok_per_sec -=
                    lc_reservation_mtok_per_sec(slo, &cost, LoadMix::Mixed);
                self.lc_sum_read_only_mtok_per_sec -=
                    lc_reservation_mtok_per_sec(slo, &cost, LoadMix::ReadOnly);
                self.lc_tenants -= 1;
                self.count_needed_surge(slo, false);
            }
            TenantSpec::BestEffort(_) => self.be_tenants -= 1,
        }
        let new_mix = self.mix();
        if new_mix != old_mix {
            self.reprice(new_mix);
        }
        self.publish();
        Ok(())
    }

    /// Scales the table's rate (closed-loop correction); 1 000 000 ppm = as calibrated.
    pub fn set_rate_scale_ppm(&mut self, ppm: u32) -> Result<(), RegistryError> {
        if ppm == 0 || ppm > RATE_SCALE_MAX_PPM {
            return Err(RegistryError::BadRateScale {
                ppm,
                max: RATE_SCALE_MAX_PPM,
            });
        }
        self.rate_scale_ppm = ppm;
        self.publish();
        Ok(())
    }

    /// The closed-loop scale in force, ppm.
    pub fn rate_scale_ppm(&self) -> u32 {
        self.rate_scale_ppm
    }

    fn mix(&self) -> LoadMix {
        mix_for(self.mixed_tenants, self.tenants.len())
    }

    fn lc_sum(&self, mix: LoadMix) -> u64 {
        match mix {
            LoadMix::Mixed => self.lc_sum_mixed_mtok_per_sec,
            LoadMix::ReadOnly => self.lc_sum_read_only_mtok_per_sec,
        }
    }

    /// Table rate at `p95_ns` scaled by the closed loop; `Err(tightest_ns)` if too tight.
    fn scaled_rate(&self, p95_ns: u64, mix: LoadMix) -> Result<u64, u64> {
        let rate = self
            .profile
            .rate_mtok_per_sec(p95_ns, mix)
            .map_err(|e| e.tightest_ns)?;
        Ok(self.scale(rate))
    }

    fn scale(&self, rate_mtok_per_sec: u64) -> u64 {
        let scaled = u128::from(rate_mtok_per_sec) * u128::from(self.rate_scale_ppm)
            / u128::from(RATE_SCALE_UNITY_PPM);
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }

    /// Re-prices every LC tenant's reservation for a new mix and tells the schedulers.
    fn reprice(&mut self, mix: LoadMix) {
        let cost = self.profile.cost_model();
        for handle in self.tenants.values() {
            if let TenantSpec::LatencyCritical(slo) = handle.spec() {
                handle.ledger.rate_mtok_per_sec.store(
                    lc_reservation_mtok_per_sec(slo, &cost, mix),
                    Ordering::Relaxed,
                );
            }
        }
        self.shared.bump_rates_epoch();
    }

    /// Recomputes the device rate, the LC surge and the BE share and publishes them.
    fn publish(&mut self) {
        let mix = self.mix();
        let device_rate = match self.slo_targets.keys().next() {
            Some(&strictest) => self.scaled_rate(strictest, mix).unwrap_or_else(|tightest| {
                unreachable!("admitted target {strictest} ns below table {tightest} ns")
            }),
            None => self.scale(self.profile.max_rate_mtok_per_sec(mix)),
        };
        let reserved = self.lc_sum(mix);
        let unreserved = device_rate.saturating_sub(reserved);
        // The surge takes at most half of the unreserved rate: BE tenants keep a share of
        // their own (see the module essay for what a zero share did).
        let (surge_ppm, surge_mtok_per_sec) =
            lc_surge(self.config.lc_surge_pct, reserved, unreserved / 2);
        let spare = unreserved - surge_mtok_per_sec;
        let share = if self.be_tenants == 0 {
            0
        } else {
            spare / u64::from(self.be_tenants)
        };
        self.shared.publish(device_rate, share, surge_ppm, mix);
    }
}

/// The LC surge for `reserved` mtok/s of reservations with `available` mtok/s to give: the
/// configured percentage, or less if what is available cannot pay for it. Returns the surge
/// in ppm of a reservation and an upper bound on what all LC tenants together earn from it,
/// mtok/s (each tenant's earning rate rounds down, so their sum never exceeds it).
fn lc_surge(surge_pct: u32, reserved: u64, available: u64) -> (u32, u64) {
    if reserved == 0 {
        return (0, 0);
    }
    let wanted_ppm = u128::from(surge_pct) * 10_000;
    let affordable_ppm = u128::from(available) * 1_000_000 / u128::from(reserved);
    let ppm = wanted_ppm.min(affordable_ppm);
    let total = (u128::from(reserved) * ppm).div_ceil(1_000_000);
    let total = u64::try_from(total).unwrap_or(u64::MAX).min(available);
    (u32::try_from(ppm).unwrap_or(u32::MAX), total)
}

fn mix_for(mixed_tenants: u32, tenants: usize) -> LoadMix {
    if tenants > 0 && mixed_tenants == 0 {
        LoadMix::ReadOnly
    } else {
        LoadMix::Mixed
    }
}

fn validate_slo(slo: &LcSlo) -> Result<(), Refusal> {
    let bad = |reason: String| Err(Refusal::InvalidSlo { reason });
    if slo.iops == 0 {
        return bad("iops = 0; expected at least 1 request per second".into());
    }
    if slo.read_pct > 100 {
        return bad(format!("read_pct = {}; expected 0..=100", slo.read_pct));
    }
    if slo.request_bytes == 0 {
        return bad("request_bytes = 0; expected the typical request size in bytes".into());
    }
    if slo.p95_read_latency_ns == 0 {
        return bad("p95_read_latency_ns = 0; expected a latency target in nanoseconds".into());
    }
    Ok(())
}
