//! The shared server state: one *generation* of the config, and what lives as long as the
//! server.
//!
//! # What it implements
//! [`Shared`] is one generation: the config in force and what was resolved from it — volumes
//! opened, tenants and exports resolved, every tenant's *default flow* admitted by the `qos`
//! registry (a best-effort share, or the fixed SLO of an LC tenant, so a config whose fixed SLOs
//! do not fit the device fails at start, naming the tenant), the TLS keys loaded. It is
//! immutable; a reload ([`crate::reload`]) builds the next generation and publishes it.
//! [`Life`] is what every generation shares and a reload never replaces: the run state, the
//! connection and session counts, the memory ledger, the control plane ([`crate::control`]),
//! the metrics, the back-off of wrong secrets. `Shared` dereferences to its `Life`, so a worker
//! reads `shared.memory` or `shared.tenants` alike.
//!
//! # Design
//! Read-mostly: a generation is read by the acceptor, the workers, the admin endpoint and the
//! closed loop behind one `Arc`, without locks; the `Life` is atomics and the [`Control`] mutex
//! (taken only on REGISTER / UNREGISTER, by the admin thread, by the closed loop and by a
//! reload — never per request). A reload publishes the next generation in [`Life`] and bumps
//! its number; each worker compares that number with its own generation's once per loop step,
//! as its wait returns (one atomic load), and adopts the new one there, so a request is
//! decoded, checked and scheduled under one generation, and whatever woke the worker after the
//! publication meets the new one. Worked example: a reload at t publishes generation 2;
//! worker 0, in its step, finishes the requests it is decoding under generation 1; its next
//! wait returns (at once if a client connected or sent something, else ≤ 10 ms later: its
//! timer scan) and it adopts 2 and applies it to its connections (`worker/generation.rs`).
//!
//! The generation in force is held by the `Life` it points to (a cycle by design, cut by
//! [`Life::release_current`] when the server stops).
//!
//! # What it leaves out
//! What a reload cannot swap live (listeners, workers, limits other than the shutdown grace,
//! the QoS profile, volumes' backends): [`crate::reload`] refuses it and says a restart
//! applies it.

use std::io;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::backend::{open_volume, BackendError, Volume};
use crate::config::{Pacing, ServerConfig, TenantClass};
use crate::control::Control;
use crate::handshakes::HandshakeBudget;
use crate::latency::LatencyWindow;
use crate::memory::MemoryLedger;
use crate::metrics::{Metrics, TenantMetrics};
use crate::sessions::Sessions;
use crate::tenant::{TenantId, Tenants, VolumeGeometry, VolumeId, VolumeIds};
use crate::throttle::AuthThrottle;

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("cannot listen on {what} address {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: io::Error,
    },
    #[error("tenant {tenant:?}: its fixed SLO is not admitted by the device profile: {reason}")]
    Admission { tenant: String, reason: String },
    #[error("scheduler configuration: {0}")]
    Scheduler(String),
    #[error("starting thread {what}: {source}")]
    Thread { what: String, source: io::Error },
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("creating {what}: {source}")]
    Os {
        what: &'static str,
        source: io::Error,
    },
    #[error(
        "too many tenants: a server holds at most {} tenant ids",
        crate::appendvec::MAX_SLOTS
    )]
    TooManyTenants,
}

impl From<crate::appendvec::Full> for StartError {
    fn from(_: crate::appendvec::Full) -> StartError {
        StartError::TooManyTenants
    }
}

/// A volume as the dataplane sees it.
#[derive(Clone)]
pub struct VolumeEntry {
    pub name: String,
    pub geometry: VolumeGeometry,
    pub volume: Arc<dyn Volume>,
    /// Whether its requests draw on the server's token bucket (`config/profile.rs`).
    pub pacing: Pacing,
}

impl VolumeEntry {
    /// Opens a configured volume, paced as its profile says.
    pub fn open(
        v: &crate::config::VolumeConfig,
        pacing: Pacing,
    ) -> Result<VolumeEntry, BackendError> {
        let volume = open_volume(v)?;
        let size_bytes = volume.size_bytes();
        tracing::info!(volume = %v.name, kind = volume.kind(), size_bytes, "volume opened");
        Ok(VolumeEntry {
            name: v.name.clone(),
            geometry: VolumeGeometry {
                size_bytes,
                block_bytes: v.block_bytes,
            },
            volume,
            pacing,
        })
    }
}

/// An NBD export, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportEntry {
    pub name: String,
    pub description: String,
    pub volume: VolumeId,
    pub tenant: TenantId,
}

/// Where a reload reads the config: the file the server was started with, re-read with the
/// same command-line overrides (`ullstack serve` builds it; tests give a closure).
pub struct ConfigSource(Box<dyn Fn() -> Result<ServerConfig, String> + Send + Sync>);

impl ConfigSource {
    pub fn new(read: impl Fn() -> Result<ServerConfig, String> + Send + Sync + 'static) -> Self {
        ConfigSource(Box::new(read))
    }

    /// The config file at `path`, parsed and validated.
    pub fn file(path: impl Into<std::path::PathBuf>) -> ConfigSource {
        let path = path.into();
        ConfigSource::new(move || {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("reading config file {}: {e}", path.display()))?;
            ServerConfig::from_toml_str(&text)
                .map_err(|e| format!("in config file {}: {e}", path.display()))
        })
    }

    /// Reads the config now.
    pub fn read(&self) -> Result<ServerConfig, String> {
        (self.0)()
    }
}

/// Server lifecycle, readable by every thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RunState {
    Running = 0,
    Draining = 1,
}

/// What every generation of one server shares (see the module essay).
pub struct Life {
    pub control: Mutex<Control>,
    pub bucket: qos::SharedBucket,
    pub metrics: Arc<Metrics>,
    state: AtomicU8,
    /// When the drain began (clock ns; 0 while running): the shutdown grace counts from it.
    drain_started_ns: AtomicU64,
    pub open_connections: AtomicUsize,
    /// Sessions of each config tenant (bound by HELLO or an NBD export), and of open tenants
    /// per source ([`crate::sessions`]).
    pub sessions: Sessions,
    /// Bytes clients make the server hold, per tenant and in all, against
    /// `limits.max_memory_bytes` ([`crate::memory`]).
    pub memory: MemoryLedger,
    /// Wrong-secret back-off per source address (HELLO, TLS-PSK and the admin token).
    pub auth_throttle: Mutex<AuthThrottle>,
    /// Connections not yet authenticated, in all and per source ([`crate::handshakes`]).
    pub handshakes: Mutex<HandshakeBudget>,
    next_session_id: AtomicU64,
    /// Connections the shutdown grace closed with requests or replies still pending.
    pub cut_connections: AtomicUsize,
    /// The generation in force and its number.
    current: Mutex<Option<Arc<Shared>>>,
    generation: AtomicU64,
    /// Held for the whole of a reload: SIGHUP and `POST /reload` take turns.
    pub(crate) reloading: Mutex<()>,
    /// Where a reload reads the config (none: started without a file).
    pub(crate) source: Mutex<Option<ConfigSource>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Life {
    pub fn state(&self) -> RunState {
        match self.state.load(Ordering::Acquire) {
            0 => RunState::Running,
            _ => RunState::Draining,
        }
    }

    pub fn next_session_id(&self) -> u64 {
        self.next_session_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn lock_handshakes(&self) -> MutexGuard<'_, HandshakeBudget> {
        lock(&self.handshakes)
    }

    pub fn lock_auth_throttle(&self) -> MutexGuard<'_, AuthThrottle> {
        lock(&self.auth_throttle)
    }

    pub fn lock_control(&self) -> MutexGuard<'_, Control> {
        lock(&self.control)
    }

    /// The generation in force (None once the server stopped).
    pub fn current(&self) -> Option<Arc<Shared>> {
        lock(&self.current).clone()
    }

    /// The number of the generation in force (0 at start).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Makes `next` the generation in force.
    pub(crate) fn publish(&self, next: Arc<Shared>) {
        let number = next.generation;
        *lock(&self.current) = Some(next);
        self.generation.store(number, Ordering::Release);
    }

    /// Drops the generation in force (the server stopped; see the module essay).
    pub(crate) fn release_current(&self) {
        lock(&self.current).take();
    }

    /// Sets where a reload reads the config.
    pub fn set_source(&self, source: ConfigSource) {
        *lock(&self.source) = Some(source);
    }

    /// A connection the acceptor handed over was dropped before a worker adopted it: its
    /// `max_connections` slot and its unauthenticated slot go back.
    pub fn forget_new_conn(&self, peer: Option<std::net::SocketAddr>) {
        self.open_connections.fetch_sub(1, Ordering::AcqRel);
        if let Some(peer) = peer {
            self.lock_handshakes().give_back(peer.ip());
        }
    }

    /// Tells every thread to drain (see `ServerHandle::shutdown`); the grace counts from the
    /// first call.
    pub fn begin_drain(&self) {
        let now = crate::clock::now_ns().max(1);
        let _ = self
            .drain_started_ns
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
        self.state
            .store(RunState::Draining as u8, Ordering::Release);
    }

    /// When the drain began (0: running).
    pub fn drain_started_ns(&self) -> u64 {
        self.drain_started_ns.load(Ordering::Acquire)
    }
}

/// One generation of the config, resolved (see the module essay).
pub struct Shared {
    /// 0 at start, +1 per reload.
    pub generation: u64,
    pub config: ServerConfig,
    /// Every tenant id's tenant, retired ones included (ids are never reused).
    pub tenants: Tenants,
    /// By volume id; a reload only appends.
    pub volumes: Vec<VolumeEntry>,
    pub exports: Vec<ExportEntry>,
    /// Each tenant id's default flow (handle 0 on the own protocol; every NBD connection);
    /// None for retired tenants and LC tenants without a fixed SLO.
    pub default_flows: Vec<Option<qos::TenantHandle>>,
    /// The latency windows of those default flows that are LC and measured by the closed loop.
    pub default_windows: Vec<Option<Arc<LatencyWindow>>>,
    /// By tenant id (ids of one name share the name's counters).
    pub tenant_metrics: Vec<TenantMetrics>,
    /// `[tls]`, loaded: every new connection on either listener runs TLS when present.
    pub tls: Option<Arc<crate::tls::TlsServer>>,
    life: Arc<Life>,
}

impl Deref for Shared {
    type Target = Life;
    fn deref(&self) -> &Life {
        &self.life
    }
}

impl Shared {
    /// What every generation of this server shares.
    pub fn life(&self) -> &Arc<Life> {
        &self.life
    }

    pub fn volume_by_name(&self, name: &str) -> Option<VolumeId> {
        self.volumes
            .iter()
            .position(|v| v.name == name)
            .map(|i| VolumeId(i as u16))
    }

    pub fn volume(&self, id: VolumeId) -> &VolumeEntry {
        &self.volumes[id.0 as usize]
    }

    /// Each volume by name: its id and block size (what ACLs and exports resolve against).
    pub fn volume_ids(&self) -> VolumeIds<'_> {
        volume_ids(&self.volumes)
    }

    /// Export by NBD name; the empty name (the NBD default export) means `default`, or the
    /// only export when there is exactly one.
    pub fn export_by_name(&self, name: &str) -> Option<&ExportEntry> {
        if name.is_empty() {
            return self.exports.iter().find(|e| e.name == "default").or(
                if self.exports.len() == 1 {
                    self.exports.first()
                } else {
                    None
                },
            );
        }
        self.exports.iter().find(|e| e.name == name)
    }

    /// Brings the token counters of the Prometheus metrics up to the qos ledgers (admin
    /// thread). Ids of one tenant name share its counters, so they are summed by name.
    pub fn refresh_token_metrics(&self) {
        let totals = {
            let mut control = self.lock_control();
            control.collect_retiring();
            control.token_totals()
        };
        let mut by_name: std::collections::HashMap<&str, (usize, crate::control::TokenTotals)> =
            std::collections::HashMap::new();
        let mut charged: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        for t in self.tenants.iter() {
            let i = t.id.0 as usize;
            let sum = by_name
                .entry(t.name.as_str())
                .or_insert((i, Default::default()));
            sum.1 = sum.1.plus(totals.get(i).copied().unwrap_or_default());
            *charged.entry(t.name.as_str()).or_insert(0) += self.memory.tenant_charged_bytes(t.id);
        }
        for (name, (i, t)) in &by_name {
            let Some(m) = self.tenant_metrics.get(*i) else {
                continue;
            };
            bump(&m.tokens_earned_mtok, t.earned_mtok);
            bump(&m.tokens_spent_mtok, t.spent_mtok);
            bump(&m.tokens_donated_mtok, t.donated_mtok);
            bump(&m.deficit_hits, t.deficit_hits);
            let bytes = charged.get(name).copied().unwrap_or(0);
            m.memory_charged_bytes.set(crate::metrics::gauge(bytes));
        }
        self.metrics.set_memory(crate::metrics::MemoryTotals {
            charged_bytes: self.memory.charged_bytes(),
            peak_bytes: self.memory.peak_bytes(),
            limit_bytes: self.memory.limit_bytes(),
            tenant_budget_bytes: self.memory.tenant_budget_bytes(),
        });
        for v in &self.volumes {
            if let Some([lc, tp]) = v.volume.device_commands_by_class() {
                bump(
                    &self.metrics.device_commands(&v.name, "latency_critical"),
                    lc,
                );
                bump(&self.metrics.device_commands(&v.name, "throughput"), tp);
            }
            if let Some([registered, fallback]) = v.volume.fixed_reads() {
                bump(&self.metrics.file_reads(&v.name, "registered"), registered);
                bump(&self.metrics.file_reads(&v.name, "fallback"), fallback);
            }
        }
    }

    /// A generation built by a reload on this one's life.
    pub(crate) fn next(&self, parts: Generation) -> Shared {
        Shared {
            generation: self.generation + 1,
            config: parts.config,
            tenants: parts.tenants,
            volumes: parts.volumes,
            exports: parts.exports,
            default_flows: parts.default_flows,
            default_windows: parts.default_windows,
            tenant_metrics: parts.tenant_metrics,
            tls: parts.tls,
            life: self.life.clone(),
        }
    }
}

/// The parts of a generation a reload resolves ([`Shared::next`]).
pub(crate) struct Generation {
    pub config: ServerConfig,
    pub tenants: Tenants,
    pub volumes: Vec<VolumeEntry>,
    pub exports: Vec<ExportEntry>,
    pub default_flows: Vec<Option<qos::TenantHandle>>,
    pub default_windows: Vec<Option<Arc<LatencyWindow>>>,
    pub tenant_metrics: Vec<TenantMetrics>,
    pub tls: Option<Arc<crate::tls::TlsServer>>,
}

/// Raises a monotonic counter to `target` (only the admin thread writes these).
fn bump(counter: &prometheus_client::metrics::counter::Counter, target: u64) {
    let now = counter.get();
    if target > now {
        counter.inc_by(target - now);
    }
}

/// Each volume by name: its id and block size.
pub fn volume_ids(volumes: &[VolumeEntry]) -> VolumeIds<'_> {
    volumes
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                v.name.as_str(),
                (VolumeId(i as u16), v.geometry.block_bytes),
            )
        })
        .collect()
}

/// The config's exports, resolved against `volumes` and `tenants` (the config is valid).
pub fn resolve_exports(
    config: &ServerConfig,
    volumes: &VolumeIds,
    tenants: &Tenants,
) -> Vec<ExportEntry> {
    config
        .exports
        .iter()
        .filter_map(|e| {
            Some(ExportEntry {
                name: e.name.clone(),
                description: e.description.clone().unwrap_or_default(),
                volume: volumes.get(e.volume.as_str())?.0,
                tenant: tenants.by_name(&e.tenant)?.id,
            })
        })
        .collect()
}

/// The default flow a config tenant asks for: best effort, its fixed LC SLO, or none (an LC
/// tenant without a fixed SLO registers its flows).
pub fn default_spec(t: &crate::tenant::Tenant) -> Option<qos::TenantSpec> {
    match (t.class, &t.slo) {
        (TenantClass::BestEffort, _) => Some(qos::TenantSpec::BestEffort(qos::BeSpec::default())),
        (TenantClass::LatencyCritical, Some(slo)) => {
            Some(qos::TenantSpec::LatencyCritical(slo.to_qos()))
        }
        (TenantClass::LatencyCritical, None) => None,
    }
}

impl Shared {
    /// Opens the volumes, resolves tenants and exports, admits the default flows, and
    /// publishes the result as generation 0 of a new server life.
    pub fn new(config: ServerConfig) -> Result<Arc<Shared>, StartError> {
        config.validate()?;
        let mut volumes = Vec::with_capacity(config.volumes.len());
        for (v, p) in config.volumes.iter().zip(config.volume_profiles()?) {
            volumes.push(VolumeEntry::open(v, p.pacing)?);
        }
        let tenants = Tenants::from_config(&config);
        let exports = resolve_exports(&config, &volume_ids(&volumes), &tenants);

        let profile = config.device_profile()?;
        let registry = qos::Registry::new(
            profile,
            qos::RegistryConfig {
                max_tenants: (config.tenants.len() as u32).saturating_add(65_536),
                lc_surge_pct: config.qos.lc_surge_pct,
                // The headroom rule counts on the schedulers' burst and on their rounds: a
                // worker with requests held runs its next round within the shortest
                // throttled wait even when nothing else wakes it.
                deficit_limit: config.qos.tuning.deficit_limit,
                round_ns: crate::idle::THROTTLED_RETRY_MIN_NS,
                headroom: config.qos.admission_headroom,
                lc_borrows_spare: config.qos.tuning.lc_borrows_spare,
            },
        );
        let bucket = registry.shared();
        let vrate_on = config.qos.vrate == crate::config::VrateMode::On;
        let mut control = Control::new(registry, tenants.len(), vrate_on);
        let mut default_flows = Vec::with_capacity(tenants.len());
        for t in tenants.iter() {
            let flow = match default_spec(t) {
                Some(spec) => {
                    Some(
                        control
                            .register(t.id, spec)
                            .map_err(|r| StartError::Admission {
                                tenant: t.name.clone(),
                                reason: r.to_string(),
                            })?,
                    )
                }
                None => None,
            };
            default_flows.push(flow);
        }
        let default_windows = default_flows
            .iter()
            .map(|f| f.as_ref().and_then(|h| control.window(h.id())))
            .collect();

        let metrics = Arc::new(Metrics::new());
        metrics.set_rate_scale_ppm(control.rate_scale_ppm());
        let tenant_metrics = tenants.iter().map(|t| metrics.tenant(&t.name)).collect();
        let memory = MemoryLedger::new(config.limits.max_memory_bytes.0, tenants.len())?;
        let sessions = Sessions::new(
            &tenants,
            config.limits.max_connections_per_tenant,
            config.limits.open_sessions_per_source(),
        )?;
        let tls = match &config.tls {
            Some(t) => Some(Arc::new(crate::tls::TlsServer::from_config(t)?)),
            None => None,
        };
        let life = Arc::new(Life {
            control: Mutex::new(control),
            bucket,
            metrics,
            state: AtomicU8::new(RunState::Running as u8),
            drain_started_ns: AtomicU64::new(0),
            open_connections: AtomicUsize::new(0),
            sessions,
            memory,
            auth_throttle: Mutex::new(AuthThrottle::default()),
            handshakes: Mutex::new(HandshakeBudget::new(
                config.limits.unauthenticated_budget(),
                config.limits.max_unauthenticated_per_source,
            )),
            next_session_id: AtomicU64::new(1),
            cut_connections: AtomicUsize::new(0),
            current: Mutex::new(None),
            generation: AtomicU64::new(0),
            reloading: Mutex::new(()),
            source: Mutex::new(None),
        });
        let shared = Arc::new(Shared {
            generation: 0,
            config,
            tenants,
            volumes,
            exports,
            default_flows,
            default_windows,
            tenant_metrics,
            tls,
            life: life.clone(),
        });
        life.publish(shared.clone());
        Ok(shared)
    }
}
