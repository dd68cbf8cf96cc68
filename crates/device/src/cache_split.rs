//! The DRAM cache split by class, with ways that follow demand (`cache.partition = "dynamic"`).
//!
//! ## What it models
//! FlashShare's device cache (device.md, "Split by class"): the firmware knows each command's
//! class (latency-critical or throughput, from the NVMe command's reserved field) and keeps the
//! two classes out of each other's way in its DRAM. A throughput job that streams through the
//! cache would otherwise evict a latency-critical service's hot lines in every set it touches.
//!
//! ## The model
//! The cache keeps its sets (`cache.rs`); what changes is who may *replace*
//! a line. The ways of every set are divided at one boundary, the same in every set: ways
//! `0 .. lc_ways` form the latency-critical partition, ways `lc_ways .. ways` the throughput
//! partition. It starts even (`ways / 2` each).
//! - **Lookups see the whole set.** A read hits wherever its LPN is cached: data is data, and a
//!   4 KiB line is in at most one way of its set.
//! - **Fills and new writes go into the class's own partition.** A read miss of class C takes a
//!   way from C's partition only: an invalid way first, then the least recently used clean line
//!   *of the other class* (data left behind by a reassignment, see below), then C's own least
//!   recently used clean line. Dirty, evicting and filling lines are never replaced (as in the
//!   shared cache). No replaceable way: the read is served uncached; a write waits (`SetFull`),
//!   and the eviction round it starts takes a dirty line from the writer's partition.
//! - **Epochs.** Every `cache.epoch_ns` (default 10 ms) the cache counts the 4 KiB units each
//!   class read or wrote. At the first command after the epoch's end the boundary moves toward
//!   the target `round(ways × lc_units / (lc_units + tp_units))`, by at most
//!   `partition_step_ways` ways, and never leaves a partition with fewer than
//!   `partition_min_ways`. An epoch without accesses moves nothing.
//! - **Read-only retention.** A way that changes owner keeps its line. The old owner's reads
//!   still hit it; it cannot write there (a write of that LPN by the old owner moves the line
//!   into its own partition when the line is clean); the new owner replaces it first when it
//!   needs the way. So a reassignment throws nothing away until the new owner actually uses
//!   the room. A dirty line in a reassigned way stays until write-back cleans it (it is still
//!   the buffer's to program), then it is retained like a clean one.
//! - **Writes across the boundary.** A write of class C to an LPN cached in the other class's
//!   partition: a clean line moves to C's partition (a new dirty line there, the old way freed);
//!   a dirty, evicting or filling line is written in place (moving it would put one LPN in two
//!   ways while its program or fill is in flight) and is then C's data in a foreign way, which
//!   that partition's owner replaces first once it is clean.
//!
//! Worked example (`zssd`: 16 ways, min 2, step 1). An apache-like service issues 1,000 units
//! per 10 ms epoch, a pagerank-like job 9,000. Target: round(16 × 1,000 / 10,000) = 2 ways.
//! Epoch by epoch the boundary moves 8 → 7 → 6 → … → 2 (six epochs, 60 ms) and stays there
//! while the mix lasts. When the service's share grows to 50 %, it walks back up one way per
//! epoch. After the first move, way 7 of every set belongs to the throughput class; the
//! service's line in way 7 of set 576 is still read from DRAM until pagerank's next miss in
//! set 576 takes that way.
//!
//! Where the defaults come from: the 10 ms epoch is device.md's. The step (1 way of 16, 6 % of
//! the cache per epoch) is the smallest move, so one bursty epoch cannot take the cache away;
//! the whole range (8 → 2) is still crossed in 60 ms, far shorter than the phases of the
//! co-runs studied. The minimum (2 of 16 ways, 1/8) keeps an idle class's hottest lines: with
//! one way a set holds one line of that class, and every miss would evict its last one.
//! The target follows access counts, as device.md says ("moves ways toward the busier class"):
//! it is demand, not benefit — a miss-rate-driven split (utility partitioning) would need a
//! ghost per candidate split, and was left out.
//!
//! ## What it leaves out
//! Per-set boundaries (every set splits at the same way); priorities between the classes
//! beyond their access counts; the cost of the firmware's bookkeeping (an epoch closes in
//! zero time).

use std::ops::Range;

use engine::IoClass;
use serde::{Deserialize, Serialize};

use crate::config::CacheConfig;

/// What the split did during a run (`cache.partition` in `summary.json` when it is on).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStats {
    /// Ways of every set in the latency-critical partition at the end (the rest are the
    /// throughput partition's).
    pub lc_ways: u32,
    pub tp_ways: u32,
    /// Fewest and most latency-critical ways during the run.
    pub lc_ways_min: u32,
    pub lc_ways_max: u32,
    /// Epochs closed that had accesses (the ones that could move the boundary).
    pub epochs: u64,
    /// Ways that changed owner, summed over reassignments.
    pub ways_moved: u64,
    /// Read hits of each class on its own line in a way the other class now owns (read-only
    /// retention at work).
    pub lc_retained_hits: u64,
    pub tp_retained_hits: u64,
}

/// The partition boundary and the epoch's access counts.
pub struct Split {
    ways: u32,
    lc_ways: u32,
    min_ways: u32,
    step_ways: u32,
    /// 4 KiB units each class accessed in the open epoch (`IoClass::index`).
    units: [u64; 2],
}

impl Split {
    pub fn new(config: &CacheConfig) -> Split {
        let ways = config.ways;
        assert!(
            config.partition_min_ways >= 1 && 2 * config.partition_min_ways <= ways,
            "a split of {ways} ways needs 1..={} minimum ways, got {}",
            ways / 2,
            config.partition_min_ways
        );
        Split {
            ways,
            lc_ways: ways / 2,
            min_ways: config.partition_min_ways,
            step_ways: config.partition_step_ways,
            units: [0; 2],
        }
    }

    pub fn stats(&self) -> PartitionStats {
        PartitionStats {
            lc_ways: self.lc_ways,
            tp_ways: self.ways - self.lc_ways,
            lc_ways_min: self.lc_ways,
            lc_ways_max: self.lc_ways,
            ..PartitionStats::default()
        }
    }

    /// Ways of `class`'s partition now.
    pub fn ways(&self, class: IoClass) -> u32 {
        match class {
            IoClass::LatencyCritical => self.lc_ways,
            IoClass::Throughput => self.ways - self.lc_ways,
        }
    }

    /// The way numbers (within a set) of `class`'s partition.
    #[inline]
    pub fn ways_of(&self, class: IoClass) -> Range<usize> {
        match class {
            IoClass::LatencyCritical => 0..self.lc_ways as usize,
            IoClass::Throughput => self.lc_ways as usize..self.ways as usize,
        }
    }

    /// Bit `w` set for each way `w` of `class`'s partition (for sets of up to 32 ways).
    #[inline]
    pub fn way_mask(&self, class: IoClass) -> u32 {
        let lc = (1u64 << self.lc_ways) as u32 - 1;
        match class {
            IoClass::LatencyCritical => lc,
            IoClass::Throughput => ((1u64 << self.ways) - 1) as u32 & !lc,
        }
    }

    /// Whether way `way` (within a set) is `class`'s.
    #[inline]
    pub fn owns(&self, way: usize, class: IoClass) -> bool {
        (way < self.lc_ways as usize) == (class == IoClass::LatencyCritical)
    }

    /// `units` 4 KiB units of a command of `class` reached the cache in the open epoch.
    pub fn count(&mut self, class: IoClass, units: u32) {
        self.units[class.index()] += u64::from(units);
    }

    /// Closes the epoch: moves the boundary (see the module essay) and records it in `stats`.
    pub fn close_epoch(&mut self, stats: &mut PartitionStats) {
        if self.units == [0, 0] {
            return;
        }
        let next = next_lc_ways(
            self.ways,
            self.lc_ways,
            self.min_ways,
            self.step_ways,
            self.units,
        );
        self.units = [0; 2];
        stats.epochs += 1;
        stats.ways_moved += u64::from(next.abs_diff(self.lc_ways));
        self.lc_ways = next;
        stats.lc_ways = next;
        stats.tp_ways = self.ways - next;
        stats.lc_ways_min = stats.lc_ways_min.min(next);
        stats.lc_ways_max = stats.lc_ways_max.max(next);
    }

    /// The way (within a set) a fill or new write of `class` may take: an invalid way of the
    /// partition, else the least recently used clean line of the other class there, else the
    /// class's own. `free(w)` and `clean(w)` say whether way `w` is invalid, or valid and
    /// replaceable (not dirty, evicting or filling); `used(w)` and `owner(w)` are its LRU
    /// stamp and line class. `None`: every way of the partition is dirty, evicting or
    /// filling.
    #[inline]
    pub fn victim(
        &self,
        class: IoClass,
        free: impl Fn(usize) -> bool,
        clean: impl Fn(usize) -> bool,
        used: impl Fn(usize) -> u32,
        owner: impl Fn(usize) -> u8,
    ) -> Option<usize> {
        let part = self.ways_of(class);
        if let Some(w) = part.clone().find(|&w| free(w)) {
            return Some(w);
        }
        let me = class.index() as u8;
        part.clone()
            .filter(|&w| clean(w) && owner(w) != me)
            .min_by_key(|&w| used(w))
            .or_else(|| part.filter(|&w| clean(w)).min_by_key(|&w| used(w)))
    }
}

/// The boundary after an epoch in which the classes accessed `units` (`IoClass::index`) 4 KiB
/// units: toward `round(ways × lc / (lc + tp))`, at most `step` ways from `lc_ways`, within
/// `min ..= ways − min`.
pub fn next_lc_ways(ways: u32, lc_ways: u32, min: u32, step: u32, units: [u64; 2]) -> u32 {
    let total = units[0] + units[1];
    if total == 0 {
        return lc_ways;
    }
    // Rounded to nearest in integers: (2 × ways × lc + total) / (2 × total).
    let target = ((2 * u128::from(ways) * u128::from(units[0]) + u128::from(total))
        / (2 * u128::from(total))) as u32;
    let target = target.clamp(min, ways - min);
    let next = if target > lc_ways {
        lc_ways + (target - lc_ways).min(step)
    } else {
        lc_ways - (lc_ways - target).min(step)
    };
    assert!(
        (min..=ways - min).contains(&next),
        "latency-critical ways {next} outside {min}..={}",
        ways - min
    );
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The essay's worked example: 1,000 vs 9,000 units walk the boundary from 8 to 2, one way
    /// per epoch, and no further; an even mix walks it back.
    #[test]
    fn the_boundary_walks_toward_the_busier_class_and_stops_at_the_minimum() {
        let mut lc = 8;
        let mut seen = vec![lc];
        for _ in 0..10 {
            lc = next_lc_ways(16, lc, 2, 1, [1_000, 9_000]);
            seen.push(lc);
        }
        assert_eq!(seen, [8, 7, 6, 5, 4, 3, 2, 2, 2, 2, 2]);
        for _ in 0..3 {
            lc = next_lc_ways(16, lc, 2, 1, [5_000, 5_000]);
        }
        assert_eq!(lc, 5, "an even mix walks back toward 8");
        assert_eq!(next_lc_ways(16, 8, 2, 3, [1, 0]), 11, "a bigger step");
        assert_eq!(
            next_lc_ways(16, 14, 2, 3, [1, 0]),
            14,
            "never above ways − min"
        );
        assert_eq!(next_lc_ways(16, 5, 2, 1, [0, 0]), 5, "no accesses, no move");
    }

    /// Flags as the cache keeps them: 1 = valid, 2 = dirty.
    fn victim(
        split: &Split,
        class: IoClass,
        flags: [u8; 4],
        used: [u32; 4],
        owner: [u8; 4],
    ) -> Option<usize> {
        split.victim(
            class,
            |w| flags[w] & 1 == 0,
            |w| flags[w] == 1,
            |w| used[w],
            |w| owner[w],
        )
    }

    #[test]
    fn a_victim_is_invalid_then_foreign_clean_then_own_clean_and_never_dirty() {
        let mut config = crate::cache::tests::cache_config();
        config.ways = 4;
        config.partition_min_ways = 1;
        let split = Split::new(&config); // LC: ways 0..2, TP: 2..4
        let (lc, tp) = (0, 1);
        let (v, d) = (1, 3);
        let l = IoClass::LatencyCritical;
        // Way 0 own clean (newer), way 1 foreign clean (older): foreign goes first.
        assert_eq!(
            victim(&split, l, [v; 4], [5, 1, 9, 9], [lc, tp, tp, tp]),
            Some(1)
        );
        // Foreign first even when it is the more recently used.
        assert_eq!(
            victim(&split, l, [v; 4], [1, 5, 9, 9], [lc, tp, tp, tp]),
            Some(1)
        );
        // An invalid way beats both; the other partition's ways are never taken.
        assert_eq!(
            victim(&split, l, [v, 0, 0, 0], [1, 5, 9, 9], [lc, tp, tp, tp]),
            Some(1)
        );
        assert_eq!(
            victim(&split, l, [d, d, v, 0], [1, 5, 9, 9], [lc, lc, tp, tp]),
            None,
            "the partition is all dirty"
        );
        assert_eq!(
            victim(
                &split,
                IoClass::Throughput,
                [d, d, v, v],
                [0, 0, 4, 3],
                [lc, lc, tp, tp]
            ),
            Some(3)
        );
    }

    use crate::cache::{Cache, ReadLookup, WriteBlock};

    const LC: IoClass = IoClass::LatencyCritical;
    const TP: IoClass = IoClass::Throughput;

    /// A split cache of `sets` sets × `ways` ways with 1 µs epochs.
    fn split_cache(sets: u64, ways: u32, min_ways: u32) -> Cache {
        Cache::new(&CacheConfig {
            dram_bytes: sets * ways as u64 * 4096,
            ways,
            write_buffer_bytes: sets * ways as u64 * 4096,
            partition: crate::config::Partition::Dynamic,
            epoch_ns: 1_000,
            partition_min_ways: min_ways,
            ..crate::cache::tests::cache_config()
        })
    }

    fn fill(c: &mut Cache, lpn: u32, class: IoClass) {
        assert_eq!(c.read(lpn, class), ReadLookup::Miss, "LPN {lpn}");
        assert!(c.start_fill(lpn, false, class), "LPN {lpn} found a way");
        c.finish_fill(lpn, 0);
    }

    /// The test: after way 2 of a 4-way set passes from the throughput class to the
    /// latency-critical one, the throughput line in it still serves throughput reads, until a
    /// latency-critical fill needs the way.
    #[test]
    fn read_only_retention_serves_the_old_owner_until_the_new_owner_fills_the_way() {
        let mut c = split_cache(16, 4, 1); // LC ways 0..2, TP ways 2..4; set = LPN mod 16
        fill(&mut c, 0, TP); // way 2
        fill(&mut c, 16, TP); // way 3
        assert_eq!(c.ways_by_class(), [2, 2]);
        c.note_command(0, false, 100, 100, LC);
        c.note_command(1_000, false, 200, 1, LC); // closes the epoch: all LC → one way more
        assert_eq!(c.ways_by_class(), [3, 1]);
        let retained = |c: &Cache| c.stats.partition.as_ref().unwrap().tp_retained_hits;
        assert!(matches!(c.read(0, TP), ReadLookup::Hit { .. }), "retained");
        assert_eq!(retained(&c), 1);
        fill(&mut c, 32, LC); // way 0 (invalid first)
        fill(&mut c, 48, LC); // way 1
        assert!(
            matches!(c.read(0, TP), ReadLookup::Hit { .. }),
            "still retained"
        );
        assert!(
            matches!(c.read(16, TP), ReadLookup::Hit { .. }),
            "TP's own way"
        );
        assert_eq!(retained(&c), 2, "only the hit in the reassigned way counts");
        fill(&mut c, 64, LC); // LC's partition is full: the foreign line in way 2 goes first
        assert_eq!(
            c.read(0, TP),
            ReadLookup::Miss,
            "the new owner took the way"
        );
        assert!(matches!(c.read(32, LC), ReadLookup::Hit { .. }));
        assert!(matches!(c.read(48, LC), ReadLookup::Hit { .. }));
        assert_eq!(c.stats.throughput.lines_evicted, 1);
        assert_eq!(
            (c.stats.latency_critical.lines, c.stats.throughput.lines),
            (3, 1)
        );
        c.check_consistency().unwrap();
    }

    /// Read-only: the old owner's write to a retained clean line moves the line into its own
    /// partition; a dirty line is written in place.
    #[test]
    fn the_old_owner_writes_into_its_own_partition() {
        let mut c = split_cache(16, 4, 1);
        fill(&mut c, 0, TP); // way 2
        c.write(16, 1, TP).unwrap(); // way 3, dirty
        c.note_command(0, false, 100, 100, LC);
        c.note_command(2_000, false, 200, 1, LC);
        assert_eq!(c.ways_by_class(), [3, 1]);
        // TP's partition is way 3 alone, dirty: the write of LPN 0 must wait for it.
        assert_eq!(c.write(0, 2, TP), Err(WriteBlock::SetFull));
        assert_eq!(c.take_dirty_in_set(0), Some((16, 1)), "from TP's partition");
        c.finish_eviction(16);
        c.write(0, 2, TP).unwrap();
        assert_eq!(
            c.read(16, TP),
            ReadLookup::Miss,
            "LPN 0 moved over LPN 16's way"
        );
        assert!(matches!(c.read(0, TP), ReadLookup::Hit { version: 2 }));
        assert_eq!(
            c.stats.partition.as_ref().unwrap().tp_retained_hits,
            0,
            "way 3 is TP's"
        );
        // A dirty line in the other partition is written in place (LC writes LPN 0).
        c.write(0, 3, LC).unwrap();
        assert_eq!(c.stats.latency_critical.dirty_units, 1);
        assert_eq!(
            c.stats.throughput.dirty_units, 0,
            "the line is LC's data now"
        );
        c.check_consistency().unwrap();
    }

    /// The test: the boundary moves toward the busier class, by the step, and never
    /// below the minimum, on the cache's own epoch clock (an idle stretch moves nothing).
    #[test]
    fn ways_move_toward_the_busier_class_and_never_below_the_minimum() {
        let mut c = split_cache(16, 16, 2);
        let mut lc_ways = Vec::new();
        let mut t = 0;
        for _ in 0..10 {
            c.note_command(t, false, 0, 100, LC);
            c.note_command(t, false, 1_000, 900, TP);
            t += 1_000;
            lc_ways.push(c.ways_by_class()[0]);
        }
        c.note_command(t, false, 1_000, 1, TP); // closes the last busy epoch
        lc_ways.push(c.ways_by_class()[0]);
        assert_eq!(lc_ways, [8, 7, 6, 5, 4, 3, 2, 2, 2, 2, 2]);
        t += 1_000_000; // a thousand idle epochs
        c.note_command(t, false, 1_000, 1, TP);
        assert_eq!(c.ways_by_class(), [2, 14], "idle epochs move nothing");
        for _ in 0..20 {
            t += 1_000;
            c.note_command(t, false, 0, 1_000, LC);
        }
        let p = c.stats.partition.clone().unwrap();
        assert_eq!((p.lc_ways, p.tp_ways), (14, 2), "all LC: up to ways − min");
        assert_eq!((p.lc_ways_min, p.lc_ways_max), (2, 14));
        assert_eq!(p.ways_moved, 6 + 12);
    }
}
