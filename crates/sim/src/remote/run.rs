//! The event loop of a remote run: clients, links, dataplane threads and the device model.

use std::collections::VecDeque;
use std::time::Instant;

use device::{DeviceOptions, NvmeCommand, SqPriority, Ssd, SECTOR_BYTES};
use engine::{stream, EventQueue, IoClass, IoOp, LatencyHistogram, SimRng, SimTime};
use qos::{Flow, SchedShare, SchedulerMode};
use scenario::{Load, Pattern, TenantResult, TenantSpec};
use serde::Serialize;

use super::config::RemoteRunConfig;
use crate::net::{Link, MESSAGE_HEADER_BYTES};

/// NVMe submission-queue entries per dataplane thread (the server's emulated backend default).
pub const SQ_DEPTH: u32 = 1024;
/// After the last arrival, the run must drain within this much simulated time.
pub const DRAIN_LIMIT_NS: u64 = 10_000_000_000;

/// What stops a remote run.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error(transparent)]
    Config(#[from] super::config::RemoteConfigError),
    #[error(transparent)]
    Device(#[from] device::config::ConfigError),
    #[error("tenant {tenant:?} refused by admission control: {reason}")]
    Refused { tenant: String, reason: String },
    #[error("tenant {tenant:?}: {problem}")]
    Tenant { tenant: String, problem: String },
    #[error("the run did not drain within {DRAIN_LIMIT_NS} ns after its last arrival: {0}")]
    NoDrain(String),
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// An open-loop connection's next arrival.
    Arrival { conn: u32 },
    /// A request's last byte is at the server's NIC.
    AtServer { req: u32 },
    /// A dataplane thread runs a loop iteration.
    Step { worker: u32 },
    /// A reply is in the client application.
    AtClient { req: u32 },
}

struct Conn {
    tenant: u32,
    worker: u32,
    flow: Flow,
    link: Link,
    rng: SimRng,
    /// Open loop: mean gap between arrivals, ns. Closed loop: None.
    mean_gap_ns: Option<u64>,
    queue_depth: u32,
    next_seq_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct Req {
    conn: u32,
    op: IoOp,
    offset_bytes: u64,
    len_bytes: u64,
    issued: SimTime,
    /// Its price, set when the dataplane reads it (the scheduler's price at that moment).
    cost_mtok: u64,
}

struct Worker {
    sched: SchedShare,
    /// Requests at the NIC, not yet read, in arrival order.
    inbox: VecDeque<u32>,
    /// Released by the scheduler, waiting for a free submission-queue entry.
    released: VecDeque<u32>,
    /// Completed by the device, not yet reaped.
    done: Vec<u32>,
    sqid: u16,
    in_device: u32,
    busy_until: SimTime,
    /// The time of the one live `Step` event, if any (others are stale).
    step_at: Option<SimTime>,
    busy_ns: u64,
    steps: u64,
}

#[derive(Default)]
struct TenantAcc {
    read: LatencyHistogram,
    write: LatencyHistogram,
    tokens_mtok: u64,
}

/// A remote run's results.
#[derive(Clone, Debug, Serialize)]
pub struct RemoteSummary {
    pub scheduler: SchedulerMode,
    pub workers: u32,
    pub device: String,
    pub profile: String,
    pub seed: u64,
    pub duration_ns: u64,
    pub warmup_ns: u64,
    pub tenants: Vec<TenantResult>,
    /// Busy share of each dataplane thread over the whole run, percent.
    pub worker_busy_pct: Vec<f64>,
    /// Commands the dataplane submitted to the device during the measured window, per second:
    /// what the server sustained. The tenants' IOPS count every request *issued* in the window
    /// (served whenever), so they equal the offered load even when the server falls behind;
    /// this one does not, and is how the `reflex` study tells a saturated thread.
    pub device_iops_in_window: f64,
    pub events: u64,
    pub wall_ms: u64,
}

impl RemoteSummary {
    pub fn tenant(&self, name: &str) -> Option<&TenantResult> {
        self.tenants.iter().find(|t| t.name == name)
    }

    /// The run as `ullstack sim --remote` prints it: one line of settings, a row per tenant
    /// (IOPS, read latency percentiles in µs, tokens/s, whether its SLO was met), and each
    /// dataplane thread's busy share.
    pub fn table(&self) -> String {
        let mut o = format!(
            "remote: {} threads, scheduler {:?}, device {}, profile {}, {} ms measured, seed {}\n",
            self.workers,
            self.scheduler,
            self.device,
            self.profile,
            self.duration_ns / 1_000_000,
            self.seed
        );
        o += &format!(
            "{:<12} {:>5} {:>10} {:>10} {:>10} {:>10} {:>12} {:>6}\n",
            "tenant", "class", "IOPS", "p50 µs", "p95 µs", "p99 µs", "tokens/s", "SLO"
        );
        for t in &self.tenants {
            o += &format!(
                "{:<12} {:>5} {:>10.0} {:>10.1} {:>10.1} {:>10.1} {:>12.0} {:>6}\n",
                t.name,
                t.class,
                t.iops,
                t.read_latency_ns_p50 as f64 / 1e3,
                t.read_latency_ns_p95 as f64 / 1e3,
                t.read_latency_ns_p99 as f64 / 1e3,
                t.tokens_per_sec,
                match t.slo_met {
                    Some(true) => "met",
                    Some(false) => "MISSED",
                    None => "-",
                }
            );
        }
        o += &format!(
            "dataplane threads busy: {}\n",
            self.worker_busy_pct
                .iter()
                .map(|p| format!("{p:.0} %"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        o
    }
}

struct Run<'a> {
    cfg: &'a RemoteRunConfig,
    ssd: Ssd,
    events: EventQueue<Ev>,
    conns: Vec<Conn>,
    workers: Vec<Worker>,
    reqs: Vec<Req>,
    free_reqs: Vec<u32>,
    accs: Vec<TenantAcc>,
    span_bytes: Vec<u64>,
    measure_from: SimTime,
    stop_at: SimTime,
    live: u64,
    /// Device submissions at a time inside the measured window.
    submitted_in_window: u64,
    scratch: Vec<qos::RequestId>,
    _registry: Option<qos::Registry>,
}

/// Runs a remote scenario to the end.
pub fn run(cfg: &RemoteRunConfig) -> Result<RemoteSummary, RemoteError> {
    let wall = Instant::now();
    let mut r = Run::new(cfg)?;
    let events = r.run()?;
    Ok(r.summarise(events, wall.elapsed().as_millis() as u64))
}

impl<'a> Run<'a> {
    fn new(cfg: &'a RemoteRunConfig) -> Result<Run<'a>, RemoteError> {
        let m = &cfg.server;
        let mut ssd = Ssd::with_seed(&m.device, DeviceOptions { integrity: false }, cfg.seed)?;
        let capacity = ssd.capacity_bytes();
        let mut registry = (m.scheduler == SchedulerMode::On).then(|| {
            qos::Registry::new(
                m.profile.clone(),
                qos::RegistryConfig {
                    lc_surge_pct: m.lc_surge_pct,
                    // The headroom rule counts on the schedulers' burst allowance.
                    deficit_limit: m.tuning.deficit_limit,
                    lc_borrows_spare: m.tuning.lc_borrows_spare,
                    ..qos::RegistryConfig::default()
                },
            )
        });
        let shared = match &registry {
            Some(r) => r.shared(),
            None => qos::Registry::new(m.profile.clone(), qos::RegistryConfig::default()).shared(),
        };
        let mut workers = Vec::new();
        for w in 0..m.workers {
            let sqid = w as u16 + 1;
            ssd.create_queue_pair(sqid, sqid, SQ_DEPTH + 1, SqPriority::Medium);
            workers.push(Worker {
                sched: SchedShare::new(m.scheduler, shared.clone(), m.tuning)
                    .map_err(|e| super::config::RemoteConfigError::Sim(format!("tuning: {e}")))?,
                inbox: VecDeque::new(),
                released: VecDeque::new(),
                done: Vec::new(),
                sqid,
                in_device: 0,
                busy_until: SimTime::ZERO,
                step_at: None,
                busy_ns: 0,
                steps: 0,
            });
        }
        let mut conns = Vec::new();
        let mut span_bytes = Vec::new();
        let mut next_worker = 0u32;
        for (ti, t) in cfg.tenants.iter().enumerate() {
            check_tenant(t)?;
            let span = t.span_bytes.unwrap_or(capacity).min(capacity);
            span_bytes.push(span - span % u64::from(t.size_bytes));
            let n = t.connections;
            for c in 0..n {
                let worker = next_worker % m.workers;
                next_worker += 1;
                let spec = match t.class {
                    qos::TenantSpec::LatencyCritical(slo) => {
                        qos::TenantSpec::LatencyCritical(qos::LcSlo {
                            iops: split(slo.iops, n, c),
                            ..slo
                        })
                    }
                    be @ qos::TenantSpec::BestEffort(_) => be,
                };
                let flow = match &mut registry {
                    Some(reg) => {
                        let handle = reg.register(spec).map_err(|e| RemoteError::Refused {
                            tenant: t.name.clone(),
                            reason: e.to_string(),
                        })?;
                        workers[worker as usize].sched.attach(&handle)
                    }
                    None => Flow::Fifo,
                };
                let (mean_gap_ns, queue_depth) = match t.load {
                    Load::Open { iops } => {
                        let share = split(iops, n, c).max(1);
                        (Some(1_000_000_000 / share), 0)
                    }
                    Load::Closed { queue_depth } => (
                        None,
                        u32::try_from(split(u64::from(queue_depth), n, c))
                            .unwrap_or(1)
                            .max(1),
                    ),
                    Load::Trace { .. } => {
                        unreachable!("RemoteRunConfig::from_scenario refuses trace tenants")
                    }
                };
                conns.push(Conn {
                    tenant: ti as u32,
                    worker,
                    flow,
                    link: Link::default(),
                    rng: stream(cfg.seed, &format!("remote.{}.{c}", t.name)),
                    mean_gap_ns,
                    queue_depth,
                    next_seq_bytes: 0,
                });
            }
        }
        let measure_from = SimTime(cfg.warmup_ns);
        Ok(Run {
            cfg,
            ssd,
            events: EventQueue::new(),
            conns,
            workers,
            reqs: Vec::new(),
            free_reqs: Vec::new(),
            accs: cfg.tenants.iter().map(|_| TenantAcc::default()).collect(),
            span_bytes,
            measure_from,
            stop_at: measure_from + cfg.duration_ns,
            live: 0,
            submitted_in_window: 0,
            scratch: Vec::new(),
            _registry: registry,
        })
    }

    fn run(&mut self) -> Result<u64, RemoteError> {
        for c in 0..self.conns.len() as u32 {
            let conn = &mut self.conns[c as usize];
            match conn.mean_gap_ns {
                Some(gap) => {
                    let first = engine::rng::exp_ns(&mut conn.rng, gap);
                    self.events
                        .schedule(SimTime(first), Ev::Arrival { conn: c });
                }
                None => {
                    for _ in 0..conn.queue_depth {
                        self.issue(SimTime::ZERO, c);
                    }
                }
            }
        }
        let mut cqes = Vec::new();
        let mut n = 0u64;
        let limit = self.stop_at + DRAIN_LIMIT_NS;
        loop {
            let td = self.ssd.next_event_time();
            let th = self.events.peek_time();
            let now = match (td, th) {
                (None, None) => break,
                (Some(d), h) if h.is_none_or(|h| d <= h) => {
                    self.ssd.advance_to(d, &mut cqes);
                    for c in cqes.drain(..) {
                        let req = c.cid;
                        let w = self.conns[self.reqs[req as usize].conn as usize].worker;
                        let worker = &mut self.workers[w as usize];
                        assert!(worker.in_device > 0, "a completion nobody submitted");
                        worker.in_device -= 1;
                        worker.done.push(req);
                        self.wake(w, c.at);
                    }
                    d
                }
                _ => {
                    let (t, ev) = self.events.pop().expect("peeked");
                    self.handle(t, ev);
                    t
                }
            };
            n += 1;
            if now > limit {
                return Err(RemoteError::NoDrain(format!(
                    "{} requests live at {now}",
                    self.live
                )));
            }
        }
        assert_eq!(self.live, 0, "the run ended with requests live");
        Ok(n + self.ssd.events_processed())
    }

    fn handle(&mut self, now: SimTime, ev: Ev) {
        match ev {
            Ev::Arrival { conn } => {
                if now < self.stop_at {
                    self.issue(now, conn);
                    let c = &mut self.conns[conn as usize];
                    let gap = engine::rng::exp_ns(&mut c.rng, c.mean_gap_ns.expect("open loop"));
                    self.events.schedule(now + gap, Ev::Arrival { conn });
                }
            }
            Ev::AtServer { req } => {
                let w = self.conns[self.reqs[req as usize].conn as usize].worker;
                self.workers[w as usize].inbox.push_back(req);
                self.wake(w, now);
            }
            Ev::Step { worker } => {
                if self.workers[worker as usize].step_at == Some(now) {
                    self.workers[worker as usize].step_at = None;
                    self.step(now, worker);
                }
            }
            Ev::AtClient { req } => self.at_client(now, req),
        }
    }

    /// A client issues its next request at `now`.
    fn issue(&mut self, now: SimTime, conn: u32) {
        let c = &mut self.conns[conn as usize];
        let t = &self.cfg.tenants[c.tenant as usize];
        let size = u64::from(t.size_bytes);
        let span = self.span_bytes[c.tenant as usize];
        let op = if engine::rng::chance(&mut c.rng, u64::from(t.read_pct), 100) {
            IoOp::Read
        } else {
            IoOp::Write
        };
        let offset_bytes = match t.pattern {
            Pattern::Sequential => {
                let o = c.next_seq_bytes;
                c.next_seq_bytes = (o + size) % span;
                o
            }
            _ => engine::rng::below(&mut c.rng, span / size) * size,
        };
        let bytes = MESSAGE_HEADER_BYTES + if op == IoOp::Write { size } else { 0 };
        let at = c.link.client_send(&self.cfg.server.net, now, bytes);
        let rec = Req {
            conn,
            op,
            offset_bytes,
            len_bytes: size,
            issued: now,
            cost_mtok: 0,
        };
        let id = match self.free_reqs.pop() {
            Some(i) => {
                self.reqs[i as usize] = rec;
                i
            }
            None => {
                self.reqs.push(rec);
                self.reqs.len() as u32 - 1
            }
        };
        self.live += 1;
        self.events.schedule(at, Ev::AtServer { req: id });
    }

    /// Makes sure `worker` runs an iteration at `at` or as soon after as it is free.
    fn wake(&mut self, worker: u32, at: SimTime) {
        let w = &mut self.workers[worker as usize];
        let when = at.max(w.busy_until);
        if w.step_at.is_none_or(|s| s > when) {
            w.step_at = Some(when);
            self.events.schedule(when, Ev::Step { worker });
        }
    }

    /// One run-to-completion loop iteration of a dataplane thread.
    fn step(&mut self, now: SimTime, wi: u32) {
        let m = &self.cfg.server;
        let costs = m.costs;
        let msg_ns = m.net.server_message_ns;
        let w = &mut self.workers[wi as usize];
        assert!(now >= w.busy_until, "a thread ran two iterations at once");
        let mut cpu = now + costs.loop_ns;
        // 1. Read what is at the NIC, up to the batch limit; price it and queue it.
        for _ in 0..m.batch_limit {
            let Some(req) = w.inbox.pop_front() else {
                break;
            };
            cpu += msg_ns + costs.request_ns;
            let r = &mut self.reqs[req as usize];
            let qop = if r.op == IoOp::Read {
                qos::Op::Read
            } else {
                qos::Op::Write
            };
            r.cost_mtok = w.sched.cost_mtok(qop, r.len_bytes);
            let flow = self.conns[r.conn as usize].flow;
            w.sched
                .enqueue(flow, r.cost_mtok, qos::RequestId(u64::from(req)));
        }
        // 2. The scheduling round — skipped when nothing waits, as the server's worker skips it
        // (`server::worker`, `schedule_and_submit`): earnings accrue by elapsed time at the next
        // round, and the shared bucket's max-age rule covers its resets meanwhile.
        self.scratch.clear();
        if w.sched.queued() > 0 {
            w.sched.round(cpu.as_ns(), &mut self.scratch);
        }
        w.released.extend(self.scratch.iter().map(|id| id.0 as u32));
        // 3. Submit what was released, as far as the submission queue has room.
        while w.in_device < SQ_DEPTH {
            let Some(req) = w.released.pop_front() else {
                break;
            };
            cpu += costs.submit_ns;
            let r = &self.reqs[req as usize];
            let class = match self.cfg.tenants[self.conns[r.conn as usize].tenant as usize]
                .class
                .class()
            {
                qos::TenantClass::LatencyCritical => IoClass::LatencyCritical,
                qos::TenantClass::BestEffort => IoClass::Throughput,
            };
            let cmd = NvmeCommand {
                cid: req,
                op: r.op,
                slba: r.offset_bytes / SECTOR_BYTES,
                sectors: (r.len_bytes / SECTOR_BYTES) as u32,
                class,
                hint: device::Hint::None,
                version: 0,
            };
            w.in_device += 1;
            if cpu >= self.measure_from && cpu < self.stop_at {
                self.submitted_in_window += 1;
            }
            self.ssd
                .submit(cpu, w.sqid, cmd)
                .expect("a thread never has more commands in flight than its SQ holds");
        }
        // 4. Reap completions and send the replies.
        for req in w.done.drain(..) {
            cpu += costs.complete_ns + msg_ns;
            let r = self.reqs[req as usize];
            let bytes = MESSAGE_HEADER_BYTES + if r.op == IoOp::Read { r.len_bytes } else { 0 };
            let c = &mut self.conns[r.conn as usize];
            let at = c.link.server_send(&m.net, cpu, bytes);
            self.events.schedule(at, Ev::AtClient { req });
        }
        w.busy_ns += cpu - now;
        w.steps += 1;
        w.busy_until = cpu;
        let next = if !w.inbox.is_empty() || !w.done.is_empty() {
            Some(cpu)
        } else if w.sched.queued() > 0 || (!w.released.is_empty() && w.in_device < SQ_DEPTH) {
            Some(cpu.max(now + costs.spin_round_ns))
        } else {
            None
        };
        if let Some(t) = next {
            w.step_at = Some(t);
            self.events.schedule(t, Ev::Step { worker: wi });
        }
    }

    fn at_client(&mut self, now: SimTime, req: u32) {
        let r = self.reqs[req as usize];
        self.live -= 1;
        self.free_reqs.push(req);
        let conn = r.conn;
        let tenant = self.conns[conn as usize].tenant as usize;
        if r.issued >= self.measure_from && r.issued < self.stop_at {
            let acc = &mut self.accs[tenant];
            let latency = now - r.issued;
            match r.op {
                IoOp::Read => acc.read.record(latency),
                _ => acc.write.record(latency),
            }
            acc.tokens_mtok += r.cost_mtok;
        }
        if self.conns[conn as usize].mean_gap_ns.is_none() && now < self.stop_at {
            self.issue(now, conn);
        }
    }

    fn summarise(&self, events: u64, wall_ms: u64) -> RemoteSummary {
        let secs = self.cfg.duration_ns as f64 / 1e9;
        let tenants = self
            .cfg
            .tenants
            .iter()
            .zip(&self.accs)
            .map(|(t, a)| {
                let (slo_p95, slo_iops) = match t.class {
                    qos::TenantSpec::LatencyCritical(slo) => {
                        (Some(slo.p95_read_latency_ns), Some(slo.iops))
                    }
                    qos::TenantSpec::BestEffort(_) => (None, None),
                };
                let p95 = a.read.quantile_ns(0.95);
                TenantResult {
                    name: t.name.clone(),
                    class: t.class.class(),
                    slo_p95_read_latency_ns: slo_p95,
                    slo_iops,
                    read_pct: Some(t.read_pct),
                    size_bytes: Some(t.size_bytes),
                    reads: a.read.count(),
                    writes: a.write.count(),
                    iops: (a.read.count() + a.write.count()) as f64 / secs,
                    read_latency_ns_p50: a.read.quantile_ns(0.50),
                    read_latency_ns_p95: p95,
                    read_latency_ns_p99: a.read.quantile_ns(0.99),
                    read_latency_ns_mean: a.read.mean_ns(),
                    write_latency_ns_p95: a.write.quantile_ns(0.95),
                    write_latency_ns_mean: a.write.mean_ns(),
                    tokens_per_sec: a.tokens_mtok as f64 / 1000.0 / secs,
                    slo_met: slo_p95.map(|s| a.read.count() > 0 && p95 <= s),
                    client: None,
                }
            })
            .collect();
        let end_ns = self
            .workers
            .iter()
            .map(|w| w.busy_until.as_ns())
            .max()
            .unwrap_or(0)
            .max(self.stop_at.as_ns())
            .max(1);
        RemoteSummary {
            scheduler: self.cfg.server.scheduler,
            workers: self.cfg.server.workers,
            device: self.cfg.server.device.name.clone(),
            profile: self.cfg.server.profile.name.clone(),
            seed: self.cfg.seed,
            duration_ns: self.cfg.duration_ns,
            warmup_ns: self.cfg.warmup_ns,
            tenants,
            worker_busy_pct: self
                .workers
                .iter()
                .map(|w| 100.0 * w.busy_ns as f64 / end_ns as f64)
                .collect(),
            device_iops_in_window: self.submitted_in_window as f64 / secs,
            events,
            wall_ms,
        }
    }
}

/// The c-th of n even shares of `total` (the first `total % n` get one more).
fn split(total: u64, n: u32, c: u32) -> u64 {
    let n = u64::from(n.max(1));
    total / n + u64::from(u64::from(c) < total % n)
}

fn check_tenant(t: &TenantSpec) -> Result<(), RemoteError> {
    let bad = |problem: String| RemoteError::Tenant {
        tenant: t.name.clone(),
        problem,
    };
    if u64::from(t.size_bytes) % SECTOR_BYTES != 0 {
        return Err(bad(format!(
            "size={} B: the simulated device takes multiples of {SECTOR_BYTES} B",
            t.size_bytes
        )));
    }
    if let Pattern::Zipf { .. } = t.pattern {
        return Err(bad(
            "pattern=zipf is not modelled by the simulator yet (random or seq)".into(),
        ));
    }
    Ok(())
}
