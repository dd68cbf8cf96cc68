//! Latency windows: one latency-critical flow's read latencies over the current window.
//!
//! # What it implements
//! The measurement half of the closed loop ([`crate::vrate`]): each LC flow admitted while
//! `[qos] vrate = "on"` gets a [`LatencyWindow`] that the worker completing one of its reads
//! updates, and that the control thread empties at the end of each window to read its p95.
//!
//! # Design
//! A log-linear histogram of atomic counters: exact below 8 ns, then 8 sub-buckets per power of
//! two (a bucket spans at most 12.5 % of its lower edge) up to 2^44 ns (~4.9 hours) — 336
//! buckets, 2.6 KiB per flow. Recording is one relaxed `fetch_add` (no lock on the data path);
//! [`LatencyWindow::take`] swaps every counter to zero, so a read completing during the swap
//! lands in this window or the next, never in both. The p95 reported is the upper edge of its
//! bucket, so the loop errs on the side of "missed". Worked example: 95 reads at 100 µs and 5
//! at 10 ms: the 95th of 100 is in the bucket [98,304, 106,496) ns, reported as 106,495 ns.
//!
//! # What it leaves out
//! Write latencies (the SLOs are on reads) and percentiles other than the 95th.

use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two (log2): 8, so a bucket spans ≤ 12.5 % of its lower edge.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Buckets: exact below 8 ns, then 8 per power of two up to 2^44 ns (~4.9 hours).
const BUCKETS: usize = (SUB + (44 - SUB_BITS as u64) * SUB) as usize;
/// The histogram bucket of a latency.
pub fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = (ns >> shift) & (SUB - 1);
    let index = SUB + u64::from(shift) * SUB + sub;
    (index as usize).min(BUCKETS - 1)
}

/// The largest latency that falls in bucket `index`.
pub fn bucket_upper_ns(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB {
        return index;
    }
    let shift = (index - SUB) / SUB;
    let sub = (index - SUB) % SUB;
    ((SUB + sub + 1) << shift) - 1
}

/// One LC flow's read latencies in the current window.
pub struct LatencyWindow {
    buckets: Box<[AtomicU64]>,
}

impl Default for LatencyWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyWindow {
    pub fn new() -> LatencyWindow {
        LatencyWindow {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one completed read (any worker thread).
    pub fn record(&self, latency_ns: u64) {
        self.buckets[bucket_of(latency_ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// Ends the window: (reads, p95 in ns — the upper edge of its bucket; 0 with no reads).
    pub fn take(&self) -> (u64, u64) {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.swap(0, Ordering::Relaxed))
            .collect();
        let reads: u64 = counts.iter().sum();
        if reads == 0 {
            return (0, 0);
        }
        // The smallest bucket at which at least 95 % of the reads are counted.
        let rank = (reads * 95).div_ceil(100);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return (reads, bucket_upper_ns(i));
            }
        }
        (reads, bucket_upper_ns(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_within_an_eighth() {
        let mut last = 0;
        for ns in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            100,
            999,
            1_000_000,
            6_000_000,
            1 << 40,
        ] {
            let b = bucket_of(ns);
            let upper = bucket_upper_ns(b);
            assert!(upper >= ns, "{ns} in bucket {b} with upper {upper}");
            assert!(upper - ns <= ns / 8 + 1, "{ns}: bucket too wide ({upper})");
            assert!(b >= last);
            last = b;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn window_p95_and_reset() {
        let w = LatencyWindow::new();
        for i in 0..100u64 {
            w.record(if i < 95 { 100_000 } else { 10_000_000 });
        }
        let (reads, p95) = w.take();
        assert_eq!(reads, 100);
        assert!((100_000..=112_500).contains(&p95), "p95 {p95}");
        w.record(5_000_000);
        for _ in 0..10 {
            w.record(1_000);
        }
        let (reads, p95) = w.take();
        assert_eq!(reads, 11, "the previous window was cleared");
        assert!(
            p95 >= 5_000_000,
            "1 of 11 slow is above the 95th percentile: {p95}"
        );
        assert_eq!(w.take(), (0, 0));
    }
}
