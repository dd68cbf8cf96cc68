//! Issue 9: a best-effort tenant that REGISTERs a flow gets the capacity LC tenants leave, not
//! half of it. Its tenant's config default flow counts in the BE share from start; while nobody
//! uses it, its share must reach the shared bucket (where the active flow borrows it) instead
//! of being lost. The device profile (20 K tokens/s) makes tokens, not this machine's CPU, the
//! bottleneck: a 4 KiB request at 90 % reads costs 1.9 tokens, so the whole device is ~10.5 K
//! IOPS and the defect gave ~5.3 K (one worker or two).

mod common;

use client::bench;

const DEVICE_TOKENS_PER_SEC: u64 = 20_000;
/// Tokens of one 4 KiB request at 90 % reads on the profile below (0.9 × 1 + 0.1 × 10).
const TOKENS_PER_IO: f64 = 1.9;

fn tiny_profile() -> qos::DeviceProfile {
    let point = |p95_us: u64| qos::RatePoint {
        p95_read_latency_ns: p95_us * 1000,
        tokens_per_sec: DEVICE_TOKENS_PER_SEC,
        read_only_tokens_per_sec: DEVICE_TOKENS_PER_SEC,
    };
    qos::DeviceProfile::new("tiny", 10_000, 1_000, vec![point(500), point(50_000)])
        .expect("valid profile")
}

#[test]
fn a_registered_be_flow_gets_the_device_not_half_of_it() {
    let config = common::lc_be_config(r#"{ kind = "memory", size = "1GiB" }"#, &tiny_profile());
    let server = server::start(config).expect("server starts");
    let addr = server.addrs.native.expect("native listener");
    let report = common::bench_4s(
        addr,
        bench::spec::parse_tenant(
            "name=be,secret=be-secret-1,volume=vol,qd=32,read=90,size=4k,span=512m,register=yes",
        )
        .expect("be spec"),
        7,
    );
    let be = &report.tenants[0];
    let tokens_per_sec = be.iops * TOKENS_PER_IO;
    println!(
        "registered BE flow: {:.0} IOPS = {tokens_per_sec:.0} tokens/s of {DEVICE_TOKENS_PER_SEC}",
        be.iops
    );
    // Half the device is what the defect gave; the bucket's epoch resets and rounding may cost
    // a little of the rest.
    assert!(
        tokens_per_sec >= 0.75 * DEVICE_TOKENS_PER_SEC as f64,
        "a registered BE flow got {tokens_per_sec:.0} of {DEVICE_TOKENS_PER_SEC} tokens/s"
    );
    assert!(
        tokens_per_sec <= 1.1 * DEVICE_TOKENS_PER_SEC as f64,
        "a BE flow got {tokens_per_sec:.0} tokens/s, more than the device's {DEVICE_TOKENS_PER_SEC}"
    );
}
