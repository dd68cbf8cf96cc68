//! The index of a fully associative DRAM cache (`cache.ways = 0`).
//!
//! ## What it models
//! SSD firmware does not place buffered data by address: its DRAM data buffer is one pool of
//! slots, any slot holds any logical page, a hash table finds a page's slot and one LRU list
//! chooses the slot to reuse. That is how the open Cosmos+ OpenSSD firmware manages its buffer
//! (`data_buffer.c`: `CheckDataBufHit` walks a hash chain, `AllocateDataBuf` takes the tail of
//! the one `dataBufLruList`), and how MQSim models an SSD's DRAM cache (`Data_Cache_Flash`: an
//! `unordered_map` of slots and one `lru_list`). A write then waits only when the buffer as a
//! whole is full, never because the few slots its address maps to are taken. SimpleSSD, the
//! simulator of the group that published FlashShare and FastDrain, offers both organisations
//! and reads `CacheWaySize = 0` as "fully associative"; `cache.ways = 0` means the same here.
//!
//! ## The model
//! A fully associative cache is the set-associative cache of `cache.rs` with a single set that
//! holds every line: LRU over the whole DRAM, the same flags, the same victim rule (the
//! lowest-numbered invalid way, else the least recently used line that is clean and not
//! filling). Scanning 131,072 ways (`nvme-tlc`'s 512 MiB) on every access would be the same
//! answer found slowly, so this index keeps what the scan would compute: the LPN → way map, the
//! invalid ways in order, and the replaceable ways ordered by their LRU stamp. `cache.rs`
//! reports every change of a way's tag, flags or stamp ([`FullIndex::update`]); the index is
//! checked against a scan of the lines by `Cache::check_consistency` and, in the tests, by
//! running the same operations on a one-set cache that scans.
//!
//! Worked example (4 lines, all invalid): a write of LPN 9 takes way 0 (the lowest invalid);
//! reads that fill LPN 5 and 7 take ways 1 and 2 with stamps 2 and 3, and become replaceable
//! when their fills arrive. LPN 9 is dirty, so it is not replaceable. A read hit on LPN 5 moves
//! it to stamp 4, so the next victim (way 3 while it is invalid, then) is way 2, LPN 7.
//!
//! ## What it leaves out
//! The time the firmware spends walking its hash chains (the cache's `dram_access_ns` covers
//! a lookup either way), and the class split and ghost caches, which divide the ways of every
//! set and so need a set-associative cache (`config.rs` refuses them with `ways = 0`).
//!
//! Config key: `cache.ways` (0 = fully associative).

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

/// Flag bits of a way, as `cache.rs` stores them (kept in step by its tests).
pub const VALID: u8 = 1;
/// Set on a line read ahead and not read since: it does not keep a line from being replaced.
pub const PREFETCHED: u8 = 16;

/// What the index needs of one way: its tag, flags and LRU stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WayKey {
    pub tag: u32,
    pub flags: u8,
    pub used: u32,
}

impl WayKey {
    fn invalid(self) -> bool {
        self.flags & VALID == 0
    }

    /// Clean, not filling, not in the write buffer: a victim candidate.
    fn replaceable(self) -> bool {
        self.flags & !PREFETCHED == VALID
    }
}

/// The tag map and victim order of a one-set cache of `lines` ways.
pub struct FullIndex {
    /// LPN → way, for every valid way.
    ways_by_lpn: FxHashMap<u32, u32>,
    /// Invalid ways (the victim is the lowest).
    invalid: BTreeSet<u32>,
    /// Replaceable ways by `(LRU stamp, way)` (the victim is the first).
    replaceable: BTreeSet<(u32, u32)>,
}

impl FullIndex {
    /// Every way invalid.
    pub fn new(lines: u32) -> FullIndex {
        let mut ways_by_lpn = FxHashMap::default();
        ways_by_lpn.reserve(lines as usize);
        FullIndex {
            ways_by_lpn,
            invalid: (0..lines).collect(),
            replaceable: BTreeSet::new(),
        }
    }

    /// The way holding `lpn`.
    #[inline]
    pub fn find(&self, lpn: u32) -> Option<usize> {
        self.ways_by_lpn.get(&lpn).map(|&w| w as usize)
    }

    /// The way a new line takes: the lowest invalid way, else the least recently used
    /// replaceable one (what a scan of the one set picks).
    #[inline]
    pub fn victim(&self) -> Option<usize> {
        self.invalid
            .first()
            .or_else(|| self.replaceable.first().map(|(_, w)| w))
            .map(|&w| w as usize)
    }

    /// Way `way` changed from `old` to `new`.
    #[inline]
    pub fn update(&mut self, way: usize, old: WayKey, new: WayKey) {
        if old == new {
            return;
        }
        let w = way as u32;
        if old.tag != new.tag {
            if !old.invalid() {
                let removed = self.ways_by_lpn.remove(&old.tag);
                assert_eq!(
                    removed,
                    Some(w),
                    "LPN {} was not indexed at way {w}",
                    old.tag
                );
            }
            if !new.invalid() {
                let before = self.ways_by_lpn.insert(new.tag, w);
                assert!(before.is_none(), "LPN {} cached in two ways", new.tag);
            }
        }
        if old.invalid() != new.invalid() {
            if old.invalid() {
                self.invalid.remove(&w);
            } else {
                self.invalid.insert(w);
            }
        }
        let (was, is) = (old.replaceable(), new.replaceable());
        if was && (!is || old.used != new.used) {
            self.replaceable.remove(&(old.used, w));
        }
        if is && (!was || old.used != new.used) {
            self.replaceable.insert((new.used, w));
        }
    }

    /// Checks the index against the ways (`keys[w]` is way `w`): O(lines), for tests and the
    /// end of a run.
    pub fn check(&self, keys: impl Iterator<Item = WayKey>) -> Result<(), String> {
        let (mut valid, mut invalid, mut replaceable) = (0usize, 0usize, 0usize);
        for (w, k) in keys.enumerate() {
            let w = w as u32;
            if k.invalid() {
                invalid += 1;
                if !self.invalid.contains(&w) {
                    return Err(format!("invalid way {w} missing from the index"));
                }
                continue;
            }
            valid += 1;
            if self.ways_by_lpn.get(&k.tag) != Some(&w) {
                return Err(format!("LPN {} at way {w} not indexed there", k.tag));
            }
            if k.replaceable() {
                replaceable += 1;
                if !self.replaceable.contains(&(k.used, w)) {
                    return Err(format!("replaceable way {w} missing from the LRU order"));
                }
            }
        }
        let counts = (
            self.ways_by_lpn.len(),
            self.invalid.len(),
            self.replaceable.len(),
        );
        if counts != (valid, invalid, replaceable) {
            return Err(format!(
                "index holds {counts:?} (valid, invalid, replaceable) ways, the lines \
                 {:?}",
                (valid, invalid, replaceable)
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tag: u32, flags: u8, used: u32) -> WayKey {
        WayKey { tag, flags, used }
    }

    const NONE: WayKey = WayKey {
        tag: u32::MAX,
        flags: 0,
        used: 0,
    };
    const DIRTY: u8 = 2;
    const FILLING: u8 = 8;

    /// The essay's worked example.
    #[test]
    fn the_victim_is_the_lowest_invalid_way_then_the_least_recently_used_clean_one() {
        let mut ix = FullIndex::new(4);
        assert_eq!(ix.victim(), Some(0));
        ix.update(0, NONE, key(9, VALID | DIRTY, 1));
        ix.update(1, NONE, key(5, VALID | FILLING, 2));
        ix.update(2, NONE, key(7, VALID | FILLING, 3));
        assert_eq!(ix.victim(), Some(3));
        ix.update(1, key(5, VALID | FILLING, 2), key(5, VALID, 2));
        ix.update(2, key(7, VALID | FILLING, 3), key(7, VALID | PREFETCHED, 3));
        ix.update(1, key(5, VALID, 2), key(5, VALID, 4));
        ix.update(3, NONE, key(11, VALID | DIRTY, 5));
        assert_eq!(
            ix.victim(),
            Some(2),
            "LPN 7 (stamp 3) before LPN 5 (stamp 4)"
        );
        assert_eq!(
            (ix.find(9), ix.find(5), ix.find(4)),
            (Some(0), Some(1), None)
        );
        ix.update(2, key(7, VALID | PREFETCHED, 3), NONE);
        assert_eq!((ix.victim(), ix.find(7)), (Some(2), None));
        let keys = [
            key(9, VALID | DIRTY, 1),
            key(5, VALID, 4),
            NONE,
            key(11, VALID | DIRTY, 5),
        ];
        ix.check(keys.into_iter()).unwrap();
        assert!(ix.check([NONE; 4].into_iter()).is_err());
    }

    use crate::cache::{tests::cache_config, Cache, ReadLookup};
    use crate::config::CacheConfig;
    use engine::IoClass;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Read(u32),
        Fill(u32),
        Write(u32),
        Evict(usize),
        FinishOrAbort(bool),
        Trim(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..200).prop_map(Op::Read),
            (0u32..200).prop_map(Op::Fill),
            (0u32..200).prop_map(Op::Write),
            (1usize..6).prop_map(Op::Evict),
            any::<bool>().prop_map(Op::FinishOrAbort),
            (0u32..200).prop_map(Op::Trim),
        ]
    }

    proptest! {
        /// `ways = 0` is the one-set cache that scans, found through the index: the same
        /// operations give the same answers, the same counters and the same lines.
        #[test]
        fn the_index_answers_as_a_scan_of_one_set_would(ops in prop::collection::vec(op(), 1..400)) {
            let config = |ways| CacheConfig {
                dram_bytes: 64 * 4096,
                ways,
                write_buffer_bytes: 40 * 4096,
                ..cache_config()
            };
            let (mut indexed, mut scanned) = (Cache::new(&config(0)), Cache::new(&config(64)));
            let tp = IoClass::Throughput;
            let mut evicting: Vec<u32> = Vec::new();
            for (k, op) in ops.into_iter().enumerate() {
                let version = k as u32 + 1;
                match op {
                    Op::Read(lpn) => prop_assert_eq!(indexed.read(lpn, tp), scanned.read(lpn, tp)),
                    Op::Fill(lpn) => {
                        let found = indexed.read(lpn, tp);
                        prop_assert_eq!(found, scanned.read(lpn, tp));
                        if found == ReadLookup::Miss {
                            let a = indexed.start_fill(lpn, k % 3 == 0, tp);
                            prop_assert_eq!(a, scanned.start_fill(lpn, k % 3 == 0, tp));
                            indexed.finish_fill(lpn, 0);
                            scanned.finish_fill(lpn, 0);
                        }
                    }
                    Op::Write(lpn) => prop_assert_eq!(
                        indexed.write(lpn, version, tp),
                        scanned.write(lpn, version, tp)
                    ),
                    Op::Evict(n) => {
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        indexed.take_oldest_dirty(n, &mut a);
                        scanned.take_oldest_dirty(n, &mut b);
                        prop_assert_eq!(&a, &b);
                        evicting.extend(a.iter().map(|u| u.0));
                    }
                    Op::FinishOrAbort(finish) => {
                        if let Some(lpn) = evicting.pop() {
                            if finish {
                                indexed.finish_eviction(lpn);
                                scanned.finish_eviction(lpn);
                            } else {
                                indexed.abort_eviction(lpn);
                                scanned.abort_eviction(lpn);
                            }
                        }
                    }
                    Op::Trim(lpn) => {
                        indexed.trim(lpn);
                        scanned.trim(lpn);
                    }
                }
                prop_assert_eq!(&indexed.stats, &scanned.stats);
                prop_assert_eq!(indexed.dirty_units(), scanned.dirty_units());
            }
            for lpn in 0..200 {
                prop_assert_eq!(indexed.contains(lpn), scanned.contains(lpn));
            }
            indexed.check_consistency().map_err(TestCaseError::fail)?;
            scanned.check_consistency().map_err(TestCaseError::fail)?;
        }
    }
}
