//! The execution-time breakdown (`exectime`) on whole-host runs against a device of fixed
//! latency, so every figure can be worked out by hand: a synchronous reader's I/O wait is the
//! device's latency plus the completion interrupt's work, a polling reader's wait is spinning
//! instead, and an online request's parts are its network trips, its compute and its I/O. (The
//! per-thread cases that need no host — a thread that only computes, two threads sharing a core,
//! an interrupt stealing time — are in `cpu`'s tests.) The code under test is spread over `cpu`
//! (every transition), `machine` (`sleep`'s reason) and `app` (a request's hand-overs).

use engine::{IoClass, SimTime};
use workload::Profile;

use crate::config::{HostConfig, PollLock};
use crate::exectime::{Span, SPANS};
use crate::machine::{Host, HostReport};
use crate::process::{Arrivals, ProcessSpec};
use crate::testing::{fio_process, FixedLatencyDevice};

const DEVICE_NS: u64 = 10_000;

/// `arm8` with every disturbance off (no tick, constant costs).
fn quiet() -> HostConfig {
    let mut cfg = HostConfig::preset("arm8").unwrap();
    cfg.jitter.cost_cv_pct = 0;
    cfg.jitter.tick_hz = 0;
    cfg.jitter.poll_lock = PollLock::Split;
    cfg
}

fn run(cfg: &HostConfig, procs: Vec<ProcessSpec>, duration_ms: u64) -> HostReport {
    let mut host = Host::new(cfg, procs, 1, SimTime::from_ms(duration_ms), 1 << 40).unwrap();
    FixedLatencyDevice::new(&host, DEVICE_NS).run(&mut host, None);
    host.finish().unwrap()
}

fn span(r: &HostReport, p: usize, s: Span) -> u64 {
    r.processes[p].exec_time.ns[s.index()]
}

const READS: u64 = 2_000;

fn qd1_reads(hipri: bool) -> String {
    format!(
        "[r]\nioengine=pvsync2\n{}direct=1\nbs=4k\nrw=randread\nnorandommap\nnumber_ios={READS}\n",
        if hipri { "hipri\n" } else { "" }
    )
}

/// A QD1 reader on its own core, interrupts: it sleeps from the doorbell until the completion
/// interrupt's block-layer work wakes it, so its I/O wait is exactly the device's latency plus
/// the ISR and the completion, per read; it never polls, and it never waits for its core.
#[test]
fn a_reader_blocked_on_a_known_latency_has_exactly_that_wait_in_io_wait() {
    let cfg = quiet();
    let r = run(&cfg, vec![fio_process(&qd1_reads(false), &cfg)], 2_000);
    let per_io = DEVICE_NS + cfg.cpu.isr_ns + cfg.blk.complete_ns;
    assert_eq!(span(&r, 0, Span::IoWait), READS * per_io);
    assert_eq!(span(&r, 0, Span::Poll), 0);
    assert_eq!(span(&r, 0, Span::RunQueue), 0, "alone on its core");
    assert_eq!(
        span(&r, 0, Span::IrqStolen),
        0,
        "its completions land while it sleeps"
    );
    // Kernel work per read: the system call, the block layer, the driver; then the switch back.
    assert!(span(&r, 0, Span::Syscall) >= READS * cfg.app.syscall_ns);
    assert!(span(&r, 0, Span::Blk) > 0 && span(&r, 0, Span::Nvme) > 0);
    assert!(span(&r, 0, Span::Sched) >= READS * cfg.cpu.context_switch_ns);
    let e = &r.processes[0].exec_time;
    assert_eq!(e.threads, 1);
    assert_eq!(e.ns.iter().sum::<u64>(), e.lifetime_ns);
}

/// The same reader polling: the device's latency is spent spinning on its core (`poll`), not
/// asleep; there is no interrupt and no switch back per read.
#[test]
fn a_polling_reader_spends_the_device_latency_in_poll_not_io_wait() {
    let cfg = quiet();
    let irq = run(&cfg, vec![fio_process(&qd1_reads(false), &cfg)], 2_000);
    let polled = run(&cfg, vec![fio_process(&qd1_reads(true), &cfg)], 2_000);
    assert_eq!(span(&polled, 0, Span::IoWait), 0);
    let poll = span(&polled, 0, Span::Poll);
    assert!(
        (READS * DEVICE_NS..READS * (DEVICE_NS + 10_000)).contains(&poll),
        "{poll} ns of polling for {READS} reads of {DEVICE_NS} ns"
    );
    assert!(span(&polled, 0, Span::Sched) < span(&irq, 0, Span::Sched) / 100);
}

fn apache(cfg: &HostConfig) -> ProcessSpec {
    let mut spec = ProcessSpec::from_profile(
        Profile::named("apache").unwrap(),
        IoClass::LatencyCritical,
        cfg,
    );
    spec.arrivals = Arrivals::Fixed;
    spec.requests_per_sec = 1_000;
    // Four workers (the profile runs one): a request takes about 1.6 ms, so with a request
    // every millisecond two are busy at most and a worker is always idle.
    spec.threads = 4;
    spec
}

/// apache alone on four workers, a request every millisecond (each takes about 1.6 ms, so one
/// of its four workers is always idle): every request's network part is the client's send and two one-way
/// trips, its compute is its instructions at the core's speed, and it never waits for a worker;
/// the server and the workers spend the rest of their lives idle.
#[test]
fn an_online_request_splits_into_network_compute_and_io_exactly() {
    let cfg = quiet();
    let spec = apache(&cfg);
    let compute_ns = cfg.instructions_ns(spec.instructions_per_request);
    let r = run(&cfg, vec![spec], 50);
    let p = &r.processes[0];
    let rt = p
        .request_time
        .as_ref()
        .expect("an online service splits its requests");
    assert_eq!(rt.requests, 49);
    assert_eq!(rt.requests, p.requests);
    let net = cfg.app.client_send_ns + 2 * cfg.app.net_one_way_ns;
    assert_eq!(rt.sum.network_ns, rt.requests * net);
    // Compute is split around the I/Os, each piece rounded up to a whole nanosecond.
    let user = rt.sum.spans[Span::User.index()];
    assert!(
        user >= rt.requests * compute_ns && user <= rt.requests * (compute_ns + 4),
        "{user} ns of compute for {} requests of {compute_ns} ns",
        rt.requests
    );
    assert_eq!(
        rt.sum.worker_queue_ns, 0,
        "an idle worker takes every request"
    );
    assert_eq!(
        rt.sum.spans[Span::Idle.index()],
        0,
        "no one idles on a request"
    );
    // The server's receive and hand-off, the worker's reply, and the read system calls.
    let app = &cfg.app;
    assert!(
        rt.sum.spans[Span::Syscall.index()]
            >= rt.requests * (app.net_recv_ns + app.handoff_ns + app.reply_ns)
    );
    // The parts add up to the response times (checked per request, and here in sum).
    assert_eq!(
        rt.sum.network_ns + rt.sum.worker_queue_ns + rt.sum.spans.iter().sum::<u64>(),
        rt.response_ns
    );
    assert_eq!(rt.response_ns / rt.requests, p.response.mean_ns());
    // apache reads directly, interrupts: its I/O is asleep in `io_wait`.
    assert!(rt.sum.spans[Span::IoWait.index()] > 0);
    // The threads: a server and four workers alive the whole run, mostly idle.
    let e = &p.exec_time;
    assert_eq!(e.threads, 5);
    assert_eq!(e.lifetime_ns, 5 * r.end.as_ns());
    assert!(e.ns[Span::Idle.index()] > e.lifetime_ns / 2, "{e:?}");
    assert_eq!(
        e.ns[Span::User.index()],
        user,
        "workers compute only for requests"
    );
}

/// A process that starts late lives from its start: time before it is no part of its life.
#[test]
fn a_late_process_lives_from_its_start() {
    let cfg = quiet();
    let mut spec = apache(&cfg);
    spec.start = SimTime::from_ms(20);
    let r = run(&cfg, vec![spec], 50);
    let e = &r.processes[0].exec_time;
    assert_eq!(e.lifetime_ns, 5 * (r.end.as_ns() - 20_000_000));
    assert_eq!(e.ns.iter().sum::<u64>(), e.lifetime_ns);
}

/// Beside a CPU hog on every core the same service's workers wait for their cores: run-queue
/// time appears in its requests and in its threads, and every span still adds up.
#[test]
fn co_running_with_hogs_shows_as_cpu_wait() {
    let cfg = quiet();
    let alone = run(&cfg, vec![apache(&cfg)], 100);
    let pagerank = ProcessSpec::from_profile(
        Profile::named("pagerank").unwrap(),
        IoClass::Throughput,
        &cfg,
    );
    let co = run(&cfg, vec![apache(&cfg), pagerank], 100);
    let wait = |r: &HostReport| {
        let rt = r.processes[0].request_time.as_ref().unwrap();
        (rt.sum.spans[Span::RunQueue.index()] + rt.sum.spans[Span::IrqStolen.index()]) / rt.requests
    };
    // Alone, a woken thread finds its core idle; beside pagerank the server thread waits out
    // a hog's slice for most requests (tens of µs: 74 µs per request with this seed, 0.4 µs more stolen by interrupts).
    assert!(
        wait(&alone) < 1_000,
        "alone: {} ns of CPU wait per request",
        wait(&alone)
    );
    assert!(
        wait(&co) > 20_000,
        "CPU wait per request: {} ns co-running, {} ns alone",
        wait(&co),
        wait(&alone)
    );
    for p in &co.processes {
        let e = &p.exec_time;
        assert_eq!(e.ns.iter().sum::<u64>(), e.lifetime_ns, "{}", p.name);
        for s in SPANS {
            assert!(e.ns[s.index()] <= e.lifetime_ns);
        }
    }
    let hog = &co.processes[1].exec_time;
    assert!(
        hog.ns[Span::User.index()] > hog.lifetime_ns / 2,
        "pagerank computes most of its life: {hog:?}"
    );
}
