//! The device model's only `unsafe` code: CPU intrinsics for the DRAM cache's lookups.
//!
//! The model is plain safe Rust except for two speed-ups of `cache.rs` (the first also the
//! FTL's), neither of which changes a result:
//! - a prefetch hint: lookups on a 1.5 GB cache miss the CPU's caches on nearly every set they
//!   touch, and asking the CPU to start loading a set's block (tags, LRU stamps and flags: three
//!   cache lines, [`prefetch_all`]) and its versions overlaps what would otherwise be
//!   consecutive memory misses (`Cache::prefetch_set`); the forward map's index and tables of a drive the run has written
//!   all over miss too, and are asked for at submit and at fetch (`Ftl::prefetch_lookup`), and
//!   a placed row's map updates and superblock counts a few units ahead (`place_row`);
//! - the tag compare of a 16-way set in four SSE2 compares (`Cache::find`, run twice per read
//!   miss), where a way-by-way scan took about 100 instructions, and the classification of its
//!   16 flag bytes (invalid, clean) in one compare each (`Cache::victim`).
//!
//! On other architectures the hint is nothing and the compare a plain loop.

/// Asks the CPU to start loading `x`'s cache line (a hint: no effect on results).
#[inline(always)]
pub fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no memory; `x` is a valid reference anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (x as *const T).cast(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Asks the CPU to start loading every cache line `x` spans (a hint: no effect on results).
#[inline(always)]
pub fn prefetch_all<T>(x: &T) {
    /// The x86-64 cache line: one prefetch per line.
    const LINE_BYTES: usize = 64;
    let start = (x as *const T).cast::<u8>();
    let size = std::mem::size_of::<T>();
    let mut offset = 0;
    while offset < size {
        // The first byte of each line `x` starts in, then its last byte's line.
        prefetch_at(start.wrapping_add(offset));
        offset += LINE_BYTES;
    }
    if size > 0
        && (start as usize + size - 1) / LINE_BYTES
            != (start as usize + offset - LINE_BYTES) / LINE_BYTES
    {
        prefetch_at(start.wrapping_add(size - 1));
    }
}

/// [`prefetch`] of a byte address inside a live object.
#[inline(always)]
fn prefetch_at(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no memory.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Bit `w` set for each way `w` of a 16-way set whose tag is `lpn`.
#[inline]
pub fn ways_matching(tags: &[u32; 16], lpn: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_loadu_si128, _mm_movemask_ps,
            _mm_set1_epi32,
        };
        let p = tags.as_ptr().cast::<__m128i>();
        // SAFETY: SSE2 is part of x86-64; `tags` is 64 bytes, so the four unaligned 16-byte
        // loads at offsets 0, 16, 32 and 48 stay inside it, and nothing is written.
        unsafe {
            let key = _mm_set1_epi32(lpn as i32);
            let quad = |k: usize| {
                let eq = _mm_cmpeq_epi32(_mm_loadu_si128(p.add(k)), key);
                _mm_movemask_ps(_mm_castsi128_ps(eq)) as u32
            };
            quad(0) | quad(1) << 4 | quad(2) << 8 | quad(3) << 12
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut mask = 0u32;
        for (w, &t) in tags.iter().enumerate() {
            mask |= u32::from(t == lpn) << w;
        }
        mask
    }
}

/// Bit `w` set for each byte `w` of `bytes` with `bytes[w] & mask == equals`.
#[inline]
pub fn bytes_where(bytes: &[u8; 16], mask: u8, equals: u8) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8,
            _mm_set1_epi8,
        };
        // SAFETY: SSE2 is part of x86-64; `bytes` is 16 bytes, exactly the one unaligned load,
        // and nothing is written.
        unsafe {
            let v = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
            let masked = _mm_and_si128(v, _mm_set1_epi8(mask as i8));
            _mm_movemask_epi8(_mm_cmpeq_epi8(masked, _mm_set1_epi8(equals as i8))) as u32
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut bits = 0u32;
        for (w, &b) in bytes.iter().enumerate() {
            bits |= u32::from(b & mask == equals) << w;
        }
        bits
    }
}
