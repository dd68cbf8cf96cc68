//! Results of a run: HDR latency histograms per tenant and operation, merged from every
//! connection, and their rendering as a terminal table and as JSON.
//!
//! Latencies are recorded in nanoseconds into the simulator's histograms
//! ([`engine::LatencyHistogram`]: HDR, 3 significant digits, growing to the largest value seen,
//! the first few hundred samples kept as they are), so a p99.9 of 812.3 µs is reported as
//! 812 µs ± 0.1 %, the mean is exact, and a connection that completed few requests costs a few
//! KiB (a study's tenant search opens thousands). Rates divide the completed I/Os by the
//! measured window (the run's duration without the warm-up).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use engine::LatencyHistogram;
use serde::Serialize;

use super::spec::{Load, TenantClass, TenantSpec};

/// A p99 send lag above this is called out under the tenant's row.
const SEND_LAG_WARN_NS: u64 = 50_000;

/// What one connection measured.
pub(crate) struct ConnStats {
    pub read_ns: LatencyHistogram,
    pub write_ns: LatencyHistogram,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: BTreeMap<String, u64>,
    /// Arrivals that found the connection's in-flight cap full and were sent late.
    pub late_sends: u64,
    /// Open loop: how long after its scheduled time each request was handed to the client.
    pub send_lag_ns: LatencyHistogram,
    /// Trace tenants with `skip_bad_lines`: malformed lines the connection's reader skipped.
    pub trace_bad_lines_skipped: u64,
    pub trace_first_bad_line: Option<String>,
}

impl ConnStats {
    pub fn new() -> Self {
        ConnStats {
            read_ns: LatencyHistogram::new(),
            write_ns: LatencyHistogram::new(),
            read_bytes: 0,
            write_bytes: 0,
            errors: BTreeMap::new(),
            late_sends: 0,
            send_lag_ns: LatencyHistogram::new(),
            trace_bad_lines_skipped: 0,
            trace_first_bad_line: None,
        }
    }

    pub fn merge(&mut self, other: &ConnStats) {
        self.read_ns.merge(&other.read_ns);
        self.write_ns.merge(&other.write_ns);
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
        self.late_sends += other.late_sends;
        self.send_lag_ns.merge(&other.send_lag_ns);
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        // Every connection reads the whole file (and keeps its share), so each sees the same
        // bad lines, or fewer if it stopped early: the most any saw is the file's count.
        if other.trace_bad_lines_skipped > self.trace_bad_lines_skipped {
            self.trace_bad_lines_skipped = other.trace_bad_lines_skipped;
            self.trace_first_bad_line = other.trace_first_bad_line.clone();
        }
    }
}

/// Latency percentiles of one operation type, nanoseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LatencyNs {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub max: u64,
    pub mean: f64,
}

/// One operation type's results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OpReport {
    pub count: u64,
    pub iops: f64,
    pub mb_per_s: f64,
    /// `None` when nothing completed.
    pub latency_ns: Option<LatencyNs>,
}

fn op_report(h: &LatencyHistogram, bytes: u64, window_s: f64) -> OpReport {
    let count = h.count();
    OpReport {
        count,
        iops: count as f64 / window_s,
        mb_per_s: bytes as f64 / 1e6 / window_s,
        latency_ns: (count > 0).then(|| LatencyNs {
            p50: h.quantile_ns(0.50),
            p95: h.quantile_ns(0.95),
            p99: h.quantile_ns(0.99),
            p99_9: h.quantile_ns(0.999),
            max: h.max_ns(),
            mean: h.mean_ns() as f64,
        }),
    }
}

/// Percentiles of the open-loop send lag, nanoseconds.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LagNs {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// The SLO a tenant registered.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SloReport {
    pub p95_read_latency_ns: u64,
    pub iops: u64,
}

/// One tenant's results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TenantReport {
    pub name: String,
    /// `lc` or `be`.
    pub class: TenantClass,
    pub slo: Option<SloReport>,
    /// E.g. `open 120000 IOPS` or `closed qd 16`.
    pub load: String,
    pub connections: u32,
    pub read_pct: u8,
    pub size_bytes: u32,
    /// `None` if it ran; the server's reason if REGISTER was refused (then it sent nothing).
    pub refused: Option<String>,
    pub iops: f64,
    pub mb_per_s: f64,
    pub reads: OpReport,
    pub writes: OpReport,
    /// Failed requests by status.
    pub errors: BTreeMap<String, u64>,
    pub late_sends: u64,
    /// Open loop: lag between each request's scheduled time and its send, which its latency
    /// includes. A large lag means the load generator (not the server) fell behind.
    pub send_lag_ns: Option<LagNs>,
    /// LC only, if reads completed: measured p95 read latency ≤ SLO, and achieved IOPS ≥ 95 %
    /// of the lesser of the SLO's and the offered IOPS.
    pub slo_met: Option<bool>,
    /// Trace tenants with `skip_bad_lines=yes`: malformed lines of the trace skipped.
    #[serde(skip_serializing_if = "engine::stats::is_zero")]
    pub trace_bad_lines_skipped: u64,
    /// The first of them, as its error (`FILE:LINE: ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_first_bad_line: Option<String>,
}

/// A whole run's results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BenchReport {
    pub server: String,
    pub seed: u64,
    pub threads: usize,
    /// Measured window (warm-up excluded), seconds.
    pub window_s: f64,
    pub warmup_s: f64,
    pub total_iops: f64,
    pub total_mb_per_s: f64,
    pub tenants: Vec<TenantReport>,
}

pub(crate) fn tenant_report(
    spec: &TenantSpec,
    stats: Option<&ConnStats>,
    refused: Option<String>,
    window_s: f64,
) -> TenantReport {
    let empty = ConnStats::new();
    let s = stats.unwrap_or(&empty);
    let reads = op_report(&s.read_ns, s.read_bytes, window_s);
    let writes = op_report(&s.write_ns, s.write_bytes, window_s);
    let slo = match spec.class {
        qos::TenantSpec::LatencyCritical(slo) => Some(SloReport {
            p95_read_latency_ns: slo.p95_read_latency_ns,
            iops: slo.iops,
        }),
        qos::TenantSpec::BestEffort(_) => None,
    };
    let iops = reads.iops + writes.iops;
    let slo_met = match (&slo, &reads.latency_ns, refused.is_none()) {
        (Some(slo), Some(lat), true) => {
            let offered = match spec.load {
                Load::Open { iops } => iops.min(slo.iops),
                Load::Closed { .. } | Load::Trace { .. } => slo.iops,
            };
            Some(lat.p95 <= slo.p95_read_latency_ns && iops >= 0.95 * offered as f64)
        }
        _ => None,
    };
    TenantReport {
        name: spec.name.clone(),
        class: spec.class.class(),
        slo,
        load: match spec.load {
            Load::Open { iops } => format!("open {iops} IOPS"),
            Load::Closed { queue_depth } => format!("closed qd {queue_depth}"),
            Load::Trace { speed_per_mille } => {
                format!("trace x{}", speed_per_mille as f64 / 1000.0)
            }
        },
        connections: spec.connections,
        read_pct: spec.read_pct,
        size_bytes: spec.size_bytes,
        refused,
        iops,
        mb_per_s: reads.mb_per_s + writes.mb_per_s,
        reads,
        writes,
        errors: s.errors.clone(),
        late_sends: s.late_sends,
        send_lag_ns: (!s.send_lag_ns.is_empty()).then(|| LagNs {
            p50: s.send_lag_ns.quantile_ns(0.5),
            p99: s.send_lag_ns.quantile_ns(0.99),
            max: s.send_lag_ns.max_ns(),
        }),
        slo_met,
        trace_bad_lines_skipped: s.trace_bad_lines_skipped,
        trace_first_bad_line: s.trace_first_bad_line.clone(),
    }
}

fn us(ns: u64) -> String {
    if ns >= 10_000_000 {
        format!("{:.0}ms", ns as f64 / 1e6)
    } else if ns >= 100_000 {
        format!("{:.0}us", ns as f64 / 1e3)
    } else {
        format!("{:.1}us", ns as f64 / 1e3)
    }
}

fn lat_cells(op: &OpReport) -> String {
    match &op.latency_ns {
        Some(l) => format!(
            "{:>9} {:>8} {:>8} {:>8} {:>8} {:>8}",
            op.count,
            us(l.p50),
            us(l.p95),
            us(l.p99),
            us(l.p99_9),
            us(l.max)
        ),
        None => format!(
            "{:>9} {:>8} {:>8} {:>8} {:>8} {:>8}",
            op.count, "-", "-", "-", "-", "-"
        ),
    }
}

impl BenchReport {
    /// The terminal table: one line per tenant and operation type.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let h = [
            "tenant", "cls", "load", "IOPS", "MB/s", "op", "count", "p50", "p95", "p99", "p99.9",
            "max", "SLO",
        ];
        let _ = writeln!(
            t,
            "{:<12} {:<3} {:<18} {:>10} {:>8}  {:<5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}  {}",
            h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11], h[12]
        );
        for r in &self.tenants {
            if let Some(reason) = &r.refused {
                let _ = writeln!(
                    t,
                    "{:<12} {:<3} {:<18} REFUSED: {reason}",
                    r.name, r.class, r.load
                );
                continue;
            }
            let slo = match (&r.slo, r.slo_met) {
                (Some(s), Some(met)) => format!(
                    "p95<={} @{} {}",
                    us(s.p95_read_latency_ns),
                    s.iops,
                    if met { "met" } else { "MISSED" }
                ),
                (Some(s), None) => format!("p95<={} @{}", us(s.p95_read_latency_ns), s.iops),
                (None, _) => String::new(),
            };
            let _ = writeln!(
                t,
                "{:<12} {:<3} {:<18} {:>10.0} {:>8.1}  {:<5} {}  {}",
                r.name,
                r.class,
                r.load,
                r.iops,
                r.mb_per_s,
                "read",
                lat_cells(&r.reads),
                slo
            );
            if r.writes.count > 0 || r.read_pct < 100 {
                let _ = writeln!(
                    t,
                    "{:<12} {:<3} {:<18} {:>10} {:>8}  {:<5} {}",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "write",
                    lat_cells(&r.writes)
                );
            }
            if !r.errors.is_empty() {
                let errs: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                let _ = writeln!(t, "{:<12} errors: {}", "", errs.join(", "));
            }
            if let Some(lag) = r.send_lag_ns.as_ref().filter(|l| l.p99 > SEND_LAG_WARN_NS) {
                let _ = writeln!(
                    t,
                    "{:<12} generator lag p50 {} p99 {} max {}: the client fell behind its schedule (latencies include it)",
                    "",
                    us(lag.p50),
                    us(lag.p99),
                    us(lag.max)
                );
            }
            if r.trace_bad_lines_skipped > 0 {
                let _ = writeln!(
                    t,
                    "{:<12} {} bad trace lines skipped; first: {}",
                    "",
                    r.trace_bad_lines_skipped,
                    r.trace_first_bad_line.as_deref().unwrap_or("?")
                );
            }
            if r.late_sends > 0 {
                let _ = writeln!(t, "{:<12} {} arrivals sent late (in-flight cap reached; counted from their scheduled time)", "", r.late_sends);
            }
        }
        let _ = writeln!(
            t,
            "total: {:.0} IOPS, {:.1} MB/s over {:.2} s (warm-up {:.2} s excluded), seed {}",
            self.total_iops, self.total_mb_per_s, self.window_s, self.warmup_s, self.seed
        );
        t
    }
}

impl BenchReport {
    /// The report as pretty-printed JSON (what `--json FILE` writes).
    pub fn to_json(&self) -> String {
        // Plain data with string keys and finite-or-null floats: serialization cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
