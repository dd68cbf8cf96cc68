//! Test doubles for the host's unit tests: a device that completes every command after a fixed
//! latency (enough to drive the host alone and see when each command left it) and a process
//! running an fio job file.

use std::collections::VecDeque;

use engine::{IoClass, SimTime};
use workload::{Buffering, IoSizeModel, JobFile};

use crate::config::HostConfig;
use crate::machine::Host;
use crate::nvme::{DeviceCqe, HostCommand};
use crate::process::{Arrivals, IoGaps, ProcessSpec, Workload};

/// A device that completes every command `latency_ns` after its doorbell, in order: enough
/// to drive the host alone and see when each command left it.
pub(crate) struct FixedLatencyDevice {
    latency_ns: u64,
    /// Interrupts enabled, by CQ id.
    interrupts: Vec<bool>,
    /// The CQ of each SQ id.
    cq_of: Vec<u16>,
    pending: VecDeque<DeviceCqe>,
    pub(crate) commands: Vec<HostCommand>,
    /// Write-buffer status every completion entry reports (tests of the adaptive thresholds).
    pub(crate) write_buffer_pct: u8,
}

impl FixedLatencyDevice {
    pub(crate) fn new(host: &Host, latency_ns: u64) -> Self {
        let mut interrupts = vec![false; host.queue_pairs().len() + 1];
        let mut cq_of = vec![0; host.queue_pairs().len() + 1];
        for qp in host.queue_pairs() {
            interrupts[qp.cqid as usize] = qp.interrupts;
            cq_of[qp.sqid as usize] = qp.cqid;
        }
        FixedLatencyDevice {
            latency_ns,
            interrupts,
            cq_of,
            pending: VecDeque::new(),
            commands: Vec::new(),
            write_buffer_pct: 0,
        }
    }

    /// Advances host and device through every event before `until` (all, if `None`).
    pub(crate) fn run(&mut self, host: &mut Host, until: Option<SimTime>) {
        let mut issued = Vec::new();
        loop {
            let td = self.pending.front().map(|c| c.at);
            let th = host.next_event_time();
            let next = match (td, th) {
                (None, None) => return,
                (Some(d), Some(h)) => d.min(h),
                (d, h) => d.or(h).expect("one of them is some"),
            };
            if until.is_some_and(|u| next >= u) {
                return;
            }
            if td == Some(next) {
                let cqe = self.pending.pop_front().expect("peeked");
                host.deliver(cqe);
                continue;
            }
            host.step();
            host.take_commands(&mut issued);
            for c in issued.drain(..) {
                let cqid = self.cq_of[c.sqid as usize];
                self.pending.push_back(DeviceCqe {
                    at: c.at + self.latency_ns,
                    cqid,
                    cid: c.cid,
                    success: true,
                    interrupt: self.interrupts[cqid as usize],
                    write_buffer_pct: self.write_buffer_pct,
                });
                self.commands.push(c);
            }
        }
    }
}

pub(crate) fn fio_process(job: &str, host: &HostConfig) -> ProcessSpec {
    let jobs = JobFile::parse_fio(job, "test.fio").unwrap().jobs;
    ProcessSpec {
        name: "fio".into(),
        workload: Workload::Fio {
            jobs,
            source: "test.fio".into(),
        },
        class: IoClass::Throughput,
        threads: 1,
        requests_per_sec: 1,
        arrivals: Arrivals::Fixed,
        instructions_per_request: 0,
        buffering: Buffering::Buffered,
        io_size: IoSizeModel::Fixed,
        io_gaps: IoGaps::Fixed,
        file_bytes: host.app.file_bytes,
        fsync_every_writes: 0,
        start: engine::SimTime::ZERO,
    }
}
