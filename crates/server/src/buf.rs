//! Aligned I/O buffers and the per-worker pool that recycles them.
//!
//! # What it implements
//! Every request that carries data (a READ's reply payload, a WRITE's payload) owns one
//! [`IoBuf`] from the moment its header is decoded until its reply is sent. `O_DIRECT` wants the
//! buffer's address aligned to the device's DMA alignment (512 B or 4 KiB), so every buffer is
//! 4 KiB-aligned, which satisfies both.
//!
//! # Design
//! A buffer is a raw allocation with a fixed capacity; ownership moves (worker → backend →
//! worker) instead of being borrowed, so a buffer handed to io_uring cannot be freed or reused
//! while the kernel writes into it: the backend keeps it until the completion arrives. Moving
//! the `IoBuf` value moves only the pointer, never the bytes.
//!
//! The pool keeps freed buffers in power-of-two size classes from 4 KiB to 32 MiB. Worked
//! example: a 4 KiB random-read load allocates 32 buffers for an iodepth-32 client once and then
//! recycles them forever; a single 1 MiB write takes a buffer from the 1 MiB class. Each class
//! keeps at most [`POOL_KEEP_BYTES_PER_CLASS`] bytes of idle buffers, so a burst of 32 MiB writes
//! does not pin a gigabyte after it ends.
//!
//! # What it leaves out
//! Registered (fixed) buffers for io_uring: the pool would register its slabs once; left for
//! later because the memory backend (the benchmark path) does not touch the ring at all.

use std::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment of every buffer: satisfies O_DIRECT on 512 B and 4 KiB devices.
pub const BUF_ALIGN_BYTES: usize = 4096;
/// Smallest size class.
const MIN_CLASS_BYTES: usize = 4096;
/// Size classes 4 KiB, 8 KiB, … 32 MiB.
const CLASS_COUNT: usize = 14;
/// Idle bytes a pool keeps per size class (at least one buffer of each class).
pub const POOL_KEEP_BYTES_PER_CLASS: usize = 8 << 20;

/// An owned, 4 KiB-aligned byte buffer with a length ≤ its capacity.
pub struct IoBuf {
    ptr: Option<NonNull<u8>>,
    capacity_bytes: usize,
    len_bytes: usize,
}

// SAFETY: IoBuf uniquely owns its allocation (like Vec<u8>); no aliasing handles exist.
unsafe impl Send for IoBuf {}

impl IoBuf {
    /// A buffer that holds nothing (FLUSH, TRIM): no allocation.
    pub fn empty() -> IoBuf {
        IoBuf {
            ptr: None,
            capacity_bytes: 0,
            len_bytes: 0,
        }
    }

    /// A fresh zeroed buffer of exactly `capacity_bytes` (rounded up to the alignment).
    pub fn zeroed(capacity_bytes: usize) -> IoBuf {
        Self::allocate(capacity_bytes, true)
    }

    fn allocate(capacity_bytes: usize, zero: bool) -> IoBuf {
        if capacity_bytes == 0 {
            return IoBuf::empty();
        }
        let capacity_bytes = capacity_bytes.next_multiple_of(BUF_ALIGN_BYTES);
        let layout = Layout::from_size_align(capacity_bytes, BUF_ALIGN_BYTES)
            .expect("buffer layout: size checked by caller");
        // SAFETY: layout has non-zero size.
        let raw = unsafe {
            if zero {
                alloc_zeroed(layout)
            } else {
                alloc(layout)
            }
        };
        let Some(ptr) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout);
        };
        if !zero {
            // Never expose stale heap bytes to a client: fill once on allocation.
            // SAFETY: raw points to capacity_bytes writable bytes.
            unsafe { std::ptr::write_bytes(raw, 0, capacity_bytes) };
        }
        IoBuf {
            ptr: Some(ptr),
            capacity_bytes,
            len_bytes: 0,
        }
    }

    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    pub fn len(&self) -> usize {
        self.len_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.len_bytes == 0
    }

    /// Sets the valid length; the bytes keep whatever the buffer held (a recycled buffer holds a
    /// previous request's data, so callers overwrite the whole length before sending it).
    pub fn set_len(&mut self, len_bytes: usize) {
        assert!(
            len_bytes <= self.capacity_bytes,
            "IoBuf::set_len({len_bytes}) beyond capacity {}",
            self.capacity_bytes
        );
        self.len_bytes = len_bytes;
    }

    pub fn as_slice(&self) -> &[u8] {
        match self.ptr {
            // SAFETY: ptr is valid for capacity_bytes ≥ len_bytes initialized bytes.
            Some(p) => unsafe { std::slice::from_raw_parts(p.as_ptr(), self.len_bytes) },
            None => &[],
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self.ptr {
            // SAFETY: as above, and &mut self guarantees exclusive access.
            Some(p) => unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), self.len_bytes) },
            None => &mut [],
        }
    }

    /// Raw pointer for io_uring; valid until the buffer is dropped or returned to a pool.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match self.ptr {
            Some(p) => p.as_ptr(),
            None => NonNull::<u8>::dangling().as_ptr(),
        }
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if let Some(p) = self.ptr {
            let layout = Layout::from_size_align(self.capacity_bytes, BUF_ALIGN_BYTES)
                .expect("layout was valid at allocation");
            // SAFETY: allocated with this layout in `allocate`.
            unsafe { dealloc(p.as_ptr(), layout) };
        }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({}/{} bytes)", self.len_bytes, self.capacity_bytes)
    }
}

/// Per-worker recycling of [`IoBuf`]s by power-of-two size class.
#[derive(Default)]
pub struct BufPool {
    classes: [Vec<IoBuf>; CLASS_COUNT],
}

fn class_of(len_bytes: usize) -> Option<usize> {
    let rounded = len_bytes.max(MIN_CLASS_BYTES).next_power_of_two();
    let class = (rounded.trailing_zeros() - MIN_CLASS_BYTES.trailing_zeros()) as usize;
    (class < CLASS_COUNT).then_some(class)
}

impl BufPool {
    pub fn new() -> BufPool {
        BufPool::default()
    }

    /// A buffer of length `len_bytes` (capacity: its size class). Zero length: no allocation.
    pub fn take(&mut self, len_bytes: usize) -> IoBuf {
        if len_bytes == 0 {
            return IoBuf::empty();
        }
        let mut buf = match class_of(len_bytes) {
            Some(class) => match self.classes[class].pop() {
                Some(buf) => buf,
                None => IoBuf::allocate(MIN_CLASS_BYTES << class, false),
            },
            None => IoBuf::allocate(len_bytes, false),
        };
        buf.set_len(len_bytes);
        buf
    }

    /// Returns a buffer for reuse (or frees it when its class holds enough already).
    pub fn give(&mut self, buf: IoBuf) {
        if buf.capacity_bytes == 0 || !buf.capacity_bytes.is_power_of_two() {
            return;
        }
        if let Some(class) = class_of(buf.capacity_bytes) {
            let kept = &mut self.classes[class];
            if kept.is_empty() || (kept.len() + 1) * buf.capacity_bytes <= POOL_KEEP_BYTES_PER_CLASS
            {
                kept.push(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_sized() {
        let mut pool = BufPool::new();
        for len in [1usize, 512, 4096, 4097, 1 << 20, 32 << 20] {
            let mut b = pool.take(len);
            assert_eq!(b.len(), len);
            assert!(b.capacity_bytes() >= len);
            assert_eq!(b.as_mut_ptr() as usize % BUF_ALIGN_BYTES, 0);
            pool.give(b);
        }
    }

    #[test]
    fn pool_recycles_same_class() {
        let mut pool = BufPool::new();
        let mut a = pool.take(4096);
        let ptr = a.as_mut_ptr();
        pool.give(a);
        let mut b = pool.take(3000);
        assert_eq!(
            b.as_mut_ptr(),
            ptr,
            "a 3000-byte request reuses the 4 KiB buffer"
        );
        assert_eq!(b.len(), 3000);
    }

    #[test]
    fn pool_caps_idle_bytes() {
        let mut pool = BufPool::new();
        let bufs: Vec<IoBuf> = (0..10).map(|_| pool.take(4 << 20)).collect();
        for b in bufs {
            pool.give(b);
        }
        let class = class_of(4 << 20).unwrap();
        assert_eq!(
            pool.classes[class].len(),
            2,
            "8 MiB cap keeps two 4 MiB buffers"
        );
    }

    #[test]
    fn fresh_buffers_hold_no_stale_bytes() {
        let b = IoBuf::allocate(8192, false);
        let mut b = b;
        b.set_len(8192);
        assert!(b.as_slice().iter().all(|&x| x == 0));
    }
}
