//! `[dataplane] socket_io`: the same round trips over the epoll path and the io_uring path,
//! and the workers' counters show which path carried them (`worker_socket_ring_ops`: receives
//! and sends completed on the ring; 0 on epoll). Where the kernel refuses io_uring the uring
//! setting falls back to epoll, and the test checks that instead.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::*;
use proto::nbd::transmission::CommandType;
use server::config::{ServerConfig, SocketIo, SocketRecv};

const VOLUME_BYTES: u64 = 8 << 20;

fn start_with(socket_io: SocketIo) -> server::ServerHandle {
    start_receiving(socket_io, SocketRecv::default())
}

fn start_receiving(socket_io: SocketIo, socket_recv: SocketRecv) -> server::ServerHandle {
    let text = standard_config(&memory_backend("8MiB"), "on");
    let mut config = ServerConfig::from_toml_str(&text).expect("config");
    config.dataplane.socket_io = socket_io;
    config.dataplane.socket_recv = socket_recv;
    server::start(config).expect("server starts")
}

/// Counters summed over the workers: (ring operations, bytes read from sockets).
fn counters(server: &server::ServerHandle) -> (u64, u64) {
    let m = &server.shared().metrics;
    let workers = server.shared().config.dataplane.workers;
    (0..workers).fold((0, 0), |(ops, read), w| {
        let wm = m.worker(w);
        (
            ops + wm.socket_ring_ops.get(),
            read + wm.input_read_bytes.get(),
        )
    })
}

/// Whether this kernel gives the socket path its ring (else `uring` runs as epoll).
fn ring_available() -> bool {
    server::sockring::SockRing::new(SocketRecv::Single).is_ok()
}

fn round_trips(server: &server::ServerHandle, seed: u8) {
    // NBD: 48 pipelined 4 KiB writes, then 48 pipelined reads, then one 1 MiB read (its reply
    // larger than a socket buffer: sent in parts).
    let mut nbd = RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("nbd");
    assert_eq!(nbd.size_bytes, VOLUME_BYTES);
    let blocks: Vec<u64> = (0..48u64).map(|k| k * 8192).collect();
    let mut frames = Vec::new();
    for (k, &off) in blocks.iter().enumerate() {
        let data = pattern(off, 4096, seed);
        frames.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
        frames.extend_from_slice(&0u16.to_be_bytes());
        frames.extend_from_slice(&CommandType::Write.to_u16().to_be_bytes());
        frames.extend_from_slice(&(k as u64 + 1).to_be_bytes());
        frames.extend_from_slice(&off.to_be_bytes());
        frames.extend_from_slice(&4096u32.to_be_bytes());
        frames.extend_from_slice(&data);
    }
    nbd.stream.write_all(&frames).expect("pipelined writes");
    let mut cookies: Vec<u64> = (0..blocks.len())
        .map(|_| nbd.recv_head())
        .map(|(e, c)| {
            assert_eq!(e, 0, "write failed");
            c
        })
        .collect();
    cookies.sort_unstable();
    assert_eq!(cookies, (1..=blocks.len() as u64).collect::<Vec<_>>());
    for &off in &blocks {
        assert!(nbd.read(off, 4096).expect("read") == pattern(off, 4096, seed));
    }
    let big = pattern(2 << 20, 1 << 20, seed);
    assert_eq!(nbd.write(2 << 20, &big, false), 0);
    assert!(nbd.read(2 << 20, 1 << 20).expect("1 MiB read") == big);
    nbd.disconnect();

    // Own protocol: HELLO, write, read back.
    let mut native = RawNative::connect(server.addrs.native.expect("native"));
    assert_eq!(
        native.hello("alice", "alice-secret", "vol").status,
        proto::wire::Status::Ok
    );
    let data = pattern(4 << 20, 65536, seed);
    assert_eq!(native.write(4 << 20, &data).status, proto::wire::Status::Ok);
    let back = native.read(4 << 20, 65536);
    assert!(back.payload == data, "native read back differs");
}

#[test]
fn both_socket_paths_serve_and_say_which_ran() {
    let ring = ring_available();
    let paths = [
        (SocketIo::Epoll, SocketRecv::Single, 3u8),
        (SocketIo::Uring, SocketRecv::Single, 5u8),
        (SocketIo::Uring, SocketRecv::Multishot, 7u8),
    ];
    for (socket_io, socket_recv, seed) in paths {
        let server = start_receiving(socket_io, socket_recv);
        round_trips(&server, seed);
        // A client that leaves with a receive armed, and one idle at shutdown: both closed
        // without a hang (the ring's operations are cancelled and awaited first).
        drop(TcpStream::connect(server.addrs.nbd.expect("nbd")).expect("connect"));
        let _idle = RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("nbd");
        let (ops, read) = counters(&server);
        assert!(read > 0, "{socket_io:?}: no socket bytes counted");
        match (socket_io, ring) {
            (SocketIo::Uring, true) => {
                assert!(ops > 0, "uring: no operation completed on the ring")
            }
            _ => assert_eq!(
                ops, 0,
                "{socket_io:?} (ring available: {ring}): ring operations"
            ),
        }
        assert_eq!(server.shutdown(), server::Stopped::Drained);
    }
}

/// Opens `n` own-protocol sessions, closes every client at once, then stops the server;
/// returns how long the stop took.
fn close_many_then_stop(socket_io: SocketIo, n: usize) -> std::time::Duration {
    let server = start_with(socket_io);
    let addr = server.addrs.native.expect("native");
    let clients: Vec<RawNative> = (0..n)
        .map(|_| {
            let mut c = RawNative::connect(addr);
            assert_eq!(
                c.hello("alice", "alice-secret", "vol").status,
                proto::wire::Status::Ok
            );
            c
        })
        .collect();
    drop(clients);
    let started = std::time::Instant::now();
    assert_eq!(server.shutdown(), server::Stopped::Drained);
    started.elapsed()
}

/// Many ring connections whose clients left together: their receives complete in bunches,
/// and taking each connection off the ring (close, shutdown) must use the completions already
/// reaped for it instead of waiting for them again. Before that, each such connection cost
/// the detach's whole wait (`DETACH_WAIT_NS`, 1 s): 5,000 connections hung the shutdown of
/// `control.rs`'s 1000-tenant test for over an hour. The epoll path is the control run; the
/// bound is a fraction of what the old behaviour costs with `n` connections.
#[test]
fn many_ring_connections_close_without_waiting_for_reaped_completions() {
    if !ring_available() {
        testkit::skip(
            "many_ring_connections_close_without_waiting_for_reaped_completions",
            "io_uring refused here",
        );
        return;
    }
    const N: usize = 400;
    let epoll = close_many_then_stop(SocketIo::Epoll, N);
    let uring = close_many_then_stop(SocketIo::Uring, N);
    println!("stop after {N} clients left: epoll {epoll:?}, uring {uring:?}");
    assert!(
        uring <= epoll + std::time::Duration::from_secs(10),
        "uring stop took {uring:?} (epoll {epoll:?})"
    );
}

/// Sizes of the pieces [`send_in_pieces`] cuts a stream into, in turn: most cut a frame
/// somewhere inside its 28-byte header or its payload.
const PIECE_BYTES: [usize; 10] = [1, 2, 3, 5, 8, 13, 27, 29, 101, 997];

/// Writes `bytes` a piece at a time, pausing after each so that most pieces reach the server
/// alone; returns how many pieces.
fn send_in_pieces(stream: &mut TcpStream, bytes: &[u8]) -> usize {
    let (mut at, mut pieces) = (0, 0);
    while at < bytes.len() {
        let n = PIECE_BYTES[pieces % PIECE_BYTES.len()].min(bytes.len() - at);
        stream.write_all(&bytes[at..at + n]).expect("piece");
        at += n;
        pieces += 1;
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    pieces
}

/// An NBD request frame.
fn nbd_frame(command: CommandType, cookie: u64, offset: u64, len: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(28 + payload.len());
    frame.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
    frame.extend_from_slice(&0u16.to_be_bytes());
    frame.extend_from_slice(&command.to_u16().to_be_bytes());
    frame.extend_from_slice(&cookie.to_be_bytes());
    frame.extend_from_slice(&offset.to_be_bytes());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Pipelined requests whose bytes arrive a few at a time, cut anywhere (inside a header,
/// inside a payload, across frames): the server reassembles every frame whole, over epoll and
/// over both io_uring receive modes. 16 pipelined 4 KiB WRITEs, then 16 pipelined READs of
/// them, each stream sent in ~10-1,000-byte pieces; every write is acknowledged by its cookie
/// and every read returns what was written. A receive path that dropped, repeated or
/// reordered bytes between receives (a multishot receive's buffers applied out of order, a
/// provided buffer recycled before it was copied) breaks a frame and fails here. The many
/// small receives are counted: the pieces outnumber the frames several times over.
#[test]
fn pipelined_requests_split_across_many_small_receives_arrive_whole() {
    let ring = ring_available();
    let paths = [
        (SocketIo::Epoll, SocketRecv::Single),
        (SocketIo::Uring, SocketRecv::Single),
        (SocketIo::Uring, SocketRecv::Multishot),
    ];
    const BLOCKS: u64 = 16;
    for (k, (socket_io, socket_recv)) in paths.into_iter().enumerate() {
        let server = start_receiving(socket_io, socket_recv);
        let seed = 11 + k as u8;
        let nbd = RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("nbd");
        let mut replies = nbd.stream;
        let mut sender = replies.try_clone().expect("clone");
        let (ops_before, read_before) = counters(&server);
        let offsets: Vec<u64> = (0..BLOCKS).map(|b| b * 12_288).collect();
        let mut writes = Vec::new();
        for (b, &off) in offsets.iter().enumerate() {
            let data = pattern(off, 4096, seed);
            writes.extend(nbd_frame(
                CommandType::Write,
                1 + b as u64,
                off,
                4096,
                &data,
            ));
        }
        let frames_bytes = writes.len();
        let writer = std::thread::spawn(move || {
            let pieces = send_in_pieces(&mut sender, &writes);
            (sender, pieces)
        });
        let mut acked = Vec::new();
        for _ in 0..BLOCKS {
            let mut head = [0u8; 16];
            replies.read_exact(&mut head).expect("write reply");
            assert_eq!(
                &head[4..8],
                &[0; 4],
                "{socket_io:?}/{socket_recv:?}: write failed"
            );
            acked.push(u64::from_be_bytes(head[8..16].try_into().expect("cookie")));
        }
        let (mut sender, write_pieces) = writer.join().expect("writer");
        acked.sort_unstable();
        assert_eq!(acked, (1..=BLOCKS).collect::<Vec<_>>());

        let mut reads = Vec::new();
        for (b, &off) in offsets.iter().enumerate() {
            reads.extend(nbd_frame(CommandType::Read, 100 + b as u64, off, 4096, &[]));
        }
        let writer = std::thread::spawn(move || send_in_pieces(&mut sender, &reads));
        for _ in 0..BLOCKS {
            let mut head = [0u8; 16];
            replies.read_exact(&mut head).expect("read reply");
            assert_eq!(
                &head[4..8],
                &[0; 4],
                "{socket_io:?}/{socket_recv:?}: read failed"
            );
            let cookie = u64::from_be_bytes(head[8..16].try_into().expect("cookie"));
            let b = cookie
                .checked_sub(100)
                .filter(|&b| b < BLOCKS)
                .expect("a read cookie");
            let mut data = vec![0u8; 4096];
            replies.read_exact(&mut data).expect("read payload");
            let off = offsets[b as usize];
            assert!(
                data == pattern(off, 4096, seed),
                "{socket_io:?}/{socket_recv:?}: block at {off} read back differs"
            );
        }
        let read_pieces = writer.join().expect("reader");
        let (ops_after, read_after) = counters(&server);
        let pieces = write_pieces + read_pieces;
        println!(
            "{socket_io:?}/{socket_recv:?}: {pieces} pieces, {} ring operations",
            ops_after - ops_before
        );
        assert!(read_after - read_before >= frames_bytes as u64);
        assert!(pieces >= 8 * 2 * BLOCKS as usize, "{pieces} pieces");
        if socket_io == SocketIo::Uring && ring {
            // Receives and sends on the ring: at least one receive per ten pieces (the
            // server's coalescing pause may gather a few pieces into one).
            assert!(
                ops_after - ops_before >= pieces as u64 / 10,
                "{socket_io:?}/{socket_recv:?}: {} ring operations for {pieces} pieces",
                ops_after - ops_before
            );
        }
        assert_eq!(server.shutdown(), server::Stopped::Drained);
    }
}

/// Under multishot receives, pipelined frames are decoded in the provided buffers the kernel
/// filled (`worker_input_in_place_bytes`), and those cut by a buffer's end are stitched: 8
/// rounds of 32 pipelined 1 KiB WRITEs, each round sent at once (1,052 B frames, so most
/// 4 KiB buffers end inside one; 32 are within a step's budget), then READs of them, all
/// answered with the bytes written. A stitch that dropped or repeated bytes at a buffer's end
/// breaks a frame here; a path that copied everything counts no bytes in place.
#[test]
fn multishot_frames_are_decoded_in_place_and_stitched_across_buffers() {
    let test = "multishot_frames_are_decoded_in_place_and_stitched_across_buffers";
    if !ring_available() {
        testkit::skip(test, "io_uring is refused here");
        return;
    }
    let server = start_receiving(SocketIo::Uring, SocketRecv::Multishot);
    let in_place = |server: &server::ServerHandle| {
        let m = &server.shared().metrics;
        (0..server.shared().config.dataplane.workers)
            .map(|w| m.worker(w).input_in_place_bytes.get())
            .sum::<u64>()
    };
    let mut nbd = RawNbd::connect(server.addrs.nbd.expect("nbd"), "default").expect("nbd");
    const ROUNDS: u64 = 8;
    const DEPTH: u64 = 32;
    let (_, read_before) = counters(&server);
    for round in 0..ROUNDS {
        let mut frames = Vec::new();
        for k in round * DEPTH..(round + 1) * DEPTH {
            let data = pattern(k * 1024, 1024, 21);
            frames.extend(nbd_frame(CommandType::Write, k + 1, k * 1024, 1024, &data));
        }
        nbd.stream.write_all(&frames).expect("writes");
        let mut acked: Vec<u64> = (0..DEPTH)
            .map(|_| {
                let (errno, cookie) = nbd.recv_head();
                assert_eq!(errno, 0, "write failed");
                cookie
            })
            .collect();
        acked.sort_unstable();
        assert_eq!(
            acked,
            (round * DEPTH + 1..=(round + 1) * DEPTH).collect::<Vec<_>>()
        );
    }
    let (_, read_after) = counters(&server);
    for k in 0..ROUNDS * DEPTH {
        assert!(
            nbd.read(k * 1024, 1024).expect("read") == pattern(k * 1024, 1024, 21),
            "block {k} read back differs"
        );
    }
    nbd.disconnect();
    let decoded_in_place = in_place(&server);
    let received = read_after - read_before;
    println!("{decoded_in_place} of {received} bytes of writes decoded in place");
    // About three frames in four lie whole in a buffer; a receive that a coalescing pause
    // did not gather whole still leaves most of them whole.
    assert!(
        decoded_in_place > received / 2,
        "{decoded_in_place} of {received} received bytes decoded in place"
    );
    assert_eq!(server.shutdown(), server::Stopped::Drained);
}
