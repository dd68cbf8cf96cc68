//! Drives the SSD model directly with random commands (reads, writes, trims, flushes) at
//! random queue depths, and checks that every command completes exactly once, the mapping
//! stays consistent and reads return the last write's version.

use std::collections::HashMap;

use device::config::{DeviceConfig, Precondition};
use device::{Completion, DeviceOptions, Hint, NvmeCommand, SqPriority, Ssd, Status};
use engine::rng::{below, chance};
use engine::{stream, IoClass, IoOp, SimTime};
use proptest::prelude::*;

fn small_tlc(precondition: Precondition) -> DeviceConfig {
    let mut c = DeviceConfig::preset("nvme-tlc").unwrap();
    c.flash.channels = 2;
    c.flash.packages_per_channel = 1;
    c.flash.dies_per_package = 2;
    c.flash.blocks_per_plane = 64;
    c.flash.pages_per_block = 12;
    c.cache.dram_bytes = 4 << 20;
    c.cache.write_buffer_bytes = 2 << 20;
    c.ftl.precondition = precondition;
    c
}

/// Runs `n` random commands at queue depth `qd`; returns the device for inspection.
/// Panics (with the device's pending state) if the run does not finish within `max_steps`.
fn drive(config: &DeviceConfig, seed: u64, n: u64, qd: u32, write_pct: u64) -> Ssd {
    let mut ssd = Ssd::with_seed(config, DeviceOptions { integrity: true }, seed).unwrap();
    ssd.create_queue_pair(1, 1, qd + 1, SqPriority::Medium);
    let units = ssd.capacity_bytes() / 4096;
    let mut rng = stream(seed, "driver");
    let mut now = SimTime::ZERO;
    let mut issued = 0u64;
    // cid → (op, unit, write epoch of the unit when issued)
    let mut in_flight: HashMap<u32, (IoOp, u64, u64)> = HashMap::new();
    // Bumped for a unit each time a write or trim to it is issued.
    let mut epoch: HashMap<u64, u64> = HashMap::new();
    // Units whose final content is unknowable from outside: a write and a trim (or two
    // trims/writes racing with a trim) overlapped, and the device's order of applying them is
    // not the order of their completions. Cleared by the next non-overlapped write or trim.
    let mut ambiguous: HashMap<u64, bool> = HashMap::new();
    let mut completed: HashMap<u32, u32> = HashMap::new();
    let mut last_version: HashMap<u64, u32> = HashMap::new();
    let mut busy_units: HashMap<u64, u32> = HashMap::new();
    let mut version = 0u32;
    let mut cqes: Vec<Completion> = Vec::new();
    let mut steps = 0u64;
    loop {
        while issued < n && (in_flight.len() as u32) < qd {
            let unit = below(&mut rng, units);
            let op = if chance(&mut rng, write_pct, 100) {
                IoOp::Write
            } else if chance(&mut rng, 2, 100) {
                IoOp::Trim
            } else if chance(&mut rng, 1, 100) {
                IoOp::Flush
            } else {
                IoOp::Read
            };
            let busy_at_issue = busy_units.get(&unit).copied().unwrap_or(0);
            if matches!(op, IoOp::Write | IoOp::Trim) {
                let overlapped = busy_at_issue > 0;
                let a = ambiguous.entry(unit).or_insert(false);
                *a = if op == IoOp::Trim || overlapped {
                    overlapped || *a && busy_at_issue > 0
                } else {
                    false
                };
                *busy_units.entry(unit).or_insert(0) += 1;
                *epoch.entry(unit).or_insert(0) += 1;
            }
            // A read issued while a write or trim was in flight is not checked (u64::MAX).
            let issued_epoch = if busy_at_issue > 0 {
                u64::MAX
            } else {
                epoch.get(&unit).copied().unwrap_or(0)
            };
            version += 1;
            let cid = issued as u32;
            let cmd = NvmeCommand {
                cid,
                op,
                slba: unit * 8,
                sectors: if op == IoOp::Flush { 0 } else { 8 },
                class: IoClass::Throughput,
                hint: Hint::None,
                version,
            };
            ssd.submit(now, 1, cmd).unwrap();
            in_flight.insert(cid, (op, unit, issued_epoch));
            issued += 1;
        }
        let Some(t) = ssd.next_event_time() else {
            break;
        };
        now = t;
        ssd.advance_to(t, &mut cqes);
        for c in cqes.drain(..) {
            assert_eq!(c.status, Status::Success, "cid {}", c.cid);
            *completed.entry(c.cid).or_insert(0) += 1;
            let (op, unit, read_epoch) = in_flight
                .remove(&c.cid)
                .unwrap_or_else(|| panic!("cid {} completed twice or never issued", c.cid));
            if matches!(op, IoOp::Write | IoOp::Trim) {
                *busy_units.get_mut(&unit).unwrap() -= 1;
            }
            if op == IoOp::Write {
                let v = last_version.entry(unit).or_insert(0);
                *v = (*v).max(version_of_cid(c.cid));
            }
            if op == IoOp::Trim {
                last_version.insert(unit, 0);
            }
            // Check reads that no write or trim overlapped: none in flight at issue (busy count
            // was 0 then, so the epoch is unchanged and none is in flight now) and none issued
            // since (NVMe does not order a read against a later write).
            let quiet = busy_units.get(&unit).copied().unwrap_or(0) == 0
                && epoch.get(&unit).copied().unwrap_or(0) == read_epoch
                && !ambiguous.get(&unit).copied().unwrap_or(false);
            if op == IoOp::Read && quiet {
                let got = c.read_versions.as_ref().unwrap()[0];
                let want = last_version.get(&unit).copied().unwrap_or(0);
                assert_eq!(
                    got, want,
                    "seed {seed}: read of unit {unit} saw version {got}, last write {want}"
                );
            }
        }
        steps += 1;
        assert!(
            steps < 5_000_000,
            "seed {seed}: no end after {steps} steps at {now}: {}",
            ssd.pending_state()
        );
    }
    assert!(
        in_flight.is_empty(),
        "seed {seed}: {} commands never completed: {}",
        in_flight.len(),
        ssd.pending_state()
    );
    assert_eq!(completed.len() as u64, n);
    assert!(completed.values().all(|&k| k == 1));
    assert_eq!(ssd.in_flight(), 0);
    ssd.check_consistency()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    ssd
}

/// Versions are assigned as `cid + 1` by `drive` (one version per command issued).
fn version_of_cid(cid: u32) -> u32 {
    cid + 1
}

#[test]
fn sustained_writes_with_gc_complete_exactly_once() {
    let ssd = drive(&small_tlc(Precondition::Sequential), 1, 30_000, 16, 100);
    let s = ssd.stats();
    assert!(s.ftl.gc_runs > 0, "{:?}", s.ftl);
    assert!(s.write_amplification > 1.0);
}

/// From the random precondition's steady state (every LPN mapped, superblocks partly invalid,
/// free ones at the GC threshold), GC runs within the first superblock of writes and relocates
/// preconditioned data, where after a sequential precondition it has not started yet; either
/// way commands complete once, the mapping stays consistent and reads see the last writes.
#[test]
fn writes_over_a_random_precondition_gc_at_once_and_stay_consistent() {
    let first_writes = 120; // 30 units per LUN: within the first 48-unit superblock
    let random = drive(&small_tlc(Precondition::Random), 3, first_writes, 16, 100).stats();
    assert!(random.ftl.gc_runs > 0, "{:?}", random.ftl);
    assert!(
        random.ftl.gc_units_programmed > 0,
        "GC relocated no preconditioned data: {:?}",
        random.ftl
    );
    let sequential = drive(
        &small_tlc(Precondition::Sequential),
        3,
        first_writes,
        16,
        100,
    )
    .stats();
    assert_eq!(sequential.ftl.gc_runs, 0, "{:?}", sequential.ftl);
    let longer = drive(&small_tlc(Precondition::Random), 4, 6_000, 8, 100).stats();
    assert!(longer.write_amplification > 1.5, "{longer:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 18, ..ProptestConfig::default() })]
    #[test]
    fn random_commands_complete_exactly_once(seed in 0u64..10_000, qd in 1u32..24, write_pct in 0u64..100) {
        let pre = match seed % 3 {
            0 => Precondition::Sequential,
            1 => Precondition::None,
            _ => Precondition::Random,
        };
        let mut config = small_tlc(pre);
        // Every other case has factory bad blocks (retired superblocks, reduced capacity), with
        // each precondition.
        if seed % 2 == 0 {
            config.flash.bad_block_ppm = 20_000;
        }
        drive(&config, seed, 6_000, qd, write_pct);
    }
}

/// Regression: a TRIM that arrived while the unit's write-back program was in flight left the
/// cached line readable with the deallocated data (found by the property test's seed 5422,
/// QD1, 47 % writes: a read after the trim saw version 1124).
#[test]
fn a_trim_during_write_back_is_never_undone() {
    let mut config = small_tlc(Precondition::None);
    config.flash.bad_block_ppm = 20_000;
    drive(&config, 5422, 6_000, 1, 47);
}
