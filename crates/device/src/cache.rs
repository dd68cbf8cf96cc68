//! The SSD's internal DRAM: a data cache with the write buffer inside it.
//!
//! ## What it models
//! Controller DRAM (1.5 GB on `zssd`, 512 MB on `nvme-tlc`) holds 4 KiB lines. Reads that hit
//! are served from DRAM; writes land in DRAM and are acknowledged at once (write-back), which is
//! why a TLC drive acknowledges a 4 KiB write in ~13 µs while its program takes milliseconds.
//!
//! The cache is set-associative (`ways` lines per set, set = LPN mod sets) with LRU
//! replacement within a set; `ways = 0` makes it fully associative — one set of every line,
//! LRU over the whole DRAM, the way SSD firmware keeps its data buffer (`cache_index.rs` has
//! the sources and the index that finds a line without scanning). `nvme-tlc` is fully
//! associative; `zssd` is 16-way, the organisation whose ways FlashShare's class split divides.
//! A line is *clean* (a copy of flash), *dirty* (newer than flash), *filling* (a read miss is
//! on its way from flash) or *evicting* (being programmed; still readable; a write to it
//! re-dirties it). Dirty lines are the write buffer: at most `write_buffer_bytes` of them. An
//! incoming write that needs a new dirty line when the buffer is full — or whose set has no
//! clean way left — must wait for an eviction (the *overflow stall*): the device programs the
//! oldest dirty lines to flash and the write proceeds when a program completes. The baseline
//! evicts only then ("when full"). A 16-way set fills long before the buffer does: the
//! FastDrain study's `vanilla-apache-upload` run (`ullstack sim --system config.toml --stack
//! vanilla` in its folder) with `device.cache.ways = 16` added stalled on full sets with the
//! buffer below 80 % of its 131,072 units (its `max_dirty_units`), so no completion could
//! report it at the 80 % watermark; fully associative, as `nvme-tlc` is, the same run fills it (131,072), as
//! device.md's "evicts only when full" has it.
//!
//! After a read command, the `prefetch_pages` units that follow it are read too (those not
//! cached or on their way) and cached clean: a miss's neighbours, and on a hit the window keeps
//! moving ahead. With `cache.prefetch = "ghost"` the size is chosen each epoch, per class when
//! the cache is split ("Class split and ghost prefetch" below).
//!
//! Worked example (`zssd`'s 16 ways on 512 MiB): 131,072 lines in 8,192 sets. LPN 1,000,000
//! falls in set 1,000,000 mod 8,192 = 576; a write to it waits if the 16 ways of set 576 are
//! all dirty, however empty the rest of the buffer. Fully associative (`nvme-tlc`: 131,072
//! lines in one set), a write waits only with the buffer full (131,072 dirty lines), for the
//! next eviction round: one 4-unit row per LUN, 512 units in all, whose first program (LSB,
//! 0.56 ms) frees the first lines.
//!
//! Eviction (write-back rounds, the idle flush, and the lines' side of them) is
//! `cache/writeback.rs`; sequential read-ahead is `cache/readahead.rs`; the counters are
//! `cache/stats.rs`. This file holds the lines: their states, lookup, replacement, fills and
//! writes.
//!
//! ## Per-class accounting
//! Each line remembers the class of the data it holds (`IoClass::index`, one byte per line):
//! the class of the read that filled it (a prefetch takes the class of the read that asked for
//! it) or of the last write into it. The per-class counters ([`ClassCacheStats`]) follow that
//! owner: `read_*`/`write_*` and `prefetch_hits` go to the class of the command that looked;
//! `lines_evicted` (a valid line replaced to make room) and `units_written_back` (a dirty unit
//! programmed) go to the owner of the line; `lines` and `dirty_units` are the owner's occupancy
//! now, kept exact at every change of a line (asserted by [`Cache::check_consistency`]). A write
//! into another class's line makes it the writer's, and its occupancy moves along.
//! Worked example: the throughput class fills LPN 7 (its `lines` 1), then a latency-critical
//! write rewrites it: the line is now latency-critical (`lines` 1, `dirty_units` 1; the
//! throughput class's 0); when its program finishes, the latency-critical class's
//! `units_written_back` is 1 and its `dirty_units` 0. Summed over the classes, `lines` is the
//! cache's valid lines, `dirty_units` the buffer's occupancy and `units_written_back` is
//! `units_evicted`. Counting costs a few adds on paths that already write the line.
//!
//! ## Class split and ghost prefetch (`cache.partition`, `cache.prefetch`)
//! Each is its own file: `cache_split.rs` divides the ways of every set between the classes and
//! moves the boundary each epoch; `ghost.rs` replays the commands on tag-only caches that each
//! prefetch a different amount and adopts the best each epoch. What this file adds for them:
//! [`Cache::note_command`] (called once per read or write command; it closes the epoch, counts
//! for the split and plays the command on the ghosts — one branch when both are off), victim
//! choice within the writer's or reader's partition, writes across the boundary
//! (`must_move`), the retention counter, and [`Cache::prefetch_pages_for`]. Both off (the
//! default), nothing in this file behaves differently: the golden summaries only gained the
//! per-class counters above.
//!
//! ## What it leaves out
//! Sub-4 KiB line fills (a partial write dirties the whole unit). The watermark drain driven
//! by write-back hints, and the oracle's unbounded buffer, are `drain.rs`'s (`cache.drain`).

mod readahead;
mod stats;
mod writeback;

pub use readahead::{ReadAhead, READAHEAD_STREAMS};
pub use stats::{CacheStats, ClassCacheStats};
pub use writeback::WriteBack;

use std::collections::VecDeque;
use std::num::NonZeroU32;

use engine::IoClass;

use crate::cache_index::{self, FullIndex, WayKey};
use crate::cache_split::Split;
use crate::config::{CacheConfig, Partition, Prefetch, MAP_UNIT_BYTES};
use crate::ghost::GhostPrefetch;
use crate::sys::{self, prefetch};

const VALID: u8 = 1;
const DIRTY: u8 = 2;
const EVICTING: u8 = 4;
const FILLING: u8 = 8;
/// Filled by prefetch and not read since (for prefetch-hit counting).
const PREFETCHED: u8 = 16;
/// Trimmed while evicting: the program in flight carries data the host deallocated. The line
/// serves reads as deallocated (version 0) until rewritten, and leaves the buffer when the
/// program ends or is aborted, without going back to dirty.
const TRIMMED: u8 = 32;
/// Rewritten while evicting, and its entry in the dirty order was passed over meanwhile (an
/// evicting line cannot join a round): when the program ends or is aborted, the line goes back
/// to the head of the dirty order. Without this a line rewritten during its program stayed
/// dirty with no entry, never to be evicted again: sequential writes of 4 overlapping jobs
/// left 73,000 such lines in zssd's buffer, which then stalled on full sets with every die idle.
const REQUEUE: u8 = 64;
// The fully associative index reads the same bits.
const _: () = assert!(VALID == cache_index::VALID && PREFETCHED == cache_index::PREFETCHED);

/// Tag of an invalid way (no LPN reaches it: user capacity stays below 2^32 − 1 units).
const NO_LPN: u32 = u32::MAX;

/// How a way's tag is stored: LPN + 1, so an invalid way ([`NO_LPN`]) is stored as 0 and a new
/// cache's tag array comes from zeroed memory (`vec![0; n]` asks the allocator for zeroed pages,
/// which the OS hands out untouched until a set is first used) instead of a memset of the whole
/// array: 1.5 GB of `zssd` DRAM is 393,216 ways, 1.5 MiB of tags written per run before the
/// first command otherwise. The map is a bijection on `u32` (wrapping), so nothing else moves.
#[inline]
const fn stored_tag(lpn: u32) -> u32 {
    lpn.wrapping_add(1)
}

/// The LPN (or [`NO_LPN`]) a stored tag stands for: the inverse of [`stored_tag`].
#[inline]
const fn tag_lpn(stored: u32) -> u32 {
    stored.wrapping_sub(1)
}
const _: () =
    assert!(stored_tag(NO_LPN) == 0 && tag_lpn(0) == NO_LPN && tag_lpn(stored_tag(7)) == 7);

/// Result of looking up a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadLookup {
    Hit {
        version: u32,
    },
    /// A fill for this LPN is in flight: wait for it.
    Filling,
    Miss,
}

/// Why a write could not be taken now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteBlock {
    /// The write buffer holds `write_buffer_bytes` of dirty data.
    BufferFull,
    /// Every way of the LPN's set is dirty, evicting or filling.
    SetFull,
}

/// Ways of one [`Block`] of the line store: a 16-way set (`zssd`'s) is one block.
const BLOCK_WAYS: usize = 16;

/// Sixteen consecutive ways' tags (as [`stored_tag`]), LRU stamps and flags, stored together:
/// `(tags, used, flags)`, 144 bytes. A tuple of arrays, not a struct, so that a new cache's
/// blocks come from the allocator's zeroed pages as plain arrays do (`vec!` of a tuple of
/// zero arrays asks for zeroed memory; of a struct it writes every byte).
type Block = ([u32; BLOCK_WAYS], [u32; BLOCK_WAYS], [u8; BLOCK_WAYS]);

/// The lines' tags, flags and LRU stamps are stored by blocks of 16 ways ([`Block`]), so that
/// what a lookup, a victim choice and a fill touch is one run of memory: a 16-way set is one
/// block, three adjacent 64-byte CPU cache lines on one page. (A random-read run on a 1.5 GB
/// cache misses the CPU cache on nearly every set it touches: as three separate arrays the
/// same three lines were three pages apart, each its own TLB entry; a struct per line made
/// five cache lines per lookup.) Versions, dirtying stamps and owners, which device-level
/// runs mostly leave alone, are arrays of their own.
pub struct Cache {
    /// Never 0.
    sets: NonZeroU32,
    /// [`SetOf`] for `sets`: the set of an LPN without a division.
    set_of: SetOf,
    ways: u32,
    /// Ways in all (`sets × ways`).
    lines: usize,
    /// Way `i` is way `i % 16` of block `i / 16`: its LPN, stored as [`stored_tag`] (0 when
    /// invalid; read it with [`Cache::tag`]), its LRU stamp (larger = more recently used) and
    /// its flags (VALID | DIRTY | EVICTING | FILLING | PREFETCHED | TRIMMED | REQUEUE).
    blocks: Vec<Block>,
    /// Version of the data held (data-integrity mode; 0 otherwise).
    version: Vec<u32>,
    /// Stamp of the dirtying that put the line in the dirty FIFO (lazy deletion key), stored
    /// when the line turns dirty ([`Cache::set_dirtied`]) and read only while it is dirty: a
    /// fill or a replacement leaves it as it was (on a 1.5 GB cache a store of 0 there was a
    /// memory miss on nearly every read miss of a run that writes too).
    dirtied: Vec<u32>,
    /// Whether `version` has held anything but 0: until then every store of a 0 into it is
    /// skipped ([`Cache::set_version`]), and the array is neither loaded nor written. Without
    /// data integrity no version is ever other than 0: on a 1.5 GB cache the array is a
    /// memory miss on nearly every read miss otherwise (the line's fill and replacement store
    /// 0s).
    versions_used: bool,
    /// Class of the data held (`IoClass::index`; meaningless when invalid); kept only once
    /// two classes have been stored (`owners`): read it with [`Cache::owner_of`].
    owner: Vec<u8>,
    /// Whether `owner` holds the owners, or one class owns every line stored so far.
    owners: Owners,
    clock: u32,
    dirty_units: u64,
    dirty_cap_units: u64,
    /// Dirty lines in the order they became dirty: `(lpn, dirtied stamp)`; stale entries skipped.
    dirty_fifo: VecDeque<(u32, u32)>,
    pub prefetch_pages: u32,
    pub stats: CacheStats,
    /// `cache.partition = "dynamic"`: the ways of each set split between the classes.
    split: Option<Split>,
    /// `cache.prefetch = "ghost"`: the ghosts that choose the prefetch size.
    ghost: Option<GhostPrefetch>,
    /// End of the adaptive mechanisms' open epoch, in ns (`cache.epoch_ns`).
    epoch_end_ns: u64,
    epoch_ns: u64,
    /// Class of the last write refused with `SetFull` (whose partition the eviction round
    /// that follows must free a way in).
    blocked_class: IoClass,
    /// `cache.ways = 0`: the one set's tag map and victim order (`cache_index.rs`).
    index: Option<FullIndex>,
}

/// Where a cache's line owners are (`Cache::owners`). A run whose commands are all of one class
/// (every device-level run: the thin host's are all `Throughput`) never needs the owner array:
/// no way's owner differs. The array is then neither read nor written, and a read miss touches
/// one line of the CPU's caches fewer (on a 1.5 GB cache, a memory miss). The first line stored
/// for a second class fills the array with the first class (a way never stored is invalid, and
/// an invalid way's owner is never read) and it holds the owners from then on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owners {
    /// No line stored yet: the array's zeros.
    Unset,
    /// Every line stored so far is this class's.
    One(u8),
    /// The array holds each way's owner.
    Array,
}

impl Cache {
    pub fn new(config: &CacheConfig) -> Cache {
        let total = config.dram_bytes / MAP_UNIT_BYTES;
        // `ways = 0`: fully associative, one set of every line (`cache_index.rs`).
        let ways = match config.ways {
            0 => u32::try_from(total).expect("config checks the cache's lines fit in 32 bits"),
            w => w,
        };
        let sets = NonZeroU32::new((total / ways as u64).max(1) as u32).expect("at least one set");
        let n = sets.get() as usize * ways as usize;
        Cache {
            sets,
            set_of: SetOf::new(sets),
            ways,
            lines: n,
            blocks: vec![
                (
                    [stored_tag(NO_LPN); BLOCK_WAYS],
                    [0; BLOCK_WAYS],
                    [0; BLOCK_WAYS]
                );
                n.div_ceil(BLOCK_WAYS)
            ],
            version: vec![0; n],
            dirtied: vec![0; n],
            versions_used: false,
            owner: vec![0; n],
            owners: Owners::Unset,
            clock: 0,
            dirty_units: 0,
            dirty_cap_units: config.write_buffer_bytes / MAP_UNIT_BYTES,
            dirty_fifo: VecDeque::new(),
            prefetch_pages: config.prefetch_pages,
            stats: CacheStats::default(),
            split: None,
            ghost: None,
            epoch_end_ns: config.epoch_ns,
            epoch_ns: config.epoch_ns,
            blocked_class: IoClass::Throughput,
            index: (config.ways == 0).then(|| FullIndex::new(ways)),
        }
        .with_adaptive(config)
    }

    /// Builds the class split and the ghosts the config asks for (`cache_split.rs`, `ghost.rs`).
    fn with_adaptive(mut self, config: &CacheConfig) -> Cache {
        if config.partition == Partition::Dynamic {
            // The split reads a set's owners whole, from the array.
            self.owners = Owners::Array;
            let split = Split::new(config);
            self.stats.partition = Some(split.stats());
            self.split = Some(split);
        }
        if config.prefetch == Prefetch::Ghost {
            let ways = self.split.as_ref().map(|s| {
                [
                    s.ways(IoClass::LatencyCritical),
                    s.ways(IoClass::Throughput),
                ]
            });
            let ghost = GhostPrefetch::new(config, self.sets.get(), ways);
            self.stats.ghost = Some(ghost.stats());
            self.ghost = Some(ghost);
        }
        self
    }

    fn set_range(&self, lpn: u32) -> std::ops::Range<usize> {
        let set = self.set_of.of(lpn) as usize;
        let w = self.ways as usize;
        set * w..set * w + w
    }

    #[inline(always)]
    fn find(&self, lpn: u32) -> Option<usize> {
        assert_ne!(lpn, NO_LPN, "LPN {NO_LPN} is the invalid-way tag");
        if let Some(index) = &self.index {
            return index.find(lpn);
        }
        if self.ways as usize == BLOCK_WAYS {
            let set = self.set_of.of(lpn) as usize;
            return way_of(&self.blocks[set].0, stored_tag(lpn)).map(|w| set * BLOCK_WAYS + w);
        }
        self.set_range(lpn).find(|&i| self.tag(i) == lpn)
    }

    /// The LPN way `i` holds ([`NO_LPN`] when invalid).
    #[inline(always)]
    fn tag(&self, i: usize) -> u32 {
        tag_lpn(self.blocks[i / BLOCK_WAYS].0[i % BLOCK_WAYS])
    }

    /// Stores `lpn` ([`NO_LPN`]: none) as way `i`'s tag.
    #[inline(always)]
    fn store_tag(&mut self, i: usize, lpn: u32) {
        self.blocks[i / BLOCK_WAYS].0[i % BLOCK_WAYS] = stored_tag(lpn);
    }

    /// Way `i`'s LRU stamp.
    #[inline(always)]
    fn used(&self, i: usize) -> u32 {
        self.blocks[i / BLOCK_WAYS].1[i % BLOCK_WAYS]
    }

    #[inline(always)]
    fn used_mut(&mut self, i: usize) -> &mut u32 {
        &mut self.blocks[i / BLOCK_WAYS].1[i % BLOCK_WAYS]
    }

    /// Way `i`'s flags.
    #[inline(always)]
    fn flags(&self, i: usize) -> u8 {
        self.blocks[i / BLOCK_WAYS].2[i % BLOCK_WAYS]
    }

    #[inline(always)]
    fn flags_mut(&mut self, i: usize) -> &mut u8 {
        &mut self.blocks[i / BLOCK_WAYS].2[i % BLOCK_WAYS]
    }

    #[inline(always)]
    fn has(&self, i: usize, f: u8) -> bool {
        self.flags(i) & f != 0
    }

    /// What the fully associative index knows of way `i`.
    #[inline]
    fn key(&self, i: usize) -> WayKey {
        WayKey {
            tag: self.tag(i),
            flags: self.flags(i),
            used: self.used(i),
        }
    }

    /// Way `i`'s key before a change, for [`reindex`](Self::reindex): only the fully
    /// associative cache has an index to keep (a set-associative one reads nothing here).
    #[inline]
    fn indexed_key(&self, i: usize) -> Option<WayKey> {
        self.index.as_ref().map(|_| self.key(i))
    }

    /// Way `i`'s tag, flags or stamp changed from `old` (its [`indexed_key`](Self::indexed_key)):
    /// the fully associative index follows (nothing for a set-associative cache).
    #[inline]
    fn reindex(&mut self, i: usize, old: Option<WayKey>) {
        if let Some(old) = old {
            let new = self.key(i);
            if let Some(index) = &mut self.index {
                index.update(i, old, new);
            }
        }
    }

    /// Counts against the write buffer.
    fn buffered(&self, i: usize) -> bool {
        self.has(i, DIRTY | EVICTING)
    }

    /// Puts `lpn` of `class` into way `i` (invalid or clean) with `flags`, used now.
    fn install(&mut self, i: usize, lpn: u32, flags: u8, stamp: u32, class: IoClass) {
        debug_assert!(
            !self.buffered(i),
            "way {i} replaced while in the write buffer"
        );
        if self.has(i, VALID) {
            let old = self.stats.class_at(self.owner_of(i));
            old.lines_evicted += 1;
            old.lines -= 1;
        }
        let old = self.indexed_key(i);
        self.store_tag(i, lpn);
        *self.flags_mut(i) = flags;
        *self.used_mut(i) = stamp;
        self.reindex(i, old);
        self.set_version(i, 0);
        self.store_owner(i, class.index() as u8);
        self.stats.class(class).lines += 1;
    }

    /// Empties way `i` (not in the write buffer).
    fn invalidate(&mut self, i: usize) {
        if self.has(i, VALID) {
            self.stats.class_at(self.owner_of(i)).lines -= 1;
        }
        let old = self.indexed_key(i);
        self.store_tag(i, NO_LPN);
        *self.flags_mut(i) = 0;
        *self.used_mut(i) = 0;
        self.reindex(i, old);
        self.set_version(i, 0);
    }

    /// Stores way `i`'s version; a 0 while every version is 0 is skipped (`versions_used`).
    #[inline(always)]
    fn set_version(&mut self, i: usize, version: u32) {
        if version != 0 || self.versions_used {
            self.version[i] = version;
            self.versions_used = true;
        }
    }

    /// Stores the stamp of way `i`'s dirtying (the line turns dirty now).
    #[inline(always)]
    pub(crate) fn set_dirtied(&mut self, i: usize, stamp: u32) {
        self.dirtied[i] = stamp;
    }

    /// The line in way `i` is now `class`'s data: its occupancy moves with it.
    #[inline]
    fn set_owner(&mut self, i: usize, class: IoClass) {
        let new = class.index() as u8;
        let old = self.owner_of(i);
        if old != new {
            let buffered = u64::from(self.buffered(i));
            let from = self.stats.class_at(old);
            from.lines -= 1;
            from.dirty_units -= buffered;
            let to = self.stats.class_at(new);
            to.lines += 1;
            to.dirty_units += buffered;
            self.store_owner(i, new);
        }
    }

    /// The class of way `i`'s data (`IoClass::index`; meaningless when the way is invalid).
    #[inline(always)]
    fn owner_of(&self, i: usize) -> u8 {
        match self.owners {
            Owners::Unset => 0,
            Owners::One(class) => class,
            Owners::Array => self.owner[i],
        }
    }

    /// Stores way `i`'s owner: into the array once it holds them, else nothing while the
    /// class is the one every stored line has; a second class fills the array first.
    #[inline(always)]
    fn store_owner(&mut self, i: usize, class: u8) {
        match self.owners {
            Owners::Array => self.owner[i] = class,
            Owners::One(one) if one == class => {}
            Owners::Unset => self.owners = Owners::One(class),
            Owners::One(one) => {
                self.owner.fill(one);
                self.owner[i] = class;
                self.owners = Owners::Array;
            }
        }
    }

    fn tick(&mut self) -> u32 {
        self.clock = self.clock.wrapping_add(1);
        self.clock
    }

    /// The least recently used line of `lpn`'s set that may be replaced (invalid or clean);
    /// split by class, one of `class`'s partition (`cache_split.rs`).
    fn victim(&self, lpn: u32, class: IoClass) -> Option<usize> {
        if let Some(index) = &self.index {
            return index.victim();
        }
        let set = self.set_range(lpn);
        let start = set.start;
        if self.ways as usize == BLOCK_WAYS {
            let (_, used, flags) = &self.blocks[start / BLOCK_WAYS];
            let Some(split) = &self.split else {
                return lru_victim(flags, used).map(|w| start + w);
            };
            debug_assert!(
                self.owners == Owners::Array,
                "a split cache keeps its owners"
            );
            let owner = <&[u8; 16]>::try_from(&self.owner[set]).expect("a 16-way set");
            return split_victim_16(split.way_mask(class), class, flags, used, owner)
                .map(|w| start + w);
        }
        if let Some(split) = &self.split {
            let v = split.victim(
                class,
                |w| self.flags(start + w) & VALID == 0,
                |w| self.flags(start + w) & !PREFETCHED == VALID,
                |w| self.used(start + w),
                |w| self.owner[start + w],
            );
            return v.map(|w| start + w);
        }
        lru_victim_scan(
            set.len(),
            |w| self.flags(start + w),
            |w| self.used(start + w),
        )
        .map(|w| start + w)
    }

    pub fn dirty_units(&self) -> u64 {
        self.dirty_units
    }

    pub fn write_buffer_capacity_units(&self) -> u64 {
        self.dirty_cap_units
    }

    /// Write-buffer occupancy in percent (what a completion entry can report).
    pub fn write_buffer_pct(&self) -> u8 {
        (self.dirty_units * 100 / self.dirty_cap_units.max(1)) as u8
    }

    /// Starts loading the CPU cache lines of `lpn`'s set (tags, flags, LRU stamps, and the
    /// versions and owners a miss's fill writes once they are kept, `versions_used` and
    /// `owners`; for a `write`, the dirtying stamps it stores): a speed hint with no effect on
    /// results.
    #[inline(always)]
    pub fn prefetch_set(&self, lpn: u32, write: bool) {
        if self.index.is_some() {
            return;
        }
        let start = self.set_range(lpn).start;
        sys::prefetch_all(&self.blocks[start / BLOCK_WAYS]);
        if self.versions_used {
            prefetch(&self.version[start]);
        }
        if write {
            prefetch(&self.dirtied[start]);
        }
        if self.owners == Owners::Array {
            prefetch(&self.owner[start]);
        }
    }

    /// Looks up a read of one unit.
    #[inline]
    pub fn read(&mut self, lpn: u32, class: IoClass) -> ReadLookup {
        let stamp = self.tick();
        match self.find(lpn) {
            Some(i) if self.has(i, FILLING) => {
                self.stats.class(class).read_hits += 1;
                ReadLookup::Filling
            }
            Some(i) => {
                let old = self.indexed_key(i);
                *self.used_mut(i) = stamp;
                self.reindex(i, old);
                self.stats.class(class).read_hits += 1;
                if self.has(i, PREFETCHED) {
                    // Not a change the index sees: prefetched or not, the line is replaceable.
                    *self.flags_mut(i) &= !PREFETCHED;
                    self.stats.prefetch_hits += 1;
                    self.stats.class(class).prefetch_hits += 1;
                }
                if self.split.is_some() {
                    self.note_split_hit(i, class);
                }
                ReadLookup::Hit {
                    version: self.version[i],
                }
            }
            None => {
                self.stats.class(class).read_misses += 1;
                ReadLookup::Miss
            }
        }
    }

    /// The version `lpn` holds if it is cached and not filling, without counting a lookup.
    pub fn peek_version(&self, lpn: u32) -> Option<u32> {
        self.find(lpn)
            .filter(|&i| !self.has(i, FILLING))
            .map(|i| self.version[i])
    }

    /// Whether `lpn` is cached or on its way (no flash read needed).
    pub fn contains(&self, lpn: u32) -> bool {
        self.find(lpn).is_some()
    }

    /// Reserves a line for a fill from flash for a read of `class`. `false` when the set (its
    /// partition, split by class) has no replaceable way (the data then goes to the host
    /// uncached).
    pub fn start_fill(&mut self, lpn: u32, prefetch: bool, class: IoClass) -> bool {
        // A second scan of the set on every miss: kept for debug-assertion builds.
        debug_assert!(
            self.find(lpn).is_none(),
            "fill of LPN {lpn}, already cached"
        );
        let stamp = self.tick();
        match self.victim(lpn, class) {
            Some(i) => {
                let flags = VALID | FILLING | if prefetch { PREFETCHED } else { 0 };
                self.install(i, lpn, flags, stamp, class);
                if prefetch {
                    self.stats.prefetch_fills += 1;
                    self.stats.class(class).prefetch_fills += 1;
                }
                true
            }
            None => false,
        }
    }

    /// A fill arrived with the flash data's `version`.
    #[inline]
    pub fn finish_fill(&mut self, lpn: u32, version: u32) {
        if let Some(i) = self.find(lpn) {
            if self.has(i, FILLING) {
                let old = self.indexed_key(i);
                *self.flags_mut(i) &= !FILLING;
                self.reindex(i, old);
                if !self.has(i, DIRTY) {
                    self.set_version(i, version);
                }
            }
        }
    }

    /// Takes a write of one unit into DRAM, or says why it must wait.
    pub fn write(&mut self, lpn: u32, version: u32, class: IoClass) -> Result<(), WriteBlock> {
        let stamp = self.tick();
        let i = match self.find(lpn) {
            Some(i) if self.must_move(i, class) => self.move_for_write(i, lpn, class, stamp)?,
            Some(i) => {
                if !self.buffered(i) && self.dirty_units >= self.dirty_cap_units {
                    return Err(WriteBlock::BufferFull);
                }
                self.stats.class(class).write_hits += 1;
                self.set_owner(i, class);
                i
            }
            None => {
                if self.dirty_units >= self.dirty_cap_units {
                    return Err(WriteBlock::BufferFull);
                }
                let i = self
                    .victim(lpn, class)
                    .ok_or_else(|| self.set_full(class))?;
                self.install(i, lpn, VALID, stamp, class);
                self.stats.class(class).write_misses += 1;
                i
            }
        };
        if !self.buffered(i) {
            self.dirty_units += 1;
            self.stats.class(class).dirty_units += 1;
            self.stats.max_dirty_units = self.stats.max_dirty_units.max(self.dirty_units);
        }
        if !self.has(i, DIRTY) {
            self.set_dirtied(i, stamp);
            self.dirty_fifo.push_back((lpn, stamp));
        }
        let old = self.indexed_key(i);
        *self.flags_mut(i) = (self.flags(i) | DIRTY) & !(FILLING | PREFETCHED | TRIMMED);
        *self.used_mut(i) = stamp;
        self.reindex(i, old);
        self.set_version(i, version);
        assert!(
            self.dirty_units <= self.dirty_cap_units,
            "{} dirty units exceed the buffer's {}",
            self.dirty_units,
            self.dirty_cap_units
        );
        Ok(())
    }

    /// A write of `class` found no replaceable way: remembered for the eviction round it
    /// starts ([`take_dirty_in_set`](Self::take_dirty_in_set)).
    #[cold]
    fn set_full(&mut self, class: IoClass) -> WriteBlock {
        self.blocked_class = class;
        WriteBlock::SetFull
    }

    /// Split by class: a write of `class` to the clean line in way `i` of the other class's
    /// partition moves the line into its own (`cache_split.rs`, "Writes across the boundary").
    #[inline]
    fn must_move(&self, i: usize, class: IoClass) -> bool {
        self.split
            .as_ref()
            .is_some_and(|s| !s.owns(i % self.ways as usize, class))
            && self.flags(i) & !PREFETCHED == VALID
    }

    /// Moves the clean line `i` of `lpn` to a way of `class`'s partition for a write.
    fn move_for_write(
        &mut self,
        i: usize,
        lpn: u32,
        class: IoClass,
        stamp: u32,
    ) -> Result<usize, WriteBlock> {
        if self.dirty_units >= self.dirty_cap_units {
            return Err(WriteBlock::BufferFull);
        }
        let to = self
            .victim(lpn, class)
            .ok_or_else(|| self.set_full(class))?;
        self.invalidate(i);
        self.install(to, lpn, VALID, stamp, class);
        self.stats.class(class).write_hits += 1;
        Ok(to)
    }

    /// Split by class: counts a read hit of `class` on its own line in a way the other class
    /// now owns (read-only retention).
    fn note_split_hit(&mut self, i: usize, class: IoClass) {
        let split = self.split.as_ref().expect("called when split");
        if self.owner_of(i) == class.index() as u8 && !split.owns(i % self.ways as usize, class) {
            let stats = self.stats.partition.as_mut().expect("split has stats");
            match class {
                IoClass::LatencyCritical => stats.lc_retained_hits += 1,
                IoClass::Throughput => stats.tp_retained_hits += 1,
            }
        }
    }

    /// Whether the class split or the ghosts are on (then every read and write command goes
    /// through [`note_command`](Self::note_command)).
    #[inline]
    pub fn is_adaptive(&self) -> bool {
        self.split.is_some() || self.ghost.is_some()
    }

    /// A read or write command of `units` 4 KiB units from `first` by `class` reaches the
    /// cache at `now_ns`: closes the adaptive mechanisms' epoch if it is over, then counts the
    /// command for the split and plays it on the ghosts. Nothing when both are off.
    #[inline]
    pub fn note_command(
        &mut self,
        now_ns: u64,
        write: bool,
        first: u32,
        units: u32,
        class: IoClass,
    ) {
        if !self.is_adaptive() {
            return;
        }
        if now_ns >= self.epoch_end_ns {
            self.close_epoch(now_ns);
        }
        if let Some(split) = &mut self.split {
            split.count(class, units);
        }
        if let Some(ghost) = &mut self.ghost {
            if write {
                ghost.on_write(class, first, units);
            } else {
                ghost.on_read(class, first, units);
            }
        }
    }

    /// The epoch ending at `epoch_end_ns` is over (`now_ns` is past it): the split moves its
    /// boundary (and the ghosts follow it), the ghosts choose. Epochs without commands after
    /// it change nothing and are skipped.
    fn close_epoch(&mut self, now_ns: u64) {
        if let (Some(split), Some(stats)) = (&mut self.split, &mut self.stats.partition) {
            let before = split.ways(IoClass::LatencyCritical);
            split.close_epoch(stats);
            if split.ways(IoClass::LatencyCritical) != before {
                if let Some(ghost) = &mut self.ghost {
                    for class in IoClass::ALL {
                        ghost.set_ways(class, split.ways(class));
                    }
                }
            }
        }
        if let (Some(ghost), Some(stats)) = (&mut self.ghost, &mut self.stats.ghost) {
            ghost.close_epoch(stats);
        }
        let behind = (now_ns - self.epoch_end_ns) / self.epoch_ns;
        self.epoch_end_ns += (behind + 1) * self.epoch_ns;
    }

    /// Pages a read of `class` prefetches after it: `prefetch_pages`, or the ghosts' choice.
    #[inline]
    pub fn prefetch_pages_for(&self, class: IoClass) -> u32 {
        match &self.ghost {
            None => self.prefetch_pages,
            Some(g) => g.pages(class),
        }
    }

    /// Ways of every set each class may fill (`IoClass::index`): all of them when shared.
    pub fn ways_by_class(&self) -> [u32; 2] {
        match &self.split {
            None => [self.ways; 2],
            Some(s) => IoClass::ALL.map(|c| s.ways(c)),
        }
    }

    /// Whether the ways are split by class (a write blocked by a full partition may then be
    /// unblocked by a fill completing, not only by an eviction).
    pub fn is_split(&self) -> bool {
        self.split.is_some()
    }

    /// Drops a unit (TRIM). Evicting lines stay until their program finishes.
    pub fn trim(&mut self, lpn: u32) {
        if let Some(i) = self.find(lpn) {
            if self.has(i, EVICTING) {
                // Still counted until the program finishes. The line stays (the eviction's
                // bookkeeping needs it) but its data is gone: reads see it deallocated.
                *self.flags_mut(i) = (self.flags(i) & !(DIRTY | REQUEUE)) | TRIMMED;
                self.set_version(i, 0);
                return;
            }
            if self.has(i, DIRTY) {
                self.dirty_units -= 1;
                self.stats.class_at(self.owner_of(i)).dirty_units -= 1;
                let old = self.indexed_key(i);
                *self.flags_mut(i) &= !DIRTY;
                self.reindex(i, old);
            }
            if !self.has(i, FILLING) {
                self.invalidate(i);
            }
        }
    }

    /// Checks the buffer accounting against the lines (tests).
    pub fn check_consistency(&self) -> Result<(), String> {
        if let Some(i) = (0..self.lines).find(|&i| (self.tag(i) != NO_LPN) != self.has(i, VALID)) {
            return Err(format!(
                "way {i}: tag {} disagrees with valid flag {}",
                self.tag(i),
                self.has(i, VALID)
            ));
        }
        if let Some(index) = &self.index {
            index.check((0..self.lines).map(|i| self.key(i)))?;
        }
        let buffered = (0..self.lines)
            .filter(|&i| self.has(i, VALID) && self.buffered(i))
            .count() as u64;
        if buffered != self.dirty_units {
            return Err(format!(
                "{buffered} lines dirty or evicting but the buffer counts {}",
                self.dirty_units
            ));
        }
        // Every dirty line can be found for eviction: it has a live entry in the dirty order
        // (its LPN with the stamp it was dirtied at), or is marked to requeue when its program
        // ends.
        let live: std::collections::HashSet<(u32, u32)> = self.dirty_fifo.iter().copied().collect();
        if let Some(i) = (0..self.lines).find(|&i| {
            self.has(i, DIRTY)
                && !self.has(i, REQUEUE)
                && !live.contains(&(self.tag(i), self.dirtied[i]))
        }) {
            return Err(format!(
                "way {i} (LPN {}) is dirty but nothing will evict it: no entry in the dirty order",
                self.tag(i)
            ));
        }
        if self.dirty_units > self.dirty_cap_units {
            return Err(format!(
                "{} dirty units exceed the buffer's {}",
                self.dirty_units, self.dirty_cap_units
            ));
        }
        for class in IoClass::ALL {
            let mine = |i: &usize| self.has(*i, VALID) && self.owner_of(*i) == class.index() as u8;
            let lines = (0..self.lines).filter(mine).count() as u64;
            let dirty = (0..self.lines)
                .filter(mine)
                .filter(|&i| self.buffered(i))
                .count() as u64;
            let s = self.stats.of(class);
            if (lines, dirty) != (s.lines, s.dirty_units) {
                return Err(format!(
                    "{} holds {lines} lines ({dirty} buffered) but counts {} ({})",
                    class.name(),
                    s.lines,
                    s.dirty_units
                ));
            }
        }
        Ok(())
    }
}

/// `lpn % sets` by two multiplications instead of a division (Lemire, Kaser and Kurz, "Faster
/// remainder by direct computation", 2019: with a 64-bit `magic` = ⌊(2^64 − 1) / d⌋ + 1 the
/// remainder of every 32-bit numerator by a 32-bit `d` is exact). A read finds its set three
/// or four times (prefetch at submit, lookup, fill, fill's end), and a 32-bit division costs
/// tens of cycles where the two multiplications cost a few. Same answer as `%`
/// (`tests::set_of_is_the_remainder`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SetOf {
    magic: u64,
    sets: u64,
}

impl SetOf {
    pub(crate) fn new(sets: NonZeroU32) -> SetOf {
        let d = u64::from(sets.get());
        // For d = 1 the sum wraps to 0, and every remainder is 0, as it must be.
        SetOf {
            magic: (u64::MAX / d).wrapping_add(1),
            sets: d,
        }
    }

    /// `lpn % sets`.
    #[inline(always)]
    pub(crate) fn of(self, lpn: u32) -> u32 {
        let low = self.magic.wrapping_mul(u64::from(lpn));
        ((u128::from(low) * u128::from(self.sets)) >> 64) as u32
    }
}

/// The way of a set whose stored tag is `tag` (tags are unique within a set; the caller passes
/// [`stored_tag`] of the LPN it looks for). A 16-way set (`zssd`'s)
/// is compared whole by [`sys::ways_matching`] (four vector compares on x86-64, no branch per
/// way); other sizes are scanned. Same answer either way (`tests::set_scans_agree`).
#[inline]
fn way_of(tags: &[u32], tag: u32) -> Option<usize> {
    if let Ok(tags) = <&[u32; 16]>::try_from(tags) {
        let mask = sys::ways_matching(tags, tag);
        return (mask != 0).then(|| mask.trailing_zeros() as usize);
    }
    tags.iter().position(|&t| t == tag)
}

/// The way of a set to replace: the first invalid one, else the least recently used clean one
/// (by `used`; the first of equals), else none. A 16-way set's flags are classified whole by
/// [`sys::bytes_where`] and only its clean ways' stamps are compared; other sizes go way by way
/// ([`lru_victim_scan`], the same answer: `tests::set_scans_agree`).
#[inline]
fn lru_victim(flags: &[u8; 16], used: &[u32; 16]) -> Option<usize> {
    let invalid = sys::bytes_where(flags, VALID, 0);
    if invalid != 0 {
        return Some(invalid.trailing_zeros() as usize);
    }
    let clean = sys::bytes_where(flags, !PREFETCHED, VALID);
    if clean == 0 {
        return None;
    }
    Some(lru_of(clean, used))
}

/// The first least recently used way among the ways set in `ways` (not empty).
///
/// Without a branch per way: each way's key is its stamp and its number (`used << 4 | w`, a
/// way not in `ways` the largest key), and the smallest key is the least recently used way,
/// the first of equals. A scan that kept the best way so far branched on every compare of
/// random stamps, and the CPU mispredicted several of them per victim (cachegrind's branch
/// simulation: 1.65 mispredicted branches per call).
#[inline]
fn lru_of(ways: u32, used: &[u32; 16]) -> usize {
    debug_assert!(
        ways != 0 && ways >> 16 == 0,
        "ways {ways:#x} of a 16-way set"
    );
    let mut best = u64::MAX;
    for (w, &stamp) in used.iter().enumerate() {
        let key = if ways & (1 << w) != 0 {
            u64::from(stamp) << 4 | w as u64
        } else {
            u64::MAX
        };
        best = best.min(key);
    }
    (best & 0xF) as usize
}

/// [`Split::victim`] of a 16-way set whose partition for `class` is `part` (a way mask):
/// flags and owners classified whole by [`sys::bytes_where`], and only the candidates'
/// stamps compared. The same answer (`tests::split_victims_agree`).
#[inline]
fn split_victim_16(
    part: u32,
    class: IoClass,
    flags: &[u8; 16],
    used: &[u32; 16],
    owner: &[u8; 16],
) -> Option<usize> {
    let invalid = sys::bytes_where(flags, VALID, 0) & part;
    if invalid != 0 {
        return Some(invalid.trailing_zeros() as usize);
    }
    let clean = sys::bytes_where(flags, !PREFETCHED, VALID) & part;
    if clean == 0 {
        return None;
    }
    let foreign = clean & !sys::bytes_where(owner, u8::MAX, class.index() as u8);
    Some(lru_of(if foreign != 0 { foreign } else { clean }, used))
}

/// [`lru_victim`] for a set of any size, way by way: `flags(w)` and `used(w)` are way `w`'s.
fn lru_victim_scan(
    ways: usize,
    flags: impl Fn(usize) -> u8,
    used: impl Fn(usize) -> u32,
) -> Option<usize> {
    if let Some(w) = (0..ways).find(|&w| flags(w) & VALID == 0) {
        return Some(w);
    }
    (0..ways)
        .filter(|&w| flags(w) & !PREFETCHED == VALID)
        .min_by_key(|&w| used(w))
}

#[cfg(test)]
pub(crate) mod tests;
