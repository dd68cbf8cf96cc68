//! Unit tests of the DRAM cache and its write-back rounds (`../cache.rs`).

use super::*;

fn cache(lines: u64, ways: u32, buffer_lines: u64) -> Cache {
    Cache::new(&CacheConfig {
        dram_bytes: lines * 4096,
        ways,
        write_buffer_bytes: buffer_lines * 4096,
        ..cache_config()
    })
}

#[test]
fn read_ahead_follows_a_stream_and_ignores_random_reads() {
    let mut ra = ReadAhead::new(&CacheConfig {
        readahead_units: 4,
        ..cache_config()
    });
    assert_eq!(
        ra.on_read(100, 1),
        0..0,
        "a first read starts a stream only"
    );
    assert_eq!(ra.on_read(101, 1), 102..106);
    assert_eq!(ra.on_read(102, 1), 106..107, "only the window's new unit");
    assert_eq!(
        ra.on_read(5000, 2),
        0..0,
        "a random read reads nothing ahead"
    );
    assert_eq!(
        ra.on_read(103, 1),
        107..108,
        "the stream survives an interleaved read"
    );
    let mut off = ReadAhead::new(&cache_config());
    off.on_read(100, 1);
    assert_eq!(off.on_read(101, 1), 0..0);
}

/// A small cache with every optional mechanism off (tests override what they exercise).
pub(crate) fn cache_config() -> CacheConfig {
    CacheConfig {
        dram_bytes: 64 * 4096,
        ways: 4,
        write_buffer_bytes: 16 * 4096,
        prefetch_pages: 0,
        readahead_units: 0,
        evict_batch_units: 0,
        dram_access_ns: 0,
        flush: crate::config::Flush::OnFull,
        drain: crate::config::Drain::Vanilla,
        drain_high_pct: 80,
        drain_low_pct: 20,
        drain_background: crate::config::DrainBackground::IdleDies,
        read_staging: crate::config::ReadStaging::Bypass,
        partition: Partition::Shared,
        epoch_ns: crate::config::DEFAULT_EPOCH_NS,
        partition_step_ways: 1,
        partition_min_ways: 1,
        prefetch: Prefetch::Fixed,
        ghost_pages: crate::config::DEFAULT_GHOST_PAGES.to_vec(),
        ghost_sample_period_sets: 1,
    }
}

#[test]
fn a_write_is_then_a_read_hit_with_its_version() {
    let mut c = cache(64, 4, 16);
    assert_eq!(c.read(7, IoClass::Throughput), ReadLookup::Miss);
    c.write(7, 3, IoClass::Throughput).unwrap();
    assert_eq!(
        c.read(7, IoClass::Throughput),
        ReadLookup::Hit { version: 3 }
    );
    assert_eq!(c.dirty_units(), 1);
}

/// Versions stay untouched (all 0) while only 0s would be stored: read misses, fills of
/// version 0 and replacements leave the array unwritten; the first version stored turns it on,
/// and a later replacement stores its 0 again. Dirtying stamps are stored only when a line
/// turns dirty: a read-only run leaves them all 0, and a fill into a way a dirty line held
/// keeps that line's stamp (read only while dirty).
#[test]
fn versions_and_stamps_are_stored_once_they_are_not_all_zero() {
    let mut c = cache(64, 4, 16);
    for lpn in 0..200 {
        assert_eq!(c.read(lpn, IoClass::Throughput), ReadLookup::Miss);
        assert!(c.start_fill(lpn, false, IoClass::Throughput));
        c.finish_fill(lpn, 0);
    }
    assert_eq!(c.stats.class(IoClass::Throughput).lines_evicted, 200 - 64);
    assert!(!c.versions_used);
    assert!(c.version.iter().chain(&c.dirtied).all(|&v| v == 0));
    c.write(7, 5, IoClass::Throughput).unwrap();
    assert!(c.versions_used);
    let way = c.find(7).expect("written");
    let stamp = c.dirtied[way];
    assert_eq!((c.version[way], stamp != 0), (5, true));
    assert_eq!(
        c.read(7, IoClass::Throughput),
        ReadLookup::Hit { version: 5 }
    );
    c.trim(7);
    assert_eq!(c.version[way], 0);
    assert!(!c.contains(7));
    // The trimmed way is its set's one invalid way: the fill takes it, and leaves the stamp.
    assert!(c.start_fill(7, false, IoClass::Throughput));
    assert_eq!(c.find(7), Some(way));
    assert_eq!((c.version[way], c.dirtied[way]), (0, stamp));
    c.check_consistency().unwrap();
    c.finish_fill(7, 0);
    c.write(7, 6, IoClass::Throughput).unwrap();
    assert!(c.dirtied[way] > stamp, "a new dirtying, a new stamp");
    c.check_consistency().unwrap();
}

/// While every line stored is one class's the owner array is not kept; the first line of
/// another class fills it, and each valid line's owner stays the class that last put data in
/// it, as the per-class line counts say.
#[test]
fn line_owners_survive_the_switch_to_the_owner_array() {
    let (tp, lc) = (IoClass::Throughput, IoClass::LatencyCritical);
    let mut c = cache(64, 4, 16);
    for lpn in 0..40 {
        assert_eq!(c.read(lpn, tp), ReadLookup::Miss);
        assert!(c.start_fill(lpn, false, tp));
        c.finish_fill(lpn, 0);
    }
    assert_eq!(c.owners, Owners::One(tp.index() as u8));
    assert!(c.owner.iter().all(|&o| o == 0), "the array is not kept");
    c.write(7, 1, lc).unwrap();
    c.write(41, 1, lc).unwrap();
    assert_eq!(c.owners, Owners::Array);
    let owned = |c: &Cache, class: IoClass| {
        (0..c.lines)
            .filter(|&i| c.has(i, VALID) && c.owner_of(i) == class.index() as u8)
            .count() as u64
    };
    assert_eq!((owned(&c, tp), owned(&c, lc)), (39, 2));
    assert_eq!(c.stats.class(tp).lines, 39);
    assert_eq!(c.stats.class(lc).lines, 2);
    c.check_consistency().unwrap();
}

/// Sets whose ways straddle the 16-way blocks of the line store (3 ways, 7 sets: 21 ways in
/// two blocks, the second partly unused) keep each line where it was put: every set filled,
/// its least recently used clean line replaced, and nothing of a neighbouring set disturbed.
#[test]
fn sets_straddling_blocks_keep_their_lines_apart() {
    let (ways, sets) = (3u32, 7u32);
    let mut c = cache(u64::from(ways * sets), ways, u64::from(ways * sets));
    let tp = IoClass::Throughput;
    for lpn in 0..ways * sets {
        assert!(c.start_fill(lpn, false, tp), "LPN {lpn} found no way");
        c.finish_fill(lpn, 0);
    }
    assert_eq!(c.blocks.len(), 2);
    c.check_consistency().unwrap();
    assert!((0..ways * sets).all(|lpn| c.contains(lpn)));
    // Set 5 (ways 15-17: the last of block 0, the first two of block 1) holds LPNs 5, 12 and
    // 19; a read refreshes LPN 12, and LPN 26 replaces the least recently used, LPN 5.
    assert!(matches!(c.read(12, tp), ReadLookup::Hit { .. }));
    assert!(c.start_fill(5 + 3 * sets, false, tp));
    assert!(!c.contains(5) && c.contains(12) && c.contains(19) && c.contains(26));
    assert!((0..ways * sets)
        .filter(|&l| l % sets != 5)
        .all(|lpn| c.contains(lpn)));
    c.check_consistency().unwrap();
}

/// A new cache's tags are zero bytes (the allocator's zeroed pages, no fill), every way reads
/// invalid, and the encoding's edges (LPN 0, the largest LPN below [`NO_LPN`]) are cached
/// and found apart from each other and from an invalid way.
#[test]
fn tags_start_zeroed_and_the_edge_lpns_are_found() {
    let mut c = cache(64, 4, 16);
    assert!(c
        .blocks
        .iter()
        .all(|(tags, _, _)| tags.iter().all(|&t| t == 0)));
    assert!((0..c.lines).all(|i| c.tag(i) == NO_LPN));
    c.check_consistency().unwrap();
    let top = NO_LPN - 1;
    c.write(0, 1, IoClass::Throughput).unwrap();
    c.write(top, 2, IoClass::Throughput).unwrap();
    assert_eq!(
        c.read(0, IoClass::Throughput),
        ReadLookup::Hit { version: 1 }
    );
    assert_eq!(
        c.read(top, IoClass::Throughput),
        ReadLookup::Hit { version: 2 }
    );
    assert_eq!(c.read(1, IoClass::Throughput), ReadLookup::Miss);
    c.check_consistency().unwrap();
    c.trim(0);
    assert_eq!(c.read(0, IoClass::Throughput), ReadLookup::Miss);
    c.check_consistency().unwrap();
}

/// The essay's worked example of per-class accounting.
#[test]
fn a_line_belongs_to_the_class_that_last_put_data_in_it() {
    let mut c = cache(64, 4, 16);
    assert!(c.start_fill(7, false, IoClass::Throughput));
    c.finish_fill(7, 0);
    assert_eq!(c.stats.throughput.lines, 1);
    c.write(7, 1, IoClass::LatencyCritical).unwrap();
    let (lc, tp) = (&c.stats.latency_critical, &c.stats.throughput);
    assert_eq!(
        (lc.lines, lc.dirty_units, tp.lines, tp.dirty_units),
        (1, 1, 0, 0)
    );
    c.check_consistency().unwrap();
    let mut out = Vec::new();
    c.take_oldest_dirty(1, &mut out);
    c.finish_eviction(7);
    let lc = &c.stats.latency_critical;
    assert_eq!((lc.units_written_back, lc.dirty_units, lc.lines), (1, 0, 1));
    assert_eq!(c.stats.units_evicted, 1);
    // Replacing it for a throughput fill is the latency-critical class's eviction.
    for lpn in [23, 39, 55, 71] {
        assert!(c.start_fill(lpn, true, IoClass::Throughput), "LPN {lpn}");
    }
    assert_eq!(c.stats.latency_critical.lines_evicted, 1);
    assert_eq!(c.stats.throughput.prefetch_fills, 4);
    c.trim(23);
    c.check_consistency().unwrap();
}

/// A line rewritten while its program runs stays in the dirty order, even when a round
/// looks for dirty data before the program ends (it cannot take the line then).
#[test]
fn a_line_rewritten_during_its_eviction_is_evicted_again() {
    for abort in [false, true] {
        let mut c = cache(64, 4, 16);
        c.write(7, 1, IoClass::Throughput).unwrap();
        let mut out = Vec::new();
        c.take_oldest_dirty(4, &mut out);
        assert_eq!(out, [(7, 1)]);
        c.write(7, 2, IoClass::Throughput).unwrap(); // rewritten while evicting
        out.clear();
        c.take_oldest_dirty(4, &mut out); // passes it over: it is still evicting
        assert!(out.is_empty());
        c.check_consistency().unwrap();
        if abort {
            c.abort_eviction(7);
        } else {
            c.finish_eviction(7);
        }
        assert_eq!(c.dirty_units(), 1);
        c.check_consistency().unwrap();
        c.take_oldest_dirty(4, &mut out);
        assert_eq!(
            out,
            [(7, 2)],
            "abort {abort}: the rewrite must be found again"
        );
    }
}

#[test]
fn a_full_buffer_blocks_new_writes_until_an_eviction_finishes() {
    let mut c = cache(64, 4, 2);
    c.write(1, 1, IoClass::Throughput).unwrap();
    c.write(2, 1, IoClass::Throughput).unwrap();
    assert_eq!(
        c.write(3, 1, IoClass::Throughput),
        Err(WriteBlock::BufferFull)
    );
    // Rewriting a buffered unit needs no new space.
    c.write(2, 2, IoClass::Throughput).unwrap();
    let mut out = Vec::new();
    c.take_oldest_dirty(1, &mut out);
    assert_eq!(out, vec![(1, 1)]);
    assert_eq!(
        c.write(3, 1, IoClass::Throughput),
        Err(WriteBlock::BufferFull),
        "evicting still occupies the buffer"
    );
    c.finish_eviction(1);
    c.write(3, 1, IoClass::Throughput).unwrap();
    c.check_consistency().unwrap();
}

#[test]
fn rewriting_an_evicting_line_keeps_it_dirty() {
    let mut c = cache(64, 4, 4);
    c.write(1, 1, IoClass::Throughput).unwrap();
    let mut out = Vec::new();
    c.take_oldest_dirty(4, &mut out);
    c.write(1, 2, IoClass::Throughput).unwrap();
    c.finish_eviction(1);
    assert_eq!(c.dirty_units(), 1);
    out.clear();
    c.take_oldest_dirty(4, &mut out);
    assert_eq!(out, vec![(1, 2)]);
    c.check_consistency().unwrap();
}

#[test]
fn lru_replaces_the_oldest_clean_line_of_a_set() {
    let mut c = cache(4, 2, 4); // 2 sets × 2 ways
    for lpn in [0, 2] {
        assert!(c.start_fill(lpn, false, IoClass::Throughput));
        c.finish_fill(lpn, 0);
    }
    c.read(0, IoClass::Throughput); // 2 is now LRU in set 0
    assert!(c.start_fill(4, false, IoClass::Throughput));
    assert!(c.contains(0) && !c.contains(2) && c.contains(4));
}

fn writeback(luns: u32, row_units: u32) -> WriteBack {
    WriteBack::new(&cache_config(), luns, row_units)
}

#[test]
fn a_round_takes_a_row_for_every_lun_without_one_in_flight() {
    let mut c = cache(64, 4, 64);
    for lpn in 0..40 {
        c.write(lpn, 1, IoClass::Throughput).unwrap();
    }
    let mut wb = writeback(4, 2);
    let round = wb.plan_round(&mut c, WriteBlock::BufferFull, 0);
    assert_eq!(round.len(), 8, "4 LUNs × 2 units");
    assert_eq!(round[0], (0, 1), "oldest first");
    let first = wb.start_row(&round[..2]);
    wb.start_row(&round[2..4]);
    wb.start_row(&round[4..6]);
    wb.end_round(round);
    assert_eq!(wb.rows_in_flight(), 3);
    // One LUN free: the next round is one row.
    let round = wb.plan_round(&mut c, WriteBlock::BufferFull, 0);
    assert_eq!(round.len(), 2);
    wb.end_round(round);
    wb.finish_row(&mut c, first);
    assert_eq!(wb.rows_in_flight(), 2);
    assert_eq!(
        c.dirty_units(),
        38,
        "the finished row's units left the buffer"
    );
    c.check_consistency().unwrap();
}

#[test]
fn with_rows_in_flight_a_round_keeps_whole_rows_only() {
    let mut c = cache(64, 4, 64);
    for lpn in 0..5 {
        c.write(lpn, 1, IoClass::Throughput).unwrap();
    }
    let mut wb = writeback(8, 2);
    wb.start_row(&[(100, 0)]); // a row in flight elsewhere
    let round = wb.plan_round(&mut c, WriteBlock::BufferFull, 0);
    assert_eq!(round.iter().map(|u| u.0).collect::<Vec<_>>(), [0, 1, 2, 3]);
    wb.end_round(round);
    // The leftover (LPN 4) is dirty again, first in line for the next round.
    let mut next = Vec::new();
    c.take_oldest_dirty(1, &mut next);
    assert_eq!(next, [(4, 1)]);
}

/// The idle flush takes whole rows of the oldest dirty data only: with less than a row
/// dirty and not evicting, nothing is taken and the lines stay dirty in their order.
#[test]
fn an_idle_row_is_whole_or_nothing() {
    let mut c = cache(64, 4, 64);
    for lpn in 0..6 {
        c.write(lpn, 1, IoClass::Throughput).unwrap();
    }
    let mut wb = writeback(4, 4);
    assert!(wb.idle_row_waiting(&c));
    let row = wb
        .take_idle_row(&mut c)
        .expect("6 dirty units hold a row of 4");
    assert_eq!(row.iter().map(|u| u.0).collect::<Vec<_>>(), [0, 1, 2, 3]);
    wb.start_row(&row);
    wb.end_round(row);
    assert!(
        !wb.idle_row_waiting(&c),
        "2 units wait beyond the row in flight"
    );
    assert!(wb.take_idle_row(&mut c).is_none());
    let mut next = Vec::new();
    c.take_oldest_dirty(2, &mut next);
    assert_eq!(next, [(4, 1), (5, 1)], "left dirty, oldest first");
    c.check_consistency().unwrap();
}

#[test]
fn a_set_full_round_starts_with_a_line_of_that_set_and_blocked_means_no_round() {
    let mut c = cache(4, 2, 4); // 2 sets × 2 ways
    c.write(1, 1, IoClass::Throughput).unwrap(); // set 1
    c.write(0, 1, IoClass::Throughput).unwrap(); // set 0
    c.write(2, 1, IoClass::Throughput).unwrap(); // set 0, now full
    let mut wb = writeback(1, 2);
    let round = wb.plan_round(&mut c, WriteBlock::SetFull, 4);
    assert_eq!(
        round,
        [(0, 1), (1, 1)],
        "set 0's LRU dirty line, then the oldest"
    );
    wb.block(&mut c, round.iter());
    wb.end_round(round);
    assert!(wb.is_blocked());
    assert!(wb.plan_round(&mut c, WriteBlock::BufferFull, 0).is_empty());
    assert!(wb.take_blocked());
    assert!(!wb.plan_round(&mut c, WriteBlock::BufferFull, 0).is_empty());
}

#[test]
fn a_set_of_dirty_lines_blocks_a_write_to_that_set() {
    let mut c = cache(4, 2, 4);
    c.write(0, 1, IoClass::Throughput).unwrap();
    c.write(2, 1, IoClass::Throughput).unwrap();
    assert_eq!(c.write(4, 1, IoClass::Throughput), Err(WriteBlock::SetFull));
    assert_eq!(c.take_dirty_in_set(4), Some((0, 1)));
}

proptest::proptest! {
    /// The whole-set comparisons of a 16-way set give what a way-by-way scan gives: the way
    /// holding a tag, and the victim (first invalid, else the first least recently used clean
    /// way), over flags of every kind and LRU stamps with ties.
    #[test]
    fn set_scans_agree(
        tags in proptest::collection::vec(0u32..40, 16),
        flags in proptest::collection::vec(proptest::prop_oneof![0u8..128, proptest::strategy::Just(VALID), proptest::strategy::Just(VALID | PREFETCHED)], 16),
        used in proptest::collection::vec(proptest::prop_oneof![0u32..6, proptest::strategy::Just(u32::MAX)], 16),
        lpn in 0u32..40,
    ) {
        let first = tags.iter().position(|&t| t == lpn);
        proptest::prop_assert_eq!(way_of(&tags, lpn), first);
        let all: u32 = tags.iter().enumerate().map(|(w, &t)| u32::from(t == lpn) << w).sum();
        let tags16: &[u32; 16] = tags.as_slice().try_into().unwrap();
        proptest::prop_assert_eq!(crate::sys::ways_matching(tags16, lpn), all);
        let flags16: &[u8; 16] = flags.as_slice().try_into().unwrap();
        let used16: &[u32; 16] = used.as_slice().try_into().unwrap();
        proptest::prop_assert_eq!(lru_victim(flags16, used16), lru_victim_scan(16, |w| flags[w], |w| used[w]));
    }
}

proptest::proptest! {
    /// A split 16-way set's victim found by whole-set masks is [`Split::victim`]'s, for every
    /// boundary, both classes, flags of every kind, owners of both classes and stamps with ties.
    #[test]
    fn split_victims_agree(
        lc_units in 0u32..=16,
        flags in proptest::collection::vec(proptest::prop_oneof![0u8..128, proptest::strategy::Just(VALID), proptest::strategy::Just(VALID | PREFETCHED)], 16),
        used in proptest::collection::vec(0u32..6, 16),
        owner in proptest::collection::vec(0u8..2, 16),
    ) {
        let config = CacheConfig {
            ways: 16,
            partition: Partition::Dynamic,
            partition_step_ways: 16,
            partition_min_ways: 1,
            ..cache_config()
        };
        let mut split = Split::new(&config);
        let mut stats = split.stats();
        split.count(IoClass::LatencyCritical, lc_units);
        split.count(IoClass::Throughput, 16 - lc_units);
        split.close_epoch(&mut stats);
        let f: &[u8; 16] = flags.as_slice().try_into().unwrap();
        let u: &[u32; 16] = used.as_slice().try_into().unwrap();
        let o: &[u8; 16] = owner.as_slice().try_into().unwrap();
        for class in IoClass::ALL {
            let scan = split.victim(
                class,
                |w| flags[w] & VALID == 0,
                |w| flags[w] & !PREFETCHED == VALID,
                |w| used[w],
                |w| owner[w],
            );
            proptest::prop_assert_eq!(split_victim_16(split.way_mask(class), class, f, u, o), scan);
        }
    }
}

/// [`SetOf`] is `%` at the edges: one set, the presets' set counts, powers of two and their
/// neighbours, the largest divisor; numerators at 0, around multiples of the divisor and at
/// the top of `u32`.
#[test]
fn set_of_is_the_remainder_at_the_edges() {
    let divisors = [
        1,
        2,
        3,
        7,
        8_192,
        24_576,
        65_535,
        65_536,
        65_537,
        u32::MAX - 1,
        u32::MAX,
    ];
    for d in divisors {
        let set_of = SetOf::new(NonZeroU32::new(d).unwrap());
        let near = |k: u32| [k.saturating_sub(1), k, k.saturating_add(1)];
        let lpns = [
            0,
            1,
            d,
            d.wrapping_mul(3),
            u32::MAX / 2,
            u32::MAX - 1,
            u32::MAX,
        ]
        .into_iter()
        .flat_map(near);
        for lpn in lpns {
            assert_eq!(set_of.of(lpn), lpn % d, "{lpn} % {d}");
        }
    }
}

proptest::proptest! {
    /// [`SetOf`] is `%` for any 32-bit LPN and set count.
    #[test]
    fn set_of_is_the_remainder(lpn in proptest::num::u32::ANY, sets in 1u32..) {
        let set_of = SetOf::new(NonZeroU32::new(sets).unwrap());
        proptest::prop_assert_eq!(set_of.of(lpn), lpn % sets);
    }
}
