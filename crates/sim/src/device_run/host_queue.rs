//! The thin host's event queue: its reaps and paced issues, in `engine::EventQueue`'s order.
//!
//! ## What it holds
//! A device-level run's host events are a thread's reap of a completion (once its CPU has
//! done the ISR and the wake-up) and a paced thread's next issue (`rate_iops`, `thinktime`,
//! an open-loop trace). They pop in the order of `engine::EventQueue`: by time, and among
//! equal times in the order they were scheduled (a sequence number each, unique).
//!
//! ## Design: a run in order, a heap for the rest
//! A thread's reaps come out of its CPU one after another, so their times only grow: at QD32
//! a thread runs its CPU about 40 µs behind its completions and every reap is scheduled later
//! than every one pending. Such an event (later than the run's last, or equal with a larger
//! sequence number) joins the back of a run kept in ascending key order; any other goes to a
//! binary heap. A pop takes the smaller of the run's front and the heap's top. The run is a
//! `Vec` and the index of its first pending entry: a pop is a copy and an increment, and the
//! popped entries are cut off the front together, once they are at least [`COMPACT_AFTER`]
//! and half the `Vec` (so the run's room stays within twice what is pending, and the copying
//! is a constant per pop). That is
//! the general queue's far path without its calendar, its 128-bit keys and its out-of-line
//! call: the general queue put every reap in its far run after checking its calendar window,
//! and popped it after comparing against its calendar. `valgrind --tool=callgrind` on
//! `ullstack sim --device zssd` with 200 K 4 KiB random reads at QD32 (a 200 K-I/O
//! `rw=randread`, `iodepth=32` job) counted 909.9 M instructions with the general queue and
//! 899.2 M with this one (its run a `VecDeque` then); 70/30 reads and writes, 939.5 M and
//! 928.5 M. The `Vec` run with its head index took another 5 M off each (887.4 M to 882.3 M,
//! 892.8 M to 887.8 M, counted after the device loop's and the far run's changes).
//!
//! Worked example: `schedule(100, A)` (sequence 0) and `schedule(100, B)` (1) join the run;
//! `schedule(90, C)` (2) is earlier than the run's back and goes to the heap. Pops: C (90, from
//! the heap), A (100, 0), B (100, 1), as the general queue pops them.
//!
//! ## What it leaves out
//! The general queue's calendar (host events are rarely due within a few microseconds of the
//! last popped one) and its reservations (the host reserves nothing).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use engine::SimTime;

/// Popped entries at the run's front that are cut off together (with at least as many still
/// pending): a few cache lines of copying per cut, a few instructions per pop.
pub(super) const COMPACT_AFTER: usize = 64;

/// An event with its key: time, then the sequence number it was scheduled with.
#[derive(Clone, Copy)]
struct Keyed<E> {
    at: SimTime,
    seq: u64,
    event: E,
}

impl<E> Keyed<E> {
    #[inline(always)]
    fn key(&self) -> (SimTime, u64) {
        (self.at, self.seq)
    }
}

impl<E> PartialEq for Keyed<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<E> Eq for Keyed<E> {}
impl<E> PartialOrd for Keyed<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Keyed<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// A min-priority queue of `(SimTime, E)` with FIFO order among equal times.
pub(super) struct HostQueue<E> {
    /// Events in ascending key order, each scheduled later than every one before it; those
    /// before `head` have popped.
    run: Vec<Keyed<E>>,
    /// The run's first pending entry (`run.len()` when none is).
    head: usize,
    /// The other pending events (a max-heap, so reversed).
    heap: BinaryHeap<Reverse<Keyed<E>>>,
    next_seq: u64,
    /// Time of the last popped event: scheduling before it would be time travel.
    last: SimTime,
}

impl<E: Copy> HostQueue<E> {
    pub(super) fn new() -> Self {
        HostQueue {
            run: Vec::new(),
            head: 0,
            heap: BinaryHeap::new(),
            next_seq: 0,
            last: SimTime::ZERO,
        }
    }

    /// Schedules `event` at `at` (not before the last popped event).
    #[inline]
    pub(super) fn schedule(&mut self, at: SimTime, event: E) {
        assert!(
            at >= self.last,
            "host event scheduled in the past: at {at}, now {}",
            self.last
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        let entry = Keyed { at, seq, event };
        // Its sequence number is the largest yet: not earlier than the back is later. (The
        // back is pending: a run whose entries have all popped is cleared.)
        if self.run.last().is_none_or(|b| b.at <= at) {
            self.run.push(entry);
        } else {
            self.heap.push(Reverse(entry));
        }
    }

    /// Time of the earliest pending event.
    #[inline]
    pub(super) fn peek_time(&self) -> Option<SimTime> {
        match (self.run.get(self.head), self.heap.peek()) {
            (Some(r), Some(Reverse(h))) => Some(r.at.min(h.at)),
            (Some(r), None) => Some(r.at),
            (None, Some(Reverse(h))) => Some(h.at),
            (None, None) => None,
        }
    }

    /// Removes and returns the earliest event (FIFO among equal times).
    #[inline]
    pub(super) fn pop(&mut self) -> Option<(SimTime, E)> {
        let from_heap = match (self.run.get(self.head), self.heap.peek()) {
            (Some(r), Some(Reverse(h))) => h.key() < r.key(),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (None, None) => return None,
        };
        let entry = if from_heap {
            self.heap.pop().expect("peeked").0
        } else {
            let entry = self.run[self.head];
            self.head += 1;
            if self.head == self.run.len() {
                self.run.clear();
                self.head = 0;
            } else if self.head >= COMPACT_AFTER && 2 * self.head >= self.run.len() {
                self.run.drain(..self.head);
                self.head = 0;
            }
            entry
        };
        self.last = entry.at;
        Some((entry.at, entry.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::EventQueue;

    /// The worked example: equal times pop in scheduling order, an earlier event from the
    /// heap first.
    #[test]
    fn pops_as_the_worked_example() {
        let mut q = HostQueue::new();
        q.schedule(SimTime(100), 'A');
        q.schedule(SimTime(100), 'B');
        q.schedule(SimTime(90), 'C');
        assert_eq!(q.peek_time(), Some(SimTime(90)));
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['C', 'A', 'B']);
    }

    /// A steady stream (32 pending, one popped per one scheduled) keeps the run's room within
    /// twice what is pending and the compaction threshold.
    #[test]
    fn a_steady_stream_keeps_its_room() {
        let mut q = HostQueue::new();
        for i in 0..32u64 {
            q.schedule(SimTime(i), i);
        }
        for i in 32..100_000u64 {
            let (t, e) = q.pop().expect("32 pending");
            assert_eq!((t.0, e), (i - 32, i - 32));
            q.schedule(SimTime(i), i);
        }
        assert!(
            q.run.len() <= 2 * (32 + COMPACT_AFTER),
            "run of {}",
            q.run.len()
        );
    }

    /// The same pseudo-random schedule of pops and pushes gives the general queue's order.
    #[test]
    fn pops_in_the_general_queues_order() {
        for seed in 0..20u64 {
            let mut ours = HostQueue::new();
            let mut general = EventQueue::new();
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut now = 0u64;
            let mut id = 0u32;
            for _ in 0..2_000 {
                // xorshift64: a deterministic stream of choices.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x % 3 == 0 {
                    let a = ours.pop();
                    let b = general.pop();
                    assert_eq!(a, b, "seed {seed}");
                    if let Some((t, _)) = a {
                        now = t.0;
                    }
                } else {
                    // Often equal times, often in order, sometimes earlier than the back.
                    let at = SimTime(now + (x >> 20) % 50);
                    ours.schedule(at, id);
                    general.schedule(at, id);
                    id += 1;
                }
                assert_eq!(ours.peek_time(), general.peek_time(), "seed {seed}");
            }
            while let Some(b) = general.pop() {
                assert_eq!(ours.pop(), Some(b), "seed {seed}");
            }
            assert_eq!(ours.pop(), None);
        }
    }
}
