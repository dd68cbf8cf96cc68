//! The block layer (blk-mq): bios, requests, plugging, merging, software and hardware queues,
//! I/O schedulers.
//!
//! ## What it models
//! A *bio* is one contiguous piece of I/O some owner wants done (a direct I/O of a thread, a
//! run of pages for the page cache, a write-back run). Submitting a bio (`blk.bio_submit_ns`
//! of CPU in the submitter's context) first tries to **merge** it into a request that has not
//! gone to the driver yet — the submitter's plug list, then its hardware queue's pending
//! requests, newest first, at most `merge_scan_requests` of them, each comparison costing
//! `merge_check_ns` — when the request is adjacent (back or front), of the same direction and
//! class, and the merged request stays within `max_request_bytes`. Otherwise the bio becomes a
//! new *request*, which needs one of the hardware queue's `nr_requests` (the submitter sleeps
//! until one frees up). New requests collect in the submitter's **plug** (up to
//! `plug_max_requests`) and go to the queue together when the submitter finishes its batch.
//!
//! Each core has a software queue feeding its hardware queue (one per NVMe SQ; a core has an
//! interrupt-driven one and a polled one). **Dispatch** (`dispatch_ns` per request) takes a
//! request from the queue when a driver tag (an SQ slot) is free, in the order the scheduler
//! chooses: `none` — FIFO; `mq-deadline` — reads first, but a waiting write goes after
//! `deadline_writes_starved` read batches or once it has waited `deadline_write_expire_ns`;
//! `kyber` — reads and writes each have an in-flight limit (`kyber_read_depth`,
//! `kyber_write_depth`) so writes cannot crowd reads out of the device queue. A request that
//! cannot be dispatched waits; the completion of another request on the same hardware queue
//! runs the queue again (from the kblockd worker of that queue's core, `kblockd`).
//!
//! With `nvme.lc_queue` every hardware queue has a latency-critical twin (its own tags,
//! request pool and software queue, on an urgent SQ sharing the CQ): a latency-critical bio is
//! merged and allocated on the twin, and whoever runs a queue runs the twin first.
//!
//! Worked example: a flusher writing 32 contiguous dirty pages as 32 one-page bios under a
//! plug: the first bio becomes a request, the next 31 each back-merge into it after one
//! comparison (31 × 200 ns of merge search on arm8); the plug flushes one 128 KiB request → one
//! NVMe command instead of 32 (`merges = "off"` gives 32 commands).
//!
//! Every bio and request carries its process's class (`IoClass`) from the owner down to the
//! NVMe command. With `attr = "on"` the kernel knows it and merges never mix classes; with it
//! off the class is only the reports' label: merges ignore it (stock Linux) and the driver
//! leaves the command's reserved field empty (`nvme`).
//!
//! ## What it leaves out
//! Request splitting beyond `max_request_bytes` at bio creation (callers split), sector-sorted
//! dispatch inside mq-deadline (FIFO per direction), kyber's latency-target feedback (fixed
//! depths), timeouts and requeues, tag sharing between queues.
//!
//! Config keys: `blk.*`.

use std::collections::VecDeque;

use engine::{IoClass, IoOp, SimTime};
use serde::{Deserialize, Serialize};

use crate::config::{BlkConfig, Merges, Scheduler};
use crate::pagecache::NIL;

/// Who gets told when a bio completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BioOwner {
    /// A thread's synchronous direct I/O.
    Direct { thread: u32 },
    /// Page-cache read of `pages` pages (sync or read-ahead).
    PageRead {
        file: u32,
        first_page: u64,
        pages: u32,
    },
    /// Write-back of `pages` dirty pages.
    Writeback {
        file: u32,
        first_page: u64,
        pages: u32,
    },
    /// An asynchronous fio I/O (libaio/io_uring) of a thread.
    FioAsync { thread: u32, slot: u32 },
}

#[derive(Clone, Copy, Debug)]
pub struct Bio {
    pub op: IoOp,
    pub class: IoClass,
    pub sector: u64,
    pub sectors: u32,
    pub owner: BioOwner,
    /// Request the bio belongs to, `NIL` before submission.
    pub req: u32,
    /// Next bio of the same request.
    pub next: u32,
    /// First waiter (threads waiting for this bio's pages).
    pub waiters: u32,
    pub submitted_at: SimTime,
    pub live: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqState {
    Free,
    Plugged,
    Queued,
    /// Taken by a dispatcher: dispatch and driver work in progress.
    Dispatching,
    /// The command is in the device.
    InDevice,
    /// The CQE arrived; completion in progress.
    Completing,
}

/// Which kind of hardware queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// Completions raise MSI-X interrupts.
    Interrupt,
    /// Interrupts masked; the submitting thread polls.
    Poll,
}

#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub op: IoOp,
    pub class: IoClass,
    pub sector: u64,
    pub sectors: u32,
    pub hctx: u16,
    pub first_bio: u32,
    pub last_bio: u32,
    pub bios: u32,
    pub state: ReqState,
    /// Write-back wave hint: pages in the wave (0 = none).
    pub wave_pages: u32,
    /// When its first bio's submission began (block-layer entry).
    pub t_submit: SimTime,
    /// When it entered the queue (plug flush or direct insert).
    pub t_queued: SimTime,
    pub t_dispatch: SimTime,
    pub t_driver: SimTime,
    pub t_doorbell: SimTime,
    pub t_cqe: SimTime,
    pub t_complete: SimTime,
}

/// One hardware dispatch queue (and its software queue).
#[derive(Clone, Debug)]
pub struct Hctx {
    core: u16,
    kind: QueueKind,
    sqid: u16,
    /// The hardware queue whose CQ this one's completions land on: itself, or for a
    /// latency-critical twin (`nvme.lc_queue`) the queue it shares the CQ with.
    cq: u16,
    /// Its latency-critical twin SQ (`nvme.lc_queue`), or `NO_HCTX`.
    lc_twin: u16,
    /// Driver tags (SQ slots usable at once: depth − 1).
    tags: u32,
    tags_used: u32,
    nr_requests: u32,
    allocated: u32,
    fifo: VecDeque<u32>,
    reads: VecDeque<u32>,
    writes: VecDeque<u32>,
    starved: u32,
    reads_in_flight: u32,
    writes_in_flight: u32,
    /// Threads sleeping for a request allocation.
    alloc_waiters: VecDeque<u32>,
    /// A dispatcher left requests queued for want of a tag or a scheduler slot: the next
    /// completion on the queue runs it again (`BLK_MQ_S_SCHED_RESTART`, `kblockd`).
    restart: bool,
    /// Poll queues: CQEs posted and not reaped yet.
    posted: Vec<u32>,
    /// Poll queues: mean latency of recent polled requests (EWMA, ns), for hybrid polling.
    poll_mean_ns: u64,
    /// Poll queues with a shared poll/submission lock (`jitter.poll_lock`): when the last
    /// submitter's or reaper's hold ends.
    lock_free_at: SimTime,
    /// Poll queues with a shared lock: threads that started spinning on the CQ (a thread
    /// leaves at its next poll check; a preempted one is skipped while off its core).
    spinners: Vec<u32>,
}

/// No hardware queue.
pub const NO_HCTX: u16 = u16::MAX;

impl Hctx {
    /// Requests waiting in its software queue (and scheduler queues) for dispatch.
    pub fn queued(&self) -> usize {
        self.fifo.len() + self.reads.len() + self.writes.len()
    }

    /// The core it belongs to (its interrupts and deferred runs go there).
    pub fn core(&self) -> u16 {
        self.core
    }

    pub fn kind(&self) -> QueueKind {
        self.kind
    }

    /// The NVMe submission queue its requests go to.
    pub fn sqid(&self) -> u16 {
        self.sqid
    }

    /// The hardware queue whose CQ its completions land on (itself, or a twin's base queue).
    pub fn cq(&self) -> u16 {
        self.cq
    }

    /// The driver holds at most a tag per SQ slot: the SQ never overflows (checked as a
    /// command leaves).
    pub fn assert_within_depth(&self) {
        assert!(
            self.tags_used <= self.tags,
            "SQ {} holds {} commands: at most {} (queue depth − 1)",
            self.sqid,
            self.tags_used,
            self.tags
        );
    }

    /// Thread `t` sleeps until a request of this queue is freed (`complete_request` wakes the
    /// oldest sleeper).
    pub fn wait_for_request(&mut self, t: u32) {
        self.alloc_waiters.push_back(t);
    }

    /// The oldest thread sleeping for a request of this queue, which a freed request wakes.
    pub fn next_request_waiter(&mut self) -> Option<u32> {
        self.alloc_waiters.pop_front()
    }

    /// A dispatcher left requests queued: the next completion runs the queue again.
    pub fn mark_restart(&mut self) {
        self.restart = true;
    }

    /// Whether a dispatcher asked for a restart since the last call (and clears the ask).
    pub fn take_restart(&mut self) -> bool {
        std::mem::take(&mut self.restart)
    }

    /// Poll queues: a CQE for request `r` is posted for a poller to reap.
    pub fn post(&mut self, r: u32) {
        self.posted.push(r);
    }

    /// Poll queues: whether CQEs wait to be reaped.
    pub fn has_posted(&self) -> bool {
        !self.posted.is_empty()
    }

    /// Poll queues: a reaper takes every posted CQE into `reap` (empty, its buffer kept).
    pub fn reap_posted(&mut self, reap: &mut Vec<u32>) {
        debug_assert!(reap.is_empty(), "a reaper starts with nothing reaped");
        std::mem::swap(reap, &mut self.posted);
    }

    /// Poll queues: mean latency of recent polled requests, ns (hybrid polling's sleep).
    pub fn poll_mean_ns(&self) -> u64 {
        self.poll_mean_ns
    }

    /// Poll queues: the mean after a polled request's completion (`nvme::ewma`).
    pub fn set_poll_mean_ns(&mut self, mean_ns: u64) {
        self.poll_mean_ns = mean_ns;
    }

    /// Shared poll lock: thread `t` spins on the CQ (once in the list however often it
    /// starts).
    pub fn add_spinner(&mut self, t: u32) {
        if !self.spinners.contains(&t) {
            self.spinners.push(t);
        }
    }

    /// Shared poll lock: thread `t` stopped spinning.
    pub fn remove_spinner(&mut self, t: u32) {
        self.spinners.retain(|&s| s != t);
    }

    /// Shared poll lock: the threads that started spinning on the CQ, in the order they did.
    pub fn spinners(&self) -> &[u32] {
        &self.spinners
    }

    /// Shared poll lock: a reaper at `now` takes the lock for `hold_ns`, or is told how long
    /// the holder keeps it (`Err(wait_ns)`; it has not taken it).
    pub fn take_poll_lock(&mut self, now: SimTime, hold_ns: u64) -> Result<(), u64> {
        if self.lock_free_at > now {
            return Err(self.lock_free_at - now);
        }
        self.lock_free_at = now + hold_ns;
        Ok(())
    }

    /// Shared poll lock: when its last holder lets it go.
    pub fn poll_lock_free_at(&self) -> SimTime {
        self.lock_free_at
    }

    /// Shared poll lock: a submitter holds it from `from` (when its holders let it go) for
    /// `hold_ns`.
    pub fn hold_poll_lock(&mut self, from: SimTime, hold_ns: u64) {
        debug_assert!(
            from >= self.lock_free_at,
            "the lock is taken once it is free"
        );
        self.lock_free_at = from + hold_ns;
    }
}

#[derive(Clone, Copy, Debug)]
struct Waiter {
    thread: u32,
    next: u32,
}

/// Block-layer counters of one class.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BlkClassStats {
    pub bios: u64,
    /// Bios merged into an existing request (adjacent).
    pub merged_bios: u64,
    /// Bios that rode along with a request of the same range.
    pub same_lba_merges: u64,
    /// Requests dispatched = NVMe commands.
    pub requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Bios submitted cold (`blk.cold_submit_ns`: another process's user code ran on a core
    /// sharing the submitter's last-level cache since its last submission); left out of
    /// reports while 0.
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub cold_bios: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BlkStats {
    pub latency_critical: BlkClassStats,
    pub throughput: BlkClassStats,
    /// Times a submitter slept for a request allocation.
    pub allocation_waits: u64,
    /// Requests dispatched by a deferred queue run (the kblockd worker, `kblockd`).
    pub deferred_dispatches: u64,
    /// Times a kblockd worker was woken to run a queue (omitted at 0).
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub kblockd_runs: u64,
    /// `blk.bypass_lc`: latency-critical requests sent straight to the driver (omitted at 0).
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub bypassed: u64,
    /// Bypasses that found a queued request on the same LBAs and took it along (hazard rule).
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub bypass_hazards: u64,
}

impl BlkStats {
    pub fn class_mut(&mut self, c: IoClass) -> &mut BlkClassStats {
        match c {
            IoClass::LatencyCritical => &mut self.latency_critical,
            IoClass::Throughput => &mut self.throughput,
        }
    }
}

pub struct Blk {
    cfg: BlkConfig,
    pub bios: Vec<Bio>,
    free_bios: Vec<u32>,
    pub reqs: Vec<Request>,
    free_reqs: Vec<u32>,
    waiters: Vec<Waiter>,
    free_waiters: Vec<u32>,
    hctxs: Vec<Hctx>,
    stats: BlkStats,
    bios_live: u64,
    reqs_live: u64,
    /// Poll queues in use (cores map onto them round-robin).
    poll_queues: u16,
    cores: u16,
    /// The kernel knows the classes (`attr = "on"`): merges keep them apart. Without it a
    /// merge may join bios of different processes' classes, as stock Linux does; the request
    /// keeps its first bio's class as its label for the reports.
    classes: bool,
}

/// What happened to a submitted bio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// Merged into an existing request.
    Merged { req: u32 },
    /// Became a new request (in the plug).
    NewRequest { req: u32 },
    /// No request could be allocated: the submitter must wait.
    NoRequest,
}

impl Blk {
    /// The block layer's counters so far.
    pub fn stats(&self) -> &BlkStats {
        &self.stats
    }

    /// Counts a bio of `class` merged into a request (`kind`: riding along on the same range,
    /// or adjacent / covering).
    pub(crate) fn count_merge(&mut self, class: IoClass, kind: MergeKind) {
        let s = self.stats.class_mut(class);
        s.bios += 1;
        match kind {
            MergeKind::SameLba => s.same_lba_merges += 1,
            _ => s.merged_bios += 1,
        }
    }

    /// Request `r` carries write-back's victim hint: the `pages` its wave is about to write
    /// (`pagecache.victim_hint`), sent with its command (`writeback`'s essay).
    pub(crate) fn carry_wave_hint(&mut self, r: u32, pages: u32) {
        self.reqs[r as usize].wave_pages = pages;
    }

    /// Counts a bio of `class` submitted cold (`blk.cold_submit_ns`, `blk_submit`'s essay).
    pub(crate) fn count_cold_bio(&mut self, class: IoClass) {
        self.stats.class_mut(class).cold_bios += 1;
    }

    /// Counts a request dispatched by a deferred queue run (the kblockd worker, `kblockd`).
    pub(crate) fn count_deferred_dispatch(&mut self) {
        self.stats.deferred_dispatches += 1;
    }

    /// Counts a kblockd worker woken to run a queue.
    pub(crate) fn count_kblockd_run(&mut self) {
        self.stats.kblockd_runs += 1;
    }

    /// Counts a bypass that found a queued request on the same LBAs and took it along
    /// (`blk_bypass`'s hazard rule).
    pub(crate) fn count_bypass_hazard(&mut self) {
        self.stats.bypass_hazards += 1;
    }

    /// Counts a latency-critical request sent straight to the driver (`blk.bypass_lc`).
    pub(crate) fn count_bypassed(&mut self) {
        self.stats.bypassed += 1;
    }

    /// `cores` cores, each with an interrupt and a poll hardware queue; SQ depth `depth`.
    pub fn new(cfg: &BlkConfig, cores: u16, depth: u32, nr_requests: u32) -> Blk {
        let mut hctxs = Vec::new();
        for kind in [QueueKind::Interrupt, QueueKind::Poll] {
            for core in 0..cores {
                let sqid = hctxs.len() as u16 + 1;
                hctxs.push(Hctx {
                    core,
                    kind,
                    sqid,
                    cq: sqid - 1,
                    lc_twin: NO_HCTX,
                    tags: depth - 1,
                    tags_used: 0,
                    nr_requests,
                    allocated: 0,
                    fifo: VecDeque::with_capacity(64),
                    reads: VecDeque::with_capacity(64),
                    writes: VecDeque::with_capacity(64),
                    starved: 0,
                    reads_in_flight: 0,
                    writes_in_flight: 0,
                    alloc_waiters: VecDeque::new(),
                    restart: false,
                    posted: Vec::with_capacity(64),
                    poll_mean_ns: 0,
                    lock_free_at: SimTime::ZERO,
                    spinners: Vec::new(),
                });
            }
        }
        Blk {
            cfg: cfg.clone(),
            bios: Vec::with_capacity(1024),
            free_bios: Vec::new(),
            reqs: Vec::with_capacity(1024),
            free_reqs: Vec::new(),
            waiters: Vec::with_capacity(64),
            free_waiters: Vec::new(),
            hctxs,
            stats: BlkStats::default(),
            bios_live: 0,
            reqs_live: 0,
            poll_queues: cores,
            cores,
            classes: true,
        }
    }

    /// `nvme.lc_queue`: every hardware queue gets a latency-critical twin — its own SQ (and
    /// tags and request pool) sharing the CQ of the queue it twins — and latency-critical
    /// requests go to the twin (`route`). Twins take SQ ids after the interrupt and poll
    /// queues, in the same order.
    pub fn with_lc_queues(mut self) -> Blk {
        let base = self.hctxs.len();
        for i in 0..base {
            let mut twin = self.hctxs[i].clone();
            twin.sqid = (base + i + 1) as u16;
            twin.cq = i as u16;
            twin.lc_twin = NO_HCTX;
            self.hctxs[i].lc_twin = (base + i) as u16;
            self.hctxs.push(twin);
        }
        self
    }

    /// Dispatched request `r` leaves for the device at `now` (its doorbell rings, or the
    /// accelerator takes it): returns the SQ it goes to.
    pub fn issue(&mut self, now: SimTime, r: u32) -> u16 {
        let req = &mut self.reqs[r as usize];
        assert_eq!(req.state, ReqState::Dispatching, "request {r} issued twice");
        req.state = ReqState::InDevice;
        req.t_doorbell = now;
        self.hctxs[req.hctx as usize].sqid
    }

    /// Hardware queue `h`.
    pub fn hctx(&self, h: u16) -> &Hctx {
        &self.hctxs[h as usize]
    }

    /// Hardware queue `h`, to change through its operations.
    pub fn hctx_mut(&mut self, h: u16) -> &mut Hctx {
        &mut self.hctxs[h as usize]
    }

    /// The hardware queue a request of `class` allocated from base queue `hctx` goes to:
    /// the latency-critical twin when there is one and the kernel knows the class.
    pub fn route(&self, hctx: u16, class: IoClass) -> u16 {
        let twin = self.hctxs[hctx as usize].lc_twin;
        if twin != NO_HCTX && self.classes && class == IoClass::LatencyCritical {
            twin
        } else {
            hctx
        }
    }

    /// The queues a dispatcher of base queue `hctx` runs, latency-critical twin first.
    pub fn dispatch_queues(&self, hctx: u16) -> [u16; 2] {
        [self.hctxs[hctx as usize].lc_twin, hctx]
    }

    /// Largest request (`blk.max_request_bytes`).
    pub fn max_request_bytes(&self) -> u64 {
        self.cfg.max_request_bytes
    }

    /// Whether the block layer sees the classes (`attr`); see the field.
    pub fn with_classes(mut self, on: bool) -> Blk {
        self.classes = on;
        self
    }

    /// Only the first `n` poll queues are used, cores mapped onto them round-robin (Linux's
    /// `poll_queues`; 0 keeps one per core). The others stay created and idle.
    pub fn with_poll_queues(mut self, n: u16) -> Blk {
        let cores = self.cores;
        assert!(n <= cores, "{n} poll queues for {cores} cores");
        if n > 0 {
            self.poll_queues = n;
        }
        self
    }

    /// Hardware queue of `kind` for `core`.
    pub fn hctx_of(&self, core: u16, kind: QueueKind) -> u16 {
        let cores = self.cores;
        match kind {
            QueueKind::Interrupt => core,
            QueueKind::Poll => cores + core % self.poll_queues,
        }
    }

    /// Hardware queue for an SQ/CQ id.
    pub fn hctx_of_queue(&self, qid: u16) -> u16 {
        qid - 1
    }

    pub fn in_flight(&self) -> (u64, u64) {
        (self.bios_live, self.reqs_live)
    }

    /// Creates a bio (not yet submitted).
    pub fn new_bio(
        &mut self,
        op: IoOp,
        class: IoClass,
        sector: u64,
        sectors: u32,
        owner: BioOwner,
    ) -> u32 {
        assert!(
            sectors > 0 && sectors as u64 * 512 <= self.cfg.max_request_bytes,
            "bio of {sectors} sectors: expected 1 to {} (max_request_bytes)",
            self.cfg.max_request_bytes / 512
        );
        let bio = Bio {
            op,
            class,
            sector,
            sectors,
            owner,
            req: NIL,
            next: NIL,
            waiters: NIL,
            submitted_at: SimTime::ZERO,
            live: true,
        };
        self.bios_live += 1;
        match self.free_bios.pop() {
            Some(b) => {
                self.bios[b as usize] = bio;
                b
            }
            None => {
                self.bios.push(bio);
                (self.bios.len() - 1) as u32
            }
        }
    }

    /// Adds `thread` to the threads waiting for `bio`.
    pub fn add_waiter(&mut self, bio: u32, thread: u32) {
        let head = self.bios[bio as usize].waiters;
        let w = Waiter { thread, next: head };
        let id = match self.free_waiters.pop() {
            Some(i) => {
                self.waiters[i as usize] = w;
                i
            }
            None => {
                self.waiters.push(w);
                (self.waiters.len() - 1) as u32
            }
        };
        self.bios[bio as usize].waiters = id;
    }

    /// Removes and returns the waiters of `bio` into `out`.
    pub fn take_waiters(&mut self, bio: u32, out: &mut Vec<u32>) {
        let mut w = std::mem::replace(&mut self.bios[bio as usize].waiters, NIL);
        while w != NIL {
            let node = self.waiters[w as usize];
            out.push(node.thread);
            self.free_waiters.push(w);
            w = node.next;
        }
    }

    /// How many queued requests a merge search for a bio of `class` from base queue `hctx`
    /// would compare against.
    pub fn merge_candidates(&self, plug: &[u32], hctx: u16, class: IoClass) -> u32 {
        if self.cfg.merges == Merges::Off {
            return 0;
        }
        let hctx = self.route(hctx, class);
        let limit = self.cfg.merge_scan_requests as usize;
        let in_plug = plug.len().min(limit);
        let in_queue = self.hctxs[hctx as usize].queued().min(limit);
        (in_plug + in_queue) as u32
    }

    fn mergeable(&self, r: u32, b: &Bio) -> Option<MergeKind> {
        let req = &self.reqs[r as usize];
        if req.op != b.op || (self.classes && req.class != b.class) {
            return None;
        }
        if self.cfg.merges == Merges::AdjacentAndSameLba
            && req.sector == b.sector
            && req.sectors == b.sectors
        {
            return Some(MergeKind::SameLba);
        }
        let merged_bytes = (req.sectors as u64 + b.sectors as u64) * 512;
        if merged_bytes > self.cfg.max_request_bytes {
            return None;
        }
        if req.sector + req.sectors as u64 == b.sector {
            Some(MergeKind::Back)
        } else if b.sector + b.sectors as u64 == req.sector {
            Some(MergeKind::Front)
        } else {
            None
        }
    }

    pub(crate) fn queued_newest_first(&self, hctx: u16) -> impl Iterator<Item = u32> + '_ {
        let h = &self.hctxs[hctx as usize];
        h.fifo
            .iter()
            .rev()
            .chain(h.reads.iter().rev())
            .chain(h.writes.iter().rev())
            .copied()
    }

    /// Submits `bio` at `now` (its submission began at `started`): merge it, or allocate a
    /// request on `hctx` and add it to `plug`.
    pub fn submit_bio(
        &mut self,
        now: SimTime,
        started: SimTime,
        bio: u32,
        plug: &mut Vec<u32>,
        hctx: u16,
    ) -> SubmitOutcome {
        let b = self.bios[bio as usize];
        assert!(b.live && b.req == NIL, "bio {bio} submitted twice");
        let hctx = self.route(hctx, b.class);
        if self.cfg.merges != Merges::Off {
            let limit = self.cfg.merge_scan_requests as usize;
            let found = plug
                .iter()
                .rev()
                .take(limit)
                .copied()
                .chain(self.queued_newest_first(hctx).take(limit))
                .find_map(|r| self.mergeable(r, &b).map(|k| (r, k)));
            if let Some((r, kind)) = found {
                self.attach(r, bio, kind, started);
                self.count_merge(b.class, kind);
                return SubmitOutcome::Merged { req: r };
            }
        }
        match self.alloc_request(now, started, bio, hctx) {
            Some(r) => {
                plug.push(r);
                SubmitOutcome::NewRequest { req: r }
            }
            None => SubmitOutcome::NoRequest,
        }
    }

    /// Makes `bio` (submission began at `started`) a new request on `hctx` (state
    /// `Plugged`), or `None` when the queue's `nr_requests` are all allocated.
    pub(crate) fn alloc_request(
        &mut self,
        now: SimTime,
        started: SimTime,
        bio: u32,
        hctx: u16,
    ) -> Option<u32> {
        let b = self.bios[bio as usize];
        let h = &mut self.hctxs[hctx as usize];
        if h.allocated >= h.nr_requests {
            self.stats.allocation_waits += 1;
            return None;
        }
        h.allocated += 1;
        let req = Request {
            op: b.op,
            class: b.class,
            sector: b.sector,
            sectors: b.sectors,
            hctx,
            first_bio: bio,
            last_bio: bio,
            bios: 1,
            state: ReqState::Plugged,
            wave_pages: 0,
            t_submit: started,
            t_queued: now,
            t_dispatch: now,
            t_driver: now,
            t_doorbell: now,
            t_cqe: now,
            t_complete: now,
        };
        let r = match self.free_reqs.pop() {
            Some(r) => {
                self.reqs[r as usize] = req;
                r
            }
            None => {
                self.reqs.push(req);
                (self.reqs.len() - 1) as u32
            }
        };
        self.reqs_live += 1;
        let bm = &mut self.bios[bio as usize];
        bm.req = r;
        bm.submitted_at = started;
        self.stats.class_mut(b.class).bios += 1;
        Some(r)
    }

    pub(crate) fn attach(&mut self, r: u32, bio: u32, kind: MergeKind, started: SimTime) {
        let (sector, sectors) = {
            let b = &mut self.bios[bio as usize];
            b.req = r;
            b.submitted_at = started;
            (b.sector, b.sectors)
        };
        let req = &mut self.reqs[r as usize];
        assert!(
            matches!(req.state, ReqState::Plugged | ReqState::Queued),
            "bio {bio} merged into request {r} in state {:?}: expected Plugged or Queued",
            req.state
        );
        match kind {
            MergeKind::Back => req.sectors += sectors,
            MergeKind::Front => {
                req.sector = sector;
                req.sectors += sectors;
            }
            MergeKind::SameLba => {}
            MergeKind::Union => {
                let end = (req.sector + req.sectors as u64).max(sector + sectors as u64);
                req.sector = req.sector.min(sector);
                req.sectors = (end - req.sector) as u32;
            }
        }
        let last = req.last_bio;
        req.last_bio = bio;
        req.bios += 1;
        self.bios[last as usize].next = bio;
    }

    /// Moves a request from a plug into its hardware queue.
    pub fn insert(&mut self, now: SimTime, r: u32) {
        let req = &mut self.reqs[r as usize];
        assert_eq!(req.state, ReqState::Plugged, "request {r} inserted twice");
        req.state = ReqState::Queued;
        req.t_queued = now;
        let (op, hctx) = (req.op, req.hctx);
        let h = &mut self.hctxs[hctx as usize];
        match self.cfg.scheduler {
            Scheduler::None => h.fifo.push_back(r),
            Scheduler::MqDeadline | Scheduler::Kyber => match op {
                IoOp::Read => h.reads.push_back(r),
                _ => h.writes.push_back(r),
            },
        }
    }

    /// Takes the next request the scheduler allows to dispatch on `hctx`, with a driver tag.
    pub fn pick_dispatch(&mut self, now: SimTime, hctx: u16) -> Option<u32> {
        let cfg = &self.cfg;
        let h = &mut self.hctxs[hctx as usize];
        if h.tags_used >= h.tags {
            return None;
        }
        let r = match cfg.scheduler {
            Scheduler::None => h.fifo.pop_front(),
            Scheduler::MqDeadline => {
                let write_expired = h.writes.front().is_some_and(|&w| {
                    now.saturating_since(self.reqs[w as usize].t_queued)
                        >= cfg.deadline_write_expire_ns
                });
                match (h.reads.is_empty(), h.writes.is_empty()) {
                    (true, true) => None,
                    (false, true) => h.reads.pop_front(),
                    (true, false) => {
                        h.starved = 0;
                        h.writes.pop_front()
                    }
                    (false, false) => {
                        if write_expired || h.starved >= cfg.deadline_writes_starved {
                            h.starved = 0;
                            h.writes.pop_front()
                        } else {
                            h.starved += 1;
                            h.reads.pop_front()
                        }
                    }
                }
            }
            Scheduler::Kyber => {
                if !h.reads.is_empty() && h.reads_in_flight < cfg.kyber_read_depth {
                    h.reads.pop_front()
                } else if !h.writes.is_empty() && h.writes_in_flight < cfg.kyber_write_depth {
                    h.writes.pop_front()
                } else {
                    None
                }
            }
        }?;
        self.start_dispatch(now, r);
        Some(r)
    }

    /// Driver tags free on `hctx`.
    pub(crate) fn tags_free(&self, hctx: u16) -> u32 {
        let h = &self.hctxs[hctx as usize];
        h.tags - h.tags_used
    }

    /// Takes queued request `r` out of its hardware queue (it stays `Queued` until
    /// [`start_dispatch`](Self::start_dispatch)).
    pub(crate) fn remove_queued(&mut self, r: u32) {
        let req = &self.reqs[r as usize];
        assert_eq!(
            req.state,
            ReqState::Queued,
            "request {r} taken out of no queue"
        );
        let h = &mut self.hctxs[req.hctx as usize];
        for q in [&mut h.fifo, &mut h.reads, &mut h.writes] {
            if let Some(i) = q.iter().position(|&x| x == r) {
                q.remove(i);
                return;
            }
        }
        unreachable!("request {r} is Queued but in none of its queue's lists");
    }

    /// Request `r` (queued or plugged, and out of any queue) takes a driver tag and goes to
    /// the driver now.
    pub(crate) fn start_dispatch(&mut self, now: SimTime, r: u32) {
        let req = &mut self.reqs[r as usize];
        let h = &mut self.hctxs[req.hctx as usize];
        assert!(
            h.tags_used < h.tags,
            "request {r} dispatched on hardware queue {} with all {} tags used",
            req.hctx,
            h.tags
        );
        h.tags_used += 1;
        match req.op {
            IoOp::Read => h.reads_in_flight += 1,
            _ => h.writes_in_flight += 1,
        }
        assert!(
            matches!(req.state, ReqState::Queued | ReqState::Plugged),
            "request {r} dispatched twice"
        );
        req.state = ReqState::Dispatching;
        req.t_dispatch = now;
        let s = self.stats.class_mut(req.class);
        s.requests += 1;
        match req.op {
            IoOp::Read => s.read_bytes += req.sectors as u64 * 512,
            _ => s.write_bytes += req.sectors as u64 * 512,
        }
    }

    /// The CQE of `r` arrived.
    pub fn on_cqe(&mut self, now: SimTime, r: u32) {
        let req = &mut self.reqs[r as usize];
        assert_eq!(
            req.state,
            ReqState::InDevice,
            "completion for request {r} that is not in the device: every I/O completes exactly once"
        );
        req.state = ReqState::Completing;
        req.t_cqe = now;
    }

    /// Completion of `r` is done: releases its tag and allocation. Its bios stay live until
    /// the caller has notified their owners and called `free_bio`.
    pub fn finish_request(&mut self, now: SimTime, r: u32) {
        let req = &mut self.reqs[r as usize];
        assert_eq!(
            req.state,
            ReqState::Completing,
            "request {r} finished without a completion: every I/O completes exactly once"
        );
        req.state = ReqState::Free;
        req.t_complete = now;
        let (op, hctx) = (req.op, req.hctx);
        let h = &mut self.hctxs[hctx as usize];
        let in_flight = match op {
            IoOp::Read => &mut h.reads_in_flight,
            _ => &mut h.writes_in_flight,
        };
        assert!(
            h.tags_used > 0 && h.allocated > 0 && *in_flight > 0,
            "hardware queue {hctx} frees request {r} with {} tags used, {} requests allocated, \
             {} of its direction in flight: expected all positive",
            h.tags_used,
            h.allocated,
            *in_flight
        );
        *in_flight -= 1;
        h.tags_used -= 1;
        h.allocated -= 1;
        self.free_reqs.push(r);
        self.reqs_live -= 1;
        debug_assert!(
            self.counts_agree(hctx),
            "hardware queue {hctx}: tag and allocation counts disagree with its requests"
        );
    }

    /// Recounts hardware queue `hctx`'s driver tags and allocated requests from the requests
    /// themselves (O(requests): checked in debug builds only).
    fn counts_agree(&self, hctx: u16) -> bool {
        let (mut tags, mut allocated) = (0, 0);
        for req in self.reqs.iter().filter(|q| q.hctx == hctx) {
            match req.state {
                ReqState::Free => {}
                ReqState::Plugged | ReqState::Queued => allocated += 1,
                ReqState::Dispatching | ReqState::InDevice | ReqState::Completing => {
                    allocated += 1;
                    tags += 1;
                }
            }
        }
        let h = &self.hctxs[hctx as usize];
        tags == h.tags_used && allocated == h.allocated
    }

    pub fn free_bio(&mut self, b: u32) {
        let bio = &mut self.bios[b as usize];
        assert!(
            bio.live && bio.waiters == NIL,
            "bio {b} freed twice or with threads still waiting for it"
        );
        bio.live = false;
        self.free_bios.push(b);
        self.bios_live -= 1;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MergeKind {
    Back,
    Front,
    SameLba,
    /// The bypass's hazard merge of overlapping ranges (`blk_bypass`): the request covers both.
    Union,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostConfig;

    fn blk(merges: Merges, scheduler: Scheduler) -> Blk {
        let mut cfg = HostConfig::preset("arm8").unwrap().blk;
        cfg.merges = merges;
        cfg.scheduler = scheduler;
        Blk::new(&cfg, 2, 64, 63)
    }

    /// A hardware queue's shared poll lock: a reaper takes it when free and holds it for its
    /// hold time; one that comes earlier learns how long to wait and takes nothing; a
    /// submitter holds it from when it is free. A spinner is listed once however often it
    /// starts spinning; posted CQEs go to the reaper in the order they came.
    #[test]
    fn the_poll_lock_is_held_until_its_holder_lets_go() {
        let mut b = blk(Merges::Adjacent, Scheduler::None);
        let h = b.hctx_mut(0);
        assert_eq!(h.take_poll_lock(SimTime(100), 50), Ok(()));
        assert_eq!(h.take_poll_lock(SimTime(120), 50), Err(30));
        assert_eq!(
            h.poll_lock_free_at(),
            SimTime(150),
            "a refused reaper took nothing"
        );
        h.hold_poll_lock(SimTime(150), 40);
        assert_eq!(h.take_poll_lock(SimTime(189), 10), Err(1));
        assert_eq!(h.take_poll_lock(SimTime(190), 10), Ok(()));
        for t in [7, 3, 7] {
            h.add_spinner(t);
        }
        assert_eq!(h.spinners(), [7, 3]);
        h.remove_spinner(7);
        assert_eq!(h.spinners(), [3]);
        h.post(4);
        h.post(9);
        assert!(h.has_posted());
        let mut reap = Vec::new();
        h.reap_posted(&mut reap);
        assert_eq!(reap, [4, 9]);
        assert!(!h.has_posted());
    }

    #[test]
    fn adjacent_bios_merge_in_the_plug_up_to_the_size_limit() {
        let mut b = blk(Merges::Adjacent, Scheduler::None);
        let mut plug = Vec::new();
        let owner = BioOwner::Direct { thread: 0 };
        let mut outcomes = Vec::new();
        for i in 0..40u64 {
            let bio = b.new_bio(IoOp::Write, IoClass::Throughput, i * 8, 8, owner);
            outcomes.push(b.submit_bio(SimTime(i), SimTime(i), bio, &mut plug, 0));
        }
        // 128 KiB = 32 pages per request: 40 pages → 2 requests.
        assert_eq!(plug.len(), 2);
        assert_eq!(b.reqs[plug[0] as usize].sectors, 256);
        assert_eq!(b.stats.throughput.merged_bios, 38);
        // A different class never merges.
        let bio = b.new_bio(IoOp::Write, IoClass::LatencyCritical, 320, 8, owner);
        assert!(matches!(
            b.submit_bio(SimTime(50), SimTime(50), bio, &mut plug, 0),
            SubmitOutcome::NewRequest { .. }
        ));
    }

    #[test]
    fn no_merges_when_off() {
        let mut b = blk(Merges::Off, Scheduler::None);
        let mut plug = Vec::new();
        for i in 0..4u64 {
            let bio = b.new_bio(
                IoOp::Read,
                IoClass::Throughput,
                i * 8,
                8,
                BioOwner::Direct { thread: 0 },
            );
            b.submit_bio(SimTime(0), SimTime(0), bio, &mut plug, 0);
        }
        assert_eq!(plug.len(), 4);
    }

    #[test]
    fn deadline_prefers_reads_but_does_not_starve_writes() {
        let mut b = blk(Merges::Off, Scheduler::MqDeadline);
        let mut plug = Vec::new();
        let owner = BioOwner::Direct { thread: 0 };
        for i in 0..2u64 {
            let bio = b.new_bio(IoOp::Write, IoClass::Throughput, 1000 + i * 100, 8, owner);
            b.submit_bio(SimTime(0), SimTime(0), bio, &mut plug, 0);
        }
        for i in 0..6u64 {
            let bio = b.new_bio(IoOp::Read, IoClass::Throughput, i * 100, 8, owner);
            b.submit_bio(SimTime(0), SimTime(0), bio, &mut plug, 0);
        }
        for r in plug.drain(..) {
            b.insert(SimTime(0), r);
        }
        let mut order = Vec::new();
        while let Some(r) = b.pick_dispatch(SimTime(1), 0) {
            order.push(b.reqs[r as usize].op);
        }
        use IoOp::{Read as R, Write as W};
        assert_eq!(order, vec![R, R, W, R, R, W, R, R]);
    }

    /// Submits one bio and moves the plug into the queue (as `unplug` does).
    fn queue_one(b: &mut Blk, op: IoOp, sector: u64) -> u32 {
        let mut plug = Vec::new();
        let bio = b.new_bio(
            op,
            IoClass::Throughput,
            sector,
            8,
            BioOwner::Direct { thread: 0 },
        );
        b.submit_bio(SimTime(0), SimTime(0), bio, &mut plug, 0);
        for &r in &plug {
            b.insert(SimTime(0), r);
        }
        plug.first().copied().unwrap_or(NIL)
    }

    /// The device completes `r` (it must be dispatched): the request and its tag are free.
    fn complete(b: &mut Blk, r: u32) {
        b.reqs[r as usize].state = ReqState::InDevice;
        b.on_cqe(SimTime(2), r);
        b.finish_request(SimTime(2), r);
    }

    #[test]
    fn kyber_dispatches_reads_ahead_of_queued_writes_and_caps_writes_in_flight() {
        let dispatch_order = |scheduler: Scheduler| {
            let mut cfg = HostConfig::preset("arm8").unwrap().blk;
            cfg.merges = Merges::Off;
            cfg.scheduler = scheduler;
            cfg.kyber_write_depth = 2;
            let mut b = Blk::new(&cfg, 1, 64, 63);
            for i in 0..4u64 {
                queue_one(&mut b, IoOp::Write, 10_000 + i * 100);
            }
            for i in 0..3u64 {
                queue_one(&mut b, IoOp::Read, i * 100);
            }
            let mut order = Vec::new();
            while let Some(r) = b.pick_dispatch(SimTime(1), 0) {
                order.push(r);
            }
            (b, order)
        };
        use IoOp::{Read as R, Write as W};
        let ops = |b: &Blk, order: &[u32]| -> Vec<IoOp> {
            order.iter().map(|&r| b.reqs[r as usize].op).collect()
        };
        // `none`: FIFO, the reads wait behind every write queued before them.
        let (b, order) = dispatch_order(Scheduler::None);
        assert_eq!(ops(&b, &order), vec![W, W, W, W, R, R, R]);
        // kyber: the reads go first; only `kyber_write_depth` writes are in flight even though
        // 63 driver tags are free.
        let (mut b, order) = dispatch_order(Scheduler::Kyber);
        assert_eq!(ops(&b, &order), vec![R, R, R, W, W]);
        assert_eq!(b.hctxs[0].tags_used, 5);
        assert_eq!(
            b.hctxs[0].queued(),
            2,
            "two writes wait for the write domain"
        );
        // A write completing frees a slot in the write domain: the next write goes.
        let first_write = order[3];
        complete(&mut b, first_write);
        let next = b
            .pick_dispatch(SimTime(3), 0)
            .expect("a write slot is free");
        assert_eq!(b.reqs[next as usize].op, W);
        assert_eq!(b.pick_dispatch(SimTime(3), 0), None);
        // A read arriving now still goes ahead of the last queued write.
        let read = queue_one(&mut b, IoOp::Read, 5_000);
        assert_eq!(b.pick_dispatch(SimTime(4), 0), Some(read));
    }

    #[test]
    fn same_lba_bios_ride_along_only_when_enabled() {
        let submit_same_lba = |merges: Merges| {
            let mut b = blk(merges, Scheduler::None);
            let mut plug = Vec::new();
            let owner = BioOwner::Direct { thread: 0 };
            for i in 0..4u64 {
                let bio = b.new_bio(IoOp::Write, IoClass::Throughput, 800, 8, owner);
                b.submit_bio(SimTime(i), SimTime(i), bio, &mut plug, 0);
            }
            // A read of the same range never rides along with a write.
            let bio = b.new_bio(IoOp::Read, IoClass::Throughput, 800, 8, owner);
            b.submit_bio(SimTime(5), SimTime(5), bio, &mut plug, 0);
            // Nor does a write of an overlapping but different range.
            let bio = b.new_bio(IoOp::Write, IoClass::Throughput, 800, 16, owner);
            b.submit_bio(SimTime(6), SimTime(6), bio, &mut plug, 0);
            (b, plug)
        };
        let (off, plug_off) = submit_same_lba(Merges::Adjacent);
        assert_eq!(plug_off.len(), 6);
        assert_eq!(off.stats.throughput.same_lba_merges, 0);
        let (on, plug_on) = submit_same_lba(Merges::AdjacentAndSameLba);
        assert_eq!(
            plug_on.len(),
            3,
            "4 writes → 1 request, + the read, + the 16-sector write"
        );
        assert_eq!(on.stats.throughput.same_lba_merges, 3);
        let r = &on.reqs[plug_on[0] as usize];
        assert_eq!(
            (r.sector, r.sectors, r.bios),
            (800, 8, 4),
            "the range does not grow"
        );
        // It also finds a queued (unplugged) request, not only the plug.
        let mut b = blk(Merges::AdjacentAndSameLba, Scheduler::None);
        let r = queue_one(&mut b, IoOp::Write, 4_000);
        let bio = b.new_bio(
            IoOp::Write,
            IoClass::Throughput,
            4_000,
            8,
            BioOwner::Direct { thread: 1 },
        );
        let mut plug = Vec::new();
        assert_eq!(
            b.submit_bio(SimTime(1), SimTime(1), bio, &mut plug, 0),
            SubmitOutcome::Merged { req: r }
        );
    }

    #[test]
    fn merge_search_counts_plug_and_queue_up_to_the_scan_limit() {
        let mut b = blk(Merges::Adjacent, Scheduler::None);
        assert_eq!(b.merge_candidates(&[], 0, IoClass::Throughput), 0);
        for i in 0..12u64 {
            queue_one(&mut b, IoOp::Write, i * 1_000);
        }
        assert_eq!(b.hctxs[0].queued(), 12);
        assert_eq!(
            b.merge_candidates(&[1, 2, 3], 0, IoClass::Throughput),
            3 + 8,
            "8 = merge_scan_requests"
        );
        assert_eq!(b.merge_candidates(&[0; 10], 0, IoClass::Throughput), 8 + 8);
        assert_eq!(
            b.merge_candidates(&[0; 10], 1, IoClass::Throughput),
            8,
            "another queue's requests"
        );
        b.cfg.merge_scan_requests = 2;
        assert_eq!(b.merge_candidates(&[0; 10], 0, IoClass::Throughput), 2 + 2);
        b.cfg.merges = Merges::Off;
        assert_eq!(
            b.merge_candidates(&[0; 10], 0, IoClass::Throughput),
            0,
            "no merging, no search"
        );
    }

    #[test]
    fn tags_bound_dispatch_and_allocation() {
        let mut b = blk(Merges::Off, Scheduler::None);
        let mut plug = Vec::new();
        let owner = BioOwner::Direct { thread: 0 };
        for i in 0..63u64 {
            let bio = b.new_bio(IoOp::Read, IoClass::Throughput, i * 100, 8, owner);
            assert!(matches!(
                b.submit_bio(SimTime(0), SimTime(0), bio, &mut plug, 1),
                SubmitOutcome::NewRequest { .. }
            ));
        }
        let bio = b.new_bio(IoOp::Read, IoClass::Throughput, 99_999, 8, owner);
        assert_eq!(
            b.submit_bio(SimTime(0), SimTime(0), bio, &mut plug, 1),
            SubmitOutcome::NoRequest
        );
    }
}
