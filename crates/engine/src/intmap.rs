//! A hash map from `u32` keys for the hot paths of an event loop: a few entries that come and
//! go, looked up by a small integer (an LPN, a slot), never iterated.
//!
//! ## The design
//! Open addressing with linear probing in one array of `Option<(key, value)>`, at most half
//! full, so a lookup nearly always finds its key, or the empty slot that says it is absent,
//! at the home slot or the next. The home slot is Fibonacci hashing (Knuth, TAOCP vol. 3,
//! 6.4): the key times 2^32 / φ, keeping the top bits, which spreads runs of consecutive keys
//! (the LPNs of one large read) over the table. Removal shifts the entries after the removed
//! one back toward their home slots (Knuth's Algorithm R), so there are no tombstones and a
//! table that keeps the same few entries never needs rebuilding. The table doubles when it
//! would become more than half full and never shrinks (an event loop's peak comes back).
//!
//! Worked example: a new map's 8 slots (3 bits), keys 5 and 13. `5 × 0x9E37_79B9` is
//! `0x3_1715_609D`; mod 2^32 `0x1715_609D`, whose top 3 bits are 0: slot 0. 13 lands in slot
//! 0 too (`0x08D1_2E65`), so it takes slot 1. Removing 5 leaves slot 0 empty, and 13, whose
//! home is 0, moves back into it: a lookup of 13 stops at slot 0 again.
//!
//! Why not `std`'s `HashMap` with a fast hasher: a device-level run of 200 K 4 KiB random
//! reads inserts and removes one entry per read (the device's fills in flight), and
//! `hashbrown`'s general path (SIMD group probes, the hasher's state, growth checks) cost
//! about 90 instructions per insert and as many per removal under `valgrind --tool=callgrind`.
//! With this map as `device`'s `fills` (an `FxHashMap` before), `ullstack sim --device zssd`
//! with 200 K 4 KiB random reads at QD32 runs 22 M fewer instructions (of about 1,000 M), about 36 per
//! insert, removal and lookup. Iteration order is not offered, so no result can depend on it.

/// Multiplier of Fibonacci hashing: 2^32 / φ, rounded to odd.
const FIBONACCI_32: u32 = 0x9E37_79B9;

/// Slots of a new table (a power of two).
const INITIAL_SLOTS: usize = 8;

/// A map from `u32` to `V` (see the module essay).
#[derive(Clone, Debug)]
pub struct U32Map<V> {
    slots: Vec<Option<(u32, V)>>,
    /// log2 of `slots.len()`.
    bits: u32,
    len: usize,
}

impl<V> Default for U32Map<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> U32Map<V> {
    pub fn new() -> Self {
        U32Map {
            slots: (0..INITIAL_SLOTS).map(|_| None).collect(),
            bits: INITIAL_SLOTS.trailing_zeros(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The home slot of `key`: the top `bits` bits of its Fibonacci hash.
    #[inline(always)]
    fn home(&self, key: u32) -> usize {
        (key.wrapping_mul(FIBONACCI_32) >> (32 - self.bits)) as usize
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `key`, or the empty slot where its probe ends.
    #[inline(always)]
    fn find(&self, key: u32) -> (usize, bool) {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            match &self.slots[i] {
                None => return (i, false),
                Some((k, _)) if *k == key => return (i, true),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    #[inline]
    pub fn contains_key(&self, key: u32) -> bool {
        self.find(key).1
    }

    #[inline]
    pub fn get(&self, key: u32) -> Option<&V> {
        match self.find(key) {
            (i, true) => self.slots[i].as_ref().map(|(_, v)| v),
            _ => None,
        }
    }

    #[inline]
    pub fn get_mut(&mut self, key: u32) -> Option<&mut V> {
        match self.find(key) {
            (i, true) => self.slots[i].as_mut().map(|(_, v)| v),
            _ => None,
        }
    }

    /// Inserts `value` under `key`; returns the value it replaces, if any. Always inlined, as
    /// [`remove`](Self::remove) is: once per read in a device run, and a call's prologue,
    /// epilogue and the value's copy through memory cost about a third of the work.
    #[inline(always)]
    pub fn insert(&mut self, key: u32, value: V) -> Option<V> {
        let (i, found) = self.find(key);
        if found {
            let (_, old) = self.slots[i].replace((key, value)).expect("found");
            return Some(old);
        }
        if 2 * (self.len + 1) > self.slots.len() {
            self.grow();
            let (i, _) = self.find(key);
            self.slots[i] = Some((key, value));
        } else {
            self.slots[i] = Some((key, value));
        }
        self.len += 1;
        None
    }

    /// The value under `key`, inserting `make()` first if there is none.
    #[inline]
    pub fn get_or_insert_with(&mut self, key: u32, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(key) {
            (i, true) => i,
            _ => {
                self.insert(key, make());
                self.find(key).0
            }
        };
        &mut self.slots[i].as_mut().expect("present").1
    }

    /// Removes `key`; returns its value, if it was there.
    #[inline(always)]
    pub fn remove(&mut self, key: u32) -> Option<V> {
        let (mut hole, found) = self.find(key);
        if !found {
            return None;
        }
        let (_, value) = self.slots[hole].take().expect("found");
        self.len -= 1;
        // Algorithm R: move back each following entry whose home is not in (hole, j].
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let Some((k, _)) = &self.slots[j] else {
                break;
            };
            let home = self.home(*k);
            // Distances along the probe order, from the hole: the entry at `j` may move
            // into the hole if its home is at or before the hole (cyclically).
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
        }
        Some(value)
    }

    /// Doubles the table and puts every entry back at its new home.
    #[cold]
    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.bits += 1;
        self.slots = (0..old.len() * 2).map(|_| None).collect();
        for (k, v) in old.into_iter().flatten() {
            let (i, _) = self.find(k);
            self.slots[i] = Some((k, v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn the_worked_example_collides_and_shifts_back() {
        let mut m = U32Map::new();
        assert_eq!(m.slots.len(), 8);
        assert_eq!(5u32.wrapping_mul(FIBONACCI_32), 0x1715_609D);
        assert_eq!(13u32.wrapping_mul(FIBONACCI_32), 0x08D1_2E65);
        m.insert(5, 'a');
        m.insert(13, 'b');
        assert_eq!((m.find(5), m.find(13)), ((0, true), (1, true)));
        assert_eq!(m.remove(5), Some('a'));
        assert_eq!(m.find(13), (0, true), "13 moved back to its home");
        assert_eq!(m.get(13), Some(&'b'));
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn it_grows_past_half_full_and_keeps_every_entry() {
        let mut m = U32Map::new();
        for k in 0..1_000u32 {
            assert_eq!(m.insert(k * 7, k), None);
        }
        assert!(m.slots.len() >= 2 * m.len());
        assert!((0..1_000u32).all(|k| m.get(k * 7) == Some(&k)));
        assert_eq!(m.insert(7, 0), Some(1), "replaces");
    }

    proptest! {
        /// Any sequence of inserts, removals and lookups over a small key space (many
        /// collisions and wrap-arounds) gives what `HashMap` gives.
        #[test]
        fn matches_a_hash_map(ops in proptest::collection::vec((0u8..4, 0u32..64, any::<u16>()), 0..2_000)) {
            let mut m = U32Map::new();
            let mut reference = HashMap::new();
            for (op, key, value) in ops {
                // Spread some keys across the whole u32 range too.
                let key = if key % 2 == 0 { key } else { key.wrapping_mul(0x0100_0193) };
                match op {
                    0 => prop_assert_eq!(m.insert(key, value), reference.insert(key, value)),
                    1 => prop_assert_eq!(m.remove(key), reference.remove(&key)),
                    2 => {
                        let v = m.get_or_insert_with(key, || value);
                        *v = v.wrapping_add(1);
                        let r = reference.entry(key).or_insert(value);
                        *r = r.wrapping_add(1);
                    }
                    _ => prop_assert_eq!(m.get_mut(key).copied(), reference.get(&key).copied()),
                }
                prop_assert_eq!(m.len(), reference.len());
                prop_assert_eq!(m.contains_key(key), reference.contains_key(&key));
            }
            for (k, v) in &reference {
                prop_assert_eq!(m.get(*k), Some(v));
            }
        }
    }
}
