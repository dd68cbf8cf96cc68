//! `ullstack sim` as a user runs it: results folder contents and errors for bad input.

use std::path::PathBuf;
use std::process::Command;

fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ullstack-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `cmd`, which must succeed (its stderr in the message if not).
fn run_ok(cmd: &mut Command) -> std::process::Output {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?} failed; stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

#[test]
fn a_device_level_run_writes_the_documented_summary_and_csvs() {
    let out = scratch("run");
    let o = run_ok(
        ullstack()
            .args(["sim", "--device", "zssd", "--seed", "3", "--job"])
            .arg(examples().join("randread-qd1.fio"))
            .arg("--out")
            .arg(&out),
    );
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("p99.999") && table.contains("read"),
        "{table}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for key in ["seed", "simulated_ns", "wall_ns", "events", "ios"] {
        assert!(
            summary["sim"][key].is_number(),
            "sim.{key} missing: {}",
            summary["sim"]
        );
    }
    assert_eq!(summary["sim"]["seed"], 3);
    let job = &summary["jobs"][0];
    for key in [
        "mean", "p50", "p95", "p99", "p99_9", "p99_99", "p99_999", "max",
    ] {
        assert!(
            job["read"]["latency_ns"][key].as_u64().unwrap() > 0,
            "read.latency_ns.{key}"
        );
    }
    assert!(job["read"]["iops"].as_f64().unwrap() > 0.0);
    for key in ["write_amplification", "ftl", "cache"] {
        assert!(!summary["device"][key].is_null(), "device.{key} missing");
    }
    let csv = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("latency_"));
    let csv = std::fs::read_to_string(csv.expect("a latency CSV").path()).unwrap();
    assert!(csv.starts_with("latency_ns,cumulative_fraction\n"));
}

fn fails_with(args: &[&str], extra: Option<(&str, &str)>, expect: &[&str]) {
    let dir = scratch(&args.join("-").replace(['/', '.'], "_"));
    let mut cmd = ullstack();
    cmd.args(args).arg("--out").arg(dir.join("out"));
    if let Some((name, text)) = extra {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        cmd.arg(if name.ends_with(".fio") {
            "--job"
        } else {
            "--device"
        })
        .arg(&p);
    }
    let o = cmd.output().unwrap();
    assert!(!o.status.success(), "should fail: {args:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    for e in expect {
        assert!(err.contains(e), "stderr should mention {e:?}: {err}");
    }
}

#[test]
fn an_unknown_preset_is_named_with_the_known_ones() {
    fails_with(
        &["sim", "--device", "optane"],
        None,
        &["optane", "zssd, nvme-tlc, bics, vnand"],
    );
}

#[test]
fn an_unsupported_fio_option_names_option_and_line() {
    fails_with(
        &["sim", "--device", "zssd"],
        Some(("bad.fio", "[j]\nrw=randread\nverify=md5\n")),
        &["verify", ":3"],
    );
}

#[test]
fn a_malformed_job_value_is_named() {
    fails_with(
        &["sim", "--device", "zssd"],
        Some(("bad.fio", "[j]\nrw=randread\nbs=3000\n")),
        &["bs", "3000"],
    );
}

#[test]
fn impossible_geometry_and_unknown_keys_in_a_device_file_are_named() {
    fails_with(
        &["sim"],
        Some(("dev.toml", "preset = \"zssd\"\n[flash]\nchannels = 0\n")),
        &["flash.channels", "0"],
    );
    fails_with(
        &["sim"],
        Some((
            "dev.toml",
            "preset = \"zssd\"\n[flash]\npage_bytes = 3000\n",
        )),
        &["page_bytes", "power of two"],
    );
    fails_with(
        &["sim"],
        Some(("dev.toml", "preset = \"zssd\"\n[cache]\nwayz = 4\n")),
        &["cache.wayz"],
    );
}

/// `ullstack sim` with no run arguments: the embedded apache + pagerank default and apache
/// alone, with the four reports the README promises and the documented summary.json.
#[test]
fn the_embedded_default_prints_its_reports_and_writes_the_system_summary() {
    let out = scratch("default");
    let o = run_ok(ullstack().args(["sim", "--out"]).arg(&out));
    let table = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "online services",
        "apache               co-run",
        "apache               alone",
        "offline jobs",
        "pagerank",
        "CPU utilization by category",
        "latency-critical I/O: mean time per request in each layer",
        "sw queue",
        "blk compl",
    ] {
        assert!(table.contains(needle), "`{needle}` missing from:\n{table}");
    }
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for run in [&s, &s["alone"]] {
        assert!(run["sim"]["simulated_ns"].as_u64().unwrap() >= 10_000_000_000);
        let apache = run["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "apache")
            .expect("apache in processes");
        assert_eq!(apache["profile"], "apache");
        assert_eq!(apache["class"], "latency-critical");
        assert_eq!(apache["kind"], "online");
        assert!(apache["requests"].as_u64().unwrap() > 1000);
        for key in ["mean", "p50", "p95", "p99", "p99_9", "max"] {
            assert!(
                apache["response_time_ns"][key].as_u64().unwrap() > 0,
                "response_time_ns.{key}"
            );
        }
        for key in ["user", "idle", "irq", "blk", "nvme", "busy_pct"] {
            assert!(run["cpu"][key].is_number(), "cpu.{key}: {}", run["cpu"]);
        }
        assert!(run["breakdown_ns"].is_object(), "breakdown_ns");
    }
    let pagerank = s["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "pagerank")
        .expect("pagerank in the co-run");
    assert_eq!(pagerank["kind"], "offline");
    assert_eq!(pagerank["class"], "throughput");
    assert!(pagerank["instructions_per_sec"].as_f64().unwrap() > 1e9);
    assert!(pagerank["ios"].as_u64().unwrap() > 0);
    assert!(
        s["alone"]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["name"] != "pagerank"),
        "the alone run holds apache only"
    );
    // The co-run's cold submissions are counted and named in the table; alone, none. pagerank
    // runs a worker per core but one (workload's "Offline jobs' threads"), so apache's worker
    // mostly has a core of its own, but pagerank's code on the other seven refills the L2 all
    // eight share (host's `cpu` essay), so most apache bios are cold: those that follow the
    // worker's previous one by at least `cpu.llc_sweep_ns` (93 of 15,967 with the embedded
    // default when only the worker's own core counted).
    let lc = |run: &serde_json::Value| run["host"]["blk"]["latency_critical"].clone();
    let cold = lc(&s)["cold_bios"].as_u64().expect("co-run cold_bios");
    let bios = lc(&s)["bios"].as_u64().unwrap();
    assert!(cold * 100 >= bios * 60, "{}", lc(&s));
    assert!(
        lc(&s["alone"]).get("cold_bios").is_none(),
        "{}",
        lc(&s["alone"])
    );
    let line = format!("(co-run: {cold} of ");
    assert!(table.contains(&line), "`{line}` missing from:\n{table}");
    assert!(!table.contains("(alone: "), "{table}");
}

#[test]
fn help_opens_with_a_sentence_for_users_and_shows_where_to_start() {
    let o = ullstack().arg("--help").output().unwrap();
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        help.starts_with("Latency QoS on ultra-low-latency NVMe flash"),
        "{help}"
    );
    assert!(!help.contains("argument parsing"), "{help}");
    assert!(help.contains("ullstack sim --device zssd"), "{help}");
}

/// `--series-ms` writes timeseries.csv beside summary.json, for device-level and full-system
/// runs, with one row per window; 0 is refused.
#[test]
fn series_ms_writes_a_time_series_for_both_kinds_of_run() {
    let out = scratch("series-dev");
    run_ok(
        ullstack()
            .args(["sim", "--device", "zssd", "--series-ms", "5", "--job"])
            .arg(examples().join("randread-qd1.fio"))
            .arg("--out")
            .arg(&out),
    );
    let csv = std::fs::read_to_string(out.join("timeseries.csv")).unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let end = summary["sim"]["simulated_ns"].as_u64().unwrap();
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("t_start_ns,t_end_ns,lc_ios,"),
        "{header}"
    );
    assert!(header.contains("tp_lat_p99_ns") && header.ends_with("cpu_idle_ns"));
    assert_eq!(lines.count() as u64, end.div_ceil(5_000_000));

    let dir = scratch("series-sys");
    std::fs::write(
        dir.join("sys.toml"),
        "seed = 1\nduration_ms = 50\n[[process]]\nprofile = \"apache\"\n",
    )
    .unwrap();
    run_ok(
        ullstack()
            .args(["sim", "--series-ms", "10", "--system"])
            .arg(dir.join("sys.toml"))
            .arg("--out")
            .arg(dir.join("out")),
    );
    let csv = std::fs::read_to_string(dir.join("out/timeseries.csv")).unwrap();
    assert!(
        csv.lines().count() >= 6,
        "header + at least 5 windows of 10 ms:\n{csv}"
    );
    let o = ullstack()
        .args(["sim", "--device-level", "--series-ms", "0"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("'0'") && err.contains("--series-ms") && err.contains("1.."),
        "the refusal names the value, the flag and the accepted range: {err}"
    );
    std::fs::remove_dir_all(&out).ok();
    std::fs::remove_dir_all(&dir).ok();
}
