//! Building the host: everything that happens before the first event — the machine's boot and
//! the `fork`/`exec` of the run's processes.
//!
//! `Host::new` lays out one file per process on the device, in process order: each file is the
//! process's `file_bytes` rounded down to whole pages and starts on a 1 MiB boundary after the
//! previous one (the page cache addresses it by its first sector). It then creates the
//! process's threads and places them on their home cores round-robin in creation order: an
//! online service's server thread, then its workers; an offline job's threads; one thread per
//! fio clone; one trace-replay thread; then the flusher, a kernel thread of no process (and
//! DedCore's poller, when on); and last one kblockd worker bound to each core (`kblockd`).
//! Every thread draws from its own random stream, named `proc.<index>.<name>.<thread>`
//! (`kernel.flusher`; a fio job's `randseed` is mixed into the run's seed), so adding a
//! process changes no other thread's draws except by where its threads sit.
//!
//! Worked example: `apache` (online, 1 worker) and `pagerank` (offline, 7 threads: a worker
//! per core but one) on the 8-core `arm8`: apache's server lands on core 0 and its worker on
//! core 1, pagerank's threads on cores 2, 3, 4, 5, 6, 7, 0, and the flusher on core 1.
//!
//! At t = 0 offline and fio threads are runnable (each has drawn the instructions to its first
//! I/O); the server waits for requests, workers for work and the flusher for dirty pages. The
//! first client request of each online service, the run's end and the first periodic
//! write-back wake-up are the first events. A process with a later `start` (system config
//! `start_ms`) is laid out and has its threads created at t = 0 like the others (so it changes
//! no placement or random stream), but its threads first become runnable at `start` (an
//! `Ev::Start`) and its client's first request is `start` + the first drawn gap: everything
//! it does is shifted by exactly `start` (a process alone on the host runs the same, later).
//!
//! ## What it leaves out
//! Process start-up cost, placement by load (round-robin only; the scheduler in `cpu` may move
//! a waking thread to an idle core), file-system layout (each file is one contiguous extent).
//!
//! Config keys: per process in the system config (`threads`, `file_bytes`, the workload);
//! `pagecache.dirty_writeback_interval_ns` for the first flusher wake-up.

use std::collections::VecDeque;

use engine::{stream, EventQueue, IoClass, LatencyHistogram, SimTime};
use workload::{Buffering, IoGenerator, JobSpec, Profile, ProfileGenerator};

use super::{Ev, Host, HostError, HostParts};
use crate::blk::Blk;
use crate::config::{HostConfig, Switch};
use crate::cpu::{Cat, Cpu};
use crate::flusher::FlusherState;
use crate::jitter::CostDraws;
use crate::nvme;
use crate::pagecache::{PageCache, NIL};
use crate::process::{
    arrival_gap, FioJobResult, FioThread, IoSource, OnlineState, ProcState, Process, ProcessKind,
    ProcessSpec, TraceFeed, TraceMode, TraceSource, Workload,
};
use crate::task::{Role, Thread, Wait};
use crate::PAGE_BYTES;

/// Files start on 1 MiB boundaries of the device.
const FILE_ALIGN_BYTES: u64 = 1 << 20;

/// A file smaller than this (16 pages) is rejected: profiles need room for their I/O sizes.
const FILE_MIN_BYTES: u64 = 16 * PAGE_BYTES;

/// An open-loop trace never waits for its I/Os: far beyond any device queue.
const OPEN_LOOP_MAX_IN_FLIGHT: u32 = 1 << 16;

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
        let mut spawner = Spawner::new(cfg, seed, device_capacity_bytes);
        for (index, spec) in procs.into_iter().enumerate() {
            spawner.spawn_process(index, spec, duration)?;
        }
        let flusher = spawner.spawn_flusher();
        let poller = (cfg.nvme.dedcore == Switch::On).then(|| spawner.spawn_poller());
        let kblockd = spawner.spawn_kblockd();
        spawner.arm_first_events(duration);
        let dedicated_core = poller.map(|t| spawner.cpu.core_of(t));
        let mut host = spawner.into_host(flusher, kblockd, dedicated_core, duration);
        if let Some(t) = poller {
            host.cpu.wake(SimTime::ZERO, t, 0, Cat::Sched);
        }
        host.arm_first_tick();
        host.start_threads();
        Ok(host)
    }

    /// Offline and fio threads run from their process's start (t = 0 unless it starts later);
    /// everyone else waits for something.
    fn start_threads(&mut self) {
        for p in 0..self.procs.len() {
            let start = self.procs[p].spec().start;
            if start == SimTime::ZERO {
                self.start_process(p as u32);
            } else {
                self.schedule(start, Ev::Start { proc: p as u32 });
            }
        }
        self.arm_core_timers();
    }

    /// Process `p` starts: its offline and fio threads become runnable now. (An online
    /// service's client was given its first request time when it was spawned.)
    pub(super) fn start_process(&mut self, p: u32) {
        let now = self.now();
        for t in 0..self.threads.len() {
            let th = &self.threads[t];
            let starts = th.proc == p && matches!(th.role, Role::Offline | Role::Fio(_));
            if starts {
                let th = &mut self.threads[t];
                th.app.instr_to_io = th.app.draw_gap();
                self.cpu.wake(now, t as u32, 0, Cat::Sched);
            }
        }
    }
}

/// What `Host::new` builds before the host exists.
struct Spawner<'c> {
    cfg: &'c HostConfig,
    seed: u64,
    cpu: Cpu,
    pc: PageCache,
    threads: Vec<Thread>,
    procs: Vec<Process>,
    events: EventQueue<Ev>,
    /// Home core of the next thread.
    next_core: u16,
    /// Where the next process's file starts.
    next_file_byte: u64,
    device_capacity_bytes: u64,
}

/// The process whose threads are being created.
struct Spawning<'s> {
    index: usize,
    spec: &'s ProcessSpec,
    file_bytes: u64,
}

impl Spawning<'_> {
    fn pid(&self) -> u32 {
        self.index as u32
    }

    fn generator_error(&self, source: workload::GenError) -> HostError {
        HostError::Generator {
            process: self.spec.name.clone(),
            source,
        }
    }

    fn unsupported(&self, reason: String) -> HostError {
        HostError::Unsupported {
            process: self.spec.name.clone(),
            reason,
        }
    }
}

impl<'c> Spawner<'c> {
    fn new(cfg: &'c HostConfig, seed: u64, device_capacity_bytes: u64) -> Spawner<'c> {
        Spawner {
            cfg,
            seed,
            cpu: Cpu::new(&cfg.cpu),
            pc: PageCache::new(
                cfg.page_cache_pages(),
                cfg.pagecache.read_ahead_max_bytes,
                cfg.pagecache.dirty_background_ratio_pct,
                cfg.pagecache.dirty_ratio_pct,
            )
            .with_adaptive(&cfg.pagecache),
            threads: Vec::new(),
            procs: Vec::new(),
            events: EventQueue::new(),
            next_core: 0,
            next_file_byte: 0,
            device_capacity_bytes,
        }
    }

    /// Cores threads are placed on: all but DedCore's polling core (the last), if any.
    fn app_cores(&self) -> u16 {
        let cores = self.cfg.cpu.cores as u16;
        if self.cfg.nvme.dedcore == Switch::On {
            cores - 1
        } else {
            cores
        }
    }

    /// DedCore's polling thread, alone on the last core.
    fn spawn_poller(&mut self) -> u32 {
        let core = self.cfg.cpu.cores as u16 - 1;
        let t = self.cpu.add_thread(core, IoClass::Throughput);
        let th = Thread::new(
            u32::MAX,
            IoClass::Throughput,
            Role::Poller,
            stream(self.seed, "kernel.poller"),
            0,
        );
        self.threads.push(th);
        t
    }

    /// Places a new thread of `class` on the next core, round-robin.
    fn place(&mut self, class: IoClass) -> u32 {
        let core = self.next_core;
        self.next_core = (self.next_core + 1) % self.app_cores();
        let t = self.cpu.add_thread(core, class);
        assert_eq!(
            t as usize,
            self.threads.len(),
            "scheduler and machine thread ids agree"
        );
        t
    }

    /// A thread of process `p` with the random stream named by `tag`.
    fn thread(
        &mut self,
        p: &Spawning,
        role: Role,
        tag: &str,
        gen: Option<ProfileGenerator>,
        mean_gap: u64,
    ) -> u32 {
        let t = self.place(p.spec.class);
        self.cpu.begin_life(t, p.spec.start);
        self.cpu.set_address_space(t, p.pid());
        let name = &p.spec.name;
        let rng = stream(self.seed, &format!("proc.{}.{name}.{tag}", p.index));
        let mut th = Thread::new(
            p.pid(),
            p.spec.class,
            role,
            rng,
            self.cfg.blk.plug_max_requests as usize,
        );
        th.app.mean_gap = mean_gap;
        th.app.gaps = p.spec.io_gaps;
        th.app.gen = gen;
        self.threads.push(th);
        t
    }

    /// Gives the process its file: returns the page cache's file id and the file's size.
    fn layout_file(&mut self, spec: &ProcessSpec) -> Result<(u32, u64), HostError> {
        let file_bytes = spec.file_bytes / PAGE_BYTES * PAGE_BYTES;
        if file_bytes < FILE_MIN_BYTES {
            return Err(HostError::Unsupported {
                process: spec.name.clone(),
                reason: format!(
                    "file_bytes = {} is below the {FILE_MIN_BYTES} bytes a process's file needs",
                    spec.file_bytes
                ),
            });
        }
        let need = self.next_file_byte + file_bytes;
        if need > self.device_capacity_bytes {
            return Err(HostError::Capacity {
                process: spec.name.clone(),
                need_bytes: need,
                capacity_bytes: self.device_capacity_bytes,
            });
        }
        let file = self
            .pc
            .add_file(self.next_file_byte / 512, file_bytes / PAGE_BYTES);
        self.next_file_byte = need.div_ceil(FILE_ALIGN_BYTES) * FILE_ALIGN_BYTES;
        Ok((file, file_bytes))
    }

    fn spawn_process(
        &mut self,
        index: usize,
        spec: ProcessSpec,
        duration: SimTime,
    ) -> Result<(), HostError> {
        if spec.start >= duration {
            return Err(HostError::Unsupported {
                process: spec.name.clone(),
                reason: format!(
                    "starts at {} ms, at or after the run's end ({} ms): it would never run",
                    spec.start.as_ns() as f64 / 1e6,
                    duration.as_ns() as f64 / 1e6
                ),
            });
        }
        let (file, file_bytes) = self.layout_file(&spec)?;
        let p = Spawning {
            index,
            spec: &spec,
            file_bytes,
        };
        let state = match &spec.workload {
            Workload::Profile(profile) if spec.kind() == ProcessKind::Online => {
                self.spawn_online(&p, profile, duration)?
            }
            Workload::Profile(profile) => self.spawn_offline(&p, profile)?,
            Workload::Fio { jobs, .. } => self.spawn_fio(&p, jobs)?,
            Workload::Trace { trace, mode, .. } => self.spawn_trace(&p, trace.as_ref(), *mode)?,
        };
        self.procs.push(Process::new(spec, file, state));
        Ok(())
    }

    fn profile_generator(
        &self,
        p: &Spawning,
        profile: &Profile,
    ) -> Result<ProfileGenerator, HostError> {
        ProfileGenerator::new(*profile, p.spec.io_size, 0, p.file_bytes)
            .map_err(|e| p.generator_error(e))
    }

    /// An online service: a server thread waiting for requests, idle workers, and its client's
    /// first request (none if it would come at or after the run's end, like every later one).
    fn spawn_online(
        &mut self,
        p: &Spawning,
        profile: &Profile,
        duration: SimTime,
    ) -> Result<ProcState, HostError> {
        let spec = p.spec;
        let mean_gap = crate::process::online_mean_gap(profile);
        if spec.requests_per_sec == 0 || spec.threads == 0 {
            return Err(p.unsupported(
                "an online service needs requests_per_sec ≥ 1 and threads (workers) ≥ 1".into(),
            ));
        }
        let server = self.thread(p, Role::Server { req: NIL }, "server", None, mean_gap);
        self.threads[server as usize].wait = Wait::Rx;
        let mut idle = Vec::new();
        for w in 0..spec.threads {
            let gen = self.profile_generator(p, profile)?;
            let worker = Role::Worker {
                req: NIL,
                instr_left: 0,
            };
            let t = self.thread(p, worker, &format!("worker{w}"), Some(gen), mean_gap);
            self.threads[t as usize].wait = Wait::Work;
            idle.push(t);
        }
        let name = &spec.name;
        let mut arrival_rng = stream(self.seed, &format!("proc.{}.{name}.arrivals", p.index));
        let first = spec.start + arrival_gap(spec, &mut arrival_rng);
        if first < duration {
            self.events.schedule(first, Ev::Arrival { proc: p.pid() });
        }
        Ok(ProcState::Online(Box::new(OnlineState {
            server,
            idle_workers: idle,
            rx: VecDeque::with_capacity(64),
            work: VecDeque::with_capacity(64),
            reqs: Vec::with_capacity(64),
            free_reqs: Vec::with_capacity(64),
            arrival_rng,
            response: LatencyHistogram::new(),
            completed: 0,
            request_time: Default::default(),
        })))
    }

    /// An offline job: `threads` threads computing and doing I/O from t = 0.
    fn spawn_offline(&mut self, p: &Spawning, profile: &Profile) -> Result<ProcState, HostError> {
        let mean_gap = profile.mean_instructions_between_ios();
        if p.spec.threads == 0 {
            return Err(p.unsupported("an offline job needs threads ≥ 1".into()));
        }
        for i in 0..p.spec.threads {
            let gen = self.profile_generator(p, profile)?;
            self.thread(p, Role::Offline, &format!("thread{i}"), Some(gen), mean_gap);
        }
        Ok(ProcState::Offline)
    }

    /// fio jobs: one thread per clone (`numjobs`), all running together.
    fn spawn_fio(&mut self, p: &Spawning, jobs: &[JobSpec]) -> Result<ProcState, HostError> {
        let mut results: Vec<FioJobResult> = Vec::new();
        for job in jobs {
            if job.group != 0 {
                return Err(p.unsupported(format!(
                    "job `{}` uses stonewall; jobs of a system run all run together",
                    job.name
                )));
            }
            if job.block_size_bytes % 512 != 0 {
                return Err(p.unsupported(format!(
                    "job `{}`: bs {} is not a multiple of 512",
                    job.name, job.block_size_bytes
                )));
            }
            let job_index = match results.iter().position(|r| r.name == job.name) {
                Some(i) => i,
                None => {
                    results.push(FioJobResult {
                        name: job.name.clone(),
                        ..Default::default()
                    });
                    results.len() - 1
                }
            };
            for clone in 0..job.numjobs {
                let gen =
                    IoGenerator::new(job, clone, p.file_bytes).map_err(|e| p.generator_error(e))?;
                let fio = fio_thread(job, job_index as u32, gen);
                let tag = format!("{}.{clone}", job.name);
                let t = self.thread(p, Role::Fio(Box::new(fio)), &tag, None, 0);
                if let Some(seed_mix) = job.randseed {
                    let name = &p.spec.name;
                    self.threads[t as usize].app.rng = stream(
                        self.seed ^ seed_mix,
                        &format!("proc.{}.{name}.{}.{clone}", p.index, job.name),
                    );
                }
            }
        }
        Ok(ProcState::Fio { jobs: results })
    }

    /// A trace replayed by one direct-I/O thread, its file opened here and streamed.
    fn spawn_trace(
        &mut self,
        p: &Spawning,
        trace: &dyn TraceSource,
        mode: TraceMode,
    ) -> Result<ProcState, HostError> {
        let stream = trace
            .open(p.file_bytes)
            .map_err(|reason| HostError::Trace {
                process: p.spec.name.clone(),
                reason,
            })?;
        let (open_loop, depth, asynchronous) = match mode {
            TraceMode::OpenLoop => (true, OPEN_LOOP_MAX_IN_FLIGHT, true),
            TraceMode::Afap => (false, 1, false),
            TraceMode::ClosedLoop { queue_depth } => {
                if !(1..=OPEN_LOOP_MAX_IN_FLIGHT).contains(&queue_depth) {
                    return Err(p.unsupported(format!(
                        "trace queue depth {queue_depth}: expected 1 to {OPEN_LOOP_MAX_IN_FLIGHT}"
                    )));
                }
                (false, queue_depth, true)
            }
        };
        let source = IoSource::Trace(Box::new(TraceFeed::new(stream, open_loop, p.file_bytes)));
        let fio = FioThread {
            spec_depth: depth,
            asynchronous,
            latency_at_completion: true,
            ..FioThread::new(0, source)
        };
        self.thread(p, Role::Fio(Box::new(fio)), "trace", None, 0);
        Ok(ProcState::Fio {
            jobs: vec![FioJobResult {
                name: p.spec.name.clone(),
                ..Default::default()
            }],
        })
    }

    /// The flusher: a kernel thread of no process, idle until write-back is due.
    fn spawn_flusher(&mut self) -> u32 {
        let t = self.place(IoClass::Throughput);
        let mut th = Thread::new(
            u32::MAX,
            IoClass::Throughput,
            Role::Flusher,
            stream(self.seed, "kernel.flusher"),
            self.cfg.blk.plug_max_requests as usize,
        );
        th.wait = Wait::FlusherIdle;
        self.threads.push(th);
        t
    }

    /// One kblockd worker per core (`kblockd`): bound to it, nice −20, idle until a queue
    /// needs a deferred run. Created last, so no other thread's id or stream moves.
    fn spawn_kblockd(&mut self) -> Vec<u32> {
        (0..self.cfg.cpu.cores as u16)
            .map(|core| {
                let t = self.cpu.add_thread(core, IoClass::Throughput);
                self.cpu
                    .make_pinned_worker(t, crate::cpu::NICE_MINUS_20_WEIGHT);
                let mut th = Thread::new(
                    u32::MAX,
                    IoClass::Throughput,
                    Role::Kblockd { queues: Vec::new() },
                    stream(self.seed, &format!("kernel.kblockd.{core}")),
                    0,
                );
                th.wait = Wait::Kblockd;
                self.threads.push(th);
                t
            })
            .collect()
    }

    /// The run's end and the flusher's first periodic wake-up.
    fn arm_first_events(&mut self, duration: SimTime) {
        self.events.schedule(duration, Ev::Stop);
        let first_tick = SimTime(self.cfg.pagecache.dirty_writeback_interval_ns);
        if first_tick < duration {
            self.events.schedule(first_tick, Ev::FlushTick);
        }
    }

    fn into_host(
        mut self,
        flusher: u32,
        kblockd: Vec<u32>,
        dedicated_core: Option<u16>,
        duration: SimTime,
    ) -> Host {
        let cfg = self.cfg;
        let cores = cfg.cpu.cores as u16;
        // Two owners of per-site streams: the CPU draws only the context-switch and
        // cache-pollution sites, the host every other site. A site drawn by both would replay
        // the same stream twice (correlated costs): keep each site with one owner.
        self.cpu
            .set_cost_draws(CostDraws::new(self.seed, &cfg.jitter));
        let mut blk = Blk::new(&cfg.blk, cores, cfg.nvme.queue_depth, cfg.nr_requests())
            .with_poll_queues(cfg.nvme.poll_queues as u16)
            .with_classes(cfg.attr == Switch::On);
        if cfg.nvme.lc_queue == Switch::On {
            blk = blk.with_lc_queues();
        }
        Host::from_parts(HostParts {
            cfg: cfg.clone(),
            events: self.events,
            cpu: self.cpu,
            pc: self.pc,
            blk,
            threads: self.threads,
            procs: self.procs,
            flush: FlusherState::new(flusher),
            duration,
            nvme: nvme::Driver::new(
                nvme::queue_pairs(cores, cfg.nvme.queue_depth, cfg.nvme.lc_queue == Switch::On)
                    .into_iter()
                    .map(|mut qp| {
                        // The accelerator polls every CQ: their vectors stay masked.
                        qp.interrupts &= cfg.nvme.accelerator == Switch::Off;
                        qp
                    })
                    .collect(),
            ),
            costs: CostDraws::new(self.seed, &cfg.jitter),
            poll_lock_rng: stream(self.seed, "host.poll_lock"),
            accel: (cfg.nvme.accelerator == Switch::On).then(|| {
                crate::accel::AccelDriver::new(crate::accel::Xler::new(
                    crate::accel::AccelConfig {
                        register_ns: cfg.nvme.accel_register_ns,
                        cam_ns: cfg.nvme.accel_cam_ns,
                        doorbell_ns: cfg.nvme.accel_doorbell_ns,
                        barrier_ns: cfg.nvme.accel_barrier_ns,
                        poll_ns: cfg.nvme.accel_poll_ns,
                        irq_ns: cfg.nvme.accel_irq_ns,
                    },
                    // SQ ids start at 1: slot 0 stays unused.
                    4 * cores + 1,
                    cfg.nvme.queue_depth,
                    (cfg.blk.max_request_bytes / 512) as u32,
                ))
            }),
            kblockd,
            dedicated_core,
        })
    }
}

/// A fio clone's state: synchronous engines issue one I/O at a time, asynchronous (direct)
/// ones keep `iodepth` in flight.
fn fio_thread(job: &JobSpec, job_index: u32, gen: IoGenerator) -> FioThread {
    let direct = job.buffering == Buffering::Direct;
    FioThread {
        spec_depth: job.effective_iodepth().max(1),
        asynchronous: job.engine == workload::IoEngine::Async && direct,
        polled: job.completion == workload::Completion::Polled,
        direct,
        thinktime_ns: job.thinktime_ns,
        rate_interval_ns: job.rate_iops.filter(|&r| r > 0).map(|r| 1_000_000_000 / r),
        runtime_ns: job.runtime_ns,
        ramp_ns: job.ramp_time_ns,
        ramp_over: job.ramp_time_ns == 0,
        ..FioThread::new(job_index, IoSource::Job(gen))
    }
}

#[cfg(test)]
mod tests {
    use engine::{IoClass, SimTime};
    use workload::Profile;

    use crate::config::HostConfig;
    use crate::machine::Host;
    use crate::process::{Arrivals, ProcessSpec};
    use crate::testing::FixedLatencyDevice;

    /// The essay's worked example: apache (server + 1 worker) then pagerank (7 threads) on
    /// arm8, threads placed round-robin in creation order, then the flusher, then the kblockd
    /// workers, one on each core.
    #[test]
    fn threads_are_placed_round_robin_in_creation_order() {
        let cfg = HostConfig::preset("arm8").unwrap();
        let spec = |name: &str, class| {
            ProcessSpec::from_profile(Profile::named(name).unwrap(), class, &cfg)
        };
        let procs = vec![
            spec("apache", IoClass::LatencyCritical),
            spec("pagerank", IoClass::Throughput),
        ];
        let host = Host::new(&cfg, procs, 1, SimTime::from_ms(1), 1 << 40).unwrap();
        let cores: Vec<u16> = (0..host.threads.len())
            .map(|t| host.cpu.core_of(t as u32))
            .collect();
        // Offline threads are runnable at t = 0 but none has run yet: still on its home core.
        assert_eq!(
            cores,
            [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7],
            "server, 1 worker, 7 pagerank threads, flusher, a kblockd worker per core"
        );
        assert_eq!(host.flush.thread() as usize, host.threads.len() - 9);
        assert_eq!(
            (0..8).map(|c| host.kblockd_worker(c)).collect::<Vec<u32>>(),
            (10..18).collect::<Vec<u32>>()
        );
    }

    /// A client sends no request at or after the run's end, its first one included: fixed
    /// arrivals 1 ms apart from a start 1 ms before the end would send the first at the end.
    #[test]
    fn no_request_is_sent_at_the_run_s_end() {
        let cfg = HostConfig::preset("arm8").unwrap();
        let report = |start_ms: u64| {
            let mut spec = ProcessSpec::from_profile(
                Profile::named("apache").unwrap(),
                IoClass::LatencyCritical,
                &cfg,
            );
            spec.arrivals = Arrivals::Fixed;
            spec.requests_per_sec = 1_000;
            spec.start = SimTime::from_ms(start_ms);
            let mut host = Host::new(&cfg, vec![spec], 1, SimTime::from_ms(10), 1 << 40).unwrap();
            FixedLatencyDevice::new(&host, 10_000).run(&mut host, None);
            let p = host.finish().unwrap().processes.remove(0);
            (p.requests, p.unfinished_requests)
        };
        // From t = 0: requests at 1, 2, … 9 ms; the one due at 10 ms is not sent.
        assert_eq!(report(0), (9, 0));
        // From 9 ms: the first request would be due at 10 ms, the end.
        assert_eq!(report(9), (0, 0));
        assert_eq!(report(8), (1, 0));
    }
}
