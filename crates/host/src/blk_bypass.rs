//! Block-layer bypass for latency-critical I/O (`blk.bypass_lc`, FlashShare's blk-mq bypass):
//! a latency-critical bio becomes a request that skips the plug, the software queue and the
//! hardware dispatch queue and goes straight to the NVMe driver — as Linux's
//! `blk_mq_try_issue_directly` does for a queue without a scheduler, but for one class only
//! and whatever the scheduler.
//!
//! ## What it models
//! Submitting a latency-critical bio costs `blk.bio_submit_ns` (making the request) plus
//! `blk.hazard_check_ns` (50 ns on arm8: one cache line of each request's sector and length,
//! an estimate) for every request queued on the submitting core's queues (the hazard search
//! compares against all of them, not only the newest `merge_scan_requests`). It never
//! merges with other latency-critical I/O and never waits in a plug; its request takes a driver
//! tag at once and the thread runs `nvme_queue_rq` and the doorbell for it (no `dispatch_ns`:
//! the hardware queue is skipped). The breakdown shows it: the request's hardware-queue time
//! is zero and its software-queue time is only the submission CPU (`blk_submit` tests).
//!
//! **Hazard rule.** A request queued on the same core (its queue or the latency-critical
//! twin's) whose sectors overlap the bio's would be overtaken. So the bypass takes it along:
//! - same direction, and the union of the two ranges fits `max_request_bytes`: the bio merges
//!   into the queued request (a same-range bio rides along; otherwise the request grows to the
//!   union), and that one request goes to the driver now;
//! - otherwise (a read after a queued write, a write after a queued read): the queued request
//!   leaves its queue and both go to the driver on the queued request's SQ, the queued one
//!   first, so the device fetches them in that order (an SQ is fetched in order).
//!
//! If two or more queued requests overlap the bio (or the one it would take along overlaps
//! another queued request), or a driver tag is missing for what must go
//! together, the bio does not bypass: its request joins the end of the overlapping request's
//! queue (or its own, when nothing overlaps) and is dispatched in order from there. Either way
//! read-after-write (and write-after-write, write-after-read) to the same sectors keep their
//! order (property test below, scheduler `none`; mq-deadline and kyber dispatch a queued
//! request by their own rules, which may serve a read before a queued write, as Linux's do).
//!
//! Worked example (arm8, 3 requests queued on the core, none overlapping): 1.5 µs + 3 × 0.05 µs
//! of submission, then 1.2 µs of driver work: the command leaves 2.85 µs after the bio entered
//! the block layer, against 1.5 + 0.6 (merge search) + 0.8 (dispatch) + 1.2 = 4.1 µs queued —
//! and without waiting behind the queued requests' dispatch.
//!
//! ## What it leaves out
//! Requests in other cores' queues or in other threads' plugs (Linux orders nothing between
//! concurrent submitters either), requests already taken by a dispatcher, and the data merge
//! of overlapping writes (the merged command carries the union; the device model has no data).
//!
//! Config keys: `blk.bypass_lc` (needs `attr = "on"`), `blk.bio_submit_ns`,
//! `blk.hazard_check_ns`.

use engine::SimTime;

use crate::blk::{Blk, MergeKind, NO_HCTX};
use crate::pagecache::NIL;

/// What a bypassing bio became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BypassOutcome {
    /// Straight to the driver: `first` (a queued request taken along, `None` if none), then
    /// `req`; both hold driver tags and are `Dispatching`.
    Direct { first: Option<u32>, req: u32 },
    /// Merged into the overlapping queued request `req`, which goes to the driver now
    /// (`Dispatching`, tag held).
    MergedDirect { req: u32 },
    /// Merged into a queued request, or queued behind one: the submitter runs the queue as
    /// usual.
    Queued,
    /// No request could be allocated on `hctx`: wait for one there.
    NoRequest { hctx: u16 },
}

impl Blk {
    /// Requests the hazard search of a bypass from base queue `hctx` compares against.
    pub fn hazard_candidates(&self, hctx: u16) -> u32 {
        self.dispatch_queues(hctx)
            .into_iter()
            .filter(|&h| h != NO_HCTX)
            .map(|h| self.hctx(h).queued() as u32)
            .sum()
    }

    /// Queued requests on base queue `hctx` and its twin overlapping sectors `[lo, hi)`: the
    /// first one found and how many there are.
    fn overlapping(&self, hctx: u16, lo: u64, hi: u64) -> (Option<u32>, u32) {
        let mut first = None;
        let mut count = 0;
        for h in self.dispatch_queues(hctx) {
            if h == NO_HCTX {
                continue;
            }
            for r in self.queued_newest_first(h) {
                let q = &self.reqs[r as usize];
                if q.sector < hi && lo < q.sector + q.sectors as u64 {
                    first.get_or_insert(r);
                    count += 1;
                }
            }
        }
        (first, count)
    }

    /// Submits latency-critical `bio` (from a thread whose base queue is `hctx`; its
    /// submission began at `started`) past the queues, by the hazard rule of the essay.
    pub fn submit_bypass(
        &mut self,
        now: SimTime,
        started: SimTime,
        bio: u32,
        hctx: u16,
    ) -> BypassOutcome {
        let b = self.bios[bio as usize];
        assert!(b.live && b.req == NIL, "bio {bio} submitted twice");
        let (hazard, overlaps) = self.overlapping(hctx, b.sector, b.sector + b.sectors as u64);
        let Some(q) = hazard else {
            let h = self.route(hctx, b.class);
            return self.direct_or_queued(now, started, bio, h, None);
        };
        let qh = self.reqs[q as usize].hctx;
        // The request taken along must not itself overtake a queued request on its sectors.
        let (qlo, qhi) = {
            let r = &self.reqs[q as usize];
            (r.sector, r.sector + r.sectors as u64)
        };
        let q_overlaps = self.overlapping(hctx, qlo, qhi).1;
        if overlaps > 1 || q_overlaps > 1 {
            return match self.alloc_request(now, started, bio, qh) {
                Some(r) => {
                    self.insert(now, r);
                    BypassOutcome::Queued
                }
                None => BypassOutcome::NoRequest { hctx: qh },
            };
        }
        self.count_bypass_hazard();
        let req = self.reqs[q as usize];
        let (lo, hi) = (
            req.sector.min(b.sector),
            (req.sector + req.sectors as u64).max(b.sector + b.sectors as u64),
        );
        let fits = (hi - lo) * 512 <= self.max_request_bytes();
        if req.op == b.op && fits {
            let kind = if (req.sector, req.sectors) == (b.sector, b.sectors) {
                MergeKind::SameLba
            } else {
                MergeKind::Union
            };
            self.attach(q, bio, kind, started);
            self.count_merge(b.class, kind);
            if self.tags_free(qh) == 0 {
                return BypassOutcome::Queued;
            }
            self.remove_queued(q);
            self.start_dispatch(now, q);
            self.count_bypassed();
            return BypassOutcome::MergedDirect { req: q };
        }
        self.direct_or_queued(now, started, bio, qh, Some(q))
    }

    /// A new request for `bio` on `h`: to the driver now (after `before`, taken out of its
    /// queue, when given and there is one), if the tags allow both; else queued at the end of
    /// `h`'s queue.
    fn direct_or_queued(
        &mut self,
        now: SimTime,
        started: SimTime,
        bio: u32,
        h: u16,
        before: Option<u32>,
    ) -> BypassOutcome {
        let Some(r) = self.alloc_request(now, started, bio, h) else {
            return BypassOutcome::NoRequest { hctx: h };
        };
        let need = 1 + u32::from(before.is_some());
        let in_queue = before.is_some_and(|q| self.reqs[q as usize].hctx == h);
        if self.tags_free(h) < need || (before.is_some() && !in_queue) {
            self.insert(now, r);
            return BypassOutcome::Queued;
        }
        if let Some(q) = before {
            self.remove_queued(q);
            self.start_dispatch(now, q);
        }
        self.start_dispatch(now, r);
        self.count_bypassed();
        BypassOutcome::Direct {
            first: before,
            req: r,
        }
    }
}

#[cfg(test)]
mod tests {
    use engine::{IoClass, IoOp, SimTime};
    use proptest::prelude::*;

    use super::*;
    use crate::blk::{BioOwner, ReqState, SubmitOutcome};
    use crate::config::{HostConfig, Merges};

    /// One core, a small queue (`tags` driver tags) so the bypass also meets full tags.
    fn blk(tags: u32, merges: Merges) -> Blk {
        let mut cfg = HostConfig::preset("arm8").unwrap().blk;
        cfg.merges = merges;
        Blk::new(&cfg, 1, tags + 1, 64).with_classes(true)
    }

    #[derive(Clone, Copy, Debug)]
    enum Act {
        /// A throughput bio through the plug into the queue.
        Queue { write: bool, page: u64, pages: u32 },
        /// A latency-critical bio by the bypass.
        Bypass { write: bool, page: u64, pages: u32 },
        /// The queue dispatches one request (a tag permitting).
        Dispatch,
        /// The oldest request in the driver completes.
        Complete,
    }

    fn act() -> impl Strategy<Value = Act> {
        let range = (any::<bool>(), 0u64..6, 1u32..3);
        prop_oneof![
            3 => range.clone().prop_map(|(write, page, pages)| Act::Queue { write, page, pages }),
            2 => range.prop_map(|(write, page, pages)| Act::Bypass { write, page, pages }),
            2 => Just(Act::Dispatch),
            1 => Just(Act::Complete),
        ]
    }

    /// Runs `acts`, then drains; returns, per bio in submission order, (op, first sector,
    /// sectors, the position at which its request reached the driver).
    fn run(acts: &[Act], tags: u32) -> Vec<(IoOp, u64, u32, usize, bool)> {
        let mut b = blk(tags, Merges::Adjacent);
        let mut bios = Vec::new();
        let mut emitted: Vec<u32> = Vec::new();
        let mut in_driver = std::collections::VecDeque::new();
        // Driver position of each bio (request ids are reused; bio ids are not, here).
        let mut pos = std::collections::HashMap::new();
        let emit = |b: &Blk,
                    r: u32,
                    emitted: &mut Vec<u32>,
                    in_driver: &mut std::collections::VecDeque<u32>,
                    pos: &mut std::collections::HashMap<u32, usize>| {
            let mut bio = b.reqs[r as usize].first_bio;
            while bio != NIL {
                pos.insert(bio, emitted.len());
                bio = b.bios[bio as usize].next;
            }
            emitted.push(r);
            in_driver.push_back(r);
        };
        let owner = BioOwner::Direct { thread: 0 };
        for (i, a) in acts.iter().enumerate() {
            let now = SimTime(i as u64);
            match *a {
                Act::Queue { write, page, pages } | Act::Bypass { write, page, pages } => {
                    let op = if write { IoOp::Write } else { IoOp::Read };
                    let lc = matches!(a, Act::Bypass { .. });
                    let class = if lc {
                        IoClass::LatencyCritical
                    } else {
                        IoClass::Throughput
                    };
                    let bio = b.new_bio(op, class, page * 8, pages * 8, owner);
                    if lc {
                        match b.submit_bypass(now, now, bio, 0) {
                            BypassOutcome::Direct { first, req } => {
                                if let Some(q) = first {
                                    emit(&b, q, &mut emitted, &mut in_driver, &mut pos);
                                }
                                emit(&b, req, &mut emitted, &mut in_driver, &mut pos);
                            }
                            BypassOutcome::MergedDirect { req } => {
                                emit(&b, req, &mut emitted, &mut in_driver, &mut pos)
                            }
                            BypassOutcome::Queued => {}
                            BypassOutcome::NoRequest { .. } => {
                                b.free_bio(bio);
                                continue;
                            }
                        }
                    } else {
                        let mut plug = Vec::new();
                        match b.submit_bio(now, now, bio, &mut plug, 0) {
                            SubmitOutcome::NoRequest => {
                                b.free_bio(bio);
                                continue;
                            }
                            _ => {
                                for r in plug {
                                    b.insert(now, r);
                                }
                            }
                        }
                    }
                    bios.push(bio);
                }
                Act::Dispatch => {
                    if let Some(r) = b.pick_dispatch(now, 0) {
                        emit(&b, r, &mut emitted, &mut in_driver, &mut pos);
                    }
                }
                Act::Complete => {
                    if let Some(r) = in_driver.pop_front() {
                        let req = &mut b.reqs[r as usize];
                        assert_eq!(req.state, ReqState::Dispatching);
                        req.state = ReqState::InDevice;
                        b.on_cqe(now, r);
                        b.finish_request(now, r);
                    }
                }
            }
        }
        let end = SimTime(acts.len() as u64);
        for r in in_driver.drain(..) {
            b.reqs[r as usize].state = ReqState::InDevice;
            b.on_cqe(end, r);
            b.finish_request(end, r);
        }
        while let Some(r) = b.pick_dispatch(end, 0) {
            emit(&b, r, &mut emitted, &mut in_driver, &mut pos);
            // Complete it at once so the tags never run out while draining.
            let req = &mut b.reqs[r as usize];
            req.state = ReqState::InDevice;
            b.on_cqe(end, r);
            b.finish_request(end, r);
        }
        assert_eq!(b.hctx(0).queued(), 0, "everything reached the driver");
        bios.iter()
            .map(|&bio| {
                let x = &b.bios[bio as usize];
                (
                    x.op,
                    x.sector,
                    x.sectors,
                    pos[&bio],
                    x.class == IoClass::LatencyCritical,
                )
            })
            .collect()
    }

    proptest! {
        /// A bypassing bio never reaches the driver before an earlier bio on overlapping
        /// sectors when either writes: read-after-write (and write-after-read, write-after-
        /// write) to the same LBA keep their order.
        #[test]
        fn bypass_never_reorders_overlapping_io(
            acts in proptest::collection::vec(act(), 1..60),
            tags in 1u32..5,
        ) {
            let seen = run(&acts, tags);
            // Each bypassing bio is checked against every bio before it (the queue's own
            // merges may reorder queued bios among themselves, as Linux's do).
            for j in (0..seen.len()).filter(|&j| seen[j].4) {
                for i in 0..j {
                    let (a, b) = (seen[i], seen[j]);
                    let overlap = a.1 < b.1 + b.2 as u64 && b.1 < a.1 + a.2 as u64;
                    let writes = a.0 == IoOp::Write || b.0 == IoOp::Write;
                    if overlap && writes {
                        prop_assert!(a.3 <= b.3, "bio {i} {a:?} reached the driver after bio {j} {b:?}");
                    }
                }
            }
        }
    }

    /// A latency-critical read of sectors a queued throughput write covers takes the write
    /// along, write first, on the write's SQ; a read of other sectors goes alone, at once.
    #[test]
    fn a_read_after_a_queued_write_takes_the_write_along() {
        let mut b = blk(8, Merges::Adjacent);
        let owner = BioOwner::Direct { thread: 0 };
        let w = b.new_bio(IoOp::Write, IoClass::Throughput, 80, 8, owner);
        let mut plug = Vec::new();
        b.submit_bio(SimTime(0), SimTime(0), w, &mut plug, 0);
        b.insert(SimTime(0), plug[0]);
        let r = b.new_bio(IoOp::Read, IoClass::LatencyCritical, 800, 8, owner);
        let BypassOutcome::Direct { first: None, req } =
            b.submit_bypass(SimTime(1), SimTime(1), r, 0)
        else {
            panic!("no overlap: straight to the driver");
        };
        assert_eq!(b.reqs[req as usize].state, ReqState::Dispatching);
        let r = b.new_bio(IoOp::Read, IoClass::LatencyCritical, 84, 8, owner);
        let out = b.submit_bypass(SimTime(2), SimTime(2), r, 0);
        assert!(
            matches!(out, BypassOutcome::Direct { first: Some(q), .. } if q == plug[0]),
            "{out:?}"
        );
        assert_eq!(b.hctx(0).queued(), 0);
        assert_eq!((b.stats().bypassed, b.stats().bypass_hazards), (2, 1));
        // A same-direction overlap merges into the queued request and sends it.
        let w2 = b.new_bio(IoOp::Write, IoClass::Throughput, 160, 8, owner);
        let mut plug = Vec::new();
        b.submit_bio(SimTime(3), SimTime(3), w2, &mut plug, 0);
        b.insert(SimTime(3), plug[0]);
        let lw = b.new_bio(IoOp::Write, IoClass::LatencyCritical, 164, 8, owner);
        assert_eq!(
            b.submit_bypass(SimTime(4), SimTime(4), lw, 0),
            BypassOutcome::MergedDirect { req: plug[0] }
        );
        let q = &b.reqs[plug[0] as usize];
        assert_eq!((q.sector, q.sectors, q.bios), (160, 12, 2), "the union");
    }
}
