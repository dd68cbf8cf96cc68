//! Latency histograms and their summaries.
//!
//! Latencies go into HDR histograms (3 significant digits, so a 12.6 µs sample is kept to
//! within 10 ns and a 5 ms one to within 5 µs), never into sample vectors: memory stays
//! constant however many I/Os a run simulates (architecture rule 7). The exact sum and count
//! are kept beside the histogram so the mean is exact, not bucketed.
//!
//! A [`LatencySummary`] holds the percentiles storage papers quote: p50, p95, p99, p99.9,
//! p99.99, p99.999 and max, in integer nanoseconds; it is what `summary.json` prints.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// For `#[serde(skip_serializing_if = "engine::stats::is_zero")]`: counters left out of reports
/// while 0, so a run without the mechanism reports what it did before the counter existed.
pub fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// Significant decimal digits kept by every latency histogram.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// A latency distribution in nanoseconds.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    sum_ns: u128,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        let mut hist = Histogram::new(HISTOGRAM_SIGNIFICANT_DIGITS)
            .expect("3 significant digits is a valid histogram precision");
        hist.auto(true);
        LatencyHistogram { hist, sum_ns: 0 }
    }

    #[inline]
    pub fn record(&mut self, latency_ns: u64) {
        // Auto-resize grows the histogram to cover the value; only a value beyond what the
        // histogram can ever represent is clamped.
        if self.hist.record(latency_ns).is_err() {
            self.hist.saturating_record(latency_ns);
        }
        self.sum_ns += latency_ns as u128;
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Exact mean (integer ns, rounded down); 0 when empty.
    pub fn mean_ns(&self) -> u64 {
        match self.count() {
            0 => 0,
            n => (self.sum_ns / n as u128) as u64,
        }
    }

    /// The value at `quantile` (0.0..=1.0), at histogram precision.
    pub fn quantile_ns(&self, quantile: f64) -> u64 {
        if self.is_empty() {
            return 0;
        }
        self.hist.value_at_quantile(quantile)
    }

    pub fn max_ns(&self) -> u64 {
        if self.is_empty() {
            0
        } else {
            self.hist.max()
        }
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.hist
            .add(&other.hist)
            .expect("auto-resizing histograms accept any other histogram");
        self.sum_ns += other.sum_ns;
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            mean: self.mean_ns(),
            p50: self.quantile_ns(0.50),
            p95: self.quantile_ns(0.95),
            p99: self.quantile_ns(0.99),
            p99_9: self.quantile_ns(0.999),
            p99_99: self.quantile_ns(0.9999),
            p99_999: self.quantile_ns(0.99999),
            max: self.max_ns(),
        }
    }

    /// `(value_ns, cumulative fraction)` at each distinct recorded bucket, for CSV export.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        let total = self.count();
        if total == 0 {
            return Vec::new();
        }
        let mut seen = 0u64;
        self.hist
            .iter_recorded()
            .map(|v| {
                seen += v.count_at_value();
                (v.value_iterated_to(), seen as f64 / total as f64)
            })
            .collect()
    }
}

/// Percentiles of a latency distribution, all in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub mean: u64,
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub p99_99: u64,
    pub p99_999: u64,
    pub max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = LatencyHistogram::new();
        for v in 1..=100_000u64 {
            h.record(v * 10); // 10 ns .. 1 ms uniformly
        }
        let s = h.summary();
        assert_eq!(s.mean, 500_005);
        let close = |got: u64, want: u64| got.abs_diff(want) * 1000 <= want; // 0.1 %
        assert!(close(s.p50, 500_000), "p50 {}", s.p50);
        assert!(close(s.p99, 990_000), "p99 {}", s.p99);
        assert!(close(s.p99_999, 999_990), "p99.999 {}", s.p99_999);
        assert!(close(s.max, 1_000_000), "max {}", s.max);
    }

    #[test]
    fn empty_histogram_summarises_to_zero() {
        assert_eq!(LatencyHistogram::new().summary(), LatencySummary::default());
    }

    #[test]
    fn merge_adds_counts_and_sums() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        a.record(100);
        b.record(300);
        a.merge(&b);
        assert_eq!(a.count(), 2);
        assert_eq!(a.mean_ns(), 200);
    }
}
