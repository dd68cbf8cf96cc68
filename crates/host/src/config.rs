//! Host configuration: every CPU cost and every kernel knob of the host model, with presets.
//!
//! A host is described by a preset (`arm8`, `arm8-4g`, `x86-4`) plus overrides, in TOML:
//!
//! ```toml
//! preset = "arm8"
//! [cpu]
//! context_switch_ns = 3000
//! [nvme]
//! completion = "polled"
//! [blk]
//! scheduler = "mq-deadline"
//! ```
//!
//! A key the model does not know is an error naming its full path and the keys accepted there.
//!
//! This module is the schema: every key with its unit, and [`HostConfig::validate`], the
//! rules a description must meet to run. The presets, the loading of a preset plus overrides,
//! and where each default comes from are in `presets`.

mod presets;

pub use presets::{COST_CV_PCT, HOST_PRESETS};

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum HostConfigError {
    #[error("unknown host preset `{name}`; known host presets: {known}")]
    UnknownPreset { name: String, known: String },
    #[error("invalid host config: {0}")]
    Toml(String),
    #[error("invalid host config: `{key}` = {value}: {expected}")]
    Invalid {
        key: &'static str,
        value: String,
        expected: String,
    },
}

fn invalid(
    key: &'static str,
    value: impl ToString,
    expected: impl Into<String>,
) -> HostConfigError {
    HostConfigError::Invalid {
        key,
        value: value.to_string(),
        expected: expected.into(),
    }
}

/// The whole host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Name shown in reports (the preset's unless overridden).
    pub name: String,
    /// Latency classes end to end (`chworkload_attr`): with `on` the kernel knows each
    /// process's class and copies it into every I/O record down to the NVMe command's reserved
    /// field; with `off` (stock Linux) no layer sees a class and the device gets every command
    /// unclassified (`IoClass::Throughput`). Reports split by class either way: the split is
    /// the experimenter's label, not the kernel's knowledge (`machine`'s essay).
    pub attr: Switch,
    pub cpu: CpuConfig,
    pub pagecache: PageCacheConfig,
    pub blk: BlkConfig,
    pub nvme: NvmeConfig,
    pub app: AppConfig,
    pub jitter: JitterConfig,
}

/// Cores, the scheduler and interrupt costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuConfig {
    /// Number of cores (each gets its own run queue and NVMe queue pair).
    pub cores: u32,
    /// Core clock; with `ipc_milli` it turns instructions into time.
    pub clock_mhz: u64,
    /// Instructions retired per cycle × 1000 (1000 = one per cycle, the profiles' reference).
    pub ipc_milli: u64,
    /// Saving one thread's context and loading another's (kernel `schedule()` + switch_to).
    pub context_switch_ns: u64,
    /// Extra time a thread needs on its next run after another thread used its core (refilling
    /// caches and TLB).
    pub cache_pollution_ns: u64,
    /// CFS `sched_latency`: the period in which every runnable thread of a core runs once.
    pub sched_latency_ns: u64,
    /// CFS `min_granularity`: the shortest slice a thread gets however many share the core.
    pub min_granularity_ns: u64,
    /// CFS `wakeup_granularity`: a waking thread preempts the running one only if it is this
    /// much behind in virtual runtime.
    pub wakeup_granularity_ns: u64,
    /// Credit a waking thread gets against the core's minimum virtual runtime (CFS places
    /// sleepers at `min_vruntime − sched_latency / 2`).
    pub sleeper_credit_ns: u64,
    /// Where a waking thread runs.
    pub wake_placement: WakePlacement,
    /// Whether a core running out of work takes a waiting thread from another (`cpu`'s
    /// essay, *Load balancing*).
    pub load_balance: LoadBalance,
    /// MSI-X entry and the NVMe interrupt handler up to walking the CQ (per interrupt).
    pub isr_ns: u64,
    /// A timer interrupt (hrtimer expiry for hybrid polling, think times).
    pub timer_irq_ns: u64,
    /// The reschedule IPI a wake-up onto another core costs that core (`cpu`'s essay: the
    /// target takes an interrupt before it can switch to the woken thread). 0: free.
    pub ipi_ns: u64,
    /// Cores that share one last-level cache, consecutive from core 0 (`cpu`'s essay,
    /// *Whose code ran on a core*): another process's user code on any of them evicts what a
    /// thread's kernel path left in that cache. 1: private caches only (each core counts its
    /// own); the presets: every core (one shared L2 or L3). A value above `cores` (a preset
    /// whose `cores` was lowered) means every core.
    pub llc_shared_cores: u32,
    /// The shortest time in which code on the other cores can replace the whole shared
    /// last-level cache: its size over the memory bandwidth that refills it. A thread whose
    /// last bio is more recent than this finds its footprint there still (only its own
    /// core's foreign code makes it cold).
    pub llc_sweep_ns: u64,
}

/// Where the scheduler puts a thread that wakes up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WakePlacement {
    /// Always the core it last ran on.
    PreviousCore,
    /// The core it last ran on if idle, else the first idle core after it, else the previous
    /// core (Linux `select_idle_sibling`, simplified).
    IdleCore,
}

/// Load balancing between the cores' run queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadBalance {
    /// None: a thread moves only when it wakes (`wake_placement`).
    Off,
    /// A core about to idle pulls one waiting thread from the core with the most waiting
    /// (Linux `newidle_balance`, simplified).
    NewIdle,
}

/// Memory, the page cache and write-back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageCacheConfig {
    /// Host DRAM.
    pub memory_bytes: u64,
    /// Memory the kernel and applications keep for themselves; the page cache gets the rest.
    pub reserved_bytes: u64,
    /// Finding (or not finding) one page in the cache's index.
    pub page_lookup_ns: u64,
    /// Copying one 4 KiB page between user and kernel memory.
    pub page_copy_ns: u64,
    /// Allocating a page and inserting it into the cache and the LRU.
    pub page_alloc_ns: u64,
    /// Marking one page dirty (tagging, accounting, inode dirtying).
    pub page_dirty_ns: u64,
    /// The flusher's work per page written back (lock, clear dirty, set writeback, add to bio).
    pub writeback_page_ns: u64,
    /// Ending write-back of one page at I/O completion.
    pub writeback_end_page_ns: u64,
    /// Largest read-ahead window (Linux `read_ahead_kb`, 128 KiB by default).
    pub read_ahead_max_bytes: u64,
    /// Background write-back starts when dirty pages exceed this share of the page cache.
    pub dirty_background_ratio_pct: u32,
    /// Writers block (foreground write-back) when dirty + writeback pages exceed this share.
    pub dirty_ratio_pct: u32,
    /// Dirty data older than this is written back by the periodic flush.
    pub dirty_expire_ns: u64,
    /// Period of the flusher's wake-up to look for expired dirty data.
    pub dirty_writeback_interval_ns: u64,
    /// The smallest write-back chunk and the unit it is rounded to (Linux's
    /// `MIN_WRITEBACK_PAGES`, 4 MiB): a pass gives each file `dirty limit / 8` plus this,
    /// rounded down to a multiple of it (`writeback.rs`).
    pub writeback_chunk_pages: u32,
    /// Pages per bio the flusher builds: 1 is `block_write_full_page` (buffer-head file
    /// systems: the block layer merges the pages into large requests); larger values build
    /// multi-page bios as `mpage`/`iomap` do.
    pub writeback_bio_pages: u32,
    /// Tag the first command of a write-back wave with the number of pages in the wave.
    pub victim_hint: Switch,
    /// Switch between the dirty-ratio sets by the device's write-buffer status in completion
    /// entries (`pagecache.rs`, "Adaptive dirty thresholds"); the low set is
    /// `dirty_ratio_pct` / `dirty_background_ratio_pct`.
    #[serde(default = "switch_off")]
    pub adaptive_dirty: Switch,
    /// The high set, in force while the device's buffer is nearly full (spec: 10 % / 5 %).
    #[serde(default = "default_adaptive_dirty_ratio_pct")]
    pub adaptive_dirty_ratio_pct: u32,
    #[serde(default = "default_adaptive_dirty_background_ratio_pct")]
    pub adaptive_dirty_background_ratio_pct: u32,
    /// Buffer status (percent) at or above which the high set takes over, and below which the
    /// low set comes back: the device's drain watermarks (spec: 0.8 / 0.2).
    #[serde(default = "default_adaptive_buffer_high_pct")]
    pub adaptive_buffer_high_pct: u8,
    #[serde(default = "default_adaptive_buffer_low_pct")]
    pub adaptive_buffer_low_pct: u8,
}

fn switch_off() -> Switch {
    Switch::Off
}

fn default_adaptive_dirty_ratio_pct() -> u32 {
    10
}

fn default_adaptive_dirty_background_ratio_pct() -> u32 {
    5
}

fn default_adaptive_buffer_high_pct() -> u8 {
    80
}

fn default_adaptive_buffer_low_pct() -> u8 {
    20
}

/// The block layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlkConfig {
    pub scheduler: Scheduler,
    pub merges: Merges,
    /// Largest request the block layer builds (`max_sectors_kb`); bigger I/Os are split.
    pub max_request_bytes: u64,
    /// `submit_bio` → `blk_mq_submit_bio`: bio set-up, request allocation, accounting.
    pub bio_submit_ns: u64,
    /// Extra time of a bio submission that finds its code and data evicted: another
    /// process's user code ran on the core since the submitting thread's last submission
    /// (`blk_submit`'s essay, *Cold submission*). A calibration, fitted to the spec's ≈ 39 µs
    /// of block-layer time per LC I/O under co-run (`reference/published.toml`):
    /// calibrated to `flashshare/motivation.blk_layer_corun` (the study marks that row so).
    pub cold_submit_ns: u64,
    /// Comparing a bio with one queued request for a merge.
    pub merge_check_ns: u64,
    /// How many queued requests the merge search looks at (newest first; Linux checks 8).
    pub merge_scan_requests: u32,
    /// Moving one request from the software/scheduler queue to the hardware queue.
    pub dispatch_ns: u64,
    /// Block-layer completion of one request (`blk_mq_complete_request`, bio end_io, waking
    /// the waiter) in interrupt context.
    pub complete_ns: u64,
    /// Requests a plug holds before it flushes them (`BLK_MAX_REQUEST_COUNT`).
    pub plug_max_requests: u32,
    /// Requests that may be allocated per hardware queue (`nr_requests`); a submitter waits
    /// for a free one. 0 means one per NVMe queue entry (queue depth − 1).
    pub nr_requests: u32,
    /// mq-deadline: a read is served by this time after it was queued.
    pub deadline_read_expire_ns: u64,
    /// mq-deadline: a write is served by this time after it was queued.
    pub deadline_write_expire_ns: u64,
    /// mq-deadline: reads may be preferred over waiting writes this many times in a row.
    pub deadline_writes_starved: u32,
    /// kyber-like: in-flight limit of reads per hardware queue.
    pub kyber_read_depth: u32,
    /// kyber-like: in-flight limit of writes per hardware queue (reads are favoured).
    pub kyber_write_depth: u32,
    /// The bypass's hazard search: comparing a bypassing bio's sectors with one queued request
    /// (one cache line of the request; cheaper than a merge attempt, `merge_check_ns`).
    pub hazard_check_ns: u64,
    /// Latency-critical requests skip the plug and the software and hardware queues, with
    /// the hazard rule for queued requests on the same sectors (`blk_bypass`). Needs
    /// `attr = "on"`.
    pub bypass_lc: Switch,
}

/// The I/O scheduler on every hardware queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// FIFO software queues, requests issued straight to the driver when possible.
    None,
    /// Reads before writes, with FIFO expiry per direction (Linux mq-deadline, simplified).
    MqDeadline,
    /// Reads and writes get separate in-flight limits (Linux kyber's domains, simplified).
    Kyber,
}

/// Which bios the block layer merges into queued requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Merges {
    /// No merging (`nomerges = 2`).
    Off,
    /// Back and front merges with an adjacent request of the same direction and class (Linux).
    Adjacent,
    /// Also a bio with exactly the range and direction of a queued request rides along with it.
    AdjacentAndSameLba,
}

/// On/off switch for a mechanism; every model's config shares the one type.
pub use engine::Switch;

/// The NVMe driver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeConfig {
    /// Entries per submission queue (Linux `io_queue_depth`, 1024).
    pub queue_depth: u32,
    /// How a thread waiting for its synchronous direct I/O learns of the completion.
    pub completion: CompletionMode,
    /// `nvme_queue_rq`: building the command and its PRP list.
    pub queue_rq_ns: u64,
    /// The CPU's share of the doorbell MMIO write (the link latency is the device's).
    pub doorbell_write_ns: u64,
    /// One poll-loop iteration (checking the CQ phase tag): the delay between a CQE landing
    /// and a running poller seeing it.
    pub poll_iteration_ns: u64,
    /// Completing one request found by polling (warm caches: cheaper than ISR + completion).
    pub poll_complete_ns: u64,
    /// Hybrid polling: sleep this share of the mean recent polled latency before polling.
    pub hybrid_sleep_pct: u32,
    /// Poll queues (Linux's `poll_queues` module parameter); cores map onto them round-robin.
    /// 0 means one per core.
    pub poll_queues: u32,
    /// A second, latency-critical SQ beside each SQ, sharing its CQ; the driver asks the
    /// controller for strict-priority arbitration with the latency-critical SQs urgent
    /// (`nvme`'s essay; the drain rule is the device's `ctrl.drain_*`). Needs `attr = "on"`.
    pub lc_queue: Switch,
    /// DedCore (`dedcore`'s essay): the last core only polls every poll CQ and hands
    /// latency-critical completions to the application cores. Needs `completion =
    /// "selective"` and at least 2 cores.
    pub dedcore: Switch,
    /// DedCore: the cache lines of a completion (request, bio, the waiter's task) moving from
    /// the polling core to the application core, paid by the woken thread.
    pub dedcore_handoff_ns: u64,
    /// The queue accelerator (XLER, `accel`'s essay): the driver writes each request into its
    /// registers; it merges, rings the SSD, polls the CQs and interrupts the driver.
    pub accelerator: Switch,
    /// XLER: the driver's register writes per request (CPU, replaces `queue_rq_ns` +
    /// `doorbell_write_ns`).
    pub accel_register_ns: u64,
    /// XLER: one CAM search of an SQ (all entries compared at once) and its bitmap update.
    pub accel_cam_ns: u64,
    /// XLER: its doorbell write to the SSD after placing a new entry.
    pub accel_doorbell_ns: u64,
    /// XLER: how long the SSD's fetch of an entry holds the merge/fetch barrier.
    pub accel_barrier_ns: u64,
    /// XLER: period of its hardware CQ poll.
    pub accel_poll_ns: u64,
    /// XLER: from seeing a CQE to its MSI reaching the driver.
    pub accel_irq_ns: u64,
}

/// Completion of synchronous direct I/O (background I/O always uses interrupts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompletionMode {
    /// MSI-X interrupt, ISR, block-layer completion, context switch back to the thread.
    Interrupt,
    /// The thread spins on its poll queue's CQ (interrupts masked on poll queues).
    Polled,
    /// Sleep for part of the expected latency, then poll.
    Hybrid,
    /// FlashShare's selective ISR: latency-critical I/O is polled, everything else takes
    /// interrupts. Needs `attr = "on"`.
    Selective,
}

/// What disturbs the kernel's paths: cost variance, the timer tick, the poll/submission lock
/// (the model and its defaults are in `jitter`'s essay).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JitterConfig {
    /// Coefficient of variation of every per-operation kernel cost, percent (0: constant
    /// costs). Each cost is a shifted exponential of the configured mean.
    pub cost_cv_pct: u32,
    /// Scheduler tick rate on busy cores (Linux `CONFIG_HZ`); 0: no tick.
    pub tick_hz: u32,
    /// The tick handler's cost per tick and core.
    pub tick_ns: u64,
    /// Whether a poll queue's poller and its submitters share one lock.
    pub poll_lock: PollLock,
    /// How long a spinning poller holds the lock in each poll iteration (its CQ walk).
    pub poll_lock_hold_ns: u64,
}

/// The NVMe queue lock(s) between `nvme_poll` and `nvme_queue_rq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PollLock {
    /// One `q_lock` per queue, taken by submission and polling (Linux before 4.20).
    Shared,
    /// `sq_lock` and `cq_poll_lock`: the paths never wait for each other (Linux 4.20 on).
    Split,
}

/// Application-side costs that are not a kernel layer: network and request hand-off.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    /// System call entry and exit with VFS work, per read/write call.
    pub syscall_ns: u64,
    /// The client's cost of sending a request (outside the server).
    pub client_send_ns: u64,
    /// One-way network latency between client and server.
    pub net_one_way_ns: u64,
    /// The server thread receiving one request (socket read).
    pub net_recv_ns: u64,
    /// The server thread handing a request to a worker (queue + futex wake).
    pub handoff_ns: u64,
    /// A worker sending the reply (socket write).
    pub reply_ns: u64,
    /// Online services whose profile carries no published compute per request (every one but
    /// `apache`, whose profile's own figure takes precedence: `workload::Profile::
    /// instructions_per_request`): instructions a worker executes per request. A process's
    /// own `instructions_per_request` key overrides both.
    pub instructions_per_request: u64,
    /// Each process's file on the device (its data set), in bytes.
    pub file_bytes: u64,
}

impl HostConfig {
    /// Page-cache capacity in 4 KiB pages.
    pub fn page_cache_pages(&self) -> u64 {
        (self.pagecache.memory_bytes - self.pagecache.reserved_bytes) / crate::PAGE_BYTES
    }

    /// Time to retire `instructions` on one core, ns (rounded up, at least 1 for non-zero work).
    pub fn instructions_ns(&self, instructions: u64) -> u64 {
        let per_us = self.cpu.clock_mhz * self.cpu.ipc_milli; // instructions per ms × 1000 / 1000
                                                              // ns = instr × 1e6 / (MHz × ipc_milli)
        (instructions as u128 * 1_000_000).div_ceil(per_us as u128) as u64
    }

    /// Instructions retired in `ns` on one core.
    pub fn instructions_in(&self, ns: u64) -> u64 {
        (ns as u128 * (self.cpu.clock_mhz * self.cpu.ipc_milli) as u128 / 1_000_000) as u64
    }

    /// Checks that the description can run.
    pub fn validate(&self) -> Result<(), HostConfigError> {
        let c = &self.cpu;
        if !(1..=256).contains(&c.cores) {
            return Err(invalid("cpu.cores", c.cores, "1 to 256 cores"));
        }
        if c.clock_mhz == 0 {
            return Err(invalid("cpu.clock_mhz", 0, "a positive clock"));
        }
        if c.ipc_milli == 0 {
            return Err(invalid("cpu.ipc_milli", 0, "a positive IPC × 1000"));
        }
        if c.min_granularity_ns == 0 || c.sched_latency_ns < c.min_granularity_ns {
            return Err(invalid(
                "cpu.sched_latency_ns",
                c.sched_latency_ns,
                format!(
                    "at least cpu.min_granularity_ns ({}), which must be positive",
                    c.min_granularity_ns
                ),
            ));
        }
        let p = &self.pagecache;
        if p.reserved_bytes >= p.memory_bytes
            || (p.memory_bytes - p.reserved_bytes) < 64 * crate::PAGE_BYTES
        {
            return Err(invalid(
                "pagecache.reserved_bytes",
                p.reserved_bytes,
                format!(
                    "at least 64 pages below pagecache.memory_bytes ({})",
                    p.memory_bytes
                ),
            ));
        }
        if p.dirty_ratio_pct == 0
            || p.dirty_ratio_pct > 100
            || p.dirty_background_ratio_pct == 0
            || p.dirty_background_ratio_pct > p.dirty_ratio_pct
        {
            return Err(invalid(
                "pagecache.dirty_background_ratio_pct",
                format!(
                    "{} (dirty_ratio_pct {})",
                    p.dirty_background_ratio_pct, p.dirty_ratio_pct
                ),
                "1 ≤ dirty_background_ratio_pct ≤ dirty_ratio_pct ≤ 100",
            ));
        }
        if p.adaptive_dirty_ratio_pct == 0
            || p.adaptive_dirty_ratio_pct > 100
            || p.adaptive_dirty_background_ratio_pct == 0
            || p.adaptive_dirty_background_ratio_pct > p.adaptive_dirty_ratio_pct
        {
            return Err(invalid(
                "pagecache.adaptive_dirty_background_ratio_pct",
                format!(
                    "{} (adaptive_dirty_ratio_pct {})",
                    p.adaptive_dirty_background_ratio_pct, p.adaptive_dirty_ratio_pct
                ),
                "1 ≤ adaptive_dirty_background_ratio_pct ≤ adaptive_dirty_ratio_pct ≤ 100",
            ));
        }
        if p.adaptive_buffer_low_pct >= p.adaptive_buffer_high_pct
            || p.adaptive_buffer_high_pct > 100
        {
            return Err(invalid(
                "pagecache.adaptive_buffer_high_pct",
                format!(
                    "{} (adaptive_buffer_low_pct {})",
                    p.adaptive_buffer_high_pct, p.adaptive_buffer_low_pct
                ),
                "adaptive_buffer_low_pct < adaptive_buffer_high_pct ≤ 100",
            ));
        }
        if p.dirty_writeback_interval_ns == 0 {
            return Err(invalid(
                "pagecache.dirty_writeback_interval_ns",
                0,
                "a positive period",
            ));
        }
        if p.writeback_chunk_pages == 0 {
            return Err(invalid(
                "pagecache.writeback_chunk_pages",
                0,
                "at least 1 page",
            ));
        }
        if p.writeback_bio_pages == 0 {
            return Err(invalid(
                "pagecache.writeback_bio_pages",
                0,
                "at least 1 page",
            ));
        }
        let b = &self.blk;
        if b.max_request_bytes < crate::PAGE_BYTES
            || !b.max_request_bytes.is_multiple_of(crate::PAGE_BYTES)
        {
            return Err(invalid(
                "blk.max_request_bytes",
                b.max_request_bytes,
                "a positive multiple of 4096",
            ));
        }
        if b.plug_max_requests == 0 {
            return Err(invalid("blk.plug_max_requests", 0, "at least 1"));
        }
        if b.kyber_read_depth == 0 || b.kyber_write_depth == 0 {
            return Err(invalid(
                "blk.kyber_write_depth",
                format!("{}/{}", b.kyber_read_depth, b.kyber_write_depth),
                "kyber depths of at least 1",
            ));
        }
        let n = &self.nvme;
        if !(2..=65_536).contains(&n.queue_depth) {
            return Err(invalid(
                "nvme.queue_depth",
                n.queue_depth,
                "2 to 65536 entries",
            ));
        }
        if b.nr_requests >= n.queue_depth * 4 {
            return Err(invalid(
                "blk.nr_requests",
                b.nr_requests,
                "below 4 × nvme.queue_depth (0 = queue depth − 1)",
            ));
        }
        if n.poll_iteration_ns == 0 {
            return Err(invalid(
                "nvme.poll_iteration_ns",
                0,
                "a positive poll iteration",
            ));
        }
        if n.poll_queues > c.cores {
            return Err(invalid(
                "nvme.poll_queues",
                n.poll_queues,
                format!("0 (one per core) to cpu.cores ({})", c.cores),
            ));
        }
        if self.attr != Switch::On {
            for (key, on) in [
                ("nvme.lc_queue", n.lc_queue == Switch::On),
                ("blk.bypass_lc", b.bypass_lc == Switch::On),
                ("nvme.completion", n.completion == CompletionMode::Selective),
            ] {
                if on {
                    return Err(invalid(
                        key,
                        "\"on\"",
                        "attr = \"on\" too: the kernel learns a request's class from the attribute",
                    ));
                }
            }
        }
        if n.accelerator == Switch::On && n.dedcore == Switch::On {
            return Err(invalid(
                "nvme.accelerator",
                "\"on\"",
                "nvme.dedcore = \"off\": the accelerator and DedCore are alternatives",
            ));
        }
        if n.dedcore == Switch::On && (n.completion != CompletionMode::Selective || c.cores < 2) {
            return Err(invalid(
                "nvme.dedcore",
                "\"on\"",
                format!(
                    "nvme.completion = \"selective\" and at least 2 cores (have {:?}, {} cores)",
                    n.completion, c.cores
                ),
            ));
        }
        let j = &self.jitter;
        if j.cost_cv_pct > 100 {
            return Err(invalid(
                "jitter.cost_cv_pct",
                j.cost_cv_pct,
                "0 to 100 (a cost never goes below zero)",
            ));
        }
        if j.tick_hz > 10_000 {
            return Err(invalid("jitter.tick_hz", j.tick_hz, "0 (off) to 10000 Hz"));
        }
        if j.tick_hz > 0 && j.tick_ns >= 1_000_000_000 / u64::from(j.tick_hz) {
            return Err(invalid(
                "jitter.tick_ns",
                j.tick_ns,
                format!(
                    "below the tick period ({} ns at jitter.tick_hz = {})",
                    1_000_000_000 / u64::from(j.tick_hz),
                    j.tick_hz
                ),
            ));
        }
        if j.poll_lock_hold_ns > n.poll_iteration_ns {
            return Err(invalid(
                "jitter.poll_lock_hold_ns",
                j.poll_lock_hold_ns,
                format!(
                    "at most nvme.poll_iteration_ns ({}): the lock is held within an iteration",
                    n.poll_iteration_ns
                ),
            ));
        }
        if n.hybrid_sleep_pct > 100 {
            return Err(invalid(
                "nvme.hybrid_sleep_pct",
                n.hybrid_sleep_pct,
                "0 to 100",
            ));
        }
        if self.cpu.llc_shared_cores == 0 {
            return Err(invalid(
                "cpu.llc_shared_cores",
                self.cpu.llc_shared_cores,
                "at least 1 (1: private caches)",
            ));
        }
        if self.app.file_bytes < crate::PAGE_BYTES * 16 {
            return Err(invalid(
                "app.file_bytes",
                self.app.file_bytes,
                "at least 64 KiB",
            ));
        }
        Ok(())
    }

    /// Requests per hardware queue (`blk.nr_requests`, or queue depth − 1).
    pub fn nr_requests(&self) -> u32 {
        if self.blk.nr_requests == 0 {
            self.nvme.queue_depth - 1
        } else {
            self.blk.nr_requests
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_is_named_by_its_dotted_path_with_its_siblings() {
        let err = HostConfig::from_toml_str("[cpu]\ncores = 4\ncorse = 4\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(
                "invalid host config: unknown key `cpu.corse`; keys accepted here: cache_pollution_ns, \
                 clock_mhz, context_switch_ns, cores, "
            ),
            "{msg}"
        );
        assert!(msg.ends_with(", wakeup_granularity_ns"), "{msg}");
    }

    #[test]
    fn presets_validate() {
        for name in HOST_PRESETS {
            HostConfig::preset(name).unwrap().validate().unwrap();
        }
        let a = HostConfig::preset("arm8").unwrap();
        assert_eq!(
            a.cpu.sched_latency_ns, 24_000_000,
            "CFS: 6 ms × (1 + log2 8)"
        );
        assert_eq!(a.page_cache_pages(), (1536u64 << 20) / 4096);
        // ISR + completion + switch + pollution ≥ 6 µs (host-stack.md).
        assert!(a.cpu.isr_ns + a.blk.complete_ns + a.cpu.context_switch_ns >= 6_000);
    }

    #[test]
    fn jitter_keys_are_checked() {
        let h = HostConfig::from_toml_str(
            "[jitter]\ncost_cv_pct = 20\ntick_hz = 1000\npoll_lock = \"shared\"\n[nvme]\npoll_queues = 2\n",
        )
        .unwrap();
        assert_eq!(h.jitter.cost_cv_pct, 20);
        assert_eq!(h.jitter.poll_lock, PollLock::Shared);
        assert_eq!(h.nvme.poll_queues, 2);
        for (text, key) in [
            ("[jitter]\ncost_cv_pct = 101\n", "jitter.cost_cv_pct"),
            (
                "[jitter]\ntick_hz = 1000\ntick_ns = 1000000\n",
                "jitter.tick_ns",
            ),
            (
                "[jitter]\npoll_lock_hold_ns = 201\n",
                "jitter.poll_lock_hold_ns",
            ),
            ("[nvme]\npoll_queues = 9\n", "nvme.poll_queues"),
        ] {
            let e = HostConfig::from_toml_str(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        let x = HostConfig::preset("x86-4").unwrap();
        assert_eq!((x.jitter.tick_hz, x.jitter.tick_ns), (250, 1_000));
    }

    #[test]
    fn adaptive_dirty_keys_are_checked() {
        let h = HostConfig::from_toml_str(
            "[pagecache]\nadaptive_dirty = \"on\"\nadaptive_dirty_ratio_pct = 12\n",
        )
        .unwrap();
        assert_eq!(h.pagecache.adaptive_dirty, Switch::On);
        assert_eq!(
            (
                h.pagecache.adaptive_dirty_ratio_pct,
                h.pagecache.adaptive_dirty_background_ratio_pct
            ),
            (12, 5)
        );
        for (text, names) in [
            (
                "[pagecache]\nadaptive_dirty_background_ratio_pct = 11\n",
                "`pagecache.adaptive_dirty_background_ratio_pct` = 11 (adaptive_dirty_ratio_pct 10)",
            ),
            (
                "[pagecache]\nadaptive_buffer_low_pct = 80\n",
                "`pagecache.adaptive_buffer_high_pct` = 80 (adaptive_buffer_low_pct 80)",
            ),
        ] {
            let e = HostConfig::from_toml_str(text).unwrap_err().to_string();
            assert!(e.contains(names), "{text}: {e}");
        }
    }

    #[test]
    fn instructions_and_time() {
        let a = HostConfig::preset("arm8").unwrap();
        assert_eq!(a.instructions_ns(2_000), 1_000);
        assert_eq!(a.instructions_in(1_000), 2_000);
        let x = HostConfig::preset("x86-4").unwrap();
        assert_eq!(x.instructions_ns(4_000), 1_000);
    }

    #[test]
    fn overrides_and_unknown_keys() {
        let h = HostConfig::from_toml_str("preset = \"x86-4\"\n[nvme]\ncompletion = \"polled\"\n")
            .unwrap();
        assert_eq!(h.nvme.completion, CompletionMode::Polled);
        assert_eq!(h.cpu.cores, 4);
        let e = HostConfig::from_toml_str("[cpu]\ncorez = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cpu.corez") && e.contains("cores"), "{e}");
        let e = HostConfig::from_toml_str("preset = \"sparc\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("arm8, arm8-4g, x86-4"), "{e}");
        let e = HostConfig::from_toml_str("[cpu]\ncores = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cpu.cores"), "{e}");
    }
}
