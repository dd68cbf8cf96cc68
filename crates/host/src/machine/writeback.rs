//! Write-back: the flusher kernel thread (Linux's per-device `wb_workfn`) and `fsync`, which
//! turn dirty pages back into writes. The pages, their flags and the dirty thresholds are the
//! page cache's (`pagecache`); this module decides when and how they are written.
//!
//! ## What it models
//! - **Write-back work** (Linux's `wb_writeback`) runs in the background when dirty pages
//!   exceed `dirty_background_ratio_pct` of the cache (`wb_over_bg_thresh` counts dirty pages,
//!   not those under write-back) or a file's oldest dirty data is older than `dirty_expire_ns`
//!   (checked every `dirty_writeback_interval_ns`), and on behalf of throttled writers: when
//!   dirty + write-back pages exceed `dirty_ratio_pct`, every writer that crosses the limit
//!   blocks until write-back brings the count back to halfway between the two thresholds
//!   (Linux's `balance_dirty_pages` "freerun" point), and the work goes on while they wait.
//! - The work runs in **passes** (`fs/fs-writeback.c`): a pass queues every file due (Linux's
//!   `queue_io` filling `b_io`: every dirty file for background work, the expired ones for
//!   periodic work), oldest dirtied first, and gives each a *chunk* of at most
//!   `writeback_chunk_size` pages (`writeback_sb_inodes`, `wbc.nr_to_write`), taken in page
//!   order from the file's write-back cursor, marked under write-back and turned into write
//!   bios (`writeback_bio_pages` pages each, `writeback_page_ns` of CPU per page) under the
//!   flusher's plug, which is flushed after each file's chunk. Only between passes — or when a
//!   pass has run `WRITEBACK_PASS_MAX_NS` (100 ms, `HZ / 10` in `writeback_sb_inodes`), after
//!   which the rest of the pass follows — does the work check whether write-back is still due
//!   (for background work: `wb_writeback`'s `!wb_over_bg_thresh` test). So write-back
//!   overshoots the background threshold by up to a chunk per file, and the next work starts
//!   only when writers have dirtied that much again.
//! - **Chunk size** (`writeback_chunk_size` for background and periodic work): an eighth of the
//!   dirty limit (`global_wb_domain.dirty_limit / DIRTY_SCOPE`, `DIRTY_SCOPE` = 8 in
//!   include/linux/writeback.h) plus `writeback_chunk_pages` (Linux's `MIN_WRITEBACK_PAGES`,
//!   4 MiB = 1,024 pages), rounded down to a multiple of it. Linux also caps the eighth by half
//!   the device's measured write-back bandwidth in pages per second (`avg_write_bandwidth /
//!   2`); that cap binds only below a bandwidth of a quarter of the dirty limit per second
//!   (38 MiB/s on `arm8-4g`), far under any NVMe drive's, and is left out.
//! - A **wave** is one pass: the pages one walk of the dirty file list sends to the device.
//!   With `victim_hint` on, the wave's first command carries the pages the pass will write
//!   (`wave_pages`: a chunk of each queued file, or what it has dirty if less) — exactly what
//!   it takes unless a file is dirtied further before the pass reaches it, some of its dirty
//!   pages are under write-back already (they are skipped until it ends), or the pass bails
//!   out and the stop check ends the work first. `writeback_waves`, `writeback_wave_pages` and
//!   `writeback_hinted_pages` count them.
//! - **Adaptive dirty thresholds** (`pagecache.adaptive_dirty`): the completion entries' buffer
//!   status switches the thresholds between two sets (`pagecache.rs`); switching back to the
//!   low set kicks the flusher. The chunk follows the dirty limit in force.
//! - **fsync** (a process's `fsync_every_writes`) writes back the file's dirty pages in the
//!   caller's context and blocks it until none of the file's pages is under write-back.
//!
//! Worked example (`arm8-4g`: 3 GiB of cache = 786,432 pages): the background threshold is
//! 3 % = 23,592 pages (92 MiB), the dirty limit 5 % = 39,321 pages, the freerun point 31,456.
//! The chunk is 39,321 / 8 = 4,915, plus 1,024 = 5,939, rounded down to 5,120 pages (20 MiB;
//! 10,240 pages in the high set, whose limit is 78,643). `ungzip` dirtying one file in 145-page
//! writes crosses 23,592 dirty pages; the work queues its file (and any other dirty file) and
//! the wave announces 5,120 pages plus the other files' share; after the pass dirty pages are
//! about 18,500 plus what was dirtied meanwhile, and if that is still over 23,592 another pass
//! (another wave) follows, else the flusher sleeps until the writers cross the threshold again.

//! ## What it leaves out
//! One flusher for the whole device (no per-cgroup write-back), no write-back throttling by
//! measured device bandwidth (Linux's dirty ratelimit, and the bandwidth cap on the chunk
//! above), the slow decay of Linux's global dirty limit after the threshold drops (the chunk
//! follows the threshold at once), `sync_file_range`, and writes of metadata or journal
//! blocks.
//!
//! Config keys: `pagecache.dirty_*`, `pagecache.writeback_*`, `pagecache.victim_hint`,
//! `pagecache.adaptive_*`.

use engine::{IoClass, IoOp, SimTime};

use super::{Ev, Host};
use crate::blk::{BioOwner, QueueKind};
use crate::config::Switch;
use crate::cpu::Cat;
use crate::jitter::CostSite;
use crate::pagecache::NIL;
use crate::task::{Role, Step, Wait};
use crate::SECTORS_PER_PAGE;

/// A pass over the due files bails out to the stop check after this long (Linux's
/// `writeback_sb_inodes`: `HZ / 10`).
const WRITEBACK_PASS_MAX_NS: u64 = 100_000_000;

/// Which files a write-back pass is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Due {
    /// Every dirty file (background or throttled writers).
    All,
    /// The files dirtied before this time (periodic write-back of expired data).
    ExpiredBefore(SimTime),
}

impl Host {
    /// The flusher's periodic wake-up (`dirty_writeback_interval_ns`): expired data is due.
    pub(super) fn on_flush_tick(&mut self) {
        self.flush.ask_periodic();
        self.kick_flusher();
        let next = self.now() + self.cfg.pagecache.dirty_writeback_interval_ns;
        if self.within_run(next) {
            self.schedule(next, Ev::FlushTick);
        }
    }

    /// Thread `t`'s buffered write went over the dirty limit: it waits among the throttled
    /// writers (released when the dirty pages fall below the freerun point) and the flusher
    /// is kicked.
    pub(super) fn throttle_writer(&mut self, t: u32) {
        self.flush.add_throttled(t);
        self.kick_flusher();
    }

    /// Wakes the flusher if it is idle.
    pub(super) fn kick_flusher(&mut self) {
        let f = self.flush.thread();
        if self.threads[f as usize].wait == Wait::FlusherIdle {
            self.wake(f);
        }
    }

    /// Which files write-back is due for now, if any: every dirty file when dirty pages are
    /// over the background threshold or throttled writers wait above the freerun point (Linux
    /// `wb_over_bg_thresh`; background work queues every inode dirtied before now), else the
    /// files dirtied before the expiry time when the periodic wake-up asked (kupdate).
    fn writeback_due(&self) -> Option<Due> {
        let foreground = self.flush.has_throttled() && !self.pc.below_freerun();
        if foreground && self.pc.dirty_pages() > 0 {
            return Some(Due::All);
        }
        if self.stopping() {
            return None;
        }
        if self.pc.over_background() {
            return Some(Due::All);
        }
        let expire = self.cfg.pagecache.dirty_expire_ns;
        if self.flush.periodic_due() && self.now().0 > expire {
            let before = SimTime(self.now().0 - expire);
            if self.pc.oldest_dirty_file(Some(before)).is_some() {
                return Some(Due::ExpiredBefore(before));
            }
        }
        None
    }

    /// Pages one file gives a pass now (`writeback_chunk_size`; see the module essay).
    fn chunk_pages(&self) -> u64 {
        let min = self.cfg.pagecache.writeback_chunk_pages as u64;
        self.pc.writeback_chunk_pages(min)
    }

    /// The flusher's next step (Linux's `wb_writeback` loop): start a wave when write-back is
    /// due; take the next run of the current file's chunk; when the file's chunk is used up or
    /// it has nothing left to write, flush the plug and go to the pass's next file; when the
    /// pass is over, or has run `WRITEBACK_PASS_MAX_NS`, check whether write-back is still due:
    /// go on (a new pass, or the rest of the one that bailed out), or end the wave and sleep.
    pub(super) fn flusher_next(&mut self, t: u32) {
        if !self.flush.working() {
            if self.writeback_due().is_none() {
                if self.threads[t as usize].blk.plugged() > 0 {
                    return self.unplug(t);
                }
                return self.sleep(t, Wait::FlusherIdle, Step::App);
            }
            self.flush.start_work();
            self.start_pass();
        }
        if let Some(file) = self.flush.current_file() {
            let chunk_left = self.flush.chunk_left();
            if chunk_left > 0 {
                let bio_pages = self.cfg.pagecache.writeback_bio_pages as u64;
                if let Some((first, n, class)) =
                    self.pc.take_dirty_run(file, bio_pages.min(chunk_left))
                {
                    if self.flush.wave_pending() {
                        // The pass's first run: a wave begins, announced by its hint.
                        self.begin_wave();
                    }
                    self.flush.take_run(first, n, class);
                    self.pc.count_wave_pages(n as u64);
                    let ns = n as u64 * self.cfg.pagecache.writeback_page_ns;
                    let ns = self.cost(CostSite::Writeback, ns);
                    return self.burst(t, ns, Cat::PageCache, Step::FlushPages);
                }
            }
            // The chunk is used up, or the file is clean or what is dirty is under write-back.
            self.flush.leave_file();
        }
        if self.threads[t as usize].blk.plugged() > 0 {
            return self.unplug(t);
        }
        let bail = self.flush.pass_ran_ns(self.now()) >= WRITEBACK_PASS_MAX_NS;
        if !bail && self.flush.next_file(self.chunk_pages()).is_some() {
            return self.flusher_next(t);
        }
        // The pass is over or bails out: the stop check.
        if self.writeback_due().is_none() {
            return self.stop_work(t);
        }
        let progress = self.flush.pass_made_progress();
        if self.flush.pass_done() {
            self.start_pass();
        } else {
            // Bailed out: the rest of the pass goes on (Linux keeps `b_io` until it is empty).
            self.flush.restart_pass_clock(self.now());
        }
        if !progress {
            // Everything due is under write-back: wait until a write-back ends
            // (`writeback_end` kicks the flusher).
            return self.sleep(t, Wait::FlusherIdle, Step::App);
        }
        self.flusher_next(t)
    }

    /// Queues the files of a new pass (Linux's `queue_io`) and counts what it will write.
    fn start_pass(&mut self) {
        let before = match self.writeback_due() {
            Some(Due::ExpiredBefore(t)) => Some(t),
            Some(Due::All) | None => None,
        };
        let mut pass = self.flush.take_pass_queue();
        self.pc.pass_files(before, &mut pass);
        let wave_pages = self.wave_pages(pass.iter().copied());
        self.flush.start_pass(pass, self.now(), wave_pages);
    }

    /// The pass takes its first pages: one more wave, and with `victim_hint` its count goes
    /// to the wave's first request.
    fn begin_wave(&mut self) {
        let hint = self.cfg.pagecache.victim_hint == Switch::On;
        let about = self.flush.begin_wave(hint);
        self.pc.count_wave(hint.then_some(about));
    }

    /// Thread `t`'s submission made request `r`: the flusher's first request of a wave
    /// carries the wave's victim hint (`begin_wave`), once.
    pub(super) fn give_wave_hint(&mut self, t: u32, r: u32) {
        if matches!(self.threads[t as usize].role, Role::Flusher) {
            let hint = self.flush.take_hint();
            if hint > 0 {
                self.blk.carry_wave_hint(r, hint);
            }
        }
    }

    /// No write-back is due: the work is over and the flusher sleeps.
    fn stop_work(&mut self, t: u32) {
        self.flush.stop_work();
        self.sleep(t, Wait::FlusherIdle, Step::App)
    }

    /// Dirty pages the pass just queued will write (the victimization count of its wave's
    /// hint): a chunk of every queued file, or what the file has dirty if less. Exact unless a
    /// file is dirtied further before the pass reaches it (its chunk can then take more),
    /// pages are under write-back already (skipped), or the pass bails out after
    /// `WRITEBACK_PASS_MAX_NS` and the stop check ends the work.
    fn wave_pages(&self, files: impl Iterator<Item = u32>) -> u64 {
        let chunk = self.chunk_pages();
        files.map(|f| chunk.min(self.pc.file(f).dirty_pages)).sum()
    }

    /// A completion entry reported the device's write buffer at `pct` percent
    /// (`pagecache.adaptive_dirty`): the dirty thresholds may switch sets (`pagecache.rs`). Back
    /// in the low set, flushing resumes (the flusher is kicked); throttled writers whom the
    /// high set's limit lets go are woken.
    pub(super) fn on_buffer_status(&mut self, pct: u8) {
        use crate::pagecache::DirtySet;
        match self.pc.on_buffer_status(pct) {
            Some(DirtySet::Low) => self.kick_flusher(),
            Some(DirtySet::High) if self.flush.has_throttled() && self.pc.below_freerun() => {
                self.wake_throttled();
            }
            Some(DirtySet::High) | None => {}
        }
    }

    /// The run's pages are under write-back: their bio goes to the block layer (plugged).
    pub(super) fn flush_pages_done(&mut self, t: u32) {
        let (file, first, n, class) = self.flush.run();
        self.threads[t as usize].io.wait = false;
        self.submit_writeback_bio(t, file, first, n, class);
    }

    /// fsync in the calling thread: write back the file's dirty pages (plugged, like the
    /// flusher), then wait until none of its pages is under write-back.
    pub(super) fn fsync_next(&mut self, t: u32) {
        let plug_max = self.cfg.blk.plug_max_requests as usize;
        let th = &self.threads[t as usize];
        let file = th.fsync.file;
        let run = if th.blk.plugged() < plug_max && self.pc.file(file).dirty_pages > 0 {
            let max = self.cfg.pagecache.writeback_bio_pages as u64;
            // `None`: the rest is under write-back already (redirtied meanwhile), and the
            // wait below waits for it.
            self.pc.take_dirty_run(file, max)
        } else {
            None
        };
        let th = &self.threads[t as usize];
        if let Some((first, n, class)) = run {
            self.threads[t as usize].fsync.run = (first, n, class);
            let ns = n as u64 * self.cfg.pagecache.writeback_page_ns;
            let ns = self.cost(CostSite::Writeback, ns);
            return self.burst(t, ns, Cat::PageCache, Step::FsyncPages);
        }
        if th.blk.plugged() > 0 {
            return self.unplug(t);
        }
        if self.pc.file(file).writeback_pages > 0 {
            self.flush.add_fsync_waiter(t);
            return self.sleep(t, Wait::Fsync, Step::FsyncDone);
        }
        self.threads[t as usize].fsync.file = NIL;
        self.io_finished(t);
    }

    /// fsync's write-back finished: the system call returns.
    pub(super) fn fsync_done(&mut self, t: u32) {
        self.threads[t as usize].fsync.file = NIL;
        self.io_finished(t)
    }

    /// fsync's run of pages is under write-back: its bio goes to the block layer (plugged).
    pub(super) fn fsync_pages_done(&mut self, t: u32) {
        let th = &self.threads[t as usize];
        let file = th.fsync.file;
        let (first, n, class) = th.fsync.run;
        self.submit_writeback_bio(t, file, first, n, class);
    }

    /// Thread `t` (the flusher, or a thread in fsync) submits the write bio for pages
    /// `[first, first + n)` of `file`, owned by write-back, into its plug; a fresh plug goes to
    /// its core's interrupt queue.
    fn submit_writeback_bio(&mut self, t: u32, file: u32, first: u64, n: u32, class: IoClass) {
        let core = self.core_of(t);
        let base = self.pc.file(file).base_sector;
        let b = self.blk.new_bio(
            IoOp::Write,
            class,
            base + first * SECTORS_PER_PAGE,
            n * SECTORS_PER_PAGE as u32,
            BioOwner::Writeback {
                file,
                first_page: first,
                pages: n,
            },
        );
        let th = &mut self.threads[t as usize];
        if th.blk.plugged() == 0 {
            th.io.hctx = self.blk.hctx_of(core, QueueKind::Interrupt);
        }
        th.blk.begin_batch();
        th.blk.add_to_batch(b);
        self.submission_next(t);
    }

    /// A write-back bio completed: its pages are clean; fsync callers whose file has nothing
    /// left under write-back and, once below the freerun point, throttled writers wake.
    pub(super) fn writeback_end(&mut self, file: u32, first_page: u64, pages: u32, class: IoClass) {
        self.pc.end_writeback(file, first_page, pages, class);
        if self.pc.take_writeback_blocked() {
            self.kick_flusher();
        }
        if self.flush.has_fsync_waiters() && self.pc.file(file).writeback_pages == 0 {
            self.with_scratch(|host, woken| {
                let threads = &host.threads;
                host.flush
                    .release_fsync_waiters(|w| threads[w as usize].fsync.file == file, woken);
                for &w in woken.iter() {
                    host.wake(w);
                }
            });
        }
        if self.flush.has_throttled() && self.pc.below_freerun() {
            self.wake_throttled();
        }
    }

    /// Wakes every writer throttled on the dirty limit, in the order they blocked.
    fn wake_throttled(&mut self) {
        self.with_scratch(|host, woken| {
            host.flush.release_throttled(woken);
            for &w in woken.iter() {
                host.wake(w);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use engine::{IoOp, SimTime};

    use crate::config::HostConfig;
    use crate::machine::Host;
    use crate::testing::{fio_process, FixedLatencyDevice};
    use crate::SECTORS_PER_PAGE;

    /// A buffered writer dirties 16 pages (far below `dirty_background_ratio`) and exits: the
    /// periodic flush writes them back at its first wake-up after they are `dirty_expire` old,
    /// and not at any earlier wake-up.
    #[test]
    fn expired_dirty_pages_are_written_back_by_the_periodic_flush_and_not_before() {
        const EXPIRE_NS: u64 = 200_000_000;
        const INTERVAL_NS: u64 = 50_000_000;
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.pagecache.dirty_expire_ns = EXPIRE_NS;
        cfg.pagecache.dirty_writeback_interval_ns = INTERVAL_NS;
        let job = "[w]\nioengine=psync\ndirect=0\nbs=4k\nrw=write\nsize=64k\n";
        let procs = vec![fio_process(job, &cfg)];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(400), 1 << 40).unwrap();
        let mut dev = FixedLatencyDevice::new(&host, 10_000);

        dev.run(&mut host, Some(SimTime::from_ms(1)));
        let pc = host.pagecache_stats();
        assert_eq!(pc.throughput.pages_dirtied, 16, "{pc:?}");
        assert_eq!(pc.dirty_pages, 16);
        assert!(
            pc.dirty_pages * 100 < pc.capacity_pages,
            "well under the 3 % background threshold"
        );
        let dirtied_at = host.pc.file(0).dirtied_at.expect("the file is dirty");
        assert!(dirtied_at < SimTime::from_ms(1));

        // Every wake-up up to and including the one at 200 ms finds the data younger than
        // dirty_expire: nothing is written.
        dev.run(&mut host, Some(SimTime(EXPIRE_NS + 1)));
        assert!(dev.commands.is_empty(), "{:?}", dev.commands);
        let pc = host.pagecache_stats();
        assert_eq!((pc.dirty_pages, pc.throughput.pages_written_back), (16, 0));
        assert_eq!(pc.writeback_waves, 0);

        // The 250 ms wake-up finds it expired and writes all of it back.
        dev.run(&mut host, None);
        let first = dev
            .commands
            .first()
            .expect("the expired pages were written");
        let tick = SimTime(EXPIRE_NS + INTERVAL_NS);
        assert!(
            first.at >= tick && first.at < tick + 1_000_000,
            "write-back at {} ns",
            first.at.as_ns()
        );
        assert!(dev.commands.iter().all(|c| c.op == IoOp::Write));
        let sectors: u64 = dev.commands.iter().map(|c| c.sectors as u64).sum();
        assert_eq!(sectors, 16 * SECTORS_PER_PAGE);
        let report = host.finish().unwrap();
        let pc = &report.pagecache;
        assert_eq!((pc.dirty_pages, pc.throughput.pages_written_back), (0, 16));
        assert_eq!(pc.writeback_waves, 1);
    }

    /// A periodic write-back of two expired files (1,536 and 512 dirty pages; chunk 1,024):
    /// the work makes two passes, each a wave whose hint, on its first command, is exactly the
    /// pages the wave then writes — 1,024 + 512, then the 512 left of the larger file.
    #[test]
    fn each_wave_is_a_pass_of_a_chunk_per_file_and_its_hint_counts_exactly_what_it_writes() {
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.pagecache.memory_bytes = 512 << 20;
        cfg.pagecache.reserved_bytes = 128 << 20; // 98,304 pages: limit 4,915, chunk 1,024
        cfg.pagecache.victim_hint = crate::config::Switch::On;
        cfg.pagecache.dirty_expire_ns = 200_000_000;
        cfg.pagecache.dirty_writeback_interval_ns = 50_000_000;
        let a = "[a]\nioengine=psync\ndirect=0\nbs=256k\nrw=write\nsize=6m\n";
        let b = "[b]\nioengine=psync\ndirect=0\nbs=256k\nrw=write\nsize=2m\n";
        let mut second = fio_process(b, &cfg);
        second.name = "b".into();
        second.start = SimTime::from_ms(1);
        let procs = vec![fio_process(a, &cfg), second];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(400), 1 << 40).unwrap();
        assert_eq!(host.pc.writeback_chunk_pages(1_024), 1_024);
        let mut dev = FixedLatencyDevice::new(&host, 10_000);
        dev.run(&mut host, None);

        // Waves, in command order: each hinted command opens one; the pages up to the next.
        let mut waves: Vec<(u64, u64)> = Vec::new();
        for c in dev.commands.iter().filter(|c| c.op == IoOp::Write) {
            if c.wave_pages > 0 {
                waves.push((c.wave_pages as u64, 0));
            }
            let wave = waves
                .last_mut()
                .expect("a write-back command before any hint");
            wave.1 += c.sectors as u64 / SECTORS_PER_PAGE;
        }
        assert_eq!(
            waves,
            [(1_536, 1_536), (512, 512)],
            "(hinted, written) per wave"
        );
        let first = dev.commands.first().unwrap().at;
        assert!(
            first >= SimTime::from_ms(250),
            "periodic, not background: {first:?}"
        );
        let pc = host.finish().unwrap().pagecache;
        assert_eq!(pc.writeback_waves, 2);
        assert_eq!(
            (pc.writeback_wave_pages, pc.writeback_hinted_pages),
            (2_048, 2_048)
        );
    }

    /// Background write-back stops only between passes: a writer that dirties 4,096 pages
    /// and stops (background threshold 2,949, chunk 1,024) is written down to 2,048 — two
    /// whole chunks, not the 1,147 pages that cross the threshold — in waves of 1,024.
    #[test]
    fn background_write_back_overshoots_the_threshold_by_whole_chunks() {
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.pagecache.memory_bytes = 512 << 20;
        cfg.pagecache.reserved_bytes = 128 << 20;
        cfg.pagecache.victim_hint = crate::config::Switch::On;
        let job = "[w]\nioengine=psync\ndirect=0\nbs=4m\nrw=write\nsize=16m\n";
        let procs = vec![fio_process(job, &cfg)];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(100), 1 << 40).unwrap();
        let bg = host.pc.background_threshold_pages();
        assert_eq!(bg, 2_949);
        let mut dev = FixedLatencyDevice::new(&host, 10_000);
        dev.run(&mut host, None);
        let pc = host.finish().unwrap().pagecache;
        assert_eq!(pc.throughput.pages_dirtied, 4_096);
        assert_eq!(pc.dirty_pages, 2_048, "written down by whole chunks");
        assert_eq!(pc.writeback_wave_pages, 2_048);
        assert_eq!(pc.writeback_waves, 2);
        assert_eq!(pc.writeback_hinted_pages, 2_048);
        let hints: Vec<u32> = dev
            .commands
            .iter()
            .map(|c| c.wave_pages)
            .filter(|&p| p > 0)
            .collect();
        assert_eq!(hints, [1_024, 1_024]);
    }

    /// With `adaptive_dirty` on, a completion reporting the device buffer at 90 % switches to
    /// the high set: the wave stops at the high background threshold (5 %), not the low one
    /// (3 %). A later wave's completion reporting 10 % switches back, and write-back resumes
    /// down to the low threshold.
    #[test]
    fn the_dirty_thresholds_switch_and_switch_back_as_the_buffer_status_crosses() {
        let mut cfg = HostConfig::preset("arm8").unwrap();
        cfg.pagecache.memory_bytes = 512 << 20;
        cfg.pagecache.reserved_bytes = 128 << 20; // 98,304 pages: 2,949 / 4,915 / 9,830
        cfg.pagecache.adaptive_dirty = crate::config::Switch::On;
        let first = "[w]\nioengine=psync\ndirect=0\nbs=64k\nrw=write\nsize=28m\n";
        // Enough to cross the high set's background threshold from a chunk below it.
        let second = "[v]\nioengine=psync\ndirect=0\nbs=64k\nrw=write\nsize=12m\n";
        let mut later = fio_process(second, &cfg);
        later.name = "later".into();
        later.start = SimTime::from_ms(200);
        let procs = vec![fio_process(first, &cfg), later];
        let mut host = Host::new(&cfg, procs, 1, SimTime::from_ms(400), 1 << 40).unwrap();
        let (low_bg, high_bg) = (2_949, 4_915);
        assert_eq!(host.pc.background_threshold_pages(), low_bg);
        let mut dev = FixedLatencyDevice::new(&host, 10_000);

        dev.write_buffer_pct = 90;
        dev.run(&mut host, Some(SimTime::from_ms(150)));
        let pc = host.pagecache_stats();
        let a = pc.adaptive_dirty.clone().unwrap();
        assert_eq!((a.switches_to_high, a.switches_to_low), (1, 0));
        assert_eq!(host.pc.background_threshold_pages(), high_bg);
        assert_eq!(pc.throughput.pages_dirtied, 7_168);
        // The high set's chunk: 9,830 / 8 + 1,024 rounded down to 2,048 pages.
        let chunk = host.pc.writeback_chunk_pages(1_024);
        assert_eq!(chunk, 2_048);
        assert!(
            pc.dirty_pages <= high_bg && pc.dirty_pages > high_bg - chunk,
            "write-back stopped within a chunk of the high set's threshold: {} dirty",
            pc.dirty_pages
        );

        dev.write_buffer_pct = 10;
        dev.run(&mut host, None);
        let pc = host.pagecache_stats();
        let a = pc.adaptive_dirty.clone().unwrap();
        assert_eq!((a.switches_to_high, a.switches_to_low), (1, 1));
        assert_eq!(host.pc.background_threshold_pages(), low_bg);
        assert!(
            pc.dirty_pages <= low_bg,
            "back in the low set, write-back went down to its threshold: {} dirty",
            pc.dirty_pages
        );
    }
}
