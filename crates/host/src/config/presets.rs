//! The host presets (`arm8`, `arm8-4g`, `x86-4`) and a host loaded from TOML: a preset
//! plus overrides, merged key by key (`engine::toml_merge`), then validated
//! ([`HostConfig::validate`]). What each default is and why follows.
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

use super::{
    default_adaptive_buffer_high_pct, default_adaptive_buffer_low_pct,
    default_adaptive_dirty_background_ratio_pct, default_adaptive_dirty_ratio_pct, invalid,
    AppConfig, BlkConfig, CompletionMode, CpuConfig, HostConfig, HostConfigError, JitterConfig,
    LoadBalance, Merges, NvmeConfig, PageCacheConfig, PollLock, Scheduler, Switch, WakePlacement,
};

/// Names of the host presets.
pub const HOST_PRESETS: [&str; 3] = ["arm8", "arm8-4g", "x86-4"];

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
