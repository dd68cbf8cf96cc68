//! `trace stats` speed: the statistics pass over generated traces, printed as MB/s (not
//! asserted; the issue's target is >= 200 MB/s).
//!
//! Each case generates ~128 MiB of one format in memory, writes it to a temporary file and
//! times `workload::trace::open` + `TraceStats` over the file (warm in the page cache, so the
//! figure is the reader's, not the disk's), then the same over the bytes in memory.
//!
//! Run: `cargo bench -p workload --bench trace_stats` (a filter argument selects formats).

use std::io::Write;
use std::time::Instant;

use workload::trace::{BadLines, TraceFormat, TraceReader, TraceStats};

const TRACE_BYTES: usize = 128 << 20;

fn generate(format: TraceFormat) -> Vec<u8> {
    let mut out = Vec::with_capacity(TRACE_BYTES + 256);
    let mut i: u64 = 0;
    while out.len() < TRACE_BYTES {
        // A mix of sequential runs and random jumps over 256 GiB.
        let sector = if i.is_multiple_of(4) {
            (i * 7919 * 8) % (1 << 29)
        } else {
            i * 8 % (1 << 29)
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
) -> u64 {
    let mut stats = TraceStats::new();
    for r in reader {
        stats.add(&r.expect("generated lines are valid"));
    }
    stats.report().requests
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let dir =
        std::env::temp_dir().join(format!("ullstack-trace-stats-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for format in TraceFormat::ALL {
        if filter
            .as_deref()
            .is_some_and(|f| !format.name().contains(f))
        {
            continue;
        }
        let bytes = generate(format);
        let path = dir.join(format!("t.{}", format.name()));
        std::fs::write(&path, &bytes).expect("write trace");
        let mb = bytes.len() as f64 / 1e6;

        let wall = Instant::now();
        let cpu = cpu_ns();
        let reader = workload::trace::open(&path, None, BadLines::Fail).expect("open");
        assert_eq!(reader.format(), format, "detected");
        let n = stats_of(reader);
        let file_s = wall.elapsed().as_secs_f64();
        let file_cpu_s = (cpu_ns() - cpu) as f64 / 1e9;

        let wall = Instant::now();
        let reader =
            TraceReader::new(&bytes[..], "memory", Some(format), BadLines::Fail).expect("reader");
        let n2 = stats_of(reader);
        let mem_s = wall.elapsed().as_secs_f64();
        assert_eq!(n, n2);
        println!(
            "{:<9} {mb:.0} MB, {n} requests: file {:.0} MB/s wall, {:.0} MB/s of CPU time ({:.2} M requests/s wall), memory {:.0} MB/s wall",
            format.name(),
            mb / file_s,
            mb / file_cpu_s,
            n as f64 / file_s / 1e6,
            mb / mem_s
        );
        let _ = std::fs::remove_file(&path);
    }
    let _ = std::fs::remove_dir(&dir);
}
