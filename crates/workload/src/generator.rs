//! The I/O generator: the sequence of I/Os one clone of a fio job issues.
//!
//! The simulator asks a job's generator for the next I/O whenever the job may issue one (a queue
//! slot frees up, the think time passes, the rate limiter allows it) and stamps it with simulated
//! time; the generator itself knows nothing of time. It decides, per I/O:
//!
//! * **direction** — fixed for read/write patterns; for `rw`/`randrw` an independent draw that is
//!   a read with probability `read_pct`/100 (fio alternates in short runs to the same ratio; over
//!   a run the split is the same);
//! * **offset** — within the clone's region `[start, start + size)`, where
//!   `start = offset + job_index × offset_increment` and `size` defaults to the rest of the device.
//!   The region holds `⌊size / bs⌋` whole blocks (a trailing partial block is never touched);
//!   offsets are `start + block × bs`:
//!   - sequential patterns continue where the previous I/O *of the same direction* ended (fio
//!     keeps one position per direction, so `rw` reads 0, 4k, 8k… while writes also go 0, 4k…),
//!     wrapping to the region start;
//!   - random patterns with fio's random map (the default) walk a random permutation of the
//!     blocks, so each pass touches every block exactly once ([`RandomMapWalk`], O(1) memory);
//!   - `norandommap` draws each block uniformly and independently;
//!   - `zipf:θ` draws a popularity rank from [`Zipf`](crate::Zipf) (rejection-inversion through
//!     `libm`: the same ranks on every machine) and scatters ranks over the region
//!     with a stride coprime to the block count (rank r → block `r × stride mod n`, stride ≈ 0.618
//!     n), so the hot blocks are spread out rather than packed at the start;
//! * **end** — unless the job is `time_based`, the generator returns `None` after
//!   `⌈io_size / bs⌉` I/Os (default: one pass, `n` I/Os) or `number_ios`, whichever is fewer;
//!   `time_based` jobs are endless except for `number_ios`, and the caller stops them at
//!   `runtime`.
//!
//! ## Worked example
//! `rw=randread bs=4k size=16k`, clone 0, on a 1 GiB device: the region is bytes 0..16384 = 4
//! blocks; the generator returns 4 reads at offsets that are a permutation of 0, 4096, 8192, 12288
//! (e.g. 8192, 0, 12288, 4096), then `None`. With `time_based` it keeps going with a new
//! permutation each pass, as fio did in our check (`write_iolog` of the same job).
//!
//! ## Clones
//! fio clones (`numjobs`) are independent copies: each has its own generator and random stream
//! and, unless `offset_increment` is set, the same region (fio does the same with one `filename`).
//! The caller derives each clone's RNG from the run seed, the job and `job_index`.
//!
//! ## Speed
//! `next` allocates nothing and, for uniform random offsets, costs one or two 64-bit multiplies
//! per draw; see `benches/generator.rs`.

use rand::Rng;

use crate::error::GenError;
use crate::job::{Access, Distribution, JobSpec, RandomMap, RunUntil};
use crate::randmap::RandomMapWalk;
use crate::zipf::Zipf;

/// Direction of an I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Op {
    Read,
    Write,
}

impl Op {
    /// Index for per-direction state: Read = 0, Write = 1.
    #[inline]
    fn index(self) -> usize {
        match self {
            Op::Read => 0,
            Op::Write => 1,
        }
    }
}

/// One I/O to issue: direction, byte offset on the device and length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoReq {
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// Which directions a job issues.
#[derive(Clone, Copy, Debug)]
enum OpMix {
    ReadsOnly,
    WritesOnly,
    /// Read with probability `read_pct` / 100.
    Mixed {
        read_pct: u64,
    },
}

/// Where the next block comes from.
#[derive(Clone, Debug)]
enum Offsets {
    /// Next block per direction (indexed by [`Op::index`]).
    Sequential { next_block: [u64; 2] },
    /// Independent uniform draws (`norandommap`).
    Uniform,
    /// fio's random map: a permutation per pass.
    Map(RandomMapWalk),
    /// Zipf popularity ranks scattered by `stride`.
    Zipf { zipf: Zipf, stride: u64 },
}

/// A uniform integer in `0..n` (n > 0) by multiply-shift; bias below n / 2^64.
#[inline]
pub(crate) fn below<R: Rng + ?Sized>(rng: &mut R, n: u64) -> u64 {
    assert!(n > 0, "below(0): an empty range has no member");
    ((u128::from(rng.next_u64()) * u128::from(n)) >> 64) as u64
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A stride near n / φ that is coprime to n, so `r ↦ r × stride mod n` is a bijection that
/// spreads neighbouring ranks far apart.
fn scatter_stride(n: u64) -> u64 {
    if n <= 2 {
        return 1;
    }
    // 0.6180339887 in 32.32 fixed point.
    const INV_PHI_Q32: u128 = 2_654_435_769;
    let mut stride = ((u128::from(n) * INV_PHI_Q32) >> 32) as u64;
    stride = stride.clamp(1, n - 1);
    while gcd(stride, n) != 1 {
        stride += 1;
    }
    stride
}

/// The I/Os of one clone of one job. See the module essay.
#[derive(Clone, Debug)]
pub struct IoGenerator {
    region_start_bytes: u64,
    block_size_bytes: u64,
    region_blocks: u64,
    mix: OpMix,
    offsets: Offsets,
    /// I/Os still to issue; `None` when endless (time_based without number_ios).
    remaining_ios: Option<u64>,
    /// The job's whole I/O budget (what `remaining_ios` starts at), for [`IoGenerator::restart_budget`].
    budget_ios: Option<u64>,
}

impl IoGenerator {
    /// The generator of clone `job_index` (0-based, below `numjobs`) of `spec` on a device of
    /// `device_capacity_bytes`. Fails if the clone's region does not fit on the device.
    pub fn new(
        spec: &JobSpec,
        job_index: u32,
        device_capacity_bytes: u64,
    ) -> Result<IoGenerator, GenError> {
        if job_index >= spec.numjobs {
            return Err(GenError::NoSuchClone {
                job: spec.name.clone(),
                job_index,
                numjobs: spec.numjobs,
            });
        }
        let block_size_bytes = spec.block_size_bytes;
        assert!(block_size_bytes > 0, "job `{}` has bs = 0", spec.name);
        let exceeds = |start_bytes: u64, end_bytes: u64| GenError::RegionExceedsCapacity {
            job: spec.name.clone(),
            job_index,
            start_bytes,
            end_bytes,
            capacity_bytes: device_capacity_bytes,
        };
        let region_start_bytes = spec
            .offset_increment_bytes
            .checked_mul(u64::from(job_index))
            .and_then(|inc| inc.checked_add(spec.offset_bytes))
            .ok_or_else(|| exceeds(u64::MAX, u64::MAX))?;
        if region_start_bytes >= device_capacity_bytes {
            return Err(exceeds(
                region_start_bytes,
                region_start_bytes.saturating_add(spec.size_bytes.unwrap_or(0)),
            ));
        }
        let region_bytes = spec
            .size_bytes
            .unwrap_or(device_capacity_bytes - region_start_bytes);
        let region_end_bytes = region_start_bytes
            .checked_add(region_bytes)
            .filter(|&end| end <= device_capacity_bytes)
            .ok_or_else(|| {
                exceeds(
                    region_start_bytes,
                    region_start_bytes.saturating_add(region_bytes),
                )
            })?;
        let region_blocks = region_bytes / block_size_bytes;
        if region_blocks == 0 {
            return Err(GenError::RegionSmallerThanBlock {
                job: spec.name.clone(),
                job_index,
                region_bytes,
                block_size_bytes,
            });
        }
        assert!(region_start_bytes + region_blocks * block_size_bytes <= region_end_bytes);

        let mix = match spec.read_pct {
            100 => OpMix::ReadsOnly,
            0 => OpMix::WritesOnly,
            pct => OpMix::Mixed {
                read_pct: u64::from(pct),
            },
        };
        let offsets = match (spec.pattern.access(), spec.distribution, spec.random_map) {
            (Access::Sequential, _, _) => Offsets::Sequential { next_block: [0, 0] },
            (Access::Random, Distribution::Zipf { theta }, _) => Offsets::Zipf {
                zipf: Zipf::new(region_blocks, theta).map_err(|reason| GenError::BadParameter {
                    what: format!("job `{}` random_distribution=zipf:{theta}", spec.name),
                    reason,
                })?,
                stride: scatter_stride(region_blocks),
            },
            (Access::Random, Distribution::Uniform, RandomMap::CoverEachBlock) => {
                Offsets::Map(RandomMapWalk::new(region_blocks))
            }
            (Access::Random, Distribution::Uniform, RandomMap::Off) => Offsets::Uniform,
        };
        let remaining_ios = match spec.run_until {
            RunUntil::Runtime => spec.number_ios,
            RunUntil::IoDone => {
                let planned = match spec.io_size_bytes {
                    Some(io_size) => io_size.div_ceil(block_size_bytes),
                    None => region_blocks,
                };
                Some(spec.number_ios.map_or(planned, |n| n.min(planned)))
            }
        };
        Ok(IoGenerator {
            region_start_bytes,
            block_size_bytes,
            region_blocks,
            mix,
            offsets,
            remaining_ios,
            budget_ios: remaining_ios,
        })
    }

    /// First byte of the clone's region.
    pub fn region_start_bytes(&self) -> u64 {
        self.region_start_bytes
    }

    /// Whole blocks in the region (offsets are `region_start_bytes + block × block_size_bytes`).
    pub fn region_blocks(&self) -> u64 {
        self.region_blocks
    }

    /// Bytes per I/O.
    pub fn block_size_bytes(&self) -> u64 {
        self.block_size_bytes
    }

    /// I/Os still to come, or `None` if the generator is endless (time-based).
    pub fn remaining_ios(&self) -> Option<u64> {
        self.remaining_ios
    }

    /// Gives the job its whole I/O budget again, from where its offsets are now: what fio does
    /// when `ramp_time` ends (`reset_all_stats` zeroes the job's `io_bytes`, `io_blocks` and
    /// `io_issues`, which `size`, `io_size` and `number_ios` are checked against), so those
    /// limits count the I/Os after the ramp.
    pub fn restart_budget(&mut self) {
        self.remaining_ios = self.budget_ios;
    }

    /// The next I/O, or `None` when the job has done its I/O. Deterministic given `rng`'s state.
    #[inline]
    pub fn next<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Option<IoReq> {
        if let Some(remaining) = &mut self.remaining_ios {
            if *remaining == 0 {
                return None;
            }
            *remaining -= 1;
        }
        let op = match self.mix {
            OpMix::ReadsOnly => Op::Read,
            OpMix::WritesOnly => Op::Write,
            OpMix::Mixed { read_pct } => {
                if below(rng, 100) < read_pct {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        };
        let n = self.region_blocks;
        let block = match &mut self.offsets {
            Offsets::Sequential { next_block } => {
                let slot = &mut next_block[op.index()];
                let block = *slot;
                *slot = if block + 1 == n { 0 } else { block + 1 };
                block
            }
            Offsets::Uniform => below(rng, n),
            Offsets::Map(walk) => walk.next(rng),
            Offsets::Zipf { zipf, stride } => {
                let rank = zipf.sample(rng) - 1; // 1..=n
                ((u128::from(rank) * u128::from(*stride)) % u128::from(n)) as u64
            }
        };
        assert!(block < n, "block {block} outside region of {n} blocks");
        Some(IoReq {
            op,
            offset_bytes: self.region_start_bytes + block * self.block_size_bytes,
            len_bytes: self.block_size_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_stride_is_coprime_and_spread() {
        for n in [1u64, 2, 3, 4, 10, 12, 30, 1000, 1 << 20, 195_312_500] {
            let s = scatter_stride(n);
            assert!(s >= 1 && (n <= 1 || s < n));
            assert_eq!(gcd(s, n), 1, "n={n} stride={s}");
            if n > 100 {
                assert!(s > n / 2 && s < n * 3 / 4, "n={n} stride={s}");
            }
        }
    }

    #[test]
    fn below_stays_below() {
        let mut rng = <rand_pcg::Pcg64Mcg as rand::SeedableRng>::seed_from_u64(1);
        for n in [1u64, 2, 7, 1 << 40] {
            for _ in 0..1000 {
                assert!(below(&mut rng, n) < n);
            }
        }
    }
}
