//! Device profiles: what one device's tokens cost and how many it sustains at a latency target.
//!
//! # What it models
//! The published scheduler calibrates each device offline: it drives the device with mixes of
//! reads and writes, finds the write weight that makes the tail-latency-vs-weighted-load curves of
//! all read ratios coincide, and reads off the curve how many tokens per second the device
//! sustains before its p95 read latency crosses a target. A profile is that calibration result:
//! the prices of [`crate::cost`] plus a **latency → token-rate table**, with a second column for
//! a read-only load (whose tokens are priced differently, so its rates are separate).
//!
//! # The table
//! Points are `(p95 read latency, tokens/s, read-only tokens/s)`, strictly increasing in latency
//! and non-decreasing in both rates (a looser SLO never buys less throughput — that is what lets
//! admission control use the rate of the *strictest* admitted SLO for everyone).
//! Between points the rate is interpolated linearly; beyond the loosest point it stays at the
//! loosest point's rate (no extrapolation: calibration never saw more); **a target stricter than
//! the tightest point is refused**, never given a looser cap.
//!
//! Worked example, device "A" (points 500 µs → 420 K tokens/s and 2 ms → 570 K tokens/s):
//! a 1 ms target lies a third of the way from 500 µs to 2 ms, so it gets
//! 420 K + (570 K − 420 K) × (1000 − 500) / (2000 − 500) = 470 K tokens/s; a 300 µs target is
//! refused; a 5 ms target gets 570 K tokens/s.
//!
//! # Device "A" (preset `reflex-a`)
//! From the published cost model (presets.md): 1 token = one 4 KB random read, a write costs
//! 10 tokens, a read-only read 0.5 token; 420 K tokens/s at a 500 µs p95 SLO and 570 K at 2 ms;
//! about 1 M IOPS read-only. The publication gives one read-only number, the device's read
//! ceiling, so the read-only column holds 1 M IOPS × 0.5 token = 500 K tokens/s at both points
//! (an assumption: the read-only curve is flat over 500 µs..2 ms because the device is already at
//! its read ceiling; a calibration run replaces it).
//!
//! # Memory (preset `memory`)
//! A volume in RAM has no flash behind it: a write disturbs no read, and no device queue builds
//! a tail, so the prices of device "A" (a write costs 10 reads) would pace RAM as if it were
//! flash. The `memory` profile prices every 4 KB unit at one token, reads and writes alike
//! (read-only reads too: there is no write interference to be spared), and sustains
//! [`MEMORY_TOKENS_PER_SEC`] = 16 M tokens/s at every target from
//! [`MEMORY_TIGHTEST_P95_NS`] = 10 µs: ReFlex's 850 K IOPS per core times 16 cores, more than
//! any server of ours reaches on memory, so the token bucket never paces a memory volume; the
//! server's CPU is what limits it, and the profile does not model the CPU. Tokens are still
//! charged and counted per tenant, so reservations, shares and the per-tenant token metrics keep
//! their meaning. Worked example: 1 M pipelined 1 KiB writes cost 1 M tokens, 62 ms of the
//! bucket at 16 M tokens/s, where device "A" prices them at 10 M tokens, 17.5 s at 570 K
//! tokens/s.
//!
//! # What it leaves out
//! Latency targets other than p95 reads (the published design only promises read tails), and
//! the dependence of the rate on request size beyond the linear size factor.
//!
//! # TOML
//! ```toml
//! # either a complete profile, or `preset = "reflex-a"` followed by overrides
//! name = "reflex-a"
//! write_cost_mtok = 10000          # one 4 KB write, in milli-tokens
//! read_only_read_cost_mtok = 500   # one 4 KB read when the load is read-only
//! flush_cost_mtok = 10000          # optional, default: one write unit
//! trim_cost_mtok = 1000            # optional, default: one read unit
//! [[points]]
//! p95_read_latency_ns = 500000
//! tokens_per_sec = 420000
//! read_only_tokens_per_sec = 500000
//! ```
//! Unknown keys are errors (`deny_unknown_fields`), as everywhere in ullstack's config.

use serde::{Deserialize, Serialize};

use crate::cost::{CostModel, LoadMix, MTOK_PER_TOKEN, READ_COST_MTOK};

/// Name of the published device "A" profile.
pub const REFLEX_A: &str = "reflex-a";

/// Name of the built-in profile of a volume in RAM (see the module essay).
pub const MEMORY: &str = "memory";

/// The `memory` profile's rate: ReFlex's 850 K IOPS per core times 16 cores, rounded up; above
/// what the server reaches on memory, so the bucket never paces it (the CPU does).
pub const MEMORY_TOKENS_PER_SEC: u64 = 16_000_000;

/// The `memory` profile's tightest target: RAM answers in well under it, and the table must
/// start somewhere (a tighter SLO is refused, as on any profile).
pub const MEMORY_TIGHTEST_P95_NS: u64 = 10_000;

/// Names [`DeviceProfile::named`] knows.
pub const KNOWN_PROFILES: &[&str] = &[REFLEX_A, MEMORY];

/// One calibrated point of the latency → token-rate table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatePoint {
    /// The p95 read-latency target this point is for, in nanoseconds.
    pub p95_read_latency_ns: u64,
    /// Tokens per second the device sustains at that target under a mixed load.
    pub tokens_per_sec: u64,
    /// Tokens per second it sustains at that target when the whole load is read-only (tokens
    /// priced with the read-only read cost).
    pub read_only_tokens_per_sec: u64,
}

/// A device's cost model and capacity table. Validated on construction: every instance
/// obtained from this module satisfies the table rules in the module essay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Human name, e.g. `reflex-a`.
    pub name: String,
    /// Cost of one 4 KB write unit, milli-tokens.
    pub write_cost_mtok: u64,
    /// Cost of one 4 KB read unit when the load is read-only, milli-tokens.
    pub read_only_read_cost_mtok: u64,
    /// Cost of a FLUSH, milli-tokens.
    pub flush_cost_mtok: u64,
    /// Cost of a TRIM, milli-tokens.
    pub trim_cost_mtok: u64,
    /// The latency → token-rate table, strictly increasing in latency.
    pub points: Vec<RatePoint>,
}

/// What went wrong building or loading a profile.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProfileError {
    /// `DeviceProfile::named` or `preset = ...` with a name we do not ship.
    #[error("unknown device profile {name:?}; known profiles: {known}")]
    UnknownName {
        /// The name asked for.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// The TOML did not parse or had unknown keys.
    #[error("device profile TOML: {0}")]
    Toml(String),
    /// A complete profile (no `preset`) lacks a required key.
    #[error(
        "device profile: missing key `{key}` (give it, or start from `preset = \"{preset_hint}\"`)"
    )]
    MissingKey {
        /// The missing key.
        key: &'static str,
        /// A preset that would supply it.
        preset_hint: &'static str,
    },
    /// The values are inconsistent.
    #[error("device profile {name:?}: {reason}")]
    Invalid {
        /// The profile's name.
        name: String,
        /// What is wrong, naming the bad value and what was expected.
        reason: String,
    },
}

/// A latency target stricter than the profile's tightest calibrated point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("p95 read-latency target {p95_read_latency_ns} ns is tighter than the device profile's tightest calibrated point ({tightest_ns} ns)")]
pub struct SloTooTight {
    /// The target asked for.
    pub p95_read_latency_ns: u64,
    /// The tightest target the table covers.
    pub tightest_ns: u64,
}

/// The on-disk shape: everything optional so `preset = ...` plus overrides works.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileToml {
    preset: Option<String>,
    name: Option<String>,
    write_cost_mtok: Option<u64>,
    read_only_read_cost_mtok: Option<u64>,
    flush_cost_mtok: Option<u64>,
    trim_cost_mtok: Option<u64>,
    points: Option<Vec<RatePoint>>,
}

impl DeviceProfile {
    /// The published device "A" profile (see the module essay).
    pub fn reflex_a() -> Self {
        let profile = DeviceProfile {
            name: REFLEX_A.to_string(),
            write_cost_mtok: 10 * MTOK_PER_TOKEN,
            read_only_read_cost_mtok: MTOK_PER_TOKEN / 2,
            flush_cost_mtok: 10 * MTOK_PER_TOKEN,
            trim_cost_mtok: READ_COST_MTOK,
            points: vec![
                RatePoint {
                    p95_read_latency_ns: 500_000,
                    tokens_per_sec: 420_000,
                    read_only_tokens_per_sec: 500_000,
                },
                RatePoint {
                    p95_read_latency_ns: 2_000_000,
                    tokens_per_sec: 570_000,
                    read_only_tokens_per_sec: 500_000,
                },
            ],
        };
        debug_assert!(profile.validate().is_ok());
        profile
    }

    /// The built-in profile of a volume in RAM (see the module essay): one token per 4 KB unit
    /// for every operation, and a rate no memory volume reaches.
    pub fn memory() -> Self {
        let point = RatePoint {
            p95_read_latency_ns: MEMORY_TIGHTEST_P95_NS,
            tokens_per_sec: MEMORY_TOKENS_PER_SEC,
            read_only_tokens_per_sec: MEMORY_TOKENS_PER_SEC,
        };
        let profile = DeviceProfile {
            name: MEMORY.to_string(),
            write_cost_mtok: READ_COST_MTOK,
            read_only_read_cost_mtok: READ_COST_MTOK,
            flush_cost_mtok: READ_COST_MTOK,
            trim_cost_mtok: READ_COST_MTOK,
            points: vec![point],
        };
        debug_assert!(profile.validate().is_ok());
        profile
    }

    /// A shipped profile by name; an unknown name is an error listing the known ones.
    pub fn named(name: &str) -> Result<Self, ProfileError> {
        match name {
            REFLEX_A => Ok(Self::reflex_a()),
            MEMORY => Ok(Self::memory()),
            _ => Err(ProfileError::UnknownName {
                name: name.to_string(),
                known: KNOWN_PROFILES.join(", "),
            }),
        }
    }

    /// Builds a profile from parts and validates it.
    pub fn new(
        name: impl Into<String>,
        write_cost_mtok: u64,
        read_only_read_cost_mtok: u64,
        points: Vec<RatePoint>,
    ) -> Result<Self, ProfileError> {
        let profile = DeviceProfile {
            name: name.into(),
            write_cost_mtok,
            read_only_read_cost_mtok,
            flush_cost_mtok: write_cost_mtok,
            trim_cost_mtok: READ_COST_MTOK,
            points,
        };
        profile.validate()?;
        Ok(profile)
    }

    /// Parses a profile from TOML: a complete profile, or `preset = "<name>"` plus overrides
    /// (an overriding `points` replaces the whole table).
    pub fn from_toml_str(text: &str) -> Result<Self, ProfileError> {
        let raw: ProfileToml =
            toml::from_str(text).map_err(|e| ProfileError::Toml(e.to_string()))?;
        let base = match &raw.preset {
            Some(name) => Some(Self::named(name)?),
            None => None,
        };
        let need = |key: &'static str| ProfileError::MissingKey {
            key,
            preset_hint: REFLEX_A,
        };
        let name = match (raw.name, &base) {
            (Some(n), _) => n,
            (None, Some(b)) => b.name.clone(),
            (None, None) => return Err(need("name")),
        };
        let write_cost_mtok = raw
            .write_cost_mtok
            .or(base.as_ref().map(|b| b.write_cost_mtok))
            .ok_or_else(|| need("write_cost_mtok"))?;
        let read_only_read_cost_mtok = raw
            .read_only_read_cost_mtok
            .or(base.as_ref().map(|b| b.read_only_read_cost_mtok))
            .ok_or_else(|| need("read_only_read_cost_mtok"))?;
        let flush_cost_mtok = raw
            .flush_cost_mtok
            .or(base.as_ref().map(|b| b.flush_cost_mtok))
            .unwrap_or(write_cost_mtok);
        let trim_cost_mtok = raw
            .trim_cost_mtok
            .or(base.as_ref().map(|b| b.trim_cost_mtok))
            .unwrap_or(READ_COST_MTOK);
        let points = match (raw.points, base) {
            (Some(p), _) => p,
            (None, Some(b)) => b.points,
            (None, None) => return Err(need("points")),
        };
        let profile = DeviceProfile {
            name,
            write_cost_mtok,
            read_only_read_cost_mtok,
            flush_cost_mtok,
            trim_cost_mtok,
            points,
        };
        profile.validate()?;
        Ok(profile)
    }

    /// Renders the profile as a complete TOML document that [`Self::from_toml_str`] reads back.
    pub fn to_toml_string(&self) -> String {
        // Serializing plain integers, strings and an array of tables cannot fail.
        toml::to_string(self).unwrap_or_else(|e| unreachable!("profile serializes: {e}"))
    }

    /// Checks the table rules of the module essay; errors name the bad value.
    pub fn validate(&self) -> Result<(), ProfileError> {
        let invalid = |reason: String| {
            Err(ProfileError::Invalid {
                name: self.name.clone(),
                reason,
            })
        };
        if self.write_cost_mtok == 0 {
            return invalid(
                "write_cost_mtok = 0; expected a positive cost (device \"A\": 10000)".into(),
            );
        }
        if self.read_only_read_cost_mtok == 0 {
            return invalid(
                "read_only_read_cost_mtok = 0; expected a positive cost (device \"A\": 500)".into(),
            );
        }
        if self.points.is_empty() {
            return invalid(
                "points is empty; expected at least one latency → token-rate point".into(),
            );
        }
        for (i, p) in self.points.iter().enumerate() {
            if p.p95_read_latency_ns == 0
                || p.tokens_per_sec == 0
                || p.read_only_tokens_per_sec == 0
            {
                return invalid(format!(
                    "points[{i}] = {p:?}; expected positive latency and rates"
                ));
            }
            // Rates are kept in mtok/s in u64; refuse tables that would overflow that.
            if p.tokens_per_sec > u64::MAX / MTOK_PER_TOKEN / 4
                || p.read_only_tokens_per_sec > u64::MAX / MTOK_PER_TOKEN / 4
            {
                return invalid(format!("points[{i}] = {p:?}; rate is absurdly large"));
            }
        }
        for (i, w) in self.points.windows(2).enumerate() {
            let (a, b) = (w[0], w[1]);
            if b.p95_read_latency_ns <= a.p95_read_latency_ns {
                return invalid(format!(
                    "points[{}].p95_read_latency_ns = {} is not above points[{i}]'s {}; expected strictly increasing latencies",
                    i + 1,
                    b.p95_read_latency_ns,
                    a.p95_read_latency_ns
                ));
            }
            if b.tokens_per_sec < a.tokens_per_sec
                || b.read_only_tokens_per_sec < a.read_only_tokens_per_sec
            {
                return invalid(format!(
                    "points[{}] = {b:?} has a lower rate than the stricter points[{i}] = {a:?}; expected rates non-decreasing with latency",
                    i + 1
                ));
            }
        }
        Ok(())
    }

    /// The prices of this device.
    pub fn cost_model(&self) -> CostModel {
        CostModel {
            write_cost_mtok: self.write_cost_mtok,
            read_only_read_cost_mtok: self.read_only_read_cost_mtok,
            flush_cost_mtok: self.flush_cost_mtok,
            trim_cost_mtok: self.trim_cost_mtok,
        }
    }

    /// The tightest latency target the table covers, ns.
    pub fn tightest_p95_ns(&self) -> u64 {
        self.points
            .first()
            .map_or(u64::MAX, |p| p.p95_read_latency_ns)
    }

    /// The rate of the loosest point (what the device gives when no SLO constrains it), mtok/s.
    pub fn max_rate_mtok_per_sec(&self, mix: LoadMix) -> u64 {
        self.points
            .last()
            .map_or(0, |p| column_mtok_per_sec(p, mix))
    }

    /// The token rate the device sustains at a p95 read-latency target, in mtok/s: linear
    /// interpolation between points, the loosest point's rate beyond the table, and a refusal
    /// for a target tighter than the table.
    pub fn rate_mtok_per_sec(
        &self,
        p95_read_latency_ns: u64,
        mix: LoadMix,
    ) -> Result<u64, SloTooTight> {
        let tightest_ns = self.tightest_p95_ns();
        if p95_read_latency_ns < tightest_ns {
            return Err(SloTooTight {
                p95_read_latency_ns,
                tightest_ns,
            });
        }
        // First point at or beyond the target.
        let upper = self
            .points
            .partition_point(|p| p.p95_read_latency_ns < p95_read_latency_ns);
        let Some(hi) = self.points.get(upper) else {
            return Ok(self.max_rate_mtok_per_sec(mix));
        };
        if hi.p95_read_latency_ns == p95_read_latency_ns || upper == 0 {
            return Ok(column_mtok_per_sec(hi, mix));
        }
        let lo = &self.points[upper - 1];
        let (r_lo, r_hi) = (
            u128::from(column_mtok_per_sec(lo, mix)),
            u128::from(column_mtok_per_sec(hi, mix)),
        );
        let span_ns = u128::from(hi.p95_read_latency_ns - lo.p95_read_latency_ns);
        let into_ns = u128::from(p95_read_latency_ns - lo.p95_read_latency_ns);
        let rate = r_lo + (r_hi - r_lo) * into_ns / span_ns;
        debug_assert!(rate >= r_lo && rate <= r_hi);
        Ok(rate as u64)
    }
}

fn column_mtok_per_sec(p: &RatePoint, mix: LoadMix) -> u64 {
    let tokens_per_sec = match mix {
        LoadMix::Mixed => p.tokens_per_sec,
        LoadMix::ReadOnly => p.read_only_tokens_per_sec,
    };
    tokens_per_sec * MTOK_PER_TOKEN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_prices_writes_as_reads_and_outruns_device_a() {
        let m = DeviceProfile::named(MEMORY).expect("shipped");
        assert_eq!(m, DeviceProfile::memory());
        assert!(m.validate().is_ok());
        let (mc, ac) = (m.cost_model(), DeviceProfile::reflex_a().cost_model());
        assert_eq!(mc.write_cost_mtok, READ_COST_MTOK);
        assert!(mc.write_cost_mtok * 10 <= ac.write_cost_mtok);
        // Every SLO the flash table covers, memory covers at a higher rate.
        for ns in [MEMORY_TIGHTEST_P95_NS, 500_000, 2_000_000, 10_000_000] {
            let rate = m.rate_mtok_per_sec(ns, LoadMix::Mixed).expect("covered");
            assert_eq!(rate, MEMORY_TOKENS_PER_SEC * MTOK_PER_TOKEN);
            assert!(rate > 20 * DeviceProfile::reflex_a().max_rate_mtok_per_sec(LoadMix::Mixed));
        }
        assert!(m
            .rate_mtok_per_sec(MEMORY_TIGHTEST_P95_NS - 1, LoadMix::Mixed)
            .is_err());
        let text = m.to_toml_string();
        assert_eq!(DeviceProfile::from_toml_str(&text), Ok(m));
    }

    #[test]
    fn reflex_a_matches_the_published_figures() {
        let a = DeviceProfile::named("reflex-a").expect("shipped");
        let m = a.cost_model();
        assert_eq!(m.write_cost_mtok, 10_000);
        assert_eq!(m.read_only_read_cost_mtok, 500);
        assert_eq!(
            a.rate_mtok_per_sec(500_000, LoadMix::Mixed),
            Ok(420_000_000)
        );
        assert_eq!(
            a.rate_mtok_per_sec(2_000_000, LoadMix::Mixed),
            Ok(570_000_000)
        );
        // ~1 M read-only IOPS at 0.5 token each.
        assert_eq!(
            a.rate_mtok_per_sec(2_000_000, LoadMix::ReadOnly),
            Ok(500_000_000)
        );
    }

    #[test]
    fn interpolates_linearly_between_points() {
        let a = DeviceProfile::reflex_a();
        assert_eq!(
            a.rate_mtok_per_sec(1_000_000, LoadMix::Mixed),
            Ok(470_000_000)
        );
        assert_eq!(
            a.rate_mtok_per_sec(1_250_000, LoadMix::Mixed),
            Ok(495_000_000)
        );
    }

    #[test]
    fn looser_than_the_table_gets_the_loosest_rate() {
        let a = DeviceProfile::reflex_a();
        assert_eq!(
            a.rate_mtok_per_sec(50_000_000, LoadMix::Mixed),
            Ok(570_000_000)
        );
    }

    #[test]
    fn tighter_than_the_table_is_refused() {
        let a = DeviceProfile::reflex_a();
        let err = a.rate_mtok_per_sec(300_000, LoadMix::Mixed).unwrap_err();
        assert_eq!(err.tightest_ns, 500_000);
        assert!(err.to_string().contains("300000"), "{err}");
    }

    #[test]
    fn unknown_name_lists_known_names() {
        let err = DeviceProfile::named("reflex-z").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("reflex-z") && text.contains("reflex-a"),
            "{text}"
        );
    }

    #[test]
    fn toml_round_trip() {
        let a = DeviceProfile::reflex_a();
        let text = a.to_toml_string();
        assert_eq!(DeviceProfile::from_toml_str(&text), Ok(a));
    }

    #[test]
    fn toml_preset_with_override() {
        let p = DeviceProfile::from_toml_str(
            "preset = \"reflex-a\"\nname = \"aged-a\"\nwrite_cost_mtok = 12000\n",
        )
        .expect("valid");
        assert_eq!(p.name, "aged-a");
        assert_eq!(p.write_cost_mtok, 12_000);
        assert_eq!(p.points, DeviceProfile::reflex_a().points);
    }

    #[test]
    fn toml_unknown_key_is_named() {
        let err =
            DeviceProfile::from_toml_str("preset = \"reflex-a\"\nwrite_weight = 3\n").unwrap_err();
        assert!(err.to_string().contains("write_weight"), "{err}");
    }

    #[test]
    fn toml_missing_key_without_preset() {
        let err = DeviceProfile::from_toml_str("name = \"x\"\nwrite_cost_mtok = 1\n").unwrap_err();
        assert!(
            err.to_string().contains("read_only_read_cost_mtok"),
            "{err}"
        );
    }

    #[test]
    fn unsorted_or_decreasing_tables_are_refused() {
        let p = |l, r| RatePoint {
            p95_read_latency_ns: l,
            tokens_per_sec: r,
            read_only_tokens_per_sec: r,
        };
        let err =
            DeviceProfile::new("x", 10_000, 500, vec![p(2_000, 10), p(1_000, 20)]).unwrap_err();
        assert!(err.to_string().contains("strictly increasing"), "{err}");
        let err =
            DeviceProfile::new("x", 10_000, 500, vec![p(1_000, 20), p(2_000, 10)]).unwrap_err();
        assert!(err.to_string().contains("non-decreasing"), "{err}");
        let err = DeviceProfile::new("x", 10_000, 500, vec![]).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
    }
}
