//! The forward map's storage: what the run wrote, and nothing else.
//!
//! An LPN the run never wrote has no entry: its PPN is computed from the precondition's layout
//! (or it is unmapped), so a drive starts with no per-LPN memory at all. An LPN the run wrote
//! (or GC moved, or a trim dropped) has an *override*. The LPNs are cut into regions of
//! [`REGION_LPNS`]; the index holds one slot per region, and a region is one of:
//! - **untouched**: no override; a lookup ends at the region's bit in a bitmap beside the index
//!   (set at its first override), which stays in the CPU's caches where the index is a memory
//!   miss on a large drive; the bitmap, 1/256 of the index, is left out of [`ForwardMap::bytes`].
//! - **sparse**: its own small open-addressing hash table, one allocation of 6-byte slots: the
//!   LPN's offset within the region (15 bits) with an occupied bit, and its PPN, packed. The
//!   region's number is the table's, so it is not stored.
//! - **leaves**: once its hash table, grown, would cost more: leaves of 64 LPNs, each a bitmap of
//!   the LPNs it holds and their PPNs packed in order (`ftl/map/leaves.rs`), 2 KiB of
//!   directory, 12 bytes a leaf holding any and 4 an override.
//! - **dense**: a table of the whole region, 4 bytes an LPN (the unwritten ones filled from the
//!   layout), once its leaves would cost as much.
//!
//! A sparse table is at most 7/8 full: it grows by a quarter, at least 4 slots, when an insert
//! would pass 7/8 (rehashing into a new allocation: growth costs the table's size, four moves
//! an insert amortised, and small tables grow by 4 slots so that a region's first dozen writes
//! cost four allocations, not ten). Large tables are between 7/10 and 7/8 full, about
//! 6 / 0.79 ≈ 7.6 bytes an override; a region of one or two overrides costs a table of 4
//! slots, 24 bytes. Probing is linear with Robin Hood order (an entry never sits farther from
//! its home slot than one it passed), so a lookup of an LPN that is not there stops at the
//! first slot whose entry is nearer its home than the search is: at 7/8 full an average search
//! is about 4.5 slots, hit or miss, within one or two CPU cache lines. The home slot is the
//! offset's Fibonacci hash scaled to the table's size (any size, not only powers of two).
//! Entries are never removed: a trim is an override to "unmapped".
//!
//! A full table grows unless its overrides, in leaves, would cost no more than the larger table
//! (`2,048 + 12 × leaves + 4 × overrides ≤ slots × 6`): LPNs written at random turn a region
//! to leaves at about 1,800 overrides (one LPN in 18), a run of consecutive LPNs at 581. A
//! region in leaves turns dense for good at the override that would make its leaves cost as
//! much as the dense table (128 KiB). So a region costs at most about what its dense table
//! does, and memory follows the distinct LPNs written: ~7.6 bytes each while sparse, falling
//! towards 4 + 12 / (overrides a leaf) in leaves (5.7 at 4,700 a region), 4 when dense, plus
//! the index (32 bytes a region). Leaf blocks come from a pool of 16 KiB chunks that keeps
//! the blocks leaves give up for other leaves and compacts itself when they pass an eighth of
//! its words in use; `bytes` counts the pool whole, free blocks included.
//!
//! Worked example (`zssd`, 800 GB: 195,035,136 LPNs in 5,952 regions, 190,464 bytes of index):
//! 100,000 random 4 KiB writes (`rw=randwrite`, QD32, `number_ios=100000`) put about 17
//! overrides in each region: the map holds 766,368 bytes of slots (7.7 bytes an override) and
//! the index, 0.96 MB in all, where the hash map it replaced (one `LPN → PPN` table for every
//! sparse region, at a load between 7/16 and 7/8, and 4 bytes of index per 1,024 LPNs) held
//! 1.97 MB. (The run's `mapping_table_bytes` adds the reverse maps of the superblocks written,
//! 4 bytes a unit written: `ftl/reverse.rs`.)
//!
//! The map is never iterated in hash order, so results do not depend on the hash; only speed
//! and memory do.

mod leaves;
use leaves::{maybe_compact, LeafRegions, Leaves, Pool, LEAF_LPNS};

use crate::sys::prefetch;

/// LPNs per region: an offset within a region fits in 15 bits, beside the occupied bit (a dense
/// region's table is 128 KiB of `u32`).
pub const REGION_LPNS: u64 = 1 << REGION_BITS;
const REGION_BITS: u32 = 15;
const OFFSET_MASK: u32 = (1 << REGION_BITS) - 1;

/// A sparse table's empty key; an occupied slot's key is `OCCUPIED | offset`.
const EMPTY: u16 = 0;
const OCCUPIED: u16 = 1 << 15;
/// Bytes a sparse slot costs (its key and its PPN, packed).
const SLOT_BYTES: usize = size_of::<Slot>();
/// Slots of a region's first table, and the least a table grows by: small tables grow by a
/// few slots at a time, since every growth is an allocation and a rehash.
const MIN_SLOTS: usize = 4;

/// Bytes of the index per region (whatever the region holds).
pub const INDEX_BYTES_PER_REGION: u64 = size_of::<Region>() as u64;

/// One slot of a sparse table: the key (`OCCUPIED | offset`, or [`EMPTY`]) and its PPN, packed
/// into 6 bytes (read by value only: a packed field has no reference).
#[derive(Clone, Copy, Default)]
#[repr(C, packed)]
struct Slot {
    key: u16,
    ppn: u32,
}

/// Bytes of a dense region's table.
const DENSE_BYTES: u64 = REGION_LPNS * size_of::<u32>() as u64;

/// One region of the map (see the module essay).
enum Region {
    Untouched,
    Sparse(Table),
    /// Its overrides in leaves of 64 LPNs (`ftl/map/leaves.rs`).
    Leaves(Leaves),
    /// The PPN of every LPN of the region.
    Dense(Box<[u32]>),
}

/// A sparse region's open-addressing table: linear probing in Robin Hood order.
struct Table {
    slots: Box<[Slot]>,
    /// Occupied slots.
    len: u32,
}

impl Table {
    fn with_slots(slots: usize) -> Table {
        Table {
            slots: vec![Slot::default(); slots].into_boxed_slice(),
            len: 0,
        }
    }

    /// Home slot of `key` (its Fibonacci hash scaled to the table's size).
    #[inline]
    fn home(&self, key: u16) -> usize {
        let h = u32::from(key).wrapping_mul(0x9E37_79B9);
        ((u64::from(h) * self.slots.len() as u64) >> 32) as usize
    }

    /// How far slot `i` is past `key`'s home slot, wrapping.
    #[inline]
    fn distance(&self, key: u16, i: usize) -> usize {
        let home = self.home(key);
        if i >= home {
            i - home
        } else {
            i + self.slots.len() - home
        }
    }

    /// The slot holding `key`, or where it would go and how far that is from its home: the
    /// first empty slot, or the first whose entry is nearer its home than `key` would be (Robin
    /// Hood order would have put `key` before it).
    #[inline]
    fn probe(&self, key: u16) -> Result<usize, (usize, usize)> {
        let n = self.slots.len();
        let mut i = self.home(key);
        let mut dist = 0;
        loop {
            let k = self.slots[i].key;
            if k == key {
                return Ok(i);
            }
            if k == EMPTY || self.distance(k, i) < dist {
                return Err((i, dist));
            }
            i += 1;
            if i == n {
                i = 0;
            }
            dist += 1;
        }
    }

    /// The slot holding `key`, if any.
    #[inline]
    fn find(&self, key: u16) -> Option<usize> {
        self.probe(key).ok()
    }

    /// Whether one more entry fits within the 7/8 load.
    fn has_room(&self) -> bool {
        (self.len as usize + 1) * 8 <= self.slots.len() * 7
    }

    /// Puts `key → ppn`, not in the table, at slot `i`, `dist` from its home (from
    /// [`probe`](Self::probe)), moving the entries after it on in Robin Hood order. The caller
    /// checked [`has_room`](Self::has_room).
    fn insert_at(&mut self, mut i: usize, mut dist: usize, key: u16, ppn: u32) {
        debug_assert!(self.has_room(), "insert into a full table");
        let n = self.slots.len();
        let mut carried = Slot { key, ppn };
        loop {
            let here = self.slots[i];
            if here.key == EMPTY {
                self.slots[i] = carried;
                self.len += 1;
                return;
            }
            let theirs = self.distance(here.key, i);
            if theirs < dist {
                // Robin Hood: the entry nearer its home gives up its slot and moves on.
                self.slots[i] = carried;
                carried = here;
                dist = theirs;
            }
            i += 1;
            if i == n {
                i = 0;
            }
            dist += 1;
        }
    }

    /// This table's entries in a table of `slots` slots.
    fn grown(&self, slots: usize) -> Table {
        let mut t = Table::with_slots(slots);
        for s in self.slots.iter().filter(|s| s.key != EMPTY) {
            let (key, ppn) = (s.key, s.ppn);
            t.insert_at(t.home(key), 0, key, ppn);
        }
        t
    }

    /// Leaves of 64 LPNs holding any of this table's entries or `offset`.
    fn leaves_with(&self, offset: u32) -> u32 {
        let mut used = [0u64; (REGION_LPNS / LEAF_LPNS as u64 / 64) as usize];
        let keys = self
            .slots
            .iter()
            .filter(|s| s.key != EMPTY)
            .map(|s| s.key & !OCCUPIED);
        for o in keys.map(u32::from).chain([offset]) {
            let leaf = o / LEAF_LPNS;
            used[(leaf / 64) as usize] |= 1 << (leaf % 64);
        }
        used.iter().map(|w| w.count_ones()).sum()
    }

    /// Slots of the table that follows one of `slots` when it is full: a quarter more, at
    /// least [`MIN_SLOTS`] more.
    fn next_slots(slots: usize) -> usize {
        slots + (slots / 4).max(MIN_SLOTS)
    }
}

/// The regions, lent to a compaction of the leaves' pool.
struct RegionsInLeaves<'a>(&'a mut [Region]);

impl LeafRegions for RegionsInLeaves<'_> {
    fn leaves_mut(&mut self, region: u32) -> Option<&mut Leaves> {
        match self.0.get_mut(region as usize) {
            Some(Region::Leaves(l)) => Some(l),
            _ => None,
        }
    }
}

/// The forward map's overrides (see the module essay). `Default` is the map over no LPNs.
#[derive(Default)]
pub struct ForwardMap {
    regions: Vec<Region>,
    /// Bit `r` set once region `r` has had an override (it is not untouched then): a lookup
    /// in an untouched region ends at this bit, 1/256 the index's bytes, which stays in the
    /// CPU's caches where the index (32 bytes a region) is a memory miss on a large drive.
    touched: Vec<u64>,
    /// Overrides held (dense regions count whole).
    overrides: u64,
    /// Slots of all sparse tables, regions in leaves, and regions dense.
    sparse_slots: u64,
    leaf_regions: u64,
    dense_regions: u64,
    /// The leaf regions' blocks.
    pool: Pool,
}

impl ForwardMap {
    /// An empty map over `lpns` LPNs: no overrides.
    pub fn new(lpns: u64) -> ForwardMap {
        let regions = lpns.div_ceil(REGION_LPNS) as usize;
        ForwardMap {
            regions: (0..regions).map(|_| Region::Untouched).collect(),
            touched: vec![0; regions.div_ceil(64)],
            ..ForwardMap::default()
        }
    }

    /// The override of `lpn`, if the run wrote one (`None`: the layout's PPN holds). Always
    /// inlined: on every read, and an untouched region's answer is a load and a compare.
    #[inline(always)]
    pub fn get(&self, lpn: u32) -> Option<u32> {
        if !self.touched(lpn) {
            return None;
        }
        let offset = lpn & OFFSET_MASK;
        match &self.regions[(lpn >> REGION_BITS) as usize] {
            Region::Untouched => None,
            Region::Sparse(t) => t.find(OCCUPIED | offset as u16).map(|i| t.slots[i].ppn),
            Region::Leaves(l) => l.get(&self.pool, offset),
            Region::Dense(table) => Some(table[offset as usize]),
        }
    }

    /// Whether `lpn`'s region has had an override (its bit in `touched`).
    #[inline(always)]
    fn touched(&self, lpn: u32) -> bool {
        let r = (lpn >> REGION_BITS) as usize;
        self.touched[r / 64] & (1 << (r % 64)) != 0
    }

    /// Starts loading the CPU cache line of `lpn`'s region in the index, if [`get`](Self::get)
    /// reads it (the region has had an override): the first of what `get` reads, and of what
    /// [`prefetch_table`](Self::prefetch_table) reads later. A speed hint with no effect on
    /// results.
    #[inline(always)]
    pub fn prefetch_index(&self, lpn: u32) {
        if self.touched(lpn) {
            prefetch(&self.regions[(lpn >> REGION_BITS) as usize]);
        }
    }

    /// Starts loading the cache line of a sparse or dense region's table where `get`'s search
    /// for `lpn` starts. It reads the region's index slot (so that is best loaded already,
    /// [`prefetch_index`](Self::prefetch_index)). A speed hint with no effect on results.
    #[inline(always)]
    pub fn prefetch_table(&self, lpn: u32) {
        if !self.touched(lpn) {
            return;
        }
        let offset = lpn & OFFSET_MASK;
        match &self.regions[(lpn >> REGION_BITS) as usize] {
            Region::Sparse(t) => prefetch(&t.slots[t.home(OCCUPIED | offset as u16)]),
            Region::Dense(table) => prefetch(&table[offset as usize]),
            Region::Untouched | Region::Leaves(_) => {}
        }
    }

    /// Sets `lpn`'s PPN and returns its override before (`None`: it had none, the layout's
    /// PPN held). `layout` gives the PPN of an LPN with no override (the precondition's, or
    /// unmapped): it fills a region's table when the region turns dense, and is asked only
    /// about LPNs with no override (`lpn` included: it is set).
    pub fn set(&mut self, lpn: u32, ppn: u32, layout: impl Fn(u64) -> u32) -> Option<u32> {
        let r = (lpn >> REGION_BITS) as usize;
        let offset = lpn & OFFSET_MASK;
        let key = OCCUPIED | offset as u16;
        self.touched[r / 64] |= 1 << (r % 64);
        let region = &mut self.regions[r];
        let slots = match region {
            Region::Dense(table) => {
                return Some(std::mem::replace(&mut table[offset as usize], ppn));
            }
            Region::Leaves(l) => {
                let leaves = l.leaves() + u32::from(!l.has_leaf(offset));
                let grown = Leaves::cost(REGION_LPNS as u32, l.len() + 1, leaves);
                if grown < DENSE_BYTES || l.get(&self.pool, offset).is_some() {
                    let old = l.set(&mut self.pool, r as u32, offset, ppn);
                    if old.is_none() {
                        self.overrides += 1;
                        maybe_compact(&mut self.pool, &mut RegionsInLeaves(&mut self.regions));
                    }
                    return old;
                }
                // One more override would cost as much as the region's table: it turns dense.
                let Region::Leaves(l) = std::mem::replace(region, Region::Untouched) else {
                    unreachable!("matched above");
                };
                let entries: Vec<(u32, u32)> = l.entries(&self.pool).collect();
                self.overrides += REGION_LPNS - u64::from(l.len());
                l.release(&mut self.pool);
                self.leaf_regions -= 1;
                self.make_dense(r, &entries, offset, ppn, layout);
                return None;
            }
            Region::Sparse(t) => match t.probe(key) {
                Ok(i) => {
                    let old = t.slots[i].ppn;
                    t.slots[i].ppn = ppn;
                    return Some(old);
                }
                Err((i, dist)) if t.has_room() => {
                    t.insert_at(i, dist, key, ppn);
                    self.overrides += 1;
                    return None;
                }
                Err(_) => t.slots.len(),
            },
            Region::Untouched => 0,
        };
        self.overrides += 1;
        let next = Table::next_slots(slots);
        let table_bytes = (next * SLOT_BYTES) as u64;
        if let Region::Sparse(t) = region {
            if Leaves::cost(REGION_LPNS as u32, t.len + 1, t.leaves_with(offset)) <= table_bytes {
                // Leaves cost less than the larger table: the region moves to leaves.
                let mut leaves = Leaves::new(REGION_LPNS as u32);
                for s in t.slots.iter().filter(|s| s.key != EMPTY) {
                    leaves.set(
                        &mut self.pool,
                        r as u32,
                        u32::from(s.key & !OCCUPIED),
                        s.ppn,
                    );
                }
                leaves.set(&mut self.pool, r as u32, offset, ppn);
                *region = Region::Leaves(leaves);
                self.sparse_slots -= slots as u64;
                self.leaf_regions += 1;
                maybe_compact(&mut self.pool, &mut RegionsInLeaves(&mut self.regions));
                return None;
            }
        }
        if table_bytes < DENSE_BYTES {
            let mut grown = match region {
                Region::Sparse(t) => t.grown(next),
                _ => Table::with_slots(next),
            };
            let home = grown.home(key);
            grown.insert_at(home, 0, key, ppn);
            *region = Region::Sparse(grown);
            self.sparse_slots += (next - slots) as u64;
            return None;
        }
        // The table would cost as much as the region's: the region turns dense, for good.
        let Region::Sparse(t) = std::mem::replace(region, Region::Untouched) else {
            unreachable!("a region's first table is smaller than its dense one");
        };
        let entries: Vec<(u32, u32)> = t
            .slots
            .iter()
            .filter(|s| s.key != EMPTY)
            .map(|s| (u32::from(s.key & !OCCUPIED), s.ppn))
            .collect();
        self.overrides += REGION_LPNS - u64::from(t.len) - 1;
        self.sparse_slots -= slots as u64;
        self.make_dense(r, &entries, offset, ppn, layout);
        None
    }

    /// Region `r` turns dense: a table of its `entries` (`(offset, PPN)`) and `offset → ppn`,
    /// the other LPNs filled from `layout`. The layout is asked only about the LPNs with no
    /// override (it need not know the others' old places: a relocation record only knows the
    /// units it moved).
    fn make_dense(
        &mut self,
        r: usize,
        entries: &[(u32, u32)],
        offset: u32,
        ppn: u32,
        layout: impl Fn(u64) -> u32,
    ) {
        let base = r as u64 * REGION_LPNS;
        let mut written = vec![false; REGION_LPNS as usize];
        let mut table = vec![0u32; REGION_LPNS as usize].into_boxed_slice();
        for &(o, p) in entries.iter().chain([(offset, ppn)].iter()) {
            table[o as usize] = p;
            written[o as usize] = true;
        }
        for (o, e) in table.iter_mut().enumerate().filter(|(o, _)| !written[*o]) {
            *e = layout(base + o as u64);
        }
        self.dense_regions += 1;
        self.regions[r] = Region::Dense(table);
    }

    /// LPNs with an override (dense regions count whole).
    pub fn overrides(&self) -> u64 {
        self.overrides
    }

    /// Bytes the map holds: the index, the sparse tables' slots and the dense tables (not the
    /// allocator's own bookkeeping, one allocation per region written).
    pub fn bytes(&self) -> u64 {
        let index = self.regions.len() as u64 * INDEX_BYTES_PER_REGION;
        let leaf_dir = Leaves::new(REGION_LPNS as u32).dir_bytes();
        index
            + self.sparse_slots * SLOT_BYTES as u64
            + self.leaf_regions * leaf_dir
            + self.pool.bytes()
            + self.dense_regions * DENSE_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const UNMAPPED: u32 = u32::MAX;

    fn layout(l: u64) -> u32 {
        if l < 50_000 {
            l as u32 + 7
        } else {
            UNMAPPED
        }
    }

    /// Internal invariants: counters agree with the regions, every table within its load and
    /// every entry found from its home.
    fn check(m: &ForwardMap) -> Result<(), String> {
        let (mut slots, mut dense, mut overrides) = (0u64, 0u64, 0u64);
        let (mut leaf_regions, mut leaf_words) = (0u64, 0u64);
        for (r, region) in m.regions.iter().enumerate() {
            match region {
                Region::Untouched => {}
                Region::Leaves(l) => {
                    let n = l.entries(&m.pool).count() as u64;
                    let cost = Leaves::cost(REGION_LPNS as u32, l.len(), l.leaves());
                    if n != u64::from(l.len()) || n == 0 || cost >= DENSE_BYTES {
                        return Err(format!("region {r}: {n} entries, len {}", l.len()));
                    }
                    leaf_regions += 1;
                    leaf_words += (cost - l.dir_bytes()) / 4;
                    overrides += n;
                }
                Region::Dense(t) => {
                    dense += 1;
                    overrides += REGION_LPNS;
                    assert_eq!(t.len() as u64, REGION_LPNS);
                }
                Region::Sparse(t) => {
                    let n = t.slots.len();
                    let used = t.slots.iter().filter(|s| s.key != EMPTY).count();
                    if used != t.len as usize || used * 8 > n * 7 || used == 0 {
                        return Err(format!("region {r}: {used} of {n} slots, len {}", t.len));
                    }
                    for (i, s) in t.slots.iter().enumerate() {
                        let k = s.key;
                        if k != EMPTY && t.find(k) != Some(i) {
                            return Err(format!("region {r}: key {k:#x} in slot {i} not found"));
                        }
                    }
                    slots += n as u64;
                    overrides += used as u64;
                }
            }
        }
        if (leaf_regions, leaf_words) != (m.leaf_regions, m.pool.used_words()) {
            return Err(format!(
                "counted {leaf_regions} leaf regions of {leaf_words} words; the map: {}, {}",
                m.leaf_regions,
                m.pool.used_words()
            ));
        }
        if (slots, dense, overrides) != (m.sparse_slots, m.dense_regions, m.overrides) {
            return Err(format!(
                "counted {slots} slots, {dense} dense, {overrides} overrides; the map: {}, {}, {}",
                m.sparse_slots, m.dense_regions, m.overrides
            ));
        }
        Ok(())
    }

    /// Distinct LPNs below which a region cannot be dense (its leaves, all 512 holding some,
    /// cost less than its table) and at which it must be (one leaf holding some costs as
    /// much).
    fn dense_bounds() -> (usize, usize) {
        let lpns = REGION_LPNS as u32;
        let leaves = lpns / LEAF_LPNS;
        let below = (0..).find(|&n| Leaves::cost(lpns, n, leaves) >= DENSE_BYTES);
        let at = (0..).find(|&n| Leaves::cost(lpns, n, 1) >= DENSE_BYTES);
        (below.unwrap() as usize, at.unwrap() as usize)
    }

    #[test]
    fn a_region_is_thirty_two_bytes_of_index() {
        assert_eq!(INDEX_BYTES_PER_REGION, 32);
    }

    #[test]
    fn unwritten_lpns_have_no_override_and_cost_only_the_index() {
        let m = ForwardMap::new(3 * REGION_LPNS + 5);
        assert_eq!(m.get(0), None);
        assert_eq!(m.get((3 * REGION_LPNS + 4) as u32), None);
        assert_eq!(m.overrides(), 0);
        assert_eq!(m.bytes(), 4 * INDEX_BYTES_PER_REGION);
    }

    #[test]
    fn a_region_moves_from_a_table_to_leaves_to_dense_as_each_costs_less_and_keeps_every_value() {
        let mut m = ForwardMap::new(3 * REGION_LPNS);
        let base = REGION_LPNS as u32;
        // All LPNs of region 1 but one in 64, so the dense table must fill the gaps from the
        // layout.
        let at = |k: u32| base + k + k / 63;
        let form = |m: &ForwardMap| match &m.regions[1] {
            Region::Untouched => 0,
            Region::Sparse(_) => 1,
            Region::Leaves(_) => 2,
            Region::Dense(_) => 3,
        };
        let (mut k, mut stage) = (0u32, 0);
        let mut switched = [0u32; 4];
        while form(&m) != 3 {
            m.set(at(k), 900_000 + k, layout);
            assert_eq!(m.get(at(k)), Some(900_000 + k));
            k += 1;
            let now = form(&m);
            assert!(now >= stage, "form {now} after {stage} at {k} overrides");
            if now > stage {
                switched[now] = k;
                stage = now;
            }
            match &m.regions[1] {
                Region::Sparse(t) => assert!(((t.slots.len() * SLOT_BYTES) as u64) < DENSE_BYTES),
                Region::Leaves(l) => {
                    assert!(Leaves::cost(REGION_LPNS as u32, l.len(), l.leaves()) < DENSE_BYTES)
                }
                _ => {}
            }
        }
        // Leaves at the first growth of the table where they cost no more than the larger
        // table would (581 overrides here, 63 a leaf; about 1,800 spread at random).
        let leaves_at = switched[2];
        let leaf_cost = |n: u32| Leaves::cost(base, n, n.div_ceil(63));
        let table_cost = |slots: usize| (Table::next_slots(slots) * SLOT_BYTES) as u64;
        let (mut slots, mut prev) = (0, 0);
        while slots * 7 / 8 < leaves_at as usize - 1 {
            (prev, slots) = (slots, Table::next_slots(slots));
        }
        assert_eq!(
            (leaves_at - 1) as usize,
            slots * 7 / 8,
            "leaves when the table of {slots} slots is full"
        );
        assert!(leaf_cost(leaves_at) <= table_cost(slots));
        let before = (prev * 7 / 8 + 1) as u32;
        assert!(
            leaf_cost(before) > table_cost(prev),
            "leaves were cheaper at {before}"
        );
        assert_eq!(leaves_at, 581);
        // Dense at the first override that would make the leaves cost as much as the table.
        let dense_at = switched[3];
        let cost = |n: u32| Leaves::cost(base, n, (at(n - 1) - base) / 64 + 1);
        assert!(cost(dense_at) >= DENSE_BYTES && cost(dense_at - 1) < DENSE_BYTES);
        let (below, must) = dense_bounds();
        assert!((below..=must).contains(&(dense_at as usize)), "{dense_at}");
        assert_eq!(m.overrides(), REGION_LPNS);
        assert_eq!(m.sparse_slots, 0);
        assert_eq!(m.pool.used_words(), 0, "the leaves went back to the pool");
        assert_eq!(
            m.bytes(),
            3 * INDEX_BYTES_PER_REGION + DENSE_BYTES + m.pool.bytes(),
            "the dense table, the index and the pool's free chunks, nothing else"
        );
        for j in 0..k {
            assert_eq!(m.get(at(j)), Some(900_000 + j));
        }
        for gap in (base + 63..at(k)).step_by(64) {
            assert_eq!(m.get(gap), Some(layout(gap as u64)), "LPN {gap}");
        }
        // Other regions are untouched; rewrites of the dense region land in its table.
        assert_eq!(m.get(0), None);
        assert_eq!(m.get(2 * base), None);
        m.set(2 * base - 1, 5, layout);
        assert_eq!(m.get(2 * base - 1), Some(5));
        assert_eq!(m.dense_regions, 1);
        check(&m).unwrap();
    }

    #[test]
    fn rewriting_an_override_does_not_count_twice() {
        let mut m = ForwardMap::new(2048);
        for round in 0..1000 {
            m.set(3, round, layout);
        }
        assert_eq!(m.get(3), Some(999));
        assert_eq!(m.overrides(), 1, "one LPN, one override");
        check(&m).unwrap();
    }

    /// The figure the map exists for: random LPNs over a large space cost about 8 bytes each
    /// beyond the index (the hash map before it took 10 to 21).
    #[test]
    fn random_overrides_cost_about_eight_bytes_each() {
        let regions = 6_000u64;
        let mut m = ForwardMap::new(regions * REGION_LPNS);
        let mut rng = engine::stream(3, "map-bytes");
        let mut written = std::collections::HashSet::new();
        for n in [10_000u32, 100_000, 1_000_000] {
            while written.len() < n as usize {
                let lpn = engine::rng::below(&mut rng, regions * REGION_LPNS) as u32;
                m.set(lpn, lpn / 3, layout);
                written.insert(lpn);
            }
            let per = (m.bytes() - regions * INDEX_BYTES_PER_REGION) as f64 / n as f64;
            // 10,000 over 6,000 regions are one or two a region, in first tables of 4 slots.
            let most = if n == 10_000 { 13.5 } else { 8.5 };
            println!("{n} overrides: {per:.2} bytes each");
            assert!(
                (6.0..=most).contains(&per),
                "{n} overrides: {per:.2} bytes each"
            );
        }
        check(&m).unwrap();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Set(u32, u32),
        Trim(u32),
        Get(u32),
        /// Consecutive LPNs from the first, so that a region can turn dense.
        Run(u32, u32),
    }

    fn op(lpns: u32) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..lpns, 0u32..1_000_000).prop_map(|(l, p)| Op::Set(l, p)),
            1 => (0..lpns).prop_map(Op::Trim),
            3 => (0..lpns).prop_map(Op::Get),
            1 => (0..lpns, 1u32..34_000).prop_map(|(l, n)| Op::Run(l, n)),
        ]
    }

    proptest! {
        /// Against a `BTreeMap` model: every lookup returns the last write (a trim writes
        /// "unmapped") or, never written, nothing or the layout's PPN (a dense region's table),
        /// every write returns what a lookup would have; the counters and load hold.
        #[test]
        fn the_map_agrees_with_a_btreemap(ops in proptest::collection::vec(op(3 * REGION_LPNS as u32 + 100), 0..400)) {
            let lpns = 3 * REGION_LPNS as u32 + 100;
            let mut m = ForwardMap::new(lpns as u64);
            let mut model: BTreeMap<u32, u32> = BTreeMap::new();
            let get = |m: &ForwardMap, model: &BTreeMap<u32, u32>, l: u32| -> Result<(), TestCaseError> {
                match model.get(&l) {
                    Some(&p) => prop_assert_eq!(m.get(l), Some(p), "LPN {}", l),
                    None => prop_assert!(m.get(l).is_none_or(|p| p == layout(l as u64)), "LPN {}", l),
                }
                Ok(())
            };
            // `set` returns the override before: the model's, or (never written) none or the
            // layout's PPN in a dense table.
            let set = |m: &mut ForwardMap, model: &mut BTreeMap<u32, u32>, l: u32, p: u32| -> Result<(), TestCaseError> {
                // The layout is asked only about LPNs with no override.
                let asked_about_written = std::cell::Cell::new(None);
                let before = m.set(l, p, |x| {
                    if x != l as u64 && model.contains_key(&(x as u32)) {
                        asked_about_written.set(Some(x));
                    }
                    layout(x)
                });
                prop_assert_eq!(asked_about_written.get(), None, "the layout asked about an LPN with an override");
                match model.insert(l, p) {
                    Some(old) => prop_assert_eq!(before, Some(old), "LPN {}", l),
                    None => prop_assert!(before.is_none_or(|b| b == layout(l as u64)), "LPN {}", l),
                }
                Ok(())
            };
            for op in ops {
                match op {
                    Op::Set(l, p) => { set(&mut m, &mut model, l, p)?; get(&m, &model, l)?; }
                    Op::Trim(l) => { set(&mut m, &mut model, l, UNMAPPED)?; get(&m, &model, l)?; }
                    Op::Get(l) => get(&m, &model, l)?,
                    Op::Run(l, n) => {
                        for x in l..(l + n).min(lpns) {
                            set(&mut m, &mut model, x, x ^ 0x5555)?;
                        }
                    }
                }
            }
            check(&m).map_err(TestCaseError::fail)?;
            for l in 0..lpns {
                get(&m, &model, l)?;
            }
            // A region is dense once its leaves would cost as much as its table.
            let (below, must) = dense_bounds();
            for r in 0..m.regions.len() as u32 {
                let distinct = model.range(r << REGION_BITS..(r + 1) << REGION_BITS).count();
                let dense = matches!(m.regions[r as usize], Region::Dense(_));
                prop_assert!(dense || distinct < must, "region {} with {} LPNs", r, distinct);
                prop_assert!(!dense || distinct >= below, "region {} with {} LPNs", r, distinct);
            }
        }
    }
}
