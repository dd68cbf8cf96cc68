//! Adaptive request coalescing: under pipelined load, wait a moment before reading sockets
//! again so the next step reads, answers and sends a batch instead of one request — and only
//! as long as waiting actually buys a bigger batch.
//!
//! # What it models
//! A NIC's adaptive interrupt moderation (Linux `ethtool -C adaptive-rx`, NAPI's switch from
//! interrupts to polling): at a low packet rate every packet raises an interrupt at once (lowest
//! latency); at a high rate the device holds interrupts for a few microseconds so one interrupt
//! covers many packets, and the holding time follows the rate. A worker step has the same
//! shape: its fixed cost — waking up, `epoll_wait`, one `read` per connection, one `writev` per
//! connection, and in the kernel one TCP segment with its ACK per `writev` — is paid per step,
//! not per request. A pipelining client whose requests each find a step of their own pays it
//! once per request: with a fixed cost of 12 µs a step and 1.5 µs per request (the step time
//! of the worked example below, and [`TARGET_BATCH`]'s cost per request), a step of one
//! request is 89 % fixed cost, a step of 16 is 33 %. A pause is not free either: a sleep that ends on a timer costs the sleeping thread CPU
//! whatever its length, so a pause must gather several requests to pay for itself. What a
//! sleep costs is the machine's, not the server's (going idle and back is dear on a guest
//! under nested virtualization); `cargo run --release -p server --example nbd_cpu_efficiency`
//! measures it on the machine at hand and prints the bound it puts on I/Os per CPU-second
//! (past runs' figures: CHANGELOG.md).
//!
//! # The rule
//! *Whether to pause at all.* The worker keeps an exponentially weighted moving average of the
//! requests each busy step took in (weight 1/[`EWMA_WEIGHT`]). Below
//! [`ACTIVATE_BATCH_MILLI`] / 1000 requests per step — a client at queue depth 1 never has a
//! second request outstanding, so every step takes exactly one — the worker never pauses, and
//! QD1 latency is untouched.
//!
//! *How long.* The pause takes one of a ladder of lengths: `coalesce_ns` (the config's longest
//! pause), its half, its quarter … down to [`MIN_WINDOW_NS`]. The worker climbs the ladder by
//! measuring what a pause buys: one pause in [`PROBE_EVERY`] is a *probe* one rung lower (no
//! pause at all on the first rung, half its pause), and the batches that follow full pauses
//! and probes are averaged apart. After [`DECIDE_AFTER_STEPS`] steps on a rung:
//! - if a full pause does not take in at least [`PRODUCTIVE_GAIN_MILLI`] / 1000 times the
//!   requests the probe's half pause took, the extra wait bought nothing — the clients are
//!   closed loops whose few outstanding requests are all already here — and the worker steps
//!   down a rung (from the first rung: back to no pause), and does not climb again for
//!   [`COOLDOWN_STEPS`] steps;
//! - except on the first rung when its pause still pays: a batch of at least
//!   [`KEEP_BATCH`] that is [`PRODUCTIVE_GAIN_MILLI`] / 1000 times what unpaused steps took
//!   (their own average, measured on rung 0). The probe there is half the first rung, not "no
//!   pause", so "40 µs buys little over 20 µs" says nothing about "40 µs buys little over
//!   none". A client that answers a burst of replies with a burst of requests fills most of
//!   its batch in the first 20 µs, so its full pauses gain little over their probes (under
//!   1.3×) while either takes several times what an unpaused step does (fio's nbd engine at
//!   iodepth 32: CHANGELOG.md); the probe rule alone would send the worker back to no pause,
//!   to take a few requests a step for each [`COOLDOWN_STEPS`] cooldown. A pause kept on these
//!   grounds [`REMEASURE_AFTER`] decisions in a row goes back to rung 0 for
//!   [`DECIDE_AFTER_STEPS`] unpaused steps, so the baseline follows the load (~3 % of the
//!   steps);
//! - else, if the batch is still below [`TARGET_BATCH`] and the pause gained over its probe,
//!   it climbs a rung.
//!
//! Worked example (`coalesce_ns` 160 µs; rungs 40, 80, 160 µs; a step itself takes ~12 µs).
//! fio iodepth 32 at ~130 K IOPS: its requests arrive at ~0.13 per µs, so a step after a
//! 20 µs probe takes ~4.2 requests, one after a 40 µs pause ~6.8 (gain 1.6×: climb), 80 µs ~12
//! against ~6.8 (1.8×, still under 16: climb), 160 µs ~22 against ~12: productive, over 16,
//! stay. A pipelining client at iodepth 2 has at most two requests outstanding: 40 µs takes 2
//! as 20 µs does (1×): step down to no pause, where it stays but for one 32-step trial per
//! cooldown. An iodepth-8 client climbs to 80 µs (8 against ~6.5, just productive) and comes
//! back from 160 µs (8 against 8).
//!
//! # What it leaves out
//! Per-connection moderation (the pause is per worker); a pause ended by data (each socket's
//! `SO_RCVLOWAT` set to a batch was tried and not kept: a starved fio never reaches the mark).
//!
//! # Config keys
//! `[dataplane] coalesce_ns` (the longest pause; 0: off).

/// Weight of a new sample in the averages: 1/8, so they follow a change within ~10 steps.
pub const EWMA_WEIGHT: u64 = 8;
/// The average batch (milli-requests per busy step) at or above which the worker may pause:
/// 1.25 requests — a QD1 client gives exactly 1.0, a pipelining one more.
pub const ACTIVATE_BATCH_MILLI: u64 = 1_250;
/// The shortest pause (the ladder's first rung): ~5 requests' worth at fio's ~130 K IOPS (the
/// worked example above), a batch that pays for a timer sleep of the order of 20 µs.
pub const MIN_WINDOW_NS: u64 = 40_000;
/// One pause in this many is a probe one rung lower.
pub const PROBE_EVERY: u64 = 4;
/// Steps spent on a rung before the worker decides to climb, stay or step down (with
/// [`PROBE_EVERY`] 4: 8 probes and 24 full pauses).
pub const DECIDE_AFTER_STEPS: u64 = 32;
/// A full pause must take in this many milli-times the requests its probe took to count as
/// productive. A pause that gathers arrivals at a steady rate r takes r·(w + s) requests, s the
/// step's own time (~12 µs in the worked example), so doubling w multiplies the batch by
/// (2w + s)/(w + s): 1.6× from 20 to 40 µs, 1.8× from 40 to 80; one whose batch is capped by
/// the clients' queue depth gains ~1× (an iodepth-8 client from 40 to 80 µs: 8 against ~6.8,
/// 1.2×). 1.3× sits between, with room for s up to ~40 µs on a loaded machine.
pub const PRODUCTIVE_GAIN_MILLI: u64 = 1_300;
/// The batch a pause aims for: a step that takes n requests costs F + 1.5·n µs, F its fixed
/// cost (the timer sleep plus the system calls), so F is under half of it once n > F / 1.5:
/// 16 requests cover F up to 24 µs. The sleep's cost is the machine's (`nbd_cpu_efficiency`
/// prints it); where it is dearer the rule would ask for more, but fio at iodepth 32, the load
/// the ladder is for, gathers about 16 requests a sleep whatever the pause (it has no more
/// outstanding at the server; a target of 32 with longer pauses was tried: CHANGELOG.md), so
/// 16 stays.
pub const TARGET_BATCH: u64 = 16;
/// After stepping down, steps before the worker may climb again (at ~20 K steps/s, ~50 ms).
pub const COOLDOWN_STEPS: u64 = 1_024;
/// The first rung's pause is kept, whatever its probe took, while it takes in at least this
/// many requests and [`PRODUCTIVE_GAIN_MILLI`] / 1000 times the unpaused batch: half of
/// [`TARGET_BATCH`], where the step's fixed cost is already under two thirds of the total.
/// A closed loop of depth ≤ 7 can never reach it, so such clients still get no pause.
pub const KEEP_BATCH: u64 = TARGET_BATCH / 2;
/// Decisions in a row that keep the first rung only on [`KEEP_BATCH`]'s grounds before the
/// unpaused batch is measured again (with [`DECIDE_AFTER_STEPS`] 32: every ~1,000 steps).
pub const REMEASURE_AFTER: u32 = 32;

/// What preceded the step being observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    None,
    Full,
    Probe,
}

/// An exponentially weighted average in milli-units, with its sample count.
#[derive(Debug, Clone, Copy, Default)]
struct Avg {
    milli: u64,
    samples: u64,
}

impl Avg {
    fn add(&mut self, value: u64) {
        let sample = value.saturating_mul(1_000);
        self.milli = if self.samples == 0 {
            sample
        } else {
            (self.milli * (EWMA_WEIGHT - 1) + sample).div_ceil(EWMA_WEIGHT)
        };
        self.samples += 1;
    }
}

/// A worker's coalescing state.
#[derive(Debug, Clone)]
pub struct Coalescer {
    max_window_ns: u64,
    /// The activation average over every busy step.
    avg_batch_milli: u64,
    /// 0: no pause; n ≥ 1: pauses of [`Coalescer::window_of`]`(n)`.
    rung: u32,
    /// Batches of steps that followed no pause.
    unpaused: Avg,
    /// What `unpaused` was when the worker last left rung 0.
    unpaused_milli: u64,
    /// Decisions in a row that kept the first rung only because its batch pays.
    kept_for_batch: u32,
    /// Steps observed on this rung.
    steps_on_rung: u64,
    full: Avg,
    probe: Avg,
    /// What the next observed step followed.
    pending: Pause,
    cooldown: u64,
}

impl Coalescer {
    /// `max_window_ns` = 0 turns coalescing off.
    pub fn new(max_window_ns: u64) -> Coalescer {
        Coalescer {
            max_window_ns,
            avg_batch_milli: 1_000,
            rung: 0,
            unpaused: Avg::default(),
            unpaused_milli: 1_000,
            kept_for_batch: 0,
            steps_on_rung: 0,
            full: Avg::default(),
            probe: Avg::default(),
            pending: Pause::None,
            cooldown: 0,
        }
    }

    /// The number of rungs: the top one is `max_window_ns`, each lower one half the one above,
    /// down to [`MIN_WINDOW_NS`] (one rung when the maximum is below it).
    fn rungs(&self) -> u32 {
        let mut rungs = 1;
        while self.max_window_ns >> rungs >= MIN_WINDOW_NS {
            rungs += 1;
        }
        rungs
    }

    /// The pause of rung `rung` (1 ..= [`Coalescer::rungs`]), ns.
    fn window_of(&self, rung: u32) -> u64 {
        debug_assert!((1..=self.rungs()).contains(&rung));
        self.max_window_ns >> (self.rungs() - rung)
    }

    /// Whether rung `rung` is the top one (its pause is the configured maximum).
    fn is_top(&self, rung: u32) -> bool {
        rung >= self.rungs()
    }

    fn enter_rung(&mut self, rung: u32) {
        self.rung = rung;
        self.steps_on_rung = 0;
        self.full = Avg::default();
        self.probe = Avg::default();
    }

    /// Records a step that took in `taken` requests (call only for steps that took some).
    pub fn observe(&mut self, taken: usize) {
        debug_assert!(taken > 0);
        let taken = taken as u64;
        // avg += (sample − avg) / weight, in integers.
        self.avg_batch_milli =
            (self.avg_batch_milli * (EWMA_WEIGHT - 1) + taken * 1_000).div_ceil(EWMA_WEIGHT);
        self.cooldown = self.cooldown.saturating_sub(1);
        let pause = std::mem::replace(&mut self.pending, Pause::None);
        if self.max_window_ns == 0 {
            return;
        }
        if pause == Pause::None {
            self.unpaused.add(taken);
        }
        if self.avg_batch_milli < ACTIVATE_BATCH_MILLI {
            // Not pipelining (any more): no pause, and climb from the bottom next time.
            if self.rung != 0 {
                self.enter_rung(0);
            }
            return;
        }
        if self.rung == 0 {
            if self.cooldown == 0 {
                self.unpaused_milli = self.unpaused.milli;
                self.kept_for_batch = 0;
                self.enter_rung(1);
            }
            return;
        }
        match pause {
            Pause::Full => self.full.add(taken),
            Pause::Probe => self.probe.add(taken),
            Pause::None => {}
        }
        self.steps_on_rung += 1;
        if self.steps_on_rung >= DECIDE_AFTER_STEPS
            && self.full.samples > 0
            && self.probe.samples > 0
        {
            self.decide();
        }
    }

    /// Climb, stay or step down, from what the pauses on this rung bought.
    fn decide(&mut self) {
        let gains = self.full.milli * 1_000 >= self.probe.milli * PRODUCTIVE_GAIN_MILLI;
        let first_rung_pays = self.rung == 1
            && self.full.milli >= KEEP_BATCH * 1_000
            && self.full.milli * 1_000 >= self.unpaused_milli * PRODUCTIVE_GAIN_MILLI;
        self.kept_for_batch = if gains { 0 } else { self.kept_for_batch + 1 };
        if !gains && !first_rung_pays {
            self.cooldown = COOLDOWN_STEPS;
            self.enter_rung(self.rung - 1);
        } else if self.kept_for_batch >= REMEASURE_AFTER {
            // Measure the unpaused batch afresh before keeping the pause longer.
            self.unpaused = Avg::default();
            self.cooldown = DECIDE_AFTER_STEPS;
            self.enter_rung(0);
        } else if gains
            && self.full.milli < TARGET_BATCH * 1_000
            && !self.is_top(self.rung)
            && self.cooldown == 0
        {
            self.enter_rung(self.rung + 1);
        } else {
            // Stay, with fresh averages (the load may change).
            let rung = self.rung;
            self.enter_rung(rung);
        }
    }

    /// After a step that took requests and ended at `step_end_ns`: the time to sleep until
    /// before reading sockets again, or None to go on at once.
    pub fn hold_until(&mut self, step_end_ns: u64) -> Option<u64> {
        if self.max_window_ns == 0 || self.rung == 0 {
            self.pending = Pause::None;
            return None;
        }
        let probe = self.steps_on_rung % PROBE_EVERY == PROBE_EVERY - 1;
        let window = if probe {
            self.pending = Pause::Probe;
            self.probe_window_ns()
        } else {
            self.pending = Pause::Full;
            self.window_of(self.rung)
        };
        Some(step_end_ns.saturating_add(window))
    }

    /// The probe's pause: the rung below, or half the first rung on the first (a probe without
    /// any pause would follow a paused step's burst of replies, and its batch would be
    /// inflated by the requests those replies bring straight back).
    fn probe_window_ns(&self) -> u64 {
        if self.rung > 1 {
            self.window_of(self.rung - 1)
        } else {
            self.window_of(1) / 2
        }
    }

    /// Whether the worker pauses between steps now.
    pub fn active(&self) -> bool {
        self.max_window_ns > 0 && self.rung > 0
    }

    /// The current full pause, ns (0: none).
    pub fn window_ns(&self) -> u64 {
        if self.rung == 0 {
            0
        } else {
            self.window_of(self.rung)
        }
    }

    /// The average batch, in milli-requests per busy step (for tests and diagnostics).
    pub fn avg_batch_milli(&self) -> u64 {
        self.avg_batch_milli
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client model: requests arrive at `per_us_milli` thousandths per µs, with at most
    /// `depth` outstanding (a closed loop of that depth; arrivals past it are not sent); a step
    /// itself lasts [`STEP_NS`].
    struct Client {
        per_us_milli: u64,
        depth: u64,
        arrived_milli: u64,
    }

    const STEP_NS: u64 = 12_000;

    impl Client {
        fn new(per_us_milli: u64, depth: u64) -> Client {
            Client {
                per_us_milli,
                depth,
                arrived_milli: 0,
            }
        }

        /// What the step after `elapsed_ns` (pause + step) takes in.
        fn batch(&mut self, elapsed_ns: u64) -> usize {
            self.arrived_milli += elapsed_ns / 1_000 * self.per_us_milli;
            let taken = (self.arrived_milli / 1_000).min(self.depth);
            if taken == self.depth {
                self.arrived_milli = 0;
            } else {
                self.arrived_milli -= taken * 1_000;
            }
            taken.max(1) as usize
        }
    }

    /// Drives a coalescer `steps` steps against `client`; returns it and the mean pause over
    /// the last half of the steps, ns.
    fn drive(max_ns: u64, steps: u64, mut client: Client) -> (Coalescer, u64) {
        let mut c = Coalescer::new(max_ns);
        let mut now = 0u64;
        let mut pause = 0u64;
        let mut late_pause_sum = 0u64;
        for step in 0..steps {
            c.observe(client.batch(pause + STEP_NS));
            now += STEP_NS;
            pause = match c.hold_until(now) {
                Some(until) => until - now,
                None => 0,
            };
            if step >= steps / 2 {
                late_pause_sum += pause;
            }
            now += pause;
        }
        (c, late_pause_sum / (steps - steps / 2))
    }

    /// Drives a coalescer `steps` steps against a client whose batch depends only on what
    /// preceded the step: `none` after no pause, `probe` after a probe, `full` after a full
    /// pause. Returns the share of the last half's steps that were paused.
    fn drive_scripted(steps: u64, none: usize, probe: usize, full: usize) -> f64 {
        let mut c = Coalescer::new(160_000);
        let mut batch = none;
        let mut paused = 0u64;
        for step in 0..steps {
            c.observe(batch);
            let window = c.window_ns();
            batch = match c.hold_until(0) {
                None => none,
                Some(pause) if pause == window => full,
                Some(_) => probe,
            };
            if step >= steps / 2 && batch != none {
                paused += 1;
            }
        }
        paused as f64 / (steps - steps / 2) as f64
    }

    #[test]
    fn a_first_rung_that_gathers_a_burst_is_kept_though_its_probe_gathers_most_of_it() {
        // A client that answers a burst of replies with a burst of requests: ~3 requests a
        // step unpaused, 12 after the 20 µs probe, 14 after the 40 µs pause (gain 1.17 over
        // the probe: under 1.3). It pauses but for the unpaused steps that measure the
        // baseline again (~3 %).
        let paused = drive_scripted(20_000, 3, 12, 14);
        assert!(paused > 0.95, "paused {:.1} % of steps", paused * 100.0);
        // A batch under KEEP_BATCH is not kept on that ground: a closed loop of depth 4.
        let paused = drive_scripted(20_000, 2, 4, 4);
        assert!(
            paused < 0.05,
            "depth 4 paused {:.1} % of steps",
            paused * 100.0
        );
        // Nor one that unpaused steps already take: every request is already there.
        let paused = drive_scripted(20_000, 30, 31, 32);
        assert!(paused < 0.05, "paused {:.1} % of steps", paused * 100.0);
    }

    #[test]
    fn queue_depth_one_is_never_held() {
        let (c, mean_pause) = drive(160_000, 5_000, Client::new(130, 1));
        assert!(!c.active());
        assert_eq!(mean_pause, 0);
        assert_eq!(c.avg_batch_milli(), 1_000);
    }

    #[test]
    fn a_steady_stream_climbs_until_the_batch_reaches_its_target() {
        // fio iodepth 32 at ~130 K IOPS: 0.13 requests per µs.
        let (c, _) = drive(160_000, 20_000, Client::new(130, 32));
        assert!(c.active());
        assert_eq!(
            c.window_ns(),
            160_000,
            "80 µs gives ~12 requests (< 16): climb to 160"
        );
        // A faster stream stops lower: 0.4 per µs passes 16 on the first rung, 40 µs.
        let (c, _) = drive(160_000, 20_000, Client::new(400, 64));
        assert_eq!(c.window_ns(), 40_000);
    }

    #[test]
    fn closed_loops_whose_requests_are_all_here_get_no_longer_pause() {
        // Iodepth 2: a pause cannot take more than the two outstanding requests; the worker
        // only re-tries a pause after each cooldown.
        let (_, mean_pause) = drive(160_000, 50_000, Client::new(130, 2));
        assert!(
            mean_pause < 2_000,
            "an iodepth-2 client paused {mean_pause} ns per step"
        );
        // Iodepth 8: its 8 requests are all in by 80 µs, so it never settles on the top rung.
        let (_, mean_pause) = drive(160_000, 50_000, Client::new(130, 8));
        assert!(
            (20_000..100_000).contains(&mean_pause),
            "an iodepth-8 client paused {mean_pause} ns per step"
        );
    }

    #[test]
    fn the_configured_maximum_caps_the_ladder() {
        let (c, _) = drive(50_000, 20_000, Client::new(130, 64));
        assert_eq!(c.window_ns(), 50_000, "one rung: 50 µs");
        let (c, _) = drive(4_000, 20_000, Client::new(1_000, 64));
        assert!(c.window_ns() <= 4_000);
    }

    #[test]
    fn zero_window_is_off() {
        let mut c = Coalescer::new(0);
        for _ in 0..100 {
            c.observe(32);
            assert_eq!(c.hold_until(5), None);
        }
        assert!(!c.active());
    }

    #[test]
    fn back_to_queue_depth_one_stops_pausing_within_a_few_dozen_steps() {
        let (mut c, _) = drive(160_000, 5_000, Client::new(130, 32));
        assert!(c.active());
        let mut quiet = 0;
        while c.active() {
            c.observe(1);
            let _ = c.hold_until(0);
            quiet += 1;
            assert!(
                quiet < 60,
                "still pausing after {quiet} single-request steps"
            );
        }
        assert_eq!(c.hold_until(7), None);
    }
}
