//! Data-integrity bookkeeping of a device-level run (integrity mode only).
//!
//! Each write carries a fresh version; a read that no write overlapped during its lifetime
//! must return, for every 4 KiB unit it covers, the version of the last completed write of
//! that unit (0 if none). Overlap is tracked with a global epoch bumped on every write
//! submission: a read remembers the epoch it was issued at and is checked only if no unit it
//! covers was written since. Worked example: write v1 to unit 7 completes; a read of unit 7 is
//! issued at epoch 1 and must see 1; if a write v2 to unit 7 is submitted before the read
//! completes, the unit's epoch becomes 2 > 1 and the read is not checked.

use std::collections::HashMap;
use std::ops::Range;

use device::MAP_UNIT_BYTES;

/// The epoch a read gets when a write to one of its units was in flight at its issue: such a
/// read is never checked.
const OVERLAPPED: u64 = u64::MAX;

#[derive(Default)]
pub(crate) struct Integrity {
    next_version: u32,
    /// Last completed write's version per 4 KiB unit.
    last: HashMap<u32, u32>,
    /// Writes in flight per unit.
    writing: HashMap<u32, u32>,
    /// The epoch of the last write submitted to each unit.
    epoch_of_unit: HashMap<u32, u64>,
    epoch: u64,
    reads_checked: u64,
}

/// The 4 KiB units an I/O of `len_bytes` at `offset_bytes` covers.
pub(crate) fn units(offset_bytes: u64, len_bytes: u64) -> Range<u32> {
    let first = (offset_bytes / MAP_UNIT_BYTES) as u32;
    let end = (offset_bytes + len_bytes).div_ceil(MAP_UNIT_BYTES) as u32;
    first..end
}

impl Integrity {
    /// A write of `units` is submitted: its version (never 0).
    pub(crate) fn write_submitted(&mut self, units: Range<u32>) -> u32 {
        self.next_version += 1;
        self.epoch += 1;
        for u in units {
            *self.writing.entry(u).or_insert(0) += 1;
            self.epoch_of_unit.insert(u, self.epoch);
        }
        self.next_version
    }

    /// A read of `units` is submitted: the epoch to hand back to [`Integrity::read_completed`].
    pub(crate) fn read_submitted(&self, units: Range<u32>) -> u64 {
        let overlapped = units
            .into_iter()
            .any(|u| self.writing.get(&u).is_some_and(|&n| n > 0));
        if overlapped {
            OVERLAPPED
        } else {
            self.epoch
        }
    }

    /// A write of `units` with `version` completed.
    pub(crate) fn write_completed(&mut self, units: Range<u32>, version: u32) {
        for u in units {
            let n = self
                .writing
                .get_mut(&u)
                .expect("write in flight was counted");
            *n -= 1;
            let e = self.last.entry(u).or_insert(0);
            // Writes to the same unit can complete out of order; the device keeps the one it
            // buffered last, and so do we only if versions increase.
            *e = (*e).max(version);
        }
    }

    /// A read of `units` issued at `epoch` returned `versions` (one per unit, `None` if the
    /// device sent none); `Err` names the first unit whose version is wrong.
    pub(crate) fn read_completed(
        &mut self,
        units: Range<u32>,
        epoch: u64,
        versions: Option<&[u32]>,
    ) -> Result<(), String> {
        if epoch == OVERLAPPED {
            return Ok(());
        }
        let versions = versions.ok_or("read completion without versions")?;
        for (k, u) in units.enumerate() {
            if self.epoch_of_unit.get(&u).is_some_and(|&e| e > epoch) {
                return Ok(()); // a write to this unit was issued while the read was in flight
            }
            let want = self.last.get(&u).copied().unwrap_or(0);
            if versions[k] != want {
                return Err(format!(
                    "read of unit {u} returned version {} but the last completed write was version {want}",
                    versions[k]
                ));
            }
        }
        self.reads_checked += 1;
        Ok(())
    }

    /// Reads whose data was checked.
    pub(crate) fn reads_checked(&self) -> u64 {
        self.reads_checked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_sees_the_last_completed_write() {
        let mut i = Integrity::default();
        let v = i.write_submitted(units(7 * 4096, 4096));
        i.write_completed(units(7 * 4096, 4096), v);
        let epoch = i.read_submitted(units(7 * 4096, 4096));
        assert_eq!(
            i.read_completed(units(7 * 4096, 4096), epoch, Some(&[v])),
            Ok(())
        );
        assert!(i
            .read_completed(units(7 * 4096, 4096), epoch, Some(&[v + 1]))
            .unwrap_err()
            .contains("unit 7"));
        assert_eq!(i.reads_checked(), 1);
    }

    #[test]
    fn reads_a_write_overlapped_are_not_checked() {
        let mut i = Integrity::default();
        let v = i.write_submitted(units(0, 8192));
        // In flight at issue: never checked, whatever it returns.
        let during = i.read_submitted(units(4096, 4096));
        assert_eq!(
            i.read_completed(units(4096, 4096), during, Some(&[99])),
            Ok(())
        );
        i.write_completed(units(0, 8192), v);
        // Issued after, then overtaken by a new write to its unit: not checked either.
        let before = i.read_submitted(units(4096, 4096));
        i.write_submitted(units(4096, 4096));
        assert_eq!(
            i.read_completed(units(4096, 4096), before, Some(&[99])),
            Ok(())
        );
        assert_eq!(i.reads_checked(), 0);
    }
}
