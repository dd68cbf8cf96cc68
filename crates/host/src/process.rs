//! Processes: what runs on the host (online services, offline jobs, fio jobs, trace replay),
//! each process's per-kind state, and what it reports. How their threads behave is in `app`
//! (online services, offline jobs) and `fio` (fio jobs, trace replay).
//!
//! ## The CPU side of the profiles
//! presets.md gives each profile's I/O behaviour per instruction, not its threads or its work
//! per request. Online services run one server (listener) thread and a pool of workers: the
//! published services [`workload::ONLINE_WORKER_THREADS`] (1), the write-back study services
//! [`DEFAULT_ONLINE_WORKERS`] (4, ours); offline jobs run the threads their profile names
//! (`workload::profile`'s essay "Offline jobs' threads": GNU tools one, analytics frameworks
//! one per core but one, `bfs` two per core), one per core for a profile that names none;
//! published online services use direct I/O (databases and servers that manage their own
//! cache), the write-back study services and offline jobs buffered I/O (presets.md: offline
//! jobs use the page cache; upload/update requests dirty pages). Every one of these is a
//! per-process key in the system config.
//!
//! ## Online services: compute and I/Os per request
//! A request's compute is `instructions_per_request`: the profile's own (calibrated to the
//! knee at 400 requests/s, `workload::profile`'s essay "How the online services are run"), else
//! the host's `app.instructions_per_request` (1 M); a process's own key overrides both. Its
//! I/Os come from the profile's I/O rate: a worker issues one every
//! [`Profile::online_instructions_per_io`] instructions on average (exponential gaps by
//! default, drawn across requests), so a request makes `instructions_per_request /
//! instructions_per_io` I/Os on average (`apache`: 2.6 M / 750 750 = 3.46) and a heavier
//! request reads more. (Until issue 25 the count was fixed at the profile's rate over 1 M
//! instructions whatever the compute; the knee made the compute the service's calibrated
//! parameter, and a request's I/Os follow it.)
//!
//! ## What it leaves out
//! Memory footprints of applications (the page cache gets `memory − reserved`), the client
//! machine's CPU.

use engine::rng::exp_ns;
use engine::{IoClass, LatencyHistogram, SimRng};
use serde::{Deserialize, Serialize};
use workload::{Buffering, IoGenerator, IoSizeModel, JobSpec, Profile, ProfileKind};

use crate::config::HostConfig;

/// Worker threads of an online service whose profile names none (the write-back study
/// services): ours, not published (module essay).
pub const DEFAULT_ONLINE_WORKERS: u32 = 4;

/// Compute per request of online profile `profile`: its own published figure if it has one,
/// else the host's default (`app.instructions_per_request`).
pub fn online_instructions_per_request(profile: &Profile, host: &HostConfig) -> u64 {
    profile
        .instructions_per_request
        .unwrap_or(host.app.instructions_per_request)
}

/// Mean instructions between an online worker's I/Os (module essay): independent of the
/// request's compute, so the I/Os per request scale with it.
pub fn online_mean_gap(profile: &Profile) -> u64 {
    profile.online_instructions_per_io().max(1)
}

/// When an online service's client sends requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arrivals {
    /// Exponential gaps with mean 1 / rate.
    Poisson,
    /// A request every 1 / rate.
    Fixed,
}

/// How instructions between a thread's I/Os are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoGaps {
    /// Exponential with the profile's mean (I/Os are a Poisson process in instructions).
    Exponential,
    /// Always the profile's mean.
    Fixed,
}

/// What a process runs.
#[derive(Clone, Debug)]
pub enum Workload {
    /// A built-in profile (online service or offline job).
    Profile(Profile),
    /// fio jobs (each clone a thread).
    Fio { jobs: Vec<JobSpec>, source: String },
    /// A block trace replayed by one thread, streamed from `trace` as it issues.
    Trace {
        trace: std::sync::Arc<dyn TraceSource>,
        mode: TraceMode,
        source: String,
    },
}

/// A trace process's I/Os, opened afresh by each run that spawns the process and pulled one
/// at a time as its thread issues: a trace is streamed, never held (the reader behind it keeps
/// a line). Opening per run keeps a [`ProcessSpec`] cloneable and its runs identical: the same
/// file gives the same records in the same order.
pub trait TraceSource: std::fmt::Debug + Send + Sync {
    /// The I/Os placed within a file of `file_bytes`, in issue order.
    fn open(&self, file_bytes: u64) -> Result<Box<TraceStream>, String>;
}

/// What [`TraceSource::open`] gives: records, or an error (a malformed line, named by file
/// and line) that ends the replay and makes the run fail with it.
pub type TraceStream = dyn Iterator<Item = Result<TraceRecord, String>> + Send;

/// One I/O of a trace: when (from the trace's start), what, where in the process's file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    pub at_ns: u64,
    pub op: engine::IoOp,
    pub offset_bytes: u64,
    pub bytes: u64,
}

/// How a trace is replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceMode {
    /// Each I/O is issued at its timestamp (asynchronously, direct), whatever is in flight.
    OpenLoop,
    /// One I/O at a time, each as soon as the previous one completed (synchronous, direct).
    Afap,
    /// `queue_depth` I/Os kept in flight (asynchronously, direct), the next issued as one is
    /// reaped; timestamps ignored (`--qd` of a device-level replay).
    ClosedLoop { queue_depth: u32 },
}

/// Where a fio-like thread's I/Os come from.
pub(crate) enum IoSource {
    Job(IoGenerator),
    Trace(Box<TraceFeed>),
}

/// A trace thread's open stream and the one record it has read ahead.
pub(crate) struct TraceFeed {
    stream: Box<TraceStream>,
    next: Option<TraceRecord>,
    pub open_loop: bool,
    file_bytes: u64,
    /// Why the replay stopped early; the run fails with it at its end.
    pub error: Option<String>,
}

impl TraceFeed {
    pub(crate) fn new(stream: Box<TraceStream>, open_loop: bool, file_bytes: u64) -> TraceFeed {
        TraceFeed {
            stream,
            next: None,
            open_loop,
            file_bytes,
            error: None,
        }
    }

    /// The next record without taking it; `None` at the end of the trace or after an error.
    /// A record that is not whole sectors inside the process's file is an error.
    pub(crate) fn peek(&mut self) -> Option<&TraceRecord> {
        if self.next.is_none() && self.error.is_none() {
            match self.stream.next() {
                None => {}
                Some(Err(e)) => self.error = Some(e),
                Some(Ok(r)) => match self.check(&r) {
                    Ok(()) => self.next = Some(r),
                    Err(e) => self.error = Some(e),
                },
            }
        }
        self.next.as_ref()
    }

    /// Takes the record [`peek`](Self::peek) returns.
    pub(crate) fn take(&mut self) -> Option<TraceRecord> {
        self.peek();
        self.next.take()
    }

    fn check(&self, r: &TraceRecord) -> Result<(), String> {
        if r.bytes == 0 || !r.offset_bytes.is_multiple_of(512) || !r.bytes.is_multiple_of(512) {
            return Err(format!(
                "trace record at {} ns: offset {} and length {} must be positive multiples of 512",
                r.at_ns, r.offset_bytes, r.bytes
            ));
        }
        match r.offset_bytes.checked_add(r.bytes) {
            Some(end) if end <= self.file_bytes => Ok(()),
            _ => Err(format!(
                "trace record at {} ns ends past the process's file ({} bytes; raise file_bytes)",
                r.at_ns, self.file_bytes
            )),
        }
    }
}

/// Whether a process is a service (response time) or a job (throughput).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessKind {
    Online,
    Offline,
    Fio,
    Trace,
}

/// One process of a system run.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    pub name: String,
    pub workload: Workload,
    /// The workload attribute every I/O of the process carries.
    pub class: IoClass,
    /// Online: worker threads (plus one server thread); offline: threads; fio: unused
    /// (`numjobs`).
    pub threads: u32,
    /// Online: client requests per second.
    pub requests_per_sec: u64,
    pub arrivals: Arrivals,
    /// Online: instructions a worker executes per request.
    pub instructions_per_request: u64,
    /// Profiles: direct or through the page cache (fio jobs use their own `direct`).
    pub buffering: Buffering,
    pub io_size: IoSizeModel,
    pub io_gaps: IoGaps,
    /// Size of the process's file (its region of the device).
    pub file_bytes: u64,
    /// Buffered writers: call fsync after every this many writes (0: never).
    pub fsync_every_writes: u32,
    /// When the process starts, from the run's start: its threads are created at t = 0 but
    /// first run (and an online service's client first sends) at this time. Must be before
    /// the run's end.
    pub start: engine::SimTime,
}

impl ProcessSpec {
    /// A process running `profile` with the defaults described in the module essay.
    pub fn from_profile(profile: Profile, class: IoClass, host: &HostConfig) -> ProcessSpec {
        let online = profile.kind == ProfileKind::Online;
        let buffering = match profile.provenance {
            workload::Provenance::Derived { .. } => Buffering::Buffered,
            workload::Provenance::Published if online => Buffering::Direct,
            workload::Provenance::Published => Buffering::Buffered,
        };
        ProcessSpec {
            name: profile.name.to_string(),
            threads: default_threads(&profile, host.cpu.cores),
            workload: Workload::Profile(profile),
            class,
            requests_per_sec: workload::ONLINE_REQUESTS_PER_SEC,
            arrivals: Arrivals::Poisson,
            instructions_per_request: if online {
                online_instructions_per_request(&profile, host)
            } else {
                host.app.instructions_per_request
            },
            buffering,
            io_size: IoSizeModel::Fixed,
            io_gaps: IoGaps::Exponential,
            file_bytes: host.app.file_bytes,
            fsync_every_writes: 0,
            start: engine::SimTime::ZERO,
        }
    }

    pub fn kind(&self) -> ProcessKind {
        match &self.workload {
            Workload::Profile(p) if p.kind == ProfileKind::Online => ProcessKind::Online,
            Workload::Profile(_) => ProcessKind::Offline,
            Workload::Fio { .. } => ProcessKind::Fio,
            Workload::Trace { .. } => ProcessKind::Trace,
        }
    }

    /// What the process runs: the built-in profile's name, or the fio job file or trace it
    /// reads.
    pub fn workload_name(&self) -> String {
        match &self.workload {
            Workload::Profile(p) => p.name.to_string(),
            Workload::Fio { source, .. } | Workload::Trace { source, .. } => source.clone(),
        }
    }
}

/// The rate-related fields of a process (so the arrival draw needs no borrow of the process).
#[derive(Clone, Copy)]
pub(crate) struct RateSpec {
    requests_per_sec: u64,
    arrivals: Arrivals,
}

impl ProcessSpec {
    pub(crate) fn clone_rate(&self) -> RateSpec {
        RateSpec {
            requests_per_sec: self.requests_per_sec,
            arrivals: self.arrivals,
        }
    }
}

/// Gap to an online service's next client request.
pub(crate) fn arrival_gap_of(spec: RateSpec, rng: &mut SimRng) -> u64 {
    let mean = 1_000_000_000 / spec.requests_per_sec.max(1);
    match spec.arrivals {
        Arrivals::Fixed => mean,
        Arrivals::Poisson => exp_ns(rng, mean).max(1),
    }
}

pub(crate) fn arrival_gap(spec: &ProcessSpec, rng: &mut SimRng) -> u64 {
    arrival_gap_of(spec.clone_rate(), rng)
}

/// Default thread count of a profile on a host with `cores` cores (workers for online
/// services).
pub fn default_threads(profile: &Profile, cores: u32) -> u32 {
    match profile.kind {
        ProfileKind::Online => profile.worker_threads.unwrap_or(DEFAULT_ONLINE_WORKERS),
        ProfileKind::Offline => profile
            .offline_threads
            .map_or(cores, |threads| threads.on(cores)),
    }
}

/// An online request in flight, with the times of its hand-overs (`exectime`'s "Online
/// requests").
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OnlineReq {
    pub sent_at: engine::SimTime,
    pub live: bool,
    /// It reached the server.
    pub rx_at: engine::SimTime,
    /// The server handed it to a worker or queued it for one.
    pub handed_at: engine::SimTime,
    /// A worker took it.
    pub taken_at: engine::SimTime,
    /// Its reply left the worker.
    pub replied_at: engine::SimTime,
    /// The server thread's spans when the request reached it; from its hand-over on, the
    /// server's spans while the request was there.
    pub server: crate::exectime::SpanNs,
    /// The worker's spans when it took the request; from its reply on, the spans it spent on
    /// the request.
    pub worker: crate::exectime::SpanNs,
}

/// An asynchronous fio I/O in flight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FioIo {
    pub read: bool,
    pub bytes: u64,
    pub started: engine::SimTime,
    /// Bios of this I/O not yet completed.
    pub pending: u32,
    /// When its last bio completed.
    pub done_at: engine::SimTime,
}

/// Per-job fio results (all clones of a job together).
#[derive(Clone, Debug, Default)]
pub struct FioJobResult {
    pub name: String,
    pub read: LatencyHistogram,
    pub write: LatencyHistogram,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub first_start_ns: Option<u64>,
    pub last_end_ns: u64,
    /// CPU time of the job's threads (all clones) in user code, ns. fio threads here run no
    /// user code of their own (the model has no per-I/O user cost for fio: no published
    /// figure), so this is 0 unless that changes; reported so studies need not assume it.
    pub cpu_user_ns: u64,
    /// CPU time of the job's threads in the kernel, in thread context (system calls, block
    /// layer, driver, polling, cache pollution after a switch), ns. Interrupt-context work done
    /// for its I/O is in the cores' per-class accounting, not here.
    pub cpu_kernel_ns: u64,
}

/// The state of one fio clone.
pub(crate) struct FioThread {
    pub job: u32,
    pub source: IoSource,
    pub spec_depth: u32,
    pub asynchronous: bool,
    pub polled: bool,
    pub direct: bool,
    pub thinktime_ns: u64,
    pub rate_interval_ns: Option<u64>,
    /// fio `runtime`, counted from the ramp's end.
    pub runtime_ns: Option<u64>,
    pub ramp_ns: u64,
    /// The ramp has ended and the generator's budget restarted (see `fio`'s essay).
    pub ramp_over: bool,
    pub started: engine::SimTime,
    pub issued: u64,
    pub exhausted: bool,
    pub in_flight: u32,
    pub slots: Vec<FioIo>,
    pub free_slots: Vec<u32>,
    pub completed: Vec<u32>,
    pub reaping: Vec<u32>,
    /// Latency ends at the device completion (trace replay) rather than when the thread reaps
    /// it (fio's view through io_getevents).
    pub latency_at_completion: bool,
}

impl FioThread {
    /// A clone of job `job` taking its I/Os from `source`, before its first I/O, with the
    /// plainest settings (synchronous, direct, interrupt completion, unpaced, no ramp, latency
    /// to the reap); the caller overrides what its job or trace asks for.
    pub(crate) fn new(job: u32, source: IoSource) -> FioThread {
        FioThread {
            job,
            source,
            spec_depth: 1,
            asynchronous: false,
            polled: false,
            direct: true,
            thinktime_ns: 0,
            rate_interval_ns: None,
            runtime_ns: None,
            ramp_ns: 0,
            ramp_over: true,
            started: engine::SimTime::ZERO,
            issued: 0,
            exhausted: false,
            in_flight: 0,
            slots: Vec::new(),
            free_slots: Vec::new(),
            completed: Vec::new(),
            reaping: Vec::new(),
            latency_at_completion: false,
        }
    }
}

/// What a process is doing, by kind.
pub(crate) enum ProcState {
    Online(Box<OnlineState>),
    Offline,
    Fio { jobs: Vec<FioJobResult> },
}

/// An online service's state.
pub(crate) struct OnlineState {
    pub server: u32,
    pub idle_workers: Vec<u32>,
    pub rx: std::collections::VecDeque<u32>,
    pub work: std::collections::VecDeque<u32>,
    pub reqs: Vec<OnlineReq>,
    pub free_reqs: Vec<u32>,
    pub arrival_rng: SimRng,
    pub response: LatencyHistogram,
    pub completed: u64,
    /// The completed requests' response times, in parts.
    pub request_time: crate::exectime::RequestTime,
}

pub(crate) struct Process {
    spec: ProcessSpec,
    /// Its file (`pagecache`).
    file: u32,
    state: ProcState,
    instructions: u64,
    ios: u64,
    io_latency: LatencyHistogram,
    /// When its first application-level I/O (read/write call) started.
    first_io_at: Option<engine::SimTime>,
}

impl Process {
    /// Process `spec`, working on file `file`, its kind's state `state`; nothing run yet.
    pub(crate) fn new(spec: ProcessSpec, file: u32, state: ProcState) -> Process {
        Process {
            spec,
            file,
            state,
            instructions: 0,
            ios: 0,
            io_latency: LatencyHistogram::new(),
            first_io_at: None,
        }
    }

    pub(crate) fn spec(&self) -> &ProcessSpec {
        &self.spec
    }

    /// The file its I/Os go to.
    pub(crate) fn file(&self) -> u32 {
        self.file
    }

    /// The state of an online service (only its threads and its client's events ask).
    pub(crate) fn online(&mut self) -> &mut OnlineState {
        match &mut self.state {
            ProcState::Online(o) => o,
            _ => unreachable!("process `{}` is not an online service", self.spec.name),
        }
    }

    /// The results of a fio process's jobs so far (only its threads ask).
    pub(crate) fn fio_jobs(&mut self) -> &mut [FioJobResult] {
        match &mut self.state {
            ProcState::Fio { jobs } => jobs,
            _ => unreachable!("process `{}` is not a fio process", self.spec.name),
        }
    }

    /// Its threads executed `n` more instructions.
    pub(crate) fn count_instructions(&mut self, n: u64) {
        self.instructions += n;
    }

    /// One of its threads enters a read or write call at `now` (the first one's start is kept).
    pub(crate) fn note_io_call(&mut self, now: engine::SimTime) {
        self.first_io_at.get_or_insert(now);
    }

    /// A read or write call returned after `latency_ns`.
    pub(crate) fn count_io(&mut self, latency_ns: u64) {
        self.ios += 1;
        self.io_latency.record(latency_ns);
    }

    /// Its results: its threads' CPU time (`cpu_user_ns`, `cpu_kernel_ns`) and where their
    /// lives went (`exec_time`, checked here) come from the scheduler.
    pub(crate) fn report(
        &self,
        cpu_user_ns: u64,
        cpu_kernel_ns: u64,
        exec_time: crate::exectime::ExecTime,
    ) -> ProcessReport {
        exec_time.check(&self.spec.name);
        let (requests, unfinished, response, fio_jobs) = match &self.state {
            ProcState::Online(o) => (
                o.completed,
                o.reqs.iter().filter(|r| r.live).count() as u64,
                o.response.clone(),
                Vec::new(),
            ),
            ProcState::Offline => (0, 0, LatencyHistogram::new(), Vec::new()),
            ProcState::Fio { jobs } => (0, 0, LatencyHistogram::new(), jobs.clone()),
        };
        let request_time = match &self.state {
            ProcState::Online(o) => {
                assert_eq!(
                    o.request_time.requests, o.completed,
                    "process `{}`: every completed request is split",
                    self.spec.name
                );
                Some(o.request_time.clone())
            }
            _ => None,
        };
        ProcessReport {
            name: self.spec.name.clone(),
            workload: self.spec.workload_name(),
            class: self.spec.class,
            kind: self.spec.kind(),
            requests,
            unfinished_requests: unfinished,
            response,
            instructions: self.instructions,
            ios: self.ios,
            io_latency: self.io_latency.clone(),
            fio_jobs,
            start_ns: self.spec.start.as_ns(),
            cpu_user_ns,
            cpu_kernel_ns,
            first_io_ns: self.first_io_at.map(engine::SimTime::as_ns),
            exec_time,
            request_time,
        }
    }
}

/// Results of one process.
#[derive(Clone, Debug)]
pub struct ProcessReport {
    pub name: String,
    /// The profile's name (online, offline), or the fio job file or trace read (fio, trace).
    pub workload: String,
    pub class: IoClass,
    pub kind: ProcessKind,
    /// Online: requests completed (reply received by the client).
    pub requests: u64,
    /// Online: requests sent and not answered by the end of the run.
    pub unfinished_requests: u64,
    pub response: LatencyHistogram,
    /// Instructions executed by the process's threads.
    pub instructions: u64,
    /// Application-level I/Os completed (read/write calls).
    pub ios: u64,
    /// Application-level I/O latency (call to return).
    pub io_latency: LatencyHistogram,
    pub fio_jobs: Vec<FioJobResult>,
    /// When the process started (`ProcessSpec::start`), ns.
    pub start_ns: u64,
    /// CPU time of the process's threads in user code, ns.
    pub cpu_user_ns: u64,
    /// CPU time of the process's threads in the kernel, in thread context, ns (see
    /// `FioJobResult::cpu_kernel_ns`).
    pub cpu_kernel_ns: u64,
    /// When its first application-level I/O call started, ns (None: it made none).
    pub first_io_ns: Option<u64>,
    /// Where its threads' wall-clock time went (`exectime`).
    pub exec_time: crate::exectime::ExecTime,
    /// Online: its completed requests' response times, in parts (`exectime`).
    pub request_time: Option<crate::exectime::RequestTime>,
}
