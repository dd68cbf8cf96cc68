//! A heap meter for tests that claim constant memory: a counting global allocator that tracks
//! the live heap bytes of each thread (so a test harness's allocations on other threads do
//! not count) and their peak.
//!
//! A test binary installs it with
//! `#[global_allocator] static A: testkit::heap::Counting = testkit::heap::Counting;`, then
//! brackets the work: `let base = heap::reset(); …; let peak = heap::peak_above(base);`.
//! Only allocations made on the calling thread are seen: work the code under test hands to
//! another thread escapes the meter, so use it on single-threaded work.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The counting allocator (forwards to the system allocator).
pub struct Counting;

thread_local! {
    // Const-initialised and without destructors: safe to touch from inside the allocator.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counters are plain thread-local cells that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.get() + layout.size() as isize;
            LIVE.set(live);
            PEAK.set(PEAK.get().max(live));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.set(LIVE.get() - layout.size() as isize);
    }
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
