//! The one piece of testkit that needs `unsafe`: the heap meter's global allocator
//! ([`crate::heap::Counting`]) forwarding to the system allocator.
//!
//! `GlobalAlloc` is an `unsafe` trait with `unsafe` methods, so an allocator cannot be written
//! without them; this file holds exactly that and nothing else. Each call goes to [`System`]
//! unchanged, and the meter is told the size through two safe functions of [`crate::heap`]
//! ([`crate::heap::on_alloc`], [`crate::heap::on_dealloc`]), which touch only const-initialised
//! thread-local cells: they never allocate, so they cannot re-enter the allocator.
//!
//! Worked example: a `Vec::<u64>::with_capacity(1024)` on a metered thread asks for 8,192 bytes;
//! `alloc` gets them from `System` and, the pointer being non-null, reports 8,192 to
//! `on_alloc`, which raises this thread's live count (and its peak) by 8,192; dropping the
//! vector comes back through `dealloc` with the same layout and `on_dealloc` lowers the count by
//! 8,192. A failed allocation (null) is not counted.

use std::alloc::{GlobalAlloc, Layout, System};

use crate::heap::{on_alloc, on_dealloc, Counting};

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract (the pointer, its layout and its alignment are `System`'s); the counting hooks are
// safe functions over thread-local cells that never allocate or unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator; the caller's obligations
        // (a non-zero size) are the same for both.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a `ptr` this allocator returned for `layout`, and this
        // allocator's blocks are `System`'s, allocated with that same layout.
        unsafe { System.dealloc(ptr, layout) };
        on_dealloc(layout.size());
    }
}
