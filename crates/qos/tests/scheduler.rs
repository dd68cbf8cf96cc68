//! Behavioural tests of the scheduling round under a simulated clock (device "A").

mod common;

use common::{Harness, Load};
use qos::{BeSpec, DeclaredMix, DeficitLimit, LcSlo, RequestId, SchedulerConfig, TenantSpec};

const ROUND_NS: u64 = 10_000;
const MS: u64 = 1_000_000;

fn lc(p95_us: u64, iops: u64, read_pct: u8) -> TenantSpec {
    TenantSpec::LatencyCritical(LcSlo {
        p95_read_latency_ns: p95_us * 1000,
        iops,
        read_pct,
        request_bytes: 4096,
    })
}

fn be() -> TenantSpec {
    TenantSpec::BestEffort(BeSpec::default())
}

fn flood(read_pct: u8) -> Load {
    Load::Flood {
        depth: 64,
        read_pct,
        bytes: 4096,
    }
}

fn open(iops: u64, read_pct: u8) -> Load {
    Load::Open {
        iops,
        read_pct,
        bytes: 4096,
    }
}

fn within(actual: f64, expected: f64, pct: f64) -> bool {
    (actual - expected).abs() <= expected * pct / 100.0
}

/// The published scenario 1: A and B issue their full reserved rate while C and D flood.
#[test]
fn lc_reservations_met_under_be_flood() {
    let mut h = Harness::new(1, ROUND_NS, SchedulerConfig::default());
    let a = h.add(lc(500, 120_000, 100), open(120_000, 100), &[0]);
    let b = h.add(lc(500, 70_000, 80), open(70_000, 80), &[0]);
    let c = h.add(be(), flood(95), &[0]);
    let d = h.add(be(), flood(25), &[0]);
    assert_eq!(h.registry.capacity().be_share_mtok_per_sec, 52_000_000);

    h.run_for(20 * MS);
    h.reset_measurements();
    let window = 200 * MS;
    h.run_for(window);

    // LC tenants get everything they issue, promptly.
    assert!(
        within(h.iops(a, window), 120_000.0, 0.5),
        "A: {} IOPS",
        h.iops(a, window)
    );
    assert!(
        within(h.iops(b, window), 70_000.0, 0.5),
        "B: {} IOPS",
        h.iops(b, window)
    );
    for t in [a, b] {
        assert!(
            h.tenants[t].max_wait_ns <= 5 * ROUND_NS,
            "LC tenant {t} waited {} ns",
            h.tenants[t].max_wait_ns
        );
        assert_eq!(h.tenants[t].handle.counters().deficit_hits, 0);
    }
    // BE tenants share the rest in tokens (not IOPS), about 52 K tokens/s each.
    let (tc, td) = (h.tokens_per_sec(c, window), h.tokens_per_sec(d, window));
    assert!(
        tc >= 52_000.0 * 0.97 && td >= 52_000.0 * 0.97,
        "C {tc}, D {td}"
    );
    assert!(
        within(tc, td, 3.0),
        "BE tenants with equal demand: C {tc} vs D {td} tokens/s"
    );
    // The device is never offered more than its rate at the strictest SLO.
    let total: f64 = (0..4).map(|t| h.tokens_per_sec(t, window)).sum();
    assert!(
        total <= 420_000.0 * 1.005,
        "device offered {total} tokens/s"
    );
}

/// Same scenario, QoS-relevant direction: B issues only 45 K IOPS, so its unused reservation
/// reaches the BE tenants through donations.
#[test]
fn lc_underuse_is_donated_to_be() {
    let mut h = Harness::new(1, ROUND_NS, SchedulerConfig::default());
    let a = h.add(lc(500, 120_000, 100), open(120_000, 100), &[0]);
    let b = h.add(lc(500, 70_000, 80), open(45_000, 80), &[0]);
    let c = h.add(be(), flood(95), &[0]);
    let d = h.add(be(), flood(25), &[0]);
    h.run_for(20 * MS);
    h.reset_measurements();
    let window = 200 * MS;
    h.run_for(window);
    assert!(within(h.iops(a, window), 120_000.0, 0.5));
    assert!(within(h.iops(b, window), 45_000.0, 0.5));
    // B leaves 25 K IOPS × 2.8 = 70 K tokens/s unused; BE gets most of it (90 % donation).
    let be_total = h.tokens_per_sec(c, window) + h.tokens_per_sec(d, window);
    assert!(
        be_total >= 104_000.0 + 0.85 * 70_000.0,
        "BE got {be_total} tokens/s"
    );
    for t in [c, d] {
        assert!(
            h.tenants[t].handle.counters().borrowed_mtok > 0,
            "tenant {t} never drew on the bucket"
        );
    }
    assert!(h.tenants[b].handle.counters().donated_mtok > 0);
    let total: f64 = (0..4).map(|t| h.tokens_per_sec(t, window)).sum();
    assert!(
        total <= 420_000.0 * 1.005,
        "device offered {total} tokens/s"
    );
}

#[test]
fn be_tenants_with_equal_demand_get_equal_tokens() {
    let mut h = Harness::new(1, ROUND_NS, SchedulerConfig::default());
    // An LC tenant using half its reservation, so BE tenants also compete for donations.
    h.add(lc(1000, 100_000, 90), open(50_000, 90), &[0]);
    let bes: Vec<usize> = (0..5).map(|_| h.add(be(), flood(75), &[0])).collect();
    h.run_for(10 * MS);
    h.reset_measurements();
    let window = 300 * MS;
    h.run_for(window);
    let tokens: Vec<f64> = bes.iter().map(|&t| h.tokens_per_sec(t, window)).collect();
    let mean = tokens.iter().sum::<f64>() / tokens.len() as f64;
    for (i, t) in tokens.iter().enumerate() {
        assert!(
            within(*t, mean, 2.0),
            "BE tenant {i}: {t} tokens/s vs mean {mean}: {tokens:?}"
        );
    }
    // Together they get the device rate minus what the LC tenant used.
    let lc_used = h.tokens_per_sec(0, window);
    assert!(
        mean * 5.0 + lc_used >= 470_000.0 * 0.97,
        "{tokens:?} + LC {lc_used}"
    );
}

#[test]
fn donations_from_an_idle_lc_tenant_reach_be() {
    let mut h = Harness::new(1, ROUND_NS, SchedulerConfig::default());
    let lc_t = h.add(lc(500, 300_000, 100), Load::Idle, &[0]);
    let be_t = h.add(be(), flood(100), &[0]);
    assert_eq!(h.registry.capacity().be_share_mtok_per_sec, 120_000_000);
    h.run_for(10 * MS);
    h.reset_measurements();
    let window = 100 * MS;
    h.run_for(window);
    let got = h.tokens_per_sec(be_t, window);
    assert!(got >= 420_000.0 * 0.98, "BE got {got} tokens/s of 420 K");
    assert!(
        got <= 420_000.0 * 1.005,
        "BE got {got} tokens/s, more than the device rate"
    );
    h.workers[0].sync_counters();
    let lc_counters = h.tenants[lc_t].handle.counters();
    assert!(lc_counters.donated_mtok > 0 && lc_counters.donated_mtok == lc_counters.earned_mtok);
    assert!(h.tenants[be_t].handle.counters().borrowed_mtok > 0);
}

#[test]
fn deficit_limit_throttles_a_bursting_lc_tenant() {
    let mut h = Harness::new(1, ROUND_NS, SchedulerConfig::default());
    // Reserves 10 K tokens/s, issues 1000 reads every 10 ms = 100 K IOPS.
    let t = h.add(
        lc(500, 10_000, 100),
        Load::Burst {
            every_ns: 10 * MS,
            count: 1000,
            read_pct: 100,
            bytes: 4096,
        },
        &[0],
    );
    let be_t = h.add(be(), flood(100), &[0]);
    h.step();
    // First round: balance 0, may dip to the −50-token limit: exactly 50 reads.
    assert_eq!(h.tenants[t].submitted, 50);
    assert_eq!(h.tenants[t].handle.counters().deficit_hits, 1);
    assert_eq!(h.tenants[t].handle.counters().balance_mtok, -50_000);
    let window = 100 * MS;
    h.run_for(window - ROUND_NS);
    // Afterwards it gets exactly its reservation: 10 K reads/s.
    let submitted = h.tenants[t].submitted;
    assert!((1040..=1060).contains(&submitted), "submitted {submitted}");
    assert!(h.tenants[t].handle.counters().deficit_hits > 1000);
    // The BE tenant is not hurt by the burst: it gets the rest of the device.
    assert!(
        h.tokens_per_sec(be_t, window) >= 400_000.0,
        "{}",
        h.tokens_per_sec(be_t, window)
    );
}

#[test]
fn rate_window_deficit_limit_scales_with_the_reservation() {
    let config = SchedulerConfig {
        deficit_limit: DeficitLimit::RateWindowNs(MS), // 1 ms of its rate
        ..SchedulerConfig::default()
    };
    let mut h = Harness::new(1, ROUND_NS, config);
    let t = h.add(
        lc(500, 200_000, 100),
        Load::Burst {
            every_ns: 100 * MS,
            count: 5000,
            read_pct: 100,
            bytes: 4096,
        },
        &[0],
    );
    h.step();
    // 200 K tokens/s × 1 ms = 200 tokens of deficit allowed.
    assert_eq!(h.tenants[t].submitted, 200);
}

#[test]
fn idle_be_tenant_does_not_accumulate_tokens() {
    let mut h = Harness::new(1, ROUND_NS, SchedulerConfig::default());
    h.add(lc(500, 300_000, 100), open(300_000, 100), &[0]);
    let be_t = h.add(be(), Load::Idle, &[0]);
    h.run_for(100 * MS);
    // Wakes up with a large backlog after 100 ms idle: had it saved its 120 K tokens/s share it
    // could release 12 000 reads at once.
    h.tenants[be_t].load = flood(100);
    h.step();
    // What it may release: one round of its share (1.2 tokens) plus what the bucket carries
    // across resets (one write, 10 tokens).
    let first = h.tenants[be_t].submitted;
    assert!(
        first <= 12,
        "idle BE tenant burst {first} requests after waking"
    );
}

#[test]
fn a_tenant_spanning_two_workers_is_not_charged_or_paid_twice() {
    let mut h = Harness::new(2, ROUND_NS, SchedulerConfig::default());
    let t = h.add(lc(500, 100_000, 100), flood(100), &[0, 1]);
    let be_t = h.add(be(), flood(100), &[0, 1]);
    // Admission counted the reservation once.
    assert_eq!(h.registry.capacity().lc_reserved_mtok_per_sec, 100_000_000);
    assert_eq!(h.tenants[t].handle.attached_workers(), 2);
    h.run_for(10 * MS);
    h.reset_measurements();
    let window = 100 * MS;
    h.run_for(window);
    let lc_rate = h.tokens_per_sec(t, window);
    assert!(
        within(lc_rate, 100_000.0, 1.0),
        "spanning LC got {lc_rate} tokens/s, reserved 100 K"
    );
    let be_rate = h.tokens_per_sec(be_t, window);
    assert!(
        within(be_rate, 320_000.0, 1.5),
        "spanning BE got {be_rate} tokens/s, share 320 K"
    );
    // The ledger counts its queue across both workers.
    let counters = h.tenants[t].handle.counters();
    assert_eq!(counters.requests_queued, h.tenants[t].outstanding());
    assert_eq!(
        h.workers[0].queued() + h.workers[1].queued(),
        h.tenants[t].outstanding() + h.tenants[be_t].outstanding()
    );
}

#[test]
fn donations_cross_workers_through_the_shared_bucket() {
    let mut h = Harness::new(2, ROUND_NS, SchedulerConfig::default());
    h.add(lc(500, 300_000, 100), Load::Idle, &[0]);
    let be_t = h.add(be(), flood(100), &[1]);
    h.run_for(10 * MS);
    h.reset_measurements();
    let window = 100 * MS;
    h.run_for(window);
    let got = h.tokens_per_sec(be_t, window);
    assert!(
        got >= 400_000.0,
        "BE on worker 1 got {got} tokens/s; share is 120 K"
    );
    assert!(h.registry.shared().stats().resets > 1000);
}

#[test]
fn bucket_is_emptied_after_every_worker_ran_a_round() {
    let mut h = Harness::new(2, ROUND_NS, SchedulerConfig::default());
    h.add(lc(500, 300_000, 100), Load::Idle, &[0]);
    let shared = h.registry.shared();
    let mut out: Vec<RequestId> = Vec::new();
    let t0 = h.now_ns;
    h.workers[0].round(t0, &mut out);
    h.workers[0].round(t0 + 100_000, &mut out);
    // 100 µs of an idle 300 K IOPS read-only reservation (150 K tokens/s at 0.5 token per
    // read): 15 tokens in the bucket.
    assert_eq!(shared.balance_mtok(), 15_000);
    h.workers[1].round(t0 + 100_000, &mut out);
    // Both workers ran a round: reset, down to the carry of one write (10 tokens).
    assert_eq!(shared.balance_mtok(), 10_000);
    assert_eq!(shared.stats().discarded_mtok, 5_000);
}

#[test]
fn without_resets_donations_pile_up() {
    let config = SchedulerConfig {
        bucket_reset: qos::BucketReset::Never,
        ..SchedulerConfig::default()
    };
    let mut h = Harness::new(1, ROUND_NS, config);
    h.add(lc(500, 300_000, 100), Load::Idle, &[0]);
    h.run_for(10 * MS);
    let piled = h.registry.shared().balance_mtok();
    // Read-only load: 300 K reads/s × 0.5 token × 10 ms = 1500 tokens.
    assert!(
        piled >= 1_490_000,
        "10 ms × 150 K tokens/s ≈ 1500 tokens, got {piled} mtok"
    );
}

#[test]
fn read_only_load_uses_the_cheaper_reads_and_read_only_column() {
    let mut h = Harness::new(1, ROUND_NS, SchedulerConfig::default());
    let a = h.add(lc(500, 400_000, 100), open(400_000, 100), &[0]);
    let c = h.add(
        TenantSpec::BestEffort(BeSpec {
            mix: DeclaredMix::ReadOnly,
        }),
        flood(100),
        &[0],
    );
    let cap = h.registry.capacity();
    assert_eq!(cap.mix, qos::LoadMix::ReadOnly);
    // 400 K reads at 0.5 token = 200 K of the 500 K read-only tokens/s.
    assert_eq!(cap.lc_reserved_mtok_per_sec, 200_000_000);
    assert_eq!(cap.be_share_mtok_per_sec, 300_000_000);
    h.run_for(10 * MS);
    h.reset_measurements();
    let window = 100 * MS;
    h.run_for(window);
    assert!(within(h.iops(a, window), 400_000.0, 0.5));
    // BE: 300 K tokens/s = 600 K reads/s; the device does ~1 M read-only IOPS in total.
    assert!(
        within(h.iops(c, window), 600_000.0, 1.5),
        "{}",
        h.iops(c, window)
    );
}

/// 10 000 tenants on one worker: LC reservations still met, every BE tenant served, the
/// device not oversubscribed, and idle rounds take the cheap path.
#[test]
fn ten_thousand_tenants_schedule_without_pathologies() {
    let round_ns = MS;
    let mut h = Harness::new(1, round_ns, SchedulerConfig::default());
    let mut lcs = Vec::new();
    let mut bes = Vec::new();
    for i in 0..5_000u64 {
        // 40 IOPS of 4 KB reads each: 200 K tokens/s in all; a fifth of them idle.
        let load = if i % 5 == 0 {
            Load::Idle
        } else {
            open(40, 100)
        };
        lcs.push(h.add(lc(500, 40, 100), load, &[0]));
    }
    for _ in 0..5_000 {
        bes.push(h.add(
            be(),
            Load::Flood {
                depth: 2,
                read_pct: 100,
                bytes: 4096,
            },
            &[0],
        ));
    }
    h.run_for(100 * MS);
    h.reset_measurements();
    let window = 1000 * MS;
    h.run_for(window);
    for &t in &lcs {
        let d = &h.tenants[t];
        if d.load == Load::Idle {
            continue;
        }
        assert!(
            (39..=41).contains(&d.submitted),
            "LC tenant {t}: {} requests in 1 s",
            d.submitted
        );
        assert!(
            d.max_wait_ns <= 2 * round_ns,
            "LC tenant {t} waited {} ns",
            d.max_wait_ns
        );
    }
    let be_tokens: Vec<u64> = bes.iter().map(|&t| h.tenants[t].submitted).collect();
    let min = *be_tokens.iter().min().expect("tenants");
    let max = *be_tokens.iter().max().expect("tenants");
    let total: u64 = be_tokens.iter().sum();
    // LC uses 160 K tokens/s; 260 K tokens/s over 5 000 BE tenants = 52 each.
    assert!(
        min >= 48 && max <= 55,
        "BE requests per tenant in 1 s: min {min}, max {max}"
    );
    let lc_total: u64 = lcs.iter().map(|&t| h.tenants[t].submitted).sum();
    assert!(
        total + lc_total <= 421_000,
        "device offered {} tokens in 1 s",
        total + lc_total
    );

    // Stop every load: after the queues drain, rounds take the cheap path.
    for t in &mut h.tenants {
        t.load = Load::Idle;
    }
    h.run_for(50 * MS);
    assert_eq!(h.workers[0].queued(), 0);
    let before = h.workers[0].stats().idle_rounds;
    h.run_for(10 * MS);
    assert_eq!(h.workers[0].stats().idle_rounds - before, 10);
}

/// With LC borrowing, a held tenant is revisited every round to catch spare tokens; those
/// revisits continue one hold and count as one deficit hit, not one per 10 µs round. Ten
/// bursts far above the reservation give at most one hold each.
#[test]
fn with_borrowing_a_hold_counts_once_not_once_per_revisit() {
    let config = SchedulerConfig {
        lc_borrows_spare: true,
        ..SchedulerConfig::default()
    };
    let registry = qos::RegistryConfig {
        lc_surge_pct: 0,
        ..qos::RegistryConfig::default()
    };
    let mut h = Harness::with_registry(1, ROUND_NS, config, registry);
    let t = h.add(
        lc(500, 10_000, 100),
        Load::Burst {
            every_ns: 10 * MS,
            count: 1000,
            read_pct: 100,
            bytes: 4096,
        },
        &[0],
    );
    h.run_for(100 * MS);
    let c = h.tenants[t].handle.counters();
    let visits_held_ns = 100 * MS / ROUND_NS;
    assert!(
        (1..=11).contains(&c.deficit_hits),
        "{} deficit hits for 10 bursts (a count per revisit would be up to {visits_held_ns})",
        c.deficit_hits
    );
}
