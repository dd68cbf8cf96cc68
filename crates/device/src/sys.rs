//! The device model's one `unsafe` operation: a CPU prefetch hint.
//!
//! The model is plain safe Rust except for this: the DRAM cache's lookups on a 1.5 GB cache miss
//! the CPU's caches on nearly every set they touch, and asking the CPU to start loading a set's
//! flags, LRU stamps and versions together with its tags overlaps what would otherwise be
//! consecutive memory misses (`cache.rs`, `Cache::prefetch_set`). A hint changes no memory and
//! no result; on other architectures it is nothing.

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
