//! The studies: each one's [`StudyDef`] (its runs, figures, tables and published outcomes), in
//! the order `ullstack study list` prints them, and finding one by name.

use crate::plan::{Plan, Size};
use crate::plot::Figure;
use crate::published;
use crate::results::Results;
use crate::spec::RunSpec;
use crate::table::Table;
use crate::{fastdrain, flashshare, ull};

/// A study: its runs, and how to turn their results into figures and a headline table.
pub struct StudyDef {
    pub name: &'static str,
    /// One line: what it answers.
    pub about: &'static str,
    /// What `--quick` shortens in each run (for `study --help`, beside its run counts).
    pub quick: fn() -> String,
    /// Bumped when runs or figures change meaning.
    pub version: u32,
    pub runs: fn(&Plan) -> Vec<RunSpec>,
    pub figures: fn(&Results, Size, u64) -> Vec<Figure>,
    pub headline: fn(&Results) -> Table,
    /// Further tables for `report.html`, each with its heading (after the headline table).
    pub tables: fn(&Results) -> Vec<(String, Table)>,
    /// Its outcomes in the terms of `reference/published.toml` ([`published`]).
    pub outcomes: fn(&Results) -> Vec<published::Simulated>,
    /// Figures it derives from its runs beyond the published rows, recorded in `study.json`'s
    /// `findings` (`flashshare`: the online services' knees); `None`: no such section.
    pub findings: fn(&Results) -> Option<serde_json::Value>,
}

/// No `findings` section in `study.json`.
pub fn no_findings(_: &Results) -> Option<serde_json::Value> {
    None
}

/// No tables beyond the headline.
pub fn no_tables(_: &Results) -> Vec<(String, Table)> {
    Vec::new()
}

/// Every study, in the order `ullstack study list` prints them.
pub fn catalogue() -> Vec<StudyDef> {
    vec![
        StudyDef {
            name: "ull",
            about: "zssd vs nvme-tlc raw: latency and bandwidth vs queue depth, read/write \
                interference, interrupt vs polled completion",
            // 2: each point's depth over up to four threads, 1 M I/Os at every point of the full
            // study, CPU over the job's own span.
            quick: || {
                format!(
                    "{} I/Os per point instead of {}: averages and p99, not five nines",
                    ull::QUICK_IOS,
                    ull::FULL_IOS
                )
            },
            version: 2,
            runs: ull::runs,
            outcomes: ull::outcomes::published,
            figures: ull::figures,
            headline: ull::headline,
            tables: no_tables,
            findings: no_findings,
        },
        StudyDef {
            name: "fastdrain",
            about: "write-back without buffer overflow: 6 write-back workloads x ungzip on \
                arm8-4g + nvme-tlc under vanilla, fd-buf, fd-ftl, fd, oracle and lsb-skip",
            quick: || {
                format!(
                    "{} ms of simulated time per run instead of {} ms",
                    fastdrain::QUICK_MS,
                    fastdrain::FULL_MS
                )
            },
            version: 1,
            runs: fastdrain::runs,
            outcomes: fastdrain::outcomes::published,
            figures: fastdrain::figures,
            headline: fastdrain::headline,
            tables: no_tables,
            findings: no_findings,
        },
        StudyDef {
            name: "flashshare",
            about: "latency classes across the stack: 3 online services x (10 offline jobs + \
                alone) on arm8 + zssd under vanilla, cacheopt, kernelopt, selectisr, xler and \
                dedcore, and apache's cache sensitivity (uni-no, uni-128, uni-dyn, split)",
            quick: || {
                format!(
                    "{} ms of simulated time per run instead of {} ms, series windows of {} ms \
                     instead of {} ms",
                    flashshare::QUICK_MS,
                    flashshare::FULL_MS,
                    flashshare::QUICK_SERIES_MS,
                    flashshare::SERIES_MS
                )
            },
            version: 2,
            runs: flashshare::runs,
            outcomes: flashshare::outcomes::published,
            figures: flashshare::figures,
            headline: flashshare::headline,
            tables: flashshare::tables,
            findings: flashshare::findings,
        },
    ]
}

/// Every study's name, `reflex` (which has its own runner, [`crate::reflex::run`]) included, in the
/// order `ullstack study list` prints them.
pub fn names() -> Vec<&'static str> {
    let mut names: Vec<&str> = catalogue().iter().map(|d| d.name).collect();
    names.push("reflex");
    names
}

/// The study called `name`, or an error listing every study, with the likeliest meant one.
pub fn find(name: &str) -> Result<StudyDef, String> {
    catalogue()
        .into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| unknown_study(name))
}

/// `unknown study `NAME``, a "did you mean" when a study (or `list`, `merge`) is near it, and
/// every study's name.
fn unknown_study(name: &str) -> String {
    let known = names();
    let mut targets = known.clone();
    targets.extend(["list", "merge"]);
    let hint = did_you_mean(name, &targets)
        .map(|t| format!(" (did you mean `{t}`?)"))
        .unwrap_or_default();
    format!(
        "unknown study `{name}`{hint}; known studies: {}; or `study list`, `study merge DIR...`",
        known.join(", ")
    )
}

/// The target closest to `typed`: within an edit distance of a third of its length (at least
/// one; case ignored), else the only one it begins.
fn did_you_mean<'a>(typed: &str, targets: &[&'a str]) -> Option<&'a str> {
    let typed = typed.to_lowercase();
    let limit = (typed.chars().count() / 3).max(1);
    let near = targets
        .iter()
        .map(|t| (edit_distance(&typed, t), *t))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, t)| t);
    let begun: Vec<&str> = targets
        .iter()
        .copied()
        .filter(|t| typed.len() >= 2 && t.starts_with(typed.as_str()))
        .collect();
    near.or(match begun.as_slice() {
        [only] => Some(*only),
        _ => None,
    })
}

/// Levenshtein distance, with an adjacent swap counting one edit (`flashhsare`).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // d[i][j]: edits turning a[..i] into b[..j].
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let swap = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + swap);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every study is named, `reflex` too, and a slip of the keyboard gets its study back.
    #[test]
    fn an_unknown_study_lists_every_study_and_the_one_meant() {
        let e = find("nosuch").err().expect("no such study");
        assert!(
            e.contains("unknown study `nosuch`")
                && e.contains("ull, fastdrain, flashshare, reflex")
                && !e.contains("did you mean"),
            "{e}"
        );
        for (typed, meant) in [
            ("ul", "ull"),
            ("ULL", "ull"),
            ("flashhsare", "flashshare"),
            ("reflx", "reflex"),
            ("fast", "fastdrain"),
            ("mrege", "merge"),
            ("fastdrian", "fastdrain"),
        ] {
            let e = find(typed).err().expect("unknown");
            assert!(
                e.contains(&format!("(did you mean `{meant}`?)")),
                "{typed}: {e}"
            );
        }
        // `f` begins two studies: no guess.
        assert_eq!(did_you_mean("f", &names()), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
