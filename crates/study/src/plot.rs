//! Figures: line charts (and stacked bars) of a study's results, written as CSV, SVG and PNG.
//!
//! A [`Figure`] is data, not drawing: named series of `(x, y)` points, axis labels, whether
//! each axis is logarithmic (queue depth 1..256 and latencies from microseconds to
//! milliseconds span decades), and optional category names for the x axis (interrupt vs
//! polled). A series drawn [`Stroke::Stacked`] is a bar at each of its x values, stacked on the
//! stacked series before it at the same x (a breakdown: each series one part). The same figure
//! is written three ways: `<stem>.csv` (`series,x,y` rows, the numbers behind the plot; a
//! stacked series' rows are its own parts, not the running total), `<stem>.svg` and `<stem>.png` (800 × 500 pixels, plotters). Text in the PNG
//! is drawn with DejaVu Sans, embedded in the binary (`assets/DejaVuSans.ttf`, Bitstream Vera
//! licence with DejaVu's public-domain changes: free to redistribute and embed; the licence text
//! is `assets/DejaVuSans-LICENSE.txt`).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Width and height of every plot, in pixels.
pub const PLOT_SIZE_PX: (u32, u32) = (800, 500);
/// Width of the legend strip at the right of every plot, in pixels.
const LEGEND_WIDTH_PX: u32 = 180;
/// More categories than this get smaller x labels.
const MANY_CATEGORIES: usize = 8;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER_FONT: Once = Once::new();

/// How a series is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stroke {
    Solid,
    Dashed,
    /// A filled bar at each x, on top of the stacked series before it at the same x.
    Stacked,
}

/// Width of a stacked bar, in x units (categories are 1 apart).
const BAR_WIDTH: f64 = 0.6;

#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub stroke: Stroke,
    /// Index into the palette (series of one device share a colour).
    pub colour: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// File name without extension.
    pub stem: String,
    pub title: String,
    /// What was run, for the report.
    pub caption: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    /// Names of x = 0, 1, 2, … when the x axis is categorical.
    pub x_categories: Vec<String>,
    pub series: Vec<Series>,
}

const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    // Beyond six: for breakdowns with a part per colour.
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(174, 199, 232),
    RGBColor(255, 187, 120),
];

impl Figure {
    /// The numbers behind the plot: `series,<x label>,<y label>` rows.
    pub fn csv(&self) -> String {
        let mut out = format!(
            "series,{},{}\n",
            csv_field(&self.x_label),
            csv_field(&self.y_label)
        );
        for s in &self.series {
            for (x, y) in &s.points {
                let x = match self.x_categories.get(*x as usize) {
                    Some(name) if !self.x_categories.is_empty() => name.clone(),
                    _ => format!("{x}"),
                };
                writeln!(out, "{},{},{}", csv_field(&s.name), csv_field(&x), y).expect("string");
            }
        }
        out
    }

    /// The plot as SVG text.
    pub fn svg(&self) -> Result<String, String> {
        register_font();
        let mut text = String::new();
        {
            let root = SVGBackend::with_string(&mut text, PLOT_SIZE_PX).into_drawing_area();
            self.draw(&root)?;
            root.present()
                .map_err(|e| format!("{}: {e:?}", self.stem))?;
        }
        Ok(text)
    }

    /// The plot as PNG bytes.
    pub fn png(&self) -> Result<Vec<u8>, String> {
        register_font();
        let (w, h) = PLOT_SIZE_PX;
        let mut rgb = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
            self.draw(&root)?;
            root.present()
                .map_err(|e| format!("{}: {e:?}", self.stem))?;
        }
        let mut bytes = Vec::new();
        let mut enc = png::Encoder::new(&mut bytes, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(|e| e.to_string())?;
        writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
        writer.finish().map_err(|e| e.to_string())?;
        Ok(bytes)
    }

    /// Writes `<stem>.csv`, `<stem>.svg` and `<stem>.png` into `dir`; returns the PNG bytes.
    pub fn write(&self, dir: &Path) -> Result<Vec<u8>, String> {
        let w = |name: String, bytes: &[u8]| {
            std::fs::write(dir.join(&name), bytes).map_err(|e| format!("writing {name}: {e}"))
        };
        w(format!("{}.csv", self.stem), self.csv().as_bytes())?;
        w(format!("{}.svg", self.stem), self.svg()?.as_bytes())?;
        let png = self.png()?;
        w(format!("{}.png", self.stem), &png)?;
        Ok(png)
    }

    fn points(&self) -> impl Iterator<Item = &(f64, f64)> {
        self.series.iter().flat_map(|s| s.points.iter())
    }

    /// Each stacked series' bars as `(x, bottom, top)`: on top of the stacked series before it
    /// at the same x.
    fn bars(&self) -> Vec<Vec<(f64, f64, f64)>> {
        let mut tops: Vec<(f64, f64)> = Vec::new();
        self.series
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

    /// The y values the axis must cover: every line's points, every bar's top and bottom.
    fn y_values(&self) -> Vec<f64> {
        let lines = self
            .series
            .iter()
            .filter(|s| s.stroke != Stroke::Stacked)
            .flat_map(|s| s.points.iter().map(|p| p.1));
        let bars = self
            .bars()
            .into_iter()
            .flatten()
            .flat_map(|(_, b, t)| [b, t]);
        lines.chain(bars).collect()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(|e| format!("{e:?}"))?;
        let (x0, x1) = bounds(
            self.points().map(|p| p.0),
            self.x_log,
            self.x_categories.len(),
        );
        let (y0, y1) = bounds(self.y_values().into_iter(), self.y_log, 0);
        // Queue depths are powers of two: a base-2 log axis puts a tick on each.
        match (self.x_log, self.y_log) {
            (true, true) => self.chart(root, (x0..x1).log_scale().base(2.0), (y0..y1).log_scale()),
            (true, false) => self.chart(root, (x0..x1).log_scale().base(2.0), y0..y1),
            (false, true) => self.chart(root, x0..x1, (y0..y1).log_scale()),
            (false, false) => self.chart(root, x0..x1, y0..y1),
        }
    }

    fn chart<DB, X, Y>(&self, root: &DrawingArea<DB, Shift>, x: X, y: Y) -> Result<(), String>
    where
        DB: DrawingBackend,
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("{}: {e:?}", self.stem);
        let (width, _) = root.dim_in_pixel();
        let (plot_area, legend_area) = root.split_horizontally(width - LEGEND_WIDTH_PX);
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(&self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d(x, y)
            .map_err(err)?;
        let cats = &self.x_categories;
        let x_fmt = |v: &f64| -> String {
            if cats.is_empty() {
                axis_number(*v)
            } else if (v - v.round()).abs() < 1e-6 && v.round() >= 0.0 {
                cats.get(v.round() as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&|v: &f64| axis_number(*v))
            .label_style(("sans-serif", 14))
            .bold_line_style(RGBColor(200, 200, 200))
            .light_line_style(RGBColor(238, 238, 238));
        if !cats.is_empty() {
            // Ticks every half category: the formatter names the whole ones.
            mesh.x_labels(2 * cats.len() + 1);
        }
        if cats.len() > MANY_CATEGORIES {
            // Eleven or more names (`flashshare`'s ten offline jobs and the mean) overlap at
            // the size of the other labels.
            mesh.x_label_style(("sans-serif", 10))
                .axis_desc_style(("sans-serif", 14));
        }
        mesh.draw().map_err(err)?;
        for (s, bars) in self.series.iter().zip(self.bars()) {
            let colour = PALETTE[s.colour % PALETTE.len()];
            let style = ShapeStyle::from(colour).stroke_width(2);
            let pts = s.points.clone();
            match s.stroke {
                Stroke::Stacked => {
                    let half = BAR_WIDTH / 2.0;
                    chart
                        .draw_series(bars.into_iter().map(|(x, bottom, top)| {
                            Rectangle::new(
                                [(x - half, bottom), (x + half, top)],
                                ShapeStyle::from(colour).filled(),
                            )
                        }))
                        .map_err(err)?;
                    continue;
                }
                Stroke::Solid => chart
                    .draw_series(LineSeries::new(pts, style))
                    .map_err(err)?,
                Stroke::Dashed => chart
                    .draw_series(DashedLineSeries::new(pts, 8, 5, style))
                    .map_err(err)?,
            };
            chart
                .draw_series(
                    s.points
                        .iter()
                        .map(|&p| Circle::new(p, 3, ShapeStyle::from(colour).filled())),
                )
                .map_err(err)?;
        }
        self.legend(&legend_area).map_err(err)?;
        Ok(())
    }
}

impl Figure {
    /// The legend, in its own strip right of the plot so it never hides data: a line sample
    /// drawn as the series is (solid or dashed) and the series name.
    fn legend<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let font = ("sans-serif", 13).into_font().color(&BLACK);
        for (i, s) in self.series.iter().enumerate() {
            let colour = PALETTE[s.colour % PALETTE.len()];
            let style = ShapeStyle::from(colour).stroke_width(2);
            let y = 60 + 22 * i as i32;
            match s.stroke {
                Stroke::Stacked => area.draw(&Rectangle::new(
                    [(4, y - 6), (30, y + 6)],
                    ShapeStyle::from(colour).filled(),
                ))?,
                Stroke::Solid => area.draw(&PathElement::new(vec![(4, y), (30, y)], style))?,
                Stroke::Dashed => {
                    for x in [4, 16, 28] {
                        area.draw(&PathElement::new(vec![(x, y), (x + 7, y)], style))?;
                    }
                }
            }
            area.draw(&Text::new(s.name.clone(), (38, y - 7), font.clone()))?;
        }
        Ok(())
    }
}

fn register_font() {
    REGISTER_FONT.call_once(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font parses"));
    });
}

/// Axis range covering `values` with a margin; log axes stay positive.
fn bounds(values: impl Iterator<Item = f64>, log: bool, categories: usize) -> (f64, f64) {
    if categories > 0 {
        return (-0.5, categories as f64 - 0.5);
    }
    let finite: Vec<f64> = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if finite.is_empty() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        let span = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
        ((lo - 0.05 * span).min(0.0), hi + 0.1 * span)
    }
}

/// Short axis labels: 1, 16, 2.5, 1.2k.
fn axis_number(v: f64) -> String {
    let a = v.abs();
    if a >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if a >= 100.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
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
mod tests {
    use super::*;

    fn fig(x_log: bool) -> Figure {
        Figure {
            stem: "t".into(),
            title: "test".into(),
            caption: String::new(),
            x_label: "queue depth".into(),
            y_label: "latency (µs)".into(),
            x_log,
            y_log: true,
            x_categories: vec![],
            series: vec![Series {
                name: "a, b".into(),
                points: vec![(1.0, 10.0), (16.0, 200.0)],
                stroke: Stroke::Dashed,
                colour: 0,
            }],
        }
    }

    #[test]
    fn csv_quotes_fields_with_commas() {
        let csv = fig(true).csv();
        assert_eq!(
            csv,
            "series,queue depth,latency (µs)\n\"a, b\",1,10\n\"a, b\",16,200\n"
        );
    }

    #[test]
    fn png_is_a_png_with_ink_on_it() {
        let png = fig(true).png().unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), PLOT_SIZE_PX);
        let ink = buf.chunks(3).filter(|p| p != &[255, 255, 255]).count();
        assert!(ink > 5_000, "only {ink} non-white pixels");
    }

    /// Stacked series sit on each other at the same x (a series missing an x leaves no gap
    /// for the next), and the axis covers the tallest stack, not the tallest part.
    #[test]
    fn stacked_bars_stack_per_x_and_the_axis_covers_the_stack() {
        let part = |name: &str, points: Vec<(f64, f64)>, colour| Series {
            name: name.into(),
            points,
            stroke: Stroke::Stacked,
            colour,
        };
        let mut f = fig(false);
        f.x_categories = vec!["a".into(), "b".into()];
        f.y_log = false;
        f.series = vec![
            part("compute", vec![(0.0, 1.0), (1.0, 2.0)], 0),
            part("wait", vec![(1.0, 0.5)], 1),
            part("I/O", vec![(0.0, 3.0), (1.0, 1.0)], 2),
        ];
        assert_eq!(
            f.bars(),
            vec![
                vec![(0.0, 0.0, 1.0), (1.0, 0.0, 2.0)],
                vec![(1.0, 2.0, 2.5)],
                vec![(0.0, 1.0, 4.0), (1.0, 2.5, 3.5)],
            ]
        );
        let (_, hi) = bounds(f.y_values().into_iter(), false, 0);
        assert!(hi >= 4.0, "the axis reaches the tallest stack: {hi}");
        let svg = f.svg().unwrap();
        assert!(
            svg.matches("<rect").count() >= 5,
            "a rectangle per bar part"
        );
        assert!(f.png().is_ok());
    }

    #[test]
    fn svg_has_the_title_and_a_path_per_series() {
        let svg = fig(false).svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.contains("test"));
        assert!(svg.contains("<polyline") || svg.contains("<path"));
    }
}
