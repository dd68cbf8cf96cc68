//! What the command line says about the studies before running one: `ullstack study list`
//! (one line a study: run counts and what it compares) and the closing part of `ullstack study
//! --help` (run and replicate counts of each size, and what `--quick` keeps). Both count the
//! runs from the catalogue, so they cannot drift from what a study runs.

use crate::plan::{Plan, Size};
use crate::reflex;
use crate::studies::catalogue;

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
    let quick = reflex::runs(Size::Quick, 1).len();
    let full = reflex::runs(Size::Full, 1).len();
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
        "  {:<11} {} simulated runs + {} on the real server (--sim-only: none) + part 4's \
         searches; --quick: {} + {}, {}\n",
        "reflex",
        reflex::runs(Size::Full, 1).len(),
        reflex::real_runs(Size::Full, 1).len(),
        reflex::runs(Size::Quick, 1).len(),
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
}
