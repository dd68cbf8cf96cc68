//! Each disturbance of `jitter` changes what it should and only that, on whole-host runs
//! against a device of fixed latency (so every difference is the host's): cost variance keeps
//! the mean and widens the tail, the tick moves a polled job's far tail by about its handler
//! cost and not its mean, an interrupt on a polling core delays the reaping by exactly its
//! overlap, and the shared poll lock makes submitters and pollers of one queue wait for each
//! other. Same seed, same result, with everything on.

use engine::{LatencyHistogram, SimTime};

use crate::config::{HostConfig, PollLock};
use crate::cpu::{Cat, IrqAction, IrqWork};
use crate::machine::{Host, HostReport};
use crate::testing::{fio_process, FixedLatencyDevice};

/// A device latency in the class of the Z-SSD's 4 KiB read.
const DEVICE_NS: u64 = 10_000;

/// `arm8` with every disturbance off.
fn quiet() -> HostConfig {
    let mut cfg = HostConfig::preset("arm8").unwrap();
    cfg.jitter.cost_cv_pct = 0;
    cfg.jitter.tick_hz = 0;
    cfg.jitter.poll_lock = PollLock::Split;
    cfg
}

fn run(cfg: &HostConfig, job: &str, seed: u64) -> HostReport {
    let procs = vec![fio_process(job, cfg)];
    let mut host = Host::new(cfg, procs, seed, SimTime::from_ms(2_000), 1 << 40).unwrap();
    let mut dev = FixedLatencyDevice::new(&host, DEVICE_NS);
    dev.run(&mut host, None);
    host.finish().unwrap()
}

fn reads(r: &HostReport, job: usize) -> &LatencyHistogram {
    &r.processes[0].fio_jobs[job].read
}

const QD1_IRQ: &str =
    "[r]\nioengine=pvsync2\ndirect=1\nbs=4k\nrw=randread\nnorandommap\nnumber_ios=20000\n";
const QD1_POLLED: &str =
    "[r]\nioengine=pvsync2\nhipri\ndirect=1\nbs=4k\nrw=randread\nnorandommap\nnumber_ios=20000\n";

#[test]
fn same_seed_same_result_with_every_disturbance_on() {
    let mut cfg = quiet();
    cfg.jitter.cost_cv_pct = 20;
    cfg.jitter.tick_hz = 1_000;
    cfg.jitter.poll_lock = PollLock::Shared;
    cfg.nvme.poll_queues = 1;
    cfg.cpu.cores = 2;
    let job = "[global]\nioengine=pvsync2\ndirect=1\nbs=4k\nrw=randread\nnorandommap\n\
               number_ios=3000\n[a]\nhipri\n[b]\nhipri\n[c]\nioengine=libaio\niodepth=8\n";
    let show = |r: &HostReport| format!("{:?} {:?} {:?}", r.processes, r.cores, r.nvme);
    let a = run(&cfg, job, 11);
    let b = run(&cfg, job, 11);
    assert_eq!(show(&a), show(&b));
    let c = run(&cfg, job, 12);
    assert_ne!(show(&a), show(&c), "another seed draws other costs");
}

/// cv 20 % on every kernel cost: the QD1 mean stays within 0.05 µs (the README tables'
/// rounding step) and the p99.99 grows by more than 1 µs, in both completion modes.
#[test]
fn cost_variance_keeps_the_mean_and_widens_the_tail() {
    for job in [QD1_IRQ, QD1_POLLED] {
        let constant = run(&quiet(), job, 5);
        let mut cfg = quiet();
        cfg.jitter.cost_cv_pct = 20;
        let varied = run(&cfg, job, 5);
        let (c, v) = (reads(&constant, 0), reads(&varied, 0));
        assert_eq!((c.count(), v.count()), (20_000, 20_000));
        assert!(
            c.mean_ns().abs_diff(v.mean_ns()) < 50,
            "mean {} ns constant vs {} ns varied",
            c.mean_ns(),
            v.mean_ns()
        );
        assert!(
            c.quantile_ns(0.9999) - c.quantile_ns(0.5) < 100,
            "constant costs: a flat distribution"
        );
        assert!(
            v.quantile_ns(0.9999) > c.quantile_ns(0.9999) + 1_000,
            "p99.99 {} ns constant vs {} ns varied",
            c.quantile_ns(0.9999),
            v.quantile_ns(0.9999)
        );
        assert!(
            v.quantile_ns(0.0001) < c.quantile_ns(0.0001),
            "and the floor drops"
        );
    }
}

/// The tick (250 Hz, 2 µs) on a polled QD1 job: ≈ 0.3 % of I/Os meet one, so the p99.99 grows
/// by about the handler's 2 µs, the p99 not at all and the mean by under 0.05 µs.
#[test]
fn the_tick_moves_a_polled_job_s_far_tail_not_its_mean() {
    let off = run(&quiet(), QD1_POLLED, 5);
    let mut cfg = quiet();
    cfg.jitter.tick_hz = 250;
    let on = run(&cfg, QD1_POLLED, 5);
    let (a, b) = (reads(&off, 0), reads(&on, 0));
    let grew = b.quantile_ns(0.9999) as i64 - a.quantile_ns(0.9999) as i64;
    let tick = cfg.jitter.tick_ns as i64;
    assert!(
        (tick / 2..=tick * 3 / 2).contains(&grew),
        "p99.99 grew {grew} ns, the handler costs {tick} ns"
    );
    assert_eq!(a.quantile_ns(0.99), b.quantile_ns(0.99));
    assert!(
        b.mean_ns() - a.mean_ns() < 50,
        "{} vs {}",
        a.mean_ns(),
        b.mean_ns()
    );
    // The poller's core is busy until the job ends: it takes every tick until then (one per
    // 4 ms); the idle cores take none.
    let ticks = on.processes[0].fio_jobs[0].last_end_ns / 4_000_000;
    let irq_ns = on.cores[0].ns[Cat::Irq.index()];
    assert!(
        on.cores[0].interrupts.abs_diff(ticks) <= 1,
        "{} ticks in {} ms",
        on.cores[0].interrupts,
        on.processes[0].fio_jobs[0].last_end_ns / 1_000_000
    );
    assert_eq!(irq_ns, on.cores[0].interrupts * cfg.jitter.tick_ns);
    assert!(on.cores[1..].iter().all(|c| c.interrupts == 0));
}

/// Another device's interrupt lands on the poller's core 2 µs before the CQE and runs 5 µs:
/// the poller sees the CQE 3 µs late — exactly the overlap — and nothing else changes.
#[test]
fn an_interrupt_on_a_polling_core_delays_its_reaping_by_the_overlap() {
    let cfg = quiet();
    let job = "[r]\nioengine=pvsync2\nhipri\ndirect=1\nbs=4k\nrw=randread\nnumber_ios=1\n";
    let latency = |irq: bool| {
        let procs = vec![fio_process(job, &cfg)];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(10), 1 << 40).unwrap();
        let mut dev = FixedLatencyDevice::new(&host, DEVICE_NS);
        // Up to the doorbell.
        while dev.commands.is_empty() {
            let next = host.next_event_time().expect("the job is under way");
            dev.run(&mut host, Some(next + 1));
        }
        let doorbell = dev.commands[0].at;
        let at = doorbell + (DEVICE_NS - 2_000);
        dev.run(&mut host, Some(at));
        if irq {
            host.raise_irq_for_test(
                at,
                0,
                IrqWork {
                    ns: 5_000,
                    cat: Cat::Irq,
                    action: IrqAction::None,
                    nvme: false,
                    class: None,
                },
            );
        }
        dev.run(&mut host, None);
        host.finish().unwrap().processes[0].fio_jobs[0]
            .read
            .mean_ns()
    };
    let (clean, hit) = (latency(false), latency(true));
    assert_eq!(
        hit - clean,
        3_000,
        "clean {clean} ns, with the interrupt {hit} ns"
    );
}

/// Two polled QD1 jobs on two cores sharing one poll queue: with the shared lock each waits
/// for the other (submitters for pollers' CQ walks, reapers for submitters) and latency
/// rises; with split locks nobody waits.
#[test]
fn the_shared_poll_lock_serializes_submitters_and_pollers_of_a_queue() {
    let job = "[global]\nioengine=pvsync2\nhipri\ndirect=1\nbs=4k\nrw=randread\nnorandommap\n\
               number_ios=5000\n[a]\n[b]\n";
    let mut cfg = quiet();
    cfg.cpu.cores = 2;
    cfg.nvme.poll_queues = 1;
    let split = run(&cfg, job, 3);
    cfg.jitter.poll_lock = PollLock::Shared;
    let shared = run(&cfg, job, 3);
    let (s, x) = (&split.nvme, &shared.nvme);
    assert_eq!((s.submit_lock_waits, s.poll_lock_waits), (0, 0));
    assert!(x.submit_lock_waits > 500, "{x:?}");
    assert!(x.poll_lock_waits > 0, "{x:?}");
    // A submitter waits at most one CQ walk or one other submission.
    let max_wait = cfg.jitter.poll_lock_hold_ns + cfg.nvme.queue_rq_ns + cfg.nvme.doorbell_write_ns;
    assert!(x.submit_lock_wait_ns <= x.submit_lock_waits * max_wait);
    for j in 0..2 {
        assert!(
            reads(&shared, j).mean_ns() > reads(&split, j).mean_ns(),
            "job {j}: {} ns shared vs {} ns split",
            reads(&shared, j).mean_ns(),
            reads(&split, j).mean_ns()
        );
    }
    // One poll queue per core: no one shares, no one waits, whatever the lock.
    cfg.nvme.poll_queues = 0;
    let own = run(&cfg, job, 3);
    assert_eq!(
        (own.nvme.submit_lock_waits, own.nvme.poll_lock_waits),
        (0, 0)
    );
}
