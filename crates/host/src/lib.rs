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
//! statistic is split by class. The latency-class *mechanisms* (block-layer bypass, a
//! high-priority SQ per core, selective polling, the queue accelerator, adaptive dirty
//! thresholds) are not built yet; the attribute and the hooks they need are (`Merges::
//! AdjacentAndSameLba`, `CompletionMode`, the write-back wave hint, `DeviceCqe::
//! write_buffer_pct`).
//!
//! Each module opens with its essay: what it models, a worked example, what it leaves out and
//! its config keys. All CPU costs are in [`config::HostConfig`] with the presets `arm8`,
//! `arm8-4g` and `x86-4`.

pub mod app;
pub mod blk;
pub mod config;
pub mod cpu;
pub mod machine;
pub mod nvme;
pub mod pagecache;

/// Page size of the page cache and of profile I/O.
pub const PAGE_BYTES: u64 = 4096;

pub use app::{
    Arrivals, IoGaps, ProcessKind, ProcessReport, ProcessSpec, TraceMode, TraceRecord, Workload,
};
pub use config::{CompletionMode, HostConfig, HostConfigError, HOST_PRESETS};
pub use cpu::{Cat, CoreStats, CATS};
pub use machine::{Breakdown, Host, HostError, HostReport};
pub use nvme::{DeviceCqe, HostCommand, QueuePairSpec};
