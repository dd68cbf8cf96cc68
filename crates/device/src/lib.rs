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
//!  ftl      mapping, allocation, GC; where evicted data goes           config, flash, stats_de,
//!                                                                      sys
//!  cache_split  the class split of the cache's ways, by epoch          config
//!  ghost    ghost caches that choose the prefetch size, by epoch       config, stats_de
//!  cache_index  the fully associative cache's tag map and LRU order    —
//!  cache    DRAM lines, the write buffer; what to evict and when       config, cache_index,
//!                                                                      cache_split, ghost, sys
//!  drain    write-back hints: watermark eviction, the oracle buffer    config, stats_de
//!  lib.rs   the device's API, its types and its state                  all of the above
//!  routing  lib.rs's state machine: which layer an event goes          lib.rs and all of
//!           to next; flash events scheduled after every handler        the above
//!  read_path the read path: cache lookup, flash reads and              lib.rs and all of
//!           prefetches, delivery to waiters, reads waiting to stage    the above
//!  write_path the write path: buffering, stalls, eviction rounds,      lib.rs and all of
//!           the idle flush, FastDrain rows, GC start                   the above
//!  flash_done what a finished flash operation leads to: fills          lib.rs and all of
//!           delivered, rows programmed, GC's next step                 the above
//!  summary  CommandStats, DeviceStats and the run's warnings           lib.rs and all of
//!                                                                      the above
//! ```
//! No module uses one below it in this table, so there is no cycle; `cache` and `ftl` do not
//! know each other (`flash_done` and `write_path` hand an eviction round from one to the
//! other). This file keeps the device's API, its command and event types and its state; the
//! state machine (which layer an event goes to next, not policy) is in the files below it in
//! the table, each one idea: `routing` takes every event, `read_path` and `write_path` are the
//! parts a read and a write go through, `flash_done` what a finished flash operation leads to,
//! `summary` the counters the run reports. They add methods to [`Ssd`]; nothing above them in
//! the table uses them, and none of them uses another by path. `tests/layers.rs` holds the
//! source to this table.
//!
//! ## Flash events
//! The flash model is sans-event-queue: it appends the events it needs to a buffer that
//! `routing` moves into the event queue after every handler, so no handler can leave flash
//! work unscheduled (`routing.rs`, "Flash events").
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
//! `assert!`s, on in release builds too, because they are cheap: their cost is the difference
//! in instructions of a 4 KiB random-read run (`valgrind --tool=callgrind` on `cargo bench -p
//! sim --bench device_throughput a-zssd`) between this build and one with every assert of
//! device, engine and workload compiled out. Their panics are kept out of the hot functions' bodies where inlining depends on it. The
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
mod flash_done;
pub mod ftl;
pub mod ghost;
pub mod pcie;
mod read_path;
mod routing;
pub mod stats_de;
mod summary;
mod sys;
mod write_path;

use std::collections::VecDeque;

use engine::{EventQueue, IoClass, IoOp, Reservation, SimTime, U32Map};
use serde::Serialize;

use cache::{Cache, ReadAhead, WriteBack};
pub use config::{DeviceConfig, MAP_UNIT_BYTES, SECTOR_BYTES};
use ctrl::Controller;
pub use ctrl::{SqPriority, SubmitError};
use drain::Drain;
use flash::{Flash, FlashEvent};
use ftl::Ftl;
use pcie::PcieLink;
pub use summary::{CommandStats, DeviceStats, WRITE_AMPLIFICATION_WARN};

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
    /// The fetch engine's coming free, reserved in the event order and not scheduled while
    /// nothing is visible for it to fetch (`routing.rs`, "The fetch engine coming free").
    fetch_free: Option<Reservation>,
    now: SimTime,
    pcie: PcieLink,
    ctrl: Controller,
    cache: Cache,
    ftl: Ftl,
    flash: Flash,
    cmds: Vec<Option<Cmd>>,
    free_cmds: Vec<u32>,
    /// Flash reads in flight by LPN (`engine::intmap`: this map is on every read miss).
    fills: U32Map<Waiters>,
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
            fetch_free: None,
            now: SimTime::ZERO,
            pcie: PcieLink::new(&config.pcie),
            ctrl: Controller::new(&config.ctrl),
            cache: Cache::new(&config.cache),
            ftl,
            flash,
            cmds: Vec::new(),
            free_cmds: Vec::new(),
            fills: U32Map::new(),
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
        // A fetch decision with nothing visible may change state under the new mechanism.
        self.settle_fetch_free();
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
            // memory loads for its first set here so they are in by then, and for a read the
            // FTL's for its first unit (a miss of the cache looks it up).
            self.cache.prefetch_set(first_lpn, cmd.op == IoOp::Write);
            if cmd.op == IoOp::Read {
                self.ftl.prefetch_lookup(first_lpn);
            }
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
        self.hand_over_completions(completions);
    }

    /// Moves the completions posted (`ready`) to the end of `completions`. Into an empty list
    /// (the drivers drain theirs before each call) the two lists swap, so the entries are not
    /// copied: an append moved each 40-byte entry through `memcpy` (1-2 % of the time
    /// samples of a 70/30 run).
    #[inline]
    fn hand_over_completions(&mut self, completions: &mut Vec<Completion>) {
        if completions.is_empty() {
            std::mem::swap(completions, &mut self.ready);
        } else {
            completions.append(&mut self.ready);
        }
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
        while let Some((at, ev)) = self.events.pop_due(limit) {
            self.now = at;
            self.handle(ev);
            last = Some(at);
            // The step (every event at `at`) is over when the next event is later: stop there
            // if it posted a completion. One pop per event, no peek per step before it.
            if !self.ready.is_empty() && self.events.peek_time() != Some(at) {
                break;
            }
        }
        if !self.ready.is_empty() {
            self.hand_over_completions(completions);
        }
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

    /// The live command in `slot`.
    fn cmd(&mut self, slot: u32) -> &mut Cmd {
        self.cmds[slot as usize]
            .as_mut()
            .expect("live command slot")
    }
}

#[cfg(test)]
mod tests;
