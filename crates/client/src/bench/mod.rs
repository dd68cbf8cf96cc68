//! `ullstack bench`: load from several tenants at once against a live `ullstack serve`, with
//! per-tenant IOPS, MB/s and HDR latency percentiles.
//!
//! # What it models
//! The tenants of a shared remote-flash server, as the ReFlex experiments run them with
//! mutilate: latency-critical tenants that offer a fixed rate whatever the server does, and
//! best-effort tenants that take what they can get.
//!
//! # Design
//! * **Tenants → connections.** Each tenant opens `conns` connections, authenticates as itself
//!   and registers a flow on each (an LC tenant's SLO IOPS are split evenly, so the server
//!   reserves the tenant's SLO once in total, not once per connection). Tenants register in
//!   the order given, so admission control sees them in that order; a refused tenant is
//!   reported with the server's reason and sends nothing.
//! * **Open loop** (`rate=`, and LC tenants by default): every connection draws Poisson
//!   arrivals at its share of the rate from its own seeded stream, and each request's latency
//!   is measured **from its scheduled arrival time**, not from when it was actually sent, so a
//!   slow server cannot hide its queueing by slowing the generator down (coordinated
//!   omission). The generator sleeps on a Linux timerfd ([`timer`]: tokio's
//!   timer has 1 ms granularity, and 120 000 IOPS means one arrival every 8 µs) when the next
//!   arrival is more than [`SPIN_THRESHOLD_NS`] away (waking [`TIMER_EARLY_NS`] early), and
//!   spins (yielding to other tasks) closer than that; every arrival already due is sent at
//!   once. The report gives the send lag (scheduled → sent) so a generator that fell behind
//!   on a busy machine is visible rather than blamed on the server.
//!   At most [`OPEN_LOOP_IN_FLIGHT_CAP`] requests per connection are outstanding; arrivals
//!   beyond that wait (and the wait is counted in their latency, and reported as late sends).
//! * **Closed loop** (`qd=`, BE tenants by default): `qd` requests in flight per tenant (split
//!   over its connections), each completion immediately replaced; latency from send.
//! * Each connection is one task on a multi-threaded runtime (`threads` workers), keeping its
//!   requests in a `FuturesUnordered` and its own histograms, so recording takes no lock;
//!   histograms are merged per tenant at the end.
//! * **Bounds.** The run stops issuing at `duration` (after `warmup`, whose completions are
//!   not recorded) or when each tenant has issued `ios` requests, whichever comes first, then
//!   waits for what is in flight.
//!
//! Worked example: `--tenant name=A,class=lc,iops=120k,p95=500us,conns=2 --duration 10s`
//! opens two connections, registers LC(p95 500 µs, 60 000 IOPS) on each, and offers 60 000
//! Poisson arrivals per second on each; the report gives A's IOPS (≈ 120 000 if the server
//! keeps up), MB/s (≈ 491 for 4 KiB) and read latency p50/p95/p99/p99.9/max, and marks the SLO
//! met if p95 ≤ 500 µs and IOPS ≥ 95 % of 120 000.
//!
//! # What it leaves out
//! No think-time distributions other than Poisson, no per-request size distributions (one
//! size per tenant), no verification of read data (see the client tests for that).
//!
//! # Keys
//! The tenant keys and scenario-file keys are documented in [`spec`].

pub mod gen;
pub mod overrides;
pub mod report;
pub mod spec;
pub mod timer;
pub mod trace;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use thiserror::Error;

use crate::connection::{register_class, Client, Credentials, TenantHandle};
use crate::error::ClientError;
use gen::{stream_seed, OpKind, RequestGen};
use proto::wire::WriteMode;
use report::{tenant_report, BenchReport, ConnStats};
pub use spec::{Load, Pattern, Registration, Scenario, SpecError, TenantSpec};

/// Closer than this to the next arrival, the open-loop generator spins (yielding) instead of
/// sleeping on its timerfd: about what a wake-up costs on a busy machine.
pub const SPIN_THRESHOLD_NS: u64 = 50_000;
/// The timerfd sleep ends this long before the arrival, and the rest is spun, so a slow
/// thread wake-up does not delay the send.
pub const TIMER_EARLY_NS: u64 = 25_000;
/// Without a timerfd (creation failed), tokio's 1 ms timer is used for waits above this, and
/// the generator spins below it.
const COARSE_SPIN_THRESHOLD_NS: u64 = 2_000_000;
/// With tokio's timer, wake this long before the arrival to absorb its lateness.
const COARSE_SLEEP_SLACK_NS: u64 = 1_500_000;
/// Open loop: most requests outstanding per connection before arrivals are sent late.
pub const OPEN_LOOP_IN_FLIGHT_CAP: usize = 4096;
/// How often the progress line updates.
const PROGRESS_INTERVAL_MS: u64 = 500;
/// Default run length when neither duration nor I/O count is given.
pub const DEFAULT_DURATION_NS: u64 = 10_000_000_000;

/// A whole run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// `host:port` of the server's own-protocol listener.
    pub server: String,
    /// Measured time after the warm-up (`None` with `ios` set: until the I/Os are done).
    pub duration_ns: Option<u64>,
    /// Requests per tenant (`None`: until the duration ends).
    pub ios_per_tenant: Option<u64>,
    pub warmup_ns: u64,
    /// Runtime worker threads.
    pub threads: usize,
    pub seed: u64,
    pub tenants: Vec<TenantSpec>,
    pub progress: Progress,
    /// TLS for every connection (None: plain TCP).
    pub tls: Option<crate::ClientTls>,
}

/// Whether to draw a progress line on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A progress bar on stderr when it is a terminal.
    Bar,
    Hidden,
}

/// Why a run could not happen.
#[derive(Debug, Error)]
pub enum BenchError {
    #[error("no tenants: give --tenant or a scenario with [[tenant]] tables")]
    NoTenants,
    #[error("tenant {tenant:?}, connection {connection}: {source}")]
    Connect {
        tenant: String,
        connection: u32,
        #[source]
        source: ClientError,
    },
    #[error("tenant {tenant:?}: request size {size_bytes} bytes exceeds the server's maximum of {max_bytes}")]
    TooLarge {
        tenant: String,
        size_bytes: u32,
        max_bytes: u32,
    },
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("tenant {tenant:?}: {message}")]
    Trace { tenant: String, message: String },
}

/// Where a connection's requests come from.
enum Source {
    Synthetic(RequestGen),
    Trace(Box<trace::TraceGen>),
}

impl Source {
    /// When the next open-loop request is due; `None` when there are no more.
    fn peek_arrival_ns(&mut self) -> Option<u64> {
        match self {
            Source::Synthetic(g) => Some(g.peek_arrival_ns()),
            Source::Trace(t) => t.peek_arrival_ns(),
        }
    }

    /// Consumes the arrival [`peek_arrival_ns`](Self::peek_arrival_ns) returned (a trace's
    /// is consumed with its request).
    fn take_arrival(&mut self) {
        if let Source::Synthetic(g) = self {
            g.take_arrival_ns();
        }
    }

    /// Read or write, offset and length of the next request; `None` when there are no more.
    fn next_op(&mut self, size_bytes: u32) -> Option<(OpKind, u64, u32)> {
        match self {
            Source::Synthetic(g) => {
                let (kind, offset) = g.next_op();
                Some((kind, offset, size_bytes))
            }
            Source::Trace(t) => t.next_op(),
        }
    }
}

/// Run the benchmark (blocking: builds its own runtime).
pub fn run(config: &BenchConfig) -> Result<BenchReport, BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads.max(1))
        .on_thread_start(timer::set_fine_timer_slack)
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    runtime.block_on(run_async(config))
}

struct Conn {
    tenant: usize,
    index: u32,
    client: Client,
    handle: TenantHandle,
}

/// Run the benchmark on the current runtime.
pub async fn run_async(config: &BenchConfig) -> Result<BenchReport, BenchError> {
    if config.tenants.is_empty() {
        return Err(BenchError::NoTenants);
    }
    // Connect and register, tenant by tenant, in order.
    let mut conns: Vec<Conn> = Vec::new();
    let mut refused: BTreeMap<usize, String> = BTreeMap::new();
    for (ti, t) in config.tenants.iter().enumerate() {
        let creds = Credentials {
            tenant: t.name.clone(),
            secret: t.secret.clone(),
            volume: t.volume.clone(),
        };
        for ci in 0..t.connections {
            let connect_err = |source| BenchError::Connect {
                tenant: t.name.clone(),
                connection: ci,
                source,
            };
            let client = match &config.tls {
                Some(tls) => Client::connect_tls(config.server.as_str(), &creds, tls).await,
                None => Client::connect(config.server.as_str(), &creds).await,
            }
            .map_err(connect_err)?;
            let max = client.session().max_payload_bytes;
            // A trace tenant's size is a cap: its requests are cut to the server's maximum.
            if t.size_bytes > max && t.trace.is_none() {
                return Err(BenchError::TooLarge {
                    tenant: t.name.clone(),
                    size_bytes: t.size_bytes,
                    max_bytes: max,
                });
            }
            let handle = match (t.registration, t.class) {
                (Registration::DefaultFlow, _) => Ok(TenantHandle::DEFAULT),
                (Registration::Register, qos::TenantSpec::LatencyCritical(slo)) => {
                    let share = split(slo.iops, t.connections, ci).max(1);
                    let slo = qos::LcSlo { iops: share, ..slo };
                    client
                        .register(register_class(&qos::TenantSpec::LatencyCritical(slo)))
                        .await
                }
                (Registration::Register, be @ qos::TenantSpec::BestEffort(_)) => {
                    client.register(register_class(&be)).await
                }
            };
            match handle {
                Ok(handle) => conns.push(Conn {
                    tenant: ti,
                    index: ci,
                    client,
                    handle,
                }),
                Err(ClientError::Refused { code, reason }) => {
                    refused.insert(ti, format!("{reason} ({code:?})"));
                    break;
                }
                Err(e) => return Err(connect_err(e)),
            }
        }
    }
    // A tenant refused on a later connection gives back what its earlier ones got.
    let (dropped, mut conns): (Vec<Conn>, Vec<Conn>) = conns
        .into_iter()
        .partition(|c| refused.contains_key(&c.tenant));
    for c in dropped {
        let _ = c.client.unregister(c.handle).await;
    }

    let warmup = Duration::from_nanos(config.warmup_ns);
    let duration_ns = match (config.duration_ns, config.ios_per_tenant) {
        // Trace tenants alone end with their traces.
        (None, None) if config.tenants.iter().all(|t| t.trace.is_some()) => None,
        (None, None) => Some(DEFAULT_DURATION_NS),
        (d, _) => d,
    };
    let start = Instant::now() + Duration::from_millis(10);
    let measure_from = start + warmup;
    let stop_at = duration_ns.map(|d| measure_from + Duration::from_nanos(d));
    let completed = Arc::new(AtomicU64::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let progress = spawn_progress(config, completed.clone(), running.clone());

    let mut tasks = Vec::new();
    for c in conns.drain(..) {
        let t = &config.tenants[c.tenant];
        let volume = c.client.session().volume_size_bytes;
        let region = t.span_bytes.map_or(volume, |s| s.min(volume));
        let rate = match t.load {
            Load::Open { iops } => iops as f64 / f64::from(t.connections),
            Load::Closed { .. } | Load::Trace { .. } => 0.0,
        };
        let seed = stream_seed(config.seed, c.tenant as u64, u64::from(c.index));
        let mut gen = RequestGen::new(
            seed,
            region,
            t.size_bytes,
            t.read_pct,
            t.pattern,
            c.index,
            t.connections,
            rate,
        );
        let size_bytes = match &t.trace {
            Some(_) => t.size_bytes.min(c.client.session().max_payload_bytes),
            None => t.size_bytes,
        };
        let mut data = vec![0u8; size_bytes as usize];
        gen.fill(&mut data);
        let source = match &t.trace {
            None => Source::Synthetic(gen),
            Some(load) => {
                let pacing = match t.load {
                    Load::Trace { speed_per_mille } => {
                        workload::trace::Pacing::OpenLoop { speed_per_mille }
                    }
                    Load::Closed { queue_depth } => workload::trace::Pacing::ClosedLoop {
                        queue_depth: queue_depth.max(1),
                    },
                    Load::Open { .. } => unreachable!("spec: trace= excludes rate="),
                };
                let tg =
                    trace::TraceGen::open(load, region, pacing, c.index, t.connections, size_bytes)
                        .map_err(|message| BenchError::Trace {
                            tenant: t.name.clone(),
                            message,
                        })?;
                Source::Trace(Box::new(tg))
            }
        };
        let job = ConnJob {
            client: c.client,
            handle: c.handle,
            gen: source,
            size_bytes,
            write_mode: t.write_mode,
            data: Arc::new(data),
            start,
            measure_from,
            stop_at,
            budget: config
                .ios_per_tenant
                .map(|n| split(n, t.connections, c.index)),
            completed: completed.clone(),
        };
        let load = t.load;
        let connections = t.connections;
        let index = c.index;
        let tenant = c.tenant;
        tasks.push(tokio::spawn(async move {
            let stats = match load {
                Load::Open { .. } | Load::Trace { .. } => job.open_loop().await,
                Load::Closed { queue_depth } => {
                    job.closed_loop(
                        split(u64::from(queue_depth), connections, index).max(1) as usize
                    )
                    .await
                }
            };
            (tenant, stats)
        }));
    }
    let mut per_tenant: BTreeMap<usize, ConnStats> = BTreeMap::new();
    for task in tasks {
        // A panicking connection task is a bug in this module; report its tenant as empty.
        if let Ok((tenant, stats)) = task.await {
            per_tenant
                .entry(tenant)
                .or_insert_with(ConnStats::new)
                .merge(&stats);
        }
    }
    let end = Instant::now();
    running.store(false, Ordering::Release);
    if let Some(p) = progress {
        let _ = p.await;
    }
    let window_s = match stop_at {
        Some(stop) => stop.saturating_duration_since(measure_from),
        None => end.saturating_duration_since(measure_from),
    }
    .as_secs_f64()
    .max(1e-9);

    let tenants: Vec<_> = config
        .tenants
        .iter()
        .enumerate()
        .map(|(i, t)| tenant_report(t, per_tenant.get(&i), refused.get(&i).cloned(), window_s))
        .collect();
    Ok(BenchReport {
        server: config.server.clone(),
        seed: config.seed,
        threads: config.threads,
        window_s,
        warmup_s: warmup.as_secs_f64(),
        total_iops: tenants.iter().map(|t| t.iops).sum(),
        total_mb_per_s: tenants.iter().map(|t| t.mb_per_s).sum(),
        tenants,
    })
}

/// `total` split over `parts`: part `i` gets its share, the first ones one more.
fn split(total: u64, parts: u32, i: u32) -> u64 {
    let parts = u64::from(parts.max(1));
    total / parts + u64::from(u64::from(i) < total % parts)
}

fn spawn_progress(
    config: &BenchConfig,
    completed: Arc<AtomicU64>,
    running: Arc<AtomicBool>,
) -> Option<tokio::task::JoinHandle<()>> {
    if config.progress == Progress::Hidden {
        return None;
    }
    let total_ns = config.warmup_ns + config.duration_ns.unwrap_or(0);
    let bar = if total_ns > 0 {
        indicatif::ProgressBar::new(total_ns / 1_000_000)
    } else {
        indicatif::ProgressBar::new_spinner()
    };
    if bar.is_hidden() {
        return None;
    }
    let style = indicatif::ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {msg}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    Some(tokio::spawn(async move {
        let t0 = Instant::now();
        let mut last = (t0, 0u64);
        while running.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(PROGRESS_INTERVAL_MS)).await;
            let now = Instant::now();
            let done = completed.load(Ordering::Relaxed);
            let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
            last = (now, done);
            bar.set_position(now.duration_since(t0).as_millis() as u64);
            bar.set_message(format!("{rate:>10.0} IOPS  {done} I/Os done"));
        }
        bar.finish_and_clear();
    }))
}

/// One finished request.
struct Done {
    kind: OpKind,
    bytes: u32,
    /// When it should have been sent (open loop) or was sent (closed loop).
    origin: Instant,
    result: Result<(), ClientError>,
}

struct ConnJob {
    client: Client,
    handle: TenantHandle,
    gen: Source,
    size_bytes: u32,
    write_mode: WriteMode,
    data: Arc<Vec<u8>>,
    start: Instant,
    measure_from: Instant,
    stop_at: Option<Instant>,
    budget: Option<u64>,
    completed: Arc<AtomicU64>,
}

/// Everything one request needs, owned, so its future is `'static`.
struct IoRequest {
    client: Client,
    handle: TenantHandle,
    kind: OpKind,
    offset_bytes: u64,
    size_bytes: u32,
    data: Arc<Vec<u8>>,
    write_mode: WriteMode,
    origin: Instant,
}

async fn one_io(r: IoRequest) -> Done {
    let result = match r.kind {
        OpKind::Read => r
            .client
            .read(r.handle, r.offset_bytes, r.size_bytes)
            .await
            .map(drop),
        // Exactly the request's bytes: a trace tenant's buffer is its largest request (1 MiB
        // by default), and most of its records are smaller.
        OpKind::Write => {
            r.client
                .write(
                    r.handle,
                    r.offset_bytes,
                    &r.data[..r.size_bytes as usize],
                    r.write_mode,
                )
                .await
        }
    };
    Done {
        kind: r.kind,
        bytes: r.size_bytes,
        origin: r.origin,
        result,
    }
}

impl ConnJob {
    fn take_budget(&mut self) -> bool {
        match &mut self.budget {
            None => true,
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }

    /// The next request's future; `None` when the source has no more.
    fn issue(
        &mut self,
        origin: Instant,
    ) -> Option<impl std::future::Future<Output = Done> + use<>> {
        let (kind, offset_bytes, size_bytes) = self.gen.next_op(self.size_bytes)?;
        Some(one_io(IoRequest {
            client: self.client.clone(),
            handle: self.handle,
            kind,
            offset_bytes,
            size_bytes,
            data: self.data.clone(),
            write_mode: self.write_mode,
            origin,
        }))
    }

    /// A trace that stopped at a bad line counts as one error of the tenant; skipped bad
    /// lines are noted.
    fn note_trace_error(&mut self, stats: &mut ConnStats) {
        if let Source::Trace(t) = &mut self.gen {
            if let Some(e) = t.error.take() {
                *stats.errors.entry(e).or_default() += 1;
            }
            let (skipped, first) = t.skipped_lines();
            stats.trace_bad_lines_skipped = skipped;
            stats.trace_first_bad_line = first.map(str::to_owned);
        }
    }

    fn record(&self, stats: &mut ConnStats, done: Done) {
        let now = Instant::now();
        self.completed.fetch_add(1, Ordering::Relaxed);
        if done.origin < self.measure_from {
            return;
        }
        if let Some(stop) = self.stop_at {
            if done.origin >= stop {
                return;
            }
        }
        match done.result {
            Ok(()) => {
                let ns = now.saturating_duration_since(done.origin).as_nanos() as u64;
                let (hist, bytes) = match done.kind {
                    OpKind::Read => (&mut stats.read_ns, &mut stats.read_bytes),
                    OpKind::Write => (&mut stats.write_ns, &mut stats.write_bytes),
                };
                hist.record(ns);
                *bytes += u64::from(done.bytes);
            }
            Err(e) => {
                let key = match &e {
                    ClientError::Server { status, .. } => status.to_string(),
                    ClientError::Closed => "connection closed".to_owned(),
                    other => other.to_string(),
                };
                *stats.errors.entry(key).or_default() += 1;
            }
        }
    }

    fn past_stop(&self, t: Instant) -> bool {
        self.stop_at.is_some_and(|s| t >= s)
    }

    async fn closed_loop(mut self, queue_depth: usize) -> ConnStats {
        let mut stats = ConnStats::new();
        tokio::time::sleep_until(self.start.into()).await;
        let mut in_flight = FuturesUnordered::new();
        for _ in 0..queue_depth {
            if !self.take_budget() {
                break;
            }
            match self.issue(Instant::now()) {
                Some(io) => in_flight.push(io),
                None => break,
            }
        }
        while let Some(done) = in_flight.next().await {
            let failed_closed = matches!(done.result, Err(ClientError::Closed));
            self.record(&mut stats, done);
            let now = Instant::now();
            if failed_closed
                || self.client.is_closed()
                || self.past_stop(now)
                || !self.take_budget()
            {
                continue;
            }
            if let Some(io) = self.issue(now) {
                in_flight.push(io);
            }
        }
        self.note_trace_error(&mut stats);
        stats
    }

    async fn open_loop(mut self) -> ConnStats {
        let mut stats = ConnStats::new();
        let mut in_flight = FuturesUnordered::new();
        let mut precise = match timer::PreciseTimer::new() {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "no timerfd; open-loop arrivals use the 1 ms tokio timer and spinning");
                None
            }
        };
        loop {
            let now = Instant::now();
            // Issue every arrival that is due.
            let mut exhausted = false;
            loop {
                let Some(at_ns) = self.gen.peek_arrival_ns() else {
                    exhausted = true;
                    break;
                };
                let at = self.start + Duration::from_nanos(at_ns);
                if at > now {
                    break;
                }
                if self.past_stop(at) || self.client.is_closed() || !self.take_budget() {
                    exhausted = true;
                    break;
                }
                if in_flight.len() >= OPEN_LOOP_IN_FLIGHT_CAP {
                    stats.late_sends += 1;
                    if let Some(done) = in_flight.next().await {
                        self.record(&mut stats, done);
                    }
                }
                self.gen.take_arrival();
                if at >= self.measure_from {
                    let lag = Instant::now().saturating_duration_since(at);
                    stats.send_lag_ns.record(lag.as_nanos() as u64);
                }
                match self.issue(at) {
                    Some(io) => in_flight.push(io),
                    None => {
                        exhausted = true;
                        break;
                    }
                }
            }
            // Collect what has completed without waiting.
            while let Some(Some(done)) = in_flight.next().now_or_never() {
                self.record(&mut stats, done);
            }
            if exhausted {
                break;
            }
            let Some(next_ns) = self.gen.peek_arrival_ns() else {
                break;
            };
            let next_at = self.start + Duration::from_nanos(next_ns);
            let wait_ns = next_at.saturating_duration_since(Instant::now()).as_nanos() as u64;
            let early = Duration::from_nanos(TIMER_EARLY_NS);
            match &mut precise {
                Some(timer) if wait_ns > SPIN_THRESHOLD_NS => {
                    if in_flight.is_empty() {
                        let _ = timer.sleep_until(next_at - early).await;
                    } else {
                        tokio::select! {
                            Some(done) = in_flight.next() => self.record(&mut stats, done),
                            _ = timer.sleep_until(next_at - early) => {}
                        }
                    }
                }
                None if wait_ns > COARSE_SPIN_THRESHOLD_NS => {
                    let wake = next_at - Duration::from_nanos(COARSE_SLEEP_SLACK_NS);
                    if in_flight.is_empty() {
                        tokio::time::sleep_until(wake.into()).await;
                    } else {
                        tokio::select! {
                            Some(done) = in_flight.next() => self.record(&mut stats, done),
                            _ = tokio::time::sleep_until(wake.into()) => {}
                        }
                    }
                }
                _ => tokio::task::yield_now().await,
            }
        }
        while let Some(done) = in_flight.next().await {
            self.record(&mut stats, done);
        }
        self.note_trace_error(&mut stats);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn split_distributes_the_remainder() {
        let parts: Vec<u64> = (0..3).map(|i| split(10, 3, i)).collect();
        assert_eq!(parts, [4, 3, 3]);
        assert_eq!((0..7).map(|i| split(120_000, 7, i)).sum::<u64>(), 120_000);
    }
}
