//! ullstack's own CSV: `time_ns,op,offset_bytes,bytes`, `op` one of `R`/`W`/`read`/`write`
//! (any case), times in nanoseconds from the trace's start. This is the format system configs
//! read before the other readers existed; `0,R,8192,4096` reads 4 KiB at byte 8192 at once.

use super::fields::{commas, end_fits, request_bytes, uint};
use super::record::{Line, TraceOp, TraceRecord};

pub(crate) const EXPECTED: &str = "4 comma-separated fields `time_ns,op,offset_bytes,bytes`";

pub(crate) fn parse(line: &str) -> Result<Line, String> {
    let mut it = commas(line);
    let (Some(t), Some(op), Some(off), Some(len), None) =
        (it.next(), it.next(), it.next(), it.next(), it.next())
    else {
        return Err(format!(
            "found {} fields: expected {EXPECTED}",
            commas(line).count()
        ));
    };
    let op = match op.trim() {
        o if o.eq_ignore_ascii_case("r") || o.eq_ignore_ascii_case("read") => TraceOp::Read,
        o if o.eq_ignore_ascii_case("w") || o.eq_ignore_ascii_case("write") => TraceOp::Write,
        o => {
            return Err(format!(
                "op `{}`: expected R, W, read or write",
                super::fields::shorten(o)
            ))
        }
    };
    let offset_bytes = uint(off, "offset_bytes")?;
    let len_bytes = request_bytes(uint(len, "bytes")?, "bytes")?;
    end_fits(offset_bytes, len_bytes)?;
    Ok(Line::Io(TraceRecord {
        time_ns: uint(t, "time_ns")?,
        device: 0,
        op,
        offset_bytes,
        len_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_lines() {
        let Ok(Line::Io(r)) = parse("1000, w ,8192,8192") else {
            panic!("parses")
        };
        assert_eq!(
            (r.time_ns, r.op, r.offset_bytes),
            (1000, TraceOp::Write, 8192)
        );
        assert!(parse("0,X,0,4096").unwrap_err().contains("op `X`"));
        assert!(parse("0,R,0").unwrap_err().contains("found 3 fields"));
    }
}
