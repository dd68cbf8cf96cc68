//! The forward map's storage: what the run wrote, and nothing else.
//!
//! An LPN the run never wrote has no entry: its PPN is computed from the precondition's layout
//! (or it is unmapped), so a drive starts with no per-LPN memory at all. An LPN the run wrote
//! (or GC moved, or a trim dropped) has an *override*. The LPNs are cut into regions of
//! [`REGION_LPNS`]; the index holds one slot per region, and a region is one of:
//! - **untouched**: no override; a lookup ends at the index slot.
//! - **sparse**: its own small open-addressing hash table. A slot is 6 bytes: the LPN's offset
//!   within the region (15 bits) with an occupied bit, in an array of `u16`, and the PPN in a
//!   parallel array of `u32`. The region's number is the table's, so it is not stored; the PPN
//!   array is read only on a hit, so a probe walks 32 keys per CPU cache line.
//! - **dense**: a table of the whole region, 4 bytes an LPN (the unwritten ones filled from the
//!   layout), once its hash table would cost as much.
//!
//! A sparse table is kept between 7/10 and 7/8 full: it grows by a quarter when an insert
//! would pass 7/8 (rehashing, so a growth costs its size; amortised over the quarter more
//! inserts it allows, four moves an insert), which averages about 6 / 0.79 ≈ 7.6 bytes an
//! override. Probing is linear with Robin Hood order (an entry never sits farther from its
//! home slot than one it passed), so a lookup of an LPN that is not there stops at the first
//! slot whose entry is nearer its home than the search is: at 7/8 full an average search is
//! about 4.5 slots, hit or miss. The home slot is the offset's Fibonacci hash scaled to the
//! table's size (any size, not only powers of two). Entries are never removed: a trim is an
//! override to "unmapped".
//!
//! When growing would make the table's slots cost more than the dense table
//! (`slots × 6 ≥ REGION_LPNS × 4`: past the table of 20,218 slots, at the 17,691st override),
//! the region turns dense for good. So a region costs at most about what its dense table does,
//! and memory follows the distinct LPNs written: ~7.6 bytes each while sparse, 4 when dense,
//! plus the index (40 bytes a region).
//!
//! Worked example (`zssd`, 800 GB: 195,035,136 LPNs in 5,952 regions, 238,080 bytes of index):
//! 100,000 random 4 KiB writes (`rw=randwrite`, QD32, `number_ios=100000`) put about 17
//! overrides in each region: the map holds 757,806 bytes of slots
//! (7.6 bytes an override) and the index, 0.99 MB in all, where the hash map it replaced (one
//! `LPN → PPN` table for every sparse region, at a load between 7/16 and 7/8, and 4 bytes of
//! index per 1,024 LPNs) held 1.97 MB. (The run's `mapping_table_bytes` adds the reverse maps
//! of the 64 superblocks written, 2 MiB.)
//!
//! The map is never iterated in hash order, so results do not depend on the hash; only speed
//! and memory do.

/// LPNs per region: an offset within a region fits in 15 bits, beside the occupied bit (a dense
/// region's table is 128 KiB of `u32`).
pub const REGION_LPNS: u64 = 1 << REGION_BITS;
const REGION_BITS: u32 = 15;
const OFFSET_MASK: u32 = (1 << REGION_BITS) - 1;

/// A sparse table's key slot: `OCCUPIED | offset`, or 0 when empty.
const OCCUPIED: u16 = 1 << 15;
/// Bytes a sparse slot costs (its key and its PPN).
const SLOT_BYTES: usize = size_of::<u16>() + size_of::<u32>();
/// Slots of a region's first table (one entry, within the 7/8 load).
const MIN_SLOTS: usize = 2;

/// Bytes of the index per region (whatever the region holds).
pub const INDEX_BYTES_PER_REGION: u64 = size_of::<Region>() as u64;

/// One region of the map (see the module essay): untouched (both arrays empty), sparse (`keys`
/// and `ppns` are its hash table, linear probing in Robin Hood order) or dense (`keys` empty,
/// `ppns` the PPN of every LPN of the region).
struct Region {
    /// Sparse: `OCCUPIED | offset` per slot, 0 when empty.
    keys: Box<[u16]>,
    /// Sparse: the PPN of each occupied slot. Dense: the PPN of each offset.
    ppns: Box<[u32]>,
    /// Sparse: occupied slots.
    len: u32,
}

impl Region {
    fn untouched() -> Region {
        Region::with_slots(0)
    }

    fn with_slots(slots: usize) -> Region {
        Region {
            keys: vec![0; slots].into_boxed_slice(),
            ppns: vec![0; slots].into_boxed_slice(),
            len: 0,
        }
    }

    fn is_sparse(&self) -> bool {
        !self.keys.is_empty()
    }

    fn is_dense(&self) -> bool {
        self.keys.is_empty() && !self.ppns.is_empty()
    }

    /// Home slot of `key` (its Fibonacci hash scaled to the table's size).
    #[inline]
    fn home(&self, key: u16) -> usize {
        let h = u32::from(key).wrapping_mul(0x9E37_79B9);
        ((u64::from(h) * self.keys.len() as u64) >> 32) as usize
    }

    /// How far slot `i` is past `key`'s home slot, wrapping.
    #[inline]
    fn distance(&self, key: u16, i: usize) -> usize {
        let home = self.home(key);
        if i >= home {
            i - home
        } else {
            i + self.keys.len() - home
        }
    }

    /// The slot holding `key`, if any (sparse).
    #[inline]
    fn find(&self, key: u16) -> Option<usize> {
        let n = self.keys.len();
        let mut i = self.home(key);
        let mut dist = 0;
        loop {
            let k = self.keys[i];
            if k == key {
                return Some(i);
            }
            // Empty, or an entry nearer its home than `key` would be here: Robin Hood order
            // would have put `key` before it.
            if k == 0 || self.distance(k, i) < dist {
                return None;
            }
            i += 1;
            if i == n {
                i = 0;
            }
            dist += 1;
        }
    }

    /// Whether one more entry fits within the 7/8 load (sparse).
    fn has_room(&self) -> bool {
        (self.len as usize + 1) * 8 <= self.keys.len() * 7
    }

    /// Puts `key → ppn`, which is not in the table; the caller checked
    /// [`has_room`](Self::has_room).
    fn insert_new(&mut self, mut key: u16, mut ppn: u32) {
        debug_assert!(self.has_room(), "insert into a full table");
        let n = self.keys.len();
        let mut i = self.home(key);
        let mut dist = 0;
        loop {
            let k = self.keys[i];
            if k == 0 {
                self.keys[i] = key;
                self.ppns[i] = ppn;
                self.len += 1;
                return;
            }
            let theirs = self.distance(k, i);
            if theirs < dist {
                // Robin Hood: the entry nearer its home gives up its slot and moves on.
                std::mem::swap(&mut self.keys[i], &mut key);
                std::mem::swap(&mut self.ppns[i], &mut ppn);
                dist = theirs;
            }
            i += 1;
            if i == n {
                i = 0;
            }
            dist += 1;
        }
    }

    /// This region's entries (sparse or untouched) in a table of `slots` slots.
    fn grown(&self, slots: usize) -> Region {
        let mut t = Region::with_slots(slots);
        for (&k, &p) in self.keys.iter().zip(self.ppns.iter()) {
            if k != 0 {
                t.insert_new(k, p);
            }
        }
        t
    }

    /// Slots of the table that follows one of `slots` when it is full: a quarter more, at
    /// least one more.
    fn next_slots(slots: usize) -> usize {
        (slots + (slots / 4).max(1)).max(MIN_SLOTS)
    }
}

/// The forward map's overrides (see the module essay). `Default` is the map over no LPNs.
#[derive(Default)]
pub struct ForwardMap {
    regions: Vec<Region>,
    /// Overrides held (dense regions count whole).
    overrides: u64,
    /// Slots of all sparse tables, and regions dense.
    sparse_slots: u64,
    dense_regions: u64,
}

impl ForwardMap {
    /// An empty map over `lpns` LPNs: no overrides.
    pub fn new(lpns: u64) -> ForwardMap {
        let regions = lpns.div_ceil(REGION_LPNS) as usize;
        ForwardMap {
            regions: (0..regions).map(|_| Region::untouched()).collect(),
            ..ForwardMap::default()
        }
    }

    /// The override of `lpn`, if the run wrote one (`None`: the layout's PPN holds).
    #[inline]
    pub fn get(&self, lpn: u32) -> Option<u32> {
        let offset = lpn & OFFSET_MASK;
        let region = &self.regions[(lpn >> REGION_BITS) as usize];
        if region.is_sparse() {
            region
                .find(OCCUPIED | offset as u16)
                .map(|i| region.ppns[i])
        } else {
            // Dense, or untouched (no PPNs at all).
            region.ppns.get(offset as usize).copied()
        }
    }

    /// Sets `lpn`'s PPN. `layout` gives any LPN's PPN when it has no override (the
    /// precondition's, or unmapped): it fills a region's table when the region turns dense.
    pub fn set(&mut self, lpn: u32, ppn: u32, layout: impl Fn(u64) -> u32) {
        let r = (lpn >> REGION_BITS) as usize;
        let offset = lpn & OFFSET_MASK;
        let key = OCCUPIED | offset as u16;
        let region = &mut self.regions[r];
        if region.is_dense() {
            region.ppns[offset as usize] = ppn;
            return;
        }
        if region.is_sparse() {
            if let Some(i) = region.find(key) {
                region.ppns[i] = ppn;
                return;
            }
        }
        self.overrides += 1;
        if region.is_sparse() && region.has_room() {
            region.insert_new(key, ppn);
            return;
        }
        let slots = region.keys.len();
        let next = Region::next_slots(slots);
        if next * SLOT_BYTES < REGION_LPNS as usize * size_of::<u32>() {
            let mut grown = region.grown(next);
            grown.insert_new(key, ppn);
            *region = grown;
            self.sparse_slots += (next - slots) as u64;
            return;
        }
        // The table would cost as much as the region's: the region turns dense, for good.
        let base = r as u64 * REGION_LPNS;
        let mut table: Box<[u32]> = (base..base + REGION_LPNS).map(&layout).collect();
        for (&k, &p) in region.keys.iter().zip(region.ppns.iter()) {
            if k != 0 {
                table[usize::from(k & !OCCUPIED)] = p;
            }
        }
        table[offset as usize] = ppn;
        self.overrides += REGION_LPNS - u64::from(region.len) - 1;
        self.sparse_slots -= slots as u64;
        self.dense_regions += 1;
        *region = Region {
            keys: Box::new([]),
            ppns: table,
            len: 0,
        };
    }

    /// LPNs with an override (dense regions count whole).
    pub fn overrides(&self) -> u64 {
        self.overrides
    }

    /// Bytes the map holds: the index, the sparse tables' slots and the dense tables (not the
    /// allocator's own bookkeeping, two allocations per region written).
    pub fn bytes(&self) -> u64 {
        let index = self.regions.len() as u64 * INDEX_BYTES_PER_REGION;
        index
            + self.sparse_slots * SLOT_BYTES as u64
            + self.dense_regions * REGION_LPNS * size_of::<u32>() as u64
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
        for (r, t) in m.regions.iter().enumerate() {
            if t.is_dense() {
                dense += 1;
                overrides += REGION_LPNS;
                assert_eq!(t.ppns.len() as u64, REGION_LPNS);
            } else if t.is_sparse() {
                let n = t.keys.len();
                let used = t.keys.iter().filter(|&&k| k != 0).count();
                if used != t.len as usize || used * 8 > n * 7 || used == 0 || t.ppns.len() != n {
                    return Err(format!("region {r}: {used} of {n} slots, len {}", t.len));
                }
                for (i, &k) in t.keys.iter().enumerate() {
                    if k != 0 && t.find(k) != Some(i) {
                        return Err(format!("region {r}: key {k:#x} in slot {i} not found"));
                    }
                }
                slots += n as u64;
                overrides += used as u64;
            }
        }
        if (slots, dense, overrides) != (m.sparse_slots, m.dense_regions, m.overrides) {
            return Err(format!(
                "counted {slots} slots, {dense} dense, {overrides} overrides; the map: {}, {}, {}",
                m.sparse_slots, m.dense_regions, m.overrides
            ));
        }
        Ok(())
    }

    /// Distinct LPNs at which a region turns dense: one more than the largest table holds.
    fn dense_at() -> usize {
        let mut slots = 0;
        loop {
            let next = Region::next_slots(slots);
            if next * SLOT_BYTES >= (REGION_LPNS * 4) as usize {
                return slots * 7 / 8 + 1;
            }
            slots = next;
        }
    }

    #[test]
    fn a_region_is_forty_bytes_of_index() {
        assert_eq!(INDEX_BYTES_PER_REGION, 40);
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
    fn a_region_turns_dense_when_its_table_would_cost_as_much_and_keeps_every_value() {
        let mut m = ForwardMap::new(3 * REGION_LPNS);
        let base = REGION_LPNS as u32;
        // Two LPNs of every three of region 1, so the dense table must fill the gaps from the
        // layout.
        let at = |k: u32| base + k + k / 2;
        let mut k = 0u32;
        while !m.regions[1].is_dense() {
            let before = m.bytes();
            m.set(at(k), 900_000 + k, layout);
            assert_eq!(m.get(at(k)), Some(900_000 + k));
            if m.regions[1].is_sparse() {
                assert!(
                    m.regions[1].keys.len() * SLOT_BYTES < (REGION_LPNS * 4) as usize,
                    "{} slots cost more than the dense table",
                    m.regions[1].keys.len()
                );
            }
            assert!(m.bytes() >= before);
            k += 1;
        }
        // 7/8 of the last table below 128 KiB of 6-byte slots (20,218 of them), and one more.
        assert_eq!(k as usize, dense_at());
        assert_eq!(k, 17_691);
        assert_eq!(m.overrides(), REGION_LPNS);
        assert_eq!(m.sparse_slots, 0);
        assert_eq!(
            m.bytes(),
            3 * INDEX_BYTES_PER_REGION + REGION_LPNS * 4,
            "the dense table and the index, nothing else"
        );
        for j in 0..k {
            assert_eq!(m.get(at(j)), Some(900_000 + j));
        }
        for gap in (base + 2..at(k)).step_by(3) {
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
            // 10,000 over 6,000 regions are one or two a region, in tables of 2 or 3 slots.
            let most = if n == 10_000 { 9.5 } else { 8.5 };
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
            1 => (0..lpns, 1u32..25_000).prop_map(|(l, n)| Op::Run(l, n)),
        ]
    }

    proptest! {
        /// Against a `BTreeMap` model: every lookup returns the last write (a trim writes
        /// "unmapped") or, never written, nothing or the layout's PPN (a dense region's table);
        /// the counters and load hold after every step.
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
            for op in ops {
                match op {
                    Op::Set(l, p) => { m.set(l, p, layout); model.insert(l, p); get(&m, &model, l)?; }
                    Op::Trim(l) => { m.set(l, UNMAPPED, layout); model.insert(l, UNMAPPED); get(&m, &model, l)?; }
                    Op::Get(l) => get(&m, &model, l)?,
                    Op::Run(l, n) => {
                        for x in l..(l + n).min(lpns) {
                            m.set(x, x ^ 0x5555, layout);
                            model.insert(x, x ^ 0x5555);
                        }
                    }
                }
            }
            check(&m).map_err(TestCaseError::fail)?;
            for l in 0..lpns {
                get(&m, &model, l)?;
            }
            // A region is dense exactly when it took more distinct LPNs than its largest table holds.
            for r in 0..m.regions.len() as u32 {
                let distinct = model.range(r << REGION_BITS..(r + 1) << REGION_BITS).count();
                let dense = m.regions[r as usize].is_dense();
                prop_assert_eq!(dense, distinct >= dense_at(), "region {} with {} LPNs", r, distinct);
            }
        }
    }
}
