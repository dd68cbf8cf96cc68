//! Reads of a file volume into registered buffers (`backend/file.rs`, *Registered buffers*)
//! through real NBD connections on 127.0.0.1: clients pipelining reads over several
//! connections at once get each read's own bytes, whether the read took a registered buffer or
//! found them all in flight and went in plain (the test gives the volume fewer buffers than the
//! clients keep reads in flight, so both paths run, and `ullstack_file_reads` counts both);
//! data written through the server reads back the same through a server whose volume has no
//! registered buffers.
//!
//! Honours `ULLSTACK_TEST_SOCKET_IO` / `ULLSTACK_TEST_SOCKET_RECV` (`common::start`).

mod common;

use std::io::{Read, Write};

use common::{pattern, scrape, start, RawNbd, TempFile};
use proto::nbd::transmission::CommandType;

/// Connections reading at once, and the reads each keeps in flight.
const CONNECTIONS: usize = 4;
const DEPTH: usize = 32;
/// Registered buffers of the volume: fewer than the reads in flight, so some fall back.
const FIXED_BUFFERS: u32 = 8;
/// The region the clients write and read.
const REGION_BYTES: u64 = 8 << 20;

fn config(path: &std::path::Path, fixed: u32) -> String {
    format!(
        r#"
[listen]
nbd = "127.0.0.1:0"
admin = "127.0.0.1:0"
[dataplane]
workers = 2
[qos]
scheduler = "off"
[[volume]]
name = "vol"
backend = {{ kind = "file", path = "{}", size = "16MiB", fixed_buffers = {fixed} }}
[[tenant]]
name = "open"
open = true
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]
[[export]]
name = "default"
volume = "vol"
tenant = "open"
"#,
        path.display()
    )
}

/// The reads connection `c` makes in round `r`: `(offset, len)`, 4 KiB ones at 4 KiB
/// offsets (direct where the file system allows), 1 KiB ones at 512 B offsets (buffered) and
/// 8 KiB ones (larger than a registered buffer: always plain).
fn reads(c: usize, r: usize) -> Vec<(u64, u32)> {
    (0..DEPTH)
        .map(|k| {
            let n = (c * 7919 + r * 104_729 + k * 31) as u64;
            match k % 4 {
                0 | 1 => ((n % (REGION_BYTES / 4096)) * 4096, 4096),
                2 => ((n % (REGION_BYTES / 512 - 2)) * 512, 1024),
                _ => ((n % (REGION_BYTES / 8192)) * 8192, 8192),
            }
        })
        .collect()
}

/// Bytes written per NBD WRITE when the region is filled.
const CHUNK_BYTES: u64 = 64 << 10;

/// What the region holds once filled: each chunk the pattern of its offset.
fn region_image() -> Vec<u8> {
    (0..REGION_BYTES)
        .step_by(CHUNK_BYTES as usize)
        .flat_map(|at| pattern(at, CHUNK_BYTES as usize, 3))
        .collect()
}

/// Sends `reads` back to back on `nbd`, then takes their replies and checks each against
/// `image` (replies come in any order; the cookie says which read).
fn pipelined_reads(nbd: &mut RawNbd, reads: &[(u64, u32)], image: &[u8]) {
    let mut frames = Vec::new();
    let mut by_cookie = std::collections::HashMap::new();
    for (k, &(offset, len)) in reads.iter().enumerate() {
        let cookie = 1_000 + k as u64;
        frames.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
        frames.extend_from_slice(&0u16.to_be_bytes());
        frames.extend_from_slice(&CommandType::Read.to_u16().to_be_bytes());
        frames.extend_from_slice(&cookie.to_be_bytes());
        frames.extend_from_slice(&offset.to_be_bytes());
        frames.extend_from_slice(&len.to_be_bytes());
        by_cookie.insert(cookie, (offset, len));
    }
    nbd.stream.write_all(&frames).expect("send reads");
    for _ in 0..reads.len() {
        let (err, cookie) = nbd.recv_head();
        assert_eq!(err, 0, "read {cookie} failed");
        let (offset, len) = by_cookie.remove(&cookie).expect("a reply per read, once");
        let mut data = vec![0u8; len as usize];
        nbd.stream.read_exact(&mut data).expect("read payload");
        let want = &image[offset as usize..offset as usize + len as usize];
        assert!(data == want, "read of {len} at {offset}: wrong bytes");
    }
}

/// The value of `ullstack_file_reads_total{buffer=…}` summed over volumes.
fn file_reads(text: &str, buffer: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with("ullstack_file_reads_total") && l.contains(buffer))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Writes [`region_image`] over the region through `addr`, a chunk at a time.
fn fill(addr: std::net::SocketAddr) {
    let mut nbd = RawNbd::connect(addr, "default").expect("connect");
    for at in (0..REGION_BYTES).step_by(CHUNK_BYTES as usize) {
        assert_eq!(
            nbd.write(at, &pattern(at, CHUNK_BYTES as usize, 3), false),
            0
        );
    }
    assert_eq!(nbd.flush(), 0);
    nbd.disconnect();
}

#[test]
fn pipelined_reads_over_registered_and_plain_buffers_return_their_bytes() {
    let image = std::sync::Arc::new(region_image());
    let file = TempFile::new("fixed-reads");
    let server = start(&config(&file.0, FIXED_BUFFERS));
    let addr = server.addrs.nbd.expect("nbd");
    let admin = server.addrs.admin.expect("admin");
    fill(addr);
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let image = image.clone();
            std::thread::spawn(move || {
                let mut nbd = RawNbd::connect(addr, "default").expect("connect");
                for r in 0..8 {
                    pipelined_reads(&mut nbd, &reads(c, r), &image);
                }
                nbd.disconnect();
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a reader failed");
    }
    let text = scrape(admin);
    let (registered, fallback) = (
        file_reads(&text, "registered"),
        file_reads(&text, "fallback"),
    );
    let small_reads = (CONNECTIONS * 8 * DEPTH * 3 / 4) as u64;
    assert_eq!(
        registered + fallback,
        small_reads,
        "every read of 4 KiB or less counted once\n{text}"
    );
    assert!(
        registered > 0 && fallback > 0,
        "{registered} registered, {fallback} fallback: both paths should run"
    );
    server.shutdown();

    // The same file through a server without registered buffers: the same bytes.
    let plain = start(&config(&file.0, 0));
    let mut nbd = RawNbd::connect(plain.addrs.nbd.expect("nbd"), "default").expect("connect");
    pipelined_reads(&mut nbd, &reads(0, 0), &image);
    let text = scrape(plain.addrs.admin.expect("admin"));
    assert_eq!(
        file_reads(&text, "registered") + file_reads(&text, "fallback"),
        0
    );
    nbd.disconnect();
    plain.shutdown();
}

/// `fixed_buffers` beyond what a ring registers is refused, naming the key.
#[test]
fn too_many_registered_buffers_are_refused_naming_the_key() {
    let file = TempFile::new("fixed-reads-bound");
    let err = server::config::ServerConfig::from_toml_str(&config(&file.0, 1 << 20))
        .expect_err("2^20 registered buffers");
    assert!(
        err.to_string().contains("fixed_buffers"),
        "the error names the key: {err}"
    );
    assert!(server::config::ServerConfig::from_toml_str(&config(&file.0, 1 << 14)).is_ok());
}
