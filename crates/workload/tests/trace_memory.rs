//! Replays generated traces far larger than the memory budget, one of every format the readers
//! know (blkparse, MSR, SPC, CSV, MQSim, DiskSim), and fails if the live heap ever passes it:
//! the readers and the replay stream, they do not hold the trace. (The device-level and
//! system-run replays, which sit on these, are checked the same way in
//! `crates/sim/tests/trace_memory.rs`.)
//!
//! A counting global allocator (`testkit::heap`) tracks the live heap bytes of each thread (so
//! the test harness's own allocations on other threads do not count) and their peak. The trace is generated on
//! the fly by a `Read` that formats lines into a fixed buffer (it allocates nothing), so the
//! only heap in play is the reader's. The meter is checked first: holding the records in a
//! `Vec` must break the same budget, so the bound is one a non-streaming reader would cross.

use std::io::{BufReader, Read, Write};

use testkit::heap::{peak_above, reset};

use workload::trace::{
    BadLines, Pacing, Replay, ReplayOptions, TraceFormat, TraceReader, TraceStats,
};

#[global_allocator]
static A: testkit::heap::Counting = testkit::heap::Counting;

/// The heap budget of a replay: 1 MiB.
const BUDGET_BYTES: usize = 1 << 20;
/// Each generated trace: 64 MiB of text, 64 times the budget.
const TRACE_BYTES: u64 = 64 << 20;

/// Generates about `total` bytes of a trace, line by line, without allocating.
struct Generated {
    format: TraceFormat,
    /// Offsets stay below this many sectors.
    span_sectors: u64,
    i: u64,
    produced: u64,
    total: u64,
    line: [u8; 160],
    line_len: usize,
    line_pos: usize,
}

impl Generated {
    fn new(format: TraceFormat, total: u64) -> Generated {
        Generated {
            format,
            span_sectors: 1 << 30,
            i: 0,
            produced: 0,
            total,
            line: [0; 160],
            line_len: 0,
            line_pos: 0,
        }
    }

    fn next_line(&mut self) {
        let i = self.i;
        self.i += 1;
        let sector = (i * 7919) % self.span_sectors;
        let read = !i.is_multiple_of(3);
        let mut w = &mut self.line[..];
        let room = w.len();
        match self.format {
            TraceFormat::Msr => writeln!(
                w,
                "{},hm,1,{},{},4096,1111",
                128_166_372_003_061_629 + i * 250,
                if read { "Read" } else { "Write" },
                sector * 512
            ),
            TraceFormat::Blkparse => writeln!(
                w,
                "  8,0    {}  {:>7}  {}.{:09}  697  Q  {} {} + 8 [kworker]",
                i % 4,
                i,
                i / 40_000,
                (i % 40_000) * 25_000,
                if read { "R" } else { "WS" },
                sector
            ),
            TraceFormat::Spc => writeln!(
                w,
                "0,{sector},4096,{},{}.{:06}",
                if read { "r" } else { "w" },
                i / 40_000,
                (i % 40_000) * 25
            ),
            TraceFormat::Csv => writeln!(
                w,
                "{},{},{},4096",
                i * 25_000,
                if read { "R" } else { "W" },
                sector * 512
            ),
            TraceFormat::Mqsim => writeln!(w, "{} 0 {sector} 8 {}", i * 25_000, u8::from(read)),
            TraceFormat::Disksim => writeln!(
                w,
                "{}.{:06} 0 {sector} 8 {}",
                i / 40,
                (i % 40) * 25_000,
                u8::from(read)
            ),
        }
        .expect("a generated line fits the buffer");
        self.line_len = room - w.len();
        self.line_pos = 0;
    }
}

impl Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        // Whole lines only: the last one may end a little past `total`.
        while n < buf.len() {
            if self.line_pos == self.line_len {
                if self.produced >= self.total {
                    break;
                }
                self.next_line();
            }
            let take = (self.line_len - self.line_pos).min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&self.line[self.line_pos..self.line_pos + take]);
            self.line_pos += take;
            self.produced += take as u64;
            n += take;
        }
        Ok(n)
    }
}

fn replay(format: TraceFormat) -> (u64, usize) {
    let input = BufReader::with_capacity(64 * 1024, Generated::new(format, TRACE_BYTES));
    let base = reset();
    let reader = TraceReader::new(input, "generated", None, BadLines::Fail).expect("detected");
    assert_eq!(reader.format(), format);
    let opts = ReplayOptions {
        device: None,
        from_ns: 0,
        to_ns: None,
        capacity_bytes: 1 << 30,
        pacing: Pacing::open_loop(1.0).unwrap(),
    };
    let mut ios = 0u64;
    let mut last = 0u64;
    for io in Replay::new(reader, opts) {
        let io = io.expect("generated lines are valid");
        assert!(io.issue_at_ns >= last && io.offset_bytes + io.len_bytes <= 1 << 30);
        last = io.issue_at_ns;
        ios += 1;
    }
    (ios, peak_above(base))
}

#[test]
fn the_meter_sees_a_reader_that_holds_the_trace() {
    let input = BufReader::new(Generated::new(TraceFormat::Msr, 8 << 20));
    let base = reset();
    let held: Vec<_> = TraceReader::new(input, "generated", None, BadLines::Fail)
        .unwrap()
        .collect();
    let peak = peak_above(base);
    assert!(held.len() > 100_000);
    assert!(
        peak > BUDGET_BYTES,
        "holding {} records took only {peak} B: the meter does not work",
        held.len()
    );
}

#[test]
fn every_reader_replays_within_the_budget() {
    for format in TraceFormat::ALL {
        let (ios, peak) = replay(format);
        // Every generated line is an I/O (from ~22 B for MQSim to ~65 B for blkparse).
        assert!(ios > TRACE_BYTES / 80, "{format}: only {ios} I/Os");
        assert!(
            peak < BUDGET_BYTES,
            "{format}: replaying {TRACE_BYTES} B of trace ({ios} I/Os) peaked at {peak} B of live heap (budget {BUDGET_BYTES} B)"
        );
        eprintln!("{format}: {ios} I/Os from {TRACE_BYTES} B of trace, peak live heap {peak} B");
    }
}

#[test]
fn stats_of_a_large_trace_stay_within_the_budget_when_the_footprint_is_small() {
    let generated = Generated {
        span_sectors: 1 << 21, // 1 GiB
        ..Generated::new(TraceFormat::Msr, 32 << 20)
    };
    let input = BufReader::new(generated);
    let base = reset();
    let mut stats = TraceStats::new();
    for r in TraceReader::new(input, "generated", None, BadLines::Fail).unwrap() {
        stats.add(&r.unwrap());
    }
    let report = stats.report();
    let peak = peak_above(base);
    assert!(report.requests > 500_000);
    // A 1 GiB footprint is 512 bitmap chunks of 2 MiB (64 B of bits each, plus the index).
    // Every 4 KiB block of the GiB is touched; unaligned requests near its end reach one more.
    assert_eq!(report.footprint_bytes, (1 << 30) + 4096);
    assert!(peak < BUDGET_BYTES, "stats peaked at {peak} B");
}

#[test]
fn reader_writes_nothing_when_generating() {
    // The generator itself must not allocate, or the budget above would measure it.
    let mut buf = [0u8; 4096];
    for format in TraceFormat::ALL {
        let mut g = Generated::new(format, 1 << 20);
        let base = reset();
        while g.read(&mut buf).unwrap() > 0 {}
        assert_eq!(peak_above(base), 0, "{format}");
    }
    let _ = std::io::sink().write(&buf);
}
