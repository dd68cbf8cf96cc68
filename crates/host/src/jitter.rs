//! What a real kernel path meets that a constant cost does not: per-operation cost variance,
//! the timer tick, and the lock the NVMe poll loop shares with submission.
//!
//! ## Cost variance (`jitter.cost_cv_pct`)
//! A kernel path runs a fixed instruction sequence, but how long it takes depends on what the
//! caches, TLB and branch predictors hold when it runs: the same `nvme_queue_rq` is fast when
//! its code and the queue's cache lines are warm and slower by every miss when they are not.
//! Such times have a hard floor (the warm path) and a right tail (misses are many, small and
//! mostly independent). We model each per-operation cost as a **shifted exponential** with the
//! configured mean `m` and coefficient of variation `cv`:
//!
//! ```text
//!   cost = m·(1 − cv) + Exp(mean m·cv)      mean m, standard deviation m·cv, floor m·(1 − cv)
//! ```
//!
//! It is the simplest law with a floor, a right tail and the calibrated mean kept exactly (in
//! expectation), and it needs one draw of `engine::rng::exp_ns` (libm's `log`: the same on
//! every machine), so the seed still fixes every event time. Worked example (arm8 `isr_ns`
//! 2500, cv 20 %): floor 2000 ns, mean 2500 ns, p99 = 2000 + 500·ln 100 ≈ 4300 ns, p99.99 ≈
//! 6600 ns. A lognormal of the same mean and cv has a thinner far tail (p99.99 ≈ 5100 ns); we
//! keep the exponential because it is the cautious choice for tail studies and its parameters
//! read directly. The presets set cv 10 % (`config::COST_CV_PCT`; where it comes from is in
//! `config::presets`' essay, *Jitter defaults*). Each cost site ([`CostSite`]) draws from its own stream
//! (`engine::stream(seed, "host.cost.<site>")`), so adding a site, or a draw at one site,
//! never moves another site's draws. A site takes its draws from its stream a few at a time,
//! ahead of use (`DRAWS_AHEAD`: their logarithms then overlap in the CPU): the values and
//! their order are the stream's either way.
//!
//! Which costs vary: the per-operation kernel costs of the I/O path — system call, bio submit
//! and merge search, dispatch, `nvme_queue_rq` + doorbell (a kblockd worker's too), ISR,
//! block-layer completion, polled completion, page-cache work per call, write-back page work,
//! socket receive and reply, context switch, cache pollution, timer interrupts and the tick.
//! Not drawn: the poll loop's iteration (a detection delay, not work), the network one-way
//! latency and the CFS knobs (not costs), and instructions of user code (the profiles' own).
//!
//! ## The timer tick (`jitter.tick_hz`, `jitter.tick_ns`)
//! Every core that is not in its idle loop takes the scheduler tick `tick_hz` times a second
//! (Linux `CONFIG_HZ`; `NO_HZ_IDLE`, the distributions' default, stops it on idle cores). The
//! handler (`tick_sched_timer`: jiffies, `update_process_times`, `scheduler_tick`, RCU and timer
//! softirq checks) is an interrupt item of `tick_ns` that pauses whatever the core runs — a
//! spinning poller included. Ticks on all cores are aligned to the same instants (`skew_tick=0`,
//! the default), at multiples of the period from t = 0. Worked example (arm8: 250 Hz, 2 µs): a
//! polled QD1 job whose I/O takes ≈ 20 µs finds a tick inside ≈ 20 µs / 4 ms = 0.5 % of its
//! I/Os; those take 2 µs longer: the p99.9 and p99.99 grow by about the handler's cost while
//! the mean moves by ≈ 0.5 % × 2 µs = 0.01 µs.
//!
//! The tick is not the scheduler's only preemption point here: slices expire exactly (as with
//! `HRTICK`), so a CPU-bound thread sharing a poller's core preempts it when its slice ends
//! and a waking thread preempts it by the CFS rules of `cpu` — a poller accumulates virtual
//! runtime at full speed and is the usual victim. Ticks stop when the run's duration is over
//! and no I/O is in flight.
//!
//! ## The poll/submission lock (`jitter.poll_lock`)
//! Up to Linux 4.20 the NVMe driver had one spinlock per queue (`nvmeq->q_lock`) taken by both
//! `nvme_queue_rq` (writing the SQ entry and the doorbell) and `nvme_poll` (walking the CQ).
//! With `poll_lock = "shared"` a poll queue's submitters and its poller serialize on it: the
//! submitter holds it for its `queue_rq_ns + doorbell_write_ns`; a spinning poller holds it
//! `poll_lock_hold_ns` of every `poll_iteration_ns` (its CQ walk), from the moment it starts
//! spinning. A submitter that finds it held spins until it is free (category `nvme`); a poller
//! that sees a CQE while a submitter holds it spins until it is free before reaping (category
//! `poll`). `"split"` (the default) is the kernel since 4.20: `sq_lock` and `cq_poll_lock` are
//! different locks and the paths never wait for each other. The lock only matters when a poll
//! queue serves more than one core: `nvme.poll_queues` below `cpu.cores` (Linux's
//! `poll_queues` module parameter) maps cores onto poll queues round-robin.
//!
//! ## What it leaves out
//! Correlation between costs (a cold cache makes the next few paths slow together), the tick's
//! own load balancing and vruntime bookkeeping, `NO_HZ_FULL`, lock hold-time variance, and
//! every other lock of the path (the block layer's tag and scheduler locks).
//!
//! Config keys: `jitter.cost_cv_pct`, `jitter.tick_hz`, `jitter.tick_ns`, `jitter.poll_lock`,
//! `jitter.poll_lock_hold_ns`; `nvme.poll_queues`.

use engine::rng::{exp_ns_of, unit_exp};
use engine::{stream, SimRng};

use crate::config::JitterConfig;

/// A place in the kernel whose per-operation cost is drawn; each has its own random stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostSite {
    Syscall,
    BioSubmit,
    Dispatch,
    Driver,
    Isr,
    Complete,
    PollComplete,
    PageCache,
    Writeback,
    Net,
    ContextSwitch,
    CachePollution,
    TimerIrq,
    Tick,
    Ipi,
    Handoff,
}

/// Every cost site, in stream order.
pub const COST_SITES: [CostSite; 16] = [
    CostSite::Syscall,
    CostSite::BioSubmit,
    CostSite::Dispatch,
    CostSite::Driver,
    CostSite::Isr,
    CostSite::Complete,
    CostSite::PollComplete,
    CostSite::PageCache,
    CostSite::Writeback,
    CostSite::Net,
    CostSite::ContextSwitch,
    CostSite::CachePollution,
    CostSite::TimerIrq,
    CostSite::Tick,
    CostSite::Ipi,
    CostSite::Handoff,
];

impl CostSite {
    /// The site's stream name (`host.cost.<name>`).
    pub const fn name(self) -> &'static str {
        match self {
            CostSite::Syscall => "syscall",
            CostSite::BioSubmit => "bio_submit",
            CostSite::Dispatch => "dispatch",
            CostSite::Driver => "driver",
            CostSite::Isr => "isr",
            CostSite::Complete => "complete",
            CostSite::PollComplete => "poll_complete",
            CostSite::PageCache => "pagecache",
            CostSite::Writeback => "writeback",
            CostSite::Net => "net",
            CostSite::ContextSwitch => "context_switch",
            CostSite::CachePollution => "cache_pollution",
            CostSite::TimerIrq => "timer_irq",
            CostSite::Tick => "tick",
            CostSite::Ipi => "ipi",
            CostSite::Handoff => "completion_handoff",
        }
    }
}

/// Draws of one site taken from its stream ahead of use ([`DRAWS_AHEAD`] at a time).
#[derive(Clone, Debug)]
struct SiteDraws {
    rng: SimRng,
    /// `unit_exp` draws, used from `next` on (all used when `next` is `DRAWS_AHEAD`).
    ahead: [f64; DRAWS_AHEAD],
    next: usize,
}

/// Unit draws a site takes from its stream at a time. A draw is mostly one `libm::log`, a
/// chain of dependent floating-point steps: drawn one per use, the CPU waits on each chain,
/// where eight drawn in a row are independent and overlap. Each site has its own stream, so
/// drawing ahead changes no value: the k-th cost of a site is its stream's k-th draw either
/// way. (Eight: a few cache lines a site, refilled once per eight operations.)
const DRAWS_AHEAD: usize = 8;

impl SiteDraws {
    fn new(rng: SimRng) -> SiteDraws {
        SiteDraws {
            rng,
            ahead: [0.0; DRAWS_AHEAD],
            next: DRAWS_AHEAD,
        }
    }

    #[inline]
    fn unit(&mut self) -> f64 {
        if self.next == DRAWS_AHEAD {
            self.refill();
        }
        let unit = self.ahead[self.next];
        self.next += 1;
        unit
    }

    #[inline(never)]
    fn refill(&mut self) {
        for unit in &mut self.ahead {
            *unit = unit_exp(&mut self.rng);
        }
        self.next = 0;
    }
}

/// Per-site cost draws (constant costs when the coefficient of variation is 0).
#[derive(Clone, Debug)]
pub struct CostDraws {
    cv_pct: u64,
    sites: Vec<SiteDraws>,
}

impl CostDraws {
    /// Draws for the run seeded `seed` (streams are created only when costs vary).
    pub fn new(seed: u64, cfg: &JitterConfig) -> CostDraws {
        Self::with_cv(seed, cfg.cost_cv_pct)
    }

    /// Draws of coefficient of variation `cv_pct` for the run seeded `seed` (the thin host of
    /// device-level runs has no `JitterConfig`).
    pub fn with_cv(seed: u64, cv_pct: u32) -> CostDraws {
        let cv_pct = u64::from(cv_pct);
        let sites = if cv_pct == 0 {
            Vec::new()
        } else {
            COST_SITES
                .iter()
                .map(|s| SiteDraws::new(stream(seed, &format!("host.cost.{}", s.name()))))
                .collect()
        };
        CostDraws { cv_pct, sites }
    }

    /// Constant costs (no draws).
    pub fn constant() -> CostDraws {
        CostDraws {
            cv_pct: 0,
            sites: Vec::new(),
        }
    }

    /// One operation's cost at `site` whose mean is `mean_ns`: `mean_ns` itself when costs are
    /// constant, else a shifted-exponential draw of that mean (see the essay).
    #[inline]
    pub fn draw(&mut self, site: CostSite, mean_ns: u64) -> u64 {
        if self.cv_pct == 0 || mean_ns == 0 {
            return mean_ns;
        }
        let spread_ns = mean_ns * self.cv_pct / 100;
        // `exp_ns(stream, spread_ns)`, its logarithm taken ahead (`DRAWS_AHEAD`).
        let unit = self.sites[site as usize].unit();
        mean_ns - spread_ns + exp_ns_of(unit, spread_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{HostConfig, PollLock};
    use engine::rng::exp_ns;

    fn jitter(cv_pct: u32) -> JitterConfig {
        JitterConfig {
            cost_cv_pct: cv_pct,
            tick_hz: 0,
            tick_ns: 0,
            poll_lock: PollLock::Split,
            poll_lock_hold_ns: 0,
        }
    }

    #[test]
    fn constant_costs_are_the_mean() {
        let mut d = CostDraws::new(1, &jitter(0));
        assert!((0..100).all(|_| d.draw(CostSite::Isr, 2_500) == 2_500));
        let mut c = CostDraws::constant();
        assert_eq!(c.draw(CostSite::Tick, 7), 7);
    }

    /// Mean kept within 1 %, standard deviation about cv × mean, floor at (1 − cv) × mean, and
    /// the tail past the mean by ln(10^4) × spread at p99.99.
    #[test]
    fn draws_keep_the_mean_and_widen_the_tail() {
        let mut d = CostDraws::new(9, &jitter(20));
        let n = 200_000u64;
        let mut v: Vec<u64> = (0..n).map(|_| d.draw(CostSite::Isr, 2_500)).collect();
        let mean = v.iter().sum::<u64>() / n;
        assert!(
            (2_475..=2_525).contains(&mean),
            "mean {mean} ns, want 2500 ± 1 %"
        );
        let var = v
            .iter()
            .map(|&x| (x as i64 - 2_500).pow(2) as u64)
            .sum::<u64>()
            / n;
        let sd = (var as f64).sqrt();
        assert!((450.0..550.0).contains(&sd), "sd {sd} ns, want ≈ 500");
        v.sort_unstable();
        assert!(v[0] >= 2_000, "floor {}", v[0]);
        let p9999 = v[(n as usize * 9_999) / 10_000];
        // 2000 + 500 × ln(10^4) = 6605.
        assert!((6_000..7_300).contains(&p9999), "p99.99 {p9999} ns");
    }

    /// A site's draws do not depend on how often other sites draw.
    #[test]
    fn sites_draw_from_their_own_streams() {
        let mut a = CostDraws::new(3, &jitter(10));
        let mut b = CostDraws::new(3, &jitter(10));
        let xa: Vec<u64> = (0..50).map(|_| a.draw(CostSite::Driver, 600)).collect();
        let xb: Vec<u64> = (0..50)
            .map(|_| {
                b.draw(CostSite::Syscall, 500);
                b.draw(CostSite::Driver, 600)
            })
            .collect();
        assert_eq!(xa, xb);
        assert!(xa.iter().any(|&x| x != 600), "costs vary at cv 10 %");
    }

    /// A site's k-th cost is the shifted `exp_ns` of its stream's k-th draw, whatever the
    /// means asked for (they change between draws here) and however far ahead it draws.
    #[test]
    fn draws_are_the_site_streams_exp_ns_in_order() {
        let mut d = CostDraws::new(11, &jitter(10));
        let mut isr = stream(11, "host.cost.isr");
        for k in 0..100u64 {
            let mean_ns = 1_000 + 37 * k;
            let spread_ns = mean_ns / 10;
            let want = mean_ns - spread_ns + exp_ns(&mut isr, spread_ns);
            assert_eq!(d.draw(CostSite::Isr, mean_ns), want, "draw {k}");
        }
    }

    /// Costs vary on every preset: a real kernel path does not take one time.
    #[test]
    fn presets_vary_their_costs() {
        for name in crate::config::HOST_PRESETS {
            let h = HostConfig::preset(name).unwrap();
            assert_eq!(h.jitter.cost_cv_pct, crate::config::COST_CV_PCT, "{name}");
            assert!(h.jitter.cost_cv_pct > 0, "{name}");
        }
    }
}
