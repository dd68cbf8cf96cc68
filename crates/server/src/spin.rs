//! Waiting that pays for itself: how long an idle worker spins before it blocks, sized from
//! what a sleep costs on this machine and when the next batch is expected
//! (`[dataplane] idle = "adaptive"`).
//!
//! # What it models
//! Linux's hybrid block polling (`block/blk-mq.c`, `blk_mq_poll_nsecs`: sleep for half the mean
//! completion time, then poll) and NAPI busy polling (`net.core.busy_poll`: spin on the
//! device queue for a bounded time before sleeping on the socket). Both trade CPU spent
//! spinning against what a sleep costs: the context switch out and back, and the wake-up's
//! latency. Here the trade is the worker's: a blocked worker woken by a socket pays a
//! sleep-and-wake (tens of µs of CPU on a nested-virtualization guest, and as much latency);
//! a spinning one pays the time it spins.
//!
//! # The rule
//! Let W be the CPU one sleep-and-wake costs the worker thread. An idle period (from the end
//! of a busy step to the next work) of length g costs W if the worker blocks at once; if it
//! spins up to a budget of W and then blocks, it costs g when g < W, and 2W otherwise — W is
//! the ski-rental bound: never more than twice what an oracle that knew g would pay. So the
//! worker spins when, over its recent idle periods, spinning costs less than sleeping:
//!
//! ```text
//!   E[min(g, W)] + (1 − p) · W  <  W      ⇔      E[min(g, W)]  <  p · W
//! ```
//!
//! p the share of periods whose work arrived within the spin ([`spin_pays`]). Both sides
//! are what a spin observes directly — how long it spun, and whether it found work — so no
//! gap is ever estimated through a sleep (whose wake-up delays what the worker sees). When
//! all gaps are below W this is "the expected gap is below W"; a mix of short and long gaps
//! spins only while the short ones are frequent enough to pay for the long ones' wasted W.
//! While the rule says block, one idle period in [`PROBE_EVERY`] spins anyway, so the
//! averages follow a load that changes ([`SpinSizer::next_budget_ns`]).
//!
//! A coalescing pause ([`crate::coalesce`]) follows the same account: a pause shorter than W
//! is spun (it costs its length, less than sleeping it costs), a longer one is slept
//! ([`spin_pause`]).
//!
//! *Measuring W.* At start, each worker sleeps [`CALIBRATION_SLEEPS`] times for
//! [`CALIBRATION_SLEEP_NS`] (with the worker's 1 ns timer slack) and divides the CPU its
//! thread was charged (`CLOCK_THREAD_CPUTIME_ID`) by the sleeps. Then one blocking wait in
//! [`WAKE_SAMPLE_EVERY`] is measured the same way, and if it slept (the thread's voluntary
//! context switches grew) the CPU it was charged across the wait is a sample of W. The
//! averages are exponentially weighted (weight 1/[`EWMA_WEIGHT`]) and follow a machine whose
//! load changes.
//!
//! Worked example. W = 20 µs. A client at queue depth 1 sends its next request 12 µs after its
//! reply: every spin finds it (p = 1, E = 12 µs < 20 µs): the worker spins, 12 µs of CPU per
//! request instead of 20, and reads the request at once instead of after a wake-up. A client
//! whose requests come 30 µs apart: no spin finds work (p = 0): the worker blocks at once
//! (and spins one period in 8 to check), where a fixed 5 µs spin would waste 5 µs each time.
//! Half the gaps 5 µs, half 1 ms: E = 12.5 µs against p · W = 10 µs: block.

//! # Measured: why it is not the default
//! On a 2-core nested-virtualization VM shared with other builds (load 6–8), alternating runs
//! of the same binary, `block-after-spin` (5 µs) against `adaptive`, 3 each (CHANGELOG.md has
//! every figure): fio's nbd engine at iodepth 32 (`nbd_cpu_efficiency`, `ULLSTACK_IDLE`)
//! served 4–6 % more I/Os per server-CPU-second under `adaptive` in each pair; at queue depth 1
//! (`qd1_latency`, 100,000 reads) it was no better — p50 26.5 against 26.7 µs in one pair,
//! 32.5 against 26.7 and 37.9 against 30.6 in the others, and 16.7–21.7 against 16.0–19.4 µs
//! of server CPU per read: W measured 8–15 µs, under the ~20 µs a QD1 client takes to send
//! its next request, so spins rarely pay there, and on a loaded machine the spins that do run
//! take the CPU the client needs. So it is offered, not the default.
//!
//! # What it leaves out
//! A hybrid sleep-then-spin (blk-mq sleeps half the mean first): a sleep here costs W whatever
//! its length, so sleeping part of a gap never pays. Per-connection gaps (the worker has one
//! average over all its connections). Latency is not in the account: a spin that finds work
//! also saves the wake-up's latency, which the rule does not weigh. The waker's share of a wake-up (the IPI, the vCPU's exit
//! from halt) is not the worker's CPU and is not in W.
//!
//! # Config keys
//! `[dataplane] idle = "adaptive"` (`idle_spin_ns` is not used then).

/// Weight of a new sample in the averages: 1/8, so they follow a change within ~10 samples.
pub const EWMA_WEIGHT: u64 = 8;
/// Sleeps of the start-up calibration: enough for the average not to hinge on one preempted
/// sleep, ~6 ms of a worker's start on a VM whose 40 µs sleep takes ~100 µs of wall time.
pub const CALIBRATION_SLEEPS: u32 = 64;
/// Each calibration sleep: the coalescing ladder's first rung, long enough for the CPU to go
/// idle as it does in a real wait (a 1 µs sleep measured half the CPU of a 40 µs one).
pub const CALIBRATION_SLEEP_NS: u64 = 40_000;
/// One blocking wait in this many is measured for a sample of W: the measurement is two
/// system calls on each side, a few % of a sleep's cost when spread this thin.
pub const WAKE_SAMPLE_EVERY: u64 = 16;
/// While the rule says block, one idle period in this many spins anyway to measure again.
pub const PROBE_EVERY: u64 = 8;
/// The longest spin whatever W measures: a wake-up that costs more than 200 µs of CPU is a
/// preempted or migrated thread, not the machine's sleep cost.
pub const MAX_SPIN_NS: u64 = 200_000;
/// W where measuring is refused: the order a nested-virtualization guest charges.
pub const DEFAULT_WAKE_COST_NS: u64 = 20_000;

/// The rule: spinning pays when the average time spun per idle period, `spent_ns`, is below
/// `found_milli`/1000 (the share of periods whose work arrived within the spin) times W.
pub fn spin_pays(spent_ns: u64, found_milli: u64, wake_cost_ns: u64) -> bool {
    spent_ns.saturating_mul(1_000) < found_milli.saturating_mul(wake_cost_ns)
}

/// How long a spinning worker spins before it blocks: W, capped at [`MAX_SPIN_NS`].
pub fn spin_budget_ns(wake_cost_ns: u64) -> u64 {
    wake_cost_ns.min(MAX_SPIN_NS)
}

/// Whether a coalescing pause of `pause_ns` is spun (it costs less than a sleep) or slept.
pub fn spin_pause(pause_ns: u64, wake_cost_ns: u64) -> bool {
    pause_ns < spin_budget_ns(wake_cost_ns)
}

/// An exponentially weighted average of integer samples.
#[derive(Debug, Clone, Copy)]
struct Ewma {
    value: u64,
}

impl Ewma {
    fn add(&mut self, sample: u64) {
        self.value = (self.value * (EWMA_WEIGHT - 1) + sample).div_ceil(EWMA_WEIGHT);
    }
}

/// A worker's adaptive idle state: its measured W and what its spins found.
#[derive(Debug, Clone)]
pub struct SpinSizer {
    wake_cost: Ewma,
    /// Average ns spun per spinning idle period.
    spent: Ewma,
    /// Average share (milli) of spinning idle periods that found work within the spin.
    found: Ewma,
    /// Idle periods begun since the last spinning one.
    since_spin: u64,
}

impl SpinSizer {
    /// A sizer that starts from a measured (or assumed) W, with nothing known of the gaps:
    /// it blocks and probes until its spins show that spinning pays.
    pub fn new(wake_cost_ns: u64) -> SpinSizer {
        SpinSizer {
            wake_cost: Ewma {
                value: wake_cost_ns,
            },
            spent: Ewma { value: 0 },
            found: Ewma { value: 0 },
            since_spin: 0,
        }
    }

    /// Measures W on the calling thread (a worker, with its timer slack set): see the module
    /// essay. Falls back to [`DEFAULT_WAKE_COST_NS`] when the thread's CPU time is not
    /// readable.
    pub fn calibrate() -> SpinSizer {
        let Some(before) = crate::sys::thread_usage() else {
            return SpinSizer::new(DEFAULT_WAKE_COST_NS);
        };
        for _ in 0..CALIBRATION_SLEEPS {
            std::thread::sleep(std::time::Duration::from_nanos(CALIBRATION_SLEEP_NS));
        }
        let Some(after) = crate::sys::thread_usage() else {
            return SpinSizer::new(DEFAULT_WAKE_COST_NS);
        };
        let cost = after.cpu_ns.saturating_sub(before.cpu_ns) / u64::from(CALIBRATION_SLEEPS);
        SpinSizer::new(cost.max(1))
    }

    /// A blocking wait charged the thread `cpu_ns` and `switches` voluntary context switches:
    /// a sample of W when it slept.
    pub fn observe_wait(&mut self, cpu_ns: u64, switches: u64) {
        if switches > 0 {
            self.wake_cost.add(cpu_ns);
        }
    }

    /// The spin budget of an idle period that begins now: W when spinning pays or this
    /// period is a probe, else 0.
    pub fn next_budget_ns(&mut self) -> u64 {
        self.since_spin += 1;
        let pays = spin_pays(self.spent.value, self.found.value, self.wake_cost.value);
        if pays || self.since_spin >= PROBE_EVERY {
            self.since_spin = 0;
            spin_budget_ns(self.wake_cost.value)
        } else {
            0
        }
    }

    /// A spinning idle period ended: the worker spun `spun_ns`, and `found` work within the
    /// spin (else it blocked).
    pub fn observe_spin(&mut self, spun_ns: u64, found: bool) {
        self.spent.add(spun_ns.min(MAX_SPIN_NS));
        self.found.add(if found { 1_000 } else { 0 });
    }

    /// Whether spinning pays now (what the next period does, but for probes).
    pub fn spinning(&self) -> bool {
        spin_pays(self.spent.value, self.found.value, self.wake_cost.value)
    }

    /// Whether a coalescing pause of `pause_ns` is spun.
    pub fn spins_pause(&self, pause_ns: u64) -> bool {
        spin_pause(pause_ns, self.wake_cost.value)
    }

    /// W, ns of CPU per sleep-and-wake.
    pub fn wake_cost_ns(&self) -> u64 {
        self.wake_cost.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spinning_pays_when_the_spins_cost_less_than_the_sleeps_they_save() {
        // W = 20 µs. Every spin finds work after 12 µs: pays.
        assert!(spin_pays(12_000, 1_000, 20_000));
        // None finds work: the spin is wasted on top of the sleep.
        assert!(!spin_pays(20_000, 0, 20_000));
        // Half after 5 µs, half not (spun the whole 20): 12.5 µs spent against 10 µs saved.
        assert!(!spin_pays(12_500, 500, 20_000));
        // 80 % after 5 µs: 8 µs spent against 16 µs saved.
        assert!(spin_pays(8_000, 800, 20_000));
        // A cheap sleep (bare metal, W = 2 µs) is not worth a 12 µs spin.
        assert!(!spin_pays(2_000, 0, 2_000));
        assert!(!spin_pays(0, 0, 20_000), "nothing known: block");
    }

    #[test]
    fn the_budget_is_the_wake_cost_and_a_short_pause_is_spun() {
        assert_eq!(spin_budget_ns(20_000), 20_000);
        assert_eq!(
            spin_budget_ns(5_000_000),
            MAX_SPIN_NS,
            "a preempted wake-up does not make the worker spin for 5 ms"
        );
        assert!(spin_pause(10_000, 20_000));
        assert!(!spin_pause(40_000, 20_000));
    }

    /// Runs `n` idle periods whose gaps `gap(i)` gives, as the worker would: spin up to the
    /// budget, block past it. Returns the share of periods that spun.
    fn run(s: &mut SpinSizer, n: u64, gap: impl Fn(u64) -> u64) -> f64 {
        let mut spun = 0;
        for i in 0..n {
            let budget = s.next_budget_ns();
            if budget > 0 {
                spun += 1;
                let g = gap(i);
                s.observe_spin(g.min(budget), g < budget);
            }
        }
        spun as f64 / n as f64
    }

    #[test]
    fn the_worker_learns_to_spin_and_to_stop_as_the_gaps_change() {
        let mut s = SpinSizer::new(20_000);
        // Gaps of 12 µs (a QD1 client): from blocking, probes find the work and it spins.
        run(&mut s, 200, |_| 12_000);
        assert!(s.spinning());
        assert!(run(&mut s, 100, |_| 12_000) > 0.99);
        // The client thinks 30 µs between requests: spins stop but for the probes.
        run(&mut s, 100, |_| 30_000);
        assert!(!s.spinning());
        let share = run(&mut s, 800, |_| 30_000);
        assert!(
            (0.1..0.15).contains(&share),
            "spun {:.1} % of periods",
            share * 100.0
        );
        // Half 5 µs, half 1 ms: does not pay.
        run(&mut s, 800, |i| if i % 2 == 0 { 5_000 } else { 1_000_000 });
        assert!(!s.spinning());
        // Four in five 5 µs: pays.
        run(&mut s, 800, |i| if i % 5 == 0 { 1_000_000 } else { 5_000 });
        assert!(s.spinning());
        // The machine's sleeps get cheaper (W measured at 2 µs): 5 µs gaps no longer pay.
        for _ in 0..60 {
            s.observe_wait(2_000, 1);
            s.observe_wait(100, 0); // did not sleep: not a sample
        }
        assert!((2_000..=2_100).contains(&s.wake_cost_ns()));
        run(&mut s, 800, |_| 5_000);
        assert!(!s.spinning());
    }
}
