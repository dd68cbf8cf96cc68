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
//! (`blk_submit`) asks it. Why the cache domain and the sweep time: `config::presets`' essay, *The
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
//!
//! ## Where the code is
//! This module holds the cores' and threads' state and the transitions the machine asks for
//! (wake, burst, block, exit, interrupts). Its children split the rest by idea: `cat` (the
//! categories of core time), `account` (per-core accounting and the statistics it yields),
//! `runqueue` (the run queues, the scheduler's pick, preemption, new-idle balance and each
//! core's next decision point), `llc` (whose user code ran on a core or its cache domain) and
//! `tests`. `cat` is a leaf; the others use this module's items, and it imports nothing of
//! theirs but what it re-exports (`Cat`, `CoreStats`).

use std::collections::VecDeque;

use engine::{IoClass, SimTime};

use crate::config::{CpuConfig, WakePlacement};
use crate::exectime::{Span, SpanNs, ThreadTime};
use crate::jitter::{CostDraws, CostSite};

mod account;
mod cat;
mod llc;
mod runqueue;
#[cfg(test)]
mod tests;

pub use account::CoreStats;
pub use cat::{Cat, CATS, CAT_COUNT};

/// A core's next decision point: at `at`, core `core` needs [`Cpu::on_event`] with `gen`
/// (a later plan of the same core bumps `gen`, making this one stale).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreTimer {
    pub at: SimTime,
    pub core: u16,
    pub gen: u32,
}

/// A burst with no end of its own (polling): it ends when the machine re-arms it.
const UNTIL_POKED: u64 = u64::MAX;

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

    fn mark(&mut self, core: u16) {
        if !self.dirty_mark[core as usize] {
            self.dirty_mark[core as usize] = true;
            self.dirty.push(core);
        }
    }

    /// The running (or runnable) thread's next burst is a spin in a poll loop (`Cat::Poll`)
    /// with no end of its own: it ends when [`Cpu::set_burst`] re-arms it (a completion
    /// landed). [`Cpu::is_polling`] says it spins.
    pub fn spin(&mut self, now: SimTime, t: u32) {
        self.set_burst(now, t, UNTIL_POKED, Cat::Poll);
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
}
