//! The flash translation layer: page-level mapping, allocation, garbage collection, wear.
//!
//! ## Mapping
//! The host's logical space is cut into 4 KiB logical pages (LPNs); each maps to one physical
//! unit (PPN). A PPN names `(LUN, superblock, slot)`, where a superblock is the same block index
//! across the planes of a LUN and a slot is `page × row_units + plane × page_units + unit`:
//! consecutive slots fill a row (one multi-plane program) before the next page.
//!
//! The forward map stores only what the run wrote: an LPN's PPN sits in its region's small hash
//! table (6-byte slots) while its region of [`REGION_LPNS`] LPNs holds few writes, in leaves of
//! 64 LPNs (a bitmap and the PPNs packed) once it holds more, and in a table of the region once
//! it holds most (`ftl/map.rs`), so memory follows the distinct LPNs written (4 to ~8 bytes
//! each, plus 32 bytes of index a region), not the drive's size.
//! Preconditioning (`ftl.precondition = "sequential"`) is *implicit*: LPN `i` sits at the
//! position a sequential fill would have put it, computed, not stored — LUN `i mod L`,
//! position `i div L` in that LUN — until the LPN is rewritten or trimmed. Reverse maps
//! (slot → LPN) exist only for superblocks written during the run (`ftl/reverse.rs`: 4 bytes a
//! slot written with arbitrary LPNs); implicit superblocks invert the same formula. Worked
//! example (`nvme-tlc`, 128 LUNs, 1536-unit superblocks): LPN 1000 → LUN 1000 mod 128 = 104,
//! position 7 → superblock 0, slot 7 (page 1, plane 1, unit 1).
//!
//! When GC collects an implicit superblock, its live units move in slot order into consecutive
//! slots, so where each went is one record for the superblock — a bitmap of the slots moved and
//! the runs of PPNs they went to (`ftl/relocation.rs`, about 1.2 bits a unit) — not an entry
//! per unit: a lookup of an LPN with no entry computes its layout place and, if GC has
//! collected that superblock since, ranks the slot in the record. The destination's reverse
//! map names the record for those slots. Units moved a second time (GC collecting the
//! destination) get forward entries like any other.
//!
//! ## The files
//! This file holds the map's side: the superblock and LUN state, the forward lookup, trims, and
//! the consistency check. `ftl/map.rs` stores the overrides the run wrote; `ftl/reverse.rs`
//! the written superblocks' reverse maps; `ftl/relocation.rs` GC's records of moved
//! preconditioned superblocks;
//! `ftl/precondition.rs` builds the drive a run starts from (bad blocks, the `sequential` and
//! `random` layouts) and computes the layout's PPNs; `ftl/placement.rs` is the write points
//! and where a write-back round's rows go; `ftl/gc.rs` collects garbage; `ftl/alloc.rs` places
//! host rows within a LUN when page types differ in speed, keeping its state (held here) in
//! `ftl/alloc/state.rs`.
//!
//! ## What it leaves out
//! Cost-benefit victim selection, static wear levelling, mapping-table caching (the whole map
//! is assumed to sit in DRAM). Where host rows go *within* a LUN when page types differ in
//! speed (`ftl.alloc`: `sequential`, `lsb-skip`, `latency-aware`) is `ftl/alloc.rs`'s.

use crate::config::DeviceConfig;
use crate::flash::Geometry;
use crate::sys::prefetch;

mod alloc;
mod gc;
mod map;
mod placement;
mod precondition;
mod relocation;
mod reverse;
pub use alloc::state::AllocStats;
pub use alloc::Urgency;
pub use map::REGION_LPNS;
pub use placement::{stripe_rows, StripeRow, StripeRows};
use relocation::Relocation;
use reverse::{Owner, ReverseMap, NO_LPN};

/// Forward-map value of an LPN that holds no data.
const UNMAPPED: u32 = u32::MAX;

/// State of a superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SbState {
    Free,
    Open,
    Closed,
    /// Chosen by GC; erased when its relocations finish.
    Victim,
    /// Holds a factory bad block that could not be remapped: never used.
    Retired,
}

#[derive(Clone, Copy, Debug)]
struct SbMeta {
    state: SbState,
    valid_units: u32,
    erase_count: u32,
    /// Holds preconditioned data described by the implicit layout (no reverse map).
    implicit: bool,
}

struct LunAlloc {
    /// Usable superblocks in order (the implicit precondition fills them in this order) and
    /// each superblock's rank in that list (`u32::MAX` if retired).
    usable: Vec<u32>,
    rank: Vec<u32>,
    /// Ranks below this are their superblock's number (`usable[r] == r`: no superblock before
    /// them is retired), so that the layout need not read `usable` for them: on a large drive
    /// a memory miss on nearly every read.
    in_order_ranks: u32,
    /// Random precondition: positions (this LUN's share of the LPNs, in order) held by the
    /// implicit superblocks of rank below `r` are `implicit_start[r]..` — rank `r` holds
    /// `implicit_start[r + 1] - implicit_start[r]` of them at its first slots. Empty for the
    /// sequential precondition, whose superblocks are full (`rank × superblock units`).
    implicit_start: Vec<u64>,
    free: Vec<u32>,
    open: Option<u32>,
    next_row: u32,
    gc_running: bool,
    /// Host rows placed here whose program has not finished ([`Ftl::host_row_programmed`]).
    host_rows_queued: u32,
}

/// A physical location decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub lun: u32,
    pub superblock: u32,
    pub page: u32,
}

/// Where a row was placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowPlacement {
    pub superblock: u32,
    pub page: u32,
}

/// Whose data a row holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    Host,
    Gc,
}

/// A GC job: what to read, where it went, what to erase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcPlan {
    pub lun: u32,
    pub victim: u32,
    /// `(page, units)` reads of the victim's valid data, one per page holding any.
    pub reads: Vec<(u32, u32)>,
    /// Rows programmed with the relocated units: `(page, units)`.
    pub programs: Vec<(u32, u32)>,
}

/// FTL counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FtlStats {
    pub host_units_programmed: u64,
    pub gc_units_programmed: u64,
    pub units_wasted: u64,
    pub gc_runs: u64,
    pub erases: u64,
    pub trims: u64,
    /// Factory bad physical blocks, blocks the remap checker replaced with spares, and
    /// superblocks retired because a bad block could not be replaced.
    pub bad_blocks: u64,
    pub blocks_remapped: u64,
    pub superblocks_retired: u64,
    /// Host rows by page type and pages skipped, per `ftl.alloc` (absent for `sequential`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc: Option<AllocStats>,
}

pub struct Ftl {
    geo: Geometry,
    user_lpns: u64,
    /// LPNs below this are implicitly mapped by the sequential precondition.
    implicit_lpns: u64,
    /// The LPNs the run wrote (moved, trimmed): the others follow the layout (`ftl/map.rs`).
    map: map::ForwardMap,
    sbs: Vec<SbMeta>,
    /// Each written superblock's slot → LPN map (`ftl/reverse.rs`); `None` for implicit and
    /// free superblocks.
    reverse: Vec<Option<ReverseMap>>,
    /// Where GC moved each implicit superblock's live data (`ftl/relocation.rs`), by the
    /// superblock's global index; kept for good, since the layout still names the superblock.
    moved: Vec<Option<Box<Relocation>>>,
    /// Relocation records held, and their bytes.
    moved_records: u64,
    moved_bytes: u64,
    /// How GC records the moves of implicit superblocks' units: one record each (`true`, the
    /// FTL's way), or a forward entry per unit (`false`, the tests' reference).
    relocate_by_record: bool,
    /// Data-integrity mode: the version of the data in each slot (per written superblock).
    versions: Option<Vec<Option<Box<[u32]>>>>,
    luns: Vec<LunAlloc>,
    gc_threshold_free: u32,
    gc_reserve: u32,
    /// Where [`next_host_lun`](Self::next_host_lun) starts looking.
    host_lun_cursor: u32,
    /// Where host write-back rows go within a LUN (`ftl.alloc`; `ftl/alloc.rs`).
    alloc: alloc::state::Allocator,
    pub stats: FtlStats,
    /// LUNs that `precondition = "random"` had to lay out sequentially: no invalid space fits
    /// above the GC threshold (see "Preconditioning" in the essay). The device warns about it.
    random_fallback_luns: u32,
}

impl Ftl {
    pub fn new(config: &DeviceConfig, geo: Geometry, integrity: bool) -> Ftl {
        Self::with_seed(config, geo, integrity, 0)
    }

    /// random layout applied everywhere, or another precondition was asked for).
    pub fn random_fallback_luns(&self) -> u32 {
        self.random_fallback_luns
    }

    /// Logical capacity in 4 KiB units.
    pub fn user_lpns(&self) -> u64 {
        self.user_lpns
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn sb_index(&self, lun: u32, sb: u32) -> usize {
        (lun * self.geo.superblocks_per_lun + sb) as usize
    }

    fn ppn(&self, lun: u32, sb: u32, slot: u32) -> u32 {
        self.sb_index(lun, sb) as u32 * self.geo.superblock_units() + slot
    }

    fn split_ppn(&self, ppn: u32) -> (u32, u32, u32) {
        let sb_units = self.geo.superblock_units();
        let sb_global = ppn / sb_units;
        (
            sb_global / self.geo.superblocks_per_lun,
            sb_global % self.geo.superblocks_per_lun,
            ppn % sb_units,
        )
    }

    fn forward(&self, lpn: u64) -> u32 {
        match self.map.get(lpn as u32) {
            Some(ppn) => ppn,
            None => self.layout_ppn(lpn),
        }
    }

    /// `lpn`'s PPN when it has no forward entry: where the precondition's layout put it (or
    /// where GC moved it from there), or unmapped.
    fn layout_ppn(&self, lpn: u64) -> u32 {
        layout_ppn_of(
            &self.geo,
            &self.luns,
            self.implicit_lpns,
            self.moved_records(),
            lpn,
        )
    }

    /// Maps `lpn` to `ppn`; returns the PPN it had (written or the layout's, or unmapped).
    fn set_forward(&mut self, lpn: u64, ppn: u32) -> u32 {
        // The map asks for the layout only when a region turns dense.
        let moved: &[_] = if self.moved_records == 0 {
            &[]
        } else {
            &self.moved
        };
        let (geo, luns, implicit) = (&self.geo, &self.luns, self.implicit_lpns);
        let layout = |l| layout_ppn_of(geo, luns, implicit, moved, l);
        let old = self.map.set(lpn as u32, ppn, layout);
        old.unwrap_or_else(|| layout(lpn))
    }

    /// The LPN whose data `slot` of superblock `#i` (global index) was written with, or
    /// [`NO_LPN`].
    fn reverse_lpn(&self, i: usize, slot: u32) -> u64 {
        let (lun, sb) = (
            i as u32 / self.geo.superblocks_per_lun,
            i as u32 % self.geo.superblocks_per_lun,
        );
        match &self.reverse[i] {
            Some(rev) => match rev.owner(slot) {
                Owner::Lpn(lpn) => lpn as u64,
                Owner::Moved { from, k } => self.moved_lpn(from, k),
            },
            None => self.implicit_lpn(lun, sb, slot).unwrap_or(NO_LPN as u64),
        }
    }

    /// The LPN of unit `k` of implicit superblock `#from`'s relocation record.
    fn moved_lpn(&self, from: u32, k: u32) -> u64 {
        let rec = self.moved[from as usize]
            .as_ref()
            .expect("a reverse map names a relocation record that exists");
        let slot = rec.slots_from(k).next().expect("the record holds unit k");
        let spl = self.geo.superblocks_per_lun;
        self.implicit_lpn(from / spl, from % spl, slot)
            .expect("a relocated slot held a preconditioned LPN")
    }

    /// Where `lpn`'s data lives, if it has any. An LPN with no override is placed by the
    /// layout's own numbers (its LUN, superblock and slot), not by splitting the PPN they make
    /// (two divisions fewer on a read of an LPN the run has not written).
    #[inline]
    pub fn lookup(&self, lpn: u32) -> Option<Location> {
        assert!(
            (lpn as u64) < self.user_lpns,
            "LPN {lpn} beyond the {} user LPNs",
            self.user_lpns
        );
        let ppn = match self.map.get(lpn) {
            Some(ppn) => ppn,
            None => match layout_place_of(
                &self.geo,
                &self.luns,
                self.implicit_lpns,
                self.moved_records(),
                lpn as u64,
            ) {
                LayoutPlace::Unmapped => UNMAPPED,
                LayoutPlace::Moved(ppn) => ppn,
                LayoutPlace::Implicit { lun, sb, slot } => {
                    return Some(Location {
                        lun,
                        superblock: sb,
                        page: slot / self.geo.row_units(),
                    });
                }
            },
        };
        match ppn {
            UNMAPPED => None,
            ppn => {
                let (lun, superblock, slot) = self.split_ppn(ppn);
                Some(Location {
                    lun,
                    superblock,
                    page: slot / self.geo.row_units(),
                })
            }
        }
    }

    /// Starts loading the CPU cache line of the forward map's index that a
    /// [`lookup`](Self::lookup) of `lpn` reads, if the run has written in `lpn`'s region (the
    /// index of an untouched one is not read: `ForwardMap::get`); [`prefetch_lookup_rest`]
    /// then loads the line of the region's table the lookup starts at. Speed hints with no
    /// effect on results, for a lookup a few events from now: on a large drive each is a
    /// memory miss the lookup would otherwise wait for. In two steps because the second reads
    /// the line the first loads: read at once, the wait would only move to the caller.
    ///
    /// [`prefetch_lookup_rest`]: Self::prefetch_lookup_rest
    #[inline]
    pub fn prefetch_lookup(&self, lpn: u32) {
        if u64::from(lpn) < self.user_lpns {
            self.map.prefetch_index(lpn);
        }
    }

    /// The second step of [`prefetch_lookup`](Self::prefetch_lookup), an event or more after
    /// it.
    #[inline]
    pub fn prefetch_lookup_rest(&self, lpn: u32) {
        if u64::from(lpn) < self.user_lpns {
            self.map.prefetch_table(lpn);
        }
    }

    /// `moved`, or nothing while GC has moved no implicit superblock's data: then the layout
    /// needs no look at the records (`layout_place_of`), one memory miss fewer per read of a
    /// large drive.
    #[inline(always)]
    fn moved_records(&self) -> &[Option<Box<Relocation>>] {
        if self.moved_records == 0 {
            &[]
        } else {
            &self.moved
        }
    }

    /// Version of the data `lpn` maps to (data-integrity mode; 0 for preconditioned data).
    #[inline]
    pub fn version_of(&self, lpn: u32) -> u32 {
        let Some(versions) = &self.versions else {
            return 0;
        };
        match self.forward(lpn as u64) {
            UNMAPPED => 0,
            ppn => {
                let (lun, sb, slot) = self.split_ppn(ppn);
                versions[self.sb_index(lun, sb)]
                    .as_ref()
                    .map_or(0, |v| v[slot as usize])
            }
        }
    }

    /// Starts loading the CPU cache line of the superblock metadata [`invalidate`] of `ppn`
    /// changes (a speed hint with no effect on results).
    ///
    /// [`invalidate`]: Self::invalidate
    #[inline]
    fn prefetch_meta_of(&self, ppn: u32) {
        let (lun, sb, _) = self.split_ppn(ppn);
        prefetch(&self.sbs[self.sb_index(lun, sb)]);
    }

    /// The unit at `ppn` is no longer its LPN's data. (The reverse map keeps the LPN: GC
    /// checks each unit it finds against the forward map.)
    fn invalidate(&mut self, ppn: u32) {
        let (lun, sb, _) = self.split_ppn(ppn);
        let i = self.sb_index(lun, sb);
        let meta = &mut self.sbs[i];
        assert!(
            meta.valid_units > 0,
            "invalidating a unit of LUN {lun} superblock {sb} that has no valid units"
        );
        meta.valid_units -= 1;
    }

    /// Drops the mapping of `lpn` (TRIM / deallocate).
    pub fn trim(&mut self, lpn: u32) {
        if self.forward(lpn as u64) != UNMAPPED {
            let old = self.set_forward(lpn as u64, UNMAPPED);
            self.invalidate(old);
            self.stats.trims += 1;
        }
    }

    /// Bytes held by the mapping tables: the forward map's overrides and index (`ftl/map.rs`),
    /// the reverse maps of superblocks written during the run (`ftl/reverse.rs`) and GC's
    /// relocation records (`ftl/relocation.rs`). Not counted: each superblock's fixed slot
    /// for its reverse map and record (32 bytes, beside its other metadata).
    pub fn table_bytes(&self) -> u64 {
        let reverse: u64 = self.reverse.iter().flatten().map(ReverseMap::bytes).sum();
        self.map.bytes() + reverse + self.moved_bytes
    }

    /// Implicit superblocks whose live data GC moved (one record each).
    pub fn relocation_records(&self) -> u64 {
        self.moved_records
    }

    /// LPNs whose PPN the forward map stores (written, moved or trimmed during the run).
    pub fn overridden_lpns(&self) -> u64 {
        self.map.overrides()
    }

    /// Checks the whole mapping (tests and debug runs; O(capacity)): every mapped LPN points at
    /// a slot whose reverse entry names it, no slot is claimed twice, and each superblock's
    /// valid count equals the number of LPNs mapped into it.
    pub fn check_consistency(&self) -> Result<(), String> {
        let mut counted = vec![0u32; self.sbs.len()];
        let mut owner = std::collections::HashMap::new();
        for lpn in 0..self.user_lpns {
            let ppn = self.forward(lpn);
            if ppn == UNMAPPED {
                continue;
            }
            if let Some(other) = owner.insert(ppn, lpn) {
                return Err(format!("PPN {ppn} mapped by LPNs {other} and {lpn}"));
            }
            let (lun, sb, slot) = self.split_ppn(ppn);
            let i = self.sb_index(lun, sb);
            let back = self.reverse_lpn(i, slot);
            if back != lpn {
                return Err(format!(
                    "LPN {lpn} → LUN {lun} sb {sb} slot {slot}, whose reverse entry is {back}"
                ));
            }
            if matches!(self.sbs[i].state, SbState::Free | SbState::Retired) {
                return Err(format!(
                    "LPN {lpn} maps into free superblock {sb} of LUN {lun}"
                ));
            }
            counted[i] += 1;
        }
        for (i, (meta, n)) in self.sbs.iter().zip(&counted).enumerate() {
            if meta.valid_units != *n {
                return Err(format!(
                    "superblock #{i}: valid count {} but {} LPNs map into it",
                    meta.valid_units, n
                ));
            }
        }
        Ok(())
    }
}

/// `lpn`'s PPN when the run has not written it: where the precondition's layout put it (LUN
/// `lpn mod L`, position `lpn div L` of that LUN's share; `ftl/precondition.rs`) or, if GC has
/// collected that superblock since, where its record says the unit went; unmapped beyond the
/// preconditioned LPNs. A function of the fields it reads, so that the forward map can call it
/// while the FTL lends the map out.
#[inline]
fn layout_ppn_of(
    geo: &Geometry,
    luns: &[LunAlloc],
    implicit_lpns: u64,
    moved: &[Option<Box<Relocation>>],
    lpn: u64,
) -> u32 {
    match layout_place_of(geo, luns, implicit_lpns, moved, lpn) {
        LayoutPlace::Unmapped => UNMAPPED,
        LayoutPlace::Implicit { lun, sb, slot } => {
            (lun * geo.superblocks_per_lun + sb) * geo.superblock_units() + slot
        }
        LayoutPlace::Moved(ppn) => ppn,
    }
}

/// Where the layout puts an LPN with no override (see [`layout_ppn_of`]).
enum LayoutPlace {
    /// Beyond the preconditioned LPNs.
    Unmapped,
    /// Where the precondition wrote it: LUN, superblock within the LUN, slot.
    Implicit { lun: u32, sb: u32, slot: u32 },
    /// GC collected that superblock: the PPN its record says the unit went to.
    Moved(u32),
}

/// [`layout_ppn_of`]'s answer before it is a PPN.
#[inline(always)]
fn layout_place_of(
    geo: &Geometry,
    luns: &[LunAlloc],
    implicit_lpns: u64,
    moved: &[Option<Box<Relocation>>],
    lpn: u64,
) -> LayoutPlace {
    let Some((lun, sb, slot)) = layout_slot_of(geo, luns, implicit_lpns, lpn) else {
        return LayoutPlace::Unmapped;
    };
    // `moved` is empty while there are no records (`Ftl::moved_records`).
    let i = (lun * geo.superblocks_per_lun + sb) as usize;
    debug_assert!(
        moved.is_empty() || i < moved.len(),
        "superblock #{i} has no record slot"
    );
    match moved.get(i) {
        Some(Some(rec)) => LayoutPlace::Moved(rec.ppn_of_slot(slot)),
        _ => LayoutPlace::Implicit { lun, sb, slot },
    }
}

/// Where the precondition's layout wrote `lpn` (LUN, superblock within the LUN, slot), whether
/// or not GC has moved it since; `None` beyond the preconditioned LPNs.
#[inline(always)]
fn layout_slot_of(
    geo: &Geometry,
    luns: &[LunAlloc],
    implicit_lpns: u64,
    lpn: u64,
) -> Option<(u32, u32, u32)> {
    if lpn >= implicit_lpns {
        return None;
    }
    // LPNs fit in 32 bits (the config keeps physical units below 2^32), and 32-bit divisions
    // give the same quotients for a fraction of a 64-bit one's time (this is on every read).
    debug_assert!(lpn <= u32::MAX as u64, "LPN {lpn} beyond 32 bits");
    let (lun, pos) = (lpn as u32 % geo.luns, lpn as u32 / geo.luns);
    let l = &luns[lun as usize];
    let sb_units = geo.superblock_units();
    let (rank, slot) = if l.implicit_start.is_empty() {
        (pos / sb_units, pos % sb_units)
    } else {
        let pos = u64::from(pos);
        let r = l.implicit_start.partition_point(|&p| p <= pos) - 1;
        (r as u32, (pos - l.implicit_start[r]) as u32)
    };
    let sb = if rank < l.in_order_ranks {
        rank
    } else {
        l.usable[rank as usize]
    };
    debug_assert!(
        sb < geo.superblocks_per_lun && slot < sb_units && l.usable[rank as usize] == sb,
        "layout place (superblock {sb}, slot {slot}) outside the LUN"
    );
    Some((lun, sb, slot))
}

#[cfg(test)]
mod tests;
