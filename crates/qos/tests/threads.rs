//! Real threads sharing the bucket and a tenant's ledger, as the server's workers do. The
//! scheduler stays deterministic per worker; what this checks is the atomics: under contention
//! a spanning tenant still earns once and pays once, and every ledger still balances.

use std::sync::atomic::{AtomicU64, Ordering};

use qos::{
    BeSpec, DeviceProfile, LcSlo, Registry, RegistryConfig, RequestId, Scheduler, SchedulerConfig,
    SharedBucket, TenantHandle, TenantSpec,
};

fn assert_send<T: Send>() {}
fn assert_send_sync<T: Send + Sync + Clone>() {}

#[test]
fn handles_cross_threads() {
    assert_send::<Scheduler>();
    assert_send_sync::<SharedBucket>();
    assert_send_sync::<TenantHandle>();
}

#[test]
fn a_spanning_tenant_on_two_threads_earns_and_pays_once() {
    const ROUNDS: u64 = 20_000;
    const ROUND_NS: u64 = 10_000;
    let mut registry = Registry::new(DeviceProfile::reflex_a(), RegistryConfig::default());
    let lc = registry
        .register(TenantSpec::LatencyCritical(LcSlo {
            p95_read_latency_ns: 500_000,
            iops: 100_000,
            read_pct: 100,
            request_bytes: 4096,
        }))
        .expect("fits");
    let be = registry
        .register(TenantSpec::BestEffort(BeSpec::default()))
        .expect("BE");
    // It earns its reservation plus the LC surge (the default configuration).
    let lc_rate = qos::lc_earning_rate_mtok_per_sec(
        lc.reservation_mtok_per_sec(),
        registry.capacity().lc_surge_ppm,
    );
    assert!(lc_rate > lc.reservation_mtok_per_sec(), "the surge applies");
    let be_rate = registry.capacity().be_share_mtok_per_sec;
    // One monotonic clock for both workers, as the server reads CLOCK_MONOTONIC: each round
    // advances it by half a round, so the two workers together see ROUNDS × ROUND_NS pass.
    let clock = AtomicU64::new(1_000_000);
    let workers: Vec<Scheduler> = (0..2)
        .map(|_| Scheduler::new(registry.shared(), SchedulerConfig::default()).expect("config"))
        .collect();
    let released: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let joins: Vec<_> = workers
            .into_iter()
            .enumerate()
            .map(|(w, mut sched)| {
                let (lc, be, clock) = (lc.clone(), be.clone(), &clock);
                scope.spawn(move || {
                    let lc_local = sched.attach(&lc);
                    let be_local = sched.attach(&be);
                    let mut out = Vec::new();
                    let (mut lc_mtok, mut be_mtok) = (0u64, 0u64);
                    let mut next = 0u64;
                    for _ in 0..ROUNDS {
                        while sched.queued() < 8 {
                            next += 1;
                            let id = (w as u64) << 62 | next << 1;
                            sched
                                .enqueue(lc_local, 1000, RequestId(id))
                                .expect("attached");
                            sched
                                .enqueue(be_local, 1000, RequestId(id | 1))
                                .expect("attached");
                        }
                        out.clear();
                        let now_ns = clock.fetch_add(ROUND_NS / 2, Ordering::SeqCst) + ROUND_NS / 2;
                        sched.round(now_ns, &mut out);
                        for id in &out {
                            if id.0 & 1 == 0 {
                                lc_mtok += 1000;
                            } else {
                                be_mtok += 1000;
                            }
                        }
                    }
                    let mut unsent = Vec::new();
                    sched.detach(lc_local, &mut unsent).expect("attached");
                    sched.detach(be_local, &mut unsent).expect("attached");
                    (lc_mtok, be_mtok)
                })
            })
            .collect();
        joins
            .into_iter()
            .map(|j| j.join().expect("worker"))
            .collect()
    });
    let elapsed_ns = u128::from(clock.load(Ordering::SeqCst) - 1_000_000);
    for (name, handle, rate, spent) in [
        ("LC", &lc, lc_rate, released[0].0 + released[1].0),
        ("BE", &be, be_rate, released[0].1 + released[1].1),
    ] {
        let c = handle.counters();
        let books =
            i128::from(c.earned_mtok) - i128::from(c.spent_mtok) - i128::from(c.donated_mtok)
                + i128::from(c.borrowed_mtok);
        assert_eq!(books, i128::from(c.balance_mtok), "{name} ledger: {c:?}");
        assert_eq!(
            c.spent_mtok, spent,
            "{name}: every release paid exactly once"
        );
        assert_eq!(c.requests_queued, 0);
        let earned_max = u128::from(rate) * elapsed_ns / 1_000_000_000;
        assert!(
            u128::from(c.earned_mtok) <= earned_max + 1,
            "{name} earned {} mtok, more than its rate allows ({earned_max})",
            c.earned_mtok
        );
        // Both threads kept it backlogged: it earned (nearly) all of it, once.
        assert!(
            u128::from(c.earned_mtok) * 100 >= earned_max * 99,
            "{name} earned only {} of {earned_max} mtok",
            c.earned_mtok
        );
    }
    assert_eq!(lc.attached_workers(), 0);
    registry.unregister(lc.id()).expect("detached everywhere");
}
