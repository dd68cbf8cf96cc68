//! The pure part of load generation: which block, read or write, and when. Deterministic per
//! seed (one PCG stream per connection, derived from the run's seed, the tenant's index and the
//! connection's index), so two runs with the same seed send the same requests in the same order.
//!
//! * Addresses: the tenant's region (`span`, else the volume) is cut into `size`-byte blocks.
//!   Random = uniform over blocks; sequential = a cursor per connection, the connections
//!   starting evenly spaced so they do not read the same blocks; Zipf(θ) = block popularity
//!   ∝ 1/rank^θ, ranks scattered over the region by a multiplicative permutation so the hot
//!   blocks are not all adjacent. Example: a 1 GiB region of 4 KiB blocks has 262 144 blocks;
//!   with θ = 0.99 about 9 % of requests hit the hottest 10 blocks.
//! * Arrivals (open loop): exponential inter-arrival gaps with mean 1/rate, accumulated in
//!   integer nanoseconds from the start, so the schedule does not drift with float error.

use rand::distr::Distribution;
use rand::{RngExt, SeedableRng};
use rand_distr::{Exp, Zipf};
use rand_pcg::Pcg64Mcg;

use super::spec::Pattern;

/// A multiplier for scattering Zipf ranks (a prime; a permutation whenever it is coprime with
/// the block count, which is checked).
const SCATTER_PRIME: u64 = 1_000_000_007;

/// The seed of one connection's stream.
pub fn stream_seed(run_seed: u64, tenant_index: u64, connection_index: u64) -> u64 {
    splitmix64(splitmix64(run_seed ^ splitmix64(tenant_index)) ^ connection_index)
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
}

enum Addresser {
    Random,
    Sequential { cursor: u64 },
    Zipf { dist: Zipf<f64>, scatter: u64 },
}

/// One connection's request stream.
pub struct RequestGen {
    rng: Pcg64Mcg,
    blocks: u64,
    size_bytes: u64,
    read_pct: u8,
    addresser: Addresser,
    gap: Option<Exp<f64>>,
    next_arrival_ns: u64,
}

impl RequestGen {
    /// `region_bytes` is rounded down to whole `size_bytes` blocks (at least one).
    /// `rate_iops` = 0 means closed loop (no arrival schedule).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        seed: u64,
        region_bytes: u64,
        size_bytes: u32,
        read_pct: u8,
        pattern: Pattern,
        connection_index: u32,
        connections: u32,
        rate_iops: f64,
    ) -> RequestGen {
        let size_bytes = u64::from(size_bytes.max(1));
        let blocks = (region_bytes / size_bytes).max(1);
        let addresser = match pattern {
            Pattern::Random => Addresser::Random,
            Pattern::Sequential => Addresser::Sequential {
                cursor: blocks / u64::from(connections.max(1)) * u64::from(connection_index),
            },
            Pattern::Zipf { theta_milli } => {
                let theta = f64::from(theta_milli) / 1000.0;
                match Zipf::new(blocks as f64, theta) {
                    Ok(dist) => Addresser::Zipf {
                        dist,
                        scatter: if gcd(SCATTER_PRIME % blocks, blocks) == 1 {
                            SCATTER_PRIME % blocks
                        } else {
                            1
                        },
                    },
                    Err(_) => Addresser::Random,
                }
            }
        };
        let gap = (rate_iops > 0.0)
            .then(|| Exp::new(rate_iops / 1e9).ok())
            .flatten();
        let mut g = RequestGen {
            rng: Pcg64Mcg::seed_from_u64(seed),
            blocks,
            size_bytes,
            read_pct,
            addresser,
            gap,
            next_arrival_ns: 0,
        };
        g.next_arrival_ns = g.draw_gap_ns();
        g
    }

    fn draw_gap_ns(&mut self) -> u64 {
        match &self.gap {
            Some(exp) => (exp.sample(&mut self.rng).round() as u64).max(1),
            None => 0,
        }
    }

    /// The next request: read or write, and its byte offset.
    pub fn next_op(&mut self) -> (OpKind, u64) {
        let kind = if self.rng.random_range(0..100u8) < self.read_pct {
            OpKind::Read
        } else {
            OpKind::Write
        };
        let block = match &mut self.addresser {
            Addresser::Random => self.rng.random_range(0..self.blocks),
            Addresser::Sequential { cursor } => {
                let b = *cursor % self.blocks;
                *cursor = cursor.wrapping_add(1);
                b
            }
            Addresser::Zipf { dist, scatter } => {
                let rank = (dist.sample(&mut self.rng) as u64).clamp(1, self.blocks) - 1;
                ((u128::from(rank) * u128::from(*scatter)) % u128::from(self.blocks)) as u64
            }
        };
        (kind, block * self.size_bytes)
    }

    /// Open loop: the scheduled time of the next arrival (ns after the start), then advance.
    pub fn take_arrival_ns(&mut self) -> u64 {
        let at = self.next_arrival_ns;
        self.next_arrival_ns = at.saturating_add(self.draw_gap_ns());
        at
    }

    /// Open loop: the scheduled time of the next arrival without consuming it.
    pub fn peek_arrival_ns(&self) -> u64 {
        self.next_arrival_ns
    }

    /// Fill a write buffer with this stream's bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            *b = self.rng.random();
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(pattern: Pattern, read_pct: u8, rate: f64) -> RequestGen {
        RequestGen::new(42, 1 << 30, 4096, read_pct, pattern, 0, 1, rate)
    }

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let mut a = gen(Pattern::Random, 70, 1000.0);
        let mut b = gen(Pattern::Random, 70, 1000.0);
        let mut c = RequestGen::new(43, 1 << 30, 4096, 70, Pattern::Random, 0, 1, 1000.0);
        let sa: Vec<_> = (0..100)
            .map(|_| (a.next_op(), a.take_arrival_ns()))
            .collect();
        let sb: Vec<_> = (0..100)
            .map(|_| (b.next_op(), b.take_arrival_ns()))
            .collect();
        let sc: Vec<_> = (0..100)
            .map(|_| (c.next_op(), c.take_arrival_ns()))
            .collect();
        assert_eq!(sa, sb);
        assert_ne!(sa, sc);
        assert_ne!(stream_seed(1, 0, 1), stream_seed(1, 1, 0));
    }

    #[test]
    fn read_ratio_and_alignment_hold() {
        let mut g = gen(Pattern::Random, 80, 0.0);
        let n = 100_000;
        let mut reads = 0;
        for _ in 0..n {
            let (k, off) = g.next_op();
            assert_eq!(off % 4096, 0);
            assert!(off + 4096 <= 1 << 30);
            reads += (k == OpKind::Read) as u32;
        }
        let pct = f64::from(reads) * 100.0 / f64::from(n);
        assert!((79.0..81.0).contains(&pct), "{pct}");
    }

    #[test]
    fn poisson_arrivals_have_the_requested_rate_and_increase() {
        let mut g = gen(Pattern::Random, 100, 100_000.0);
        let mut last = 0;
        let n = 200_000u64;
        for _ in 0..n {
            let t = g.take_arrival_ns();
            assert!(t >= last);
            last = t;
        }
        // 200 000 arrivals at 100 000/s take about 2 s.
        let secs = last as f64 / 1e9;
        assert!((1.97..2.03).contains(&secs), "{secs}");
    }

    #[test]
    fn sequential_walks_and_connections_start_apart() {
        let mut g0 = RequestGen::new(1, 1 << 20, 4096, 100, Pattern::Sequential, 0, 2, 0.0);
        let mut g1 = RequestGen::new(1, 1 << 20, 4096, 100, Pattern::Sequential, 1, 2, 0.0);
        let offs: Vec<u64> = (0..3).map(|_| g0.next_op().1).collect();
        assert_eq!(offs, [0, 4096, 8192]);
        assert_eq!(g1.next_op().1, 128 * 4096);
        for _ in 0..300 {
            assert!(g0.next_op().1 < 1 << 20, "wraps inside the region");
        }
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let mut g = gen(Pattern::Zipf { theta_milli: 990 }, 100, 0.0);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let (_, off) = g.next_op();
            assert!(off < 1 << 30);
            *counts.entry(off).or_insert(0u32) += 1;
        }
        let mut v: Vec<u32> = counts.into_values().collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        let top10: u32 = v.iter().take(10).sum();
        // Uniform would put ~0.004 % on 10 blocks; Zipf(0.99) puts several percent there.
        assert!(top10 > 3_000, "top-10 blocks got {top10} of 100000");
    }
}
