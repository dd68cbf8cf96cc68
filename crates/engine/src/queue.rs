//! The event queue: what happens next, in a deterministic order.
//!
//! A discrete-event simulator spends most of its time here, so the queue is built for speed:
//! each pending event is one `u128` key in a binary min-heap, and the event itself sits in a
//! slab slot that is reused once the event has run (no allocation in steady state).
//!
//! The key packs `time_ns (64 bits) | sequence (40 bits) | slot (24 bits)`. Ordering keys
//! orders by time first and, for equal times, by the sequence number the event got when it
//! was scheduled: events at the same nanosecond run in the order they were scheduled
//! (architecture rule 3), whatever the heap's internal layout. The slot rides along in the low
//! bits and never decides order because sequence numbers are unique.
//!
//! Worked example: `schedule(t=100, A)`, `schedule(t=50, B)`, `schedule(t=100, C)` pop as
//! B (50), A (100, seq 0), C (100, seq 2).
//!
//! Limits (asserted): at most 2^24 (16.7 M) events pending at once and 2^40 (1.1 × 10^12)
//! events scheduled over a run — a run at 20 M events/s would need 15 hours to reach it.
//! Measured here (benches/queue.rs) see the README.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::time::SimTime;

const SLOT_BITS: u32 = 24;
const SEQ_BITS: u32 = 40;
const SLOT_MASK: u128 = (1 << SLOT_BITS) - 1;
/// Most events that may be pending at once (slab slots addressable in the key).
pub const MAX_PENDING_EVENTS: usize = 1 << SLOT_BITS;

/// The panic of the always-on time check, out of line: what stays in `schedule` is one compare
/// and a branch never taken (panic formatting inline made the function too big to inline).
#[cold]
#[inline(never)]
fn scheduled_in_the_past(at: SimTime, now: SimTime) -> ! {
    panic!("event scheduled in the past: at {at}, now {now}");
}

#[cold]
#[inline(never)]
fn limit_exceeded(what: &str) -> ! {
    panic!("event queue limit: {what}");
}

/// A min-priority queue of `(SimTime, E)` with FIFO order among equal times.
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<u128>>,
    slots: Vec<Option<E>>,
    free_slots: Vec<u32>,
    next_seq: u64,
    /// Time of the last popped event: scheduling before it would be time travel.
    last_popped: SimTime,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self::with_capacity(1024)
    }

    pub fn with_capacity(pending_events: usize) -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(pending_events),
            slots: Vec::with_capacity(pending_events),
            free_slots: Vec::with_capacity(pending_events),
            next_seq: 0,
            last_popped: SimTime::ZERO,
        }
    }

    /// Schedules `event` to run at `at`. `at` must not precede the last popped event.
    #[inline]
    pub fn schedule(&mut self, at: SimTime, event: E) {
        if at < self.last_popped {
            scheduled_in_the_past(at, self.last_popped);
        }
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                // The slab's own bookkeeping (a slot is freed only by `pop`): debug builds check it.
                debug_assert!(
                    self.slots[slot as usize].is_none(),
                    "free event slot {slot} is occupied"
                );
                self.slots[slot as usize] = Some(event);
                slot
            }
            None => {
                let slot = self.slots.len();
                if slot >= MAX_PENDING_EVENTS {
                    limit_exceeded("more than 2^24 events pending");
                }
                self.slots.push(Some(event));
                slot as u32
            }
        };
        let seq = self.next_seq;
        if seq >= (1 << SEQ_BITS) {
            limit_exceeded("event sequence space (2^40 events per run) exhausted");
        }
        self.next_seq += 1;
        let key = ((at.0 as u128) << 64) | ((seq as u128) << SLOT_BITS) | slot as u128;
        self.heap.push(Reverse(key));
    }

    /// Time of the earliest pending event.
    #[inline]
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap
            .peek()
            .map(|Reverse(key)| SimTime((key >> 64) as u64))
    }

    /// Removes and returns the earliest event (FIFO among equal times).
    #[inline]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let Reverse(key) = self.heap.pop()?;
        let at = SimTime((key >> 64) as u64);
        let slot = (key & SLOT_MASK) as u32;
        let event = self.slots[slot as usize]
            .take()
            .expect("event slot referenced by the heap is occupied");
        self.free_slots.push(slot);
        self.last_popped = at;
        Some((at, event))
    }

    /// Pops the earliest event if it is due at or before `limit`.
    #[inline]
    pub fn pop_due(&mut self, limit: SimTime) -> Option<(SimTime, E)> {
        match self.peek_time() {
            Some(at) if at <= limit => self.pop(),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Events scheduled since the queue was created (a run's event count).
    pub fn scheduled_total(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn equal_times_pop_in_scheduling_order() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(100), 'A');
        q.schedule(SimTime(50), 'B');
        q.schedule(SimTime(100), 'C');
        assert_eq!(q.pop(), Some((SimTime(50), 'B')));
        assert_eq!(q.pop(), Some((SimTime(100), 'A')));
        assert_eq!(q.pop(), Some((SimTime(100), 'C')));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn pop_due_respects_the_limit() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(10), 1);
        q.schedule(SimTime(20), 2);
        assert_eq!(q.pop_due(SimTime(15)), Some((SimTime(10), 1)));
        assert_eq!(q.pop_due(SimTime(15)), None);
        assert_eq!(q.peek_time(), Some(SimTime(20)));
    }

    /// On in release builds too (`cargo test --release` runs this).
    #[test]
    #[should_panic(expected = "event scheduled in the past: at 5ns, now 10ns")]
    fn scheduling_before_the_last_popped_event_stops_the_run() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(10), ());
        q.pop();
        q.schedule(SimTime(5), ());
    }

    #[test]
    fn slots_are_reused() {
        let mut q = EventQueue::new();
        for round in 0..1000u64 {
            q.schedule(SimTime(round), round);
            q.schedule(SimTime(round), round + 1);
            q.pop();
            q.pop();
        }
        assert!(q.slots.len() <= 2, "slab grew to {}", q.slots.len());
        assert_eq!(q.scheduled_total(), 2000);
    }

    proptest! {
        /// Schedules and pops interleaved: every pop is what a sorted reference (time, then
        /// scheduling order) gives, whatever shape the heap is in.
        #[test]
        fn interleaved_pops_match_a_sorted_reference(
            steps in proptest::collection::vec((0u64..40, 0u8..3), 0..600),
        ) {
            let mut q = EventQueue::new();
            let mut reference = std::collections::BTreeSet::new();
            let (mut now, mut n) = (0u64, 0u64);
            for (dt, pops) in steps {
                q.schedule(SimTime(now + dt), n);
                reference.insert((now + dt, n));
                n += 1;
                for _ in 0..pops {
                    let want = reference.pop_first();
                    let got = q.pop().map(|(t, e)| (t.0, e));
                    prop_assert_eq!(got, want);
                    if let Some((t, _)) = got {
                        now = t;
                    }
                }
            }
            while let Some(want) = reference.pop_first() {
                prop_assert_eq!(q.pop().map(|(t, e)| (t.0, e)), Some(want));
            }
            prop_assert!(q.pop().is_none());
        }

        /// Popping yields events sorted by time, FIFO among equal times, none lost.
        #[test]
        fn pops_in_time_then_fifo_order(times in proptest::collection::vec(0u64..50, 0..300)) {
            let mut q = EventQueue::new();
            for (i, t) in times.iter().enumerate() {
                q.schedule(SimTime(*t), i);
            }
            let mut expected: Vec<(u64, usize)> = times.iter().copied().zip(0..).collect();
            expected.sort();
            let mut got = Vec::new();
            while let Some((t, i)) = q.pop() {
                got.push((t.0, i));
            }
            prop_assert_eq!(got, expected);
        }
    }
}
