//! The calibration report: the measured curves, the fitted model drawn over them, and the fit's
//! error drawn and stated (figures through `study::plot`, `report.html` through
//! `study::report`).
//!
//! # The figures
//! - `load_latency`: p95 read latency against IOPS, one solid curve per read ratio (measured),
//!   and over each, dashed in the same colour, the **model's** prediction for that mix: at each
//!   p95 target of the table, `rate / (r + (1 − r)·W)` IOPS (the read-only curve: the read-only
//!   column over the read-only read cost). Where the model fits, each dashed curve lies on its
//!   solid one; the horizontal gap at a target is the fit's error for that mix, also given in
//!   the "model vs measured" table. Worked example: a 50 % mix, table rate 100,000 tokens/s at
//!   1 ms, W = 4: the model says 100,000 / (0.5 + 0.5·4) = 40,000 IOPS at p95 1 ms.
//! - `weighted_load`: the mixed curves against weighted load (tokens/s under the fitted W; they
//!   coincide where the model fits), and the fitted table as a **band**: its lower edge is the
//!   table's rate (the slowest mix's), its upper edge the fastest mix's token rate at the same
//!   target. The band's width is the fit spread the summary table states per target. Both edges
//!   are dashed in the read-only curve's colour, which no mixed curve uses.
//! - `latency_vs_qd`, `latency_vs_size`: the read-only QD sweep and the size sweep.
//! - `interrupt_vs_polled_qd`, `interrupt_vs_polled_size`: only where polled completion works:
//!   the read-only QD sweep and the QD1 size sweep, interrupt-driven (solid) and polled
//!   (dashed).
//!
//! What it leaves out: a per-point confidence interval (one run per point; repeat the command
//! to see the run-to-run spread).

use std::fmt::Write as _;

use crate::curves::{CurveFit, CurvePoint};
use study::plot::{Figure, Series, Stroke};
use study::table::{esc, Table};

use crate::sweep::Measurements;

/// The summary table: per target the fitted rates and the fit spread, then the weights.
pub fn summary_table(fit: &CurveFit) -> Table {
    let p = &fit.profile;
    let mut t = Table {
        header: [
            "p95 target",
            "tokens/s",
            "read-only tokens/s",
            "fit spread %",
        ]
        .map(String::from)
        .to_vec(),
        rows: Vec::new(),
    };
    for (k, pt) in p.points.iter().enumerate() {
        t.rows.push(vec![
            format!("{} µs", pt.p95_read_latency_ns / 1000),
            pt.tokens_per_sec.to_string(),
            pt.read_only_tokens_per_sec.to_string(),
            format!("{:.1}", fit.spread_pct.get(k).copied().unwrap_or(0.0)),
        ]);
    }
    t.rows.push(vec![
        "write weight".into(),
        format!("{:.2} reads", p.write_cost_mtok as f64 / 1000.0),
        format!(
            "read-only read {:.3}",
            p.read_only_read_cost_mtok as f64 / 1000.0
        ),
        String::new(),
    ]);
    t
}

/// IOPS the fitted model predicts for `pct` % reads at table point `k`.
fn model_iops(fit: &CurveFit, pct: u8, k: usize) -> f64 {
    let p = &fit.profile;
    let pt = &p.points[k];
    if pct == 100 {
        return pt.read_only_tokens_per_sec as f64 * 1000.0
            / p.read_only_read_cost_mtok.max(1) as f64;
    }
    let r = f64::from(pct) / 100.0;
    let per_io = r + (1.0 - r) * p.write_cost_mtok as f64 / 1000.0;
    pt.tokens_per_sec as f64 / per_io
}

/// IOPS measured for mix `pct` at the fit's `k`-th target (read off its curve).
fn measured_iops(fit: &CurveFit, all_targets: &[u64], pct: u8, k: usize) -> Option<u64> {
    let t = *fit.targets_ns.get(k)?;
    let j = all_targets.iter().position(|&x| x == t)?;
    let row = fit.rows.iter().find(|r| r.read_pct == pct)?;
    row.iops.get(j).copied()
}

/// Per mix and target: measured IOPS, the model's, and the error in percent of the measured.
pub fn model_table(fit: &CurveFit, all_targets: &[u64], curves: &[(u8, Vec<CurvePoint>)]) -> Table {
    let mut header = vec!["read %".to_owned()];
    header.extend(
        fit.targets_ns
            .iter()
            .map(|t| format!("{} µs: measured / model IOPS (error)", t / 1000)),
    );
    let mut t = Table {
        header,
        rows: Vec::new(),
    };
    for (pct, _) in curves {
        let mut row = vec![format!("{pct}")];
        for k in 0..fit.targets_ns.len() {
            let model = model_iops(fit, *pct, k);
            row.push(match measured_iops(fit, all_targets, *pct, k) {
                Some(m) if m > 0 => format!(
                    "{m} / {model:.0} ({:+.1} %)",
                    100.0 * (model - m as f64) / m as f64
                ),
                _ => format!("- / {model:.0}"),
            });
        }
        t.rows.push(row);
    }
    t
}

fn fig(
    stem: &str,
    title: &str,
    caption: String,
    x: &str,
    y: &str,
    x_log: bool,
    series: Vec<Series>,
) -> Figure {
    Figure {
        stem: stem.into(),
        title: title.into(),
        caption,
        x_label: x.into(),
        y_label: y.into(),
        x_log,
        y_log: true,
        x_categories: Vec::new(),
        series,
        ..Default::default()
    }
}

fn qd_series(curve: &[CurvePoint], label: &str, stroke: Stroke) -> Vec<Series> {
    let at = |f: fn(&CurvePoint) -> u64| -> Vec<(f64, f64)> {
        curve
            .iter()
            .map(|p| (f64::from(p.queue_depth), f(p) as f64 / 1000.0))
            .collect()
    };
    vec![
        Series {
            name: format!("p50{label}"),
            points: at(|p| p.read_p50_ns),
            stroke,
            colour: 0,
            ..Default::default()
        },
        Series {
            name: format!("p95{label}"),
            points: at(|p| p.read_p95_ns),
            stroke,
            colour: 1,
            ..Default::default()
        },
    ]
}

fn size_series(
    sizes: &[CurvePoint],
    qd: u32,
    name: String,
    stroke: Stroke,
    colour: usize,
) -> Series {
    Series {
        name,
        points: sizes
            .iter()
            .filter(|p| p.queue_depth == qd)
            .map(|p| (p.size_bytes as f64 / 1024.0, p.read_mean_ns as f64 / 1000.0))
            .collect(),
        stroke,
        colour,
        ..Default::default()
    }
}

/// Every figure of the report (see the module essay).
pub fn figures(m: &Measurements, fit: &CurveFit) -> Vec<Figure> {
    let w = fit.profile.write_cost_mtok;
    let ro = fit.profile.read_only_read_cost_mtok;
    let targets_us: Vec<f64> = fit.targets_ns.iter().map(|&t| t as f64 / 1000.0).collect();
    let mut raw = Vec::new();
    let mut weighted = Vec::new();
    for (i, (pct, c)) in m.curves.iter().enumerate() {
        raw.push(Series {
            name: format!("{pct} % reads"),
            points: c
                .iter()
                .map(|p| (p.iops / 1000.0, p.read_p95_ns as f64 / 1000.0))
                .collect(),
            stroke: Stroke::Solid,
            colour: i,
            ..Default::default()
        });
        raw.push(Series {
            name: format!("model, {pct} %"),
            points: (0..fit.targets_ns.len())
                .map(|k| (model_iops(fit, *pct, k) / 1000.0, targets_us[k]))
                .collect(),
            stroke: Stroke::Dashed,
            colour: i,
            ..Default::default()
        });
        if *pct < 100 {
            weighted.push(Series {
                name: format!("{pct} % reads"),
                points: c
                    .iter()
                    .map(|p| {
                        let tok = p.iops
                            * (f64::from(*pct) + f64::from(100 - pct) * w as f64 / 1000.0)
                            / 100.0;
                        (tok / 1000.0, p.read_p95_ns as f64 / 1000.0)
                    })
                    .collect(),
                stroke: Stroke::Solid,
                colour: i,
                ..Default::default()
            });
        }
    }
    let table_edge: Vec<(f64, f64)> = fit
        .profile
        .points
        .iter()
        .map(|p| {
            (
                p.tokens_per_sec as f64 / 1000.0,
                p.p95_read_latency_ns as f64 / 1000.0,
            )
        })
        .collect();
    let upper_edge: Vec<(f64, f64)> = table_edge
        .iter()
        .zip(&fit.spread_pct)
        .map(|(&(x, y), s)| (x * (1.0 + s / 100.0), y))
        .collect();
    weighted.push(Series {
        name: "model: table rate".into(),
        points: table_edge,
        stroke: Stroke::Dashed,
        colour: 0,
        ..Default::default()
    });
    weighted.push(Series {
        name: "model + fit error".into(),
        points: upper_edge,
        stroke: Stroke::Dashed,
        colour: 0,
        ..Default::default()
    });
    let spreads: Vec<String> = fit
        .targets_ns
        .iter()
        .zip(&fit.spread_pct)
        .map(|(t, s)| format!("{} µs ±{s:.1} %", t / 1000))
        .collect();
    let ro_curve = m
        .curves
        .iter()
        .find(|(p, _)| *p == 100)
        .map(|(_, c)| c.clone())
        .unwrap_or_default();
    let mut figures = vec![
        fig(
            "load_latency",
            "p95 read latency against load: measured and model",
            format!(
                "4 KiB, closed loop (a queue-depth sweep per mix). Solid: measured; dashed, same colour: the fitted model's IOPS at each p95 target (table rate over the mix's cost per I/O, write weight {:.2}); the horizontal gap is the fit's error (table below the figures).",
                w as f64 / 1000.0
            ),
            "K IOPS",
            "p95 read latency (µs)",
            false,
            raw,
        ),
        fig(
            "weighted_load",
            "p95 read latency against weighted load (fitted model and its error)",
            format!(
                "Mixed curves with load in K tokens/s under the fitted write weight {:.2} reads (read-only reads cost {:.3}): they coincide where the model fits. Dashed: the fitted table (lower edge, the slowest mix's rate) and the fastest mix's rate (upper edge): the band between them is the fit error per target: {}.",
                w as f64 / 1000.0,
                ro as f64 / 1000.0,
                spreads.join(", ")
            ),
            "K tokens/s",
            "p95 read latency (µs)",
            false,
            weighted,
        ),
        fig(
            "latency_vs_qd",
            "Read latency against queue depth",
            "4 KiB random reads, interrupt-driven completion.".into(),
            "queue depth",
            "latency (µs)",
            true,
            qd_series(&ro_curve, "", Stroke::Solid),
        ),
        fig(
            "latency_vs_size",
            "Read latency against request size",
            "Random reads at QD1 and QD16.".into(),
            "KiB",
            "mean latency (µs)",
            true,
            vec![
                size_series(&m.sizes, 1, "QD1 mean".into(), Stroke::Solid, 0),
                size_series(&m.sizes, 16, "QD16 mean".into(), Stroke::Solid, 1),
            ],
        ),
    ];
    if let Some(p) = &m.polled {
        let mut qd = qd_series(&ro_curve, ", interrupt", Stroke::Solid);
        qd.extend(qd_series(&p.read_only, ", polled", Stroke::Dashed));
        figures.push(fig(
            "interrupt_vs_polled_qd",
            "Interrupt-driven vs polled completion, against queue depth",
            "4 KiB random reads; solid: interrupt-driven, dashed: polled (IORING_SETUP_IOPOLL)."
                .into(),
            "queue depth",
            "latency (µs)",
            true,
            qd,
        ));
        figures.push(fig(
            "interrupt_vs_polled_size",
            "Interrupt-driven vs polled completion, against request size (QD1)",
            "Random reads at QD1; solid: interrupt-driven, dashed: polled.".into(),
            "KiB",
            "mean latency (µs)",
            true,
            vec![
                size_series(&m.sizes, 1, "QD1, interrupt".into(), Stroke::Solid, 0),
                size_series(&p.sizes, 1, "QD1, polled".into(), Stroke::Dashed, 0),
            ],
        ));
    }
    figures
}

/// Everything `report_html` shows.
pub struct Report<'a> {
    pub target: &'a str,
    pub method: &'a str,
    pub polled: &'a str,
    pub summary: &'a Table,
    pub model: &'a Table,
    pub figures: &'a [Figure],
    pub pngs: &'a [Vec<u8>],
    pub profile: &'a str,
}

pub fn report_html(r: &Report) -> String {
    let mut out = String::new();
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>calibrate</title>\n\
         <style>body {{ font-family: sans-serif; max-width: 1100px; margin: 2em auto; }} table {{ border-collapse: collapse; }} \
         td, th {{ border: 1px solid #ccc; padding: 2px 6px; }} pre {{ background: #f5f5f5; padding: 6px; }}</style>\n</head>\n<body>\n\
         <h1>ullstack calibrate {t}</h1>\n<p>{m}</p>\n<p>{p}</p>\n<h2>Fitted profile</h2>\n{tab}\n<pre>{prof}</pre>\n<h2>Figures</h2>\n",
        t = esc(r.target),
        m = esc(r.method),
        p = esc(r.polled),
        tab = r.summary.to_html(),
        prof = esc(r.profile),
    )
    .expect("string");
    for (f, png) in r.figures.iter().zip(r.pngs) {
        out.push_str(&study::report::figure_html(f, png));
    }
    write!(
        out,
        "<h2>Model vs measured</h2>\n<p>Per mix and p95 target: the IOPS read off the measured curve, the IOPS the fitted model gives that mix, and the model's error in percent of the measured (a mix whose curve never reaches a target reads its highest measured IOPS there: a lower bound).</p>\n{}\n",
        r.model.to_html()
    )
    .expect("string");
    out.push_str("</body>\n</html>\n");
    out
}
