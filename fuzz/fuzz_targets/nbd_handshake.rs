//! Arbitrary client bytes through the NBD handshake state machine, fed in pieces, with every
//! event answered as a server would (export found or refused, list answered), with TLS off or
//! required (STARTTLS taken as "TLS came up": plaintext keeps coming), so structured replies,
//! meta contexts and the TLS gate are all reached.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::nbd::handshake::{
    ExportRefusal, Handshake, HandshakeEvent, HandshakeLimits, Phase, RefusalKind, TlsPolicy,
};
use proto::nbd::{Access, BlockSizes, ExportInfo, TransmissionFlags};

fuzz_target!(|data: &[u8]| {
    let Some((&piece, rest)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece % 32) + 1;
    // Often start with valid client flags so the option parser is reached.
    let mut input = Vec::with_capacity(rest.len() + 4);
    if piece % 2 == 1 {
        input.extend_from_slice(&3u32.to_be_bytes());
    }
    input.extend_from_slice(rest);

    let policy = if piece % 4 < 2 {
        TlsPolicy::Off
    } else {
        TlsPolicy::Required
    };
    let limits = HandshakeLimits {
        max_option_bytes: 256,
        max_options: 64,
    };
    let mut hs = Handshake::with_tls(limits, policy);
    let mut buf: Vec<u8> = Vec::new();
    for chunk in input.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            let step = match hs.receive(&buf) {
                Ok(s) => s,
                Err(e) => {
                    let _ = e.to_string();
                    return;
                }
            };
            assert!(step.consumed_bytes <= buf.len());
            buf.drain(..step.consumed_bytes);
            let follow = match step.event {
                Some(HandshakeEvent::ExportRequested(q)) => {
                    hs.answer_export(if q.name.len() % 3 == 0 {
                        Ok(ExportInfo {
                            name: q.name.clone(),
                            description: "fuzz".into(),
                            size_bytes: 1 << 30,
                            flags: TransmissionFlags::builder(Access::ReadWrite)
                                .flush(true)
                                .trim(true)
                                .build(),
                            block_sizes: Some(BlockSizes {
                                minimum_bytes: 1,
                                preferred_bytes: 4096,
                                maximum_bytes: 1 << 25,
                            }),
                        })
                    } else {
                        Err(ExportRefusal {
                            kind: RefusalKind::Unknown,
                            message: q.name.clone(),
                        })
                    })
                }
                Some(HandshakeEvent::ListRequested) => {
                    hs.answer_list(&[("default", "d"), ("x", "")]);
                    None
                }
                Some(e) => Some(e),
                None => {
                    let n = hs.pending_output().len();
                    hs.consume_output(n);
                    break;
                }
            };
            if let Some(HandshakeEvent::StartTls) = follow {
                assert_eq!(policy, TlsPolicy::Required, "STARTTLS accepted without TLS");
                assert!(hs.tls_active());
            }
            if let Some(HandshakeEvent::Transmission { .. } | HandshakeEvent::Closed(_)) = follow {
                assert!(matches!(hs.phase(), Phase::Transmission | Phase::Closed));
                let n = hs.negotiated();
                assert!(!n.base_allocation || n.structured_replies);
                assert!(!n.tls || policy == TlsPolicy::Required);
                if policy == TlsPolicy::Required
                    && matches!(follow, Some(HandshakeEvent::Transmission { .. }))
                {
                    assert!(n.tls, "transmission without TLS on a TLS-only server");
                }
                return;
            }
            if matches!(hs.phase(), Phase::Transmission | Phase::Closed) {
                return;
            }
            let n = hs.pending_output().len();
            hs.consume_output(n);
        }
    }
});
