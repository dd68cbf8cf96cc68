//! The host stack: what a Linux server does with an I/O between a process and the NVMe device,
//! at the level of detail where queueing, CPU time and interference show.
//!
//! ```text
//!  application (online service / offline job / fio job)   app        ─┐
//!    CPU cores, CFS-like scheduler, interrupts             cpu         │
//!    page cache, read-ahead, dirty pages, write-back       pagecache   │ this crate
//!    blk-mq: bios, plug, merge, sw/hw queues, schedulers   blk         │
//!    NVMe driver: queue pairs, doorbells, irq / poll       nvme       ─┘
//!  ── HostCommand ▼ / ▲ DeviceCqe ──  (the `sim` crate routes them to and from `device`)
//! ```
//!
//! [`Host`] (module `machine`) wires the layers into one deterministic state machine with one
//! event queue and two clocks, like the device: ask [`Host::next_event_time`], run
//! [`Host::step`], collect the commands it issued with [`Host::take_commands`] and hand it the
//! device's completions with [`Host::deliver`]. Every I/O record carries the issuing process's
//! class (`IoClass`) — bios, requests, the NVMe command's reserved field, and dirty pages (which
//! remember the class of the process that dirtied them, so write-back keeps it) — and every
//! statistic is split by class. The kernel *knows* the class only with `attr = "on"`
//! (otherwise merges ignore it and the device sees every command unclassified), and the
//! latency-class mechanisms are switches that need it: block-layer bypass (`blk.bypass_lc`,
//! `blk_bypass`), a high-priority twin SQ per queue (`nvme.lc_queue`), selective polling
//! (`nvme.completion = "selective"`), a dedicated polling core (`nvme.dedcore`, `dedcore`),
//! the queue accelerator (`nvme.accelerator`: the model `accel`, the host's path
//! `accel_path`). Deferred queue runs go through a kblockd worker per core (`kblockd`), a
//! nice −20 kernel thread that must win its core. Adaptive dirty
//! thresholds and the write-back wave hint are `pagecache`'s and `writeback`'s.
//!
//! Each module opens with its essay: what it models, a worked example, what it leaves out and
//! its config keys. All CPU costs are in [`config::HostConfig`] with the presets `arm8`,
//! `arm8-4g` and `x86-4`.
//!
//! ## Modules, by layer
//! Each layer's *state* (and the operations on it alone) is a module of the crate; its
//! *behaviour* — what the kernel does on that layer's call paths, moving work between layers
//! and charging CPU time — is an `impl Host` block in a child module of `machine`, named for
//! the layer:
//!
//! ```text
//!  layer                           state                  behaviour (impl Host, in machine/)
//!  processes, applications         process                app (online, offline), fio (fio, traces)
//!  threads                         task                   machine (burst, sleep, wake)
//!  CPU, scheduler, interrupts      cpu                    machine (events), nvme_complete (irqs)
//!  cost variance, tick             jitter                 tick (the tick)
//!  poll lock (`jitter.poll_lock`)  blk (Hctx)             blk_submit, nvme_complete
//!  read/write system calls         task (IoCtx)           syscall (direct, buffered read/write)
//!  page cache, dirty pages         pagecache              syscall, writeback (flusher, fsync)
//!  write-back work                 flusher                writeback
//!  blk-mq                          blk, blk_bypass        blk_submit (bio, plug, dispatch),
//!                                                         kblockd (deferred queue runs)
//!  NVMe driver                     nvme                   blk_submit (queue_rq), nvme_complete,
//!                                                         dedcore (DedCore's polling core)
//!  queue accelerator (XLER)        accel                  accel_path (registers, fetch, MSI)
//!  latency breakdown               breakdown              nvme_complete (request completion)
//!  execution-time breakdown        exectime               cpu (every thread transition), app
//!                                                         (online requests' hand-overs)
//!  the host as a whole             machine (Host, Ev)     spawn (Host::new), machine (event loop)
//! ```
//!
//! ## State is owned by its layer
//! Rust's privacy draws the lines, so the compiler keeps them:
//! - **[`Host`]'s fields are private to `machine`**: the layers' state objects (`cpu`, `pc`,
//!   `blk`, `threads`, `procs`, `flush`, `nvme`, `accel`) and the configuration `cfg` are
//!   reached only by the `impl Host` code, which is `machine` and its children. Nothing else in
//!   the crate can touch a layer through the host; the sim crate sees only `Host`'s `pub`
//!   methods (`step`, `deliver`, `take_commands`, the read-only views).
//! - **A behaviour module's methods are `pub(super)`** when another behaviour module or the
//!   event loop calls them, private when only their own module does: the routing is visible
//!   inside the machine and nowhere else. The machine's primitives (`burst`, `sleep`, `wake`,
//!   `schedule`, `cost`, `now`, `stopping`, `within_run`, `spin_until_poked`, …) are private
//!   methods of `machine`, which its children may call.
//! - **The machine's own bookkeeping** (clock, event queue, run end, logs, cost draws, the
//!   poll-lock stream, the kblockd workers, DedCore's core) is read and written in
//!   `machine.rs` alone; the children go through those named primitives. A child module could
//!   name its parent's private field, so `tests/layers.rs` checks this one on the source, with
//!   the two rules privacy cannot state: no state module names the machine, and the children
//!   neither import each other nor are named by `machine`.
//! - **A state type keeps its fields private** and offers operations named for what the
//!   caller asks: blk's hardware queue hands out its posted CQEs, its request waiters and its
//!   shared poll lock (`Hctx::reap_posted`, `wait_for_request`, `take_poll_lock`) and counts
//!   what the other layers tell it (`Blk::count_cold_bio`, ...; `Blk::stats` reads the
//!   counters); the scheduler starts a poll spin (`Cpu::spin`), says whether a thread is
//!   polling (`Cpu::is_polling`) and keeps its per-thread state private (`Cpu::sched` reads
//!   it); the page cache, the NVMe driver's books (`nvme::Driver`), the cost draws
//!   (`jitter::CostDraws`), the accelerator's driver (`accel::AccelDriver`), a process's
//!   counters and results (`process::Process`: `count_io`, `count_instructions`, `report`)
//!   and the flusher's work (`flusher::FlusherState`: its passes, wave hint and waiters,
//!   which `writeback` alone drives) likewise. Write-back gives its wave hint to the request
//!   it belongs to (`Host::give_wave_hint`).
//! - **Open records** are the exception, where every layer on the path reads and fills one
//!   record as the kernel's do: the block layer's bios and requests (`Blk::bios`, `Blk::reqs`,
//!   like `struct bio` and `struct request`), a thread's I/O-path state (`task::Thread`,
//!   like `task_struct`: grouped by the layer that keeps each part — `app`, `blk`, `poll`,
//!   `ra`, `fsync` — its modes enums; outside `blk_submit` its submission batch and plug go
//!   through `BlkTask::begin_batch`, `add_to_batch`, `plugged`) and what an application keeps per request or per fio
//!   job (`process::OnlineState`, `FioThread`, `FioJobResult`: `app`'s and `fio`'s, reached
//!   through `Process::online` and `Process::fio_jobs`).
//!
//! ## Dependency order
//! A module imports only modules before it in this order (`grep -rn 'use crate::' src/`):
//!
//! ```text
//!  config → jitter → pagecache → flusher → exectime → cpu → process → blk → blk_bypass → nvme → accel → task
//!         → breakdown → machine → testing (unit tests only) → { jitter_tests, exectime_tests
//!           (unit tests) }
//!  machine's children: { spawn, app, fio, syscall, blk_submit, kblockd, nvme_complete, dedcore,
//!           accel_path, writeback, tick } each use `machine` (`super::Host`, `super::Ev`) and
//!           the state modules; `machine` names none of them
//! ```
//!
//! The state modules know nothing of the machine (the scheduler hands its timers out as
//! `cpu::CoreTimer`s for the machine to wrap in its own events). The behaviour modules import
//! the machine and the state modules, never each other: they call each other's functions as
//! methods of [`Host`], and the event loop calls theirs the same way (so `machine` depends on
//! no child, and the module graph has no cycle). `testing` holds test doubles (a fixed-latency
//! device) for the unit tests. A behaviour's whole-host tests sit in its module
//! (`writeback`'s periodic flush); `exectime_tests` holds the whole-host tests of the
//! execution-time breakdown (its code is in `cpu`, `machine` and `app`). `jitter_tests` holds
//! those of `jitter`'s disturbances, whose code is spread over `tick`, `blk_submit`,
//! `nvme_complete` and `cpu` (and `jitter`, a state module, may not import the machine they
//! drive).

pub mod accel;
pub mod blk;
pub mod blk_bypass;
pub mod breakdown;
pub mod config;
pub mod cpu;
pub mod exectime;
mod flusher;
pub mod jitter;
pub mod machine;
pub mod nvme;
pub mod pagecache;
pub mod process;
mod task;

#[cfg(test)]
mod exectime_tests;
#[cfg(test)]
mod jitter_tests;
#[cfg(test)]
mod testing;

/// Page size of the page cache and of profile I/O.
pub const PAGE_BYTES: u64 = 4096;

/// 512-byte sectors per page.
pub(crate) const SECTORS_PER_PAGE: u64 = PAGE_BYTES / 512;

pub use breakdown::Breakdown;
pub use config::{CompletionMode, HostConfig, HostConfigError, HOST_PRESETS};
pub use cpu::{Cat, CoreStats, CATS};
pub use exectime::{ExecTime, RequestTime, Span, GROUPS, SPANS};
pub use machine::{Host, HostError, HostReport};
pub use nvme::{DeviceCqe, HostCommand, QueuePairSpec, SqPriority};
pub use process::{
    Arrivals, IoGaps, ProcessKind, ProcessReport, ProcessSpec, TraceMode, TraceRecord, TraceSource,
    TraceStream, Workload,
};
