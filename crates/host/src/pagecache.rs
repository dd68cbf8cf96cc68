//! The page cache: buffered reads and writes, read-ahead, dirty pages and their write-back.
//!
//! ## What it models
//! Linux keeps file data in 4 KiB pages indexed by (file, page number) — here each file's
//! `index::PageIndex`, a two-level table as Linux's xarray is. This cache has a fixed
//! capacity (host memory minus a reserve) and evicts the least recently used *clean* page when
//! it needs room (pages that are dirty, under write-back or being read are skipped and rotated,
//! as reclaim does).
//!
//! - **Reads** look every page up. A page that is present is copied to the user; a page being
//!   read by someone else is waited for; missing pages become read bios (contiguous runs, split
//!   at `blk.max_request_bytes`), inserted locked. A read that continues where the thread's
//!   previous read ended is *sequential*: read-ahead then also fetches the window after it
//!   (start 4 × the request, doubling on each sequential read, at most `read_ahead_max_bytes`),
//!   asynchronously — the reader waits only for its own pages.
//! - **Writes** (whole pages) allocate missing pages and mark them dirty. A dirty page remembers
//!   its *owner class* (the class of the process that dirtied it), so write-back I/O carries the
//!   writer's class even though a kernel thread issues it.
//! - **Write-back** and **fsync** turn dirty pages back into writes; when they run and how
//!   is `writeback`'s essay (with the worked example of the arm8-4g thresholds). This module
//!   keeps the pages' flags, the per-file write-back cursors, the files a pass visits, and the
//!   thresholds (`dirty_background_ratio_pct`, `dirty_ratio_pct`, the freerun point halfway
//!   between, and the write-back chunk that follows the dirty limit).
//!
//! Worked example (`arm8`: 1.5 GiB of cache = 393 216 pages): the background threshold is
//! 3 % = 11 796 pages (46 MiB), the foreground one 5 % = 19 660 pages (77 MiB), the freerun
//! point 15 728 pages.
//!
//! ## Adaptive dirty thresholds (`pagecache.adaptive_dirty`)
//! Two sets of thresholds: the *low* set (`dirty_background_ratio_pct` 3 %, `dirty_ratio_pct`
//! 5 %, the default) and the *high* set (`adaptive_dirty_background_ratio_pct` 5 %,
//! `adaptive_dirty_ratio_pct` 10 %). Every completion entry carries the device's write-buffer
//! occupancy; when it reports the buffer at or above `adaptive_buffer_high_pct` (80, the
//! device's high watermark) the cache switches to the high set — write-back stops until dirty
//! pages reach the higher thresholds, so the device is not fed a wave it cannot absorb — and
//! when it reports the buffer below `adaptive_buffer_low_pct` (20) it switches back and the
//! flusher is kicked, so flushing resumes. The status is applied when the entry is delivered
//! to the host (at the entry's time, before the host runs its next event).
//!
//! Worked example (`arm8-4g`: 3 GiB of cache = 786 432 pages): the low set starts background
//! write-back at 23 592 dirty pages and blocks writers at 39 321; after an entry reports the
//! buffer at 85 % the thresholds are 39 321 and 78 643, so a flusher that was writing back
//! (dirty above 23 592 but below 39 321) stops at the end of its current pass.
//!
//! Conservation (tests): `pages_dirtied = pages_written_back + dirty pages + pages under
//! write-back`; after the run drains, nothing is under write-back.
//!
//! ## What it leaves out
//! Active/inactive LRU lists (one LRU), partial-page writes (profiles issue whole pages),
//! coherence between direct and buffered I/O to the same pages (each process has its own file),
//! metadata and journaling I/O, and direct reclaim stalls (if no clean page can be evicted the
//! cache overshoots and counts it).
//!
//! Config keys: `pagecache.*`.

use std::collections::VecDeque;

use engine::{IoClass, SimTime};
use serde::{Deserialize, Serialize};

mod index;
use index::PageIndex;
pub use index::NIL;

/// A write-back chunk is this fraction of the dirty limit (Linux `DIRTY_SCOPE`,
/// include/linux/writeback.h).
pub const DIRTY_SCOPE: u64 = 8;

const UPTODATE: u8 = 1;
const DIRTY: u8 = 2;
const WRITEBACK: u8 = 4;
const LOCKED: u8 = 8;

#[derive(Clone, Copy, Debug)]
struct Page {
    key: u64,
    prev: u32,
    next: u32,
    flags: u8,
    /// Owner class of the dirty data (valid while DIRTY).
    class: IoClass,
    /// The read bio filling the page (valid while LOCKED).
    bio: u32,
}

/// Per-file state.
#[derive(Clone, Debug)]
pub struct FileState {
    /// First 512-byte sector of the file on the device.
    pub base_sector: u64,
    pub pages: u64,
    dirty_bits: Vec<u64>,
    /// The file's cached pages.
    index: PageIndex,
    pub dirty_pages: u64,
    /// Pages of this file under write-back.
    pub writeback_pages: u64,
    /// When the file went from clean to dirty (Linux `dirtied_when`).
    pub dirtied_at: Option<SimTime>,
    /// Where the next write-back scan starts (Linux `writeback_index`).
    cursor: u64,
}

/// What a read found, page by page, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Hit,
    /// Being read by this bio.
    InFlight {
        bio: u32,
    },
    Miss,
}

/// Counters split by class (index = `IoClass::index`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PageCacheClassStats {
    pub read_hits: u64,
    pub read_misses: u64,
    pub readahead_pages: u64,
    pub pages_dirtied: u64,
    pub pages_written_back: u64,
    pub throttled_writes: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PageCacheStats {
    pub capacity_pages: u64,
    pub resident_pages: u64,
    pub dirty_pages: u64,
    pub writeback_pages: u64,
    pub evictions: u64,
    /// Insertions that found no clean page to evict (the cache overshot its capacity).
    pub reclaim_overshoots: u64,
    pub writeback_waves: u64,
    /// Pages the flusher's waves wrote back (fsync's are not in it).
    pub writeback_wave_pages: u64,
    /// Pages the waves' victimization hints announced (`pagecache.victim_hint`; 0 when off).
    pub writeback_hinted_pages: u64,
    /// fsync calls (each writes back its file and waits).
    pub fsyncs: u64,
    /// Switches of the dirty-ratio set (`pagecache.adaptive_dirty`; absent when off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive_dirty: Option<AdaptiveDirtyStats>,
    pub latency_critical: PageCacheClassStats,
    pub throughput: PageCacheClassStats,
}

impl PageCacheStats {
    pub fn class_mut(&mut self, c: IoClass) -> &mut PageCacheClassStats {
        match c {
            IoClass::LatencyCritical => &mut self.latency_critical,
            IoClass::Throughput => &mut self.throughput,
        }
    }
}

/// Which dirty-ratio set is in force (`pagecache.adaptive_dirty`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirtySet {
    /// `dirty_ratio_pct` / `dirty_background_ratio_pct` (5 % / 3 %): flush early.
    Low,
    /// `adaptive_dirty_ratio_pct` / `adaptive_dirty_background_ratio_pct` (10 % / 5 %): the
    /// device's buffer is nearly full, hold dirty pages in memory instead.
    High,
}

/// Counters of the adaptive thresholds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AdaptiveDirtyStats {
    pub switches_to_high: u64,
    pub switches_to_low: u64,
    /// The set in force at the end of the run.
    pub set: Option<DirtySet>,
}

/// The adaptive dirty thresholds' state: the two sets, in pages, and the buffer watermarks.
#[derive(Clone, Debug)]
struct Adaptive {
    set: DirtySet,
    /// `(background, limit)` pages of each set.
    low: (u64, u64),
    high: (u64, u64),
    buffer_high_pct: u8,
    buffer_low_pct: u8,
    stats: AdaptiveDirtyStats,
}

/// Per-thread read-ahead state (Linux `file_ra_state`, one file per thread).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadAhead {
    /// Page after the previous read.
    pub next_page: u64,
    /// Current window, pages (0: no sequential stream yet).
    pub window: u64,
    /// Pages up to here have been read ahead.
    pub ahead_end: u64,
}

pub struct PageCache {
    pages: Vec<Page>,
    free: Vec<u32>,
    lru_head: u32,
    lru_tail: u32,
    files: Vec<FileState>,
    capacity: u64,
    resident: u64,
    dirty: u64,
    writeback: u64,
    stats: PageCacheStats,
    read_ahead_max_pages: u64,
    background_pages: u64,
    limit_pages: u64,
    adaptive: Option<Adaptive>,
    /// A write-back found every dirty page of its file already under write-back.
    writeback_blocked: bool,
}

/// Pages per file the key packs (`add_file` asserts the bound; callers stay inside their file).
const FILE_MAX_PAGES: u64 = 1 << 40;

fn key(file: u32, page: u64) -> u64 {
    debug_assert!(page < FILE_MAX_PAGES, "page {page} of file {file}");
    ((file as u64) << 40) | page
}

/// The file and page a key packs.
fn unkey(key: u64) -> (u32, u64) {
    ((key >> 40) as u32, key & (FILE_MAX_PAGES - 1))
}

impl PageCache {
    /// The page cache's counters so far (the gauges as of their last update).
    pub fn stats(&self) -> &PageCacheStats {
        &self.stats
    }

    /// Counts one buffered read of `class`: pages found, pages missed, pages read ahead.
    pub(crate) fn count_read(&mut self, class: IoClass, hits: u64, misses: u64, ahead: u64) {
        let s = self.stats.class_mut(class);
        s.read_hits += hits;
        s.read_misses += misses;
        s.readahead_pages += ahead;
    }

    /// Counts a buffered write of `class` throttled above the dirty limit.
    pub(crate) fn count_throttled_write(&mut self, class: IoClass) {
        self.stats.class_mut(class).throttled_writes += 1;
    }

    /// Counts an fsync call.
    pub(crate) fn count_fsync(&mut self) {
        self.stats.fsyncs += 1;
    }

    /// Counts a write-back wave, announced by a victimization hint of `hinted_pages` pages
    /// (`None`: no hint).
    pub(crate) fn count_wave(&mut self, hinted_pages: Option<u64>) {
        self.stats.writeback_waves += 1;
        if let Some(p) = hinted_pages {
            self.stats.writeback_hinted_pages += p;
        }
    }

    /// Counts `pages` the flusher's wave takes to write back.
    pub(crate) fn count_wave_pages(&mut self, pages: u64) {
        self.stats.writeback_wave_pages += pages;
    }

    pub fn new(
        capacity_pages: u64,
        read_ahead_max_bytes: u64,
        bg_pct: u32,
        ratio_pct: u32,
    ) -> Self {
        let prealloc = capacity_pages.min(1 << 20) as usize;
        PageCache {
            pages: Vec::with_capacity(prealloc),
            free: Vec::new(),
            lru_head: NIL,
            lru_tail: NIL,
            files: Vec::new(),
            capacity: capacity_pages,
            resident: 0,
            dirty: 0,
            writeback: 0,
            stats: PageCacheStats {
                capacity_pages,
                ..Default::default()
            },
            read_ahead_max_pages: (read_ahead_max_bytes / crate::PAGE_BYTES).max(1),
            background_pages: capacity_pages * bg_pct as u64 / 100,
            limit_pages: capacity_pages * ratio_pct as u64 / 100,
            adaptive: None,
            writeback_blocked: false,
        }
    }

    /// Turns on the adaptive thresholds when `cfg.adaptive_dirty` says so; starts in the low
    /// set (the thresholds `new` was given).
    pub fn with_adaptive(mut self, cfg: &crate::config::PageCacheConfig) -> Self {
        if cfg.adaptive_dirty == crate::config::Switch::On {
            let pages = |pct: u32| self.capacity * pct as u64 / 100;
            self.adaptive = Some(Adaptive {
                set: DirtySet::Low,
                low: (self.background_pages, self.limit_pages),
                high: (
                    pages(cfg.adaptive_dirty_background_ratio_pct),
                    pages(cfg.adaptive_dirty_ratio_pct),
                ),
                buffer_high_pct: cfg.adaptive_buffer_high_pct,
                buffer_low_pct: cfg.adaptive_buffer_low_pct,
                stats: AdaptiveDirtyStats {
                    set: Some(DirtySet::Low),
                    ..AdaptiveDirtyStats::default()
                },
            });
        }
        self
    }

    /// A completion entry reported the device's write buffer at `pct` percent: switches to the
    /// high set at or above the buffer's high watermark, back to the low set below its low
    /// watermark. Returns the new set when it changed (`None` when off or unchanged).
    pub fn on_buffer_status(&mut self, pct: u8) -> Option<DirtySet> {
        let a = self.adaptive.as_mut()?;
        let next = match a.set {
            DirtySet::Low if pct >= a.buffer_high_pct => DirtySet::High,
            DirtySet::High if pct < a.buffer_low_pct => DirtySet::Low,
            _ => return None,
        };
        a.set = next;
        let (background, limit) = match next {
            DirtySet::Low => {
                a.stats.switches_to_low += 1;
                a.low
            }
            DirtySet::High => {
                a.stats.switches_to_high += 1;
                a.high
            }
        };
        a.stats.set = Some(next);
        assert!(
            background <= limit,
            "dirty thresholds: background {background} pages above the limit {limit}"
        );
        self.background_pages = background;
        self.limit_pages = limit;
        Some(next)
    }

    /// The dirty-ratio set in force (`None` when the thresholds do not adapt).
    pub fn dirty_set(&self) -> Option<DirtySet> {
        self.adaptive.as_ref().map(|a| a.set)
    }

    /// File `f`'s state, to read: only the page cache's operations change it.
    pub fn file(&self, f: u32) -> &FileState {
        &self.files[f as usize]
    }

    /// Every file's state, in file order.
    pub fn files(&self) -> &[FileState] {
        &self.files
    }

    /// Adds a file of `pages` pages starting at device sector `base_sector`.
    pub fn add_file(&mut self, base_sector: u64, pages: u64) -> u32 {
        assert!(
            pages <= FILE_MAX_PAGES,
            "file of {pages} pages: at most {FILE_MAX_PAGES}"
        );
        self.files.push(FileState {
            base_sector,
            pages,
            dirty_bits: vec![0; pages.div_ceil(64) as usize],
            index: PageIndex::new(pages),
            dirty_pages: 0,
            writeback_pages: 0,
            dirtied_at: None,
            cursor: 0,
        });
        (self.files.len() - 1) as u32
    }

    pub fn dirty_pages(&self) -> u64 {
        self.dirty
    }
    pub fn writeback_pages(&self) -> u64 {
        self.writeback
    }
    pub fn background_threshold_pages(&self) -> u64 {
        self.background_pages
    }
    pub fn dirty_limit_pages(&self) -> u64 {
        self.limit_pages
    }
    /// Dirty + write-back pages at which a throttled writer may continue.
    pub fn freerun_pages(&self) -> u64 {
        (self.background_pages + self.limit_pages) / 2
    }
    /// Whether a writer must block (foreground write-back).
    pub fn over_limit(&self) -> bool {
        self.dirty + self.writeback > self.limit_pages
    }
    /// Whether a throttled writer may go on.
    pub fn below_freerun(&self) -> bool {
        self.dirty + self.writeback <= self.freerun_pages()
    }
    pub fn over_background(&self) -> bool {
        self.dirty > self.background_pages
    }

    // ---- LRU ----

    fn lru_unlink(&mut self, s: u32) {
        let (prev, next) = {
            let p = &self.pages[s as usize];
            (p.prev, p.next)
        };
        if prev != NIL {
            self.pages[prev as usize].next = next;
        } else {
            self.lru_head = next;
        }
        if next != NIL {
            self.pages[next as usize].prev = prev;
        } else {
            self.lru_tail = prev;
        }
    }

    fn lru_push_head(&mut self, s: u32) {
        let head = self.lru_head;
        {
            let p = &mut self.pages[s as usize];
            p.prev = NIL;
            p.next = head;
        }
        if head != NIL {
            self.pages[head as usize].prev = s;
        } else {
            self.lru_tail = s;
        }
        self.lru_head = s;
    }

    /// Evicts one clean page from the LRU tail; false if none was found within the scan limit.
    fn evict_one(&mut self) -> bool {
        const SCAN_LIMIT: u32 = 256; // pages reclaim looks at before giving up (rotating busy ones)
        for _ in 0..SCAN_LIMIT {
            let s = self.lru_tail;
            if s == NIL {
                return false;
            }
            let p = self.pages[s as usize];
            self.lru_unlink(s);
            if p.flags & (DIRTY | WRITEBACK | LOCKED) != 0 {
                self.lru_push_head(s);
                continue;
            }
            let (file, page) = unkey(p.key);
            self.files[file as usize].index.remove(page);
            self.free.push(s);
            self.resident -= 1;
            self.stats.evictions += 1;
            return true;
        }
        false
    }

    fn insert(&mut self, file: u32, page: u64, flags: u8, bio: u32, class: IoClass) -> u32 {
        if self.resident >= self.capacity && !self.evict_one() {
            self.stats.reclaim_overshoots += 1;
        }
        let rec = Page {
            key: key(file, page),
            prev: NIL,
            next: NIL,
            flags,
            class,
            bio,
        };
        let s = match self.free.pop() {
            Some(s) => {
                self.pages[s as usize] = rec;
                s
            }
            None => {
                self.pages.push(rec);
                (self.pages.len() - 1) as u32
            }
        };
        self.files[file as usize].index.insert(page, s);
        self.resident += 1;
        self.lru_push_head(s);
        s
    }

    fn slot(&self, file: u32, page: u64) -> Option<u32> {
        self.files[file as usize].index.get(page)
    }

    // ---- reads ----

    /// Looks up one page for a read (touching it in the LRU on a hit).
    pub fn lookup(&mut self, file: u32, page: u64) -> Lookup {
        match self.slot(file, page) {
            None => Lookup::Miss,
            Some(s) => {
                let p = self.pages[s as usize];
                if p.flags & LOCKED != 0 {
                    Lookup::InFlight { bio: p.bio }
                } else {
                    self.lru_unlink(s);
                    self.lru_push_head(s);
                    Lookup::Hit
                }
            }
        }
    }

    /// Whether the page is present (cached or being read).
    pub fn present(&self, file: u32, page: u64) -> bool {
        self.slot(file, page).is_some()
    }

    /// Inserts a missing page as locked for a read by `bio`.
    pub fn insert_reading(&mut self, file: u32, page: u64, bio: u32) {
        self.insert(file, page, LOCKED, bio, IoClass::Throughput);
    }

    /// A read bio finished: its pages become up to date.
    pub fn end_read(&mut self, file: u32, first_page: u64, pages: u32, bio: u32) {
        for p in first_page..first_page + pages as u64 {
            let s = self
                .slot(file, p)
                .expect("a page being read stays in the cache (locked pages are not evicted)");
            let page = &mut self.pages[s as usize];
            assert!(
                page.flags & LOCKED != 0 && page.bio == bio,
                "page {p} of file {file} completed by bio {bio} but not locked for it"
            );
            page.flags = (page.flags & !LOCKED) | UPTODATE;
            page.bio = NIL;
        }
    }

    /// Read-ahead decision for a read of `[page, page + n)`: returns the window to read ahead
    /// (asynchronously) as `(first_page, pages)`, possibly empty, and updates the state.
    pub fn read_ahead(&self, ra: &mut ReadAhead, file: u32, page: u64, n: u64) -> (u64, u64) {
        let file_pages = self.files[file as usize].pages;
        let sequential = page == ra.next_page && (ra.window > 0 || page > 0);
        ra.next_page = page + n;
        if !sequential {
            ra.window = 0;
            ra.ahead_end = page + n;
            return (page + n, 0);
        }
        ra.window = if ra.window == 0 {
            (4 * n).min(self.read_ahead_max_pages)
        } else {
            (2 * ra.window).min(self.read_ahead_max_pages)
        };
        let start = ra.ahead_end.max(page + n);
        let end = (page + n + ra.window).min(file_pages);
        ra.ahead_end = ra.ahead_end.max(end);
        if end > start {
            (start, end - start)
        } else {
            (start, 0)
        }
    }

    // ---- writes ----

    /// Marks one page dirty on behalf of `class` (allocating it if absent). Returns true if the
    /// page went from clean to dirty.
    pub fn dirty_page(&mut self, now: SimTime, file: u32, page: u64, class: IoClass) -> bool {
        let s = match self.slot(file, page) {
            Some(s) => {
                self.lru_unlink(s);
                self.lru_push_head(s);
                s
            }
            None => self.insert(file, page, UPTODATE, NIL, class),
        };
        let p = &mut self.pages[s as usize];
        // A write of a whole page makes it up to date even if a read was filling it.
        p.flags |= UPTODATE;
        if p.flags & DIRTY != 0 {
            // The latest writer owns the dirty data.
            p.class = class;
            return false;
        }
        p.flags |= DIRTY;
        p.class = class;
        self.dirty += 1;
        let f = &mut self.files[file as usize];
        f.dirty_bits[(page / 64) as usize] |= 1 << (page % 64);
        f.dirty_pages += 1;
        if f.dirtied_at.is_none() {
            f.dirtied_at = Some(now);
        }
        self.stats.class_mut(class).pages_dirtied += 1;
        true
    }

    /// The files a write-back pass visits (Linux's `queue_io` filling `b_io`): those with dirty
    /// pages, dirtied before `expired_before` if given, the one dirtied first first (ties:
    /// lowest id).
    pub fn pass_files(&self, expired_before: Option<SimTime>, out: &mut VecDeque<u32>) {
        let mut files: Vec<(SimTime, u32)> = self
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.dirty_pages > 0)
            .filter_map(|(i, f)| f.dirtied_at.map(|t| (t, i as u32)))
            .filter(|(t, _)| expired_before.is_none_or(|e| *t < e))
            .collect();
        files.sort_unstable();
        out.clear();
        out.extend(files.into_iter().map(|(_, i)| i));
    }

    /// Pages one file gives a pass (Linux's `writeback_chunk_size` for background work): an
    /// eighth of the dirty limit (`DIRTY_SCOPE`), plus `min_pages` and rounded down to a
    /// multiple of it (`MIN_WRITEBACK_PAGES`). See `writeback.rs` for the bandwidth term it
    /// leaves out.
    pub fn writeback_chunk_pages(&self, min_pages: u64) -> u64 {
        (self.limit_pages / DIRTY_SCOPE + min_pages) / min_pages * min_pages
    }

    /// The file with dirty pages that went dirty first (ties: lowest id), if any; with
    /// `expired_before`, only files dirtied before that time.
    pub fn oldest_dirty_file(&self, expired_before: Option<SimTime>) -> Option<u32> {
        self.files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.dirty_pages > 0)
            .filter_map(|(i, f)| f.dirtied_at.map(|t| (t, i)))
            .filter(|(t, _)| expired_before.is_none_or(|e| *t < e))
            .min()
            .map(|(_, i)| i as u32)
    }

    /// Whether page `p` of `file` (cached) is under write-back.
    fn under_writeback(&self, file: u32, p: u64) -> bool {
        let s = self.slot(file, p).expect("dirty page cached");
        self.pages[s as usize].flags & WRITEBACK != 0
    }

    /// The first dirty page of `file` from its cursor (wrapping once) that is not under
    /// write-back.
    fn first_writable(&self, file: u32) -> Option<u64> {
        let f = &self.files[file as usize];
        for (from, end) in [(f.cursor, f.pages), (0, f.cursor)] {
            let mut at = from;
            while let Some(p) = find_set(&f.dirty_bits, at, end) {
                if !self.under_writeback(file, p) {
                    return Some(p);
                }
                at = p + 1;
            }
        }
        None
    }

    /// Takes the next run of up to `max_pages` contiguous dirty pages of `file` (from its
    /// write-back cursor, wrapping once): clears their dirty bit and marks them under
    /// write-back. Returns `(first_page, pages, owner class)`; a run never mixes owners.
    ///
    /// A page dirtied again while its write-back is in flight is skipped until that write-back
    /// ends (Linux's background write-back skips `PageWriteback` pages): a page is under one
    /// write-back at a time. `None` when every dirty page is; the next end of write-back then
    /// says so ([`take_writeback_blocked`](Self::take_writeback_blocked)).
    pub fn take_dirty_run(&mut self, file: u32, max_pages: u64) -> Option<(u64, u32, IoClass)> {
        if self.files[file as usize].dirty_pages == 0 {
            return None;
        }
        let Some(first) = self.first_writable(file) else {
            self.writeback_blocked = true;
            return None;
        };
        let f = &self.files[file as usize];
        let class = self.pages[self.slot(file, first).expect("dirty page cached") as usize].class;
        let mut n = 0u64;
        while n < max_pages && first + n < f.pages {
            let p = first + n;
            if f.dirty_bits[(p / 64) as usize] & (1 << (p % 64)) == 0 {
                break;
            }
            let s = self.slot(file, p).expect("dirty page cached");
            if self.pages[s as usize].class != class
                || self.pages[s as usize].flags & WRITEBACK != 0
            {
                break;
            }
            n += 1;
        }
        for p in first..first + n {
            let s = self.slot(file, p).expect("dirty page cached");
            let page = &mut self.pages[s as usize];
            page.flags = (page.flags & !DIRTY) | WRITEBACK;
        }
        let f = &mut self.files[file as usize];
        for p in first..first + n {
            f.dirty_bits[(p / 64) as usize] &= !(1 << (p % 64));
        }
        f.dirty_pages -= n;
        f.writeback_pages += n;
        f.cursor = first + n;
        if f.cursor >= f.pages {
            f.cursor = 0;
        }
        if f.dirty_pages == 0 {
            f.dirtied_at = None;
        }
        self.dirty -= n;
        self.writeback += n;
        Some((first, n as u32, class))
    }

    /// Whether a write-back found only pages already under write-back since the last call
    /// (then a write-back just ended, and the flusher should look again).
    pub fn take_writeback_blocked(&mut self) -> bool {
        std::mem::take(&mut self.writeback_blocked)
    }

    /// A write-back bio finished.
    pub fn end_writeback(&mut self, file: u32, first_page: u64, pages: u32, class: IoClass) {
        for p in first_page..first_page + pages as u64 {
            let s = self
                .slot(file, p)
                .expect("pages under write-back stay cached");
            let page = &mut self.pages[s as usize];
            assert!(
                page.flags & WRITEBACK != 0,
                "page {p} of file {file} ended write-back twice"
            );
            page.flags &= !WRITEBACK;
        }
        let f = &mut self.files[file as usize];
        f.writeback_pages -= pages as u64;
        self.writeback -= pages as u64;
        self.stats.class_mut(class).pages_written_back += pages as u64;
    }

    pub fn finish_stats(&mut self) -> PageCacheStats {
        self.stats.resident_pages = self.resident;
        self.stats.dirty_pages = self.dirty;
        self.stats.writeback_pages = self.writeback;
        self.stats.adaptive_dirty = self.adaptive.as_ref().map(|a| a.stats.clone());
        self.stats.clone()
    }

    /// Checks the counters against the pages (O(cache size): tests and end of run).
    pub fn check_consistency(&self) -> Result<(), String> {
        let mut dirty = 0;
        let mut wb = 0;
        let mut n = 0;
        let mut s = self.lru_head;
        while s != NIL {
            let p = &self.pages[s as usize];
            n += 1;
            if p.flags & DIRTY != 0 {
                dirty += 1;
            }
            if p.flags & WRITEBACK != 0 {
                wb += 1;
            }
            s = p.next;
        }
        let indexed: u64 = self.files.iter().map(|f| f.index.len()).sum();
        if n != self.resident || n != indexed {
            return Err(format!(
                "LRU holds {n} pages, resident {}, index {indexed}",
                self.resident
            ));
        }
        let file_dirty: u64 = self.files.iter().map(|f| f.dirty_pages).sum();
        if dirty != self.dirty || file_dirty != self.dirty || wb != self.writeback {
            return Err(format!(
                "dirty: pages {dirty}, counter {}, files {file_dirty}; writeback pages {wb}, counter {}",
                self.dirty, self.writeback
            ));
        }
        Ok(())
    }
}

/// First set bit at or after `from` and before `end`.
fn find_set(bits: &[u64], from: u64, end: u64) -> Option<u64> {
    let mut p = from;
    while p < end {
        let w = bits[(p / 64) as usize] >> (p % 64);
        if w != 0 {
            let found = p + w.trailing_zeros() as u64;
            return (found < end).then_some(found);
        }
        p = (p / 64 + 1) * 64;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_clean_pages_first_and_keeps_dirty_ones() {
        let mut pc = PageCache::new(4, 128 << 10, 50, 75);
        let f = pc.add_file(0, 100);
        pc.dirty_page(SimTime(1), f, 0, IoClass::Throughput);
        for p in 1..4 {
            pc.insert_reading(f, p, 7);
            pc.end_read(f, p, 1, 7);
        }
        pc.insert_reading(f, 10, 8); // evicts page 1 (page 0 is dirty)
        assert!(pc.present(f, 0));
        assert!(!pc.present(f, 1));
        assert_eq!(pc.lookup(f, 10), Lookup::InFlight { bio: 8 });
        pc.check_consistency().unwrap();
    }

    #[test]
    fn dirty_runs_come_out_in_page_order_and_are_conserved() {
        let mut pc = PageCache::new(1000, 128 << 10, 3, 5);
        let f = pc.add_file(0, 1000);
        for p in [5u64, 6, 7, 9, 100] {
            assert!(pc.dirty_page(SimTime(10), f, p, IoClass::LatencyCritical));
        }
        assert!(!pc.dirty_page(SimTime(11), f, 6, IoClass::LatencyCritical));
        assert_eq!(
            pc.take_dirty_run(f, 8),
            Some((5, 3, IoClass::LatencyCritical))
        );
        assert_eq!(
            pc.take_dirty_run(f, 8),
            Some((9, 1, IoClass::LatencyCritical))
        );
        assert_eq!(pc.dirty_pages(), 1);
        assert_eq!(pc.writeback_pages(), 4);
        pc.end_writeback(f, 5, 3, IoClass::LatencyCritical);
        pc.end_writeback(f, 9, 1, IoClass::LatencyCritical);
        let s = pc.finish_stats();
        assert_eq!(
            s.latency_critical.pages_dirtied,
            s.latency_critical.pages_written_back + pc.dirty_pages()
        );
        pc.check_consistency().unwrap();
    }

    #[test]
    fn read_ahead_grows_on_sequential_reads() {
        let pc = {
            let mut pc = PageCache::new(1000, 128 << 10, 3, 5);
            pc.add_file(0, 10_000);
            pc
        };
        let mut ra = ReadAhead::default();
        assert_eq!(pc.read_ahead(&mut ra, 0, 100, 2), (102, 0), "random: none");
        assert_eq!(
            pc.read_ahead(&mut ra, 0, 102, 2),
            (104, 8),
            "first sequential: 4 × 2"
        );
        assert_eq!(
            pc.read_ahead(&mut ra, 0, 104, 2),
            (112, 10),
            "window 16 from 106"
        );
        assert_eq!(ra.window, 16);
    }

    /// The thresholds switch to the high set when the buffer status reaches the high
    /// watermark, stay there in between, and switch back below the low watermark.
    #[test]
    fn the_dirty_thresholds_switch_and_switch_back_as_the_buffer_status_crosses() {
        let mut cfg = crate::config::HostConfig::preset("arm8-4g")
            .unwrap()
            .pagecache;
        let mut off = PageCache::new(1000, 128 << 10, 3, 5).with_adaptive(&cfg);
        assert_eq!(off.on_buffer_status(100), None, "off: no switching");
        assert_eq!(off.background_threshold_pages(), 30);
        cfg.adaptive_dirty = crate::config::Switch::On;
        let mut pc = PageCache::new(1000, 128 << 10, 3, 5).with_adaptive(&cfg);
        let thresholds = |pc: &PageCache| (pc.background_threshold_pages(), pc.dirty_limit_pages());
        assert_eq!(thresholds(&pc), (30, 50));
        assert_eq!(pc.on_buffer_status(79), None);
        assert_eq!(pc.on_buffer_status(80), Some(DirtySet::High));
        assert_eq!(thresholds(&pc), (50, 100));
        for pct in [100, 50, 20] {
            assert_eq!(pc.on_buffer_status(pct), None, "{pct} %: still high");
        }
        assert_eq!(pc.on_buffer_status(19), Some(DirtySet::Low));
        assert_eq!(thresholds(&pc), (30, 50));
        assert_eq!(pc.on_buffer_status(50), None);
        let s = pc.finish_stats().adaptive_dirty.unwrap();
        assert_eq!((s.switches_to_high, s.switches_to_low), (1, 1));
        assert!(off.finish_stats().adaptive_dirty.is_none());
    }

    /// The write-back chunk of `arm8-4g` (writeback.rs's worked example): 5,120 pages in the
    /// low set, 10,240 in the high set; a pass visits dirty files oldest dirtied first.
    #[test]
    fn the_chunk_follows_the_dirty_limit_and_a_pass_visits_the_oldest_file_first() {
        let mut cfg = crate::config::HostConfig::preset("arm8-4g")
            .unwrap()
            .pagecache;
        cfg.adaptive_dirty = crate::config::Switch::On;
        let pages = (cfg.memory_bytes - cfg.reserved_bytes) / 4096;
        assert_eq!(pages, 786_432);
        let mut pc = PageCache::new(pages, 128 << 10, 3, 5).with_adaptive(&cfg);
        assert_eq!(pc.dirty_limit_pages(), 39_321);
        assert_eq!(pc.writeback_chunk_pages(1_024), 5_120);
        pc.on_buffer_status(90);
        assert_eq!(pc.writeback_chunk_pages(1_024), 10_240);
        let (a, b, c) = (
            pc.add_file(0, 64),
            pc.add_file(1 << 20, 64),
            pc.add_file(2 << 20, 64),
        );
        pc.dirty_page(SimTime(30), b, 0, IoClass::Throughput);
        pc.dirty_page(SimTime(10), c, 0, IoClass::Throughput);
        pc.dirty_page(SimTime(20), a, 0, IoClass::Throughput);
        let mut pass = VecDeque::new();
        pc.pass_files(None, &mut pass);
        assert_eq!(pass, [c, a, b]);
        pc.pass_files(Some(SimTime(25)), &mut pass);
        assert_eq!(pass, [c, a], "only the expired ones");
    }

    /// A page dirtied again during its write-back is not written back a second time until the
    /// first write-back ends (it once was, and ended write-back twice).
    #[test]
    fn a_page_redirtied_under_write_back_waits_for_it_to_end() {
        let mut pc = PageCache::new(1000, 128 << 10, 3, 5);
        let f = pc.add_file(0, 64);
        for p in 0..4 {
            pc.dirty_page(SimTime::ZERO, f, p, IoClass::Throughput);
        }
        assert_eq!(pc.take_dirty_run(f, 8), Some((0, 4, IoClass::Throughput)));
        pc.dirty_page(SimTime::ZERO, f, 1, IoClass::Throughput);
        pc.dirty_page(SimTime::ZERO, f, 9, IoClass::Throughput);
        assert_eq!(
            pc.take_dirty_run(f, 8),
            Some((9, 1, IoClass::Throughput)),
            "page 1 is under write-back: skipped"
        );
        assert_eq!(pc.take_dirty_run(f, 8), None, "only page 1 is dirty");
        assert!(pc.take_writeback_blocked() && !pc.take_writeback_blocked());
        pc.end_writeback(f, 0, 4, IoClass::Throughput);
        assert_eq!(pc.take_dirty_run(f, 8), Some((1, 1, IoClass::Throughput)));
        pc.end_writeback(f, 1, 1, IoClass::Throughput);
        pc.end_writeback(f, 9, 1, IoClass::Throughput);
        pc.check_consistency().unwrap();
    }

    #[test]
    fn find_set_scans_words() {
        let mut bits = vec![0u64; 4];
        bits[2] |= 1 << 5;
        assert_eq!(find_set(&bits, 0, 256), Some(133));
        assert_eq!(find_set(&bits, 134, 256), None);
        assert_eq!(find_set(&bits, 0, 133), None);
    }
}
