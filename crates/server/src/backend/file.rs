//! `file`: a regular file or block device through io_uring.
//!
//! # Design
//! The volume opens the path twice: a buffered descriptor, and an `O_DIRECT` one where the
//! filesystem allows it (`direct = "auto"`; tmpfs refuses `O_DIRECT` with EINVAL and we fall
//! back to buffered only). `statx(STATX_DIOALIGN)` tells the offset alignment direct I/O needs
//! (512 B or 4 KiB); a read aligned to it goes through the direct descriptor, any other one
//! (NBD allows 512 B-aligned requests on a 4 KiB-sector disk) through the buffered one. Writes
//! choose by the file system's block as well (*Partial-block writes* below). Linux keeps the two
//! descriptors coherent (*Coherence* below).
//!
//! Each worker attaches its own ring ([`RING_ENTRIES`] entries, `file/ring.rs`), a
//! [`crate::sys::Ring`] — or, on a `socket_io = "uring"` worker, puts its SQEs into the
//! worker's socket ring (*One ring per worker* below): a request waits in a slot indexed by its
//! SQE's `user_data`, and its buffer goes into the ring with the SQE and comes back with the
//! CQE. Operations:
//!
//! | request | io_uring op |
//! | --- | --- |
//! | READ | `Read`, or `ReadFixed` into a registered buffer (*Registered buffers*; short reads resubmitted for the rest; EOF reads as zeros) |
//! | WRITE | `Write`, with `RWF_DSYNC` when FUA is set (a FUA write on NVMe) |
//! | FLUSH | `Fsync(DATASYNC)`: covers every write completed on any descriptor of the file |
//! | TRIM | `Fallocate(PUNCH_HOLE \| KEEP_SIZE)` (EOPNOTSUPP → success: TRIM is advisory) |
//! | WRITE_ZEROES | `Fallocate(ZERO_RANGE)`, falling back to `PUNCH_HOLE \| KEEP_SIZE` |
//!
//! Worked example: a 4 KiB FUA write at 1 MiB on ext4 (dio alignment 512): direct descriptor,
//! `Write{off=1048576,len=4096,rw_flags=RWF_DSYNC}`, one SQE; the worker's `commit` at the end
//! of its step submits it together with the step's other SQEs in one `io_uring_enter`.
//!
//! ## One ring per worker
//! A worker whose sockets are on its io_uring (`[dataplane] socket_io = "uring"`,
//! [`crate::sockring`]) would otherwise enter two rings per step: the socket ring's wait, and
//! this volume's `commit`; and the volume's completions would wake the worker through epoll (its
//! ring's descriptor in the epoll set, the epoll descriptor polled from the socket ring). With
//! `[dataplane] file_io = "socket-ring"` the worker, once its socket ring is up,
//! has each file volume join it ([`crate::backend::RingGuest::join`]): the volume's own ring is
//! closed (nothing is in flight yet) and taken out of the epoll set, its registered buffers are
//! registered on the socket ring instead, and from then on `fill_ring` pushes the volume's SQEs
//! into the socket ring through [`crate::backend::HostRing`], the same code that fills its own
//! ring. Nothing submits them then: the worker's next `io_uring_enter` — the step's wait, or
//! the coalescing pause — carries them with the step's sends and receives, and waits for all
//! their completions. The socket ring tags each with the volume's index (user-data bits 48-61,
//! above the slot or run index the volume uses, below its run bit 62), tells a volume's
//! completion from a socket's by its opcode (reads, writes, syncs and `fallocate` are never a
//! socket's), and sets it aside; the worker's `commit` step hands it to the volume
//! ([`crate::backend::RingGuest::complete`]), whose slot logic is unchanged, before the volume
//! pushes what waits — what those completions queued again first (short transfers, fallbacks,
//! refused partial-block writes, held writes), then the step's new requests.
//! Only one volume's buffers can be registered on a ring: a second volume with
//! `fixed_buffers` reads plain there, saying so. Closing: the worker's socket ring is closed
//! before its backends (field order); closing it cancels and waits for everything in it,
//! file operations included, before their buffers are freed; the backend then gives back the
//! stretches its writes claimed ([`FileBackend::cancel_and_reap`]). With `file_io = "own-ring"`,
//! on an epoll worker, or where the kernel refused the socket ring, each volume keeps a ring per
//! worker, as above; `own-ring` is the default: measured, the merged ring cut the server's syscalls per I/O but
//! not its CPU per I/O beyond this machine's noise (docs/server.md, *Measuring it here*).
//! Worked example: fio QD32 on one connection, a step that takes 32 READs: the step's
//! `commit` pushes 32 `READ_FIXED` into the socket ring beside the last replies' SENDMSG; one
//! `io_uring_enter` submits all 33 and waits; the reads complete in it, the next step hands
//! them to the volume and queues their replies for the enter after — one syscall per step where
//! the own ring took a submit, an `epoll_wait` and the socket ring's enter
//! (`ullstack_worker_socket_ring_file_ops_total` counts the completions that came through the
//! socket ring).
//!
//! ## Write runs
//! Contiguous buffered writes waiting together go to the kernel as one `Writev` (`file/runs.rs`
//! has the rule and the meaning of a run's result for each member).
//!
//! ## Partial-block writes
//! A direct write that covers only part of a file-system block (a 1 KiB write on ext4's 4 KiB
//! blocks: aligned to the disk's 512 B logical block, so `O_DIRECT` accepts it) is cheap when
//! it overwrites a block already written on disk, and dear otherwise: into a hole, an unwritten
//! (fallocated) or a delayed-allocation block the file system must zero the rest of the block
//! around it, so ext4 and XFS take the inode lock exclusively and wait for every direct I/O in
//! flight on the file first; io_uring's non-blocking attempt is refused and each such write
//! goes to an `iou-wrk` thread to serialize there. Through the page cache the same write is
//! the other way round: cheap into a fresh block (a page to dirty), dear over a written,
//! uncached one (the page cache must first read the block it only partly writes: its own
//! read-modify-write). Neither descriptor wins both, so the file system chooses: a write aligned
//! to the direct alignment but not to whole blocks ([`FileVolume::fs_block_bytes`], from
//! `st_blksize`) goes to the direct descriptor with `RWF_NOWAIT`. ext4 and XFS then take it
//! only as a pure overwrite of written blocks with no cached pages in its range, and otherwise
//! answer EAGAIN at once (io_uring passes EAGAIN of an `RWF_NOWAIT` request back instead of
//! retrying it in a worker); a refused write goes to the buffered descriptor, where it may join
//! a write run. Writes of whole blocks go direct as before; requests not aligned to the direct
//! alignment, buffered as before. Block devices have no partial blocks here (their "file
//! system block" is the logical block). `FileVolume::write_paths` counts each path
//! ([`WritePaths`]). Worked example (ext4, 4 KiB blocks, direct alignment 512): a 1 KiB write
//! at 5120 into a fresh sparse file is offered direct with `RWF_NOWAIT`, refused with EAGAIN
//! (its block is a hole) and sent again through the buffered descriptor — two SQEs, counted
//! once in `partial_block_writes_to_page_cache`; the same write once that block is on disk
//! and out of the page cache is taken as a direct overwrite — one SQE, counted in
//! `direct_partial_block_writes`.
//!
//! ## Registered buffers
//! With `fixed_buffers = N` the volume owns N buffers of [`FIXED_BUF_BYTES`]
//! ([`crate::buf::FixedBufs`]) that every worker's ring registers when it attaches
//! (`IORING_REGISTER_BUFFERS`; the kernel pins their pages once instead of at every read), and a
//! READ of 4 KiB or less goes in as `READ_FIXED` into one of them. The reply sends that buffer
//! as it is (the send references it until its completion, as any reply buffer; nothing is
//! copied), and the send's completion gives it to the worker's buffer pool, which hands its
//! registered buffers out before ordinary ones: from then on a 4 KiB READ the worker decodes
//! already holds a registered buffer. A READ that arrives with an ordinary buffer swaps it for a
//! free registered one (the ordinary one is freed); when none is free (all in flight, or idle
//! in another worker's pool) it keeps its buffer and goes in as a plain `READ`, counted
//! (`ullstack_file_reads_total{buffer="fallback"}`, beside `"registered"`). A short read
//! continues in its registered buffer. A ring that cannot register them (the locked-memory
//! limit) reads plain, saying so once. Worked example: fio QD32 on one connection, 256
//! buffers: the first 32 READs each swap, the next ones find registered buffers in the pool;
//! with 8 buffers, 8 of a step's 32 READs go in fixed and 24 plain.
//!
//! ## Order of overlapping requests
//! A request goes to the kernel only when no request that arrived on this ring before it, that
//! overlaps it, and where one of the two changes data (a write, trim or zeroing) is still
//! unfinished; requests that touch other bytes, and reads beside reads, pass each other freely.
//! io_uring runs the SQEs of one submission concurrently (a buffered write punted to an
//! `iou-wrk` thread, a direct read served at once), and a write can come back for a second SQE
//! (a short transfer, a partial-block write the file system refused, a run cut short): without
//! the rule a read sent after a write could read the bytes from before it and be answered after
//! the write was acknowledged, which NBD's conformance client (`nbd-tester-client -i -l`)
//! reports as bad data. A held request waits in `waiting` and is offered again after the next
//! completion; the oldest unfinished request is never held, so nothing waits forever. While no
//! data-changing request is unfinished a read is not checked at all (reads-only loads pay
//! nothing); otherwise the check is a scan of this ring's slots. Requests on other workers'
//! rings are not ordered against these: NBD leaves the order of requests in flight together to
//! the server, and one connection's requests all go to one worker.
//!
//! ## Coherence
//! A block may thus have dirty pages in the page cache while other requests reach it through
//! `O_DIRECT`. NBD orders only a request against the replies its client has seen, so what must
//! hold is that a request sees every write *completed* before it was sent, whatever descriptor
//! either used; Linux's direct I/O path gives that: a direct read first writes back dirty cached
//! pages of its range and waits for them; a direct write writes back and invalidates the
//! cached pages of its range before it starts (and if a page cannot be invalidated, iomap
//! returns ENOTBLK and the file system does the write buffered instead) and invalidates the
//! range again when it completes (dropping pages a concurrent readahead cached meanwhile), so a
//! later buffered read or partial write reads the block from disk. Under `RWF_NOWAIT` a direct
//! write refuses any range with cached pages, so a block with buffered data keeps taking its
//! partial writes through the page cache until writeback and eviction. What the kernel does
//! not give is a direct write and a buffered write in flight together on one page: the buffered
//! one dirties a page the direct one must drop when it completes, Linux keeps the stale page and
//! records EIO for the next `fdatasync` (the NBD project's integrity test, with two such writes to
//! neighbouring sectors in flight, got its FLUSH failed). So a write goes in through one kind of
//! descriptor only where no write of the other kind is in the kernel (`file/pages.rs`, by 64 KiB
//! stretch over every worker): a partial-block write finding buffered writes there goes straight
//! to the page cache, a whole-block one too, a buffered one finding direct writes goes direct
//! (blocking) when aligned to the direct alignment — unless it is a partial-block write the file
//! system refused, for which that is the serialized read-modify-write the refusal spared — and
//! a write that fits neither waits, ahead of newer writes, for the next completion or
//! [`HELD_WRITE_RETRY_NS`]. (On the socket ring a newer write's refusal may not be reaped yet
//! when an older one's retry is routed — completions there are posted at the worker's next
//! enter — and a retry sent direct then would leave its block written, making the next partial
//! writes to it direct overwrites.) FLUSH is `fdatasync`
//! of the inode (both descriptors), and a FUA partial write is `RWF_DSYNC` on whichever
//! descriptor takes it. Requests in flight together on overlapping ranges are unordered in NBD,
//! and are here. `tests/partial_block_writes.rs` walks one block through each transition named
//! here (hole, dirty page, clean cached page, whole-block direct write, direct overwrite) and
//! checks the data and the path after each; `tests/nbd_tester_client.rs` runs the NBD project's
//! integrity tests against it.
//!
//! # Where each idea lives
//! | module | idea |
//! | --- | --- |
//! | `file/volume.rs` | the volume: opening the path, its size, the write-path counters |
//! | `file/direct.rs` | the `O_DIRECT` descriptor, its alignments, a write's route by them |
//! | `file/pages.rs` | which descriptor kind may write where (*Coherence*) |
//! | `file/runs.rs` | write-run planning: the merge rule and how a run's result splits |
//! | `file/ring.rs` | a worker's ring: slots, order, routing, submissions and completions |
//! | `crate::buf` | the registered buffers ([`crate::buf::FixedBufs`]) and the pool that keeps them |
//! | here | [`Volume`] for [`FileVolume`]: what the volume answers (its allocation, by `lseek`) and attaching a ring |
//!
//! # What it leaves out
//! A memory of refused blocks: every partial write to a block with cached pages pays its
//! refused direct attempt (a CQE and a second SQE); remembering recent refusals per block would route
//! the next ones straight to the page cache. Reads choose by the direct alignment only (a
//! partial-block direct read is no read-modify-write; over dirty pages the kernel writes them
//! back first). IOPOLL (completions are interrupt-driven; the virtual disks here answer
//! EOPNOTSUPP to it). Registered files; registered buffers for reads larger than
//! [`FIXED_BUF_BYTES`] and for writes (a write's payload arrives in whatever buffer the
//! worker's decode took). On the socket ring: registered buffers of more than one volume (one
//! registration per ring), and a file operation's own submission at `commit` (it waits for the
//! worker's next enter, which follows within the step's sends).
//!
//! # Config keys
//! `backend = { kind = "file", path, size?, direct = "auto" | "on" | "off", fixed_buffers = N }`
//! (`fixed_buffers`: 0 to [`MAX_FIXED_BUFFERS`], default 0); `[dataplane] file_io =
//! "socket-ring" | "own-ring"` (*One ring per worker*).

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use io_uring::IoUring;

use super::interface::{
    push_run, AllocRun, Backend, BackendError, Caps, StorageError, Volume, WritePaths,
};
use crate::sys;

mod direct;
mod pages;
mod ring;
mod runs;
mod volume;
pub use direct::MAX_FS_BLOCK_BYTES;
pub use ring::{FileBackend, FileStats, HELD_WRITE_RETRY_NS, RING_ENTRIES};
pub use runs::{WRITE_RUN_MAX_BYTES, WRITE_RUN_MAX_WRITES};
pub use volume::{FileVolume, FIXED_BUF_BYTES, MAX_FIXED_BUFFERS};

impl Volume for FileVolume {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn caps(&self) -> Caps {
        Caps {
            flush: true,
            fua: true,
            trim: true,
            write_zeroes: true,
            multi_conn: true,
            read_only: false,
        }
    }

    fn kind(&self) -> &'static str {
        "file"
    }

    fn write_paths(&self) -> Option<WritePaths> {
        Some(self.write_paths.snapshot())
    }

    fn fixed_reads(&self) -> Option<[u64; 2]> {
        self.fixed
            .as_ref()
            .map(|home| [home.fixed_reads(), home.fallbacks()])
    }

    /// `lseek(SEEK_DATA / SEEK_HOLE)` on the file: holes are what the file system reports
    /// (ranges past the end of a shorter file are holes too). A block device, or a file system
    /// without SEEK_DATA, reports everything as data.
    fn allocation(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        max_runs: usize,
        out: &mut Vec<AllocRun>,
    ) -> Result<(), StorageError> {
        let end = offset_bytes.saturating_add(len_bytes).min(self.size_bytes);
        let fd = self.buffered.as_fd();
        let first = out.len();
        let mut at = offset_bytes;
        while at < end && out.len() - first < max_runs {
            // A block device, or a file system without SEEK_DATA, reports everything as data;
            // ENXIO: no data at or after `at`: the rest is a hole.
            let data = if self.is_block_device {
                None
            } else {
                match seek(fd, at, sys::Whence::Data) {
                    Ok(d) => Some(d),
                    Err(libc::ENXIO) => Some(end),
                    Err(_) => None,
                }
            };
            let Some(data) = data else {
                push_run(
                    out,
                    AllocRun {
                        len_bytes: end - at,
                        hole: false,
                    },
                );
                break;
            };
            if data > at {
                let to = data.min(end);
                push_run(
                    out,
                    AllocRun {
                        len_bytes: to - at,
                        hole: true,
                    },
                );
                at = to;
                continue;
            }
            let hole = seek(fd, at, sys::Whence::Hole).unwrap_or(end).max(at + 1);
            let to = hole.min(end);
            push_run(
                out,
                AllocRun {
                    len_bytes: to - at,
                    hole: false,
                },
            );
            at = to;
        }
        Ok(())
    }

    fn attach(self: Arc<Self>) -> Result<Box<dyn Backend>, BackendError> {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(RING_ENTRIES * 2);
        let ring = sys::Ring::build(&builder, RING_ENTRIES).map_err(BackendError::Ring)?;
        tracing::debug!(
            volume = %self.name,
            direct_align = ?self.direct_align_bytes(),
            block_device = self.is_block_device,
            "file backend attached"
        );
        let mut backend = FileBackend::with_ring(self, ring);
        backend.register_fixed();
        Ok(Box::new(backend))
    }
}

/// `lseek(fd, offset_bytes, whence)`; `Err` carries the errno. Moving the descriptor's file
/// offset affects nobody: all I/O on the volume's descriptors gives explicit offsets (io_uring
/// reads and writes, fallocate, fsync).
fn seek(fd: BorrowedFd<'_>, offset_bytes: u64, whence: sys::Whence) -> Result<u64, i32> {
    sys::lseek(fd, offset_bytes, whence).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

#[cfg(test)]
mod tests;
