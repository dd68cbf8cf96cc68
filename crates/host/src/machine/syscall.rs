//! The read and write system calls: entry, direct I/O, and the page cache's buffered read and
//! write paths (Linux: `pread`/`pwrite`/`io_submit` → `iomap_dio_rw` for `O_DIRECT`,
//! `filemap_read` and `generic_perform_write` for buffered I/O).
//!
//! ## What it models
//! Every I/O call costs `app.syscall_ns` (entry, exit, VFS) in the caller's context, then:
//! - **Direct**: the range is cut into bios of at most `blk.max_request_bytes` and submitted
//!   (`blk_submit`). A caller that waits and asked for polling (`hipri`, or `nvme.completion`
//!   `polled`/`hybrid` for profiles) uses its core's poll queue; everything else its interrupt
//!   queue.
//! - **Buffered read**: `page_lookup_ns` per page; present pages are hits, pages someone else
//!   is reading are waited for, missing pages become read bios (runs of contiguous missing
//!   pages, split at `max_request_bytes`, inserted locked), and a sequential read adds
//!   read-ahead bios that nobody waits for (`pagecache`). Buffered reads complete by interrupt.
//!   Once the caller's own pages are in, `page_copy_ns` per page copies them out.
//! - **Buffered write**: `page_lookup_ns + page_copy_ns + page_dirty_ns` per page and
//!   `page_alloc_ns` per page not yet cached, then the dirty limits (`balance_dirty_pages`):
//!   above the background threshold the flusher is woken, above the foreground one the writer
//!   blocks until write-back brings dirty pages down (`writeback`). A process with
//!   `fsync_every_writes` calls fsync after every that many writes.
//!
//! Worked example (arm8): a 16 KiB buffered write of 4 pages, one of them not cached yet,
//! below the dirty thresholds: 1 µs (syscall) + 4 × (100 + 500 + 300) ns + 300 ns = 4.9 µs of
//! CPU time and no I/O; the pages reach the device later, by write-back.
//!
//! ## What it leaves out
//! Vectored I/O, partial-page buffered writes (whole pages only), `O_SYNC`/`O_DSYNC`, file
//! metadata (no inode or block-map lookups), direct-I/O alignment beyond 512 bytes, and
//! io_uring's shared submission ring (each asynchronous I/O is one call).
//!
//! Config keys: `app.syscall_ns`, `pagecache.page_*_ns`, `blk.max_request_bytes`,
//! `nvme.completion`.

use engine::{IoClass, IoOp};

use super::{Ev, Host};
use crate::blk::{BioOwner, Blk, QueueKind};
use crate::config::CompletionMode;
use crate::cpu::Cat;
use crate::jitter::CostSite;
use crate::pagecache::{Lookup, PageCache, NIL};
use crate::task::{AfterIo, IoCtx, Path, Role, Step, Thread, Wait};
use crate::{PAGE_BYTES, SECTORS_PER_PAGE};

impl Host {
    #[allow(clippy::too_many_arguments)]
    /// Thread `t` enters a read or write system call (`wait`: it blocks until the I/O is done;
    /// `fio_slot`: the asynchronous fio I/O it is, or `NIL`).
    pub(super) fn start_io(
        &mut self,
        t: u32,
        op: IoOp,
        offset_bytes: u64,
        bytes: u64,
        path: Path,
        completion: CompletionMode,
        wait: bool,
        fio_slot: u32,
    ) {
        let now = self.now();
        let th = &mut self.threads[t as usize];
        // Selective completion (`nvme_complete`'s essay): the class decides.
        let completion = match (completion, th.class) {
            (CompletionMode::Selective, IoClass::LatencyCritical) => CompletionMode::Polled,
            (CompletionMode::Selective, IoClass::Throughput) => CompletionMode::Interrupt,
            (c, _) => c,
        };
        // The accelerator polls the CQs in hardware and interrupts: no thread polls.
        let completion = if self.accel.is_some() {
            CompletionMode::Interrupt
        } else {
            completion
        };
        let proc = &mut self.procs[th.proc as usize];
        proc.note_io_call(now);
        let file = proc.file();
        let page = offset_bytes / PAGE_BYTES;
        let end_page = (offset_bytes + bytes).div_ceil(PAGE_BYTES);
        th.io = IoCtx {
            op,
            file,
            offset_bytes,
            bytes,
            page,
            pages: end_page - page,
            path,
            completion,
            hctx: 0,
            started: now,
            wait,
            after: AfterIo::Finish,
            fio_slot,
        };
        let ns = self.cost(CostSite::Syscall, self.cfg.app.syscall_ns);
        self.burst(t, ns, Cat::Syscall, Step::IoEnter);
    }

    /// Past the system call's entry: direct I/O builds its bios; buffered I/O looks up (and,
    /// for writes, copies and dirties) its pages.
    pub(super) fn io_enter(&mut self, t: u32) {
        let io = self.threads[t as usize].io;
        match (io.path, io.op) {
            (Path::Direct, _) => self.direct_bios(t),
            (Path::Buffered, IoOp::Read) => {
                let ns = io.pages * self.cfg.pagecache.page_lookup_ns;
                let ns = self.cost(CostSite::PageCache, ns);
                self.burst(t, ns, Cat::PageCache, Step::PcRead);
            }
            (Path::Buffered, _) => {
                let missing = (io.page..io.page + io.pages)
                    .filter(|&p| !self.pc.present(io.file, p))
                    .count() as u64;
                let c = &self.cfg.pagecache;
                let ns = io.pages * (c.page_lookup_ns + c.page_copy_ns + c.page_dirty_ns)
                    + missing * c.page_alloc_ns;
                let ns = self.cost(CostSite::PageCache, ns);
                self.burst(t, ns, Cat::PageCache, Step::PcWrite);
            }
        }
    }

    /// Direct I/O: the range becomes bios of at most `max_request_bytes` for submission.
    fn direct_bios(&mut self, t: u32) {
        let core = self.core_of(t);
        let max = self.cfg.blk.max_request_bytes;
        let th = &mut self.threads[t as usize];
        let io = th.io;
        let kind = if io.wait && io.completion != CompletionMode::Interrupt {
            QueueKind::Poll
        } else {
            QueueKind::Interrupt
        };
        th.io.hctx = self.blk.hctx_of(core, kind);
        th.blk.begin_batch();
        let base = self.pc.file(io.file).base_sector;
        let owner = if io.fio_slot != NIL {
            BioOwner::FioAsync {
                thread: t,
                slot: io.fio_slot,
            }
        } else {
            BioOwner::Direct { thread: t }
        };
        let mut off = 0;
        let mut count = 0;
        while off < io.bytes {
            let len = (io.bytes - off).min(max);
            let sector = base + (io.offset_bytes + off) / 512;
            let sectors = len.div_ceil(512) as u32;
            let b = self.blk.new_bio(io.op, th.class, sector, sectors, owner);
            th.blk.add_to_batch(b);
            off += len;
            count += 1;
        }
        if io.fio_slot != NIL {
            let Role::Fio(f) = &mut th.role else {
                unreachable!()
            };
            f.slots[io.fio_slot as usize].pending = count;
        } else {
            th.pending += count;
        }
        self.submission_next(t);
    }

    /// Buffered read after the page lookups: count hits, wait for pages in flight, read the
    /// missing pages and the read-ahead window.
    pub(super) fn pc_read(&mut self, t: u32) {
        let core = self.core_of(t);
        let max_pages = self.cfg.blk.max_request_bytes / PAGE_BYTES;
        let th = &mut self.threads[t as usize];
        let io = th.io;
        let class = th.class;
        let (ra_first, ra_pages) = self.pc.read_ahead(&mut th.ra, io.file, io.page, io.pages);
        th.blk.begin_batch();
        let base = self.pc.file(io.file).base_sector;
        let mut hits = 0;
        let mut misses = 0;
        let mut last_waited = NIL;
        let mut run: Option<(u64, u64)> = None;
        // Creates the bio for a run of missing pages, inserting them locked.
        let flush = |run: &mut Option<(u64, u64)>,
                     th: &mut Thread,
                     pc: &mut PageCache,
                     blk: &mut Blk,
                     waiter: bool| {
            if let Some((start, n)) = run.take() {
                let b = blk.new_bio(
                    IoOp::Read,
                    class,
                    base + start * SECTORS_PER_PAGE,
                    (n * SECTORS_PER_PAGE) as u32,
                    BioOwner::PageRead {
                        file: io.file,
                        first_page: start,
                        pages: n as u32,
                    },
                );
                for q in start..start + n {
                    pc.insert_reading(io.file, q, b);
                }
                if waiter {
                    blk.add_waiter(b, t);
                    th.pending += 1;
                }
                th.blk.add_to_batch(b);
            }
        };
        for p in io.page..io.page + io.pages {
            match self.pc.lookup(io.file, p) {
                Lookup::Hit => {
                    flush(&mut run, th, &mut self.pc, &mut self.blk, true);
                    hits += 1;
                }
                Lookup::InFlight { bio } => {
                    flush(&mut run, th, &mut self.pc, &mut self.blk, true);
                    if bio != last_waited {
                        self.blk.add_waiter(bio, t);
                        th.pending += 1;
                        last_waited = bio;
                    }
                    hits += 1;
                }
                Lookup::Miss => {
                    misses += 1;
                    run = match run {
                        Some((s, n)) if n < max_pages => Some((s, n + 1)),
                        Some(_) => {
                            flush(&mut run, th, &mut self.pc, &mut self.blk, true);
                            Some((p, 1))
                        }
                        None => Some((p, 1)),
                    };
                }
            }
        }
        flush(&mut run, th, &mut self.pc, &mut self.blk, true);
        let mut ahead = 0;
        for p in ra_first..ra_first + ra_pages {
            if self.pc.present(io.file, p) {
                flush(&mut run, th, &mut self.pc, &mut self.blk, false);
                continue;
            }
            ahead += 1;
            run = match run {
                Some((s, n)) if n < max_pages => Some((s, n + 1)),
                Some(_) => {
                    flush(&mut run, th, &mut self.pc, &mut self.blk, false);
                    Some((p, 1))
                }
                None => Some((p, 1)),
            };
        }
        flush(&mut run, th, &mut self.pc, &mut self.blk, false);
        self.pc.count_read(class, hits, misses, ahead);
        th.io.after = AfterIo::Copy;
        th.io.completion = CompletionMode::Interrupt;
        if th.blk.has_batch() {
            th.io.hctx = self.blk.hctx_of(core, QueueKind::Interrupt);
            self.submission_next(t);
        } else if th.pending > 0 {
            self.sleep(t, Wait::Io, Step::IoWaitDone);
        } else {
            self.after_io(t);
        }
    }

    /// Buffered write after copying: the pages are dirty; wake the flusher or throttle the
    /// writer if the dirty limits say so.
    pub(super) fn pc_write(&mut self, t: u32) {
        let now = self.now();
        let th = &self.threads[t as usize];
        let (io, class) = (th.io, th.class);
        for p in io.page..io.page + io.pages {
            self.pc.dirty_page(now, io.file, p, class);
        }
        if self.pc.over_background() {
            self.kick_flusher();
        }
        if self.pc.over_limit() {
            self.pc.count_throttled_write(class);
            self.throttle_writer(t);
            return self.sleep(t, Wait::Throttle, Step::ThrottleDone);
        }
        self.write_done(t);
    }

    /// A buffered write is done (and not throttled): fsync if the process asks for it.
    pub(super) fn write_done(&mut self, t: u32) {
        let th = &mut self.threads[t as usize];
        th.app.writes += 1;
        let every = match th.proc {
            u32::MAX => 0,
            p => self.procs[p as usize].spec().fsync_every_writes as u64,
        };
        if every > 0 && th.app.writes.is_multiple_of(every) {
            th.fsync.file = th.io.file;
            self.pc.count_fsync();
            let ns = self.cost(CostSite::Syscall, self.cfg.app.syscall_ns);
            return self.burst(t, ns, Cat::Syscall, Step::FsyncStart);
        }
        self.io_finished(t);
    }

    /// After the thread's bios completed: copy out (buffered read) or finish.
    pub(super) fn after_io(&mut self, t: u32) {
        let io = self.threads[t as usize].io;
        match io.after {
            AfterIo::Copy => {
                let ns = io.pages * self.cfg.pagecache.page_copy_ns;
                let ns = self.cost(CostSite::PageCache, ns);
                self.burst(t, ns, Cat::PageCache, Step::PcCopy);
            }
            AfterIo::Finish => self.io_finished(t),
        }
    }

    /// The system call returns to the application.
    pub(super) fn io_finished(&mut self, t: u32) {
        let th = &self.threads[t as usize];
        let latency = self.now() - th.io.started;
        let (p, op, bytes, started) = (th.proc as usize, th.io.op, th.io.bytes, th.io.started);
        if let Role::Fio(_) = th.role {
            self.fio_record(t, op == IoOp::Read, bytes, started, self.now());
            let think = self.fio(t).thinktime_ns;
            if think > 0 && !self.stopping() {
                self.schedule(self.now() + think, Ev::Timer { thread: t });
                return self.sleep(t, Wait::Timer, Step::App);
            }
            return self.fio_next(t);
        }
        let proc = &mut self.procs[p];
        proc.count_io(latency);
        let class = proc.spec().class;
        self.log_io(class, bytes, latency);
        self.app_next(t);
    }

    /// Page-read bio `b` completed: its pages are up to date and unlocked; every thread
    /// waiting for them has one wait less.
    pub(super) fn page_read_end(&mut self, b: u32, file: u32, first_page: u64, pages: u32) {
        self.pc.end_read(file, first_page, pages, b);
        self.with_scratch(|host, waiters| {
            host.blk.take_waiters(b, waiters);
            for &w in waiters.iter() {
                host.io_waiter_done(w);
            }
        });
    }
}
