//! A scenario file: its globals, its `[[tenant]]` tables and the `[sim]` table it carries for
//! the simulator.

use engine::units;

use crate::tenant::{parse_tenant_pairs, TenantSpec};
use crate::{err, SpecError};

/// Keys at the top of a scenario file.
pub const SCENARIO_KEYS: &[&str] = &[
    "server", "duration", "ios", "warmup", "threads", "seed", "tenant", "sim",
];

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
