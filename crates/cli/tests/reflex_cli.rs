//! `ullstack study reflex --quick` (CI): the whole study — simulated parts and the real server
//! through serve + bench on 127.0.0.1 — finishes within its 90 s budget and writes its report;
//! a simulated run's scenario re-runs alone with `ullstack sim --remote` to the same numbers.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

fn run_ok(cmd: &mut Command) -> String {
    let (ok, text) = testkit::run(cmd).expect("ullstack runs");
    assert!(ok, "{cmd:?} failed:\n{text}");
    text
}

fn read_json(p: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn reflex_quick_runs_within_its_budget_and_reruns_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("reflex");
    let started = Instant::now();
    let text = run_ok(
        ullstack()
            .args(["study", "reflex", "--quick", "--jobs", "2", "--out"])
            .arg(&out),
    );
    let took = started.elapsed();
    println!("{text}\nstudy reflex --quick took {took:?}");
    assert!(took < Duration::from_secs(90), "took {took:?}");
    for f in [
        "report.html",
        "study.json",
        "scenario1_p95.png",
        "cores_iops.csv",
        "unloaded.svg",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let study = read_json(&out.join("study.json"));
    assert_eq!(study["simulated"].as_array().map(Vec::len), Some(12));
    assert_eq!(study["real"].as_array().map(Vec::len), Some(5));
    // The simulated scenario 1 with the scheduler: every LC tenant within its SLO.
    let s1_on = read_json(&out.join("runs/s1-on/summary.json"));
    for t in s1_on["tenants"].as_array().unwrap() {
        if t["class"] == "lc" {
            assert_eq!(t["slo_met"], true, "{t}");
        }
    }
    // One run re-runs alone from its scenario file, to the same numbers.
    let rerun = dir.path().join("rerun");
    run_ok(
        ullstack()
            .args(["sim", "--remote"])
            .arg(out.join("runs/s1-on/scenario.toml"))
            .arg("--out")
            .arg(&rerun),
    );
    let mut a = s1_on;
    let mut b = read_json(&rerun.join("summary.json"));
    for v in [&mut a, &mut b] {
        v.as_object_mut().unwrap().remove("wall_ms");
    }
    assert_eq!(a, b);
}
