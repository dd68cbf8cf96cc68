//! Every request is checked before storage and answered with its status; bad frames close only
//! their own connection, without the server allocating what a header claims.

mod common;

use std::io::Write;

use common::*;
use proto::wire::{Opcode, RequestHeader, Status, WriteMode, REQUEST_HEADER_BYTES};

fn server() -> server::ServerHandle {
    start(&standard_config(&memory_backend("64MiB"), "on"))
}

#[test]
fn wrong_secret_then_right_secret_on_the_same_connection() {
    let s = server();
    let mut c = RawNative::connect(s.addrs.native.unwrap());
    let r = c.hello("alice", "not-the-secret", "vol");
    assert_eq!(r.status, Status::AuthFailed);
    let r = c.hello("mallory", "alice-secret", "vol");
    assert_eq!(
        r.status,
        Status::AuthFailed,
        "unknown tenant looks the same as a wrong secret"
    );
    let r = c.read(0, 4096);
    assert_eq!(
        r.status,
        Status::NotAuthenticated,
        "no I/O before a successful HELLO"
    );
    let r = c.hello("alice", "alice-secret", "vol");
    assert_eq!(
        r.status,
        Status::Ok,
        "the connection keeps serving after failed HELLOs"
    );
    let hello = proto::wire::HelloReply::decode(&r.payload).expect("hello reply body");
    assert_eq!(hello.volume_size_bytes, 64 << 20);
    assert_eq!(hello.access, proto::wire::Access::ReadWrite);
    assert_eq!(c.read(0, 4096).status, Status::Ok);
}

#[test]
fn wrong_volume_is_no_such_volume() {
    let s = server();
    let mut c = RawNative::connect(s.addrs.native.unwrap());
    let r = c.hello("alice", "alice-secret", "nope");
    assert_eq!(r.status, Status::NoSuchVolume);
    let r = c.hello("alice", "alice-secret", "other");
    assert_eq!(
        r.status,
        Status::NoSuchVolume,
        "a volume without a grant is not visible"
    );
    assert_eq!(c.hello("alice", "alice-secret", "vol").status, Status::Ok);
}

#[test]
fn range_rights_alignment_and_size_checked_before_storage() {
    let s = server();
    let addr = s.addrs.native.unwrap();
    let mut c = RawNative::connect(addr);
    assert_eq!(c.hello("alice", "alice-secret", "vol").status, Status::Ok);
    assert_eq!(
        c.read(64 << 20, 4096).status,
        Status::OutOfRange,
        "beyond the volume"
    );
    assert_eq!(
        c.read((64 << 20) - 512, 1024).status,
        Status::OutOfRange,
        "straddles the end"
    );
    assert_eq!(c.read(100, 4096).status, Status::Misaligned);
    let r = c.call(RequestHeader::read(0, 0, 0, 33 << 20), &[]);
    assert_eq!(r.status, Status::TooLarge, "READ above max_request_bytes");
    assert_eq!(
        c.call(RequestHeader::read(0, 9, 0, 4096), &[]).status,
        Status::UnknownHandle
    );
    assert_eq!(
        c.write(4096, &[7u8; 4096]).status,
        Status::Ok,
        "connection still serving"
    );

    let mut ro = RawNative::connect(addr);
    assert_eq!(
        ro.hello("reader", "reader-secret", "vol").status,
        Status::Ok
    );
    let r = ro.write(0, &[1u8; 4096]);
    assert_eq!(r.status, Status::ReadOnly, "write on a read-only grant");
    let r = ro.call(RequestHeader::trim(0, 0, 0, 4096), &[]);
    assert_eq!(r.status, Status::ReadOnly, "trim is a write");
    let r = ro.read(4096, 4096);
    assert_eq!(r.status, Status::Ok);
    assert_eq!(
        r.payload,
        vec![7u8; 4096],
        "the refused write did not reach storage"
    );

    let mut ranged = RawNative::connect(addr);
    assert_eq!(
        ranged.hello("ranged", "ranged-secret", "vol").status,
        Status::Ok
    );
    assert_eq!(
        ranged.write(2040 * 512, &[3u8; 4096]).status,
        Status::Ok,
        "ends at LBA 2048"
    );
    assert_eq!(
        ranged.write(2041 * 512, &[3u8; 4096]).status,
        Status::OutOfRange,
        "crosses LBA 2048"
    );
    assert_eq!(
        ranged.read(1 << 20, 4096).status,
        Status::OutOfRange,
        "outside the granted range"
    );
}

#[test]
fn garbage_truncated_and_huge_headers_close_only_their_connection() {
    let s = server();
    let addr = s.addrs.native.unwrap();
    let mut good = RawNative::connect(addr);
    assert_eq!(
        good.hello("alice", "alice-secret", "vol").status,
        Status::Ok
    );
    assert_eq!(good.write(0, &pattern(0, 8192, 1)).status, Status::Ok);

    // Garbage: not our magic → closed without a reply.
    let mut garbage = RawNative::connect(addr);
    garbage.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n and more bytes that are not a frame");
    assert!(garbage.closed_by_server(), "garbage closes the connection");

    // A header claiming a 4 GB payload: answered TOO_LARGE and closed, nothing allocated.
    let rss_before = rss_bytes();
    let mut huge = RawNative::connect(addr);
    assert_eq!(
        huge.hello("alice", "alice-secret", "vol").status,
        Status::Ok
    );
    let mut header = RequestHeader::write(77, 0, 0, u32::MAX, WriteMode::WriteBack);
    header.payload_len = u32::MAX;
    huge.send_raw(&header.encode());
    huge.send_raw(&[0u8; 65536]);
    let reply = huge.recv().expect("an error reply before the close");
    assert_eq!(reply.cookie, 77);
    assert_eq!(reply.status, Status::TooLarge);
    assert!(huge.closed_by_server(), "4 GB header closes the connection");
    let grown = rss_bytes().saturating_sub(rss_before);
    assert!(
        grown < 64 << 20,
        "server grew by {grown} bytes after a 4 GB claim"
    );

    // A truncated frame (half a header, then the client goes away) and a truncated payload.
    let mut trunc = RawNative::connect(addr);
    assert_eq!(
        trunc.hello("alice", "alice-secret", "vol").status,
        Status::Ok
    );
    let h = RequestHeader::write(5, 0, 0, 4096, WriteMode::WriteBack).encode();
    trunc.send_raw(&h[..REQUEST_HEADER_BYTES / 2]);
    drop(trunc);
    let mut trunc2 = RawNative::connect(addr);
    assert_eq!(
        trunc2.hello("alice", "alice-secret", "vol").status,
        Status::Ok
    );
    trunc2.send_raw(&h);
    trunc2.send_raw(&[9u8; 1000]);
    trunc2
        .stream
        .shutdown(std::net::Shutdown::Write)
        .expect("half close");
    assert!(
        trunc2.closed_by_server(),
        "a frame cut short ends with the connection"
    );

    // The first connection never noticed any of it.
    let r = good.read(0, 8192);
    assert_eq!(r.status, Status::Ok);
    assert_eq!(r.payload, pattern(0, 8192, 1));
    let r = good.read(0, 4096);
    assert_eq!(
        &r.payload[..],
        &pattern(0, 4096, 1)[..],
        "the truncated write never landed"
    );
}

#[test]
fn bad_fields_in_a_whole_frame_are_answered_and_the_connection_continues() {
    let s = server();
    let mut c = RawNative::connect(s.addrs.native.unwrap());
    assert_eq!(c.hello("alice", "alice-secret", "vol").status, Status::Ok);
    let mut h = RequestHeader::read(0, 0, 0, 4096);
    h.flags = 0x8000;
    let r = c.call(h, &[]);
    assert_eq!(r.status, Status::BadRequest);
    assert_eq!(r.opcode, Opcode::Read);
    let r = c.call(RequestHeader::read(0, 0, 0, 0), &[]);
    assert_eq!(r.status, Status::BadRequest, "zero-length read");
    assert_eq!(c.read(0, 4096).status, Status::Ok);
}

#[test]
fn nbd_refusals_keep_the_connection() {
    let s = server();
    let addr = s.addrs.nbd.unwrap();
    assert!(
        RawNbd::connect(addr, "missing").is_err(),
        "unknown export is refused in GO"
    );
    let mut ro = RawNbd::connect(addr, "ro").expect("ro export");
    assert_ne!(ro.flags & proto::nbd::TransmissionFlags::READ_ONLY, 0);
    assert_eq!(
        ro.write(0, &[1u8; 4096], false),
        proto::nbd::Errno::Perm.to_u32()
    );
    assert_eq!(
        ro.read(64 << 20, 4096),
        Err(proto::nbd::Errno::Inval.to_u32()),
        "beyond the end"
    );
    assert_eq!(ro.read(0, 4096).map(|d| d.len()), Ok(4096), "still serving");

    let mut rw = RawNbd::connect(addr, "default").expect("default export");
    assert_eq!(
        rw.read(100, 4096),
        Err(proto::nbd::Errno::Inval.to_u32()),
        "misaligned"
    );
    assert_eq!(
        rw.write(0, &[5u8; 1024], true),
        0,
        "1 KiB FUA write below the preferred size"
    );
    assert_eq!(rw.read(0, 1024), Ok(vec![5u8; 1024]));
    // A READ above the maximum is answered EINVAL (simple replies: EOVERFLOW is for
    // structured ones) and the connection goes on.
    let cookie = rw.send(0, 0, 0, 64 << 20, &[]);
    assert_eq!(rw.recv_head(), (proto::nbd::Errno::Inval.to_u32(), cookie));
    assert_eq!(rw.flush(), 0);

    // Bad magic closes that connection only.
    let mut bad = RawNbd::connect(addr, "default").expect("export");
    bad.stream.write_all(&[0xFFu8; 28]).expect("send garbage");
    let mut buf = [0u8; 1];
    assert!(matches!(
        std::io::Read::read(&mut bad.stream, &mut buf),
        Ok(0) | Err(_)
    ));
    assert_eq!(
        rw.read(0, 1024),
        Ok(vec![5u8; 1024]),
        "other NBD connection unaffected"
    );
    rw.disconnect();
}
