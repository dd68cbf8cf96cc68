//! A zeroed, 4 KiB-aligned heap buffer: what O_DIRECT asks of a read or write buffer on every
//! block device this measures (the logical block size is at most 4 KiB). The owner hands its
//! pointer to the kernel and keeps the buffer alive until the I/O completed (see
//! [`crate::uring`]); the buffer frees itself on drop.

/// A 4 KiB-aligned buffer for O_DIRECT.
pub struct AlignedBuf {
    /// The first byte; valid for the length given to [`AlignedBuf::new`] until drop.
    pub ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    pub fn new(bytes: usize) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(bytes.max(4096), 4096).expect("layout");
        // SAFETY: the layout has a non-zero size; the pointer is checked and freed in Drop.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory for a {bytes}-byte buffer");
        AlignedBuf { ptr, layout }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}
