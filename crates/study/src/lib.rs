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
//!    run's folder written atomically; longest expected first, [`schedule`]);
//! 3. reads every run's `summary.json` back ([`results`]) and writes `study.json`;
//! 4. (unsharded) draws the figures ([`plot`]: CSV, SVG, PNG each) and writes the
//!    self-contained `report.html` with the headline table the terminal prints ([`report`]).
//!    Steps 3 and 4 read the runs and draw the figures on the `--jobs` threads too ([`pool`]).
//!
//! `ullstack study merge DIR…` ([`driver::merge`]) checks shards are of one study, version,
//! size and seed and together complete, copies their runs into one folder and does 3–4.
//!
//! Results never depend on `--jobs`, sharding or interruption: each run depends only on its own
//! config and seed, and `study.json` is computed from the run folders alone. Tests compare the
//! files byte for byte. So `study.json` names only what one build shares across executions
//! (the build, the seeds); each invocation's command line, times and host go to
//! `provenance.json` beside it, and a folder another build wrote is not resumed without
//! `--force` ([`provenance`]).
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
pub mod interrupt;
pub mod k8s;
pub mod listing;
pub mod lock;
pub mod options;
pub mod plan;
pub mod plot;
pub mod pool;
pub mod provenance;
pub mod published;
pub mod reflex;
pub mod report;
pub mod results;
pub mod schedule;
pub mod shard_env;
pub mod slurm;
pub mod sorted_json;
pub mod spec;
pub mod studies;
mod sys;
pub mod table;
pub mod ull;

pub use plan::{Plan, Size, DEFAULT_REPLICATES};
pub use studies::{catalogue, find, names, no_findings, no_tables, StudyDef};
