//! A worker's connection table: small-integer slots whose references carry a generation.
//!
//! # What it implements
//! A worker names a connection by its slot index and the slot's generation ([`ConnRef`]): the
//! pair is the connection's epoll token and rides on each of its requests to the backend and
//! back. A slot is reused once its connection closed, so an event or a completion that names an
//! older generation belongs to a connection that is gone and is dropped ([`ConnTable::is_current`]).
//!
//! # Design
//! A vector of optional connections, a generation per slot, and a free list reused last-in
//! first-out (as [`crate::slab::Slab`], which has no generations: a request never outlives the
//! worker's knowledge of it). Taking a slot ([`ConnTable::reserve`]) bumps its generation before
//! the connection is built, so the connection can carry its own reference; a connection that
//! then fails to start gives its slot back ([`ConnTable::abandon`]) and the next one bumps the
//! generation again. Removing a connection ([`ConnTable::remove`]) bumps the generation at once,
//! so nothing that names it matches after. A connection may be taken out of its slot for a
//! while ([`ConnTable::take`] and [`ConnTable::put`]: the worker decodes a connection's input
//! with the worker borrowed mutably) without changing its generation.
//!
//! Worked example: reserve → slot 0 generation 1, filled; reserve → slot 1 generation 1;
//! remove slot 0 (generation 2: a completion naming (0, 1) is now stale); reserve → slot 0
//! again, generation 3.
//!
//! # What it leaves out
//! Shrinking: a worker that once had 5,000 connections keeps 5,000 slots (a few words each).

use crate::conn::ConnRef;

/// Connections of type `T` in generational slots.
pub struct ConnTable<T> {
    slots: Vec<Option<T>>,
    generations: Vec<u32>,
    free: Vec<usize>,
}

impl<T> Default for ConnTable<T> {
    fn default() -> Self {
        ConnTable {
            slots: Vec::new(),
            generations: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> ConnTable<T> {
    /// Takes a free slot for a connection about to be built and returns its reference (the
    /// slot's generation is bumped). Fill it with [`ConnTable::fill`] or give it back with
    /// [`ConnTable::abandon`].
    pub fn reserve(&mut self) -> ConnRef {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.generations.push(0);
                self.slots.len() - 1
            }
        };
        assert!(self.slots[index].is_none(), "free slot {index} is occupied");
        self.generations[index] = self.generations[index].wrapping_add(1);
        ConnRef {
            index: index as u32,
            generation: self.generations[index],
        }
    }

    /// Puts the connection of a reserved slot in it.
    pub fn fill(&mut self, r: ConnRef, conn: T) {
        assert!(self.is_current(r), "filling a stale slot");
        let slot = &mut self.slots[r.index as usize];
        assert!(slot.is_none(), "filling an occupied slot");
        *slot = Some(conn);
    }

    /// Gives back a reserved slot whose connection never started.
    pub fn abandon(&mut self, r: ConnRef) {
        assert!(
            self.slots[r.index as usize].is_none(),
            "abandoning a filled slot"
        );
        self.free.push(r.index as usize);
    }

    /// Removes the connection in slot `i`; every reference to it is stale from now on.
    pub fn remove(&mut self, i: usize) -> Option<T> {
        let conn = self.slots.get_mut(i)?.take()?;
        self.generations[i] = self.generations[i].wrapping_add(1);
        self.free.push(i);
        Some(conn)
    }

    /// Whether `r` names the slot's current generation (its connection may be out of the slot
    /// for the moment, see [`ConnTable::take`]).
    pub fn is_current(&self, r: ConnRef) -> bool {
        self.generations.get(r.index as usize) == Some(&r.generation)
    }

    /// Whether `r` names the current generation of a slot that holds its connection.
    pub fn is_live(&self, r: ConnRef) -> bool {
        self.is_current(r) && self.get(r.index as usize).is_some()
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i)?.as_ref()
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i)?.as_mut()
    }

    /// Takes the connection out of slot `i` for a while, keeping its generation; give it back
    /// with [`ConnTable::put`].
    pub fn take(&mut self, i: usize) -> Option<T> {
        self.slots.get_mut(i)?.take()
    }

    /// Puts back a connection [`ConnTable::take`] took out of slot `i`.
    pub fn put(&mut self, i: usize, conn: T) {
        let slot = &mut self.slots[i];
        assert!(slot.is_none(), "putting back into an occupied slot");
        *slot = Some(conn);
    }

    /// Slots ever used (occupied or not): indexes are below it.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The connections in their slots.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }

    /// `(slot, connection)` for every connection in its slot.
    pub fn iter_indexed(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worked_example() {
        let mut t = ConnTable::default();
        let a = t.reserve();
        assert_eq!((a.index, a.generation), (0, 1));
        t.fill(a, 'a');
        let b = t.reserve();
        assert_eq!((b.index, b.generation), (1, 1));
        t.fill(b, 'b');
        assert_eq!(t.remove(0), Some('a'));
        assert!(
            !t.is_current(a),
            "a removed connection's reference is stale"
        );
        assert!(t.is_live(b));
        let c = t.reserve();
        assert_eq!((c.index, c.generation), (0, 3));
        assert!(!t.is_current(a));
        assert!(t.is_current(c) && !t.is_live(c), "reserved, not yet filled");
        t.fill(c, 'c');
        assert_eq!(t.iter().copied().collect::<Vec<_>>(), vec!['c', 'b']);
        assert_eq!(t.slots(), 2);
    }

    #[test]
    fn removing_twice_or_out_of_range_is_nothing() {
        let mut t = ConnTable::default();
        let a = t.reserve();
        t.fill(a, 1);
        assert_eq!(t.remove(0), Some(1));
        assert_eq!(t.remove(0), None, "removed once");
        assert_eq!(t.remove(7), None);
        // The slot was freed once: the next two reservations take slot 0, then a new slot.
        assert_eq!(t.reserve().index, 0);
        assert_eq!(t.reserve().index, 1);
    }

    #[test]
    fn an_abandoned_slot_is_reused_with_a_new_generation() {
        let mut t: ConnTable<u8> = ConnTable::default();
        let a = t.reserve();
        t.abandon(a);
        let b = t.reserve();
        assert_eq!(b.index, a.index);
        assert_ne!(
            b.generation, a.generation,
            "a stale token of the failed start matches nothing"
        );
        assert!(!t.is_current(a));
    }

    #[test]
    fn take_and_put_keep_the_generation() {
        let mut t = ConnTable::default();
        let a = t.reserve();
        t.fill(a, "x");
        assert_eq!(t.take(0), Some("x"));
        assert!(t.is_current(a), "still current while out of its slot");
        assert!(!t.is_live(a), "but not in its slot");
        assert_eq!(t.get(0), None);
        t.put(0, "y");
        assert!(t.is_live(a));
        assert_eq!(t.get(0), Some(&"y"));
    }

    #[test]
    fn generations_wrap_without_panicking() {
        let mut t: ConnTable<()> = ConnTable::default();
        t.generations.push(u32::MAX);
        t.slots.push(None);
        t.free.push(0);
        let r = t.reserve();
        assert_eq!(r.generation, 0);
    }
}
