//! Arbitrary bytes through the ullstack wire protocol decoders, fed the way a server and a
//! client see them: in pieces, with frames consumed as they complete and errors handled by
//! their disposition. Asserts the decoders' contracts, not just "no panic".
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::wire::{self, ErrorBody, HelloBody, HelloReply, RegisterBody, RegisterReply};
use proto::{Decode, Disposition};

/// Small limit so that payload paths are reached with short inputs.
const MAX_PAYLOAD_BYTES: u32 = 512;

fuzz_target!(|data: &[u8]| {
    // First byte picks the piece size of a simulated short-read stream.
    let Some((&piece, stream)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece % 64) + 1;

    // Server side: requests.
    let mut buf: Vec<u8> = Vec::new();
    'server: for chunk in stream.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            match wire::decode_request(&buf, MAX_PAYLOAD_BYTES) {
                Ok(Decode::NeedMore { total_bytes }) => {
                    assert!(total_bytes > buf.len());
                    assert!(
                        total_bytes
                            <= wire::REQUEST_HEADER_BYTES
                                + wire::CONTROL_PAYLOAD_MAX_BYTES as usize
                    );
                    break;
                }
                Ok(Decode::Done { consumed_bytes, .. }) => {
                    assert!(
                        consumed_bytes >= wire::REQUEST_HEADER_BYTES && consumed_bytes <= buf.len()
                    );
                    buf.drain(..consumed_bytes);
                }
                Err(e) => {
                    let _ = e.to_string();
                    let _ = e.status();
                    match e.disposition() {
                        Disposition::ReplyAndContinue { consumed_bytes, .. } => {
                            assert!(consumed_bytes <= buf.len());
                            buf.drain(..consumed_bytes);
                        }
                        Disposition::Close | Disposition::ReplyThenClose { .. } => break 'server,
                    }
                }
            }
        }
    }

    // Client side: replies.
    let mut buf: Vec<u8> = Vec::new();
    'client: for chunk in stream.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            match wire::decode_reply(&buf, MAX_PAYLOAD_BYTES) {
                Ok(Decode::NeedMore { total_bytes }) => {
                    assert!(total_bytes > buf.len());
                    break;
                }
                Ok(Decode::Done {
                    frame,
                    consumed_bytes,
                }) => {
                    assert_eq!(
                        consumed_bytes,
                        wire::REPLY_HEADER_BYTES + frame.payload.len()
                    );
                    let _ = HelloReply::decode(frame.payload);
                    let _ = RegisterReply::decode(frame.payload);
                    let _ = ErrorBody::decode(frame.payload);
                    buf.drain(..consumed_bytes);
                }
                Err(_) => break 'client,
            }
        }
    }

    // Bodies on their own, and re-encoding what decodes.
    if let Ok(h) = HelloBody::decode(stream) {
        let mut out = Vec::new();
        h.encode_into(&mut out).expect("a decoded body re-encodes");
        assert_eq!(out, stream);
    }
    if let Ok(r) = RegisterBody::decode(stream) {
        assert_eq!(&r.encode()[..], stream);
    }
});
