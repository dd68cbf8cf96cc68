//! The run queues and the scheduler's pick: each re-planned core runs its interrupts first, then
//! preempts or keeps its thread, balances when it would idle, picks the thread of least virtual
//! runtime, and hands out its next decision point (module essay of `cpu`).

use engine::SimTime;

use super::{CoreTimer, Cpu, RunState, NICE_0_WEIGHT, UNTIL_POKED};
use crate::config::LoadBalance;
use crate::exectime::Span;
use crate::jitter::CostSite;

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
}
