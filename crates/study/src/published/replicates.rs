//! Reading a statistic over a run's replicates, as every study's `outcomes` module does to
//! compute its rows of `reference/published.toml` (what each `id` measures is in its `what`;
//! how a study measures it is written beside its own runs: `ull::outcomes`,
//! `fastdrain::outcomes`, `flashshare::outcomes`, `reflex::outcomes`).
//!
//! Every study reads the replicates present (replicate 0 up to the first missing), so a
//! `--quick` study (one replicate) gives points without intervals and a full one (five by
//! default) gives 95 % intervals ([`super`]'s essay).

use super::Pair;
use crate::results::{ProcessHeadline, Results, RunResult};

/// Replicates of a run present in `results`, in order, from replicate 0 up to the first missing.
pub(crate) fn present(results: &Results, id: impl Fn(u64) -> String) -> Vec<&RunResult> {
    (0..).map_while(|r| results.get(&id(r))).collect()
}

fn process<'a>(run: &'a RunResult, name: &str) -> Option<&'a ProcessHeadline> {
    run.system
        .as_ref()?
        .processes
        .iter()
        .find(|p| p.name == name)
}

/// A statistic of process `name` in every present replicate (`None` if one lacks it).
pub(crate) fn stat_over(
    runs: &[&RunResult],
    name: &str,
    of: impl Fn(&ProcessHeadline) -> Option<u64>,
) -> Option<Vec<f64>> {
    runs.iter()
        .map(|r| process(r, name).and_then(&of).map(|v| v as f64))
        .collect()
}

/// A pair with both arms cut to the replicates both have.
pub(crate) fn pair(mut arm: Vec<f64>, mut base: Vec<f64>) -> Option<Pair> {
    let n = arm.len().min(base.len());
    (n > 0).then(|| {
        arm.truncate(n);
        base.truncate(n);
        Pair { arm, base }
    })
}

pub(crate) type Stat = fn(&ProcessHeadline) -> Option<u64>;
pub(crate) const AVG: Stat = |p| p.response_mean_ns;
pub(crate) const P95: Stat = |p| p.response_p95_ns;
pub(crate) const P99: Stat = |p| p.response_p99_ns;
