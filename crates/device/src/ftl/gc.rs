//! Garbage collection: greedy victim choice, relocation through the write point, erase.
//!
//! When a LUN's free superblocks fall below `gc_threshold_pct`, GC picks the closed superblock
//! with the fewest valid units (greedy), relocates its valid units through the same write point
//! (the mapping moves at once; the flash reads and programs are queued on the LUN and take real
//! time, competing with host I/O) and finally erases it. Write amplification is
//! `(host units programmed + GC units programmed) / host units programmed`.

use super::reverse::Run;
use super::{Ftl, GcPlan, Relocation, SbState, Writer, NO_LPN, UNMAPPED};

impl Ftl {
    /// Whether GC should start on `lun`.
    pub fn needs_gc(&self, lun: u32) -> bool {
        let l = &self.luns[lun as usize];
        !l.gc_running && (l.free.len() as u32) < self.gc_threshold_free
    }

    /// Picks a victim on `lun` and relocates its valid units (mapping first; the returned plan
    /// lists the flash work to queue). `None` if no superblock would free any space.
    pub fn start_gc(&mut self, lun: u32) -> Option<GcPlan> {
        let sb_units = self.geo.superblock_units();
        let base = self.sb_index(lun, 0);
        let victim = (0..self.geo.superblocks_per_lun)
            .filter(|&sb| self.sbs[base + sb as usize].state == SbState::Closed)
            .min_by_key(|&sb| (self.sbs[base + sb as usize].valid_units, sb))?;
        let vi = base + victim as usize;
        if self.sbs[vi].valid_units + self.geo.row_units() > sb_units {
            // Relocating it would gain less than one row (the last relocated row may be
            // partly empty): collecting it would churn the flash without freeing space.
            return None;
        }
        self.sbs[vi].state = SbState::Victim;
        self.luns[lun as usize].gc_running = true;
        self.stats.gc_runs += 1;
        let live = self.live_units(lun, victim);
        assert_eq!(
            live.len() as u32,
            self.sbs[vi].valid_units,
            "valid count of LUN {lun} superblock {victim}"
        );
        let row_units = self.geo.row_units();
        let mut reads: Vec<(u32, u32)> = Vec::new();
        for &(slot, _, _) in &live {
            let page = slot / row_units;
            match reads.last_mut() {
                Some((p, n)) if *p == page => *n += 1,
                _ => reads.push((page, 1)),
            }
        }
        let programs = if self.reverse[vi].is_none() && self.relocate_by_record {
            self.relocate_implicit(lun, vi, &live)
        } else {
            let units: Vec<(u32, u32)> = live.iter().map(|&(_, lpn, v)| (lpn, v)).collect();
            units
                .chunks(row_units as usize)
                .map(|chunk| {
                    (
                        self.write_row(lun, chunk, Writer::Gc).page,
                        chunk.len() as u32,
                    )
                })
                .collect()
        };
        assert_eq!(
            self.sbs[vi].valid_units, 0,
            "GC victim LUN {lun} superblock {victim} still has valid units after relocation"
        );
        Some(GcPlan {
            lun,
            victim,
            reads,
            programs,
        })
    }

    /// The live units of superblock `victim` of `lun` in slot order, as `(slot, LPN, version)`:
    /// the units its reverse map (or, implicit, its layout) names whose LPN still maps there.
    fn live_units(&self, lun: u32, victim: u32) -> Vec<(u32, u32, u32)> {
        let vi = self.sb_index(lun, victim);
        let mut live = Vec::with_capacity(self.sbs[vi].valid_units as usize);
        let version = |slot: u32| {
            self.versions
                .as_ref()
                .and_then(|v| v[vi].as_ref())
                .map_or(0, |v| v[slot as usize])
        };
        let mut consider = |slot: u32, lpn: u64| {
            if lpn != NO_LPN as u64 && self.forward(lpn) == self.ppn(lun, victim, slot) {
                live.push((slot, lpn as u32, version(slot)));
            }
        };
        match &self.reverse[vi] {
            None => {
                for slot in 0..self.geo.superblock_units() {
                    if let Some(lpn) = self.implicit_lpn(lun, victim, slot) {
                        consider(slot, lpn);
                    }
                }
            }
            Some(rev) => {
                let spl = self.geo.superblocks_per_lun;
                for run in rev.runs() {
                    match run {
                        Run::Written { start, lpns } => {
                            for (j, &lpn) in lpns.iter().enumerate() {
                                consider(start + j as u32, lpn as u64);
                            }
                        }
                        Run::Moved {
                            start,
                            from,
                            first,
                            len,
                        } => {
                            let rec = self.moved[from as usize]
                                .as_ref()
                                .expect("a reverse map names a relocation record that exists");
                            let from_slots = rec.slots_from(first).take(len as usize);
                            for (j, from_slot) in from_slots.enumerate() {
                                let lpn = self
                                    .implicit_lpn(from / spl, from % spl, from_slot)
                                    .expect("a relocated slot held a preconditioned LPN");
                                consider(start + j as u32, lpn);
                            }
                        }
                    }
                }
            }
        }
        live
    }

    /// Moves the `live` units of implicit superblock `#vi` (global index) of `lun` through the
    /// write point and records where they went as one relocation record (`ftl/relocation.rs`)
    /// instead of a forward entry each; returns the rows programmed, `(page, units)`.
    fn relocate_implicit(
        &mut self,
        lun: u32,
        vi: usize,
        live: &[(u32, u32, u32)],
    ) -> Vec<(u32, u32)> {
        let row_units = self.geo.row_units();
        let mut dest: Vec<(u32, u32)> = Vec::new();
        let mut programs = Vec::new();
        let lpns: Vec<u32> = live.iter().map(|&(_, lpn, _)| lpn).collect();
        for (c, chunk) in lpns.chunks(row_units as usize).enumerate() {
            let first = c as u32 * row_units;
            let placed = self.write_point(lun);
            let start = placed.page * row_units;
            let ppn0 = self.ppn(lun, placed.superblock, start);
            let di = self.sb_index(lun, placed.superblock);
            for (j, &lpn) in chunk.iter().enumerate() {
                // A dense region's table holds every LPN of its region: its entry moves too
                // (a sparse region has no entry for a live implicit unit).
                if self.map.get(lpn).is_some() {
                    self.map.set(lpn, ppn0 + j as u32, |_| UNMAPPED);
                }
            }
            let n = chunk.len() as u32;
            self.sbs[vi].valid_units -= n;
            self.sbs[di].valid_units += n;
            if let Some(Some(v)) = self.versions.as_mut().map(|v| &mut v[di]) {
                // Preconditioned data is version 0.
                v[start as usize..(start + n) as usize].fill(0);
            }
            self.reverse[di]
                .as_mut()
                .expect("an open superblock has a reverse map")
                .push_moved(start, vi as u32, first, n);
            self.count_row(lun, n, Writer::Gc);
            self.advance_write_point(lun);
            match dest.last() {
                Some(&(k, p)) if p + (first - k) == ppn0 => {}
                _ => dest.push((first, ppn0)),
            }
            programs.push((placed.page, n));
        }
        let slots: Vec<u32> = live.iter().map(|&(slot, _, _)| slot).collect();
        let record = Relocation::new(self.geo.superblock_units(), &slots, dest);
        assert_eq!(
            record.units() as usize,
            live.len(),
            "every live unit recorded"
        );
        self.moved_records += 1;
        self.moved_bytes += record.bytes();
        assert!(
            self.moved[vi].is_none(),
            "superblock #{vi} relocated from its layout twice"
        );
        self.moved[vi] = Some(Box::new(record));
        programs
    }

    /// The victim's erase finished: it becomes free.
    pub fn finish_gc(&mut self, lun: u32, victim: u32) {
        let i = self.sb_index(lun, victim);
        let meta = &mut self.sbs[i];
        assert_eq!(
            meta.state,
            SbState::Victim,
            "erasing LUN {lun} superblock {victim} that GC did not pick"
        );
        assert_eq!(
            meta.valid_units, 0,
            "erasing LUN {lun} superblock {victim} with live data"
        );
        meta.state = SbState::Free;
        meta.erase_count += 1;
        meta.implicit = false;
        self.reverse[i] = None;
        if let Some(v) = &mut self.versions {
            v[i] = None;
        }
        let l = &mut self.luns[lun as usize];
        l.free.push(victim);
        l.gc_running = false;
        self.stats.erases += 1;
    }

    /// `(min, max, mean×1000)` erase counts over all superblocks.
    pub fn erase_count_stats(&self) -> (u32, u32, u64) {
        let min = self.sbs.iter().map(|s| s.erase_count).min().unwrap_or(0);
        let max = self.sbs.iter().map(|s| s.erase_count).max().unwrap_or(0);
        let sum: u64 = self.sbs.iter().map(|s| s.erase_count as u64).sum();
        (min, max, sum * 1000 / self.sbs.len().max(1) as u64)
    }
}
