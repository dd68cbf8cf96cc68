//! Tests of the ullstack wire protocol codec: round trips, partial input, hostile input.

use proto::wire::*;
use proto::{Decode, Disposition};

const MAX: u32 = DEFAULT_MAX_PAYLOAD_BYTES;

fn frame(header: RequestHeader, payload: &[u8]) -> Vec<u8> {
    let mut v = header.encode().to_vec();
    v.extend_from_slice(payload);
    v
}

fn hello_frame(cookie: u64, tenant: &str, secret: &[u8], volume: &str) -> Vec<u8> {
    let body = HelloBody {
        tenant,
        secret,
        volume,
    };
    let mut payload = Vec::new();
    body.encode_into(&mut payload).unwrap();
    assert_eq!(payload.len(), body.encoded_len());
    frame(RequestHeader::hello(cookie, payload.len() as u32), &payload)
}

fn done(buf: &[u8]) -> (Request<'_>, usize) {
    match decode_request(buf, MAX).expect("valid frame") {
        Decode::Done {
            frame,
            consumed_bytes,
        } => (frame, consumed_bytes),
        other => panic!("expected a frame, got {other:?}"),
    }
}

#[test]
fn every_request_round_trips() {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let lc = RegisterBody {
        class: RegisterClass::LatencyCritical(Slo {
            p95_read_latency_ns: 500_000,
            iops: 120_000,
            read_pct: 100,
            request_size_bytes: 4096,
        }),
    };
    let cases: Vec<(Vec<u8>, Command<'_>, u64, u32)> = vec![
        (
            frame(RequestHeader::register(2), &lc.encode()),
            Command::Register(lc),
            2,
            0,
        ),
        (
            frame(RequestHeader::unregister(3, 7), &[]),
            Command::Unregister,
            3,
            7,
        ),
        (
            frame(RequestHeader::read(4, 7, 8192, 4096), &[]),
            Command::Read {
                offset_bytes: 8192,
                length_bytes: 4096,
            },
            4,
            7,
        ),
        (
            frame(RequestHeader::write(5, 7, 0, 4096, WriteMode::Fua), &data),
            Command::Write {
                offset_bytes: 0,
                mode: WriteMode::Fua,
                data: &data,
            },
            5,
            7,
        ),
        (
            frame(
                RequestHeader::write(6, 0, 1 << 40, 4096, WriteMode::WriteBack),
                &data,
            ),
            Command::Write {
                offset_bytes: 1 << 40,
                mode: WriteMode::WriteBack,
                data: &data,
            },
            6,
            0,
        ),
        (frame(RequestHeader::flush(7, 7), &[]), Command::Flush, 7, 7),
        (
            frame(RequestHeader::trim(8, 7, 4096, 1 << 20), &[]),
            Command::Trim {
                offset_bytes: 4096,
                length_bytes: 1 << 20,
            },
            8,
            7,
        ),
        (frame(RequestHeader::stats(9, 0), &[]), Command::Stats, 9, 0),
    ];
    for (bytes, command, cookie, handle) in cases {
        let (req, consumed) = done(&bytes);
        assert_eq!(consumed, bytes.len());
        assert_eq!(req.cookie, cookie);
        assert_eq!(req.handle, handle);
        assert_eq!(req.command, command);
        assert_eq!(req.command.opcode() as u8, bytes[5]);
    }
    let bytes = hello_frame(1, "A", b"s3cret", "vol0");
    let (req, _) = done(&bytes);
    assert_eq!(
        req.command,
        Command::Hello(HelloBody {
            tenant: "A",
            secret: b"s3cret",
            volume: "vol0"
        })
    );
}

#[test]
fn header_layout_is_little_endian_at_documented_offsets() {
    let h = RequestHeader::write(0x0102_0304_0506_0708, 9, 0x1122, 4096, WriteMode::Fua).encode();
    assert_eq!(&h[0..4], b"ULRQ");
    assert_eq!(h[4], 1);
    assert_eq!(h[5], Opcode::Write as u8);
    assert_eq!(&h[6..8], &[1, 0]);
    assert_eq!(&h[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(&h[16..20], &[9, 0, 0, 0]);
    assert_eq!(&h[20..24], &4096u32.to_le_bytes());
    assert_eq!(&h[24..32], &0x1122u64.to_le_bytes());
    assert_eq!(&h[32..36], &4096u32.to_le_bytes());
    assert_eq!(&h[36..40], &[0, 0, 0, 0]);
    let r = ReplyHeader::new(Opcode::Read, Status::IoError, 5, 12).encode();
    assert_eq!(&r[0..4], b"ULRP");
    assert_eq!(&r[6..8], &13u16.to_le_bytes());
}

#[test]
fn byte_by_byte_feeding_gives_need_more_then_the_frame() {
    let data = vec![0xabu8; 1000];
    let mut stream = hello_frame(1, "tenant-a", b"x", "default");
    stream.extend(frame(
        RequestHeader::write(2, 3, 512, 1000, WriteMode::WriteBack),
        &data,
    ));
    stream.extend(frame(RequestHeader::read(3, 3, 0, 512), &[]));

    let mut buf: Vec<u8> = Vec::new();
    let mut cookies = Vec::new();
    for &b in &stream {
        buf.push(b);
        loop {
            match decode_request(&buf, MAX).expect("valid stream") {
                Decode::NeedMore { total_bytes } => {
                    assert!(total_bytes > buf.len(), "NeedMore must ask for more");
                    break;
                }
                Decode::Done {
                    frame,
                    consumed_bytes,
                } => {
                    if let Command::Write { data: d, .. } = frame.command {
                        assert_eq!(d, &data[..]);
                    }
                    cookies.push(frame.cookie);
                    buf.drain(..consumed_bytes);
                }
            }
        }
    }
    assert_eq!(cookies, vec![1, 2, 3]);
    assert!(buf.is_empty());
}

#[test]
fn garbage_is_rejected_after_four_bytes_and_closes() {
    let err = decode_request(b"GET / HTTP/1.1\r\n", MAX).unwrap_err();
    assert!(matches!(err, WireError::BadMagic { found, .. } if &found == b"GET "));
    assert_eq!(err.disposition(), Disposition::Close);
    // Three bytes cannot be judged yet.
    assert_eq!(
        decode_request(b"GET", MAX).unwrap(),
        Decode::NeedMore {
            total_bytes: REQUEST_HEADER_BYTES
        }
    );
    // An NBD client talking to the wrong port is recognized at once.
    assert!(decode_request(&0x2560_9513u32.to_be_bytes(), MAX).is_err());
    assert!(err.to_string().contains("ULRQ") || err.to_string().contains("55, 4c"));
}

#[test]
fn a_header_claiming_4_gb_is_refused_from_the_header_alone() {
    let mut h = RequestHeader::write(77, 1, 0, u32::MAX, WriteMode::WriteBack);
    h.payload_len = u32::MAX;
    let bytes = h.encode();
    let err = decode_request(&bytes, MAX).unwrap_err();
    assert_eq!(
        err,
        WireError::PayloadTooLarge {
            opcode: Opcode::Write,
            claimed_bytes: u32::MAX,
            max_bytes: MAX,
            cookie: 77
        }
    );
    assert_eq!(
        err.disposition(),
        Disposition::ReplyThenClose { cookie: 77 }
    );
    assert_eq!(err.status(), Status::TooLarge);
    assert!(err.to_string().contains("4294967295"));
    // The header-only decoder says the same.
    assert!(decode_request_header(&bytes, MAX).is_err());
    // A control message claiming more than the control limit is refused too.
    let big_hello = RequestHeader::hello(1, CONTROL_PAYLOAD_MAX_BYTES + 1).encode();
    assert!(matches!(
        decode_request(&big_hello, MAX),
        Err(WireError::PayloadTooLarge {
            opcode: Opcode::Hello,
            ..
        })
    ));
    // And a READ header must not carry a payload at all.
    let mut read = RequestHeader::read(1, 0, 0, 4096);
    read.payload_len = 1;
    assert!(matches!(
        decode_request(&read.encode(), MAX),
        Err(WireError::PayloadTooLarge { max_bytes: 0, .. })
    ));
}

#[test]
fn truncated_frames_ask_for_exactly_the_rest() {
    let bytes = frame(
        RequestHeader::write(1, 0, 0, 4096, WriteMode::WriteBack),
        &[0u8; 4096],
    );
    for cut in [0, 1, 39, 40, 41, 4135] {
        match decode_request(&bytes[..cut], MAX).unwrap() {
            Decode::NeedMore { total_bytes } => {
                let expect = if cut < REQUEST_HEADER_BYTES { 40 } else { 4136 };
                assert_eq!(total_bytes, expect, "cut at {cut}");
            }
            d => panic!("cut at {cut}: {d:?}"),
        }
    }
}

#[test]
fn header_errors_are_fatal_with_the_cookie() {
    let mut bytes = RequestHeader::read(42, 0, 0, 4096).encode();
    bytes[4] = 2;
    let err = decode_request(&bytes, MAX).unwrap_err();
    assert_eq!(
        err,
        WireError::UnsupportedVersion {
            found: 2,
            cookie: 42
        }
    );
    assert_eq!(err.status(), Status::UnsupportedVersion);

    let mut bytes = RequestHeader::read(43, 0, 0, 4096).encode();
    bytes[5] = 99;
    let err = decode_request(&bytes, MAX).unwrap_err();
    assert_eq!(
        err,
        WireError::UnknownOpcode {
            found: 99,
            cookie: 43
        }
    );
    assert_eq!(
        err.disposition(),
        Disposition::ReplyThenClose { cookie: 43 }
    );

    let mut bytes = RequestHeader::read(44, 0, 0, 4096).encode();
    bytes[36] = 1;
    assert!(matches!(
        decode_request(&bytes, MAX),
        Err(WireError::ReservedNonZero { value: 1, .. })
    ));
}

#[test]
fn per_request_errors_let_the_connection_continue() {
    let data = [1u8; 16];
    let mut bad = RequestHeader::write(10, 0, 0, 16, WriteMode::WriteBack);
    bad.length_bytes = 8; // length says 8, payload says 16
    let mut stream = frame(bad, &data);
    stream.extend(frame(RequestHeader::flush(11, 0), &[]));
    let err = decode_request(&stream, MAX).unwrap_err();
    let Disposition::ReplyAndContinue {
        cookie,
        consumed_bytes,
    } = err.disposition()
    else {
        panic!("expected continue, got {:?}", err.disposition());
    };
    assert_eq!((cookie, consumed_bytes), (10, 56));
    assert_eq!(err.status(), Status::BadRequest);
    let (next, _) = done(&stream[consumed_bytes..]);
    assert_eq!((next.cookie, next.command), (11, Command::Flush));

    let mut flagged = RequestHeader::read(12, 0, 0, 512);
    flagged.flags = FLAG_FUA;
    let err = decode_request(&flagged.encode(), MAX).unwrap_err();
    assert!(matches!(
        err,
        WireError::BadFlags {
            flags: 1,
            allowed: 0,
            ..
        }
    ));

    let err = decode_request(&RequestHeader::read(13, 0, 0, MAX + 1).encode(), MAX).unwrap_err();
    assert_eq!(err.status(), Status::TooLarge);
    assert!(matches!(
        err.disposition(),
        Disposition::ReplyAndContinue {
            consumed_bytes: 40,
            ..
        }
    ));

    let err = decode_request(
        &RequestHeader::trim(14, 0, u64::MAX - 10, 4096).encode(),
        MAX,
    )
    .unwrap_err();
    assert_eq!(err.status(), Status::OutOfRange);

    let err = decode_request(&RequestHeader::read(15, 0, 0, 0).encode(), MAX).unwrap_err();
    assert!(matches!(
        err,
        WireError::ZeroLength {
            opcode: Opcode::Read,
            ..
        }
    ));
}

#[test]
fn hello_bodies_are_checked_field_by_field() {
    let ok = hello_frame(1, "t", b"s", "v");
    // Invalid UTF-8 in the tenant name.
    let mut bad = ok.clone();
    bad[REQUEST_HEADER_BYTES + HELLO_FIXED_BYTES] = 0xff;
    let err = decode_request(&bad, MAX).unwrap_err();
    assert!(
        matches!(
            &err,
            WireError::BadBody {
                problem: BodyError::NotUtf8 { field: "tenant" },
                ..
            }
        ),
        "{err:?}"
    );
    // Lengths that run past the body.
    let mut body = Vec::new();
    body.extend_from_slice(&10u16.to_le_bytes());
    body.extend_from_slice(&[0; 6]);
    body.extend_from_slice(b"abc");
    let err = decode_request(
        &frame(RequestHeader::hello(2, body.len() as u32), &body),
        MAX,
    )
    .unwrap_err();
    assert!(matches!(
        err,
        WireError::BadBody {
            problem: BodyError::Truncated {
                field: "tenant",
                needed_bytes: 10,
                available_bytes: 3
            },
            ..
        }
    ));
    // Trailing bytes.
    let mut long = ok.clone();
    long.push(0);
    let body_len = (long.len() - 40) as u32;
    long[20..24].copy_from_slice(&body_len.to_le_bytes());
    assert!(matches!(
        decode_request(&long, MAX),
        Err(WireError::BadBody {
            problem: BodyError::TrailingBytes { count_bytes: 1 },
            ..
        })
    ));
    // Encoder refuses over-long names instead of truncating them.
    let name = "n".repeat(NAME_MAX_BYTES + 1);
    let body = HelloBody {
        tenant: &name,
        secret: b"",
        volume: "",
    };
    assert!(matches!(
        body.encode_into(&mut Vec::new()),
        Err(BodyError::TooLong {
            field: "tenant",
            ..
        })
    ));
}

#[test]
fn register_bodies_validate_class_and_slo() {
    let be = RegisterBody {
        class: RegisterClass::BestEffort,
    };
    assert_eq!(RegisterBody::decode(&be.encode()), Ok(be));
    let mut b = be.encode();
    b[4] = 1; // request size on a BE registration
    assert!(matches!(
        RegisterBody::decode(&b),
        Err(BodyError::BestEffortWithSlo {
            field: "request_size_bytes",
            value: 1
        })
    ));
    let lc = RegisterBody {
        class: RegisterClass::LatencyCritical(Slo {
            p95_read_latency_ns: 1,
            iops: 1,
            read_pct: 100,
            request_size_bytes: 1,
        }),
    };
    let mut b = lc.encode();
    b[1] = 101;
    assert_eq!(
        RegisterBody::decode(&b),
        Err(BodyError::BadReadPct { value: 101 })
    );
    let mut b = lc.encode();
    b[0] = 3;
    assert_eq!(
        RegisterBody::decode(&b),
        Err(BodyError::BadClass { value: 3 })
    );
    let mut b = lc.encode();
    b[8..16].copy_from_slice(&0u64.to_le_bytes());
    assert_eq!(
        RegisterBody::decode(&b),
        Err(BodyError::ZeroSloField { field: "iops" })
    );
    assert!(matches!(
        RegisterBody::decode(&lc.encode()[..23]),
        Err(BodyError::Truncated {
            field: "p95_read_latency_ns",
            ..
        })
    ));
}

#[test]
fn replies_round_trip_with_bodies() {
    let hello = HelloReply {
        session_id: 9,
        volume_size_bytes: 1 << 30,
        block_size_bytes: 512,
        max_payload_bytes: MAX,
        access: Access::ReadWrite,
    };
    let mut stream = ReplyHeader::new(Opcode::Hello, Status::Ok, 1, HELLO_REPLY_BYTES as u32)
        .encode()
        .to_vec();
    stream.extend_from_slice(&hello.encode());
    let mut err_body = Vec::new();
    let refusal = ErrorBody {
        code: RefusalCode::CapacityExceeded.to_u32(),
        message: "needs 136000 tokens/s, 40000 left",
    };
    refusal.encode_into(&mut err_body);
    assert_eq!(err_body.len(), refusal.encoded_len());
    stream.extend_from_slice(
        &ReplyHeader::new(Opcode::Register, Status::Refused, 2, err_body.len() as u32).encode(),
    );
    stream.extend_from_slice(&err_body);

    let Decode::Done {
        frame,
        consumed_bytes,
    } = decode_reply(&stream, MAX).unwrap()
    else {
        panic!()
    };
    assert_eq!(frame.header.status, Status::Ok);
    assert_eq!(HelloReply::decode(frame.payload), Ok(hello));
    let Decode::Done { frame, .. } = decode_reply(&stream[consumed_bytes..], MAX).unwrap() else {
        panic!()
    };
    assert_eq!(frame.header.cookie, 2);
    assert_eq!(frame.header.status, Status::Refused);
    let body = ErrorBody::decode(frame.payload).unwrap();
    assert_eq!(
        RefusalCode::from_u32(body.code),
        RefusalCode::CapacityExceeded
    );
    assert_eq!(body.message, refusal.message);

    assert_eq!(
        RegisterReply::decode(&RegisterReply { handle: 7 }.encode()),
        Ok(RegisterReply { handle: 7 })
    );
    assert_eq!(ErrorBody::decode(&[]).unwrap().code, 0);
}

#[test]
fn reply_payload_limits_depend_on_the_opcode() {
    let read = ReplyHeader::new(Opcode::Read, Status::Ok, 1, MAX).encode();
    assert!(matches!(
        decode_reply(&read, MAX),
        Ok(Decode::NeedMore { total_bytes }) if total_bytes == REPLY_HEADER_BYTES + MAX as usize
    ));
    let too_big = ReplyHeader::new(Opcode::Read, Status::Ok, 1, MAX + 1).encode();
    assert!(matches!(
        decode_reply(&too_big, MAX),
        Err(WireError::PayloadTooLarge { .. })
    ));
    let flush = ReplyHeader::new(Opcode::Flush, Status::Ok, 1, 1 << 20).encode();
    assert!(decode_reply(&flush, MAX).is_err());
    assert!(matches!(
        decode_reply(b"ULRQ....", MAX),
        Err(WireError::BadMagic { .. })
    ));
}

#[test]
fn long_error_messages_are_clipped_at_a_char_boundary() {
    let msg = "é".repeat(3000); // 6000 bytes
    let body = ErrorBody {
        code: 1,
        message: &msg,
    };
    let mut out = Vec::new();
    body.encode_into(&mut out);
    assert!(out.len() <= CONTROL_PAYLOAD_MAX_BYTES as usize);
    assert_eq!(out.len(), body.encoded_len());
    let back = ErrorBody::decode(&out).unwrap();
    assert!(msg.starts_with(back.message));
}

#[test]
fn status_and_opcode_codes_round_trip() {
    for v in 0..=40u16 {
        assert_eq!(Status::from_u16(v).to_u16(), v);
    }
    assert_eq!(Status::from_u16(9), Status::TooLarge);
    assert_eq!(Status::from_u16(1000).to_string(), "unknown status 1000");
    for op in Opcode::ALL {
        assert_eq!(Opcode::from_u8(op as u8), Some(op));
    }
    assert_eq!(Opcode::from_u8(0), None);
    for v in 0..10u32 {
        assert_eq!(RefusalCode::from_u32(v).to_u32(), v);
    }
}
