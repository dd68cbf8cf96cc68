//! Simulated time.
//!
//! All models count time in integer nanoseconds from the start of the run. An integer clock
//! means no rounding drift and a total order, so two runs with the same seed schedule the same
//! events in the same order on any machine. A `u64` of nanoseconds covers 584 years of
//! simulated time; a run is seconds to minutes.
//!
//! Durations are plain `u64` values whose names end in `_ns`; a point in time is a [`SimTime`].
//! `SimTime + u64` is a later point, `SimTime - SimTime` a duration.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use serde::{Deserialize, Serialize};

/// Nanoseconds per microsecond, millisecond and second, for readable constants.
pub const NS_PER_US: u64 = 1_000;
pub const NS_PER_MS: u64 = 1_000_000;
pub const NS_PER_SEC: u64 = 1_000_000_000;

/// A point in simulated time: nanoseconds since the start of the run.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct SimTime(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    pub const MAX: SimTime = SimTime(u64::MAX);

    pub const fn from_ns(ns: u64) -> SimTime {
        SimTime(ns)
    }
    pub const fn from_us(us: u64) -> SimTime {
        SimTime(us * NS_PER_US)
    }
    pub const fn from_ms(ms: u64) -> SimTime {
        SimTime(ms * NS_PER_MS)
    }
    pub const fn from_secs(s: u64) -> SimTime {
        SimTime(s * NS_PER_SEC)
    }
    pub const fn as_ns(self) -> u64 {
        self.0
    }
    /// Seconds as a float, for reports only (never for ordering).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NS_PER_SEC as f64
    }
    /// The duration from `earlier` to `self`; zero if `earlier` is later.
    pub fn saturating_since(self, earlier: SimTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<u64> for SimTime {
    type Output = SimTime;
    #[inline]
    fn add(self, ns: u64) -> SimTime {
        SimTime(self.0 + ns)
    }
}

impl AddAssign<u64> for SimTime {
    #[inline]
    fn add_assign(&mut self, ns: u64) {
        self.0 += ns;
    }
}

impl Sub for SimTime {
    type Output = u64;
    #[inline]
    fn sub(self, earlier: SimTime) -> u64 {
        if earlier.0 > self.0 {
            time_went_backwards(earlier, self);
        }
        self.0 - earlier.0
    }
}

#[cold]
#[inline(never)]
fn time_went_backwards(earlier: SimTime, later: SimTime) -> ! {
    panic!("time went backwards: {earlier} > {later}");
}

/// Formats a nanosecond duration with a unit that keeps three to four significant digits:
/// `850ns`, `12.6µs`, `1.25ms`, `10.000s`.
pub fn format_ns(ns: u64) -> String {
    if ns < NS_PER_US {
        format!("{ns}ns")
    } else if ns < NS_PER_MS {
        format!("{:.1}µs", ns as f64 / NS_PER_US as f64)
    } else if ns < NS_PER_SEC {
        format!("{:.2}ms", ns as f64 / NS_PER_MS as f64)
    } else {
        format!("{:.3}s", ns as f64 / NS_PER_SEC as f64)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_ns(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_a_readable_unit() {
        assert_eq!(SimTime(850).to_string(), "850ns");
        assert_eq!(SimTime::from_ns(12_600).to_string(), "12.6µs");
        assert_eq!(SimTime::from_us(1_250).to_string(), "1.25ms");
        assert_eq!(SimTime::from_secs(10).to_string(), "10.000s");
    }

    /// On in release builds too: a negative duration would wrap to centuries.
    #[test]
    #[should_panic(expected = "time went backwards: 9ns > 5ns")]
    fn a_negative_duration_stops_the_run() {
        let _ = SimTime(5) - SimTime(9);
    }

    #[test]
    fn arithmetic_is_in_nanoseconds() {
        let t = SimTime::from_us(3) + 500;
        assert_eq!(t.as_ns(), 3_500);
        assert_eq!(t - SimTime::from_us(1), 2_500);
        assert_eq!(SimTime(5).saturating_since(SimTime(9)), 0);
    }
}
