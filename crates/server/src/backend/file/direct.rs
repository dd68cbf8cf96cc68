//! A file volume's `O_DIRECT` descriptor: opening it, the alignments the file system asks of
//! it, and which descriptor a write goes through by those alignments.
//!
//! # Design
//! `statx(STATX_DIOALIGN)` gives the offset alignment direct I/O needs (the logical block:
//! 512 B or 4 KiB; 4 KiB when the kernel does not say) and the memory alignment, which must not
//! exceed the server's buffers' ([`crate::buf::BUF_ALIGN_BYTES`]); `st_blksize` gives the file
//! system's block, clamped to [`MAX_FS_BLOCK_BYTES`]. A write covering whole blocks goes direct,
//! one aligned to the logical block but not to whole blocks is offered direct with
//! `RWF_NOWAIT`, anything else goes through the page cache (the reasons and figures are in
//! `../file.rs`, *Partial-block writes*). Worked example, ext4 on a 512 B-sector disk
//! (alignment 512, block 4096): a 4 KiB write at 8192 is [`WriteRoute::Direct`], a 1 KiB write
//! at 1024 [`WriteRoute::DirectNoWait`], a 100 B write at 0 [`WriteRoute::Buffered`].
//!
//! # What it leaves out
//! Whether the file system then takes a no-wait write (it answers EAGAIN at once when not):
//! the ring learns that per write.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::sys;

/// The largest file-system block the partial-block rule honours; a file system that reports
/// a larger preferred I/O size (`stx_blksize`) is taken at this one, so a 64 KiB-aligned write
/// is always a whole-block one (no Linux file system here has larger blocks).
pub const MAX_FS_BLOCK_BYTES: u64 = 64 << 10;

/// The `O_DIRECT` descriptor and the two alignments that steer requests to it.
pub struct DirectFd {
    pub file: File,
    /// Offset and length alignment direct I/O accepts (`STATX_DIOALIGN`: the logical block).
    pub align_bytes: u64,
    /// The file system's block (`stx_blksize`; the logical block on a block device): a direct
    /// write that does not cover whole blocks of it is a partial-block write.
    pub fs_block_bytes: u64,
}

/// Which descriptor, and how, one write goes through (see *Partial-block writes*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteRoute {
    /// Whole file-system blocks through `O_DIRECT`.
    Direct,
    /// A partial-block write offered to `O_DIRECT` with `RWF_NOWAIT`: taken only as a pure
    /// overwrite, refused (EAGAIN) otherwise.
    DirectNoWait,
    /// Through the page cache.
    Buffered,
}

impl DirectFd {
    /// How a write of `len_bytes` at `offset_bytes` goes in, before the file system has
    /// answered it.
    pub fn route(&self, offset_bytes: u64, len_bytes: usize) -> WriteRoute {
        let len = len_bytes as u64;
        let aligned_to = |a: u64| offset_bytes.is_multiple_of(a) && len.is_multiple_of(a);
        if aligned_to(self.fs_block_bytes) {
            WriteRoute::Direct
        } else if aligned_to(self.align_bytes) {
            WriteRoute::DirectNoWait
        } else {
            WriteRoute::Buffered
        }
    }
}

/// Opens `path` with O_DIRECT and finds its alignments; Ok(None) when the filesystem refuses.
pub fn open_direct(path: &Path) -> std::io::Result<Option<DirectFd>> {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
        Err(e) => return Err(e),
    };
    let align = dio_align_bytes(path).unwrap_or(4096);
    if align == 0 || align > crate::buf::BUF_ALIGN_BYTES as u64 {
        return Ok(None);
    }
    let is_block_device = file.metadata()?.file_type().is_block_device();
    let fs_block_bytes = if is_block_device {
        // A direct write of whole logical blocks is what the device takes as it is.
        align
    } else {
        fs_block_bytes(&file, align)
    };
    Ok(Some(DirectFd {
        file,
        align_bytes: align,
        fs_block_bytes,
    }))
}

/// The file system's block for `file` (`st_blksize`), at least `align_bytes` and at most
/// [`MAX_FS_BLOCK_BYTES`]; `align_bytes` when it is not a power of two.
fn fs_block_bytes(file: &File, align_bytes: u64) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let reported = file.metadata().map_or(0, |m| m.blksize());
    if !reported.is_power_of_two() {
        return align_bytes;
    }
    reported.clamp(align_bytes, MAX_FS_BLOCK_BYTES.max(align_bytes))
}

/// The offset alignment direct I/O needs on `path` (`statx(STATX_DIOALIGN)`): Some(0) if
/// direct I/O is unsupported or needs buffers more aligned than ours, None if the kernel does
/// not report it.
fn dio_align_bytes(path: &Path) -> Option<u64> {
    let align = sys::statx_dio_align(path)?;
    if u64::from(align.mem_bytes) > crate::buf::BUF_ALIGN_BYTES as u64 {
        return Some(0);
    }
    Some(u64::from(align.offset_bytes))
}
