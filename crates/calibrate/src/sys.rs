//! The calibrate crate's memory and system-call primitives that need `unsafe`, each behind a
//! small safe interface with its SAFETY argument.
//!
//! [`AlignedBuf`]: a zeroed, 4 KiB-aligned heap buffer, what O_DIRECT asks of a read or write
//! buffer on every block device this measures (the logical block size is at most 4 KiB). The
//! owner hands its pointer to the kernel and keeps the buffer alive until the I/O completed
//! (see [`crate::uring`]); the buffer frees itself on drop.
//!
//! [`SlotRing`]: an io_uring whose reads and writes go only into the aligned buffers it owns,
//! one per slot, freed only when no operation points into them: [`crate::uring`]'s closed
//! loop. The NBD prober's ring ([`crate::nbd`]) still pushes its SEND/RECV entries with an
//! `unsafe` of its own: its soundness is an argument about the two buffers of its loop,
//! given at the push.

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

/// An io_uring whose reads and writes go only into buffers it owns: one [`AlignedBuf`] per
/// slot, at most one operation per slot in flight, the slot's index as the operation's
/// `user_data`. A buffer is freed only when no operation points into it: dropped with
/// operations in flight (a run that failed half-way), the ring leaks its buffers, since the
/// kernel could still write into them.
pub struct SlotRing {
    ring: io_uring::IoUring,
    bufs: Vec<AlignedBuf>,
    in_flight: Vec<bool>,
}

impl SlotRing {
    /// `slots` buffers of `bytes` bytes each, for operations on `ring`.
    pub fn new(ring: io_uring::IoUring, slots: usize, bytes: usize) -> SlotRing {
        SlotRing {
            ring,
            bufs: (0..slots).map(|_| AlignedBuf::new(bytes)).collect(),
            in_flight: vec![false; slots],
        }
    }

    /// Queues a read (`read`) or write of slot `slot`'s whole buffer at byte `offset` of `fd`.
    /// The slot must be free (its previous operation reaped).
    pub fn push(
        &mut self,
        slot: usize,
        fd: io_uring::types::Fd,
        offset: u64,
        read: bool,
    ) -> anyhow::Result<()> {
        assert!(
            !self.in_flight[slot],
            "slot {slot} already has an operation in flight"
        );
        let buf = &self.bufs[slot];
        let len = buf.len as u32;
        let e = if read {
            io_uring::opcode::Read::new(fd, buf.as_mut_ptr(), len)
                .offset(offset)
                .build()
        } else {
            io_uring::opcode::Write::new(fd, buf.as_mut_ptr(), len)
                .offset(offset)
                .build()
        };
        // SAFETY: the entry points into `bufs[slot]`, `len` bytes long, which this ring owns
        // and neither moves (the Vec is never resized) nor frees while `in_flight[slot]` is
        // set (Drop leaks the buffers then); the slot takes no second entry before its
        // completion is reaped.
        unsafe { self.ring.submission().push(&e.user_data(slot as u64)) }
            .map_err(|_| anyhow::anyhow!("io_uring submission queue full"))?;
        self.in_flight[slot] = true;
        Ok(())
    }

    /// Submits what was pushed and waits for at least `want` completions (`io_uring_enter`).
    pub fn submit_and_wait(&mut self, want: usize) -> std::io::Result<usize> {
        self.ring.submit_and_wait(want)
    }

    /// The completions ready, as (slot, result: bytes or -errno); their slots are free again.
    pub fn reap(&mut self) -> Vec<(usize, i32)> {
        let done: Vec<(usize, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for &(slot, _) in &done {
            self.in_flight[slot] = false;
        }
        done
    }
}

impl Drop for SlotRing {
    fn drop(&mut self) {
        if self.in_flight.iter().any(|&f| f) {
            std::mem::forget(std::mem::take(&mut self.bufs));
        }
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
