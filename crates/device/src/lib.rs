//! The SSD model: an NVMe drive from the PCIe link down to the NAND dies.
//!
//! ```text
//!  host ──doorbell──▶ ctrl (fetch, arbitration, firmware) ──▶ cache (DRAM, write buffer)
//!   ▲                                                            │ miss / eviction
//!   └──CQE + MSI◀── pcie (DMA) ◀──────────────────────────────── ftl (map, GC) ──▶ flash (LUNs)
//! ```
//!
//! Each layer is its own module and state machine; this file routes messages between them
//! through one event queue. A read travels: doorbell → fetch → firmware → cache lookup → (miss)
//! FTL lookup → flash read on the LUN (array, then channel transfer) → DMA to the host → CQE
//! and MSI. A write: doorbell → fetch → firmware → DMA from the host → cache (acknowledged once
//! in DRAM; waits if the write buffer is full) → CQE; its data reaches flash later, when the
//! buffer evicts it (when a write finds it full, or, with `cache.flush = "idle"`, as soon as a
//! die is idle and a row of dirty data waits). DMAs to the host are asked for when their data
//! is ready (`Ev::ReadDataOut`, `Ev::PostCqe`), so the link serves them in time order.
//!
//! ## Driving it by two clocks (architecture.md)
//! [`Ssd::submit`] a command at time `t`; [`Ssd::next_event_time`] says when the model next
//! has something to do; [`Ssd::advance_to`] runs it up to `t` and hands back the completions
//! posted by then. A full-system simulation interleaves this with the host model by always
//! advancing whichever has the earlier event; the server's emulated backend calls `advance_to`
//! with the wall clock. The model never looks at a clock of its own.
//!
//! ## Modules, by layer, and their dependency order
//! ```text
//!  module   what it holds                                              uses
//!  config   the TOML description and the presets                       —
//!  sys      the model's only `unsafe`: prefetch hint, SSE2 set compares —
//!  stats_de reading fixed-set names back from `summary.json`        —
//!  pcie     the link: doorbells, DMA                                   config
//!  ctrl     SQ/CQ pairs, arbitration, fetch, firmware cores            config
//!  flash    geometry, NAND timing, one scheduler per LUN               config
//!  ftl      mapping, allocation, GC; where evicted data goes           config, flash, stats_de
//!  cache_split  the class split of the cache's ways, by epoch          config
//!  ghost    ghost caches that choose the prefetch size, by epoch       config, stats_de
//!  cache_index  the fully associative cache's tag map and LRU order    —
//!  cache    DRAM lines, the write buffer; what to evict and when       config, cache_index,
//!                                                                      cache_split, ghost, sys
//!  drain    write-back hints: watermark eviction, the oracle buffer    config, stats_de
//!  lib.rs   the device's API and the routing of events between them    all of the above
//!  read_path   lib.rs's read path: cache lookup, flash reads and     lib.rs and all of
//!           prefetches, delivery to waiters, reads waiting to stage    the above
//!  write_path  lib.rs's write path: buffering, stalls, eviction rounds, lib.rs and all of
//!           the idle flush, FastDrain rows, GC start                   the above
//! ```
//! No module uses one below it in this table, so there is no cycle; `cache` and `ftl` do not
//! know each other (this file hands an eviction round from one to the other). This file keeps
//! the device's API and its state machine (which layer an event goes to next), not policy;
//! `read_path` and `write_path` are the parts of that state machine a read and a write go
//! through, each in a file of its own (they add methods to [`Ssd`]; nothing below them uses
//! them). `tests/layers.rs` holds the source
//! to this table.
//!
//! ## Flash events
//! The flash model is sans-event-queue: `Flash::submit` and `Flash::on_event` append
//! `(time, FlashEvent)` pairs to a buffer instead of scheduling them. The buffer is drained
//! into the event queue in exactly one place, `Ssd::handle`, right after every handler, so a
//! handler cannot forget to schedule its flash work. The buffer must be empty between events:
//! asserted (in release builds too) before each handler and in [`Ssd::next_event_time`], which
//! catches flash work submitted from outside a handler (say, from [`Ssd::submit`]). Events at
//! the same nanosecond run in scheduling order, and a handler's flash events are scheduled after
//! everything else it scheduled — the order of the earlier design, in which each handler that
//! submitted flash work flushed the buffer as its last step (the golden summaries did not move).
//!
//! ## Read staging (`cache.read_staging`)
//! A read miss's data comes off the flash into controller DRAM before the host's DMA takes it.
//! `bypass` lets it use a buffer of its own when no cache line is replaceable; `buffer` makes
//! it take a line, as firmware with one DRAM data buffer does (Cosmos+ OpenSSD's GreedyFTL:
//! every read slice allocates the LRU buffer entry and, if that entry is dirty, its data is
//! programmed before the read may use it). With `buffer`, a read miss that finds every line
//! dirty, evicting or filling waits (`device.read_staging_stalls`, `_stall_ns`): a full write
//! buffer starts an eviction round, as a blocked write does, and the read takes the first line
//! a program or a fill frees. `nvme-tlc`'s 512 MB DRAM is all write buffer, so under the
//! "evict when full" baseline a full buffer makes every read miss wait for a TLC program
//! (0.56–5 ms) — the overflow stall reaching reads, which is what FastDrain's watermarks avoid.
//! Worked example (`drain.rs` test): 400 units of DRAM, all dirty; a 4 KiB read miss takes
//! ~0.1 ms bypassing, and with `buffer` waits for the round's first program (LSB, 0.56 ms).
//! Who gets a freed line: under `buffer` the reads waiting to stage first, then the stalled
//! writes; under `buffer-in-order` reads and writes in the order they began to wait, as
//! Cosmos+'s request loop allocates its entries, so a read miss that arrives while a
//! write-back wave's writes wait for the full buffer waits until they all have their lines
//! (`drain.rs`, "Why the hint helps"; the FastDrain study sets it).
//! `zssd` keeps `bypass`: 1 GB of its 1.5 GB is never dirty. The oracle (`cache.drain =
//! "oracle"`, an unbounded buffer) never makes a read wait for a line either.
//!
//! ## Invariants (asserted)
//! Every submitted command completes exactly once; commands are submitted in time order and
//! nothing is scheduled before the model's time; an SQ never holds more than its depth; the
//! write buffer never exceeds its capacity; a LUN runs one operation at a time; GC only erases
//! superblocks without live data and relocates exactly the valid units it counted. These are
//! `assert!`s, on in release builds too, because they are cheap. What they cost is the
//! difference in instructions of a 4 KiB random-read run (`valgrind --tool=callgrind` on `cargo
//! bench -p sim --bench device_throughput a-zssd`) between this build and one with every assert
//! of device, engine and workload compiled out (about 1 % when last measured: CHANGELOG.md).
//! Their panics are kept out of the hot functions' bodies where inlining depends on it. The
//! full mapping check (`Ftl::check_consistency`, O(capacity)) is for the tests. In
//! data-integrity mode every write carries a version that travels with the data through DRAM,
//! flash and GC, and reads return the versions they found, so a test can check that a read
//! sees the last write.

pub mod cache;
pub mod cache_index;
pub mod cache_split;
pub mod config;
pub mod ctrl;
pub mod drain;
pub mod flash;
pub mod ftl;
pub mod ghost;
pub mod pcie;
mod read_path;
pub mod stats_de;
mod sys;
mod write_path;

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use engine::{EventQueue, IoClass, IoOp, SimTime};
use serde::{Deserialize, Serialize};

use cache::{Cache, ReadAhead, WriteBack, WriteBlock};
pub use config::{DeviceConfig, MAP_UNIT_BYTES, SECTOR_BYTES};
use config::{Drain as DrainMode, ReadStaging};
use ctrl::Controller;
pub use ctrl::{SqPriority, SubmitError};
use drain::Drain;
use flash::{Flash, FlashEvent, FlashOp, OpOrigin};
use ftl::Ftl;
use pcie::{Direction, PcieLink};

/// Hints a host may put in a command's reserved field next to the class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum Hint {
    #[default]
    None,
    /// The first command of a write-back wave of `pages` dirty pages.
    WritebackWave { pages: u32 },
}

/// An NVMe I/O command as the model needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvmeCommand {
    /// Command identifier chosen by the host, echoed in the completion.
    pub cid: u32,
    pub op: IoOp,
    /// Starting LBA in 512-byte sectors.
    pub slba: u64,
    /// Number of 512-byte sectors (0 for flush).
    pub sectors: u32,
    /// The workload attribute carried in the reserved field.
    pub class: IoClass,
    pub hint: Hint,
    /// Data-integrity mode: the version of the data a write carries.
    pub version: u32,
}

/// Completion status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    Success,
    LbaOutOfRange,
    InvalidField,
}

/// A completion entry as the host sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// When the entry is in host memory (and the MSI, if any, sent).
    pub at: SimTime,
    pub sqid: u16,
    pub cqid: u16,
    pub cid: u32,
    pub status: Status,
    /// Device status in the entry (the published design overrides `sq_head`): the write
    /// buffer's status in percent — its occupancy, reported at least at the high watermark
    /// while a FastDrain firmware drains in the foreground (`drain.rs`, "The buffer status in
    /// completions").
    pub write_buffer_pct: u8,
    /// Whether an MSI-X was raised (false when the host masked the CQ's vector to poll).
    pub interrupt: bool,
    /// Data-integrity mode: the version of each 4 KiB unit a read returned.
    pub read_versions: Option<Box<[u32]>>,
}

/// Options that are not part of the device description.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceOptions {
    /// Track a version per written unit through the data path (costs memory and time).
    pub integrity: bool,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Doorbell {
        sqid: u16,
        slot: u32,
    },
    FetchFree,
    Ready {
        slot: u32,
    },
    WriteDataIn {
        slot: u32,
    },
    /// A read's data is ready in controller DRAM: its DMA to the host is asked for now.
    ReadDataOut {
        slot: u32,
    },
    /// The firmware has the completion entry ready: its DMA to the host is asked for now.
    PostCqe {
        slot: u32,
    },
    Complete {
        slot: u32,
    },
    Flash(FlashEvent),
}

#[derive(Clone, Debug)]
struct Cmd {
    cmd: NvmeCommand,
    sqid: u16,
    first_lpn: u32,
    units: u32,
    pending_units: u32,
    /// Writes: next unit to put in the buffer (resumes there after a stall).
    next_unit: u32,
    status: Status,
    stalled_since: Option<SimTime>,
    versions: Option<Vec<u32>>,
}

/// Who waits for an in-flight flash read of one unit.
#[derive(Clone, Debug)]
enum Waiters {
    /// A prefetch nobody has asked for yet.
    None,
    One(u32),
    Many(Vec<u32>),
}

impl Waiters {
    fn add(&mut self, slot: u32) {
        *self = match std::mem::replace(self, Waiters::None) {
            Waiters::None => Waiters::One(slot),
            Waiters::One(a) => Waiters::Many(vec![a, slot]),
            Waiters::Many(mut v) => {
                v.push(slot);
                Waiters::Many(v)
            }
        };
    }
}

/// Per-op command counts and device-level counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CommandStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub errors: u64,
    pub latency_critical: u64,
    pub throughput: u64,
    /// Writes that waited for buffer space, and their total wait.
    pub write_stalls: u64,
    pub write_stall_ns: u64,
    /// `cache.read_staging = "buffer"`: read misses that waited for a DRAM line (every line
    /// dirty, evicting or filling), and their total wait; omitted while 0.
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub read_staging_stalls: u64,
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub read_staging_stall_ns: u64,
    /// Strict-priority arbitration: drains of a starving lower-priority SQ (`ctrl.rs`);
    /// omitted while 0.
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub arbitration_drains: u64,
    /// `cache.prefetch = "ghost"`: prefetch reads still queued behind demand reads when a
    /// demand read came to wait for them, and so made demand reads (`flash.rs`); omitted
    /// while 0.
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub prefetches_promoted: u64,
}

/// Everything the device counts, for `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceStats {
    pub name: String,
    pub user_capacity_bytes: u64,
    pub commands: CommandStats,
    pub cache: cache::CacheStats,
    pub ftl: ftl::FtlStats,
    pub flash: flash::FlashStats,
    /// NAND units programmed (host + GC) per host unit programmed; 1.0 when GC copied nothing.
    pub write_amplification: f64,
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_mean: f64,
    pub pcie_bytes_to_device: u64,
    pub pcie_bytes_to_host: u64,
    /// Bytes the FTL's mapping tables hold at the end of the run: the forward map's index and
    /// the LPNs written (about 4-21 bytes each), and the reverse maps of superblocks written.
    pub mapping_table_bytes: u64,
    /// Write-back hints and watermark eviction (`cache.drain`; absent for `vanilla`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<drain::DrainStats>,
    /// What in the run deserves a second look (e.g. write amplification above
    /// [`WRITE_AMPLIFICATION_WARN`]).
    pub warnings: Vec<String>,
}

/// Write amplification above which a run is flagged: greedy GC with the presets' 7 %
/// over-provisioning settles near 8 under uniform random writes (`ftl/precondition.rs`);
/// far above that, the device is too small for the data its workload keeps live.
pub const WRITE_AMPLIFICATION_WARN: f64 = 20.0;

/// A read miss waiting for a line to stage in.
#[derive(Clone, Copy, Debug)]
struct ReadStall {
    lpn: u32,
    class: IoClass,
    since: SimTime,
}

/// The SSD.
pub struct Ssd {
    config: DeviceConfig,
    events: EventQueue<Ev>,
    now: SimTime,
    pcie: PcieLink,
    ctrl: Controller,
    cache: Cache,
    ftl: Ftl,
    flash: Flash,
    cmds: Vec<Option<Cmd>>,
    free_cmds: Vec<u32>,
    /// Flash reads in flight by LPN (a fast integer hash: this map is on every read miss).
    fills: FxHashMap<u32, Waiters>,
    /// Eviction rounds and the host rows in flight (`cache/writeback.rs`).
    writeback: WriteBack,
    /// Hint-driven watermark eviction and the oracle's unbounded buffer (`drain.rs`).
    drain: Drain,
    stalled: VecDeque<u32>,
    /// Read misses waiting for a DRAM line to stage in (`cache.read_staging = "buffer"`), in
    /// arrival order; their waiters are in `fills`.
    read_stalls: VecDeque<ReadStall>,
    readahead: ReadAhead,
    /// Where the idle flush looks for an idle LUN next (round robin).
    flush_cursor: u32,
    /// Flash events produced while handling one event; [`handle`](Self::handle) moves them into
    /// `events` after every handler (see "Flash events" in the module essay).
    flash_events: Vec<(SimTime, FlashEvent)>,
    ready: Vec<Completion>,
    integrity: bool,
    submitted: u64,
    completed: u64,
    stats: CommandStats,
    /// Commands in the order the firmware executed them, `(time, sqid, cid)`, when a caller
    /// asked for it ([`enable_exec_log`](Self::enable_exec_log)).
    exec_log: Option<Vec<(SimTime, u16, u32)>>,
    /// Tests: every background-eviction row as placed, `(time, LUN, host reads on the LUN)`.
    #[cfg(test)]
    background_log: Vec<(SimTime, u32, usize)>,
}

impl Ssd {
    pub fn new(config: &DeviceConfig, options: DeviceOptions) -> Result<Ssd, config::ConfigError> {
        Self::with_seed(config, options, 0)
    }

    /// As [`new`](Self::new), drawing the device's random choices (factory bad blocks, NAND
    /// sense times and read retries) from the run's `seed`.
    pub fn with_seed(
        config: &DeviceConfig,
        options: DeviceOptions,
        seed: u64,
    ) -> Result<Ssd, config::ConfigError> {
        config.validate()?;
        let flash = Flash::with_seed(config, seed);
        let ftl = Ftl::with_seed(config, flash.geometry.clone(), options.integrity, seed);
        let writeback = WriteBack::new(
            &config.cache,
            flash.geometry.luns,
            flash.geometry.row_units(),
        );
        Ok(Ssd {
            config: config.clone(),
            events: EventQueue::new(),
            now: SimTime::ZERO,
            pcie: PcieLink::new(&config.pcie),
            ctrl: Controller::new(&config.ctrl),
            cache: Cache::new(&config.cache),
            ftl,
            flash,
            cmds: Vec::new(),
            free_cmds: Vec::new(),
            fills: FxHashMap::default(),
            writeback,
            drain: Drain::new(
                &config.cache,
                config.cache.write_buffer_bytes / MAP_UNIT_BYTES,
            ),
            stalled: VecDeque::new(),
            read_stalls: VecDeque::new(),
            readahead: ReadAhead::new(&config.cache),
            flush_cursor: 0,
            flash_events: Vec::new(),
            ready: Vec::new(),
            integrity: options.integrity,
            submitted: 0,
            completed: 0,
            stats: CommandStats::default(),
            exec_log: None,
            #[cfg(test)]
            background_log: Vec::new(),
        })
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// Capacity the host can address, in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.ftl.user_lpns() * MAP_UNIT_BYTES
    }

    /// Creates an I/O SQ/CQ pair (admin command).
    pub fn create_queue_pair(&mut self, sqid: u16, cqid: u16, depth: u32, priority: SqPriority) {
        self.ctrl.create_queue_pair(sqid, cqid, depth, priority);
    }

    /// The arbitration mechanism the host selects when it enables the controller (overrides
    /// `ctrl.arbitration`).
    pub fn set_arbitration(&mut self, arbitration: config::Arbitration) {
        self.ctrl.set_arbitration(arbitration);
    }

    /// Masks (polling) or unmasks a CQ's interrupt.
    pub fn set_interrupts(&mut self, cqid: u16, enabled: bool) {
        self.ctrl.set_interrupts(cqid, enabled);
    }

    /// The host wrote `cmd` into SQ `sqid` and rang its doorbell at `now`.
    pub fn submit(&mut self, now: SimTime, sqid: u16, cmd: NvmeCommand) -> Result<(), SubmitError> {
        assert!(
            now >= self.now,
            "submit at {now} before the model's time {}",
            self.now
        );
        self.ctrl.occupy(sqid)?;
        let first_lpn = (cmd.slba * SECTOR_BYTES / MAP_UNIT_BYTES) as u32;
        let end_byte = (cmd.slba + cmd.sectors as u64) * SECTOR_BYTES;
        let units = if cmd.sectors == 0 {
            0
        } else {
            (end_byte.div_ceil(MAP_UNIT_BYTES) - first_lpn as u64) as u32
        };
        let status = if matches!(cmd.op, IoOp::Flush) {
            Status::Success
        } else if cmd.sectors == 0 {
            Status::InvalidField
        } else if end_byte > self.capacity_bytes() {
            Status::LbaOutOfRange
        } else {
            Status::Success
        };
        let state = Cmd {
            cmd,
            sqid,
            first_lpn,
            units,
            pending_units: 0,
            next_unit: 0,
            status,
            stalled_since: None,
            versions: None,
        };
        let slot = match self.free_cmds.pop() {
            Some(s) => {
                self.cmds[s as usize] = Some(state);
                s
            }
            None => {
                self.cmds.push(Some(state));
                (self.cmds.len() - 1) as u32
            }
        };
        if status == Status::Success && units > 0 {
            // The command is looked up in the cache a few events from now: start the CPU's
            // memory loads for its first set here so they are in by then.
            self.cache.prefetch_set(first_lpn);
        }
        self.submitted += 1;
        self.events
            .schedule(now + self.pcie.doorbell_ns, Ev::Doorbell { sqid, slot });
        Ok(())
    }

    /// When the model next has work, if it has any.
    #[inline]
    pub fn next_event_time(&self) -> Option<SimTime> {
        self.assert_no_pending_flash_events("when asked for the next event");
        self.events.peek_time()
    }

    /// Runs the model up to and including `t`; appends the completions posted by then.
    pub fn advance_to(&mut self, t: SimTime, completions: &mut Vec<Completion>) {
        while let Some((at, ev)) = self.events.pop_due(t) {
            self.now = at;
            self.handle(ev);
        }
        if t > self.now {
            self.now = t;
        }
        completions.append(&mut self.ready);
    }

    /// Runs the model's events in time order, one time step (every event of one nanosecond) at
    /// a time, while the next is due at or before `limit`, and stops after the first step that
    /// posted a completion; appends the completions and returns the time of the last step run
    /// (`None` if nothing was due). The same as calling `advance_to(next_event_time())` step by
    /// step while no completion comes out, which is what a driver does whose other events (the
    /// host's) wait until `limit` and only a completion can bring earlier: in one call, so the
    /// driver's loop runs once per completion instead of once per device event.
    pub fn advance_until_completion(
        &mut self,
        limit: SimTime,
        completions: &mut Vec<Completion>,
    ) -> Option<SimTime> {
        let mut last = None;
        while let Some(step) = self.events.peek_time().filter(|&at| at <= limit) {
            while let Some((at, ev)) = self.events.pop_due(step) {
                self.now = at;
                self.handle(ev);
            }
            last = Some(step);
            if !self.ready.is_empty() {
                break;
            }
        }
        completions.append(&mut self.ready);
        last
    }

    /// Commands submitted and not yet completed.
    pub fn in_flight(&self) -> u64 {
        self.submitted - self.completed
    }

    /// A one-line description of what is still pending inside the device (for diagnostics
    /// when a run ends with commands in flight).
    pub fn pending_state(&self) -> String {
        let stuck: Vec<String> = self
            .cmds
            .iter()
            .flatten()
            .take(4)
            .map(|c| {
                format!(
                    "{:?} lpn {} units {} pending {} next {}",
                    c.cmd.op, c.first_lpn, c.units, c.pending_units, c.next_unit
                )
            })
            .collect();
        format!(
            "{} in flight; stalled writes {}; reads waiting to stage {}; eviction rows in flight {}; eviction blocked {}; dirty units {}/{}; fills {}; events {}; flash idle {}; e.g. [{}]",
            self.in_flight(),
            self.stalled.len(),
            self.read_stalls.len(),
            self.writeback.rows_in_flight(),
            self.writeback.is_blocked(),
            self.cache.dirty_units(),
            self.cache.write_buffer_capacity_units(),
            self.fills.len(),
            self.events.len(),
            self.flash.is_idle(),
            stuck.join("; ")
        )
    }

    /// Events processed so far.
    pub fn events_processed(&self) -> u64 {
        self.events.scheduled_total() - self.events.len() as u64
    }

    /// Write-buffer occupancy in percent.
    pub fn write_buffer_pct(&self) -> u8 {
        self.cache.write_buffer_pct()
    }

    /// Checks FTL mapping and buffer accounting (O(capacity): for tests on small devices).
    pub fn check_consistency(&self) -> Result<(), String> {
        self.ftl.check_consistency()?;
        self.cache.check_consistency()
    }

    /// Dirty 4 KiB units in the write buffer now, and the buffer's capacity in units (cheap;
    /// for time series).
    pub fn write_buffer_units(&self) -> (u64, u64) {
        (
            self.cache.dirty_units(),
            self.cache.write_buffer_capacity_units(),
        )
    }

    /// Cache counters so far (cheap; for time series).
    pub fn cache_stats(&self) -> &cache::CacheStats {
        &self.cache.stats
    }

    /// Ways of every set each class may fill, by `IoClass::index` (cheap; for time series).
    pub fn cache_ways_by_class(&self) -> [u32; 2] {
        self.cache.ways_by_class()
    }

    /// Pages each class's reads prefetch now, by `IoClass::index` (cheap; for time series).
    pub fn cache_prefetch_pages_by_class(&self) -> [u32; 2] {
        IoClass::ALL.map(|c| self.cache.prefetch_pages_for(c))
    }

    /// FTL counters so far (cheap; for time series).
    pub fn ftl_stats(&self) -> &ftl::FtlStats {
        &self.ftl.stats
    }

    /// Starts recording the order in which the firmware executes commands (where it reads
    /// each command's hint): an observation for tests, off by default.
    pub fn enable_exec_log(&mut self) {
        self.exec_log.get_or_insert_with(Vec::new);
    }

    /// Moves the commands executed since the last call into `out`, as `(time, sqid, cid)` in
    /// execution order (nothing unless [`enable_exec_log`](Self::enable_exec_log) was called).
    pub fn take_exec_log(&mut self, out: &mut Vec<(SimTime, u16, u32)>) {
        if let Some(log) = &mut self.exec_log {
            out.append(log);
        }
    }

    /// Whether foreground eviction is draining the buffer toward `low` now (`drain.rs`).
    pub fn drain_in_foreground(&self) -> bool {
        self.drain.in_foreground()
    }

    /// Drain counters so far (cheap; for time series and tests).
    pub fn drain_stats(&self) -> &drain::DrainStats {
        &self.drain.stats
    }

    /// Command counters (cheap: no scan of the FTL, unlike [`stats`](Self::stats)).
    pub fn command_stats(&self) -> &CommandStats {
        &self.stats
    }

    pub fn stats(&self) -> DeviceStats {
        let f = &self.ftl.stats;
        let host = f.host_units_programmed;
        let (emin, emax, emean_milli) = self.ftl.erase_count_stats();
        let write_amplification = if host == 0 {
            1.0
        } else {
            (host + f.gc_units_programmed) as f64 / host as f64
        };
        let mut warnings = Vec::new();
        let fallback = self.ftl.random_fallback_luns();
        if fallback > 0 {
            warnings.push(format!(
                "ftl.precondition = \"random\" laid out {fallback} of {} LUNs sequentially: with \
                 {} % over-provisioning no invalid space fits above the GC threshold \
                 (ftl.gc_threshold_pct = {}); give more over-provisioning, or ask for \
                 \"sequential\"",
                self.flash.geometry.luns,
                self.config.ftl.overprovisioning_pct,
                self.config.ftl.gc_threshold_pct
            ));
        }
        if write_amplification > WRITE_AMPLIFICATION_WARN {
            warnings.push(format!(
                "write amplification {write_amplification:.1} exceeds {WRITE_AMPLIFICATION_WARN}: \
                 the device ({:.1} GB user capacity, {} % over-provisioning) is too small for the \
                 data its workload keeps live",
                self.capacity_bytes() as f64 / 1e9,
                self.config.ftl.overprovisioning_pct
            ));
        }
        DeviceStats {
            name: self.config.name.clone(),
            user_capacity_bytes: self.capacity_bytes(),
            commands: CommandStats {
                arbitration_drains: self.ctrl.drains,
                ..self.stats.clone()
            },
            cache: self.cache.stats.clone(),
            ftl: f.clone(),
            flash: flash::FlashStats {
                lun_busy_ns: self.flash.busy_ns(),
                ..self.flash.stats.clone()
            },
            write_amplification,
            erase_count_min: emin,
            erase_count_max: emax,
            erase_count_mean: emean_milli as f64 / 1000.0,
            pcie_bytes_to_device: self.pcie.bytes_moved[Direction::HostToDevice as usize],
            pcie_bytes_to_host: self.pcie.bytes_moved[Direction::DeviceToHost as usize],
            mapping_table_bytes: self.ftl.table_bytes(),
            drain: (self.drain.mode() != DrainMode::Vanilla).then(|| self.drain.stats.clone()),
            warnings,
        }
    }

    /// Runs the handler of `ev`, then schedules the flash events it produced. This is the only
    /// way a handler runs, so no handler can leave flash work unscheduled.
    fn handle(&mut self, ev: Ev) {
        self.assert_no_pending_flash_events("before an event");
        self.dispatch(ev);
        if !self.flash_events.is_empty() {
            for (at, fe) in self.flash_events.drain(..) {
                self.events.schedule(at, Ev::Flash(fe));
            }
        }
    }

    /// Flash events must not wait in the buffer between events: [`next_event_time`] would miss
    /// them. Always on (one length check per event; the panic is out of line).
    ///
    /// [`next_event_time`]: Self::next_event_time
    #[inline]
    fn assert_no_pending_flash_events(&self, when: &str) {
        if !self.flash_events.is_empty() {
            self.pending_flash_events(when);
        }
    }

    #[cold]
    #[inline(never)]
    fn pending_flash_events(&self, when: &str) -> ! {
        panic!(
            "{} flash events pending {when} at {}: flash work was submitted outside an event handler",
            self.flash_events.len(),
            self.now
        );
    }

    fn dispatch(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Doorbell { sqid, slot } => {
                self.ctrl.doorbell(now, sqid, slot);
                if !self.ctrl.fetch_busy {
                    self.fetch_next(now);
                }
            }
            Ev::FetchFree => {
                self.ctrl.fetch_busy = false;
                self.fetch_next(now);
            }
            Ev::Ready { slot } => self.execute(now, slot),
            Ev::WriteDataIn { slot } => {
                if self.stalled.is_empty() {
                    self.buffer_write(now, slot);
                } else {
                    // Writes queue behind stalled ones: the overflow stall hits every write.
                    self.stall(now, slot);
                }
            }
            Ev::ReadDataOut { slot } => {
                let bytes = self.cmd(slot).cmd.sectors as u64 * SECTOR_BYTES;
                let done = self.pcie.dma(now, Direction::DeviceToHost, bytes);
                self.post_completion(done, slot);
            }
            Ev::PostCqe { slot } => {
                let done = self.pcie.dma(now, Direction::DeviceToHost, 16);
                self.events.schedule(done, Ev::Complete { slot });
            }
            Ev::Complete { slot } => self.complete(now, slot),
            Ev::Flash(fe) => {
                let done = self.flash.on_event(now, fe, &mut self.flash_events);
                if let Some(op) = done {
                    self.flash_done(now, fe.lun, op);
                }
            }
        }
    }

    fn fetch_next(&mut self, now: SimTime) {
        let Some((_sqid, slot)) = self.ctrl.pick(now) else {
            return;
        };
        self.ctrl.fetch_busy = true;
        let fetched = now + self.config.ctrl.fetch_ns;
        let op = self.cmd(slot).cmd.op;
        let ready = self.ctrl.run_firmware(fetched, op);
        self.events.schedule(fetched, Ev::FetchFree);
        self.events.schedule(ready, Ev::Ready { slot });
    }

    fn cmd(&mut self, slot: u32) -> &mut Cmd {
        self.cmds[slot as usize]
            .as_mut()
            .expect("live command slot")
    }

    fn execute(&mut self, now: SimTime, slot: u32) {
        let (op, status, class) = {
            let c = self.cmd(slot);
            (c.cmd.op, c.status, c.cmd.class)
        };
        if self.exec_log.is_some() {
            let (sqid, cid) = (self.cmd(slot).sqid, self.cmd(slot).cmd.cid);
            if let Some(log) = &mut self.exec_log {
                log.push((now, sqid, cid));
            }
        }
        match class {
            IoClass::LatencyCritical => self.stats.latency_critical += 1,
            IoClass::Throughput => self.stats.throughput += 1,
        }
        if status != Status::Success {
            self.stats.errors += 1;
            self.post_completion(now, slot);
            return;
        }
        if self.cache.is_adaptive() && matches!(op, IoOp::Read | IoOp::Write) {
            let (first, units) = {
                let c = self.cmd(slot);
                (c.first_lpn, c.units)
            };
            // The class split's and the ghosts' epoch counts (`cache_split.rs`, `ghost.rs`).
            let write = op == IoOp::Write;
            self.cache
                .note_command(now.as_ns(), write, first, units, class);
        }
        match op {
            IoOp::Read => {
                self.stats.reads += 1;
                self.start_read(now, slot);
            }
            IoOp::Write => {
                self.stats.writes += 1;
                if let Hint::WritebackWave { pages } = self.cmd(slot).cmd.hint {
                    // Read before the command's data moves: before any page of the wave is
                    // in the buffer (`drain.rs`).
                    let read_free_units = self.read_free_row_units();
                    self.drain
                        .on_hint(self.cache.dirty_units(), pages, read_free_units);
                    self.drain_step(now);
                }
                let bytes = self.cmd(slot).cmd.sectors as u64 * SECTOR_BYTES;
                let done = self.pcie.dma(now, Direction::HostToDevice, bytes);
                self.events.schedule(done, Ev::WriteDataIn { slot });
            }
            IoOp::Flush => {
                // DRAM is power-loss protected (capacitors), so a flush has nothing to wait for.
                self.stats.flushes += 1;
                self.post_completion(now, slot);
            }
            IoOp::Trim => {
                self.stats.trims += 1;
                let (first, units) = {
                    let c = self.cmd(slot);
                    (c.first_lpn, c.units)
                };
                for lpn in first..first + units {
                    self.cache.trim(lpn);
                    self.drain.oracle_trim(lpn);
                    self.ftl.trim(lpn);
                }
                self.post_completion(now, slot);
            }
        }
    }

    fn flash_done(&mut self, now: SimTime, lun: u32, op: FlashOp) {
        self.flash_op_done(now, lun, op);
        self.flush_idle(now);
        self.drain_step(now);
    }

    fn flash_op_done(&mut self, now: SimTime, lun: u32, op: FlashOp) {
        match op.origin {
            OpOrigin::HostRead { lpn } | OpOrigin::Prefetch { lpn } => {
                let version = self.ftl.version_of(lpn);
                self.cache.finish_fill(lpn, version);
                let waiters = self
                    .fills
                    .remove(&lpn)
                    .expect("a host flash read has a fill record");
                self.deliver_unit(now, lpn, version, waiters);
                if !self.read_stalls.is_empty() {
                    // The filled line is replaceable now: a read waiting to stage may take it
                    // (in arrival order with the stalled writes under `buffer-in-order`).
                    if self.config.cache.read_staging == ReadStaging::BufferInOrder {
                        self.resume_stalled(now);
                    } else {
                        self.resume_read_stalls(now);
                    }
                }
                if self.cache.is_split() && !self.stalled.is_empty() {
                    // A partition of a few ways can be all filling: the fill just made one
                    // replaceable, which a write stalled on that partition may be waiting for.
                    self.resume_stalled(now);
                }
            }
            OpOrigin::Evict { row } => {
                self.writeback.finish_row(&mut self.cache, row);
                self.ftl.host_row_programmed(lun);
                self.resume_stalled(now);
            }
            OpOrigin::GcRead | OpOrigin::GcProgram => {}
            OpOrigin::GcErase { superblock } => {
                self.ftl.finish_gc(lun, superblock);
                if self.ftl.needs_gc(lun) {
                    self.start_gc(now, lun);
                }
                if self.writeback.take_blocked() {
                    self.resume_stalled(now);
                    if !self.stalled.is_empty() {
                        self.make_room(now, WriteBlock::BufferFull, 0);
                    }
                }
            }
        }
    }

    /// Posts the completion entry: the firmware's completion work from `at`, then the entry's
    /// DMA. DMAs are asked for when their data is ready (an event), not reserved ahead: the
    /// link serves requests in the order they arrive, and a reservation made early for a
    /// later time would hold back transfers ready before it (at QD32 that left the link idle
    /// 550 ns per 4 KiB read, capping zssd at 588 K reads/s: measured while afcc062 was made,
    /// with a command it did not record).
    fn post_completion(&mut self, at: SimTime, slot: u32) {
        self.events
            .schedule(at + self.config.ctrl.completion_ns, Ev::PostCqe { slot });
    }

    fn complete(&mut self, now: SimTime, slot: u32) {
        let c = self.cmds[slot as usize]
            .take()
            .expect("a command completes exactly once");
        self.free_cmds.push(slot);
        self.completed += 1;
        let cqid = self.ctrl.cq_of(c.sqid);
        self.ready.push(Completion {
            at: now,
            sqid: c.sqid,
            cqid,
            cid: c.cmd.cid,
            status: c.status,
            write_buffer_pct: self.drain.status_pct(
                self.cache.dirty_units(),
                self.cache.write_buffer_capacity_units(),
            ),
            interrupt: self.ctrl.interrupts_enabled(cqid),
            read_versions: c.versions.map(Vec::into_boxed_slice),
        });
    }
}

#[cfg(test)]
mod tests;
