//! The LC surge (see `qos::admission`): an LC tenant whose requests arrive as a Poisson
//! stream at exactly its reservation must still meet its latency target, alone and next to
//! best-effort floods, without taking more than its reservation plus its surge, and the BE
//! tenants still get what the LC tenants leave. The sweep of the scheduler's wait against
//! surge and offered load that chose the default is `examples/surge_sweep.rs`.

mod common;

use common::surge::{flood, lc, poisson, MS, ROUND_NS};
use common::{Harness, Load};
use qos::{BeSpec, LcSlo, RegistryConfig, SchedulerConfig, TenantSpec};

const DEVICE_TOKENS_PER_SEC: f64 = 420_000.0;

fn be() -> TenantSpec {
    TenantSpec::BestEffort(BeSpec::default())
}

/// Scenario 1's LC tenant: `iops` of 4 KiB requests, `read_pct` % reads, a 500 µs p95.
fn spec(iops: u64, read_pct: u8) -> TenantSpec {
    TenantSpec::LatencyCritical(LcSlo {
        p95_read_latency_ns: 500_000,
        iops,
        read_pct,
        request_bytes: 4096,
    })
}

/// Poisson arrivals of 4 KiB requests at `iops`, `read_pct` % reads.
fn load(iops: u64, read_pct: u8) -> Load {
    Load::Poisson {
        iops,
        read_pct,
        bytes: 4096,
    }
}

fn harness(lc_surge_pct: u32) -> Harness {
    Harness::with_registry(
        1,
        ROUND_NS,
        SchedulerConfig::default(),
        RegistryConfig {
            lc_surge_pct,
            ..RegistryConfig::default()
        },
    )
}

/// Requests released over requests that arrived, since the last reset (arrivals before the
/// reset that were released after it count as released: this is a lower bound check only).
fn served_fraction(h: &Harness, t: usize, window_ns: u64, offered_iops: u64) -> f64 {
    h.iops(t, window_ns) / offered_iops as f64
}

/// Issue 9 §1: 20 K IOPS at `p95 = 500 µs` with 90 % reads, offered as Poisson arrivals at
/// exactly its reservation. The scheduler's own wait (arrival to release) must leave the
/// device almost the whole target: its p95 must stay under 100 µs (10 rounds), alone and next
/// to a QD32 best-effort flood. Paced at exactly its reservation (no surge: the published
/// rule) the same stream waits tens of milliseconds — the 19–20 ms.
#[test]
fn lc_poisson_at_its_reservation_meets_its_target_alone_and_next_to_be() {
    for with_be in [false, true] {
        let mut results = Vec::new();
        for surge_pct in [qos::DEFAULT_LC_SURGE_PCT, 0] {
            let mut h = harness(surge_pct);
            let t = h.add(lc(20_000), poisson(20_000), &[0]);
            let b = with_be.then(|| h.add(be(), flood(), &[0]));
            h.run_for(100 * MS);
            h.reset_measurements();
            let window = 2_000 * MS;
            h.run_for(window);
            let p95 = h.read_wait_p95_ns(t);
            println!("surge {surge_pct} %, BE {with_be}: LC read wait p95 {p95} ns");
            results.push((p95, served_fraction(&h, t, window, 20_000)));
            if let (Some(b), true) = (b, surge_pct > 0) {
                // The BE tenant gets what the LC tenant leaves, and the device no more.
                let lc_tokens = h.tokens_per_sec(t, window);
                let be_tokens = h.tokens_per_sec(b, window);
                assert!(
                    be_tokens >= 0.97 * (DEVICE_TOKENS_PER_SEC - lc_tokens),
                    "BE got {be_tokens:.0} tokens/s next to LC's {lc_tokens:.0} of {DEVICE_TOKENS_PER_SEC}"
                );
                assert!(
                    lc_tokens + be_tokens <= DEVICE_TOKENS_PER_SEC * 1.005,
                    "device offered {:.0} tokens/s",
                    lc_tokens + be_tokens
                );
            }
        }
        let ((with, served), (without, _)) = (results[0], results[1]);
        assert!(
            with <= 100_000,
            "with the surge the LC read wait p95 is {with} ns (BE {with_be})"
        );
        assert!(
            served >= 0.97,
            "the LC tenant got {:.1} % of what it offered (BE {with_be})",
            served * 100.0
        );
        assert!(
            without > 5_000_000,
            "paced at exactly its reservation the wait p95 is only {without} ns: the test no longer reproduces the issue"
        );
    }
}

/// An LC tenant offering twice its reservation earns no more than its reservation plus its
/// surge and takes the rest only from spare tokens (the bucket) — never from another LC
/// tenant, which still meets its target at exactly its own reservation, nor from the BE
/// tenants' own shares.
#[test]
fn an_lc_tenant_far_above_its_reservation_does_not_hurt_another() {
    let mut h = harness(qos::DEFAULT_LC_SURGE_PCT);
    let greedy = h.add(lc(20_000), poisson(40_000), &[0]);
    let polite = h.add(lc(20_000), poisson(20_000), &[0]);
    let flood_be = h.add(be(), flood(), &[0]);
    let cap = h.registry.capacity();
    assert_eq!(
        cap.lc_surge_ppm, 500_000,
        "the device has room for the full surge"
    );
    h.run_for(100 * MS);
    let borrowed_before = h.tenants[greedy].handle.counters().borrowed_mtok;
    h.reset_measurements();
    let window = 2_000 * MS;
    h.run_for(window);
    let c = h.tenants[greedy].handle.counters();
    let borrowed = (c.borrowed_mtok - borrowed_before) as f64 / 1000.0 / 2.0;
    // 38 K tokens/s reserved + 50 % = 57 K tokens/s of its own, plus what it borrowed.
    let greedy_tokens = h.tokens_per_sec(greedy, window);
    println!("greedy LC: {greedy_tokens:.0} tokens/s, {borrowed:.0} of them borrowed");
    assert!(
        greedy_tokens <= (57_000.0 + borrowed) * 1.01,
        "the greedy tenant used {greedy_tokens:.0} tokens/s"
    );
    assert!(
        greedy_tokens >= 57_000.0 * 0.97,
        "the greedy tenant got its surge: {greedy_tokens:.0} tokens/s"
    );
    assert!(c.deficit_hits > 0);
    let p95 = h.read_wait_p95_ns(polite);
    assert!(
        p95 <= 100_000,
        "the polite LC tenant's read wait p95 is {p95} ns"
    );
    assert!(served_fraction(&h, polite, window, 20_000) >= 0.97);
    let share = cap.be_share_mtok_per_sec as f64 / 1000.0;
    let be_tokens = h.tokens_per_sec(flood_be, window);
    assert!(
        be_tokens >= 0.97 * share,
        "the BE tenant got {be_tokens:.0} tokens/s, below its own share of {share:.0}"
    );
    let total: f64 = (0..3).map(|t| h.tokens_per_sec(t, window)).sum();
    assert!(
        total <= DEVICE_TOKENS_PER_SEC * 1.005,
        "device offered {total:.0} tokens/s"
    );
}

/// A burst far above the SLO (a client that stalled and sends 100 ms of requests at once) on
/// an otherwise idle device drains at the device's spare rate, not at the tenant's own: the
/// idle BE tenant's share reaches the bucket, and an LC tenant at its deficit limit takes it
/// before anyone else. Without that (`lc_borrows_spare = false`) the same burst takes ~4×
/// longer: its own 19 K tokens/s above its mean (the surge) is all it has to drain it.
#[test]
fn an_lc_burst_on_an_idle_device_drains_at_the_spare_rate() {
    let mut waits = Vec::new();
    for borrow in [true, false] {
        let mut h = Harness::with_registry(
            1,
            ROUND_NS,
            SchedulerConfig {
                lc_borrows_spare: borrow,
                ..SchedulerConfig::default()
            },
            RegistryConfig::default(),
        );
        h.add(be(), Load::Idle, &[0]);
        // 2,000 requests (~3,800 tokens: 100 ms of its reservation) every second.
        let t = h.add(
            lc(20_000),
            Load::Burst {
                every_ns: 1_000 * MS,
                count: 2_000,
                read_pct: 90,
                bytes: 4096,
            },
            &[0],
        );
        h.run_for(3_000 * MS);
        waits.push(h.tenants[t].max_wait_ns);
    }
    let (with, without) = (waits[0], waits[1]);
    println!("burst drained in {with} ns with LC borrowing, {without} ns without");
    assert!(
        with <= 20 * MS,
        "with spare tokens the burst took {with} ns"
    );
    assert!(
        without >= 3 * with,
        "without borrowing {without} ns vs {with} ns"
    );
}

/// The published scenario 1 with Poisson LC arrivals: the device has only 104 K tokens/s
/// unreserved, so the surge shrinks to half of it (16.5 %); A and B still meet their target
/// and the BE tenants get the rest, each at least its share.
#[test]
fn scenario_one_with_poisson_arrivals() {
    let mut h = harness(qos::DEFAULT_LC_SURGE_PCT);
    let a = h.add(spec(120_000, 100), load(120_000, 100), &[0]);
    let b = h.add(spec(70_000, 80), load(70_000, 80), &[0]);
    let c = h.add(be(), flood(), &[0]);
    let d = h.add(
        be(),
        Load::Flood {
            depth: 32,
            read_pct: 25,
            bytes: 4096,
        },
        &[0],
    );
    let share = h.registry.capacity().be_share_mtok_per_sec as f64 / 1000.0;
    assert_eq!(h.registry.capacity().lc_surge_ppm, 164_556);
    h.run_for(100 * MS);
    h.reset_measurements();
    let window = 1_000 * MS;
    h.run_for(window);
    for (t, iops) in [(a, 120_000), (b, 70_000)] {
        let p95 = h.read_wait_p95_ns(t);
        assert!(p95 <= 100_000, "LC tenant {t}: read wait p95 {p95} ns");
        assert!(served_fraction(&h, t, window, iops) >= 0.97);
    }
    let lc_tokens = h.tokens_per_sec(a, window) + h.tokens_per_sec(b, window);
    let (tc, td) = (h.tokens_per_sec(c, window), h.tokens_per_sec(d, window));
    println!(
        "scenario 1, Poisson: LC {lc_tokens:.0}, C {tc:.0}, D {td:.0} tokens/s; share {share:.0}"
    );
    assert!(
        tc >= share && td >= share,
        "C {tc:.0}, D {td:.0}, share {share:.0}"
    );
    assert!(
        tc + td >= 0.97 * (DEVICE_TOKENS_PER_SEC - lc_tokens),
        "BE got {:.0} tokens/s of the {:.0} LC left",
        tc + td,
        DEVICE_TOKENS_PER_SEC - lc_tokens
    );
    assert!(lc_tokens + tc + td <= DEVICE_TOKENS_PER_SEC * 1.005);
}

/// BE tenants with equal demand still get equal tokens next to a surging LC tenant.
#[test]
fn equal_be_tenants_stay_equal_next_to_a_surging_lc_tenant() {
    let mut h = harness(qos::DEFAULT_LC_SURGE_PCT);
    h.add(lc(20_000), poisson(20_000), &[0]);
    let c = h.add(be(), flood(), &[0]);
    let d = h.add(be(), flood(), &[0]);
    h.run_for(100 * MS);
    h.reset_measurements();
    let window = 1_000 * MS;
    h.run_for(window);
    let (tc, td) = (h.tokens_per_sec(c, window), h.tokens_per_sec(d, window));
    assert!(
        (tc - td).abs() <= 0.03 * tc.max(td),
        "C {tc:.0} vs D {td:.0} tokens/s"
    );
}

/// A registration that shrinks the surge re-prices what idle LC tenants earn (their idle
/// aggregate donates at the new rate), so the device budget holds across the change.
#[test]
fn a_registration_that_shrinks_the_surge_reprices_idle_tenants() {
    let mut h = harness(qos::DEFAULT_LC_SURGE_PCT);
    let spec = |iops| {
        TenantSpec::LatencyCritical(LcSlo {
            p95_read_latency_ns: 500_000,
            iops,
            read_pct: 100,
            request_bytes: 4096,
        })
    };
    // 100 K reads/s at 1 token (a BE tenant keeps the mix mixed): 100 K tokens/s reserved,
    // 320 K unreserved, so the full 50 % surge: it earns (and, idle, donates) 150 K tokens/s.
    h.add(be(), Load::Idle, &[0]);
    h.add(spec(100_000), Load::Idle, &[0]);
    assert_eq!(h.registry.capacity().lc_surge_ppm, 500_000);
    let deposited = |h: &Harness| h.registry.shared().stats().deposited_mtok;
    h.run_for(10 * MS);
    let before = deposited(&h);
    h.run_for(100 * MS);
    let first = deposited(&h) - before;
    // Another 200 K reserved: 120 K unreserved, half of it is 20 % of the 300 K reserved.
    h.add(spec(200_000), Load::Idle, &[0]);
    let cap = h.registry.capacity();
    assert_eq!(cap.lc_surge_ppm, 200_000);
    h.run_for(10 * MS);
    let before = deposited(&h);
    h.run_for(100 * MS);
    let second = deposited(&h) - before;
    // 100 ms of 150 K tokens/s of LC plus the idle BE share (270 K), then of 360 K tokens/s of
    // LC plus the BE share (60 K): the device's 420 K either way.
    let expect = |tokens_per_sec: f64| tokens_per_sec * 1000.0 * 0.1;
    for (got, want) in [(first, expect(420_000.0)), (second, expect(420_000.0))] {
        assert!(
            (got as f64 - want).abs() <= want * 0.01,
            "deposited {got} mtok in 100 ms, expected {want:.0}"
        );
    }
    assert_eq!(cap.be_share_mtok_per_sec, 60_000_000);
}

/// Issue 28: with `headroom = Slo`, LC tenants admitted up to the refusal point all meet their
/// targets beside a BE flood, and the next one is refused with the reason. The tenants, scaled to this
/// device: 50 K IOPS each at 90 % reads and 500 µs (95 K tokens/s, 22.6 % of the 420 K). Three
/// reserve 67.9 %, leaving a surge of 23.7 %, above the 14.6 % each needs
/// (`admission/headroom.rs`); a fourth would reserve 90.5 %, leaving 5.2 %: refused. (Admitted
/// as before this rule, the four waited 240-399 µs at p95 in the scheduler alone, beyond their
/// share of the target: the misses once the device's own latency is added.) Each
/// admitted tenant, offered Poisson arrivals at its full rate, must be released within its
/// share of the target (20 % of 500 µs) at p95 and get what it offered.
#[test]
fn lc_tenants_admitted_up_to_the_refusal_point_meet_their_targets() {
    const IOPS: u64 = 50_000;
    // Control: without the headroom rule (the default, the published admission) the fourth
    // is admitted, at 90.5 % of the device.
    let mut published = Harness::with_registry(
        1,
        ROUND_NS,
        SchedulerConfig::default(),
        RegistryConfig {
            headroom: qos::AdmissionHeadroom::Off,
            ..RegistryConfig::default()
        },
    );
    for _ in 0..4 {
        published
            .registry
            .register(lc(IOPS))
            .expect("admitted as published");
    }
    let mut h = Harness::with_registry(
        1,
        ROUND_NS,
        SchedulerConfig::default(),
        RegistryConfig {
            headroom: qos::AdmissionHeadroom::Slo,
            ..RegistryConfig::default()
        },
    );
    let flood_be = h.add(be(), flood(), &[0]);
    let mut admitted = Vec::new();
    let refusal = loop {
        assert!(admitted.len() < 10, "ten tenants of 22.6 % each admitted");
        match h.registry.check(&lc(IOPS)) {
            Ok(_) => admitted.push(h.add(lc(IOPS), poisson(IOPS), &[0])),
            Err(refusal) => break refusal,
        }
    };
    println!("admitted {} tenants; refused: {refusal}", admitted.len());
    assert_eq!(admitted.len(), 3, "three fit with their headroom");
    assert_eq!(refusal.code(), qos::RefusalCode::HeadroomExceedsCapacity);
    let reason = refusal.to_string();
    for part in [
        "too little headroom",
        "surge of 10.9",
        "leaving a surge of 5.",
    ] {
        assert!(
            reason.contains(part),
            "{part:?} not in the reason: {reason}"
        );
    }
    let surge_ppm = h.registry.capacity().lc_surge_ppm;
    assert!(surge_ppm > 146_000, "surge in force {surge_ppm} ppm");

    h.run_for(100 * MS);
    h.reset_measurements();
    let window = 2_000 * MS;
    h.run_for(window);
    for &t in &admitted {
        let p95 = h.read_wait_p95_ns(t);
        println!("LC tenant {t}: read wait p95 {p95} ns");
        assert!(p95 <= 100_000, "LC tenant {t}: read wait p95 {p95} ns");
        assert!(served_fraction(&h, t, window, IOPS) >= 0.97);
    }
    assert!(
        h.tokens_per_sec(flood_be, window) > 0.0,
        "the BE tenant still runs"
    );
}

/// The reflex study's real scenario 1 (its tenants and `reflex-a` scaled to a tenth:
/// `study::reflex::scenarios`) on the server's shortest throttled round (50 µs), with the
/// headroom rule on (the default): admitted — the pool needs 16.3 %, it gets 16.5 % — and A
/// and B, Poisson at their full rates beside two BE floods, are released within their share
/// of the target (100 µs) at p95. B alone would need 24.7 % (`admission/headroom.rs`); it is
/// A's spare tokens, borrowed at B's deficit limit, that carry it.
#[test]
fn scenario_one_at_a_tenth_is_admitted_and_meets_its_share() {
    let mut profile = qos::DeviceProfile::reflex_a();
    for p in &mut profile.points {
        p.tokens_per_sec /= 10;
        p.read_only_tokens_per_sec /= 10;
    }
    let mut h = Harness::with_profile(
        profile,
        1,
        50_000,
        SchedulerConfig::default(),
        RegistryConfig {
            round_ns: 50_000,
            ..RegistryConfig::default()
        },
    );
    assert_eq!(h.registry.capacity().lc_surge_ppm, 0);
    let a = h.add(spec(12_000, 100), load(12_000, 100), &[0]);
    let b = h.add(spec(7_000, 80), load(7_000, 80), &[0]);
    for read_pct in [95, 25] {
        h.add(
            be(),
            Load::Flood {
                depth: 32,
                read_pct,
                bytes: 4096,
            },
            &[0],
        );
    }
    assert_eq!(h.registry.capacity().lc_surge_ppm, 164_556);
    h.run_for(100 * MS);
    h.reset_measurements();
    let window = 2_000 * MS;
    h.run_for(window);
    for (t, iops) in [(a, 12_000), (b, 7_000)] {
        let p95 = h.read_wait_p95_ns(t);
        println!("scenario 1 at a tenth, LC tenant {t}: read wait p95 {p95} ns");
        assert!(p95 <= 100_000, "LC tenant {t}: read wait p95 {p95} ns");
        assert!(served_fraction(&h, t, window, iops) >= 0.97);
    }
}
