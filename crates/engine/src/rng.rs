//! Seeded random streams, one per component.
//!
//! Every random draw in a run comes from a stream derived from `(run seed, component name)`:
//! `stream(42, "ftl.gc")` and `stream(42, "job0.offsets")` are independent PCG generators, and
//! adding a new component (a new name) never shifts the draws of existing ones. The derivation
//! hashes the name with FNV-1a (stable across Rust versions and machines, unlike `std`'s
//! `DefaultHasher`) and mixes it with the seed through SplitMix64 into the 128-bit state of a
//! `Pcg64Mcg`. Same seed and name ⇒ same sequence, on any machine.
//!
//! We never use `StdRng`, `SmallRng` or the thread RNG: they promise no reproducibility across
//! versions.

use rand::SeedableRng;
pub use rand::{Rng, RngExt};

/// The generator every model uses.
pub type SimRng = rand_pcg::Pcg64Mcg;

/// 64-bit FNV-1a (Fowler–Noll–Vo), streaming: a stable hash, the same on every machine and
/// version (offset basis and prime from the published parameters). Streams are named with it;
/// studies hash run configurations with it.
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a64(u64);

impl Fnv1a64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    pub fn new() -> Fnv1a64 {
        Fnv1a64(Self::OFFSET_BASIS)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(Self::PRIME);
        }
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

/// FNV-1a over the bytes of `name`.
fn fnv1a(name: &str) -> u64 {
    let mut h = Fnv1a64::new();
    h.write(name.as_bytes());
    h.finish()
}

/// One step of SplitMix64: a good 64-bit mixer for turning related inputs into unrelated seeds.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The random stream of component `name` in the run seeded with `seed`.
pub fn stream(seed: u64, name: &str) -> SimRng {
    let mut state = seed ^ fnv1a(name).rotate_left(17);
    let hi = splitmix64(&mut state) as u128;
    let lo = splitmix64(&mut state) as u128;
    SimRng::from_seed(((hi << 64) | lo).to_le_bytes())
}

/// An exponentially distributed duration with the given mean, in integer nanoseconds
/// (inverse-transform sampling; used for Poisson arrivals).
///
/// The logarithm is `libm::log` (pure Rust), not `f64::ln`, which calls the platform's C
/// library: libms may differ in the last bit, and a last bit can move a rounded nanosecond and
/// with it the order of events. The rest is IEEE-754 basic arithmetic (the same everywhere), so
/// a seed gives the same durations on every machine; `tests::exp_ns_is_pinned` holds some.
pub fn exp_ns<R: Rng + ?Sized>(rng: &mut R, mean_ns: u64) -> u64 {
    exp_ns_of(unit_exp(rng), mean_ns)
}

/// The draw of [`exp_ns`] before its scaling: `-ln u` for one uniform `u` in (0, 1], an
/// exponential of mean 1. Apart so that a caller can draw several ahead (their logarithms
/// then run side by side in the CPU) and scale each when it is used: `exp_ns_of(unit_exp(r),
/// m)` is `exp_ns(r, m)`, bit for bit.
#[inline]
pub fn unit_exp<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    // u in (0, 1]: never ln(0).
    let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
    -libm::log(u)
}

/// A [`unit_exp`] draw scaled to mean `mean_ns` and rounded to integer nanoseconds.
#[inline]
pub fn exp_ns_of(unit: f64, mean_ns: u64) -> u64 {
    round_to_u64(unit * mean_ns as f64)
}

/// `x.round() as u64` for `x >= 0` (or `-0.0`), without the library call `round` is: the
/// integer part truncated, plus one if the fraction is at least a half. Exact: below 2^53 the
/// integer part converts back exactly and `x` minus it is the fraction, exactly; from 2^53 on
/// `x` is an integer (fraction 0); past `u64::MAX` both saturate.
///
/// Below 2^63 (every duration a run draws) it goes through `i64`: the same integers, but x86-64
/// converts a double to and from a signed 64-bit integer in one instruction each way, where the
/// unsigned conversions take a compare, a branch and a fix-up each.
#[inline]
fn round_to_u64(x: f64) -> u64 {
    if x < I64_RANGE_END {
        // 0 <= x < 2^63: `whole` fits, converts back exactly, and `whole + 1` does not overflow.
        let whole = x as i64;
        let up = x - whole as f64 >= 0.5;
        return (whole + i64::from(up)) as u64;
    }
    let whole = x as u64;
    if x - whole as f64 >= 0.5 {
        whole.saturating_add(1)
    } else {
        whole
    }
}

/// 2^63: the doubles below it (and not below 0) convert to `i64` exactly in their integer part.
const I64_RANGE_END: f64 = 9_223_372_036_854_775_808.0;

/// A uniform integer in `0..n` (n > 0), by Lemire's multiply-shift (bias < 2^-64·n).
#[inline]
pub fn below<R: Rng + ?Sized>(rng: &mut R, n: u64) -> u64 {
    assert!(n > 0, "below(0): an empty range has no member");
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

/// True with probability `numerator / denominator` (integer ratio: no float drift).
#[inline]
pub fn chance<R: Rng + ?Sized>(rng: &mut R, numerator: u64, denominator: u64) -> bool {
    below(rng, denominator) < numerator
}

#[cfg(test)]
mod tests {

    #[test]
    fn fnv1a_matches_published_test_vectors() {
        // FNV-1a 64 of "" is the offset basis; of "a" it is 0xaf63dc4c8601ec8c; streaming in
        // pieces gives the hash of the whole.
        assert_eq!(Fnv1a64::new().finish(), 0xcbf29ce484222325);
        let mut h = Fnv1a64::new();
        h.write(b"a");
        assert_eq!(h.finish(), 0xaf63dc4c8601ec8c);
        let mut pieces = Fnv1a64::new();
        pieces.write(b"foo");
        pieces.write(b"bar");
        assert_eq!(pieces.finish(), fnv1a("foobar"));
    }
    use super::*;

    #[test]
    fn same_seed_and_name_give_the_same_sequence() {
        let a: Vec<u64> = (0..8)
            .map({
                let mut r = stream(7, "ftl");
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..8)
            .map({
                let mut r = stream(7, "ftl");
                move |_| r.next_u64()
            })
            .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn different_names_or_seeds_give_different_streams() {
        let first = |seed, name| stream(seed, name).next_u64();
        assert_ne!(first(7, "ftl"), first(7, "cache"));
        assert_ne!(first(7, "ftl"), first(8, "ftl"));
    }

    /// Golden value: the derivation must never change silently (it would change every
    /// published result). If this fails after a deliberate change, update it in review.
    #[test]
    fn derivation_is_stable() {
        let got = stream(1, "golden").next_u64();
        assert_eq!(
            got, GOLDEN_FIRST_DRAW,
            "stream(1, \"golden\") first draw changed: {got:#x}"
        );
    }
    const GOLDEN_FIRST_DRAW: u64 = 0x3c8c_9c38_6343_07e6;

    #[test]
    fn exponential_mean_is_close() {
        let mut r = stream(3, "exp");
        let n = 100_000u64;
        let total: u64 = (0..n).map(|_| exp_ns(&mut r, 10_000)).sum();
        let mean = total / n;
        assert!(
            (9_800..10_200).contains(&mean),
            "mean {mean} ns, expected about 10000"
        );
    }

    /// Golden durations: the same on every machine and libm version (`exp_ns` decides event
    /// times). If this fails after a deliberate change, update it in review: results change.
    #[test]
    fn exp_ns_is_pinned() {
        let draws = |seed, mean_ns| {
            let mut r = stream(seed, "exp.pinned");
            (0..6)
                .map(|_| exp_ns(&mut r, mean_ns))
                .collect::<Vec<u64>>()
        };
        assert_eq!(draws(1, 10_000), PINNED_EXP_SEED1_MEAN10US);
        assert_eq!(draws(2, 1_000_000_007), PINNED_EXP_SEED2_MEAN1S);
    }
    /// Drawing ahead and scaling later gives `exp_ns`'s durations, bit for bit, whatever the
    /// mean.
    #[test]
    fn unit_draws_scaled_later_are_exp_ns() {
        let (mut a, mut b) = (stream(5, "exp.split"), stream(5, "exp.split"));
        let ahead: Vec<f64> = (0..10_000).map(|_| unit_exp(&mut b)).collect();
        for (i, unit) in ahead.into_iter().enumerate() {
            let mean_ns = [1, 150, 10_000, 1_000_000_007][i % 4];
            assert_eq!(
                exp_ns_of(unit, mean_ns),
                exp_ns(&mut a, mean_ns),
                "draw {i}"
            );
        }
    }
    const PINNED_EXP_SEED1_MEAN10US: [u64; 6] = [5564, 9618, 7203, 9292, 20417, 28405];
    const PINNED_EXP_SEED2_MEAN1S: [u64; 6] = [
        2_819_806_961,
        44_428_338,
        545_580_437,
        525_529_807,
        1_007_730_387,
        1_172_723_751,
    ];

    /// The rounding `exp_ns` uses is `f64::round` on every non-negative value: halves and
    /// the largest double below a half, both sides of 2^52 and 2^53 (where the spacing
    /// passes 0.5 and 1), both sides of 2^63 (where it leaves `i64`), past `u64::MAX`, and a
    /// spread of draws.
    #[test]
    fn round_to_u64_is_round() {
        let mut xs = vec![
            0.0,
            -0.0,
            0.49999999999999994,
            0.5,
            1.5,
            2.5,
            4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            9_007_199_254_740_993.0,
            9_223_372_036_854_774_784.0,
            9_223_372_036_854_775_808.0,
            18_446_744_073_709_549_568.0,
            18_446_744_073_709_551_616.0,
            1e30,
            f64::MAX,
        ];
        let mut r = stream(5, "round");
        for shift in 0..64 {
            for _ in 0..200 {
                let v = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                xs.push(v * (1u64 << shift) as f64);
                xs.push(v.next_up() * (1u64 << shift) as f64);
            }
        }
        for x in xs {
            assert_eq!(round_to_u64(x), x.round() as u64, "{x:e}");
        }
    }

    #[test]
    fn chance_matches_its_ratio() {
        let mut r = stream(4, "chance");
        let hits = (0..100_000).filter(|_| chance(&mut r, 3, 10)).count();
        assert!(
            (29_000..31_000).contains(&hits),
            "{hits} of 100000, expected about 30000"
        );
    }
}
