//! The host's path through the queue accelerator (`nvme.accelerator`, the model in `accel`).
//!
//! ## What it models
//! With the accelerator on, the driver's work for a dispatched request is the register writes
//! (`nvme.accel_register_ns` instead of `queue_rq_ns + doorbell_write_ns`); the request then
//! goes to [`Xler::submit`](crate::accel::Xler::submit), which merges it into a waiting entry
//! of its SQ or places it in a new one and rings the SSD `accel_cam_ns + accel_doorbell_ns`
//! later. At that doorbell (`Ev::AccelFetch`) the SSD fetches the SQ's oldest entry: it leaves
//! the accelerator (behind the barrier) as one NVMe command carrying every request merged into
//! it, so requests arriving during the CAM and doorbell delay ride along. The device's CQs are
//! all masked: the accelerator polls them and its MSI reaches the queue's core
//! `accel_poll_ns`-granular + `accel_irq_ns` after the CQE; the ISR then completes every
//! request the command carried. No thread polls (every completion mode takes this path).
//!
//! Worked example (arm8): a 4 KiB read leaves the driver after 0.2 µs of register writes
//! (against 1.2 µs of `nvme_queue_rq` and doorbell); the SSD sees it 0.52 µs later, and its
//! CQE reaches the core ≤ 0.6 µs after the device posted it.
//!
//! ## Deviation from host-stack.md: blk-mq stays in front of the accelerator for throughput I/O
//! host-stack.md has the accelerator take the CPU cost of tag search and merging off the
//! cores. A latency-critical bio that bypasses the queues (`blk.bypass_lc`) does go straight
//! from `submit_bio` into the registers: no tag and request allocation, no merge search, no
//! dispatch, and none of their cold cost (`blk_submit`'s essay, "Accelerated bypass"). For
//! throughput I/O the block layer still runs before the register writes: bio submission (tag
//! and request allocation), the plug, the merge search and dispatch, as without the
//! accelerator; only `nvme_queue_rq` and the doorbell become register writes. Why:
//! - Merging would move to the CAM, whose window is the accelerator's doorbell (0.52 µs):
//!   one core's bios arrive at least a bio submission (1.5 µs) apart and never meet in it
//!   (so it merges nothing in the study's co-runs: `host.nvme.accel_merges`, which
//!   `summary.json` omits at 0). The block layer's plug is what
//!   turns the flusher's page-sized write-back bios into 128 KiB requests; without it every
//!   written-back page would reach the device as its own 4 KiB command, 32 times the
//!   commands, which the published design does not report.
//! - What stays on the cores is small: in the vanilla `apache` + `pagerank` co-run
//!   (`ullstack sim`, 10 s) the throughput class's block-layer CPU is 0.150 s of 80
//!   core-seconds, of which bio submission is 64 491 × 1.5 µs = 0.097 s; the part the
//!   accelerator would take (merge search and dispatch) is the other 0.053 s, 0.07 % of the
//!   cores. Latency-critical I/O skips them under `kernelopt` (`blk.bypass_lc`), on which
//!   the `xler` stack builds, and with the accelerator its bio submission too.
//!
//! ## What it leaves out
//! The SSD fetching later than the accelerator's doorbell (it is fetched at the doorbell, so
//! merges happen only within that window), and the CPU of merge search and dispatch (above).
//!
//! Config keys: `nvme.accelerator`, `nvme.accel_*`.

use engine::IoClass;

use super::{Ev, Host};
use crate::accel::Placed;
use crate::config::Switch;
use crate::nvme::HostCommand;

impl Host {
    /// Dispatched request `r` goes into the accelerator's registers.
    pub(super) fn accel_emit(&mut self, r: u32) {
        let now = self.now();
        let sqid = self.blk.issue(now, r);
        let req = &self.blk.reqs[r as usize];
        let (op, sector, sectors) = (req.op, req.sector, req.sectors);
        let x = self.accel.as_mut().expect("the accelerator is on");
        let placed = x.write_registers(now, sqid, op, sector, sectors, r);
        match placed.placed {
            Placed::New { .. } => self.schedule(placed.ready_at, Ev::AccelFetch { sq: sqid }),
            Placed::Merged { .. } => self.nvme.count_accel_merge(),
        }
    }

    /// The SSD fetches SQ `sq`'s oldest entry: one command for every request it carries.
    pub(super) fn accel_fetch(&mut self, sq: u16) {
        let now = self.now();
        let x = self.accel.as_mut().expect("the accelerator is on");
        let entry = x.fetch(now, sq);
        let lc = entry
            .cids
            .iter()
            .any(|&r| self.blk.reqs[r as usize].class == IoClass::LatencyCritical);
        let class = if lc && self.cfg.attr == Switch::On {
            IoClass::LatencyCritical
        } else {
            IoClass::Throughput
        };
        let wave_pages = entry
            .cids
            .iter()
            .map(|&r| self.blk.reqs[r as usize].wave_pages)
            .max()
            .unwrap_or(0);
        let accel = self.accel.as_mut().expect("the accelerator is on");
        let cid = accel.send(entry.cids);
        let counted = if lc {
            IoClass::LatencyCritical
        } else {
            IoClass::Throughput
        };
        let command = HostCommand {
            at: now,
            sqid: sq,
            cid,
            op: entry.op,
            slba: entry.slba,
            sectors: entry.sectors,
            class,
            wave_pages,
        };
        self.nvme.send(command, counted);
    }

    /// The accelerator's interrupt for command `cid` on CQ `cqid`: complete every request it
    /// carried.
    pub(super) fn accel_cqe(&mut self, cqid: u16, cid: u32) {
        let accel = self.accel.as_mut().expect("the accelerator is on");
        let reqs = accel.completed(cid);
        for &r in &reqs {
            self.request_cqe(cqid, r);
        }
        self.accel.as_mut().expect("still on").release(cid);
    }
}

#[cfg(test)]
mod tests {
    use engine::{IoClass, SimTime};

    use crate::config::{HostConfig, Switch};
    use crate::machine::Host;
    use crate::testing::{fio_process, FixedLatencyDevice};

    /// With the accelerator, a sequential asynchronous writer's adjacent requests that meet in
    /// an SQ within the doorbell window leave as one command; every request completes once,
    /// by interrupt, and nobody polls. The window is widened to 5 µs (`accel_doorbell_ns`):
    /// at the default 0.5 µs one core's requests, ≥ 1 µs apart (dispatch + register writes),
    /// never meet.
    #[test]
    fn requests_merge_in_the_accelerator_and_complete_by_its_interrupt() {
        let run = |accel: Switch| {
            let mut cfg = HostConfig::preset("arm8").unwrap();
            cfg.nvme.accelerator = accel;
            cfg.nvme.accel_doorbell_ns = 5_000;
            cfg.blk.merges = crate::config::Merges::Off;
            let job =
                "[w]\nioengine=libaio\niodepth=8\ndirect=1\nbs=4k\nrw=write\nnumber_ios=400\n";
            let procs = vec![fio_process(job, &cfg)];
            let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(20), 1 << 40).unwrap();
            assert!(host.queue_pairs().iter().all(|q| !q.interrupts) == (accel == Switch::On));
            let mut dev = FixedLatencyDevice::new(&host, 10_000);
            dev.run(&mut host, None);
            let r = host.finish().unwrap();
            (r, dev.commands.len())
        };
        let (off, cmds_off) = run(Switch::Off);
        let (on, cmds_on) = run(Switch::On);
        let reqs = |r: &crate::HostReport| r.blk.throughput.requests;
        assert_eq!((reqs(&off), reqs(&on)), (400, 400), "the same requests");
        assert_eq!(cmds_off, 400);
        assert_eq!(on.nvme.accel_merges, 400 - cmds_on as u64);
        assert!(cmds_on < 400, "adjacent writes merged: {cmds_on} commands");
        assert_eq!(on.nvme.polled_completions, 0);
        assert_eq!(on.breakdown[IoClass::Throughput.index()].requests, 400);
    }
}
