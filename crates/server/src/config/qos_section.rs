//! `[qos]`: the token scheduler (on or off) and its knobs (`[qos.tuning]`), the device profile
//! it prices requests with (module `profile` chooses it per volume), the start-up probe, the
//! closed-loop rate correction (`vrate`), LC surge and admission headroom.
//!
//! Worked example: an empty `[qos]` is the scheduler on, profile `auto`, vrate off with a
//! 100 ms window, the `qos` crate's default surge and headroom, no probe; `vrate_window_ms = 5`
//! is refused naming its range, 10..=10000 ms.

use serde::Deserialize;

use super::{invalid, ConfigError, AUTO_PROFILE_NAME};

/// Whether requests pass through the token scheduler (`[qos] scheduler = "on" | "off"`).
pub use qos::SchedulerMode;

/// The device's QoS profile: `"auto"` (the default: chosen by the volumes' backends, module
/// `profile`), a named profile of the `qos` crate (`profile = "reflex-a"`, `"memory"`) or an
/// inline table in the `qos` crate's profile format (`[qos.profile]` with `preset = "reflex-a"`
/// and overrides, or a complete profile with `points`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ProfileConfig {
    Named(String),
    Inline(toml::Table),
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig::Named(DEFAULT_PROFILE_NAME.to_string())
    }
}

/// The profile used when the config names none: `auto`, chosen by the volumes' backends.
pub const DEFAULT_PROFILE_NAME: &str = AUTO_PROFILE_NAME;

/// `[qos]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    #[serde(default)]
    pub scheduler: SchedulerMode,
    #[serde(default)]
    pub profile: ProfileConfig,
    /// The scheduler's knobs (`deficit_limit`, `donate_pct`, `cap_rounds`, `bucket_reset`,
    /// `bucket_max_age_ns`), as the `qos` crate defines them.
    #[serde(default)]
    pub tuning: qos::SchedulerConfig,
    /// The closed-loop correction of the device rate from measured LC p95 latency.
    #[serde(default)]
    pub vrate: VrateMode,
    /// Its measurement window.
    #[serde(default = "default_vrate_window_ms")]
    pub vrate_window_ms: u64,
    /// The controller's knobs, as the `qos` crate defines them (`step_down_ppm`, …).
    #[serde(default)]
    pub vrate_tuning: qos::VrateConfig,
    /// LC surge: LC tenants earn up to this percentage above their reservations, out of the
    /// unreserved rate (crate qos, `admission`); 0 paces them at exactly their reservations.
    #[serde(default = "default_lc_surge_pct")]
    pub lc_surge_pct: u32,
    /// `"slo"` (the default): admission also keeps the headroom the LC flows need to meet
    /// their SLOs at their rates (crate qos, `admission/headroom.rs`); `"off"`: Σ reservations
    /// ≤ the device rate, as published.
    #[serde(default)]
    pub admission_headroom: qos::AdmissionHeadroom,
    /// `"on"`: `ullstack serve` probes the first file volume's device for about a second at
    /// start-up when no profile is configured, and prices the flash volumes with the fitted
    /// profile (crate calibrate, module `probe`; module `profile`); `"off"` (the default).
    #[serde(default)]
    pub probe: ProbeMode,
    /// The profile the start-up probe fitted: not a config key (`ullstack serve` sets it).
    #[serde(skip)]
    pub probed_profile: Option<qos::DeviceProfile>,
}

/// Whether `ullstack serve` probes a file volume's device at start-up (`[qos] probe`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeMode {
    /// Use the configured profile, or `reflex-a` for flash volumes.
    #[default]
    Off,
    /// Fit a profile to a quick probe when none is configured.
    On,
}

impl Default for QosConfig {
    fn default() -> Self {
        QosConfig {
            scheduler: SchedulerMode::default(),
            profile: ProfileConfig::default(),
            tuning: qos::SchedulerConfig::default(),
            vrate: VrateMode::default(),
            vrate_window_ms: default_vrate_window_ms(),
            vrate_tuning: qos::VrateConfig::default(),
            lc_surge_pct: default_lc_surge_pct(),
            admission_headroom: qos::AdmissionHeadroom::default(),
            probe: ProbeMode::Off,
            probed_profile: None,
        }
    }
}

fn default_lc_surge_pct() -> u32 {
    qos::DEFAULT_LC_SURGE_PCT
}

/// Whether the closed loop (`server::vrate`) corrects the device rate.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum VrateMode {
    /// Trust the profile (the published design).
    #[default]
    Off,
    /// Lower the rate when LC flows within their reservations miss their SLOs; raise it back
    /// when they meet them with margin.
    On,
}

/// 100 ms: at 1,000 reads/s an LC flow gives the controller 100 reads per window, its default
/// `min_reads_per_window`; a shorter window would ignore such flows.
fn default_vrate_window_ms() -> u64 {
    100
}
/// Window bounds: below 10 ms a p95 is noise; above 10 s the loop reacts too late.
pub const VRATE_WINDOW_MS_RANGE: std::ops::RangeInclusive<u64> = 10..=10_000;

impl QosConfig {
    /// Checks the profile resolves and the knobs are in their ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.configured_profile()?;
        if !VRATE_WINDOW_MS_RANGE.contains(&self.vrate_window_ms) {
            return Err(invalid(
                "qos.vrate_window_ms",
                self.vrate_window_ms,
                format!(
                    "{}..={} ms",
                    VRATE_WINDOW_MS_RANGE.start(),
                    VRATE_WINDOW_MS_RANGE.end()
                ),
            ));
        }
        if let Err(e) = qos::RateController::new(self.vrate_tuning) {
            return Err(invalid(
                "qos.vrate_tuning",
                "(table)",
                format!("valid controller settings: {e}"),
            ));
        }
        if self.lc_surge_pct > qos::MAX_LC_SURGE_PCT {
            return Err(invalid(
                "qos.lc_surge_pct",
                self.lc_surge_pct,
                format!("0..={}", qos::MAX_LC_SURGE_PCT),
            ));
        }
        if self.tuning.donate_pct > 100 {
            return Err(invalid(
                "qos.tuning.donate_pct",
                self.tuning.donate_pct,
                "0..=100",
            ));
        }
        let rounds = self.tuning.cap_rounds;
        if rounds == 0 || rounds > qos::sched::MAX_CAP_ROUNDS {
            return Err(invalid(
                "qos.tuning.cap_rounds",
                rounds,
                format!("1..={}", qos::sched::MAX_CAP_ROUNDS),
            ));
        }
        Ok(())
    }
}
