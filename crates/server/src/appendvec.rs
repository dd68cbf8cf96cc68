//! A vector that only grows, whose elements every thread reads without a lock.
//!
//! # What it is for
//! Per-tenant counters the dataplane touches on every step — a tenant's sessions
//! ([`crate::sessions`]) and its memory charge ([`crate::memory`]) — are indexed by
//! [`crate::tenant::TenantId`]. A config reload adds tenants (and gives a tenant whose secret or
//! class changed a new id), so those arrays grow while workers read them; a lock per read would
//! put a shared cache line on the hot path of every worker.
//!
//! # Design
//! Elements live in fixed chunks of [`CHUNK_SLOTS`], each created once (a `OnceLock`) and never
//! moved or freed before the vector is, so a reference to an element stays valid while other
//! threads grow it; `len` is published with release ordering after the chunks it covers exist.
//! Worked example: 3 tenants at start use chunk 0 (64 slots, 64 × the element's size); a reload
//! that brings the 65th id creates chunk 1; reading id 2 never waits for either. The chunk table
//! is sized once: [`MAX_SLOTS`] ids over a server's life (the reload refuses more).
//!
//! # What it leaves out
//! Removal and reuse of slots: ids are never reused, a retired tenant's slot stays (its
//! counters drain to zero).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Elements per chunk.
pub const CHUNK_SLOTS: usize = 64;
/// Chunks a vector may have: 4,096 × 64 = 262,144 elements.
pub const MAX_CHUNKS: usize = 4096;
/// Most elements a vector holds.
pub const MAX_SLOTS: usize = CHUNK_SLOTS * MAX_CHUNKS;

/// An append-only vector of `T` (see the module essay).
pub struct AppendVec<T> {
    chunks: Box<[OnceLock<Box<[T]>>]>,
    len: AtomicUsize,
}

impl<T> std::fmt::Debug for AppendVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendVec")
            .field("len", &self.len())
            .finish()
    }
}

/// The vector already holds [`MAX_SLOTS`] elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than {MAX_SLOTS} slots")]
pub struct Full;

impl<T: Default> AppendVec<T> {
    /// A vector of `len` default elements (at most [`MAX_SLOTS`]).
    pub fn with_len(len: usize) -> Result<AppendVec<T>, Full> {
        let v = AppendVec {
            chunks: (0..MAX_CHUNKS).map(|_| OnceLock::new()).collect(),
            len: AtomicUsize::new(0),
        };
        v.grow_to(len)?;
        Ok(v)
    }

    /// Makes the vector at least `len` long (new elements are `T::default()`).
    pub fn grow_to(&self, len: usize) -> Result<(), Full> {
        if len > MAX_SLOTS {
            return Err(Full);
        }
        for chunk in &self.chunks[..len.div_ceil(CHUNK_SLOTS)] {
            chunk.get_or_init(|| (0..CHUNK_SLOTS).map(|_| T::default()).collect());
        }
        self.len.fetch_max(len, Ordering::AcqRel);
        Ok(())
    }
}

impl<T> AppendVec<T> {
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `index`, if the vector is that long.
    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len() {
            return None;
        }
        let chunk = self.chunks[index / CHUNK_SLOTS].get();
        assert!(chunk.is_some(), "slot {index} below len without its chunk");
        chunk.map(|c| &c[index % CHUNK_SLOTS])
    }

    /// Every element, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

impl<T> std::ops::Index<usize> for AppendVec<T> {
    type Output = T;
    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(t) => t,
            None => panic!("index {index} beyond an AppendVec of {}", self.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_across_chunks_and_keeps_references() {
        let v: AppendVec<AtomicUsize> = AppendVec::with_len(3).expect("3 fit");
        let first = &v[2];
        first.store(7, Ordering::Relaxed);
        v.grow_to(CHUNK_SLOTS * 2 + 1).expect("grow");
        assert_eq!(v.len(), CHUNK_SLOTS * 2 + 1);
        assert_eq!(first.load(Ordering::Relaxed), 7, "no element moved");
        assert_eq!(v[CHUNK_SLOTS * 2].load(Ordering::Relaxed), 0);
        assert!(v.get(CHUNK_SLOTS * 2 + 1).is_none());
        v.grow_to(1).expect("never shrinks");
        assert_eq!(v.len(), CHUNK_SLOTS * 2 + 1);
        assert_eq!(v.grow_to(MAX_SLOTS + 1), Err(Full));
    }

    #[test]
    fn threads_read_while_another_grows() {
        let v: std::sync::Arc<AppendVec<AtomicUsize>> =
            std::sync::Arc::new(AppendVec::with_len(1).expect("1"));
        let reader = {
            let v = v.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                for _ in 0..10_000 {
                    seen = seen.max(v.len());
                    let last = v.len() - 1;
                    v[last].fetch_add(1, Ordering::Relaxed);
                }
                seen
            })
        };
        for len in 2..=1_000 {
            v.grow_to(len).expect("grow");
        }
        assert!(reader.join().expect("reader") >= 1);
        assert_eq!(v.len(), 1_000);
    }
}
