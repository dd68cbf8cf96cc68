//! The real half of the study: what a run on the real server (or the emulated device alone)
//! reports, the runner `ullstack` provides, and the measurements both sides share.
//!
//! A real run's tenants are the twin's type (`scenario::TenantResult`, with the load
//! generator's own figures in `ClientSide`), so each can be set beside the other: IOPS count
//! the requests issued in the measured window; latencies are from the request's scheduled
//! arrival (open loop) or its send (closed loop) to its reply;
//! tokens/s are what the requests cost at the scheduler's prices under the device's load mix
//! ([`tokens_per_sec`]); the SLO is met when the p95 read latency is within its target (the
//! bench's own verdict also asks for 95 % of the IOPS, which an open-loop tenant meets by
//! construction); `device_iops_in_window` is what the server sustained
//! ([`sustained_rate`]); a worker's busy share is its CPU time over the run's wall time.

use qos::TenantClass;
use scenario::TenantResult;
use serde::Serialize;

use super::scenarios::{Part, Place, RealRun};

/// One real run's results.
#[derive(Clone, Debug, Serialize)]
pub struct RealOutcome {
    pub id: String,
    pub part: Part,
    pub x: u64,
    pub place: Place,
    /// The scenario file (the twin runs the same text).
    pub scenario_toml: String,
    /// How it ran (server config, threads), for the report.
    pub note: String,
    /// `/proc/loadavg`'s 1-minute figure when the run started: how busy the machine was.
    pub load_average_1m: Option<f64>,
    /// Measured window, seconds.
    pub window_s: f64,
    pub tenants: Vec<TenantResult>,
    /// Commands the server sent to the emulated device per second, over the busiest interval
    /// of the measured window's length.
    pub device_iops_in_window: f64,
    /// Each server worker's CPU time over the run's wall time, percent (empty for
    /// [`Place::Device`]).
    pub worker_busy_pct: Vec<f64>,
    /// The load generator's CPU time (the process's, less the server workers'), percent of
    /// one core.
    pub client_cpu_pct: Option<f64>,
    /// A tenant the server refused (admission control), with its reason: the run sent
    /// nothing for it. Part 4's search stops there; anywhere else it is an error.
    pub refused: Option<String>,
}

/// A real run and its simulated twin (the same file through `sim::remote`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Paired {
    pub real: RealOutcome,
    pub twin: sim::remote::RemoteSummary,
}

impl RealOutcome {
    pub fn tenant(&self, name: &str) -> Option<&TenantResult> {
        self.tenants.iter().find(|t| t.name == name)
    }
}

/// A run's tenants and what its server sustained, from either side.
#[derive(Clone, Debug)]
pub(crate) struct RunView {
    pub tenants: Vec<TenantResult>,
    pub device_iops_in_window: f64,
    pub worker_busy_pct: Vec<f64>,
}

impl RunView {
    pub fn real(o: &RealOutcome) -> RunView {
        RunView {
            tenants: o.tenants.clone(),
            device_iops_in_window: o.device_iops_in_window,
            worker_busy_pct: o.worker_busy_pct.clone(),
        }
    }

    pub fn sim(s: &sim::remote::RemoteSummary) -> RunView {
        RunView {
            tenants: s.tenants.clone(),
            device_iops_in_window: s.device_iops_in_window,
            worker_busy_pct: s.worker_busy_pct.clone(),
        }
    }

    /// Sum of a class's IOPS.
    pub fn iops(&self, class: TenantClass) -> f64 {
        self.tenants
            .iter()
            .filter(|t| t.class == class)
            .map(|t| t.iops)
            .sum()
    }

    /// The worst p95 read latency among a class's tenants that read, ns.
    pub fn worst_p95_ns(&self, class: TenantClass) -> u64 {
        self.tenants
            .iter()
            .filter(|t| t.class == class && t.reads > 0)
            .map(|t| t.read_latency_ns_p95)
            .max()
            .unwrap_or(0)
    }

    pub fn tokens_per_sec(&self) -> f64 {
        self.tenants.iter().map(|t| t.tokens_per_sec).sum()
    }
}

/// Runs real scenarios; `ullstack` provides one (this crate does not depend on the server or
/// the client). Called one run at a time, with nothing else of the study running: real runs
/// measure wall-clock behaviour.
pub trait RealRunner: Sync {
    fn run(&self, run: &RealRun) -> Result<RealOutcome, String>;
}

/// Tokens per second `reads` and `writes` of `size_bytes` cost over `window_s`, at the prices
/// the scheduler charges under `mix` — the same price list `sim::remote` charges each request
/// when the scheduler is on.
pub fn tokens_per_sec(
    cost: &qos::CostModel,
    mix: qos::LoadMix,
    reads: u64,
    writes: u64,
    size_bytes: u64,
    window_s: f64,
) -> f64 {
    let mtok = reads as f64 * cost.request_cost_mtok(qos::Op::Read, size_bytes, mix) as f64
        + writes as f64 * cost.request_cost_mtok(qos::Op::Write, size_bytes, mix) as f64;
    mtok / 1000.0 / window_s.max(1e-9)
}

/// The highest rate a cumulative counter grew at over any interval at least `window_ns`
/// long, from samples `(time_ns, count)` in time order; `None` with fewer than two samples.
/// Samples span the whole run (connection set-up, warm-up, measured window, drain) and the
/// runner cannot see where bench's window starts; a server that keeps up sustains the offered
/// rate through warm-up and window, one that saturates its capacity from warm-up to drain, so
/// the busiest window-long interval is what it sustained. Intervals are taken between samples:
/// the shortest one at least `window_ns` long from each start.
pub fn sustained_rate(samples: &[(u64, u64)], window_ns: u64) -> Option<f64> {
    if samples.len() < 2 {
        return None;
    }
    let mut best: Option<f64> = None;
    let mut j = 0;
    for i in 0..samples.len() {
        if j < i {
            j = i;
        }
        while j < samples.len() && samples[j].0 - samples[i].0 < window_ns {
            j += 1;
        }
        if j == samples.len() {
            break;
        }
        let dt = (samples[j].0 - samples[i].0) as f64 / 1e9;
        let rate = (samples[j].1 - samples[i].1) as f64 / dt;
        best = Some(best.map_or(rate, |b: f64| b.max(rate)));
    }
    // A run shorter than the window: its average.
    best.or_else(|| {
        let (a, b) = (samples[0], samples[samples.len() - 1]);
        (b.0 > a.0).then(|| (b.1 - a.1) as f64 / ((b.0 - a.0) as f64 / 1e9))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sustained_rate_is_the_busiest_window() {
        // 10 ms samples: idle for 100 ms (set-up), 1 000/s for 1 s, then a 200 ms burst at
        // 3 000/s, idle again.
        let mut samples = Vec::new();
        let mut count = 0u64;
        for i in 0..200u64 {
            let t = i * 10_000_000;
            samples.push((t, count));
            count += match i {
                10..=109 => 10,
                110..=129 => 30,
                _ => 0,
            };
        }
        let r = sustained_rate(&samples, 1_000_000_000).unwrap();
        // Best 1 s: the last 800 ms at 1 000/s and the burst: 800 + 600 = 1 400.
        assert!((r - 1_400.0).abs() < 1e-6, "{r}");
        let r = sustained_rate(&samples, 200_000_000).unwrap();
        assert!((r - 3_000.0).abs() < 1e-6, "{r}");
        assert_eq!(sustained_rate(&samples[..1], 1), None);
        // Shorter than the window: the average.
        let r = sustained_rate(&samples[10..20], 1_000_000_000).unwrap();
        assert!((r - 1_000.0).abs() < 1e-6, "{r}");
    }

    #[test]
    fn tokens_follow_the_price_list() {
        let cost = qos::DeviceProfile::reflex_a().cost_model();
        // 1 000 reads and 100 writes of 4 KiB in 1 s, mixed: 1 000 + 100 × 10 tokens.
        let t = tokens_per_sec(&cost, qos::LoadMix::Mixed, 1000, 100, 4096, 1.0);
        assert!((t - 2_000.0).abs() < 1e-9, "{t}");
        // Read-only: half a token a read.
        let t = tokens_per_sec(&cost, qos::LoadMix::ReadOnly, 1000, 0, 1024, 2.0);
        assert!((t - 250.0).abs() < 1e-9, "{t}");
    }
}
