//! `trace stats` speed: the statistics pass over generated traces, printed as MB/s (not
//! asserted; the issue's target is >= 200 MB/s).
//!
//! Each case generates ~128 MiB of one format in memory, writes it to a temporary file and
//! times `workload::trace::open` + `TraceStats` over the file (warm in the page cache, so the
//! figure is the reader's, not the disk's), then the same over the bytes in memory. Two
//! address patterns per format:
//! - `mixed`: sequential runs with a random jump every fourth request over 256 GiB;
//! - `random`: every request a 4 KiB read or write at a random 4 KiB block of 800 GB (the
//!   hardest case for the footprint bitmap: almost every request lands in a chunk of it far
//!   from the previous one).
//!
//! Run: `cargo bench -p workload --bench trace_stats` (a filter argument selects cases by
//! `FORMAT/PATTERN`, e.g. `mqsim/random`).

use std::io::Write;
use std::time::Instant;

use workload::trace::{BadLines, TraceFormat, TraceReader, TraceStats};

const TRACE_BYTES: usize = 128 << 20;

/// The random pattern's span: 800 GB, in 4 KiB blocks.
const RANDOM_SPAN_BLOCKS: u64 = 800_000_000_000 / 4096;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pattern {
    Mixed,
    Random,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Mixed => "mixed",
            Pattern::Random => "random",
        }
    }
}

fn generate(format: TraceFormat, pattern: Pattern) -> Vec<u8> {
    let mut out = Vec::with_capacity(TRACE_BYTES + 256);
    let mut i: u64 = 0;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while out.len() < TRACE_BYTES {
        let sector = match pattern {
            // A mix of sequential runs and random jumps over 256 GiB.
            Pattern::Mixed if i.is_multiple_of(4) => (i * 7919 * 8) % (1 << 29),
            Pattern::Mixed => i * 8 % (1 << 29),
            Pattern::Random => {
                // xorshift: a fixed pseudo-random 4 KiB block of 800 GB.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % RANDOM_SPAN_BLOCKS) * 8
            }
        };
        let read = !i.is_multiple_of(3);
        match format {
            TraceFormat::Msr => writeln!(
                out,
                "{},hm,1,{},{},4096,1111",
                128_166_372_003_061_629 + i * 250,
                if read { "Read" } else { "Write" },
                sector * 512
            ),
            TraceFormat::Blkparse => writeln!(
                out,
                "  8,0    {}  {:>7}  {}.{:09}  697  Q  {} {} + 8 [kworker]",
                i % 4,
                i,
                i / 40_000,
                (i % 40_000) * 25_000,
                if read { "R" } else { "WS" },
                sector
            ),
            TraceFormat::Mqsim => writeln!(out, "{} 0 {sector} 8 {}", i * 25_000, u8::from(read)),
            TraceFormat::Spc => writeln!(
                out,
                "0,{sector},4096,{},{}.{:06}",
                if read { "r" } else { "w" },
                i / 40_000,
                (i % 40_000) * 25
            ),
            TraceFormat::Csv => writeln!(
                out,
                "{},{},{},4096",
                i * 25_000,
                if read { "R" } else { "W" },
                sector * 512
            ),
            TraceFormat::Disksim => writeln!(
                out,
                "{}.{:06} 0 {sector} 8 {}",
                i / 40,
                (i % 40) * 25_000,
                u8::from(read)
            ),
        }
        .expect("writing to a Vec");
        i += 1;
    }
    out
}

/// CPU time this thread has run, from `/proc/thread-self/schedstat` (ns; 0 if unavailable).
/// On a shared machine it is a fairer figure than wall time: it leaves out the time other
/// processes held the cores.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn stats_of(
    reader: impl Iterator<Item = Result<workload::trace::TraceRecord, workload::trace::TraceError>>,
) -> (u64, u64) {
    let mut stats = TraceStats::new();
    for r in reader {
        stats.add(&r.expect("generated lines are valid"));
    }
    let report = stats.report();
    (report.requests, report.footprint_bytes)
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let dir =
        std::env::temp_dir().join(format!("ullstack-trace-stats-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cases = TraceFormat::ALL
        .into_iter()
        .flat_map(|f| [(f, Pattern::Mixed), (f, Pattern::Random)]);
    for (format, pattern) in cases {
        let label = format!("{}/{}", format.name(), pattern.name());
        if filter.as_deref().is_some_and(|f| !label.contains(f)) {
            continue;
        }
        let bytes = generate(format, pattern);
        let path = dir.join(format!("t.{}", format.name()));
        std::fs::write(&path, &bytes).expect("write trace");
        let mb = bytes.len() as f64 / 1e6;

        let wall = Instant::now();
        let cpu = cpu_ns();
        let reader = workload::trace::open(&path, None, BadLines::Fail).expect("open");
        assert_eq!(reader.format(), format, "detected");
        let (n, footprint_bytes) = stats_of(reader);
        let file_s = wall.elapsed().as_secs_f64();
        let file_cpu_s = (cpu_ns() - cpu) as f64 / 1e9;

        let wall = Instant::now();
        let reader =
            TraceReader::new(&bytes[..], "memory", Some(format), BadLines::Fail).expect("reader");
        let (n2, _) = stats_of(reader);
        let mem_s = wall.elapsed().as_secs_f64();
        assert_eq!(n, n2);
        println!(
            "{label:<16} {mb:.0} MB, {n} requests, footprint {:.0} GB: file {:.0} MB/s wall, {:.0} MB/s of CPU time ({:.2} M requests/s wall), memory {:.0} MB/s wall",
            footprint_bytes as f64 / 1e9,
            mb / file_s,
            mb / file_cpu_s,
            n as f64 / file_s / 1e6,
            mb / mem_s
        );
        let _ = std::fs::remove_file(&path);
    }
    let _ = std::fs::remove_dir(&dir);
}
