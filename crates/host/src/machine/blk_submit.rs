//! Block-layer submission as the submitting thread runs it: `submit_bio` and the merge
//! search, the plug and its flush (`blk_finish_plug`), dispatch from the hardware queue
//! (`blk_mq_run_hw_queue`) and the driver's `nvme_queue_rq` and doorbell write, which turn a
//! request into a [`HostCommand`](crate::HostCommand). The queues, merge rules and schedulers
//! are `blk`'s and the command format `nvme`'s; this module sequences them and charges their
//! CPU time to whoever does the work.
//!
//! ## What it models
//! Each bio of a batch costs `bio_submit_ns + merge_check_ns × candidates` (category `blk`) and
//! then merges or becomes a request in the thread's plug; when no request can be allocated
//! the thread sleeps until a completion frees one (its plug, if any, flushed by the scheduler
//! and dispatched by kblockd, `kblockd`'s essay). When the batch is done
//! (or the plug holds `plug_max_requests`) the plug flushes into the hardware queue and the
//! thread dispatches while the scheduler and the driver tags allow: `dispatch_ns` (`blk`) per
//! request, then `queue_rq_ns + doorbell_write_ns` (`nvme`), and the command leaves. A request
//! that cannot be dispatched waits until a completion on the same queue runs the queue again
//! through the core's kblockd worker (`kblockd`), which pays the same `dispatch_ns +
//! queue_rq_ns + doorbell_write_ns` per request after it wins the core. The flusher and fsync keep one plug across
//! many write-back bios, so adjacent pages merge before they reach the queue.
//!
//! Worked example (arm8, a 24 KiB direct read, empty plug and queue): bio submit 1.5 µs (no
//! merge candidates), plug flush, dispatch 0.8 µs, `queue_rq` + doorbell 1.2 µs: the command
//! leaves 3.5 µs after the bio entered the block layer — the software queue, hardware queue and
//! driver means of the machine's worked example.
//!
//! **Cold submission.** A bio whose submitter finds that another process's user code ran on
//! its core, or on any core sharing its last-level cache (`cpu.llc_shared_cores`), since the
//! submitter's own last bio costs `blk.cold_submit_ns` more (37.2 µs on arm8, calibrated to
//! the published block-layer time under co-run: `config::presets`' essay): the block layer's code
//! and data, and the user buffer's page tables, were evicted by the other process. Whose code
//! ran when comes from the CPU model's per-core records (`cpu::Cpu::foreign_user_since`,
//! whose essay says why the whole cache domain counts): a kernel thread (flusher, fsync's
//! write-back) counts every process's user code, an application thread every other
//! process's. So a job alone never submits cold; a service beside an offline job that
//! computes on the other cores of its cache submits every bio cold, whether or not the job
//! ever ran on the service's own core; a writer's or flusher's batch of bios pays once, on
//! its first bio. Counted per class (`cold_bios`). The cost splits as the warm path does: the
//! bio submission pays `cold_submit_ns × bio_submit_ns / (bio_submit_ns + dispatch_ns)`
//! (24.3 µs on arm8) and the thread's next dispatch the rest (12.9 µs), so the breakdown
//! shows it in the software and hardware queues. A bypassing bio has no dispatch and pays the
//! submission's share only.
//!
//! **Accelerated bypass.** With the queue accelerator (`nvme.accelerator`, `accel_path`) a
//! bypassing bio goes from `submit_bio` into the accelerator's registers: host-stack.md's
//! accelerator takes "tag search, merge" off the cores (its SQ slots and status bitmap are the
//! tags, its CAM the merge search). So the bio pays neither `bio_submit_ns` (tag and request
//! allocation) nor its cold share — `blk.cold_submit_ns` stands for the block layer's queue
//! code and data found cold, the published breakdown's software and hardware queues, which
//! the accelerator's hardware replaces — only the hazard check against blk-mq's queue and
//! the driver's register writes (`nvme.accel_register_ns`, breakdown "driver"). Had the
//! accelerated bio still paid the submission, `xler` would save only the 1 µs of
//! `nvme_queue_rq` over `selectisr` while giving back its polling (the accelerator
//! interrupts: ISR, completion and switch, 6.5 µs against 3.7 µs polled): in the quick
//! `flashshare` study's `xler-apache-pagerank` the software queue was 19.2 µs of a 47 µs
//! latency-critical I/O, and `xler` came out slower than `selectisr` (0.89 of vanilla's mean
//! over the 30 pairs, against 0.84). Throughput bios keep the blk-mq path (`accel_path`'s
//! essay says why).
//!
//! ## What it leaves out
//! Issuing directly to the driver without queueing (`blk_mq_try_issue_directly`: every request
//! goes through the queue), batched doorbells (one doorbell write per command), and
//! request-allocation fairness between waiters beyond first come, first served.
//!
//! Config keys: `blk.bio_submit_ns`, `blk.cold_submit_ns`, `blk.merge_check_ns`,
//! `blk.plug_max_requests`, `blk.dispatch_ns`, `nvme.queue_rq_ns`, `nvme.doorbell_write_ns`.

use engine::IoClass;

use super::{Ev, Host};
use crate::blk::{SubmitOutcome, NO_HCTX};
use crate::blk_bypass::BypassOutcome;
use crate::config::{CompletionMode, Switch};
use crate::cpu::Cat;
use crate::jitter::CostSite;
use crate::nvme;
use crate::pagecache::NIL;
use crate::task::{AfterDriver, BioEntry, Cache, Path, Role, Step, Wait};

impl Host {
    /// The submitting thread's next block-layer step: submit the next bio, flush a full plug,
    /// go on writing back (flusher, fsync), or finish the submission.
    pub(super) fn submission_next(&mut self, t: u32) {
        let plug_max = self.cfg.blk.plug_max_requests as usize;
        let th = &self.threads[t as usize];
        if th.blk.next_bio < th.blk.bios.len() {
            if th.blk.plug.len() >= plug_max {
                return self.unplug(t);
            }
            let b = th.blk.bios[th.blk.next_bio];
            assert!(
                self.blk.bios[b as usize].live,
                "thread {t} submits freed bio {b}"
            );
            let class = self.blk.bios[b as usize].class;
            let search_ns = if self.bypasses(class) {
                if !th.blk.plug.is_empty() {
                    // Nothing this thread submitted before may be overtaken: plug first.
                    return self.unplug(t);
                }
                self.cfg.blk.hazard_check_ns * self.blk.hazard_candidates(th.io.hctx) as u64
            } else {
                self.cfg.blk.merge_check_ns
                    * self.blk.merge_candidates(&th.blk.plug, th.io.hctx, class) as u64
            };
            // A bio the accelerator takes runs no blk-mq submission code: neither its warm
            // cost nor its cold share ("Accelerated bypass" above).
            let accelerated = self.accelerated_bypass(class);
            let cold = !accelerated
                && self
                    .cpu
                    .foreign_user_since_for(t, th.blk.last_bio_submit, self.now());
            let cold_ns = if cold {
                self.blk.count_cold_bio(class);
                self.cold_part(self.cfg.blk.bio_submit_ns)
            } else {
                0
            };
            let submit_ns = if accelerated {
                0
            } else {
                self.cfg.blk.bio_submit_ns
            };
            let ns = submit_ns + search_ns + cold_ns;
            let ns = self.cost(CostSite::BioSubmit, ns);
            let now = self.now();
            let blk = &mut self.threads[t as usize].blk;
            blk.last_bio_submit = now;
            // Its dispatch runs cold too, once: a bypassing bio has none unless the hazard
            // rule sends it to the queue, and the state ends with the batch.
            if cold {
                blk.dispatch_cache = Cache::Cold;
            }
            // A bio retried after a wait for a request entered the block layer before the
            // wait: the wait is block-layer time (a tag wait) in its breakdown.
            if std::mem::replace(&mut blk.bio_entry, BioEntry::First) == BioEntry::First {
                blk.bio_started = now;
            }
            return self.burst(t, ns, Cat::Blk, Step::BioSubmit);
        }
        if matches!(th.role, Role::Flusher) || th.fsync.file != NIL {
            if th.blk.plug.len() >= plug_max {
                return self.unplug(t);
            }
            if th.fsync.file != NIL {
                return self.fsync_next(t);
            }
            return self.flusher_next(t);
        }
        if !th.blk.plug.is_empty() {
            return self.unplug(t);
        }
        self.submission_done(t);
    }

    /// A thread woken from its wait for a request submits the same bio again.
    pub(super) fn submission_retry(&mut self, t: u32) {
        self.threads[t as usize].blk.bio_entry = BioEntry::AfterAllocWait;
        self.submission_next(t);
    }

    /// The share of `blk.cold_submit_ns` a part of the queued submission path pays when it
    /// runs cold: the part's share of the warm path (`bio_submit_ns + dispatch_ns`), whose
    /// costs stand for how much code and data each part touches.
    fn cold_part(&self, warm_ns: u64) -> u64 {
        let blk = &self.cfg.blk;
        let path = blk.bio_submit_ns + blk.dispatch_ns;
        if path == 0 {
            return 0;
        }
        (u128::from(blk.cold_submit_ns) * u128::from(warm_ns) / u128::from(path)) as u64
    }

    /// Whether a bio of `class` bypasses the queues (`blk.bypass_lc`).
    fn bypasses(&self, class: IoClass) -> bool {
        class == IoClass::LatencyCritical
            && self.cfg.blk.bypass_lc == Switch::On
            && self.cfg.attr == Switch::On
    }

    /// Whether a bio of `class` bypasses the queues into the queue accelerator's registers
    /// (`blk.bypass_lc` with `nvme.accelerator`): the accelerator's slots and CAM do its tag
    /// search and merge, so no blk-mq submission code runs for it (the hazard check against
    /// blk-mq's queue of throughput requests, which still run through it, stays).
    fn accelerated_bypass(&self, class: IoClass) -> bool {
        self.accel.is_some() && self.bypasses(class)
    }

    /// A bypassing bio's submission work is done (`blk_bypass`): hand its request (and any
    /// queued request it takes along) to the driver, or fall back to the queue, or wait for a
    /// request.
    fn bio_bypassed(&mut self, t: u32, b: u32) {
        let now = self.now();
        let th = &self.threads[t as usize];
        let outcome = self
            .blk
            .submit_bypass(now, th.blk.bio_started, b, th.io.hctx);
        let th = &mut self.threads[t as usize];
        match outcome {
            BypassOutcome::Direct { first, req } => {
                th.blk.next_bio += 1;
                th.blk.direct.extend(first);
                th.blk.direct.push(req);
                self.give_wave_hint(t, req);
                self.direct_next(t);
            }
            BypassOutcome::MergedDirect { req } => {
                th.blk.next_bio += 1;
                th.blk.direct.push(req);
                self.direct_next(t);
            }
            BypassOutcome::Queued => {
                th.blk.next_bio += 1;
                self.dispatch_next(t);
            }
            BypassOutcome::NoRequest { hctx } => {
                self.blk.hctx_mut(hctx).wait_for_request(t);
                self.sleep(t, Wait::ReqAlloc, Step::SubmitRetry);
            }
        }
    }

    /// Hands the thread's next bypassing request to the driver (no dispatch work: the
    /// hardware queue is skipped).
    fn direct_next(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        let r = th.blk.direct.remove(0);
        th.blk.after_driver = AfterDriver::Submission;
        th.blk.dispatching = r;
        self.dispatch_done(t);
    }

    /// The bio's submission work is done: it merged, became a request in the plug, or no
    /// request was free (flush the plug, or sleep for one).
    pub(super) fn bio_submitted(&mut self, t: u32) {
        let now = self.now();
        let th = &mut self.threads[t as usize];
        let b = th.blk.bios[th.blk.next_bio];
        if self.bypasses(self.blk.bios[b as usize].class) {
            return self.bio_bypassed(t, b);
        }
        let th = &mut self.threads[t as usize];
        let outcome = self
            .blk
            .submit_bio(now, th.blk.bio_started, b, &mut th.blk.plug, th.io.hctx);
        match outcome {
            SubmitOutcome::Merged { .. } => {
                th.blk.next_bio += 1;
                self.submission_next(t);
            }
            SubmitOutcome::NewRequest { req } => {
                th.blk.next_bio += 1;
                self.give_wave_hint(t, req);
                self.submission_next(t);
            }
            SubmitOutcome::NoRequest => {
                let h = self.blk.route(th.io.hctx, self.blk.bios[b as usize].class);
                if !th.blk.plug.is_empty() {
                    // `io_schedule` flushes the plug from the scheduler: its requests are
                    // inserted and the queue runs from kblockd (`kblockd`'s essay).
                    let plug = std::mem::take(&mut th.blk.plug);
                    for &r in &plug {
                        self.blk.insert(now, r);
                    }
                    let th = &mut self.threads[t as usize];
                    th.blk.plug = plug;
                    th.blk.plug.clear();
                    self.run_queue_async(h);
                }
                self.blk.hctx_mut(h).wait_for_request(t);
                self.sleep(t, Wait::ReqAlloc, Step::SubmitRetry);
            }
        }
    }

    /// Flushes the plug into the hardware queue and dispatches.
    pub(super) fn unplug(&mut self, t: u32) {
        let now = self.now();
        let mut plug = std::mem::take(&mut self.threads[t as usize].blk.plug);
        for &r in &plug {
            self.blk.insert(now, r);
        }
        plug.clear();
        self.threads[t as usize].blk.plug = plug;
        self.dispatch_next(t);
    }

    /// Dispatches the next request the scheduler and tags allow, or goes back to submission.
    pub(super) fn dispatch_next(&mut self, t: u32) {
        let base = self.threads[t as usize].io.hctx;
        let picked = self
            .blk
            .dispatch_queues(base)
            .into_iter()
            .filter(|&h| h != NO_HCTX)
            .find_map(|h| self.blk.pick_dispatch(self.now(), h));
        match picked {
            Some(r) => {
                self.threads[t as usize].blk.dispatching = r;
                if matches!(self.threads[t as usize].role, Role::Kblockd { .. }) {
                    // The worker's time is done for the class of the request it dispatches.
                    self.blk.count_deferred_dispatch();
                    self.cpu.set_class(t, self.blk.reqs[r as usize].class);
                }
                let cache = std::mem::replace(
                    &mut self.threads[t as usize].blk.dispatch_cache,
                    Cache::Warm,
                );
                let cold_ns = if cache == Cache::Cold {
                    self.cold_part(self.cfg.blk.dispatch_ns)
                } else {
                    0
                };
                let ns = self.cost(CostSite::Dispatch, self.cfg.blk.dispatch_ns + cold_ns);
                self.burst(t, ns, Cat::Blk, Step::Dispatch);
            }
            None => {
                // Whatever is still queued waits for a tag or a scheduler slot: the next
                // completion restarts the queue.
                for q in self.blk.dispatch_queues(base) {
                    if q != NO_HCTX && self.blk.hctx(q).queued() > 0 {
                        self.blk.hctx_mut(q).mark_restart();
                    }
                }
                self.submission_next(t)
            }
        }
    }

    /// Dispatch work of the thread's request is done: the driver builds the command and rings
    /// the doorbell.
    pub(super) fn dispatch_done(&mut self, t: u32) {
        let r = self.threads[t as usize].blk.dispatching;
        self.blk.reqs[r as usize].t_driver = self.now();
        let ns = self.driver_ns();
        let ns = self.cost(CostSite::Driver, ns);
        let ns = self.take_queue_lock(t, ns);
        self.burst(t, ns, Cat::Nvme, Step::Driver);
    }

    /// The doorbell is written: the command leaves; dispatch the next request (or, bypassing,
    /// send the next bypassing request or go back to submission).
    pub(super) fn driver_done(&mut self, t: u32) {
        let r = std::mem::replace(&mut self.threads[t as usize].blk.dispatching, NIL);
        self.emit(r);
        let th = &mut self.threads[t as usize];
        if !th.blk.direct.is_empty() {
            return self.direct_next(t);
        }
        if std::mem::replace(&mut th.blk.after_driver, AfterDriver::Dispatch)
            == AfterDriver::Submission
        {
            return self.submission_next(t);
        }
        self.dispatch_next(t);
    }

    /// The driver's CPU work for one request: `nvme_queue_rq` and the doorbell, or the
    /// accelerator's register writes.
    fn driver_ns(&self) -> u64 {
        match &self.accel {
            Some(x) => x.register_ns(),
            None => self.cfg.nvme.queue_rq_ns + self.cfg.nvme.doorbell_write_ns,
        }
    }

    /// Request `r` becomes an NVMe command on its queue's SQ (the doorbell rings now), or
    /// goes into the accelerator's registers.
    pub(super) fn emit(&mut self, r: u32) {
        if self.accel.is_some() {
            return self.accel_emit(r);
        }
        let now = self.now();
        let sqid = self.blk.issue(now, r);
        let req = &self.blk.reqs[r as usize];
        self.blk.hctx(req.hctx).assert_within_depth();
        let attr = self.cfg.attr == Switch::On;
        let command = nvme::command(now, sqid, r, req, attr);
        self.nvme.send(command, req.class);
    }

    /// All bios are in the device's hands: return (asynchronous), or wait for them by
    /// polling, hybrid sleep-then-poll, or sleeping for the interrupt.
    fn submission_done(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        th.blk.bios.clear();
        th.blk.next_bio = 0;
        // A cold batch whose requests someone else dispatched leaves nothing cold behind.
        th.blk.dispatch_cache = Cache::Warm;
        let io = th.io;
        if !io.wait {
            return self.app_next(t);
        }
        if th.pending == 0 {
            return self.after_io(t);
        }
        match (io.path, io.completion) {
            (Path::Direct, CompletionMode::Polled) if self.dedicated_core().is_none() => {
                self.start_poll(t)
            }
            (Path::Direct, CompletionMode::Hybrid) => {
                let mean = self.blk.hctx(io.hctx).poll_mean_ns();
                let s = nvme::hybrid_sleep_ns(mean, self.cfg.nvme.hybrid_sleep_pct);
                if s == 0 {
                    self.start_poll(t)
                } else {
                    self.nvme.count_hybrid_sleep();
                    self.schedule(self.now() + s, Ev::Timer { thread: t });
                    self.sleep(t, Wait::Timer, Step::HybridWake)
                }
            }
            _ => self.sleep(t, Wait::Io, Step::IoWaitDone),
        }
    }
}

#[cfg(test)]
mod tests {
    use engine::{IoClass, IoOp, SimTime};

    use crate::config::{HostConfig, Switch};
    use crate::machine::Host;
    use crate::testing::{fio_process, FixedLatencyDevice};

    /// The classes the device saw, per process (by the file each command falls in): a
    /// latency-critical process's direct reads and the write-back of the pages it dirtied,
    /// and a throughput process's direct reads.
    fn device_classes(attr: Switch) -> [Vec<(IoOp, IoClass)>; 3] {
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.attr = attr;
        cfg.pagecache.dirty_expire_ns = 10_000_000;
        cfg.pagecache.dirty_writeback_interval_ns = 10_000_000;
        let direct = "[r]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=20\n";
        let buffered = "[w]\nioengine=psync\ndirect=0\nbs=4k\nrw=write\nsize=64k\n";
        let mut lc_direct = fio_process(direct, &cfg);
        lc_direct.class = IoClass::LatencyCritical;
        let mut lc_buffered = fio_process(buffered, &cfg);
        lc_buffered.class = IoClass::LatencyCritical;
        let tp_direct = fio_process(direct, &cfg);
        let procs = vec![lc_direct, lc_buffered, tp_direct];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(50), 1 << 40).unwrap();
        let mut dev = FixedLatencyDevice::new(&host, 10_000);
        dev.run(&mut host, None);
        let bases: Vec<u64> = host.pc.files().iter().map(|f| f.base_sector).collect();
        let mut seen: [Vec<(IoOp, IoClass)>; 3] = Default::default();
        for c in &dev.commands {
            let file = bases.iter().rposition(|&b| c.slba >= b).unwrap();
            seen[file].push((c.op, c.class));
        }
        host.finish().unwrap();
        seen
    }

    /// `attr = "on"`: the class of the process reaches the NVMe command for direct I/O and,
    /// through the dirty pages, for the write-back of buffered writes; `off`: the device sees
    /// every command unclassified (throughput).
    #[test]
    fn the_class_reaches_the_command_only_with_attr_on() {
        use IoClass::{LatencyCritical as Lc, Throughput as Tp};
        let on = device_classes(Switch::On);
        assert_eq!(on[0].len(), 20);
        assert!(on[0].iter().all(|&c| c == (IoOp::Read, Lc)), "{:?}", on[0]);
        assert!(!on[1].is_empty(), "the dirty pages were written back");
        assert!(on[1].iter().all(|&c| c == (IoOp::Write, Lc)), "{:?}", on[1]);
        assert!(on[2].iter().all(|&c| c == (IoOp::Read, Tp)), "{:?}", on[2]);
        let off = device_classes(Switch::Off);
        for (p, cmds) in off.iter().enumerate() {
            assert_eq!(cmds.len(), on[p].len(), "process {p}: the same commands");
            assert!(cmds.iter().all(|&(_, c)| c == Tp), "process {p}: {cmds:?}");
        }
    }

    /// `nvme.lc_queue`: latency-critical commands leave on the urgent twin SQs (ids after the
    /// 2 × 8 interrupt and poll queues of arm8), throughput commands on the ordinary ones, and
    /// both complete through the CQ they share; without it no twin exists.
    #[test]
    fn lc_queue_sends_latency_critical_commands_to_the_twin_sq() {
        let run = |lc_queue: Switch| {
            let mut cfg = HostConfig::preset("arm8").unwrap();
            cfg.attr = Switch::On;
            cfg.nvme.lc_queue = lc_queue;
            let direct = "[r]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=20\n";
            let mut lc = fio_process(direct, &cfg);
            lc.class = IoClass::LatencyCritical;
            let procs = vec![lc, fio_process(direct, &cfg)];
            let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(5), 1 << 40).unwrap();
            let pairs = host.queue_pairs().to_vec();
            let mut dev = FixedLatencyDevice::new(&host, 10_000);
            dev.run(&mut host, None);
            host.finish().unwrap();
            (pairs, dev.commands)
        };
        let (pairs, cmds) = run(Switch::On);
        assert_eq!(pairs.len(), 32);
        for c in &cmds {
            let qp = pairs.iter().find(|q| q.sqid == c.sqid).unwrap();
            match c.class {
                IoClass::LatencyCritical => {
                    assert!(c.sqid > 16 && qp.priority == crate::nvme::SqPriority::Urgent);
                    assert_eq!(qp.cqid, c.sqid - 16, "shares its twin's CQ");
                }
                IoClass::Throughput => assert!(c.sqid <= 16, "{c:?}"),
            }
        }
        assert_eq!(cmds.len(), 40);
        let (pairs, cmds) = run(Switch::Off);
        assert_eq!(pairs.len(), 16);
        assert!(cmds.iter().all(|c| c.sqid <= 16));
        // The switch needs the attribute: without it the driver cannot tell the classes apart.
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.nvme.lc_queue = Switch::On;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("nvme.lc_queue") && e.contains("attr"), "{e}");
    }

    /// `blk.bypass_lc`: a latency-critical reader shares one core with a throughput job whose
    /// reads pile up in the hardware queue (kyber lets one read in flight at a time). Queued,
    /// the latency-critical reads wait behind them; bypassing, their software-queue time is
    /// only the submission CPU and their hardware-queue time is zero.
    #[test]
    fn bypass_empties_latency_critical_time_in_the_queues() {
        let run = |bypass: Switch| {
            let mut cfg = HostConfig::preset("arm8").unwrap();
            cfg.cpu.cores = 1;
            cfg.attr = Switch::On;
            cfg.blk.bypass_lc = bypass;
            cfg.blk.scheduler = crate::config::Scheduler::Kyber;
            cfg.blk.kyber_read_depth = 1;
            // Constant costs: the bounds below are sums of the mean costs.
            cfg.jitter.cost_cv_pct = 0;
            let lc = "[r]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=50\n";
            let tp = "[t]\nioengine=libaio\niodepth=16\ndirect=1\nbs=4k\nrw=randread\ntime_based\nruntime=20ms\n";
            let mut lc = fio_process(lc, &cfg);
            lc.class = IoClass::LatencyCritical;
            let procs = vec![lc, fio_process(tp, &cfg)];
            let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(20), 1 << 40).unwrap();
            let mut dev = FixedLatencyDevice::new(&host, 10_000);
            dev.run(&mut host, None);
            let r = host.finish().unwrap();
            (r.breakdown[IoClass::LatencyCritical.index()].clone(), r.blk)
        };
        let (queued, blk) = run(Switch::Off);
        assert_eq!(queued.requests, 50);
        assert_eq!(blk.bypassed, 0);
        assert!(
            queued.software_queue > 30_000,
            "behind the throughput reads: {queued:?}"
        );
        assert!(
            queued.hardware_queue >= 800,
            "dispatch_ns at least: {queued:?}"
        );
        let (bypassed, blk) = run(Switch::On);
        assert_eq!((bypassed.requests, blk.bypassed), (50, 50));
        assert_eq!(bypassed.hardware_queue, 0);
        // bio_submit_ns + hazard_check_ns per queued request (at most 16 here), plus what
        // steals the one core during it: interrupts, and the kblockd worker dispatching the
        // throughput reads after each completion (nice −20: it preempts at once and costs a
        // switch in, 2.5 µs, and out): no queue wait.
        assert!(
            (1_500..6_000).contains(&bypassed.software_queue),
            "{bypassed:?}"
        );
    }

    /// Cold submission (`blk.cold_submit_ns`), one core, a device of 10 µs. A synchronous
    /// latency-critical reader alone submits every bio warm: its software-queue time is the
    /// bio submission. Beside pagerank, pagerank computes on the core while the reader waits
    /// for each read, so the reader's bios are cold (198 of 200 here) and each costs
    /// `cold_submit_ns` more, split between the submission and the dispatch as their warm
    /// costs are. A bypassing reader's bios skip the dispatch and its share of the cold cost.
    /// apache alone (its server thread and workers computing in turn on the one core) never
    /// submits cold: the user code that ran between its bios was its own process's.
    #[test]
    fn a_bio_is_cold_only_after_another_process_s_user_code() {
        use crate::process::ProcessSpec;
        use workload::Profile;
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.cpu.cores = 1;
        cfg.jitter.tick_hz = 0;
        // Constant costs: the checks below are exact sums of the mean costs.
        cfg.jitter.cost_cv_pct = 0;
        let run = |procs: Vec<ProcessSpec>| {
            let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(200), 1 << 40).unwrap();
            FixedLatencyDevice::new(&host, 10_000).run(&mut host, None);
            host.finish().unwrap()
        };
        let reads = "[r]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=200\n";
        let mut reader = fio_process(reads, &cfg);
        reader.class = IoClass::LatencyCritical;
        let lc = IoClass::LatencyCritical.index();

        let alone = run(vec![reader.clone()]);
        let stats = &alone.blk.latency_critical;
        assert_eq!((stats.bios, stats.cold_bios), (200, 0));
        assert_eq!(alone.breakdown[lc].software_queue, cfg.blk.bio_submit_ns);

        let pagerank = ProcessSpec::from_profile(
            Profile::named("pagerank").unwrap(),
            IoClass::Throughput,
            &cfg,
        );
        let co_procs = vec![reader, pagerank];
        let co = run(co_procs.clone());
        let stats = &co.blk.latency_critical;
        assert_eq!(stats.bios, 200, "the reader finished");
        // Warm only when pagerank slept on its own read through the reader's whole wait.
        assert!(stats.cold_bios >= 190, "{stats:?}");
        let b = &co.breakdown[lc];
        // The cold extra splits as the warm path does: bio submit 1.5 µs, dispatch 0.8 µs.
        let path = cfg.blk.bio_submit_ns + cfg.blk.dispatch_ns;
        let cold_share =
            |warm: u64, cold: u64, bios: u64| cfg.blk.cold_submit_ns * warm / path * cold / bios;
        let submit =
            cfg.blk.bio_submit_ns + cold_share(cfg.blk.bio_submit_ns, stats.cold_bios, 200);
        let dispatch = cfg.blk.dispatch_ns + cold_share(cfg.blk.dispatch_ns, stats.cold_bios, 200);
        // pagerank's completions may interrupt a submission: a few ns on average.
        assert!(
            (submit..submit + submit / 100).contains(&b.software_queue),
            "{b:?}: {submit} ns of submission CPU"
        );
        assert!(
            (dispatch..dispatch + dispatch / 100).contains(&b.hardware_queue),
            "{b:?}: {dispatch} ns of dispatch CPU"
        );

        // Bypassing (the same co-run with `attr` and `blk.bypass_lc`): the submission's share
        // only, and no hardware queue.
        let mut bypass_cfg = cfg.clone();
        bypass_cfg.attr = Switch::On;
        bypass_cfg.blk.bypass_lc = Switch::On;
        let mut host = Host::new(&bypass_cfg, co_procs, 1, SimTime::from_ms(200), 1 << 40).unwrap();
        FixedLatencyDevice::new(&host, 10_000).run(&mut host, None);
        let bypassed = host.finish().unwrap();
        let stats = &bypassed.blk.latency_critical;
        assert!(stats.cold_bios >= 190, "{stats:?}");
        let b = &bypassed.breakdown[lc];
        let submit =
            cfg.blk.bio_submit_ns + cold_share(cfg.blk.bio_submit_ns, stats.cold_bios, 200);
        assert_eq!(b.hardware_queue, 0, "{b:?}");
        assert!(
            (submit..submit + submit / 100).contains(&b.software_queue),
            "{b:?}: {submit} ns of submission CPU"
        );

        let mut apache = ProcessSpec::from_profile(
            Profile::named("apache").unwrap(),
            IoClass::LatencyCritical,
            &cfg,
        );
        apache.requests_per_sec = 2_000;
        let alone = run(vec![apache]);
        let stats = &alone.blk.latency_critical;
        assert!(stats.bios > 100, "{stats:?}");
        assert_eq!(stats.cold_bios, 0);
    }

    /// Accelerated bypass (the essay): beside pagerank on one core, a bypassing latency-
    /// critical reader's bios cost `bio_submit_ns` plus its cold share without the
    /// accelerator (above), and nothing of either with it: the bio goes into the
    /// accelerator's registers (the driver time) and none counts as cold. Pagerank's
    /// throughput bios still run blk-mq: their software queue keeps the bio submission.
    #[test]
    fn the_accelerator_takes_a_bypassing_bio_s_submission_and_its_cold_share() {
        use crate::process::ProcessSpec;
        use workload::Profile;
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.cpu.cores = 1;
        cfg.jitter.tick_hz = 0;
        cfg.jitter.cost_cv_pct = 0;
        cfg.attr = Switch::On;
        cfg.blk.bypass_lc = Switch::On;
        let reads = "[r]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=200\n";
        let mut reader = fio_process(reads, &cfg);
        reader.class = IoClass::LatencyCritical;
        let pagerank = ProcessSpec::from_profile(
            Profile::named("pagerank").unwrap(),
            IoClass::Throughput,
            &cfg,
        );
        let run = |accel: Switch| {
            let mut cfg = cfg.clone();
            cfg.nvme.accelerator = accel;
            let procs = vec![reader.clone(), pagerank.clone()];
            let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(200), 1 << 40).unwrap();
            FixedLatencyDevice::new(&host, 10_000).run(&mut host, None);
            host.finish().unwrap()
        };
        let lc = IoClass::LatencyCritical.index();
        let tp = IoClass::Throughput.index();
        let off = run(Switch::Off);
        let on = run(Switch::On);
        assert_eq!(off.blk.latency_critical.bios, 200);
        assert_eq!(on.blk.latency_critical.bios, 200);
        assert!(off.blk.latency_critical.cold_bios >= 190, "{:?}", off.blk);
        assert!(
            off.breakdown[lc].software_queue > cfg.blk.cold_submit_ns / 2,
            "{:?}",
            off.breakdown[lc]
        );
        assert_eq!(on.blk.latency_critical.cold_bios, 0, "{:?}", on.blk);
        // What is left is the hazard check against pagerank's queued reads and what
        // interrupts the one core meanwhile: well under one warm bio submission.
        assert!(
            on.breakdown[lc].software_queue < cfg.blk.bio_submit_ns,
            "{:?}",
            on.breakdown[lc]
        );
        assert_eq!(on.breakdown[lc].driver, cfg.nvme.accel_register_ns);
        assert!(
            on.breakdown[tp].software_queue >= cfg.blk.bio_submit_ns,
            "{:?}",
            on.breakdown[tp]
        );
    }
}
