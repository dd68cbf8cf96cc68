//! Benchmark: the own protocol at saturation, in I/Os per server-CPU-second and syscalls per I/O.
//!
//! Four client threads in this process each hold one own-protocol connection at queue depth
//! 32 (QD 128 in all) of 4 KiB random READs over a written region of a memory volume (256 MiB,
//! larger than the caches; `ULLSTACK_REGION_MIB` sets it, and with a few MiB the pages stay
//! cached). The volume has the `memory` cost profile and an open latency-critical tenant
//! reserved above what the load reaches, so the scheduler never holds it back and the figure
//! is the dataplane's. The
//! clients are raw and blocking: each sends as many new requests as replies it read, in one
//! `write`, so they cost little next to the server.
//!
//! Per run it prints the I/Os completed, the server's CPU (utime + stime of this process's
//! `ullstack-*` threads and its kernel io_uring threads, `iou-*` — a submission-polling
//! thread among them — from `/proc/self/task`, as `top` counts them), I/Os per
//! server-CPU-second, and the server threads' syscalls per I/O counted by
//! `perf stat -e raw_syscalls:sys_enter -t <server threads>` over the same window (with the
//! calls that make most of them); where perf is missing or refused, the syscalls are not
//! printed and the reason is.
//!
//! ```text
//! cargo run --release -p server --example native_saturation -- [SECONDS_PER_RUN] [ROUNDS]
//! ```
//! `ULLSTACK_SOCKET_IO=epoll|uring` sets `[dataplane] socket_io`, `ULLSTACK_WORKERS=N` the
//! worker count (default: the config default), `ULLSTACK_IDLE=spin|block-after-spin` the idle
//! policy, `ULLSTACK_RING_WAIT`, `ULLSTACK_RING_SPIN` and `ULLSTACK_RING_SQPOLL_IDLE_MS` the
//! uring worker's wait, spin and submission polling (`common::dataplane_from_env`). On a 2-core VM the client threads share the cores with the workers.
//! `ULLSTACK_READ_BYTES=N` (a multiple of 4096, up to 1 MiB) reads N bytes instead of 4 KiB,
//! and `ULLSTACK_SEND_ZC=off|large|N` sets `[dataplane] send_zc` (zero-copy sends of large
//! replies on the uring path): with large reads the run also prints MiB served per
//! server-CPU-second.

mod common;

use common::{
    dataplane_from_env, env_number, median, perf_syscalls, thread_ids, threads_user_sys_seconds,
    SERVER_THREAD_PREFIXES,
};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proto::wire::{HelloBody, RequestHeader, WriteMode, REPLY_HEADER_BYTES};
use server::config::ServerConfig;

const CONNECTIONS: usize = 4;
const QUEUE_DEPTH_PER_CONNECTION: usize = 32;
/// The read size unless `ULLSTACK_READ_BYTES` says otherwise.
const DEFAULT_READ_BYTES: u32 = 4096;
/// Largest `ULLSTACK_READ_BYTES`: the server's default largest request.
const MAX_READ_BYTES: u32 = 1 << 20;
/// Most bytes of replies a client reads in one call (and holds unparsed).
const CLIENT_INPUT_BYTES: usize = 16 << 20;

/// Bytes per READ: `ULLSTACK_READ_BYTES` or 4 KiB.
fn read_bytes() -> u32 {
    let n = env_number::<u32>("ULLSTACK_READ_BYTES").unwrap_or(DEFAULT_READ_BYTES);
    assert!(
        n > 0 && n.is_multiple_of(4096) && n <= MAX_READ_BYTES,
        "ULLSTACK_READ_BYTES={n}: expected a multiple of 4096 up to {MAX_READ_BYTES}"
    );
    n
}
/// The region written before the reads (distinct pages, not the volume's shared zero page),
/// unless `ULLSTACK_REGION_MIB` says otherwise: larger than the caches, as fio's 1 GiB is.
const DEFAULT_REGION_MIB: u64 = 256;

/// Bytes the reads cover: `ULLSTACK_REGION_MIB` (a small one stays in the caches) or the
/// default.
fn region_bytes() -> u64 {
    env_number::<u64>("ULLSTACK_REGION_MIB")
        .filter(|&m| m > 0)
        .unwrap_or(DEFAULT_REGION_MIB)
        << 20
}
/// Above what the load reaches here: the scheduler never holds the tenant back.
const LC_RESERVED_IOPS: u64 = 400_000;
/// Syscalls perf stat reports one by one, besides the total.
const NAMED_SYSCALLS: [&str; 9] = [
    "read",
    "writev",
    "epoll_pwait2",
    "epoll_ctl",
    "clock_nanosleep",
    "io_uring_enter",
    "futex",
    "recvfrom",
    "sendmsg",
];

fn config() -> ServerConfig {
    let toml = format!(
        r#"[listen]
native = "127.0.0.1:0"
[qos]
profile = "memory"
[[volume]]
name = "vol"
backend = {{ kind = "memory", size = "1GiB" }}
[[tenant]]
name = "lc"
open = true
class = "lc"
slo = {{ p95_read_latency_us = 2000, iops = {LC_RESERVED_IOPS}, read_ratio_pct = 100 }}
acl = [{{ volume = "vol", access = "read-write" }}]
"#
    );
    let mut c = ServerConfig::from_toml_str(&toml).unwrap_or_else(|e| panic!("config: {e}"));
    dataplane_from_env(&mut c.dataplane);
    if let Ok(v) = std::env::var("ULLSTACK_SEND_ZC") {
        use server::config::SendZcSetting;
        c.dataplane.send_zc = match v.as_str() {
            "off" => SendZcSetting::Off,
            "large" => SendZcSetting::Large,
            n => SendZcSetting::MinBytes(n.parse().unwrap_or_else(|_| {
                panic!("ULLSTACK_SEND_ZC={v:?}: expected off, large or a byte count")
            })),
        };
    }
    c
}

/// A blocking own-protocol connection after HELLO.
fn connect(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect: {e}"));
    s.set_nodelay(true).expect("nodelay");
    let mut body = Vec::new();
    HelloBody {
        tenant: "lc",
        secret: b"any",
        volume: "vol",
    }
    .encode_into(&mut body)
    .expect("hello body");
    s.write_all(&RequestHeader::hello(1, body.len() as u32).encode())
        .expect("hello");
    s.write_all(&body).expect("hello body");
    let status = read_reply(&mut s);
    assert_eq!(status, proto::wire::Status::Ok, "HELLO refused");
    s
}

/// Reads one reply; its status (the payload is read and dropped).
fn read_reply(s: &mut TcpStream) -> proto::wire::Status {
    let mut head = [0u8; REPLY_HEADER_BYTES];
    s.read_exact(&mut head).expect("reply header");
    let header = match proto::wire::decode_reply_header(&head, u32::MAX) {
        Ok(proto::Decode::Done { frame, .. }) => frame,
        other => panic!("reply header: {other:?}"),
    };
    let mut payload = vec![0u8; header.payload_len as usize];
    s.read_exact(&mut payload).expect("reply payload");
    header.status
}

/// Writes the region the reads cover, 1 MiB at a time.
fn fill(addr: SocketAddr) {
    let mut s = connect(addr);
    let chunk = vec![0x5au8; 1 << 20];
    for (k, offset) in (0..region_bytes()).step_by(chunk.len()).enumerate() {
        let header = RequestHeader::write(
            k as u64 + 2,
            0,
            offset,
            chunk.len() as u32,
            WriteMode::WriteBack,
        );
        s.write_all(&header.encode()).expect("write");
        s.write_all(&chunk).expect("write payload");
        assert_eq!(read_reply(&mut s), proto::wire::Status::Ok, "WRITE failed");
    }
}

/// A xorshift stream (state, slots, read bytes) of read-aligned offsets within the region.
struct Offsets(u64, u64, u64);

impl Offsets {
    fn new(seed: u64) -> Offsets {
        let len = u64::from(read_bytes());
        Offsets(seed | 1, region_bytes() / len, len)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % self.1) * self.2
    }
}

/// One connection's closed loop at [`QUEUE_DEPTH_PER_CONNECTION`] until `stop`; adds the reads
/// completed while `counting` to `ios`.
fn client(addr: SocketAddr, seed: u64, stop: &AtomicBool, counting: &AtomicBool, ios: &AtomicU64) {
    let mut s = connect(addr);
    let mut offsets = Offsets::new(seed);
    let read_len = read_bytes();
    let mut cookie = 100u64;
    let mut out = Vec::with_capacity(QUEUE_DEPTH_PER_CONNECTION * 40);
    let mut send = |s: &mut TcpStream, n: usize| {
        out.clear();
        for _ in 0..n {
            cookie += 1;
            out.extend_from_slice(
                &RequestHeader::read(cookie, 0, offsets.next(), read_len).encode(),
            );
        }
        s.write_all(&out).expect("requests");
    };
    send(&mut s, QUEUE_DEPTH_PER_CONNECTION);
    let mut outstanding = QUEUE_DEPTH_PER_CONNECTION;
    let frame = REPLY_HEADER_BYTES + read_len as usize;
    let mut input = vec![0u8; frame * (CLIENT_INPUT_BYTES / frame).clamp(2, 64)];
    let (mut lo, mut hi) = (0usize, 0usize);
    while outstanding > 0 {
        let n = s.read(&mut input[hi..]).expect("replies");
        assert!(n > 0, "server closed the connection");
        hi += n;
        let mut done = 0;
        while hi - lo >= frame {
            let header = match proto::wire::decode_reply_header(&input[lo..hi], u32::MAX) {
                Ok(proto::Decode::Done { frame, .. }) => frame,
                other => panic!("reply header: {other:?}"),
            };
            assert_eq!(header.status, proto::wire::Status::Ok, "READ failed");
            assert_eq!(header.payload_len, read_len);
            lo += frame;
            done += 1;
        }
        input.copy_within(lo..hi, 0);
        (hi, lo) = (hi - lo, 0);
        outstanding -= done;
        if counting.load(Ordering::Relaxed) {
            ios.fetch_add(done as u64, Ordering::Relaxed);
        }
        if done > 0 && !stop.load(Ordering::Relaxed) {
            send(&mut s, done);
            outstanding += done;
        }
    }
}

/// One run: (I/Os per server-CPU-second, syscalls per I/O if counted).
fn run(seconds: u64) -> Option<(f64, Option<f64>)> {
    let handle = match server::start(config()) {
        Ok(h) => h,
        Err(e) => {
            println!("server did not start: {e}");
            return None;
        }
    };
    let addr = handle.addrs.native?;
    fill(addr);
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let ios = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|k| {
            let (stop, counting, ios) = (stop.clone(), counting.clone(), ios.clone());
            std::thread::spawn(move || {
                client(
                    addr,
                    0x9e37_79b9_7f4a_7c15 * (k as u64 + 1),
                    &stop,
                    &counting,
                    &ios,
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500)); // warm-up
    let tids = thread_ids("ullstack-");
    let (user0, sys0) = threads_user_sys_seconds(&SERVER_THREAD_PREFIXES);
    counting.store(true, Ordering::Relaxed);
    // The window is perf's run, which a loaded machine stretches past `seconds`: IOPS and the
    // core share are over the window as it was.
    let window = std::time::Instant::now();
    let syscalls = perf_syscalls(&tids, seconds, &NAMED_SYSCALLS);
    // Without perf the window still lasts `seconds`.
    let asked = Duration::from_secs(seconds);
    if let Some(rest) = asked.checked_sub(window.elapsed()) {
        std::thread::sleep(rest);
    }
    counting.store(false, Ordering::Relaxed);
    let window_s = window.elapsed().as_secs_f64().max(1e-9);
    let (user1, sys1) = threads_user_sys_seconds(&SERVER_THREAD_PREFIXES);
    let (user, cpu) = (user1 - user0, user1 + sys1 - user0 - sys0);
    let n = ios.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().ok()?;
    }
    handle.shutdown();
    let per_cpu = n as f64 / cpu.max(1e-9);
    let per_io = syscalls
        .as_ref()
        .ok()
        .map(|(t, _)| *t as f64 / n.max(1) as f64);
    print!(
        "{:>9.0} IOPS  server CPU {cpu:>5.2} s ({:>3.0} % of a core, {:.0} % user) => {per_cpu:>8.0} I/Os per server-CPU-second",
        n as f64 / window_s,
        cpu / window_s * 100.0,
        user / cpu.max(1e-9) * 100.0
    );
    if read_bytes() != DEFAULT_READ_BYTES {
        print!(
            " ({:.0} MiB per server-CPU-second)",
            per_cpu * f64::from(read_bytes()) / f64::from(1u32 << 20)
        );
    }
    match &syscalls {
        Ok((total, named)) => {
            print!("  syscalls/IO {:.3} (", *total as f64 / n.max(1) as f64);
            let shown: Vec<String> = named
                .iter()
                .filter(|(_, c)| *c > 0)
                .map(|(name, c)| format!("{name} {:.3}", *c as f64 / n.max(1) as f64))
                .collect();
            println!("{})", shown.join(", "));
        }
        Err(why) => println!("  syscalls not counted: {why}"),
    }
    Some((per_cpu, per_io))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let c = config();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "own protocol, {} KiB random READ, {CONNECTIONS} connections x QD {QUEUE_DEPTH_PER_CONNECTION}, memory volume ({} MiB written), {} worker(s), socket_io {}, send_zc {}, {seconds} s per run, {rounds} rounds; {cores} cores",
        read_bytes() >> 10,
        region_bytes() >> 20,
        c.dataplane.workers,
        c.dataplane.socket_io.name(),
        c.dataplane.send_zc.name()
    );
    let (mut per_cpu, mut per_io) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        if let Some((c, s)) = run(seconds) {
            per_cpu.push(c);
            per_io.extend(s);
        }
    }
    if !per_cpu.is_empty() {
        print!("median: {:.0} I/Os per server-CPU-second", median(per_cpu));
        if !per_io.is_empty() {
            print!(", {:.3} syscalls per I/O", median(per_io));
        }
        println!();
    }
}
