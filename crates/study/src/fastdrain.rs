//! The `fastdrain` study: write-back without buffer overflow (experiments.md, `fastdrain`).
//!
//! Host `arm8-4g` (8 cores, 4 GB), device `nvme-tlc` (TLC, 512 MB write buffer), its flash
//! preconditioned (`ftl.precondition = "sequential"`: every logical page written once) and its
//! buffer flushed only when full (`cache.flush = "on-full"`, the published baseline's policy),
//! its lines given to waiting reads and writes in arrival order ([`READ_STAGING`]).
//! Each of the six write-back workloads (latency-critical online services, presets.md:
//! `apache-fetch`, `apache-upload`, `db-select`, `db-update`, `imageserver-fetch`,
//! `imageserver-upload`; derived profiles, see `workload/src/profile.rs`) co-runs with `ungzip`,
//! whose buffered writes keep the flusher's write-back waves coming, for [`FULL_MS`] of
//! simulated time ([`QUICK_MS`] with `--quick`), under each named stack (`sim::stack`):
//!
//! | stack | adds |
//! | --- | --- |
//! | `vanilla` | nothing |
//! | `fd-buf` | victimization hint + watermark foreground/background eviction |
//! | `fd-ftl` | + latency-aware FTL (urgent evictions to LSB pages across dies) |
//! | `fd` | + adaptive dirty thresholds from the buffer status in completions |
//! | `oracle` | an unbounded device buffer (upper bound) |
//! | `fd-ftl-lsb-skip` | `fd-buf` with the LSB-skipping allocator |
//!
//! `fd-buf` allocates pages in order (`ftl.alloc = "sequential"`, the default), so it is the
//! `sequential` point of the FTL comparison; running `fd-ftl-sequential` as well would repeat
//! exactly the same configuration.
//!
//! ## Reports
//! 1. p99 response time of the online service, normalised to `vanilla`, per workload and the
//!    mean over workloads (`p99-normalised`; also the headline table).
//! 2. Average and p99 response time per workload (`avg-p99`).
//! 3. `apache-upload` + `ungzip` over time: the latency-critical service's I/O latency (p99
//!    per window: the model records I/O call latency per window, not request response time)
//!    and the pages written back per window (`series-latency`, `series-flushed`).
//! 4. 4 KiB units programmed and wasted (rows skipped or left partly empty) per FTL policy,
//!    summed over the six workloads (`ftl-pages`).
//!
//! The headline table adds, per stack over its six runs, what shows which mechanism acted:
//! write stalls and reads that waited to stage in the buffer, the flusher's waves with the pages they wrote and their hints announced, the
//! drain's background and foreground waves and rows, the most units the buffer held, and the
//! dirty-threshold switches.
//!
//! Nothing here is tuned: every stack runs the presets with only its own switches changed,
//! and every figure is read back from the runs' `summary.json` and `timeseries.csv`.

pub mod outcomes;

use crate::plan::Size;
use crate::plot::{Figure, Reference, Series, Stroke, Ticks};
use crate::published::replicates::{pair, present, stat_over, P99};
use crate::published::{paired_ratio, ratio_cell, whisker, Estimate, Pair};
use crate::results::{
    DrainHeadline, ProcessHeadline, Results, RunResult, SystemHeadline, WritebackHeadline,
};
use crate::spec::{RunSpec, SystemFile, SystemRun};
use crate::table::Table;

use engine::time::format_ns;

/// The latency-critical workloads, each co-run with [`OFFLINE`].
pub const WORKLOADS: [&str; 6] = [
    "apache-fetch",
    "apache-upload",
    "db-select",
    "db-update",
    "imageserver-fetch",
    "imageserver-upload",
];
/// The write-heavy offline job behind the write-back waves.
pub const OFFLINE: &str = "ungzip";
/// The stacks compared, in the order figures and tables show them.
pub const STACKS: [&str; 6] = [
    "vanilla",
    "fd-buf",
    "fd-ftl",
    "fd",
    "oracle",
    "fd-ftl-lsb-skip",
];
/// The FTL policies compared and the stack that runs each.
pub const FTL_POLICIES: [(&str, &str); 3] = [
    ("sequential", "fd-buf"),
    ("lsb-skip", "fd-ftl-lsb-skip"),
    ("latency-aware", "fd-ftl"),
];
pub const HOST: &str = "arm8-4g";
pub const DEVICE: &str = "nvme-tlc";
/// Simulated time of each run: experiments.md's 30 s.
pub const FULL_MS: u64 = 30_000;
/// Simulated time of each `--quick` run: enough for several write-back waves, not for a
/// stable p99 (a service at 400 requests/s finishes about 400 requests).
pub const QUICK_MS: u64 = 1_000;
/// The device write buffer of a `--quick` run: an eighth of `nvme-tlc`'s 512 MiB, so that in
/// [`QUICK_MS`] ungzip's write-back overflows vanilla's buffer as it does over a full run
/// (with the whole buffer a 1 s run never fills it: 0 write stalls, and the study's question
/// does not arise). Measured with `ullstack sim --system` on the quick apache-upload run: 3,019
/// write stalls under vanilla and none under fd-buf at 64 MiB. The DRAM shrinks with it:
/// `nvme-tlc`'s whole DRAM is its write buffer, so a read miss into a full buffer waits to
/// stage, as in a full run (with 512 MiB of DRAM beside a 64 MiB buffer no read ever waited:
/// 0 `read_staging_stalls` in all 36 quick runs).
pub const QUICK_WRITE_BUFFER_BYTES: u64 = 64 << 20;
/// How the buffer's lines go to the reads and writes waiting for them (`device.cache.
/// read_staging`): in the order they began to wait, as the firmware `nvme-tlc`'s read staging
/// follows (Cosmos+ OpenSSD) allocates its buffer entries in its request loop's order. This is
/// how the baseline's overflow stall reaches the online service: a read miss that arrives
/// while a write-back wave's writes wait for the full buffer waits behind them. With reads
/// first (`buffer`, the preset's) a read took the first line any program freed (0.59 ms on
/// average in `vanilla-db-select`, seed 1, 30 s), below the TLC program a read meets on a busy
/// die, so the overflow never set the service's p99 and fd-buf, which programs more in 30 s
/// than vanilla (vanilla ends with its 512 MiB unprogrammed), came out above vanilla (mean
/// p99 / vanilla 1.06 over the six workloads, seed 1; 0.48 in arrival order). Not fitted to
/// a published figure: the choice of firmware behaviour, measured both ways (`device/src/
/// drain.rs`, "Why the hint helps").
pub const READ_STAGING: &str = "buffer-in-order";
/// Threads of the offline job in a `--quick` run: the run is 1/30 of a full one, so ungzip
/// writes at eight times its single-threaded rate (its profile runs GNU gzip's one thread) to
/// reach the dirty thresholds and the buffer's high watermark within it, as the full run does
/// in its first seconds; with one thread a quick run writes nothing back (0 waves, 0 write
/// stalls under every stack).
pub const QUICK_OFFLINE_THREADS: u32 = 8;
/// The co-run whose time series is reported.
pub const SERIES_WORKLOAD: &str = "apache-upload";
/// Window of the time series, ms (full; `--quick` uses a tenth).
pub const SERIES_MS: u64 = 200;

fn duration_ms(size: Size) -> u64 {
    match size {
        Size::Quick => QUICK_MS,
        Size::Full => FULL_MS,
    }
}

fn series_ms(size: Size) -> u64 {
    match size {
        Size::Quick => SERIES_MS / 10,
        Size::Full => SERIES_MS,
    }
}

pub fn run_id(stack: &str, workload: &str) -> String {
    format!("{stack}-{workload}")
}

/// Id of replicate `r` of that run (seed + `r`); replicate 0 is [`run_id`].
pub fn replicate_id(stack: &str, workload: &str, r: u64) -> String {
    match r {
        0 => run_id(stack, workload),
        r => format!("{}-r{r}", run_id(stack, workload)),
    }
}

/// The system file of one co-run (the stack is applied by the run, not written here).
fn system_toml(workload: &str, seed: u64, size: Size) -> String {
    let file = SystemFile::new(seed, duration_ms(size), HOST)
        .device(DEVICE)
        .table("device.cache")
        .key("flush = \"on-full\"")
        .key(&format!("read_staging = \"{READ_STAGING}\""));
    let file = match size {
        Size::Quick => file
            .key(&format!("write_buffer_bytes = {QUICK_WRITE_BUFFER_BYTES}"))
            .key(&format!("dram_bytes = {QUICK_WRITE_BUFFER_BYTES}")),
        Size::Full => file,
    };
    let file = file
        .table("device.ftl")
        .key("precondition = \"sequential\"")
        .process(workload)
        .process(OFFLINE);
    match size {
        Size::Quick => file.key(&format!("threads = {QUICK_OFFLINE_THREADS}")),
        Size::Full => file,
    }
    .finish()
}

/// Every run of the study, in a fixed order.
pub fn runs(plan: &crate::plan::Plan) -> Vec<RunSpec> {
    let (size, seed) = (plan.size, plan.seed);
    let mut out = Vec::new();
    // Replicate 0 first (every figure reads it), then the further seeds of each comparison.
    for r in 0..plan.replicates {
        let seed = plan.seed_of(r);
        for stack in STACKS {
            for workload in WORKLOADS {
                out.push(RunSpec {
                    device_keys: String::new(),
                    id: replicate_id(stack, workload, r),
                    device: DEVICE.to_string(),
                    host: HOST.to_string(),
                    job_fio: system_toml(workload, seed, size),
                    seed,
                    system: Some(SystemRun {
                        stack: stack.to_string(),
                        series_ms: if r == 0 && workload == SERIES_WORKLOAD {
                            series_ms(size)
                        } else {
                            0
                        },
                    }),
                });
            }
        }
    }
    debug_assert!(out.iter().all(|s| s.seed >= seed));
    out
}

/// The online service's entry in run `(stack, workload)`.
fn service<'a>(results: &'a Results, stack: &str, workload: &str) -> Option<&'a ProcessHeadline> {
    results
        .get(&run_id(stack, workload))?
        .system
        .as_ref()?
        .processes
        .iter()
        .find(|p| p.name == workload)
}

/// The pair (this stack's service p99s, vanilla's) of one fastdrain workload, per replicate.
pub(crate) fn fastdrain_pair(results: &Results, stack: &str, workload: &str) -> Option<Pair> {
    let arm = present(results, |r| replicate_id(stack, workload, r));
    let base = present(results, |r| replicate_id("vanilla", workload, r));
    pair(
        stat_over(&arm, workload, P99)?,
        stat_over(&base, workload, P99)?,
    )
}

/// p99 of `stack` over `vanilla`'s for `workload`: the median over the replicates present
/// over vanilla's, with its 95 % interval ([`crate::published`]; none with one replicate).
fn p99_ratio(results: &Results, stack: &str, workload: &str) -> Option<Estimate> {
    let pair = fastdrain_pair(results, stack, workload)?;
    paired_ratio(&[pair], &format!("fastdrain/{stack}/{workload}"))
}

/// The mean of [`p99_ratio`] over every workload, with its interval (resampling workloads and
/// replicates); `None` unless every workload has runs.
fn p99_ratio_mean(results: &Results, stack: &str) -> Option<Estimate> {
    let pairs: Option<Vec<Pair>> = WORKLOADS
        .iter()
        .map(|w| fastdrain_pair(results, stack, w))
        .collect();
    paired_ratio(&pairs?, &format!("fastdrain/p99.{stack}"))
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// "background / foreground" summed over the runs that have a drain ("-" when none has):
/// `pick` gives a run's pair (waves or rows).
fn drain_pair(runs: &[&SystemHeadline], pick: fn(&DrainHeadline) -> (u64, u64)) -> String {
    let pairs: Vec<(u64, u64)> = runs
        .iter()
        .filter_map(|r| r.device.drain.as_ref())
        .map(pick)
        .collect();
    if pairs.is_empty() {
        return "-".into();
    }
    let background: u64 = pairs.iter().map(|p| p.0).sum();
    let foreground: u64 = pairs.iter().map(|p| p.1).sum();
    format!("{background} / {foreground}")
}

fn caption(size: Size, seed: u64) -> String {
    let quick = match size {
        Size::Quick => format!(
            " --quick: {QUICK_MS} ms per run, a few hundred requests: the p99 is noisy; the full \
             study runs {FULL_MS} ms."
        ),
        Size::Full => String::new(),
    };
    format!(
        "Host {HOST}, device {DEVICE} (preconditioned, buffer flushed when full), each workload \
         co-run with {OFFLINE} for {} ms, seed {seed}, {} study.{quick}",
        duration_ms(size),
        size.as_str()
    )
}

fn categories_with_mean() -> Vec<String> {
    WORKLOADS
        .iter()
        .map(|w| w.to_string())
        .chain(std::iter::once("mean".to_string()))
        .collect()
}

pub fn figures(results: &Results, size: Size, seed: u64) -> Vec<Figure> {
    let mut figs = Vec::new();
    let mut series = Vec::new();
    for (c, stack) in STACKS.iter().enumerate() {
        let mut points = Vec::new();
        let mut intervals = Vec::new();
        for (i, w) in WORKLOADS.iter().enumerate() {
            if let Some(e) = p99_ratio(results, stack, w) {
                points.push((i as f64, e.value));
                intervals.push(whisker(&e));
            }
        }
        if let Some(e) = p99_ratio_mean(results, stack) {
            points.push((WORKLOADS.len() as f64, e.value));
            intervals.push(whisker(&e));
        }
        let with_whiskers = intervals.iter().any(|w| !w.0.is_nan());
        series.push(Series {
            intervals: with_whiskers.then_some(intervals),
            name: stack.to_string(),
            points,
            stroke: if *stack == "fd-ftl-lsb-skip" {
                Stroke::Dashed
            } else {
                Stroke::Solid
            },
            colour: c,
        });
    }
    figs.push(Figure {
        stem: "p99-normalised".into(),
        title: "online p99 response time, normalised to vanilla".into(),
        caption: format!(
            "p99 response time of the latency-critical service under each stack over its p99 \
             under vanilla (vanilla's bars are 1); the last group is the mean over the six \
             workloads; fd-ftl-lsb-skip outlined. {}",
            caption(size, seed)
        ),
        x_label: "workload (co-run with ungzip)".into(),
        y_label: "p99 / vanilla p99".into(),
        x_log: false,
        y_log: false,
        x_categories: categories_with_mean(),
        references: vec![Reference::baseline("vanilla")],
        series,
        ..Default::default()
    });

    let mut series = Vec::new();
    for (c, stack) in STACKS.iter().take(5).enumerate() {
        type Stat = (&'static str, Stroke, fn(&ProcessHeadline) -> Option<u64>);
        let stats: [Stat; 2] = [
            ("avg", Stroke::Solid, |p| p.response_mean_ns),
            ("p99", Stroke::Dashed, |p| p.response_p99_ns),
        ];
        for (stat, stroke, of) in stats {
            let points = WORKLOADS
                .iter()
                .enumerate()
                .filter_map(|(i, w)| Some((i as f64, ms(of(service(results, stack, w)?)?))))
                .collect();
            series.push(Series {
                name: format!("{stack} {stat}"),
                points,
                stroke,
                colour: c,
                ..Default::default()
            });
        }
    }
    figs.push(Figure {
        stem: "avg-p99".into(),
        title: "online response time: average and p99".into(),
        caption: format!(
            "Average (filled) and p99 (outlined) response time of the latency-critical service, \
             per workload and stack. Log y axis. {}",
            caption(size, seed)
        ),
        x_label: "workload (co-run with ungzip)".into(),
        y_label: "response time (ms)".into(),
        x_log: false,
        y_log: true,
        x_categories: WORKLOADS.iter().map(|w| w.to_string()).collect(),
        series,
        ..Default::default()
    });

    let series_of = |stack: &str| {
        results
            .get(&run_id(stack, SERIES_WORKLOAD))
            .and_then(|r: &RunResult| r.system.as_ref())
            .map(|s| s.series.clone())
            .unwrap_or_default()
    };
    let over_time = |y: fn(&crate::results::SeriesPoint) -> f64| -> Vec<Series> {
        STACKS
            .iter()
            .take(5)
            .enumerate()
            .map(|(c, stack)| Series {
                name: stack.to_string(),
                points: series_of(stack)
                    .iter()
                    .map(|p| (p.t_end_ms / 1e3, y(p)))
                    .collect(),
                stroke: Stroke::Solid,
                colour: c,
                ..Default::default()
            })
            .collect()
    };
    let window = series_ms(size);
    figs.push(Figure {
        stem: "series-latency".into(),
        title: format!("{SERIES_WORKLOAD} + {OFFLINE}: I/O latency over time"),
        caption: format!(
            "p99 latency of {SERIES_WORKLOAD}'s I/O calls in each {window} ms window (0 where \
             the window had none). {}",
            caption(size, seed)
        ),
        x_label: "time (s)".into(),
        y_label: "I/O latency p99 (ms)".into(),
        x_log: false,
        y_log: false,
        x_categories: vec![],
        series: over_time(|p| ms(p.lc_lat_p99_ns)),
        ..Default::default()
    });
    figs.push(Figure {
        stem: "series-flushed".into(),
        title: format!("{SERIES_WORKLOAD} + {OFFLINE}: dirty pages flushed over time"),
        caption: format!(
            "Page-cache pages written back (both classes) in each {window} ms window. {}",
            caption(size, seed)
        ),
        x_label: "time (s)".into(),
        y_label: "pages written back per window".into(),
        x_log: false,
        y_log: false,
        y_ticks: Ticks::Integer,
        x_categories: vec![],
        series: over_time(|p| p.pages_written_back as f64),
        ..Default::default()
    });

    let totals = ftl_totals(results);
    type Kind = (&'static str, fn(&(u64, u64)) -> u64);
    let kinds: [Kind; 2] = [("units programmed", |t| t.0), ("units wasted", |t| t.1)];
    let series = kinds
        .iter()
        .enumerate()
        .map(|(c, (name, of))| Series {
            name: name.to_string(),
            points: totals
                .iter()
                .enumerate()
                .filter_map(|(i, t)| Some((i as f64, of(t.as_ref()?) as f64)))
                .collect(),
            stroke: Stroke::Solid,
            colour: c,
            ..Default::default()
        })
        .collect();
    figs.push(Figure {
        stem: "ftl-pages".into(),
        title: "flash pages programmed and wasted per FTL policy".into(),
        caption: format!(
            "4 KiB units programmed to flash (host write-back and GC) and units wasted (pages \
             skipped, rows left partly empty), summed over the six co-runs, under fd-buf's \
             drain with each allocator (sequential = fd-buf, lsb-skip = fd-ftl-lsb-skip, \
             latency-aware = fd-ftl). {}",
            caption(size, seed)
        ),
        x_label: "ftl.alloc".into(),
        y_label: "4 KiB units".into(),
        x_log: false,
        y_log: false,
        y_ticks: Ticks::Integer,
        x_categories: FTL_POLICIES.iter().map(|p| p.0.to_string()).collect(),
        series,
        ..Default::default()
    });
    figs
}

/// The six runs of `stack`, or `None` if one is missing.
fn stack_runs<'a>(results: &'a Results, stack: &str) -> Option<Vec<&'a SystemHeadline>> {
    WORKLOADS
        .iter()
        .map(|w| results.get(&run_id(stack, w))?.system.as_ref())
        .collect()
}

/// Rows that show which mechanism acted, per stack over its six runs: the flusher's waves and
/// how much of what they wrote their hints announced, the drain's background and foreground
/// waves, the fullest the buffer got, and the dirty-threshold switches.
fn mechanism_rows(results: &Results, t: &mut Table) {
    type Cell = fn(&[&SystemHeadline]) -> String;
    let rows: [(&str, Cell); 5] = [
        (
            "write-back waves: pages written / hinted (all runs)",
            |runs| {
                let wb = |f: fn(&WritebackHeadline) -> u64| -> u64 {
                    runs.iter().map(|r| f(&r.host.writeback)).sum()
                };
                let (waves, written, hinted) = (
                    wb(|w| w.waves),
                    wb(|w| w.wave_pages),
                    wb(|w| w.hinted_pages),
                );
                if hinted == 0 {
                    format!("{waves}: {written} / -")
                } else {
                    format!("{waves}: {written} / {hinted}")
                }
            },
        ),
        ("drain waves: background / foreground (all runs)", |runs| {
            drain_pair(runs, |d| (d.background_waves, d.foreground_waves))
        }),
        ("drain rows: background / foreground (all runs)", |runs| {
            drain_pair(runs, |d| (d.background_rows, d.foreground_rows))
        }),
        ("write buffer: most units held (any run)", |runs| {
            runs.iter()
                .map(|r| r.device.max_dirty_units)
                .max()
                .unwrap_or(0)
                .to_string()
        }),
        (
            "dirty thresholds: switches to high / low (all runs)",
            |runs| {
                let sum = |f: fn(&WritebackHeadline) -> Option<u64>| -> Option<u64> {
                    runs.iter().map(|r| f(&r.host.writeback)).sum()
                };
                match (sum(|w| w.switches_to_high), sum(|w| w.switches_to_low)) {
                    (Some(h), Some(l)) => format!("{h} / {l}"),
                    _ => "-".into(),
                }
            },
        ),
    ];
    for (label, cell) in rows {
        let mut row = vec![label.to_string()];
        row.extend(
            STACKS
                .iter()
                .map(|stack| stack_runs(results, stack).map_or("-".into(), |runs| cell(&runs))),
        );
        t.rows.push(row);
    }
}

/// `(units programmed, units wasted)` summed over the workloads, per FTL policy (`None` if a
/// run is missing).
fn ftl_totals(results: &Results) -> Vec<Option<(u64, u64)>> {
    FTL_POLICIES
        .iter()
        .map(|(_, stack)| {
            WORKLOADS.iter().try_fold((0, 0), |(p, w), workload| {
                let d = &results
                    .get(&run_id(stack, workload))?
                    .system
                    .as_ref()?
                    .device;
                Some((p + d.units_programmed, w + d.units_wasted))
            })
        })
        .collect()
}

/// The headline table: workloads down, stacks across, each cell the p99 normalised to vanilla
/// and the p99 itself; then the mean, write stalls and the FTL comparison.
pub fn headline(results: &Results) -> Table {
    let mut t = Table {
        header: std::iter::once("p99 / vanilla (p99)".to_string())
            .chain(STACKS.iter().map(|s| s.to_string()))
            .collect(),
        rows: vec![],
    };
    for w in WORKLOADS {
        let mut row = vec![w.to_string()];
        for stack in STACKS {
            let cell = match (
                p99_ratio(results, stack, w),
                service(results, stack, w).and_then(|p| p.response_p99_ns),
            ) {
                (Some(e), Some(p99)) => format!("{} ({})", ratio_cell(&e), format_ns(p99)),
                _ => "-".into(),
            };
            row.push(cell);
        }
        t.rows.push(row);
    }
    t.rows.push(
        std::iter::once("mean".to_string())
            .chain(
                STACKS
                    .iter()
                    .map(|s| p99_ratio_mean(results, s).map_or("-".into(), |e| ratio_cell(&e))),
            )
            .collect(),
    );
    type Stalls = fn(&crate::results::DeviceHeadline) -> u64;
    let stall_rows: [(&str, Stalls); 2] = [
        ("write stalls (all runs)", |d| d.write_stalls),
        ("reads waiting to stage (all runs)", |d| {
            d.read_staging_stalls
        }),
    ];
    for (name, of) in stall_rows {
        t.rows.push(
            std::iter::once(name.to_string())
                .chain(STACKS.iter().map(|stack| {
                    let stalls: Option<u64> = WORKLOADS.iter().try_fold(0, |n, w| {
                        Some(n + of(&results.get(&run_id(stack, w))?.system.as_ref()?.device))
                    });
                    stalls.map_or("-".into(), |n| n.to_string())
                }))
                .collect(),
        );
    }
    mechanism_rows(results, &mut t);
    for ((policy, stack), total) in FTL_POLICIES.iter().zip(ftl_totals(results)) {
        let mut row = vec![format!("ftl {policy} ({stack}): units programmed / wasted")];
        row.extend(STACKS.iter().map(|s| match (s == stack, total) {
            (true, Some((p, w))) => format!("{p} / {w}"),
            _ => String::new(),
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
        let runs = runs(&crate::plan::Plan::new(Size::Quick, 1));
        assert_eq!(runs.len(), STACKS.len() * WORKLOADS.len());
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
            assert_eq!(cfg.duration.as_ns(), QUICK_MS * 1_000_000);
            assert_eq!(cfg.processes.len(), 2);
            assert_eq!(
                sys.series_ms > 0,
                r.id.ends_with(SERIES_WORKLOAD),
                "{}",
                r.id
            );
        }
        let full = super::runs(&crate::plan::Plan::new(Size::Full, 1));
        assert!(full[0].job_fio.contains("duration_ms = 30000"));
    }
}
