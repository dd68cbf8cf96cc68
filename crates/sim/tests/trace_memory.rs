//! The simulator's trace replays stream: a device-level replay (`DeviceRun::with_trace`) and a
//! system run's trace process (`trace = "file"`) of a long trace peak at the same live heap as
//! of a short one over the same addresses, within a budget far below what holding the long
//! trace's records would take.
//!
//! Both traces cycle over the same 4 096 blocks, so the models' own state (mappings, page
//! cache, histograms) is the same for both; only a replay that kept records would grow with
//! the length. The device-level traces only read: every write takes a fresh flash page, and
//! the device model's per-block state grows with the data written (2 MB more for 667 K 4 KiB
//! writes than for 6.7 K, measured when this test was written), which is the model's, not the
//! replay's. The heap is metered per thread (`testkit::heap`); both runs are single-threaded.
//! The measurement starts before the config is parsed, where a system config used to load its
//! trace (32 B per record).

use std::io::Write;

use device::DeviceConfig;
use sim::system::SystemConfig;
use sim::{DeviceRun, DeviceRunConfig, HostCosts, Silent, TraceSpec};
use testkit::heap::{peak_above, reset};
use workload::trace::Pacing;

#[global_allocator]
static A: testkit::heap::Counting = testkit::heap::Counting;

/// How much more the long trace may peak at than the short one.
const BUDGET_BYTES: usize = 1 << 20;
/// Distinct 4 KiB blocks both traces touch.
const BLOCKS: u64 = 4096;

fn dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ullstack-sim-trace-mem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An MQSim trace of `n` 4 KiB I/Os 1 µs apart cycling over [`BLOCKS`] blocks, with
/// `writes` 2 reads per write (else only reads), written straight to a file (nothing held).
fn mqsim_file(name: &str, n: u64, writes: bool) -> std::path::PathBuf {
    let path = dir().join(name);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..n {
        let sector = (i * 7919 % BLOCKS) * 8;
        let read = u8::from(!writes || !i.is_multiple_of(3));
        writeln!(f, "{} 0 {sector} 8 {read}", i * 1000).unwrap();
    }
    f.flush().unwrap();
    path
}

/// Peak live heap of a device-level closed-loop replay of `path`, and the I/Os it ran.
fn device_level(path: &std::path::Path) -> (usize, u64) {
    let cfg = DeviceRunConfig {
        seed: 1,
        device: DeviceConfig::preset("zssd").unwrap(),
        host: HostCosts::preset("x86-4").unwrap(),
        host_name: "x86-4".into(),
        jobs: workload::JobFile::parse_fio("[unused]\nrw=read\nsize=4k\n", "unused").unwrap(),
        job_source: "unused".into(),
        integrity: false,
    };
    let spec = TraceSpec {
        pacing: Pacing::closed_loop(32).unwrap(),
        ..TraceSpec::new(path)
    };
    let base = reset();
    let summary = DeviceRun::with_trace(&cfg, &spec)
        .unwrap()
        .run(&mut Silent)
        .unwrap();
    let peak = peak_above(base);
    (peak, summary.sim.ios)
}

/// Peak live heap of a system run whose one process replays `path` closed loop at QD 32,
/// config parse included, and the I/Os it ran.
fn system_run(path: &std::path::Path) -> (usize, u64) {
    let text = format!(
        "seed = 1\nduration_ms = 60000\n[host]\npreset = \"x86-4\"\n[[process]]\ntrace = \"{}\"\ntrace_qd = 32\n",
        path.display()
    );
    let base = reset();
    let cfg = SystemConfig::parse(&text, "mem.toml", &dir()).unwrap();
    let summary = sim::system::run(&cfg, &mut Silent).unwrap();
    let peak = peak_above(base);
    let job = &summary.run.jobs[0];
    (peak, job.read.ios + job.write.ios)
}

#[test]
fn a_device_level_replay_does_not_grow_with_the_trace() {
    let short = mqsim_file("short.mqsim", 20_000, false);
    let long = mqsim_file("long.mqsim", 2_000_000, false);
    let (short_peak, short_ios) = device_level(&short);
    let (long_peak, long_ios) = device_level(&long);
    assert_eq!((short_ios, long_ios), (20_000, 2_000_000));
    eprintln!("device level: peak live heap {short_peak} B for 20 K I/Os, {long_peak} B for 2 M");
    assert!(
        long_peak < short_peak + BUDGET_BYTES,
        "2 M records peaked at {long_peak} B, 20 K at {short_peak} B: the replay grows with the trace (holding the records would be {} B)",
        2_000_000 * 32
    );
}

#[test]
fn a_system_trace_process_does_not_grow_with_the_trace() {
    let short = mqsim_file("sys-short.mqsim", 20_000, true);
    let long = mqsim_file("sys-long.mqsim", 500_000, true);
    let (short_peak, short_ios) = system_run(&short);
    let (long_peak, long_ios) = system_run(&long);
    assert_eq!((short_ios, long_ios), (20_000, 500_000));
    eprintln!("system run: peak live heap {short_peak} B for 20 K I/Os, {long_peak} B for 500 K");
    assert!(
        long_peak < short_peak + BUDGET_BYTES,
        "500 K records peaked at {long_peak} B, 20 K at {short_peak} B: the trace process grows with the trace (holding the records takes {} B)",
        500_000 * 32
    );
}
