//! The scheduler tick as the machine runs it: one event per period for all cores (ticks are
//! aligned, `skew_tick=0`), an interrupt item of `jitter.tick_ns` on every core that is not
//! idle (`NO_HZ_IDLE`). The model, its defaults and what it leaves out are in `jitter`'s essay.
//!
//! Worked example (arm8, 250 Hz, 2 µs): at t = 4 ms, 8 ms, … every busy core spends 2 µs in
//! category `irq` and counts one interrupt; a thread running there finishes its burst 2 µs
//! later; an idle core pays nothing.
//!
//! Config keys: `jitter.tick_hz`, `jitter.tick_ns`.

use engine::SimTime;

use super::{Ev, Host};
use crate::cpu::{Cat, IrqAction, IrqWork};
use crate::jitter::CostSite;

impl Host {
    /// The tick period, ns (`None`: no tick).
    fn tick_period_ns(&self) -> Option<u64> {
        let hz = u64::from(self.cfg.jitter.tick_hz);
        (hz > 0).then(|| 1_000_000_000 / hz)
    }

    /// Schedules the first tick (at one period).
    pub(super) fn arm_first_tick(&mut self) {
        if let Some(period) = self.tick_period_ns() {
            self.schedule(SimTime(period), Ev::Tick);
        }
    }

    /// A tick: every busy core runs the handler; the next tick comes while the run lasts or
    /// I/O is in flight.
    pub(super) fn on_tick(&mut self) {
        let now = self.now();
        let mean_ns = self.cfg.jitter.tick_ns;
        for c in 0..self.cpu.cores() as u16 {
            if self.cpu.is_idle(c) {
                continue;
            }
            let ns = self.cost(CostSite::Tick, mean_ns);
            self.cpu.count_interrupt(c);
            self.cpu.raise_irq(
                now,
                c,
                IrqWork {
                    ns,
                    cat: Cat::Irq,
                    action: IrqAction::None,
                    nvme: false,
                    class: None,
                },
            );
        }
        let period = self.tick_period_ns().expect("a tick fired: ticks are on");
        let next = now + period;
        if self.within_run(next) || !self.nvme.all_completed() {
            self.schedule(next, Ev::Tick);
        }
    }
}
