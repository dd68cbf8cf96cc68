//! Running a study end to end, and merging shards (the steps are in the crate essay).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::exec::{self, is_done, run_dir, ExecOptions, ExecReport};
use crate::plan::{Plan, Size};
use crate::provenance::{self, Build, Invocation, Provenance, Record};
use crate::published::{self, Reference};
use crate::report::{self, ReportInput};
use crate::results::{self, ShardInfo, StudyJson};
use crate::spec::RunSpec;
use crate::studies::{find, StudyDef};
use crate::table::Table;

pub use crate::report::RESULTS_MD;

/// How to run a study.
#[derive(Clone, Debug)]
pub struct StudyOptions {
    pub size: Size,
    pub seed: u64,
    pub out: PathBuf,
    pub jobs: usize,
    pub shard: Option<ShardInfo>,
    pub progress: bool,
    /// Runs per comparison (`--replicates N`); `None`: the size's default ([`Plan::new`]).
    pub replicates: Option<u64>,
    /// The published figures to compare with (`--reference FILE`); `None`: the shipped ones.
    pub reference: Option<PathBuf>,
    /// The build running it, recorded in `study.json` and `provenance.json` ([`provenance`]).
    pub build: Build,
    /// Resume a folder another build wrote into (`--force`).
    pub force: bool,
}

/// The reference a study compares with: `path`, or the shipped file.
fn reference_of(path: Option<&Path>) -> Result<Reference, String> {
    match path {
        Some(p) => Reference::load(p),
        None => Ok(Reference::shipped()),
    }
}

impl StudyOptions {
    /// The plan these options ask for.
    pub fn plan(&self) -> Result<Plan, String> {
        let plan = Plan::new(self.size, self.seed);
        match self.replicates {
            Some(n) => plan.with_replicates(n),
            None => Ok(plan),
        }
    }
}

/// What a study or merge holds `OUT`'s lock as (shown to a second invocation): the command
/// line of this process.
fn holder_name() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// What running (or merging) a study did.
#[derive(Debug)]
pub struct StudyOutcome {
    pub exec: ExecReport,
    /// Runs in this invocation's scope (all, or the shard's).
    pub runs: usize,
    /// The headline table; `None` for a shard (no figures or report until merged).
    pub headline: Option<Table>,
    /// The published figures beside ours (the report's first table); `None` for a shard.
    pub published: Option<Table>,
    /// Whose lock on the folder this invocation took over (a process that died holding it).
    pub took_over: Option<String>,
    /// `--force` let another build's runs in: which builds the results now mix.
    pub mixed_builds: Option<String>,
}

impl StudyOutcome {
    /// What `ullstack study` prints when a run or merge into `out` ended after `wall`: notes
    /// on stderr (mixed builds, a lock taken over), the published and headline tables on
    /// stdout unless `quiet`, then one line of counts and where the results are.
    pub fn print_report(&self, out: &Path, quiet: bool, wall: std::time::Duration) {
        if let Some(note) = &self.mixed_builds {
            eprintln!("note: {note}");
        }
        if let Some(who) = &self.took_over {
            eprintln!(
                "note: {} was locked by {who}, which stopped without releasing it; its runs in flight were redone",
                out.display()
            );
        }
        if !quiet {
            if let Some(table) = &self.published {
                println!(
                    "the published figures beside ours (95 % intervals over pairs and seeds):"
                );
                print!("{}", table.to_text());
                println!();
            }
            if let Some(table) = &self.headline {
                print!("{}", table.to_text());
            }
        }
        let what = if self.headline.is_some() {
            "report.html, study.json, plots"
        } else {
            "study.json, runs/"
        };
        println!(
            "{} runs ({} simulated, {} reused) in {:.1} s; results: {} ({what})",
            self.runs,
            self.exec.ran,
            self.exec.reused,
            wall.as_secs_f64(),
            out.display()
        );
    }
}

/// The "Current results" Markdown a finished study wrote into `out` ([`RESULTS_MD`]).
pub fn read_results_md(out: &Path) -> Result<String, String> {
    let path = out.join(RESULTS_MD);
    std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// The runs of `specs` that shard `shard` holds (all of them unsharded): runs I, I+N, I+2N, …
pub fn scope_of(specs: &[RunSpec], shard: Option<ShardInfo>) -> Vec<RunSpec> {
    match shard {
        None => specs.to_vec(),
        Some(s) => specs
            .iter()
            .enumerate()
            .filter(|(i, _)| i % s.count == s.index)
            .map(|(_, r)| r.clone())
            .collect(),
    }
}

/// Parses `I/N` (0 ≤ I < N).
pub fn parse_shard(s: &str) -> Result<ShardInfo, String> {
    let bad = || format!("--shard `{s}`: expected I/N with 0 <= I < N, e.g. 0/2 and 1/2");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let index: usize = i.trim().parse().map_err(|_| bad())?;
    let count: usize = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(ShardInfo { index, count })
}

/// The head of a `study.json`, as `merge` reads it.
#[derive(Debug, Deserialize)]
struct StudyHead {
    study: String,
    version: u32,
    size: String,
    seed: u64,
    /// Absent in folders written before replicates were recorded: one.
    #[serde(default = "one")]
    replicates: u64,
    runs_total: usize,
    shard: Option<ShardInfo>,
}

fn one() -> u64 {
    1
}

fn read_head(dir: &Path) -> Result<Option<StudyHead>, String> {
    let path = dir.join("study.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| format!("{}: not a study.json: {e}", path.display()))
}

/// Runs study `def` (or its shard) into `opts.out`, holding its lock (`lock`: a second run or
/// merge into the same folder is refused while this one runs).
pub fn run(def: &StudyDef, opts: &StudyOptions) -> Result<StudyOutcome, String> {
    // Bad options are refused before anything is written.
    let plan = opts.plan()?;
    let reference = reference_of(opts.reference.as_deref())?;
    let lock = crate::lock::acquire(&opts.out, &holder_name())?;
    if let Some(head) = read_head(&opts.out)? {
        if head.study != def.name {
            return Err(format!(
                "{} holds study `{}`, not `{}`: choose another --out",
                opts.out.display(),
                head.study,
                def.name
            ));
        }
    }
    if let Some(head) = read_head(&opts.out)? {
        let had = head.replicates;
        if had != plan.replicates && head.size == plan.size.as_str() {
            return Err(format!(
                "{} holds {had} replicate(s) per comparison, this run asks for {}: choose \
                 another --out or the same --replicates",
                opts.out.display(),
                plan.replicates
            ));
        }
    }
    let mixed_builds = provenance::check_folder(&opts.out, &opts.build, opts.force)?;
    let specs = (def.runs)(&plan);
    let scope = scope_of(&specs, opts.shard);
    // Recorded before any run, so an interrupted invocation still names its build.
    let mut prov = Provenance::read(&opts.out)?.unwrap_or_else(|| Provenance {
        study: def.name.to_string(),
        invocations: Vec::new(),
    });
    let what = match opts.shard {
        None => "run".to_string(),
        Some(s) => format!("shard {}/{}", s.index, s.count),
    };
    prov.add(Invocation::start(&opts.build, &what, opts.force));
    prov.write(&opts.out)?;
    let exec = exec::execute(
        &opts.out,
        &scope,
        ExecOptions {
            jobs: opts.jobs,
            progress: opts.progress,
        },
    )?;
    prov.current_mut().counts(exec.ran, exec.reused);
    let headline = finish(
        def, &plan, &reference, &opts.out, &specs, &scope, opts.shard, opts.jobs, &mut prov,
    )?;
    Ok(StudyOutcome {
        exec,
        runs: scope.len(),
        published: headline.as_ref().map(|(_, p)| p.clone()),
        headline: headline.map(|(h, _)| h),
        took_over: lock.took_over().map(str::to_string),
        mixed_builds,
    })
}

/// Writes `study.json` for `scope`, and for a whole study the figures and report; then ends
/// the invocation's record (`prov`'s last) and writes `provenance.json`. Reading the runs back
/// and drawing the figures use up to `jobs` threads ([`crate::pool`]: the same files either way).
// The study, its plan, its runs and where they go: one call from `run`, one from `merge`.
#[allow(clippy::too_many_arguments)]
fn finish(
    def: &StudyDef,
    plan: &Plan,
    reference: &Reference,
    out: &Path,
    specs: &[RunSpec],
    scope: &[RunSpec],
    shard: Option<ShardInfo>,
    jobs: usize,
    prov: &mut Provenance,
) -> Result<Option<(Table, Table)>, String> {
    let record = Record::new(
        &prov.current_mut().build.clone(),
        specs.iter().map(|s| s.seed),
        prov,
    );
    let (size, seed) = (plan.size, plan.seed);
    let results = results::load_on(out, scope, jobs)?;
    let rows = match shard {
        Some(_) => Vec::new(),
        None => published::rows(reference, def.name, &(def.outcomes)(&results)),
    };
    let json = StudyJson {
        study: def.name,
        version: def.version,
        size: size.as_str(),
        seed,
        replicates: plan.replicates,
        runs_total: specs.len(),
        shard,
        provenance: &record,
        published: rows.clone(),
        findings: match shard {
            Some(_) => None,
            None => (def.findings)(&results),
        },
        runs: scope.iter().map(|s| &results[&s.id]).collect(),
    };
    let text = serde_json::to_string_pretty(&json).expect("study.json serialises") + "\n";
    write_atomic(&out.join("study.json"), text.as_bytes())?;
    if shard.is_some() {
        prov.current_mut().end();
        prov.write(out)?;
        return Ok(None);
    }
    let figures = (def.figures)(&results, size, seed);
    let pngs = crate::pool::try_map(&figures, jobs, |fig| fig.write(out))?;
    let rendered: Vec<_> = figures.iter().zip(pngs).collect();
    let headline = (def.headline)(&results);
    let tables = (def.tables)(&results);
    let published_table = published::table(&rows);
    prov.current_mut().end();
    let provenance_html = provenance::html(&record, prov);
    let html = report::html(&ReportInput {
        published: (!rows.is_empty()).then_some(&published_table),
        quick: size == Size::Quick,
        title: format!(
            "ullstack study {} ({}, seed {seed})",
            def.name,
            size.as_str()
        ),
        about: format!(
            "{}. {} runs, each re-runnable alone from runs/<id>/config.toml.",
            def.about,
            specs.len()
        ),
        headline: &headline,
        tables: &tables,
        figures: rendered,
        specs,
        results: &results,
        provenance: &provenance_html,
    });
    write_atomic(&out.join("report.html"), html.as_bytes())?;
    let inv = prov.current_mut();
    let md = report::markdown(&report::MarkdownInput {
        study: def.name,
        size,
        seeds: (plan.seed, plan.seed_of(plan.replicates - 1)),
        replicates: plan.replicates,
        build: inv.build.describe(),
        command: inv.command_line(),
        started_utc: inv.started_utc.clone(),
        published: &published_table,
        headline: &headline,
    });
    write_atomic(&out.join(RESULTS_MD), md.as_bytes())?;
    prov.write(out)?;
    Ok(Some((headline, published_table)))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("renaming to {}: {e}", path.display()))
}

/// Joins shard folders `dirs` into `out`: checks they are shards of one study, version, size
/// and seed, made by `build` (unless `force`: [`provenance::check_shards`]), and together hold
/// every run; copies the runs; writes `study.json`, figures and report, and `provenance.json`
/// with the shards' invocations and this one. Returns the study's name with the outcome.
pub fn merge(
    dirs: &[PathBuf],
    out: &Path,
    build: &Build,
    force: bool,
    reference: Option<&Path>,
) -> Result<(String, StudyOutcome), String> {
    let reference = reference_of(reference)?;
    let mut heads = Vec::new();
    for d in dirs {
        let head = read_head(d)?
            .ok_or_else(|| format!("{}: no study.json (not a study folder)", d.display()))?;
        heads.push(head);
    }
    let first = heads
        .first()
        .ok_or("merge needs at least one study folder")?;
    for (d, h) in dirs.iter().zip(&heads) {
        if (
            &h.study,
            h.version,
            &h.size,
            h.seed,
            h.replicates,
            h.runs_total,
        ) != (
            &first.study,
            first.version,
            &first.size,
            first.seed,
            first.replicates,
            first.runs_total,
        ) {
            return Err(format!(
                "{} holds study `{}` version {} ({}, seed {}, {} runs) but {} holds `{}` version {} ({}, seed {}, {} runs): not shards of one study",
                d.display(), h.study, h.version, h.size, h.seed, h.runs_total,
                dirs[0].display(), first.study, first.version, first.size, first.seed, first.runs_total
            ));
        }
    }
    let def = find(&first.study)?;
    if def.version != first.version {
        return Err(format!(
            "the shards are study `{}` version {}, this ullstack has version {}: re-run them",
            def.name, first.version, def.version
        ));
    }
    let size = Size::parse(&first.size)
        .ok_or_else(|| format!("study.json size `{}`: expected quick or full", first.size))?;
    let plan = Plan::new(size, first.seed).with_replicates(first.replicates)?;
    let specs = (def.runs)(&plan);
    if specs.len() != first.runs_total {
        return Err(format!(
            "the shards say {} runs, study `{}` has {}",
            first.runs_total,
            def.name,
            specs.len()
        ));
    }
    let mut missing = Vec::new();
    let mut sources = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        match dirs.iter().find(|d| is_done(d, spec)) {
            Some(d) => sources.push((spec, d)),
            None => missing.push((i, spec.id.as_str())),
        }
    }
    if !missing.is_empty() {
        let count = heads.iter().find_map(|h| h.shard.map(|s| s.count));
        let shards_present: Vec<usize> = heads
            .iter()
            .filter_map(|h| h.shard.map(|s| s.index))
            .collect();
        let shard_note = match count {
            Some(n) => {
                let absent: Vec<String> = (0..n)
                    .filter(|i| !shards_present.contains(i))
                    .map(|i| format!("{i}/{n}"))
                    .collect();
                if absent.is_empty() {
                    String::new()
                } else {
                    format!(" (shards not given: {})", absent.join(", "))
                }
            }
            None => String::new(),
        };
        let names: Vec<&str> = missing.iter().take(10).map(|m| m.1).collect();
        return Err(format!(
            "{} of {} runs are missing or incomplete{shard_note}: {}{}",
            missing.len(),
            specs.len(),
            names.join(", "),
            if missing.len() > 10 { ", …" } else { "" }
        ));
    }
    let shard_dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let mut provs = Vec::new();
    for d in &shard_dirs {
        provs.push(Provenance::read(d)?);
    }
    let joined = provenance::check_shards(&shard_dirs, &provs, build, force)?;
    let lock = crate::lock::acquire(out, &holder_name())?;
    // An `out` that is not one of the shards may hold runs of its own, which the merge reuses.
    let mut mixed_builds = None;
    if !shard_dirs.contains(&out) {
        mixed_builds = provenance::check_folder(out, build, force)?;
    }
    let mut prov = Provenance {
        study: def.name.to_string(),
        invocations: joined,
    };
    if let Some(own) = Provenance::read(out)? {
        for inv in own.invocations {
            prov.add(inv);
        }
    }
    let what = format!("merge of {} folders", dirs.len());
    prov.add(Invocation::start(build, &what, force));
    prov.current_mut().counts(0, specs.len());
    std::fs::create_dir_all(out.join("runs"))
        .map_err(|e| format!("creating {}: {e}", out.join("runs").display()))?;
    for (spec, src) in &sources {
        if src.as_path() == out || is_done(out, spec) {
            continue;
        }
        copy_run(&run_dir(src, &spec.id), &run_dir(out, &spec.id))?;
    }
    let headline = finish(
        &def,
        &plan,
        &reference,
        out,
        &specs,
        &specs,
        None,
        crate::pool::default_jobs(),
        &mut prov,
    )?;
    let outcome = StudyOutcome {
        exec: ExecReport {
            ran: 0,
            reused: specs.len(),
        },
        runs: specs.len(),
        published: headline.as_ref().map(|(_, p)| p.clone()),
        headline: headline.map(|(h, _)| h),
        took_over: lock.took_over().map(str::to_string),
        mixed_builds,
    };
    Ok((def.name.to_string(), outcome))
}

/// Copies a run folder (flat: files only) into place through a temporary name.
fn copy_run(from: &Path, to: &Path) -> Result<(), String> {
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let tmp = to.with_file_name(format!(".tmp-{name}"));
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| io("removing", &tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| io("creating", &tmp, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| io("reading", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io("reading", from, e))?;
        std::fs::copy(entry.path(), tmp.join(entry.file_name()))
            .map_err(|e| io("copying", &entry.path(), e))?;
    }
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| io("removing stale", to, e))?;
    }
    std::fs::rename(&tmp, to).map_err(|e| io("renaming into place", to, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_syntax_is_checked_and_named() {
        assert_eq!(parse_shard("1/3"), Ok(ShardInfo { index: 1, count: 3 }));
        for bad in ["3/3", "1/0", "1", "a/2", "-1/2"] {
            let e = parse_shard(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("I/N"), "{e}");
        }
    }

    #[test]
    fn merge_refuses_folders_of_different_studies() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for (d, seed) in [(&a, 1), (&b, 2)] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(
                d.join("study.json"),
                format!(r#"{{"study":"ull","version":1,"size":"quick","seed":{seed},"runs_total":92,"runs":[]}}"#),
            )
            .unwrap();
        }
        let build = crate::provenance::tests::build("a");
        let e = merge(&[a, b], &dir.path().join("m"), &build, false, None).unwrap_err();
        assert!(
            e.contains("seed 2") && e.contains("not shards of one study"),
            "{e}"
        );
        let e = merge(
            &[dir.path().join("none")],
            &dir.path().join("m"),
            &build,
            false,
            None,
        )
        .unwrap_err();
        assert!(e.contains("no study.json"), "{e}");
        // A bad reference is refused before any folder is read.
        let e = merge(
            &[dir.path().join("none")],
            &dir.path().join("m"),
            &build,
            false,
            Some(&dir.path().join("missing.toml")),
        )
        .unwrap_err();
        assert!(
            e.contains("--reference") && e.contains("missing.toml"),
            "{e}"
        );
    }
}
