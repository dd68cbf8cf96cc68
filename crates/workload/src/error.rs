//! Errors of this crate: each names the bad value, where it was written and what was expected.
//!
//! Job-file errors ([`JobError`]) carry the file name given to the parser and a 1-based line, so
//! the CLI can print them as `jobs/mixed.fio:7: rwmixread=150 is invalid: expected a percentage
//! from 0 to 100`. Generator errors ([`GenError`]) concern a job that parsed but does not fit the
//! device it runs on. Profile errors ([`ProfileError`]) list the known names.

/// A job file that cannot be turned into jobs.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// An option we do not implement: never silently ignored.
    #[error("{source_name}:{line}: option `{key}` is not supported by ullstack; supported options: {supported}")]
    UnsupportedOption {
        source_name: String,
        line: u32,
        key: String,
        supported: String,
    },
    /// A supported option with a value we cannot accept.
    #[error("{source_name}:{line}: {key}={value} is invalid: expected {expected}")]
    InvalidValue {
        source_name: String,
        line: u32,
        key: String,
        value: String,
        expected: String,
    },
    /// An option that needs a value was written as a bare flag.
    #[error("{source_name}:{line}: option `{key}` needs a value: expected {expected}")]
    MissingValue {
        source_name: String,
        line: u32,
        key: String,
        expected: String,
    },
    /// A line that is neither a section header, an option, a comment nor blank.
    #[error("{source_name}:{line}: {message}")]
    Syntax {
        source_name: String,
        line: u32,
        message: String,
    },
    /// Options that are valid alone but not together in one job.
    #[error("{source_name}:{line}: job `{job}`: {message}")]
    Conflict {
        source_name: String,
        line: u32,
        job: String,
        message: String,
    },
    /// The file has no job section.
    #[error("{source_name}: no job defined (a job file needs at least one section other than [global], or one [[job]] in TOML)")]
    NoJobs { source_name: String },
    /// TOML syntax or structure error (unknown key, wrong type), as reported by the TOML reader.
    #[error("{source_name}:{}: {message}", line.map_or_else(|| "?".to_string(), |l| l.to_string()))]
    Toml {
        source_name: String,
        line: Option<u32>,
        message: String,
    },
    /// The file could not be read.
    #[error("cannot read job file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A job that does not fit the device it is run against.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    /// The job's region (start offset + size) runs past the end of the device.
    #[error("job `{job}` clone {job_index}: region {start_bytes}..{end_bytes} (offset + size) exceeds the device capacity of {capacity_bytes} bytes")]
    RegionExceedsCapacity {
        job: String,
        job_index: u32,
        start_bytes: u64,
        end_bytes: u64,
        capacity_bytes: u64,
    },
    /// The region holds less than one block.
    #[error("job `{job}` clone {job_index}: region of {region_bytes} bytes is smaller than one block of {block_size_bytes} bytes")]
    RegionSmallerThanBlock {
        job: String,
        job_index: u32,
        region_bytes: u64,
        block_size_bytes: u64,
    },
    /// A clone index at or past `numjobs`.
    #[error("job `{job}`: clone index {job_index} is out of range (numjobs = {numjobs})")]
    NoSuchClone {
        job: String,
        job_index: u32,
        numjobs: u32,
    },
    /// A parameter the generator cannot use (e.g. a zipf exponent the sampler rejects).
    #[error("{what}: {reason}")]
    BadParameter { what: String, reason: String },
}

/// An unknown built-in profile name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown workload profile `{name}`; known profiles: {known}")]
pub struct ProfileError {
    /// The name asked for.
    pub name: String,
    /// Every known name, comma separated.
    pub known: String,
}
