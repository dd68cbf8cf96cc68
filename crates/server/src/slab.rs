//! A slab: stable small-integer indexes with O(1) insert and remove.
//!
//! # What it implements
//! The worker keeps its in-flight requests here; a request's index is at the same time its
//! scheduler `RequestId` and the tag its backend returns with the completion, so finding the
//! request of a completion is one array access.
//!
//! # Design
//! A vector of optional items and a free list of vacant indexes, reused last-in first-out so
//! the hot part of the vector stays small. Worked example: insert a, b, c (0, 1, 2), remove 1,
//! insert d: d gets 1.
//!
//! # What it leaves out
//! Generations: a connection reference carries its own (`conn::ConnRef`); requests never
//! outlive the worker's knowledge of them, so their indexes need none.

/// A slab of `T`.
pub struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, item: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                assert!(self.items[i].is_none(), "free slab slot {i} is occupied");
                self.items[i] = Some(item);
                i
            }
            None => {
                self.items.push(Some(item));
                self.items.len() - 1
            }
        }
    }

    pub fn remove(&mut self, i: usize) -> Option<T> {
        let item = self.items.get_mut(i)?.take();
        if item.is_some() {
            self.free.push(i);
        }
        item
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.items.get_mut(i)?.as_mut()
    }

    pub fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_freed_slots() {
        let mut s = Slab::default();
        assert_eq!((s.insert('a'), s.insert('b'), s.insert('c')), (0, 1, 2));
        assert_eq!(s.remove(1), Some('b'));
        assert_eq!(s.remove(1), None, "removed once");
        assert_eq!(s.insert('d'), 1);
        assert_eq!(s.len(), 3);
        assert_eq!(s.get_mut(1).copied(), Some('d'));
    }
}
