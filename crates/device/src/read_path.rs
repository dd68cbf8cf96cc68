//! The read path of the device's state machine, split from `lib.rs` by idea: a read's units
//! looked up in the DRAM cache, the misses sent to the flash through the FTL (with the ghost
//! prefetcher's background reads behind them, promoted when a demand read comes to wait), the
//! units delivered to every command that waits for them, and the reads that wait for a line to
//! stage into (`cache.read_staging`, lib.rs's essay). Like `lib.rs` and `write_path` it routes
//! between the layers and holds no policy of its own.

use engine::{IoClass, SimTime};

use crate::cache::{ReadLookup, WriteBlock};
use crate::config::{self, Drain as DrainMode, ReadStaging};
use crate::flash::{FlashOp, OpKind, OpOrigin};
use crate::ftl;
use crate::{Ev, ReadStall, Ssd, Waiters};

impl Ssd {
    pub(crate) fn start_read(&mut self, now: SimTime, slot: u32) {
        let (first, units, class) = {
            let integrity = self.integrity;
            let c = self.cmd(slot);
            c.pending_units = c.units;
            if integrity {
                c.versions = Some(vec![0; c.units as usize]);
            }
            (c.first_lpn, c.units, c.cmd.class)
        };
        for lpn in first..first + units {
            if let Some(version) = self.drain.oracle_get(lpn) {
                self.unit_arrived(slot, lpn, version);
                continue;
            }
            if lpn != first {
                // The first unit's set was prefetched at submit (`Ssd::submit`); a later
                // unit's set starts loading here, all its arrays at once, before the lookup.
                self.cache.prefetch_set(lpn, false);
            }
            match self.cache.read(lpn, class) {
                ReadLookup::Hit { version } => self.unit_arrived(slot, lpn, version),
                ReadLookup::Filling => {
                    let w = self.fills.get_or_insert_with(lpn, || Waiters::None);
                    let was_prefetch = matches!(w, Waiters::None);
                    w.add(slot);
                    if was_prefetch {
                        self.promote_prefetch(now, lpn);
                    }
                }
                ReadLookup::Miss => {
                    if let Some(w) = self.fills.get_mut(lpn) {
                        w.add(slot); // in flight, uncached
                    } else if let Some(loc) = self.ftl.lookup(lpn) {
                        self.start_flash_read(now, lpn, loc, Waiters::One(slot), false, class);
                    } else {
                        self.unit_arrived(slot, lpn, 0); // never written: zeros, no flash work
                    }
                }
            }
        }
        let from = first + units;
        let pages = self.cache.prefetch_pages_for(class);
        if pages > 0 {
            self.prefetch(now, from..from.saturating_add(pages), class);
        }
        let ahead = self.readahead.on_read(first, units);
        if !ahead.is_empty() {
            self.prefetch(now, ahead, class);
        }
        if self.cmd(slot).pending_units == 0 {
            self.finish_read(now, slot);
        }
    }

    /// Reads `lpns` into the cache (clean, marked prefetched) unless cached, in flight or
    /// never written.
    pub(crate) fn prefetch(&mut self, now: SimTime, lpns: std::ops::Range<u32>, class: IoClass) {
        let user = self.ftl.user_lpns() as u32;
        for lpn in lpns.start..lpns.end.min(user) {
            if self.cache.contains(lpn) || self.fills.contains_key(lpn) {
                continue;
            }
            if let Some(loc) = self.ftl.lookup(lpn) {
                self.start_flash_read(now, lpn, loc, Waiters::None, true, class);
            }
        }
    }

    /// Reads `lpn`, mapped at `loc` (the caller looked it up), from flash into a line.
    #[inline(always)]
    pub(crate) fn start_flash_read(
        &mut self,
        now: SimTime,
        lpn: u32,
        loc: ftl::Location,
        waiters: Waiters,
        prefetch: bool,
        class: IoClass,
    ) {
        let cached = self.cache.start_fill(lpn, prefetch, class);
        if prefetch && !cached {
            return; // nowhere to put it: skip the prefetch
        }
        // The oracle's buffer is unbounded: it always has room to stage a read.
        if !cached
            && self.config.cache.read_staging != ReadStaging::Bypass
            && self.drain.mode() != DrainMode::Oracle
        {
            // No line to stage in: wait for one (Read staging). Later reads of the LPN join
            // the waiters through `fills`; a full buffer starts an eviction round, as a write
            // blocked on it does.
            self.fills.insert(lpn, waiters);
            self.read_stalls.push_back(ReadStall {
                lpn,
                class,
                since: now,
            });
            self.stats.read_staging_stalls += 1;
            if self.cache.dirty_units() >= self.cache.write_buffer_capacity_units() {
                self.make_room(now, WriteBlock::SetFull, lpn);
            }
            return;
        }
        self.fills.insert(lpn, waiters);
        let origin = if prefetch && self.prefetch_behind_demand() {
            OpOrigin::Prefetch { lpn }
        } else {
            OpOrigin::HostRead { lpn }
        };
        let op = FlashOp {
            kind: OpKind::Read,
            page: loc.page,
            units: 1,
            origin,
        };
        self.flash.submit(now, loc.lun, op, &mut self.flash_events);
    }

    /// Whether prefetch reads wait behind demand reads at the dies (`flash`'s essay, "Prefetch
    /// reads behind demand reads"): the firmware that runs the ghost prefetcher does.
    pub(crate) fn prefetch_behind_demand(&self) -> bool {
        self.config.cache.prefetch == config::Prefetch::Ghost
    }

    /// A demand read now waits for `lpn`, filling from a prefetch: if that prefetch read is
    /// still queued behind demand reads, it becomes one.
    pub(crate) fn promote_prefetch(&mut self, now: SimTime, lpn: u32) {
        if !self.prefetch_behind_demand() {
            return;
        }
        if let Some(loc) = self.ftl.lookup(lpn) {
            if self
                .flash
                .promote(now, loc.lun, lpn, &mut self.flash_events)
            {
                self.stats.prefetches_promoted += 1;
            }
        }
    }

    #[inline]
    pub(crate) fn unit_arrived(&mut self, slot: u32, lpn: u32, version: u32) {
        let c = self.cmd(slot);
        if let Some(v) = &mut c.versions {
            v[(lpn - c.first_lpn) as usize] = version;
        }
        assert!(
            c.pending_units > 0,
            "LPN {lpn} arrived for a command with no units pending"
        );
        c.pending_units -= 1;
    }

    #[inline]
    pub(crate) fn finish_read(&mut self, now: SimTime, slot: u32) {
        let from_dram = now + self.config.cache.dram_access_ns;
        self.events.schedule(from_dram, Ev::ReadDataOut { slot });
    }

    /// Hands one unit's data to every read command waiting for it.
    #[inline(always)]
    pub(crate) fn deliver_unit(&mut self, now: SimTime, lpn: u32, version: u32, waiters: Waiters) {
        match waiters {
            Waiters::None => {}
            Waiters::One(s) => self.wake(now, s, lpn, version),
            Waiters::Many(v) => v.into_iter().for_each(|s| self.wake(now, s, lpn, version)),
        }
    }

    /// The read in `slot` has `lpn`'s data (`version`): done if it was its last unit.
    #[inline(always)]
    fn wake(&mut self, now: SimTime, slot: u32, lpn: u32, version: u32) {
        self.unit_arrived(slot, lpn, version);
        if self.cmd(slot).pending_units == 0 {
            self.finish_read(now, slot);
        }
    }

    /// Retries reads waiting for a line to stage in, in order, until one has to wait again.
    pub(crate) fn resume_read_stalls(&mut self, now: SimTime) {
        for _ in 0..self.read_stalls.len() {
            if !self.resume_first_read(now) {
                break;
            }
        }
    }

    /// Retries the read that has waited longest to stage in; false if it has to wait again.
    /// A unit written while its read waited is served from the buffer; one trimmed, as zeros.
    pub(crate) fn resume_first_read(&mut self, now: SimTime) -> bool {
        let Some(st) = self.read_stalls.pop_front() else {
            return false;
        };
        let waiters = self
            .fills
            .remove(st.lpn)
            .expect("a read waiting to stage has a fill record");
        // Written while the read waited (served from the buffer), or trimmed (zeros): no flash.
        let found = match self.cache.peek_version(st.lpn) {
            Some(version) => Err(version),
            None => self.ftl.lookup(st.lpn).ok_or(0),
        };
        let loc = match found {
            Ok(loc) => loc,
            Err(version) => {
                self.stats.read_staging_stall_ns += now - st.since;
                self.deliver_unit(now, st.lpn, version, waiters);
                return true;
            }
        };
        let before = self.read_stalls.len();
        self.start_flash_read(now, st.lpn, loc, waiters, false, st.class);
        if self.read_stalls.len() > before {
            // Still no line: back at the head, with its first wait, and counted once.
            let mut again = self.read_stalls.pop_back().expect("just pushed");
            again.since = st.since;
            self.read_stalls.push_front(again);
            self.stats.read_staging_stalls -= 1;
            return false;
        }
        self.stats.read_staging_stall_ns += now - st.since;
        true
    }
}
