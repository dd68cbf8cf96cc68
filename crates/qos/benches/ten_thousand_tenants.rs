//! Throughput of the scheduling round with 10 000 tenants on one worker (timing, not
//! correctness: `tests/scheduler.rs` checks that 10 000 tenants are served fairly). Prints its
//! figures:
//!
//! ```text
//! cargo bench -p qos --bench ten_thousand_tenants
//! ```

use std::time::Instant;

use qos::{
    BeSpec, DeviceProfile, LcSlo, LocalTenant, Registry, RegistryConfig, RequestId, Scheduler,
    SchedulerConfig, TenantSpec,
};

const TENANTS_PER_CLASS: usize = 5_000;
const ROUND_NS: u64 = 10_000;

struct Bench {
    _registry: Registry,
    sched: Scheduler,
    lc: Vec<LocalTenant>,
    be: Vec<LocalTenant>,
    /// Outstanding requests per BE tenant (kept at `be_depth`).
    be_outstanding: Vec<u32>,
    next_id: u64,
    /// Whether released BE requests are replaced.
    refill: bool,
}

/// Request ids encode the tenant: BE ids are `BE_TAG | index << 32 | seq`.
const BE_TAG: u64 = 1 << 63;

fn setup() -> Bench {
    let mut registry = Registry::new(DeviceProfile::reflex_a(), RegistryConfig::default());
    let mut sched = Scheduler::new(registry.shared(), SchedulerConfig::default()).expect("config");
    let mut lc = Vec::new();
    for _ in 0..TENANTS_PER_CLASS {
        // 40 IOPS of 4 KB reads at 500 µs: 200 K tokens/s reserved in all.
        let h = registry
            .register(TenantSpec::LatencyCritical(LcSlo {
                p95_read_latency_ns: 500_000,
                iops: 40,
                read_pct: 100,
                request_bytes: 4096,
            }))
            .expect("fits");
        lc.push(sched.attach(&h));
    }
    let mut be = Vec::new();
    for _ in 0..TENANTS_PER_CLASS {
        let h = registry
            .register(TenantSpec::BestEffort(BeSpec::default()))
            .expect("BE");
        be.push(sched.attach(&h));
    }
    Bench {
        _registry: registry,
        sched,
        lc,
        be,
        be_outstanding: vec![0; TENANTS_PER_CLASS],
        next_id: 0,
        refill: true,
    }
}

/// Fills every BE tenant's queue to `depth`.
fn fill(b: &mut Bench, depth: u32) {
    for i in 0..b.be.len() {
        while b.be_outstanding[i] < depth {
            enqueue_be(b, i);
        }
    }
}

fn enqueue_be(b: &mut Bench, i: usize) {
    b.be_outstanding[i] += 1;
    b.next_id += 1;
    let id = BE_TAG | ((i as u64) << 32) | (b.next_id & 0xffff_ffff);
    b.sched
        .enqueue(b.be[i], 1000, RequestId(id))
        .expect("attached");
}

/// Runs `rounds` rounds `round_ns` apart; LC tenants issue open loop at 40 IOPS each (spread
/// evenly over the tenants), each BE tenant is kept backlogged (a released request is replaced
/// at once). Returns (seconds, requests released).
fn run(b: &mut Bench, start_ns: u64, rounds: u64, round_ns: u64) -> (f64, u64) {
    let mut out: Vec<RequestId> = Vec::with_capacity(1 << 16);
    let mut released = 0u64;
    let mut lc_cursor = 0usize;
    // 5 000 tenants × 40 IOPS = 200 K IOPS: arrivals per round, in thousandths.
    let lc_arrivals_milli = 200_000 * round_ns / 1_000_000;
    let mut lc_due_milli = 0u64;
    let began = Instant::now();
    for r in 0..rounds {
        lc_due_milli += lc_arrivals_milli;
        while lc_due_milli >= 1000 {
            lc_due_milli -= 1000;
            let t = b.lc[lc_cursor % b.lc.len()];
            lc_cursor += 1;
            b.next_id += 1;
            b.sched
                .enqueue(t, 1000, RequestId(b.next_id & !BE_TAG))
                .expect("attached");
        }
        out.clear();
        b.sched.round(start_ns + r * round_ns, &mut out);
        released += out.len() as u64;
        for request in &out {
            let id = request.0;
            if id & BE_TAG != 0 && b.refill {
                let t = ((id & !BE_TAG) >> 32) as usize;
                b.be_outstanding[t] -= 1;
                enqueue_be(b, t);
            }
        }
    }
    (began.elapsed().as_secs_f64(), released)
}

fn report(label: &str, rounds: u64, secs: f64, released: u64) {
    println!(
        "{label}: {:.0} rounds/s, {:.0} requests scheduled/s ({released} requests in {rounds} rounds, {:.2} µs per round)",
        rounds as f64 / secs,
        released as f64 / secs,
        secs * 1e6 / rounds as f64
    );
}

fn main() {
    let mut b = setup();
    fill(&mut b, 2);
    let mut t = 1_000_000;
    // Warm up (queue allocations, first activations).
    run(&mut b, t, 1_000, ROUND_NS);
    t += 1_000 * ROUND_NS;
    // Server-like: a round every 10 µs of device time (420 K tokens/s ⇒ ~4 requests a round).
    let rounds = 50_000;
    let (secs, released) = run(&mut b, t, rounds, ROUND_NS);
    t += rounds * ROUND_NS;
    report(
        "10 000 tenants (5 000 LC open-loop, 5 000 BE backlogged), 10 µs rounds",
        rounds,
        secs,
        released,
    );
    assert!(released > 0);
    // Batchy: a round every 1 ms of device time (~420 requests a round): the per-request cost.
    let rounds = 2_000;
    let (secs, released) = run(&mut b, t, rounds, 1_000_000);
    t += rounds * 1_000_000;
    report("10 000 tenants, 1 ms rounds", rounds, secs, released);

    // Drain everything, then measure the idle path (all 10 000 tenants still attached).
    b.refill = false;
    let mut unsent_rounds = 0;
    let mut out = Vec::new();

    while b.sched.queued() > 0 {
        out.clear();
        b.sched.round(t, &mut out);
        t += 1_000_000;
        unsent_rounds += 1;
        assert!(unsent_rounds < 100_000, "queues never drained");
    }
    let idle_rounds = 1_000_000u64;
    let began = Instant::now();
    for r in 0..idle_rounds {
        out.clear();
        b.sched.round(t + r * ROUND_NS, &mut out);
    }
    let secs = began.elapsed().as_secs_f64();
    println!(
        "idle: 10 000 tenants, nothing queued: {:.0} rounds/s ({:.0} ns per round)",
        idle_rounds as f64 / secs,
        secs * 1e9 / idle_rounds as f64
    );
    assert!(out.is_empty());
}
