//! From trace records to the I/Os a replay issues: device filter, time window, pacing and LBA
//! folding, still streaming (one record in, at most one I/O out).
//!
//! ## Pacing
//! - **Open loop** ([`Pacing::OpenLoop`], `--speed F`): each I/O is issued at its trace time
//!   divided by F, measured from the window's start, whatever is still in flight. `--speed 2`
//!   replays a 10 s trace in 5 s. F is kept as an integer per-mille ([`SPEED_SCALE`]), so
//!   times stay integers: a record at 7 ms with `--speed 3` is issued at
//!   7 000 000 × 1000 / 3000 = 2 333 333 ns. Issue times never go backwards: a record stamped
//!   earlier than the one before it (MSR traces are not quite sorted) is issued with it.
//!   If the simulated stack cannot keep up, the replayer's queue depth cap holds the excess
//!   back and the I/Os go out late; their latency is still counted from their actual issue.
//! - **Closed loop** ([`Pacing::ClosedLoop`], `--qd N`): timestamps are ignored; N I/Os are
//!   kept in flight, the next issued as one completes. This is the trace's addresses and
//!   sizes at the device's own speed.
//!
//! ## Window and device
//! `--trace-device N` keeps one device's records (disk, ASU or `MAJ,MIN`). `--from`/`--to` keep
//! records with `from <= time < to` (trace time, from its first record); the replay stops at
//! the first record at or past `to` rather than reading the rest of a 10 GB file, so a trace
//! whose times go backwards across `to` loses what follows.
//!
//! ## Folding onto the device
//! Trace addresses come from another machine's disks. Each request is aligned to whole 512 B
//! sectors (start rounded down, end rounded up), then its start sector is taken **modulo the
//! device's capacity in sectors**; a request that would then run past the end is moved back to
//! end at the last sector, and one longer than the device is cut to the device's size. Worked
//! example on a 1 GiB device (2 097 152 sectors): a 4 KiB read at byte 3 GiB + 512 (sector
//! 6 291 457) lands at sector 6 291 457 mod 2 097 152 = 1 at byte 512; a 64 KiB write at
//! sector 2 097 100 would end past the device, so it starts at sector 2 097 024. Modulo keeps
//! the trace's locality (neighbours stay neighbours, sequential runs stay sequential) at the
//! price of aliasing distant regions onto each other; counts of folded requests are reported.

use super::record::{TraceError, TraceOp, TraceRecord, SECTOR_BYTES};

/// `--speed` is kept in thousandths.
pub const SPEED_SCALE: u64 = 1000;

/// How a replay issues its I/Os.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// At trace time ÷ speed (`speed_per_mille` = speed × [`SPEED_SCALE`]).
    OpenLoop { speed_per_mille: u64 },
    /// Keep `queue_depth` I/Os in flight; timestamps ignored.
    ClosedLoop { queue_depth: u32 },
}

impl Pacing {
    /// Open loop at `speed` (`--speed`): a finite number from 0.001 to 1 000 000.
    pub fn open_loop(speed: f64) -> Result<Pacing, String> {
        if !(speed.is_finite() && (0.001..=1_000_000.0).contains(&speed)) {
            return Err(format!(
                "speed {speed}: expected a factor from 0.001 to 1000000 (2 replays twice as fast)"
            ));
        }
        Ok(Pacing::OpenLoop {
            speed_per_mille: (speed * SPEED_SCALE as f64).round() as u64,
        })
    }

    /// Closed loop at `queue_depth` (`--qd`): 1 or more.
    pub fn closed_loop(queue_depth: u32) -> Result<Pacing, String> {
        if queue_depth == 0 {
            return Err("queue depth 0: expected 1 or more".into());
        }
        Ok(Pacing::ClosedLoop { queue_depth })
    }
}

/// What a replay keeps of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Only this device's records.
    pub device: Option<u32>,
    /// Window start, trace time.
    pub from_ns: u64,
    /// Window end (exclusive), trace time.
    pub to_ns: Option<u64>,
    /// Addresses are folded onto this many bytes (at least one sector).
    pub capacity_bytes: u64,
    pub pacing: Pacing,
}

/// One I/O to issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayIo {
    /// When, from the replay's start (0 in closed loop).
    pub issue_at_ns: u64,
    pub op: TraceOp,
    /// Sector aligned, within the capacity.
    pub offset_bytes: u64,
    /// Whole sectors, positive, within the capacity.
    pub len_bytes: u64,
}

/// What a replay did with the records it read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplayCounts {
    /// Records read from the trace.
    pub records: u64,
    /// I/Os given out.
    pub replayed: u64,
    /// Records of other devices.
    pub other_device: u64,
    /// Records before `from`.
    pub before_window: u64,
    /// I/Os moved by folding or alignment.
    pub folded: u64,
    /// The replay stopped at a record at or past `to`.
    pub stopped_at_window_end: bool,
}

/// A request placed on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Folded {
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// Moved or resized by alignment or folding.
    pub moved: bool,
}

/// Places `offset_bytes..+len_bytes` on a device of `capacity_bytes` (see the essay).
pub fn fold_onto(offset_bytes: u64, len_bytes: u64, capacity_bytes: u64) -> Folded {
    let cap = capacity_bytes / SECTOR_BYTES;
    assert!(cap > 0, "a replay needs a capacity of at least one sector");
    assert!(len_bytes > 0, "trace records have a positive length");
    let start = offset_bytes / SECTOR_BYTES;
    // Readers refuse an end past 2^64, so this cannot overflow.
    let end = (offset_bytes + len_bytes).div_ceil(SECTOR_BYTES);
    let len = (end - start).min(cap);
    let mut at = start % cap;
    if at + len > cap {
        at = cap - len;
    }
    let out = Folded {
        offset_bytes: at * SECTOR_BYTES,
        len_bytes: len * SECTOR_BYTES,
        moved: false,
    };
    debug_assert!(out.offset_bytes + out.len_bytes <= capacity_bytes);
    Folded {
        moved: out.offset_bytes != offset_bytes || out.len_bytes != len_bytes,
        ..out
    }
}

/// Streams the I/Os of a trace's records (see the essay).
pub struct Replay<I> {
    records: I,
    opts: ReplayOptions,
    counts: ReplayCounts,
    last_issue_ns: u64,
    done: bool,
}

impl<I> Replay<I>
where
    I: Iterator<Item = Result<TraceRecord, TraceError>>,
{
    pub fn new(records: I, opts: ReplayOptions) -> Replay<I> {
        assert!(
            opts.capacity_bytes >= SECTOR_BYTES,
            "a replay needs a capacity of at least one sector"
        );
        Replay {
            records,
            opts,
            counts: ReplayCounts::default(),
            last_issue_ns: 0,
            done: false,
        }
    }

    pub fn counts(&self) -> ReplayCounts {
        self.counts
    }

    pub fn options(&self) -> &ReplayOptions {
        &self.opts
    }

    /// The records underneath (e.g. the reader, for its skipped-line count).
    pub fn records(&self) -> &I {
        &self.records
    }
}

impl<I> Iterator for Replay<I>
where
    I: Iterator<Item = Result<TraceRecord, TraceError>>,
{
    type Item = Result<ReplayIo, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            let r = match self.records.next()? {
                Ok(r) => r,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            self.counts.records += 1;
            if self.opts.device.is_some_and(|d| d != r.device) {
                self.counts.other_device += 1;
                continue;
            }
            if r.time_ns < self.opts.from_ns {
                self.counts.before_window += 1;
                continue;
            }
            if self.opts.to_ns.is_some_and(|to| r.time_ns >= to) {
                self.counts.stopped_at_window_end = true;
                self.done = true;
                return None;
            }
            let issue_at_ns = match self.opts.pacing {
                Pacing::OpenLoop { speed_per_mille } => {
                    let scaled = u128::from(r.time_ns - self.opts.from_ns)
                        * u128::from(SPEED_SCALE)
                        / u128::from(speed_per_mille.max(1));
                    let t = u64::try_from(scaled).unwrap_or(u64::MAX);
                    self.last_issue_ns = self.last_issue_ns.max(t);
                    self.last_issue_ns
                }
                Pacing::ClosedLoop { .. } => 0,
            };
            let f = fold_onto(r.offset_bytes, r.len_bytes, self.opts.capacity_bytes);
            if f.moved {
                self.counts.folded += 1;
            }
            self.counts.replayed += 1;
            return Some(Ok(ReplayIo {
                issue_at_ns,
                op: r.op,
                offset_bytes: f.offset_bytes,
                len_bytes: f.len_bytes,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn folding_worked_example() {
        let gib = 1u64 << 30;
        let f = fold_onto(3 * gib + 512, 4096, gib);
        assert_eq!((f.offset_bytes, f.len_bytes, f.moved), (512, 4096, true));
        let f = fold_onto(2_097_100 * 512, 65536, gib);
        assert_eq!(f.offset_bytes, 2_097_024 * 512);
        let f = fold_onto(100, 3584, gib);
        assert_eq!((f.offset_bytes, f.len_bytes), (0, 4096));
        let f = fold_onto(8192, 4096, gib);
        assert!(!f.moved);
        assert_eq!(fold_onto(0, 4 * gib, gib).len_bytes, gib);
    }

    proptest! {
        #[test]
        fn folded_requests_fit_the_device(off in 0u64..u64::MAX / 2, len in 1u64..1 << 24, cap_sectors in 1u64..1 << 40) {
            let cap = cap_sectors * SECTOR_BYTES;
            let f = fold_onto(off, len, cap);
            prop_assert!(f.len_bytes > 0 && f.len_bytes.is_multiple_of(SECTOR_BYTES));
            prop_assert!(f.offset_bytes.is_multiple_of(SECTOR_BYTES));
            prop_assert!(f.offset_bytes + f.len_bytes <= cap);
            prop_assert!(f.len_bytes >= len.min(cap) );
        }
    }

    fn rec(time_ns: u64, device: u32) -> Result<TraceRecord, TraceError> {
        Ok(TraceRecord {
            time_ns,
            device,
            op: TraceOp::Read,
            offset_bytes: 0,
            len_bytes: 4096,
        })
    }

    #[test]
    fn window_device_and_speed() {
        let recs = vec![
            rec(0, 1),
            rec(1000, 2),
            rec(7_000_000, 1),
            rec(6_000_000, 1),
            rec(9_000_000, 1),
            rec(20_000_000, 1),
            rec(30_000_000, 1),
        ];
        let opts = ReplayOptions {
            device: Some(1),
            from_ns: 1_000_000,
            to_ns: Some(20_000_000),
            capacity_bytes: 1 << 30,
            pacing: Pacing::open_loop(3.0).unwrap(),
        };
        let mut r = Replay::new(recs.into_iter(), opts);
        let times: Vec<u64> = r.by_ref().map(|io| io.unwrap().issue_at_ns).collect();
        // (7 ms - 1 ms) / 3 = 2 ms; 6 ms goes back, issued with it; (9 - 1) / 3.
        assert_eq!(times, [2_000_000, 2_000_000, 2_666_666]);
        let c = r.counts();
        assert_eq!(
            (c.records, c.other_device, c.before_window, c.replayed),
            (6, 1, 1, 3)
        );
        assert!(c.stopped_at_window_end);
        assert!(Pacing::open_loop(0.0).is_err());
        assert!(Pacing::open_loop(f64::NAN).is_err());
        assert!(Pacing::closed_loop(0).is_err());
    }
}
