//! The study's tables and `report.html`.

use std::fmt::Write as _;

use qos::TenantClass;
use scenario::TenantResult;

use super::real::Paired;
use super::real::RunView;
use super::scenarios::{Part, ReflexRun, RunOutcome, REAL_SCALE_PCT, SMALL_TENANT_IOPS};
use super::search::{SearchOutcome, Verdict};
use crate::plan::Size;
use crate::plot::Figure;
use crate::table::{esc, Table};

fn us(ns: u64) -> String {
    format!("{:.0}", ns as f64 / 1000.0)
}

fn slo(t: &TenantResult) -> String {
    match t.slo_met {
        Some(true) => "met".into(),
        Some(false) => "MISSED".into(),
        None => "-".into(),
    }
}

fn header(cols: &[&str]) -> Vec<String> {
    cols.iter().map(|s| s.to_string()).collect()
}

/// Full-scale scenarios 1 and 2, per tenant.
pub fn headline(sims: &[RunOutcome]) -> Table {
    let mut t = Table {
        header: header(&[
            "run",
            "tenant",
            "class",
            "SLO p95 µs",
            "IOPS",
            "p95 read µs",
            "tokens/s",
            "SLO",
        ]),
        rows: Vec::new(),
    };
    for o in sims
        .iter()
        .filter(|o| matches!(o.part, Part::Scenario1 | Part::Scenario2))
    {
        for r in RunView::sim(&o.summary).tenants {
            t.rows.push(vec![
                format!("sim {}", o.id),
                r.name.clone(),
                r.class.to_string(),
                r.slo_p95_read_latency_ns.map_or("-".into(), us),
                format!("{:.0}", r.iops),
                us(r.read_latency_ns_p95),
                format!("{:.0}", r.tokens_per_sec),
                slo(&r),
            ]);
        }
    }
    t
}

/// Mean and p95 of a tenant's reads, or of its writes when it did none.
fn latency(t: &TenantResult) -> (u64, u64) {
    if t.reads > 0 {
        (t.read_latency_ns_mean, t.read_latency_ns_p95)
    } else {
        (t.write_latency_ns_mean, t.write_latency_ns_p95)
    }
}

/// Every real run of parts 1–3 and 5 beside its twin, per tenant; part 4 in
/// [`tenants_table`]. The last column is real only: how far the load generator fell behind an
/// open-loop tenant's arrivals (part of that tenant's latency; the model's clients never do).
pub fn comparison(pairs: &[Paired]) -> Table {
    let mut t = Table {
        header: header(&[
            "run",
            "tenant",
            "class",
            "SLO p95 µs",
            "IOPS real",
            "IOPS model",
            "mean µs real",
            "mean µs model",
            "p95 µs real",
            "p95 µs model",
            "tokens/s real",
            "tokens/s model",
            "SLO real",
            "SLO model",
            "send lag p99 µs",
        ]),
        rows: Vec::new(),
    };
    for p in pairs.iter().filter(|p| p.real.part != Part::TenantsPerCore) {
        let (real, twin) = (RunView::real(&p.real), RunView::sim(&p.twin));
        for r in &real.tenants {
            let m = twin.tenants.iter().find(|m| m.name == r.name);
            let (rm, rp) = latency(r);
            let mm = m.map(latency);
            let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            t.rows.push(vec![
                p.real.id.clone(),
                r.name.clone(),
                r.class.to_string(),
                r.slo_p95_read_latency_ns.map_or("-".into(), us),
                format!("{:.0}", r.iops),
                or_dash(m.map(|m| format!("{:.0}", m.iops))),
                us(rm),
                or_dash(mm.map(|(x, _)| us(x))),
                us(rp),
                or_dash(mm.map(|(_, x)| us(x))),
                format!("{:.0}", r.tokens_per_sec),
                or_dash(m.map(|m| format!("{:.0}", m.tokens_per_sec))),
                slo(r),
                or_dash(m.map(slo)),
                or_dash(
                    p.real
                        .tenant(&r.name)
                        .and_then(|t| t.client.as_ref())
                        .and_then(|c| c.send_lag_ns_p99)
                        .map(us),
                ),
            ]);
        }
    }
    t
}

/// Part 4 on the real server and its twin, one row per tenant count.
pub fn tenants_table(pairs: &[Paired]) -> Table {
    let mut t = Table {
        header: header(&[
            "tenants",
            "offered IOPS",
            "served real",
            "served model",
            "worst p95 µs real",
            "worst p95 µs model",
            "worker busy % real",
            "worker busy % model",
            "load generator CPU %",
            "load average",
        ]),
        rows: Vec::new(),
    };
    let mut rows: Vec<&Paired> = pairs
        .iter()
        .filter(|p| p.real.part == Part::TenantsPerCore)
        .collect();
    rows.sort_by_key(|p| p.real.x);
    for p in rows {
        let (real, twin) = (RunView::real(&p.real), RunView::sim(&p.twin));
        let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
        t.rows.push(vec![
            p.real.x.to_string(),
            (p.real.x * SMALL_TENANT_IOPS).to_string(),
            format!("{:.0}", real.device_iops_in_window),
            format!("{:.0}", twin.device_iops_in_window),
            us(real.worst_p95_ns(TenantClass::LatencyCritical)),
            us(twin.worst_p95_ns(TenantClass::LatencyCritical)),
            pct(real.worker_busy_pct.first().copied()),
            pct(twin.worker_busy_pct.first().copied()),
            pct(p.real.client_cpu_pct),
            p.real
                .load_average_1m
                .map_or("-".into(), |l| format!("{l:.1}")),
        ]);
    }
    t
}

/// One sentence on how a search ended.
pub fn verdict(s: &SearchOutcome) -> String {
    let probes: Vec<String> = s.probes.iter().map(|(k, _)| k.to_string()).collect();
    let what = match &s.verdict {
        Verdict::Saturated {
            kept_up: Some(k),
            saturated,
        } => format!("the thread kept up with {k} tenants and saturated at {saturated}"),
        Verdict::Saturated {
            kept_up: None,
            saturated,
        } => format!("the thread was saturated already at {saturated} tenants, the first probe"),
        Verdict::KeptUpTo { max } => {
            format!("the thread kept up with every count up to {max} (the search's bound)")
        }
        Verdict::Refused { tenants, reason } => {
            format!(
                "admission control refused {tenants} tenants before the thread saturated: {reason}"
            )
        }
    };
    format!("{what} (probes, in order: {}).", probes.join(", "))
}

/// What the page shows.
pub struct Page<'a> {
    pub size: Size,
    pub seed: u64,
    /// The published figures beside ours ([`crate::published::table`]): the page opens with it.
    pub published: &'a Table,
    pub headline: &'a Table,
    pub comparison: &'a Table,
    pub figures: &'a [Figure],
    pub pngs: &'a [Vec<u8>],
    pub sim_specs: &'a [&'a ReflexRun],
    pub sim_search: &'a SearchOutcome,
    pub real: &'a [Paired],
    pub real_search: Option<&'a SearchOutcome>,
    /// The "Provenance" section ([`crate::provenance::html`]): the page's last.
    pub provenance: &'a str,
}

pub fn report(p: &Page<'_>) -> String {
    let mut out = String::new();
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>reflex</title>\n\
         <style>body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; }} \
         table {{ border-collapse: collapse; font-size: 13px; }} td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }} \
         pre {{ background: #f5f5f5; padding: 6px; font-size: 12px; }}</style>\n</head>\n<body>\n\
         <h1>reflex — SLOs for remote tenants ({size}, seed {seed})</h1>\n\
         <p>Two halves. <b>Full scale, simulated</b>: the published scenarios on the simulated \
         remote server (sim::remote: network model, dataplane threads, the qos crate's scheduler, \
         the SSD model). <b>This machine, real and model</b>: the same five parts scaled to this \
         VM (parts 1–3 at {scale} % of every rate, queue depth and token rate) through the real \
         server (ullstack serve in process, emulated device, driven by ullstack bench over \
         loopback), each beside its simulated twin — the same scenario file through sim::remote \
         with this machine's loopback and dataplane costs.</p>\n\
         {smoke}<h2>The published figures beside ours</h2>\n<p>The paper's figures \
         (reference/published.toml) beside the full-scale simulated runs (one run each: no \
         interval).</p>\n{published}\
         <h2>Full scale: scenarios 1 and 2</h2>\n{headline}\
         <p>Part 4 (simulated, one thread, tenants of {small} IOPS): {sim_verdict}</p>\n",
        size = p.size.as_str(),
        seed = p.seed,
        scale = REAL_SCALE_PCT,
        headline = p.headline.to_html(),
        published = p.published.to_html(),
        smoke = if p.size == Size::Quick {
            format!("<p class=\"smoke\"><b>{}</b></p>\n", esc(crate::report::SMOKE_TEST))
        } else {
            String::new()
        },
        small = SMALL_TENANT_IOPS,
        sim_verdict = esc(&verdict(p.sim_search)),
    )
    .expect("string");
    if !p.real.is_empty() {
        write!(
            out,
            "<h2>This machine: real vs model</h2>\n{}\n<h3>Part 4: tenants per core</h3>\n{}",
            p.comparison.to_html(),
            tenants_table(p.real).to_html()
        )
        .expect("string");
        if let Some(s) = p.real_search {
            writeln!(out, "<p>On the real server: {}</p>", esc(&verdict(s))).expect("string");
        }
    } else {
        out.push_str("<p>No real runs (<code>--sim-only</code>).</p>\n");
    }
    out.push_str("<h2>Figures</h2>\n");
    for (f, png) in p.figures.iter().zip(p.pngs) {
        out.push_str(&crate::report::figure_html(f, png));
    }
    out.push_str(
        "<h2>Every run's scenario</h2>\n<p>Re-run a simulated one alone: <code>ullstack sim \
         --remote runs/&lt;id&gt;/scenario.toml</code>. A real run's file is what <code>ullstack \
         bench --scenario</code> ran (its <code>[sim]</code> table gave the server's device, \
         profile, scheduler and workers) and what its twin ran: <code>ullstack sim --remote \
         runs/real-&lt;id&gt;/scenario.toml</code> gives <code>twin.json</code>.</p>\n",
    );
    for s in p.sim_specs {
        writeln!(
            out,
            "<details><summary><code>{}</code></summary><pre>{}</pre></details>",
            esc(&s.id),
            esc(&s.scenario_toml)
        )
        .expect("string");
    }
    for r in p.real {
        let o = &r.real;
        writeln!(
            out,
            "<details><summary><code>{}</code> (real, load average {})</summary><p>{}</p><pre>{}</pre></details>",
            esc(&o.id),
            o.load_average_1m.map_or("-".into(), |l| format!("{l:.1}")),
            esc(&o.note),
            esc(&o.scenario_toml)
        )
        .expect("string");
    }
    out.push_str(p.provenance);
    out.push_str("</body>\n</html>\n");
    out
}
