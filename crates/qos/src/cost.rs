//! The request-cost model: what one I/O costs the device, in tokens.
//!
//! # What it models
//! A flash device does not have one "IOPS" number. A 4 KB random read occupies one die for one
//! page read; a write occupies a die for a program that is ten to twenty times longer, and
//! eventually garbage collection on top; a large request is several page operations. The
//! published remote-flash scheduler (ReFlex) folds this into one currency: **one token is the
//! device cost of one 4 KB random read**, and every request is priced in tokens:
//!
//! ```text
//! cost(op, len) = ceil(max(len, 4 KB) / 4 KB) × unit(op)
//! unit(read)  = 1 token            (or the cheaper read-only value, see below)
//! unit(write) = the write weight   (10 for device "A", 16–20 for the other measured devices)
//! ```
//!
//! When the *whole* device load is read-only, reads interfere with nothing but other reads and
//! the device serves about twice as many of them (device "A": ~1 M read-only IOPS against
//! 420–570 K tokens/s mixed), so a read then costs the profile's read-only value (0.5 token on
//! device "A"). [`LoadMix`] says which regime is in force; the admission registry derives it
//! from what tenants declared.
//!
//! # Units
//! Costs are integers in **milli-tokens** (`_mtok`, 1 token = [`MTOK_PER_TOKEN`] = 1000 mtok),
//! so a 0.5-token read is exactly 500 mtok and a tenant of 100 IOPS earns whole milli-tokens
//! every 10 µs instead of losing fractions of a token to rounding. Rates are `_mtok_per_sec`.
//!
//! # Worked example (device "A": write weight 10 tokens, read-only read 0.5 token)
//! | request | mixed load | read-only load |
//! | --- | --- | --- |
//! | 4 KB read | 1 × 1000 = 1000 mtok | 1 × 500 = 500 mtok |
//! | 1 KB read | rounds up to 4 KB: 1000 mtok | 500 mtok |
//! | 16 KB read | 4 × 1000 = 4000 mtok | 2000 mtok |
//! | 4 KB write | 1 × 10 000 = 10 000 mtok | 10 000 mtok (a write is never discounted) |
//! | 6 KB write | ceil(6/4) = 2 → 20 000 mtok | 20 000 mtok |
//!
//! # What it leaves out
//! Sequential vs random access (the model prices every read as random, as published), the
//! device's internal state (GC debt, write-buffer fill) and request merging. FLUSH and TRIM are not
//! in the published model; we price a FLUSH as one write unit (it makes the device persist its
//! write buffer) and a TRIM by the range it covers: one trim unit (one read unit by default) per
//! started [`TRIM_UNIT_BYTES`] (1 MiB: one mapping-table page of 256 4 KiB entries to edit),
//! so a 4 GiB TRIM costs 4,096 tokens — about 8 ms of device "A" — not the 1 token it cost
//! when TRIM was flat, which let one tenant keep the device's mapping busy for free. The unit
//! prices are profile fields, so calibration can change them.
//!
//! # Config keys
//! `write_cost_mtok`, `read_only_read_cost_mtok`, `flush_cost_mtok`, `trim_cost_mtok` in the
//! device profile ([`crate::profile`]).

use serde::{Deserialize, Serialize};

/// Milli-tokens per token: the fine unit every cost, balance and rate is kept in.
pub const MTOK_PER_TOKEN: u64 = 1000;

/// Bytes covered by one cost unit: a token is the cost of one 4 KB random read.
pub const UNIT_BYTES: u64 = 4096;

/// Bytes of range one trim unit covers (one mapping page: 256 entries of 4 KiB).
pub const TRIM_UNIT_BYTES: u64 = 1 << 20;

/// Cost of a read in a mixed (read/write) load, by definition of the token.
pub const READ_COST_MTOK: u64 = MTOK_PER_TOKEN;

/// The operation of a request, as far as its cost is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// A read of `len` bytes.
    Read,
    /// A write of `len` bytes (FUA does not change the cost).
    Write,
    /// A cache flush; priced at one write unit whatever its length.
    Flush,
    /// A discard (or a deallocating zero-fill) of `len` bytes; priced at the profile's trim
    /// cost per started [`TRIM_UNIT_BYTES`].
    Trim,
}

/// Which cost regime the device is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadMix {
    /// Every tenant on the device declared a read-only load: reads get the read-only price and
    /// the capacity comes from the table's read-only column.
    ReadOnly,
    /// Reads and writes mix: a read costs one token.
    Mixed,
}

/// The per-unit prices of a device, copied out of its [`crate::DeviceProfile`].
///
/// Small and `Copy` so every scheduler keeps its own and prices requests without locking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostModel {
    /// Cost of one 4 KB unit of write, in milli-tokens (device "A": 10 000).
    pub write_cost_mtok: u64,
    /// Cost of one 4 KB unit of read when the load is read-only (device "A": 500).
    pub read_only_read_cost_mtok: u64,
    /// Cost of a FLUSH, in milli-tokens.
    pub flush_cost_mtok: u64,
    /// Cost of a TRIM, in milli-tokens.
    pub trim_cost_mtok: u64,
}

impl CostModel {
    /// Cost of one 4 KB unit of `op` under `mix` (FLUSH and TRIM: their flat price).
    pub fn unit_cost_mtok(&self, op: Op, mix: LoadMix) -> u64 {
        match (op, mix) {
            (Op::Read, LoadMix::Mixed) => READ_COST_MTOK,
            (Op::Read, LoadMix::ReadOnly) => self.read_only_read_cost_mtok,
            (Op::Write, _) => self.write_cost_mtok,
            (Op::Flush, _) => self.flush_cost_mtok,
            (Op::Trim, _) => self.trim_cost_mtok,
        }
    }

    /// Cost of one request: `ceil(max(len, 4 KB) / 4 KB) × unit(op)` for reads and writes,
    /// `ceil(max(len, 1 MiB) / 1 MiB) × trim unit` for TRIM, the flat price for FLUSH. Saturates instead of overflowing (a request that large is
    /// refused by the server's size limit long before it is priced).
    pub fn request_cost_mtok(&self, op: Op, len_bytes: u64, mix: LoadMix) -> u64 {
        let unit_mtok = self.unit_cost_mtok(op, mix);
        match op {
            Op::Read | Op::Write => size_units(len_bytes).saturating_mul(unit_mtok),
            Op::Trim => len_bytes
                .max(TRIM_UNIT_BYTES)
                .div_ceil(TRIM_UNIT_BYTES)
                .saturating_mul(unit_mtok),
            Op::Flush => unit_mtok,
        }
    }
}

/// Number of 4 KB cost units a request of `len_bytes` occupies: `ceil(max(len, 4 KB) / 4 KB)`.
pub fn size_units(len_bytes: u64) -> u64 {
    len_bytes.max(UNIT_BYTES).div_ceil(UNIT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device_a() -> CostModel {
        CostModel {
            write_cost_mtok: 10_000,
            read_only_read_cost_mtok: 500,
            flush_cost_mtok: 10_000,
            trim_cost_mtok: 1_000,
        }
    }

    #[test]
    fn worked_example_from_the_module_essay() {
        let m = device_a();
        assert_eq!(m.request_cost_mtok(Op::Read, 4096, LoadMix::Mixed), 1000);
        assert_eq!(m.request_cost_mtok(Op::Read, 1024, LoadMix::Mixed), 1000);
        assert_eq!(m.request_cost_mtok(Op::Read, 16384, LoadMix::Mixed), 4000);
        assert_eq!(m.request_cost_mtok(Op::Read, 4096, LoadMix::ReadOnly), 500);
        assert_eq!(
            m.request_cost_mtok(Op::Read, 16384, LoadMix::ReadOnly),
            2000
        );
        assert_eq!(m.request_cost_mtok(Op::Write, 4096, LoadMix::Mixed), 10_000);
        assert_eq!(
            m.request_cost_mtok(Op::Write, 4096, LoadMix::ReadOnly),
            10_000
        );
        assert_eq!(m.request_cost_mtok(Op::Write, 6144, LoadMix::Mixed), 20_000);
        assert_eq!(m.request_cost_mtok(Op::Flush, 0, LoadMix::Mixed), 10_000);
        assert_eq!(m.request_cost_mtok(Op::Trim, 0, LoadMix::Mixed), 1_000);
        assert_eq!(m.request_cost_mtok(Op::Trim, 4096, LoadMix::Mixed), 1_000);
        assert_eq!(
            m.request_cost_mtok(Op::Trim, (1 << 20) + 1, LoadMix::Mixed),
            2_000
        );
        assert_eq!(
            m.request_cost_mtok(Op::Trim, 4 << 30, LoadMix::Mixed),
            4_096_000,
            "a 4 GiB TRIM is priced by its range"
        );
    }

    #[test]
    fn size_units_round_up_and_never_below_one() {
        assert_eq!(size_units(0), 1);
        assert_eq!(size_units(1), 1);
        assert_eq!(size_units(4096), 1);
        assert_eq!(size_units(4097), 2);
        assert_eq!(size_units(128 * 1024), 32);
    }

    #[test]
    fn huge_lengths_saturate_instead_of_overflowing() {
        let m = device_a();
        assert_eq!(
            m.request_cost_mtok(Op::Write, u64::MAX, LoadMix::Mixed),
            u64::MAX
        );
    }
}
