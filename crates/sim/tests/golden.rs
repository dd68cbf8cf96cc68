//! Golden results: a few fixed runs whose `summary.json` (minus the wall-clock fields) is
//! committed: two device-level runs and one full-system co-run (host and device in lock-step).
//! A change in any model shows up here as a diff to review. To regenerate deliberately:
//! `ULLSTACK_BLESS=1 cargo test -p sim --test golden`, then review `git diff`.

use std::path::{Path, PathBuf};

use device::DeviceConfig;
use sim::{DeviceRun, DeviceRunConfig, HostCosts, Silent};

/// Compares `value` (wall-clock fields already zeroed) with `tests/golden/NAME.json`, or writes
/// it there under `ULLSTACK_BLESS`.
fn check_golden(name: &str, value: &serde_json::Value) {
    let got = serde_json::to_string_pretty(value).unwrap() + "\n";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.json"));
    if std::env::var_os("ULLSTACK_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (create it with ULLSTACK_BLESS=1)", path.display()));
    assert!(got == want, "{name}: summary differs from {}; if the change is intended, regenerate with ULLSTACK_BLESS=1 and review the diff", path.display());
}

fn golden(name: &str, preset: &str, job: &str, seed: u64) {
    let mut device = DeviceConfig::preset(preset).unwrap();
    // Small enough that GC and buffer overflow both happen within the run.
    device.flash.channels = 2;
    device.flash.packages_per_channel = 1;
    device.flash.blocks_per_plane = 64;
    device.flash.pages_per_block = if preset == "zssd" { 64 } else { 48 };
    device.cache.dram_bytes = 8 << 20;
    device.cache.write_buffer_bytes = 2 << 20;
    let cfg = DeviceRunConfig {
        seed,
        device,
        host: HostCosts::preset("x86-4").unwrap(),
        host_name: "x86-4".into(),
        jobs: workload::JobFile::parse_fio(job, name).unwrap(),
        job_source: name.into(),
        integrity: true,
    };
    let summary = DeviceRun::new(&cfg).unwrap().run(&mut Silent).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&summary.to_json()).unwrap();
    value["sim"]["wall_ns"] = 0.into();
    check_golden(name, &value);
}

const MIXED: &str = "[global]\nioengine=libaio\ndirect=1\nnorandommap\ntime_based\nruntime=1000s\n\
    [mixed]\nrw=randrw\nrwmixread=70\nbs=4k\niodepth=16\nnumber_ios=20000\n\
    [seq]\nrw=write\nbs=64k\niodepth=4\nnumber_ios=500\n";

#[test]
fn golden_zssd_mixed_seed_1() {
    golden("zssd-mixed-seed1", "zssd", MIXED, 1);
}

#[test]
fn golden_nvme_tlc_mixed_seed_7() {
    golden("nvme-tlc-mixed-seed7", "nvme-tlc", MIXED, 7);
}

/// A full-system co-run with every layer busy: a latency-critical online service (imageserver)
/// beside a write-heavy offline job (ungzip) on a host whose small page cache keeps write-back
/// waves going, then the service alone.
const SYSTEM_CORUN: &str = "
seed = 5
duration_ms = 300
alone = true
[host]
preset = \"arm8\"
[host.pagecache]
memory_bytes = 536870912
reserved_bytes = 134217728
[device]
preset = \"zssd\"
[[process]]
profile = \"imageserver\"
[[process]]
profile = \"ungzip\"
threads = 4
";

#[test]
fn golden_system_imageserver_ungzip_seed_5() {
    let cfg = sim::system::SystemConfig::parse(SYSTEM_CORUN, "golden.toml", Path::new("."))
        .expect("golden system config");
    let summary = sim::system::run(&cfg, &mut Silent).expect("system run");
    let mut value: serde_json::Value = serde_json::from_str(&summary.to_json()).unwrap();
    value["sim"]["wall_ns"] = 0.into();
    if value.get("alone").is_some_and(|a| !a.is_null()) {
        value["alone"]["sim"]["wall_ns"] = 0.into();
    }
    check_golden("system-imageserver-ungzip-seed5", &value);
}
