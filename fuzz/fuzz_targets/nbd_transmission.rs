//! Arbitrary bytes through the NBD transmission-phase request parser, fed in pieces as a
//! server reads them, with each decoded request checked against a read-write and a read-only
//! export, with and without structured replies and `base:allocation`; the structured-reply
//! chunk decoders get the raw bytes too, and block-status encoding round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::nbd::handshake::Negotiated;
use proto::nbd::transmission::{self, ChunkHeader, Extent, SimpleReply, REQUEST_HEADER_BYTES};
use proto::nbd::{Access, TransmissionFlags};
use proto::{Decode, Disposition};

const MAX_PAYLOAD_BYTES: u32 = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&piece, stream)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece % 64) + 1;
    let rw = TransmissionFlags::builder(Access::ReadWrite)
        .flush(true)
        .fua(true)
        .trim(true)
        .write_zeroes(true)
        .multi_conn(true)
        .build();
    let ro = TransmissionFlags::builder(Access::ReadOnly)
        .flush(true)
        .build();
    let mut buf: Vec<u8> = Vec::new();
    // Bytes of a refused WRITE's payload still to arrive, dropped as they do (as the server's
    // input buffer does).
    let mut skip = 0usize;
    for chunk in stream.chunks(piece) {
        let dropped = skip.min(chunk.len());
        skip -= dropped;
        buf.extend_from_slice(&chunk[dropped..]);
        loop {
            match transmission::decode_request(&buf, MAX_PAYLOAD_BYTES) {
                Ok(Decode::NeedMore { total_bytes }) => {
                    assert!(total_bytes > buf.len());
                    assert!(total_bytes <= REQUEST_HEADER_BYTES + MAX_PAYLOAD_BYTES as usize);
                    break;
                }
                Ok(Decode::Done {
                    frame,
                    consumed_bytes,
                }) => {
                    assert_eq!(consumed_bytes, REQUEST_HEADER_BYTES + frame.payload.len());
                    let _ = transmission::check_request(&frame.header, rw, 1 << 20);
                    let _ = transmission::check_request(&frame.header, ro, 1 << 20);
                    let negotiated = Negotiated {
                        structured_replies: true,
                        base_allocation: true,
                        tls: false,
                    };
                    let _ = transmission::check_request_in(&frame.header, rw, 1 << 20, negotiated);
                    // A block-status reply built from the header's numbers decodes back.
                    let extents = [Extent {
                        length_bytes: frame.header.length_bytes,
                        flags: frame.header.flags.into(),
                    }];
                    let mut out = Vec::new();
                    transmission::encode_block_status(frame.header.cookie, 1, &extents, &mut out);
                    let head = ChunkHeader::decode(&out).expect("own chunk decodes");
                    assert_eq!(head.cookie, frame.header.cookie);
                    let (id, back) = transmission::decode_block_status(
                        &out[transmission::STRUCTURED_REPLY_HEADER_BYTES..],
                    )
                    .expect("own payload decodes");
                    assert_eq!((id, back.as_slice()), (1, &extents[..]));
                    let reply = SimpleReply::ok(frame.header.cookie).encode();
                    assert_eq!(
                        SimpleReply::decode(&reply),
                        Some(SimpleReply::ok(frame.header.cookie))
                    );
                    buf.drain(..consumed_bytes);
                }
                Err(e) => {
                    let _ = e.to_string();
                    match e.disposition() {
                        Disposition::ReplyAndContinue { consumed_bytes, .. } => {
                            // An oversize WRITE's payload may not all be here: drop what
                            // is, and the rest as it arrives.
                            let now = consumed_bytes.min(buf.len());
                            buf.drain(..now);
                            skip = consumed_bytes - now;
                        }
                        Disposition::Close | Disposition::ReplyThenClose { .. } => return,
                    }
                }
            }
        }
    }
    let _ = SimpleReply::decode(stream);
    let _ = ChunkHeader::decode(stream);
    let _ = transmission::decode_block_status(stream);
});
