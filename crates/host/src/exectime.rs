//! The execution-time breakdown: where every nanosecond of each thread's life went, and where
//! every online request's response time went.
//!
//! ## What it models
//! Linux reports a task's time in a few counters: `utime`/`stime` (on a CPU, in user or kernel
//! mode), `/proc/<pid>/schedstat`'s run-queue wait (runnable, not running), and — with
//! `delayacct` — the time blocked on block I/O (`blkio_delay`). Tools that break an
//! application's execution time down (`perf sched timehist`, the published FlashShare figure
//! of apache's and the offline jobs' execution time) add them up per thread. Here the same split
//! comes from the model's own state transitions, never estimated after the fact, and finer:
//!
//! | span | the thread is | set by |
//! | --- | --- | --- |
//! | `user` … `poll` | on its core, doing a burst of that CPU category (`cpu::Cat`): user code, system call, page cache, block layer, NVMe driver, block-layer completion, interrupt work (none today: interrupts are not thread bursts), context switch in and cache pollution (`sched`), spinning on a CQ (`poll`) | the core's accounting (`cpu::Cpu::settle`) |
//! | `irq_stolen` | on its core, but the core is running interrupt work (an ISR, a completion, a timer, an IPI) that paused it | the same |
//! | `run_queue` | runnable, waiting in a run queue: woken and not yet picked, or preempted | wake, pick, preempt |
//! | `io_wait` | blocked on I/O: a read/write's bios, a request tag, the dirty throttle, fsync, fio's `io_getevents`, a hybrid poller's sleep | `Host::sleep` (by `task::Wait`) |
//! | `idle` | blocked with nothing to do: a server waiting for a request, a worker for work, a flusher or kblockd for a wake-up, fio's think time | the same |
//!
//! A thread's life runs from its process's start (`ProcessSpec::start`; kernel threads: 0) to
//! its exit, or to the run's end. Each transition closes the interval the thread was in and
//! opens the next, so the spans add up *exactly* to its life: `Cpu::finish` asserts it for
//! every thread, and `Host::finish` again per process. On a core the split is the core's own
//! accounting (which adds up to the simulated time per core), charged to the thread that owns
//! the core; off a core it is one subtraction per transition. Nothing is sampled, nothing
//! allocated: O(1) per transition. Cost: 0.5 % more instructions on the default co-run
//! (apache with pagerank, 10 s) and 1.0 % on imageserver with ungzip (`valgrind
//! --tool=cachegrind` on `cargo bench -p sim --bench system_speed`, before and after: the same
//! events and commands, and no more heap allocations in steady state).
//!
//! Worked example (arm8 defaults, a thread alone on its core reading 4 KiB with `pvsync2` from
//! a device that answers in 10 µs, interrupts): each read is `syscall` 1.0 µs, `blk` 2.3 µs
//! (bio 1.5 + dispatch 0.8), `nvme` 1.2 µs (command and doorbell), then `io_wait` from the
//! doorbell until the completion interrupt's block-layer work wakes it — 10 µs of device +
//! 2.5 µs ISR + 1.5 µs completion = 14 µs exactly — then `run_queue` 0 (its core is idle) and
//! `sched` 2.5 µs (the switch back in): 21.0 µs per read, `user` 0. 2 000 such reads are a life
//! of 42.0025 ms (the extra 2.5 µs: the first switch in), after which the thread exits
//! (`exectime_tests`, which pins the I/O wait to the nanosecond).
//!
//! ## Online requests
//! An online service's response time is not one thread's time: a request crosses the network,
//! waits at the server, perhaps in the work queue for a worker, and only then belongs to the
//! worker until its reply leaves. The model records each hand-over (`process::OnlineReq`), and
//! snapshots the thread that holds the request at both ends of its stay, so a request's
//! response time splits exactly into
//!
//! - `network`: the client's send and both one-way trips (`app.client_send_ns`,
//!   `app.net_one_way_ns`: arrival at the server − sent, plus received − reply sent);
//! - the server thread's spans while the request was at the server (arrival → handed on): its
//!   run-queue wait after the arrival woke it, its receive and hand-off (`net_recv_ns` +
//!   `handoff_ns`, `syscall`), and those of requests received before this one in the same batch;
//! - `worker_queue`: waiting for a free worker (0 when one was idle);
//! - the worker's spans from taking the request to its reply's end: compute, its I/Os' kernel
//!   work and waits, its run-queue waits, the reply (`reply_ns`, `syscall`).
//!
//! The server's and the worker's spans are summed span by span (their `idle` is 0: neither
//! waits for work while it holds a request). Each completed request's parts are checked to add
//! up to its response time (assert, O(1)) and summed per process; the report gives the sums,
//! the means (sum / requests, truncated, so they may fall a few ns short of the mean response
//! time) and each part's fraction of the summed response times.
//!
//! Worked example (apache alone on arm8 against a 10 µs device, a request every ms: the
//! co-run test of `exectime_tests`, 100 ms, 99 requests): network 2 + 10 + 10 = 22 µs, compute 250 µs (500 k
//! instructions at 2 G/s), `worker_queue` 0, and the rest — system calls 5.6 µs, block layer
//! 1.3, driver 0.7, switches 6.4, I/O wait 7.9: 21.9 µs — 293.9 µs, the mean response time.
//! Beside `pagerank` (a hog on every core) the server thread waits out a hog's slice for most
//! requests: 73.7 µs of `run_queue` per request, and 23.9 µs more of block layer (cold
//! submissions: pagerank computed on the worker's core while it slept, `blk_submit`); 396.3 µs
//! in all, the other 4.8 µs of the change switches, I/O wait, stolen time, system calls and
//! the driver.
//!
//! ## What it leaves out
//! Time before a thread's process starts; the client's and the network's CPU; a split of the
//! kernel threads' time (the flusher, kblockd workers, DedCore's poller: accounted like any
//! thread but reported with no process); distributions (sums only, no per-request histograms
//! of the parts). Config keys: none — it observes, it never steers.

use engine::SimTime;
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// Where a thread's wall-clock time went (module essay). The first nine are the CPU categories
/// of `cpu::Cat` in its order (a thread on its core, by its burst's category).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    User,
    Syscall,
    PageCache,
    Blk,
    Nvme,
    BlkComplete,
    Irq,
    Sched,
    Poll,
    /// On its core while the core runs interrupt work.
    IrqStolen,
    /// Runnable, in a run queue (woken or preempted).
    RunQueue,
    /// Blocked on I/O.
    IoWait,
    /// Blocked with nothing to do.
    Idle,
}

pub const SPAN_COUNT: usize = 13;
pub const SPANS: [Span; SPAN_COUNT] = [
    Span::User,
    Span::Syscall,
    Span::PageCache,
    Span::Blk,
    Span::Nvme,
    Span::BlkComplete,
    Span::Irq,
    Span::Sched,
    Span::Poll,
    Span::IrqStolen,
    Span::RunQueue,
    Span::IoWait,
    Span::Idle,
];

impl Span {
    pub const fn index(self) -> usize {
        self as usize
    }

    pub const fn name(self) -> &'static str {
        match self {
            Span::User => "user",
            Span::Syscall => "syscall",
            Span::PageCache => "pagecache",
            Span::Blk => "blk",
            Span::Nvme => "nvme",
            Span::BlkComplete => "blk_complete",
            Span::Irq => "irq",
            Span::Sched => "sched",
            Span::Poll => "poll",
            Span::IrqStolen => "irq_stolen",
            Span::RunQueue => "run_queue",
            Span::IoWait => "io_wait",
            Span::Idle => "idle",
        }
    }
}

/// Nanoseconds per span.
pub type SpanNs = [u64; SPAN_COUNT];

/// The spans in coarse groups, for reports one line wide: on a core in user code, in the kernel
/// (any layer, interrupt work included), switching, polling; waiting for a core (run queue and
/// stolen by interrupts); blocked on I/O; idle. Every span is in exactly one group.
pub const GROUPS: [(&str, &[Span]); 7] = [
    ("compute", &[Span::User]),
    (
        "kernel",
        &[
            Span::Syscall,
            Span::PageCache,
            Span::Blk,
            Span::Nvme,
            Span::BlkComplete,
            Span::Irq,
        ],
    ),
    ("switch", &[Span::Sched]),
    ("poll", &[Span::Poll]),
    ("cpu wait", &[Span::RunQueue, Span::IrqStolen]),
    ("I/O wait", &[Span::IoWait]),
    ("idle", &[Span::Idle]),
];

/// The nanoseconds of `ns` in `spans`.
pub fn group_ns(ns: &SpanNs, spans: &[Span]) -> u64 {
    spans.iter().map(|s| ns[s.index()]).sum()
}

/// One thread's accounting: the spans so far and the interval it is in.
#[derive(Clone, Debug)]
pub struct ThreadTime {
    /// Closed time per span.
    pub ns: SpanNs,
    /// Start of the open off-core interval (`off`).
    since: SimTime,
    /// The span the open off-core interval goes to (`RunQueue` or a blocked span); `None`
    /// while the thread owns a core (the core's accounting charges it then) or after it exited.
    off: Option<Span>,
    born: SimTime,
    died: Option<SimTime>,
}

impl ThreadTime {
    /// A thread blocked with nothing to do from `born` on.
    pub fn new(born: SimTime) -> ThreadTime {
        ThreadTime {
            ns: [0; SPAN_COUNT],
            since: born,
            off: Some(Span::Idle),
            born,
            died: None,
        }
    }

    /// When its life began.
    pub fn born(&self) -> SimTime {
        self.born
    }

    /// On-core time, charged by the core's accounting.
    #[inline]
    pub fn add(&mut self, span: Span, ns: u64) {
        self.ns[span.index()] += ns;
    }

    /// Closes the open off-core interval at `now` and opens `next` (`None`: the thread takes a
    /// core).
    #[inline]
    pub fn switch(&mut self, now: SimTime, next: Option<Span>) {
        if let Some(span) = self.off {
            // `SimTime`'s subtraction panics if the interval would close before it opened.
            self.ns[span.index()] += now - self.since;
        }
        self.off = next;
        self.since = now;
    }

    /// The thread exits at `now` (it was on its core).
    pub fn die(&mut self, now: SimTime) {
        self.switch(now, None);
        self.died = Some(now);
    }

    /// The spans up to `now` (the open off-core interval included; on-core time only as far as
    /// the core's accounting has been brought).
    #[inline]
    pub fn snapshot(&self, now: SimTime) -> SpanNs {
        let mut ns = self.ns;
        if let Some(span) = self.off {
            ns[span.index()] += now.saturating_since(self.since);
        }
        ns
    }

    /// Closes the accounting at `end` (the run's end).
    pub fn close(&mut self, end: SimTime) {
        if self.died.is_none() && self.off.is_some() {
            let off = self.off;
            self.switch(end, off);
        }
    }

    /// Its life in the run: born to exit, or to `end`.
    pub fn lifetime_ns(&self, end: SimTime) -> u64 {
        self.died.unwrap_or(end).saturating_since(self.born)
    }

    /// Asserts that the spans add up to the life (after [`ThreadTime::close`]).
    pub fn check(&self, thread: u32, end: SimTime) {
        let sum: u64 = self.ns.iter().sum();
        assert_eq!(
            sum,
            self.lifetime_ns(end),
            "thread {thread}: its spans {:?} add up to {sum} ns, not its life of {} ns (born {}, \
             died {:?}, end {end})",
            self.ns,
            self.lifetime_ns(end),
            self.born,
            self.died
        );
    }
}

/// Elementwise `a - b` (a later snapshot of the same thread minus an earlier one).
pub fn since(a: &SpanNs, b: &SpanNs) -> SpanNs {
    let mut out = [0; SPAN_COUNT];
    for i in 0..SPAN_COUNT {
        debug_assert!(a[i] >= b[i], "span {} went backwards", SPANS[i].name());
        out[i] = a[i] - b[i];
    }
    out
}

/// Where the threads of one process spent their lives, summed over them.
///
/// Read back from `summary.json` by its `threads`, `lifetime_ns` and `ns`; its `fraction` is
/// derived from those when written, and not read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "ExecTimeIn")]
pub struct ExecTime {
    pub threads: u32,
    /// Their lives summed (start to exit or the run's end); the spans add up to it.
    pub lifetime_ns: u64,
    pub ns: SpanNs,
}

impl ExecTime {
    /// Adds one thread whose accounting is closed at `end`.
    pub fn add_thread(&mut self, t: &ThreadTime, end: SimTime) {
        self.threads += 1;
        self.lifetime_ns += t.lifetime_ns(end);
        for (s, v) in self.ns.iter_mut().zip(&t.ns) {
            *s += v;
        }
    }

    /// Asserts the spans add up to the lives (`process` names it in the message).
    pub fn check(&self, process: &str) {
        let sum: u64 = self.ns.iter().sum();
        assert_eq!(
            sum, self.lifetime_ns,
            "process `{process}`: its threads' spans add up to {sum} ns, not their lives' {} ns",
            self.lifetime_ns
        );
    }
}

/// `{ "user": …, "syscall": …, … }` in span order, then any `extra` entries first.
struct NamedNs<'a, T: Serialize> {
    extra: &'a [(&'static str, T)],
    spans: &'a [T; SPAN_COUNT],
}

impl<T: Serialize> Serialize for NamedNs<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.extra.len() + SPAN_COUNT))?;
        for (k, v) in self.extra {
            m.serialize_entry(k, v)?;
        }
        for (span, v) in SPANS.iter().zip(self.spans) {
            m.serialize_entry(span.name(), v)?;
        }
        m.end()
    }
}

/// `part / total`, to 4 decimals (0 when `total` is 0).
fn fraction(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        (part as f64 / total as f64 * 1e4).round() / 1e4
    }
}

impl Serialize for ExecTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fractions = self.ns.map(|v| fraction(v, self.lifetime_ns));
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("threads", &self.threads)?;
        m.serialize_entry("lifetime_ns", &self.lifetime_ns)?;
        m.serialize_entry(
            "ns",
            &NamedNs {
                extra: &[],
                spans: &self.ns,
            },
        )?;
        m.serialize_entry(
            "fraction",
            &NamedNs {
                extra: &[],
                spans: &fractions,
            },
        )?;
        m.end()
    }
}

/// One online request's response time, in parts (module essay, "Online requests").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestParts {
    pub network_ns: u64,
    pub worker_queue_ns: u64,
    /// The server thread's spans while the request was at the server, plus the worker's while
    /// it held the request.
    pub spans: SpanNs,
}

impl RequestParts {
    pub fn total_ns(&self) -> u64 {
        self.network_ns + self.worker_queue_ns + self.spans.iter().sum::<u64>()
    }
}

/// The response times of an online service's completed requests, in parts, summed.
///
/// Read back from `summary.json` by its `requests`, `response_ns` and `sum_ns`; its `mean_ns`
/// and `fraction` are derived from those when written, and not read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RequestTimeIn")]
pub struct RequestTime {
    pub requests: u64,
    /// Sum of the requests' response times; the parts add up to it.
    pub response_ns: u64,
    pub sum: RequestParts,
}

impl RequestTime {
    /// Adds a completed request whose response time was `response_ns`; its parts must add up
    /// to it.
    pub fn add(&mut self, parts: &RequestParts, response_ns: u64) {
        assert_eq!(
            parts.total_ns(),
            response_ns,
            "a request's parts {parts:?} do not add up to its response time"
        );
        self.requests += 1;
        self.response_ns += response_ns;
        let s = &mut self.sum;
        s.network_ns += parts.network_ns;
        s.worker_queue_ns += parts.worker_queue_ns;
        for (a, b) in s.spans.iter_mut().zip(&parts.spans) {
            *a += b;
        }
    }

    /// Mean per request of each part, ns (truncated).
    pub fn means(&self) -> RequestParts {
        let n = self.requests.max(1);
        RequestParts {
            network_ns: self.sum.network_ns / n,
            worker_queue_ns: self.sum.worker_queue_ns / n,
            spans: self.sum.spans.map(|v| v / n),
        }
    }
}

impl Serialize for RequestTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let parts = |p: &RequestParts| {
            [
                ("network", p.network_ns),
                ("worker_queue", p.worker_queue_ns),
            ]
        };
        let mean = self.means();
        let total = self.response_ns;
        let sum_extra = parts(&self.sum);
        let mean_extra = parts(&mean);
        let frac_extra = sum_extra.map(|(k, v)| (k, fraction(v, total)));
        let frac = self.sum.spans.map(|v| fraction(v, total));
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("requests", &self.requests)?;
        m.serialize_entry("response_ns", &self.response_ns)?;
        m.serialize_entry(
            "sum_ns",
            &NamedNs {
                extra: &sum_extra,
                spans: &self.sum.spans,
            },
        )?;
        m.serialize_entry(
            "mean_ns",
            &NamedNs {
                extra: &mean_extra,
                spans: &mean.spans,
            },
        )?;
        m.serialize_entry(
            "fraction",
            &NamedNs {
                extra: &frac_extra,
                spans: &frac,
            },
        )?;
        m.end()
    }
}

/// `{ "user": …, … }` read back: `extra` names first, then every span by its name; a missing or
/// unknown name is refused.
fn named_ns<const N: usize>(
    mut map: std::collections::BTreeMap<String, u64>,
    extra: [&str; N],
) -> Result<([u64; N], SpanNs), String> {
    let mut take = |name: &str| map.remove(name).ok_or(format!("no `{name}`"));
    let mut extra_ns = [0; N];
    for (v, name) in extra_ns.iter_mut().zip(extra) {
        *v = take(name)?;
    }
    let mut spans = [0; SPAN_COUNT];
    for (v, span) in spans.iter_mut().zip(SPANS) {
        *v = take(span.name())?;
    }
    match map.keys().next() {
        Some(k) => Err(format!("`{k}` is not a span")),
        None => Ok((extra_ns, spans)),
    }
}

/// [`ExecTime`] as `summary.json` holds it (its `fraction` is left unread).
#[derive(Deserialize)]
struct ExecTimeIn {
    threads: u32,
    lifetime_ns: u64,
    ns: std::collections::BTreeMap<String, u64>,
}

impl TryFrom<ExecTimeIn> for ExecTime {
    type Error = String;
    fn try_from(e: ExecTimeIn) -> Result<ExecTime, String> {
        let ([], ns) = named_ns(e.ns, []).map_err(|m| format!("exec_time.ns: {m}"))?;
        Ok(ExecTime {
            threads: e.threads,
            lifetime_ns: e.lifetime_ns,
            ns,
        })
    }
}

/// [`RequestTime`] as `summary.json` holds it (its `mean_ns` and `fraction` are left unread).
#[derive(Deserialize)]
struct RequestTimeIn {
    requests: u64,
    response_ns: u64,
    sum_ns: std::collections::BTreeMap<String, u64>,
}

impl TryFrom<RequestTimeIn> for RequestTime {
    type Error = String;
    fn try_from(r: RequestTimeIn) -> Result<RequestTime, String> {
        let ([network_ns, worker_queue_ns], spans) =
            named_ns(r.sum_ns, ["network", "worker_queue"])
                .map_err(|m| format!("request_time.sum_ns: {m}"))?;
        Ok(RequestTime {
            requests: r.requests,
            response_ns: r.response_ns,
            sum: RequestParts {
                network_ns,
                worker_queue_ns,
                spans,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both breakdowns read back from the JSON they write (their derived `fraction` and
    /// `mean_ns` objects unread), and a span missing or unknown is refused by name.
    #[test]
    fn the_breakdowns_read_back_from_their_json_and_refuse_a_wrong_span() {
        let mut e = ExecTime {
            threads: 3,
            lifetime_ns: 100,
            ..ExecTime::default()
        };
        e.ns[Span::User.index()] = 70;
        e.ns[Span::IoWait.index()] = 30;
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(serde_json::from_value::<ExecTime>(v.clone()).unwrap(), e);
        let mut missing = v.clone();
        missing["ns"].as_object_mut().unwrap().remove("io_wait");
        let m = serde_json::from_value::<ExecTime>(missing)
            .unwrap_err()
            .to_string();
        assert!(m.contains("exec_time.ns: no `io_wait`"), "{m}");
        let mut extra = v;
        extra["ns"]["io_stall"] = 0.into();
        let m = serde_json::from_value::<ExecTime>(extra)
            .unwrap_err()
            .to_string();
        assert!(m.contains("`io_stall` is not a span"), "{m}");

        let mut r = RequestTime::default();
        let mut parts = RequestParts {
            network_ns: 5,
            worker_queue_ns: 2,
            ..RequestParts::default()
        };
        parts.spans[Span::Blk.index()] = 11;
        r.add(&parts, 18);
        r.add(&parts, 18);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(serde_json::from_value::<RequestTime>(v).unwrap(), r);
    }

    #[test]
    fn intervals_add_up_to_the_life_and_an_exit_stops_the_clock() {
        let mut t = ThreadTime::new(SimTime::from_us(10));
        // Idle until woken at 30 µs, 5 µs in the run queue, 7 µs of user work on a core,
        // blocked on I/O 20 µs, runnable 1 µs, then 2 µs on core and exit at 65 µs.
        t.switch(SimTime::from_us(30), Some(Span::RunQueue));
        t.switch(SimTime::from_us(35), None);
        t.add(Span::User, 7_000);
        t.switch(SimTime::from_us(42), Some(Span::IoWait));
        t.switch(SimTime::from_us(62), Some(Span::RunQueue));
        t.switch(SimTime::from_us(63), None);
        t.add(Span::Syscall, 2_000);
        t.die(SimTime::from_us(65));
        t.close(SimTime::from_us(100));
        t.check(0, SimTime::from_us(100));
        assert_eq!(t.lifetime_ns(SimTime::from_us(100)), 55_000);
        let want = [
            (Span::Idle, 20_000),
            (Span::RunQueue, 6_000),
            (Span::User, 7_000),
            (Span::IoWait, 20_000),
            (Span::Syscall, 2_000),
        ];
        for (span, ns) in want {
            assert_eq!(t.ns[span.index()], ns, "{}", span.name());
        }
    }

    #[test]
    fn a_snapshot_includes_the_open_interval_and_a_missing_nanosecond_fails_the_check() {
        let mut t = ThreadTime::new(SimTime::ZERO);
        t.switch(SimTime::from_us(4), Some(Span::IoWait));
        let s = t.snapshot(SimTime::from_us(9));
        assert_eq!(s[Span::Idle.index()], 4_000);
        assert_eq!(s[Span::IoWait.index()], 5_000);
        t.close(SimTime::from_us(9));
        t.check(1, SimTime::from_us(9));
        t.ns[Span::Idle.index()] -= 1;
        let e = std::panic::catch_unwind(|| t.check(1, SimTime::from_us(9))).unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(msg.contains("not its life of 9000 ns"), "{msg}");
    }

    #[test]
    fn every_span_is_in_exactly_one_group() {
        for s in SPANS {
            let n = GROUPS.iter().filter(|(_, g)| g.contains(&s)).count();
            assert_eq!(n, 1, "{}", s.name());
        }
    }

    #[test]
    fn request_parts_must_add_up_to_the_response_time() {
        let mut r = RequestTime::default();
        let mut p = RequestParts {
            network_ns: 22_000,
            worker_queue_ns: 0,
            spans: [0; SPAN_COUNT],
        };
        p.spans[Span::User.index()] = 250_000;
        p.spans[Span::Syscall.index()] = 3_000;
        r.add(&p, 275_000);
        p.worker_queue_ns = 10_000;
        r.add(&p, 285_000);
        assert_eq!(r.requests, 2);
        assert_eq!(r.means().worker_queue_ns, 5_000);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["mean_ns"]["network"], 22_000);
        assert_eq!(json["mean_ns"]["user"], 250_000);
        assert_eq!(json["fraction"]["user"], 0.8929);
        let e = std::panic::catch_unwind(move || r.add(&p, 1)).unwrap_err();
        assert!(e
            .downcast_ref::<String>()
            .unwrap()
            .contains("do not add up"));
    }
}
