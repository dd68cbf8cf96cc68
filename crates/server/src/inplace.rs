//! Frames decoded in place from received chunks: a multishot receive's provided buffers are
//! parsed where the kernel wrote them, and only what straddles a chunk's end is copied.
//!
//! # What it implements
//! The decoders (own protocol and NBD) read frames through [`FrameInput`]: the bytes not yet
//! decoded, consuming, discarding and saying how many bytes the frame in progress needs. A
//! connection's [`InBuf`] is one; [`InPlace`], a view of one received chunk, is the other.
//! [`feed_chunk`] hands a chunk to a decoder ([`ChunkDecoder`]) so that bytes are copied into
//! the connection's input only when they cannot be decoded where they lie.
//!
//! # Design
//! A chunk is fed in arrival order, and the input buffer always holds the bytes that came
//! before it. Three cases:
//!
//! * *The input holds nothing* (the usual case under pipelined reads): the chunk's frames are
//!   decoded in place; what the decoder leaves — the start of a frame whose rest is in the
//!   next chunk, or whole frames past the step's budget — is copied into the input, with the
//!   decoder's `want_bytes` and any discard still owed.
//! * *The input holds the start of a frame* whose length the decoder named: only the missing
//!   bytes of that frame are copied from the chunk (*stitching*); once whole it is decoded from
//!   the input, and the rest of the chunk is decoded in place as above.
//! * *Anything else* (the input holds whole frames the budget left, or its frame's length is
//!   not known yet, or decoding stopped: STARTTLS, a close): the chunk is appended as it is,
//!   and the input is decoded as before.
//!
//! Worked example: 1 KiB NBD writes (1,052 B frames) pipelined 32 at a time arrive in 4 KiB
//! provided buffers: each buffer holds about four frames, the first of which began in the
//! buffer before. Per buffer the tail of that frame is stitched (at most 1,052 B copied) and
//! the three frames after it are decoded in place: about a quarter of the payload is copied
//! where all of it was. Under 4 KiB reads (28 B or 32 B requests) nothing is copied but the
//! rare request cut by a buffer's end.
//!
//! # What it leaves out
//! Payloads that span chunks are still assembled in the input (a 4 KiB write in 4 KiB
//! buffers always spans two): the decoders take one contiguous payload.

use crate::inbuf::InBuf;

/// What a frame decoder reads from: the undecoded bytes and the bookkeeping of consuming them.
pub trait FrameInput {
    /// The bytes not yet decoded.
    fn data(&self) -> &[u8];
    /// The first `n` bytes are decoded.
    fn consume(&mut self, n: usize);
    /// Drops the next `n` bytes: those held now and the rest as they arrive.
    fn discard(&mut self, n: usize);
    /// The frame in progress needs `n` bytes in all (from the start of [`FrameInput::data`]).
    fn set_want_bytes(&mut self, n: usize);
}

impl FrameInput for InBuf {
    fn data(&self) -> &[u8] {
        InBuf::data(self)
    }

    fn consume(&mut self, n: usize) {
        InBuf::consume(self, n);
    }

    fn discard(&mut self, n: usize) {
        InBuf::discard(self, n);
    }

    fn set_want_bytes(&mut self, n: usize) {
        self.want_bytes = n;
    }
}

/// One received chunk, decoded where it lies.
pub struct InPlace<'a> {
    bytes: &'a [u8],
    start: usize,
    want_bytes: usize,
    /// Bytes a discard still owes past the chunk's end.
    discard_after: usize,
}

impl<'a> InPlace<'a> {
    pub fn new(bytes: &'a [u8]) -> InPlace<'a> {
        InPlace {
            bytes,
            start: 0,
            want_bytes: 0,
            discard_after: 0,
        }
    }

    /// Bytes decoded or discarded.
    pub fn consumed_bytes(&self) -> usize {
        self.start
    }

    /// What the decoder left.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.start..]
    }
}

impl FrameInput for InPlace<'_> {
    fn data(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        assert!(self.start <= self.bytes.len(), "consumed past the chunk");
        self.want_bytes = 0;
    }

    fn discard(&mut self, n: usize) {
        let now = n.min(self.bytes.len() - self.start);
        self.consume(now);
        self.discard_after = n - now;
    }

    fn set_want_bytes(&mut self, n: usize) {
        self.want_bytes = n;
    }
}

/// A connection's decoder, over either kind of input. Returns whether decoding may go on
/// (false: it stopped for a reason other than the input or the budget, such as STARTTLS or
/// bad input, and what follows must wait in the input buffer).
pub trait ChunkDecoder {
    fn decode<I: FrameInput>(&mut self, input: &mut I) -> bool;
}

/// What feeding one chunk did, for the counters and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fed {
    /// Bytes of the chunk copied into the input buffer.
    pub copied_bytes: usize,
    /// Bytes of the chunk decoded where they lay.
    pub in_place_bytes: usize,
}

/// Feeds one received `chunk` (the bytes after everything `input` holds) to `decoder`:
/// decodes in place what it can and copies the rest into `input` (see the module essay).
/// `go_on` is false once decoding stopped earlier in the step: the chunk is appended whole.
/// Returns what was copied and whether decoding may go on.
pub fn feed_chunk<D: ChunkDecoder>(
    input: &mut InBuf,
    chunk: &[u8],
    mut go_on: bool,
    decoder: &mut D,
) -> (Fed, bool) {
    let mut fed = Fed::default();
    let mut off = 0;
    if go_on && (input.pending_bytes() > 0 || input.discard_owed_bytes() > 0) {
        let missing = if input.discard_owed_bytes() > 0 {
            input.discard_owed_bytes()
        } else {
            input.want_bytes.saturating_sub(input.pending_bytes())
        };
        off = missing.min(chunk.len());
        input.extend_from_slice(&chunk[..off]);
        fed.copied_bytes += off;
        if input.pending_bytes() > 0 && !input.incomplete_frame() {
            go_on = decoder.decode(input);
        }
    }
    if !go_on || input.pending_bytes() > 0 || input.discard_owed_bytes() > 0 {
        // Not clean: the frame in progress still incomplete (the chunk ran out), its length
        // unknown (a handshake names none), or frames waiting that the decoder did not take.
        // Appended, and decoded from the input as before, unless the frame is known to be
        // still incomplete.
        input.extend_from_slice(&chunk[off..]);
        fed.copied_bytes += chunk.len() - off;
        if go_on && off < chunk.len() && !input.incomplete_frame() {
            go_on = decoder.decode(input);
        }
        return (fed, go_on);
    }
    let mut view = InPlace::new(&chunk[off..]);
    go_on = decoder.decode(&mut view);
    fed.in_place_bytes = view.consumed_bytes();
    input.note_consumed_in_place(view.consumed_bytes());
    let rest = view.rest();
    if !rest.is_empty() {
        // The frame's length first: the input makes room for it.
        input.want_bytes = view.want_bytes;
        input.extend_from_slice(rest);
        fed.copied_bytes += rest.len();
    } else if view.discard_after > 0 {
        input.discard(view.discard_after);
    }
    (fed, go_on)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of a toy protocol: one length byte, then that many payload bytes. A length of
    /// 255 is refused: its header and 40 payload bytes are discarded, arrived or not.
    /// A length of 254 stops decoding (as STARTTLS would). Records every payload, and stops
    /// after `budget` frames.
    struct Toy {
        frames: Vec<Vec<u8>>,
        budget: usize,
        stops: usize,
        /// Says how long a partial frame is (NBD transmission does; its handshake does not).
        names_length: bool,
    }

    impl Toy {
        /// A decoder with no budget limit that has seen nothing yet.
        fn new(names_length: bool) -> Toy {
            Toy {
                frames: Vec::new(),
                budget: usize::MAX,
                stops: 0,
                names_length,
            }
        }
    }

    const REFUSED_PAYLOAD: usize = 40;

    impl ChunkDecoder for Toy {
        fn decode<I: FrameInput>(&mut self, input: &mut I) -> bool {
            while self.budget > 0 {
                let data = input.data();
                let Some(&len) = data.first() else {
                    break;
                };
                if len == 255 {
                    input.discard(1 + REFUSED_PAYLOAD);
                    continue;
                }
                if len == 254 {
                    input.consume(1);
                    self.stops += 1;
                    return false;
                }
                let frame = 1 + usize::from(len);
                if data.len() < frame {
                    if self.names_length {
                        input.set_want_bytes(frame);
                    }
                    break;
                }
                self.frames.push(data[1..frame].to_vec());
                input.consume(frame);
                self.budget -= 1;
            }
            true
        }
    }

    /// `n` frames of lengths cycling through `lens`, payload bytes numbering the frame.
    fn stream(n: usize, lens: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut bytes = Vec::new();
        let mut frames = Vec::new();
        for k in 0..n {
            let len = lens[k % lens.len()];
            bytes.push(len);
            let payload = vec![k as u8; usize::from(len)];
            bytes.extend_from_slice(&payload);
            frames.push(payload);
        }
        (bytes, frames)
    }

    /// Feeds `bytes` cut into chunks of `cut` bytes; decodes what is left in the input at
    /// the end of each step of `chunks_per_step` chunks, as the worker does.
    fn run(bytes: &[u8], cut: usize, budget: usize, chunks_per_step: usize) -> (Toy, Fed, InBuf) {
        let mut toy = Toy::new(true);
        let mut input = InBuf::new();
        let mut total = Fed::default();
        for step in bytes
            .chunks(cut)
            .collect::<Vec<_>>()
            .chunks(chunks_per_step)
        {
            toy.budget = budget;
            if input.pending_bytes() > 0 && !input.incomplete_frame() {
                toy.decode(&mut input);
            }
            let mut go_on = true;
            for chunk in step {
                let (fed, more) = feed_chunk(&mut input, chunk, go_on, &mut toy);
                go_on = more;
                total.copied_bytes += fed.copied_bytes;
                total.in_place_bytes += fed.in_place_bytes;
            }
        }
        toy.budget = usize::MAX;
        toy.decode(&mut input);
        (toy, total, input)
    }

    /// Every frame comes out once and in order, whatever the cut, the budget and the number
    /// of chunks in a step; every byte is either copied or decoded in place, never both.
    #[test]
    fn frames_come_out_whole_and_in_order_across_chunk_boundaries() {
        let (bytes, frames) = stream(300, &[27, 3, 100, 0, 60]);
        for cut in [1, 2, 7, 28, 29, 64, 101, 4096] {
            for budget in [1, 3, 64, usize::MAX] {
                for per_step in [1, 2, 3] {
                    let (toy, fed, input) = run(&bytes, cut, budget, per_step);
                    assert_eq!(toy.frames, frames, "cut {cut}, budget {budget}");
                    assert_eq!(input.pending_bytes(), 0);
                    assert!(fed.copied_bytes + fed.in_place_bytes <= bytes.len());
                    assert_eq!(
                        input.consumed_total_bytes() as usize,
                        bytes.len(),
                        "cut {cut}: consumed bytes counted once"
                    );
                }
            }
        }
    }

    /// A request split over two and over three chunks is stitched: only its own bytes are
    /// copied, and the frames after it in the last chunk are decoded in place.
    #[test]
    fn a_frame_split_over_chunks_copies_only_itself() {
        // Frames of 28 B (one length byte + 27): 10 of them, 280 B.
        let (bytes, frames) = stream(10, &[27]);
        // Over two chunks: frame 3 (bytes 84..112) is cut at 100.
        let (toy, fed, _) = run(&bytes, 100, usize::MAX, 3);
        assert_eq!(toy.frames, frames);
        // Chunk 1 leaves bytes 84..100 (16 B, copied) and chunk 2 gives 12 more to stitch;
        // frame 7 (196..224) is cut at 200: 4 + 24. Nothing else is copied.
        assert_eq!(fed.copied_bytes, 16 + 12 + 4 + 24);
        // Over three chunks: a 100 B frame cut into 30 + 40 + 31.
        let (bytes, frames) = stream(1, &[100]);
        let mut toy = Toy::new(true);
        let mut input = InBuf::new();
        let mut copied = 0;
        for chunk in [&bytes[..30], &bytes[30..70], &bytes[70..]] {
            let (fed, go_on) = feed_chunk(&mut input, chunk, true, &mut toy);
            assert!(go_on);
            copied += fed.copied_bytes;
        }
        assert_eq!(toy.frames, frames);
        assert_eq!(copied, 101);
        assert_eq!(input.pending_bytes(), 0);
    }

    /// Pipelined frames within chunks are decoded without a copy: with chunks cut at frame
    /// boundaries nothing is copied at all.
    #[test]
    fn whole_frames_in_a_chunk_are_not_copied() {
        let (bytes, frames) = stream(64, &[27]);
        let (toy, fed, _) = run(&bytes, 28 * 16, usize::MAX, 1);
        assert_eq!(toy.frames, frames);
        assert_eq!(fed.copied_bytes, 0);
        assert_eq!(fed.in_place_bytes, bytes.len());
    }

    /// Frames past the budget wait in the input, copied once; the next step decodes them
    /// from there before new chunks.
    #[test]
    fn frames_past_the_budget_wait_in_the_input() {
        let (bytes, frames) = stream(10, &[27]);
        let mut toy = Toy {
            frames: Vec::new(),
            budget: 4,
            stops: 0,
            names_length: true,
        };
        let mut input = InBuf::new();
        let (fed, _) = feed_chunk(&mut input, &bytes[..140], true, &mut toy);
        assert_eq!(toy.frames.len(), 4);
        assert_eq!((fed.in_place_bytes, fed.copied_bytes), (112, 28));
        // Budget spent: the next chunk is appended as it is.
        let (fed, _) = feed_chunk(&mut input, &bytes[140..], true, &mut toy);
        assert_eq!(fed.copied_bytes, 140);
        toy.budget = usize::MAX;
        toy.decode(&mut input);
        assert_eq!(toy.frames, frames);
    }

    /// A refused frame's payload is discarded across chunks, in place or in the input.
    #[test]
    fn a_discard_carries_over_chunk_boundaries() {
        let (good, frames) = stream(3, &[5]);
        let mut bytes = vec![255u8];
        bytes.extend_from_slice(&[9u8; REFUSED_PAYLOAD]);
        bytes.extend_from_slice(&good);
        for cut in [1, 10, 20, 41, 45] {
            let (toy, _, input) = run(&bytes, cut, usize::MAX, 1);
            assert_eq!(toy.frames, frames, "cut {cut}");
            assert_eq!(input.discard_owed_bytes(), 0);
        }
    }

    /// A decoder that does not name a partial frame's length (the NBD handshake) still gets
    /// every frame within the feed that completes it, the bytes going through the input.
    #[test]
    fn frames_of_unnamed_length_are_decoded_in_the_feed_that_completes_them() {
        let (bytes, frames) = stream(6, &[27, 60]);
        for cut in [5, 30, 61] {
            let mut toy = Toy::new(false);
            let mut input = InBuf::new();
            for chunk in bytes.chunks(cut) {
                let (_, go_on) = feed_chunk(&mut input, chunk, true, &mut toy);
                assert!(go_on);
            }
            assert_eq!(toy.frames, frames, "cut {cut}");
            assert_eq!(input.pending_bytes(), 0, "cut {cut}");
        }
    }

    /// A decoder that stops (STARTTLS) leaves every later byte in the input, in order.
    #[test]
    fn a_stop_leaves_the_rest_in_the_input() {
        let mut bytes = vec![2u8, 1, 1, 254];
        bytes.extend_from_slice(b"tls bytes");
        let mut toy = Toy::new(true);
        let mut input = InBuf::new();
        let (_, go_on) = feed_chunk(&mut input, &bytes[..6], true, &mut toy);
        assert!(!go_on);
        let (fed, go_on) = feed_chunk(&mut input, &bytes[6..], go_on, &mut toy);
        assert!(!go_on);
        assert_eq!(fed.copied_bytes, bytes.len() - 6);
        assert_eq!(input.data(), b"tls bytes");
        assert_eq!(toy.stops, 1);
    }
}
