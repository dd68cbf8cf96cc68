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
//! ## Where the defaults come from
//! host-stack.md gives the published calibration points for a 2 GHz ARM server (`arm8`):
//! a context switch costs 2-3 µs plus cache pollution on the next run; ISR plus the switch back
//! to the waiting thread is about 6 µs or more; a polled I/O costs about 6 µs of poll work and its
//! completion work is about 4 µs cheaper than the interrupt path; the doorbell MMIO is ~0.5 µs
//! (modelled on the device side as `pcie.doorbell_ns`; the host pays only the CPU store). The
//! per-layer submission costs (syscall, bio submit, dispatch, `nvme_queue_rq`, doorbell store)
//! are our split of the path, chosen so that `x86-4` (the same code at 4 GHz: every CPU cost
//! halved) reproduces device.md's QD1 figures for the Z-SSD through the whole host model: a
//! pvsync2 4 KiB random read/write job (100 ms, seed 1) on `x86-4` + `zssd` gives 14.8 / 11.6 µs
//! with interrupts and 13.4 / 10.2 µs polled (published: 14.7 / 11.4 and 13.6 / 9.9); the
//! means `ullstack sim --system` prints for a system config (`seed = 1`, `duration_ms = 100`,
//! host `x86-4`, device `zssd`) with one `fio` process running `[j] ioengine=pvsync2 direct=1
//! bs=4k rw=randread` (or `randwrite`; `hipri` for polled) `time_based runtime=100ms`.
//!
//! ## The block layer under co-run: cold submissions
//! host-stack.md quotes ≈ 39 µs of block-layer time for a latency-critical I/O under co-run in
//! the vanilla stack, and calibrates the default CPU costs to it. Warm, our submission path
//! costs 2.3 µs (bio submit 1.5 + dispatch 0.8, pinned by the QD1 figures above), and no
//! queue or lock of the block layer holds a latency-critical request at the spec's I/O rates
//! (below). What differs between a QD1 job alone and a service beside a CPU-bound job is the
//! state of the caches when the service submits: its worker sleeps through every I/O, the
//! offline job computes on the core meanwhile, and the worker's next `submit_bio` finds the
//! block layer's code and data evicted — the blk-mq submission text, the bio and request it
//! allocates, the tag bitmap, and for direct I/O the page-table walk and `struct page`s of
//! the user buffer it pins. `blk.cold_submit_ns` is that extra time, paid by a bio whose
//! submitter finds that another process's user code ran on its core since its own last
//! submission, on its core or a core sharing its last-level cache (`cpu.llc_shared_cores`;
//! `cpu::Cpu::foreign_user_since`; `blk_submit`'s essay, *Cold submission*). It
//! splits between the bio submission and the dispatch as their warm costs do (1.5 : 0.8):
//! each part pays for the code and data it touches, so a bypassing bio, which has no
//! dispatch, pays the submission's 24.3 µs only.
//!
//! **Whose code makes a bio cold** (`cpu.llc_shared_cores`, `cpu.llc_sweep_ns`). A thread's
//! private caches lose the block layer's code and data to its own user code between two
//! I/Os anyway (apache computes 375 µs between reads); what keeps them is the shared
//! last-level cache, which every core's misses refill, so a co-runner computing on the other
//! cores evicts a service's kernel footprint there as one on its own core does (the
//! interference co-location studies measure through the shared LLC: Lo et al., "Heracles",
//! ISCA 2015; Mars et al., "Bubble-Up", MICRO 2011). The presets share one last-level cache
//! among all their cores: arm8 the single L2 of gem5's ARM full-system configuration (the
//! papers' host), x86-4 a client part's L3; `llc_shared_cores = 1` counts the submitter's
//! own core only, as private caches would. Other cores need time to replace the cache: at
//! least its size over the memory bandwidth that refills it, `llc_sweep_ns` (arm8: gem5's
//! 2 MiB L2 at one DDR3-1600 channel's 12.8 GB/s, ≈ 164 µs). A bio that follows its
//! submitter's previous one sooner is cold only through its own core, so back-to-back bios
//! (a flusher's batch, an asynchronous submitter's) stay warm beside a co-runner, and a
//! worker that computes 375 µs between reads does not. Left out: how much the foreign code
//! evicts (any amount, once the sweep time has passed, counts as all of it: gzip's small
//! footprint as much as pagerank's), a gradual loss instead of the sharp boundary, and
//! eviction by the process's own threads.
//!
//! **The figure is calibrated, not measured**: 37.2 µs, so that a co-run in which every bio
//! of the service is cold gives its latency-critical requests ≈ 39 µs of software + hardware
//! queue: `apache` on four workers with 0.5 M instructions per request beside `pagerank` on
//! all eight cores, arm8 + zssd, 2 s, seed 1 (`sim`'s test
//! `vanilla_co_run_latency_critical_block_layer_time_is_its_submission_cpu_cold` runs it and
//! holds the sum near 39 µs with ≥ 95 % of bios cold). 37.2 µs at 2 GHz is ≈ 74 k cycles, a few
//! hundred misses to memory at an assumed ≈ 100 ns each; we have no measurement of the path's
//! cold footprint on the published platform, and no other calibration point depends on this
//! figure. It is the same on every preset (x86-4 does not halve it: a miss to memory does not
//! get faster with the clock). QD1 is untouched: a job alone never submits cold (the idle loop
//! runs no user code), and neither does a service alone (its own threads' code is not
//! foreign). In the study's own co-runs the analytics jobs leave a core
//! (`workload::profile`'s essay, "Offline jobs' threads"); most of the service's bios are
//! cold all the same, because the job's code on the other cores refills the last-level cache
//! they share (`cpu`'s essay, *Whose code ran on a core*: those that follow the submitter's
//! previous bio by at least `cpu.llc_sweep_ns`). Counted on the service's own core only, as
//! this essay first had it, 93 of apache's 15 967 bios beside `pagerank` were cold and its
//! block layer took 1.6 + 0.9 µs; counted over the shared L2, 12 088 and 19.9 + 10.6 µs
//! (`ullstack sim`, the embedded default: apache + pagerank, arm8 + zssd, 10 s, seed 1), so
//! `motivation.blk_layer_corun` is approached but not reached (a cold bio's 39.5 µs, a
//! warm one's 2.3).
//!
//! What the cold cost leaves out: the other layers' cold paths (the syscall, the driver and
//! completion have only the flat `cpu.cache_pollution_ns` of a displaced thread; no published
//! figure pins them), a partial eviction (a foreign process that ran 1 µs evicts as much as
//! one that ran 10 ms), and eviction by the same process's other threads.
//!
//! **The queues and locks, mechanism by mechanism** (the same co-run, measured before the cold
//! cost existed: 1 503 + 800 ns, of which 3 ns interrupts landing on the submitting core):
//!
//! - **hctx / scheduler lock shared by submitting cores** (`hctx->lock`, block/blk-mq.c;
//!   `dd->lock`, block/mq-deadline.c): not modelled, and it does not act here. blk-mq maps one
//!   hardware queue per CPU when the device has one per CPU (`blk_mq_map_queues`; presets.md:
//!   one SQ/CQ pair per core), so only one core's submitters reach a queue and a core runs
//!   one thread at a time; vanilla runs `none`, which has no queue-wide lock.
//! - **Tag waits** (`blk_mq_get_tag` → `io_schedule`, block/blk-mq-tag.c): `blk.nr_requests`
//!   and the driver tags (SQ depth − 1); a wait counts in the software queue. Never reached:
//!   `host.blk.allocation_waits` = 0. 1 023 tags per queue against ≈ 0.02 requests in flight
//!   (64 097 throughput requests in 10 s over 8 queues, ≈ 30 µs each).
//! - **Deferred queue runs by kblockd** (`blk_mq_run_hw_queue(hctx, true)`,
//!   `__blk_mq_sched_restart`): a nice −20 kworker per core that must win its core
//!   (`kblockd`). Never reached: `deferred_dispatches` = 0, no request is left without a tag.
//! - **Plugging** (`blk_start_plug` / `blk_finish_plug`, and the flush from `schedule()`):
//!   the submitter's plug, flushed at the end of its batch (by the scheduler, through kblockd,
//!   when it sleeps for a request). A synchronous 24 KiB direct read is one bio and one
//!   request, issued at its own flush: nothing waits in a plug.
//! - **Completion on another core** (`blk_mq_complete_request`, `QUEUE_FLAG_SAME_COMP` → IPI):
//!   not modelled, and the kernel sends none here either: each queue's vector is on the core
//!   that submits to it.
//! - **Wake-up IPI onto another core** (`ttwu_queue_wakelist`, kernel/sched/core.c):
//!   `cpu.ipi_ns` (`cpu`'s essay). It acts on the switch back, not the block layer: with
//!   `[host.cpu] ipi_ns = 0` the LC software + hardware queue was 1 501 + 800 ns.
//! - **Cache/TLB refill after a switch**: the flat `cpu.cache_pollution_ns`, paid by a
//!   displaced thread at the start of its run (the context-switch column), and now the cold
//!   submission above. With `cache_pollution_ns = 0` the block layer was 1 500 + 805 ns.
//! - **Interrupts stealing the submitting core** (ISRs, the tick): the 3 ns. With
//!   `[host.jitter] tick_hz = 0`: 1 503 + 800 ns.
//!
//! Why no queue can make 39 µs here: with a queue per core and `none`, blk-mq has no place
//! where a request waits behind another core's or another thread's except a full tag set,
//! and presets.md's offline jobs issue too little I/O to fill one (pagerank: 0.367 I/Os per M
//! instructions, about 700 I/Os per second per core at 2 GHz, against a queue of 1 023 tags
//! and a 30 µs device). Even 8 fio threads keeping 64 reads each in flight beside apache (2 s,
//! arm8 + zssd, 785 k IOPS) gave the latency-critical requests 2.01 + 0.90 µs: the queueing
//! moves to the device (30.4 µs of device queue). A bound that holds whatever the queueing
//! discipline (Little's law on the co-run's `breakdown_throughput_ns`, before the cold cost):
//! pagerank's requests, 6 410 per second at 39.4 µs each from submission to completion, keep
//! 0.25 of a request in flight on average, 0.032 per hardware queue. A latency-critical
//! request that had to wait for every throughput request in its queue to *complete* would wait
//! 0.032 × 39.4 ≈ 1.2 µs on average; 9.9 µs if all 8 cores shared one queue. With `index`:
//! 3 571 per second at 33.1 µs, 0.5 µs per queue, 3.9 µs with one shared queue. The queueing
//! mechanisms act on shallow or shared queues and under schedulers (the `kblockd` tests: over
//! 10 µs of software queue on 8-entry queues).
//!
//! The scheduler defaults are Linux CFS's (`sched_latency` 6 ms, `min_granularity` 0.75 ms,
//! `wakeup_granularity` 1 ms, each scaled by 1 + log2(cores) as the kernel does).
//! `cpu.load_balance = "off"`: no core takes another's waiting threads (`cpu`'s essay). Linux
//! does (`newidle_balance`, and periodic balancing of busy cores); `"new-idle"` models the first.
//! It stays off by default until we know which model is closer to Linux on the co-runs the
//! studies use: beside ungzip it moved apache's p99 from 0.55 to 4.36 ms in one run (seed 2,
//! vanilla) and from 7.38 to 1.39 ms in another (seed 3, cacheopt; CHANGELOG.md,
//! "flashshare replicates"), and every figure in the docs was measured without it.
//!
//! ## Jitter defaults (`[jitter]`, the model in `jitter`'s essay)
//! - `cost_cv_pct = 10`: every cost above is a calibrated *mean*, and each operation draws its
//!   own (floor at 90 % of the mean). The value is the thin host's (`sim::HostCosts`,
//!   `HOST_COST_CV_PCT`), fitted to a published QD1 measurement of a drive whose media adds no
//!   read-to-read variation: AnandTech's Intel Optane SSD DC P4800X review (2017, QD1 4 KiB
//!   random read: mean 8.9, p99 10, p99.999 37 µs), whose spread up to the p99 is its host's
//!   and controller's, so 10 % is an upper bound for the host's share. The means stay (within
//!   0.05 µs at QD1, `jitter_tests`); set 0 for constant costs.
//! - `tick_hz = 250`, `tick_ns = 2000` (arm8; 1000 on x86-4): 250 Hz is the kernel's own
//!   default (`kernel/Kconfig.hz`, `default HZ_250`). The handler cost is our estimate: the
//!   timer interrupt entry we charge hybrid-polling wake-ups (`timer_irq_ns` 1.5 µs) plus
//!   ≈ 0.5 µs of `scheduler_tick` and jiffies/RCU bookkeeping. On by default because every
//!   busy core of a real server takes it; it moves QD1 means by under 0.01 µs (the x86-4 +
//!   zssd jobs above, read / write / polled read / polled write: 14.798 / 11.650 / 13.398 /
//!   10.250 µs with it, 14.797 / 11.649 / 13.397 / 10.249 without, `tick_hz = 0`) and puts its
//!   cost into the polled p99.99 (13.4 → 14.4 µs read).
//! - `poll_lock = "split"`: the kernel since 4.20. `"shared"` models the older single queue
//!   lock; `poll_lock_hold_ns = 100` (50 on x86-4) is half a poll iteration, the CQ walk's
//!   share of the loop (an estimate: one CQE cache line and the phase-tag check).
//! - `nvme.poll_queues = 0`: one poll queue per core, so no two cores share a poll queue and
//!   the lock never matters unless set lower.
//!
//! Interrupt path of one 4 KiB read on `arm8` (defaults): ISR 2.5 µs + block-layer completion
//! 1.5 µs + context switch 2.5 µs + cache pollution 1.0 µs = 7.5 µs of CPU between the CQE and
//! the thread running again (≥ 6 µs as published). Polled: detection ≤ 0.2 µs + polled
//! completion 3.5 µs: 4 µs less than the interrupt path's 7.5 µs.

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

/// Names of the host presets.
pub const HOST_PRESETS: [&str; 3] = ["arm8", "arm8-4g", "x86-4"];

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
    /// The preset called `name`; the error lists the known ones.
    pub fn preset(name: &str) -> Result<HostConfig, HostConfigError> {
        match name {
            "arm8" => Ok(arm8("arm8", 2 << 30)),
            "arm8-4g" => Ok(arm8("arm8-4g", 4 << 30)),
            "x86-4" => Ok(x86_4()),
            _ => Err(HostConfigError::UnknownPreset {
                name: name.to_string(),
                known: HOST_PRESETS.join(", "),
            }),
        }
    }

    /// A host from a TOML table: `preset = ".."` (default `arm8`) plus overrides.
    pub fn from_toml_table(mut doc: toml::Table) -> Result<HostConfig, HostConfigError> {
        let base = match doc.remove("preset") {
            Some(toml::Value::String(name)) => Self::preset(&name)?,
            Some(other) => {
                return Err(invalid(
                    "preset",
                    other,
                    format!("a preset name: {}", HOST_PRESETS.join(", ")),
                ))
            }
            None => Self::preset("arm8")?,
        };
        let mut table =
            toml::Table::try_from(&base).map_err(|e| HostConfigError::Toml(e.to_string()))?;
        engine::toml_merge::deep_merge(&mut table, doc)
            .map_err(|e| HostConfigError::Toml(e.to_string()))?;
        let config: HostConfig = table
            .try_into()
            .map_err(|e: toml::de::Error| HostConfigError::Toml(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// A host from TOML text.
    pub fn from_toml_str(text: &str) -> Result<HostConfig, HostConfigError> {
        let doc: toml::Table =
            toml::from_str(text).map_err(|e| HostConfigError::Toml(e.to_string()))?;
        Self::from_toml_table(doc)
    }

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

/// CFS scales its latency knobs by 1 + log2(cores).
fn cfs_factor(cores: u32) -> u64 {
    1 + u64::from(31 - cores.max(1).leading_zeros())
}

/// 8 cores at 2 GHz (the study host); `memory_bytes` 2 GB (`arm8`, scaled down on purpose as
/// architectural studies do) or 4 GB (`arm8-4g`, write-back studies).
fn arm8(name: &str, memory_bytes: u64) -> HostConfig {
    let cores = 8;
    let f = cfs_factor(cores);
    HostConfig {
        name: name.into(),
        attr: Switch::Off,
        cpu: CpuConfig {
            cores,
            clock_mhz: 2_000,
            ipc_milli: 1_000,
            context_switch_ns: 2_500,
            cache_pollution_ns: 1_000,
            sched_latency_ns: 6_000_000 * f,
            min_granularity_ns: 750_000 * f,
            wakeup_granularity_ns: 1_000_000 * f,
            sleeper_credit_ns: 3_000_000 * f,
            wake_placement: WakePlacement::IdleCore,
            load_balance: LoadBalance::Off,
            isr_ns: 2_500,
            timer_irq_ns: 1_500,
            ipi_ns: 1_500,
            // One L2 shared by all eight cores: gem5's ARM full-system configuration, the
            // papers' host, builds a single L2 behind a crossbar every core's L1 reaches
            // (configs/common/CacheConfig.py, `--l2cache`).
            llc_shared_cores: cores,
            // gem5's defaults for that L2 and memory: 2 MiB (`--l2_size`) refilled at most at
            // one DDR3-1600 channel's 12.8 GB/s (`--mem-type`): 2 097 152 / 12.8 ≈ 164 µs.
            llc_sweep_ns: 163_840,
        },
        pagecache: PageCacheConfig {
            memory_bytes,
            reserved_bytes: memory_bytes / 4,
            page_lookup_ns: 100,
            page_copy_ns: 500,
            page_alloc_ns: 300,
            page_dirty_ns: 300,
            writeback_page_ns: 400,
            writeback_end_page_ns: 150,
            read_ahead_max_bytes: 128 << 10,
            dirty_background_ratio_pct: 3,
            dirty_ratio_pct: 5,
            dirty_expire_ns: 30_000_000_000,
            dirty_writeback_interval_ns: 5_000_000_000,
            // MIN_WRITEBACK_PAGES: 4096 KiB >> (PAGE_SHIFT - 10) (fs/fs-writeback.c).
            writeback_chunk_pages: 1024,
            writeback_bio_pages: 1,
            victim_hint: Switch::Off,
            adaptive_dirty: Switch::Off,
            adaptive_dirty_ratio_pct: default_adaptive_dirty_ratio_pct(),
            adaptive_dirty_background_ratio_pct: default_adaptive_dirty_background_ratio_pct(),
            adaptive_buffer_high_pct: default_adaptive_buffer_high_pct(),
            adaptive_buffer_low_pct: default_adaptive_buffer_low_pct(),
        },
        blk: BlkConfig {
            scheduler: Scheduler::None,
            merges: Merges::Adjacent,
            max_request_bytes: 128 << 10,
            bio_submit_ns: 1_500,
            cold_submit_ns: 37_200,
            merge_check_ns: 200,
            merge_scan_requests: 8,
            dispatch_ns: 800,
            complete_ns: 1_500,
            plug_max_requests: 16,
            nr_requests: 0,
            deadline_read_expire_ns: 500_000_000,
            deadline_write_expire_ns: 5_000_000_000,
            deadline_writes_starved: 2,
            kyber_read_depth: 256,
            kyber_write_depth: 128,
            hazard_check_ns: 50,
            bypass_lc: Switch::Off,
        },
        nvme: NvmeConfig {
            queue_depth: 1024,
            completion: CompletionMode::Interrupt,
            queue_rq_ns: 1_000,
            doorbell_write_ns: 200,
            poll_iteration_ns: 200,
            poll_complete_ns: 3_500,
            hybrid_sleep_pct: 50,
            poll_queues: 0,
            lc_queue: Switch::Off,
            dedcore: Switch::Off,
            dedcore_handoff_ns: 300,
            accelerator: Switch::Off,
            accel_register_ns: 200,
            accel_cam_ns: 20,
            accel_doorbell_ns: 500,
            accel_barrier_ns: 600,
            accel_poll_ns: 100,
            accel_irq_ns: 500,
        },
        app: AppConfig {
            syscall_ns: 1_000,
            client_send_ns: 2_000,
            net_one_way_ns: 10_000,
            net_recv_ns: 2_000,
            handoff_ns: 1_000,
            reply_ns: 2_000,
            instructions_per_request: 1_000_000,
            file_bytes: 16 << 30,
        },
        jitter: JitterConfig {
            cost_cv_pct: COST_CV_PCT,
            tick_hz: 250,
            tick_ns: 2_000,
            poll_lock: PollLock::Split,
            poll_lock_hold_ns: 100,
        },
    }
}

/// Every preset's `jitter.cost_cv_pct`: the thin host's fitted spread (see the module essay,
/// *Jitter defaults*).
pub const COST_CV_PCT: u32 = 10;

/// 4 cores at 4 GHz, 16 GB (device characterization): the arm8 costs at twice the clock.
fn x86_4() -> HostConfig {
    let mut h = arm8("x86-4", 16 << 30);
    let cores = 4;
    let f = cfs_factor(cores);
    h.cpu.cores = cores;
    // A client x86 part's L3 is shared by all its cores: 8 MiB refilled at most at two
    // DDR4-2400 channels' 38.4 GB/s ≈ 218 µs (our assumption of a typical part).
    h.cpu.llc_shared_cores = cores;
    h.cpu.llc_sweep_ns = 218_453;
    h.cpu.clock_mhz = 4_000;
    h.cpu.sched_latency_ns = 6_000_000 * f;
    h.cpu.min_granularity_ns = 750_000 * f;
    h.cpu.wakeup_granularity_ns = 1_000_000 * f;
    h.cpu.sleeper_credit_ns = 3_000_000 * f;
    h.pagecache.reserved_bytes = 4 << 30;
    let halve = |v: &mut u64| *v /= 2;
    for v in [
        &mut h.cpu.context_switch_ns,
        &mut h.cpu.cache_pollution_ns,
        &mut h.cpu.isr_ns,
        &mut h.cpu.timer_irq_ns,
        &mut h.cpu.ipi_ns,
        &mut h.pagecache.page_lookup_ns,
        &mut h.pagecache.page_copy_ns,
        &mut h.pagecache.page_alloc_ns,
        &mut h.pagecache.page_dirty_ns,
        &mut h.pagecache.writeback_page_ns,
        &mut h.pagecache.writeback_end_page_ns,
        &mut h.blk.bio_submit_ns,
        &mut h.blk.merge_check_ns,
        &mut h.blk.hazard_check_ns,
        &mut h.blk.dispatch_ns,
        &mut h.blk.complete_ns,
        &mut h.nvme.queue_rq_ns,
        &mut h.nvme.doorbell_write_ns,
        &mut h.nvme.poll_iteration_ns,
        &mut h.nvme.poll_complete_ns,
        &mut h.nvme.dedcore_handoff_ns,
        &mut h.nvme.accel_register_ns,
        &mut h.app.syscall_ns,
        &mut h.app.net_recv_ns,
        &mut h.app.handoff_ns,
        &mut h.app.reply_ns,
        &mut h.jitter.tick_ns,
        &mut h.jitter.poll_lock_hold_ns,
    ] {
        halve(v);
    }
    h
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
