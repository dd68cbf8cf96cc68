//! Unit tests of the device's state machine (`lib.rs`, `routing`, `read_path`, `write_path`).

use super::*;
use crate::flash::{FlashOp, OpKind, OpOrigin};

/// Flash work submitted outside an event handler would never be scheduled: the next look at
/// the event queue must stop the run instead.
#[test]
#[should_panic(expected = "flash events pending when asked for the next event")]
fn flash_work_outside_a_handler_is_caught() {
    let config = DeviceConfig::preset("nvme-tlc").unwrap();
    let mut ssd = Ssd::new(&config, DeviceOptions::default()).unwrap();
    let op = FlashOp {
        kind: OpKind::Erase,
        page: 0,
        units: 0,
        origin: OpOrigin::GcRead,
    };
    ssd.flash
        .submit(SimTime::ZERO, 0, op, &mut ssd.flash_events);
    ssd.next_event_time();
}

/// `advance_until_completion` runs what stepping `advance_to(next_event_time())` runs: the
/// same completions at the same times and the same events, each call stopping at the step
/// of its first completion; and nothing after its limit.
#[test]
fn advancing_until_a_completion_matches_stepping() {
    let config = DeviceConfig::preset("zssd").unwrap();
    let start = || {
        let mut ssd = Ssd::new(&config, DeviceOptions::default()).unwrap();
        ssd.create_queue_pair(1, 1, 64, SqPriority::Medium);
        for cid in 0..48u32 {
            let cmd = NvmeCommand {
                cid,
                op: if cid % 3 == 0 {
                    IoOp::Write
                } else {
                    IoOp::Read
                },
                slba: u64::from(cid % 7) * 8 * 977 + u64::from(cid % 2) * 8,
                sectors: 8 * (1 + cid % 2),
                class: IoClass::Throughput,
                hint: Hint::None,
                version: 0,
            };
            ssd.submit(SimTime(u64::from(cid / 16) * 700), 1, cmd)
                .unwrap();
        }
        ssd
    };
    let (mut stepped, mut batched) = (start(), start());
    let mut want = Vec::new();
    while let Some(t) = stepped.next_event_time() {
        stepped.advance_to(t, &mut want);
    }
    let limit = SimTime(5_000);
    let mut got = Vec::new();
    let first = batched.advance_until_completion(limit, &mut got);
    assert!(
        first.is_some_and(|t| t <= limit),
        "ran a step after its limit"
    );
    assert!(
        !got.is_empty() || batched.next_event_time().is_some_and(|t| t > limit),
        "stopped before its limit without a completion"
    );
    loop {
        let before = got.len();
        let Some(step) = batched.advance_until_completion(SimTime::MAX, &mut got) else {
            break;
        };
        match got[before..].last() {
            Some(c) => assert_eq!(c.at, step, "a call stops at its first completion's step"),
            None => assert!(batched.next_event_time().is_none(), "stopped early"),
        }
    }
    let key = |c: &Completion| (c.at, c.cid);
    assert_eq!(want.len(), 48);
    assert_eq!(
        got.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(batched.events_processed(), stepped.events_processed());
}

/// `flash`'s "Prefetch reads behind demand reads": a throughput read at 0 prefetches the
/// 64 units after it, one on each LUN, 8 transfers on each channel pair; a latency-
/// critical read of another unit comes 1 µs later. As demand reads (`prefetch = "fixed"`,
/// `prefetch_pages = 64`) the prefetches' transfers go first and the read waits for
/// them (measured: 32.7 µs against 9.1 µs alone); from the ghost prefetcher (one ghost,
/// of 64 pages: the same prefetch) they wait for it, and it waits only for what it cannot
/// pass: the prefetch sensing on its own die, whose sense and transfer (5.15 µs) it
/// follows, and a transfer under way (2 µs) (measured: 15.4 µs). (The latency-critical
/// read prefetches its own 64 units after it, in every case.)
#[test]
fn ghost_prefetch_reads_wait_for_a_demand_read() {
    let read = |cid: u32, lpn: u64, class: IoClass| NvmeCommand {
        cid,
        op: IoOp::Read,
        slba: lpn * 8,
        sectors: 8,
        class,
        hint: Hint::None,
        version: 0,
    };
    let lc_latency = |prefetch: config::Prefetch, with_tp: bool| {
        let mut config = DeviceConfig::preset("zssd").unwrap();
        config.cache.readahead_units = 0;
        config.cache.prefetch = prefetch;
        config.cache.prefetch_pages = 64;
        config.cache.ghost_pages = vec![64];
        let mut ssd = Ssd::new(&config, DeviceOptions::default()).unwrap();
        ssd.create_queue_pair(1, 1, 64, SqPriority::Medium);
        if with_tp {
            ssd.submit(SimTime::ZERO, 1, read(0, 1_000, IoClass::Throughput))
                .unwrap();
        }
        let at = SimTime(1_000);
        ssd.advance_to(at, &mut Vec::new());
        ssd.submit(at, 1, read(1, 5_000, IoClass::LatencyCritical))
            .unwrap();
        let mut done = Vec::new();
        while let Some(t) = ssd.next_event_time() {
            ssd.advance_to(t, &mut done);
        }
        let lc = done
            .iter()
            .find(|c| c.cid == 1)
            .expect("the read completed");
        (lc.at - at, ssd.flash.stats.units_read)
    };
    let (alone, _) = lc_latency(config::Prefetch::Fixed, false);
    let (fixed, fixed_units) = lc_latency(config::Prefetch::Fixed, true);
    let (ghost, ghost_units) = lc_latency(config::Prefetch::Ghost, true);
    assert_eq!(fixed_units, 130, "two reads and each one's 64 prefetches");
    assert_eq!(ghost_units, 130, "the same flash work");
    assert!(
        fixed > alone + 16_000,
        "as demand reads: {fixed} ns against {alone} alone"
    );
    assert!(
        ghost <= alone + 5_150 + 2_100,
        "behind it: {ghost} ns against {alone} alone"
    );
}

#[test]
#[should_panic(expected = "before the model's time")]
fn a_submit_in_the_past_stops_the_run() {
    let config = DeviceConfig::preset("nvme-tlc").unwrap();
    let mut ssd = Ssd::new(&config, DeviceOptions::default()).unwrap();
    ssd.create_queue_pair(1, 1, 8, SqPriority::Medium);
    ssd.advance_to(SimTime(1_000), &mut Vec::new());
    let flush = NvmeCommand {
        cid: 0,
        op: IoOp::Flush,
        slba: 0,
        sectors: 0,
        class: IoClass::Throughput,
        hint: Hint::None,
        version: 0,
    };
    let _ = ssd.submit(SimTime(999), 1, flush);
}

/// One idle-flush pass visits every LUN once, from the cursor: with four idle LUNs and
/// rows enough for all, all four get a row. (The cursor once moved inside the pass, so a
/// pass programmed LUNs 0, 2, 1 and skipped 3.)
#[test]
fn an_idle_flush_pass_programs_every_idle_lun_once() {
    let mut config = DeviceConfig::preset("nvme-tlc").unwrap();
    config.flash.channels = 4;
    config.flash.packages_per_channel = 1;
    config.flash.dies_per_package = 1;
    config.flash.blocks_per_plane = 64;
    config.cache.flush = config::Flush::OnFull;
    let mut ssd = Ssd::new(&config, DeviceOptions::default()).unwrap();
    assert_eq!(ssd.flash.geometry.luns, 4);
    ssd.create_queue_pair(1, 1, 64, SqPriority::Medium);
    // Enough distinct dirty data for many rows, none of it flushed (on-full, not full).
    let mut done = Vec::new();
    for cid in 0..48u32 {
        let cmd = NvmeCommand {
            cid,
            op: IoOp::Write,
            slba: u64::from(cid) * 256,
            sectors: 256,
            class: IoClass::Throughput,
            hint: Hint::None,
            version: 1,
        };
        ssd.submit(SimTime::ZERO, 1, cmd).unwrap();
    }
    while let Some(t) = ssd.next_event_time() {
        ssd.advance_to(t, &mut done);
    }
    assert_eq!(done.len(), 48, "{}", ssd.pending_state());
    assert!(
        (0..4).all(|l| ssd.flash.lun_is_idle(l)),
        "nothing programmed yet"
    );
    ssd.config.cache.flush = config::Flush::Idle;
    let now = SimTime(ssd.now.0 + 1);
    ssd.flush_idle(now);
    let busy: Vec<u32> = (0..4).filter(|&l| !ssd.flash.lun_is_idle(l)).collect();
    assert_eq!(busy, [0, 1, 2, 3], "LUNs given a row by one pass");
}

#[test]
fn after_each_event_no_flash_work_waits_in_the_buffer() {
    let config = DeviceConfig::preset("nvme-tlc").unwrap();
    let mut ssd = Ssd::new(&config, DeviceOptions::default()).unwrap();
    ssd.create_queue_pair(1, 1, 8, SqPriority::Medium);
    for cid in 0..4 {
        let cmd = NvmeCommand {
            cid,
            op: IoOp::Read,
            slba: u64::from(cid) * 8,
            sectors: 8,
            class: IoClass::Throughput,
            hint: Hint::None,
            version: 0,
        };
        ssd.submit(SimTime::ZERO, 1, cmd).unwrap();
    }
    let mut done = Vec::new();
    while let Some(t) = ssd.next_event_time() {
        ssd.advance_to(t, &mut done);
        assert!(ssd.flash_events.is_empty());
    }
    assert_eq!(done.len(), 4, "{}", ssd.pending_state());
}
