//! Closed-loop correction of the device token rate from measured p95 latency.
//!
//! # What it models
//! The published scheduler trusts its calibration: the device rate for the strictest SLO comes
//! from a table measured once. A device that ages, fills up, runs hotter or simply differs
//! from the one calibrated then breaks SLOs silently — the tenants stay within their
//! reservations, the scheduler hands out exactly the tokens the table allows, and p95 still
//! misses. Linux's blk-iocost faces the same problem with its linear cost model and solves it
//! with a *virtual rate* (`vrate`): it watches completion latencies against QoS targets each
//! period and scales the whole device's budget down when targets are missed and back up when
//! they are met and the device is busy. This module is that controller for the token rate
//! (remote.md, "beyond the published design" (b)).
//!
//! # The control law
//! Every window (the server measures each LC tenant's p95 read latency over, say, 100 ms) it
//! gets one [`WindowSample`] per LC tenant and decides:
//! * **Lower** when some tenant with enough reads (`min_reads_per_window`) missed its p95 target
//!   *while staying within its reservation* — the device, not the tenant, is to blame: the scale
//!   drops by `step_down_ppm` (2 % of itself by default). A tenant that missed while sending more
//!   than it reserved is ignored: throttling everyone for one tenant's overload would be wrong.
//! * **Raise** when every tenant with enough reads met its target with margin (measured ≤
//!   `raise_below_pct` % of the target, 80 % by default) for `raise_after_windows` windows in a
//!   row (3): the scale rises by `step_up_ppm` (0.5 %). Slower up than down, as in blk-iocost, so
//!   the loop errs on the side of the SLOs.
//! * **Hold** otherwise (met without margin, or not enough evidence).
//!
//! The scale is clamped to `[min_scale_ppm, max_scale_ppm]` (50 %..100 % of the calibration by
//! default: the loop corrects an optimistic calibration; it never promises more than was
//! measured unless configured to). Apply it with [`crate::Registry::set_rate_scale_ppm`]:
//! admission and the BE share then use the scaled rate; admitted LC tenants keep their
//! reservations (lowering shrinks what BE tenants get, possibly to nothing, and refuses
//! newcomers that no longer fit).
//!
//! Worked example: device "A" has aged so that its p95 at 500 µs needs the load below 336 K
//! tokens/s instead of 420 K. With BE tenants filling the device, the loop sees misses and
//! lowers 1.0 → 0.98 → 0.96 → … ; after 12 windows (0.98¹² ≈ 0.785) the load is 330 K tokens/s,
//! p95 is back under 500 µs and the loop holds. If the device recovers, p95 falls below 80 % of
//! the target and the scale creeps back up by 0.5 % every three windows.
//!
//! # What it leaves out
//! Write-latency targets, per-tenant rate adjustments (one scale for the device), and the
//! measurement itself (histograms live in the server and the simulator).
//!
//! # Config keys (`[qos.vrate]`)
//! `step_down_ppm`, `step_up_ppm`, `raise_below_pct`, `raise_after_windows`, `min_scale_ppm`,
//! `max_scale_ppm`, `min_reads_per_window`.

use serde::{Deserialize, Serialize};

use crate::admission::{RATE_SCALE_MAX_PPM, RATE_SCALE_UNITY_PPM};
use crate::tenant::TenantId;

/// Whether a tenant stayed within its reservation during a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Usage {
    /// It issued no more than it reserved: a missed SLO is the device's fault.
    WithinReservation,
    /// It issued more than it reserved: a missed SLO is (at least partly) its own doing.
    OverReservation,
}

/// One LC tenant's measurements over one window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowSample {
    /// The tenant.
    pub tenant: TenantId,
    /// Its SLO's p95 read-latency target, ns.
    pub slo_p95_read_latency_ns: u64,
    /// The p95 read latency measured over the window, ns.
    pub measured_p95_read_latency_ns: u64,
    /// Reads completed in the window (a p95 of a handful of reads is noise).
    pub reads: u64,
    /// Whether it stayed within its reservation.
    pub usage: Usage,
}

/// Settings of the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VrateConfig {
    /// Step down when an SLO is missed, ppm of the current scale.
    pub step_down_ppm: u32,
    /// Step up when every SLO is met with margin, ppm of the current scale.
    pub step_up_ppm: u32,
    /// Raise only when every measured p95 is at most this percentage of its target.
    pub raise_below_pct: u8,
    /// ... for this many consecutive windows.
    pub raise_after_windows: u32,
    /// Lowest scale, ppm of the calibrated rate.
    pub min_scale_ppm: u32,
    /// Highest scale, ppm of the calibrated rate.
    pub max_scale_ppm: u32,
    /// Samples with fewer reads are ignored.
    pub min_reads_per_window: u64,
}

impl Default for VrateConfig {
    fn default() -> Self {
        VrateConfig {
            step_down_ppm: 20_000,
            step_up_ppm: 5_000,
            raise_below_pct: 80,
            raise_after_windows: 3,
            min_scale_ppm: 500_000,
            max_scale_ppm: 1_000_000,
            min_reads_per_window: 100,
        }
    }
}

/// A bad controller setting.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VrateConfigError {
    /// A step of zero or of the whole scale.
    #[error("{key} = {value}; expected 1..1000000 ppm")]
    Step {
        /// The key.
        key: &'static str,
        /// Its value.
        value: u32,
    },
    /// Bounds out of order or out of range.
    #[error("min_scale_ppm = {min}, max_scale_ppm = {max}; expected 1 <= min <= max <= {limit}")]
    Bounds {
        /// `min_scale_ppm`.
        min: u32,
        /// `max_scale_ppm`.
        max: u32,
        /// Largest accepted.
        limit: u32,
    },
    /// A margin above 100 %.
    #[error("raise_below_pct = {0}; expected 1..=100")]
    Margin(u8),
}

/// What the controller decided for one window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// An SLO was missed by a tenant within its reservation: rate lowered.
    Lower,
    /// Every SLO met with margin for long enough: rate raised.
    Raise,
    /// Nothing to do (or not enough evidence).
    Hold,
}

/// The controller: feed it windows, apply its scale with
/// [`crate::Registry::set_rate_scale_ppm`].
#[derive(Clone, Debug)]
pub struct RateController {
    config: VrateConfig,
    scale_ppm: u32,
    good_windows: u32,
}

impl RateController {
    /// A controller starting at the calibrated rate (clamped into the configured bounds).
    pub fn new(config: VrateConfig) -> Result<Self, VrateConfigError> {
        for (key, value) in [
            ("step_down_ppm", config.step_down_ppm),
            ("step_up_ppm", config.step_up_ppm),
        ] {
            if value == 0 || value >= RATE_SCALE_UNITY_PPM {
                return Err(VrateConfigError::Step { key, value });
            }
        }
        if config.min_scale_ppm == 0
            || config.min_scale_ppm > config.max_scale_ppm
            || config.max_scale_ppm > RATE_SCALE_MAX_PPM
        {
            return Err(VrateConfigError::Bounds {
                min: config.min_scale_ppm,
                max: config.max_scale_ppm,
                limit: RATE_SCALE_MAX_PPM,
            });
        }
        if config.raise_below_pct == 0 || config.raise_below_pct > 100 {
            return Err(VrateConfigError::Margin(config.raise_below_pct));
        }
        Ok(RateController {
            config,
            scale_ppm: RATE_SCALE_UNITY_PPM.clamp(config.min_scale_ppm, config.max_scale_ppm),
            good_windows: 0,
        })
    }

    /// The scale in force, ppm.
    pub fn scale_ppm(&self) -> u32 {
        self.scale_ppm
    }

    /// Its settings.
    pub fn config(&self) -> &VrateConfig {
        &self.config
    }

    /// Feeds one window of measurements; returns the decision (the new scale is
    /// [`Self::scale_ppm`]).
    pub fn observe(&mut self, samples: &[WindowSample]) -> Decision {
        let c = self.config;
        let evidence = samples.iter().filter(|s| s.reads >= c.min_reads_per_window);
        let mut any = false;
        let mut device_missed = false;
        let mut all_with_margin = true;
        for s in evidence {
            any = true;
            let missed = s.measured_p95_read_latency_ns > s.slo_p95_read_latency_ns;
            if missed && s.usage == Usage::WithinReservation {
                device_missed = true;
            }
            let margin_ns =
                u128::from(s.slo_p95_read_latency_ns) * u128::from(c.raise_below_pct) / 100;
            if u128::from(s.measured_p95_read_latency_ns) > margin_ns {
                all_with_margin = false;
            }
        }
        if device_missed {
            self.good_windows = 0;
            self.scale_ppm = self.scaled(RATE_SCALE_UNITY_PPM - c.step_down_ppm);
            return Decision::Lower;
        }
        if !any || !all_with_margin {
            self.good_windows = 0;
            return Decision::Hold;
        }
        self.good_windows += 1;
        if self.good_windows < c.raise_after_windows || self.scale_ppm >= c.max_scale_ppm {
            return Decision::Hold;
        }
        self.good_windows = 0;
        self.scale_ppm = self.scaled(RATE_SCALE_UNITY_PPM + c.step_up_ppm);
        Decision::Raise
    }

    /// The current scale times `factor_ppm` / 1e6, clamped to the bounds; always moves by at
    /// least 1 ppm so small scales cannot get stuck.
    fn scaled(&self, factor_ppm: u32) -> u32 {
        let current = u64::from(self.scale_ppm);
        let mut next = current * u64::from(factor_ppm) / u64::from(RATE_SCALE_UNITY_PPM);
        if next == current {
            next = if factor_ppm > RATE_SCALE_UNITY_PPM {
                current + 1
            } else {
                current.saturating_sub(1)
            };
        }
        let next = u32::try_from(next).unwrap_or(u32::MAX);
        next.clamp(self.config.min_scale_ppm, self.config.max_scale_ppm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLO_NS: u64 = 500_000;

    fn sample(measured_ns: u64, usage: Usage) -> WindowSample {
        WindowSample {
            tenant: TenantId(1),
            slo_p95_read_latency_ns: SLO_NS,
            measured_p95_read_latency_ns: measured_ns,
            reads: 10_000,
            usage,
        }
    }

    fn controller() -> RateController {
        RateController::new(VrateConfig::default()).expect("defaults are valid")
    }

    #[test]
    fn a_miss_within_reservation_lowers_by_one_step() {
        let mut c = controller();
        assert_eq!(
            c.observe(&[sample(600_000, Usage::WithinReservation)]),
            Decision::Lower
        );
        assert_eq!(c.scale_ppm(), 980_000);
        assert_eq!(
            c.observe(&[sample(600_000, Usage::WithinReservation)]),
            Decision::Lower
        );
        assert_eq!(c.scale_ppm(), 960_400);
    }

    #[test]
    fn a_tenant_over_its_reservation_does_not_throttle_the_device() {
        let mut c = controller();
        let samples = [
            sample(900_000, Usage::OverReservation),
            sample(300_000, Usage::WithinReservation),
        ];
        assert_eq!(c.observe(&samples), Decision::Hold);
        assert_eq!(c.scale_ppm(), 1_000_000);
    }

    #[test]
    fn too_few_reads_is_no_evidence() {
        let mut c = controller();
        let thin = WindowSample {
            reads: 99,
            ..sample(5_000_000, Usage::WithinReservation)
        };
        assert_eq!(c.observe(&[thin]), Decision::Hold);
        assert_eq!(c.observe(&[]), Decision::Hold);
        assert_eq!(c.scale_ppm(), 1_000_000);
    }

    #[test]
    fn raises_only_after_enough_windows_with_margin() {
        let mut c = controller();
        for _ in 0..5 {
            c.observe(&[sample(600_000, Usage::WithinReservation)]);
        }
        let low = c.scale_ppm();
        // Met, but without margin (450 µs > 80 % of 500 µs): hold, and the streak restarts.
        assert_eq!(
            c.observe(&[sample(450_000, Usage::WithinReservation)]),
            Decision::Hold
        );
        assert_eq!(
            c.observe(&[sample(300_000, Usage::WithinReservation)]),
            Decision::Hold
        );
        assert_eq!(
            c.observe(&[sample(300_000, Usage::WithinReservation)]),
            Decision::Hold
        );
        assert_eq!(
            c.observe(&[sample(450_000, Usage::WithinReservation)]),
            Decision::Hold
        );
        for _ in 0..2 {
            assert_eq!(
                c.observe(&[sample(300_000, Usage::WithinReservation)]),
                Decision::Hold
            );
        }
        assert_eq!(
            c.observe(&[sample(300_000, Usage::WithinReservation)]),
            Decision::Raise
        );
        assert_eq!(
            c.scale_ppm(),
            u32::try_from(u64::from(low) * 1_005_000 / 1_000_000).unwrap()
        );
    }

    #[test]
    fn stays_within_bounds() {
        let mut c = controller();
        for _ in 0..1000 {
            c.observe(&[sample(5_000_000, Usage::WithinReservation)]);
        }
        assert_eq!(c.scale_ppm(), 500_000);
        for _ in 0..10_000 {
            c.observe(&[sample(1_000, Usage::WithinReservation)]);
        }
        assert_eq!(c.scale_ppm(), 1_000_000);
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let bad = VrateConfig {
            step_down_ppm: 0,
            ..VrateConfig::default()
        };
        let err = RateController::new(bad).unwrap_err();
        assert!(err.to_string().contains("step_down_ppm = 0"), "{err}");
        let bad = VrateConfig {
            min_scale_ppm: 900_000,
            max_scale_ppm: 800_000,
            ..VrateConfig::default()
        };
        assert!(matches!(
            RateController::new(bad),
            Err(VrateConfigError::Bounds { .. })
        ));
        let bad = VrateConfig {
            raise_below_pct: 101,
            ..VrateConfig::default()
        };
        assert_eq!(
            RateController::new(bad).unwrap_err(),
            VrateConfigError::Margin(101)
        );
    }

    /// A device model for the loop: p95 = 100 µs / (1 − ρ), ρ = offered load / saturation.
    /// Calibrated, device "A" saturates at 525 K tokens/s (p95 = 500 µs at 420 K); aged, at
    /// 420 K (p95 = 500 µs at 336 K). BE tenants keep the device at the scaled rate.
    fn p95_ns(scale_ppm: u32, saturation_tokens_per_sec: u64) -> u64 {
        let load = 420_000u64 * u64::from(scale_ppm) / 1_000_000;
        if load >= saturation_tokens_per_sec {
            return 100 * SLO_NS;
        }
        100_000 * saturation_tokens_per_sec / (saturation_tokens_per_sec - load)
    }

    #[test]
    fn closed_loop_finds_an_aged_device_and_recovers_with_it() {
        let mut c = controller();
        let mut misses_late = 0;
        for window in 0..200 {
            let measured = p95_ns(c.scale_ppm(), 420_000);
            if window >= 50 && measured > SLO_NS {
                misses_late += 1;
            }
            c.observe(&[sample(measured, Usage::WithinReservation)]);
        }
        // Converged to the aged knee (≤ 80 % of calibration) without overshooting far below it
        // (the margin band is 75 %..80 %), and stopped missing.
        let aged = c.scale_ppm();
        assert!((740_000..=800_000).contains(&aged), "scale {aged}");
        assert_eq!(misses_late, 0);
        // The device recovers (e.g. GC caught up): the loop climbs back, with margin.
        for _ in 0..300 {
            let measured = p95_ns(c.scale_ppm(), 525_000);
            assert!(
                measured <= SLO_NS,
                "recovering must not break the SLO: {measured} ns"
            );
            c.observe(&[sample(measured, Usage::WithinReservation)]);
        }
        let recovered = c.scale_ppm();
        assert!(
            (930_000..=1_000_000).contains(&recovered),
            "scale {recovered}"
        );
    }
}
