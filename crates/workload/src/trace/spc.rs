//! SPC trace format (Storage Performance Council, "SPC Trace File Format Specification",
//! revision 1.0.1, 2002), the format of the UMass trace repository's Financial and WebSearch
//! traces: `ASU,LBA,Size,Opcode,Timestamp[,optional fields]` — the application specific unit
//! (a logical volume), the starting block in 512-byte sectors, the size in bytes, `r`/`R` or
//! `w`/`W`, and the time in seconds (decimal) from the trace's start. Revision 1.0.1 allows
//! white space inside fields; it is trimmed.
//!
//! `0,303567,3584,w,0.000000` writes 3 584 bytes at byte 303 567 × 512 of ASU 0 at time 0
//! (3 584 is not a whole number of 4 KiB pages: replay rounds it to whole 512 B sectors).

use super::fields::{
    commas, decimal_ns, end_fits, request_bytes, sectors_to_bytes, shorten, uint, uint32,
};
use super::record::{Line, TraceOp, TraceRecord};

pub(crate) const EXPECTED: &str =
    "at least 5 comma-separated fields `ASU,LBA,Size,Opcode,Timestamp`";

pub(crate) fn parse(line: &str) -> Result<Line, String> {
    let mut it = commas(line);
    let (Some(asu), Some(lba), Some(size), Some(opcode), Some(t)) =
        (it.next(), it.next(), it.next(), it.next(), it.next())
    else {
        return Err(format!(
            "found {} fields: expected {EXPECTED}",
            commas(line).count()
        ));
    };
    let op = match opcode.trim().as_bytes() {
        [b'r' | b'R'] => TraceOp::Read,
        [b'w' | b'W'] => TraceOp::Write,
        _ => {
            return Err(format!(
                "Opcode `{}`: expected r, R, w or W",
                shorten(opcode.trim())
            ))
        }
    };
    let offset_bytes = sectors_to_bytes(uint(lba, "LBA")?, "LBA")?;
    let len_bytes = request_bytes(uint(size, "Size")?, "Size")?;
    end_fits(offset_bytes, len_bytes)?;
    Ok(Line::Io(TraceRecord {
        time_ns: decimal_ns(t, 9, "Timestamp (s)")?,
        device: uint32(asu, "ASU")?,
        op,
        offset_bytes,
        len_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spc_lines() {
        let Ok(Line::Io(r)) = parse("0,303567,3584,w,0.000000") else {
            panic!("parses")
        };
        assert_eq!(
            (r.device, r.op, r.offset_bytes, r.len_bytes),
            (0, TraceOp::Write, 303_567 * 512, 3584)
        );
        let Ok(Line::Io(r)) = parse("2, 10, 512, R, 1.5, extra") else {
            panic!("parses with an optional field")
        };
        assert_eq!((r.time_ns, r.device), (1_500_000_000, 2));
        assert!(parse("0,1,512,x,0.1").unwrap_err().contains("Opcode `x`"));
    }
}
