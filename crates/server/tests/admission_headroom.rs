//! Issue 28 end to end, with `[qos] admission_headroom = "slo"` (the default): LC flows
//! admitted up to the refusal point all meet their SLOs beside a best-effort tenant at queue
//! depth 32, and the next one is refused with the reason (crate qos, `admission/headroom.rs`).
//!
//! As in `lc_poisson.rs`, the scheduler is the bottleneck on purpose: the device profile
//! (`tiny`) sustains 20 K tokens/s, so one client can offer it. Each LC flow asks 2,500 IOPS of
//! 4 KiB requests at 90 % reads (4,750 tokens/s reserved, 23.75 % of the device) with a p95 of
//! 20 ms (loose enough for this loaded 2-core VM, as in `lc_poisson.rs`). Three (71.25 %) need
//! a surge of 8.6 % as a pool and leave 20.2 %, admitted; four (95 %) would need 7.2 % and
//! leave 2.6 %, refused — the issue's four tenants at about 90 % of the budget, all admitted,
//! all missing.

mod common;

use client::bench;
use client::bench::report::TenantReport;

const LC_IOPS: u64 = 2_500;
const LC_FLOWS: usize = 4;
const SLO_P95_NS: u64 = 20_000_000;

fn tiny_profile() -> qos::DeviceProfile {
    let point = |p95_us: u64| qos::RatePoint {
        p95_read_latency_ns: p95_us * 1000,
        tokens_per_sec: 20_000,
        read_only_tokens_per_sec: 20_000,
    };
    qos::DeviceProfile::new("tiny", 10_000, 1_000, vec![point(500), point(50_000)])
        .expect("valid profile")
}

fn read_p95_ns(t: &TenantReport) -> u64 {
    t.reads.latency_ns.as_ref().map_or(u64::MAX, |l| l.p95)
}

#[test]
fn lc_flows_admitted_up_to_the_refusal_point_meet_their_slos_beside_be() {
    let config = common::lc_be_config(r#"{ kind = "memory", size = "1GiB" }"#, &tiny_profile());
    assert_eq!(
        config.qos.admission_headroom,
        qos::AdmissionHeadroom::Slo,
        "the headroom rule is on by default"
    );
    config.validate().expect("valid config");
    let server = server::start(config).expect("server starts");
    let addr = server.addrs.native.expect("native listener");
    let mut tenants = Vec::new();
    for _ in 0..LC_FLOWS {
        tenants.extend(
            bench::spec::parse_tenant(&format!(
                "name=lc,secret=lc-secret-1,volume=vol,class=lc,iops={LC_IOPS},p95={}us,read=90,size=4k,span=512m",
                SLO_P95_NS / 1000
            ))
            .expect("lc spec"),
        );
    }
    tenants.extend(
        bench::spec::parse_tenant(
            "name=be,secret=be-secret-1,volume=vol,class=be,qd=32,read=90,size=4k,span=512m",
        )
        .expect("be spec"),
    );
    let report = common::bench_4s(addr, tenants, 28);
    server.shutdown();

    let lc = &report.tenants[..LC_FLOWS];
    let refused: Vec<&String> = lc.iter().filter_map(|t| t.refused.as_ref()).collect();
    for (k, t) in lc.iter().enumerate() {
        println!(
            "LC flow {k}: {}",
            match &t.refused {
                Some(reason) => format!("refused: {reason}"),
                None => format!(
                    "{:.0} IOPS, read p95 {} us (SLO {} us)",
                    t.iops,
                    read_p95_ns(t) / 1000,
                    SLO_P95_NS / 1000
                ),
            }
        );
    }
    assert_eq!(
        refused.len(),
        1,
        "three flows fit with their headroom, the fourth does not"
    );
    assert!(
        refused[0].contains("too little headroom")
            && refused[0].contains("need a surge of 7.2 %")
            && refused[0].contains("leaving a surge of 2."),
        "the refusal names the headroom: {}",
        refused[0]
    );
    for t in lc.iter().filter(|t| t.refused.is_none()) {
        assert!(t.errors.is_empty(), "errors: {:?}", t.errors);
        assert!(
            t.iops >= 0.95 * LC_IOPS as f64,
            "an admitted LC flow got {:.0} of the {LC_IOPS} IOPS it offered",
            t.iops
        );
        let p95 = read_p95_ns(t);
        assert!(
            p95 <= SLO_P95_NS,
            "an admitted LC flow's read p95 is {p95} ns"
        );
    }
    let be = &report.tenants[LC_FLOWS];
    assert!(
        be.refused.is_none() && be.iops > 0.0,
        "the BE tenant ran: {be:?}"
    );
}
