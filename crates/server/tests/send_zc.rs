//! `[dataplane] send_zc`: large replies sent zero-copy (`SENDMSG_ZC`) on the io_uring socket
//! path arrive byte for byte, pipelined many at once, from the memory backend (page views)
//! and the file backend (one buffer per reply); a client that leaves with replies queued and
//! zero-copy sends outstanding leaves the server healthy for the next one; the workers count
//! the zero-copy sends and, over loopback, that the kernel copied them after all. Where the
//! kernel refuses io_uring or `SENDMSG_ZC` the test says so and skips (a failure under
//! `ULLSTACK_REQUIRE_TOOLS`).

mod common;

use std::collections::HashMap;
use std::io::Read;
use std::net::TcpStream;

use common::*;
use proto::nbd::transmission::CommandType;
use server::config::{SendZcSetting, ServerConfig, SocketIo};

/// Reads of 128 KiB: each reply's 32 page views or one buffer, well over the 16 KiB
/// threshold.
const READ_BYTES: u32 = 128 << 10;
/// Reads in flight at once: more than a socket buffer holds, so sends complete in part and
/// several zero-copy sends of one connection await their notifications together.
const PIPELINED_READS: usize = 48;

fn start(backend: &str, send_zc: SendZcSetting) -> server::ServerHandle {
    let text = standard_config(backend, "on");
    let mut config = ServerConfig::from_toml_str(&text).expect("config");
    config.dataplane.socket_io = SocketIo::Uring;
    config.dataplane.send_zc = send_zc;
    server::start(config).expect("server starts")
}

/// Whether this kernel gives the socket path a ring that sends zero-copy; prints why not.
fn zero_copy_available(test: &str) -> bool {
    let mut ring = match server::sockring::SockRing::new(Default::default()) {
        Ok(ring) => ring,
        Err(e) => {
            testkit::skip(test, &format!("io_uring is refused here ({e})"));
            return false;
        }
    };
    let zc = server::sockring::SendZc { min_bytes: 1 };
    if let Err(e) = ring.enable_send_zc(zc) {
        testkit::skip(test, &format!("SENDMSG_ZC is refused here ({e})"));
        return false;
    }
    true
}

/// Orphans the workers hold (closed connections' frames awaiting notifications).
fn orphans(server: &server::ServerHandle) -> i64 {
    let m = &server.shared().metrics;
    let workers = server.shared().config.dataplane.workers;
    (0..workers)
        .map(|w| m.worker(w).zerocopy_orphans.get())
        .sum()
}

/// (zero-copy sends, of which the kernel copied) summed over the workers.
fn zc_counters(server: &server::ServerHandle) -> (u64, u64) {
    let m = &server.shared().metrics;
    let workers = server.shared().config.dataplane.workers;
    (0..workers).fold((0, 0), |(sends, copied), w| {
        let wm = m.worker(w);
        (
            sends + wm.zerocopy_sends.get(),
            copied + wm.zerocopy_copied.get(),
        )
    })
}

/// Writes `pattern(offset, READ_BYTES, seed)` at every read offset the test uses.
fn fill(nbd: &mut RawNbd, offsets: &[u64], seed: u8) {
    for &off in offsets {
        assert_eq!(
            nbd.write(off, &pattern(off, READ_BYTES as usize, seed), false),
            0
        );
    }
}

/// Sends every read at once, then takes the replies in whatever order they come and checks
/// each byte for byte.
fn pipelined_reads(nbd: &mut RawNbd, offsets: &[u64], seed: u8) {
    let mut want: HashMap<u64, u64> = HashMap::new();
    for &off in offsets {
        let cookie = nbd.send(CommandType::Read.to_u16(), 0, off, READ_BYTES, &[]);
        want.insert(cookie, off);
    }
    let mut data = vec![0u8; READ_BYTES as usize];
    for _ in offsets {
        let (err, cookie) = nbd.recv_head();
        assert_eq!(err, 0, "read failed");
        let off = want.remove(&cookie).expect("a reply to a read sent, once");
        nbd.stream.read_exact(&mut data).expect("read payload");
        assert!(
            data == pattern(off, READ_BYTES as usize, seed),
            "the read at {off} differs"
        );
    }
    assert!(want.is_empty());
}

fn offsets() -> Vec<u64> {
    (0..PIPELINED_READS as u64)
        .map(|k| k * u64::from(READ_BYTES) * 3)
        .collect()
}

/// Reads every size class the path sees (below the threshold, at it, 1 MiB) and pipelined
/// 128 KiB reads, checked byte for byte; the counters show zero-copy sends, all copied over
/// loopback; then a client leaves with 1 MiB replies queued and the next client is served.
fn serves_large_reads_zero_copy(backend: &str, test: &str) {
    let server = start(backend, SendZcSetting::Large);
    let nbd_addr = server.addrs.nbd.expect("nbd");
    let mut nbd = RawNbd::connect(nbd_addr, "default").expect("nbd");
    let offsets = offsets();
    fill(&mut nbd, &offsets, 3);
    for len in [4096usize, 16 << 10, 1 << 20] {
        let off = 40 << 20;
        let data = pattern(off, len, 9);
        assert_eq!(nbd.write(off, &data, false), 0);
        assert!(
            nbd.read(off, len as u32).expect("read") == data,
            "{len} B read"
        );
    }
    for _ in 0..3 {
        pipelined_reads(&mut nbd, &offsets, 3);
    }
    let (sends, copied) = zc_counters(&server);
    eprintln!("{test}: {sends} zero-copy sends, {copied} copied by the kernel");
    assert!(
        sends >= 3,
        "large replies went out without zero-copy sends ({sends})"
    );
    // Over loopback the receiver gets copies: every notification that came says so (some
    // may still be on their way).
    assert!(
        copied > 0 && copied <= sends,
        "loopback zero-copy sends reported {copied} of {sends} copied"
    );
    nbd.disconnect();

    // Clients that ask for 16 MiB of replies and leave without reading: the server closes
    // them with sends in the kernel and notifications outstanding, and stays healthy.
    for _ in 0..8 {
        let mut leaver = RawNbd::connect(nbd_addr, "default").expect("nbd");
        for k in 0..16u64 {
            leaver.send(CommandType::Read.to_u16(), 0, k << 20, 1 << 20, &[]);
        }
        // Some replies are on their way (the first header came) when it leaves.
        let _ = leaver.recv_head();
        drop(leaver);
        let mut next = RawNbd::connect(nbd_addr, "default").expect("nbd after a leaver");
        pipelined_reads(&mut next, &offsets[..8], 3);
        next.disconnect();
    }
    // What the leavers' zero-copy sends still held goes once their notifications are in
    // (nothing leaks); a worker updates its count when it next waits.
    let mut poke = RawNbd::connect(nbd_addr, "default").expect("nbd");
    let freed = testkit::wait_until(IO_TIMEOUT, || {
        pipelined_reads(&mut poke, &offsets[..2], 3);
        orphans(&server) == 0
    });
    assert!(freed.is_ok(), "{} orphans never freed", orphans(&server));
    poke.disconnect();
    let _idle = TcpStream::connect(nbd_addr).expect("connect");
    assert_eq!(server.shutdown(), server::Stopped::Drained);
}

#[test]
fn memory_backend_large_reads_go_zero_copy_byte_for_byte() {
    let test = "memory_backend_large_reads_go_zero_copy_byte_for_byte";
    if !zero_copy_available(test) {
        return;
    }
    serves_large_reads_zero_copy(&memory_backend("64MiB"), test);
}

#[test]
fn file_backend_large_reads_go_zero_copy_byte_for_byte() {
    let test = "file_backend_large_reads_go_zero_copy_byte_for_byte";
    if !zero_copy_available(test) {
        return;
    }
    let file = TempFile::new("send_zc");
    serves_large_reads_zero_copy(&file_backend(&file.0, "64MiB"), test);
}

/// With `send_zc = "off"` (the default) nothing goes zero-copy; a byte threshold above every
/// reply keeps 128 KiB replies copying too.
#[test]
fn off_and_a_high_threshold_send_by_copying() {
    let test = "off_and_a_high_threshold_send_by_copying";
    if !zero_copy_available(test) {
        return;
    }
    for setting in [SendZcSetting::Off, SendZcSetting::MinBytes(2 << 20)] {
        let server = start(&memory_backend("64MiB"), setting);
        let mut nbd = RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("nbd");
        let offsets = offsets();
        fill(&mut nbd, &offsets[..8], 5);
        pipelined_reads(&mut nbd, &offsets[..8], 5);
        nbd.disconnect();
        assert_eq!(zc_counters(&server), (0, 0), "{setting:?}");
        assert_eq!(server.shutdown(), server::Stopped::Drained);
    }
}

/// The config takes `off`, `large` and a byte count, and refuses zero-copy on epoll.
#[test]
fn the_switch_parses_and_needs_the_uring_path() {
    let base = standard_config(&memory_backend("8MiB"), "on");
    for (value, want) in [
        ("\"off\"", SendZcSetting::Off),
        ("\"large\"", SendZcSetting::Large),
        ("65536", SendZcSetting::MinBytes(65536)),
    ] {
        let text = base.replace(
            "workers = 2",
            &format!("workers = 2\nsocket_io = \"uring\"\nsend_zc = {value}"),
        );
        let c = ServerConfig::from_toml_str(&text).expect("valid");
        assert_eq!(c.dataplane.send_zc, want);
    }
    let epoll = base.replace("workers = 2", "workers = 2\nsend_zc = \"large\"");
    let err = ServerConfig::from_toml_str(&epoll).unwrap_err().to_string();
    assert!(
        err.contains("dataplane.send_zc") && err.contains("uring"),
        "{err}"
    );
    for bad in ["\"always\"", "0"] {
        let text = base.replace(
            "workers = 2",
            &format!("workers = 2\nsocket_io = \"uring\"\nsend_zc = {bad}"),
        );
        let err = ServerConfig::from_toml_str(&text).unwrap_err().to_string();
        assert!(err.contains("send_zc"), "{bad}: {err}");
    }
}
