//! `ullstack trace stats` and the trace replay flags `ullstack sim` shares.
//!
//! Readers, replay rules, statistics and their table live in `workload::trace`; this file
//! parses flags and prints.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use workload::trace::{BadLines, Pacing, TraceFormat, TraceSummary};

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
    let summary = TraceSummary::read(
        &args.file,
        args.trace_format,
        bad_lines(args.skip_bad_lines),
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).context("encoding the figures as JSON")?
        );
    } else {
        print!("{}", summary.table());
    }
    Ok(())
}
