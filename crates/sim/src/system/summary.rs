//! `summary.json` of a system run, its CSVs and the terminal table.
//!
//! The file extends the device-level summary (`sim`, `device`, `jobs` — fio jobs run through the
//! host stack) with:
//!
//! ```text
//! processes   [ { name, profile (online/offline) or source (fio job file or trace file),
//!                 class, kind (online/offline/fio/trace), requests,
//!                 unfinished_requests, response_time_ns { mean, p50, p95, p99, p99_9, max },
//!                 instructions, instructions_per_sec, ios, io_latency_ns { … },
//!                 cpu { user_ns, kernel_ns }, start_ns (if not 0), first_io_ns (if it made an
//!                 I/O),
//!                 exec_time { threads, lifetime_ns, ns { user, syscall, pagecache, blk, nvme,
//!                             blk_complete, irq, sched, poll, irq_stolen, run_queue, io_wait,
//!                             idle }, fraction { the same, of lifetime_ns } },
//!                 request_time { requests, response_ns, sum_ns { network, worker_queue, user,
//!                                … idle }, mean_ns { … }, fraction { … } } (online only) } ]
//! jobs        [ { …as device-level, cpu { user_ns, kernel_ns } of the job's threads } ]
//! cpu         { user, syscall, pagecache, blk, nvme, blk_complete, irq, sched, poll, idle
//!               (seconds summed over cores), busy_pct, context_switches, interrupts }
//! breakdown_ns { requests, software_queue, hardware_queue, driver, device_queue,
//!                device_service, irq, poll, blk_complete, context_switch }   (LC requests)
//! host        { cpu_by_class { latency_critical { user, syscall, … }, throughput { … } },
//!               breakdown_throughput_ns, request_latency_ns { latency_critical, throughput },
//!               pagecache{…}, blk{…}, nvme{…}, cores[ { core, ns[…], context_switches,
//!               interrupts } ] }
//! alone       { the same for the latency-critical online services run alone }   (if asked)
//! ```
//!
//! `exec_time` is where the process's threads' wall-clock time went, each from its process's
//! start to its exit or the run's end, and `request_time` where its completed requests'
//! response time went (`host::exectime`'s essay: the spans add up exactly, checked in the run).
//!
//! Everything but `sim.wall_ns` (and `alone.sim.wall_ns`) is a pure function of config + seed.

use std::io::Write;
use std::path::Path;

use device::DeviceStats;
use engine::stats::LatencySummary;
use engine::time::format_ns;
use engine::{IoClass, LatencyHistogram};
use host::{
    blk::BlkStats, nvme::NvmeStats, pagecache::PageCacheStats, Breakdown, CoreStats, ExecTime,
    ProcessKind, RequestTime, CATS,
};
use serde::{Deserialize, Serialize};

use crate::report::{CpuSummary, JobResult, OpResult, SimInfo, ThreadCpu};
use crate::system::config::SystemConfig;
use crate::system::run::SystemRunResult;

/// Response-time percentiles, ns.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ResponseTime {
    pub mean: u64,
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub max: u64,
}

impl ResponseTime {
    fn from(h: &LatencyHistogram) -> ResponseTime {
        let s = h.summary();
        ResponseTime {
            mean: s.mean,
            p50: s.p50,
            p95: s.p95,
            p99: s.p99,
            p99_9: s.p99_9,
            max: s.max,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessSummary {
    pub name: String,
    /// The built-in profile an online service or offline job runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The fio job file or block trace a `fio` or `trace` process runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub class: IoClass,
    pub kind: ProcessKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfinished_requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_time_ns: Option<ResponseTime>,
    pub instructions: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions_per_sec: Option<f64>,
    pub ios: u64,
    pub io_latency_ns: LatencySummary,
    /// CPU time of the process's threads: user code, and kernel work in thread context
    /// (interrupt work done for its I/O is in `host.cpu_by_class`).
    pub cpu: ThreadCpu,
    /// When the process started (system config `start_ms`), ns; omitted when 0.
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub start_ns: u64,
    /// When its first read/write call started, ns; omitted if it made none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_io_ns: Option<u64>,
    /// Where its threads' wall-clock time went (`host::exectime`).
    pub exec_time: ExecTime,
    /// Online services: where their completed requests' response time went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_time: Option<RequestTime>,
    /// The whole distribution: written to the response CSV, not to `summary.json`, so a
    /// summary read back has an empty one.
    #[serde(skip)]
    pub response_histogram: LatencyHistogram,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RequestLatency {
    pub latency_critical: LatencySummary,
    pub throughput: LatencySummary,
}

/// CPU seconds per category done for each class (threads of the class and its requests'
/// interrupt work; ISR entry, timers and idle belong to no class).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CpuByClass {
    pub latency_critical: std::collections::BTreeMap<String, f64>,
    pub throughput: std::collections::BTreeMap<String, f64>,
}

impl CpuByClass {
    fn from(cores: &[CoreStats]) -> CpuByClass {
        let class = |c: usize| {
            CATS.iter()
                .filter(|cat| **cat != host::Cat::Idle)
                .map(|cat| {
                    let ns: u64 = cores.iter().map(|k| k.class_ns[c][cat.index()]).sum();
                    (cat.name().to_string(), ns as f64 / 1e9)
                })
                .collect()
        };
        CpuByClass {
            latency_critical: class(IoClass::LatencyCritical.index()),
            throughput: class(IoClass::Throughput.index()),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostDetail {
    pub cpu_by_class: CpuByClass,
    pub breakdown_throughput_ns: Breakdown,
    pub request_latency_ns: RequestLatency,
    pub pagecache: PageCacheStats,
    pub blk: BlkStats,
    pub nvme: NvmeStats,
    pub cores: Vec<CoreStats>,
}

/// One run's summary (the co-run, or the alone reference).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SystemRunSummary {
    pub sim: SimInfo,
    /// The named stack the run used (`--stack`), with every switch it set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<crate::stack::StackInfo>,
    pub device: DeviceStats,
    pub jobs: Vec<JobResult>,
    pub processes: Vec<ProcessSummary>,
    pub cpu: CpuSummary,
    pub breakdown_ns: Breakdown,
    pub host: HostDetail,
}

/// `summary.json` of a system run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SystemSummary {
    #[serde(flatten)]
    pub run: SystemRunSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone: Option<SystemRunSummary>,
}

impl SystemRunSummary {
    pub fn new(cfg: &SystemConfig, r: &SystemRunResult) -> SystemRunSummary {
        let h = &r.host;
        let secs = cfg.duration.as_secs_f64();
        let processes = h
            .processes
            .iter()
            .map(|p| {
                let online = p.kind == ProcessKind::Online;
                // The host reports a profile's name, or the file a fio/trace process reads.
                let from_file = matches!(p.kind, ProcessKind::Fio | ProcessKind::Trace);
                ProcessSummary {
                    name: p.name.clone(),
                    profile: (!from_file).then(|| p.workload.clone()),
                    source: from_file.then(|| p.workload.clone()),
                    class: p.class,
                    kind: p.kind,
                    requests: online.then_some(p.requests),
                    unfinished_requests: online.then_some(p.unfinished_requests),
                    response_time_ns: online.then(|| ResponseTime::from(&p.response)),
                    instructions: p.instructions,
                    instructions_per_sec: (p.kind == ProcessKind::Offline)
                        .then(|| (p.instructions as f64 / secs).round()),
                    ios: p.ios,
                    cpu: ThreadCpu {
                        user_ns: p.cpu_user_ns,
                        kernel_ns: p.cpu_kernel_ns,
                    },
                    io_latency_ns: p.io_latency.summary(),
                    start_ns: p.start_ns,
                    first_io_ns: p.first_io_ns,
                    exec_time: p.exec_time.clone(),
                    request_time: p.request_time.clone(),
                    response_histogram: p.response.clone(),
                }
            })
            .collect();
        let jobs = h
            .processes
            .iter()
            .flat_map(|p| p.fio_jobs.iter())
            .map(|j| {
                let span = j
                    .first_start_ns
                    .map_or(0, |s| j.last_end_ns.saturating_sub(s));
                JobResult {
                    name: j.name.clone(),
                    read: OpResult::from_histogram(&j.read, j.read_bytes, span),
                    write: OpResult::from_histogram(&j.write, j.write_bytes, span),
                    cpu: ThreadCpu {
                        user_ns: j.cpu_user_ns,
                        kernel_ns: j.cpu_kernel_ns,
                    },
                }
            })
            .collect();
        SystemRunSummary {
            sim: SimInfo {
                seed: cfg.seed,
                simulated_ns: h.end.as_ns(),
                wall_ns: r.wall_ns,
                events: r.events,
                ios: h.commands,
                device: cfg.device.name.clone(),
                host: cfg.host.name.clone(),
                job_source: cfg.source.clone(),
                integrity_reads_checked: None,
                trace: None,
            },
            stack: cfg.stack.clone(),
            device: r.device.clone(),
            jobs,
            processes,
            cpu: CpuSummary::from_cores(&h.cores),
            breakdown_ns: h.breakdown[IoClass::LatencyCritical.index()].clone(),
            host: HostDetail {
                cpu_by_class: CpuByClass::from(&h.cores),
                breakdown_throughput_ns: h.breakdown[IoClass::Throughput.index()].clone(),
                request_latency_ns: RequestLatency {
                    latency_critical: h.request_latency[0].summary(),
                    throughput: h.request_latency[1].summary(),
                },
                pagecache: h.pagecache.clone(),
                blk: h.blk.clone(),
                nvme: h.nvme.clone(),
                cores: h.cores.clone(),
            },
        }
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn write_cdf(path: &Path, h: &LatencyHistogram) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "latency_ns,cumulative_fraction")?;
    for (v, frac) in h.cdf() {
        writeln!(f, "{v},{frac:.9}")?;
    }
    Ok(())
}

impl SystemSummary {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("summary serialises")
    }

    /// Writes `summary.json`, response-time CDFs (`response_<process>.csv`, and
    /// `alone_response_<process>.csv`) and fio latency CDFs into `dir`.
    pub fn write_folder(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("summary.json"), self.to_json() + "\n")?;
        for (prefix, run) in [("", Some(&self.run)), ("alone_", self.alone.as_ref())] {
            let Some(run) = run else { continue };
            for p in &run.processes {
                if p.response_histogram.count() > 0 {
                    let name = format!("{prefix}response_{}.csv", sanitize(&p.name));
                    write_cdf(&dir.join(name), &p.response_histogram)?;
                }
            }
            for j in &run.jobs {
                for (op, r) in [("read", &j.read), ("write", &j.write)] {
                    if r.ios > 0 {
                        let name = format!("{prefix}latency_{}_{op}.csv", sanitize(&j.name));
                        write_cdf(&dir.join(name), &r.histogram)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The terminal table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let run = &self.run;
        if let Some(s) = &run.stack {
            let switches = if s.switches.is_empty() {
                "no switches: every preset value".to_string()
            } else {
                s.switches.join(", ")
            };
            out.push_str(&format!("stack {}: {switches}\n", s.name));
        }
        let online: Vec<&ProcessSummary> = run
            .processes
            .iter()
            .filter(|p| p.kind == ProcessKind::Online)
            .collect();
        if !online.is_empty() {
            out.push_str("online services: response time (client issue → reply received)\n");
            out.push_str(&format!(
                "{:<20} {:<8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                "service", "run", "requests", "avg", "p95", "p99", "p99.9", "max"
            ));
            for p in &online {
                let alone = self
                    .alone
                    .as_ref()
                    .and_then(|a| a.processes.iter().find(|q| q.name == p.name));
                for (label, q) in [("co-run", Some(*p)), ("alone", alone)] {
                    let Some(q) = q else { continue };
                    let r = q
                        .response_time_ns
                        .expect("online process has response times");
                    out.push_str(&format!(
                        "{:<20} {:<8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                        truncate(&p.name, 20),
                        label,
                        q.requests.unwrap_or(0),
                        format_ns(r.mean),
                        format_ns(r.p95),
                        format_ns(r.p99),
                        format_ns(r.p99_9),
                        format_ns(r.max),
                    ));
                }
            }
            out.push('\n');
        }
        let offline: Vec<&ProcessSummary> = run
            .processes
            .iter()
            .filter(|p| p.kind == ProcessKind::Offline)
            .collect();
        if !offline.is_empty() {
            out.push_str("offline jobs: throughput\n");
            out.push_str(&format!(
                "{:<20} {:>14} {:>10} {:>12} {:>10}\n",
                "job", "instr/s", "I/Os", "I/O avg", "I/O p99"
            ));
            for p in &offline {
                out.push_str(&format!(
                    "{:<20} {:>14.3e} {:>10} {:>12} {:>10}\n",
                    truncate(&p.name, 20),
                    p.instructions_per_sec.unwrap_or(0.0),
                    p.ios,
                    format_ns(p.io_latency_ns.mean),
                    format_ns(p.io_latency_ns.p99),
                ));
            }
            out.push('\n');
        }
        if !run.jobs.is_empty() {
            out.push_str("fio jobs and traces through the host stack\n");
            out.push_str(&format!(
                "{:<20} {:<5} {:>9} {:>10} {:>9} {:>9} {:>9}\n",
                "job", "op", "ios", "IOPS", "avg", "p99", "p99.9"
            ));
            for j in &run.jobs {
                for (op, r) in [("read", &j.read), ("write", &j.write)] {
                    if r.ios == 0 {
                        continue;
                    }
                    out.push_str(&format!(
                        "{:<20} {:<5} {:>9} {:>10.0} {:>9} {:>9} {:>9}\n",
                        truncate(&j.name, 20),
                        op,
                        r.ios,
                        r.iops,
                        format_ns(r.latency_ns.mean),
                        format_ns(r.latency_ns.p99),
                        format_ns(r.latency_ns.p99_9),
                    ));
                }
            }
            out.push('\n');
        }
        out.push_str(&exec_time_table(&run.processes));
        let cpu_line = |label: &str, c: &CpuSummary| {
            let total: f64 = c.categories().iter().map(|(_, s)| s).sum();
            let mut line = format!("{label:<8}");
            for (name, s) in c.categories() {
                let pct = if total > 0.0 { s * 100.0 / total } else { 0.0 };
                line.push_str(&format!(" {name} {pct:.2}%"));
            }
            line.push_str(&format!(
                "; {} context switches, {} interrupts\n",
                c.context_switches, c.interrupts
            ));
            line
        };
        out.push_str(&format!(
            "CPU utilization by category ({} cores, share of all core time; busy {:.2}%)\n",
            run.cpu.cores, run.cpu.busy_pct
        ));
        out.push_str(&cpu_line("co-run", &run.cpu));
        if let Some(a) = &self.alone {
            out.push_str(&cpu_line("alone", &a.cpu));
        }
        out.push_str(&crate::report::cache_switches(&run.device.cache));
        out.push('\n');
        let b_line = |label: &str, b: &Breakdown| {
            format!(
                "{label:<8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                b.requests,
                format_ns(b.software_queue),
                format_ns(b.hardware_queue),
                format_ns(b.driver),
                format_ns(b.device_queue),
                format_ns(b.device_service),
                format_ns(b.irq),
                format_ns(b.poll),
                format_ns(b.context_switch),
                format_ns(b.blk_complete),
                format_ns(
                    b.software_queue
                        + b.hardware_queue
                        + b.driver
                        + b.device_queue
                        + b.device_service
                        + b.irq
                        + b.poll
                        + b.context_switch
                        + b.blk_complete
                ),
            )
        };
        out.push_str("latency-critical I/O: mean time per request in each layer\n");
        out.push_str(&format!(
            "{:<8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            "run",
            "requests",
            "sw queue",
            "hw queue",
            "driver",
            "dev queue",
            "dev serv",
            "irq",
            "poll",
            "ctx sw",
            "blk compl",
            "total"
        ));
        out.push_str(&b_line("co-run", &run.breakdown_ns));
        if let Some(a) = &self.alone {
            out.push_str(&b_line("alone", &a.breakdown_ns));
        }
        out.push_str("(device queue/service split: service = fastest device time seen for the same direction and size)\n");
        for (label, r) in [("co-run", Some(run)), ("alone", self.alone.as_ref())] {
            let Some(r) = r else { continue };
            let lc = &r.host.blk.latency_critical;
            if lc.cold_bios > 0 {
                out.push_str(&format!(
                    "({label}: {} of {} latency-critical bios submitted cold, after another \
                     process's code ran on a core sharing their last-level cache: \
                     blk.cold_submit_ns each)\n",
                    lc.cold_bios, lc.bios
                ));
            }
        }
        out.push('\n');
        for (label, r) in [("co-run", Some(run)), ("alone", self.alone.as_ref())] {
            let Some(r) = r else { continue };
            let s = &r.sim;
            let wall_s = s.wall_ns as f64 / 1e9;
            out.push_str(&format!(
                "{label}: simulated {} in {:.2} s wall ({:.2} simulated s per wall s): {} NVMe commands, {} events; {} on {}\n",
                format_ns(s.simulated_ns),
                wall_s,
                if wall_s > 0.0 { s.simulated_ns as f64 / 1e9 / wall_s } else { 0.0 },
                s.ios,
                s.events,
                s.host,
                s.device,
            ));
        }
        out
    }
}

/// Where each process's threads' time went (share of their lives, coarse groups), and for
/// online services where their requests' response time went (mean per request).
fn exec_time_table(processes: &[ProcessSummary]) -> String {
    if processes.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "execution time: share of the threads' lives (start to exit or the run's end)\n",
    );
    out.push_str(&format!("{:<20} {:>7} {:>9}", "process", "threads", "life"));
    for (name, _) in host::GROUPS {
        out.push_str(&format!(" {name:>9}"));
    }
    out.push('\n');
    for p in processes {
        let e = &p.exec_time;
        out.push_str(&format!(
            "{:<20} {:>7} {:>9}",
            truncate(&p.name, 20),
            e.threads,
            format_ns(e.lifetime_ns)
        ));
        for (_, spans) in host::GROUPS {
            let ns = host::exectime::group_ns(&e.ns, spans);
            let pct = if e.lifetime_ns > 0 {
                ns as f64 * 100.0 / e.lifetime_ns as f64
            } else {
                0.0
            };
            out.push_str(&format!(" {:>8.2}%", pct));
        }
        out.push('\n');
    }
    let online: Vec<(&ProcessSummary, &RequestTime)> = processes
        .iter()
        .filter_map(|p| Some((p, p.request_time.as_ref()?)))
        .filter(|(_, r)| r.requests > 0)
        .collect();
    if !online.is_empty() {
        out.push_str("online services: mean response time by part\n");
        out.push_str(&format!(
            "{:<20} {:>9} {:>9} {:>9}",
            "service", "response", "network", "wait wkr"
        ));
        for (name, _) in host::GROUPS.iter().filter(|(n, _)| *n != "idle") {
            out.push_str(&format!(" {name:>9}"));
        }
        out.push('\n');
        for (p, r) in online {
            let m = r.means();
            out.push_str(&format!(
                "{:<20} {:>9} {:>9} {:>9}",
                truncate(&p.name, 20),
                format_ns(r.response_ns / r.requests),
                format_ns(m.network_ns),
                format_ns(m.worker_queue_ns)
            ));
            for (name, spans) in host::GROUPS {
                let ns = host::exectime::group_ns(&m.spans, spans);
                if name == "idle" {
                    debug_assert_eq!(ns, 0, "no one idles on a request");
                    continue;
                }
                out.push_str(&format!(" {:>9}", format_ns(ns)));
            }
            out.push('\n');
        }
    }
    out.push('\n');
    out
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}
