//! The study's scenario files: the published scenarios at full scale for the simulated server,
//! and the same scenarios scaled to this machine for the real server and its twin.
//!
//! Every file is a `ullstack bench` scenario (tenants, duration, seed) with a `[sim]` table;
//! bench ignores `[sim]`, the simulator reads it, and the real runner builds the server's config
//! from it (device, profile, scheduler, workers), so one file drives the real server, the load
//! generator and the model.
//!
//! # Scaling (the real runs)
//! This VM has two cores for the server, the load generator and everything else, far from the
//! published 1 M-IOPS server. Parts 1–3 are scaled by [`REAL_SCALE_PCT`]: every offered rate,
//! every SLO's IOPS, every BE queue depth (at least 1) and the profile's token rates (both
//! columns); latencies (SLO targets), sizes, read ratios, connections and the device are not.
//! The scaled scenario keeps its shape: the same share of the device's token rate reserved,
//! the same BE share left. Part 4's tenants keep their published 100 IOPS and the profile is
//! not scaled: the thread is what is searched, and a scaled profile's admission control would
//! refuse tenants before the thread saturated. Part 5 is one request at a time.
//!
//! Every real tenant addresses the first [`REAL_VOLUME_BYTES`] (`span`), the emulated volume's
//! size, so the twin's tenants touch the same blocks.

use std::fmt::Write as _;

use super::search::{SearchPlan, REAL_SATURATED_BELOW_PERMILLE, SIM_SATURATED_BELOW_PERMILLE};
use super::twin;
use crate::plan::Size;
use sim::remote::RemoteSummary;

/// The stand-in for device "A" (see the module essay).
pub const DEVICE_A_TOML: &str = r#"{ preset = "nvme-tlc", flash = { suspend = "on" }, ctrl = { firmware_cores = 4, firmware_read_ns = 700 } }"#;
/// Connections per BE tenant of scenarios 1 and 2.
pub const BE_CONNECTIONS: u32 = 4;
/// Requests each BE connection keeps in flight (the server's `max_inflight_requests` default).
pub const BE_QD_PER_CONN: u32 = 256;
/// Part 3's BE tenants keep this many requests in flight per dataplane thread.
pub const CORES_BE_QD_PER_THREAD: u32 = 64;
/// Part 4's tenants (experiments.md): 100 IOPS each of 1 KiB reads.
pub const SMALL_TENANT_IOPS: u64 = 100;
/// The real runs' share of the published rates: the published server did ~1 M IOPS on its
/// cores; here the server and the load generator share two cores (`ullstack bench` at QD32 on
/// the memory backend did 185–223 K IOPS: CHANGELOG.md), and scenario 1 offers
/// 190 K IOPS of LC load alone plus what the BE tenants take.
pub const REAL_SCALE_PCT: u64 = 10;
/// Worker counts of part 3 on the real server: this VM has two cores, and the load generator
/// needs one of them. One worker gives the server a core of its own; two show what a second
/// worker buys when it must share the cores with the generator. More workers than cores would
/// only time-share them.
pub const REAL_WORKERS: &[u32] = &[1, 2];
/// Part 5 runs with the token scheduler off: one request at a time has nothing to be
/// scheduled against, and with it on a lone best-effort tenant is paced at the BE share — its
/// 4 KiB writes cost 10 tokens each, so on `reflex-a` (570 K tokens/s) one every 17.5 µs, which
/// the first version of this study reported as the device's write latency (the device model
/// writes into its buffer in 13 µs).
pub const UNLOADED_SCHEDULER: &str = "off";
/// Size of the real runs' emulated volume, and the span every real tenant addresses.
pub const REAL_VOLUME_BYTES: u64 = 1 << 30;

/// Measured time and warm-up of the full-scale simulated runs.
fn sim_durations(size: Size) -> (&'static str, &'static str) {
    match size {
        Size::Quick => ("100ms", "20ms"),
        Size::Full => ("1s", "100ms"),
    }
}

/// Measured time and warm-up of the real runs (wall clock) and their twins (simulated).
fn real_durations(size: Size) -> (&'static str, &'static str) {
    match size {
        Size::Quick => ("1s", "200ms"),
        Size::Full => ("5s", "500ms"),
    }
}

/// What `--quick` shortens (for `study --help`).
pub fn quick_about() -> String {
    let (sim_q, real_q) = (sim_durations(Size::Quick).0, real_durations(Size::Quick).0);
    let (sim_f, real_f) = (sim_durations(Size::Full).0, real_durations(Size::Full).0);
    let (real_max_q, real_max_f) = (
        real_search_plan(Size::Quick).max,
        real_search_plan(Size::Full).max,
    );
    format!(
        "simulated runs measure {sim_q} instead of {sim_f}, real runs {real_q} instead of \
         {real_f}; part 3 with 1-2 threads instead of 1-12; part 4's searches unrefined, the \
         real one up to {real_max_q} tenants instead of {real_max_f}"
    )
}

/// Part 4 on the simulated server at full scale.
pub fn sim_search_plan(size: Size) -> SearchPlan {
    SearchPlan {
        saturated_below_permille: SIM_SATURATED_BELOW_PERMILLE,
        start: 1_000,
        max: 64_000,
        refine_steps: match size {
            Size::Quick => 0,
            Size::Full => 3,
        },
    }
}

/// Part 4 on the real server. The bound is memory: the load generator keeps HDR histograms
/// per connection and per tenant, about 1.2 MB a tenant (`ullstack bench` with 1 600 tenants of
/// this study peaked at 1.86 GB resident, `/usr/bin/time`), so 3 200 tenants (`--quick`:
/// 1 600) cost about 4 GB (2 GB) while they run.
pub fn real_search_plan(size: Size) -> SearchPlan {
    match size {
        Size::Quick => SearchPlan {
            saturated_below_permille: REAL_SATURATED_BELOW_PERMILLE,
            start: 50,
            max: 1_600,
            refine_steps: 0,
        },
        Size::Full => SearchPlan {
            saturated_below_permille: REAL_SATURATED_BELOW_PERMILLE,
            start: 50,
            max: 3_200,
            refine_steps: 2,
        },
    }
}

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

/// One simulated run at full scale: its id, part, x value (threads, tenants, or 0) and file.
#[derive(Clone, Debug)]
pub struct ReflexRun {
    pub id: String,
    pub part: Part,
    pub x: u64,
    pub scenario_toml: String,
}

/// One simulated run's outcome.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunOutcome {
    pub id: String,
    pub part: Part,
    pub x: u64,
    pub summary: RemoteSummary,
}

/// Where a real run happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Place {
    /// `ullstack serve`'s server and `ullstack bench`'s load over loopback TCP.
    Server,
    /// The emulated device driven directly in process: no network, no server.
    Device,
}

/// One real run (and its twin: the same file through `sim::remote`).
#[derive(Clone, Debug)]
pub struct RealRun {
    pub id: String,
    pub part: Part,
    pub x: u64,
    pub place: Place,
    pub scenario_toml: String,
}

fn header(comment: &str, duration: &str, warmup: &str, seed: u64, real: bool) -> String {
    let threads = if real {
        // The load generator's one thread: the other core is the server's.
        "threads = 1\n"
    } else {
        ""
    };
    format!(
        "# {comment}\nduration = \"{duration}\"\nwarmup = \"{warmup}\"\n{threads}seed = {seed}\n"
    )
}

/// A `[[tenant]]` table from key/value pairs (values already TOML). A real tenant also gets
/// its secret (the server's config gives it the same) and the volume's span.
fn tenant(pairs: &[(&str, String)], real: bool) -> String {
    let mut s = String::from("[[tenant]]\n");
    for (k, v) in pairs {
        writeln!(s, "{k} = {v}").expect("string");
    }
    if real {
        let name = pairs
            .iter()
            .find(|(k, _)| *k == "name")
            .map(|(_, v)| v.trim_matches('"').to_lowercase())
            .unwrap_or_default();
        writeln!(
            s,
            "secret = \"secret-{name}\"\nspan = \"{REAL_VOLUME_BYTES}\""
        )
        .expect("string");
    }
    s
}

fn q(s: &str) -> String {
    format!("\"{s}\"")
}

fn n(v: impl std::fmt::Display) -> String {
    v.to_string()
}

fn sim_table(scheduler: &str, workers: u32) -> String {
    format!(
        "[sim]\ndevice = {DEVICE_A_TOML}\nprofile = \"reflex-a\"\nscheduler = \"{scheduler}\"\nworkers = {workers}\n"
    )
}

/// `reflex-a` with its token rates scaled to `pct` %.
pub fn scaled_profile(pct: u64) -> qos::DeviceProfile {
    let mut p = qos::DeviceProfile::reflex_a();
    if pct != 100 {
        p.name = format!("{}-{pct}pct", p.name);
        for pt in &mut p.points {
            pt.tokens_per_sec = pt.tokens_per_sec * pct / 100;
            pt.read_only_tokens_per_sec = pt.read_only_tokens_per_sec * pct / 100;
        }
    }
    p
}

/// A real run's `[sim]` table: the server (device, profile, scheduler, workers) and this
/// machine's network and dataplane costs for the twin.
fn real_sim_table(scheduler: &str, workers: u32, profile_pct: u64, local: bool) -> String {
    let p = scaled_profile(profile_pct);
    let mut s = format!(
        "[sim]\ndevice = {DEVICE_A_TOML}\nscheduler = \"{scheduler}\"\nworkers = {workers}\n\
         [sim.profile]\nname = \"{}\"\nwrite_cost_mtok = {}\nread_only_read_cost_mtok = {}\nflush_cost_mtok = {}\ntrim_cost_mtok = {}\n",
        p.name, p.write_cost_mtok, p.read_only_read_cost_mtok, p.flush_cost_mtok, p.trim_cost_mtok
    );
    for pt in &p.points {
        write!(
            s,
            "[[sim.profile.points]]\np95_read_latency_ns = {}\ntokens_per_sec = {}\nread_only_tokens_per_sec = {}\n",
            pt.p95_read_latency_ns, pt.tokens_per_sec, pt.read_only_tokens_per_sec
        )
        .expect("string");
    }
    s.push_str(&twin::net_and_costs(local));
    s
}

/// `x` scaled to `pct` %, at least 1.
fn scale(x: u64, pct: u64) -> u64 {
    (x * pct / 100).max(1)
}

/// The tenants of scenario 1 or 2 (B offers `b_rate`) at `pct` % of the published rates.
fn scenario_tenants(b_rate: u64, pct: u64, real: bool) -> String {
    let be = |name: &str, read: u32| {
        tenant(
            &[
                ("name", q(name)),
                ("class", q("be")),
                (
                    "qd",
                    n(scale(u64::from(BE_QD_PER_CONN * BE_CONNECTIONS), pct)),
                ),
                ("conns", n(BE_CONNECTIONS)),
                ("read", n(read)),
                ("size", q("4k")),
            ],
            real,
        )
    };
    let lc = |name: &str, iops: u64, rate: u64, read: u32| {
        let mut pairs = vec![
            ("name", q(name)),
            ("class", q("lc")),
            ("iops", n(scale(iops, pct))),
        ];
        if rate != iops {
            pairs.push(("rate", n(scale(rate, pct))));
        }
        pairs.extend([("p95", q("500us")), ("read", n(read)), ("size", q("4k"))]);
        tenant(&pairs, real)
    };
    format!(
        "{}{}{}{}",
        lc("A", 120_000, 120_000, 100),
        lc("B", 70_000, b_rate, 80),
        be("C", 95),
        be("D", 25)
    )
}

/// Scenario 1 or 2 at full scale (B's offered rate differs), scheduler `on` or `off`.
pub fn scenario(size: Size, seed: u64, b_rate: u64, scheduler: &str) -> String {
    let (d, w) = sim_durations(size);
    format!(
        "{}{}{}",
        header(
            "reflex scenario: A, B latency-critical; C, D best-effort",
            d,
            w,
            seed,
            false
        ),
        scenario_tenants(b_rate, 100, false),
        sim_table(scheduler, 2),
    )
}

fn cores_tenants(cores: u32, pct: u64, real: bool) -> String {
    let mut s = String::new();
    for i in 0..cores {
        s.push_str(&tenant(
            &[
                ("name", q(&format!("lc{i}"))),
                ("class", q("lc")),
                ("iops", n(scale(20_000, pct))),
                ("p95", q("2ms")),
                ("read", n(90)),
                ("size", q("4k")),
            ],
            real,
        ));
    }
    for name in ["be0", "be1"] {
        s.push_str(&tenant(
            &[
                ("name", q(name)),
                ("class", q("be")),
                (
                    "qd",
                    n(scale(u64::from(CORES_BE_QD_PER_THREAD * cores), pct)),
                ),
                ("conns", n(cores)),
                ("read", n(80)),
                ("size", q("4k")),
            ],
            real,
        ));
    }
    s
}

fn small_tenants(tenants: u64, real: bool) -> String {
    tenant(
        &[
            ("name", q("t")),
            ("class", q("lc")),
            ("iops", n(SMALL_TENANT_IOPS)),
            ("p95", q("2ms")),
            ("read", n(100)),
            ("size", q("1k")),
            ("count", n(tenants)),
        ],
        real,
    )
}

fn qd1_tenant(read: u32, real: bool) -> String {
    tenant(
        &[
            ("name", q("q")),
            ("class", q("be")),
            ("qd", n(1)),
            ("read", n(read)),
            ("size", q("4k")),
        ],
        real,
    )
}

/// Part 4 at full scale: `tenants` small tenants on one thread.
pub fn tenants_scenario(size: Size, seed: u64, tenants: u64) -> String {
    let (d, w) = sim_durations(size);
    format!(
        "{}{}{}",
        header(
            "reflex part 4: many small tenants on one thread",
            d,
            w,
            seed,
            false
        ),
        small_tenants(tenants, false),
        sim_table("on", 1)
    )
}

/// Every full-scale simulated run but part 4's, which is searched ([`tenants_scenario`]).
pub fn runs(size: Size, seed: u64) -> Vec<ReflexRun> {
    let (d, w) = sim_durations(size);
    let mut v = Vec::new();
    for (part, b_rate) in [(Part::Scenario1, 70_000), (Part::Scenario2, 45_000)] {
        let k = if part == Part::Scenario1 { 1 } else { 2 };
        for sched in ["off", "on"] {
            v.push(ReflexRun {
                id: format!("s{k}-{sched}"),
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
            scenario_toml: format!(
                "{}{}{}",
                header(
                    "reflex part 3: one LC tenant per thread, two BE tenants",
                    d,
                    w,
                    seed,
                    false
                ),
                cores_tenants(c, 100, false),
                sim_table("on", c)
            ),
        });
    }
    for (op, read) in [("read", 100), ("write", 0)] {
        for (place, local) in [("local", true), ("remote", false)] {
            let mut s = header("reflex part 5: QD1, unloaded", d, w, seed, false);
            s.push_str(&qd1_tenant(read, false));
            s.push_str(&sim_table(UNLOADED_SCHEDULER, 1));
            if local {
                s.push_str(&twin::net_and_costs(true));
            }
            v.push(ReflexRun {
                id: format!("unloaded-{op}-{place}"),
                part: Part::Unloaded,
                x: 0,
                scenario_toml: s,
            });
        }
    }
    v
}

/// The runs behind `reflex`'s rows of `reference/published.toml` ([`super::outcomes`]):
/// scenario 1 with the scheduler off and on, and part 5's unloaded reads, local and remote.
/// They are the study's replicated runs ([`replicate_runs`]).
pub const PUBLISHED_RUN_IDS: [&str; 4] = [
    "s1-off",
    "s1-on",
    "unloaded-read-local",
    "unloaded-read-remote",
];

/// The id of replicate `r` of run `id`: replicate 0 is the run itself (seed `seed`), replicate
/// `r` ≥ 1 (seed `seed + r`) is `<id>-r<r>`.
pub fn replicate_id(id: &str, r: u64) -> String {
    match r {
        0 => id.to_string(),
        r => format!("{id}-r{r}"),
    }
}

/// Replicates 1 … `replicates - 1` of the runs behind the published rows
/// ([`PUBLISHED_RUN_IDS`]): the same scenarios as [`runs`] with seeds `seed + 1` …, under their
/// [`replicate_id`]s. Replicate 0 is [`runs`]' own run; the figures, the headline table and part
/// 4 read replicate 0 only, as `ull`'s do (docs/study.md, *Statistics*). Worked example:
/// `replicates = 3`, seed 1 → `s1-off-r1`, `s1-on-r1`, `unloaded-read-local-r1`,
/// `unloaded-read-remote-r1` (seed 2), then the same four `-r2` (seed 3).
pub fn replicate_runs(size: Size, seed: u64, replicates: u64) -> Vec<ReflexRun> {
    (1..replicates)
        .flat_map(|r| {
            runs(size, seed + r)
                .into_iter()
                .filter(|run| PUBLISHED_RUN_IDS.contains(&run.id.as_str()))
                .map(move |run| ReflexRun {
                    id: replicate_id(&run.id, r),
                    ..run
                })
        })
        .collect()
}

/// Part 4 on the real server: `tenants` small tenants on one worker.
pub fn real_tenants_scenario(size: Size, seed: u64, tenants: u64) -> String {
    let (d, w) = real_durations(size);
    format!(
        "{}{}{}",
        header(
            &format!("reflex part 4 on this machine: {tenants} tenants of {SMALL_TENANT_IOPS} IOPS on one worker (profile not scaled)"),
            d,
            w,
            seed,
            true
        ),
        small_tenants(tenants, true),
        real_sim_table("on", 1, 100, false)
    )
}

/// The real runs but part 4's (searched: [`real_tenants_scenario`]), parts 1–3 scaled to
/// [`REAL_SCALE_PCT`].
pub fn real_runs(size: Size, seed: u64) -> Vec<RealRun> {
    let (d, w) = real_durations(size);
    let pct = REAL_SCALE_PCT;
    let mut v = Vec::new();
    for (part, b_rate) in [(Part::Scenario1, 70_000), (Part::Scenario2, 45_000)] {
        let k = if part == Part::Scenario1 { 1 } else { 2 };
        for sched in ["off", "on"] {
            v.push(RealRun {
                id: format!("real-s{k}-{sched}"),
                part,
                x: 0,
                place: Place::Server,
                scenario_toml: format!(
                    "{}{}{}",
                    header(
                        &format!(
                            "reflex scenario {k} on this machine, scaled to {pct} %, one worker"
                        ),
                        d,
                        w,
                        seed,
                        true
                    ),
                    scenario_tenants(b_rate, pct, true),
                    real_sim_table(sched, 1, pct, false)
                ),
            });
        }
    }
    for &c in REAL_WORKERS {
        v.push(RealRun {
            id: format!("real-cores-{c}"),
            part: Part::Cores,
            x: u64::from(c),
            place: Place::Server,
            scenario_toml: format!(
                "{}{}{}",
                header(
                    &format!("reflex part 3 on this machine, scaled to {pct} %: {c} worker(s)"),
                    d,
                    w,
                    seed,
                    true
                ),
                cores_tenants(c, pct, true),
                real_sim_table("on", c, pct, false)
            ),
        });
    }
    for (op, read) in [("read", 100), ("write", 0)] {
        for (place, local) in [(Place::Device, true), (Place::Server, false)] {
            let where_ = if local { "local" } else { "remote" };
            v.push(RealRun {
                id: format!("real-unloaded-{op}-{where_}"),
                part: Part::Unloaded,
                x: 0,
                place,
                scenario_toml: format!(
                    "{}{}{}",
                    header(
                        &format!(
                            "reflex part 5 on this machine: QD1 4 KiB {op}s, {}",
                            if local {
                                "the emulated device driven in process"
                            } else {
                                "through the server"
                            }
                        ),
                        d,
                        w,
                        seed,
                        true
                    ),
                    qd1_tenant(read, true),
                    real_sim_table(UNLOADED_SCHEDULER, 1, pct, local)
                ),
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim::remote::RemoteRunConfig;

    #[test]
    fn every_scenario_parses_for_the_simulator_and_the_load_generator() {
        for size in [Size::Quick, Size::Full] {
            let mut texts: Vec<(String, String)> = runs(size, 1)
                .into_iter()
                .map(|r| (r.id, r.scenario_toml))
                .collect();
            texts.extend(
                real_runs(size, 1)
                    .into_iter()
                    .map(|r| (r.id, r.scenario_toml)),
            );
            texts.push(("t".into(), tenants_scenario(size, 1, 1000)));
            texts.push(("rt".into(), real_tenants_scenario(size, 1, 50)));
            for (id, text) in texts {
                RemoteRunConfig::parse(&text, &id).unwrap_or_else(|e| panic!("{id}: {e}"));
                scenario::parse_scenario(&text, &id).unwrap_or_else(|e| panic!("{id}: {e}"));
            }
        }
    }

    /// The scaled scenario 1 keeps its shape: rates, SLO IOPS, BE queue depths and the
    /// profile's rates at 10 %, latencies, sizes and read ratios as published.
    #[test]
    fn scaling_keeps_the_shape() {
        let full = RemoteRunConfig::parse(&scenario(Size::Quick, 1, 70_000, "on"), "full").unwrap();
        let real = real_runs(Size::Quick, 1)
            .into_iter()
            .find(|r| r.id == "real-s1-on")
            .unwrap();
        let real = RemoteRunConfig::parse(&real.scenario_toml, "real").unwrap();
        assert_eq!(real.server.workers, 1);
        for (f, r) in full.tenants.iter().zip(&real.tenants) {
            assert_eq!(f.name, r.name);
            assert_eq!((f.read_pct, f.size_bytes), (r.read_pct, r.size_bytes));
            assert_eq!(r.span_bytes, Some(REAL_VOLUME_BYTES));
            use qos::TenantSpec;
            use scenario::Load;
            match (f.class, r.class) {
                (TenantSpec::LatencyCritical(a), TenantSpec::LatencyCritical(b)) => {
                    assert_eq!(
                        (a.p95_read_latency_ns, a.iops / 10),
                        (b.p95_read_latency_ns, b.iops)
                    )
                }
                (TenantSpec::BestEffort(a), TenantSpec::BestEffort(b)) => assert_eq!(a, b),
                other => panic!("classes differ: {other:?}"),
            }
            match (f.load, r.load) {
                (Load::Open { iops: x }, Load::Open { iops: y }) => assert_eq!(x / 10, y),
                (Load::Closed { queue_depth: x }, Load::Closed { queue_depth: y }) => {
                    assert_eq!(x / 10, y)
                }
                other => panic!("loads differ: {other:?}"),
            }
        }
        let (fp, rp) = (&full.server.profile, &real.server.profile);
        assert_eq!(fp.write_cost_mtok, rp.write_cost_mtok);
        for (a, b) in fp.points.iter().zip(&rp.points) {
            assert_eq!(a.p95_read_latency_ns, b.p95_read_latency_ns);
            assert_eq!(a.tokens_per_sec / 10, b.tokens_per_sec);
            assert_eq!(a.read_only_tokens_per_sec / 10, b.read_only_tokens_per_sec);
        }
    }
}
