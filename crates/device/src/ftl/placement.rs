//! Where rows go: each LUN's write point, and the LUNs and rows of a host write-back round.
//!
//! ## Allocation
//! Each LUN has one write point: an open superblock and the next free row; each
//! [`Ftl::write_row`] programs one row. A row that is not full when programmed wastes its empty
//! slots (counted as `units_wasted`). Free superblocks are taken lowest erase count first (dynamic
//! wear levelling); host writes may not take the last `gc_reserve_blocks` of a LUN.
//!
//! ## Host write-back placement: where evicted data goes
//! The write buffer hands over an eviction round (`cache.rs` decides what and when); the FTL
//! decides where each unit goes, in two steps.
//!
//! *Rows* ([`stripe_rows`]): the round is cut into stripes of whole rows, at most one row per
//! LUN, and unit `k` of a stripe of `r` rows goes to the stripe's row `k mod r`, so units that
//! were dirtied one after the other — often neighbouring LPNs — land on different LUNs and
//! channels, and a later sequential read of them runs in parallel. Only the last row of a round
//! can be partial, and only when the round holds less than a row (the write buffer's rule).
//! Worked example: 10 units, 4 LUNs, 2-unit rows → a stripe of units 0–7 in 4 rows {0,4}
//! {1,5} {2,6} {3,7}, then a stripe of 1 row {8,9}.
//!
//! *LUNs* ([`Ftl::next_host_lun`]): rows go round robin over the LUNs in channel-first order
//! (LUN numbers alternate channels), preferring LUNs with no host row queued or programming.
//! TLC programs take 0.5–5 ms by page type, so rows finish out of order, and plain round robin
//! queued rows behind busy LUNs while others sat idle. A LUN takes host rows only while it has
//! more free superblocks than `gc_reserve_blocks` (or an open one); when no LUN does, the round's
//! remaining units go back to the buffer until GC erases a superblock.

use super::{Ftl, ReverseMap, RowPlacement, SbState, Writer, UNMAPPED};

/// Units of a row whose forward-map updates run ahead of their valid counts' (`place_row`):
/// a row's units, up to this many (a `zssd` row is 4), so that their count misses overlap.
pub(super) const UNITS_AHEAD: usize = 8;

impl Ftl {
    /// Free superblocks of a LUN.
    pub fn free_superblocks(&self, lun: u32) -> u32 {
        self.luns[lun as usize].free.len() as u32
    }

    /// Whether `writer` may place a row on `lun` now.
    pub fn has_room(&self, lun: u32, writer: Writer) -> bool {
        let l = &self.luns[lun as usize];
        let reserve = match writer {
            Writer::Host => self.gc_reserve as usize,
            Writer::Gc => 0,
        };
        l.open.is_some() || l.free.len() > reserve || self.alloc.has_open(lun)
    }

    /// Host rows placed on `lun` whose program has not finished.
    pub fn host_rows_queued(&self, lun: u32) -> u32 {
        self.luns[lun as usize].host_rows_queued
    }

    /// The LUN the next host row goes to (channel-first round robin over the LUNs with room,
    /// preferring those with no host row queued; see the module essay), or `None` when no LUN
    /// has room until GC erases a superblock.
    pub fn next_host_lun(&mut self) -> Option<u32> {
        let luns = self.geo.luns;
        let mut fallback = None;
        for k in 0..luns {
            let lun = (self.host_lun_cursor + k) % luns;
            if !self.has_room(lun, Writer::Host) {
                continue;
            }
            if self.luns[lun as usize].host_rows_queued == 0 {
                self.host_lun_cursor = (lun + 1) % luns;
                return Some(lun);
            }
            fallback.get_or_insert(lun);
        }
        let lun = fallback?;
        self.host_lun_cursor = (lun + 1) % luns;
        Some(lun)
    }

    /// The program of a host row on `lun` (placed by [`write_row`](Self::write_row)) finished.
    pub fn host_row_programmed(&mut self, lun: u32) {
        let queued = &mut self.luns[lun as usize].host_rows_queued;
        assert!(
            *queued > 0,
            "LUN {lun}: a host row finished but none was queued"
        );
        *queued -= 1;
    }

    fn open_superblock(&mut self, lun: u32) {
        let sb = self.take_free_superblock(lun);
        let l = &mut self.luns[lun as usize];
        l.open = Some(sb);
        l.next_row = 0;
    }

    /// Takes a free superblock of `lun` for writing: it becomes open, with fresh reverse maps.
    pub(super) fn take_free_superblock(&mut self, lun: u32) -> u32 {
        // Lowest erase count first (dynamic wear levelling); ties by position in the list.
        let l = &self.luns[lun as usize];
        let (pos, _) = l
            .free
            .iter()
            .enumerate()
            .min_by_key(|(pos, &sb)| {
                (
                    self.sbs[self.sb_index(lun, sb)].erase_count,
                    usize::MAX - pos,
                )
            })
            .expect("caller checked there is a free superblock");
        let sb = self.luns[lun as usize].free.remove(pos);
        let i = self.sb_index(lun, sb);
        assert_eq!(
            self.sbs[i].state,
            SbState::Free,
            "opening LUN {lun} superblock {sb} that is not free"
        );
        self.sbs[i].state = SbState::Open;
        self.sbs[i].implicit = false;
        let units = self.geo.superblock_units() as usize;
        self.reverse[i] = Some(ReverseMap::default());
        if let Some(versions) = &mut self.versions {
            versions[i] = Some(vec![0; units].into_boxed_slice());
        }
        sb
    }

    /// Programs one row on `lun` holding `units` (`(lpn, version)`, at most a row's worth):
    /// moves their mappings to the new slots. The caller must have checked [`has_room`](Self::has_room).
    pub fn write_row(&mut self, lun: u32, units: &[(u32, u32)], writer: Writer) -> RowPlacement {
        let row_units = self.geo.row_units();
        assert!(
            !units.is_empty() && units.len() as u32 <= row_units,
            "a row holds 1..={row_units} units, got {}",
            units.len()
        );
        let placed = self.write_point(lun);
        self.place_row(lun, placed.superblock, placed.page, units, writer);
        self.advance_write_point(lun);
        placed
    }

    /// Where `lun`'s write point programs its next row (opening a superblock if none is open).
    pub(super) fn write_point(&mut self, lun: u32) -> RowPlacement {
        if self.luns[lun as usize].open.is_none() {
            self.open_superblock(lun);
        }
        let l = &self.luns[lun as usize];
        RowPlacement {
            superblock: l.open.expect("opened above"),
            page: l.next_row,
        }
    }

    /// `lun`'s write point programmed its row: on to the next (closing a full superblock).
    pub(super) fn advance_write_point(&mut self, lun: u32) {
        let l = &mut self.luns[lun as usize];
        let sb = l.open.expect("a row was placed at the write point");
        l.next_row += 1;
        if l.next_row == self.geo.pages_per_block {
            l.open = None;
            self.close_superblock(lun, sb);
        }
    }

    /// Superblock `sb` of `lun` is full: closed, its reverse map trimmed to what it holds.
    pub(super) fn close_superblock(&mut self, lun: u32, sb: u32) {
        let i = self.sb_index(lun, sb);
        self.sbs[i].state = SbState::Closed;
        if let Some(rev) = &mut self.reverse[i] {
            rev.shrink();
        }
    }

    /// Maps `units` into row `page` of open superblock `sb` of `lun` and counts the row
    /// (every allocation policy's rows end here; where the row goes is theirs).
    pub(super) fn place_row(
        &mut self,
        lun: u32,
        sb: u32,
        page: u32,
        units: &[(u32, u32)],
        writer: Writer,
    ) {
        let row_units = self.geo.row_units();
        assert!(
            !units.is_empty() && units.len() as u32 <= row_units,
            "a row holds 1..={row_units} units, got {}",
            units.len()
        );
        assert_eq!(
            self.sbs[self.sb_index(lun, sb)].state,
            SbState::Open,
            "LUN {lun}: a row placed in superblock {sb}, which is not open"
        );
        let i = self.sb_index(lun, sb);
        // A few units at a time, the forward map first for each, then the superblocks' valid
        // counts in unit order: the count of each unit's old place is a memory miss on a large
        // drive, and the loads started as the old places come out of the map overlap, where
        // unit by unit each waited in turn. The map's updates read no count, so every value,
        // and the order of every count's changes, is what unit by unit gives.
        let mut olds = [UNMAPPED; UNITS_AHEAD];
        for (c, chunk) in units.chunks(UNITS_AHEAD).enumerate() {
            let first = (c * UNITS_AHEAD) as u32;
            // The map's own misses overlap the same way: the chunk's index slots, then (read
            // once loaded) the table slots the updates start at.
            for &(lpn, _) in chunk {
                self.prefetch_lookup(lpn);
            }
            for &(lpn, _) in chunk {
                self.prefetch_lookup_rest(lpn);
            }
            for (k, &(lpn, _)) in chunk.iter().enumerate() {
                let slot = page * row_units + first + k as u32;
                olds[k] = self.set_forward(lpn as u64, self.ppn(lun, sb, slot));
                if olds[k] != UNMAPPED {
                    self.prefetch_meta_of(olds[k]);
                }
            }
            for (k, &(_, version)) in chunk.iter().enumerate() {
                let slot = page * row_units + first + k as u32;
                if olds[k] != UNMAPPED {
                    self.invalidate(olds[k]);
                }
                self.sbs[i].valid_units += 1;
                if let Some(Some(v)) = self.versions.as_mut().map(|v| &mut v[i]) {
                    v[slot as usize] = version;
                }
            }
        }
        self.reverse[i]
            .as_mut()
            .expect("an open superblock has a reverse map")
            .push_written(page * row_units, units.iter().map(|&(lpn, _)| lpn));
        self.count_row(lun, units.len() as u32, writer);
    }

    /// Counts a row of `units` units programmed on `lun` by `writer`.
    pub(super) fn count_row(&mut self, lun: u32, units: u32, writer: Writer) {
        self.stats.units_wasted += (self.geo.row_units() - units) as u64;
        let l = &mut self.luns[lun as usize];
        match writer {
            Writer::Host => {
                self.stats.host_units_programmed += units as u64;
                l.host_rows_queued += 1;
            }
            Writer::Gc => self.stats.gc_units_programmed += units as u64,
        }
    }
}

/// Lays out a write-back round of `round_units` units as rows (see the module essay): yields
/// one [`StripeRow`] per row to program, in order.
pub fn stripe_rows(round_units: usize, luns: u32, row_units: u32) -> StripeRows {
    assert!(
        luns > 0 && row_units > 0,
        "striping needs at least one LUN and one unit per row, got {luns} LUNs and {row_units} units"
    );
    StripeRows {
        round_units,
        luns: luns as usize,
        row_units: row_units as usize,
        stripe_start: 0,
        stripe_end: 0,
        rows: 0,
        next_row: 0,
    }
}

/// The rows of a write-back round, from [`stripe_rows`].
#[derive(Clone, Debug)]
pub struct StripeRows {
    round_units: usize,
    luns: usize,
    row_units: usize,
    stripe_start: usize,
    stripe_end: usize,
    /// Rows of the current stripe.
    rows: usize,
    /// Next row of the current stripe to yield.
    next_row: usize,
}

impl Iterator for StripeRows {
    type Item = StripeRow;

    fn next(&mut self) -> Option<StripeRow> {
        if self.next_row == self.rows {
            if self.stripe_end >= self.round_units {
                return None;
            }
            self.stripe_start = self.stripe_end;
            let left = self.round_units - self.stripe_start;
            self.rows = (left / self.row_units).clamp(1, self.luns);
            self.stripe_end = self.stripe_start + (self.rows * self.row_units).min(left);
            self.next_row = 0;
        }
        let row = StripeRow {
            stripe_start: self.stripe_start,
            stripe_end: self.stripe_end,
            rows: self.rows,
            row: self.next_row,
        };
        self.next_row += 1;
        Some(row)
    }
}

/// One row of a write-back round: the round's units `stripe_start + row`,
/// `stripe_start + row + rows`, … below `stripe_end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StripeRow {
    stripe_start: usize,
    stripe_end: usize,
    rows: usize,
    row: usize,
}

impl StripeRow {
    /// This row's units of `round`.
    pub fn members<T>(self, round: &[T]) -> impl Iterator<Item = &T> {
        round[self.stripe_start..self.stripe_end]
            .iter()
            .skip(self.row)
            .step_by(self.rows)
    }

    /// What is left to place if this row finds no LUN: this row, the stripe's later rows and
    /// the later stripes, in that order.
    pub fn unplaced<T>(self, round: &[T]) -> impl Iterator<Item = &T> {
        let stripe = &round[self.stripe_start..self.stripe_end];
        let rows = self.rows;
        (self.row..rows)
            .flat_map(move |r| stripe.iter().skip(r).step_by(rows))
            .chain(&round[self.stripe_end..])
    }
}
