//! Throughput of the scheduling round with 10 000 tenants on one worker. Ignored by default
//! (timing, not correctness); run it in release mode:
//!
//! ```text
//! cargo test -p qos --release --test bench -- --ignored --nocapture
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
    }
}

/// Runs `rounds` rounds; LC tenants issue open-loop (2 arrivals per 10 µs round spread over
/// the tenants), BE tenants are kept `be_depth` deep. Returns (seconds, requests released).
fn run(b: &mut Bench, start_ns: u64, rounds: u64, be_depth: u32) -> (f64, u64) {
    let mut out: Vec<RequestId> = Vec::with_capacity(4096);
    let mut released = 0u64;
    let mut lc_cursor = 0usize;
    let began = Instant::now();
    for r in 0..rounds {
        // 5 000 tenants × 40 IOPS = 200 K IOPS = 2 per 10 µs round.
        for _ in 0..2 {
            let t = b.lc[lc_cursor % b.lc.len()];
            lc_cursor += 1;
            b.next_id += 1;
            b.sched
                .enqueue(t, 1000, RequestId(b.next_id & !BE_TAG))
                .expect("attached");
        }
        for (i, &t) in b.be.iter().enumerate() {
            while b.be_outstanding[i] < be_depth {
                b.be_outstanding[i] += 1;
                b.next_id += 1;
                let id = BE_TAG | ((i as u64) << 32) | (b.next_id & 0xffff_ffff);
                b.sched.enqueue(t, 1000, RequestId(id)).expect("attached");
            }
        }
        out.clear();
        b.sched.round(start_ns + r * ROUND_NS, &mut out);
        released += out.len() as u64;
        for id in &out {
            if id.0 & BE_TAG != 0 {
                b.be_outstanding[((id.0 & !BE_TAG) >> 32) as usize] -= 1;
            }
        }
    }
    (began.elapsed().as_secs_f64(), released)
}

#[test]
#[ignore = "timing benchmark; run in release with --ignored --nocapture"]
fn bench_ten_thousand_tenants() {
    let mut b = setup();
    let rounds = 20_000;
    // Warm up (allocations of queues, first activations).
    run(&mut b, 1_000_000, 1_000, 2);
    let (secs, released) = run(&mut b, 1_000_000 + 1_000 * ROUND_NS, rounds, 2);
    println!(
        "busy: 10 000 tenants (5 000 LC open-loop, 5 000 BE backlogged): {:.0} rounds/s, {:.0} requests scheduled/s ({} requests in {} rounds, {:.1} µs per round)",
        rounds as f64 / secs,
        released as f64 / secs,
        released,
        rounds,
        secs * 1e6 / rounds as f64
    );
    assert!(released > 0);

    // Drain everything, then measure the idle path.
    let mut unsent_rounds = 0;
    let mut t = 1_000_000 + 30_000 * ROUND_NS;
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
