//! Storage backends: where a volume's bytes live.
//!
//! # What it implements
//! A volume is served by one backend kind: `memory` (sparse RAM), `file` (a file or block device
//! through io_uring) or `emulated` (the SSD model of crate `device`, advanced by the wall clock).
//! The dataplane sees them all through one interface, [`Backend`], which fits both a backend that
//! finishes a request inside `submit` (memory) and one whose completions arrive later and are
//! polled from the worker loop (io_uring; the two-clock device model).
//!
//! # Design
//! A volume is opened once ([`open_volume`] → [`Volume`], shared by all workers: the memory
//! store, the file descriptors) and then once more per worker ([`Volume::attach`] → a
//! `Box<dyn Backend>` owned by that worker: its own io_uring). Requests carry an opaque `tag` the
//! worker uses to find the request again, and *own* their buffer: `submit` takes the
//! [`IoBuf`](crate::buf::IoBuf) and hands it back with the completion, so a buffer the kernel
//! is DMA-ing into can never be reused early. The types and traits of that interface are
//! `backend/interface.rs`'s, re-exported here.
//!
//! ```text
//! worker ──submit(tag, op, buf)──▶ Backend ──Done(completion)──▶ worker   (memory)
//!                                          └─Pending … poll() ─▶ worker   (io_uring, model)
//! ```
//!
//! Worked example: a 4 KiB READ at byte 8192 on a file volume: the worker takes a 4 KiB buffer
//! from its pool, calls `submit(tag=17, Read{8192, 4096}, buf)`; the file backend queues a
//! `Read` SQE with user_data 17 and returns `Pending`. At the end of the step the worker calls
//! `commit()` (one `io_uring_enter` for all SQEs of the step), and a later `poll()` returns
//! `Completion { tag: 17, result: Ok(()), buf, pages: None }` with the data in `buf`. The
//! memory backend answers a read with `pages: Some(views)` instead, views of the volume's pages
//! themselves (no copy; `crate::buf`, *Replies from a memory volume's pages*).
//!
//! Consistency across connections (what NBD's CAN_MULTI_CONN promises): every worker's backend
//! for a volume writes to the same store or file, and FLUSH is a store-wide `fdatasync` (file) or
//! a no-op (memory: writes are visible and "durable" once completed), so a FLUSH on any
//! connection covers every write completed on any connection. [`Caps::multi_conn`] says so.
//!
//! # What it leaves out
//! Backends in other processes (SPDK, a remote target) and tiering between volumes.
//!
//! # Config keys
//! `[[volume]] backend = { kind = "memory", size } | { kind = "file", path, size?, direct, fixed_buffers } |
//! { kind = "emulated", device, size, sq_depth }`, `block_bytes`.

pub mod emulated;
pub mod file;
mod interface;
pub mod memory;

use std::sync::Arc;

pub use interface::{
    push_run, AllocRun, Backend, BackendError, Caps, Completion, Fua, HostRing, RingGuest,
    StorageError, StorageOp, Submitted, Volume, WritePaths,
};

use crate::config::{BackendConfig, VolumeConfig};

/// Opens a volume's backend as its config describes.
pub fn open_volume(config: &VolumeConfig) -> Result<Arc<dyn Volume>, BackendError> {
    match &config.backend {
        BackendConfig::Memory { size } => Ok(Arc::new(memory::MemoryVolume::new(size.0))),
        BackendConfig::File {
            path,
            size,
            direct,
            fixed_buffers,
        } => Ok(Arc::new(
            file::FileVolume::open(
                &config.name,
                path,
                size.map(|s| s.0),
                *direct,
                config.block_bytes,
            )?
            .with_fixed_buffers(*fixed_buffers as usize),
        )),
        BackendConfig::Emulated {
            device,
            size,
            sq_depth,
        } => {
            let device = device.device_config().map_err(|e| BackendError::Invalid {
                volume: config.name.clone(),
                what: format!("device: {e}"),
            })?;
            Ok(Arc::new(emulated::EmulatedVolume::new(
                &config.name,
                &device,
                size.0,
                *sq_depth,
            )?))
        }
    }
}
