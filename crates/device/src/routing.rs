//! The routing of the device's state machine, split from `lib.rs` by idea: which layer an
//! event goes to next. A doorbell starts a fetch, the fetched command runs its firmware, and
//! [`execute`](Ssd::execute) sends it down its path (`read_path`, `write_path`, or straight to
//! its completion for flush, trim and errors); a finished flash operation goes to `flash_done`;
//! the completion entry is DMAed to the host and handed to the caller. Like `read_path` and
//! `write_path` it holds no policy of its own.
//!
//! ## Flash events
//! The flash model is sans-event-queue: `Flash::submit` and `Flash::on_event` append
//! `(time, FlashEvent)` pairs to a buffer instead of scheduling them. The buffer is drained
//! into the event queue in exactly one place, [`Ssd::handle`], right after every handler, so a
//! handler cannot forget to schedule its flash work. The buffer must be empty between events:
//! asserted (in release builds too) before each handler and in [`Ssd::next_event_time`], which
//! catches flash work submitted from outside a handler (say, from [`Ssd::submit`]). Events at
//! the same nanosecond run in scheduling order, and a handler's flash events are scheduled after
//! everything else it scheduled — the order of the earlier design, in which each handler that
//! submitted flash work flushed the buffer as its last step (the golden summaries did not move).
//!
//! ## The fetch engine coming free
//! A fetch takes `ctrl.fetch_ns`; when it ends, the engine fetches the next visible command, if
//! any (`Ev::FetchFree`). At QD32 under a host-bound load nearly every fetch ends with nothing
//! visible, and the next doorbell finds the engine free and starts the fetch itself: the event
//! ran once per command to clear a flag. So when a fetch starts with nothing else visible and
//! a decision with nothing visible changes nothing (round robin, [`Controller::pick_could_act`]),
//! its end is only reserved in the event order ([`engine::queue`], "Reserved places"), and the
//! next doorbell settles it: if the end has passed, the engine has been free since; if not,
//! the fetch-free event is scheduled in its reserved place, where it runs and finds the new
//! command, exactly as before. No other event's sequence number moves, so the order of every
//! event, and every result, is the one the unconditional event gave. `valgrind --tool=callgrind`
//! on `ullstack sim --device zssd` with 200 K 4 KiB random reads at QD32 (1.8 M events)
//! counts 33 M fewer instructions (3 %) than with the event always scheduled; 200 K 70/30
//! reads and writes, 34 M fewer.
//!
//! [`Controller::pick_could_act`]: crate::ctrl::Controller::pick_could_act

use engine::{IoClass, IoOp, SimTime};

use crate::flash::FlashEvent;
use crate::pcie::{Direction, COMPLETION_ENTRY_BYTES};
use crate::{Completion, Ev, Hint, Ssd, Status, SECTOR_BYTES};

impl Ssd {
    /// Runs the handler of `ev`, then schedules the flash events it produced. This is the only
    /// way a handler runs, so no handler can leave flash work unscheduled.
    #[inline(always)]
    pub(crate) fn handle(&mut self, ev: Ev) {
        self.assert_no_pending_flash_events("before an event");
        self.dispatch(ev);
        if !self.flash_events.is_empty() {
            self.schedule_flash_events();
        }
    }

    /// Moves the flash events a handler produced into the event queue, in the order they came.
    #[inline(never)]
    fn schedule_flash_events(&mut self) {
        // By index, then cleared: a `drain` keeps a guard to move a tail that is never there.
        for i in 0..self.flash_events.len() {
            let (at, fe) = self.flash_events[i];
            self.events.schedule(at, Ev::Flash(fe));
        }
        self.flash_events.clear();
    }

    /// Flash events must not wait in the buffer between events: [`next_event_time`] would miss
    /// them. Always on (one length check per event; the panic is out of line).
    ///
    /// [`next_event_time`]: Self::next_event_time
    #[inline]
    pub(crate) fn assert_no_pending_flash_events(&self, when: &str) {
        if !self.flash_events.is_empty() {
            self.pending_flash_events(when);
        }
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn pending_flash_events(&self, when: &str) -> ! {
        panic!(
            "{} flash events pending {when} at {}: flash work was submitted outside an event handler",
            self.flash_events.len(),
            self.now
        );
    }

    /// Each event's handler is a function of its own, called from the event loop (`handle` is
    /// inlined there): one handler holding them all saved and restored the registers its
    /// largest arm needs on every event.
    #[inline(always)]
    pub(crate) fn dispatch(&mut self, ev: Ev) {
        let now = self.now;
        match ev {
            Ev::Doorbell { sqid, slot } => self.doorbell(now, sqid, slot),
            Ev::FetchFree => self.fetch_free_now(now),
            Ev::Ready { slot } => self.execute(now, slot),
            Ev::WriteDataIn { slot } => self.write_data_in(now, slot),
            Ev::ReadDataOut { slot } => self.read_data_out(now, slot),
            Ev::PostCqe { slot } => self.post_cqe(now, slot),
            Ev::Complete { slot } => self.complete(now, slot),
            Ev::Flash(fe) => self.flash_event(now, fe),
        }
    }

    #[inline(never)]
    fn doorbell(&mut self, now: SimTime, sqid: u16, slot: u32) {
        self.ctrl.doorbell(now, sqid, slot);
        self.settle_fetch_free();
        if !self.ctrl.fetch_busy {
            self.fetch_next(now);
        }
    }

    #[inline(never)]
    fn fetch_free_now(&mut self, now: SimTime) {
        self.ctrl.fetch_busy = false;
        self.fetch_next(now);
    }

    #[inline(never)]
    fn write_data_in(&mut self, now: SimTime, slot: u32) {
        if self.stalled.is_empty() {
            self.buffer_write(now, slot);
        } else {
            // Writes queue behind stalled ones: the overflow stall hits every write.
            self.stall(now, slot);
        }
    }

    #[inline(never)]
    fn read_data_out(&mut self, now: SimTime, slot: u32) {
        let bytes = self.cmd(slot).cmd.sectors as u64 * SECTOR_BYTES;
        let done = self.pcie.dma(now, Direction::DeviceToHost, bytes);
        self.post_completion(done, slot);
    }

    #[inline(never)]
    fn post_cqe(&mut self, now: SimTime, slot: u32) {
        let done = self
            .pcie
            .dma(now, Direction::DeviceToHost, COMPLETION_ENTRY_BYTES);
        self.events.schedule(done, Ev::Complete { slot });
    }

    #[inline(never)]
    fn flash_event(&mut self, now: SimTime, fe: FlashEvent) {
        let done = self.flash.on_event(now, fe, &mut self.flash_events);
        if let Some(op) = done {
            self.flash_done(now, fe.lun, op);
        }
    }

    #[inline(always)]
    pub(crate) fn fetch_next(&mut self, now: SimTime) {
        let Some((_sqid, slot)) = self.ctrl.pick(now) else {
            return;
        };
        self.ctrl.fetch_busy = true;
        let fetched = now + self.config.ctrl.fetch_ns;
        let op = self.cmd(slot).cmd.op;
        if op == IoOp::Read {
            // The second step of the FTL's loads started at submit (`Ftl::prefetch_lookup`).
            let first_lpn = self.cmd(slot).first_lpn;
            self.ftl.prefetch_lookup_rest(first_lpn);
        }
        let ready = self.ctrl.run_firmware(fetched, op);
        if self.ctrl.pick_could_act() {
            self.events.schedule(fetched, Ev::FetchFree);
        } else {
            // Nothing to fetch next yet: the coming free waits in its place ("The fetch engine
            // coming free" above).
            debug_assert!(self.fetch_free.is_none(), "one fetch at a time");
            self.fetch_free = Some(self.events.reserve(fetched));
        }
        self.events.schedule(ready, Ev::Ready { slot });
    }

    /// Settles the fetch engine's reserved coming free, if any: if it has passed, the engine
    /// came free with nothing to fetch then (what `Ev::FetchFree` would have done); if not,
    /// a fetch decision then may do something now (a doorbell came, or the arbitration
    /// changed), so it is scheduled in its place.
    #[inline]
    pub(crate) fn settle_fetch_free(&mut self) {
        if let Some(r) = self.fetch_free.take() {
            if self.events.has_passed(r) {
                self.ctrl.fetch_busy = false;
            } else {
                self.events.schedule_reserved(r, Ev::FetchFree);
            }
        }
    }

    #[inline(never)]
    pub(crate) fn execute(&mut self, now: SimTime, slot: u32) {
        let (op, status, class) = {
            let c = self.cmd(slot);
            (c.cmd.op, c.status, c.cmd.class)
        };
        if self.exec_log.is_some() {
            let (sqid, cid) = (self.cmd(slot).sqid, self.cmd(slot).cmd.cid);
            if let Some(log) = &mut self.exec_log {
                log.push((now, sqid, cid));
            }
        }
        match class {
            IoClass::LatencyCritical => self.stats.latency_critical += 1,
            IoClass::Throughput => self.stats.throughput += 1,
        }
        if status != Status::Success {
            self.stats.errors += 1;
            self.post_completion(now, slot);
            return;
        }
        if self.cache.is_adaptive() && matches!(op, IoOp::Read | IoOp::Write) {
            let (first, units) = {
                let c = self.cmd(slot);
                (c.first_lpn, c.units)
            };
            // The class split's and the ghosts' epoch counts (`cache_split.rs`, `ghost.rs`).
            let write = op == IoOp::Write;
            self.cache
                .note_command(now.as_ns(), write, first, units, class);
        }
        match op {
            IoOp::Read => {
                self.stats.reads += 1;
                self.start_read(now, slot);
            }
            IoOp::Write => {
                self.stats.writes += 1;
                if let Hint::WritebackWave { pages } = self.cmd(slot).cmd.hint {
                    // Read before the command's data moves: before any page of the wave is
                    // in the buffer (`drain.rs`).
                    let read_free_units = self.read_free_row_units();
                    self.drain
                        .on_hint(self.cache.dirty_units(), pages, read_free_units);
                    self.drain_step(now);
                }
                let bytes = self.cmd(slot).cmd.sectors as u64 * SECTOR_BYTES;
                let done = self.pcie.dma(now, Direction::HostToDevice, bytes);
                self.events.schedule(done, Ev::WriteDataIn { slot });
            }
            IoOp::Flush => {
                // DRAM is power-loss protected (capacitors), so a flush has nothing to wait for.
                self.stats.flushes += 1;
                self.post_completion(now, slot);
            }
            IoOp::Trim => {
                self.stats.trims += 1;
                let (first, units) = {
                    let c = self.cmd(slot);
                    (c.first_lpn, c.units)
                };
                for lpn in first..first + units {
                    self.cache.trim(lpn);
                    self.drain.oracle_trim(lpn);
                    self.ftl.trim(lpn);
                }
                self.post_completion(now, slot);
            }
        }
    }

    /// Posts the completion entry: the firmware's completion work from `at`, then the entry's
    /// DMA. DMAs are asked for when their data is ready (an event), not reserved ahead: the
    /// link serves requests in the order they arrive, and a reservation made early for a
    /// later time would hold back transfers ready before it (at QD32 that left the link idle
    /// 550 ns per 4 KiB read, capping zssd at 588 K reads/s).
    #[inline(always)]
    pub(crate) fn post_completion(&mut self, at: SimTime, slot: u32) {
        self.events
            .schedule(at + self.config.ctrl.completion_ns, Ev::PostCqe { slot });
    }

    #[inline(never)]
    pub(crate) fn complete(&mut self, now: SimTime, slot: u32) {
        let c = self.cmds[slot as usize]
            .take()
            .expect("a command completes exactly once");
        self.free_cmds.push(slot);
        self.completed += 1;
        let cqid = self.ctrl.cq_of(c.sqid);
        self.ready.push(Completion {
            at: now,
            sqid: c.sqid,
            cqid,
            cid: c.cmd.cid,
            status: c.status,
            write_buffer_pct: self.drain.status_pct(
                self.cache.dirty_units(),
                self.cache.write_buffer_capacity_units(),
            ),
            interrupt: self.ctrl.interrupts_enabled(cqid),
            read_versions: c.versions.map(Vec::into_boxed_slice),
        });
    }
}
