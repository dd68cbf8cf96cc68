//! The study's outputs for people: the headline table (terminal and HTML) and `report.html`.
//!
//! `report.html` is one self-contained file: no scripts, no styles or fonts fetched, every plot a
//! PNG inlined as a `data:image/png;base64,…` URI, so it opens the same from a laptop, a CI
//! artifact or an e-mail. It holds, in order: what the study is, the headline table and any
//! further tables, every figure with its caption (what was run: presets, jobs, queue depths,
//! I/Os, seed), and a collapsible list of every run with its headline numbers, `config.toml` and `job.fio`.

use std::fmt::Write as _;

use engine::time::format_ns;

use crate::plot::Figure;
use crate::results::{Results, RunResult};
use crate::spec::RunSpec;

/// A table of text cells; the first column is left-aligned, the rest right-aligned.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Fixed-width text for the terminal.
    pub fn to_text(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0usize; cols];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in row.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, c) in row.iter().enumerate().take(cols) {
                let pad = width[i] - c.chars().count();
                if i == 0 {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str("  ");
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// A GitHub-flavoured Markdown table (pipes in cells escaped).
    pub fn to_markdown(&self) -> String {
        let cell = |c: &str| c.replace('|', "\\|");
        let line = |row: &[String]| {
            let cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut out = line(&self.header);
        let rule: Vec<&str> = (0..self.header.len())
            .map(|i| if i == 0 { "---" } else { "---:" })
            .collect();
        out.push_str(&format!("| {} |\n", rule.join(" | ")));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }

    pub fn to_html(&self) -> String {
        let mut out = String::from("<table>\n<tr>");
        for h in &self.header {
            write!(out, "<th>{}</th>", esc(h)).expect("string");
        }
        out.push_str("</tr>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for c in row {
                write!(out, "<td>{}</td>", esc(c)).expect("string");
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
        out
    }
}

/// Every run's headline numbers, one row per run and direction.
pub fn runs_table(specs: &[RunSpec], results: &Results) -> Table {
    let mut t = Table {
        header: [
            "run",
            "device",
            "op",
            "I/Os",
            "IOPS",
            "MB/s",
            "avg",
            "p99",
            "p99.999",
            "CPU k/u %",
        ]
        .map(String::from)
        .to_vec(),
        rows: vec![],
    };
    for spec in specs {
        let Some(r) = results.get(&spec.id) else {
            continue;
        };
        if let Some(sys) = &r.system {
            // A system run: one row per online service (response time, not I/O latency).
            for p in sys.processes.iter().filter(|p| p.requests.is_some()) {
                t.rows.push(vec![
                    r.id.clone(),
                    r.device.clone(),
                    format!("{} responses", p.name),
                    p.requests.unwrap_or(0).to_string(),
                    String::new(),
                    String::new(),
                    p.response_mean_ns.map_or("-".into(), format_ns),
                    p.response_p99_ns.map_or("-".into(), format_ns),
                    String::new(),
                    cpu_cell(r),
                ]);
            }
        }
        for (op, h) in [("read", &r.read), ("write", &r.write)] {
            let Some(h) = h else { continue };
            t.rows.push(vec![
                r.id.clone(),
                r.device.clone(),
                op.to_string(),
                h.ios.to_string(),
                format!("{:.0}", h.iops),
                format!("{:.1}", h.bytes_per_sec / 1e6),
                format_ns(h.mean_ns),
                format_ns(h.p99_ns),
                format_ns(h.p99_999_ns),
                cpu_cell(r),
            ]);
        }
    }
    t
}

fn cpu_cell(r: &RunResult) -> String {
    format!("{:.0}/{:.0}", r.cpu.kernel_pct, r.cpu.user_pct)
}

/// The study's "Current results" section in Markdown, beside `report.html` ([`markdown`];
/// `ullstack study NAME --markdown` prints it).
pub const RESULTS_MD: &str = "results.md";

/// What `results.md` is made of.
pub struct MarkdownInput<'a> {
    pub study: &'a str,
    pub size: crate::Size,
    /// Seeds of the runs (first and last).
    pub seeds: (u64, u64),
    pub replicates: u64,
    /// The build, command line and times ([`crate::provenance`]).
    pub build: String,
    pub command: String,
    pub started_utc: String,
    pub published: &'a Table,
    pub headline: &'a Table,
}

/// `results.md`: a study's "Current results" section for docs/study.md, generated whole
/// (`ullstack study NAME --markdown` prints it): provenance, the published figures beside ours
/// and the headline table. Replaced wholesale when the study is re-run.
pub fn markdown(m: &MarkdownInput) -> String {
    let seeds = match m.seeds {
        (a, b) if a == b => format!("seed {a}"),
        (a, b) => format!("seeds {a}–{b}"),
    };
    let mut out = format!(
        "### Current results: `{}` ({}, {seeds}, {} replicate(s) per comparison)\n\n",
        m.study,
        m.size.as_str(),
        m.replicates
    );
    out.push_str(&format!(
        "Generated by `{}` (started {}; {}).\n\n",
        m.command, m.started_utc, m.build
    ));
    if m.size == crate::Size::Quick {
        out.push_str(&format!("**{SMOKE_TEST}**\n\n"));
    }
    if !m.published.rows.is_empty() {
        out.push_str(
            "The published figures beside ours (95 % bootstrap intervals over pairs and seeds; \
             ratio of effects 1 = the paper's effect):\n\n",
        );
        out.push_str(&m.published.to_markdown());
        out.push('\n');
    }
    out.push_str("Headline numbers:\n\n");
    out.push_str(&m.headline.to_markdown());
    out
}

/// The first line of a `--quick` study's report and terminal output.
pub const SMOKE_TEST: &str = "Smoke test (--quick): every mechanism is exercised, but the runs \
    are too short and too few for their figures to be results; run without --quick for results.";

/// What `report.html` is made of.
pub struct ReportInput<'a> {
    pub title: String,
    pub about: String,
    /// The published figures beside ours ([`crate::published::table`]): the report opens
    /// with it; `None` for a study with no published outcome.
    pub published: Option<&'a Table>,
    /// A `--quick` run: the report's first line says it is a smoke test ([`SMOKE_TEST`]).
    pub quick: bool,
    pub headline: &'a Table,
    /// Further tables, each with its heading.
    pub tables: &'a [(String, Table)],
    /// Each figure with its PNG bytes.
    pub figures: Vec<(&'a Figure, Vec<u8>)>,
    pub specs: &'a [RunSpec],
    pub results: &'a Results,
    /// The "Provenance" section, HTML ([`crate::provenance::html`]): the report's last.
    pub provenance: &'a str,
}

/// The whole self-contained `report.html`.
pub fn html(input: &ReportInput) -> String {
    let mut out = String::new();
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n\
         <style>\nbody {{ font-family: sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }}\n\
         table {{ border-collapse: collapse; font-size: 13px; }}\n\
         td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}\n\
         td:first-child, th:first-child {{ text-align: left; }}\n\
         figure {{ margin: 2em 0; }} figcaption {{ font-size: 14px; max-width: 800px; }}\n\
         pre {{ background: #f5f5f5; padding: 6px; font-size: 12px; }}\n</style>\n</head>\n<body>\n\
         <h1>{title}</h1>\n{smoke}<p>{about}</p>\n{published}<h2>Headline numbers</h2>\n{table}",
        title = esc(&input.title),
        about = esc(&input.about),
        smoke = if input.quick {
            format!("<p class=\"smoke\"><b>{}</b></p>\n", esc(SMOKE_TEST))
        } else {
            String::new()
        },
        published = input.published.map_or(String::new(), |t| format!(
            "<h2>The published figures beside ours</h2>\n<p>Each row: the paper's figure, this \
             study's value with its 95 % bootstrap interval over pairs and seeds, the simulated \
             effect over the published one (1 reproduces the paper), whether the effect goes \
             the published way (\"no effect\": the interval spans none), and whether a model \
             parameter was fitted to that figure (calibrated) or not (predicted). The figures \
             are in <code>reference/published.toml</code>.</p>\n{}",
            t.to_html()
        )),
        table = input.headline.to_html(),
    )
    .expect("string");
    for (heading, table) in input.tables {
        write!(out, "<h3>{}</h3>\n{}", esc(heading), table.to_html()).expect("string");
    }
    out.push_str("<h2>Figures</h2>\n");
    for (fig, png) in &input.figures {
        out.push_str(&figure_html(fig, png));
    }
    out.push_str("<h2>Every run</h2>\n<p>CPU k/u: kernel/user time of the job's threads, percent of one core.</p>\n");
    out.push_str(&runs_table(input.specs, input.results).to_html());
    out.push_str("<h2>Configuration of every run</h2>\n<p>Each run re-runs alone: <code>ullstack sim --config runs/&lt;id&gt;/config.toml</code>.</p>\n");
    for spec in input.specs {
        let hash = input
            .results
            .get(&spec.id)
            .map_or_else(|| spec.config_hash(), |r| r.config_hash.clone());
        write!(
            out,
            "<details><summary><code>{id}</code> (config hash {hash})</summary>\n<pre>{cfg}</pre>\n<pre>{job}</pre>\n</details>\n",
            id = esc(&spec.id),
            cfg = esc(&spec.config_toml()),
            job = esc(&spec.job_fio),
        )
        .expect("string");
    }
    out.push_str(input.provenance);
    out.push_str("</body>\n</html>\n");
    out
}

/// One figure of a report: its PNG inline at the figure's own size (scaled down to the page's
/// width when wider), and its caption with the plot's remarks ([`Figure::full_caption`]).
pub fn figure_html(fig: &Figure, png: &[u8]) -> String {
    let (w, h) = fig.size_px();
    format!(
        "<figure id=\"{stem}\">\n<img alt=\"{title}\" width=\"{w}\" height=\"{h}\" \
         style=\"max-width: 100%; height: auto\" src=\"data:image/png;base64,{data}\">\n\
         <figcaption><b>{title}.</b> {caption} Data: <code>{stem}.csv</code>; also \
         <code>{stem}.svg</code>.</figcaption>\n</figure>\n",
        stem = esc(&fig.stem),
        title = esc(&fig.title),
        data = base64(png),
        caption = esc(&fig.full_caption()),
    )
}

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Standard base64 (RFC 4648 alphabet, `=` padding).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod markdown_tests {
    use super::*;

    #[test]
    fn markdown_tables_escape_pipes_and_align_numbers_right() {
        let t = Table {
            header: vec!["a".into(), "b".into()],
            rows: vec![vec!["x|y".into(), "1".into()]],
        };
        assert_eq!(
            t.to_markdown(),
            "| a | b |\n| --- | ---: |\n| x\\|y | 1 |\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), enc, "{plain}");
        }
    }

    #[test]
    fn html_escapes_markup() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn text_table_aligns_columns() {
        let t = Table {
            header: vec!["run".into(), "IOPS".into()],
            rows: vec![vec!["a-long-name".into(), "5".into()]],
        };
        assert_eq!(t.to_text(), "run          IOPS\na-long-name     5\n");
    }
}
