//! Draining the write buffer before a write-back wave overflows it (`cache.drain`).
//!
//! ## What it models
//! A kernel flusher writes dirty pages in *waves* once dirty pages cross
//! `dirty_background_ratio`: each pass over the dirty files sends a chunk of each (20 MiB a
//! file on `arm8-4g`, host `writeback.rs`), pass after pass while writers keep dirtying. A TLC
//! drive's DRAM write buffer (512 MB on `nvme-tlc`)
//! absorbs writes at DRAM speed only while it has room; once it is full every incoming write
//! waits for a program (0.56–5 ms), and so does every read queued behind those programs on the
//! same dies — the *overflow stall* that the baseline ("evict when full", `cache.rs`) suffers.
//! The published remedy (FastDrain) lets the kernel say a wave is coming: the flusher tags the
//! wave's first NVMe command with the number of dirty pages it is about to write
//! (`Hint::WritebackWave { pages }`, host `pagecache.victim_hint`), and the firmware makes room
//! ahead of it.
//!
//! ## The model (`cache.drain = "fastdrain"`)
//! Two watermarks, `drain_high_pct` (80) and `drain_low_pct` (20) of the buffer's capacity. The
//! device reads the hint when the command carrying it is executed — before that command's data
//! moves, so before any page of the wave reaches the buffer — and predicts the usage the wave
//! will leave: `predicted = buffered units + hinted pages` (one 4 KiB page is one unit).
//! - `predicted < high`: **background eviction**. The wave fits; the firmware drains, at its
//!   leisure, a *limited set* of dirty pages (the budget below), in whole rows, and only to
//!   dies the applications' reads are not busy on: a die (LUN) with a host read queued or
//!   running, or already programming a host row, is passed over, and the drain comes back to
//!   it after each flash completion. Reads keep their dies.
//! - `predicted ≥ high`: **foreground eviction**. The wave would nearly fill the buffer: the
//!   firmware evicts to every die, a row per die, refilling each die as its row finishes, until
//!   the buffered units fall below `low`. The rows are urgent: with `ftl.alloc =
//!   "latency-aware"` they take fast LSB pages (`ftl/alloc.rs`).
//!
//! Without hints nothing changes: the buffer evicts as `cache.flush` says (when full, or also
//! on idle dies).
//!
//! ## The background set (`cache.drain_background`)
//! The spec bounds background eviction by its targets and gives it no number: "evict a limited
//! set of dirty pages only to dies that the applications' reads are not busy on".
//! - `idle-dies` (default): the set is what those dies can take now — one row for each LUN that,
//!   when the hint is read, has no host read queued or running, no host row queued, and room;
//!   at most the wave's `pages`. The rest of the wave stays in the buffer, which climbs wave
//!   after wave until a hint predicts `high`: that wave is drained in the foreground, to every
//!   die, and (with `ftl.alloc = "latency-aware"`) to fast LSB pages.
//! - `wave`: the whole wave, `pages` units, handed out to read-free dies as they come free, so
//!   the buffer stays where it was before the wave. This was the model's first reading; on the
//!   FastDrain study's drive (128 LUNs) it absorbed every wave of `ungzip` and foreground
//!   eviction never ran (CHANGELOG.md: fd-buf, fd-ftl and fd gave the same p99s;
//!   `git log -p docs/study.md` keeps that run's table).
//!
//! Worked example (`nvme-tlc`: 131,072 units of buffer, high 104,857, low 26,214; 128 LUNs of
//! 4-unit rows): with 60,000 units buffered, a hint of 20,000 pages predicts 80,000 < 104,857:
//! background. Under `idle-dies`, with 100 LUNs free of reads and host rows, the budget is
//! 100 rows (400 units) and the buffer climbs to about 79,600 as the wave lands; under `wave`
//! the budget is 20,000 units (5,000 rows) handed out a row at a time to LUNs with no read and
//! no host row queued. A hint of 50,000 pages predicts 110,000 ≥ 104,857: foreground,
//! 128 rows (512 units) at once and a new row on each LUN whose row finishes, until fewer than
//! 26,214 units are buffered: 33,786 units (8,447 rows) if the wave had not arrived yet, and
//! as many more as it brings while it lasts.
//!
//! ## The buffer status in completions
//! Every completion entry carries the buffer's status in percent, which the host's adaptive
//! dirty thresholds read (host `pagecache.rs`: at or above 80 % the kernel switches to its high
//! set and stops flushing; below 20 % it switches back and flushes again). A FastDrain firmware
//! reports the buffer as the quantity its own decisions use: while it drains in the foreground
//! — because a hint predicted the buffer at `high` or beyond — it reports at least `high`
//! (`drain_high_pct`), the buffer it has committed to; otherwise, and in the other modes, the
//! units buffered. So the host backs off exactly while the firmware drains in the foreground,
//! and resumes when that drain has taken the buffer under `low` (foreground eviction ends
//! there, and the report is then the units buffered, under `low`).
//! Reporting only the units buffered, the host could never switch: foreground eviction starts
//! when a hint *predicts* `high`, before the wave lands, and keeps the buffer itself below it
//! (the study's `fd` stack peaked at 70 % of its units and never switched).
//!
//! Worked example (the numbers above): 60,000 units buffered (45 %) and a hint of 50,000
//! pages: foreground; the completions report 80 % while the wave lands and the drain programs,
//! so the kernel switches to the high set; once fewer than 26,214 units are buffered the drain
//! stops and the next completion reports 19 %: the kernel switches back.
//!
//! ## The oracle (`cache.drain = "oracle"`)
//! An unbounded buffer, as an upper bound: a write the cache cannot take (buffer or set full)
//! is held here instead, never programmed, and reads find it. No write ever waits.
//!
//! ## Why the hint helps: where the baseline's overflow meets the service
//! Both stacks program the same data to the same page types, so a read that reaches a die
//! during a TLC program (`nvme-tlc` has no program suspend) waits for it under either; the
//! share of reads that do follows the volume programmed, and fd-buf, which drains to `low`,
//! programs more in a finite run than `vanilla`, which ends it with its buffer full and
//! unprogrammed. What the hint removes is the overflow itself, and that reaches the online
//! service through its reads: `nvme-tlc`'s whole DRAM is the write buffer, so a read miss into
//! a full buffer waits for a line (`lib.rs`, "Read staging"). How long depends on who gets the
//! freed lines first. With reads first (`cache.read_staging = "buffer"`) a read takes the
//! first line any row's program frees, a fraction of one program, and the service's p99 stays
//! the program a read meets on a busy die: the FastDrain study's fd-buf came out above vanilla
//! (mean p99 / vanilla 1.06, seed 1, 30 s; 1.05 with `drain_background = "wave"`, 1.02 with
//! foreground eviction ending at 70 % instead of `low`). In arrival order (`buffer-in-order`,
//! the order Cosmos+ OpenSSD's request loop allocates its buffer entries in, which the study
//! sets) a read miss that arrives while a wave's writes wait for the full buffer waits behind
//! them: vanilla's p99 rose from 4.6-10.6 ms to 11.0-21.2 ms over the six workloads, the
//! drained stacks' did not move, and fd-buf's mean p99 / vanilla was 0.48 (fd-ftl 0.09,
//! oracle 0.08). With program suspend on instead (`flash.suspend`) every drained stack
//! reached the oracle (fd-buf 0.54, fd-ftl 0.52, oracle 0.51): reads no longer wait for
//! programs, so the latency-aware FTL's faster pages stop mattering, unlike the published
//! figures. Every figure here is one `ullstack sim --system runs/<stack>-<W>/config.toml
//! --stack <stack>` per workload, with the device keys named.
//!
//! ## Why the drained stacks cut the p99 more than the published figures
//! With the spec's write-back load (`ungzip`: one output file, about 77 MB/s) and Linux's
//! chunk per wave (20 MiB on `arm8-4g`, host `writeback.rs`, "Chunk size"), a hint predicts
//! `high` only once the buffer is about 76 % full, and a foreground drain then frees 60 % of
//! it, many waves' worth: no drained stack overflows. Their p99 is then the reads that meet a
//! drain's program: fd-buf's foreground drains to pages in order wait behind CSB and MSB
//! programs; fd-ftl drains to LSB pages, and its tail is background rows to CSB/MSB pages.
//! `fd` switches its thresholds at every foreground wave, but with no overflow left to avoid
//! it equals fd-ftl. The published design's kernel control "further reduces the risk of
//! buffer overflow", so there the drained stacks still overflowed. Two quantities move
//! fd-ftl toward the published cut: the write-back rate and the size of the background set
//! (the design's "limited set"); neither is published, and neither is fitted. The runs and
//! the other candidates measured (read order, program suspend, whole waves in the
//! background, a GC-aged drive, a service at its knee) are in CHANGELOG.md.
//!
//! ## What it leaves out
//! Hints of several flushers at once merge into one budget; the device does not learn how fast
//! a wave arrives (a wave predicted to stay under `high` is drained in the background even if
//! it arrives faster than the dies can program); the oracle's extra data costs no DRAM.
//!
//! Config keys: `cache.drain` (`vanilla` | `fastdrain` | `oracle`), `cache.drain_high_pct`,
//! `cache.drain_low_pct`, `cache.drain_background` (`idle-dies` | `wave`).

use rustc_hash::FxHashMap;

use crate::config::{CacheConfig, Drain as DrainMode, DrainBackground};

/// What a hint started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintOutcome {
    /// `vanilla` or `oracle`: counted, nothing else.
    Ignored,
    /// The wave fits under `high`: background eviction of this many more units.
    Background { budget_units: u64 },
    /// The wave would cross `high`: foreground eviction down to `low`.
    Foreground,
}

/// Drain counters (in `summary.json` under `device.drain` when `cache.drain` is not `vanilla`).
/// `drain.mode` as [`DrainStats`] names it (the `cache.drain` names).
fn mode_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    crate::stats_de::one_of(d, &["vanilla", "fastdrain", "oracle"])
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DrainStats {
    #[serde(deserialize_with = "mode_name")]
    pub mode: crate::stats_de::StaticName,
    /// Write-back wave hints read, and the pages they announced.
    pub hints: u64,
    pub hinted_pages: u64,
    /// Hints that started background or foreground eviction.
    pub background_waves: u64,
    pub foreground_waves: u64,
    /// Rows (and units) programmed by each kind of eviction.
    pub background_rows: u64,
    pub background_units: u64,
    pub foreground_rows: u64,
    pub foreground_units: u64,
    /// Times background eviction passed over a LUN because a host read was queued or running.
    pub background_skips_read_busy: u64,
    /// Oracle: units held beyond the buffer (now, and at most).
    pub oracle_units: u64,
    pub oracle_units_max: u64,
}

/// The drain policy's state.
pub struct Drain {
    mode: DrainMode,
    background: DrainBackground,
    high_units: u64,
    low_units: u64,
    /// Units background eviction may still take for the hints so far.
    background_budget_units: u64,
    /// `drain_high_pct`: what completions report at least while foreground eviction is on.
    high_pct: u8,
    /// Foreground eviction is on until the buffer is below `low`.
    foreground: bool,
    /// Where the next pass over the LUNs starts (round robin).
    cursor: u32,
    /// Oracle: writes held beyond the buffer, `lpn → version`.
    oracle: FxHashMap<u32, u32>,
    pub stats: DrainStats,
}

impl Drain {
    pub fn new(config: &CacheConfig, capacity_units: u64) -> Drain {
        assert!(
            config.drain_low_pct < config.drain_high_pct && config.drain_high_pct <= 100,
            "drain watermarks low {} % < high {} % <= 100 %",
            config.drain_low_pct,
            config.drain_high_pct
        );
        Drain {
            mode: config.drain,
            background: config.drain_background,
            high_units: capacity_units * config.drain_high_pct as u64 / 100,
            low_units: capacity_units * config.drain_low_pct as u64 / 100,
            background_budget_units: 0,
            high_pct: config.drain_high_pct as u8, // asserted <= 100 above
            foreground: false,
            cursor: 0,
            oracle: FxHashMap::default(),
            stats: DrainStats {
                mode: match config.drain {
                    DrainMode::Vanilla => "vanilla",
                    DrainMode::Fastdrain => "fastdrain",
                    DrainMode::Oracle => "oracle",
                },
                ..DrainStats::default()
            },
        }
    }

    pub fn mode(&self) -> DrainMode {
        self.mode
    }

    pub fn low_units(&self) -> u64 {
        self.low_units
    }

    pub fn high_units(&self) -> u64 {
        self.high_units
    }

    /// A write-back wave of `pages` is announced while `buffered_units` are in the buffer and
    /// the dies free of reads and host rows could take `read_free_units` now (a row each).
    pub fn on_hint(
        &mut self,
        buffered_units: u64,
        pages: u32,
        read_free_units: u64,
    ) -> HintOutcome {
        self.stats.hints += 1;
        self.stats.hinted_pages += pages as u64;
        if self.mode != DrainMode::Fastdrain {
            return HintOutcome::Ignored;
        }
        let predicted = buffered_units + pages as u64;
        if predicted >= self.high_units {
            self.stats.foreground_waves += 1;
            self.foreground = true;
            HintOutcome::Foreground
        } else {
            self.stats.background_waves += 1;
            self.background_budget_units += match self.background {
                DrainBackground::IdleDies => (pages as u64).min(read_free_units),
                DrainBackground::Wave => pages as u64,
            };
            HintOutcome::Background {
                budget_units: self.background_budget_units,
            }
        }
    }

    /// Whether foreground eviction wants another row now: on, and at least `low` units are
    /// buffered beyond those already being programmed (so the rows in flight do not yet take
    /// the buffer below `low`). Turns itself off once the buffer is below `low`.
    pub fn foreground_wants_row(&mut self, buffered_units: u64, in_flight_units: u64) -> bool {
        if !self.foreground {
            return false;
        }
        if buffered_units < self.low_units {
            self.foreground = false;
            return false;
        }
        buffered_units - in_flight_units.min(buffered_units) >= self.low_units
    }

    /// The buffer status a completion entry reports, in percent: the units buffered, and at
    /// least `drain_high_pct` while foreground eviction is on (see "The buffer status in
    /// completions").
    pub fn status_pct(&self, buffered_units: u64, capacity_units: u64) -> u8 {
        // An empty buffer (every read-only run) is 0 % without the division.
        let buffered = if buffered_units == 0 {
            0
        } else {
            (buffered_units * 100 / capacity_units.max(1)).min(100) as u8
        };
        if self.foreground {
            buffered.max(self.high_pct)
        } else {
            buffered
        }
    }

    /// Whether foreground eviction is on.
    pub fn in_foreground(&self) -> bool {
        self.foreground
    }

    /// Whether background eviction has budget left for a row of `row_units`.
    pub fn background_wants_row(&self, row_units: u32) -> bool {
        !self.foreground && self.background_budget_units >= row_units as u64
    }

    /// A foreground row of `units` was programmed.
    pub fn foreground_row(&mut self, units: usize) {
        self.stats.foreground_rows += 1;
        self.stats.foreground_units += units as u64;
        // Foreground eviction drains more than any background budget asked for.
        self.background_budget_units = self.background_budget_units.saturating_sub(units as u64);
    }

    /// A background row of `units` was programmed.
    pub fn background_row(&mut self, units: usize) {
        assert!(
            self.background_budget_units >= units as u64,
            "background row of {units} units beyond the budget of {}",
            self.background_budget_units
        );
        self.stats.background_rows += 1;
        self.stats.background_units += units as u64;
        self.background_budget_units -= units as u64;
    }

    /// Background eviction passed over a LUN busy with reads.
    pub fn skipped_read_busy(&mut self) {
        self.stats.background_skips_read_busy += 1;
    }

    /// The LUN a pass starts at; [`advance`](Self::advance) moves it past a LUN given a row.
    pub fn cursor(&self) -> u32 {
        self.cursor
    }

    pub fn advance(&mut self, lun: u32, luns: u32) {
        self.cursor = (lun + 1) % luns;
    }

    // ---- oracle ----

    /// Whether the oracle holds `lpn` (its newest data is here, not in the cache).
    #[inline]
    pub fn oracle_get(&self, lpn: u32) -> Option<u32> {
        if self.oracle.is_empty() {
            return None;
        }
        self.oracle.get(&lpn).copied()
    }

    /// Oracle: takes a write the cache could not. Panics outside oracle mode.
    pub fn oracle_put(&mut self, lpn: u32, version: u32) {
        assert_eq!(
            self.mode,
            DrainMode::Oracle,
            "only the oracle holds writes beyond the buffer"
        );
        if self.oracle.insert(lpn, version).is_none() {
            self.stats.oracle_units += 1;
            self.stats.oracle_units_max = self.stats.oracle_units_max.max(self.stats.oracle_units);
        }
    }

    /// Oracle: `lpn` was trimmed.
    pub fn oracle_trim(&mut self, lpn: u32) {
        if self.oracle.remove(&lpn).is_some() {
            self.stats.oracle_units -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: DrainMode) -> CacheConfig {
        CacheConfig {
            dram_bytes: 1000 * 4096,
            ways: 4,
            write_buffer_bytes: 1000 * 4096,
            prefetch_pages: 0,
            readahead_units: 0,
            evict_batch_units: 0,
            dram_access_ns: 0,
            flush: crate::config::Flush::OnFull,
            drain: mode,
            drain_high_pct: 80,
            drain_low_pct: 20,
            drain_background: crate::config::DrainBackground::IdleDies,
            read_staging: crate::config::ReadStaging::Bypass,
            partition: crate::config::Partition::Shared,
            epoch_ns: crate::config::DEFAULT_EPOCH_NS,
            partition_step_ways: 1,
            partition_min_ways: 1,
            prefetch: crate::config::Prefetch::Fixed,
            ghost_pages: crate::config::DEFAULT_GHOST_PAGES.to_vec(),
            ghost_sample_period_sets: 1,
        }
    }

    /// The essay's worked example: the status is at least `high` while the firmware drains in
    /// the foreground, and the units buffered before and after.
    #[test]
    fn completions_report_high_while_draining_in_the_foreground() {
        let cap = 131_072;
        let mut d = Drain::new(&config(DrainMode::Fastdrain), cap);
        assert_eq!(d.status_pct(60_000, cap), 45);
        assert_eq!(d.on_hint(60_000, 50_000, 0), HintOutcome::Foreground);
        assert_eq!(d.status_pct(60_000, cap), 80, "committed to a drain");
        assert_eq!(
            d.status_pct(120_000, cap),
            91,
            "above high: the units buffered"
        );
        assert!(d.foreground_wants_row(30_000, 0));
        assert_eq!(d.status_pct(30_000, cap), 80, "still draining");
        assert!(
            !d.foreground_wants_row(26_213, 0),
            "under low: the drain ends"
        );
        assert_eq!(d.status_pct(26_213, cap), 19);
        let mut v = Drain::new(&config(DrainMode::Vanilla), cap);
        assert_eq!(v.on_hint(60_000, 50_000, 0), HintOutcome::Ignored);
        assert_eq!(
            v.status_pct(60_000, cap),
            45,
            "vanilla reports the units buffered"
        );
    }

    #[test]
    fn the_predicted_usage_picks_background_or_foreground() {
        let mut d = Drain::new(&config(DrainMode::Fastdrain), 1000);
        assert_eq!((d.high_units(), d.low_units()), (800, 200));
        assert_eq!(
            d.on_hint(500, 299, 1000),
            HintOutcome::Background { budget_units: 299 }
        );
        assert!(d.background_wants_row(4) && !d.in_foreground());
        assert_eq!(
            d.on_hint(500, 300, 1000),
            HintOutcome::Foreground,
            "500 + 300 = high"
        );
        assert!(!d.background_wants_row(4), "foreground first");
        assert!(d.foreground_wants_row(500, 0));
        assert!(
            d.foreground_wants_row(500, 300),
            "200 = low left beyond rows in flight"
        );
        assert!(
            !d.foreground_wants_row(500, 301),
            "the rows in flight take it below low"
        );
        assert!(!d.foreground_wants_row(199, 0), "below low: done");
        assert!(!d.in_foreground());
        assert_eq!((d.stats.hints, d.stats.hinted_pages), (2, 599));
    }

    #[test]
    fn the_background_set_is_what_read_free_dies_take_now_or_the_whole_wave() {
        let mut d = Drain::new(&config(DrainMode::Fastdrain), 1000);
        assert_eq!(
            d.on_hint(100, 200, 24),
            HintOutcome::Background { budget_units: 24 },
            "idle-dies: six read-free LUNs of 4-unit rows take 24 units of a 200-page wave"
        );
        assert_eq!(
            d.on_hint(100, 10, 24),
            HintOutcome::Background { budget_units: 34 },
            "never more than the wave; budgets add up"
        );
        let mut c = config(DrainMode::Fastdrain);
        c.drain_background = DrainBackground::Wave;
        let mut d = Drain::new(&c, 1000);
        assert_eq!(
            d.on_hint(100, 200, 24),
            HintOutcome::Background { budget_units: 200 },
            "wave: the whole wave"
        );
    }

    #[test]
    fn vanilla_counts_hints_and_does_nothing() {
        let mut d = Drain::new(&config(DrainMode::Vanilla), 1000);
        assert_eq!(d.on_hint(900, 500, 1000), HintOutcome::Ignored);
        assert!(!d.foreground_wants_row(900, 0) && !d.background_wants_row(1));
        assert_eq!(d.stats.hints, 1);
    }

    #[test]
    fn the_oracle_holds_the_newest_version_until_trimmed() {
        let mut d = Drain::new(&config(DrainMode::Oracle), 1000);
        d.oracle_put(7, 1);
        d.oracle_put(7, 2);
        d.oracle_put(8, 1);
        assert_eq!(d.oracle_get(7), Some(2));
        assert_eq!((d.stats.oracle_units, d.stats.oracle_units_max), (2, 2));
        d.oracle_trim(7);
        assert_eq!(d.oracle_get(7), None);
        assert_eq!(d.stats.oracle_units, 1);
    }

    // ---- the mechanisms inside the device ----

    use crate::config::{DeviceConfig, Flush};
    use crate::{DeviceOptions, Hint, NvmeCommand, SqPriority, Ssd};
    use engine::{IoClass, IoOp, SimTime};

    /// 4 LUNs of 4-unit rows; a 400-unit buffer in 1,024 lines (high 320, low 80); evictions
    /// only when full or drained; no read-ahead.
    fn ssd(mode: DrainMode, integrity: bool) -> Ssd {
        ssd_with(mode, integrity, DrainBackground::IdleDies)
    }

    fn ssd_with(mode: DrainMode, integrity: bool, background: DrainBackground) -> Ssd {
        let mut c = small_tlc(mode);
        c.cache.drain_background = background;
        open(&c, integrity)
    }

    /// The drive of [`ssd`]'s doc as a config, to adjust before [`open`].
    fn small_tlc(mode: DrainMode) -> DeviceConfig {
        let mut c = DeviceConfig::preset("nvme-tlc").unwrap();
        c.flash.channels = 4;
        c.flash.packages_per_channel = 1;
        c.flash.dies_per_package = 1;
        c.flash.blocks_per_plane = 64;
        c.cache.dram_bytes = 1024 * 4096;
        c.cache.write_buffer_bytes = 400 * 4096;
        c.cache.readahead_units = 0;
        c.cache.flush = Flush::OnFull;
        c.cache.drain = mode;
        c
    }

    /// The device of `c` with one queue pair (SQ 1, CQ 1).
    fn open(c: &DeviceConfig, integrity: bool) -> Ssd {
        let mut ssd = Ssd::new(c, DeviceOptions { integrity }).unwrap();
        ssd.create_queue_pair(1, 1, 1024, SqPriority::Medium);
        ssd
    }

    fn cmd(cid: u32, op: IoOp, lpn: u64, units: u32, hint: Hint) -> NvmeCommand {
        NvmeCommand {
            cid,
            op,
            slba: lpn * 8,
            sectors: units * 8,
            class: IoClass::Throughput,
            hint,
            version: cid + 1,
        }
    }

    fn run(ssd: &mut Ssd, done: &mut Vec<crate::Completion>) {
        while let Some(t) = ssd.next_event_time() {
            ssd.advance_to(t, done);
        }
    }

    /// Round `round`'s write-back wave at `at`: ten 4-unit writes from LPN 2,000 + 40 × round,
    /// the first hinted with the wave's 40 pages.
    fn submit_wave(s: &mut Ssd, at: SimTime, round: u64, cid: &mut u32) {
        for k in 0..10u64 {
            let hint = if k == 0 {
                Hint::WritebackWave { pages: 40 }
            } else {
                Hint::None
            };
            let lpn = 2_000 + round * 40 + 4 * k;
            s.submit(at, 1, cmd(*cid, IoOp::Write, lpn, 4, hint))
                .unwrap();
            *cid += 1;
        }
    }

    /// `n` 4-unit writes from LPN 0, unhinted, all buffered (below the buffer's capacity).
    fn fill(ssd: &mut Ssd, n: u32) {
        for k in 0..n {
            let c = cmd(k, IoOp::Write, k as u64 * 4, 4, Hint::None);
            ssd.submit(SimTime::ZERO, 1, c).unwrap();
        }
        let mut done = Vec::new();
        run(ssd, &mut done);
        assert_eq!(done.len(), n as usize, "{}", ssd.pending_state());
        assert_eq!(ssd.cache.dirty_units(), n as u64 * 4, "nothing evicted yet");
    }

    /// The device reads the hint when the wave's first command executes: the wave is ten
    /// 4-unit writes queued together, and the hinted one executes first; at that event none of
    /// the wave's data is in the buffer and foreground eviction has already started. It then
    /// brings the buffer under `low`; without the hint (`vanilla`) nothing is evicted.
    #[test]
    fn the_hint_arrives_before_the_wave_and_foreground_eviction_ends_under_low() {
        let wave: Vec<NvmeCommand> = (0..10u32)
            .map(|k| {
                let hint = if k == 0 {
                    Hint::WritebackWave { pages: 40 }
                } else {
                    Hint::None
                };
                cmd(1000 + k, IoOp::Write, 2000 + 4 * k as u64, 4, hint)
            })
            .collect();
        let mut s = ssd(DrainMode::Fastdrain, false);
        s.enable_exec_log();
        fill(&mut s, 85); // 340 of 400 units
        let mut log = Vec::new();
        s.take_exec_log(&mut log);
        log.clear();
        let now = SimTime(s.now.0 + 1);
        for &c in &wave {
            s.submit(now, 1, c).unwrap();
        }
        let mut done = Vec::new();
        let mut read_at_event = None;
        while let Some(t) = s.next_event_time() {
            s.advance_to(t, &mut done);
            if read_at_event.is_none() && s.drain.stats.hints == 1 {
                read_at_event = Some(t);
                assert!(
                    (2000..2040).all(|lpn| !s.cache.contains(lpn)),
                    "the wave's data is in the buffer before its hint was read"
                );
                assert!(s.drain.in_foreground(), "340 + 40 >= 320: foreground");
                assert_eq!(s.writeback.rows_in_flight(), 4, "a row on every LUN");
            }
        }
        assert!(read_at_event.is_some(), "the hint was never read");
        s.take_exec_log(&mut log);
        let order: Vec<u32> = log.iter().map(|&(_, _, cid)| cid).collect();
        assert_eq!(order.len(), 10);
        assert_eq!(
            order[0], 1000,
            "the hinted command executes first: {order:?}"
        );
        assert_eq!(done.len(), 10);
        assert!(
            s.cache.dirty_units() < s.drain.low_units(),
            "{} units left, low is {}",
            s.cache.dirty_units(),
            s.drain.low_units()
        );
        assert!(s.drain.stats.foreground_rows >= (380 - 80) / 4);
        assert_eq!(s.drain.stats.foreground_waves, 1);
        s.check_consistency().unwrap();

        let mut v = ssd(DrainMode::Vanilla, false);
        fill(&mut v, 85);
        let now = SimTime(v.now.0 + 1);
        for &c in &wave {
            v.submit(now, 1, c).unwrap();
        }
        run(&mut v, &mut Vec::new());
        assert_eq!(v.cache.dirty_units(), 380, "vanilla evicts only when full");
        assert_eq!(v.drain.stats.hints, 1, "read, and ignored");
    }

    /// A wave that fits drains in the background, and only to dies without a host read. Thirty
    /// rounds, 20 ms apart, each of two reads that miss onto two of the four LUNs (a different
    /// pair each round) and a hinted wave of 40 pages: every background row of the run is
    /// checked where it was placed — no host read queued or running on its LUN — and the rule
    /// had to act (LUNs were passed over) for the run to count. `wave` background, so every
    /// wave is drained in the background (with `idle-dies` the buffer climbs to `high`: next
    /// test).
    #[test]
    fn background_eviction_never_targets_a_die_with_a_queued_read() {
        let mut s = ssd_with(DrainMode::Fastdrain, false, DrainBackground::Wave);
        fill(&mut s, 25); // 100 units: every wave predicts 140 < 320, background
        let mut done = Vec::new();
        let mut cid = 1000;
        let start = s.now.0 + 1;
        for round in 0..30u64 {
            let at = SimTime(start + round * 20_000_000);
            s.advance_to(at, &mut done);
            // Preconditioned LPN i lives on LUN i mod 4: these miss onto LUNs r and r + 1.
            for k in 0..2 {
                let lpn = 10_000 + 4 * round * 3 + (round + k) % 4;
                s.submit(at, 1, cmd(cid, IoOp::Read, lpn, 1, Hint::None))
                    .unwrap();
                cid += 1;
            }
            submit_wave(&mut s, at, round, &mut cid);
        }
        run(&mut s, &mut done);
        assert_eq!(done.len() + 25, cid as usize - 1000 + 25);
        let d = &s.drain.stats;
        assert_eq!(
            (d.hints, d.background_waves, d.foreground_rows),
            (30, 30, 0)
        );
        assert_eq!(s.background_log.len() as u64, d.background_rows);
        assert!(d.background_rows >= 200, "{d:?}");
        for &(at, lun, reads) in &s.background_log {
            assert_eq!(
                reads, 0,
                "background row on LUN {lun} at {at} beside {reads} host reads"
            );
        }
        assert!(
            d.background_skips_read_busy > 0,
            "no LUN was ever passed over: the run did not test the rule"
        );
        s.check_consistency().unwrap();
    }

    /// `idle-dies`: a hinted wave drains only a row per read-free LUN in the background, so
    /// waves of 40 pages (10 rows) over 4 LUNs leave most of each wave in the buffer; it climbs
    /// until a hint predicts `high` (320 of 400 units), and that wave is drained in the
    /// foreground to under `low` (80).
    #[test]
    fn a_limited_background_set_lets_the_buffer_climb_to_a_foreground_wave() {
        let mut s = ssd(DrainMode::Fastdrain, false);
        fill(&mut s, 25); // 100 units
        let mut done = Vec::new();
        let mut cid = 1000;
        let start = s.now.0 + 1;
        let mut peak = 0;
        for round in 0..12u64 {
            let at = SimTime(start + round * 20_000_000);
            s.advance_to(at, &mut done);
            peak = peak.max(s.cache.dirty_units());
            submit_wave(&mut s, at, round, &mut cid);
        }
        run(&mut s, &mut done);
        assert_eq!(done.len(), cid as usize - 1000);
        let d = &s.drain.stats;
        assert!(d.background_waves >= 3, "{d:?}");
        assert!(
            d.background_units <= d.background_waves * 4 * 4,
            "at most a row per LUN per background wave: {d:?}"
        );
        assert!(d.foreground_waves >= 1 && d.foreground_rows > 0, "{d:?}");
        assert!(peak > 140, "the buffer climbed past one wave: peak {peak}");
        assert!(
            s.cache.dirty_units() < s.drain.high_units(),
            "foreground eviction brought it down"
        );
        s.check_consistency().unwrap();
    }

    /// [`small_tlc`] with all of its DRAM write buffer, every line of it dirty (400 units,
    /// unhinted writes under `on-full`), and a one-unit read miss of LPN 10,000 (cid 5,000)
    /// submitted at the returned time.
    fn read_into_all_dirty_dram(
        staging: crate::config::ReadStaging,
    ) -> (Ssd, SimTime, Vec<crate::Completion>) {
        let (mut s, at, done) = all_dirty_dram(staging);
        s.submit(at, 1, cmd(5000, IoOp::Read, 10_000, 1, Hint::None))
            .unwrap();
        (s, at, done)
    }

    /// The completion of command `cid` among `done`.
    fn completed(done: &[crate::Completion], cid: u32) -> &crate::Completion {
        done.iter()
            .find(|d| d.cid == cid)
            .unwrap_or_else(|| panic!("command {cid} completed"))
    }

    /// [`small_tlc`] with all of its DRAM write buffer, every line of it dirty (400 units,
    /// unhinted writes under `on-full`), advanced to the returned time.
    fn all_dirty_dram(
        staging: crate::config::ReadStaging,
    ) -> (Ssd, SimTime, Vec<crate::Completion>) {
        let mut c = small_tlc(DrainMode::Vanilla);
        c.cache.dram_bytes = c.cache.write_buffer_bytes;
        c.cache.prefetch_pages = 0;
        c.cache.read_staging = staging;
        let mut s = open(&c, true);
        fill(&mut s, 100);
        let at = SimTime(s.now.0 + 1);
        let mut done = Vec::new();
        s.advance_to(at, &mut done);
        (s, at, done)
    }

    /// `cache.read_staging`: with the whole DRAM dirty (a 400-unit DRAM that is all write
    /// buffer, filled by unhinted writes under `on-full`), a read miss that stages in DRAM
    /// waits for an eviction program; one that bypasses goes to the host at flash-read speed.
    #[test]
    fn a_read_into_an_all_dirty_dram_waits_for_an_eviction_when_it_stages_there() {
        use crate::config::ReadStaging;
        let mut waits = Vec::new();
        for staging in [ReadStaging::Bypass, ReadStaging::Buffer] {
            let (mut s, at, mut done) = read_into_all_dirty_dram(staging);
            run(&mut s, &mut done);
            let read = completed(&done, 5000);
            waits.push((read.at - at, s.stats.read_staging_stalls));
            s.check_consistency().unwrap();
        }
        let (bypass_ns, bypass_stalls) = waits[0];
        let (buffer_ns, buffer_stalls) = waits[1];
        assert_eq!(bypass_stalls, 0);
        assert!(
            bypass_ns < 300_000,
            "a TLC read and its transfer: {bypass_ns} ns"
        );
        assert_eq!(buffer_stalls, 1);
        assert!(
            buffer_ns > bypass_ns + 500_000,
            "staged, it waits for a program (LSB 0.56 ms at least): {buffer_ns} ns"
        );
    }

    /// `cache.read_staging = "buffer-in-order"`: with the whole DRAM dirty, twenty 4-unit
    /// writes stalled on the full buffer and then (200 µs later, once they all wait) a read
    /// miss, the read stages only after every one of those writes has its lines, so it
    /// completes after all of them; under `buffer` it takes the first line a program frees
    /// and completes before the last of them.
    #[test]
    fn in_order_staging_puts_a_read_behind_the_writes_that_waited_before_it() {
        use crate::config::ReadStaging;
        let mut outcomes = Vec::new();
        for staging in [ReadStaging::Buffer, ReadStaging::BufferInOrder] {
            let (mut s, at, mut done) = all_dirty_dram(staging);
            for k in 0..20u32 {
                let c = cmd(6000 + k, IoOp::Write, 3000 + 4 * k as u64, 4, Hint::None);
                s.submit(at, 1, c).unwrap();
            }
            let read_at = SimTime(at.0 + 200_000);
            s.advance_to(read_at, &mut done);
            assert!(s.stats.write_stalls >= 20, "the writes wait: {:?}", s.stats);
            s.submit(read_at, 1, cmd(5000, IoOp::Read, 10_000, 1, Hint::None))
                .unwrap();
            run(&mut s, &mut done);
            let read = completed(&done, 5000);
            let writes: Vec<SimTime> = done
                .iter()
                .filter(|d| (6000..6020).contains(&d.cid))
                .map(|d| d.at)
                .collect();
            assert_eq!(writes.len(), 20);
            assert_eq!(s.stats.read_staging_stalls, 1);
            s.check_consistency().unwrap();
            outcomes.push((read.at, *writes.iter().max().unwrap()));
        }
        let (first_read, first_last_write) = outcomes[0];
        let (order_read, order_last_write) = outcomes[1];
        assert!(
            first_read < first_last_write,
            "buffer: the read goes first ({first_read} vs last write {first_last_write})"
        );
        assert!(
            order_read > order_last_write,
            "buffer-in-order: the read waits its turn ({order_read} vs last write {order_last_write})"
        );
    }

    /// A unit trimmed while its read waited to stage is not read from flash: the read returns
    /// zeros (version 0) once a line frees, and the device stays consistent.
    #[test]
    fn a_read_waiting_to_stage_of_a_unit_trimmed_meanwhile_returns_zeros() {
        let (mut s, at, mut done) = read_into_all_dirty_dram(crate::config::ReadStaging::Buffer);
        s.submit(at, 1, cmd(5001, IoOp::Trim, 10_000, 1, Hint::None))
            .unwrap();
        run(&mut s, &mut done);
        let read = completed(&done, 5000);
        assert_eq!(s.stats.read_staging_stalls, 1, "the read waited to stage");
        assert_eq!(
            read.read_versions.as_deref(),
            Some(&[0][..]),
            "trimmed: zeros"
        );
        s.check_consistency().unwrap();
    }

    /// The oracle takes three buffers' worth of writes without a stall, and reads find the
    /// newest data wherever it is held.
    #[test]
    fn the_oracle_never_stalls_a_write() {
        let mut s = ssd(DrainMode::Oracle, true);
        for k in 0..300u32 {
            let c = cmd(k, IoOp::Write, k as u64 * 4, 4, Hint::None);
            s.submit(SimTime::ZERO, 1, c).unwrap();
        }
        // Rewrite the first and last commands' units: the newest version must win.
        s.submit(SimTime::ZERO, 1, cmd(400, IoOp::Write, 0, 4, Hint::None))
            .unwrap();
        s.submit(SimTime::ZERO, 1, cmd(401, IoOp::Write, 1196, 4, Hint::None))
            .unwrap();
        let mut done = Vec::new();
        run(&mut s, &mut done);
        assert_eq!(done.len(), 302);
        assert_eq!(s.stats.write_stalls, 0);
        assert_eq!(s.flash.stats.programs, 0, "nothing programmed");
        assert!(s.drain.stats.oracle_units_max >= 800, "{:?}", s.drain.stats);
        let now = SimTime(s.now.0 + 1);
        s.submit(now, 1, cmd(600, IoOp::Read, 0, 1, Hint::None))
            .unwrap();
        s.submit(now, 1, cmd(601, IoOp::Read, 1197, 1, Hint::None))
            .unwrap();
        s.submit(now, 1, cmd(602, IoOp::Read, 600, 1, Hint::None))
            .unwrap();
        done.clear();
        run(&mut s, &mut done);
        let version = |cid: u32| {
            done.iter()
                .find(|c| c.cid == cid)
                .unwrap()
                .read_versions
                .as_ref()
                .unwrap()[0]
        };
        assert_eq!((version(600), version(601), version(602)), (401, 402, 151));
        s.check_consistency().unwrap();
    }
}
