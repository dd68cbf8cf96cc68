//! The dataplane adapter (`qos::share`) that the server's workers and the simulator's threads
//! both run: with the scheduler on it changes no decision of the bare `Scheduler`'s (prices,
//! attach order, round timing, the shared bucket), one thread or several on one bucket; with
//! it off it is the FIFO baseline.

mod common;

use common::Rng;
use qos::{
    BeSpec, DeviceProfile, Flow, LcSlo, LoadMix, Op, Registry, RegistryConfig, RequestId,
    SchedShare, Scheduler, SchedulerConfig, SchedulerMode, TenantHandle, TenantSpec,
};

/// A fresh registry with the published scenario 1: LC A (120 K reads), LC B (70 K, 80 %
/// reads), BE C and D.
fn scenario_one_registry() -> (Registry, Vec<TenantHandle>) {
    let mut reg = Registry::new(DeviceProfile::reflex_a(), RegistryConfig::default());
    let lc = |iops, read_pct| {
        TenantSpec::LatencyCritical(LcSlo {
            p95_read_latency_ns: 500_000,
            iops,
            read_pct,
            request_bytes: 4096,
        })
    };
    let be = TenantSpec::BestEffort(BeSpec::default());
    let handles = [lc(120_000, 100), lc(70_000, 80), be, be]
        .into_iter()
        .map(|s| reg.register(s).expect("scenario 1 fits reflex-a"))
        .collect();
    (reg, handles)
}

/// A random request: three reads in four, 4 to 16 KiB.
fn request(rng: &mut Rng) -> (Op, u64) {
    let op = if rng.below(4) < 3 {
        Op::Read
    } else {
        Op::Write
    };
    (op, 4096 * (1 + rng.below(4)))
}

/// One request sequence (random tenants, ops and sizes; rounds at random gaps) fed to the
/// adapter and to a bare scheduler on an identical registry: every round releases the same ids
/// in the same order, with the same deficit hits, at the same prices.
#[test]
fn the_adapter_makes_the_schedulers_grant_decisions() {
    let (adapter_reg, adapter_handles) = scenario_one_registry();
    let (bare_reg, bare_handles) = scenario_one_registry();
    let tuning = SchedulerConfig::default();
    let mut adapter =
        SchedShare::new(SchedulerMode::On, adapter_reg.shared(), tuning).expect("adapter");
    let mut bare = Scheduler::new(bare_reg.shared(), tuning).expect("scheduler");
    let adapter_flows: Vec<_> = adapter_handles.iter().map(|h| adapter.attach(h)).collect();
    let bare_flows: Vec<_> = bare_handles.iter().map(|h| bare.attach(h)).collect();
    let cost = DeviceProfile::reflex_a().cost_model();
    let mut rng = Rng::new(7);
    let (mut out_adapter, mut out_bare) = (Vec::new(), Vec::new());
    let mut now_ns = 1_000_000u64;
    let mut id = 0u64;
    let mut released = 0usize;
    for round in 0..20_000 {
        for _ in 0..rng.below(6) {
            let t = rng.below(4) as usize;
            let (op, len) = request(&mut rng);
            // B writes: the device is in the mixed regime.
            let c = adapter.cost_mtok(op, len);
            assert_eq!(c, cost.request_cost_mtok(op, len, LoadMix::Mixed));
            assert_eq!(c, bare.cost_mtok(op, len));
            adapter.enqueue(adapter_flows[t], c, RequestId(id));
            bare.enqueue(bare_flows[t], c, RequestId(id))
                .expect("attached");
            id += 1;
        }
        now_ns += 1 + rng.below(20_000);
        out_adapter.clear();
        out_bare.clear();
        let hits = adapter.round(now_ns, &mut out_adapter);
        let stats = bare.round(now_ns, &mut out_bare);
        assert_eq!(out_adapter, out_bare, "round {round} at {now_ns} ns");
        assert_eq!(hits, stats.deficit_hits, "round {round}");
        assert_eq!(adapter.queued(), bare.queued(), "round {round}");
        assert_eq!(adapter.queued_lc(), bare.queued_lc(), "round {round}");
        released += out_adapter.len();
    }
    // The sequence must exercise holding back as well as releasing.
    assert!(released > 1_000, "released {released}");
    assert!(
        adapter.queued() > 0 || released < id as usize,
        "nothing was ever held back"
    );
    // Detaching hands back what the flow still had queued, as the scheduler does.
    let (mut unsent_adapter, mut unsent_bare) = (Vec::new(), Vec::new());
    for (a, b) in adapter_flows.into_iter().zip(bare_flows) {
        adapter.detach(a, &mut unsent_adapter).expect("attached");
        bare.detach(b, &mut unsent_bare).expect("attached");
    }
    assert_eq!(unsent_adapter, unsent_bare);
    assert_eq!(adapter.queued(), 0);
}

/// Several threads on one device, each with its share of the registry's bucket (as each server
/// worker and each simulated thread has): A and B on thread 0, C on thread 1, D on both (a
/// tenant spanning threads earns and pays once, through its shared ledger). Rounds on the
/// threads interleave at random and run only when the thread has something queued (both
/// dataplane loops skip empty rounds): every round releases the same ids as bare schedulers
/// and leaves the shared bucket in the same state (balance, deposits, takings, discards,
/// resets).
#[test]
fn several_shares_of_one_bucket_make_the_schedulers_grant_decisions() {
    const THREADS: usize = 2;
    let (adapter_reg, adapter_handles) = scenario_one_registry();
    let (bare_reg, bare_handles) = scenario_one_registry();
    let tuning = SchedulerConfig::default();
    let mut adapter: Vec<_> = (0..THREADS)
        .map(|_| SchedShare::new(SchedulerMode::On, adapter_reg.shared(), tuning).expect("share"))
        .collect();
    let mut bare: Vec<_> = (0..THREADS)
        .map(|_| Scheduler::new(bare_reg.shared(), tuning).expect("scheduler"))
        .collect();
    // (tenant, thread) pairs a request may arrive on: D (3) on both threads.
    let placements = [(0usize, 0usize), (1, 0), (2, 1), (3, 0), (3, 1)];
    let adapter_flows: Vec<_> = placements
        .iter()
        .map(|&(t, w)| adapter[w].attach(&adapter_handles[t]))
        .collect();
    let bare_flows: Vec<_> = placements
        .iter()
        .map(|&(t, w)| bare[w].attach(&bare_handles[t]))
        .collect();
    let mut rng = Rng::new(11);
    let (mut out_adapter, mut out_bare) = (Vec::new(), Vec::new());
    let mut now_ns = 1_000_000u64;
    let mut id = 0u64;
    let mut released = [0usize; THREADS];
    for step in 0..40_000 {
        // Alternate heavy phases (tenants over their rates: requests held back) and light ones
        // (LC tenants under their reservations: they donate, BE tenants borrow).
        let heavy = (step / 2_000) % 2 == 0;
        let arrivals = rng.below(if heavy { 6 } else { 2 });
        for _ in 0..arrivals {
            let p = rng.below(placements.len() as u64) as usize;
            let w = placements[p].1;
            let (op, len) = request(&mut rng);
            let c = adapter[w].cost_mtok(op, len);
            assert_eq!(c, bare[w].cost_mtok(op, len), "price, step {step}");
            adapter[w].enqueue(adapter_flows[p], c, RequestId(id));
            bare[w]
                .enqueue(bare_flows[p], c, RequestId(id))
                .expect("attached");
            id += 1;
        }
        now_ns += 1 + rng.below(if heavy { 10_000 } else { 60_000 });
        let w = rng.below(THREADS as u64) as usize;
        assert_eq!(adapter[w].queued(), bare[w].queued(), "step {step}");
        if adapter[w].queued() == 0 {
            continue;
        }
        out_adapter.clear();
        out_bare.clear();
        adapter[w].round(now_ns, &mut out_adapter);
        bare[w].round(now_ns, &mut out_bare);
        assert_eq!(
            out_adapter, out_bare,
            "step {step}, thread {w} at {now_ns} ns"
        );
        let (a, b) = (adapter_reg.shared().stats(), bare_reg.shared().stats());
        assert_eq!(a, b, "shared bucket after step {step}, thread {w}");
        released[w] += out_adapter.len();
    }
    // Both threads released plenty, tokens went through the shared bucket (deposited by one
    // tenant, taken by another) and it was reset, and some requests were held back.
    assert!(released.iter().all(|&r| r > 1_000), "released {released:?}");
    let bucket = adapter_reg.shared().stats();
    assert!(
        bucket.taken_mtok > 0 && bucket.resets > 0,
        "the shared bucket was never used: {bucket:?}"
    );
    let total: usize = released.iter().sum();
    assert!(
        total < id as usize || adapter.iter().any(|s| s.queued() > 0),
        "nothing was ever held back"
    );
}

/// With the scheduler off every request is released in arrival order by the next round,
/// whatever its tenant and price; the price reported is the profile's mixed-load one.
#[test]
fn the_fifo_baseline_releases_everything_in_arrival_order() {
    let (reg, handles) = scenario_one_registry();
    let mut fifo = SchedShare::new(SchedulerMode::Off, reg.shared(), SchedulerConfig::default())
        .expect("fifo");
    let flows: Vec<_> = handles.iter().map(|h| fifo.attach(h)).collect();
    assert!(flows.iter().all(|&f| f == Flow::Fifo), "{flows:?}");
    let cost = DeviceProfile::reflex_a().cost_model();
    let mut rng = Rng::new(3);
    let mut out = Vec::new();
    let mut next_id = 0u64;
    for round in 0..1_000u64 {
        let arrivals = rng.below(200);
        for _ in 0..arrivals {
            let (op, len) = request(&mut rng);
            let c = fifo.cost_mtok(op, len);
            assert_eq!(c, cost.request_cost_mtok(op, len, LoadMix::Mixed));
            fifo.enqueue(flows[rng.below(4) as usize], c, RequestId(next_id));
            next_id += 1;
        }
        // No classes: everything queued counts as latency-critical, so no round is throttled.
        assert_eq!(fifo.queued_lc(), fifo.queued());
        out.clear();
        assert_eq!(fifo.round(round * 1_000, &mut out), 0, "no deficit hits");
        let first = next_id - arrivals;
        assert_eq!(out, (first..next_id).map(RequestId).collect::<Vec<_>>());
        assert_eq!(fifo.queued(), 0);
    }
    // Detaching a FIFO flow hands nothing back: its requests stay in the queue, in order.
    fifo.enqueue(flows[0], 0, RequestId(1));
    fifo.enqueue(flows[1], 0, RequestId(2));
    let mut unsent = Vec::new();
    fifo.detach(flows[0], &mut unsent).expect("fifo detach");
    assert!(unsent.is_empty());
    out.clear();
    fifo.round(0, &mut out);
    assert_eq!(out, [RequestId(1), RequestId(2)]);
}

/// A flow of the other mode is a caller's bug: the request would be lost, so it stops.
#[test]
#[should_panic(expected = "other scheduler mode")]
fn a_flow_of_the_other_mode_is_refused() {
    let (reg, _) = scenario_one_registry();
    let mut s = SchedShare::new(SchedulerMode::On, reg.shared(), SchedulerConfig::default())
        .expect("scheduler");
    s.enqueue(Flow::Fifo, 1_000, RequestId(0));
}
