//! Whose user code ran on a core: the foreign-code query the block layer's cold submission asks
//! (module essay of `cpu`, *Whose code ran on a core*). The record itself (`Core::user_code`)
//! is written where user time is charged (`account`).

use engine::SimTime;

use super::{Cat, Cpu, NO_USER_CODE};

impl Cpu {
    /// Whether another process's user code ran on thread `t`'s core after `since`: the
    /// kernel's code and data `t` touched then are cold ([`Cpu::foreign_user_since`]).
    pub fn foreign_user_since_for(&self, t: u32, since: SimTime, now: SimTime) -> bool {
        let th = &self.threads[t as usize];
        self.foreign_user_since(th.core, th.mm, since, now)
    }

    /// Whether user code of an address space other than `mm` ran after `since`, up to `now`,
    /// on `core` or a core sharing its cache (module essay, *Whose code ran on a core*). A
    /// kernel thread (`NO_USER_CODE`) counts every process's.
    pub fn foreign_user_since(&self, core: u16, mm: u32, since: SimTime, now: SimTime) -> bool {
        if self.foreign_user_on(core as usize, mm, since, now) {
            return true;
        }
        if now.saturating_since(since) < self.cfg.llc_sweep_ns {
            return false;
        }
        let per_llc = self.cfg.llc_shared_cores.max(1) as usize;
        let first = core as usize / per_llc * per_llc;
        let last = (first + per_llc).min(self.cores.len());
        (first..last).any(|c| self.foreign_user_on(c, mm, since, now))
    }

    /// [`Cpu::foreign_user_since`] on one core: its record (time settled up to the core's
    /// last decision point), or a foreign thread in user code there now (running since its
    /// switch-in, which a busy core's record may not have reached yet).
    fn foreign_user_on(&self, c: usize, mm: u32, since: SimTime, now: SimTime) -> bool {
        let core = &self.cores[c];
        let [latest, other] = core.user_code;
        let foreign = if latest.0 != mm { latest } else { other };
        if foreign.0 != NO_USER_CODE && foreign.1 > since {
            return true;
        }
        now > since
            && core.running.is_some_and(|t| {
                let th = &self.threads[t as usize];
                th.mm != mm && th.mm != NO_USER_CODE && th.cat == Cat::User
            })
    }
}
