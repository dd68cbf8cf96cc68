//! Arbitrary server bytes through the client side of NBD: `proto::nbd::client::ClientHandshake`
//! (the greeting and option replies a hostile or broken server could send), fed in pieces,
//! then whatever follows through `SimpleReplyReader` with a table of requests in flight.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::nbd::client::{ClientHandshake, ClientOptions, Progress, SimpleReplyReader};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let piece = usize::from(first % 32) + 1;
    let options = ClientOptions {
        export: "default".into(),
        structured_replies: first & 0x40 != 0,
        base_allocation: first & 0x80 != 0,
    };
    let mut hs = ClientHandshake::new(options.clone()).expect("a short export name is valid");
    let mut used = 0;
    let mut connected = None;
    for chunk in rest.chunks(piece) {
        assert!(hs.wanted_bytes() > 0, "a handshake in progress always wants input");
        used += chunk.len();
        let out = hs.pending_output().len();
        hs.consume_output(out);
        match hs.receive(chunk) {
            Ok(Progress::NeedMore) => {}
            Ok(Progress::Connected(c)) => {
                connected = Some(c);
                break;
            }
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        }
    }
    let Some(c) = connected else {
        return;
    };
    assert_eq!(hs.wanted_bytes(), 0);
    if c.base_allocation_id.is_some() {
        assert!(c.structured_replies && options.base_allocation);
    }
    if c.structured_replies {
        assert!(options.structured_replies);
    }
    // Cookies 0..8 in flight: even ones READs of 4 KiB, odd ones WRITEs.
    let mut reader = SimpleReplyReader::new();
    let mut replies = 0usize;
    let tail = &rest[used.min(rest.len())..];
    let len = |cookie: u64| (cookie < 8).then_some(if cookie % 2 == 0 { 4096 } else { 0 });
    for chunk in tail.chunks(piece) {
        if reader.push(chunk, len, |_| replies += 1).is_err() {
            return;
        }
    }
    assert!(replies * 16 <= tail.len(), "{replies} replies from {} bytes", tail.len());
});
