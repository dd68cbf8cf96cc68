//! `[dataplane] file_io`: a `socket_io = "uring"` worker's file volume with its io_uring
//! operations in the worker's socket ring (`socket-ring`) or in a ring of its own watched
//! through epoll (`own-ring`), through a real NBD client: pipelined writes read back, FUA,
//! FLUSH (the backing file holds every acknowledged write), TRIM and WRITE_ZEROES zero their
//! ranges, a client that leaves with I/O in flight and a shutdown with I/O in flight end
//! cleanly. Which path ran is checked from outside the code that chose it: the workers'
//! `socket_ring_file_ops` counter, and the process's descriptors (a hosted volume has no
//! io_uring of its own, and no epoll set watches an io_uring).
//!
//! Where the kernel refuses io_uring sockets (the worker falls back to epoll) the test checks
//! that both settings then run the file volume on its own ring.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use proto::nbd::transmission::{CommandType, CMD_FLAG_FUA};
use server::config::{FileIo, ServerConfig, SocketIo, SocketRecv};

const MIB: u64 = 1 << 20;
const VOLUME_BYTES: u64 = 16 * MIB;
/// Registered read buffers of the volume: the host ring registers them.
const FIXED_BUFFERS: u32 = 16;
const WORKERS: u64 = 2;
/// The descriptor counts below are the whole process's: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn ring_available() -> bool {
    server::sockring::SockRing::new(SocketRecv::Single).is_ok()
}

/// Shutdown grace of the test servers: a client that never reads its replies is cut then.
const GRACE_MS: u64 = 2000;

fn start_file(path: &std::path::Path, file_io: FileIo) -> server::ServerHandle {
    let backend = format!(
        "{{ kind = \"file\", path = \"{}\", size = \"16MiB\", fixed_buffers = {FIXED_BUFFERS} }}",
        path.display()
    );
    let text = standard_config(&backend, "off");
    let mut config = ServerConfig::from_toml_str(&text).expect("config");
    config.dataplane.socket_io = SocketIo::Uring;
    config.dataplane.file_io = file_io;
    config.limits.shutdown_grace_ms = GRACE_MS;
    assert_eq!(config.dataplane.workers as u64, WORKERS);
    server::start(config).expect("server starts")
}

/// File operations the workers completed through their socket rings.
fn file_ops_in_socket_rings(server: &server::ServerHandle) -> u64 {
    let m = &server.shared().metrics;
    (0..WORKERS as usize)
        .map(|w| m.worker(w).socket_ring_file_ops.get())
        .sum()
}

/// This process's descriptors whose link reads `anon_inode:[kind]`.
fn anon_fds(kind: &str) -> Vec<u32> {
    let want = format!("anon_inode:[{kind}]");
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == want.as_str())
        })
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// (io_uring descriptors, io_uring descriptors some epoll set watches).
fn rings_and_watched() -> (usize, usize) {
    let rings = anon_fds("io_uring");
    let watched = anon_fds("eventpoll")
        .into_iter()
        .flat_map(|ep| {
            let info =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{ep}")).unwrap_or_default();
            info.lines()
                .filter_map(|l| {
                    l.strip_prefix("tfd:")?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                })
                .collect::<Vec<u32>>()
        })
        .filter(|tfd| rings.contains(tfd))
        .count();
    (rings.len(), watched)
}

/// Waits (bounded) until the rings are as expected: the workers set theirs up on their own
/// threads, right after they start.
fn expect_rings(label: &str, rings: usize, watched: usize) {
    let mut seen = (0, 0);
    let ok = testkit::wait_until(Duration::from_secs(10), || {
        seen = rings_and_watched();
        seen == (rings, watched)
    });
    assert!(
        ok.is_ok(),
        "{label}: (io_uring fds, watched by epoll) = {seen:?}, want {:?}",
        (rings, watched)
    );
}

/// Sends `frames` (whole NBD requests) and takes `count` replies: their errors by cookie.
fn pipelined(nbd: &mut RawNbd, frames: &[u8], count: usize) -> Vec<(u64, u32)> {
    nbd.stream.write_all(frames).expect("pipelined requests");
    let mut replies: Vec<(u64, u32)> = (0..count)
        .map(|_| {
            let (err, cookie) = nbd.recv_head();
            (cookie, err)
        })
        .collect();
    replies.sort_unstable();
    replies
}

fn frame(
    out: &mut Vec<u8>,
    command: CommandType,
    flags: u16,
    cookie: u64,
    offset: u64,
    data: &[u8],
) {
    let len = if command == CommandType::Write {
        data.len() as u32
    } else {
        4096
    };
    out.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&command.to_u16().to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(data);
}

/// Reads `len` bytes at `offset` of the backing file.
/// Appends a WRITE (handle `handle`) of `len` pattern bytes at `off`.
fn pattern_write(frames: &mut Vec<u8>, handle: u64, off: u64, len: usize, seed: u8) {
    frame(
        frames,
        CommandType::Write,
        0,
        handle,
        off,
        &pattern(off, len, seed),
    );
}

fn file_range(path: &std::path::Path, offset: u64, len: usize) -> Vec<u8> {
    let bytes = std::fs::read(path).expect("read backing file");
    bytes[offset as usize..offset as usize + len].to_vec()
}

/// What one server must do right, on either ring: returns the file operations its socket
/// rings completed.
fn serve_and_check(server: &server::ServerHandle, path: &std::path::Path, seed: u8) -> u64 {
    let nbd_addr = server.addrs.nbd.expect("nbd");
    let mut nbd = RawNbd::connect(nbd_addr, "default").expect("nbd");
    assert_eq!(nbd.size_bytes, VOLUME_BYTES);

    // 64 pipelined 4 KiB writes (every fourth FUA), then 64 pipelined reads of them.
    let offsets: Vec<u64> = (0..64u64).map(|k| k * 12288).collect();
    let mut frames = Vec::new();
    for (k, &off) in offsets.iter().enumerate() {
        let flags = if k % 4 == 0 { CMD_FLAG_FUA } else { 0 };
        frame(
            &mut frames,
            CommandType::Write,
            flags,
            k as u64 + 1,
            off,
            &pattern(off, 4096, seed),
        );
    }
    let replies = pipelined(&mut nbd, &frames, offsets.len());
    assert!(
        replies.iter().all(|&(_, e)| e == 0),
        "a write failed: {replies:?}"
    );
    let mut frames = Vec::new();
    for (k, &off) in offsets.iter().enumerate() {
        frame(&mut frames, CommandType::Read, 0, 1000 + k as u64, off, &[]);
    }
    nbd.stream.write_all(&frames).expect("pipelined reads");
    let mut seen = 0;
    for _ in 0..offsets.len() {
        let (err, cookie) = nbd.recv_head();
        assert_eq!(err, 0, "read {cookie} failed");
        let off = offsets[(cookie - 1000) as usize];
        let mut data = vec![0u8; 4096];
        nbd.stream.read_exact(&mut data).expect("read payload");
        assert!(data == pattern(off, 4096, seed), "read at {off} differs");
        seen += 1;
    }
    assert_eq!(seen, offsets.len());

    // A 1 MiB write and read (a run of pages; larger than a registered buffer).
    let big = pattern(8 * MIB, MIB as usize, seed);
    assert_eq!(nbd.write(8 * MIB, &big, true), 0, "1 MiB FUA write");
    assert!(nbd.read(8 * MIB, MIB as u32).expect("1 MiB read") == big);

    // TRIM and WRITE_ZEROES zero their ranges and nothing else.
    assert_eq!(nbd.trim(8 * MIB, 65536), 0, "TRIM");
    assert_eq!(
        nbd.write_zeroes(8 * MIB + 131072, 65536, 0),
        0,
        "WRITE_ZEROES"
    );
    assert_eq!(
        nbd.write_zeroes(8 * MIB + 262144, 4096, CMD_FLAG_FUA),
        0,
        "FUA WRITE_ZEROES"
    );
    let mut want = big.clone();
    want[..65536].fill(0);
    want[131072..196608].fill(0);
    want[262144..266240].fill(0);
    assert!(
        nbd.read(8 * MIB, MIB as u32).expect("read after zeroing") == want,
        "zeroed ranges"
    );

    // Every acknowledged write is in the file after a FLUSH.
    assert_eq!(nbd.flush(), 0, "FLUSH");
    for &off in &offsets {
        assert!(
            file_range(path, off, 4096) == pattern(off, 4096, seed),
            "file at {off}"
        );
    }
    assert!(
        file_range(path, 8 * MIB, MIB as usize) == want,
        "file's zeroed MiB"
    );

    // A client that leaves with 32 writes and 32 reads in flight: the server answers into
    // the void and goes on serving.
    let mut frames = Vec::new();
    for k in 0..32u64 {
        let off = 12 * MIB + k * 65536;
        pattern_write(&mut frames, 5000 + k, off, 65536, seed);
        frame(&mut frames, CommandType::Read, 0, 6000 + k, off, &[]);
    }
    let mut leaver = RawNbd::connect(nbd_addr, "default").expect("nbd");
    leaver
        .stream
        .write_all(&frames)
        .expect("requests then leave");
    drop(leaver);
    drop(TcpStream::connect(nbd_addr).expect("connect"));
    assert!(nbd.read(0, 4096).expect("read after a client left") == pattern(0, 4096, seed));

    // Requests in flight at shutdown are served before the server stops (the drain).
    let mut frames = Vec::new();
    for k in 0..32u64 {
        let off = 14 * MIB + k * 4096;
        pattern_write(&mut frames, 7000 + k, off, 4096, seed);
    }
    let replies = pipelined(&mut nbd, &frames, 32);
    assert!(replies.iter().all(|&(_, e)| e == 0));
    file_ops_in_socket_rings(server)
}

#[test]
fn file_io_goes_where_the_config_says_and_keeps_every_acknowledged_write() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ring = ring_available();
    let (rings_before, watched_before) = rings_and_watched();
    for (file_io, seed) in [(FileIo::SocketRing, 3u8), (FileIo::OwnRing, 5u8)] {
        let file = TempFile::new("file-socket-ring");
        let server = start_file(&file.0, file_io);
        let hosted = ring && file_io == FileIo::SocketRing;
        // A worker's rings: its socket ring (with a ring), plus the volume's own unless hosted;
        // epoll watches the volume's own ring (and the socket ring nothing).
        let per_worker = usize::from(ring) + usize::from(!hosted);
        expect_rings(
            &format!("{file_io:?} (ring available: {ring})"),
            rings_before + WORKERS as usize * per_worker,
            watched_before + WORKERS as usize * usize::from(!hosted),
        );
        let file_ops = serve_and_check(&server, &file.0, seed);
        if hosted {
            assert!(
                file_ops > 0,
                "socket-ring: no file operation completed on the socket ring"
            );
        } else {
            assert_eq!(
                file_ops, 0,
                "{file_io:?} (ring available: {ring}): file ops on the socket ring"
            );
        }
        // Reads went into the registered buffers: the host ring registered them.
        let fixed = server.shared().volumes[0]
            .volume
            .fixed_reads()
            .expect("fixed buffers");
        assert!(fixed[0] > 0, "{file_io:?}: no registered read ({fixed:?})");
        assert_eq!(server.shutdown(), server::Stopped::Drained, "{file_io:?}");
        expect_rings("after shutdown", rings_before, watched_before);
        assert!(
            file_range(&file.0, 14 * MIB, 4096) == pattern(14 * MIB, 4096, seed),
            "{file_io:?}: an acknowledged write before shutdown"
        );
    }
}

/// A shutdown while a client has a few hundred requests in flight and never reads a reply:
/// the socket ring's file operations complete or are cancelled before the worker's buffers go,
/// and the server stops within its grace (no hang, no crash).
#[test]
fn a_shutdown_with_file_io_in_flight_ends_cleanly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let file = TempFile::new("file-socket-ring-shutdown");
    let server = start_file(&file.0, FileIo::SocketRing);
    let nbd = RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("nbd");
    let mut frames = Vec::new();
    for k in 0..256u64 {
        let off = (k % 200) * 65536;
        frame(
            &mut frames,
            CommandType::Write,
            0,
            k + 1,
            off,
            &pattern(off, 65536, 9),
        );
        frame(&mut frames, CommandType::Read, 0, 10_000 + k, off, &[]);
    }
    // Written from a thread: the server stops reading once its limits are hit.
    let mut writer = nbd.stream.try_clone().expect("clone");
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&frames);
    });
    std::thread::sleep(Duration::from_millis(50));
    let stopped = server.shutdown();
    assert!(
        matches!(
            stopped,
            server::Stopped::Drained | server::Stopped::GraceExpired { .. }
        ),
        "{stopped:?}"
    );
    drop(nbd);
    let _ = sender.join();
}

/// One file volume `vol` on `first` exported as `default`, and with `second` another, `vol2`,
/// exported as `second`; one open tenant on both.
fn reload_config(first: &std::path::Path, second: Option<&std::path::Path>) -> ServerConfig {
    let volume = |name: &str, path: &std::path::Path| {
        format!(
            "\n[[volume]]\nname = \"{name}\"\nbackend = {{ kind = \"file\", path = \"{}\", size = \"16MiB\" }}\n",
            path.display()
        )
    };
    let mut text = String::from(
        "[listen]\nnbd = \"127.0.0.1:0\"\n[dataplane]\nworkers = 2\n[qos]\nscheduler = \"off\"\n",
    );
    text += &volume("vol", first);
    let mut acl = String::from("{ volume = \"vol\", access = \"read-write\" }");
    let mut exports =
        String::from("\n[[export]]\nname = \"default\"\nvolume = \"vol\"\ntenant = \"open\"\n");
    if let Some(second) = second {
        text += &volume("vol2", second);
        acl += ", { volume = \"vol2\", access = \"read-write\" }";
        exports += "\n[[export]]\nname = \"second\"\nvolume = \"vol2\"\ntenant = \"open\"\n";
    }
    text += &format!("\n[[tenant]]\nname = \"open\"\nopen = true\nclass = \"be\"\nacl = [{acl}]\n");
    text += &exports;
    let mut config = ServerConfig::from_toml_str(&text).expect("config");
    config.dataplane.socket_io = SocketIo::Uring;
    config.dataplane.file_io = FileIo::SocketRing;
    config.limits.shutdown_grace_ms = GRACE_MS;
    config
}

/// A file volume a reload adds joins the workers' socket rings as the first one did: no ring
/// of its own, nothing watched by epoll, its I/O through the socket ring.
#[test]
fn a_file_volume_a_reload_adds_joins_the_socket_ring() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let test = "a_file_volume_a_reload_adds_joins_the_socket_ring";
    if !ring_available() {
        testkit::skip(test, "io_uring sockets are refused here");
        return;
    }
    let (first, second) = (
        TempFile::new("reload-first"),
        TempFile::new("reload-second"),
    );
    let (rings_before, watched_before) = rings_and_watched();
    let server = server::start(reload_config(&first.0, None)).expect("server starts");
    expect_rings(
        "before the reload",
        rings_before + WORKERS as usize,
        watched_before,
    );
    let next = reload_config(&first.0, Some(&second.0));
    server.set_config_source(server::ConfigSource::new(move || Ok(next.clone())));
    server.reload("test").expect("the reload is taken");
    let nbd_addr = server.addrs.nbd.expect("nbd");
    // Both workers adopt the new volume (each within its next step): serve on the new export
    // from two connections (one per worker, as the acceptor deals them).
    let before = file_ops_in_socket_rings(&server);
    for seed in [1u8, 2] {
        let mut nbd = RawNbd::connect(nbd_addr, "second").expect("the new export");
        let data = pattern(4096 * u64::from(seed), 4096, seed);
        assert_eq!(nbd.write(4096 * u64::from(seed), &data, true), 0);
        assert!(nbd.read(4096 * u64::from(seed), 4096).expect("read") == data);
        nbd.disconnect();
    }
    expect_rings(
        "after the reload",
        rings_before + WORKERS as usize,
        watched_before,
    );
    assert!(
        file_ops_in_socket_rings(&server) >= before + 4,
        "the new volume's I/O did not go through the socket ring"
    );
    assert_eq!(server.shutdown(), server::Stopped::Drained);
}
