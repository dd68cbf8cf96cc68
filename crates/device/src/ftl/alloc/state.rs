//! The allocation policy's state and counters (`ftl/alloc.rs` is the policy): what the FTL holds
//! for `ftl.alloc` — the policy, the latency-aware allocator's open superblocks per LUN and the
//! LSB region's size and cap — and the [`AllocStats`] a run reports. It names nothing of the FTL,
//! so the FTL can hold it while the policy's code works on the FTL.
//! (Its items are `pub(crate)`, as seen from the FTL: the module itself is private to `ftl`.)

use crate::config::{Alloc, DeviceConfig, MAP_UNIT_BYTES};
use crate::flash::Geometry;

/// Allocation counters (in `summary.json` under `device.ftl.alloc` unless `sequential`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AllocStats {
    /// The policy's name as `ftl.alloc` spells it.
    #[serde(deserialize_with = "crate::stats_de::alloc_policy")]
    pub policy: crate::stats_de::StaticName,
    /// Host rows programmed into LSB, CSB and MSB pages.
    pub host_rows_lsb: u64,
    pub host_rows_csb: u64,
    pub host_rows_msb: u64,
    /// Pages (rows) skipped and never programmed (`lsb-skip`).
    pub pages_skipped: u64,
    /// Foreground rows that found no LSB page within the LSB region's cap.
    pub foreground_fallbacks: u64,
    /// Most superblocks the LSB region held at once.
    pub lsb_region_superblocks_max: u64,
}

/// An open superblock of the latency-aware allocator.
#[derive(Clone, Copy, Debug)]
pub(super) struct OpenBlock {
    pub(super) sb: u32,
    pub(super) next_row: u32,
    /// Opened by a foreground row: counts against the LSB region until it closes.
    pub(super) in_region: bool,
}

/// The allocation policy's state (held by the FTL).
pub(crate) struct Allocator {
    pub(super) policy: Alloc,
    /// Latency-aware: each LUN's open superblocks.
    pub(super) open: Vec<Vec<OpenBlock>>,
    pub(super) region_superblocks: u64,
    pub(super) region_cap_superblocks: u64,
}

impl Allocator {
    pub(crate) fn new(config: &DeviceConfig, geo: &Geometry) -> Allocator {
        let sb_bytes = geo.superblock_units() as u64 * MAP_UNIT_BYTES;
        Allocator {
            policy: config.ftl.alloc,
            open: match config.ftl.alloc {
                Alloc::LatencyAware => vec![Vec::new(); geo.luns as usize],
                _ => Vec::new(),
            },
            region_superblocks: 0,
            region_cap_superblocks: config.ftl.max_lsb_region_bytes / sb_bytes,
        }
    }

    /// Whether the latency-aware allocator has a superblock open on `lun`.
    pub(crate) fn has_open(&self, lun: u32) -> bool {
        self.open.get(lun as usize).is_some_and(|o| !o.is_empty())
    }

    fn stats_name(policy: Alloc) -> &'static str {
        match policy {
            Alloc::Sequential => "sequential",
            Alloc::LsbSkip => "lsb-skip",
            Alloc::LatencyAware => "latency-aware",
        }
    }

    /// The stats record for `policy` (`None` for `sequential`: its summary keeps its shape).
    pub(crate) fn initial_stats(policy: Alloc) -> Option<AllocStats> {
        (policy != Alloc::Sequential).then(|| AllocStats {
            policy: Self::stats_name(policy),
            ..AllocStats::default()
        })
    }
}
