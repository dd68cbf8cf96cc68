//! Tests of the NBD extensions the handshake and transmission codecs speak beyond the
//! baseline: structured replies, the `base:allocation` metadata context and BLOCK_STATUS,
//! and STARTTLS with TLS required.

use proto::nbd::handshake::*;
use proto::nbd::transmission::*;
use proto::nbd::*;

fn export() -> ExportInfo {
    ExportInfo {
        name: "default".into(),
        description: String::new(),
        size_bytes: 1 << 20,
        flags: TransmissionFlags::builder(Access::ReadWrite)
            .flush(true)
            .build(),
        block_sizes: None,
    }
}

fn option(opt: u32, data: &[u8]) -> Vec<u8> {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn go(name: &str) -> Vec<u8> {
    let mut v = (name.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&0u16.to_be_bytes());
    option(OPT_GO, &v)
}

fn meta(opt: u32, name: &str, queries: &[&str]) -> Vec<u8> {
    let mut v = (name.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        v.extend_from_slice(&(q.len() as u32).to_be_bytes());
        v.extend_from_slice(q.as_bytes());
    }
    option(opt, &v)
}

fn client_flags() -> Vec<u8> {
    (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec()
}

/// Option replies: (option, reply type, data).
fn replies(mut out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
    let mut v = Vec::new();
    while out.len() >= 20 {
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
    assert!(out.is_empty(), "trailing {} bytes", out.len());
    v
}

struct Run {
    replies: Vec<(u32, u32, Vec<u8>)>,
    events: Vec<HandshakeEvent>,
    negotiated: Negotiated,
}

/// Feeds `input` `chunk` bytes at a time, answering every export question with
/// [`export`] for "default"; StartTls is taken as "TLS came up" (the plaintext keeps coming).
fn drive(policy: TlsPolicy, input: &[u8], chunk: usize) -> Run {
    let mut hs = Handshake::with_tls(HandshakeLimits::default(), policy);
    let n = hs.pending_output().len();
    hs.consume_output(n);
    let (mut out, mut events, mut buf, mut fed) = (Vec::new(), Vec::new(), Vec::new(), 0);
    loop {
        let step = hs.receive(&buf).expect("valid handshake");
        buf.drain(..step.consumed_bytes);
        let event = match step.event {
            Some(HandshakeEvent::ExportRequested(q)) => {
                let answer = if q.name == "default" {
                    Ok(export())
                } else {
                    Err(ExportRefusal {
                        kind: RefusalKind::Unknown,
                        message: "no".into(),
                    })
                };
                events.push(HandshakeEvent::ExportRequested(q));
                hs.answer_export(answer)
            }
            e => e,
        };
        out.extend_from_slice(hs.pending_output());
        let n = hs.pending_output().len();
        hs.consume_output(n);
        if let Some(e) = event {
            let end = matches!(
                e,
                HandshakeEvent::Transmission { .. } | HandshakeEvent::Closed(_)
            );
            events.push(e);
            if end {
                break;
            }
            continue;
        }
        if step.consumed_bytes > 0 {
            continue;
        }
        if fed == input.len() {
            break;
        }
        let n = chunk.min(input.len() - fed);
        buf.extend_from_slice(&input[fed..fed + n]);
        fed += n;
    }
    Run {
        replies: replies(&out),
        events,
        negotiated: hs.negotiated(),
    }
}

fn concat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn structured_replies_and_base_allocation_are_negotiated_byte_by_byte_as_whole() {
    let input = concat(&[
        client_flags(),
        option(OPT_STRUCTURED_REPLY, &[]),
        meta(OPT_SET_META_CONTEXT, "default", &["base:allocation"]),
        go("default"),
    ]);
    for chunk in [1, 7, input.len()] {
        let run = drive(TlsPolicy::Off, &input, chunk);
        let types: Vec<(u32, u32)> = run.replies.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            types,
            [
                (OPT_STRUCTURED_REPLY, REP_ACK),
                (OPT_SET_META_CONTEXT, REP_META_CONTEXT),
                (OPT_SET_META_CONTEXT, REP_ACK),
                (OPT_GO, REP_INFO),
                (OPT_GO, REP_ACK),
            ],
            "chunk {chunk}"
        );
        let ctx = &run.replies[1].2;
        assert_eq!(&ctx[..4], &META_BASE_ALLOCATION_ID.to_be_bytes());
        assert_eq!(&ctx[4..], b"base:allocation");
        assert!(matches!(
            run.events.last(),
            Some(HandshakeEvent::Transmission { .. })
        ));
        assert_eq!(
            run.negotiated,
            Negotiated {
                structured_replies: true,
                base_allocation: true,
                tls: false
            }
        );
    }
}

#[test]
fn set_meta_context_needs_structured_replies_and_is_tied_to_its_export() {
    // Without structured replies: INVALID, nothing selected.
    let input = concat(&[
        client_flags(),
        meta(OPT_SET_META_CONTEXT, "default", &["base:allocation"]),
        go("default"),
    ]);
    let run = drive(TlsPolicy::Off, &input, 5);
    assert_eq!(run.replies[0].1, REP_ERR_INVALID);
    assert!(!run.negotiated.base_allocation && !run.negotiated.structured_replies);
    // Selected for another export name: GO "default" enters without it.
    let input = concat(&[
        client_flags(),
        option(OPT_STRUCTURED_REPLY, &[]),
        meta(OPT_SET_META_CONTEXT, "other", &["base:allocation"]),
        go("default"),
    ]);
    let run = drive(TlsPolicy::Off, &input, 3);
    assert!(run.negotiated.structured_replies);
    assert!(
        !run.negotiated.base_allocation,
        "selection for `other` leaked into `default`"
    );
    // A later SET with an unknown context replaces the selection.
    let input = concat(&[
        client_flags(),
        option(OPT_STRUCTURED_REPLY, &[]),
        meta(OPT_SET_META_CONTEXT, "default", &["base:allocation"]),
        meta(OPT_SET_META_CONTEXT, "default", &["qemu:dirty-bitmap:x"]),
        go("default"),
    ]);
    let run = drive(TlsPolicy::Off, &input, 64);
    let set_replies: Vec<u32> = run
        .replies
        .iter()
        .filter(|r| r.0 == OPT_SET_META_CONTEXT)
        .map(|r| r.1)
        .collect();
    assert_eq!(set_replies, [REP_META_CONTEXT, REP_ACK, REP_ACK]);
    assert!(!run.negotiated.base_allocation);
}

#[test]
fn list_meta_context_lists_base_allocation_for_no_query_and_the_base_namespace() {
    for (queries, listed) in [
        (&[][..], true),
        (&["base:"][..], true),
        (&["base:allocation"][..], true),
        (&["qemu:"][..], false),
    ] {
        let input = concat(&[
            client_flags(),
            meta(OPT_LIST_META_CONTEXT, "default", queries),
            option(OPT_ABORT, &[]),
        ]);
        let run = drive(TlsPolicy::Off, &input, 4);
        let contexts: Vec<&[u8]> = run
            .replies
            .iter()
            .filter(|r| r.1 == REP_META_CONTEXT)
            .map(|r| &r.2[4..])
            .collect();
        assert_eq!(contexts.len(), usize::from(listed), "{queries:?}");
        if listed {
            assert_eq!(contexts[0], b"base:allocation");
        }
    }
}

#[test]
fn malformed_meta_context_data_is_invalid_not_a_panic() {
    let mut lying = (7u32).to_be_bytes().to_vec();
    lying.extend_from_slice(b"default");
    lying.extend_from_slice(&u32::MAX.to_be_bytes()); // query count far beyond the data
    for data in [vec![], vec![0, 0, 0, 9, b'x'], lying] {
        let input = concat(&[
            client_flags(),
            option(OPT_STRUCTURED_REPLY, &[]),
            option(OPT_SET_META_CONTEXT, &data),
            option(OPT_ABORT, &[]),
        ]);
        let run = drive(TlsPolicy::Off, &input, 3);
        assert_eq!(run.replies[1].1, REP_ERR_INVALID, "{data:?}");
    }
}

#[test]
fn tls_required_refuses_everything_but_starttls_and_abort_then_forgets_clear_options() {
    let input = concat(&[
        client_flags(),
        option(OPT_STRUCTURED_REPLY, &[]),
        go("default"),
        option(OPT_LIST, &[]),
        option(OPT_STARTTLS, &[]),
        // Inside TLS (the driver keeps feeding plaintext):
        option(OPT_STARTTLS, &[]),
        go("default"),
    ]);
    let run = drive(TlsPolicy::Required, &input, 2);
    let types: Vec<(u32, u32)> = run.replies.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        types,
        [
            (OPT_STRUCTURED_REPLY, REP_ERR_TLS_REQD),
            (OPT_GO, REP_ERR_TLS_REQD),
            (OPT_LIST, REP_ERR_TLS_REQD),
            (OPT_STARTTLS, REP_ACK),
            (OPT_STARTTLS, REP_ERR_INVALID),
            (OPT_GO, REP_INFO),
            (OPT_GO, REP_ACK),
        ]
    );
    assert!(run.events.contains(&HandshakeEvent::StartTls));
    assert_eq!(
        run.negotiated,
        Negotiated {
            structured_replies: false,
            base_allocation: false,
            tls: true
        }
    );
}

#[test]
fn structured_replies_negotiated_before_starttls_do_not_survive_it() {
    let input = concat(&[
        client_flags(),
        option(OPT_STARTTLS, &[]),
        option(OPT_STRUCTURED_REPLY, &[]),
        go("default"),
    ]);
    let run = drive(TlsPolicy::Required, &input, 1);
    assert!(run.negotiated.structured_replies && run.negotiated.tls);
    // Without TLS configured, STARTTLS is unsupported and nothing else changes.
    let input = concat(&[client_flags(), option(OPT_STARTTLS, &[]), go("default")]);
    let run = drive(TlsPolicy::Off, &input, 1);
    assert_eq!(
        run.replies[0],
        (OPT_STARTTLS, REP_ERR_UNSUP, run.replies[0].2.clone())
    );
    assert!(!run.events.contains(&HandshakeEvent::StartTls));
    assert!(!run.negotiated.tls);
    // STARTTLS with data is invalid.
    let input = concat(&[
        client_flags(),
        option(OPT_STARTTLS, &[1]),
        option(OPT_ABORT, &[]),
    ]);
    let run = drive(TlsPolicy::Required, &input, 1);
    assert_eq!(run.replies[0].1, REP_ERR_INVALID);
}

#[test]
fn export_name_before_tls_closes_the_session() {
    let input = concat(&[client_flags(), option(OPT_EXPORT_NAME, b"default")]);
    let run = drive(TlsPolicy::Required, &input, 3);
    assert_eq!(
        run.events.last(),
        Some(&HandshakeEvent::Closed(CloseReason::TlsRequired))
    );
    assert!(run.replies.is_empty(), "EXPORT_NAME cannot carry a reply");
}

#[test]
fn block_status_is_checked_against_the_negotiation_flags_and_range() {
    let flags = export().flags;
    let size = 1 << 20;
    let req = |flags: u16, offset: u64, len: u32| RequestHeader {
        flags,
        command: CommandType::BlockStatus,
        cookie: 9,
        offset_bytes: offset,
        length_bytes: len,
    };
    let with = Negotiated {
        structured_replies: true,
        base_allocation: true,
        tls: false,
    };
    let without = Negotiated {
        base_allocation: false,
        ..with
    };
    assert_eq!(
        check_request_in(&req(0, 0, 4096), flags, size, with),
        Ok(())
    );
    assert_eq!(
        check_request_in(&req(CMD_FLAG_REQ_ONE, 0, 4096), flags, size, with),
        Ok(())
    );
    assert_eq!(
        check_request_in(&req(0, 0, 4096), flags, size, without),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request(&req(0, 0, 4096), flags, size),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request_in(&req(0, 0, 0), flags, size, with),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request_in(&req(0, size - 512, 1024), flags, size, with),
        Err(Errno::Inval)
    );
    assert_eq!(
        check_request_in(&req(CMD_FLAG_DF, 0, 512), flags, size, with),
        Err(Errno::Inval)
    );
}

#[test]
fn chunks_encode_to_the_spec_layout_and_decode_back() {
    let head = offset_data_head(7, 1 << 20, 4096);
    let h = ChunkHeader::decode(&head).expect("chunk header");
    assert_eq!(
        (h.flags, h.reply_type, h.cookie, h.length_bytes),
        (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 7, 8 + 4096)
    );
    assert_eq!(&head[..4], &[0x66, 0x8e, 0x33, 0xef]);
    assert_eq!(&head[20..28], &(1u64 << 20).to_be_bytes());

    let err = error_chunk(8, Errno::Inval);
    let h = ChunkHeader::decode(&err).expect("error header");
    assert_eq!(
        (h.reply_type, h.length_bytes, h.done()),
        (REPLY_TYPE_ERROR, 6, true)
    );
    assert_eq!(&err[20..24], &22u32.to_be_bytes());
    assert_eq!(&err[24..26], &[0, 0]);

    let extents = [
        Extent {
            length_bytes: 65536,
            flags: STATE_HOLE | STATE_ZERO,
        },
        Extent {
            length_bytes: 4096,
            flags: 0,
        },
    ];
    let mut out = Vec::new();
    encode_block_status(9, META_BASE_ALLOCATION_ID, &extents, &mut out);
    let h = ChunkHeader::decode(&out).expect("block status header");
    assert_eq!(
        (h.reply_type, h.length_bytes as usize, h.cookie),
        (REPLY_TYPE_BLOCK_STATUS, 4 + 2 * EXTENT_BYTES, 9)
    );
    let (id, back) = decode_block_status(&out[20..]).expect("payload");
    assert_eq!(
        (id, back.as_slice()),
        (META_BASE_ALLOCATION_ID, &extents[..])
    );
    assert!(
        decode_block_status(&out[20..27]).is_none(),
        "partial extent"
    );
    assert!(ChunkHeader::decode(&out[..19]).is_none());
}
