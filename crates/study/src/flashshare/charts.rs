//! The `flashshare` study's figures (reports 1 to 4 and 6 of the study's essay): every figure
//! is drawn from the runs' `summary.json` and `timeseries.csv` as read back into
//! [`Results`], through the parent module's normalisation (medians over replicates, over
//! vanilla's) and run naming.
//!
//! - `norm-<service>` and `offline-<service>`: a point per partner, normalised to vanilla, with
//!   its replicate interval as a whisker (report 1);
//! - `cache-hit-rates`: the cache settings' read hit rates beside each partner (report 2);
//! - the `pagerank-*` series: one window per point, one line per stack (report 3);
//! - the `index-*` figures: the LC breakdown per layer, the execution-time bars, the miss rate
//!   and context switches over time (report 4);
//! - `knee`, drawn by [`super::knee`] (report 6).

use super::exectime::exec_figures;
use super::{
    both, cache_reads, cache_run_id, caption, detail, mean_all, norm_estimate, norm_mean_estimate,
    offline_categories, offline_norm, run_id, series_ms, ALONE, AVG, CACHES, CACHE_SERVICE,
    DETAIL_OFFLINE, OFFLINE, ONLINE, P99, SERIES_OFFLINE, STACKS,
};
use crate::plan::Size;
use crate::plot::{Figure, Reference, Series, Stroke};
use crate::published::{whisker, Estimate};
use crate::results::{ClassCacheReads, Results, SeriesPoint};

/// Points at x = 0, 1, … for the values present.
fn indexed(values: &[Option<f64>]) -> Vec<(f64, f64)> {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| Some((i as f64, (*v)?)))
        .collect()
}

fn solid_dashed(i: usize) -> Stroke {
    if i == 0 {
        Stroke::Solid
    } else {
        Stroke::Dashed
    }
}

pub fn figures(results: &Results, size: Size, seed: u64) -> Vec<Figure> {
    let mut figs = Vec::new();
    for online in ONLINE {
        figs.push(norm_figure(results, size, seed, online));
    }
    for online in ONLINE {
        figs.push(offline_figure(results, size, seed, online));
    }
    figs.push(cache_figure(results, size, seed));
    figs.extend(pagerank_figures(results, size, seed));
    figs.extend(index_figures(results, size, seed));
    figs.extend(exec_figures(results, size, seed));
    figs.push(super::knee::figure(results, size, seed));
    figs
}

/// Report 1: the service's average and p99, normalised to vanilla, per partner and the mean.
pub(super) fn norm_figure(results: &Results, size: Size, seed: u64, online: &str) -> Figure {
    let mut series = Vec::new();
    for (c, stack) in STACKS.iter().enumerate() {
        for (k, (stat, of)) in [("avg", AVG), ("p99", P99)].into_iter().enumerate() {
            let estimates: Vec<Option<Estimate>> = OFFLINE
                .iter()
                .chain(std::iter::once(&ALONE))
                .map(|partner| norm_estimate(results, stack, online, partner, of))
                .chain(std::iter::once(norm_mean_estimate(
                    results, stack, online, of,
                )))
                .collect();
            let values: Vec<Option<f64>> = estimates.iter().map(|e| e.map(|e| e.value)).collect();
            let whiskers: Vec<(f64, f64)> = estimates.iter().flatten().map(whisker).collect();
            let intervals = whiskers.iter().any(|w| !w.0.is_nan()).then_some(whiskers);
            series.push(Series {
                name: format!("{stack} {stat}"),
                intervals,
                points: indexed(&values),
                stroke: solid_dashed(k),
                colour: c,
            });
        }
    }
    Figure {
        stem: format!("norm-{online}"),
        title: format!("{online}: response time normalised to vanilla"),
        caption: format!(
            "Average (filled) and p99 (outlined) response time of {online} under each stack over \
             the same under vanilla, co-run with each offline job, alone, and the mean over the \
             ten co-runs. {}",
            caption(size, seed)
        ),
        x_label: "co-runner".into(),
        y_label: "response time / vanilla".into(),
        x_log: false,
        y_log: false,
        x_categories: offline_categories(&[ALONE, "mean"]),
        references: vec![Reference::baseline("vanilla")],
        series,
        ..Default::default()
    }
}

/// Report 1: the offline jobs' instruction rate, normalised to vanilla.
fn offline_figure(results: &Results, size: Size, seed: u64, online: &str) -> Figure {
    let series = STACKS
        .iter()
        .enumerate()
        .map(|(c, stack)| {
            let mut values = offline_norm(results, stack, online);
            values.push(mean_all(&values));
            Series {
                name: stack.to_string(),
                points: indexed(&values),
                stroke: Stroke::Solid,
                colour: c,
                ..Default::default()
            }
        })
        .collect();
    Figure {
        stem: format!("offline-{online}"),
        title: format!("offline jobs co-run with {online}: performance normalised to vanilla"),
        caption: format!(
            "Instructions per second of each offline job under each stack over the same under \
             vanilla, co-run with {online}; the last group is the mean. {}",
            caption(size, seed)
        ),
        x_label: "offline job".into(),
        y_label: "instructions/s / vanilla".into(),
        x_log: false,
        y_log: false,
        x_categories: offline_categories(&["mean"]),
        references: vec![Reference::baseline("vanilla")],
        series,
        ..Default::default()
    }
}

/// A line of the sensitivity figure: its name, the cache setting it reads, and its hit rate.
type CacheLine = (
    String,
    &'static str,
    fn(&[ClassCacheReads; 2]) -> Option<f64>,
);

/// The sensitivity figure's lines: each uni cache over both classes, the split's partitions.
fn cache_lines() -> Vec<CacheLine> {
    let mut lines: Vec<CacheLine> = Vec::new();
    for (cache, _) in CACHES.iter().take(3) {
        lines.push((cache.to_string(), cache, |c| both(c).hit_rate()));
    }
    lines.push(("split LC".into(), "split", |c| c[0].hit_rate()));
    lines.push(("split TP".into(), "split", |c| c[1].hit_rate()));
    lines
}

/// Report 2: cache read hit rates per setting, apache with each offline job.
fn cache_figure(results: &Results, size: Size, seed: u64) -> Figure {
    let series = cache_lines()
        .into_iter()
        .enumerate()
        .map(|(c, (name, cache, rate))| {
            let values: Vec<Option<f64>> = OFFLINE
                .iter()
                .map(|off| {
                    rate(&cache_reads(results, &cache_run_id(cache, off))?).map(|r| 100.0 * r)
                })
                .collect();
            Series {
                name,
                points: indexed(&values),
                stroke: if cache == "split" {
                    Stroke::Dashed
                } else {
                    Stroke::Solid
                },
                colour: c,
                ..Default::default()
            }
        })
        .collect();
    Figure {
        stem: "cache-hit-rates".into(),
        title: format!("device cache read hit rate, {CACHE_SERVICE} with each offline job"),
        caption: format!(
            "Read hit rate of the device DRAM cache: uni-no (no prefetch), uni-128 (128 pages \
             after every miss), uni-dyn (ghost-chosen prefetch) over both classes; the split \
             cache's (dynamic ways, ghost prefetch per partition) LC and throughput partitions. \
             Read-ahead off in all four; vanilla host with the class passed to the device. {}",
            caption(size, seed)
        ),
        x_label: "offline job (co-run with apache)".into(),
        y_label: "read hit rate (%)".into(),
        x_log: false,
        y_log: false,
        x_categories: offline_categories(&[]),
        series,
        ..Default::default()
    }
}

fn series_of<'a>(results: &'a Results, stack: &str, offline: &str) -> &'a [SeriesPoint] {
    results
        .get(&run_id(stack, CACHE_SERVICE, offline))
        .and_then(|r| r.system.as_ref())
        .map_or(&[], |s| s.series.as_slice())
}

/// Every stack's series for the detail pair, one per class: the latency-critical class (0) solid
/// and suffixed " LC", the throughput class (1) dashed and suffixed " TP"; `y(class)` reads a
/// point's value for that class.
fn by_class<F>(results: &Results, y: impl Fn(usize) -> F) -> Vec<Series>
where
    F: Fn(&SeriesPoint) -> Option<f64>,
{
    [
        over_time(results, DETAIL_OFFLINE, &STACKS, Stroke::Solid, " LC", y(0)),
        over_time(
            results,
            DETAIL_OFFLINE,
            &STACKS,
            Stroke::Dashed,
            " TP",
            y(1),
        ),
    ]
    .concat()
}

/// One line per stack of `y` over time in the `offline` co-run (points where `y` is `None`
/// are left out).
fn over_time(
    results: &Results,
    offline: &str,
    stacks: &[&str],
    stroke: Stroke,
    suffix: &str,
    y: impl Fn(&SeriesPoint) -> Option<f64>,
) -> Vec<Series> {
    stacks
        .iter()
        .map(|stack| Series {
            name: format!("{stack}{suffix}"),
            points: series_of(results, stack, offline)
                .iter()
                .filter_map(|p| Some((p.t_end_ms / 1e3, y(p)?)))
                .collect(),
            stroke,
            colour: STACKS.iter().position(|s| s == stack).unwrap_or(0),
            ..Default::default()
        })
        .collect()
}

fn time_figure(
    stem: &str,
    title: String,
    caption: String,
    y_label: &str,
    series: Vec<Series>,
) -> Figure {
    Figure {
        stem: stem.into(),
        title,
        caption,
        x_label: "time (s)".into(),
        y_label: y_label.into(),
        x_log: false,
        y_log: false,
        x_categories: vec![],
        series,
        ..Default::default()
    }
}

/// Report 3: apache + pagerank over time.
fn pagerank_figures(results: &Results, size: Size, seed: u64) -> Vec<Figure> {
    let window = series_ms(size);
    let run = format!("{CACHE_SERVICE} + {SERIES_OFFLINE}");
    let split: Vec<&str> = STACKS[1..].to_vec();
    vec![
        time_figure(
            "pagerank-tp-share",
            format!("{run}: throughput partition's share of the cache"),
            format!(
                "Ways of every set the throughput class may fill over all ways, at the end of \
                 each {window} ms window, under the stacks that split the cache (vanilla's cache \
                 is shared). {}",
                caption(size, seed)
            ),
            "throughput ways / all ways (%)",
            over_time(results, SERIES_OFFLINE, &split, Stroke::Solid, "", |p| {
                let total = p.cache_ways[0] + p.cache_ways[1];
                (total > 0).then(|| 100.0 * p.cache_ways[1] as f64 / total as f64)
            }),
        ),
        time_figure(
            "pagerank-apache-response",
            format!("{run}: apache's response time over time"),
            format!(
                "Mean (solid) and p99 (dashed) response time (client issue to reply received) of \
                 apache's requests answered in each {window} ms window (about {} per window; \
                 windows without one are left out). {}",
                window * 400 / 1000,
                caption(size, seed)
            ),
            "response time (µs)",
            [
                over_time(
                    results,
                    SERIES_OFFLINE,
                    &STACKS,
                    Stroke::Solid,
                    " mean",
                    |p| (p.online_requests > 0).then(|| p.online_resp_mean_ns as f64 / 1e3),
                ),
                over_time(
                    results,
                    SERIES_OFFLINE,
                    &STACKS,
                    Stroke::Dashed,
                    " p99",
                    |p| (p.online_requests > 0).then(|| p.online_resp_p99_ns as f64 / 1e3),
                ),
            ]
            .concat(),
        ),
        time_figure(
            "pagerank-io-rate",
            format!("{run}: pagerank's I/O rate over time"),
            format!(
                "pagerank's read/write calls completed per second in each {window} ms window \
                 (the throughput class: pagerank is the run's only throughput process). {}",
                caption(size, seed)
            ),
            "pagerank I/Os per second",
            over_time(results, SERIES_OFFLINE, &STACKS, Stroke::Solid, "", |p| {
                Some(p.tp_iops)
            }),
        ),
    ]
}

/// A layer of the LC breakdown: its short name and its mean time per request.
type Layer = (&'static str, fn(&host::Breakdown) -> u64);

/// The layers of the LC breakdown, in path order.
const LAYERS: [Layer; 9] = [
    ("sw q", |b| b.software_queue),
    ("hw q", |b| b.hardware_queue),
    ("driver", |b| b.driver),
    ("dev q", |b| b.device_queue),
    ("dev serv", |b| b.device_service),
    ("irq", |b| b.irq),
    ("poll", |b| b.poll),
    ("ctx sw", |b| b.context_switch),
    ("blk compl", |b| b.blk_complete),
];

/// Report 4: apache + index.
fn index_figures(results: &Results, size: Size, seed: u64) -> Vec<Figure> {
    let window = series_ms(size);
    let run = format!("{CACHE_SERVICE} + {DETAIL_OFFLINE}");
    let breakdown = STACKS
        .iter()
        .enumerate()
        .map(|(c, stack)| Series {
            name: stack.to_string(),
            points: detail(results, stack).map_or_else(Vec::new, |h| {
                LAYERS
                    .iter()
                    .enumerate()
                    .map(|(i, (_, of))| (i as f64, of(&h.breakdown_lc_ns) as f64 / 1e3))
                    .collect()
            }),
            stroke: Stroke::Solid,
            colour: c,
            ..Default::default()
        })
        .collect();
    let miss_rate = |class: usize| {
        move |p: &SeriesPoint| {
            let c = p.cache[class];
            c.hit_rate().map(|h| 100.0 * (1.0 - h))
        }
    };
    vec![
        Figure {
            stem: "index-breakdown".into(),
            title: format!("{run}: latency-critical I/O time by layer"),
            caption: format!(
                "Mean time per latency-critical (apache) block request in each layer: software \
                 and hardware queues (sw q, hw q), driver, device queueing (dev q: beyond the \
                 fastest device time seen for the same direction and size) and service (dev \
                 serv: that fastest time), interrupt, polling, context switch (ctx sw), \
                 block-layer completion (blk compl). {}",
                caption(size, seed)
            ),
            x_label: "layer".into(),
            y_label: "mean time per request (µs)".into(),
            x_log: false,
            y_log: false,
            x_categories: LAYERS.iter().map(|l| l.0.to_string()).collect(),
            series: breakdown,
            ..Default::default()
        },
        time_figure(
            "index-miss-rate",
            format!("{run}: device cache read miss rate over time"),
            format!(
                "Read misses over lookups of the device cache in each {window} ms window, apache's \
                 (LC, solid) and index's (throughput, dashed) reads; vanilla passes no class, so \
                 all its reads count as throughput. Windows without a lookup of the class are \
                 left out. {}",
                caption(size, seed)
            ),
            "read miss rate (%)",
            by_class(results, miss_rate),
        ),
        time_figure(
            "index-context-switches",
            format!("{run}: context switches over time"),
            format!(
                "Context switches per second on the 8 cores in each {window} ms window, by the \
                 class of the thread switched in: apache's threads (LC, solid) and index's and \
                 the kernel's (throughput, dashed). {}",
                caption(size, seed)
            ),
            "context switches per second",
            by_class(results, |class| {
                move |p: &SeriesPoint| Some(p.context_switches[class] as f64 * 1e3 / window as f64)
            }),
        ),
    ]
}
