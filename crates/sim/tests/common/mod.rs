//! Helpers the sim test files share: a device-level run of a job file through the x86-4 thin
//! host, one-job files, and a summary's JSON without its wall-clock fields. (The golden test
//! keeps its own: its inputs must not move when a helper does.)
#![allow(dead_code)] // each test file uses its own subset

use device::DeviceConfig;
use sim::{DeviceRun, DeviceRunConfig, HostCosts, RunSummary, Silent};

/// The configuration of a device-level run of fio `job` (`test.fio`) on `device` through the
/// x86-4 thin host; `integrity` checks every read against the last write.
pub fn run_config(device: DeviceConfig, job: &str, seed: u64, integrity: bool) -> DeviceRunConfig {
    DeviceRunConfig {
        seed,
        device,
        host: HostCosts::preset("x86-4").unwrap(),
        host_name: "x86-4".into(),
        jobs: workload::JobFile::parse_fio(job, "test.fio").unwrap(),
        job_source: "test.fio".into(),
        integrity,
    }
}

/// Runs [`run_config`] to the end.
pub fn run_job(device: DeviceConfig, job: &str, seed: u64, integrity: bool) -> RunSummary {
    let cfg = run_config(device, job, seed, integrity);
    DeviceRun::new(&cfg).unwrap().run(&mut Silent).unwrap()
}

/// A one-job file. `time_based` with a long runtime makes `number_ios` the real bound (fio
/// stops a job after one pass over its region otherwise).
pub fn job(name: &str, body: &str) -> String {
    format!(
        "[global]\nioengine=libaio\ndirect=1\nbs=4k\ntime_based\nruntime=1000s\n[{name}]\n{body}\n"
    )
}

/// A summary's JSON (device-level or full-system) with `sim.wall_ns` zeroed, and the `alone`
/// run's too when there is one: everything else is a pure function of config and seed.
pub fn without_wall_clock(json: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["sim"]["wall_ns"] = 0.into();
    if v.get("alone").is_some_and(|a| !a.is_null()) {
        v["alone"]["sim"]["wall_ns"] = 0.into();
    }
    v.to_string()
}
