//! Does a device-level run's memory stay flat as it runs longer? Printed, not asserted.
//!
//! Two workloads on the whole 800 GB `zssd` (4 KiB, QD32, libaio, `norandommap`): random reads,
//! and random 70/30 reads and writes. Each runs at 1 M I/Os and at N M
//! (`ULLSTACK_SCALE_MIOS`, default 100), each case in a child process of its own so that its
//! peak RSS (`getrusage(RUSAGE_SELF).ru_maxrss`) is its alone. Per case it prints the wall
//! time, simulated I/Os per wall second, peak RSS, peak live heap (a counting allocator: RSS
//! above it is the allocator's slack — freed memory it keeps, fragmentation — not the run's),
//! the FTL's `mapping_table_bytes` and the units the host wrote, then the N M run's peak RSS
//! over the 1 M run's.
//!
//! What it shows: nothing in the run keeps a record per I/O (latencies go into histograms;
//! per-I/O logs only with `--log`), so random reads stay within a few MiB of the 1 M figure at
//! any length. The 70/30 run's memory follows what it wrote, and `mapping_table_bytes`, printed
//! beside the RSS, tells that growth from a leak. The host writes ~30 % of the I/Os at random
//! over 195 M LPNs: 100 M I/Os write 30 M units, 27.8 M distinct LPNs, each with a forward
//! entry (`ftl/map.rs`: at ~4,700 a region, in leaves of 64 LPNs, ~5.7 bytes each and a
//! pool that compacts itself when its free blocks pass 1/8 of its words in use) and 4 bytes
//! of reverse map in its superblock (`ftl/reverse.rs`) until GC erases it. Once the free
//! space runs out (the preset is preconditioned full, so after about its
//! over-provisioning's worth of writes, ~48 M I/Os) GC collects preconditioned superblocks;
//! what it moves costs one record per superblock (`ftl/relocation.rs`, ~1.2 KB), not an
//! entry per unit. So the 70/30 run's tables grow with the distinct units the host wrote,
//! ~11.5 bytes each (306 MiB at 100 M I/Os), and cannot stay within 2x of the 1 M run's:
//! its floor is the places of the distinct LPNs the host wrote, 4 bytes each both ways
//! (~220 MB at 100 M I/Os). The forward map's pool keeps the memory its leaves give up, so
//! the allocator's slack (RSS above the peak heap) stays near 11 MiB.
//!
//! Run: `cargo bench -p sim --bench run_scale` (`ULLSTACK_SCALE_MIOS=10` for a shorter one;
//! a filter argument, `randread` or `randrw`, runs one workload).

use std::process::Command;
use std::time::Instant;

use device::DeviceConfig;
use sim::{DeviceRun, DeviceRunConfig, HostCosts, Silent};

/// The child's case: `PATTERN:IOS`.
const CASE_ENV: &str = "ULLSTACK_SCALE_CASE";
/// Millions of I/Os of the long runs.
const MIOS_ENV: &str = "ULLSTACK_SCALE_MIOS";
const DEFAULT_MIOS: u64 = 100;
/// The short run every long one is compared with.
const BASE_IOS: u64 = 1_000_000;
const PATTERNS: [&str; 2] = ["randread", "randrw"];

/// Counts this thread's live heap bytes and their peak (`testkit::heap`): what the run holds,
/// against which the peak RSS shows the allocator's own slack (freed memory it keeps,
/// fragmentation). A case runs on the main thread.
#[global_allocator]
static GLOBAL: testkit::heap::Counting = testkit::heap::Counting;

/// Runs one case in this process and prints its figures as one line of `key=value`.
fn run_case(pattern: &str, ios: u64) {
    let job = format!(
        "[{pattern}]\nioengine=libaio\ndirect=1\nbs=4k\nrw={pattern}\nrwmixread=70\niodepth=32\n\
         norandommap\ntime_based\nruntime=1000000s\nnumber_ios={ios}\n"
    );
    let cfg = DeviceRunConfig {
        seed: 1,
        device: DeviceConfig::preset("zssd").expect("preset"),
        host: HostCosts::preset("x86-4").expect("preset"),
        host_name: "x86-4".into(),
        jobs: workload::JobFile::parse_fio(&job, pattern).expect("bench job parses"),
        job_source: pattern.into(),
        integrity: false,
    };
    let wall = Instant::now();
    let summary = DeviceRun::new(&cfg)
        .expect("valid run")
        .run(&mut Silent)
        .expect("run completes");
    let secs = wall.elapsed().as_secs_f64();
    println!(
        "wall_s={secs:.2} ios={} ios_per_s={:.0} peak_rss_kib={} peak_heap_bytes={} \
         mapping_table_bytes={} host_units={} gc_runs={}",
        summary.sim.ios,
        summary.sim.ios as f64 / secs,
        testkit::peak_rss_kib(),
        testkit::heap::peak_above(0),
        summary.device.mapping_table_bytes,
        summary.device.ftl.host_units_programmed,
        summary.device.ftl.gc_runs,
    );
}

/// Runs a case in a child process (this executable, [`CASE_ENV`] set); its figures by key.
fn spawn_case(pattern: &str, ios: u64) -> Vec<(String, String)> {
    let exe = std::env::current_exe().expect("the bench's own path");
    let out = Command::new(exe)
        .env(CASE_ENV, format!("{pattern}:{ios}"))
        .output()
        .expect("the case's child process starts");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "case {pattern}:{ios} failed: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let line = text.lines().last().unwrap_or_default();
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn get(figures: &[(String, String)], key: &str) -> f64 {
    figures
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.parse::<f64>().ok())
        .unwrap_or(0.0)
}

fn mib(bytes: f64) -> f64 {
    bytes / f64::from(1 << 20)
}

fn main() {
    if let Ok(case) = std::env::var(CASE_ENV) {
        let (pattern, ios) = case.split_once(':').expect("PATTERN:IOS");
        run_case(pattern, ios.parse().expect("an I/O count"));
        return;
    }
    let mios = std::env::var(MIOS_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&m| m > 0)
        .unwrap_or(DEFAULT_MIOS);
    // `cargo bench` passes `--bench`; a filter argument selects the patterns it names.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    for pattern in PATTERNS
        .into_iter()
        .filter(|p| filter.as_deref().is_none_or(|f| p.contains(f)))
    {
        let mut base_rss_kib = 0.0;
        for ios in [BASE_IOS, mios * 1_000_000] {
            let f = spawn_case(pattern, ios);
            let rss_kib = get(&f, "peak_rss_kib");
            let tables = get(&f, "mapping_table_bytes");
            if ios == BASE_IOS {
                base_rss_kib = rss_kib;
            }
            println!(
                "zssd {pattern} QD32, {} M I/Os: {:.1} s wall, {:.0} sim-I/Os/s, peak RSS {:.1} MiB \
                 ({:.2}x the 1 M run's), peak heap {:.1} MiB, mapping tables {:.1} MiB (RSS less \
                 tables {:.1} MiB), {:.0} units written, {:.0} GC runs",
                ios / 1_000_000,
                get(&f, "wall_s"),
                get(&f, "ios_per_s"),
                rss_kib / 1024.0,
                rss_kib / base_rss_kib.max(1.0),
                mib(get(&f, "peak_heap_bytes")),
                mib(tables),
                mib(rss_kib * 1024.0 - tables),
                get(&f, "host_units"),
                get(&f, "gc_runs"),
            );
        }
    }
}
