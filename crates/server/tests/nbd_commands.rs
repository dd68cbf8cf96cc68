//! NBD commands end to end, at their edges: 32 MiB READ/WRITE (the advertised maximum) in one
//! request each, 1 KiB requests where the advertised minimum block size allows them, FLUSH on
//! one connection covering a write completed on another (CAN_MULTI_CONN), and TRIM /
//! WRITE_ZEROES zeroing exactly their ranges, and a drain that delivers a large reply to a
//! client still pipelining. Raw client (`RawNbd`) on the memory and the file backend, and
//! qemu-io as a real client; a test whose tool is missing skips with a reason.

mod common;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use proto::nbd::transmission::{CommandType, CMD_FLAG_FUA, CMD_FLAG_NO_HOLE};
use proto::nbd::{Errno, TransmissionFlags};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// The server's default `max_request_bytes`, and what `NBD_INFO_BLOCK_SIZE` advertises.
const MAX_REQUEST_BYTES: u32 = 32 << 20;

/// Panics naming the first differing byte (never prints megabytes of data).
#[track_caller]
fn assert_same(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(at) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: first difference at byte {at}: got {:#04x}, want {:#04x}",
            got[at], want[at]
        );
    }
}

fn alice_requests(text: &str, op: &str) -> u64 {
    metric(
        text,
        &format!("ullstack_tenant_requests_total{{tenant=\"alice\",op=\"{op}\"}}"),
    )
}

fn alice_bytes(text: &str, op: &str) -> u64 {
    metric(
        text,
        &format!("ullstack_tenant_bytes_total{{tenant=\"alice\",op=\"{op}\"}}"),
    )
}

/// Reads `len` bytes at `offset` of a backing file.
fn file_range(path: &std::path::Path, offset: u64, len: usize) -> Vec<u8> {
    let bytes = std::fs::read(path).expect("read backing file");
    bytes[offset as usize..offset as usize + len].to_vec()
}

// ---- 1. The largest and smallest requests ----

/// One 32 MiB WRITE and one 32 MiB READ in the middle of a 96 MiB volume: each is one request
/// (the metrics count one), the data is identical, and the neighbours stay zero.
fn one_request_of_32mib(backend: &str, file: Option<&std::path::Path>) {
    let s = start(&standard_config(backend, "on"));
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    assert_eq!(nbd.size_bytes, 96 * MIB);
    let sizes = nbd
        .block_sizes
        .expect("server advertises NBD_INFO_BLOCK_SIZE");
    assert_eq!(sizes.maximum_bytes, MAX_REQUEST_BYTES, "{sizes:?}");

    let offset = 32 * MIB;
    let data = pattern(offset, MAX_REQUEST_BYTES as usize, 0x5a);
    assert_eq!(nbd.write(offset, &data, false), 0, "32 MiB WRITE");
    let back = nbd.read(offset, MAX_REQUEST_BYTES).expect("32 MiB READ");
    assert_same("32 MiB read back", &back, &data);
    let before = nbd.read(offset - 4096, 4096).expect("read below");
    let after = nbd
        .read(offset + u64::from(MAX_REQUEST_BYTES), 4096)
        .expect("read above");
    assert!(
        before.iter().chain(&after).all(|&b| b == 0),
        "the write stayed inside its range"
    );
    if let Some(path) = file {
        assert_eq!(nbd.flush(), 0, "flush");
        let on_disk = file_range(path, offset, MAX_REQUEST_BYTES as usize);
        assert_same("backing file after flush", &on_disk, &data);
    }

    let text = scrape(s.addrs.admin.unwrap());
    assert_eq!(alice_requests(&text, "write"), 1, "one WRITE request");
    assert_eq!(alice_bytes(&text, "write"), u64::from(MAX_REQUEST_BYTES));
    assert_eq!(alice_requests(&text, "read"), 3, "32 MiB + two 4 KiB READs");
    assert_eq!(
        alice_bytes(&text, "read"),
        u64::from(MAX_REQUEST_BYTES) + 8192
    );
    nbd.disconnect();
}

#[test]
fn nbd_32mib_write_and_read_are_one_request_each_memory() {
    one_request_of_32mib(&memory_backend("96MiB"), None);
}

#[test]
fn nbd_32mib_write_and_read_are_one_request_each_file() {
    let file = TempFile::new("nbd-32mib");
    one_request_of_32mib(&file_backend(&file.0, "96MiB"), Some(&file.0));
}

#[test]
fn qemu_io_moves_32mib_in_one_write_and_one_read() {
    let test = "qemu_io_moves_32mib_in_one_write_and_one_read";
    let Some(qemu_io) = tool("qemu-io", test) else {
        return;
    };
    let s = start(&standard_config(&memory_backend("96MiB"), "on"));
    let uri = format!("nbd://{}/default", s.addrs.nbd.unwrap());
    let (ok, text) = run(Command::new(&qemu_io).args([
        "-f",
        "raw",
        "-c",
        "write -P 0xab 0 32M",
        "-c",
        "read -P 0xab 0 32M",
        &uri,
    ]));
    assert!(
        ok && !text.contains("Pattern verification failed"),
        "qemu-io: {text}"
    );
    let metrics = scrape(s.addrs.admin.unwrap());
    assert_eq!(
        alice_requests(&metrics, "write"),
        1,
        "qemu sent the 32 MiB write unsplit:\n{text}"
    );
    assert_eq!(alice_bytes(&metrics, "write"), 32 * MIB);
    assert!(
        alice_bytes(&metrics, "read") >= 32 * MIB,
        "qemu read the 32 MiB back"
    );
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    assert_eq!(
        nbd.read(32 * MIB - 4096, 4096).expect("read"),
        vec![0xab; 4096]
    );
    assert_eq!(nbd.read(32 * MIB, 4096).expect("read"), vec![0; 4096]);
}

/// A config with one memory volume of `block_bytes` exported as `default` to `alice`.
fn block_config(block_bytes: u32) -> String {
    format!(
        r#"
[listen]
nbd = "127.0.0.1:0"

[[volume]]
name = "vol"
block_bytes = {block_bytes}
backend = {{ kind = "memory", size = "1MiB" }}

[[tenant]]
name = "alice"
secret = "alice-secret"
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]

[[export]]
name = "default"
volume = "vol"
tenant = "alice"
"#
    )
}

/// With 512-byte blocks (the default) the server advertises a 512-byte minimum and serves
/// 1 KiB requests at 1 KiB offsets that are not 4 KiB aligned; with 4 KiB blocks it
/// advertises 4 KiB and refuses them (EINVAL) while the connection goes on.
#[test]
fn nbd_1kib_requests_follow_the_advertised_minimum_block_size() {
    let s = start(&block_config(512));
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    let sizes = nbd.block_sizes.expect("block sizes advertised");
    assert_eq!(sizes.minimum_bytes, 512, "{sizes:?}");
    assert_eq!(sizes.preferred_bytes, 4096, "{sizes:?}");
    for (offset, seed) in [(KIB, 1u8), (3 * KIB, 2), (8 * KIB + 3 * KIB, 3)] {
        let data = pattern(offset, 1024, seed);
        assert_eq!(
            nbd.write(offset, &data, false),
            0,
            "1 KiB write at {offset}"
        );
        assert_eq!(nbd.read(offset, 1024).expect("1 KiB read"), data);
    }
    // The first 4 KiB: zeros, block 1, zeros, block 2 — neighbours untouched.
    let mut want = vec![0u8; 4096];
    want[1024..2048].copy_from_slice(&pattern(KIB, 1024, 1));
    want[3072..4096].copy_from_slice(&pattern(3 * KIB, 1024, 2));
    assert_same(
        "first 4 KiB",
        &nbd.read(0, 4096).expect("4 KiB read"),
        &want,
    );
    drop(s);

    let s = start(&block_config(4096));
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    let sizes = nbd.block_sizes.expect("block sizes advertised");
    assert_eq!(sizes.minimum_bytes, 4096, "{sizes:?}");
    let inval = Errno::Inval.to_u32();
    assert_eq!(nbd.write(KIB, &[7u8; 1024], false), inval, "1 KiB write");
    assert_eq!(nbd.read(0, 1024), Err(inval), "1 KiB read");
    assert_eq!(nbd.write(0, &[7u8; 4096], false), 0, "connection goes on");
    assert_eq!(nbd.read(0, 4096), Ok(vec![7u8; 4096]));
}

// ---- 2. FLUSH with CAN_MULTI_CONN ----

/// Connections A and B on different workers; A writes (each write acknowledged, none FUA),
/// B flushes, and B reads A's data; on the file backend the data is in the file.
fn flush_on_b_covers_writes_on_a(backend: &str, file: Option<&std::path::Path>) {
    let s = start(&standard_config(backend, "on"));
    let addr = s.addrs.nbd.unwrap();
    let mut a = RawNbd::connect(addr, "default").expect("connection A");
    let mut b = RawNbd::connect(addr, "default").expect("connection B");
    for (name, c) in [("A", &a), ("B", &b)] {
        let want = TransmissionFlags::CAN_MULTI_CONN | TransmissionFlags::SEND_FLUSH;
        assert_eq!(
            c.flags & want,
            want,
            "{name}: flags {:#06x} advertise multi-conn and flush",
            c.flags
        );
    }
    let metrics = scrape(s.addrs.admin.unwrap());
    for w in 0..2 {
        assert_eq!(
            metric(
                &metrics,
                &format!("ullstack_worker_connections{{worker=\"{w}\"}}")
            ),
            1,
            "A and B are served by different workers:\n{metrics}"
        );
    }

    let writes: [(u64, usize); 3] = [(0, 4096), (4 * MIB, MIB as usize), (7 * MIB, 64 * 1024)];
    for &(offset, len) in &writes {
        assert_eq!(a.write(offset, &pattern(offset, len, 0x11), false), 0);
    }
    assert_eq!(b.flush(), 0, "FLUSH on B");
    for &(offset, len) in &writes {
        let want = pattern(offset, len, 0x11);
        let got = b.read(offset, len as u32).expect("read on B");
        assert_same(&format!("B reads A's write at {offset}"), &got, &want);
        if let Some(path) = file {
            let on_disk = file_range(path, offset, len);
            assert_same(
                &format!("file after B's flush at {offset}"),
                &on_disk,
                &want,
            );
        }
    }
    let metrics = scrape(s.addrs.admin.unwrap());
    assert_eq!(alice_requests(&metrics, "flush"), 1, "one FLUSH counted");
    a.disconnect();
    b.disconnect();
}

#[test]
fn multi_conn_flush_on_b_covers_writes_on_a_memory() {
    flush_on_b_covers_writes_on_a(&memory_backend("8MiB"), None);
}

#[test]
fn multi_conn_flush_on_b_covers_writes_on_a_file() {
    let file = TempFile::new("nbd-multiconn");
    flush_on_b_covers_writes_on_a(&file_backend(&file.0, "8MiB"), Some(&file.0));
}

// ---- 3. TRIM and WRITE_ZEROES ----

/// Written pattern over the first 1 MiB, then zeroed ranges chosen against the memory
/// backend's 64 KiB chunks: a TRIM covering one whole chunk plus partial ends, a WRITE_ZEROES
/// inside one chunk at a 512-byte offset, one of exactly two chunks with NO_HOLE, one with FUA.
const REGION_BYTES: u64 = MIB;
const TRIM: (u64, u32) = (60 * KIB, 76 * 1024);
const ZEROES: [(u64, u32, u16); 3] = [
    (300 * KIB + 512, 7 * 1024, 0),
    (512 * KIB, 128 * 1024, CMD_FLAG_NO_HOLE),
    (900 * KIB, 4096, CMD_FLAG_FUA),
];

fn expected_region() -> Vec<u8> {
    let mut want = pattern(0, REGION_BYTES as usize, 0x33);
    let ranges = std::iter::once((TRIM.0, TRIM.1)).chain(ZEROES.iter().map(|&(o, l, _)| (o, l)));
    for (offset, len) in ranges {
        want[offset as usize..offset as usize + len as usize].fill(0);
    }
    want
}

/// TRIM reading back zeros is each backend's documented behaviour (memory drops or zeroes,
/// file punches a hole), not an NBD guarantee; WRITE_ZEROES reading back zeros is.
fn trim_and_write_zeroes_zero_only_their_ranges(
    backend: &str,
    volume_bytes: u64,
    file: Option<&std::path::Path>,
) {
    let s = start(&standard_config(backend, "on"));
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    let want_flags = TransmissionFlags::SEND_TRIM | TransmissionFlags::SEND_WRITE_ZEROES;
    assert_eq!(
        nbd.flags & want_flags,
        want_flags,
        "flags {:#06x}",
        nbd.flags
    );

    let data = pattern(0, REGION_BYTES as usize, 0x33);
    assert_eq!(nbd.write(0, &data, false), 0, "pattern");
    assert_eq!(nbd.trim(TRIM.0, TRIM.1), 0, "TRIM");
    for (offset, len, flags) in ZEROES {
        assert_eq!(
            nbd.write_zeroes(offset, len, flags),
            0,
            "WRITE_ZEROES {len} B at {offset}, flags {flags:#x}"
        );
    }
    let want = expected_region();
    let got = nbd.read(0, REGION_BYTES as u32).expect("read region");
    assert_same("region after TRIM and WRITE_ZEROES", &got, &want);

    // Ranges past the end: ENOSPC for WRITE_ZEROES, EINVAL for TRIM; nothing changes.
    assert_eq!(
        nbd.write_zeroes(volume_bytes - 4096, 8192, 0),
        Errno::NoSpc.to_u32()
    );
    assert_eq!(nbd.trim(volume_bytes - 4096, 8192), Errno::Inval.to_u32());
    let got = nbd.read(0, REGION_BYTES as u32).expect("read region again");
    assert_same("region after refused commands", &got, &want);

    if let Some(path) = file {
        assert_eq!(nbd.flush(), 0, "flush");
        let on_disk = file_range(path, 0, REGION_BYTES as usize);
        assert_same("backing file", &on_disk, &want);
    }
    let metrics = scrape(s.addrs.admin.unwrap());
    assert_eq!(alice_requests(&metrics, "trim"), 1, "one TRIM counted");
    nbd.disconnect();
}

#[test]
fn nbd_trim_and_write_zeroes_zero_only_their_ranges_memory() {
    trim_and_write_zeroes_zero_only_their_ranges(&memory_backend("8MiB"), 8 * MIB, None);
}

#[test]
fn nbd_trim_and_write_zeroes_zero_only_their_ranges_file() {
    let file = TempFile::new("nbd-trim");
    trim_and_write_zeroes_zero_only_their_ranges(
        &file_backend(&file.0, "8MiB"),
        8 * MIB,
        Some(&file.0),
    );
}

/// qemu-io's `discard` (NBD TRIM; qemu drops discards unless opened with `--discard=unmap`)
/// and `write -z` (WRITE_ZEROES with NO_HOLE) / `write -z -u` (without it).
#[test]
fn qemu_io_discard_and_write_zeroes_read_back_zeros() {
    let test = "qemu_io_discard_and_write_zeroes_read_back_zeros";
    let Some(qemu_io) = tool("qemu-io", test) else {
        return;
    };
    let s = start(&standard_config(&memory_backend("8MiB"), "on"));
    let uri = format!("nbd://{}/default", s.addrs.nbd.unwrap());
    let commands = [
        "write -P 0xab 0 1M",
        "discard 64k 64k",
        "write -z 256k 64k",
        "write -z -u 512k 128k",
        "read -P 0xab 0 64k",
        "read -P 0 64k 64k",
        "read -P 0xab 128k 128k",
        "read -P 0 256k 64k",
        "read -P 0xab 320k 192k",
        "read -P 0 512k 128k",
        "read -P 0xab 640k 384k",
    ];
    let mut cmd = Command::new(&qemu_io);
    cmd.args(["-f", "raw", "--discard=unmap"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    let (ok, text) = run(cmd.arg(&uri));
    assert!(
        ok && !text.contains("Pattern verification failed") && !text.contains("failed"),
        "qemu-io: {text}"
    );
    let metrics = scrape(s.addrs.admin.unwrap());
    assert_eq!(
        alice_requests(&metrics, "trim"),
        1,
        "the discard reached the server as one TRIM:\n{text}"
    );
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    let got = nbd.read(0, MIB as u32).expect("read");
    let mut want = vec![0xabu8; MIB as usize];
    for (offset, len) in [
        (64 * KIB, 64 * KIB),
        (256 * KIB, 64 * KIB),
        (512 * KIB, 128 * KIB),
    ] {
        want[offset as usize..(offset + len) as usize].fill(0);
    }
    assert_same("raw client after qemu-io", &got, &want);
}

// ---- Shutdown with a pipelining client ----

/// The slow reader's pace: one read of [`SLOW_READ_BYTES`] every [`SLOW_READ_PAUSE`], so the
/// reply's tail still sits in the server's socket send queue when the server closes.
const SLOW_READ_BYTES: usize = 256 * 1024;
const SLOW_READ_PAUSE: Duration = Duration::from_millis(2);
/// Bound of the whole exchange (the drain ends once the client has the reply; its grace,
/// `limits.shutdown_grace_ms`, is 30 s).
const DRAIN_TEST_BOUND: Duration = Duration::from_secs(15);

/// A READ of 32 MiB is read by the server before shutdown; the client, like fio or the kernel
/// client, keeps sending requests while it slowly reads the reply. The server must deliver
/// the whole reply. (Closing the socket while the requests it stopped reading were still in
/// the receive queue made Linux answer with RST and discard the unsent tail of the send queue,
/// ~3.8 MiB of the 32 MiB; the worker now lingers: shutdown(SHUT_WR), read and drop input
/// until the client has acknowledged everything or closed.)
#[test]
fn drain_delivers_a_32mib_reply_to_a_client_that_keeps_pipelining() {
    let s = start(&standard_config(&memory_backend("64MiB"), "on"));
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    let reply_bytes = 16 + MAX_REQUEST_BYTES as usize;
    let cookie = nbd.send(CommandType::Read.to_u16(), 0, 0, MAX_REQUEST_BYTES, &[]);
    // Wait until the server has read it and its reply fills our receive queue, then stop the
    // server and wait until it is draining.
    let queued = |stream: &std::net::TcpStream| {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int through a valid pointer on an open socket.
        unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut n) };
        n as usize
    };
    testkit::wait_until(Duration::from_secs(10), || queued(&nbd.stream) >= 64 << 10)
        .expect("the reply starts arriving within 10 s");
    let shared = s.shared().clone();
    let stopper = std::thread::spawn(move || s.shutdown());
    testkit::wait_until(Duration::from_secs(10), || {
        shared.state() == server::shared::RunState::Draining
    })
    .expect("the server starts draining within 10 s");
    // Two more requests while draining: they may be read (and not answered) or stay unread
    // in the server's receive queue.
    for _ in 0..2 {
        nbd.send(CommandType::Read.to_u16(), 0, 0, 4096, &[]);
    }
    let mut stream_bytes = Vec::with_capacity(reply_bytes);
    let mut chunk = vec![0u8; SLOW_READ_BYTES];
    let deadline = Instant::now() + DRAIN_TEST_BOUND;
    let end = loop {
        if !stopper.is_finished() && Instant::now() < deadline {
            std::thread::sleep(SLOW_READ_PAUSE);
        }
        match nbd.stream.read(&mut chunk) {
            Ok(0) => break "EOF".to_string(),
            Ok(n) => stream_bytes.extend_from_slice(&chunk[..n]),
            Err(e) => break e.to_string(),
        }
    };
    stopper.join().expect("shutdown thread");
    assert!(
        stream_bytes.len() >= reply_bytes,
        "the 32 MiB reply was cut off after {} of {reply_bytes} bytes ({end})",
        stream_bytes.len()
    );
    assert_eq!(
        stream_bytes[8..16],
        cookie.to_be_bytes(),
        "the reply is the 32 MiB READ's"
    );
    assert_eq!(stream_bytes[4..8], [0; 4], "READ succeeded");
}
