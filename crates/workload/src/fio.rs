//! Reading fio job files (the INI dialect fio uses).
//!
//! A job file is a list of sections. `[global]` holds defaults; every other section is a job
//! named by its header. Inside a section each line is `key=value` or a bare flag (`time_based`,
//! `norandommap`); `;` and `#` start comments, at the start of a line or after a value; blank
//! lines and surrounding whitespace do not matter. Keys and values are case sensitive, as in fio.
//!
//! ## Inheritance, as fio does it
//! A job inherits every `[global]` option written *before* its own header; a later `[global]`
//! adds to (or overrides) the defaults for the jobs after it only:
//! ```text
//! [global]        ; line 1
//! bs=4k
//! [a]             ; a: bs=4k
//! [global]
//! bs=8k
//! [b]             ; b: bs=8k
//! bs=16k          ; b's own setting wins: bs=16k
//! ```
//! The reader turns each job into its options in application order (globals, then its own) and
//! hands them to the shared builder (`options.rs`), which validates values and applies fio's
//! defaults; the last setting of an option wins.
//!
//! ## What it leaves out
//! `include` directives, `$VAR`/`${VAR}` expansion and fio's command-line-only options. Options
//! written before the first section are an error, as in fio. Compared with fio 3.33, the reader
//! trims whitespace around keys and values (fio reads `bs = 16k` as 16 bytes).

use crate::error::JobError;
use crate::job::JobFile;
use crate::options::{build_job, JobContext, RawOption};

/// The section holding defaults.
const GLOBAL_SECTION: &str = "global";

/// A job section as read: its header and own options.
struct JobSection {
    name: String,
    line: u32,
    /// `[global]` options in force at the header, then the job's own.
    options: Vec<RawOption>,
}

/// Which section the reader is in.
enum Current {
    /// Before the first header: options here are an error.
    Nothing,
    Global,
    /// Index into the job list.
    Job(usize),
}

/// Cuts a trailing `;` or `#` comment.
fn strip_comment(line: &str) -> &str {
    match line.find([';', '#']) {
        Some(at) => &line[..at],
        None => line,
    }
}

fn syntax(source_name: &str, line: u32, message: String) -> JobError {
    JobError::Syntax {
        source_name: source_name.to_string(),
        line,
        message,
    }
}

/// Splits the text into job sections with their inherited options.
fn read_sections(text: &str, source_name: &str) -> Result<Vec<JobSection>, JobError> {
    let mut globals: Vec<RawOption> = Vec::new();
    let mut jobs: Vec<JobSection> = Vec::new();
    let mut current = Current::Nothing;
    for (index, raw_line) in text.lines().enumerate() {
        let line = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let content = strip_comment(raw_line).trim();
        if content.is_empty() {
            continue;
        }
        if let Some(header) = content.strip_prefix('[') {
            let Some(name) = header.strip_suffix(']') else {
                return Err(syntax(
                    source_name,
                    line,
                    format!("section header `{content}` has no closing `]`"),
                ));
            };
            let name = name.trim();
            if name.is_empty() {
                return Err(syntax(source_name, line, "empty section name `[]`".into()));
            }
            current = if name == GLOBAL_SECTION {
                Current::Global
            } else {
                jobs.push(JobSection {
                    name: name.to_string(),
                    line,
                    options: globals.clone(),
                });
                Current::Job(jobs.len() - 1)
            };
            continue;
        }
        let option = read_option(content, source_name, line)?;
        match current {
            Current::Nothing => {
                return Err(syntax(
                    source_name,
                    line,
                    format!("option `{content}` is outside of any [section]; put it under [global] or a job"),
                ))
            }
            Current::Global => globals.push(option),
            Current::Job(at) => jobs[at].options.push(option),
        }
    }
    Ok(jobs)
}

/// Reads `key=value` or a bare `key`.
fn read_option(content: &str, source_name: &str, line: u32) -> Result<RawOption, JobError> {
    let (key, value) = match content.split_once('=') {
        Some((key, value)) => (key.trim(), Some(value.trim().to_string())),
        None => (content, None),
    };
    if key.is_empty() {
        return Err(syntax(
            source_name,
            line,
            format!("`{content}` has no option name before `=`"),
        ));
    }
    if key.contains(char::is_whitespace) {
        let message = if key.starts_with("include") {
            format!("`{content}`: include directives are not supported; inline the file")
        } else {
            format!("`{content}` is not `key=value` or a bare flag")
        };
        return Err(syntax(source_name, line, message));
    }
    Ok(RawOption {
        key: key.to_string(),
        value,
        line,
    })
}

/// Parses fio job-file text; `source_name` (usually the path) prefixes every error message.
pub(crate) fn parse_fio(text: &str, source_name: &str) -> Result<JobFile, JobError> {
    let sections = read_sections(text, source_name)?;
    if sections.is_empty() {
        return Err(JobError::NoJobs {
            source_name: source_name.to_string(),
        });
    }
    let mut jobs = Vec::with_capacity(sections.len());
    let mut previous_group = None;
    for section in &sections {
        let ctx = JobContext {
            source_name,
            section_name: &section.name,
            section_line: section.line,
        };
        let job = build_job(&ctx, &section.options, previous_group)?;
        previous_group = Some(job.group);
        jobs.push(job);
    }
    Ok(JobFile { jobs })
}
