//! Replies are not lost to a fatal frame: what a client sent before the frame that ends its
//! connection is answered, then the connection closes (issue 29, "Replies lost"). Each test
//! sends the valid requests and the fatal bytes in one `write`, so the server reads them in
//! one go and must not drop the valid part's replies when it meets the fatal one.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::*;
use proto::nbd;
use proto::nbd::transmission::CommandType;
use proto::wire::{self, RequestHeader, Status};

fn server() -> server::ServerHandle {
    start(&standard_config(&memory_backend("8MiB"), "on"))
}

/// Own protocol: a READ and a header with a bad magic in one send. The READ is answered with
/// its data, then the connection closes.
#[test]
fn own_protocol_answers_a_read_sent_with_a_fatal_frame_then_closes() {
    let s = server();
    let mut c = RawNative::connect(s.addrs.native.expect("native"));
    assert_eq!(c.hello("alice", "alice-secret", "vol").status, Status::Ok);
    assert_eq!(c.write(0, &pattern(0, 4096, 7)).status, Status::Ok);
    let mut bytes = RequestHeader::read(41, 0, 0, 4096).encode().to_vec();
    bytes.extend_from_slice(&[0xEEu8; wire::REQUEST_HEADER_BYTES]);
    c.send_raw(&bytes);
    let reply = c
        .recv()
        .expect("the READ sent before the fatal frame got no reply");
    assert_eq!((reply.cookie, reply.status), (41, Status::Ok));
    assert_eq!(reply.payload, pattern(0, 4096, 7));
    assert!(c.closed_by_server(), "the fatal frame did not close");
}

/// NBD: a READ and a request with a bad magic in one send. The READ is answered with its data,
/// then the connection closes.
#[test]
fn nbd_answers_a_read_sent_with_a_fatal_frame_then_closes() {
    let s = server();
    let mut c = RawNbd::connect(s.addrs.nbd.expect("nbd"), "default").expect("GO");
    assert_eq!(c.write(0, &pattern(0, 4096, 9), false), 0);
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&nbd::REQUEST_MAGIC.to_be_bytes());
    bytes.extend_from_slice(&0u16.to_be_bytes());
    bytes.extend_from_slice(&CommandType::Read.to_u16().to_be_bytes());
    bytes.extend_from_slice(&77u64.to_be_bytes());
    bytes.extend_from_slice(&0u64.to_be_bytes());
    bytes.extend_from_slice(&4096u32.to_be_bytes());
    bytes.extend_from_slice(&[0xEEu8; 28]);
    c.stream.write_all(&bytes).expect("send");
    let (errno, cookie) = c.recv_head();
    assert_eq!((errno, cookie), (0, 77), "the READ's reply");
    let mut data = vec![0u8; 4096];
    c.stream.read_exact(&mut data).expect("the READ's data");
    assert_eq!(data, pattern(0, 4096, 9));
    let mut byte = [0u8; 1];
    assert!(
        matches!(c.stream.read(&mut byte), Ok(0) | Err(_)),
        "the fatal frame did not close"
    );
}

/// Sends the client flags and `count` options the server does not know, in one write, and
/// counts the option replies until the server closes or `count` replies came.
fn unknown_options(count: usize) -> (usize, TcpStream, server::ServerHandle) {
    let s = server();
    let mut c = TcpStream::connect(s.addrs.nbd.expect("nbd")).expect("connect");
    c.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let mut greeting = [0u8; nbd::handshake::GREETING_BYTES];
    c.read_exact(&mut greeting).expect("greeting");
    let mut bytes = (nbd::FLAG_C_FIXED_NEWSTYLE | nbd::FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec();
    for _ in 0..count {
        bytes.extend_from_slice(&nbd::IHAVEOPT.to_be_bytes());
        bytes.extend_from_slice(&0x7777u32.to_be_bytes());
        bytes.extend_from_slice(&0u32.to_be_bytes());
    }
    c.write_all(&bytes).expect("send options");
    let mut replies = 0;
    while replies < count {
        let mut head = [0u8; 20];
        if c.read_exact(&mut head).is_err() {
            break;
        }
        let magic = u64::from_be_bytes(head[..8].try_into().unwrap_or_default());
        assert_eq!(magic, nbd::OPTION_REPLY_MAGIC, "reply {replies}");
        let option = u32::from_be_bytes(head[8..12].try_into().unwrap_or_default());
        assert_eq!(option, 0x7777);
        let kind = u32::from_be_bytes(head[12..16].try_into().unwrap_or_default());
        assert_eq!(kind, nbd::REP_ERR_UNSUP);
        let len = u32::from_be_bytes(head[16..20].try_into().unwrap_or_default());
        let mut body = vec![0u8; len as usize];
        c.read_exact(&mut body).expect("reply body");
        replies += 1;
    }
    (replies, c, s)
}

/// 1,024 unknown options (the handshake's cap) get 1,024 replies; 1,025 get the same 1,024
/// replies and then the close: the option over the cap ends the session, the valid ones before
/// it are still answered.
#[test]
fn options_over_the_cap_are_answered_up_to_the_cap_then_closed() {
    let cap = nbd::handshake::DEFAULT_MAX_OPTIONS as usize;
    let (at_cap, _, _s) = unknown_options(cap);
    assert_eq!(at_cap, cap, "options up to the cap");
    let (over, mut c, _s2) = unknown_options(cap + 1);
    assert_eq!(over, cap, "options before the one over the cap");
    let mut byte = [0u8; 1];
    assert!(
        matches!(c.read(&mut byte), Ok(0) | Err(_)),
        "anything after the 1,024th reply"
    );
}
