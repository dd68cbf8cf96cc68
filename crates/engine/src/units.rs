//! Sizes, durations and counts as people write them in config files, tenant specs, scenario
//! files and command lines: one grammar and one set of error messages for the whole tree.
//!
//! fio job files are the exception: they mean what fio says they mean (`workload`'s `units`
//! module follows fio's `kb_base` rules), so that a job file runs the same in both tools.
//!
//! ## Sizes ([`bytes`])
//! A whole number, optionally followed (with or without a space) by a unit. Units are not case
//! sensitive. A bare number is bytes.
//!
//! | unit | multiplier | as in |
//! | --- | --- | --- |
//! | (none), `B` | 1 | |
//! | `KiB`, `MiB`, `GiB`, `TiB` | 1024, 1024², 1024³, 1024⁴ | IEC 80000-13 |
//! | `KB`, `MB`, `GB`, `TB` | 1000, 1000², 1000³, 1000⁴ | SI |
//! | `k`, `M`, `G`, `T` | 1024, 1024², 1024³, 1024⁴ | dd, fio's default, block sizes (`4k`) |
//!
//! Worked example: `4k` = `4KiB` = 4096, `4KB` = 4000, `1GiB` = 1,073,741,824, `1 GB` =
//! 1,000,000,000. `1.5G` is refused (whole numbers only: write `1536M`).
//!
//! ## Durations ([`duration_ns`])
//! A decimal number, optionally followed by a unit: `ns`, `us` (or `µs`), `ms`, `s`, `m` or
//! `min` (minutes), `h`. A bare number is seconds. The value must be a whole number of
//! nanoseconds. Worked example: `500us` = 500,000 ns, `1.5ms` = 1,500,000 ns, `2m` =
//! 120,000,000,000 ns, `10` = 10 s; `0.5ns` is refused.
//!
//! ## Counts and rates ([`count`])
//! A whole number (`_` may group digits), optionally followed by `k` (thousand), `m` (million)
//! or `g` (billion): decimal, because a count of I/Os is not a size. Worked example: `120k` =
//! 120,000 IOPS, `1_000_000` = `1m`.

use std::fmt;

/// A value that does not follow the grammar of its kind; its message names the value and
/// what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError {
    kind: Kind,
    text: String,
    reason: Reason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Size,
    Duration,
    Count,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// Not a number followed by a known unit.
    Form,
    /// Beyond 2^64 of the base unit.
    Overflow,
    /// A duration finer than a nanosecond.
    SubNanosecond,
}

/// What a size must look like.
pub const SIZE_EXPECTED: &str = "a whole number of bytes with an optional unit: B, \
     KiB/MiB/GiB/TiB (powers of 1024), KB/MB/GB/TB (powers of 1000), k/M/G/T (powers of 1024)";
/// What a duration must look like.
pub const DURATION_EXPECTED: &str =
    "a number with an optional unit: ns, us, ms, s, m (minutes), h; a bare number is seconds";
/// What a count must look like.
pub const COUNT_EXPECTED: &str =
    "a whole number with an optional k (thousand), m (million) or g (billion)";

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, expected) = match self.kind {
            Kind::Size => ("size", SIZE_EXPECTED),
            Kind::Duration => ("duration", DURATION_EXPECTED),
            Kind::Count => ("count", COUNT_EXPECTED),
        };
        match self.reason {
            Reason::Form => write!(f, "{what} `{}`: expected {expected}", self.text),
            Reason::Overflow => write!(f, "{what} `{}` does not fit in 64 bits", self.text),
            Reason::SubNanosecond => write!(
                f,
                "{what} `{}` is finer than a nanosecond, the simulator's unit of time",
                self.text
            ),
        }
    }
}

impl std::error::Error for UnitError {}

impl UnitError {
    fn new(kind: Kind, text: &str, reason: Reason) -> UnitError {
        UnitError {
            kind,
            text: text.to_owned(),
            reason,
        }
    }
}

/// Splits `text` into its leading run of characters accepted by `number` and the unit after
/// it, trimmed.
fn split(text: &str, number: impl Fn(char) -> bool) -> (&str, String) {
    let end = text.find(|c: char| !number(c)).unwrap_or(text.len());
    let (n, unit) = text.split_at(end);
    (n, unit.trim().to_lowercase())
}

/// Parses a size into bytes (see "Sizes" above).
pub fn bytes(text: &str) -> Result<u64, UnitError> {
    let t = text.trim();
    let fail = |reason| UnitError::new(Kind::Size, t, reason);
    let (digits, unit) = split(t, |c| c.is_ascii_digit());
    if digits.is_empty() {
        return Err(fail(Reason::Form));
    }
    let n: u64 = digits.parse().map_err(|_| fail(Reason::Overflow))?;
    let binary = |e: u32| 1024u64.pow(e);
    let decimal = |e: u32| 1000u64.pow(e);
    let multiplier = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kib" => binary(1),
        "m" | "mib" => binary(2),
        "g" | "gib" => binary(3),
        "t" | "tib" => binary(4),
        "kb" => decimal(1),
        "mb" => decimal(2),
        "gb" => decimal(3),
        "tb" => decimal(4),
        _ => return Err(fail(Reason::Form)),
    };
    n.checked_mul(multiplier)
        .ok_or_else(|| fail(Reason::Overflow))
}

/// Parses a duration into nanoseconds (see "Durations" above).
pub fn duration_ns(text: &str) -> Result<u64, UnitError> {
    let t = text.trim();
    let fail = |reason| UnitError::new(Kind::Duration, t, reason);
    let (number, unit) = split(t, |c| c.is_ascii_digit() || c == '.');
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !all_digits(whole) || !all_digits(fraction) {
        return Err(fail(Reason::Form));
    }
    let unit_ns: u64 = match unit.as_str() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(fail(Reason::Form)),
    };
    let whole_ns = if whole.is_empty() {
        0
    } else {
        whole
            .parse::<u64>()
            .ok()
            .and_then(|w| w.checked_mul(unit_ns))
            .ok_or_else(|| fail(Reason::Overflow))?
    };
    // The fraction in ns is fraction × unit_ns / 10^len: exact, or refused.
    let fraction = fraction.trim_end_matches('0');
    let scale = u32::try_from(fraction.len())
        .ok()
        .and_then(|len| 10u128.checked_pow(len))
        .ok_or_else(|| fail(Reason::SubNanosecond))?;
    let numerator = if fraction.is_empty() {
        0
    } else {
        fraction
            .parse::<u128>()
            .map_err(|_| fail(Reason::SubNanosecond))?
            * u128::from(unit_ns)
    };
    if numerator % scale != 0 {
        return Err(fail(Reason::SubNanosecond));
    }
    let fraction_ns = u64::try_from(numerator / scale).map_err(|_| fail(Reason::Overflow))?;
    whole_ns
        .checked_add(fraction_ns)
        .ok_or_else(|| fail(Reason::Overflow))
}

/// Parses a count or rate (see "Counts and rates" above).
pub fn count(text: &str) -> Result<u64, UnitError> {
    let t = text.trim();
    let fail = |reason| UnitError::new(Kind::Count, t, reason);
    let (digits, unit) = split(t, |c| c.is_ascii_digit() || c == '_');
    let digits = digits.replace('_', "");
    if digits.is_empty() {
        return Err(fail(Reason::Form));
    }
    let n: u64 = digits.parse().map_err(|_| fail(Reason::Overflow))?;
    let multiplier: u64 = match unit.as_str() {
        "" => 1,
        "k" => 1_000,
        "m" => 1_000_000,
        "g" => 1_000_000_000,
        _ => return Err(fail(Reason::Form)),
    };
    n.checked_mul(multiplier)
        .ok_or_else(|| fail(Reason::Overflow))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_si_for_kb_and_iec_for_kib() {
        for (text, want) in [
            ("4096", 4096),
            ("4096B", 4096),
            ("4k", 4096),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4kib", 4096),
            ("4KB", 4000),
            ("4kb", 4000),
            ("1 GiB", 1 << 30),
            ("1GB", 1_000_000_000),
            ("2M", 2 << 20),
            ("2MB", 2_000_000),
            ("1T", 1 << 40),
            ("1TB", 1_000_000_000_000),
        ] {
            assert_eq!(bytes(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_sizes_name_the_value_and_what_was_expected() {
        let e = bytes("1.5G").unwrap_err().to_string();
        assert!(
            e.starts_with("size `1.5G`: expected a whole number of bytes"),
            "{e}"
        );
        assert!(bytes("4q").unwrap_err().to_string().contains("`4q`"));
        assert!(bytes("").is_err());
        assert!(bytes("KiB").is_err());
        let e = bytes("20000000TiB").unwrap_err().to_string();
        assert_eq!(e, "size `20000000TiB` does not fit in 64 bits");
    }

    #[test]
    fn durations_take_a_unit_and_bare_numbers_are_seconds() {
        for (text, want) in [
            ("500us", 500_000),
            ("500µs", 500_000),
            ("1.5ms", 1_500_000),
            ("2m", 120_000_000_000),
            ("1min", 60_000_000_000),
            ("1h", 3_600_000_000_000),
            ("10", 10_000_000_000),
            ("0", 0),
            ("12ns", 12),
            (".5s", 500_000_000),
            ("0.250 s", 250_000_000),
            ("1.000ns", 1),
        ] {
            assert_eq!(duration_ns(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_durations_say_why() {
        assert!(duration_ns("0.5ns")
            .unwrap_err()
            .to_string()
            .contains("finer than a nanosecond"));
        assert!(duration_ns("1.2.3s").is_err());
        assert!(duration_ns("5 parsecs")
            .unwrap_err()
            .to_string()
            .starts_with("duration `5 parsecs`: expected a number"));
        assert!(duration_ns(".").is_err());
        assert!(duration_ns("99999999999h")
            .unwrap_err()
            .to_string()
            .contains("64 bits"));
    }

    #[test]
    fn counts_are_decimal() {
        assert_eq!(count("120k"), Ok(120_000));
        assert_eq!(count("1_000_000"), Ok(1_000_000));
        assert_eq!(count("1m"), Ok(1_000_000));
        assert_eq!(count("7"), Ok(7));
        assert!(count("1.5k").is_err());
        assert!(count("-1").is_err());
    }
}
