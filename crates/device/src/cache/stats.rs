//! The cache's counters, overall and per class (see "Per-class accounting" in `cache.rs`).

use engine::IoClass;

use crate::cache_split::PartitionStats;
use crate::ghost::GhostStats;

/// Per-class cache counters. A line belongs to the class of the command that last put data
/// in it (the read that filled it, the prefetch's read, the last write); see "Per-class
/// accounting" in the module essay.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClassCacheStats {
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    /// Lines prefetched on this class's reads, and read hits of this class on a prefetched
    /// line not read before.
    pub prefetch_fills: u64,
    pub prefetch_hits: u64,
    /// This class's lines replaced to make room (the data left DRAM).
    pub lines_evicted: u64,
    /// This class's dirty units programmed to flash (the line stays, clean).
    pub units_written_back: u64,
    /// Occupancy at the end of the run (the time series has it over time): valid lines, and
    /// the part of them in the write buffer (dirty or being programmed).
    pub lines: u64,
    pub dirty_units: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    pub latency_critical: ClassCacheStats,
    pub throughput: ClassCacheStats,
    pub prefetch_fills: u64,
    pub prefetch_hits: u64,
    pub units_evicted: u64,
    pub max_dirty_units: u64,
    /// `cache.partition = "dynamic"` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<PartitionStats>,
    /// `cache.prefetch = "ghost"` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ghost: Option<GhostStats>,
}

impl CacheStats {
    pub(super) fn class(&mut self, class: IoClass) -> &mut ClassCacheStats {
        match class {
            IoClass::LatencyCritical => &mut self.latency_critical,
            IoClass::Throughput => &mut self.throughput,
        }
    }

    /// By `IoClass::index` (as lines store their class).
    #[inline]
    pub(super) fn class_at(&mut self, index: u8) -> &mut ClassCacheStats {
        if index == 0 {
            &mut self.latency_critical
        } else {
            &mut self.throughput
        }
    }

    /// This class's counters.
    pub fn of(&self, class: IoClass) -> &ClassCacheStats {
        match class {
            IoClass::LatencyCritical => &self.latency_critical,
            IoClass::Throughput => &self.throughput,
        }
    }
}
