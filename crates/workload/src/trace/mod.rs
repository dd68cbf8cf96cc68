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
//! ## What it leaves out
//! Trims, flushes and other requests without data are passed over (the replay paths issue
//! reads and writes only). Compressed traces are read after `zcat`, not directly.

mod ascii;
pub mod blkparse;
mod csv;
mod detect;
mod fields;
mod footprint;
mod msr;
pub mod replay;
mod spc;
pub mod stats;
pub mod summary;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

pub use replay::{fold_onto, Folded, Pacing, Replay, ReplayCounts, ReplayIo, ReplayOptions};
pub use stats::{SizeBucket, StatsReport, TraceStats};
pub use summary::TraceSummary;

/// A sector: the unit of LBAs in DiskSim, MQSim, SPC and blkparse traces.
pub const SECTOR_BYTES: u64 = 512;
/// The longest line a reader keeps (every format's lines are well under 200 bytes).
pub const MAX_LINE_BYTES: usize = 4096;
/// The largest request a reader accepts (1 GiB; real traces' largest are a few MiB). A bound
/// keeps a malformed size from making a replay or the footprint count walk 2^64 bytes.
pub const MAX_REQUEST_BYTES: u64 = 1 << 30;
/// How many lines detection looks at.
pub const DETECT_LINES: usize = 8;
/// The read buffer of [`open`]: large reads keep `trace stats` at disk speed.
pub const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceOp {
    Read,
    Write,
}

/// One I/O of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// From the trace's first record.
    pub time_ns: u64,
    /// The trace's device (disk, ASU, `major << 20 | minor`); 0 where the format has none.
    pub device: u32,
    pub op: TraceOp,
    pub offset_bytes: u64,
    /// Positive.
    pub len_bytes: u64,
}

/// A trace format (see the table above).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    Blkparse,
    Msr,
    Spc,
    Csv,
    Mqsim,
    Disksim,
}

impl TraceFormat {
    /// Every format, in detection order.
    pub const ALL: [TraceFormat; 6] = [
        TraceFormat::Blkparse,
        TraceFormat::Msr,
        TraceFormat::Spc,
        TraceFormat::Csv,
        TraceFormat::Mqsim,
        TraceFormat::Disksim,
    ];

    /// The name `--trace-format` takes.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::Msr => "msr",
            TraceFormat::Spc => "spc",
            TraceFormat::Csv => "csv",
            TraceFormat::Mqsim => "mqsim",
            TraceFormat::Disksim => "disksim",
        }
    }

    /// The names, comma separated.
    pub fn known() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    /// A format by its name.
    pub fn named(name: &str) -> Result<TraceFormat, TraceError> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| TraceError::UnknownFormat {
                name: name.to_string(),
                known: Self::known(),
            })
    }

    /// What a line of this format looks like (for errors).
    pub fn expected(self) -> &'static str {
        match self {
            TraceFormat::Blkparse => blkparse::EXPECTED,
            TraceFormat::Msr => msr::EXPECTED,
            TraceFormat::Spc => spc::EXPECTED,
            TraceFormat::Csv => csv::EXPECTED,
            TraceFormat::Mqsim => ascii::EXPECTED,
            TraceFormat::Disksim => ascii::EXPECTED,
        }
    }

    /// Parses one line that is neither blank nor a comment. Times are as the format gives
    /// them (converted to ns), not yet relative to the first record.
    pub(crate) fn parse_line(self, line: &str) -> Result<Line, String> {
        match self {
            TraceFormat::Blkparse => blkparse::parse(line),
            TraceFormat::Msr => msr::parse(line),
            TraceFormat::Spc => spc::parse(line),
            TraceFormat::Csv => csv::parse(line),
            TraceFormat::Mqsim => ascii::parse(line, ascii::AsciiTime::IntegerNs),
            TraceFormat::Disksim => ascii::parse(line, ascii::AsciiTime::DecimalMs),
        }
    }
}

impl std::fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one line of a trace is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A read or a write to replay.
    Io(TraceRecord),
    /// A well-formed event of the format that is not a read or write we replay.
    Event,
    /// Text outside the event stream the format is known to print (blkparse's summary).
    Other,
}

/// What to do with a malformed line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BadLines {
    /// Stop with an error naming it (the default).
    #[default]
    Fail,
    /// Count it and go on (`--skip-bad-lines`).
    Skip,
}

/// A trace that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{source_name}:{line}: {message}")]
    BadLine {
        source_name: String,
        line: u64,
        message: String,
    },
    #[error("cannot read trace {source_name}: {source}")]
    Io {
        source_name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{source_name}: cannot tell the trace format from its first lines; give --trace-format (one of {known}). {why}")]
    Undetected {
        source_name: String,
        known: String,
        why: String,
    },
    #[error("unknown trace format `{name}`; known formats: {known}")]
    UnknownFormat { name: String, known: String },
    #[error("{source_name}: no reads or writes in the trace ({lines} lines read)")]
    NoRequests { source_name: String, lines: u64 },
}

/// Streams the records of a trace; see the module essay.
pub struct TraceReader<R> {
    input: R,
    source_name: String,
    format: TraceFormat,
    bad_lines: BadLines,
    line: Vec<u8>,
    line_no: u64,
    origin_ns: Option<u64>,
    skipped: u64,
    first_skipped: Option<String>,
    /// An error was returned (I/O, or a bad line with [`BadLines::Fail`]): the iterator is
    /// over.
    failed: bool,
}

/// Opens a trace file; `format: None` detects it.
pub fn open(
    path: &Path,
    format: Option<TraceFormat>,
    bad_lines: BadLines,
) -> Result<TraceReader<BufReader<File>>, TraceError> {
    let source_name = path.display().to_string();
    let file = File::open(path).map_err(|source| TraceError::Io {
        source_name: source_name.clone(),
        source,
    })?;
    TraceReader::new(
        BufReader::with_capacity(READ_BUFFER_BYTES, file),
        &source_name,
        format,
        bad_lines,
    )
}

impl<R: BufRead> TraceReader<R> {
    /// A reader of `input`; `source_name` starts every error. `format: None` detects it from
    /// the first lines (peeked, not consumed).
    pub fn new(
        mut input: R,
        source_name: &str,
        format: Option<TraceFormat>,
        bad_lines: BadLines,
    ) -> Result<TraceReader<R>, TraceError> {
        let format = match format {
            Some(f) => f,
            None => {
                let head = input.fill_buf().map_err(|source| TraceError::Io {
                    source_name: source_name.to_string(),
                    source,
                })?;
                detect::detect(head).map_err(|why| TraceError::Undetected {
                    source_name: source_name.to_string(),
                    known: TraceFormat::known(),
                    why,
                })?
            }
        };
        Ok(TraceReader {
            input,
            source_name: source_name.to_string(),
            format,
            bad_lines,
            line: Vec::with_capacity(256),
            line_no: 0,
            origin_ns: None,
            skipped: 0,
            first_skipped: None,
            failed: false,
        })
    }

    pub fn format(&self) -> TraceFormat {
        self.format
    }

    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// Lines read so far.
    pub fn lines_read(&self) -> u64 {
        self.line_no
    }

    /// Bad lines skipped so far (with [`BadLines::Skip`]).
    pub fn skipped_lines(&self) -> u64 {
        self.skipped
    }

    /// The first bad line skipped, as its error message.
    pub fn first_skipped(&self) -> Option<&str> {
        self.first_skipped.as_deref()
    }

    /// Reads the next line into `self.line` (without its end of line); `Ok(false)` at the end.
    /// A line longer than [`MAX_LINE_BYTES`] is cut there and the rest consumed unkept.
    fn read_line(&mut self) -> std::io::Result<Option<bool>> {
        self.line.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            let buf = match self.input.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(any.then_some(too_long));
            }
            any = true;
            let (chunk, used, done) = match memchr_newline(buf) {
                Some(i) => (&buf[..i], i + 1, true),
                None => (buf, buf.len(), false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
            if chunk.len() > room {
                too_long = true;
            }
            self.line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            self.input.consume(used);
            if done {
                return Ok(Some(too_long));
            }
        }
    }

    /// `r` with its time from the trace's first record.
    fn relative(&mut self, mut r: TraceRecord) -> TraceRecord {
        let origin = *self.origin_ns.get_or_insert(r.time_ns);
        r.time_ns = r.time_ns.saturating_sub(origin);
        r
    }

    fn bad(&mut self, message: String) -> Option<Result<TraceRecord, TraceError>> {
        let err = TraceError::BadLine {
            source_name: self.source_name.clone(),
            line: self.line_no,
            message,
        };
        match self.bad_lines {
            BadLines::Fail => {
                // The first error ends the trace: nothing after it is read.
                self.failed = true;
                Some(Err(err))
            }
            BadLines::Skip => {
                self.skipped += 1;
                if self.first_skipped.is_none() {
                    self.first_skipped = Some(err.to_string());
                }
                None
            }
        }
    }
}

/// The index of the first `\n`, eight bytes at a time (a word holds a `\n` byte when
/// `x ^ 0x0a0a..` has a zero byte; the classic has-zero-byte test finds it).
fn memchr_newline(buf: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut chunks = buf.chunks_exact(8);
    let mut at = 0;
    for chunk in chunks.by_ref() {
        let word = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
        let x = word ^ (ONES * u64::from(b'\n'));
        if x.wrapping_sub(ONES) & !x & HIGHS != 0 {
            break;
        }
        at += 8;
    }
    buf[at..].iter().position(|&b| b == b'\n').map(|i| at + i)
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            // Fast path: a whole line in the read buffer is parsed where it lies.
            let format = self.format;
            let fast = match self.input.fill_buf() {
                Ok(buf) => match memchr_newline(buf) {
                    Some(i) if i <= MAX_LINE_BYTES => {
                        let outcome = match std::str::from_utf8(&buf[..i]) {
                            Ok(text) => {
                                let text = text.trim();
                                if text.is_empty() || text.starts_with('#') {
                                    Ok(Line::Other)
                                } else {
                                    format.parse_line(text)
                                }
                            }
                            // The slow path reports it with its byte offset.
                            Err(_) => Err(String::new()),
                        };
                        match outcome {
                            Err(m) if m.is_empty() => None,
                            outcome => {
                                self.input.consume(i + 1);
                                Some(outcome)
                            }
                        }
                    }
                    _ => None,
                },
                Err(_) => None, // the slow path reports it
            };
            if let Some(outcome) = fast {
                self.line_no += 1;
                match outcome {
                    Ok(Line::Io(r)) => return Some(Ok(self.relative(r))),
                    Ok(Line::Event | Line::Other) => continue,
                    Err(message) => match self.bad(message) {
                        Some(e) => return Some(e),
                        None => continue,
                    },
                }
            }
            let too_long = match self.read_line() {
                Ok(Some(too_long)) => too_long,
                Ok(None) => return None,
                Err(source) => {
                    self.failed = true;
                    return Some(Err(TraceError::Io {
                        source_name: self.source_name.clone(),
                        source,
                    }));
                }
            };
            self.line_no += 1;
            if too_long {
                let msg = format!(
                    "line longer than {MAX_LINE_BYTES} bytes: expected {}",
                    self.format.expected()
                );
                match self.bad(msg) {
                    Some(e) => return Some(e),
                    None => continue,
                }
            }
            let text = match std::str::from_utf8(&self.line) {
                Ok(t) => t.trim(),
                Err(e) => {
                    let msg = format!(
                        "byte {} is not UTF-8 text: expected {}",
                        e.valid_up_to() + 1,
                        self.format.expected()
                    );
                    match self.bad(msg) {
                        Some(e) => return Some(e),
                        None => continue,
                    }
                }
            };
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            match self.format.parse_line(text) {
                Ok(Line::Io(r)) => return Some(Ok(self.relative(r))),
                Ok(Line::Event | Line::Other) => continue,
                Err(message) => match self.bad(message) {
                    Some(e) => return Some(e),
                    None => continue,
                },
            }
        }
    }
}

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

    fn read_all(text: &str, bad: BadLines) -> (Result<Vec<TraceRecord>, TraceError>, u64) {
        let mut r = TraceReader::new(text.as_bytes(), "t.txt", None, bad).unwrap();
        let v = r.by_ref().collect::<Result<Vec<_>, _>>();
        (v, r.skipped_lines())
    }

    #[test]
    fn times_start_at_the_first_record_and_errors_name_the_line() {
        let (v, _) = read_all(
            "# msr\n128166372003061629,hm,1,Read,0,4096,1\n128166372003061639,hm,1,Write,4096,512,1\n128166372003061620,hm,1,Read,0,512,1\n",
            BadLines::Fail,
        );
        let v = v.unwrap();
        assert_eq!(
            v.iter().map(|r| r.time_ns).collect::<Vec<_>>(),
            [0, 1000, 0]
        );
        let (e, _) = read_all("0,R,0,4096\n\n10,X,0,4096\n", BadLines::Fail);
        let e = e.unwrap_err().to_string();
        assert_eq!(e, "t.txt:3: op `X`: expected R, W, read or write");
        let mut r = TraceReader::new(
            &b"1,X,0,1\n2,R,0,512\n"[..],
            "t",
            Some(TraceFormat::Csv),
            BadLines::Fail,
        )
        .unwrap();
        assert!(r.next().unwrap().is_err());
        assert!(r.next().is_none(), "nothing is read after the first error");
    }

    #[test]
    fn skipping_counts_bad_lines() {
        let text = "0,R,0,4096\n10,X,0,4096\n20,W,0\n30,W,4096,4096\n";
        let (v, skipped) = read_all(text, BadLines::Skip);
        assert_eq!(v.unwrap().len(), 2);
        assert_eq!(skipped, 2);
    }

    #[test]
    fn long_lines_are_bad_and_not_kept() {
        let long = format!("0,R,0,4096\n{}\n5,W,0,512\n", "9".repeat(100_000));
        let mut r =
            TraceReader::new(long.as_bytes(), "t", Some(TraceFormat::Csv), BadLines::Skip).unwrap();
        assert_eq!(r.by_ref().count(), 2);
        assert_eq!(r.skipped_lines(), 1);
        assert!(r
            .first_skipped()
            .unwrap()
            .contains("t:2: line longer than 4096"));
        assert!(r.line.capacity() <= 2 * MAX_LINE_BYTES);
    }

    #[test]
    fn non_utf8_and_crlf() {
        let text = b"0,R,0,4096\r\n1,\xff,0,4096\r\n";
        let mut r = TraceReader::new(&text[..], "t", None, BadLines::Fail).unwrap();
        assert!(r.next().unwrap().is_ok());
        let e = r.next().unwrap().unwrap_err().to_string();
        assert!(e.starts_with("t:2: byte 3 is not UTF-8"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn newline_search_matches_a_plain_scan(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            proptest::prop_assert_eq!(memchr_newline(&bytes), bytes.iter().position(|&b| b == b'\n'));
        }
    }

    #[test]
    fn devices_parse_as_numbers_or_pairs() {
        assert_eq!(parse_device("3"), Ok(3));
        assert_eq!(parse_device("8,16"), Ok(8 << 20 | 16));
        assert_eq!(parse_device("8:16"), Ok(8 << 20 | 16));
        assert!(parse_device("sda").is_err());
    }
}
