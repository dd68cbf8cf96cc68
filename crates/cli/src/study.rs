//! `ullstack study` argument wiring: list, run (whole or a shard), merge shards. Which flags go
//! together is decided in `study::options`; the work is in crate `study`.

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use study::driver;
use study::options::{Command, Flags, SlurmRequest};
use study::provenance::{shell_words, Build};
use study::{k8s, slurm, Size, StudyDef};

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
// The closing part of `--help` (every study's run counts) is added in `main` only when help
// may be printed: counting the catalogue's runs costs ~21 M instructions on every start.
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
    /// --quick). Every headline ratio's 95 % interval is bootstrapped over them. For reflex:
    /// the simulated runs behind its published rows (its real-server half runs once).
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

impl StudyArgs {
    /// The flags as `study::options` checks them.
    fn flags(&self) -> Flags {
        Flags {
            target: self.target.clone(),
            dirs: self.dirs.clone(),
            quick: self.quick,
            out: self.out.clone(),
            jobs: self.jobs,
            seed: self.seed,
            shard: self.shard.clone(),
            slurm: self.slurm,
            partition: self.partition.clone(),
            time: self.time.clone(),
            cpus_per_task: self.cpus_per_task,
            k8s: self.k8s,
            image: self.image.clone(),
            dry_run: self.dry_run,
            quiet: self.quiet,
            sim_only: self.sim_only,
            force: self.force,
            replicates: self.replicates,
            reference: self.reference.clone(),
        }
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

pub fn run(args: StudyArgs) -> anyhow::Result<()> {
    let env = |k: &str| std::env::var(k).ok();
    let command = args
        .flags()
        .command(this_build(), &env, &mut |note| eprintln!("{note}"))?;
    match command {
        Command::List => {
            print!("{}", study::listing::list_text());
            Ok(())
        }
        Command::Merge {
            dirs,
            out,
            force,
            reference,
        } => {
            let started = std::time::Instant::now();
            let (_, outcome) =
                driver::merge(&dirs, &out, &this_build(), force, reference.as_deref())
                    .map_err(|e| anyhow!(e))?;
            outcome.print_report(&out, args.quiet, started.elapsed());
            print_results_md(&args, outcome.headline.is_some(), &out)
        }
        Command::Reflex { options, sim_only } => run_reflex(&args, &options, sim_only),
        Command::Run { def, options } => run_study(&args, &def, &options),
        Command::K8s {
            def,
            plan,
            pods,
            image,
            dir,
        } => {
            k8s::write(&def, &plan, pods, &image, &dir).map_err(|e| anyhow!(e))?;
            println!("{}", k8s::instructions(&dir, pods, def.name));
            Ok(())
        }
        Command::Slurm { def, request } => submit_slurm(&def, &request),
    }
}

/// With --markdown and a headline: the study's "Current results" section, as written to
/// OUT/results.md.
fn print_results_md(args: &StudyArgs, headline: bool, out: &std::path::Path) -> anyhow::Result<()> {
    if args.markdown && headline {
        print!("{}", driver::read_results_md(out).map_err(|e| anyhow!(e))?);
    }
    Ok(())
}

/// `ullstack study reflex`: its own runner (remote scenarios, not device runs).
fn run_reflex(
    args: &StudyArgs,
    opts: &study::reflex::ReflexOptions,
    sim_only: bool,
) -> anyhow::Result<()> {
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
    let real: Option<&dyn study::reflex::RealRunner> = if sim_only { None } else { Some(&runner) };
    let o = study::reflex::run(opts, real).map_err(|e| anyhow!(e))?;
    o.print_report(&opts.out, args.quiet, started.elapsed());
    print_results_md(args, true, &opts.out)
}

/// A study (or one shard of it) run here.
fn run_study(args: &StudyArgs, def: &StudyDef, opts: &driver::StudyOptions) -> anyhow::Result<()> {
    let out = &opts.out;
    let shard = opts.shard;
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
    let outcome = driver::run(def, opts).map_err(|e| anyhow!(e))?;
    outcome.print_report(out, args.quiet, started.elapsed());
    print_results_md(args, outcome.headline.is_some(), out)?;
    if let Some(s) = shard {
        println!(
            "shard {}/{} done; join the shards with `ullstack study merge DIR...`",
            s.index, s.count
        );
    }
    Ok(())
}

/// `--slurm N`: submit the array and its merge job (or write their scripts with --dry-run).
fn submit_slurm(def: &StudyDef, request: &SlurmRequest) -> anyhow::Result<()> {
    let out = &request.out;
    std::fs::create_dir_all(out).map_err(|e| anyhow!("creating {}: {e}", out.display()))?;
    let out = std::fs::canonicalize(out).map_err(|e| anyhow!("{}: {e}", out.display()))?;
    let exe = std::env::current_exe().map_err(|e| anyhow!("finding this ullstack binary: {e}"))?;
    let plan = request.plan(out.clone(), exe);
    let sub = slurm::submit(def, &plan, request.dry_run).map_err(|e| anyhow!(e))?;
    print!("{}", sub.describe(request.tasks, request.dry_run, &out));
    Ok(())
}

/// This process's command line, quoted for a shell: what resumes it.
fn command_line() -> String {
    let words: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    shell_words(&words)
}
