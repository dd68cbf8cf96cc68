//! Threads: what each simulated thread (Linux's `task_struct`, reduced to what the I/O path
//! needs) is doing between its CPU bursts.
//!
//! The scheduler (`cpu`) knows only whether a thread is blocked, runnable or running and how
//! much of its current burst is left. Everything else lives here: the thread's role (server,
//! worker, offline thread, fio clone, flusher), the continuation its burst ends in (`Step`: the
//! machine runs it when the burst ends), why it sleeps (`Wait`), the system call it is in
//! (`IoCtx`), its bios, its plug and its completions to reap, its read-ahead state and its fsync
//! progress, each part in a sub-struct named for the layer that keeps it (`Thread::app`,
//! `blk`, `poll`, `ra`, `fsync`). A thread is in exactly one of: running a burst
//! (`wait == Wait::None`) or asleep for one reason; `Host::sleep` and `Host::wake` assert it.
//!
//! ## What it leaves out
//! Everything a thread has that does not touch the I/O path: signals, memory maps, priorities
//! (all threads have the nice-0 weight but the kblockd workers, `cpu`), CPU affinity beyond the
//! home core (the kblockd workers are bound to theirs).

use engine::rng::exp_ns;
use engine::{IoClass, IoOp, SimRng, SimTime};
use workload::ProfileGenerator;

use crate::config::CompletionMode;
use crate::exectime::Span;
use crate::pagecache::{ReadAhead, NIL};
use crate::process::{FioThread, IoGaps};

/// What a thread does when its current burst ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    App,
    IoEnter,
    PcRead,
    PcCopy,
    PcWrite,
    BioSubmit,
    SubmitRetry,
    Dispatch,
    Driver,
    IoWaitDone,
    ThrottleDone,
    Poll,
    Reap,
    HybridWake,
    FlushPages,
    FsyncStart,
    FsyncPages,
    FsyncDone,
    Reply,
    ServerHandoff,
    FioReap,
}

/// Why a blocked thread sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    None,
    Io,
    ReqAlloc,
    Throttle,
    Rx,
    Work,
    Timer,
    FlusherIdle,
    FioEvents,
    Fsync,
    /// A kblockd worker with no queue to run.
    Kblockd,
}

impl Wait {
    /// The span of its life a thread sleeping for this reason is in (`exectime`): waiting for
    /// I/O (its bios, a request tag, the dirty throttle, fsync's write-back, fio's
    /// `io_getevents`, a hybrid poller's sleep: `then` is `Step::HybridWake`), or idle.
    pub(crate) fn span(self, then: Step) -> Span {
        match self {
            Wait::Io | Wait::ReqAlloc | Wait::Throttle | Wait::FioEvents | Wait::Fsync => {
                Span::IoWait
            }
            Wait::Timer if then == Step::HybridWake => Span::IoWait,
            Wait::Timer | Wait::Rx | Wait::Work | Wait::FlusherIdle | Wait::Kblockd => Span::Idle,
            Wait::None => unreachable!("a thread sleeps for a reason"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Direct,
    Buffered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterIo {
    Finish,
    Copy,
}

/// The system call a thread is in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IoCtx {
    pub(crate) op: IoOp,
    pub(crate) file: u32,
    pub(crate) offset_bytes: u64,
    pub(crate) bytes: u64,
    pub(crate) page: u64,
    pub(crate) pages: u64,
    pub(crate) path: Path,
    pub(crate) completion: CompletionMode,
    pub(crate) hctx: u16,
    pub(crate) started: SimTime,
    /// The thread waits for its bios (false: flusher, async fio).
    pub(crate) wait: bool,
    pub(crate) after: AfterIo,
    pub(crate) fio_slot: u32,
}

impl Default for IoCtx {
    fn default() -> Self {
        IoCtx {
            op: IoOp::Read,
            file: 0,
            offset_bytes: 0,
            bytes: 0,
            page: 0,
            pages: 0,
            path: Path::Direct,
            completion: CompletionMode::Interrupt,
            hctx: 0,
            started: SimTime::ZERO,
            wait: true,
            after: AfterIo::Finish,
            fio_slot: NIL,
        }
    }
}

/// What a thread is for.
pub(crate) enum Role {
    Server {
        req: u32,
    },
    Worker {
        req: u32,
        instr_left: u64,
    },
    Offline,
    Fio(Box<FioThread>),
    Flusher,
    /// DedCore's polling kernel thread (`dedcore`).
    Poller,
    /// A core's kblockd worker (`kblockd`): the base hardware queues it was asked to run.
    Kblockd {
        queues: Vec<u16>,
    },
}

/// One thread's I/O-path state (its scheduling state is `cpu::ThreadSched`), grouped by the
/// layer that owns each part: the thread itself and its system call at the top, then what the
/// application (`app`), the block layer (`blk`), the poll loop (`poll`), read-ahead (`ra`) and
/// fsync (`fsync`) keep for it between its bursts.
pub(crate) struct Thread {
    /// Its process (`u32::MAX`: a kernel thread).
    pub(crate) proc: u32,
    pub(crate) class: IoClass,
    pub(crate) role: Role,
    pub(crate) step: Step,
    pub(crate) wait: Wait,
    /// The system call it is in (`syscall`).
    pub(crate) io: IoCtx,
    /// Bios (or in-flight page reads) the current system call still waits for.
    pub(crate) pending: u32,
    pub(crate) app: AppTask,
    pub(crate) blk: BlkTask,
    pub(crate) poll: PollTask,
    /// Its read-ahead window (`pagecache`).
    pub(crate) ra: ReadAhead,
    pub(crate) fsync: FsyncTask,
}

/// The application's part of a thread (`app`, `fio`): its compute between I/Os and its random
/// stream.
pub(crate) struct AppTask {
    /// Instructions left before the next profile I/O.
    pub(crate) instr_to_io: u64,
    pub(crate) mean_gap: u64,
    pub(crate) gaps: IoGaps,
    pub(crate) gen: Option<ProfileGenerator>,
    pub(crate) rng: SimRng,
    /// Buffered writes done (for `fsync_every_writes`).
    pub(crate) writes: u64,
}

/// Where a thread that sent a request to the driver goes when the doorbell is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterDriver {
    /// On to the next request the hardware queues give it.
    Dispatch,
    /// It was handing bypassing requests to the driver (`blk_bypass`): back to submission.
    Submission,
}

/// How the current bio enters the block layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BioEntry {
    /// Its first try: its block-layer time starts now.
    First,
    /// Again after a wait for a request: it entered before the wait (`bio_started` stays).
    AfterAllocWait,
}

/// Whether the submitter's next dispatch finds the block layer's code and data in its caches
/// (`blk.cold_submit_ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cache {
    Warm,
    /// Its last bio was submitted cold: its next dispatch runs cold too.
    Cold,
}

/// The block layer's part of a thread (`blk_submit`, `blk_bypass`): its submission batch, its
/// plug and the request it is dispatching.
pub(crate) struct BlkTask {
    /// Bios of the current submission batch, submitted in order from `next_bio`.
    pub(crate) bios: Vec<u32>,
    pub(crate) next_bio: usize,
    /// Requests in the thread's plug (not yet in a hardware queue).
    pub(crate) plug: Vec<u32>,
    /// Request the thread is dispatching (`NIL`: none).
    pub(crate) dispatching: u32,
    /// Block-layer bypass (`blk_bypass`): requests to hand to the driver next, in order.
    pub(crate) direct: Vec<u32>,
    pub(crate) after_driver: AfterDriver,
    /// When the current bio's submission began.
    pub(crate) bio_started: SimTime,
    pub(crate) bio_entry: BioEntry,
    /// When this thread last submitted a bio (`blk.cold_submit_ns`).
    pub(crate) last_bio_submit: SimTime,
    pub(crate) dispatch_cache: Cache,
}

/// The NVMe poll loop's part of a thread (`nvme_complete`): the completions it is reaping.
pub(crate) struct PollTask {
    /// Polled completions being reaped.
    pub(crate) reap: Vec<u32>,
    /// When the current reap began.
    pub(crate) reap_started: SimTime,
}

/// Write-back's part of a thread in `fsync` (`writeback`).
pub(crate) struct FsyncTask {
    /// File this thread is writing back for `fsync` (`NIL` when not in fsync).
    pub(crate) file: u32,
    /// Run of pages being written back by `fsync`: (first page, pages, owner class).
    pub(crate) run: (u64, u32, IoClass),
}

impl Thread {
    /// A thread of process `proc` (`u32::MAX`: a kernel thread) with no I/O in progress, not
    /// sleeping, its first step the application's; the caller sets the profile fields.
    pub(crate) fn new(
        proc: u32,
        class: IoClass,
        role: Role,
        rng: SimRng,
        plug_max_requests: usize,
    ) -> Thread {
        Thread {
            proc,
            class,
            role,
            step: Step::App,
            wait: Wait::None,
            io: IoCtx::default(),
            pending: 0,
            app: AppTask {
                instr_to_io: 0,
                mean_gap: 0,
                gaps: IoGaps::Fixed,
                gen: None,
                rng,
                writes: 0,
            },
            blk: BlkTask {
                bios: Vec::with_capacity(8),
                next_bio: 0,
                plug: Vec::with_capacity(plug_max_requests),
                dispatching: NIL,
                direct: Vec::new(),
                after_driver: AfterDriver::Dispatch,
                bio_started: SimTime::ZERO,
                bio_entry: BioEntry::First,
                last_bio_submit: SimTime::ZERO,
                dispatch_cache: Cache::Warm,
            },
            poll: PollTask {
                reap: Vec::with_capacity(8),
                reap_started: SimTime::ZERO,
            },
            ra: ReadAhead::default(),
            fsync: FsyncTask {
                file: NIL,
                run: (0, 0, IoClass::Throughput),
            },
        }
    }
}

impl BlkTask {
    /// A new submission batch (a system call's bios, or a write-back run's) begins, empty.
    pub(crate) fn begin_batch(&mut self) {
        self.bios.clear();
        self.next_bio = 0;
    }

    /// Bio `b` joins the batch, to be submitted after the bios before it.
    pub(crate) fn add_to_batch(&mut self, b: u32) {
        self.bios.push(b);
    }

    /// Whether the batch holds any bio.
    pub(crate) fn has_batch(&self) -> bool {
        !self.bios.is_empty()
    }

    /// Requests in the thread's plug.
    pub(crate) fn plugged(&self) -> usize {
        self.plug.len()
    }
}

impl AppTask {
    /// Instructions to the thread's next profile I/O (0 for threads without a profile).
    pub(crate) fn draw_gap(&mut self) -> u64 {
        if self.mean_gap == 0 {
            return 0;
        }
        match self.gaps {
            IoGaps::Fixed => self.mean_gap,
            IoGaps::Exponential => exp_ns(&mut self.rng, self.mean_gap).max(1),
        }
    }
}
