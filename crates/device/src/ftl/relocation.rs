//! Where GC moved a preconditioned superblock's data: one record for the whole superblock,
//! not an entry per unit.
//!
//! A preconditioned (implicit) superblock holds the LPNs its layout says, computed, not stored
//! (`ftl.rs`, "Mapping"). When GC collects one, it reads the units still live there in slot
//! order and programs them, in that order, into consecutive slots of the LUN's write point. So
//! the `k`-th live unit went to the `k`-th slot GC programmed, and where a unit went follows
//! from two facts: which slots were live (a bitmap over the victim's slots), and where each run
//! of GC's rows began. This record holds exactly that:
//! - `live`: one bit a slot, set for the units relocated, with the count of set bits before
//!   each 512-slot block (`rank`), so the rank of a slot is one table read and at most eight
//!   popcounts within one cache line;
//! - `dest`: the runs of consecutive destination PPNs, as `(first unit, its PPN)`: one run per
//!   superblock the write point passed through, or more when host rows came between (they do
//!   not: GC's rows are placed together), so in practice one or two.
//!
//! A lookup of an LPN with no entry in the forward map computes its layout position (the
//! victim and slot), finds the victim's record, ranks the slot and adds the rank to its run's
//! first PPN: O(1), and about 1.2 bits a relocated unit where a forward entry and a reverse
//! entry cost 8 bytes or more. Worked example (`zssd`: 8,192-unit superblocks): a victim with
//! 7,000 live units costs 1,024 bytes of bitmap, 64 of rank and a run or two, 1.2 KB, where
//! 7,000 forward entries cost 28 KB (a dense region's table) to 53 KB (a sparse one's slots) and
//! their reverse entries 28 KB more.
//!
//! The record never changes once built. A relocated LPN that the host rewrites (or trims, or GC
//! moves again from its new superblock) gets an entry in the forward map, which a lookup
//! consults first, so the record's answer for it is then never asked for. The destination's
//! reverse map names the record instead of the LPNs (`ftl/reverse.rs`); a unit's LPN is the
//! victim's layout LPN at the slot of the `k`-th set bit ([`Relocation::slots_from`]).

/// Bits of the live bitmap per word.
const WORD_BITS: u32 = 64;
/// Words of the bitmap per entry of the rank table: a rank is one table read and at most
/// eight popcounts of one cache line (the table costs 1/16 bit a slot).
const RANK_WORDS: usize = 8;

/// Where the live units of one implicit superblock went (see the module essay).
pub struct Relocation {
    /// One bit per slot of the victim: set if its unit was relocated.
    live: Box<[u64]>,
    /// Set bits in `live` before each block of [`RANK_WORDS`] words.
    rank: Box<[u32]>,
    /// Runs of consecutive destinations: `(first unit, its PPN)`, by unit.
    dest: Vec<(u32, u32)>,
    /// Units relocated (set bits).
    units: u32,
}

impl Relocation {
    /// A record of a victim of `slots` slots, whose units at `live_slots` (ascending) moved,
    /// unit `k` (the `k`-th of `live_slots`) to PPN `dest(k)`: the destinations are given as
    /// the runs `(first unit, its PPN)` (ascending units, the first at unit 0).
    pub fn new(slots: u32, live_slots: &[u32], dest: Vec<(u32, u32)>) -> Relocation {
        let words = slots.div_ceil(WORD_BITS) as usize;
        let mut live = vec![0u64; words].into_boxed_slice();
        let mut last = None;
        for &s in live_slots {
            assert!(
                s < slots && last.is_none_or(|l| l < s),
                "live slots must ascend below {slots}"
            );
            live[(s / WORD_BITS) as usize] |= 1 << (s % WORD_BITS);
            last = Some(s);
        }
        let mut rank = vec![0u32; words.div_ceil(RANK_WORDS)].into_boxed_slice();
        let mut before = 0u32;
        for (r, block) in rank.iter_mut().zip(live.chunks(RANK_WORDS)) {
            *r = before;
            before += block.iter().map(|w| w.count_ones()).sum::<u32>();
        }
        assert!(
            live_slots.is_empty() || dest.first().is_some_and(|&(k, _)| k == 0),
            "the first destination run starts at unit 0: {dest:?}"
        );
        assert!(
            dest.windows(2).all(|w| w[0].0 < w[1].0)
                && dest.last().is_none_or(|&(k, _)| k < before),
            "destination runs ascend within the {before} units: {dest:?}"
        );
        let mut dest = dest;
        dest.shrink_to_fit();
        Relocation {
            live,
            rank,
            dest,
            units: before,
        }
    }

    /// The unit relocated from `slot` (its rank among the live slots), or `None` if the slot's
    /// unit was not live when GC collected the victim.
    #[inline]
    pub fn unit_of(&self, slot: u32) -> Option<u32> {
        let w = (slot / WORD_BITS) as usize;
        let bit = slot % WORD_BITS;
        let word = self.live[w];
        if word & (1 << bit) == 0 {
            return None;
        }
        let block = w / RANK_WORDS;
        let between: u32 = self.live[block * RANK_WORDS..w]
            .iter()
            .map(|x| x.count_ones())
            .sum();
        let below = word & ((1u64 << bit) - 1);
        Some(self.rank[block] + between + below.count_ones())
    }

    /// The PPN unit `k` went to.
    #[inline]
    pub fn ppn_of_unit(&self, k: u32) -> u32 {
        debug_assert!(k < self.units, "unit {k} of {}", self.units);
        // Runs are few (one or two): a linear scan from the back beats a binary search.
        let &(first, ppn) = self
            .dest
            .iter()
            .rev()
            .find(|&&(first, _)| first <= k)
            .expect("the first run starts at unit 0");
        ppn + (k - first)
    }

    /// Where the unit that sat at `slot` went. The caller knows the slot's unit was relocated
    /// (its LPN has no forward entry, so it was live when GC came).
    #[inline]
    pub fn ppn_of_slot(&self, slot: u32) -> u32 {
        let k = self.unit_of(slot);
        assert!(
            k.is_some(),
            "slot {slot} of a relocated superblock was not live, yet its LPN has no entry"
        );
        self.ppn_of_unit(k.unwrap_or(0))
    }

    /// Units relocated.
    pub fn units(&self) -> u32 {
        self.units
    }

    /// The victim's slots of units `k, k + 1, …` in order (the `k`-th set bit on).
    pub fn slots_from(&self, k: u32) -> impl Iterator<Item = u32> + '_ {
        // The block holding the `k`-th set bit: the last whose rank is at most `k`.
        let block = self.rank.partition_point(|&r| r <= k).saturating_sub(1);
        let skip = (k - self.rank.get(block).copied().unwrap_or(0)) as usize;
        let start = block * RANK_WORDS;
        self.live[start..]
            .iter()
            .enumerate()
            .flat_map(move |(i, &word)| {
                let base = (start + i) as u32 * WORD_BITS;
                SetBits(word).map(move |b| base + b)
            })
            .skip(skip)
    }

    /// Bytes the record holds (bitmap, rank, runs and the record itself).
    pub fn bytes(&self) -> u64 {
        (size_of::<Relocation>()
            + self.live.len() * size_of::<u64>()
            + self.rank.len() * size_of::<u32>()
            + self.dest.capacity() * size_of::<(u32, u32)>()) as u64
    }
}

/// The set bits of a word, lowest first.
struct SetBits(u64);

impl Iterator for SetBits {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.0 == 0 {
            return None;
        }
        let b = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The essay's example: 7,000 of 8,192 slots live, into two runs.
    #[test]
    fn a_victim_of_seven_thousand_live_units_costs_about_one_and_a_quarter_bits_each() {
        let live: Vec<u32> = (0..8192).filter(|s| s % 7 != 3).take(7000).collect();
        let r = Relocation::new(8192, &live, vec![(0, 1_000), (5_000, 90_000)]);
        assert_eq!(r.units(), 7000);
        assert_eq!(r.ppn_of_slot(live[0]), 1_000);
        assert_eq!(r.ppn_of_slot(live[4_999]), 1_000 + 4_999);
        assert_eq!(r.ppn_of_slot(live[5_000]), 90_000);
        assert_eq!(r.ppn_of_slot(live[6_999]), 90_000 + 1_999);
        assert_eq!(r.unit_of(3), None);
        assert!(r.bytes() < 1_200, "{} bytes", r.bytes());
        assert!(r.bytes() * 8 < 7000 * 3 / 2, "{} bytes", r.bytes());
    }

    #[test]
    fn no_live_units_is_an_empty_record() {
        let r = Relocation::new(100, &[], Vec::new());
        assert_eq!(r.units(), 0);
        assert_eq!(r.unit_of(0), None);
        assert_eq!(r.slots_from(0).count(), 0);
    }

    fn live_and_runs() -> impl Strategy<Value = (u32, Vec<u32>, Vec<(u32, u32)>)> {
        (1u32..1400).prop_flat_map(|slots| {
            (
                Just(slots),
                proptest::collection::btree_set(0..slots, 0..slots as usize),
                proptest::collection::vec((0u32..700, 0u32..1_000_000), 0..4),
            )
                .prop_map(|(slots, live, cuts)| {
                    let live: Vec<u32> = live.into_iter().collect();
                    // Runs cut where `cuts` say (at units within the record), each to its own PPN.
                    let mut runs: Vec<(u32, u32)> = Vec::new();
                    if !live.is_empty() {
                        runs.push((0, 5_000_000));
                        let mut firsts: Vec<(u32, u32)> = cuts
                            .into_iter()
                            .map(|(k, p)| (k % live.len() as u32, p))
                            .filter(|&(k, _)| k > 0)
                            .collect();
                        firsts.sort_unstable();
                        firsts.dedup_by_key(|r| r.0);
                        runs.extend(firsts);
                    }
                    (slots, live, runs)
                })
        })
    }

    proptest! {
        /// Against a model (a `HashMap` of slot → PPN built unit by unit): every slot ranks to
        /// its unit or none, every unit's PPN is its run's first plus its offset, and the slots
        /// read back from any unit on are the live ones from there.
        #[test]
        fn the_record_agrees_with_a_slot_by_slot_model((slots, live, runs) in live_and_runs()) {
            let r = Relocation::new(slots, &live, runs.clone());
            let mut model = std::collections::HashMap::new();
            for (k, &s) in live.iter().enumerate() {
                let k = k as u32;
                let &(first, ppn) = runs.iter().rev().find(|&&(f, _)| f <= k).unwrap();
                model.insert(s, (k, ppn + k - first));
            }
            prop_assert_eq!(r.units() as usize, live.len());
            for s in 0..slots {
                match model.get(&s) {
                    Some(&(k, ppn)) => {
                        prop_assert_eq!(r.unit_of(s), Some(k));
                        prop_assert_eq!(r.ppn_of_slot(s), ppn);
                    }
                    None => prop_assert_eq!(r.unit_of(s), None),
                }
            }
            for k in 0..=live.len() {
                let got: Vec<u32> = r.slots_from(k as u32).collect();
                prop_assert_eq!(&got[..], &live[k..]);
            }
        }
    }
}
