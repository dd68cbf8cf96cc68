//! What every trace-reader target checks: arbitrary bytes through `TraceReader` (in pieces of
//! 1-64 bytes, like short reads, so lines split across buffer refills), strict and skipping;
//! each record through replay folding and the statistics. Besides "no panic": records have a
//! positive length and an end below 2^64; folded I/Os are whole sectors inside the capacity;
//! open-loop issue times never go backwards; a strict reader stops at its first error, and a
//! skipping one never returns a line error.

use std::io::{BufRead, BufReader, Read};

use workload::trace::{
    BadLines, Pacing, Replay, ReplayOptions, TraceFormat, TraceReader, TraceStats, SECTOR_BYTES,
};

/// Gives out its bytes `piece` at a time.
struct Pieces<'a> {
    data: &'a [u8],
    piece: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.piece.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fn input(data: &[u8], piece: usize) -> impl BufRead + '_ {
    BufReader::with_capacity(64, Pieces { data, piece })
}

pub fn check(data: &[u8], format: TraceFormat) {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let piece = usize::from(control % 64) + 1;
    // Capacity from 1 sector to about 1 TiB.
    let capacity = SECTOR_BYTES << (control % 32);

    // Strict: records until the first error, then nothing.
    let mut strict = TraceReader::new(input(data, piece), "fuzz", Some(format), BadLines::Fail)
        .expect("an explicit format needs no detection");
    let mut stats = TraceStats::new();
    let mut failed = false;
    for r in strict.by_ref() {
        assert!(!failed, "a strict reader went on after an error");
        match r {
            Ok(r) => {
                assert!(r.len_bytes > 0);
                assert!(r.offset_bytes.checked_add(r.len_bytes).is_some());
                stats.add(&r);
            }
            Err(e) => {
                assert!(e.to_string().starts_with("fuzz:"), "{e}");
                failed = true;
            }
        }
    }
    let _ = stats.report();

    // Skipping, through replay: never a line error; folded I/Os inside the device.
    let skipping = TraceReader::new(input(data, piece), "fuzz", Some(format), BadLines::Skip)
        .expect("an explicit format needs no detection");
    let opts = ReplayOptions {
        device: None,
        from_ns: 0,
        to_ns: None,
        capacity_bytes: capacity,
        pacing: Pacing::open_loop(1.5).expect("valid speed"),
    };
    let mut last = 0;
    for io in Replay::new(skipping, opts) {
        let io = io.expect("a skipping reader over memory never fails");
        assert!(io.len_bytes > 0 && io.len_bytes.is_multiple_of(SECTOR_BYTES));
        assert!(io.offset_bytes.is_multiple_of(SECTOR_BYTES));
        assert!(io.offset_bytes + io.len_bytes <= capacity);
        assert!(io.issue_at_ns >= last);
        last = io.issue_at_ns;
    }

    // Detection on the same bytes: any answer, or an error that says what to do.
    match TraceReader::new(data, "fuzz", None, BadLines::Skip) {
        Ok(r) => r.for_each(drop),
        Err(e) => assert!(e.to_string().contains("--trace-format"), "{e}"),
    }
}
