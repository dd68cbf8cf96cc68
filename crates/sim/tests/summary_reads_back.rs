//! `summary.json` reads back through the types that wrote it (`RunSummary`, `SystemSummary`):
//! deserialized and written again, a fresh run's summary is the same text, and a committed
//! golden summary holds the same values. The fresh runs have every optional section present
//! (the device's drain, FTL allocator, cache partition and ghost prefetch; the host's adaptive
//! dirty thresholds; a named stack; the alone run; online services' request times). What is
//! written but not read: the latency histograms (in the CSVs, not the summary) and the derived
//! `fraction` / `mean_ns` objects of `exec_time` and `request_time`, which writing recomputes
//! from the sums.

mod common;

use std::path::{Path, PathBuf};

use common::run_job;
use device::config::{Flush, Precondition};
use device::DeviceConfig;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sim::system::{SystemConfig, SystemSummary};
use sim::{RunSummary, Silent};

/// `json` read as `T` and written again is `json`.
fn assert_reads_back<T: Serialize + DeserializeOwned>(what: &str, json: &str) -> T {
    let back: T = serde_json::from_str(json).unwrap_or_else(|e| panic!("{what}: {e}"));
    let again = serde_json::to_string_pretty(&back).unwrap();
    assert!(
        again == json.trim_end(),
        "{what}: the summary read back is written differently"
    );
    back
}

/// `json` read as `T` and written again holds the same values (the golden files hold their
/// keys sorted, as `serde_json::Value` writes them, not in the types' order).
fn assert_reads_back_values<T: Serialize + DeserializeOwned>(what: &str, json: &str) -> T {
    let back: T = serde_json::from_str(json).unwrap_or_else(|e| panic!("{what}: {e}"));
    let want: serde_json::Value = serde_json::from_str(json).unwrap();
    assert!(
        serde_json::to_value(&back).unwrap() == want,
        "{what}: the summary read back is written differently"
    );
    back
}

#[test]
fn the_golden_summaries_read_back_to_the_same_values() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    for name in ["zssd-mixed-seed1.json", "nvme-tlc-mixed-seed7.json"] {
        assert_reads_back_values::<RunSummary>(name, &read(name));
    }
    let name = "system-imageserver-ungzip-seed5.json";
    let s = assert_reads_back_values::<SystemSummary>(name, &read(name));
    assert!(s.alone.is_some(), "the golden co-run has an alone run");
    assert!(
        s.run.processes.iter().any(|p| p.request_time.is_some()),
        "and an online service"
    );
}

/// A device-level run with the device's mechanisms on (random precondition, idle flush,
/// read-ahead, several firmware cores) and a job of each direction.
#[test]
fn a_device_level_summary_reads_back_to_the_same_text() {
    let mut c = DeviceConfig::preset("zssd").unwrap();
    c.flash.channels = 2;
    c.flash.packages_per_channel = 1;
    c.flash.blocks_per_plane = 64;
    c.flash.pages_per_block = 64;
    c.ftl.precondition = Precondition::Random;
    c.cache.flush = Flush::Idle;
    let j = "[global]\nioengine=libaio\ndirect=1\nnorandommap\ntime_based\nruntime=1000s\n\
             [mix]\nrw=randrw\nrwmixread=70\nbs=4k\niodepth=8\nnumber_ios=3000\n";
    let s = run_job(c, j, 3, true);
    let back = assert_reads_back::<RunSummary>("device-level", &s.to_json());
    assert!(back.device.ftl.gc_runs > 0, "GC ran: {:?}", back.device.ftl);
}

/// The FastDrain stack `fd` (drain, latency-aware allocator, adaptive dirty thresholds) on a
/// short co-run with an online service, and its alone run.
#[test]
fn a_fastdrain_system_summary_reads_back_to_the_same_text() {
    let text = "
seed = 2
duration_ms = 300
alone = true
[host]
preset = \"arm8-4g\"
[device]
preset = \"nvme-tlc\"
[device.cache]
flush = \"on-full\"
[[process]]
profile = \"apache-upload\"
[[process]]
profile = \"ungzip\"
threads = 8
";
    let stack = sim::stack::find("fd").unwrap();
    let cfg = SystemConfig::parse_with_stack(text, "fd.toml", Path::new("."), Some(stack)).unwrap();
    let s = sim::system::run(&cfg, &mut Silent).unwrap();
    let back = assert_reads_back::<SystemSummary>("fd co-run", &s.to_json());
    let r = &back.run;
    assert!(r.stack.is_some() && back.alone.is_some());
    assert!(r.device.drain.is_some() && r.device.ftl.alloc.is_some());
    assert!(r.host.pagecache.adaptive_dirty.is_some());
}

/// The device cache split by class with ghost prefetch.
#[test]
fn a_split_cache_system_summary_reads_back_to_the_same_text() {
    let text = "
seed = 5
duration_ms = 100
[host]
preset = \"arm8\"
attr = \"on\"
[host.pagecache]
memory_bytes = 536870912
reserved_bytes = 134217728
[device]
preset = \"zssd\"
[device.cache]
partition = \"dynamic\"
prefetch = \"ghost\"
readahead_units = 0
[[process]]
profile = \"apache\"
threads = 4
[[process]]
profile = \"pagerank\"
";
    let cfg = SystemConfig::parse(text, "split.toml", Path::new(".")).unwrap();
    let s = sim::system::run(&cfg, &mut Silent).unwrap();
    let back = assert_reads_back::<SystemSummary>("split co-run", &s.to_json());
    let cache = &back.run.device.cache;
    assert!(cache.partition.is_some() && cache.ghost.is_some());
}
