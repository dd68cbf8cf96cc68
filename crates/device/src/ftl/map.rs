//! The forward map's storage: what the run wrote, and nothing else.
//!
//! An LPN the run never wrote has no entry: its PPN is computed from the precondition's layout
//! (or it is unmapped), so a drive starts with no per-LPN memory at all. An LPN the run wrote
//! (or GC moved, or a trim dropped) has an *override*, kept one of two ways, chosen per region of
//! [`REGION_LPNS`] LPNs by how many of its LPNs were written:
//! - **sparse**: up to [`SPARSE_MAX`] overrides of a region sit in one hash table shared by all
//!   regions, `LPN → PPN` (8 bytes a pair plus a control byte, at a load of 7/16 to 7/8: about
//!   10 to 21 bytes an override). Random writes over a large drive stay here.
//! - **dense**: when a region's overrides reach [`SPARSE_MAX`], they move into a table of the
//!   whole region (4 bytes an LPN, the unwritten ones filled from the layout), where every later
//!   write to the region goes. Sequential writes end here after a quarter of a region each.
//!
//! [`SPARSE_MAX`] is where a region's hash entries would cost about as much as its table
//! (256 × ~14 bytes ≈ 4 KiB); a region never goes back to sparse. Memory therefore follows the
//! distinct LPNs written, at 4 to ~21 bytes each, plus 4 bytes per region and a bit per region
//! for the index. Lookups are O(1): one bit test for a region nobody wrote (reads of
//! preconditioned data), else one index load and either a table load or a hash probe.
//!
//! The map is never iterated in hash order, so results do not depend on the hasher (runs are
//! deterministic), only its speed does.

use rustc_hash::FxHashMap;

/// LPNs per region (a dense region's table is 4 KiB of `u32`).
pub const REGION_LPNS: u64 = 1024;

/// Overrides a region keeps in the shared hash before it becomes a dense table.
pub const SPARSE_MAX: u32 = 256;
/// `regions[r]` with this bit set: region `r` is dense, its table `dense[regions[r] & !DENSE]`.
const DENSE: u32 = 1 << 31;

/// The forward map's overrides (see the module essay). `Default` is the map over no LPNs.
#[derive(Default)]
pub struct ForwardMap {
    /// Per region: the number of its overrides in `sparse` (≤ [`SPARSE_MAX`]), or
    /// `DENSE | index` of its table in `dense`.
    regions: Vec<u32>,
    /// One bit per region: whether it holds any override. A read of a region nobody wrote
    /// tests this bitmap (24 KiB for 800 GB, cache-resident) and nothing else.
    touched: Vec<u64>,
    dense: Vec<Box<[u32]>>,
    sparse: FxHashMap<u32, u32>,
}

impl ForwardMap {
    /// An empty map over `lpns` LPNs: no overrides.
    pub fn new(lpns: u64) -> ForwardMap {
        let regions = lpns.div_ceil(REGION_LPNS) as usize;
        assert!(
            regions < DENSE as usize,
            "{lpns} LPNs need {regions} regions; the map indexes at most {DENSE}"
        );
        ForwardMap {
            regions: vec![0; regions],
            touched: vec![0; regions.div_ceil(64)],
            dense: Vec::new(),
            sparse: FxHashMap::default(),
        }
    }

    /// The override of `lpn`, if the run wrote one (`None`: the layout's PPN holds).
    #[inline]
    pub fn get(&self, lpn: u32) -> Option<u32> {
        let r = (lpn as u64 / REGION_LPNS) as usize;
        if self.touched[r / 64] & (1 << (r % 64)) == 0 {
            return None;
        }
        let entry = self.regions[r];
        if entry & DENSE != 0 {
            Some(self.dense[(entry & !DENSE) as usize][(lpn as u64 % REGION_LPNS) as usize])
        } else {
            self.sparse.get(&lpn).copied()
        }
    }

    /// Sets `lpn`'s PPN. `layout` gives any LPN's PPN when it has no override (the
    /// precondition's, or unmapped): it fills a region's table when the region turns dense.
    pub fn set(&mut self, lpn: u32, ppn: u32, layout: impl Fn(u64) -> u32) {
        let r = (lpn as u64 / REGION_LPNS) as usize;
        let entry = self.regions[r];
        if entry & DENSE != 0 {
            self.dense[(entry & !DENSE) as usize][(lpn as u64 % REGION_LPNS) as usize] = ppn;
            return;
        }
        if self.sparse.insert(lpn, ppn).is_some() {
            return;
        }
        self.touched[r / 64] |= 1 << (r % 64);
        if entry + 1 < SPARSE_MAX {
            self.regions[r] = entry + 1;
            return;
        }
        // The region's overrides reached SPARSE_MAX: move them into a table of the region.
        let base = r as u64 * REGION_LPNS;
        let table: Box<[u32]> = (base..base + REGION_LPNS)
            .map(|l| match self.sparse.remove(&(l as u32)) {
                Some(p) => p,
                None => layout(l),
            })
            .collect();
        self.regions[r] = DENSE | self.dense.len() as u32;
        self.dense.push(table);
    }

    /// LPNs with an override (dense regions count whole).
    pub fn overrides(&self) -> u64 {
        self.sparse.len() as u64 + self.dense.len() as u64 * REGION_LPNS
    }

    /// Bytes the map holds: the region index and bitmap, the dense tables, and the hash table's
    /// allocation (its buckets, pairs and control bytes, at its current capacity).
    pub fn bytes(&self) -> u64 {
        let index = self.regions.len() * 4 + self.touched.len() * 8;
        let dense = self.dense.len() * (REGION_LPNS as usize * 4 + size_of::<Box<[u32]>>());
        // hashbrown: a power-of-two number of buckets holding `capacity` at a load of 7/8, or
        // `capacity + 1` below 8 buckets; a pair and a control byte each, plus a group's bytes.
        let buckets = match self.sparse.capacity() {
            0 => 0,
            c if c < 7 => (c + 1).next_power_of_two(),
            c => (c * 8 / 7).next_power_of_two(),
        };
        let sparse = buckets * (size_of::<(u32, u32)>() + 1) + if buckets > 0 { 16 } else { 0 };
        (index + dense + sparse) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNMAPPED: u32 = u32::MAX;

    fn layout(l: u64) -> u32 {
        if l < 5000 {
            l as u32 + 7
        } else {
            UNMAPPED
        }
    }

    #[test]
    fn unwritten_lpns_have_no_override_and_cost_only_the_index() {
        let m = ForwardMap::new(200 * 1024 + 5);
        assert_eq!(m.get(0), None);
        assert_eq!(m.get(200 * 1024 + 4), None);
        assert_eq!(m.overrides(), 0);
        assert_eq!(m.bytes(), 201 * 4 + 4 * 8);
    }

    #[test]
    fn a_region_turns_dense_at_sparse_max_and_keeps_every_value() {
        let mut m = ForwardMap::new(4 * 1024);
        // Every other LPN of region 1, so the table must fill the gaps from the layout.
        for k in 0..SPARSE_MAX - 1 {
            let lpn = 1024 + 2 * k;
            m.set(lpn, 900_000 + k, layout);
            assert_eq!(m.get(lpn), Some(900_000 + k));
        }
        assert!(m.dense.is_empty(), "still sparse below SPARSE_MAX");
        assert_eq!(m.overrides(), (SPARSE_MAX - 1) as u64);
        m.set(1024 + 2 * (SPARSE_MAX - 1), 1, layout);
        assert_eq!(m.dense.len(), 1, "dense at SPARSE_MAX overrides");
        assert!(m.sparse.is_empty(), "the region's overrides left the hash");
        for k in 0..SPARSE_MAX - 1 {
            assert_eq!(m.get(1024 + 2 * k), Some(900_000 + k));
            assert_eq!(
                m.get(1024 + 2 * k + 1),
                Some(layout(1024 + 2 * k as u64 + 1))
            );
        }
        assert_eq!(m.get(1024 + 2 * (SPARSE_MAX - 1)), Some(1));
        // Other regions are untouched; rewrites of the dense region land in its table.
        assert_eq!(m.get(0), None);
        assert_eq!(m.get(2048), None);
        m.set(2047, 5, layout);
        assert_eq!(m.get(2047), Some(5));
        assert_eq!(m.dense.len(), 1);
    }

    #[test]
    fn rewriting_an_override_does_not_count_twice() {
        let mut m = ForwardMap::new(2048);
        for round in 0..3 * SPARSE_MAX {
            m.set(3, round, layout);
        }
        assert_eq!(m.get(3), Some(3 * SPARSE_MAX - 1));
        assert_eq!(m.overrides(), 1, "one LPN, one override");
        assert!(m.dense.is_empty());
    }

    #[test]
    fn sparse_overrides_cost_tens_of_bytes_each() {
        // 100 K LPNs scattered one per region: the hash holds them, at most ~21 bytes each.
        let regions = 100_000u64;
        let mut m = ForwardMap::new(regions * REGION_LPNS);
        for r in 0..regions {
            m.set((r * REGION_LPNS + r % 1000) as u32, r as u32, layout);
        }
        let index = regions * 4 + regions.div_ceil(64) * 8;
        let per = (m.bytes() - index) as f64 / regions as f64;
        assert!((9.0..=21.0).contains(&per), "{per:.1} bytes per override");
        assert_eq!(m.get(5 * REGION_LPNS as u32 + 5), Some(5));
    }

    proptest::proptest! {
        /// Whatever the order of writes, every LPN reads back its last write or, never
        /// written, the layout's PPN; a region is dense exactly when it took SPARSE_MAX
        /// distinct LPNs.
        #[test]
        fn reads_return_the_last_write_or_the_layout(
            writes in proptest::collection::vec((0u32..3 * 1024 + 100, 0u32..1_000_000), 0..3000),
            concentrate in 0u32..4,
        ) {
            let lpns = 3 * 1024 + 100;
            let mut m = ForwardMap::new(lpns as u64);
            let mut last = std::collections::HashMap::new();
            for &(lpn, ppn) in &writes {
                // `concentrate` squeezes the LPNs into fewer regions, so some turn dense.
                let lpn = lpn >> concentrate;
                m.set(lpn, ppn, layout);
                last.insert(lpn, ppn);
            }
            for lpn in 0..lpns {
                let want = last.get(&lpn).copied();
                match want {
                    Some(p) => proptest::prop_assert_eq!(m.get(lpn), Some(p)),
                    None => proptest::prop_assert!(m.get(lpn).is_none_or(|p| p == layout(lpn as u64))),
                }
            }
            for r in 0..m.regions.len() as u64 {
                let distinct = last.keys().filter(|&&l| l as u64 / REGION_LPNS == r).count() as u32;
                let dense = m.regions[r as usize] & DENSE != 0;
                proptest::prop_assert_eq!(dense, distinct >= SPARSE_MAX, "region {} with {} LPNs", r, distinct);
            }
        }
    }
}
