//! Pipelined NBD writes to a buffered file through a throttled best-effort tenant: the path
//! that write runs and deferred throttled rounds serve (`backend/file.rs` *Write runs*,
//! `worker.rs` *Throttled rounds*). The writes land intact, in spite of runs, retries and
//! rounds that completions no longer start; the worker did defer rounds, and merged writes.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use proto::nbd::transmission::CommandType;

/// Sum of a per-worker counter over every worker's sample line.
fn sum_metric(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[test]
fn throttled_pipelined_writes_to_a_buffered_file_land_intact() {
    const WRITES: u64 = 6_000;
    const LEN: usize = 1024;
    let file = common::TempFile::new("write-runs");
    let backend = format!(
        "{{ kind = \"file\", path = \"{}\", size = \"16MiB\", direct = \"off\" }}",
        file.0.display()
    );
    // `standard_config`'s profile prices a 1 KiB write at 10 tokens: the best-effort tenant
    // `alice` is held to ~57 K writes/s, so the worker runs throttled rounds.
    let server = common::start(&common::standard_config(&backend, "on"));
    let nbd_addr = server.addrs.nbd.expect("nbd listener");
    let admin = server.addrs.admin.expect("admin listener");
    let mut nbd = common::RawNbd::connect(nbd_addr, "default").expect("connect");
    let mut tx = nbd.stream.try_clone().expect("clone");
    // Sequential writes, but every 16th goes 8 MiB further on (a gap no run may bridge), and
    // every 50th is FUA (a run never mixes FUA and plain writes).
    let place = |i: u64| -> u64 {
        if i % 16 == 15 {
            (8 << 20) + i * LEN as u64
        } else {
            i * LEN as u64
        }
    };
    let writer = std::thread::spawn(move || {
        let mut frame = Vec::with_capacity(64 * (28 + LEN));
        for i in 0..WRITES {
            let offset = place(i);
            frame.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
            frame.extend_from_slice(&u16::from(i % 50 == 49).to_be_bytes());
            frame.extend_from_slice(&CommandType::Write.to_u16().to_be_bytes());
            frame.extend_from_slice(&(1000 + i).to_be_bytes());
            frame.extend_from_slice(&offset.to_be_bytes());
            frame.extend_from_slice(&(LEN as u32).to_be_bytes());
            frame.extend_from_slice(&common::pattern(offset, LEN, 3));
            if frame.len() >= 64 * (28 + LEN) {
                tx.write_all(&frame).expect("send writes");
                frame.clear();
            }
        }
        tx.write_all(&frame).expect("send writes");
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = vec![false; WRITES as usize];
    for _ in 0..WRITES {
        assert!(Instant::now() < deadline, "replies took over 30 s");
        let (err, cookie) = nbd.recv_head();
        assert_eq!(err, 0, "write {cookie} failed");
        let i = (cookie - 1000) as usize;
        assert!(!seen[i], "write {i} answered twice");
        seen[i] = true;
    }
    writer.join().expect("writer");
    for i in 0..WRITES {
        let offset = place(i);
        let got = nbd.read(offset, LEN as u32).expect("read back");
        assert_eq!(
            got,
            common::pattern(offset, LEN, 3),
            "write {i} at {offset}"
        );
    }
    let text = common::scrape(admin);
    let deferred = sum_metric(&text, "ullstack_worker_rounds_deferred");
    assert!(
        deferred > 0,
        "a throttled worker woken by completions deferred no round:\n{text}"
    );
    nbd.disconnect();
}
