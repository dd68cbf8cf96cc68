//! Latency histograms and their summaries.
//!
//! Latencies go into HDR histograms (3 significant digits, so a 12.6 µs sample is kept to
//! within 10 ns and a 5 ms one to within 5 µs), never into unbounded sample vectors: memory
//! stays constant however many I/Os a run simulates (architecture rule 7). The exact sum and
//! count are kept beside the histogram so the mean is exact, not bucketed.
//!
//! An HDR histogram at this precision costs about 16 KiB empty and 90 KiB once it has seen a
//! millisecond, so a histogram holds its first [`FEW_SAMPLES`] samples as they are (2 KiB at
//! most) and counts by bucket only from the next one. A run with ten thousand tenants of a few
//! hundred requests each (the ReFlex study's tenant search) then costs megabytes, not
//! gigabytes; every figure is the same as if the samples had gone into the HDR histogram from
//! the start (the few are recorded into one before any percentile is read).
//!
//! ## Recording is an increment
//! Past the few, a sample is counted in a flat array laid out as the HDR histogram lays out
//! its counts ([`hdr_index`]: the power-of-two bucket from the value's leading zeros, the
//! sub-bucket from its top 11 bits), and the `hdrhistogram` crate's histogram is built from
//! that array only when a figure is read (kept until the next sample). Recording into the
//! crate's histogram checks the value's range, tests for a resize and updates the minimum and
//! maximum on every sample, once per I/O of a run; the increment does none of that. Each
//! bucket's count goes into the built histogram at the bucket's lowest value, which that
//! histogram puts in the same bucket (`tests::the_index_is_the_hdr_histograms`), so its
//! counts, percentiles and maximum are the ones direct recording gives.
//!
//! Worked example: 12,600 ns has 50 leading zeros, so its bucket is 64 − 11 − 50 = 3
//! (sub-buckets of 2^3 = 8 ns), its sub-bucket 12,600 >> 3 = 1,575, and its index
//! 4 · 1,024 + 1,575 − 1,024 = 4,647, the count of 12,600 to 12,607 ns.
//!
//! A [`LatencySummary`] holds the percentiles storage papers quote: p50, p95, p99, p99.9,
//! p99.99, p99.999 and max, in integer nanoseconds; it is what `summary.json` prints.

use std::sync::OnceLock;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// For `#[serde(skip_serializing_if = "engine::stats::is_zero")]`: counters left out of reports
/// while 0, so a run without the mechanism reports what it did before the counter existed.
pub fn is_zero(count: &u64) -> bool {
    *count == 0
}

/// Significant decimal digits kept by every latency histogram.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// Sub-buckets per power-of-two bucket at 3 significant digits: the smallest power of two
/// above 2 × 10^3 (so values below 2,048 ns are kept exactly), as the HDR histogram chooses.
const SUB_BUCKET_BITS: u32 = 11;
const SUB_BUCKET_HALF_BITS: u32 = SUB_BUCKET_BITS - 1;
const SUB_BUCKET_MASK: u64 = (1 << SUB_BUCKET_BITS) - 1;

/// Samples a histogram keeps as they are before it counts by bucket (see the essay).
pub const FEW_SAMPLES: usize = 256;

/// The HDR histogram's count index of `value` (3 significant digits, unit 1 ns): bucket `b`
/// (0 for values below 2,048, else how many doublings above that) holds sub-buckets of
/// `2^b` ns; the index is `(b + 1) · 1024 + value / 2^b − 1024`.
#[inline]
pub fn hdr_index(value: u64) -> usize {
    let bucket = (64 - SUB_BUCKET_BITS) - (value | SUB_BUCKET_MASK).leading_zeros();
    let sub_bucket = (value >> bucket) as usize;
    (((bucket + 1) as usize) << SUB_BUCKET_HALF_BITS) + sub_bucket - (1 << SUB_BUCKET_HALF_BITS)
}

/// The lowest value of count index `index` (the inverse of [`hdr_index`] on a bucket's first
/// value).
fn hdr_value(index: usize) -> u64 {
    let half = 1usize << SUB_BUCKET_HALF_BITS;
    match (index >> SUB_BUCKET_HALF_BITS).checked_sub(1) {
        None => index as u64, // the lower half of bucket 0: the value itself
        Some(bucket) => (((index & (half - 1)) + half) as u64) << bucket,
    }
}

/// A latency distribution in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram {
    /// The first samples, while there are at most [`FEW_SAMPLES`] and `counts` is unused.
    few: Vec<u64>,
    /// Past the few: samples per HDR count index ([`hdr_index`]), as long as the largest
    /// index seen; `total` of them.
    counts: Vec<u64>,
    total: u64,
    sum_ns: u128,
    /// The HDR histogram of `counts`, built when a figure is read; a sample clears it.
    built: OnceLock<Box<Histogram<u64>>>,
}

fn empty_hdr() -> Histogram<u64> {
    let mut hist = Histogram::new(HISTOGRAM_SIGNIFICANT_DIGITS)
        .expect("3 significant digits is a valid histogram precision");
    hist.auto(true);
    hist
}

fn record_hdr(hist: &mut Histogram<u64>, latency_ns: u64) {
    record_hdr_n(hist, latency_ns, 1);
}

fn record_hdr_n(hist: &mut Histogram<u64>, latency_ns: u64, n: u64) {
    // Auto-resize grows the histogram to cover the value; only a value beyond what the
    // histogram can ever represent is clamped.
    if hist.record_n(latency_ns, n).is_err() {
        hist.saturating_record_n(latency_ns, n);
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        Self::default()
    }

    /// Always inlined (one call site per op in an event loop): past the few, a sample is an
    /// index, a compare and two increments, fewer instructions than a call's prologue and
    /// epilogue; the rare paths (the few, a longer array, a built histogram) are out of line.
    #[inline(always)]
    pub fn record(&mut self, latency_ns: u64) {
        if self.total > 0 {
            self.count_sample(latency_ns);
        } else {
            self.record_while_few(latency_ns);
        }
        self.sum_ns += latency_ns as u128;
    }

    /// Records a sample while the histogram holds the few (at most [`FEW_SAMPLES`] of them):
    /// keeps it, or counts them all by bucket once there would be more.
    #[cold]
    #[inline(never)]
    fn record_while_few(&mut self, latency_ns: u64) {
        if self.few.len() < FEW_SAMPLES {
            self.few.push(latency_ns);
        } else {
            for v in std::mem::take(&mut self.few) {
                self.count_sample(v);
            }
            self.count_sample(latency_ns);
        }
    }

    /// Counts one sample in its bucket (the samples are past the few).
    #[inline(always)]
    fn count_sample(&mut self, latency_ns: u64) {
        let i = hdr_index(latency_ns);
        match self.counts.get_mut(i) {
            Some(n) => *n += 1,
            None => self.count_past_the_end(i),
        }
        self.total += 1;
        if self.built.get().is_some() {
            self.built = OnceLock::new();
        }
    }

    /// Counts a sample at index `i`, past the array's end: the array grows to hold it.
    #[cold]
    #[inline(never)]
    fn count_past_the_end(&mut self, i: usize) {
        self.counts.resize(i + 1, 0);
        self.counts[i] += 1;
    }

    /// The HDR histogram of every sample, built from the few or from the bucket counts.
    fn hdr(&self) -> Histogram<u64> {
        let mut hist = empty_hdr();
        if self.total == 0 {
            for &v in &self.few {
                record_hdr(&mut hist, v);
            }
        } else {
            for (i, &n) in self.counts.iter().enumerate() {
                if n > 0 {
                    record_hdr_n(&mut hist, hdr_value(i), n);
                }
            }
        }
        hist
    }

    /// Runs `f` on the HDR histogram of every sample: built once from the counts until the
    /// next sample, or from the few each time (they are few).
    fn with_hdr<R>(&self, f: impl FnOnce(&Histogram<u64>) -> R) -> R {
        if self.total == 0 {
            return f(&self.hdr());
        }
        f(self.built.get_or_init(|| Box::new(self.hdr())))
    }

    pub fn count(&self) -> u64 {
        self.total + self.few.len() as u64
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
        if self.total == 0 && other.total == 0 && self.few.len() + other.few.len() <= FEW_SAMPLES {
            self.few.extend_from_slice(&other.few);
        } else {
            for v in std::mem::take(&mut self.few)
                .into_iter()
                .chain(other.few.iter().copied())
            {
                self.count_sample(v);
            }
            if self.counts.len() < other.counts.len() {
                self.counts.resize(other.counts.len(), 0);
            }
            for (mine, &theirs) in self.counts.iter_mut().zip(&other.counts) {
                *mine += theirs;
            }
            self.total += other.total;
            self.built = OnceLock::new();
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
            assert_eq!(h.total > 0, n > FEW_SAMPLES, "{n} samples");
            assert_eq!(h.count(), n as u64);
            assert_eq!((h.summary(), h.cdf()), reference(&samples), "{n} samples");
            let mut raw = empty_hdr();
            samples.iter().for_each(|&v| record_hdr(&mut raw, v));
            assert_eq!(h.quantile_ns(0.9), raw.value_at_quantile(0.9));
            assert_eq!(h.max_ns(), raw.max());
        }
    }

    /// The bucket counts' index partitions the values as the HDR histogram does: every value
    /// shares its index with the HDR histogram's lowest and highest equivalents of it, and the
    /// next value past the highest starts the next index, from 0 ns to 2^62 ns.
    #[test]
    fn the_index_is_the_hdr_histograms() {
        // The essay's worked example.
        assert_eq!(hdr_index(12_600), 4_647);
        assert_eq!(
            (hdr_value(4_647), hdr_index(12_607), hdr_index(12_608)),
            (12_600, 4_647, 4_648)
        );
        let h = empty_hdr();
        let mut rng = crate::rng::stream(9, "index");
        let mut values: Vec<u64> = (0..5_000).collect();
        for shift in 0..62 {
            let p = 1u64 << shift;
            values.extend([p - 1, p, p + 1, p + p / 3]);
        }
        values.extend((0..100_000).map(|_| crate::rng::below(&mut rng, 1 << 40)));
        for v in values {
            let i = hdr_index(v);
            let (low, high) = (h.lowest_equivalent(v), h.highest_equivalent(v));
            assert_eq!(hdr_value(i), low, "lowest value of {v}'s bucket");
            assert_eq!(hdr_index(low), i, "{v}");
            assert_eq!(hdr_index(high), i, "{v}");
            assert_eq!(hdr_index(high + 1), i + 1, "{v}");
        }
    }

    /// Wide samples (1 ns to about 18 minutes) and a figure read between samples give what
    /// the HDR histogram gives.
    #[test]
    fn wide_samples_and_reads_between_them_match_the_hdr_histogram() {
        let mut rng = crate::rng::stream(10, "wide");
        let samples: Vec<u64> = (0..20_000)
            .map(|_| {
                let bits = 1 + crate::rng::below(&mut rng, 40);
                1 + crate::rng::below(&mut rng, 1 << bits)
            })
            .collect();
        let mut h = LatencyHistogram::new();
        for (k, &v) in samples.iter().enumerate() {
            h.record(v);
            if k % 5_000 == 4_999 {
                assert_eq!((h.summary(), h.cdf()), reference(&samples[..=k]), "{k}");
            }
        }
        assert_eq!((h.summary(), h.cdf()), reference(&samples));
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
        assert!(h.total == 0);
        assert!(h.few.capacity() * 8 <= 2 * FEW_SAMPLES * 8);
        h.record(1);
        assert!(h.few.capacity() == 0 && h.total > 0);
    }
}
