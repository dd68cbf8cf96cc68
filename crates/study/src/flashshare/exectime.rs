//! The flashshare study's execution-time breakdown (report 4): for `apache` + `index`, a
//! stacked bar per stack of apache's mean response time and of index's threads' time, each
//! part over vanilla's total, and the same as a table.
//!
//! ## What it reads
//! Every run's `summary.json` says where each process's time went (`host::exectime`): for an
//! online service, its completed requests' response times split at each hand-over (`network`,
//! `worker_queue`) and by what the server and worker threads did meanwhile; for every process,
//! its threads' lives split by span (on a core by CPU category, waiting for a core, blocked on
//! I/O, idle). The parts add up exactly to the totals, so a bar is the whole. apache's bar is
//! its *mean response time* (the sums over its requests divided by their count), index's its
//! threads' lives (8 threads from the start to their exit at the run's end); each stack's bar
//! is over vanilla's total, so apache's heights are its mean response time / vanilla's and
//! index's are ≈ 1 (its threads live the run's length under every stack: what moves is the
//! split). The parts, from the summary's spans ([`EXEC_PARTS`]): compute (`user`), system call
//! and page cache, block layer (`blk`), driver (`nvme`), completion work (`blk_complete` and
//! `irq`), switch (`sched`: context switch in, cache pollution), poll, CPU wait (`run_queue`
//! and `irq_stolen`), I/O wait, idle; apache's add network and wait for a worker. apache's idle
//! is 0 (no one idles on a request); its threads' lives — mostly idle at 400 requests/s — are
//! in `summary.json`, not plotted.
//!
//! ## What it leaves out
//! Distributions (the parts are sums and means), and the other pairs (only `apache` +
//! `index`, the published figure's pair, is split).

use super::{caption, process, run_id, stack_header, CACHE_SERVICE, DETAIL_OFFLINE, STACKS};
use crate::plan::Size;
use crate::plot::{Figure, Reference, Series, Stroke};
use crate::results::{Results, TimeSplit};
use crate::table::Table;

/// A part of the execution-time breakdown: its name and the summary's parts it sums.
pub type ExecPart = (&'static str, &'static [&'static str]);

/// The parts of the execution-time breakdown, in the order they stack (module essay): every
/// span of `host::exectime` and the request's own two parts are in exactly one.
pub const EXEC_PARTS: [ExecPart; 12] = [
    ("network", &["network"]),
    ("wait for a worker", &["worker_queue"]),
    ("compute", &["user"]),
    ("syscall + page cache", &["syscall", "pagecache"]),
    ("block layer", &["blk"]),
    ("driver", &["nvme"]),
    ("completion", &["blk_complete", "irq"]),
    ("switch", &["sched"]),
    ("poll", &["poll"]),
    ("CPU wait", &["run_queue", "irq_stolen"]),
    ("I/O wait", &["io_wait"]),
    ("idle", &["idle"]),
];

/// The two bars of report 4's execution-time breakdown: apache's requests, index's threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecOf {
    /// apache's mean response time.
    ApacheRequests,
    /// index's threads' lives.
    IndexThreads,
}

impl ExecOf {
    fn name(self) -> &'static str {
        match self {
            ExecOf::ApacheRequests => CACHE_SERVICE,
            ExecOf::IndexThreads => DETAIL_OFFLINE,
        }
    }

    /// The split of `stack`'s apache + index run this bar shows.
    fn split<'a>(self, results: &'a Results, stack: &str) -> Option<&'a TimeSplit> {
        let p = process(
            results,
            &run_id(stack, CACHE_SERVICE, DETAIL_OFFLINE),
            self.name(),
        )?;
        match self {
            ExecOf::ApacheRequests => p.request_time.as_ref(),
            ExecOf::IndexThreads => p.exec_time.as_ref(),
        }
    }

    /// Part `part` of `stack`'s bar over vanilla's total.
    pub fn normalised(self, results: &Results, stack: &str, part: &ExecPart) -> Option<f64> {
        self.ratio(results, stack, |t| t.sum_of(part.1))
    }

    /// `stack`'s total over vanilla's (apache: its mean response time over vanilla's).
    pub fn total(self, results: &Results, stack: &str) -> Option<f64> {
        self.ratio(results, stack, |t| t.total_ns)
    }

    /// `ns` of `stack`'s split over vanilla's total; apache's both as means per request.
    fn ratio(self, results: &Results, stack: &str, ns: impl Fn(&TimeSplit) -> u64) -> Option<f64> {
        let base = self.split(results, "vanilla")?;
        let s = self.split(results, stack)?;
        let per = |t: &TimeSplit, ns: u64| match self {
            ExecOf::ApacheRequests => ns as f64 / t.count.max(1) as f64,
            ExecOf::IndexThreads => ns as f64,
        };
        let base_total = per(base, base.total_ns);
        (base_total > 0.0).then(|| per(s, ns(s)) / base_total)
    }

    /// The parts this bar can have (index's threads have no network nor worker queue).
    fn parts(self) -> &'static [ExecPart] {
        match self {
            ExecOf::ApacheRequests => &EXEC_PARTS[..EXEC_PARTS.len() - 1],
            ExecOf::IndexThreads => &EXEC_PARTS[2..],
        }
    }
}

/// Report 4: the execution-time breakdown, a stacked bar per stack for apache and for index.
pub(super) fn exec_figures(results: &Results, size: Size, seed: u64) -> Vec<Figure> {
    let run = format!("{CACHE_SERVICE} + {DETAIL_OFFLINE}");
    [ExecOf::ApacheRequests, ExecOf::IndexThreads]
        .into_iter()
        .map(|of| {
            let series = of
                .parts()
                .iter()
                .map(|part| Series {
                    name: part.0.to_string(),
                    points: STACKS
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| Some((i as f64, of.normalised(results, s, part)?)))
                        .collect(),
                    stroke: Stroke::Stacked,
                    colour: EXEC_PARTS.iter().position(|p| p.0 == part.0).unwrap_or(0),
                    ..Default::default()
                })
                .collect();
            let (what, y) = match of {
                ExecOf::ApacheRequests => (
                    "apache's mean response time (client issue to reply received) split into \
                     its parts: the network trips, waiting for a worker, and what the server \
                     and worker threads did while they held the request",
                    "response time / vanilla's mean",
                ),
                ExecOf::IndexThreads => (
                    "index's 8 threads' wall-clock time (start to exit) split by what they did",
                    "thread time / vanilla's",
                ),
            };
            Figure {
                stem: format!("index-exec-{}", of.name()),
                title: format!("{run}: execution time of {}", of.name()),
                caption: format!(
                    "{what}, under each stack, normalised to vanilla's total (so vanilla's bar \
                     is 1). Parts: compute (user code), system call and page cache, block \
                     layer, driver, completion (block-layer completion and interrupt work in \
                     the thread), switch (context switch in, cache pollution), poll, CPU wait \
                     (run queue, time stolen by interrupts), I/O wait (blocked on I/O), idle. \
                     {}",
                    caption(size, seed)
                ),
                x_label: "stack".into(),
                y_label: y.into(),
                x_log: false,
                y_log: false,
                x_categories: STACKS.iter().map(|s| s.to_string()).collect(),
                references: vec![Reference::baseline("vanilla")],
                series,
                ..Default::default()
            }
        })
        .collect()
}

/// Report 4's execution-time breakdown as a table: every part of both bars, and their totals.
pub(super) fn exec_table(results: &Results) -> Table {
    let mut t = Table {
        header: stack_header("part, / vanilla's total"),
        rows: vec![],
    };
    let cell = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    for of in [ExecOf::ApacheRequests, ExecOf::IndexThreads] {
        for part in of.parts() {
            let mut row = vec![format!("{} {}", of.name(), part.0)];
            row.extend(STACKS.iter().map(|s| cell(of.normalised(results, s, part))));
            t.rows.push(row);
        }
        let mut row = vec![format!("{} total", of.name())];
        row.extend(STACKS.iter().map(|s| cell(of.total(results, s))));
        t.rows.push(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::super::tests::system_result;
    use super::*;
    use crate::results::ProcessHeadline;

    /// Every span the host accounts, and a request's network and worker-queue parts, is in
    /// exactly one part of the breakdown: a bar is its whole total.
    #[test]
    fn every_span_is_in_exactly_one_part() {
        let names = host::SPANS
            .iter()
            .map(|s| s.name())
            .chain(["network", "worker_queue"]);
        for name in names {
            let n = EXEC_PARTS.iter().filter(|p| p.1.contains(&name)).count();
            assert_eq!(n, 1, "{name}");
        }
        assert_eq!(
            EXEC_PARTS.iter().map(|p| p.1.len()).sum::<usize>(),
            host::SPANS.len() + 2,
            "no part names a span the host does not have"
        );
    }

    /// Stacked bars from made-up runs: apache's parts over vanilla's mean response time stack
    /// to each stack's total (vanilla's to 1), index's parts to its threads' time over vanilla's.
    #[test]
    fn the_execution_time_bars_stack_to_their_totals() {
        let split = |count: u64, parts: &[(&str, u64)]| TimeSplit {
            count,
            total_ns: parts.iter().map(|p| p.1).sum(),
            parts_ns: parts.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        };
        let run = |stack: &str, apache: TimeSplit, index: TimeSplit| {
            let proc_ = |name: &str, r: Option<TimeSplit>, e: TimeSplit| ProcessHeadline {
                name: name.into(),
                requests: None,
                response_mean_ns: None,
                response_p95_ns: None,
                response_p99_ns: None,
                instructions_per_sec: None,
                exec_time: Some(e),
                request_time: r,
            };
            let id = run_id(stack, CACHE_SERVICE, DETAIL_OFFLINE);
            let processes = vec![
                proc_(CACHE_SERVICE, Some(apache), split(5, &[("idle", 1)])),
                proc_(DETAIL_OFFLINE, None, index),
            ];
            let r = system_result(&id, stack, processes);
            (id, r)
        };
        let mut results = Results::new();
        // vanilla: 2 requests of 300 µs mean; selectisr: 4 of 240 µs, polling instead of I/O wait.
        let (id, r) = run(
            "vanilla",
            split(
                2,
                &[("network", 44_000), ("user", 500_000), ("io_wait", 56_000)],
            ),
            split(8, &[("user", 700), ("io_wait", 300)]),
        );
        results.insert(id, r);
        let (id, r) = run(
            "selectisr",
            split(
                4,
                &[("network", 88_000), ("user", 800_000), ("poll", 72_000)],
            ),
            split(8, &[("user", 600), ("run_queue", 400)]),
        );
        results.insert(id, r);
        let figs = exec_figures(&results, Size::Quick, 1);
        assert_eq!(figs.len(), 2);
        let stack_at = |f: &Figure, x: f64| -> f64 {
            f.series
                .iter()
                .flat_map(|s| s.points.iter())
                .filter(|p| p.0 == x)
                .map(|p| p.1)
                .sum()
        };
        let (vanilla, selectisr) = (0.0, 3.0);
        assert!((stack_at(&figs[0], vanilla) - 1.0).abs() < 1e-12);
        assert!(
            (stack_at(&figs[0], selectisr) - 0.8).abs() < 1e-12,
            "240 / 300 µs"
        );
        assert!((stack_at(&figs[1], vanilla) - 1.0).abs() < 1e-12);
        assert!((stack_at(&figs[1], selectisr) - 1.0).abs() < 1e-12);
        let poll = figs[0].series.iter().find(|s| s.name == "poll").unwrap();
        assert_eq!(poll.points, vec![(vanilla, 0.0), (selectisr, 0.06)]);
        let t = exec_table(&results);
        let row = |name: &str| t.rows.iter().find(|r| r[0] == name).unwrap().clone();
        assert_eq!(
            row("apache total")[1..],
            ["1.000", "-", "-", "0.800", "-", "-"]
        );
        assert_eq!(row("index CPU wait")[4], "0.400");
    }
}
