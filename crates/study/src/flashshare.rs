//! The `flashshare` study: latency classes across the stack (experiments.md, `flashshare`).
//!
//! Host `arm8` (8 cores, 2 GB), device `zssd` (Z-NAND, 1.5 GB DRAM cache). Each of the three
//! online services (`apache`, `apache-update`, `imageserver`; latency-critical, 400 requests/s)
//! co-runs with each of the ten offline jobs (throughput class, presets.md), and runs alone as
//! the reference, for [`FULL_MS`] of simulated time ([`QUICK_MS`] with `--quick`), under each
//! named stack of the FlashShare family (`sim::stack`), each adding to the one before:
//!
//! | stack | adds |
//! | --- | --- |
//! | `vanilla` | nothing: one SQ/CQ per core, interrupts, shared cache, fixed prefetch |
//! | `cacheopt` | the class reaches the device; cache split by class, ghost prefetch |
//! | `kernelopt` | + block-layer bypass for LC I/O, a strict-priority LC SQ per core |
//! | `selectisr` | + selective completion (LC polled, the rest interrupts) |
//! | `xler` | + the queue accelerator (CAM merge, hardware CQ polling, interrupt to the driver) |
//! | `dedcore` | `selectisr` with a core dedicated to polling |
//!
//! The cache sensitivity runs are not stacks but device settings, written into the run's
//! system file, each with `readahead_units = 0` so only the setting under test prefetches:
//!
//! | cache | `[device.cache]` |
//! | --- | --- |
//! | `uni-no` | `prefetch = "fixed"`, `prefetch_pages = 0` |
//! | `uni-128` | `prefetch_pages = 128` |
//! | `uni-dyn` | `prefetch = "ghost"` |
//! | `split` | `partition = "dynamic"`, `prefetch = "ghost"` |
//!
//! `apache` co-runs with each offline job under each, on the `vanilla` stack with `[host]
//! attr = "on"`: the split needs the class in the command, and with it every cache counts its
//! reads by class. On a shared cache the class changes nothing but that count (and that the
//! block layer merges no request across classes).
//!
//! ## Durations, and what they mean for the tails
//! A service serves about 400 requests per simulated second; the p99 of `n` requests is their
//! `n/100`-th slowest, so a [`FULL_MS`] run (10 s, about 4 000 requests) puts 40 requests above
//! its p99. Which request that is varies from sample to sample by about ±6 ranks
//! (√(4000 × 0.01 × 0.99)), so one run's p99 is, in effect, the 0.9885–0.9915 quantile; the
//! mean is much tighter. The p99.9 (4 requests above it) is not reported. `--quick`
//! ([`QUICK_MS`], about 100 requests) puts one request above its p99: nearly the maximum, for
//! tests only.
//!
//! ## Replicates
//! A full study runs each stack comparison (service, partner, stack) [`REPLICATES`] times by
//! default (`--replicates N`), with seeds `seed`, `seed + 1`, …, and normalises the median of
//! a statistic over them to the median of the same over vanilla's (the "every pair" table's
//! vanilla column gives those medians); each normalised point and mean carries a 95 %
//! bootstrap interval over the replicates (and, for a mean, the pairs: `crate::published`).
//! One run's p99 is not a measurement of a stack: apache's tail beside a CPU-bound partner is
//! bimodal, most requests near 0.3 ms and a few held a CFS slice (a woken thread preempts only
//! if it lags the running one by `wakeup_granularity`; else it waits out the other's slice),
//! and whether more than 1 % of a run's requests are held flips with the seed; the median
//! needs a flip in most replicates of a comparison to move, and the interval shows how far the
//! flips reach. Single-run figures (the time series, the apache + index breakdowns) read
//! replicate 0 (the study's seed); the cache sensitivity runs run once. `--quick` runs one
//! replicate. The durations ([`FULL_MS`], [`QUICK_MS`]) set the cost: 1,030 runs at five
//! replicates (`ullstack study list`).

//! ## Reports
//! 1. Online average and p99 response time normalised to `vanilla`, per pair and the mean over
//!    the ten co-runs, one figure per service (`norm-<service>`); offline job performance
//!    (instructions per second) normalised to `vanilla` (`offline-<service>`). The headline
//!    table gives the means.
//! 2. Cache sensitivity: read hit rates of `uni-no`, `uni-128`, `uni-dyn` (both classes) and the
//!    split cache's LC and throughput partitions, apache with each offline job
//!    (`cache-hit-rates`; the per-class rates in the table `cache sensitivity`).
//! 3. `apache` + `pagerank` over time: the throughput partition's share of the cache's ways
//!    (`pagerank-tp-share`), apache's response time, mean and p99 of the requests answered in
//!    each window (`pagerank-apache-response`), and pagerank's I/O rate (`pagerank-io-rate`).
//! 4. `apache` + `index`: the execution-time breakdown — apache's mean response time split
//!    into network, wait for a worker, compute, kernel work by layer, switches, polling, CPU
//!    wait and I/O wait (`index-exec-apache`), and index's threads' time split the same way
//!    (`index-exec-index`), both as stacked bars per stack normalised to vanilla's total as the
//!    published figure is (the table "execution time" gives every part); LC I/O mean time per
//!    layer (`index-breakdown`), NVMe commands, interrupts, polls and context switches (table),
//!    CPU time by category for the LC class (table), the device cache's miss rate over time
//!    (`index-miss-rate`) and context switches over time by class (`index-context-switches`).
//! 5. Replicate spread (table): per service and stack, how many pairs' replicate p99s differ
//!    by more than [`SPREAD_FLAG`]× and the widest ratio, so a reader sees where a median
//!    still rests on luck.
//! 6. Load-latency sweep: each online service alone under `vanilla` at 50–600 requests/s, its
//!    mean and p99 against the rate (`knee`) and its knee, the rate at which the mean doubles
//!    its low-load value (table "Load-latency sweep"; `study.json`'s
//!    `findings.knee_requests_per_sec`). presets.md runs the services at 400/s as their knee;
//!    `knee`'s essay defines it and says what is calibrated to it.
//!
//! ## The execution-time breakdown (report 4)
//! In `exectime`'s essay: which spans of `summary.json` make each part of the bars, and why
//! apache's bar is its mean response time and index's its threads' lives.
//!
//! Nothing here is tuned: every stack runs the presets with only its own switches changed, and
//! every figure is read back from the runs' `summary.json` and `timeseries.csv`.

mod exectime;
pub mod knee;

use exectime::{exec_figures, exec_table};
pub use exectime::{ExecOf, ExecPart, EXEC_PARTS};

use crate::plot::{Figure, Reference, Series, Stroke};
use crate::published::{paired_ratio, ratio_cell, whisker, Estimate, Pair};
use crate::report::Table;
use crate::results::{ClassCacheReads, ProcessHeadline, Results, SeriesPoint};
use crate::spec::{RunSpec, SystemFile, SystemRun};
use crate::Size;

use engine::time::format_ns;

pub const HOST: &str = "arm8";
pub const DEVICE: &str = "zssd";
/// The latency-critical online services.
pub const ONLINE: [&str; 3] = ["apache", "apache-update", "imageserver"];
/// The offline jobs each service co-runs with.
pub const OFFLINE: [&str; 10] = [
    "bfs", "gp-gnu", "gp", "gzip", "index", "kmeans", "pagerank", "ungzip", "wc-gnu", "wc",
];
/// The partner of a service's reference run.
pub const ALONE: &str = "alone";
/// The stacks compared, each adding to the one before (`dedcore` beside `selectisr`).
pub const STACKS: [&str; 6] = [
    "vanilla",
    "cacheopt",
    "kernelopt",
    "selectisr",
    "xler",
    "dedcore",
];
/// The cache settings of the sensitivity runs and their `[device.cache]` keys.
pub const CACHES: [(&str, &str); 4] = [
    (
        "uni-no",
        "prefetch = \"fixed\"\nprefetch_pages = 0\nreadahead_units = 0\n",
    ),
    ("uni-128", "prefetch_pages = 128\nreadahead_units = 0\n"),
    ("uni-dyn", "prefetch = \"ghost\"\nreadahead_units = 0\n"),
    (
        "split",
        "partition = \"dynamic\"\nprefetch = \"ghost\"\nreadahead_units = 0\n",
    ),
];
/// The service of the cache sensitivity runs and of the detailed co-runs.
pub const CACHE_SERVICE: &str = "apache";
/// The co-run whose cache share, latency and I/O rate are followed over time.
pub const SERIES_OFFLINE: &str = "pagerank";
/// The co-run broken down by layer.
pub const DETAIL_OFFLINE: &str = "index";
/// Simulated time of each run (see "Durations" in the essay).
pub const FULL_MS: u64 = 10_000;
/// Simulated time of each `--quick` run.
pub const QUICK_MS: u64 = 250;
/// Window of the time series, ms: 75 windows over a full run.
pub const SERIES_MS: u64 = 200;
/// Window of the time series with `--quick`, ms: 25 windows.
pub const QUICK_SERIES_MS: u64 = 10;
/// Runs of each stack comparison (service, partner, stack) in a full study by default, with
/// seeds `seed`, `seed + 1`, …: the normalised figures are over their medians (see "Replicates"
/// in the essay); `--replicates N` sets another count.
pub const REPLICATES: u64 = crate::DEFAULT_REPLICATES;

/// Runs of each stack comparison by default: [`REPLICATES`], one with `--quick`.
pub fn replicates(size: Size) -> u64 {
    crate::Plan::new(size, 1).replicates
}

fn duration_ms(size: Size) -> u64 {
    match size {
        Size::Quick => QUICK_MS,
        Size::Full => FULL_MS,
    }
}

fn series_ms(size: Size) -> u64 {
    match size {
        Size::Quick => QUICK_SERIES_MS,
        Size::Full => SERIES_MS,
    }
}

/// Id of the run of `online` with `partner` (an offline job or [`ALONE`]) under `stack`, with
/// the study's seed: the run every single-run figure (time series, breakdowns) reads.
pub fn run_id(stack: &str, online: &str, partner: &str) -> String {
    format!("{stack}-{online}-{partner}")
}

/// Id of replicate `r` of that run (seed + `r`); replicate 0 is [`run_id`].
pub fn replicate_id(stack: &str, online: &str, partner: &str, r: u64) -> String {
    match r {
        0 => run_id(stack, online, partner),
        r => format!("{}-r{r}", run_id(stack, online, partner)),
    }
}

/// Id of the cache sensitivity run of [`CACHE_SERVICE`] with `offline` under cache `cache`.
pub fn cache_run_id(cache: &str, offline: &str) -> String {
    format!("cache-{cache}-{CACHE_SERVICE}-{offline}")
}

/// The system file of one run (the stack is applied by the run, not written here).
fn system_toml(
    online: &str,
    partner: &str,
    seed: u64,
    duration_ms: u64,
    cache_keys: Option<&str>,
) -> String {
    let mut file = SystemFile::new(seed, duration_ms, HOST);
    if cache_keys.is_some() {
        file = file.key("attr = \"on\"");
    }
    file = file.device(DEVICE);
    if let Some(keys) = cache_keys {
        file = file.table("device.cache").raw(keys);
    }
    file = file.process(online);
    if partner != ALONE {
        file = file.process(partner);
    }
    file.finish()
}

fn partners() -> impl Iterator<Item = &'static str> {
    OFFLINE.iter().copied().chain(std::iter::once(ALONE))
}

/// Every run of the study, in a fixed order: the stack comparison, then the cache sensitivity.
pub fn runs(plan: &crate::Plan) -> Vec<RunSpec> {
    let (size, seed) = (plan.size, plan.seed);
    let system = |id: String, text: String, stack: &str, series: bool, seed: u64| RunSpec {
        device_keys: String::new(),
        id,
        device: DEVICE.to_string(),
        host: HOST.to_string(),
        job_fio: text,
        seed,
        system: Some(SystemRun {
            stack: stack.to_string(),
            series_ms: if series { series_ms(size) } else { 0 },
        }),
    };
    let mut out = Vec::new();
    for r in 0..plan.replicates {
        for stack in STACKS {
            for online in ONLINE {
                for partner in partners() {
                    let series = r == 0
                        && online == CACHE_SERVICE
                        && (partner == SERIES_OFFLINE || partner == DETAIL_OFFLINE);
                    out.push(system(
                        replicate_id(stack, online, partner, r),
                        system_toml(online, partner, seed + r, duration_ms(size), None),
                        stack,
                        series,
                        seed + r,
                    ));
                }
            }
        }
    }
    for (cache, keys) in CACHES {
        for offline in OFFLINE {
            out.push(system(
                cache_run_id(cache, offline),
                system_toml(CACHE_SERVICE, offline, seed, duration_ms(size), Some(keys)),
                "vanilla",
                false,
                seed,
            ));
        }
    }
    out.extend(knee::runs(size, seed));
    out
}

fn process<'a>(results: &'a Results, id: &str, name: &str) -> Option<&'a ProcessHeadline> {
    results
        .get(id)?
        .system
        .as_ref()?
        .processes
        .iter()
        .find(|p| p.name == name)
}

/// The median of a statistic over the replicates of a stack run (the values
/// [`replicate_values`] reads: replicate 0 must be there, the later ones are read up to the
/// first missing, so a `--quick` study, with one, reads one). The median, not the mean: one
/// replicate whose tail flipped (see "Replicates" in the essay) would still move a mean of
/// p99s by a share of the flip.
fn median(values: Vec<f64>) -> Option<f64> {
    crate::published::median(&values)
}

/// A statistic of a process in each replicate of a stack run, in replicate order, up to the
/// first missing replicate; `None` if a present replicate lacks the statistic.
fn replicate_values(
    results: &Results,
    stack: &str,
    online: &str,
    partner: &str,
    name: &str,
    of: impl Fn(&ProcessHeadline) -> Option<f64>,
) -> Option<Vec<f64>> {
    let mut values = Vec::new();
    for r in 0.. {
        let Some(p) = process(results, &replicate_id(stack, online, partner, r), name) else {
            break;
        };
        values.push(of(p)?);
    }
    Some(values)
}

/// Replicate p99s that differ by more than this factor (largest / smallest) are flagged in the
/// spread table: one run's p99 then says little about the stack.
pub const SPREAD_FLAG: f64 = 2.0;

/// A statistic of a process of a stack run over the same under `vanilla`, each the median over
/// the replicates.
fn normalised(
    results: &Results,
    stack: &str,
    online: &str,
    partner: &str,
    name: &str,
    of: impl Fn(&ProcessHeadline) -> Option<f64>,
) -> Option<f64> {
    let base = median(replicate_values(
        results, "vanilla", online, partner, name, &of,
    )?)?;
    let v = median(replicate_values(
        results, stack, online, partner, name, &of,
    )?)?;
    (base > 0.0).then(|| v / base)
}

/// The pair (this stack's values of `of`, vanilla's) of a service with a partner, per
/// replicate: what [`normalised`] and the intervals read.
fn stack_pair(
    results: &Results,
    stack: &str,
    online: &str,
    partner: &str,
    name: &str,
    of: Stat,
) -> Option<Pair> {
    let arm = replicate_values(results, stack, online, partner, name, of)?;
    let base = replicate_values(results, "vanilla", online, partner, name, of)?;
    let n = arm.len().min(base.len());
    (n > 0).then(|| Pair {
        arm: arm[..n].to_vec(),
        base: base[..n].to_vec(),
    })
}

/// A service's statistic under `stack` over vanilla's with `partner`, with its interval over
/// the replicates.
fn norm_estimate(
    results: &Results,
    stack: &str,
    online: &str,
    partner: &str,
    of: Stat,
) -> Option<Estimate> {
    let p = stack_pair(results, stack, online, partner, online, of)?;
    paired_ratio(&[p], &format!("flashshare/{stack}/{online}/{partner}"))
}

/// The mean over the ten co-runs of a service's normalised statistic, with its interval
/// (resampling co-runs and replicates); `None` unless every co-run has runs.
fn norm_mean_estimate(results: &Results, stack: &str, online: &str, of: Stat) -> Option<Estimate> {
    let pairs: Option<Vec<Pair>> = OFFLINE
        .iter()
        .map(|off| stack_pair(results, stack, online, off, online, of))
        .collect();
    paired_ratio(&pairs?, &format!("flashshare/{stack}/{online}/mean"))
}

type Stat = fn(&ProcessHeadline) -> Option<f64>;
const AVG: Stat = |p| p.response_mean_ns.map(|v| v as f64);
const P99: Stat = |p| p.response_p99_ns.map(|v| v as f64);
const IPS: Stat = |p| p.instructions_per_sec;

/// The offline job's instruction rate normalised to vanilla, per job, co-run with `online`.
fn offline_norm(results: &Results, stack: &str, online: &str) -> Vec<Option<f64>> {
    OFFLINE
        .iter()
        .map(|off| normalised(results, stack, online, off, off, IPS))
        .collect()
}

/// Mean of the values, only when every one is there.
fn mean_all(values: &[Option<f64>]) -> Option<f64> {
    let v: Option<Vec<f64>> = values.iter().copied().collect();
    let v = v?;
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn caption(size: Size, seed: u64) -> String {
    let quick = match size {
        Size::Quick => format!(
            " --quick: {QUICK_MS} ms per run, about 100 requests: the p99 is nearly the maximum; \
             the full study runs {FULL_MS} ms."
        ),
        Size::Full => String::new(),
    };
    let seeds = match replicates(size) {
        1 => format!("seed {seed}"),
        n => format!(
            "each stack comparison the median of {n} runs (seeds {seed}..={})",
            seed + n - 1
        ),
    };
    format!(
        "Host {HOST}, device {DEVICE}, {} ms simulated per run (about {} requests per service), \
         {seeds}, {} study.{quick}",
        duration_ms(size),
        duration_ms(size) * 400 / 1000,
        size.as_str()
    )
}

fn offline_categories(extra: &[&str]) -> Vec<String> {
    OFFLINE.iter().chain(extra).map(|s| s.to_string()).collect()
}

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
    figs.push(knee::figure(results, size, seed));
    figs
}

/// Report 1: the service's average and p99, normalised to vanilla, per partner and the mean.
fn norm_figure(results: &Results, size: Size, seed: u64, online: &str) -> Figure {
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

/// Device cache reads of a run: (LC, throughput).
fn cache_reads(results: &Results, id: &str) -> Option<[ClassCacheReads; 2]> {
    Some(results.get(id)?.system.as_ref()?.host.cache)
}

fn both(c: &[ClassCacheReads; 2]) -> ClassCacheReads {
    ClassCacheReads {
        read_hits: c[0].read_hits + c[1].read_hits,
        read_misses: c[0].read_misses + c[1].read_misses,
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

fn detail<'a>(results: &'a Results, stack: &str) -> Option<&'a crate::results::HostHeadline> {
    Some(
        &results
            .get(&run_id(stack, CACHE_SERVICE, DETAIL_OFFLINE))?
            .system
            .as_ref()?
            .host,
    )
}

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
            [
                over_time(
                    results,
                    DETAIL_OFFLINE,
                    &STACKS,
                    Stroke::Solid,
                    " LC",
                    miss_rate(0),
                ),
                over_time(
                    results,
                    DETAIL_OFFLINE,
                    &STACKS,
                    Stroke::Dashed,
                    " TP",
                    miss_rate(1),
                ),
            ]
            .concat(),
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
            [
                over_time(
                    results,
                    DETAIL_OFFLINE,
                    &STACKS,
                    Stroke::Solid,
                    " LC",
                    move |p| Some(p.context_switches[0] as f64 * 1e3 / window as f64),
                ),
                over_time(
                    results,
                    DETAIL_OFFLINE,
                    &STACKS,
                    Stroke::Dashed,
                    " TP",
                    move |p| Some(p.context_switches[1] as f64 * 1e3 / window as f64),
                ),
            ]
            .concat(),
        ),
    ]
}

fn cell(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

fn stack_header(first: &str) -> Vec<String> {
    std::iter::once(first.to_string())
        .chain(STACKS.iter().map(|s| s.to_string()))
        .collect()
}

/// The headline table: per service, the mean over the ten co-runs of its average and p99
/// normalised to vanilla, and of its co-runners' performance; stacks across.
pub fn headline(results: &Results) -> Table {
    let mut t = Table {
        header: stack_header("mean over 10 co-runs, / vanilla"),
        rows: vec![],
    };
    for online in ONLINE {
        for (stat, of) in [("avg", AVG), ("p99", P99)] {
            let mut row = vec![format!("{online} {stat}")];
            row.extend(STACKS.iter().map(|s| {
                norm_mean_estimate(results, s, online, of).map_or("-".into(), |e| ratio_cell(&e))
            }));
            t.rows.push(row);
        }
        let mut row = vec![format!("offline jobs with {online}: instr/s")];
        row.extend(
            STACKS
                .iter()
                .map(|s| cell(mean_all(&offline_norm(results, s, online)))),
        );
        t.rows.push(row);
    }
    t
}

/// The tables below the headline: every pair, the cache sensitivity, the apache + index detail.
pub fn tables(results: &Results) -> Vec<(String, Table)> {
    vec![
        (
            "Every pair: avg / p99 response time normalised to vanilla (vanilla's own in brackets)"
                .into(),
            pairs_table(results),
        ),
        (
            format!(
                "Replicate spread: pairs whose replicates' p99s differ by more than \
                 {SPREAD_FLAG}x, of those replicated, and the widest ratio"
            ),
            spread_table(results),
        ),
        (
            format!("Cache sensitivity: read hit rate (%) by class, {CACHE_SERVICE} with each offline job"),
            cache_table(results),
        ),
        (
            format!(
                "{CACHE_SERVICE} + {DETAIL_OFFLINE}: execution time — {CACHE_SERVICE}'s mean \
                 response time and {DETAIL_OFFLINE}'s threads' time by part, over vanilla's total"
            ),
            exec_table(results),
        ),
        (
            format!("{CACHE_SERVICE} + {DETAIL_OFFLINE}: NVMe commands, completions and context switches"),
            nvme_table(results),
        ),
        (
            format!(
                "{CACHE_SERVICE} + {DETAIL_OFFLINE}: CPU seconds by category done for the \
                 latency-critical class (its threads and its I/O's interrupt work)"
            ),
            cpu_table(results),
        ),
        (knee::table_title(), knee::table(results)),
    ]
}

/// `study.json`'s `findings`: the online services' knees (report 6).
pub fn findings(results: &Results) -> Option<serde_json::Value> {
    Some(knee::findings(results))
}

fn pairs_table(results: &Results) -> Table {
    let mut t = Table {
        header: stack_header("service + co-runner"),
        rows: vec![],
    };
    for online in ONLINE {
        for partner in partners() {
            let mut row = vec![format!("{online} + {partner}")];
            for stack in STACKS {
                let n = |of| normalised(results, stack, online, partner, online, of);
                let text = if stack == "vanilla" {
                    let own = |of| {
                        median(replicate_values(
                            results, stack, online, partner, online, of,
                        )?)
                    };
                    match (own(AVG), own(P99)) {
                        (Some(avg), Some(p99)) => format!(
                            "({} / {})",
                            format_ns(avg.round() as u64),
                            format_ns(p99.round() as u64)
                        ),
                        _ => "-".into(),
                    }
                } else {
                    format!("{} / {}", cell(n(AVG)), cell(n(P99)))
                };
                row.push(text);
            }
            t.rows.push(row);
        }
    }
    t
}

/// How far apart the replicates are: per service and stack, the pairs (the ten co-runs and
/// alone) whose replicates' p99s span more than [`SPREAD_FLAG`]× (largest / smallest), out of
/// those with two or more replicates, and the widest span among them ("-" without
/// replicates: `--quick`).
fn spread_table(results: &Results) -> Table {
    let mut t = Table {
        header: stack_header("service: pairs over 2x (widest)"),
        rows: vec![],
    };
    for online in ONLINE {
        let mut row = vec![online.to_string()];
        for stack in STACKS {
            let spans: Vec<f64> = partners()
                .filter_map(|partner| {
                    let v = replicate_values(results, stack, online, partner, online, P99)?;
                    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = v.iter().copied().fold(0.0, f64::max);
                    (v.len() >= 2 && lo > 0.0).then(|| hi / lo)
                })
                .collect();
            row.push(if spans.is_empty() {
                "-".into()
            } else {
                let over = spans.iter().filter(|&&x| x > SPREAD_FLAG).count();
                let widest = spans.iter().copied().fold(0.0, f64::max);
                format!("{over} / {} ({widest:.1})", spans.len())
            });
        }
        t.rows.push(row);
    }
    t
}

fn cache_table(results: &Results) -> Table {
    let mut t = Table {
        header: std::iter::once("offline job".to_string())
            .chain(
                CACHES
                    .iter()
                    .flat_map(|(c, _)| [format!("{c} LC"), format!("{c} TP")]),
            )
            .collect(),
        rows: vec![],
    };
    for off in OFFLINE {
        let mut row = vec![off.to_string()];
        for (cache, _) in CACHES {
            let c = cache_reads(results, &cache_run_id(cache, off));
            for class in 0..2 {
                row.push(cell(c.and_then(|c| c[class].hit_rate()).map(|r| 100.0 * r)));
            }
        }
        t.rows.push(row);
    }
    t
}

fn nvme_table(results: &Results) -> Table {
    type Count = fn(&crate::results::HostHeadline) -> u64;
    let rows: [(&str, Count); 7] = [
        ("NVMe commands, LC", |h| h.nvme_commands_lc),
        ("NVMe commands, throughput", |h| h.nvme_commands_tp),
        ("doorbells", |h| h.doorbells),
        ("interrupts", |h| h.interrupts),
        ("polled completions", |h| h.polled_completions),
        ("context switches", |h| h.context_switches),
        ("LC block requests", |h| h.breakdown_lc_ns.requests),
    ];
    let mut t = Table {
        header: stack_header("count over the run"),
        rows: vec![],
    };
    for (name, of) in rows {
        let mut row = vec![name.to_string()];
        row.extend(
            STACKS
                .iter()
                .map(|s| detail(results, s).map_or("-".into(), |h| of(h).to_string())),
        );
        t.rows.push(row);
    }
    t
}

fn cpu_table(results: &Results) -> Table {
    let mut t = Table {
        header: stack_header("category"),
        rows: vec![],
    };
    let cats: Vec<String> = STACKS
        .iter()
        .find_map(|s| detail(results, s))
        .map(|h| h.cpu_lc_s.keys().cloned().collect())
        .unwrap_or_default();
    for cat in cats {
        let mut row = vec![cat.clone()];
        row.extend(STACKS.iter().map(|s| {
            detail(results, s)
                .and_then(|h| h.cpu_lc_s.get(&cat))
                .map_or("-".into(), |v| format!("{v:.4}"))
        }));
        t.rows.push(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_unique_and_every_system_file_parses_under_its_stack() {
        let runs = runs(&crate::Plan::new(Size::Quick, 1));
        assert_eq!(
            runs.len(),
            STACKS.len() * ONLINE.len() * (OFFLINE.len() + 1)
                + CACHES.len() * OFFLINE.len()
                + ONLINE.len() * knee::RATES.len()
        );
        let mut ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), runs.len());
        for r in &runs {
            let sys = r.system.as_ref().unwrap();
            let stack = sim::stack::find(&sys.stack).unwrap();
            let cfg = sim::system::SystemConfig::parse_with_stack(
                &r.job_fio,
                &r.id,
                std::path::Path::new("."),
                Some(stack),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", r.id));
            assert_eq!(cfg.host.name, HOST);
            assert_eq!(cfg.device.name, DEVICE);
            let sweep = r.id.starts_with("knee-");
            let ms = if sweep { knee::QUICK_MS } else { QUICK_MS };
            assert_eq!(cfg.duration.as_ns(), ms * 1_000_000, "{}", r.id);
            let alone = sweep || r.id.ends_with(ALONE);
            assert_eq!(cfg.processes.len(), if alone { 1 } else { 2 }, "{}", r.id);
            if r.id.starts_with("cache-") {
                assert_eq!(cfg.device.cache.readahead_units, 0, "{}", r.id);
                assert_eq!(sys.stack, "vanilla");
            }
        }
        let split = runs
            .iter()
            .find(|r| r.id == cache_run_id("split", "wc"))
            .unwrap();
        let cfg = sim::system::SystemConfig::parse_with_stack(
            &split.job_fio,
            &split.id,
            std::path::Path::new("."),
            sim::stack::find("vanilla").ok(),
        )
        .unwrap();
        assert_eq!(
            cfg.device.cache.partition,
            device::config::Partition::Dynamic
        );
        let series: Vec<&str> = runs
            .iter()
            .filter(|r| r.system.as_ref().unwrap().series_ms > 0)
            .map(|r| r.id.as_str())
            .collect();
        assert_eq!(series.len(), 2 * STACKS.len(), "{series:?}");
        let full = super::runs(&crate::Plan::new(Size::Full, 1));
        assert!(full[0]
            .job_fio
            .contains(&format!("duration_ms = {FULL_MS}")));
    }

    /// A system run's result holding `processes` (everything else empty).
    pub(super) fn system_result(
        id: &str,
        stack: &str,
        processes: Vec<ProcessHeadline>,
    ) -> crate::results::RunResult {
        use crate::results::{CpuUse, DeviceHeadline, HostHeadline, SystemHeadline};
        let host = HostHeadline {
            cache: Default::default(),
            breakdown_lc_ns: Default::default(),
            nvme_commands_lc: 0,
            nvme_commands_tp: 0,
            interrupts: 0,
            polled_completions: 0,
            doorbells: 0,
            context_switches: 0,
            cpu_lc_s: Default::default(),
            writeback: Default::default(),
        };
        let device = DeviceHeadline {
            write_stalls: 0,
            write_stall_ns: 0,
            read_staging_stalls: 0,
            units_programmed: 0,
            units_wasted: 0,
            host_rows_lsb_csb_msb: None,
            max_dirty_units: 0,
            drain: None,
        };
        crate::results::RunResult {
            id: id.into(),
            config_hash: String::new(),
            device: DEVICE.into(),
            host: HOST.into(),
            job: stack.into(),
            simulated_ns: 0,
            read: None,
            write: None,
            cpu: CpuUse {
                kernel_pct: 0.0,
                user_pct: 0.0,
            },
            system: Some(SystemHeadline {
                processes,
                device,
                host,
                series: vec![],
            }),
        }
    }

    /// A process with only a response time mean and p99.
    fn responding(name: &str, mean_ns: u64, p99_ns: u64) -> ProcessHeadline {
        ProcessHeadline {
            name: name.into(),
            requests: None,
            response_mean_ns: Some(mean_ns),
            response_p95_ns: None,
            response_p99_ns: Some(p99_ns),
            instructions_per_sec: None,
            exec_time: None,
            request_time: None,
        }
    }

    #[test]
    fn a_full_study_runs_each_comparison_with_five_seeds_or_as_many_as_asked() {
        let quick = runs(&crate::Plan::new(Size::Quick, 7));
        let full = runs(&crate::Plan::new(Size::Full, 7));
        let comparisons = STACKS.len() * ONLINE.len() * (OFFLINE.len() + 1);
        assert_eq!(
            full.len() - quick.len(),
            (REPLICATES as usize - 1) * comparisons
        );
        let seeds_of = |id: &str| -> Vec<u64> {
            full.iter()
                .filter(|r| r.id == id || r.id.starts_with(&format!("{id}-r")))
                .map(|r| r.seed)
                .collect()
        };
        assert_eq!(seeds_of(&run_id("xler", "apache", "gp")), [7, 8, 9, 10, 11]);
        let three = runs(
            &crate::Plan::new(Size::Full, 7)
                .with_replicates(3)
                .expect("3 replicates"),
        );
        assert_eq!(three.len() - quick.len(), 2 * comparisons);
        assert_eq!(seeds_of(&cache_run_id("split", "gp")), [7]);
        let r2 = full
            .iter()
            .find(|r| r.id == replicate_id("vanilla", "imageserver", "wc", 2))
            .unwrap();
        assert!(r2.job_fio.starts_with("seed = 9\n"), "{}", r2.job_fio);
        // Only replicate 0 draws time series.
        let series: Vec<&str> = full
            .iter()
            .filter(|r| r.system.as_ref().is_some_and(|s| s.series_ms > 0))
            .map(|r| r.id.as_str())
            .collect();
        assert!(series.iter().all(|id| !id.contains("-r")), "{series:?}");
        let mut ids: Vec<&str> = full.iter().map(|r| r.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), full.len());
    }

    /// A stack's figure is its replicates' median over vanilla's, not replicate 0's ratio.
    #[test]
    fn normalised_figures_are_over_the_replicates_medians() {
        let results = flipped_replicates();
        let n = |of| normalised(&results, "cacheopt", "apache", "kmeans", "apache", of);
        assert_eq!(n(P99), Some(1.0), "medians 500 / 500 µs");
        assert_eq!(n(AVG), Some(1.1), "medians 330 / 300 µs");
        // Replicate 0 alone would say 4× (what one run said before replicates).
        let only_first = keep(&results, |id| !id.contains("-r"));
        let n = normalised(&only_first, "cacheopt", "apache", "kmeans", "apache", P99);
        assert_eq!(n, Some(4.0));
        // The pairs table's vanilla column gives vanilla's medians.
        let t = pairs_table(&results);
        let row = t.rows.iter().find(|r| r[0] == "apache + kmeans").unwrap();
        assert_eq!(
            row[1],
            format!("({} / {})", format_ns(300_000), format_ns(500_000))
        );
        assert_eq!(row[2], "1.10 / 1.00");
        // Two replicates: the mean of the two.
        let two = keep(&results, |id| !id.ends_with("-r2"));
        let n = normalised(&two, "cacheopt", "apache", "kmeans", "apache", P99);
        assert_eq!(n, Some(1.0), "(2000 + 500) / (500 + 2000)");
    }

    /// The spread table flags a comparison whose replicates' p99s are over 2× apart, counts
    /// only comparisons with replicates, and flags nothing within 2×.
    #[test]
    fn the_spread_table_flags_replicates_over_two_times_apart() {
        let results = flipped_replicates();
        // Both comparisons are 4× apart, each the only one replicated.
        let t = spread_table(&results);
        let row = t.rows.iter().find(|r| r[0] == "apache").unwrap();
        assert_eq!(
            (row[1].as_str(), row[2].as_str()),
            ("1 / 1 (4.0)", "1 / 1 (4.0)")
        );
        assert_eq!(row[3], "-", "kernelopt has no runs");
        // Without replicates nothing is measured.
        let t = spread_table(&keep(&results, |id| !id.contains("-r")));
        assert_eq!(t.rows[0][1], "-");
        // vanilla's flipped replicate at 900 µs instead of 2 ms: 1.8×, not flagged.
        let mut close = results.clone();
        let id = replicate_id("vanilla", "apache", "kmeans", 1);
        let p = responding("apache", 330_000, 900_000);
        close.insert(id.clone(), system_result(&id, "vanilla", vec![p]));
        let t = spread_table(&close);
        let row = t.rows.iter().find(|r| r[0] == "apache").unwrap();
        assert_eq!(row[1], "0 / 1 (1.8)");
    }

    /// apache + kmeans under vanilla and cacheopt, three replicates each: vanilla's tail flips
    /// in one seed of three, cacheopt's in another.
    fn flipped_replicates() -> Results {
        let mut results = Results::new();
        let mut add = |stack: &str, r: u64, mean_us: u64, p99_us: u64| {
            let id = replicate_id(stack, "apache", "kmeans", r);
            let p = responding("apache", mean_us * 1_000, p99_us * 1_000);
            results.insert(id.clone(), system_result(&id, stack, vec![p]));
        };
        add("vanilla", 0, 300, 500);
        add("vanilla", 1, 330, 2_000);
        add("vanilla", 2, 300, 500);
        add("cacheopt", 0, 330, 2_000);
        add("cacheopt", 1, 300, 500);
        add("cacheopt", 2, 330, 500);
        results
    }

    /// With replicates, a co-run's normalised point carries its bootstrap interval (drawn as an
    /// error bar), and a flip in one replicate of three makes that interval span 1.
    #[test]
    fn normalised_points_carry_intervals_over_the_replicates() {
        let results = flipped_replicates();
        let fig = norm_figure(&results, Size::Full, 1, "apache");
        let p99 = fig
            .series
            .iter()
            .find(|s| s.name == "cacheopt p99")
            .expect("cacheopt p99");
        let kmeans = OFFLINE.iter().position(|o| *o == "kmeans").unwrap();
        let at = p99
            .points
            .iter()
            .position(|p| p.0 == kmeans as f64)
            .unwrap();
        let (low, high) = p99.intervals.as_ref().expect("intervals")[at];
        assert!(low <= p99.points[at].1 && p99.points[at].1 <= high);
        assert!(low <= 1.0 && 1.0 <= high, "[{low}, {high}]");
        let e = norm_estimate(&results, "cacheopt", "apache", "kmeans", P99).unwrap();
        assert!(
            ratio_cell(&e).ends_with("(no effect)"),
            "{}",
            ratio_cell(&e)
        );
    }

    /// The runs of `results` whose id passes `pred`.
    fn keep(results: &Results, pred: impl Fn(&str) -> bool) -> Results {
        Results::from_iter(
            results
                .iter()
                .filter(|(id, _)| pred(id))
                .map(|(id, r)| (id.clone(), r.clone())),
        )
    }

    /// A mean over the co-runs is only drawn when every co-run is there, and missing runs leave
    /// gaps (`-` cells, absent points), never a panic or a made-up number.
    #[test]
    fn missing_runs_leave_gaps_in_every_report() {
        assert_eq!(mean_all(&[Some(1.0), Some(3.0)]), Some(2.0));
        assert_eq!(mean_all(&[Some(1.0), None]), None);
        let empty = Results::new();
        let figs = figures(&empty, Size::Quick, 1);
        assert_eq!(figs.len(), 16);
        assert!(figs
            .iter()
            .all(|f| f.series.iter().all(|s| s.points.is_empty())));
        let t = headline(&empty);
        assert_eq!(t.rows.len(), 3 * ONLINE.len());
        assert!(t.rows.iter().all(|r| r[1..].iter().all(|c| c == "-")));
        for (title, table) in tables(&empty) {
            let numbers = table.rows.iter().flat_map(|r| &r[1..]);
            for c in numbers {
                assert!(!c.chars().any(|ch| ch.is_ascii_digit()), "{title}: {c}");
            }
        }
    }
}
