//! In-process real runs: the real half of `ullstack study reflex`.
//!
//! The harness runs the real server and load generator inside one process (server + bench +
//! CPU sampling); `cli` only wires it to the command line. Each scaled scenario file of the
//! study runs through `ullstack serve`'s server (in process, the emulated device backend, bound
//! to 127.0.0.1 on a port the kernel picks) and `ullstack bench`'s load generator, bounded by
//! the scenario's duration; a "local" run drives the emulated device directly, in process, with
//! no network and no server.
//!
//! # The server's config comes from the scenario's `[sim]` table
//! The file that bench and the twin run also says what server to start: `device` (the emulated
//! volume's model, [`REAL_VOLUME_BYTES`] of it), `profile`, `scheduler`, `workers`,
//! `lc_surge_pct` and `tuning` map to the server config's keys of the same meaning; every
//! tenant of the file becomes a config tenant with its secret, class `lc` and no fixed SLO (no
//! default flow: the registry holds exactly the flows the tenants REGISTER, as in the model;
//! a BE tenant registers a BE flow). `[sim.net]` and `[sim.costs]` are the twin's alone.
//!
//! # What is measured besides bench's report
//! * **What the server sustained**: a sampler thread reads the emulated device's command
//!   counter every [`SAMPLE_INTERVAL_MS`]; [`sustained_rate`] takes the busiest interval of
//!   the measured window's length (bench's window is not visible from here).
//! * **CPU**: each server worker's thread (`ullstack-wN`) CPU time from
//!   `/proc/self/task/TID/schedstat`, and the process's from `getrusage`; the load generator's
//!   is the process's less the workers' (the server's other threads and the sampler sleep).
//! * **Tokens/s** per tenant: its completed reads and writes at the scheduler's prices under
//!   the load mix the server's bucket reported during the run ([`tokens_per_sec`]).
//! * The machine's load average when the run started.
//!
//! # Local runs
//! One request at a time on the emulated volume's own worker handle: submit, then poll in a
//! spin with the wall clock until its completion (the model's time has passed), as a polling
//! host driver would. Latency is from submission to completion; nothing else runs.

mod sys;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::bench::{self, BenchConfig, Progress};
use qos::TenantClass;
use scenario::{ClientSide, Load, Scenario, TenantResult};
use server::backend::{Completion, Fua, StorageOp, Submitted, Volume};
use sim::remote::ServerModel;
use study::reflex::{
    sustained_rate, tokens_per_sec, Place, RealOutcome, RealRun, RealRunner, REAL_VOLUME_BYTES,
};

/// How often the sampler reads the device's command counter: 1 % of the quick study's 1 s
/// window, and cheap (an atomic load and a mutex-free read).
pub const SAMPLE_INTERVAL_MS: u64 = 10;
/// A local request not completed after this long means the model stopped: an error.
const LOCAL_REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// Submission-queue depth of the emulated volume (the server's default).
const SQ_DEPTH: u32 = 1024;

/// Runs real scenarios in this process.
pub struct InProcess;

impl RealRunner for InProcess {
    fn run(&self, run: &RealRun) -> Result<RealOutcome, String> {
        let id = &run.id;
        let scenario =
            scenario::parse_scenario(&run.scenario_toml, id).map_err(|e| e.to_string())?;
        let sim = scenario.sim.clone().unwrap_or_default();
        let model = ServerModel::from_table(&sim).map_err(|e| format!("{id}: {e}"))?;
        match run.place {
            Place::Server => run_server(run, &scenario, &sim, &model),
            Place::Device => run_device(run, &scenario, &model),
        }
    }
}

/// The server's config for a scenario (see the module essay).
pub fn server_config(scenario: &Scenario, sim: &toml::Table) -> toml::Table {
    use toml::Value;
    let get = |k: &str, default: Value| sim.get(k).cloned().unwrap_or(default);
    let mut qos = toml::Table::new();
    qos.insert("scheduler".into(), get("scheduler", Value::from("on")));
    qos.insert("profile".into(), get("profile", Value::from(qos::REFLEX_A)));
    for k in ["lc_surge_pct", "tuning"] {
        if let Some(v) = sim.get(k) {
            qos.insert(k.into(), v.clone());
        }
    }
    let mut names = std::collections::BTreeSet::new();
    let mut tenants = Vec::new();
    for t in &scenario.tenants {
        if names.insert(t.name.clone()) {
            tenants.push(Value::Table(toml::Table::from_iter([
                ("name".to_string(), Value::from(t.name.clone())),
                ("secret".to_string(), Value::from(t.secret.clone())),
                ("class".to_string(), Value::from("lc")),
                (
                    "acl".to_string(),
                    Value::Array(vec![Value::Table(toml::Table::from_iter([
                        ("volume".to_string(), Value::from("default")),
                        ("access".to_string(), Value::from("read-write")),
                    ]))]),
                ),
            ])));
        }
    }
    let connections: u64 = scenario
        .tenants
        .iter()
        .map(|t| u64::from(t.connections))
        .sum();
    let backend = toml::Table::from_iter([
        ("kind".to_string(), Value::from("emulated")),
        ("device".to_string(), get("device", Value::from("zssd"))),
        (
            "size".to_string(),
            Value::from(format!("{}MiB", REAL_VOLUME_BYTES >> 20)),
        ),
        ("sq_depth".to_string(), Value::from(i64::from(SQ_DEPTH))),
    ]);
    let workers = sim.get("workers").cloned().unwrap_or(Value::from(2));
    toml::Table::from_iter([
        (
            "listen".to_string(),
            Value::Table(toml::Table::from_iter([(
                "native".to_string(),
                Value::from("127.0.0.1:0"),
            )])),
        ),
        (
            "dataplane".to_string(),
            Value::Table(toml::Table::from_iter([("workers".to_string(), workers)])),
        ),
        (
            "limits".to_string(),
            Value::Table(toml::Table::from_iter([(
                "max_connections".to_string(),
                Value::from((connections + 64).max(10_000) as i64),
            )])),
        ),
        ("qos".to_string(), Value::Table(qos)),
        (
            "volume".to_string(),
            Value::Array(vec![Value::Table(toml::Table::from_iter([
                ("name".to_string(), Value::from("default")),
                ("backend".to_string(), Value::Table(backend)),
            ]))]),
        ),
        ("tenant".to_string(), Value::Array(tenants)),
    ])
}

fn load_average_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The server's worker threads (`ullstack-wN`, in N order) as task ids of this process. A
/// thread names itself once it runs, which may be just after `server::start` returns: look
/// again, for at most [`NAMED_THREADS_WAIT`].
fn worker_tids(workers: usize) -> Vec<String> {
    let deadline = Instant::now() + NAMED_THREADS_WAIT;
    loop {
        let found = named_worker_tids(workers);
        if found.len() == workers || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long the runner waits for the server's workers to carry their names.
const NAMED_THREADS_WAIT: Duration = Duration::from_secs(1);

fn named_worker_tids(workers: usize) -> Vec<String> {
    let mut found: Vec<(usize, String)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            let tid = e.file_name().to_string_lossy().into_owned();
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            if let Some(n) = comm
                .trim()
                .strip_prefix("ullstack-w")
                .and_then(|n| n.parse::<usize>().ok())
            {
                found.push((n, tid));
            }
        }
    }
    found.sort();
    found.truncate(workers);
    found.into_iter().map(|(_, tid)| tid).collect()
}

/// A thread's CPU time so far, ns (`schedstat`'s first field); 0 if it is gone.
fn thread_cpu_ns(tid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct Samples {
    /// (ns since the run started, device commands so far, bucket read-only).
    points: Vec<(u64, u64, bool)>,
}

fn device_commands(shared: &server::shared::Shared) -> u64 {
    shared
        .volumes
        .iter()
        .filter_map(|v| v.volume.device_commands_by_class())
        .map(|[lc, tp]| lc + tp)
        .sum()
}

fn run_server(
    run: &RealRun,
    scenario: &Scenario,
    sim: &toml::Table,
    model: &ServerModel,
) -> Result<RealOutcome, String> {
    let id = &run.id;
    let cfg_table = server_config(scenario, sim);
    let cfg_text = toml::to_string(&cfg_table).map_err(|e| format!("{id}: {e}"))?;
    let config = server::config::ServerConfig::from_toml_str(&cfg_text)
        .map_err(|e| format!("{id}: server config: {e}"))?;
    let load = load_average_1m();
    let handle = server::start(config).map_err(|e| format!("{id}: server: {e}"))?;
    let addr = handle
        .addrs
        .native
        .ok_or_else(|| format!("{id}: the server has no native listener"))?;
    let tids = worker_tids(model.workers as usize);
    let shared = handle.shared().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let sampler = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("reflex-sampler".into())
            .spawn(move || {
                let mut s = Samples { points: Vec::new() };
                // Bounded by the stop flag, which the runner sets once bench returns.
                while !stop.load(Ordering::Relaxed) {
                    s.points.push((
                        started.elapsed().as_nanos() as u64,
                        device_commands(&shared),
                        shared.bucket.load_mix() == qos::LoadMix::ReadOnly,
                    ));
                    std::thread::sleep(Duration::from_millis(SAMPLE_INTERVAL_MS));
                }
                s
            })
            .map_err(|e| format!("{id}: sampler thread: {e}"))?
    };
    let cpu0 = sys::process_cpu_ns();
    let worker0: Vec<u64> = tids.iter().map(|t| thread_cpu_ns(t)).collect();
    let threads = scenario.threads.unwrap_or(1);
    let report = bench::run(&BenchConfig {
        server: addr.to_string(),
        duration_ns: scenario.duration_ns,
        ios_per_tenant: None,
        warmup_ns: scenario.warmup_ns.unwrap_or(0),
        threads,
        seed: scenario.seed.unwrap_or(1),
        tenants: scenario.tenants.clone(),
        progress: Progress::Hidden,
        tls: None,
    });
    let wall_ns = started.elapsed().as_nanos() as u64;
    let worker_ns: Vec<u64> = tids
        .iter()
        .zip(&worker0)
        .map(|(t, c0)| thread_cpu_ns(t).saturating_sub(*c0))
        .collect();
    let process_ns = sys::process_cpu_ns().saturating_sub(cpu0);
    stop.store(true, Ordering::Relaxed);
    let samples = sampler
        .join()
        .map_err(|_| format!("{id}: the sampler panicked"))?;
    handle.shutdown();
    let report = report.map_err(|e| format!("{id}: bench: {e}"))?;
    let window_ns = scenario.duration_ns.unwrap_or(0);
    let counts: Vec<(u64, u64)> = samples.points.iter().map(|p| (p.0, p.1)).collect();
    let served = sustained_rate(&counts, window_ns).unwrap_or(0.0);
    // The load mix while the device was busy: read-only if most such samples said so.
    let busy: Vec<bool> = samples
        .points
        .windows(2)
        .filter(|w| w[1].1 > w[0].1)
        .map(|w| w[1].2)
        .collect();
    let read_only = model.scheduler == sim::remote::SchedulerMode::On
        && busy.iter().filter(|&&r| r).count() * 2 > busy.len();
    let mix = if read_only {
        qos::LoadMix::ReadOnly
    } else {
        qos::LoadMix::Mixed
    };
    let cost = model.profile.cost_model();
    let mut tenants = Vec::new();
    let mut refused = None;
    for t in &report.tenants {
        if let Some(r) = &t.refused {
            refused.get_or_insert_with(|| format!("tenant {:?} refused: {r}", t.name));
        }
        let lat = |l: &Option<bench::report::LatencyNs>| l.clone();
        let (r, w) = (lat(&t.reads.latency_ns), lat(&t.writes.latency_ns));
        let slo_p95 = t.slo.as_ref().map(|s| s.p95_read_latency_ns);
        let read_p95 = r.as_ref().map_or(0, |l| l.p95);
        tenants.push(TenantResult {
            name: t.name.clone(),
            class: t.class,
            slo_p95_read_latency_ns: slo_p95,
            slo_iops: t.slo.as_ref().map(|s| s.iops),
            // Never in a real run's report (its scenario has them).
            read_pct: None,
            size_bytes: None,
            reads: t.reads.count,
            writes: t.writes.count,
            iops: t.iops,
            read_latency_ns_p50: r.as_ref().map_or(0, |l| l.p50),
            read_latency_ns_p95: read_p95,
            read_latency_ns_p99: r.as_ref().map_or(0, |l| l.p99),
            read_latency_ns_mean: r.as_ref().map_or(0, |l| l.mean.round() as u64),
            write_latency_ns_p95: w.as_ref().map_or(0, |l| l.p95),
            write_latency_ns_mean: w.as_ref().map_or(0, |l| l.mean.round() as u64),
            tokens_per_sec: tokens_per_sec(
                &cost,
                mix,
                t.reads.count,
                t.writes.count,
                u64::from(t.size_bytes),
                report.window_s,
            ),
            slo_met: slo_p95.map(|s| t.reads.count > 0 && read_p95 <= s),
            client: Some(ClientSide {
                send_lag_ns_p99: t.send_lag_ns.as_ref().map(|l| l.p99),
                errors: t.errors.values().sum(),
            }),
        });
    }
    let pct = |ns: u64| 100.0 * ns as f64 / wall_ns.max(1) as f64;
    let mut shown = cfg_table.clone();
    shown.remove("tenant");
    Ok(RealOutcome {
        id: id.clone(),
        part: run.part,
        x: run.x,
        place: run.place,
        scenario_toml: run.scenario_toml.clone(),
        note: format!(
            "in-process server, {} worker(s), scheduler {:?}, emulated device {}, profile {}; \
             bench with {threads} thread(s); {} config tenants (class lc, no fixed SLO); \
             sustained {served:.0} device commands/s; server config without its tenants:\n{}",
            model.workers,
            model.scheduler,
            model.device.name,
            model.profile.name,
            report.tenants.len(),
            toml::to_string(&shown).unwrap_or_default()
        ),
        load_average_1m: load,
        window_s: report.window_s,
        tenants,
        device_iops_in_window: served,
        worker_busy_pct: worker_ns.iter().map(|&ns| pct(ns)).collect(),
        client_cpu_pct: Some(pct(process_ns.saturating_sub(worker_ns.iter().sum()))),
        refused,
    })
}

/// The one QD1 tenant of a local run, with what it needs.
fn local_tenant(run: &RealRun, scenario: &Scenario) -> Result<(u8, u64, u64), String> {
    let [t] = scenario.tenants.as_slice() else {
        return Err(format!(
            "{}: a local run takes one tenant, the file has {}",
            run.id,
            scenario.tenants.len()
        ));
    };
    if t.load != (Load::Closed { queue_depth: 1 })
        || t.class.class() != qos::TenantClass::BestEffort
    {
        return Err(format!(
            "{}: tenant {:?}: a local run is one best-effort request at a time (qd = 1)",
            run.id, t.name
        ));
    }
    let size = u64::from(t.size_bytes);
    let span = t
        .span_bytes
        .unwrap_or(REAL_VOLUME_BYTES)
        .min(REAL_VOLUME_BYTES);
    Ok((t.read_pct, size, span / size))
}

fn run_device(
    run: &RealRun,
    scenario: &Scenario,
    model: &ServerModel,
) -> Result<RealOutcome, String> {
    let id = &run.id;
    let (read_pct, size, blocks) = local_tenant(run, scenario)?;
    let volume = Arc::new(
        server::backend::emulated::EmulatedVolume::new(
            "local",
            &model.device,
            REAL_VOLUME_BYTES,
            SQ_DEPTH,
        )
        .map_err(|e| format!("{id}: {e}"))?,
    );
    let mut backend = volume.clone().attach().map_err(|e| format!("{id}: {e}"))?;
    let load = load_average_1m();
    let mut rng = engine::stream(scenario.seed.unwrap_or(1), "reflex.local");
    let warmup_ns = scenario.warmup_ns.unwrap_or(0);
    let window_ns = scenario.duration_ns.unwrap_or(1_000_000_000);
    let (mut reads, mut writes) = (
        engine::LatencyHistogram::new(),
        engine::LatencyHistogram::new(),
    );
    let started = Instant::now();
    let mut done = Vec::new();
    let mut tag = 0u64;
    loop {
        let at = started.elapsed().as_nanos() as u64;
        if at >= warmup_ns + window_ns {
            break;
        }
        let read = engine::rng::chance(&mut rng, u64::from(read_pct), 100);
        let offset_bytes = engine::rng::below(&mut rng, blocks) * size;
        let op = if read {
            StorageOp::Read { offset_bytes }
        } else {
            StorageOp::Write {
                offset_bytes,
                fua: Fua::No,
            }
        };
        let mut buf = server::buf::IoBuf::zeroed(size as usize);
        buf.set_len(size as usize);
        tag += 1;
        let t0 = server::clock::now_ns();
        let c: Completion = match backend.submit(tag, op, engine::IoClass::Throughput, buf) {
            Submitted::Done(c) => c,
            Submitted::Pending => {
                backend.commit();
                let deadline = Instant::now() + LOCAL_REPLY_TIMEOUT;
                loop {
                    backend.poll(server::clock::now_ns(), &mut done);
                    if let Some(c) = done.pop() {
                        break c;
                    }
                    if Instant::now() > deadline {
                        return Err(format!(
                            "{id}: the emulated device did not complete a request in {LOCAL_REPLY_TIMEOUT:?}"
                        ));
                    }
                    std::hint::spin_loop();
                }
            }
        };
        let latency = server::clock::now_ns() - t0;
        c.result.map_err(|e| format!("{id}: {e}"))?;
        if at >= warmup_ns {
            if read {
                reads.record(latency);
            } else {
                writes.record(latency);
            }
        }
    }
    let secs = window_ns as f64 / 1e9;
    let n = reads.count() + writes.count();
    let tenant = &scenario.tenants[0];
    let cost = model.profile.cost_model();
    Ok(RealOutcome {
        id: id.clone(),
        part: run.part,
        x: run.x,
        place: run.place,
        scenario_toml: run.scenario_toml.clone(),
        note: format!(
            "the emulated device {} driven in process (no network, no server): one request at a \
             time, submitted and polled in a spin on the wall clock; {n} requests measured",
            model.device.name
        ),
        load_average_1m: load,
        window_s: secs,
        tenants: vec![TenantResult {
            name: tenant.name.clone(),
            class: TenantClass::BestEffort,
            slo_p95_read_latency_ns: None,
            slo_iops: None,
            read_pct: None,
            size_bytes: None,
            reads: reads.count(),
            writes: writes.count(),
            iops: n as f64 / secs,
            read_latency_ns_p50: reads.quantile_ns(0.50),
            read_latency_ns_p95: reads.quantile_ns(0.95),
            read_latency_ns_p99: reads.quantile_ns(0.99),
            read_latency_ns_mean: reads.mean_ns(),
            write_latency_ns_p95: writes.quantile_ns(0.95),
            write_latency_ns_mean: writes.mean_ns(),
            tokens_per_sec: tokens_per_sec(
                &cost,
                qos::LoadMix::Mixed,
                reads.count(),
                writes.count(),
                size,
                secs,
            ),
            slo_met: None,
            client: Some(ClientSide::default()),
        }],
        device_iops_in_window: n as f64 / secs,
        worker_busy_pct: Vec::new(),
        client_cpu_pct: None,
        refused: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config built from a study scenario is one the server accepts, with the file's
    /// workers, scheduler and profile, and every tenant once.
    #[test]
    fn a_scenario_gives_a_server_config_the_server_accepts() {
        for r in study::reflex::real_runs(study::Size::Quick, 1) {
            let s = scenario::parse_scenario(&r.scenario_toml, &r.id).unwrap();
            let sim = s.sim.clone().unwrap();
            let model = ServerModel::from_table(&sim).unwrap();
            let text = toml::to_string(&server_config(&s, &sim)).unwrap();
            let c = server::config::ServerConfig::from_toml_str(&text)
                .unwrap_or_else(|e| panic!("{}: {e}\n{text}", r.id));
            assert_eq!(c.dataplane.workers, model.workers as usize, "{}", r.id);
            assert_eq!(c.device_profile().unwrap(), model.profile, "{}", r.id);
            assert_eq!(c.tenants.len(), s.tenants.len(), "{}", r.id);
        }
    }
}
