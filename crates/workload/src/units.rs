//! Numbers as fio writes them: sizes with `k`/`m`/`g` suffixes and times with `ms`/`us` suffixes.
//!
//! fio job files are written by people, so their numbers carry units. This module turns the
//! written form into integers (bytes, counts, nanoseconds) with the meaning fio gives them, so a
//! job file means the same thing to ullstack as to fio.
//!
//! ## Sizes and counts (fio's `int` type)
//! A decimal number, or a `0x` hexadecimal number without suffix, then an optional suffix that is
//! not case sensitive. Under fio's default `kb_base=1024` ([`KbBase::Binary1024`]):
//!
//! | written | bytes | why |
//! | --- | --- | --- |
//! | `4096`, `4096b` | 4096 | `b` is bytes, never bits |
//! | `4k`, `4K`, `4kb`, `4KB`, `4ki` | 4096 | SI-looking prefixes are powers of 1024 (old fio scripts) |
//! | `1m`, `1M` | 1 048 576 | |
//! | `10g` | 10 737 418 240 | |
//! | `1T`, `1t` | 1 099 511 627 776 | |
//! | `4KiB`, `4kib` | **4000** | fio's compatibility rule: under `kb_base=1024` the IEC form `XiB` flips to powers of 1000 |
//!
//! `kb_base=1000` ([`KbBase::Decimal1000`]) swaps the two columns: `4k` = 4000, `4KiB` = 4096.
//! The `4KiB` = 4000 row surprises people; we checked it against fio 3.33 (`fio --debug=parse
//! --parse-only`) and follow fio, because a job file must not change meaning between the two
//! tools. Callers that need a block size turn the surprise into a clear error (4000 is not a
//! multiple of 512) with a hint.
//!
//! ## Times (fio's `time` type)
//! A decimal number with an optional suffix, not case sensitive: `d`, `h`, `m` (minutes!), `s` or
//! `sec`, `ms` or `msec`, `us` or `usec`. Without a suffix the option's default unit applies:
//! seconds for `runtime` and `ramp_time`, microseconds for `thinktime`. Example: `runtime=500ms`
//! is 500 000 000 ns; `thinktime=10` is 10 000 ns.
//!
//! ## Where we are stricter than fio 3.33
//! fio's parser stops silently at the first character it does not understand, so `1.5k` becomes 1
//! byte and `4 k` becomes 4 bytes; `10sec` becomes 10 µs and `1000ns` becomes 1000 µs. We reject
//! such values with an error that says what was expected, instead of guessing. Percentages
//! (`size=50%`) and environment variables (`${BS}`) are rejected with their own message.

/// How fio reads the prefixes `k`, `m`, `g`, `t`, `p` (fio option `kb_base`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum KbBase {
    /// `kb_base=1024`, fio's default: `4k` = 4096, and the IEC form `4KiB` = 4000.
    #[default]
    Binary1024,
    /// `kb_base=1000`: `4k` = 4000 and `4KiB` = 4096, as the SI and IEC standards say.
    Decimal1000,
}

impl KbBase {
    /// The multiplier of one prefix step for plain prefixes (`k`, `kb`, `ki`).
    fn plain_step(self) -> u64 {
        match self {
            KbBase::Binary1024 => 1024,
            KbBase::Decimal1000 => 1000,
        }
    }

    /// The multiplier of one prefix step for the IEC form with a trailing `b` (`kib`).
    fn iec_step(self) -> u64 {
        match self {
            KbBase::Binary1024 => 1000,
            KbBase::Decimal1000 => 1024,
        }
    }
}

/// What a size or count must look like, for error messages.
pub(crate) const SIZE_EXPECTED: &str = "a whole number with an optional fio suffix \
     (4096, 4k, 64K, 1m, 10g, 1T, 0x1000; k = 1024 under the default kb_base=1024)";

/// What a time must look like, for error messages; `default_unit` names the unit of a bare number.
pub(crate) fn time_expected(default_unit: TimeUnit) -> String {
    format!(
        "a whole number with an optional time suffix (d, h, m = minutes, s, ms, us); \
         a bare number is in {}",
        default_unit.name()
    )
}

/// The unit of a time value written without a suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimeUnit {
    /// `runtime`, `ramp_time`.
    Seconds,
    /// `thinktime`.
    Microseconds,
}

impl TimeUnit {
    fn ns(self) -> u64 {
        match self {
            TimeUnit::Seconds => NS_PER_SEC,
            TimeUnit::Microseconds => NS_PER_US,
        }
    }

    fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Microseconds => "microseconds",
        }
    }
}

const NS_PER_US: u64 = 1_000;
const NS_PER_MS: u64 = 1_000_000;
const NS_PER_SEC: u64 = 1_000_000_000;

/// Rejections common to sizes and times, with a specific reason.
fn reject_unsupported_forms(text: &str) -> Result<(), String> {
    if text.contains('%') {
        return Err("a byte count; percentages of the device (e.g. 50%) are not supported".into());
    }
    if text.contains('$') {
        return Err(
            "a literal value; environment-variable expansion ($VAR, ${VAR}) is not supported"
                .into(),
        );
    }
    Ok(())
}

/// Splits `text` into its leading decimal digits and the rest.
fn split_digits(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text.split_at(end)
}

/// Parses a size or count as fio does (see the module essay). Errors say what was expected.
pub(crate) fn parse_size(text: &str, kb_base: KbBase) -> Result<u64, String> {
    let text = text.trim();
    reject_unsupported_forms(text)?;
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(SIZE_EXPECTED.into());
        }
        return u64::from_str_radix(hex, 16).map_err(|_| "a number below 2^64".to_string());
    }
    let (digits, suffix) = split_digits(text);
    if digits.is_empty() {
        return Err(SIZE_EXPECTED.into());
    }
    let number: u64 = digits
        .parse()
        .map_err(|_| "a number below 2^64".to_string())?;
    let multiplier = size_multiplier(&suffix.to_ascii_lowercase(), kb_base)?;
    number
        .checked_mul(multiplier)
        .ok_or_else(|| "a number below 2^64 bytes".to_string())
}

/// The multiplier of a lower-cased size suffix.
fn size_multiplier(suffix: &str, kb_base: KbBase) -> Result<u64, String> {
    if suffix.is_empty() || suffix == "b" {
        return Ok(1);
    }
    let mut chars = suffix.chars();
    let exponent = match chars.next() {
        Some('k') => 1,
        Some('m') => 2,
        Some('g') => 3,
        Some('t') => 4,
        Some('p') => 5,
        _ => return Err(SIZE_EXPECTED.into()),
    };
    let step = match chars.as_str() {
        "" | "b" | "i" => kb_base.plain_step(),
        "ib" => kb_base.iec_step(),
        _ => return Err(SIZE_EXPECTED.into()),
    };
    Ok(step.pow(exponent))
}

/// Parses a time as fio does, into nanoseconds; a bare number is in `default_unit`.
pub(crate) fn parse_time_ns(text: &str, default_unit: TimeUnit) -> Result<u64, String> {
    let text = text.trim();
    reject_unsupported_forms(text)?;
    let (digits, suffix) = split_digits(text);
    if digits.is_empty() {
        return Err(time_expected(default_unit));
    }
    let number: u64 = digits.parse().map_err(|_| time_expected(default_unit))?;
    let unit_ns = match suffix.to_ascii_lowercase().as_str() {
        "" => default_unit.ns(),
        "d" => 86_400 * NS_PER_SEC,
        "h" => 3_600 * NS_PER_SEC,
        "m" => 60 * NS_PER_SEC,
        "s" | "sec" => NS_PER_SEC,
        "ms" | "msec" => NS_PER_MS,
        "us" | "usec" => NS_PER_US,
        _ => return Err(time_expected(default_unit)),
    };
    number
        .checked_mul(unit_ns)
        .ok_or_else(|| "a time below 2^64 nanoseconds (about 584 years)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values checked against `fio --debug=parse --parse-only` (fio 3.33).
    #[test]
    fn sizes_match_fio_under_default_kb_base() {
        let cases: &[(&str, u64)] = &[
            ("512", 512),
            ("4096b", 4096),
            ("4k", 4096),
            ("4K", 4096),
            ("4kb", 4096),
            ("4KB", 4096),
            ("4ki", 4096),
            ("4KiB", 4000),
            ("1m", 1 << 20),
            ("1M", 1 << 20),
            ("1MiB", 1_000_000),
            ("10g", 10 << 30),
            ("1T", 1 << 40),
            ("1p", 1 << 50),
            ("0x1000", 4096),
            (" 16k ", 16384),
        ];
        for &(text, bytes) in cases {
            assert_eq!(parse_size(text, KbBase::Binary1024), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn sizes_match_fio_under_kb_base_1000() {
        let cases: &[(&str, u64)] = &[
            ("4k", 4000),
            ("4KiB", 4096),
            ("1MiB", 1 << 20),
            ("1g", 1_000_000_000),
            ("1t", 1_000_000_000_000),
        ];
        for &(text, bytes) in cases {
            assert_eq!(parse_size(text, KbBase::Decimal1000), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn malformed_sizes_are_rejected_not_truncated() {
        for text in [
            "", "k", "1.5k", "4 k", "-4k", "4x", "4kk", "4kibb", "0x", "0xg", "50%", "${BS}",
        ] {
            assert!(
                parse_size(text, KbBase::Binary1024).is_err(),
                "{text:?} accepted"
            );
        }
        assert!(parse_size("50%", KbBase::Binary1024)
            .unwrap_err()
            .contains("percentages"));
        assert!(
            parse_size("20000p", KbBase::Binary1024).is_err(),
            "overflow"
        );
    }

    #[test]
    fn times_use_the_options_default_unit() {
        let s = TimeUnit::Seconds;
        let us = TimeUnit::Microseconds;
        assert_eq!(parse_time_ns("10", s), Ok(10 * NS_PER_SEC));
        assert_eq!(parse_time_ns("10", us), Ok(10 * NS_PER_US));
        assert_eq!(parse_time_ns("500ms", s), Ok(500 * NS_PER_MS));
        assert_eq!(parse_time_ns("500MSEC", s), Ok(500 * NS_PER_MS));
        assert_eq!(parse_time_ns("2m", us), Ok(120 * NS_PER_SEC));
        assert_eq!(parse_time_ns("1h", s), Ok(3600 * NS_PER_SEC));
        assert_eq!(parse_time_ns("1d", s), Ok(86_400 * NS_PER_SEC));
        assert_eq!(parse_time_ns("5usec", s), Ok(5 * NS_PER_US));
        assert_eq!(parse_time_ns("10sec", us), Ok(10 * NS_PER_SEC));
        for bad in ["", "ms", "1.5ms", "10 s", "1000ns", "0x10", "10%"] {
            assert!(parse_time_ns(bad, s).is_err(), "{bad:?} accepted");
        }
    }
}
