//! A tenant spec and its one parser, shared by `--tenant` and a scenario file's `[[tenant]]`.

use std::collections::BTreeMap;

use engine::units;

use crate::{err, SpecError, WriteMode};

/// Keys a tenant spec accepts, for error messages; the ones after `trace` only go with it.
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
/// The tenant keys that only make sense with `trace`: those after it in [`TENANT_KEYS`].
pub(crate) const TRACE_ONLY_KEYS: &[&str] = TENANT_KEYS.split_at(TENANT_KEYS.len() - 6).1;

/// Default closed-loop depth of a best-effort tenant with neither `rate` nor `qd`.
pub const BE_DEFAULT_QUEUE_DEPTH: u32 = 16;
/// Default Zipf exponent θ, in thousandths (0.99: the YCSB default).
pub const ZIPF_DEFAULT_THETA_MILLI: u32 = 990;

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
    /// What the tenant registers, as the scheduler takes it (`class()` names the class alone).
    /// An LC tenant's SLO carries the whole tenant's `iops` (runs split it over its
    /// connections) and the tenant's own `read_pct` and `size_bytes`; a BE tenant declares the
    /// default (mixed) load. The wire's image of it is `proto::wire::RegisterClass`.
    pub class: qos::TenantSpec,
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
    pub format: Option<workload::trace::TraceFormat>,
    /// Only this device's records.
    pub device: Option<u32>,
    /// Window start, trace time (ns from the trace's first record).
    pub from_ns: u64,
    /// Window end (exclusive), trace time.
    pub to_ns: Option<u64>,
    pub bad_lines: workload::trace::BadLines,
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
            bad_lines: workload::trace::BadLines::Fail,
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
    // The SLO (p95, IOPS) of an LC tenant; `None` for BE.
    let lc = match class_name {
        "lc" | "LC" => {
            let iops = iops.ok_or_else(|| err(ctx, "class=lc needs iops=N (the SLO's IOPS)"))?;
            let p95 = p95.ok_or_else(|| err(ctx, "class=lc needs p95=LATENCY (e.g. 500us)"))?;
            if iops == 0 || p95 == 0 {
                return Err(err(ctx, "class=lc needs iops and p95 greater than 0"));
            }
            Some((p95, iops))
        }
        "be" | "BE" => {
            if iops.is_some() || p95.is_some() {
                return Err(err(
                    ctx,
                    "class=be has no SLO: drop iops=/p95= (use rate=N for an open-loop rate)",
                ));
            }
            None
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
                .and_then(|f| workload::trace::Pacing::open_loop(f).ok())
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
    let load = match (rate, qd, lc) {
        _ if trace.is_some() && qd.is_none() => Load::Trace {
            speed_per_mille: match speed {
                Some(workload::trace::Pacing::OpenLoop { speed_per_mille }) => speed_per_mille,
                _ => workload::trace::replay::SPEED_SCALE,
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
        (None, None, Some((_, iops))) => Load::Open { iops },
        (None, None, None) => Load::Closed {
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
    if registration == Registration::DefaultFlow && lc.is_some() {
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
    let class = match lc {
        Some((p95_read_latency_ns, iops)) => qos::TenantSpec::LatencyCritical(qos::LcSlo {
            p95_read_latency_ns,
            iops,
            read_pct,
            request_bytes: u64::from(size_bytes),
        }),
        None => qos::TenantSpec::BestEffort(qos::BeSpec::default()),
    };
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
    use workload::trace::{parse_device, BadLines, TraceFormat};
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
