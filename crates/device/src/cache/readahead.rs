//! Read-ahead: sequential streams recognised and read ahead of (`cache.readahead_units`).
//!
//! Firmware recognises sequential streams and reads ahead of them: a read command whose first
//! LPN is where one of the last [`READAHEAD_STREAMS`] read commands ended continues that stream,
//! and the device reads the stream's next `readahead_units` units into DRAM (clean, marked
//! prefetched) unless they are cached or already on their way. Each later command of the
//! stream extends the window to `readahead_units` past its end, so the window stays ahead of the
//! reader; a read that continues no stream starts a new one (replacing the stream started
//! longest ago) and reads nothing ahead, so random reads cost exactly what they did.
//!
//! Worked example (`zssd`, 32-unit window, QD1 4 KiB reads at LPN 100, 101, 102…): the read of
//! 100 starts a stream; the read of 101 continues it and prefetches 102..134 (32 flash reads
//! spread over the LUNs, besides 101's own); the read of 102 finds its unit filling or cached, and extends the
//! window to 135 — one flash read. Each read after the second is served from DRAM.
//!

use super::NO_LPN;
use crate::config::CacheConfig;

/// Read commands remembered for stream detection: a few concurrent sequential readers.
pub const READAHEAD_STREAMS: usize = 8;

/// Sequential-stream detection for read-ahead (see "Read-ahead" in the module essay).
pub struct ReadAhead {
    window_units: u32,
    /// `(next LPN of the stream, read ahead up to (exclusive))`; `NO_LPN` marks an unused entry
    /// (no read starts there). A fixed array searched in full: this runs on every read.
    streams: [(u32, u32); READAHEAD_STREAMS],
    /// Entry a new stream takes (the oldest one started: round robin).
    next_entry: usize,
}

impl ReadAhead {
    pub fn new(config: &CacheConfig) -> ReadAhead {
        ReadAhead {
            window_units: config.readahead_units,
            streams: [(NO_LPN, 0); READAHEAD_STREAMS],
            next_entry: 0,
        }
    }

    /// A read command of `units` units from `first`: the LPNs to read ahead now (empty when
    /// the command continues no stream, or read-ahead is off).
    #[inline]
    pub fn on_read(&mut self, first: u32, units: u32) -> std::ops::Range<u32> {
        if self.window_units == 0 {
            return 0..0;
        }
        let end = first.saturating_add(units);
        let to = end.saturating_add(self.window_units);
        match self.streams.iter().position(|&(next, _)| next == first) {
            Some(i) => {
                let ahead = self.streams[i].1;
                let from = ahead.max(end).min(to);
                self.streams[i] = (end, to);
                from..to
            }
            None => {
                self.streams[self.next_entry] = (end, end);
                self.next_entry = (self.next_entry + 1) % READAHEAD_STREAMS;
                0..0
            }
        }
    }
}
