//! QoS end to end on an emulated drive: an LC tenant offering Poisson reads at exactly its
//! SLO's IOPS gets them all through and keeps its p95 read latency under its SLO while a BE
//! tenant floods writes, and does not without the scheduler.
//!
//! The drive, the measured profile (50 % headroom: each point's rate keeps the device's p95 at
//! half the target, leaving room for the server, the network and a loaded 2-core machine, and
//! for the TLC cliff — p95 jumps once ~5 % of reads meet a program, so a rate measured at the
//! edge for one mix is over it for another) and the loads are in `common/emulated_qos.rs`.
//! Both runs are identical (1 s warm-up + 2.5 s measured) but for `[qos] scheduler`.

mod common;

use common::emulated_qos::*;
use common::metric;
use server::config::SchedulerMode;

#[test]
fn lc_tenant_keeps_its_slo_under_a_be_write_flood_only_with_the_scheduler() {
    let profile = calibrated_profile();
    let mut results = Vec::new();
    for scheduler in [SchedulerMode::On, SchedulerMode::Off] {
        let server =
            server::start(server_config(&profile, scheduler, None, 100)).expect("server starts");
        let report = two_tenants(&server, 1_000_000_000, 2_500_000_000);
        check_classes_reach_the_device(&server);
        server.shutdown();
        let label = format!("scheduler {scheduler:?}");
        let (lc_p95, lc_reads, be_writes) = summary(&label, &report);
        assert_lc_served(&label, lc_reads, 2_500_000_000);
        assert!(
            be_writes > 50.0,
            "the BE tenant must really write ({be_writes:.0}/s) for the test to mean anything"
        );
        results.push((lc_p95, be_writes));
    }
    let ((with, be_with), (without, be_without)) = (results[0], results[1]);
    assert!(
        with <= SLO_P95_NS,
        "with the scheduler the LC p95 is {with} ns, over its {SLO_P95_NS} ns SLO"
    );
    assert!(
        without > SLO_P95_NS,
        "without the scheduler the LC p95 is {without} ns, within its SLO: the BE flood did not hurt"
    );
    assert!(
        be_without > be_with,
        "the scheduler throttles BE writes ({be_with:.0}/s with, {be_without:.0}/s without)"
    );
}

/// Every request of the LC tenant reached the device model as a latency-critical command, and
/// every BE request as a throughput one (the class rides in the command's reserved field).
fn check_classes_reach_the_device(server: &server::ServerHandle) {
    let shared = server.shared();
    shared.refresh_token_metrics();
    let text = shared.metrics.encode_text();
    let device = |class: &str| {
        metric(
            &text,
            &format!("ullstack_device_commands_total{{volume=\"vol\",class=\"{class}\"}}"),
        )
    };
    let requests = |tenant: &str, op: &str| {
        metric(
            &text,
            &format!("ullstack_tenant_requests_total{{tenant=\"{tenant}\",op=\"{op}\"}}"),
        )
    };
    let (lc_dev, tp_dev) = (device("latency_critical"), device("throughput"));
    let (lc_reads, be_writes) = (requests("lc", "read"), requests("be", "write"));
    assert!(
        lc_reads > 0 && be_writes > 0,
        "both tenants did I/O:\n{text}"
    );
    // Requests still in flight when the counters were read were sent but are not yet counted.
    let in_flight_slack = 1_000;
    assert!(
        (lc_reads..=lc_reads + in_flight_slack).contains(&lc_dev),
        "{lc_dev} latency-critical device commands for {lc_reads} LC reads"
    );
    assert!(
        (be_writes..=be_writes + in_flight_slack).contains(&tp_dev),
        "{tp_dev} throughput device commands for {be_writes} BE writes"
    );
}
