//! The order a study hands its runs to the workers: longest expected first.
//!
//! [`crate::exec`]'s workers take the next run from one shared counter, so the study ends when
//! the last run handed out ends. Handed out in plan order, a study that lists its cheap runs
//! early and its dear ones late leaves one worker idle while the other finishes a long run; the
//! classic cure is LPT (longest processing time first: Graham, 1969), which hands the long runs
//! out first and lets the short ones fill in around them, so the workers finish within about
//! one short run of each other. LPT needs each run's cost before it runs, so it uses an
//! estimate ([`cost_estimate`]); the order among runs of equal estimate stays the plan's (the
//! sort is stable), and with no estimate at all the order is the plan's.
//!
//! ## The estimate
//! A full-system run simulates `duration_ms` of its system file with every `[[process]]` in
//! it; its events, and so its time, grow with both, so the estimate is their product (one
//! process for a file that names none). A device-level run (one fio job) has no estimate: all
//! weigh the same and keep the plan's order. The estimate only orders runs; no result depends
//! on it, because each run depends only on its own config and seed (`exec`'s essay).
//!
//! Worked example (`flashshare`, full, five replicates: 1,057 runs of 10,000 ms each): the 940
//! co-runs (a service and an offline job, estimate 20,000) go first, in plan order; then the 117
//! single-service runs (alone runs and the load sweep, 10,000), whose 0.25 to 0.9 s each fill
//! in while the other worker ends its last co-run (0.8 to 4 s). That study's plan already ends
//! with its load sweep, single-service runs, so there the order gains little: [`makespan_ns`]
//! over the measured `wall_ns` of a full run puts the plan order's idle tail at under a
//! quarter of a second per 1,000 s of work. A study whose dear runs come last (a sweep ending
//! at its largest size) is what the order is for.
//!
//! What it leaves out: the stack (a stack past `vanilla` simulates about twice `vanilla`'s
//! events for the same pair) and the offline job's own weight (`pagerank` about four times
//! `gzip`): the product puts every co-run before every single-service run, which is what keeps
//! the tail short; finer weights would be numbers to keep in step with the models.

use crate::spec::RunSpec;

/// The expected relative cost of `spec`: simulated ms times processes for a full-system run,
/// 1 for a device-level run (module essay). Only ratios between runs matter.
pub fn cost_estimate(spec: &RunSpec) -> u64 {
    let Some(_) = &spec.system else { return 1 };
    let Ok(file) = spec.job_fio.parse::<toml::Table>() else {
        // Unreadable here means the run fails when it starts: first, so it fails early.
        return u64::MAX;
    };
    let duration_ms = file
        .get("duration_ms")
        .and_then(toml::Value::as_integer)
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(1);
    let processes = file
        .get("process")
        .and_then(toml::Value::as_array)
        .map_or(1, |p| p.len().max(1)) as u64;
    duration_ms.saturating_mul(processes)
}

/// `runs` with the dearest first by [`cost_estimate`], equal estimates in their given order.
pub fn longest_first<'a>(runs: &[&'a RunSpec]) -> Vec<&'a RunSpec> {
    let mut keyed: Vec<(u64, &RunSpec)> = runs.iter().map(|&s| (cost_estimate(s), s)).collect();
    keyed.sort_by_key(|&(cost, _)| std::cmp::Reverse(cost));
    keyed.into_iter().map(|(_, s)| s).collect()
}

/// When `workers` workers that each take the next task from one queue as they free up (as
/// `exec`'s do) finish tasks costing `costs_ns`, in the given order: the makespan.
pub fn makespan_ns(costs_ns: &[u64], workers: usize) -> u64 {
    let mut free_at_ns = vec![0u64; workers.max(1)];
    for &cost in costs_ns {
        let first_free = free_at_ns.iter_mut().min().expect("at least one worker");
        *first_free += cost;
    }
    free_at_ns.into_iter().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{SystemFile, SystemRun};

    fn system_run(id: &str, duration_ms: u64, profiles: &[&str]) -> RunSpec {
        let mut file = SystemFile::new(1, duration_ms, "arm8").device("zssd");
        for p in profiles {
            file = file.process(p);
        }
        RunSpec {
            id: id.into(),
            device: "zssd".into(),
            host: "arm8".into(),
            job_fio: file.finish(),
            seed: 1,
            system: Some(SystemRun {
                stack: "vanilla".into(),
                series_ms: 0,
            }),
            device_keys: String::new(),
        }
    }

    #[test]
    fn the_estimate_is_duration_times_processes() {
        assert_eq!(cost_estimate(&system_run("a", 10_000, &["apache"])), 10_000);
        assert_eq!(
            cost_estimate(&system_run("b", 10_000, &["apache", "pagerank"])),
            20_000
        );
        assert_eq!(
            cost_estimate(&system_run("c", 250, &["apache", "pagerank"])),
            500
        );
    }

    #[test]
    fn co_runs_go_first_and_equal_estimates_keep_the_plan_order() {
        let runs = [
            system_run("alone-1", 1000, &["apache"]),
            system_run("pair-1", 1000, &["apache", "gzip"]),
            system_run("alone-2", 1000, &["apache"]),
            system_run("pair-2", 1000, &["apache", "wc"]),
        ];
        let refs: Vec<&RunSpec> = runs.iter().collect();
        let ids: Vec<&str> = longest_first(&refs).iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["pair-1", "pair-2", "alone-1", "alone-2"]);
    }

    #[test]
    fn makespan_of_a_queue_shared_by_two_workers() {
        // 3 and 1 in parallel, then 2 on the worker that freed at 1: both end at 3.
        assert_eq!(makespan_ns(&[3, 1, 2], 2), 3);
        // A long task last leaves the other worker idle: 1+1 | 1, then 4 on the one free at 1.
        assert_eq!(makespan_ns(&[1, 1, 1, 4], 2), 5);
        assert_eq!(makespan_ns(&[4, 1, 1, 1], 2), 4, "longest first: 4 | 1+1+1");
        assert_eq!(makespan_ns(&[], 2), 0);
        assert_eq!(makespan_ns(&[2, 2], 1), 4);
    }

    /// Longest first ends sooner than the plan's order on a list whose long runs come last,
    /// and within the longest run of an even split of the work.
    #[test]
    fn longest_first_shortens_a_tail_of_long_runs() {
        let plan: Vec<u64> = (0..39).map(|i| if i < 36 { 1 } else { 10 }).collect();
        let mut lpt = plan.clone();
        lpt.sort_by_key(|&c| std::cmp::Reverse(c));
        let (plan_ns, lpt_ns) = (makespan_ns(&plan, 2), makespan_ns(&lpt, 2));
        // Plan: 18 + 10 + 10 on one worker (38); LPT: 10 + 10 + 13 and 10 + 23 (33).
        assert_eq!((plan_ns, lpt_ns), (38, 33));
        let total: u64 = plan.iter().sum();
        assert!(
            lpt_ns <= total / 2 + 10,
            "LPT {lpt_ns}, half the work {}",
            total / 2
        );
    }
}
