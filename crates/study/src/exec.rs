//! Running a study's runs: in parallel, resumably, each run's folder written atomically.
//!
//! Workers (`--jobs`, default every core) pull the next run index from one shared counter, so
//! a slow run never holds up a queue of others behind it. The runs are handed out longest
//! expected first ([`crate::schedule`]), so the workers finish close together instead of one
//! idling while the other ends a long run listed last. Each run is simulated from its own
//! config and seed, so which worker runs it, and in what order, cannot change its result:
//! `--jobs 1` and `--jobs 8`, one process or shards merged, any order, give the same
//! `summary.json` files (apart from `sim.wall_ns`, which `study.json` does not copy;
//! `tests::the_order_runs_are_handed_out_in_changes_no_result`).
//!
//! ## Resuming, and what Ctrl-C loses
//! A run is built in `runs/.tmp-<id>/` (config, job file, `summary.json`, latency CSVs) and then
//! renamed to `runs/<id>/`: a folder named by its id is always complete. A later invocation
//! reuses `runs/<id>/` when its `config.toml` and `job.fio` are byte-for-byte those the study
//! would write now and `summary.json` is there; otherwise the run is redone. Ctrl-C (or a kill)
//! therefore loses only the runs in flight, whose temporary folders the next invocation
//! deletes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::schedule;
use crate::spec::RunSpec;

/// Where a run's result came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Simulated in this invocation.
    Ran,
    /// Found complete and unchanged on disk.
    Reused,
}

/// Counts of what an execution did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecReport {
    pub ran: usize,
    pub reused: usize,
}

/// How to run: worker threads and whether to show a progress bar.
#[derive(Clone, Copy, Debug)]
pub struct ExecOptions {
    pub jobs: usize,
    pub progress: bool,
}

/// The folder holding run `id` under a study folder.
pub fn run_dir(out: &Path, id: &str) -> PathBuf {
    out.join("runs").join(id)
}

/// Whether run `spec` is complete and unchanged under `out`.
pub fn is_done(out: &Path, spec: &RunSpec) -> bool {
    let dir = run_dir(out, &spec.id);
    dir.join("summary.json").is_file() && spec.files_match(&dir)
}

/// Runs every spec not already done under `out`; returns what it did. Stops at the first
/// failing run (the others in flight finish) and names it.
pub fn execute(out: &Path, specs: &[RunSpec], opts: ExecOptions) -> Result<ExecReport, String> {
    let runs = out.join("runs");
    std::fs::create_dir_all(&runs).map_err(|e| format!("creating {}: {e}", runs.display()))?;
    remove_stale_temporaries(&runs)?;
    let todo: Vec<&RunSpec> = specs.iter().filter(|s| !is_done(out, s)).collect();
    let todo = schedule::longest_first(&todo);
    let report = ExecReport {
        ran: todo.len(),
        reused: specs.len() - todo.len(),
    };
    let bar = progress_bar(opts.progress, report);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let workers = opts.jobs.max(1).min(todo.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                if failed.load(Ordering::Relaxed) {
                    return;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(spec) = todo.get(i) else { return };
                match run_one(out, spec) {
                    Ok(()) => bar.inc(1),
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        let mut slot = first_error.lock().expect("no worker panics holding it");
                        slot.get_or_insert(format!("run `{}`: {e}", spec.id));
                        return;
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    match first_error.into_inner().expect("workers joined") {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// The bar counts only the runs this invocation simulates (`report.ran`), so its ETA is the
/// time those take: a bar over every run, started at the reused count, would see the reused
/// runs as progress made in no time and promise a resumed study's end far too early.
fn progress_bar(show: bool, report: ExecReport) -> indicatif::ProgressBar {
    let bar = if show {
        indicatif::ProgressBar::new(report.ran as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_length(report.ran as u64);
    let reused = match report.reused {
        0 => String::new(),
        n => format!(" ({n} reused)"),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} runs to simulate{reused}, {{elapsed}} elapsed, ETA {{eta}}"
        ))
        .expect("valid template"),
    );
    bar
}

/// Deletes `runs/.tmp-*` folders left by an interrupted invocation.
fn remove_stale_temporaries(runs: &Path) -> Result<(), String> {
    let entries =
        std::fs::read_dir(runs).map_err(|e| format!("reading {}: {e}", runs.display()))?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            std::fs::remove_dir_all(entry.path())
                .map_err(|e| format!("removing {}: {e}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Simulates one run into its temporary folder, then renames it into place.
fn run_one(out: &Path, spec: &RunSpec) -> Result<(), String> {
    let tmp = out.join("runs").join(format!(".tmp-{}", spec.id));
    let fin = run_dir(out, &spec.id);
    let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| io("removing", &tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| io("creating", &tmp, e))?;
    spec.write_files(&tmp)
        .map_err(|e| io("writing into", &tmp, e))?;
    if let Some(sys) = &spec.system {
        let cfg = spec.load_system(&tmp)?;
        let series = match sys.series_ms {
            0 => None,
            ms => {
                let path = tmp.join("timeseries.csv");
                let f = std::fs::File::create(&path).map_err(|e| io("creating", &path, e))?;
                Some(sim::system::SeriesOut {
                    window_ns: ms * 1_000_000,
                    out: Box::new(std::io::BufWriter::new(f)),
                })
            }
        };
        let summary = sim::system::run_with_series(&cfg, &mut sim::Silent, series)
            .map_err(|e| e.to_string())?;
        summary
            .write_folder(&tmp)
            .map_err(|e| io("writing results into", &tmp, e))?;
    } else {
        let cfg = spec.load_config(&tmp)?;
        let run = sim::DeviceRun::new(&cfg).map_err(|e| e.to_string())?;
        let summary = run.run(&mut sim::Silent).map_err(|e| e.to_string())?;
        summary
            .write_folder(&tmp)
            .map_err(|e| io("writing results into", &tmp, e))?;
    }
    if fin.exists() {
        std::fs::remove_dir_all(&fin).map_err(|e| io("removing stale", &fin, e))?;
    }
    std::fs::rename(&tmp, &fin).map_err(|e| io("renaming into place", &fin, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device run of `ios` random reads and a short full-system co-run, seeded `seed`.
    fn specs(seed: u64) -> Vec<RunSpec> {
        let device = |id: &str, ios: u32| RunSpec {
            id: id.into(),
            device: "zssd".into(),
            host: "x86-4".into(),
            job_fio: format!("[j]\nrw=randread\nbs=4k\niodepth=4\nnumber_ios={ios}\n"),
            seed,
            system: None,
            device_keys: String::new(),
        };
        let system = RunSpec {
            id: "pair".into(),
            device: "zssd".into(),
            host: "arm8".into(),
            job_fio: crate::spec::SystemFile::new(seed, 20, "arm8")
                .device("zssd")
                .process("apache")
                .process("gzip")
                .finish(),
            seed,
            system: Some(crate::spec::SystemRun {
                stack: "vanilla".into(),
                series_ms: 0,
            }),
            device_keys: String::new(),
        };
        vec![device("small", 200), system, device("large", 2000)]
    }

    /// Every run's `summary.json` under `out`, without the fields that name the wall clock or
    /// the folder it ran in.
    fn summaries(out: &Path, specs: &[RunSpec]) -> Vec<(String, serde_json::Value)> {
        fn strip(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(m) => {
                    m.remove("wall_ns");
                    m.remove("job_source");
                    m.values_mut().for_each(strip);
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
                _ => {}
            }
        }
        let mut all: Vec<_> = specs
            .iter()
            .map(|s| {
                let text = std::fs::read_to_string(run_dir(out, &s.id).join("summary.json"))
                    .expect("every run finished");
                let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
                strip(&mut v);
                (s.id.clone(), v)
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The same runs listed in reverse and run on one worker or two, so handed out in other
    /// orders, give the same summaries; and a different seed gives different ones (the
    /// comparison can fail).
    #[test]
    fn the_order_runs_are_handed_out_in_changes_no_result() {
        let run = |specs: &[RunSpec], jobs: usize| {
            let dir = tempfile::tempdir().unwrap();
            let opts = ExecOptions {
                jobs,
                progress: false,
            };
            execute(dir.path(), specs, opts).unwrap();
            summaries(dir.path(), specs)
        };
        let forward = specs(1);
        let mut reverse = specs(1);
        reverse.reverse();
        let first = run(&forward, 2);
        assert_eq!(first, run(&reverse, 2), "reversed plan, two workers");
        assert_eq!(first, run(&reverse, 1), "reversed plan, one worker");
        assert_ne!(
            first,
            run(&specs(2), 2),
            "another seed must change a summary"
        );
    }

    /// A resumed study's bar runs over the runs left, from zero, so its ETA is theirs alone.
    #[test]
    fn a_resumed_studys_bar_counts_only_the_runs_left() {
        let bar = progress_bar(false, ExecReport { ran: 2, reused: 90 });
        assert_eq!((bar.position(), bar.length()), (0, Some(2)));
        bar.inc(1);
        assert_eq!(bar.position(), 1, "half of what is left, not 91 of 92");
    }
}
