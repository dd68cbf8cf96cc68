//! `ullstack calibrate`: the model's known costs come back, a file on this machine gives a
//! profile `serve` accepts, and a bad TARGET gets an error naming it.

use std::process::Command;

fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

fn read_json(p: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

/// The zssd model's read ceiling is its PCIe link's device → host direction: Gen3 ×4 moves
/// 8 GT/s × 4 × 128/130 = 3.938 GB/s, and a 4 KiB read is 16 TLPs of 256 + 24 bytes = 4,480 B
/// on the wire, so at most 879,120 reads/s (`crates/device/src/pcie.rs`). Writes use the other
/// direction and SLC flash with program suspend absorbs them, so a write costs the bottleneck
/// nothing: the fitted weight must be the search's floor. Tolerance: the read-only IOPS the
/// calibration reads off its 2 ms point within 10 % below the ceiling, never above it.
#[test]
fn model_zssd_recovers_the_models_known_costs() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, text) = testkit::run(
        ullstack()
            .args(["calibrate", "model:zssd", "--quick", "--out"])
            .arg(dir.path()),
    )
    .unwrap();
    assert!(ok, "{text}");
    let cal = read_json(&dir.path().join("calibration.json"));
    assert_eq!(cal["write_cost_mtok"], 250, "{text}");
    assert_eq!(cal["write_weight_at_floor"], true);
    const CEILING: f64 = 8e9 * 4.0 * 128.0 / 130.0 / 8.0 / 4480.0;
    let curves = cal["curves"].as_array().unwrap();
    let ro = curves
        .iter()
        .find(|c| c[0] == 100)
        .expect("read-only curve");
    let max_iops = ro[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["iops"].as_f64().unwrap())
        .fold(0.0, f64::max);
    println!("read-only ceiling {CEILING:.0}/s, measured {max_iops:.0}/s");
    assert!(
        (CEILING * 0.9..=CEILING * 1.001).contains(&max_iops),
        "read-only {max_iops:.0} IOPS vs the link's {CEILING:.0}"
    );
    let profile = std::fs::read_to_string(dir.path().join("profile.toml")).unwrap();
    assert!(profile.contains("write_cost_mtok = 250"), "{profile}");
    assert!(dir.path().join("report.html").is_file());
}

#[test]
fn a_file_gives_a_profile_serve_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("cal.img");
    let out = dir.path().join("out");
    let (ok, text) = testkit::run(
        ullstack()
            .arg("calibrate")
            .arg(&target)
            .args(["--quick", "--size", "16MiB", "--duration", "0.05", "--out"])
            .arg(&out),
    )
    .unwrap();
    assert!(ok, "{text}");
    assert!(
        text.contains("polled"),
        "says whether polling works: {text}"
    );
    let (ok, check) = testkit::run(
        ullstack()
            .args([
                "serve",
                "--memory",
                "16MiB",
                "--listen",
                "127.0.0.1:0",
                "--check",
                "--profile",
            ])
            .arg(out.join("profile.toml")),
    )
    .unwrap();
    assert!(ok, "serve refused the profile:\n{check}");
    // The file now holds data: a second run must refuse it without --destructive.
    let (ok, text) = testkit::run(ullstack().arg("calibrate").arg(&target).arg("--quick")).unwrap();
    assert!(!ok);
    assert!(
        text.contains("--destructive") && text.contains("cal.img"),
        "{text}"
    );
}

#[test]
fn bad_targets_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("no/such/dir/x.img");
    let cases: Vec<(String, &str)> = vec![
        ("model:no-such-preset".into(), "no-such-preset"),
        ("nbd://127.0.0.1:1/e".into(), "nbd://127.0.0.1:1/e"),
        ("ftp://x".into(), "ftp://x"),
        (missing_dir.display().to_string(), "x.img"),
        ("/dev/null".into(), "/dev/null"),
    ];
    for (target, needle) in cases {
        let (ok, text) = testkit::run(ullstack().args(["calibrate", &target, "--quick"])).unwrap();
        assert!(!ok, "{target} accepted");
        assert!(text.contains(needle), "{target}: {text}");
    }
}
