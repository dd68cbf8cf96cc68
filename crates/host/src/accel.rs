//! The queue accelerator ("XLER", FlashShare's hardware NVMe queue engine): a PCIe device that
//! takes SQ handling, request merging and CQ polling off the host's cores.
//!
//! ## What it models
//! A sans-I/O state machine of one accelerator with one SQ per host queue (each `depth`
//! entries, in the accelerator's memory), driven by time in and actions out:
//! - **Register interface** ([`Xler::submit`]): the driver writes a bio's op, first sector,
//!   length and buffer pointers into the accelerator's registers — `register_ns` of CPU on the
//!   submitting core (four posted 64-bit MMIO writes), instead of blk-mq's tag search, merge
//!   search, dispatch and `nvme_queue_rq`.
//! - **CAM merge with a status bitmap**: the accelerator compares the request with every
//!   entry of the SQ at once (a content-addressable memory over op and sector range, masked by
//!   a status bitmap of valid entries: one bit per slot), `cam_ns` for the whole search. A
//!   valid entry of the same op that is adjacent to the request (it ends where the request
//!   starts, or starts where it ends) or covers the same sectors takes it in — the entry's
//!   range grows (within `max_sectors`) and it remembers every host request it carries; else
//!   the request takes a free slot, its bit is set, and it is appended to the SQ's fetch
//!   order. The accelerator then rings the SSD's doorbell (`doorbell_ns` after the CAM).
//! - **Barrier** between merge logic and SSD fetch (a mux): while the SSD fetches an entry
//!   ([`Xler::fetch`], `barrier_ns` for the 64-byte read), the merge logic may not touch that
//!   SQ; the fetched entry's bit is cleared when the fetch takes the barrier, so a request
//!   arriving meanwhile waits for the barrier and can never merge into a command the SSD is
//!   already reading — it merges with another valid entry or takes a new slot. Without this a
//!   merge could grow a command after the SSD read its length: its data would be lost.
//! - **CQ polling in hardware and the interrupt to the driver** ([`Xler::completion_irq_at`]):
//!   the accelerator polls the CQ every `poll_ns` and, on a new entry, raises an MSI to the
//!   driver `irq_ns` later; the core then runs only the ISR and the block-layer completion
//!   of each request the command carried.
//!
//! Worked example (defaults): three 4 KiB writes to sectors 0, 8 and 16 arrive 100 ns apart
//! while the SSD fetches nothing: the first takes slot 0 (ready for the SSD after 20 ns CAM +
//! 500 ns doorbell), the second and third merge into it — one 12 KiB command carrying three
//! host requests. Had the SSD begun fetching slot 0 at 150 ns (barrier until 750 ns), the
//! third write would have waited until 750 ns, found no valid entry, and taken slot 1.
//!
//! ## What it leaves out
//! The host side (`nvme.accelerator`) is `accel_path`: `emit` hands requests to
//! [`Xler::submit`], the SSD's fetch is [`Xler::fetch`] at the accelerator's doorbell, and the
//! driver's interrupt comes at [`Xler::completion_irq_at`].
//! Also left out: SQ-full back-pressure beyond refusing a request, and merges that would need
//! the data itself (overlapping, not adjacent, writes take a new slot).
//!
//! Latency parameters (`AccelConfig`, defaults; config keys `nvme.accel_<name>`): `register_ns` 200 (four posted MMIO writes of
//! ≈ 50 ns CPU each, an estimate), `cam_ns` 20 (one compare cycle of a 250 MHz FPGA engine
//! plus the bitmap update, an estimate), `doorbell_ns` 500 (a peer-to-peer PCIe write, as the
//! device's `pcie.doorbell_ns`), `barrier_ns` 600 (the SSD's command fetch, the device's
//! `ctrl.fetch_ns`), `poll_ns` 100 (the hardware poll loop's period, an estimate), `irq_ns`
//! 500 (the MSI write to the host, as `pcie.doorbell_ns` the other way).

use std::collections::VecDeque;

use engine::{IoOp, SimTime};

/// The accelerator's latencies (the essay gives each one's reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccelConfig {
    pub register_ns: u64,
    pub cam_ns: u64,
    pub doorbell_ns: u64,
    pub barrier_ns: u64,
    pub poll_ns: u64,
    pub irq_ns: u64,
}

impl Default for AccelConfig {
    fn default() -> Self {
        AccelConfig {
            register_ns: 200,
            cam_ns: 20,
            doorbell_ns: 500,
            barrier_ns: 600,
            poll_ns: 100,
            irq_ns: 500,
        }
    }
}

/// One SQ entry in the accelerator's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub op: IoOp,
    pub slba: u64,
    pub sectors: u32,
    /// The host requests (command ids) the entry carries, in arrival order.
    pub cids: Vec<u32>,
}

/// One SQ: its entries, the status bitmap of valid ones and the order the SSD fetches them in.
#[derive(Clone, Debug)]
struct Sq {
    entries: Vec<Option<Entry>>,
    /// Bit `i` of word `i / 64`: slot `i` holds a request the SSD has not begun to fetch.
    valid: Vec<u64>,
    fetch_order: VecDeque<u32>,
    /// The SSD's fetch holds the barrier until then.
    barrier_until: SimTime,
}

impl Sq {
    fn is_valid(&self, slot: u32) -> bool {
        self.valid[slot as usize / 64] & (1 << (slot % 64)) != 0
    }

    /// The valid slots, lowest first: the CAM's match lines in priority order. A slot holds an
    /// entry exactly while it is valid (`submit` fills and sets it, `fetch` clears and takes it),
    /// so these are the occupied slots too.
    fn valid_slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.valid.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    (w * 64) as u32 + b
                })
            })
        })
    }

    /// The lowest slot not valid (so empty), if any.
    fn first_free(&self) -> Option<u32> {
        let (w, word) = self
            .valid
            .iter()
            .enumerate()
            .find(|&(_, &word)| word != u64::MAX)?;
        let slot = (w * 64) as u32 + (!word).trailing_zeros();
        ((slot as usize) < self.entries.len()).then_some(slot)
    }

    fn set_valid(&mut self, slot: u32, on: bool) {
        let (w, b) = (slot as usize / 64, 1u64 << (slot % 64));
        if on {
            self.valid[w] |= b;
        } else {
            self.valid[w] &= !b;
        }
    }
}

/// What the accelerator did with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// Merged into the valid entry in `slot`.
    Merged { slot: u32 },
    /// Took the free `slot`.
    New { slot: u32 },
}

/// A request the accelerator placed: where, and when the SSD may fetch it (its doorbell).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitted {
    pub placed: Placed,
    pub ready_at: SimTime,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AccelError {
    #[error("accelerator SQ {0} does not exist")]
    NoSuchQueue(u16),
    #[error("accelerator SQ {0} has no free slot")]
    Full(u16),
}

/// The accelerator.
pub struct Xler {
    cfg: AccelConfig,
    sqs: Vec<Sq>,
    /// Largest merged command, in sectors.
    max_sectors: u32,
    /// Requests merged into an entry, over the run.
    pub merges: u64,
}

impl Xler {
    /// `queues` SQs of `depth` slots; merged commands up to `max_sectors`.
    pub fn new(cfg: AccelConfig, queues: u16, depth: u32, max_sectors: u32) -> Xler {
        assert!(
            depth > 0 && max_sectors > 0,
            "an SQ holds at least one entry"
        );
        let sq = Sq {
            entries: vec![None; depth as usize],
            valid: vec![0; (depth as usize).div_ceil(64)],
            fetch_order: VecDeque::new(),
            barrier_until: SimTime::ZERO,
        };
        Xler {
            cfg,
            sqs: vec![sq; queues as usize],
            max_sectors,
            merges: 0,
        }
    }

    /// CPU time the driver spends writing one request into the registers.
    pub fn register_ns(&self) -> u64 {
        self.cfg.register_ns
    }

    /// The driver wrote request `cid` (`op`, `sectors` from `slba`) into the registers of
    /// SQ `sq` at `now`: the CAM merges it into a valid adjacent entry or places it in a free
    /// slot, once the barrier is free.
    pub fn submit(
        &mut self,
        now: SimTime,
        sq: u16,
        op: IoOp,
        slba: u64,
        sectors: u32,
        cid: u32,
    ) -> Result<Submitted, AccelError> {
        let max = self.max_sectors;
        let q = self
            .sqs
            .get_mut(sq as usize)
            .ok_or(AccelError::NoSuchQueue(sq))?;
        // The merge logic waits for the SSD's fetch to release the SQ.
        let start = now.max(q.barrier_until);
        let done = start + self.cfg.cam_ns;
        // Only valid slots are compared (the bitmap's set bits, lowest first: the first match).
        let hit = q.valid_slots().find(|&s| {
            q.entries[s as usize].as_ref().is_some_and(|e| {
                let (end, req_end) = (e.slba + e.sectors as u64, slba + sectors as u64);
                let same = e.slba == slba && e.sectors == sectors;
                let adjacent = end == slba || req_end == e.slba;
                e.op == op && (same || (adjacent && e.sectors + sectors <= max))
            })
        });
        if let Some(slot) = hit {
            let e = q.entries[slot as usize]
                .as_mut()
                .expect("valid slot holds an entry");
            if !(e.slba == slba && e.sectors == sectors) {
                let end = (e.slba + e.sectors as u64).max(slba + sectors as u64);
                e.slba = e.slba.min(slba);
                e.sectors = (end - e.slba) as u32;
            }
            e.cids.push(cid);
            self.merges += 1;
            return Ok(Submitted {
                placed: Placed::Merged { slot },
                ready_at: done,
            });
        }
        let slot = q.first_free().ok_or(AccelError::Full(sq))?;
        assert!(
            q.entries[slot as usize].is_none(),
            "SQ {sq} slot {slot} is not valid but holds an entry"
        );
        q.entries[slot as usize] = Some(Entry {
            op,
            slba,
            sectors,
            cids: vec![cid],
        });
        q.set_valid(slot, true);
        q.fetch_order.push_back(slot);
        Ok(Submitted {
            placed: Placed::New { slot },
            ready_at: done + self.cfg.doorbell_ns,
        })
    }

    /// The SSD begins fetching SQ `sq`'s oldest entry at `now`: it takes the barrier for
    /// `barrier_ns` and the entry leaves the CAM (its bit clears) at once.
    pub fn fetch(&mut self, now: SimTime, sq: u16) -> Option<Entry> {
        let q = self.sqs.get_mut(sq as usize)?;
        let slot = q.fetch_order.pop_front()?;
        assert!(q.is_valid(slot), "SQ {sq} slot {slot} fetched twice");
        q.set_valid(slot, false);
        q.barrier_until = q.barrier_until.max(now) + self.cfg.barrier_ns;
        q.entries[slot as usize].take()
    }

    /// Valid (not yet fetched) entries of SQ `sq`.
    pub fn valid_entries(&self, sq: u16) -> u32 {
        self.sqs[sq as usize]
            .valid
            .iter()
            .map(|w| w.count_ones())
            .sum()
    }

    /// A CQE landed in the CQ at `cqe_at`: when the accelerator's poll loop (ticking every
    /// `poll_ns` from 0) sees it and its MSI reaches the driver.
    pub fn completion_irq_at(&self, cqe_at: SimTime) -> SimTime {
        let p = self.cfg.poll_ns.max(1);
        SimTime(cqe_at.as_ns().div_ceil(p) * p + self.cfg.irq_ns)
    }
}

/// The host's side of the accelerator: the model, and by NVMe command id the host requests each
/// command it sent carries (an id is reused once its command completed).
pub(crate) struct AccelDriver {
    xler: Xler,
    carried: Vec<Vec<u32>>,
    free: Vec<u32>,
}

impl AccelDriver {
    pub(crate) fn new(xler: Xler) -> AccelDriver {
        AccelDriver {
            xler,
            carried: Vec::new(),
            free: Vec::new(),
        }
    }

    /// CPU time the driver spends writing one request into the registers.
    pub(crate) fn register_ns(&self) -> u64 {
        self.xler.register_ns()
    }

    /// The driver writes request `r` (`op`, `sectors` from `slba`) into SQ `sq`'s registers
    /// at `now` ([`Xler::submit`]); driver tags bound every SQ, so it always finds room.
    pub(crate) fn write_registers(
        &mut self,
        now: SimTime,
        sq: u16,
        op: IoOp,
        slba: u64,
        sectors: u32,
        r: u32,
    ) -> Submitted {
        self.xler
            .submit(now, sq, op, slba, sectors, r)
            .unwrap_or_else(|e| panic!("request {r}: {e} (driver tags bound every SQ)"))
    }

    /// The SSD fetches SQ `sq`'s oldest entry at `now` (one fetch per entry placed).
    pub(crate) fn fetch(&mut self, now: SimTime, sq: u16) -> Entry {
        self.xler
            .fetch(now, sq)
            .expect("one fetch per entry placed: the SQ has one")
    }

    /// When the interrupt for a CQE that landed at `cqe_at` reaches the driver
    /// ([`Xler::completion_irq_at`]).
    pub(crate) fn completion_irq_at(&self, cqe_at: SimTime) -> SimTime {
        self.xler.completion_irq_at(cqe_at)
    }

    /// A command carrying requests `reqs` leaves: its id.
    pub(crate) fn send(&mut self, reqs: Vec<u32>) -> u32 {
        let cid = match self.free.pop() {
            Some(c) => c,
            None => {
                self.carried.push(Vec::new());
                (self.carried.len() - 1) as u32
            }
        };
        self.carried[cid as usize] = reqs;
        cid
    }

    /// Command `cid` completed: the requests it carried (its id is not free until
    /// [`AccelDriver::release`]).
    pub(crate) fn completed(&mut self, cid: u32) -> Vec<u32> {
        let reqs = std::mem::take(&mut self.carried[cid as usize]);
        assert!(
            !reqs.is_empty(),
            "accelerator command {cid} completed twice"
        );
        reqs
    }

    /// Command `cid`'s requests are completed: its id may carry another command.
    pub(crate) fn release(&mut self, cid: u32) {
        self.free.push(cid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xler() -> Xler {
        Xler::new(AccelConfig::default(), 2, 8, 256)
    }

    /// A command id carries its requests until its completion is released; only then does
    /// the next command reuse it. A completion twice stops the run.
    #[test]
    fn a_command_id_is_reused_only_after_its_release() {
        let mut d = AccelDriver::new(xler());
        assert_eq!(d.send(vec![10, 11]), 0);
        assert_eq!(d.send(vec![12]), 1);
        assert_eq!(d.completed(0), [10, 11]);
        assert_eq!(d.send(vec![13]), 2, "not released yet: a new id");
        d.release(0);
        assert_eq!(d.send(vec![14]), 0);
        assert_eq!(d.completed(0), [14]);
        let twice = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.completed(0)));
        assert!(twice.is_err(), "command 0 completed twice");
    }

    #[test]
    fn adjacent_requests_merge_into_one_command() {
        let mut x = xler();
        let w = |x: &mut Xler, t: u64, slba: u64, cid: u32| {
            x.submit(SimTime(t), 0, IoOp::Write, slba, 8, cid).unwrap()
        };
        let a = w(&mut x, 0, 0, 1);
        assert_eq!(a.placed, Placed::New { slot: 0 });
        assert_eq!(a.ready_at, SimTime(20 + 500), "CAM then doorbell");
        assert_eq!(w(&mut x, 100, 8, 2).placed, Placed::Merged { slot: 0 });
        // Front-adjacent merges too; a gap does not.
        assert_eq!(
            x.submit(SimTime(150), 0, IoOp::Write, 24, 8, 9)
                .unwrap()
                .placed,
            Placed::New { slot: 1 }
        );
        assert_eq!(w(&mut x, 200, 16, 3).placed, Placed::Merged { slot: 0 });
        // A read of the same sectors never merges with a write.
        let r = x.submit(SimTime(250), 0, IoOp::Read, 0, 8, 4).unwrap();
        assert_eq!(r.placed, Placed::New { slot: 2 });
        // Another SQ's entries are not in this SQ's CAM.
        let o = x.submit(SimTime(260), 1, IoOp::Write, 24, 8, 5).unwrap();
        assert_eq!(o.placed, Placed::New { slot: 0 });
        assert_eq!(x.merges, 2);
        let e = x.fetch(SimTime(300), 0).unwrap();
        assert_eq!((e.slba, e.sectors, e.cids), (0, 24, vec![1, 2, 3]));
        assert_eq!(x.valid_entries(0), 2);
    }

    #[test]
    fn never_merges_across_the_barrier() {
        let mut x = xler();
        x.submit(SimTime(0), 0, IoOp::Write, 0, 8, 1).unwrap();
        x.submit(SimTime(0), 0, IoOp::Write, 100, 8, 2).unwrap();
        // The SSD starts fetching slot 0 at 150 ns: the barrier holds the SQ until 750 ns.
        let fetched = x.fetch(SimTime(150), 0).unwrap();
        assert_eq!(fetched.cids, vec![1]);
        // A write adjacent to the entry being fetched waits for the barrier and takes a new
        // slot: the fetched command does not grow under the SSD.
        let s = x.submit(SimTime(200), 0, IoOp::Write, 8, 8, 3).unwrap();
        assert_eq!(s.placed, Placed::New { slot: 0 });
        assert_eq!(s.ready_at, SimTime(750 + 20 + 500));
        // One adjacent to a still-valid entry merges, after the barrier too.
        let m = x.submit(SimTime(300), 0, IoOp::Write, 108, 8, 4).unwrap();
        assert_eq!(m.placed, Placed::Merged { slot: 1 });
        assert_eq!(m.ready_at, SimTime(750 + 20));
        assert_eq!(x.merges, 1);
        // Fetch order is arrival order of the slots' first requests.
        assert_eq!(x.fetch(SimTime(800), 0).unwrap().cids, vec![2, 4]);
        assert_eq!(x.fetch(SimTime(800), 0).unwrap().cids, vec![3]);
        assert_eq!(x.fetch(SimTime(800), 0), None);
    }

    #[test]
    fn the_status_bitmap_bounds_the_sq_and_completions_wait_for_a_poll() {
        let mut x = Xler::new(AccelConfig::default(), 1, 2, 256);
        x.submit(SimTime(0), 0, IoOp::Read, 0, 8, 1).unwrap();
        x.submit(SimTime(0), 0, IoOp::Read, 800, 8, 2).unwrap();
        assert_eq!(
            x.submit(SimTime(0), 0, IoOp::Read, 1600, 8, 3),
            Err(AccelError::Full(0))
        );
        assert_eq!(
            x.submit(SimTime(0), 5, IoOp::Read, 0, 8, 3),
            Err(AccelError::NoSuchQueue(5))
        );
        x.fetch(SimTime(10), 0).unwrap();
        assert!(x.submit(SimTime(10), 0, IoOp::Read, 1600, 8, 3).is_ok());
        // Poll every 100 ns, MSI 500 ns later.
        assert_eq!(x.completion_irq_at(SimTime(1_001)), SimTime(1_600));
        assert_eq!(x.completion_irq_at(SimTime(1_000)), SimTime(1_500));
    }

    /// Past the bitmap's first word: a request takes the lowest free slot, a freed slot is
    /// taken again before any higher one, and a merge goes to the lowest matching valid slot.
    #[test]
    fn slots_beyond_one_bitmap_word_are_found_lowest_first() {
        let mut x = Xler::new(AccelConfig::default(), 1, 130, 256);
        // Non-adjacent reads fill slots 0..130 in order; the SQ is then full.
        for i in 0..130u64 {
            let s = x
                .submit(SimTime(0), 0, IoOp::Read, i * 100, 8, i as u32)
                .unwrap();
            assert_eq!(s.placed, Placed::New { slot: i as u32 });
        }
        assert_eq!(
            x.submit(SimTime(0), 0, IoOp::Read, 1_000_000, 8, 999),
            Err(AccelError::Full(0))
        );
        // Fetching frees slots in fetch order (0, then 1): slot 0 is taken first, then 1.
        x.fetch(SimTime(10), 0).unwrap();
        x.fetch(SimTime(10), 0).unwrap();
        let a = x
            .submit(SimTime(10), 0, IoOp::Read, 1_000_000, 8, 200)
            .unwrap();
        assert_eq!(a.placed, Placed::New { slot: 0 });
        let b = x
            .submit(SimTime(10), 0, IoOp::Read, 2_000_000, 8, 201)
            .unwrap();
        assert_eq!(b.placed, Placed::New { slot: 1 });
        // A read adjacent to slot 100's entry (sectors 10 000..10 008) merges into it.
        let m = x
            .submit(SimTime(10), 0, IoOp::Read, 10_008, 8, 202)
            .unwrap();
        assert_eq!(m.placed, Placed::Merged { slot: 100 });
        assert_eq!(x.valid_entries(0), 130);
    }
}
