//! Graceful stop under a deadline (issue 28, day two): `limits.shutdown_grace_ms` bounds the
//! drain. A client that keeps a request open — a 32 MiB READ whose reply it never reads — holds
//! the drain until the grace ends, then its connection is closed and the stop reports it
//! (`Stopped::GraceExpired`, exit status 3 in `ullstack serve`); a drain with nothing stuck
//! ends at once, far inside the grace. Either way every write the server acknowledged is in
//! the volume's file afterwards. Real TCP on 127.0.0.1; every wait is bounded.

mod common;

use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, Instant};

use common::{file_backend, pattern, RawNbd, TempFile};
use proto::nbd::transmission::CommandType;
use server::{ServerHandle, Stopped};

/// The grace of the test that lets it bind.
const GRACE_MS: u64 = 1_500;
/// What the stop may take beyond the grace: joining threads, closing sockets. A broken
/// deadline (the old 10 s drain, or none) crosses it.
const STOP_SLACK: Duration = Duration::from_millis(2_000);
/// Blocks each client writes and has acknowledged before the stop.
const ACKED_BLOCKS: u64 = 32;
/// Writes pipelined as the stop begins: each is acknowledged or never answered.
const RACING_WRITES: u64 = 64;
const BLOCK: usize = 4096;
/// The READ the stuck client never takes: larger than any socket buffer pair on loopback.
const STUCK_READ_BYTES: u32 = 32 << 20;
const WAIT: Duration = Duration::from_secs(10);

fn start(image: &TempFile, grace_ms: u64) -> ServerHandle {
    let config = format!(
        r#"
[listen]
nbd = "127.0.0.1:0"

[dataplane]
workers = 2

[limits]
shutdown_grace_ms = {grace_ms}

[[volume]]
name = "vol"
backend = {}

[[tenant]]
name = "alice"
secret = "alice-secret"
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]

[[export]]
name = "default"
volume = "vol"
tenant = "alice"
"#,
        file_backend(&image.0, "64MiB")
    );
    common::start(&config)
}

/// Writes `ACKED_BLOCKS` blocks (acknowledged one by one); returns their offsets and data.
fn acked_writes(nbd: &mut RawNbd, base: u64, seed: u8) -> Vec<(u64, Vec<u8>)> {
    (0..ACKED_BLOCKS)
        .map(|i| {
            let offset = base + i * BLOCK as u64;
            let data = pattern(offset, BLOCK, seed);
            assert_eq!(nbd.write(offset, &data, false), 0, "write at {offset}");
            (offset, data)
        })
        .collect()
}

/// Pipelines `RACING_WRITES` writes; returns a thread that collects the acknowledged ones
/// until the server closes the connection.
fn racing_writes(
    mut nbd: RawNbd,
    base: u64,
    seed: u8,
) -> std::thread::JoinHandle<Vec<(u64, Vec<u8>)>> {
    let mut sent = std::collections::HashMap::new();
    for i in 0..RACING_WRITES {
        let offset = base + i * BLOCK as u64;
        let data = pattern(offset, BLOCK, seed);
        let cookie = nbd.send(CommandType::Write.to_u16(), 0, offset, BLOCK as u32, &data);
        sent.insert(cookie, (offset, data));
    }
    std::thread::spawn(move || {
        let mut acked = Vec::new();
        let mut head = [0u8; 16];
        for _ in 0..RACING_WRITES {
            if nbd.stream.read_exact(&mut head).is_err() {
                break;
            }
            let errno = u32::from_be_bytes(head[4..8].try_into().unwrap_or_default());
            let cookie = u64::from_be_bytes(head[8..16].try_into().unwrap_or_default());
            if errno == 0 {
                acked.extend(sent.remove(&cookie));
            }
        }
        acked
    })
}

/// Every acknowledged block is in the image file.
fn assert_durable(image: &TempFile, acked: &[(u64, Vec<u8>)]) {
    let mut file = std::fs::File::open(&image.0).expect("image");
    let mut block = vec![0u8; BLOCK];
    for (offset, data) in acked {
        file.seek(SeekFrom::Start(*offset)).expect("seek");
        file.read_exact(&mut block).expect("read image");
        assert!(
            block == *data,
            "the acknowledged write at {offset} is not in the file"
        );
    }
}

/// Stops the server on another thread; returns how it stopped and how long it took.
fn stop(server: ServerHandle) -> (Stopped, Duration) {
    let started = Instant::now();
    let stopper = std::thread::spawn(move || server.shutdown());
    let stopped = stopper.join().expect("shutdown thread");
    (stopped, started.elapsed())
}

#[test]
fn the_grace_binds_on_a_client_that_keeps_a_request_open() {
    let image = TempFile::new("grace-binds");
    let server = start(&image, GRACE_MS);
    let nbd = server.addrs.nbd.expect("nbd");
    let mut writer = RawNbd::connect(nbd, "default").expect("writer");
    let mut acked = acked_writes(&mut writer, 0, 1);

    // The stuck client: one READ whose reply it never takes.
    let mut reader = RawNbd::connect(nbd, "default").expect("reader");
    reader.send(CommandType::Read.to_u16(), 0, 0, STUCK_READ_BYTES, &[]);
    let reads = server.shared().tenant_metrics[0].reads.clone();
    let deadline = Instant::now() + WAIT;
    while reads.get() == 0 {
        assert!(
            Instant::now() < deadline,
            "the server did not read the 32 MiB READ"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    let racer = racing_writes(
        RawNbd::connect(nbd, "default").expect("racer"),
        ACKED_BLOCKS * BLOCK as u64,
        2,
    );
    let (stopped, took) = stop(server);
    println!("stop with a stuck reader: {stopped:?} after {took:?} (grace {GRACE_MS} ms)");
    assert_eq!(stopped, Stopped::GraceExpired { connections_cut: 1 });
    assert_eq!(stopped.exit_code(), server::server::EXIT_GRACE_EXPIRED);
    let grace = Duration::from_millis(GRACE_MS);
    assert!(took >= grace, "stopped after {took:?}, before the grace");
    assert!(
        took < grace + STOP_SLACK,
        "the grace did not bind: {took:?}"
    );

    // The stuck client's connection is gone; the racing writes acknowledged are durable.
    reader.stream.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut sink = vec![0u8; 1 << 20];
    let mut got = 0usize;
    let closed = loop {
        match reader.stream.read(&mut sink) {
            Ok(0) | Err(_) => break true,
            Ok(n) => got += n,
        }
        if got > STUCK_READ_BYTES as usize + 64 {
            break false;
        }
    };
    assert!(closed, "the stuck reader's connection was not closed");
    let raced = racer.join().expect("racer");
    println!(
        "racing writes acknowledged: {} of {RACING_WRITES}",
        raced.len()
    );
    acked.extend(raced);
    assert_durable(&image, &acked);
}

#[test]
fn a_drain_with_nothing_stuck_ends_at_once() {
    let image = TempFile::new("grace-unused");
    let server = start(&image, 30_000);
    let nbd = server.addrs.nbd.expect("nbd");
    let mut idle = RawNbd::connect(nbd, "default").expect("idle client");
    let mut acked = acked_writes(&mut idle, 0, 3);
    let racer = racing_writes(
        RawNbd::connect(nbd, "default").expect("racer"),
        ACKED_BLOCKS * BLOCK as u64,
        4,
    );
    let (stopped, took) = stop(server);
    println!("stop with nothing stuck: {stopped:?} after {took:?} (grace 30 s)");
    assert_eq!(stopped, Stopped::Drained);
    assert_eq!(stopped.exit_code(), 0);
    assert!(
        took < STOP_SLACK + Duration::from_secs(2),
        "a clean drain took {took:?}"
    );
    // Writes still in the client's socket when reading stopped are never answered (nor
    // acknowledged); every one the server read is.
    let raced = racer.join().expect("racer");
    println!(
        "racing writes acknowledged: {} of {RACING_WRITES}",
        raced.len()
    );
    acked.extend(raced);
    assert_durable(&image, &acked);
    let mut byte = [0u8; 1];
    idle.stream.set_read_timeout(Some(WAIT)).expect("timeout");
    assert!(
        matches!(idle.stream.read(&mut byte), Ok(0) | Err(_)),
        "the idle connection was closed"
    );
}
