//! A worker's ring on a file volume: requests wait in slots, go to the kernel in the order
//! the volume's rules allow, and come back as completions.
//!
//! # Design
//! `submit` puts a request in a slot (indexed by the SQE's `user_data`) and queues it;
//! `commit`, at the end of the worker's step, moves queued requests into the ring
//! ([`RING_ENTRIES`] at most in the kernel): contiguous buffered writes as one write run
//! (`runs.rs`), a request behind an unfinished overlapping one held back (*Order of
//! overlapping requests* in `../file.rs`), a write routed to a descriptor kind with its
//! stretches claimed (`pages.rs`). The ring is a [`sys::Ring`]: a request's buffer goes into
//! the ring with its SQE and comes back with its CQE, so a slot in the kernel holds no buffer,
//! only the request's length. A CQE finishes its request, or queues it again (a short
//! transfer, a refused partial-block write, a WRITE_ZEROES fallback, a FUA WRITE_ZEROES's
//! flush, a write run cut short).
//!
//! The ring is the backend's own, or the worker's socket ring it joined (*One ring per worker*
//! in `../file.rs`): `fill_ring` pushes into either through [`HostRing`]; its own it submits
//! at `commit` and reaps at `poll`, the socket ring's the worker enters and reaps, handing the
//! completions back ([`RingGuest::complete`]).
//!
//! A READ of a volume with registered buffers goes in as `ReadFixed` into one of them
//! ([`FileBackend::fixed_for`]: the buffer it came with when that is one, else a swap, else a
//! counted plain `Read`).
//!
//! Worked example: a 4 KiB READ at 8192, aligned for the direct descriptor, goes in as one
//! `Read` of 4096 bytes at 8192 carrying its buffer; a CQE of 1024 (a short read) gives the
//! buffer back to the slot with 1024 bytes done, and the slot goes in again as a `Read` of the
//! last 3072 bytes at 9216, through the buffered descriptor (a continuation is no longer
//! aligned); a CQE of 3072 completes it.
//!
//! # What it leaves out
//! Which descriptor and what alignment (`direct.rs`), the run rule (`runs.rs`), the stretch
//! rule (`pages.rs`): this module applies them.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use engine::IoClass;

use super::super::interface::{
    Backend, Completion, Fua, HostRing, RingGuest, StorageError, StorageOp, Submitted,
};
use super::direct::WriteRoute;
use super::pages::Via;
use super::runs::WRITE_RUN_MAX_BYTES;
use super::runs::{self, split_run_result, MemberOutcome, WriteRun, RUN_USER_DATA_BIT};
use super::volume::{FileVolume, WritePathCounters};
use crate::buf::{FixedBufs, IoBuf};
use crate::sys::{self, Sqe};

/// A request's buffer, as the ring reads or writes it: its first `len` bytes (the
/// allocation behind them is on the heap, so it stays put while the ring holds the buffer).
impl sys::IoBytes for IoBuf {
    fn io_bytes(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

/// The file backend's own ring is a host too: the same code fills either.
impl HostRing for sys::Ring<IoBuf> {
    fn push(&mut self, user_data: u64, sqe: Sqe<IoBuf>) -> Result<(), Sqe<IoBuf>> {
        sys::Ring::push(self, user_data, sqe)
    }

    fn is_full(&mut self) -> bool {
        sys::Ring::is_full(self)
    }

    fn submit(&mut self) -> std::io::Result<usize> {
        sys::Ring::submit(self)
    }

    fn register_buffers(&mut self, home: Arc<dyn sys::FixedRegions>) -> std::io::Result<()> {
        sys::Ring::register_buffers(self, home)
    }
}

/// Submission queue entries per worker ring; at most this many operations are in the kernel at
/// once per worker and volume (more wait in a queue in user space).
pub const RING_ENTRIES: u32 = 256;
/// waits before it is offered again (its own worker's completions retry it sooner).
pub const HELD_WRITE_RETRY_NS: u64 = 20_000;

/// Where a partial-block write stands with the file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PartialBlock {
    /// Not a partial-block write, or not yet tried.
    Untried,
    /// In the kernel as an `RWF_NOWAIT` direct write.
    Offered,
    /// The file system refused it without waiting: the page cache takes it.
    Refused,
}

/// An operation in flight or waiting for ring space.
struct Slot {
    tag: u64,
    op: StorageOp,
    /// The request's buffer; `None` while the ring holds it (its SQE is in the kernel).
    buf: Option<IoBuf>,
    /// The buffer's length (a READ's or WRITE's bytes).
    len_bytes: usize,
    /// Bytes already transferred (short reads/writes continue from here).
    done_bytes: usize,
    /// WRITE_ZEROES tried ZERO_RANGE and fell back to PUNCH_HOLE.
    zero_fallback: bool,
    /// Part of a write run in the kernel (its SQE's `user_data` is the run's, not the slot's).
    in_run: bool,
    /// Never merged into a write run again (a run it was in failed or stopped short).
    alone: bool,
    /// A partial-block write's standing with the file system.
    partial: PartialBlock,
    /// The route its SQE in the kernel took (chosen just before, see *Coherence*).
    route: Option<WriteRoute>,
    /// The stretches its write in the kernel holds: `(offset, len, via)`.
    claim: Option<(u64, u64, Via)>,
    /// Arrival order on this ring (*Order of overlapping requests*).
    seq: u64,
    /// Counted in `unfinished_changes` until it finishes (a FUA WRITE_ZEROES turns into a
    /// flush on the way, so its op no longer says).
    changes: bool,
}

impl Slot {
    /// The bytes the request covers and whether it changes them (`None`: a flush, which
    /// covers no range).
    fn extent(&self) -> Option<(u64, u64, bool)> {
        match self.op {
            StorageOp::Read { offset_bytes } => {
                Some((offset_bytes, offset_bytes + self.len_bytes as u64, false))
            }
            StorageOp::Write { offset_bytes, .. } => {
                Some((offset_bytes, offset_bytes + self.len_bytes as u64, true))
            }
            StorageOp::Trim { .. } | StorageOp::WriteZeroes { .. } => self
                .op
                .range_bytes()
                .map(|(offset_bytes, len_bytes)| (offset_bytes, offset_bytes + len_bytes, true)),
            StorageOp::Flush => None,
        }
    }
}

/// SQE counters (tests read them; the merge ratio is `writes_in_runs / runs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStats {
    /// SQEs pushed for reads, writes, flushes, range ops and write runs.
    pub sqes: u64,
    /// Write runs pushed, and the writes they carried.
    pub runs: u64,
    pub writes_in_runs: u64,
}

/// A worker's ring on a file volume.
pub struct FileBackend {
    volume: Arc<FileVolume>,
    /// Its own ring; `None` once its operations go into the worker's socket ring
    /// ([`RingGuest::join`], *One ring per worker* in `../file.rs`).
    ring: Option<sys::Ring<IoBuf>>,
    /// Completions reaped, before their slots take them.
    cqes: Vec<sys::Cqe<IoBuf>>,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<usize>,
    /// Slot indexes waiting for ring space.
    pub(super) waiting: VecDeque<usize>,
    /// Write runs in the kernel, by index (`None`: free).
    runs: Vec<Option<WriteRun>>,
    free_runs: Vec<usize>,
    /// SQEs in the kernel or pushed and not yet submitted (a write run counts once).
    pub(super) in_kernel: usize,
    queued_since_commit: usize,
    stats: FileStats,
    /// When writes held back by another worker's writes are offered again (None: none held).
    retry_at_ns: Option<u64>,
    /// The next request's arrival number.
    next_seq: u64,
    /// Unfinished requests that change data (writes, trims, zeroing): while there are none, a
    /// read needs no order check.
    pub(super) unfinished_changes: usize,
    /// The volume's registered buffers, when this ring registered them (*Registered buffers*
    /// in `../file.rs`).
    fixed: Option<Arc<FixedBufs>>,
}

impl FileBackend {
    pub(super) fn with_ring(volume: Arc<FileVolume>, ring: sys::Ring<IoBuf>) -> FileBackend {
        FileBackend {
            volume,
            ring: Some(ring),
            cqes: Vec::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            runs: Vec::new(),
            free_runs: Vec::new(),
            in_kernel: 0,
            queued_since_commit: 0,
            stats: FileStats::default(),
            retry_at_ns: None,
            next_seq: 0,
            unfinished_changes: 0,
            fixed: None,
        }
    }

    /// Registers the volume's buffers (if it has them) with its own ring.
    pub(super) fn register_fixed(&mut self) {
        if let Some(mut ring) = self.ring.take() {
            self.register_fixed_on(&mut ring);
            self.ring = Some(ring);
        }
    }

    /// Registers the volume's buffers (if it has them) with `host`, so reads go in with
    /// `READ_FIXED`; where the kernel refuses (the locked-memory limit, or the ring has
    /// another volume's buffers registered), reads stay plain.
    fn register_fixed_on(&mut self, host: &mut dyn HostRing) {
        self.fixed = None;
        let Some(home) = self.volume.fixed.clone() else {
            return;
        };
        match host.register_buffers(home.clone()) {
            Ok(()) => self.fixed = Some(home),
            Err(e) => tracing::warn!(
                volume = %self.volume.name,
                buffers = home.count(),
                error = %e,
                "registering the file volume's read buffers was refused: plain reads"
            ),
        }
    }

    /// Whether this ring reads into registered buffers.
    pub fn reads_fixed(&self) -> bool {
        self.fixed.is_some()
    }

    /// The registered buffer a read goes in with, swapping `buf` for one when it is another
    /// buffer of the home's size class (an ordinary one is freed, another volume's registered
    /// one goes back to its home: registered ones stay in the worker's pool from then on);
    /// `None`: a plain read. `first`: the read's first
    /// SQE, the one counted.
    fn fixed_for(home: &Arc<FixedBufs>, buf: &mut IoBuf, first: bool) -> Option<u16> {
        if let Some(index) = buf.fixed_index(home) {
            if first {
                home.count_read(true);
            }
            return Some(index);
        }
        if !first || buf.capacity_bytes() != home.buf_bytes() {
            return None;
        }
        let Some(fixed) = home.take(buf.len()) else {
            home.count_read(false);
            return None;
        };
        *buf = fixed;
        home.count_read(true);
        buf.fixed_index(home)
    }

    /// Whether slot `index` may go to the kernel now (*Order of overlapping requests*): no
    /// request that arrived before it, overlaps it and where one of the two changes data is
    /// unfinished.
    fn in_order(&self, index: usize) -> bool {
        let slot = self.slots[index].as_ref().expect("waiting slot exists");
        let Some((start, end, changes)) = slot.extent() else {
            return true;
        };
        if !changes && self.unfinished_changes == 0 {
            return true;
        }
        !self.slots.iter().flatten().any(|earlier| {
            earlier.seq < slot.seq
                && earlier
                    .extent()
                    .is_some_and(|(s, e, c)| (changes || c) && s < end && start < e)
        })
    }

    /// What this backend has pushed to its ring so far.
    pub fn stats(&self) -> FileStats {
        self.stats
    }

    /// The write slot `index` as a write-run member: `(offset, len, fua)` when it is a whole
    /// buffered write that may be merged.
    fn run_candidate(&self, index: usize) -> Option<(u64, usize, Fua)> {
        let slot = self.slots[index].as_ref()?;
        let StorageOp::Write { offset_bytes, fua } = slot.op else {
            return None;
        };
        let len = slot.len_bytes;
        if slot.alone || slot.done_bytes != 0 || len == 0 || len > WRITE_RUN_MAX_BYTES {
            return None;
        }
        (Self::route_of(&self.volume, slot) == WriteRoute::Buffered).then_some((
            offset_bytes,
            len,
            fua,
        ))
    }

    /// The route of write slot `slot` as it goes in now: a continuation, or a partial-block
    /// write the file system refused, goes through the page cache.
    fn route_of(volume: &FileVolume, slot: &Slot) -> WriteRoute {
        let StorageOp::Write { offset_bytes, .. } = slot.op else {
            unreachable!("routes are for writes");
        };
        if slot.done_bytes != 0 || slot.partial == PartialBlock::Refused {
            return WriteRoute::Buffered;
        }
        volume.write_route(offset_bytes, slot.len_bytes)
    }

    /// How many writes from the front of `waiting` continue one another (at least 1 if the
    /// front is a candidate, 0 if it is not).
    fn run_length(&self) -> usize {
        let candidate = |i: usize| self.run_candidate(i).filter(|_| self.in_order(i));
        runs::run_length(self.waiting.iter().map(|&i| candidate(i)))
    }

    /// Takes the first `n` (≥ 2) waiting writes, and their buffers, into a write run and
    /// builds its SQE.
    fn build_run_sqe(&mut self, n: usize) -> (u64, Sqe<IoBuf>) {
        debug_assert!(n >= 2 && n <= self.waiting.len());
        let mut members = Vec::with_capacity(n);
        let mut bufs = Vec::with_capacity(n);
        let mut run_bytes = 0usize;
        let mut first: Option<(u64, Fua)> = None;
        for _ in 0..n {
            let index = self.waiting.pop_front().expect("run member is waiting");
            let slot = self.slots[index].as_mut().expect("run member exists");
            let StorageOp::Write { offset_bytes, fua } = slot.op else {
                unreachable!("write runs hold writes only");
            };
            first.get_or_insert((offset_bytes, fua));
            slot.in_run = true;
            run_bytes += slot.len_bytes;
            bufs.push(slot.buf.take().expect("a waiting write holds its buffer"));
            members.push(index);
        }
        let (offset_bytes, fua) = first.expect("n >= 2");
        let run = WriteRun {
            members,
            claim: (offset_bytes, run_bytes as u64),
        };
        let ri = store(&mut self.runs, &mut self.free_runs, run);
        let rw_flags = if fua == Fua::Yes { libc::RWF_DSYNC } else { 0 };
        self.stats.runs += 1;
        self.stats.writes_in_runs += n as u64;
        let sqe = Sqe::Writev {
            fd: self.volume.buffered.as_raw_fd(),
            offset_bytes,
            bufs,
            rw_flags,
        };
        (RUN_USER_DATA_BIT | ri as u64, sqe)
    }

    /// A write run's CQE: members the kernel wrote complete; the one it stopped in continues
    /// alone from there; the rest (all of them when the run failed) are retried alone.
    fn on_run_cqe(&mut self, ri: usize, res: i32, bufs: Vec<IoBuf>, out: &mut Vec<Completion>) {
        let Some(run) = self.runs.get_mut(ri).and_then(Option::take) else {
            debug_assert!(false, "CQE for an empty write run {ri}");
            return;
        };
        self.free_runs.push(ri);
        let (at, len) = run.claim;
        self.volume.pages.release(at, len, Via::Buffered);
        assert_eq!(
            bufs.len(),
            run.members.len(),
            "a run gives back each member's buffer"
        );
        let lens: Vec<usize> = run
            .members
            .iter()
            .map(|&i| self.slots[i].as_ref().expect("run member exists").len_bytes)
            .collect();
        let outcome = split_run_result(res, &lens);
        for ((k, index), buf) in run.members.into_iter().enumerate().zip(bufs) {
            let slot = self.slots[index].as_mut().expect("run member exists");
            slot.in_run = false;
            slot.buf = Some(buf);
            match outcome[k] {
                MemberOutcome::Written => self.finish(index, Ok(()), out),
                MemberOutcome::Retry { done_bytes } => {
                    slot.done_bytes = done_bytes;
                    slot.alone = true;
                    self.waiting.push_back(index);
                }
            }
        }
    }

    /// The descriptor a read goes through: direct when aligned to what `O_DIRECT` accepts
    /// (a partial-block direct read costs no read-modify-write).
    fn read_fd(volume: &FileVolume, offset_bytes: u64, len_bytes: usize) -> RawFd {
        match &volume.direct {
            Some(d)
                if offset_bytes.is_multiple_of(d.align_bytes)
                    && (len_bytes as u64).is_multiple_of(d.align_bytes) =>
            {
                d.file.as_raw_fd()
            }
            _ => volume.buffered.as_raw_fd(),
        }
    }

    /// The SQE of slot `index`'s next operation; a READ or WRITE takes the slot's buffer with
    /// it, until its CQE gives it back.
    fn build_sqe(&mut self, index: usize) -> (u64, Sqe<IoBuf>) {
        let volume = &*self.volume;
        let slot = self.slots[index].as_mut().expect("queued slot exists");
        let user_data = index as u64;
        let sqe = match slot.op {
            StorageOp::Read { offset_bytes } => {
                let at = offset_bytes + slot.done_bytes as u64;
                let rest = slot.len_bytes - slot.done_bytes;
                let fd = if slot.done_bytes == 0 {
                    Self::read_fd(volume, at, rest)
                } else {
                    volume.buffered.as_raw_fd()
                };
                let mut buf = slot.buf.take().expect("a waiting read holds its buffer");
                let from = slot.done_bytes;
                let fixed = self.fixed.as_ref();
                match fixed.and_then(|home| Self::fixed_for(home, &mut buf, from == 0)) {
                    Some(index) => Sqe::ReadFixed {
                        fd,
                        offset_bytes: at,
                        buf,
                        from,
                        index,
                    },
                    None => Sqe::Read {
                        fd,
                        offset_bytes: at,
                        buf,
                        from,
                    },
                }
            }
            StorageOp::Write { offset_bytes, fua } => {
                let at = offset_bytes + slot.done_bytes as u64;
                let mut flags = if fua == Fua::Yes { libc::RWF_DSYNC } else { 0 };
                let route = slot.route.unwrap_or_else(|| Self::route_of(volume, slot));
                let fd = match (route, &volume.direct) {
                    (WriteRoute::Direct, Some(d)) => d.file.as_raw_fd(),
                    (WriteRoute::DirectNoWait, Some(d)) => {
                        slot.partial = PartialBlock::Offered;
                        flags |= libc::RWF_NOWAIT;
                        d.file.as_raw_fd()
                    }
                    _ => volume.buffered.as_raw_fd(),
                };
                Sqe::Write {
                    fd,
                    offset_bytes: at,
                    buf: slot.buf.take().expect("a waiting write holds its buffer"),
                    from: slot.done_bytes,
                    rw_flags: flags,
                }
            }
            StorageOp::Flush => Sqe::Fdatasync {
                fd: volume.buffered.as_raw_fd(),
            },
            StorageOp::Trim {
                offset_bytes,
                len_bytes,
            } => Sqe::Fallocate {
                fd: volume.buffered.as_raw_fd(),
                offset_bytes,
                len_bytes,
                mode: libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            },
            StorageOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                ..
            } => {
                let mode = if slot.zero_fallback {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                } else {
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
                };
                Sqe::Fallocate {
                    fd: volume.buffered.as_raw_fd(),
                    offset_bytes,
                    len_bytes,
                    mode,
                }
            }
        };
        (user_data, sqe)
    }

    /// Moves waiting operations into `ring`'s submission queue while there is room,
    /// contiguous buffered writes as write runs.
    fn fill_ring(&mut self, ring: &mut dyn HostRing) {
        let mut held = Vec::new();
        // Waiting for an earlier overlapping request: offered again after the next CQE.
        let mut behind = Vec::new();
        while self.in_kernel < RING_ENTRIES as usize && !self.waiting.is_empty() {
            if ring.is_full() {
                // Submit what is there and retry next time.
                if ring.submit().is_err() {
                    break;
                }
                self.queued_since_commit = 0;
                if ring.is_full() {
                    break;
                }
            }
            let (user_data, sqe) = match self.run_length() {
                n if n >= 2 && self.claim_run(n) => self.build_run_sqe(n),
                _ => {
                    let index = self.waiting.pop_front().expect("waiting is not empty");
                    if !self.in_order(index) {
                        behind.push(index);
                        continue;
                    }
                    if !self.route_write(index) {
                        held.push(index);
                        continue;
                    }
                    self.build_sqe(index)
                }
            };
            // The ring holds the buffers until the CQE gives them back (`poll`).
            if ring.push(user_data, sqe).is_err() {
                panic!("the submission queue had room");
            }
            self.stats.sqes += 1;
            self.in_kernel += 1;
            self.queued_since_commit += 1;
        }
        self.retry_at_ns = (!held.is_empty()).then(|| crate::clock::now_ns() + HELD_WRITE_RETRY_NS);
        // Held writes keep their place ahead of the rest (a refused write's retry among them
        // must claim its stretch before newer writes are offered direct).
        for index in held.into_iter().rev() {
            self.waiting.push_front(index);
        }
        self.waiting.extend(behind);
    }

    /// Claims the stretches of the first `n` waiting writes (a run) as buffered.
    fn claim_run(&self, n: usize) -> bool {
        let candidates = self
            .waiting
            .iter()
            .take(n)
            .filter_map(|&i| self.run_candidate(i));
        let (mut start, mut bytes) = (None, 0u64);
        for (at, len, _) in candidates {
            start.get_or_insert(at);
            bytes += len as u64;
        }
        start.is_some_and(|at| self.volume.pages.claim(at, bytes, Via::Buffered))
    }

    /// Chooses the route of write slot `index` for its next SQE and claims its stretches (see
    /// *Coherence*): the preferred route, else the other descriptor where the write allows it.
    /// False: both are taken by writes in the kernel; the write waits. Other ops: true.
    fn route_write(&mut self, index: usize) -> bool {
        let volume = &*self.volume;
        let slot = self.slots[index].as_mut().expect("waiting slot exists");
        let StorageOp::Write { offset_bytes, .. } = slot.op else {
            return true;
        };
        let at = offset_bytes + slot.done_bytes as u64;
        let rest = (slot.len_bytes - slot.done_bytes) as u64;
        let preferred = Self::route_of(volume, slot);
        let direct_ok = volume.direct.as_ref().is_some_and(|d| {
            at.is_multiple_of(d.align_bytes) && rest.is_multiple_of(d.align_bytes)
        });
        // A partial-block write the file system refused never goes direct blocking: that is
        // the serialized read-modify-write the refusal spared; it waits for the stretch's
        // direct writes instead (*Coherence* in `../file.rs`).
        let refused = slot.partial == PartialBlock::Refused;
        let other = match preferred {
            WriteRoute::Buffered => (direct_ok && !refused).then_some(WriteRoute::Direct),
            WriteRoute::Direct | WriteRoute::DirectNoWait => Some(WriteRoute::Buffered),
        };
        let first_try = slot.done_bytes == 0 && slot.partial == PartialBlock::Untried;
        for route in std::iter::once(preferred).chain(other) {
            let via = match route {
                WriteRoute::Buffered => Via::Buffered,
                WriteRoute::Direct | WriteRoute::DirectNoWait => Via::Direct,
            };
            if volume.pages.claim(at, rest, via) {
                slot.route = Some(route);
                slot.claim = Some((at, rest, via));
                let c = &volume.write_paths;
                let counter = match (preferred, route) {
                    _ if !first_try => None,
                    (WriteRoute::Buffered, WriteRoute::Direct) => Some(&c.direct_rerouted),
                    (_, WriteRoute::Direct) => Some(&c.direct_block),
                    (WriteRoute::DirectNoWait, WriteRoute::Buffered) => Some(&c.partial_refused),
                    (_, WriteRoute::Buffered) => Some(&c.buffered),
                    // Counted when the file system has answered (`on_cqe`).
                    (_, WriteRoute::DirectNoWait) => None,
                };
                counter.map(WritePathCounters::bump);
                return true;
            }
        }
        false
    }

    fn finish(
        &mut self,
        index: usize,
        result: Result<(), StorageError>,
        out: &mut Vec<Completion>,
    ) {
        let slot = self.slots[index].take().expect("completed slot exists");
        self.free_slots.push(index);
        if slot.changes {
            self.unfinished_changes -= 1;
        }
        out.push(Completion {
            tag: slot.tag,
            result,
            buf: slot.buf.expect("a finished request has its buffer back"),
            pages: None,
        });
    }

    /// Applies one CQE to its slot: finished, or requeued (short transfer, fallback).
    fn on_cqe(&mut self, index: usize, res: i32, out: &mut Vec<Completion>) {
        let Some(slot) = self.slots[index].as_mut() else {
            debug_assert!(false, "CQE for an empty slot {index}");
            return;
        };
        slot.route = None;
        if let Some((at, len, via)) = slot.claim.take() {
            self.volume.pages.release(at, len, via);
        }
        if slot.partial == PartialBlock::Offered {
            let counters = &self.volume.write_paths;
            // EAGAIN: the file system would have had to wait (not a pure overwrite, or pages
            // of the range cached); EOPNOTSUPP: it takes no RWF_NOWAIT writes at all.
            if res == -libc::EAGAIN || res == -libc::EOPNOTSUPP {
                slot.partial = PartialBlock::Refused;
                WritePathCounters::bump(&counters.partial_refused);
                // Ahead of writes that have not been offered yet: it claims its stretch for the
                // page cache before they are offered direct (`Worker::commit_backends`).
                self.waiting.push_front(index);
                return;
            }
            slot.partial = PartialBlock::Untried;
            WritePathCounters::bump(&counters.direct_partial);
        }
        match slot.op {
            StorageOp::Read { .. } | StorageOp::Write { .. } => {
                if res < 0 {
                    self.finish(index, Err(StorageError::from_errno(-res)), out);
                    return;
                }
                let is_read = matches!(slot.op, StorageOp::Read { .. });
                if res == 0 {
                    if is_read {
                        // EOF inside the volume (file shrank): the rest reads as zeros.
                        let done = slot.done_bytes;
                        let buf = slot.buf.as_mut().expect("a read's buffer is back");
                        buf.as_mut_slice()[done..].fill(0);
                        self.finish(index, Ok(()), out);
                    } else {
                        self.finish(index, Err(StorageError::Io(libc::EIO)), out);
                    }
                    return;
                }
                slot.done_bytes += res as usize;
                if slot.done_bytes >= slot.len_bytes {
                    self.finish(index, Ok(()), out);
                } else {
                    self.waiting.push_back(index);
                }
            }
            StorageOp::Flush => {
                let r = if res < 0 {
                    Err(StorageError::from_errno(-res))
                } else {
                    Ok(())
                };
                self.finish(index, r, out);
            }
            StorageOp::Trim { .. } => {
                // TRIM is advisory: a filesystem that cannot punch holes simply keeps the data.
                let r = if res < 0 && res != -libc::EOPNOTSUPP {
                    Err(StorageError::from_errno(-res))
                } else {
                    Ok(())
                };
                self.finish(index, r, out);
            }
            StorageOp::WriteZeroes { fua, .. } => {
                if res == -libc::EOPNOTSUPP && !slot.zero_fallback {
                    slot.zero_fallback = true;
                    self.waiting.push_back(index);
                } else if res < 0 {
                    self.finish(index, Err(StorageError::from_errno(-res)), out);
                } else if fua == Fua::Yes {
                    // Durable before reply: follow with a flush under the same slot.
                    slot.op = StorageOp::Flush;
                    self.waiting.push_back(index);
                } else {
                    self.finish(index, Ok(()), out);
                }
            }
        }
    }
}

/// Puts `item` in a free place of `items` (one listed in `free`, else a new one at the end)
/// and returns its index.
fn store<T>(items: &mut Vec<Option<T>>, free: &mut Vec<usize>, item: T) -> usize {
    match free.pop() {
        Some(i) => {
            items[i] = Some(item);
            i
        }
        None => {
            items.push(Some(item));
            items.len() - 1
        }
    }
}

/// `user_data` of the cancel requests themselves (never a slot index).
const CANCEL_USER_DATA: u64 = u64::MAX;

impl FileBackend {
    /// Cancels every operation in the kernel and reaps its completion, so no buffer is freed
    /// while the kernel may still read or write it; returns how many were reaped. Operations
    /// still in the kernel after [`sys::RING_DROP_WAIT_NS`] have their buffers leaked.
    ///
    /// A hosted backend's operations are the host's to cancel (the worker's socket ring
    /// cancels and waits for everything in it when it closes, before the worker's backends
    /// are dropped): here it only gives back the stretches they claimed, and reaps none.
    pub fn cancel_and_reap(&mut self) -> usize {
        self.waiting.clear();
        let Some(ring) = self.ring.as_mut() else {
            for slot in self.slots.iter_mut().filter_map(Option::take) {
                if let Some((at, len, via)) = slot.claim {
                    self.volume.pages.release(at, len, via);
                }
            }
            for run in self.runs.iter_mut().filter_map(Option::take) {
                let (at, len) = run.claim;
                self.volume.pages.release(at, len, Via::Buffered);
            }
            self.in_kernel = 0;
            return 0;
        };
        ring.cancel_all(CANCEL_USER_DATA);
        // A cancelled operation ends with -ECANCELED; one the kernel could not stop, normally.
        let mut done = Vec::new();
        let all_back = ring.drain(sys::RING_DROP_WAIT_NS, &mut done);
        let mut reaped = 0;
        for cqe in done {
            if matches!(cqe.sqe, Sqe::Cancel { .. }) {
                continue;
            }
            self.in_kernel -= 1;
            reaped += 1;
            // The stretches a reaped write held go back: the volume outlives this ring.
            let user_data = cqe.user_data;
            let members = if user_data & RUN_USER_DATA_BIT != 0 {
                let ri = (user_data & !RUN_USER_DATA_BIT) as usize;
                let run = self.runs.get_mut(ri).and_then(Option::take);
                if let Some((at, len)) = run.as_ref().map(|r| r.claim) {
                    self.volume.pages.release(at, len, Via::Buffered);
                }
                run.map_or_else(Vec::new, |run| run.members)
            } else {
                vec![user_data as usize]
            };
            for index in members {
                if let Some(slot) = self.slots.get_mut(index).and_then(Option::take) {
                    if let Some((at, len, via)) = slot.claim {
                        self.volume.pages.release(at, len, via);
                    }
                }
            }
            // The kernel is done with the buffers: they are freed here, with `cqe`.
        }
        if !all_back {
            tracing::error!(
                volume = %self.volume.name,
                in_kernel = self.in_kernel,
                "io_uring operations not cancelled in time; leaking their buffers"
            );
            if let Some(ring) = self.ring.as_mut() {
                ring.forget_in_flight();
            }
        }
        reaped
    }
}

impl Drop for FileBackend {
    fn drop(&mut self) {
        if self.in_kernel > 0 {
            self.cancel_and_reap();
        }
    }
}

impl Backend for FileBackend {
    fn submit(&mut self, tag: u64, op: StorageOp, _class: IoClass, buf: IoBuf) -> Submitted {
        let mut slot = Slot {
            tag,
            op,
            len_bytes: buf.len(),
            buf: Some(buf),
            done_bytes: 0,
            zero_fallback: false,
            in_run: false,
            alone: false,
            partial: PartialBlock::Untried,
            route: None,
            claim: None,
            seq: self.next_seq,
            changes: false,
        };
        slot.changes = slot.extent().is_some_and(|(_, _, changes)| changes);
        self.next_seq += 1;
        self.unfinished_changes += usize::from(slot.changes);
        let index = store(&mut self.slots, &mut self.free_slots, slot);
        // Into the ring at `commit`, when the step's writes can be seen together.
        self.waiting.push_back(index);
        Submitted::Pending
    }

    fn commit(&mut self) {
        // A hosted backend's SQEs go in with the worker's enter (`RingGuest::fill`).
        let Some(mut ring) = self.ring.take() else {
            return;
        };
        self.fill_ring(&mut ring);
        if self.queued_since_commit > 0 {
            match ring.submit() {
                Ok(_) => self.queued_since_commit = 0,
                Err(e) => {
                    tracing::warn!(volume = %self.volume.name, error = %e, "io_uring submit failed; will retry");
                }
            }
        }
        self.ring = Some(ring);
    }

    fn poll(&mut self, _now_ns: u64, out: &mut Vec<Completion>) {
        // A hosted backend's completions come through `RingGuest::complete`.
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        let mut cqes = std::mem::take(&mut self.cqes);
        ring.reap(&mut cqes);
        for cqe in cqes.drain(..) {
            self.on_ring_cqe(cqe, out);
        }
        self.cqes = cqes;
        // Retries (short transfers, runs cut short, fallbacks) and operations that waited for
        // ring space go in now: the worker may sleep until a CQE, and these have none yet.
        self.commit();
    }

    fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    fn wake_fd(&self) -> Option<RawFd> {
        self.ring.as_ref().map(sys::Ring::raw_fd)
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.retry_at_ns
    }

    fn ring_guest(&mut self) -> Option<&mut dyn RingGuest> {
        Some(self)
    }
}

impl RingGuest for FileBackend {
    fn join(&mut self, host: &mut dyn HostRing) -> bool {
        if self.in_kernel > 0 || self.ring.is_none() {
            return false;
        }
        // Nothing is in the kernel: closing the own ring waits for nothing. Its registered
        // buffers are registered on the host instead (if the host takes them).
        self.ring = None;
        self.register_fixed_on(host);
        self.queued_since_commit = 0;
        true
    }

    fn hosted(&self) -> bool {
        self.ring.is_none()
    }

    fn fill(&mut self, host: &mut dyn HostRing) {
        debug_assert!(
            self.ring.is_none(),
            "a backend with its own ring filled a host"
        );
        self.fill_ring(host);
        // The host's next enter submits them.
        self.queued_since_commit = 0;
    }

    fn complete(&mut self, cqe: sys::Cqe<IoBuf>, out: &mut Vec<Completion>) {
        self.on_ring_cqe(cqe, out);
    }
}

impl FileBackend {
    /// One completion of an operation this backend pushed (into its own ring or a host).
    fn on_ring_cqe(&mut self, cqe: sys::Cqe<IoBuf>, out: &mut Vec<Completion>) {
        let (user_data, res) = (cqe.user_data, cqe.result);
        match cqe.sqe {
            Sqe::Writev { bufs, .. } => {
                self.in_kernel -= 1;
                let ri = (user_data & !RUN_USER_DATA_BIT) as usize;
                self.on_run_cqe(ri, res, bufs, out);
            }
            Sqe::Read { buf, .. } | Sqe::ReadFixed { buf, .. } | Sqe::Write { buf, .. } => {
                self.in_kernel -= 1;
                if let Some(slot) = self
                    .slots
                    .get_mut(user_data as usize)
                    .and_then(Option::as_mut)
                {
                    slot.buf = Some(buf);
                }
                self.on_cqe(user_data as usize, res, out);
            }
            Sqe::Cancel { .. } => {}
            _ => {
                self.in_kernel -= 1;
                self.on_cqe(user_data as usize, res, out);
            }
        }
    }
}
