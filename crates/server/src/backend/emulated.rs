//! `emulated`: the SSD model of crate `device`, run against the wall clock.
//!
//! # What it implements
//! remote.md's "a ULL drive on any machine": a volume whose **bytes** live in a sparse map (the
//! memory backend's store, [`MemoryVolume`]) and whose **timing** comes from [`device::Ssd`],
//! the same model the simulator runs. A request is handed to the model at "now" (the worker's
//! monotonic clock, nanoseconds since the process epoch, used directly as the model's
//! `SimTime`), and its reply leaves only once the model has posted its completion and the wall
//! clock has passed the completion's time. On a machine that keeps up, a client sees the
//! modelled drive: a QD1 4 KiB read on `zssd` takes the model's ~10 µs plus the network.
//!
//! # Design
//! *One model per volume, shared by all workers, behind a mutex.* Each worker's backend is one
//! NVMe queue pair on the model (SQ/CQ id = the order in which workers attached, from 1), as a
//! Linux host gives each CPU its own hardware queue. Whoever holds the lock advances the model
//! to the current time and files every completion it produced in the mailbox of the worker
//! whose SQ it belongs to; each worker collects its own mailbox when it polls. The alternative,
//! one model per worker on a disjoint share of the device (a worker's requests seeing 1/N of the
//! channels), would be untruthful in exactly the way that matters here: tenants on different
//! connections land on different workers, and the interference between a best-effort writer and
//! a latency-critical reader (what the QoS scheduler exists for) would vanish. The lock is held
//! for the model's event handling only (a few µs per step under load), never across I/O.
//!
//! *Data at submission, time at completion.* The store is read or written when the request is
//! submitted, the buffer then waits with the request until the model completes it. Overlapping
//! requests in flight at once have no defined order on NVMe either; a request submitted after
//! another one *completed* always sees its effect.
//!
//! *Range operations in pieces.* A TRIM or WRITE_ZEROES reaches the model as commands of at
//! most [`RANGE_PIECE_BYTES`], the next sent when the previous completed, so the model's
//! page-by-page unmapping never holds the volume's lock for a whole multi-GiB range.
//!
//! *Queueing, never failing.* Each worker keeps at most `sq_depth` commands in its SQ; more wait
//! in the worker, in arrival order, and enter the SQ as completions free slots (what blk-mq does
//! when a hardware queue is full). Inside the device, commands queue wherever the model queues
//! them (arbitration, firmware, LUNs, a full write buffer).
//!
//! *Waking in time.* [`Backend::next_event_ns`] is the model's next event time (any worker's),
//! kept in an atomic that every lock holder refreshes. A worker with commands in flight never
//! sleeps past it: its own completions can only happen at or after the model's earliest pending
//! event, so if another worker advanced the model meanwhile, the completion is in the mailbox by
//! the time this worker wakes.
//!
//! ```text
//!  worker 0 ─submit─▶ store (bytes) ─▶ SQ 1 ┐              ┌▶ mailbox 1 ─poll─▶ worker 0
//!  worker 1 ─submit─▶ store (bytes) ─▶ SQ 2 ┴▶ Ssd (mutex) ┴▶ mailbox 2 ─poll─▶ worker 1
//!                                    advance_to(now) by whoever polls or commits
//! ```
//!
//! Worked example (`zssd`, QD1): a 4 KiB READ at 1 MiB arrives at t = 5 000 000 ns. `submit`
//! copies the 4 KiB from the store into the request's buffer and queues the request; `commit`
//! (end of the worker's step) takes the lock, advances the model to 5 000 100 ns, and submits
//! `Read{slba=2048, sectors=8}` on SQ 1 at that time. The model's next event is then the
//! doorbell at 5 000 600; the worker polls (it is under `EMULATED_WAKE_EARLY_NS` away) and each
//! poll advances the model; the completion is posted for ≈ 5 010 000 ns, and the first poll at
//! or after that time hands the buffer back and the reply goes out.
//!
//! # What it leaves out
//! Integrity versions, and the model's statistics on the metrics endpoint beyond its command
//! counts by class (`ullstack_device_commands_total`: each command carries its flow's class in
//! the reserved field). Timing is only as truthful as the host keeps up: a worker descheduled
//! for 1 ms delivers the completions due in that millisecond late (never early).
//!
//! # Config keys
//! `backend = { kind = "emulated", device = "zssd" | { preset = "nvme-tlc", … }, size,
//! sq_depth = 1024 }`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use device::{DeviceConfig, DeviceOptions, Hint, NvmeCommand, SqPriority, Ssd, SubmitError};
use engine::{IoClass, IoOp, SimTime};

use super::interface::{
    Backend, BackendError, Caps, Completion, StorageError, StorageOp, Submitted, Volume,
};
use super::memory::MemoryVolume;
use crate::buf::IoBuf;

/// Bytes per NVMe logical block on the model (its commands count 512-byte sectors).
const SECTOR_BYTES: u64 = device::SECTOR_BYTES;
/// `next_event_ns` value meaning "the model has no pending event".
const NO_EVENT: u64 = u64::MAX;

/// The clock an emulated volume runs on: nanoseconds, never going backwards.
pub type Clock = fn() -> u64;

/// The model and what its lock holders share.
struct Model {
    ssd: Ssd,
    /// Latest time the model was advanced to or given a command at.
    now: SimTime,
    /// Completions found by whoever advanced the model, per SQ (index = sqid − 1).
    mailboxes: Vec<Vec<device::Completion>>,
    scratch: Vec<device::Completion>,
}

impl Model {
    /// Runs the model up to `clock_ns` (or its own time, if later) and files completions.
    fn advance(&mut self, clock_ns: u64) -> SimTime {
        let t = SimTime(clock_ns).max(self.now);
        self.ssd.advance_to(t, &mut self.scratch);
        self.now = t;
        for c in self.scratch.drain(..) {
            let slot = usize::from(c.sqid).wrapping_sub(1);
            match self.mailboxes.get_mut(slot) {
                Some(mailbox) => mailbox.push(c),
                None => debug_assert!(false, "completion for unknown SQ {}", c.sqid),
            }
        }
        t
    }
}

/// An emulated volume: the bytes, the model, and the clock.
pub struct EmulatedVolume {
    name: String,
    store: MemoryVolume,
    device_name: String,
    sq_depth: u32,
    model: Mutex<Model>,
    /// The model's next event time, ns ([`NO_EVENT`] when it has none); written under the lock.
    next_event_ns: AtomicU64,
    clock: Clock,
}

impl EmulatedVolume {
    /// A volume of `size_bytes` on a fresh model of `device`, run on the worker clock.
    pub fn new(
        name: &str,
        device: &DeviceConfig,
        size_bytes: u64,
        sq_depth: u32,
    ) -> Result<EmulatedVolume, BackendError> {
        Self::with_clock(name, device, size_bytes, sq_depth, crate::clock::now_ns)
    }

    /// As [`new`](Self::new), on another clock (tests drive the model with a fake one).
    pub fn with_clock(
        name: &str,
        device: &DeviceConfig,
        size_bytes: u64,
        sq_depth: u32,
        clock: Clock,
    ) -> Result<EmulatedVolume, BackendError> {
        let ssd = Ssd::new(device, DeviceOptions { integrity: false }).map_err(|e| {
            BackendError::Invalid {
                volume: name.into(),
                what: format!("device model: {e}"),
            }
        })?;
        if size_bytes > ssd.capacity_bytes() {
            return Err(BackendError::Invalid {
                volume: name.into(),
                what: format!(
                    "size {size_bytes} bytes exceeds the {} device's user capacity of {} bytes",
                    device.name,
                    ssd.capacity_bytes()
                ),
            });
        }
        let now = SimTime(clock());
        Ok(EmulatedVolume {
            name: name.to_string(),
            store: MemoryVolume::new(size_bytes),
            device_name: device.name.clone(),
            sq_depth: sq_depth.max(1),
            model: Mutex::new(Model {
                ssd,
                now,
                mailboxes: Vec::new(),
                scratch: Vec::new(),
            }),
            next_event_ns: AtomicU64::new(NO_EVENT),
            clock,
        })
    }

    /// The device model's name (the preset's, unless the table renamed it).
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// The sparse store holding the bytes.
    pub fn store(&self) -> &MemoryVolume {
        &self.store
    }

    /// The model's statistics so far (for reports and tests).
    pub fn device_stats(&self) -> device::DeviceStats {
        self.lock().ssd.stats()
    }

    /// Commands inside the model (submitted, not completed) across all workers.
    pub fn device_in_flight(&self) -> u64 {
        self.lock().ssd.in_flight()
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish_next_event(&self, model: &Model) {
        let next = model.ssd.next_event_time().map_or(NO_EVENT, |t| t.0);
        self.next_event_ns.store(next, Ordering::Release);
    }
}

impl Volume for EmulatedVolume {
    fn size_bytes(&self) -> u64 {
        self.store.size_bytes()
    }

    fn caps(&self) -> Caps {
        Caps {
            flush: true,
            fua: true,
            trim: true,
            write_zeroes: true,
            multi_conn: true,
            read_only: false,
        }
    }

    fn kind(&self) -> &'static str {
        "emulated"
    }

    fn device_commands_by_class(&self) -> Option<[u64; 2]> {
        let model = self.lock();
        let c = model.ssd.command_stats();
        Some([c.latency_critical, c.throughput])
    }

    fn attach(self: Arc<Self>) -> Result<Box<dyn Backend>, BackendError> {
        let sqid = {
            let mut model = self.lock();
            let next = model.mailboxes.len() + 1;
            let Ok(sqid) = u16::try_from(next) else {
                return Err(BackendError::Invalid {
                    volume: self.name.clone(),
                    what: format!("more than {} workers attached", u16::MAX - 1),
                });
            };
            model
                .ssd
                .create_queue_pair(sqid, sqid, self.sq_depth, SqPriority::Medium);
            // The worker polls its CQ: no interrupts.
            model.ssd.set_interrupts(sqid, false);
            model.mailboxes.push(Vec::new());
            sqid
        };
        tracing::debug!(volume = %self.name, device = %self.device_name, sqid, "emulated backend attached");
        Ok(Box::new(EmulatedBackend {
            volume: self,
            sqid,
            slots: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            in_device: 0,
            live: 0,
            taken: Vec::new(),
        }))
    }
}

/// A request between `submit` and its completion.
struct Slot {
    tag: u64,
    op: StorageOp,
    class: IoClass,
    buf: IoBuf,
    /// Bytes of a TRIM / WRITE_ZEROES range the model has already completed: a range goes to
    /// the model one [`RANGE_PIECE_BYTES`] command at a time.
    range_done_bytes: u64,
}

/// Largest range one TRIM / WRITE_ZEROES command gives the model. The model unmaps a range 4 KiB
/// at a time under the volume's lock (issue 9 measured 24–49 ms for one 4 GiB TRIM, stalling
/// every tenant of the volume); in 64 MiB pieces, sent one after the other, a lock hold walks
/// 1/64 of that (0.4–0.8 ms by the same rate) and other tenants' commands run in between.
pub const RANGE_PIECE_BYTES: u64 = 64 << 20;

/// One worker's queue pair on an emulated volume.
pub struct EmulatedBackend {
    volume: Arc<EmulatedVolume>,
    sqid: u16,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<u32>,
    /// Slots not in the model yet (new since the last commit, or the SQ was full), in order.
    waiting: VecDeque<u32>,
    /// Commands in the model's SQ or beyond.
    in_device: u32,
    /// Slots in use.
    live: usize,
    taken: Vec<device::Completion>,
}

impl EmulatedBackend {
    fn command(&self, slot: u32) -> NvmeCommand {
        let (op, class, done) = match self.slots[slot as usize].as_ref() {
            Some(s) => (
                Some((s.op, s.buf.len() as u64)),
                s.class,
                s.range_done_bytes,
            ),
            None => (None, IoClass::Throughput, 0),
        };
        let (io_op, offset_bytes, len_bytes) = match op {
            Some((StorageOp::Read { offset_bytes }, len)) => (IoOp::Read, offset_bytes, len),
            Some((StorageOp::Write { offset_bytes, .. }, len)) => (IoOp::Write, offset_bytes, len),
            Some((op @ (StorageOp::Trim { .. } | StorageOp::WriteZeroes { .. }), _)) => {
                let (offset_bytes, len_bytes) = op.range_bytes().unwrap_or((0, 0));
                let piece = (len_bytes - done).min(RANGE_PIECE_BYTES);
                (IoOp::Trim, offset_bytes + done, piece)
            }
            Some((StorageOp::Flush, _)) | None => (IoOp::Flush, 0, 0),
        };
        NvmeCommand {
            cid: slot,
            op: io_op,
            slba: offset_bytes / SECTOR_BYTES,
            // Requests are aligned to block_bytes (≥ 512) by the dataplane; a range too long for
            // one command's 32-bit sector count is cut to it (timing only; the store has the
            // whole range).
            sectors: u32::try_from(len_bytes.div_ceil(SECTOR_BYTES)).unwrap_or(u32::MAX),
            class,
            hint: Hint::None,
            version: 0,
        }
    }

    /// Moves waiting commands into the SQ while it has room (caller holds the lock).
    fn feed(&mut self, model: &mut Model, at: SimTime) {
        while self.in_device < self.volume.sq_depth {
            let Some(&slot) = self.waiting.front() else {
                break;
            };
            let cmd = self.command(slot);
            match model.ssd.submit(at, self.sqid, cmd) {
                Ok(()) => {
                    self.waiting.pop_front();
                    self.in_device += 1;
                }
                Err(SubmitError::QueueFull(_)) => break,
                Err(e @ SubmitError::NoSuchQueue(_)) => {
                    debug_assert!(false, "{e}");
                    tracing::error!(error = %e, "emulated backend lost its queue");
                    break;
                }
            }
        }
    }

    fn finish(&mut self, c: &device::Completion, out: &mut Vec<Completion>) {
        // A range operation with pieces left: send the next one (after this lock hold).
        if let Some(slot) = self.slots.get_mut(c.cid as usize).and_then(Option::as_mut) {
            if let Some((_, len_bytes)) = slot.op.range_bytes() {
                let piece = (len_bytes - slot.range_done_bytes).min(RANGE_PIECE_BYTES);
                slot.range_done_bytes += piece;
                assert!(slot.range_done_bytes <= len_bytes, "range overrun");
                if slot.range_done_bytes < len_bytes && c.status == device::Status::Success {
                    self.waiting.push_back(c.cid);
                    return;
                }
            }
        }
        let Some(slot) = self.slots.get_mut(c.cid as usize).and_then(Option::take) else {
            debug_assert!(false, "completion for unknown command {}", c.cid);
            return;
        };
        self.free_slots.push(c.cid);
        self.live -= 1;
        let result = match c.status {
            device::Status::Success => Ok(()),
            device::Status::LbaOutOfRange | device::Status::InvalidField => {
                Err(StorageError::Io(libc::EIO))
            }
        };
        out.push(Completion {
            tag: slot.tag,
            result,
            buf: slot.buf,
            pages: None,
        });
    }
}

impl Backend for EmulatedBackend {
    fn submit(&mut self, tag: u64, op: StorageOp, class: IoClass, mut buf: IoBuf) -> Submitted {
        if let Err(e) = self.volume.store.execute(op, &mut buf) {
            return Submitted::Done(Completion {
                tag,
                result: Err(e),
                buf,
                pages: None,
            });
        }
        let slot = Slot {
            tag,
            op,
            class,
            buf,
            range_done_bytes: 0,
        };
        let index = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                (self.slots.len() - 1) as u32
            }
        };
        self.waiting.push_back(index);
        self.live += 1;
        Submitted::Pending
    }

    fn commit(&mut self) {
        if self.waiting.is_empty() || self.in_device >= self.volume.sq_depth {
            return;
        }
        let volume = Arc::clone(&self.volume);
        let mut model = volume.lock();
        let at = model.advance((volume.clock)());
        self.feed(&mut model, at);
        volume.publish_next_event(&model);
    }

    fn poll(&mut self, _now_ns: u64, out: &mut Vec<Completion>) {
        if self.live == 0 {
            return;
        }
        let volume = Arc::clone(&self.volume);
        let mut taken = std::mem::take(&mut self.taken);
        {
            let mut model = volume.lock();
            let at = model.advance((volume.clock)());
            let mailbox = &mut model.mailboxes[usize::from(self.sqid) - 1];
            std::mem::swap(mailbox, &mut taken);
            debug_assert!(taken.len() as u32 <= self.in_device);
            self.in_device -= taken.len() as u32;
            self.feed(&mut model, at);
            volume.publish_next_event(&model);
        }
        for c in taken.drain(..) {
            self.finish(&c, out);
        }
        self.taken = taken;
    }

    fn in_flight(&self) -> usize {
        self.live
    }

    fn next_event_ns(&self) -> Option<u64> {
        if self.live == 0 {
            return None;
        }
        if !self.waiting.is_empty() && self.in_device < self.volume.sq_depth {
            return Some(0); // commit at once
        }
        match self.volume.next_event_ns.load(Ordering::Acquire) {
            // Commands in flight and no model event: their completions are in the mailbox.
            NO_EVENT => Some(0),
            t => Some(t),
        }
    }
}

/// Time the model takes for one command on an idle, fresh device: submitted at 0, completion
/// posted at the returned ns. Used to check and document the emulation's timing.
pub fn unloaded_latency_ns(
    device: &DeviceConfig,
    op: IoOp,
    offset_bytes: u64,
    len_bytes: u64,
) -> Result<u64, BackendError> {
    let mut ssd = Ssd::new(device, DeviceOptions { integrity: false }).map_err(|e| {
        BackendError::Invalid {
            volume: String::new(),
            what: format!("device model: {e}"),
        }
    })?;
    ssd.create_queue_pair(1, 1, 2, SqPriority::Medium);
    ssd.set_interrupts(1, false);
    let cmd = NvmeCommand {
        cid: 0,
        op,
        slba: offset_bytes / SECTOR_BYTES,
        sectors: (len_bytes / SECTOR_BYTES) as u32,
        class: IoClass::Throughput,
        hint: Hint::None,
        version: 0,
    };
    ssd.submit(SimTime::ZERO, 1, cmd)
        .map_err(|e| BackendError::Invalid {
            volume: String::new(),
            what: format!("device model: {e}"),
        })?;
    let mut done = Vec::new();
    while let Some(t) = ssd.next_event_time() {
        ssd.advance_to(t, &mut done);
        if let Some(c) = done.first() {
            return Ok(c.at.0);
        }
    }
    Err(BackendError::Invalid {
        volume: String::new(),
        what: "device model never completed the command".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Fua;

    // Each test has its own fake clock (tests run in parallel threads).
    macro_rules! fake_clock {
        ($name:ident) => {
            static $name: AtomicU64 = AtomicU64::new(0);
        };
    }

    fn zssd() -> DeviceConfig {
        DeviceConfig::preset("zssd").unwrap()
    }

    fn buf_with(bytes: &[u8]) -> IoBuf {
        let mut b = IoBuf::zeroed(bytes.len());
        b.set_len(bytes.len());
        b.as_mut_slice().copy_from_slice(bytes);
        b
    }

    fn read_buf(len: usize) -> IoBuf {
        let mut b = IoBuf::zeroed(len);
        b.set_len(len);
        b
    }

    /// Advances `clock` to each model event in turn until `want` completions arrived at
    /// `backends`; returns (completion, backend index, time) in arrival order.
    fn run(
        clock: &AtomicU64,
        backends: &mut [Box<dyn Backend>],
        want: usize,
    ) -> Vec<(Completion, usize, u64)> {
        let mut got = Vec::new();
        let mut out = Vec::new();
        for _ in 0..1_000_000 {
            for (i, b) in backends.iter_mut().enumerate() {
                b.commit();
                b.poll(clock.load(Ordering::SeqCst), &mut out);
                for c in out.drain(..) {
                    got.push((c, i, clock.load(Ordering::SeqCst)));
                }
            }
            if got.len() >= want {
                return got;
            }
            let next = backends
                .iter()
                .filter_map(|b| b.next_event_ns())
                .min()
                .expect("requests in flight have a next event");
            let now = clock.load(Ordering::SeqCst);
            clock.store(next.max(now + 1), Ordering::SeqCst);
        }
        panic!("only {} of {want} completions", got.len());
    }

    /// A 1 GiB TRIM reaches the model as 16 commands of 64 MiB, one after the other, so no
    /// single lock hold walks the whole range.
    #[test]
    fn a_large_trim_goes_to_the_model_in_pieces() {
        fake_clock!(CLOCK);
        let v = Arc::new(
            EmulatedVolume::with_clock("v", &zssd(), 1 << 30, 64, || CLOCK.load(Ordering::SeqCst))
                .unwrap(),
        );
        let mut backends = [v.clone().attach().unwrap()];
        let trim = StorageOp::Trim {
            offset_bytes: 0,
            len_bytes: 1 << 30,
        };
        assert!(matches!(
            backends[0].submit(1, trim, IoClass::Throughput, IoBuf::empty()),
            Submitted::Pending
        ));
        let got = run(&CLOCK, &mut backends, 1);
        assert_eq!(got.len(), 1);
        assert!(got[0].0.result.is_ok());
        let [lc, tp] = v.device_commands_by_class().unwrap();
        assert_eq!(
            lc + tp,
            (1 << 30) / RANGE_PIECE_BYTES,
            "one command per 64 MiB piece"
        );
        assert_eq!(backends[0].in_flight(), 0);
    }

    #[test]
    fn data_round_trips_and_a_read_takes_the_device_latency() {
        fake_clock!(CLOCK);
        let v = Arc::new(
            EmulatedVolume::with_clock("v", &zssd(), 64 << 20, 64, || CLOCK.load(Ordering::SeqCst))
                .unwrap(),
        );
        let mut backends = [v.clone().attach().unwrap()];
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        let start = CLOCK.load(Ordering::SeqCst);
        let w = StorageOp::Write {
            offset_bytes: 1 << 20,
            fua: Fua::No,
        };
        assert!(matches!(
            backends[0].submit(1, w, IoClass::Throughput, buf_with(&data)),
            Submitted::Pending
        ));
        let done = run(&CLOCK, &mut backends, 1);
        assert_eq!(done[0].0.tag, 1);
        assert!(done[0].0.result.is_ok());
        assert!(done[0].2 > start, "a write is not instantaneous");

        let read_at = CLOCK.load(Ordering::SeqCst);
        let r = StorageOp::Read {
            offset_bytes: 3 << 20,
        };
        assert!(matches!(
            backends[0].submit(2, r, IoClass::Throughput, read_buf(4096)),
            Submitted::Pending
        ));
        let done = run(&CLOCK, &mut backends, 1);
        let model_ns = unloaded_latency_ns(&zssd(), IoOp::Read, 3 << 20, 4096).unwrap();
        assert!(model_ns >= 8_000, "zssd QD1 read {model_ns} ns");
        assert!(
            done[0].2 - read_at >= model_ns,
            "completed after {} ns, model says {model_ns}",
            done[0].2 - read_at
        );

        let r = StorageOp::Read {
            offset_bytes: 1 << 20,
        };
        backends[0].submit(3, r, IoClass::Throughput, read_buf(8192));
        let done = run(&CLOCK, &mut backends, 1);
        assert_eq!(
            done[0].0.buf.as_slice(),
            &data[..],
            "reads what was written"
        );
        assert_eq!(backends[0].in_flight(), 0);
        assert_eq!(backends[0].next_event_ns(), None);
        assert_eq!(v.device_stats().commands.reads, 2);
        assert_eq!(v.device_stats().commands.writes, 1);
    }

    #[test]
    fn requests_beyond_the_queue_depth_wait_instead_of_failing() {
        fake_clock!(CLOCK);
        let depth = 4;
        let v = Arc::new(
            EmulatedVolume::with_clock("v", &zssd(), 64 << 20, depth, || {
                CLOCK.load(Ordering::SeqCst)
            })
            .unwrap(),
        );
        let mut backends = [v.clone().attach().unwrap()];
        let n = 50u64;
        for i in 0..n {
            let op = StorageOp::Read {
                offset_bytes: i * 4096 * 17,
            };
            assert!(matches!(
                backends[0].submit(i, op, IoClass::Throughput, read_buf(4096)),
                Submitted::Pending
            ));
        }
        backends[0].commit();
        assert_eq!(v.device_in_flight(), u64::from(depth));
        let mut tags: Vec<u64> = Vec::new();
        let mut out = Vec::new();
        for _ in 0..100_000 {
            backends[0].poll(0, &mut out);
            tags.extend(out.drain(..).map(|c| {
                assert!(c.result.is_ok());
                c.tag
            }));
            assert!(v.device_in_flight() <= u64::from(depth));
            match backends[0].next_event_ns() {
                Some(t) => {
                    let now = CLOCK.load(Ordering::SeqCst);
                    CLOCK.store(t.max(now + 1), Ordering::SeqCst);
                }
                None => break,
            }
        }
        tags.sort_unstable();
        assert_eq!(
            tags,
            (0..n).collect::<Vec<_>>(),
            "every request completes once"
        );
    }

    #[test]
    fn two_workers_share_one_device_and_get_their_own_completions() {
        fake_clock!(CLOCK);
        let v = Arc::new(
            EmulatedVolume::with_clock("v", &zssd(), 64 << 20, 64, || CLOCK.load(Ordering::SeqCst))
                .unwrap(),
        );
        let mut backends = [v.clone().attach().unwrap(), v.clone().attach().unwrap()];
        for i in 0..20u64 {
            let op = StorageOp::Read {
                offset_bytes: i * 65536,
            };
            backends[(i % 2) as usize].submit(i, op, IoClass::Throughput, read_buf(4096));
        }
        backends[0].commit();
        backends[1].commit();
        // Only worker 1 advances the model past every completion; worker 0's completions wait
        // in its mailbox and are handed to worker 0, not to worker 1.
        let mut out = Vec::new();
        for _ in 0..100_000 {
            if v.device_in_flight() == 0 {
                break;
            }
            let t = v.next_event_ns.load(Ordering::SeqCst);
            CLOCK.store(t, Ordering::SeqCst);
            backends[1].poll(0, &mut out);
        }
        assert!(
            out.iter().all(|c| c.tag % 2 == 1),
            "worker 1 got only its own"
        );
        assert_eq!(out.len(), 10);
        assert_eq!(
            backends[0].next_event_ns(),
            Some(0),
            "worker 0 is told to collect its mail now"
        );
        let mut mine = Vec::new();
        backends[0].poll(0, &mut mine);
        assert_eq!(mine.len(), 10);
        assert!(mine.iter().all(|c| c.tag % 2 == 0));
    }

    #[test]
    fn the_model_clock_never_runs_backwards() {
        fake_clock!(CLOCK);
        CLOCK.store(1_000_000, Ordering::SeqCst);
        let v = Arc::new(
            EmulatedVolume::with_clock("v", &zssd(), 1 << 20, 8, || CLOCK.load(Ordering::SeqCst))
                .unwrap(),
        );
        let mut a = v.clone().attach().unwrap();
        a.submit(
            1,
            StorageOp::Read { offset_bytes: 0 },
            IoClass::Throughput,
            read_buf(4096),
        );
        a.commit();
        // A clock read that is older than the model's time (another worker read it just
        // before): the model stays at its own time instead of panicking or going back.
        CLOCK.store(10, Ordering::SeqCst);
        a.submit(
            2,
            StorageOp::Read { offset_bytes: 4096 },
            IoClass::Throughput,
            read_buf(4096),
        );
        a.commit();
        let mut out = Vec::new();
        a.poll(0, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_volume_larger_than_the_device_is_refused() {
        let mut small = zssd();
        small.flash.channels = 2;
        small.flash.dies_per_package = 1;
        small.flash.blocks_per_plane = 16;
        let err = EmulatedVolume::new("v", &small, 1 << 40, 64)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("exceeds") && err.contains("capacity"), "{err}");
    }
}
