//! The calibrate crate's memory and system-call primitives that need `unsafe`, each behind a
//! small safe interface with its SAFETY argument.
//!
//! [`AlignedBuf`]: a zeroed, 4 KiB-aligned heap buffer, what O_DIRECT asks of a read or write
//! buffer on every block device this measures (the logical block size is at most 4 KiB). The
//! owner hands its pointer to the kernel and keeps the buffer alive until the I/O completed
//! (see [`crate::uring`]); the buffer frees itself on drop.
//!
//! The io_uring submissions of [`crate::uring`] and [`crate::nbd`] stay `unsafe` where they
//! are pushed: their soundness is an argument about the buffer lifetimes of the loop around
//! them (each push's SAFETY comment gives it), which a wrapper here could not check.

/// A 4 KiB-aligned buffer for O_DIRECT.
pub struct AlignedBuf {
    /// The first byte; valid for `len` bytes until drop.
    ptr: *mut u8,
    len: usize,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    /// A zeroed buffer of `bytes` bytes (at least 4 KiB are allocated).
    pub fn new(bytes: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(bytes.max(4096), 4096).expect("layout");
        // SAFETY: the layout has a non-zero size; the pointer is checked and freed in Drop.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for a {bytes}-byte buffer");
        AlignedBuf {
            ptr,
            len: bytes,
            layout,
        }
    }

    /// The first byte, for an I/O the kernel does into the buffer; the caller keeps the
    /// buffer alive until that I/O completed.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The buffer's bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `len` (<= the layout's size) zero-initialised bytes owned by
        // `self`, which the `&mut self` borrow keeps alive and unaliased for the slice's life.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::AlignedBuf;

    #[test]
    fn the_buffer_is_zeroed_aligned_and_as_long_as_asked() {
        let mut b = AlignedBuf::new(6000);
        assert_eq!(b.as_mut_ptr() as usize % 4096, 0);
        let s = b.as_mut_slice();
        assert_eq!(s.len(), 6000);
        assert!(s.iter().all(|&x| x == 0));
        s[5999] = 7;
        assert_eq!(b.as_mut_slice()[5999], 7);
    }
}
