//! Axis ranges and ticks: round numbers on linear axes, whole numbers for counts, decades (with
//! their 2 and 5 multiples when fewer than three decades show) on log axes, powers of two on a
//! base-2 axis. One gridline per tick and no minor lines: a log axis drawn with plotters' own
//! light lines gets nine of them per decade, a grey band under each decade.
//!
//! Example: a log y axis over 6.7–450 µs has decades 10 and 100 in view (two, fewer than three),
//! so its ticks are 10, 20, 50, 100, 200. A count axis over 0–2.1 threads gets 0, 1, 2 (never
//! 0.2 steps).

use super::Ticks;

/// At most this many tick intervals on a linear axis (400 pixels: a label every 50 or more).
const MAX_LINEAR_STEPS: f64 = 8.0;
/// A log axis showing fewer decades than this also ticks their 2 and 5 multiples.
const FEW_DECADES: usize = 3;
/// A base-2 axis with more powers than this ticks every other one.
const MAX_POW2_TICKS: usize = 10;

/// The range of an axis covering `values` with a margin; log axes stay positive, a linear axis
/// starts at zero or below. A categorical axis spans its categories, half a slot each side.
pub(super) fn bounds(
    values: impl Iterator<Item = f64>,
    log: bool,
    categories: usize,
) -> (f64, f64) {
    if categories > 0 {
        return (-0.5, categories as f64 - 0.5);
    }
    let finite: Vec<f64> = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    if finite.is_empty() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        let span = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
        ((lo - 0.05 * span).min(0.0), hi + 0.1 * span)
    }
}

/// Ticks of a linear axis over `[lo, hi]`: multiples of 1, 2 or 5 times a power of ten (at
/// least 1 for [`Ticks::Integer`]).
pub(super) fn linear_ticks(lo: f64, hi: f64, ticks: Ticks) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    // The finest 1-2-5 step that keeps to MAX_LINEAR_STEPS intervals.
    let span = hi - lo;
    let mag = 10f64.powf(span.log10().floor() - 1.0);
    let mut step = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= MAX_LINEAR_STEPS)
        .unwrap_or(100.0 * mag);
    if ticks == Ticks::Integer {
        step = step.max(1.0).round();
    }
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// Ticks of a base-10 log axis over `[lo, hi]` (both > 0).
pub(super) fn log10_ticks(lo: f64, hi: f64, ticks: Ticks) -> Vec<f64> {
    let decades = |mults: &[f64]| -> Vec<f64> {
        let (k0, k1) = (lo.log10().floor() as i32 - 1, hi.log10().ceil() as i32);
        (k0..=k1)
            .flat_map(|k| mults.iter().map(move |m| m * 10f64.powi(k)))
            .filter(|v| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9))
            .filter(|v| ticks == Ticks::Auto || (v.fract() == 0.0))
            .collect()
    };
    let mut out = decades(&[1.0]);
    if out.len() < FEW_DECADES {
        out = decades(&[1.0, 2.0, 5.0]);
    }
    if out.len() < 2 {
        out = decades(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    }
    out
}

/// Ticks of a base-2 log axis (queue depths) over `[lo, hi]`: powers of two.
pub(super) fn log2_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (k0, k1) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
    let all: Vec<f64> = (k0..=k1).map(|k| 2f64.powi(k)).collect();
    if all.len() > MAX_POW2_TICKS {
        all.into_iter().step_by(2).collect()
    } else {
        all
    }
}

/// Short axis labels: 1, 16, 2.5, 0.05, 12k.
pub(super) fn axis_number(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        return format!("{}k", trim(format!("{:.1}", v / 1000.0)));
    }
    if a >= 100.0 {
        return format!("{v:.0}");
    }
    let decimals = if a >= 1.0 || a == 0.0 { 2 } else { 4 };
    trim(format!("{v:.decimals$}"))
}

/// `2.50` → `2.5`, `3.00` → `3`.
fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_ticks_on_a_short_count_axis_are_whole() {
        assert_eq!(linear_ticks(0.0, 2.1, Ticks::Integer), vec![0.0, 1.0, 2.0]);
        let auto = linear_ticks(0.0, 2.1, Ticks::Auto);
        assert!(auto.iter().any(|t| t.fract() != 0.0), "{auto:?}");
    }

    #[test]
    fn linear_ticks_are_round_and_inside() {
        assert_eq!(
            linear_ticks(-0.05, 1.1, Ticks::Auto),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        let t = linear_ticks(0.0, 5300.0, Ticks::Auto);
        assert_eq!(t, vec![0.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0]);
    }

    #[test]
    fn log_ticks_are_decades_or_their_2_5_multiples() {
        assert_eq!(
            log10_ticks(6.7, 450.0, Ticks::Auto),
            vec![10.0, 20.0, 50.0, 100.0, 200.0]
        );
        assert_eq!(
            log10_ticks(0.5, 20_000.0, Ticks::Auto),
            vec![1.0, 10.0, 100.0, 1000.0, 10_000.0]
        );
        assert_eq!(
            log2_ticks(0.7, 380.0),
            (0..=8).map(|k| 2f64.powi(k)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(axis_number(0.0), "0");
        assert_eq!(axis_number(2.5), "2.5");
        assert_eq!(axis_number(0.05), "0.05");
        assert_eq!(axis_number(16.0), "16");
        assert_eq!(axis_number(12_000.0), "12k");
        assert_eq!(axis_number(12_500.0), "12.5k");
    }
}
