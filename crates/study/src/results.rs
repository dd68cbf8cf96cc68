//! A study's results: the headline figures read back from each run's `summary.json`, and
//! `study.json`.
//!
//! Results are always read from disk, whether the run was simulated now or reused, so a resumed
//! study and a fresh one go through the same code and give the same `study.json`. That file holds,
//! per run, its id, config hash, device, host, job, and the headline numbers of each direction
//! with I/O (`ios`, `iops`, `bytes_per_sec`, `mean_ns`, `p99_ns`, `p99_999_ns`), and CPU use.
//! It holds nothing that depends on wall time, worker count or sharding, so two executions of
//! the same study compare byte for byte.
//!
//! A summary is read through the types the simulator wrote it with (`sim::RunSummary` for a
//! device-level run, `sim::system::SystemSummary` for a full-system one), so a field renamed or
//! dropped there is a compile error here, and a summary missing a field is refused by name.
//!
//! ## Full-system runs
//! A system run's entry has no `read`/`write` headline (its processes are not fio jobs):
//! `system` holds each process's response time (online services) or instruction rate
//! (offline jobs), where its threads' time went (`exec_time`: ns by span, summed over its
//! threads, and their lives) and for online services where their requests' response time went
//! (`request_time`: ns by part, summed over the completed requests) — both checked on reading
//! to add up to their totals, as the simulator checked them — the device counters the studies compare (write stalls, units programmed and
//! wasted, host rows by page type, drain activity), the host counters the FlashShare study
//! compares (device cache read hits and misses by class, the latency-critical I/O's mean time
//! per layer, NVMe commands by class, interrupts, polled completions, context switches, CPU
//! seconds by category done for the latency-critical class), and, when the run wrote
//! `timeseries.csv`, per window: I/Os and latency of each class, pages written back, cache
//! read hits and misses and ways of each class, and scheduler CPU time. Its `cpu` is the
//! processes' CPU time as percent of one core over the simulated time.
//!
//! ## CPU use
//! Every run's `summary.json` reports its job's CPU time, `jobs[0].cpu { user_ns, kernel_ns }`
//! (summed over the job's threads); `study.json` gives it as percent of one core over the job's
//! span (first submission to last completion, `ios / iops`: the span the summary's rates are
//! over), so a four-thread job can exceed 100 %. E.g. x86-4 at 69 000 IOPS (zssd, QD1 reads,
//! interrupt completion): 5.2 µs of kernel time per I/O is 36 % of a core. Not over
//! `sim.simulated_ns`: a run ends when the device is idle, and a TLC drive drains its write
//! buffer long after the job's last write (`ull --quick`, nvme-tlc sequential writes at depth
//! 256: a 4.6 ms job in an 18.9 ms run, 253 % of a core over the job, 61 % over the run).

use std::collections::BTreeMap;
use std::path::Path;

use device::cache::ClassCacheStats;
use host::pagecache::PageCacheStats;
use host::{Breakdown, ExecTime, RequestTime};
use serde::Serialize;
use sim::report::{JobResult, OpResult, RunSummary, ThreadCpu};
use sim::system::summary::{SystemRunSummary, SystemSummary};

use crate::exec::run_dir;
use crate::spec::RunSpec;

/// Headline numbers of one direction (read or write) of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpHeadline {
    pub ios: u64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub mean_ns: u64,
    pub p99_ns: u64,
    pub p99_999_ns: u64,
}

/// CPU use of a run's threads, percent of one core.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuUse {
    pub kernel_pct: f64,
    pub user_pct: f64,
}

/// One run's entry in `study.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    pub id: String,
    pub config_hash: String,
    pub device: String,
    pub host: String,
    pub job: String,
    pub simulated_ns: u64,
    pub read: Option<OpHeadline>,
    pub write: Option<OpHeadline>,
    pub cpu: CpuUse,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemHeadline>,
}

/// A full-system run's headline numbers (see the module essay).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SystemHeadline {
    pub processes: Vec<ProcessHeadline>,
    pub device: DeviceHeadline,
    pub host: HostHeadline,
    /// Per window of `timeseries.csv`, if the run wrote one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<SeriesPoint>,
}

/// One process of a system run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessHeadline {
    pub name: String,
    /// Online services: requests finished and their response time.
    pub requests: Option<u64>,
    pub response_mean_ns: Option<u64>,
    pub response_p95_ns: Option<u64>,
    pub response_p99_ns: Option<u64>,
    /// Offline jobs: instructions retired per second.
    pub instructions_per_sec: Option<f64>,
    /// Where its threads' time went (every system run's summary has it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_time: Option<TimeSplit>,
    /// Online services: where their completed requests' response time went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_time: Option<TimeSplit>,
}

/// A total split into named parts that add up to it (`exec_time` of a process: its threads'
/// lives by span; `request_time`: its requests' response times by part), ns.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TimeSplit {
    /// Threads (`exec_time`) or completed requests (`request_time`) summed over.
    pub count: u64,
    pub total_ns: u64,
    pub parts_ns: BTreeMap<String, u64>,
}

impl TimeSplit {
    /// The nanoseconds of the named parts (absent ones count 0).
    pub fn sum_of(&self, parts: &[&str]) -> u64 {
        parts.iter().filter_map(|p| self.parts_ns.get(*p)).sum()
    }
}

/// A time split read back from its producing type; refused if the parts do not add up to the
/// total (`what` names it in the message).
fn time_split(
    what: &str,
    count: u64,
    total_ns: u64,
    parts_ns: BTreeMap<String, u64>,
) -> Result<TimeSplit, String> {
    let sum: u64 = parts_ns.values().sum();
    if sum != total_ns {
        return Err(format!(
            "{what}: its parts add up to {sum} ns, not its total of {total_ns} ns"
        ));
    }
    Ok(TimeSplit {
        count,
        total_ns,
        parts_ns,
    })
}

/// Spans by name (`host::SPANS` order does not matter: the map sorts them).
fn span_parts(ns: &host::exectime::SpanNs) -> impl Iterator<Item = (String, u64)> + '_ {
    host::SPANS
        .iter()
        .zip(ns)
        .map(|(s, v)| (s.name().to_string(), *v))
}

/// A process's threads' lives by span.
fn exec_split(name: &str, e: &ExecTime) -> Result<TimeSplit, String> {
    time_split(
        &format!("processes[{name}].exec_time"),
        u64::from(e.threads),
        e.lifetime_ns,
        span_parts(&e.ns).collect(),
    )
}

/// An online service's requests' response times by part.
fn request_split(name: &str, r: &RequestTime) -> Result<TimeSplit, String> {
    let extra = [
        ("network".to_string(), r.sum.network_ns),
        ("worker_queue".to_string(), r.sum.worker_queue_ns),
    ];
    time_split(
        &format!("processes[{name}].request_time"),
        r.requests,
        r.response_ns,
        extra.into_iter().chain(span_parts(&r.sum.spans)).collect(),
    )
}

/// The device counters a system study compares.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceHeadline {
    pub write_stalls: u64,
    pub write_stall_ns: u64,
    /// Read misses that waited for a DRAM line to stage in (`cache.read_staging = "buffer"` or
    /// `"buffer-in-order"`; the summary omits the counter while it is 0).
    pub read_staging_stalls: u64,
    /// 4 KiB units programmed to flash (host and GC), and units of programmed rows left empty
    /// or skipped (`ftl.units_wasted`).
    pub units_programmed: u64,
    pub units_wasted: u64,
    /// Host rows by page type (`ftl.alloc` other than `sequential`), else `None`.
    pub host_rows_lsb_csb_msb: Option<[u64; 3]>,
    /// Most units the write buffer held at once (`device.cache.max_dirty_units`).
    pub max_dirty_units: u64,
    /// `cache.drain` other than `vanilla`: its counters, else `None`.
    pub drain: Option<DrainHeadline>,
}

/// What the drain did (`device.drain`): hints read, the pages they announced, the waves that
/// drained in the background or the foreground and their rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DrainHeadline {
    pub hints: u64,
    pub hinted_pages: u64,
    pub background_waves: u64,
    pub foreground_waves: u64,
    pub background_rows: u64,
    pub foreground_rows: u64,
}

/// The host's write-back (`host.pagecache`): waves, the pages they wrote and their hints
/// announced, and the adaptive thresholds' switches (`None` when they do not adapt).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WritebackHeadline {
    pub waves: u64,
    pub wave_pages: u64,
    pub hinted_pages: u64,
    pub switches_to_high: Option<u64>,
    pub switches_to_low: Option<u64>,
}

/// Device DRAM cache reads of one class (`device.cache.latency_critical` / `.throughput`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ClassCacheReads {
    pub read_hits: u64,
    pub read_misses: u64,
}

impl ClassCacheReads {
    /// Hits over lookups, `None` without a lookup.
    pub fn hit_rate(&self) -> Option<f64> {
        let n = self.read_hits + self.read_misses;
        (n > 0).then(|| self.read_hits as f64 / n as f64)
    }
}

/// The host counters a latency-class study compares (see the module essay).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostHeadline {
    /// Device cache reads, latency-critical then throughput class (by the command's class:
    /// all throughput when the kernel passes no class, `host.attr = "off"`).
    pub cache: [ClassCacheReads; 2],
    /// Mean time per latency-critical request in each layer (`breakdown_ns` of the summary).
    pub breakdown_lc_ns: Breakdown,
    pub nvme_commands_lc: u64,
    pub nvme_commands_tp: u64,
    pub interrupts: u64,
    pub polled_completions: u64,
    pub doorbells: u64,
    pub context_switches: u64,
    /// CPU seconds by category (`user`, `syscall`, `blk`, …) done for the latency-critical
    /// class: its threads and its requests' interrupt work.
    pub cpu_lc_s: BTreeMap<String, f64>,
    pub writeback: WritebackHeadline,
}

/// One window of a system run's time series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesPoint {
    pub t_end_ms: f64,
    pub lc_ios: u64,
    pub lc_lat_mean_ns: u64,
    pub lc_lat_p99_ns: u64,
    pub tp_ios: u64,
    pub tp_iops: f64,
    /// Page-cache pages written back in the window (both classes).
    pub pages_written_back: u64,
    /// Device cache reads in the window, latency-critical then throughput class.
    pub cache: [ClassCacheReads; 2],
    /// Ways of every set each class may fill at the window's end (both all when shared).
    pub cache_ways: [u64; 2],
    /// CPU time in the scheduler (context switches) in the window, summed over cores.
    pub cpu_sched_ns: u64,
    /// Context switches in the window by the class of the thread switched in (LC, TP), and
    /// interrupts.
    pub context_switches: [u64; 2],
    pub interrupts: u64,
    /// Online services' requests answered in the window and their response time.
    pub online_requests: u64,
    pub online_resp_mean_ns: u64,
    pub online_resp_p99_ns: u64,
}

/// Every run's result, by id.
pub type Results = BTreeMap<String, RunResult>;

/// Reads the results of `specs` from their folders under `out`.
pub fn load(out: &Path, specs: &[RunSpec]) -> Result<Results, String> {
    load_on(out, specs, 1)
}

/// [`load`], reading the runs on up to `jobs` threads ([`crate::pool`]): the same results
/// (keyed by id, whatever order they were read in), or the same first error.
pub fn load_on(out: &Path, specs: &[RunSpec], jobs: usize) -> Result<Results, String> {
    let loaded = crate::pool::try_map(specs, jobs, |spec| load_one(out, spec))?;
    Ok(specs.iter().map(|s| s.id.clone()).zip(loaded).collect())
}

/// One run's headline numbers, read from its folder under `out`.
fn load_one(out: &Path, spec: &RunSpec) -> Result<RunResult, String> {
    let dir = run_dir(out, &spec.id);
    let path = dir.join("summary.json");
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let not_a_summary = |e: serde_json::Error| format!("{}: not a summary: {e}", path.display());
    match spec.system {
        Some(_) => {
            let s: SystemSummary = serde_json::from_str(&text).map_err(not_a_summary)?;
            system_headline(spec, &s.run, &dir)
        }
        None => {
            let s: RunSummary = serde_json::from_str(&text).map_err(not_a_summary)?;
            headline(spec, s.sim.simulated_ns, &s.jobs)
        }
    }
    .map_err(|e| format!("{}: {e}", path.display()))
}

fn headline(spec: &RunSpec, simulated_ns: u64, jobs: &[JobResult]) -> Result<RunResult, String> {
    let [job] = jobs else {
        return Err(format!(
            "a study run has exactly one job; this summary has {}",
            jobs.len()
        ));
    };
    let read = op(&job.read);
    let write = op(&job.write);
    let cpu = cpu(&job.cpu, span_ns(&read, &write))?;
    Ok(RunResult {
        id: spec.id.clone(),
        config_hash: spec.config_hash(),
        device: spec.device.clone(),
        host: spec.host.clone(),
        job: job.name.clone(),
        simulated_ns,
        read,
        write,
        cpu,
        system: None,
    })
}

fn system_headline(spec: &RunSpec, s: &SystemRunSummary, dir: &Path) -> Result<RunResult, String> {
    let simulated_ns = s.sim.simulated_ns;
    let mut processes = Vec::new();
    let (mut user_ns, mut kernel_ns) = (0u64, 0u64);
    for p in &s.processes {
        user_ns += p.cpu.user_ns;
        kernel_ns += p.cpu.kernel_ns;
        let response = p.response_time_ns.as_ref();
        processes.push(ProcessHeadline {
            name: p.name.clone(),
            requests: p.requests,
            response_mean_ns: response.map(|r| r.mean),
            response_p95_ns: response.map(|r| r.p95),
            response_p99_ns: response.map(|r| r.p99),
            instructions_per_sec: p.instructions_per_sec,
            exec_time: Some(exec_split(&p.name, &p.exec_time)?),
            request_time: p
                .request_time
                .as_ref()
                .map(|r| request_split(&p.name, r))
                .transpose()?,
        });
    }
    let d = &s.device;
    let device = DeviceHeadline {
        write_stalls: d.commands.write_stalls,
        write_stall_ns: d.commands.write_stall_ns,
        read_staging_stalls: d.commands.read_staging_stalls,
        units_programmed: d.flash.units_programmed,
        units_wasted: d.ftl.units_wasted,
        host_rows_lsb_csb_msb: d
            .ftl
            .alloc
            .as_ref()
            .map(|a| [a.host_rows_lsb, a.host_rows_csb, a.host_rows_msb]),
        max_dirty_units: d.cache.max_dirty_units,
        drain: d.drain.as_ref().map(|dr| DrainHeadline {
            hints: dr.hints,
            hinted_pages: dr.hinted_pages,
            background_waves: dr.background_waves,
            foreground_waves: dr.foreground_waves,
            background_rows: dr.background_rows,
            foreground_rows: dr.foreground_rows,
        }),
    };
    let host = host_headline(s);
    let pct = |ns: u64| round3(100.0 * ns as f64 / simulated_ns.max(1) as f64);
    Ok(RunResult {
        id: spec.id.clone(),
        config_hash: spec.config_hash(),
        device: spec.device.clone(),
        host: spec.host.clone(),
        job: spec
            .system
            .as_ref()
            .map_or(String::new(), |s| s.stack.clone()),
        simulated_ns,
        read: None,
        write: None,
        cpu: CpuUse {
            kernel_pct: pct(kernel_ns),
            user_pct: pct(user_ns),
        },
        system: Some(SystemHeadline {
            processes,
            device,
            host,
            series: read_series(&dir.join("timeseries.csv"))?,
        }),
    })
}

/// The host counters of a system summary (see [`HostHeadline`]).
fn host_headline(s: &SystemRunSummary) -> HostHeadline {
    let class_reads = |c: &ClassCacheStats| ClassCacheReads {
        read_hits: c.read_hits,
        read_misses: c.read_misses,
    };
    let cache = &s.device.cache;
    let nvme = &s.host.nvme;
    HostHeadline {
        cache: [
            class_reads(&cache.latency_critical),
            class_reads(&cache.throughput),
        ],
        breakdown_lc_ns: s.breakdown_ns.clone(),
        nvme_commands_lc: nvme.commands_latency_critical,
        nvme_commands_tp: nvme.commands_throughput,
        interrupts: nvme.interrupts,
        polled_completions: nvme.polled_completions,
        doorbells: nvme.doorbells,
        context_switches: s.cpu.context_switches,
        cpu_lc_s: s.host.cpu_by_class.latency_critical.clone(),
        writeback: writeback_headline(&s.host.pagecache),
    }
}

fn writeback_headline(pc: &PageCacheStats) -> WritebackHeadline {
    let adaptive = pc.adaptive_dirty.as_ref();
    WritebackHeadline {
        waves: pc.writeback_waves,
        wave_pages: pc.writeback_wave_pages,
        hinted_pages: pc.writeback_hinted_pages,
        switches_to_high: adaptive.map(|a| a.switches_to_high),
        switches_to_low: adaptive.map(|a| a.switches_to_low),
    }
}
/// The columns of `timeseries.csv` a system study plots (none if the run wrote no series).
fn read_series(path: &Path) -> Result<Vec<SeriesPoint>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or(format!("{}: no column `{name}`", path.display()))
    };
    let cols = [
        col("t_end_ns")?,
        col("lc_ios")?,
        col("lc_lat_mean_ns")?,
        col("lc_lat_p99_ns")?,
        col("lc_pages_written_back")?,
        col("tp_pages_written_back")?,
        col("tp_ios")?,
        col("lc_cache_read_hits")?,
        col("lc_cache_read_misses")?,
        col("tp_cache_read_hits")?,
        col("tp_cache_read_misses")?,
        col("lc_cache_ways")?,
        col("tp_cache_ways")?,
        col("cpu_sched_ns")?,
        col("t_start_ns")?,
        col("lc_context_switches")?,
        col("tp_context_switches")?,
        col("interrupts")?,
        col("online_requests")?,
        col("online_resp_mean_ns")?,
        col("online_resp_p99_ns")?,
    ];
    let mut points = Vec::new();
    for (i, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split(',').collect();
        let v = |c: usize| -> Result<u64, String> {
            fields
                .get(c)
                .and_then(|f| f.parse::<u64>().ok())
                .ok_or(format!(
                    "{}: row {}: column {c} is not a count",
                    path.display(),
                    i + 2
                ))
        };
        let (start_ns, end_ns) = (v(cols[14])?, v(cols[0])?);
        let tp_ios = v(cols[6])?;
        points.push(SeriesPoint {
            t_end_ms: end_ns as f64 / 1e6,
            lc_ios: v(cols[1])?,
            lc_lat_mean_ns: v(cols[2])?,
            lc_lat_p99_ns: v(cols[3])?,
            tp_ios,
            // From the count and the window, not the CSV's rounded text.
            tp_iops: round3(tp_ios as f64 * 1e9 / end_ns.saturating_sub(start_ns).max(1) as f64),
            pages_written_back: v(cols[4])? + v(cols[5])?,
            cache: [
                ClassCacheReads {
                    read_hits: v(cols[7])?,
                    read_misses: v(cols[8])?,
                },
                ClassCacheReads {
                    read_hits: v(cols[9])?,
                    read_misses: v(cols[10])?,
                },
            ],
            cache_ways: [v(cols[11])?, v(cols[12])?],
            cpu_sched_ns: v(cols[13])?,
            context_switches: [v(cols[15])?, v(cols[16])?],
            interrupts: v(cols[17])?,
            online_requests: v(cols[18])?,
            online_resp_mean_ns: v(cols[19])?,
            online_resp_p99_ns: v(cols[20])?,
        });
    }
    Ok(points)
}

fn op(r: &OpResult) -> Option<OpHeadline> {
    (r.ios > 0).then_some(OpHeadline {
        ios: r.ios,
        iops: r.iops,
        bytes_per_sec: r.bytes_per_sec,
        mean_ns: r.latency_ns.mean,
        p99_ns: r.latency_ns.p99,
        p99_999_ns: r.latency_ns.p99_999,
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The job's span, ns: the time its rates are over (`OpResult::from_histogram` in sim), the
/// same for both directions; `None` if it did no I/O.
fn span_ns(read: &Option<OpHeadline>, write: &Option<OpHeadline>) -> Option<f64> {
    [read, write]
        .into_iter()
        .flatten()
        .find(|h| h.iops > 0.0)
        .map(|h| h.ios as f64 / h.iops * 1e9)
}

/// The job's CPU time (`cpu { user_ns, kernel_ns }`) as percent of one core over its span.
fn cpu(c: &ThreadCpu, span_ns: Option<f64>) -> Result<CpuUse, String> {
    let span_ns = span_ns.ok_or("the job did no I/O: no span to divide its CPU time by")?;
    let pct = |ns: u64| round3(100.0 * ns as f64 / span_ns);
    Ok(CpuUse {
        kernel_pct: pct(c.kernel_ns),
        user_pct: pct(c.user_ns),
    })
}
/// `study.json`: what was run and its headline numbers.
#[derive(Debug, Serialize)]
pub struct StudyJson<'a> {
    pub study: &'a str,
    pub version: u32,
    pub size: &'a str,
    pub seed: u64,
    /// Runs per replicated comparison (seeds `seed` …).
    pub replicates: u64,
    pub runs_total: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// The build and seeds; the invocations' command lines, times and hosts are in
    /// `provenance.json`, which this names ([`crate::provenance`]: why they are not here).
    pub provenance: &'a crate::provenance::Record,
    /// The published figures beside this study's (the report's first table; empty for a
    /// shard).
    pub published: Vec<crate::published::Row>,
    /// Figures the study derives beyond the published rows ([`crate::studies::StudyDef::findings`];
    /// absent for a shard and for studies without any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub findings: Option<serde_json::Value>,
    pub runs: Vec<&'a RunResult>,
}

/// Which part of a study a sharded execution holds: runs `index`, `index + count`, …
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ShardInfo {
    pub index: usize,
    pub count: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn spec() -> RunSpec {
        RunSpec {
            device_keys: String::new(),
            id: "r".into(),
            device: "zssd".into(),
            host: "x86-4".into(),
            job_fio: "[j]\n".into(),
            seed: 1,
            system: None,
        }
    }

    /// A job as `summary.json` holds it, read through sim's own type.
    fn job(cpu: Value) -> Result<JobResult, serde_json::Error> {
        let lat = json!({"mean": 10_000, "p50": 0, "p95": 0, "p99": 12_000, "p99_9": 0,
                         "p99_99": 0, "p99_999": 20_000, "max": 0});
        serde_json::from_value(json!({
            "name": "j",
            "read": {"ios": 1000, "iops": 100000.0, "bytes_per_sec": 4.096e8, "latency_ns": lat},
            "write": {"ios": 0, "iops": 0.0, "bytes_per_sec": 0.0, "latency_ns": lat},
            "cpu": cpu,
        }))
    }

    // 1000 reads at 100 000 IOPS: a 10 ms job, in a run that went on 30 ms after it.
    const SIMULATED_NS: u64 = 40_000_000;

    #[test]
    fn the_jobs_cpu_time_is_reported_as_percent_of_one_core_over_the_jobs_span() {
        let j = job(json!({"kernel_ns": 2_500_000, "user_ns": 500_000})).unwrap();
        let r = headline(&spec(), SIMULATED_NS, &[j]).unwrap();
        assert_eq!(
            r.cpu,
            CpuUse {
                kernel_pct: 25.0,
                user_pct: 5.0
            }
        );
        assert_eq!(r.write, None, "a direction without I/O has no headline");
        assert_eq!(r.read.unwrap().p99_999_ns, 20_000);
        // Four threads busy all the time: 400 % of one core.
        let j = job(json!({"kernel_ns": 40_000_000, "user_ns": 0})).unwrap();
        let r = headline(&spec(), SIMULATED_NS, &[j]).unwrap();
        assert_eq!(r.cpu.kernel_pct, 400.0);
    }

    #[test]
    fn a_summary_without_the_jobs_cpu_time_is_refused_naming_the_field() {
        let e = job(json!({"user_ns": 0})).unwrap_err().to_string();
        assert!(e.contains("kernel_ns"), "{e}");
        let e = job(Value::Null).unwrap_err().to_string();
        assert!(e.contains("ThreadCpu"), "{e}");
    }

    #[test]
    fn a_summary_with_two_jobs_is_refused() {
        let j = job(json!({"kernel_ns": 0, "user_ns": 0})).unwrap();
        let e = headline(&spec(), SIMULATED_NS, &[j.clone(), j]).unwrap_err();
        assert!(e.contains("exactly one job") && e.contains('2'), "{e}");
    }

    /// A process's time split keeps its parts by name, and is refused if they do not add up
    /// to its total.
    #[test]
    fn a_time_split_must_add_up_to_its_total() {
        let mut e = host::ExecTime {
            threads: 2,
            lifetime_ns: 100,
            ..Default::default()
        };
        e.ns[host::Span::User.index()] = 60;
        e.ns[host::Span::Idle.index()] = 40;
        let t = exec_split("p", &e).unwrap();
        assert_eq!((t.count, t.total_ns), (2, 100));
        assert_eq!(t.parts_ns.len(), host::SPANS.len());
        assert_eq!(t.sum_of(&["user", "io_wait"]), 60);
        e.lifetime_ns = 101;
        let m = exec_split("p", &e).unwrap_err();
        assert!(
            m.contains("processes[p].exec_time")
                && m.contains("add up to 100 ns")
                && m.contains("101"),
            "{m}"
        );
    }

    /// The series columns are found by name (the CSV's order is the simulator's), counters
    /// stay per window, and the throughput rate is the window's count over its length, the
    /// last window being shorter.
    #[test]
    fn series_columns_are_read_by_name_and_the_rate_is_over_each_windows_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timeseries.csv");
        let header = sim::series::header();
        let cols: Vec<&str> = header.split(',').collect();
        let row = |start: u64, end: u64, tp_ios: u64, sched: u64| -> String {
            cols.iter()
                .map(|c| match *c {
                    "t_start_ns" => start.to_string(),
                    "t_end_ns" => end.to_string(),
                    "tp_ios" => tp_ios.to_string(),
                    "lc_cache_read_hits" => "3".into(),
                    "lc_cache_read_misses" => "1".into(),
                    "tp_cache_ways" => "14".into(),
                    "lc_cache_ways" => "2".into(),
                    "cpu_sched_ns" => sched.to_string(),
                    _ => "0".into(),
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        let text = format!(
            "{header}\n{}\n{}\n",
            row(0, 10_000_000, 50, 7),
            row(10_000_000, 15_000_000, 50, 9)
        );
        std::fs::write(&path, text).unwrap();
        let points = read_series(&path).unwrap();
        assert_eq!(points.len(), 2);
        assert_eq!(points[0].tp_iops, 5_000.0);
        assert_eq!(points[1].tp_iops, 10_000.0, "50 I/Os in a 5 ms window");
        assert_eq!(points[1].t_end_ms, 15.0);
        assert_eq!(points[1].cpu_sched_ns, 9);
        assert_eq!(points[0].cache_ways, [2, 14]);
        assert_eq!(points[0].cache[0].hit_rate(), Some(0.75));
        assert_eq!(points[0].cache[1].hit_rate(), None, "no lookup, no rate");
        // A CSV without a column the studies read is refused, naming it.
        let short = header.replace(",cpu_sched_ns", "");
        std::fs::write(&path, format!("{short}\n")).unwrap();
        let e = read_series(&path).unwrap_err();
        assert!(e.contains("cpu_sched_ns"), "{e}");
    }
}
