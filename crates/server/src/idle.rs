//! When an idle or throttled worker sleeps, and for how long.
//!
//! # What it implements
//! The timing half of the worker's idle policy (`[dataplane] idle = "block-after-spin"`), as
//! pure functions of time so they are tested without a socket: how long the next
//! `epoll_pwait2` may block ([`wait_ns`]), and how long a worker whose queued requests all wait
//! for tokens sleeps before the next scheduling round ([`next_throttled_wait_ns`]).
//!
//! # Design
//! An idle worker sleeps until its next timer scan, or until [`BACKEND_WAKE_EARLY_NS`] before a
//! time-driven backend's next event (the emulated device), whichever is first — never past the
//! event. A throttled worker (the scheduler released nothing last round) sleeps
//! [`THROTTLED_RETRY_MIN_NS`], doubling up to [`THROTTLED_RETRY_MAX_NS`] while rounds release
//! fewer than [`THROTTLED_BATCH_TARGET`] requests and halving when they release more than twice
//! that. New requests still start a round at once: a request of a flow within its rate is never
//! held by this sleep, nor is a latency-critical request; completions wake the worker to reply
//! but do not start a round early (the worker's *Throttled rounds*).
//!
//! # Rejected: a spin sized from the measured wake cost
//! The fixed spin (`idle_spin_ns`) was tried against a spin that pays for itself (Linux's
//! hybrid polling and NAPI busy polling): each idle period spun up to W, the CPU one
//! sleep-and-wake cost the worker thread (`CLOCK_THREAD_CPUTIME_ID` across 64 start-up sleeps
//! of 40 µs, then across one blocking wait in 16 that slept), when the recent spins found work
//! soon enough to pay for the sleeps they saved — E[min(gap, W)] < p·W, p the share of spins
//! that found work (the ski-rental bound: at most 2W per period) — else it blocked at once,
//! spinning one period in 8 to measure again; coalescing pauses shorter than W were spun. On
//! the 2-core VM shared with other builds (load 6–11), same binary, alternating 3 runs each,
//! fixed 5 µs against the sized spin (every figure: CHANGELOG.md): W measured 8–15 µs, under the
//! ~20 µs a QD1 client takes to send its next request, so spins rarely paid there, and QD1
//! reads (`qd1_latency`, 100,000 each) were no faster — p50 26.7/26.7/30.6 µs against
//! 26.5/32.5/37.9 — nor cheaper: 16.6/16.0/19.4 µs of server CPU per read against
//! 16.7/19.8/21.7. Under fio at iodepth 32 (`nbd_cpu_efficiency`, I/Os per server-CPU-second)
//! with 1 job it won each pair of one set by 4–6 % (118/109/121 K against 124/116/126 K);
//! with 4 jobs the spins took small batches the coalescing pause would have grown (4.0
//! against 8.8 requests a step; 211/209/107 K against 133/162/115 K). Without spins while the
//! coalescer pauses, 4 jobs gave 234/142/169 K against 197/182/184 K and 1 job 114/144/124 K
//! against 168/138/123 K. No load showed a win beyond the machine's noise, and QD1 lost, so
//! the fixed spin stays.
//!
//! On the io_uring socket path the same rule is a config switch (`ring_spin = "sized"`,
//! [`crate::ringwait`]): there the spin reads the ring's completion queue and task-run flag
//! without a system call, and the wake cost is measured on the ring's own timed waits. It
//! bought no QD1 latency there either and cost CPU per QD1 read, so `fixed` stays the default
//! (the figures: CHANGELOG.md).
//!
//! # What it leaves out
//! The scheduler's own next-eligible time (crate `qos` does not expose one; the adaptive sleep
//! stands in for it).

/// How long before a time-driven backend's next event (the emulated device's) a sleeping
/// worker asks to be woken; it polls from there. A blocked thread's wake-up took 5–50 µs on a
/// loaded VM even with 1 ns timer slack (measured under load when this was written; dated);
/// waking early keeps completions from being late.
pub const BACKEND_WAKE_EARLY_NS: u64 = 30_000;
/// How long a worker whose queued requests all wait for tokens first sleeps before the next
/// round (unless new requests, or a latency-critical one queued, start a round first; a
/// completion alone wakes the worker to reply but does not).
pub const THROTTLED_RETRY_MIN_NS: u64 = 50_000;
/// The longest such sleep: a held-back request waits at most this much longer than its tokens
/// need (a request of a flow within its rate is not held back and wakes the worker itself).
pub const THROTTLED_RETRY_MAX_NS: u64 = 800_000;
/// Requests a round after a throttled sleep should release: fewer (with requests still held),
/// and the sleep doubles (up to the maximum); more than twice as many, and it halves. Worked
/// example: a best-effort writer held to 57 K writes/s (10 tokens each) would release 3 per
/// 50 µs wake — 20,000 wake-ups a second, ~6 µs of CPU per write in context switches (measured
/// under load when this was written; dated); at 800 µs it releases ~46 per wake. Why 32: a
/// throttled round whose writes io_uring punts to a worker thread (buffered files on ext4)
/// costs about three wake-ups — the round's timer, the `iou-wrk` thread, the CQE — and on this
/// VM 16 per round left 1 M pipelined 1 KiB writes at 8.35 s of server CPU, 32 at 4.97 s
/// (`nbd_cpu_efficiency`, file phase; nbdkit 5.6–6.3 s in the same runs).
pub const THROTTLED_BATCH_TARGET: usize = 32;

/// The next throttled sleep after one that let a round release `released` requests, with
/// requests still held after that round (`still_held`) or not. A round that released all it
/// had was limited by demand, not tokens: a longer sleep would only delay a shallow flow (a
/// closed loop of 4 would get 4 requests per sleep, below its rate), so the sleep halves.
pub fn next_throttled_wait_ns(wait_ns: u64, released: usize, still_held: bool) -> u64 {
    if !still_held {
        (wait_ns / 2).max(THROTTLED_RETRY_MIN_NS)
    } else if released < THROTTLED_BATCH_TARGET {
        (wait_ns * 2).min(THROTTLED_RETRY_MAX_NS)
    } else if released > 2 * THROTTLED_BATCH_TARGET {
        (wait_ns / 2).max(THROTTLED_RETRY_MIN_NS)
    } else {
        wait_ns
    }
}
/// Longest single sleep of an idle worker (it re-checks its state after this).
const MAX_SLEEP_NS: u64 = 100_000_000;

/// How long the next wait may block, ns (0: just poll). An idle worker sleeps until its next
/// timer scan, or until [`BACKEND_WAKE_EARLY_NS`] before a backend's next event, whichever is
/// first — never past the event.
pub fn wait_ns(polling: bool, now_ns: u64, next_scan_ns: u64, backend_next_ns: Option<u64>) -> u64 {
    if polling {
        return 0;
    }
    let mut until = next_scan_ns.min(now_ns + MAX_SLEEP_NS);
    if let Some(t) = backend_next_ns {
        until = until.min(t.saturating_sub(BACKEND_WAKE_EARLY_NS));
    }
    until.saturating_sub(now_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_worker_never_sleeps_past_a_device_event() {
        assert_eq!(wait_ns(true, 0, 10_000_000, None), 0, "polling");
        assert_eq!(wait_ns(false, 0, 10_000_000, None), 10_000_000);
        assert_eq!(
            wait_ns(false, 0, 10_000_000, Some(100_000)),
            100_000 - BACKEND_WAKE_EARLY_NS
        );
        assert_eq!(wait_ns(false, 50_000, 10_000_000, Some(60_000)), 0);
    }

    #[test]
    fn the_throttled_sleep_adapts_to_the_batch_it_releases() {
        let mut w = THROTTLED_RETRY_MIN_NS;
        for _ in 0..10 {
            w = next_throttled_wait_ns(w, 2, true);
        }
        assert_eq!(
            w, THROTTLED_RETRY_MAX_NS,
            "small batches: sleep longer, to the cap"
        );
        assert_eq!(
            next_throttled_wait_ns(w, THROTTLED_BATCH_TARGET, true),
            w,
            "on target: keep"
        );
        let mut w = THROTTLED_RETRY_MAX_NS;
        for _ in 0..10 {
            w = next_throttled_wait_ns(w, 1000, true);
        }
        assert_eq!(
            w, THROTTLED_RETRY_MIN_NS,
            "big batches: sleep less, to the floor"
        );
        let mut w = THROTTLED_RETRY_MAX_NS;
        for _ in 0..10 {
            w = next_throttled_wait_ns(w, 4, false);
        }
        assert_eq!(
            w, THROTTLED_RETRY_MIN_NS,
            "a round that emptied the queue was short of demand, not tokens: sleep less"
        );
    }
}
