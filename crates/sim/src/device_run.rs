//! Device-level runs: fio-like jobs driven straight into the SSD model's NVMe queues.
//!
//! ## The thin host
//! Each clone of each job is a host thread with its own SQ/CQ pair. A thread keeps up to
//! `iodepth` I/Os in flight (1 for synchronous engines). Issuing an I/O costs the thread
//! `submit_ns` of CPU before the doorbell rings; seeing a completion costs `isr_ns` (interrupt
//! handler and block-layer completion) plus `wakeup_ns` if the thread had gone to sleep
//! waiting, or `poll_ns` when it polls (`hipri`). A thread does one thing at a time, so at high queue depth the host's CPU
//! time shows up as queueing, as it does for a real fio thread. Latency is measured as fio
//! measures it: from the submit call to the moment the thread has reaped the completion.
//!
//! Worked example (`zssd`, x86-4, QD1 random read): submit 1.5 µs → device ≈ 9.3 µs (doorbell,
//! fetch, firmware, tR 3 µs, 2 × 2 KiB over a channel pair, DMA, CQE) → ISR 1.0 µs + wake-up
//! 2.7 µs: ≈ 14.5 µs end to end.
//!
//! ## Spread
//! The four costs are means: each I/O draws its own from a shifted exponential of that mean
//! (`HostCosts::cost_cv_pct`, 10 % on the presets; `host::jitter`'s essay has the law), each
//! cost from its own stream of the run's seed (`host.cost.syscall`, `.isr`,
//! `.context_switch`, `.poll_complete`). With the device's own spread (NAND sense times and
//! read retry, `device::flash`), a QD1 job's latency has a body and a tail while its mean
//! stays the calibrated one. Worked example (x86-4, interrupts): the 5.2 µs of host work per
//! read has a floor of 4.68 µs and puts the p99 about 1.1 µs above the mean.
//!
//! ## CPU accounting
//! Each thread runs on a core of its own: the k-th thread of a stonewall group on core k, so
//! the host has as many cores as the largest group has threads, and groups reuse the cores one
//! after another. Every nanosecond of every core goes to one category, named as the full-system
//! run names them (`host::Cat`, summed over cores into the same `cpu` summary): `submit_ns` —
//! the syscall, block layer and driver path collapsed into one number — is `syscall` (`blk`
//! and `nvme` stay 0: the thin host does not split it); `isr_ns` (the ISR with the block-layer
//! completion) is `irq`; `wakeup_ns` is `sched` (one context switch counted each time); and
//! `poll_ns` plus the time a polling thread spins on its CQ while it has I/O in flight is
//! `poll`. The rest is `idle`, so per core the categories add up to the run's simulated time.
//! `user` is 0: `HostCosts` has no per-I/O user cost (fio's own user time per I/O has no
//! published figure here; the full host model has none for fio threads either).
//! Worked example (`zssd`, x86-4, QD1 random read, ≈ 14.5 µs per I/O): with interrupts the core
//! is busy 1.5 (submit) + 1.0 (ISR) + 2.7 (wake-up) = 5.2 µs of every 14.5 (≈ 36 %); polled, it
//! spins from the doorbell to the CQE and is busy all the time (≈ 100 %).
//!
//! ## Semantics kept from fio
//! `rate_iops` paces issue times; `thinktime` waits after each completion before the next
//! issue; `runtime` caps (or, with `time_based`, defines) a job's length; `stonewall` groups run one
//! after another. Results are reported per job name (all clones of a job together).
//!
//! `ramp_time` is lead-in, as fio's HOWTO defines it: "fio will run the specified workload for
//! this amount of time before logging any performance numbers … the ramp_time is considered
//! lead in time for a job, thus it will increase the total runtime if a special timeout or
//! runtime is specified". When the ramp ends fio resets the job's statistics and counters
//! (`reset_all_stats` in fio's `libfio.c`: `io_bytes`, `io_issues`, the start time), so here:
//! I/Os *submitted* during the ramp are run but not recorded; `runtime` counts from the ramp's
//! end (a job with `ramp_time=1s runtime=2s` runs 3 s); `size`, `io_size` and `number_ios`
//! count the I/Os after the ramp ([`IoGenerator::restart_budget`]); and IOPS and bandwidth
//! are over the time from the ramp's end to the job's last completion.
//!
//! ## Trace replay
//! [`DeviceRun::with_trace`] runs a block trace instead of jobs: one thread whose I/Os come from
//! the trace, streamed (`trace_replay`). Everything else — costs, CPU accounting, integrity,
//! time series, the summary — is the same as for a job; the summary's job is named after the
//! trace file and `sim.trace` says what the replay read, skipped and folded.
//!
//! ## Invariants
//! Every I/O completes exactly once (the run ends by checking that the device and every thread
//! have nothing in flight). In data-integrity mode each write carries a fresh version and every
//! read that no write overlapped is checked against the last completed write of each unit.

use std::time::Instant;

mod host_queue;
mod integrity;
mod thread;

use device::{
    Completion as Cqe, DeviceOptions, NvmeCommand, SqPriority, Ssd, Status, SECTOR_BYTES,
};
use engine::{stream, IoClass, IoOp, LatencyHistogram, SimTime};
use host::cpu::{Cat, CoreStats, CAT_COUNT};
use host::jitter::{CostDraws, CostSite};
use workload::{Completion, IoGenerator, JobSpec, Op};

use crate::config::{DeviceRunConfig, HostCosts};
use crate::report::{
    CpuSummary, JobResult, OpResult, RunSummary, SimInfo, ThinHostDetail, ThreadCpu,
};
use crate::series::{Sample, Series};
use crate::trace_replay::{TraceFeed, TraceSpec};
use host_queue::HostQueue;
use integrity::{units, Integrity};
use thread::{Pacing, Placement, Source, Thread};

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Device(#[from] device::config::ConfigError),
    #[error(transparent)]
    Generator(#[from] workload::GenError),
    #[error("job `{job}`: block size {bs} B is not a multiple of the 512 B sector")]
    Unaligned { job: String, bs: u64 },
    #[error("data-integrity check failed: {0}")]
    Integrity(String),
    #[error("run ended with I/O still in flight: {0}")]
    Leak(String),
    #[error("writing the time series: {0}")]
    Series(std::io::Error),
    #[error(transparent)]
    Trace(#[from] workload::trace::TraceError),
}

#[derive(Clone, Copy, Debug)]
enum HostEv {
    Issue { thread: u32 },
    Reap { io: u32 },
}

#[derive(Clone, Copy, Debug, Default)]
struct IoRec {
    thread: u32,
    op: Option<Op>,
    offset_bytes: u64,
    len_bytes: u64,
    submit_start: SimTime,
    version: u32,
    /// Integrity: value of the overlap counter when the read was issued.
    write_epoch: u64,
    live: bool,
}

#[derive(Default)]
struct JobAcc {
    name: String,
    read: LatencyHistogram,
    write: LatencyHistogram,
    read_bytes: u64,
    write_bytes: u64,
    first_start: Option<SimTime>,
    last_end: SimTime,
}

/// Progress callback: `(simulated_ns, ios_done)`, called every few hundred milliseconds of wall
/// time once a run has lasted longer than `Progress::after_wall_ms`.
pub trait Progress {
    fn update(&mut self, simulated_ns: u64, ios: u64);
    fn finish(&mut self) {}
}

/// No progress reporting.
pub struct Silent;
impl Progress for Silent {
    fn update(&mut self, _: u64, _: u64) {}
}

/// Progress on the terminal: a spinner with the wall time, the simulated time and the I/Os
/// done, drawn from the first update and cleared when the run finishes.
#[derive(Default)]
pub struct Spinner(Option<indicatif::ProgressBar>);

impl Progress for Spinner {
    fn update(&mut self, simulated_ns: u64, ios: u64) {
        let bar = self.0.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                    .expect("valid template"),
            );
            b
        });
        bar.set_message(format!(
            "simulated {}, {ios} I/Os",
            engine::time::format_ns(simulated_ns)
        ));
        bar.tick();
    }
    fn finish(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}

pub struct DeviceRun<'a> {
    cfg: &'a DeviceRunConfig,
    ssd: Ssd,
    events: HostQueue<HostEv>,
    threads: Vec<Thread>,
    ios: Vec<IoRec>,
    free_ios: Vec<u32>,
    jobs: Vec<JobAcc>,
    groups: Vec<u32>,
    current_group: usize,
    integrity: Option<Integrity>,
    ios_done: u64,
    costs: HostCosts,
    /// Per-I/O draws of `costs` (constant when `cost_cv_pct` is 0).
    draws: CostDraws,
    series: Option<Series>,
}

impl<'a> DeviceRun<'a> {
    pub fn new(cfg: &'a DeviceRunConfig) -> Result<DeviceRun<'a>, RunError> {
        Self::build(cfg, None)
    }

    /// A run that replays `trace` instead of `cfg`'s jobs (see "Trace replay" above); the
    /// device, host costs, seed and integrity mode are `cfg`'s.
    pub fn with_trace(
        cfg: &'a DeviceRunConfig,
        trace: &TraceSpec,
    ) -> Result<DeviceRun<'a>, RunError> {
        Self::build(cfg, Some(trace))
    }

    fn build(
        cfg: &'a DeviceRunConfig,
        trace: Option<&TraceSpec>,
    ) -> Result<DeviceRun<'a>, RunError> {
        let mut ssd = Ssd::with_seed(
            &cfg.device,
            DeviceOptions {
                integrity: cfg.integrity,
            },
            cfg.seed,
        )?;
        let capacity = ssd.capacity_bytes();
        let mut threads: Vec<Thread> = Vec::new();
        let mut jobs: Vec<JobAcc> = Vec::new();
        let mut groups: Vec<u32> = Vec::new();
        let job_specs: &[JobSpec] = match trace {
            Some(_) => &[],
            None => &cfg.jobs.jobs,
        };
        for spec in job_specs {
            if spec.block_size_bytes % SECTOR_BYTES != 0 {
                return Err(RunError::Unaligned {
                    job: spec.name.clone(),
                    bs: spec.block_size_bytes,
                });
            }
            let job = match jobs.iter().position(|j| j.name == spec.name) {
                Some(i) => i,
                None => {
                    jobs.push(JobAcc {
                        name: spec.name.clone(),
                        ..Default::default()
                    });
                    jobs.len() - 1
                }
            };
            if !groups.contains(&spec.group) {
                groups.push(spec.group);
            }
            for clone in 0..spec.numjobs {
                let sqid = threads.len() as u16 + 1;
                let core = threads.iter().filter(|t| t.group == spec.group).count() as u16;
                let iodepth = spec.effective_iodepth();
                ssd.create_queue_pair(sqid, sqid, iodepth.max(1) + 1, SqPriority::Medium);
                if spec.completion == Completion::Polled {
                    ssd.set_interrupts(sqid, false);
                }
                threads.push(Thread::new(
                    Placement {
                        job,
                        group: spec.group,
                        sqid,
                        core,
                    },
                    Source::Job(IoGenerator::new(spec, clone, capacity)?),
                    stream(
                        cfg.seed ^ spec.randseed.unwrap_or(0),
                        &format!("job.{}.{clone}", spec.name),
                    ),
                    iodepth,
                    spec.completion,
                    Pacing::of(spec),
                ));
            }
        }
        if let Some(spec) = trace {
            let feed = TraceFeed::open(spec, capacity)?;
            let iodepth = spec.max_in_flight();
            jobs.push(JobAcc {
                name: spec.job_name(),
                ..Default::default()
            });
            groups.push(0);
            ssd.create_queue_pair(1, 1, iodepth + 1, SqPriority::Medium);
            threads.push(Thread::new(
                Placement {
                    job: 0,
                    group: 0,
                    sqid: 1,
                    core: 0,
                },
                Source::Trace(Box::new(feed)),
                stream(cfg.seed, "trace"),
                iodepth,
                Completion::Interrupt,
                Pacing::NONE,
            ));
        }
        groups.sort_unstable();
        Ok(DeviceRun {
            cfg,
            ssd,
            events: HostQueue::new(),
            threads,
            ios: Vec::new(),
            free_ios: Vec::new(),
            jobs,
            groups,
            current_group: 0,
            integrity: cfg.integrity.then(Integrity::default),
            ios_done: 0,
            costs: cfg.host,
            draws: CostDraws::with_cv(cfg.seed, cfg.host.cost_cv_pct),
            series: None,
        })
    }

    /// Writes a time series of `window_ns` windows to `out` (see `series`).
    pub fn enable_series(
        &mut self,
        window_ns: u64,
        out: Box<dyn std::io::Write>,
    ) -> Result<(), RunError> {
        let cores = self.cores() as u32;
        for th in &mut self.threads {
            th.track_bursts();
        }
        self.series = Some(Series::new(window_ns, cores, out).map_err(RunError::Series)?);
        Ok(())
    }

    /// The state the time series reads at `at`, a window's end.
    fn sample(&self, at: SimTime) -> Sample {
        let mut s = Sample::default();
        s.read_device(&self.ssd);
        for th in &self.threads {
            th.busy_until(at, &mut s.cpu_ns);
        }
        s
    }

    /// Closes every series window that ends at or before `t` (the next event's time).
    fn close_windows(&mut self, t: SimTime) -> Result<(), RunError> {
        while self.series.as_ref().is_some_and(|s| s.due(t)) {
            let at = self.series.as_ref().expect("checked above").window_end();
            let sample = self.sample(at);
            let s = self.series.as_mut().expect("checked above");
            s.close(&sample).map_err(RunError::Series)?;
        }
        Ok(())
    }

    /// Runs to the end and summarises.
    pub fn run(mut self, progress: &mut dyn Progress) -> Result<RunSummary, RunError> {
        let wall = Instant::now();
        self.start_group(SimTime::ZERO);
        let mut cqes: Vec<Cqe> = Vec::new();
        let mut now = SimTime::ZERO;
        let mut host_events = 0u64;
        let mut iterations = 0u64;
        let mut last_report = 0u128;
        loop {
            let td = self.ssd.next_event_time();
            let th = self.events.peek_time();
            if self.series.is_some() {
                if let Some(t) = td.into_iter().chain(th).min() {
                    self.close_windows(t)?;
                }
            }
            match (td, th) {
                (None, None) => break,
                (Some(d), h) if h.is_none_or(|h| d <= h) => {
                    if self.series.is_none() {
                        // The device's steps up to the host's next event, until one completes
                        // an I/O: what one step per iteration would do (host events go after
                        // the device's at equal times), without the loop between them.
                        now = self
                            .ssd
                            .advance_until_completion(h.unwrap_or(SimTime::MAX), &mut cqes)
                            .expect("the device had an event due");
                    } else {
                        // Windows close between steps: one step at a time.
                        now = d;
                        self.ssd.advance_to(d, &mut cqes);
                    }
                    // About half the steps end at the host's next event with nothing completed:
                    // no drain of an empty list then (its setup and drop cost ~30 instructions).
                    if !cqes.is_empty() {
                        for c in cqes.drain(..) {
                            self.on_cqe(c)?;
                        }
                    }
                }
                _ => {
                    let (t, ev) = self.events.pop().expect("peeked a host event");
                    now = t;
                    host_events += 1;
                    match ev {
                        HostEv::Issue { thread } => {
                            self.threads[thread as usize].issue_pending = false;
                            self.issue(t, thread);
                        }
                        HostEv::Reap { io } => self.reap(t, io)?,
                    }
                }
            }
            iterations += 1;
            if iterations & 0xFFFF == 0 {
                let ms = wall.elapsed().as_millis();
                if ms >= 2_000 && ms - last_report >= 200 {
                    last_report = ms;
                    progress.update(now.as_ns(), self.ios_done);
                }
            }
        }
        progress.finish();
        for th in &mut self.threads {
            if let Source::Trace(feed) = &mut th.source {
                if let Some(e) = feed.error.take() {
                    return Err(e.into());
                }
            }
        }
        self.check_drained()?;
        if let Some(series) = self.series.take() {
            let sample = self.sample(now);
            series.finish(now, &sample).map_err(RunError::Series)?;
        }
        let wall_ns = wall.elapsed().as_nanos() as u64;
        let device_events = self.ssd.events_processed();
        Ok(self.summarise(now, wall_ns, device_events + host_events))
    }

    fn start_group(&mut self, now: SimTime) {
        let Some(&group) = self.groups.get(self.current_group) else {
            return;
        };
        for i in 0..self.threads.len() {
            if self.threads[i].group == group {
                let th = &mut self.threads[i];
                th.started_at = Some(now);
                th.cpu_free = now;
                // Statistics start when the ramp ends (fio resets them there).
                let stats_from = now + th.ramp_ns;
                let job = &mut self.jobs[th.job];
                job.first_start = Some(job.first_start.map_or(stats_from, |t| t.min(stats_from)));
                self.issue(now, i as u32);
            }
        }
    }

    fn issue(&mut self, now: SimTime, thread: u32) {
        let costs = self.costs;
        loop {
            let th = &mut self.threads[thread as usize];
            if th.exhausted || th.in_flight >= th.iodepth {
                break;
            }
            let started = th.started_at.expect("issuing thread has started");
            let cpu_start = now.max(th.cpu_free);
            let ramp_end = started + th.ramp_ns;
            if !th.ramp_over && cpu_start >= ramp_end {
                th.ramp_over = true;
                if let Source::Job(generator) = &mut th.source {
                    generator.restart_budget();
                }
            }
            if let Some(runtime) = th.runtime_ns {
                if cpu_start >= ramp_end + runtime {
                    th.exhausted = true;
                    break;
                }
            }
            if let Some(interval) = th.rate_interval_ns {
                let allowed = started + th.issued * interval;
                if allowed > cpu_start {
                    if !th.issue_pending {
                        th.issue_pending = true;
                        self.events.schedule(allowed, HostEv::Issue { thread });
                    }
                    break;
                }
            }
            let req = match &mut th.source {
                Source::Job(generator) => generator.next(&mut th.rng),
                Source::Trace(feed) => {
                    let Some(io) = feed.peek() else {
                        th.exhausted = true;
                        break;
                    };
                    let allowed = started + io.issue_at_ns;
                    if feed.open_loop() && allowed > cpu_start {
                        if !th.issue_pending {
                            th.issue_pending = true;
                            self.events.schedule(allowed, HostEv::Issue { thread });
                        }
                        break;
                    }
                    let io = feed.take();
                    Some(workload::IoReq {
                        op: match io.op {
                            workload::trace::TraceOp::Read => Op::Read,
                            workload::trace::TraceOp::Write => Op::Write,
                        },
                        offset_bytes: io.offset_bytes,
                        len_bytes: io.len_bytes,
                    })
                }
            };
            let Some(req) = req else {
                th.exhausted = true;
                break;
            };
            // The syscall, block layer and driver path, up to the doorbell.
            let submit_ns = self.draws.draw(CostSite::Syscall, costs.submit_ns);
            let submit_at = th.run_cpu(now, cpu_start, submit_ns, Cat::Syscall);
            th.issued += 1;
            th.in_flight += 1;
            let sqid = th.sqid;
            let slot = self.alloc_io(IoRec {
                thread,
                op: Some(req.op),
                offset_bytes: req.offset_bytes,
                len_bytes: req.len_bytes,
                submit_start: cpu_start,
                version: 0,
                write_epoch: 0,
                live: true,
            });
            let version = self.integrity_on_submit(slot);
            let cmd = NvmeCommand {
                cid: slot,
                op: match req.op {
                    Op::Read => IoOp::Read,
                    Op::Write => IoOp::Write,
                },
                slba: req.offset_bytes / SECTOR_BYTES,
                sectors: (req.len_bytes / SECTOR_BYTES) as u32,
                class: IoClass::Throughput,
                hint: device::Hint::None,
                version,
            };
            self.ssd
                .submit(submit_at, sqid, cmd)
                .expect("a thread never has more commands in flight than its SQ holds");
        }
        self.maybe_finish(now, thread);
    }

    fn alloc_io(&mut self, rec: IoRec) -> u32 {
        match self.free_ios.pop() {
            Some(i) => {
                self.ios[i as usize] = rec;
                i
            }
            None => {
                self.ios.push(rec);
                (self.ios.len() - 1) as u32
            }
        }
    }

    /// Integrity mode: versions a write, or notes the epoch a read is issued at.
    fn integrity_on_submit(&mut self, slot: u32) -> u32 {
        let Some(integ) = &mut self.integrity else {
            return 0;
        };
        let rec = &mut self.ios[slot as usize];
        let units = units(rec.offset_bytes, rec.len_bytes);
        match rec.op {
            Some(Op::Write) => {
                rec.version = integ.write_submitted(units);
                rec.version
            }
            _ => {
                rec.write_epoch = integ.read_submitted(units);
                0
            }
        }
    }

    fn integrity_on_complete(&mut self, rec: &IoRec, cqe: &Cqe) -> Result<(), RunError> {
        let Some(integ) = &mut self.integrity else {
            return Ok(());
        };
        let units = units(rec.offset_bytes, rec.len_bytes);
        match rec.op {
            Some(Op::Write) => {
                integ.write_completed(units, rec.version);
                Ok(())
            }
            _ => integ
                .read_completed(units, rec.write_epoch, cqe.read_versions.as_deref())
                .map_err(RunError::Integrity),
        }
    }

    fn on_cqe(&mut self, c: Cqe) -> Result<(), RunError> {
        let rec = &self.ios[c.cid as usize];
        debug_assert!(
            rec.live,
            "completion for an I/O that is not in flight: cid {}",
            c.cid
        );
        let th = &mut self.threads[rec.thread as usize];
        let start = c.at.max(th.cpu_free);
        let costs = self.costs;
        let draws = &mut self.draws;
        let done = match th.completion {
            // A thread that was idle slept in the kernel waiting: it pays the switch back.
            Completion::Interrupt if th.cpu_free <= c.at => {
                th.interrupts += 1;
                th.context_switches += 1;
                let isr_ns = draws.draw(CostSite::Isr, costs.isr_ns);
                let isr_done = th.run_cpu(c.at, start, isr_ns, Cat::Irq);
                let wakeup_ns = draws.draw(CostSite::ContextSwitch, costs.wakeup_ns);
                th.run_cpu(c.at, isr_done, wakeup_ns, Cat::Sched)
            }
            Completion::Interrupt => {
                th.interrupts += 1;
                let isr_ns = draws.draw(CostSite::Isr, costs.isr_ns);
                th.run_cpu(c.at, start, isr_ns, Cat::Irq)
            }
            Completion::Polled => {
                let poll_ns = draws.draw(CostSite::PollComplete, costs.poll_ns);
                th.run_cpu(c.at, start, poll_ns, Cat::Poll)
            }
        };
        if c.status != Status::Success {
            return Err(RunError::Leak(format!(
                "device returned {:?} for cid {}: the thin host only issues valid commands",
                c.status, c.cid
            )));
        }
        let cid = c.cid;
        if self.integrity.is_some() {
            let rec = self.ios[cid as usize];
            // Checked against the data the device returned, at device completion.
            self.integrity_on_complete(&rec, &c)?;
        }
        self.events.schedule(done, HostEv::Reap { io: cid });
        Ok(())
    }

    fn reap(&mut self, now: SimTime, io: u32) -> Result<(), RunError> {
        // The slot is rewritten whole when it is taken again: only `live` needs clearing.
        let slot = &mut self.ios[io as usize];
        let rec = *slot;
        slot.live = false;
        debug_assert!(rec.live, "I/O {io} reaped twice");
        self.free_ios.push(io);
        self.ios_done += 1;
        let th = &mut self.threads[rec.thread as usize];
        th.in_flight -= 1;
        let started = th.started_at.expect("thread started");
        let job = &mut self.jobs[th.job];
        job.last_end = job.last_end.max(now);
        if rec.submit_start >= started + th.ramp_ns {
            let latency = now - rec.submit_start;
            if let Some(s) = &mut self.series {
                s.record(IoClass::Throughput, rec.len_bytes, latency);
            }
            match rec.op {
                Some(Op::Read) => {
                    job.read.record(latency);
                    job.read_bytes += rec.len_bytes;
                }
                Some(Op::Write) => {
                    job.write.record(latency);
                    job.write_bytes += rec.len_bytes;
                }
                None => {}
            }
        }
        let thinktime = th.thinktime_ns;
        if thinktime > 0 && !th.exhausted {
            if !th.issue_pending {
                th.issue_pending = true;
                self.events
                    .schedule(now + thinktime, HostEv::Issue { thread: rec.thread });
            }
        } else {
            self.issue(now, rec.thread);
        }
        self.maybe_finish(now, rec.thread);
        Ok(())
    }

    /// Marks a thread finished once it can issue nothing more and has nothing in flight;
    /// starts the next stonewall group when the current one is done.
    fn maybe_finish(&mut self, now: SimTime, thread: u32) {
        let th = &mut self.threads[thread as usize];
        if !th.exhausted || th.in_flight > 0 || th.finished_at.is_some() || th.issue_pending {
            return;
        }
        th.finished_at = Some(now);
        let group = th.group;
        let group_done = self
            .threads
            .iter()
            .filter(|t| t.group == group)
            .all(|t| t.finished_at.is_some());
        if group_done {
            self.current_group += 1;
            self.start_group(now);
        }
    }

    fn check_drained(&self) -> Result<(), RunError> {
        if self.ssd.in_flight() != 0 {
            return Err(RunError::Leak(format!(
                "commands still in the device: {}",
                self.ssd.pending_state()
            )));
        }
        if let Some(t) = self
            .threads
            .iter()
            .position(|t| t.in_flight != 0 || t.finished_at.is_none())
        {
            let th = &self.threads[t];
            return Err(RunError::Leak(format!(
                "thread {t} of job `{}` has {} I/Os in flight (finished: {})",
                self.jobs[th.job].name,
                th.in_flight,
                th.finished_at.is_some()
            )));
        }
        if self.ios.iter().any(|r| r.live) {
            return Err(RunError::Leak("an I/O record was never reaped".into()));
        }
        Ok(())
    }

    /// The thin host's cores: as many as the largest stonewall group has threads.
    fn cores(&self) -> usize {
        self.threads
            .iter()
            .map(|t| t.core as usize + 1)
            .max()
            .unwrap_or(0)
    }

    /// Per-core CPU statistics at `end`: each thread's time on its core, the rest idle.
    fn core_stats(&self, end: SimTime) -> Vec<CoreStats> {
        let mut cores: Vec<CoreStats> = (0..self.cores())
            .map(|c| CoreStats {
                core: c as u32,
                ns: [0; CAT_COUNT],
                class_ns: [[0; CAT_COUNT]; 2],
                context_switches: 0,
                interrupts: 0,
                migrations_in: 0,
            })
            .collect();
        for th in &self.threads {
            let core = &mut cores[th.core as usize];
            for (i, ns) in th.cpu_ns.iter().enumerate() {
                core.ns[i] += ns;
                // Every I/O of a device-level run is of the throughput class.
                core.class_ns[IoClass::Throughput.index()][i] += ns;
            }
            core.context_switches += th.context_switches;
            core.interrupts += th.interrupts;
        }
        for core in &mut cores {
            let busy: u64 = core.ns.iter().sum();
            assert!(
                busy <= end.as_ns(),
                "core {} busy {busy} ns in a run of {} ns: threads of a core overlapped",
                core.core,
                end.as_ns()
            );
            core.ns[Cat::Idle.index()] = end.as_ns() - busy;
        }
        cores
    }

    fn summarise(self, end: SimTime, wall_ns: u64, events: u64) -> RunSummary {
        let jobs = self
            .jobs
            .iter()
            .enumerate()
            .map(|(k, j)| {
                let span_ns = j.first_start.map_or(0, |s| j.last_end.saturating_since(s));
                let kernel_ns = self
                    .threads
                    .iter()
                    .filter(|t| t.job == k)
                    .map(|t| t.cpu_ns.iter().sum::<u64>() - t.cpu_ns[Cat::User.index()])
                    .sum();
                JobResult {
                    name: j.name.clone(),
                    read: OpResult::from_histogram(&j.read, j.read_bytes, span_ns),
                    write: OpResult::from_histogram(&j.write, j.write_bytes, span_ns),
                    cpu: ThreadCpu {
                        user_ns: 0,
                        kernel_ns,
                    },
                }
            })
            .collect();
        let cores = self.core_stats(end);
        RunSummary {
            sim: SimInfo {
                seed: self.cfg.seed,
                simulated_ns: end.as_ns(),
                wall_ns,
                events,
                ios: self.ios_done,
                device: self.cfg.device.name.clone(),
                host: self.cfg.host_name.clone(),
                job_source: self.cfg.job_source.clone(),
                integrity_reads_checked: self.integrity.as_ref().map(Integrity::reads_checked),
                trace: self.threads.iter().find_map(|t| match &t.source {
                    Source::Trace(feed) => Some(feed.info()),
                    Source::Job(_) => None,
                }),
            },
            device: self.ssd.stats(),
            jobs,
            cpu: CpuSummary::from_cores(&cores),
            host: ThinHostDetail { cores },
        }
    }

    /// Borrow the device (tests inspect it after a run via [`run_with_device`]).
    pub fn device(&self) -> &Ssd {
        &self.ssd
    }
}
