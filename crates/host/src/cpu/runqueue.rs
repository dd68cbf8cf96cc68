//! The run queues and the scheduler's pick: each re-planned core runs its interrupts first, then
//! preempts or keeps its thread, balances when it would idle, picks the thread of least virtual
//! runtime, and hands out its next decision point (module essay of `cpu`).

use engine::SimTime;

use super::{Core, CoreTimer, Cpu, RunState, ThreadSched, NICE_0_WEIGHT, UNTIL_POKED};
use crate::config::{CpuConfig, LoadBalance};
use crate::exectime::Span;
use crate::jitter::CostSite;

/// The running thread's slice on `core`: its weight's share of `sched_latency` among the
/// core's runnable threads (`sched_slice`; `sched_latency / n` when all weigh the same), at
/// least `min_granularity`.
fn slice_ns(core: &Core, threads: &[ThreadSched], cfg: &CpuConfig) -> u64 {
    let weight = |t: u32| u128::from(threads[t as usize].weight);
    let own = core.running.map_or(u128::from(NICE_0_WEIGHT), weight);
    let total = own + core.rq.iter().map(|&t| weight(t)).sum::<u128>();
    let slice = u128::from(cfg.sched_latency_ns) * own / total;
    (slice as u64).max(cfg.min_granularity_ns)
}

/// Takes the waiting thread of least virtual runtime (the first such in queue order) off
/// `core`'s run queue.
fn pick(core: &mut Core, threads: &[ThreadSched]) -> Option<u32> {
    let (i, _) = core
        .rq
        .iter()
        .enumerate()
        .min_by_key(|(i, &t)| (threads[t as usize].vruntime, *i))?;
    Some(core.rq.remove(i))
}

impl Cpu {
    /// Re-plans every core touched since the last call and hands each core's next decision
    /// point to `schedule` (the caller turns it into an event; a timer whose `gen` is stale
    /// by then is ignored by [`Cpu::on_event`]).
    pub fn reschedule(&mut self, now: SimTime, mut schedule: impl FnMut(CoreTimer)) {
        while let Some(c) = self.dirty.pop() {
            self.dirty_mark[c as usize] = false;
            self.plan(now, c as usize, &mut schedule);
        }
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

    /// Re-plans core `c` at `now` (interrupts first, then preemption, new-idle balance, the
    /// pick and the next decision point) and hands its next decision point to `schedule`.
    /// Each step borrows the core once: the plan runs after nearly every host event.
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
        {
            let Cpu {
                cores,
                threads,
                cfg,
                ..
            } = self;
            let core = &mut cores[c];
            // The owner may have blocked or exited in its continuation.
            if let Some(t) = core.running {
                if threads[t as usize].state != RunState::Running {
                    core.running = None;
                    core.last_thread = Some(t);
                    core.switch_left_ns = 0;
                    core.preempt_pending = false;
                }
            }
            // Preemption: wake-up preemption or an expired slice.
            if let Some(t) = core.running {
                if core.switch_left_ns == 0 && !core.rq.is_empty() {
                    let th = &threads[t as usize];
                    let ran = th.sum_exec_ns - core.slice_start_exec;
                    let expired = ran >= slice_ns(core, threads, cfg);
                    let best_v = core
                        .rq
                        .iter()
                        .map(|&q| threads[q as usize].vruntime)
                        .min()
                        .expect("non-empty run queue");
                    let preempt = core.preempt_pending || (expired && best_v < th.vruntime);
                    if preempt {
                        let th = &mut threads[t as usize];
                        th.state = RunState::Runnable;
                        th.time.switch(now, Some(Span::RunQueue));
                        core.rq.push(t);
                        core.running = None;
                        core.last_thread = Some(t);
                    } else if expired {
                        core.slice_start_exec = th.sum_exec_ns;
                    }
                }
                core.preempt_pending = false;
            }
        }
        if self.cfg.load_balance == LoadBalance::NewIdle
            && self.cores[c].running.is_none()
            && self.cores[c].rq.is_empty()
        {
            self.pull_for_idle(now, c);
        }
        let Cpu {
            cores,
            threads,
            cfg,
            costs,
            ..
        } = self;
        let core = &mut cores[c];
        if core.running.is_none() {
            if let Some(t) = pick(core, threads) {
                let switch = costs.draw(CostSite::ContextSwitch, cfg.context_switch_ns);
                let displaced = core.last_thread.is_some_and(|l| l != t);
                let pollution = if displaced {
                    costs.draw(CostSite::CachePollution, cfg.cache_pollution_ns)
                } else {
                    0
                };
                core.running = Some(t);
                core.switch_left_ns = switch;
                core.context_switches += 1;
                let th = &mut threads[t as usize];
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
            let cur = core.running.map(|t| threads[t as usize].vruntime);
            let left = core.rq.iter().map(|&t| threads[t as usize].vruntime).min();
            let m = match (cur, left) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if let Some(m) = m {
                core.min_vruntime = core.min_vruntime.max(m);
            }
        }
        // Next decision point.
        let next = match core.running {
            None => None,
            Some(_) if core.switch_left_ns > 0 => Some(now + core.switch_left_ns),
            Some(t) => {
                let th = &threads[t as usize];
                let burst_end = (th.remaining_ns != UNTIL_POKED)
                    .then(|| now + th.pollution_ns + th.remaining_ns);
                let slice_end = (!core.rq.is_empty()).then(|| {
                    let ran = th.sum_exec_ns - core.slice_start_exec;
                    now + slice_ns(core, threads, cfg).saturating_sub(ran).max(1)
                });
                match (burst_end, slice_end) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
        };
        core.gen = core.gen.wrapping_add(1);
        if let Some(at) = next {
            schedule(CoreTimer {
                at,
                core: c as u16,
                gen: core.gen,
            });
        }
    }
}
