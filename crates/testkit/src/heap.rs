//! A heap meter for tests that claim constant memory: a counting global allocator that tracks
//! the live heap bytes of each thread (so a test harness's allocations on other threads do
//! not count) and their peak.
//!
//! A test binary installs it with
//! `#[global_allocator] static A: testkit::heap::Counting = testkit::heap::Counting;`, then
//! brackets the work: `let base = heap::reset(); …; let peak = heap::peak_above(base);`.
//! Only allocations made on the calling thread are seen: work the code under test hands to
//! another thread escapes the meter, so use it on single-threaded work.
//!
//! [`Calls`] is the other meter: it counts allocation calls (`alloc` and `realloc`) over the
//! whole process, for a bench that checks an event loop allocates nothing in steady state (a
//! run twice as long should allocate about as often): install it the same way and read
//! [`calls`] before and after.
//!
//! The allocators themselves (`GlobalAlloc`, forwarding to the system allocator) are in
//! `sys.rs`, the crate's one home of `unsafe`; they call `on_alloc`, `on_dealloc` and
//! `on_call` here.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The counting allocator: forwards to the system allocator and counts this thread's live
/// bytes (its `GlobalAlloc` impl is in `sys.rs`).
pub struct Counting;

thread_local! {
    // Const-initialised and without destructors: safe to touch from inside the allocator.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// A block of `bytes` was allocated on this thread. Must not allocate: the allocator calls it.
pub(crate) fn on_alloc(bytes: usize) {
    let live = LIVE.get() + bytes as isize;
    LIVE.set(live);
    PEAK.set(PEAK.get().max(live));
}

/// A block of `bytes` was freed on this thread. Must not allocate: the allocator calls it.
pub(crate) fn on_dealloc(bytes: usize) {
    LIVE.set(LIVE.get() - bytes as isize);
}

/// The allocator that counts allocation calls, process-wide: forwards to the system allocator
/// (its `GlobalAlloc` impl, `realloc` included, is in `sys.rs`).
pub struct Calls;

/// `alloc` and `realloc` calls through [`Calls`] since the process started, on every thread.
static CALLS: AtomicU64 = AtomicU64::new(0);

/// An `alloc` or `realloc` call went through [`Calls`]. Must not allocate: the allocator calls it.
pub(crate) fn on_call() {
    CALLS.fetch_add(1, Ordering::Relaxed);
}

/// Allocation calls through [`Calls`] so far (`alloc` and `realloc`, on every thread).
pub fn calls() -> u64 {
    CALLS.load(Ordering::Relaxed)
}

/// Starts a measurement on this thread: returns the live heap now.
pub fn reset() -> isize {
    let base = LIVE.get();
    PEAK.set(base);
    base
}

/// This thread's peak live heap above `base` since [`reset`], bytes.
pub fn peak_above(base: isize) -> usize {
    (PEAK.get() - base).max(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The meter's arithmetic, driven directly: the peak is the highest live count since the
    /// reset, above its base, and a free lowers the live count but never the peak.
    #[test]
    fn the_peak_is_the_highest_live_count_since_the_reset() {
        let base = reset();
        on_alloc(8_192);
        on_alloc(100);
        on_dealloc(8_192);
        on_alloc(50);
        assert_eq!(peak_above(base), 8_292);
        on_dealloc(100);
        on_dealloc(50);
        assert_eq!(LIVE.get(), base);
        assert_eq!(peak_above(base), 8_292);
        assert_eq!(peak_above(reset()), 0);
    }
}
