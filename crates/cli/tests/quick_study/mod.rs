//! What the tests of the simulated studies' `--quick` runs share (`study_flashshare.rs`,
//! `study_fastdrain.rs`): running `ullstack`, reading a study's files, the check that a run is
//! quick-sized, and re-running one run alone from its folder.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

pub fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

pub fn run_ok(cmd: &mut Command) -> String {
    let (ok, text) = testkit::run(cmd).expect("ullstack runs");
    assert!(ok, "{cmd:?} failed:\n{text}");
    text
}

pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&read(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `summary.json` without wall time and the config's path.
fn comparable(mut v: serde_json::Value) -> serde_json::Value {
    let sim = v["sim"].as_object_mut().expect("sim object");
    sim.remove("wall_ns");
    sim.remove("job_source");
    v
}

/// `ullstack study STUDY --quick` into `out` (two jobs, quiet). Its wall time is printed, not
/// bounded: a bound would measure this machine (issue 26). What keeps `--quick` quick is its
/// size, which the tests check: the number of runs, and each run [`assert_quick_sized`].
pub fn run_quick_study(study: &str, out: &Path) -> String {
    let start = Instant::now();
    let text = run_ok(
        ullstack()
            .args(["study", study, "--quick", "--quiet", "--jobs", "2", "--out"])
            .arg(out),
    );
    println!("{study} --quick took {:?}: {text}", start.elapsed());
    text
}

/// A quick run of `study.json`: its simulated time, drain included, is under a full run's
/// (`full_ms`: the study's `FULL_MS`, the length of a run without `--quick`).
pub fn assert_quick_sized(run: &serde_json::Value, full_ms: u64) {
    let simulated_ns = run["simulated_ns"].as_u64().unwrap();
    assert!(
        simulated_ns < full_ms * 1_000_000,
        "{}: {simulated_ns} ns simulated, as long as a run without --quick",
        run["id"]
    );
}

/// Run `id` of the study in `out` re-runs alone with the command its `config.toml` names
/// (`--stack STACK --series-ms SERIES_MS`), into `scratch`, to the same summary and series.
pub fn assert_reruns_alone(out: &Path, scratch: &Path, id: &str, stack: &str, series_ms: u64) {
    let run = out.join("runs").join(id);
    let header = read(&run.join("config.toml"));
    let command =
        format!("ullstack sim --system config.toml --stack {stack} --series-ms {series_ms}");
    assert!(
        header.starts_with(&format!("# {id}: re-run alone with `{command}`")),
        "{header}"
    );
    let again = scratch.join("again");
    run_ok(
        ullstack()
            .args(["sim", "--system"])
            .arg(run.join("config.toml"))
            .args([
                "--stack",
                stack,
                "--series-ms",
                &series_ms.to_string(),
                "--out",
            ])
            .arg(&again),
    );
    assert_eq!(
        comparable(json(&again.join("summary.json"))),
        comparable(json(&run.join("summary.json")))
    );
    assert_eq!(
        read(&again.join("timeseries.csv")),
        read(&run.join("timeseries.csv"))
    );
}
