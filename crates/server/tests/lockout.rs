//! No client may hold server resources others need by going slowly (issue 29, "Others locked
//! out").

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::*;
use proto::wire::{RequestHeader, Status, WriteMode};

/// Request deadline of the trickle tests: short, so the test is quick; a trickle of one byte
/// per `TRICKLE_GAP` resets any idle timer many times over within it.
const REQUEST_TIMEOUT_MS: u64 = 400;
const TRICKLE_GAP: Duration = Duration::from_millis(25);
/// How long the trickle goes on at most: many times the deadline.
const TRICKLE_FOR: Duration = Duration::from_secs(8);

fn server_with_request_timeout() -> server::ServerHandle {
    let toml = standard_config(&memory_backend("8MiB"), "on").replace(
        "[dataplane]",
        &format!("[limits]\nrequest_timeout_ms = {REQUEST_TIMEOUT_MS}\n\n[dataplane]"),
    );
    start(&toml)
}

/// Sends `bytes` one at a time, `TRICKLE_GAP` apart, until the server closes the connection or
/// `TRICKLE_FOR` has passed; returns how long the server let it go on (None: never closed).
fn trickle(stream: &mut std::net::TcpStream, bytes: &[u8]) -> Option<Duration> {
    stream
        .set_read_timeout(Some(Duration::from_millis(1)))
        .expect("timeout");
    let start = Instant::now();
    for b in bytes.iter().cycle() {
        if start.elapsed() > TRICKLE_FOR {
            return None;
        }
        if stream.write_all(&[*b]).is_err() {
            return Some(start.elapsed());
        }
        let mut buf = [0u8; 64];
        match stream.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(start.elapsed())
            }
            _ => {}
        }
        std::thread::sleep(TRICKLE_GAP);
    }
    None
}

/// A WRITE trickled at one byte per 25 ms after HELLO is closed once its first byte is older
/// than `limits.request_timeout_ms`, though every byte resets the idle timer.
#[test]
fn a_request_trickled_after_hello_is_closed_at_its_deadline() {
    let s = server_with_request_timeout();
    let mut c = RawNative::connect(s.addrs.native.expect("native"));
    assert_eq!(c.hello("alice", "alice-secret", "vol").status, Status::Ok);
    let mut frame = RequestHeader::write(5, 0, 0, 65536, WriteMode::WriteBack)
        .encode()
        .to_vec();
    frame.extend_from_slice(&[7u8; 65536]);
    let closed = trickle(&mut c.stream, &frame);
    let Some(after) = closed else {
        panic!("a request trickled for {TRICKLE_FOR:?} was never timed out");
    };
    assert!(
        after >= Duration::from_millis(REQUEST_TIMEOUT_MS),
        "closed after {after:?}, before the deadline"
    );
}

/// NBD: the same trickle of a WRITE in transmission.
#[test]
fn an_nbd_request_trickled_is_closed_at_its_deadline() {
    let s = server_with_request_timeout();
    let mut c = RawNbd::connect(s.addrs.nbd.expect("nbd"), "default").expect("GO");
    let mut frame = Vec::new();
    frame.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
    frame.extend_from_slice(&0u16.to_be_bytes());
    frame.extend_from_slice(
        &proto::nbd::transmission::CommandType::Write
            .to_u16()
            .to_be_bytes(),
    );
    frame.extend_from_slice(&9u64.to_be_bytes());
    frame.extend_from_slice(&0u64.to_be_bytes());
    frame.extend_from_slice(&65536u32.to_be_bytes());
    frame.extend_from_slice(&[3u8; 65536]);
    assert!(
        trickle(&mut c.stream, &frame).is_some(),
        "an NBD request trickled for {TRICKLE_FOR:?} was never timed out"
    );
}

/// A client pipelining whole requests steadily (each completed within the deadline) is not
/// closed, however long it goes on: the deadline is per request, not per connection.
#[test]
fn whole_requests_arriving_slowly_are_served() {
    let s = server_with_request_timeout();
    let mut c = RawNative::connect(s.addrs.native.expect("native"));
    assert_eq!(c.hello("alice", "alice-secret", "vol").status, Status::Ok);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_millis(3 * REQUEST_TIMEOUT_MS) && n < 1000 {
        assert_eq!(c.read(0, 4096).status, Status::Ok, "request {n}");
        std::thread::sleep(Duration::from_millis(REQUEST_TIMEOUT_MS / 4));
        n += 1;
    }
}
