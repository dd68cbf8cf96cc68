//! The NVMe driver: queue pairs, commands, doorbells, and how completions are noticed.
//!
//! ## What it models
//! Each core owns two queue pairs (SQ + CQ, `nvme.queue_depth` entries): an interrupt-driven one
//! for ordinary I/O and a polled one (its MSI-X vector masked) for synchronous direct I/O when
//! `nvme.completion` is `polled` or `hybrid` (Linux's `poll_queues`). SQ/CQ ids: interrupt
//! queues 1..=N for cores 0..N-1, poll queues N+1..=2N. With `nvme.poll_queues` = n below the
//! core count only the first n poll queues are used, core c polling queue N+1+(c mod n): their
//! pollers and submitters then meet on one queue (and, with `jitter.poll_lock = "shared"`, on
//! its lock — see `jitter`).
//!
//! **Latency-critical SQs** (`nvme.lc_queue = "on"`, needs `attr`; FlashShare's two SQs per
//! core): every queue pair gets a twin SQ that shares its CQ, created with priority `Urgent`;
//! latency-critical requests go to the twin (`blk::route`), everything else to the ordinary SQ
//! (`Medium`). The driver selects strict-priority arbitration when it enables the controller
//! ([`Host::strict_priority`](crate::Host::strict_priority)), so the device fetches the twin's
//! commands first; the device's drain rule (`ctrl.drain_entries` 8, `ctrl.drain_after_ns`
//! 200 µs, `device::ctrl`) keeps the ordinary SQ from starving. Twins take SQ ids 2N+1..=4N in
//! the order of the queues they twin; completions of both SQs land on the shared CQ and are
//! handled as that CQ's (interrupt, or polled with its vector masked). Worked example (8
//! cores): core 3's interrupt queue is SQ/CQ 4; its twin is SQ 20 on CQ 4.
//!
//! `nvme_queue_rq` (`queue_rq_ns`) turns a dispatched request into a command — op, LBA, length
//! and, in the reserved field, the request's class and any write-back wave hint — writes it into
//! the SQ and rings the doorbell (`doorbell_write_ns` of CPU; the device models the link
//! latency). The device fetches it on its own.
//!
//! Completion, per queue kind:
//! - **Interrupt**: the device posts the CQE and raises the MSI on the queue's core: ISR
//!   (`cpu.isr_ns`, once per interrupt; CQEs arriving while the handler runs join it), then the
//!   block-layer completion (`blk.complete_ns` per request) which wakes the waiting thread; the
//!   thread then pays a context switch to run again.
//! - **Polled**: the submitting thread spins on the CQ (category `poll`, its core 100 % busy,
//!   and it can be preempted like any thread). A CQE is seen `poll_iteration_ns` after it lands
//!   if the poller is on its core, else as soon as the poller runs again; completing it costs
//!   `poll_complete_ns` (cheaper than ISR + completion: warm caches, no switch).
//! - **Hybrid**: the thread first sleeps for `hybrid_sleep_pct` % of the mean latency of recent
//!   polled I/O on its queue (a timer interrupt wakes it), then polls (Linux's hybrid polling).
//! - **Selective** (`completion = "selective"`, needs `attr`; FlashShare's selective ISR): a
//!   latency-critical thread's synchronous direct I/O is polled, everything else (throughput
//!   threads, asynchronous and buffered I/O) takes interrupts. The polled I/O uses the core's
//!   poll queue (or, with `lc_queue`, its urgent twin sharing the poll CQ), whose vector is
//!   masked: only latency-critical pollers use that CQ, so it is masked exactly while they
//!   poll, and a throughput completion never lands on it.
//!
//! Worked example (arm8, zssd 4 KiB read): polled — the thread spins ≈ 10 µs of device time,
//! sees the CQE within 0.2 µs and completes it in 3.5 µs; interrupt — the core is free during
//! the device time but the CQE costs 2.5 µs ISR + 1.5 µs completion + 2.5 µs switch.
//!
//! ## What it leaves out
//! Admin queue traffic, SQ-full handling beyond blk-mq's tags (tags = depth − 1 guarantee room),
//! interrupt coalescing in the device, PRP/SGL list memory traffic.
//!
//! Config keys: `nvme.*`.

use engine::{IoClass, IoOp, SimTime};
use serde::{Deserialize, Serialize};

use crate::blk::{QueueKind, Request};

/// A command the host put in an SQ and rang the doorbell for at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCommand {
    pub at: SimTime,
    pub sqid: u16,
    /// Command id (the block-layer request id), echoed in the completion.
    pub cid: u32,
    pub op: IoOp,
    /// First 512-byte sector.
    pub slba: u64,
    pub sectors: u32,
    /// The class, in the command's reserved field (`Throughput`, unclassified, when
    /// `attr = "off"`).
    pub class: IoClass,
    /// Write-back wave hint: the wave's page count (0 = no hint).
    pub wave_pages: u32,
}

/// A completion entry as the device posted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCqe {
    pub at: SimTime,
    pub cqid: u16,
    pub cid: u32,
    pub success: bool,
    /// Whether an MSI was raised (false on masked, polled queues).
    pub interrupt: bool,
    /// Device status in the entry: write-buffer occupancy, percent.
    pub write_buffer_pct: u8,
}

/// A queue pair the host creates at start-up (admin commands). Latency-critical SQs
/// (`nvme.lc_queue`) share the CQ of the queue they twin: their `cqid` is that queue's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuePairSpec {
    pub sqid: u16,
    pub cqid: u16,
    pub depth: u32,
    /// MSI-X enabled (false: a poll queue).
    pub interrupts: bool,
    pub core: u16,
    /// The SQ's priority in the Create I/O SQ command (NVMe QPRIO).
    pub priority: SqPriority,
}

/// NVMe SQ priority as the driver asks for it (QPRIO of Create I/O SQ); the device's
/// arbitration reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqPriority {
    Urgent,
    Medium,
}

/// Driver counters.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NvmeStats {
    pub commands_latency_critical: u64,
    pub commands_throughput: u64,
    pub interrupts: u64,
    /// CQEs that joined an interrupt handler already running.
    pub coalesced_completions: u64,
    pub polled_completions: u64,
    pub hybrid_sleeps: u64,
    pub doorbells: u64,
    /// Shared poll lock (`jitter.poll_lock`): submissions that waited for it, and how long.
    pub submit_lock_waits: u64,
    pub submit_lock_wait_ns: u64,
    /// Shared poll lock: reaps that waited for a submitter to release it, and how long.
    pub poll_lock_waits: u64,
    pub poll_lock_wait_ns: u64,
    /// Last write-buffer occupancy the device reported, percent.
    pub last_write_buffer_pct: u8,
    /// Requests the queue accelerator merged into a waiting entry (omitted at 0).
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub accel_merges: u64,
}

/// Builds the command for a dispatched request. The reserved field carries the request's
/// class only when the kernel knows classes (`attr`); otherwise every command goes out
/// unclassified, which the device reads as `Throughput` (its default class).
pub fn command(at: SimTime, sqid: u16, cid: u32, req: &Request, attr: bool) -> HostCommand {
    HostCommand {
        at,
        sqid,
        cid,
        op: req.op,
        slba: req.sector,
        sectors: req.sectors,
        class: if attr { req.class } else { IoClass::Throughput },
        wave_pages: req.wave_pages,
    }
}

/// Queue pairs for `cores` cores: interrupt queues, then poll queues, then (with
/// `lc_queue`) one urgent latency-critical SQ per queue, in the same order, on its CQ.
pub fn queue_pairs(cores: u16, depth: u32, lc_queue: bool) -> Vec<QueuePairSpec> {
    let mut v = Vec::new();
    for kind in [QueueKind::Interrupt, QueueKind::Poll] {
        for core in 0..cores {
            let id = v.len() as u16 + 1;
            v.push(QueuePairSpec {
                sqid: id,
                cqid: id,
                depth,
                interrupts: kind == QueueKind::Interrupt,
                core,
                priority: SqPriority::Medium,
            });
        }
    }
    if lc_queue {
        let base = v.len();
        for i in 0..base {
            v.push(QueuePairSpec {
                sqid: (base + i + 1) as u16,
                priority: SqPriority::Urgent,
                ..v[i]
            });
        }
    }
    v
}

/// The NVMe driver's books: the queue pairs it created, the commands rung in and not yet taken
/// by the device side, how many commands left and how many completions came back (each
/// command completes once), and its counters.
pub(crate) struct Driver {
    queue_pairs: Vec<QueuePairSpec>,
    out: Vec<HostCommand>,
    sent: u64,
    completed: u64,
    stats: NvmeStats,
}

impl Driver {
    pub(crate) fn new(queue_pairs: Vec<QueuePairSpec>) -> Driver {
        Driver {
            queue_pairs,
            out: Vec::with_capacity(64),
            sent: 0,
            completed: 0,
            stats: NvmeStats::default(),
        }
    }

    pub(crate) fn queue_pairs(&self) -> &[QueuePairSpec] {
        &self.queue_pairs
    }

    /// The driver's counters so far.
    pub(crate) fn stats(&self) -> &NvmeStats {
        &self.stats
    }

    /// Counts an MSI raised for a CQE (no handler was running on its core).
    pub(crate) fn count_interrupt(&mut self) {
        self.stats.interrupts += 1;
    }

    /// Counts a CQE that joined an interrupt handler already running.
    pub(crate) fn count_coalesced_completion(&mut self) {
        self.stats.coalesced_completions += 1;
    }

    /// Counts a completion reaped by polling (a thread's or DedCore's).
    pub(crate) fn count_polled_completion(&mut self) {
        self.stats.polled_completions += 1;
    }

    /// Counts a hybrid poller's sleep before it spins.
    pub(crate) fn count_hybrid_sleep(&mut self) {
        self.stats.hybrid_sleeps += 1;
    }

    /// Counts a submission that waited `wait_ns` for the shared poll lock.
    pub(crate) fn count_submit_lock_wait(&mut self, wait_ns: u64) {
        self.stats.submit_lock_waits += 1;
        self.stats.submit_lock_wait_ns += wait_ns;
    }

    /// Counts a reap that waited `wait_ns` for a submitter to release the shared poll lock.
    pub(crate) fn count_poll_lock_wait(&mut self, wait_ns: u64) {
        self.stats.poll_lock_waits += 1;
        self.stats.poll_lock_wait_ns += wait_ns;
    }

    /// Counts a request the queue accelerator merged into a waiting entry.
    pub(crate) fn count_accel_merge(&mut self) {
        self.stats.accel_merges += 1;
    }

    /// Notes the write-buffer occupancy the device reported last, percent.
    pub(crate) fn note_write_buffer_pct(&mut self, pct: u8) {
        self.stats.last_write_buffer_pct = pct;
    }

    /// Command `cmd` leaves with its doorbell; it counts under `class` (the class of the
    /// requests it carries, which the command shows only with `attr = "on"`).
    pub(crate) fn send(&mut self, cmd: HostCommand, class: IoClass) {
        self.out.push(cmd);
        self.sent += 1;
        self.stats.doorbells += 1;
        match class {
            IoClass::LatencyCritical => self.stats.commands_latency_critical += 1,
            IoClass::Throughput => self.stats.commands_throughput += 1,
        }
    }

    /// Moves the commands sent so far into `out` (in the order they were sent).
    #[inline]
    pub(crate) fn take_commands(&mut self, out: &mut Vec<HostCommand>) {
        if !self.out.is_empty() {
            out.append(&mut self.out);
        }
    }

    /// A completion came back: never more than commands sent.
    pub(crate) fn completion(&mut self) {
        self.completed += 1;
        assert!(
            self.completed <= self.sent,
            "{} completions for {} commands",
            self.completed,
            self.sent
        );
    }

    /// Commands sent so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// Completions received so far.
    pub(crate) fn completed(&self) -> u64 {
        self.completed
    }

    /// Whether every command sent has completed.
    pub(crate) fn all_completed(&self) -> bool {
        self.sent == self.completed
    }
}

/// Hybrid polling: how long to sleep before polling, given the queue's recent mean latency.
pub fn hybrid_sleep_ns(mean_ns: u64, pct: u32) -> u64 {
    mean_ns * pct as u64 / 100
}

/// Updates an exponentially weighted mean (weight 1/8 for the new sample).
pub fn ewma(mean_ns: u64, sample_ns: u64) -> u64 {
    if mean_ns == 0 {
        sample_ns
    } else {
        (mean_ns * 7 + sample_ns) / 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver counts each command once, under the class of the requests it carries (not
    /// the class its reserved field shows), hands the commands over in the order they were
    /// sent, and stops the run at a completion for a command it never sent.
    #[test]
    fn the_driver_counts_commands_and_refuses_a_completion_too_many() {
        let mut d = Driver::new(queue_pairs(1, 64, false));
        let cmd = |cid| HostCommand {
            at: SimTime(cid as u64),
            sqid: 1,
            cid,
            op: IoOp::Read,
            slba: 0,
            sectors: 8,
            class: IoClass::Throughput,
            wave_pages: 0,
        };
        d.send(cmd(5), IoClass::LatencyCritical);
        d.send(cmd(6), IoClass::Throughput);
        let mut out = Vec::new();
        d.take_commands(&mut out);
        assert_eq!(out.iter().map(|c| c.cid).collect::<Vec<_>>(), [5, 6]);
        d.take_commands(&mut out);
        assert_eq!(out.len(), 2, "taken once");
        let s = &d.stats;
        assert_eq!(
            (
                s.doorbells,
                s.commands_latency_critical,
                s.commands_throughput
            ),
            (2, 1, 1)
        );
        d.completion();
        assert!(!d.all_completed());
        d.completion();
        assert!(d.all_completed());
        assert_eq!((d.sent(), d.completed()), (2, 2));
        let extra = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.completion()));
        assert!(extra.is_err(), "a third completion for two commands");
    }

    #[test]
    fn queue_ids_follow_the_layout() {
        let q = queue_pairs(4, 1024, false);
        assert_eq!(q.len(), 8);
        assert_eq!((q[0].sqid, q[0].core, q[0].interrupts), (1, 0, true));
        assert_eq!((q[5].sqid, q[5].core, q[5].interrupts), (6, 1, false));
        assert!(q.iter().all(|p| p.priority == SqPriority::Medium));
        // Latency-critical twins: SQs 9..=16 on CQs 1..=8, urgent.
        let q = queue_pairs(4, 1024, true);
        assert_eq!(q.len(), 16);
        let twin = q[8 + 5];
        assert_eq!(
            (twin.sqid, twin.cqid, twin.core, twin.interrupts),
            (14, 6, 1, false)
        );
        assert_eq!(twin.priority, SqPriority::Urgent);
    }

    #[test]
    fn hybrid_sleeps_half_the_mean() {
        let mut m = 0;
        for _ in 0..100 {
            m = ewma(m, 10_000);
        }
        assert_eq!(hybrid_sleep_ns(m, 50), 5_000);
    }
}
