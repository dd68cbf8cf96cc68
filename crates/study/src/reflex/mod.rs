//! `ullstack study reflex`: SLOs for remote tenants (experiments.md, `reflex`).
//!
//! # What it runs
//! The five parts of the published remote-flash evaluation, twice.
//!
//! **At full scale on the simulated server** (`sim::remote`: network model, dataplane threads,
//! the real `qos` scheduler, the SSD model):
//! 1. **Scenario 1**: A (LC, 120 K IOPS, 100 % reads, p95 ≤ 500 µs), B (LC, 70 K IOPS, 80 %
//!    reads, p95 ≤ 500 µs), C (BE, 95 % reads), D (BE, 25 % reads), all 4 KiB, A and B at their
//!    full rate (Poisson), with the scheduler off and on; two threads.
//! 2. **Scenario 2**: the same with B offering 45 K IOPS (it still reserves 70 K).
//! 3. **Cores**: N = 1..12 dataplane threads, one LC tenant per thread (20 K IOPS, 90 % reads,
//!    p95 ≤ 2 ms) and two BE tenants (80 % reads) spread over every thread.
//! 4. **Tenants per core**: one thread, K tenants of 100 IOPS (1 KiB reads, LC, p95 ≤ 2 ms),
//!    K searched ([`search`]: doubling until the thread saturates — it sustains less than
//!    99.9 % of the IOPS its tenants issued — then bisecting).
//! 5. **Unloaded latency**: 4 KiB random read and write at QD1, the device alone (every
//!    network and dataplane cost set to zero) against through the server.
//!
//! **On this machine, through the real server** (where a [`RealRunner`] is given: `ullstack
//! study reflex` gives one, `--sim-only` does not): the same five parts scaled to what this
//! 2-core VM carries ([`scenarios`]: parts 1–3 at 10 % of every rate, queue depth and token
//! rate; part 3 with 1 and 2 workers; part 4 searched again, from 50 tenants; part 5 with the
//! emulated device driven in process as "local"). `ullstack serve`'s server runs in process on
//! the emulated device (127.0.0.1, a port the kernel picks), `ullstack bench`'s load generator
//! drives it with one thread. **Every real run has a simulated twin**: the same scenario file
//! through `sim::remote`, with the same device, profile, scheduler and worker count, and this
//! machine's loopback network and dataplane costs ([`twin`]). The report sets each real run
//! beside its twin, in the figures (real solid, twin dashed, one colour per setting) and in one
//! side-by-side table; the full-scale runs show what the published setting gives in the model.
//!
//! **Replicates**: the simulated runs behind the published rows (scenario 1 off and on, part
//! 5's unloaded reads: [`PUBLISHED_RUN_IDS`]) run `--replicates` times (default 5 for a full
//! study, 1 with `--quick`), seeds `seed` …, so those rows carry 95 % intervals as the other
//! studies' do ([`outcomes`]); the rest of the study, figures and tables, reads replicate 0.
//! The real runs are not replicated: they measure this machine's wall clock, one at a time.
//!
//! # Choices, with their reasons (none were tuned to a result)
//! * **Device**: `nvme-tlc` with program suspend on ([`DEVICE_A_TOML`]). The published device
//!   "A" is a commodity datacenter NVMe TLC drive; our `nvme-tlc` preset is of its class (reads
//!   58–107 µs); such drives suspend programs for reads (an assumption: device.md lists suspend
//!   as a mechanism; the preset leaves it off). Its controller has four firmware cores at
//!   700 ns a read, where the `nvme-tlc` preset (an Intel 750) has one at 2,275 ns: device "A"
//!   sustains about 1 M read-only IOPS (presets.md), more than the 750's 430 K, so its 4 KiB
//!   reads are bound by the link, not by its firmware. The scheduler's profile is `reflex-a`, the
//!   published cost table (presets.md), *not* a calibration of this model: `ullstack calibrate
//!   model:…` is how one would be made, and the report says which was used.
//! * **BE load**: "take what they can": each BE tenant of scenarios 1 and 2 has
//!   [`BE_CONNECTIONS`] connections, each with the server's per-connection in-flight limit
//!   ([`BE_QD_PER_CONN`] = `max_inflight_requests`' default) in flight. One connection would not
//!   do: on one 10 GbE link a tenant of 95 % 4 KiB reads is held to ~318 K IOPS by the link's
//!   reply direction (seen in this model while the study was written), so it could not load
//!   the device.
//! * **Durations**: the full-scale runs measure 1 s after 100 ms of warm-up (`--quick`: 100 ms
//!   after 20 ms); the real runs and their twins 5 s after 500 ms (`--quick`: 1 s after
//!   200 ms): wall-clock time is what the real runs cost.
//! * **The real server's config** is built from the scenario's `[sim]` table by the runner:
//!   every tenant is a config tenant of class `lc` with no fixed SLO, so it has no default flow
//!   and the registry holds exactly the flows the tenants REGISTER, as in the model.
//!
//! # What it leaves out
//! What `sim::remote` leaves out (per-tenant scheduling CPU, so the full-scale part 4 saturates
//! on per-request costs alone), the closed-loop rate correction (`vrate`), and what the twin
//! leaves out of this machine ([`twin`]).

use std::path::{Path, PathBuf};

use sim::remote::{RemoteError, RemoteRunConfig, RemoteSummary};

use indicatif::ProgressBar;

use crate::plan::Size;
use crate::provenance::{Invocation, Provenance, Record};
use crate::sorted_json::{AsValue, EachAsValue};
use crate::table::Table;

mod figures;
mod html;
pub mod outcomes;
pub mod real;
pub mod scenarios;
pub mod search;
pub mod twin;

pub use html::verdict as search_verdict;
pub use real::{sustained_rate, tokens_per_sec, Paired, RealOutcome, RealRunner};
pub use scenarios::{
    quick_about, real_runs, real_search_plan, real_tenants_scenario, replicate_id, replicate_runs,
    runs, scenario, sim_search_plan, tenants_scenario, Part, Place, RealRun, ReflexRun, RunOutcome,
    BE_CONNECTIONS, BE_QD_PER_CONN, DEVICE_A_TOML, PUBLISHED_RUN_IDS, REAL_SCALE_PCT,
    REAL_VOLUME_BYTES, REAL_WORKERS, SMALL_TENANT_IOPS,
};
pub use search::{Probe, SearchOutcome, SearchPlan, Verdict};

/// Bumped when runs or figures change meaning. 2: real runs of all five parts with twins;
/// part 4 searched; `device_iops_in_window`. 3: the published rows' runs replicated over seeds
/// (`replicates`, `replicate_runs`).
pub const VERSION: u32 = 3;

/// Runs one full-scale simulated run.
pub fn simulate(run: &ReflexRun) -> Result<RunOutcome, String> {
    Ok(RunOutcome {
        id: run.id.clone(),
        part: run.part,
        x: run.x,
        summary: simulate_text(&run.id, &run.scenario_toml)?,
    })
}

/// Runs a scenario file's text on the simulated server.
pub fn simulate_text(id: &str, text: &str) -> Result<RemoteSummary, String> {
    let cfg = RemoteRunConfig::parse(text, &format!("{id}.toml"))
        .map_err(|e| format!("run {id}: {e}"))?;
    sim::remote::run(&cfg).map_err(|e| format!("run {id}: {e}"))
}

/// Options of a study run.
pub struct ReflexOptions {
    pub size: Size,
    pub seed: u64,
    /// Runs of each published row's scenarios, seeds `seed` … `seed + replicates - 1` (≥ 1;
    /// `--replicates`, default 5 for a full study and 1 with `--quick`, as the other studies):
    /// [`scenarios::replicate_runs`].
    pub replicates: u64,
    pub out: PathBuf,
    pub jobs: usize,
    /// Show a progress bar (on a terminal) over every run, search probe and twin.
    pub progress: bool,
    /// The build running it, recorded in `study.json` and `provenance.json`.
    pub build: crate::provenance::Build,
    /// The published figures to compare with (`--reference FILE`); `None`: the shipped ones.
    pub reference: Option<PathBuf>,
}

/// What a study run produced.
pub struct ReflexOutcome {
    /// Full-scale simulated runs, part 4's probes included.
    pub sims: Vec<RunOutcome>,
    /// Replicates 1 … of the runs behind the published rows ([`scenarios::replicate_runs`]).
    pub replicates: Vec<RunOutcome>,
    pub sim_search: SearchOutcome,
    /// Real runs with their twins, part 4's probes included (empty with no runner).
    pub real: Vec<Paired>,
    pub real_search: Option<SearchOutcome>,
    /// Full-scale scenarios 1 and 2, per tenant.
    pub headline: Table,
    /// Every real run beside its twin.
    pub comparison: Table,
    pub report: PathBuf,
}

impl ReflexOutcome {
    /// What `ullstack study reflex` prints when the study in `out` ended after `wall`: the
    /// headline and real-vs-model tables unless `quiet`, part 4's verdicts, one line of counts.
    pub fn print_report(&self, out: &Path, quiet: bool, wall: std::time::Duration) {
        if !quiet {
            print!("{}", self.headline.to_text());
            if !self.real.is_empty() {
                println!("\nthis machine, real vs model:");
                print!("{}", self.comparison.to_text());
            }
        }
        println!("part 4, simulated: {}", search_verdict(&self.sim_search));
        if let Some(s) = &self.real_search {
            println!("part 4, real server: {}", search_verdict(s));
        }
        println!(
            "{} simulated + {} real runs (each with its twin) in {:.1} s; results: {} (report.html, \
             study.json, plots)",
            self.sims.len() + self.replicates.len(),
            self.real.len(),
            wall.as_secs_f64(),
            out.display()
        );
    }
}

/// Runs the study: the full-scale simulated runs over `jobs` threads and part 4's search;
/// then, with a runner, the real runs one at a time (nothing else of the study runs meanwhile:
/// they measure wall-clock behaviour) and part 4's search on the real server; then every real
/// run's twin over `jobs` threads; then figures and `report.html`.
pub fn run(opts: &ReflexOptions, real: Option<&dyn RealRunner>) -> Result<ReflexOutcome, String> {
    let runs_dir = opts.out.join("runs");
    std::fs::create_dir_all(&runs_dir)
        .map_err(|e| format!("creating {}: {e}", runs_dir.display()))?;
    let jobs = opts.jobs.max(1);
    let reference = match &opts.reference {
        Some(p) => crate::published::Reference::load(p)?,
        None => crate::published::Reference::shipped(),
    };
    let specs = runs(opts.size, opts.seed);
    let replicate_specs = replicate_runs(opts.size, opts.seed, opts.replicates);
    // Not resumable (its real runs are measured together), so the record is this invocation.
    let mut prov = Provenance {
        study: "reflex".into(),
        invocations: vec![Invocation::start(&opts.build, "run", false)],
    };
    prov.write(&opts.out)?;
    let real_count = real.map_or(0, |_| real_runs(opts.size, opts.seed).len());
    let bar = progress_bar(
        opts.progress,
        specs.len() + replicate_specs.len() + real_count,
    );
    // Part 4's search is sequential (each count depends on the last): it runs on a thread of
    // its own beside the fixed runs, which take the other `jobs - 1`.
    let (fixed, searched) = std::thread::scope(|s| {
        let search = s.spawn(|| sim_tenants_search(opts, &bar));
        let all: Vec<&ReflexRun> = specs.iter().chain(&replicate_specs).collect();
        let fixed = crate::pool::try_map(&all, jobs.saturating_sub(1).max(1), |r| {
            let o = simulate(r);
            bar.inc(1);
            o
        });
        let searched = search
            .join()
            .unwrap_or_else(|_| Err("part 4's search panicked".into()));
        (fixed, searched)
    });
    let mut sims = fixed?;
    let replicates = sims.split_off(specs.len());
    let (sim_search, probes) = searched?;
    let probe_specs: Vec<ReflexRun> = probes.iter().map(|(spec, _)| spec.clone()).collect();
    sims.extend(probes.into_iter().map(|(_, o)| o));
    for (spec, o) in specs.iter().chain(&probe_specs).zip(&sims) {
        write_run(&runs_dir.join(&spec.id), &spec.scenario_toml, &o.summary)?;
    }
    for (spec, o) in replicate_specs.iter().zip(&replicates) {
        write_run(&runs_dir.join(&spec.id), &spec.scenario_toml, &o.summary)?;
    }

    let mut paired = Vec::new();
    let mut real_search = None;
    if let Some(runner) = real {
        let mut outcomes = Vec::new();
        bar.set_message("real server runs");
        for r in real_runs(opts.size, opts.seed) {
            let o = runner.run(&r)?;
            bar.inc(1);
            if let Some(why) = &o.refused {
                return Err(format!("{}: {why}", r.id));
            }
            outcomes.push(o);
        }
        real_search = Some(search::search(real_search_plan(opts.size), |k| {
            let r = RealRun {
                id: format!("real-tenants-{k}"),
                part: Part::TenantsPerCore,
                x: k,
                place: Place::Server,
                scenario_toml: real_tenants_scenario(opts.size, opts.seed, k),
            };
            bar.inc_length(1);
            let o = runner.run(&r)?;
            bar.inc(1);
            let probe = match &o.refused {
                Some(reason) => Probe::Refused {
                    reason: reason.clone(),
                },
                None => Probe::Served {
                    offered_iops: o.tenants.iter().map(|t| t.iops).sum(),
                    served_iops: o.device_iops_in_window,
                },
            };
            if o.refused.is_none() {
                outcomes.push(o);
            }
            Ok::<_, String>(probe)
        })?);
        bar.set_message("simulated twins");
        bar.inc_length(outcomes.len() as u64);
        let twins = crate::pool::try_map(&outcomes, jobs, |o| {
            let t = simulate_text(&o.id, &o.scenario_toml);
            bar.inc(1);
            t
        })?;
        for (real, twin) in outcomes.into_iter().zip(twins) {
            let dir = runs_dir.join(&real.id);
            write_file(&dir, "scenario.toml", real.scenario_toml.as_bytes())?;
            write_file(&dir, "summary.json", &json(&real)?)?;
            write_file(&dir, "twin.json", &json(&twin)?)?;
            paired.push(Paired { real, twin });
        }
    }

    bar.finish_and_clear();
    let seeds = opts.seed..opts.seed + opts.replicates.max(1);
    let record = Record::new(&opts.build, seeds.clone(), &prov);
    let published_rows = crate::published::rows(
        &reference,
        "reflex",
        &outcomes::published(&sims, &replicates),
    );
    let published_table = crate::published::table(&published_rows);
    crate::sorted_json::write_pretty(
        &opts.out.join("study.json"),
        &StudyJson {
            provenance: AsValue(&record),
            published: EachAsValue(&published_rows),
            real: EachAsValue(&paired),
            real_tenants_per_core: AsValue(&real_search),
            replicates: opts.replicates,
            replicate_runs: EachAsValue(&replicates),
            seed: opts.seed,
            simulated: EachAsValue(&sims),
            size: opts.size.as_str(),
            study: "reflex",
            tenants_per_core: AsValue(&sim_search),
            version: VERSION,
        },
    )?;
    let headline = html::headline(&sims);
    let comparison = html::comparison(&paired);
    let mut figs = figures::sim_figures(&sims);
    figs.extend(figures::real_figures(&paired));
    let mut pngs = Vec::new();
    for f in &figs {
        pngs.push(f.write(&opts.out)?);
    }
    prov.current_mut().counts(sims.len() + paired.len(), 0);
    prov.current_mut().end();
    let provenance_html = crate::provenance::html(&record, &prov);
    let page = html::report(&html::Page {
        size: opts.size,
        seed: opts.seed,
        published: &published_table,
        headline: &headline,
        comparison: &comparison,
        figures: &figs,
        pngs: &pngs,
        sim_specs: &specs.iter().chain(&probe_specs).collect::<Vec<_>>(),
        sim_search: &sim_search,
        real: &paired,
        real_search: real_search.as_ref(),
        provenance: &provenance_html,
    });
    write_file(&opts.out, "report.html", page.as_bytes())?;
    let inv = prov.current_mut();
    let md = crate::report::markdown(&crate::report::MarkdownInput {
        study: "reflex",
        size: opts.size,
        seeds: (seeds.start, seeds.end - 1),
        replicates: opts.replicates,
        build: inv.build.describe(),
        command: inv.command_line(),
        started_utc: inv.started_utc.clone(),
        published: &published_table,
        headline: &headline,
    });
    write_file(&opts.out, crate::report::RESULTS_MD, md.as_bytes())?;
    prov.write(&opts.out)?;
    Ok(ReflexOutcome {
        sims,
        replicates,
        sim_search,
        real: paired,
        real_search,
        headline,
        comparison,
        report: opts.out.join("report.html"),
    })
}

/// `study.json`: its keys in sorted order, each run's tree built as it is printed
/// ([`crate::sorted_json`]), the text that of a `serde_json::Value` of the whole.
#[derive(serde::Serialize)]
struct StudyJson<'a> {
    provenance: AsValue<'a, Record>,
    published: EachAsValue<'a, crate::published::Row>,
    real: EachAsValue<'a, Paired>,
    real_tenants_per_core: AsValue<'a, Option<SearchOutcome>>,
    /// Runs of each published row's scenarios (`ReflexOptions::replicates`).
    replicates: u64,
    /// Replicates 1 … of the runs behind the published rows; replicate 0 is in `simulated`.
    replicate_runs: EachAsValue<'a, RunOutcome>,
    seed: u64,
    simulated: EachAsValue<'a, RunOutcome>,
    size: &'a str,
    study: &'a str,
    tenants_per_core: AsValue<'a, SearchOutcome>,
    version: u32,
}

/// Part 4 at full scale: the search and every probe's run.
type SimSearch = (SearchOutcome, Vec<(ReflexRun, RunOutcome)>);

fn sim_tenants_search(opts: &ReflexOptions, bar: &ProgressBar) -> Result<SimSearch, String> {
    let mut probes = Vec::new();
    let outcome = search::search(sim_search_plan(opts.size), |k| {
        bar.inc_length(1);
        let _done = Finally(|| bar.inc(1));
        let spec = ReflexRun {
            id: format!("tenants-{k}"),
            part: Part::TenantsPerCore,
            x: k,
            scenario_toml: tenants_scenario(opts.size, opts.seed, k),
        };
        let cfg = RemoteRunConfig::parse(&spec.scenario_toml, &spec.id)
            .map_err(|e| format!("run {}: {e}", spec.id))?;
        match sim::remote::run(&cfg) {
            Ok(summary) => {
                let probe = Probe::Served {
                    offered_iops: summary.tenants.iter().map(|t| t.iops).sum(),
                    served_iops: summary.device_iops_in_window,
                };
                let o = RunOutcome {
                    id: spec.id.clone(),
                    part: spec.part,
                    x: k,
                    summary,
                };
                probes.push((spec, o));
                Ok(probe)
            }
            Err(RemoteError::Refused { tenant, reason }) => Ok(Probe::Refused {
                reason: format!("tenant {tenant:?}: {reason}"),
            }),
            Err(e) => Err(format!("run {}: {e}", spec.id)),
        }
    })?;
    Ok((outcome, probes))
}

/// A bar over `total` runs (grown as part 4's probes and the twins are known), on a terminal
/// when `show`; its message names the phase.
fn progress_bar(show: bool, total: usize) -> ProgressBar {
    let bar = if show {
        ProgressBar::new(total as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} runs ({msg}), {elapsed} elapsed",
        )
        .expect("valid template"),
    );
    bar.set_message("simulated runs and part 4's search");
    bar
}

/// Runs its closure when dropped: a probe counts as done however it ends.
struct Finally<F: Fn()>(F);

impl<F: Fn()> Drop for Finally<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

fn json(v: &impl serde::Serialize) -> Result<Vec<u8>, String> {
    serde_json::to_vec_pretty(v).map_err(|e| e.to_string())
}

fn write_run(dir: &Path, scenario: &str, summary: &RemoteSummary) -> Result<(), String> {
    write_file(dir, "scenario.toml", scenario.as_bytes())?;
    write_file(dir, "summary.json", &json(summary)?)
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
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
                .filter(|t| t.class == qos::TenantClass::LatencyCritical)
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
}
