//! Garbage collection: greedy victim choice, relocation through the write point, erase.
//!
//! When a LUN's free superblocks fall below `gc_threshold_pct`, GC picks the closed superblock
//! with the fewest valid units (greedy), relocates its valid units through the same write point
//! (the mapping moves at once; the flash reads and programs are queued on the LUN and take real
//! time, competing with host I/O) and finally erases it. Write amplification is
//! `(host units programmed + GC units programmed) / host units programmed`.

use super::{Ftl, GcPlan, SbState, Writer, NO_LPN};

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
        // Collect the live units in slot order.
        let row_units = self.geo.row_units();
        let mut live: Vec<(u32, u32, u32)> = Vec::with_capacity(self.sbs[vi].valid_units as usize); // (slot, lpn, version)
        for slot in 0..sb_units {
            let lpn = match &self.reverse[vi] {
                Some(rev) => match rev[slot as usize] {
                    NO_LPN => continue,
                    lpn => lpn as u64,
                },
                None => match self.implicit_lpn(lun, victim, slot) {
                    Some(lpn) => lpn,
                    None => continue,
                },
            };
            if self.forward(lpn) != self.ppn(lun, victim, slot) {
                continue; // rewritten or trimmed since
            }
            let version = self
                .versions
                .as_ref()
                .and_then(|v| v[vi].as_ref())
                .map_or(0, |v| v[slot as usize]);
            live.push((slot, lpn as u32, version));
        }
        assert_eq!(
            live.len() as u32,
            self.sbs[vi].valid_units,
            "valid count of LUN {lun} superblock {victim}"
        );
        let mut reads: Vec<(u32, u32)> = Vec::new();
        for &(slot, _, _) in &live {
            let page = slot / row_units;
            match reads.last_mut() {
                Some((p, n)) if *p == page => *n += 1,
                _ => reads.push((page, 1)),
            }
        }
        let mut programs = Vec::new();
        let units: Vec<(u32, u32)> = live.iter().map(|&(_, lpn, v)| (lpn, v)).collect();
        for chunk in units.chunks(row_units as usize) {
            let placed = self.write_row(lun, chunk, Writer::Gc);
            programs.push((placed.page, chunk.len() as u32));
        }
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
