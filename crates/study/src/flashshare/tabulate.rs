//! The `flashshare` study's tables: the headline (each service's mean over its co-runs,
//! normalised to vanilla, with 95 % intervals), then every pair, the replicate spread, the
//! cache sensitivity, the apache + index detail (NVMe commands, CPU time, the execution-time
//! parts) and the load-latency sweep; and `study.json`'s findings. Each cell is read from
//! [`Results`] through the parent module's normalisation; `-` where a run is missing.

use super::exectime::exec_table;
use super::{
    cache_reads, cache_run_id, detail, mean_all, median, norm_mean_estimate, normalised,
    offline_norm, partners, replicate_values, stack_header, AVG, CACHES, CACHE_SERVICE,
    DETAIL_OFFLINE, OFFLINE, ONLINE, P99, SPREAD_FLAG, STACKS,
};
use crate::published::ratio_cell;
use crate::results::Results;
use crate::table::Table;
use engine::time::format_ns;

fn cell(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
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
        (super::knee::table_title(), super::knee::table(results)),
    ]
}

/// `study.json`'s `findings`: the online services' knees (report 6).
pub fn findings(results: &Results) -> Option<serde_json::Value> {
    Some(super::knee::findings(results))
}

pub(super) fn pairs_table(results: &Results) -> Table {
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
pub(super) fn spread_table(results: &Results) -> Table {
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
