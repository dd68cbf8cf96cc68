//! `reflex`'s rows of `reference/published.toml`, from its full-scale simulated runs.
//!
//! Each row reads the runs of [`PUBLISHED_RUN_IDS`] in every replicate present (replicate 0
//! up to the first missing, seeds `seed` …; `scenarios::replicate_runs`): scenario 1 with the
//! scheduler on (both LC tenants' SLOs, B's tokens) and off (every tenant's p95), and part 5's
//! unloaded reads (remote minus local, within one replicate). A row's value is the median over
//! replicates with the bootstrap interval of `published::level` (docs/study.md, *Statistics*);
//! with one replicate (`--quick`) it is a point with no interval.
//!
//! Worked example: five replicates whose remote-minus-local reads are 24.7, 24.9, 24.6, 24.8
//! and 24.7 µs give 24.7 µs with the interval of the median over resampled replicates; the SLO
//! row is the median of five 0/1 verdicts, so it says "met" when three or more replicates met
//! both SLOs.

use super::real::RunView;
use super::scenarios::{replicate_id, RunOutcome, PUBLISHED_RUN_IDS};
use crate::published::{level, Estimate, Kind, Simulated};

/// One replicate's values of the four rows (`None`: a run or a tenant missing).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct ReplicateValues {
    met: Option<f64>,
    b_tokens_k: Option<f64>,
    least_p95_ms: Option<f64>,
    remote_minus_local_us: Option<f64>,
}

fn replicate_values(view: impl Fn(&str) -> Option<RunView>) -> ReplicateValues {
    let on = view("s1-on");
    let off = view("s1-off");
    let tenant = |v: &RunView, name: &str| v.tenants.iter().find(|t| t.name == name).cloned();
    let met = on.as_ref().and_then(|v| {
        let (a, b) = (tenant(v, "A")?, tenant(v, "B")?);
        Some(f64::from(u8::from(a.slo_met? && b.slo_met?)))
    });
    let b_tokens_k = on
        .as_ref()
        .and_then(|v| tenant(v, "B"))
        .map(|b| b.tokens_per_sec / 1e3);
    let least_p95_ms = off.as_ref().and_then(|v| {
        v.tenants
            .iter()
            .filter(|t| t.reads > 0)
            .map(|t| t.read_latency_ns_p95 as f64 / 1e6)
            .reduce(f64::min)
    });
    let mean_read_us = |id: &str| {
        view(id).and_then(|v| Some(v.tenants.first()?.read_latency_ns_mean as f64 / 1e3))
    };
    let remote_minus_local_us = mean_read_us("unloaded-read-remote")
        .zip(mean_read_us("unloaded-read-local"))
        .map(|(r, l)| r - l);
    ReplicateValues {
        met,
        b_tokens_k,
        least_p95_ms,
        remote_minus_local_us,
    }
}

/// Whether replicate `r` has every run the rows read.
fn replicate_present(runs: &[&RunOutcome], r: u64) -> bool {
    PUBLISHED_RUN_IDS
        .iter()
        .all(|id| runs.iter().any(|o| o.id == replicate_id(id, r)))
}

/// `reflex`'s published rows from the simulated runs `sims` (replicate 0, with the rest of the
/// study's runs) and `replicates` (replicates 1 …, `scenarios::replicate_runs`).
pub fn published(sims: &[RunOutcome], replicates: &[RunOutcome]) -> Vec<Simulated> {
    let all: Vec<&RunOutcome> = sims.iter().chain(replicates).collect();
    let values: Vec<ReplicateValues> = (0..)
        .take_while(|&r| replicate_present(&all, r))
        .map(|r| {
            replicate_values(|id| {
                let id = replicate_id(id, r);
                all.iter()
                    .find(|o| o.id == id)
                    .map(|o| RunView::sim(&o.summary))
            })
        })
        .collect();
    let estimate = |id: &str, of: fn(&ReplicateValues) -> Option<f64>| -> Option<Estimate> {
        let v: Option<Vec<f64>> = values.iter().map(of).collect();
        level(&v?, &format!("reflex/{id}"))
    };
    vec![
        Simulated::new(
            "scenario1.lc_slo_met",
            Kind::Bool,
            estimate("scenario1.lc_slo_met", |v| v.met),
        ),
        Simulated::new(
            "scenario1.b_tokens",
            Kind::Level,
            estimate("scenario1.b_tokens", |v| v.b_tokens_k),
        ),
        Simulated::new(
            "scenario1.no_qos_p95",
            Kind::AtLeast,
            estimate("scenario1.no_qos_p95", |v| v.least_p95_ms),
        ),
        Simulated::new(
            "unloaded.remote_minus_local",
            Kind::Level,
            estimate("unloaded.remote_minus_local", |v| v.remote_minus_local_us),
        ),
    ]
}
