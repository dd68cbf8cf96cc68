//! What a finished flash operation leads to, split from `lib.rs` by idea: a host read or
//! prefetch fills its line and delivers the unit to the commands waiting for it (and frees a
//! line for a read or write waiting to stage); a programmed eviction row frees its buffer space
//! for the stalled writes; a GC erase frees its superblock, starts the LUN's next GC if it is
//! still below its threshold, and retries an eviction round that waited for GC. After each, the
//! idle flush and FastDrain get their chance to use the LUN that fell idle. Like `routing` it
//! holds no policy of its own.

use engine::SimTime;

use crate::cache::WriteBlock;
use crate::config::ReadStaging;
use crate::flash::{FlashOp, OpOrigin};
use crate::Ssd;

impl Ssd {
    pub(crate) fn flash_done(&mut self, now: SimTime, lun: u32, op: FlashOp) {
        self.flash_op_done(now, lun, op);
        self.flush_idle(now);
        self.drain_step(now);
    }

    pub(crate) fn flash_op_done(&mut self, now: SimTime, lun: u32, op: FlashOp) {
        match op.origin {
            OpOrigin::HostRead { lpn } | OpOrigin::Prefetch { lpn } => {
                let version = self.ftl.version_of(lpn);
                self.cache.finish_fill(lpn, version);
                let waiters = self
                    .fills
                    .remove(lpn)
                    .expect("a host flash read has a fill record");
                self.deliver_unit(now, lpn, version, waiters);
                if !self.read_stalls.is_empty() {
                    // The filled line is replaceable now: a read waiting to stage may take it
                    // (in arrival order with the stalled writes under `buffer-in-order`).
                    if self.config.cache.read_staging == ReadStaging::BufferInOrder {
                        self.resume_stalled(now);
                    } else {
                        self.resume_read_stalls(now);
                    }
                }
                if self.cache.is_split() && !self.stalled.is_empty() {
                    // A partition of a few ways can be all filling: the fill just made one
                    // replaceable, which a write stalled on that partition may be waiting for.
                    self.resume_stalled(now);
                }
            }
            OpOrigin::Evict { row } => {
                self.writeback.finish_row(&mut self.cache, row);
                self.ftl.host_row_programmed(lun);
                self.resume_stalled(now);
            }
            OpOrigin::GcRead | OpOrigin::GcProgram => {}
            OpOrigin::GcErase { superblock } => {
                self.ftl.finish_gc(lun, superblock);
                if self.ftl.needs_gc(lun) {
                    self.start_gc(now, lun);
                }
                if self.writeback.take_blocked() {
                    self.resume_stalled(now);
                    if !self.stalled.is_empty() {
                        self.make_room(now, WriteBlock::BufferFull, 0);
                    }
                }
            }
        }
    }
}
