//! `ullstack trace stats` and the trace replay flags `ullstack sim` shares.
//!
//! Readers, replay rules and statistics live in `workload::trace`; this file parses flags and
//! prints.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use workload::trace::{BadLines, Pacing, StatsReport, TraceFormat, TraceStats};

/// Work with block traces.
#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// What a trace holds: requests, read ratio, size histogram, sequentiality, inter-arrival
    /// distribution, footprint and duration, in one streaming pass.
    ///
    ///   ullstack trace stats msr/hm_1.csv
    ///   ullstack trace stats --json --trace-format blkparse sda.txt
    #[command(verbatim_doc_comment)]
    Stats(StatsArgs),
}

#[derive(Args, Debug)]
struct StatsArgs {
    /// The trace file.
    file: PathBuf,
    /// blkparse, msr, spc, csv, mqsim or disksim; detected from the first lines if not given.
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    trace_format: Option<TraceFormat>,
    /// Count malformed lines and go on (the first is reported) instead of stopping at one.
    #[arg(long)]
    skip_bad_lines: bool,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

/// How a trace is replayed (`ullstack sim --device P --trace FILE ...`).
#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// Replay a block trace at device level (blkparse text, MSR Cambridge CSV, SPC, DiskSim or
    /// MQSim ASCII, or time_ns,op,offset,bytes CSV); the format is detected unless given.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["job", "system"])]
    pub trace: Option<PathBuf>,
    /// The trace's format: blkparse, msr, spc, csv, mqsim or disksim.
    #[arg(long, value_name = "FORMAT", value_parser = parse_format, requires = "trace")]
    pub trace_format: Option<TraceFormat>,
    /// Open loop: issue each I/O at its trace time divided by F (2 = twice as fast). Default 1.
    #[arg(long, value_name = "F", conflicts_with = "qd", requires = "trace")]
    pub speed: Option<f64>,
    /// Closed loop: keep N I/Os in flight, ignoring the trace's times.
    #[arg(long, value_name = "N", requires = "trace")]
    pub qd: Option<u32>,
    /// Replay only this device's records: a number (MSR disk, SPC ASU, MQSim device) or
    /// MAJ,MIN (also MAJ:MIN) for blkparse.
    #[arg(long, value_name = "N", value_parser = parse_device, requires = "trace")]
    pub trace_device: Option<u32>,
    /// Start of the window, trace time from its first record (e.g. 10s, 250ms).
    #[arg(long, value_name = "TIME", value_parser = parse_time, requires = "trace")]
    pub from: Option<u64>,
    /// End of the window (exclusive): the replay stops at the first record at or past it.
    #[arg(long, value_name = "TIME", value_parser = parse_time, requires = "trace")]
    pub to: Option<u64>,
    /// Count malformed trace lines and go on instead of stopping at the first.
    #[arg(long, requires = "trace")]
    pub skip_bad_lines: bool,
}

impl ReplayArgs {
    /// The replay these flags describe, if `--trace` was given.
    pub fn spec(&self) -> anyhow::Result<Option<sim::TraceSpec>> {
        let Some(path) = &self.trace else {
            return Ok(None);
        };
        let pacing = match (self.speed, self.qd) {
            (_, Some(qd)) => Pacing::closed_loop(qd).map_err(anyhow::Error::msg)?,
            (speed, None) => Pacing::open_loop(speed.unwrap_or(1.0)).map_err(anyhow::Error::msg)?,
        };
        if let (Some(from), Some(to)) = (self.from, self.to) {
            anyhow::ensure!(from < to, "--from {from} ns is not before --to {to} ns");
        }
        Ok(Some(sim::TraceSpec {
            format: self.trace_format,
            bad_lines: bad_lines(self.skip_bad_lines),
            device: self.trace_device,
            from_ns: self.from.unwrap_or(0),
            to_ns: self.to,
            pacing,
            ..sim::TraceSpec::new(path)
        }))
    }
}

fn bad_lines(skip: bool) -> BadLines {
    if skip {
        BadLines::Skip
    } else {
        BadLines::Fail
    }
}

fn parse_format(s: &str) -> Result<TraceFormat, String> {
    TraceFormat::named(s).map_err(|e| e.to_string())
}

fn parse_device(s: &str) -> Result<u32, String> {
    workload::trace::parse_device(s)
}

fn parse_time(s: &str) -> Result<u64, String> {
    engine::units::duration_ns(s).map_err(|e| e.to_string())
}

pub fn run(args: TraceArgs) -> anyhow::Result<()> {
    match args.command {
        TraceCommand::Stats(a) => stats(a),
    }
}

fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let mut reader = workload::trace::open(
        &args.file,
        args.trace_format,
        bad_lines(args.skip_bad_lines),
    )?;
    let mut stats = TraceStats::new();
    for r in reader.by_ref() {
        stats.add(&r?);
    }
    let report = stats.report();
    anyhow::ensure!(
        report.requests > 0,
        "{}: no reads or writes in the trace ({} lines read)",
        args.file.display(),
        reader.lines_read()
    );
    let out = StatsOut {
        file: args.file.display().to_string(),
        format: reader.format().name(),
        lines: reader.lines_read(),
        bad_lines_skipped: reader.skipped_lines(),
        first_bad_line: reader.first_skipped().map(str::to_string),
        stats: report,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("encoding the figures as JSON")?
        );
    } else {
        print!("{}", out.table());
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct StatsOut {
    file: String,
    format: &'static str,
    lines: u64,
    bad_lines_skipped: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_bad_line: Option<String>,
    #[serde(flatten)]
    stats: StatsReport,
}

impl StatsOut {
    fn table(&self) -> String {
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
