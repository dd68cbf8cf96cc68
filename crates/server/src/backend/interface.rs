//! The interface every backend implements and the dataplane uses (the design is in
//! `backend/mod.rs`): the operations and their errors and completions, the per-worker
//! [`Backend`] and the shared [`Volume`] traits, allocation runs and write-path counters. The
//! backends (`memory`, `file`, `emulated`) and their parent, which opens them, all use it; it
//! uses none of them.

use std::os::fd::RawFd;
use std::sync::Arc;

use engine::IoClass;

use crate::buf::{IoBuf, PageViews};
use crate::sys::{Cqe, FixedRegions, Sqe};

/// One storage operation, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageOp {
    /// Fill the buffer (its length) from `offset_bytes`.
    Read { offset_bytes: u64 },
    /// Write the buffer at `offset_bytes`; `fua`: durable before completion.
    Write { offset_bytes: u64, fua: Fua },
    /// Make every completed write durable.
    Flush,
    /// The range may be discarded (reads may then return zeros or old data; we return zeros).
    Trim { offset_bytes: u64, len_bytes: u64 },
    /// The range reads back as zeros.
    WriteZeroes {
        offset_bytes: u64,
        len_bytes: u64,
        fua: Fua,
    },
}

impl StorageOp {
    /// `(offset, length)` of a range operation (TRIM, WRITE_ZEROES), whose bytes are in the
    /// op, not in a buffer.
    pub fn range_bytes(self) -> Option<(u64, u64)> {
        match self {
            StorageOp::Trim {
                offset_bytes,
                len_bytes,
            }
            | StorageOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                ..
            } => Some((offset_bytes, len_bytes)),
            StorageOp::Read { .. } | StorageOp::Write { .. } | StorageOp::Flush => None,
        }
    }
}

/// Forced unit access on a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fua {
    No,
    Yes,
}

/// Why a storage operation failed (mapped to the protocol's status codes by the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error from the backend: {0}")]
    Io(i32),
    #[error("no space left on the backend")]
    NoSpace,
    #[error("operation not supported by this backend")]
    NotSupported,
}

impl StorageError {
    /// From a negative errno returned by io_uring or a syscall.
    pub fn from_errno(errno: i32) -> StorageError {
        match errno {
            libc::ENOSPC | libc::EDQUOT => StorageError::NoSpace,
            libc::EOPNOTSUPP | libc::EINVAL => StorageError::NotSupported,
            other => StorageError::Io(other),
        }
    }
}

/// A finished operation, with the buffer handed back.
#[derive(Debug)]
pub struct Completion {
    pub tag: u64,
    pub result: Result<(), StorageError>,
    pub buf: IoBuf,
    /// A successful read's data as views of a memory volume's pages (`crate::buf`, *Replies
    /// from a memory volume's pages*): the reply sends them, and `buf`, unused, goes back to
    /// the pool. `None`: the data is in `buf`.
    pub pages: Option<PageViews>,
}

/// What `submit` did with a request.
#[derive(Debug)]
pub enum Submitted {
    /// Finished inside `submit` (memory backend, or refused before reaching storage).
    Done(Completion),
    /// Queued; its completion comes from a later `poll`.
    Pending,
}

/// What a volume's backend can do, advertised truthfully to NBD clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub flush: bool,
    pub fua: bool,
    pub trim: bool,
    pub write_zeroes: bool,
    /// A FLUSH on one connection covers writes completed on all connections.
    pub multi_conn: bool,
    /// Reads of unwritten ranges are fast and return zeros (NBD_FLAG_SEND_FAST_ZERO not used).
    pub read_only: bool,
}

/// A backend as one worker sees it.
pub trait Backend: Send {
    /// Starts an operation. `buf` holds the write payload or receives the read data (its length
    /// is the request length); for Flush/Trim/WriteZeroes it is empty. `class` is the I/O class
    /// of the flow the request came on (latency-critical flows have an SLO); a backend that
    /// models a device passes it on in the command, as a host with the class attribute would.
    fn submit(&mut self, tag: u64, op: StorageOp, class: IoClass, buf: IoBuf) -> Submitted;
    /// Pushes everything queued since the last call to the device (one syscall per step).
    fn commit(&mut self) {}
    /// Collects finished operations into `out`; `now_ns` drives time-based backends.
    fn poll(&mut self, now_ns: u64, out: &mut Vec<Completion>);
    /// Operations submitted and not yet returned by `poll`.
    fn in_flight(&self) -> usize;
    /// When a time-driven backend next has something to complete (None: not time-driven).
    fn next_event_ns(&self) -> Option<u64> {
        None
    }
    /// A descriptor that becomes readable when completions are ready (for `epoll`).
    fn wake_fd(&self) -> Option<RawFd> {
        None
    }
    /// The backend as a guest of another's io_uring (a file volume, whose operations may go
    /// into the worker's socket ring: `[dataplane] file_io = "socket-ring"`); `None` for
    /// backends without io_uring work.
    fn ring_guest(&mut self) -> Option<&mut dyn RingGuest> {
        None
    }
}

/// An io_uring another owns (the worker's socket ring), as a guest backend pushes into it:
/// what it pushes goes to the kernel with the owner's next `io_uring_enter`, and its
/// completions come back to the guest through [`RingGuest::complete`], user data as pushed.
pub trait HostRing {
    /// Pushes `sqe` with `user_data` (below 2^48, or with bit 62 set: the owner keeps the bits
    /// between for itself); gives it back when the submission queue is full.
    fn push(&mut self, user_data: u64, sqe: Sqe<IoBuf>) -> Result<(), Sqe<IoBuf>>;
    /// Whether the submission queue is full (submit, then push again).
    fn is_full(&mut self) -> bool;
    /// Gives the kernel what was pushed (only when the queue is full: the owner's enter
    /// submits the rest).
    fn submit(&mut self) -> std::io::Result<usize>;
    /// Registers `home`'s regions as the ring's fixed buffers (once per ring: a second
    /// registration is refused).
    fn register_buffers(&mut self, home: Arc<dyn FixedRegions>) -> std::io::Result<()>;
}

/// A backend whose io_uring operations can move into a [`HostRing`].
pub trait RingGuest {
    /// Moves the backend's operations onto `host` from now on (its own ring closed, not
    /// watched any more); false when it stays on its own ring (operations in flight there).
    fn join(&mut self, host: &mut dyn HostRing) -> bool;
    /// Whether its operations go into a host ring.
    fn hosted(&self) -> bool;
    /// Pushes what waits into `host` (the step's `commit`, and after completions: retries).
    fn fill(&mut self, host: &mut dyn HostRing);
    /// One completion of an operation it pushed into the host.
    fn complete(&mut self, cqe: Cqe<IoBuf>, out: &mut Vec<Completion>);
}

/// A run of bytes with one allocation status, as [`Volume::allocation`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRun {
    pub len_bytes: u64,
    /// Not allocated: reads return zeros and no storage backs it (NBD `base:allocation`'s
    /// `STATE_HOLE | STATE_ZERO`).
    pub hole: bool,
}

/// Appends `run` to `out`, merging it into the last run when their status matches.
pub fn push_run(out: &mut Vec<AllocRun>, run: AllocRun) {
    if run.len_bytes == 0 {
        return;
    }
    match out.last_mut() {
        Some(last) if last.hole == run.hole => last.len_bytes += run.len_bytes,
        _ => out.push(run),
    }
}

/// A volume's backend, shared by all workers.
pub trait Volume: Send + Sync {
    fn size_bytes(&self) -> u64;
    fn caps(&self) -> Caps;
    /// The allocation status of `[offset, offset + len)` (inside the volume), as runs from
    /// `offset` on, appended to `out`: at most `max_runs` runs, which may cover less than
    /// `len` when that limit cuts them short, never more. Metadata only, answered at once
    /// (NBD_CMD_BLOCK_STATUS). The default says "all allocated", true of any volume.
    fn allocation(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        max_runs: usize,
        out: &mut Vec<AllocRun>,
    ) -> Result<(), StorageError> {
        let _ = (offset_bytes, max_runs);
        push_run(
            out,
            AllocRun {
                len_bytes,
                hole: false,
            },
        );
        Ok(())
    }
    /// The backend kind, for logs and metrics labels.
    fn kind(&self) -> &'static str;
    /// A per-worker handle (its own io_uring for file volumes).
    fn attach(self: Arc<Self>) -> Result<Box<dyn Backend>, BackendError>;
    /// Commands the volume's device model has received, `[latency-critical, throughput]`, for
    /// volumes backed by a model (`None` for real storage).
    fn device_commands_by_class(&self) -> Option<[u64; 2]> {
        None
    }
    /// Which path the volume's writes took, for volumes that choose one per write (file
    /// volumes; `None` for the others).
    fn write_paths(&self) -> Option<WritePaths> {
        None
    }
    /// Reads that went in with a registered buffer and reads that found none free,
    /// `[registered, fallback]`, for volumes with registered buffers (file volumes with
    /// `fixed_buffers`; `None` for the others).
    fn fixed_reads(&self) -> Option<[u64; 2]> {
        None
    }
}

/// Which path a file volume's writes took, counted per request over every worker since the
/// volume was opened (`backend/file.rs`, *Partial-block writes*).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WritePaths {
    /// Writes of whole file-system blocks through `O_DIRECT`.
    pub direct_block_writes: u64,
    /// Partial-block writes the file system took through `O_DIRECT` without waiting (pure
    /// overwrites of written, uncached blocks).
    pub direct_partial_block_writes: u64,
    /// Partial-block writes the file system refused without waiting (a hole, an unwritten or
    /// delayed-allocation block, cached pages: what would have been a serialized
    /// read-modify-write), or that found buffered writes in the kernel on their stretch of the
    /// file (`backend/file/pages.rs`), and that went through the page cache instead.
    pub partial_block_writes_to_page_cache: u64,
    /// Writes sent to the page cache at once (not aligned to the direct-I/O alignment, or no
    /// `O_DIRECT` descriptor; whole-block writes whose stretch had buffered writes in the
    /// kernel).
    pub buffered_writes: u64,
    /// Writes that would have gone to the page cache but went through `O_DIRECT` (blocking)
    /// because direct writes were in the kernel on their stretch.
    pub direct_rerouted_writes: u64,
}

/// Why a volume could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("volume {volume:?}: {path}: {source}")]
    Open {
        volume: String,
        path: String,
        source: std::io::Error,
    },
    #[error("volume {volume:?}: {what}")]
    Invalid { volume: String, what: String },
    #[error("io_uring setup failed: {0}")]
    Ring(std::io::Error),
}
