//! `ullstack trace stats` and `ullstack sim --trace` as a user runs them.

use std::path::PathBuf;
use std::process::Command;

fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("ullstack-trace-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> (bool, String, String) {
    let o = cmd.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// blkparse text: 300 Q events (2 reads per write, 8 sectors each, sequential per 3), each
/// followed by its D event, 100 µs apart; then blkparse's summary.
fn blkparse_trace() -> String {
    let mut s = String::new();
    for i in 0..300u64 {
        let t = i * 100_000;
        let rwbs = if i % 3 == 2 { "WS" } else { "R" };
        let sector = if i % 3 == 1 { (i - 1) * 64 + 8 } else { i * 64 };
        for (k, action) in ["Q", "D"].iter().enumerate() {
            s.push_str(&format!(
                "  8,0    {}  {:>7}  {}.{:09}  697  {action}  {rwbs} {sector} + 8 [fio]\n",
                i % 2,
                2 * i + k as u64 + 1,
                t / 1_000_000_000,
                t % 1_000_000_000 + k as u64 * 1000,
            ));
        }
    }
    s.push_str("\nCPU0 (8,0):\n Reads Queued:         200,      800KiB\n");
    s
}

#[test]
fn stats_of_a_blkparse_trace() {
    let dir = scratch("stats");
    let path = dir.join("sda.txt");
    std::fs::write(&path, blkparse_trace()).unwrap();
    let (ok, out, err) = run(ullstack().args(["trace", "stats", "--json"]).arg(&path));
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["format"], "blkparse");
    assert_eq!(v["requests"], 300);
    assert_eq!(v["reads"], 200);
    assert_eq!(v["read_ratio_pct"], 66.7);
    // Only Q events count: 299 gaps of 100 µs over 29.9 ms.
    assert_eq!(v["duration_ns"], 29_900_000);
    assert_eq!(v["interarrival_ns"]["max"], 100_000);
    // Each request at i % 3 == 1 starts where the one before ended.
    assert_eq!(v["sequential"], 100);
    let bucket_4k = v["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["up_to_bytes"] == 4096)
        .unwrap();
    assert_eq!(bucket_4k["requests"], 300);
    // The table names the same figures.
    let (ok, table, _) = run(ullstack().args(["trace", "stats"]).arg(&path));
    assert!(ok);
    assert!(
        table.contains("requests   300 (200 reads, 100 writes; read ratio 66.7 %)"),
        "{table}"
    );
}

#[test]
fn stats_errors_name_file_line_and_expectation_and_skipping_counts() {
    let dir = scratch("bad");
    let path = dir.join("t.csv");
    std::fs::write(
        &path,
        "0,R,0,4096\n10,R,4096,4096\n20,Q,0,4096\n30,W,0,4096\n",
    )
    .unwrap();
    let (ok, _, err) = run(ullstack().args(["trace", "stats"]).arg(&path));
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "{}:3: op `Q`: expected R, W, read or write",
            path.display()
        )),
        "{err}"
    );
    let (ok, out, err) = run(ullstack()
        .args(["trace", "stats", "--json", "--skip-bad-lines"])
        .arg(&path));
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["requests"].as_u64(), v["bad_lines_skipped"].as_u64()),
        (Some(3), Some(1))
    );
    let (ok, _, err) = run(ullstack()
        .args(["trace", "stats", "--trace-format", "iolog"])
        .arg(&path));
    assert!(
        !ok && err.contains("iolog") && err.contains("blkparse, msr, spc"),
        "{err}"
    );
    std::fs::write(&path, "hello world\n").unwrap();
    let (ok, _, err) = run(ullstack().args(["trace", "stats"]).arg(&path));
    assert!(!ok && err.contains("--trace-format"), "{err}");
}

#[test]
fn sim_replays_a_trace_at_device_level() {
    let dir = scratch("sim");
    let path = dir.join("sda.txt");
    std::fs::write(&path, blkparse_trace()).unwrap();
    let out = dir.join("results");
    let (ok, json, err) = run(ullstack()
        .args(["sim", "--device", "zssd", "--json", "--qd", "8", "--trace"])
        .arg(&path)
        .arg("--out")
        .arg(&out));
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["sim"]["trace"]["format"], "blkparse");
    assert_eq!(v["sim"]["trace"]["replayed"], 300);
    assert_eq!(v["sim"]["trace"]["pacing"], "closed-loop qd8");
    assert_eq!(v["jobs"][0]["name"], "sda");
    assert_eq!(v["jobs"][0]["read"]["ios"], 200);
    assert_eq!(v["jobs"][0]["write"]["ios"], 100);
    assert!(err.contains("300 replayed"), "{err}");
    assert!(out.join("summary.json").exists());

    // Open loop at 10x over a window: 10 ms..20 ms of trace is 100 Q events in 1 ms.
    let (ok, json, err) = run(ullstack()
        .args([
            "sim", "--device", "zssd", "--json", "--speed", "10", "--from", "10ms", "--to", "20ms",
            "--trace",
        ])
        .arg(&path)
        .arg("--out")
        .arg(&out));
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["sim"]["trace"]["replayed"], 100);
    let ns = v["sim"]["simulated_ns"].as_u64().unwrap();
    assert!((990_000..1_500_000).contains(&ns), "simulated {ns} ns");

    let (ok, _, err) = run(ullstack()
        .args([
            "sim", "--device", "zssd", "--qd", "4", "--speed", "2", "--trace",
        ])
        .arg(&path));
    assert!(!ok && err.contains("--qd"), "{err}");
    let (ok, _, err) = run(ullstack().args(["sim", "--device", "zssd", "--qd", "4"]));
    assert!(!ok && err.contains("--trace"), "{err}");
}

#[test]
fn bench_teaches_the_trace_keys_and_names_bad_values() {
    let (ok, help, _) = run(ullstack().args(["bench", "--help"]));
    assert!(ok);
    for key in [
        "trace_format",
        "trace_device",
        "from, to",
        "skip_bad_lines",
        "MAJ:MIN",
    ] {
        assert!(
            help.contains(key),
            "bench --help does not mention {key}:\n{help}"
        );
    }
    // A bad value is refused before any connection, naming the key and what was expected.
    for (tenant, needle) in [
        (
            "name=a,trace=t.csv,from=soon",
            "from: duration `soon`: expected a number with an optional unit",
        ),
        (
            "name=a,trace=t.csv,trace_device=sda",
            "trace_device=\"sda\": expected a device number",
        ),
        (
            "name=a,trace=t.csv,trace_format=iolog",
            "trace_format=\"iolog\": expected one of",
        ),
        (
            "name=a,trace=t.csv,skip_bad_lines=perhaps",
            "skip_bad_lines=\"perhaps\": expected yes or no",
        ),
        ("name=a,to=5s", "to= needs trace=FILE"),
    ] {
        let (ok, _, err) = run(ullstack().args([
            "bench",
            "--server",
            "127.0.0.1:1",
            "--no-progress",
            "--tenant",
            tenant,
        ]));
        assert!(!ok, "{tenant} was accepted");
        assert!(err.contains(needle), "{tenant}: {err}");
    }
}
