//! Block traces in: streaming readers for the trace formats users arrive with.
//!
//! A trace is a file of I/O requests with their times. Users bring blktrace captures of their
//! own servers, public traces (MSR Cambridge, the SPC-format UMass traces, both on SNIA IOTTA)
//! and the ASCII traces other SSD simulators read. Each format gets a reader here, one file per
//! format, all turning a line into the same [`TraceRecord`]: a time in integer nanoseconds, a
//! device number, read or write, an offset and a length in bytes.
//!
//! | format (`--trace-format`) | line | file |
//! | --- | --- | --- |
//! | `mqsim` | `time_ns device lba_sectors size_sectors type` (type bit 0: 1 read, 0 write) | `ascii` |
//! | `disksim` | the same with the time in decimal milliseconds | `ascii` |
//! | `blkparse` | blkparse's default text; Q events (see `blkparse` for why not D) | `blkparse` |
//! | `msr` | `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, Windows filetime | `msr` |
//! | `spc` | `ASU,LBA,Size,Opcode,Timestamp`, LBA in sectors, size in bytes, time in seconds | `spc` |
//! | `csv` | `time_ns,op,offset_bytes,bytes` (ullstack's own) | `csv` |
//!
//! Sources, each restated in its file: DiskSim's ASCII input format (DiskSim 4.0 manual);
//! MQSim's `traces/README.md` (github.com/CMU-SAFARI/MQSim and forks); `blkparse(1)` and
//! blktrace's `blkparse_fmt.c` (header `"%D %2c %8s %5T.%9t %5p %2a %3d "`); the MSR Cambridge
//! traces' README (SNIA IOTTA, trace set 388); the SPC Trace File Format Specification rev.
//! 1.0.1 (Storage Performance Council, 2002).
//!
//! ## Streaming, constant memory
//! [`TraceReader`] is an iterator over any `BufRead`: it holds one line (at most
//! [`MAX_LINE_BYTES`]; a longer line is a bad line, and its rest is read and dropped without
//! being kept), so a 10 GB trace is read in the same few kilobytes as a 10 KB one. The test
//! `trace_memory` (`crates/workload/tests`) replays a generated 64 MiB trace of every format
//! under a counting allocator and fails if the live heap ever passes 1 MiB; its namesake in
//! `crates/sim/tests` does the same for the device-level replay and a system run's trace
//! process.
//!
//! ## Times
//! All times become integer nanoseconds with no floating point (`0.000000001` s is 1 ns
//! exactly; see `fields`). The reader makes them relative to the trace's first record, so
//! MSR's absolute filetimes and blkparse's relative seconds both start at 0. A record earlier
//! than the first one (MSR traces are not quite sorted) is at 0; later disorder is kept as the
//! trace has it (replay issues a late-stamped record at once; `stats` counts them).
//!
//! ## Detection
//! Without `--trace-format`, the first [`DETECT_LINES`] lines that are not blank or `#`
//! comments decide: among the formats (in the order blkparse, msr, spc, csv, mqsim, disksim)
//! whose parser accepts the first of them and finds a read or write, the one accepting the most
//! lines wins (see `detect`).
//! The formats differ in separators and field shapes enough that one line settles it (a
//! decimal time tells DiskSim from MQSim); a file no reader accepts is an error that says
//! what each expected of the first line.
//!
//! ## Bad lines
//! A malformed line is an error naming the file, the 1-based line number and what was expected:
//! `trace.csv:7: op `X`: expected R, W, read or write`. With [`BadLines::Skip`]
//! (`--skip-bad-lines`) it is counted instead, and the first one is kept for the report.
//! Blank lines and lines starting with `#` are comments in every format. A request must be of
//! 1 byte to [`MAX_REQUEST_BYTES`] and end below 2^64 bytes.
//!
//! ## Files
//! `record` holds what every other file shares (the limits, [`TraceRecord`], a parsed line, the
//! errors); the format files (`blkparse`, `msr`, `spc`, `csv`, `ascii`, with `fields`) turn a
//! line into a record; `format` names the formats and picks a line's parser; `detect` tells
//! the format from the first lines; `reader` streams a file through them; `replay`, `stats`,
//! `footprint` and `summary` use the records. No file uses this one, so the folder has no
//! cycle (`testkit/tests/module_graph.rs`).
//!
//! ## What it leaves out
//! Trims, flushes and other requests without data are passed over (the replay paths issue
//! reads and writes only). Compressed traces are read after `zcat`, not directly.

mod ascii;
pub mod blkparse;
mod csv;
mod detect;
mod fields;
mod footprint;
mod format;
mod msr;
mod reader;
mod record;
pub mod replay;
mod spc;
pub mod stats;
pub mod summary;

pub use replay::{fold_onto, Folded, Pacing, Replay, ReplayCounts, ReplayIo, ReplayOptions};
pub use stats::{SizeBucket, StatsReport, TraceStats};
pub use summary::TraceSummary;

pub use format::TraceFormat;
pub use reader::{open, TraceReader};
pub use record::{
    BadLines, TraceError, TraceOp, TraceRecord, DETECT_LINES, MAX_LINE_BYTES, MAX_REQUEST_BYTES,
    READ_BUFFER_BYTES, SECTOR_BYTES,
};

/// Parses a `--trace-device` value: a number, or `MAJ,MIN` (blkparse's form) or `MAJ:MIN`
/// (lsblk's) for blkparse devices.
pub fn parse_device(text: &str) -> Result<u32, String> {
    let text = text.trim();
    if text.contains([',', ':']) {
        return blkparse::parse_device(&text.replace(':', ",")).ok_or_else(|| {
            format!("device `{text}`: expected MAJ,MIN with MAJ below 4096 and MIN below 2^20")
        });
    }
    text.parse::<u32>()
        .map_err(|_| format!("device `{text}`: expected a device number (below 2^32) or MAJ,MIN"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_as_numbers_or_pairs() {
        assert_eq!(parse_device("3"), Ok(3));
        assert_eq!(parse_device("8,16"), Ok(8 << 20 | 16));
        assert_eq!(parse_device("8:16"), Ok(8 << 20 | 16));
        assert!(parse_device("sda").is_err());
    }
}
