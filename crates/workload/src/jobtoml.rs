//! Jobs written as TOML, with fio's option names.
//!
//! For people who keep every config in TOML. The keys are fio's option names (and aliases), the
//! values fio's values, so a job moves between the two formats line by line:
//! ```toml
//! [global]            # optional: defaults for every job
//! ioengine = "libaio"
//! direct = 1
//! bs = "4k"           # sizes as strings with fio suffixes, or plain integers (bytes)
//!
//! [[job]]
//! name = "randread-qd32"
//! rw = "randread"
//! iodepth = 32
//! time_based = true   # flags are booleans (or 1/0)
//! runtime = "10s"
//! ```
//! There is one `[global]` table, which applies to every `[[job]]`. A job without `name` is
//! called `job0`, `job1`, ... by position. Unknown keys are errors naming the key and listing the
//! accepted ones (serde `deny_unknown_fields`); every value then goes through the same builder as
//! fio files (`options.rs`), so errors point at the value's line.
//!
//! Value mapping: strings pass through, integers become their decimal text, booleans become
//! `1`/`0`. Floats, arrays and tables are errors (write `"zipf:1.2"`, `"1.5m"` is not a size).

use serde::Deserialize;
use toml::Spanned;

use crate::error::JobError;
use crate::job::JobFile;
use crate::options::{build_job, JobContext, RawOption};

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> u32 {
    let upto = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = upto.bytes().filter(|&b| b == b'\n').count() + 1;
    u32::try_from(line).unwrap_or(u32::MAX)
}

/// Declares the table of job options: one optional spanned value per fio option, with aliases,
/// and the conversion into [`RawOption`]s.
macro_rules! toml_options {
    ($($field:ident $(| $alias:literal)*),* $(,)?) => {
        /// One `[global]` or `[[job]]` table.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct TomlOptions {
            $( $(#[serde(alias = $alias)])* $field: Option<Spanned<toml::Value>>, )*
        }

        /// The canonical keys, for the test that keeps this table equal to the fio table.
        #[cfg(test)]
        const TOML_KEYS: &[&str] = &[$(stringify!($field)),*];

        impl TomlOptions {
            /// The set options in file order (so "last wins" pairs behave as in fio).
            fn raw_options(self, text: &str, source_name: &str) -> Result<Vec<RawOption>, JobError> {
                let mut out: Vec<(usize, RawOption)> = Vec::new();
                $(
                    if let Some(value) = self.$field {
                        let start = value.span().start;
                        out.push((start, to_raw(stringify!($field), value, text, source_name)?));
                    }
                )*
                out.sort_by_key(|(start, _)| *start);
                Ok(out.into_iter().map(|(_, o)| o).collect())
            }
        }
    };
}

toml_options! {
    name, description, filename,
    rw | "readwrite",
    rwmixread, rwmixwrite,
    bs | "blocksize",
    size,
    io_size | "io_limit",
    offset | "fileoffset",
    offset_increment, iodepth, numjobs,
    runtime | "timeout",
    time_based, ramp_time, number_ios, rate_iops, direct, buffered, ioengine, hipri,
    random_distribution, norandommap, randrepeat, randseed, thinktime,
    stonewall | "wait_for_previous",
    group_reporting, kb_base,
}

/// A whole TOML job file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    global: Option<TomlOptions>,
    #[serde(default)]
    job: Vec<Spanned<TomlOptions>>,
}

/// Converts one TOML value into the text form the builder reads.
fn to_raw(
    key: &str,
    value: Spanned<toml::Value>,
    text: &str,
    source_name: &str,
) -> Result<RawOption, JobError> {
    let line = line_of(text, value.span().start);
    let converted = match value.get_ref() {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Boolean(b) => Ok(if *b { "1" } else { "0" }.to_string()),
        other => Err(other.to_string()),
    };
    match converted {
        Ok(text_value) => Ok(RawOption {
            key: key.to_string(),
            value: Some(text_value),
            line,
        }),
        Err(shown) => Err(JobError::InvalidValue {
            source_name: source_name.to_string(),
            line,
            key: key.to_string(),
            value: shown,
            expected: "a string (\"4k\", \"randread\", \"zipf:1.2\"), an integer or a boolean"
                .into(),
        }),
    }
}

/// Parses a TOML job file; `source_name` prefixes every error message.
pub(crate) fn parse_toml(text: &str, source_name: &str) -> Result<JobFile, JobError> {
    let file: TomlFile = toml::from_str(text).map_err(|e| JobError::Toml {
        source_name: source_name.to_string(),
        line: e.span().map(|span| line_of(text, span.start)),
        message: e.message().to_string(),
    })?;
    if file.job.is_empty() {
        return Err(JobError::NoJobs {
            source_name: source_name.to_string(),
        });
    }
    let globals = match file.global {
        Some(global) => global.raw_options(text, source_name)?,
        None => Vec::new(),
    };
    let mut jobs = Vec::with_capacity(file.job.len());
    let mut previous_group = None;
    for (index, table) in file.job.into_iter().enumerate() {
        let section_line = line_of(text, table.span().start);
        let default_name = format!("job{index}");
        let mut options = globals.clone();
        options.extend(table.into_inner().raw_options(text, source_name)?);
        let ctx = JobContext {
            source_name,
            section_name: &default_name,
            section_line,
        };
        let job = build_job(&ctx, &options, previous_group)?;
        previous_group = Some(job.group);
        jobs.push(job);
    }
    Ok(JobFile { jobs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::OPTIONS;

    #[test]
    fn toml_keys_are_exactly_the_fio_options() {
        let fio: Vec<&str> = OPTIONS.iter().map(|d| d.name).collect();
        assert_eq!(TOML_KEYS, fio.as_slice());
    }

    #[test]
    fn line_of_counts_newlines() {
        let text = "a\nbb\nccc";
        assert_eq!(line_of(text, 0), 1);
        assert_eq!(line_of(text, 2), 2);
        assert_eq!(line_of(text, 5), 3);
        assert_eq!(line_of(text, 999), 3);
    }
}
