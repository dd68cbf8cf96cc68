//! `bench` against the in-test fake server: closed and open loop, several tenants, refusals,
//! and the coordinated-omission property of open-loop latency.

mod common;

use client::bench::{self, spec::parse_tenant, BenchConfig, Progress};
use common::Mode;

fn config(addr: std::net::SocketAddr, tenants: &[&str]) -> BenchConfig {
    BenchConfig {
        server: addr.to_string(),
        duration_ns: None,
        ios_per_tenant: None,
        warmup_ns: 0,
        threads: 2,
        seed: 1,
        tenants: tenants
            .iter()
            .flat_map(|t| parse_tenant(t).unwrap())
            .collect(),
        progress: Progress::Hidden,
        tls: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_issues_exactly_the_io_budget() {
    let fake = common::start(Mode::Normal).await;
    let mut cfg = config(
        fake.addr,
        &["name=A,secret=pw,volume=vol,qd=8,read=70,size=4k,conns=2"],
    );
    cfg.ios_per_tenant = Some(2000);
    let r = bench::run_async(&cfg).await.unwrap();
    let t = &r.tenants[0];
    assert_eq!(t.reads.count + t.writes.count, 2000);
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    let read_share = t.reads.count as f64 / 2000.0;
    assert!((0.6..0.8).contains(&read_share), "{read_share}");
    let lat = t.reads.latency_ns.as_ref().unwrap();
    assert!(lat.p50 > 0 && lat.p50 <= lat.p95 && lat.p95 <= lat.p99 && lat.p99 <= lat.max);
    assert!(t.mb_per_s > 0.0);
    // The report renders and serializes.
    assert!(r.table().contains("A "));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["tenants"][0]["reads"]["count"], t.reads.count);
    assert!(json["tenants"][0]["reads"]["latency_ns"]["p99_9"]
        .as_u64()
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_offers_the_requested_rate() {
    let fake = common::start(Mode::Normal).await;
    let mut cfg = config(
        fake.addr,
        &["name=A,secret=pw,volume=vol,rate=4000,read=100,size=4k"],
    );
    cfg.duration_ns = Some(1_000_000_000);
    cfg.warmup_ns = 100_000_000;
    let r = bench::run_async(&cfg).await.unwrap();
    let t = &r.tenants[0];
    // Poisson with mean 4000 over 1 s: sd ≈ 63; allow a wide margin for a loaded CI box.
    assert!((3500.0..4500.0).contains(&t.iops), "iops {}", t.iops);
    assert!((r.window_s - 1.0).abs() < 1e-6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_register_in_order_and_refusals_are_reported() {
    let fake = common::start(Mode::Normal).await;
    let mut cfg = config(
        fake.addr,
        &[
            "name=A,secret=pw,volume=vol,class=lc,iops=60k,rate=2000,p95=500us",
            "name=A,secret=pw,volume=vol,class=lc,iops=50k,rate=2000,p95=500us",
            "name=A,secret=pw,volume=vol,qd=2,read=25",
        ],
    );
    cfg.duration_ns = Some(300_000_000);
    let r = bench::run_async(&cfg).await.unwrap();
    assert!(r.tenants[0].refused.is_none());
    assert!(r.tenants[0].reads.count > 300);
    let reason = r.tenants[1].refused.as_deref().unwrap();
    assert!(
        reason.contains("40000 left") && reason.contains("CapacityExceeded"),
        "{reason}"
    );
    assert_eq!(r.tenants[1].reads.count, 0);
    assert!(r.tenants[2].writes.count > 0);
    assert!(r.table().contains("REFUSED"));
    assert_eq!(r.tenants[0].slo.as_ref().unwrap().iops, 60_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_latency_counts_a_server_stall_that_closed_loop_hides() {
    // 200 ms stall after 1000 requests. Open loop at 2000 IOPS: ~400 arrivals fall into the
    // stall and each is charged its wait from its scheduled time.
    let fake = common::start(Mode::StallOnceAfter(1000)).await;
    let mut cfg = config(fake.addr, &["name=A,secret=pw,volume=vol,rate=2000"]);
    cfg.duration_ns = Some(1_500_000_000);
    let r = bench::run_async(&cfg).await.unwrap();
    let lat = r.tenants[0].reads.latency_ns.clone().unwrap();
    assert!(lat.max >= 150_000_000, "max {}", lat.max);
    assert!(
        lat.p95 >= 50_000_000,
        "open-loop p95 {} should include the stall",
        lat.p95
    );

    // Closed loop at qd 1 sees the stall in one request only: its p95 stays small.
    let fake = common::start(Mode::StallOnceAfter(1000)).await;
    let mut cfg = config(fake.addr, &["name=A,secret=pw,volume=vol,qd=1"]);
    cfg.ios_per_tenant = Some(3000);
    let r = bench::run_async(&cfg).await.unwrap();
    let lat = r.tenants[0].reads.latency_ns.clone().unwrap();
    assert!(lat.max >= 150_000_000, "max {}", lat.max);
    assert!(lat.p95 < 20_000_000, "closed-loop p95 {}", lat.p95);
}

#[tokio::test]
async fn a_bad_secret_fails_the_run_with_the_tenant_named() {
    let fake = common::start(Mode::Normal).await;
    let cfg = config(fake.addr, &["name=A,secret=nope,volume=vol,qd=1"]);
    let e = bench::run_async(&cfg).await.unwrap_err().to_string();
    assert!(
        e.contains("\"A\"") && e.contains("authentication failed"),
        "{e}"
    );
}
