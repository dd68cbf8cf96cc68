//! Device configuration and the named presets.
//!
//! A device is described by one TOML document whose tables follow the layers of the model
//! (`[pcie]`, `[ctrl]`, `[cache]`, `[ftl]`, `[flash]`). Every field carries its unit in its name.
//! A document may start from a named preset and override any subset of keys:
//!
//! ```toml
//! preset = "nvme-tlc"
//! [flash]
//! suspend = "on"
//! blocks_per_plane = 64      # a small device, so GC starts quickly
//! ```
//!
//! Unknown keys are errors that name the key; impossible geometry (zero channels, a page size
//! that is not a power of two, more planes than fit a command) is rejected by [`DeviceConfig::validate`]
//! with the offending value.
//!
//! ## Where the preset values come from
//! `zssd` and `nvme-tlc` take their NAND timings, geometry and DRAM sizes from device.md (the
//! published Z-SSD prototype and an Intel-750-class TLC drive). The controller and link costs
//! (`fetch_ns`, `firmware_ns`, `doorbell_ns`, ONFI rate) are not published; they are set so that
//! device-level runs from the `x86-4` host land on the published from-host QD1 figures (see the
//! README's device table, which prints what the model gives). `bics` and `vnand` are the two
//! comparison flash types of device.md on the nvme-tlc controller.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Bytes per mapping unit: the FTL maps, caches and buffers data in 4 KiB units.
pub const MAP_UNIT_BYTES: u64 = 4096;
/// Bytes per NVMe logical block (sector) addressed by commands.
pub const SECTOR_BYTES: u64 = 512;

/// Errors from reading or validating a device configuration.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("unknown device preset `{name}`; known presets: {known}")]
    UnknownPreset { name: String, known: String },
    #[error("invalid device config: {0}")]
    Toml(String),
    #[error("invalid device config: `{key}` = {value}: {expected}")]
    Invalid {
        key: &'static str,
        value: String,
        expected: String,
    },
}

fn invalid(key: &'static str, value: impl ToString, expected: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_string(),
        expected: expected.into(),
    }
}

/// The whole device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Name shown in reports (the preset's name unless overridden).
    pub name: String,
    pub pcie: PcieConfig,
    pub ctrl: CtrlConfig,
    pub cache: CacheConfig,
    pub ftl: FtlConfig,
    pub flash: FlashConfig,
}

/// The PCIe link between host and device (device::pcie).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieConfig {
    /// PCIe generation 1..=5 (sets the per-lane rate and encoding).
    pub generation: u32,
    /// Lanes: 1, 2, 4, 8 or 16.
    pub lanes: u32,
    /// Time for a doorbell MMIO write to reach the controller.
    pub doorbell_ns: u64,
    /// Latency of each DMA before its first byte is on the wire (DMA engine setup, the first
    /// request's round trip). Overlaps other transfers: it delays a transfer, it does not
    /// occupy the link (`pcie.rs`).
    pub dma_setup_ns: u64,
    /// Max Payload Size: data bytes per TLP (PCIe base spec: 128..=4096, a power of two; 256 is
    /// what most root complexes negotiate).
    pub max_payload_bytes: u32,
    /// Wire bytes each TLP adds to its payload: framing, sequence number, header and LCRC
    /// (24 B with a 4-DW header; `pcie.rs` has the arithmetic); 0 to
    /// [`MAX_TLP_OVERHEAD_BYTES`].
    pub tlp_overhead_bytes: u32,
    /// Data bytes per completion TLP in which the root complex returns host memory the
    /// controller reads (write data): its Read Completion Boundary, 64 B on the root complexes
    /// that split at cache lines (`pcie.rs`, "Write data comes as read completions"); a power
    /// of two from 64 to 4096, used up to `max_payload_bytes`.
    #[serde(default = "default_read_completion_bytes")]
    pub read_completion_bytes: u32,
}

fn default_read_completion_bytes() -> u32 {
    64
}

/// Most wire bytes a TLP may add to its payload (`pcie.tlp_overhead_bytes`): 4 B framing and
/// sequence number, a 16 B header, 4 B ECRC, 4 B LCRC and up to 16 B of TLP prefixes make 44 B;
/// the bound leaves room above that and catches a value typed in bits or for a whole transfer.
pub const MAX_TLP_OVERHEAD_BYTES: u32 = 64;

/// Arbitration among submission queues (NVMe 1.x §4.13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arbitration {
    /// Every SQ with work gets a turn in order (the NVMe default).
    RoundRobin,
    /// Urgent SQs first, then high/medium/low by weight.
    WeightedRoundRobin,
    /// The highest-priority SQ with work always goes first (the latency-critical SQ of the
    /// published design).
    StrictPriority,
}

/// The NVMe controller (device::ctrl).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CtrlConfig {
    pub arbitration: Arbitration,
    /// Commands fetched from one SQ per arbitration turn (the NVMe arbitration burst).
    pub arbitration_burst: u32,
    /// Weights of high, medium and low priority SQs under weighted round robin.
    pub wrr_weights: [u32; 3],
    /// Time to fetch one 64-byte command from host memory (PCIe read round trip).
    pub fetch_ns: u64,
    /// Firmware time per read command (decode, cache lookup, FTL lookup) on the controller core.
    pub firmware_read_ns: u64,
    /// Firmware time per write command (decode, buffer allocation, cache and map metadata).
    pub firmware_write_ns: u64,
    /// Firmware time to post a completion entry and send the MSI-X.
    pub completion_ns: u64,
    /// Firmware cores running the per-command work in parallel (each command runs on one
    /// core, the first one free). 1 = one serial core.
    pub firmware_cores: u32,
    /// Strict priority's anti-starvation rule (`ctrl.rs`): a lower-priority SQ holding more
    /// than this many commands is drained ahead of the higher ones (FlashShare's 8).
    pub drain_entries: u32,
    /// ... or once its oldest command has waited this long (FlashShare's 200 µs).
    pub drain_after_ns: u64,
}

/// The DRAM cache and the write buffer inside it (device::cache).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// DRAM used for caching data (reads and buffered writes), in bytes.
    pub dram_bytes: u64,
    /// Associativity: lines per set; 0 is fully associative (one set of every line, as
    /// SSD firmware keeps its DRAM buffer: `cache_index.rs`).
    pub ways: u32,
    /// Most dirty data the DRAM holds before incoming writes must wait for an eviction.
    pub write_buffer_bytes: u64,
    /// Pages (4 KiB units) read ahead after a read miss; 0 disables prefetch.
    pub prefetch_pages: u32,
    /// Read-ahead window for detected sequential streams, in 4 KiB units (`cache/readahead.rs`); 0 disables it, and it may not exceed the cache's lines.
    pub readahead_units: u32,
    /// Dirty units evicted per eviction round when the buffer or a set is full (0 = one row for
    /// every LUN without a row in flight).
    pub evict_batch_units: u32,
    /// Time to move 4 KiB between the controller and DRAM (a hit's service time).
    pub dram_access_ns: u64,
    /// When dirty data goes to flash (`cache/writeback.rs`, "When the buffer flushes").
    pub flush: Flush,
    /// Whether write-back wave hints drain the buffer ahead of the wave (`drain.rs`).
    #[serde(default)]
    pub drain: Drain,
    /// `drain = "fastdrain"`: a hinted wave whose predicted usage (buffered + hinted units)
    /// reaches this percent of the buffer triggers foreground eviction (spec: 0.8).
    #[serde(default = "default_drain_high_pct")]
    pub drain_high_pct: u32,
    /// `drain = "fastdrain"`: foreground eviction runs until usage is below this percent of
    /// the buffer (spec: 0.2).
    #[serde(default = "default_drain_low_pct")]
    pub drain_low_pct: u32,
    /// `drain = "fastdrain"`: how much a hint below `high` lets background eviction drain
    /// (`drain.rs`, "The background set").
    #[serde(default)]
    pub drain_background: DrainBackground,
    /// Where a read miss's data lands on its way to the host (`lib.rs`, "Read staging").
    #[serde(default)]
    pub read_staging: ReadStaging,
    /// How the ways of every set are shared between the classes (`cache_split.rs`).
    #[serde(default)]
    pub partition: Partition,
    /// Epoch of the adaptive mechanisms (way reassignment, ghost choice), in ns: each closes
    /// at the first command at or after its end.
    #[serde(default = "default_epoch_ns")]
    pub epoch_ns: u64,
    /// `partition = "dynamic"`: most ways one epoch moves between the partitions.
    #[serde(default = "default_partition_step_ways")]
    pub partition_step_ways: u32,
    /// `partition = "dynamic"`: fewest ways either partition keeps.
    #[serde(default = "default_partition_min_ways")]
    pub partition_min_ways: u32,
    /// What sets the prefetch size on a read (`ghost.rs`): `prefetch_pages`, or the ghosts.
    #[serde(default)]
    pub prefetch: Prefetch,
    /// `prefetch = "ghost"`: the granularities the ghosts simulate, in 4 KiB pages, ascending.
    #[serde(default = "default_ghost_pages")]
    pub ghost_pages: Vec<u32>,
    /// `prefetch = "ghost"`: the ghosts simulate one set in this many (set sampling).
    #[serde(default = "default_ghost_sample_period_sets")]
    pub ghost_sample_period_sets: u32,
}

fn default_drain_high_pct() -> u32 {
    80
}

fn default_drain_low_pct() -> u32 {
    20
}

/// How the write buffer prepares for write-back waves (`drain.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Drain {
    /// Hints are counted and otherwise ignored: eviction only as `cache.flush` says.
    #[default]
    Vanilla,
    /// Hints drive watermark eviction: background to dies without reads, or foreground to
    /// every die down to the low watermark.
    Fastdrain,
    /// An unbounded buffer: no write ever waits for an eviction (an upper bound).
    Oracle,
}

/// Where a read miss's data waits between the flash and the host's DMA (`lib.rs`, "Read
/// staging").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadStaging {
    /// In a cache line when one is replaceable, otherwise in a buffer of its own: a read never
    /// waits for DRAM.
    #[default]
    Bypass,
    /// Always in a cache line, as firmware with one DRAM data buffer does (Cosmos+ OpenSSD's
    /// GreedyFTL allocates a buffer entry for every read slice, evicting the LRU entry and, if
    /// it is dirty, programming it first): with every line dirty, a read miss waits for an
    /// eviction. A read waiting for a line takes the first one freed, ahead of any write
    /// that waited longer (`lib.rs`, "Read staging").
    Buffer,
    /// As `buffer`, but lines go to the waiting reads and writes in the order they began to
    /// wait, as Cosmos+ OpenSSD's firmware allocates its buffer entries in the order its
    /// request loop takes the commands: a read miss that arrives while a write-back wave's
    /// writes wait for the full buffer waits behind them (`lib.rs`, "Read staging").
    BufferInOrder,
}

/// How much background eviction a hinted wave that stays under `high` starts (`drain.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainBackground {
    /// The spec's "limited set": a row for each die the reads are not busy on when the hint
    /// arrives (and that has no host row queued), at most the wave's pages.
    #[default]
    IdleDies,
    /// As many units as the wave brings, handed out to read-free dies as they come free: the
    /// buffer stays where it was (this model's first reading).
    Wave,
}

/// How the cache's ways are shared between the latency-critical and throughput classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partition {
    /// One LRU cache for every I/O (the baseline).
    #[default]
    Shared,
    /// The ways of each set are split between the classes and move toward the busier class
    /// each epoch (`cache_split.rs`).
    Dynamic,
}

/// What decides how many pages a read prefetches after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prefetch {
    /// Always `prefetch_pages` (the baseline; 0 = none).
    #[default]
    Fixed,
    /// The granularity of the ghost cache with the fewest misses last epoch (`ghost.rs`).
    Ghost,
}

/// device.md: "Each epoch (default 10 ms; configurable)".
pub const DEFAULT_EPOCH_NS: u64 = 10_000_000;
/// One way of 16 (6 % of the cache) per 10 ms: a one-epoch burst cannot take the cache, and
/// the split still crosses from even to the minimum in 60 ms (`cache_split.rs`).
pub const DEFAULT_PARTITION_STEP_WAYS: u32 = 1;
/// Two ways of 16 (1/8): an idle class keeps room for its hottest lines (`cache_split.rs`).
pub const DEFAULT_PARTITION_MIN_WAYS: u32 = 2;
/// device.md's example granularities.
pub const DEFAULT_GHOST_PAGES: [u32; 5] = [0, 4, 16, 64, 128];
/// One set in 17, a prime (`ghost.rs`, "Set sampling").
pub const DEFAULT_GHOST_SAMPLE_PERIOD_SETS: u32 = 17;

fn default_epoch_ns() -> u64 {
    DEFAULT_EPOCH_NS
}
fn default_partition_step_ways() -> u32 {
    DEFAULT_PARTITION_STEP_WAYS
}
fn default_partition_min_ways() -> u32 {
    DEFAULT_PARTITION_MIN_WAYS
}
fn default_ghost_pages() -> Vec<u32> {
    DEFAULT_GHOST_PAGES.to_vec()
}
fn default_ghost_sample_period_sets() -> u32 {
    DEFAULT_GHOST_SAMPLE_PERIOD_SETS
}

/// When the write buffer programs dirty data to flash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flush {
    /// Only when a write finds the buffer (or its set) full: the baseline of the write-buffer
    /// drain study (its `vanilla`), as its paper describes.
    OnFull,
    /// Also whenever a die is idle and a whole row of dirty data waits: what commercial
    /// firmware does, so a light write mix reaches flash during a run and reads meet busy dies.
    Idle,
}

/// Initial state of the flash when a run starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precondition {
    /// Factory fresh: nothing mapped; reads of unwritten data return zeros without flash work.
    None,
    /// The whole user capacity written once, sequentially (the usual benchmark preconditioning):
    /// every logical page is mapped and the free blocks are the over-provisioned space.
    Sequential,
    /// As a long uniform random-write workload under greedy GC leaves a full drive: every
    /// logical page mapped, superblocks partly invalid with the steady-state distribution of
    /// valid counts, free superblocks down to the GC threshold, so GC runs from the first
    /// writes (`ftl/precondition.rs`). A LUN whose over-provisioning leaves no invalid
    /// space above the GC threshold has no such state and gets the `sequential` layout.
    Random,
}

/// The flash translation layer (device::ftl).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FtlConfig {
    /// Physical capacity hidden from the host, percent of raw capacity.
    pub overprovisioning_pct: u32,
    /// GC runs on a LUN when its free superblocks fall below this percent of its superblocks
    /// (never fewer than `gc_reserve_blocks + 1`). Presets use 1 %: the rest of the
    /// over-provisioning stays spare, which is what keeps greedy GC's victims mostly invalid.
    pub gc_threshold_pct: u32,
    /// Free superblocks per LUN that host writes may not take (kept for GC's relocations).
    pub gc_reserve_blocks: u32,
    pub precondition: Precondition,
    /// Let host reads overtake queued GC work on a LUN (preemptible GC).
    pub gc_preemptible: bool,
    /// Where host write-back rows go within a LUN (`ftl/alloc.rs`).
    #[serde(default)]
    pub alloc: Alloc,
    /// `alloc = "latency-aware"`: most superblock capacity that foreground (urgent) evictions
    /// may hold open with only their fast LSB pages programmed, device-wide (spec: 64 GB on
    /// the TLC preset).
    #[serde(default = "default_max_lsb_region_bytes")]
    pub max_lsb_region_bytes: u64,
}

fn default_max_lsb_region_bytes() -> u64 {
    64_000_000_000
}

/// Host write-back page allocation within a LUN (`ftl/alloc.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Alloc {
    /// Pages in order, LSB, CSB, MSB, from one write point per LUN.
    #[default]
    Sequential,
    /// The write point skips to the next LSB page for every host row, wasting what it skips.
    LsbSkip,
    /// Per-LUN page-group pointers: urgent rows take LSB pages, background rows CSB/MSB.
    LatencyAware,
}

/// Cell type: how many bits (page types) each word line stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellType {
    Slc,
    Mlc,
    Tlc,
}

impl CellType {
    pub fn page_types(self) -> usize {
        match self {
            CellType::Slc => 1,
            CellType::Mlc => 2,
            CellType::Tlc => 3,
        }
    }
}

/// Per-page-type timings (LSB, CSB, MSB). SLC uses `lsb` only; MLC `lsb` and `msb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageTypeNs {
    pub lsb: u64,
    pub csb: u64,
    pub msb: u64,
}

impl PageTypeNs {
    pub const fn uniform(ns: u64) -> PageTypeNs {
        PageTypeNs {
            lsb: ns,
            csb: ns,
            msb: ns,
        }
    }
}

/// A mode that is on or off (config switches read as words, not booleans); every model's
/// config shares the one type.
pub use engine::Switch;

/// Order in which a LUN serves its queued flash operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueuePolicy {
    /// Strict arrival order.
    Fifo,
    /// Host reads first, then everything else in arrival order (common firmware policy).
    ReadFirst,
}

/// The NAND flash backend (device::flash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlashConfig {
    pub cell: CellType,
    pub channels: u32,
    /// Packages (ways) sharing each channel.
    pub packages_per_channel: u32,
    pub dies_per_package: u32,
    pub planes_per_die: u32,
    pub blocks_per_plane: u32,
    pub pages_per_block: u32,
    pub page_bytes: u32,
    pub read_ns: PageTypeNs,
    pub program_ns: PageTypeNs,
    pub erase_ns: u64,
    /// Channel (ONFI/Toggle) transfer rate in mega-transfers per second.
    pub interface_mt_per_sec: u64,
    /// Channel bus width in bits (8 for ONFI/Toggle).
    pub bus_width_bits: u32,
    /// Command and address cycles per operation on the channel.
    pub cmd_addr_ns: u64,
    pub queue_policy: QueuePolicy,
    /// Program/erase suspend for reads.
    pub suspend: Switch,
    pub suspend_overhead_ns: u64,
    pub resume_overhead_ns: u64,
    /// Pair channels so a 4 KiB unit is split in two halves on two channels at once.
    pub super_channel: Switch,
    /// Factory bad blocks, parts per million of physical blocks (drawn from the run's seed).
    pub bad_block_ppm: u32,
    /// Spare blocks per plane that the super-channel remap checker can substitute for bad ones.
    pub spare_blocks_per_plane: u32,
    /// Read-to-read variation of the sense time: each read's tR is drawn uniformly within
    /// ± this percentage of its page type's tR, so the mean stays tR (0: every read takes
    /// exactly tR; `flash`'s essay, *Read-time variation*).
    #[serde(default)]
    pub read_spread_pct: u32,
    /// Senses whose data fails the ECC decode and are repeated at shifted read voltages (read
    /// retry), parts per million of senses (0: none; `flash`'s essay, *Read retry*).
    #[serde(default)]
    pub read_retry_ppm: u32,
    /// Most retries one read makes before the firmware gives up retrying (its retry table's
    /// length).
    #[serde(default)]
    pub read_retry_max: u32,
}

/// Names of the built-in presets.
pub const PRESET_NAMES: [&str; 4] = ["zssd", "nvme-tlc", "bics", "vnand"];

impl DeviceConfig {
    /// A built-in preset by name.
    pub fn preset(name: &str) -> Result<DeviceConfig, ConfigError> {
        match name {
            "zssd" => Ok(zssd()),
            "nvme-tlc" => Ok(nvme_tlc()),
            "bics" => Ok(bics()),
            "vnand" => Ok(vnand()),
            _ => Err(ConfigError::UnknownPreset {
                name: name.to_string(),
                known: PRESET_NAMES.join(", "),
            }),
        }
    }

    /// Reads a TOML document: `preset = "…"` plus overrides, or a complete description.
    pub fn from_toml_str(text: &str) -> Result<DeviceConfig, ConfigError> {
        let doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Toml(e.to_string()))?;
        Self::from_toml_table(doc)
    }

    /// As [`from_toml_str`](Self::from_toml_str), from an already parsed table (a `[device]`
    /// table inside a larger run config).
    pub fn from_toml_table(mut doc: toml::Table) -> Result<DeviceConfig, ConfigError> {
        let base = match doc.remove("preset") {
            Some(toml::Value::String(name)) => Some(Self::preset(&name)?),
            Some(other) => {
                return Err(invalid(
                    "preset",
                    other,
                    format!("a preset name: {}", PRESET_NAMES.join(", ")),
                ))
            }
            None => None,
        };
        let merged = match base {
            Some(base) => {
                let mut table =
                    toml::Table::try_from(&base).map_err(|e| ConfigError::Toml(e.to_string()))?;
                engine::toml_merge::deep_merge(&mut table, doc)
                    .map_err(|e| ConfigError::Toml(e.to_string()))?;
                table
            }
            None => doc,
        };
        let config: DeviceConfig = merged
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Toml(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks that the geometry and timings describe a device that can exist.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let p = &self.pcie;
        if !(1..=5).contains(&p.generation) {
            return Err(invalid("pcie.generation", p.generation, "1, 2, 3, 4 or 5"));
        }
        if ![1, 2, 4, 8, 16].contains(&p.lanes) {
            return Err(invalid("pcie.lanes", p.lanes, "1, 2, 4, 8 or 16"));
        }
        let c = &self.ctrl;
        if c.arbitration_burst == 0 {
            return Err(invalid(
                "ctrl.arbitration_burst",
                0,
                "at least 1 command per turn",
            ));
        }
        if c.drain_entries == 0 || c.drain_after_ns == 0 {
            return Err(invalid(
                "ctrl.drain_entries",
                format!("{} (drain_after_ns {})", c.drain_entries, c.drain_after_ns),
                "a positive entry count and a positive wait (the low SQ must not starve)",
            ));
        }
        if !(1..=64).contains(&c.firmware_cores) {
            return Err(invalid(
                "ctrl.firmware_cores",
                c.firmware_cores,
                "1 to 64 cores",
            ));
        }
        if !p.max_payload_bytes.is_power_of_two() || !(128..=4096).contains(&p.max_payload_bytes) {
            return Err(invalid(
                "pcie.max_payload_bytes",
                p.max_payload_bytes,
                "a power of two from 128 to 4096 (PCIe Max_Payload_Size)",
            ));
        }
        if !p.read_completion_bytes.is_power_of_two()
            || !(64..=4096).contains(&p.read_completion_bytes)
        {
            return Err(invalid(
                "pcie.read_completion_bytes",
                p.read_completion_bytes,
                "a power of two from 64 to 4096 (the root complex's read completion size)",
            ));
        }
        if p.tlp_overhead_bytes > MAX_TLP_OVERHEAD_BYTES {
            return Err(invalid(
                "pcie.tlp_overhead_bytes",
                p.tlp_overhead_bytes,
                format!(
                    "at most {MAX_TLP_OVERHEAD_BYTES} wire bytes per TLP (framing, header, ECRC, \
                     LCRC and TLP prefixes come to at most 44; 24 is Gen3 with a 4-DW header)"
                ),
            ));
        }
        if c.wrr_weights.contains(&0) {
            return Err(invalid(
                "ctrl.wrr_weights",
                format!("{:?}", c.wrr_weights),
                "weights of at least 1",
            ));
        }
        let f = &self.flash;
        for (key, v) in [
            ("flash.channels", f.channels),
            ("flash.packages_per_channel", f.packages_per_channel),
            ("flash.dies_per_package", f.dies_per_package),
            ("flash.planes_per_die", f.planes_per_die),
            ("flash.blocks_per_plane", f.blocks_per_plane),
            ("flash.pages_per_block", f.pages_per_block),
            ("flash.bus_width_bits", f.bus_width_bits),
        ] {
            if v == 0 {
                return Err(invalid(key, v, "at least 1"));
            }
        }
        if f.interface_mt_per_sec == 0 {
            return Err(invalid(
                "flash.interface_mt_per_sec",
                0,
                "a positive transfer rate",
            ));
        }
        if !f.page_bytes.is_power_of_two() || !(512..=65536).contains(&f.page_bytes) {
            return Err(invalid(
                "flash.page_bytes",
                f.page_bytes,
                "a power of two from 512 to 65536",
            ));
        }
        if f.super_channel == Switch::On && !f.channels.is_multiple_of(2) {
            return Err(invalid(
                "flash.channels",
                f.channels,
                "an even number of channels when super_channel = \"on\"",
            ));
        }
        let sc = if f.super_channel == Switch::On { 2 } else { 1 };
        let lun_page_bytes = f.page_bytes as u64 * sc;
        if lun_page_bytes < MAP_UNIT_BYTES {
            let group = MAP_UNIT_BYTES / lun_page_bytes;
            if !(f.planes_per_die as u64).is_multiple_of(group) {
                return Err(invalid(
                    "flash.planes_per_die",
                    f.planes_per_die,
                    format!("a multiple of {group}: {} B pages are ganged across planes to hold a 4 KiB unit", f.page_bytes),
                ));
            }
        }
        if !(f.pages_per_block as usize).is_multiple_of(f.cell.page_types()) {
            return Err(invalid(
                "flash.pages_per_block",
                f.pages_per_block,
                format!(
                    "a multiple of {} (page types per word line of {:?})",
                    f.cell.page_types(),
                    f.cell
                ),
            ));
        }
        if f.read_spread_pct > 50 {
            return Err(invalid(
                "flash.read_spread_pct",
                f.read_spread_pct,
                "0 to 50 (percent of tR either side)",
            ));
        }
        if f.read_retry_ppm >= 1_000_000 {
            return Err(invalid(
                "flash.read_retry_ppm",
                f.read_retry_ppm,
                "fewer than 1,000,000 parts per million",
            ));
        }
        if f.read_retry_max > 64 {
            return Err(invalid(
                "flash.read_retry_max",
                f.read_retry_max,
                "0 to 64 retries per read",
            ));
        }
        if f.bad_block_ppm >= 1_000_000 {
            return Err(invalid(
                "flash.bad_block_ppm",
                f.bad_block_ppm,
                "fewer than 1,000,000 parts per million",
            ));
        }
        let ftl = &self.ftl;
        if ftl.overprovisioning_pct >= 100 {
            return Err(invalid(
                "ftl.overprovisioning_pct",
                ftl.overprovisioning_pct,
                "a percentage below 100",
            ));
        }
        if ftl.gc_threshold_pct >= 100 {
            return Err(invalid(
                "ftl.gc_threshold_pct",
                ftl.gc_threshold_pct,
                "a percentage below 100",
            ));
        }
        if ftl.gc_reserve_blocks < 1 {
            return Err(invalid(
                "ftl.gc_reserve_blocks",
                0,
                "at least 1 superblock kept for GC",
            ));
        }
        if (ftl.gc_reserve_blocks as u64 + 2) >= f.blocks_per_plane as u64 {
            return Err(invalid(
                "flash.blocks_per_plane",
                f.blocks_per_plane,
                format!(
                    "more than gc_reserve_blocks + 2 = {}",
                    ftl.gc_reserve_blocks + 2
                ),
            ));
        }
        let physical_units = self.geometry_units();
        if physical_units >= u32::MAX as u64 {
            return Err(invalid(
                "flash.blocks_per_plane",
                f.blocks_per_plane,
                "a geometry under 16 TiB (physical 4 KiB units must fit in 32 bits)",
            ));
        }
        let cache = &self.cache;
        let lines = cache.dram_bytes / MAP_UNIT_BYTES;
        if lines == 0 || lines >= u32::MAX as u64 {
            return Err(invalid(
                "cache.dram_bytes",
                cache.dram_bytes,
                "at least one 4 KiB line and under 16 TiB",
            ));
        }
        if cache.ways == 0
            && (cache.partition == Partition::Dynamic || cache.prefetch == Prefetch::Ghost)
        {
            return Err(invalid(
                "cache.ways",
                0,
                "ways per set (at least 1) when cache.partition = \"dynamic\" or cache.prefetch \
                 = \"ghost\": both divide the ways of every set; 0 (fully associative) only \
                 without them",
            ));
        }
        if lines < cache.ways as u64 {
            return Err(invalid(
                "cache.dram_bytes",
                cache.dram_bytes,
                format!("room for at least one set of {} 4 KiB lines", cache.ways),
            ));
        }
        if cache.readahead_units as u64 > lines {
            return Err(invalid(
                "cache.readahead_units",
                cache.readahead_units,
                format!(
                    "at most the cache's {lines} 4 KiB lines (cache.dram_bytes / 4096): a larger \
                     window evicts its own read-ahead before the reader gets to it"
                ),
            ));
        }
        if !(cache.drain_low_pct < cache.drain_high_pct && cache.drain_high_pct <= 100) {
            return Err(invalid(
                "cache.drain_high_pct",
                format!(
                    "{} (drain_low_pct = {})",
                    cache.drain_high_pct, cache.drain_low_pct
                ),
                "a percentage above cache.drain_low_pct and at most 100",
            ));
        }
        if cache.write_buffer_bytes < MAP_UNIT_BYTES || cache.write_buffer_bytes > cache.dram_bytes
        {
            return Err(invalid(
                "cache.write_buffer_bytes",
                cache.write_buffer_bytes,
                format!("between 4096 and cache.dram_bytes ({})", cache.dram_bytes),
            ));
        }
        self.validate_adaptive_cache(lines)
    }

    /// The class split's and the ghosts' keys, each checked when its switch is on (a cache of
    /// one way, say, stays valid while it is shared).
    fn validate_adaptive_cache(&self, lines: u64) -> Result<(), ConfigError> {
        let cache = &self.cache;
        if cache.epoch_ns == 0 {
            return Err(invalid(
                "cache.epoch_ns",
                0,
                "a positive epoch in ns (10,000,000 = 10 ms)",
            ));
        }
        if cache.partition == Partition::Dynamic {
            self.validate_partition()?;
        }
        if cache.prefetch == Prefetch::Ghost {
            self.validate_ghost(lines)?;
        }
        Ok(())
    }

    fn validate_partition(&self) -> Result<(), ConfigError> {
        let cache = &self.cache;
        if cache.partition_step_ways == 0 {
            return Err(invalid(
                "cache.partition_step_ways",
                0,
                "at least 1 way moved per epoch",
            ));
        }
        if cache.partition_min_ways == 0 || 2 * cache.partition_min_ways > cache.ways {
            return Err(invalid(
                "cache.partition_min_ways",
                cache.partition_min_ways,
                format!(
                    "1 to half of cache.ways ({}): both partitions keep at least this many",
                    cache.ways / 2
                ),
            ));
        }
        Ok(())
    }

    fn validate_ghost(&self, lines: u64) -> Result<(), ConfigError> {
        let cache = &self.cache;
        let pages = &cache.ghost_pages;
        if pages.is_empty()
            || pages.windows(2).any(|w| w[0] >= w[1])
            || pages.iter().any(|&p| p as u64 > lines)
        {
            return Err(invalid(
                "cache.ghost_pages",
                format!("{pages:?}"),
                format!(
                    "one or more granularities in strictly ascending order, each at most the \
                     cache's {lines} 4 KiB lines"
                ),
            ));
        }
        let sets = (lines / cache.ways as u64).max(1);
        let period = cache.ghost_sample_period_sets as u64;
        if period == 0 || period > sets {
            return Err(invalid(
                "cache.ghost_sample_period_sets",
                period,
                format!("1 (every set) to the cache's {sets} sets"),
            ));
        }
        Ok(())
    }

    /// Raw capacity in 4 KiB units.
    pub fn geometry_units(&self) -> u64 {
        let f = &self.flash;
        f.channels as u64
            * f.packages_per_channel as u64
            * f.dies_per_package as u64
            * f.planes_per_die as u64
            * f.blocks_per_plane as u64
            * f.pages_per_block as u64
            * f.page_bytes as u64
            / MAP_UNIT_BYTES
    }
}

/// PCIe and controller costs shared by the presets; the per-command costs were calibrated so
/// that QD1 4 KiB runs from the x86-4 host land on device.md's from-host figures.
///
/// `dma_setup_ns` was 300 ns when it also stood for the TLP headers' wire time; the link now
/// charges headers per TLP (`tlp_overhead_bytes`), which takes a 4 KiB transfer's wire time
/// from 1,041 to 1,138 ns (+97) and a 16 B completion entry's from 5 to 11 ns (+6; `pcie.rs`),
/// so the setup latency is 250 ns: a 4 KiB read's data + completion-entry DMA path is
/// 250 + 1,138 + 250 + 11 = 1,649 ns against 300 + 1,041 + 300 + 5 = 1,646 ns before, and the
/// QD1 table does not move.
/// Every preset's read-to-read sense-time variation, ± percent of tR. A NAND read's time
/// varies from one read of the same page to the next (the sense's bit-line settling and the
/// on-die read-level search), on top of what the page's position sets (LSB/CSB/MSB, modelled
/// by `read_ns`): an SSD controller vendor's breakdown of an enterprise random read gives
/// t_read 60 / 80 / 120 µs min / typical / max for MLC NAND, part of it by page index and the
/// rest random (S. Bates, Microsemi, "Latency in LDPC-based Next-Generation SSD
/// Controllers", 2014). The random part is not separated there; we take ± 10 %, below the
/// whole published range (−25 % / +50 %), symmetric so the calibrated mean tR stays.
pub const READ_SPREAD_PCT: u32 = 10;

/// Every preset's read-retry rate, parts per million of senses. A sense whose raw bit errors
/// exceed what the ECC decodes is repeated at shifted read-reference voltages, a further tR
/// each (Cai et al., "Error Characterization, Mitigation, and Recovery in Flash-Memory-Based
/// SSDs", Proc. IEEE 2017, § read-retry). How often depends on wear and retention: from over
/// 3 retries per read on average on aged 3D TLC with a vendor retry table to under 0.003 with
/// a tuned one (Ye et al., "Achieving Near-Zero Read Retry for 3D NAND Flash Memory",
/// ASPLOS 2024). The presets are fresh, preconditioned drives, the low end of that range; no
/// published rate pins a fresh drive, so 100 ppm (one sense in 10,000) is our assumption. It
/// moves QD1 means by 100 ppm × tR (0.3 ns on `zssd`, 8 ns on `nvme-tlc`) and shapes only the
/// tail beyond p99.99.
pub const READ_RETRY_PPM: u32 = 100;

/// Most retries per read: the firmware's retry table is finite. 8 is our assumption; at
/// 100 ppm per sense even a second retry is a one-in-10^8 read, so the cap only bounds the
/// configurable worst case.
pub const READ_RETRY_MAX: u32 = 8;

fn base_pcie() -> PcieConfig {
    PcieConfig {
        generation: 3,
        lanes: 4,
        doorbell_ns: 500,
        dma_setup_ns: 250,
        max_payload_bytes: 256,
        tlp_overhead_bytes: 24,
        read_completion_bytes: default_read_completion_bytes(),
    }
}

fn base_ctrl() -> CtrlConfig {
    CtrlConfig {
        arbitration: Arbitration::RoundRobin,
        arbitration_burst: 8,
        wrr_weights: [8, 4, 1],
        fetch_ns: 600,
        firmware_read_ns: 700,
        // Fitted with the other QD1 costs to device.md's from-host 4 KiB write (11.4 µs with
        // interrupts, 9.9 µs polled, the calibration target), after the link's 1,366 ns for
        // the write's data (`pcie.rs`: it arrives in 64 B read completions).
        firmware_write_ns: 2_470,
        completion_ns: 300,
        // Not published for these drives; NVMe controllers of their generation run the
        // per-command firmware on several embedded cores (3 to 5 Cortex-R class cores is the
        // usual range): 4 is an assumption. Per-command latency is unchanged by the count.
        firmware_cores: 4,
        drain_entries: 8,
        drain_after_ns: 200_000,
    }
}

/// ULL / Z-SSD class (device.md): Z-NAND tR 3 µs, tPROG 100 µs, tBERS 1 ms, 2 KiB pages,
/// SLC-like; 16 channels × 1 package × 8 dies × 8 planes; PCIe 3.0 x4; 1.5 GB DRAM; ≈800 GB.
pub fn zssd() -> DeviceConfig {
    DeviceConfig {
        name: "zssd".into(),
        pcie: base_pcie(),
        ctrl: base_ctrl(),
        cache: CacheConfig {
            dram_bytes: 1536 << 20,
            ways: 16,
            write_buffer_bytes: 512 << 20,
            prefetch_pages: 0,
            // Not published for these drives: 128 KiB, the Linux block layer's default
            // read-ahead, is an assumption of the same order.
            readahead_units: 32,
            evict_batch_units: 0,
            dram_access_ns: 400,
            // Both drives are commercial products (device.md's from-host figures are theirs),
            // whose firmware flushes on idle dies; the drain study's `vanilla` sets `on-full`.
            flush: Flush::Idle,
            drain: Drain::Vanilla,
            drain_high_pct: default_drain_high_pct(),
            drain_low_pct: default_drain_low_pct(),
            drain_background: DrainBackground::IdleDies,
            // 1 GB of the 1.5 GB DRAM is never dirty: a read miss always finds a line (a set of
            // 16 dirty ways aside, when it goes to the host from a buffer of its own).
            read_staging: ReadStaging::Bypass,
            // The class split and ghost prefetch are the FlashShare study's switches, off in
            // the commercial presets.
            partition: Partition::Shared,
            epoch_ns: DEFAULT_EPOCH_NS,
            partition_step_ways: DEFAULT_PARTITION_STEP_WAYS,
            partition_min_ways: DEFAULT_PARTITION_MIN_WAYS,
            prefetch: Prefetch::Fixed,
            ghost_pages: DEFAULT_GHOST_PAGES.to_vec(),
            ghost_sample_period_sets: DEFAULT_GHOST_SAMPLE_PERIOD_SETS,
        },
        ftl: FtlConfig {
            overprovisioning_pct: 7,
            gc_threshold_pct: 1,
            gc_reserve_blocks: 2,
            precondition: Precondition::Sequential,
            gc_preemptible: false,
            alloc: Alloc::Sequential,
            max_lsb_region_bytes: default_max_lsb_region_bytes(),
        },
        flash: FlashConfig {
            cell: CellType::Slc,
            channels: 16,
            packages_per_channel: 1,
            dies_per_package: 8,
            planes_per_die: 8,
            // 16 × 8 × 8 planes × 400 blocks × 1024 pages × 2 KiB = 859 GB raw, 799 GB user.
            blocks_per_plane: 400,
            pages_per_block: 1024,
            page_bytes: 2048,
            read_ns: PageTypeNs::uniform(3_000),
            program_ns: PageTypeNs::uniform(100_000),
            erase_ns: 1_000_000,
            interface_mt_per_sec: 1_000,
            bus_width_bits: 8,
            cmd_addr_ns: 100,
            queue_policy: QueuePolicy::ReadFirst,
            // Z-NAND drives suspend programs for reads (device.md, "Program/erase suspend").
            suspend: Switch::On,
            suspend_overhead_ns: 5_000,
            resume_overhead_ns: 5_000,
            super_channel: Switch::On,
            bad_block_ppm: 0,
            spare_blocks_per_plane: 0,
            read_spread_pct: READ_SPREAD_PCT,
            read_retry_ppm: READ_RETRY_PPM,
            read_retry_max: READ_RETRY_MAX,
        },
    }
}

/// `nvme-tlc`'s firmware time per read command, on its one firmware core: what bounds the
/// drive's 4 KiB read rate. With the shared 700 ns and four cores the preset's 4 KiB random reads
/// ran into the PCIe link (868 K IOPS, 3.56 GB/s at depth 256), twice the 1.8 GB/s the
/// characterization paper measured as the Intel 750's maximum, reached by reads: a controller
/// of that generation is bounded by its per-command processing, not by the NAND (128 dies of
/// tR ≈ 81 µs sense 1.6 M pages/s) nor the link. One core at 2,275 ns serves at most
/// 1 / 2,275 ns = 439,560 commands/s = 1.80 GB/s of 4 KiB reads; the same core's 4,400 ns per
/// write (fitted to the 13 µs QD1 write, device.md) then bounds 4 KiB writes at 227 K/s, 51.7 %
/// of it, which is what the write figure predicts rather than fits. It adds 1.6 µs to a QD1 read
/// (README's calibration table). A calibration, calibrated to `ull/nvme.write_bw_utilization`
/// (its 1.8 GB/s read maximum; the study marks that row so).
pub const NVME_TLC_FIRMWARE_READ_NS: u64 = 2_275;

/// Conventional NVMe / TLC, Intel-750-like (device.md): reads LSB/CSB/MSB 58/78/107 µs,
/// programs 0.56/2.2/5 ms, erase 2.27 ms; 16 channels × 4 packages × 2 dies × 2 planes;
/// 8 KiB pages; ≈800 GB; 512 MB internal buffer.
pub fn nvme_tlc() -> DeviceConfig {
    DeviceConfig {
        name: "nvme-tlc".into(),
        pcie: base_pcie(),
        // A slower controller write path than the ULL drive's (calibrated: buffered 4 KiB
        // writes from the host take ≈ 13 µs on this class of drive, device.md), and one
        // firmware core whose per-command time bounds the drive's 4 KiB rate
        // ([`NVME_TLC_FIRMWARE_READ_NS`]).
        ctrl: CtrlConfig {
            firmware_read_ns: NVME_TLC_FIRMWARE_READ_NS,
            firmware_write_ns: 4_400,
            firmware_cores: 1,
            ..base_ctrl()
        },
        cache: CacheConfig {
            dram_bytes: 512 << 20,
            // Fully associative, as SSD firmware keeps its DRAM buffer (the Cosmos+ OpenSSD
            // firmware's hashed, single-LRU data buffer; MQSim's data cache): a write waits only
            // when the buffer is full, the "evict when full" of device.md (`cache_index.rs`).
            ways: 0,
            write_buffer_bytes: 512 << 20,
            prefetch_pages: 0,
            // Not published for these drives: 128 KiB, the Linux block layer's default
            // read-ahead, is an assumption of the same order.
            readahead_units: 32,
            evict_batch_units: 0,
            dram_access_ns: 400,
            // Both drives are commercial products (device.md's from-host figures are theirs),
            // whose firmware flushes on idle dies; the drain study's `vanilla` sets `on-full`.
            flush: Flush::Idle,
            drain: Drain::Vanilla,
            drain_high_pct: default_drain_high_pct(),
            drain_low_pct: default_drain_low_pct(),
            drain_background: DrainBackground::IdleDies,
            // The whole DRAM is the write buffer (512 MB of each): a read stages through a
            // line of it, as in Cosmos+ OpenSSD's firmware, and waits while every line is dirty.
            read_staging: ReadStaging::Buffer,
            // The class split and ghost prefetch are the FlashShare study's switches, off in
            // the commercial presets.
            partition: Partition::Shared,
            epoch_ns: DEFAULT_EPOCH_NS,
            partition_step_ways: DEFAULT_PARTITION_STEP_WAYS,
            partition_min_ways: DEFAULT_PARTITION_MIN_WAYS,
            prefetch: Prefetch::Fixed,
            ghost_pages: DEFAULT_GHOST_PAGES.to_vec(),
            ghost_sample_period_sets: DEFAULT_GHOST_SAMPLE_PERIOD_SETS,
        },
        ftl: FtlConfig {
            overprovisioning_pct: 7,
            gc_threshold_pct: 1,
            gc_reserve_blocks: 2,
            precondition: Precondition::Sequential,
            gc_preemptible: false,
            alloc: Alloc::Sequential,
            max_lsb_region_bytes: default_max_lsb_region_bytes(),
        },
        flash: FlashConfig {
            cell: CellType::Tlc,
            channels: 16,
            packages_per_channel: 4,
            dies_per_package: 2,
            planes_per_die: 2,
            // 256 planes × 1068 blocks × 384 pages × 8 KiB = 860 GB raw, 800 GB user.
            blocks_per_plane: 1068,
            pages_per_block: 384,
            page_bytes: 8192,
            read_ns: PageTypeNs {
                lsb: 58_000,
                csb: 78_000,
                msb: 107_000,
            },
            program_ns: PageTypeNs {
                lsb: 560_000,
                csb: 2_200_000,
                msb: 5_000_000,
            },
            erase_ns: 2_270_000,
            interface_mt_per_sec: 800,
            bus_width_bits: 8,
            cmd_addr_ns: 200,
            queue_policy: QueuePolicy::ReadFirst,
            suspend: Switch::Off,
            suspend_overhead_ns: 20_000,
            resume_overhead_ns: 20_000,
            super_channel: Switch::Off,
            bad_block_ppm: 0,
            spare_blocks_per_plane: 0,
            read_spread_pct: READ_SPREAD_PCT,
            read_retry_ppm: READ_RETRY_PPM,
            read_retry_max: READ_RETRY_MAX,
        },
    }
}

/// BiCS-class TLC for comparison (device.md: tR 45 µs, tPROG 660 µs, 16 KiB pages), on the
/// nvme-tlc controller. One timing for every page type (the published figure is an average);
/// erase time is not published: 3.5 ms is a typical 3D-TLC value (assumption).
pub fn bics() -> DeviceConfig {
    let mut c = nvme_tlc();
    c.name = "bics".into();
    c.flash.page_bytes = 16384;
    c.flash.blocks_per_plane = 534;
    c.flash.read_ns = PageTypeNs::uniform(45_000);
    c.flash.program_ns = PageTypeNs::uniform(660_000);
    c.flash.erase_ns = 3_500_000;
    c
}

/// V-NAND-class TLC for comparison (device.md: tR 60 µs, tPROG 700 µs, 16 KiB pages); erase
/// time as for `bics` (assumption).
pub fn vnand() -> DeviceConfig {
    let mut c = bics();
    c.name = "vnand".into();
    c.flash.read_ns = PageTypeNs::uniform(60_000);
    c.flash.program_ns = PageTypeNs::uniform(700_000);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_is_named_by_its_dotted_path_with_its_siblings() {
        let err = DeviceConfig::from_toml_str(
            "preset = \"zssd\"\n[flash.read_ns]\nlsb = 3000\nmlc = 1\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid device config: unknown key `flash.read_ns.mlc`; keys accepted here: csb, \
             lsb, msb"
        );
    }

    #[test]
    fn presets_validate_and_have_the_published_capacity() {
        for name in PRESET_NAMES {
            let c = DeviceConfig::preset(name).unwrap();
            c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            let user_gb = c.geometry_units() * (100 - c.ftl.overprovisioning_pct as u64) / 100
                * 4096
                / 1_000_000_000;
            assert!(
                (780..=830).contains(&user_gb),
                "{name}: {user_gb} GB user capacity"
            );
        }
    }

    #[test]
    fn unknown_preset_lists_the_known_ones() {
        let err = DeviceConfig::preset("optane").unwrap_err().to_string();
        assert!(
            err.contains("optane") && err.contains("zssd, nvme-tlc, bics, vnand"),
            "{err}"
        );
    }

    #[test]
    fn overrides_apply_on_top_of_a_preset() {
        let c = DeviceConfig::from_toml_str(
            "preset = \"nvme-tlc\"\n[flash]\nsuspend = \"on\"\nblocks_per_plane = 64\n",
        )
        .unwrap();
        assert_eq!(c.flash.suspend, Switch::On);
        assert_eq!(c.flash.blocks_per_plane, 64);
        assert_eq!(c.flash.page_bytes, 8192);
    }

    #[test]
    fn impossible_geometry_names_the_value() {
        let err = DeviceConfig::from_toml_str("preset = \"zssd\"\n[flash]\nchannels = 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("flash.channels") && err.contains("= 0"),
            "{err}"
        );
        let err = DeviceConfig::from_toml_str("preset = \"zssd\"\n[flash]\npage_bytes = 3000\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("flash.page_bytes")
                && err.contains("3000")
                && err.contains("power of two"),
            "{err}"
        );
        // Fully associative is a cache without sets to split: refused with the class split.
        DeviceConfig::from_toml_str("preset = \"zssd\"\n[cache]\nways = 0\n").unwrap();
        let err = DeviceConfig::from_toml_str(
            "preset = \"zssd\"\n[cache]\nways = 0\npartition = \"dynamic\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("cache.ways") && err.contains("fully associative"),
            "{err}"
        );
    }

    /// The keys the device realism switches added: each bad value is named with its key and
    /// what was expected.
    #[test]
    fn new_keys_name_the_bad_value_and_the_range() {
        let err = |toml: &str| {
            DeviceConfig::from_toml_str(&format!("preset = \"zssd\"\n{toml}"))
                .unwrap_err()
                .to_string()
        };
        let cases = [
            (
                "[ctrl]\nfirmware_cores = 0",
                "`ctrl.firmware_cores` = 0",
                "1 to 64",
            ),
            (
                "[ctrl]\nfirmware_cores = 65",
                "`ctrl.firmware_cores` = 65",
                "1 to 64",
            ),
            (
                "[pcie]\nmax_payload_bytes = 300",
                "`pcie.max_payload_bytes` = 300",
                "power of two from 128 to 4096",
            ),
            (
                "[pcie]\nmax_payload_bytes = 8192",
                "`pcie.max_payload_bytes` = 8192",
                "power of two from 128 to 4096",
            ),
            (
                "[pcie]\nread_completion_bytes = 32",
                "`pcie.read_completion_bytes` = 32",
                "power of two from 64 to 4096",
            ),
            (
                "[pcie]\ntlp_overhead_bytes = 192",
                "`pcie.tlp_overhead_bytes` = 192",
                "at most 64",
            ),
            (
                "[cache]\nreadahead_units = 400000",
                "`cache.readahead_units` = 400000",
                "at most the cache's 393216 4 KiB lines",
            ),
            (
                "[cache]\nflush = \"sometimes\"",
                "`sometimes`, expected `on-full` or `idle`",
                "cache.flush",
            ),
            (
                "[cache]\ndrain_high_pct = 20",
                "`cache.drain_high_pct` = 20 (drain_low_pct = 20)",
                "above cache.drain_low_pct",
            ),
            (
                "[cache]\ndrain = \"eventually\"",
                "`eventually`, expected one of `vanilla`, `fastdrain`, `oracle`",
                "cache.drain",
            ),
            (
                "[ftl]\nalloc = \"lsb\"",
                "`lsb`, expected one of `sequential`, `lsb-skip`, `latency-aware`",
                "ftl.alloc",
            ),
            (
                "[cache]\npartition = \"split\"",
                "`split`, expected `shared` or `dynamic`",
                "cache.partition",
            ),
            (
                "[cache]\nprefetch = \"adaptive\"",
                "`adaptive`, expected `fixed` or `ghost`",
                "cache.prefetch",
            ),
            (
                "[cache]\nepoch_ns = 0",
                "`cache.epoch_ns` = 0",
                "a positive epoch",
            ),
            (
                "[cache]\npartition = \"dynamic\"\npartition_min_ways = 9",
                "`cache.partition_min_ways` = 9",
                "1 to half of cache.ways (8)",
            ),
            (
                "[cache]\npartition = \"dynamic\"\npartition_step_ways = 0",
                "`cache.partition_step_ways` = 0",
                "at least 1",
            ),
            (
                "[cache]\nprefetch = \"ghost\"\nghost_pages = [0, 16, 4]",
                "`cache.ghost_pages` = [0, 16, 4]",
                "strictly ascending",
            ),
            (
                "[cache]\nprefetch = \"ghost\"\nghost_pages = []",
                "`cache.ghost_pages` = []",
                "one or more",
            ),
            (
                "[cache]\nprefetch = \"ghost\"\nghost_sample_period_sets = 0",
                "`cache.ghost_sample_period_sets` = 0",
                "1 (every set) to the cache's 24576 sets",
            ),
            (
                "[ftl]\nprecondition = \"randomly\"",
                "`randomly`, expected one of `none`, `sequential`, `random`",
                "ftl.precondition",
            ),
        ];
        for (toml, names, expected) in cases {
            let e = err(toml);
            assert!(e.contains(names) && e.contains(expected), "{toml}: {e}");
        }
        // The edges of each range are accepted.
        for ok in [
            "[ctrl]\nfirmware_cores = 1",
            "[ctrl]\nfirmware_cores = 64",
            "[pcie]\nmax_payload_bytes = 128\ntlp_overhead_bytes = 64",
            "[pcie]\nmax_payload_bytes = 4096\ntlp_overhead_bytes = 0\nread_completion_bytes = 4096",
            "[pcie]\nread_completion_bytes = 64",
            "[cache]\nreadahead_units = 393216\nflush = \"on-full\"",
            "[cache]\ndrain = \"fastdrain\"\ndrain_low_pct = 0\ndrain_high_pct = 100",
            "[ftl]\nalloc = \"latency-aware\"\nmax_lsb_region_bytes = 0",
            "[cache]\npartition = \"dynamic\"\npartition_min_ways = 8\nprefetch = \"ghost\"",
            "[cache]\nprefetch = \"ghost\"\nghost_pages = [128]\nghost_sample_period_sets = 24576\nepoch_ns = 1",
            // Off, the switches' keys are not checked: a one-way cache stays valid.
            "[cache]\nways = 1\nghost_pages = []",
        ] {
            DeviceConfig::from_toml_str(&format!("preset = \"zssd\"\n{ok}"))
                .unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn wrong_value_type_is_reported() {
        let err = DeviceConfig::from_toml_str("preset = \"zssd\"\n[flash]\nsuspend = \"maybe\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("maybe") || err.contains("suspend"), "{err}");
    }
}
