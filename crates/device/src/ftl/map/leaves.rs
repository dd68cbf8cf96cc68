//! A region written densely enough: its overrides in leaves of [`LEAF_LPNS`] LPNs, each a
//! bitmap of the LPNs it holds and their PPNs packed in offset order, carved from a pool of
//! equal-sized chunks.
//!
//! A region's hash table (`ftl/map.rs`) costs about 7.6 bytes an override, 6 of them the
//! slot's key and PPN at a load near 0.8. Once a region holds more than about 1,400 overrides
//! (one LPN in 23), most of its 64-LPN stretches hold at least one, and a leaf per stretch is
//! cheaper: the key becomes a bit of the leaf's bitmap and the PPN its 4 bytes, found by
//! ranking the bit (a popcount of the bitmap below it). A leaf region costs a directory of
//! one 4-byte handle a leaf (512 of them, 2 KiB), 8 bytes of bitmap a leaf that holds any
//! override, and 4 bytes an override. Worked example (`zssd`, 100 M 70/30 I/Os: about 4,700
//! distinct LPNs a region, every leaf holding some): 2,048 + 512 × 8 + 4,700 × 4 = 24,944
//! bytes, 5.3 bytes an override, where the hash table costs 7.6 (35.7 KB).
//!
//! A leaf is one block of `2 + m` 32-bit words (bitmap, then `m` PPNs). A write of an LPN the
//! leaf holds replaces its PPN in place; a new LPN takes a block one word larger, copies the
//! leaf into it with the PPN inserted at its rank (at most 66 words), and frees the old
//! block. Blocks come from [`Pool`]: chunks of [`CHUNK_WORDS`] words never returned, blocks
//! of each size on a free list of their own. Regions grow their leaves one word at a time
//! and the leaves of a region are spread over all sizes, so the block a leaf gives up is soon
//! taken by another leaf growing to its size: the pool's free blocks stay few, and no memory
//! is freed to the allocator as tables grow (the hash tables' growth, freeing each table for
//! one a quarter larger, leaves holes the allocator keeps). Chunks are 16 KiB, small enough
//! to be carved from the holes the regions' freed hash tables leave.

/// LPNs a leaf covers: one 64-bit bitmap.
pub const LEAF_LPNS: u32 = 64;
const LEAF_BITS: u32 = 6;
/// Words of a leaf block before its PPNs (the bitmap).
const HEADER_WORDS: u32 = 2;
/// The largest block: a full leaf.
const MAX_BLOCK_WORDS: u32 = HEADER_WORDS + LEAF_LPNS;
/// Words of a pool chunk (16 KiB): a handle is the chunk's index and the word within it.
const CHUNK_BITS: u32 = 12;
pub const CHUNK_WORDS: u32 = 1 << CHUNK_BITS;
/// No leaf (a directory entry) or no block (a free list's end).
const NONE: u32 = u32::MAX;

/// Chunks of words cut into blocks of 3 to [`MAX_BLOCK_WORDS`] words, with a free list per
/// size (see the module essay). `Default` is a pool of no chunks.
#[derive(Default)]
pub struct Pool {
    chunks: Vec<Box<[u32]>>,
    /// Words of the last chunk handed out.
    top: u32,
    /// Head of each size's free list (by words; [`NONE`] if empty, and in a pool with no
    /// chunks, all zero: see [`free_head`](Self::free_head)). A free block's first word
    /// holds the next.
    free: Vec<u32>,
    /// Words in blocks on the free lists.
    free_words: u64,
}

impl Pool {
    #[inline]
    fn word(&self, h: u32) -> u32 {
        self.chunks[(h >> CHUNK_BITS) as usize][(h & (CHUNK_WORDS - 1)) as usize]
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

    fn free_head(&mut self, words: u32) -> &mut u32 {
        if self.free.is_empty() {
            self.free = vec![NONE; MAX_BLOCK_WORDS as usize + 1];
        }
        &mut self.free[words as usize]
    }

    /// A block of `words` words (contents unspecified).
    fn alloc(&mut self, words: u32) -> u32 {
        debug_assert!((HEADER_WORDS + 1..=MAX_BLOCK_WORDS).contains(&words));
        let head = *self.free_head(words);
        if head != NONE {
            *self.free_head(words) = self.word(head);
            self.free_words -= u64::from(words);
            return head;
        }
        if self.chunks.is_empty() || self.top + words > CHUNK_WORDS {
            // The last chunk's tail, too short for this block, serves a shorter one later
            // (one or two words never do, but stay counted as free).
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

    /// Puts the block `h` of `words` words on its free list.
    fn release(&mut self, h: u32, words: u32) {
        let next = *self.free_head(words);
        self.block_mut(h, words)[0] = next;
        *self.free_head(words) = h;
        self.free_words += u64::from(words);
    }

    /// Bytes the pool holds: its chunks, used or free, and their index.
    pub fn bytes(&self) -> u64 {
        let chunk = u64::from(CHUNK_WORDS) * size_of::<u32>() as u64;
        self.chunks.len() as u64 * chunk
            + (self.chunks.capacity() * size_of::<Box<[u32]>>()) as u64
            + (self.free.capacity() * size_of::<u32>()) as u64
    }

    /// Words on the free lists (tests).
    #[cfg(test)]
    pub fn free_words(&self) -> u64 {
        self.free_words
    }

    /// Words handed out and not freed, by walking the free lists (tests).
    #[cfg(test)]
    pub fn used_words(&self) -> u64 {
        let mut free = 0u64;
        for (words, &head) in self.free.iter().enumerate() {
            let mut h = head;
            while h != NONE {
                free += words as u64;
                h = self.word(h);
            }
        }
        assert_eq!(free, self.free_words, "the free lists hold what they count");
        let carved = self.chunks.len().saturating_sub(1) as u64 * u64::from(CHUNK_WORDS)
            + u64::from(self.top);
        carved - free
    }
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
        Leaves {
            dir: vec![NONE; lpns.div_ceil(LEAF_LPNS) as usize].into_boxed_slice(),
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
        let head = pool.block(h, HEADER_WORDS);
        let bits = u64::from(head[0]) | u64::from(head[1]) << 32;
        let bit = offset & (LEAF_LPNS - 1);
        if bits & (1 << bit) == 0 {
            return None;
        }
        let rank = (bits & ((1 << bit) - 1)).count_ones();
        Some(pool.word(h + HEADER_WORDS + rank))
    }

    /// Sets `offset`'s PPN; returns its override before, if it had one.
    pub fn set(&mut self, pool: &mut Pool, offset: u32, ppn: u32) -> Option<u32> {
        let leaf = (offset >> LEAF_BITS) as usize;
        let bit = offset & (LEAF_LPNS - 1);
        let h = self.dir[leaf];
        let (bits, m) = if h == NONE {
            (0u64, 0u32)
        } else {
            let head = pool.block(h, HEADER_WORDS);
            let bits = u64::from(head[0]) | u64::from(head[1]) << 32;
            (bits, bits.count_ones())
        };
        let rank = (bits & ((1 << bit) - 1)).count_ones();
        if bits & (1 << bit) != 0 {
            let at = h + HEADER_WORDS + rank;
            let slot = &mut pool.block_mut(at, 1)[0];
            return Some(std::mem::replace(slot, ppn));
        }
        // A new override: the leaf moves to a block one word larger, the PPN at its rank.
        let words = HEADER_WORDS + m + 1;
        let new = pool.alloc(words);
        let bits = bits | 1 << bit;
        let mut buf = [0u32; MAX_BLOCK_WORDS as usize];
        buf[0] = bits as u32;
        buf[1] = (bits >> 32) as u32;
        if h != NONE {
            let old = pool.block(h, words - 1);
            let r = (HEADER_WORDS + rank) as usize;
            buf[HEADER_WORDS as usize..r].copy_from_slice(&old[HEADER_WORDS as usize..r]);
            buf[r + 1..words as usize].copy_from_slice(&old[r..]);
            pool.release(h, words - 1);
        } else {
            self.leaves += 1;
        }
        buf[(HEADER_WORDS + rank) as usize] = ppn;
        pool.block_mut(new, words)
            .copy_from_slice(&buf[..words as usize]);
        self.dir[leaf] = new;
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
                let head = pool.block(h, HEADER_WORDS);
                let mut bits = u64::from(head[0]) | u64::from(head[1]) << 32;
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
            let head = pool.block(h, HEADER_WORDS);
            let m = (u64::from(head[0]) | u64::from(head[1]) << 32).count_ones();
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
    fn the_essays_region_costs_about_five_bytes_an_override() {
        let cost = Leaves::cost(1 << 15, 4_700, 512);
        assert_eq!(cost, 24_944);
        assert!(cost * 10 / 4_700 < 54, "{cost}");
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
        assert!(tail > HEADER_WORDS && tail < MAX_BLOCK_WORDS, "{tail}");
        let second = pool.alloc(MAX_BLOCK_WORDS);
        assert_eq!(second >> CHUNK_BITS, 1, "a full block opens a new chunk");
        assert_eq!(pool.free_words(), u64::from(tail));
        let from_tail = pool.alloc(tail);
        assert_eq!(from_tail, used, "the first chunk's tail");
        assert_eq!(pool.free_words(), 0);
    }

    proptest! {
        /// Several regions' leaves in one pool against a `BTreeMap` per region: every lookup
        /// finds the last PPN set or nothing, `set` returns what was there, the entries come
        /// back in order, the counts hold, and the pool's blocks are exactly the leaves'.
        #[test]
        fn leaves_agree_with_a_btreemap(ops in proptest::collection::vec((0usize..3, 0u32..2_000, any::<u32>()), 0..1_500)) {
            let lpns = 2_000;
            let mut pool = Pool::default();
            let mut regions: Vec<Leaves> = (0..3).map(|_| Leaves::new(lpns)).collect();
            let mut models: Vec<BTreeMap<u32, u32>> = vec![BTreeMap::new(); 3];
            for (r, offset, ppn) in ops {
                let before = regions[r].set(&mut pool, offset, ppn);
                prop_assert_eq!(before, models[r].insert(offset, ppn));
                prop_assert_eq!(regions[r].get(&pool, offset), Some(ppn));
            }
            let mut words = 0u64;
            for (leaves, model) in regions.iter().zip(&models) {
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
            // Released, a region's blocks go back to the pool.
            let first = regions.swap_remove(0);
            let blocks = u64::from(HEADER_WORDS * first.leaves() + first.len());
            first.release(&mut pool);
            prop_assert_eq!(pool.used_words(), words - blocks);
        }
    }
}
