//! Per-core accounting: every nanosecond of a core goes to one category (and one class), the
//! running thread's burst and virtual runtime advance with it, and the totals come out as
//! samples and per-core statistics (module essay of `cpu`, *Accounting*).

use engine::SimTime;
use serde::{Deserialize, Serialize};

use super::{vruntime_delta, Cat, Cpu, RunState, CAT_COUNT, UNTIL_POKED};
use crate::exectime::Span;

/// Per-core statistics for reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub migrations_in: u64,
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

impl Cpu {
    /// Brings a core's accounting and its running thread's progress up to `now`. Inlined for
    /// its common case, a core already settled at `now` (an event's handler settles a core at
    /// each operation it does there, and the re-plan settles it again): about two calls in
    /// three change nothing, and a call cost more than the check.
    #[inline]
    pub(super) fn settle(&mut self, c: usize, now: SimTime) {
        if self.cores[c].acct_since != now {
            self.settle_since(c, now);
        }
    }

    /// [`Cpu::settle`] of a core last settled at another time than `now`.
    fn settle_since(&mut self, c: usize, now: SimTime) {
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
