//! The exact footprint of a trace: how many distinct 4 KiB blocks its requests touch, per
//! device, in memory that grows with the footprint and never with the trace's length.
//!
//! ## Structure: a two-level radix over block numbers, like a page table
//! - A **chunk** is 2 MiB of one device's address space: [`CHUNK_BLOCKS`] = 512 blocks, one
//!   bit each, 64 B (one cache line).
//! - A **region** is [`REGION_CHUNKS`] = 32 chunks, 64 MiB: an array of 32 chunk numbers
//!   (128 B, 0 = not touched yet).
//! - A hash map takes `(device, region number)` to the region's slot; the region last used is
//!   kept aside, so a sequential stream never hashes.
//!
//! Worked example: a 4 KiB write at byte 3 221 225 472 (3 GiB) of device 1 is block 786 432,
//! chunk 1 536, region 48, chunk 0 of that region, bit 0 of the chunk. A random 4 KiB trace
//! over 800 GB touches up to 381 470 chunks (24 MB of bits) in 11 921 regions (1.5 MB of
//! slots, and a map of 12 K entries that stays in the cache). The hash map of chunks this
//! replaced had an entry per 2 MiB (381 K entries, about 9 MB): its probe missed the cache as
//! well as the chunk's bits, and on such a trace it made `trace stats` a third as fast
//! (`docs/traces.md`, "Speed", has the before and after of the `trace_stats` bench).
//!
//! ## Batching: overlapping the misses
//! Random requests miss the cache on their slot and on their chunk whatever the structure; what
//! can be had is several misses in flight at once. [`Footprint::add`] only queues the request's
//! block range; every [`BATCH_REQUESTS`] requests (and before the count is read) the queue is
//! applied in three short loops (regions, then slots, then bits) whose iterations do not
//! depend on each other, so the CPU overlaps their misses instead of taking one at a time
//! between two parsed lines.
//!
//! ## Memory
//! Per chunk touched 64 B; per region touched 128 B plus a map entry (about 24 B). A densely
//! touched 1 TB is 477 K chunks and 15 K regions, about 33 MB; a trace of N requests scattered
//! one per region over a huge address space holds at most N × 216 B. Requests are at most
//! `MAX_REQUEST_BYTES` (1 GiB, 512 chunks), so one request's walk is bounded.

use rustc_hash::FxHashMap;

/// Blocks of the footprint bitmap.
pub const FOOTPRINT_BLOCK_BYTES: u64 = 4096;
/// Blocks per chunk: 512 × 4 KiB = 2 MiB of address space in 64 B of bits (a cache line).
pub const CHUNK_BLOCKS: u64 = 512;
const CHUNK_WORDS: usize = (CHUNK_BLOCKS / 64) as usize;
/// Chunks per region: 32 × 2 MiB = 64 MiB in a 128 B slot (small enough that a sparse trace's
/// one request per region costs little, large enough that 800 GB is 12 K regions).
pub const REGION_CHUNKS: u64 = 32;
/// Requests queued before they are applied together (1024 × 24 B = 24 KiB of queue and
/// 16 KiB of resolved marks, in the L1/L2 cache; far more than the misses a core keeps in
/// flight).
pub const BATCH_REQUESTS: usize = 1024;

/// One queued request: `blocks` on `device`.
#[derive(Clone, Copy)]
struct Pending {
    device: u32,
    first_block: u64,
    end_block: u64,
}

/// Bits `first..end` (below [`CHUNK_BLOCKS`]) of a chunk to set: first of chunk `at` of
/// region `region`, then, once looked up, of chunk `chunk`.
#[derive(Clone, Copy)]
struct Marks {
    region: u32,
    at: u8,
    chunk: u32,
    first: u16,
    end: u16,
}

/// Distinct 4 KiB blocks touched; see the module essay.
#[derive(Default)]
pub struct Footprint {
    /// `(device, region number)` to its index in `regions` (never iterated, so its order
    /// cannot leak into results).
    region_of: FxHashMap<(u32, u64), u32>,
    /// Per region, its chunks' indices in `chunks` plus 1 (0: not touched).
    regions: Vec<[u32; REGION_CHUNKS as usize]>,
    chunks: Vec<[u64; CHUNK_WORDS]>,
    /// The region last used: `((device, region number), index)`.
    last_region: Option<((u32, u64), u32)>,
    pending: Vec<Pending>,
    /// The pending requests resolved to chunks (kept to reuse its allocation).
    marks: Vec<Marks>,
    blocks: u64,
}

impl Footprint {
    pub fn new() -> Footprint {
        Footprint {
            pending: Vec::with_capacity(BATCH_REQUESTS),
            ..Footprint::default()
        }
    }

    /// Notes the bytes `start..end` of `device` (`start < end`).
    pub fn add(&mut self, device: u32, start: u64, end: u64) {
        debug_assert!(start < end, "a request of positive length");
        self.pending.push(Pending {
            device,
            first_block: start / FOOTPRINT_BLOCK_BYTES,
            end_block: end.div_ceil(FOOTPRINT_BLOCK_BYTES),
        });
        if self.pending.len() >= BATCH_REQUESTS {
            self.apply();
        }
    }

    /// Distinct blocks touched so far.
    pub fn blocks(&mut self) -> u64 {
        self.apply();
        self.blocks
    }

    /// Applies the queued requests in three passes: find (or create) each one's regions,
    /// then its chunks, then set the bits. The last two passes are short loops of independent
    /// loads from scattered slots and chunks, which the CPU overlaps; in one pass, each
    /// request's hash lookup stood between two such loads and they went one at a time
    /// (`cargo bench -p workload --bench trace_stats -- mqsim/random`, run alternately at load
    /// 9: 134–140 MB/s of CPU time in one pass, 173–178 in two, 192–193 in three).
    fn apply(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        let mut marks = std::mem::take(&mut self.marks);
        for p in &pending {
            let mut block = p.first_block;
            while block < p.end_block {
                let chunk = block / CHUNK_BLOCKS;
                let chunk_start = chunk * CHUNK_BLOCKS;
                let chunk_end = (chunk_start + CHUNK_BLOCKS).min(p.end_block);
                marks.push(Marks {
                    region: self.region_index(p.device, chunk / REGION_CHUNKS),
                    at: (chunk % REGION_CHUNKS) as u8,
                    chunk: 0,
                    first: (block - chunk_start) as u16,
                    end: (chunk_end - chunk_start) as u16,
                });
                block = chunk_end;
            }
        }
        for m in marks.iter_mut() {
            let slot = &mut self.regions[m.region as usize][usize::from(m.at)];
            if *slot == 0 {
                self.chunks.push([0; CHUNK_WORDS]);
                *slot = u32::try_from(self.chunks.len()).expect("fewer than 2^32 chunks (8 EiB)");
            }
            m.chunk = *slot - 1;
        }
        for m in &marks {
            self.mark(m);
        }
        pending.clear();
        marks.clear();
        self.pending = pending;
        self.marks = marks;
    }

    /// The index in `regions` of `device`'s region `region`, created if new.
    fn region_index(&mut self, device: u32, region: u64) -> u32 {
        let key = (device, region);
        match self.last_region {
            Some((k, i)) if k == key => i,
            _ => {
                let n = self.regions.len() as u32;
                let i = *self.region_of.entry(key).or_insert(n);
                if i == n {
                    self.regions.push([0; REGION_CHUNKS as usize]);
                }
                self.last_region = Some((key, i));
                i
            }
        }
    }

    /// Sets the bits `m` names, counting the new ones.
    fn mark(&mut self, m: &Marks) {
        let bits = &mut self.chunks[m.chunk as usize];
        let (mut i, stop) = (u64::from(m.first), u64::from(m.end));
        // A word at a time.
        while i < stop {
            let (w, b) = ((i / 64) as usize, i % 64);
            let n = (64 - b).min(stop - i);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << b
            };
            self.blocks += u64::from((mask & !bits[w]).count_ones());
            bits[w] |= mask;
            i += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example() {
        let mut f = Footprint::new();
        f.add(1, 3 << 30, (3 << 30) + 4096);
        assert_eq!(f.blocks(), 1);
        assert_eq!(f.region_of.get(&(1, 48)), Some(&0));
        assert_eq!(f.regions[0][0], 1);
        assert_eq!(f.chunks[0][0], 1);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// Any requests, in batches or not: each block counted once, per device.
        #[test]
        fn counts_each_block_once(reqs in proptest::collection::vec((0u32..3, 0u64..1 << 40, 1u64..1 << 20), 1..2000)) {
            let mut f = Footprint::new();
            let mut naive = std::collections::BTreeSet::new();
            for (i, &(device, offset, len)) in reqs.iter().enumerate() {
                // Cluster half the requests near the start to make them overlap.
                let offset = if i % 2 == 0 { offset % (1 << 24) } else { offset };
                f.add(device, offset, offset + len);
                for b in offset / 4096..(offset + len).div_ceil(4096) {
                    naive.insert((device, b));
                }
                if i % 1000 == 7 {
                    proptest::prop_assert_eq!(f.blocks(), naive.len() as u64);
                }
            }
            proptest::prop_assert_eq!(f.blocks(), naive.len() as u64);
        }
    }
}
