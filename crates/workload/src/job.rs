//! Jobs: what one fio job section asks the I/O path to do, in integers with units.
//!
//! A [`JobFile`] is the list of jobs of one fio (or TOML) job file in file order; a [`JobSpec`]
//! is one job after `[global]` inheritance, defaults and validation. It says *what* to issue
//! (pattern, mix, block size, region), *how* (engine, completion, buffering, queue depth) and
//! *until when* (size, I/O count, runtime). The simulator turns it into timed I/O with an
//! [`IoGenerator`](crate::IoGenerator) per clone; the calibrator and `bench` use the same type.
//!
//! ## Worked example
//! ```text
//! [global]
//! ioengine=libaio
//! direct=1
//! bs=4k
//! [randread-qd32]
//! rw=randread
//! iodepth=32
//! size=1g
//! ```
//! gives one `JobSpec` with `pattern = RandRead`, `read_pct = 100`, `block_size_bytes = 4096`,
//! `size_bytes = Some(1 << 30)`, `iodepth = 32`, `engine = Async`, `buffering = Direct`,
//! `random_map = CoverEachBlock`: the job reads each of the 262 144 blocks of the first GiB once,
//! in random order, keeping 32 reads in flight, then stops.
//!
//! ## When a job stops (fio semantics)
//! * Without `time_based`: after `io_size` bytes (default: one pass over the region of `size`
//!   bytes), or after `number_ios` I/Os if that comes first, or at `runtime` if set and that comes
//!   first (`runtime` is a cap).
//! * With `time_based`: the job loops over its region until `runtime`; `number_ios` still stops it
//!   early if reached first. `time_based` without a `runtime` is an error (it would never end).
//! * `ramp_time` is lead-in: the job runs that long before results count, and it adds to the
//!   total run time: `runtime` counts after it, and fio resets the job's counters when it ends
//!   (`reset_all_stats`), so `size`, `io_size` and `number_ios` count the I/Os after the ramp
//!   ([`IoGenerator::restart_budget`](crate::IoGenerator::restart_budget)).
//!
//! ## What it leaves out
//! Per-direction block sizes (`bs=4k,8k`), block-size ranges and splits, trims, verification,
//! multiple files, zoned devices, percentages for `size`/`offset`, and non-uniform distributions
//! other than zipf. Such options are rejected by the parsers with the list of supported ones.

use crate::units::KbBase;

/// The I/O pattern (fio `rw`, alias `readwrite`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RwPattern {
    /// `read`: sequential reads.
    Read,
    /// `write`: sequential writes.
    Write,
    /// `randread`: random reads.
    RandRead,
    /// `randwrite`: random writes.
    RandWrite,
    /// `rw` or `readwrite`: sequential mix of reads and writes, split by `rwmixread`.
    ReadWrite,
    /// `randrw`: random mix of reads and writes, split by `rwmixread`.
    RandRw,
}

impl RwPattern {
    /// Every accepted fio spelling with its pattern.
    pub const FIO_NAMES: [(&'static str, RwPattern); 7] = [
        ("read", RwPattern::Read),
        ("write", RwPattern::Write),
        ("randread", RwPattern::RandRead),
        ("randwrite", RwPattern::RandWrite),
        ("rw", RwPattern::ReadWrite),
        ("readwrite", RwPattern::ReadWrite),
        ("randrw", RwPattern::RandRw),
    ];

    /// The pattern fio names `name` (case sensitive, as fio is).
    pub fn from_fio(name: &str) -> Option<RwPattern> {
        Self::FIO_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, p)| p)
    }

    /// The canonical fio name.
    pub fn fio_name(self) -> &'static str {
        match self {
            RwPattern::Read => "read",
            RwPattern::Write => "write",
            RwPattern::RandRead => "randread",
            RwPattern::RandWrite => "randwrite",
            RwPattern::ReadWrite => "rw",
            RwPattern::RandRw => "randrw",
        }
    }

    /// Whether offsets are drawn at random (else they follow each other).
    pub fn access(self) -> Access {
        match self {
            RwPattern::Read | RwPattern::Write | RwPattern::ReadWrite => Access::Sequential,
            RwPattern::RandRead | RwPattern::RandWrite | RwPattern::RandRw => Access::Random,
        }
    }

    /// Whether the pattern mixes reads and writes (so `rwmixread` matters).
    pub fn is_mixed(self) -> bool {
        matches!(self, RwPattern::ReadWrite | RwPattern::RandRw)
    }
}

/// How offsets follow each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Each I/O starts where the previous I/O of the same direction ended.
    Sequential,
    /// Each I/O starts at a random block of the region.
    Random,
}

/// The ioengine named in the job file (fio `ioengine`). Its class is [`IoEngine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FioEngine {
    /// `libaio`: Linux native AIO, asynchronous.
    Libaio,
    /// `io_uring`: asynchronous; with `hipri` the ring is set up for polled completion.
    IoUring,
    /// `sync`: read(2)/write(2) after lseek(2), one I/O at a time.
    Sync,
    /// `psync`: pread(2)/pwrite(2), one I/O at a time (fio's default on Linux).
    Psync,
    /// `pvsync`: preadv(2)/pwritev(2), one I/O at a time.
    Pvsync,
    /// `pvsync2`: preadv2(2)/pwritev2(2), one I/O at a time; `hipri` sets RWF_HIPRI (polling).
    Pvsync2,
}

impl FioEngine {
    /// Every accepted fio spelling with its engine.
    pub const FIO_NAMES: [(&'static str, FioEngine); 6] = [
        ("libaio", FioEngine::Libaio),
        ("io_uring", FioEngine::IoUring),
        ("sync", FioEngine::Sync),
        ("psync", FioEngine::Psync),
        ("pvsync", FioEngine::Pvsync),
        ("pvsync2", FioEngine::Pvsync2),
    ];

    /// The engine fio names `name`.
    pub fn from_fio(name: &str) -> Option<FioEngine> {
        Self::FIO_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, e)| e)
    }

    /// The fio name.
    pub fn fio_name(self) -> &'static str {
        Self::FIO_NAMES
            .iter()
            .find(|(_, e)| *e == self)
            .map(|&(n, _)| n)
            .unwrap_or("?")
    }

    /// Whether the engine keeps several I/Os in flight or issues one at a time.
    pub fn class(self) -> IoEngine {
        match self {
            FioEngine::Libaio | FioEngine::IoUring => IoEngine::Async,
            FioEngine::Sync | FioEngine::Psync | FioEngine::Pvsync | FioEngine::Pvsync2 => {
                IoEngine::Sync
            }
        }
    }

    /// Whether the engine accepts fio's `hipri` flag (polled completion).
    pub fn supports_hipri(self) -> bool {
        matches!(self, FioEngine::IoUring | FioEngine::Pvsync2)
    }
}

/// How a job submits I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum IoEngine {
    /// Up to `iodepth` I/Os in flight; the job submits and reaps without blocking (libaio,
    /// io_uring).
    Async,
    /// One I/O at a time; the issuing thread blocks until it completes (sync, psync, pvsync,
    /// pvsync2). `iodepth` has no effect, as in fio.
    Sync,
}

/// How the job learns that an I/O completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Completion {
    /// The device raises an interrupt; the kernel wakes the job (fio default).
    Interrupt,
    /// The issuing thread polls the completion queue (fio `hipri` with io_uring or pvsync2).
    Polled,
}

/// Whether I/O bypasses the page cache (fio `direct`, inverse `buffered`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Buffering {
    /// `direct=1`: O_DIRECT, straight to the block layer.
    Direct,
    /// `direct=0` (fio default): through the page cache.
    Buffered,
}

/// How random offsets are spread (fio `random_distribution`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Distribution {
    /// `random`: every block equally likely (fio default).
    Uniform,
    /// `zipf:θ`: block of popularity rank r (1-based) drawn with weight r^-θ. fio requires θ ≠ 1.
    /// Non-uniform distributions turn the random map off, as in fio.
    Zipf {
        /// The exponent θ; larger is more skewed.
        theta: f64,
    },
}

/// Whether a random job covers every block once per pass (fio's random map, off with
/// `norandommap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RandomMap {
    /// fio default: each pass over the region touches every block exactly once, in random order.
    CoverEachBlock,
    /// `norandommap`: each offset is drawn independently; blocks may repeat or be skipped.
    Off,
}

/// What ends a job (fio `time_based`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RunUntil {
    /// fio default: stop once the job's bytes (`io_size`, else one pass over `size`) or
    /// `number_ios` are done; `runtime`, when set, caps it.
    IoDone,
    /// `time_based`: loop over the region until `runtime` has passed.
    Runtime,
}

/// When a job starts relative to the jobs before it in the file (fio `stonewall`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum JobStart {
    /// fio default: start together with the jobs before it.
    WithPrevious,
    /// `stonewall` / `wait_for_previous`: wait until every earlier job has finished.
    AfterPrevious,
}

/// How results of the job's clones are reported (fio `group_reporting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reporting {
    /// fio default: one result per clone.
    PerJob,
    /// `group_reporting`: one result for the whole stonewall group.
    PerGroup,
}

/// One job of a job file, after `[global]` inheritance and fio defaults.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobSpec {
    /// Job name: the section name, or fio `name` if given.
    pub name: String,
    /// fio `description`: free text, recorded for reports.
    pub description: Option<String>,
    /// fio `filename`: the file or device the job targets, recorded. The simulator runs the job
    /// against its modelled device whatever this says.
    pub filename: Option<String>,
    /// fio `rw`: the pattern (default `read`).
    pub pattern: RwPattern,
    /// Percent of I/Os that are reads, 0..=100: 100 for read patterns, 0 for write patterns,
    /// fio `rwmixread` (or 100 − `rwmixwrite`, default 50) for `rw`/`randrw`.
    pub read_pct: u8,
    /// fio `bs`: bytes per I/O, a positive multiple of 512 (default 4096).
    pub block_size_bytes: u64,
    /// fio `size`: bytes in the region each clone works on, from its start offset; `None` means
    /// the rest of the device after the start offset.
    pub size_bytes: Option<u64>,
    /// fio `io_size` (alias `io_limit`): bytes to transfer in total, which may be less or more
    /// than `size` (more loops over the region); `None` means one pass over the region.
    pub io_size_bytes: Option<u64>,
    /// fio `offset`: byte where the region starts (default 0), a multiple of 512.
    pub offset_bytes: u64,
    /// fio `offset_increment`: clone `i` (of `numjobs`) starts at `offset + i × this`, in bytes
    /// (default 0: every clone works on the same region, as in fio).
    pub offset_increment_bytes: u64,
    /// fio `iodepth`: I/Os kept in flight by an async engine (default 1). See
    /// [`JobSpec::effective_iodepth`] for what fio actually achieves.
    pub iodepth: u32,
    /// fio `numjobs`: identical clones of this job running side by side (default 1).
    pub numjobs: u32,
    /// fio `runtime` (alias `timeout`), in nanoseconds: the time limit, counted after `ramp_time`;
    /// `None` (or `runtime=0`) means no limit.
    pub runtime_ns: Option<u64>,
    /// fio `time_based`: what ends the job.
    pub run_until: RunUntil,
    /// fio `ramp_time`, in nanoseconds: lead-in before results count; it lengthens the run.
    pub ramp_time_ns: u64,
    /// fio `number_ios`: stop after this many I/Os if nothing stops the job earlier (it never
    /// extends a job); `None` (or 0) means no such limit.
    pub number_ios: Option<u64>,
    /// fio `rate_iops`: cap on I/Os per second for this clone; `None` (or 0) means uncapped.
    pub rate_iops: Option<u64>,
    /// fio `direct` / `buffered` (default buffered, as in fio).
    pub buffering: Buffering,
    /// fio `ioengine` (default `psync`, fio's default on Linux).
    pub ioengine: FioEngine,
    /// The class of `ioengine`: async or synchronous submission.
    pub engine: IoEngine,
    /// fio `hipri`: polled completion (only with io_uring and pvsync2, as in fio).
    pub completion: Completion,
    /// fio `random_distribution` (default uniform).
    pub distribution: Distribution,
    /// fio `norandommap`; forced `Off` for non-uniform distributions, as in fio.
    pub random_map: RandomMap,
    /// fio `thinktime`, in nanoseconds: after an I/O completes the job stalls this long before
    /// issuing the next (fio `thinktime_blocks=1`, which caps the effective depth at 1).
    pub thinktime_ns: u64,
    /// fio `randseed`: mixed into the job's random stream so runs can be varied on purpose;
    /// `None` means the stream depends on the run seed only (fio `randrepeat=1`).
    pub randseed: Option<u64>,
    /// fio `stonewall` / `wait_for_previous`.
    pub start: JobStart,
    /// Stonewall group: 0 for the first jobs, +1 at every job with `start = AfterPrevious`. Jobs
    /// of one group run together; groups run one after another.
    pub group: u32,
    /// fio `group_reporting`.
    pub reporting: Reporting,
    /// fio `kb_base` used to read this job's sizes (recorded for reports).
    pub kb_base: KbBase,
    /// Line of the job's section header (or TOML `[[job]]`) in its file, for messages.
    pub line: u32,
}

impl JobSpec {
    /// The queue depth fio actually achieves: 1 for synchronous engines (fio ignores `iodepth`
    /// there) and for jobs with `thinktime` (fio's default `thinktime_blocks=1` waits for each
    /// I/O), else `iodepth`.
    pub fn effective_iodepth(&self) -> u32 {
        if self.engine == IoEngine::Sync || self.thinktime_ns > 0 {
            1
        } else {
            self.iodepth
        }
    }
}

/// The jobs of one job file, in file order.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobFile {
    /// Jobs in the order they appear; `group` says which ones run together.
    pub jobs: Vec<JobSpec>,
}
