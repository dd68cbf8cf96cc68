//! A block trace as a process of a system run (`[[process]] trace = "db.csv"`).
//!
//! The trace is streamed, never loaded: the config keeps the file's name and how to replay it
//! ([`SystemTrace`]), and each run that spawns the process opens the file and its host trace
//! thread pulls one I/O at a time from a `workload::trace::Replay` as it issues — the same
//! reader, window, device filter, pacing and folding as a device-level replay
//! (`sim::trace_replay`), folded onto the process's file (`file_bytes`) instead of the
//! device. A 10 GB trace replays in the memory of one line; the same file gives the same I/Os
//! in the same order, so a run stays a function of its config and seed.
//!
//! ## Keys (`[[process]]`)
//! | key | meaning | default |
//! | --- | --- | --- |
//! | `trace` | the trace file (any format `workload::trace` reads), relative to the config | |
//! | `trace_mode` | `open-loop` (each I/O at its trace time ÷ `trace_speed`, asynchronous, whatever is in flight), `closed-loop` (`trace_qd` I/Os in flight, times ignored: `--qd`), `afap` (one at a time, synchronous) | `open-loop`, or `closed-loop` with `trace_qd` |
//! | `trace_qd` | closed loop: I/Os in flight, 1 to 65 536 | |
//! | `trace_speed` | open loop: trace times divided by this | 1 |
//! | `trace_format` | `blkparse`, `msr`, `spc`, `csv`, `mqsim`, `disksim` | detected |
//! | `trace_device` | only this device's records: a number, or `"MAJ,MIN"` | all |
//! | `trace_from_ms`, `trace_to_ms` | only records with `from <= time < to`, trace time | whole trace |
//! | `skip_bad_lines` | count malformed lines instead of failing | `false` |
//!
//! Worked example: `trace = "db.csv"`, `trace_qd = 16` on the default 1 GiB file: the trace
//! thread submits 16 direct I/Os (each its own `io_submit`-like system call), sleeps in
//! `io_getevents`, reaps what completed and tops the depth back up, each I/O at the record's
//! offset modulo 1 GiB (`workload::trace::replay` has the folding rules).
//!
//! ## Errors
//! The config checks what it can without reading the whole file: that it opens, that its
//! format is known or detected, and that the first I/O to replay is there and well formed
//! (so a wrong device filter or window is a config error). A malformed line further on stops
//! the trace thread when it is reached, and the run fails with it (`FILE:LINE: what was
//! expected`), as a device-level replay does.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use host::{TraceMode, TraceRecord, TraceSource, TraceStream};
use serde::Deserialize;
use workload::trace::{BadLines, Pacing, Replay, ReplayOptions, TraceFormat, TraceOp, TraceReader};

/// `trace_device`: a number, or `"MAJ,MIN"` for blkparse traces.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum TraceDeviceKey {
    Number(u32),
    Text(String),
}

/// `trace_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum TraceModeKey {
    OpenLoop,
    ClosedLoop,
    Afap,
}

/// The `trace_*` keys of a `[[process]]`, as the file gives them.
#[derive(Debug, Default)]
pub(super) struct TraceTable {
    pub mode: Option<TraceModeKey>,
    pub qd: Option<u32>,
    pub format: Option<String>,
    pub device: Option<TraceDeviceKey>,
    pub speed: Option<f64>,
    pub from_ms: Option<u64>,
    pub to_ms: Option<u64>,
    pub skip_bad_lines: Option<bool>,
}

impl TraceTable {
    /// Whether any key is set (they need `trace`).
    pub fn any_set(&self) -> bool {
        self.mode.is_some()
            || self.qd.is_some()
            || self.format.is_some()
            || self.device.is_some()
            || self.speed.is_some()
            || self.from_ms.is_some()
            || self.to_ms.is_some()
            || self.skip_bad_lines.is_some()
    }
}

/// How a process's trace is read and replayed.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TraceKeys {
    pub format: Option<TraceFormat>,
    pub bad_lines: BadLines,
    pub device: Option<u32>,
    pub from_ns: u64,
    pub to_ns: Option<u64>,
    pub pacing: Pacing,
    pub mode: TraceMode,
}

impl TraceKeys {
    pub fn of(t: &TraceTable) -> Result<TraceKeys, String> {
        let format = t
            .format
            .as_deref()
            .map(TraceFormat::named)
            .transpose()
            .map_err(|e| format!("trace_format: {e}"))?;
        let device = match &t.device {
            None => None,
            Some(TraceDeviceKey::Number(n)) => Some(*n),
            Some(TraceDeviceKey::Text(text)) => Some(
                workload::trace::parse_device(text).map_err(|e| format!("trace_device: {e}"))?,
            ),
        };
        let mode = match (t.mode, t.qd) {
            (None | Some(TraceModeKey::ClosedLoop), Some(qd)) => {
                Pacing::closed_loop(qd).map_err(|e| format!("trace_qd = {qd}: {e}"))?;
                TraceMode::ClosedLoop { queue_depth: qd }
            }
            (Some(TraceModeKey::ClosedLoop), None) => {
                return Err(
                    "trace_mode = \"closed-loop\" needs trace_qd = N (I/Os in flight)".into(),
                )
            }
            (Some(m @ (TraceModeKey::OpenLoop | TraceModeKey::Afap)), Some(qd)) => {
                return Err(format!(
                    "trace_qd = {qd} applies to trace_mode = \"closed-loop\" only, not {}",
                    if m == TraceModeKey::Afap {
                        "\"afap\" (one at a time)"
                    } else {
                        "\"open-loop\""
                    }
                ))
            }
            (None | Some(TraceModeKey::OpenLoop), None) => TraceMode::OpenLoop,
            (Some(TraceModeKey::Afap), None) => TraceMode::Afap,
        };
        let pacing = match mode {
            TraceMode::OpenLoop => Pacing::open_loop(t.speed.unwrap_or(1.0))
                .map_err(|e| format!("trace_speed: {e}"))?,
            _ if t.speed.is_some() => {
                return Err("trace_speed applies to trace_mode = \"open-loop\" only".into())
            }
            TraceMode::Afap => Pacing::ClosedLoop { queue_depth: 1 },
            TraceMode::ClosedLoop { queue_depth } => Pacing::ClosedLoop { queue_depth },
        };
        let ms = |v: u64, key: &str| {
            v.checked_mul(1_000_000)
                .ok_or_else(|| format!("{key} = {v}: expected fewer than 2^64 ns"))
        };
        let from_ns = ms(t.from_ms.unwrap_or(0), "trace_from_ms")?;
        let to_ns = t.to_ms.map(|v| ms(v, "trace_to_ms")).transpose()?;
        if to_ns.is_some_and(|to| to <= from_ns) {
            return Err("trace_to_ms must be after trace_from_ms".into());
        }
        Ok(TraceKeys {
            format,
            bad_lines: if t.skip_bad_lines.unwrap_or(false) {
                BadLines::Skip
            } else {
                BadLines::Fail
            },
            device,
            from_ns,
            to_ns,
            pacing,
            mode,
        })
    }
}

/// A system process's trace: a file and how to replay it, opened by each run (see the
/// module essay).
#[derive(Debug)]
pub(super) struct SystemTrace {
    pub path: PathBuf,
    pub keys: TraceKeys,
}

impl SystemTrace {
    /// Opens the file and reads up to its first I/O for a file of `file_bytes`: the errors a
    /// config should give (see the module essay).
    pub fn check(&self, file_bytes: u64) -> Result<(), String> {
        let mut stream = self.open(file_bytes)?;
        match stream.next() {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(e),
            None => Err(format!(
                "{}: no reads or writes to replay (check trace_device and the window)",
                self.path.display()
            )),
        }
    }
}

impl TraceSource for SystemTrace {
    fn open(&self, file_bytes: u64) -> Result<Box<TraceStream>, String> {
        let file = File::open(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let input = BufReader::with_capacity(workload::trace::READ_BUFFER_BYTES, file);
        stream(
            input,
            &self.path.display().to_string(),
            &self.keys,
            file_bytes,
        )
    }
}

/// The host records of `input`'s trace, folded onto `file_bytes` and paced by `keys`,
/// streamed. Errors name the source, the line and what was expected.
fn stream<R: BufRead + Send + 'static>(
    input: R,
    source_name: &str,
    keys: &TraceKeys,
    file_bytes: u64,
) -> Result<Box<TraceStream>, String> {
    if file_bytes < workload::trace::SECTOR_BYTES {
        return Err(format!(
            "file_bytes = {file_bytes}: a trace needs a file of at least one 512 B sector"
        ));
    }
    let reader = TraceReader::new(input, source_name, keys.format, keys.bad_lines)
        .map_err(|e| e.to_string())?;
    let opts = ReplayOptions {
        device: keys.device,
        from_ns: keys.from_ns,
        to_ns: keys.to_ns,
        capacity_bytes: file_bytes,
        pacing: keys.pacing,
    };
    Ok(Box::new(Replay::new(reader, opts).map(|io| {
        io.map(|io| TraceRecord {
            at_ns: io.issue_at_ns,
            op: match io.op {
                TraceOp::Read => engine::IoOp::Read,
                TraceOp::Write => engine::IoOp::Write,
            },
            offset_bytes: io.offset_bytes,
            bytes: io.len_bytes,
        })
        .map_err(|e| e.to_string())
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(toml_text: &str) -> Result<TraceKeys, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct T {
            trace_mode: Option<TraceModeKey>,
            trace_qd: Option<u32>,
            trace_format: Option<String>,
            trace_device: Option<TraceDeviceKey>,
            trace_speed: Option<f64>,
            trace_from_ms: Option<u64>,
            trace_to_ms: Option<u64>,
            skip_bad_lines: Option<bool>,
        }
        let t: T = toml::from_str(toml_text).unwrap();
        TraceKeys::of(&TraceTable {
            mode: t.trace_mode,
            qd: t.trace_qd,
            format: t.trace_format,
            device: t.trace_device,
            speed: t.trace_speed,
            from_ms: t.trace_from_ms,
            to_ms: t.trace_to_ms,
            skip_bad_lines: t.skip_bad_lines,
        })
    }

    fn read(text: &'static [u8], keys: &TraceKeys) -> Result<Vec<TraceRecord>, String> {
        stream(text, "t.csv", keys, 1 << 30)?.collect()
    }

    #[test]
    fn traces_parse_with_line_numbers_in_errors() {
        let k = keys("").unwrap();
        let t = read(b"# t,op,off,len\n0,R,0,4096\n1000,w,8192,8192\n\n", &k).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1].op, engine::IoOp::Write);
        let e = read(b"0,R,0,4096\n10,X,0,4096\n", &k).unwrap_err();
        assert_eq!(e, "t.csv:2: op `X`: expected R, W, read or write");
        // A record stamped before its predecessor is issued with it.
        let t = read(b"5,R,0,4096\n1,R,0,4096\n", &k).unwrap();
        assert_eq!((t[0].at_ns, t[1].at_ns), (0, 0));
        let e = read(b"# nothing\n", &k).err().unwrap();
        assert!(e.contains("give --trace-format"), "{e}");
    }

    #[test]
    fn traces_in_other_formats_fold_filter_and_scale() {
        let msr = b"128166372003061629,hm,1,Read,3221225472,4096,1\n128166372003071629,hm,0,Write,0,4096,1\n128166372003081629,hm,1,Write,8192,4096,1\n";
        let k = keys("trace_device = 1\ntrace_speed = 2.0").unwrap();
        let t = read(msr, &k).unwrap();
        // Device 0's record is dropped; 3 GiB folds onto the 1 GiB file at 0; 2 ms / 2 = 1 ms.
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].offset_bytes, t[1].at_ns), (0, 1_000_000));
        let k = keys("trace_device = \"8,0\"\ntrace_mode = \"afap\"").unwrap();
        assert_eq!((k.device, k.mode), (Some(8 << 20), TraceMode::Afap));
        assert!(keys("trace_mode = \"afap\"\ntrace_speed = 2.0").is_err());
        let e = keys("trace_format = \"iolog\"").unwrap_err();
        assert!(e.contains("iolog") && e.contains("blkparse"), "{e}");
    }

    #[test]
    fn closed_loop_takes_a_queue_depth_and_ignores_times() {
        let k = keys("trace_qd = 16").unwrap();
        assert_eq!(k.mode, TraceMode::ClosedLoop { queue_depth: 16 });
        let k2 = keys("trace_mode = \"closed-loop\"\ntrace_qd = 16").unwrap();
        assert_eq!(k, k2);
        let t = read(b"0,R,0,4096\n5000,W,8192,4096\n", &k).unwrap();
        assert_eq!((t[0].at_ns, t[1].at_ns), (0, 0));
        let cases = [
            ("trace_mode = \"closed-loop\"", "needs trace_qd"),
            (
                "trace_qd = 0",
                "trace_qd = 0: queue depth 0: expected 1 or more",
            ),
            (
                "trace_qd = 4\ntrace_mode = \"afap\"",
                "trace_qd = 4 applies to trace_mode = \"closed-loop\" only",
            ),
            (
                "trace_qd = 4\ntrace_mode = \"open-loop\"",
                "not \"open-loop\"",
            ),
            (
                "trace_qd = 4\ntrace_speed = 2.0",
                "trace_speed applies to trace_mode = \"open-loop\" only",
            ),
        ];
        for (text, needle) in cases {
            let e = keys(text).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
