//! Studies: named sets of simulation runs that answer one question of the spec, with plots and
//! a report (`ullstack study NAME`; experiments.md lists them).
//!
//! A study is a fixed list of runs ([`spec::RunSpec`]): each a complete device-level
//! configuration — device preset, host costs, one fio job, seed — written out as
//! `runs/<id>/config.toml` + `job.fio`, so every point of every plot can be re-run alone with
//! `ullstack sim --config`. Running a study ([`driver::run`]):
//!
//! 1. builds the run list for the size (`--quick` or full) and seed, and keeps this shard's
//!    share (`--shard I/N`: runs I, I+N, I+2N, …);
//! 2. simulates every run not already done, over `--jobs` threads ([`exec`]: resumable, each
//!    run's folder written atomically);
//! 3. reads every run's `summary.json` back ([`results`]) and writes `study.json`;
//! 4. (unsharded) draws the figures ([`plot`]: CSV, SVG, PNG each) and writes the
//!    self-contained `report.html` with the headline table the terminal prints ([`report`]).
//!
//! `ullstack study merge DIR…` ([`driver::merge`]) checks shards are of one study, version,
//! size and seed and together complete, copies their runs into one folder and does 3–4.
//!
//! Results never depend on `--jobs`, sharding or interruption: each run depends only on its own
//! config and seed, and `study.json` is computed from the run folders alone. Tests compare the
//! files byte for byte.
//!
//! The studies: [`ull`] (what an ultra-low-latency device changes), [`fastdrain`] (write-back
//! without buffer overflow: full-system runs under named stacks), [`flashshare`] (latency
//! classes across the stack: full-system runs under the FlashShare stacks) and [`reflex`] (SLOs
//! for remote tenants; its runs are remote scenarios, not device runs, so it has its own
//! runner). A study bumps its
//! `version` when its runs or figures change meaning, so `merge` refuses mixed results.

pub mod driver;
pub mod exec;
pub mod fastdrain;
pub mod flashshare;
pub mod k8s;
pub mod lock;
pub mod plot;
pub mod reflex;
pub mod report;
pub mod results;
pub mod shard_env;
pub mod slurm;
pub mod spec;
pub mod ull;

use crate::plot::Figure;
use crate::report::Table;
use crate::results::Results;
use crate::spec::RunSpec;

/// Full study, or the short `--quick` version (seconds; used by tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Quick,
    Full,
}

impl Size {
    pub fn as_str(self) -> &'static str {
        match self {
            Size::Quick => "quick",
            Size::Full => "full",
        }
    }

    pub fn parse(s: &str) -> Option<Size> {
        match s {
            "quick" => Some(Size::Quick),
            "full" => Some(Size::Full),
            _ => None,
        }
    }
}

/// A study: its runs, and how to turn their results into figures and a headline table.
pub struct StudyDef {
    pub name: &'static str,
    /// One line: what it answers.
    pub about: &'static str,
    /// Bumped when runs or figures change meaning.
    pub version: u32,
    pub runs: fn(Size, u64) -> Vec<RunSpec>,
    pub figures: fn(&Results, Size, u64) -> Vec<Figure>,
    pub headline: fn(&Results) -> Table,
    /// Further tables for `report.html`, each with its heading (after the headline table).
    pub tables: fn(&Results) -> Vec<(String, Table)>,
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
            version: 2,
            runs: ull::runs,
            figures: ull::figures,
            headline: ull::headline,
            tables: no_tables,
        },
        StudyDef {
            name: "fastdrain",
            about: "write-back without buffer overflow: 6 write-back workloads x ungzip on \
                arm8-4g + nvme-tlc under vanilla, fd-buf, fd-ftl, fd, oracle and lsb-skip",
            version: 1,
            runs: fastdrain::runs,
            figures: fastdrain::figures,
            headline: fastdrain::headline,
            tables: no_tables,
        },
        StudyDef {
            name: "flashshare",
            about: "latency classes across the stack: 3 online services x (10 offline jobs + \
                alone) on arm8 + zssd under vanilla, cacheopt, kernelopt, selectisr, xler and \
                dedcore, and apache's cache sensitivity (uni-no, uni-128, uni-dyn, split)",
            version: 2,
            runs: flashshare::runs,
            figures: flashshare::figures,
            headline: flashshare::headline,
            tables: flashshare::tables,
        },
    ]
}

/// The study called `name`, or an error listing the known ones.
pub fn find(name: &str) -> Result<StudyDef, String> {
    let all = catalogue();
    let known: Vec<&str> = all.iter().map(|d| d.name).collect();
    let known = known.join(", ");
    all.into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| format!("unknown study `{name}`; known studies: {known}"))
}
