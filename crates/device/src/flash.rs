//! The NAND flash backend: geometry, operation timing, and one scheduler per LUN.
//!
//! ## What it models
//! An SSD's flash sits on `channels`; each channel carries `packages` (ways) of `dies`, each die
//! with `planes` of `blocks` of `pages`. A die does one operation at a time (an operation may
//! span all its planes: a multi-plane operation); a channel carries one data transfer at a time.
//! Operation times depend on the cell type and, for MLC/TLC, on the page type of the word line
//! (LSB fast, CSB, MSB slow).
//!
//! ## LUNs: the unit of parallelism the FTL sees
//! The FTL maps 4 KiB units. A *LUN* here is what executes one operation: normally a die; with
//! `super_channel = "on"`, a pair of dies at the same position on two paired channels that act
//! as one (each 4 KiB unit is split into two halves moved on both channels at once). When a
//! LUN's page is still smaller than 4 KiB (Z-NAND's 2 KiB page without super-channel), planes
//! are ganged in pairs so one multi-plane page holds a unit. A LUN page *row* is the same page
//! index across all (effective) planes: the FTL programs whole rows in one multi-plane program.
//!
//! Worked example, `zssd` (16 ch × 1 pkg × 8 dies × 8 planes, 2 KiB pages, super-channel on):
//! 8 channel pairs × 8 dies = 64 LUNs; LUN page = 2 × 2 KiB = 4 KiB = 1 unit; a row spans 8
//! planes = 8 units. A 4 KiB read costs `cmd_addr` 100 ns + tR 3 µs on both dies, then 2 KiB on
//! each channel of the pair at 1000 MT/s × 1 B = 2.05 µs: 5.15 µs of flash time.
//!
//! ## Operation timing
//! - read: die busy `cmd_addr + tR(page type)`, then the data moves out over the channel(s)
//!   (waiting for the channel if another die is using it); the die stays busy until it has.
//! - program: data moves in over the channel(s) first, then the die is busy `tPROG(page type)`.
//! - erase: die busy `cmd_addr + tBERS`; no data on the channel.
//!
//! ## Scheduling inside a LUN (`flash.queue_policy`, `ftl.gc_preemptible`, `flash.suspend`)
//! Each LUN keeps a queue of host reads and a queue of everything else (host write-back
//! programs, GC reads/programs/erases) in arrival order (and one of prefetch reads, below). `read-first` serves host reads before
//! anything else; `fifo` serves strict arrival order, except that with `gc_preemptible` a host
//! read may overtake queued GC work. With `suspend = "on"`, a host read arriving while the die
//! is in the array phase of a program or erase suspends it (`suspend_overhead_ns`), runs, and
//! the suspended operation resumes afterwards with its remaining time plus `resume_overhead_ns`.
//!
//! ## Prefetch reads behind demand reads (with `cache.prefetch = "ghost"`)
//! A prefetch is speculative: nobody waits for it, and it must not make the reads somebody
//! waits for slower (Linux marks its read-ahead bios `REQ_RAHEAD`, "read ahead, can fail
//! anytime", for the same reason). FlashShare's paper does not say how its firmware
//! schedules the prefetches its ghosts choose; the model takes this rule: the firmware that
//! runs the ghost prefetcher issues its prefetch reads (`OpOrigin::Prefetch`: the ghost-chosen prefetch and the
//! sequential read-ahead) as background work: on the die they wait in their own queue until
//! no demand read (and nothing else) is queued, never suspend a program, and once sensed they
//! leave their data in the page register while the channel carries anything else, moving it
//! out only when the channel is free and no demand read on its LUNs is sensing (that read's
//! data would wait for the prefetch's). Sensed prefetches waiting for the bus queue per
//! channel in the order their senses ended, as a flash channel scheduler keeps its sensed
//! pages waiting for the bus: when the channel is next free and no demand read on it senses,
//! the one that has waited longest takes it (the channel's wake, `Phase::ChannelWake`: one
//! pending per channel, at the earliest time it can be free, looking again if a demand read
//! took the channel first). A demand read that comes to wait for a prefetch's data
//! promotes it ([`Flash::promote`]): queued, it joins the demand reads in its arrival place;
//! running, its transfer goes as a demand read's (sensed, it leaves the channel's queue and
//! takes its turn on the channel at once). So does the transfer of a prefetch that
//! holds a die a demand read is queued on (the die is not free until the data leave). Without the ghost prefetcher every host read,
//! prefetch or not, is a demand read, as before.
//!
//! Why: FlashShare's ghosts choose the prefetch that misses least and do not count what a
//! prefetch costs the flash, and per class they choose large ones (64 pages for pagerank's
//! stream in the quick `flashshare` study). 64 prefetched units land on the 64 LUNs at once,
//! 8 transfers of 2 µs per channel pair, and a latency-critical read that comes next waits
//! for them. Measured with `ullstack sim --system` on apache + pagerank (arm8 + zssd, 1 s,
//! seed 1, `attr = "on"`, `readahead_units = 0`, `prefetch = "ghost"`, shared cache): apache's
//! device time per I/O was 27.1 µs with prefetches as demand reads and is 16.4 µs behind
//! them, against 16.7 µs with no prefetch at all and 17.9 µs with the stock sequential
//! read-ahead (`readahead_units = 32`, no ghosts, its reads as demand reads).
//! What it leaves out: a prefetch sensing when a demand read arrives on the same die runs
//! on (a 3 µs sense is not aborted), and a transfer already under way is not preempted.
//!
//! ## Bad blocks and the remap checker (`flash.bad_block_ppm`, `flash.spare_blocks_per_plane`)
//! Factory bad blocks are drawn from the run's seed. The FTL retires a superblock holding one,
//! except that with `super_channel = "on"` the remap checker substitutes a clean spare block of
//! the same LUN, so the channel pair stays usable (see `ftl/precondition.rs`). Remapping costs no time.
//!
//! ## Read-time variation (`flash.read_spread_pct`)
//! A NAND read is not one fixed tR. Part of its variation is the page's position (LSB, CSB and
//! MSB pages of a word line: `read_ns` by page type); the rest varies from one read of the same
//! page to the next (bit-line settling, the on-die read-level search). Each sense draws its
//! time uniformly within ± `read_spread_pct` of its page type's tR, from the flash's own stream
//! (`engine::stream(seed, "flash.read")`), so the mean stays the calibrated tR and the seed
//! fixes every draw. Worked example (`zssd`, ± 10 %): a sense takes 2.7 to 3.3 µs, evenly, so
//! a QD1 read's device time spreads over 0.6 µs around the same mean. The magnitudes and their
//! sources are on `config::READ_SPREAD_PCT`.
//!
//! ## Read retry (`flash.read_retry_ppm`, `flash.read_retry_max`)
//! When a sense returns more raw bit errors than the ECC decodes, the firmware reads the page
//! again at shifted read-reference voltages (read retry), each retry a further command and
//! tR on the die (drawn as above), until one decodes or the retry table (`read_retry_max`
//! entries) is used up. Each sense fails independently with probability `read_retry_ppm`
//! (parts per million), so retries per read are geometric. Worked example (`zssd`, 100 ppm):
//! one read in 10,000 takes a second sense, 3.1 µs longer; in a 200,000-read QD1 run about 20
//! do, so the p99.99 and p99.999 carry a retry and the mean moves by 0.3 ns. Counted in
//! `FlashStats::read_retries`. The magnitudes and their sources are on
//! `config::READ_RETRY_PPM`.
//!
//! ## What it leaves out
//! Cache-read and cache-program pipelining; per-plane address restrictions of multi-plane
//! operations; the ECC decoder's own time and its iteration count (in the controller's
//! constant `firmware_ns`); retry rates that grow with a block's wear, retention and read
//! disturb (every sense fails with one probability); blocks that go bad during a run.

use std::collections::VecDeque;

use engine::rng::{below, chance};
use engine::{stream, SimRng, SimTime};

use crate::config::{CellType, DeviceConfig, QueuePolicy, Switch, MAP_UNIT_BYTES};

/// Page type of a word line position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageType {
    Lsb,
    Csb,
    Msb,
}

/// The geometry as the FTL sees it, derived from the flash config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub luns: u32,
    /// Physical channels, and how many of them each LUN uses at once (1, or 2 when paired).
    pub channels: u32,
    pub channels_per_lun: u32,
    /// Effective planes per LUN (after ganging small pages).
    pub planes: u32,
    /// 4 KiB units per LUN page.
    pub page_units: u32,
    pub pages_per_block: u32,
    /// Superblocks (a block index across the planes of a LUN) per LUN.
    pub superblocks_per_lun: u32,
    pub cell: CellType,
}

impl Geometry {
    pub fn new(config: &DeviceConfig) -> Geometry {
        let f = &config.flash;
        let channels_per_lun = if f.super_channel == Switch::On { 2 } else { 1 };
        let lun_page_bytes = f.page_bytes as u64 * channels_per_lun as u64;
        let gang = if lun_page_bytes < MAP_UNIT_BYTES {
            (MAP_UNIT_BYTES / lun_page_bytes) as u32
        } else {
            1
        };
        let luns = f.channels / channels_per_lun * f.packages_per_channel * f.dies_per_package;
        Geometry {
            luns,
            channels: f.channels,
            channels_per_lun,
            planes: f.planes_per_die / gang,
            page_units: ((lun_page_bytes * gang as u64) / MAP_UNIT_BYTES) as u32,
            pages_per_block: f.pages_per_block,
            superblocks_per_lun: f.blocks_per_plane,
            cell: f.cell,
        }
    }

    /// Units in one row (one multi-plane program).
    pub fn row_units(&self) -> u32 {
        self.planes * self.page_units
    }

    /// Units in one superblock.
    pub fn superblock_units(&self) -> u32 {
        self.row_units() * self.pages_per_block
    }

    pub fn total_units(&self) -> u64 {
        self.luns as u64 * self.superblocks_per_lun as u64 * self.superblock_units() as u64
    }

    /// The first physical channel of a LUN. LUNs are numbered channel-first, so consecutive
    /// LUNs sit on different channels (striping spreads neighbouring writes across channels).
    pub fn first_channel(&self, lun: u32) -> u32 {
        let channel_groups = self.channels / self.channels_per_lun;
        (lun % channel_groups) * self.channels_per_lun
    }

    /// Page type of page `page` of a block: word lines hold LSB, CSB, MSB pages in turn.
    pub fn page_type(&self, page: u32) -> PageType {
        match (self.cell, page as usize % self.cell.page_types()) {
            (CellType::Slc, _) | (_, 0) => PageType::Lsb,
            (CellType::Mlc, _) => PageType::Msb,
            (CellType::Tlc, 1) => PageType::Csb,
            (CellType::Tlc, _) => PageType::Msb,
        }
    }
}

/// What a flash operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Program,
    Erase,
}

/// Who asked for an operation; tells the device what to do when it finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpOrigin {
    /// A host read miss (or prefetch) of one unit: `lpn`.
    HostRead {
        lpn: u32,
    },
    /// A prefetch read of one unit queued behind demand reads (`cache.prefetch = "ghost"`;
    /// "Prefetch reads behind demand reads" above). [`Flash::promote`] makes it a `HostRead`
    /// when a demand read comes to wait for it.
    Prefetch {
        lpn: u32,
    },
    /// Write-back of buffered units: index of the row record in the device.
    Evict {
        row: u32,
    },
    GcRead,
    GcProgram,
    /// The last operation of a GC job: erases superblock `superblock` of the LUN.
    GcErase {
        superblock: u32,
    },
}

impl OpOrigin {
    fn is_host_read(self) -> bool {
        matches!(self, OpOrigin::HostRead { .. })
    }
    fn is_gc(self) -> bool {
        matches!(
            self,
            OpOrigin::GcRead | OpOrigin::GcProgram | OpOrigin::GcErase { .. }
        )
    }
}

/// One operation on one LUN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashOp {
    pub kind: OpKind,
    /// Page index within the block (sets the page type); 0 for erases.
    pub page: u32,
    /// 4 KiB units moved over the channel(s).
    pub units: u32,
    pub origin: OpOrigin,
}

/// Which phase of its current operation a LUN's pending event ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The die's array work (tR, tPROG, tBERS) ends.
    Array,
    /// A read's data transfer out over the channel ends.
    Transfer,
    /// The channel of LUN `lun` may be free for the sensed prefetch read that has waited for
    /// it longest ("Prefetch reads behind demand reads" above). Not a LUN's phase: `lun` is
    /// the lowest LUN on the channel and `generation` is 0 (one is pending per channel at
    /// most; it is never stale, it looks again).
    ChannelWake,
}

/// An event the flash asks the device to schedule; stale ones are recognised by `generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashEvent {
    pub lun: u32,
    pub generation: u32,
    pub phase: Phase,
}

#[derive(Clone, Copy, Debug)]
struct Active {
    op: FlashOp,
    /// When the array phase ends (programs: after their transfer in).
    array_end: SimTime,
    /// Programs: when the transfer in ends (suspend is possible only after it). Reads: when
    /// the transfer out ends, once it is under way (before, their start).
    transfer_end: SimTime,
}

#[derive(Clone, Copy, Debug)]
struct Suspended {
    op: FlashOp,
    remaining_ns: u64,
}

#[derive(Default)]
struct Lun {
    active: Option<Active>,
    suspended: Option<Suspended>,
    generation: u32,
    host_reads: VecDeque<(u64, FlashOp)>,
    /// `OpOrigin::Prefetch` reads, served when no demand read waits.
    prefetch_reads: VecDeque<(u64, FlashOp)>,
    others: VecDeque<(u64, FlashOp)>,
    busy_ns: u64,
    busy_since: SimTime,
}

impl Lun {
    /// No operation running, suspended or queued.
    #[inline]
    fn is_empty(&self) -> bool {
        self.active.is_none()
            && self.suspended.is_none()
            && self.host_reads.is_empty()
            && self.prefetch_reads.is_empty()
            && self.others.is_empty()
    }
}

/// Counters of flash work.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FlashStats {
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
    pub units_read: u64,
    pub units_programmed: u64,
    pub suspends: u64,
    /// Host reads that arrived at a LUN busy with a program or erase (suspended or not): the
    /// reads that met a busy die.
    pub reads_met_program_or_erase: u64,
    /// Sum over LUNs of the time they were busy.
    pub lun_busy_ns: u64,
    /// Senses repeated because the first did not decode (read retry).
    pub read_retries: u64,
}

/// Timing parameters in the form the scheduler uses.
struct Timing {
    read_ns: [u64; 3],
    program_ns: [u64; 3],
    erase_ns: u64,
    cmd_addr_ns: u64,
    /// Channel time to move one unit's share (4 KiB / channels_per_lun) on one channel.
    unit_transfer_ns: u64,
    suspend: bool,
    suspend_overhead_ns: u64,
    resume_overhead_ns: u64,
    policy: QueuePolicy,
    gc_preemptible: bool,
    /// ± percent of tR each sense draws within.
    read_spread_pct: u64,
    /// Probability that a sense fails to decode, parts per million.
    read_retry_ppm: u64,
    read_retry_max: u32,
}

/// The channel(s) a group of LUNs shares (see [`Flash::groups`]).
#[derive(Clone, Default)]
struct ChannelGroup {
    /// When the group's channels are next free.
    free: SimTime,
    /// Demand reads sensing on its LUNs, and the latest end of their senses (a prefetch does
    /// not take the channel before them).
    demand_sensing: u32,
    demand_sense_until: SimTime,
    /// The LUNs whose sensed prefetch reads wait for it, in the order their senses ended, and
    /// whether its `Phase::ChannelWake` is pending.
    prefetch_waiters: VecDeque<u32>,
    wake_pending: bool,
}

/// Parts per million: the denominator of `read_retry_ppm`.
const PPM: u64 = 1_000_000;

/// All LUNs and channels of the device.
pub struct Flash {
    pub geometry: Geometry,
    timing: Timing,
    luns: Vec<Lun>,
    /// Per channel group: the `channels_per_lun` channels from a LUN's first channel, which
    /// are always reserved together and so are free at the same time (one entry, no loop
    /// over the pair).
    groups: Vec<ChannelGroup>,
    /// Each LUN's channel group (its first channel / `channels_per_lun`; looked up: it is
    /// asked several times per operation, and computing it divides).
    lun_group: Vec<u32>,
    next_seq: u64,
    /// Draws of sense times and read retries (`flash.read`).
    read_rng: SimRng,
    pub stats: FlashStats,
}

fn type_index(t: PageType) -> usize {
    match t {
        PageType::Lsb => 0,
        PageType::Csb => 1,
        PageType::Msb => 2,
    }
}

impl Flash {
    /// The flash of a run seeded 0 (see [`with_seed`](Self::with_seed)); `Ssd::with_seed`
    /// passes the run's seed.
    pub fn new(config: &DeviceConfig) -> Flash {
        Self::with_seed(config, 0)
    }

    /// The flash of the run seeded `seed`: sense times and read retries draw from
    /// `engine::stream(seed, "flash.read")`.
    pub fn with_seed(config: &DeviceConfig, seed: u64) -> Flash {
        let geometry = Geometry::new(config);
        let f = &config.flash;
        let bytes_per_sec_per_channel =
            f.interface_mt_per_sec * 1_000_000 * (f.bus_width_bits as u64) / 8;
        let share_bytes = MAP_UNIT_BYTES / geometry.channels_per_lun as u64;
        let unit_transfer_ns = (share_bytes as u128 * 1_000_000_000)
            .div_ceil(bytes_per_sec_per_channel as u128) as u64;
        let timing = Timing {
            read_ns: [f.read_ns.lsb, f.read_ns.csb, f.read_ns.msb],
            program_ns: [f.program_ns.lsb, f.program_ns.csb, f.program_ns.msb],
            erase_ns: f.erase_ns,
            cmd_addr_ns: f.cmd_addr_ns,
            unit_transfer_ns,
            suspend: f.suspend == Switch::On,
            suspend_overhead_ns: f.suspend_overhead_ns,
            resume_overhead_ns: f.resume_overhead_ns,
            policy: f.queue_policy,
            gc_preemptible: config.ftl.gc_preemptible,
            read_spread_pct: u64::from(f.read_spread_pct),
            read_retry_ppm: u64::from(f.read_retry_ppm),
            read_retry_max: f.read_retry_max,
        };
        let luns = (0..geometry.luns).map(|_| Lun::default()).collect();
        let groups =
            vec![ChannelGroup::default(); (geometry.channels / geometry.channels_per_lun) as usize];
        let lun_group = (0..geometry.luns)
            .map(|lun| geometry.first_channel(lun) / geometry.channels_per_lun)
            .collect();
        Flash {
            geometry,
            lun_group,
            timing,
            luns,
            groups,
            next_seq: 0,
            read_rng: stream(seed, "flash.read"),
            stats: FlashStats::default(),
        }
    }

    /// One sense of a page whose nominal read time is `tr_ns`: uniform within
    /// ± `read_spread_pct` of it (integer nanoseconds; the mean is `tr_ns`).
    fn sense_ns(&mut self, tr_ns: u64) -> u64 {
        let spread_ns = tr_ns * self.timing.read_spread_pct / 100;
        if spread_ns == 0 {
            return tr_ns;
        }
        tr_ns - spread_ns + below(&mut self.read_rng, 2 * spread_ns + 1)
    }

    /// The die's array time of one read: its first sense, and one command and sense more for
    /// each retry (see the essay, *Read retry*).
    fn read_array_ns(&mut self, tr_ns: u64) -> u64 {
        let cmd_addr_ns = self.timing.cmd_addr_ns;
        let mut ns = cmd_addr_ns + self.sense_ns(tr_ns);
        let mut retries = 0;
        while retries < self.timing.read_retry_max
            && self.timing.read_retry_ppm > 0
            && chance(&mut self.read_rng, self.timing.read_retry_ppm, PPM)
        {
            retries += 1;
            ns += cmd_addr_ns + self.sense_ns(tr_ns);
        }
        self.stats.read_retries += u64::from(retries);
        ns
    }

    /// Channel time for one 4 KiB unit on one channel of a LUN.
    pub fn unit_transfer_ns(&self) -> u64 {
        self.timing.unit_transfer_ns
    }

    /// Queues `op` on `lun`; starts it (or suspends a program for it) if the LUN allows.
    #[inline(always)]
    pub fn submit(
        &mut self,
        now: SimTime,
        lun: u32,
        op: FlashOp,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if self.luns[lun as usize].is_empty() {
            // The only work of an idle LUN starts now, as queueing and picking it would.
            return self.start(now, lun, op, 0, events);
        }
        self.queue(now, lun, op, seq, events);
    }

    /// [`submit`](Self::submit) to a LUN with work: queues `op` (`seq` its arrival) and
    /// starts it, or suspends a program for it, if the LUN allows.
    #[inline(never)]
    fn queue(
        &mut self,
        now: SimTime,
        lun: u32,
        op: FlashOp,
        seq: u64,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) {
        let l = &mut self.luns[lun as usize];
        if op.origin.is_host_read() {
            l.host_reads.push_back((seq, op));
        } else if matches!(op.origin, OpOrigin::Prefetch { .. }) {
            // Speculative: it never suspends a program, it waits for the die.
            l.prefetch_reads.push_back((seq, op));
        } else {
            l.others.push_back((seq, op));
        }
        match l.active {
            None => self.start_next(now, lun, events),
            Some(active) if op.origin.is_host_read() => {
                self.demand_read_waits(now, lun, active, events)
            }
            Some(_) => {}
        }
    }

    /// A demand read was queued on `lun`, busy with `active`: a program or erase may be
    /// suspended for it; a prefetch read holds the die until its data leave, so its transfer
    /// goes as a demand read's (the demand read waits for it).
    fn demand_read_waits(
        &mut self,
        now: SimTime,
        lun: u32,
        active: Active,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) {
        if matches!(active.op.origin, OpOrigin::Prefetch { .. }) {
            return self.upgrade_active_prefetch(now, lun, events);
        }
        if matches!(active.op.kind, OpKind::Program | OpKind::Erase) {
            self.stats.reads_met_program_or_erase += 1;
        }
        self.maybe_suspend(now, lun, active, events)
    }

    /// Handles the end of a phase. Returns the operation if it finished.
    #[inline(always)]
    pub fn on_event(
        &mut self,
        now: SimTime,
        ev: FlashEvent,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) -> Option<FlashOp> {
        let lun = ev.lun;
        if ev.phase == Phase::ChannelWake {
            self.channel_wake(now, lun, events);
            return None;
        }
        let l = &mut self.luns[lun as usize];
        if ev.generation != l.generation {
            return None; // superseded by a suspend
        }
        let active = l
            .active
            .expect("a current flash event belongs to an active operation");
        match (active.op.kind, ev.phase) {
            (OpKind::Read, Phase::Array) => {
                let g = self.lun_group[lun as usize] as usize;
                if active.op.origin.is_host_read() {
                    self.groups[g].demand_sensing -= 1;
                }
                // A prefetch's data wait in the page register while the channel carries, or
                // is about to carry, a demand read's, or while prefetches sensed before it
                // wait: it joins the channel's waiters.
                if matches!(active.op.origin, OpOrigin::Prefetch { .. })
                    && (!self.groups[g].prefetch_waiters.is_empty() || self.channel_busy(now, g))
                {
                    self.groups[g].prefetch_waiters.push_back(lun);
                    self.schedule_wake(now, g, events);
                    return None;
                }
                // Data is in the page register: move it out over the channel(s).
                self.transfer_out(now, lun, active.op.units, events);
                None
            }
            _ => {
                let l = &mut self.luns[lun as usize];
                l.active = None;
                l.busy_ns += now - l.busy_since;
                match active.op.kind {
                    OpKind::Read => {
                        self.stats.reads += 1;
                        self.stats.units_read += active.op.units as u64;
                    }
                    OpKind::Program => {
                        self.stats.programs += 1;
                        self.stats.units_programmed += active.op.units as u64;
                    }
                    OpKind::Erase => self.stats.erases += 1,
                }
                if !l.is_empty() {
                    self.start_next(now, lun, events);
                }
                Some(active.op)
            }
        }
    }

    /// The prefetch read `lun` is busy with becomes a demand read: sensed and waiting for the
    /// channel, it takes its turn on the channel now (its pending look is superseded).
    fn upgrade_active_prefetch(
        &mut self,
        now: SimTime,
        lun: u32,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) {
        let l = &mut self.luns[lun as usize];
        let a = l
            .active
            .as_mut()
            .expect("the LUN is busy with the prefetch");
        let OpOrigin::Prefetch { lpn } = a.op.origin else {
            panic!("LUN {lun} is busy with {:?}, not a prefetch", a.op);
        };
        a.op.origin = OpOrigin::HostRead { lpn };
        if now < a.array_end {
            // Still sensing: its transfer will go as a demand read's.
            let array_end = a.array_end;
            return self.note_demand_sensing(lun, array_end);
        }
        if a.transfer_end > a.array_end {
            return; // its transfer is under way (not preempted, not repeated)
        }
        let units = a.op.units;
        l.generation = l.generation.wrapping_add(1);
        let g = self.lun_group[lun as usize] as usize;
        let waiters = &mut self.groups[g].prefetch_waiters;
        if let Some(i) = waiters.iter().position(|&w| w == lun) {
            waiters.remove(i);
        }
        self.transfer_out(now, lun, units, events);
    }

    /// Moves the sensed data of `lun`'s read out over its channel(s), after what they carry.
    #[inline(always)]
    fn transfer_out(
        &mut self,
        now: SimTime,
        lun: u32,
        units: u32,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) {
        let end = self.reserve_channels(now, lun, units);
        let l = &mut self.luns[lun as usize];
        let a = l.active.as_mut().expect("the LUN is busy with the read");
        a.transfer_end = end;
        let generation = l.generation;
        events.push((
            end,
            FlashEvent {
                lun,
                generation,
                phase: Phase::Transfer,
            },
        ));
    }

    /// Whether a prefetch may not take channel group `g` now: it carries a transfer, or a
    /// demand read on its LUNs senses (at once after a demand read whose sense ends now:
    /// its event runs first, and its transfer goes before the prefetch's).
    fn channel_busy(&self, now: SimTime, g: usize) -> bool {
        let group = &self.groups[g];
        group.free > now || group.demand_sensing > 0
    }

    /// Schedules channel group `g`'s wake, unless one is pending, for when the channel is next
    /// free and no demand read on it senses, as far as is known now.
    fn schedule_wake(&mut self, now: SimTime, g: usize, events: &mut Vec<(SimTime, FlashEvent)>) {
        let group = &mut self.groups[g];
        if std::mem::replace(&mut group.wake_pending, true) {
            return;
        }
        let at = group.free.max(group.demand_sense_until).max(now);
        // The lowest LUN on the group's channels.
        let lun = g as u32;
        debug_assert_eq!(self.lun_group[lun as usize] as usize, g);
        events.push((
            at,
            FlashEvent {
                lun,
                generation: 0,
                phase: Phase::ChannelWake,
            },
        ));
    }

    /// The wake of `lun`'s channel: the prefetch that has waited longest takes it if it is
    /// free and no demand read on it senses; if prefetches still wait, the next wake follows.
    fn channel_wake(&mut self, now: SimTime, lun: u32, events: &mut Vec<(SimTime, FlashEvent)>) {
        let g = self.lun_group[lun as usize] as usize;
        self.groups[g].wake_pending = false;
        let Some(&head) = self.groups[g].prefetch_waiters.front() else {
            return; // its waiters went as demand reads
        };
        if self.channel_busy(now, g) {
            return self.schedule_wake(now, g, events);
        }
        self.groups[g].prefetch_waiters.pop_front();
        let active = self.luns[head as usize]
            .active
            .expect("a waiting prefetch holds its die");
        debug_assert!(
            matches!(active.op.origin, OpOrigin::Prefetch { .. }) && now >= active.array_end,
            "LUN {head} waits for the channel with {active:?}"
        );
        self.transfer_out(now, head, active.op.units, events);
        if !self.groups[g].prefetch_waiters.is_empty() {
            self.schedule_wake(now, g, events);
        }
    }

    /// A demand read senses on `lun` until `array_end`.
    fn note_demand_sensing(&mut self, lun: u32, array_end: SimTime) {
        let group = &mut self.groups[self.lun_group[lun as usize] as usize];
        group.demand_sensing += 1;
        group.demand_sense_until = group.demand_sense_until.max(array_end);
    }

    /// Reserves the LUN's channel(s) from `now` for `units`; returns when the transfer ends.
    fn reserve_channels(&mut self, now: SimTime, lun: u32, units: u32) -> SimTime {
        let group = &mut self.groups[self.lun_group[lun as usize] as usize];
        let end = group.free.max(now) + self.timing.unit_transfer_ns * units as u64;
        group.free = end;
        end
    }

    fn pick_next(&mut self, lun: u32) -> Option<FlashOp> {
        if let Some(op) = self.pick_demand_or_other(lun) {
            return Some(op);
        }
        // A die with no demand read and no other work (or a suspended program, which resumes
        // first) serves its prefetch reads.
        let l = &mut self.luns[lun as usize];
        if l.suspended.is_some() {
            return None;
        }
        l.prefetch_reads.pop_front().map(|(_, op)| op)
    }

    /// The next demand read or other operation by `flash.queue_policy`, if any may start.
    fn pick_demand_or_other(&mut self, lun: u32) -> Option<FlashOp> {
        let l = &mut self.luns[lun as usize];
        let take_read = match (l.host_reads.front(), l.others.front()) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(&(read_seq, _)), Some(&(other_seq, other))) => match self.timing.policy {
                QueuePolicy::ReadFirst => true,
                QueuePolicy::Fifo => {
                    read_seq < other_seq || (self.timing.gc_preemptible && other.origin.is_gc())
                }
            },
        };
        if take_read {
            l.host_reads.pop_front().map(|(_, op)| op)
        } else {
            // A suspended operation resumes before other queued work.
            if l.suspended.is_some() {
                return None;
            }
            l.others.pop_front().map(|(_, op)| op)
        }
    }

    fn start_next(&mut self, now: SimTime, lun: u32, events: &mut Vec<(SimTime, FlashEvent)>) {
        assert!(
            self.luns[lun as usize].active.is_none(),
            "LUN {lun} starts an operation while one is active"
        );
        let op = match self.pick_next(lun) {
            Some(op) => op,
            None => {
                if let Some(s) = self.luns[lun as usize].suspended.take() {
                    self.resume(now, lun, s, events);
                }
                return;
            }
        };
        self.start(now, lun, op, 0, events);
    }

    #[inline(always)]
    fn start(
        &mut self,
        now: SimTime,
        lun: u32,
        op: FlashOp,
        extra_ns: u64,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) {
        let page_type = type_index(self.geometry.page_type(op.page));
        let begin = now + extra_ns;
        let read_array_ns = match op.kind {
            OpKind::Read => self.read_array_ns(self.timing.read_ns[page_type]),
            OpKind::Program | OpKind::Erase => 0,
        };
        let t = &self.timing;
        let (array_end, transfer_end) = match op.kind {
            OpKind::Read => (begin + read_array_ns, begin),
            OpKind::Erase => (begin + t.cmd_addr_ns + t.erase_ns, begin),
            OpKind::Program => {
                let program_ns = t.program_ns[page_type];
                let transfer_end =
                    self.reserve_channels(begin + self.timing.cmd_addr_ns, lun, op.units);
                (transfer_end + program_ns, transfer_end)
            }
        };
        if op.kind == OpKind::Read && op.origin.is_host_read() {
            self.note_demand_sensing(lun, array_end);
        }
        let l = &mut self.luns[lun as usize];
        l.generation = l.generation.wrapping_add(1);
        l.active = Some(Active {
            op,
            array_end,
            transfer_end,
        });
        l.busy_since = now;
        events.push((
            array_end,
            FlashEvent {
                lun,
                generation: l.generation,
                phase: Phase::Array,
            },
        ));
    }

    fn maybe_suspend(
        &mut self,
        now: SimTime,
        lun: u32,
        active: Active,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) {
        let t = &self.timing;
        let l = &mut self.luns[lun as usize];
        let suspendable = t.suspend
            && matches!(active.op.kind, OpKind::Program | OpKind::Erase)
            && l.suspended.is_none()
            && now >= active.transfer_end
            && now < active.array_end;
        if !suspendable {
            return;
        }
        l.suspended = Some(Suspended {
            op: active.op,
            remaining_ns: active.array_end - now,
        });
        l.active = None;
        l.busy_ns += now - l.busy_since;
        self.stats.suspends += 1;
        let read = l
            .host_reads
            .pop_front()
            .map(|(_, op)| op)
            .expect("the read that asked for the suspend is queued");
        let overhead = self.timing.suspend_overhead_ns;
        self.start(now, lun, read, overhead, events);
    }

    fn resume(
        &mut self,
        now: SimTime,
        lun: u32,
        s: Suspended,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) {
        let array_end = now + self.timing.resume_overhead_ns + s.remaining_ns;
        let l = &mut self.luns[lun as usize];
        l.generation = l.generation.wrapping_add(1);
        l.active = Some(Active {
            op: s.op,
            array_end,
            transfer_end: now,
        });
        l.busy_since = now;
        events.push((
            array_end,
            FlashEvent {
                lun,
                generation: l.generation,
                phase: Phase::Array,
            },
        ));
    }

    /// A demand read came to wait for `lpn`, whose prefetch read may still be queued on
    /// `lun`: if it is, it becomes a host read in the demand queue (keeping its place in
    /// arrival order among them) and may suspend a program as a host read does. Returns
    /// whether a queued prefetch was promoted.
    pub fn promote(
        &mut self,
        now: SimTime,
        lun: u32,
        lpn: u32,
        events: &mut Vec<(SimTime, FlashEvent)>,
    ) -> bool {
        let l = &mut self.luns[lun as usize];
        if l.active
            .is_some_and(|a| a.op.origin == OpOrigin::Prefetch { lpn })
        {
            // Sensing, or waiting for the channel: it moves its data as a demand read.
            self.upgrade_active_prefetch(now, lun, events);
            return true;
        }
        let Some(i) = l
            .prefetch_reads
            .iter()
            .position(|(_, op)| op.origin == OpOrigin::Prefetch { lpn })
        else {
            return false;
        };
        let (seq, mut op) = l.prefetch_reads.remove(i).expect("found just now");
        op.origin = OpOrigin::HostRead { lpn };
        let at = l.host_reads.partition_point(|&(s, _)| s < seq);
        l.host_reads.insert(at, (seq, op));
        match l.active {
            None => self.start_next(now, lun, events),
            Some(active) => self.demand_read_waits(now, lun, active, events),
        }
        true
    }

    /// Whether `lun` has no work queued, running or suspended.
    #[inline]
    pub fn lun_is_idle(&self, lun: u32) -> bool {
        self.luns[lun as usize].is_empty()
    }

    /// Whether a host read is queued, running or suspended-for on `lun` (the applications'
    /// reads are busy on this die: `drain.rs` keeps background eviction away from it).
    #[inline]
    pub fn lun_has_host_read(&self, lun: u32) -> bool {
        let l = &self.luns[lun as usize];
        !l.host_reads.is_empty() || l.active.is_some_and(|a| a.op.origin.is_host_read())
    }

    /// Host reads queued on `lun` plus the one running, if any (tests count them).
    pub fn host_reads_on(&self, lun: u32) -> usize {
        let l = &self.luns[lun as usize];
        let running = l
            .active
            .is_some_and(|a| matches!(a.op.origin, OpOrigin::HostRead { .. }));
        l.host_reads.len() + usize::from(running)
    }

    /// Whether any LUN has work queued, running or suspended.
    pub fn is_idle(&self) -> bool {
        (0..self.luns.len() as u32).all(|lun| self.lun_is_idle(lun))
    }

    /// Total LUN busy time so far (finished operations only).
    pub fn busy_ns(&self) -> u64 {
        self.luns.iter().map(|l| l.busy_ns).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{nvme_tlc, zssd};

    fn run(flash: &mut Flash, events: Vec<(SimTime, FlashEvent)>) -> Vec<(SimTime, FlashOp)> {
        run_counting(flash, events).0
    }

    /// [`run`], also counting the events handled: all of them, and the channel wakes.
    fn run_counting(
        flash: &mut Flash,
        mut events: Vec<(SimTime, FlashEvent)>,
    ) -> (Vec<(SimTime, FlashOp)>, usize, usize) {
        let (mut done, mut handled, mut wakes) = (Vec::new(), 0, 0);
        while !events.is_empty() {
            // Stable: events at the same time run in the order they were pushed.
            events.sort_by_key(|(t, _)| *t);
            let (t, ev) = events.remove(0);
            handled += 1;
            wakes += usize::from(ev.phase == Phase::ChannelWake);
            if let Some(op) = flash.on_event(t, ev, &mut events) {
                done.push((t, op));
            }
        }
        (done, handled, wakes)
    }

    /// Runs `events` in the order [`run`] does up to and including `until`, leaving the rest
    /// in `events` (so a test can submit more at `until`).
    fn run_until(
        flash: &mut Flash,
        events: &mut Vec<(SimTime, FlashEvent)>,
        until: SimTime,
    ) -> Vec<(SimTime, FlashOp)> {
        let mut done = Vec::new();
        events.sort_by_key(|(t, _)| *t);
        while events.first().is_some_and(|(t, _)| *t <= until) {
            let (t, ev) = events.remove(0);
            done.extend(flash.on_event(t, ev, events).map(|op| (t, op)));
            events.sort_by_key(|(t, _)| *t);
        }
        done
    }

    fn read(page: u32, lpn: u32) -> FlashOp {
        FlashOp {
            kind: OpKind::Read,
            page,
            units: 1,
            origin: OpOrigin::HostRead { lpn },
        }
    }

    fn program(page: u32, units: u32) -> FlashOp {
        FlashOp {
            kind: OpKind::Program,
            page,
            units,
            origin: OpOrigin::Evict { row: 0 },
        }
    }

    #[test]
    fn zssd_geometry_pairs_channels() {
        let g = Geometry::new(&zssd());
        assert_eq!(g.luns, 64);
        assert_eq!(g.page_units, 1);
        assert_eq!(g.planes, 8);
        assert_eq!(g.row_units(), 8);
        assert_eq!(g.first_channel(0), 0);
        assert_eq!(g.first_channel(1), 2);
        assert_eq!(g.first_channel(8), 0);
    }

    #[test]
    fn tlc_page_types_cycle() {
        let g = Geometry::new(&nvme_tlc());
        assert_eq!(g.luns, 128);
        assert_eq!(g.row_units(), 4);
        assert_eq!(
            [
                g.page_type(0),
                g.page_type(1),
                g.page_type(2),
                g.page_type(3)
            ],
            [PageType::Lsb, PageType::Csb, PageType::Msb, PageType::Lsb]
        );
    }

    /// `config` with every read taking exactly its tR (no spread, no retry).
    fn exact(mut config: DeviceConfig) -> DeviceConfig {
        config.flash.read_spread_pct = 0;
        config.flash.read_retry_ppm = 0;
        config
    }

    #[test]
    fn a_zssd_read_takes_tr_plus_a_split_transfer() {
        let mut f = Flash::new(&exact(zssd()));
        let mut ev = Vec::new();
        f.submit(SimTime::ZERO, 0, read(0, 7), &mut ev);
        let done = run(&mut f, ev);
        // 100 ns cmd + 3 µs tR + 2 KiB at 1000 MB/s (2048 ns) on each channel of the pair.
        assert_eq!(done, vec![(SimTime(100 + 3_000 + 2_048), read(0, 7))]);
    }

    #[test]
    fn reads_on_one_channel_serialize_their_transfers() {
        let mut f = Flash::new(&exact(zssd()));
        let mut ev = Vec::new();
        // LUNs 0 and 8 share channel pair 0.
        f.submit(SimTime::ZERO, 0, read(0, 1), &mut ev);
        f.submit(SimTime::ZERO, 8, read(0, 2), &mut ev);
        let done = run(&mut f, ev);
        assert_eq!(done[0].0, SimTime(5_148));
        assert_eq!(done[1].0, SimTime(5_148 + 2_048));
    }

    #[test]
    fn a_read_waits_behind_a_program_without_suspend_and_not_with_it() {
        for (suspend, expect_fast) in [(Switch::Off, false), (Switch::On, true)] {
            let mut c = exact(nvme_tlc());
            c.flash.suspend = suspend;
            let mut f = Flash::new(&c);
            let mut ev = Vec::new();
            f.submit(SimTime::ZERO, 0, program(2, 4), &mut ev); // MSB: 5 ms
            let mut done = Vec::new();
            // Let the transfer in finish, then a read arrives.
            ev.sort_by_key(|(t, _)| *t);
            let t_read = SimTime::from_us(500);
            f.submit(t_read, 0, read(0, 9), &mut ev);
            done.extend(run(&mut f, ev));
            let read_done = done
                .iter()
                .find(|(_, op)| op.kind == OpKind::Read)
                .unwrap()
                .0;
            let prog_done = done
                .iter()
                .find(|(_, op)| op.kind == OpKind::Program)
                .unwrap()
                .0;
            let read_latency = read_done - t_read;
            if expect_fast {
                assert!(
                    read_latency < 200_000,
                    "suspend: read took {read_latency} ns"
                );
                assert!(read_done < prog_done, "the program finishes after the read");
                assert_eq!(f.stats.suspends, 1);
            } else {
                assert!(
                    read_latency > 4_000_000,
                    "no suspend: read took {read_latency} ns"
                );
            }
        }
    }

    fn prefetch(page: u32, lpn: u32) -> FlashOp {
        FlashOp {
            origin: OpOrigin::Prefetch { lpn },
            ..read(page, lpn)
        }
    }

    /// When the op reading `lpn` finished.
    fn done_at(done: &[(SimTime, FlashOp)], lpn: u32) -> SimTime {
        done.iter()
            .find(|(_, op)| {
                matches!(op.origin, OpOrigin::HostRead { lpn: l } | OpOrigin::Prefetch { lpn: l } if l == lpn)
            })
            .unwrap_or_else(|| panic!("LPN {lpn} was read: {done:?}"))
            .0
    }

    /// Prefetch reads behind demand reads, on the channel: LUNs 0, 8 and 16 share channel
    /// pair 0. A demand read on LUN 0 moves its data 3,100–5,148 ns; a read on LUN 8 sensed by
    /// 3,200 and a demand read on LUN 16 sensed by 3,300 both wait for the channel. As a
    /// demand read, LUN 8's read goes first (first come, first served: done at 7,196, LUN 16's
    /// at 9,244); as a prefetch it waits for the channel to be free of anything else, and
    /// LUN 16's demand read goes first (done at 7,196, the prefetch at 9,244).
    #[test]
    fn a_prefetch_transfer_waits_for_the_demand_transfers_on_its_channel() {
        for (as_prefetch, demand_done, lun8_done) in [(false, 9_244, 7_196), (true, 7_196, 9_244)] {
            let mut f = Flash::new(&exact(zssd()));
            let mut ev = Vec::new();
            f.submit(SimTime::ZERO, 0, read(0, 1), &mut ev);
            let op = if as_prefetch {
                prefetch(0, 2)
            } else {
                read(0, 2)
            };
            f.submit(SimTime(100), 8, op, &mut ev);
            f.submit(SimTime(200), 16, read(0, 3), &mut ev);
            let done = run(&mut f, ev);
            assert_eq!(done_at(&done, 1), SimTime(5_148));
            assert_eq!(done_at(&done, 3), SimTime(demand_done), "{done:?}");
            assert_eq!(done_at(&done, 2), SimTime(lun8_done), "{done:?}");
        }
    }

    /// Channel pair 0 busy with LUN 0's demand read (LPN 1, transfer to 5,148 ns) while
    /// prefetches on LUNs 8 and 16 (LPNs 2 and 3, submitted at 100 and 200 ns) sense and then
    /// wait for it; run to 3,400 ns: the flash, its pending events and what finished so far.
    #[allow(clippy::type_complexity)]
    fn two_prefetches_waiting_behind_lun_0(
    ) -> (Flash, Vec<(SimTime, FlashEvent)>, Vec<(SimTime, FlashOp)>) {
        let mut f = Flash::new(&exact(zssd()));
        let mut ev = Vec::new();
        f.submit(SimTime::ZERO, 0, read(0, 1), &mut ev);
        f.submit(SimTime(100), 8, prefetch(0, 2), &mut ev);
        f.submit(SimTime(200), 16, prefetch(0, 3), &mut ev);
        let done = run_until(&mut f, &mut ev, SimTime(3_400));
        (f, ev, done)
    }

    /// A prefetch sensed and waiting for the channel holds its die: when a demand read is
    /// queued on that die, the prefetch's transfer takes its turn at once as a demand read's.
    /// Channel pair 0 carries LUN 0's demand transfer until 5,148 ns; prefetches on LUNs 8
    /// and 16 wait from 3,200 and 3,300. A demand read on LUN 16 at 3,400 sends LUN 16's
    /// prefetch first (5,148–7,196); the demand read senses from 7,196, LUN 8's prefetch
    /// waits for it (its sense, then its transfer at 10,296–12,344) and goes last (to 14,392).
    /// Without the upgrade LUN 8's prefetch went first and the demand read finished later.
    #[test]
    fn a_prefetch_holding_a_die_a_demand_read_waits_for_goes_as_a_demand_read() {
        let (mut f, mut ev, mut done) = two_prefetches_waiting_behind_lun_0();
        f.submit(SimTime(3_400), 16, read(1, 9), &mut ev);
        done.extend(run(&mut f, ev));
        assert_eq!(done_at(&done, 3), SimTime(7_196), "{done:?}");
        assert_eq!(done_at(&done, 9), SimTime(12_344), "{done:?}");
        assert_eq!(done_at(&done, 2), SimTime(14_392), "{done:?}");
    }

    /// Sensed prefetches waiting for one channel go in the order their senses ended, one
    /// channel wake each. Channel pair 0 carries LUN 0's demand transfer until 5,148 ns;
    /// prefetches on its other seven LUNs, submitted from LUN 56 down to LUN 8 at 100 ns
    /// intervals, sense until 3,200 … 3,800 and then wait. They leave in that order, one
    /// 2,048 ns transfer after another: the k-th (from 0) done at 5,148 + (k + 1) × 2,048.
    /// Events: an array end and a transfer end per read, and one wake per waiting prefetch
    /// (the first at 5,148, each served one scheduling the next): 8 + 8 + 7.
    #[test]
    fn waiting_prefetches_take_the_channel_in_sense_order_one_wake_each() {
        let mut f = Flash::new(&exact(zssd()));
        let mut ev = Vec::new();
        f.submit(SimTime::ZERO, 0, read(0, 1), &mut ev);
        let luns = [56, 48, 40, 32, 24, 16, 8];
        for (k, lun) in luns.into_iter().enumerate() {
            let k = k as u32;
            f.submit(
                SimTime(100 * u64::from(k + 1)),
                lun,
                prefetch(0, 10 + k),
                &mut ev,
            );
        }
        let (done, handled, wakes) = run_counting(&mut f, ev);
        assert_eq!(done_at(&done, 1), SimTime(5_148));
        for k in 0..luns.len() as u32 {
            let expect = SimTime(5_148 + (u64::from(k) + 1) * 2_048);
            assert_eq!(done_at(&done, 10 + k), expect, "{done:?}");
        }
        assert_eq!((wakes, handled), (7, 23), "{done:?}");
        assert!(f.groups[0].prefetch_waiters.is_empty() && !f.groups[0].wake_pending);
        assert!(f.is_idle());
    }

    /// A sensed prefetch a demand read comes to wait for leaves its channel's waiters: LUN
    /// 8's and LUN 16's prefetches wait for channel pair 0 (LUN 0's demand transfer, to
    /// 5,148 ns); promoted at 3,400, LUN 8's goes at once (5,148–7,196) and only LUN 16's
    /// waits, for the channel's next wake (7,196–9,244). Had LUN 8 stayed in the list, the
    /// wake would find its die idle and send its data a second time.
    #[test]
    fn an_upgraded_prefetch_leaves_the_channel_waiters() {
        let (mut f, mut ev, mut done) = two_prefetches_waiting_behind_lun_0();
        assert_eq!(f.groups[0].prefetch_waiters, [8, 16]);
        assert!(f.promote(SimTime(3_400), 8, 2, &mut ev));
        assert_eq!(f.groups[0].prefetch_waiters, [16]);
        done.extend(run(&mut f, ev));
        assert_eq!(done_at(&done, 2), SimTime(7_196), "{done:?}");
        assert_eq!(done_at(&done, 3), SimTime(9_244), "{done:?}");
        assert_eq!((done.len(), f.stats.reads), (3, 3), "{done:?}");
    }

    /// A demand read queued on a die whose prefetch is moving its data waits for that
    /// transfer; it is not sent again. LUN 0's prefetch senses to 3,100 and moves its data
    /// 3,100–5,148; a demand read on LUN 0 at 4,000 then senses 5,148–8,248 and is done at
    /// 10,296 (with the transfer repeated, 7,196 and 12,344).
    #[test]
    fn a_demand_read_behind_a_prefetch_transfer_does_not_repeat_it() {
        let mut f = Flash::new(&exact(zssd()));
        let mut ev = Vec::new();
        f.submit(SimTime::ZERO, 0, prefetch(0, 2), &mut ev);
        let mut done = run_until(&mut f, &mut ev, SimTime(4_000));
        f.submit(SimTime(4_000), 0, read(1, 9), &mut ev);
        done.extend(run(&mut f, ev));
        assert_eq!(done_at(&done, 2), SimTime(5_148), "{done:?}");
        assert_eq!(done_at(&done, 9), SimTime(10_296), "{done:?}");
    }

    /// Prefetch reads behind demand reads, on the die: behind a running read, a prefetch
    /// queued before a demand read runs after it; promoted (a demand read came to wait for
    /// its data) it keeps its place among the demand reads and runs first. A prefetch never
    /// suspends a program, a demand read does.
    #[test]
    fn a_prefetch_waits_on_its_die_for_demand_reads_unless_promoted() {
        for promote in [false, true] {
            let mut f = Flash::new(&exact(zssd()));
            let mut ev = Vec::new();
            f.submit(SimTime::ZERO, 0, read(0, 1), &mut ev);
            f.submit(SimTime(10), 0, prefetch(1, 2), &mut ev);
            f.submit(SimTime(20), 0, read(2, 3), &mut ev);
            if promote {
                assert!(f.promote(SimTime(30), 0, 2, &mut ev));
                assert!(!f.promote(SimTime(30), 0, 2, &mut ev), "once");
            }
            let done = run(&mut f, ev);
            let (prefetch_at, demand_at) = (done_at(&done, 2), done_at(&done, 3));
            assert_eq!(prefetch_at < demand_at, promote, "{done:?}");
        }
        let mut c = exact(nvme_tlc());
        c.flash.suspend = Switch::On;
        let mut f = Flash::new(&c);
        let mut ev = Vec::new();
        f.submit(SimTime::ZERO, 0, program(2, 4), &mut ev); // MSB: 5 ms
        f.submit(SimTime::from_us(500), 0, prefetch(0, 9), &mut ev);
        let done = run(&mut f, ev);
        assert_eq!(f.stats.suspends, 0);
        assert!(done_at(&done, 9) > done[0].0, "after the program: {done:?}");
    }

    /// Device times of `n` QD1 reads of LUN 0, one after another (each on an idle die and
    /// channel pair: the array time plus the 2,048 ns transfer).
    fn qd1_read_times(config: &DeviceConfig, seed: u64, n: u32) -> (Vec<u64>, FlashStats) {
        let mut f = Flash::with_seed(config, seed);
        let mut now = SimTime::ZERO;
        let times = (0..n)
            .map(|i| {
                let mut ev = Vec::new();
                f.submit(now, 0, read(i % 1024, i), &mut ev);
                let (done, _) = run(&mut f, ev)[0];
                let took = done - now;
                now = done;
                took
            })
            .collect();
        (times, f.stats.clone())
    }

    /// ± 10 % on zssd's 3 µs: every read between 2.7 and 3.3 µs of sense (plus 100 ns of
    /// command and 2,048 ns of transfer), the mean within 10 ns of 3 µs, both ends reached.
    #[test]
    fn sense_times_spread_evenly_around_tr() {
        let mut c = exact(zssd());
        c.flash.read_spread_pct = 10;
        let n = 20_000;
        let (times, stats) = qd1_read_times(&c, 1, n);
        let fixed = 100 + 2_048;
        let (lo, hi) = (fixed + 2_700, fixed + 3_300);
        assert!(
            times.iter().all(|t| (lo..=hi).contains(t)),
            "outside [{lo}, {hi}]"
        );
        let mean = times.iter().sum::<u64>() / u64::from(n);
        assert!(mean.abs_diff(fixed + 3_000) < 10, "mean {mean} ns");
        assert!(*times.iter().min().unwrap() < lo + 30 && *times.iter().max().unwrap() > hi - 30);
        assert_eq!(stats.read_retries, 0);
    }

    /// At 5 % per sense, retries per read are geometric: 5.26 % on average, each a further
    /// 100 ns command and 3 µs sense; a read with k retries takes k × 3.1 µs more.
    #[test]
    fn read_retries_come_at_their_rate_and_cost_a_sense_each() {
        let mut c = exact(zssd());
        c.flash.read_retry_ppm = 50_000;
        c.flash.read_retry_max = 8;
        let n = 40_000;
        let (times, stats) = qd1_read_times(&c, 2, n);
        let base = 100 + 3_000 + 2_048;
        assert!(times
            .iter()
            .all(|t| t >= &base && (t - base) % 3_100 == 0 && (t - base) / 3_100 <= 8));
        let retried: u64 = times.iter().map(|t| (t - base) / 3_100).sum();
        assert_eq!(retried, stats.read_retries);
        // p/(1 − p) = 0.0526 retries per read: 2,105 expected, sd ≈ 47.
        assert!(
            (1_900..2_300).contains(&stats.read_retries),
            "{} retries in {n} reads",
            stats.read_retries
        );
        assert!(
            times.iter().any(|t| t - base == 2 * 3_100),
            "some reads retry twice"
        );
        // The cap holds: at 90 % per sense most reads would retry more than twice.
        c.flash.read_retry_ppm = 900_000;
        c.flash.read_retry_max = 2;
        let (times, _) = qd1_read_times(&c, 2, 1_000);
        assert!(times.iter().all(|t| t - base <= 2 * 3_100));
    }

    /// The draws follow the seed: the same seed gives the same read times, another seed others.
    #[test]
    fn read_times_are_fixed_by_the_seed() {
        let c = zssd();
        assert!(c.flash.read_spread_pct > 0 && c.flash.read_retry_ppm > 0);
        let (a, _) = qd1_read_times(&c, 7, 2_000);
        let (b, _) = qd1_read_times(&c, 7, 2_000);
        let (other, _) = qd1_read_times(&c, 8, 2_000);
        assert_eq!(a, b);
        assert_ne!(a, other);
    }
}
