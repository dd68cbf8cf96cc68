//! `ullstack trace stats FILE`: a whole trace file read once through [`TraceStats`], with what
//! the reader learnt on the way (the format it detected, lines read, malformed lines skipped
//! and the first of them), as a text table or as JSON (the same fields).
//!
//! The table, for a two-request MSR trace (`0,h,0,Read,0,4096,0` and `10000,h,0,Write,4096,4096,0`):
//!
//! ```text
//! trace      t.csv (msr, 2 lines)
//! requests   2 (1 reads, 1 writes; read ratio 50.0 %)
//! ```
//!
//! and so on: bytes, duration, sequential share, footprint, inter-arrival gaps, a size
//! histogram with a row for each non-empty bucket.

use std::path::Path;

use serde::Serialize;

use super::format::TraceFormat;
use super::record::{BadLines, TraceError};
use super::stats::{StatsReport, TraceStats};

/// A trace file's statistics and how it was read.
#[derive(Clone, Debug, Serialize)]
pub struct TraceSummary {
    pub file: String,
    pub format: &'static str,
    pub lines: u64,
    pub bad_lines_skipped: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad_line: Option<String>,
    #[serde(flatten)]
    pub stats: StatsReport,
}

impl TraceSummary {
    /// Reads the trace at `path` once; `format: None` detects it. A trace with no read or write
    /// is an error ([`TraceError::NoRequests`]): its figures would all be zero.
    pub fn read(
        path: &Path,
        format: Option<TraceFormat>,
        bad_lines: BadLines,
    ) -> Result<TraceSummary, TraceError> {
        let mut reader = super::reader::open(path, format, bad_lines)?;
        let mut stats = TraceStats::new();
        for r in reader.by_ref() {
            stats.add(&r?);
        }
        let report = stats.report();
        if report.requests == 0 {
            return Err(TraceError::NoRequests {
                source_name: path.display().to_string(),
                lines: reader.lines_read(),
            });
        }
        Ok(TraceSummary {
            file: path.display().to_string(),
            format: reader.format().name(),
            lines: reader.lines_read(),
            bad_lines_skipped: reader.skipped_lines(),
            first_bad_line: reader.first_skipped().map(str::to_string),
            stats: report,
        })
    }

    /// The figures as a text table (see the module essay).
    pub fn table(&self) -> String {
        let s = &self.stats;
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let t = engine::time::format_ns;
        let mut o = format!(
            "trace      {} ({}, {} lines",
            self.file, self.format, self.lines
        );
        if self.bad_lines_skipped > 0 {
            o += &format!(
                ", {} bad lines skipped; first: {}",
                self.bad_lines_skipped,
                self.first_bad_line.as_deref().unwrap_or("?")
            );
        }
        o += ")\n";
        o += &format!(
            "requests   {} ({} reads, {} writes; read ratio {:.1} %)\n",
            s.requests, s.reads, s.writes, s.read_ratio_pct
        );
        o += &format!(
            "bytes      {:.1} MiB read, {:.1} MiB written\n",
            mib(s.read_bytes),
            mib(s.write_bytes)
        );
        o += &format!(
            "duration   {} ({} requests/s), {} device(s)\n",
            t(s.duration_ns),
            s.iops,
            s.devices
        );
        o += &format!(
            "sequential {} ({:.1} %: starts where the device's previous request ended)\n",
            s.sequential, s.sequential_pct
        );
        o += &format!(
            "footprint  {:.1} MiB distinct (4 KiB blocks); highest byte touched {:.1} MiB\n",
            mib(s.footprint_bytes),
            mib(s.max_end_bytes)
        );
        let g = &s.interarrival_ns;
        o += &format!(
            "gaps       mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            t(g.mean),
            t(g.p50),
            t(g.p90),
            t(g.p99),
            t(g.p999),
            t(g.max)
        );
        if s.out_of_order > 0 {
            o += &format!(
                " ({} records stamped before their predecessor)",
                s.out_of_order
            );
        }
        o += "\nsizes\n";
        for b in &s.sizes {
            if b.requests == 0 {
                continue;
            }
            let label = match b.up_to_bytes {
                Some(n) if n >= 1 << 20 => format!("<= {} MiB", n >> 20),
                Some(n) if n >= 1024 => format!("<= {} KiB", n >> 10),
                Some(n) => format!("<= {n} B"),
                None => "> 1 MiB".to_string(),
            };
            o += &format!(
                "  {label:>10}  {:>12}  {:>5.1} %\n",
                b.requests,
                b.requests as f64 * 100.0 / s.requests as f64
            );
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ullstack-summary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_table_opens_with_the_essays_lines() {
        let path = write(
            "t.csv",
            "0,h,0,Read,0,4096,0\n10000,h,0,Write,4096,4096,0\n",
        );
        let s = TraceSummary::read(
            &path,
            Some(TraceFormat::named("msr").unwrap()),
            BadLines::Fail,
        )
        .unwrap();
        let table = s.table();
        let mut lines = table.lines();
        let first = lines.next().unwrap();
        assert!(
            first.starts_with("trace      ") && first.ends_with("t.csv (msr, 2 lines)"),
            "{first}"
        );
        assert_eq!(
            lines.next().unwrap(),
            "requests   2 (1 reads, 1 writes; read ratio 50.0 %)"
        );
    }

    #[test]
    fn a_trace_without_requests_is_refused_with_its_line_count() {
        let path = write("empty.csv", "");
        let e = TraceSummary::read(
            &path,
            Some(TraceFormat::named("msr").unwrap()),
            BadLines::Fail,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .ends_with("empty.csv: no reads or writes in the trace (0 lines read)"),
            "{e}"
        );
    }
}
