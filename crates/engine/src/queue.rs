//! The event queue: what happens next, in a deterministic order.
//!
//! A discrete-event simulator spends most of its time here, so the queue is built for speed:
//! each pending event sits next to its `u128` key in a bucket that keeps its room once the
//! event has run (no allocation in steady state).
//!
//! The key packs `time_ns (64 bits) | sequence (64 bits)`. Ordering keys orders by time first
//! and, for equal times, by the sequence number the event got when it was scheduled: events at
//! the same nanosecond run in the order they were scheduled (architecture rule 3), whatever the
//! queue's internal layout. Sequence numbers are unique, so no two keys are equal.
//!
//! Worked example: `schedule(t=100, A)`, `schedule(t=50, B)`, `schedule(t=100, C)` pop as
//! B (50), A (100, seq 0), C (100, seq 2).
//!
//! ## A calendar of near events, a heap of far ones
//! Time is cut into buckets of [`BUCKET_NS`] (128 ns). The next [`WHEEL_BUCKETS`] buckets from
//! the last popped event's (64, 8.2 µs) form a circular calendar (Brown's calendar queue, 1988,
//! with one year): an event due in that window goes to its bucket, a short `Vec` kept in
//! descending order of key, so the bucket's earliest is its last; a bit per bucket says which
//! are non-empty. Events further out go to a binary heap (or to a run in front of it, below).
//! The earliest pending event is the smaller of the first non-empty bucket's last key (the bit
//! map finds the bucket) and the smallest far key: the keys decide, so where an event waits
//! never changes the order. It is found once per pop and kept for [`EventQueue::peek_time`].
//!
//! Why: a device-level run keeps about one event pending per command in flight, nearly all due
//! within a few microseconds (doorbells, fetches, firmware, NAND reads, DMAs), and a bucket of
//! 128 ns holds one or two of them, so a schedule is an append (and a step or two of insertion)
//! and a pop a bit scan, where the binary heap that held every event before compared keys along
//! its depth on every schedule and every pop. `valgrind --tool=callgrind` on `cargo bench -p sim
//! --bench device_throughput a-zssd` counted 6.75 G instructions with the binary heap and
//! 6.17 G with a calendar of 1,024 buckets (131 µs) in its place. That many buckets, each with
//! its own allocation, no longer fit the CPU's L1 data cache: with the rest of the device as
//! now, cachegrind (`--cache-sim=yes`) counted 41.7 M L1 data misses with 1,024 buckets and
//! 20.5 M with 64 (for 5.81 G and 6.03 G instructions: more events wait in the heap), and the
//! 64 ran faster. Slower NAND (a TLC read's 45 µs) waits in the heap, as every event did
//! before. Tried and not kept: a 4-ary heap (7.06 G instructions) and a radix heap (7.57 G:
//! popping moved the rest of the smallest key's bucket down, a few keys each time).
//!
//! A burst breaks the "one or two": a device that starts many commands at one instant (64
//! prefetch reads behind one demand read) schedules events at one time, each with the largest
//! key yet, and insertion from the end walked past the whole bucket for each of them. So a
//! key later than the bucket's first goes to the front with no walk: the study stacks that
//! prefetch (`cacheopt` and on) simulate their co-runs in about 5 % fewer instructions, and no
//! other run moves by more than 1 %.
//!
//! ## Far events mostly come in order
//! What waits past the window is mostly work queued behind a busy resource whose end times
//! only grow: a host thread whose CPU runs 40 µs behind its completions (its reaps, and the
//! doorbells of the commands it submits after them), or a channel booked far ahead. So a far
//! event later than every one in the *run* (in ascending key order) joins the run's back, and
//! only one that is not goes to the heap; the earliest pending event is the smaller of the
//! bucket's last and `far_min`, the smallest far key, kept up to date when a far event comes or
//! goes, so a pop from the calendar never looks at the run or the heap. A pop from the run
//! takes its front where the heap's moved entries along its depth: callgrind on
//! `ullstack sim --device zssd` with 200 K 4 KiB random reads at QD32 (host-bound: every reap
//! and every doorbell is far) counted 1.178 G instructions with the heap alone and 1.138 G
//! with the run and `far_min` (1.179 G with the run alone, each pop peeking at all three).
//! The run is a `Vec` and the index of its first pending entry, the popped entries cut off
//! together once they are `FAR_COMPACT_AFTER` and half the `Vec` (as the thin host's queue
//! does, `sim::device_run::host_queue`), and a far event joining its back is pushed inline
//! (only one out of order calls out): with the same command the device's pops and doorbell
//! schedules counted about 20 M instructions fewer than with a `VecDeque` pushed out of line.
//!
//! One event far behind the rest would spoil the run for a stream that only grows: in a 70/30
//! run a flash program's end (hundreds of microseconds out) joined the run's back, and every
//! doorbell after it, earlier than the program's end, went to the heap until the program
//! ended. So an event earlier than the run's last but later than the one before it takes the
//! last's place, and the last goes to the heap: the run stays in order, the stream stays in
//! the run, and the heap holds the few outliers. Callgrind on the same command with a 200 K
//! 70/30 job counted 919.3 M instructions before and 892.8 M after (197,662 heap pops before,
//! 15,241 after); the random reads, which never put an event in the heap, 886.8 M and 887.4 M.
//!
//! Worked example: the last event popped at 1,000 ns (bucket 7). `schedule(1,300)` goes to
//! bucket 10, `schedule(1,290)` too (after it in the `Vec`: it is earlier), and
//! `schedule(20,000)` to the far run (bucket 156 is past 7 + 64; the run was empty), and a
//! `schedule(15,000)` after it to the heap (earlier than the run's back, with nothing before
//! it in the run). Then `schedule(90,000)` joins the run and `schedule(30,000)` takes its place
//! (later than 20,000), 90,000 going to the heap. Pops: 1,290 and 1,300 from bucket 10, then
//! the heap's 15,000, the run's 20,000 and 30,000 and the heap's 90,000 once no bucket holds
//! anything earlier.
//!
//! ## Reserved places: events that turn out to have nothing to do
//! Some events usually do nothing when they run: a device's fetch engine comes free, and at
//! QD32 it nearly always finds no doorbell waiting, so the next doorbell starts the fetch
//! itself. [`EventQueue::reserve`] takes such an event's key (its time and the next sequence
//! number) without scheduling it; whoever could give it work schedules it in that place with
//! [`EventQueue::schedule_reserved`] while it has not [passed](EventQueue::has_passed) (no
//! popped event came after it). Every other event gets the sequence number it would have got,
//! and an event scheduled into its reserved place runs where it would have run, so a
//! reservation changes no order; one never scheduled counts in `scheduled_total` as an event
//! that ran and did nothing. Worked example: `reserve(100)` (sequence 0), `schedule(100, A)`
//! (1), `schedule(90, B)` (2); B pops, the reservation has not passed (B's key is smaller), and
//! `schedule_reserved(r, R)` makes the pops R then A, as if R had been scheduled at the start.
//!
//! Measured here (benches/queue.rs) see the README.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::SimTime;

/// Width of a calendar bucket: 2^7 = 128 ns.
const BUCKET_SHIFT: u32 = 7;
pub const BUCKET_NS: u64 = 1 << BUCKET_SHIFT;
/// Buckets in the calendar (its window is 64 × 128 ns = 8.2 µs): one bit each in a `u64`.
pub const WHEEL_BUCKETS: usize = 64;

/// The panic of the always-on time check, out of line: what stays in `schedule` is one compare
/// and a branch never taken (panic formatting inline made the function too big to inline).
#[cold]
#[inline(never)]
fn scheduled_in_the_past(at: SimTime, now: SimTime) -> ! {
    panic!("event scheduled in the past: at {at}, now {now}");
}

/// The calendar bucket number (not wrapped) of `key`'s time.
#[inline]
fn bucket_number(key: u128) -> u64 {
    (key >> (64 + BUCKET_SHIFT)) as u64
}

/// Popped entries at the far run's front that are cut off together (with at least as many
/// still pending): a few cache lines of copying per cut, a few instructions per pop.
const FAR_COMPACT_AFTER: usize = 64;

/// A pending event and its key, `time_ns << 64 | sequence`.
#[derive(Clone, Copy)]
struct Entry<E> {
    key: u128,
    event: E,
}

/// An entry of the far heap: `BinaryHeap` is a max-heap, so the order is the keys' reversed.
struct Far<E>(Entry<E>);

impl<E> PartialEq for Far<E> {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}
impl<E> Eq for Far<E> {}
impl<E> PartialOrd for Far<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Far<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.key.cmp(&self.0.key)
    }
}

/// A min-priority queue of `(SimTime, E)` with FIFO order among equal times.
pub struct EventQueue<E> {
    /// `wheel[b]`: the events due in calendar bucket `b` (numbers from `cursor` to
    /// `cursor + WHEEL_BUCKETS - 1`, wrapped), in descending order of key.
    /// An array, not a `Vec`: a bucket number masked to the array's size needs no bounds
    /// check, and the buckets sit in the queue itself, not behind a pointer.
    wheel: [Vec<Entry<E>>; WHEEL_BUCKETS],
    /// Bit `b` set when `wheel[b]` is non-empty.
    occupied: u64,
    /// Bucket number of the last popped event: no pending event is due before it.
    cursor: u64,
    /// Events due after the calendar's window when they were scheduled, each later than every
    /// event in `far_run` then (a run in ascending key order); those before `far_head` have
    /// popped.
    far_run: Vec<Entry<E>>,
    /// The far run's first pending entry (`far_run.len()` when none is).
    far_head: usize,
    /// The other events due after the calendar's window when they were scheduled.
    far: BinaryHeap<Far<E>>,
    /// The smallest key of `far_run` and `far` (`u128::MAX` when both are empty), so that a
    /// pop looks at the far events only when one of them is the earliest.
    far_min: u128,
    /// The smallest pending key (`u128::MAX` while `len` is 0).
    min: u128,
    len: usize,
    next_seq: u64,
    /// Key of the last popped event (0 before the first): scheduling before its time would be
    /// time travel, and a [`Reservation`] with a smaller key has passed.
    last_key: u128,
}

/// A place in the event order taken for an event that may turn out to have nothing to do
/// ([`EventQueue::reserve`]): its key is fixed when it is taken, so the event, if scheduled
/// later ([`EventQueue::schedule_reserved`]), runs exactly where it would have run had it been
/// scheduled then, and every other event keeps its sequence number either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    key: u128,
}

impl Reservation {
    /// When the reserved event would run.
    pub fn time(self) -> SimTime {
        SimTime((self.key >> 64) as u64)
    }
}

impl<E: Copy> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Copy> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            wheel: std::array::from_fn(|_| Vec::new()),
            occupied: 0,
            cursor: 0,
            far_run: Vec::new(),
            far_head: 0,
            far: BinaryHeap::new(),
            far_min: u128::MAX,
            min: u128::MAX,
            len: 0,
            next_seq: 0,
            last_key: 0,
        }
    }

    /// Schedules `event` to run at `at`. `at` must not precede the last popped event.
    /// Always inlined (a device event handler schedules one to three events): the calendar's
    /// append is a few instructions, fewer than a call's register saves and the event's copy
    /// through memory; the far path stays out of line.
    #[inline(always)]
    pub fn schedule(&mut self, at: SimTime, event: E) {
        let key = self.next_key(at);
        self.insert(key, event);
    }

    /// The key of an event scheduled now for `at`: its time and the next sequence number.
    #[inline(always)]
    fn next_key(&mut self, at: SimTime) -> u128 {
        let last = self.last_time();
        if at < last {
            scheduled_in_the_past(at, last);
        }
        // 2^64 events per run: a run at 20 M events/s would need 29,000 years to wrap.
        let key = ((at.0 as u128) << 64) | self.next_seq as u128;
        self.next_seq += 1;
        key
    }

    /// Time of the last popped event.
    #[inline(always)]
    fn last_time(&self) -> SimTime {
        SimTime((self.last_key >> 64) as u64)
    }

    /// Takes the place in the order that `schedule(at, _)` would give an event now, without
    /// scheduling one: for an event that often turns out to have nothing to do, decided later
    /// (an idle fetch engine coming free, say). Until it is scheduled with
    /// [`schedule_reserved`](Self::schedule_reserved) it is not pending ([`len`](Self::len),
    /// [`peek_time`](Self::peek_time)); it counts in [`scheduled_total`](Self::scheduled_total)
    /// from now, as a run event that had nothing to do once it has
    /// [passed](Self::has_passed).
    #[inline(always)]
    pub fn reserve(&mut self, at: SimTime) -> Reservation {
        Reservation {
            key: self.next_key(at),
        }
    }

    /// Whether an event popped since `r` was taken comes after it in the order: the reserved
    /// event can no longer be scheduled (it would have run before that one).
    #[inline(always)]
    pub fn has_passed(&self, r: Reservation) -> bool {
        self.last_key > r.key
    }

    /// Schedules `event` in the place `r` reserved. The place must not have passed.
    #[inline]
    pub fn schedule_reserved(&mut self, r: Reservation, event: E) {
        assert!(
            !self.has_passed(r),
            "reserved event at {} scheduled after an event that follows it ran",
            r.time()
        );
        self.insert(r.key, event);
    }

    /// Puts `event` in the calendar or the far events under `key` (not before the last
    /// popped key).
    #[inline(always)]
    fn insert(&mut self, key: u128, event: E) {
        let n = bucket_number(key);
        debug_assert!(
            n >= self.cursor,
            "key due before the calendar's first bucket"
        );
        if n - self.cursor < WHEEL_BUCKETS as u64 {
            let b = (n % WHEEL_BUCKETS as u64) as usize;
            let bucket = &mut self.wheel[b];
            // Descending order, the earliest last. A key later than the first (a burst
            // scheduled for one instant: each has the largest key yet) goes first without a
            // scan; any other is inserted from the end, where most land in a step or two.
            if bucket.first().is_none_or(|f| f.key < key) {
                bucket.insert(0, Entry { key, event });
            } else {
                let mut i = bucket.len();
                while bucket[i - 1].key < key {
                    i -= 1;
                }
                bucket.insert(i, Entry { key, event });
            }
            self.occupied |= 1 << b;
        } else if self.far_run.last().is_none_or(|last| last.key < key) {
            // The far run's back (the common far case: a stream that only grows), inline. (The
            // back is pending: a run whose entries have all popped is cleared.)
            self.far_run.push(Entry { key, event });
            self.far_min = self.far_min.min(key);
        } else {
            self.schedule_far(Entry { key, event });
        }
        // `min` is `u128::MAX` while the queue is empty: any key is smaller.
        self.min = self.min.min(key);
        self.len += 1;
    }

    /// An event due past the calendar's window and not after the far run's back (`insert`
    /// puts those on the back): if only the run's last is later, the event in its place and
    /// that last to the heap; else the heap. Out of line: rare.
    #[inline(never)]
    fn schedule_far(&mut self, entry: Entry<E>) {
        let key = entry.key;
        // The run's back is pending: a run whose entries have all popped is cleared.
        let pending = &self.far_run[self.far_head..];
        if pending
            .len()
            .checked_sub(2)
            .is_some_and(|i| pending[i].key < key)
        {
            // One event far behind the rest (a program's end among doorbells) would send
            // every later one of the run's stream to the heap: it goes there instead.
            let last = self.far_run.pop().expect("the run holds two or more");
            self.far.push(Far(last));
            self.far_run.push(entry);
        } else {
            self.far.push(Far(entry));
        }
        self.far_min = self.far_min.min(key);
    }

    /// The first non-empty calendar bucket, in time order from the cursor's.
    #[inline]
    fn first_bucket(&self) -> Option<usize> {
        let start = (self.cursor % WHEEL_BUCKETS as u64) as u32;
        // Rotated so that the cursor's bucket is bit 0: the lowest set bit is the earliest.
        let bits = self.occupied.rotate_right(start);
        (bits != 0).then(|| ((start + bits.trailing_zeros()) % WHEEL_BUCKETS as u32) as usize)
    }

    /// Removes the earliest entry (the queue is not empty) and finds the next earliest.
    /// Always inlined, as `pop` is: an event loop has one or two pop sites, and a call
    /// returned the entry through memory and saved registers on every event.
    #[inline(always)]
    fn pop_entry(&mut self) -> Entry<E> {
        let key = self.min;
        let entry = if key == self.far_min {
            let entry = match self.far_run.get(self.far_head) {
                Some(&f) if f.key == key => {
                    self.far_head += 1;
                    if self.far_head == self.far_run.len() {
                        self.far_run.clear();
                        self.far_head = 0;
                    } else if self.far_head >= FAR_COMPACT_AFTER
                        && 2 * self.far_head >= self.far_run.len()
                    {
                        self.far_run.drain(..self.far_head);
                        self.far_head = 0;
                    }
                    f
                }
                _ => {
                    self.far
                        .pop()
                        .expect("the far minimum is the run's or the heap's")
                        .0
                }
            };
            let run = self.far_run.get(self.far_head).map_or(u128::MAX, |f| f.key);
            let heap = self.far.peek().map_or(u128::MAX, |f| f.0.key);
            self.far_min = run.min(heap);
            entry
        } else {
            let b = (bucket_number(key) % WHEEL_BUCKETS as u64) as usize;
            let bucket = &mut self.wheel[b];
            let entry = bucket.pop().expect("the earliest key's bucket holds it");
            if bucket.is_empty() {
                self.occupied &= !(1 << b);
            }
            entry
        };
        debug_assert_eq!(entry.key, key, "the earliest key is its bucket's last");
        self.cursor = bucket_number(key);
        self.len -= 1;
        let near = self.first_bucket().map(|b| {
            self.wheel[b]
                .last()
                .expect("an occupied bucket holds an event")
                .key
        });
        // No key is `u128::MAX` (it would need 2^64 - 1 events scheduled at the last
        // nanosecond), so the sentinel never wins over a pending event; an empty queue's
        // `min` is the sentinel.
        self.min = near.unwrap_or(u128::MAX).min(self.far_min);
        debug_assert_eq!(
            self.min == u128::MAX,
            self.len == 0,
            "a pending event is in the calendar, the run or the heap"
        );
        entry
    }

    /// Time of the earliest pending event.
    #[inline]
    pub fn peek_time(&self) -> Option<SimTime> {
        (self.len > 0).then_some(SimTime((self.min >> 64) as u64))
    }

    /// Removes and returns the earliest event (FIFO among equal times).
    #[inline(always)]
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        if self.len == 0 {
            return None;
        }
        let entry = self.pop_entry();
        self.last_key = entry.key;
        Some((SimTime((entry.key >> 64) as u64), entry.event))
    }

    /// Pops the earliest event if it is due at or before `limit`. Always inlined: an event
    /// loop's last call finds nothing due, and that answer is two compares, where a call of
    /// the whole pop (too big to inline with it) cost its prologue and epilogue each time.
    #[inline(always)]
    pub fn pop_due(&mut self, limit: SimTime) -> Option<(SimTime, E)> {
        if self.len == 0 || (self.min >> 64) as u64 > limit.0 {
            return None;
        }
        self.pop()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
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

    /// A burst at one instant (each key the largest yet) goes to the bucket's front; events
    /// earlier than the burst, in the same bucket, still pop first, and the burst pops in
    /// scheduling order.
    #[test]
    fn a_burst_at_one_instant_keeps_its_order_beside_earlier_events() {
        let mut q = EventQueue::new();
        for i in 0..100u32 {
            q.schedule(SimTime(1_000), i);
            if i % 10 == 0 {
                q.schedule(SimTime(1_000 - 1 - u64::from(i) / 10), 1_000 + i);
            }
        }
        assert_eq!(q.wheel.iter().map(Vec::len).sum::<usize>(), 110);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        let earlier: Vec<u32> = (0..10).rev().map(|k| 1_000 + 10 * k).collect();
        let burst: Vec<u32> = (0..100).collect();
        assert_eq!(order, [earlier, burst].concat());
    }

    #[test]
    fn buckets_keep_their_room() {
        let mut q = EventQueue::new();
        for round in 0..1000u64 {
            q.schedule(SimTime(round * 300), round);
            q.schedule(SimTime(round * 300), round + 1);
            q.pop();
            q.pop();
        }
        let room: usize = q.wheel.iter().map(Vec::capacity).sum();
        assert!(
            room <= 4 * WHEEL_BUCKETS,
            "the calendar grew to {room} entries"
        );
        assert_eq!(q.scheduled_total(), 2000);
        assert!(q.is_empty());
    }

    /// Events on both sides of the calendar's wrap (bucket 1,023 then 0), and beyond its window,
    /// pop in time order; an event past the window that the cursor has caught up with still
    /// waits for the earlier ones of the calendar.
    #[test]
    fn the_calendar_wraps_and_far_events_keep_their_place() {
        let window_ns = WHEEL_BUCKETS as u64 * BUCKET_NS;
        let mut q = EventQueue::new();
        q.schedule(SimTime(window_ns - 100), 'a'); // last bucket of the first turn
        q.schedule(SimTime(window_ns + 50), 'c'); // bucket 0 of the second turn: the heap
        q.pop();
        q.schedule(SimTime(window_ns + 10), 'b'); // in the window now: bucket 0
        q.schedule(SimTime(3 * window_ns), 'e');
        q.schedule(SimTime(window_ns + 50), 'd'); // same time as 'c', scheduled later
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['b', 'c', 'd', 'e']);
    }

    /// Far events in ascending order go to the run, a later one that is earlier than the
    /// run's back to the heap, unless it is later than the event before the back: then it
    /// takes the back's place and the back goes to the heap. Pops take the smallest key of
    /// calendar, run and heap.
    #[test]
    fn far_events_out_of_order_pop_in_time_order() {
        let far = WHEEL_BUCKETS as u64 * BUCKET_NS * 4;
        let mut q = EventQueue::new();
        q.schedule(SimTime(far), 'b');
        q.schedule(SimTime(far + 10), 'd');
        q.schedule(SimTime(far - 10), 'a'); // earlier than the run's back and 'b': the heap
        q.schedule(SimTime(far + 5), 'c'); // after 'b', before 'd': 'd''s place, 'd' to the heap
        q.schedule(SimTime(far + 10), 'e'); // same time as 'd', scheduled later: the run
        q.schedule(SimTime(5), 'n'); // the calendar
        assert_eq!(q.far_run.len() - q.far_head, 3);
        assert_eq!(q.far.len(), 2);
        q.schedule(SimTime(far + 100), 'g'); // the run's back
        q.schedule(SimTime(far + 50), 'f'); // after 'e', before 'g': takes 'g''s place
        assert_eq!(q.far_run.len() - q.far_head, 4);
        assert_eq!(q.far.len(), 3);
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['n', 'a', 'b', 'c', 'd', 'e', 'f', 'g']);
    }

    /// A steady stream of far events in order (32 pending, one popped per one scheduled) pops
    /// in order from the far run, whose room stays within twice what is pending and the
    /// compaction threshold.
    #[test]
    fn a_steady_far_stream_keeps_the_runs_room() {
        // 32 events apart is 4 windows: each new event is past the calendar.
        let step_ns = WHEEL_BUCKETS as u64 * BUCKET_NS / 8;
        let mut q = EventQueue::new();
        for i in 0..32u64 {
            q.schedule(SimTime(i * step_ns), i);
        }
        for i in 32..100_000u64 {
            let (t, e) = q.pop().expect("32 pending");
            assert_eq!((t.0, e), ((i - 32) * step_ns, i - 32));
            q.schedule(SimTime(i * step_ns), i);
            assert!(
                q.far_run.len() <= 2 * (32 + FAR_COMPACT_AFTER),
                "far run of {}",
                q.far_run.len()
            );
        }
        assert!(
            q.far.is_empty(),
            "an in-order stream never reaches the heap"
        );
    }

    /// A reserved event scheduled later runs in its reserved place: after the events scheduled
    /// before the reservation at its time, before those scheduled after it; one never
    /// scheduled is not pending but counts once it has passed.
    #[test]
    fn a_reserved_event_runs_in_its_reserved_place() {
        let mut q = EventQueue::new();
        q.schedule(SimTime(100), 'a');
        let r = q.reserve(SimTime(100));
        q.schedule(SimTime(100), 'c');
        q.schedule(SimTime(50), 'x');
        assert_eq!((q.len(), q.scheduled_total()), (3, 4));
        assert_eq!(q.pop(), Some((SimTime(50), 'x')));
        assert!(!q.has_passed(r));
        q.schedule_reserved(r, 'b');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['a', 'b', 'c']);

        let unused = q.reserve(SimTime(200));
        q.schedule(SimTime(200), 'd');
        assert_eq!(q.peek_time(), Some(SimTime(200)));
        q.pop();
        assert!(
            q.has_passed(unused),
            "'d' was scheduled after the reservation"
        );
        assert!(q.is_empty());
        assert_eq!(q.scheduled_total(), 6);
    }

    #[test]
    #[should_panic(
        expected = "reserved event at 100ns scheduled after an event that follows it ran"
    )]
    fn a_reserved_place_that_has_passed_cannot_be_used() {
        let mut q = EventQueue::new();
        let r = q.reserve(SimTime(100));
        q.schedule(SimTime(100), 1);
        q.pop();
        q.schedule_reserved(r, 0);
    }

    proptest! {
        /// Schedules and pops interleaved: every pop is what a sorted reference (time, then
        /// scheduling order) gives, whatever shape the heap is in. Delays from 0 to 2^48 ns
        /// (`dt << shift`) put keys in low and high buckets alike, and `peek_time` must always
        /// name the next pop's time.
        #[test]
        fn interleaved_pops_match_a_sorted_reference(
            steps in proptest::collection::vec((0u64..40, 0u32..9, 0u8..3), 0..600),
        ) {
            let mut q = EventQueue::new();
            let mut reference = std::collections::BTreeSet::new();
            let (mut now, mut n) = (0u64, 0u64);
            for (dt, shift, pops) in steps {
                let dt = dt << (shift * 6);
                q.schedule(SimTime(now + dt), n);
                reference.insert((now + dt, n));
                n += 1;
                for _ in 0..pops {
                    let want = reference.pop_first();
                    prop_assert_eq!(q.peek_time().map(|t| t.0), want.map(|(t, _)| t));
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

        /// Reservations among scheduled events: each one scheduled before it passes (at a
        /// random later step, or never) pops exactly where a sorted reference of every event
        /// by (time, sequence) puts it; the others never pop.
        #[test]
        fn reserved_events_pop_in_their_reserved_order(
            steps in proptest::collection::vec((0u64..30, any::<bool>(), 0u8..3, 0u8..4), 0..400),
        ) {
            let mut q = EventQueue::new();
            let mut reference = std::collections::BTreeSet::new();
            // Reservations not yet scheduled: (reservation, its sequence, steps to wait).
            let mut waiting: Vec<(Reservation, u64, u8)> = Vec::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for (dt, reserve, pops, wait) in steps {
                if reserve {
                    waiting.push((q.reserve(SimTime(now + dt)), seq, wait));
                } else {
                    q.schedule(SimTime(now + dt), seq);
                    reference.insert((now + dt, seq));
                }
                seq += 1;
                // Schedule the reservations whose wait is over, unless they have passed.
                for (r, s, wait) in &mut waiting {
                    if *wait == 0 && !q.has_passed(*r) {
                        q.schedule_reserved(*r, *s);
                        reference.insert((r.time().0, *s));
                    }
                    *wait = wait.wrapping_sub(1);
                }
                waiting.retain(|&(r, _, wait)| wait != u8::MAX && !q.has_passed(r));
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
            prop_assert_eq!(q.scheduled_total(), seq);
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
