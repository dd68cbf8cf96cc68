//! `reflex`'s rows of `reference/published.toml`, from its full-scale simulated runs.

use super::real::RunView;
use super::scenarios::RunOutcome;
use crate::published::{Estimate, Kind, Simulated};

/// `reflex`: scenario 1 at full scale on the simulated server (LC tenants' SLOs and B's
/// tokens with the scheduler on, every tenant's p95 with it off) and part 5's unloaded reads
/// (remote minus local). One run each: no interval.
pub fn published(sims: &[RunOutcome]) -> Vec<Simulated> {
    let view = |id: &str| {
        sims.iter()
            .find(|o| o.id == id)
            .map(|o| RunView::sim(&o.summary))
    };
    let on = view("s1-on");
    let off = view("s1-off");
    let tenant = |v: &RunView, name: &str| v.tenants.iter().find(|t| t.name == name).cloned();
    let met = on.as_ref().and_then(|v| {
        let (a, b) = (tenant(v, "A")?, tenant(v, "B")?);
        Some(f64::from(u8::from(a.slo_met? && b.slo_met?)))
    });
    let b_tokens = on
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
    let remote_minus_local = mean_read_us("unloaded-read-remote")
        .zip(mean_read_us("unloaded-read-local"))
        .map(|(r, l)| r - l);
    let one = |v: Option<f64>| v.map(|v| Estimate::point(v, 1));
    vec![
        Simulated::new("scenario1.lc_slo_met", Kind::Bool, one(met)),
        Simulated::new("scenario1.b_tokens", Kind::Level, one(b_tokens)),
        Simulated::new("scenario1.no_qos_p95", Kind::AtLeast, one(least_p95_ms)),
        Simulated::new(
            "unloaded.remote_minus_local",
            Kind::Level,
            one(remote_minus_local),
        ),
    ]
}
