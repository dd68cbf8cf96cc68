//! A table of text cells, as the terminal, Markdown and HTML show it, and the HTML escaping its
//! cells (and every page's text) go through: what the study's reports, the published
//! comparison and the provenance section share, so none of them names the others.

use std::fmt::Write as _;

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

#[cfg(test)]
mod tests {
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
