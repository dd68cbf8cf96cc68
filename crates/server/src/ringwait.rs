//! How a worker on the io_uring socket path waits: how many completions one wait asks the
//! kernel for (`[dataplane] ring_wait = "batch"`), and how long an idle worker spins on the
//! ring's completion queue before it sleeps (`[dataplane] ring_spin = "sized"`).
//!
//! # What it implements
//! The sizing half of two waits, as pure functions of counts and times, so they are tested
//! without a socket; `worker/uring.rs` applies them to the ring.
//!
//! *A wait sized in completions* ([`BatchWait`]). A blocking `io_uring_enter` with
//! `IORING_ENTER_GETEVENTS` and `min_complete = 1` wakes the worker at the first completion: a
//! sleep-and-wake (tens of µs of CPU on a guest) for each. The kernel can wait for more: with
//! `min_complete = n` and a timeout (`IORING_ENTER_EXT_ARG`), and a ring set up with deferred
//! task work, a receive's wake-up only queues task work, and the worker is woken once the
//! queued items reach what the wait still needs (the kernel's lazy wake, Linux 6.5+), or when
//! the timeout ends the wait with what is there. The wait asks for the step's sends (they
//! complete within the enter that submits them: without counting them, the first wait ends at
//! once on its own sends and a second enter waits again) plus one receive for each *active*
//! connection — one that received in this epoch of [`ACTIVE_EPOCH_NS`] or the last, at most
//! the receives in the kernel — and its timeout is [`BATCH_WAIT_MAX_NS`] (never more than
//! `coalesce_ns`, 0 turning it off). With fewer than two active connections the wait asks
//! for one completion, as before: a lone client's next request is the one completion to
//! wait for, and a bound would only add a timer wake when it is slow to come. A wait that
//! ends on its bound with only sends goes on waiting for one completion.
//!
//! Worked example: two fio jobs at queue depth 32 on one worker, whose bursts arrive within a
//! few µs of each other. A step that answered both submits 2 sends and asks for 2 + 2 = 4:
//! the sends are posted within the enter, and the worker sleeps until both sockets have data
//! (20 µs at most), in one `io_uring_enter`, instead of returning on its sends, entering
//! again, waking for the first socket and sleeping again for the second. A lone client at
//! queue depth 1 waits as before.
//!
//! *The kernel's minimum wait* (`ring_wait = "min-wait"`, Linux 6.12's `min_wait_usec` in
//! `io_uring_getevents_arg`; the ring's `IORING_FEAT_MIN_TIMEOUT` says the kernel has it, and
//! without it the wait is `batch`'s). The same count, its bound given to the kernel as the
//! minimum wait and the step's whole timeout as the timeout: the kernel waits up to the bound
//! for the count, then returns at the first completion, up to the timeout, in the same enter
//! — where `batch`'s bound returns empty-handed and the worker's loop enters again. The
//! kernel ends the minimum wait on any completion not yet reaped, the step's own sends among
//! them (posted within the enter that submits them): with sends in it, a wait that reaches
//! its bound returns there as `batch`'s does, and the loop's second wait for one completion
//! stays. So it saves an enter only in a wait with no sends that reaches its bound with
//! nothing — a pipelining client's pause between bursts.
//!
//! What it cannot do: count requests. A multishot (or single-shot) receive queues one task
//! work item per socket wake-up, whatever the number of frames behind it, so the kernel
//! counts connections with data, not requests; the coalescing pause (`coalesce`), which
//! lets one connection's stream build up, stays a timed sleep.
//!
//! *A spin that pays for itself* ([`SpinSizer`]). Before it blocks, an idle worker may spin on
//! the ring — reading the completion queue's tail and the submission queue's task-run flag,
//! no system call — for W. A spin that finds work within W saves one sleep-and-wake, C ns of
//! CPU (measured at start-up on the worker's thread: [`WAKE_COST_SAMPLES`] timed sleeps of
//! [`WAKE_COST_SLEEP_NS`], `CLOCK_THREAD_CPUTIME_ID` around them); one that does not costs W
//! and the sleep anyway. The ski-rental bound says spin W = C: never worse than twice the
//! better choice. The sizer keeps, over recent idle periods, the share p that ended within W
//! and the mean of min(gap, W), and spins while E[min(gap, W)] < p·C (the spin's expected
//! cost below its expected saving), else blocks at once; one idle period in
//! [`EXPLORE_EVERY`] spins anyway so that p is measured again. Spinning is CPU of the
//! worker's thread and counts as server CPU.
//!
//! Worked example: C = 30 µs. A client whose next request comes 8 µs after each reply
//! (p = 1, E = 8 µs): 8 < 30, spin — each period costs 8 µs instead of 30. A QD1 client
//! whose next request comes after 60 µs (p = 0, E = 30 µs): block at once, spinning only one
//! period in [`EXPLORE_EVERY`].
//!
//! # What it leaves out
//! Sends that post no completion (a send's byte count is what frees its output, so each must
//! post one), which would let the minimum wait go on past a step that sent. Per-connection
//! arrival models.
//!
//! # Config keys
//! `[dataplane] ring_wait` (`first` | `batch` | `min-wait`), `ring_spin` (`fixed` | `sized`),
//! `coalesce_ns` (bounds the batch wait).

/// Weight of a new sample in the averages: 1/8, so they follow a change within ~10 wakes.
pub const EWMA_WEIGHT: u64 = 8;
/// The longest a batch wait holds completions that are already there: half the coalescing
/// ladder's first rung (its probe, `coalesce::MIN_WINDOW_NS` / 2), a pause the coalescer
/// already accepts for a pipelining client; a QD1 request whose wait asked for more than
/// came is at most this late.
pub const BATCH_WAIT_MAX_NS: u64 = crate::coalesce::MIN_WINDOW_NS / 2;
/// How long a connection counts as active after a receive: an epoch of 200 µs and the next,
/// several batches of a pipelining client (a batch every 40-160 µs under coalescing) and a few
/// round trips of a QD1 one, while a connection that went quiet stops counting within 400 µs.
pub const ACTIVE_EPOCH_NS: u64 = 200_000;
/// Most completions one wait asks for: a step's batch budget (`MAX_BATCH_LIMIT`), past which
/// a bigger batch is taken over several steps anyway.
pub const MAX_WANT: usize = crate::config::MAX_BATCH_LIMIT;
/// Timed sleeps the start-up measurement of a sleep-and-wake takes: enough to average out a
/// preemption or two (at [`WAKE_COST_SLEEP_NS`] each, ~2 ms per worker).
pub const WAKE_COST_SAMPLES: u32 = 32;
/// Length of each measured sleep: the coalescing ladder's first rung, a sleep the worker
/// takes under load.
pub const WAKE_COST_SLEEP_NS: u64 = crate::coalesce::MIN_WINDOW_NS;
/// The sleep-and-wake cost assumed until measured (and where the thread's CPU clock is
/// refused): the 31-35 µs of CPU a guest under nested virtualization charges (issue 9's note).
pub const DEFAULT_WAKE_COST_NS: u64 = 30_000;
/// The longest spin: a measured wake cost above it (a preempted measurement) is capped, so a
/// wrong measurement wastes at most this per idle period.
pub const MAX_SPIN_NS: u64 = 100_000;
/// One idle period in this many spins W whatever the averages say, so p is measured again
/// (a worker that stopped spinning would never see its gaps shrink).
pub const EXPLORE_EVERY: u64 = 8;

/// An exponentially weighted average in milli-units.
#[derive(Debug, Clone, Copy, Default)]
struct Avg {
    milli: u64,
    samples: u64,
}

impl Avg {
    fn add_milli(&mut self, sample_milli: u64) {
        self.milli = if self.samples == 0 {
            sample_milli
        } else {
            (self.milli * (EWMA_WEIGHT - 1) + sample_milli) / EWMA_WEIGHT
        };
        self.samples += 1;
    }
}

/// The connection count the batch wait expects, from when each connection last received.
#[derive(Debug, Clone)]
pub struct BatchWait {
    bound_ns: u64,
    /// The current epoch ([`epoch_of`]) and the connections that received in it and in the
    /// one before.
    epoch: u64,
    this_epoch: usize,
    last_epoch: usize,
}

/// The epoch of `now_ns`: connections count as active for the epoch they received in and the
/// next.
pub fn epoch_of(now_ns: u64) -> u64 {
    now_ns / ACTIVE_EPOCH_NS
}

/// A connection's epoch before its first receive.
pub const NO_EPOCH: u64 = u64::MAX;

impl BatchWait {
    /// A batch wait bounded by `coalesce_ns` (the config's longest pause; 0: off, every wait
    /// asks for one completion).
    pub fn new(coalesce_ns: u64) -> BatchWait {
        BatchWait {
            bound_ns: coalesce_ns.min(BATCH_WAIT_MAX_NS),
            epoch: 0,
            this_epoch: 0,
            last_epoch: 0,
        }
    }

    fn roll(&mut self, now_ns: u64) {
        let e = epoch_of(now_ns);
        if e != self.epoch {
            self.last_epoch = if e == self.epoch + 1 {
                self.this_epoch
            } else {
                0
            };
            self.this_epoch = 0;
            self.epoch = e;
        }
    }

    /// A receive of a connection completed with bytes at `now_ns`; `conn_epoch` is the epoch
    /// of its last one ([`NO_EPOCH`] at first), updated here.
    pub fn note_recv(&mut self, now_ns: u64, conn_epoch: &mut u64) {
        self.roll(now_ns);
        if *conn_epoch != self.epoch {
            *conn_epoch = self.epoch;
            self.this_epoch += 1;
        }
    }

    /// Connections that received in this epoch or the last (the larger count).
    pub fn active(&mut self, now_ns: u64) -> usize {
        self.roll(now_ns);
        self.this_epoch.max(self.last_epoch)
    }

    /// What a blocking wait at `now_ns` that may last `timeout_ns` asks the kernel for, and
    /// its bound in ns: the `queued_sends` it submits plus the active connections (at most the
    /// `armed_recvs`); (1, the whole timeout) when the batch wait is off or fewer than two
    /// connections are active (a lone client's next request is one completion: nothing to
    /// batch, and a bound would only add a timer wake when it is slow to come).
    pub fn want(
        &mut self,
        now_ns: u64,
        queued_sends: usize,
        armed_recvs: usize,
        timeout_ns: u64,
    ) -> (usize, u64) {
        let expected = self.active(now_ns).min(armed_recvs);
        if self.bound_ns == 0 || expected < 2 {
            return (1, timeout_ns);
        }
        (
            (queued_sends + expected).min(MAX_WANT),
            timeout_ns.min(self.bound_ns),
        )
    }
}

/// How long an idle worker spins on its ring before it blocks (`ring_spin = "sized"`).
#[derive(Debug, Clone)]
pub struct SpinSizer {
    wake_cost_ns: u64,
    /// Share of idle periods whose work came within the spin, milli.
    hit: Avg,
    /// Mean of min(gap, spin), ns (in milli-ns).
    spent: Avg,
    periods: u64,
}

impl Default for SpinSizer {
    fn default() -> Self {
        Self::new(DEFAULT_WAKE_COST_NS)
    }
}

impl SpinSizer {
    /// A sizer for a machine whose sleep-and-wake costs `wake_cost_ns` of the thread's CPU.
    pub fn new(wake_cost_ns: u64) -> SpinSizer {
        SpinSizer {
            wake_cost_ns: wake_cost_ns.clamp(1, MAX_SPIN_NS),
            hit: Avg::default(),
            spent: Avg::default(),
            periods: 0,
        }
    }

    /// The longest spin W: the wake cost (ski rental), capped at [`MAX_SPIN_NS`].
    pub fn max_spin_ns(&self) -> u64 {
        self.wake_cost_ns
    }

    /// How long the next idle period spins before it blocks, ns (0: block at once). Counts
    /// the period (every [`EXPLORE_EVERY`]th spins W).
    pub fn next_spin_ns(&mut self) -> u64 {
        self.periods += 1;
        if self.hit.samples == 0 || self.periods.is_multiple_of(EXPLORE_EVERY) || self.pays() {
            self.wake_cost_ns
        } else {
            0
        }
    }

    /// Whether spinning W pays on the averages: E[min(gap, W)] < p·C.
    pub fn pays(&self) -> bool {
        // Both sides in milli-ns: spent.milli is the mean in milli-ns, hit.milli the share in
        // thousandths.
        self.spent.milli < self.hit.milli * self.wake_cost_ns
    }

    /// Records an idle period whose work came `gap_ns` after it began (`None`: it blocked
    /// before any came, or never saw any: a miss).
    pub fn observe(&mut self, gap_ns: Option<u64>) {
        let w = self.wake_cost_ns;
        match gap_ns {
            Some(gap) if gap <= w => {
                self.hit.add_milli(1_000);
                self.spent.add_milli(gap * 1_000);
            }
            _ => {
                self.hit.add_milli(0);
                self.spent.add_milli(w * 1_000);
            }
        }
    }
}

/// The CPU one sleep-and-wake costs from the CPU time `cpu_ns` that `sleeps` timed sleeps of
/// `sleep_ns` each took on the sleeping thread ([`DEFAULT_WAKE_COST_NS`] when nothing was
/// measured).
pub fn wake_cost_ns(cpu_ns: u64, sleeps: u32) -> u64 {
    if sleeps == 0 || cpu_ns == 0 {
        return DEFAULT_WAKE_COST_NS;
    }
    (cpu_ns / u64::from(sleeps)).clamp(1, MAX_SPIN_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection receiving at `t` (µs), with its epoch.
    fn recv(w: &mut BatchWait, t_us: u64, conn_epoch: &mut u64) {
        w.note_recv(t_us * 1_000, conn_epoch);
    }

    #[test]
    fn a_lone_client_waits_for_its_first_completion_as_before() {
        let mut w = BatchWait::new(160_000);
        let mut e = NO_EPOCH;
        for t in 0..100 {
            recv(&mut w, t * 30, &mut e);
        }
        assert_eq!(w.active(3_000_000), 1);
        assert_eq!(w.want(3_000_000, 1, 1, 1_000_000), (1, 1_000_000));
    }

    #[test]
    fn active_connections_size_the_wait_and_its_bound() {
        let mut w = BatchWait::new(160_000);
        let mut epochs = [NO_EPOCH; 4];
        // Four connections receive every 50 µs for 1 ms.
        for t in (0..1_000).step_by(50) {
            for e in epochs.iter_mut() {
                recv(&mut w, t, e);
            }
        }
        let now = 1_000_000;
        assert_eq!(w.active(now), 4);
        // Four sends this step: the wait asks for them and a receive of each.
        assert_eq!(w.want(now, 4, 4, 1_000_000), (8, BATCH_WAIT_MAX_NS));
        // No more than the receives in the kernel.
        assert_eq!(w.want(now, 4, 3, 1_000_000), (7, BATCH_WAIT_MAX_NS));
        // A step timeout shorter than the bound bounds it.
        assert_eq!(w.want(now, 0, 4, 5_000).1, 5_000);
        assert!(w.want(now, 500, 4, 1_000_000).0 <= MAX_WANT);
        // Two epochs of silence: nobody is active, the wait is for one completion again.
        let later = now + 2 * ACTIVE_EPOCH_NS;
        assert_eq!(w.active(later), 0);
        assert_eq!(w.want(later, 4, 4, 1_000_000), (1, 1_000_000));
    }

    #[test]
    fn a_connection_counts_once_per_epoch() {
        let mut w = BatchWait::new(160_000);
        let (mut a, mut b) = (NO_EPOCH, NO_EPOCH);
        for t in 0..50 {
            recv(&mut w, t, &mut a);
        }
        assert_eq!(w.active(50_000), 1);
        recv(&mut w, 60, &mut b);
        assert_eq!(w.active(60_000), 2);
        // The next epoch still remembers both; the one after forgets those that went quiet.
        let next = ACTIVE_EPOCH_NS + 10_000;
        recv(&mut w, next / 1_000, &mut a);
        assert_eq!(w.active(next), 2);
        let after = 2 * ACTIVE_EPOCH_NS + 10_000;
        recv(&mut w, after / 1_000, &mut a);
        assert_eq!(w.active(after), 1);
    }

    #[test]
    fn coalescing_off_turns_the_batch_wait_off() {
        let mut w = BatchWait::new(0);
        let mut epochs = [NO_EPOCH; 4];
        for e in epochs.iter_mut() {
            recv(&mut w, 10, e);
        }
        assert_eq!(w.want(20_000, 4, 4, 1_000_000), (1, 1_000_000));
        // A short coalescing maximum bounds the wait.
        let mut w = BatchWait::new(10_000);
        for e in epochs.iter_mut() {
            *e = NO_EPOCH;
            recv(&mut w, 10, e);
        }
        assert_eq!(w.want(20_000, 3, 4, 1_000_000), (7, 10_000));
    }

    #[test]
    fn gaps_shorter_than_a_wake_are_spun_longer_ones_blocked() {
        // Work 8 µs after each idle start against a 30 µs wake: spin.
        let mut s = SpinSizer::new(30_000);
        for _ in 0..50 {
            let _ = s.next_spin_ns();
            s.observe(Some(8_000));
        }
        assert!(s.pays());
        assert_eq!(s.next_spin_ns(), 30_000);
        // Work 60 µs later: every spin misses; block but for one period in EXPLORE_EVERY.
        let mut s = SpinSizer::new(30_000);
        let mut spun = 0;
        for _ in 0..800 {
            if s.next_spin_ns() > 0 {
                spun += 1;
                s.observe(None);
            }
        }
        assert!(!s.pays());
        assert!(
            (800 / EXPLORE_EVERY..=800 / EXPLORE_EVERY + 2).contains(&spun),
            "spun {spun} of 800 periods"
        );
    }

    #[test]
    fn a_spin_pays_only_while_its_expected_cost_is_under_its_expected_saving() {
        // Half the gaps 25 µs, half misses, wake 30 µs: E[min] = 27.5 µs, p·C = 15 µs: block.
        let mut s = SpinSizer::new(30_000);
        for k in 0..200 {
            s.observe(if k % 2 == 0 { Some(25_000) } else { None });
        }
        assert!(!s.pays());
        // Nine in ten at 2 µs: E[min] ≈ 4.8 µs, p·C = 27 µs: spin.
        let mut s = SpinSizer::new(30_000);
        for k in 0..200 {
            s.observe(if k % 10 == 0 { None } else { Some(2_000) });
        }
        assert!(s.pays());
    }

    #[test]
    fn the_wake_cost_is_the_mean_of_the_measured_sleeps_capped() {
        assert_eq!(wake_cost_ns(32 * 25_000, 32), 25_000);
        assert_eq!(wake_cost_ns(0, 32), DEFAULT_WAKE_COST_NS);
        assert_eq!(wake_cost_ns(5_000, 0), DEFAULT_WAKE_COST_NS);
        assert_eq!(wake_cost_ns(32 * 900_000, 32), MAX_SPIN_NS);
        assert_eq!(SpinSizer::new(10_000_000).max_spin_ns(), MAX_SPIN_NS);
    }
}
