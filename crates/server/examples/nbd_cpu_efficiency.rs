//! Benchmark: I/Os served per second of server CPU time, `ullstack serve --memory` against
//! `nbdkit --threads 1 memory`, under the same fio job (nbd engine, 4 KiB random read,
//! iodepth 32), measured side by side in alternating rounds.
//!
//! CPU time is utime + stime from `/proc/<pid>/stat` before and after each fio run (the
//! ullstack server runs inside this process, whose main thread only waits for fio).
//!
//! ```text
//! cargo run --release -p server --example nbd_cpu_efficiency -- [SECONDS_PER_RUN] [ROUNDS]
//! ```
//! Skips (with the reason) when fio or nbdkit is missing. `ULLSTACK_IDLE_SPIN_NS=N` overrides
//! the worker's idle spin, `ULLSTACK_COALESCE_NS=N` its coalescing window (0: off, the
//! behaviour before coalescing existed).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use server::config::{ByteSize, ServerConfig};

fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of a process, seconds.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the ")" of the command name; utime and stime are fields 14 and 15.
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let stime: f64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (utime + stime) / clock_ticks_per_sec()
}

struct FioResult {
    ios: u64,
    iops: f64,
    p99_us: f64,
}

fn fio(uri: &str, seconds: u64) -> Option<FioResult> {
    let out = Command::new("fio")
        .args([
            "--name=randread",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randread",
            "--bs=4k",
            "--iodepth=32",
            "--size=1g",
            "--time_based",
            &format!("--runtime={seconds}"),
            "--output-format=json",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(&text[text.find('{')?..]).ok()?;
    let read = &json["jobs"][0]["read"];
    Some(FioResult {
        ios: read["total_ios"].as_u64()?,
        iops: read["iops"].as_f64()?,
        p99_us: read["clat_ns"]["percentile"]["99.000000"]
            .as_f64()
            .unwrap_or(0.0)
            / 1000.0,
    })
}

/// Runs fio against `uri` and reports I/Os per CPU-second of process `pid`.
fn measure(name: &str, pid: &str, uri: &str, seconds: u64) -> Option<f64> {
    fio(uri, 1)?; // warm-up: connections, page faults, allocator
    let before = cpu_seconds(pid);
    let r = fio(uri, seconds)?;
    let cpu = cpu_seconds(pid) - before;
    let per_cpu = r.ios as f64 / cpu.max(1e-9);
    println!(
        "{name:<22} {:>9} I/Os  {:>8.0} IOPS  p99 {:>7.0} us  server CPU {:>6.2} s  => {:>8.0} I/Os per CPU-second",
        r.ios, r.iops, r.p99_us, cpu, per_cpu
    );
    Some(per_cpu)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(10900)
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool} >/dev/null"))
        .status()
        .is_ok_and(|s| s.success())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    if !have("fio") {
        println!("SKIP: fio is not installed (apt-get install fio)");
        return;
    }
    let mut config = ServerConfig::quick_start(ByteSize(1 << 30), "127.0.0.1:0".parse().ok(), None);
    // ULLSTACK_IDLE_SPIN_NS overrides the idle spin (default: the config default).
    if let Some(ns) = std::env::var("ULLSTACK_IDLE_SPIN_NS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.dataplane.idle_spin_ns = ns;
    }
    if let Some(ns) = std::env::var("ULLSTACK_COALESCE_NS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.dataplane.coalesce_ns = ns;
    }
    println!(
        "idle policy: block after {} ns of spinning; coalescing window {} ns",
        config.dataplane.idle_spin_ns, config.dataplane.coalesce_ns
    );
    let server = match server::start(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("server did not start: {e}");
            std::process::exit(1);
        }
    };
    let ours_uri = format!(
        "nbd://{}/default",
        server
            .addrs
            .nbd
            .unwrap_or_else(|| unreachable!("nbd configured"))
    );
    let self_pid = std::process::id().to_string();
    let nbdkit = have("nbdkit");
    if !nbdkit {
        println!("nbdkit is not installed: measuring ullstack alone (apt-get install nbdkit)");
    }
    println!("fio nbd engine, 4 KiB random read, iodepth 32, {seconds} s per run, {rounds} rounds");
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        if let Some(v) = measure("ullstack serve --memory", &self_pid, &ours_uri, seconds) {
            ours.push(v);
        }
        if nbdkit {
            let port = free_port();
            let child: Option<Child> = Command::new("nbdkit")
                .args([
                    "--threads",
                    "1",
                    "-f",
                    "-p",
                    &port.to_string(),
                    "-i",
                    "127.0.0.1",
                    "memory",
                    "1G",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok();
            let Some(mut child) = child else {
                println!("nbdkit did not start");
                continue;
            };
            std::thread::sleep(Duration::from_millis(300));
            let pid = child.id().to_string();
            if let Some(v) = measure(
                "nbdkit --threads 1",
                &pid,
                &format!("nbd://127.0.0.1:{port}/"),
                seconds,
            ) {
                theirs.push(v);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let ours_median = median(ours);
    println!("median ullstack: {ours_median:.0} I/Os per server-CPU-second");
    if !theirs.is_empty() {
        let theirs_median = median(theirs);
        println!("median nbdkit:   {theirs_median:.0} I/Os per server-CPU-second");
        println!(
            "ratio ullstack / nbdkit: {:.2}x (target >= 2x)",
            ours_median / theirs_median.max(1e-9)
        );
    }
    server.shutdown();
}
