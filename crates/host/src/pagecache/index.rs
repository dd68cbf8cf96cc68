//! A file's page index: page number -> cache slot (Linux's `address_space.i_pages`, the xarray
//! every file keeps of its cached pages).
//!
//! ## Why a table and not a hash map
//! Every read looks each of its pages up, every write dirties each page, and write-back and
//! read completion walk runs of consecutive pages. A hash map scatters consecutive pages across
//! its table, so each of those steps is a cache miss; this index keeps them side by side.
//!
//! ## The structure
//! Two levels, as the xarray has: a directory with one entry per `LEAF_PAGES` pages of the
//! file, and leaves of `LEAF_PAGES` slot numbers (`NIL` where the page is not cached). A leaf is
//! added the first time one of its pages is cached and kept for the run. The leaves live end to
//! end in one vector that grows by doubling, and a directory entry is its leaf's number there
//! (`NIL`: none yet), so a file's index allocates a few dozen times in a run, not once per leaf.
//! Lookups are two array reads, inlined where the page cache makes them (a call's register saves
//! cost more than the reads: a buffered read inserts and evicts a page for every page it misses).
//!
//! Worked example: a 16 GiB file has 4 194 304 pages, so 8 192 directory entries (64 KiB); a
//! leaf covers 2 MiB of the file in 2 KiB, so an index costs at most 1/1024 of the file's size
//! (16 MiB) and only for the parts of the file that were ever cached.
//!
//! It is never iterated: which pages are cached is the same whatever the layout, so it cannot
//! change a result.

/// The empty marker of a slot number: no page, no leaf, the end of a list.
pub const NIL: u32 = u32::MAX;

/// Pages one leaf covers (2 KiB of slot numbers for 2 MiB of file).
const LEAF_PAGES: usize = 512;

/// The cached pages of one file, by page number.
#[derive(Clone, Debug)]
pub struct PageIndex {
    /// Per `LEAF_PAGES` pages of the file: its leaf's number in `slots`, or `NIL`.
    directory: Vec<u32>,
    /// The leaves, end to end: leaf `l` is `slots[l * LEAF_PAGES..(l + 1) * LEAF_PAGES]`.
    slots: Vec<u32>,
    len: u64,
}

fn split(page: u64) -> (usize, usize) {
    let page = page as usize;
    (page / LEAF_PAGES, page % LEAF_PAGES)
}

impl PageIndex {
    /// An empty index for a file of `pages` pages.
    pub fn new(pages: u64) -> Self {
        PageIndex {
            directory: vec![NIL; (pages as usize).div_ceil(LEAF_PAGES)],
            slots: Vec::new(),
            len: 0,
        }
    }

    /// Pages cached.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Leaves added so far.
    fn leaves(&self) -> usize {
        self.slots.len() / LEAF_PAGES
    }

    /// Where `page`'s slot number is kept in `slots`, if its leaf exists.
    #[inline]
    fn position(&self, page: u64) -> Option<usize> {
        let (dir, at) = split(page);
        let leaf = self.directory[dir];
        (leaf != NIL).then(|| leaf as usize * LEAF_PAGES + at)
    }

    /// The slot of `page`, if cached.
    #[inline]
    pub fn get(&self, page: u64) -> Option<u32> {
        let s = self.slots[self.position(page)?];
        (s != NIL).then_some(s)
    }

    /// Records `page` at slot `s`; the page must not be cached yet.
    #[inline]
    pub fn insert(&mut self, page: u64, s: u32) {
        assert!(s != NIL, "slot {s} is the empty marker");
        let i = match self.position(page) {
            Some(i) => i,
            None => {
                let (dir, at) = split(page);
                let leaf = self.leaves();
                self.directory[dir] = u32::try_from(leaf).expect("leaf numbers fit a u32");
                self.slots.resize(self.slots.len() + LEAF_PAGES, NIL);
                leaf * LEAF_PAGES + at
            }
        };
        assert!(self.slots[i] == NIL, "page {page} inserted twice");
        self.slots[i] = s;
        self.len += 1;
    }

    /// Forgets `page`, which must be cached.
    #[inline]
    pub fn remove(&mut self, page: u64) {
        let i = self
            .position(page)
            .filter(|&i| self.slots[i] != NIL)
            .unwrap_or_else(|| panic!("page {page} removed but not cached"));
        self.slots[i] = NIL;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_across_leaves_map_to_their_slots_until_removed() {
        let pages = 3 * LEAF_PAGES as u64 + 7;
        let mut ix = PageIndex::new(pages);
        assert_eq!(ix.directory.len(), 4);
        let probe = [0, 1, LEAF_PAGES as u64 - 1, LEAF_PAGES as u64, pages - 1];
        for (i, &p) in probe.iter().enumerate() {
            assert_eq!(ix.get(p), None);
            ix.insert(p, i as u32 * 10);
        }
        assert_eq!(ix.len(), probe.len() as u64);
        for (i, &p) in probe.iter().enumerate() {
            assert_eq!(ix.get(p), Some(i as u32 * 10));
        }
        // Neighbours in an added leaf stay absent; an untouched leaf was never added.
        assert_eq!(ix.get(2), None);
        assert_eq!(ix.directory[2], NIL);
        assert_eq!(ix.leaves(), 3);
        ix.remove(LEAF_PAGES as u64);
        assert_eq!(ix.get(LEAF_PAGES as u64), None);
        assert_eq!(ix.get(LEAF_PAGES as u64 - 1), Some(20));
        assert_eq!(ix.len(), probe.len() as u64 - 1);
    }

    #[test]
    #[should_panic(expected = "inserted twice")]
    fn a_page_cannot_be_inserted_twice() {
        let mut ix = PageIndex::new(10);
        ix.insert(3, 1);
        ix.insert(3, 2);
    }

    #[test]
    #[should_panic(expected = "removed but not cached")]
    fn removing_an_absent_page_is_refused() {
        let mut ix = PageIndex::new(10);
        ix.insert(3, 1);
        ix.remove(4);
    }
}
