//! Field parsers the trace formats share: integers, decimal times converted exactly to integer
//! nanoseconds (no floating point: `0.000000001` s is 1 ns, and a time never drifts by
//! rounding), and the read/write words of each format. Each error is the "expected ..." half of
//! a line error; the reader adds the file and line number.

/// The fields of a comma-separated line, as `line.split(',')` gives them, found by a plain
/// byte scan: for fields this short, the `char` searcher's `memchr` and `memcmp` per field
/// cost more (a tenth of `trace stats` on SPC lines; `cargo bench -p workload --bench
/// trace_stats -- spc/random`, run alternately at load 6: 178–179 MB/s of CPU time with
/// `split(',')`, 203–204 with this). A comma is ASCII, so it is never inside a UTF-8 sequence
/// and every cut is a `char` boundary.
pub(crate) fn commas(line: &str) -> Commas<'_> {
    Commas { rest: Some(line) }
}

/// See [`commas`].
pub(crate) struct Commas<'a> {
    rest: Option<&'a str>,
}

impl<'a> Iterator for Commas<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        match rest.bytes().position(|b| b == b',') {
            Some(i) => {
                self.rest = Some(&rest[i + 1..]);
                Some(&rest[..i])
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// Decimal digits any value of which fits a `u64`.
const U64_SAFE_DIGITS: usize = 19;

/// Parses a non-negative decimal integer field named `what`.
pub(crate) fn uint(text: &str, what: &str) -> Result<u64, String> {
    let text = text.trim();
    // Up to 19 digits cannot overflow (10^19 - 1 < 2^64): no checks per digit. Trace fields
    // are almost all this short, and this is a tenth of `trace stats`' time.
    if (1..=U64_SAFE_DIGITS).contains(&text.len()) {
        let mut v: u64 = 0;
        for b in text.bytes() {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                return Err(format!(
                    "{what} `{}`: expected a non-negative integer",
                    shorten(text)
                ));
            }
            v = v * 10 + u64::from(d);
        }
        return Ok(v);
    }
    // One pass (this is the hottest function of `trace stats`).
    let mut v: u64 = 0;
    let mut overflow = false;
    for b in text.bytes() {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(format!(
                "{what} `{}`: expected a non-negative integer",
                shorten(text)
            ));
        }
        match v.checked_mul(10).and_then(|x| x.checked_add(u64::from(d))) {
            Some(x) => v = x,
            None => overflow = true,
        }
    }
    if text.is_empty() {
        return Err(format!("{what} ``: expected a non-negative integer"));
    }
    if overflow {
        return Err(format!(
            "{what} `{}`: expected an integer below 2^64",
            shorten(text)
        ));
    }
    Ok(v)
}

/// Parses a non-negative decimal integer that must fit a `u32` (device numbers).
pub(crate) fn uint32(text: &str, what: &str) -> Result<u32, String> {
    let v = uint(text, what)?;
    u32::try_from(v).map_err(|_| format!("{what} `{v}`: expected an integer below 2^32"))
}

/// Parses a non-negative decimal number `int[.frac]` in units of `10^unit_digits` ns (9 for
/// seconds, 6 for milliseconds) into integer nanoseconds; digits past 1 ns are dropped.
///
/// `decimal_ns("1.5", 6)` (1.5 ms) is 1 500 000; `decimal_ns("0.000000001", 9)` is 1.
pub(crate) fn decimal_ns(text: &str, unit_digits: u32, what: &str) -> Result<u64, String> {
    let text = text.trim();
    let expected = || {
        format!(
            "{what} `{}`: expected a non-negative decimal number",
            shorten(text)
        )
    };
    let too_big = || format!("{what} `{}`: expected a time below 2^64 ns", shorten(text));
    // One pass over the bytes: digits, then optionally `.` and digits (SPC and DiskSim lines
    // carry one of these each; splitting and re-scanning was a tenth of `trace stats`).
    let bytes = text.as_bytes();
    let digits = |from: usize| {
        bytes[from..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(bytes.len(), |n| from + n)
    };
    let int_end = digits(0);
    let (frac_start, frac_end) = match bytes.get(int_end) {
        None => (int_end, int_end),
        Some(b'.') => (int_end + 1, digits(int_end + 1)),
        Some(_) => return Err(expected()),
    };
    if frac_end != bytes.len() || (int_end == 0 && frac_end == frac_start) {
        return Err(expected());
    }
    let mut whole: u64 = 0;
    for &b in &bytes[..int_end] {
        whole = whole
            .checked_mul(10)
            .and_then(|w| w.checked_add(u64::from(b - b'0')))
            .ok_or_else(too_big)?;
    }
    let unit_ns = 10u64.pow(unit_digits);
    let mut frac_ns = 0u64;
    let mut scale = unit_ns;
    for &b in bytes[frac_start..frac_end]
        .iter()
        .take(unit_digits as usize)
    {
        scale /= 10;
        frac_ns += u64::from(b - b'0') * scale;
    }
    whole
        .checked_mul(unit_ns)
        .and_then(|ns| ns.checked_add(frac_ns))
        .ok_or_else(too_big)
}

/// At most 40 characters of a bad field, so an error line stays readable.
pub(crate) fn shorten(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// `offset + len` must fit in 64 bits; a trace that says otherwise is malformed.
pub(crate) fn end_fits(offset_bytes: u64, len_bytes: u64) -> Result<(), String> {
    match offset_bytes.checked_add(len_bytes) {
        Some(_) => Ok(()),
        None => Err(format!(
            "offset {offset_bytes} + size {len_bytes} bytes: expected an end below 2^64 bytes"
        )),
    }
}

/// A request size in bytes: positive and at most [`super::record::MAX_REQUEST_BYTES`].
pub(crate) fn request_bytes(v: u64, what: &str) -> Result<u64, String> {
    if v == 0 || v > super::record::MAX_REQUEST_BYTES {
        Err(format!(
            "{what} {v} bytes: expected a positive size up to {} bytes",
            super::record::MAX_REQUEST_BYTES
        ))
    } else {
        Ok(v)
    }
}

/// Sectors (512 B) to bytes, refusing overflow.
pub(crate) fn sectors_to_bytes(sectors: u64, what: &str) -> Result<u64, String> {
    sectors
        .checked_mul(super::record::SECTOR_BYTES)
        .ok_or_else(|| {
            format!("{what} {sectors} sectors: expected fewer than 2^55 sectors (2^64 bytes)")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_convert_exactly() {
        assert_eq!(decimal_ns("1.5", 6, "t"), Ok(1_500_000));
        assert_eq!(decimal_ns("0.000000001", 9, "t"), Ok(1));
        assert_eq!(decimal_ns("0.0000000019", 9, "t"), Ok(1));
        assert_eq!(decimal_ns("12", 9, "t"), Ok(12_000_000_000));
        assert_eq!(decimal_ns(".25", 9, "t"), Ok(250_000_000));
        assert_eq!(decimal_ns("3.", 6, "t"), Ok(3_000_000));
        assert!(decimal_ns(".", 9, "t").is_err());
        assert!(decimal_ns("-1.0", 9, "t").is_err());
        assert!(decimal_ns("1e3", 9, "t").is_err());
        assert!(decimal_ns("99999999999999999999", 9, "t").is_err());
    }

    #[test]
    fn integers_name_the_field() {
        assert_eq!(uint(" 42 ", "size"), Ok(42));
        let e = uint("4k", "size").unwrap_err();
        assert!(
            e.contains("size `4k`") && e.contains("non-negative integer"),
            "{e}"
        );
        assert!(uint32("4294967296", "device").is_err());
        assert_eq!(
            uint("9999999999999999999", "t"),
            Ok(9_999_999_999_999_999_999)
        );
        assert_eq!(uint("18446744073709551615", "t"), Ok(u64::MAX));
        assert!(uint("18446744073709551616", "t").is_err());
        assert!(uint("", "t").is_err());
    }

    proptest::proptest! {
        /// `commas` cuts exactly where `str::split(',')` does.
        #[test]
        fn commas_split_as_the_standard_library_does(line in "[a,é0-9 ]{0,24}") {
            proptest::prop_assert_eq!(commas(&line).collect::<Vec<_>>(), line.split(',').collect::<Vec<_>>());
        }

        /// Whole and fractional digits give exactly whole × 10^u + the first u fractional
        /// digits, in ns (checked in 128 bits).
        #[test]
        fn decimals_match_exact_arithmetic(int in "[0-9]{0,12}", frac in "[0-9]{0,12}", dot in proptest::bool::ANY, unit in 0u32..10) {
            let text = if dot { format!("{int}.{frac}") } else { int.clone() };
            let got = decimal_ns(&text, unit, "t");
            let frac = if dot { frac } else { String::new() };
            if int.is_empty() && frac.is_empty() {
                proptest::prop_assert!(got.is_err());
            } else {
                let whole: u128 = if int.is_empty() { 0 } else { int.parse().unwrap() };
                let kept: String = frac.chars().chain(std::iter::repeat('0')).take(unit as usize).collect();
                let part: u128 = if kept.is_empty() { 0 } else { kept.parse().unwrap() };
                let want = whole * 10u128.pow(unit) + part;
                match u64::try_from(want) {
                    Ok(w) => proptest::prop_assert_eq!(got, Ok(w)),
                    Err(_) => proptest::prop_assert!(got.is_err()),
                }
            }
        }

        /// The short-field fast path and the checked one agree with the standard parser.
        #[test]
        fn uint_agrees_with_the_standard_parser(text in "[0-9]{1,24}|[0-9]{0,5}[^0-9][0-9]{0,5}") {
            let ours = uint(&text, "t");
            match text.trim().parse::<u64>() {
                Ok(v) if !text.trim().starts_with('+') => proptest::prop_assert_eq!(ours, Ok(v)),
                _ => proptest::prop_assert!(ours.is_err(), "{text:?} gave {ours:?}"),
            }
        }
    }
}
