//! Where host write-back rows go within a LUN when page types differ in speed (`ftl.alloc`).
//!
//! ## What it models
//! A TLC word line holds three pages — LSB, CSB, MSB — that program in 0.56, 2.2 and 5 ms on
//! `nvme-tlc` (device.md). Programming a block in order (the baseline, `sequential`) gives every
//! third row the fast LSB time and the others 4–9 times more, whatever the hurry. When the write
//! buffer must drain *now* (foreground eviction, an overflow stall), the slow pages are what the
//! waiting writes pay for. The published latency-aware FTL keeps several blocks open per die
//! so that an urgent row can always find a fast page, and gives the slow pages to eviction
//! nobody waits for.
//!
//! ## The policies
//! - `sequential` (default): the LUN's one write point programs pages in order (`ftl/placement.rs`,
//!   "Allocation"). Urgency is ignored.
//! - `lsb-skip`: before each host row the write point skips to the next LSB page; the CSB/MSB
//!   pages it jumps over are never programmed (counted in `units_wasted` and
//!   `alloc.pages_skipped`; GC reclaims them when it erases the block). Every host row is fast;
//!   two thirds of the flash it passes is wasted.
//! - `latency-aware`: each LUN keeps a list of open superblocks, each with a pointer to its
//!   next free page (programmed in order, as NAND requires); the pointers fall in three groups
//!   by the type of that next page, LSB, CSB or MSB. A *foreground* row (fastdrain's foreground
//!   eviction, or an on-full round that writes are stalled on) takes a block from the LUN's LSB
//!   group; when the group is empty it opens a fresh superblock into the *LSB region* — while
//!   the region (its superblocks open now, device-wide) stays within `max_lsb_region_bytes`
//!   and the LUN keeps more free superblocks than the GC threshold; otherwise it falls back to
//!   the fastest other page (CSB, then MSB; counted in `alloc.foreground_fallbacks`). The
//!   region is **LSB-only** (device.md): after each row a region block's pointer skips its
//!   CSB/MSB pages to the next LSB page, and the skipped pages stay unprogrammed (counted in
//!   `units_wasted` and `alloc.pages_skipped`) until GC erases the block. The device spreads
//!   foreground rows over the LUNs in turn (`Ftl::next_host_lun`), so consecutive urgent rows
//!   take LSB pages of different dies. A *background* row (fastdrain's background eviction,
//!   the idle flush) prefers the CSB group, then MSB, then LSB, of blocks outside the region,
//!   and opens a superblock only when the LUN has none of those open — so it fills slow pages
//!   in order, skips nothing, and leaves the region's fast pages to urgent rows. An earlier version kept region blocks open until background rows
//!   filled their slow pages: with few background rows they never closed, the region stayed
//!   at its limit and most foreground rows fell back to slow pages (`fd-ftl-apache-upload` in
//!   the FastDrain study: 640,015 fallbacks, host rows LSB/CSB/MSB 339,826 / 339,817 /
//!   334,141).
//!   Worked example (`nvme-tlc`: 6 MiB superblocks, 128 LUNs): the 64 GB cap is 10,172
//!   superblocks, about 79 per LUN; a foreground burst of 10,172 rows takes one LSB page in each
//!   and programs at 0.56 ms per row, where `sequential` averages (0.56 + 2.2 + 5) / 3 = 2.59 ms.
//!
//! GC relocations keep using the LUN's single write point in page order (`ftl/gc.rs`): they are
//! not urgent and skip nothing.
//!
//! ## What it leaves out
//! Program-order constraints across word lines beyond in-order pages within a block (real TLC
//! programs a word line's pages in a shuffled order). The region bounds the LSB-only blocks
//! open at once, not the space their skipped pages hold until GC (a region block holds a third
//! of the data a sequential one does).
//!
//! Config keys: `ftl.alloc` (`sequential` | `lsb-skip` | `latency-aware`),
//! `ftl.max_lsb_region_bytes`.

use super::{Ftl, RowPlacement, Writer};
use crate::config::Alloc;
use crate::flash::PageType;
use state::OpenBlock;

pub(super) mod state;

/// How urgent a host row is: who waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Urgency {
    /// Writes are stalled on it, or foreground eviction must bring the buffer down.
    Foreground,
    /// Nobody waits: background eviction or the idle flush.
    Background,
}

impl Ftl {
    /// Programs one host row on `lun` holding `units`, where `ftl.alloc` puts it for a row of
    /// `urgency`. The caller must have checked [`has_room`](Self::has_room).
    pub fn write_host_row(
        &mut self,
        lun: u32,
        units: &[(u32, u32)],
        urgency: Urgency,
    ) -> RowPlacement {
        let placed = match self.alloc.policy {
            Alloc::Sequential => return self.write_row(lun, units, Writer::Host),
            Alloc::LsbSkip => {
                self.skip_to_lsb(lun);
                self.write_row(lun, units, Writer::Host)
            }
            Alloc::LatencyAware => self.write_latency_aware(lun, units, urgency),
        };
        let page_type = self.geo.page_type(placed.page);
        if let Some(s) = &mut self.stats.alloc {
            match page_type {
                PageType::Lsb => s.host_rows_lsb += 1,
                PageType::Csb => s.host_rows_csb += 1,
                PageType::Msb => s.host_rows_msb += 1,
            }
        }
        placed
    }

    /// `lsb-skip`: moves `lun`'s write point to the next LSB page, wasting the pages between
    /// (closing the superblock if none is left).
    fn skip_to_lsb(&mut self, lun: u32) {
        let types = self.geo.cell.page_types() as u32;
        let pages = self.geo.pages_per_block;
        let row_units = self.geo.row_units() as u64;
        let l = &mut self.luns[lun as usize];
        let Some(sb) = l.open else { return };
        let skip = (types - l.next_row % types) % types;
        if skip == 0 {
            return;
        }
        let skip = skip.min(pages - l.next_row);
        l.next_row += skip;
        if l.next_row == pages {
            l.open = None;
            self.close_superblock(lun, sb);
        }
        self.stats.units_wasted += skip as u64 * row_units;
        if let Some(s) = &mut self.stats.alloc {
            s.pages_skipped += skip as u64;
        }
    }

    /// `latency-aware`: picks an open superblock of `lun` by the type of its next page (see the
    /// module essay), programs the row there and advances its pointer.
    fn write_latency_aware(
        &mut self,
        lun: u32,
        units: &[(u32, u32)],
        urgency: Urgency,
    ) -> RowPlacement {
        let at = self.pick_latency_aware(lun, urgency);
        let OpenBlock { sb, next_row, .. } = self.alloc.open[lun as usize][at];
        self.place_row(lun, sb, next_row, units, Writer::Host);
        let pages = self.geo.pages_per_block;
        let types = self.geo.cell.page_types() as u32;
        let row_units = self.geo.row_units() as u64;
        let open = &mut self.alloc.open[lun as usize];
        open[at].next_row += 1;
        if open[at].in_region {
            // The LSB region is LSB-only: its pointer skips the block's slow pages, which stay
            // unprogrammed (wasted) until GC erases the block.
            let r = open[at].next_row;
            let skip = ((types - r % types) % types).min(pages - r);
            open[at].next_row += skip;
            self.stats.units_wasted += skip as u64 * row_units;
            if let Some(s) = &mut self.stats.alloc {
                s.pages_skipped += skip as u64;
            }
        }
        let open = &mut self.alloc.open[lun as usize];
        if open[at].next_row == pages {
            let done = open.remove(at);
            if done.in_region {
                self.alloc.region_superblocks -= 1;
            }
            self.close_superblock(lun, sb);
        }
        RowPlacement {
            superblock: sb,
            page: next_row,
        }
    }

    /// Index in `lun`'s open list of the superblock the next row of `urgency` goes to, opening
    /// one if needed.
    fn pick_latency_aware(&mut self, lun: u32, urgency: Urgency) -> usize {
        let with_next = |ftl: &Ftl, t: PageType| {
            ftl.alloc.open[lun as usize]
                .iter()
                .position(|o| ftl.geo.page_type(o.next_row) == t)
        };
        // Background rows stay out of the LSB region: its fast pages are for urgent rows.
        let outside_region = |ftl: &Ftl, t: PageType| {
            ftl.alloc.open[lun as usize]
                .iter()
                .position(|o| !o.in_region && ftl.geo.page_type(o.next_row) == t)
        };
        match urgency {
            Urgency::Foreground => {
                if let Some(i) = with_next(self, PageType::Lsb) {
                    return i;
                }
                let free = self.luns[lun as usize].free.len() as u32;
                if self.alloc.region_superblocks < self.alloc.region_cap_superblocks
                    && free > self.gc_threshold_free.max(self.gc_reserve)
                {
                    return self.open_latency_aware(lun, true);
                }
                let fallback = with_next(self, PageType::Csb).or(with_next(self, PageType::Msb));
                if let Some(s) = &mut self.stats.alloc {
                    s.foreground_fallbacks += 1;
                }
                match fallback {
                    Some(i) => i,
                    None => self.open_latency_aware(lun, false),
                }
            }
            Urgency::Background => {
                match outside_region(self, PageType::Csb)
                    .or(outside_region(self, PageType::Msb))
                    .or(outside_region(self, PageType::Lsb))
                {
                    Some(i) => i,
                    None => self.open_latency_aware(lun, false),
                }
            }
        }
    }

    /// Opens a free superblock of `lun` into the latency-aware list; returns its index.
    fn open_latency_aware(&mut self, lun: u32, in_region: bool) -> usize {
        let sb = self.take_free_superblock(lun);
        if in_region {
            self.alloc.region_superblocks += 1;
            assert!(
                self.alloc.region_superblocks <= self.alloc.region_cap_superblocks,
                "LSB region of {} superblocks beyond its cap of {}",
                self.alloc.region_superblocks,
                self.alloc.region_cap_superblocks
            );
            if let Some(s) = &mut self.stats.alloc {
                s.lsb_region_superblocks_max = s
                    .lsb_region_superblocks_max
                    .max(self.alloc.region_superblocks);
            }
        }
        let open = &mut self.alloc.open[lun as usize];
        open.push(OpenBlock {
            sb,
            next_row: 0,
            in_region,
        });
        open.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{nvme_tlc, Precondition};
    use crate::flash::Geometry;

    /// 4 LUNs of 16 superblocks of 6 pages (2 word lines), 4-unit rows, factory fresh.
    fn ftl(policy: Alloc, region_superblocks: u64) -> Ftl {
        let mut c = nvme_tlc();
        c.flash.channels = 4;
        c.flash.packages_per_channel = 1;
        c.flash.dies_per_package = 1;
        c.flash.blocks_per_plane = 16;
        c.flash.pages_per_block = 6;
        c.ftl.gc_threshold_pct = 10;
        c.ftl.overprovisioning_pct = 25;
        c.ftl.precondition = Precondition::None;
        c.ftl.alloc = policy;
        let g = Geometry::new(&c);
        c.ftl.max_lsb_region_bytes = region_superblocks * g.superblock_units() as u64 * 4096;
        Ftl::new(&c, g, false)
    }

    fn row(first: u32) -> Vec<(u32, u32)> {
        (first..first + 4).map(|l| (l, 0)).collect()
    }

    /// Foreground rows spread over the LUNs in turn each take an LSB page: a region block per
    /// LUN, whose pointer skips its CSB/MSB pages, so the second round takes page 3 of the same
    /// blocks, which then close (6 pages) and leave the region.
    #[test]
    fn lsb_only_allocation_fills_lsb_pages_across_dies_in_turn_and_skips_the_slow_ones() {
        let mut f = ftl(Alloc::LatencyAware, 4);
        let mut seen = Vec::new();
        for k in 0..8u32 {
            let lun = f.next_host_lun().unwrap();
            let p = f.write_host_row(lun, &row(k * 4), Urgency::Foreground);
            f.host_row_programmed(lun);
            seen.push((lun, p.page, f.geo.page_type(p.page)));
        }
        let luns: Vec<u32> = seen.iter().map(|s| s.0).collect();
        assert_eq!(luns, [0, 1, 2, 3, 0, 1, 2, 3], "the LUNs in turn");
        let pages: Vec<u32> = seen.iter().map(|s| s.1).collect();
        assert_eq!(pages, [0, 0, 0, 0, 3, 3, 3, 3], "LSB pages only");
        assert!(seen.iter().all(|s| s.2 == PageType::Lsb), "{seen:?}");
        let s = f.stats.alloc.clone().unwrap();
        assert_eq!(
            (s.host_rows_lsb, s.host_rows_csb, s.host_rows_msb),
            (8, 0, 0)
        );
        assert_eq!(s.pages_skipped, 16, "pages 1, 2, 4 and 5 of four blocks");
        assert_eq!(f.stats.units_wasted, 16 * 4);
        assert_eq!(
            (s.foreground_fallbacks, s.lsb_region_superblocks_max),
            (0, 4)
        );
        assert_eq!(f.alloc.region_superblocks, 0, "full blocks left the region");
        f.check_consistency().unwrap();
    }

    /// At the region's cap a foreground row falls back: to a fresh block outside the region
    /// (page 0 is LSB), then to that block's CSB page.
    #[test]
    fn at_the_region_cap_foreground_rows_fall_back_to_the_fastest_other_page() {
        let mut f = ftl(Alloc::LatencyAware, 1);
        let p = f.write_host_row(0, &row(0), Urgency::Foreground);
        assert_eq!((p.page, f.alloc.region_superblocks), (0, 1));
        let p = f.write_host_row(1, &row(4), Urgency::Foreground);
        assert_eq!(
            f.geo.page_type(p.page),
            PageType::Lsb,
            "a fresh block outside"
        );
        let p = f.write_host_row(1, &row(8), Urgency::Foreground);
        assert_eq!(f.geo.page_type(p.page), PageType::Csb);
        let s = f.stats.alloc.clone().unwrap();
        assert_eq!(
            (s.foreground_fallbacks, s.lsb_region_superblocks_max),
            (2, 1)
        );
        f.check_consistency().unwrap();
    }

    /// Background rows fill slow pages in order outside the region and skip nothing; `lsb-skip`
    /// wastes the two pages after every LSB page it programs.
    #[test]
    fn lsb_skip_wastes_what_it_skips_and_latency_aware_wastes_nothing_in_the_background() {
        let mut la = ftl(Alloc::LatencyAware, 8);
        la.write_host_row(0, &row(0), Urgency::Foreground);
        let mut types = Vec::new();
        for k in 1..6u32 {
            let p = la.write_host_row(0, &row(k * 4), Urgency::Background);
            types.push(la.geo.page_type(p.page));
        }
        assert_eq!(
            types,
            [
                PageType::Lsb,
                PageType::Csb,
                PageType::Msb,
                PageType::Lsb,
                PageType::Csb
            ],
            "background opens a block of its own and fills it in order"
        );
        assert_eq!(
            la.stats.alloc.as_ref().unwrap().pages_skipped,
            2,
            "only the region block's skip after its one LSB row"
        );
        assert_eq!(la.stats.units_wasted, 2 * 4);
        assert_eq!(
            la.alloc.region_superblocks, 1,
            "the region block is still open"
        );
        la.check_consistency().unwrap();

        let mut skip = ftl(Alloc::LsbSkip, 0);
        for k in 0..3u32 {
            let p = skip.write_host_row(0, &row(k * 4), Urgency::Background);
            assert_eq!(skip.geo.page_type(p.page), PageType::Lsb);
        }
        let s = skip.stats.alloc.clone().unwrap();
        // Rows at pages 0, 3 (skipping 1, 2), then a new block's page 0 (skipping 4, 5).
        assert_eq!((s.host_rows_lsb, s.pages_skipped), (3, 4));
        assert_eq!(skip.stats.units_wasted, 4 * 4);
        skip.check_consistency().unwrap();

        let mut seq = ftl(Alloc::Sequential, 0);
        for k in 0..3u32 {
            seq.write_host_row(0, &row(k * 4), Urgency::Foreground);
        }
        assert_eq!(seq.stats.units_wasted, 0);
        assert!(
            seq.stats.alloc.is_none(),
            "sequential keeps the summary's shape"
        );
    }
}
