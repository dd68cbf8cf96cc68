//! Issue targets for device-level runs, printed (not asserted):
//! (a) 4 KiB random read, QD32, 1 M I/Os on a full-capacity `zssd` (800 GB);
//! (b) 70/30 random read/write 4 KiB, QD32, 1 M I/Os on a preconditioned `nvme-tlc` shrunk
//!     (fewer dies) so its free space runs out early and GC is active.
//! (c) building a randomly preconditioned 800 GB `zssd` (`ftl.precondition = "random"`), then
//!     (a)'s random reads on it (every read then goes through the preconditioned layout);
//! (d) (a) with the cache split by class and ghost prefetch on (their cost when on);
//! (e) 70/30 random read/write 4 KiB, QD32, 1 M I/Os over the whole 800 GB `zssd` (the
//!     forward map holds every LPN written: memory follows the distinct LPNs written);
//! (f) 100 K random 4 KiB writes, QD32, over the whole `zssd`.
//! What a long run keeps (cases (a) and (e) at 100 M I/Os) is the `run_scale` bench's question.
//! Prints simulated I/Os per wall-clock second and the case's peak RSS (the high-water mark is
//! reset before each case).
//!
//! Run: `cargo bench -p sim --bench device_throughput [-- CASE]`

use std::time::Instant;

use device::config::Precondition;
use device::{DeviceConfig, DeviceOptions, Ssd};
use sim::{DeviceRun, DeviceRunConfig, HostCosts, Silent};

fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Resets the process's peak RSS to its current RSS (Linux: `5` to `/proc/self/clear_refs`), so
/// that each case prints its own peak.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn bench(label: &str, device: DeviceConfig, job: &str) {
    reset_peak_rss();
    let cfg = DeviceRunConfig {
        seed: 1,
        device,
        host: HostCosts::preset("x86-4").expect("preset"),
        host_name: "x86-4".into(),
        jobs: workload::JobFile::parse_fio(job, label).expect("bench job parses"),
        job_source: label.into(),
        integrity: false,
    };
    let wall = Instant::now();
    let summary = DeviceRun::new(&cfg)
        .expect("valid run")
        .run(&mut Silent)
        .expect("run completes");
    let secs = wall.elapsed().as_secs_f64();
    let d = &summary.device;
    println!(
        "{label}: {} I/Os in {secs:.2} s wall = {:.0} simulated I/Os per second; {} events ({:.1} M events/s); \
         simulated {:.3} s; GC runs {}, write amplification {:.3}; mapping tables {:.1} MiB; peak RSS {} MiB",
        summary.sim.ios,
        summary.sim.ios as f64 / secs,
        summary.sim.events,
        summary.sim.events as f64 / secs / 1e6,
        summary.sim.simulated_ns as f64 / 1e9,
        d.ftl.gc_runs,
        d.write_amplification,
        d.mapping_table_bytes as f64 / (1 << 20) as f64,
        peak_rss_mib()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument selects one case.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let want = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    if want("a-zssd-randread-qd32") {
        let zssd = DeviceConfig::preset("zssd").expect("preset");
        bench(
            "a-zssd-randread-qd32",
            zssd,
            "[a]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randread\niodepth=32\nnorandommap\ntime_based\nruntime=1000s\nnumber_ios=1000000\n",
        );
    }
    if want("b-tlc-randrw-70-30-gc") {
        let mut tlc = DeviceConfig::preset("nvme-tlc").expect("preset");
        // nvme-tlc's dies and timings on fewer of them (4 channels × 1 package × 2 dies × 2
        // planes × 150 blocks × 384 pages × 8 KiB = 7.5 GB raw), so that the random writes of
        // this run exhaust the free blocks after the first ~100 K and GC then runs throughout.
        // On so small a device the GC reserve and threshold take a large part of the 7 %
        // over-provisioning, so write amplification is high and the drive slow: that is the
        // model's answer, and it makes GC work a large share of the events simulated.
        tlc.flash.channels = 4;
        tlc.flash.packages_per_channel = 1;
        tlc.flash.blocks_per_plane = 150;
        tlc.cache.dram_bytes = 64 << 20;
        tlc.cache.write_buffer_bytes = 64 << 20;
        bench(
            "b-tlc-randrw-70-30-gc",
            tlc,
            "[b]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randrw\nrwmixread=70\niodepth=32\nnorandommap\ntime_based\nruntime=1000000s\nnumber_ios=1000000\n",
        );
    }
    if want("d-zssd-randread-qd32-split-ghost") {
        // (a) with the FlashShare cache switches on (`cache.partition = "dynamic"`,
        // `cache.prefetch = "ghost"`): what the split's bookkeeping and the sampled ghosts cost.
        let mut zssd = DeviceConfig::preset("zssd").expect("preset");
        zssd.cache.partition = device::config::Partition::Dynamic;
        zssd.cache.prefetch = device::config::Prefetch::Ghost;
        bench(
            "d-zssd-randread-qd32-split-ghost",
            zssd,
            "[d]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randread\niodepth=32\nnorandommap\ntime_based\nruntime=1000s\nnumber_ios=1000000\n",
        );
    }
    let zssd_job = |name: &str, rw: &str, ios: u64| {
        format!(
            "[{name}]\nioengine=libaio\ndirect=1\nbs=4k\nrw={rw}\nrwmixread=70\niodepth=32\nnorandommap\ntime_based\nruntime=1000000s\nnumber_ios={ios}\n"
        )
    };
    let zssd = || DeviceConfig::preset("zssd").expect("preset");
    if want("e-zssd-randrw-70-30-qd32") {
        bench(
            "e-zssd-randrw-70-30-qd32",
            zssd(),
            &zssd_job("e", "randrw", 1_000_000),
        );
    }
    if want("f-zssd-randwrite-100k") {
        bench(
            "f-zssd-randwrite-100k",
            zssd(),
            &zssd_job("f", "randwrite", 100_000),
        );
    }
    if want("c-zssd-precondition-random") {
        let mut zssd = DeviceConfig::preset("zssd").expect("preset");
        zssd.ftl.precondition = Precondition::Random;
        reset_peak_rss();
        let wall = Instant::now();
        let ssd = Ssd::with_seed(&zssd, DeviceOptions::default(), 1).expect("valid device");
        let secs = wall.elapsed().as_secs_f64();
        println!(
            "c-zssd-precondition-random: {:.0} GB preconditioned in {secs:.3} s wall; peak RSS {} MiB",
            ssd.capacity_bytes() as f64 / 1e9,
            peak_rss_mib()
        );
        drop(ssd);
        bench(
            "c-zssd-precondition-random-randread-qd32",
            zssd,
            "[c]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randread\niodepth=32\nnorandommap\ntime_based\nruntime=1000s\nnumber_ios=1000000\n",
        );
    }
}
