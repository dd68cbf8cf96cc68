//! The machine: the host's layers wired into one state machine, driven by one event queue.
//!
//! Each layer (`cpu`, `pagecache`, `blk`, `nvme`, `app`) keeps its own state and exposes
//! operations; this module routes between them the way the kernel's call paths do, and turns
//! every piece of kernel or user work into a CPU burst on the thread (or interrupt) that does it.
//! A synchronous direct read, end to end:
//!
//! ```text
//! app draws an I/O ─▶ syscall (syscall_ns) ─▶ bio submit + merge search (blk) ─▶ plug flush
//!   ─▶ dispatch (blk) ─▶ nvme_queue_rq + doorbell (nvme) ─▶ HostCommand ──▶ device
//!   device ──▶ DeviceCqe ─▶ MSI: ISR (irq) ─▶ block-layer completion (blk_complete) ─▶ wake
//!   ─▶ context switch (+ cache pollution) (sched) ─▶ the thread continues
//! ```
//!
//! Worked example (arm8 + zssd, the 24 KiB direct reads of `apache` running alone; the means
//! `ullstack sim` prints): syscall 1.0 µs, then software queue 1.5 µs (bio submit), hardware
//! queue 0.8 µs (dispatch), driver 1.2 µs (command + doorbell), device ≈ 14.4 µs, ISR 2.5 µs,
//! block-layer completion 1.5 µs, context switch back 2.5 µs: ≈ 25 µs from the read call to
//! the worker running again. Co-running with `pagerank` on all 8 cores, the device part barely
//! changes but the switch back grows (the worker must win its core back from a CPU hog).
//!
//! The host talks to the device only through messages: [`HostCommand`]s out (collected by
//! [`Host::take_commands`]) and [`DeviceCqe`]s in ([`Host::deliver`]); the `sim` crate advances
//! host and device in lock-step. Like the device, the host exposes two clocks:
//! [`Host::next_event_time`] and [`Host::step`].
//!
//! ## Per-request timestamps and the latency breakdown
//! Each request records when its first bio entered the block layer, when it was dispatched,
//! when the driver started on it, when the doorbell rang, when the CQE landed and when its
//! completion work started and ended. Per class, the run reports the mean time in each layer:
//! software queue (block-layer entry → dispatch: submission CPU, plug and queue waits), hardware
//! queue (dispatch work), driver (command build + doorbell), device (doorbell → CQE, split into
//! an estimated service time — the fastest time the run saw for the same direction and size —
//! and the queueing beyond it), irq (CQE → completion work starts: waiting for the core + ISR),
//! poll (CQE → a poller reaps it), block-layer completion, and context switch (a woken thread's
//! wait for its core, switch included). Means are per request, so they add up to the mean
//! request latency plus the wake-up.
//!
//! ## Run end
//! At the configured duration clients stop sending, offline and fio threads stop at their next
//! step, and the flusher only serves writers still blocked on the dirty limit; everything in
//! flight drains. [`Host::finish`] checks that every request completed exactly once, that
//! nothing is left in the block layer, and that the page cache's counters agree with its pages.

use std::collections::VecDeque;

use engine::rng::exp_ns;
use engine::{stream, EventQueue, IoClass, IoOp, LatencyHistogram, SimRng, SimTime};
use serde::Serialize;
use workload::{Buffering, IoGenerator, Op, ProfileGenerator};

use crate::app::{
    FioIo, FioJobResult, FioThread, IoGaps, IoSource, OnlineReq, OnlineState, ProcState, Process,
    ProcessKind, ProcessReport, ProcessSpec, TraceMode, Workload,
};
use crate::blk::{BioOwner, Blk, BlkStats, QueueKind, SubmitOutcome};
use crate::config::{CompletionMode, HostConfig, Switch};
use crate::cpu::{Cat, CoreOutcome, CoreStats, Cpu, IrqAction, IrqWork, RunState, UNTIL_POKED};
use crate::nvme::{self, DeviceCqe, HostCommand, NvmeStats, QueuePairSpec};
use crate::pagecache::{Lookup, PageCache, PageCacheStats, ReadAhead, NIL};
use crate::PAGE_BYTES;

const SECTORS_PER_PAGE: u64 = PAGE_BYTES / 512;

/// Host events.
#[derive(Clone, Copy, Debug)]
pub enum Ev {
    /// A core's next decision point (stale unless `gen` matches).
    Core { core: u16, gen: u32 },
    /// A completion entry landed in host memory.
    Cqe { cqid: u16, cid: u32 },
    /// A sleeping thread's timer expires.
    Timer { thread: u32 },
    /// An online service's client sends its next request.
    Arrival { proc: u32 },
    /// A request reaches the server.
    ServerRx { proc: u32, req: u32 },
    /// A reply reaches the client.
    ClientRx { proc: u32, req: u32 },
    /// The flusher's periodic wake-up (`dirty_writeback_interval_ns`).
    FlushTick,
    /// The run's duration is over.
    Stop,
}

/// Errors building a host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Config(#[from] crate::config::HostConfigError),
    #[error("process `{process}`: {source}")]
    Generator {
        process: String,
        source: workload::GenError,
    },
    #[error("the processes' files need {need_bytes} bytes but the device holds {capacity_bytes}")]
    Capacity {
        need_bytes: u64,
        capacity_bytes: u64,
    },
    #[error("process `{process}`: {reason}")]
    Unsupported { process: String, reason: String },
    #[error("run ended inconsistently: {0}")]
    Leak(String),
}

/// What a thread does when its current burst ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    App,
    IoEnter,
    PcRead,
    PcCopy,
    PcWrite,
    BioSubmit,
    SubmitRetry,
    Dispatch,
    Driver,
    IoWaitDone,
    ThrottleDone,
    Poll,
    Reap,
    HybridWake,
    FlushPages,
    FsyncStart,
    FsyncPages,
    FsyncDone,
    Reply,
    ServerHandoff,
    FioReap,
}

/// Why a blocked thread sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    None,
    Io,
    ReqAlloc,
    Throttle,
    Rx,
    Work,
    Timer,
    FlusherIdle,
    FioEvents,
    Fsync,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Direct,
    Buffered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterIo {
    Finish,
    Copy,
}

/// The system call a thread is in.
#[derive(Clone, Copy, Debug)]
struct IoCtx {
    op: IoOp,
    file: u32,
    offset_bytes: u64,
    bytes: u64,
    page: u64,
    pages: u64,
    path: Path,
    completion: CompletionMode,
    hctx: u16,
    started: SimTime,
    /// The thread waits for its bios (false: flusher, async fio).
    wait: bool,
    after: AfterIo,
    fio_slot: u32,
}

impl Default for IoCtx {
    fn default() -> Self {
        IoCtx {
            op: IoOp::Read,
            file: 0,
            offset_bytes: 0,
            bytes: 0,
            page: 0,
            pages: 0,
            path: Path::Direct,
            completion: CompletionMode::Interrupt,
            hctx: 0,
            started: SimTime::ZERO,
            wait: true,
            after: AfterIo::Finish,
            fio_slot: NIL,
        }
    }
}

enum Role {
    Server { req: u32 },
    Worker { req: u32, instr_left: u64 },
    Offline,
    Fio(Box<FioThread>),
    Flusher,
}

struct Thread {
    proc: u32,
    class: IoClass,
    role: Role,
    step: Step,
    wait: Wait,
    instr_to_io: u64,
    mean_gap: u64,
    gaps: IoGaps,
    gen: Option<ProfileGenerator>,
    rng: SimRng,
    io: IoCtx,
    bios: Vec<u32>,
    next_bio: usize,
    plug: Vec<u32>,
    reap: Vec<u32>,
    pending: u32,
    dispatching: u32,
    bio_started: SimTime,
    reap_started: SimTime,
    ra: ReadAhead,
    /// File this thread is writing back for `fsync` (`NIL` when not in fsync).
    fsync_file: u32,
    /// Run of pages being written back by `fsync`: (first page, pages, owner class).
    fsync_run: (u64, u32, IoClass),
    /// Buffered writes done (for `fsync_every_writes`).
    writes: u64,
}

/// The flusher's state.
#[derive(Default)]
struct Flush {
    thread: u32,
    chunk_pages: u32,
    in_wave: bool,
    hint_pages: u32,
    periodic_due: bool,
    run: (u32, u64, u32, IoClass),
}

#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    sum_ns: u128,
}

/// Sums of per-layer times of one class.
#[derive(Clone, Debug, Default)]
struct BreakdownAcc {
    requests: u64,
    sw: Acc,
    hw: Acc,
    driver: Acc,
    device: Acc,
    irq: Acc,
    poll: Acc,
    blk_complete: Acc,
    ctx_switch: Acc,
    /// Requests and device time per (direction, size in 4 KiB units).
    device_by_shape: Vec<(u64, u128)>,
}

const SHAPES_PER_OP: usize = 257;

fn shape_index(op: IoOp, sectors: u32) -> usize {
    let units = (sectors as u64).div_ceil(SECTORS_PER_PAGE).clamp(1, 256) as usize;
    match op {
        IoOp::Read => units,
        _ => SHAPES_PER_OP + units,
    }
}

/// Mean nanoseconds per request spent in each layer (one class).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Breakdown {
    /// Requests the means are over.
    pub requests: u64,
    pub software_queue: u64,
    pub hardware_queue: u64,
    pub driver: u64,
    /// Device time beyond the fastest seen for the same direction and size (estimate).
    pub device_queue: u64,
    /// The fastest device time seen for the same direction and size (estimate of service).
    pub device_service: u64,
    pub irq: u64,
    pub poll: u64,
    pub blk_complete: u64,
    pub context_switch: u64,
}

/// Everything a run of the host produced.
#[derive(Clone, Debug)]
pub struct HostReport {
    pub end: SimTime,
    pub processes: Vec<ProcessReport>,
    pub cores: Vec<CoreStats>,
    /// Indexed by `IoClass::index`.
    pub breakdown: [Breakdown; 2],
    /// Block-layer request latency (first bio in → completion done), by class.
    pub request_latency: [LatencyHistogram; 2],
    pub pagecache: PageCacheStats,
    pub blk: BlkStats,
    pub nvme: NvmeStats,
    pub events: u64,
    pub commands: u64,
}

/// The host model.
pub struct Host {
    cfg: HostConfig,
    events: EventQueue<Ev>,
    cpu: Cpu,
    pc: PageCache,
    blk: Blk,
    threads: Vec<Thread>,
    procs: Vec<Process>,
    flush: Flush,
    throttled: Vec<u32>,
    fsync_waiters: Vec<u32>,
    out: Vec<HostCommand>,
    now: SimTime,
    duration: SimTime,
    stopping: bool,
    nvme: NvmeStats,
    breakdown: [BreakdownAcc; 2],
    device_min_ns: Vec<u64>,
    request_latency: [LatencyHistogram; 2],
    scratch: Vec<u32>,
    commands_sent: u64,
    cqes_received: u64,
    errors: Vec<String>,
    queue_pairs: Vec<QueuePairSpec>,
}

impl Host {
    /// A host running `procs` for `duration` on a device of `device_capacity_bytes`.
    pub fn new(
        cfg: &HostConfig,
        procs: Vec<ProcessSpec>,
        seed: u64,
        duration: SimTime,
        device_capacity_bytes: u64,
    ) -> Result<Host, HostError> {
        cfg.validate()?;
        let cores = cfg.cpu.cores as u16;
        let mut cpu = Cpu::new(&cfg.cpu);
        let mut pc = PageCache::new(
            cfg.page_cache_pages(),
            cfg.pagecache.read_ahead_max_bytes,
            cfg.pagecache.dirty_background_ratio_pct,
            cfg.pagecache.dirty_ratio_pct,
        );
        let blk = Blk::new(&cfg.blk, cores, cfg.nvme.queue_depth, cfg.nr_requests());
        let mut threads: Vec<Thread> = Vec::new();
        let mut processes: Vec<Process> = Vec::new();
        let mut events = EventQueue::with_capacity(4096);
        let mut next_core = 0u16;
        let mut place = |cpu: &mut Cpu, class: IoClass| {
            let c = next_core;
            next_core = (next_core + 1) % cores;
            cpu.add_thread(c, class)
        };
        let mut base_bytes = 0u64;
        const FILE_ALIGN_BYTES: u64 = 1 << 20; // files start on 1 MiB boundaries
        for (pi, spec) in procs.into_iter().enumerate() {
            let file_bytes = spec.file_bytes / PAGE_BYTES * PAGE_BYTES;
            if file_bytes < 16 * PAGE_BYTES {
                return Err(HostError::Unsupported {
                    process: spec.name.clone(),
                    reason: format!("file_bytes {} is below 64 KiB", spec.file_bytes),
                });
            }
            let need = base_bytes + file_bytes;
            if need > device_capacity_bytes {
                return Err(HostError::Capacity {
                    need_bytes: need,
                    capacity_bytes: device_capacity_bytes,
                });
            }
            let file = pc.add_file(base_bytes / 512, file_bytes / PAGE_BYTES);
            base_bytes = need.div_ceil(FILE_ALIGN_BYTES) * FILE_ALIGN_BYTES;
            let pid = pi as u32;
            let name = spec.name.clone();
            let mut new_thread = |cpu: &mut Cpu,
                                  threads: &mut Vec<Thread>,
                                  role: Role,
                                  tag: &str,
                                  gen: Option<ProfileGenerator>,
                                  mean_gap: u64| {
                let t = place(cpu, spec.class);
                debug_assert_eq!(t as usize, threads.len());
                threads.push(Thread {
                    proc: pid,
                    class: spec.class,
                    role,
                    step: Step::App,
                    wait: Wait::None,
                    instr_to_io: 0,
                    mean_gap,
                    gaps: spec.io_gaps,
                    gen,
                    rng: stream(seed, &format!("proc.{pi}.{name}.{tag}")),
                    io: IoCtx::default(),
                    bios: Vec::with_capacity(8),
                    next_bio: 0,
                    plug: Vec::with_capacity(cfg.blk.plug_max_requests as usize),
                    reap: Vec::with_capacity(8),
                    pending: 0,
                    dispatching: NIL,
                    bio_started: SimTime::ZERO,
                    reap_started: SimTime::ZERO,
                    ra: ReadAhead::default(),
                    fsync_file: NIL,
                    fsync_run: (0, 0, IoClass::Throughput),
                    writes: 0,
                });
                t
            };
            let state = match &spec.workload {
                Workload::Profile(profile) => {
                    let mean_gap = profile.mean_instructions_between_ios();
                    let generator = || {
                        ProfileGenerator::new(*profile, spec.io_size, 0, file_bytes).map_err(|e| {
                            HostError::Generator {
                                process: name.clone(),
                                source: e,
                            }
                        })
                    };
                    if spec.kind() == ProcessKind::Online {
                        if spec.requests_per_sec == 0 || spec.threads == 0 {
                            return Err(HostError::Unsupported {
                                process: name.clone(),
                                reason: "an online service needs requests_per_sec ≥ 1 and threads (workers) ≥ 1".into(),
                            });
                        }
                        let server = new_thread(
                            &mut cpu,
                            &mut threads,
                            Role::Server { req: NIL },
                            "server",
                            None,
                            mean_gap,
                        );
                        threads[server as usize].wait = Wait::Rx;
                        let mut idle = Vec::new();
                        for w in 0..spec.threads {
                            let t = new_thread(
                                &mut cpu,
                                &mut threads,
                                Role::Worker {
                                    req: NIL,
                                    instr_left: 0,
                                },
                                &format!("worker{w}"),
                                Some(generator()?),
                                mean_gap,
                            );
                            threads[t as usize].wait = Wait::Work;
                            idle.push(t);
                        }
                        let mut arrival_rng = stream(seed, &format!("proc.{pi}.{name}.arrivals"));
                        let first = arrival_gap(&spec, &mut arrival_rng);
                        events.schedule(SimTime(first), Ev::Arrival { proc: pid });
                        ProcState::Online(Box::new(OnlineState {
                            server,
                            idle_workers: idle,
                            rx: VecDeque::with_capacity(64),
                            work: VecDeque::with_capacity(64),
                            reqs: Vec::with_capacity(64),
                            free_reqs: Vec::with_capacity(64),
                            arrival_rng,
                            response: LatencyHistogram::new(),
                            completed: 0,
                        }))
                    } else {
                        if spec.threads == 0 {
                            return Err(HostError::Unsupported {
                                process: name.clone(),
                                reason: "an offline job needs threads ≥ 1".into(),
                            });
                        }
                        for i in 0..spec.threads {
                            new_thread(
                                &mut cpu,
                                &mut threads,
                                Role::Offline,
                                &format!("thread{i}"),
                                Some(generator()?),
                                mean_gap,
                            );
                        }
                        ProcState::Offline
                    }
                }
                Workload::Fio { jobs, .. } => {
                    let mut results = Vec::new();
                    for spec_job in jobs {
                        if spec_job.group != 0 {
                            return Err(HostError::Unsupported {
                                process: name.clone(),
                                reason: format!(
                                    "job `{}` uses stonewall; jobs of a system run all run together",
                                    spec_job.name
                                ),
                            });
                        }
                        if spec_job.block_size_bytes % 512 != 0 {
                            return Err(HostError::Unsupported {
                                process: name.clone(),
                                reason: format!(
                                    "job `{}`: bs {} is not a multiple of 512",
                                    spec_job.name, spec_job.block_size_bytes
                                ),
                            });
                        }
                        let job_index = match results
                            .iter()
                            .position(|r: &FioJobResult| r.name == spec_job.name)
                        {
                            Some(i) => i,
                            None => {
                                results.push(FioJobResult {
                                    name: spec_job.name.clone(),
                                    ..Default::default()
                                });
                                results.len() - 1
                            }
                        };
                        for clone in 0..spec_job.numjobs {
                            let gen =
                                IoGenerator::new(spec_job, clone, file_bytes).map_err(|e| {
                                    HostError::Generator {
                                        process: name.clone(),
                                        source: e,
                                    }
                                })?;
                            let direct = spec_job.buffering == Buffering::Direct;
                            let asynchronous =
                                spec_job.engine == workload::IoEngine::Async && direct;
                            let fio = FioThread {
                                job: job_index as u32,
                                source: IoSource::Job(gen),
                                latency_at_completion: false,
                                spec_depth: spec_job.effective_iodepth().max(1),
                                asynchronous,
                                polled: spec_job.completion == workload::Completion::Polled,
                                direct,
                                thinktime_ns: spec_job.thinktime_ns,
                                rate_interval_ns: spec_job
                                    .rate_iops
                                    .filter(|&r| r > 0)
                                    .map(|r| 1_000_000_000 / r),
                                runtime_ns: spec_job.runtime_ns,
                                ramp_ns: spec_job.ramp_time_ns,
                                started: SimTime::ZERO,
                                issued: 0,
                                exhausted: false,
                                in_flight: 0,
                                slots: Vec::new(),
                                free_slots: Vec::new(),
                                completed: Vec::new(),
                                reaping: Vec::new(),
                            };
                            let t = new_thread(
                                &mut cpu,
                                &mut threads,
                                Role::Fio(Box::new(fio)),
                                &format!("{}.{clone}", spec_job.name),
                                None,
                                0,
                            );
                            if let Some(seed_mix) = spec_job.randseed {
                                threads[t as usize].rng = stream(
                                    seed ^ seed_mix,
                                    &format!("proc.{pi}.{name}.{}.{clone}", spec_job.name),
                                );
                            }
                        }
                    }
                    ProcState::Fio { jobs: results }
                }
                Workload::Trace { records, mode, .. } => {
                    let open_loop = *mode == TraceMode::OpenLoop;
                    for r in records.iter() {
                        if r.bytes == 0 || r.offset_bytes % 512 != 0 || r.bytes % 512 != 0 {
                            return Err(HostError::Unsupported {
                                process: name.clone(),
                                reason: format!(
                                    "trace record at {} ns: offset {} and length {} must be positive multiples of 512",
                                    r.at_ns, r.offset_bytes, r.bytes
                                ),
                            });
                        }
                        if r.offset_bytes + r.bytes > file_bytes {
                            return Err(HostError::Unsupported {
                                process: name.clone(),
                                reason: format!(
                                    "trace record at {} ns ends at byte {}, past the process's file ({file_bytes} bytes; raise file_bytes)",
                                    r.at_ns,
                                    r.offset_bytes + r.bytes
                                ),
                            });
                        }
                    }
                    const OPEN_LOOP_MAX_IN_FLIGHT: u32 = 1 << 16; // far beyond any device queue
                    let fio = FioThread {
                        job: 0,
                        source: IoSource::Trace {
                            records: records.clone(),
                            next: 0,
                            open_loop,
                        },
                        latency_at_completion: true,
                        spec_depth: if open_loop {
                            OPEN_LOOP_MAX_IN_FLIGHT
                        } else {
                            1
                        },
                        asynchronous: open_loop,
                        polled: false,
                        direct: true,
                        thinktime_ns: 0,
                        rate_interval_ns: None,
                        runtime_ns: None,
                        ramp_ns: 0,
                        started: SimTime::ZERO,
                        issued: 0,
                        exhausted: false,
                        in_flight: 0,
                        slots: Vec::new(),
                        free_slots: Vec::new(),
                        completed: Vec::new(),
                        reaping: Vec::new(),
                    };
                    new_thread(
                        &mut cpu,
                        &mut threads,
                        Role::Fio(Box::new(fio)),
                        "trace",
                        None,
                        0,
                    );
                    ProcState::Fio {
                        jobs: vec![FioJobResult {
                            name: name.clone(),
                            ..Default::default()
                        }],
                    }
                }
            };
            processes.push(Process {
                spec,
                file,
                state,
                instructions: 0,
                ios: 0,
                io_latency: LatencyHistogram::new(),
            });
        }
        // The flusher: a kernel thread with no process.
        let flusher = place(&mut cpu, IoClass::Throughput);
        threads.push(Thread {
            proc: u32::MAX,
            class: IoClass::Throughput,
            role: Role::Flusher,
            step: Step::App,
            wait: Wait::FlusherIdle,
            instr_to_io: 0,
            mean_gap: 0,
            gaps: IoGaps::Fixed,
            gen: None,
            rng: stream(seed, "kernel.flusher"),
            io: IoCtx::default(),
            bios: Vec::with_capacity(4),
            next_bio: 0,
            plug: Vec::with_capacity(cfg.blk.plug_max_requests as usize),
            reap: Vec::new(),
            pending: 0,
            dispatching: NIL,
            bio_started: SimTime::ZERO,
            reap_started: SimTime::ZERO,
            ra: ReadAhead::default(),
            fsync_file: NIL,
            fsync_run: (0, 0, IoClass::Throughput),
            writes: 0,
        });
        events.schedule(duration, Ev::Stop);
        let first_tick = SimTime(cfg.pagecache.dirty_writeback_interval_ns);
        if first_tick < duration {
            events.schedule(first_tick, Ev::FlushTick);
        }
        let mut host = Host {
            cfg: cfg.clone(),
            events,
            cpu,
            pc,
            blk,
            threads,
            procs: processes,
            flush: Flush {
                thread: flusher,
                ..Default::default()
            },
            throttled: Vec::new(),
            fsync_waiters: Vec::new(),
            out: Vec::with_capacity(64),
            now: SimTime::ZERO,
            duration,
            stopping: false,
            nvme: NvmeStats::default(),
            breakdown: [BreakdownAcc::default(), BreakdownAcc::default()],
            device_min_ns: vec![u64::MAX; 2 * SHAPES_PER_OP],
            request_latency: [LatencyHistogram::new(), LatencyHistogram::new()],
            scratch: Vec::with_capacity(16),
            commands_sent: 0,
            cqes_received: 0,
            errors: Vec::new(),
            queue_pairs: nvme::queue_pairs(cores, cfg.nvme.queue_depth),
        };
        for acc in &mut host.breakdown {
            acc.device_by_shape = vec![(0, 0); 2 * SHAPES_PER_OP];
        }
        // Threads that run from the start: offline jobs and fio clones.
        for t in 0..host.threads.len() {
            let starts = matches!(host.threads[t].role, Role::Offline | Role::Fio(_));
            if starts {
                let th = &mut host.threads[t];
                th.instr_to_io = draw_gap(th);
                host.cpu.wake(SimTime::ZERO, t as u32, 0, Cat::Sched);
            }
        }
        host.cpu.reschedule(SimTime::ZERO, &mut host.events);
        Ok(host)
    }

    /// Queue pairs to create on the device before the run (admin commands).
    pub fn queue_pairs(&self) -> &[QueuePairSpec] {
        &self.queue_pairs
    }

    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    /// When the host next has something to do.
    pub fn next_event_time(&self) -> Option<SimTime> {
        self.events.peek_time()
    }

    /// Runs the host's next event. Commands it issued wait in [`Host::take_commands`].
    pub fn step(&mut self) {
        let Some((t, ev)) = self.events.pop() else {
            return;
        };
        self.now = t;
        self.handle(ev);
        self.cpu.reschedule(t, &mut self.events);
    }

    /// Moves the commands issued so far into `out` (in issue order, non-decreasing `at`).
    pub fn take_commands(&mut self, out: &mut Vec<HostCommand>) {
        out.append(&mut self.out);
    }

    /// A completion entry from the device (its `at` is never before the host's last event).
    pub fn deliver(&mut self, cqe: DeviceCqe) {
        if !cqe.success {
            self.errors.push(format!(
                "device failed command {} on CQ {}",
                cqe.cid, cqe.cqid
            ));
        }
        self.nvme.last_write_buffer_pct = cqe.write_buffer_pct;
        let h = self.blk.hctx_of_queue(cqe.cqid) as usize;
        debug_assert_eq!(
            cqe.interrupt,
            self.blk.hctxs[h].kind == QueueKind::Interrupt,
            "CQ {} interrupt state disagrees with its queue kind",
            cqe.cqid
        );
        self.events.schedule(
            cqe.at,
            Ev::Cqe {
                cqid: cqe.cqid,
                cid: cqe.cid,
            },
        );
    }

    /// Commands issued so far.
    pub fn commands_sent(&self) -> u64 {
        self.commands_sent
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Core { core, gen } => match self.cpu.on_event(now, core, gen) {
                CoreOutcome::Nothing => {}
                CoreOutcome::BurstDone { thread } => self.run_step(thread),
                CoreOutcome::Irq { action, started } => self.irq_done(action, started),
            },
            Ev::Cqe { cqid, cid } => self.on_cqe(cqid, cid),
            Ev::Timer { thread } => {
                let core = self.cpu.threads[thread as usize].core;
                self.cpu.count_interrupt(core);
                self.cpu.raise_irq(
                    now,
                    core,
                    IrqWork {
                        ns: self.cfg.cpu.timer_irq_ns,
                        cat: Cat::Irq,
                        action: IrqAction::Wake { thread },
                        nvme: false,
                        class: None,
                    },
                );
            }
            Ev::Arrival { proc } => self.on_arrival(proc),
            Ev::ServerRx { proc, req } => self.on_server_rx(proc, req),
            Ev::ClientRx { proc, req } => self.on_client_rx(proc, req),
            Ev::FlushTick => {
                self.flush.periodic_due = true;
                self.kick_flusher();
                let next = now + self.cfg.pagecache.dirty_writeback_interval_ns;
                if next < self.duration {
                    self.events.schedule(next, Ev::FlushTick);
                }
            }
            Ev::Stop => self.stopping = true,
        }
    }

    // ---------------------------------------------------------------- thread primitives

    fn burst(&mut self, t: u32, ns: u64, cat: Cat, then: Step) {
        self.threads[t as usize].step = then;
        self.cpu.set_burst(self.now, t, ns, cat);
    }

    fn sleep(&mut self, t: u32, wait: Wait, then: Step) {
        let th = &mut self.threads[t as usize];
        debug_assert_eq!(th.wait, Wait::None);
        th.wait = wait;
        th.step = then;
        self.cpu.block(self.now, t);
    }

    fn wake(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        debug_assert_ne!(th.wait, Wait::None, "thread {t} woken while not sleeping");
        th.wait = Wait::None;
        self.cpu.wake(self.now, t, 0, Cat::Sched);
    }

    fn exit(&mut self, t: u32) {
        self.cpu.exit(self.now, t);
    }

    fn core_of(&self, t: u32) -> u16 {
        self.cpu.threads[t as usize].core
    }

    fn run_step(&mut self, t: u32) {
        let step = self.threads[t as usize].step;
        match step {
            Step::App => self.app_next(t),
            Step::IoEnter => self.io_enter(t),
            Step::PcRead => self.pc_read(t),
            Step::PcCopy => self.io_finished(t),
            Step::PcWrite => self.pc_write(t),
            Step::BioSubmit => self.bio_submitted(t),
            Step::SubmitRetry => self.submission_next(t),
            Step::Dispatch => {
                let r = self.threads[t as usize].dispatching;
                self.blk.reqs[r as usize].t_driver = self.now;
                let ns = self.cfg.nvme.queue_rq_ns + self.cfg.nvme.doorbell_write_ns;
                self.burst(t, ns, Cat::Nvme, Step::Driver);
            }
            Step::Driver => {
                let r = std::mem::replace(&mut self.threads[t as usize].dispatching, NIL);
                self.emit(r);
                self.dispatch_next(t);
            }
            Step::IoWaitDone => {
                let th = &self.threads[t as usize];
                let sched = &self.cpu.threads[t as usize];
                let waited = sched.running_since.saturating_since(sched.woken_at);
                self.breakdown[th.class.index()].ctx_switch.sum_ns += waited as u128;
                self.after_io(t);
            }
            Step::ThrottleDone => self.write_done(t),
            Step::Poll => self.poll_check(t),
            Step::Reap => self.reap_done(t),
            Step::HybridWake => self.start_poll(t),
            Step::FlushPages => self.flush_pages_done(t),
            Step::FsyncStart => self.fsync_next(t),
            Step::FsyncPages => self.fsync_pages_done(t),
            Step::FsyncDone => {
                self.threads[t as usize].fsync_file = NIL;
                self.io_finished(t)
            }
            Step::Reply => self.worker_replied(t),
            Step::ServerHandoff => self.server_handoff(t),
            Step::FioReap => self.fio_reaped(t),
        }
    }

    // ---------------------------------------------------------------- applications

    fn app_next(&mut self, t: u32) {
        match self.threads[t as usize].role {
            Role::Server { .. } => self.server_next(t),
            Role::Worker { .. } => self.worker_next(t),
            Role::Offline => self.offline_next(t),
            Role::Fio(_) => self.fio_next(t),
            Role::Flusher => self.flusher_next(t),
        }
    }

    fn instructions_burst(&mut self, t: u32, n: u64) {
        let ns = self.cfg.instructions_ns(n);
        let p = self.threads[t as usize].proc as usize;
        self.procs[p].instructions += n;
        self.burst(t, ns, Cat::User, Step::App);
    }

    /// Starts the thread's next profile I/O (synchronous) and draws the gap to the one after.
    fn profile_io(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        let gen = th.gen.as_mut().expect("profile threads have a generator");
        let req = gen.next(&mut th.rng);
        th.instr_to_io = draw_gap(th);
        let p = th.proc as usize;
        let path = match self.procs[p].spec.buffering {
            Buffering::Direct => Path::Direct,
            Buffering::Buffered => Path::Buffered,
        };
        let op = match req.op {
            Op::Read => IoOp::Read,
            Op::Write => IoOp::Write,
        };
        let mode = self.cfg.nvme.completion;
        self.start_io(
            t,
            op,
            req.offset_bytes,
            req.len_bytes,
            path,
            mode,
            true,
            NIL,
        );
    }

    fn offline_next(&mut self, t: u32) {
        if self.stopping {
            return self.exit(t);
        }
        let n = self.threads[t as usize].instr_to_io;
        if n == 0 {
            return self.profile_io(t);
        }
        self.threads[t as usize].instr_to_io = 0;
        self.instructions_burst(t, n);
    }

    fn on_arrival(&mut self, p: u32) {
        if self.stopping {
            return;
        }
        let now = self.now;
        let app = &self.cfg.app;
        let (send, one_way) = (app.client_send_ns, app.net_one_way_ns);
        let spec = self.procs[p as usize].spec.clone_rate();
        let ProcState::Online(online) = &mut self.procs[p as usize].state else {
            unreachable!("arrivals only for online services")
        };
        let OnlineState {
            reqs,
            free_reqs,
            arrival_rng,
            ..
        } = &mut **online;
        let rec = OnlineReq {
            sent_at: now,
            live: true,
        };
        let req = match free_reqs.pop() {
            Some(r) => {
                reqs[r as usize] = rec;
                r
            }
            None => {
                reqs.push(rec);
                (reqs.len() - 1) as u32
            }
        };
        let gap = arrival_gap_of(spec, arrival_rng);
        self.events
            .schedule(now + send + one_way, Ev::ServerRx { proc: p, req });
        if now + gap < self.duration {
            self.events.schedule(now + gap, Ev::Arrival { proc: p });
        }
    }

    fn on_server_rx(&mut self, p: u32, req: u32) {
        let ProcState::Online(online) = &mut self.procs[p as usize].state else {
            unreachable!()
        };
        let OnlineState { server, rx, .. } = &mut **online;
        rx.push_back(req);
        let server = *server;
        if self.threads[server as usize].wait == Wait::Rx {
            self.wake(server);
        }
    }

    fn on_client_rx(&mut self, p: u32, req: u32) {
        let now = self.now;
        let ProcState::Online(online) = &mut self.procs[p as usize].state else {
            unreachable!()
        };
        let OnlineState {
            reqs,
            free_reqs,
            response,
            completed,
            ..
        } = &mut **online;
        let r = &mut reqs[req as usize];
        debug_assert!(r.live);
        r.live = false;
        response.record(now - r.sent_at);
        *completed += 1;
        free_reqs.push(req);
    }

    fn server_next(&mut self, t: u32) {
        let p = self.threads[t as usize].proc as usize;
        let ProcState::Online(online) = &mut self.procs[p].state else {
            unreachable!()
        };
        let OnlineState { rx, .. } = &mut **online;
        match rx.pop_front() {
            Some(req) => {
                self.threads[t as usize].role = Role::Server { req };
                let ns = self.cfg.app.net_recv_ns + self.cfg.app.handoff_ns;
                self.burst(t, ns, Cat::Syscall, Step::ServerHandoff);
            }
            None => self.sleep(t, Wait::Rx, Step::App),
        }
    }

    fn server_handoff(&mut self, t: u32) {
        let Role::Server { req } = std::mem::replace(
            &mut self.threads[t as usize].role,
            Role::Server { req: NIL },
        ) else {
            unreachable!()
        };
        let p = self.threads[t as usize].proc as usize;
        let ipr = self.procs[p].spec.instructions_per_request;
        let ProcState::Online(online) = &mut self.procs[p].state else {
            unreachable!()
        };
        let OnlineState {
            idle_workers, work, ..
        } = &mut **online;
        match idle_workers.pop() {
            Some(w) => {
                self.threads[w as usize].role = Role::Worker {
                    req,
                    instr_left: ipr,
                };
                self.wake(w);
            }
            None => work.push_back(req),
        }
        self.server_next(t);
    }

    fn worker_next(&mut self, t: u32) {
        let p = self.threads[t as usize].proc as usize;
        let Role::Worker { req, instr_left } = self.threads[t as usize].role else {
            unreachable!()
        };
        if req == NIL {
            let ipr = self.procs[p].spec.instructions_per_request;
            let ProcState::Online(online) = &mut self.procs[p].state else {
                unreachable!()
            };
            let OnlineState {
                idle_workers, work, ..
            } = &mut **online;
            match work.pop_front() {
                Some(r) => {
                    self.threads[t as usize].role = Role::Worker {
                        req: r,
                        instr_left: ipr,
                    };
                    return self.worker_next(t);
                }
                None => {
                    idle_workers.push(t);
                    return self.sleep(t, Wait::Work, Step::App);
                }
            }
        }
        if instr_left == 0 {
            let ns = self.cfg.app.reply_ns;
            return self.burst(t, ns, Cat::Syscall, Step::Reply);
        }
        let gap = self.threads[t as usize].instr_to_io;
        if gap == 0 {
            return self.profile_io(t);
        }
        let n = gap.min(instr_left);
        let th = &mut self.threads[t as usize];
        th.instr_to_io -= n;
        th.role = Role::Worker {
            req,
            instr_left: instr_left - n,
        };
        self.instructions_burst(t, n);
    }

    fn worker_replied(&mut self, t: u32) {
        let Role::Worker { req, .. } = std::mem::replace(
            &mut self.threads[t as usize].role,
            Role::Worker {
                req: NIL,
                instr_left: 0,
            },
        ) else {
            unreachable!()
        };
        let p = self.threads[t as usize].proc;
        self.events.schedule(
            self.now + self.cfg.app.net_one_way_ns,
            Ev::ClientRx { proc: p, req },
        );
        self.worker_next(t);
    }

    // ---------------------------------------------------------------- fio

    fn fio(&mut self, t: u32) -> &mut FioThread {
        match &mut self.threads[t as usize].role {
            Role::Fio(f) => f,
            _ => unreachable!("not a fio thread"),
        }
    }

    fn fio_can_issue(&self, f: &FioThread) -> bool {
        if self.stopping || f.exhausted || f.in_flight >= f.spec_depth {
            return false;
        }
        match f.runtime_ns {
            Some(r) => self.now < f.started + f.ramp_ns + r,
            None => true,
        }
    }

    fn fio_next(&mut self, t: u32) {
        let now = self.now;
        if self.fio(t).issued == 0 && self.fio(t).in_flight == 0 {
            self.fio(t).started = now;
            let p = self.threads[t as usize].proc as usize;
            let job = self.fio(t).job as usize;
            if let ProcState::Fio { jobs } = &mut self.procs[p].state {
                let j = &mut jobs[job];
                j.first_start_ns = Some(j.first_start_ns.map_or(now.0, |s| s.min(now.0)));
            }
        }
        let (asynchronous, can) = {
            let Role::Fio(f) = &self.threads[t as usize].role else {
                unreachable!()
            };
            (f.asynchronous, self.fio_can_issue(f))
        };
        if asynchronous && !self.fio(t).completed.is_empty() {
            let f = self.fio(t);
            std::mem::swap(&mut f.completed, &mut f.reaping);
            let ns = self.cfg.app.syscall_ns;
            return self.burst(t, ns, Cat::Syscall, Step::FioReap);
        }
        if !can {
            if asynchronous && self.fio(t).in_flight > 0 {
                return self.sleep(t, Wait::FioEvents, Step::App);
            }
            return self.exit(t);
        }
        let f = self.fio(t);
        let allowed = match &f.source {
            IoSource::Trace {
                records,
                next,
                open_loop: true,
            } => records.get(*next).map(|r| f.started + r.at_ns),
            _ => f.rate_interval_ns.map(|i| f.started + f.issued * i),
        };
        if let Some(allowed) = allowed {
            if allowed > now {
                self.events.schedule(allowed, Ev::Timer { thread: t });
                return self.sleep(t, Wait::Timer, Step::App);
            }
        }
        let th = &mut self.threads[t as usize];
        let Role::Fio(f) = &mut th.role else {
            unreachable!()
        };
        let next = match &mut f.source {
            IoSource::Job(gen) => gen.next(&mut th.rng).map(|r| {
                let op = match r.op {
                    Op::Read => IoOp::Read,
                    Op::Write => IoOp::Write,
                };
                (op, r.offset_bytes, r.len_bytes)
            }),
            IoSource::Trace { records, next, .. } => records.get(*next).map(|r| {
                *next += 1;
                (r.op, r.offset_bytes, r.bytes)
            }),
        };
        let Some((op, offset_bytes, len_bytes)) = next else {
            f.exhausted = true;
            return self.fio_next(t);
        };
        f.issued += 1;
        f.in_flight += 1;
        let path = if f.direct {
            Path::Direct
        } else {
            Path::Buffered
        };
        let mode = match (f.polled, self.cfg.nvme.completion) {
            (false, _) => CompletionMode::Interrupt,
            (true, CompletionMode::Hybrid) => CompletionMode::Hybrid,
            (true, _) => CompletionMode::Polled,
        };
        let slot = if f.asynchronous {
            let io = FioIo {
                read: op == IoOp::Read,
                bytes: len_bytes,
                started: now,
                pending: 0,
                done_at: now,
            };
            match f.free_slots.pop() {
                Some(s) => {
                    f.slots[s as usize] = io;
                    s
                }
                None => {
                    f.slots.push(io);
                    (f.slots.len() - 1) as u32
                }
            }
        } else {
            NIL
        };
        let wait = slot == NIL;
        self.start_io(t, op, offset_bytes, len_bytes, path, mode, wait, slot);
    }

    /// Records one completed fio I/O of thread `t`.
    fn fio_record(&mut self, t: u32, read: bool, bytes: u64, started: SimTime, end: SimTime) {
        let now = end;
        let p = self.threads[t as usize].proc as usize;
        let (job, ramp_end) = {
            let f = self.fio(t);
            f.in_flight -= 1;
            (f.job as usize, f.started + f.ramp_ns)
        };
        let proc = &mut self.procs[p];
        proc.ios += 1;
        proc.io_latency.record(now - started);
        let ProcState::Fio { jobs } = &mut proc.state else {
            unreachable!()
        };
        let j = &mut jobs[job];
        j.last_end_ns = j.last_end_ns.max(now.0);
        if started >= ramp_end {
            if read {
                j.read.record(now - started);
                j.read_bytes += bytes;
            } else {
                j.write.record(now - started);
                j.write_bytes += bytes;
            }
        }
    }

    fn fio_reaped(&mut self, t: u32) {
        let mut reaping = std::mem::take(&mut self.fio(t).reaping);
        for &s in &reaping {
            let io = self.fio(t).slots[s as usize];
            let end = if self.fio(t).latency_at_completion {
                io.done_at
            } else {
                self.now
            };
            self.fio_record(t, io.read, io.bytes, io.started, end);
            self.fio(t).free_slots.push(s);
        }
        reaping.clear();
        self.fio(t).reaping = reaping;
        self.fio_next(t);
    }

    // ---------------------------------------------------------------- the I/O system call

    #[allow(clippy::too_many_arguments)]
    fn start_io(
        &mut self,
        t: u32,
        op: IoOp,
        offset_bytes: u64,
        bytes: u64,
        path: Path,
        completion: CompletionMode,
        wait: bool,
        fio_slot: u32,
    ) {
        let th = &mut self.threads[t as usize];
        let file = self.procs[th.proc as usize].file;
        let page = offset_bytes / PAGE_BYTES;
        let end_page = (offset_bytes + bytes).div_ceil(PAGE_BYTES);
        th.io = IoCtx {
            op,
            file,
            offset_bytes,
            bytes,
            page,
            pages: end_page - page,
            path,
            completion,
            hctx: 0,
            started: self.now,
            wait,
            after: AfterIo::Finish,
            fio_slot,
        };
        let ns = self.cfg.app.syscall_ns;
        self.burst(t, ns, Cat::Syscall, Step::IoEnter);
    }

    fn io_enter(&mut self, t: u32) {
        let io = self.threads[t as usize].io;
        match (io.path, io.op) {
            (Path::Direct, _) => self.direct_bios(t),
            (Path::Buffered, IoOp::Read) => {
                let ns = io.pages * self.cfg.pagecache.page_lookup_ns;
                self.burst(t, ns, Cat::PageCache, Step::PcRead);
            }
            (Path::Buffered, _) => {
                let missing = (io.page..io.page + io.pages)
                    .filter(|&p| !self.pc.present(io.file, p))
                    .count() as u64;
                let c = &self.cfg.pagecache;
                let ns = io.pages * (c.page_lookup_ns + c.page_copy_ns + c.page_dirty_ns)
                    + missing * c.page_alloc_ns;
                self.burst(t, ns, Cat::PageCache, Step::PcWrite);
            }
        }
    }

    fn direct_bios(&mut self, t: u32) {
        let core = self.core_of(t);
        let max = self.cfg.blk.max_request_bytes;
        let th = &mut self.threads[t as usize];
        let io = th.io;
        let kind = if io.wait && io.completion != CompletionMode::Interrupt {
            QueueKind::Poll
        } else {
            QueueKind::Interrupt
        };
        th.io.hctx = self.blk.hctx_of(core, kind);
        th.bios.clear();
        th.next_bio = 0;
        let base = self.pc.files[io.file as usize].base_sector;
        let owner = if io.fio_slot != NIL {
            BioOwner::FioAsync {
                thread: t,
                slot: io.fio_slot,
            }
        } else {
            BioOwner::Direct { thread: t }
        };
        let mut off = 0;
        let mut count = 0;
        while off < io.bytes {
            let len = (io.bytes - off).min(max);
            let sector = base + (io.offset_bytes + off) / 512;
            let sectors = len.div_ceil(512) as u32;
            let b = self.blk.new_bio(io.op, th.class, sector, sectors, owner);
            th.bios.push(b);
            off += len;
            count += 1;
        }
        if io.fio_slot != NIL {
            let Role::Fio(f) = &mut th.role else {
                unreachable!()
            };
            f.slots[io.fio_slot as usize].pending = count;
        } else {
            th.pending += count;
        }
        self.submission_next(t);
    }

    fn pc_read(&mut self, t: u32) {
        let core = self.core_of(t);
        let max_pages = self.cfg.blk.max_request_bytes / PAGE_BYTES;
        let th = &mut self.threads[t as usize];
        let io = th.io;
        let class = th.class;
        let (ra_first, ra_pages) = self.pc.read_ahead(&mut th.ra, io.file, io.page, io.pages);
        th.bios.clear();
        th.next_bio = 0;
        let base = self.pc.files[io.file as usize].base_sector;
        let mut hits = 0;
        let mut misses = 0;
        let mut last_waited = NIL;
        let mut run: Option<(u64, u64)> = None;
        // Creates the bio for a run of missing pages, inserting them locked.
        let flush = |run: &mut Option<(u64, u64)>,
                     th: &mut Thread,
                     pc: &mut PageCache,
                     blk: &mut Blk,
                     waiter: bool| {
            if let Some((start, n)) = run.take() {
                let b = blk.new_bio(
                    IoOp::Read,
                    class,
                    base + start * SECTORS_PER_PAGE,
                    (n * SECTORS_PER_PAGE) as u32,
                    BioOwner::PageRead {
                        file: io.file,
                        first_page: start,
                        pages: n as u32,
                    },
                );
                for q in start..start + n {
                    pc.insert_reading(io.file, q, b);
                }
                if waiter {
                    blk.add_waiter(b, t);
                    th.pending += 1;
                }
                th.bios.push(b);
            }
        };
        for p in io.page..io.page + io.pages {
            match self.pc.lookup(io.file, p) {
                Lookup::Hit => {
                    flush(&mut run, th, &mut self.pc, &mut self.blk, true);
                    hits += 1;
                }
                Lookup::InFlight { bio } => {
                    flush(&mut run, th, &mut self.pc, &mut self.blk, true);
                    if bio != last_waited {
                        self.blk.add_waiter(bio, t);
                        th.pending += 1;
                        last_waited = bio;
                    }
                    hits += 1;
                }
                Lookup::Miss => {
                    misses += 1;
                    run = match run {
                        Some((s, n)) if n < max_pages => Some((s, n + 1)),
                        Some(_) => {
                            flush(&mut run, th, &mut self.pc, &mut self.blk, true);
                            Some((p, 1))
                        }
                        None => Some((p, 1)),
                    };
                }
            }
        }
        flush(&mut run, th, &mut self.pc, &mut self.blk, true);
        let mut ahead = 0;
        for p in ra_first..ra_first + ra_pages {
            if self.pc.present(io.file, p) {
                flush(&mut run, th, &mut self.pc, &mut self.blk, false);
                continue;
            }
            ahead += 1;
            run = match run {
                Some((s, n)) if n < max_pages => Some((s, n + 1)),
                Some(_) => {
                    flush(&mut run, th, &mut self.pc, &mut self.blk, false);
                    Some((p, 1))
                }
                None => Some((p, 1)),
            };
        }
        flush(&mut run, th, &mut self.pc, &mut self.blk, false);
        let s = self.pc.stats.class_mut(class);
        s.read_hits += hits;
        s.read_misses += misses;
        s.readahead_pages += ahead;
        th.io.after = AfterIo::Copy;
        th.io.completion = CompletionMode::Interrupt;
        if !th.bios.is_empty() {
            th.io.hctx = self.blk.hctx_of(core, QueueKind::Interrupt);
            self.submission_next(t);
        } else if th.pending > 0 {
            self.sleep(t, Wait::Io, Step::IoWaitDone);
        } else {
            self.after_io(t);
        }
    }

    fn pc_write(&mut self, t: u32) {
        let now = self.now;
        let th = &self.threads[t as usize];
        let (io, class) = (th.io, th.class);
        for p in io.page..io.page + io.pages {
            self.pc.dirty_page(now, io.file, p, class);
        }
        if self.pc.over_background() {
            self.kick_flusher();
        }
        if self.pc.over_limit() {
            self.pc.stats.class_mut(class).throttled_writes += 1;
            self.throttled.push(t);
            self.kick_flusher();
            return self.sleep(t, Wait::Throttle, Step::ThrottleDone);
        }
        self.write_done(t);
    }

    /// A buffered write is done (and not throttled): fsync if the process asks for it.
    fn write_done(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        th.writes += 1;
        let every = match th.proc {
            u32::MAX => 0,
            p => self.procs[p as usize].spec.fsync_every_writes as u64,
        };
        if every > 0 && th.writes.is_multiple_of(every) {
            th.fsync_file = th.io.file;
            self.pc.stats.fsyncs += 1;
            let ns = self.cfg.app.syscall_ns;
            return self.burst(t, ns, Cat::Syscall, Step::FsyncStart);
        }
        self.io_finished(t);
    }

    /// After the thread's bios completed: copy out (buffered read) or finish.
    fn after_io(&mut self, t: u32) {
        let io = self.threads[t as usize].io;
        match io.after {
            AfterIo::Copy => {
                let ns = io.pages * self.cfg.pagecache.page_copy_ns;
                self.burst(t, ns, Cat::PageCache, Step::PcCopy);
            }
            AfterIo::Finish => self.io_finished(t),
        }
    }

    /// The system call returns to the application.
    fn io_finished(&mut self, t: u32) {
        let th = &self.threads[t as usize];
        let latency = self.now - th.io.started;
        let (p, op, bytes, started) = (th.proc as usize, th.io.op, th.io.bytes, th.io.started);
        if let Role::Fio(_) = th.role {
            self.fio_record(t, op == IoOp::Read, bytes, started, self.now);
            let think = self.fio(t).thinktime_ns;
            if think > 0 && !self.stopping {
                self.events
                    .schedule(self.now + think, Ev::Timer { thread: t });
                return self.sleep(t, Wait::Timer, Step::App);
            }
            return self.fio_next(t);
        }
        let proc = &mut self.procs[p];
        proc.ios += 1;
        proc.io_latency.record(latency);
        self.app_next(t);
    }

    // ---------------------------------------------------------------- block layer submission

    fn submission_next(&mut self, t: u32) {
        let plug_max = self.cfg.blk.plug_max_requests as usize;
        let th = &self.threads[t as usize];
        if th.next_bio < th.bios.len() {
            if th.plug.len() >= plug_max {
                return self.unplug(t);
            }
            let b = th.bios[th.next_bio];
            debug_assert!(self.blk.bios[b as usize].live);
            let ns = self.cfg.blk.bio_submit_ns
                + self.cfg.blk.merge_check_ns
                    * self.blk.merge_candidates(&th.plug, th.io.hctx) as u64;
            self.threads[t as usize].bio_started = self.now;
            return self.burst(t, ns, Cat::Blk, Step::BioSubmit);
        }
        if matches!(th.role, Role::Flusher) || th.fsync_file != NIL {
            if th.plug.len() >= plug_max {
                return self.unplug(t);
            }
            if th.fsync_file != NIL {
                return self.fsync_next(t);
            }
            return self.flusher_next(t);
        }
        if !th.plug.is_empty() {
            return self.unplug(t);
        }
        self.submission_done(t);
    }

    fn bio_submitted(&mut self, t: u32) {
        let now = self.now;
        let th = &mut self.threads[t as usize];
        let b = th.bios[th.next_bio];
        let outcome = self
            .blk
            .submit_bio(now, th.bio_started, b, &mut th.plug, th.io.hctx);
        match outcome {
            SubmitOutcome::Merged { .. } => {
                th.next_bio += 1;
                self.submission_next(t);
            }
            SubmitOutcome::NewRequest { req } => {
                th.next_bio += 1;
                if matches!(th.role, Role::Flusher) && self.flush.hint_pages > 0 {
                    self.blk.reqs[req as usize].wave_pages =
                        std::mem::take(&mut self.flush.hint_pages);
                }
                self.submission_next(t);
            }
            SubmitOutcome::NoRequest => {
                if !th.plug.is_empty() {
                    self.unplug(t);
                } else {
                    let h = th.io.hctx;
                    self.blk.hctxs[h as usize].alloc_waiters.push_back(t);
                    self.sleep(t, Wait::ReqAlloc, Step::SubmitRetry);
                }
            }
        }
    }

    /// Flushes the plug into the hardware queue and dispatches.
    fn unplug(&mut self, t: u32) {
        let now = self.now;
        let mut plug = std::mem::take(&mut self.threads[t as usize].plug);
        for &r in &plug {
            self.blk.insert(now, r);
        }
        plug.clear();
        self.threads[t as usize].plug = plug;
        self.dispatch_next(t);
    }

    fn dispatch_next(&mut self, t: u32) {
        let h = self.threads[t as usize].io.hctx;
        match self.blk.pick_dispatch(self.now, h) {
            Some(r) => {
                self.threads[t as usize].dispatching = r;
                let ns = self.cfg.blk.dispatch_ns;
                self.burst(t, ns, Cat::Blk, Step::Dispatch);
            }
            None => self.submission_next(t),
        }
    }

    fn emit(&mut self, r: u32) {
        let now = self.now;
        let req = &mut self.blk.reqs[r as usize];
        debug_assert_eq!(req.state, crate::blk::ReqState::Dispatching);
        req.state = crate::blk::ReqState::InDevice;
        req.t_doorbell = now;
        let sqid = self.blk.hctxs[req.hctx as usize].sqid;
        self.out.push(nvme::command(now, sqid, r, req));
        self.commands_sent += 1;
        self.nvme.doorbells += 1;
        match req.class {
            IoClass::LatencyCritical => self.nvme.commands_latency_critical += 1,
            IoClass::Throughput => self.nvme.commands_throughput += 1,
        }
    }

    fn submission_done(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        th.bios.clear();
        th.next_bio = 0;
        let io = th.io;
        if !io.wait {
            return self.app_next(t);
        }
        if th.pending == 0 {
            return self.after_io(t);
        }
        match (io.path, io.completion) {
            (Path::Direct, CompletionMode::Polled) => self.start_poll(t),
            (Path::Direct, CompletionMode::Hybrid) => {
                let mean = self.blk.hctxs[io.hctx as usize].poll_mean_ns;
                let s = nvme::hybrid_sleep_ns(mean, self.cfg.nvme.hybrid_sleep_pct);
                if s == 0 {
                    self.start_poll(t)
                } else {
                    self.nvme.hybrid_sleeps += 1;
                    self.events.schedule(self.now + s, Ev::Timer { thread: t });
                    self.sleep(t, Wait::Timer, Step::HybridWake)
                }
            }
            _ => self.sleep(t, Wait::Io, Step::IoWaitDone),
        }
    }

    // ---------------------------------------------------------------- completion

    fn start_poll(&mut self, t: u32) {
        let th = &self.threads[t as usize];
        let h = th.io.hctx as usize;
        if !self.blk.hctxs[h].posted.is_empty() {
            let ns = self.cfg.nvme.poll_iteration_ns;
            self.burst(t, ns, Cat::Poll, Step::Poll)
        } else if th.pending == 0 {
            self.after_io(t)
        } else {
            self.burst(t, UNTIL_POKED, Cat::Poll, Step::Poll)
        }
    }

    fn poll_check(&mut self, t: u32) {
        let h = self.threads[t as usize].io.hctx as usize;
        if !self.blk.hctxs[h].posted.is_empty() {
            let th = &mut self.threads[t as usize];
            std::mem::swap(&mut th.reap, &mut self.blk.hctxs[h].posted);
            th.reap_started = self.now;
            let ns = th.reap.len() as u64 * self.cfg.nvme.poll_complete_ns;
            self.burst(t, ns, Cat::BlkComplete, Step::Reap)
        } else if self.threads[t as usize].pending == 0 {
            self.after_io(t)
        } else {
            self.burst(t, UNTIL_POKED, Cat::Poll, Step::Poll)
        }
    }

    fn reap_done(&mut self, t: u32) {
        let mut reap = std::mem::take(&mut self.threads[t as usize].reap);
        let started = self.threads[t as usize].reap_started;
        let h = self.threads[t as usize].io.hctx;
        for &r in &reap {
            self.nvme.polled_completions += 1;
            self.complete_request(r, started);
        }
        reap.clear();
        self.threads[t as usize].reap = reap;
        self.run_queue_deferred(h);
        if self.threads[t as usize].pending == 0 {
            self.after_io(t)
        } else {
            self.start_poll(t)
        }
    }

    fn on_cqe(&mut self, cqid: u16, r: u32) {
        let now = self.now;
        self.cqes_received += 1;
        self.blk.on_cqe(now, r);
        let h = self.blk.hctx_of_queue(cqid) as usize;
        let (kind, core) = (self.blk.hctxs[h].kind, self.blk.hctxs[h].core);
        match kind {
            QueueKind::Poll => {
                self.blk.hctxs[h].posted.push(r);
                let first = self.blk.reqs[r as usize].first_bio;
                if let BioOwner::Direct { thread } = self.blk.bios[first as usize].owner {
                    let th = &self.threads[thread as usize];
                    let sched = &self.cpu.threads[thread as usize];
                    let polling = th.step == Step::Poll
                        && sched.remaining_ns == UNTIL_POKED
                        && matches!(sched.state, RunState::Running | RunState::Runnable);
                    if polling {
                        let ns = self.cfg.nvme.poll_iteration_ns;
                        self.cpu.set_burst(now, thread, ns, Cat::Poll);
                    }
                }
            }
            QueueKind::Interrupt => {
                let cost = self.complete_cost(r);
                if self.cpu.in_nvme_irq(core) {
                    self.nvme.coalesced_completions += 1;
                } else {
                    self.nvme.interrupts += 1;
                    self.cpu.count_interrupt(core);
                    self.cpu.raise_irq(
                        now,
                        core,
                        IrqWork {
                            ns: self.cfg.cpu.isr_ns,
                            cat: Cat::Irq,
                            action: IrqAction::None,
                            nvme: true,
                            class: None,
                        },
                    );
                }
                self.cpu.raise_irq(
                    now,
                    core,
                    IrqWork {
                        ns: cost,
                        cat: Cat::BlkComplete,
                        action: IrqAction::Complete { req: r },
                        nvme: true,
                        class: Some(self.blk.reqs[r as usize].class),
                    },
                );
            }
        }
    }

    /// Block-layer completion work of one request (write-back adds per-page work).
    fn complete_cost(&self, r: u32) -> u64 {
        let mut ns = self.cfg.blk.complete_ns;
        let mut b = self.blk.reqs[r as usize].first_bio;
        while b != NIL {
            let bio = &self.blk.bios[b as usize];
            if let BioOwner::Writeback { pages, .. } = bio.owner {
                ns += pages as u64 * self.cfg.pagecache.writeback_end_page_ns;
            }
            b = bio.next;
        }
        ns
    }

    fn irq_done(&mut self, action: IrqAction, started: SimTime) {
        match action {
            IrqAction::None => {}
            IrqAction::Complete { req } => {
                let h = self.blk.reqs[req as usize].hctx;
                self.complete_request(req, started);
                self.run_queue_deferred(h);
            }
            IrqAction::Dispatch { req } => {
                self.blk.reqs[req as usize].t_driver = self.now;
                self.emit(req);
            }
            IrqAction::Wake { thread } => {
                if self.threads[thread as usize].wait == Wait::Timer {
                    self.wake(thread);
                }
            }
        }
    }

    /// Dispatches requests left waiting on hardware queue `h` (kblockd on the queue's core).
    fn run_queue_deferred(&mut self, h: u16) {
        let core = self.blk.hctxs[h as usize].core;
        let ns =
            self.cfg.blk.dispatch_ns + self.cfg.nvme.queue_rq_ns + self.cfg.nvme.doorbell_write_ns;
        while let Some(r) = self.blk.pick_dispatch(self.now, h) {
            self.blk.stats.deferred_dispatches += 1;
            self.cpu.raise_irq(
                self.now,
                core,
                IrqWork {
                    ns,
                    cat: Cat::Blk,
                    action: IrqAction::Dispatch { req: r },
                    nvme: false,
                    class: Some(self.blk.reqs[r as usize].class),
                },
            );
        }
    }

    /// Completion work of request `r` is done (it started at `started`): record, notify every
    /// bio's owner, free the request.
    fn complete_request(&mut self, r: u32, started: SimTime) {
        let now = self.now;
        let req = self.blk.reqs[r as usize];
        let polled = self.blk.hctxs[req.hctx as usize].kind == QueueKind::Poll;
        let device_ns = req.t_cqe - req.t_doorbell;
        let shape = shape_index(req.op, req.sectors);
        self.device_min_ns[shape] = self.device_min_ns[shape].min(device_ns);
        {
            let acc = &mut self.breakdown[req.class.index()];
            acc.requests += 1;
            acc.sw.sum_ns += (req.t_dispatch - req.t_submit) as u128;
            acc.hw.sum_ns += (req.t_driver - req.t_dispatch) as u128;
            acc.driver.sum_ns += (req.t_doorbell - req.t_driver) as u128;
            acc.device.sum_ns += device_ns as u128;
            let wait = (started - req.t_cqe) as u128;
            if polled {
                acc.poll.sum_ns += wait;
            } else {
                acc.irq.sum_ns += wait;
            }
            acc.blk_complete.sum_ns += (now - started) as u128;
            let s = &mut acc.device_by_shape[shape];
            s.0 += 1;
            s.1 += device_ns as u128;
        }
        self.request_latency[req.class.index()].record(now - req.t_submit);
        if polled {
            let h = &mut self.blk.hctxs[req.hctx as usize];
            h.poll_mean_ns = nvme::ewma(h.poll_mean_ns, now - req.t_doorbell);
        }
        self.blk.finish_request(now, r);
        let mut b = req.first_bio;
        while b != NIL {
            let next = self.blk.bios[b as usize].next;
            self.bio_end(b);
            self.blk.free_bio(b);
            b = next;
        }
        if let Some(w) = self.blk.hctxs[req.hctx as usize].alloc_waiters.pop_front() {
            if self.threads[w as usize].wait == Wait::ReqAlloc {
                self.wake(w);
            }
        }
    }

    fn io_waiter_done(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        debug_assert!(th.pending > 0);
        th.pending -= 1;
        if th.pending > 0 {
            return;
        }
        if th.wait == Wait::Io {
            self.wake(t);
        } else if th.step == Step::Poll && self.cpu.threads[t as usize].remaining_ns == UNTIL_POKED
        {
            // Its request was reaped by another poller (a bio merged into another thread's
            // request): stop spinning.
            let ns = self.cfg.nvme.poll_iteration_ns;
            self.cpu.set_burst(self.now, t, ns, Cat::Poll);
        }
    }

    fn bio_end(&mut self, b: u32) {
        let bio = self.blk.bios[b as usize];
        match bio.owner {
            BioOwner::Direct { thread } => self.io_waiter_done(thread),
            BioOwner::PageRead {
                file,
                first_page,
                pages,
            } => {
                self.pc.end_read(file, first_page, pages, b);
                let mut waiters = std::mem::take(&mut self.scratch);
                self.blk.take_waiters(b, &mut waiters);
                for &w in &waiters {
                    self.io_waiter_done(w);
                }
                waiters.clear();
                self.scratch = waiters;
            }
            BioOwner::Writeback {
                file,
                first_page,
                pages,
            } => {
                self.pc.end_writeback(file, first_page, pages, bio.class);
                if !self.fsync_waiters.is_empty()
                    && self.pc.files[file as usize].writeback_pages == 0
                {
                    let mut i = 0;
                    while i < self.fsync_waiters.len() {
                        let w = self.fsync_waiters[i];
                        if self.threads[w as usize].fsync_file == file {
                            self.fsync_waiters.swap_remove(i);
                            self.wake(w);
                        } else {
                            i += 1;
                        }
                    }
                }
                if !self.throttled.is_empty() && self.pc.below_freerun() {
                    let throttled = std::mem::take(&mut self.throttled);
                    for &w in &throttled {
                        self.wake(w);
                    }
                    self.throttled = throttled;
                    self.throttled.clear();
                }
            }
            BioOwner::FioAsync { thread, slot } => {
                let now = self.now;
                let f = self.fio(thread);
                let io = &mut f.slots[slot as usize];
                io.pending -= 1;
                io.done_at = now;
                if io.pending == 0 {
                    f.completed.push(slot);
                    if self.threads[thread as usize].wait == Wait::FioEvents {
                        self.wake(thread);
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------- write-back

    fn kick_flusher(&mut self) {
        let f = self.flush.thread;
        if self.threads[f as usize].wait == Wait::FlusherIdle {
            self.wake(f);
        }
    }

    /// The file the flusher should write next, if any write-back is due.
    fn flush_target(&self) -> Option<u32> {
        let foreground = !self.throttled.is_empty() && !self.pc.below_freerun();
        if foreground {
            return self.pc.oldest_dirty_file(None);
        }
        if self.stopping {
            return None;
        }
        if self.pc.over_background() {
            return self.pc.oldest_dirty_file(None);
        }
        if self.flush.periodic_due {
            let expire = self.cfg.pagecache.dirty_expire_ns;
            if self.now.0 > expire {
                return self
                    .pc
                    .oldest_dirty_file(Some(SimTime(self.now.0 - expire)));
            }
        }
        None
    }

    fn flusher_next(&mut self, t: u32) {
        let chunk_max = self.cfg.pagecache.writeback_chunk_pages;
        let target = self.flush_target();
        match target {
            Some(file) if self.flush.chunk_pages < chunk_max => {
                if !self.flush.in_wave {
                    self.flush.in_wave = true;
                    self.pc.stats.writeback_waves += 1;
                    if self.cfg.pagecache.victim_hint == Switch::On {
                        let dirty = self.pc.dirty_pages();
                        let about = if self.pc.over_background() || !self.throttled.is_empty() {
                            dirty.saturating_sub(self.pc.background_threshold_pages())
                        } else {
                            self.pc.files[file as usize].dirty_pages
                        };
                        self.flush.hint_pages = about.clamp(1, u32::MAX as u64) as u32;
                    }
                }
                let max = self.cfg.pagecache.writeback_bio_pages as u64;
                let (first, n, class) = self
                    .pc
                    .take_dirty_run(file, max)
                    .expect("a file chosen for write-back has dirty pages");
                self.flush.chunk_pages += n;
                self.flush.run = (file, first, n, class);
                let ns = n as u64 * self.cfg.pagecache.writeback_page_ns;
                self.burst(t, ns, Cat::PageCache, Step::FlushPages);
            }
            _ if !self.threads[t as usize].plug.is_empty() => self.unplug(t),
            Some(_) => {
                self.flush.chunk_pages = 0;
                self.flusher_next(t)
            }
            None => {
                self.flush.chunk_pages = 0;
                self.flush.in_wave = false;
                self.flush.periodic_due = false;
                self.flush.hint_pages = 0;
                self.sleep(t, Wait::FlusherIdle, Step::App)
            }
        }
    }

    fn flush_pages_done(&mut self, t: u32) {
        let (file, first, n, class) = self.flush.run;
        let core = self.core_of(t);
        let b = self.writeback_bio(file, first, n, class);
        let th = &mut self.threads[t as usize];
        if th.plug.is_empty() {
            th.io.hctx = self.blk.hctx_of(core, QueueKind::Interrupt);
        }
        th.io.wait = false;
        th.bios.clear();
        th.bios.push(b);
        th.next_bio = 0;
        self.submission_next(t);
    }

    // ---------------------------------------------------------------- fsync

    /// fsync in the calling thread: write back the file's dirty pages (plugged, like the
    /// flusher), then wait until none of its pages is under write-back.
    fn fsync_next(&mut self, t: u32) {
        let plug_max = self.cfg.blk.plug_max_requests as usize;
        let th = &self.threads[t as usize];
        let file = th.fsync_file;
        if th.plug.len() < plug_max && self.pc.files[file as usize].dirty_pages > 0 {
            let max = self.cfg.pagecache.writeback_bio_pages as u64;
            let (first, n, class) = self
                .pc
                .take_dirty_run(file, max)
                .expect("a file with dirty pages yields a run");
            self.threads[t as usize].fsync_run = (first, n, class);
            let ns = n as u64 * self.cfg.pagecache.writeback_page_ns;
            return self.burst(t, ns, Cat::PageCache, Step::FsyncPages);
        }
        if !th.plug.is_empty() {
            return self.unplug(t);
        }
        if self.pc.files[file as usize].writeback_pages > 0 {
            self.fsync_waiters.push(t);
            return self.sleep(t, Wait::Fsync, Step::FsyncDone);
        }
        self.threads[t as usize].fsync_file = NIL;
        self.io_finished(t);
    }

    fn fsync_pages_done(&mut self, t: u32) {
        let core = self.core_of(t);
        let th = &self.threads[t as usize];
        let file = th.fsync_file;
        let (first, n, class) = th.fsync_run;
        let b = self.writeback_bio(file, first, n, class);
        let th = &mut self.threads[t as usize];
        if th.plug.is_empty() {
            th.io.hctx = self.blk.hctx_of(core, QueueKind::Interrupt);
        }
        th.bios.clear();
        th.bios.push(b);
        th.next_bio = 0;
        self.submission_next(t);
    }

    fn writeback_bio(&mut self, file: u32, first: u64, n: u32, class: IoClass) -> u32 {
        let base = self.pc.files[file as usize].base_sector;
        self.blk.new_bio(
            IoOp::Write,
            class,
            base + first * SECTORS_PER_PAGE,
            n * SECTORS_PER_PAGE as u32,
            BioOwner::Writeback {
                file,
                first_page: first,
                pages: n,
            },
        )
    }

    // ---------------------------------------------------------------- end of run

    /// Checks the run drained and summarises it.
    pub fn finish(mut self) -> Result<HostReport, HostError> {
        let end = self.now.max(self.duration);
        if let Some(e) = self.errors.first() {
            return Err(HostError::Leak(e.clone()));
        }
        let (bios, reqs) = self.blk.in_flight();
        if bios != 0 || reqs != 0 || self.commands_sent != self.cqes_received {
            return Err(HostError::Leak(format!(
                "{bios} bios and {reqs} requests still live; {} commands sent, {} completions received",
                self.commands_sent, self.cqes_received
            )));
        }
        self.pc.check_consistency().map_err(HostError::Leak)?;
        if self.pc.writeback_pages() != 0 {
            return Err(HostError::Leak(format!(
                "{} pages still under write-back",
                self.pc.writeback_pages()
            )));
        }
        let cores = self.cpu.finish(end);
        let breakdown = [0, 1].map(|c| self.breakdown_means(c));
        let duration_ns = self.duration.0.max(1);
        let _ = duration_ns;
        let processes = self
            .procs
            .iter()
            .map(|p| {
                let (requests, unfinished, response, fio_jobs) = match &p.state {
                    ProcState::Online(o) => (
                        o.completed,
                        o.reqs.iter().filter(|r| r.live).count() as u64,
                        o.response.clone(),
                        Vec::new(),
                    ),
                    ProcState::Offline => (0, 0, LatencyHistogram::new(), Vec::new()),
                    ProcState::Fio { jobs } => (0, 0, LatencyHistogram::new(), jobs.clone()),
                };
                ProcessReport {
                    name: p.spec.name.clone(),
                    profile: p.spec.profile_name(),
                    class: p.spec.class,
                    kind: p.spec.kind(),
                    requests,
                    unfinished_requests: unfinished,
                    response,
                    instructions: p.instructions,
                    ios: p.ios,
                    io_latency: p.io_latency.clone(),
                    fio_jobs,
                }
            })
            .collect();
        Ok(HostReport {
            end,
            processes,
            cores,
            breakdown,
            request_latency: self.request_latency.clone(),
            pagecache: self.pc.finish_stats(),
            blk: self.blk.stats.clone(),
            nvme: self.nvme.clone(),
            events: self.events.scheduled_total(),
            commands: self.commands_sent,
        })
    }

    fn breakdown_means(&self, class: usize) -> Breakdown {
        let acc = &self.breakdown[class];
        let n = acc.requests;
        if n == 0 {
            return Breakdown::default();
        }
        let mean = |a: &Acc| (a.sum_ns / n as u128) as u64;
        let service_sum: u128 = acc
            .device_by_shape
            .iter()
            .zip(&self.device_min_ns)
            .map(|(&(count, _), &min)| {
                if count == 0 {
                    0
                } else {
                    count as u128 * min as u128
                }
            })
            .sum();
        let device = mean(&acc.device);
        let service = (service_sum / n as u128) as u64;
        Breakdown {
            requests: n,
            software_queue: mean(&acc.sw),
            hardware_queue: mean(&acc.hw),
            driver: mean(&acc.driver),
            device_queue: device.saturating_sub(service),
            device_service: service.min(device),
            irq: mean(&acc.irq),
            poll: mean(&acc.poll),
            blk_complete: mean(&acc.blk_complete),
            context_switch: mean(&acc.ctx_switch),
        }
    }

    /// Page-cache counters right now (tests).
    pub fn pagecache_stats(&mut self) -> PageCacheStats {
        self.pc.finish_stats()
    }
}

fn draw_gap(th: &mut Thread) -> u64 {
    if th.mean_gap == 0 {
        return 0;
    }
    match th.gaps {
        IoGaps::Fixed => th.mean_gap,
        IoGaps::Exponential => exp_ns(&mut th.rng, th.mean_gap).max(1),
    }
}

/// The rate-related fields of a process (so the arrival draw needs no borrow of the process).
#[derive(Clone, Copy)]
struct RateSpec {
    requests_per_sec: u64,
    arrivals: crate::app::Arrivals,
}

impl ProcessSpec {
    fn clone_rate(&self) -> RateSpec {
        RateSpec {
            requests_per_sec: self.requests_per_sec,
            arrivals: self.arrivals,
        }
    }
}

fn arrival_gap_of(spec: RateSpec, rng: &mut SimRng) -> u64 {
    let mean = 1_000_000_000 / spec.requests_per_sec.max(1);
    match spec.arrivals {
        crate::app::Arrivals::Fixed => mean,
        crate::app::Arrivals::Poisson => exp_ns(rng, mean).max(1),
    }
}

fn arrival_gap(spec: &ProcessSpec, rng: &mut SimRng) -> u64 {
    arrival_gap_of(spec.clone_rate(), rng)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::Arrivals;
    use workload::{IoSizeModel, JobFile};

    /// A device that completes every command `latency_ns` after its doorbell, in order: enough
    /// to drive the host alone and see when each command left it.
    struct FixedLatencyDevice {
        latency_ns: u64,
        /// Interrupts enabled, by queue id.
        interrupts: Vec<bool>,
        pending: VecDeque<DeviceCqe>,
        commands: Vec<HostCommand>,
    }

    impl FixedLatencyDevice {
        fn new(host: &Host, latency_ns: u64) -> Self {
            let mut interrupts = vec![false; host.queue_pairs().len() + 1];
            for qp in host.queue_pairs() {
                interrupts[qp.cqid as usize] = qp.interrupts;
            }
            FixedLatencyDevice {
                latency_ns,
                interrupts,
                pending: VecDeque::new(),
                commands: Vec::new(),
            }
        }

        /// Advances host and device through every event before `until` (all, if `None`).
        fn run(&mut self, host: &mut Host, until: Option<SimTime>) {
            let mut issued = Vec::new();
            loop {
                let td = self.pending.front().map(|c| c.at);
                let th = host.next_event_time();
                let next = match (td, th) {
                    (None, None) => return,
                    (Some(d), Some(h)) => d.min(h),
                    (d, h) => d.or(h).expect("one of them is some"),
                };
                if until.is_some_and(|u| next >= u) {
                    return;
                }
                if td == Some(next) {
                    let cqe = self.pending.pop_front().expect("peeked");
                    host.deliver(cqe);
                    continue;
                }
                host.step();
                host.take_commands(&mut issued);
                for c in issued.drain(..) {
                    self.pending.push_back(DeviceCqe {
                        at: c.at + self.latency_ns,
                        cqid: c.sqid,
                        cid: c.cid,
                        success: true,
                        interrupt: self.interrupts[c.sqid as usize],
                        write_buffer_pct: 0,
                    });
                    self.commands.push(c);
                }
            }
        }
    }

    fn fio_process(job: &str, host: &HostConfig) -> ProcessSpec {
        let jobs = JobFile::parse_fio(job, "test.fio").unwrap().jobs;
        ProcessSpec {
            name: "fio".into(),
            workload: Workload::Fio {
                jobs,
                source: "test.fio".into(),
            },
            class: IoClass::Throughput,
            threads: 1,
            requests_per_sec: 1,
            arrivals: Arrivals::Fixed,
            instructions_per_request: 0,
            buffering: Buffering::Buffered,
            io_size: IoSizeModel::Fixed,
            io_gaps: IoGaps::Fixed,
            file_bytes: host.app.file_bytes,
            fsync_every_writes: 0,
        }
    }

    /// A buffered writer dirties 16 pages (far below `dirty_background_ratio`) and exits: the
    /// periodic flush writes them back at its first wake-up after they are `dirty_expire` old,
    /// and not at any earlier wake-up.
    #[test]
    fn expired_dirty_pages_are_written_back_by_the_periodic_flush_and_not_before() {
        const EXPIRE_NS: u64 = 200_000_000;
        const INTERVAL_NS: u64 = 50_000_000;
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.pagecache.dirty_expire_ns = EXPIRE_NS;
        cfg.pagecache.dirty_writeback_interval_ns = INTERVAL_NS;
        let job = "[w]\nioengine=psync\ndirect=0\nbs=4k\nrw=write\nsize=64k\n";
        let procs = vec![fio_process(job, &cfg)];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(400), 1 << 40).unwrap();
        let mut dev = FixedLatencyDevice::new(&host, 10_000);

        dev.run(&mut host, Some(SimTime::from_ms(1)));
        let pc = host.pagecache_stats();
        assert_eq!(pc.throughput.pages_dirtied, 16, "{pc:?}");
        assert_eq!(pc.dirty_pages, 16);
        assert!(
            pc.dirty_pages * 100 < pc.capacity_pages,
            "well under the 3 % background threshold"
        );
        let dirtied_at = host.pc.files[0].dirtied_at.expect("the file is dirty");
        assert!(dirtied_at < SimTime::from_ms(1));

        // Every wake-up up to and including the one at 200 ms finds the data younger than
        // dirty_expire: nothing is written.
        dev.run(&mut host, Some(SimTime(EXPIRE_NS + 1)));
        assert!(dev.commands.is_empty(), "{:?}", dev.commands);
        let pc = host.pagecache_stats();
        assert_eq!((pc.dirty_pages, pc.throughput.pages_written_back), (16, 0));
        assert_eq!(pc.writeback_waves, 0);

        // The 250 ms wake-up finds it expired and writes all of it back.
        dev.run(&mut host, None);
        let first = dev
            .commands
            .first()
            .expect("the expired pages were written");
        let tick = SimTime(EXPIRE_NS + INTERVAL_NS);
        assert!(
            first.at >= tick && first.at < tick + 1_000_000,
            "write-back at {} ns",
            first.at.as_ns()
        );
        assert!(dev.commands.iter().all(|c| c.op == IoOp::Write));
        let sectors: u64 = dev.commands.iter().map(|c| c.sectors as u64).sum();
        assert_eq!(sectors, 16 * SECTORS_PER_PAGE);
        let report = host.finish().unwrap();
        let pc = &report.pagecache;
        assert_eq!((pc.dirty_pages, pc.throughput.pages_written_back), (0, 16));
        assert_eq!(pc.writeback_waves, 1);
    }
}
