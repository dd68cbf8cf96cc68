//! `ullstack study fastdrain --quick`: the full-system study runs end to end at its quick size,
//! writes every report experiments.md names, and each run re-runs alone from its folder with
//! the command its `config.toml` names.

mod browser;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

fn run_ok(cmd: &mut Command) -> String {
    let (ok, text) = testkit::run(cmd).expect("ullstack runs");
    assert!(ok, "{cmd:?} failed:\n{text}");
    text
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&read(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `summary.json` without wall time and the config's path.
fn comparable(mut v: serde_json::Value) -> serde_json::Value {
    let sim = v["sim"].as_object_mut().expect("sim object");
    sim.remove("wall_ns");
    sim.remove("job_source");
    v
}

/// A quick run: its simulated time, drain included, is under a full run's.
fn quick_sized(run: &serde_json::Value) {
    let simulated_ns = run["simulated_ns"].as_u64().unwrap();
    assert!(
        simulated_ns < study::fastdrain::FULL_MS * 1_000_000,
        "{}: {simulated_ns} ns simulated, as long as a run without --quick",
        run["id"]
    );
}

#[test]
fn the_quick_study_reports_every_figure_and_its_runs_rerun_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fd");
    let start = Instant::now();
    let text = run_ok(
        ullstack()
            .args([
                "study",
                "fastdrain",
                "--quick",
                "--quiet",
                "--jobs",
                "2",
                "--out",
            ])
            .arg(&out),
    );
    // Its wall time is printed, not bounded: a bound would measure this machine (issue 26).
    // What keeps --quick quick is its size: the runs counted below, each shorter than a full
    // run (checked below against `FULL_MS`, the length of a run without --quick).
    println!("fastdrain --quick took {:?}: {text}", start.elapsed());
    // The report in a real browser: every image loads, no two text boxes of a figure overlap.
    browser::check_report(
        &out,
        "the_quick_study_reports_every_figure_and_its_runs_rerun_alone",
    );

    let study = json(&out.join("study.json"));
    let runs = study["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 36, "6 stacks x 6 workloads");
    let mut fd_switches_down = 0;
    for r in runs {
        quick_sized(r);
        let sys = &r["system"];
        let names: Vec<&str> = sys["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"ungzip"), "{}: {names:?}", r["id"]);
        if r["job"] == "oracle" {
            assert_eq!(sys["device"]["write_stalls"], 0, "{}", r["id"]);
        }
        // The quick study is sized so the question arises: vanilla's buffer overflows.
        if r["job"] == "vanilla" {
            let stalls = sys["device"]["write_stalls"].as_u64().unwrap();
            assert!(stalls > 0, "{}: vanilla never stalled a write", r["id"]);
        }
        // The flusher's waves reach the device as hints announcing what they write (all but
        // pages dirtied into a file after its pass reached it); stacks without the hint send
        // none, and their device reports no drain.
        let wb = &sys["host"]["writeback"];
        let (waves, written, hinted) = (
            wb["waves"].as_u64().unwrap(),
            wb["wave_pages"].as_u64().unwrap(),
            wb["hinted_pages"].as_u64().unwrap(),
        );
        assert!(waves > 0 && written > 0, "{}: {wb}", r["id"]);
        // fd's adaptive thresholds act: the completions of its foreground drains take the
        // host to the high dirty set (device `drain.rs`, "The buffer status in completions"),
        // and back once a drain ends under `low` (in a 1 s run some end while a drain is on:
        // the switches back are counted over all six); no other stack adapts them.
        let (up, down) = (
            wb["switches_to_high"].as_u64().unwrap_or(0),
            wb["switches_to_low"].as_u64().unwrap_or(0),
        );
        if r["job"] == "fd" {
            assert!(
                up >= 1 && down + 1 >= up,
                "{}: {up} up, {down} down",
                r["id"]
            );
            fd_switches_down += down;
        } else {
            assert_eq!((up, down), (0, 0), "{}", r["id"]);
        }
        let drain = &sys["device"]["drain"];
        if matches!(r["job"].as_str(), Some("vanilla" | "oracle")) {
            assert_eq!(hinted, 0, "{}", r["id"]);
        } else {
            assert_eq!(drain["hints"].as_u64(), Some(waves), "{}", r["id"]);
            assert_eq!(drain["hinted_pages"].as_u64(), Some(hinted), "{}", r["id"]);
            assert!(
                hinted * 100 >= written * 95 && hinted <= written,
                "{}: {wb}",
                r["id"]
            );
        }
    }
    assert!(
        fd_switches_down >= 1,
        "no fd run switched back to the low set"
    );
    for stem in [
        "p99-normalised",
        "avg-p99",
        "series-latency",
        "series-flushed",
        "ftl-pages",
    ] {
        for ext in ["csv", "svg", "png"] {
            let p = out.join(format!("{stem}.{ext}"));
            assert!(p.is_file(), "{} missing", p.display());
        }
    }
    // The time series has a row per window for vanilla: the quick run's 1 s in 20 ms windows
    // (and one more, shorter, if work drained past the end).
    let series = read(&out.join("series-flushed.csv"));
    let vanilla_rows = series.lines().filter(|l| l.starts_with("vanilla,")).count();
    assert!((50..=51).contains(&vanilla_rows), "{series}");
    // lsb-skip programs every host row into an LSB page and wastes the pages it skips.
    let ftl = read(&out.join("ftl-pages.csv"));
    let wasted = |x: &str| -> f64 {
        ftl.lines()
            .find(|l| l.starts_with("units wasted,") && l.split(',').nth(1) == Some(x))
            .and_then(|l| l.split(',').nth(2)?.parse().ok())
            .unwrap_or_else(|| panic!("no `units wasted` at x = {x}: {ftl}"))
    };
    assert!(wasted("lsb-skip") > 0.0, "lsb-skip wasted nothing: {ftl}");
    let html = read(&out.join("report.html"));
    assert!(html.contains("fd-ftl-lsb-skip") && html.contains("p99 / vanilla"));
    // The report says it is a smoke test, then opens with the published figures beside ours;
    // study.json carries the same rows, one per fastdrain outcome of the shipped reference.
    let smoke = html.find("Smoke test (--quick)").expect("smoke-test line");
    let published = html
        .find("The published figures beside ours")
        .expect("published table");
    assert!(smoke < published && published < html.find("Headline numbers").unwrap());
    let rows = study["published"].as_array().expect("published rows");
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["p99.fd-buf", "p99.fd-ftl", "p99.fd", "p99.oracle"]);
    for r in rows {
        let v = r["simulated"]["value"].as_f64();
        assert!(v.is_some_and(|v| v > 0.0), "no simulated value: {r}");
        assert_eq!(r["basis"], "predicted", "{r}");
    }
    // The directions the model reproduces, even on the quick runs: the latency-aware FTL,
    // the adaptive thresholds on top of it and the unbounded buffer each cut the mean p99
    // below vanilla's (whole interval under 1). fd-buf's published cut is not reproduced
    // (issue 25: its rows still hold the reads that reach their dies during a program).
    for r in rows {
        let id = r["id"].as_str().unwrap();
        if id != "p99.fd-buf" {
            let high = r["simulated"]["high"].as_f64().unwrap();
            assert!(
                high < 1.0,
                "{id}: interval reaches {high}, not below vanilla: {r}"
            );
        }
    }

    // A run re-runs alone with the command its config names, to the same summary.
    let run = out.join("runs/fd-apache-upload");
    let header = read(&run.join("config.toml"));
    assert!(
        header.starts_with("# fd-apache-upload: re-run alone with `ullstack sim --system config.toml --stack fd --series-ms 20`"),
        "{header}"
    );
    let again = dir.path().join("again");
    run_ok(
        ullstack()
            .args(["sim", "--system"])
            .arg(run.join("config.toml"))
            .args(["--stack", "fd", "--series-ms", "20", "--out"])
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
