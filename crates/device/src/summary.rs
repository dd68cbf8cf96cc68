//! What the device reports for `summary.json`: the command counters it keeps as it runs
//! ([`CommandStats`]), everything it counts gathered at the end of a run ([`DeviceStats`], from
//! every layer's own counters), and the warnings a run earns (write amplification above
//! [`WRITE_AMPLIFICATION_WARN`]; a random precondition that had to lay LUNs out sequentially).
//! It reads the layers' counters and adds nothing to the model.

use serde::{Deserialize, Serialize};

use crate::config::Drain as DrainMode;
use crate::pcie::Direction;
use crate::{cache, drain, flash, ftl, Ssd};

/// Per-op command counts and device-level counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CommandStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub trims: u64,
    pub errors: u64,
    pub latency_critical: u64,
    pub throughput: u64,
    /// Writes that waited for buffer space, and their total wait.
    pub write_stalls: u64,
    pub write_stall_ns: u64,
    /// `cache.read_staging = "buffer"`: read misses that waited for a DRAM line (every line
    /// dirty, evicting or filling), and their total wait; omitted while 0.
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub read_staging_stalls: u64,
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub read_staging_stall_ns: u64,
    /// Strict-priority arbitration: drains of a starving lower-priority SQ (`ctrl.rs`);
    /// omitted while 0.
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub arbitration_drains: u64,
    /// `cache.prefetch = "ghost"`: prefetch reads still queued behind demand reads when a
    /// demand read came to wait for them, and so made demand reads (`flash.rs`); omitted
    /// while 0.
    #[serde(default, skip_serializing_if = "engine::stats::is_zero")]
    pub prefetches_promoted: u64,
}

/// Everything the device counts, for `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceStats {
    pub name: String,
    pub user_capacity_bytes: u64,
    pub commands: CommandStats,
    pub cache: cache::CacheStats,
    pub ftl: ftl::FtlStats,
    pub flash: flash::FlashStats,
    /// NAND units programmed (host + GC) per host unit programmed; 1.0 when GC copied nothing.
    pub write_amplification: f64,
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_mean: f64,
    pub pcie_bytes_to_device: u64,
    pub pcie_bytes_to_host: u64,
    /// Bytes the FTL's mapping tables hold at the end of the run: the forward map's index and
    /// the LPNs written (about 4-21 bytes each), and the reverse maps of superblocks written.
    pub mapping_table_bytes: u64,
    /// Write-back hints and watermark eviction (`cache.drain`; absent for `vanilla`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<drain::DrainStats>,
    /// What in the run deserves a second look (e.g. write amplification above
    /// [`WRITE_AMPLIFICATION_WARN`]).
    pub warnings: Vec<String>,
}

/// Write amplification above which a run is flagged: greedy GC with the presets' 7 %
/// over-provisioning settles near 8 under uniform random writes (`ftl/precondition.rs`);
/// far above that, the device is too small for the data its workload keeps live.
pub const WRITE_AMPLIFICATION_WARN: f64 = 20.0;

impl Ssd {
    /// Everything the device counts, for `summary.json` (scans the FTL's erase counts).
    pub fn stats(&self) -> DeviceStats {
        let f = &self.ftl.stats;
        let host = f.host_units_programmed;
        let (emin, emax, emean_milli) = self.ftl.erase_count_stats();
        let write_amplification = if host == 0 {
            1.0
        } else {
            (host + f.gc_units_programmed) as f64 / host as f64
        };
        let mut warnings = Vec::new();
        let fallback = self.ftl.random_fallback_luns();
        if fallback > 0 {
            warnings.push(format!(
                "ftl.precondition = \"random\" laid out {fallback} of {} LUNs sequentially: with \
                 {} % over-provisioning no invalid space fits above the GC threshold \
                 (ftl.gc_threshold_pct = {}); give more over-provisioning, or ask for \
                 \"sequential\"",
                self.flash.geometry.luns,
                self.config.ftl.overprovisioning_pct,
                self.config.ftl.gc_threshold_pct
            ));
        }
        if write_amplification > WRITE_AMPLIFICATION_WARN {
            warnings.push(format!(
                "write amplification {write_amplification:.1} exceeds {WRITE_AMPLIFICATION_WARN}: \
                 the device ({:.1} GB user capacity, {} % over-provisioning) is too small for the \
                 data its workload keeps live",
                self.capacity_bytes() as f64 / 1e9,
                self.config.ftl.overprovisioning_pct
            ));
        }
        DeviceStats {
            name: self.config.name.clone(),
            user_capacity_bytes: self.capacity_bytes(),
            commands: CommandStats {
                arbitration_drains: self.ctrl.drains,
                ..self.stats.clone()
            },
            cache: self.cache.stats.clone(),
            ftl: f.clone(),
            flash: flash::FlashStats {
                lun_busy_ns: self.flash.busy_ns(),
                ..self.flash.stats.clone()
            },
            write_amplification,
            erase_count_min: emin,
            erase_count_max: emax,
            erase_count_mean: emean_milli as f64 / 1000.0,
            pcie_bytes_to_device: self.pcie.bytes_moved[Direction::HostToDevice as usize],
            pcie_bytes_to_host: self.pcie.bytes_moved[Direction::DeviceToHost as usize],
            mapping_table_bytes: self.ftl.table_bytes(),
            drain: (self.drain.mode() != DrainMode::Vanilla).then(|| self.drain.stats.clone()),
            warnings,
        }
    }
}
