//! DiskSim and MQSim ASCII traces: one request per line, five whitespace-separated fields
//! `time device lba_sectors size_sectors type`.
//!
//! DiskSim's ASCII input format (Ganger, Worthington and Patt's DiskSim manual, "ascii" trace
//! format) gives the arrival time in milliseconds as a decimal number, the device number, the
//! starting block in 512-byte sectors, the size in sectors and request flags whose bit 0 is set
//! for a read. MQSim (Tavakkol et al., FAST '18) reads the same five columns with the time as an
//! integer in the unit its workload XML names (`<Time_Unit>`, nanoseconds by default; MQSim's
//! `traces/README.md`: "[request arrival time] [device number] [start LBA] [request size]
//! [request type]", type 0 = write, 1 = read). So:
//!
//! - `mqsim`: integer time in nanoseconds, `4851300 1 524288 16 0` is an 8 KiB write of
//!   device 1 at byte 268 435 456, 4.8513 ms into the trace;
//! - `disksim`: decimal time in milliseconds, `4.8513 1 524288 16 1` is the same request as a
//!   read.
//!
//! Detection tells them apart by the time field alone: a decimal point means DiskSim. The type
//! field is read as flags (bit 0), which covers both MQSim's 0/1 and DiskSim's flag words.

use super::fields::{decimal_ns, end_fits, request_bytes, sectors_to_bytes, uint, uint32};
use super::record::{Line, TraceOp, TraceRecord};

/// Which of the two readings of the time column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AsciiTime {
    /// MQSim: integer nanoseconds.
    IntegerNs,
    /// DiskSim: decimal milliseconds.
    DecimalMs,
}

pub(crate) const EXPECTED: &str =
    "5 whitespace-separated fields `time device lba_sectors size_sectors type`";

pub(crate) fn parse(line: &str, time: AsciiTime) -> Result<Line, String> {
    let mut it = line.split_ascii_whitespace();
    let (Some(t), Some(dev), Some(lba), Some(size), Some(kind), None) = (
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
    ) else {
        return Err(format!(
            "found {} fields: expected {EXPECTED}",
            line.split_ascii_whitespace().count()
        ));
    };
    let time_ns = match time {
        AsciiTime::IntegerNs => uint(t, "time (ns)")?,
        AsciiTime::DecimalMs => decimal_ns(t, 6, "time (ms)")?,
    };
    let offset_bytes = sectors_to_bytes(uint(lba, "lba")?, "lba")?;
    let len_bytes = request_bytes(sectors_to_bytes(uint(size, "size")?, "size")?, "size")?;
    end_fits(offset_bytes, len_bytes)?;
    let flags = uint(kind, "type (1 = read, 0 = write)")?;
    Ok(Line::Io(TraceRecord {
        time_ns,
        device: uint32(dev, "device")?,
        op: if flags & 1 == 1 {
            TraceOp::Read
        } else {
            TraceOp::Write
        },
        offset_bytes,
        len_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mqsim_and_disksim_lines() {
        let Ok(Line::Io(r)) = parse("4851300 1 524288 16 0", AsciiTime::IntegerNs) else {
            panic!("parses")
        };
        assert_eq!(
            (r.time_ns, r.device, r.op, r.offset_bytes, r.len_bytes),
            (4_851_300, 1, TraceOp::Write, 268_435_456, 8192)
        );
        let Ok(Line::Io(r)) = parse("4.8513\t1 524288 16 1", AsciiTime::DecimalMs) else {
            panic!("parses")
        };
        assert_eq!((r.time_ns, r.op), (4_851_300, TraceOp::Read));
        assert!(parse("4.8513 1 524288 16 1", AsciiTime::IntegerNs).is_err());
        let e = parse("1 2 3 4", AsciiTime::IntegerNs).unwrap_err();
        assert!(e.contains("found 4 fields"), "{e}");
        assert!(parse("1 2 3 0 1", AsciiTime::IntegerNs)
            .unwrap_err()
            .contains("positive"));
    }
}
