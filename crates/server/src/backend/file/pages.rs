//! Which descriptor may write where: a file volume never has a direct and a buffered write in
//! the kernel at once on one stretch of the file.
//!
//! # Why
//! A direct write invalidates the page cache over its range when it completes, so that a later
//! buffered read sees what it wrote. If a buffered write dirtied a page of that range while the
//! direct write was in flight, the page cannot be dropped: Linux then warns "Page cache
//! invalidation failure on direct I/O. Possible data corruption due to collision with buffered
//! I/O!", keeps the page (whose other sectors are older than the disk) and records EIO in the
//! file's error sequence, so the next `fdatasync` — an NBD FLUSH — fails. The two writes need
//! not overlap: a 512 B buffered write of sector 0 of a 4 KiB page and a direct write of its
//! sectors 1-7 collide, and NBD lets a client have both in flight (the NBD project's
//! integrity test does; it found this). A file volume routes writes by alignment (whole blocks
//! direct, partial blocks tried direct with `RWF_NOWAIT`, the rest buffered), so collisions
//! are what its routing makes unless it keeps the two apart.
//!
//! # The rule
//! The file is cut into stretches of [`STRETCH_BYTES`] (a page cache folio is at most that here;
//! a block's page is always inside one stretch), hashed onto [`STRIPES`] counters of writes in
//! the kernel per descriptor kind. A write may go in through a descriptor only if no write
//! through the other kind is in the kernel on any stripe it touches ([`PageModes::claim`]),
//! and it gives the stripes back at its completion. The file backend asks for its preferred
//! route first, then for the other one where the write allows it (buffered always; direct when
//! aligned to the direct alignment), and holds the write for a retry when both are taken
//! (`ring.rs`). Writes of one kind share stripes freely: direct writes are ordered by the file
//! system, buffered ones by the page cache. Reads are not counted: a direct read writes back
//! dirty pages of its range before reading, and a clean page that a buffered read caches
//! during a direct write is dropped by the write's invalidation.
//!
//! Worked example (4 KiB blocks): a buffered 512 B write at 0 claims stretch 0 as buffered; a
//! direct write of 8 KiB at 512, sent while it is in flight, finds stretch 0 buffered and goes
//! through the page cache too; a whole-block direct write at 1 MiB (stretch 16) goes direct
//! beside them. Once the buffered writes complete, stretch 0 takes direct writes again.
//!
//! # What it leaves out
//! Hash collisions between stretches 64 MiB apart (the same stripe) make a write take the
//! other descriptor, or wait, for nothing; folios larger than a stretch (none on the file
//! systems here at this size; huge pages would need a larger stretch).

use std::sync::Mutex;

/// The unit of the table: a stretch of the file that holds whole page cache folios.
pub const STRETCH_BYTES: u64 = 64 << 10;
/// Counters per descriptor kind (a write touching more stretches than this claims them all).
pub const STRIPES: usize = 1024;

/// The descriptor kind of a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Direct,
    Buffered,
}

/// The writes in the kernel per stripe and descriptor kind, for one volume (all workers).
#[derive(Debug)]
pub struct PageModes {
    counts: Mutex<Counts>,
}

#[derive(Debug)]
struct Counts {
    direct: Vec<u32>,
    buffered: Vec<u32>,
}

impl Counts {
    fn of(&mut self, via: Via) -> &mut Vec<u32> {
        match via {
            Via::Direct => &mut self.direct,
            Via::Buffered => &mut self.buffered,
        }
    }
}

/// The stripes `[offset, offset + len)` touches.
fn stripes(offset_bytes: u64, len_bytes: u64) -> impl Iterator<Item = usize> {
    let first = offset_bytes / STRETCH_BYTES;
    let last = (offset_bytes + len_bytes.max(1) - 1) / STRETCH_BYTES;
    let n = (last - first + 1).min(STRIPES as u64);
    (0..n).map(move |k| ((first + k) % STRIPES as u64) as usize)
}

impl Default for PageModes {
    fn default() -> Self {
        PageModes {
            counts: Mutex::new(Counts {
                direct: vec![0; STRIPES],
                buffered: vec![0; STRIPES],
            }),
        }
    }
}

impl PageModes {
    /// Counts a write of `[offset, offset + len)` through `via` as in the kernel, if no write
    /// through the other kind is there on its stripes; false (nothing counted) otherwise.
    pub fn claim(&self, offset_bytes: u64, len_bytes: u64, via: Via) -> bool {
        let other = match via {
            Via::Direct => Via::Buffered,
            Via::Buffered => Via::Direct,
        };
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if stripes(offset_bytes, len_bytes).any(|s| counts.of(other)[s] > 0) {
            return false;
        }
        let mine = counts.of(via);
        for s in stripes(offset_bytes, len_bytes) {
            mine[s] += 1;
        }
        true
    }

    /// Gives back a claim made with the same arguments (its write completed).
    pub fn release(&self, offset_bytes: u64, len_bytes: u64, via: Via) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let mine = counts.of(via);
        for s in stripes(offset_bytes, len_bytes) {
            assert!(mine[s] > 0, "released a stripe no write of its kind holds");
            mine[s] -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module essay's example: a buffered write keeps direct writes out of its stretch
    /// until it is released, and not out of other stretches; writes of one kind share.
    #[test]
    fn one_kind_per_stretch_while_in_the_kernel() {
        let m = PageModes::default();
        assert!(m.claim(0, 512, Via::Buffered));
        assert!(
            !m.claim(512, 8192, Via::Direct),
            "the same stretch is buffered"
        );
        assert!(m.claim(512, 8192, Via::Buffered), "buffered writes share");
        assert!(m.claim(1 << 20, 4096, Via::Direct), "another stretch");
        assert!(
            !m.claim(STRETCH_BYTES - 512, 1024, Via::Direct),
            "it straddles stretch 0"
        );
        m.release(0, 512, Via::Buffered);
        assert!(
            !m.claim(4096, 4096, Via::Direct),
            "one buffered write still there"
        );
        m.release(512, 8192, Via::Buffered);
        assert!(m.claim(4096, 4096, Via::Direct));
        assert!(!m.claim(0, 1, Via::Buffered));
        m.release(4096, 4096, Via::Direct);
        m.release(1 << 20, 4096, Via::Direct);
        assert!(m.claim(0, 1, Via::Buffered));
    }

    /// A write longer than the table claims every stripe once.
    #[test]
    fn a_huge_write_claims_every_stripe_once() {
        let m = PageModes::default();
        let huge = STRETCH_BYTES * STRIPES as u64 * 2;
        assert!(m.claim(0, huge, Via::Direct));
        assert!(!m.claim(123 * STRETCH_BYTES, 1, Via::Buffered));
        m.release(0, huge, Via::Direct);
        assert!(m.claim(123 * STRETCH_BYTES, 1, Via::Buffered));
    }
}
