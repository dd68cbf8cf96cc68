//! The scheduler's unit tests: polling, time adding up, foreign user code, interrupts, wake-up
//! preemption, weights and load balancing.

use super::*;
use crate::config::{HostConfig, LoadBalance};
use engine::EventQueue;

fn cpu(cores: u32) -> (Cpu, EventQueue<CoreTimer>) {
    let mut cfg = HostConfig::preset("arm8").unwrap().cpu;
    cfg.cores = cores;
    (Cpu::new(&cfg), EventQueue::new())
}

/// `is_polling`: a thread whose burst has no end of its own (`UNTIL_POKED`) polls, on its
/// core or waiting for it; once poked (a burst of its own) it does not, nor does a blocked
/// thread or one computing.
#[test]
fn a_thread_polls_while_its_burst_waits_for_a_poke() {
    let (mut cpu, mut q) = cpu(1);
    let a = cpu.add_thread(0, IoClass::Throughput);
    let b = cpu.add_thread(0, IoClass::Throughput);
    assert!(!cpu.is_polling(a), "blocked");
    cpu.wake(SimTime::ZERO, a, UNTIL_POKED, Cat::Poll);
    cpu.wake(SimTime::ZERO, b, 1_000_000, Cat::User);
    arm(&mut cpu, SimTime::ZERO, &mut q);
    assert!(cpu.is_polling(a));
    assert!(!cpu.is_polling(b), "computing");
    cpu.set_burst(SimTime::ZERO, a, 500, Cat::Poll);
    assert!(
        !cpu.is_polling(a),
        "poked: its next check is a burst of its own"
    );
}

/// Re-plans the touched cores into `q`.
fn arm(cpu: &mut Cpu, now: SimTime, q: &mut EventQueue<CoreTimer>) {
    cpu.reschedule(now, |timer| q.schedule(timer.at, timer));
}

/// Runs the core events until `until`; every thread whose burst ends gets `next(t)` as its
/// next burst (None: it blocks).
fn drive(
    cpu: &mut Cpu,
    q: &mut EventQueue<CoreTimer>,
    (from, until): (SimTime, SimTime),
    mut next: impl FnMut(u32, SimTime) -> Option<u64>,
) -> Vec<(SimTime, u32)> {
    let mut done = Vec::new();
    arm(cpu, from, q);
    while let Some((t, ev)) = q.pop_due(until) {
        let CoreTimer { core, gen, .. } = ev;
        if let CoreOutcome::BurstDone { thread } = cpu.on_event(t, core, gen) {
            done.push((t, thread));
            match next(thread, t) {
                Some(ns) => cpu.set_burst(t, thread, ns, Cat::User),
                None => cpu.block(t, thread, Span::Idle),
            }
        }
        arm(cpu, t, q);
    }
    done
}

#[test]
fn two_hogs_share_a_core_and_time_adds_up() {
    let (mut cpu, mut q) = cpu(1);
    let a = cpu.add_thread(0, IoClass::Throughput);
    let b = cpu.add_thread(0, IoClass::Throughput);
    cpu.wake(SimTime::ZERO, a, 1_000_000, Cat::User);
    cpu.wake(SimTime::ZERO, b, 1_000_000, Cat::User);
    let end = SimTime::from_ms(200);
    drive(&mut cpu, &mut q, (SimTime::ZERO, end), |_, _| {
        Some(1_000_000)
    });
    let stats = cpu.finish(end);
    let (ua, ub) = (
        cpu.threads[a as usize].user_ns,
        cpu.threads[b as usize].user_ns,
    );
    assert!(ua.abs_diff(ub) < 30_000_000, "unfair share: {ua} vs {ub}");
    assert_eq!(stats[0].ns.iter().sum::<u64>(), end.as_ns());
    assert!(
        stats[0].context_switches > 2,
        "slices expire and the hogs alternate"
    );
}

/// `foreign_user_since`: a thread of address space 1 does 10 µs of user code and blocks;
/// its own process's user code afterwards is not foreign, another process's is, and only
/// after it ran (not before `since`); a kernel thread (no user code) finds every process's
/// user code foreign, and its own kernel work counts for nobody.
#[test]
fn foreign_user_code_is_another_address_space_s_after_the_mark() {
    let (mut cpu, mut q) = cpu(1);
    let (a, a2, b, k) = (
        cpu.add_thread(0, IoClass::LatencyCritical),
        cpu.add_thread(0, IoClass::LatencyCritical),
        cpu.add_thread(0, IoClass::Throughput),
        cpu.add_thread(0, IoClass::Throughput),
    );
    cpu.set_address_space(a, 1);
    cpu.set_address_space(a2, 1);
    cpu.set_address_space(b, 2);
    let run_alone = |cpu: &mut Cpu, q: &mut EventQueue<CoreTimer>, t: u32, from: SimTime| {
        cpu.wake(from, t, 10_000, Cat::User);
        let end = from + 100_000;
        let done = drive(cpu, q, (from, end), |_, _| None);
        assert_eq!(done.len(), 1, "thread {t} ran its burst: {done:?}");
        end
    };
    let mark = run_alone(&mut cpu, &mut q, a, SimTime::ZERO);
    assert!(
        !cpu.foreign_user_since(0, 1, mark, SimTime::MAX),
        "nothing ran since"
    );
    let t = run_alone(&mut cpu, &mut q, a2, mark);
    assert!(
        !cpu.foreign_user_since(0, 1, mark, SimTime::MAX),
        "its own process's code"
    );
    assert!(
        cpu.foreign_user_since(0, NO_USER_CODE, mark, SimTime::MAX),
        "a kernel thread's view"
    );
    let t = run_alone(&mut cpu, &mut q, b, t);
    assert!(
        cpu.foreign_user_since(0, 1, mark, SimTime::MAX),
        "process 2 ran after the mark"
    );
    assert!(
        !cpu.foreign_user_since(0, 1, t, SimTime::MAX),
        "but not after its end"
    );
    // Process 1 again: process 2 stays the latest foreign code for it, and for process 2
    // process 1 is.
    let t2 = run_alone(&mut cpu, &mut q, a, t);
    assert!(cpu.foreign_user_since(0, 1, mark, SimTime::MAX));
    assert!(!cpu.foreign_user_since(0, 1, t, SimTime::MAX));
    assert!(cpu.foreign_user_since(0, 2, t, SimTime::MAX));
    assert!(!cpu.foreign_user_since(0, 2, t2, SimTime::MAX));
    // A kernel thread's "user" burst (none in a real run) is nobody's code.
    run_alone(&mut cpu, &mut q, k, t2);
    assert!(
        !cpu.foreign_user_since(0, 1, t2, SimTime::MAX)
            && !cpu.foreign_user_since(0, 2, t2, SimTime::MAX)
    );
    assert!(!cpu.foreign_user_since(0, NO_USER_CODE, t2, SimTime::MAX));
}

/// `foreign_user_since` across a shared last-level cache (`llc_shared_cores` 2, not 1):
/// process 2 computing on core 1 (its record not yet settled) makes process 1's mark on
/// core 0 cold once `llc_sweep_ns` has passed; on core 1 itself at once.
#[test]
fn foreign_user_code_on_a_core_sharing_the_llc_counts() {
    for (llc, shared) in [(2, true), (1, false)] {
        let mut cfg = HostConfig::preset("arm8").unwrap().cpu;
        (cfg.cores, cfg.llc_shared_cores) = (2, llc);
        let (mut cpu, mut q) = (Cpu::new(&cfg), EventQueue::new());
        let a = cpu.add_thread(0, IoClass::LatencyCritical);
        let b = cpu.add_thread(1, IoClass::Throughput);
        cpu.set_address_space(a, 1);
        cpu.set_address_space(b, 2);
        cpu.wake(SimTime::ZERO, a, 10_000, Cat::User);
        let mark = SimTime::ZERO + 100_000;
        assert_eq!(
            drive(&mut cpu, &mut q, (SimTime::ZERO, mark), |_, _| None).len(),
            1
        );
        cpu.wake(mark, b, 1_000_000_000, Cat::User);
        let (now, soon) = (mark + 200_000, mark + (cfg.llc_sweep_ns - 1));
        drive(&mut cpu, &mut q, (mark, now), |_, _| None);
        let cold = |core, mm, at| cpu.foreign_user_since(core, mm, mark, at);
        assert_eq!(cold(0, 1, now), shared, "llc_shared_cores = {llc}");
        assert!(cold(1, 1, now) && cold(1, 1, soon), "its own core at once");
        assert!(!cold(0, 1, soon), "not before the sweep time");
        assert!(!cold(0, 2, now), "its own code is not foreign");
    }
}

#[test]
fn an_interrupt_delays_the_running_burst_by_its_length() {
    let (mut cpu, mut q) = cpu(1);
    let a = cpu.add_thread(0, IoClass::Throughput);
    cpu.wake(SimTime::ZERO, a, 10_000, Cat::User);
    arm(&mut cpu, SimTime::ZERO, &mut q);
    // Switch in (2.5 µs), then 10 µs of work; an interrupt of 2 µs at 5 µs.
    let (t, ev) = q.pop().unwrap();
    let CoreTimer { core, gen, .. } = ev;
    assert_eq!(cpu.on_event(t, core, gen), CoreOutcome::Nothing);
    arm(&mut cpu, t, &mut q);
    cpu.raise_irq(
        SimTime::from_us(5),
        0,
        IrqWork {
            ns: 2_000,
            cat: Cat::Irq,
            action: IrqAction::None,
            nvme: true,
            class: None,
        },
    );
    arm(&mut cpu, SimTime::from_us(5), &mut q);
    let mut seen = Vec::new();
    while let Some((t, ev)) = q.pop() {
        let CoreTimer { core, gen, .. } = ev;
        match cpu.on_event(t, core, gen) {
            CoreOutcome::Nothing => {}
            CoreOutcome::BurstDone { thread } => {
                seen.push(("burst", t));
                cpu.block(t, thread, Span::Idle);
            }
            CoreOutcome::Irq { .. } => seen.push(("irq", t)),
        }
        arm(&mut cpu, t, &mut q);
    }
    assert_eq!(
        seen,
        vec![
            ("irq", SimTime::from_us(7)),
            ("burst", SimTime::from_ns(14_500))
        ]
    );
    let stats = cpu.finish(SimTime::from_us(20));
    let ns = stats[0].ns;
    assert_eq!(ns[Cat::Irq.index()], 2_000);
    assert_eq!(ns[Cat::User.index()], 10_000);
    assert_eq!(ns[Cat::Sched.index()], 2_500);
    assert_eq!(ns[Cat::Idle.index()], 20_000 - 14_500);
    // The thread's life: switched in, 10 µs of work with 2 µs stolen by the interrupt,
    // then blocked (idle) to the end.
    let time = &cpu.threads[a as usize].time.ns;
    assert_eq!(time[Span::Sched.index()], 2_500);
    assert_eq!(time[Span::User.index()], 10_000);
    assert_eq!(time[Span::IrqStolen.index()], 2_000);
    assert_eq!(time[Span::Idle.index()], 20_000 - 14_500);
    assert_eq!(time[Span::RunQueue.index()], 0);
}

/// A thread that only computes, alone on its core, spends its whole life in user code but
/// for the one switch that put it on the core.
#[test]
fn a_thread_that_only_computes_spends_its_life_in_user_code() {
    let (mut cpu, mut q) = cpu(1);
    let a = cpu.add_thread(0, IoClass::Throughput);
    cpu.wake(SimTime::ZERO, a, 1_000_000, Cat::User);
    let end = SimTime::from_ms(50);
    drive(&mut cpu, &mut q, (SimTime::ZERO, end), |_, _| {
        Some(1_000_000)
    });
    cpu.finish(end);
    let time = &cpu.threads[a as usize].time.ns;
    let switch = cpu.cfg.context_switch_ns;
    assert_eq!(time[Span::User.index()], end.as_ns() - switch);
    assert_eq!(time[Span::Sched.index()], switch);
    assert_eq!(time.iter().sum::<u64>(), end.as_ns());
}

/// Two CPU-bound threads on one core: each computes about half its life and waits in the
/// run queue for most of the other half (the rest is switching).
#[test]
fn two_hogs_on_one_core_each_wait_about_half_their_life_for_it() {
    let (mut cpu, mut q) = cpu(1);
    let a = cpu.add_thread(0, IoClass::Throughput);
    let b = cpu.add_thread(0, IoClass::Throughput);
    cpu.wake(SimTime::ZERO, a, 1_000_000, Cat::User);
    cpu.wake(SimTime::ZERO, b, 1_000_000, Cat::User);
    let end = SimTime::from_ms(300);
    drive(&mut cpu, &mut q, (SimTime::ZERO, end), |_, _| {
        Some(1_000_000)
    });
    cpu.finish(end);
    for t in [a, b] {
        let time = &cpu.threads[t as usize].time.ns;
        let pct = |s: Span| time[s.index()] * 100 / end.as_ns();
        assert!(
            (45..=55).contains(&pct(Span::RunQueue)),
            "thread {t}: run queue {} % of its life",
            pct(Span::RunQueue)
        );
        assert!(
            (45..=55).contains(&pct(Span::User)),
            "thread {t}: user {} %",
            pct(Span::User)
        );
        assert_eq!(time.iter().sum::<u64>(), end.as_ns());
    }
}

#[test]
fn a_waking_sleeper_preempts_a_hog() {
    let (mut cpu, mut q) = cpu(1);
    let hog = cpu.add_thread(0, IoClass::Throughput);
    let sleeper = cpu.add_thread(0, IoClass::Throughput);
    cpu.wake(SimTime::ZERO, hog, u64::MAX / 4, Cat::User);
    drive(
        &mut cpu,
        &mut q,
        (SimTime::ZERO, SimTime::from_ms(50)),
        |_, _| None,
    );
    // The hog has run 50 ms; the sleeper wakes with credit and cuts in.
    let now = SimTime::from_ms(50);
    cpu.wake(now, sleeper, 1_000, Cat::User);
    let done = drive(&mut cpu, &mut q, (now, SimTime::from_ms(60)), |_, _| None);
    let (t, who) = done[0];
    assert_eq!(who, sleeper);
    // Switch (2.5 µs) + pollution (1 µs, the hog ran here since) + 1 µs of work.
    assert_eq!(t, now + 4_500);
}

/// On one core, a thread that slept 100 µs does not preempt a hog at nice 0 (it is not
/// `wakeup_granularity` behind it) but does at once as a nice −20 kworker; on two, a
/// nice-0 thread moves to the idle core while a pinned worker stays on its own.
#[test]
fn a_nice_minus_20_worker_preempts_a_hog_at_once_and_stays_on_its_core() {
    let run = |cores: u32, weight: u64| {
        let (mut cpu, mut q) = cpu(cores);
        let t = cpu.add_thread(0, IoClass::Throughput);
        let hog = cpu.add_thread(0, IoClass::Throughput);
        if weight != NICE_0_WEIGHT {
            cpu.make_pinned_worker(t, weight);
        }
        cpu.wake(SimTime::ZERO, t, 1_000, Cat::User);
        cpu.wake(SimTime::ZERO, hog, u64::MAX / 4, Cat::User);
        let mut blocked_at = SimTime::ZERO;
        let done = drive(
            &mut cpu,
            &mut q,
            (SimTime::ZERO, SimTime::from_ms(1)),
            |_, at| {
                blocked_at = at;
                None
            },
        );
        assert_eq!(done.len(), 1, "t ran its 1 µs and blocked");
        let now = blocked_at + 100_000;
        drive(&mut cpu, &mut q, (SimTime::from_ms(1), now), |_, _| None);
        cpu.wake(now, t, 1_000, Cat::User);
        let core = cpu.threads[t as usize].core;
        let done = drive(&mut cpu, &mut q, (now, SimTime::from_ms(100)), |_, _| None);
        (core, done[0].0 - now)
    };
    // Switch (2.5 µs) + pollution (1 µs: the hog ran there) + 1 µs of work.
    assert_eq!(run(1, NICE_MINUS_20_WEIGHT), (0, 4_500));
    let (core, waited) = run(1, NICE_0_WEIGHT);
    assert_eq!(core, 0);
    assert!(waited > 1_000_000, "waits for the hog's slice: {waited} ns");
    // Two cores, a hog on core 0 and core 1 idle: a thread homed on core 0 waking 100 µs
    // in moves to core 1 at nice 0; pinned, it stays and preempts the hog.
    let two = |weight: u64| {
        let (mut cpu, mut q) = cpu(2);
        let hog = cpu.add_thread(0, IoClass::Throughput);
        let t = cpu.add_thread(0, IoClass::Throughput);
        if weight != NICE_0_WEIGHT {
            cpu.make_pinned_worker(t, weight);
        }
        cpu.wake(SimTime::ZERO, hog, u64::MAX / 4, Cat::User);
        let now = SimTime::from_us(100);
        drive(&mut cpu, &mut q, (SimTime::ZERO, now), |_, _| None);
        cpu.wake(now, t, 1_000, Cat::User);
        let core = cpu.threads[t as usize].core;
        let done = drive(&mut cpu, &mut q, (now, SimTime::from_ms(100)), |_, _| None);
        (core, done[0].0 - now)
    };
    assert_eq!(
        two(NICE_0_WEIGHT),
        (1, 5_000),
        "IPI + switch + work on the idle core"
    );
    assert_eq!(two(NICE_MINUS_20_WEIGHT), (0, 4_500));
}

/// Two hogs on core 0 and a thread on core 1 that computes 10 µs and blocks; returns the
/// hogs' user time after 100 ms, core 1's idle time and its migrations.
fn hogs_beside_a_core_going_idle(balance: LoadBalance, pin_hogs: bool) -> (u64, u64, u64, u64) {
    let mut cfg = HostConfig::preset("arm8").unwrap().cpu;
    cfg.cores = 2;
    cfg.wake_placement = WakePlacement::PreviousCore;
    cfg.load_balance = balance;
    let (mut cpu, mut q) = (Cpu::new(&cfg), EventQueue::new());
    let a = cpu.add_thread(0, IoClass::Throughput);
    let b = cpu.add_thread(0, IoClass::Throughput);
    let c = cpu.add_thread(1, IoClass::LatencyCritical);
    if pin_hogs {
        cpu.make_pinned_worker(a, NICE_0_WEIGHT);
        cpu.make_pinned_worker(b, NICE_0_WEIGHT);
    }
    cpu.wake(SimTime::ZERO, a, 1_000_000, Cat::User);
    cpu.wake(SimTime::ZERO, b, 1_000_000, Cat::User);
    cpu.wake(SimTime::ZERO, c, 10_000, Cat::User);
    let end = SimTime::from_ms(100);
    drive(&mut cpu, &mut q, (SimTime::ZERO, end), |t, _| {
        (t != c).then_some(1_000_000)
    });
    let stats = cpu.finish(end);
    let user = |t: u32| cpu.threads[t as usize].user_ns;
    (
        user(a),
        user(b),
        stats[1].ns[Cat::Idle.index()],
        stats[1].migrations_in,
    )
}

#[test]
fn new_idle_balance_moves_a_waiting_hog_to_a_core_going_idle() {
    // Off: the hogs share core 0 for the whole run while core 1 idles.
    let (a, b, idle, moved) = hogs_beside_a_core_going_idle(LoadBalance::Off, false);
    assert!(a + b < 100_000_000, "one core's worth: {a} + {b}");
    assert!(idle > 95_000_000, "core 1 idled {idle} ns");
    assert_eq!(moved, 0);
    // New-idle: when the short thread blocks, core 1 takes the waiting hog; each then
    // has a core (less the switches).
    let (a, b, idle, moved) = hogs_beside_a_core_going_idle(LoadBalance::NewIdle, false);
    assert!(a > 95_000_000 && b > 95_000_000, "{a} and {b}");
    assert!(idle < 1_000_000, "core 1 idled {idle} ns");
    assert_eq!(moved, 1);
    // A pinned thread is never taken.
    let (_, _, idle, moved) = hogs_beside_a_core_going_idle(LoadBalance::NewIdle, true);
    assert_eq!(moved, 0);
    assert!(idle > 95_000_000, "core 1 idled {idle} ns");
}

#[test]
fn wake_placement_prefers_an_idle_core() {
    let (mut cpu, mut q) = cpu(2);
    let hog = cpu.add_thread(0, IoClass::Throughput);
    let t = cpu.add_thread(0, IoClass::Throughput);
    cpu.wake(SimTime::ZERO, hog, u64::MAX / 4, Cat::User);
    arm(&mut cpu, SimTime::ZERO, &mut q);
    cpu.wake(SimTime::from_us(10), t, 1_000, Cat::User);
    assert_eq!(cpu.threads[t as usize].core, 1);
}
