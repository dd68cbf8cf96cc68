//! The trace formats by name, and each one's line parser (the parsers are this folder's
//! format files; the table is the trace module's essay).

use super::record::{Line, TraceError};
use super::{ascii, blkparse, csv, msr, spc};

/// A trace format (the trace module's essay has the table).
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
