//! `[[volume]]`: the volumes a server serves, each on its backend: sparse memory, a file or
//! block device through io_uring (`O_DIRECT` where the filesystem allows it), or the SSD model
//! of crate `device` run against the wall clock.
//!
//! Each volume is checked alone: a unique name, a block size of 512 to 4096 bytes, a size that
//! is a positive multiple of it, and for an emulated one a device the `device` crate accepts
//! with at most [`MAX_EMULATED_DRAM_BYTES`] of DRAM and a queue depth NVMe allows. Worked
//! example: `backend = { kind = "memory", size = 1000 }` with the default 512-byte blocks is
//! refused: `volume[0].backend.size` = 1000 bytes is not a multiple of 512.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{check_name, invalid, ByteSize, ConfigError, ServerConfig};

/// Whether the file backend opens its file with `O_DIRECT`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DirectIo {
    /// Try `O_DIRECT`; fall back to buffered I/O where the filesystem refuses it (tmpfs).
    #[default]
    Auto,
    /// `O_DIRECT` or fail at start.
    On,
    /// Buffered I/O through the page cache.
    Off,
}

/// `backend = { kind = ..., ... }` of a volume.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum BackendConfig {
    /// Sparse RAM: 64 KiB chunks allocated on first write, zeros elsewhere.
    Memory { size: ByteSize },
    /// A regular file or block device through io_uring. `size` creates/extends a regular file
    /// (default: the file's current size).
    File {
        path: PathBuf,
        size: Option<ByteSize>,
        #[serde(default)]
        direct: DirectIo,
        /// Registered 4 KiB buffers reads go in with (`READ_FIXED`), shared by the workers'
        /// rings; 0: plain reads (`backend/file.rs`, *Registered buffers*).
        #[serde(default = "default_fixed_buffers")]
        fixed_buffers: u32,
    },
    /// The SSD model of crate `device` run against the wall clock; the bytes live in a sparse
    /// map as for `memory`. `device` is a preset name (`"zssd"`) or a device table (`preset`
    /// plus overrides, or a complete description, in crate `device`'s format); `preset` is
    /// accepted as an alias of `device`. `sq_depth`: each worker's submission queue on the model.
    Emulated {
        #[serde(alias = "preset")]
        device: DeviceSpec,
        size: ByteSize,
        #[serde(default = "default_sq_depth")]
        sq_depth: u32,
    },
}

/// Default depth of each worker's submission queue on an emulated device: what a Linux NVMe
/// driver gives one hardware queue (`io_queue_depth` = 1024). Requests beyond it wait in the
/// worker, as they would in blk-mq.
pub const DEFAULT_SQ_DEPTH: u32 = 1024;
/// Largest device DRAM an emulated volume may model (its cache lines live in host memory).
pub const MAX_EMULATED_DRAM_BYTES: u64 = 64 << 30;
/// Deepest submission queue NVMe allows.
pub const MAX_SQ_DEPTH: u32 = 65536;

fn default_sq_depth() -> u32 {
    DEFAULT_SQ_DEPTH
}

/// Default registered read buffers of a file volume (`fixed_buffers`).
pub const DEFAULT_FIXED_BUFFERS: u32 = 0;
/// The most registered buffers a file volume may have: what the kernel registers on one ring
/// (`IORING_MAX_REG_BUFFERS`).
pub const MAX_FIXED_BUFFERS: u32 = 1 << 14;

fn default_fixed_buffers() -> u32 {
    DEFAULT_FIXED_BUFFERS
}

/// An emulated volume's device: a preset of crate `device` by name, or a device table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum DeviceSpec {
    Named(String),
    Inline(toml::Table),
}

impl DeviceSpec {
    /// The device description this names or spells out.
    pub fn device_config(&self) -> Result<device::DeviceConfig, device::config::ConfigError> {
        match self {
            DeviceSpec::Named(name) => device::DeviceConfig::preset(name),
            DeviceSpec::Inline(table) => device::DeviceConfig::from_toml_table(table.clone()),
        }
    }
}

/// `[[volume]]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VolumeConfig {
    pub name: String,
    /// The logical block size: LBAs in ACLs count these, requests must be aligned to it.
    #[serde(default = "default_block_bytes")]
    pub block_bytes: u32,
    pub backend: BackendConfig,
}

/// A volume's logical block size unless `block_bytes` says otherwise.
pub const DEFAULT_BLOCK_BYTES: u32 = 512;

fn default_block_bytes() -> u32 {
    DEFAULT_BLOCK_BYTES
}

impl ServerConfig {
    /// Checks each `[[volume]]` and returns them by name.
    pub(super) fn validate_volumes(&self) -> Result<BTreeMap<&str, &VolumeConfig>, ConfigError> {
        let mut by_name = BTreeMap::new();
        for (i, v) in self.volumes.iter().enumerate() {
            check_name(&format!("volume[{i}].name"), &v.name)?;
            if by_name.insert(v.name.as_str(), v).is_some() {
                return Err(ConfigError::Duplicate {
                    key: "volume.name".into(),
                    name: v.name.clone(),
                });
            }
            if !v.block_bytes.is_power_of_two() || !(512..=4096).contains(&v.block_bytes) {
                return Err(invalid(
                    format!("volume[{i}].block_bytes"),
                    v.block_bytes,
                    "512, 1024, 2048 or 4096",
                ));
            }
            let block = u64::from(v.block_bytes);
            let size = match &v.backend {
                BackendConfig::Memory { size } | BackendConfig::Emulated { size, .. } => {
                    Some(*size)
                }
                BackendConfig::File {
                    size,
                    path,
                    fixed_buffers,
                    ..
                } => {
                    if path.as_os_str().is_empty() {
                        return Err(invalid(
                            format!("volume[{i}].backend.path"),
                            "\"\"",
                            "a file or block device path",
                        ));
                    }
                    if *fixed_buffers > MAX_FIXED_BUFFERS {
                        return Err(invalid(
                            format!("volume[{i}].backend.fixed_buffers"),
                            fixed_buffers,
                            format!("0 to {MAX_FIXED_BUFFERS}"),
                        ));
                    }
                    *size
                }
            };
            if let Some(size) = size {
                if size.0 == 0 || size.0 % block != 0 {
                    return Err(invalid(
                        format!("volume[{i}].backend.size"),
                        size,
                        format!("a positive multiple of block_bytes ({block})"),
                    ));
                }
            }
            if let BackendConfig::Emulated {
                device, sq_depth, ..
            } = &v.backend
            {
                if let Ok(d) = device.device_config() {
                    if d.cache.dram_bytes > MAX_EMULATED_DRAM_BYTES {
                        return Err(invalid(
                            format!("volume[{i}].backend.device.cache.dram_bytes"),
                            d.cache.dram_bytes,
                            format!(
                                "at most {MAX_EMULATED_DRAM_BYTES} bytes (the model keeps a line per 4 KiB of device DRAM in host memory)"
                            ),
                        ));
                    }
                }
                if let Err(e) = device.device_config() {
                    let value = match device {
                        DeviceSpec::Named(name) => format!("{name:?}"),
                        DeviceSpec::Inline(_) => "(inline table)".to_string(),
                    };
                    return Err(invalid(
                        format!("volume[{i}].backend.device"),
                        value,
                        format!(
                            "a device preset ({}) or a valid device table: {e}",
                            device::config::PRESET_NAMES.join(", ")
                        ),
                    ));
                }
                if *sq_depth < 2 || *sq_depth > MAX_SQ_DEPTH {
                    return Err(invalid(
                        format!("volume[{i}].backend.sq_depth"),
                        sq_depth,
                        format!("2..={MAX_SQ_DEPTH}"),
                    ));
                }
            }
        }
        Ok(by_name)
    }
}
