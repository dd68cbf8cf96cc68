//! A written superblock's reverse map (slot → LPN), as runs of rows.
//!
//! GC needs to know which LPN each slot of its victim holds. A superblock is programmed row by
//! row, in order (every allocation policy fills pages in order), and its rows are of two kinds:
//! rows whose LPNs are arbitrary (host write-back, or GC moving units that have a forward entry),
//! and rows into which GC moved a preconditioned superblock's live units
//! (`ftl/relocation.rs`), whose LPNs follow from that record. So the map is a list of
//! segments in slot order:
//! - **written**: the LPN of each slot from its first on, 4 bytes a slot (a slot left empty in
//!   a partial row holds [`NO_LPN`]);
//! - **moved**: `len` slots holding units `first..first + len` of the record of the implicit
//!   superblock `from`, 12 bytes for the whole run.
//!
//! Consecutive rows of the same kind extend one segment. Worked example (`zssd`, 8,192-unit
//! superblocks, 70/30 random I/O under GC with write amplification near 8): a superblock holds
//! one or two GC runs of ~7,000 moved units and ~1,000 host units between them: 4 KB of written
//! LPNs and a few segments of 32 bytes, where a slot-by-slot map costs 32 KB.
//!
//! The map says what each slot was written with; whether that is still the LPN's data is the
//! forward map's to say (GC checks every unit it finds against it), so overwrites and trims do
//! not touch it. It is dropped when GC erases the superblock.

/// Reverse-map value of a slot that holds no LPN's data (an empty slot of a partial row).
pub const NO_LPN: u32 = u32::MAX;

/// What a slot was written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// An LPN (or [`NO_LPN`]).
    Lpn(u32),
    /// Unit `k` of the relocation record of implicit superblock `from` (a global superblock
    /// index).
    Moved { from: u32, k: u32 },
}

#[derive(Debug)]
enum Kind {
    Written(Vec<u32>),
    Moved { from: u32, first: u32, len: u32 },
}

#[derive(Debug)]
struct Segment {
    /// First slot.
    start: u32,
    kind: Kind,
}

impl Segment {
    fn len(&self) -> u32 {
        match &self.kind {
            Kind::Written(lpns) => lpns.len() as u32,
            Kind::Moved { len, .. } => *len,
        }
    }

    fn end(&self) -> u32 {
        self.start + self.len()
    }
}

/// One superblock's reverse map (see the module essay). `Default` is a superblock not yet
/// written.
#[derive(Debug, Default)]
pub struct ReverseMap {
    segments: Vec<Segment>,
}

impl ReverseMap {
    /// Slots up to which the superblock is written.
    fn end(&self) -> u32 {
        self.segments.last().map_or(0, Segment::end)
    }

    /// Records `lpns` written from slot `start` on, which must be at or after the slots
    /// already written (rows are programmed in order); slots skipped in between read
    /// [`NO_LPN`].
    pub fn push_written(&mut self, start: u32, lpns: impl ExactSizeIterator<Item = u32>) {
        let end = self.end();
        assert!(
            start >= end,
            "slot {start} written below slot {end}, already written"
        );
        let n = lpns.len();
        if let Some(Segment {
            kind: Kind::Written(v),
            ..
        }) = self.segments.last_mut()
        {
            // After a partial row (a gap smaller than this row), pad rather than split.
            let gap = (start - end) as usize;
            if gap <= n {
                // Grow by a quarter, not double: an open superblock's map is most of its
                // memory until it closes and [`shrink`](Self::shrink)s.
                if v.capacity() < v.len() + gap + n {
                    v.reserve_exact((gap + n).max(v.len() / 4));
                }
                v.extend(std::iter::repeat_n(NO_LPN, gap));
                v.extend(lpns);
                return;
            }
        }
        let mut v = Vec::with_capacity(n);
        v.extend(lpns);
        self.segments.push(Segment {
            start,
            kind: Kind::Written(v),
        });
    }

    /// Records `len` slots from `start` on holding units `first..first + len` of the
    /// relocation record of superblock `from`.
    pub fn push_moved(&mut self, start: u32, from: u32, first: u32, len: u32) {
        let end = self.end();
        assert!(
            start >= end,
            "slot {start} written below slot {end}, already written"
        );
        if let Some(Segment {
            start: s,
            kind:
                Kind::Moved {
                    from: f,
                    first: k,
                    len: n,
                },
        }) = self.segments.last_mut()
        {
            if *f == from && *s + *n == start && *k + *n == first {
                *n += len;
                return;
            }
        }
        self.segments.push(Segment {
            start,
            kind: Kind::Moved { from, first, len },
        });
    }

    /// Frees the spare capacity of the written segments (the superblock is full).
    pub fn shrink(&mut self) {
        for s in &mut self.segments {
            if let Kind::Written(v) = &mut s.kind {
                v.shrink_to_fit();
            }
        }
        self.segments.shrink_to_fit();
    }

    /// What `slot` was written with (`Lpn(NO_LPN)` if nothing).
    pub fn owner(&self, slot: u32) -> Owner {
        let i = self.segments.partition_point(|s| s.start <= slot);
        let Some(seg) = i.checked_sub(1).map(|i| &self.segments[i]) else {
            return Owner::Lpn(NO_LPN);
        };
        let off = slot - seg.start;
        match &seg.kind {
            Kind::Written(v) => Owner::Lpn(v.get(off as usize).copied().unwrap_or(NO_LPN)),
            Kind::Moved { from, first, len } if off < *len => Owner::Moved {
                from: *from,
                k: first + off,
            },
            Kind::Moved { .. } => Owner::Lpn(NO_LPN),
        }
    }

    /// The segments in slot order (a written segment's empty slots read [`NO_LPN`]).
    pub fn runs(&self) -> impl Iterator<Item = Run<'_>> + '_ {
        self.segments.iter().map(|s| match &s.kind {
            Kind::Written(v) => Run::Written {
                start: s.start,
                lpns: v,
            },
            Kind::Moved { from, first, len } => Run::Moved {
                start: s.start,
                from: *from,
                first: *first,
                len: *len,
            },
        })
    }

    /// Bytes the map holds.
    pub fn bytes(&self) -> u64 {
        let lpns: usize = self
            .segments
            .iter()
            .map(|s| match &s.kind {
                Kind::Written(v) => v.capacity() * size_of::<u32>(),
                Kind::Moved { .. } => 0,
            })
            .sum();
        (size_of::<ReverseMap>() + self.segments.capacity() * size_of::<Segment>() + lpns) as u64
    }
}

/// A segment of a reverse map, from [`ReverseMap::runs`].
pub enum Run<'a> {
    /// Slots `start..start + lpns.len()` hold `lpns` ([`NO_LPN`]: empty).
    Written { start: u32, lpns: &'a [u32] },
    /// Slots `start..start + len` hold units `first..first + len` of `from`'s record.
    Moved {
        start: u32,
        from: u32,
        first: u32,
        len: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rows_of_one_kind_extend_one_segment() {
        let mut r = ReverseMap::default();
        r.push_written(0, [7, 8].into_iter());
        r.push_written(4, [9, 10].into_iter()); // a partial row before: slots 2, 3 empty
        r.push_moved(6, 3, 0, 4);
        r.push_moved(10, 3, 4, 4);
        r.push_moved(14, 6, 0, 2); // another record
        r.push_written(20, [11].into_iter()); // after skipped rows: a segment of its own
        assert_eq!(r.segments.len(), 4);
        assert_eq!(r.owner(1), Owner::Lpn(8));
        assert_eq!(r.owner(2), Owner::Lpn(NO_LPN));
        assert_eq!(r.owner(4), Owner::Lpn(9));
        assert_eq!(r.owner(11), Owner::Moved { from: 3, k: 5 });
        assert_eq!(r.owner(15), Owner::Moved { from: 6, k: 1 });
        assert_eq!(r.owner(16), Owner::Lpn(NO_LPN));
        assert_eq!(r.owner(20), Owner::Lpn(11));
        assert_eq!(r.owner(21), Owner::Lpn(NO_LPN));
    }

    #[derive(Clone, Debug)]
    enum Row {
        Written(u32, Vec<u32>),
        Moved(u32, u32, u32),
    }

    fn row() -> impl Strategy<Value = Row> {
        prop_oneof![
            (0u32..6, proptest::collection::vec(0u32..1000, 1..9))
                .prop_map(|(gap, l)| Row::Written(gap, l)),
            (0u32..6, 0u32..3, 1u32..9).prop_map(|(gap, f, n)| Row::Moved(gap, f, n)),
        ]
    }

    proptest! {
        /// Against a slot-by-slot model: every slot's owner is what was pushed there (or
        /// nothing), however the rows merge into segments.
        #[test]
        fn the_map_agrees_with_a_slot_by_slot_model(rows in proptest::collection::vec(row(), 0..60)) {
            let mut r = ReverseMap::default();
            let mut model = std::collections::HashMap::new();
            let mut next = [0u32; 3];
            let mut at = 0u32;
            for row in rows {
                match row {
                    Row::Written(gap, lpns) => {
                        let start = at + gap;
                        for (i, &l) in lpns.iter().enumerate() {
                            model.insert(start + i as u32, Owner::Lpn(l));
                        }
                        r.push_written(start, lpns.iter().copied());
                        at = start + lpns.len() as u32;
                    }
                    Row::Moved(gap, from, n) => {
                        let start = at + gap;
                        let first = next[from as usize];
                        for i in 0..n {
                            model.insert(start + i, Owner::Moved { from, k: first + i });
                        }
                        r.push_moved(start, from, first, n);
                        next[from as usize] += n;
                        at = start + n;
                    }
                }
            }
            for slot in 0..at + 3 {
                let want = model.get(&slot).copied().unwrap_or(Owner::Lpn(NO_LPN));
                prop_assert_eq!(r.owner(slot), want, "slot {}", slot);
            }
        }
    }
}
