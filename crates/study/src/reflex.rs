//! `ullstack study reflex`: SLOs for remote tenants (experiments.md, `reflex`).
//!
//! # What it runs
//! The five parts of the published remote-flash evaluation, on the simulated remote server
//! (`sim::remote`: network model, dataplane threads, the real `qos` scheduler, the SSD model),
//! and — where a runner for the real server is given (`ullstack study reflex` gives one) — the
//! same scenarios scaled to this machine through `ullstack serve` (emulated backend) and
//! `ullstack bench`, side by side in one report:
//! 1. **Scenario 1**: A (LC, 120 K IOPS, 100 % reads, p95 ≤ 500 µs), B (LC, 70 K IOPS, 80 %
//!    reads, p95 ≤ 500 µs), C (BE, 95 % reads), D (BE, 25 % reads), all 4 KiB, A and B at their
//!    full rate (Poisson), with the scheduler off and on.
//! 2. **Scenario 2**: the same with B offering 45 K IOPS (it still reserves 70 K).
//! 3. **Cores**: N = 1..12 dataplane threads, one LC tenant per thread (20 K IOPS, 90 % reads,
//!    p95 ≤ 2 ms) and two BE tenants (80 % reads) spread over every thread.
//! 4. **Tenants per core**: one thread, K tenants of 100 IOPS (1 KiB reads, LC, p95 ≤ 2 ms),
//!    K growing until the thread saturates (achieved IOPS fall behind the offered).
//! 5. **Unloaded latency**: 4 KiB random read and write at QD1, the device alone (every
//!    network and dataplane cost set to zero) against through the server.
//!
//! # Choices, with their reasons (none were tuned to a result)
//! * **Device**: `nvme-tlc` with program suspend on (`DEVICE_A_TOML`). The published device
//!   "A" is a commodity datacenter NVMe TLC drive; our `nvme-tlc` preset is of its class (reads
//!   58–107 µs); such drives suspend programs for reads (an assumption: device.md lists suspend
//!   as a mechanism; the preset leaves it off). The scheduler's profile is `reflex-a`, the
//!   published cost table (presets.md), *not* a calibration of this model: `ullstack calibrate
//!   model:…` is how one would be made, and the report says which was used.
//! * **BE load**: "take what they can": each BE tenant has [`BE_CONNECTIONS`] connections, each
//!   with the server's per-connection in-flight limit ([`BE_QD_PER_CONN`] = `max_inflight_requests`'
//!   default) in flight. One connection would not do: on one 10 GbE link a tenant of 95 % 4 KiB
//!   reads is held to ~318 K IOPS by the link's reply direction (seen in this model while the
//!   study was written), so it could not load the device.
//! * **Durations**: the full study measures 1 s after 100 ms of warm-up per run; `--quick`
//!   measures 100 ms after 20 ms (tails of a few thousand reads per LC tenant).
//!
//! # What it leaves out
//! What `sim::remote` leaves out (per-tenant scheduling CPU: part 4's saturation comes from
//! per-request costs alone), and the closed-loop rate correction (`vrate`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sim::remote::{RemoteRunConfig, RemoteSummary};

use crate::plot::{Figure, Series, Stroke};
use crate::report::{base64, esc, Table};
use crate::Size;

/// Bumped when runs or figures change meaning.
pub const VERSION: u32 = 1;

/// The stand-in for device "A" (see the module essay).
pub const DEVICE_A_TOML: &str = r#"{ preset = "nvme-tlc", flash = { suspend = "on" } }"#;
/// Connections per BE tenant.
pub const BE_CONNECTIONS: u32 = 4;
/// Requests each BE connection keeps in flight (the server's `max_inflight_requests` default).
pub const BE_QD_PER_CONN: u32 = 256;

/// Which part of the study a run belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    Scenario1,
    Scenario2,
    Cores,
    TenantsPerCore,
    Unloaded,
}

/// One simulated run: its id, part, x value (cores, tenants, or 0) and scenario file text.
#[derive(Clone, Debug)]
pub struct ReflexRun {
    pub id: String,
    pub part: Part,
    pub x: u64,
    pub scenario_toml: String,
}

fn durations(size: Size) -> (&'static str, &'static str) {
    match size {
        Size::Quick => ("100ms", "20ms"),
        Size::Full => ("1s", "100ms"),
    }
}

fn header(size: Size, seed: u64, comment: &str) -> String {
    let (duration, warmup) = durations(size);
    format!("# {comment}\nduration = \"{duration}\"\nwarmup = \"{warmup}\"\nseed = {seed}\n")
}

fn sim_table(scheduler: &str, workers: u32, device: &str) -> String {
    format!(
        "[sim]\ndevice = {device}\nprofile = \"reflex-a\"\nscheduler = \"{scheduler}\"\nworkers = {workers}\n"
    )
}

/// Scenario 1 or 2 (B's offered rate differs), scheduler `on` or `off`.
pub fn scenario(size: Size, seed: u64, b_rate: u64, scheduler: &str) -> String {
    let be = |name: &str, read: u32| {
        format!(
            "[[tenant]]\nname = \"{name}\"\nclass = \"be\"\nqd = {}\nconns = {BE_CONNECTIONS}\nread = {read}\nsize = \"4k\"\n",
            BE_QD_PER_CONN * BE_CONNECTIONS
        )
    };
    format!(
        "{}\
         [[tenant]]\nname = \"A\"\nclass = \"lc\"\niops = 120000\np95 = \"500us\"\nread = 100\nsize = \"4k\"\n\
         [[tenant]]\nname = \"B\"\nclass = \"lc\"\niops = 70000\nrate = {b_rate}\np95 = \"500us\"\nread = 80\nsize = \"4k\"\n\
         {}{}{}",
        header(size, seed, "reflex scenario: A, B latency-critical; C, D best-effort"),
        be("C", 95),
        be("D", 25),
        sim_table(scheduler, 2, DEVICE_A_TOML),
    )
}

fn cores_scenario(size: Size, seed: u64, cores: u32) -> String {
    let mut s = header(
        size,
        seed,
        "reflex part 3: one LC tenant per thread, two BE tenants",
    );
    for i in 0..cores {
        write!(
            s,
            "[[tenant]]\nname = \"lc{i}\"\nclass = \"lc\"\niops = 20000\np95 = \"2ms\"\nread = 90\nsize = \"4k\"\n"
        )
        .expect("string");
    }
    for (name, _) in [("be0", 0), ("be1", 1)] {
        write!(
            s,
            "[[tenant]]\nname = \"{name}\"\nclass = \"be\"\nqd = {}\nconns = {cores}\nread = 80\nsize = \"4k\"\n",
            64 * cores
        )
        .expect("string");
    }
    s.push_str(&sim_table("on", cores, DEVICE_A_TOML));
    s
}

fn tenants_scenario(size: Size, seed: u64, tenants: u32) -> String {
    let mut s = header(
        size,
        seed,
        "reflex part 4: many small tenants on one thread",
    );
    write!(
        s,
        "[[tenant]]\nname = \"t\"\nclass = \"lc\"\niops = 100\np95 = \"2ms\"\nread = 100\nsize = \"1k\"\ncount = {tenants}\n"
    )
    .expect("string");
    s.push_str(&sim_table("on", 1, DEVICE_A_TOML));
    s
}

fn unloaded_scenario(size: Size, seed: u64, read: u32, remote: bool) -> String {
    let mut s = header(size, seed, "reflex part 5: QD1, unloaded");
    write!(
        s,
        "[[tenant]]\nname = \"q\"\nclass = \"be\"\nqd = 1\nread = {read}\nsize = \"4k\"\n"
    )
    .expect("string");
    s.push_str(&sim_table("on", 1, DEVICE_A_TOML));
    if !remote {
        s.push_str(
            "[sim.net]\nlatency_ns = 0\nbandwidth_bytes_per_sec = 0\nclient_message_ns = 0\nserver_message_ns = 0\n\
             [sim.costs]\nrequest_ns = 0\nsubmit_ns = 0\ncomplete_ns = 0\nloop_ns = 0\n",
        );
    }
    s
}

/// Every simulated run of the study.
pub fn runs(size: Size, seed: u64) -> Vec<ReflexRun> {
    let mut v = Vec::new();
    for (part, b_rate) in [(Part::Scenario1, 70_000), (Part::Scenario2, 45_000)] {
        let n = if part == Part::Scenario1 { 1 } else { 2 };
        for sched in ["off", "on"] {
            v.push(ReflexRun {
                id: format!("s{n}-{sched}"),
                part,
                x: 0,
                scenario_toml: scenario(size, seed, b_rate, sched),
            });
        }
    }
    let cores: &[u32] = match size {
        Size::Quick => &[1, 2],
        Size::Full => &[1, 2, 4, 6, 8, 10, 12],
    };
    for &c in cores {
        v.push(ReflexRun {
            id: format!("cores-{c}"),
            part: Part::Cores,
            x: u64::from(c),
            scenario_toml: cores_scenario(size, seed, c),
        });
    }
    let tenants: &[u32] = match size {
        Size::Quick => &[100, 2000],
        Size::Full => &[1000, 2000, 4000, 6000, 8000, 9000],
    };
    for &k in tenants {
        v.push(ReflexRun {
            id: format!("tenants-{k}"),
            part: Part::TenantsPerCore,
            x: u64::from(k),
            scenario_toml: tenants_scenario(size, seed, k),
        });
    }
    for (op, read) in [("read", 100), ("write", 0)] {
        for (place, remote) in [("local", false), ("remote", true)] {
            v.push(ReflexRun {
                id: format!("unloaded-{op}-{place}"),
                part: Part::Unloaded,
                x: 0,
                scenario_toml: unloaded_scenario(size, seed, read, remote),
            });
        }
    }
    v
}

/// One run's outcome.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunOutcome {
    pub id: String,
    pub part: Part,
    pub x: u64,
    pub summary: RemoteSummary,
}

/// Runs one simulated run.
pub fn simulate(run: &ReflexRun) -> Result<RunOutcome, String> {
    let cfg = RemoteRunConfig::parse(&run.scenario_toml, &format!("{}.toml", run.id))
        .map_err(|e| format!("run {}: {e}", run.id))?;
    let summary = sim::remote::run(&cfg).map_err(|e| format!("run {}: {e}", run.id))?;
    Ok(RunOutcome {
        id: run.id.clone(),
        part: run.part,
        x: run.x,
        summary,
    })
}

/// A tenant's figures from the real server (`ullstack bench` against `ullstack serve`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct RealTenant {
    pub name: String,
    pub iops: f64,
    pub read_latency_ns_p95: u64,
    pub slo_p95_read_latency_ns: Option<u64>,
}

/// One scenario run on the real server.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RealOutcome {
    pub id: String,
    /// The scaled scenario file `ullstack bench --scenario` ran.
    pub scenario_toml: String,
    /// What the scaling did, for the report.
    pub note: String,
    pub tenants: Vec<RealTenant>,
}

/// Runs scenarios against the real server; `ullstack` provides one (this crate does not
/// depend on the server).
pub trait RealRunner: Sync {
    /// Runs the scenario with the server's scheduler on or off.
    fn run(&self, id: &str, scenario_toml: &str, scheduler_on: bool)
        -> Result<RealOutcome, String>;
}

/// The real-server scenarios: scenario 1 and 2 and the unloaded read, scaled by `scale_pct`
/// (rates and queue depths; the SLOs' IOPS with them), each off and on for 1 and 2.
pub fn real_scenarios(size: Size, seed: u64, scale_pct: u64) -> Vec<(String, String, bool)> {
    let duration = match size {
        Size::Quick => "2s",
        Size::Full => "10s",
    };
    let s = |n: u32, b_rate: u64| {
        let sc = |x: u64| (x * scale_pct / 100).max(1);
        format!(
            "# reflex scenario {n}, scaled to {scale_pct} % for this machine\nduration = \"{duration}\"\nwarmup = \"500ms\"\nthreads = 1\nseed = {seed}\n\
             [[tenant]]\nname = \"A\"\nsecret = \"secret-a\"\nclass = \"lc\"\niops = {}\np95 = \"500us\"\nread = 100\nsize = \"4k\"\n\
             [[tenant]]\nname = \"B\"\nsecret = \"secret-b\"\nclass = \"lc\"\niops = {}\nrate = {}\np95 = \"500us\"\nread = 80\nsize = \"4k\"\n\
             [[tenant]]\nname = \"C\"\nsecret = \"secret-c\"\nclass = \"be\"\nqd = 16\nread = 95\nsize = \"4k\"\n\
             [[tenant]]\nname = \"D\"\nsecret = \"secret-d\"\nclass = \"be\"\nqd = 16\nread = 25\nsize = \"4k\"\n",
            sc(120_000),
            sc(70_000),
            sc(b_rate),
        )
    };
    let mut v = Vec::new();
    for (n, b) in [(1, 70_000), (2, 45_000)] {
        for on in [false, true] {
            v.push((
                format!("real-s{n}-{}", if on { "on" } else { "off" }),
                s(n, b),
                on,
            ));
        }
    }
    v.push((
        "real-unloaded-read".into(),
        format!(
            "# QD1 4 KiB reads through the real server\nduration = \"{duration}\"\nwarmup = \"200ms\"\nthreads = 1\nseed = {seed}\n\
             [[tenant]]\nname = \"C\"\nsecret = \"secret-c\"\nclass = \"be\"\nqd = 1\nread = 100\nsize = \"4k\"\n"
        ),
        true,
    ));
    v
}

/// Options of a study run.
pub struct ReflexOptions {
    pub size: Size,
    pub seed: u64,
    pub out: PathBuf,
    pub jobs: usize,
}

/// What a study run produced.
pub struct ReflexOutcome {
    pub sims: Vec<RunOutcome>,
    pub real: Vec<RealOutcome>,
    pub headline: Table,
    pub report: PathBuf,
}

/// Runs the study: the simulated runs over `jobs` threads, then the real-server runs (one at a
/// time: they measure wall-clock behaviour), then figures and `report.html`.
pub fn run(opts: &ReflexOptions, real: Option<&dyn RealRunner>) -> Result<ReflexOutcome, String> {
    let specs = runs(opts.size, opts.seed);
    let runs_dir = opts.out.join("runs");
    std::fs::create_dir_all(&runs_dir)
        .map_err(|e| format!("creating {}: {e}", runs_dir.display()))?;
    let sims = run_parallel(&specs, opts.jobs.max(1))?;
    for (spec, o) in specs.iter().zip(&sims) {
        let dir = runs_dir.join(&spec.id);
        write_file(&dir, "scenario.toml", spec.scenario_toml.as_bytes())?;
        let json = serde_json::to_string_pretty(&o.summary).map_err(|e| e.to_string())?;
        write_file(&dir, "summary.json", json.as_bytes())?;
    }
    let mut real_outcomes = Vec::new();
    if let Some(runner) = real {
        for (id, text, on) in real_scenarios(opts.size, opts.seed, real_scale_pct()) {
            let o = runner.run(&id, &text, on)?;
            let dir = runs_dir.join(&id);
            write_file(&dir, "scenario.toml", o.scenario_toml.as_bytes())?;
            let json = serde_json::to_string_pretty(&o).map_err(|e| e.to_string())?;
            write_file(&dir, "summary.json", json.as_bytes())?;
            real_outcomes.push(o);
        }
    }
    let study_json = serde_json::json!({
        "study": "reflex",
        "version": VERSION,
        "size": opts.size.as_str(),
        "seed": opts.seed,
        "simulated": sims,
        "real": real_outcomes,
    });
    write_file(
        &opts.out,
        "study.json",
        serde_json::to_string_pretty(&study_json)
            .map_err(|e| e.to_string())?
            .as_bytes(),
    )?;
    let headline = headline(&sims, &real_outcomes);
    let figures = figures(&sims);
    let mut pngs = Vec::new();
    for f in &figures {
        pngs.push(f.write(&opts.out)?);
    }
    let html = report_html(opts, &headline, &figures, &pngs, &specs, &real_outcomes);
    write_file(&opts.out, "report.html", html.as_bytes())?;
    Ok(ReflexOutcome {
        sims,
        real: real_outcomes,
        headline,
        report: opts.out.join("report.html"),
    })
}

/// The real-server scenarios run at this share of the published rates: this 2-core VM's
/// server and bench share two cores (docs/server.md measured 185–223 K IOPS at QD32 on the
/// memory backend with the machine loaded), far below the published 1 M-IOPS server.
pub fn real_scale_pct() -> u64 {
    10
}

fn run_parallel(specs: &[ReflexRun], jobs: usize) -> Result<Vec<RunOutcome>, String> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<RunOutcome, String>>>> =
        specs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs.min(specs.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(spec) = specs.get(i) else {
                    break;
                };
                let r = simulate(spec);
                *results[i].lock().expect("no panics while held") = Some(r);
            });
        }
    });
    results
        .into_iter()
        .map(|m| m.into_inner().expect("no panics").expect("every run ran"))
        .collect()
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn us(ns: u64) -> String {
    format!("{:.0}", ns as f64 / 1000.0)
}

/// Per tenant of scenarios 1 and 2, off and on; parts 3–5 as their own rows.
pub fn headline(sims: &[RunOutcome], real: &[RealOutcome]) -> Table {
    let mut t = Table {
        header: [
            "run",
            "tenant",
            "class",
            "SLO p95 µs",
            "IOPS",
            "p95 read µs",
            "tokens/s",
            "SLO",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for o in sims
        .iter()
        .filter(|o| matches!(o.part, Part::Scenario1 | Part::Scenario2))
    {
        for r in &o.summary.tenants {
            t.rows.push(vec![
                format!("sim {}", o.id),
                r.name.clone(),
                r.class.into(),
                r.slo_p95_read_latency_ns.map_or("-".into(), us),
                format!("{:.0}", r.iops),
                us(r.read_latency_ns_p95),
                format!("{:.0}", r.tokens_per_sec),
                match r.slo_met {
                    Some(true) => "met".into(),
                    Some(false) => "MISSED".into(),
                    None => "-".into(),
                },
            ]);
        }
    }
    for o in real {
        for r in &o.tenants {
            t.rows.push(vec![
                o.id.clone(),
                r.name.clone(),
                if r.slo_p95_read_latency_ns.is_some() {
                    "lc"
                } else {
                    "be"
                }
                .into(),
                r.slo_p95_read_latency_ns.map_or("-".into(), us),
                format!("{:.0}", r.iops),
                us(r.read_latency_ns_p95),
                "-".into(),
                match r.slo_p95_read_latency_ns {
                    Some(s) if r.read_latency_ns_p95 <= s => "met".into(),
                    Some(_) => "MISSED".into(),
                    None => "-".into(),
                },
            ]);
        }
    }
    t
}

fn lc_sum(s: &RemoteSummary, class: &str) -> f64 {
    s.tenants
        .iter()
        .filter(|t| t.class == class)
        .map(|t| t.iops)
        .sum()
}

fn lc_p95_max(s: &RemoteSummary) -> u64 {
    s.tenants
        .iter()
        .filter(|t| t.class == "lc")
        .map(|t| t.read_latency_ns_p95)
        .max()
        .unwrap_or(0)
}

fn series(name: &str, points: Vec<(f64, f64)>, colour: usize, stroke: Stroke) -> Series {
    Series {
        name: name.into(),
        points,
        stroke,
        colour,
    }
}

/// The study's figures.
pub fn figures(sims: &[RunOutcome]) -> Vec<Figure> {
    let mut figs = Vec::new();
    let get = |id: &str| sims.iter().find(|o| o.id == id);
    for n in [1, 2] {
        let (Some(off), Some(on)) = (get(&format!("s{n}-off")), get(&format!("s{n}-on"))) else {
            continue;
        };
        let names: Vec<String> = on.summary.tenants.iter().map(|t| t.name.clone()).collect();
        let pts = |o: &RunOutcome, f: &dyn Fn(&sim::remote::TenantResult) -> f64| {
            o.summary
                .tenants
                .iter()
                .enumerate()
                .map(|(i, t)| (i as f64, f(t)))
                .collect::<Vec<_>>()
        };
        let p95 = |t: &sim::remote::TenantResult| t.read_latency_ns_p95 as f64 / 1000.0;
        let iops = |t: &sim::remote::TenantResult| t.iops / 1000.0;
        figs.push(Figure {
            stem: format!("scenario{n}_p95"),
            title: format!("Scenario {n}: p95 read latency per tenant"),
            caption: format!(
                "Simulated; scheduler off (dashed) and on (solid); A and B have a 500 µs SLO. \
                 Device {DEVICE_A_TOML}, profile reflex-a, 2 threads; runs s{n}-off, s{n}-on."
            ),
            x_label: "tenant".into(),
            y_label: "p95 read latency (µs)".into(),
            x_log: false,
            y_log: true,
            x_categories: names.clone(),
            series: vec![
                series("off", pts(off, &p95), 1, Stroke::Dashed),
                series("on", pts(on, &p95), 0, Stroke::Solid),
            ],
        });
        figs.push(Figure {
            stem: format!("scenario{n}_iops"),
            title: format!("Scenario {n}: IOPS per tenant"),
            caption: format!(
                "Simulated; scheduler off (dashed) and on (solid); runs s{n}-off, s{n}-on."
            ),
            x_label: "tenant".into(),
            y_label: "K IOPS".into(),
            x_log: false,
            y_log: false,
            x_categories: names,
            series: vec![
                series("off", pts(off, &iops), 1, Stroke::Dashed),
                series("on", pts(on, &iops), 0, Stroke::Solid),
            ],
        });
    }
    let cores: Vec<&RunOutcome> = sims.iter().filter(|o| o.part == Part::Cores).collect();
    if !cores.is_empty() {
        let p = |f: &dyn Fn(&RemoteSummary) -> f64| {
            cores
                .iter()
                .map(|o| (o.x as f64, f(&o.summary)))
                .collect::<Vec<_>>()
        };
        figs.push(Figure {
            stem: "cores_iops".into(),
            title: "Cores: aggregate IOPS and tokens".into(),
            caption: "Simulated; one LC tenant (20 K IOPS, 90 % reads, 2 ms) per thread, two BE \
                      tenants (80 % reads) on every thread; scheduler on."
                .into(),
            x_label: "dataplane threads".into(),
            y_label: "K per second".into(),
            x_log: false,
            y_log: false,
            x_categories: Vec::new(),
            series: vec![
                series(
                    "LC IOPS",
                    p(&|s| lc_sum(s, "lc") / 1000.0),
                    0,
                    Stroke::Solid,
                ),
                series(
                    "BE IOPS",
                    p(&|s| lc_sum(s, "be") / 1000.0),
                    1,
                    Stroke::Solid,
                ),
                series(
                    "tokens",
                    p(&|s| s.tenants.iter().map(|t| t.tokens_per_sec).sum::<f64>() / 1000.0),
                    2,
                    Stroke::Dashed,
                ),
            ],
        });
        figs.push(Figure {
            stem: "cores_lc_p95".into(),
            title: "Cores: worst LC p95 read latency".into(),
            caption: "Simulated; the SLO is 2 ms.".into(),
            x_label: "dataplane threads".into(),
            y_label: "p95 read latency (µs)".into(),
            x_log: false,
            y_log: false,
            x_categories: Vec::new(),
            series: vec![series(
                "LC p95",
                p(&|s| lc_p95_max(s) as f64 / 1000.0),
                0,
                Stroke::Solid,
            )],
        });
    }
    let tenants: Vec<&RunOutcome> = sims
        .iter()
        .filter(|o| o.part == Part::TenantsPerCore)
        .collect();
    if !tenants.is_empty() {
        figs.push(Figure {
            stem: "tenants_per_core".into(),
            title: "Tenants per core: offered vs achieved IOPS".into(),
            caption: "Simulated; one thread; every tenant 100 IOPS of 1 KiB reads (LC, 2 ms); \
                      the thread saturates where achieved falls below offered."
                .into(),
            x_label: "tenants".into(),
            y_label: "K IOPS".into(),
            x_log: false,
            y_log: false,
            x_categories: Vec::new(),
            series: vec![
                series(
                    "offered",
                    tenants
                        .iter()
                        .map(|o| (o.x as f64, o.x as f64 * 0.1))
                        .collect(),
                    1,
                    Stroke::Dashed,
                ),
                series(
                    "achieved",
                    tenants
                        .iter()
                        .map(|o| (o.x as f64, lc_sum(&o.summary, "lc") / 1000.0))
                        .collect(),
                    0,
                    Stroke::Solid,
                ),
            ],
        });
    }
    let un: Vec<(&str, f64)> = ["read-local", "read-remote", "write-local", "write-remote"]
        .iter()
        .filter_map(|k| {
            let o = get(&format!("unloaded-{k}"))?;
            let t = o.summary.tenants.first()?;
            let ns = if k.starts_with("read") {
                t.read_latency_ns_mean
            } else {
                t.write_latency_ns_mean
            };
            Some((*k, ns as f64 / 1000.0))
        })
        .collect();
    if un.len() == 4 {
        figs.push(Figure {
            stem: "unloaded".into(),
            title: "Unloaded latency: local device vs remote".into(),
            caption: "Simulated; 4 KiB random, QD1, mean; local = the device alone (no network \
                      or dataplane cost), remote = through the modelled server and a 10 GbE link."
                .into(),
            x_label: "operation".into(),
            y_label: "mean latency (µs)".into(),
            x_log: false,
            y_log: false,
            x_categories: vec!["read".into(), "write".into()],
            series: vec![
                series(
                    "local",
                    vec![(0.0, un[0].1), (1.0, un[2].1)],
                    0,
                    Stroke::Solid,
                ),
                series(
                    "remote",
                    vec![(0.0, un[1].1), (1.0, un[3].1)],
                    1,
                    Stroke::Solid,
                ),
            ],
        });
    }
    figs
}

fn report_html(
    opts: &ReflexOptions,
    headline: &Table,
    figures: &[Figure],
    pngs: &[Vec<u8>],
    specs: &[ReflexRun],
    real: &[RealOutcome],
) -> String {
    let mut out = String::new();
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>reflex</title>\n\
         <style>body {{ font-family: sans-serif; max-width: 1100px; margin: 2em auto; }} \
         table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }} \
         pre {{ background: #f5f5f5; padding: 6px; font-size: 12px; }}</style>\n</head>\n<body>\n\
         <h1>reflex — SLOs for remote tenants ({size}, seed {seed})</h1>\n\
         <p>Simulated remote server (sim::remote: network model, dataplane threads, the qos crate's \
         scheduler, the SSD model) and, where listed, the real server (ullstack serve, emulated \
         device) driven by ullstack bench on this machine. Real-server rows are scaled to {scale} % \
         of the published rates.</p>\n<h2>Headline numbers</h2>\n{table}",
        size = opts.size.as_str(),
        seed = opts.seed,
        scale = real_scale_pct(),
        table = headline.to_html(),
    )
    .expect("string");
    out.push_str("<h2>Figures</h2>\n");
    for (f, png) in figures.iter().zip(pngs) {
        writeln!(
            out,
            "<figure><img alt=\"{t}\" width=\"800\" src=\"data:image/png;base64,{d}\"><figcaption><b>{t}.</b> {c} Data: <code>{s}.csv</code>.</figcaption></figure>",
            t = esc(&f.title),
            d = base64(png),
            c = esc(&f.caption),
            s = esc(&f.stem),
        )
        .expect("string");
    }
    out.push_str("<h2>Every run's scenario</h2>\n<p>Re-run one alone: <code>ullstack sim --remote runs/&lt;id&gt;/scenario.toml</code>; the real ones with <code>ullstack bench --scenario</code>.</p>\n");
    for s in specs {
        writeln!(
            out,
            "<details><summary><code>{}</code></summary><pre>{}</pre></details>",
            esc(&s.id),
            esc(&s.scenario_toml)
        )
        .expect("string");
    }
    for r in real {
        writeln!(
            out,
            "<details><summary><code>{}</code> (real server)</summary><p>{}</p><pre>{}</pre></details>",
            esc(&r.id),
            esc(&r.note),
            esc(&r.scenario_toml)
        )
        .expect("string");
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The study's claim: with the scheduler every LC tenant of scenario 1 keeps its p95
    /// within its SLO; without it, not.
    #[test]
    fn scenario_one_needs_the_scheduler() {
        let runs = runs(Size::Quick, 1);
        for (id, expect_met) in [("s1-on", true), ("s1-off", false)] {
            let spec = runs.iter().find(|r| r.id == id).expect("run exists");
            let o = simulate(spec).expect("runs");
            let lc: Vec<_> = o
                .summary
                .tenants
                .iter()
                .filter(|t| t.class == "lc")
                .collect();
            assert_eq!(lc.len(), 2);
            let report: Vec<String> = lc
                .iter()
                .map(|t| {
                    format!(
                        "{} p95 {} ns ({} reads)",
                        t.name, t.read_latency_ns_p95, t.reads
                    )
                })
                .collect();
            if expect_met {
                assert!(
                    lc.iter().all(|t| t.slo_met == Some(true) && t.reads > 1000),
                    "{id}: {report:?}"
                );
            } else {
                assert!(
                    lc.iter().all(|t| t.slo_met == Some(false)),
                    "{id}: {report:?}"
                );
            }
        }
    }

    #[test]
    fn every_scenario_parses() {
        for size in [Size::Quick, Size::Full] {
            for r in runs(size, 1) {
                RemoteRunConfig::parse(&r.scenario_toml, &r.id)
                    .unwrap_or_else(|e| panic!("{}: {e}", r.id));
            }
        }
        for (id, text, _) in real_scenarios(Size::Quick, 1, real_scale_pct()) {
            workload::remote::parse_scenario(&text, &id).unwrap_or_else(|e| panic!("{id}: {e}"));
        }
    }
}
