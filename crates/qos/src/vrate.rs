//! Closed-loop correction of the device token rate from measured p95 latency.
//!
//! (Essay written with the implementation.)

use serde::{Deserialize, Serialize};

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
    /// Step down when an SLO is missed, ppm of the calibrated rate.
    pub step_down_ppm: u32,
    /// Step up when every SLO is met with margin, ppm.
    pub step_up_ppm: u32,
    /// Raise only when every measured p95 is at most this percentage of its target.
    pub raise_below_pct: u8,
    /// ... for this many consecutive windows.
    pub raise_after_windows: u32,
    /// Lowest scale, ppm.
    pub min_scale_ppm: u32,
    /// Highest scale, ppm.
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
    /// A controller starting at the calibrated rate.
    pub fn new(config: VrateConfig) -> Self {
        let _ = config;
        todo!()
    }

    /// The scale in force, ppm.
    pub fn scale_ppm(&self) -> u32 {
        self.scale_ppm
    }

    /// Feeds one window of measurements; returns the decision (the new scale is
    /// [`Self::scale_ppm`]).
    pub fn observe(&mut self, samples: &[WindowSample]) -> Decision {
        let _ = (samples, self.good_windows, &self.config);
        todo!()
    }
}
