//! The write path of the device's state machine, split from `lib.rs` by idea: a write's units
//! into the DRAM buffer, the stall when they do not fit and its retries, the eviction rounds
//! that make room (`cache/writeback.rs`), the idle flush (`cache.flush = "idle"`),
//! FastDrain's watermark rows (`drain.rs`) and the start of GC where a row took a LUN below its
//! threshold. Like `lib.rs` it routes between the layers and holds no policy of its own; the
//! read path is `read_path`, the flash completions `flash_done`, the event routing `routing`.

use engine::SimTime;

use crate::cache::WriteBlock;
use crate::config::{Drain as DrainMode, Flush, ReadStaging};
use crate::flash::{FlashOp, OpKind, OpOrigin};
use crate::ftl::{self, Urgency, Writer};
use crate::Ssd;

impl Ssd {
    /// Puts a write's units into the buffer; stalls it on the first unit that must wait.
    pub(crate) fn buffer_write(&mut self, now: SimTime, slot: u32) {
        loop {
            let (lpn, version, class, done) = {
                let c = self.cmd(slot);
                (
                    c.first_lpn + c.next_unit,
                    c.cmd.version,
                    c.cmd.class,
                    c.next_unit == c.units,
                )
            };
            if done {
                break;
            }
            let taken = if self.drain.oracle_get(lpn).is_some() {
                Err(WriteBlock::BufferFull) // the oracle holds the newest data: it stays there
            } else {
                self.cache.write(lpn, version, class)
            };
            match taken {
                Ok(()) => self.cmd(slot).next_unit += 1,
                Err(_) if self.drain.mode() == DrainMode::Oracle => {
                    self.drain.oracle_put(lpn, version);
                    self.cmd(slot).next_unit += 1;
                }
                Err(block) => {
                    self.stall(now, slot);
                    self.make_room(now, block, lpn);
                    return;
                }
            }
        }
        let c = self.cmd(slot);
        if let Some(since) = c.stalled_since.take() {
            self.stats.write_stall_ns += now - since;
        }
        let at = now + self.config.cache.dram_access_ns;
        self.post_completion(at, slot);
        self.flush_idle(now);
        self.drain_step(now);
    }

    /// Units the LUNs that background eviction may use right now could take, a row each: no
    /// host read queued or running, no host row queued, room for a row (`drain.rs`, "The
    /// background set").
    pub(crate) fn read_free_row_units(&self) -> u64 {
        let (luns, row_units) = (self.flash.geometry.luns, self.flash.geometry.row_units());
        let free = (0..luns)
            .filter(|&lun| {
                self.ftl.host_rows_queued(lun) == 0
                    && self.ftl.has_room(lun, Writer::Host)
                    && !self.flash.lun_has_host_read(lun)
            })
            .count() as u64;
        free * row_units as u64
    }

    /// `cache.drain = "fastdrain"`: programs the rows that foreground or background eviction
    /// wants now (`drain.rs`), one per LUN without a host row queued, from where the last pass
    /// stopped. Background rows go only to LUNs without a host read; foreground rows to any.
    /// Inlined: it runs after every flash operation, and under any other drain mode it is one
    /// compare (the pass itself stays out of line).
    #[inline]
    pub(crate) fn drain_step(&mut self, now: SimTime) {
        if self.drain.mode() != DrainMode::Fastdrain || self.writeback.is_blocked() {
            return;
        }
        self.drain_pass(now);
    }

    #[inline(never)]
    fn drain_pass(&mut self, now: SimTime) {
        let (luns, row_units) = (self.flash.geometry.luns, self.flash.geometry.row_units());
        let start = self.drain.cursor();
        for k in 0..luns {
            let foreground = self
                .drain
                .foreground_wants_row(self.cache.dirty_units(), self.writeback.units_in_flight());
            if !foreground && !self.drain.background_wants_row(row_units) {
                return;
            }
            let lun = (start + k) % luns;
            if self.ftl.host_rows_queued(lun) > 0 || !self.ftl.has_room(lun, Writer::Host) {
                continue;
            }
            if !foreground && self.flash.lun_has_host_read(lun) {
                self.drain.skipped_read_busy();
                continue;
            }
            let Some(row) = self.writeback.take_idle_row(&mut self.cache) else {
                return;
            };
            let urgency = if foreground {
                self.drain.foreground_row(row.len());
                Urgency::Foreground
            } else {
                assert!(
                    !self.flash.lun_has_host_read(lun),
                    "background eviction chose LUN {lun}, which has a host read"
                );
                #[cfg(test)]
                self.background_log
                    .push((now, lun, self.flash.host_reads_on(lun)));
                self.drain.background_row(row.len());
                Urgency::Background
            };
            self.program_host_row(now, lun, &row, urgency);
            self.writeback.end_round(row);
            self.drain.advance(lun, luns);
        }
    }

    /// `cache.flush = "idle"`: programs whole rows of the oldest dirty data (chosen by
    /// [`WriteBack::take_idle_row`]) to idle LUNs with room (see "When the buffer flushes" in
    /// `cache/writeback.rs`). Does nothing while writes are stalled or eviction is blocked: the on-full
    /// path owns the buffer then.
    pub(crate) fn flush_idle(&mut self, now: SimTime) {
        if self.config.cache.flush != Flush::Idle
            || !self.stalled.is_empty()
            || self.writeback.is_blocked()
        {
            return;
        }
        let luns = self.flash.geometry.luns;
        // One pass over the LUNs from the cursor; the cursor itself moves past each LUN
        // programmed, for the next pass.
        let start = self.flush_cursor;
        for k in 0..luns {
            if !self.writeback.idle_row_waiting(&self.cache) {
                return;
            }
            let lun = (start + k) % luns;
            if !self.flash.lun_is_idle(lun) || !self.ftl.has_room(lun, Writer::Host) {
                continue;
            }
            let Some(row) = self.writeback.take_idle_row(&mut self.cache) else {
                return;
            };
            self.program_host_row(now, lun, &row, Urgency::Background);
            self.writeback.end_round(row);
            self.flush_cursor = (lun + 1) % luns;
        }
    }

    pub(crate) fn stall(&mut self, now: SimTime, slot: u32) {
        // The stalled queue is short (bounded by the commands in flight), so `contains` is cheap.
        let c = self.cmd(slot);
        if c.stalled_since.is_none() {
            c.stalled_since = Some(now);
            self.stats.write_stalls += 1;
        }
        if !self.stalled.contains(&slot) {
            self.stalled.push_back(slot);
        }
    }

    /// Retries the write that has waited longest; false if it has to wait again.
    pub(crate) fn resume_first_write(&mut self, now: SimTime) -> bool {
        let Some(slot) = self.stalled.pop_front() else {
            return false;
        };
        let before = self.stalled.len();
        self.buffer_write(now, slot);
        if self.stalled.len() > before {
            // It stalled again (re-queued at the back): put it back at the head.
            let s = self.stalled.pop_back().expect("just pushed");
            self.stalled.push_front(s);
            return false;
        }
        true
    }

    /// Retries what waits for buffer space after some was freed. `read_staging = "buffer"`
    /// (and `bypass`): reads waiting to stage first (each needs one line), then the stalled
    /// writes in order. `buffer-in-order`: reads and writes in the order they began to wait
    /// (a tie goes to the write), stopping at the first that has to wait again.
    pub(crate) fn resume_stalled(&mut self, now: SimTime) {
        if self.config.cache.read_staging == ReadStaging::BufferInOrder {
            loop {
                let read_since = self.read_stalls.front().map(|st| st.since);
                let write_since = self.stalled.front().copied().map(|slot| {
                    self.cmd(slot)
                        .stalled_since
                        .expect("a stalled write knows when it stalled")
                });
                let went = match (read_since, write_since) {
                    (None, None) => break,
                    (Some(r), Some(w)) if r < w => self.resume_first_read(now),
                    (Some(_), None) => self.resume_first_read(now),
                    _ => self.resume_first_write(now),
                };
                if !went {
                    break;
                }
            }
            return;
        }
        if !self.read_stalls.is_empty() {
            self.resume_read_stalls(now);
        }
        while !self.stalled.is_empty() {
            if !self.resume_first_write(now) {
                break;
            }
        }
    }

    /// Starts an eviction round so a blocked write can proceed: the write buffer chooses the
    /// units (`cache/writeback.rs`), the FTL lays them out and places each row
    /// (`ftl/placement.rs`), and each row is queued on its LUN.
    pub(crate) fn make_room(&mut self, now: SimTime, block: WriteBlock, lpn: u32) {
        let round = self.writeback.plan_round(&mut self.cache, block, lpn);
        if round.is_empty() {
            // A round is on its way; its completions retry the stalled writes.
            self.writeback.end_round(round);
            return;
        }
        let (luns, row_units) = (self.flash.geometry.luns, self.flash.geometry.row_units());
        let mut members: Vec<(u32, u32)> = Vec::with_capacity(row_units as usize);
        for row in ftl::stripe_rows(round.len(), luns, row_units) {
            members.clear();
            members.extend(row.members(&round).copied());
            let Some(lun) = self.ftl.next_host_lun() else {
                // No LUN has room until GC erases something: the rest goes back to the buffer,
                // and GC runs wherever it can free space (a LUN whose GC found no victim earlier
                // may have one now that host writes elsewhere invalidated some of its data).
                self.writeback.block(&mut self.cache, row.unplaced(&round));
                for l in 0..luns {
                    if self.ftl.needs_gc(l) {
                        self.start_gc(now, l);
                    }
                }
                break;
            };
            // Writes are stalled on this round: it is urgent.
            self.program_host_row(now, lun, &members, Urgency::Foreground);
        }
        self.writeback.end_round(round);
    }

    /// Places `members` (one row of host write-back, from an eviction round or the idle flush)
    /// on `lun`, queues its program, and starts GC there if the row took the LUN below its
    /// threshold.
    pub(crate) fn program_host_row(
        &mut self,
        now: SimTime,
        lun: u32,
        members: &[(u32, u32)],
        urgency: Urgency,
    ) {
        let placed = self.ftl.write_host_row(lun, members, urgency);
        let row = self.writeback.start_row(members);
        let op = FlashOp {
            kind: OpKind::Program,
            page: placed.page,
            units: members.len() as u32,
            origin: OpOrigin::Evict { row },
        };
        self.flash.submit(now, lun, op, &mut self.flash_events);
        if self.ftl.needs_gc(lun) {
            self.start_gc(now, lun);
        }
    }

    pub(crate) fn start_gc(&mut self, now: SimTime, lun: u32) {
        let Some(plan) = self.ftl.start_gc(lun) else {
            return;
        };
        for &(page, units) in &plan.reads {
            let op = FlashOp {
                kind: OpKind::Read,
                page,
                units,
                origin: OpOrigin::GcRead,
            };
            self.flash.submit(now, lun, op, &mut self.flash_events);
        }
        for &(page, units) in &plan.programs {
            let op = FlashOp {
                kind: OpKind::Program,
                page,
                units,
                origin: OpOrigin::GcProgram,
            };
            self.flash.submit(now, lun, op, &mut self.flash_events);
        }
        let erase = FlashOp {
            kind: OpKind::Erase,
            page: 0,
            units: 0,
            origin: OpOrigin::GcErase {
                superblock: plan.victim,
            },
        };
        self.flash.submit(now, lun, erase, &mut self.flash_events);
    }
}
