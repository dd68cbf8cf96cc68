//! `memory`: a sparse in-RAM volume.
//!
//! # Design
//! The volume is cut into 64 KiB chunks of sixteen 4 KiB pages. A chunk is allocated on the
//! first write that touches it, and within it a page (zeroed) on the first write that touches
//! the page; a read of a chunk or page never written returns zeros without allocating. Chunks
//! live in hash maps split into [`SHARDS`] shards by chunk index, each behind its own `RwLock`,
//! so workers serving different parts of the volume rarely meet on a lock and readers never
//! block each other. The chunk is the unit of block status (an allocated chunk is data); the
//! page is the unit of memory, so RAM follows the data written. Worked example: a 1 GiB volume
//! has 16,384 chunks; fio writing 4 KiB blocks to 10 % of it at random touches most chunks but
//! allocates ~100 MiB of pages (plus 144 bytes a chunk), while `nbdinfo` on a fresh volume
//! allocates nothing. TRIM and WRITE_ZEROES drop whole chunks and pages they cover (memory is
//! returned) and zero the partial ends.
//!
//! *Reads without copying.* A read is answered with views of the pages
//! ([`MemoryVolume::read_views`], `crate::buf`): each view holds a counted reference on its
//! chunk ([`PageGroup`]), whose count lies in the chunk's own allocation, beside the page
//! pointers the lookup reads anyway; a read touches the shard's lock and hash table, the
//! chunk's first cache lines, and none of the page's bytes (the kernel copies them into the
//! socket). A write to a chunk that no view holds writes in place; one that meets a view
//! writes into a copy of the chunk (its sixteen page references, no bytes), and the page it
//! writes is then copied too, because the held chunk still has it; once the views are sent the
//! old chunk and the pages only it had are freed. Worked example: fio 4 KiB random reads and
//! writes at QD32 on a 1 GiB volume hold at most 32 of its 16,384 chunks at a time, so about
//! one write in 500 pays for a 4 KiB copy and sixteen reference counts. (A count per page, in
//! the page's own allocation, costs a cache miss per read on a volume larger than the caches;
//! `memory_read_path` prints what a read's views cost.) A view of a chunk never written holds
//! no chunk and no count: it shows zeros, so the workers reading an unwritten volume share no
//! count to bounce between their cores.
//!
//! Every write is visible to every connection once `submit` returns, so FLUSH is a no-op and
//! CAN_MULTI_CONN is true.
//!
//! *Tried and not kept* (their figures are in CHANGELOG.md). Prefetching each decoded READ's
//! chunk (a lookup and a prefetch at decode time, the views taken at submission): no faster,
//! because the lookup's own misses are then paid at decode. A two-level table of chunk slots
//! per shard in place of the hash map (no hashing, eight slots a cache line): within the
//! noise, for up to 4 KiB of table per chunk on a sparse volume.
//!
//! # What it leaves out
//! A memory limit below the volume size (a fully written volume uses its size in RAM) and
//! persistence (the data dies with the process).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock};

use engine::IoClass;

use super::interface::{
    push_run, AllocRun, Backend, BackendError, Caps, Completion, StorageError, StorageOp,
    Submitted, Volume,
};
use crate::buf::{IoBuf, PageGroup, PageView, PageViews, GROUP_PAGES};

/// Allocation unit: large enough that the map stays small, small enough that a sparse test
/// volume stays sparse.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Lock shards; chunk `i` lives in shard `i % SHARDS`.
pub const SHARDS: usize = 64;

/// Allocation unit of the data within a chunk (and the unit a reply may view in place).
pub use crate::buf::PAGE_BYTES;
const _: () = assert!(
    CHUNK_BYTES / PAGE_BYTES == GROUP_PAGES,
    "a chunk is a page group"
);

/// A chunk's pages ([`PageGroup`], the unit a reply's views hold), each allocated on its first
/// write. The volume holds each chunk by a counted reference that the views of a read share: a
/// write to a chunk no view holds writes in place; one that meets a view writes into a copy of
/// the chunk (`Arc::make_mut`: sixteen page references cloned, no bytes), whose written page
/// is then copied in turn because the old chunk still holds it.
type Chunk = Arc<PageGroup>;

/// Splits `[within, within + len)` of a chunk into (page, offset in page, length) pieces.
fn page_pieces(within: usize, len: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let end = within + len;
    let mut at = within;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let (page, off) = (at / PAGE_BYTES, at % PAGE_BYTES);
        let take = (PAGE_BYTES - off).min(end - at);
        at += take;
        Some((page, off, take))
    })
}

fn chunk_read(chunk: &PageGroup, within: usize, out: &mut [u8]) {
    let mut done = 0;
    for (page, off, take) in page_pieces(within, out.len()) {
        let dst = &mut out[done..done + take];
        match &chunk.pages[page] {
            Some(p) => dst.copy_from_slice(&p[off..off + take]),
            None => dst.fill(0),
        }
        done += take;
    }
}

/// Writes `data` at `within`; copies the chunk first if views hold it, and a page if an older
/// copy of the chunk (held by views) still holds it.
fn chunk_write(chunk: &mut Chunk, within: usize, data: &[u8]) {
    let pages = &mut Arc::make_mut(chunk).pages;
    let mut done = 0;
    for (page, off, take) in page_pieces(within, data.len()) {
        let p = pages[page].get_or_insert_with(|| Arc::new([0u8; PAGE_BYTES]));
        Arc::make_mut(p)[off..off + take].copy_from_slice(&data[done..done + take]);
        done += take;
    }
}

/// Zeroes `[within, within + len)`, freeing the pages it covers whole.
fn chunk_zero(chunk: &mut Chunk, within: usize, len: usize) {
    let pages = &mut Arc::make_mut(chunk).pages;
    for (page, off, take) in page_pieces(within, len) {
        if take == PAGE_BYTES {
            pages[page] = None;
        } else if let Some(p) = &mut pages[page] {
            Arc::make_mut(p)[off..off + take].fill(0);
        }
    }
}

/// Chunk indexes are already well spread; a multiplicative hash is plenty and far cheaper than
/// SipHash on the hot path.
#[derive(Default)]
struct ChunkHasher(u64);

impl Hasher for ChunkHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Shard = HashMap<u64, Chunk, BuildHasherDefault<ChunkHasher>>;

/// The shared store of a memory volume.
pub struct MemoryVolume {
    size_bytes: u64,
    shards: Box<[RwLock<Shard>]>,
}

impl MemoryVolume {
    pub fn new(size_bytes: u64) -> MemoryVolume {
        MemoryVolume {
            size_bytes,
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
        }
    }

    fn shard(&self, chunk: u64) -> &RwLock<Shard> {
        &self.shards[(chunk % SHARDS as u64) as usize]
    }

    /// Splits `[offset, offset+len)` into (chunk index, offset in chunk, length) pieces.
    fn pieces(offset_bytes: u64, len_bytes: u64) -> impl Iterator<Item = (u64, usize, usize)> {
        let chunk = CHUNK_BYTES as u64;
        let end = offset_bytes + len_bytes;
        let mut at = offset_bytes;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let index = at / chunk;
            let within = (at % chunk) as usize;
            let take = (CHUNK_BYTES - within).min((end - at) as usize);
            at += take as u64;
            Some((index, within, take))
        })
    }

    fn check_range(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), StorageError> {
        // The dataplane checks ranges before storage; this is the backstop.
        match offset_bytes.checked_add(len_bytes) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(StorageError::Io(libc::EINVAL)),
        }
    }

    /// Copies `[offset, offset + out.len())` into `out` (zeros where never written).
    pub fn read(&self, offset_bytes: u64, out: &mut [u8]) -> Result<(), StorageError> {
        self.check_range(offset_bytes, out.len() as u64)?;
        let mut done = 0usize;
        for (index, within, take) in Self::pieces(offset_bytes, out.len() as u64) {
            let dst = &mut out[done..done + take];
            let shard = self.shard(index).read().unwrap_or_else(|p| p.into_inner());
            match shard.get(&index) {
                Some(chunk) => chunk_read(chunk, within, dst),
                None => dst.fill(0),
            }
            done += take;
        }
        Ok(())
    }

    /// `[offset, offset + len)` as views of the pages that hold it, without copying (zeros
    /// where never written). The views keep the bytes the pages hold now, whatever is written
    /// afterwards.
    pub fn read_views(&self, offset_bytes: u64, len_bytes: u64) -> Result<PageViews, StorageError> {
        self.check_range(offset_bytes, len_bytes)?;
        let mut views = PageViews::new();
        for (index, within, take) in Self::pieces(offset_bytes, len_bytes) {
            let chunk = {
                let shard = self.shard(index).read().unwrap_or_else(|p| p.into_inner());
                shard.get(&index).map(Arc::clone)
            };
            let Some(chunk) = chunk else {
                // A hole: zeros, holding nothing.
                for (_, off, len) in page_pieces(within, take) {
                    views.push(PageView::zeros(off, len));
                }
                continue;
            };
            // One count raised per page viewed; the last view takes the lookup's own.
            let mut pieces = page_pieces(within, take).peekable();
            while let Some((page, off, len)) = pieces.next() {
                if pieces.peek().is_none() {
                    views.push(PageView::in_group(chunk, page, off, len));
                    break;
                }
                views.push(PageView::in_group(Arc::clone(&chunk), page, off, len));
            }
        }
        Ok(views)
    }

    /// Writes `data` at `offset`, allocating chunks and pages on first touch.
    pub fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), StorageError> {
        self.check_range(offset_bytes, data.len() as u64)?;
        let mut done = 0usize;
        for (index, within, take) in Self::pieces(offset_bytes, data.len() as u64) {
            let src = &data[done..done + take];
            let mut shard = self.shard(index).write().unwrap_or_else(|p| p.into_inner());
            chunk_write(shard.entry(index).or_default(), within, src);
            done += take;
        }
        Ok(())
    }

    /// Makes the range read back as zeros, freeing chunks and pages it covers whole.
    pub fn zero(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), StorageError> {
        self.check_range(offset_bytes, len_bytes)?;
        for (index, within, take) in Self::pieces(offset_bytes, len_bytes) {
            let mut shard = self.shard(index).write().unwrap_or_else(|p| p.into_inner());
            if take == CHUNK_BYTES {
                shard.remove(&index);
            } else if let Some(chunk) = shard.get_mut(&index) {
                chunk_zero(chunk, within, take);
            }
        }
        Ok(())
    }

    /// Bytes of RAM held by allocated pages.
    pub fn allocated_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                let shard = s.read().unwrap_or_else(|p| p.into_inner());
                shard
                    .values()
                    .map(|c| c.allocated_pages() as u64)
                    .sum::<u64>()
                    * PAGE_BYTES as u64
            })
            .sum()
    }

    pub(crate) fn execute(&self, op: StorageOp, buf: &mut IoBuf) -> Result<(), StorageError> {
        match op {
            StorageOp::Read { offset_bytes } => self.read(offset_bytes, buf.as_mut_slice()),
            StorageOp::Write { offset_bytes, .. } => self.write(offset_bytes, buf.as_slice()),
            StorageOp::Flush => Ok(()),
            StorageOp::Trim { .. } | StorageOp::WriteZeroes { .. } => {
                let (offset_bytes, len_bytes) = op.range_bytes().expect("a range operation");
                self.zero(offset_bytes, len_bytes)
            }
        }
    }
}

impl Volume for MemoryVolume {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn caps(&self) -> Caps {
        Caps {
            flush: true,
            fua: true,
            trim: true,
            write_zeroes: true,
            multi_conn: true,
            read_only: false,
        }
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    /// A chunk never written (or freed by TRIM / WRITE_ZEROES) is a hole; an allocated chunk is
    /// data even if it holds zeros. Granularity: [`CHUNK_BYTES`].
    fn allocation(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        max_runs: usize,
        out: &mut Vec<AllocRun>,
    ) -> Result<(), StorageError> {
        self.check_range(offset_bytes, len_bytes)?;
        let first = out.len();
        for (index, _within, take) in Self::pieces(offset_bytes, len_bytes) {
            let shard = self.shard(index).read().unwrap_or_else(|p| p.into_inner());
            let hole = !shard.contains_key(&index);
            drop(shard);
            let would_add = out.len() == first || out.last().is_some_and(|l| l.hole != hole);
            if would_add && out.len() - first == max_runs {
                break;
            }
            push_run(
                out,
                AllocRun {
                    len_bytes: take as u64,
                    hole,
                },
            );
        }
        Ok(())
    }

    fn attach(self: Arc<Self>) -> Result<Box<dyn Backend>, BackendError> {
        Ok(Box::new(MemoryBackend { volume: self }))
    }
}

/// A worker's handle on a memory volume: completes everything inside `submit`.
pub struct MemoryBackend {
    volume: Arc<MemoryVolume>,
}

impl Backend for MemoryBackend {
    /// A read is answered with views of the pages ([`MemoryVolume::read_views`]); `buf` then
    /// comes back untouched, for the worker's pool.
    fn submit(&mut self, tag: u64, op: StorageOp, _class: IoClass, mut buf: IoBuf) -> Submitted {
        let (result, pages) = match op {
            StorageOp::Read { offset_bytes } => {
                match self.volume.read_views(offset_bytes, buf.len() as u64) {
                    Ok(views) => (Ok(()), Some(views)),
                    Err(e) => (Err(e), None),
                }
            }
            _ => (self.volume.execute(op, &mut buf), None),
        };
        Submitted::Done(Completion {
            tag,
            result,
            buf,
            pages,
        })
    }

    fn poll(&mut self, _now_ns: u64, _out: &mut Vec<Completion>) {}

    fn in_flight(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_reads_zero_and_allocate_nothing() {
        let v = MemoryVolume::new(1 << 30);
        let mut out = vec![0xAAu8; 8192];
        v.read(12345, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0));
        assert_eq!(v.allocated_bytes(), 0);
    }

    #[test]
    fn write_across_chunks_reads_back() {
        let v = MemoryVolume::new(1 << 20);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        v.write(CHUNK_BYTES as u64 - 100, &data).unwrap();
        let mut out = vec![0u8; data.len()];
        v.read(CHUNK_BYTES as u64 - 100, &mut out).unwrap();
        assert_eq!(out, data);
        // Bytes CHUNK-100 .. CHUNK-100+200,000 touch the last page of chunk 0 and pages
        // 16 ..= 64 of the volume: 50 pages.
        assert_eq!(v.allocated_bytes(), 50 * PAGE_BYTES as u64);
    }

    #[test]
    fn zero_frees_whole_chunks_and_zeroes_partial() {
        let v = MemoryVolume::new(1 << 20);
        v.write(0, &vec![1u8; 3 * CHUNK_BYTES]).unwrap();
        v.zero(100, 2 * CHUNK_BYTES as u64).unwrap();
        // Chunk 1 is freed whole; of chunks 0 and 2, the pages wholly zeroed are freed too:
        // page 0 (holds the first 100 bytes) and page 0 of chunk 2 (zeroed up to byte 100)
        // stay, with chunk 2's other 15 pages.
        assert_eq!(v.allocated_bytes(), 17 * PAGE_BYTES as u64);
        let mut out = vec![9u8; 3 * CHUNK_BYTES];
        v.read(0, &mut out).unwrap();
        assert!(out[..100].iter().all(|&b| b == 1));
        assert!(out[100..100 + 2 * CHUNK_BYTES].iter().all(|&b| b == 0));
        assert!(out[100 + 2 * CHUNK_BYTES..].iter().all(|&b| b == 1));
    }

    #[test]
    fn allocation_reports_unwritten_chunks_as_holes_and_honours_max_runs() {
        let c = CHUNK_BYTES as u64;
        let v = MemoryVolume::new(16 * c);
        v.write(2 * c + 5, &[1u8; 10]).unwrap();
        v.write(3 * c, &[1u8; 1]).unwrap();
        v.write(9 * c, &[1u8; 1]).unwrap();
        let runs = |offset: u64, len: u64, max: usize| {
            let mut out = Vec::new();
            v.allocation(offset, len, max, &mut out).unwrap();
            out.iter()
                .map(|r| (r.len_bytes, r.hole))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            runs(0, 16 * c, 100),
            [
                (2 * c, true),
                (2 * c, false),
                (5 * c, true),
                (c, false),
                (6 * c, true)
            ]
        );
        // A window that starts and ends inside chunks.
        assert_eq!(runs(c + 7, 2 * c, 100), [(c - 7, true), (c + 7, false)]);
        // Cut short by max_runs: never more runs, never past the range.
        assert_eq!(runs(0, 16 * c, 2), [(2 * c, true), (2 * c, false)]);
        assert_eq!(runs(0, 16 * c, 1), [(2 * c, true)]);
        // TRIM of a whole chunk makes it a hole again.
        v.zero(9 * c, c).unwrap();
        assert_eq!(runs(8 * c, 8 * c, 100), [(8 * c, true)]);
        let mut out = Vec::new();
        assert!(
            v.allocation(15 * c, 2 * c, 10, &mut out).is_err(),
            "past the end"
        );
    }

    #[test]
    fn random_small_writes_hold_their_pages_not_their_chunks() {
        let v = MemoryVolume::new(1 << 30);
        let mut rng = engine::stream(3, "memory-pages");
        let mut written = std::collections::HashMap::new();
        for k in 0..2000u32 {
            let page = engine::rng::below(&mut rng, (1 << 30) / PAGE_BYTES as u64);
            let data = vec![(k % 251) as u8 + 1; PAGE_BYTES];
            v.write(page * PAGE_BYTES as u64, &data).unwrap();
            written.insert(page, data);
        }
        assert_eq!(
            v.allocated_bytes(),
            written.len() as u64 * PAGE_BYTES as u64
        );
        for (page, data) in &written {
            let mut out = vec![0u8; PAGE_BYTES + 2];
            let at = page * PAGE_BYTES as u64;
            if at + out.len() as u64 <= 1 << 30 && !written.contains_key(&(page + 1)) {
                v.read(at, &mut out).unwrap();
                assert_eq!(&out[..PAGE_BYTES], &data[..]);
                assert_eq!(out[PAGE_BYTES..], [0, 0], "the next page was never written");
            }
        }
    }

    /// The bytes of `views`, gathered.
    fn bytes(views: &PageViews) -> Vec<u8> {
        views.parts().flatten().copied().collect()
    }

    #[test]
    fn page_views_keep_the_bytes_of_read_time() {
        let v = MemoryVolume::new(1 << 20);
        v.write(8192, &[1u8; PAGE_BYTES]).unwrap();
        let view = v.read_views(8192 + 100, 200).unwrap();
        // A write over the viewed bytes, and a zeroing of the whole page (which frees it),
        // land after the read: the view still shows the page as it was read.
        v.write(8192, &[2u8; PAGE_BYTES]).unwrap();
        assert_eq!(bytes(&view), [1u8; 200]);
        let second = v.read_views(8192, PAGE_BYTES as u64).unwrap();
        v.zero(8192, PAGE_BYTES as u64).unwrap();
        assert_eq!(bytes(&second), [2u8; PAGE_BYTES]);
        assert_eq!(bytes(&view), [1u8; 200]);
        // The volume itself has the latest bytes, and holds none for the zeroed page.
        let mut out = vec![9u8; PAGE_BYTES];
        v.read(8192, &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0));
        assert_eq!(v.allocated_bytes(), 0, "the zeroed page is freed");
    }

    #[test]
    fn a_page_written_with_no_view_is_written_in_place() {
        let v = MemoryVolume::new(1 << 20);
        v.write(0, &[1u8; 16]).unwrap();
        let first = v.read_views(0, 16).unwrap();
        let at = first.parts().next().expect("one part").as_ptr();
        drop(first);
        v.write(0, &[3u8; 16]).unwrap();
        let again = v.read_views(0, 16).unwrap();
        assert_eq!(
            again.parts().next().expect("one part").as_ptr(),
            at,
            "no copy"
        );
        assert_eq!(bytes(&again), [3u8; 16]);
    }

    /// The address of the first byte a read of `len` at `offset` views.
    fn viewed_at(v: &MemoryVolume, offset: u64, len: u64) -> *const u8 {
        v.read_views(offset, len)
            .unwrap()
            .parts()
            .next()
            .expect("one part")
            .as_ptr()
    }

    /// A view holds its chunk, not only its page: a write to another page of the chunk copies
    /// the chunk (and that page, which the held chunk still has) and leaves the view's page
    /// as it was read; once the view is gone, writes land in place again.
    #[test]
    fn a_view_holds_its_chunk_and_a_write_beside_it_lands_in_a_copy() {
        let v = MemoryVolume::new(1 << 20);
        let page = PAGE_BYTES as u64;
        v.write(0, &[1u8; 2 * PAGE_BYTES]).unwrap();
        let next_page_at = viewed_at(&v, page, 8);
        let view = v.read_views(0, page).unwrap();
        v.write(page, &[2u8; PAGE_BYTES]).unwrap();
        v.write(0, &[3u8; PAGE_BYTES]).unwrap();
        assert_eq!(bytes(&view), [1u8; PAGE_BYTES], "the viewed page as read");
        let mut out = vec![0u8; 2 * PAGE_BYTES];
        v.read(0, &mut out).unwrap();
        assert!(out[..PAGE_BYTES].iter().all(|&b| b == 3));
        assert!(
            out[PAGE_BYTES..].iter().all(|&b| b == 2),
            "the write beside it"
        );
        assert_ne!(
            viewed_at(&v, page, 8),
            next_page_at,
            "the page beside the view was copied, not written under the held chunk"
        );
        assert_eq!(v.allocated_bytes(), 2 * PAGE_BYTES as u64);
        drop(view);
        let now_at = viewed_at(&v, page, 8);
        v.write(page, &[4u8; PAGE_BYTES]).unwrap();
        assert_eq!(viewed_at(&v, page, 8), now_at, "no view: written in place");
        assert_eq!(bytes(&v.read_views(page, page).unwrap()), [4u8; PAGE_BYTES]);
    }

    /// Views of a chunk never written, and of holes in a written one, show zeros and allocate
    /// nothing; a chunk removed whole (TRIM) while viewed stays whole in the view.
    #[test]
    fn views_of_holes_show_zeros_and_a_removed_chunk_lives_on_in_its_views() {
        let v = MemoryVolume::new(1 << 20);
        let c = CHUNK_BYTES as u64;
        assert_eq!(bytes(&v.read_views(3 * c + 10, 100).unwrap()), [0u8; 100]);
        v.write(c + PAGE_BYTES as u64, &[5u8; 10]).unwrap();
        let views = v.read_views(c, c).unwrap();
        let mut expected = vec![0u8; CHUNK_BYTES];
        expected[PAGE_BYTES..PAGE_BYTES + 10].fill(5);
        assert_eq!(bytes(&views), expected);
        assert_eq!(v.allocated_bytes(), PAGE_BYTES as u64);
        v.zero(c, c).unwrap();
        assert_eq!(v.allocated_bytes(), 0, "the volume dropped the chunk");
        assert_eq!(bytes(&views), expected, "the views still hold it");
        assert_eq!(bytes(&v.read_views(c, c).unwrap()), vec![0u8; CHUNK_BYTES]);
    }

    /// Views of a range across pages and chunks, holes among them, match what a copying
    /// read returns, one part a page touched.
    #[test]
    fn views_across_pages_match_a_copying_read() {
        let v = MemoryVolume::new(1 << 20);
        let data: Vec<u8> = (0..3 * PAGE_BYTES as u32)
            .map(|i| (i % 251) as u8 + 1)
            .collect();
        let at = CHUNK_BYTES as u64 - PAGE_BYTES as u64 - 10;
        v.write(at, &data).unwrap();
        for (offset, len) in [
            (at - 5000, 20_000u64),
            (at + 7, 5),
            (0, 3 * CHUNK_BYTES as u64),
        ] {
            let views = v.read_views(offset, len).unwrap();
            let mut copied = vec![0u8; len as usize];
            v.read(offset, &mut copied).unwrap();
            assert_eq!(bytes(&views), copied, "offset {offset} len {len}");
            let pages = (offset + len).div_ceil(PAGE_BYTES as u64) - offset / PAGE_BYTES as u64;
            assert_eq!(views.parts().count() as u64, pages);
            assert_eq!(views.len() as u64, len);
        }
        assert_eq!(
            v.allocated_bytes(),
            4 * PAGE_BYTES as u64,
            "views allocate nothing"
        );
        assert!(v.read_views((1 << 20) - 1, 2).is_err(), "past the end");
    }

    #[test]
    fn out_of_range_is_refused() {
        let v = MemoryVolume::new(4096);
        assert!(v.write(4096, &[1]).is_err());
        assert!(v.zero(u64::MAX, 2).is_err());
    }
}
