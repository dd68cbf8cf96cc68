//! System configuration: host preset, device preset, processes, duration and seed, in TOML.
//!
//! ```toml
//! seed = 1
//! duration_ms = 10000
//! alone = true                 # also run the latency-critical online services by themselves
//!
//! [host]                       # a host preset plus overrides (crate host, config.rs)
//! preset = "arm8"
//! [host.nvme]
//! completion = "polled"
//!
//! [device]                     # a device preset plus overrides (crate device)
//! preset = "zssd"
//!
//! [[process]]
//! profile = "apache"           # a built-in profile (presets.md), or `fio = "job.fio"`
//! class = "latency-critical"   # default: latency-critical for online services, else throughput
//! threads = 4                  # online: workers; offline: threads
//! requests_per_sec = 400       # online
//! arrivals = "poisson"         # or "fixed"
//! instructions_per_request = 1000000
//! buffering = "direct"         # or "buffered" (profiles; fio jobs use their own `direct`)
//! io_size = "fixed"            # or "exponential"
//! io_gaps = "exponential"      # or "fixed"
//! file_bytes = 17179869184
//! fsync_every_writes = 0       # buffered writers: fsync after every N writes (0: never)
//! start_ms = 0                 # when the process starts (its threads first run, its client
//!                              # first sends); must be below duration_ms
//!
//! [[process]]
//! profile = "pagerank"
//!
//! [[process]]
//! trace = "db.csv"             # a block trace in any format workload::trace reads (blkparse,
//!                              # msr, spc, csv, mqsim, disksim), detected from its first lines
//! trace_mode = "open-loop"     # or "closed-loop" (with trace_qd), or "afap" (one at a time)
//! trace_qd = 32                # closed loop: I/Os in flight, timestamps ignored
//! trace_format = "msr"         # optional: the format, when detection should not decide
//! trace_device = 1             # optional: one device's records (a number, or "8,0")
//! trace_speed = 2.0            # optional, open loop: trace times divided by this
//! trace_from_ms = 0            # optional window, trace time from its first record
//! trace_to_ms = 60000
//! skip_bad_lines = false       # optional: count malformed lines instead of failing
//! ```
//!
//! A trace process's addresses are folded onto its file (`file_bytes`, from the host preset)
//! as a device-level replay folds them onto the device (workload::trace::replay); the trace is
//! streamed as the process issues, never loaded (`trace`'s essay: keys, modes, errors).
//!
//! Unknown keys are errors naming the key; an unknown profile lists the known ones.
//!
//! Remote tenants (`[[tenant]]` tables, the `ullstack bench` tenant spec, with a `[sim]` table)
//! are not part of a system config: they run on the simulated remote server (`sim::remote`,
//! `ullstack sim --remote FILE`), the same file `ullstack bench --scenario FILE` drives a live
//! server with. A system file holding them is refused with an error saying so; remote tenants
//! and host processes do not share one simulation.

use std::path::{Path, PathBuf};

use device::DeviceConfig;
use engine::{IoClass, SimTime};
use host::{Arrivals, HostConfig, IoGaps, ProcessSpec, Workload};
use serde::Deserialize;
use workload::{Buffering, IoSizeModel, JobFile, Profile};

use super::trace::{SystemTrace, TraceDeviceKey, TraceKeys, TraceModeKey, TraceTable};

#[derive(Debug, thiserror::Error)]
pub enum SystemConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{source_name}: {message}")]
    Invalid {
        source_name: String,
        message: String,
    },
}

/// Everything a system run needs.
#[derive(Clone, Debug)]
pub struct SystemConfig {
    pub seed: u64,
    pub duration: SimTime,
    pub host: HostConfig,
    pub device: DeviceConfig,
    pub processes: Vec<ProcessSpec>,
    /// Also run the latency-critical online services alone (the `alone` reference).
    pub alone: bool,
    /// Where the config came from (a path or `embedded-default`).
    pub source: String,
    /// The named stack applied to the file (`--stack`), if any.
    pub stack: Option<crate::stack::StackInfo>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SystemFile {
    seed: Option<u64>,
    duration_ms: Option<u64>,
    alone: Option<bool>,
    host: Option<toml::Table>,
    device: Option<toml::Table>,
    #[serde(default)]
    process: Vec<ProcessTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessTable {
    name: Option<String>,
    profile: Option<String>,
    fio: Option<PathBuf>,
    trace: Option<PathBuf>,
    trace_mode: Option<TraceModeKey>,
    trace_qd: Option<u32>,
    trace_format: Option<String>,
    trace_device: Option<TraceDeviceKey>,
    trace_speed: Option<f64>,
    trace_from_ms: Option<u64>,
    trace_to_ms: Option<u64>,
    skip_bad_lines: Option<bool>,
    class: Option<IoClass>,
    threads: Option<u32>,
    requests_per_sec: Option<u64>,
    arrivals: Option<Arrivals>,
    instructions_per_request: Option<u64>,
    buffering: Option<BufferingKey>,
    io_size: Option<IoSizeKey>,
    io_gaps: Option<IoGaps>,
    file_bytes: Option<u64>,
    fsync_every_writes: Option<u32>,
    start_ms: Option<u64>,
}

/// How errors name a process: its `name`, else its profile, else the file name of its fio job
/// or trace, else `unnamed`.
fn process_label(p: &ProcessTable) -> String {
    let file_name = |path: &PathBuf| {
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string())
    };
    p.name
        .clone()
        .or_else(|| p.profile.clone())
        .or_else(|| p.fio.as_ref().map(file_name))
        .or_else(|| p.trace.as_ref().map(file_name))
        .unwrap_or_else(|| "unnamed".into())
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum BufferingKey {
    Direct,
    Buffered,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum IoSizeKey {
    Fixed,
    Exponential,
}

/// Default duration of a system run.
pub const DEFAULT_DURATION_MS: u64 = 10_000;

/// The embedded default: apache (latency-critical) with pagerank (throughput) on arm8 + zssd,
/// 10 s simulated, and apache alone.
pub const DEFAULT_SYSTEM_TOML: &str = "\
# Embedded default full-system run (`ullstack sim` with no arguments): the online service
# apache (latency-critical) co-running with the offline job pagerank (throughput) on the arm8
# host with the zssd device for 10 s of simulated time, and apache alone for reference.
seed = 1
duration_ms = 10000
alone = true

[host]
preset = \"arm8\"

[device]
preset = \"zssd\"

[[process]]
profile = \"apache\"
class = \"latency-critical\"

[[process]]
profile = \"pagerank\"
class = \"throughput\"
";

impl SystemConfig {
    /// Parses a system config. `base` resolves relative fio job paths.
    pub fn parse(
        text: &str,
        source_name: &str,
        base: &Path,
    ) -> Result<SystemConfig, SystemConfigError> {
        Self::parse_with_stack(text, source_name, base, None)
    }

    /// As [`parse`](Self::parse), with `stack`'s settings merged into the file's `[host]` and
    /// `[device]` tables first (`crate::stack`).
    pub fn parse_with_stack(
        text: &str,
        source_name: &str,
        base: &Path,
        stack: Option<&crate::stack::Stack>,
    ) -> Result<SystemConfig, SystemConfigError> {
        let invalid = |message: String| SystemConfigError::Invalid {
            source_name: source_name.to_string(),
            message,
        };
        if let Ok(table) = text.parse::<toml::Table>() {
            if let Some(key) = ["tenant", "sim"]
                .into_iter()
                .find(|k| table.contains_key(*k))
            {
                return Err(invalid(format!(
                    "`{key}` belongs to a remote scenario ([[tenant]] tables are remote tenants, \
                     the `ullstack bench` tenant spec): run it with `ullstack sim --remote FILE` \
                     (the simulated remote server) or `ullstack bench --scenario FILE` (a live \
                     server); a system config has [host], [device] and [[process]] tables"
                )));
            }
        }
        let mut file: SystemFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if let Some(stack) = stack {
            let mut host = file.host.take().unwrap_or_default();
            let mut device = file.device.take().unwrap_or_else(|| {
                toml::Table::from_iter([("preset".to_string(), toml::Value::from("zssd"))])
            });
            stack.apply(&mut host, &mut device).map_err(invalid)?;
            file.host = Some(host);
            file.device = Some(device);
        }
        let host = HostConfig::from_toml_table(file.host.unwrap_or_default())
            .map_err(|e| invalid(format!("[host]: {e}")))?;
        let device = match file.device {
            Some(t) => DeviceConfig::from_toml_table(t),
            None => DeviceConfig::preset("zssd"),
        }
        .map_err(|e| invalid(format!("[device]: {e}")))?;
        let duration_ms = file.duration_ms.unwrap_or(DEFAULT_DURATION_MS);
        if duration_ms == 0 {
            return Err(invalid("duration_ms must be positive".into()));
        }
        if file.process.is_empty() {
            return Err(invalid(
                "no processes: add at least one [[process]] with `profile = \"..\"` or `fio = \"..\"`".into(),
            ));
        }
        let mut processes = Vec::new();
        for (i, p) in file.process.into_iter().enumerate() {
            let label = process_label(&p);
            let at = |m: String| invalid(format!("process {} ({label}): {m}", i + 1));
            let sources = [p.profile.is_some(), p.fio.is_some(), p.trace.is_some()];
            if sources.iter().filter(|&&b| b).count() > 1 {
                return Err(at("give one of `profile`, `fio` and `trace`".into()));
            }
            let trace_table = TraceTable {
                mode: p.trace_mode,
                qd: p.trace_qd,
                format: p.trace_format.clone(),
                device: p.trace_device.clone(),
                speed: p.trace_speed,
                from_ms: p.trace_from_ms,
                to_ms: p.trace_to_ms,
                skip_bad_lines: p.skip_bad_lines,
            };
            if trace_table.any_set() && p.trace.is_none() {
                return Err(at(
                    "`trace_mode`, `trace_qd`, `trace_format`, `trace_device`, `trace_speed`, `trace_from_ms`, `trace_to_ms` and `skip_bad_lines` need `trace = \"file\"`".into(),
                ));
            }
            let mut trace_to_check = None;
            let mut spec = match (&p.profile, p.fio.as_ref().or(p.trace.as_ref())) {
                (None, Some(path)) if p.trace.is_some() => {
                    let path = if path.is_absolute() {
                        path.clone()
                    } else {
                        base.join(path)
                    };
                    let keys = TraceKeys::of(&trace_table).map_err(at)?;
                    let mode = keys.mode;
                    let trace = std::sync::Arc::new(SystemTrace {
                        path: path.clone(),
                        keys,
                    });
                    trace_to_check = Some(trace.clone());
                    ProcessSpec {
                        name: path
                            .file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                            .unwrap_or_else(|| "trace".into()),
                        workload: Workload::Trace {
                            trace,
                            mode,
                            source: path.display().to_string(),
                        },
                        class: p.class.unwrap_or(IoClass::Throughput),
                        threads: 1,
                        requests_per_sec: workload::ONLINE_REQUESTS_PER_SEC,
                        arrivals: Arrivals::Poisson,
                        instructions_per_request: host.app.instructions_per_request,
                        buffering: Buffering::Direct,
                        io_size: IoSizeModel::Fixed,
                        io_gaps: IoGaps::Fixed,
                        file_bytes: host.app.file_bytes,
                        fsync_every_writes: 0,
                        start: SimTime::ZERO,
                    }
                }
                (Some(name), None) => {
                    let profile = Profile::named(name).map_err(|e| at(e.to_string()))?;
                    let online = profile.kind == workload::ProfileKind::Online;
                    let class = p.class.unwrap_or(if online {
                        IoClass::LatencyCritical
                    } else {
                        IoClass::Throughput
                    });
                    ProcessSpec::from_profile(profile, class, &host)
                }
                (None, Some(path)) => {
                    let path = if path.is_absolute() {
                        path.clone()
                    } else {
                        base.join(path)
                    };
                    let jobs = JobFile::load(&path).map_err(|e| at(e.to_string()))?;
                    if jobs.jobs.is_empty() {
                        return Err(at(format!("{} defines no jobs", path.display())));
                    }
                    let source = path.display().to_string();
                    ProcessSpec {
                        name: path
                            .file_stem()
                            .map(|s| s.to_string_lossy().into_owned())
                            .unwrap_or_else(|| "fio".into()),
                        workload: Workload::Fio {
                            jobs: jobs.jobs,
                            source,
                        },
                        class: p.class.unwrap_or(IoClass::Throughput),
                        threads: 1,
                        requests_per_sec: workload::ONLINE_REQUESTS_PER_SEC,
                        arrivals: Arrivals::Poisson,
                        instructions_per_request: host.app.instructions_per_request,
                        buffering: Buffering::Buffered,
                        io_size: IoSizeModel::Fixed,
                        io_gaps: IoGaps::Fixed,
                        file_bytes: host.app.file_bytes,
                        fsync_every_writes: 0,
                        start: SimTime::ZERO,
                    }
                }
                (Some(_), Some(_)) => unreachable!("checked above"),
                (None, None) => {
                    return Err(at(format!(
                        "needs `profile = \"..\"` (one of: {}), `fio = \"job.fio\"` or `trace = \"file.csv\"`",
                        Profile::all()
                            .map(|p| p.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            };
            if let Some(n) = p.name.clone() {
                spec.name = n;
            }
            if let Some(v) = p.threads {
                if v == 0 {
                    return Err(at("threads must be at least 1".into()));
                }
                spec.threads = v;
            }
            if let Some(v) = p.requests_per_sec {
                if v == 0 {
                    return Err(at("requests_per_sec must be at least 1".into()));
                }
                spec.requests_per_sec = v;
            }
            if let Some(v) = p.arrivals {
                spec.arrivals = v;
            }
            if let Some(v) = p.instructions_per_request {
                spec.instructions_per_request = v;
            }
            if let Some(v) = p.buffering {
                spec.buffering = match v {
                    BufferingKey::Direct => Buffering::Direct,
                    BufferingKey::Buffered => Buffering::Buffered,
                };
            }
            if let Some(v) = p.io_size {
                spec.io_size = match v {
                    IoSizeKey::Fixed => IoSizeModel::Fixed,
                    IoSizeKey::Exponential => IoSizeModel::Exponential,
                };
            }
            if let Some(v) = p.io_gaps {
                spec.io_gaps = v;
            }
            if let Some(v) = p.file_bytes {
                spec.file_bytes = v;
            }
            if let Some(v) = p.fsync_every_writes {
                spec.fsync_every_writes = v;
            }
            if let Some(v) = p.start_ms {
                if v >= duration_ms {
                    return Err(at(format!(
                        "start_ms = {v} is not before the run's end (duration_ms = {duration_ms}): the process would never run"
                    )));
                }
                spec.start = SimTime::from_ms(v);
            }
            if let Some(trace) = trace_to_check {
                // Folded onto the process's file as its run will fold it.
                trace.check(spec.file_bytes).map_err(at)?;
            }
            if processes.iter().any(|q: &ProcessSpec| q.name == spec.name) {
                return Err(at(format!(
                    "two processes are named `{}`; give one a `name`",
                    spec.name
                )));
            }
            processes.push(spec);
        }
        Ok(SystemConfig {
            seed: file.seed.unwrap_or(1),
            duration: SimTime::from_ms(duration_ms),
            host,
            device,
            processes,
            alone: file.alone.unwrap_or(false),
            source: source_name.to_string(),
            stack: stack.map(|s| s.info()),
        })
    }

    /// Reads a system config file.
    pub fn load(path: &Path) -> Result<SystemConfig, SystemConfigError> {
        Self::load_with_stack(path, None)
    }

    /// Reads a system config file and applies `stack` to it.
    pub fn load_with_stack(
        path: &Path,
        stack: Option<&crate::stack::Stack>,
    ) -> Result<SystemConfig, SystemConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| SystemConfigError::Read {
            path: path.into(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse_with_stack(&text, &path.display().to_string(), base, stack)
    }

    /// The embedded default (`ullstack sim` with no arguments).
    pub fn embedded_default() -> SystemConfig {
        Self::parse(DEFAULT_SYSTEM_TOML, "embedded-default", Path::new("."))
            .expect("the embedded default system config is valid")
    }

    /// The same system with only its latency-critical online services (the `alone` run).
    pub fn alone_config(&self) -> Option<SystemConfig> {
        let processes: Vec<ProcessSpec> = self
            .processes
            .iter()
            .filter(|p| {
                p.kind() == host::ProcessKind::Online && p.class == IoClass::LatencyCritical
            })
            .cloned()
            .collect();
        if processes.is_empty() || processes.len() == self.processes.len() {
            return None;
        }
        Some(SystemConfig {
            processes,
            alone: false,
            ..self.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SystemConfig, SystemConfigError> {
        SystemConfig::parse(text, "test.toml", Path::new("."))
    }

    #[test]
    fn embedded_default_parses() {
        let c = SystemConfig::embedded_default();
        assert_eq!(c.processes.len(), 2);
        assert_eq!(c.processes[0].class, IoClass::LatencyCritical);
        assert_eq!(c.processes[1].class, IoClass::Throughput);
        assert_eq!(c.duration, SimTime::from_secs(10));
        assert_eq!(c.alone_config().unwrap().processes.len(), 1);
    }

    /// A remote scenario given as a system config is refused, pointing to `--remote`.
    #[test]
    fn remote_tenants_point_to_the_remote_runner() {
        for text in [
            "[[tenant]]\nname = \"a\"\nqd = 1\n",
            "[[process]]\nprofile = \"apache\"\n[sim]\nworkers = 1\n",
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(
                e.contains("ullstack sim --remote") && e.contains("test.toml"),
                "{e}"
            );
        }
    }

    #[test]
    fn unknown_profile_lists_the_known_ones() {
        let e = parse("[[process]]\nprofile = \"apachee\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("apachee") && e.contains("pagerank") && e.contains("imageserver-upload"),
            "{e}"
        );
    }

    #[test]
    fn bad_keys_are_named() {
        let e = parse("[[process]]\nprofile = \"apache\"\nthreds = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("threds"), "{e}");
        let e = parse(
            "[host]\npreset = \"arm8\"\n[host.cpu]\ncorez = 1\n[[process]]\nprofile = \"apache\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cpu.corez"), "{e}");
        let e = parse("[host]\npreset = \"arm9\"\n[[process]]\nprofile = \"apache\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("arm8, arm8-4g, x86-4"), "{e}");
        let e = parse("seed = 1\n").unwrap_err().to_string();
        assert!(e.contains("no processes"), "{e}");
        let e = parse("[[process]]\nprofile = \"apache\"\nclass = \"urgent\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("urgent"), "{e}");
        let e = parse("[[process]]\nprofile = \"apache\"\n[[process]]\nprofile = \"apache\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("two processes"), "{e}");
    }

    #[test]
    fn an_unnamed_process_is_named_by_its_file_in_errors() {
        let e = parse("[[process]]\nfio = \"jobs/mix.fio\"\nthreads = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("process 1 (mix.fio)"), "{e}");
        let e = parse("[[process]]\ntrace = \"db.csv\"\nthreads = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("process 1 (db.csv)"), "{e}");
    }
}
