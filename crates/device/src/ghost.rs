//! Adaptive prefetch with ghost caches (`cache.prefetch = "ghost"`).
//!
//! ## What it models
//! FlashShare's prefetch tuning (device.md, "Adaptive prefetch"): no single read-ahead size
//! suits every workload — a sequential scan wants large prefetches, random lookups want none
//! (every prefetched page costs a flash read and evicts a line). The firmware runs several
//! *ghost caches* beside the real one: each holds tags only, has the real partition's sets and
//! ways, and replays the same access stream as if the cache prefetched a different number of
//! pages. Each epoch the real cache adopts the granularity of the ghost that missed least.
//!
//! ## The model
//! One ghost per granularity in `cache.ghost_pages` (default 0, 4, 16, 64, 128 pages, device.md's
//! example list, ascending). A ghost is a tag array with LRU, nothing else: no data, no dirty
//! state, no timing. On every command the real cache sees ([`GhostPrefetch::on_read`],
//! [`GhostPrefetch::on_write`]):
//! - a read of units `first .. first + units`: each unit is looked up (a miss counts, and the
//!   unit is installed as most recently used); then the `g` units after the command are
//!   installed where absent — exactly what the real cache does with `prefetch_pages = g`
//!   (`read_path.rs`, `start_read`: after every read command, the next `prefetch_pages` units that
//!   are not cached);
//! - a write: each unit is looked up and installed (it occupies a line; no miss counts, since a
//!   write needs no flash read).
//!
//! At the first command after an epoch's end (`cache.epoch_ns`, shared with the class split),
//! each ghost's misses since the last decision are compared, and the real cache's prefetch
//! becomes the *smallest* granularity whose misses are within 1/16 of the fewest
//! ([`NEAR_TIE_DIVISOR`]). device.md says "the ghost with the fewest misses"; that rule needs a
//! tie-break, and ties are the common case: every granularity at least a command's size covers
//! a sequential stream, so 16, 64 and 128 pages all miss nothing on 64 KiB sequential reads
//! (the worked example), and on random reads every ghost misses nearly every unit. Among
//! equals we take the smallest because prefetching costs what the miss count does not see:
//! each prefetched page is a flash read and a line evicted. And a near-tie counts as a tie
//! because the counts are samples of one set in 17: a count of m misses varies by about √m
//! from epoch to epoch (40 at m = 1,600, the worked example's epoch), and a margin of 1/16 of
//! m (100 there) is 2.5 times that, so a larger granularity is adopted for missing less, not
//! for sampling luck. Where one granularity misses clearly least,
//! it is adopted whatever its size (the test
//! `strided_reads_in_a_small_partition_pick_64_pages_the_unique_fewest`: 64 pages against
//! 16 and 128). An epoch with fewer than [`MIN_SAMPLED_READS`]
//! sampled demand reads decides nothing and carries its counts into the next (a slow workload
//! still decides, on a longer horizon). The run starts at the smallest granularity.
//!
//! With the cache split by class (`cache.partition = "dynamic"`) there is one group of ghosts
//! per class: it sees only that class's commands, has that partition's ways (following each
//! reassignment: a partition that shrinks drops its ghosts' lines in the ways it lost), and
//! sets that class's prefetch. Shared, one group sees every command and sets both.
//!
//! ## Set sampling
//! A ghost with 128-page prefetch installs up to 128 tags per read; five full-size ghosts cost
//! more than the rest of the device model. The ghosts therefore simulate one set in
//! `ghost_sample_period_sets` (default 17; set sampling, as the utility monitors of cache
//! partitioning work do): only units whose set number (`lpn mod sets`) is a multiple of the
//! period are looked up or installed, so a sampled set sees *every* access the full ghost
//! would give it, and the sampled ghost's misses are exactly the full ghost's misses in those
//! sets. The period is prime on purpose: with 16, every sampled unit of a stream of 64 KiB
//! reads aligned to 64 KiB would be its command's first unit — the one a 4-page prefetch
//! always covers — and the 4-page ghost would look as good as the 16-page one. A prime period
//! meets power-of-two strides and alignments at every offset in turn. Cost per read: five
//! lookups in one read of 17, and 212 / 17 ≈ 13 tag installs when every ghost prefetches.
//! Measured (`cargo bench -p sim --bench device_throughput -- d-zssd`, 1 M random 4 KiB reads
//! at QD32 on `zssd` with the split and the ghosts on, against case `a-zssd`, the same run with
//! both off): 9.94 G instructions against 5.99 G under `valgrind --tool=callgrind`, 1.02–1.04 s
//! of user CPU against 0.68–0.74 s (`/usr/bin/time`, a loaded 2-core machine). Random reads
//! are the worst case (every read installs prefetched tags in four ghosts); the cost falls
//! about as `1 / ghost_sample_period_sets`.
//!
//! Worked example (`zssd`: 24,576 sets of 16 ways; period 17 → 1,446 sampled sets). A stream
//! of sequential 64 KiB reads (16 units per command) has 16/17 of a sampled unit per command
//! on average, at every position of the command in turn. The 0-page ghost misses every unit;
//! the 4-page ghost finds the command's first 4 units prefetched by the command before and
//! misses the other 12; the 16-, 64- and 128-page ghosts miss none once the stream runs. Per
//! 1,700 commands: ≈ 1,600 sampled reads and ≈ 1,600, 1,200, 0, 0, 0 misses — the fewest is
//! 0, and the smallest granularity within 1/16 of it is 16 pages: adopted. Random 4 KiB reads
//! over a footprint far larger than the cache miss nearly always in every ghost; the counts
//! are within 1/16 of each other and 0 pages wins.
//!
//! ## Prefetch reads on the flash
//! The ghosts count misses, not flash work; the prefetches they choose are issued as
//! background reads, behind every demand read on the die and its channel (`flash`'s essay,
//! "Prefetch reads behind demand reads"), so a large granularity costs the demand stream
//! little of its latency.
//!
//! ## What it leaves out
//! Timing (a ghost's prefetch arrives at once; in the device a prefetch still filling is a
//! slower hit); the stream-detecting read-ahead (`cache.readahead_units`) — the cache
//! sensitivity study turns it off so that prefetch is the only read-ahead; dirty lines (a ghost
//! may replace a line the real cache could not); the device's capacity and never-written units
//! (a ghost prefetches past the last LPN, and units the real cache skips because no flash page
//! holds them).

use engine::IoClass;
use serde::{Deserialize, Serialize};

use crate::config::CacheConfig;

/// A ghost's tag of an invalid way.
const NO_LPN: u32 = u32::MAX;

/// A larger granularity is adopted only if its misses are more than 1/16 (6 %) below those of
/// every smaller one: within that, the prefetch's extra flash reads are not worth it.
pub const NEAR_TIE_DIVISOR: u64 = 16;

/// Sampled demand reads an epoch needs before its counts decide (fewer: carried over). With
/// 32 sampled reads a 1/16 difference is two misses; below it one miss decides.
pub const MIN_SAMPLED_READS: u64 = 32;

/// Misses of one ghost over the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GhostMisses {
    pub pages: u32,
    /// Sampled demand-read misses.
    pub misses: u64,
}

/// What one group of ghosts did (`cache.ghost` in `summary.json` when it is on).
/// A ghost group's `class` as [`Ghost::stats`] names it.
fn group_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    crate::stats_de::one_of(
        d,
        &[
            "all",
            IoClass::LatencyCritical.name(),
            IoClass::Throughput.name(),
        ],
    )
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GhostGroupStats {
    /// `all` (shared cache) or the class whose partition the group follows.
    #[serde(deserialize_with = "group_name")]
    pub class: crate::stats_de::StaticName,
    /// Granularity in use at the end, in pages.
    pub pages: u32,
    /// Epochs whose counts decided, and how many of those changed the granularity.
    pub decisions: u64,
    pub changes: u64,
    /// Demand reads the sampled sets saw.
    pub sampled_reads: u64,
    pub misses: Vec<GhostMisses>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GhostStats {
    pub groups: Vec<GhostGroupStats>,
}

/// The sampled units of `from .. to` with their sampled-set numbers: units whose set
/// (`lpn mod sets`) is a multiple of `period`. Two divisions to start, then additions only
/// (the ghosts run on every command: a division per unit cost more than the lookups).
#[derive(Clone, Copy)]
struct Sampled {
    sets: u32,
    period: u32,
    /// The next sampled unit, its set and its sampled-set number.
    lpn: u64,
    set: u32,
    index: u32,
    to: u64,
}

impl Sampled {
    fn new(sets: u32, period: u32, from: u32, to: u32) -> Sampled {
        let set = from % sets;
        let skip = (period - set % period) % period;
        let (lpn, set) = if set + skip >= sets {
            (u64::from(from) + u64::from(sets - set), 0) // no sampled set left: to set 0
        } else {
            (u64::from(from) + u64::from(skip), set + skip)
        };
        Sampled {
            sets,
            period,
            lpn,
            set,
            index: set / period,
            to: u64::from(to),
        }
    }

    /// The same walk, ending at `to` instead.
    fn until(self, to: u32) -> Sampled {
        Sampled {
            to: u64::from(to),
            ..self
        }
    }
}

impl Iterator for Sampled {
    /// `(lpn, sampled-set number)`.
    type Item = (u32, usize);

    #[inline]
    fn next(&mut self) -> Option<(u32, usize)> {
        if self.lpn >= self.to {
            return None;
        }
        let item = (self.lpn as u32, self.index as usize);
        if self.set + self.period < self.sets {
            self.set += self.period;
            self.index += 1;
            self.lpn += u64::from(self.period);
        } else {
            self.lpn += u64::from(self.sets - self.set);
            self.set = 0;
            self.index = 0;
        }
        Some(item)
    }
}

/// Where `lpn` goes in a ghost set of `tags.len()` ways with LRU stamps `used`: `(true, way)`
/// holding it, else `(false, way)` to install it in: the first invalid way, else the first
/// least recently used one.
fn way_scan(tags: &[u32], used: &[u32], lpn: u32) -> (bool, usize) {
    if let Some(w) = tags.iter().position(|&t| t == lpn) {
        return (true, w);
    }
    let w = match tags.iter().position(|&t| t == NO_LPN) {
        Some(w) => w,
        None => used
            .iter()
            .enumerate()
            .min_by_key(|&(_, &u)| u)
            .map(|(w, _)| w)
            .expect("a ghost set has at least one way"),
    };
    (false, w)
}

/// One simulated granularity: tags and LRU stamps of the sampled sets.
struct Ghost {
    pages: u32,
    /// Ways simulated now (the partition's; at most `ways_cap`).
    ways: u32,
    ways_cap: u32,
    tags: Vec<u32>,
    used: Vec<u32>,
    clock: u32,
    /// Sampled demand-read misses since the last decision.
    misses: u64,
}

impl Ghost {
    fn new(pages: u32, sampled_sets: u32, ways: u32, ways_cap: u32) -> Ghost {
        let n = sampled_sets as usize * ways_cap as usize;
        Ghost {
            pages,
            ways,
            ways_cap,
            tags: vec![NO_LPN; n],
            used: vec![0; n],
            clock: 0,
            misses: 0,
        }
    }

    /// Looks `lpn` up in sampled set `s`: found, it becomes most recently used if `refresh`
    /// (a demand access; a prefetch leaves a cached line alone, as the real cache does);
    /// absent, it is installed as most recently used, in an invalid way or over the least
    /// recently used. Returns whether it was there.
    #[inline(always)]
    fn access(&mut self, s: usize, lpn: u32, refresh: bool) -> bool {
        self.clock = self.clock.wrapping_add(1);
        let base = s * self.ways_cap as usize;
        let set = base..base + self.ways as usize;
        let (found, w) = way_scan(&self.tags[set.clone()], &self.used[set], lpn);
        if found {
            if refresh {
                self.used[base + w] = self.clock;
            }
            return true;
        }
        self.tags[base + w] = lpn;
        self.used[base + w] = self.clock;
        false
    }

    /// The partition now has `ways` ways: lines in ways it lost are gone.
    fn set_ways(&mut self, ways: u32) {
        assert!(
            (1..=self.ways_cap).contains(&ways),
            "a ghost of {} ways cannot follow a partition of {ways}",
            self.ways_cap
        );
        // Way by way, every set's copy in one strided pass (an epoch usually moves one way).
        for lost in ways..self.ways {
            for tag in self.tags[lost as usize..]
                .iter_mut()
                .step_by(self.ways_cap as usize)
            {
                *tag = NO_LPN;
            }
        }
        self.ways = ways;
    }
}

/// The ghosts of one partition (or of the shared cache) and the granularity they chose.
struct Group {
    ghosts: Vec<Ghost>,
    /// Index of the granularity in use.
    chosen: usize,
    /// Sampled demand reads since the last decision.
    sampled_reads: u64,
}

/// Ghost caches per partition and the granularity each adopted. See the module essay.
pub struct GhostPrefetch {
    sets: u32,
    period: u32,
    groups: Vec<Group>,
    split: bool,
}

impl GhostPrefetch {
    /// Ghosts for a cache of `sets` sets of `config.ways` ways; `split_ways` gives each class's
    /// partition when the cache is split by class (one group per class), `None` when shared.
    pub fn new(config: &CacheConfig, sets: u32, split_ways: Option<[u32; 2]>) -> GhostPrefetch {
        let period = config.ghost_sample_period_sets;
        assert!(
            (1..=sets).contains(&period),
            "ghost sampling period {period} must be 1 to the {sets} sets"
        );
        assert!(
            !config.ghost_pages.is_empty(),
            "ghost prefetch needs at least one granularity"
        );
        let sampled = sets.div_ceil(period);
        let cap = config.ways;
        let group = |ways: u32| Group {
            ghosts: config
                .ghost_pages
                .iter()
                .map(|&p| Ghost::new(p, sampled, ways, cap))
                .collect(),
            chosen: 0,
            sampled_reads: 0,
        };
        let groups = match split_ways {
            Some(w) => vec![group(w[0]), group(w[1])],
            None => vec![group(cap)],
        };
        GhostPrefetch {
            sets,
            period,
            groups,
            split: split_ways.is_some(),
        }
    }

    pub fn stats(&self) -> GhostStats {
        let name = |g: usize| match (self.split, g) {
            (false, _) => "all",
            (true, 0) => IoClass::LatencyCritical.name(),
            (true, _) => IoClass::Throughput.name(),
        };
        GhostStats {
            groups: self
                .groups
                .iter()
                .enumerate()
                .map(|(i, g)| GhostGroupStats {
                    class: name(i),
                    pages: g.ghosts[g.chosen].pages,
                    misses: g
                        .ghosts
                        .iter()
                        .map(|x| GhostMisses {
                            pages: x.pages,
                            misses: 0,
                        })
                        .collect(),
                    ..GhostGroupStats::default()
                })
                .collect(),
        }
    }

    #[inline]
    fn group(&self, class: IoClass) -> usize {
        if self.split {
            class.index()
        } else {
            0
        }
    }

    /// Prefetch size for a read of `class` now, in pages.
    #[inline]
    pub fn pages(&self, class: IoClass) -> u32 {
        let g = &self.groups[self.group(class)];
        g.ghosts[g.chosen].pages
    }

    /// A read command of `class` of `units` units from `first`.
    pub fn on_read(&mut self, class: IoClass, first: u32, units: u32) {
        let end = first.saturating_add(units);
        let demand = Sampled::new(self.sets, self.period, first, end);
        let ahead = Sampled::new(self.sets, self.period, end, end);
        let gi = self.group(class);
        let group = &mut self.groups[gi];
        group.sampled_reads += demand.count() as u64;
        for ghost in &mut group.ghosts {
            for (lpn, s) in demand {
                if !ghost.access(s, lpn, true) {
                    ghost.misses += 1;
                }
            }
            for (lpn, s) in ahead.until(end.saturating_add(ghost.pages)) {
                ghost.access(s, lpn, false);
            }
        }
    }

    /// A write command of `class` of `units` units from `first`: its lines occupy the ghosts.
    pub fn on_write(&mut self, class: IoClass, first: u32, units: u32) {
        let (sets, period) = (self.sets, self.period);
        let gi = self.group(class);
        let group = &mut self.groups[gi];
        for ghost in &mut group.ghosts {
            for (lpn, s) in Sampled::new(sets, period, first, first.saturating_add(units)) {
                ghost.access(s, lpn, true);
            }
        }
    }

    /// `class`'s partition now has `ways` ways (split cache only).
    pub fn set_ways(&mut self, class: IoClass, ways: u32) {
        assert!(self.split, "only a split cache's ghosts follow a partition");
        for ghost in &mut self.groups[class.index()].ghosts {
            ghost.set_ways(ways);
        }
    }

    /// Closes an epoch: each group with enough sampled reads adopts a granularity (see the
    /// module essay) and records the decision in `stats`.
    pub fn close_epoch(&mut self, stats: &mut GhostStats) {
        for (group, st) in self.groups.iter_mut().zip(&mut stats.groups) {
            if group.sampled_reads < MIN_SAMPLED_READS {
                continue;
            }
            let fewest = group
                .ghosts
                .iter()
                .map(|g| g.misses)
                .min()
                .expect("at least one ghost");
            let bound = fewest + fewest / NEAR_TIE_DIVISOR;
            let pick = group
                .ghosts
                .iter()
                .position(|g| g.misses <= bound)
                .expect("the fewest is within its own bound");
            st.decisions += 1;
            if pick != group.chosen {
                st.changes += 1;
            }
            group.chosen = pick;
            st.pages = group.ghosts[pick].pages;
            st.sampled_reads += group.sampled_reads;
            group.sampled_reads = 0;
            for (g, m) in group.ghosts.iter_mut().zip(&mut st.misses) {
                m.misses += g.misses;
                g.misses = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ghosts(
        lines: u64,
        ways: u32,
        period: u32,
        split: Option<[u32; 2]>,
    ) -> (GhostPrefetch, GhostStats) {
        let config = CacheConfig {
            dram_bytes: lines * 4096,
            ways,
            ghost_sample_period_sets: period,
            ..crate::cache::tests::cache_config()
        };
        let sets = (lines / ways as u64) as u32;
        let g = GhostPrefetch::new(&config, sets, split);
        let s = g.stats();
        (g, s)
    }

    /// The essay's worked example: sequential 64 KiB reads pick 16 pages, the smallest
    /// granularity that leaves no miss.
    #[test]
    fn sequential_64k_reads_pick_16_pages() {
        let (mut g, mut st) = ghosts(8192, 16, 17, None);
        assert_eq!(g.pages(IoClass::Throughput), 0, "starts at the smallest");
        for cmd in 0..2_000u32 {
            g.on_read(IoClass::Throughput, 1_000_000 + cmd * 16, 16);
        }
        g.close_epoch(&mut st);
        assert_eq!(g.pages(IoClass::Throughput), 16);
        assert_eq!(g.pages(IoClass::LatencyCritical), 16, "shared: one choice");
        let m: Vec<u64> = st.groups[0].misses.iter().map(|m| m.misses).collect();
        assert_eq!(
            m[0], st.groups[0].sampled_reads,
            "0 pages: every sampled unit misses"
        );
        // 4 pages: 12 of every 16 units miss (the prime period samples every position).
        assert!(m[1] * 16 > m[0] * 11 && m[1] * 16 < m[0] * 13, "{m:?}");
        assert!(m[2] <= 1 && m[3] <= 1 && m[4] <= 1, "{m:?}");
        assert_eq!((st.groups[0].decisions, st.groups[0].changes), (1, 1));
    }

    /// A stream whose best granularity is unique, so the fewest misses decide and no tie rule
    /// does: reads of 16 units each 48 units past the previous one ("read 16, skip 32") in a
    /// partition of one set of 64 ways (every set sampled). 0, 4 and 16 pages never reach the
    /// next command, which starts 32 units past the end of the prefetch window's start: every
    /// unit misses. 64 pages cover it (the window is the 64 units after the command): only the
    /// first command misses. 128 pages overflow the 64-line set: the window's last 64 units
    /// evict its first 64, the next command's among them, so every unit misses again. The
    /// ghost picks 64, the unique fewest.
    #[test]
    fn strided_reads_in_a_small_partition_pick_64_pages_the_unique_fewest() {
        let (mut g, mut st) = ghosts(64, 64, 1, None);
        for cmd in 0..500u32 {
            g.on_read(IoClass::Throughput, 1_000 + cmd * 48, 16);
        }
        g.close_epoch(&mut st);
        let m: Vec<u64> = st.groups[0].misses.iter().map(|m| m.misses).collect();
        assert_eq!(m, [8_000, 8_000, 8_000, 16, 8_000]);
        assert_eq!(g.pages(IoClass::Throughput), 64);
    }

    /// Too few sampled reads decide nothing; the counts carry over until there are enough.
    #[test]
    fn a_thin_epoch_carries_its_counts() {
        let (mut g, mut st) = ghosts(8192, 16, 17, None);
        for cmd in 0..20u32 {
            g.on_read(IoClass::Throughput, cmd * 16, 16);
        }
        g.close_epoch(&mut st);
        assert_eq!(
            (st.groups[0].decisions, g.pages(IoClass::Throughput)),
            (0, 0)
        );
        for cmd in 20..40u32 {
            g.on_read(IoClass::Throughput, cmd * 16, 16);
        }
        g.close_epoch(&mut st);
        assert_eq!(
            (st.groups[0].decisions, g.pages(IoClass::Throughput)),
            (1, 16)
        );
        assert_eq!(
            st.groups[0].sampled_reads, 39,
            "LPNs 0..640: sets 0, 17, …, 510 and 0, …, 119"
        );
    }

    /// A shrinking partition drops its ghosts' lines in the lost ways; split groups choose
    /// apart.
    #[test]
    fn split_groups_follow_their_partition_and_choose_apart() {
        let (mut g, mut st) = ghosts(64, 4, 1, Some([2, 2]));
        // Fill LC's two ways of set 0 (16 sets: LPNs 0, 16).
        g.on_read(IoClass::LatencyCritical, 0, 1);
        g.on_read(IoClass::LatencyCritical, 16, 1);
        g.set_ways(IoClass::LatencyCritical, 1);
        g.set_ways(IoClass::LatencyCritical, 2);
        let lc = &g.groups[0].ghosts[0];
        assert_eq!(
            &lc.tags[..4],
            &[0, NO_LPN, NO_LPN, NO_LPN],
            "way 1's line is gone"
        );
        for i in 0..40u32 {
            g.on_read(IoClass::Throughput, 1_000 + 16 * i, 16);
            g.on_read(IoClass::LatencyCritical, (i * 7_919) % 100_000, 1);
        }
        g.close_epoch(&mut st);
        assert_eq!(g.pages(IoClass::Throughput), 16);
        assert_eq!(g.pages(IoClass::LatencyCritical), 0);
        assert_eq!(st.groups[1].class, "throughput");
    }

    /// A plain LRU cache of every set, prefetching like the real cache: the reference the
    /// sampled ghost must agree with on the sampled sets.
    struct Reference {
        sets: Vec<Vec<u32>>, // most recently used last
        ways: usize,
    }

    impl Reference {
        /// Returns whether `lpn` was there.
        fn access(&mut self, lpn: u32, refresh: bool) -> bool {
            let n = self.sets.len() as u32;
            let set = &mut self.sets[(lpn % n) as usize];
            if let Some(p) = set.iter().position(|&t| t == lpn) {
                if refresh {
                    let t = set.remove(p);
                    set.push(t);
                }
                return true;
            }
            if set.len() == self.ways {
                set.remove(0);
            }
            set.push(lpn);
            false
        }
    }

    proptest::proptest! {
        /// Set sampling is exact: a sampled ghost misses exactly as often as a full LRU cache
        /// does in the sampled sets, for any command stream, including periods that do not
        /// divide the set count and ranges that wrap around the sets.
        #[test]
        fn a_sampled_ghost_misses_exactly_as_the_full_cache_in_its_sets(
            sets in 1u32..24,
            ways in 1u32..4,
            period_pick in 0u32..1000,
            pages in 0u32..40,
            cmds in proptest::collection::vec((0u32..300, 1u32..9, proptest::bool::ANY), 1..200),
        ) {
            let period = 1 + period_pick % sets;
            let config = CacheConfig {
                dram_bytes: u64::from(sets * ways) * 4096,
                ways,
                ghost_pages: vec![pages],
                ghost_sample_period_sets: period,
                ..crate::cache::tests::cache_config()
            };
            let mut g = GhostPrefetch::new(&config, sets, None);
            let mut st = g.stats();
            let mut r = Reference { sets: vec![Vec::new(); sets as usize], ways: ways as usize };
            let sampled = |lpn: u32| (lpn % sets).is_multiple_of(period);
            let (mut misses, mut reads) = (0u64, 0u64);
            for &(first, units, write) in &cmds {
                let end = first + units;
                if write {
                    g.on_write(IoClass::Throughput, first, units);
                    for l in first..end {
                        r.access(l, true);
                    }
                } else {
                    g.on_read(IoClass::Throughput, first, units);
                    for l in first..end {
                        let hit = r.access(l, true);
                        if sampled(l) {
                            reads += 1;
                            misses += u64::from(!hit);
                        }
                    }
                    for l in end..end + pages {
                        r.access(l, false);
                    }
                }
            }
            let group = &g.groups[0];
            proptest::prop_assert_eq!(group.sampled_reads + st.groups[0].sampled_reads, reads);
            g.close_epoch(&mut st);
            let total = group_misses(&g, &st);
            proptest::prop_assert_eq!(total, misses);
        }
    }

    /// Misses of the single ghost, decided or not.
    fn group_misses(g: &GhostPrefetch, st: &GhostStats) -> u64 {
        g.groups[0].ghosts[0].misses + st.groups[0].misses[0].misses
    }
}
