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
//! replicate. The durations ([`FULL_MS`], [`QUICK_MS`]) set the cost: 1,057 runs at five
//! replicates (990 stack comparisons, 40 cache runs, the sweep's 27; `ullstack study list`),
//! nearly all of it in the co-runs under the five stacks past `vanilla`, each of which
//! simulates two to three times `vanilla`'s events. Three runs repeat others: the sweep's
//! 400/s runs are the `vanilla` alone runs of the study's seed (`knee`'s essay).

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
//! ## The files
//! This module holds the runs (stacks, partners, cache settings, replicates, their system
//! files) and the normalisation every report shares (medians over replicates, over vanilla's,
//! their intervals); `charts` draws the figures, `tabulate` the tables and findings, `exectime`
//! the execution-time breakdown, `knee` the load-latency sweep.
//!
//! Nothing here is tuned: every stack runs the presets with only its own switches changed, and
//! every figure is read back from the runs' `summary.json` and `timeseries.csv`.

mod charts;
mod exectime;
pub mod knee;
pub mod outcomes;
mod run_list;
mod tabulate;

pub use charts::figures;
pub use exectime::{ExecOf, ExecPart, EXEC_PARTS};
pub use run_list::runs;
pub use tabulate::{findings, headline, tables};

use crate::plan::Size;
use crate::published::{paired_ratio, Estimate, Pair};
use crate::results::{ClassCacheReads, ProcessHeadline, Results};

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
pub const REPLICATES: u64 = crate::plan::DEFAULT_REPLICATES;

/// Runs of each stack comparison by default: [`REPLICATES`], one with `--quick`.
pub fn replicates(size: Size) -> u64 {
    crate::plan::Plan::new(size, 1).replicates
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

fn partners() -> impl Iterator<Item = &'static str> {
    OFFLINE.iter().copied().chain(std::iter::once(ALONE))
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

fn detail<'a>(results: &'a Results, stack: &str) -> Option<&'a crate::results::HostHeadline> {
    Some(
        &results
            .get(&run_id(stack, CACHE_SERVICE, DETAIL_OFFLINE))?
            .system
            .as_ref()?
            .host,
    )
}

fn stack_header(first: &str) -> Vec<String> {
    std::iter::once(first.to_string())
        .chain(STACKS.iter().map(|s| s.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::charts::norm_figure;
    use super::tabulate::{pairs_table, spread_table};
    use super::*;
    use crate::published::ratio_cell;
    use engine::time::format_ns;

    #[test]
    fn run_ids_are_unique_and_every_system_file_parses_under_its_stack() {
        let runs = runs(&crate::plan::Plan::new(Size::Quick, 1));
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
        let full = super::runs(&crate::plan::Plan::new(Size::Full, 1));
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
        let quick = runs(&crate::plan::Plan::new(Size::Quick, 7));
        let full = runs(&crate::plan::Plan::new(Size::Full, 7));
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
            &crate::plan::Plan::new(Size::Full, 7)
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
