//! The flusher's state (Linux's `bdi_writeback`, reduced): whether write-back work is in
//! progress, the pass it is in and the file the pass is at, the wave's victim hint, and the
//! threads that wait for write-back (throttled writers, fsync callers).
//!
//! This is state only: *when* to write back, which files a pass visits and how the pages
//! become bios is `machine::writeback`'s behaviour, which is the only code that holds a
//! [`FlusherState`] (the host's `flush`) and changes it through the operations below. Each is
//! named for a step of Linux's `wb_writeback` loop.
//!
//! Worked example (one background pass over two files, `writeback_chunk_size` 5,120 pages):
//! [`FlusherState::start_work`], then [`FlusherState::start_pass`] with the queued files
//! `[3, 7]` and a wave of 5,120 + 800 pages (file 7 has 800 dirty); the first run taken
//! ([`FlusherState::take_run`]) finds [`FlusherState::wave_pending`] true, so the wave begins
//! and, with `victim_hint`, its 5,920 pages wait in [`FlusherState::take_hint`] for the wave's
//! first request. [`FlusherState::next_file`] moves to file 3 with a fresh chunk, runs of up to
//! `writeback_bio_pages` come off it until its chunk is used up, then file 7; when the pass is
//! empty the stop check either starts another pass or [`FlusherState::stop_work`]s.
//!
//! What it leaves out: one flusher for the device (no per-cgroup `bdi_writeback`), no
//! per-work-item queue (the work is one flag: background, periodic and throttled work
//! merge).

use std::collections::VecDeque;

use engine::{IoClass, SimTime};

use crate::pagecache::NIL;

/// The flusher's state: its thread, the work and pass in progress, and the waiters.
pub(crate) struct FlusherState {
    /// The flusher kernel thread.
    thread: u32,
    /// The file being written (`NIL`: none; the pass goes to its next file).
    file: u32,
    /// Pages `file` may still give this pass (its chunk, Linux's `nr_to_write`).
    chunk_left: u64,
    /// The files the pass has still to visit (Linux's `b_io`).
    pass: VecDeque<u32>,
    /// When the pass started (it bails out to the stop check after `WRITEBACK_PASS_MAX_NS`).
    pass_started: SimTime,
    /// The count of the pass queued last, until its first pages make it a wave.
    wave_pages_left: u64,
    /// Pages taken since the pass started (or last bailed out).
    pass_pages: u64,
    /// Background (or periodic, or throttled) write-back work is in progress: passes go on
    /// until the stop check finds nothing due (Linux's `wb_writeback` running a work item).
    working: bool,
    /// Victim hint: pages the wave is about to write, given to its first request.
    hint_pages: u32,
    /// The periodic wake-up (`dirty_writeback_interval_ns`) asked for expired data.
    periodic_due: bool,
    /// The run being prepared: (file, first page, pages, owner class).
    run: (u32, u64, u32, IoClass),
    /// Writers blocked on the dirty limit (`balance_dirty_pages`).
    throttled: Vec<u32>,
    /// Threads in fsync waiting for their file's write-back.
    fsync_waiters: Vec<u32>,
}

impl FlusherState {
    /// The state of flusher thread `thread`: idle, no pass, nobody waiting.
    pub(crate) fn new(thread: u32) -> FlusherState {
        FlusherState {
            thread,
            file: NIL,
            chunk_left: 0,
            pass: VecDeque::new(),
            pass_started: SimTime::ZERO,
            wave_pages_left: 0,
            pass_pages: 0,
            working: false,
            hint_pages: 0,
            periodic_due: false,
            run: (0, 0, 0, IoClass::Throughput),
            throttled: Vec::new(),
            fsync_waiters: Vec::new(),
        }
    }

    /// The flusher kernel thread.
    pub(crate) fn thread(&self) -> u32 {
        self.thread
    }

    // ------------------------------------------------------------------ the work

    /// The periodic wake-up asks for expired data.
    pub(crate) fn ask_periodic(&mut self) {
        self.periodic_due = true;
    }

    /// Whether the periodic wake-up asked for expired data since the work last stopped.
    pub(crate) fn periodic_due(&self) -> bool {
        self.periodic_due
    }

    /// Whether write-back work is in progress.
    pub(crate) fn working(&self) -> bool {
        self.working
    }

    /// Write-back work begins (its first pass follows).
    pub(crate) fn start_work(&mut self) {
        self.working = true;
    }

    /// Nothing is due any more: the work is over; a hint not handed out is dropped.
    pub(crate) fn stop_work(&mut self) {
        self.working = false;
        self.periodic_due = false;
        self.hint_pages = 0;
        self.pass.clear();
        self.file = NIL;
        self.chunk_left = 0;
    }

    // ------------------------------------------------------------------ passes

    /// The pass's file queue, emptied, for the page cache to fill with a new pass's files
    /// (hand it back with [`FlusherState::start_pass`]).
    pub(crate) fn take_pass_queue(&mut self) -> VecDeque<u32> {
        let mut pass = std::mem::take(&mut self.pass);
        pass.clear();
        pass
    }

    /// A new pass over `files` starts at `now`; it will write about `wave_pages` pages.
    pub(crate) fn start_pass(&mut self, files: VecDeque<u32>, now: SimTime, wave_pages: u64) {
        self.pass = files;
        self.restart_pass_clock(now);
        self.wave_pages_left = wave_pages;
    }

    /// Whether the pass has visited all its files.
    pub(crate) fn pass_done(&self) -> bool {
        self.pass.is_empty()
    }

    /// The pass bailed out to the stop check and goes on: its clock and page count restart.
    pub(crate) fn restart_pass_clock(&mut self, now: SimTime) {
        self.pass_started = now;
        self.pass_pages = 0;
    }

    /// How long the pass has run at `now` (since it started or last bailed out).
    pub(crate) fn pass_ran_ns(&self, now: SimTime) -> u64 {
        now.0 - self.pass_started.0
    }

    /// Whether the pass took any pages (since it started or last bailed out).
    pub(crate) fn pass_made_progress(&self) -> bool {
        self.pass_pages > 0
    }

    /// The file the pass is at, if any.
    pub(crate) fn current_file(&self) -> Option<u32> {
        (self.file != NIL).then_some(self.file)
    }

    /// Pages the current file may still give this pass.
    pub(crate) fn chunk_left(&self) -> u64 {
        self.chunk_left
    }

    /// The current file's chunk is used up (or it has nothing left to write): the pass moves
    /// on to its next file.
    pub(crate) fn leave_file(&mut self) {
        self.file = NIL;
        self.chunk_left = 0;
    }

    /// The pass goes to its next file, which may give `chunk_pages`: that file, or `None` when
    /// the pass has visited them all.
    pub(crate) fn next_file(&mut self, chunk_pages: u64) -> Option<u32> {
        let file = self.pass.pop_front()?;
        self.file = file;
        self.chunk_left = chunk_pages;
        Some(file)
    }

    /// The current file gives the run of `n` pages from `first`, dirtied by `class`: the run
    /// being prepared ([`FlusherState::run`]).
    pub(crate) fn take_run(&mut self, first: u64, n: u32, class: IoClass) {
        self.chunk_left -= n as u64;
        self.pass_pages += n as u64;
        self.run = (self.file, first, n, class);
    }

    /// The run being prepared: (file, first page, pages, owner class).
    pub(crate) fn run(&self) -> (u32, u64, u32, IoClass) {
        self.run
    }

    // ------------------------------------------------------------------ waves

    /// Whether the pass's next run is its first: a wave begins with it.
    pub(crate) fn wave_pending(&self) -> bool {
        self.pass_pages == 0 && self.wave_pages_left > 0
    }

    /// The wave begins: the pages it is about to write, kept as its victim hint when `hint`
    /// (`pagecache.victim_hint`) until the wave's first request takes it.
    pub(crate) fn begin_wave(&mut self, hint: bool) -> u64 {
        let about = self.wave_pages_left.min(u32::MAX as u64);
        if hint {
            self.hint_pages = about as u32;
        }
        self.wave_pages_left = 0;
        about
    }

    /// The wave's victim hint, once (0: none, or given already).
    pub(crate) fn take_hint(&mut self) -> u32 {
        std::mem::take(&mut self.hint_pages)
    }

    // ------------------------------------------------------------------ waiters

    /// Writer `t` blocks on the dirty limit.
    pub(crate) fn add_throttled(&mut self, t: u32) {
        self.throttled.push(t);
    }

    /// Whether any writer is blocked on the dirty limit.
    pub(crate) fn has_throttled(&self) -> bool {
        !self.throttled.is_empty()
    }

    /// Moves the throttled writers, in the order they blocked, into `out`.
    pub(crate) fn release_throttled(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.throttled);
    }

    /// Thread `t`, in fsync, waits for its file's write-back.
    pub(crate) fn add_fsync_waiter(&mut self, t: u32) {
        self.fsync_waiters.push(t);
    }

    /// Whether any thread waits in fsync.
    pub(crate) fn has_fsync_waiters(&self) -> bool {
        !self.fsync_waiters.is_empty()
    }

    /// Moves the fsync waiters for which `waits_on_file` holds into `out`.
    pub(crate) fn release_fsync_waiters(
        &mut self,
        mut waits_on_file: impl FnMut(u32) -> bool,
        out: &mut Vec<u32>,
    ) {
        let mut i = 0;
        while i < self.fsync_waiters.len() {
            let w = self.fsync_waiters[i];
            if waits_on_file(w) {
                self.fsync_waiters.swap_remove(i);
                out.push(w);
            } else {
                i += 1;
            }
        }
    }
}
