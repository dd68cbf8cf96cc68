//! Format detection from a trace's first lines (see the module essay in `mod.rs`).
//!
//! Given the bytes at the start of a file, take up to [`DETECT_LINES`] complete lines that are
//! not blank or comments. A format is a candidate when its parser accepts the first of them as
//! an event and at least one as a read or write; the candidate accepting the most lines wins,
//! ties going to the earlier in [`TraceFormat::ALL`] (so one malformed line early in a trace is
//! reported by the reader, with its line number, instead of defeating detection). Worked example:
//! `0,303567,3584,w,0.000000` fails blkparse (no `MAJ,MIN` device) and msr (5 fields, not 7)
//! and passes spc; `4851300 1 524288 16 0` fails every comma format and passes mqsim.

use super::format::TraceFormat;
use super::record::{Line, DETECT_LINES};

/// The format of a trace starting with `head`, or why none fits.
pub(crate) fn detect(head: &[u8]) -> Result<TraceFormat, String> {
    // Complete lines only, unless the whole head has no end of line (a one-line file).
    let complete = match head.iter().rposition(|&b| b == b'\n') {
        Some(i) => &head[..i],
        None => head,
    };
    let text = String::from_utf8_lossy(complete);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .take(DETECT_LINES)
        .collect();
    let Some(first) = lines.first() else {
        return Err("it has no lines that are not blank or # comments".into());
    };
    let mut best: Option<(usize, TraceFormat)> = None;
    for format in TraceFormat::ALL {
        let mut any_io = false;
        let mut accepted = 0;
        for (i, l) in lines.iter().enumerate() {
            match format.parse_line(l) {
                Ok(Line::Io(_)) => {
                    any_io = true;
                    accepted += 1;
                }
                Ok(Line::Event) => accepted += 1,
                Ok(Line::Other) | Err(_) if i == 0 => break,
                Ok(Line::Other) | Err(_) => {}
            }
        }
        if any_io && best.is_none_or(|(n, _)| accepted > n) {
            best = Some((accepted, format));
        }
    }
    if let Some((_, format)) = best {
        return Ok(format);
    }
    let why: Vec<String> = TraceFormat::ALL
        .iter()
        .map(|f| match f.parse_line(first) {
            Err(e) => format!("{f}: {e}"),
            Ok(Line::Other) => format!("{f}: not an event line"),
            Ok(_) => format!("{f}: no read or write among the first lines"),
        })
        .collect();
    Err(format!(
        "First line `{}`: {}",
        super::fields::shorten(first),
        why.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_is_told_from_its_first_lines() {
        let cases = [
            ("  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]\n  8,0    3        2     0.000000100   697  G   W 223490 + 8 [kjournald]\n", TraceFormat::Blkparse),
            ("128166372003061629,hm,1,Read,3221225472,4096,1111\n", TraceFormat::Msr),
            ("0,303567,3584,w,0.000000\n1,1,512,R,0.01\n", TraceFormat::Spc),
            ("# header\n0,R,0,4096\n1000,write,4096,4096\n", TraceFormat::Csv),
            ("4851300 1 524288 16 0\n4864300 1 524304 16 0\n", TraceFormat::Mqsim),
            ("4.8513 1 524288 16 1\n", TraceFormat::Disksim),
            ("0 0 0 8 1\n0.5 0 8 8 0\n", TraceFormat::Disksim),
        ];
        for (text, want) in cases {
            assert_eq!(detect(text.as_bytes()), Ok(want), "{text}");
        }
    }

    #[test]
    fn unknown_text_says_what_each_format_expected() {
        let e = detect(b"hello world\n").unwrap_err();
        assert!(e.contains("First line `hello world`"), "{e}");
        assert!(e.contains("msr: found 1 fields"), "{e}");
        assert!(detect(b"\n# only a comment\n").is_err());
    }
}
