//! Device-level trace replay (`DeviceRun::with_trace`): every record is issued once, open loop
//! keeps the trace's pace (scaled by the speed), closed loop runs at the device's speed, runs
//! are deterministic, and a bad line stops the run naming the file and line.

mod common;

use device::DeviceConfig;
use sim::{DeviceRun, RunSummary, Silent, TraceSpec};
use workload::trace::{BadLines, Pacing};

/// `n` MQSim records, one every `gap_ns`, 4 KiB each, 2 reads per write, spread over 64 GiB.
fn mqsim_trace(n: u64, gap_ns: u64) -> String {
    let mut s = String::new();
    for i in 0..n {
        let sector = (i * 7919 * 8) % (1 << 27);
        let read = u8::from(!i.is_multiple_of(3));
        s.push_str(&format!("{} 0 {sector} 8 {read}\n", i * gap_ns));
    }
    s
}

fn write(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ullstack-trace-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn replay(spec: &TraceSpec, integrity: bool) -> RunSummary {
    let cfg = common::run_config(
        DeviceConfig::preset("zssd").unwrap(),
        &common::job("unused", "rw=randread\nnumber_ios=1"),
        1,
        integrity,
    );
    DeviceRun::with_trace(&cfg, spec)
        .unwrap()
        .run(&mut Silent)
        .unwrap()
}

fn ios(s: &RunSummary) -> u64 {
    s.jobs.iter().map(|j| j.read.ios + j.write.ios).sum()
}

#[test]
fn open_loop_keeps_the_trace_pace_and_speed_scales_it() {
    // 2000 I/Os, one every 20 µs: 40 ms of trace, far below zssd's capacity.
    let path = write("paced.mqsim", &mqsim_trace(2000, 20_000));
    let at_1x = replay(&TraceSpec::new(&path), false);
    let spec_2x = TraceSpec {
        pacing: Pacing::open_loop(2.0).unwrap(),
        ..TraceSpec::new(&path)
    };
    let at_2x = replay(&spec_2x, false);
    for s in [&at_1x, &at_2x] {
        assert_eq!(ios(s), 2000);
        assert_eq!(s.jobs[0].read.ios, 1333);
        let t = s.sim.trace.as_ref().expect("trace info in the summary");
        assert_eq!(
            (t.format, t.counts.records, t.counts.replayed),
            ("mqsim", 2000, 2000)
        );
    }
    // The last I/O is issued at 39.98 ms (19.99 ms at 2x) and takes well under 1 ms.
    let end_1x = at_1x.sim.simulated_ns;
    let end_2x = at_2x.sim.simulated_ns;
    assert!((39_980_000..40_980_000).contains(&end_1x), "{end_1x}");
    assert!((19_990_000..20_990_000).contains(&end_2x), "{end_2x}");
}

#[test]
fn closed_loop_ignores_times_and_is_deterministic() {
    // Records 1 ms apart: 1000 of them would take 1 s open loop.
    let path = write("slow.mqsim", &mqsim_trace(1000, 1_000_000));
    let spec = TraceSpec {
        pacing: Pacing::closed_loop(32).unwrap(),
        ..TraceSpec::new(&path)
    };
    let a = replay(&spec, true);
    assert_eq!(ios(&a), 1000);
    assert!(
        a.sim.simulated_ns < 50_000_000,
        "closed loop at QD32 took {} ns: it waited for the trace's times",
        a.sim.simulated_ns
    );
    assert!(a.sim.integrity_reads_checked.unwrap() > 0);
    let b = replay(&spec, true);
    assert_eq!(
        common::without_wall_clock(&a.to_json()),
        common::without_wall_clock(&b.to_json())
    );
}

#[test]
fn window_device_and_folding_are_counted() {
    // MSR: device 1 at 3 GiB + 4 KiB steps, device 0 in between; 1 ms apart.
    let mut t = String::new();
    for i in 0..100u64 {
        let ticks = 128_166_372_003_061_629 + i * 10_000;
        t.push_str(&format!(
            "{ticks},hm,{},Read,{},4096,1\n",
            i % 2,
            (3 << 30) + (1u64 << 40) + i * 4096
        ));
    }
    let path = write("w.msr", &t);
    let spec = TraceSpec {
        device: Some(1),
        from_ns: 10_000_000,
        to_ns: Some(50_000_000),
        ..TraceSpec::new(&path)
    };
    let s = replay(&spec, false);
    let info = s.sim.trace.clone().unwrap();
    // Records at 0..99 ms; the window keeps 10..49 ms; device 1 is the odd ones: 20 I/Os.
    assert_eq!(info.counts.replayed, 20);
    assert_eq!(ios(&s), 20);
    assert_eq!(info.counts.before_window, 5);
    assert!(info.counts.stopped_at_window_end);
    assert_eq!(
        info.counts.folded, 20,
        "1 TiB + 3 GiB is past zssd's 800 GB"
    );
}

#[test]
fn a_bad_line_stops_the_run_with_file_and_line_unless_skipped() {
    let mut text = mqsim_trace(50, 10_000);
    text.push_str("500000 0 8 8 x\n");
    text.push_str(&mqsim_trace(5, 10_000));
    let path = write("bad.mqsim", &text);
    let cfg = common::run_config(
        DeviceConfig::preset("zssd").unwrap(),
        &common::job("unused", "rw=randread\nnumber_ios=1"),
        1,
        false,
    );
    let Err(e) = DeviceRun::with_trace(&cfg, &TraceSpec::new(&path))
        .unwrap()
        .run(&mut Silent)
    else {
        panic!("the bad line is an error");
    };
    let e = e.to_string();
    assert!(
        e.contains("bad.mqsim:51: type (1 = read, 0 = write) `x`"),
        "{e}"
    );
    let spec = TraceSpec {
        bad_lines: BadLines::Skip,
        ..TraceSpec::new(&path)
    };
    let s = replay(&spec, false);
    assert_eq!(ios(&s), 55);
    assert_eq!(s.sim.trace.unwrap().bad_lines_skipped, 1);
}
