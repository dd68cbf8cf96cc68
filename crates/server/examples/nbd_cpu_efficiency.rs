//! Benchmark: I/Os served per second of server CPU time, ullstack against `nbdkit --threads 1`,
//! measured side by side in alternating rounds, in two loads:
//!
//! 1. fio's nbd engine, 4 KiB random read, iodepth 32, memory backends;
//! 2. `WRITES` pipelined 1 KiB writes on one connection (a writer thread sends them all as
//!    fast as the socket takes them, a reader thread takes the replies), memory backends and
//!    then file backends (a 1 GiB scratch file in the temp dir, buffered on both sides:
//!    ullstack `direct = "off"`, nbdkit's `file` plugin default);
//! 3. (`fileread`) fio's 4 KiB random reads at iodepth 32 from a file volume (a 1 GiB scratch
//!    file in the temp dir, filled with data first, `direct = "auto"`), ullstack against
//!    itself: plain reads (`fixed_buffers = 0`, "base") and reads into registered buffers
//!    (`fixed_buffers = ULLSTACK_FIXED_BUFFERS`, default 256, "head"), alternating base/head
//!    and head/base by round, each run on a fresh server (`ULLSTACK_FILE_READ_AB=file-io`
//!    compares instead where the file volume's I/O goes on a `socket_io = "uring"` worker,
//!    both with the head's registered buffers: base `file_io = "own-ring"`, head
//!    `file_io = "socket-ring"`); besides I/Os per server-CPU-second
//!    it prints the server threads' syscalls per I/O (`perf stat -e raw_syscalls:sys_enter
//!    -t …` over the fio run, as `native_saturation` counts them; the reason when perf is
//!    refused) and the registered and fallback reads (`ullstack_file_reads`).
//!
//! For ullstack's fio runs it also prints the requests each worker loop step took (from its
//! `ullstack_worker_batch_requests` metric): ~1.5–3 means the worker wakes per request or two,
//! and the coalescing ladder (`coalesce.rs`) is not finding batches on this machine.
//!
//! *What a sleep costs here.* Before the fio phase it measures the CPU time this machine
//! charges a thread for one sleep-and-wake (2,000 sleeps of 40 µs, the coalescing ladder's
//! first rung, with the worker's 1 ns timer slack, on a thread of their own;
//! `getrusage(RUSAGE_THREAD)`, the scheduler's run-time account that utime + stime are). After it, it counts
//! the times ullstack's threads slept (voluntary context switches) per I/O and prints what
//! those sleeps alone cost per I/O, and the ratio to nbdkit that cost alone would allow; then
//! the same for all of its system time (the sleeps and the socket calls). A server that must
//! wake for each batch of a QD32 client cannot use less CPU per I/O than (sleep cost) / (I/Os
//! per sleep) plus the kernel's TCP work, however little its own code does. Where a
//! sleep-and-wake costs tens of µs of CPU (a guest under nested virtualization) the second bound
//! can sit under the 3× target (2.10× nbdkit at 35 µs a sleep: CHANGELOG.md).
//!
//! CPU time is utime + stime from `/proc/<pid>/stat` (nbdkit) or summed over this process's
//! `ullstack-*` threads and the kernel's io_uring threads (`iou-*`: workers, and a ring's
//! submission-polling thread under `ULLSTACK_RING_SQPOLL_IDLE_MS`) from
//! `/proc/self/task/*/stat` (the ullstack server runs inside this process; fio, or the
//! pipelining client's threads, do not count). The write loads also print the whole process's
//! CPU less the client threads' own (`getrusage(RUSAGE_THREAD)`), which counts io_uring
//! workers that exited mid-run too: the two should agree, a check on the first.
//! `ULLSTACK_SCHEDULER=off` runs ullstack without
//! the token scheduler (nbdkit has no QoS; with it, a best-effort tenant's 1 KiB writes to the
//! file volume are held to the device profile's rate, ~57 K/s on `reflex-a`; the memory volume
//! of the quick start is priced with the `memory` profile, which does not pace it).
//!
//! ```text
//! cargo run --release -p server --example nbd_cpu_efficiency -- [SECONDS_PER_RUN] [ROUNDS] [WRITES]
//! ```
//! Skips (with the reason) when fio or nbdkit is missing. `ULLSTACK_IDLE_SPIN_NS=N` overrides
//! the worker's idle spin, `ULLSTACK_COALESCE_NS=N` its coalescing window (0: off, the
//! behaviour before coalescing existed), `ULLSTACK_WORKERS=N` its worker threads (default: the
//! config default, 2), `ULLSTACK_FIO_JOBS=N` fio's jobs (N connections of iodepth 32 each,
//! reported together; default 1). `ULLSTACK_SOCKET_IO=uring|epoll` the workers' socket I/O
//! (`[dataplane] socket_io`); `ULLSTACK_RING_WAIT`, `ULLSTACK_RING_SPIN` and
//! `ULLSTACK_RING_SQPOLL_IDLE_MS` its ring's wait, spin and submission polling
//! (`common::dataplane_from_env`). `ULLSTACK_IDLE=spin|block-after-spin` the idle policy
//! (`[dataplane] idle`). `ULLSTACK_FILE_IO=socket-ring|own-ring` where a uring worker's file
//! volumes put their I/O (`[dataplane] file_io`). `ULLSTACK_PHASES=fio,memory,file,fileread` (the default:
//! all four) picks the loads to run. `ULLSTACK_FILE_WRITE_COST_MTOK=N` gives the file volume's
//! server an inline profile (`reflex-a` with `write_cost_mtok = N`) instead of `reflex-a`: a
//! tenant provisioned for a page-cache-backed file, whose writes cost what a read costs
//! (1000), not a flash program (10,000).

mod common;

use common::{
    dataplane_from_env, env_number, fio_randread_qd32, median, perf_syscalls,
    stat_user_sys_seconds, thread_ids, threads_user_sys_seconds,
};

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use server::config::{ByteSize, ServerConfig};

/// Where a server's CPU time is read.
#[derive(Clone)]
enum Server {
    /// A process (nbdkit).
    Process(String),
    /// This process's threads named `ullstack-*` (the in-process server).
    OurThreads,
}

impl Server {
    fn cpu_seconds(&self) -> f64 {
        let (user, sys) = self.user_sys_seconds();
        user + sys
    }

    /// User and system CPU time so far, seconds.
    fn user_sys_seconds(&self) -> (f64, f64) {
        match self {
            Server::Process(pid) => stat_user_sys_seconds(
                &std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default(),
            ),
            // The server's threads and the io_uring workers the kernel runs for them.
            Server::OurThreads => threads_user_sys_seconds(&["ullstack-", "iou-"]),
        }
    }
}

/// This whole process's CPU time so far, seconds: its live threads and every thread that has
/// exited (`/proc/self/stat`).
fn process_cpu_seconds() -> f64 {
    let (user, sys) =
        stat_user_sys_seconds(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default());
    user + sys
}

/// Voluntary context switches (sleeps) of this process's `ullstack-*` threads.
fn our_sleeps() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("ullstack-"))
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

/// CPU time (µs) and wall time (µs) of one sleep-and-wake on this machine: `count` sleeps of
/// `sleep_ns` with 1 ns timer slack, as a pausing worker does them, on a thread of their own
/// (the slack is a thread's setting).
fn sleep_wake_cost(count: u32, sleep_ns: u64) -> Option<(f64, f64)> {
    std::thread::spawn(move || {
        server::sys::set_fine_timer_slack();
        let (cpu0, t0) = (thread_cpu_seconds()?, Instant::now());
        for _ in 0..count {
            std::thread::sleep(Duration::from_nanos(sleep_ns));
        }
        let (cpu1, wall) = (thread_cpu_seconds()?, t0.elapsed());
        Some((
            (cpu1 - cpu0) * 1e6 / f64::from(count),
            wall.as_secs_f64() * 1e6 / f64::from(count),
        ))
    })
    .join()
    .ok()?
}

/// This thread's user + system CPU time so far, seconds (`getrusage(RUSAGE_THREAD)`: the
/// scheduler's run-time account, as `/proc/*/stat`'s utime + stime are).
fn thread_cpu_seconds() -> Option<f64> {
    // SAFETY: an all-zero `rusage` is a valid value (integers and timevals).
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only into the struct it is given, which outlives the call.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Some(secs(r.ru_utime) + secs(r.ru_stime))
}

struct FioResult {
    ios: u64,
    iops: f64,
    p99_us: f64,
}

/// fio jobs (one NBD connection each) per run: `ULLSTACK_FIO_JOBS`, default 1.
fn fio_jobs() -> u32 {
    std::env::var("ULLSTACK_FIO_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

fn fio(uri: &str, seconds: u64) -> Option<FioResult> {
    let read = fio_randread_qd32(uri, fio_jobs(), seconds)?;
    Some(FioResult {
        ios: read["total_ios"].as_u64()?,
        iops: read["iops"].as_f64()?,
        p99_us: read["clat_ns"]["percentile"]["99.000000"]
            .as_f64()
            .unwrap_or(0.0)
            / 1000.0,
    })
}

/// Requests and loop steps that took requests, summed over the workers, from the server's
/// metrics text (`ullstack_worker_batch_requests` sum and count).
fn batch_totals(metrics_text: &str) -> (f64, f64) {
    let total = |name: &str| -> f64 {
        metrics_text
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (
        total("ullstack_worker_batch_requests_sum"),
        total("ullstack_worker_batch_requests_count"),
    )
}

/// One fio run's figures.
struct Measured {
    /// I/Os per server-CPU-second.
    per_cpu: f64,
    /// I/Os per sleep of the server's threads (ours only).
    per_sleep: Option<f64>,
    /// System (kernel) CPU time per I/O, µs.
    sys_us_per_io: f64,
}

/// Runs fio against `uri` and reports I/Os per CPU-second of `server`; with `ours`, also the
/// requests each worker step took (the coalescing ladder's effect: see `coalesce.rs`) and
/// the I/Os per sleep of its threads.
fn measure(
    name: &str,
    server: &Server,
    ours: Option<&server::ServerHandle>,
    uri: &str,
    seconds: u64,
) -> Option<Measured> {
    fio(uri, 1)?; // warm-up: connections, page faults, allocator
    let batches = || ours.map(|h| batch_totals(&h.shared().metrics.encode_text()));
    let before = server.user_sys_seconds();
    let batches_before = batches();
    let sleeps_before = our_sleeps();
    let r = fio(uri, seconds)?;
    let after = server.user_sys_seconds();
    let sys_us_per_io = (after.1 - before.1) * 1e6 / r.ios.max(1) as f64;
    let cpu = (after.0 + after.1) - (before.0 + before.1);
    let sleeps = our_sleeps() - sleeps_before;
    let per_sleep = (ours.is_some() && sleeps > 0).then(|| r.ios as f64 / sleeps as f64);
    let per_cpu = r.ios as f64 / cpu.max(1e-9);
    let per_step = match (batches_before, batches()) {
        (Some((r0, s0)), Some((r1, s1))) if s1 > s0 => {
            format!("  {:.1} requests per step", (r1 - r0) / (s1 - s0))
        }
        _ => String::new(),
    };
    let per_sleep_text = per_sleep
        .map(|v| format!(", {v:.1} per sleep, {sys_us_per_io:.2} us system CPU per I/O"))
        .unwrap_or_default();
    println!(
        "{name:<22} {:>9} I/Os  {:>8.0} IOPS  p99 {:>7.0} us  server CPU {:>6.2} s  => {:>8.0} I/Os per CPU-second{per_step}{per_sleep_text}",
        r.ios, r.iops, r.p99_us, cpu, per_cpu
    );
    Some(Measured {
        per_cpu,
        per_sleep,
        sys_us_per_io,
    })
}

/// A fixed-newstyle NBD handshake (NBD_OPT_GO for `export`); the stream is then in
/// transmission.
fn nbd_connect(addr: &str, export: &str) -> std::io::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting)?;
    if &greeting[..8] != b"NBDMAGIC" {
        return Err(std::io::Error::other("not an NBD server"));
    }
    s.write_all(&3u32.to_be_bytes())?; // FIXED_NEWSTYLE | NO_ZEROES
    let mut opt = Vec::new();
    opt.extend_from_slice(b"IHAVEOPT");
    opt.extend_from_slice(&7u32.to_be_bytes()); // NBD_OPT_GO
    opt.extend_from_slice(&((4 + export.len() + 2) as u32).to_be_bytes());
    opt.extend_from_slice(&(export.len() as u32).to_be_bytes());
    opt.extend_from_slice(export.as_bytes());
    opt.extend_from_slice(&0u16.to_be_bytes());
    s.write_all(&opt)?;
    loop {
        let mut head = [0u8; 20];
        s.read_exact(&mut head)?;
        let reply = u32::from_be_bytes([head[12], head[13], head[14], head[15]]);
        let len = u32::from_be_bytes([head[16], head[17], head[18], head[19]]) as usize;
        let mut data = vec![0u8; len];
        s.read_exact(&mut data)?;
        match reply {
            1 => return Ok(s), // NBD_REP_ACK
            3 => continue,     // NBD_REP_INFO
            other => return Err(std::io::Error::other(format!("GO refused: {other:#x}"))),
        }
    }
}

/// Sends `count` pipelined writes and reads their replies; returns the wall time and the CPU
/// the client's two threads spent (seconds).
fn pipelined_writes(addr: &str, export: &str, count: u64) -> Option<(Duration, f64)> {
    let stream = nbd_connect(addr, export).ok()?;
    let mut tx = stream.try_clone().ok()?;
    let mut rx = stream;
    let start = Instant::now();
    let reader_cpu0 = thread_cpu_seconds()?;
    let writer = std::thread::spawn(move || -> std::io::Result<f64> {
        let payload = [0xa5u8; 1024];
        let mut batch = Vec::with_capacity(256 * 1052);
        for i in 0..count {
            batch.extend_from_slice(&0x2560_9513u32.to_be_bytes());
            batch.extend_from_slice(&0u16.to_be_bytes());
            batch.extend_from_slice(&1u16.to_be_bytes()); // NBD_CMD_WRITE
            batch.extend_from_slice(&i.to_be_bytes());
            batch.extend_from_slice(&((i * 1024) % (1 << 30)).to_be_bytes());
            batch.extend_from_slice(&1024u32.to_be_bytes());
            batch.extend_from_slice(&payload);
            if batch.len() >= 256 * 1052 {
                tx.write_all(&batch)?;
                batch.clear();
            }
        }
        tx.write_all(&batch)?;
        Ok(thread_cpu_seconds().unwrap_or(0.0))
    });
    let mut head = [0u8; 16];
    for _ in 0..count {
        rx.read_exact(&mut head).ok()?;
        if head[4..8] != [0, 0, 0, 0] {
            return None;
        }
    }
    let elapsed = start.elapsed();
    let writer_cpu = writer.join().ok()?.ok()?;
    let client_cpu = writer_cpu + thread_cpu_seconds()? - reader_cpu0;
    // NBD_CMD_DISC.
    let mut disc = Vec::new();
    disc.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    disc.extend_from_slice(&0u16.to_be_bytes());
    disc.extend_from_slice(&2u16.to_be_bytes());
    disc.extend_from_slice(&[0u8; 20]);
    let _ = rx.write_all(&disc);
    Some((elapsed, client_cpu))
}

/// Runs the pipelined writes and reports server CPU for them.
fn measure_writes(
    name: &str,
    server: &Server,
    addr: &str,
    export: &str,
    count: u64,
) -> Option<f64> {
    pipelined_writes(addr, export, count / 10)?; // warm-up
    let before = server.cpu_seconds();
    let process_before = process_cpu_seconds();
    let sleeps_before = our_sleeps();
    let (wall, client_cpu) = pipelined_writes(addr, export, count)?;
    let cpu = server.cpu_seconds() - before;
    // Cross-check for the in-process server: the whole process's CPU less the client's
    // threads also counts io_uring workers that exited during the run.
    let whole = matches!(server, Server::OurThreads).then(|| {
        format!(
            " (process less client: {:.2} s)",
            process_cpu_seconds() - process_before - client_cpu
        )
    });
    let sleeps = our_sleeps() - sleeps_before;
    let sleeps_text = match whole {
        Some(whole) if sleeps > 0 => {
            format!(
                "{whole}, {:.1} writes per sleep",
                count as f64 / sleeps as f64
            )
        }
        _ => String::new(),
    };
    println!(
        "{name:<22} {count:>9} writes  {:>8.0} writes/s  server CPU {cpu:>6.2} s  => {:>8.0} writes per CPU-second{sleeps_text}",
        count as f64 / wall.as_secs_f64(),
        count as f64 / cpu.max(1e-9)
    );
    Some(cpu)
}

/// Starts `nbdkit --threads 1` with `plugin_args` on a free port.
/// Starts nbdkit with `plugin_args`, measures `count` pipelined writes against it, stops it.
fn measure_nbdkit_writes(name: &str, plugin_args: &[&str], count: u64) {
    if let Some((mut child, port)) = start_nbdkit(plugin_args) {
        let pid = child.id().to_string();
        let _ = measure_writes(
            name,
            &Server::Process(pid),
            &format!("127.0.0.1:{port}"),
            "",
            count,
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn start_nbdkit(plugin_args: &[&str]) -> Option<(Child, u16)> {
    let port = free_port();
    let port_s = port.to_string();
    let mut args = vec!["--threads", "1", "-f", "-p", &port_s, "-i", "127.0.0.1"];
    args.extend_from_slice(plugin_args);
    let child = Command::new("nbdkit")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // Wait (bounded) until it accepts connections.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((child, port));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
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

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let writes: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    if !have("fio") {
        println!("SKIP: fio is not installed (apt-get install fio)");
        return;
    }
    let mut config = ServerConfig::quick_start(ByteSize(1 << 30), "127.0.0.1:0".parse().ok(), None);
    // ULLSTACK_IDLE_SPIN_NS overrides the idle spin (default: the config default).
    if let Some(ns) = env_number("ULLSTACK_IDLE_SPIN_NS") {
        config.dataplane.idle_spin_ns = ns;
    }
    // ULLSTACK_SCHEDULER=off: requests in arrival order, no tokens (nbdkit has no QoS; with
    // the default "on" a best-effort tenant's 1 KiB writes are held to the profile's rate).
    let scheduler_off = std::env::var("ULLSTACK_SCHEDULER").is_ok_and(|v| v == "off");
    if scheduler_off {
        config.qos.scheduler = server::config::SchedulerMode::Off;
    }
    if let Some(ns) = env_number("ULLSTACK_COALESCE_NS") {
        config.dataplane.coalesce_ns = ns;
    }
    // ULLSTACK_SOCKET_IO, ULLSTACK_IDLE, ULLSTACK_WORKERS (common::dataplane_from_env).
    dataplane_from_env(&mut config.dataplane);
    file_io_from_env(&mut config.dataplane);
    let phases =
        std::env::var("ULLSTACK_PHASES").unwrap_or_else(|_| "fio,memory,file,fileread".into());
    let phase = |name: &str| phases.split(',').any(|p| p.trim() == name);
    println!(
        "{} workers; socket I/O {}; idle policy: {}; coalescing window {} ns; scheduler {}",
        config.dataplane.workers,
        config.dataplane.socket_io.name(),
        match config.dataplane.idle {
            server::config::IdlePolicy::Spin => "spin".to_string(),
            server::config::IdlePolicy::BlockAfterSpin => format!(
                "block after {} ns of spinning",
                config.dataplane.idle_spin_ns
            ),
        },
        config.dataplane.coalesce_ns,
        if scheduler_off { "off" } else { "on" }
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
    let nbdkit = have("nbdkit");
    if !nbdkit {
        println!("nbdkit is not installed: measuring ullstack alone (apt-get install nbdkit)");
    }
    let sleep_cost = if phase("fio") {
        sleep_wake_cost(2_000, 40_000)
    } else {
        None
    };
    if let Some((cpu_us, wall_us)) = sleep_cost {
        println!(
            "one sleep-and-wake on this machine: {cpu_us:.1} us of CPU, {wall_us:.0} us wall (2000 sleeps of 40 us, 1 ns timer slack)"
        );
    }
    println!(
        "fio nbd engine, 4 KiB random read, {} job(s) of iodepth 32, {seconds} s per run, {rounds} rounds",
        fio_jobs()
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut per_sleep, mut sys_per_io) = (Vec::new(), Vec::new());
    for _ in 0..if phase("fio") { rounds } else { 0 } {
        if let Some(v) = measure(
            "ullstack serve --memory",
            &Server::OurThreads,
            Some(&server),
            &ours_uri,
            seconds,
        ) {
            ours.push(v.per_cpu);
            per_sleep.extend(v.per_sleep);
            sys_per_io.push(v.sys_us_per_io);
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
                &Server::Process(pid),
                None,
                &format!("nbd://127.0.0.1:{port}/"),
                seconds,
            ) {
                theirs.push(v.per_cpu);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let ours_median = median(ours.clone());
    if !ours.is_empty() {
        println!("median ullstack: {ours_median:.0} I/Os per server-CPU-second");
    }
    if !theirs.is_empty() {
        let theirs_median = median(theirs);
        println!("median nbdkit:   {theirs_median:.0} I/Os per server-CPU-second");
        println!(
            "ratio ullstack / nbdkit: {:.2}x (target >= 3x)",
            ours_median / theirs_median.max(1e-9)
        );
        if let (Some((cpu_us, _)), false) = (sleep_cost, per_sleep.is_empty()) {
            // The floor sleeping alone puts under ullstack's CPU per I/O, and the ratio to
            // nbdkit it leaves room for even if everything else were free.
            let per_sleep = median(per_sleep);
            let sleep_us_per_io = cpu_us / per_sleep;
            let ours_us_per_io = 1e6 / ours_median.max(1e-9);
            let theirs_us_per_io = 1e6 / theirs_median.max(1e-9);
            let sys_us_per_io = median(sys_per_io);
            println!(
                "ullstack's sleeps: {per_sleep:.1} I/Os per sleep, so {sleep_us_per_io:.2} us of its {ours_us_per_io:.2} us of CPU per I/O ({:.0} %); nbdkit spent {theirs_us_per_io:.2} us per I/O: sleeps alone allow at most {:.2}x",
                100.0 * sleep_us_per_io / ours_us_per_io,
                theirs_us_per_io / sleep_us_per_io
            );
            // The kernel's share (sleeps, socket reads and writes) stays whatever the
            // server's own code costs.
            println!(
                "ullstack's system CPU: {sys_us_per_io:.2} us per I/O (sleeps and socket calls): with its own code free, at most {:.2}x",
                theirs_us_per_io / sys_us_per_io.max(1e-9)
            );
        }
    }
    let ours_addr = server
        .addrs
        .nbd
        .unwrap_or_else(|| unreachable!("nbd configured"))
        .to_string();
    if phase("memory") {
        println!("\n{writes} pipelined 1 KiB NBD writes on one connection, memory backends");
        let _ = measure_writes(
            "ullstack serve --memory",
            &Server::OurThreads,
            &ours_addr,
            "default",
            writes,
        );
        if nbdkit {
            measure_nbdkit_writes("nbdkit memory", &["memory", "1G"], writes);
        }
    }
    server.shutdown();
    if phase("fileread") {
        file_reads(seconds, rounds, scheduler_off);
    }
    if !phase("file") {
        return;
    }

    // File backends: a scratch file, buffered on both sides.
    let path = std::env::temp_dir().join(format!("ullstack-cpu-eff-{}.img", std::process::id()));
    println!(
        "\n{writes} pipelined 1 KiB NBD writes on one connection, file backends ({})",
        path.display()
    );
    let file_profile = match std::env::var("ULLSTACK_FILE_WRITE_COST_MTOK") {
        Ok(mtok) => {
            println!("file volume's profile: reflex-a with write_cost_mtok = {mtok}");
            format!("[qos.profile]\npreset = \"reflex-a\"\nwrite_cost_mtok = {mtok}")
        }
        Err(_) => String::new(),
    };
    let toml = file_volume_toml(
        &format!(
            "path = \"{}\", size = \"1GiB\", direct = \"off\"",
            path.display()
        ),
        scheduler_off,
        false,
        &file_profile,
    );
    let file_server = ServerConfig::from_toml_str(&toml)
        .map_err(|e| e.to_string())
        .and_then(|c| server::start(c).map_err(|e| e.to_string()));
    match file_server {
        Ok(s) => {
            let addr = s.addrs.nbd.map(|a| a.to_string()).unwrap_or_default();
            let _ = measure_writes(
                "ullstack file",
                &Server::OurThreads,
                &addr,
                "default",
                writes,
            );
            s.shutdown();
        }
        Err(e) => println!("file-backed server did not start: {e}"),
    }
    if nbdkit {
        let file_arg = path.display().to_string();
        measure_nbdkit_writes("nbdkit file", &["file", &file_arg], writes);
    }
    let _ = std::fs::remove_file(&path);
}

/// Registered buffers of the file-read phase's "head" server: `ULLSTACK_FIXED_BUFFERS`, default
/// 256 (4 KiB each: 1 MiB, more than 4 fio jobs of iodepth 32 hold at once).
const FILE_READ_FIXED_BUFFERS: u32 = 256;
/// The file-read phase's scratch file: fio's nbd engine reads the first 1 GiB of the export.
const FILE_READ_BYTES: u64 = 1 << 30;

/// The config of a server of one file volume (`backend`: the file backend's keys after `kind`)
/// exported to an open best-effort tenant, with the scheduler on unless `scheduler_off`, an
/// admin listener (for `/metrics`) if `admin`, and `extra` after the `[qos]` table's scheduler
/// line (a `[qos.profile]`, or nothing).
fn file_volume_toml(backend: &str, scheduler_off: bool, admin: bool, extra: &str) -> String {
    let admin = if admin { "admin = \"127.0.0.1:0\"" } else { "" };
    format!(
        r#"[listen]
nbd = "127.0.0.1:0"
{admin}
[qos]
scheduler = "{}"
{extra}
[[volume]]
name = "default"
backend = {{ kind = "file", {backend} }}
[[tenant]]
name = "open"
open = true
class = "be"
acl = [{{ volume = "default", access = "read-write" }}]
[[export]]
name = "default"
volume = "default"
tenant = "open"
"#,
        if scheduler_off { "off" } else { "on" },
    )
}

/// A server of one file volume on `path` (`direct = "auto"`, `fixed` registered buffers),
/// with the dataplane settings the environment gives the other phases.
fn file_read_config(path: &std::path::Path, fixed: u32, scheduler_off: bool) -> ServerConfig {
    let toml = file_volume_toml(
        &format!(
            "path = \"{}\", direct = \"auto\", fixed_buffers = {fixed}",
            path.display()
        ),
        scheduler_off,
        true,
        "",
    );
    let mut config = ServerConfig::from_toml_str(&toml).expect("the file-read config parses");
    if let Some(ns) = env_number("ULLSTACK_IDLE_SPIN_NS") {
        config.dataplane.idle_spin_ns = ns;
    }
    if let Some(ns) = env_number("ULLSTACK_COALESCE_NS") {
        config.dataplane.coalesce_ns = ns;
    }
    dataplane_from_env(&mut config.dataplane);
    file_io_from_env(&mut config.dataplane);
    config
}

/// `ULLSTACK_FILE_IO=socket-ring|own-ring`: `[dataplane] file_io`.
fn file_io_from_env(d: &mut server::config::DataplaneConfig) {
    use server::config::FileIo;
    if let Ok(v) = std::env::var("ULLSTACK_FILE_IO") {
        d.file_io = match v.as_str() {
            "socket-ring" => FileIo::SocketRing,
            "own-ring" => FileIo::OwnRing,
            _ => panic!("ULLSTACK_FILE_IO={v:?}: expected socket-ring or own-ring"),
        };
    }
}

/// Fills `path` with `bytes` of data (not zeros: every read goes to the file's blocks).
fn fill_file(path: &std::path::Path, bytes: u64) -> std::io::Result<()> {
    const CHUNK_BYTES: usize = 1 << 20;
    let mut file = std::fs::File::create(path)?;
    let mut chunk = vec![0u8; CHUNK_BYTES];
    for k in 0..bytes / CHUNK_BYTES as u64 {
        for (i, b) in chunk.iter_mut().enumerate() {
            *b = (i as u64 ^ k).wrapping_mul(0x9e37) as u8 | 1;
        }
        file.write_all(&chunk)?;
    }
    file.sync_all()
}

/// One file-read run on a fresh server: (I/Os per server-CPU-second, syscalls per I/O if
/// perf counted them).
fn file_read_run(
    name: &str,
    config: ServerConfig,
    seconds: u64,
) -> Option<(f64, Result<f64, String>)> {
    let handle = match server::start(config) {
        Ok(h) => h,
        Err(e) => {
            println!("{name}: the file-backed server did not start: {e}");
            return None;
        }
    };
    let uri = format!("nbd://{}/default", handle.addrs.nbd?);
    fio(&uri, 1)?; // warm-up: connections, the pool's buffers
    let tids = thread_ids("ullstack-");
    let perf =
        std::thread::spawn(move || perf_syscalls(&tids, seconds, &[]).map(|(total, _)| total));
    let server_threads = Server::OurThreads;
    let before = server_threads.cpu_seconds();
    let r = fio(&uri, seconds)?;
    let cpu = server_threads.cpu_seconds() - before;
    let syscalls = perf
        .join()
        .unwrap_or_else(|_| Err("perf thread panicked".into()));
    handle.shared().refresh_token_metrics();
    let text = handle.shared().metrics.encode_text();
    let reads = |buffer: &str| -> u64 {
        text.lines()
            .filter(|l| {
                l.starts_with("ullstack_file_reads_total") && l.contains(&format!("\"{buffer}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    };
    let (registered, fallback) = (reads("registered"), reads("fallback"));
    handle.shutdown();
    let per_cpu = r.ios as f64 / cpu.max(1e-9);
    let per_io = syscalls.map(|n| n as f64 / r.ios.max(1) as f64);
    let per_io_text = match &per_io {
        Ok(v) => format!("{v:.3} syscalls per I/O"),
        Err(why) => format!("syscalls not counted ({why})"),
    };
    println!(
        "{name:<22} {:>9} I/Os  {:>8.0} IOPS  p99 {:>7.0} us  server CPU {:>6.2} s  => {:>8.0} I/Os per CPU-second  {per_io_text}  (registered reads {registered}, fallbacks {fallback})",
        r.ios, r.iops, r.p99_us, cpu, per_cpu
    );
    Some((per_cpu, per_io))
}

/// The file-read phase: plain reads against reads into registered buffers (module essay, 3).
fn file_reads(seconds: u64, rounds: usize, scheduler_off: bool) {
    let fixed = env_number("ULLSTACK_FIXED_BUFFERS").unwrap_or(FILE_READ_FIXED_BUFFERS);
    // ULLSTACK_FILE_READ_AB=file-io: own ring (base) against the socket ring (head).
    let file_io_ab = std::env::var("ULLSTACK_FILE_READ_AB").is_ok_and(|v| v == "file-io");
    let path = std::env::temp_dir().join(format!("ullstack-cpu-read-{}.img", std::process::id()));
    let sides = if file_io_ab {
        format!("fixed_buffers = {fixed}, socket_io = \"uring\": base file_io = \"own-ring\", head file_io = \"socket-ring\"")
    } else {
        format!("base fixed_buffers = 0, head fixed_buffers = {fixed}")
    };
    println!(
        "\nfio nbd engine, 4 KiB random read, {} job(s) of iodepth 32, file volume ({}, direct = \"auto\"): {sides}",
        fio_jobs(),
        path.display()
    );
    if let Err(e) = fill_file(&path, FILE_READ_BYTES) {
        println!("could not fill {}: {e}", path.display());
        return;
    }
    let (mut base, mut head) = (Vec::new(), Vec::new());
    let (mut base_calls, mut head_calls) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // ABBA: neither side always runs first.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for with_fixed in order {
            let (name, count) = match (file_io_ab, with_fixed) {
                (true, true) => ("head (socket ring)", fixed),
                (true, false) => ("base (own ring)", fixed),
                (false, true) => ("head (registered)", fixed),
                (false, false) => ("base (plain)", 0),
            };
            let mut config = file_read_config(&path, count, scheduler_off);
            if file_io_ab {
                use server::config::{FileIo, SocketIo};
                config.dataplane.socket_io = SocketIo::Uring;
                config.dataplane.file_io = if with_fixed {
                    FileIo::SocketRing
                } else {
                    FileIo::OwnRing
                };
            }
            if let Some((per_cpu, calls)) = file_read_run(name, config, seconds) {
                let (ios, syscalls) = if with_fixed {
                    (&mut head, &mut head_calls)
                } else {
                    (&mut base, &mut base_calls)
                };
                ios.push(per_cpu);
                syscalls.extend(calls.ok());
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    if base.is_empty() || head.is_empty() {
        return;
    }
    let calls = |v: &Vec<f64>| {
        if v.is_empty() {
            "-".to_string()
        } else {
            format!("{:.3}", median(v.clone()))
        }
    };
    println!(
        "median base: {:.0} I/Os per server-CPU-second, {} syscalls per I/O; median head: {:.0}, {}; head / base {:.2}x",
        median(base.clone()),
        calls(&base_calls),
        median(head.clone()),
        calls(&head_calls),
        median(head) / median(base).max(1e-9)
    );
}
