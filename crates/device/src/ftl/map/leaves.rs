//! A region written densely enough: its overrides in leaves of [`LEAF_LPNS`] LPNs, each a
//! bitmap of the LPNs it holds and their PPNs packed in offset order, carved from a pool of
//! equal-sized chunks.
//!
//! A region's hash table (`ftl/map.rs`) costs about 7.6 bytes an override, 6 of them the
//! slot's key and PPN at a load near 0.8. Once a region holds more than about 1,800 overrides
//! (one LPN in 18), most of its 64-LPN stretches hold at least one, and a leaf per stretch is
//! cheaper: the key becomes a bit of the leaf's bitmap and the PPN its 4 bytes, found by
//! ranking the bit (a popcount of the bitmap below it). A leaf region costs a directory of
//! one 4-byte handle a leaf (512 of them, 2 KiB), 12 bytes of header a leaf that holds any
//! override (its owner and its bitmap) and 4 bytes an override. Worked example (`zssd`,
//! 100 M 70/30 I/Os: about 4,700 distinct LPNs a region, every leaf holding some):
//! 2,048 + 512 × 12 + 4,700 × 4 = 26,992 bytes, 5.7 bytes an override, where the hash table
//! costs 7.6 (35.7 KB).
//!
//! A leaf is one block of `3 + m` 32-bit words (owner, bitmap, then `m` PPNs). A write of an
//! LPN the leaf holds replaces its PPN in place; a new LPN takes a block one word larger,
//! copies the leaf into it with the PPN inserted at its rank (at most 67 words), and frees
//! the old block. Blocks come from [`Pool`]: chunks of [`CHUNK_WORDS`] words (16 KiB), free
//! blocks on a list per size. No memory goes back to the allocator as leaves grow, so none
//! is lost to its fragmentation (the hash tables' growth, freeing each table for one a
//! quarter larger, leaves holes the allocator keeps: about 100 MiB at 100 M 70/30 I/Os).
//! But free lists alone would not do: as a run's leaves grow, the sizes they leave behind
//! stop being asked for (a model of random writes put the free blocks at 0.6 of the words in
//! use at 4,700 overrides a region). So when the free blocks pass 1/8 of the words in use,
//! the pool compacts: it slides every block to the front in order, each block's owner word
//! naming the directory entry to point at its new place, and drops the chunks left empty.
//! A compaction costs a pass over the pool, once the run has freed an eighth of it: a few
//! word copies an insert, amortised.

/// LPNs a leaf covers: one 64-bit bitmap.
pub const LEAF_LPNS: u32 = 64;
const LEAF_BITS: u32 = 6;
/// Leaves a region's directory holds at most (an owner word names the leaf in these bits).
const DIR_BITS: u32 = 9;
/// Words of a leaf block before its PPNs: its owner (region and leaf, for compaction), then
/// its bitmap.
const HEADER_WORDS: u32 = 3;
/// The smallest and the largest block: a leaf of one LPN, and a full leaf.
const MIN_BLOCK_WORDS: u32 = HEADER_WORDS + 1;
const MAX_BLOCK_WORDS: u32 = HEADER_WORDS + LEAF_LPNS;
/// Words of a pool chunk (16 KiB): a handle is the chunk's index and the word within it.
const CHUNK_BITS: u32 = 12;
pub const CHUNK_WORDS: u32 = 1 << CHUNK_BITS;
/// No leaf (a directory entry) or no block (a free list's end).
const NONE: u32 = u32::MAX;
/// A free block's first word: this bit and its size (an owner word never has it).
const FREE_TAG: u32 = 1 << 31;
/// The pool compacts when its free blocks hold more than this share of the words in use
/// (and more than [`COMPACT_MIN_WORDS`]): the free lists cannot serve a leaf that outgrew
/// every free block, and as a run's leaves grow, the smaller sizes' free blocks stop being
/// asked for (see the module essay).
const COMPACT_FREE_PER_USED: u64 = 8;
const COMPACT_MIN_WORDS: u64 = 16 * CHUNK_WORDS as u64;

/// Chunks of words cut into blocks of [`MIN_BLOCK_WORDS`] to [`MAX_BLOCK_WORDS`] words, with
/// a free list per size, compacted when the free blocks grow (see the module essay).
/// `Default` is a pool of no chunks.
#[derive(Default)]
pub struct Pool {
    chunks: Vec<Box<[u32]>>,
    /// Words of the last chunk handed out.
    top: u32,
    /// Head of each size's free list (by words; [`NONE`] if empty; empty until the first
    /// block is freed). A free block's first word is [`FREE_TAG`] and its size, its second the
    /// next block of the list.
    free: Vec<u32>,
    /// Words in free blocks (listed or, shorter than a leaf, only tagged).
    free_words: u64,
}

impl Pool {
    #[inline]
    fn word(&self, h: u32) -> u32 {
        self.chunks[(h >> CHUNK_BITS) as usize][(h & (CHUNK_WORDS - 1)) as usize]
    }

    #[inline]
    fn set_word(&mut self, h: u32, w: u32) {
        self.chunks[(h >> CHUNK_BITS) as usize][(h & (CHUNK_WORDS - 1)) as usize] = w;
    }

    #[inline]
    fn block(&self, h: u32, words: u32) -> &[u32] {
        let at = (h & (CHUNK_WORDS - 1)) as usize;
        &self.chunks[(h >> CHUNK_BITS) as usize][at..at + words as usize]
    }

    #[inline]
    fn block_mut(&mut self, h: u32, words: u32) -> &mut [u32] {
        let at = (h & (CHUNK_WORDS - 1)) as usize;
        &mut self.chunks[(h >> CHUNK_BITS) as usize][at..at + words as usize]
    }

    /// The bitmap of the leaf block at `h`.
    #[inline]
    fn bits(&self, h: u32) -> u64 {
        let head = self.block(h, HEADER_WORDS);
        u64::from(head[1]) | u64::from(head[2]) << 32
    }

    fn free_head(&mut self, words: u32) -> &mut u32 {
        if self.free.is_empty() {
            self.free = vec![NONE; MAX_BLOCK_WORDS as usize + 1];
        }
        &mut self.free[words as usize]
    }

    /// A block of `words` words (contents unspecified).
    fn alloc(&mut self, words: u32) -> u32 {
        debug_assert!((MIN_BLOCK_WORDS..=MAX_BLOCK_WORDS).contains(&words));
        let head = *self.free_head(words);
        if head != NONE {
            *self.free_head(words) = self.word(head + 1);
            self.free_words -= u64::from(words);
            return head;
        }
        if self.chunks.is_empty() || self.top + words > CHUNK_WORDS {
            // The last chunk's tail, too short for this block, serves a shorter one later.
            let tail = CHUNK_WORDS - self.top;
            if !self.chunks.is_empty() && tail > 0 {
                let h = self.handle(self.chunks.len() - 1, self.top);
                self.release(h, tail);
            }
            self.chunks
                .push(vec![0; CHUNK_WORDS as usize].into_boxed_slice());
            self.top = 0;
        }
        let h = self.handle(self.chunks.len() - 1, self.top);
        self.top += words;
        h
    }

    fn handle(&self, chunk: usize, word: u32) -> u32 {
        assert!(
            chunk < (NONE >> CHUNK_BITS) as usize,
            "the leaf pool outgrew its 32-bit handles"
        );
        (chunk as u32) << CHUNK_BITS | word
    }

    /// Frees the block `h` of `words` words: tagged, and on its size's free list if a leaf
    /// fits in it.
    fn release(&mut self, h: u32, words: u32) {
        self.set_word(h, FREE_TAG | words);
        if words >= MIN_BLOCK_WORDS {
            let next = *self.free_head(words);
            self.set_word(h + 1, next);
            *self.free_head(words) = h;
        }
        self.free_words += u64::from(words);
    }

    /// Words carved from the chunks, in use or free.
    fn carved_words(&self) -> u64 {
        self.chunks.len().saturating_sub(1) as u64 * u64::from(CHUNK_WORDS) + u64::from(self.top)
    }

    /// Words in leaf blocks.
    pub fn used_words(&self) -> u64 {
        self.carved_words() - self.free_words
    }

    /// Whether the free blocks grew past their share of the pool ([`COMPACT_FREE_PER_USED`]).
    fn wants_compaction(&self) -> bool {
        self.free_words > COMPACT_MIN_WORDS
            && self.free_words * COMPACT_FREE_PER_USED > self.used_words()
    }

    /// Slides every leaf block to the front of the pool, in order, and drops the chunks left
    /// empty; `moved(owner, handle)` is told each block's new handle. The free lists empty
    /// (only the tails of chunks a block did not fit in stay free).
    fn compact(&mut self, mut moved: impl FnMut(u32, u32)) {
        let carved = self.carved_words();
        self.free.fill(NONE);
        self.free_words = 0;
        let (mut wc, mut ww) = (0usize, 0u32);
        let mut buf = [0u32; MAX_BLOCK_WORDS as usize];
        for c in 0..self.chunks.len() {
            let end = if c + 1 == self.chunks.len() {
                self.top
            } else {
                CHUNK_WORDS
            };
            let mut pos = 0;
            while pos < end {
                let first = self.chunks[c][pos as usize];
                if first & FREE_TAG != 0 {
                    pos += first & !FREE_TAG;
                    continue;
                }
                let h = self.handle(c, pos);
                let words = HEADER_WORDS + self.bits(h).count_ones();
                if ww + words > CHUNK_WORDS {
                    // Written chunks lie wholly before the one read: their tails are free.
                    if ww < CHUNK_WORDS {
                        let tail = self.handle(wc, ww);
                        self.release(tail, CHUNK_WORDS - ww);
                    }
                    (wc, ww) = (wc + 1, 0);
                }
                let to = self.handle(wc, ww);
                if to != h {
                    buf[..words as usize].copy_from_slice(self.block(h, words));
                    self.block_mut(to, words)
                        .copy_from_slice(&buf[..words as usize]);
                }
                moved(first, to);
                ww += words;
                pos += words;
            }
        }
        self.chunks.truncate(wc + 1);
        self.top = ww;
        debug_assert!(self.carved_words() <= carved);
    }

    /// Bytes the pool holds: its chunks, used or free, and their index.
    pub fn bytes(&self) -> u64 {
        let chunk = u64::from(CHUNK_WORDS) * size_of::<u32>() as u64;
        self.chunks.len() as u64 * chunk
            + (self.chunks.capacity() * size_of::<Box<[u32]>>()) as u64
            + (self.free.capacity() * size_of::<u32>()) as u64
    }

    /// Words in free blocks (tests).
    #[cfg(test)]
    pub fn free_words(&self) -> u64 {
        self.free_words
    }

    /// Words on the free lists, walked (tests).
    #[cfg(test)]
    pub fn listed_words(&self) -> u64 {
        let mut free = 0u64;
        for (words, &head) in self.free.iter().enumerate() {
            let mut h = head;
            while h != NONE {
                assert_eq!(
                    self.word(h),
                    FREE_TAG | words as u32,
                    "a listed block is tagged"
                );
                free += words as u64;
                h = self.word(h + 1);
            }
        }
        free
    }
}

/// The leaves of all regions in one pool (see the module essay): the region's leaves and the
/// pool lent together, so that a compaction can find each block's directory entry.
pub trait LeafRegions {
    /// The leaves of region `region`, if it is held in leaves.
    fn leaves_mut(&mut self, region: u32) -> Option<&mut Leaves>;
}

/// Compacts `pool` if its free blocks grew past their share, pointing each region's
/// directory at its blocks' new places.
pub fn maybe_compact(pool: &mut Pool, regions: &mut impl LeafRegions) {
    if !pool.wants_compaction() {
        return;
    }
    pool.compact(|owner, h| {
        let leaves = regions
            .leaves_mut(owner >> DIR_BITS)
            .expect("a leaf block's owner is a region in leaves");
        leaves.dir[(owner & ((1 << DIR_BITS) - 1)) as usize] = h;
    });
}

/// A region's leaves: a directory of one block handle per leaf ([`NONE`]: the leaf holds no
/// override), and the counts its cost follows.
pub struct Leaves {
    dir: Box<[u32]>,
    /// Overrides held.
    len: u32,
    /// Leaves holding any.
    leaves: u32,
}

impl Leaves {
    /// A region of `lpns` LPNs with no override yet.
    pub fn new(lpns: u32) -> Leaves {
        let leaves = lpns.div_ceil(LEAF_LPNS);
        assert!(
            leaves <= 1 << DIR_BITS,
            "a region of {lpns} LPNs beyond the leaves' owner words"
        );
        Leaves {
            dir: vec![NONE; leaves as usize].into_boxed_slice(),
            len: 0,
            leaves: 0,
        }
    }

    /// Bytes a region of `lpns` LPNs costs in leaves holding `len` overrides in `leaves`
    /// leaves (the directory and the blocks; not the pool's free blocks).
    pub fn cost(lpns: u32, len: u32, leaves: u32) -> u64 {
        let dir = u64::from(lpns.div_ceil(LEAF_LPNS));
        (dir + u64::from(HEADER_WORDS * leaves) + u64::from(len)) * size_of::<u32>() as u64
    }

    /// Bytes of the directory.
    pub fn dir_bytes(&self) -> u64 {
        (self.dir.len() * size_of::<u32>()) as u64
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn leaves(&self) -> u32 {
        self.leaves
    }

    /// Whether the leaf of `offset` holds any override (so a new one there adds no leaf).
    pub fn has_leaf(&self, offset: u32) -> bool {
        self.dir[(offset >> LEAF_BITS) as usize] != NONE
    }

    /// The PPN of `offset` (within the region), if it has an override.
    #[inline]
    pub fn get(&self, pool: &Pool, offset: u32) -> Option<u32> {
        let h = self.dir[(offset >> LEAF_BITS) as usize];
        if h == NONE {
            return None;
        }
        let bits = pool.bits(h);
        let bit = offset & (LEAF_LPNS - 1);
        if bits & (1 << bit) == 0 {
            return None;
        }
        let rank = (bits & ((1 << bit) - 1)).count_ones();
        Some(pool.word(h + HEADER_WORDS + rank))
    }

    /// Sets `offset`'s PPN in these leaves of region `region`; returns its override before, if
    /// it had one. (The caller then offers the pool a compaction: [`maybe_compact`].)
    pub fn set(&mut self, pool: &mut Pool, region: u32, offset: u32, ppn: u32) -> Option<u32> {
        assert!(
            region < FREE_TAG >> DIR_BITS,
            "region {region} beyond the leaves' owner words"
        );
        let leaf = offset >> LEAF_BITS;
        let bit = offset & (LEAF_LPNS - 1);
        let h = self.dir[leaf as usize];
        let bits = if h == NONE { 0 } else { pool.bits(h) };
        let m = bits.count_ones();
        let rank = (bits & ((1 << bit) - 1)).count_ones();
        if bits & (1 << bit) != 0 {
            let at = h + HEADER_WORDS + rank;
            return Some(std::mem::replace(&mut pool.block_mut(at, 1)[0], ppn));
        }
        // A new override: the leaf moves to a block one word larger, the PPN at its rank.
        let words = HEADER_WORDS + m + 1;
        let new = pool.alloc(words);
        let bits = bits | 1 << bit;
        let mut buf = [0u32; MAX_BLOCK_WORDS as usize];
        buf[0] = region << DIR_BITS | leaf;
        buf[1] = bits as u32;
        buf[2] = (bits >> 32) as u32;
        let r = (HEADER_WORDS + rank) as usize;
        if h != NONE {
            let old = pool.block(h, words - 1);
            buf[HEADER_WORDS as usize..r].copy_from_slice(&old[HEADER_WORDS as usize..r]);
            buf[r + 1..words as usize].copy_from_slice(&old[r..]);
            pool.release(h, words - 1);
        } else {
            self.leaves += 1;
        }
        buf[r] = ppn;
        pool.block_mut(new, words)
            .copy_from_slice(&buf[..words as usize]);
        self.dir[leaf as usize] = new;
        self.len += 1;
        None
    }

    /// The overrides as `(offset, PPN)`, in offset order.
    pub fn entries<'a>(&'a self, pool: &'a Pool) -> impl Iterator<Item = (u32, u32)> + 'a {
        self.dir
            .iter()
            .enumerate()
            .filter(|&(_, &h)| h != NONE)
            .flat_map(move |(leaf, &h)| {
                let mut bits = pool.bits(h);
                let mut rank = 0;
                std::iter::from_fn(move || {
                    if bits == 0 {
                        return None;
                    }
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    let ppn = pool.word(h + HEADER_WORDS + rank);
                    rank += 1;
                    Some(((leaf as u32) << LEAF_BITS | b, ppn))
                })
            })
    }

    /// Gives the leaves' blocks back to the pool (the region turns dense).
    pub fn release(self, pool: &mut Pool) {
        for &h in self.dir.iter().filter(|&&h| h != NONE) {
            let m = pool.bits(h).count_ones();
            pool.release(h, HEADER_WORDS + m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_essays_region_costs_under_six_bytes_an_override() {
        let cost = Leaves::cost(1 << 15, 4_700, 512);
        assert_eq!(cost, 26_992);
        assert!(cost * 10 / 4_700 < 58, "{cost}");
    }

    #[test]
    fn a_chunks_tail_too_short_for_a_block_serves_a_shorter_one() {
        let mut pool = Pool::default();
        let mut used = 0u32;
        while used + MAX_BLOCK_WORDS <= CHUNK_WORDS {
            pool.alloc(MAX_BLOCK_WORDS);
            used += MAX_BLOCK_WORDS;
        }
        let tail = CHUNK_WORDS - used;
        assert!((MIN_BLOCK_WORDS..MAX_BLOCK_WORDS).contains(&tail), "{tail}");
        let second = pool.alloc(MAX_BLOCK_WORDS);
        assert_eq!(second >> CHUNK_BITS, 1, "a full block opens a new chunk");
        assert_eq!(pool.free_words(), u64::from(tail));
        let from_tail = pool.alloc(tail);
        assert_eq!(from_tail, used, "the first chunk's tail");
        assert_eq!(pool.free_words(), 0);
    }

    struct Regions(Vec<Leaves>);

    impl LeafRegions for Regions {
        fn leaves_mut(&mut self, region: u32) -> Option<&mut Leaves> {
            self.0.get_mut(region as usize)
        }
    }

    /// A run's leaves grow through every size, and the sizes they leave behind stop being
    /// asked for: without compaction the free blocks would outgrow the leaves (a model of this
    /// put them at 0.6 of the words in use at 4,700 overrides a region). With it they stay
    /// within their share, and every override survives the moves.
    #[test]
    fn compaction_bounds_the_free_blocks_of_growing_leaves() {
        let (n_regions, lpns) = (64u32, 1 << 15);
        let mut pool = Pool::default();
        let mut regions = Regions((0..n_regions).map(|_| Leaves::new(lpns)).collect());
        let mut rng = engine::stream(5, "leaves");
        let mut set = 0u64;
        let mut most_free = 0.0f64;
        while set < u64::from(n_regions) * 4_700 {
            let r = engine::rng::below(&mut rng, u64::from(n_regions)) as usize;
            let o = engine::rng::below(&mut rng, u64::from(lpns)) as u32;
            if regions.0[r]
                .set(&mut pool, r as u32, o, o ^ r as u32)
                .is_none()
            {
                set += 1;
            }
            maybe_compact(&mut pool, &mut regions);
            let share = pool.free_words() as f64 / pool.used_words() as f64;
            if pool.free_words() > COMPACT_MIN_WORDS {
                most_free = most_free.max(share);
            }
        }
        assert!(
            most_free <= 1.0 / COMPACT_FREE_PER_USED as f64 + 0.01,
            "{most_free}"
        );
        let carved = pool.carved_words() as f64;
        let used = pool.used_words() as f64;
        assert!(
            carved / used < 1.0 + 1.0 / COMPACT_FREE_PER_USED as f64,
            "{carved} {used}"
        );
        for (r, leaves) in regions.0.iter().enumerate() {
            for (o, p) in leaves.entries(&pool) {
                assert_eq!(p, o ^ r as u32);
                assert_eq!(leaves.get(&pool, o), Some(p));
            }
        }
    }

    proptest! {
        /// Several regions' leaves in one pool against a `BTreeMap` per region, compacted now
        /// and then: every lookup finds the last PPN set or nothing, `set` returns what was
        /// there, the entries come back in order, the counts hold, and the pool's blocks are
        /// exactly the leaves'.
        #[test]
        fn leaves_agree_with_a_btreemap(ops in proptest::collection::vec((0usize..3, 0u32..2_000, any::<u32>(), 0u32..50), 0..1_500)) {
            let lpns = 2_000;
            let mut pool = Pool::default();
            let mut regions = Regions((0..3).map(|_| Leaves::new(lpns)).collect());
            let mut models: Vec<BTreeMap<u32, u32>> = vec![BTreeMap::new(); 3];
            for (r, offset, ppn, compact) in ops {
                let before = regions.0[r].set(&mut pool, r as u32, offset, ppn);
                prop_assert_eq!(before, models[r].insert(offset, ppn));
                if compact == 0 {
                    let regions = &mut regions;
                    pool.compact(|owner, h| {
                        let l = regions.leaves_mut(owner >> DIR_BITS).unwrap();
                        l.dir[(owner & ((1 << DIR_BITS) - 1)) as usize] = h;
                    });
                }
                prop_assert_eq!(regions.0[r].get(&pool, offset), Some(ppn));
            }
            let mut words = 0u64;
            for (leaves, model) in regions.0.iter().zip(&models) {
                for o in 0..lpns {
                    prop_assert_eq!(leaves.get(&pool, o), model.get(&o).copied());
                }
                let entries: Vec<(u32, u32)> = leaves.entries(&pool).collect();
                let want: Vec<(u32, u32)> = model.iter().map(|(&o, &p)| (o, p)).collect();
                prop_assert_eq!(entries, want);
                let used: std::collections::BTreeSet<u32> = model.keys().map(|o| o >> LEAF_BITS).collect();
                prop_assert_eq!(leaves.len() as usize, model.len());
                prop_assert_eq!(leaves.leaves() as usize, used.len());
                words += (Leaves::cost(lpns, leaves.len(), leaves.leaves()) - leaves.dir_bytes()) / 4;
            }
            prop_assert_eq!(pool.used_words(), words);
            prop_assert!(pool.listed_words() <= pool.free_words());
            // Released, a region's blocks go back to the pool.
            let first = regions.0.swap_remove(0);
            let blocks = u64::from(HEADER_WORDS * first.leaves() + first.len());
            first.release(&mut pool);
            prop_assert_eq!(pool.used_words(), words - blocks);
        }
    }
}
