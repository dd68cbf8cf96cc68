//! Device-level trace replay speed (not asserted; the target is >= 1 M simulated I/Os
//! per wall second on zssd at high queue depth).
//!
//! Generates a 1 M-request MQSim trace (4 KiB random reads over the 800 GB `zssd`: the same
//! load as `device_throughput`'s case (a), so the two figures compare replay with the job
//! generator) in a temporary file, then replays it through `DeviceRun::with_trace` on the x86-4 thin host:
//! (a) closed loop at QD32 and (b) open loop with the trace's times 1 µs apart (1 M IOPS
//! offered, so the replayer's in-flight cap is what holds the load back). The wall time
//! includes reading and parsing the trace. Prints simulated I/Os per wall second and peak RSS.
//!
//! Run: `cargo bench -p sim --bench trace_replay` (a filter argument selects a case).

use std::io::Write;
use std::time::Instant;

use device::DeviceConfig;
use sim::{DeviceRun, DeviceRunConfig, HostCosts, Silent, TraceSpec};
use workload::trace::Pacing;

const REQUESTS: u64 = 1_000_000;

fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// CPU time this thread has run (ns, `/proc/thread-self/schedstat`; 0 if unavailable): on a
/// shared machine a fairer figure than wall time.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let want = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let dir = std::env::temp_dir().join(format!(
        "ullstack-trace-replay-bench-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("1m.mqsim");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create trace"));
        let sectors: u64 = 800_000_000_000 / 512;
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..REQUESTS {
            // xorshift: a fixed pseudo-random walk over the device, 4 KiB aligned.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let sector = (x % (sectors / 8)) * 8;
            writeln!(f, "{} 0 {sector} 8 1", i * 1000).expect("write trace");
        }
    }
    let trace_mb = std::fs::metadata(&path).map_or(0, |m| m.len()) as f64 / 1e6;
    let cfg = DeviceRunConfig {
        seed: 1,
        device: DeviceConfig::preset("zssd").expect("preset"),
        host: HostCosts::preset("x86-4").expect("preset"),
        host_name: "x86-4".into(),
        jobs: workload::JobFile::parse_fio("[unused]\nrw=read\nsize=4k\n", "unused").expect("job"),
        job_source: path.display().to_string(),
        integrity: false,
    };
    let cases = [
        ("a-zssd-closed-qd32", Pacing::closed_loop(32).expect("qd")),
        ("b-zssd-open-1us", Pacing::open_loop(1.0).expect("speed")),
    ];
    for (label, pacing) in cases {
        if !want(label) {
            continue;
        }
        let spec = TraceSpec {
            pacing,
            ..TraceSpec::new(&path)
        };
        let wall = Instant::now();
        let cpu = cpu_ns();
        let summary = DeviceRun::with_trace(&cfg, &spec)
            .expect("valid run")
            .run(&mut Silent)
            .expect("run completes");
        let secs = wall.elapsed().as_secs_f64();
        let cpu_secs = (cpu_ns() - cpu) as f64 / 1e9;
        let t = summary.sim.trace.as_ref().expect("trace info");
        assert_eq!(t.counts.replayed, REQUESTS);
        println!(
            "{label}: {} I/Os ({trace_mb:.0} MB of trace) in {secs:.2} s wall = {:.0} simulated I/Os per second ({:.0} per CPU second); \
             {} events; simulated {:.3} s; read p99 {} ns; peak RSS {} MiB",
            summary.sim.ios,
            summary.sim.ios as f64 / secs,
            summary.sim.ios as f64 / cpu_secs,
            summary.sim.events,
            summary.sim.simulated_ns as f64 / 1e9,
            summary.jobs[0].read.latency_ns.p99,
            peak_rss_mib()
        );
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
}
