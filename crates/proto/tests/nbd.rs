//! Tests of the NBD handshake state machine and the transmission codec.

use proto::nbd::handshake::*;
use proto::nbd::transmission::*;
use proto::nbd::*;
use proto::{Decode, Disposition};

const MAX: u32 = 32 << 20;

fn export(access: Access) -> ExportInfo {
    ExportInfo {
        name: "default".into(),
        description: "in-memory volume".into(),
        size_bytes: 1 << 30,
        flags: TransmissionFlags::builder(access)
            .flush(true)
            .fua(true)
            .trim(true)
            .write_zeroes(true)
            .multi_conn(true)
            .build(),
        block_sizes: Some(BlockSizes {
            minimum_bytes: 1,
            preferred_bytes: 4096,
            maximum_bytes: MAX,
        }),
    }
}

fn option(opt: u32, data: &[u8]) -> Vec<u8> {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn info_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut v = (name.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        v.extend_from_slice(&i.to_be_bytes());
    }
    v
}

/// Option replies parsed from server output: (option, reply type, data).
fn parse_replies(mut out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
    let mut v = Vec::new();
    while !out.is_empty() {
        assert_eq!(
            u64::from_be_bytes(out[0..8].try_into().unwrap()),
            OPTION_REPLY_MAGIC
        );
        let opt = u32::from_be_bytes(out[8..12].try_into().unwrap());
        let ty = u32::from_be_bytes(out[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(out[16..20].try_into().unwrap()) as usize;
        v.push((opt, ty, out[20..20 + len].to_vec()));
        out = &out[20 + len..];
    }
    v
}

/// Drives a handshake like a server would, answering lookups for "default" only. Returns the
/// server's output after the greeting, the final event, and the input left over.
fn drive(input: &[u8], chunk: usize) -> (Vec<u8>, Option<HandshakeEvent>, Vec<u8>) {
    let mut hs = Handshake::new(HandshakeLimits::default());
    let greeting = hs.pending_output().to_vec();
    hs.consume_output(greeting.len());
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut fed = 0;
    let finish = |hs: &mut Handshake, out: &mut Vec<u8>| {
        out.extend_from_slice(hs.pending_output());
        let n = hs.pending_output().len();
        hs.consume_output(n);
    };
    loop {
        let step = hs.receive(&buf).expect("valid handshake");
        buf.drain(..step.consumed_bytes);
        let event = match step.event {
            Some(HandshakeEvent::ExportRequested(q)) => {
                let answer = if q.name == "default" || q.name.is_empty() {
                    Ok(export(Access::ReadWrite))
                } else {
                    Err(ExportRefusal {
                        kind: RefusalKind::Unknown,
                        message: format!("no export named {:?}", q.name),
                    })
                };
                hs.answer_export(answer)
            }
            Some(HandshakeEvent::ListRequested) => {
                hs.answer_list(&[("default", "in-memory volume"), ("other", "")]);
                None
            }
            e => e,
        };
        if let Some(e @ (HandshakeEvent::Transmission { .. } | HandshakeEvent::Closed(_))) = event {
            finish(&mut hs, &mut out);
            buf.extend_from_slice(&input[fed..]);
            return (out, Some(e), buf);
        }
        finish(&mut hs, &mut out);
        if fed == input.len() {
            return (out, None, buf);
        }
        let n = chunk.min(input.len() - fed);
        buf.extend_from_slice(&input[fed..fed + n]);
        fed += n;
    }
}

#[test]
fn greeting_is_nbdmagic_ihaveopt_and_fixed_newstyle_no_zeroes() {
    let hs = Handshake::new(HandshakeLimits::default());
    let g = hs.pending_output();
    assert_eq!(g.len(), GREETING_BYTES);
    assert_eq!(&g[0..8], b"NBDMAGIC");
    assert_eq!(&g[8..16], b"IHAVEOPT");
    assert_eq!(&g[16..18], &[0, 3]);
}

#[test]
fn go_with_block_size_then_transmission_whole_and_byte_by_byte() {
    let mut input = 3u32.to_be_bytes().to_vec();
    input.extend(option(OPT_STRUCTURED_REPLY, &[]));
    input.extend(option(
        OPT_GO,
        &info_data("default", &[INFO_BLOCK_SIZE, INFO_NAME]),
    ));
    let first_request = RequestHeader {
        flags: 0,
        command: CommandType::Read,
        cookie: 1,
        offset_bytes: 0,
        length_bytes: 512,
    }
    .encode();
    input.extend_from_slice(&first_request);

    let whole = drive(&input, usize::MAX);
    let bytewise = drive(&input, 1);
    assert_eq!(whole.0, bytewise.0, "same output whatever the chunking");
    assert_eq!(whole.1, bytewise.1);
    assert_eq!(
        whole.2,
        first_request.to_vec(),
        "transmission bytes left untouched"
    );
    assert_eq!(bytewise.2, first_request.to_vec());

    let replies = parse_replies(&whole.0);
    assert_eq!(replies[0].0, OPT_STRUCTURED_REPLY);
    assert_eq!((replies[0].1, replies[0].2.len()), (REP_ACK, 0));
    let go: Vec<_> = replies[1..].iter().filter(|r| r.0 == OPT_GO).collect();
    assert_eq!(go.len(), 4, "EXPORT, NAME, BLOCK_SIZE, ACK: {go:?}");
    let info = export(Access::ReadWrite);
    let mut export_info = INFO_EXPORT.to_be_bytes().to_vec();
    export_info.extend_from_slice(&(1u64 << 30).to_be_bytes());
    export_info.extend_from_slice(&info.flags.bits().to_be_bytes());
    assert_eq!((go[0].1, &go[0].2), (REP_INFO, &export_info));
    assert_eq!(&go[1].2[..2], &INFO_NAME.to_be_bytes());
    assert_eq!(&go[1].2[2..], b"default");
    let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
    for v in [1u32, 4096, MAX] {
        bs.extend_from_slice(&v.to_be_bytes());
    }
    assert_eq!(go[2].2, bs);
    assert_eq!((go[3].1, go[3].2.len()), (REP_ACK, 0));
    assert!(matches!(whole.1, Some(HandshakeEvent::Transmission { info: i }) if i == info));
}

#[test]
fn info_stays_in_negotiation_and_unknown_exports_are_refused_with_a_message() {
    let mut input = 1u32.to_be_bytes().to_vec();
    input.extend(option(OPT_INFO, &info_data("nope", &[])));
    input.extend(option(OPT_INFO, &info_data("default", &[INFO_DESCRIPTION])));
    input.extend(option(OPT_GO, &info_data("", &[])));
    let (out, event, rest) = drive(&input, 7);
    assert!(rest.is_empty());
    assert!(matches!(event, Some(HandshakeEvent::Transmission { .. })));
    let r = parse_replies(&out);
    assert_eq!(r[0].1, REP_ERR_UNKNOWN);
    assert!(String::from_utf8_lossy(&r[0].2).contains("nope"));
    // INFO for default: EXPORT, DESCRIPTION, BLOCK_SIZE (always sent when known), ACK.
    let info: Vec<_> = r
        .iter()
        .filter(|x| x.0 == OPT_INFO && x.1 != REP_ERR_UNKNOWN)
        .collect();
    assert_eq!(info.len(), 4);
    assert_eq!(&info[1].2[2..], b"in-memory volume");
    assert_eq!(r.last().unwrap().1, REP_ACK);
}

#[test]
fn export_name_reply_honours_no_zeroes() {
    for (flags, expect_len) in [(3u32, 10usize), (1, 134)] {
        let mut input = flags.to_be_bytes().to_vec();
        input.extend(option(OPT_EXPORT_NAME, b"default"));
        let (out, event, _) = drive(&input, usize::MAX);
        assert_eq!(out.len(), expect_len);
        assert_eq!(&out[0..8], &(1u64 << 30).to_be_bytes());
        assert!(out[10..].iter().all(|&b| b == 0));
        assert!(matches!(event, Some(HandshakeEvent::Transmission { .. })));
    }
    // An unknown export cannot be answered: the session closes, nothing is sent.
    let mut input = 3u32.to_be_bytes().to_vec();
    input.extend(option(OPT_EXPORT_NAME, b"missing"));
    let (out, event, _) = drive(&input, usize::MAX);
    assert!(out.is_empty());
    assert_eq!(
        event,
        Some(HandshakeEvent::Closed(CloseReason::ExportNameRefused))
    );
}

#[test]
fn list_and_abort() {
    let mut input = 3u32.to_be_bytes().to_vec();
    input.extend(option(OPT_LIST, &[]));
    input.extend(option(OPT_LIST, b"x"));
    input.extend(option(OPT_ABORT, &[]));
    let (out, event, _) = drive(&input, 5);
    let r = parse_replies(&out);
    assert_eq!(r.len(), 5);
    assert_eq!(r[0].1, REP_SERVER);
    assert_eq!(&r[0].2[0..4], &7u32.to_be_bytes());
    assert_eq!(&r[0].2[4..11], b"default");
    assert_eq!(&r[0].2[11..], b"in-memory volume");
    assert_eq!(r[1].1, REP_SERVER);
    assert_eq!(r[2].1, REP_ACK);
    assert_eq!(r[3].1, REP_ERR_INVALID);
    assert_eq!((r[4].0, r[4].1), (OPT_ABORT, REP_ACK));
    assert_eq!(event, Some(HandshakeEvent::Closed(CloseReason::Aborted)));
}

#[test]
fn unknown_options_get_unsup_and_malformed_info_gets_invalid() {
    let mut input = 3u32.to_be_bytes().to_vec();
    input.extend(option(OPT_STARTTLS, &[]));
    input.extend(option(42, b"whatever"));
    let mut bad = info_data("default", &[]);
    bad[3] = 200; // name length runs past the data
    input.extend(option(OPT_GO, &bad));
    let (out, event, _) = drive(&input, 3);
    assert_eq!(event, None);
    let r = parse_replies(&out);
    assert_eq!(
        r.iter().map(|x| x.1).collect::<Vec<_>>(),
        vec![REP_ERR_UNSUP, REP_ERR_UNSUP, REP_ERR_INVALID]
    );
    assert!(String::from_utf8_lossy(&r[1].2).contains("42"));
}

#[test]
fn oversize_options_are_discarded_without_buffering() {
    let limits = HandshakeLimits {
        max_option_bytes: 64,
        max_options: 10,
    };
    let mut hs = Handshake::new(limits);
    let n = hs.pending_output().len();
    hs.consume_output(n);
    let mut input = 3u32.to_be_bytes().to_vec();
    input.extend(option(OPT_INFO, &vec![0u8; 100_000]));
    // Fed in 1000-byte pieces, every piece is consumed at once: nothing accumulates.
    for chunk in input.chunks(1000) {
        let step = hs.receive(chunk).unwrap();
        assert_eq!(step.consumed_bytes, chunk.len());
    }
    let r = parse_replies(hs.pending_output());
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1, REP_ERR_TOO_BIG);
    assert_eq!(hs.phase(), Phase::Negotiating);

    // An oversize EXPORT_NAME cannot be answered: fatal.
    let mut hs = Handshake::new(limits);
    let mut input = 3u32.to_be_bytes().to_vec();
    input.extend(option(OPT_EXPORT_NAME, &[b'a'; 65]));
    assert!(matches!(
        hs.receive(&input),
        Err(HandshakeError::ExportNameTooLong {
            len_bytes: 65,
            max_bytes: 64
        })
    ));
}

#[test]
fn protocol_violations_close_the_session() {
    let mut hs = Handshake::new(HandshakeLimits::default());
    let err = hs.receive(&4u32.to_be_bytes()).unwrap_err();
    assert!(matches!(
        err,
        HandshakeError::BadClientFlags { flags: 4, .. }
    ));
    assert!(err.to_string().contains("0x00000004"));
    assert_eq!(hs.phase(), Phase::Closed);

    let mut hs = Handshake::new(HandshakeLimits::default());
    let mut input = 3u32.to_be_bytes().to_vec();
    input.extend_from_slice(b"GARBAGE!GARBAGE!");
    assert!(matches!(
        hs.receive(&input),
        Err(HandshakeError::BadOptionMagic { .. })
    ));

    // A client without C_FIXED_NEWSTYLE may only send EXPORT_NAME.
    let mut hs = Handshake::new(HandshakeLimits::default());
    let mut input = 0u32.to_be_bytes().to_vec();
    input.extend(option(OPT_LIST, &[]));
    assert_eq!(
        hs.receive(&input),
        Err(HandshakeError::NotFixedNewstyle { option: OPT_LIST })
    );

    let mut hs = Handshake::new(HandshakeLimits {
        max_option_bytes: 64,
        max_options: 2,
    });
    let mut input = 3u32.to_be_bytes().to_vec();
    for _ in 0..3 {
        input.extend(option(99, &[]));
    }
    assert_eq!(
        hs.receive(&input),
        Err(HandshakeError::TooManyOptions { max_options: 2 })
    );
}

#[test]
fn receive_consumes_nothing_while_an_answer_is_pending() {
    let mut hs = Handshake::new(HandshakeLimits::default());
    let mut input = 3u32.to_be_bytes().to_vec();
    input.extend(option(OPT_LIST, &[]));
    input.extend(option(OPT_ABORT, &[]));
    let step = hs.receive(&input).unwrap();
    assert_eq!(step.event, Some(HandshakeEvent::ListRequested));
    assert_eq!(hs.phase(), Phase::AwaitingAnswer);
    let rest = &input[step.consumed_bytes..];
    assert_eq!(hs.receive(rest).unwrap().consumed_bytes, 0);
    hs.answer_list(&[]);
    let step = hs.receive(rest).unwrap();
    assert_eq!(step.consumed_bytes, rest.len());
    assert_eq!(
        step.event,
        Some(HandshakeEvent::Closed(CloseReason::Aborted))
    );
}

#[test]
fn transmission_flags_are_truthful() {
    let rw = export(Access::ReadWrite).flags;
    for f in [
        TransmissionFlags::HAS_FLAGS,
        TransmissionFlags::SEND_FLUSH,
        TransmissionFlags::SEND_FUA,
        TransmissionFlags::SEND_TRIM,
        TransmissionFlags::SEND_WRITE_ZEROES,
        TransmissionFlags::CAN_MULTI_CONN,
    ] {
        assert!(rw.contains(f), "{f:#x}");
    }
    assert!(!rw.contains(TransmissionFlags::READ_ONLY));
    let ro = export(Access::ReadOnly).flags;
    assert!(ro.contains(TransmissionFlags::READ_ONLY | TransmissionFlags::HAS_FLAGS));
    assert!(!ro.contains(TransmissionFlags::SEND_TRIM));
    assert!(!ro.contains(TransmissionFlags::SEND_FUA));
    assert!(!ro.contains(TransmissionFlags::SEND_WRITE_ZEROES));
    let bare = TransmissionFlags::builder(Access::ReadWrite).build();
    assert_eq!(bare.bits(), TransmissionFlags::HAS_FLAGS);
}

#[test]
fn requests_round_trip_and_write_payload_is_borrowed() {
    let data = vec![9u8; 4096];
    let h = RequestHeader {
        flags: CMD_FLAG_FUA,
        command: CommandType::Write,
        cookie: 7,
        offset_bytes: 1 << 20,
        length_bytes: 4096,
    };
    let mut bytes = h.encode().to_vec();
    assert_eq!(&bytes[0..4], &[0x25, 0x60, 0x95, 0x13]);
    bytes.extend_from_slice(&data);
    for cut in 0..bytes.len() {
        let d = decode_request(&bytes[..cut], MAX).unwrap();
        let Decode::NeedMore { total_bytes } = d else {
            panic!("cut {cut}: {d:?}")
        };
        assert!(total_bytes > cut);
    }
    let Decode::Done {
        frame,
        consumed_bytes,
    } = decode_request(&bytes, MAX).unwrap()
    else {
        panic!()
    };
    assert_eq!(consumed_bytes, 28 + 4096);
    assert_eq!(frame.header, h);
    assert!(frame.header.fua());
    assert_eq!(frame.payload.as_ptr(), bytes[28..].as_ptr(), "zero copy");
    for t in 0..=10u16 {
        let h = RequestHeader {
            command: CommandType::from_u16(t),
            length_bytes: if t == 1 { 0 } else { 1 << 30 },
            ..h
        };
        let got = decode_request_header(&h.encode(), u32::MAX)
            .unwrap()
            .frame();
        assert_eq!(got, Some(h));
        assert_eq!(CommandType::from_u16(t).to_u16(), t);
    }
}

#[test]
fn oversize_and_garbage_requests_are_rejected_before_any_payload() {
    let mut h = RequestHeader {
        flags: 0,
        command: CommandType::Write,
        cookie: 3,
        offset_bytes: 0,
        length_bytes: u32::MAX,
    };
    let err = decode_request(&h.encode(), MAX).unwrap_err();
    assert_eq!(err.disposition(), Disposition::ReplyThenClose { cookie: 3 });
    assert_eq!(
        err.errno(),
        Errno::Inval,
        "simple replies: EINVAL, not EOVERFLOW"
    );
    // Up to 2^25 bytes of oversize payload are skipped, not taken for an attack.
    let small_max = MAX / 2;
    h.length_bytes = small_max + 1;
    let err = decode_request(&h.encode(), small_max).unwrap_err();
    assert_eq!(
        err.disposition(),
        Disposition::ReplyAndContinue {
            cookie: 3,
            consumed_bytes: 28 + (small_max + 1) as usize
        }
    );
    h.command = CommandType::Read;
    h.length_bytes = MAX + 1;
    let err = decode_request(&h.encode(), MAX).unwrap_err();
    assert_eq!(
        err.disposition(),
        Disposition::ReplyAndContinue {
            cookie: 3,
            consumed_bytes: 28
        }
    );
    // A huge TRIM is a range, not a buffer: it decodes.
    h.command = CommandType::Trim;
    h.length_bytes = u32::MAX;
    assert!(decode_request(&h.encode(), MAX).unwrap().frame().is_some());
    let err = decode_request(b"\x00\x01\x02\x03rest", MAX).unwrap_err();
    assert_eq!(err, TransmissionError::BadMagic { found: 0x0001_0203 });
    assert_eq!(err.disposition(), Disposition::Close);
}

#[test]
fn check_request_enforces_advertised_flags_rights_and_range() {
    let rw = export(Access::ReadWrite);
    let ro = export(Access::ReadOnly);
    let size = rw.size_bytes;
    let req = |command, flags, offset_bytes, length_bytes| RequestHeader {
        flags,
        command,
        cookie: 1,
        offset_bytes,
        length_bytes,
    };
    use CommandType as C;
    assert_eq!(
        check_request(&req(C::Read, 0, 0, 4096), rw.flags, size),
        Ok(())
    );
    assert_eq!(
        check_request(&req(C::Write, CMD_FLAG_FUA, 0, 4096), rw.flags, size),
        Ok(())
    );
    // FUA on FLUSH is legal once SEND_FUA is advertised (qemu sends it).
    assert_eq!(
        check_request(&req(C::Flush, CMD_FLAG_FUA, 0, 0), rw.flags, size),
        Ok(())
    );
    assert_eq!(
        check_request(
            &req(C::WriteZeroes, CMD_FLAG_NO_HOLE, 0, 4096),
            rw.flags,
            size
        ),
        Ok(())
    );
    assert_eq!(
        check_request(
            &req(C::WriteZeroes, CMD_FLAG_FAST_ZERO, 0, 4096),
            rw.flags,
            size
        ),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request(&req(C::Write, 0, 0, 4096), ro.flags, size),
        Err(Errno::Perm)
    );
    assert_eq!(
        check_request(&req(C::Trim, 0, 0, 4096), ro.flags, size),
        Err(Errno::Perm)
    );
    assert_eq!(
        check_request(&req(C::Read, 0, 0, 4096), ro.flags, size),
        Ok(())
    );
    let no_trim = TransmissionFlags::builder(Access::ReadWrite).build();
    assert_eq!(
        check_request(&req(C::Trim, 0, 0, 4096), no_trim, size),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request(&req(C::Write, CMD_FLAG_FUA, 0, 4096), no_trim, size),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request(&req(C::Read, 0, size - 512, 1024), rw.flags, size),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request(&req(C::Write, 0, size, 1), rw.flags, size),
        Err(Errno::NoSpc)
    );
    assert_eq!(
        check_request(&req(C::Read, 0, u64::MAX, 1), rw.flags, size),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request(&req(C::Other(77), 0, 0, 0), rw.flags, size),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request(&req(C::Disc, 0, 0, 0), ro.flags, size),
        Ok(())
    );
}

#[test]
fn simple_replies_encode_and_decode() {
    let r = SimpleReply::error(0xdead_beef, Errno::Io);
    let bytes = r.encode();
    assert_eq!(&bytes[0..4], &[0x67, 0x44, 0x66, 0x98]);
    assert_eq!(&bytes[4..8], &5u32.to_be_bytes());
    assert_eq!(SimpleReply::decode(&bytes), Some(r));
    assert_eq!(SimpleReply::decode(&bytes[..15]), None);
    assert_eq!(SimpleReply::ok(1).error, 0);
    for e in [1u32, 5, 12, 22, 28, 75, 95, 108] {
        assert_eq!(Errno::from_u32(e).map(Errno::to_u32), Some(e));
    }
}
