//! Completion: from a CQE landing in host memory to the waiting thread running again — the
//! NVMe driver's interrupt handler (`nvme_irq`) or poll loop (`nvme_poll`), block-layer
//! request completion (`blk_mq_end_request` → `bio_endio`) and the wake-up. The completion
//! modes themselves (interrupt, polled, hybrid) are modelled in `nvme`'s essay; this module is
//! their code path.
//!
//! ## What it models
//! - **Interrupt queues**: a CQE raises an MSI on the queue's core, an ISR (`cpu.isr_ns`) unless
//!   the core is already in the NVMe handler (the CQE then joins it and counts as coalesced),
//!   followed by the request's block-layer completion as an interrupt item: `blk.complete_ns`,
//!   plus `pagecache.writeback_end_page_ns` per written-back page.
//! - **Poll queues**: the CQE is posted to the queue; a thread spinning on it is poked and sees
//!   it one `poll_iteration_ns` later, reaps everything posted (`poll_complete_ns` each) and
//!   completes the requests in its own context. A hybrid poller first sleeps on a timer. With
//!   a shared poll lock (`jitter.poll_lock`) the reaper waits for a submitter holding it, and
//!   a submitter waits for a spinning poller's CQ walk (`take_queue_lock`).
//! - **Request completion** adds the request's per-layer times (`breakdown`), releases its tag
//!   and allocation, and ends each bio by its owner: a direct I/O's thread, a page read's pages
//!   and waiters (`syscall`), write-back pages (`writeback`), an asynchronous fio slot
//!   (`fio`). A freed request wakes one thread waiting to allocate one, and the queue runs
//!   again for requests waiting on a tag (`blk_submit`).
//! - A woken thread waits for its core and pays the switch back (`cpu`): the breakdown's
//!   context-switch time.
//!
//! Worked example (arm8, interrupt queue, idle core): ISR 2.5 µs + completion 1.5 µs + switch
//! 2.5 µs = 6.5 µs from the CQE to the thread running (as in `cpu`'s example). Polled, with
//! the poller on its core: 0.2 µs to see the CQE + 3.5 µs to complete it = 3.7 µs, no
//! interrupt, no switch.
//!
//! ## What it leaves out
//! Softirq deferral of completions (they run in the hard interrupt), completion on the
//! submitting core via IPI (completions run on the queue's core), request timeouts and aborts;
//! a failed command is recorded and ends the run with an error.
//!
//! Config keys: `cpu.isr_ns`, `blk.complete_ns`, `nvme.poll_*`, `nvme.completion`.

use engine::SimTime;

use super::Host;
use crate::blk::{BioOwner, QueueKind};
use crate::config::PollLock;
use crate::cpu::{Cat, IrqAction, IrqWork};
use crate::jitter::CostSite;
use crate::nvme;
use crate::pagecache::NIL;
use crate::task::{Step, Wait};

impl Host {
    /// A thread woken from its I/O wait runs again: count its wait for the core, then finish
    /// the system call.
    pub(super) fn io_wait_done(&mut self, t: u32) {
        let waited = self.cpu.core_wait_ns(t);
        let class = self.threads[t as usize].class;
        self.count_core_wait(class, waited);
        self.after_io(t);
    }

    /// The thread spins on its poll queue (or finishes if nothing is left to wait for).
    pub(super) fn start_poll(&mut self, t: u32) {
        let th = &self.threads[t as usize];
        if self.blk.hctx(th.io.hctx).has_posted() {
            let ns = self.cfg.nvme.poll_iteration_ns;
            self.burst(t, ns, Cat::Poll, Step::Poll)
        } else if th.pending == 0 {
            self.after_io(t)
        } else {
            self.spin(t)
        }
    }

    /// Thread `t` spins on its poll queue's CQ until a completion pokes it; with a shared poll
    /// lock its iterations hold the lock from now on (`jitter`).
    fn spin(&mut self, t: u32) {
        if self.cfg.jitter.poll_lock == PollLock::Shared {
            let h = self.threads[t as usize].io.hctx;
            self.blk.hctx_mut(h).add_spinner(t);
        }
        self.spin_until_poked(t, Step::Poll)
    }

    /// One poll iteration ended: reap whatever is posted (once the queue lock is free, if it
    /// is shared), finish, or keep spinning.
    pub(super) fn poll_check(&mut self, t: u32) {
        let h = self.threads[t as usize].io.hctx;
        let shared = self.cfg.jitter.poll_lock == PollLock::Shared;
        if shared {
            self.blk.hctx_mut(h).remove_spinner(t);
        }
        if self.blk.hctx(h).has_posted() {
            let now = self.now();
            if shared {
                let hold = self.cfg.jitter.poll_lock_hold_ns;
                if let Err(wait) = self.blk.hctx_mut(h).take_poll_lock(now, hold) {
                    // A submitter holds the queue lock: spin on it, then look again.
                    self.nvme.count_poll_lock_wait(wait);
                    return self.burst(t, wait, Cat::Poll, Step::Poll);
                }
            }
            let th = &mut self.threads[t as usize];
            self.blk.hctx_mut(h).reap_posted(&mut th.poll.reap);
            th.poll.reap_started = now;
            let ns = th.poll.reap.len() as u64 * self.cfg.nvme.poll_complete_ns;
            let ns = self.cost(CostSite::PollComplete, ns);
            self.burst(t, ns, Cat::BlkComplete, Step::Reap)
        } else if self.threads[t as usize].pending == 0 {
            self.after_io(t)
        } else {
            self.spin(t)
        }
    }

    /// A submitter on thread `t` is about to write its SQ entry and doorbell (`ns` of work):
    /// with a shared poll lock on a poll queue it first waits for the lock — held by another
    /// submitter, a reaper, or a spinning poller's CQ walk — and then holds it for `ns`.
    /// Returns the submitter's time: the wait plus `ns`.
    pub(super) fn take_queue_lock(&mut self, t: u32, ns: u64) -> u64 {
        if self.cfg.jitter.poll_lock != PollLock::Shared {
            return ns;
        }
        let h = self.threads[t as usize].io.hctx;
        if self.blk.hctx(h).kind() != QueueKind::Poll {
            return ns;
        }
        let now = self.now();
        let iteration_ns = self.cfg.nvme.poll_iteration_ns;
        let hold_ns = self.cfg.jitter.poll_lock_hold_ns;
        let mut free_at = self.blk.hctx(h).poll_lock_free_at().max(now);
        // By index: drawing a phase needs the host while the spinners stay as they are.
        for i in 0..self.blk.hctx(h).spinners().len() {
            let s = self.blk.hctx(h).spinners()[i];
            let spinning =
                s != t && self.threads[s as usize].step == Step::Poll && self.cpu.is_on_core(s);
            if !spinning {
                continue;
            }
            // The poller holds the lock for the first `hold_ns` of each iteration; the
            // submitter arrives at a point of that loop drawn uniformly (the two are not in
            // phase: their costs would alias on a grid).
            let phase = self.poller_phase(iteration_ns);
            if phase < hold_ns {
                free_at = free_at.max(now + (hold_ns - phase));
            }
        }
        let wait = free_at - now;
        if wait > 0 {
            self.nvme.count_submit_lock_wait(wait);
        }
        self.blk.hctx_mut(h).hold_poll_lock(free_at, ns);
        wait + ns
    }

    /// The reaped requests' completion work is done: complete them and run the queue.
    pub(super) fn reap_done(&mut self, t: u32) {
        let mut reap = std::mem::take(&mut self.threads[t as usize].poll.reap);
        let started = self.threads[t as usize].poll.reap_started;
        let h = self.threads[t as usize].io.hctx;
        for &r in &reap {
            self.nvme.count_polled_completion();
            self.complete_request(r, started);
        }
        reap.clear();
        self.threads[t as usize].poll.reap = reap;
        self.run_queue_deferred(h);
        if self.threads[t as usize].pending == 0 {
            self.after_io(t)
        } else {
            self.start_poll(t)
        }
    }

    /// A CQE for request `r` landed on CQ `cqid`: post it for a poller, or raise the interrupt
    /// (ISR unless the core is already in the NVMe handler) and the completion work.
    pub(super) fn on_cqe(&mut self, cqid: u16, cid: u32) {
        self.nvme.completion();
        if self.accel.is_some() {
            return self.accel_cqe(cqid, cid);
        }
        self.request_cqe(cqid, cid);
    }

    /// The completion of request `r` landed on CQ `cqid` (see [`Host::on_cqe`]).
    pub(super) fn request_cqe(&mut self, cqid: u16, r: u32) {
        let now = self.now();
        self.blk.on_cqe(now, r);
        let h = self.blk.hctx_of_queue(cqid);
        let (kind, core) = (self.blk.hctx(h).kind(), self.blk.hctx(h).core());
        match kind {
            QueueKind::Poll if self.dedicated_core().is_some() => self.dedcore_cqe(r),
            QueueKind::Poll => {
                self.blk.hctx_mut(h).post(r);
                let first = self.blk.reqs[r as usize].first_bio;
                if let BioOwner::Direct { thread } = self.blk.bios[first as usize].owner {
                    self.poke_poller(thread);
                }
            }
            QueueKind::Interrupt => {
                let cost = self.complete_cost(r);
                if self.cpu.in_nvme_irq(core) {
                    self.nvme.count_coalesced_completion();
                } else {
                    self.nvme.count_interrupt();
                    self.cpu.count_interrupt(core);
                    let isr_ns = self.cost(CostSite::Isr, self.cfg.cpu.isr_ns);
                    self.cpu.raise_irq(
                        now,
                        core,
                        IrqWork {
                            ns: isr_ns,
                            cat: Cat::Irq,
                            action: IrqAction::None,
                            nvme: true,
                            class: None,
                        },
                    );
                }
                self.cpu.raise_irq(
                    now,
                    core,
                    IrqWork {
                        ns: cost,
                        cat: Cat::BlkComplete,
                        action: IrqAction::Complete { req: r },
                        nvme: true,
                        class: Some(self.blk.reqs[r as usize].class),
                    },
                );
            }
        }
    }

    /// Block-layer completion work of one request (write-back adds per-page work).
    fn complete_cost(&mut self, r: u32) -> u64 {
        let mut ns = self.cfg.blk.complete_ns;
        let mut b = self.blk.reqs[r as usize].first_bio;
        while b != NIL {
            let bio = &self.blk.bios[b as usize];
            if let BioOwner::Writeback { pages, .. } = bio.owner {
                ns += pages as u64 * self.cfg.pagecache.writeback_end_page_ns;
            }
            b = bio.next;
        }
        self.cost(CostSite::Complete, ns)
    }

    /// An interrupt item that began at `started` finished on its core.
    pub(super) fn irq_done(&mut self, action: IrqAction, started: SimTime) {
        match action {
            IrqAction::None => {}
            IrqAction::Complete { req } => {
                let h = self.blk.reqs[req as usize].hctx;
                self.complete_request(req, started);
                self.run_queue_deferred(h);
            }
            IrqAction::HandOff { req } => self.handed_off(req, started),
            IrqAction::Wake { thread } => {
                if self.threads[thread as usize].wait == Wait::Timer {
                    self.wake(thread);
                }
            }
        }
    }

    /// Completion work of request `r` is done (it started at `started`): record its layer
    /// times, notify every bio's owner, free the request and wake one thread waiting to
    /// allocate one.
    pub(super) fn complete_request(&mut self, r: u32, started: SimTime) {
        let now = self.now();
        let req = self.blk.reqs[r as usize];
        let polled = self.blk.hctx(req.hctx).kind() == QueueKind::Poll;
        self.count_request_layers(&req, started, polled);
        if polled {
            let h = self.blk.hctx_mut(req.hctx);
            h.set_poll_mean_ns(nvme::ewma(h.poll_mean_ns(), now - req.t_doorbell));
        }
        self.blk.finish_request(now, r);
        let mut b = req.first_bio;
        while b != NIL {
            let next = self.blk.bios[b as usize].next;
            self.bio_end(b);
            self.blk.free_bio(b);
            b = next;
        }
        if let Some(w) = self.blk.hctx_mut(req.hctx).next_request_waiter() {
            if self.threads[w as usize].wait == Wait::ReqAlloc {
                self.wake(w);
            }
        }
    }

    /// Thread `t` waits for one thing less; at none it wakes (or stops spinning).
    pub(super) fn io_waiter_done(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        assert!(
            th.pending > 0,
            "thread {t} told of a bio it does not wait for"
        );
        th.pending -= 1;
        if th.pending > 0 {
            return;
        }
        if th.wait == Wait::Io {
            self.wake(t);
        } else {
            // If it spins, its request was reaped by another poller (a bio merged into
            // another thread's request): it stops spinning.
            self.poke_poller(t);
        }
    }

    /// If thread `t` spins on its poll queue, its loop notices the change one
    /// `poll_iteration_ns` from now (a CQE to reap, or nothing left to wait for).
    fn poke_poller(&mut self, t: u32) {
        if self.threads[t as usize].step == Step::Poll && self.cpu.is_polling(t) {
            let ns = self.cfg.nvme.poll_iteration_ns;
            self.cpu.set_burst(self.now(), t, ns, Cat::Poll);
        }
    }

    /// Bio `b` completed: tell its owner.
    fn bio_end(&mut self, b: u32) {
        let bio = self.blk.bios[b as usize];
        match bio.owner {
            BioOwner::Direct { thread } => self.io_waiter_done(thread),
            BioOwner::PageRead {
                file,
                first_page,
                pages,
            } => self.page_read_end(b, file, first_page, pages),
            BioOwner::Writeback {
                file,
                first_page,
                pages,
            } => self.writeback_end(file, first_page, pages, bio.class),
            BioOwner::FioAsync { thread, slot } => self.fio_bio_end(thread, slot),
        }
    }
}

#[cfg(test)]
mod tests {
    use engine::{IoClass, SimTime};

    use crate::config::{CompletionMode, HostConfig, Switch};
    use crate::cpu::Cat;
    use crate::machine::Host;
    use crate::testing::{fio_process, FixedLatencyDevice};

    /// `completion = "selective"`: a latency-critical and a throughput reader, each doing
    /// synchronous direct reads: only the latency-critical one polls (its completions are
    /// reaped by polling, none by interrupt); the throughput one takes an interrupt per I/O.
    #[test]
    fn selective_completion_polls_only_latency_critical_io() {
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.attr = Switch::On;
        cfg.nvme.completion = CompletionMode::Selective;
        cfg.jitter.tick_hz = 0;
        let job = "[r]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=30\n";
        let mut lc = fio_process(job, &cfg);
        lc.class = IoClass::LatencyCritical;
        let procs = vec![lc, fio_process(job, &cfg)];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(5), 1 << 40).unwrap();
        let mut dev = FixedLatencyDevice::new(&host, 10_000);
        dev.run(&mut host, None);
        let r = host.finish().unwrap();
        let [lc, tp] =
            [IoClass::LatencyCritical, IoClass::Throughput].map(|c| r.breakdown[c.index()].clone());
        assert_eq!((lc.requests, tp.requests), (30, 30));
        assert!(lc.poll > 0 && lc.irq == 0, "{lc:?}");
        assert!(tp.irq > 0 && tp.poll == 0, "{tp:?}");
        assert_eq!(r.nvme.polled_completions, 30);
        assert_eq!(r.nvme.interrupts + r.nvme.coalesced_completions, 30);
        // The poll time is the latency-critical thread's core's; the throughput thread never
        // spins (threads 0 and 1 sit on cores 0 and 1).
        let poll = Cat::Poll as usize;
        assert!(r.cores[0].ns[poll] > 30 * 10_000 / 2, "{:?}", r.cores[0]);
        assert_eq!(r.cores[1].ns[poll], 0);
        // Without the attribute the kernel cannot choose by class.
        cfg.attr = Switch::Off;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("nvme.completion"), "{e}");
    }
}
