//! MSR Cambridge block traces (Narayanan, Donnelly and Rowstron, "Write Off-Loading", FAST '08;
//! distributed by SNIA IOTTA). The traces' README gives the columns
//! `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`: the time the I/O was issued
//! in Windows filetime (100 ns ticks since 1601-01-01), the host's name, the logical disk
//! number, `Read` or `Write`, the offset and the size in bytes, and the response time in
//! filetime ticks.
//!
//! `128166372003061629,hm,1,Read,3221225472,4096,1111` reads 4 KiB at 3 GiB of disk 1 of host
//! `hm`; its time is 128 166 372 003 061 629 × 100 ns (the reader subtracts the trace's first
//! time, so replay starts at 0). The host name and the response time are not used: the
//! response time is what the traced system did, and replay measures the simulated one.

use super::fields::{commas, end_fits, request_bytes, shorten, uint, uint32};
use super::record::{Line, TraceOp, TraceRecord};

/// One filetime tick.
pub(crate) const FILETIME_TICK_NS: u64 = 100;

pub(crate) const EXPECTED: &str =
    "7 comma-separated fields `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`";

pub(crate) fn parse(line: &str) -> Result<Line, String> {
    let mut it = commas(line);
    let (Some(t), Some(_host), Some(disk), Some(kind), Some(off), Some(size), Some(_resp), None) = (
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
    ) else {
        return Err(format!(
            "found {} fields: expected {EXPECTED}",
            commas(line).count()
        ));
    };
    let op = match kind.trim() {
        k if k.eq_ignore_ascii_case("read") => TraceOp::Read,
        k if k.eq_ignore_ascii_case("write") => TraceOp::Write,
        k => return Err(format!("Type `{}`: expected Read or Write", shorten(k))),
    };
    let ticks = uint(t, "Timestamp (filetime)")?;
    let time_ns = ticks.checked_mul(FILETIME_TICK_NS).ok_or_else(|| {
        format!("Timestamp {ticks}: expected a filetime below 2^64 ns (before year 2185)")
    })?;
    let offset_bytes = uint(off, "Offset")?;
    let len_bytes = request_bytes(uint(size, "Size")?, "Size")?;
    end_fits(offset_bytes, len_bytes)?;
    Ok(Line::Io(TraceRecord {
        time_ns,
        device: uint32(disk, "DiskNumber")?,
        op,
        offset_bytes,
        len_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msr_lines() {
        let Ok(Line::Io(r)) = parse("128166372003061629,hm,1,Read,3221225472,4096,1111") else {
            panic!("parses")
        };
        assert_eq!(r.time_ns, 12_816_637_200_306_162_900);
        assert_eq!(
            (r.device, r.op, r.offset_bytes, r.len_bytes),
            (1, TraceOp::Read, 3 << 30, 4096)
        );
        assert!(parse("1,hm,1,Trim,0,4096,1")
            .unwrap_err()
            .contains("Type `Trim`"));
        assert!(parse("1,hm,1,Read,0,4096")
            .unwrap_err()
            .contains("found 6 fields"));
    }
}
