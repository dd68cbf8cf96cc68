//! Benchmark: aggregate IOPS of a latency-critical tenant as workers are added (ReFlex's
//! scaling figure: IOPS that grow with the cores given to the dataplane), `[dataplane]
//! workers` = 1 and then 2, in alternating rounds.
//!
//! The load is fio's nbd engine, 4 KiB random reads at iodepth 32 on `FIO_JOBS` connections
//! (default 4), to a memory volume (the `memory` cost profile) of an open latency-critical
//! tenant. For each run it prints the aggregate IOPS, the server's CPU (utime + stime of this
//! process's `ullstack-*` threads, `/proc/self/task`), I/Os per server-CPU-second, and the
//! connections each worker served (its `ullstack_worker_connections` gauge during the run):
//! the acceptor hands connections to the workers in turn, so with 2 workers each serves half.
//!
//! fio runs on the same machine and takes CPU of its own: on a 2-core VM the second worker
//! competes with fio's threads, so the figure shows how far IOPS grow when the client shares
//! the cores, not the dataplane's scaling on dedicated cores.
//!
//! ```text
//! cargo run --release -p server --example workers_scaling -- [SECONDS_PER_RUN] [ROUNDS] [FIO_JOBS]
//! ```
//! Skips (with the reason) when fio is missing. `ULLSTACK_IDLE=block-after-spin|spin`
//! sets the workers' idle policy.

mod common;

use common::{dataplane_from_env, fio_randread_qd32, median, server_cpu_seconds};

use std::process::Command;
use std::time::Duration;

use server::config::ServerConfig;

/// The LC tenant's reservation: above what fio reaches here, so the scheduler never holds the
/// tenant back and the figure is the dataplane's.
const LC_RESERVED_IOPS: u64 = 400_000;

fn config(workers: usize) -> ServerConfig {
    let toml = format!(
        r#"[listen]
nbd = "127.0.0.1:0"
[dataplane]
workers = {workers}
[qos]
profile = "memory"
[[volume]]
name = "default"
backend = {{ kind = "memory", size = "1GiB" }}
[[tenant]]
name = "lc"
open = true
class = "lc"
slo = {{ p95_read_latency_us = 2000, iops = {LC_RESERVED_IOPS}, read_ratio_pct = 100 }}
acl = [{{ volume = "default", access = "read-write" }}]
[[export]]
name = "default"
volume = "default"
tenant = "lc"
"#
    );
    let mut c = ServerConfig::from_toml_str(&toml).unwrap_or_else(|e| panic!("config: {e}"));
    let workers = c.dataplane.workers;
    dataplane_from_env(&mut c.dataplane);
    // The worker count is this example's variable, not the environment's.
    c.dataplane.workers = workers;
    c
}

/// fio's aggregate read IOPS and I/O count, or None if it failed.
fn fio(uri: &str, jobs: u32, seconds: u64) -> Option<(f64, u64)> {
    let read = fio_randread_qd32(uri, jobs, seconds)?;
    Some((read["iops"].as_f64()?, read["total_ios"].as_u64()?))
}

/// Open connections per worker, from the server's metrics text.
fn connections_per_worker(handle: &server::ServerHandle, workers: usize) -> Vec<u64> {
    let text = handle.shared().metrics.encode_text();
    (0..workers)
        .map(|w| {
            let name = format!("ullstack_worker_connections{{worker=\"{w}\"}}");
            text.lines()
                .find(|l| l.starts_with(&name))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .map_or(0, |v| v as u64)
        })
        .collect()
}

/// One run with `workers` workers: (IOPS, I/Os per server-CPU-second).
fn run(workers: usize, jobs: u32, seconds: u64) -> Option<(f64, f64)> {
    let handle = match server::start(config(workers)) {
        Ok(h) => h,
        Err(e) => {
            println!("server did not start: {e}");
            return None;
        }
    };
    let addr = handle.addrs.nbd?;
    let uri = format!("nbd://{addr}/default");
    fio(&uri, jobs, 1)?; // warm-up
    let cpu0 = server_cpu_seconds();
    // Sample the spread while fio's connections are open.
    let sampler = {
        let probe = std::thread::spawn(move || fio(&uri, jobs, seconds));
        std::thread::sleep(Duration::from_millis(seconds * 500));
        let spread = connections_per_worker(&handle, workers);
        (probe.join().ok()?, spread)
    };
    let ((iops, ios), spread) = (sampler.0?, sampler.1);
    let cpu = server_cpu_seconds() - cpu0;
    handle.shutdown();
    let per_cpu = ios as f64 / cpu.max(1e-9);
    println!(
        "workers {workers}: {iops:>8.0} IOPS  server CPU {cpu:>5.2} s  => {per_cpu:>8.0} I/Os per CPU-second  connections per worker {spread:?}"
    );
    Some((iops, per_cpu))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let jobs: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4);
    let have_fio = Command::new("sh")
        .args(["-c", "command -v fio >/dev/null"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_fio {
        println!("SKIP: fio is not installed (apt-get install fio)");
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "fio nbd engine, 4 KiB random read, {jobs} connection(s) of iodepth 32, LC tenant (reserved {LC_RESERVED_IOPS} IOPS) on a memory volume, {seconds} s per run, {rounds} rounds; {cores} cores"
    );
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        if let Some((iops, _)) = run(1, jobs, seconds) {
            one.push(iops);
        }
        if let Some((iops, _)) = run(2, jobs, seconds) {
            two.push(iops);
        }
    }
    if !one.is_empty() && !two.is_empty() {
        let (a, b) = (median(one), median(two));
        println!(
            "median aggregate IOPS: 1 worker {a:.0}, 2 workers {b:.0} ({:.2}x)",
            b / a.max(1e-9)
        );
    }
}
