//! FastDrain end to end: the host's write-back waves, their hints and the device's buffer
//! status travel through the real SSD model (`device::Ssd`), observed at every step of the
//! lock-step loop (the loop of `sim::system::run`, with eyes on both sides).

use std::collections::HashMap;
use std::path::Path;

use device::{Completion, DeviceOptions, Hint, NvmeCommand, SqPriority, Ssd, Status};
use engine::{IoOp, SimTime};
use host::pagecache::DirtySet;
use host::{DeviceCqe, Host, HostCommand};
use sim::stack;
use sim::system::SystemConfig;

/// What a test sees at each step: the commands the host just issued, or what the device just
/// did — the commands it executed (`(time, sqid, cid)`, in order) and the completions it
/// posted — with both models as they are after the host took those completions.
enum Step<'a> {
    Issued(&'a [HostCommand]),
    Device {
        executed: &'a [(SimTime, u16, u32)],
        completions: &'a [Completion],
        ssd: &'a Ssd,
        host: &'a Host,
    },
}

/// Runs `cfg` as `sim::system::run` does (host and device in lock-step, commands and
/// completions adapted the same way), calling `watch` after each exchange; returns both
/// models at the end (the device's run drained).
fn run_watched(cfg: &SystemConfig, mut watch: impl FnMut(Step)) -> (Host, Ssd) {
    let mut ssd =
        Ssd::with_seed(&cfg.device, DeviceOptions { integrity: false }, cfg.seed).unwrap();
    let mut host = Host::new(
        &cfg.host,
        cfg.processes.clone(),
        cfg.seed,
        cfg.duration,
        ssd.capacity_bytes(),
    )
    .unwrap();
    assert!(!host.strict_priority(), "these stacks keep round robin");
    for qp in host.queue_pairs() {
        let priority = match qp.priority {
            host::SqPriority::Urgent => SqPriority::Urgent,
            host::SqPriority::Medium => SqPriority::Medium,
        };
        ssd.create_queue_pair(qp.sqid, qp.cqid, qp.depth, priority);
        if !qp.interrupts {
            ssd.set_interrupts(qp.cqid, false);
        }
    }
    ssd.enable_exec_log();
    let (mut cqes, mut cmds, mut executed) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        match (ssd.next_event_time(), host.next_event_time()) {
            (None, None) => break,
            (Some(d), h) if h.is_none_or(|h| d <= h) => {
                ssd.advance_to(d, &mut cqes);
                ssd.take_exec_log(&mut executed);
                for c in &cqes {
                    host.deliver(DeviceCqe {
                        at: c.at,
                        cqid: c.cqid,
                        cid: c.cid,
                        success: c.status == Status::Success,
                        interrupt: c.interrupt,
                        write_buffer_pct: c.write_buffer_pct,
                    });
                }
                watch(Step::Device {
                    executed: &executed,
                    completions: &cqes,
                    ssd: &ssd,
                    host: &host,
                });
                cqes.clear();
                executed.clear();
            }
            _ => {
                host.step();
                host.take_commands(&mut cmds);
                for c in &cmds {
                    let hint = match c.wave_pages {
                        0 => Hint::None,
                        pages => Hint::WritebackWave { pages },
                    };
                    let cmd = NvmeCommand {
                        cid: c.cid,
                        op: c.op,
                        slba: c.slba,
                        sectors: c.sectors,
                        class: c.class,
                        hint,
                        version: 0,
                    };
                    ssd.submit(c.at, c.sqid, cmd).unwrap();
                }
                watch(Step::Issued(&cmds));
                cmds.clear();
            }
        }
    }
    assert_eq!(ssd.in_flight(), 0);
    (host, ssd)
}

fn config(text: &str, stack_name: &str) -> SystemConfig {
    let s = stack::find(stack_name).unwrap();
    SystemConfig::parse_with_stack(text, "fastdrain.toml", Path::new("."), Some(s)).unwrap()
}

/// The FastDrain study's co-run (host `arm8-4g`, `nvme-tlc` flushed only when full), short, with
/// ungzip on eight threads so that 900 ms write back (its profile runs GNU gzip's one; at
/// 600 ms too few waves came once the co-runners' bios were cold through the shared L2).
const STUDY_CORUN: &str = "
seed = 2
duration_ms = 900
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

/// Every write-back wave's hinted command is the first command of that wave to reach the
/// device (the firmware executes it, and reads its hint, before any other of the wave's
/// commands), and the hints announce what the waves write. A wave's commands are the write
/// commands the host issues from its hinted command up to the next one (the study's
/// processes write through the page cache only, so every write is write-back).
#[test]
fn the_hinted_command_is_the_first_of_its_wave_to_reach_the_device() {
    let cfg = config(STUDY_CORUN, "fd-buf");
    // The wave of each write in flight, by `(sqid, cid)`: a cid is reused only after its
    // completion, so the latest issue is the one the device executes.
    let mut wave_of: HashMap<(u16, u32), u64> = HashMap::new();
    let mut hinted: HashMap<u64, (u16, u32)> = HashMap::new();
    let mut first_executed: HashMap<u64, (u16, u32)> = HashMap::new();
    let mut waves = 0u64; // 0: writes before the first hint
    let mut writes = 0u64;
    let (host, ssd) = run_watched(&cfg, |step| match step {
        Step::Issued(cmds) => {
            for c in cmds.iter().filter(|c| c.op == IoOp::Write) {
                if c.wave_pages > 0 {
                    waves += 1;
                    hinted.insert(waves, (c.sqid, c.cid));
                }
                wave_of.insert((c.sqid, c.cid), waves);
            }
        }
        Step::Device { executed, .. } => {
            for &(_, sqid, cid) in executed {
                if let Some(wave) = wave_of.remove(&(sqid, cid)) {
                    writes += 1;
                    first_executed.entry(wave).or_insert((sqid, cid));
                }
            }
        }
    });
    assert!(
        waves >= 10,
        "only {waves} waves: the co-run did not write back"
    );
    assert!(
        !first_executed.contains_key(&0),
        "a write reached the device before the first hint"
    );
    for wave in 1..=waves {
        assert_eq!(
            first_executed.get(&wave),
            hinted.get(&wave),
            "wave {wave}: the first of its commands to execute is not the hinted one"
        );
    }
    let report = host.finish().unwrap();
    let pc = &report.pagecache;
    let drain = ssd.drain_stats();
    assert_eq!((drain.hints, pc.writeback_waves), (waves, waves));
    assert!(writes > 2 * waves, "{writes} writes in {waves} waves");
    // What the device was told is what the host counted, and it is what the waves wrote:
    // each wave counts its pass (writes dirtied into a file after the pass reached it are
    // the only ones a hint misses).
    assert_eq!(drain.hinted_pages, pc.writeback_hinted_pages);
    let told = drain.hinted_pages as f64 / pc.writeback_wave_pages as f64;
    assert!(
        (0.95..=1.0).contains(&told),
        "hints announced {} of {} pages written back by the waves",
        drain.hinted_pages,
        pc.writeback_wave_pages
    );
}

/// The FastDrain study's `--quick` co-run with ungzip on eight threads (a parallel
/// decompressor's write-back: its profile runs GNU gzip's one), run for three seconds: the study's drive (128 LUNs)
/// with its 64 MiB quick buffer, so that the run holds several foreground episodes. While the firmware drains in
/// the foreground its completions report the buffer at `high` (`drain.rs`, "The buffer status
/// in completions"), so the host switches to the high set and back on the study's own drive;
/// before, completions reported only the units buffered, which foreground eviction keeps under
/// `high`, and this test needed a drive of 16 LUNs draining slower than ungzip writes back.
const STUDY_QUICK: &str = "
seed = 1
duration_ms = 3000
[host]
preset = \"arm8-4g\"
[device]
preset = \"nvme-tlc\"
[device.cache]
flush = \"on-full\"
write_buffer_bytes = 67108864
[device.ftl]
precondition = \"sequential\"
[[process]]
profile = \"apache-upload\"
[[process]]
profile = \"ungzip\"
threads = 8
";

/// Foreground eviction fires and each episode ends with the buffer under `low`; the dirty
/// thresholds switch to the high set only on a completion reporting the buffer at or above
/// `high`, and back only on one reporting it under `low`, both as the real SSD model posts
/// them.
#[test]
fn foreground_eviction_ends_under_low_and_the_thresholds_follow_the_buffer_status() {
    let cfg = config(STUDY_QUICK, "fd");
    let (high_pct, low_pct) = (80u8, 20u8);
    let mut was_foreground = false;
    let mut episodes_ended = 0;
    let mut set = DirtySet::Low;
    let (mut to_high, mut to_low) = (0u64, 0u64);
    let (host, ssd) = run_watched(&cfg, |step| {
        let Step::Device {
            completions,
            ssd,
            host,
            ..
        } = step
        else {
            return;
        };
        let foreground = ssd.drain_in_foreground();
        if was_foreground && !foreground {
            let (units, capacity) = ssd.write_buffer_units();
            assert!(
                units * 100 < capacity * low_pct as u64,
                "foreground eviction ended with {units} of {capacity} units buffered"
            );
            episodes_ended += 1;
        }
        was_foreground = foreground;
        let now = host.dirty_set().expect("fd adapts the dirty thresholds");
        if now != set {
            // The switch happened while these completions were delivered: one of them said so.
            let pcts: Vec<u8> = completions.iter().map(|c| c.write_buffer_pct).collect();
            match now {
                DirtySet::High => {
                    assert!(pcts.iter().any(|&p| p >= high_pct), "to high on {pcts:?}");
                    to_high += 1;
                }
                DirtySet::Low => {
                    assert!(pcts.iter().any(|&p| p < low_pct), "to low on {pcts:?}");
                    to_low += 1;
                }
            }
            set = now;
        }
    });
    let drain = ssd.drain_stats();
    assert!(
        drain.foreground_waves > 0 && drain.foreground_rows > 0,
        "{drain:?}"
    );
    assert!(episodes_ended >= 1, "no foreground episode ended");
    let report = host.finish().unwrap();
    let adaptive = report.pagecache.adaptive_dirty.expect("fd adapts");
    assert!(
        to_high >= 1 && to_low >= 1,
        "switches seen: {to_high} up, {to_low} down"
    );
    assert_eq!(
        (adaptive.switches_to_high, adaptive.switches_to_low),
        (to_high, to_low)
    );
}
