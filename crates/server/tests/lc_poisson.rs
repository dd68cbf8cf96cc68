//! Issue 9 §1 end to end: a latency-critical tenant offering Poisson arrivals at exactly its
//! SLO's IOPS meets its p95 read-latency target with the scheduler on, alone and next to a
//! best-effort tenant at queue depth 32, on the memory backend and on the emulated zssd, and
//! the BE tenant still gets the rest of the device's tokens.
//!
//! The scheduler is made the bottleneck on purpose: the device profile (`tiny`) sustains only
//! 20 K tokens/s, so the BE tenant (4 KiB, 90 % reads, ~1.9 tokens a request) is held to
//! ~9 K IOPS by tokens, not by this machine's CPU, and the LC tenant's 1,000 IOPS (1,900
//! tokens/s reserved) is a tenth of the device. The target is 20 ms: loose enough for a
//! 2-core VM loaded by parallel builds (we saw the client's own send lag reach 16 ms at p99 at
//! a load average of 13), tight against the failure. Paced at exactly its reservation
//! (`lc_surge_pct = 0`, the published rule), the same seeded stream is a queue at 100 %
//! utilization whose backlog grows like √t: its p95 is several times the target after 3 s
//! (the control run in the memory test checks that the test still tells the two apart, and
//! gives the BE tenant's throughput without the surge to compare with).

mod common;

use client::bench;
use client::bench::report::{BenchReport, TenantReport};
use server::config::ServerConfig;

const LC_IOPS: u64 = 1_000;
const SLO_P95_NS: u64 = 20_000_000;
const DEVICE_TOKENS_PER_SEC: u64 = 20_000;
/// A write costs 10 reads in the `tiny` profile.
const WRITE_TOKENS: f64 = 10.0;

fn tiny_profile() -> qos::DeviceProfile {
    let point = |p95_us: u64| qos::RatePoint {
        p95_read_latency_ns: p95_us * 1000,
        tokens_per_sec: DEVICE_TOKENS_PER_SEC,
        read_only_tokens_per_sec: DEVICE_TOKENS_PER_SEC,
    };
    qos::DeviceProfile::new("tiny", 10_000, 1_000, vec![point(500), point(50_000)])
        .expect("valid profile")
}

fn config(backend: &str, lc_surge_pct: u32) -> ServerConfig {
    let mut config = common::lc_be_config(backend, &tiny_profile());
    config.qos.lc_surge_pct = lc_surge_pct;
    // The control run is the published rule: no surge, and no borrowing of spare tokens
    // either (the idle default flow's BE share is spare, and borrowing it would rescue the
    // control: 2.6 ms instead of > 40 ms once that share stopped being lost).
    if lc_surge_pct == 0 {
        config.qos.tuning.lc_borrows_spare = false;
    }
    config.validate().expect("valid config");
    config
}

const MEMORY: &str = r#"{ kind = "memory", size = "1GiB" }"#;
const ZSSD: &str = r#"{ kind = "emulated", device = "zssd", size = "1GiB" }"#;

/// Runs the LC tenant (and the BE tenant if `with_be`) for 1 s of warm-up and 3 s measured.
fn run(backend: &str, lc_surge_pct: u32, with_be: bool) -> BenchReport {
    let server = server::start(config(backend, lc_surge_pct)).expect("server starts");
    let addr = server.addrs.native.expect("native listener");
    let mut tenants = bench::spec::parse_tenant(&format!(
        "name=lc,secret=lc-secret-1,volume=vol,class=lc,iops={LC_IOPS},p95={}us,read=90,size=4k,span=512m",
        SLO_P95_NS / 1000
    ))
    .expect("lc spec");
    if with_be {
        tenants.extend(
            bench::spec::parse_tenant(
                "name=be,secret=be-secret-1,volume=vol,class=be,qd=32,read=90,size=4k,span=512m",
            )
            .expect("be spec"),
        );
    }
    let report = common::bench_4s(addr, tenants, 11);
    server.shutdown();
    for t in &report.tenants {
        assert!(t.refused.is_none(), "{} refused: {:?}", t.name, t.refused);
        assert!(t.errors.is_empty(), "{} had errors: {:?}", t.name, t.errors);
    }
    report
}

fn read_p95_ns(t: &TenantReport) -> u64 {
    t.reads.latency_ns.as_ref().map_or(u64::MAX, |l| l.p95)
}

fn tokens_per_sec(t: &TenantReport) -> f64 {
    t.reads.iops + WRITE_TOKENS * t.writes.iops
}

fn check(label: &str, report: &BenchReport) {
    let lc = &report.tenants[0];
    let p95 = read_p95_ns(lc);
    let lag = lc.send_lag_ns.as_ref().map_or(0, |l| l.p99);
    println!(
        "{label}: LC {:.0} IOPS, read p95 {} us (SLO {} us, client send lag p99 {} us){}",
        lc.iops,
        p95 / 1000,
        SLO_P95_NS / 1000,
        lag / 1000,
        report.tenants.get(1).map_or(String::new(), |be| format!(
            "; BE {:.0} IOPS = {:.0} tokens/s",
            be.iops,
            tokens_per_sec(be)
        ))
    );
    // Everything it offered went through (the bench counts completions in the window).
    assert!(
        lc.iops >= 0.95 * LC_IOPS as f64,
        "{label}: the LC tenant got {:.0} of the {LC_IOPS} IOPS it offered",
        lc.iops
    );
    assert!(
        p95 <= SLO_P95_NS,
        "{label}: LC read p95 {p95} ns over its {SLO_P95_NS} ns SLO"
    );
    if let Some(be) = report.tenants.get(1) {
        // The device is never offered more than its rate (the LC surge comes out of it).
        let total = tokens_per_sec(lc) + tokens_per_sec(be);
        assert!(
            total <= 1.05 * DEVICE_TOKENS_PER_SEC as f64,
            "{label}: LC and BE used {total:.0} tokens/s of the device's {DEVICE_TOKENS_PER_SEC}"
        );
    }
}

/// The BE tenant's tokens/s next to the LC tenant must be at least `pct` % of `baseline`.
fn check_be(label: &str, report: &BenchReport, baseline: f64, pct: f64) {
    let got = tokens_per_sec(&report.tenants[1]);
    assert!(
        got >= baseline * pct / 100.0,
        "{label}: BE got {got:.0} tokens/s; without the surge it got {baseline:.0}"
    );
}

#[test]
fn lc_poisson_at_its_reservation_meets_its_slo_on_memory() {
    // Control: paced at exactly its reservation, the same stream misses the target by far.
    let control = run(MEMORY, 0, true);
    let control_p95 = read_p95_ns(&control.tenants[0]);
    let be_baseline = tokens_per_sec(&control.tenants[1]);
    println!(
        "memory, no surge, BE true: LC read p95 {} us; BE {be_baseline:.0} tokens/s",
        control_p95 / 1000
    );
    assert!(
        control_p95 > 2 * SLO_P95_NS,
        "paced at exactly its reservation the LC read p95 is only {control_p95} ns: the test no longer tells a broken scheduler apart"
    );
    let alone = run(MEMORY, qos::DEFAULT_LC_SURGE_PCT, false);
    check("memory, BE false", &alone);
    let shared = run(MEMORY, qos::DEFAULT_LC_SURGE_PCT, true);
    check("memory, BE true", &shared);
    // The control's BE tenant gets all the LC flow leaves (18.0 K tokens/s, 19:30 UTC); next
    // to the surge it got 14.8 K (82 %): the LC flow's unspent surge and the idle default
    // flow's share reach it through the shared bucket, which is emptied every epoch. (Before
    // the idle default flow's share stopped being lost, the control's BE got 9.3 K and the
    // bound was 85 %.)
    check_be("memory", &shared, be_baseline, 75.0);
}

#[test]
fn lc_poisson_at_its_reservation_meets_its_slo_on_emulated_zssd() {
    let alone = run(ZSSD, qos::DEFAULT_LC_SURGE_PCT, false);
    check("zssd, BE false", &alone);
    let shared = run(ZSSD, qos::DEFAULT_LC_SURGE_PCT, true);
    check("zssd, BE true", &shared);
    // The BE tenant gets the device's tokens the LC tenant leaves, through its share and the
    // bucket; with two workers and the idle default flows some of it is lost to bucket resets
    // (measured: CHANGELOG.md), so the bound is loose but far above a BE tenant starved
    // by the surge (its share alone is a quarter of the device here).
    let left = DEVICE_TOKENS_PER_SEC as f64 - tokens_per_sec(&shared.tenants[0]);
    check_be("zssd", &shared, left, 35.0);
}
