//! Time series (`timeseries.csv`): the windows add up to the run's totals, and sampling does
//! not perturb the simulation (series on and off give the same summary).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

mod common;

use common::{run_config, without_wall_clock};
use device::DeviceConfig;
use sim::system::{run_with_series, SeriesOut, SystemConfig, SystemSummary};
use sim::{DeviceRun, RunSummary, Silent};

/// A writer the test reads back after the run.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Rows of the CSV as column → value (every column is numeric).
fn rows(buf: &Shared) -> Vec<HashMap<String, f64>> {
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let mut lines = text.lines();
    let cols: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines
        .map(|l| {
            let vals: Vec<f64> = l.split(',').map(|v| v.parse().unwrap()).collect();
            assert_eq!(vals.len(), cols.len(), "row width: {l}");
            cols.iter().cloned().zip(vals).collect()
        })
        .collect()
}

fn sum(rows: &[HashMap<String, f64>], col: &str) -> u64 {
    rows.iter().map(|r| r[col] as u64).sum()
}

fn device_run(series_ms: Option<u64>) -> (RunSummary, Shared) {
    let mut device = DeviceConfig::preset("nvme-tlc").unwrap();
    // Small enough that GC runs within the run.
    device.flash.channels = 2;
    device.flash.packages_per_channel = 1;
    device.flash.blocks_per_plane = 64;
    device.flash.pages_per_block = 48;
    device.cache.dram_bytes = 8 << 20;
    device.cache.write_buffer_bytes = 2 << 20;
    let job = "[global]\nioengine=libaio\ndirect=1\nnorandommap\ntime_based\nruntime=1000s\n\
        [mixed]\nrw=randrw\nrwmixread=70\nbs=4k\niodepth=16\nnumber_ios=20000\n\
        [polled]\nioengine=pvsync2\nhipri\nrw=randread\nbs=4k\nnumber_ios=3000\n\
        [seq]\nstonewall\nramp_time=5ms\nrw=write\nbs=64k\niodepth=4\nnumber_ios=500\n";
    let cfg = run_config(device, job, 7, false);
    let buf = Shared::default();
    let mut run = DeviceRun::new(&cfg).unwrap();
    if let Some(ms) = series_ms {
        run.enable_series(ms * 1_000_000, Box::new(buf.clone()))
            .unwrap();
    }
    (run.run(&mut Silent).unwrap(), buf)
}

#[test]
fn device_level_series_sum_to_the_run_totals_and_do_not_perturb_it() {
    let (off, _) = device_run(None);
    let (on, buf) = device_run(Some(5));
    assert_eq!(
        without_wall_clock(&off.to_json()),
        without_wall_clock(&on.to_json()),
        "summary.json with series on and off"
    );
    let r = rows(&buf);
    let end = on.sim.simulated_ns;
    assert_eq!(
        r.len() as u64,
        end.div_ceil(5_000_000),
        "one row per 5 ms window"
    );
    assert_eq!(r.last().unwrap()["t_end_ns"] as u64, end);
    let ios: u64 = on.jobs.iter().map(|j| j.read.ios + j.write.ios).sum();
    assert!(ios > 20_000);
    assert_eq!(sum(&r, "tp_ios"), ios, "I/Os recorded (after ramps)");
    assert_eq!(sum(&r, "lc_ios"), 0);
    let bs = |name: &str| if name == "seq" { 65_536 } else { 4_096 };
    let bytes: u64 = on
        .jobs
        .iter()
        .map(|j| (j.read.ios + j.write.ios) * bs(&j.name))
        .sum();
    assert_eq!(sum(&r, "tp_bytes"), bytes);
    let d = &on.device;
    assert!(d.ftl.gc_runs > 0, "the device is small enough for GC");
    assert_eq!(sum(&r, "gc_runs"), d.ftl.gc_runs);
    assert_eq!(sum(&r, "gc_units_programmed"), d.ftl.gc_units_programmed);
    assert_eq!(sum(&r, "erases"), d.ftl.erases);
    assert_eq!(
        sum(&r, "tp_cache_read_misses"),
        d.cache.throughput.read_misses
    );
    assert_eq!(sum(&r, "tp_cache_read_hits"), d.cache.throughput.read_hits);
    // nvme-tlc's cache is fully associative: its one set has every line (8 MiB here).
    let lines = (8 << 20) / 4096;
    per_class_cache_columns_match(&r, &d.cache, d.commands.latency_critical > 0, lines);
    // CPU: every category adds up to the run's per-core totals, idle included.
    for (i, cat) in host::CATS.iter().enumerate() {
        let total: u64 = on.host.cores.iter().map(|c| c.ns[i]).sum();
        assert_eq!(
            sum(&r, &format!("cpu_{}_ns", cat.name())),
            total,
            "{}",
            cat.name()
        );
    }
    // The window's worst latency never exceeds the run's.
    let max = r.iter().map(|w| w["tp_lat_max_ns"] as u64).max().unwrap();
    let run_max = on
        .jobs
        .iter()
        .flat_map(|j| [j.read.latency_ns.max, j.write.latency_ns.max])
        .max()
        .unwrap();
    assert_eq!(max, run_max);
}

const SYSTEM: &str = "
seed = 5
duration_ms = 120
alone = true
[host]
preset = \"arm8\"
attr = \"on\"
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
start_ms = 20
";

fn system_run(series_ms: Option<u64>) -> (SystemSummary, Shared) {
    let cfg = SystemConfig::parse(SYSTEM, "series.toml", Path::new(".")).unwrap();
    let buf = Shared::default();
    let series = series_ms.map(|ms| SeriesOut {
        window_ns: ms * 1_000_000,
        out: Box::new(buf.clone()),
    });
    (run_with_series(&cfg, &mut Silent, series).unwrap(), buf)
}

#[test]
fn system_series_sum_to_the_run_totals_and_do_not_perturb_it() {
    let (off, _) = system_run(None);
    let (on, buf) = system_run(Some(10));
    assert_eq!(
        without_wall_clock(&off.to_json()),
        without_wall_clock(&on.to_json()),
        "summary.json with series on and off"
    );
    let r = rows(&buf);
    let run = &on.run;
    let end = run.sim.simulated_ns;
    assert_eq!(r.len() as u64, end.div_ceil(10_000_000));
    assert_eq!(r.last().unwrap()["t_end_ns"] as u64, end);
    let ios = |class: engine::IoClass| -> u64 {
        run.processes
            .iter()
            .filter(|p| p.class == class)
            .map(|p| p.ios)
            .sum()
    };
    assert!(ios(engine::IoClass::LatencyCritical) > 0 && ios(engine::IoClass::Throughput) > 0);
    assert_eq!(sum(&r, "lc_ios"), ios(engine::IoClass::LatencyCritical));
    assert_eq!(sum(&r, "tp_ios"), ios(engine::IoClass::Throughput));
    for (i, cat) in host::CATS.iter().enumerate() {
        let total: u64 = run.host.cores.iter().map(|c| c.ns[i]).sum();
        assert_eq!(
            sum(&r, &format!("cpu_{}_ns", cat.name())),
            total,
            "{}",
            cat.name()
        );
    }
    let pc = &run.host.pagecache;
    assert!(pc.throughput.pages_dirtied > 0);
    assert_eq!(sum(&r, "tp_pages_dirtied"), pc.throughput.pages_dirtied);
    assert_eq!(
        sum(&r, "tp_pages_written_back"),
        pc.throughput.pages_written_back
    );
    assert_eq!(
        sum(&r, "lc_pages_dirtied"),
        pc.latency_critical.pages_dirtied
    );
    assert_eq!(
        sum(&r, "lc_pages_written_back"),
        pc.latency_critical.pages_written_back
    );
    let cache = &run.device.cache;
    assert!(cache.latency_critical.read_misses > 0 && cache.throughput.read_misses > 0);
    for (col, total) in [
        ("lc_cache_read_hits", cache.latency_critical.read_hits),
        ("lc_cache_read_misses", cache.latency_critical.read_misses),
        ("tp_cache_read_hits", cache.throughput.read_hits),
        ("tp_cache_read_misses", cache.throughput.read_misses),
    ] {
        assert_eq!(sum(&r, col), total, "{col}");
    }
    per_class_cache_columns_match(&r, cache, true, 16);
    // Context switches by class and interrupts add up to the run's counts; online requests
    // to the services' requests, and their per-window means to the services' mean.
    assert_eq!(
        sum(&r, "lc_context_switches") + sum(&r, "tp_context_switches"),
        run.cpu.context_switches
    );
    assert!(sum(&r, "lc_context_switches") > 0 && sum(&r, "tp_context_switches") > 0);
    assert_eq!(sum(&r, "interrupts"), run.cpu.interrupts);
    let online = run
        .processes
        .iter()
        .find(|p| p.requests.is_some_and(|n| n > 0))
        .expect("imageserver answers requests");
    let requests = online.requests.unwrap();
    assert_eq!(sum(&r, "online_requests"), requests);
    let weighted: u64 = r
        .iter()
        .map(|w| (w["online_requests"] * w["online_resp_mean_ns"]) as u64)
        .sum();
    let mean = online.response_time_ns.as_ref().unwrap().mean;
    assert!(
        weighted.abs_diff(mean * requests) <= requests,
        "per-window means {weighted} vs {} (each rounds down by < 1 ns)",
        mean * requests
    );
    assert_eq!(sum(&r, "gc_runs"), run.device.ftl.gc_runs);
    assert_eq!(
        sum(&r, "gc_units_programmed"),
        run.device.ftl.gc_units_programmed
    );
    assert_eq!(sum(&r, "erases"), run.device.ftl.erases);
    // ungzip starts at 20 ms: no throughput I/O and no dirty page before it.
    assert_eq!(r[0]["tp_ios"] as u64 + r[1]["tp_ios"] as u64, 0);
    assert_eq!(r[0]["dirty_pages"] as u64 + r[1]["dirty_pages"] as u64, 0);
    assert!(r[2..].iter().any(|w| w["dirty_pages"] > 0.0));
}

/// The per-class cache columns (issue 10's occupancy by class): counters sum to the summary's
/// totals, gauges end at its end-of-run values, and the classes' buffer shares add up to the
/// buffer's occupancy in every window.
fn per_class_cache_columns_match(
    r: &[HashMap<String, f64>],
    cache: &device::cache::CacheStats,
    lc_expected: bool,
    ways: u64,
) {
    let last = r.last().unwrap();
    for (prefix, c) in [("lc", &cache.latency_critical), ("tp", &cache.throughput)] {
        for (col, total) in [
            ("cache_prefetch_hits", c.prefetch_hits),
            ("cache_lines_evicted", c.lines_evicted),
            ("wb_units_written_back", c.units_written_back),
        ] {
            assert_eq!(sum(r, &format!("{prefix}_{col}")), total, "{prefix}_{col}");
        }
        assert_eq!(last[&format!("{prefix}_cache_lines")] as u64, c.lines);
        assert_eq!(
            last[&format!("{prefix}_wb_dirty_units")] as u64,
            c.dirty_units
        );
        assert_eq!(
            last[&format!("{prefix}_cache_ways")] as u64,
            ways,
            "shared: every way"
        );
    }
    assert_eq!(
        sum(r, "lc_wb_units_written_back") + sum(r, "tp_wb_units_written_back"),
        cache.units_evicted
    );
    for w in r {
        assert_eq!(
            w["lc_wb_dirty_units"] + w["tp_wb_dirty_units"],
            w["wb_dirty_units"],
            "window ending {}",
            w["t_end_ns"]
        );
    }
    assert!(r.iter().any(|w| w["tp_cache_lines"] > 0.0));
    assert_eq!(
        r.iter().any(|w| w["lc_cache_lines"] > 0.0),
        lc_expected,
        "latency-critical lines exactly when there was latency-critical I/O"
    );
}

/// The FastDrain study's `fd-buf` + `apache-upload` co-run, 2 s of it: foreground eviction
/// keeps programming rows after the host's last I/O — device events past the host's end, and
/// with 20 ms windows past a window boundary beyond the run's end (before the fix this run
/// panicked: "core 0 settled at 2.011s, before its accounting time 2.120s").
const DRAINING_AFTER_THE_HOST: &str = "
seed = 1
duration_ms = 2000
[host]
preset = \"arm8-4g\"
[host.pagecache]
victim_hint = \"on\"
[device]
preset = \"nvme-tlc\"
[device.cache]
flush = \"on-full\"
drain = \"fastdrain\"
[device.ftl]
precondition = \"sequential\"
[[process]]
profile = \"apache-upload\"
[[process]]
profile = \"ungzip\"
";

/// Such windows are not sampled from the host beyond its end (which once made `Host::finish`
/// find a core accounted past it: "time went backwards"); the series still ends at the run's
/// end and sampling still does not perturb the run.
#[test]
fn a_device_draining_after_the_host_ends_is_not_sampled_past_the_host() {
    let cfg = SystemConfig::parse(DRAINING_AFTER_THE_HOST, "drain.toml", Path::new(".")).unwrap();
    let off = run_with_series(&cfg, &mut Silent, None).unwrap();
    let buf = Shared::default();
    let series = SeriesOut {
        window_ns: 20_000_000,
        out: Box::new(buf.clone()),
    };
    let on = run_with_series(&cfg, &mut Silent, Some(series)).unwrap();
    assert_eq!(
        without_wall_clock(&off.to_json()),
        without_wall_clock(&on.to_json()),
        "summary.json with series on and off"
    );
    let r = rows(&buf);
    let end = on.run.sim.simulated_ns;
    assert_eq!(r.last().unwrap()["t_end_ns"] as u64, end);
    assert!(
        on.run.device.flash.units_programmed > 0,
        "the buffer drained to flash"
    );
}

/// The system loop runs the device's steps up to the host's next event in one call, and the
/// host's events up to the device's next back to back, unless a time series samples between
/// them (then one event per turn): both ways must run the same events in the same order. The
/// default co-run (apache + pagerank), shortened, on stacks whose completions differ
/// (interrupts, selective interrupts with the LC queue, FlashShare's polling), sampled every
/// millisecond and not at all, gives the same summary.
#[test]
fn batched_and_stepped_system_loops_give_the_same_run() {
    for name in ["vanilla", "xler", "fd"] {
        let stack = sim::stack::find(name).expect("a FlashShare stack");
        let mut cfg = SystemConfig::parse_with_stack(
            sim::system::DEFAULT_SYSTEM_TOML,
            "embedded-default",
            Path::new("."),
            Some(stack),
        )
        .expect("the embedded default system config is valid");
        cfg.duration = engine::SimTime(150_000_000);
        let batched = run_with_series(&cfg, &mut Silent, None).unwrap();
        let series = SeriesOut {
            window_ns: 1_000_000,
            out: Box::new(Shared::default()),
        };
        let stepped = run_with_series(&cfg, &mut Silent, Some(series)).unwrap();
        assert!(batched.run.sim.events > 0, "{name}: the run ran events");
        assert_eq!(
            without_wall_clock(&batched.to_json()),
            without_wall_clock(&stepped.to_json()),
            "{name}: summary.json of the batched and the stepped loop"
        );
    }
}
