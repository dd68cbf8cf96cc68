//! Aligned I/O buffers and the per-worker pool that recycles them.
//!
//! # What it implements
//! Every request that carries data (a READ's reply payload, a WRITE's payload) owns one
//! [`IoBuf`] from the moment its header is decoded until its reply is sent. `O_DIRECT` wants the
//! buffer's address aligned to the device's DMA alignment (512 B or 4 KiB), so every buffer is
//! 4 KiB-aligned, which satisfies both.
//!
//! # Design
//! A buffer is a raw allocation with a fixed capacity; ownership moves (worker → backend →
//! worker) instead of being borrowed, so a buffer handed to io_uring cannot be freed or reused
//! while the kernel writes into it: the backend keeps it until the completion arrives. Moving
//! the `IoBuf` value moves only the pointer, never the bytes.
//!
//! The pool keeps freed buffers in power-of-two size classes from 4 KiB to 32 MiB. Worked
//! example: a 4 KiB random-read load allocates 32 buffers for an iodepth-32 client once and then
//! recycles them forever; a single 1 MiB write takes a buffer from the 1 MiB class. Each class
//! keeps at most [`POOL_KEEP_BYTES_PER_CLASS`] bytes of idle buffers, so a burst of 32 MiB writes
//! does not pin a gigabyte after it ends.
//!
//! *Replies from a memory volume's pages.* A READ from a memory volume does not copy: the
//! backend hands back [`PageViews`], one [`PageView`] (a counted reference to the page's
//! [`PageGroup`], the volume's 64 KiB chunk, with the page's index, an offset and a length)
//! for each 4 KiB page the range touches, and the reply sends the pages' bytes from where they
//! lie, one iovec a page (the request's pooled [`IoBuf`] goes back to the pool unused). A page
//! is never written while a view holds its group: the volume writes into a group only when it
//! is the one holder (`Arc::make_mut`); otherwise it writes into a copy of the group that
//! replaces it in the volume (`backend/memory.rs`). NBD leaves the outcome of a READ and a WRITE in flight
//! together on overlapping bytes to the server; the choice here is that a reply is a snapshot
//! taken when the READ ran, as the copying path's was, never bytes torn by a write that landed
//! while the reply waited in the output queue. So a reply's bytes are exactly the pages at
//! read time (copy-on-write, not a lock held until the send). Worked example: fio 4 KiB random
//! reads at QD32 hold 32 views at a time, each a group's reference count raised and dropped; a
//! write racing one of them on the same group costs one 4 KiB copy (the copy the read used to
//! make) and sixteen page references, and the view's old group is freed when its reply is
//! sent.
//! `cargo run --release -p server --example memory_read_path` prints what a read costs the
//! worker both ways (copying a cache-cold 4 KiB page is most of a microsecond on a small VM;
//! raising a reference count is a few hundred nanoseconds with the lock and map lookup).
//!
//! *Registered buffers.* A file volume with `fixed_buffers` owns a [`FixedBufs`]: buffers
//! allocated once, registered with every ring of the volume, read into with `READ_FIXED`. A
//! registered buffer is an [`IoBuf`] that remembers its home and index; it travels as any
//! buffer (reply, pool), the pool hands it out first, and dropping it gives its bytes back to
//! the home, so the addresses the rings registered always belong to the home
//! (`backend/file.rs`, *Registered buffers*).
//!
//! # What it leaves out
//! Registered buffers of more than one size (4 KiB, the smallest class), and for the memory
//! backend (it never touches a ring: its reads are page views). A
//! large read's reply is one iovec a page, and a `writev` of it gathers up to
//! `conn::WRITEV_LARGE_IOVECS` (1,024, `IOV_MAX`) of them, resuming at the part where the last
//! call stopped (`ConnCore`'s cursor; [`PageViews::parts_from`] finds it without walking the
//! views before it), so each view is looked at about once however many calls the socket
//! needs. Into a blocking socket a 1 MiB reply takes one call and a 32 MiB one 9 (64 iovecs
//! a call from the start of the frame took 5 and 129, and walked about half a million views
//! for the 32 MiB); `memory_read_path` prints the writer's CPU per reply and its calls. The
//! socket ring's SENDMSG gathers the same way: up to `conn::WRITEV_LARGE_IOVECS` parts when
//! more than `conn::WRITEV_MAX_IOVECS` are queued, of which at most `WRITEV_MAX_IOVECS` small
//! ones (reply headers, copied into the message; `sys::SendMsg`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sys::{AlignedBytes, FixedRegions};

/// Alignment of every buffer: satisfies O_DIRECT on 512 B and 4 KiB devices.
pub const BUF_ALIGN_BYTES: usize = 4096;
/// Smallest size class.
const MIN_CLASS_BYTES: usize = 4096;
/// Size classes 4 KiB, 8 KiB, … 32 MiB.
const CLASS_COUNT: usize = 14;
/// Idle bytes a pool keeps per size class (at least one buffer of each class).
pub const POOL_KEEP_BYTES_PER_CLASS: usize = 8 << 20;

/// Bytes in a memory volume's page, the unit a [`PageView`] refers to.
pub const PAGE_BYTES: usize = 4096;
/// One page of a memory volume's data.
pub type Page = [u8; PAGE_BYTES];

/// An owned, 4 KiB-aligned byte buffer with a length ≤ its capacity.
pub struct IoBuf {
    bytes: Option<AlignedBytes>,
    len_bytes: usize,
    /// A registered buffer's home and index there (`None`: an ordinary buffer); when the
    /// buffer is dropped its bytes go back to the home, not to the allocator.
    fixed: Option<FixedTag>,
}

/// Which registered buffer an [`IoBuf`] is.
struct FixedTag {
    home: Arc<FixedBufs>,
    index: u16,
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if let (Some(tag), Some(bytes)) = (self.fixed.take(), self.bytes.take()) {
            tag.home.put_back(tag.index, bytes);
        }
    }
}

impl IoBuf {
    /// A buffer that holds nothing (FLUSH, TRIM): no allocation.
    pub fn empty() -> IoBuf {
        IoBuf {
            bytes: None,
            len_bytes: 0,
            fixed: None,
        }
    }

    /// A fresh zeroed buffer of exactly `capacity_bytes` (rounded up to the alignment).
    pub fn zeroed(capacity_bytes: usize) -> IoBuf {
        Self::allocate(capacity_bytes)
    }

    /// A zeroed buffer (never stale heap bytes a client could see) of at least
    /// `capacity_bytes`.
    fn allocate(capacity_bytes: usize) -> IoBuf {
        if capacity_bytes == 0 {
            return IoBuf::empty();
        }
        let capacity_bytes = capacity_bytes.next_multiple_of(BUF_ALIGN_BYTES);
        IoBuf {
            bytes: Some(AlignedBytes::zeroed(capacity_bytes, BUF_ALIGN_BYTES)),
            len_bytes: 0,
            fixed: None,
        }
    }

    /// The index of this buffer among `home`'s registered buffers (`None`: it is not one of
    /// them).
    pub fn fixed_index(&self, home: &Arc<FixedBufs>) -> Option<u16> {
        self.fixed
            .as_ref()
            .filter(|t| Arc::ptr_eq(&t.home, home))
            .map(|t| t.index)
    }

    /// Whether this is a registered buffer of some home.
    pub fn is_fixed(&self) -> bool {
        self.fixed.is_some()
    }

    pub fn capacity_bytes(&self) -> usize {
        self.bytes.as_ref().map_or(0, AlignedBytes::capacity_bytes)
    }

    pub fn len(&self) -> usize {
        self.len_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    /// Sets the valid length; the bytes keep whatever the buffer held (a recycled buffer holds a
    /// previous request's data, so callers overwrite the whole length before sending it).
    pub fn set_len(&mut self, len_bytes: usize) {
        assert!(
            len_bytes <= self.capacity_bytes(),
            "IoBuf::set_len({len_bytes}) beyond capacity {}",
            self.capacity_bytes()
        );
        self.len_bytes = len_bytes;
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.bytes {
            Some(b) => &b.as_slice()[..self.len_bytes],
            None => &[],
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.bytes {
            Some(b) => &mut b.as_mut_slice()[..self.len_bytes],
            None => &mut [],
        }
    }

    /// Raw pointer for io_uring; valid until the buffer is dropped or returned to a pool.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match &mut self.bytes {
            Some(b) => b.as_mut_slice().as_mut_ptr(),
            None => std::ptr::NonNull::<u8>::dangling().as_ptr(),
        }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IoBuf({}/{} bytes)",
            self.len_bytes,
            self.capacity_bytes()
        )
    }
}

/// Pages in a [`PageGroup`]: a memory volume's chunk (64 KiB).
pub const GROUP_PAGES: usize = 16;

/// What a page never written shows.
static ZERO_PAGE: Page = [0u8; PAGE_BYTES];

/// A run of [`GROUP_PAGES`] consecutive pages of a memory volume (its chunk), each allocated on
/// its first write (`None`: zeros). The group is what a [`PageView`] counts a reference on, so
/// a read raises one count that lies beside the volume's index (the group's allocation, which
/// the lookup has just touched), not one in the cold header of each page it views. Cloning a
/// group (the volume's copy-on-write when a write meets a view) clones the pages' references,
/// not their bytes.
#[derive(Clone, Default)]
pub struct PageGroup {
    pub pages: [Option<Arc<Page>>; GROUP_PAGES],
}

impl PageGroup {
    /// Page `index`'s bytes (zeros when it was never written).
    pub fn page(&self, index: usize) -> &Page {
        self.pages[index].as_deref().unwrap_or(&ZERO_PAGE)
    }

    /// Pages allocated.
    pub fn allocated_pages(&self) -> usize {
        self.pages.iter().filter(|p| p.is_some()).count()
    }
}

/// Bytes within one page of a [`PageGroup`], held by a counted reference on the group: the
/// group, and so the page, cannot change while the view lives (the volume copies a group it
/// must write while views hold it, `backend/memory.rs`). A view of a hole (a chunk never
/// written) holds no group and no count: it shows zeros, so reads of an unwritten volume on
/// several workers do not all raise and drop the count of one shared empty group.
#[derive(Clone)]
pub struct PageView {
    group: Option<Arc<PageGroup>>,
    page: u16,
    offset_bytes: u16,
    len_bytes: u16,
}

impl PageView {
    /// The `len_bytes` at `offset_bytes` of a page that is the only one of its group.
    pub fn new(page: Arc<Page>, offset_bytes: usize, len_bytes: usize) -> PageView {
        let mut group = PageGroup::default();
        group.pages[0] = Some(page);
        PageView::in_group(Arc::new(group), 0, offset_bytes, len_bytes)
    }

    /// The `len_bytes` at `offset_bytes` of page `page` of `group`; the range must lie within
    /// the page.
    pub fn in_group(
        group: Arc<PageGroup>,
        page: usize,
        offset_bytes: usize,
        len_bytes: usize,
    ) -> PageView {
        PageView::at(Some(group), page, offset_bytes, len_bytes)
    }

    /// The `len_bytes` at `offset_bytes` of a page never written (zeros), holding nothing.
    pub fn zeros(offset_bytes: usize, len_bytes: usize) -> PageView {
        PageView::at(None, 0, offset_bytes, len_bytes)
    }

    fn at(
        group: Option<Arc<PageGroup>>,
        page: usize,
        offset_bytes: usize,
        len_bytes: usize,
    ) -> PageView {
        assert!(
            offset_bytes + len_bytes <= PAGE_BYTES && page < GROUP_PAGES,
            "view of {len_bytes} bytes at {offset_bytes} of page {page} leaves its group"
        );
        PageView {
            group,
            page: page as u16,
            offset_bytes: offset_bytes as u16,
            len_bytes: len_bytes as u16,
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.len_bytes)
    }

    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        let (off, len) = (usize::from(self.offset_bytes), usize::from(self.len_bytes));
        let page = match &self.group {
            Some(group) => group.page(usize::from(self.page)),
            None => &ZERO_PAGE,
        };
        &page[off..off + len]
    }
}

impl std::fmt::Debug for PageView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PageView({} bytes at {})",
            self.len_bytes, self.offset_bytes
        )
    }
}

/// A read's data as views of consecutive pages, in order. The first view is held inline, so a
/// read within one page allocates nothing.
#[derive(Debug, Default)]
pub struct PageViews {
    first: Option<PageView>,
    rest: Vec<PageView>,
    len_bytes: usize,
}

impl PageViews {
    pub fn new() -> PageViews {
        PageViews::default()
    }

    /// Appends the next view.
    pub fn push(&mut self, view: PageView) {
        self.len_bytes += view.len();
        match self.first {
            None => self.first = Some(view),
            Some(_) => self.rest.push(view),
        }
    }

    /// Bytes over all views.
    pub fn len(&self) -> usize {
        self.len_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    /// The views' bytes, one slice a view, in order.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.parts_from(0)
    }

    /// The views' bytes from view `k` on (none past the last), found without walking the
    /// views before it: a reply sent in several calls resumes where the last one stopped.
    pub fn parts_from(&self, k: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let first = if k == 0 { self.first.as_ref() } else { None };
        let rest = self.rest.get(k.saturating_sub(1)..).unwrap_or(&[]);
        first.into_iter().chain(rest).map(PageView::as_slice)
    }
}

/// A reply's data: a buffer the worker owns, or views of a memory volume's pages.
#[derive(Debug)]
pub enum ReplyData {
    Buf(IoBuf),
    Pages(PageViews),
}

impl ReplyData {
    pub fn len(&self) -> usize {
        match self {
            ReplyData::Buf(b) => b.len(),
            ReplyData::Pages(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data as the slices it lies in, in order (one for a buffer, one a page for views).
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.parts_from(0)
    }

    /// The slices from part `k` on, found without walking the parts before it.
    pub fn parts_from(&self, k: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let (buf, views) = match self {
            ReplyData::Buf(b) => ((k == 0).then(|| b.as_slice()), None),
            ReplyData::Pages(v) => (None, Some(v.parts_from(k))),
        };
        buf.into_iter().chain(views.into_iter().flatten())
    }
}

/// Registered buffers shared by a file volume's rings: [`FixedBufs::count`] buffers of
/// [`FixedBufs::buf_bytes`], each allocated once and registered with every ring that may read
/// into it (`IORING_REGISTER_BUFFERS`, through [`crate::sys::Ring::register_buffers`], which
/// keeps the home alive as long as the ring). A buffer taken from the home is an [`IoBuf`]
/// like any other (it circulates through replies and the worker's [`BufPool`], which keeps it
/// apart and hands it out before ordinary buffers of its class); when it is dropped its bytes
/// come back here, so the set of addresses the
/// rings registered never changes and never points at freed memory.
///
/// Worked example: a home of 256 × 4 KiB; a 4 KiB READ arrives with a pooled ordinary buffer,
/// the file backend swaps it for registered buffer 7 (the ordinary one is freed) and reads with
/// `READ_FIXED` into it; the reply sends buffer 7 as it is, the send's completion gives it to
/// the worker's pool, and the next 4 KiB READ the worker decodes takes it from there: no swap.
/// When all 256 are out, a READ keeps its ordinary buffer and a plain `READ` (counted in
/// [`FixedBufs::fallbacks`]).
pub struct FixedBufs {
    /// `(address, length)` of every buffer, by index: what the rings register.
    regions: Vec<(usize, usize)>,
    buf_bytes: usize,
    free: Mutex<Vec<(u16, AlignedBytes)>>,
    /// Reads that went to the kernel with a registered buffer, and reads that could have but
    /// found none free (over every worker).
    fixed_reads: AtomicU64,
    fallbacks: AtomicU64,
}

impl FixedBufs {
    /// A home of `count` (at most `u16::MAX`) zeroed buffers of `buf_bytes` (a power of two,
    /// at least [`MIN_CLASS_BYTES`]: a size class of the pool).
    pub fn new(count: usize, buf_bytes: usize) -> Arc<FixedBufs> {
        assert!(
            count <= usize::from(u16::MAX)
                && buf_bytes.is_power_of_two()
                && buf_bytes >= MIN_CLASS_BYTES,
            "registered buffers: {count} of {buf_bytes} bytes"
        );
        let mut free = Vec::with_capacity(count);
        let mut regions = Vec::with_capacity(count);
        for index in 0..count {
            let mut bytes = AlignedBytes::zeroed(buf_bytes, BUF_ALIGN_BYTES);
            let slice = bytes.as_mut_slice();
            regions.push((slice.as_mut_ptr() as usize, slice.len()));
            free.push((index as u16, bytes));
        }
        // Taken from the end: the lowest indexes first.
        free.reverse();
        Arc::new(FixedBufs {
            regions,
            buf_bytes,
            free: Mutex::new(free),
            fixed_reads: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        })
    }

    /// How many buffers the home has.
    pub fn count(&self) -> usize {
        self.regions.len()
    }

    /// Bytes of each buffer.
    pub fn buf_bytes(&self) -> usize {
        self.buf_bytes
    }

    /// A free registered buffer of length `len_bytes` (≤ [`Self::buf_bytes`]), or `None`
    /// when all are out.
    pub fn take(self: &Arc<Self>, len_bytes: usize) -> Option<IoBuf> {
        assert!(
            len_bytes <= self.buf_bytes,
            "a {len_bytes}-byte registered buffer"
        );
        let (index, bytes) = self.lock().pop()?;
        let mut buf = IoBuf {
            bytes: Some(bytes),
            len_bytes: 0,
            fixed: Some(FixedTag {
                home: self.clone(),
                index,
            }),
        };
        buf.set_len(len_bytes);
        Some(buf)
    }

    /// Buffers not out.
    pub fn free_count(&self) -> usize {
        self.lock().len()
    }

    /// Counts a read that went in with a registered buffer (`true`) or found none free.
    pub fn count_read(&self, fixed: bool) {
        let counter = if fixed {
            &self.fixed_reads
        } else {
            &self.fallbacks
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads that went to the kernel with a registered buffer.
    pub fn fixed_reads(&self) -> u64 {
        self.fixed_reads.load(Ordering::Relaxed)
    }

    /// Reads that could have taken a registered buffer but found none free.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    fn put_back(&self, index: u16, bytes: AlignedBytes) {
        debug_assert_eq!(
            bytes.as_slice().as_ptr() as usize,
            self.regions[usize::from(index)].0,
            "a registered buffer came back with other bytes"
        );
        self.lock().push((index, bytes));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u16, AlignedBytes)>> {
        // The list is consistent after any panic (a push or a pop).
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl FixedRegions for FixedBufs {
    fn regions(&self) -> &[(usize, usize)] {
        &self.regions
    }
}

impl std::fmt::Debug for FixedBufs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FixedBufs({} × {} bytes)", self.count(), self.buf_bytes)
    }
}

/// Per-worker recycling of [`IoBuf`]s by power-of-two size class.
///
/// Registered buffers ([`FixedBufs`]) the pool is given are kept apart and handed out first
/// for requests of their size class: an ordinary buffer goes to a read only when no registered
/// one is idle here, so reads fall back to plain ones only while all registered buffers are
/// in flight.
#[derive(Default)]
pub struct BufPool {
    classes: [Vec<IoBuf>; CLASS_COUNT],
    fixed: Vec<IoBuf>,
}

fn class_of(len_bytes: usize) -> Option<usize> {
    let rounded = len_bytes.max(MIN_CLASS_BYTES).next_power_of_two();
    let class = (rounded.trailing_zeros() - MIN_CLASS_BYTES.trailing_zeros()) as usize;
    (class < CLASS_COUNT).then_some(class)
}

impl BufPool {
    pub fn new() -> BufPool {
        BufPool::default()
    }

    /// A buffer of length `len_bytes` (capacity: its size class). Zero length: no allocation.
    pub fn take(&mut self, len_bytes: usize) -> IoBuf {
        if len_bytes == 0 {
            return IoBuf::empty();
        }
        let rounded = len_bytes.max(MIN_CLASS_BYTES).next_power_of_two();
        if self
            .fixed
            .last()
            .is_some_and(|b| b.capacity_bytes() == rounded)
        {
            let mut buf = self.fixed.pop().expect("checked");
            buf.set_len(len_bytes);
            return buf;
        }
        let mut buf = match class_of(len_bytes) {
            Some(class) => match self.classes[class].pop() {
                Some(buf) => buf,
                None => IoBuf::allocate(MIN_CLASS_BYTES << class),
            },
            None => IoBuf::allocate(len_bytes),
        };
        buf.set_len(len_bytes);
        buf
    }

    /// Returns a buffer for reuse (or frees it when its class holds enough already).
    pub fn give(&mut self, buf: IoBuf) {
        if buf.is_fixed() {
            // At most its home's count: each is one of them.
            self.fixed.push(buf);
            return;
        }
        let capacity_bytes = buf.capacity_bytes();
        if capacity_bytes == 0 || !capacity_bytes.is_power_of_two() {
            return;
        }
        if let Some(class) = class_of(capacity_bytes) {
            let kept = &mut self.classes[class];
            if kept.is_empty() || (kept.len() + 1) * capacity_bytes <= POOL_KEEP_BYTES_PER_CLASS {
                kept.push(buf);
            }
        }
    }

    /// Returns a sent or dropped reply's data: a buffer for reuse; page views are let go.
    pub fn give_reply_data(&mut self, data: ReplyData) {
        if let ReplyData::Buf(b) = data {
            self.give(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_sized() {
        let mut pool = BufPool::new();
        for len in [1usize, 512, 4096, 4097, 1 << 20, 32 << 20] {
            let mut b = pool.take(len);
            assert_eq!(b.len(), len);
            assert!(b.capacity_bytes() >= len);
            assert_eq!(b.as_mut_ptr() as usize % BUF_ALIGN_BYTES, 0);
            pool.give(b);
        }
    }

    #[test]
    fn pool_recycles_same_class() {
        let mut pool = BufPool::new();
        let mut a = pool.take(4096);
        let ptr = a.as_mut_ptr();
        pool.give(a);
        let mut b = pool.take(3000);
        assert_eq!(
            b.as_mut_ptr(),
            ptr,
            "a 3000-byte request reuses the 4 KiB buffer"
        );
        assert_eq!(b.len(), 3000);
    }

    #[test]
    fn pool_caps_idle_bytes() {
        let mut pool = BufPool::new();
        let bufs: Vec<IoBuf> = (0..10).map(|_| pool.take(4 << 20)).collect();
        for b in bufs {
            pool.give(b);
        }
        let class = class_of(4 << 20).unwrap();
        assert_eq!(
            pool.classes[class].len(),
            2,
            "8 MiB cap keeps two 4 MiB buffers"
        );
    }

    /// A pool hands out the registered buffers it holds before ordinary ones of their class
    /// (never for a larger request), and a registered buffer dropped anywhere goes home.
    #[test]
    fn pool_prefers_registered_buffers_and_dropped_ones_go_home() {
        let home = FixedBufs::new(2, 4096);
        let mut pool = BufPool::new();
        let plain = pool.take(4096);
        pool.give(plain);
        let a = home.take(4096).expect("a free registered buffer");
        assert!(a.fixed_index(&home).is_some());
        assert_eq!(home.free_count(), 1);
        pool.give(a);
        assert!(
            !pool.take(8192).is_fixed(),
            "an 8 KiB request takes no 4 KiB buffer"
        );
        let b = pool.take(1000);
        assert!(b.is_fixed() && b.len() == 1000, "registered first");
        assert!(!pool.take(4096).is_fixed(), "then the ordinary one");
        let other = FixedBufs::new(1, 4096);
        assert_eq!(b.fixed_index(&other), None, "an index only in its own home");
        drop(b);
        assert_eq!(home.free_count(), 2);
        assert_eq!(home.take(4096).and_then(|c| c.fixed_index(&home)), Some(0));
    }

    #[test]
    fn fresh_buffers_hold_no_stale_bytes() {
        let mut b = IoBuf::allocate(8192);
        b.set_len(8192);
        assert!(b.as_slice().iter().all(|&x| x == 0));
    }
}
