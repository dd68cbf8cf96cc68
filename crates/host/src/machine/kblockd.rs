//! kblockd: the block layer's deferred queue runs, done by a high-priority kernel worker per
//! core that must win its core like any other thread.
//!
//! ## What it models
//! blk-mq dispatches a request in the submitter's own context when it can
//! (`blk_mq_try_issue_directly`, the plug flush at `blk_finish_plug`). When it cannot, the
//! queue is run *later, asynchronously*: `blk_mq_run_hw_queue(hctx, async = true)` queues the
//! hardware queue's `run_work` on the `kblockd` workqueue (block/blk-mq.c,
//! `blk_mq_delay_run_hw_queue` → `kblockd_mod_delayed_work_on` on a CPU of the queue's
//! mask). Two such cases happen in this model:
//! - **Restart after a completion**: a request left queued because no driver tag was free
//!   (`blk_mq_mark_tag_wait` / `BLK_MQ_S_SCHED_RESTART`) is dispatched when a completion frees
//!   one: `blk_mq_dispatch_wake` and `__blk_mq_sched_restart` (block/blk-mq-sched.c) both call
//!   `blk_mq_run_hw_queue(hctx, true)`.
//! - **Plug flushed from `schedule()`**: a submitter that must sleep for a request
//!   (`blk_mq_get_tag` → `io_schedule`) with requests still in its plug has them flushed by
//!   the scheduler (`sched_submit_work` → `blk_flush_plug(plug, true)`), which inserts them
//!   and runs the queue asynchronously.
//!
//! The work runs in a kworker of the per-CPU *high-priority* pool: kblockd is allocated
//! `WQ_MEM_RECLAIM | WQ_HIGHPRI` (block/blk-core.c, `blk_dev_init`) and high-priority
//! workers run at nice −20 (`HIGHPRI_NICE_LEVEL = MIN_NICE`, kernel/workqueue.c). Here each
//! core has one such worker, bound to it, of CFS weight 88 761 against an application
//! thread's 1 024 (`cpu::NICE_MINUS_20_WEIGHT`): woken, it preempts a CPU-bound thread at once
//! (its wake-up granularity in virtual time is 1/87 of a nice-0 thread's), but it still waits
//! for the core's interrupt work and pays the context switch in (`cpu.context_switch_ns`), and
//! the thread it displaced pays the switch back and `cpu.cache_pollution_ns`. It then
//! dispatches while the queue and the tags allow — `blk.dispatch_ns` (blk) and the driver's
//! `nvme.queue_rq_ns + nvme.doorbell_write_ns` (nvme) per request, as a submitter would — and
//! sleeps when no queue it was asked to run has anything left. Asking a worker to run a
//! queue it is already asked to run adds nothing (the work item is pending once).
//!
//! Worked example (arm8): a core running a CPU hog takes the interrupt of a completion that
//! frees the tag a queued request waits for. ISR 2.5 µs + block-layer completion 1.5 µs, then
//! the worker wakes, preempts the hog and switches in (2.5 µs), refills its cache (1 µs: the
//! hog ran there since the worker last did), dispatches (0.8 µs) and builds and rings the
//! command (1.2 µs): the request leaves 9.5 µs after the CQE; its software-queue time includes
//! the 3.5 µs of switch and refill an interrupt-context dispatch would not have.
//!
//! ## Where it acts
//! Only when a queue holds requests it could not dispatch at submission. In the vanilla
//! `apache` + `pagerank` co-run (arm8 + zssd, 1 023 tags per queue) that never happens
//! (`blk.deferred_dispatches` and `blk.allocation_waits` are 0, `config::presets`' essay); it does on
//! shallow queues or under a neighbour that fills one (the tests below).
//!
//! ## What it leaves out
//! `blk_mq_delay_run_hw_queue` after a driver's `BLK_STS_RESOURCE` (the model's driver never
//! refuses a command it has a tag for), the pool's extra workers when one blocks (ours never
//! blocks), and the worker's own cache footprint.
//!
//! Config keys: `blk.dispatch_ns`, `nvme.queue_rq_ns`, `nvme.doorbell_write_ns`,
//! `cpu.context_switch_ns`, `cpu.cache_pollution_ns`.

use super::Host;
use crate::blk::NO_HCTX;
use crate::task::{Role, Step, Wait};

impl Host {
    /// A request on hardware queue `h` completed: if a dispatcher left requests queued on it
    /// (or a queue sharing its CQ) for want of a tag or a scheduler slot, restart it from
    /// kblockd (`__blk_mq_sched_restart`, `blk_mq_dispatch_wake`).
    pub(super) fn run_queue_deferred(&mut self, h: u16) {
        let base = self.blk.hctx(h).cq();
        let mut restart = false;
        for q in self.blk.dispatch_queues(base) {
            if q != NO_HCTX {
                restart |= self.blk.hctx_mut(q).take_restart();
            }
        }
        if restart {
            self.run_queue_async(base);
        }
    }

    /// `blk_mq_run_hw_queue(h, async = true)`: if hardware queue `h` or a queue sharing its
    /// CQ holds requests, ask the kblockd worker of its core to run them.
    pub(super) fn run_queue_async(&mut self, h: u16) {
        let base = self.blk.hctx(h).cq();
        let pending = self
            .blk
            .dispatch_queues(base)
            .into_iter()
            .any(|q| q != NO_HCTX && self.blk.hctx(q).queued() > 0);
        if !pending {
            return;
        }
        let core = self.blk.hctx(base).core();
        let t = self.kblockd_worker(core);
        let Role::Kblockd { queues } = &mut self.threads[t as usize].role else {
            unreachable!("thread {t} is core {core}'s kblockd worker");
        };
        if !queues.contains(&base) {
            queues.push(base);
        }
        if self.threads[t as usize].wait == Wait::Kblockd {
            self.blk.count_kblockd_run();
            self.wake(t);
        }
    }

    /// The kblockd worker `t` runs the next queue it was asked to, or sleeps.
    pub(super) fn kblockd_next(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        let Role::Kblockd { queues } = &mut th.role else {
            unreachable!("thread {t} is a kblockd worker");
        };
        match (!queues.is_empty()).then(|| queues.remove(0)) {
            Some(base) => {
                th.io.hctx = base;
                th.io.wait = false;
                self.dispatch_next(t);
            }
            None => self.sleep(t, Wait::Kblockd, Step::App),
        }
    }
}

#[cfg(test)]
mod tests {
    use engine::{IoClass, SimTime};

    use crate::config::HostConfig;
    use crate::machine::Host;
    use crate::testing::{fio_process, FixedLatencyDevice};

    /// A latency-critical synchronous reader beside a throughput job that keeps 64 reads in
    /// flight, both on the one core, over 8-entry queues (7 tags) and a 200 µs device (slow
    /// enough that the throughput job fills the tags without saturating the core), with
    /// `nr_requests` requests per queue.
    fn shallow_queue_run(nr_requests: u32) -> crate::HostReport {
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.cpu.cores = 1;
        cfg.nvme.queue_depth = 8;
        cfg.blk.nr_requests = nr_requests;
        cfg.jitter.tick_hz = 0;
        let lc_job = "[lc]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=40\n";
        let tp_job = "[tp]\nioengine=libaio\niodepth=64\ndirect=1\nbs=4k\nrw=randread\n";
        let mut lc = fio_process(lc_job, &cfg);
        lc.class = IoClass::LatencyCritical;
        let procs = vec![lc, fio_process(tp_job, &cfg)];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(50), 1 << 40).unwrap();
        FixedLatencyDevice::new(&host, 200_000).run(&mut host, None);
        host.finish().unwrap()
    }

    /// With more requests than tags (an I/O scheduler's pool) requests wait queued for a tag
    /// and the kblockd worker dispatches them after a completion, once it wins the core;
    /// with one request per tag (`none`: `nr_requests` = depth − 1) submitters wait for the
    /// request itself and nothing is deferred. Either way the latency-critical reads' wait
    /// counts in their software-queue time.
    #[test]
    fn a_request_left_without_a_tag_is_dispatched_by_kblockd_after_a_switch() {
        let pool = shallow_queue_run(16);
        let lc = &pool.breakdown[IoClass::LatencyCritical.index()];
        assert_eq!(lc.requests, 40, "{:?}", pool.blk);
        assert!(pool.blk.deferred_dispatches > 0, "{:?}", pool.blk);
        assert!(pool.blk.kblockd_runs > 0, "{:?}", pool.blk);
        // Behind up to 7 throughput reads of 200 µs: far more than the 1.5 µs of bio
        // submission a read costs on an empty queue.
        assert!(lc.software_queue > 10_000, "{lc:?}");
        let tags = shallow_queue_run(0);
        let lc = &tags.breakdown[IoClass::LatencyCritical.index()];
        assert_eq!(lc.requests, 40, "{:?}", tags.blk);
        assert_eq!(tags.blk.deferred_dispatches, 0, "{:?}", tags.blk);
        assert!(tags.blk.allocation_waits > 0, "{:?}", tags.blk);
        assert!(lc.software_queue > 10_000, "a tag wait: {lc:?}");
    }
}
