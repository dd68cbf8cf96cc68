//! Latency histograms and their summaries.
//!
//! Latencies go into HDR histograms (3 significant digits, so a 12.6 µs sample is kept to
//! within 10 ns and a 5 ms one to within 5 µs), never into unbounded sample vectors: memory
//! stays constant however many I/Os a run simulates (architecture rule 7). The exact sum and
//! count are kept beside the histogram so the mean is exact, not bucketed.
//!
//! An HDR histogram at this precision costs about 16 KiB empty and 90 KiB once it has seen a
//! millisecond, so a histogram holds its first [`FEW_SAMPLES`] samples as they are (2 KiB at
//! most) and builds the HDR histogram only at the next one. A run with ten thousand tenants of
//! a few hundred requests each (the ReFlex study's tenant search) then costs megabytes, not
//! gigabytes; every figure is the same as if the samples had gone into the HDR histogram from
//! the start (the few are recorded into one before any percentile is read).
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

/// Samples a histogram keeps as they are before it builds its HDR histogram (see the essay).
pub const FEW_SAMPLES: usize = 256;

/// A latency distribution in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram {
    /// The first samples, while there are at most [`FEW_SAMPLES`] and `hist` is `None`.
    few: Vec<u64>,
    hist: Option<Box<Histogram<u64>>>,
    sum_ns: u128,
}

fn empty_hdr() -> Histogram<u64> {
    let mut hist = Histogram::new(HISTOGRAM_SIGNIFICANT_DIGITS)
        .expect("3 significant digits is a valid histogram precision");
    hist.auto(true);
    hist
}

fn record_hdr(hist: &mut Histogram<u64>, latency_ns: u64) {
    // Auto-resize grows the histogram to cover the value; only a value beyond what the
    // histogram can ever represent is clamped.
    if hist.record(latency_ns).is_err() {
        hist.saturating_record(latency_ns);
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    pub fn record(&mut self, latency_ns: u64) {
        match &mut self.hist {
            Some(hist) => record_hdr(hist, latency_ns),
            None if self.few.len() < FEW_SAMPLES => self.few.push(latency_ns),
            None => {
                self.hist = Some(Box::new(self.hdr()));
                self.few = Vec::new();
                record_hdr(self.hist.as_mut().expect("just built"), latency_ns);
            }
        }
        self.sum_ns += latency_ns as u128;
    }

    /// The HDR histogram of every sample: the one kept, or one built from the few.
    fn hdr(&self) -> Histogram<u64> {
        match &self.hist {
            Some(hist) => (**hist).clone(),
            None => {
                let mut hist = empty_hdr();
                for &v in &self.few {
                    record_hdr(&mut hist, v);
                }
                hist
            }
        }
    }

    /// Runs `f` on the HDR histogram of every sample, building one only while the samples are few.
    fn with_hdr<R>(&self, f: impl FnOnce(&Histogram<u64>) -> R) -> R {
        match &self.hist {
            Some(hist) => f(hist),
            None => f(&self.hdr()),
        }
    }

    pub fn count(&self) -> u64 {
        match &self.hist {
            Some(hist) => hist.len(),
            None => self.few.len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count() == 0
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
        self.with_hdr(|h| h.value_at_quantile(quantile))
    }

    pub fn max_ns(&self) -> u64 {
        if self.is_empty() {
            0
        } else {
            self.with_hdr(|h| h.max())
        }
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        match (&mut self.hist, &other.hist) {
            (None, None) if self.few.len() + other.few.len() <= FEW_SAMPLES => {
                self.few.extend_from_slice(&other.few);
            }
            (mine, theirs) => {
                let mut hist = match mine.take() {
                    Some(hist) => hist,
                    None => Box::new(self.hdr()),
                };
                self.few = Vec::new();
                match theirs {
                    Some(theirs) => hist
                        .add(&**theirs)
                        .expect("auto-resizing histograms accept any other histogram"),
                    None => other.few.iter().for_each(|&v| record_hdr(&mut hist, v)),
                }
                self.hist = Some(hist);
            }
        }
        self.sum_ns += other.sum_ns;
    }

    pub fn summary(&self) -> LatencySummary {
        if self.is_empty() {
            return LatencySummary::default();
        }
        self.with_hdr(|h| LatencySummary {
            mean: self.mean_ns(),
            p50: h.value_at_quantile(0.50),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p99_9: h.value_at_quantile(0.999),
            p99_99: h.value_at_quantile(0.9999),
            p99_999: h.value_at_quantile(0.99999),
            max: h.max(),
        })
    }

    /// `(value_ns, cumulative fraction)` at each distinct recorded bucket, for CSV export.
    pub fn cdf(&self) -> Vec<(u64, f64)> {
        let total = self.count();
        if total == 0 {
            return Vec::new();
        }
        let mut seen = 0u64;
        self.with_hdr(|h| {
            h.iter_recorded()
                .map(|v| {
                    seen += v.count_at_value();
                    (v.value_iterated_to(), seen as f64 / total as f64)
                })
                .collect()
        })
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

    /// The summary and CDF a raw HDR histogram gives for the same samples.
    fn reference(samples: &[u64]) -> (LatencySummary, Vec<(u64, f64)>) {
        let mut h = empty_hdr();
        samples.iter().for_each(|&v| record_hdr(&mut h, v));
        let q = |q: f64| h.value_at_quantile(q);
        let summary = LatencySummary {
            mean: (samples.iter().map(|&v| v as u128).sum::<u128>() / samples.len() as u128) as u64,
            p50: q(0.5),
            p95: q(0.95),
            p99: q(0.99),
            p99_9: q(0.999),
            p99_99: q(0.9999),
            p99_999: q(0.99999),
            max: h.max(),
        };
        let mut seen = 0;
        let cdf = h
            .iter_recorded()
            .map(|v| {
                seen += v.count_at_value();
                (v.value_iterated_to(), seen as f64 / samples.len() as f64)
            })
            .collect();
        (summary, cdf)
    }

    #[test]
    fn few_samples_and_many_give_what_the_hdr_histogram_gives() {
        let mut rng = crate::rng::stream(7, "few");
        for n in [
            1,
            2,
            FEW_SAMPLES - 1,
            FEW_SAMPLES,
            FEW_SAMPLES + 1,
            5 * FEW_SAMPLES,
        ] {
            let samples: Vec<u64> = (0..n)
                .map(|_| 1_000 + crate::rng::below(&mut rng, 3_000_000))
                .collect();
            let mut h = LatencyHistogram::new();
            samples.iter().for_each(|&v| h.record(v));
            assert_eq!(h.hist.is_some(), n > FEW_SAMPLES, "{n} samples");
            assert_eq!(h.count(), n as u64);
            assert_eq!((h.summary(), h.cdf()), reference(&samples), "{n} samples");
            let mut raw = empty_hdr();
            samples.iter().for_each(|&v| record_hdr(&mut raw, v));
            assert_eq!(h.quantile_ns(0.9), raw.value_at_quantile(0.9));
            assert_eq!(h.max_ns(), raw.max());
        }
    }

    #[test]
    fn merges_across_the_two_forms_keep_every_sample() {
        let mut rng = crate::rng::stream(8, "merge");
        for (a, b) in [(3, 4), (200, 100), (10, 700), (700, 10), (600, 600)] {
            let xs: Vec<u64> = (0..a + b)
                .map(|_| 1 + crate::rng::below(&mut rng, 10_000_000))
                .collect();
            let (mut ha, mut hb) = (LatencyHistogram::new(), LatencyHistogram::new());
            xs[..a].iter().for_each(|&v| ha.record(v));
            xs[a..].iter().for_each(|&v| hb.record(v));
            ha.merge(&hb);
            assert_eq!(ha.count(), (a + b) as u64);
            assert_eq!((ha.summary(), ha.cdf()), reference(&xs), "{a} + {b}");
        }
    }

    #[test]
    fn few_samples_cost_kilobytes_not_an_hdr_histogram() {
        let mut h = LatencyHistogram::new();
        (0..FEW_SAMPLES as u64).for_each(|v| h.record(5_000_000 + v));
        assert!(h.hist.is_none());
        assert!(h.few.capacity() * 8 <= 2 * FEW_SAMPLES * 8);
        h.record(1);
        assert!(h.few.capacity() == 0 && h.hist.is_some());
    }
}
