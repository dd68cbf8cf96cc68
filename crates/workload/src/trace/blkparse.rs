//! `blkparse` default text output (blktrace's `blkparse(1)`, "OUTPUT DESCRIPTION AND
//! FORMATTING"; the header is `"%D %2c %8s %5T.%9t %5p %2a %3d "` in blktrace's
//! `blkparse_fmt.c`): device `major,minor`, CPU, sequence number, time `seconds.nanoseconds`
//! since the trace started, PID, action, RWBS, then for a request `sector + sectors [process]`:
//!
//! ```text
//!   8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]
//! ```
//!
//! ## Which event: Q
//! A request appears several times: `Q` when a bio is queued by its submitter, then `G`, `I`,
//! `M`/`F` merges, `D` when the driver is given it, `C` when it completes. We replay **Q**:
//! it is the I/O as the application and file system asked for it, at the time they asked. `D`
//! is that demand after the traced machine's own block layer merged, split, plugged and
//! delayed it, so its sizes and times carry the old scheduler's decisions and its queueing
//! delay; replayed through ullstack's block layer (or straight into a device whose queues do
//! their own scheduling) they would be counted twice. Replaying Q lets the simulated stack make
//! those decisions itself. (To replay what a device saw, filter the text to D events and
//! relabel them, e.g. `awk '$6=="D"{$6="Q"}1'`.) Stacked devices (device-mapper, md) log Q on
//! both the upper and the lower device; pick one with `--trace-device MAJ,MIN`.
//!
//! Other actions, Q events without a sector range (a flush: `Q FWS [jbd2]`), discards (RWBS
//! with `D`) and the per-CPU summary blkparse prints at the end are not I/Os we replay: they
//! are read and passed over, never an error. Device numbers are `major << 20 | minor` (the
//! kernel's `MKDEV`), so `8,16` is 8 388 624; `--trace-device 8,16` accepts the pair.

use super::fields::{decimal_ns, end_fits, request_bytes, sectors_to_bytes, shorten, uint, uint32};
use super::record::{Line, TraceOp, TraceRecord};

pub(crate) const EXPECTED: &str =
    "a blkparse event `MAJ,MIN CPU SEQ SECONDS.NANOS PID ACTION RWBS [SECTOR + COUNT [PROCESS]]`";

/// The kernel's `MKDEV`: minor numbers have 20 bits.
pub fn device_number(major: u32, minor: u32) -> Option<u32> {
    if major < (1 << 12) && minor < (1 << 20) {
        Some(major << 20 | minor)
    } else {
        None
    }
}

/// Parses `MAJ,MIN` into a device number.
pub(crate) fn parse_device(text: &str) -> Option<u32> {
    let (maj, min) = text.split_once(',')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(maj) || !all_digits(min) {
        return None;
    }
    device_number(maj.parse().ok()?, min.parse().ok()?)
}

pub(crate) fn parse(line: &str) -> Result<Line, String> {
    let mut it = line.split_ascii_whitespace();
    let Some(dev) = it.next() else {
        return Ok(Line::Other);
    };
    let Some(device) = parse_device(dev) else {
        // Not an event line: the summary at the end (`CPU0 (8,0):`, ` Reads Queued: ...`).
        return Ok(Line::Other);
    };
    let (Some(cpu), Some(seq), Some(time), Some(pid), Some(action), Some(rwbs)) = (
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
    ) else {
        return Err(format!(
            "event of device {dev} is cut short: expected {EXPECTED}"
        ));
    };
    uint32(cpu, "CPU")?;
    uint(seq, "sequence number")?;
    let time_ns = decimal_ns(time, 9, "time (s)")?;
    uint32(pid, "PID")?;
    if action != "Q" {
        return Ok(Line::Event);
    }
    if !rwbs.bytes().all(|b| {
        matches!(
            b,
            b'F' | b'D' | b'W' | b'R' | b'N' | b'A' | b'S' | b'M' | b'E' | b'B'
        )
    }) {
        return Err(format!(
            "RWBS `{}`: expected letters from F, D, W, R, N, A, S, M, E, B",
            shorten(rwbs)
        ));
    }
    let Some(sector) = it.next() else {
        return Ok(Line::Event); // a flush or another request without data
    };
    if sector.starts_with('[') {
        return Ok(Line::Event);
    }
    let (Some("+"), Some(count)) = (it.next(), it.next()) else {
        return Err(format!(
            "Q event at sector `{}`: expected `SECTOR + COUNT`",
            shorten(sector)
        ));
    };
    let offset_bytes = sectors_to_bytes(uint(sector, "sector")?, "sector")?;
    let count = uint(count, "sector count")?;
    let op = if rwbs.contains('D') {
        None // discard
    } else if rwbs.contains('W') {
        Some(TraceOp::Write)
    } else if rwbs.contains('R') {
        Some(TraceOp::Read)
    } else {
        None
    };
    let Some(op) = op else {
        return Ok(Line::Event);
    };
    let len_bytes = request_bytes(sectors_to_bytes(count, "sector count")?, "sector count")?;
    end_fits(offset_bytes, len_bytes)?;
    Ok(Line::Io(TraceRecord {
        time_ns,
        device,
        op,
        offset_bytes,
        len_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_events_are_ios_and_the_rest_is_passed_over() {
        let Ok(Line::Io(r)) =
            parse("  8,0    3        1     0.000001500   697  Q   W 223490 + 8 [kjournald]")
        else {
            panic!("parses")
        };
        assert_eq!(
            (r.time_ns, r.device, r.op, r.offset_bytes, r.len_bytes),
            (1500, 8 << 20, TraceOp::Write, 223_490 * 512, 4096)
        );
        let Ok(Line::Io(r)) = parse("8,16 0 9 1.000000000 1 Q RA 64 + 256 [cat]") else {
            panic!("parses")
        };
        assert_eq!(
            (r.op, r.device, r.time_ns),
            (TraceOp::Read, 8 << 20 | 16, 1_000_000_000)
        );
        for passed in [
            "8,0 3 2 0.000002 697 D W 223490 + 8 [kjournald]",
            "8,0 3 3 0.000002 697 C W 223490 + 8 [0]",
            "8,0 1 4 0.1 5 Q FWS [jbd2/sda1-8]",
            "8,0 1 5 0.1 5 Q DS 2048 + 2048 [fstrim]",
            "CPU0 (8,0):",
            " Reads Queued:           0,        0KiB",
        ] {
            assert!(
                !matches!(parse(passed), Ok(Line::Io(_)) | Err(_)),
                "{passed}"
            );
        }
        assert!(parse("8,0 3 1 x 697 Q W 1 + 8 [a]")
            .unwrap_err()
            .contains("time"));
        assert!(parse("8,0 3 1 0.1 697 Q W 1 - 8 [a]")
            .unwrap_err()
            .contains("SECTOR + COUNT"));
        assert_eq!(parse_device("8,16"), Some(8_388_624));
    }
}
