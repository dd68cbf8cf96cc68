//! Benchmark: unloaded latency, QD 1, 4 KiB read from the memory backend, against the loopback
//! round trip of a minimal TCP echo that moves the same bytes (a 40-byte request out, a
//! 24 + 4096-byte reply back) with the same client runtime. The read runs twice: as raw frames
//! driven exactly as the echo is (what the server adds), and through the client library (what
//! its tasks and channels add on top).
//!
//! The raw reads and the echo's round trips alternate, one of each per pair (which goes first
//! alternates too), so that a change of the machine's load during the run (other processes on
//! a shared 2-core guest, a vCPU going idle) falls on both alike; what the server adds is the
//! median of the pairs' differences, printed beside the difference of the two medians.
//!
//! ```text
//! cargo run --release -p server --example qd1_latency -- [REQUESTS]
//! ```
//! Prints p50/p99 of the three, the server's added p50 (target: at most 5 µs, issue 28), and the
//! server's CPU per library read (utime + stime of this process's `ullstack-*` threads and
//! kernel io_uring threads, `iou-*`, `/proc/self/task`, over the measured reads). The dataplane
//! settings of the environment (`ULLSTACK_SOCKET_IO`, `ULLSTACK_SOCKET_RECV`, `ULLSTACK_IDLE`,
//! `ULLSTACK_RING_WAIT`, `ULLSTACK_RING_SPIN`, `ULLSTACK_RING_SQPOLL_IDLE_MS`:
//! `common::dataplane_from_env`) apply; one worker.

mod common;

use common::{dataplane_from_env, server_cpu_seconds};

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Instant;

use client::{Client, Credentials, TenantHandle};
use proto::wire::{self, HelloBody, ReplyHeader, RequestHeader, Status};
use server::config::{ByteSize, IdlePolicy, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

fn report(name: &str, mut ns: Vec<u64>) -> u64 {
    ns.sort_unstable();
    let p50 = percentile(&ns, 0.50);
    println!(
        "{name:<40} p50 {:>6.1} us  p99 {:>6.1} us  ({} samples)",
        p50 as f64 / 1000.0,
        percentile(&ns, 0.99) as f64 / 1000.0,
        ns.len()
    );
    p50
}

/// A blocking echo thread: for every 40-byte request, 4,120 bytes back.
fn echo_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind echo: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("echo addr: {e}"));
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.set_nodelay(true);
            let mut req = [0u8; 40];
            let reply = vec![7u8; 24 + 4096];
            while s.read_exact(&mut req).is_ok() {
                if s.write_all(&reply).is_err() {
                    break;
                }
            }
        }
    });
    addr
}

/// Unmeasured round trips before each series: connections, caches and the worker's loop warm.
const WARMUP: usize = 1000;

/// A connection of the own protocol driven the way the echo is: one `write_all` of the 40-byte
/// READ header, one `read_exact` of the 24-byte reply header and its 4,096 bytes, on the same
/// runtime, so that its difference from the echo is the server's alone (the client library
/// adds its tasks and channels).
struct RawReader {
    s: tokio::net::TcpStream,
    head: [u8; wire::REPLY_HEADER_BYTES],
    data: Vec<u8>,
    next_id: u64,
}

impl RawReader {
    async fn connect(native: std::net::SocketAddr) -> RawReader {
        let mut s = tokio::net::TcpStream::connect(native)
            .await
            .unwrap_or_else(|e| panic!("connect raw: {e}"));
        let _ = s.set_nodelay(true);
        let hello = HelloBody {
            tenant: "open",
            secret: &[],
            volume: "default",
        };
        let mut body = Vec::new();
        hello
            .encode_into(&mut body)
            .unwrap_or_else(|e| panic!("hello body: {e:?}"));
        let mut frame = RequestHeader::hello(1, body.len() as u32).encode().to_vec();
        frame.extend_from_slice(&body);
        s.write_all(&frame)
            .await
            .unwrap_or_else(|e| panic!("raw hello: {e}"));
        let mut head = [0u8; wire::REPLY_HEADER_BYTES];
        let hello_reply = read_reply(&mut s, &mut head).await;
        assert_eq!(hello_reply.status, Status::Ok, "raw HELLO refused");
        let mut payload = vec![0u8; hello_reply.payload_len as usize];
        s.read_exact(&mut payload)
            .await
            .unwrap_or_else(|e| panic!("raw hello reply: {e}"));
        RawReader {
            s,
            head,
            data: vec![0u8; 4096],
            next_id: 2,
        }
    }

    /// One 4 KiB read at `off`; its round trip in ns.
    async fn read(&mut self, off: u64) -> u64 {
        let request = RequestHeader::read(self.next_id, 0, off, 4096).encode();
        self.next_id += 1;
        let t = Instant::now();
        self.s
            .write_all(&request)
            .await
            .unwrap_or_else(|e| panic!("raw read: {e}"));
        let reply = read_reply(&mut self.s, &mut self.head).await;
        self.s
            .read_exact(&mut self.data)
            .await
            .unwrap_or_else(|e| panic!("raw read data: {e}"));
        let dt = t.elapsed().as_nanos() as u64;
        assert!(
            reply.status == Status::Ok && reply.payload_len == 4096,
            "raw READ answered {reply:?}"
        );
        dt
    }
}

/// One echo round trip (40 bytes out, 4,120 back); its time in ns.
async fn echo_once(s: &mut tokio::net::TcpStream, reply: &mut [u8]) -> u64 {
    let t = Instant::now();
    s.write_all(&[0u8; 40])
        .await
        .unwrap_or_else(|e| panic!("echo write: {e}"));
    s.read_exact(reply)
        .await
        .unwrap_or_else(|e| panic!("echo read: {e}"));
    t.elapsed().as_nanos() as u64
}

/// `n` pairs of one raw read and one echo round trip (after [`WARMUP`] unmeasured pairs), the
/// pair's order alternating: (raw ns, echo ns) each.
async fn paired_reads(
    native: std::net::SocketAddr,
    echo: std::net::SocketAddr,
    n: usize,
) -> Vec<(u64, u64)> {
    let mut raw = RawReader::connect(native).await;
    let mut s = tokio::net::TcpStream::connect(echo)
        .await
        .unwrap_or_else(|e| panic!("echo: {e}"));
    let _ = s.set_nodelay(true);
    let mut reply = vec![0u8; 24 + 4096];
    let mut pairs = Vec::with_capacity(n);
    for i in 0..(n + WARMUP) {
        let off = (i as u64 * 7919 % 256) * 4096;
        let (r, e) = if i % 2 == 0 {
            let r = raw.read(off).await;
            (r, echo_once(&mut s, &mut reply).await)
        } else {
            let e = echo_once(&mut s, &mut reply).await;
            (raw.read(off).await, e)
        };
        if i >= WARMUP {
            pairs.push((r, e));
        }
    }
    pairs
}

/// Reads and decodes one reply header of the own protocol.
async fn read_reply(s: &mut tokio::net::TcpStream, head: &mut [u8]) -> ReplyHeader {
    s.read_exact(head)
        .await
        .unwrap_or_else(|e| panic!("raw reply header: {e}"));
    match wire::decode_reply_header(head, 1 << 20) {
        Ok(proto::Decode::Done { frame, .. }) => frame,
        other => panic!("bad reply header: {other:?}"),
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let mut config = ServerConfig::quick_start(ByteSize(1 << 30), None, "127.0.0.1:0".parse().ok());
    dataplane_from_env(&mut config.dataplane);
    config.dataplane.workers = 1;
    let (socket_io, ring_wait, ring_spin) = (
        config.dataplane.socket_io.name(),
        config.dataplane.ring_wait.name(),
        config.dataplane.ring_spin.name(),
    );
    let idle_name = match config.dataplane.idle {
        IdlePolicy::Spin => "spin",
        IdlePolicy::BlockAfterSpin => "block-after-spin",
    };
    let server = server::start(config).unwrap_or_else(|e| panic!("server did not start: {e}"));
    let native = server
        .addrs
        .native
        .unwrap_or_else(|| unreachable!("native configured"));
    let echo = echo_server();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let (server_ns, pairs, server_cpu_s) = rt.block_on(async move {
        let creds = Credentials {
            tenant: "open".into(),
            secret: String::new(),
            volume: "default".into(),
        };
        let c = Client::connect(native, &creds)
            .await
            .unwrap_or_else(|e| panic!("connect: {e}"));
        c.write(
            TenantHandle::DEFAULT,
            0,
            &vec![1u8; 1 << 20],
            proto::wire::WriteMode::WriteBack,
        )
        .await
        .unwrap_or_else(|e| panic!("prefill: {e}"));
        let mut server_ns = Vec::with_capacity(n);
        let mut cpu0 = 0.0;
        for i in 0..(n + WARMUP) {
            if i == WARMUP {
                cpu0 = server_cpu_seconds();
            }
            let off = (i as u64 * 7919 % 256) * 4096;
            let t = Instant::now();
            let data = c
                .read(TenantHandle::DEFAULT, off, 4096)
                .await
                .unwrap_or_else(|e| panic!("read: {e}"));
            let dt = t.elapsed().as_nanos() as u64;
            assert_eq!(data.len(), 4096);
            if i >= WARMUP {
                server_ns.push(dt);
            }
        }
        let server_cpu_s = server_cpu_seconds() - cpu0;
        let pairs = paired_reads(native, echo, n).await;
        (server_ns, pairs, server_cpu_s)
    });
    println!(
        "QD1 4 KiB read, loopback, idle policy {idle_name}, socket_io {}, ring_wait {}, ring_spin {}",
        socket_io, ring_wait, ring_spin
    );
    let raw_ns: Vec<u64> = pairs.iter().map(|p| p.0).collect();
    let echo_ns: Vec<u64> = pairs.iter().map(|p| p.1).collect();
    let mut added_ns: Vec<i64> = pairs.iter().map(|&(r, e)| r as i64 - e as i64).collect();
    added_ns.sort_unstable();
    let added_p50 = added_ns[(added_ns.len() - 1) / 2];
    let echo_p50 = report("minimal TCP echo (40 B out, 4120 B back)", echo_ns);
    let raw_p50 = report("ullstack READ, frames as the echo's", raw_ns);
    let library_p50 = report("ullstack READ via client library", server_ns);
    println!(
        "server adds {:.1} us at p50 over the echo round trip (median of {} paired \
         differences; target <= 5 us); difference of the p50s {:.1} us; the client library \
         {:.1} us more",
        added_p50 as f64 / 1000.0,
        added_ns.len(),
        (raw_p50 as f64 - echo_p50 as f64) / 1000.0,
        (library_p50 as f64 - raw_p50 as f64) / 1000.0
    );
    println!(
        "server CPU: {:.2} s over {n} reads => {:.1} us per read",
        server_cpu_s,
        server_cpu_s * 1e6 / n as f64
    );
    server.shutdown();
}
