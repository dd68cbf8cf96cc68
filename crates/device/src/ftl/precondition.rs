//! Preconditioning (`ftl.precondition`): the state a run starts from, laid out, not stored.
//!
//! `none` starts factory fresh; `sequential` as in `ftl.rs` ("Mapping"); `random` builds,
//! directly and in O(superblocks) time, the state a long uniform random-write workload under
//! greedy GC leaves a full drive in: every LPN mapped, each LUN's free superblocks down to the
//! GC threshold (so GC runs from the first writes), and the other superblocks closed, each
//! partly invalid.
//!
//! *The valid counts* come from the fluid (mean-field) limit of greedy GC under uniform random
//! writes (the analysis of Desnoyers, SYSTOR 2012, and Van Houdt, SIGMETRICS 2013, in which
//! greedy and FIFO victim choice coincide as blocks grow — a superblock here holds thousands of
//! units). A superblock is full of valid data when closed; each later host write invalidates one
//! of the `U` live units at random, so after `h` host writes a fraction `e^(−h/U)` of its units
//! is still valid. In steady state superblocks are closed at an even pace and each is the victim
//! after `H` host writes, with victim valid fraction `α = e^(−H/U)`; the `N` closed superblocks
//! of `S` units hold `P = N·S` slots, and summing the live units over the ages gives `H = P(1 − α)`,
//! hence `α = exp(−(1 − α) / ρ)` with `ρ = U / P`. Superblock `i` (age order) holds
//! `S·e^(−h_i/U)` live units, `h_i = (i + ½)·H/N`, rounded so that the LUN's total is exact;
//! which superblock gets which age is shuffled from the run's seed. Write amplification of the
//! steady state is `1 / (1 − α)`. The exponentials are `libm::exp` (pure Rust), not `f64::exp`
//! (the platform's C library, which may differ in the last bit and so round a count the other
//! way): a seed gives the same layout on every machine
//! (`tests::steady_state_valid_units_are_pinned`).
//!
//! Worked example (`zssd`: per LUN 400 superblocks of 8,192 units, 4 free at the 1 % threshold,
//! `U` = 93 % of 400 × 8,192): `N` = 396, `ρ` = 0.939, `α` = 0.881: superblocks range from
//! 99.98 % valid (just closed: `h_0 = ½·H/N = ½ × 8,192 × 0.119` = 487 host writes old, and
//! `e^(−487/U)` = 0.9998) to 88 % (the next victim), and write amplification `1 / (1 − α)`
//! settles near 8.4.
//!
//! *Where each LPN sits* stays implicit, as for `sequential`: LUN `i mod L`, position `i div L`
//! in that LUN's share, and superblock rank `r` holds the positions `start[r]..start[r+1]` in its
//! first slots (the live units are packed at the front; which slots of a superblock are live
//! does not change GC's cost). A lookup is a binary search in `start` (a few hundred entries per
//! LUN): no per-LPN table is built, so an 800 GB drive is ready in milliseconds with only the
//! per-superblock metadata in memory. What this leaves out: live LPNs of one superblock are a
//! contiguous run of positions rather than a random set, and erase counts start at zero.
//!
//! *When there is no steady state*: if a LUN's `N` closed superblocks cannot hold its `U` live
//! units with any room to spare (`N·S ≤ U`: over-provisioning at or below the share of the LUN
//! the GC threshold keeps free), greedy GC has nothing to reclaim and no steady state exists.
//! That LUN then gets the `sequential` layout (full superblocks, the rest free), without a
//! warning. Example: `nvme-tlc` shrunk to 64 superblocks per LUN with 3 % over-provisioning
//! keeps 3 free (`gc_reserve_blocks` + 1), leaving 61 closed superblocks for 62.08
//! superblocks' worth of live data.
//!
//! Factory bad blocks are drawn here too, before the layout (`flash.bad_block_ppm`): a superblock
//! the remap checker cannot save is retired, and capacity follows the LUN with the fewest usable
//! superblocks.

use super::{alloc, map, Ftl, FtlStats, LunAlloc, SbMeta, SbState};
use crate::config::{DeviceConfig, Precondition};
use crate::flash::Geometry;

impl Ftl {
    /// As [`new`](Self::new), drawing factory bad blocks from the run's `seed`.
    pub fn with_seed(config: &DeviceConfig, geo: Geometry, integrity: bool, seed: u64) -> Ftl {
        let sb_per_lun = geo.superblocks_per_lun;
        let sb_units = geo.superblock_units() as u64;
        let mut stats = FtlStats {
            alloc: alloc::state::Allocator::initial_stats(config.ftl.alloc),
            ..FtlStats::default()
        };
        let retired = Self::draw_bad_blocks(config, &geo, seed, &mut stats);
        // Every LUN holds the same share of the logical space (LPN i lives on LUN i mod L), so
        // the capacity follows the LUN with the fewest usable superblocks.
        let min_usable = (0..geo.luns)
            .map(|l| {
                (0..sb_per_lun)
                    .filter(|&sb| !retired[(l * sb_per_lun + sb) as usize])
                    .count() as u64
            })
            .min()
            .unwrap_or(0);
        let usable_units = min_usable * sb_units * geo.luns as u64;
        let user_lpns = usable_units * (100 - config.ftl.overprovisioning_pct as u64) / 100;
        let implicit_lpns = match config.ftl.precondition {
            Precondition::None => 0,
            Precondition::Sequential | Precondition::Random => user_lpns,
        };
        let gc_threshold_free = (sb_per_lun as u64 * config.ftl.gc_threshold_pct as u64 / 100)
            .max(config.ftl.gc_reserve_blocks as u64 + 1) as u32;
        let layout = Layout {
            precondition: config.ftl.precondition,
            luns: geo.luns,
            sb_units,
            implicit_lpns,
            gc_threshold_free,
        };
        let mut age_rng = engine::stream(seed, "ftl.precondition");
        let mut random_fallback_luns = 0u32;
        let mut sbs = Vec::with_capacity((geo.luns * sb_per_lun) as usize);
        let mut luns = Vec::with_capacity(geo.luns as usize);
        for (lun, retired) in retired.chunks(sb_per_lun as usize).enumerate() {
            let (alloc, fell_back) = layout.lun(lun as u32, retired, &mut age_rng, &mut sbs);
            random_fallback_luns += u32::from(fell_back);
            luns.push(alloc);
        }
        let n_sbs = sbs.len();
        let geo_for_alloc = geo.clone();
        Ftl {
            geo,
            user_lpns,
            implicit_lpns,
            map: map::ForwardMap::new(user_lpns),
            sbs,
            reverse: (0..n_sbs).map(|_| None).collect(),
            moved: (0..n_sbs).map(|_| None).collect(),
            moved_records: 0,
            moved_bytes: 0,
            relocate_by_record: true,
            versions: integrity.then(|| (0..n_sbs).map(|_| None).collect()),
            luns,
            gc_threshold_free,
            gc_reserve: config.ftl.gc_reserve_blocks,
            host_lun_cursor: 0,
            alloc: alloc::state::Allocator::new(config, &geo_for_alloc),
            stats,
            random_fallback_luns,
        }
    }

    /// superblock, whether it must be retired.
    ///
    /// A superblock spans `planes_per_die × channels_per_lun` physical blocks (both dies of a
    /// super-channel pair). With `super_channel = "on"`, the remap checker replaces a bad block
    /// by a clean spare of its LUN (`spare_blocks_per_plane` per physical plane) so the pair
    /// stays usable; otherwise — or when spares run out — one bad block retires the superblock.
    fn draw_bad_blocks(
        config: &DeviceConfig,
        geo: &Geometry,
        seed: u64,
        stats: &mut FtlStats,
    ) -> Vec<bool> {
        let f = &config.flash;
        let n = (geo.luns * geo.superblocks_per_lun) as usize;
        let mut retired = vec![false; n];
        if f.bad_block_ppm == 0 {
            return retired;
        }
        let mut rng = engine::stream(seed, "flash.bad-blocks");
        let blocks_per_sb = f.planes_per_die as u64 * geo.channels_per_lun as u64;
        let remap = f.super_channel == crate::config::Switch::On;
        for lun in 0..geo.luns {
            let mut spares = f.spare_blocks_per_plane as u64 * blocks_per_sb;
            for sb in 0..geo.superblocks_per_lun {
                let bad = (0..blocks_per_sb)
                    .filter(|_| engine::rng::chance(&mut rng, f.bad_block_ppm as u64, 1_000_000))
                    .count() as u64;
                stats.bad_blocks += bad;
                if bad == 0 {
                    continue;
                }
                if remap && spares >= bad {
                    spares -= bad;
                    stats.blocks_remapped += bad;
                } else {
                    retired[(lun * geo.superblocks_per_lun + sb) as usize] = true;
                    stats.superblocks_retired += 1;
                }
            }
        }
        retired
    }

    /// The LPN whose preconditioned data sits at `slot` of implicit superblock `sb` of `lun`.
    pub(super) fn implicit_lpn(&self, lun: u32, sb: u32, slot: u32) -> Option<u64> {
        let l = &self.luns[lun as usize];
        let rank = l.rank[sb as usize];
        if rank == u32::MAX {
            return None;
        }
        let pos = if l.implicit_start.is_empty() {
            rank as u64 * self.geo.superblock_units() as u64 + slot as u64
        } else {
            let r = rank as usize;
            if r + 1 >= l.implicit_start.len()
                || slot as u64 >= l.implicit_start[r + 1] - l.implicit_start[r]
            {
                return None;
            }
            l.implicit_start[r] + slot as u64
        };
        let lpn = pos * self.geo.luns as u64 + lun as u64;
        (lpn < self.implicit_lpns).then_some(lpn)
    }
}

/// What laying out a LUN needs to know of the whole drive.
struct Layout {
    precondition: Precondition,
    luns: u32,
    sb_units: u64,
    /// LPNs below this are preconditioned (0 for `none`).
    implicit_lpns: u64,
    gc_threshold_free: u32,
}

impl Layout {
    /// Lays out LUN `lun`, whose superblocks `retired` says are retired: pushes the metadata of
    /// its superblocks onto `sbs` and returns its allocation state, and whether the random
    /// layout fell back to the sequential one for lack of room (see the module essay).
    fn lun(
        &self,
        lun: u32,
        retired: &[bool],
        age_rng: &mut engine::SimRng,
        sbs: &mut Vec<SbMeta>,
    ) -> (LunAlloc, bool) {
        let sb_units = self.sb_units;
        // LPNs i < implicit with i mod L == lun fill this LUN's usable superblocks in order.
        let count = if self.implicit_lpns > lun as u64 {
            (self.implicit_lpns - lun as u64).div_ceil(self.luns as u64)
        } else {
            0
        };
        let mut usable = Vec::new();
        let mut rank = vec![u32::MAX; retired.len()];
        for (sb, _) in retired.iter().enumerate().filter(|(_, &r)| !r) {
            rank[sb] = usable.len() as u32;
            usable.push(sb as u32);
        }
        let mut full_sbs = count.div_ceil(sb_units) as u32;
        let mut implicit_start = Vec::new();
        let mut fell_back = false;
        if self.precondition == Precondition::Random {
            let closed = (usable.len() as u32).saturating_sub(self.gc_threshold_free);
            if closed as u64 * sb_units <= count {
                fell_back = true;
            } else {
                let valid = steady_state_valid_units(count, closed, sb_units as u32, age_rng);
                implicit_start.push(0);
                for v in valid {
                    let last = *implicit_start.last().expect("starts with 0");
                    implicit_start.push(last + v as u64);
                }
                full_sbs = closed;
            }
        }
        for (sb, &is_retired) in retired.iter().enumerate() {
            let r = rank[sb];
            let implicit = !is_retired && r < full_sbs;
            let valid_units = if !implicit {
                0
            } else if implicit_start.is_empty() {
                (count - r as u64 * sb_units).min(sb_units) as u32
            } else {
                (implicit_start[r as usize + 1] - implicit_start[r as usize]) as u32
            };
            let state = if is_retired {
                SbState::Retired
            } else if implicit {
                SbState::Closed
            } else {
                SbState::Free
            };
            sbs.push(SbMeta {
                state,
                valid_units,
                erase_count: 0,
                implicit,
            });
        }
        // Free list as a stack: lowest index on top, for a deterministic start.
        let free = usable
            .iter()
            .skip(full_sbs as usize)
            .rev()
            .copied()
            .collect();
        let in_order_ranks = usable
            .iter()
            .enumerate()
            .take_while(|&(r, &sb)| r as u32 == sb)
            .count() as u32;
        let alloc = LunAlloc {
            usable,
            rank,
            in_order_ranks,
            implicit_start,
            free,
            open: None,
            next_row: 0,
            gc_running: false,
            host_rows_queued: 0,
        };
        (alloc, fell_back)
    }
}

/// Valid units of each of `closed` superblocks (of `sb_units` units) holding `count` live units,
/// as uniform random writes under greedy GC leave them (see the module essay); the result is in a random order drawn from `rng` and sums to `count` exactly.
pub(super) fn steady_state_valid_units(
    count: u64,
    closed: u32,
    sb_units: u32,
    rng: &mut engine::SimRng,
) -> Vec<u32> {
    assert!(
        closed > 0 && count < closed as u64 * sb_units as u64,
        "{count} live units do not leave invalid space in {closed} superblocks of {sb_units}"
    );
    let physical = closed as f64 * sb_units as f64;
    let rho = count as f64 / physical;
    // The victim's valid fraction α solves α = exp(−(1 − α) / ρ) on (0, 1): bisection, with
    // g(α) = α − exp(−(1 − α)/ρ) negative at 0 and positive just below the trivial root 1.
    let g = |a: f64| a - libm::exp(-(1.0 - a) / rho);
    let (mut lo, mut hi) = (0.0f64, 1.0 - 1e-12);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if g(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let alpha = lo;
    // Host writes (in units) a superblock lives from its fill to being the victim.
    let lifetime = physical * (1.0 - alpha);
    let mut valid: Vec<u32> = (0..closed)
        .map(|i| {
            let age = (i as f64 + 0.5) / closed as f64 * lifetime;
            (sb_units as f64 * libm::exp(-age / count as f64)).round() as u32
        })
        .collect();
    // Rounding leaves the sum a few units off `count`: spread the difference one unit at a time.
    let mut sum: i64 = valid.iter().map(|&v| v as i64).sum();
    let mut i = 0usize;
    while sum != count as i64 {
        let v = &mut valid[i % closed as usize];
        if sum < count as i64 && *v < sb_units {
            *v += 1;
            sum += 1;
        } else if sum > count as i64 && *v > 0 {
            *v -= 1;
            sum -= 1;
        }
        i += 1;
    }
    // Which superblock has which age is arbitrary: shuffle (Fisher–Yates from the run's seed).
    for k in (1..valid.len()).rev() {
        let j = engine::rng::below(rng, k as u64 + 1) as usize;
        valid.swap(k, j);
    }
    valid
}
