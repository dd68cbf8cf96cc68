//! What the command line says about the studies before running one: `ullstack study list`
//! (one line a study: run counts and what it compares) and the closing part of `ullstack study
//! --help` (run and replicate counts of each size, and what `--quick` keeps). Both count the
//! runs from the catalogue, so they cannot drift from what a study runs.

use crate::plan::{Plan, Size};
use crate::reflex;
use crate::studies::catalogue;

/// `reflex`'s simulated runs of a size at its default replicates (part 4's probes aside): its
/// runs and the replicates of the published rows' runs.
fn reflex_sim_runs(size: Size) -> usize {
    let replicates = Plan::new(size, 1).replicates;
    reflex::runs(size, 1).len() + reflex::replicate_runs(size, 1, replicates).len()
}

/// `ullstack study list`: one line a study, `reflex` last.
pub fn list_text() -> String {
    let mut text = String::new();
    for def in catalogue() {
        let quick = (def.runs)(&Plan::new(Size::Quick, 1)).len();
        let full = (def.runs)(&Plan::new(Size::Full, 1)).len();
        text.push_str(&format!(
            "{:<12} {full} runs (--quick: {quick})  {}\n",
            def.name, def.about
        ));
    }
    let quick = reflex_sim_runs(Size::Quick);
    let full = reflex_sim_runs(Size::Full);
    text.push_str(&format!(
        "{:<12} {full} runs (--quick: {quick}) + a search for part 4; {} on the real server + a \
         search, each with its simulated twin  SLOs for remote tenants: simulated server with the \
         qos scheduler off/on, cores, tenants per core, unloaded latency; the same scenarios \
         scaled to this machine through serve + bench\n",
        "reflex",
        reflex::real_runs(Size::Quick, 1).len()
    ));
    text
}

/// `ullstack study --help`'s closing part: every study, its run counts and what `--quick` does
/// to it.
pub fn help_text() -> String {
    let mut text = String::from("Studies (--quick is a smoke test of each, not its results):\n");
    for def in catalogue() {
        let count = |size| (def.runs)(&Plan::new(size, 1)).len();
        let replicates = |size| Plan::new(size, 1).replicates;
        text.push_str(&format!(
            "  {:<11} {} runs, {} replicate(s) of each comparison; --quick: {} runs, {} \
             replicate(s), {}\n",
            def.name,
            count(Size::Full),
            replicates(Size::Full),
            count(Size::Quick),
            replicates(Size::Quick),
            (def.quick)()
        ));
    }
    text.push_str(&format!(
        "  {:<11} {} simulated runs ({} replicate(s) of the published rows' runs) + {} on the \
         real server (--sim-only: none) + part 4's searches; --quick: {} + {}, {}\n",
        "reflex",
        reflex_sim_runs(Size::Full),
        Plan::new(Size::Full, 1).replicates,
        reflex::real_runs(Size::Full, 1).len(),
        reflex_sim_runs(Size::Quick),
        reflex::real_runs(Size::Quick, 1).len(),
        reflex::quick_about()
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_study_has_a_line_in_the_list_and_the_help() {
        let list = list_text();
        let help = help_text();
        for name in catalogue().iter().map(|d| d.name).chain(["reflex"]) {
            assert!(
                list.lines().any(|l| l.starts_with(name)),
                "{name} missing from:\n{list}"
            );
            assert!(
                help.lines().any(|l| l.trim_start().starts_with(name)),
                "{name} missing from:\n{help}"
            );
        }
        assert_eq!(list.lines().count(), catalogue().len() + 1);
    }

    /// `reflex`'s counts include the published rows' replicates: 15 runs and 4 × 4 replicates
    /// in a full study, the 10 runs alone with `--quick` (one replicate).
    #[test]
    fn reflex_counts_its_replicates() {
        assert_eq!(reflex_sim_runs(Size::Full), 15 + 4 * 4);
        assert_eq!(reflex_sim_runs(Size::Quick), 10);
        let line = list_text()
            .lines()
            .find(|l| l.starts_with("reflex"))
            .map(str::to_string)
            .expect("a reflex line");
        assert!(line.contains("31 runs (--quick: 10)"), "{line}");
    }
}
