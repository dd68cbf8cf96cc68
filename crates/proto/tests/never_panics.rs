//! Property tests: arbitrary bytes never panic any decoder, decoders never consume more than
//! they were given, and valid frames survive arbitrary splitting.

use proptest::prelude::*;
use proto::nbd::handshake::{
    ExportRefusal, Handshake, HandshakeEvent, HandshakeLimits, Negotiated, RefusalKind, TlsPolicy,
};
use proto::nbd::{transmission, Access, ExportInfo, TransmissionFlags};
use proto::wire::{self, RequestHeader, WriteMode};
use proto::Decode;

fn check_decode<T>(len: usize, d: &Decode<T>) {
    match d {
        Decode::NeedMore { total_bytes } => assert!(*total_bytes > len),
        Decode::Done { consumed_bytes, .. } => assert!(*consumed_bytes <= len),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn own_protocol_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                                         max in prop_oneof![Just(0u32), Just(64), Just(1 << 25), any::<u32>()]) {
        if let Ok(d) = wire::decode_request(&bytes, max) { check_decode(bytes.len(), &d) }
        if let Ok(d) = wire::decode_reply(&bytes, max) { check_decode(bytes.len(), &d) }
        let _ = wire::HelloBody::decode(&bytes);
        let _ = wire::RegisterBody::decode(&bytes);
        let _ = wire::HelloReply::decode(&bytes);
        let _ = wire::RegisterReply::decode(&bytes);
        let _ = wire::ErrorBody::decode(&bytes);
    }

    #[test]
    fn own_protocol_with_a_valid_magic_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..200)) {
        // Random bytes rarely start with the magic; force it so the deeper stages are reached.
        let mut bytes = b"ULRQ\x01".to_vec();
        bytes.extend_from_slice(&tail);
        if let Ok(d) = wire::decode_request(&bytes, 4096) { check_decode(bytes.len(), &d) }
        let mut bytes = b"ULRP\x01".to_vec();
        bytes.extend_from_slice(&tail);
        if let Ok(d) = wire::decode_reply(&bytes, 4096) { check_decode(bytes.len(), &d) }
    }

    #[test]
    fn nbd_transmission_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300), max in any::<u32>()) {
        if let Ok(d) = transmission::decode_request(&bytes, max) { check_decode(bytes.len(), &d) }
        let mut forced = 0x2560_9513u32.to_be_bytes().to_vec();
        forced.extend_from_slice(&bytes);
        if let Ok(d) = transmission::decode_request(&forced, max) {
            check_decode(forced.len(), &d);
            if let Some(r) = d.frame() {
                let flags = TransmissionFlags::from_bits(bytes.first().copied().unwrap_or(0).into());
                let _ = transmission::check_request(&r.header, flags, max.into());
                let all = Negotiated { structured_replies: true, base_allocation: true, tls: true };
                let _ = transmission::check_request_in(&r.header, flags, max.into(), all);
            }
        }
        let _ = transmission::SimpleReply::decode(&bytes);
        let _ = transmission::ChunkHeader::decode(&bytes);
        let _ = transmission::decode_block_status(&bytes);
    }

    #[test]
    fn nbd_handshake_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400), chunk in 1usize..64,
                                  tls in any::<bool>()) {
        let policy = if tls { TlsPolicy::Required } else { TlsPolicy::Off };
        let mut hs = Handshake::with_tls(HandshakeLimits { max_option_bytes: 128, max_options: 16 }, policy);
        // Valid-looking prefix half the time so options are reached.
        let mut input = Vec::new();
        if bytes.first().is_some_and(|b| b & 1 == 0) {
            input.extend_from_slice(&3u32.to_be_bytes());
            input.extend_from_slice(b"IHAVEOPT");
        }
        input.extend_from_slice(&bytes);
        let mut buf = Vec::new();
        for piece in input.chunks(chunk) {
            buf.extend_from_slice(piece);
            let Ok(step) = hs.receive(&buf) else { return Ok(()) };
            prop_assert!(step.consumed_bytes <= buf.len());
            buf.drain(..step.consumed_bytes);
            match step.event {
                Some(HandshakeEvent::ExportRequested(q)) => {
                    let answer = if q.name.len() % 2 == 0 {
                        Ok(ExportInfo { name: q.name.clone(), description: String::new(), size_bytes: 1 << 20,
                            flags: TransmissionFlags::builder(Access::ReadOnly).build(), block_sizes: None })
                    } else {
                        Err(ExportRefusal { kind: RefusalKind::Policy, message: "no".into() })
                    };
                    let _ = hs.answer_export(answer);
                }
                Some(HandshakeEvent::ListRequested) => hs.answer_list(&[("a", "b")]),
                Some(HandshakeEvent::StartTls) => prop_assert!(tls && hs.tls_active()),
                Some(_) => return Ok(()),
                None => {}
            }
            let n = hs.pending_output().len();
            hs.consume_output(n);
        }
    }

    #[test]
    fn valid_requests_survive_any_split(offset in any::<u64>().prop_map(|o| o >> 2), len in 1u32..5000,
                                        cookie in any::<u64>(), handle in any::<u32>(), split in any::<prop::sample::Index>(),
                                        fua in any::<bool>()) {
        let mode = if fua { WriteMode::Fua } else { WriteMode::WriteBack };
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut bytes = RequestHeader::write(cookie, handle, offset, len, mode).encode().to_vec();
        bytes.extend_from_slice(&payload);
        let cut = split.index(bytes.len());
        let first = wire::decode_request(&bytes[..cut], 1 << 20).unwrap();
        let need_more = matches!(first, Decode::NeedMore { .. });
        prop_assert!(need_more, "a strict prefix must not decode");
        let Decode::Done { frame, consumed_bytes } = wire::decode_request(&bytes, 1 << 20).unwrap() else {
            return Err(TestCaseError::fail("complete frame not decoded"));
        };
        prop_assert_eq!(consumed_bytes, bytes.len());
        prop_assert_eq!(frame.cookie, cookie);
        prop_assert_eq!(frame.handle, handle);
        prop_assert_eq!(frame.command, wire::Command::Write { offset_bytes: offset, mode, data: &payload });
    }
}
