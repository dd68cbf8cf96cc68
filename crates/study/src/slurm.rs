//! A study as a Slurm job array plus a merge job (`ullstack study NAME --slurm N`).
//!
//! ## The shape
//! The study's runs are cut into N shards exactly as `--shard I/N` cuts them (runs I, I+N, …).
//! One **array job** of N tasks runs them: task I runs
//! `ullstack study NAME --shard auto/N --out OUT/shards/task-I` (the index comes from
//! `SLURM_ARRAY_TASK_ID`, see `shard_env`), each into its own folder of the shared results
//! folder OUT, so tasks never write the same file. A **merge job** submitted with
//! `--dependency=afterok:ARRAY` runs `ullstack study merge OUT/shards/task-0 … --out OUT` once
//! every task has succeeded and writes the one `study.json`, figures and `report.html`.
//! OUT must be on a filesystem every node sees (a cluster's shared home or scratch).
//!
//! ## Failures and reruns
//! The merge job is submitted with `--kill-on-invalid-dep=yes`: when a task fails its
//! dependency can never be satisfied, and Slurm cancels the merge job instead of leaving it
//! pending forever (state `CANCELLED`, reason `DependencyNeverSatisfied`). Running the same
//! command again resubmits only the shards that are not complete — a shard is complete when its
//! folder has a `study.json` and every one of its runs is done and unchanged (`exec::is_done`) —
//! as an array of just those indices (`--array=2,3`), and each resubmitted task resumes its own
//! folder, so only missing runs are simulated. With every shard complete only the merge job is
//! submitted.
//!
//! ## What is written
//! `OUT/slurm/array.sbatch`, `OUT/slurm/merge.sbatch` (the `#SBATCH` options: job name,
//! output file under `OUT/slurm/logs/`, `--cpus-per-task`, and `--partition` / `--time` when
//! given) and `OUT/slurm/submit.sh`, the two `sbatch` commands this module runs (recording
//! the job ids as it does), so `--dry-run` leaves everything needed to submit by hand. The scripts call this `ullstack`
//! binary by its absolute path, so the nodes must see it at the same path. After submitting,
//! `OUT/slurm/jobs` records the job ids.
//!
//! ## One submission at a time
//! A second submission into the same folder while the first's jobs are still queued or
//! running would start a second task on each incomplete shard folder. So `submit` refuses
//! while `squeue` still lists a job recorded in `OUT/slurm/jobs`, naming them; while another
//! submission is in progress (the lock on `OUT/slurm`, module `lock`); and while a study or
//! merge writes `OUT` (its lock). Each task holds its own shard folder's lock while it runs.
//! If the merge job cannot be submitted after the array was, the error names the array job,
//! which is running without a merge.
//!
//! `--time` is checked against sbatch's forms ([`parse_time_limit`]) before anything is
//! written.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::exec::is_done;
use crate::plan::{Plan, Size};
use crate::studies::StudyDef;

/// A study to run as a Slurm array.
#[derive(Clone, Debug)]
pub struct SlurmPlan {
    pub size: Size,
    pub seed: u64,
    /// Runs per comparison (`--replicates`; the size's default when equal to it).
    pub replicates: u64,
    /// Number of array tasks (= shards).
    pub tasks: usize,
    /// The shared results folder (absolute).
    pub out: PathBuf,
    /// The `ullstack` binary the tasks run (absolute).
    pub exe: PathBuf,
    pub partition: Option<String>,
    /// A Slurm time limit, e.g. `30` (minutes) or `1:00:00`.
    pub time: Option<String>,
    /// CPUs per task; each task simulates that many runs at once (`--jobs`).
    pub cpus_per_task: usize,
}

/// What `submit` did (or, with `dry_run`, would do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The shards the array job runs (those not already complete).
    pub shards: Vec<usize>,
    /// Job ids (`None` on a dry run, or for the array when no shard needed running).
    pub array_job: Option<String>,
    pub merge_job: Option<String>,
    /// The scripts' folder (`OUT/slurm`).
    pub dir: PathBuf,
}

impl Submission {
    /// What `ullstack study --slurm TASKS` says after [`submit`] into `out` (the canonical
    /// results folder): the scripts written on a dry run, else the jobs submitted and how to
    /// watch them, one line each.
    pub fn describe(&self, tasks: usize, dry_run: bool, out: &Path) -> String {
        let shards = if self.shards.is_empty() {
            "none: every shard is complete".to_string()
        } else {
            format!(
                "{} of {tasks} ({})",
                self.shards.len(),
                array_spec(&self.shards)
            )
        };
        if dry_run {
            return format!(
                "wrote {dir}/array.sbatch, merge.sbatch and submit.sh (shards to run: {shards}); submit with: sh {dir}/submit.sh\n",
                dir = self.dir.display()
            );
        }
        let merge = self.merge_job.clone().unwrap_or_default();
        let mut text = match &self.array_job {
            Some(a) => format!(
                "submitted Slurm array job {a} (shards {shards}) and merge job {merge}, which runs when every task of {a} succeeds (and is cancelled if one fails)\n"
            ),
            None => format!("every shard is complete; submitted merge job {merge}\n"),
        };
        let ids = self
            .array_job
            .iter()
            .chain(self.merge_job.iter())
            .cloned()
            .collect::<Vec<_>>()
            .join(",");
        text.push_str(&format!(
            "  watch:   squeue -j {ids}   (then sacct -j {ids}, or scontrol show job {merge})\n  logs:    {logs}\n  results: {out}/report.html when job {merge} completes; rerun this command to redo only incomplete shards\n",
            logs = self.dir.join("logs").display(),
            out = out.display(),
        ));
        text
    }
}

/// Shard I's folder under the shared results folder.
pub fn shard_dir(out: &Path, index: usize) -> PathBuf {
    out.join("shards").join(format!("task-{index}"))
}

/// The shards of `def` not yet complete under `plan.out`.
pub fn incomplete_shards(def: &StudyDef, plan: &SlurmPlan) -> Vec<usize> {
    let specs = (def.runs)(&Plan {
        size: plan.size,
        seed: plan.seed,
        replicates: plan.replicates,
    });
    (0..plan.tasks)
        .filter(|&i| {
            let dir = shard_dir(&plan.out, i);
            let complete = dir.join("study.json").is_file()
                && specs
                    .iter()
                    .skip(i)
                    .step_by(plan.tasks)
                    .all(|s| is_done(&dir, s));
            !complete
        })
        .collect()
}

/// Checks a `--time` limit as sbatch reads it and returns it in seconds (`None`: no limit).
/// The forms: `MINUTES`, `MINUTES:SECONDS`, `HOURS:MINUTES:SECONDS`, `DAYS-HOURS`,
/// `DAYS-HOURS:MINUTES`, `DAYS-HOURS:MINUTES:SECONDS`, or `INFINITE`/`UNLIMITED`. Checked before
/// any script is written, so a typo is named here rather than by sbatch at submit time.
pub fn parse_time_limit(t: &str) -> Result<Option<u64>, String> {
    let bad = |why: &str| {
        format!(
            "--time `{t}`: {why}; expected MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, \
             DAYS-HOURS, DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS (e.g. 30, 1:30:00, 2-12)"
        )
    };
    if t.eq_ignore_ascii_case("infinite") || t.eq_ignore_ascii_case("unlimited") {
        return Ok(None);
    }
    let num = |part: &str| -> Result<u64, String> {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(&format!("`{part}` is not a number")));
        }
        if part.len() > 9 {
            return Err(bad(&format!("`{part}` is too large")));
        }
        Ok(part.parse::<u64>().expect("nine digits parse"))
    };
    let sixty = |v: u64, what: &str| {
        if v < 60 {
            Ok(v)
        } else {
            Err(bad(&format!("{v} {what} (at most 59)")))
        }
    };
    let (days, rest) = match t.split_once('-') {
        Some((d, rest)) => (Some(num(d)?), rest),
        None => (None, t),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let secs = match (days, parts.as_slice()) {
        (None, [m]) => num(m)? * 60,
        (None, [m, s]) => num(m)? * 60 + sixty(num(s)?, "seconds")?,
        (None, [h, m, s]) => {
            num(h)? * 3600 + sixty(num(m)?, "minutes")? * 60 + sixty(num(s)?, "seconds")?
        }
        (Some(d), [h]) => d * 86_400 + num(h)? * 3600,
        (Some(d), [h, m]) => d * 86_400 + num(h)? * 3600 + sixty(num(m)?, "minutes")? * 60,
        (Some(d), [h, m, s]) => {
            d * 86_400
                + num(h)? * 3600
                + sixty(num(m)?, "minutes")? * 60
                + sixty(num(s)?, "seconds")?
        }
        _ => return Err(bad("too many fields")),
    };
    Ok(Some(secs))
}

/// Quotes `s` for a POSIX shell (single quotes; `'` as `'\''`).
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `0-3`, `2,5`, `0-2,7`: Slurm's `--array` syntax for sorted indices.
pub fn array_spec(indices: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        parts.push(if end > start {
            format!("{start}-{end}")
        } else {
            start.to_string()
        });
        i += 1;
    }
    parts.join(",")
}

/// The `ullstack study NAME` arguments every task and the merge share: size, seed and (when
/// not the size's default) replicates.
fn study_args(def: &StudyDef, plan: &SlurmPlan) -> String {
    let quick = if plan.size == Size::Quick {
        " --quick"
    } else {
        ""
    };
    let replicates = if plan.replicates == Plan::new(plan.size, plan.seed).replicates {
        String::new()
    } else {
        format!(" --replicates {}", plan.replicates)
    };
    format!("study {}{quick} --seed {}{replicates}", def.name, plan.seed)
}

fn header(plan: &SlurmPlan, job_name: &str, log: &str, cpus: usize) -> String {
    let mut h = format!(
        "#SBATCH --job-name={job_name}\n#SBATCH --output={}\n#SBATCH --cpus-per-task={cpus}\n",
        path_str(&plan.out.join("slurm").join("logs").join(log))
    );
    if let Some(p) = &plan.partition {
        h += &format!("#SBATCH --partition={p}\n");
    }
    if let Some(t) = &plan.time {
        h += &format!("#SBATCH --time={t}\n");
    }
    h
}

/// The array job's script: task `$SLURM_ARRAY_TASK_ID` runs its shard into its own folder.
pub fn array_script(def: &StudyDef, plan: &SlurmPlan) -> String {
    format!(
        "#!/bin/sh\n\
         # ullstack study {name} ({size}, seed {seed}) as a Slurm job array of {n} tasks: task I runs\n\
         # shard I/{n} into {shards}/task-I. Written by `ullstack study {name} --slurm {n}`; submitted\n\
         # with the --array list in submit.sh (only the shards not yet complete).\n\
         {header}\
         set -eu\n\
         exec {exe} {args} --jobs {cpus} --shard auto/{n} --quiet --out {shards}/task-\"$SLURM_ARRAY_TASK_ID\"\n",
        name = def.name,
        size = plan.size.as_str(),
        seed = plan.seed,
        n = plan.tasks,
        shards = sh_quote(&path_str(&plan.out.join("shards"))),
        header = header(plan, &format!("ullstack-{}", def.name), "task-%a.out", plan.cpus_per_task),
        exe = sh_quote(&path_str(&plan.exe)),
        args = study_args(def, plan),
        cpus = plan.cpus_per_task,
    )
}

/// The merge job's script: joins every shard folder into the results folder.
pub fn merge_script(def: &StudyDef, plan: &SlurmPlan) -> String {
    let dirs: Vec<String> = (0..plan.tasks)
        .map(|i| sh_quote(&path_str(&shard_dir(&plan.out, i))))
        .collect();
    format!(
        "#!/bin/sh\n\
         # Joins the {n} shards of ullstack study {name} into {out}: study.json, plots, report.html.\n\
         # Submitted to run after every array task succeeded (--dependency=afterok).\n\
         {header}\
         set -eu\n\
         exec {exe} study merge {dirs} --out {out} --quiet\n",
        n = plan.tasks,
        name = def.name,
        out = sh_quote(&path_str(&plan.out)),
        header = header(plan, &format!("ullstack-{}-merge", def.name), "merge.out", 1),
        exe = sh_quote(&path_str(&plan.exe)),
        dirs = dirs.join(" "),
    )
}

/// The `sbatch` argument lists: the array's (when shards need running) and the merge's
/// (`None` for the dependency when there is no array job).
fn array_argv(dir: &Path, shards: &[usize]) -> Vec<String> {
    vec![
        "--parsable".into(),
        format!("--array={}", array_spec(shards)),
        path_str(&dir.join("array.sbatch")),
    ]
}

fn merge_argv(dir: &Path, after: Option<&str>) -> Vec<String> {
    let mut v = vec!["--parsable".to_string()];
    if let Some(job) = after {
        v.push(format!("--dependency=afterok:{job}"));
        v.push("--kill-on-invalid-dep=yes".into());
    }
    v.push(path_str(&dir.join("merge.sbatch")));
    v
}

/// `submit.sh`: the commands `submit` runs, for submitting by hand after `--dry-run`.
fn submit_script(dir: &Path, shards: &[usize]) -> String {
    let q = |v: Vec<String>| {
        v.iter()
            .map(|a| {
                if a.starts_with("--") {
                    a.clone()
                } else {
                    sh_quote(a)
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut s = String::from(
        "#!/bin/sh\n# Submits the study: the array of incomplete shards, then the merge after it, and\n\
         # records their ids where `ullstack study --slurm` checks for jobs still running.\nset -eu\n",
    );
    let jobs = sh_quote(&path_str(&dir.join(JOBS_FILE)));
    if shards.is_empty() {
        s += &format!(
            "MERGE=$(sbatch {} | cut -d';' -f1)\nprintf 'merge %s\\n' \"$MERGE\" > {jobs}\n",
            q(merge_argv(dir, None))
        );
    } else {
        s += &format!(
            "ARRAY=$(sbatch {} | cut -d';' -f1)\nprintf 'array %s\\n' \"$ARRAY\" > {jobs}\n",
            q(array_argv(dir, shards))
        );
        s += &format!(
            "MERGE=$(sbatch {} | cut -d';' -f1)\nprintf 'array %s\\nmerge %s\\n' \"$ARRAY\" \"$MERGE\" > {jobs}\n",
            q(merge_argv(dir, Some("PLACEHOLDER"))).replace("PLACEHOLDER", "$ARRAY")
        );
    }
    s += "echo \"submitted: ${ARRAY:+array job $ARRAY, }merge job $MERGE\"\n";
    s
}

/// The file recording the last submission's job ids (`array ID` and `merge ID` lines).
pub const JOBS_FILE: &str = "jobs";

/// The job ids recorded in `dir/jobs` by the last submission into this folder.
fn recorded_jobs(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join(JOBS_FILE))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .filter(|id| id.chars().all(|c| c.is_ascii_digit()))
        .collect()
}

/// Job states after which a job never runs again (`squeue --states=all` prints them for jobs
/// Slurm still remembers, for `MinJobAge` after they end).
const FINAL_STATES: [&str; 11] = [
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "SPECIAL_EXIT",
    "REVOKED",
];

/// Which of `ids` Slurm still has queued or running (`squeue -h --states=all -o '%i %T' -j
/// IDS`, keeping the jobs not in a final state); array tasks show as `A_2` or `A_[2-3]`. An id
/// Slurm has forgotten is finished.
fn queued(ids: &[String]) -> Result<Vec<String>, String> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let list = ids.join(",");
    let out = match Command::new("squeue")
        .args(["-h", "--states=all", "-o", "%i %T", "-j", &list])
        .output()
    {
        Ok(o) => o,
        // No squeue here: nothing to check against (sbatch will say whether Slurm is there).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("running squeue: {e}")),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // Every id unknown (purged after MinJobAge): all finished.
        if stderr.contains("Invalid job id") {
            return Ok(Vec::new());
        }
        return Err(format!(
            "squeue -j {list} failed ({}): {}",
            out.status,
            stderr.trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, state) = l.trim().split_once(' ')?;
            let state = state.trim();
            (!FINAL_STATES.iter().any(|f| state.starts_with(f))).then(|| format!("{id} {state}"))
        })
        .collect())
}

/// Writes the scripts and, unless `dry_run`, submits them with `sbatch`.
///
/// Refuses while another submission into the same folder is in progress (`OUT/slurm`'s lock),
/// while a study or merge writes `OUT` (its lock), and — when submitting — while jobs of the
/// last submission into `OUT` are still queued or running (`squeue`): their tasks would run
/// beside the new ones in the same shard folders.
pub fn submit(def: &StudyDef, plan: &SlurmPlan, dry_run: bool) -> Result<Submission, String> {
    if plan.tasks == 0 {
        return Err("--slurm 0: expected at least 1 task".into());
    }
    if plan.cpus_per_task == 0 {
        return Err("--cpus-per-task 0: expected at least 1".into());
    }
    if let Some(t) = &plan.time {
        parse_time_limit(t)?;
    }
    let dir = plan.out.join("slurm");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    let holder = format!(
        "ullstack study {} --slurm {} (submitting)",
        def.name, plan.tasks
    );
    let _submitting = crate::lock::acquire(&dir, &holder)?;
    if !dry_run {
        let active = queued(&recorded_jobs(&dir))?;
        if !active.is_empty() {
            return Err(format!(
                "jobs of the last submission into {} are still queued or running ({}): their tasks \
                 write the same shard folders; wait for them (squeue -j {ids}) or cancel them \
                 (scancel {}), then rerun",
                plan.out.display(),
                active.join(", "),
                recorded_jobs(&dir).join(" "),
                ids = recorded_jobs(&dir).join(","),
            ));
        }
    }
    crate::lock::probe(&plan.out, &holder)?;
    let shards = incomplete_shards(def, plan);
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))
    };
    write("array.sbatch", array_script(def, plan))?;
    write("merge.sbatch", merge_script(def, plan))?;
    write("submit.sh", submit_script(&dir, &shards))?;
    let mut sub = Submission {
        shards: shards.clone(),
        array_job: None,
        merge_job: None,
        dir: dir.clone(),
    };
    if dry_run {
        return Ok(sub);
    }
    let record = |sub: &Submission| {
        let mut text = String::new();
        if let Some(a) = &sub.array_job {
            text += &format!("array {a}\n");
        }
        if let Some(m) = &sub.merge_job {
            text += &format!("merge {m}\n");
        }
        let p = dir.join(JOBS_FILE);
        std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))
    };
    if !shards.is_empty() {
        sub.array_job = Some(sbatch(&array_argv(&dir, &shards))?);
        record(&sub)?;
    }
    match sbatch(&merge_argv(&dir, sub.array_job.as_deref())) {
        Ok(m) => sub.merge_job = Some(m),
        Err(e) => {
            return Err(match &sub.array_job {
                Some(a) => format!(
                    "submitted array job {a} (shards {}), but not its merge job: {e}. The array \
                     runs without a merge: when it has finished, rerun this command (it submits \
                     the merge, and any shard still incomplete), or cancel it: scancel {a}",
                    array_spec(&shards)
                ),
                None => e,
            })
        }
    }
    record(&sub)?;
    Ok(sub)
}

/// Runs `sbatch ARGS` and returns the job id it printed (`--parsable`: `id` or `id;cluster`).
fn sbatch(args: &[String]) -> Result<String, String> {
    let out = Command::new("sbatch").args(args).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "`sbatch` is not on PATH: run this on a Slurm login node, or add --dry-run to only write the scripts".to_string()
        } else {
            format!("running sbatch: {e}")
        }
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "sbatch {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let id = stdout.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "sbatch {} printed `{}`, not a job id",
            args.join(" "),
            stdout.trim()
        ));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(dir: &Path) -> SlurmPlan {
        SlurmPlan {
            size: Size::Quick,
            seed: 7,
            replicates: 1,
            tasks: 4,
            out: dir.join("it's here"),
            exe: PathBuf::from("/opt/ullstack"),
            partition: Some("short".into()),
            time: Some("30".into()),
            cpus_per_task: 2,
        }
    }

    #[test]
    fn array_lists_compress_runs_of_indices() {
        assert_eq!(array_spec(&[0, 1, 2, 3]), "0-3");
        assert_eq!(array_spec(&[2, 5]), "2,5");
        assert_eq!(array_spec(&[0, 1, 2, 7, 9, 10]), "0-2,7,9-10");
        assert_eq!(array_spec(&[4]), "4");
    }

    #[test]
    fn scripts_carry_the_options_and_quote_paths() {
        let dir = tempfile::tempdir().unwrap();
        let def = crate::studies::find("ull").unwrap();
        let p = plan(dir.path());
        let a = array_script(&def, &p);
        for want in [
            "#SBATCH --partition=short",
            "#SBATCH --time=30",
            "#SBATCH --cpus-per-task=2",
            "task-%a.out",
            "'/opt/ullstack' study ull --quick --seed 7 --jobs 2 --shard auto/4",
            r"it'\''s here",
        ] {
            assert!(a.contains(want), "array script lacks {want}:\n{a}");
        }
        let m = merge_script(&def, &p);
        assert!(m.contains("study merge") && m.contains("task-3'") && !m.contains("task-4"));
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
    }

    #[test]
    fn a_dry_run_writes_the_scripts_and_submits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let def = crate::studies::find("ull").unwrap();
        let p = plan(dir.path());
        let sub = submit(&def, &p, true).unwrap();
        assert_eq!(sub.shards, vec![0, 1, 2, 3]);
        assert_eq!((sub.array_job, sub.merge_job), (None, None));
        let s = std::fs::read_to_string(sub.dir.join("submit.sh")).unwrap();
        assert!(
            s.contains("--array=0-3") && s.contains("--dependency=afterok:$ARRAY"),
            "{s}"
        );
        assert!(s.contains("--kill-on-invalid-dep=yes"));
        assert!(sub.dir.join("logs").is_dir());
    }

    #[test]
    fn time_limits_take_sbatchs_forms_and_name_a_bad_one() {
        for (t, secs) in [
            ("30", Some(1800)),
            ("0", Some(0)),
            ("5:30", Some(330)),
            ("1:30:00", Some(5400)),
            ("2-12", Some(2 * 86_400 + 12 * 3600)),
            ("1-0:30", Some(86_400 + 1800)),
            ("1-02:03:04", Some(86_400 + 2 * 3600 + 3 * 60 + 4)),
            ("UNLIMITED", None),
            ("infinite", None),
        ] {
            assert_eq!(parse_time_limit(t), Ok(secs), "{t}");
        }
        for bad in [
            "abc",
            "",
            "1:60",
            "1:2:3:4",
            "1-",
            "-5",
            "1:99:00",
            "1.5",
            "9999999999",
        ] {
            let e = parse_time_limit(bad).unwrap_err();
            assert!(
                e.contains(&format!("--time `{bad}`")) && e.contains("DAYS-HOURS"),
                "{e}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let mut p = plan(dir.path());
        p.time = Some("abc".into());
        let def = crate::studies::find("ull").unwrap();
        assert!(submit(&def, &p, true).unwrap_err().contains("--time `abc`"));
        assert!(!p.out.join("slurm").exists(), "nothing written");
    }

    #[test]
    fn a_submission_is_refused_while_a_study_writes_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let def = crate::studies::find("ull").unwrap();
        let p = plan(dir.path());
        let held = crate::lock::acquire(&p.out, "ullstack study ull --out X").unwrap();
        let e = submit(&def, &p, true).unwrap_err();
        assert!(e.contains("in use by PID") && e.contains("--out X"), "{e}");
        drop(held);
        submit(&def, &p, true).unwrap();
    }

    #[test]
    fn zero_tasks_or_cpus_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let def = crate::studies::find("ull").unwrap();
        let mut p = plan(dir.path());
        p.tasks = 0;
        assert!(submit(&def, &p, true).unwrap_err().contains("--slurm 0"));
        let mut p = plan(dir.path());
        p.cpus_per_task = 0;
        assert!(submit(&def, &p, true)
            .unwrap_err()
            .contains("--cpus-per-task 0"));
    }
}
