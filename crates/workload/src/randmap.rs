//! fio's random map in O(1) memory: every block once per pass, in random order.
//!
//! fio's default for random jobs keeps a bitmap of the blocks it has touched so that one pass
//! over the region reads (or writes) every block exactly once before any block repeats. A bitmap
//! of an 800 GB region at 4 KiB blocks is 24 MiB per job clone; the simulator runs many clones,
//! so instead we walk a random *permutation* of `0..n` that needs a handful of words:
//!
//! 1. Let `2^k` be the smallest power of two ≥ n. A linear congruential generator
//!    `x ← (a·x + c) mod 2^k` with `c` odd and `a ≡ 1 (mod 4)` has full period (Hull–Dobell): it
//!    visits every value of `0..2^k` exactly once per `2^k` steps, from any start.
//! 2. LCG low bits are badly patterned (bit 0 alternates), so each state goes through a bijective
//!    mixer on k bits — xor-shift, multiply by an odd constant mod 2^k, xor-shift, twice. A
//!    bijection of `0..2^k` onto itself keeps "every value once per period".
//! 3. Cycle-walking: mixed values ≥ n are skipped. Exactly n values of each period are < n, and
//!    because n > 2^(k−1) the walk takes fewer than 2 steps per output on average.
//! 4. After n outputs the pass is complete; a new pass draws new `a`, `c` and mixer constants
//!    from the caller's RNG, so successive passes visit blocks in different orders (as fio's
//!    passes do when it resets its map).
//!
//! Worked example: n = 5, so k = 3 and the LCG walks 8 states per period; the mixer maps them to
//! some order of 0..8, say 6 2 7 0 4 1 5 3; skipping 6 and 7 (≥ 5) yields the pass 2 0 4 1 3.
//!
//! What it leaves out: the permutation is a good shuffle for storage workloads, not a
//! cryptographic or statistically uniform choice among all n! orders.

use rand::Rng;

/// A stream of block indices in `0..n`: each pass is a random permutation of `0..n`.
#[derive(Clone, Debug)]
pub struct RandomMapWalk {
    n: u64,
    mask: u64,
    shift: u32,
    lcg_mul: u64,
    lcg_add: u64,
    mix_mul_1: u64,
    mix_mul_2: u64,
    state: u64,
    emitted_in_pass: u64,
}

impl RandomMapWalk {
    /// A walk over `0..n` (n ≥ 1). The first pass starts at the first [`next`](Self::next).
    pub fn new(n: u64) -> Self {
        assert!(n >= 1, "random map over an empty region");
        let bits = 64 - (n - 1).leading_zeros();
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        RandomMapWalk {
            n,
            mask,
            shift: bits.div_ceil(2).max(1),
            lcg_mul: 1,
            lcg_add: 1,
            mix_mul_1: 1,
            mix_mul_2: 1,
            state: 0,
            // Forces a fresh pass (with random constants) on the first call.
            emitted_in_pass: n,
        }
    }

    /// Number of blocks in one pass.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Never true: a walk covers at least one block.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Draws the constants of a new pass.
    fn start_pass<R: Rng + ?Sized>(&mut self, rng: &mut R) {
        self.lcg_mul = (rng.next_u64() << 2) | 1;
        self.lcg_add = rng.next_u64() | 1;
        self.mix_mul_1 = rng.next_u64() | 1;
        self.mix_mul_2 = rng.next_u64() | 1;
        self.state = rng.next_u64() & self.mask;
        self.emitted_in_pass = 0;
    }

    /// The bijective mixer on k bits.
    #[inline]
    fn mix(&self, x: u64) -> u64 {
        let mut y = x;
        y ^= y >> self.shift;
        y = y.wrapping_mul(self.mix_mul_1) & self.mask;
        y ^= y >> self.shift;
        y = y.wrapping_mul(self.mix_mul_2) & self.mask;
        y ^= y >> self.shift;
        y
    }

    /// The next block index; every n consecutive calls aligned to a pass return each of `0..n`
    /// exactly once.
    #[inline]
    pub fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> u64 {
        if self.emitted_in_pass == self.n {
            self.start_pass(rng);
        }
        loop {
            self.state = self
                .state
                .wrapping_mul(self.lcg_mul)
                .wrapping_add(self.lcg_add)
                & self.mask;
            let block = self.mix(self.state);
            if block < self.n {
                self.emitted_in_pass += 1;
                return block;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    #[test]
    fn every_pass_is_a_permutation() {
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        for n in [1u64, 2, 3, 5, 8, 9, 100, 1000, 4097] {
            let mut walk = RandomMapWalk::new(n);
            for pass in 0..3 {
                let mut seen = vec![false; n as usize];
                for _ in 0..n {
                    let b = walk.next(&mut rng);
                    assert!(b < n);
                    assert!(!seen[b as usize], "n={n} pass={pass}: block {b} twice");
                    seen[b as usize] = true;
                }
                assert!(seen.iter().all(|&s| s), "n={n} pass={pass}: a block missed");
            }
        }
    }

    #[test]
    fn passes_differ_and_are_not_in_order() {
        let mut rng = Pcg64Mcg::seed_from_u64(11);
        let n = 1000u64;
        let mut walk = RandomMapWalk::new(n);
        let first: Vec<u64> = (0..n).map(|_| walk.next(&mut rng)).collect();
        let second: Vec<u64> = (0..n).map(|_| walk.next(&mut rng)).collect();
        assert_ne!(first, second);
        let in_order = first.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(
            in_order < 50,
            "{in_order} ascending neighbours: not shuffled"
        );
        // Low bit should not alternate as a raw LCG's would.
        let alternations = first.windows(2).filter(|w| (w[0] ^ w[1]) & 1 == 1).count();
        assert!(
            alternations < 900,
            "low bit alternates {alternations} times"
        );
    }

    #[test]
    fn huge_regions_need_no_memory_and_stay_in_range() {
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        let n = 800_000_000_000u64 / 4096;
        let mut walk = RandomMapWalk::new(n);
        for _ in 0..100_000 {
            assert!(walk.next(&mut rng) < n);
        }
        let mut full = RandomMapWalk::new(u64::MAX);
        assert!(full.next(&mut rng) < u64::MAX);
    }
}
