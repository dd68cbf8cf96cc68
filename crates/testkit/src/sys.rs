//! The pieces of testkit that need `unsafe`: the heap meters' global allocators
//! ([`crate::heap::Counting`], [`crate::heap::Calls`]) forwarding to the system allocator, and
//! [`interrupt`], the
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
//! 8,192. A failed allocation (null) is not counted. [`crate::heap::Calls`] counts every
//! `alloc` and `realloc` call instead ([`crate::heap::on_call`], an atomic add), and forwards
//! `realloc` to `System`'s, so a growing vector may grow in place as without the meter.
//!
//! # Signals
//! std's `Child::kill` sends only `SIGKILL`; a test of what a program does on Ctrl-C needs
//! `SIGINT`, sent to a child the test has not yet waited for (so its PID is still that child's).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::process::Child;

use crate::heap::{on_alloc, on_call, on_dealloc, Calls, Counting};

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

// SAFETY: as for `Counting`: every call is forwarded unchanged to `System`; the count is an
// atomic add that never allocates or unwinds.
unsafe impl GlobalAlloc for Calls {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        on_call();
        // SAFETY: forwarded unchanged to the system allocator, whose obligations are the same.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_call();
        // SAFETY: `ptr` came from `System` with `layout` (this allocator's blocks are its), and
        // the caller's obligations on `new_size` are `System`'s too.
        unsafe { System.realloc(ptr, layout, new_size) }
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

/// This process's peak resident set, KiB (Linux reports `ru_maxrss` in KiB).
///
/// # Panics
/// When `getrusage(RUSAGE_SELF)` fails (it cannot, given a valid pointer).
pub fn peak_rss_kib() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; getrusage only writes into it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage(RUSAGE_SELF) failed");
    // SAFETY: getrusage returned 0, so it filled the struct (and it was zeroed before).
    let usage = unsafe { usage.assume_init() };
    u64::try_from(usage.ru_maxrss).unwrap_or(0)
}
