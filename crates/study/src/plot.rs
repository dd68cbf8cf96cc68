//! Figures: a study's results as grouped bars or lines, written as CSV, SVG and PNG.
//!
//! A [`Figure`] is data, not drawing: named series of `(x, y)` points, axis labels, and how each
//! axis reads. The x axis is one of two kinds, and the kind decides how a series is drawn:
//!
//! - **categorical** (`x_categories` non-empty: co-runners, stacks, tenants, layers, read/write):
//!   x = 0, 1, 2, … names a category, and every series is a bar in each category's group, side
//!   by side in series order (a [`Stroke::Solid`] series filled, a [`Stroke::Dashed`] one
//!   outlined), so nothing suggests an order or a trend between categories. A series drawn
//!   [`Stroke::Stacked`] is one part of a single stacked bar per category (a breakdown).
//! - **ordered** (queue depth, write share, time, threads): lines through markers, solid or
//!   dashed, on a linear or logarithmic axis (`x_log`: base 2, queue depths are powers of two).
//!
//! On top of the data a figure may carry [`Reference`] lines (an SLO on a p95/p99 plot, `1.0 =
//! vanilla` on a normalised one), error bars ([`Series::intervals`], e.g. 95 % bootstrap
//! intervals) and integer ticks ([`Ticks::Integer`], for counts such as threads or tenants).
//! Series that coincide (the same y at every x, within [`COINCIDE_REL`]) would hide each other
//! on a line plot: [`Figure::full_caption`] says so.
//!
//! # Worked example
//! `reflex`'s `scenario1_p95`: tenants A–D on a categorical x axis, p95 read latency on a log y
//! axis from 60 to 3,000 µs, two series (scheduler off dashed, on solid), and a reference at
//! 500 µs labelled `SLO (A, B): 500 µs`. It is drawn as four groups of two bars (on filled,
//! off outlined), y ticks at 100 and 1,000 with 200, 500 and 2,000 between (under two decades
//! in view, so the 2 and 5 multiples too), one grey gridline per tick and no minor lines, and a
//! dashed line across the plot at 500 with its label above the right end.
//!
//! # Files
//! The same figure is written three ways: `<stem>.csv` (`series,x,y` rows, the numbers behind
//! the plot, and `low,high` columns when a series has intervals; a stacked series' rows are its
//! own parts, not the running total), `<stem>.svg` (plotters' SVG backend) and `<stem>.png`,
//! rasterized from that SVG by resvg so the PNG shows the very text and layout of the SVG.
//! Figures are [`PLOT_SIZE_PX`] unless a categorical one needs more width for its bars
//! ([`Figure::size_px`]). Text is laid out and rasterized with DejaVu Sans, embedded in the
//! binary (`assets/DejaVuSans.ttf`, Bitstream Vera licence with DejaVu's public-domain changes:
//! free to redistribute and embed; the licence text is `assets/DejaVuSans-LICENSE.txt`), so a
//! PNG is the same on every machine; the SVG names the generic `sans-serif`, which a browser
//! resolves to its own (DejaVu Sans on Debian).
//!
//! What it leaves out: log-scaled bars start at the axis floor (their length is not a ratio to
//! zero; use a linear axis when the length matters), and a figure has one y axis.

mod axis;
mod draw;
mod files;
mod raster;

use std::fmt::Write as _;

/// Width and height of a plot, in pixels; a categorical figure with many bars is wider.
pub const PLOT_SIZE_PX: (u32, u32) = (800, 500);

/// Two series coincide when their y values differ by at most this share of the larger at every
/// x (0.5 %: well under a marker's height on a 400-pixel axis).
pub const COINCIDE_REL: f64 = 0.005;

/// How a series is drawn. On a categorical x axis `Solid` is a filled bar and `Dashed` an
/// outlined one; on an ordered axis they are lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stroke {
    #[default]
    Solid,
    Dashed,
    /// A part of the one stacked bar per category, on top of the stacked series before it.
    Stacked,
}

/// Where an axis puts its ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ticks {
    /// Round numbers (1, 2 or 5 times a power of ten; decades on a log axis).
    #[default]
    Auto,
    /// Whole numbers only: the axis counts things (threads, tenants, pages).
    Integer,
}

/// A horizontal line across the plot at `y`, with its label above the right end: an SLO on a
/// latency plot, or `1.0 = vanilla` on a normalised one. The y axis always reaches it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub y: f64,
    pub label: String,
}

impl Reference {
    /// A latency target: `label` names whose it is and its value, e.g. `SLO (A, B): 500 µs`.
    pub fn slo(y: f64, label: impl Into<String>) -> Self {
        Reference {
            y,
            label: label.into(),
        }
    }

    /// The 1.0 line of a plot normalised to `baseline` (labelled `1.0 = <baseline>`).
    pub fn baseline(baseline: &str) -> Self {
        Reference {
            y: 1.0,
            label: format!("1.0 = {baseline}"),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub stroke: Stroke,
    /// Index into the palette (series of one device share a colour).
    pub colour: usize,
    /// Error bars: `Some` holds one `(low, high)` per point, in the order of `points` (e.g. the
    /// 95 % bootstrap interval of the ratio the point is the median of). Drawn as a whisker
    /// with caps through the bar or marker; written to the CSV as `low,high`. A pair with a
    /// NaN draws no whisker for that point. Set it with [`Series::with_intervals`].
    pub intervals: Option<Vec<(f64, f64)>>,
}

impl Series {
    /// Attaches error bars, one `(low, high)` per point.
    ///
    /// # Panics
    /// When the counts differ: an interval belongs to one point.
    pub fn with_intervals(mut self, intervals: Vec<(f64, f64)>) -> Self {
        assert_eq!(
            intervals.len(),
            self.points.len(),
            "{}: one interval per point",
            self.name
        );
        self.intervals = Some(intervals);
        self
    }

    /// The interval of point `i`, if it has one to draw.
    fn interval(&self, i: usize) -> Option<(f64, f64)> {
        let (lo, hi) = *self.intervals.as_ref()?.get(i)?;
        (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figure {
    /// File name without extension.
    pub stem: String,
    pub title: String,
    /// What was run, for the report ([`Figure::full_caption`] adds the remarks).
    pub caption: String,
    pub x_label: String,
    pub y_label: String,
    /// Base-2 logarithmic x axis (ordered axes only).
    pub x_log: bool,
    pub y_log: bool,
    /// Names of x = 0, 1, 2, …: non-empty makes the x axis categorical (bars).
    pub x_categories: Vec<String>,
    pub x_ticks: Ticks,
    pub y_ticks: Ticks,
    /// Horizontal reference lines (SLOs, baselines).
    pub references: Vec<Reference>,
    pub series: Vec<Series>,
}

const PALETTE: [(u8, u8, u8); 12] = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    // Beyond six: for breakdowns with a part per colour.
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
    (174, 199, 232),
    (255, 187, 120),
];

impl Figure {
    /// Whether the x axis names categories (bars) rather than an ordered quantity (lines).
    pub fn is_categorical(&self) -> bool {
        !self.x_categories.is_empty()
    }

    /// The numbers behind the plot: `series,<x label>,<y label>` rows, and `low,high` when any
    /// series has intervals (empty cells for a point without one).
    pub fn csv(&self) -> String {
        let with_intervals = self.series.iter().any(|s| s.intervals.is_some());
        let mut out = format!(
            "series,{},{}{}\n",
            csv_field(&self.x_label),
            csv_field(&self.y_label),
            if with_intervals { ",low,high" } else { "" }
        );
        for s in &self.series {
            for (i, (x, y)) in s.points.iter().enumerate() {
                let x = match self.x_categories.get(*x as usize) {
                    Some(name) if self.is_categorical() => name.clone(),
                    _ => format!("{x}"),
                };
                write!(out, "{},{},{}", csv_field(&s.name), csv_field(&x), y).expect("string");
                if with_intervals {
                    match s.intervals.as_ref().and_then(|iv| iv.get(i)) {
                        Some((lo, hi)) => write!(out, ",{lo},{hi}").expect("string"),
                        None => out.push_str(",,"),
                    }
                }
                out.push('\n');
            }
        }
        out
    }

    /// The caption with what the plot cannot show: which series coincide.
    pub fn full_caption(&self) -> String {
        let remarks = self.remarks();
        if remarks.is_empty() {
            self.caption.clone()
        } else if self.caption.is_empty() {
            remarks
        } else {
            format!("{} {remarks}", self.caption.trim_end())
        }
    }

    /// One sentence per group of coincident series, empty when none coincide.
    pub fn remarks(&self) -> String {
        let (verb, tail) = if self.is_categorical() {
            ("are equal", "")
        } else {
            ("coincide", ": the last drawn hides the others")
        };
        self.coincident()
            .iter()
            .map(|group| {
                let names: Vec<&str> = group
                    .iter()
                    .map(|&i| self.series[i].name.as_str())
                    .collect();
                format!(
                    "{} {verb} (within {} % at every point){tail}.",
                    join_names(&names),
                    COINCIDE_REL * 100.0
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Groups (two or more, in series order) of series that coincide: the same x values and y
    /// values within [`COINCIDE_REL`]. Stacked parts are never compared (they sit on each other).
    pub fn coincident(&self) -> Vec<Vec<usize>> {
        let mut grouped = vec![false; self.series.len()];
        let mut groups = Vec::new();
        for i in 0..self.series.len() {
            if grouped[i] || !comparable(&self.series[i]) {
                continue;
            }
            let group: Vec<usize> = std::iter::once(i)
                .chain(
                    (i + 1..self.series.len())
                        .filter(|&j| !grouped[j] && coincide(&self.series[i], &self.series[j])),
                )
                .collect();
            if group.len() > 1 {
                for &j in &group {
                    grouped[j] = true;
                }
                groups.push(group);
            }
        }
        groups
    }
}

fn comparable(s: &Series) -> bool {
    s.stroke != Stroke::Stacked && !s.points.is_empty()
}

fn coincide(a: &Series, b: &Series) -> bool {
    comparable(b)
        && a.points.len() == b.points.len()
        && a.points.iter().zip(&b.points).all(|(p, q)| {
            let close = |u: f64, v: f64| (u - v).abs() <= COINCIDE_REL * u.abs().max(v.abs());
            p.0 == q.0 && close(p.1, q.1)
        })
}

/// `a`, `a and b`, `a, b and c`.
fn join_names(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests;
