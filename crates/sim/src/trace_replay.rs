//! A block trace as a device-level job (`ullstack sim --device P --trace FILE`).
//!
//! The trace is streamed, never loaded: [`TraceSpec`] names the file and how to replay it,
//! [`TraceFeed`] holds the open reader (one line buffer) and the one I/O it has read ahead,
//! and the thin host's trace thread pulls from it as it issues (`device_run`). The replay's
//! rules — window, device filter, open loop at `--speed` or closed loop at `--qd`, folding onto
//! the device's capacity — are `workload::trace::replay`'s; its essay has the worked examples.
//!
//! The trace thread is one host thread with its own SQ/CQ pair and the thin host's costs, like
//! a fio job clone: in closed loop it keeps `qd` I/Os in flight; in open loop it issues each I/O
//! when its time comes, up to [`OPEN_LOOP_MAX_IN_FLIGHT`] in flight (its SQ's size), and
//! holds later ones back when that many are outstanding (they are then issued late, and their
//! latency counts from the actual issue, as fio's `iolog` replay does). Every I/O is of the
//! throughput class and completes by interrupt.
//!
//! `summary.json` gets a `sim.trace` object: the format, records read, I/Os replayed, bad
//! lines skipped (and the first), records of other devices, before the window, folded, and
//! whether the window's end stopped the replay. Without `--trace` the summary is unchanged.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use workload::trace::{
    BadLines, Pacing, Replay, ReplayCounts, ReplayIo, ReplayOptions, TraceError, TraceFormat,
    TraceReader,
};

/// In-flight cap of an open-loop replay: the trace thread's SQ size. Deep enough that a
/// trace's bursts reach the device as bursts (zssd saturates within a few dozen).
pub const OPEN_LOOP_MAX_IN_FLIGHT: u32 = 1024;

/// What trace to replay, and how.
#[derive(Clone, Debug)]
pub struct TraceSpec {
    pub path: PathBuf,
    /// `None`: detected from the first lines.
    pub format: Option<TraceFormat>,
    pub bad_lines: BadLines,
    pub device: Option<u32>,
    pub from_ns: u64,
    pub to_ns: Option<u64>,
    pub pacing: Pacing,
}

impl TraceSpec {
    /// A trace replayed open loop at its own speed, all devices, whole trace, strict.
    pub fn new(path: impl Into<PathBuf>) -> TraceSpec {
        TraceSpec {
            path: path.into(),
            format: None,
            bad_lines: BadLines::Fail,
            device: None,
            from_ns: 0,
            to_ns: None,
            pacing: Pacing::OpenLoop {
                speed_per_mille: workload::trace::replay::SPEED_SCALE,
            },
        }
    }

    /// The job's name in the summary: the file's stem.
    pub fn job_name(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trace".into())
    }

    /// How many I/Os the trace thread keeps in flight at most.
    pub fn max_in_flight(&self) -> u32 {
        match self.pacing {
            Pacing::OpenLoop { .. } => OPEN_LOOP_MAX_IN_FLIGHT,
            Pacing::ClosedLoop { queue_depth } => queue_depth,
        }
    }
}

/// An open trace being replayed.
pub struct TraceFeed {
    replay: Replay<TraceReader<BufReader<File>>>,
    /// Read ahead, not yet issued.
    pending: Option<ReplayIo>,
    /// A read error stops the thread; the run reports it at its end.
    pub(crate) error: Option<TraceError>,
}

impl TraceFeed {
    /// Opens `spec`'s file for a device of `capacity_bytes`.
    pub fn open(spec: &TraceSpec, capacity_bytes: u64) -> Result<TraceFeed, TraceError> {
        let reader = workload::trace::open(&spec.path, spec.format, spec.bad_lines)?;
        let opts = ReplayOptions {
            device: spec.device,
            from_ns: spec.from_ns,
            to_ns: spec.to_ns,
            capacity_bytes,
            pacing: spec.pacing,
        };
        Ok(TraceFeed {
            replay: Replay::new(reader, opts),
            pending: None,
            error: None,
        })
    }

    /// The next I/O without taking it; `None` at the end or after an error.
    pub(crate) fn peek(&mut self) -> Option<ReplayIo> {
        if self.pending.is_none() && self.error.is_none() {
            match self.replay.next() {
                Some(Ok(io)) => self.pending = Some(io),
                Some(Err(e)) => self.error = Some(e),
                None => {}
            }
        }
        self.pending
    }

    /// Takes the I/O [`peek`](Self::peek) returned.
    pub(crate) fn take(&mut self) -> ReplayIo {
        self.pending.take().expect("take follows a successful peek")
    }

    pub(crate) fn open_loop(&self) -> bool {
        matches!(self.replay.options().pacing, Pacing::OpenLoop { .. })
    }

    /// What the replay did, for the summary.
    pub fn info(&self) -> TraceInfo {
        let reader = self.replay.records();
        TraceInfo {
            source: reader.source_name().to_string(),
            format: reader.format().name(),
            pacing: match self.replay.options().pacing {
                Pacing::OpenLoop { speed_per_mille } => format!(
                    "open-loop x{}",
                    speed_per_mille as f64 / workload::trace::replay::SPEED_SCALE as f64
                ),
                Pacing::ClosedLoop { queue_depth } => format!("closed-loop qd{queue_depth}"),
            },
            counts: self.replay.counts(),
            bad_lines_skipped: reader.skipped_lines(),
            first_bad_line: reader.first_skipped().map(str::to_string),
        }
    }
}

/// `sim.trace.format`: a trace format's name.
fn format_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    device::stats_de::one_of(d, &TraceFormat::ALL.map(TraceFormat::name))
}

/// `sim.trace` in `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TraceInfo {
    pub source: String,
    #[serde(deserialize_with = "format_name")]
    pub format: device::stats_de::StaticName,
    pub pacing: String,
    #[serde(flatten)]
    pub counts: ReplayCounts,
    pub bad_lines_skipped: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad_line: Option<String>,
}

impl TraceInfo {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        let c = &self.counts;
        let mut s = format!(
            "trace {} ({}, {}): {} records, {} replayed, {} folded onto the device",
            self.source, self.format, self.pacing, c.records, c.replayed, c.folded
        );
        if c.other_device > 0 {
            s += &format!(", {} of other devices", c.other_device);
        }
        if c.before_window > 0 {
            s += &format!(", {} before --from", c.before_window);
        }
        if c.stopped_at_window_end {
            s += ", stopped at --to";
        }
        if self.bad_lines_skipped > 0 {
            s += &format!(
                ", {} bad lines skipped (first: {})",
                self.bad_lines_skipped,
                self.first_bad_line.as_deref().unwrap_or("?")
            );
        }
        s
    }
}
