//! The option table and the job builder shared by the fio and TOML readers.
//!
//! Both readers reduce a job to a list of [`RawOption`]s — `(key, value, line)` in the order the
//! job sees them: its `[global]` options first, then its own — and hand the list to
//! [`build_job`]. That one place knows every supported option, its fio meaning, its default and
//! its valid values, so the two file formats cannot drift apart and every error has the same
//! shape (bad value, line, what was expected).
//!
//! ## Worked example
//! `[global] bs=4k` then `[j] rw=randrw rwmixread=70 bs=8k` gives the list
//! `bs=4k (line 2), rw=randrw (4), rwmixread=70 (5), bs=8k (6)`; options apply in order, so the
//! job's own `bs=8k` overrides the global one (fio: the last setting wins), and the job gets
//! `block_size_bytes = 8192`, `read_pct = 70`.
//!
//! ## Decisions on options beyond the core set
//! * `group_reporting`, `stonewall`/`wait_for_previous`, `ramp_time`, `randseed`, `io_size`,
//!   `offset_increment`, `description`, `buffered`, `kb_base`: supported (see [`JobSpec`]).
//! * `randrepeat`: only `randrepeat=1` (fio's default). ullstack runs always repeat from the run
//!   seed; `randrepeat=0` (a different pattern every run) is rejected, `randseed` varies runs.
//! * `hipri` exists only for `io_uring` and `pvsync2`, as in fio; with another engine it is an
//!   error (fio drops such a job).
//! * `iodepth` with a synchronous engine is accepted as fio does; [`JobSpec::effective_iodepth`]
//!   says it has no effect.
//! * Everything else (e.g. `thread`, `bssplit`, `iodepth_batch_submit`, `verify`, `cpus_allowed`,
//!   `write_lat_log`) is an error naming the option and listing the supported ones.
//!
//! `kb_base` is looked up first and applies to every size of the job wherever it is written (fio
//! applies it only to values after it; writing it first, as everyone does, gives the same result).

use crate::error::JobError;
use crate::job::{
    Buffering, Completion, Distribution, FioEngine, JobSpec, JobStart, RandomMap, Reporting,
    RunUntil, RwPattern,
};
use crate::units::{parse_size, parse_time_ns, time_expected, KbBase, TimeUnit, SIZE_EXPECTED};

/// One `key[=value]` as written, with its 1-based line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawOption {
    pub key: String,
    pub value: Option<String>,
    pub line: u32,
}

/// Whether an option is a flag (bare, `=1` or `=0`) or needs a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueKind {
    Flag,
    Value,
}

/// A supported option: its canonical fio name, aliases and kind.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OptionDef {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub kind: ValueKind,
}

const fn opt(name: &'static str, aliases: &'static [&'static str], kind: ValueKind) -> OptionDef {
    OptionDef {
        name,
        aliases,
        kind,
    }
}

/// Every option a job file may use. The TOML reader's keys must match (a test checks it).
pub(crate) const OPTIONS: &[OptionDef] = &[
    opt("name", &[], ValueKind::Value),
    opt("description", &[], ValueKind::Value),
    opt("filename", &[], ValueKind::Value),
    opt("rw", &["readwrite"], ValueKind::Value),
    opt("rwmixread", &[], ValueKind::Value),
    opt("rwmixwrite", &[], ValueKind::Value),
    opt("bs", &["blocksize"], ValueKind::Value),
    opt("size", &[], ValueKind::Value),
    opt("io_size", &["io_limit"], ValueKind::Value),
    opt("offset", &["fileoffset"], ValueKind::Value),
    opt("offset_increment", &[], ValueKind::Value),
    opt("iodepth", &[], ValueKind::Value),
    opt("numjobs", &[], ValueKind::Value),
    opt("runtime", &["timeout"], ValueKind::Value),
    opt("time_based", &[], ValueKind::Flag),
    opt("ramp_time", &[], ValueKind::Value),
    opt("number_ios", &[], ValueKind::Value),
    opt("rate_iops", &[], ValueKind::Value),
    opt("direct", &[], ValueKind::Value),
    opt("buffered", &[], ValueKind::Value),
    opt("ioengine", &[], ValueKind::Value),
    opt("hipri", &[], ValueKind::Flag),
    opt("random_distribution", &[], ValueKind::Value),
    opt("norandommap", &[], ValueKind::Flag),
    opt("randrepeat", &[], ValueKind::Value),
    opt("randseed", &[], ValueKind::Value),
    opt("thinktime", &[], ValueKind::Value),
    opt("stonewall", &["wait_for_previous"], ValueKind::Flag),
    opt("group_reporting", &[], ValueKind::Flag),
    opt("kb_base", &[], ValueKind::Value),
];

/// The definition of `key` (canonical name or alias), if supported.
pub(crate) fn lookup(key: &str) -> Option<&'static OptionDef> {
    OPTIONS
        .iter()
        .find(|d| d.name == key || d.aliases.contains(&key))
}

/// The supported options as one line for error messages: `name, rw (readwrite), ...`.
pub(crate) fn supported_list() -> String {
    OPTIONS
        .iter()
        .map(|d| {
            if d.aliases.is_empty() {
                d.name.to_string()
            } else {
                format!("{} ({})", d.name, d.aliases.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Largest `numjobs` accepted: a typo guard (fio's own default `--max-jobs` is far lower).
const MAX_NUMJOBS: u64 = 65_536;
/// Largest `iodepth` accepted: NVMe queues hold at most 65 536 entries.
const MAX_IODEPTH: u64 = 65_536;
/// Granularity of block sizes and offsets: one logical sector.
const SECTOR_BYTES: u64 = 512;

/// A value and the line that set it.
#[derive(Clone, Debug)]
struct At<T> {
    value: T,
    line: u32,
}

/// Where messages point: the file name and the job being built.
pub(crate) struct JobContext<'a> {
    pub source_name: &'a str,
    pub section_name: &'a str,
    pub section_line: u32,
}

/// Options of one job as they are applied, before defaults and cross-checks.
#[derive(Default)]
struct Builder {
    name: Option<String>,
    description: Option<String>,
    filename: Option<String>,
    pattern: Option<RwPattern>,
    rwmix_read_pct: Option<u8>,
    block_size_bytes: Option<u64>,
    size_bytes: Option<At<u64>>,
    io_size_bytes: Option<u64>,
    offset_bytes: u64,
    offset_increment_bytes: u64,
    iodepth: Option<u32>,
    numjobs: Option<u32>,
    runtime_ns: Option<u64>,
    time_based: Option<At<bool>>,
    ramp_time_ns: u64,
    number_ios: Option<u64>,
    rate_iops: Option<u64>,
    buffering: Option<Buffering>,
    ioengine: Option<At<FioEngine>>,
    hipri: Option<At<bool>>,
    distribution: Option<Distribution>,
    norandommap: bool,
    randseed: Option<u64>,
    thinktime_ns: u64,
    stonewall: bool,
    group_reporting: bool,
}

/// Builds one job from its options in application order. `group` is the stonewall group of the
/// previous job (or `None` for the first job); the new job's group is returned inside the spec.
pub(crate) fn build_job(
    ctx: &JobContext<'_>,
    options: &[RawOption],
    previous_group: Option<u32>,
) -> Result<JobSpec, JobError> {
    let kb_base = find_kb_base(ctx, options)?;
    let mut builder = Builder::default();
    for option in options {
        builder.apply(ctx, option, kb_base)?;
    }
    builder.finish(ctx, kb_base, previous_group)
}

/// The job's `kb_base` (last setting wins), validated.
fn find_kb_base(ctx: &JobContext<'_>, options: &[RawOption]) -> Result<KbBase, JobError> {
    let mut kb_base = KbBase::default();
    for option in options.iter().filter(|o| o.key == "kb_base") {
        let value = option.value.as_deref().unwrap_or("");
        kb_base = match value.trim() {
            "1024" => KbBase::Binary1024,
            "1000" => KbBase::Decimal1000,
            _ => return Err(invalid(ctx, option, "1024 (fio default) or 1000")),
        };
    }
    Ok(kb_base)
}

fn invalid(ctx: &JobContext<'_>, option: &RawOption, expected: impl Into<String>) -> JobError {
    JobError::InvalidValue {
        source_name: ctx.source_name.to_string(),
        line: option.line,
        key: option.key.clone(),
        value: option.value.clone().unwrap_or_default(),
        expected: expected.into(),
    }
}

fn conflict(ctx: &JobContext<'_>, line: u32, message: String) -> JobError {
    JobError::Conflict {
        source_name: ctx.source_name.to_string(),
        line,
        job: ctx.section_name.to_string(),
        message,
    }
}

/// A flag's truth: bare or `1` is set, `0` is unset.
fn flag_value(ctx: &JobContext<'_>, option: &RawOption) -> Result<bool, JobError> {
    match option.value.as_deref().map(str::trim) {
        None | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(_) => Err(invalid(ctx, option, "no value (a bare flag), 1 or 0")),
    }
}

/// A boolean option that needs its value, fio's `bool` type: `1` or `0`.
fn bool_value(ctx: &JobContext<'_>, option: &RawOption, text: &str) -> Result<bool, JobError> {
    match text.trim() {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(invalid(ctx, option, "1 or 0")),
    }
}

/// Rejects `a,b` per-direction values with a specific message.
fn single_value(ctx: &JobContext<'_>, option: &RawOption, text: &str) -> Result<(), JobError> {
    if text.contains(',') || text.contains('/') {
        return Err(invalid(
            ctx,
            option,
            "a single value; per-direction values (read,write) are not supported",
        ));
    }
    Ok(())
}

fn size_value(
    ctx: &JobContext<'_>,
    option: &RawOption,
    text: &str,
    kb_base: KbBase,
) -> Result<u64, JobError> {
    single_value(ctx, option, text)?;
    parse_size(text, kb_base).map_err(|why| invalid(ctx, option, why))
}

/// A count in `min..=max`, written with fio's integer syntax.
fn count_value(
    ctx: &JobContext<'_>,
    option: &RawOption,
    text: &str,
    kb_base: KbBase,
    min: u64,
    max: u64,
) -> Result<u64, JobError> {
    let n = size_value(ctx, option, text, kb_base)?;
    if n < min || n > max {
        return Err(invalid(
            ctx,
            option,
            format!("a whole number from {min} to {max}"),
        ));
    }
    Ok(n)
}

fn sector_aligned(
    ctx: &JobContext<'_>,
    option: &RawOption,
    bytes: u64,
    what: &str,
) -> Result<u64, JobError> {
    if !bytes.is_multiple_of(SECTOR_BYTES) {
        return Err(invalid(
            ctx,
            option,
            format!("{what} that is a multiple of {SECTOR_BYTES} bytes (got {bytes} bytes)"),
        ));
    }
    Ok(bytes)
}

/// fio's `bs`: a positive multiple of 512, with a hint for the `4KiB` = 4000 surprise.
fn block_size_value(
    ctx: &JobContext<'_>,
    option: &RawOption,
    text: &str,
    kb_base: KbBase,
) -> Result<u64, JobError> {
    let bytes = size_value(ctx, option, text, kb_base)?;
    if bytes == 0 || bytes % SECTOR_BYTES != 0 {
        let mut expected = format!(
            "a positive multiple of {SECTOR_BYTES} bytes such as 512, 4k, 128k (got {bytes} bytes)"
        );
        if kb_base == KbBase::Binary1024 && text.to_ascii_lowercase().ends_with("ib") {
            expected.push_str(
                "; note fio reads the IEC suffix KiB/MiB as powers of 1000 under the default \
                 kb_base=1024: write 4k, or set kb_base=1000",
            );
        }
        return Err(invalid(ctx, option, expected));
    }
    Ok(bytes)
}

fn pattern_value(
    ctx: &JobContext<'_>,
    option: &RawOption,
    text: &str,
) -> Result<RwPattern, JobError> {
    let text = text.trim();
    RwPattern::from_fio(text).ok_or_else(|| {
        let names: Vec<&str> = RwPattern::FIO_NAMES.iter().map(|(n, _)| *n).collect();
        let mut expected = format!("one of {}", names.join(", "));
        if text.contains(':') {
            expected.push_str("; offset modifiers (rw=randread:8) are not supported");
        }
        if text.contains("trim") {
            expected.push_str("; trim patterns are not supported");
        }
        invalid(ctx, option, expected)
    })
}

fn engine_value(
    ctx: &JobContext<'_>,
    option: &RawOption,
    text: &str,
) -> Result<FioEngine, JobError> {
    FioEngine::from_fio(text.trim()).ok_or_else(|| {
        let names: Vec<&str> = FioEngine::FIO_NAMES.iter().map(|(n, _)| *n).collect();
        invalid(ctx, option, format!("one of {}", names.join(", ")))
    })
}

const DISTRIBUTION_EXPECTED: &str =
    "random, or zipf:THETA with THETA > 0 and THETA != 1 (e.g. zipf:1.2)";

fn distribution_value(
    ctx: &JobContext<'_>,
    option: &RawOption,
    text: &str,
) -> Result<Distribution, JobError> {
    let text = text.trim();
    if text == "random" {
        return Ok(Distribution::Uniform);
    }
    let Some(params) = text.strip_prefix("zipf:") else {
        let mut expected = DISTRIBUTION_EXPECTED.to_string();
        if ["pareto", "normal", "gauss", "zoned"]
            .iter()
            .any(|d| text.starts_with(d))
        {
            expected.push_str("; pareto, normal and zoned distributions are not supported");
        }
        return Err(invalid(ctx, option, expected));
    };
    if params.contains(':') {
        return Err(invalid(
            ctx,
            option,
            format!("{DISTRIBUTION_EXPECTED}; the centred form zipf:THETA:CENTER is not supported"),
        ));
    }
    let theta: f64 = params
        .parse()
        .map_err(|_| invalid(ctx, option, DISTRIBUTION_EXPECTED))?;
    if !theta.is_finite() || theta <= 0.0 || theta == 1.0 {
        // fio itself rejects theta = 1 ("zipf theta must be different than 1.0").
        return Err(invalid(ctx, option, DISTRIBUTION_EXPECTED));
    }
    Ok(Distribution::Zipf { theta })
}

fn percent_value(
    ctx: &JobContext<'_>,
    option: &RawOption,
    text: &str,
    kb_base: KbBase,
) -> Result<u8, JobError> {
    let pct = size_value(ctx, option, text, kb_base)
        .ok()
        .filter(|&p| p <= 100)
        .ok_or_else(|| invalid(ctx, option, "a percentage from 0 to 100"))?;
    Ok(pct as u8)
}

fn time_value(
    ctx: &JobContext<'_>,
    option: &RawOption,
    text: &str,
    unit: TimeUnit,
) -> Result<u64, JobError> {
    parse_time_ns(text, unit).map_err(|why| invalid(ctx, option, why))
}

/// `Some(n)` for n > 0; fio uses 0 to mean "no limit".
fn nonzero(n: u64) -> Option<u64> {
    (n > 0).then_some(n)
}

impl Builder {
    fn apply(
        &mut self,
        ctx: &JobContext<'_>,
        option: &RawOption,
        kb_base: KbBase,
    ) -> Result<(), JobError> {
        let Some(def) = lookup(&option.key) else {
            return Err(JobError::UnsupportedOption {
                source_name: ctx.source_name.to_string(),
                line: option.line,
                key: option.key.clone(),
                supported: supported_list(),
            });
        };
        if def.kind == ValueKind::Flag {
            let set = flag_value(ctx, option)?;
            return self.apply_flag(def.name, set, option.line);
        }
        let Some(text) = option.value.as_deref() else {
            return Err(JobError::MissingValue {
                source_name: ctx.source_name.to_string(),
                line: option.line,
                key: option.key.clone(),
                expected: value_expected(def.name),
            });
        };
        self.apply_value(ctx, def.name, option, text, kb_base)
    }

    fn apply_flag(&mut self, name: &str, set: bool, line: u32) -> Result<(), JobError> {
        match name {
            "time_based" => self.time_based = Some(At { value: set, line }),
            "hipri" => self.hipri = Some(At { value: set, line }),
            "norandommap" => self.norandommap = set,
            "stonewall" => self.stonewall = set,
            "group_reporting" => self.group_reporting = set,
            _ => unreachable!("flag `{name}` is in OPTIONS but not handled"),
        }
        Ok(())
    }

    fn apply_value(
        &mut self,
        ctx: &JobContext<'_>,
        name: &str,
        option: &RawOption,
        text: &str,
        kb_base: KbBase,
    ) -> Result<(), JobError> {
        let line = option.line;
        match name {
            "name" => self.name = Some(text.trim().to_string()),
            "description" => self.description = Some(text.trim().to_string()),
            "filename" => self.filename = Some(text.trim().to_string()),
            "rw" => self.pattern = Some(pattern_value(ctx, option, text)?),
            "rwmixread" => self.rwmix_read_pct = Some(percent_value(ctx, option, text, kb_base)?),
            "rwmixwrite" => {
                self.rwmix_read_pct = Some(100 - percent_value(ctx, option, text, kb_base)?)
            }
            "bs" => self.block_size_bytes = Some(block_size_value(ctx, option, text, kb_base)?),
            "size" => {
                let bytes = size_value(ctx, option, text, kb_base)?;
                if bytes == 0 {
                    return Err(invalid(ctx, option, "a positive number of bytes"));
                }
                self.size_bytes = Some(At { value: bytes, line });
            }
            "io_size" => self.io_size_bytes = nonzero(size_value(ctx, option, text, kb_base)?),
            "offset" => {
                let bytes = size_value(ctx, option, text, kb_base)?;
                self.offset_bytes = sector_aligned(ctx, option, bytes, "an offset")?;
            }
            "offset_increment" => {
                let bytes = size_value(ctx, option, text, kb_base)?;
                self.offset_increment_bytes = sector_aligned(ctx, option, bytes, "an increment")?;
            }
            "iodepth" => {
                self.iodepth = Some(count_value(ctx, option, text, kb_base, 1, MAX_IODEPTH)? as u32)
            }
            "numjobs" => {
                self.numjobs = Some(count_value(ctx, option, text, kb_base, 1, MAX_NUMJOBS)? as u32)
            }
            "runtime" => {
                self.runtime_ns = nonzero(time_value(ctx, option, text, TimeUnit::Seconds)?)
            }
            "ramp_time" => self.ramp_time_ns = time_value(ctx, option, text, TimeUnit::Seconds)?,
            "thinktime" => {
                self.thinktime_ns = time_value(ctx, option, text, TimeUnit::Microseconds)?
            }
            "number_ios" => self.number_ios = nonzero(size_value(ctx, option, text, kb_base)?),
            "rate_iops" => self.rate_iops = nonzero(size_value(ctx, option, text, kb_base)?),
            "direct" => {
                self.buffering = Some(match bool_value(ctx, option, text)? {
                    true => Buffering::Direct,
                    false => Buffering::Buffered,
                })
            }
            "buffered" => {
                self.buffering = Some(match bool_value(ctx, option, text)? {
                    true => Buffering::Buffered,
                    false => Buffering::Direct,
                })
            }
            "ioengine" => {
                self.ioengine = Some(At {
                    value: engine_value(ctx, option, text)?,
                    line,
                })
            }
            "random_distribution" => {
                self.distribution = Some(distribution_value(ctx, option, text)?)
            }
            "randrepeat" => {
                if !bool_value(ctx, option, text)? {
                    return Err(invalid(
                        ctx,
                        option,
                        "1: ullstack runs always repeat from the run seed; \
                         set randseed=N to vary the pattern on purpose",
                    ));
                }
            }
            "randseed" => self.randseed = Some(size_value(ctx, option, text, kb_base)?),
            "kb_base" => {} // applied before all other options, see find_kb_base
            _ => unreachable!("option `{name}` is in OPTIONS but not handled"),
        }
        Ok(())
    }

    fn finish(
        self,
        ctx: &JobContext<'_>,
        kb_base: KbBase,
        previous_group: Option<u32>,
    ) -> Result<JobSpec, JobError> {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| ctx.section_name.to_string());
        let pattern = self.pattern.unwrap_or(RwPattern::Read);
        let read_pct = match pattern {
            RwPattern::Read | RwPattern::RandRead => 100,
            RwPattern::Write | RwPattern::RandWrite => 0,
            RwPattern::ReadWrite | RwPattern::RandRw => self.rwmix_read_pct.unwrap_or(50),
        };
        let block_size_bytes = self.block_size_bytes.unwrap_or(4096);
        if let Some(size) = &self.size_bytes {
            if size.value < block_size_bytes {
                return Err(conflict(
                    ctx,
                    size.line,
                    format!(
                        "size={} bytes is smaller than one block (bs={block_size_bytes} bytes)",
                        size.value
                    ),
                ));
            }
        }
        let run_until = match &self.time_based {
            Some(At { value: true, line }) => {
                if self.runtime_ns.is_none() {
                    return Err(conflict(
                        ctx,
                        *line,
                        "time_based needs a runtime (e.g. runtime=10s), or the job never ends"
                            .into(),
                    ));
                }
                RunUntil::Runtime
            }
            _ => RunUntil::IoDone,
        };
        let ioengine = self.ioengine.as_ref().map_or(FioEngine::Psync, |e| e.value);
        let completion = match &self.hipri {
            Some(hipri) if !ioengine.supports_hipri() => {
                let engine_at = self
                    .ioengine
                    .as_ref()
                    .map_or("by default".to_string(), |e| format!("at line {}", e.line));
                return Err(conflict(
                    ctx,
                    hipri.line,
                    format!(
                        "hipri needs ioengine=io_uring or ioengine=pvsync2, but ioengine is {} ({engine_at})",
                        ioengine.fio_name()
                    ),
                ));
            }
            Some(At { value: true, .. }) => Completion::Polled,
            _ => Completion::Interrupt,
        };
        let distribution = self.distribution.unwrap_or(Distribution::Uniform);
        let random_map = match (self.norandommap, distribution) {
            (false, Distribution::Uniform) => RandomMap::CoverEachBlock,
            _ => RandomMap::Off,
        };
        let start = if self.stonewall {
            JobStart::AfterPrevious
        } else {
            JobStart::WithPrevious
        };
        let group = match (previous_group, start) {
            (None, _) => 0,
            (Some(g), JobStart::WithPrevious) => g,
            (Some(g), JobStart::AfterPrevious) => g + 1,
        };
        Ok(JobSpec {
            name,
            description: self.description,
            filename: self.filename,
            pattern,
            read_pct,
            block_size_bytes,
            size_bytes: self.size_bytes.map(|s| s.value),
            io_size_bytes: self.io_size_bytes,
            offset_bytes: self.offset_bytes,
            offset_increment_bytes: self.offset_increment_bytes,
            iodepth: self.iodepth.unwrap_or(1),
            numjobs: self.numjobs.unwrap_or(1),
            runtime_ns: self.runtime_ns,
            run_until,
            ramp_time_ns: self.ramp_time_ns,
            number_ios: self.number_ios,
            rate_iops: self.rate_iops,
            buffering: self.buffering.unwrap_or(Buffering::Buffered),
            ioengine,
            engine: ioengine.class(),
            completion,
            distribution,
            random_map,
            thinktime_ns: self.thinktime_ns,
            randseed: self.randseed,
            start,
            group,
            reporting: if self.group_reporting {
                Reporting::PerGroup
            } else {
                Reporting::PerJob
            },
            kb_base,
            line: ctx.section_line,
        })
    }
}

/// What a value option expects, for "needs a value" messages.
fn value_expected(name: &str) -> String {
    match name {
        "rw" => {
            let names: Vec<&str> = RwPattern::FIO_NAMES.iter().map(|(n, _)| *n).collect();
            format!("one of {}", names.join(", "))
        }
        "ioengine" => {
            let names: Vec<&str> = FioEngine::FIO_NAMES.iter().map(|(n, _)| *n).collect();
            format!("one of {}", names.join(", "))
        }
        "direct" | "buffered" | "randrepeat" => "1 or 0".into(),
        "rwmixread" | "rwmixwrite" => "a percentage from 0 to 100".into(),
        "runtime" | "ramp_time" => time_expected(TimeUnit::Seconds),
        "thinktime" => time_expected(TimeUnit::Microseconds),
        "random_distribution" => DISTRIBUTION_EXPECTED.into(),
        "kb_base" => "1024 or 1000".into(),
        "name" | "description" | "filename" => "text".into(),
        _ => SIZE_EXPECTED.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid value for every option, so each match arm is reached (no `unreachable!`).
    fn sample_value(name: &str) -> Option<&'static str> {
        Some(match name {
            "time_based" | "hipri" | "norandommap" | "stonewall" | "group_reporting" => {
                return None
            }
            "name" | "description" | "filename" => "x",
            "rw" => "randrw",
            "rwmixread" | "rwmixwrite" => "30",
            "runtime" | "ramp_time" | "thinktime" => "1",
            "direct" | "buffered" | "randrepeat" => "1",
            "ioengine" => "io_uring",
            "random_distribution" => "zipf:1.1",
            "kb_base" => "1000",
            _ => "8192",
        })
    }

    #[test]
    fn every_option_and_alias_is_handled() {
        let ctx = JobContext {
            source_name: "t",
            section_name: "j",
            section_line: 1,
        };
        for def in OPTIONS {
            for key in std::iter::once(&def.name).chain(def.aliases) {
                let mut options = vec![RawOption {
                    key: key.to_string(),
                    value: sample_value(def.name).map(str::to_string),
                    line: 2,
                }];
                if matches!(def.name, "time_based" | "hipri") {
                    options.push(RawOption {
                        key: "runtime".into(),
                        value: Some("1".into()),
                        line: 3,
                    });
                    options.push(RawOption {
                        key: "ioengine".into(),
                        value: Some("io_uring".into()),
                        line: 4,
                    });
                }
                let built = build_job(&ctx, &options, None);
                assert!(built.is_ok(), "{key}: {:?}", built.err());
            }
        }
    }

    #[test]
    fn supported_list_names_every_option() {
        let list = supported_list();
        for def in OPTIONS {
            assert!(list.contains(def.name), "{}", def.name);
        }
        assert!(lookup("thread").is_none());
        assert_eq!(lookup("readwrite").map(|d| d.name), Some("rw"));
    }
}
