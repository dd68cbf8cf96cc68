//! Remote tenants: what a remote-flash load is made of, and how it is written down —
//! `--tenant key=value,...` on `ullstack bench`'s command line or `[[tenant]]` tables in a TOML
//! scenario file. Both go through one parser ([`parse_tenant_pairs`]) so they accept exactly the
//! same keys and give the same errors. The same types drive the real load generator
//! (`ullstack bench`, crate `client`) and the simulated remote server (`sim::remote`), so one
//! scenario file drives both: `bench` ignores the file's `[sim]` table, which tells the simulator
//! what server, network and device to model.
//!
//! # Tenant keys
//! | key | meaning | default |
//! | --- | --- | --- |
//! | `name` | tenant name sent in HELLO (required) | |
//! | `secret` | its secret | empty |
//! | `volume` | volume to open | `default` |
//! | `class` | `lc` (latency-critical, needs `iops` and `p95`) or `be` (best-effort) | `be` |
//! | `iops` | LC only: the SLO's IOPS (registered; also the offered rate unless `rate`/`qd`) | |
//! | `p95` | LC only: the SLO's p95 read latency, e.g. `500us`, `2ms` | |
//! | `rate` | open loop: offered IOPS, Poisson arrivals | LC: `iops` |
//! | `qd` | closed loop: requests kept in flight per tenant | BE: 16 |
//! | `read` | percentage of reads, 0..=100 | 100 |
//! | `size` | request size, e.g. `4k`, `1k`, `128k` | `4k` |
//! | `pattern` | `random`, `seq`, `zipf` or `zipf:THETA` (θ default 0.99) | `random` |
//! | `conns` | connections (the load and the SLO's IOPS are split evenly over them) | 1 |
//! | `count` | replicate this tenant N times, named `NAME-0` .. `NAME-(N-1)` | 1 |
//! | `fua` | `yes` = every write is FUA | `no` |
//! | `register` | `no` = skip REGISTER and use the session's default best-effort flow | `yes` |
//! | `span` | only address the first SPAN bytes of the volume, e.g. `1g` | whole volume |
//! | `trace` | replay a block trace file (any format `ullstack trace stats` reads; see `trace`): its reads, writes, sizes and times; excludes `rate`, `read`, `pattern` | |
//! | `speed` | with `trace` and no `qd`: trace times are divided by this | 1 |
//! | `trace_format` | with `trace`: `blkparse`, `msr`, `spc`, `csv`, `mqsim` or `disksim` (`--trace-format`) | detected |
//! | `trace_device` | with `trace`: only this device's records, a number or `MAJ:MIN` (`--trace-device`) | all |
//! | `from`, `to` | with `trace`: only records with `from <= time < to`, trace time from its first record, e.g. `10s`, `250ms` (`--from`, `--to`) | whole trace |
//! | `skip_bad_lines` | with `trace`: `yes` = count malformed lines instead of stopping (`--skip-bad-lines`) | `no` |
//!
//! Sizes (`size`, `span`), times (`p95`, `from`, `to`, a scenario's `duration` and `warmup`) and
//! counts (`iops`, `rate`, `qd`, `ios`, …) are written in the tree's one grammar,
//! `engine::units`: `4k` = `4KiB` = 4096 but `4KB` = 4000; a bare time is seconds; `120k` IOPS
//! is 120,000.
//!
//! Example (reflex scenario 1, tenant A):
//! `name=A,class=lc,iops=120000,p95=500us,read=100,size=4k` → an LC tenant registering
//! (p95 500 µs, 120 000 IOPS, 100 % reads, 4096 B) and offering 120 000 IOPS open-loop.

use std::collections::BTreeMap;

use engine::units;

use thiserror::Error;

/// Whether a tenant's writes ask for durability before the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Acknowledged once the device has the data (its write buffer counts).
    WriteBack,
    /// Forced unit access: every write is durable before its reply.
    Fua,
}

/// Keys a tenant spec accepts, for error messages.
pub const TENANT_KEYS: &[&str] = &[
    "name",
    "secret",
    "volume",
    "class",
    "iops",
    "p95",
    "rate",
    "qd",
    "read",
    "size",
    "pattern",
    "conns",
    "count",
    "fua",
    "register",
    "span",
    "trace",
    "speed",
    "trace_format",
    "trace_device",
    "from",
    "to",
    "skip_bad_lines",
];
/// The tenant keys that only make sense with `trace`.
const TRACE_ONLY_KEYS: &[&str] = &[
    "speed",
    "trace_format",
    "trace_device",
    "from",
    "to",
    "skip_bad_lines",
];
/// Keys at the top of a scenario file.
pub const SCENARIO_KEYS: &[&str] = &[
    "server", "duration", "ios", "warmup", "threads", "seed", "tenant", "sim",
];

/// Default closed-loop depth of a best-effort tenant with neither `rate` nor `qd`.
pub const BE_DEFAULT_QUEUE_DEPTH: u32 = 16;
/// Default Zipf exponent θ, in thousandths (0.99: the YCSB default).
pub const ZIPF_DEFAULT_THETA_MILLI: u32 = 990;

/// A spec that cannot be used, naming the bad value and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{context}: {problem}")]
pub struct SpecError {
    pub context: String,
    pub problem: String,
}

fn err(context: impl Into<String>, problem: impl Into<String>) -> SpecError {
    SpecError {
        context: context.into(),
        problem: problem.into(),
    }
}

/// The tenant's class as registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassSpec {
    LatencyCritical { p95_read_latency_ns: u64, iops: u64 },
    BestEffort,
}

/// How load is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// Poisson arrivals at this many I/Os per second, whatever the server does.
    Open { iops: u64 },
    /// Keep this many requests in flight.
    Closed { queue_depth: u32 },
    /// A trace's own times divided by the speed (`speed_per_mille` = speed × 1000).
    Trace { speed_per_mille: u64 },
}

/// Where requests go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Random,
    Sequential,
    /// Zipf-distributed block popularity with exponent θ (thousandths).
    Zipf {
        theta_milli: u32,
    },
}

/// Whether the tenant registers a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registration {
    /// REGISTER with the class (and SLO) on each connection.
    Register,
    /// Use handle 0, the session's default best-effort flow.
    DefaultFlow,
}

/// One tenant of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    pub name: String,
    pub secret: String,
    pub volume: String,
    pub class: ClassSpec,
    pub registration: Registration,
    pub load: Load,
    pub connections: u32,
    pub read_pct: u8,
    pub size_bytes: u32,
    pub pattern: Pattern,
    pub write_mode: WriteMode,
    pub span_bytes: Option<u64>,
    /// A block trace to replay instead of the synthetic requests (`load` is then
    /// [`Load::Trace`] or, with `qd`, [`Load::Closed`]; `size_bytes` caps one request).
    pub trace: Option<TraceLoad>,
}

/// Which trace a tenant replays and which of its records: the simulator's `--trace-format`,
/// `--trace-device`, `--from`, `--to` and `--skip-bad-lines`, as tenant keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLoad {
    pub path: std::path::PathBuf,
    /// `None`: detected from the first lines.
    pub format: Option<crate::trace::TraceFormat>,
    /// Only this device's records.
    pub device: Option<u32>,
    /// Window start, trace time (ns from the trace's first record).
    pub from_ns: u64,
    /// Window end (exclusive), trace time.
    pub to_ns: Option<u64>,
    pub bad_lines: crate::trace::BadLines,
}

impl TraceLoad {
    /// The whole of `path`, format detected, strict.
    pub fn new(path: impl Into<std::path::PathBuf>) -> TraceLoad {
        TraceLoad {
            path: path.into(),
            format: None,
            device: None,
            from_ns: 0,
            to_ns: None,
            bad_lines: crate::trace::BadLines::Fail,
        }
    }
}

/// The largest request a trace tenant sends when its spec gives no `size` (a trace's own
/// sizes above it are split).
pub const TRACE_MAX_REQUEST_BYTES: u32 = 1 << 20;

/// Parse `key=value,key=value` (one `--tenant` argument); `count` may expand it to several.
pub fn parse_tenant(arg: &str) -> Result<Vec<TenantSpec>, SpecError> {
    let mut pairs = Vec::new();
    for part in arg.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            err(
                format!("--tenant {arg:?}"),
                format!("{part:?} is not key=value"),
            )
        })?;
        pairs.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    parse_tenant_pairs(&pairs, &format!("--tenant {arg:?}"))
}

/// Parse a tenant from key/value pairs (shared by the command line and scenario files).
pub fn parse_tenant_pairs(
    pairs: &[(String, String)],
    context: &str,
) -> Result<Vec<TenantSpec>, SpecError> {
    let mut map: BTreeMap<&str, &str> = BTreeMap::new();
    for (k, v) in pairs {
        if !TENANT_KEYS.contains(&k.as_str()) {
            return Err(err(
                context,
                format!(
                    "unknown key {k:?}; accepted keys: {}",
                    TENANT_KEYS.join(", ")
                ),
            ));
        }
        if map.insert(k, v).is_some() {
            return Err(err(context, format!("key {k:?} given twice")));
        }
    }
    let name = map
        .get("name")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| err(context, "missing name=NAME"))?
        .to_string();
    let ctx = format!("tenant {name:?}");
    let ctx = ctx.as_str();
    let num = |key: &str| -> Result<Option<u64>, SpecError> {
        map.get(key)
            .map(|v| units::count(v).map_err(|e| err(ctx, format!("{key}: {e}"))))
            .transpose()
    };
    let class_name = map.get("class").copied().unwrap_or("be");
    let iops = num("iops")?;
    let p95 = map
        .get("p95")
        .map(|v| units::duration_ns(v).map_err(|e| err(ctx, format!("p95: {e}"))))
        .transpose()?;
    let class = match class_name {
        "lc" | "LC" => {
            let iops = iops.ok_or_else(|| err(ctx, "class=lc needs iops=N (the SLO's IOPS)"))?;
            let p95 = p95.ok_or_else(|| err(ctx, "class=lc needs p95=LATENCY (e.g. 500us)"))?;
            if iops == 0 || p95 == 0 {
                return Err(err(ctx, "class=lc needs iops and p95 greater than 0"));
            }
            ClassSpec::LatencyCritical {
                p95_read_latency_ns: p95,
                iops,
            }
        }
        "be" | "BE" => {
            if iops.is_some() || p95.is_some() {
                return Err(err(
                    ctx,
                    "class=be has no SLO: drop iops=/p95= (use rate=N for an open-loop rate)",
                ));
            }
            ClassSpec::BestEffort
        }
        other => return Err(err(ctx, format!("class={other:?}: expected lc or be"))),
    };
    let rate = num("rate")?;
    let qd = num("qd")?;
    let trace = match map.get("trace") {
        None => {
            if let Some(key) = TRACE_ONLY_KEYS.iter().find(|k| map.contains_key(**k)) {
                return Err(err(ctx, format!("{key}= needs trace=FILE")));
            }
            None
        }
        Some(path) => Some(trace_load(path, &map, ctx)?),
    };
    let speed = map
        .get("speed")
        .map(|v| {
            v.parse::<f64>()
                .ok()
                .and_then(|f| crate::trace::Pacing::open_loop(f).ok())
                .ok_or_else(|| {
                    err(
                        ctx,
                        format!("speed={v:?}: expected a factor from 0.001 to 1000000"),
                    )
                })
        })
        .transpose()?;
    if trace.is_some() {
        for key in ["rate", "read", "pattern"] {
            if map.contains_key(key) {
                return Err(err(
                    ctx,
                    format!("{key}= and trace= exclude each other: the trace decides"),
                ));
            }
        }
        if speed.is_some() && qd.is_some() {
            return Err(err(
                ctx,
                "speed= (open loop at the trace's times) and qd= (closed loop) exclude each other",
            ));
        }
    }
    let load = match (rate, qd, class) {
        _ if trace.is_some() && qd.is_none() => Load::Trace {
            speed_per_mille: match speed {
                Some(crate::trace::Pacing::OpenLoop { speed_per_mille }) => speed_per_mille,
                _ => crate::trace::replay::SPEED_SCALE,
            },
        },
        (Some(_), Some(_), _) => {
            return Err(err(
                ctx,
                "rate= (open loop) and qd= (closed loop) exclude each other",
            ))
        }
        (Some(0), None, _) => return Err(err(ctx, "rate=0: expected a positive IOPS rate")),
        (Some(r), None, _) => Load::Open { iops: r },
        (None, Some(q), _) => {
            let q = u32::try_from(q)
                .ok()
                .filter(|&q| q > 0)
                .ok_or_else(|| err(ctx, format!("qd={q}: expected 1..=4294967295")))?;
            Load::Closed { queue_depth: q }
        }
        (None, None, ClassSpec::LatencyCritical { iops, .. }) => Load::Open { iops },
        (None, None, ClassSpec::BestEffort) => Load::Closed {
            queue_depth: BE_DEFAULT_QUEUE_DEPTH,
        },
    };
    let read_pct = match num("read")? {
        None => 100,
        Some(r) if r <= 100 => r as u8,
        Some(r) => return Err(err(ctx, format!("read={r}: expected a percentage 0..=100"))),
    };
    let size_bytes = match map.get("size") {
        None if trace.is_some() => TRACE_MAX_REQUEST_BYTES,
        None => 4096,
        Some(v) => {
            let bytes = units::bytes(v).map_err(|e| err(ctx, e.to_string()))?;
            u32::try_from(bytes)
                .ok()
                .filter(|&s| s > 0)
                .ok_or_else(|| err(ctx, format!("size={v:?}: expected 1 byte to 4 GiB")))?
        }
    };
    let pattern = match map.get("pattern").copied() {
        None | Some("random") | Some("rand") => Pattern::Random,
        Some("seq") | Some("sequential") => Pattern::Sequential,
        Some("zipf") => Pattern::Zipf {
            theta_milli: ZIPF_DEFAULT_THETA_MILLI,
        },
        Some(p) => match p.strip_prefix("zipf:").and_then(|t| t.parse::<f64>().ok()) {
            Some(theta) if theta > 0.0 && theta < 10.0 => Pattern::Zipf {
                theta_milli: (theta * 1000.0).round() as u32,
            },
            _ => {
                return Err(err(
                    ctx,
                    format!(
                        "pattern={p:?}: expected random, seq, zipf or zipf:THETA (0 < THETA < 10)"
                    ),
                ))
            }
        },
    };
    let connections = match num("conns")? {
        None => 1,
        Some(c) if (1..=65_536).contains(&c) => c as u32,
        Some(c) => return Err(err(ctx, format!("conns={c}: expected 1..=65536"))),
    };
    let count = match num("count")? {
        None => 1,
        Some(c) if (1..=100_000).contains(&c) => c,
        Some(c) => return Err(err(ctx, format!("count={c}: expected 1..=100000"))),
    };
    let yes_no = |key: &str, default: bool| -> Result<bool, SpecError> {
        match map.get(key).copied() {
            None => Ok(default),
            Some("yes" | "true" | "1" | "on") => Ok(true),
            Some("no" | "false" | "0" | "off") => Ok(false),
            Some(v) => Err(err(ctx, format!("{key}={v:?}: expected yes or no"))),
        }
    };
    let write_mode = if yes_no("fua", false)? {
        WriteMode::Fua
    } else {
        WriteMode::WriteBack
    };
    let registration = if yes_no("register", true)? {
        Registration::Register
    } else {
        Registration::DefaultFlow
    };
    if registration == Registration::DefaultFlow
        && matches!(class, ClassSpec::LatencyCritical { .. })
    {
        return Err(err(ctx, "register=no only makes sense for class=be"));
    }
    let span_bytes = map
        .get("span")
        .map(|v| {
            let span = units::bytes(v).map_err(|e| err(ctx, format!("span: {e}")))?;
            if span < u64::from(size_bytes) {
                return Err(err(
                    ctx,
                    format!("span={v:?}: expected a size of at least size= ({size_bytes} bytes)"),
                ));
            }
            Ok(span)
        })
        .transpose()?;
    let base = TenantSpec {
        name: name.clone(),
        secret: map.get("secret").copied().unwrap_or("").to_owned(),
        volume: map.get("volume").copied().unwrap_or("default").to_owned(),
        class,
        registration,
        load,
        connections,
        read_pct,
        size_bytes,
        pattern,
        write_mode,
        span_bytes,
        trace,
    };
    if count == 1 {
        return Ok(vec![base]);
    }
    Ok((0..count)
        .map(|i| TenantSpec {
            name: format!("{name}-{i}"),
            ..base.clone()
        })
        .collect())
}

/// The `trace_*`, `from`, `to` and `skip_bad_lines` keys of a tenant replaying `path`.
fn trace_load(path: &str, map: &BTreeMap<&str, &str>, ctx: &str) -> Result<TraceLoad, SpecError> {
    use crate::trace::{parse_device, BadLines, TraceFormat};
    if path.is_empty() {
        return Err(err(ctx, "trace=\"\": expected a trace file"));
    }
    let format = map
        .get("trace_format")
        .map(|v| {
            TraceFormat::named(v).map_err(|_| {
                err(
                    ctx,
                    format!(
                        "trace_format={v:?}: expected one of {}",
                        TraceFormat::known()
                    ),
                )
            })
        })
        .transpose()?;
    let device = map
        .get("trace_device")
        .map(|v| {
            // `MAJ:MIN` (lsblk's form) on the command line, where a comma separates keys.
            parse_device(v).map_err(|_| {
                err(
                    ctx,
                    format!("trace_device={v:?}: expected a device number (below 2^32) or MAJ:MIN"),
                )
            })
        })
        .transpose()?;
    let time = |key: &str| {
        map.get(key)
            .map(|v| units::duration_ns(v).map_err(|e| err(ctx, format!("{key}: {e}"))))
            .transpose()
    };
    let from_ns = time("from")?.unwrap_or(0);
    let to_ns = time("to")?;
    if to_ns.is_some_and(|to| to <= from_ns) {
        return Err(err(
            ctx,
            format!(
                "to={:?}: expected a time after from={:?}",
                map.get("to").copied().unwrap_or_default(),
                map.get("from").copied().unwrap_or("0")
            ),
        ));
    }
    let bad_lines = match map.get("skip_bad_lines").copied() {
        None | Some("no" | "false" | "0" | "off") => BadLines::Fail,
        Some("yes" | "true" | "1" | "on") => BadLines::Skip,
        Some(v) => {
            return Err(err(
                ctx,
                format!("skip_bad_lines={v:?}: expected yes or no"),
            ))
        }
    };
    Ok(TraceLoad {
        path: path.into(),
        format,
        device,
        from_ns,
        to_ns,
        bad_lines,
    })
}

/// A scenario file's contents (command-line flags override its globals).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scenario {
    pub server: Option<String>,
    pub duration_ns: Option<u64>,
    pub ios: Option<u64>,
    pub warmup_ns: Option<u64>,
    pub threads: Option<usize>,
    pub seed: Option<u64>,
    pub tenants: Vec<TenantSpec>,
    /// The `[sim]` table, kept as TOML for the simulator (`sim::remote` reads it; `bench`
    /// ignores it).
    pub sim: Option<toml::Table>,
}

/// Parse a TOML scenario: top-level `server`, `duration`, `ios`, `warmup`, `threads`, `seed`,
/// `[[tenant]]` tables with the tenant keys above, and an optional `[sim]` table.
pub fn parse_scenario(text: &str, path: &str) -> Result<Scenario, SpecError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| err(path, format!("not valid TOML: {e}")))?;
    let mut s = Scenario::default();
    for (key, value) in &table {
        let ctx = format!("{path}: {key}");
        let as_text = || scalar_text(value).ok_or_else(|| err(&ctx, "expected a string or number"));
        match key.as_str() {
            "server" => s.server = Some(as_text()?),
            "duration" => {
                let v = as_text()?;
                s.duration_ns = Some(units::duration_ns(&v).map_err(|e| err(&ctx, e.to_string()))?)
            }
            "warmup" => {
                let v = as_text()?;
                s.warmup_ns = Some(units::duration_ns(&v).map_err(|e| err(&ctx, e.to_string()))?)
            }
            "ios" => {
                let v = as_text()?;
                s.ios = Some(units::count(&v).map_err(|e| err(&ctx, e.to_string()))?)
            }
            "threads" => {
                let v = as_text()?;
                s.threads = Some(
                    units::count(&v)
                        .ok()
                        .filter(|&t| (1..=1024).contains(&t))
                        .ok_or_else(|| err(&ctx, format!("{v:?}: expected 1..=1024")))?
                        as usize,
                )
            }
            "seed" => {
                let v = as_text()?;
                s.seed = Some(
                    v.parse()
                        .map_err(|_| err(&ctx, format!("{v:?}: expected an integer")))?,
                )
            }
            "sim" => {
                s.sim = Some(
                    value
                        .as_table()
                        .ok_or_else(|| err(&ctx, "expected a [sim] table"))?
                        .clone(),
                )
            }
            "tenant" => {
                let tenants = value
                    .as_array()
                    .ok_or_else(|| err(&ctx, "expected [[tenant]] tables"))?;
                for (i, t) in tenants.iter().enumerate() {
                    let tctx = format!("{path}: tenant #{}", i + 1);
                    let t = t.as_table().ok_or_else(|| err(&tctx, "expected a table"))?;
                    let mut pairs = Vec::new();
                    for (k, v) in t {
                        let text = scalar_text(v).ok_or_else(|| {
                            err(&tctx, format!("{k}: expected a string, number or boolean"))
                        })?;
                        pairs.push((k.clone(), text));
                    }
                    s.tenants.extend(parse_tenant_pairs(&pairs, &tctx)?);
                }
            }
            other => {
                return Err(err(
                    path,
                    format!(
                        "unknown key {other:?}; accepted keys: {}",
                        SCENARIO_KEYS.join(", ")
                    ),
                ))
            }
        }
    }
    Ok(s)
}

fn scalar_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(if *b { "yes" } else { "no" }.to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse() {
        // One grammar for the tree (`engine::units`): KB is SI, KiB and k are IEC.
        let size = |v: &str| parse_tenant(&format!("name=t,size={v}")).map(|t| t[0].size_bytes);
        assert_eq!(size("4k").unwrap(), 4096);
        assert_eq!(size("4KiB").unwrap(), 4096);
        assert_eq!(size("4KB").unwrap(), 4000);
        let e = size("4x").unwrap_err().to_string();
        assert!(
            e.contains("size `4x`: expected a whole number of bytes"),
            "{e}"
        );
        let p95 = |v: &str| match parse_tenant(&format!("name=t,class=lc,iops=1k,p95={v}")) {
            Ok(t) => match t[0].class {
                ClassSpec::LatencyCritical {
                    p95_read_latency_ns,
                    iops,
                } => Ok((p95_read_latency_ns, iops)),
                ClassSpec::BestEffort => unreachable!("class=lc"),
            },
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(p95("500us"), Ok((500_000, 1_000)));
        assert_eq!(p95("1.5ms"), Ok((1_500_000, 1_000)));
        assert!(p95("fast")
            .unwrap_err()
            .contains("duration `fast`: expected"));
    }

    #[test]
    fn reflex_tenant_a_parses() {
        let t = parse_tenant("name=A,class=lc,iops=120000,read=100,p95=500us,size=4k,secret=x")
            .unwrap();
        assert_eq!(t.len(), 1);
        let t = &t[0];
        assert_eq!(
            t.class,
            ClassSpec::LatencyCritical {
                p95_read_latency_ns: 500_000,
                iops: 120_000
            }
        );
        assert_eq!(t.load, Load::Open { iops: 120_000 });
        assert_eq!(
            (t.read_pct, t.size_bytes, t.secret.as_str()),
            (100, 4096, "x")
        );
        // Scenario 2: B registers 70K but offers 45K.
        let b = parse_tenant("name=B,class=lc,iops=70k,rate=45k,read=80,p95=500us").unwrap();
        assert_eq!(b[0].load, Load::Open { iops: 45_000 });
        let c = parse_tenant("name=C,read=95").unwrap();
        assert_eq!(c[0].class, ClassSpec::BestEffort);
        assert_eq!(
            c[0].load,
            Load::Closed {
                queue_depth: BE_DEFAULT_QUEUE_DEPTH
            }
        );
    }

    #[test]
    fn count_expands_and_zipf_takes_theta() {
        let t = parse_tenant("name=t,count=3,pattern=zipf:1.2,rate=100,size=1k").unwrap();
        assert_eq!(
            t.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["t-0", "t-1", "t-2"]
        );
        assert_eq!(t[0].pattern, Pattern::Zipf { theta_milli: 1200 });
        assert_eq!(t[0].size_bytes, 1024);
    }

    #[test]
    fn bad_specs_name_the_value_and_the_expectation() {
        let cases = [
            ("name=A,class=lc,iops=1000", "p95"),
            ("name=A,class=xx", "\"xx\": expected lc or be"),
            ("name=A,read=150", "read=150"),
            ("name=A,qd=4,rate=10", "exclude"),
            ("name=A,iops=10", "class=be has no SLO"),
            ("name=A,size=4q", "size `4q`: expected a whole number"),
            ("name=A,colour=red", "unknown key \"colour\""),
            ("class=be", "missing name"),
            ("name=A,pattern=hot", "pattern=\"hot\""),
            ("name=A,qd", "not key=value"),
        ];
        for (spec, needle) in cases {
            let e = parse_tenant(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn trace_tenants_take_the_replay_options() {
        use crate::trace::{BadLines, TraceFormat};
        let t = parse_tenant(
            "name=T,trace=hm_1.csv,trace_format=msr,trace_device=8:16,from=1.5s,to=250000ms,skip_bad_lines=yes,qd=8",
        )
        .unwrap();
        let load = t[0].trace.as_ref().unwrap();
        assert_eq!(
            load,
            &TraceLoad {
                path: "hm_1.csv".into(),
                format: Some(TraceFormat::Msr),
                device: Some(8 << 20 | 16),
                from_ns: 1_500_000_000,
                to_ns: Some(250_000_000_000),
                bad_lines: BadLines::Skip,
            }
        );
        assert_eq!(t[0].load, Load::Closed { queue_depth: 8 });
        let plain = parse_tenant("name=T,trace=t.csv,trace_device=3").unwrap();
        assert_eq!(plain[0].trace.as_ref().unwrap().device, Some(3));
        assert_eq!(plain[0].trace.as_ref().unwrap().bad_lines, BadLines::Fail);
        // A scenario file may write MAJ,MIN too (no comma splitting there).
        let s = parse_scenario(
            "[[tenant]]\nname = \"T\"\ntrace = \"t.txt\"\ntrace_device = \"8,0\"\nskip_bad_lines = true\n",
            "s.toml",
        )
        .unwrap();
        let load = s.tenants[0].trace.as_ref().unwrap();
        assert_eq!(
            (load.device, load.bad_lines),
            (Some(8 << 20), BadLines::Skip)
        );
        let cases = [
            (
                "name=T,trace=t,trace_format=iolog",
                "trace_format=\"iolog\": expected one of blkparse",
            ),
            (
                "name=T,trace=t,trace_device=sda",
                "trace_device=\"sda\": expected a device number",
            ),
            (
                "name=T,trace=t,from=soon",
                "from: duration `soon`: expected a number with an optional unit",
            ),
            ("name=T,trace=t,to=x", "to: duration `x`: expected"),
            (
                "name=T,trace=t,from=2s,to=1s",
                "to=\"1s\": expected a time after from=\"2s\"",
            ),
            (
                "name=T,trace=t,skip_bad_lines=maybe",
                "skip_bad_lines=\"maybe\": expected yes or no",
            ),
            ("name=T,from=1s", "from= needs trace=FILE"),
            ("name=T,trace_format=msr", "trace_format= needs trace=FILE"),
            ("name=T,speed=2", "speed= needs trace=FILE"),
            ("name=T,trace=", "trace=\"\": expected a trace file"),
        ];
        for (spec, needle) in cases {
            let e = parse_tenant(spec).unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn scenario_files_parse_and_reject_unknown_keys() {
        let s = parse_scenario(
            r#"
server = "127.0.0.1:7000"
duration = "5s"
warmup = "500ms"
threads = 2
seed = 9
[[tenant]]
name = "A"
class = "lc"
iops = 120000
p95 = "500us"
[[tenant]]
name = "C"
read = 95
fua = true
"#,
            "s.toml",
        )
        .unwrap();
        assert_eq!(s.server.as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(s.duration_ns, Some(5_000_000_000));
        assert_eq!(s.warmup_ns, Some(500_000_000));
        assert_eq!(s.tenants.len(), 2);
        assert_eq!(s.tenants[1].write_mode, WriteMode::Fua);
        let e = parse_scenario("durration = \"5s\"", "s.toml").unwrap_err();
        assert!(e.to_string().contains("durration"), "{e}");
        let e = parse_scenario("[[tenant]]\nname = \"A\"\nrate = 0\n", "s.toml").unwrap_err();
        assert!(e.to_string().contains("rate=0"), "{e}");
    }
}
