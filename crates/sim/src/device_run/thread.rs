//! A thread of the thin host: where its I/Os come from, how it paces them, and the CPU time it
//! books on its core (see the parent module's essay, "The thin host" and "CPU accounting").

use engine::{SimRng, SimTime};
use host::cpu::{Cat, CAT_COUNT};
use workload::{Completion, IoGenerator, JobSpec, RunUntil};

use crate::trace_replay::TraceFeed;

/// Where a thread's I/Os come from.
pub(crate) enum Source {
    Job(IoGenerator),
    Trace(Box<TraceFeed>),
}

/// Where a thread runs and whose I/Os it counts.
pub(crate) struct Placement {
    /// Index of the job whose statistics it adds to.
    pub job: usize,
    /// Its stonewall group.
    pub group: u32,
    /// Its SQ/CQ pair.
    pub sqid: u16,
    /// The core it runs on (its index within its stonewall group).
    pub core: u16,
}

/// fio's pacing options of a thread's job.
pub(crate) struct Pacing {
    pub thinktime_ns: u64,
    /// The job's length after its ramp (`None`: until its I/Os are done).
    pub runtime_ns: Option<u64>,
    pub ramp_ns: u64,
    /// `rate_iops` as the interval between issues.
    pub rate_interval_ns: Option<u64>,
}

impl Pacing {
    /// No pacing: issue as fast as completions allow, until the I/Os are done.
    pub(crate) const NONE: Pacing = Pacing {
        thinktime_ns: 0,
        runtime_ns: None,
        ramp_ns: 0,
        rate_interval_ns: None,
    };

    pub(crate) fn of(spec: &JobSpec) -> Pacing {
        Pacing {
            thinktime_ns: spec.thinktime_ns,
            runtime_ns: match spec.run_until {
                RunUntil::Runtime => Some(spec.runtime_ns.unwrap_or(u64::MAX / 4)),
                RunUntil::IoDone => spec.runtime_ns,
            },
            ramp_ns: spec.ramp_time_ns,
            rate_interval_ns: spec.rate_iops.filter(|&r| r > 0).map(|r| 1_000_000_000 / r),
        }
    }
}

/// The panic of `Thread::run_cpu`'s always-on check, out of line.
#[cold]
#[inline(never)]
fn cpu_work_before_its_core_is_free(start: SimTime, cpu_free: SimTime) -> ! {
    panic!("thread CPU work at {start} before its core is free at {cpu_free}");
}

pub(crate) struct Thread {
    pub job: usize,
    pub group: u32,
    pub sqid: u16,
    pub source: Source,
    pub rng: SimRng,
    pub iodepth: u32,
    pub completion: Completion,
    pub thinktime_ns: u64,
    pub runtime_ns: Option<u64>,
    pub ramp_ns: u64,
    /// The ramp has ended and the generator's budget restarted (true from the start without a
    /// ramp).
    pub ramp_over: bool,
    pub rate_interval_ns: Option<u64>,
    pub started_at: Option<SimTime>,
    pub cpu_free: SimTime,
    pub issued: u64,
    pub in_flight: u32,
    pub exhausted: bool,
    pub finished_at: Option<SimTime>,
    /// Issue already scheduled (avoid duplicates).
    pub issue_pending: bool,
    /// The core it runs on (its index within its stonewall group).
    pub core: u16,
    /// CPU time by category (`host::Cat`), ns; idle is not kept here.
    pub cpu_ns: [u64; CAT_COUNT],
    /// Wake-ups after sleeping (context switches) and interrupt completions.
    pub context_switches: u64,
    pub interrupts: u64,
    /// With a time series on: the bursts booked that may end after the next window boundary
    /// `(cat, start, end)`, so a sample can leave out their part after it. Empty otherwise.
    ahead: Vec<(Cat, SimTime, SimTime)>,
    track_ahead: bool,
}

impl Thread {
    /// A thread that has not started, with nothing issued.
    pub(crate) fn new(
        at: Placement,
        source: Source,
        rng: SimRng,
        iodepth: u32,
        completion: Completion,
        pacing: Pacing,
    ) -> Thread {
        Thread {
            job: at.job,
            group: at.group,
            sqid: at.sqid,
            source,
            rng,
            iodepth,
            completion,
            thinktime_ns: pacing.thinktime_ns,
            runtime_ns: pacing.runtime_ns,
            ramp_ns: pacing.ramp_ns,
            ramp_over: pacing.ramp_ns == 0,
            rate_interval_ns: pacing.rate_interval_ns,
            started_at: None,
            cpu_free: SimTime::ZERO,
            issued: 0,
            in_flight: 0,
            exhausted: false,
            finished_at: None,
            issue_pending: false,
            core: at.core,
            cpu_ns: [0; CAT_COUNT],
            context_switches: 0,
            interrupts: 0,
            ahead: Vec::new(),
            track_ahead: false,
        }
    }

    /// Keep what a time series needs to split bursts at window boundaries.
    pub(crate) fn track_bursts(&mut self) {
        self.track_ahead = true;
    }

    /// Runs `ns` of `cat` on the thread's core from `start` (not before it is free) and
    /// returns when it is done. A polling thread with I/O in flight spun on its CQ since it
    /// was last busy: that gap is `poll` time.
    /// Always inlined (two or three calls per I/O): the booking is a few adds, and the time
    /// series' bookkeeping and the panic are out of line.
    #[inline(always)]
    pub(crate) fn run_cpu(&mut self, now: SimTime, start: SimTime, ns: u64, cat: Cat) -> SimTime {
        if start < self.cpu_free {
            cpu_work_before_its_core_is_free(start, self.cpu_free);
        }
        if self.spinning() {
            self.cpu_ns[Cat::Poll.index()] += start - self.cpu_free;
        }
        self.cpu_ns[cat.index()] += ns;
        if self.track_ahead {
            self.note_burst(now, cat, start, ns);
        }
        self.cpu_free = start + ns;
        self.cpu_free
    }

    /// With a time series on: keeps the burst `ns` of `cat` from `start` in `ahead`.
    #[inline(never)]
    fn note_burst(&mut self, now: SimTime, cat: Cat, start: SimTime, ns: u64) {
        // The next sample is after `now`: bursts over by now no longer matter.
        self.ahead.retain(|&(_, _, end)| end > now);
        self.ahead.push((cat, start, start + ns));
    }

    /// Whether the thread spins on its CQ whenever it has nothing else to do.
    fn spinning(&self) -> bool {
        self.completion == Completion::Polled && self.in_flight > 0
    }

    /// Adds the thread's CPU time up to `at` (not before its last event) to `busy`: what it
    /// booked, less the part of bursts booked past `at`, plus a polling thread's spin since it
    /// was last busy (booked only when its completion is handled).
    pub(crate) fn busy_until(&self, at: SimTime, busy: &mut [u64; CAT_COUNT]) {
        for (acc, v) in busy.iter_mut().zip(&self.cpu_ns) {
            *acc += v;
        }
        for &(cat, start, end) in &self.ahead {
            busy[cat.index()] -= end.saturating_since(start.max(at));
        }
        if self.spinning() && self.cpu_free < at {
            busy[Cat::Poll.index()] += at - self.cpu_free;
        }
    }
}
