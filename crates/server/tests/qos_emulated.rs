//! QoS end to end on an emulated drive: an LC tenant keeps its p95 read latency under its SLO
//! while a BE tenant floods writes, and does not without the scheduler.
//!
//! The drive is a small TLC device (the `nvme-tlc` preset cut to 4 LUNs, a 1 MiB write buffer
//! and 4 MiB of DRAM) so that a BE tenant on this machine, even in a debug build, can saturate
//! its flash with writes: without program suspend, a read that meets a program on its LUN waits
//! for it (0.56–5 ms), so a write flood pushes the LC reads' p95 to milliseconds. The device
//! profile the scheduler uses is **measured** here from the same model (`server::calibrate`,
//! virtual time, seeded), not written down: if the device model changes, the profile follows.
//! It is calibrated with 50 % headroom (each point's rate keeps the device's p95 at half the
//! target), leaving room for the server, the network and a loaded 2-core machine, and because
//! a TLC drive without suspend has a cliff: p95 jumps from ~150 µs to milliseconds once ~5 % of
//! reads meet a program, so a rate measured right at the edge for one mix is over it for another.
//!
//! Loads (both runs identical, 1 s warm-up + 2.5 s measured, in process through
//! `client::bench`): LC reads 1,000 IOPS open loop (Poisson), SLO p95 2 ms at 1,500 IOPS; BE
//! writes closed loop, 32 in flight.

mod common;

use std::time::Instant;

use client::bench::report::BenchReport;
use client::bench::{self, BenchConfig, Progress};
use server::calibrate::{calibrate, CalibrationConfig};
use server::config::{ProfileConfig, SchedulerMode, ServerConfig};

const DEVICE: &str = r#"
preset = "nvme-tlc"
name = "slow-tlc"
[cache]
dram_bytes = 4194304
write_buffer_bytes = 262144
[flash]
channels = 2
packages_per_channel = 1
blocks_per_plane = 256
program_ns = { lsb = 1680000, csb = 6600000, msb = 15000000 }
"#;

const SLO_P95_NS: u64 = 6_000_000;
/// Share of each latency target the calibration leaves for everything but the device.
const HEADROOM_PCT: u8 = 50;
/// The LC tenant offers this many reads per second (Poisson) ...
const LC_IOPS: u64 = 1000;
/// ... and reserves this many: a tenant offering Poisson arrivals at exactly its reservation
/// is a queue at 100 % utilization (its balance is a zero-drift random walk that keeps hitting
/// the deficit limit), so a real tenant reserves headroom; the unused part goes to BE.
const LC_SLO_IOPS: u64 = 1500;

fn server_config(profile: &qos::DeviceProfile, scheduler: SchedulerMode) -> ServerConfig {
    let device: toml::Table = DEVICE.parse().expect("device TOML");
    let text = format!(
        r#"
[listen]
native = "127.0.0.1:0"

[dataplane]
workers = 2

[[volume]]
name = "vol"
backend = {{ kind = "emulated", size = "1GiB", device = {device} }}

[[tenant]]
name = "lc"
secret = "lc-secret-1"
class = "lc"
acl = [{{ volume = "vol", access = "read-write" }}]

[[tenant]]
name = "be"
secret = "be-secret-1"
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]
"#,
        device = toml::Value::Table(device)
    );
    let mut config = ServerConfig::from_toml_str(&text).expect("test config");
    config.qos.scheduler = scheduler;
    config.qos.profile = ProfileConfig::Inline(
        profile
            .to_toml_string()
            .parse()
            .expect("profile TOML round trip"),
    );
    config
        .validate()
        .expect("valid with the calibrated profile");
    config
}

fn run(profile: &qos::DeviceProfile, scheduler: SchedulerMode) -> BenchReport {
    let server = server::start(server_config(profile, scheduler)).expect("server starts");
    let addr = server.addrs.native.expect("native listener");
    let lc = bench::spec::parse_tenant(&format!(
        "name=lc,secret=lc-secret-1,volume=vol,class=lc,iops={LC_SLO_IOPS},rate={LC_IOPS},p95={}us,read=100,size=4k,span=512m",
        SLO_P95_NS / 1000
    ))
    .expect("lc spec");
    let be = bench::spec::parse_tenant(
        "name=be,secret=be-secret-1,volume=vol,class=be,register=no,qd=32,read=0,size=4k,span=512m",
    )
    .expect("be spec");
    let config = BenchConfig {
        server: addr.to_string(),
        duration_ns: Some(2_500_000_000),
        ios_per_tenant: None,
        warmup_ns: 1_000_000_000,
        threads: 1,
        seed: 7,
        tenants: lc.into_iter().chain(be).collect(),
        progress: Progress::Hidden,
    };
    let report = bench::run(&config).expect("bench runs");
    server.shutdown();
    report
}

#[test]
fn lc_tenant_keeps_its_slo_under_a_be_write_flood_only_with_the_scheduler() {
    let device = device::DeviceConfig::from_toml_str(DEVICE).expect("device");
    let t = Instant::now();
    let calibration = CalibrationConfig {
        targets_ns: vec![SLO_P95_NS / 2, SLO_P95_NS, SLO_P95_NS * 2],
        read_pcts: vec![90, 70, 50],
        headroom_pct: HEADROOM_PCT,
        min_reads: 2000,
        ..CalibrationConfig::new("slow-tlc")
    };
    let cal = calibrate(&device, &calibration).expect("calibration");
    println!(
        "calibrated in {:.1} s ({} probes): {}",
        t.elapsed().as_secs_f64(),
        cal.probes,
        cal.profile.to_toml_string().replace('\n', " ")
    );

    let mut p95 = Vec::new();
    for scheduler in [SchedulerMode::On, SchedulerMode::Off] {
        let report = run(&cal.profile, scheduler);
        let lc = &report.tenants[0];
        let be = &report.tenants[1];
        assert!(lc.refused.is_none(), "LC refused: {:?}", lc.refused);
        assert!(be.refused.is_none(), "BE refused: {:?}", be.refused);
        let lc_p95 = lc
            .reads
            .latency_ns
            .as_ref()
            .expect("LC reads completed")
            .p95;
        println!(
            "scheduler {scheduler:?}: LC {:.0} reads/s p95 {} us (SLO {} us); BE {:.0} writes/s p95 {} us",
            lc.reads.iops,
            lc_p95 / 1000,
            SLO_P95_NS / 1000,
            be.writes.iops,
            be.writes.latency_ns.as_ref().map_or(0, |l| l.p95 / 1000)
        );
        assert!(
            lc.reads.count > LC_IOPS,
            "LC got {} reads through",
            lc.reads.count
        );
        assert!(
            be.writes.iops > 50.0,
            "the BE tenant must really write ({:.0}/s) for the test to mean anything",
            be.writes.iops
        );
        p95.push((lc_p95, be.writes.iops));
    }
    let ((with, be_with), (without, be_without)) = (p95[0], p95[1]);
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
