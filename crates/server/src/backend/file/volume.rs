//! A file volume: the path opened as a buffered and (where the file system allows) an
//! `O_DIRECT` descriptor, its size, what it answers about its allocation, and the counters of
//! the paths its writes took, shared by every worker's ring (`ring.rs`).
//!
//! # Design
//! Opening is where the volume learns what it is: a block device's size comes from
//! `BLKGETSIZE64`, a file's from its metadata (extended to `size` when asked, never shrunk);
//! the size is cut to whole blocks of the export. `direct = "auto"` opens `O_DIRECT` where the
//! file system takes it and goes buffered-only where it does not (tmpfs answers EINVAL);
//! `"on"` makes that refusal an error. Worked example: a 1,000,000-byte file opened with 512 B
//! blocks and no `size` exports 999,936 bytes (1953 blocks); the 64 bytes past them are never
//! read or written.
//!
//! # What it leaves out
//! Resizing a volume while it is served; what the volume answers through [`Volume`]
//! (`../file.rs`: its allocation, by `lseek`); the ring's work (`ring.rs`).
//!
//! [`Volume`]: super::super::Volume

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::super::interface::{BackendError, WritePaths};
use super::direct::{open_direct, DirectFd, WriteRoute};
use super::pages::PageModes;
use crate::buf::FixedBufs;
use crate::config::DirectIo;
use crate::sys;

/// Bytes of each registered read buffer: the pool's smallest size class, which 4 KiB reads and
/// smaller ones take (larger reads stay plain).
pub const FIXED_BUF_BYTES: usize = 4096;
/// The most registered buffers a volume has: what the kernel registers on one ring
/// (`IORING_MAX_REG_BUFFERS`).
pub const MAX_FIXED_BUFFERS: usize = 1 << 14;

/// A file volume: the descriptors, shared by every worker's ring.
pub struct FileVolume {
    pub(super) name: String,
    pub(super) buffered: File,
    pub(super) direct: Option<DirectFd>,
    pub(super) size_bytes: u64,
    pub(super) is_block_device: bool,
    pub(super) write_paths: WritePathCounters,
    /// Which descriptor kind has writes in the kernel where (see `pages.rs`).
    pub(super) pages: PageModes,
    /// The registered buffers reads go in with (`None`: `fixed_buffers = 0`).
    pub(super) fixed: Option<Arc<FixedBufs>>,
}

/// How a file volume's writes went, over every worker (`FileVolume::write_paths`).
#[derive(Debug, Default)]
pub(super) struct WritePathCounters {
    pub(super) direct_block: AtomicU64,
    pub(super) direct_partial: AtomicU64,
    pub(super) partial_refused: AtomicU64,
    pub(super) buffered: AtomicU64,
    pub(super) direct_rerouted: AtomicU64,
}

impl WritePathCounters {
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> WritePaths {
        WritePaths {
            direct_block_writes: self.direct_block.load(Ordering::Relaxed),
            direct_partial_block_writes: self.direct_partial.load(Ordering::Relaxed),
            partial_block_writes_to_page_cache: self.partial_refused.load(Ordering::Relaxed),
            buffered_writes: self.buffered.load(Ordering::Relaxed),
            direct_rerouted_writes: self.direct_rerouted.load(Ordering::Relaxed),
        }
    }
}

impl FileVolume {
    pub fn open(
        name: &str,
        path: &Path,
        size_bytes: Option<u64>,
        direct: DirectIo,
        block_bytes: u32,
    ) -> Result<FileVolume, BackendError> {
        let open_err = |source: std::io::Error| BackendError::Open {
            volume: name.to_string(),
            path: path.display().to_string(),
            source,
        };
        let buffered = OpenOptions::new()
            .read(true)
            .write(true)
            .create(size_bytes.is_some())
            .truncate(false)
            .open(path)
            .map_err(open_err)?;
        let meta = buffered.metadata().map_err(open_err)?;
        let is_block_device = meta.file_type().is_block_device();
        let current_bytes = if is_block_device {
            sys::blkgetsize64(buffered.as_fd()).map_err(open_err)?
        } else {
            meta.len()
        };
        let size_bytes = match size_bytes {
            Some(want) if is_block_device && want > current_bytes => {
                return Err(BackendError::Invalid {
                    volume: name.into(),
                    what: format!(
                        "size {want} bytes exceeds block device {} of {current_bytes} bytes",
                        path.display()
                    ),
                })
            }
            Some(want) => {
                if !is_block_device && want > current_bytes {
                    buffered.set_len(want).map_err(open_err)?;
                }
                want
            }
            None => current_bytes,
        };
        let size_bytes = size_bytes - size_bytes % u64::from(block_bytes);
        if size_bytes == 0 {
            return Err(BackendError::Invalid {
                volume: name.into(),
                what: format!(
                    "{} is empty; give `size` to create or extend it",
                    path.display()
                ),
            });
        }
        let direct = match direct {
            DirectIo::Off => None,
            DirectIo::Auto => open_direct(path).ok().flatten(),
            DirectIo::On => match open_direct(path).map_err(open_err)? {
                Some(d) => Some(d),
                None => {
                    return Err(BackendError::Invalid {
                        volume: name.into(),
                        what: format!(
                            "direct = \"on\" but {} does not support O_DIRECT",
                            path.display()
                        ),
                    })
                }
            },
        };
        Ok(FileVolume {
            name: name.to_string(),
            buffered,
            direct,
            size_bytes,
            is_block_device,
            write_paths: WritePathCounters::default(),
            pages: PageModes::default(),
            fixed: None,
        })
    }

    /// The volume with `count` registered read buffers of [`FIXED_BUF_BYTES`] (0: none; at
    /// most [`MAX_FIXED_BUFFERS`]), shared by every worker's ring (*Registered buffers* in
    /// `../file.rs`).
    pub fn with_fixed_buffers(mut self, count: usize) -> FileVolume {
        let count = count.min(MAX_FIXED_BUFFERS);
        self.fixed = (count > 0).then(|| FixedBufs::new(count, FIXED_BUF_BYTES));
        self
    }

    /// The registered read buffers, if any.
    pub fn fixed_buffers(&self) -> Option<&Arc<FixedBufs>> {
        self.fixed.as_ref()
    }

    /// The direct-I/O offset alignment in use, or None when all I/O is buffered.
    pub fn direct_align_bytes(&self) -> Option<u64> {
        self.direct.as_ref().map(|d| d.align_bytes)
    }

    /// The block a direct write must cover whole to be sent without `RWF_NOWAIT`, or None when
    /// all I/O is buffered.
    pub fn fs_block_bytes(&self) -> Option<u64> {
        self.direct.as_ref().map(|d| d.fs_block_bytes)
    }

    /// How a write of `len_bytes` at `offset_bytes` goes in, before the file system has
    /// answered it.
    pub(super) fn write_route(&self, offset_bytes: u64, len_bytes: usize) -> WriteRoute {
        match &self.direct {
            Some(d) => d.route(offset_bytes, len_bytes),
            None => WriteRoute::Buffered,
        }
    }
}
