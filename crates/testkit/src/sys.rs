//! The pieces of testkit that need `unsafe`: the heap meter's global allocator
//! ([`crate::heap::Counting`]) forwarding to the system allocator, and [`interrupt`], the
//! Ctrl-C a test sends a child process (`kill(2)` with `SIGINT`).
//!
//! # The allocator
//! `GlobalAlloc` is an `unsafe` trait with `unsafe` methods, so an allocator cannot be written
//! without them. Each call goes to [`System`] unchanged, and the meter is told the size through
//! two safe functions of [`crate::heap`] ([`crate::heap::on_alloc`],
//! [`crate::heap::on_dealloc`]), which touch only const-initialised thread-local cells: they
//! never allocate, so they cannot re-enter the allocator.
//!
//! Worked example: a `Vec::<u64>::with_capacity(1024)` on a metered thread asks for 8,192 bytes;
//! `alloc` gets them from `System` and, the pointer being non-null, reports 8,192 to
//! `on_alloc`, which raises this thread's live count (and its peak) by 8,192; dropping the
//! vector comes back through `dealloc` with the same layout and `on_dealloc` lowers the count by
//! 8,192. A failed allocation (null) is not counted.
//!
//! # Signals
//! std's `Child::kill` sends only `SIGKILL`; a test of what a program does on Ctrl-C needs
//! `SIGINT`, sent to a child the test has not yet waited for (so its PID is still that child's).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::process::Child;

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

/// Sends `SIGINT` to `child` (what Ctrl-C sends). Call it before waiting for the child: once
/// reaped, its PID may name another process.
pub fn interrupt(child: &Child) -> io::Result<()> {
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| io::Error::other(format!("pid {} out of range", child.id())))?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; `pid` is the PID of
    // `child`, which `&Child` proves is not yet reaped (waiting takes `&mut Child`, so no wait
    // can run while this borrow lives), so the signal goes to that child and no other process.
    match unsafe { libc::kill(pid, libc::SIGINT) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}
