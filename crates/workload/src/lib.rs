//! What runs on top of the I/O path: fio jobs, application profiles and their I/O generators.
//!
//! Every ullstack run is driven by a workload. Device-level runs (the `ull` study, calibration,
//! `bench`) use fio job files, because that is how storage people describe device tests and
//! because the same file can then be run by real fio against a real device for comparison. The
//! full-system studies use application profiles measured on the published server. This crate
//! turns both into integers with units and into deterministic streams of I/Os; it knows nothing
//! of time, queues or devices (the `sim` and `host` crates do).
//!
//! ## Map
//! | module | what |
//! | --- | --- |
//! | `units` | fio's number syntax: `4k`, `1m`, `10g`, `500ms`, `kb_base` |
//! | `job` | [`JobFile`], [`JobSpec`] and the enums that name its modes |
//! | `fio` | the fio INI reader (`[global]` inheritance, comments, flags) |
//! | `jobtoml` | the same jobs written as TOML |
//! | `options` | the option table and builder both readers share: validation, defaults, errors |
//! | `generator` | [`IoGenerator`]: the I/Os of one job clone |
//! | `randmap` | [`RandomMapWalk`]: fio's random map as an O(1)-memory permutation |
//! | `profile` | [`Profile`] presets and [`ProfileGenerator`] |
//! | `trace` | block trace readers (blkparse, MSR, SPC, DiskSim/MQSim, CSV), replay pacing and folding, trace statistics |
//!
//! ## Worked example
//! ```
//! use rand::SeedableRng;
//! use workload::{IoGenerator, JobFile, Op};
//!
//! let file = JobFile::parse_fio(
//!     "[global]\nioengine=libaio\ndirect=1\n[rr]\nrw=randread\nbs=4k\nsize=64k\niodepth=32\n",
//!     "inline.fio",
//! )
//! .unwrap();
//! let job = &file.jobs[0];
//! assert_eq!(job.iodepth, 32);
//! let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(1);
//! let mut gen = IoGenerator::new(job, 0, 1 << 30).unwrap();
//! let mut offsets = Vec::new();
//! while let Some(io) = gen.next(&mut rng) {
//!     assert_eq!(io.op, Op::Read);
//!     offsets.push(io.offset_bytes);
//! }
//! offsets.sort();
//! // 64 KiB region = 16 blocks of 4 KiB, each read exactly once (fio's random map).
//! assert_eq!(offsets, (0..16).map(|b| b * 4096).collect::<Vec<u64>>());
//! ```
//!
//! ## What it leaves out
//! fio's iolog format is not read (the `trace` module reads block traces). Unsupported fio options are
//! errors, never ignored; see `options` for the list of decisions.

mod error;
mod fio;
mod generator;
mod job;
mod jobtoml;
mod options;
mod profile;
mod randmap;
pub mod trace;
mod units;
mod zipf;

use std::path::Path;

pub use error::{GenError, JobError, ProfileError};
pub use generator::{IoGenerator, IoReq, Op};
pub use job::{
    Access, Buffering, Completion, Distribution, FioEngine, IoEngine, JobFile, JobSpec, JobStart,
    RandomMap, Reporting, RunUntil, RwPattern,
};
pub use profile::{
    IoSizeModel, OfflineThreads, Profile, ProfileGenerator, ProfileKind, Provenance,
    APACHE_INSTRUCTIONS_PER_IO, APACHE_INSTRUCTIONS_PER_REQUEST,
    APACHE_UPDATE_INSTRUCTIONS_PER_REQUEST, IMAGESERVER_INSTRUCTIONS_PER_REQUEST,
    ONLINE_REQUESTS_PER_SEC, ONLINE_WORKER_THREADS, PAGE_BYTES, PPM, PUBLISHED_PROFILES,
    WRITEBACK_PROFILES,
};
pub use randmap::RandomMapWalk;
pub use units::KbBase;
pub use zipf::Zipf;

/// The options a job file may use, canonical names with aliases in parentheses.
pub fn supported_options() -> String {
    options::supported_list()
}

impl JobFile {
    /// Parses fio job-file text. `source_name` (usually the path) starts every error message.
    pub fn parse_fio(text: &str, source_name: &str) -> Result<JobFile, JobError> {
        fio::parse_fio(text, source_name)
    }

    /// Parses a TOML job file (fio option names as keys; see the `jobtoml` module).
    pub fn parse_toml(text: &str, source_name: &str) -> Result<JobFile, JobError> {
        jobtoml::parse_toml(text, source_name)
    }

    /// Reads and parses a job file: `.toml` as TOML, anything else (`.fio`, `.ini`, …) as fio.
    pub fn load(path: impl AsRef<Path>) -> Result<JobFile, JobError> {
        let path = path.as_ref();
        let source_name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| JobError::Io {
            path: source_name.clone(),
            source,
        })?;
        let is_toml = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("toml"));
        if is_toml {
            Self::parse_toml(&text, &source_name)
        } else {
            Self::parse_fio(&text, &source_name)
        }
    }

    /// Number of stonewall groups (jobs in one group run together; groups run in order).
    pub fn groups(&self) -> u32 {
        self.jobs.last().map_or(0, |job| job.group + 1)
    }
}
