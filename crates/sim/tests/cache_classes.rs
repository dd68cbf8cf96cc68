//! The device cache's FlashShare mechanisms through whole runs (issue 12 §2): ghost-cache
//! prefetch picks the granularity a known stream needs, the class split moves ways toward the
//! busier class of a real co-run, and with both switches off nothing moves.

mod common;

use std::path::Path;

use common::{job, run_job, without_wall_clock};
use device::config::{Partition, Prefetch};
use device::DeviceConfig;
use sim::system::{run as run_system, run_with_series, SeriesOut, SystemConfig};
use sim::{RunSummary, Silent};

/// `zssd` whose only read-ahead is the ghost-chosen prefetch (the cache-sensitivity study's
/// `uni-dyn`).
fn zssd_ghost() -> DeviceConfig {
    let mut c = DeviceConfig::preset("zssd").unwrap();
    c.cache.readahead_units = 0;
    c.cache.prefetch = Prefetch::Ghost;
    c
}

fn run(device: DeviceConfig, body: &str, seed: u64) -> RunSummary {
    run_job(device, &job("j", body), seed, false)
}

/// The test, on streams whose answer is known: sequential 64 KiB reads need 16 pages
/// (the smallest prefetch that covers the next command), random 4 KiB reads over 800 GB need
/// none. Adopting 16 pages turns the sequential stream's misses into hits.
#[test]
fn ghost_prefetch_picks_16_pages_for_sequential_64k_reads_and_0_for_random_reads() {
    let seq = "rw=read\nbs=64k\niodepth=1\nnumber_ios=6000";
    let s = run(zssd_ghost(), seq, 3);
    let g = &s.device.cache.ghost.as_ref().expect("ghost stats").groups[0];
    assert_eq!((g.class, g.pages), ("all", 16), "{g:?}");
    assert!(g.decisions >= 5, "{g:?}");
    let misses: Vec<u64> = g.misses.iter().map(|m| m.misses).collect();
    assert!(
        misses[0] > 4 * misses[1].max(1) / 3 && misses[2] <= misses[0] / 100,
        "{misses:?}"
    );
    let t = &s.device.cache.throughput;
    let mut fixed = zssd_ghost();
    fixed.cache.prefetch = Prefetch::Fixed;
    let f = &run(fixed, seq, 3).device.cache.throughput;
    assert_eq!(
        f.read_hits, 0,
        "no prefetch, no read-ahead: sequential reads all miss"
    );
    assert!(
        t.read_hits > 10 * t.read_misses,
        "ghost: {} hits, {} misses",
        t.read_hits,
        t.read_misses
    );

    let random = run(
        zssd_ghost(),
        "rw=randread\niodepth=8\nnumber_ios=40000\nnorandommap",
        3,
    );
    let g = &random.device.cache.ghost.as_ref().unwrap().groups[0];
    assert_eq!(g.pages, 0, "{g:?}");
    assert!(g.decisions >= 5, "{g:?}");
    assert_eq!(
        random.device.cache.prefetch_fills, 0,
        "no epoch ever chose to prefetch"
    );
}

/// uni-128: a fixed 128-page prefetch costs random reads flash work the ghosts avoid.
#[test]
fn a_fixed_128_page_prefetch_fills_lines_that_random_reads_never_use() {
    let mut c = zssd_ghost();
    c.cache.prefetch = Prefetch::Fixed;
    c.cache.prefetch_pages = 128;
    let s = run(c, "rw=randread\niodepth=8\nnumber_ios=5000\nnorandommap", 3);
    let cache = &s.device.cache;
    assert!(
        cache.prefetch_fills > 100 * cache.prefetch_hits.max(1),
        "{cache:?}"
    );
    assert!(s.device.flash.reads > 50 * 5000, "{:?}", s.device.flash);
}

const CORUN: &str = "
seed = 5
duration_ms = 150
[host]
preset = \"arm8\"
# The class must reach the device for the split to see two classes (host.attr, off in stock
# Linux and by default).
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
# apache as it ran before its knee calibration (four workers, 0.25 ms requests): the split's
# epochs are counted for that access mix.
[[process]]
profile = \"apache\"
threads = 4
instructions_per_request = 500000
[[process]]
profile = \"pagerank\"
";

/// The split at work in the study's time-series pair: pagerank's many more cache accesses take
/// ways from apache's partition, down to the minimum and no further, and the ghosts choose per
/// class (pagerank's partly sequential reads earn a prefetch). Same seed, same summary.
#[test]
fn a_split_corun_moves_ways_toward_the_busier_class_and_is_deterministic() {
    let cfg = SystemConfig::parse(CORUN, "split.toml", Path::new(".")).unwrap();
    let a = run_system(&cfg, &mut Silent).unwrap();
    let d = &a.run.device;
    let lc = d.commands.latency_critical;
    let tp = d.commands.throughput;
    assert!(
        tp > 2 * lc && lc > 0,
        "pagerank busier: LC {lc}, TP {tp} commands"
    );
    let p = d.cache.partition.as_ref().expect("partition stats");
    assert!(p.epochs >= 5, "{p:?}");
    assert_eq!(
        (p.lc_ways, p.lc_ways_min),
        (2, 2),
        "down to the minimum, not below: {p:?}"
    );
    assert_eq!(p.ways_moved, 6, "8 → 2, one way per epoch: {p:?}");
    assert_eq!(p.lc_ways + p.tp_ways, 16);
    let g = &d.cache.ghost.as_ref().expect("ghost stats").groups;
    assert_eq!(
        g.iter().map(|x| x.class).collect::<Vec<_>>(),
        ["latency-critical", "throughput"]
    );
    assert!(g[1].decisions > 0 && g[1].pages > 0, "{g:?}");
    let table = a.table();
    assert!(
        table.contains("cache split by class: latency-critical 2 ways")
            && table.contains("ghost prefetch: latency-critical"),
        "{table}"
    );
    let b = run_system(&cfg, &mut Silent).unwrap();
    assert_eq!(
        without_wall_clock(&a.to_json()),
        without_wall_clock(&b.to_json())
    );
}

/// Both switches spelled out at their defaults change nothing, and their summaries carry no
/// partition or ghost section.
#[test]
fn the_switches_at_their_defaults_are_the_baseline() {
    let body = "rw=randrw\nrwmixread=70\niodepth=8\nnumber_ios=5000\nnorandommap";
    let base = DeviceConfig::preset("zssd").unwrap();
    let spelled = DeviceConfig::from_toml_str(
        "preset = \"zssd\"\n[cache]\npartition = \"shared\"\nprefetch = \"fixed\"\n\
         epoch_ns = 1000000\nghost_pages = [0, 8]\n",
    )
    .unwrap();
    assert_eq!(spelled.cache.partition, Partition::Shared);
    let a = run(base, body, 4);
    assert!(a.device.cache.partition.is_none() && a.device.cache.ghost.is_none());
    let json = a.to_json();
    assert!(!a.table().contains("cache split") && !a.table().contains("ghost prefetch"));
    assert!(!json.contains("\"partition\"") && !json.contains("\"ghost\""));
    assert_eq!(
        without_wall_clock(&json),
        without_wall_clock(&run(spelled, body, 4).to_json())
    );
}

/// experiments.md's cache-sensitivity cases, written as a system file's `[device.cache]`
/// table would write them (the keys the study and the report use).
const SENSITIVITY: [(&str, &str); 4] = [
    (
        "uni-no",
        "prefetch = \"fixed\"\nprefetch_pages = 0\nreadahead_units = 0\n",
    ),
    (
        "uni-128",
        "prefetch = \"fixed\"\nprefetch_pages = 128\nreadahead_units = 0\n",
    ),
    ("uni-dyn", "prefetch = \"ghost\"\nreadahead_units = 0\n"),
    (
        "split",
        "partition = \"dynamic\"\nprefetch = \"ghost\"\nreadahead_units = 0\n",
    ),
];

/// The four cases parse, and on a sequential 64 KiB stream they order as they should: no
/// prefetch hits nothing, 128 pages and the ghosts hit nearly everything (the split's
/// throughput partition, which the stream alone uses, as well as the shared cache).
#[test]
fn the_cache_sensitivity_cases_are_expressible_and_order_as_expected() {
    let hit_pct = |(name, keys): (&'static str, &str)| {
        let device =
            DeviceConfig::from_toml_str(&format!("preset = \"zssd\"\n[cache]\n{keys}")).unwrap();
        let s = run(device, "rw=read\nbs=64k\niodepth=1\nnumber_ios=3000", 2);
        let t = &s.device.cache.throughput;
        let pct = t.read_hits * 100 / (t.read_hits + t.read_misses);
        (name, pct, s.device.cache.partition.is_some())
    };
    let got: Vec<(&str, u64, bool)> = SENSITIVITY.into_iter().map(hit_pct).collect();
    assert_eq!(got[0].1, 0, "{got:?}");
    assert!(got[1..].iter().all(|&(_, pct, _)| pct >= 90), "{got:?}");
    assert_eq!(
        got.iter().map(|g| g.2).collect::<Vec<_>>(),
        [false, false, false, true]
    );
}

/// A writer the test reads back after the run.
#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The study's apache + pagerank time series of the throughput partition's share: the
/// `tp_cache_ways` column starts at half the ways and climbs a way per 10 ms epoch to 14 of 16,
/// and the throughput prefetch column shows the ghosts' choice.
#[test]
fn the_series_shows_the_throughput_partition_growing() {
    let cfg = SystemConfig::parse(CORUN, "split.toml", Path::new(".")).unwrap();
    let buf = Shared::default();
    let series = SeriesOut {
        window_ns: 10_000_000,
        out: Box::new(buf.clone()),
    };
    run_with_series(&cfg, &mut Silent, Some(series)).unwrap();
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let mut lines = text.lines();
    let cols: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| cols.iter().position(|c| *c == name).unwrap();
    let (lc, tp, pages) = (
        col("lc_cache_ways"),
        col("tp_cache_ways"),
        col("tp_prefetch_pages"),
    );
    let rows: Vec<Vec<u64>> = lines
        .map(|l| {
            l.split(',')
                .map(|v| v.parse::<f64>().unwrap() as u64)
                .collect()
        })
        .collect();
    let tp_ways: Vec<u64> = rows.iter().map(|r| r[tp]).collect();
    assert!(rows.iter().all(|r| r[lc] + r[tp] == 16), "{tp_ways:?}");
    assert_eq!(tp_ways[0], 8, "{tp_ways:?}");
    assert_eq!(*tp_ways.last().unwrap(), 14, "{tp_ways:?}");
    assert!(
        tp_ways.windows(2).all(|w| w[1] >= w[0] && w[1] <= w[0] + 1),
        "{tp_ways:?}"
    );
    assert!(
        rows.iter().any(|r| r[pages] > 0),
        "the ghosts chose a prefetch at some point"
    );
}
