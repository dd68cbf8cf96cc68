//! The machine: the host's layers wired into one state machine, driven by one event queue.
//!
//! Each layer (`cpu`, `pagecache`, `blk`, `nvme`, `process`) keeps its own state and exposes
//! operations; the machine routes between them the way the kernel's call paths do, and turns
//! every piece of kernel or user work into a CPU burst on the thread (or interrupt) that does it.
//! This file holds the state ([`Host`]), the event loop and the thread primitives (burst,
//! sleep, wake); the routing is split by layer into `impl Host` blocks, each in a child module
//! named for the layer it models: `spawn` (building the host), `app` and `fio` (what
//! applications do), `syscall` (read/write system calls, direct I/O, the buffered read and
//! write paths), `blk_submit` (bio submission, plug, dispatch, the driver's command),
//! `kblockd` (deferred queue runs), `nvme_complete` (CQEs, interrupts, polling, request
//! completion), `dedcore` (DedCore's polling core), `accel_path` (the queue accelerator's
//! path), `writeback` (the flusher and fsync) and `tick` (the scheduler tick). When a
//! thread's burst ends, [`Host`] runs its continuation (`task::Step`) in the layer it belongs
//! to.
//!
//! ## Who may touch what
//! [`Host`]'s fields are private, so only this module and its children reach the layers'
//! state, and the children reach it only through each state type's own operations (the
//! crate essay, "State is owned by its layer"). The children's methods are `pub(super)`: the
//! event loop and the other children call them, nothing outside the machine can. The
//! machine's bookkeeping fields (clock, events, run end, logs, cost draws, poll-lock stream,
//! kblockd workers, DedCore's core) are read and written here alone; the children use the
//! primitives (`now`, `schedule`, `cost`, `stopping`, `within_run`, `with_scratch`,
//! `poller_phase`, …; `tests/layers.rs` checks it). `machine` names none of its children (it calls their methods on
//! `Host`), so the dependency runs one way: child → machine.
//! A synchronous direct read, end to end:
//!
//! ```text
//! app draws an I/O ─▶ syscall (syscall_ns) ─▶ bio submit + merge search (blk) ─▶ plug flush
//!   ─▶ dispatch (blk) ─▶ nvme_queue_rq + doorbell (nvme) ─▶ HostCommand ──▶ device
//!   device ──▶ DeviceCqe ─▶ MSI: ISR (irq) ─▶ block-layer completion (blk_complete) ─▶ wake
//!   ─▶ context switch (+ cache pollution) (sched) ─▶ the thread continues
//! ```
//!
//! Worked example (arm8 + zssd, the 24 KiB direct reads of `apache` running alone; the
//! breakdown means `ullstack sim --system` prints for `seed = 1`, `duration_ms = 1000`, one
//! `apache` process): syscall 1.0 µs, then software queue 1.5 µs (bio submit), hardware queue
//! 0.8 µs (dispatch), driver 1.2 µs (command + doorbell), device ≈ 15.0 µs, ISR 2.5 µs,
//! block-layer completion 1.5 µs, context switch back 2.5 µs: ≈ 26 µs from the read call to
//! the worker running again (the process's mean I/O latency: 26.0 µs). Co-running with
//! `pagerank` on all 8 cores, the device part barely changes, the switch back grows (the
//! worker must win its core back from a CPU hog) and nearly every bio is submitted cold
//! (37.2 µs more in the software and hardware queues: `blk_submit`'s essay); beside
//! `pagerank` on seven cores, about three bios in four are cold too (pagerank's code refills
//! the shared L2, `cpu`'s essay) though apache keeps a core.
//!
//! The host talks to the device only through messages: [`HostCommand`]s out (collected by
//! [`Host::take_commands`]) and [`DeviceCqe`]s in ([`Host::deliver`]); the `sim` crate advances
//! host and device in lock-step. Like the device, the host exposes two clocks:
//! [`Host::next_event_time`] and [`Host::step`]. The per-layer times of each request are
//! accounted in `breakdown`, whose essay explains them.
//!
//! ## What it leaves out
//! Anything outside the I/O path: no network stack beyond fixed costs, no memory management
//! besides the page cache, one file per process; each layer's essay lists its own omissions.
//!
//! ## Run end
//! At the configured duration clients stop sending, offline and fio threads stop at their next
//! step, and the flusher only serves writers still blocked on the dirty limit; everything in
//! flight drains. [`Host::finish`] checks that every request completed exactly once, that
//! nothing is left in the block layer, and that the page cache's counters agree with its pages.

mod accel_path;
mod app;
mod blk_submit;
mod dedcore;
mod fio;
mod kblockd;
mod nvme_complete;
mod spawn;
mod syscall;
mod tick;
mod writeback;

use engine::{EventQueue, IoClass, LatencyHistogram, SimRng, SimTime};

use crate::blk::{Blk, BlkStats, QueueKind, Request};
use crate::breakdown::{Breakdown, LayerTimes};
use crate::config::HostConfig;
use crate::cpu::{Cat, CoreOutcome, CoreStats, CoreTimer, Cpu, IrqAction, IrqWork};
use crate::exectime::ExecTime;
use crate::flusher::FlusherState;
use crate::jitter::{CostDraws, CostSite};
use crate::nvme::{DeviceCqe, Driver, HostCommand, NvmeStats, QueuePairSpec};
use crate::pagecache::{PageCache, PageCacheStats};
use crate::process::{Process, ProcessReport};
use crate::task::{Step, Thread, Wait};

/// A host event or core timer at `at` before the host's clock `now`. Out of line: the checks
/// run on every event.
#[cold]
#[inline(never)]
fn time_went_backwards(what: &str, at: SimTime, now: SimTime) -> ! {
    panic!("{what} at {at}, before the host's clock {now}: time went backwards")
}

/// Host events.
#[derive(Clone, Copy, Debug)]
enum Ev {
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
    /// The scheduler tick on every busy core (`jitter.tick_hz`).
    Tick,
    /// A process that starts later (`ProcessSpec::start`) starts: its threads become runnable.
    Start { proc: u32 },
    /// The run's duration is over.
    Stop,
    /// The queue accelerator's doorbell reaches the SSD, which fetches SQ `sq`'s oldest entry.
    AccelFetch { sq: u16 },
}

impl Ev {
    /// The scheduler's next decision point on a core, as a host event.
    fn core(timer: CoreTimer) -> Ev {
        Ev::Core {
            core: timer.core,
            gen: timer.gen,
        }
    }
}

/// Where a wake-up comes from, which decides how it reaches the woken thread's core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waker {
    /// Its own core (or the queue's): the thread joins its run queue directly.
    Local,
    /// DedCore's polling core, finishing a handed-over completion (`dedcore`): a reschedule
    /// IPI on the thread's core and the hand-off's cache-line transfers.
    PollingCore,
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
    #[error(
        "process `{process}`: its file ends at byte {need_bytes} but the device holds \
         {capacity_bytes} bytes (files are laid out in process order, each on a 1 MiB \
         boundary; lower file_bytes)"
    )]
    Capacity {
        process: String,
        need_bytes: u64,
        capacity_bytes: u64,
    },
    #[error("process `{process}`: {reason}")]
    Unsupported { process: String, reason: String },
    /// A trace process's trace could not be opened or read to its end (a malformed line).
    #[error("process `{process}`: {reason}")]
    Trace { process: String, reason: String },
    #[error("run ended inconsistently: {0}")]
    Leak(String),
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
    cpu: Cpu,
    pc: PageCache,
    blk: Blk,
    threads: Vec<Thread>,
    procs: Vec<Process>,
    flush: FlusherState,
    /// The NVMe driver's queue pairs, commands and counters.
    nvme: Driver,
    /// The queue accelerator (`nvme.accelerator`), if on.
    accel: Option<crate::accel::AccelDriver>,
    /// The host's events ([`Host::schedule`]).
    events: EventQueue<Ev>,
    // The machine's own bookkeeping: the layers reach it through named operations
    // (`Host::stopping`, `Host::within_run`, `Host::log_response`, ...).
    /// The time of the event being handled ([`Host::now`]).
    now: SimTime,
    /// Per-operation kernel costs (constant unless `jitter.cost_cv_pct` > 0, [`Host::cost`]).
    costs: CostDraws,
    /// DedCore (`nvme.dedcore`): the polling core, if any ([`Host::dedicated_core`]).
    dedicated_core: Option<u16>,
    /// The run's configured end ([`Host::within_run`]).
    duration: SimTime,
    /// The duration is over ([`Host::stopping`]).
    stopping: bool,
    layer_times: LayerTimes,
    /// A reusable list of thread ids ([`Host::with_scratch`]).
    scratch: Vec<u32>,
    errors: Vec<String>,
    /// Where in its poll loop a submitter finds a spinning poller (`jitter.poll_lock`,
    /// [`Host::poller_phase`]).
    poll_lock_rng: SimRng,
    /// Where the wake-ups issued now come from (DedCore's hand-offs cross cores,
    /// [`Host::waking_from_polling_core`]).
    waker: Waker,
    /// Each core's kblockd worker thread (`kblockd`), by core ([`Host::kblockd_worker`]).
    kblockd: Vec<u32>,
    /// Application I/Os completed since the last [`Host::drain_io_log`]: `(class, bytes,
    /// latency_ns)`; `None` (the default) keeps no log.
    io_log: Option<Vec<(IoClass, u64, u64)>>,
    /// Online services' requests answered since the last [`Host::drain_response_log`]: their
    /// response times, ns; `None` (the default) keeps no log.
    response_log: Option<Vec<u64>>,
}

/// The layers' state a host is assembled from (`spawn`): [`Host::from_parts`] adds the
/// machine's own bookkeeping, which starts empty.
struct HostParts {
    cfg: HostConfig,
    events: EventQueue<Ev>,
    cpu: Cpu,
    pc: PageCache,
    blk: Blk,
    threads: Vec<Thread>,
    procs: Vec<Process>,
    flush: FlusherState,
    nvme: Driver,
    costs: CostDraws,
    accel: Option<crate::accel::AccelDriver>,
    /// The poller-phase stream (`jitter.poll_lock`).
    poll_lock_rng: SimRng,
    /// Each core's kblockd worker thread, by core.
    kblockd: Vec<u32>,
    /// DedCore's polling core, if on.
    dedicated_core: Option<u16>,
    /// The run's configured end.
    duration: SimTime,
}

impl Host {
    /// The host made of `parts`, at time 0, keeping no logs.
    fn from_parts(parts: HostParts) -> Host {
        let HostParts {
            cfg,
            events,
            cpu,
            pc,
            blk,
            threads,
            procs,
            flush,
            nvme,
            costs,
            accel,
            poll_lock_rng,
            kblockd,
            dedicated_core,
            duration,
        } = parts;
        Host {
            cfg,
            events,
            cpu,
            pc,
            blk,
            threads,
            procs,
            flush,
            now: SimTime::ZERO,
            nvme,
            costs,
            accel,
            dedicated_core,
            duration,
            stopping: false,
            layer_times: LayerTimes::new(),
            scratch: Vec::with_capacity(16),
            errors: Vec::new(),
            poll_lock_rng,
            waker: Waker::Local,
            kblockd,
            io_log: None,
            response_log: None,
        }
    }

    /// Raises `work` as an interrupt at `at` (between events, not before the host's clock) on
    /// thread `t`'s core, for a test that disturbs a core between events.
    #[cfg(test)]
    pub(crate) fn raise_irq_for_test(&mut self, at: SimTime, t: u32, work: IrqWork) {
        assert!(
            at >= self.now,
            "an interrupt injected before the host's clock"
        );
        self.now = at;
        let core = self.cpu.core_of(t);
        self.cpu.raise_irq(at, core, work);
        self.arm_core_timers();
    }

    /// One operation's cost at `site` whose mean is `mean_ns` (`mean_ns` itself unless
    /// `jitter.cost_cv_pct` > 0: `CostDraws::draw`).
    #[inline]
    fn cost(&mut self, site: CostSite, mean_ns: u64) -> u64 {
        self.costs.draw(site, mean_ns)
    }

    /// DedCore's polling core (`nvme.dedcore`), if on.
    fn dedicated_core(&self) -> Option<u16> {
        self.dedicated_core
    }

    /// Schedules `ev` at `at`.
    fn schedule(&mut self, at: SimTime, ev: Ev) {
        self.events.schedule(at, ev);
    }

    /// Whether the run's duration is over: clients stop sending, offline and fio threads
    /// stop at their next decision.
    fn stopping(&self) -> bool {
        self.stopping
    }

    /// Whether `at` falls before the run's configured end.
    fn within_run(&self, at: SimTime) -> bool {
        at < self.duration
    }

    /// Logs an online service's response time, if the response log is on.
    fn log_response(&mut self, latency_ns: u64) {
        if let Some(log) = &mut self.response_log {
            log.push(latency_ns);
        }
    }

    /// Core `core`'s kblockd worker thread.
    fn kblockd_worker(&self, core: u16) -> u32 {
        self.kblockd[core as usize]
    }

    /// Runs `f` with the wake-ups it issues coming from DedCore's polling core (they cross
    /// to the waiters' cores), then wakes locally again.
    fn waking_from_polling_core(&mut self, f: impl FnOnce(&mut Host)) {
        self.waker = Waker::PollingCore;
        f(self);
        self.waker = Waker::Local;
    }

    /// Where in a spinning poller's loop of `iteration_ns` a submitter arrives, drawn
    /// uniformly in `[0, iteration_ns)` from the poll-lock stream (`jitter.poll_lock`).
    fn poller_phase(&mut self, iteration_ns: u64) -> u64 {
        engine::rng::below(&mut self.poll_lock_rng, iteration_ns)
    }

    /// Counts thread `class`'s wait for its core after an I/O wake-up (the breakdown's
    /// context-switch part).
    fn count_core_wait(&mut self, class: IoClass, waited_ns: u64) {
        self.layer_times
            .record_context_switch(class.index(), waited_ns);
    }

    /// Counts a completed request's time in each layer (the breakdown), begun completing at
    /// `started`.
    fn count_request_layers(&mut self, req: &Request, started: SimTime, polled: bool) {
        self.layer_times.record(req, started, self.now, polled);
    }

    /// Runs `f` with the host's reusable, empty list of thread ids (left empty again after).
    fn with_scratch(&mut self, f: impl FnOnce(&mut Host, &mut Vec<u32>)) {
        let mut list = std::mem::take(&mut self.scratch);
        f(self, &mut list);
        list.clear();
        self.scratch = list;
    }

    /// Queue pairs to create on the device before the run (admin commands).
    pub fn queue_pairs(&self) -> &[QueuePairSpec] {
        self.nvme.queue_pairs()
    }

    /// Whether the driver asks the controller for strict-priority arbitration when it enables
    /// it (NVMe CC.AMS; `nvme.lc_queue`): the latency-critical SQs are created urgent.
    pub fn strict_priority(&self) -> bool {
        self.cfg.nvme.lc_queue == crate::config::Switch::On
    }

    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    /// When the host next has something to do. Inlined (the system loop asks at every turn).
    #[inline]
    pub fn next_event_time(&self) -> Option<SimTime> {
        self.events.peek_time()
    }

    /// Runs the host's next event. Commands it issued wait in [`Host::take_commands`].
    pub fn step(&mut self) {
        let Some((t, ev)) = self.events.pop() else {
            return;
        };
        if t < self.now {
            time_went_backwards("host event", t, self.now);
        }
        self.now = t;
        self.handle(ev);
        self.arm_core_timers();
    }

    /// Turns the scheduler's re-planned decision points into core events.
    #[inline]
    fn arm_core_timers(&mut self) {
        let now = self.now;
        let events = &mut self.events;
        self.cpu.reschedule(now, |timer: CoreTimer| {
            // `plan` adds a non-negative delay to `now`; checked in debug builds only (0.3 % of
            // the instructions of a run: it runs for every core timer).
            debug_assert!(
                timer.at >= now,
                "core {} planned at {} before {now}",
                timer.core,
                timer.at
            );
            events.schedule(timer.at, Ev::core(timer))
        });
    }

    /// Moves the commands issued so far into `out` (in issue order, non-decreasing `at`).
    /// Inlined: the system loop calls it after every host event, and most issue none.
    #[inline]
    pub fn take_commands(&mut self, out: &mut Vec<HostCommand>) {
        self.nvme.take_commands(out);
    }

    /// A completion entry from the device (its `at` is never before the host's last event).
    pub fn deliver(&mut self, cqe: DeviceCqe) {
        if !cqe.success {
            self.errors.push(format!(
                "device failed command {} on CQ {}",
                cqe.cid, cqe.cqid
            ));
        }
        self.nvme.note_write_buffer_pct(cqe.write_buffer_pct);
        self.on_buffer_status(cqe.write_buffer_pct);
        let h = self.blk.hctx_of_queue(cqe.cqid);
        assert!(
            cqe.at >= self.now,
            "CQE for command {} on CQ {} at {}, before the host's clock {}",
            cqe.cid,
            cqe.cqid,
            cqe.at,
            self.now
        );
        // With the accelerator every device CQ is masked: it polls them and interrupts us.
        let at = match &self.accel {
            Some(x) => {
                assert!(
                    !cqe.interrupt,
                    "CQ {} raised an MSI past the accelerator",
                    cqe.cqid
                );
                x.completion_irq_at(cqe.at)
            }
            None => {
                assert_eq!(
                    cqe.interrupt,
                    self.blk.hctx(h).kind() == QueueKind::Interrupt,
                    "CQ {} interrupt state disagrees with its queue kind",
                    cqe.cqid
                );
                cqe.at
            }
        };
        self.events.schedule(
            at,
            Ev::Cqe {
                cqid: cqe.cqid,
                cid: cqe.cid,
            },
        );
    }

    /// Commands issued so far.
    pub fn commands_sent(&self) -> u64 {
        self.nvme.sent()
    }

    // ------------------------------------------------ read-only views for time series

    /// Starts logging every application I/O's completion (class, bytes, latency) for
    /// [`Host::drain_io_log`]. Off by default: then the only cost is a branch per I/O.
    pub fn enable_io_log(&mut self) {
        self.io_log = Some(Vec::with_capacity(64));
    }

    /// Starts logging every online request's response time for
    /// [`Host::drain_response_log`]. Off by default.
    pub fn enable_response_log(&mut self) {
        self.response_log = Some(Vec::with_capacity(16));
    }

    /// Hands the response time of each online request answered since the last call to `f`:
    /// the requests each online process counts in its `requests`.
    pub fn drain_response_log(&mut self, mut f: impl FnMut(u64)) {
        if let Some(log) = &mut self.response_log {
            for latency in log.drain(..) {
                f(latency);
            }
        }
    }

    /// Context switches so far by the class of the thread switched in, and interrupts so far,
    /// summed over cores (`cpu::Cpu::switches_and_interrupts`).
    pub fn switches_and_interrupts(&self) -> ([u64; 2], u64) {
        self.cpu.switches_and_interrupts()
    }

    /// Hands each application I/O completed since the last call to `f(class, bytes,
    /// latency_ns)`: the I/Os each process counts in its `ios`.
    pub fn drain_io_log(&mut self, mut f: impl FnMut(IoClass, u64, u64)) {
        if let Some(log) = &mut self.io_log {
            for (class, bytes, latency) in log.drain(..) {
                f(class, bytes, latency);
            }
        }
    }

    #[inline]
    fn log_io(&mut self, class: IoClass, bytes: u64, latency_ns: u64) {
        if let Some(log) = &mut self.io_log {
            log.push((class, bytes, latency_ns));
        }
    }

    /// Page-cache counters so far (its gauges are current only in [`Host::pagecache_gauges`]).
    pub fn pagecache_counters(&self) -> &PageCacheStats {
        self.pc.stats()
    }

    /// The dirty-ratio set in force (`pagecache.adaptive_dirty`; `None` when off).
    pub fn dirty_set(&self) -> Option<crate::pagecache::DirtySet> {
        self.pc.dirty_set()
    }

    /// Dirty pages and pages under write-back now.
    pub fn pagecache_gauges(&self) -> (u64, u64) {
        (self.pc.dirty_pages(), self.pc.writeback_pages())
    }

    /// Busy CPU time per category summed over cores, up to `at` (not before the host's last
    /// event, nor after its next one). Brings the cores' accounting up to `at`, which splits a
    /// running burst's accounting without changing when it ends.
    pub fn cpu_busy_ns(&mut self, at: SimTime) -> [u64; crate::cpu::CAT_COUNT] {
        assert!(
            at >= self.now,
            "CPU sampled at {at}, before the host's clock {}",
            self.now
        );
        self.cpu.sample(at)
    }

    /// The host's clock: the time of its last event.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Cores of the host.
    pub fn cores(&self) -> u32 {
        self.cpu.cores() as u32
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
                let core = self.cpu.core_of(thread);
                self.cpu.count_interrupt(core);
                self.cpu.raise_irq(
                    now,
                    core,
                    IrqWork {
                        ns: self
                            .costs
                            .draw(CostSite::TimerIrq, self.cfg.cpu.timer_irq_ns),
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
            Ev::FlushTick => self.on_flush_tick(),
            Ev::Tick => self.on_tick(),
            Ev::Start { proc } => self.start_process(proc),
            Ev::Stop => self.stopping = true,
            Ev::AccelFetch { sq } => self.accel_fetch(sq),
        }
    }

    // ---------------------------------------------------------------- thread primitives

    /// Thread `t` (running, its burst just ended) works `ns` in `cat`, then runs `then`.
    fn burst(&mut self, t: u32, ns: u64, cat: Cat, then: Step) {
        self.threads[t as usize].step = then;
        self.cpu.set_burst(self.now, t, ns, cat);
    }

    /// Thread `t` spins in a poll loop until a completion re-arms it ([`Cpu::spin`]); then it
    /// runs `then`.
    fn spin_until_poked(&mut self, t: u32, then: Step) {
        self.threads[t as usize].step = then;
        self.cpu.spin(self.now, t);
    }

    /// Thread `t` (running) blocks for `wait`; when woken it runs `then`.
    fn sleep(&mut self, t: u32, wait: Wait, then: Step) {
        let th = &mut self.threads[t as usize];
        assert_eq!(th.wait, Wait::None, "thread {t} sleeps while asleep");
        th.wait = wait;
        th.step = then;
        self.cpu.block(self.now, t, wait.span(then));
    }

    /// Wakes thread `t` from whatever it sleeps on.
    fn wake(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        assert_ne!(th.wait, Wait::None, "thread {t} woken while not sleeping");
        th.wait = Wait::None;
        if self.waker == Waker::PollingCore {
            return self.wake_handed_off(t);
        }
        self.cpu.wake(self.now, t, 0, Cat::Sched);
    }

    fn exit(&mut self, t: u32) {
        self.cpu.exit(self.now, t);
    }

    fn core_of(&self, t: u32) -> u16 {
        self.cpu.core_of(t)
    }

    /// Thread `t`'s burst ended: run its continuation, in the layer it belongs to.
    fn run_step(&mut self, t: u32) {
        let step = self.threads[t as usize].step;
        match step {
            Step::App => self.app_next(t),
            Step::IoEnter => self.io_enter(t),
            Step::PcRead => self.pc_read(t),
            Step::PcCopy => self.io_finished(t),
            Step::PcWrite => self.pc_write(t),
            Step::BioSubmit => self.bio_submitted(t),
            Step::SubmitRetry => self.submission_retry(t),
            Step::Dispatch => self.dispatch_done(t),
            Step::Driver => self.driver_done(t),
            Step::IoWaitDone => self.io_wait_done(t),
            Step::ThrottleDone => self.write_done(t),
            Step::Poll => self.poll_check(t),
            Step::Reap => self.reap_done(t),
            Step::HybridWake => self.start_poll(t),
            Step::FlushPages => self.flush_pages_done(t),
            Step::FsyncStart => self.fsync_next(t),
            Step::FsyncPages => self.fsync_pages_done(t),
            Step::FsyncDone => self.fsync_done(t),
            Step::Reply => self.worker_replied(t),
            Step::ServerHandoff => self.server_handoff(t),
            Step::FioReap => self.fio_reaped(t),
        }
    }

    // ---------------------------------------------------------------- end of run

    /// Checks the run drained and summarises it.
    pub fn finish(mut self) -> Result<HostReport, HostError> {
        let end = self.now.max(self.duration);
        if let Some(e) = self.errors.first() {
            return Err(HostError::Leak(e.clone()));
        }
        if let Some(e) = self.trace_error() {
            return Err(e);
        }
        let (bios, reqs) = self.blk.in_flight();
        if bios != 0 || reqs != 0 || !self.nvme.all_completed() {
            return Err(HostError::Leak(format!(
                "{bios} bios and {reqs} requests still live; {} commands sent, {} completions received",
                self.nvme.sent(),
                self.nvme.completed()
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
        let breakdown = [0, 1].map(|c| self.layer_times.means(c));
        // Thread CPU time, by process and by fio job: [user, kernel] ns; and where the
        // threads' lives went (closed and checked per thread by `Cpu::finish`).
        let mut proc_cpu = vec![[0u64; 2]; self.procs.len()];
        let mut proc_time = vec![ExecTime::default(); self.procs.len()];
        for (t, th) in self.threads.iter().enumerate() {
            let sched = self.cpu.sched(t as u32);
            let user_kernel = [sched.user_ns, sched.sum_exec_ns - sched.user_ns];
            let Some(pc) = proc_cpu.get_mut(th.proc as usize) else {
                continue; // the flusher belongs to no process
            };
            pc[0] += user_kernel[0];
            pc[1] += user_kernel[1];
            proc_time[th.proc as usize].add_thread(&sched.time, end);
            if let crate::task::Role::Fio(f) = &th.role {
                let j = &mut self.procs[th.proc as usize].fio_jobs()[f.job as usize];
                j.cpu_user_ns += user_kernel[0];
                j.cpu_kernel_ns += user_kernel[1];
            }
        }
        let processes = self
            .procs
            .iter()
            .zip(&proc_cpu)
            .zip(proc_time)
            .map(|((p, cpu), exec_time)| p.report(cpu[0], cpu[1], exec_time))
            .collect();
        Ok(HostReport {
            end,
            processes,
            cores,
            breakdown,
            request_latency: self.layer_times.request_latency(),
            pagecache: self.pc.finish_stats(),
            blk: self.blk.stats().clone(),
            nvme: self.nvme.stats().clone(),
            events: self.events.scheduled_total(),
            commands: self.nvme.sent(),
        })
    }

    /// Page-cache counters right now (tests).
    pub fn pagecache_stats(&mut self) -> PageCacheStats {
        self.pc.finish_stats()
    }
}
