//! The closed loop (`[qos] vrate = "on"`) end to end: with a device profile that promises
//! several times what the emulated drive sustains, the scheduler hands the BE writer too many
//! tokens and the LC tenant misses its SLO; with the loop on, the server measures the LC flow's
//! p95 per window, the controller lowers the device rate scale, the BE share shrinks with it,
//! and the LC p95 comes back to its SLO.
//!
//! Drive, loads and the calibration are in `common/emulated_qos.rs`; the optimistic profile is
//! the calibrated one with every rate multiplied by [`OPTIMISM`] ("calibrated on a faster
//! drive"). The loop runs fast for a test: 150 ms windows, 15 % steps down, floor 10 %.

mod common;

use common::emulated_qos::*;
use server::config::SchedulerMode;

/// How much the wrong profile over-promises.
const OPTIMISM: u64 = 5;

fn optimistic(profile: &qos::DeviceProfile) -> qos::DeviceProfile {
    let mut p = profile.clone();
    p.name = format!("{}-x{OPTIMISM}", p.name);
    for point in &mut p.points {
        point.tokens_per_sec *= OPTIMISM;
        point.read_only_tokens_per_sec *= OPTIMISM;
    }
    p.validate().expect("scaled profile is valid");
    p
}

#[test]
fn the_closed_loop_lowers_the_rate_until_the_lc_slo_holds_again() {
    let profile = optimistic(&calibrated_profile());
    let tuning = qos::VrateConfig {
        step_down_ppm: 150_000,
        min_scale_ppm: 100_000,
        min_reads_per_window: 100,
        ..qos::VrateConfig::default()
    };

    // Without the loop: the profile is wrong and the SLO is missed.
    let server = server::start(server_config(&profile, SchedulerMode::On, None, 150))
        .expect("server starts");
    let report = two_tenants(&server, 1_000_000_000, 2_000_000_000);
    server.shutdown();
    let (open_p95, _, open_be) = summary("vrate off", &report);

    // With the loop: 3 s to converge (unmeasured), then 2.5 s measured.
    let server = server::start(server_config(
        &profile,
        SchedulerMode::On,
        Some(tuning),
        150,
    ))
    .expect("server starts");
    let report = two_tenants(&server, 3_000_000_000, 2_500_000_000);
    let scale_ppm = server.shared().lock_control().rate_scale_ppm();
    server.shutdown();
    let (closed_p95, lc_reads, closed_be) = summary("vrate on", &report);
    println!("rate scale after the run: {scale_ppm} ppm");

    assert!(
        open_p95 > SLO_P95_NS,
        "the optimistic profile should break the SLO without the loop (p95 {open_p95} ns)"
    );
    assert_lc_served("vrate on", lc_reads, 2_500_000_000);
    assert!(
        scale_ppm < 1_000_000 / OPTIMISM as u32 * 2,
        "the loop should have cut the rate well below the profile's: {scale_ppm} ppm"
    );
    assert!(
        closed_be < open_be * 0.7,
        "BE writes with the loop {closed_be:.0}/s vs without {open_be:.0}/s"
    );
    assert!(
        closed_p95 <= SLO_P95_NS,
        "with the loop the LC p95 is {closed_p95} ns, over its {SLO_P95_NS} ns SLO (without: {open_p95})"
    );
}
