//! A remote run's configuration: the tenants (the `ullstack bench` spec, crate `workload`) and
//! the `[sim]` table that says what server, network and device to model.
//!
//! ```toml
//! duration = "1s"              # measured time, after the warm-up (bench's keys)
//! warmup = "100ms"
//! seed = 1
//! [[tenant]]                   # the bench tenant spec, unchanged
//! name = "A"
//! class = "lc"
//! iops = 120000
//! p95 = "500us"
//! [sim]                        # ignored by `ullstack bench`
//! device = "zssd"              # a device preset, or a table: { preset = "nvme-tlc", … }
//! profile = "reflex-a"         # a qos profile name, a profile TOML file, or a table
//! scheduler = "on"             # "off": arrival order (the baseline)
//! workers = 2                  # dataplane threads
//! [sim.net]                    # see `sim::net`
//! latency_ns = 5000
//! ```

use qos::SchedulerMode;
use scenario::{Scenario, TenantSpec};
use serde::Deserialize;

use crate::net::NetConfig;

/// Anything wrong with a remote run's configuration, naming the value and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum RemoteConfigError {
    #[error("[sim]: {0}")]
    Sim(String),
    #[error("[sim] device: {0}")]
    Device(#[from] device::config::ConfigError),
    #[error("[sim] profile: {0}")]
    Profile(#[from] qos::ProfileError),
    #[error("tenant {tenant:?}: {problem}")]
    Tenant { tenant: String, problem: String },
    #[error("{0}")]
    Other(String),
}

/// The modelled server (the `[sim]` table).
#[derive(Clone, Debug)]
pub struct ServerModel {
    pub device: device::DeviceConfig,
    pub profile: qos::DeviceProfile,
    pub scheduler: SchedulerMode,
    /// Dataplane threads; connections are spread over them round-robin, as the server does.
    pub workers: u32,
    /// Most requests one loop iteration reads in (the server's adaptive batching cap).
    pub batch_limit: u32,
    pub costs: DataplaneCosts,
    pub net: NetConfig,
    pub lc_surge_pct: u32,
    pub tuning: qos::SchedulerConfig,
}

/// CPU time of the dataplane's work, per item, ns. Defaults: the published dataplane serves
/// about 850 K 4 KB IOPS per core; `request_ns + submit_ns + complete_ns` plus the two TCP
/// messages (`net.server_message_ns` each) = 1.2 µs per request ≈ 830 K per core with full
/// batches (an assumption fitted to that one figure, split by judgement).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataplaneCosts {
    /// Parse, check and price a request, and queue it in the scheduler.
    pub request_ns: u64,
    /// Build an NVMe command and ring the doorbell.
    pub submit_ns: u64,
    /// Reap a completion and build the reply.
    pub complete_ns: u64,
    /// Fixed cost of one loop iteration (poll, scheduling round).
    pub loop_ns: u64,
    /// While requests wait for tokens and nothing else happens, the thread spins; the model
    /// runs a round this often instead of every iteration (a held request waits at most this
    /// much longer than on the real loop).
    pub spin_round_ns: u64,
}

impl Default for DataplaneCosts {
    fn default() -> Self {
        DataplaneCosts {
            request_ns: 200,
            submit_ns: 100,
            complete_ns: 100,
            loop_ns: 100,
            spin_round_ns: 2_000,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SimToml {
    device: Option<toml::Value>,
    profile: Option<toml::Value>,
    scheduler: Option<SchedulerMode>,
    workers: Option<u32>,
    batch_limit: Option<u32>,
    lc_surge_pct: Option<u32>,
    #[serde(default)]
    costs: DataplaneCosts,
    #[serde(default)]
    net: NetConfig,
    #[serde(default)]
    tuning: qos::SchedulerConfig,
}

/// Most dataplane threads a run may model.
pub const MAX_WORKERS: u32 = 256;

impl ServerModel {
    /// The defaults: zssd, `reflex-a`, scheduler on, two threads, batches of 64.
    pub fn default_model() -> ServerModel {
        ServerModel {
            device: device::DeviceConfig::preset("zssd").expect("shipped preset"),
            profile: qos::DeviceProfile::reflex_a(),
            scheduler: SchedulerMode::On,
            workers: 2,
            batch_limit: 64,
            costs: DataplaneCosts::default(),
            net: NetConfig::default(),
            lc_surge_pct: qos::DEFAULT_LC_SURGE_PCT,
            tuning: qos::SchedulerConfig::default(),
        }
    }

    /// Reads a `[sim]` table (absent keys keep the defaults).
    pub fn from_table(table: &toml::Table) -> Result<ServerModel, RemoteConfigError> {
        let t: SimToml = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e: toml::de::Error| RemoteConfigError::Sim(e.to_string()))?;
        let mut m = ServerModel::default_model();
        match t.device {
            None => {}
            Some(toml::Value::String(name)) => m.device = device::DeviceConfig::preset(&name)?,
            Some(toml::Value::Table(t)) => m.device = device::DeviceConfig::from_toml_table(t)?,
            Some(v) => {
                return Err(RemoteConfigError::Sim(format!(
                    "device = {v}: expected a preset name ({}) or a table",
                    device::config::PRESET_NAMES.join(", ")
                )))
            }
        }
        match t.profile {
            None => {}
            Some(toml::Value::String(s)) if s.ends_with(".toml") => {
                let text = std::fs::read_to_string(&s).map_err(|e| {
                    RemoteConfigError::Sim(format!("profile = {s:?}: cannot read it: {e}"))
                })?;
                m.profile = qos::DeviceProfile::from_toml_str(&text)?;
            }
            Some(toml::Value::String(name)) => m.profile = qos::DeviceProfile::named(&name)?,
            Some(toml::Value::Table(t)) => {
                m.profile = qos::DeviceProfile::from_toml_str(
                    &toml::to_string(&t)
                        .map_err(|e| RemoteConfigError::Sim(format!("profile table: {e}")))?,
                )?
            }
            Some(v) => {
                return Err(RemoteConfigError::Sim(format!(
                    "profile = {v}: expected a profile name, a .toml file or a table"
                )))
            }
        }
        if let Some(s) = t.scheduler {
            m.scheduler = s;
        }
        if let Some(w) = t.workers {
            if !(1..=MAX_WORKERS).contains(&w) {
                return Err(RemoteConfigError::Sim(format!(
                    "workers = {w}: expected 1..={MAX_WORKERS}"
                )));
            }
            m.workers = w;
        }
        if let Some(b) = t.batch_limit {
            if !(1..=64).contains(&b) {
                return Err(RemoteConfigError::Sim(format!(
                    "batch_limit = {b}: expected 1..=64"
                )));
            }
            m.batch_limit = b;
        }
        if let Some(s) = t.lc_surge_pct {
            m.lc_surge_pct = s;
        }
        if t.costs.spin_round_ns == 0 {
            return Err(RemoteConfigError::Sim(
                "costs.spin_round_ns = 0: expected at least 1 ns".into(),
            ));
        }
        m.costs = t.costs;
        m.net = t.net;
        m.tuning = t.tuning;
        Ok(m)
    }
}

/// A whole remote run.
#[derive(Clone, Debug)]
pub struct RemoteRunConfig {
    pub tenants: Vec<TenantSpec>,
    /// Measured time, after the warm-up, ns.
    pub duration_ns: u64,
    pub warmup_ns: u64,
    pub seed: u64,
    pub server: ServerModel,
}

/// Default measured time when the scenario gives none (bench's default is longer: wall time
/// there is cheap, simulated time here is not).
pub const DEFAULT_DURATION_NS: u64 = 1_000_000_000;
/// Default warm-up when the scenario gives none.
pub const DEFAULT_WARMUP_NS: u64 = 100_000_000;

impl RemoteRunConfig {
    /// From a parsed scenario (the file `ullstack bench --scenario` reads).
    pub fn from_scenario(s: &Scenario) -> Result<RemoteRunConfig, RemoteConfigError> {
        let server = match &s.sim {
            Some(t) => ServerModel::from_table(t)?,
            None => ServerModel::default_model(),
        };
        if s.tenants.is_empty() {
            return Err(RemoteConfigError::Other(
                "the scenario has no [[tenant]]: nothing to simulate".into(),
            ));
        }
        if let Some(t) = s.tenants.iter().find(|t| t.trace.is_some()) {
            // The simulated remote tenants generate their own requests; a trace tenant is
            // replayed by `ullstack bench` against a live server only (for now).
            return Err(RemoteConfigError::Tenant {
                tenant: t.name.clone(),
                problem: "trace= tenants run against a live server (`ullstack bench`); the simulated remote server does not replay traces yet".into(),
            });
        }
        Ok(RemoteRunConfig {
            tenants: s.tenants.clone(),
            duration_ns: s.duration_ns.unwrap_or(DEFAULT_DURATION_NS),
            warmup_ns: s.warmup_ns.unwrap_or(DEFAULT_WARMUP_NS),
            seed: s.seed.unwrap_or(1),
            server,
        })
    }

    /// Parses a scenario file's text.
    pub fn parse(text: &str, path: &str) -> Result<RemoteRunConfig, RemoteConfigError> {
        let s = scenario::parse_scenario(text, path)
            .map_err(|e| RemoteConfigError::Other(e.to_string()))?;
        RemoteRunConfig::from_scenario(&s)
    }
}
