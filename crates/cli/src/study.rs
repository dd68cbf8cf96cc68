//! `ullstack study` argument wiring: list, run (whole or a shard), merge shards. The work is in
//! crate `study`.

use std::path::PathBuf;

use anyhow::{anyhow, bail};
use clap::Args;
use study::driver::{self, StudyOptions, StudyOutcome};
use study::Size;

/// Run a study: a named set of simulations with plots and a self-contained report.
///
///   ullstack study list                          the studies, with their run counts
///   ullstack study ull --quick                   the short version (seconds)
///   ullstack study ull --jobs 8 --out results/ull
///   ullstack study ull --shard 0/2 --out a       half the runs (runs 0, 2, 4, …); on another
///   ullstack study ull --shard 1/2 --out b       machine the other half, then
///   ullstack study merge a b --out results/ull   one study folder and report
///
/// Writes into --out (default results/study/NAME): runs/<id>/ (config.toml, job.fio,
/// summary.json — `ullstack sim --config runs/<id>/config.toml` re-runs one alone), study.json,
/// a CSV, SVG and PNG per plot, and report.html. Re-running resumes: runs already there with an
/// unchanged config are not redone, so an interrupted study loses only the runs in flight.
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct StudyArgs {
    /// A study name, `list`, or `merge`.
    #[arg(value_name = "NAME|list|merge")]
    target: String,
    /// With `merge`: the shard folders to join.
    #[arg(value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// The short version: few I/Os per point (averages, not tails).
    #[arg(long)]
    quick: bool,
    /// Results folder (default results/study/NAME; for merge, the first DIR).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Runs simulated at once (default: every core).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Seed of every run (default 1).
    #[arg(long)]
    seed: Option<u64>,
    /// Run only shard I of N (runs I, I+N, I+2N, …); join with `ullstack study merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// No progress bar and no table: one line saying where the results are.
    #[arg(long)]
    quiet: bool,
    /// `reflex` only: skip the real-server half (serve + bench on this machine).
    #[arg(long)]
    sim_only: bool,
}

pub fn run(args: StudyArgs) -> anyhow::Result<()> {
    match args.target.as_str() {
        "list" => {
            if !args.dirs.is_empty() {
                bail!(
                    "`study list` takes no folders (got {})",
                    args.dirs[0].display()
                );
            }
            list();
            Ok(())
        }
        "merge" => merge(args),
        "reflex" => run_reflex(args),
        _ => run_study(args),
    }
}

fn list() {
    for def in study::catalogue() {
        let quick = (def.runs)(Size::Quick, 1).len();
        let full = (def.runs)(Size::Full, 1).len();
        println!(
            "{:<12} {full} runs (--quick: {quick})  {}",
            def.name, def.about
        );
    }
    let quick = study::reflex::runs(Size::Quick, 1).len();
    let full = study::reflex::runs(Size::Full, 1).len();
    println!(
        "{:<12} {full} runs (--quick: {quick}) + {} on the real server  SLOs for remote tenants: \
         simulated server with the qos scheduler off/on, cores, tenants per core, unloaded \
         latency; the same scenarios through serve + bench",
        "reflex",
        study::reflex::real_scenarios(Size::Quick, 1, 10).len()
    );
}

/// `ullstack study reflex`: its own runner (remote scenarios, not device runs).
fn run_reflex(args: StudyArgs) -> anyhow::Result<()> {
    if !args.dirs.is_empty() || args.shard.is_some() {
        bail!("`study reflex` takes no folders and no --shard");
    }
    if args.jobs == Some(0) {
        bail!("--jobs 0: expected at least 1");
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results/study/reflex"));
    let opts = study::reflex::ReflexOptions {
        size: if args.quick { Size::Quick } else { Size::Full },
        seed: args.seed.unwrap_or(1),
        out: out.clone(),
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let started = std::time::Instant::now();
    let runner = crate::reflex::InProcess;
    let real: Option<&dyn study::reflex::RealRunner> =
        if args.sim_only { None } else { Some(&runner) };
    let o = study::reflex::run(&opts, real).map_err(|e| anyhow!(e))?;
    if !args.quiet {
        print!("{}", o.headline.to_text());
    }
    println!(
        "{} simulated + {} real runs in {:.1} s; results: {} (report.html, study.json, plots)",
        o.sims.len(),
        o.real.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

fn run_study(args: StudyArgs) -> anyhow::Result<()> {
    if !args.dirs.is_empty() {
        bail!(
            "`study {}` takes no folders (got {}); folders go to `study merge`",
            args.target,
            args.dirs[0].display()
        );
    }
    let def = study::find(&args.target).map_err(|e| anyhow!(e))?;
    let shard = args
        .shard
        .as_deref()
        .map(driver::parse_shard)
        .transpose()
        .map_err(|e| anyhow!(e))?;
    if args.jobs == Some(0) {
        bail!("--jobs 0: expected at least 1");
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results/study").join(def.name));
    let opts = StudyOptions {
        size: if args.quick { Size::Quick } else { Size::Full },
        seed: args.seed.unwrap_or(1),
        out: out.clone(),
        jobs,
        shard,
        progress: !args.quiet,
    };
    let started = std::time::Instant::now();
    let outcome = driver::run(&def, &opts).map_err(|e| anyhow!(e))?;
    report(&outcome, &out, args.quiet, started.elapsed());
    if let Some(s) = shard {
        println!(
            "shard {}/{} done; join the shards with `ullstack study merge DIR...`",
            s.index, s.count
        );
    }
    Ok(())
}

fn merge(args: StudyArgs) -> anyhow::Result<()> {
    if args.dirs.is_empty() {
        bail!("`study merge` needs the shard folders: ullstack study merge DIR... [--out DIR]");
    }
    if args.quick || args.jobs.is_some() || args.shard.is_some() || args.seed.is_some() {
        bail!("`study merge` takes only folders, --out and --quiet (size, seed and shards come from the folders' study.json)");
    }
    let out = args.out.clone().unwrap_or_else(|| args.dirs[0].clone());
    let started = std::time::Instant::now();
    let (_, outcome) = driver::merge(&args.dirs, &out).map_err(|e| anyhow!(e))?;
    report(&outcome, &out, args.quiet, started.elapsed());
    Ok(())
}

fn report(outcome: &StudyOutcome, out: &std::path::Path, quiet: bool, wall: std::time::Duration) {
    if !quiet {
        if let Some(table) = &outcome.headline {
            print!("{}", table.to_text());
        }
    }
    let what = if outcome.headline.is_some() {
        "report.html, study.json, plots"
    } else {
        "study.json, runs/"
    };
    println!(
        "{} runs ({} simulated, {} reused) in {:.1} s; results: {} ({what})",
        outcome.runs,
        outcome.exec.ran,
        outcome.exec.reused,
        wall.as_secs_f64(),
        out.display()
    );
}
