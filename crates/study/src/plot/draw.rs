//! Drawing a [`Figure`] with plotters' SVG backend: the title across the top, the plot, and the
//! legend in its own strip at the right so it never hides data.
//!
//! No two pieces of text may overlap (the CLI's browser test measures every text box), so text
//! is fitted, not just placed: the title shrinks and then wraps to the figure's width; category
//! names wrap at spaces, hyphens and slashes to their slot's width, at 14, 12 or 10 px, and turn
//! vertical when a name still does not fit (the x label area grows to hold them); legend names
//! wrap to the strip. Text widths come from plotters' layout with the embedded DejaVu Sans, the
//! font the PNG is rasterized with.

use std::sync::Once;

use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::{axis_number, bounds, linear_ticks, log10_ticks, log2_ticks};
use super::{Figure, Stroke, PALETTE, PLOT_SIZE_PX};

/// Width of the legend strip at the right of every plot, in pixels.
const LEGEND_WIDTH_PX: u32 = 180;
/// Space around the chart inside its area, in pixels.
const MARGIN_PX: u32 = 12;
/// Width of the y label area (tick labels and the rotated description), in pixels.
const Y_LABEL_AREA_PX: u32 = 72;
/// Height of the x axis description line (with its gap), in pixels.
const X_DESC_PX: u32 = 26;
/// Space between the x axis and its tick labels, in pixels.
const TICK_GAP_PX: u32 = 8;
/// Share of a category's slot its group of bars fills (the rest separates groups).
const GROUP_SHARE: f64 = 0.8;
/// The thinnest bar drawn before the figure grows wider instead, in pixels.
const MIN_BAR_PX: u32 = 7;
/// The widest a figure grows to fit its bars, in pixels.
const MAX_WIDTH_PX: u32 = 1600;
/// Category label sizes tried, largest first, before labels turn vertical.
const CATEGORY_FONT_SIZES: [u32; 3] = [14, 12, 10];
/// A category name wraps onto at most this many lines.
const MAX_LABEL_LINES: usize = 3;
/// Title sizes tried, largest first, before the title wraps.
const TITLE_FONT_SIZES: [u32; 4] = [20, 18, 16, 14];
const LEGEND_FONT_SIZE: u32 = 13;
const TICK_FONT_SIZE: u32 = 14;
const REFERENCE_FONT_SIZE: u32 = 12;
/// Gridlines: one per tick, light grey.
const GRID: RGBColor = RGBColor(210, 210, 210);
/// Reference lines and their labels, and error bars on bars.
const INK: RGBColor = RGBColor(60, 60, 60);

pub(super) static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
static REGISTER_FONT: Once = Once::new();

fn register_font() {
    REGISTER_FONT.call_once(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font parses"));
    });
}

fn colour(i: usize) -> RGBColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b)
}

fn font(size: u32) -> TextStyle<'static> {
    ("sans-serif", size).into_font().color(&BLACK)
}

pub(super) fn size_px(fig: &Figure) -> (u32, u32) {
    let (w, h) = PLOT_SIZE_PX;
    if !fig.is_categorical() {
        return (w, h);
    }
    let slots = bar_slots(fig).max(1) as f64;
    let group = slots * f64::from(MIN_BAR_PX) / GROUP_SHARE;
    let plot = (fig.x_categories.len() as f64 * group).ceil() as u32;
    let need = plot + LEGEND_WIDTH_PX + Y_LABEL_AREA_PX + 2 * MARGIN_PX;
    (w.max(need.min(MAX_WIDTH_PX)), h)
}

pub(super) fn svg(fig: &Figure) -> Result<String, String> {
    register_font();
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, size_px(fig)).into_drawing_area();
        draw(fig, &root).map_err(|e| format!("{}: {e}", fig.stem))?;
        root.present().map_err(|e| format!("{}: {e:?}", fig.stem))?;
    }
    Ok(text)
}

/// Text width and height in pixels, as laid out with the registered font.
fn measure<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, text: &str, size: u32) -> (u32, u32) {
    area.estimate_text_size(text, &font(size))
        .unwrap_or((text.chars().count() as u32 * size * 6 / 10, size))
}

/// Breaks `text` into lines no wider than `max_px`: after a hyphen, slash or underscore, or at a
/// space. A single piece wider than `max_px` keeps a line of its own (the caller checks).
fn wrap(text: &str, max_px: u32, width: &dyn Fn(&str) -> u32) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c == ' ' {
            if !cur.is_empty() {
                pieces.push(std::mem::take(&mut cur));
            }
            continue;
        }
        cur.push(c);
        if matches!(c, '-' | '/' | '_') {
            pieces.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        pieces.push(cur);
    }
    let mut lines: Vec<String> = Vec::new();
    for piece in pieces {
        match lines.last_mut() {
            Some(line) => {
                let sep = if line.ends_with(['-', '/', '_']) {
                    ""
                } else {
                    " "
                };
                let joined = format!("{line}{sep}{piece}");
                if width(&joined) <= max_px {
                    *line = joined;
                } else {
                    lines.push(piece);
                }
            }
            None => lines.push(piece),
        }
    }
    lines
}

/// How the category names fit under the x axis.
struct CategoryLabels {
    size: u32,
    /// Vertical text (reading upwards) when even wrapped names do not fit their slots.
    vertical: bool,
    lines: Vec<Vec<String>>,
    line_px: u32,
    /// Height of the x label area: tick gap, the labels, the axis description.
    area_px: u32,
}

impl CategoryLabels {
    fn fit<DB: DrawingBackend>(
        area: &DrawingArea<DB, Shift>,
        cats: &[String],
        slot_px: u32,
    ) -> Self {
        let room = slot_px.saturating_sub(6).max(1);
        for size in CATEGORY_FONT_SIZES {
            let width = |s: &str| measure(area, s, size).0;
            let lines: Vec<Vec<String>> = cats.iter().map(|c| wrap(c, room, &width)).collect();
            let fits = lines
                .iter()
                .all(|l| l.len() <= MAX_LABEL_LINES && l.iter().all(|s| width(s) <= room));
            if fits {
                let line_px = measure(area, "Ag", size).1 + 3;
                let most = lines.iter().map(Vec::len).max().unwrap_or(1) as u32;
                return CategoryLabels {
                    size,
                    vertical: false,
                    lines,
                    line_px,
                    area_px: TICK_GAP_PX + most * line_px + X_DESC_PX,
                };
            }
        }
        let size = *CATEGORY_FONT_SIZES.last().expect("sizes");
        let longest = cats
            .iter()
            .map(|c| measure(area, c, size).0)
            .max()
            .unwrap_or(0);
        CategoryLabels {
            size,
            vertical: true,
            lines: cats.iter().map(|c| vec![c.clone()]).collect(),
            line_px: 0,
            area_px: TICK_GAP_PX + longest + 4 + X_DESC_PX,
        }
    }
}

fn draw<DB: DrawingBackend>(fig: &Figure, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let title_px = title(fig, root).map_err(err)?;
    let (_, body) = root.split_vertically(title_px);
    let (width, _) = body.dim_in_pixel();
    let (plot_area, legend_area) = body.split_horizontally(width - LEGEND_WIDTH_PX);
    legend(fig, &legend_area).map_err(err)?;

    let cats = fig.x_categories.len();
    let (x0, x1) = bounds(
        fig.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        fig.x_log,
        cats,
    );
    let (y0, y1) = bounds(y_values(fig).into_iter(), fig.y_log, 0);
    let labels = fig.is_categorical().then(|| {
        let plot_px = plot_area.dim_in_pixel().0 - Y_LABEL_AREA_PX - 2 * MARGIN_PX;
        CategoryLabels::fit(&plot_area, &fig.x_categories, plot_px / cats as u32)
    });
    let x_ticks = if fig.is_categorical() {
        Vec::new()
    } else if fig.x_log {
        log2_ticks(x0, x1)
    } else {
        linear_ticks(x0, x1, fig.x_ticks)
    };
    let y_ticks = if fig.y_log {
        log10_ticks(y0, y1, fig.y_ticks)
    } else {
        linear_ticks(y0, y1, fig.y_ticks)
    };
    let ctx = Ctx {
        area: &plot_area,
        labels,
        // Bars stand on zero, or on the bottom of a log axis.
        y_floor: if fig.y_log { y0 } else { 0f64.clamp(y0, y1) },
        y_bottom: y0,
        x_span: (x0, x1),
    };
    // Queue depths are powers of two: a base-2 log axis puts a tick on each.
    let x_lin = Keyed::new(RangedCoordf64::from(x0..x1), x_ticks.clone());
    let x_log = Keyed::new(LogCoord::from((x0..x1).log_scale().base(2.0)), x_ticks);
    let y_lin = Keyed::new(RangedCoordf64::from(y0..y1), y_ticks.clone());
    let y_log = Keyed::new(LogCoord::from((y0..y1).log_scale()), y_ticks);
    match (fig.x_log && !fig.is_categorical(), fig.y_log) {
        (true, true) => chart(fig, &ctx, x_log, y_log),
        (true, false) => chart(fig, &ctx, x_log, y_lin),
        (false, true) => chart(fig, &ctx, x_lin, y_log),
        (false, false) => chart(fig, &ctx, x_lin, y_lin),
    }
}

/// An axis with the ticks [`super::axis`] chose, and no light (minor) points. Plotters' own
/// `with_key_points` does this too, but loses the default label formatting of an `f64` axis
/// that `configure_mesh` asks for (our formatters replace it anyway).
struct Keyed<R> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Keyed<R> {
    fn new(inner: R, ticks: Vec<f64>) -> Self {
        Keyed { inner, ticks }
    }
}

impl<R: Ranged<ValueType = f64>> Ranged for Keyed<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> std::ops::Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

/// What the chart needs besides its axes.
struct Ctx<'a, DB: DrawingBackend> {
    area: &'a DrawingArea<DB, Shift>,
    labels: Option<CategoryLabels>,
    /// Where bars start.
    y_floor: f64,
    /// The bottom of the y axis: where category names hang from.
    y_bottom: f64,
    x_span: (f64, f64),
}

fn chart<DB, X, Y>(fig: &Figure, ctx: &Ctx<DB>, x: X, y: Y) -> Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{e:?}");
    let x_area = ctx
        .labels
        .as_ref()
        .map_or(TICK_GAP_PX + 18 + X_DESC_PX, |l| l.area_px);
    let mut chart = ChartBuilder::on(ctx.area)
        .margin(MARGIN_PX)
        .margin_top(6)
        .x_label_area_size(x_area)
        .y_label_area_size(Y_LABEL_AREA_PX)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&fig.x_label)
        .y_desc(&fig.y_label)
        .x_label_formatter(&|v: &f64| axis_number(*v))
        .y_label_formatter(&|v: &f64| axis_number(*v))
        .label_style(("sans-serif", TICK_FONT_SIZE))
        .axis_desc_style(("sans-serif", TICK_FONT_SIZE))
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT);
    if fig.is_categorical() {
        mesh.disable_x_mesh();
    }
    mesh.draw().map_err(err)?;

    if let Some(labels) = &ctx.labels {
        bars(fig, &mut chart, ctx.y_floor).map_err(err)?;
        category_labels(&chart, ctx, labels).map_err(err)?;
    } else {
        lines(fig, &mut chart).map_err(err)?;
    }
    references(fig, &mut chart, ctx).map_err(err)?;
    Ok(())
}

/// Reference lines on top of the data, dashed, each label above its right end on a white
/// ground so it reads over bars.
fn references<DB, X, Y>(
    fig: &Figure,
    chart: &mut ChartContext<DB, Cartesian2d<X, Y>>,
    ctx: &Ctx<DB>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let (bx, by) = ctx.area.get_base_pixel();
    for r in &fig.references {
        chart.draw_series(DashedLineSeries::new(
            [(ctx.x_span.0, r.y), (ctx.x_span.1, r.y)],
            6,
            4,
            INK.stroke_width(1),
        ))?;
        let (px, py) = chart.backend_coord(&(ctx.x_span.1, r.y));
        let (x, y) = (px - bx - 4, py - by - 3);
        let (w, h) = measure(ctx.area, &r.label, REFERENCE_FONT_SIZE);
        let ground = WHITE.mix(0.85).filled();
        ctx.area.draw(&Rectangle::new(
            [(x - w as i32 - 2, y - h as i32 - 1), (x + 2, y)],
            ground,
        ))?;
        ctx.area.draw(&Text::new(
            r.label.clone(),
            (x, y),
            font(REFERENCE_FONT_SIZE)
                .color(&INK)
                .pos(Pos::new(HPos::Right, VPos::Bottom)),
        ))?;
    }
    Ok(())
}

/// Grouped bars: one slot per non-stacked series (and one for the stack), side by side.
fn bars<DB, X, Y>(
    fig: &Figure,
    chart: &mut ChartContext<DB, Cartesian2d<X, Y>>,
    y_floor: f64,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let slots = bar_slots(fig).max(1);
    let bar = GROUP_SHARE / slots as f64;
    let stacks = stacked_bars(fig);
    let stack_slot = slots - 1;
    let mut slot = 0;
    for (s, stack) in fig.series.iter().zip(&stacks) {
        let c = colour(s.colour);
        let at = |x: f64, slot: usize| x - GROUP_SHARE / 2.0 + bar * slot as f64;
        match s.stroke {
            Stroke::Stacked => {
                for &(x, bottom, top) in stack {
                    let l = at(x, stack_slot);
                    chart.draw_series([Rectangle::new(
                        [(l, bottom.max(y_floor)), (l + bar, top)],
                        c.filled(),
                    )])?;
                }
            }
            Stroke::Solid | Stroke::Dashed => {
                for (i, &(x, y)) in s.points.iter().enumerate() {
                    let l = at(x, slot);
                    let rect = [(l, y_floor), (l + bar, y)];
                    if s.stroke == Stroke::Solid {
                        chart.draw_series([Rectangle::new(rect, c.filled())])?;
                    } else {
                        chart.draw_series([Rectangle::new(rect, WHITE.filled())])?;
                        chart.draw_series([Rectangle::new(rect, c.stroke_width(2))])?;
                    }
                    if let Some((lo, hi)) = s.interval(i) {
                        whisker(chart, l + bar / 2.0, (lo, hi), bar / 4.0, INK)?;
                    }
                }
                slot += 1;
            }
        }
    }
    Ok(())
}

/// An error bar at `x` from `lo` to `hi` with caps `half` wide each side.
fn whisker<DB: DrawingBackend, X: Ranged<ValueType = f64>, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<DB, Cartesian2d<X, Y>>,
    x: f64,
    (lo, hi): (f64, f64),
    half: f64,
    c: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let style = c.stroke_width(1);
    chart.draw_series([
        PathElement::new(vec![(x, lo), (x, hi)], style),
        PathElement::new(vec![(x - half, lo), (x + half, lo)], style),
        PathElement::new(vec![(x - half, hi), (x + half, hi)], style),
    ])?;
    Ok(())
}

fn lines<DB, X, Y>(
    fig: &Figure,
    chart: &mut ChartContext<DB, Cartesian2d<X, Y>>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for s in &fig.series {
        let c = colour(s.colour);
        let style = c.stroke_width(2);
        let pts = s.points.clone();
        if s.stroke == Stroke::Dashed {
            chart.draw_series(DashedLineSeries::new(pts, 8, 5, style))?;
        } else {
            chart.draw_series(LineSeries::new(pts, style))?;
        }
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        for (i, &(x, _)) in s.points.iter().enumerate() {
            if let Some(iv) = s.interval(i) {
                whisker_px(chart, x, iv, c)?;
            }
        }
    }
    Ok(())
}

/// An error bar on a line plot: caps 4 pixels each side, whatever the x scale.
fn whisker_px<DB, X, Y>(
    chart: &mut ChartContext<DB, Cartesian2d<X, Y>>,
    x: f64,
    (lo, hi): (f64, f64),
    c: RGBColor,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let style = c.stroke_width(1);
    chart.draw_series([PathElement::new(vec![(x, lo), (x, hi)], style)])?;
    for y in [lo, hi] {
        chart.draw_series([
            EmptyElement::at((x, y)) + PathElement::new(vec![(-4, 0), (4, 0)], style)
        ])?;
    }
    Ok(())
}

/// The category names under the x axis, centred on their groups.
fn category_labels<DB, X, Y>(
    chart: &ChartContext<DB, Cartesian2d<X, Y>>,
    ctx: &Ctx<DB>,
    labels: &CategoryLabels,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let (bx, by) = ctx.area.get_base_pixel();
    for (i, lines) in labels.lines.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64, ctx.y_bottom));
        let (x, y) = (px - bx, py - by + TICK_GAP_PX as i32);
        if labels.vertical {
            let style = font(labels.size)
                .transform(FontTransform::Rotate270)
                .pos(Pos::new(HPos::Right, VPos::Center));
            ctx.area.draw(&Text::new(lines[0].clone(), (x, y), style))?;
            continue;
        }
        for (k, line) in lines.iter().enumerate() {
            let style = font(labels.size).pos(Pos::new(HPos::Center, VPos::Top));
            let at = (x, y + (k as u32 * labels.line_px) as i32);
            ctx.area.draw(&Text::new(line.clone(), at, style))?;
        }
    }
    Ok(())
}

/// The title across the whole figure, shrunk and then wrapped to fit; returns the height used.
fn title<DB: DrawingBackend>(
    fig: &Figure,
    root: &DrawingArea<DB, Shift>,
) -> Result<u32, DrawingAreaErrorKind<DB::ErrorType>> {
    let room = root.dim_in_pixel().0 - 2 * MARGIN_PX;
    let size = TITLE_FONT_SIZES
        .into_iter()
        .find(|&s| measure(root, &fig.title, s).0 <= room);
    let (size, lines) = match size {
        Some(s) => (s, vec![fig.title.clone()]),
        None => {
            let s = *TITLE_FONT_SIZES.last().expect("sizes");
            (s, wrap(&fig.title, room, &|t| measure(root, t, s).0))
        }
    };
    let line_px = measure(root, "Ag", size).1 + 4;
    let centre = (root.dim_in_pixel().0 / 2) as i32;
    for (k, line) in lines.iter().enumerate() {
        let at = (centre, (MARGIN_PX + k as u32 * line_px) as i32);
        let style = font(size).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw(&Text::new(line.clone(), at, style))?;
    }
    Ok(MARGIN_PX + lines.len() as u32 * line_px + 4)
}

/// The legend: a sample drawn as the series is (line or bar, solid or dashed/outlined) and its
/// name, wrapped to the strip.
fn legend<DB: DrawingBackend>(
    fig: &Figure,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    const TEXT_X: i32 = 38;
    let room = LEGEND_WIDTH_PX - TEXT_X as u32 - 4;
    let line_px = measure(area, "Ag", LEGEND_FONT_SIZE).1 + 2;
    let mut y = 48;
    for s in &fig.series {
        let c = colour(s.colour);
        let style = c.stroke_width(2);
        let mid = y + line_px as i32 / 2;
        match (s.stroke, fig.is_categorical()) {
            (Stroke::Stacked, _) | (Stroke::Solid, true) => {
                area.draw(&Rectangle::new([(4, mid - 6), (30, mid + 6)], c.filled()))?
            }
            (Stroke::Dashed, true) => area.draw(&Rectangle::new(
                [(5, mid - 5), (29, mid + 5)],
                c.stroke_width(2),
            ))?,
            (Stroke::Solid, false) => {
                area.draw(&PathElement::new(vec![(4, mid), (30, mid)], style))?
            }
            (Stroke::Dashed, false) => {
                for x in [4, 16, 28] {
                    area.draw(&PathElement::new(vec![(x, mid), (x + 7, mid)], style))?;
                }
            }
        }
        let lines = wrap(&s.name, room, &|t| measure(area, t, LEGEND_FONT_SIZE).0);
        for line in &lines {
            let at = (TEXT_X, y);
            area.draw(&Text::new(
                line.clone(),
                at,
                font(LEGEND_FONT_SIZE).pos(Pos::new(HPos::Left, VPos::Top)),
            ))?;
            y += line_px as i32;
        }
        y += 6;
    }
    Ok(())
}

/// How many bar slots a category's group has: one per non-stacked series, one for the stack.
fn bar_slots(fig: &Figure) -> usize {
    let lines = fig
        .series
        .iter()
        .filter(|s| s.stroke != Stroke::Stacked)
        .count();
    let stacked = fig.series.iter().any(|s| s.stroke == Stroke::Stacked);
    lines + usize::from(stacked)
}

/// Each stacked series' bars as `(x, bottom, top)`: on top of the stacked series before it
/// at the same x; empty for other series.
pub(super) fn stacked_bars(fig: &Figure) -> Vec<Vec<(f64, f64, f64)>> {
    let mut tops: Vec<(f64, f64)> = Vec::new();
    fig.series
        .iter()
        .map(|s| {
            if s.stroke != Stroke::Stacked {
                return Vec::new();
            }
            s.points
                .iter()
                .map(|&(x, y)| {
                    let i = match tops.iter().position(|t| t.0 == x) {
                        Some(i) => i,
                        None => {
                            tops.push((x, 0.0));
                            tops.len() - 1
                        }
                    };
                    let bottom = tops[i].1;
                    tops[i].1 += y;
                    (x, bottom, bottom + y)
                })
                .collect()
        })
        .collect()
}

/// The y values the axis must cover: every point, every stack's top and bottom, every
/// interval's ends, every reference line.
pub(super) fn y_values(fig: &Figure) -> Vec<f64> {
    let points = fig
        .series
        .iter()
        .filter(|s| s.stroke != Stroke::Stacked)
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let stacks = stacked_bars(fig)
        .into_iter()
        .flatten()
        .flat_map(|(_, b, t)| [b, t]);
    let intervals = fig
        .series
        .iter()
        .flat_map(|s| (0..s.points.len()).filter_map(|i| s.interval(i)))
        .flat_map(|(lo, hi)| [lo, hi]);
    let references = fig.references.iter().map(|r| r.y);
    points
        .chain(stacks)
        .chain(intervals)
        .chain(references)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::Series;

    #[test]
    fn wrap_breaks_after_hyphens_and_at_spaces() {
        let width = |s: &str| s.chars().count() as u32;
        assert_eq!(
            wrap("db-updateimageserver-fetch", 14, &width),
            vec!["db-", "updateimageserver-", "fetch"]
        );
        assert_eq!(wrap("sw q", 10, &width), vec!["sw q"]);
        assert_eq!(wrap("blk compl", 5, &width), vec!["blk", "compl"]);
        assert_eq!(wrap("a-b-c", 4, &width), vec!["a-b-", "c"]);
    }

    #[test]
    fn slots_one_per_bar_series_and_one_for_the_stack() {
        let s = |stroke| Series {
            stroke,
            points: vec![(0.0, 1.0)],
            ..Default::default()
        };
        let mut f = Figure {
            x_categories: vec!["a".into()],
            series: vec![s(Stroke::Solid), s(Stroke::Dashed)],
            ..Default::default()
        };
        assert_eq!(bar_slots(&f), 2);
        f.series.push(s(Stroke::Stacked));
        f.series.push(s(Stroke::Stacked));
        assert_eq!(bar_slots(&f), 3);
    }
}
