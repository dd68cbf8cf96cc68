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
//! Each layer's *state* (and the operations on it alone) is one module; its *behaviour* — what
//! the kernel does on that layer's call paths, moving work between layers and charging CPU
//! time — is an `impl Host` block in a module of its own, named for the layer:
//!
//! ```text
//!  layer                           state                  behaviour (impl Host)
//!  processes, applications         process                app (online, offline), fio (fio, traces)
//!  threads                         task                   machine (burst, sleep, wake)
//!  CPU, scheduler, interrupts      cpu                    machine (events), nvme_complete (irqs)
//!  cost variance, tick             jitter                 tick (the tick)
//!  poll lock (`jitter.poll_lock`)  blk (Hctx)             blk_submit, nvme_complete
//!  read/write system calls         task (IoCtx)           syscall (direct, buffered read/write)
//!  page cache, dirty pages         pagecache              syscall, writeback (flusher, fsync)
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
//! A behaviour module changes another layer's state only through that layer's operations,
//! named for what it asks: blk's hardware queue hands out its posted CQEs, its request
//! waiters and its shared poll lock (`Hctx::reap_posted`, `wait_for_request`,
//! `take_poll_lock`) and counts what the other layers tell it (`Blk::count_cold_bio`, ...;
//! `Blk::stats` reads the counters); the scheduler starts a poll spin (`Cpu::spin`), says
//! whether a thread is polling (`Cpu::is_polling`) and keeps its per-thread state private
//! (`Cpu::sched` reads it); the NVMe driver's books (`nvme::Driver`) count what is sent and
//! completed; write-back gives its wave hint to the request it belongs to
//! (`Host::give_wave_hint`). A thread's I/O-path state (`task::Thread`) is grouped by the layer
//! that keeps it (`app`, `blk`, `poll`, `ra`, `fsync`), its modes are enums. The machine's own
//! bookkeeping (clock, event queue, run end, logs, cost draws, the poll-lock stream, the
//! kblockd workers, DedCore's core) is private to `machine`: the layers call `Host::now`,
//! `Host::schedule`, `Host::cost`, `Host::stopping`, `Host::within_run`,
//! `Host::spin_until_poked`, …, and `spawn` assembles a host from its layers' state
//! (`HostParts`). The layers' state objects stay crate-visible fields of `Host` (`cpu`, `pc`,
//! `blk`, `threads`, `procs`, `flush`, `nvme`, `accel`, and the configuration `cfg`). The block layer's bios and requests stay open records (`Blk::bios`,
//! `Blk::reqs`): every layer on the path reads them, as the kernel's `struct bio` and
//! `struct request` are.
//!
//! ## Dependency order
//! A module imports only modules before it in this order (`grep -n 'use crate::' src/*.rs`):
//!
//! ```text
//!  config → jitter → pagecache → exectime → cpu → process → blk → blk_bypass → nvme → accel → task
//!         → breakdown → machine → testing (unit tests only) → { spawn, app, fio, syscall,
//!           blk_submit, kblockd, nvme_complete, dedcore, accel_path, writeback, tick, jitter_tests,
//!           exectime_tests (unit tests) }
//! ```
//!
//! The state modules know nothing of the machine (the scheduler hands its timers out as
//! `cpu::CoreTimer`s for the machine to wrap in its own events). The behaviour modules import
//! the machine and the state modules, never each other: they call each other's functions as
//! methods of [`Host`]. `testing` holds test doubles (a fixed-latency device) for the unit
//! tests. A behaviour's whole-host tests sit in its module (`writeback`'s periodic flush);
//! `exectime_tests` holds the whole-host tests of the execution-time breakdown (its code is in
//! `cpu`, `machine` and `app`). `jitter_tests` holds those of `jitter`'s disturbances, whose
//! code is spread over `tick`,
//! `blk_submit`, `nvme_complete` and `cpu` (and `jitter`, a state module, may not import the
//! machine they drive).

pub mod accel;
mod accel_path;
mod app;
pub mod blk;
pub mod blk_bypass;
mod blk_submit;
pub mod breakdown;
pub mod config;
pub mod cpu;
mod dedcore;
pub mod exectime;
mod fio;
pub mod jitter;
mod kblockd;
pub mod machine;
pub mod nvme;
mod nvme_complete;
pub mod pagecache;
pub mod process;
mod spawn;
mod syscall;
mod task;
mod tick;
mod writeback;

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
