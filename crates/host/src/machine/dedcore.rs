//! DedCore (`nvme.dedcore`): one core does nothing but poll, and hands completions to the
//! application cores — the alternative FlashShare compares its queue accelerator with.
//!
//! ## What it models
//! With `nvme.completion = "selective"`, latency-critical synchronous direct I/O goes to the
//! poll queues (vectors masked). With DedCore on, its submitter does not spin: it sleeps as
//! for an interrupt, and a kernel thread alone on the last core (no application thread is
//! placed there, and wake placement never finds it idle) spins on every poll CQ (category
//! `poll`, its core 100 % busy). A CQE landing on a poll CQ is seen by that core
//! `nvme.poll_iteration_ns` later and completed there (`nvme.poll_complete_ns`: warm, polled
//! completion), one CQE after another; then the completion is **handed off** to the waiting
//! thread's core:
//! - the waiter's core takes a reschedule IPI (`cpu.ipi_ns`, category `irq`): the wake-up
//!   crosses cores (kernel/sched/core.c `ttwu_queue_wakelist`);
//! - the woken thread first pulls the completion's cache lines (request, bio, its own task
//!   state, written by the polling core) into its cache: `nvme.dedcore_handoff_ns` (category
//!   `blk_complete`) — about three cache-to-cache transfers of ≈ 100 ns on a 2 GHz server
//!   core (an estimate: a remote-cache hit costs a few hundred cycles on current servers);
//! - then its context switch, as after an interrupt.
//!
//! Worked example (arm8, an idle application core): CQE → 0.2 µs (poll iteration) + 3.5 µs
//! (polled completion) on the polling core → 1.5 µs IPI + 2.5 µs switch + 0.3 µs hand-off on
//! the application core: 8.0 µs to the thread running again, against 6.5 µs for an interrupt
//! (2.5 ISR + 1.5 completion + 2.5 switch) and 3.7 µs polling on the thread's own core — but
//! the application cores never spin, and the cost of polling is one core for the whole run.
//!
//! ## What it leaves out
//! The polling core's CQ scan order (one FIFO of CQEs) and any lock between it and the
//! submitters (poll CQs have their own `cq_poll_lock`, `jitter`'s `split`), batching of
//! hand-offs, and placing threads back on the polling core when the switch is turned off
//! mid-run (it cannot be).
//!
//! Config keys: `nvme.dedcore`, `nvme.dedcore_handoff_ns`, `cpu.ipi_ns`,
//! `nvme.poll_iteration_ns`, `nvme.poll_complete_ns`.

use super::Host;
use crate::cpu::{Cat, IrqAction, IrqWork};
use crate::jitter::CostSite;
use crate::task::Step;

impl Host {
    /// The polling thread spins on the poll CQs for the rest of the run.
    pub(super) fn dedcore_spin(&mut self, t: u32) {
        self.spin_until_poked(t, Step::App)
    }

    /// A CQE for request `r` landed on a poll CQ: the polling core sees and completes it.
    pub(super) fn dedcore_cqe(&mut self, r: u32) {
        let core = self.dedicated_core().expect("DedCore is on");
        let ns = self.cfg.nvme.poll_iteration_ns
            + self.cost(CostSite::PollComplete, self.cfg.nvme.poll_complete_ns);
        self.nvme.count_polled_completion();
        self.cpu.raise_irq(
            self.now(),
            core,
            IrqWork {
                ns,
                cat: Cat::BlkComplete,
                action: IrqAction::HandOff { req: r },
                nvme: false,
                class: Some(self.blk.reqs[r as usize].class),
            },
        );
    }

    /// The polling core finished request `r`'s completion (begun at `started`): complete it;
    /// the wake-ups it causes cross to the waiters' cores.
    pub(super) fn handed_off(&mut self, r: u32, started: engine::SimTime) {
        let h = self.blk.reqs[r as usize].hctx;
        self.waking_from_polling_core(|host| host.complete_request(r, started));
        self.run_queue_deferred(h);
    }

    /// Wakes thread `t` from the polling core: a reschedule IPI on its core, then the
    /// hand-off's cache-line transfers as the first thing it runs.
    pub(super) fn wake_handed_off(&mut self, t: u32) {
        let now = self.now();
        let core = self.cpu.core_of(t);
        assert_ne!(
            Some(core),
            self.dedicated_core(),
            "thread {t} sleeps on DedCore's polling core"
        );
        let ipi = self.cost(CostSite::Ipi, self.cfg.cpu.ipi_ns);
        self.cpu.count_interrupt(core);
        self.cpu.raise_irq(
            now,
            core,
            IrqWork {
                ns: ipi,
                cat: Cat::Irq,
                action: IrqAction::None,
                nvme: false,
                class: None,
            },
        );
        let handoff = self.cost(CostSite::Handoff, self.cfg.nvme.dedcore_handoff_ns);
        self.cpu.wake(now, t, handoff, Cat::BlkComplete);
    }
}

#[cfg(test)]
mod tests {
    use engine::{IoClass, SimTime};

    use crate::config::{CompletionMode, HostConfig, Switch};
    use crate::cpu::Cat;
    use crate::machine::Host;
    use crate::testing::{fio_process, FixedLatencyDevice};

    /// DedCore: a latency-critical and a throughput synchronous reader on a 4-core host. The
    /// last core polls the whole run and nothing else runs there; the latency-critical
    /// thread never spins (its core has no poll time) yet its completions are polled, each
    /// handed off with an IPI to its core; the throughput reader takes interrupts.
    #[test]
    fn the_dedicated_core_polls_and_hands_completions_over() {
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.cpu.cores = 4;
        cfg.attr = Switch::On;
        cfg.nvme.completion = CompletionMode::Selective;
        cfg.nvme.dedcore = Switch::On;
        cfg.jitter.tick_hz = 0;
        // Constant costs: the breakdown below is checked to the nanosecond.
        cfg.jitter.cost_cv_pct = 0;
        let job = "[r]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=30\n";
        let mut lc = fio_process(job, &cfg);
        lc.class = IoClass::LatencyCritical;
        let procs = vec![lc, fio_process(job, &cfg)];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(5), 1 << 40).unwrap();
        assert_eq!(host.dedicated_core(), Some(3));
        let mut dev = FixedLatencyDevice::new(&host, 10_000);
        dev.run(&mut host, None);
        let r = host.finish().unwrap();
        let poll = Cat::Poll as usize;
        let user = Cat::User as usize;
        let end = r.end.as_ns();
        assert!(r.cores[3].ns[poll] > end * 9 / 10, "{:?}", r.cores[3]);
        assert_eq!(r.cores[3].ns[user], 0);
        for c in 0..3 {
            assert_eq!(r.cores[c].ns[poll], 0, "core {c} never spins");
        }
        let lc = &r.breakdown[IoClass::LatencyCritical.index()];
        let tp = &r.breakdown[IoClass::Throughput.index()];
        assert_eq!((lc.requests, tp.requests), (30, 30));
        // Seen and completed on the polling core (0.2 + 3.5 µs, counted as completion work),
        // no interrupt; the switch back includes the IPI (1.5 + 2.5 µs).
        assert_eq!((lc.irq, lc.blk_complete), (0, 3_700), "{lc:?}");
        assert_eq!(lc.context_switch, 4_000, "{lc:?}");
        assert!(tp.irq > 0 && tp.poll == 0, "{tp:?}");
        assert_eq!(r.nvme.polled_completions, 30);
        // The latency-critical thread's core (0) took one IPI per hand-off.
        assert!(r.cores[0].interrupts >= 30, "{:?}", r.cores[0]);
        // It needs selective completion.
        cfg.nvme.completion = CompletionMode::Interrupt;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("nvme.dedcore"), "{e}");
    }
}
