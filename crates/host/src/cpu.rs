//! CPU cores, the scheduler and interrupts: who runs where, and where every nanosecond goes.
//!
//! ## What it models
//! N cores, each with its own run queue (balanced only when `cpu.load_balance` says so,
//! below). A thread is blocked, runnable (in one core's run queue) or running (owning a
//! core). While it runs it works through a *burst*: a stretch of CPU work of known length and
//! category (user code, syscall, page cache, block layer, driver, block-layer completion,
//! polling). When the burst ends, the machine (`machine.rs`) decides what the thread does
//! next: another burst, block, or exit. A polling thread's burst has no end until the machine
//! pokes it (a completion landed).
//! The scheduler owns no event queue: [`Cpu::reschedule`] hands each re-planned core's next
//! decision point out as a [`CoreTimer`], which the machine wraps in its own event and brings
//! back through [`Cpu::on_event`] (stale if the core was re-planned since).
//!
//! Scheduling is CFS reduced to its core rules. Every thread has a virtual runtime (its CPU
//! time; all threads have the same weight). A core runs the thread of least virtual runtime;
//! the running thread keeps the core for a slice of `max(sched_latency / nr_running,
//! min_granularity)` before the next in line takes over. A waking thread is placed at
//! `max(its vruntime, min_vruntime − sleeper_credit)` and preempts the running thread at once if
//! it is more than `wakeup_granularity` behind it — which is why an I/O-bound thread usually
//! cuts in front of a CPU hog, and why it sometimes does not. Wake placement (`IdleCore`) sends
//! a waking thread to an idle core if its previous one is busy.
//!
//! **Weights.** Every application thread has the nice-0 load weight (1 024); each core's
//! kblockd worker (`kblockd`) runs at nice −20, weight 88 761 (`sched_prio_to_weight`,
//! kernel/sched/core.c), and is bound to its core. As in CFS, virtual runtime advances by
//! `ran × 1024 / weight` (`calc_delta_fair`), the wake-up granularity is converted into the
//! woken thread's virtual time the same way (`wakeup_gran`: a heavy thread preempts at once),
//! and a slice is the thread's weight share of `sched_latency` (`sched_slice`). With equal
//! weights these are the rules above, to the nanosecond.
//!
//! **Remote wake-up.** A thread woken onto a core other than the one it last ran on (wake
//! placement found its core busy and another idle) costs that core a reschedule IPI first:
//! `cpu.ipi_ns` of interrupt work (category `irq`) before it can switch to the thread — Linux's
//! `try_to_wake_up` → `ttwu_queue_wakelist` / `smp_send_reschedule` (kernel/sched/core.c), the
//! target running `scheduler_ipi` in interrupt context. The waker of an I/O completion is the
//! queue's core, which is the core the thread submitted from, so "another core than its last"
//! is "another core than the waker's" on that path. 1.5 µs on arm8 (0.75 µs on x86-4): the
//! interrupt entry and exit we charge a timer interrupt (`timer_irq_ns`), since the handler
//! itself (`scheduler_ipi`) does next to nothing; published round trips for an IPI are 1-3 µs
//! (delivery included, which we leave out). A thread woken on its own core pays nothing, so a
//! QD1 job alone never does (the QD1 pins in `config.rs` did not move).
//!
//! **Load balancing** (`cpu.load_balance`). `"off"` (the presets' default): a thread changes
//! core only when it wakes (wake placement above), so under a co-run that keeps every core
//! busy no core is ever idle at a wake-up, and each thread stays where it was first placed.
//! `"new-idle"`: a core about to idle — its thread blocked or exited and nothing waits on it —
//! takes one waiting thread from the core with the most waiting (pinned kworkers never move):
//! the one of least virtual runtime, renormalised to this core's `min_vruntime`. This is
//! Linux's `newidle_balance` → `load_balance(CPU_NEWLY_IDLE)` → `detach_tasks`
//! (kernel/sched/fair.c) without its cache-hot test (`task_hot`, 0.5 ms of
//! `sched_migration_cost`), its `avg_idle` cut-off and its cost; the moved thread pays
//! `cache_pollution_ns` when it next runs, as any displaced thread does. Counted per core
//! (`migrations_in`). Why it is a switch and off: it changes which of apache's requests wait
//! out a CPU hog's slice beside a busy co-runner, and we have not measured which is closer to
//! Linux (CHANGELOG.md, "flashshare replicates": the apache + ungzip pair).
//!
//! Switching threads costs `context_switch_ns` (category `sched`), also when a core leaves its
//! idle loop. A thread that another thread displaced from its core since it last ran also pays
//! `cache_pollution_ns` (category `sched`) at the start of its next run.
//!
//! **Whose code ran on a core.** Each thread has an address space (`mm`: its process, none for
//! kernel threads), and each core remembers the last two address spaces whose user code it
//! ran, with when each last did. `foreign_user_since(core, mm, t, now)` says whether another
//! address space's user code ran after `t` on that core, or — once `cpu.llc_sweep_ns` has
//! passed since `t` — on any core sharing its last-level cache (`cpu.llc_shared_cores`; a
//! foreign thread in user code there at `now` counts): the block layer's cold submission
//! (`blk_submit`) asks it. Why the cache domain and the sweep time: `config`'s essay, *The
//! block layer under co-run*.
//!
//! Interrupts steal time: an interrupt item (ISR, block-layer completion of one request, a
//! timer, the scheduler tick) pauses whatever the core was doing — thread, switch or idle —
//! runs to completion, and the paused work resumes afterwards, later by exactly that much. NVMe
//! completions that arrive while the core is still in the NVMe interrupt handler join it
//! without a second ISR (the handler keeps walking the CQ).
//!
//! Worked example (arm8 defaults): a thread blocked on a read whose CQE lands at t = 100 µs on
//! an idle core: ISR 2.5 µs (irq) → block-layer completion 1.5 µs (wakes the thread) → context
//! switch 2.5 µs (sched) → the thread runs at 106.5 µs. Had a CPU hog run on that core since
//! the thread blocked, the thread would also pay 1.0 µs of cache pollution, and it would wait
//! in the run queue if the hog was within `wakeup_granularity` of it.
//!
//! ## Accounting
//! Every nanosecond of every core goes to exactly one category: user, syscall, pagecache, blk,
//! nvme, blk_complete (kernel, by layer), irq, sched, poll or idle; so per core the categories
//! add up to the simulated time (tests check it). Context switches and interrupts are counted.
//! Per thread, the same accounting and every transition (wake, pick, preempt, block, exit)
//! split its life into spans (`exectime`): on its core by category, on its core while an
//! interrupt runs (`irq_stolen`), in a run queue, blocked (on I/O or idle, as the machine says
//! when it blocks it); `finish` checks they add up to each thread's life.
//!
//! A spinning poller is a thread like any other: a CPU-bound thread on its core takes the core
//! when the poller's slice ends (a polled fio job sharing a core with `pagerank` sees I/Os wait
//! milliseconds), and interrupts landing on its core pause its spin. The switch and pollution
//! costs are drawn per switch when `jitter.cost_cv_pct` > 0; the tick is `jitter`'s.
//!
//! ## What it leaves out
//! Periodic load balancing of busy cores (`rebalance_domains`), scheduling domains, nice
//! values other than 0 (applications) and −20 (kblockd), SMT, frequency scaling, the IPI's
//! delivery latency (its handler is modelled, below), softirq deferral (the completion runs in
//! the hard interrupt).
//!
//! Config keys: `cpu.*` (see `config.rs`).

use std::collections::VecDeque;

use engine::{IoClass, SimTime};
use serde::Serialize;

use crate::config::{CpuConfig, LoadBalance, WakePlacement};
use crate::exectime::{Span, SpanNs, ThreadTime};
use crate::jitter::{CostDraws, CostSite};

/// What a core's time went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cat {
    /// Application code.
    User,
    /// System call entry/exit, VFS, sockets.
    Syscall,
    /// Page-cache lookups, copies, dirtying, write-back page work.
    PageCache,
    /// Block layer submission: bio, merge search, plug, dispatch.
    Blk,
    /// NVMe driver submission: command build, doorbell.
    Nvme,
    /// Block-layer completion of requests (in interrupt or poll context).
    BlkComplete,
    /// Interrupt entry and handlers (NVMe ISR, timers).
    Irq,
    /// Context switches and cache pollution.
    Sched,
    /// Spinning on a completion queue.
    Poll,
    /// Nothing to run.
    Idle,
}

pub const CAT_COUNT: usize = 10;
pub const CATS: [Cat; CAT_COUNT] = [
    Cat::User,
    Cat::Syscall,
    Cat::PageCache,
    Cat::Blk,
    Cat::Nvme,
    Cat::BlkComplete,
    Cat::Irq,
    Cat::Sched,
    Cat::Poll,
    Cat::Idle,
];

impl Cat {
    pub const fn index(self) -> usize {
        self as usize
    }
    pub const fn name(self) -> &'static str {
        match self {
            Cat::User => "user",
            Cat::Syscall => "syscall",
            Cat::PageCache => "pagecache",
            Cat::Blk => "blk",
            Cat::Nvme => "nvme",
            Cat::BlkComplete => "blk_complete",
            Cat::Irq => "irq",
            Cat::Sched => "sched",
            Cat::Poll => "poll",
            Cat::Idle => "idle",
        }
    }

    /// The span of a thread's life a burst of this category is (`exectime`): the same name.
    /// (No thread bursts in `Idle`; it maps to the idle span.)
    pub const fn span(self) -> Span {
        match self {
            Cat::User => Span::User,
            Cat::Syscall => Span::Syscall,
            Cat::PageCache => Span::PageCache,
            Cat::Blk => Span::Blk,
            Cat::Nvme => Span::Nvme,
            Cat::BlkComplete => Span::BlkComplete,
            Cat::Irq => Span::Irq,
            Cat::Sched => Span::Sched,
            Cat::Poll => Span::Poll,
            Cat::Idle => Span::Idle,
        }
    }
}

// Assertions here run on every event. The release build keeps "time never goes backwards"
// (out of line: a compare and a branch on the hot path); the per-burst, per-block and per-wake
// state checks are debug-only: together they cost 1.2 % more instructions on a write-back-heavy
// run (`valgrind --tool=cachegrind`, a 2 s imageserver + ungzip system run), and the machine's
// own sleep/wake assertions (`Host::sleep`, `Host::wake`) catch the same pairing errors one
// layer up.

#[cold]
#[inline(never)]
fn time_went_backwards(core: usize, now: SimTime, since: SimTime) -> ! {
    panic!("core {core} settled at {now}, before its accounting time {since}: time went backwards")
}

/// A core's next decision point: at `at`, core `core` needs [`Cpu::on_event`] with `gen`
/// (a later plan of the same core bumps `gen`, making this one stale).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreTimer {
    pub at: SimTime,
    pub core: u16,
    pub gen: u32,
}

/// A burst with no end of its own (polling): it ends when the machine re-arms it.
pub const UNTIL_POKED: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    Blocked,
    Runnable,
    Running,
    Exited,
}

/// The scheduler's view of one thread.
#[derive(Clone, Debug)]
pub struct ThreadSched {
    pub state: RunState,
    /// Core it runs on, waits on, or last ran on.
    pub core: u16,
    pub vruntime: u64,
    /// CPU time consumed (switch costs excluded), ns.
    pub sum_exec_ns: u64,
    /// Remaining work of the current burst, ns (`UNTIL_POKED` for polling).
    pub remaining_ns: u64,
    pub cat: Cat,
    /// Cache-pollution time still to pay at the start of the run.
    pub pollution_ns: u64,
    /// When it was last woken, and when it last got a core after that (for breakdowns).
    pub woken_at: SimTime,
    pub running_since: SimTime,
    /// Time spent in `user` bursts, ns (offline jobs' instructions).
    pub user_ns: u64,
    /// The class its CPU time is attributed to.
    pub class: IoClass,
    /// CFS load weight (`NICE_0_WEIGHT` for every application thread; kblockd's kworkers run
    /// at nice −20): virtual runtime advances by `ran × NICE_0_WEIGHT / weight`.
    pub weight: u64,
    /// Bound to its core (a per-CPU kworker): wake placement never moves it.
    pub pinned: bool,
    /// Its address space: the process whose user code it runs (`NO_USER_CODE` for kernel
    /// threads). Decides whose user code counts as foreign on a core (`foreign_user_since`).
    pub mm: u32,
    /// Where its wall-clock time went (`exectime`): charged on every transition.
    pub time: ThreadTime,
}

/// `ThreadSched::mm` of a kernel thread: it runs no user code.
pub const NO_USER_CODE: u32 = u32::MAX;

/// CFS load weight of a nice-0 thread (`sched_prio_to_weight[20]`, kernel/sched/core.c).
pub const NICE_0_WEIGHT: u64 = 1024;

/// CFS load weight at nice −20 (`sched_prio_to_weight[0]`, kernel/sched/core.c): the nice of
/// the kworkers of a `WQ_HIGHPRI` workqueue such as kblockd (`HIGHPRI_NICE_LEVEL = MIN_NICE`,
/// kernel/workqueue.c).
pub const NICE_MINUS_20_WEIGHT: u64 = 88_761;

/// Virtual runtime a thread of `weight` accrues in `ns` of CPU (`calc_delta_fair`).
fn vruntime_delta(ns: u64, weight: u64) -> u64 {
    if weight == NICE_0_WEIGHT {
        ns
    } else {
        (u128::from(ns) * u128::from(NICE_0_WEIGHT) / u128::from(weight)) as u64
    }
}

/// What an interrupt item does when it finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqAction {
    /// Nothing (the ISR's entry work).
    None,
    /// Block-layer completion of a request is done.
    Complete { req: u32 },
    /// A timer expired for a sleeping thread.
    Wake { thread: u32 },
    /// DedCore: the polling core completed a request; hand it to its waiter's core.
    HandOff { req: u32 },
}

/// One piece of interrupt-context work.
#[derive(Clone, Copy, Debug)]
pub struct IrqWork {
    pub ns: u64,
    pub cat: Cat,
    pub action: IrqAction,
    /// Part of the NVMe vector (later CQEs join the running handler).
    pub nvme: bool,
    /// The class the work is done for (a request's completion or dispatch), if any.
    pub class: Option<IoClass>,
}

/// A core finished a piece of work the machine must react to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreOutcome {
    /// Nothing for the machine (stale event, switch finished, slice expiry handled).
    Nothing,
    /// The running thread's burst ended: the machine decides what it does next.
    BurstDone { thread: u32 },
    /// An interrupt item finished.
    Irq { action: IrqAction, started: SimTime },
}

#[derive(Clone, Debug)]
struct Core {
    /// Thread owning the core (switching in, running, or paused under an interrupt).
    running: Option<u32>,
    /// Context switch still to do before `running` runs.
    switch_left_ns: u64,
    irq: VecDeque<IrqWork>,
    /// The interrupt item in progress: its end and start.
    irq_item: Option<(IrqWork, SimTime, SimTime)>,
    rq: Vec<u32>,
    min_vruntime: u64,
    last_thread: Option<u32>,
    /// `sum_exec_ns` of the running thread when its slice started.
    slice_start_exec: u64,
    preempt_pending: bool,
    gen: u32,
    acct_ns: [u64; CAT_COUNT],
    /// The part of `acct_ns` done for each class (threads of the class, its requests'
    /// interrupt work), indexed by `IoClass::index`.
    class_ns: [[u64; CAT_COUNT]; 2],
    acct_since: SimTime,
    context_switches: u64,
    /// Of those, by the class of the thread switched in (`IoClass::index`).
    class_switches: [u64; 2],
    interrupts: u64,
    /// Threads this core pulled from another by new-idle balance.
    migrations_in: u64,
    /// The last two address spaces that ran user code here, most recent first, each with
    /// the end of its latest user time on this core (`foreign_user_since`); the second is
    /// never the first's.
    user_code: [(u32, SimTime); 2],
}

/// Per-core statistics for reports.
#[derive(Clone, Debug, Serialize)]
pub struct CoreStats {
    pub core: u32,
    /// Nanoseconds per category, in `CATS` order.
    pub ns: [u64; CAT_COUNT],
    /// Of those, the nanoseconds done for each class ([latency-critical, throughput]); ISR
    /// entry, timers and idle belong to no class.
    pub class_ns: [[u64; CAT_COUNT]; 2],
    pub context_switches: u64,
    pub interrupts: u64,
    /// Threads this core took from another core's run queue (`cpu.load_balance`); left out
    /// of reports while 0 (always, with balancing off).
    #[serde(skip_serializing_if = "engine::stats::is_zero")]
    pub migrations_in: u64,
}

pub struct Cpu {
    cfg: CpuConfig,
    cores: Vec<Core>,
    threads: Vec<ThreadSched>,
    /// Cores whose plan changed since the last `reschedule`.
    dirty: Vec<u16>,
    dirty_mark: Vec<bool>,
    /// Draws of the switch and pollution costs (constant unless `jitter.cost_cv_pct` > 0).
    costs: CostDraws,
}

impl Cpu {
    pub fn new(cfg: &CpuConfig) -> Cpu {
        let n = cfg.cores as usize;
        Cpu {
            cfg: cfg.clone(),
            cores: (0..n)
                .map(|_| Core {
                    running: None,
                    switch_left_ns: 0,
                    irq: VecDeque::with_capacity(64),
                    irq_item: None,
                    rq: Vec::with_capacity(32),
                    min_vruntime: 0,
                    last_thread: None,
                    slice_start_exec: 0,
                    preempt_pending: false,
                    gen: 0,
                    acct_ns: [0; CAT_COUNT],
                    class_ns: [[0; CAT_COUNT]; 2],
                    acct_since: SimTime::ZERO,
                    context_switches: 0,
                    class_switches: [0; 2],
                    interrupts: 0,
                    migrations_in: 0,
                    user_code: [(NO_USER_CODE, SimTime::ZERO); 2],
                })
                .collect(),
            threads: Vec::new(),
            dirty: Vec::with_capacity(n),
            dirty_mark: vec![false; n],
            costs: CostDraws::constant(),
        }
    }

    /// Draws the context-switch and cache-pollution costs from `costs` from now on.
    pub fn set_cost_draws(&mut self, costs: CostDraws) {
        self.costs = costs;
    }

    pub fn cores(&self) -> usize {
        self.cores.len()
    }

    /// Adds a thread of `class`, blocked, homed on `core`.
    pub fn add_thread(&mut self, core: u16, class: IoClass) -> u32 {
        assert!((core as usize) < self.cores.len());
        self.threads.push(ThreadSched {
            state: RunState::Blocked,
            core,
            vruntime: 0,
            sum_exec_ns: 0,
            remaining_ns: 0,
            cat: Cat::User,
            pollution_ns: 0,
            woken_at: SimTime::ZERO,
            running_since: SimTime::ZERO,
            user_ns: 0,
            class,
            weight: NICE_0_WEIGHT,
            pinned: false,
            mm: NO_USER_CODE,
            time: ThreadTime::new(SimTime::ZERO),
        });
        (self.threads.len() - 1) as u32
    }

    /// Thread `t`'s life begins at `at` rather than 0 (its process starts later): it is blocked
    /// with nothing to do until then, which is no part of its life.
    pub fn begin_life(&mut self, t: u32, at: SimTime) {
        let th = &mut self.threads[t as usize];
        assert_eq!(
            th.state,
            RunState::Blocked,
            "thread {t} begins its life blocked"
        );
        th.time = ThreadTime::new(at);
    }

    /// Thread `t`'s spans up to `now` (its core's accounting brought up to `now` first, which
    /// changes no outcome).
    pub fn thread_time_now(&mut self, now: SimTime, t: u32) -> SpanNs {
        let th = &self.threads[t as usize];
        if th.state == RunState::Running {
            self.settle(th.core as usize, now);
        }
        self.threads[t as usize].time.snapshot(now)
    }

    /// Thread `t` becomes a per-CPU kernel worker of CFS load `weight`, bound to its core.
    pub fn make_pinned_worker(&mut self, t: u32, weight: u64) {
        assert!(weight > 0, "thread {t}: a CFS weight must be positive");
        let th = &mut self.threads[t as usize];
        th.weight = weight;
        th.pinned = true;
    }

    /// Thread `t` runs the user code of address space `mm` (its process).
    pub fn set_address_space(&mut self, t: u32, mm: u32) {
        self.threads[t as usize].mm = mm;
    }

    /// The scheduler's view of thread `t`, to read: only the scheduler's own operations
    /// change it.
    pub fn sched(&self, t: u32) -> &ThreadSched {
        &self.threads[t as usize]
    }

    /// The core thread `t` runs on, waits on, or last ran on.
    pub fn core_of(&self, t: u32) -> u16 {
        self.threads[t as usize].core
    }

    /// Whether thread `t` spins in a poll loop: its burst has no end of its own
    /// (`UNTIL_POKED`) and it is on a core or waiting for one. A completion for it re-arms
    /// the burst with [`Cpu::set_burst`].
    pub fn is_polling(&self, t: u32) -> bool {
        let th = &self.threads[t as usize];
        th.remaining_ns == UNTIL_POKED && matches!(th.state, RunState::Running | RunState::Runnable)
    }

    /// Thread `t`'s CPU time is attributed to `class` from now on (a kblockd worker takes
    /// the class of the request it dispatches).
    pub fn set_class(&mut self, t: u32, class: IoClass) {
        self.threads[t as usize].class = class;
    }

    /// How long thread `t` waited for its core after its last wake-up, ns.
    pub fn core_wait_ns(&self, t: u32) -> u64 {
        let th = &self.threads[t as usize];
        th.running_since.saturating_since(th.woken_at)
    }

    /// Whether another process's user code ran on thread `t`'s core after `since`: the
    /// kernel's code and data `t` touched then are cold ([`Cpu::foreign_user_since`]).
    pub fn foreign_user_since_for(&self, t: u32, since: SimTime, now: SimTime) -> bool {
        let th = &self.threads[t as usize];
        self.foreign_user_since(th.core, th.mm, since, now)
    }

    /// Whether user code of an address space other than `mm` ran after `since`, up to `now`,
    /// on `core` or a core sharing its cache (module essay, *Whose code ran on a core*). A
    /// kernel thread (`NO_USER_CODE`) counts every process's.
    pub fn foreign_user_since(&self, core: u16, mm: u32, since: SimTime, now: SimTime) -> bool {
        if self.foreign_user_on(core as usize, mm, since, now) {
            return true;
        }
        if now.saturating_since(since) < self.cfg.llc_sweep_ns {
            return false;
        }
        let per_llc = self.cfg.llc_shared_cores.max(1) as usize;
        let first = core as usize / per_llc * per_llc;
        let last = (first + per_llc).min(self.cores.len());
        (first..last).any(|c| self.foreign_user_on(c, mm, since, now))
    }

    /// [`Cpu::foreign_user_since`] on one core: its record (time settled up to the core's
    /// last decision point), or a foreign thread in user code there now (running since its
    /// switch-in, which a busy core's record may not have reached yet).
    fn foreign_user_on(&self, c: usize, mm: u32, since: SimTime, now: SimTime) -> bool {
        let core = &self.cores[c];
        let [latest, other] = core.user_code;
        let foreign = if latest.0 != mm { latest } else { other };
        if foreign.0 != NO_USER_CODE && foreign.1 > since {
            return true;
        }
        now > since
            && core.running.is_some_and(|t| {
                let th = &self.threads[t as usize];
                th.mm != mm && th.mm != NO_USER_CODE && th.cat == Cat::User
            })
    }

    fn mark(&mut self, core: u16) {
        if !self.dirty_mark[core as usize] {
            self.dirty_mark[core as usize] = true;
            self.dirty.push(core);
        }
    }

    /// Brings a core's accounting and its running thread's progress up to `now`.
    fn settle(&mut self, c: usize, now: SimTime) {
        let core = &mut self.cores[c];
        if now < core.acct_since {
            time_went_backwards(c, now, core.acct_since);
        }
        let dt = now - core.acct_since;
        core.acct_since = now;
        if dt == 0 {
            return;
        }
        if let Some((item, _, _)) = &core.irq_item {
            core.acct_ns[item.cat.index()] += dt;
            if let Some(c) = item.class {
                core.class_ns[c.index()][item.cat.index()] += dt;
            }
            // The interrupt paused the core's thread: the time is stolen from it.
            if let Some(t) = core.running {
                let th = &mut self.threads[t as usize];
                debug_assert_eq!(th.state, RunState::Running, "core {c} runs thread {t}");
                th.time.add(Span::IrqStolen, dt);
            }
            return;
        }
        let Some(t) = core.running else {
            core.acct_ns[Cat::Idle.index()] += dt;
            return;
        };
        let th = &mut self.threads[t as usize];
        debug_assert_eq!(th.state, RunState::Running, "core {c} runs thread {t}");
        let class = th.class.index();
        let mut rest = dt;
        let s = rest.min(core.switch_left_ns);
        core.switch_left_ns -= s;
        core.acct_ns[Cat::Sched.index()] += s;
        core.class_ns[class][Cat::Sched.index()] += s;
        rest -= s;
        // Pollution below is `sched` too: one add for both.
        let p = rest.min(th.pollution_ns);
        th.time.add(Span::Sched, s + p);
        if rest == 0 {
            return;
        }
        th.sum_exec_ns += rest;
        th.vruntime += vruntime_delta(rest, th.weight);
        th.pollution_ns -= p;
        core.acct_ns[Cat::Sched.index()] += p;
        core.class_ns[class][Cat::Sched.index()] += p;
        let r = rest - p;
        if r > 0 {
            if th.remaining_ns != UNTIL_POKED {
                debug_assert!(
                    r <= th.remaining_ns,
                    "thread {t} ran {r} ns past its burst end ({} left)",
                    th.remaining_ns
                );
                th.remaining_ns -= r.min(th.remaining_ns);
            }
            core.acct_ns[th.cat.index()] += r;
            core.class_ns[class][th.cat.index()] += r;
            th.time.add(th.cat.span(), r);
            if th.cat == Cat::User {
                th.user_ns += r;
                let mm = th.mm;
                let uc = &mut core.user_code;
                if uc[0].0 != mm {
                    uc[1] = uc[0];
                }
                uc[0] = (mm, now);
            }
        }
    }

    /// Sets the running (or runnable) thread's next burst. Call from the machine while the
    /// thread's previous burst has just ended, or to re-arm a polling thread.
    pub fn set_burst(&mut self, now: SimTime, t: u32, ns: u64, cat: Cat) {
        let th = &self.threads[t as usize];
        let core = th.core;
        if th.state == RunState::Running {
            self.settle(core as usize, now);
        }
        let th = &mut self.threads[t as usize];
        debug_assert!(
            matches!(th.state, RunState::Running | RunState::Runnable),
            "burst for thread {t} in state {:?}: expected Running or Runnable",
            th.state
        );
        th.remaining_ns = ns;
        th.cat = cat;
        self.mark(core);
    }

    /// Whether `t` is on a core now and past its context switch (a poller that would see a CQE).
    pub fn is_on_core(&self, t: u32) -> bool {
        let th = &self.threads[t as usize];
        th.state == RunState::Running && {
            let core = &self.cores[th.core as usize];
            core.running == Some(t) && core.switch_left_ns == 0
        }
    }

    /// The running thread blocks (its time from now goes to `span`: `IoWait` or `Idle`); its
    /// core picks the next thread.
    pub fn block(&mut self, now: SimTime, t: u32, span: Span) {
        let core = self.threads[t as usize].core;
        self.settle(core as usize, now);
        let th = &mut self.threads[t as usize];
        debug_assert_eq!(
            th.state,
            RunState::Running,
            "thread {t} blocks: only a running thread blocks"
        );
        th.state = RunState::Blocked;
        th.time.switch(now, Some(span));
        self.mark(core);
    }

    /// The running thread exits.
    pub fn exit(&mut self, now: SimTime, t: u32) {
        let core = self.threads[t as usize].core;
        self.settle(core as usize, now);
        let th = &mut self.threads[t as usize];
        th.state = RunState::Exited;
        th.time.die(now);
        self.mark(core);
    }

    /// Whether core `c` is in its idle loop (no thread, no interrupt work): a tickless core.
    pub fn is_idle(&self, c: u16) -> bool {
        let core = &self.cores[c as usize];
        core.running.is_none() && core.irq_item.is_none() && core.irq.is_empty()
    }

    fn core_is_idle(&self, c: usize) -> bool {
        let core = &self.cores[c];
        core.running.is_none() && core.rq.is_empty() && core.irq_item.is_none()
    }

    /// Wakes a blocked thread with a first burst of `ns` in `cat`.
    pub fn wake(&mut self, now: SimTime, t: u32, ns: u64, cat: Cat) {
        let th = &self.threads[t as usize];
        debug_assert_eq!(
            th.state,
            RunState::Blocked,
            "thread {t} woken while not blocked"
        );
        let prev = th.core as usize;
        let target = match self.cfg.wake_placement {
            _ if th.pinned => prev,
            WakePlacement::PreviousCore => prev,
            WakePlacement::IdleCore => {
                if self.core_is_idle(prev) {
                    prev
                } else {
                    let n = self.cores.len();
                    (1..n)
                        .map(|i| (prev + i) % n)
                        .find(|&c| self.core_is_idle(c))
                        .unwrap_or(prev)
                }
            }
        };
        self.settle(target, now);
        if target != prev && self.cfg.ipi_ns > 0 {
            // `try_to_wake_up` on another CPU: the target takes a reschedule IPI first.
            let ns = self.costs.draw(CostSite::Ipi, self.cfg.ipi_ns);
            self.cores[target].interrupts += 1;
            self.cores[target].irq.push_back(IrqWork {
                ns,
                cat: Cat::Irq,
                action: IrqAction::None,
                nvme: false,
                class: None,
            });
        }
        let old_min = self.cores[prev].min_vruntime;
        let new_min = self.cores[target].min_vruntime;
        let credit = self.cfg.sleeper_credit_ns;
        let th = &mut self.threads[t as usize];
        if target != prev {
            th.vruntime = (th.vruntime + new_min).saturating_sub(old_min);
        }
        th.vruntime = th.vruntime.max(new_min.saturating_sub(credit));
        th.state = RunState::Runnable;
        th.core = target as u16;
        th.remaining_ns = ns;
        th.cat = cat;
        th.woken_at = now;
        th.time.switch(now, Some(Span::RunQueue));
        let v = th.vruntime;
        // `wakeup_gran`: the granularity in the woken thread's virtual time (a heavy thread
        // preempts sooner).
        let gran = vruntime_delta(self.cfg.wakeup_granularity_ns, th.weight);
        let core = &mut self.cores[target];
        core.rq.push(t);
        if let Some(cur) = core.running {
            if core.switch_left_ns == 0 {
                let cv = self.threads[cur as usize].vruntime;
                if cv > v + gran {
                    core.preempt_pending = true;
                }
            }
        }
        self.mark(target as u16);
    }

    /// Queues interrupt work on a core.
    pub fn raise_irq(&mut self, now: SimTime, c: u16, work: IrqWork) {
        self.settle(c as usize, now);
        self.cores[c as usize].irq.push_back(work);
        self.mark(c);
    }

    /// Whether the core is inside the NVMe interrupt handler (a new CQE joins it).
    pub fn in_nvme_irq(&self, c: u16) -> bool {
        let core = &self.cores[c as usize];
        core.irq_item.is_some_and(|(w, _, _)| w.nvme) || core.irq.iter().any(|w| w.nvme)
    }

    /// Counts one interrupt (MSI or timer) on a core.
    pub fn count_interrupt(&mut self, c: u16) {
        self.cores[c as usize].interrupts += 1;
    }

    /// Handles a core decision event.
    pub fn on_event(&mut self, now: SimTime, c: u16, gen: u32) -> CoreOutcome {
        if self.cores[c as usize].gen != gen {
            return CoreOutcome::Nothing;
        }
        self.settle(c as usize, now);
        self.mark(c);
        let core = &mut self.cores[c as usize];
        if let Some((item, end, started)) = core.irq_item {
            if end <= now {
                core.irq_item = None;
                return CoreOutcome::Irq {
                    action: item.action,
                    started,
                };
            }
            return CoreOutcome::Nothing;
        }
        if let Some(t) = core.running {
            if core.switch_left_ns > 0 {
                return CoreOutcome::Nothing;
            }
            let th = &self.threads[t as usize];
            if th.state == RunState::Running && th.pollution_ns == 0 && th.remaining_ns == 0 {
                return CoreOutcome::BurstDone { thread: t };
            }
        }
        CoreOutcome::Nothing
    }

    /// Re-plans every core touched since the last call and hands each core's next decision
    /// point to `schedule` (the caller turns it into an event; a timer whose `gen` is stale
    /// by then is ignored by [`Cpu::on_event`]).
    pub fn reschedule(&mut self, now: SimTime, mut schedule: impl FnMut(CoreTimer)) {
        while let Some(c) = self.dirty.pop() {
            self.dirty_mark[c as usize] = false;
            self.plan(now, c as usize, &mut schedule);
        }
    }

    /// The running thread's slice: its weight's share of `sched_latency` among the core's
    /// runnable threads (`sched_slice`; `sched_latency / n` when all weigh the same), at least
    /// `min_granularity`.
    fn slice_ns(&self, c: usize) -> u64 {
        let core = &self.cores[c];
        let weight = |t: u32| u128::from(self.threads[t as usize].weight);
        let own = core.running.map_or(u128::from(NICE_0_WEIGHT), weight);
        let total = own + core.rq.iter().map(|&t| weight(t)).sum::<u128>();
        let slice = u128::from(self.cfg.sched_latency_ns) * own / total;
        (slice as u64).max(self.cfg.min_granularity_ns)
    }

    fn pick(&mut self, c: usize) -> Option<u32> {
        let core = &mut self.cores[c];
        let threads = &self.threads;
        let (i, _) = core
            .rq
            .iter()
            .enumerate()
            .min_by_key(|(i, &t)| (threads[t as usize].vruntime, *i))?;
        Some(core.rq.remove(i))
    }

    /// New-idle balance (`LoadBalance::NewIdle`): core `c` has nothing to run; it takes the
    /// waiting thread of least virtual runtime from the core with the most waiting threads that
    /// may move (not pinned; ties: the lowest core), renormalising its virtual runtime to this
    /// core's `min_vruntime` as a migration does (`migrate_task_rq_fair`).
    fn pull_for_idle(&mut self, now: SimTime, c: usize) {
        let threads = &self.threads;
        let movable = |t: u32| !threads[t as usize].pinned;
        let waiting = |b: usize| self.cores[b].rq.iter().filter(|&&t| movable(t)).count();
        let Some(b) = (0..self.cores.len())
            .filter(|&b| b != c && waiting(b) > 0)
            .max_by_key(|&b| (waiting(b), std::cmp::Reverse(b)))
        else {
            return;
        };
        let (i, _) = self.cores[b]
            .rq
            .iter()
            .enumerate()
            .filter(|(_, &t)| movable(t))
            .min_by_key(|(i, &t)| (threads[t as usize].vruntime, *i))
            .expect("the busiest core has a movable waiting thread");
        self.settle(b, now);
        let t = self.cores[b].rq.remove(i);
        let (from_min, to_min) = (self.cores[b].min_vruntime, self.cores[c].min_vruntime);
        let th = &mut self.threads[t as usize];
        th.vruntime = (th.vruntime + to_min).saturating_sub(from_min);
        th.core = c as u16;
        self.cores[c].rq.push(t);
        self.cores[c].migrations_in += 1;
        // Its slice shrank the busiest core's others' share: re-plan it.
        self.mark(b as u16);
    }

    fn plan(&mut self, now: SimTime, c: usize, schedule: &mut impl FnMut(CoreTimer)) {
        self.settle(c, now);
        // Interrupts first: they pause everything else.
        {
            let core = &mut self.cores[c];
            if core.irq_item.is_none() {
                if let Some(work) = core.irq.pop_front() {
                    core.irq_item = Some((work, now + work.ns, now));
                }
            }
            if let Some((_, end, _)) = core.irq_item {
                core.gen = core.gen.wrapping_add(1);
                schedule(CoreTimer {
                    at: end,
                    core: c as u16,
                    gen: core.gen,
                });
                return;
            }
        }
        // The owner may have blocked or exited in its continuation.
        if let Some(t) = self.cores[c].running {
            if self.threads[t as usize].state != RunState::Running {
                let core = &mut self.cores[c];
                core.running = None;
                core.last_thread = Some(t);
                core.switch_left_ns = 0;
                core.preempt_pending = false;
            }
        }
        // Preemption: wake-up preemption or an expired slice.
        if let Some(t) = self.cores[c].running {
            if self.cores[c].switch_left_ns == 0 && !self.cores[c].rq.is_empty() {
                let th = &self.threads[t as usize];
                let ran = th.sum_exec_ns - self.cores[c].slice_start_exec;
                let expired = ran >= self.slice_ns(c);
                let threads = &self.threads;
                let best_v = self.cores[c]
                    .rq
                    .iter()
                    .map(|&q| threads[q as usize].vruntime)
                    .min()
                    .expect("non-empty run queue");
                let preempt = self.cores[c].preempt_pending || (expired && best_v < th.vruntime);
                if preempt {
                    let th = &mut self.threads[t as usize];
                    th.state = RunState::Runnable;
                    th.time.switch(now, Some(Span::RunQueue));
                    let core = &mut self.cores[c];
                    core.rq.push(t);
                    core.running = None;
                    core.last_thread = Some(t);
                } else if expired {
                    self.cores[c].slice_start_exec = th.sum_exec_ns;
                }
            }
            self.cores[c].preempt_pending = false;
        }
        if self.cfg.load_balance == LoadBalance::NewIdle
            && self.cores[c].running.is_none()
            && self.cores[c].rq.is_empty()
        {
            self.pull_for_idle(now, c);
        }
        if self.cores[c].running.is_none() {
            if let Some(t) = self.pick(c) {
                let switch = self
                    .costs
                    .draw(CostSite::ContextSwitch, self.cfg.context_switch_ns);
                let displaced = self.cores[c].last_thread.is_some_and(|l| l != t);
                let pollution = if displaced {
                    self.costs
                        .draw(CostSite::CachePollution, self.cfg.cache_pollution_ns)
                } else {
                    0
                };
                let core = &mut self.cores[c];
                core.running = Some(t);
                core.switch_left_ns = switch;
                core.context_switches += 1;
                let th = &mut self.threads[t as usize];
                core.class_switches[th.class.index()] += 1;
                th.state = RunState::Running;
                th.time.switch(now, None);
                th.core = c as u16;
                th.pollution_ns += pollution;
                th.running_since = now + switch;
                core.slice_start_exec = th.sum_exec_ns;
                core.preempt_pending = false;
            }
        }
        // min_vruntime never goes backwards.
        {
            let threads = &self.threads;
            let core = &self.cores[c];
            let cur = core.running.map(|t| threads[t as usize].vruntime);
            let left = core.rq.iter().map(|&t| threads[t as usize].vruntime).min();
            let m = match (cur, left) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(m) = m {
                let core = &mut self.cores[c];
                core.min_vruntime = core.min_vruntime.max(m);
            }
        }
        // Next decision point.
        let core = &self.cores[c];
        let next = match core.running {
            None => None,
            Some(_) if core.switch_left_ns > 0 => Some(now + core.switch_left_ns),
            Some(t) => {
                let th = &self.threads[t as usize];
                let burst_end = (th.remaining_ns != UNTIL_POKED)
                    .then(|| now + th.pollution_ns + th.remaining_ns);
                let slice_end = (!core.rq.is_empty()).then(|| {
                    let ran = th.sum_exec_ns - core.slice_start_exec;
                    now + self.slice_ns(c).saturating_sub(ran).max(1)
                });
                match (burst_end, slice_end) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
        };
        let core = &mut self.cores[c];
        core.gen = core.gen.wrapping_add(1);
        if let Some(at) = next {
            schedule(CoreTimer {
                at,
                core: c as u16,
                gen: core.gen,
            });
        }
    }

    /// Brings every core's accounting up to `now` and returns the busy time per category
    /// summed over cores (idle included at its index). Accounting is additive over time, so
    /// settling at extra instants changes no outcome.
    pub fn sample(&mut self, now: SimTime) -> [u64; CAT_COUNT] {
        let mut sum = [0u64; CAT_COUNT];
        for c in 0..self.cores.len() {
            self.settle(c, now);
            for (s, v) in sum.iter_mut().zip(&self.cores[c].acct_ns) {
                *s += v;
            }
        }
        sum
    }

    /// Context switches so far, summed over cores, by the class of the thread switched in
    /// (kernel threads count as throughput; a kblockd worker as the class of the request it
    /// last dispatched), and interrupts so far (time series).
    pub fn switches_and_interrupts(&self) -> ([u64; 2], u64) {
        let mut switches = [0; 2];
        let mut interrupts = 0;
        for core in &self.cores {
            switches[0] += core.class_switches[0];
            switches[1] += core.class_switches[1];
            interrupts += core.interrupts;
        }
        (switches, interrupts)
    }

    /// Closes the accounting at `end` and returns per-core statistics. Every thread's spans
    /// are closed too, and checked to add up to its life (`exectime`).
    pub fn finish(&mut self, end: SimTime) -> Vec<CoreStats> {
        for c in 0..self.cores.len() {
            self.settle(c, end);
        }
        for (t, th) in self.threads.iter_mut().enumerate() {
            th.time.close(end);
            th.time.check(t as u32, end);
        }
        self.cores
            .iter()
            .enumerate()
            .map(|(i, core)| CoreStats {
                core: i as u32,
                ns: core.acct_ns,
                class_ns: core.class_ns,
                context_switches: core.context_switches,
                interrupts: core.interrupts,
                migrations_in: core.migrations_in,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostConfig;
    use engine::EventQueue;

    fn cpu(cores: u32) -> (Cpu, EventQueue<CoreTimer>) {
        let mut cfg = HostConfig::preset("arm8").unwrap().cpu;
        cfg.cores = cores;
        (Cpu::new(&cfg), EventQueue::new())
    }

    /// `is_polling`: a thread whose burst has no end of its own (`UNTIL_POKED`) polls, on its
    /// core or waiting for it; once poked (a burst of its own) it does not, nor does a blocked
    /// thread or one computing.
    #[test]
    fn a_thread_polls_while_its_burst_waits_for_a_poke() {
        let (mut cpu, mut q) = cpu(1);
        let a = cpu.add_thread(0, IoClass::Throughput);
        let b = cpu.add_thread(0, IoClass::Throughput);
        assert!(!cpu.is_polling(a), "blocked");
        cpu.wake(SimTime::ZERO, a, UNTIL_POKED, Cat::Poll);
        cpu.wake(SimTime::ZERO, b, 1_000_000, Cat::User);
        arm(&mut cpu, SimTime::ZERO, &mut q);
        assert!(cpu.is_polling(a));
        assert!(!cpu.is_polling(b), "computing");
        cpu.set_burst(SimTime::ZERO, a, 500, Cat::Poll);
        assert!(
            !cpu.is_polling(a),
            "poked: its next check is a burst of its own"
        );
    }

    /// Re-plans the touched cores into `q`.
    fn arm(cpu: &mut Cpu, now: SimTime, q: &mut EventQueue<CoreTimer>) {
        cpu.reschedule(now, |timer| q.schedule(timer.at, timer));
    }

    /// Runs the core events until `until`; every thread whose burst ends gets `next(t)` as its
    /// next burst (None: it blocks).
    fn drive(
        cpu: &mut Cpu,
        q: &mut EventQueue<CoreTimer>,
        (from, until): (SimTime, SimTime),
        mut next: impl FnMut(u32, SimTime) -> Option<u64>,
    ) -> Vec<(SimTime, u32)> {
        let mut done = Vec::new();
        arm(cpu, from, q);
        while let Some((t, ev)) = q.pop_due(until) {
            let CoreTimer { core, gen, .. } = ev;
            if let CoreOutcome::BurstDone { thread } = cpu.on_event(t, core, gen) {
                done.push((t, thread));
                match next(thread, t) {
                    Some(ns) => cpu.set_burst(t, thread, ns, Cat::User),
                    None => cpu.block(t, thread, Span::Idle),
                }
            }
            arm(cpu, t, q);
        }
        done
    }

    #[test]
    fn two_hogs_share_a_core_and_time_adds_up() {
        let (mut cpu, mut q) = cpu(1);
        let a = cpu.add_thread(0, IoClass::Throughput);
        let b = cpu.add_thread(0, IoClass::Throughput);
        cpu.wake(SimTime::ZERO, a, 1_000_000, Cat::User);
        cpu.wake(SimTime::ZERO, b, 1_000_000, Cat::User);
        let end = SimTime::from_ms(200);
        drive(&mut cpu, &mut q, (SimTime::ZERO, end), |_, _| {
            Some(1_000_000)
        });
        let stats = cpu.finish(end);
        let (ua, ub) = (
            cpu.threads[a as usize].user_ns,
            cpu.threads[b as usize].user_ns,
        );
        assert!(ua.abs_diff(ub) < 30_000_000, "unfair share: {ua} vs {ub}");
        assert_eq!(stats[0].ns.iter().sum::<u64>(), end.as_ns());
        assert!(
            stats[0].context_switches > 2,
            "slices expire and the hogs alternate"
        );
    }

    /// `foreign_user_since`: a thread of address space 1 does 10 µs of user code and blocks;
    /// its own process's user code afterwards is not foreign, another process's is, and only
    /// after it ran (not before `since`); a kernel thread (no user code) finds every process's
    /// user code foreign, and its own kernel work counts for nobody.
    #[test]
    fn foreign_user_code_is_another_address_space_s_after_the_mark() {
        let (mut cpu, mut q) = cpu(1);
        let (a, a2, b, k) = (
            cpu.add_thread(0, IoClass::LatencyCritical),
            cpu.add_thread(0, IoClass::LatencyCritical),
            cpu.add_thread(0, IoClass::Throughput),
            cpu.add_thread(0, IoClass::Throughput),
        );
        cpu.set_address_space(a, 1);
        cpu.set_address_space(a2, 1);
        cpu.set_address_space(b, 2);
        let run_alone = |cpu: &mut Cpu, q: &mut EventQueue<CoreTimer>, t: u32, from: SimTime| {
            cpu.wake(from, t, 10_000, Cat::User);
            let end = from + 100_000;
            let done = drive(cpu, q, (from, end), |_, _| None);
            assert_eq!(done.len(), 1, "thread {t} ran its burst: {done:?}");
            end
        };
        let mark = run_alone(&mut cpu, &mut q, a, SimTime::ZERO);
        assert!(
            !cpu.foreign_user_since(0, 1, mark, SimTime::MAX),
            "nothing ran since"
        );
        let t = run_alone(&mut cpu, &mut q, a2, mark);
        assert!(
            !cpu.foreign_user_since(0, 1, mark, SimTime::MAX),
            "its own process's code"
        );
        assert!(
            cpu.foreign_user_since(0, NO_USER_CODE, mark, SimTime::MAX),
            "a kernel thread's view"
        );
        let t = run_alone(&mut cpu, &mut q, b, t);
        assert!(
            cpu.foreign_user_since(0, 1, mark, SimTime::MAX),
            "process 2 ran after the mark"
        );
        assert!(
            !cpu.foreign_user_since(0, 1, t, SimTime::MAX),
            "but not after its end"
        );
        // Process 1 again: process 2 stays the latest foreign code for it, and for process 2
        // process 1 is.
        let t2 = run_alone(&mut cpu, &mut q, a, t);
        assert!(cpu.foreign_user_since(0, 1, mark, SimTime::MAX));
        assert!(!cpu.foreign_user_since(0, 1, t, SimTime::MAX));
        assert!(cpu.foreign_user_since(0, 2, t, SimTime::MAX));
        assert!(!cpu.foreign_user_since(0, 2, t2, SimTime::MAX));
        // A kernel thread's "user" burst (none in a real run) is nobody's code.
        run_alone(&mut cpu, &mut q, k, t2);
        assert!(
            !cpu.foreign_user_since(0, 1, t2, SimTime::MAX)
                && !cpu.foreign_user_since(0, 2, t2, SimTime::MAX)
        );
        assert!(!cpu.foreign_user_since(0, NO_USER_CODE, t2, SimTime::MAX));
    }

    /// `foreign_user_since` across a shared last-level cache (`llc_shared_cores` 2, not 1):
    /// process 2 computing on core 1 (its record not yet settled) makes process 1's mark on
    /// core 0 cold once `llc_sweep_ns` has passed; on core 1 itself at once.
    #[test]
    fn foreign_user_code_on_a_core_sharing_the_llc_counts() {
        for (llc, shared) in [(2, true), (1, false)] {
            let mut cfg = HostConfig::preset("arm8").unwrap().cpu;
            (cfg.cores, cfg.llc_shared_cores) = (2, llc);
            let (mut cpu, mut q) = (Cpu::new(&cfg), EventQueue::new());
            let a = cpu.add_thread(0, IoClass::LatencyCritical);
            let b = cpu.add_thread(1, IoClass::Throughput);
            cpu.set_address_space(a, 1);
            cpu.set_address_space(b, 2);
            cpu.wake(SimTime::ZERO, a, 10_000, Cat::User);
            let mark = SimTime::ZERO + 100_000;
            assert_eq!(
                drive(&mut cpu, &mut q, (SimTime::ZERO, mark), |_, _| None).len(),
                1
            );
            cpu.wake(mark, b, 1_000_000_000, Cat::User);
            let (now, soon) = (mark + 200_000, mark + (cfg.llc_sweep_ns - 1));
            drive(&mut cpu, &mut q, (mark, now), |_, _| None);
            let cold = |core, mm, at| cpu.foreign_user_since(core, mm, mark, at);
            assert_eq!(cold(0, 1, now), shared, "llc_shared_cores = {llc}");
            assert!(cold(1, 1, now) && cold(1, 1, soon), "its own core at once");
            assert!(!cold(0, 1, soon), "not before the sweep time");
            assert!(!cold(0, 2, now), "its own code is not foreign");
        }
    }

    #[test]
    fn an_interrupt_delays_the_running_burst_by_its_length() {
        let (mut cpu, mut q) = cpu(1);
        let a = cpu.add_thread(0, IoClass::Throughput);
        cpu.wake(SimTime::ZERO, a, 10_000, Cat::User);
        arm(&mut cpu, SimTime::ZERO, &mut q);
        // Switch in (2.5 µs), then 10 µs of work; an interrupt of 2 µs at 5 µs.
        let (t, ev) = q.pop().unwrap();
        let CoreTimer { core, gen, .. } = ev;
        assert_eq!(cpu.on_event(t, core, gen), CoreOutcome::Nothing);
        arm(&mut cpu, t, &mut q);
        cpu.raise_irq(
            SimTime::from_us(5),
            0,
            IrqWork {
                ns: 2_000,
                cat: Cat::Irq,
                action: IrqAction::None,
                nvme: true,
                class: None,
            },
        );
        arm(&mut cpu, SimTime::from_us(5), &mut q);
        let mut seen = Vec::new();
        while let Some((t, ev)) = q.pop() {
            let CoreTimer { core, gen, .. } = ev;
            match cpu.on_event(t, core, gen) {
                CoreOutcome::Nothing => {}
                CoreOutcome::BurstDone { thread } => {
                    seen.push(("burst", t));
                    cpu.block(t, thread, Span::Idle);
                }
                CoreOutcome::Irq { .. } => seen.push(("irq", t)),
            }
            arm(&mut cpu, t, &mut q);
        }
        assert_eq!(
            seen,
            vec![
                ("irq", SimTime::from_us(7)),
                ("burst", SimTime::from_ns(14_500))
            ]
        );
        let stats = cpu.finish(SimTime::from_us(20));
        let ns = stats[0].ns;
        assert_eq!(ns[Cat::Irq.index()], 2_000);
        assert_eq!(ns[Cat::User.index()], 10_000);
        assert_eq!(ns[Cat::Sched.index()], 2_500);
        assert_eq!(ns[Cat::Idle.index()], 20_000 - 14_500);
        // The thread's life: switched in, 10 µs of work with 2 µs stolen by the interrupt,
        // then blocked (idle) to the end.
        let time = &cpu.threads[a as usize].time.ns;
        assert_eq!(time[Span::Sched.index()], 2_500);
        assert_eq!(time[Span::User.index()], 10_000);
        assert_eq!(time[Span::IrqStolen.index()], 2_000);
        assert_eq!(time[Span::Idle.index()], 20_000 - 14_500);
        assert_eq!(time[Span::RunQueue.index()], 0);
    }

    /// A thread that only computes, alone on its core, spends its whole life in user code but
    /// for the one switch that put it on the core.
    #[test]
    fn a_thread_that_only_computes_spends_its_life_in_user_code() {
        let (mut cpu, mut q) = cpu(1);
        let a = cpu.add_thread(0, IoClass::Throughput);
        cpu.wake(SimTime::ZERO, a, 1_000_000, Cat::User);
        let end = SimTime::from_ms(50);
        drive(&mut cpu, &mut q, (SimTime::ZERO, end), |_, _| {
            Some(1_000_000)
        });
        cpu.finish(end);
        let time = &cpu.threads[a as usize].time.ns;
        let switch = cpu.cfg.context_switch_ns;
        assert_eq!(time[Span::User.index()], end.as_ns() - switch);
        assert_eq!(time[Span::Sched.index()], switch);
        assert_eq!(time.iter().sum::<u64>(), end.as_ns());
    }

    /// Two CPU-bound threads on one core: each computes about half its life and waits in the
    /// run queue for most of the other half (the rest is switching).
    #[test]
    fn two_hogs_on_one_core_each_wait_about_half_their_life_for_it() {
        let (mut cpu, mut q) = cpu(1);
        let a = cpu.add_thread(0, IoClass::Throughput);
        let b = cpu.add_thread(0, IoClass::Throughput);
        cpu.wake(SimTime::ZERO, a, 1_000_000, Cat::User);
        cpu.wake(SimTime::ZERO, b, 1_000_000, Cat::User);
        let end = SimTime::from_ms(300);
        drive(&mut cpu, &mut q, (SimTime::ZERO, end), |_, _| {
            Some(1_000_000)
        });
        cpu.finish(end);
        for t in [a, b] {
            let time = &cpu.threads[t as usize].time.ns;
            let pct = |s: Span| time[s.index()] * 100 / end.as_ns();
            assert!(
                (45..=55).contains(&pct(Span::RunQueue)),
                "thread {t}: run queue {} % of its life",
                pct(Span::RunQueue)
            );
            assert!(
                (45..=55).contains(&pct(Span::User)),
                "thread {t}: user {} %",
                pct(Span::User)
            );
            assert_eq!(time.iter().sum::<u64>(), end.as_ns());
        }
    }

    #[test]
    fn a_waking_sleeper_preempts_a_hog() {
        let (mut cpu, mut q) = cpu(1);
        let hog = cpu.add_thread(0, IoClass::Throughput);
        let sleeper = cpu.add_thread(0, IoClass::Throughput);
        cpu.wake(SimTime::ZERO, hog, u64::MAX / 4, Cat::User);
        drive(
            &mut cpu,
            &mut q,
            (SimTime::ZERO, SimTime::from_ms(50)),
            |_, _| None,
        );
        // The hog has run 50 ms; the sleeper wakes with credit and cuts in.
        let now = SimTime::from_ms(50);
        cpu.wake(now, sleeper, 1_000, Cat::User);
        let done = drive(&mut cpu, &mut q, (now, SimTime::from_ms(60)), |_, _| None);
        let (t, who) = done[0];
        assert_eq!(who, sleeper);
        // Switch (2.5 µs) + pollution (1 µs, the hog ran here since) + 1 µs of work.
        assert_eq!(t, now + 4_500);
    }

    /// On one core, a thread that slept 100 µs does not preempt a hog at nice 0 (it is not
    /// `wakeup_granularity` behind it) but does at once as a nice −20 kworker; on two, a
    /// nice-0 thread moves to the idle core while a pinned worker stays on its own.
    #[test]
    fn a_nice_minus_20_worker_preempts_a_hog_at_once_and_stays_on_its_core() {
        let run = |cores: u32, weight: u64| {
            let (mut cpu, mut q) = cpu(cores);
            let t = cpu.add_thread(0, IoClass::Throughput);
            let hog = cpu.add_thread(0, IoClass::Throughput);
            if weight != NICE_0_WEIGHT {
                cpu.make_pinned_worker(t, weight);
            }
            cpu.wake(SimTime::ZERO, t, 1_000, Cat::User);
            cpu.wake(SimTime::ZERO, hog, u64::MAX / 4, Cat::User);
            let mut blocked_at = SimTime::ZERO;
            let done = drive(
                &mut cpu,
                &mut q,
                (SimTime::ZERO, SimTime::from_ms(1)),
                |_, at| {
                    blocked_at = at;
                    None
                },
            );
            assert_eq!(done.len(), 1, "t ran its 1 µs and blocked");
            let now = blocked_at + 100_000;
            drive(&mut cpu, &mut q, (SimTime::from_ms(1), now), |_, _| None);
            cpu.wake(now, t, 1_000, Cat::User);
            let core = cpu.threads[t as usize].core;
            let done = drive(&mut cpu, &mut q, (now, SimTime::from_ms(100)), |_, _| None);
            (core, done[0].0 - now)
        };
        // Switch (2.5 µs) + pollution (1 µs: the hog ran there) + 1 µs of work.
        assert_eq!(run(1, NICE_MINUS_20_WEIGHT), (0, 4_500));
        let (core, waited) = run(1, NICE_0_WEIGHT);
        assert_eq!(core, 0);
        assert!(waited > 1_000_000, "waits for the hog's slice: {waited} ns");
        // Two cores, a hog on core 0 and core 1 idle: a thread homed on core 0 waking 100 µs
        // in moves to core 1 at nice 0; pinned, it stays and preempts the hog.
        let two = |weight: u64| {
            let (mut cpu, mut q) = cpu(2);
            let hog = cpu.add_thread(0, IoClass::Throughput);
            let t = cpu.add_thread(0, IoClass::Throughput);
            if weight != NICE_0_WEIGHT {
                cpu.make_pinned_worker(t, weight);
            }
            cpu.wake(SimTime::ZERO, hog, u64::MAX / 4, Cat::User);
            let now = SimTime::from_us(100);
            drive(&mut cpu, &mut q, (SimTime::ZERO, now), |_, _| None);
            cpu.wake(now, t, 1_000, Cat::User);
            let core = cpu.threads[t as usize].core;
            let done = drive(&mut cpu, &mut q, (now, SimTime::from_ms(100)), |_, _| None);
            (core, done[0].0 - now)
        };
        assert_eq!(
            two(NICE_0_WEIGHT),
            (1, 5_000),
            "IPI + switch + work on the idle core"
        );
        assert_eq!(two(NICE_MINUS_20_WEIGHT), (0, 4_500));
    }

    /// Two hogs on core 0 and a thread on core 1 that computes 10 µs and blocks; returns the
    /// hogs' user time after 100 ms, core 1's idle time and its migrations.
    fn hogs_beside_a_core_going_idle(balance: LoadBalance, pin_hogs: bool) -> (u64, u64, u64, u64) {
        let mut cfg = HostConfig::preset("arm8").unwrap().cpu;
        cfg.cores = 2;
        cfg.wake_placement = WakePlacement::PreviousCore;
        cfg.load_balance = balance;
        let (mut cpu, mut q) = (Cpu::new(&cfg), EventQueue::new());
        let a = cpu.add_thread(0, IoClass::Throughput);
        let b = cpu.add_thread(0, IoClass::Throughput);
        let c = cpu.add_thread(1, IoClass::LatencyCritical);
        if pin_hogs {
            cpu.make_pinned_worker(a, NICE_0_WEIGHT);
            cpu.make_pinned_worker(b, NICE_0_WEIGHT);
        }
        cpu.wake(SimTime::ZERO, a, 1_000_000, Cat::User);
        cpu.wake(SimTime::ZERO, b, 1_000_000, Cat::User);
        cpu.wake(SimTime::ZERO, c, 10_000, Cat::User);
        let end = SimTime::from_ms(100);
        drive(&mut cpu, &mut q, (SimTime::ZERO, end), |t, _| {
            (t != c).then_some(1_000_000)
        });
        let stats = cpu.finish(end);
        let user = |t: u32| cpu.threads[t as usize].user_ns;
        (
            user(a),
            user(b),
            stats[1].ns[Cat::Idle.index()],
            stats[1].migrations_in,
        )
    }

    #[test]
    fn new_idle_balance_moves_a_waiting_hog_to_a_core_going_idle() {
        // Off: the hogs share core 0 for the whole run while core 1 idles.
        let (a, b, idle, moved) = hogs_beside_a_core_going_idle(LoadBalance::Off, false);
        assert!(a + b < 100_000_000, "one core's worth: {a} + {b}");
        assert!(idle > 95_000_000, "core 1 idled {idle} ns");
        assert_eq!(moved, 0);
        // New-idle: when the short thread blocks, core 1 takes the waiting hog; each then
        // has a core (less the switches).
        let (a, b, idle, moved) = hogs_beside_a_core_going_idle(LoadBalance::NewIdle, false);
        assert!(a > 95_000_000 && b > 95_000_000, "{a} and {b}");
        assert!(idle < 1_000_000, "core 1 idled {idle} ns");
        assert_eq!(moved, 1);
        // A pinned thread is never taken.
        let (_, _, idle, moved) = hogs_beside_a_core_going_idle(LoadBalance::NewIdle, true);
        assert_eq!(moved, 0);
        assert!(idle > 95_000_000, "core 1 idled {idle} ns");
    }

    #[test]
    fn wake_placement_prefers_an_idle_core() {
        let (mut cpu, mut q) = cpu(2);
        let hog = cpu.add_thread(0, IoClass::Throughput);
        let t = cpu.add_thread(0, IoClass::Throughput);
        cpu.wake(SimTime::ZERO, hog, u64::MAX / 4, Cat::User);
        arm(&mut cpu, SimTime::ZERO, &mut q);
        cpu.wake(SimTime::from_us(10), t, 1_000, Cat::User);
        assert_eq!(cpu.threads[t as usize].core, 1);
    }
}
