//! The study's figures: the full-scale simulated parts, and every real run beside its twin
//! (real solid, twin dashed, one colour per setting).

use qos::TenantClass;
use scenario::TenantResult;

use super::real::Paired;
use super::real::RunView;
use super::scenarios::{Part, RunOutcome, DEVICE_A_TOML, REAL_SCALE_PCT, SMALL_TENANT_IOPS};
use crate::plot::{Figure, Reference, Series, Stroke, Ticks};

fn series(name: &str, points: Vec<(f64, f64)>, colour: usize, stroke: Stroke) -> Series {
    Series {
        name: name.into(),
        points,
        stroke,
        colour,
        ..Default::default()
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// One SLO line (in µs) per distinct p95 read-latency target among `tenants`, naming the
/// tenants that hold it (`SLO of A, B: 500 µs`), or their class when `by_class`.
fn slo_lines<'a>(
    tenants: impl IntoIterator<Item = &'a TenantResult>,
    by_class: bool,
) -> Vec<Reference> {
    let mut targets: Vec<(u64, Vec<String>)> = Vec::new();
    for t in tenants {
        let Some(ns) = t.slo_p95_read_latency_ns else {
            continue;
        };
        let who = if by_class {
            t.class.as_str().to_uppercase()
        } else {
            t.name.clone()
        };
        match targets.iter_mut().find(|(v, _)| *v == ns) {
            Some((_, names)) if names.contains(&who) => {}
            Some((_, names)) => names.push(who),
            None => targets.push((ns, vec![who])),
        }
    }
    targets.sort();
    targets
        .into_iter()
        .map(|(ns, names)| {
            let value = if ns >= 1_000_000 && ns % 100_000 == 0 {
                format!("{} ms", ns as f64 / 1e6)
            } else {
                format!("{} µs", us(ns))
            };
            Reference::slo(us(ns), format!("SLO of {}: {value}", names.join(", ")))
        })
        .collect()
}

/// Per-tenant points of `f` over the tenants named in `names` (a tenant missing from `run` is
/// left out).
fn per_tenant(
    run: &RunView,
    names: &[String],
    f: &dyn Fn(&TenantResult) -> f64,
) -> Vec<(f64, f64)> {
    names
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            run.tenants
                .iter()
                .find(|t| &t.name == n)
                .map(|t| (i as f64, f(t)))
        })
        .collect()
}

fn p95_us(t: &TenantResult) -> f64 {
    us(t.read_latency_ns_p95)
}

fn k_iops(t: &TenantResult) -> f64 {
    t.iops / 1000.0
}

/// The full-scale simulated parts.
pub fn sim_figures(sims: &[RunOutcome]) -> Vec<Figure> {
    let mut figs = Vec::new();
    let get = |id: &str| {
        sims.iter()
            .find(|o| o.id == id)
            .map(|o| RunView::sim(&o.summary))
    };
    for n in [1, 2] {
        let (Some(off), Some(on)) = (get(&format!("s{n}-off")), get(&format!("s{n}-on"))) else {
            continue;
        };
        let names: Vec<String> = on.tenants.iter().map(|t| t.name.clone()).collect();
        figs.push(Figure {
            stem: format!("scenario{n}_p95"),
            title: format!("Scenario {n}: p95 read latency per tenant"),
            caption: format!(
                "Simulated at full scale; scheduler off (outlined) and on (filled); A and B have a \
                 500 µs SLO (the dashed line). Device {DEVICE_A_TOML}, profile reflex-a, 2 threads; runs s{n}-off, \
                 s{n}-on."
            ),
            x_label: "tenant".into(),
            y_label: "p95 read latency (µs)".into(),
            x_log: false,
            y_log: true,
            x_categories: names.clone(),
            references: slo_lines(on.tenants.iter(), false),
            series: vec![
                series("off", per_tenant(&off, &names, &p95_us), 1, Stroke::Dashed),
                series("on", per_tenant(&on, &names, &p95_us), 0, Stroke::Solid),
            ],
            ..Default::default()
        });
        figs.push(Figure {
            stem: format!("scenario{n}_iops"),
            title: format!("Scenario {n}: IOPS per tenant"),
            caption: format!(
                "Simulated at full scale; scheduler off (outlined) and on (filled); runs s{n}-off, \
                 s{n}-on."
            ),
            x_label: "tenant".into(),
            y_label: "K IOPS".into(),
            x_log: false,
            y_log: false,
            x_categories: names.clone(),
            series: vec![
                series("off", per_tenant(&off, &names, &k_iops), 1, Stroke::Dashed),
                series("on", per_tenant(&on, &names, &k_iops), 0, Stroke::Solid),
            ],
            ..Default::default()
        });
    }
    let by_part = |part: Part| {
        let mut v: Vec<(f64, RunView)> = sims
            .iter()
            .filter(|o| o.part == part)
            .map(|o| (o.x as f64, RunView::sim(&o.summary)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let cores = by_part(Part::Cores);
    if !cores.is_empty() {
        let p = |f: &dyn Fn(&RunView) -> f64| cores.iter().map(|(x, r)| (*x, f(r))).collect();
        figs.push(Figure {
            stem: "cores_iops".into(),
            title: "Cores: aggregate IOPS and tokens".into(),
            caption: "Simulated at full scale; one LC tenant (20 K IOPS, 90 % reads, 2 ms) per \
                      thread, two BE tenants (80 % reads) on every thread; scheduler on."
                .into(),
            x_label: "dataplane threads".into(),
            y_label: "K per second".into(),
            x_log: false,
            y_log: false,
            x_ticks: Ticks::Integer,
            series: vec![
                series(
                    "LC IOPS",
                    p(&|r| r.iops(TenantClass::LatencyCritical) / 1000.0),
                    0,
                    Stroke::Solid,
                ),
                series(
                    "BE IOPS",
                    p(&|r| r.iops(TenantClass::BestEffort) / 1000.0),
                    1,
                    Stroke::Solid,
                ),
                series(
                    "tokens",
                    p(&|r| r.tokens_per_sec() / 1000.0),
                    2,
                    Stroke::Dashed,
                ),
            ],
            ..Default::default()
        });
        figs.push(Figure {
            stem: "cores_lc_p95".into(),
            title: "Cores: worst LC p95 read latency".into(),
            caption: "Simulated at full scale; the SLO is 2 ms (the dashed line).".into(),
            x_label: "dataplane threads".into(),
            y_label: "p95 read latency (µs)".into(),
            x_log: false,
            y_log: false,
            x_ticks: Ticks::Integer,
            references: slo_lines(
                cores
                    .iter()
                    .flat_map(|(_, r)| &r.tenants)
                    .filter(|t| t.class == TenantClass::LatencyCritical),
                true,
            ),
            series: vec![series(
                "LC p95",
                p(&|r| us(r.worst_p95_ns(TenantClass::LatencyCritical))),
                0,
                Stroke::Solid,
            )],
            ..Default::default()
        });
    }
    let tenants = by_part(Part::TenantsPerCore);
    if !tenants.is_empty() {
        figs.push(Figure {
            stem: "tenants_per_core".into(),
            title: "Tenants per core: offered vs served IOPS".into(),
            caption: format!(
                "Simulated at full scale; one thread; every tenant {SMALL_TENANT_IOPS} IOPS of \
                 1 KiB reads (LC, 2 ms); K searched (doubling, then bisecting). Served = commands \
                 the thread sent to the device in the measured window; the thread saturates \
                 where served falls below offered."
            ),
            x_label: "tenants".into(),
            y_label: "K IOPS".into(),
            x_log: true,
            y_log: false,
            x_ticks: Ticks::Integer,
            series: vec![
                series(
                    "offered",
                    tenants
                        .iter()
                        .map(|(x, _)| (*x, x * SMALL_TENANT_IOPS as f64 / 1000.0))
                        .collect(),
                    1,
                    Stroke::Dashed,
                ),
                series(
                    "served",
                    tenants
                        .iter()
                        .map(|(x, r)| (*x, r.device_iops_in_window / 1000.0))
                        .collect(),
                    0,
                    Stroke::Solid,
                ),
            ],
            ..Default::default()
        });
    }
    let un: Vec<(&str, f64)> = ["read-local", "read-remote", "write-local", "write-remote"]
        .iter()
        .filter_map(|k| {
            let r = get(&format!("unloaded-{k}"))?;
            let t = r.tenants.first()?;
            let ns = if k.starts_with("read") {
                t.read_latency_ns_mean
            } else {
                t.write_latency_ns_mean
            };
            Some((*k, us(ns)))
        })
        .collect();
    if un.len() == 4 {
        figs.push(Figure {
            stem: "unloaded".into(),
            title: "Unloaded latency: local device vs remote".into(),
            caption: "Simulated at full scale; 4 KiB random, QD1, mean; local = the device alone \
                      (no network or dataplane cost), remote = through the modelled server and a \
                      10 GbE link."
                .into(),
            x_label: "operation".into(),
            y_label: "mean latency (µs)".into(),
            x_log: false,
            y_log: false,
            x_categories: vec!["read".into(), "write".into()],
            series: vec![
                series(
                    "local",
                    vec![(0.0, un[0].1), (1.0, un[2].1)],
                    0,
                    Stroke::Solid,
                ),
                series(
                    "remote",
                    vec![(0.0, un[1].1), (1.0, un[3].1)],
                    1,
                    Stroke::Solid,
                ),
            ],
            ..Default::default()
        });
    }
    figs
}

/// Both sides of a real run, as views.
fn views(p: &Paired) -> (RunView, RunView) {
    (RunView::real(&p.real), RunView::sim(&p.twin))
}

/// Every real run beside its twin.
pub fn real_figures(pairs: &[Paired]) -> Vec<Figure> {
    let mut figs = Vec::new();
    let get = |id: &str| pairs.iter().find(|p| p.real.id == id).map(views);
    let scale = REAL_SCALE_PCT;
    for n in [1, 2] {
        let (Some((off_r, off_t)), Some((on_r, on_t))) = (
            get(&format!("real-s{n}-off")),
            get(&format!("real-s{n}-on")),
        ) else {
            continue;
        };
        let names: Vec<String> = on_r.tenants.iter().map(|t| t.name.clone()).collect();
        for (stem, title, y, f, log) in [
            (
                "p95",
                "p95 read latency per tenant",
                "p95 read latency (µs)",
                &p95_us as &dyn Fn(&TenantResult) -> f64,
                true,
            ),
            ("iops", "IOPS per tenant", "K IOPS", &k_iops, false),
        ] {
            figs.push(Figure {
                stem: format!("real_s{n}_{stem}"),
                title: format!("Scenario {n} on this machine, real vs model: {title}"),
                caption: format!(
                    "Scaled to {scale} % (rates, queue depths, token rates), one worker. Solid: the \
                     real server (ullstack serve, emulated device, driven by ullstack bench over \
                     loopback); outlined: its simulated twin (the same scenario file). Red: \
                     scheduler off; blue: on. A and B have a 500 µs SLO (the dashed line on the \
                     latency plot). Runs real-s{n}-off, real-s{n}-on."
                ),
                x_label: "tenant".into(),
                y_label: y.into(),
                x_log: false,
                y_log: log,
                x_categories: names.clone(),
                references: if log {
                    slo_lines(on_r.tenants.iter(), false)
                } else {
                    Vec::new()
                },
                series: vec![
                    series("real, off", per_tenant(&off_r, &names, f), 1, Stroke::Solid),
                    series("model, off", per_tenant(&off_t, &names, f), 1, Stroke::Dashed),
                    series("real, on", per_tenant(&on_r, &names, f), 0, Stroke::Solid),
                    series("model, on", per_tenant(&on_t, &names, f), 0, Stroke::Dashed),
                ],
                ..Default::default()
            });
        }
    }
    let by_part = |part: Part| {
        let mut v: Vec<(f64, RunView, RunView)> = pairs
            .iter()
            .filter(|p| p.real.part == part)
            .map(|p| {
                let (r, t) = views(p);
                (p.real.x as f64, r, t)
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let cores = by_part(Part::Cores);
    if !cores.is_empty() {
        let real = |f: &dyn Fn(&RunView) -> f64| cores.iter().map(|(x, r, _)| (*x, f(r))).collect();
        let model =
            |f: &dyn Fn(&RunView) -> f64| cores.iter().map(|(x, _, t)| (*x, f(t))).collect();
        figs.push(Figure {
            stem: "real_cores_iops".into(),
            title: "Cores on this machine, real vs model: IOPS".into(),
            caption: format!(
                "Scaled to {scale} %: one LC tenant (2 K IOPS, 90 % reads, 2 ms) per worker, two BE \
                 tenants (80 % reads) on every worker; scheduler on. Solid: real; dashed: model."
            ),
            x_label: "server workers".into(),
            y_label: "K IOPS".into(),
            x_log: false,
            y_log: false,
            x_ticks: Ticks::Integer,
            series: vec![
                series("LC real", real(&|r| r.iops(TenantClass::LatencyCritical) / 1000.0), 0, Stroke::Solid),
                series("LC model", model(&|r| r.iops(TenantClass::LatencyCritical) / 1000.0), 0, Stroke::Dashed),
                series("BE real", real(&|r| r.iops(TenantClass::BestEffort) / 1000.0), 1, Stroke::Solid),
                series("BE model", model(&|r| r.iops(TenantClass::BestEffort) / 1000.0), 1, Stroke::Dashed),
            ],
            ..Default::default()
        });
        figs.push(Figure {
            stem: "real_cores_lc_p95".into(),
            title: "Cores on this machine, real vs model: worst LC p95".into(),
            caption: "The SLO is 2 ms (the dashed grey line). Solid: real; dashed: model.".into(),
            x_label: "server workers".into(),
            y_label: "p95 read latency (µs)".into(),
            x_log: false,
            y_log: true,
            x_ticks: Ticks::Integer,
            references: slo_lines(
                cores
                    .iter()
                    .flat_map(|(_, r, _)| &r.tenants)
                    .filter(|t| t.class == TenantClass::LatencyCritical),
                true,
            ),
            series: vec![
                series(
                    "real",
                    real(&|r| us(r.worst_p95_ns(TenantClass::LatencyCritical))),
                    0,
                    Stroke::Solid,
                ),
                series(
                    "model",
                    model(&|r| us(r.worst_p95_ns(TenantClass::LatencyCritical))),
                    0,
                    Stroke::Dashed,
                ),
            ],
            ..Default::default()
        });
    }
    let tenants = by_part(Part::TenantsPerCore);
    if !tenants.is_empty() {
        let real = |f: &dyn Fn(&RunView) -> f64| {
            tenants
                .iter()
                .map(|(x, r, _)| (*x, f(r)))
                .collect::<Vec<_>>()
        };
        let model = |f: &dyn Fn(&RunView) -> f64| {
            tenants
                .iter()
                .map(|(x, _, t)| (*x, f(t)))
                .collect::<Vec<_>>()
        };
        figs.push(Figure {
            stem: "real_tenants_per_core".into(),
            title: "Tenants per core on this machine, real vs model: served IOPS".into(),
            caption: format!(
                "One worker; every tenant {SMALL_TENANT_IOPS} IOPS of 1 KiB reads (LC, 2 ms), K \
                 searched on the real server; the model runs the same K. Served = commands sent to \
                 the device per second over the measured window (real: the busiest window-long \
                 interval of the emulated device's counter)."
            ),
            x_label: "tenants".into(),
            y_label: "K IOPS".into(),
            x_log: true,
            y_log: false,
            x_ticks: Ticks::Integer,
            series: vec![
                series(
                    "offered",
                    tenants
                        .iter()
                        .map(|(x, _, _)| (*x, x * SMALL_TENANT_IOPS as f64 / 1000.0))
                        .collect(),
                    2,
                    Stroke::Dashed,
                ),
                series(
                    "real",
                    real(&|r| r.device_iops_in_window / 1000.0),
                    0,
                    Stroke::Solid,
                ),
                series(
                    "model",
                    model(&|r| r.device_iops_in_window / 1000.0),
                    0,
                    Stroke::Dashed,
                ),
            ],
            ..Default::default()
        });
        figs.push(Figure {
            stem: "real_tenants_p95".into(),
            title: "Tenants per core on this machine, real vs model: worst p95".into(),
            caption: "The SLO is 2 ms (the dashed grey line); a saturated thread's queue grows \
                      for the whole run. Solid: real; dashed: model."
                .into(),
            x_label: "tenants".into(),
            y_label: "worst p95 read latency (µs)".into(),
            x_log: true,
            y_log: true,
            x_ticks: Ticks::Integer,
            references: slo_lines(
                tenants
                    .iter()
                    .flat_map(|(_, r, _)| &r.tenants)
                    .filter(|t| t.class == TenantClass::LatencyCritical),
                true,
            ),
            series: vec![
                series(
                    "real",
                    real(&|r| us(r.worst_p95_ns(TenantClass::LatencyCritical))),
                    0,
                    Stroke::Solid,
                ),
                series(
                    "model",
                    model(&|r| us(r.worst_p95_ns(TenantClass::LatencyCritical))),
                    0,
                    Stroke::Dashed,
                ),
            ],
            ..Default::default()
        });
        let client: Vec<(f64, f64)> = pairs
            .iter()
            .filter(|p| p.real.part == Part::TenantsPerCore)
            .filter_map(|p| Some((p.real.x as f64, p.real.client_cpu_pct?)))
            .collect();
        let mut client = client;
        client.sort_by(|a, b| a.0.total_cmp(&b.0));
        figs.push(Figure {
            stem: "real_tenants_busy".into(),
            title: "Tenants per core on this machine: which thread saturates".into(),
            caption: "The server worker's busy share (real: its CPU time over the run's wall \
                      time; model: the modelled thread's) and the load generator's CPU (real \
                      only: the model's clients are never short of CPU)."
                .into(),
            x_label: "tenants".into(),
            y_label: "% of one core".into(),
            x_log: true,
            y_log: false,
            x_ticks: Ticks::Integer,
            series: vec![
                series(
                    "worker, real",
                    real(&|r| r.worker_busy_pct.first().copied().unwrap_or(0.0)),
                    0,
                    Stroke::Solid,
                ),
                series(
                    "worker, model",
                    model(&|r| r.worker_busy_pct.first().copied().unwrap_or(0.0)),
                    0,
                    Stroke::Dashed,
                ),
                series("load generator, real", client, 1, Stroke::Solid),
            ],
            ..Default::default()
        });
    }
    let un = |id: &str, read: bool| -> Option<(f64, f64)> {
        let (r, t) = get(id)?;
        let pick = |v: &RunView| {
            v.tenants.first().map(|t| {
                us(if read {
                    t.read_latency_ns_mean
                } else {
                    t.write_latency_ns_mean
                })
            })
        };
        Some((pick(&r)?, pick(&t)?))
    };
    if let (Some(rl), Some(rr), Some(wl), Some(wr)) = (
        un("real-unloaded-read-local", true),
        un("real-unloaded-read-remote", true),
        un("real-unloaded-write-local", false),
        un("real-unloaded-write-remote", false),
    ) {
        figs.push(Figure {
            stem: "real_unloaded".into(),
            title: "Unloaded latency on this machine, real vs model".into(),
            caption: "4 KiB random, QD1, mean. Local: the emulated device driven in process \
                      (real) / the device model alone (model). Remote: through the server over \
                      loopback (real) / the twin with this machine's costs (model). Filled: \
                      real; outlined: model."
                .into(),
            x_label: "operation".into(),
            y_label: "mean latency (µs)".into(),
            x_log: false,
            y_log: false,
            x_categories: vec!["read".into(), "write".into()],
            series: vec![
                series(
                    "local, real",
                    vec![(0.0, rl.0), (1.0, wl.0)],
                    0,
                    Stroke::Solid,
                ),
                series(
                    "local, model",
                    vec![(0.0, rl.1), (1.0, wl.1)],
                    0,
                    Stroke::Dashed,
                ),
                series(
                    "remote, real",
                    vec![(0.0, rr.0), (1.0, wr.0)],
                    1,
                    Stroke::Solid,
                ),
                series(
                    "remote, model",
                    vec![(0.0, rr.1), (1.0, wr.1)],
                    1,
                    Stroke::Dashed,
                ),
            ],
            ..Default::default()
        });
    }
    figs
}
