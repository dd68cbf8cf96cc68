//! `ullstack study` argument wiring: list, run (whole or a shard), merge shards. The work is in
//! crate `study`.

use std::path::PathBuf;

use anyhow::{anyhow, bail};
use clap::Args;
use study::driver::{self, StudyOptions};
use study::provenance::{shell_words, Build};
use study::slurm::{self, SlurmPlan};
use study::Size;
use study::{k8s, shard_env, StudyDef};

/// Run a study (a named set of simulations with plots and a report), list them, or merge shards
///
///   ullstack study list                          the studies, with their run counts
///   ullstack study ull --quick                   the short version (seconds)
///   ullstack study ull --jobs 8 --out results/ull
///   ullstack study ull --shard 0/2 --out a       half the runs (runs 0, 2, 4, …); on another
///   ullstack study ull --shard 1/2 --out b       machine the other half, then
///   ullstack study merge a b --out results/ull   one study folder and report
///   ullstack study ull --slurm 8 --out /shared/ull   a Slurm job array of 8 shards plus a merge
///                                                job that runs when all succeed (--dry-run:
///                                                only write the sbatch scripts)
///   ullstack study ull --shard auto              inside an array job: the shard from
///                                                SLURM_ARRAY_TASK_ID / _COUNT (or auto/N with
///                                                Kubernetes' JOB_COMPLETION_INDEX)
///   ullstack study ull --k8s 8 --dry-run         Kubernetes Indexed Job manifests
///
/// Writes into --out (default results/study/NAME): runs/<id>/ (config.toml, job.fio,
/// summary.json — `ullstack sim --config runs/<id>/config.toml` re-runs one alone), study.json,
/// a CSV, SVG and PNG per plot, and report.html. Re-running resumes: runs already there with an
/// unchanged config are not redone, so an interrupted study loses only the runs in flight.
#[derive(Args, Debug)]
#[command(verbatim_doc_comment, after_long_help = study::listing::help_text())]
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
    /// `auto` (or `auto/N`) reads I (and N) from an array job's environment.
    #[arg(long, value_name = "I/N|auto|auto/N")]
    shard: Option<String>,
    /// Submit the study to Slurm as an array of N shard tasks into --out (a folder every node
    /// sees) plus a merge job that runs when every task succeeded. Rerunning resubmits only
    /// the shards not complete.
    #[arg(long, value_name = "N", conflicts_with_all = ["shard", "k8s"])]
    slurm: Option<usize>,
    /// With --slurm: the partition (sbatch --partition).
    #[arg(long, value_name = "P")]
    partition: Option<String>,
    /// With --slurm: each job's time limit, as sbatch --time takes it: MINUTES, MINUTES:SECONDS,
    /// HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS.
    #[arg(long, value_name = "T")]
    time: Option<String>,
    /// With --slurm: CPUs per task (default 1); each task simulates that many runs at once.
    #[arg(long, value_name = "C")]
    cpus_per_task: Option<usize>,
    /// Write Kubernetes Indexed Job manifests for N shard pods and a merge Job into --out/k8s
    /// (needs --dry-run: ullstack writes the manifests, kubectl applies them).
    #[arg(long, value_name = "N", conflicts_with = "shard")]
    k8s: Option<usize>,
    /// With --k8s: the container image holding `ullstack` on PATH (default ullstack:latest).
    #[arg(long, value_name = "IMAGE")]
    image: Option<String>,
    /// With --slurm or --k8s: write the scripts or manifests, submit nothing.
    #[arg(long)]
    dry_run: bool,
    /// No progress bar and no table: one line saying where the results are.
    #[arg(long)]
    quiet: bool,
    /// `reflex` only: skip the real-server half (serve + bench on this machine).
    #[arg(long)]
    sim_only: bool,
    /// Resume a folder (or merge shards) that another build of ullstack wrote: refused
    /// without it, naming both builds. The results then mix builds; study.json and
    /// provenance.json say which.
    #[arg(long)]
    force: bool,
    /// Runs of each comparison, seeds SEED, SEED+1, … (default 5 for a full study, 1 with
    /// --quick). Every headline ratio's 95 % interval is bootstrapped over them.
    #[arg(long, value_name = "N")]
    replicates: Option<u64>,
    /// The published figures the report compares with (TOML, the shipped
    /// reference/published.toml's format), instead of the shipped file: e.g. your own
    /// hardware's measurements.
    #[arg(long, value_name = "FILE")]
    reference: Option<PathBuf>,
    /// After the run, print the study's "Current results" section (Markdown: provenance, the
    /// published figures beside ours, the headline table), as written to OUT/results.md, for
    /// pasting whole into docs/study.md.
    #[arg(long)]
    markdown: bool,
}

/// The plan the flags ask for (size, seed, replicates).
fn plan_of(args: &StudyArgs) -> anyhow::Result<study::Plan> {
    let size = if args.quick { Size::Quick } else { Size::Full };
    let plan = study::Plan::new(size, args.seed.unwrap_or(1));
    match args.replicates {
        Some(n) => plan.with_replicates(n).map_err(|e| anyhow!(e)),
        None => Ok(plan),
    }
}

/// This binary's build, as `build.rs` baked it in.
fn this_build() -> Build {
    let diff = env!("ULLSTACK_GIT_DIFF_HASH");
    Build {
        crate_version: env!("CARGO_PKG_VERSION").into(),
        git_commit: env!("ULLSTACK_GIT_COMMIT").into(),
        git_dirty: env!("ULLSTACK_GIT_DIRTY") == "true",
        git_diff_hash: (!diff.is_empty()).then(|| diff.to_string()),
        profile: env!("ULLSTACK_BUILD_PROFILE").into(),
        rustc: env!("ULLSTACK_RUSTC_VERSION").into(),
    }
}

/// Refuses `--sim-only` for study `name`: only `reflex` has a real-server half to skip.
fn refuse_sim_only(args: &StudyArgs, name: &str) -> anyhow::Result<()> {
    if args.sim_only {
        bail!(
            "--sim-only: study `{name}` has no real-server half to skip (only `reflex` runs one); \
             every run of `{name}` is simulated already, drop the flag"
        );
    }
    Ok(())
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
            print!("{}", study::listing::list_text());
            Ok(())
        }
        "merge" => merge(args),
        "reflex" => run_reflex(args),
        _ => run_study(args),
    }
}

/// `ullstack study reflex`: its own runner (remote scenarios, not device runs).
fn run_reflex(args: StudyArgs) -> anyhow::Result<()> {
    if !args.dirs.is_empty() || args.shard.is_some() {
        bail!("`study reflex` takes no folders and no --shard");
    }
    if let Some(flag) = cluster_flags(&args).first() {
        bail!(
            "`study reflex` has no cluster mode ({flag}): its real-server half runs `ullstack serve` \
             and `bench` on this machine and measures them here, so it cannot be split into array \
             tasks; run it here (--sim-only skips the real-server half)"
        );
    }
    if let Some(n) = args.replicates {
        bail!(
            "--replicates {n}: `study reflex` runs each scenario once (its real half measures \
             wall-clock behaviour); replicates apply to ull, fastdrain and flashshare"
        );
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
        progress: !args.quiet,
        build: this_build(),
        reference: args.reference.clone(),
    };
    if args.force {
        bail!("--force: `study reflex` does not resume (it runs everything again), so there is no other build's folder to accept");
    }
    let command = command_line();
    study::interrupt::on_sigint(move || {
        format!(
            "interrupted: `study reflex` does not resume (its real-server runs are measured \
             together), so nothing of this run is kept\nrun it again with: {command}"
        )
    })
    .map_err(|e| anyhow!(e))?;
    let started = std::time::Instant::now();
    let runner = harness::InProcess;
    let real: Option<&dyn study::reflex::RealRunner> =
        if args.sim_only { None } else { Some(&runner) };
    let o = study::reflex::run(&opts, real).map_err(|e| anyhow!(e))?;
    o.print_report(&out, args.quiet, started.elapsed());
    if args.markdown {
        print!("{}", driver::read_results_md(&out).map_err(|e| anyhow!(e))?);
    }
    Ok(())
}

/// The cluster flags given (`--slurm N`, `--k8s N`, `--dry-run` and their options), as typed.
fn cluster_flags(args: &StudyArgs) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(n) = args.slurm {
        v.push(format!("--slurm {n}"));
    }
    if let Some(n) = args.k8s {
        v.push(format!("--k8s {n}"));
    }
    if args.dry_run {
        v.push("--dry-run".into());
    }
    v.extend(slurm_only_flags(args));
    if let Some(i) = &args.image {
        v.push(format!("--image {i}"));
    }
    v
}

/// The Slurm-only options given (`--partition`, `--time`, `--cpus-per-task`).
fn slurm_only_flags(args: &StudyArgs) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(p) = &args.partition {
        v.push(format!("--partition {p}"));
    }
    if let Some(t) = &args.time {
        v.push(format!("--time {t}"));
    }
    if let Some(c) = args.cpus_per_task {
        v.push(format!("--cpus-per-task {c}"));
    }
    v
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
    refuse_sim_only(&args, def.name)?;
    if args.dry_run && args.slurm.is_none() && args.k8s.is_none() {
        bail!(
            "--dry-run goes with --slurm N or --k8s N (it writes their scripts without submitting)"
        );
    }
    if args.slurm.is_some() || args.k8s.is_some() {
        if args.force {
            bail!("--force goes with a study run here or `study merge`: the cluster's shard tasks each start a folder of their own");
        }
        return cluster(&def, &args);
    }
    if let Some(flag) = slurm_only_flags(&args).first() {
        bail!("{flag} goes with --slurm N (it sets the Slurm jobs' #SBATCH options)");
    }
    if let Some(i) = &args.image {
        bail!("--image {i} goes with --k8s N (the pods' container image)");
    }
    let shard = match args.shard.as_deref() {
        None => None,
        Some(s) if shard_env::is_auto(s) => {
            let auto = shard_env::resolve(s, &|k| std::env::var(k).ok()).map_err(|e| anyhow!(e))?;
            eprintln!(
                "shard {}/{} from the environment ({})",
                auto.shard.index, auto.shard.count, auto.source
            );
            Some(auto.shard)
        }
        Some(s) => Some(driver::parse_shard(s).map_err(|e| anyhow!(e))?),
    };
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
        replicates: args.replicates,
        reference: args.reference.clone(),
        build: this_build(),
        force: args.force,
    };
    let scope = driver::scope_of(&(def.runs)(&opts.plan().map_err(|e| anyhow!(e))?), shard);
    let (interrupted_out, command) = (out.clone(), command_line());
    study::interrupt::on_sigint(move || {
        let kept = study::interrupt::kept(&interrupted_out, &scope);
        study::interrupt::message(kept, &interrupted_out, &command)
    })
    .map_err(|e| anyhow!(e))?;
    if opts.size == Size::Quick && !args.quiet {
        println!("{}", study::report::SMOKE_TEST);
    }
    let started = std::time::Instant::now();
    let outcome = driver::run(&def, &opts).map_err(|e| anyhow!(e))?;
    outcome.print_report(&out, args.quiet, started.elapsed());
    if args.markdown && outcome.headline.is_some() {
        print!("{}", driver::read_results_md(&out).map_err(|e| anyhow!(e))?);
    }
    if let Some(s) = shard {
        println!(
            "shard {}/{} done; join the shards with `ullstack study merge DIR...`",
            s.index, s.count
        );
    }
    Ok(())
}

/// `--slurm N` (submit, or write with --dry-run) and `--k8s N --dry-run` (write manifests).
fn cluster(def: &StudyDef, args: &StudyArgs) -> anyhow::Result<()> {
    let plan = plan_of(args)?;
    let (size, seed) = (plan.size, plan.seed);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results/study").join(def.name));
    if args.jobs.is_some() {
        bail!("--jobs sets one process's parallelism; with --slurm use --cpus-per-task, with --k8s each pod runs one run at a time");
    }
    if let Some(n) = args.k8s {
        if let Some(flag) = slurm_only_flags(args).first() {
            bail!("{flag} is a Slurm option and does nothing with --k8s {n}: a pod's resources and deadline go in the manifest (spec.template.spec.containers[].resources, activeDeadlineSeconds)");
        }
        if !args.dry_run {
            bail!("--k8s {n}: ullstack writes the manifests but does not talk to a cluster; add --dry-run and apply them with kubectl");
        }
        let dir = out.join("k8s");
        let image = args.image.as_deref().unwrap_or(k8s::DEFAULT_IMAGE);
        k8s::write(def, &plan, n, image, &dir).map_err(|e| anyhow!(e))?;
        println!("{}", k8s::instructions(&dir, n, def.name));
        return Ok(());
    }
    let tasks = args
        .slurm
        .expect("cluster() is called with --slurm or --k8s");
    if let Some(i) = &args.image {
        bail!("--image {i} goes with --k8s N; Slurm tasks run this ullstack binary");
    }
    if let Some(t) = &args.time {
        slurm::parse_time_limit(t).map_err(|e| anyhow!(e))?;
    }
    std::fs::create_dir_all(&out).map_err(|e| anyhow!("creating {}: {e}", out.display()))?;
    let out = std::fs::canonicalize(&out).map_err(|e| anyhow!("{}: {e}", out.display()))?;
    let exe = std::env::current_exe().map_err(|e| anyhow!("finding this ullstack binary: {e}"))?;
    let plan = SlurmPlan {
        size,
        seed,
        replicates: plan.replicates,
        tasks,
        out: out.clone(),
        exe,
        partition: args.partition.clone(),
        time: args.time.clone(),
        cpus_per_task: args.cpus_per_task.unwrap_or(1),
    };
    let sub = slurm::submit(def, &plan, args.dry_run).map_err(|e| anyhow!(e))?;
    print!("{}", sub.describe(tasks, args.dry_run, &out));
    Ok(())
}

fn merge(args: StudyArgs) -> anyhow::Result<()> {
    if args.dirs.is_empty() {
        bail!("`study merge` needs the shard folders: ullstack study merge DIR... [--out DIR]");
    }
    if args.quick
        || args.jobs.is_some()
        || args.shard.is_some()
        || args.seed.is_some()
        || args.slurm.is_some()
        || args.k8s.is_some()
        || args.sim_only
    {
        bail!("`study merge` takes only folders, --out, --force, --reference, --markdown and --quiet (size, seed and shards come from the folders' study.json)");
    }
    let out = args.out.clone().unwrap_or_else(|| args.dirs[0].clone());
    let started = std::time::Instant::now();
    let (_, outcome) = driver::merge(
        &args.dirs,
        &out,
        &this_build(),
        args.force,
        args.reference.as_deref(),
    )
    .map_err(|e| anyhow!(e))?;
    outcome.print_report(&out, args.quiet, started.elapsed());
    if args.markdown && outcome.headline.is_some() {
        print!("{}", driver::read_results_md(&out).map_err(|e| anyhow!(e))?);
    }
    Ok(())
}

/// This process's command line, quoted for a shell: what resumes it.
fn command_line() -> String {
    let words: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    shell_words(&words)
}
