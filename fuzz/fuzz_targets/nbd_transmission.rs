//! Arbitrary bytes through the NBD transmission-phase request parser, fed in pieces as a
//! server reads them, with each decoded request checked against a read-write and a read-only
//! export.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::nbd::transmission::{self, SimpleReply, REQUEST_HEADER_BYTES};
use proto::nbd::{ExportAccess, TransmissionFlags};
use proto::{Decode, Disposition};

const MAX_PAYLOAD_BYTES: u32 = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&piece, stream)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece % 64) + 1;
    let rw = TransmissionFlags::builder(ExportAccess::ReadWrite)
        .flush(true)
        .fua(true)
        .trim(true)
        .write_zeroes(true)
        .multi_conn(true)
        .build();
    let ro = TransmissionFlags::builder(ExportAccess::ReadOnly)
        .flush(true)
        .build();
    let mut buf: Vec<u8> = Vec::new();
    for chunk in stream.chunks(piece) {
        buf.extend_from_slice(chunk);
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
                            // An oversize WRITE's payload may not all be here: drop what is.
                            buf.drain(..consumed_bytes.min(buf.len()));
                        }
                        Disposition::Close | Disposition::ReplyThenClose { .. } => return,
                    }
                }
            }
        }
    }
    let _ = SimpleReply::decode(stream);
});
