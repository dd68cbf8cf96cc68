//! Write-back rounds: which dirty lines leave the write buffer for flash, and when.
//!
//! ## Rounds: what to evict, and when ([`WriteBack`])
//! Eviction starts only when a write is blocked (the baseline "when full" policy), and then
//! as a *round*: as many rows as there are LUNs beyond the rows already in flight (or
//! `evict_batch_units` units when that is set), filled with the oldest dirty data. A write
//! blocked by a full set first puts one of that set's own dirty lines into the round, so the
//! round frees the slot the write waits for. While a round is on its way (every LUN has a row
//! in flight, or eviction is blocked because no LUN has flash space until GC erases
//! something) no new round starts: the completions of the rows in flight retry the stalled
//! writes, and the next blocked write starts the next round.
//!
//! Why a whole stripe and not the one line the set needs: a set fills long before the buffer
//! does (random writes spread unevenly over sets), and draining a row at a time left all but a
//! few dies idle while writes queued behind multi-millisecond TLC programs.
//!
//! Rounds program whole rows only: a partial row wastes its empty slots, which GC must later
//! reclaim. What does not fill a row goes back to the buffer (dirty again, at the head of the
//! eviction order) while other rows are in flight — their completion brings the next round;
//! with nothing in flight a partial row is the only way forward.
//!
//! Worked example (`nvme-tlc`: 128 LUNs, 4-unit rows): with the buffer full and 100 rows in
//! flight, a blocked write starts a round of (128 − 100) × 4 = 112 units, the 112 oldest dirty
//! lines. If only 110 are dirty and not already evicting, the round keeps 27 rows (108 units)
//! and the last 2 lines go back. *Where* each row goes (which LUN, which unit in which row) is
//! the FTL's business: `ftl/placement.rs`.
//!
//! ## When the buffer flushes (`cache.flush`)
//! `on-full` is the policy above: dirty data reaches flash only when a write is blocked, so a
//! read/write mix at low queue depth never programs flash within a run and reads never meet a
//! busy die. `idle` adds what commercial firmware does: whenever a LUN is idle (nothing queued,
//! running or suspended) and a whole row of dirty data waits, that LUN programs the row of the
//! oldest dirty units ([`WriteBack::take_idle_row`]; `Ssd::flush_idle` in `write_path.rs` finds the
//! idle LUNs, after every buffered write and every flash completion). Only whole rows go, so
//! background flushing wastes no slots, and only to idle LUNs, so it never queues behind reads
//! already waiting — but a read arriving during the program meets a busy die (and suspends it
//! where `flash.suspend` is on).
//!
//! Worked example (`zssd`, QD1, 20 % 4 KiB random writes): `ullstack sim --device zssd --seed 1`
//! with the fio job `rw=randrw rwmixread=80 bs=4k ioengine=libaio iodepth=1 direct=1
//! norandommap number_ios=200000` printed 57.5 K reads/s and 14.3 K writes/s: one write every
//! 70 µs, so a row of 8 units fills every 0.56 ms and goes to an idle LUN at once (4,969
//! programs of 39,752 units); each row keeps its LUN busy 100 µs (tPROG), and 464 of the
//! 160,159 flash reads (1 in 345) met a program (`flash.reads_met_program_or_erase`).
//!
//!
//! ## The lines' side
//! A round takes its units from the cache ([`Cache::take_oldest_dirty`],
//! [`Cache::take_dirty_in_set`]): a taken line turns from *dirty* to *evicting* (still
//! readable, still counted in the buffer) and leaves the buffer when its program finishes
//! ([`Cache::finish_eviction`]), or is dirty again when it could not be placed
//! ([`Cache::abort_eviction`]). Those methods live here, beside the policy that calls them;
//! the line states and the lookup are `cache.rs`'s.

use super::{Cache, WriteBlock, DIRTY, EVICTING, REQUEUE, TRIMMED};
use crate::config::CacheConfig;

impl Cache {
    /// Takes up to `max` of the oldest dirty lines for eviction: they become *evicting*
    /// (still readable, still in the buffer) and are returned as `(lpn, version)`.
    pub fn take_oldest_dirty(&mut self, max: usize, out: &mut Vec<(u32, u32)>) {
        while out.len() < max {
            let Some((lpn, stamp)) = self.dirty_fifo.pop_front() else {
                break;
            };
            if let Some(i) = self.find(lpn) {
                if !self.has(i, DIRTY) || self.dirtied[i] != stamp {
                    continue; // stale: cleaned, or dirtied again later (a newer entry)
                }
                // Dirty to evicting, or a rewrite of an evicting line marked to requeue: not
                // replaceable before or after (no index change).
                if self.has(i, EVICTING) {
                    *self.flags_mut(i) |= REQUEUE;
                } else {
                    *self.flags_mut(i) = (self.flags(i) & !DIRTY) | EVICTING;
                    out.push((lpn, self.version[i]));
                }
            }
        }
    }

    /// Takes the least recently used dirty line of `lpn`'s set (to unblock a `SetFull` write);
    /// split by class, of the blocked writer's partition.
    ///
    /// Fully associative: `None`. The one set is the whole cache, and the round's oldest dirty
    /// units free a line as well as any other would (a scan of every line would find one).
    pub fn take_dirty_in_set(&mut self, lpn: u32) -> Option<(u32, u32)> {
        if self.index.is_some() {
            return None;
        }
        let mut ways = self.set_range(lpn);
        if let Some(split) = &self.split {
            let part = split.ways_of(self.blocked_class);
            ways = ways.start + part.start..ways.start + part.end;
        }
        let i = ways
            .filter(|&i| self.has(i, DIRTY) && !self.has(i, EVICTING))
            .min_by_key(|&i| self.used(i))?;
        *self.flags_mut(i) = (self.flags(i) & !DIRTY) | EVICTING;
        Some((self.tag(i), self.version[i]))
    }

    /// A unit's program finished: the line leaves the buffer unless rewritten meanwhile.
    pub fn finish_eviction(&mut self, lpn: u32) {
        self.stats.units_evicted += 1;
        let i = self
            .find(lpn)
            .expect("an evicting line stays cached until its program finishes");
        assert!(
            self.has(i, EVICTING),
            "eviction of LPN {lpn} finished but it was not evicting"
        );
        let old = self.indexed_key(i);
        *self.flags_mut(i) &= !(EVICTING | TRIMMED);
        self.requeue(i);
        self.reindex(i, old);
        let dirty = self.has(i, DIRTY);
        let owner = self.stats.class_at(self.owner_of(i));
        owner.units_written_back += 1;
        if !dirty {
            owner.dirty_units -= 1;
            self.dirty_units -= 1;
        }
    }

    /// Way `i`'s program ended or was aborted: if it was rewritten meanwhile and its entry in
    /// the dirty order was passed over ([`REQUEUE`]), it goes back to the head of the order.
    fn requeue(&mut self, i: usize) {
        if self.has(i, REQUEUE) {
            *self.flags_mut(i) &= !REQUEUE;
            debug_assert!(self.has(i, DIRTY), "way {i}: requeued but not dirty");
            self.dirty_fifo.push_front((self.tag(i), self.dirtied[i]));
        }
    }

    /// An eviction could not be placed (no flash space yet): the line is dirty again.
    pub fn abort_eviction(&mut self, lpn: u32) {
        let stamp = self.tick();
        if let Some(i) = self.find(lpn) {
            if self.has(i, TRIMMED) && !self.has(i, DIRTY) {
                // Trimmed since the eviction began and not rewritten: nothing left to write,
                // so it leaves the buffer instead of becoming dirty again (which would map the
                // deallocated data back).
                let old = self.indexed_key(i);
                *self.flags_mut(i) &= !(EVICTING | TRIMMED);
                self.reindex(i, old);
                self.dirty_units -= 1;
                self.stats.class_at(self.owner_of(i)).dirty_units -= 1;
                return;
            }
            let old = self.indexed_key(i);
            *self.flags_mut(i) &= !(EVICTING | TRIMMED);
            if !self.has(i, DIRTY) {
                *self.flags_mut(i) |= DIRTY;
                self.set_dirtied(i, stamp);
                self.dirty_fifo.push_front((lpn, stamp));
            }
            self.requeue(i);
            self.reindex(i, old);
        }
    }
}

/// The write-back policy: when an eviction round starts, which dirty units it takes, and the
/// rows of it in flight until their programs finish. See the module essay.
pub struct WriteBack {
    /// LUNs of the flash: a round fills at most one row for each LUN without a row in flight.
    luns: u32,
    /// Units per row (one multi-plane program).
    row_units: u32,
    /// `cache.evict_batch_units` (0 = one row per LUN without a row in flight).
    batch_units: u32,
    /// Units of each host row being programmed, by row id (ids reused via `free_rows`).
    rows: Vec<Vec<(u32, u32)>>,
    free_rows: Vec<u32>,
    rows_in_flight: u32,
    /// Units in the rows in flight.
    units_in_flight: u64,
    /// The last round found no flash space; no new round until GC frees a superblock.
    blocked: bool,
    /// The round or idle row being formed (kept to reuse its allocation).
    round: Vec<(u32, u32)>,
}

impl WriteBack {
    pub fn new(config: &CacheConfig, luns: u32, row_units: u32) -> WriteBack {
        assert!(
            luns > 0 && row_units > 0,
            "write-back needs at least one LUN and one unit per row, got {luns} LUNs and {row_units} units"
        );
        WriteBack {
            luns,
            row_units,
            batch_units: config.evict_batch_units,
            rows: Vec::new(),
            free_rows: Vec::new(),
            rows_in_flight: 0,
            units_in_flight: 0,
            blocked: false,
            round: Vec::new(),
        }
    }

    /// Host rows being programmed.
    pub fn rows_in_flight(&self) -> u32 {
        self.rows_in_flight
    }

    /// Units in the host rows being programmed.
    pub fn units_in_flight(&self) -> u64 {
        self.units_in_flight
    }

    /// Whether eviction waits for GC to free flash space.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// A write of `lpn` was blocked by `block`: chooses the units of a new round and marks them
    /// evicting in `cache`. Empty when no round starts now (one is on its way). The caller
    /// places the units (see `ftl::stripe_rows`), calls [`start_row`](Self::start_row) for each
    /// row it programs and hands the vector back with [`end_round`](Self::end_round).
    pub fn plan_round(
        &mut self,
        cache: &mut Cache,
        block: WriteBlock,
        lpn: u32,
    ) -> Vec<(u32, u32)> {
        let mut round = std::mem::take(&mut self.round);
        round.clear();
        if self.blocked || self.rows_in_flight >= self.luns {
            return round;
        }
        if block == WriteBlock::SetFull {
            // None: every dirty line of the set is already being programmed; the round still
            // goes ahead so LUNs that finished their rows do not sit idle meanwhile.
            if let Some(unit) = cache.take_dirty_in_set(lpn) {
                round.push(unit);
            }
        }
        let row_units = self.row_units as usize;
        let batch = match self.batch_units {
            0 => ((self.luns - self.rows_in_flight) as usize) * row_units,
            n => n as usize,
        };
        cache.take_oldest_dirty(batch, &mut round);
        if self.rows_in_flight > 0 {
            let whole = round.len() / row_units * row_units;
            for &(lpn, _) in round[whole..].iter().rev() {
                cache.abort_eviction(lpn);
            }
            round.truncate(whole);
        }
        round
    }

    /// `cache.flush = "idle"`: whether a whole row of dirty data waits beyond the rows in
    /// flight (rewritten evicting lines make this an overestimate;
    /// [`take_idle_row`](Self::take_idle_row) finds out).
    pub fn idle_row_waiting(&self, cache: &Cache) -> bool {
        cache.dirty_units() - self.units_in_flight >= self.row_units as u64
    }

    /// `cache.flush = "idle"`: the oldest dirty units for one whole row, marked evicting, or
    /// `None` (and nothing taken) when fewer than a row are dirty and not already evicting:
    /// the idle flush programs whole rows only. The caller programs the row (calling
    /// [`start_row`](Self::start_row)) and hands the vector back with
    /// [`end_round`](Self::end_round).
    pub fn take_idle_row(&mut self, cache: &mut Cache) -> Option<Vec<(u32, u32)>> {
        let mut row = std::mem::take(&mut self.round);
        row.clear();
        cache.take_oldest_dirty(self.row_units as usize, &mut row);
        if row.len() < self.row_units as usize {
            for &(lpn, _) in row.iter().rev() {
                cache.abort_eviction(lpn);
            }
            self.end_round(row);
            return None;
        }
        Some(row)
    }

    /// Gives back the vector [`plan_round`](Self::plan_round) or
    /// [`take_idle_row`](Self::take_idle_row) returned.
    pub fn end_round(&mut self, mut round: Vec<(u32, u32)>) {
        round.clear();
        self.round = round;
    }

    /// A row of `units` is being programmed: returns its id for [`finish_row`](Self::finish_row).
    pub fn start_row(&mut self, units: &[(u32, u32)]) -> u32 {
        assert!(
            !units.is_empty() && units.len() <= self.row_units as usize,
            "a write-back row holds 1..={} units, got {}",
            self.row_units,
            units.len()
        );
        self.rows_in_flight += 1;
        self.units_in_flight += units.len() as u64;
        match self.free_rows.pop() {
            Some(r) => {
                let row = &mut self.rows[r as usize];
                assert!(
                    row.is_empty(),
                    "reused write-back row {r} still holds units"
                );
                row.extend_from_slice(units);
                r
            }
            None => {
                self.rows.push(units.to_vec());
                (self.rows.len() - 1) as u32
            }
        }
    }

    /// Row `row`'s program finished: its units leave the buffer (unless rewritten meanwhile).
    pub fn finish_row(&mut self, cache: &mut Cache, row: u32) {
        let units = &mut self.rows[row as usize];
        assert!(
            !units.is_empty() && self.rows_in_flight > 0,
            "write-back row {row} finished but was not in flight ({} rows in flight)",
            self.rows_in_flight
        );
        for &(lpn, _) in units.iter() {
            cache.finish_eviction(lpn);
        }
        self.units_in_flight -= units.len() as u64;
        units.clear();
        self.free_rows.push(row);
        self.rows_in_flight -= 1;
    }

    /// No LUN had room for `unplaced` (units of the round not yet programmed): they are dirty
    /// again, and no round starts until [`take_blocked`](Self::take_blocked) after GC freed space.
    pub fn block<'a>(&mut self, cache: &mut Cache, unplaced: impl Iterator<Item = &'a (u32, u32)>) {
        for &(lpn, _) in unplaced {
            cache.abort_eviction(lpn);
        }
        self.blocked = true;
    }

    /// GC freed a superblock: clears the block, saying whether there was one (then stalled
    /// writes should be retried and, if still stalled, a round started).
    pub fn take_blocked(&mut self) -> bool {
        std::mem::take(&mut self.blocked)
    }
}
