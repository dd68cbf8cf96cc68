//! Run results: `summary.json` (a public interface), CSV series and the terminal table.
//!
//! `summary.json` of a device-level run:
//!
//! ```text
//! sim    { seed, simulated_ns, wall_ns, events, ios, device, host, job_source,
//!          integrity_reads_checked }
//! device { name, user_capacity_bytes, commands{…}, cache{…}, ftl{ gc_runs, erases,
//!          host_units_programmed, gc_units_programmed, units_wasted, … }, flash{…},
//!          write_amplification, erase_count_{min,max,mean}, pcie_bytes_…, mapping_table_bytes }
//! jobs   [ { name, read: { ios, iops, bytes_per_sec, latency_ns { mean, p50, p95, p99,
//!                          p99_9, p99_99, p99_999, max } }, write: { … },
//!            cpu { user_ns, kernel_ns } } ]
//! cpu    { cores, user, syscall, pagecache, blk, nvme, blk_complete, irq, sched, poll, idle
//!          (seconds summed over cores), busy_pct, context_switches, interrupts }
//! host   { cores [ { core, ns[…per category], class_ns, context_switches, interrupts } ] }
//! ```
//!
//! `cpu` and `host.cores` have the shape a full-system run reports; how the thin host fills
//! them is in `device_run`'s essay.
//!
//! Everything but `sim.wall_ns` is a pure function of the configuration and seed: two runs
//! give byte-identical files apart from that field. Latency CSVs (`latency_<job>_<op>.csv`)
//! hold the distribution as `latency_ns,cumulative_fraction` rows.

use std::io::Write;
use std::path::Path;

use device::DeviceStats;
use engine::stats::LatencySummary;
use engine::time::format_ns;
use engine::LatencyHistogram;
use host::{CoreStats, CATS};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SimInfo {
    pub seed: u64,
    pub simulated_ns: u64,
    pub wall_ns: u64,
    pub events: u64,
    pub ios: u64,
    pub device: String,
    pub host: String,
    pub job_source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integrity_reads_checked: Option<u64>,
    /// What a trace replay read and did (device-level `--trace` runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace_replay::TraceInfo>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpResult {
    pub ios: u64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub latency_ns: LatencySummary,
    /// The whole distribution: written to the latency CSV, not to `summary.json`, so a
    /// summary read back has an empty one.
    #[serde(skip)]
    pub histogram: LatencyHistogram,
}

impl OpResult {
    pub fn from_histogram(h: &LatencyHistogram, bytes: u64, span_ns: u64) -> OpResult {
        let secs = span_ns as f64 / 1e9;
        let per_sec = |n: f64| if span_ns == 0 { 0.0 } else { round3(n / secs) };
        OpResult {
            ios: h.count(),
            iops: per_sec(h.count() as f64),
            bytes_per_sec: per_sec(bytes as f64),
            latency_ns: h.summary(),
            histogram: h.clone(),
        }
    }
}

/// Rounds to 3 decimals so JSON floats print the same everywhere.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// CPU time of a job's (or process's) threads, ns: user code, and kernel work in thread
/// context.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ThreadCpu {
    pub user_ns: u64,
    pub kernel_ns: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobResult {
    pub name: String,
    pub read: OpResult,
    pub write: OpResult,
    /// CPU time of the job's threads (all clones).
    pub cpu: ThreadCpu,
}

/// The thin host's per-core accounting (the same shape as a full-system run's `host.cores`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThinHostDetail {
    pub cores: Vec<CoreStats>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSummary {
    pub sim: SimInfo,
    pub device: DeviceStats,
    pub jobs: Vec<JobResult>,
    /// CPU time by category over the thin host's cores (see `device_run`'s essay).
    pub cpu: CpuSummary,
    pub host: ThinHostDetail,
}

impl RunSummary {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("summary serialises")
    }

    /// Writes `summary.json` and the latency CSVs into `dir` (created if needed).
    pub fn write_folder(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("summary.json"), self.to_json() + "\n")?;
        for job in &self.jobs {
            for (op, r) in [("read", &job.read), ("write", &job.write)] {
                if r.ios == 0 {
                    continue;
                }
                let name = format!("latency_{}_{op}.csv", sanitize(&job.name));
                let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(name))?);
                writeln!(f, "latency_ns,cumulative_fraction")?;
                for (v, frac) in r.histogram.cdf() {
                    writeln!(f, "{v},{frac:.9}")?;
                }
            }
        }
        Ok(())
    }

    /// The terminal table: one row per job and direction.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let header = format!(
            "{:<20} {:<5} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            "job",
            "op",
            "ios",
            "IOPS",
            "MB/s",
            "avg",
            "p50",
            "p99",
            "p99.9",
            "p99.99",
            "p99.999",
            "max"
        );
        out.push_str(&header);
        for job in &self.jobs {
            for (op, r) in [("read", &job.read), ("write", &job.write)] {
                if r.ios == 0 {
                    continue;
                }
                let l = &r.latency_ns;
                out.push_str(&format!(
                    "{:<20} {:<5} {:>9} {:>10.0} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
                    truncate(&job.name, 20),
                    op,
                    r.ios,
                    r.iops,
                    r.bytes_per_sec / 1e6,
                    format_ns(l.mean),
                    format_ns(l.p50),
                    format_ns(l.p99),
                    format_ns(l.p99_9),
                    format_ns(l.p99_99),
                    format_ns(l.p99_999),
                    format_ns(l.max),
                ));
            }
        }
        let d = &self.device;
        out.push_str(&format!(
            "\ndevice {}: {} commands, cache hits {} / misses {}, GC runs {}, erases {}, write amplification {:.3}, write stalls {}\n",
            d.name,
            d.commands.reads + d.commands.writes + d.commands.flushes + d.commands.trims,
            d.cache.latency_critical.read_hits + d.cache.throughput.read_hits,
            d.cache.latency_critical.read_misses + d.cache.throughput.read_misses,
            d.ftl.gc_runs,
            d.ftl.erases,
            d.write_amplification,
            d.commands.write_stalls,
        ));
        out.push_str(&cache_switches(&d.cache));
        let s = &self.sim;
        let wall_s = s.wall_ns as f64 / 1e9;
        out.push_str(&format!(
            "simulated {} in {:.2} s wall: {} I/Os, {} events ({:.0} simulated I/Os per wall second)\n",
            format_ns(s.simulated_ns),
            wall_s,
            s.ios,
            s.events,
            if wall_s > 0.0 { s.ios as f64 / wall_s } else { 0.0 }
        ));
        out
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// A job name made safe for a file name.
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

/// CPU time by category, seconds summed over all cores.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CpuSummary {
    pub cores: u32,
    pub user: f64,
    pub syscall: f64,
    pub pagecache: f64,
    pub blk: f64,
    pub nvme: f64,
    pub blk_complete: f64,
    pub irq: f64,
    pub sched: f64,
    pub poll: f64,
    pub idle: f64,
    /// Share of core time not idle, percent.
    pub busy_pct: f64,
    pub context_switches: u64,
    pub interrupts: u64,
}

impl CpuSummary {
    /// Sums per-core statistics.
    pub fn from_cores(cores: &[CoreStats]) -> CpuSummary {
        let mut ns = [0u64; host::cpu::CAT_COUNT];
        for c in cores {
            for (i, v) in c.ns.iter().enumerate() {
                ns[i] += v;
            }
        }
        let s = |cat: host::Cat| ns[cat.index()] as f64 / 1e9;
        let total: u64 = ns.iter().sum();
        let idle = ns[host::Cat::Idle.index()];
        CpuSummary {
            cores: cores.len() as u32,
            user: s(host::Cat::User),
            syscall: s(host::Cat::Syscall),
            pagecache: s(host::Cat::PageCache),
            blk: s(host::Cat::Blk),
            nvme: s(host::Cat::Nvme),
            blk_complete: s(host::Cat::BlkComplete),
            irq: s(host::Cat::Irq),
            sched: s(host::Cat::Sched),
            poll: s(host::Cat::Poll),
            idle: s(host::Cat::Idle),
            busy_pct: if total == 0 {
                0.0
            } else {
                ((total - idle) as f64 * 100_000.0 / total as f64).round() / 1000.0
            },
            context_switches: cores.iter().map(|c| c.context_switches).sum(),
            interrupts: cores.iter().map(|c| c.interrupts).sum(),
        }
    }

    /// (name, seconds) per category, in accounting order.
    pub fn categories(&self) -> [(&'static str, f64); host::cpu::CAT_COUNT] {
        let v = [
            self.user,
            self.syscall,
            self.pagecache,
            self.blk,
            self.nvme,
            self.blk_complete,
            self.irq,
            self.sched,
            self.poll,
            self.idle,
        ];
        std::array::from_fn(|i| (CATS[i].name(), v[i]))
    }
}

/// Lines for the terminal table saying what the cache's class split and ghost prefetch did;
/// empty when both are off.
pub fn cache_switches(c: &device::cache::CacheStats) -> String {
    let mut out = String::new();
    let hit_pct = |k: &device::cache::ClassCacheStats| {
        let n = k.read_hits + k.read_misses;
        if n == 0 {
            0.0
        } else {
            k.read_hits as f64 * 100.0 / n as f64
        }
    };
    if let Some(p) = &c.partition {
        out.push_str(&format!(
            "cache split by class: latency-critical {} ways (read hits {:.1}%), throughput {} ways \
             ({:.1}%); {} ways moved in {} epochs; retained hits {} / {}\n",
            p.lc_ways,
            hit_pct(&c.latency_critical),
            p.tp_ways,
            hit_pct(&c.throughput),
            p.ways_moved,
            p.epochs,
            p.lc_retained_hits,
            p.tp_retained_hits
        ));
    }
    if let Some(g) = &c.ghost {
        let groups: Vec<String> = g
            .groups
            .iter()
            .map(|x| {
                format!(
                    "{} {} pages ({} decisions, {} changes)",
                    x.class, x.pages, x.decisions, x.changes
                )
            })
            .collect();
        out.push_str(&format!("ghost prefetch: {}\n", groups.join(", ")));
    }
    out
}
