//! How long an idle worker spins before it blocks: as long as spinning is cheaper than the
//! sleep it would save, on this machine, for the gaps this load leaves.
//!
//! # What it models
//! Linux's hybrid polling (`io_poll_delay = 0`: sleep for about half the mean completion time,
//! then poll) and NAPI busy polling (`net.core.busy_poll`): waiting for the next event by
//! polling costs the CPU for the whole wait; blocking costs one sleep-and-wake, whatever the
//! wait. Which is cheaper depends on two figures, both measured by the worker as it runs:
//!
//! - *what a sleep costs here* (`C`): the CPU time the thread is charged across one blocking
//!   wait that slept (`getrusage(RUSAGE_THREAD)` before and after, on one wait in
//!   [`SLEEP_SAMPLE_EVERY`]: its run time and its voluntary context switches). On a bare-metal host a few µs; on this project's VM (a
//!   Firecracker guest under nested virtualization) 21–35 µs, since going idle and back is what
//!   the hypervisors make dear;
//! - *when the next work comes* (the gap from the last busy step to the next one).
//!
//! # The rule
//! It is the ski-rental problem: spinning is renting, blocking is buying at price `C`. Never
//! spin longer than `C` (past that, a sleep would have been cheaper whatever came next), and
//! spin that long only when the gaps are short often enough to pay for the misses. With
//! budget `C`, an idle period whose work comes after `g ≤ C` costs `g`; one that comes later
//! costs `C` spun and then `C` asleep. So spin iff `p·ḡ + (1 − p)·2C < C`, with `p` the share
//! of idle periods that ended within `C` and `ḡ` their mean gap; otherwise spin only the
//! configured floor (`idle_spin_ns`) and block. Worked example: `C` = 30 µs; a pipelining
//! client answers within 8 µs in 90 % of the idle periods: 0.9·8 + 0.1·60 = 13.2 µs < 30 µs,
//! spin up to 30 µs; the same client behind a 1 ms think time (p = 0): 60 > 30, block after
//! the floor. The break-even share for `ḡ` = C/2 is p = 2/3.
//!
//! *Measuring `p` without bias.* Only idle periods spun with the full budget `C` tell whether
//! the work came within `C` (a worker that blocked early sees its own wake-up latency in the
//! gap). While blocking, one idle period in [`PROBE_EVERY`] is spun with the full budget (a
//! probe), so a load whose gaps shrink is noticed; while spinning, every period is a sample.
//! Averages are integer EWMAs (weight 1/[`EWMA_WEIGHT`]).
//!
//! Spinning is server CPU and is counted as such: the worker's thread time includes it, and
//! `nbd_cpu_efficiency` reads that time.
//!
//! # What it leaves out
//! The coalescing pause (`coalesce.rs`) is still a timer sleep: its shortest rung (40 µs) is
//! above what a sleep costs here, so spinning it would cost more than sleeping it.
//!
//! # Config keys
//! `[dataplane] idle = "block-after-spin"`, `idle_spin_ns` (the floor: what is spun while the
//! rule says block).

/// Weight of a new sample in the averages: 1/8.
pub const EWMA_WEIGHT: u64 = 8;
/// While blocking, one idle period in this many is spun with the full budget (a probe).
pub const PROBE_EVERY: u64 = 8;
/// One blocking wait in this many is timed in thread CPU time (two `getrusage` syscalls:
/// cheap beside the sleep they measure, not free).
pub const SLEEP_SAMPLE_EVERY: u64 = 8;
/// What a sleep is assumed to cost before the first one is measured: of the order seen on
/// this project's VM (21–35 µs), so a fresh worker probes with a budget of that size.
pub const INITIAL_SLEEP_COST_NS: u64 = 20_000;
/// The longest spin whatever a sleep costs (a measurement taken while descheduled by a busy
/// neighbour can read high).
pub const MAX_SPIN_NS: u64 = 100_000;

/// An integer EWMA step: `avg` moves 1/[`EWMA_WEIGHT`] of the way to `sample`.
fn ewma(avg: u64, sample: u64) -> u64 {
    (avg * (EWMA_WEIGHT - 1) + sample) / EWMA_WEIGHT
}

/// The spin budget of one worker's idle periods.
#[derive(Debug, Clone)]
pub struct SpinSizer {
    /// What is spun while the rule says block (`idle_spin_ns`).
    floor_ns: u64,
    /// `C`: measured CPU time of one blocking wait, ns.
    sleep_cost_ns: u64,
    sleep_measured: bool,
    /// `p`, per mille: idle periods spun with the full budget whose work came within it.
    hit_permille: u64,
    /// `ḡ`: mean gap of those that did, ns.
    hit_gap_ns: u64,
    /// Idle periods begun (counts probes while blocking).
    periods: u64,
    /// Blocking waits begun (picks the ones timed).
    waits: u64,
}

impl SpinSizer {
    /// A sizer that spins at least `floor_ns`; it starts out blocking after the floor, and
    /// probes from its first idle period on.
    pub fn new(floor_ns: u64) -> SpinSizer {
        SpinSizer {
            floor_ns,
            sleep_cost_ns: INITIAL_SLEEP_COST_NS,
            sleep_measured: false,
            hit_permille: 0,
            hit_gap_ns: 0,
            periods: 0,
            waits: 0,
        }
    }

    /// The full budget: a sleep's cost (never below the floor, never above [`MAX_SPIN_NS`]).
    pub fn full_budget_ns(&self) -> u64 {
        self.sleep_cost_ns.min(MAX_SPIN_NS).max(self.floor_ns)
    }

    /// What a sleep costs here as last measured, ns.
    pub fn sleep_cost_ns(&self) -> u64 {
        self.sleep_cost_ns
    }

    /// Whether the rule says spin (`p·ḡ + (1 − p)·2C < C`).
    pub fn spinning(&self) -> bool {
        let c = self.full_budget_ns();
        let p = self.hit_permille;
        p * self.hit_gap_ns + (1000 - p) * 2 * c < 1000 * c
    }

    /// The spin budget of an idle period beginning now.
    pub fn next_budget_ns(&mut self) -> u64 {
        self.periods += 1;
        if self.spinning() || self.periods % PROBE_EVERY == 1 {
            self.full_budget_ns()
        } else {
            self.floor_ns
        }
    }

    /// An idle period spun with `budget_ns` ended: its work came `gap_ns` after the last busy
    /// step. Only full-budget periods are samples (see *Measuring `p` without bias*).
    pub fn note_idle_end(&mut self, budget_ns: u64, gap_ns: u64) {
        if budget_ns < self.full_budget_ns() {
            return;
        }
        if gap_ns <= budget_ns {
            self.hit_permille = ewma(self.hit_permille, 1000);
            self.hit_gap_ns = ewma(self.hit_gap_ns, gap_ns);
        } else {
            self.hit_permille = ewma(self.hit_permille, 0);
        }
    }

    /// Whether the blocking wait beginning now is to be timed.
    pub fn sample_this_wait(&mut self) -> bool {
        self.waits += 1;
        self.waits % SLEEP_SAMPLE_EVERY == 1
    }

    /// A timed blocking wait cost the thread `cpu_ns` of CPU.
    pub fn note_sleep_cost(&mut self, cpu_ns: u64) {
        self.sleep_cost_ns = if self.sleep_measured {
            ewma(self.sleep_cost_ns, cpu_ns)
        } else {
            cpu_ns
        };
        self.sleep_measured = true;
    }
}

/// This thread's CPU time (user + system, ns) and its voluntary context switches (sleeps) so
/// far: `getrusage(RUSAGE_THREAD)`, one syscall. `None` if the call fails.
pub fn thread_cpu_and_sleeps() -> Option<(u64, u64)> {
    // SAFETY: an all-zero `rusage` is a valid value (integers and timevals).
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only into the struct it is given, which outlives the call.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) } != 0 {
        return None;
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    Some((ns(r.ru_utime) + ns(r.ru_stime), r.ru_nvcsw as u64))
}

/// Runs `wait` (a blocking call); when `sizer` picks this one to time, notes the CPU time it
/// cost the thread, if it slept (a wait that returned at once is no sample of a sleep).
pub fn timed_wait<T>(sizer: &mut SpinSizer, wait: impl FnOnce() -> T) -> T {
    if !sizer.sample_this_wait() {
        return wait();
    }
    let before = thread_cpu_and_sleeps();
    let out = wait();
    if let (Some((cpu0, sleeps0)), Some((cpu1, sleeps1))) = (before, thread_cpu_and_sleeps()) {
        if sleeps1 > sleeps0 {
            sizer.note_sleep_cost(cpu1.saturating_sub(cpu0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `periods` idle periods whose work comes `gap_ns` after the last busy step, and
    /// returns the budgets given.
    fn run(s: &mut SpinSizer, periods: usize, gap_ns: u64) -> Vec<u64> {
        (0..periods)
            .map(|_| {
                let b = s.next_budget_ns();
                s.note_idle_end(b, gap_ns);
                b
            })
            .collect()
    }

    #[test]
    fn the_spin_grows_to_a_sleeps_cost_for_short_gaps_and_shrinks_for_long_ones() {
        let mut s = SpinSizer::new(5_000);
        s.note_sleep_cost(30_000);
        assert_eq!(s.full_budget_ns(), 30_000);
        // Work comes 8 µs after each busy step: the probes find it within 30 µs, and the
        // sizer goes over to spinning the full budget every time.
        let budgets = run(&mut s, 64, 8_000);
        assert!(s.spinning(), "short gaps: spin");
        assert!(budgets[56..].iter().all(|&b| b == 30_000), "{budgets:?}");
        // The client starts thinking for 1 ms between batches: spinning misses, and the
        // sizer goes back to the floor, probing one period in PROBE_EVERY.
        let budgets = run(&mut s, 64, 1_000_000);
        assert!(!s.spinning(), "long gaps: block");
        let full = budgets[32..].iter().filter(|&&b| b == 30_000).count();
        assert_eq!(full, 32 / PROBE_EVERY as usize, "{budgets:?}");
        assert!(budgets[32..].iter().all(|&b| b == 30_000 || b == 5_000));
    }

    #[test]
    fn the_budget_follows_what_a_sleep_costs() {
        let mut s = SpinSizer::new(5_000);
        assert_eq!(s.full_budget_ns(), INITIAL_SLEEP_COST_NS);
        s.note_sleep_cost(3_000);
        assert_eq!(s.full_budget_ns(), 5_000, "never below the floor");
        // A gap of 4 µs is within a 5 µs budget: spinning it pays.
        run(&mut s, 200, 4_000);
        assert!(s.spinning());
        for _ in 0..64 {
            s.note_sleep_cost(50_000);
        }
        assert!(s.full_budget_ns() > 45_000 && s.full_budget_ns() <= 50_000);
        for _ in 0..64 {
            s.note_sleep_cost(10_000_000);
        }
        assert_eq!(s.full_budget_ns(), MAX_SPIN_NS);
    }

    /// At the break-even share the rule must not spin: gaps of C/2 in 60 % of periods (2/3 is
    /// the break-even for ḡ = C/2) cost more spun than blocked.
    #[test]
    fn below_the_break_even_share_it_blocks() {
        let mut s = SpinSizer::new(1_000);
        s.note_sleep_cost(20_000);
        // 3 hits, 2 misses, repeated.
        for _ in 0..200 {
            for gap in [10_000, 10_000, 10_000, 900_000, 900_000] {
                s.note_idle_end(s.full_budget_ns(), gap);
            }
        }
        assert!(!s.spinning(), "p = 0.6 < 2/3: block");
        for _ in 0..200 {
            for gap in [
                10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 900_000,
            ] {
                s.note_idle_end(s.full_budget_ns(), gap);
            }
        }
        assert!(s.spinning(), "p = 0.875 > 2/3: spin");
    }

    #[test]
    fn a_timed_sleep_is_measured_and_a_wait_that_did_not_sleep_is_not() {
        let mut s = SpinSizer::new(0);
        // The first wait is timed: it sleeps 1 ms, so it cost something and counts.
        timed_wait(&mut s, || {
            std::thread::sleep(std::time::Duration::from_millis(1))
        });
        assert!(s.sleep_measured, "a sleep was not measured");
        let mut s = SpinSizer::new(0);
        timed_wait(&mut s, || ());
        assert!(
            !s.sleep_measured,
            "a wait that never slept was taken for a sleep"
        );
        assert_eq!(s.sleep_cost_ns(), INITIAL_SLEEP_COST_NS);
    }

    #[test]
    fn one_wait_in_sample_every_is_timed() {
        let mut s = SpinSizer::new(0);
        let timed = (0..80).filter(|_| s.sample_this_wait()).count();
        assert_eq!(timed, 80 / SLEEP_SAMPLE_EVERY as usize);
    }
}
