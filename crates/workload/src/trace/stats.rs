//! What a trace holds, in one streaming pass (`ullstack trace stats`).
//!
//! For each record in file order:
//! - **requests, reads, writes, bytes**: counted; the read ratio is reads / requests.
//! - **size histogram**: power-of-two buckets of the request's length, `<= 512 B`, `<= 1 KiB`,
//!   …, `<= 1 MiB` and `> 1 MiB` (a 3 584 B SPC request is in `<= 4 KiB`).
//! - **sequentiality**: a request is sequential when it starts where the previous request *of
//!   the same device* ended (a 4 KiB read at 8192 after one at 4096). Interleaved streams on
//!   one device count as random, as a device without stream detection sees them.
//! - **inter-arrival**: the gap from the previous record's time, into an HDR histogram (2
//!   significant digits: each reported value within 1 %); a record stamped before its
//!   predecessor counts as a 0 gap and as `out_of_order`.
//! - **footprint**: distinct 4 KiB blocks touched, per device, exactly: a two-level radix
//!   bitmap (`footprint`: 2 MiB chunks of bits under 64 MiB regions). Memory grows with the
//!   footprint (a densely touched 1 TB is about 33 MB; a sparse one at most one chunk and one
//!   region per request), never with the trace's length; every other figure is constant
//!   memory.
//! - **duration**: the last time seen (times start at 0, the first record).
//!
//! The `trace_stats` bench (`cargo bench -p workload --bench trace_stats`) prints the MB/s.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::footprint::Footprint;
pub use super::footprint::FOOTPRINT_BLOCK_BYTES;
use super::record::{TraceOp, TraceRecord};

/// The largest size bucket bound; larger requests go into the `> 1 MiB` bucket.
const SIZE_BUCKET_MAX_BYTES: u64 = 1 << 20;
const SIZE_BUCKETS: usize = 13; // 512 B .. 1 MiB is 12 bounds, plus the overflow bucket

/// Accumulates [`StatsReport`] figures one record at a time.
pub struct TraceStats {
    requests: u64,
    reads: u64,
    read_bytes: u64,
    write_bytes: u64,
    sizes: [u64; SIZE_BUCKETS],
    sequential: u64,
    /// Previous request's end of the device last seen (most traces have one device).
    current: Option<(u32, u64)>,
    /// Previous request's end of every other device seen.
    last_end: BTreeMap<u32, u64>,
    last_time_ns: Option<u64>,
    out_of_order: u64,
    gaps: Histogram<u64>,
    /// Exact, unlike the histogram's (within 1 %).
    max_gap_ns: u64,
    max_time_ns: u64,
    footprint: Footprint,
    max_end_bytes: u64,
}

impl Default for TraceStats {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceStats {
    pub fn new() -> TraceStats {
        TraceStats {
            requests: 0,
            reads: 0,
            read_bytes: 0,
            write_bytes: 0,
            sizes: [0; SIZE_BUCKETS],
            sequential: 0,
            current: None,
            last_end: BTreeMap::new(),
            last_time_ns: None,
            out_of_order: 0,
            gaps: Histogram::new_with_max(1 << 62, 2).expect("valid HDR bounds"),
            max_gap_ns: 0,
            max_time_ns: 0,
            footprint: Footprint::new(),
            max_end_bytes: 0,
        }
    }

    pub fn add(&mut self, r: &TraceRecord) {
        self.requests += 1;
        match r.op {
            TraceOp::Read => {
                self.reads += 1;
                self.read_bytes = self.read_bytes.saturating_add(r.len_bytes);
            }
            TraceOp::Write => self.write_bytes = self.write_bytes.saturating_add(r.len_bytes),
        }
        self.sizes[size_bucket(r.len_bytes)] += 1;
        let end = r.offset_bytes.saturating_add(r.len_bytes);
        self.max_end_bytes = self.max_end_bytes.max(end);
        let prev = match self.current {
            Some((device, prev)) if device == r.device => Some(prev),
            Some((device, prev)) => {
                self.last_end.insert(device, prev);
                self.last_end.remove(&r.device)
            }
            None => None,
        };
        self.current = Some((r.device, end));
        if prev == Some(r.offset_bytes) {
            self.sequential += 1;
        }
        if let Some(prev) = self.last_time_ns {
            if r.time_ns < prev {
                self.out_of_order += 1;
            }
            let gap = r.time_ns.saturating_sub(prev);
            self.max_gap_ns = self.max_gap_ns.max(gap);
            self.gaps.saturating_record(gap);
        }
        self.last_time_ns = Some(r.time_ns);
        self.max_time_ns = self.max_time_ns.max(r.time_ns);
        self.footprint.add(r.device, r.offset_bytes, end);
    }

    /// The figures so far (`&mut`: the footprint applies the requests it has queued).
    pub fn report(&mut self) -> StatsReport {
        // HDR values are bucket tops; never above the exact maximum.
        let q = |p: f64| self.gaps.value_at_quantile(p).min(self.max_gap_ns);
        let mut bound = 512u64;
        let sizes = self
            .sizes
            .iter()
            .map(|&requests| {
                let b = SizeBucket {
                    up_to_bytes: (bound <= SIZE_BUCKET_MAX_BYTES).then_some(bound),
                    requests,
                };
                bound *= 2;
                b
            })
            .collect();
        StatsReport {
            requests: self.requests,
            reads: self.reads,
            writes: self.requests - self.reads,
            read_ratio_pct: pct(self.reads, self.requests),
            read_bytes: self.read_bytes,
            write_bytes: self.write_bytes,
            sizes,
            sequential: self.sequential,
            sequential_pct: pct(self.sequential, self.requests),
            // The current device is never also in `last_end` (it is taken out when it becomes
            // current).
            devices: self.last_end.len() as u64 + u64::from(self.current.is_some()),
            interarrival_ns: Gaps {
                mean: if self.gaps.is_empty() {
                    0
                } else {
                    self.gaps.mean().round() as u64
                },
                p50: q(0.5),
                p90: q(0.9),
                p99: q(0.99),
                p999: q(0.999),
                max: self.max_gap_ns,
            },
            out_of_order: self.out_of_order,
            footprint_bytes: self.footprint.blocks() * FOOTPRINT_BLOCK_BYTES,
            max_end_bytes: self.max_end_bytes,
            duration_ns: self.max_time_ns,
            iops: if self.max_time_ns == 0 {
                0
            } else {
                (u128::from(self.requests) * 1_000_000_000 / u128::from(self.max_time_ns)) as u64
            },
        }
    }
}

/// Percent with one decimal, as a number (for JSON).
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 1000.0 / whole as f64).round() / 10.0
    }
}

/// The index of the smallest bucket `<= 512 << i` holding `len` (the last for `> 1 MiB`).
fn size_bucket(len: u64) -> usize {
    if len <= 512 {
        return 0;
    }
    let i = (64 - (len - 1).leading_zeros()) as usize - 9; // ceil(log2(len)) - 9
    i.min(SIZE_BUCKETS - 1)
}

/// Requests up to a size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SizeBucket {
    /// Inclusive bound; `None` for the `> 1 MiB` bucket.
    pub up_to_bytes: Option<u64>,
    pub requests: u64,
}

/// Inter-arrival gap distribution, nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Gaps {
    pub mean: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// The figures of `ullstack trace stats`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsReport {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub read_ratio_pct: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub sizes: Vec<SizeBucket>,
    pub sequential: u64,
    pub sequential_pct: f64,
    pub devices: u64,
    pub interarrival_ns: Gaps,
    pub out_of_order: u64,
    /// Distinct 4 KiB blocks touched × 4 KiB.
    pub footprint_bytes: u64,
    /// The highest byte address touched (how far folding must reach).
    pub max_end_bytes: u64,
    pub duration_ns: u64,
    /// Requests per second over the duration.
    pub iops: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(time_ns: u64, op: TraceOp, offset_bytes: u64, len_bytes: u64) -> TraceRecord {
        TraceRecord {
            time_ns,
            device: 0,
            op,
            offset_bytes,
            len_bytes,
        }
    }

    #[test]
    fn figures_of_a_small_trace() {
        let mut s = TraceStats::new();
        s.add(&rec(0, TraceOp::Read, 0, 4096));
        s.add(&rec(1000, TraceOp::Read, 4096, 4096)); // sequential
        s.add(&rec(3000, TraceOp::Write, 1 << 30, 3584)); // random; 1 block
        s.add(&rec(2000, TraceOp::Write, 0, 2 << 20)); // out of order; 512 blocks, 2 seen
        let r = s.report();
        assert_eq!((r.requests, r.reads, r.writes), (4, 2, 2));
        assert_eq!(r.read_ratio_pct, 50.0);
        assert_eq!(r.sequential, 1);
        assert_eq!(r.out_of_order, 1);
        assert_eq!(r.duration_ns, 3000);
        assert_eq!(r.footprint_bytes, (512 + 1) * 4096);
        let by_bound = |b: Option<u64>| {
            r.sizes
                .iter()
                .find(|s| s.up_to_bytes == b)
                .unwrap()
                .requests
        };
        assert_eq!(by_bound(Some(4096)), 3);
        assert_eq!(by_bound(None), 1);
        assert_eq!(r.interarrival_ns.max, 2000);
        assert_eq!(r.iops, 4 * 1_000_000_000 / 3000);
    }

    proptest::proptest! {
        #[test]
        fn footprint_counts_each_block_once(reqs in proptest::collection::vec((0u32..3, 0u64..1 << 24, 1u64..1 << 22), 1..40)) {
            let mut s = TraceStats::new();
            let mut naive = std::collections::BTreeSet::new();
            for &(device, offset, len) in &reqs {
                s.add(&TraceRecord { time_ns: 0, device, op: TraceOp::Read, offset_bytes: offset, len_bytes: len });
                for b in offset / 4096..(offset + len).div_ceil(4096) {
                    naive.insert((device, b));
                }
            }
            proptest::prop_assert_eq!(s.report().footprint_bytes, naive.len() as u64 * 4096);
        }
    }

    #[test]
    fn sequentiality_is_per_device() {
        let mut s = TraceStats::new();
        for (device, offset) in [
            (0, 0),
            (1, 0),
            (0, 4096),
            (1, 4096),
            (2, 0),
            (0, 8192),
            (1, 0),
        ] {
            s.add(&TraceRecord {
                time_ns: 0,
                device,
                op: TraceOp::Read,
                offset_bytes: offset,
                len_bytes: 4096,
            });
        }
        let r = s.report();
        assert_eq!((r.sequential, r.devices), (3, 3));
    }

    #[test]
    fn size_buckets() {
        assert_eq!(size_bucket(1), 0);
        assert_eq!(size_bucket(512), 0);
        assert_eq!(size_bucket(513), 1);
        assert_eq!(size_bucket(4096), 3);
        assert_eq!(size_bucket(1 << 20), 11);
        assert_eq!(size_bucket((1 << 20) + 1), 12);
        assert_eq!(size_bucket(u64::MAX), 12);
    }
}
