use super::draw::{stacked_bars, y_values};
use super::*;

fn fig(x_log: bool) -> Figure {
    Figure {
        stem: "t".into(),
        title: "test".into(),
        x_label: "queue depth".into(),
        y_label: "latency (µs)".into(),
        x_log,
        y_log: true,
        series: vec![Series {
            name: "a, b".into(),
            points: vec![(1.0, 10.0), (16.0, 200.0)],
            stroke: Stroke::Dashed,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Two series over named categories (tenants, stacks).
fn categorical() -> Figure {
    Figure {
        stem: "c".into(),
        title: "per tenant".into(),
        x_label: "tenant".into(),
        y_label: "p95 (µs)".into(),
        x_categories: vec!["A".into(), "B".into(), "C".into()],
        series: vec![
            Series {
                name: "on".into(),
                points: vec![(0.0, 100.0), (1.0, 200.0), (2.0, 300.0)],
                stroke: Stroke::Solid,
                colour: 0,
                ..Default::default()
            },
            Series {
                name: "off".into(),
                points: vec![(0.0, 150.0), (1.0, 250.0), (2.0, 900.0)],
                stroke: Stroke::Dashed,
                colour: 1,
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

/// The text of every `<text>` element of an SVG.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let body = &t[t.find('>').expect("a text tag") + 1..];
            body[..body.find("</text>").expect("closed")]
                .trim()
                .to_string()
        })
        .collect()
}

/// The `<line>`, `<polyline>` and `<path>` elements of an SVG stroked in `colour` (`#RRGGBB`).
fn strokes_in(svg: &str, colour: &str) -> usize {
    svg.split('<')
        .filter(|e| {
            ["line ", "polyline", "path"]
                .iter()
                .any(|k| e.starts_with(k))
        })
        .filter(|e| e.contains(&format!("stroke=\"{colour}\"")))
        .count()
}

fn hex((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02X}{g:02X}{b:02X}")
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
fn csv_carries_intervals_when_a_series_has_them() {
    let mut f = categorical();
    f.series[0] = f.series[0].clone().with_intervals(vec![
        (90.0, 110.0),
        (f64::NAN, f64::NAN),
        (280.0, 330.0),
    ]);
    let csv = f.csv();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "series,tenant,p95 (µs),low,high");
    assert_eq!(lines[1], "on,A,100,90,110");
    assert_eq!(lines[4], "off,A,150,,");
    // The axis reaches the top of the widest whisker, and a NaN interval draws nothing.
    assert!(y_values(&f).contains(&330.0));
    assert!(!y_values(&f).iter().any(|v| v.is_nan()));
    let svg = f.svg().unwrap();
    assert_eq!(
        strokes_in(&svg, "#3C3C3C"),
        2 * 3,
        "two whiskers of three strokes"
    );
}

#[test]
#[should_panic(expected = "one interval per point")]
fn an_interval_belongs_to_one_point() {
    let _ = categorical().series[0]
        .clone()
        .with_intervals(vec![(1.0, 2.0)]);
}

#[test]
fn png_is_the_svg_rasterized_with_ink_on_it() {
    let png = fig(true).png().unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), PLOT_SIZE_PX);
    let channels = info.color_type.samples();
    let px: Vec<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
    let ink = px.iter().filter(|p| p[..3] != [255, 255, 255]).count();
    assert!(ink > 5_000, "only {ink} non-white pixels");
    // The title is drawn (dark text) in the top band, centred over the figure.
    let w = info.width as usize;
    let dark_in_title = (0..40 * w)
        .filter(|&i| px[i][..3].iter().all(|&c| c < 100))
        .count();
    assert!(
        dark_in_title > 20,
        "{dark_in_title} dark pixels in the title band"
    );
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
        ..Default::default()
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
        stacked_bars(&f),
        vec![
            vec![(0.0, 0.0, 1.0), (1.0, 0.0, 2.0)],
            vec![(1.0, 2.0, 2.5)],
            vec![(0.0, 1.0, 4.0), (1.0, 2.5, 3.5)],
        ]
    );
    assert!(
        y_values(&f).contains(&4.0),
        "the axis reaches the tallest stack"
    );
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
    assert!(texts(&svg).contains(&"test".to_string()));
    assert!(strokes_in(&svg, &hex(PALETTE[0])) >= 1, "the series' line");
}

/// Categories are bars, never a line joining them: each series is a rectangle per category
/// (filled or outlined), and nothing is stroked in a series' colour but the outlines.
#[test]
fn a_categorical_figure_draws_grouped_bars_not_lines() {
    let f = categorical();
    assert!(f.is_categorical());
    let svg = f.svg().unwrap();
    let filled = format!("fill=\"{}\"", hex(PALETTE[0]));
    let rects_on = svg
        .split('<')
        .filter(|e| e.starts_with("rect") && e.contains(&filled))
        .count();
    assert_eq!(rects_on, 3 + 1, "three bars and the legend's sample");
    let outlined = format!("stroke=\"{}\"", hex(PALETTE[1]));
    let rects_off = svg
        .split('<')
        .filter(|e| e.starts_with("rect") && e.contains(&outlined))
        .count();
    assert_eq!(
        rects_off,
        3 + 1,
        "three outlined bars and the legend's sample"
    );
    assert_eq!(
        strokes_in(&svg, &hex(PALETTE[0])),
        0,
        "no line joins categories"
    );
    assert_eq!(strokes_in(&svg, &hex(PALETTE[1])), 0);
    for name in ["A", "B", "C"] {
        assert!(texts(&svg).contains(&name.to_string()), "label {name}");
    }
}

/// A log axis has one gridline per labelled tick: no band of nine minor lines per decade.
#[test]
fn a_log_axis_has_a_gridline_per_tick_and_no_minor_band() {
    let mut f = fig(true);
    f.series[0].points = vec![(1.0, 3.0), (4.0, 40.0), (256.0, 20_000.0)];
    let svg = f.svg().unwrap();
    let grid = strokes_in(&svg, "#D2D2D2");
    let labels = texts(&svg);
    // y (2 to 30k): 10, 100, 1000, 10k; x: 1, 2, 4, …, 256.
    for t in ["10", "100", "1000", "10k", "1", "2", "4", "256"] {
        assert!(labels.contains(&t.to_string()), "tick {t} in {labels:?}");
    }
    assert!(
        !labels.contains(&"20".to_string()),
        "no minor ticks: {labels:?}"
    );
    assert_eq!(grid, 4 + 9, "a gridline per tick");
    assert_eq!(strokes_in(&svg, "#EEEEEE"), 0);
}

#[test]
fn an_integer_axis_ticks_whole_numbers_only() {
    let mut f = fig(false);
    f.y_log = false;
    f.x_label = "dataplane threads".into();
    f.x_ticks = Ticks::Integer;
    f.series[0].points = vec![(1.0, 10.0), (2.0, 20.0)];
    let labels = texts(&f.svg().unwrap());
    for t in ["0", "1", "2"] {
        assert!(labels.contains(&t.to_string()), "{t} in {labels:?}");
    }
    for t in ["0.2", "0.5", "1.5"] {
        assert!(!labels.contains(&t.to_string()), "{t} in {labels:?}");
    }
    f.x_ticks = Ticks::Auto;
    let auto = texts(&f.svg().unwrap());
    assert!(auto.iter().any(|t| t.contains('.')), "{auto:?}");
}

/// An SLO line is drawn across the plot with its label, and the axis reaches it even when every
/// point is far below.
#[test]
fn a_reference_line_is_drawn_with_its_label_and_in_range() {
    let mut f = categorical();
    f.y_log = true;
    f.references = vec![Reference::slo(2000.0, "SLO: 2 ms")];
    assert!(y_values(&f).contains(&2000.0));
    let svg = f.svg().unwrap();
    assert!(texts(&svg).contains(&"SLO: 2 ms".to_string()));
    assert!(strokes_in(&svg, "#3C3C3C") >= 1, "the dashed line");
    assert_eq!(Reference::baseline("vanilla").label, "1.0 = vanilla");
}

#[test]
fn coincident_series_are_remarked_in_the_caption() {
    let mut f = fig(false);
    f.caption = "Runs x.".into();
    let twin = |name: &str, scale: f64| Series {
        name: name.into(),
        points: vec![(1.0, 10.0 * scale), (16.0, 200.0 * scale)],
        ..Default::default()
    };
    f.series = vec![
        twin("vanilla", 1.0),
        twin("fd", 1.004),
        twin("fd-buf", 1.02),
        twin("x", 1.0),
    ];
    assert_eq!(f.coincident(), vec![vec![0, 1, 3]]);
    assert_eq!(
        f.full_caption(),
        "Runs x. vanilla, fd and x coincide (within 0.5 % at every point): the last drawn \
         hides the others."
    );
    f.series.truncate(3);
    f.series[1].points.pop();
    assert!(
        f.coincident().is_empty(),
        "different x values never coincide"
    );
    assert_eq!(f.full_caption(), "Runs x.");
}

/// Long category names wrap at their hyphens (fastdrain's workloads) instead of running into
/// each other, and names that cannot wrap turn vertical.
#[test]
fn long_category_names_wrap_or_turn() {
    let mut f = categorical();
    f.x_categories = [
        "apache-fetch",
        "apache-upload",
        "db-select",
        "db-update",
        "imageserver-fetch",
        "imageserver-upload",
        "mean",
    ]
    .map(String::from)
    .to_vec();
    f.series = (0..10)
        .map(|k| Series {
            name: format!("s{k}"),
            points: (0..7).map(|i| (f64::from(i), 1.0 + f64::from(k))).collect(),
            ..Default::default()
        })
        .collect();
    let svg = f.svg().unwrap();
    let labels = texts(&svg);
    for piece in ["imageserver-", "fetch", "upload", "db-select"] {
        assert!(labels.contains(&piece.to_string()), "{piece} in {labels:?}");
    }
    // Only the y axis description is turned.
    assert_eq!(svg.matches("rotate(").count(), 1, "wrapped, not turned");
    f.x_categories = (0..7)
        .map(|i| format!("averyveryverylongname{i}"))
        .collect();
    let svg = f.svg().unwrap();
    assert_eq!(
        svg.matches("rotate(270").count(),
        1 + 7,
        "unbreakable names turn vertical"
    );
}

#[test]
fn a_figure_with_many_bars_grows_wider() {
    let mut f = categorical();
    assert_eq!(f.size_px(), PLOT_SIZE_PX);
    f.x_categories = (0..12).map(|i| format!("c{i}")).collect();
    f.series = (0..12)
        .map(|k| Series {
            name: format!("s{k}"),
            points: (0..12).map(|i| (f64::from(i), 1.0)).collect(),
            ..Default::default()
        })
        .collect();
    let (w, h) = f.size_px();
    assert!(w > PLOT_SIZE_PX.0 && h == PLOT_SIZE_PX.1, "{w}x{h}");
    assert!(f.svg().unwrap().contains(&format!("width=\"{w}\"")));
}
