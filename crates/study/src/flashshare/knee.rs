//! The online services' load-latency curves and their knees (report 6 of the `flashshare`
//! study; issue 25, item 1).
//!
//! presets.md runs the online services at 400 requests/s *because that is the knee of their
//! load-latency curve*. That is a claim about the services, so the study checks it: each online
//! service runs alone on the papers' host (`arm8`, `zssd`, the `vanilla` stack) at every rate of
//! [`RATES`], and its mean response time is read against the rate.
//!
//! ## The knee, precisely
//! The knee is the request rate at which the mean response time first reaches [`KNEE_FACTOR`]
//! (2) times its low-load mean, the mean at the sweep's lowest rate ([`RATES`]`[0]` = 50/s,
//! where a request almost never waits). Between two swept rates the crossing is interpolated
//! linearly in rate. Why twice: for an M/M/1 queue the mean response is `S / (1 − ρ)`, which
//! doubles at ρ = 1/2, the load that maximises Kleinrock's *power* (throughput over delay:
//! `λ (1 − λS) / S`), the operating point queueing theory calls the knee; for a service with
//! less variable work (M/G/1 with a coefficient of variation c, the wait is `ρ(1 + c²)/(2(1 −
//! ρ))` service times) it doubles later, at ρ ≈ 0.65 for the services here. A curve that never
//! doubles within the sweep has no knee in it (`None`: "above 600/s").
//!
//! Worked example (`apache`, 10 s per rate, seed 1): 1.70 ms at 50/s, so the knee is where the
//! mean crosses 3.40 ms; 3.14 ms at 400/s and 5.50 ms at 500/s put it at 400 + 100 × (3.40 −
//! 3.14) / (5.50 − 3.14) ≈ 411/s.
//!
//! ## What it runs
//! One run per service and rate, the study's seed, no replicates: the curve's shape is the
//! finding, and its points near and past the knee average thousands of requests
//! ([`FULL_MS`]: 10 s; `--quick` [`QUICK_MS`]: 2 s, whose knee moves by up to ±40/s with the
//! seed). The runs are alone runs, cheap beside the co-runs (a few hundred ms of wall time each
//! in a release build). The services' compute per request is the calibrated parameter that puts
//! the knee here (`workload::profile`'s essay "How the online services are run"), so this
//! report checks a calibration, not a prediction; the test
//! `each_online_profile_s_knee_is_near_400_per_sec` holds it within 300–600/s.
//!
//! The 400/s runs repeat the stack comparison's `vanilla` alone runs of the study's seed: 400/s
//! is the presets' rate, so the system is the same and so is every result but the run's name
//! (test `the_400_per_sec_runs_are_vanilla_s_alone_runs`). The study runs them under both ids
//! rather than file one run's result under another's name: three alone runs, well under 0.1 %
//! of a full study's simulation.
//!
//! Output: the figure `knee` (mean response against rate, log scale, each knee marked by a
//! dashed drop line), the table "Load-latency sweep" (mean and p99 per rate, the knee in the
//! last row) and `study.json`'s `findings.knee_requests_per_sec` (per service; `null` when the
//! curve does not double in the sweep).

use crate::plan::Size;
use crate::plot::{Figure, Series, Stroke};
use crate::results::{ProcessHeadline, Results};
use crate::spec::{RunSpec, SystemFile, SystemRun};
use crate::table::Table;

use engine::time::format_ns;

use super::{process, DEVICE, HOST, ONLINE};

/// Request rates swept, requests/s: from low load to past the knee (each service saturates
/// its worker near 600/s).
pub const RATES: [u64; 9] = [50, 100, 200, 300, 350, 400, 450, 500, 600];
/// The mean response at the knee, over the low-load mean (module essay: twice).
pub const KNEE_FACTOR: f64 = 2.0;
/// Simulated time of each sweep run.
pub const FULL_MS: u64 = 10_000;
/// Simulated time of each `--quick` sweep run.
pub const QUICK_MS: u64 = 2_000;
/// The stack of the sweep: the stock one.
pub const STACK: &str = "vanilla";

/// Id of the sweep run of `online` at `rate` requests/s.
pub fn run_id(online: &str, rate: u64) -> String {
    format!("knee-{online}-{rate}")
}

/// The system file of a sweep run: the service alone at `rate`.
fn system_toml(online: &str, rate: u64, seed: u64, duration_ms: u64) -> String {
    SystemFile::new(seed, duration_ms, HOST)
        .device(DEVICE)
        .process(online)
        .key(&format!("requests_per_sec = {rate}"))
        .finish()
}

/// The sweep's runs: every service at every rate, the study's seed.
pub fn runs(size: Size, seed: u64) -> Vec<RunSpec> {
    let duration_ms = match size {
        Size::Quick => QUICK_MS,
        Size::Full => FULL_MS,
    };
    let mut out = Vec::new();
    for online in ONLINE {
        for rate in RATES {
            out.push(RunSpec {
                device_keys: String::new(),
                id: run_id(online, rate),
                device: DEVICE.to_string(),
                host: HOST.to_string(),
                job_fio: system_toml(online, rate, seed, duration_ms),
                seed,
                system: Some(SystemRun {
                    stack: STACK.to_string(),
                    series_ms: 0,
                }),
            });
        }
    }
    out
}

/// The knee of a load-latency curve: `points` are (rate, mean response) in increasing rate;
/// the rate at which the mean first reaches [`KNEE_FACTOR`] × the first point's, interpolated
/// linearly between the two rates around the crossing (module essay). `None`: fewer than two
/// points, or the curve never gets there.
pub fn knee(points: &[(f64, f64)]) -> Option<f64> {
    let &(_, base) = points.first()?;
    let target = KNEE_FACTOR * base;
    points.windows(2).find_map(|w| {
        let ((r0, m0), (r1, m1)) = (w[0], w[1]);
        (m1 >= target).then(|| {
            if m0 >= target || m1 == m0 {
                r0
            } else {
                r0 + (r1 - r0) * (target - m0) / (m1 - m0)
            }
        })
    })
}

fn headline<'a>(results: &'a Results, online: &str, rate: u64) -> Option<&'a ProcessHeadline> {
    process(results, &run_id(online, rate), online)
}

/// `online`'s curve: (rate, statistic) at each swept rate that has a result.
fn curve(
    results: &Results,
    online: &str,
    of: fn(&ProcessHeadline) -> Option<u64>,
) -> Vec<(f64, f64)> {
    RATES
        .iter()
        .filter_map(|&rate| {
            let v = of(headline(results, online, rate)?)?;
            Some((rate as f64, v as f64))
        })
        .collect()
}

fn mean_of(p: &ProcessHeadline) -> Option<u64> {
    p.response_mean_ns
}

fn p99_of(p: &ProcessHeadline) -> Option<u64> {
    p.response_p99_ns
}

/// `online`'s knee, requests/s, from the sweep's means; `None` without the runs or a crossing.
/// The lowest rate's run must be there: the knee is relative to it.
pub fn knee_of(results: &Results, online: &str) -> Option<f64> {
    headline(results, online, RATES[0])?;
    knee(&curve(results, online, mean_of))
}

/// `study.json`'s `findings` of the sweep: each service's knee (`null` where there is none).
pub fn findings(results: &Results) -> serde_json::Value {
    let knees: serde_json::Map<String, serde_json::Value> = ONLINE
        .iter()
        .map(|online| {
            let v = knee_of(results, online).map(|k| (k * 10.0).round() / 10.0);
            (online.to_string(), serde_json::json!(v))
        })
        .collect();
    serde_json::json!({
        "knee_requests_per_sec": knees,
        "knee_definition": format!(
            "rate at which the mean response first reaches {KNEE_FACTOR}x its mean at \
             {} requests/s ({STACK}, {HOST}, {DEVICE}, alone), interpolated linearly",
            RATES[0]
        ),
    })
}

/// The knee cell of the table: the rate, or where the curve stays.
fn knee_cell(results: &Results, online: &str) -> String {
    match (
        knee_of(results, online),
        headline(results, online, RATES[0]),
    ) {
        (Some(k), _) => format!("knee {k:.0}/s"),
        (None, Some(_)) => format!("no knee ≤ {}/s", RATES[RATES.len() - 1]),
        (None, None) => "n/a".into(),
    }
}

/// Report 6's table: mean / p99 per service at each rate, the knee in the last row.
pub fn table(results: &Results) -> Table {
    let mut t = Table {
        header: std::iter::once("requests/s".to_string())
            .chain(ONLINE.iter().map(|o| format!("{o} mean / p99")))
            .collect(),
        rows: Vec::new(),
    };
    for rate in RATES {
        let mut row = vec![rate.to_string()];
        for online in ONLINE {
            row.push(match headline(results, online, rate) {
                Some(p) => match (p.response_mean_ns, p.response_p99_ns) {
                    (Some(m), Some(p99)) => format!("{} / {}", format_ns(m), format_ns(p99)),
                    _ => "n/a".into(),
                },
                None => "n/a".into(),
            });
        }
        t.rows.push(row);
    }
    let mut last = vec![format!("knee ({KNEE_FACTOR}x mean at {}/s)", RATES[0])];
    last.extend(ONLINE.iter().map(|online| knee_cell(results, online)));
    t.rows.push(last);
    t
}

/// Report 6's heading.
pub fn table_title() -> String {
    format!(
        "Load-latency sweep: each online service alone ({STACK}, {HOST} + {DEVICE}), mean / p99 \
         response time by request rate, and its knee"
    )
}

/// Report 6's figure: mean (solid) and p99 (dashed, thin) response time against rate per
/// service, each knee marked by a dashed drop line from the curve to the axis.
pub fn figure(results: &Results, size: Size, seed: u64) -> Figure {
    let mut series = Vec::new();
    for (c, online) in ONLINE.iter().enumerate() {
        let mean = curve(results, online, mean_of);
        let p99 = curve(results, online, p99_of);
        let to_ms = |v: &[(f64, f64)]| -> Vec<(f64, f64)> {
            v.iter().map(|&(r, ns)| (r, ns / 1e6)).collect()
        };
        if let Some(k) = knee_of(results, online) {
            let base = mean.first().map(|&(_, m)| m).unwrap_or(f64::NAN);
            series.push(Series {
                name: format!("{online} knee {k:.0}/s"),
                points: vec![(k, 0.1), (k, KNEE_FACTOR * base / 1e6)],
                stroke: Stroke::Dashed,
                colour: c,
                ..Default::default()
            });
        }
        series.push(Series {
            name: format!("{online} mean"),
            points: to_ms(&mean),
            stroke: Stroke::Solid,
            colour: c,
            ..Default::default()
        });
        series.push(Series {
            name: format!("{online} p99"),
            points: to_ms(&p99),
            stroke: Stroke::Dashed,
            colour: c,
            ..Default::default()
        });
    }
    let ms = match size {
        Size::Quick => QUICK_MS,
        Size::Full => FULL_MS,
    };
    Figure {
        stem: "knee".into(),
        title: "online services: load-latency curves and knees".into(),
        caption: format!(
            "Mean (solid) and p99 (dashed) response time of each online service alone on {HOST} \
             + {DEVICE} ({STACK}) against its request rate (Poisson arrivals), {ms} ms per rate, \
             seed {seed}. The knee (dashed drop line) is where the mean first reaches \
             {KNEE_FACTOR}x its mean at {} requests/s; the studies run the services at 400/s \
             (presets.md: the knee). The services' compute per request is calibrated to put it \
             there.",
            RATES[0]
        ),
        x_label: "requests/s".into(),
        y_label: "response time (ms)".into(),
        x_log: false,
        y_log: true,
        series,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crossing is interpolated between the two rates around it; a curve that starts at
    /// the factor has its knee at its first rate; one that never gets there has none.
    #[test]
    fn the_knee_is_where_the_mean_first_doubles() {
        let pts = [
            (50.0, 1.0),
            (300.0, 1.5),
            (400.0, 1.8),
            (500.0, 2.6),
            (600.0, 9.0),
        ];
        let k = knee(&pts).unwrap();
        assert!((k - 425.0).abs() < 1e-9, "{k}");
        assert_eq!(knee(&[(50.0, 1.0), (100.0, 1.2)]), None);
        assert_eq!(knee(&[(50.0, 1.0)]), None);
        assert_eq!(knee(&[]), None);
        assert_eq!(knee(&[(50.0, 1.0), (100.0, 2.0)]), Some(100.0));
        // A noisy dip after the crossing does not move it.
        let k = knee(&[(50.0, 1.0), (100.0, 3.0), (200.0, 1.5)]).unwrap();
        assert!((k - 75.0).abs() < 1e-9, "{k}");
    }

    /// Each run is the service alone at its rate under vanilla, with the study's seed.
    #[test]
    fn the_sweep_runs_each_service_alone_at_each_rate() {
        let runs = runs(Size::Quick, 3);
        assert_eq!(runs.len(), ONLINE.len() * RATES.len());
        let r = runs
            .iter()
            .find(|r| r.id == run_id("imageserver", 450))
            .unwrap();
        assert!(
            r.job_fio.contains("requests_per_sec = 450\n"),
            "{}",
            r.job_fio
        );
        assert!(r.job_fio.contains("duration_ms = 2000\n"), "{}", r.job_fio);
        assert_eq!(r.job_fio.matches("[[process]]").count(), 1);
        assert_eq!(r.seed, 3);
        assert_eq!(r.system.as_ref().unwrap().stack, STACK);
    }

    /// The sweep's 400/s run of each service is, but for its name, the `vanilla` alone run of
    /// the study's seed (same duration in a full study): one system, so one result. No other
    /// two runs of the study share a system.
    #[test]
    fn the_400_per_sec_runs_are_vanilla_s_alone_runs() {
        let specs = super::super::runs(&crate::plan::Plan::new(Size::Full, 4));
        let system_of = |spec: &RunSpec| {
            let stack = sim::stack::find(&spec.system.as_ref().unwrap().stack).unwrap();
            let mut cfg = sim::system::SystemConfig::parse_with_stack(
                &spec.job_fio,
                "run",
                std::path::Path::new("."),
                Some(stack),
            )
            .unwrap();
            cfg.source.clear();
            (format!("{cfg:?}"), spec.seed)
        };
        let resolved = |id: &str| system_of(specs.iter().find(|r| r.id == id).expect(id));
        let mut distinct: Vec<_> = specs.iter().map(system_of).collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), specs.len() - ONLINE.len());
        for online in ONLINE {
            let sweep = resolved(&run_id(online, 400));
            let alone = resolved(&super::super::run_id(STACK, online, super::super::ALONE));
            assert_eq!(sweep, alone, "{online}");
            // Any other rate is another system.
            assert_ne!(resolved(&run_id(online, 450)).0, alone.0, "{online}");
        }
    }

    /// The calibration holds: each online service's knee on the papers' host lies within
    /// 300–600 requests/s (presets.md: 400/s is the knee). The full sweep (10 s per rate), so
    /// the knee is the study's; a service whose requests were the 0.3 ms of before the
    /// calibration has none below 600/s (it doubled only past 10 000/s) and fails, as does one
    /// whose compute doubled (knee near 200/s).
    #[test]
    fn each_online_profile_s_knee_is_near_400_per_sec() {
        let dir = tempfile::tempdir().unwrap();
        let specs = runs(Size::Full, 1);
        crate::exec::execute(
            dir.path(),
            &specs,
            crate::exec::ExecOptions {
                jobs: 2,
                progress: false,
            },
        )
        .unwrap();
        let results = crate::results::load(dir.path(), &specs).unwrap();
        let table = table(&results);
        for online in ONLINE {
            let k = knee_of(&results, online);
            assert!(
                k.is_some_and(|k| (300.0..=600.0).contains(&k)),
                "{online}: knee {k:?}\n{}",
                table.to_text()
            );
        }
        let f = findings(&results);
        assert!(f["knee_requests_per_sec"]["apache"].is_number(), "{f}");
    }
}
