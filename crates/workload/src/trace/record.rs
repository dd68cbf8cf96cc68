//! What a trace is made of, shared by the reader, the format parsers, the replay and the
//! statistics: the limits every reader keeps, one record, one parsed line, and the errors.

/// A sector: the unit of LBAs in DiskSim, MQSim, SPC and blkparse traces.
pub const SECTOR_BYTES: u64 = 512;
/// The longest line a reader keeps (every format's lines are well under 200 bytes).
pub const MAX_LINE_BYTES: usize = 4096;
/// The largest request a reader accepts (1 GiB; real traces' largest are a few MiB). A bound
/// keeps a malformed size from making a replay or the footprint count walk 2^64 bytes.
pub const MAX_REQUEST_BYTES: u64 = 1 << 30;
/// How many lines detection looks at.
pub const DETECT_LINES: usize = 8;
/// The read buffer of [`open`](super::open): large reads keep `trace stats` at disk speed.
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
