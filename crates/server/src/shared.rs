//! The shared server state: what every thread of one server reads, and the control plane.
//!
//! # What it implements
//! [`Shared`] is built once at start from a validated config — volumes opened, tenants and
//! exports resolved, every tenant's *default flow* admitted by the `qos` registry (a
//! best-effort share, or the fixed SLO of an LC tenant, so a config whose fixed SLOs do not fit
//! the device fails at start, naming the tenant), metrics registered — and then shared by the
//! acceptor, the workers, the admin endpoint and the closed loop behind one `Arc`.
//!
//! # Design
//! Read-mostly: everything is immutable after start except atomics (the run state, the open
//! connection count, session ids) and the [`Control`] mutex (the registry), which is taken only
//! on REGISTER / UNREGISTER, by the admin thread and by the closed loop — never per request.
//! Worked example: a REGISTER on worker 1 and a `/metrics` scrape contend for the control lock
//! for a few microseconds; the 4 KiB reads of every worker never touch it.
//!
//! # What it leaves out
//! Hot reconfiguration: a changed config needs a restart.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{open_volume, BackendError, Volume};
use crate::config::{ServerConfig, TenantClass};
use crate::handshakes::HandshakeBudget;
use crate::latency::LatencyWindow;
use crate::memory::MemoryLedger;
use crate::metrics::{Metrics, TenantMetrics};
use crate::sessions::Sessions;
use crate::tenant::{TenantId, Tenants, VolumeGeometry, VolumeId};
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
}

/// A volume as the dataplane sees it.
pub struct VolumeEntry {
    pub name: String,
    pub geometry: VolumeGeometry,
    pub volume: Arc<dyn Volume>,
}

/// An NBD export, resolved.
#[derive(Debug, Clone)]
pub struct ExportEntry {
    pub name: String,
    pub description: String,
    pub volume: VolumeId,
    pub tenant: TenantId,
}

/// Totals of token counters of flows that have been unregistered, per config tenant.
#[derive(Debug, Clone, Copy, Default)]
struct TokenTotals {
    earned_mtok: u64,
    spent_mtok: u64,
    donated_mtok: u64,
    deficit_hits: u64,
}

impl TokenTotals {
    fn add(&mut self, c: &qos::TenantCounters) {
        self.earned_mtok += c.earned_mtok;
        self.spent_mtok += c.spent_mtok;
        self.donated_mtok += c.donated_mtok;
        self.deficit_hits += c.deficit_hits;
    }
}

/// The control plane: admission and the flows it admitted.
pub struct Control {
    registry: qos::Registry,
    live: HashMap<qos::TenantId, (TenantId, qos::TenantHandle)>,
    retired: Vec<TokenTotals>,
    /// Latency windows of LC flows, kept while the closed loop (`[qos] vrate`) is on.
    windows: HashMap<qos::TenantId, Arc<LatencyWindow>>,
    track_windows: bool,
}

impl Control {
    /// Admits a flow of config tenant `owner`.
    pub fn register(
        &mut self,
        owner: TenantId,
        spec: qos::TenantSpec,
    ) -> Result<qos::TenantHandle, qos::Refusal> {
        let handle = self.registry.register(spec)?;
        self.live.insert(handle.id(), (owner, handle.clone()));
        if self.track_windows && handle.class() == qos::TenantClass::LatencyCritical {
            self.windows
                .insert(handle.id(), Arc::new(LatencyWindow::new()));
        }
        Ok(handle)
    }

    /// The latency window of an LC flow (None when the closed loop is off).
    pub fn window(&self, id: qos::TenantId) -> Option<Arc<LatencyWindow>> {
        self.windows.get(&id).cloned()
    }

    /// Every measured LC flow: its id, handle and window.
    pub fn lc_windows(
        &self,
    ) -> impl Iterator<Item = (qos::TenantId, &qos::TenantHandle, &Arc<LatencyWindow>)> {
        self.windows
            .iter()
            .filter_map(|(id, w)| self.live.get(id).map(|(_, h)| (*id, h, w)))
    }

    /// Applies the closed loop's device rate scale (ppm of the calibrated rate).
    pub fn set_rate_scale_ppm(&mut self, ppm: u32) -> Result<(), qos::RegistryError> {
        self.registry.set_rate_scale_ppm(ppm)
    }

    /// The device rate scale in force, ppm (1,000,000 = as calibrated).
    pub fn rate_scale_ppm(&self) -> u32 {
        self.registry.rate_scale_ppm()
    }

    /// The LC surge in force, ppm of a reservation (crate qos, `admission`).
    pub fn lc_surge_ppm(&self) -> u32 {
        self.registry.shared().lc_surge_ppm()
    }

    /// Removes a flow (its token counters move to the owner's retired totals).
    pub fn unregister(&mut self, id: qos::TenantId) {
        if let Some((owner, handle)) = self.live.remove(&id) {
            self.retired[owner.0 as usize].add(&handle.counters());
        }
        self.windows.remove(&id);
        if let Err(e) = self.registry.unregister(id) {
            tracing::warn!(error = %e, "unregister of an unknown flow");
        }
    }

    pub fn registered(&self) -> usize {
        self.live.len()
    }
}

/// Server lifecycle, readable by every thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RunState {
    Running = 0,
    Draining = 1,
}

/// Read-mostly state shared by all threads of one server.
pub struct Shared {
    pub config: ServerConfig,
    pub tenants: Tenants,
    pub volumes: Vec<VolumeEntry>,
    pub exports: Vec<ExportEntry>,
    pub control: Mutex<Control>,
    pub bucket: qos::SharedBucket,
    /// Each config tenant's default flow (handle 0 on the own protocol; every NBD connection).
    pub default_flows: Vec<Option<qos::TenantHandle>>,
    /// The latency windows of those default flows that are LC and measured by the closed loop.
    pub default_windows: Vec<Option<Arc<LatencyWindow>>>,
    pub metrics: Arc<Metrics>,
    pub tenant_metrics: Vec<TenantMetrics>,
    state: AtomicU8,
    pub open_connections: AtomicUsize,
    /// Sessions of each config tenant (bound by HELLO or an NBD export), and of open tenants
    /// per source ([`crate::sessions`]).
    pub sessions: Sessions,
    /// Bytes clients make the server hold, per tenant and in all, against
    /// `limits.max_memory_bytes` ([`crate::memory`]).
    pub memory: MemoryLedger,
    /// Wrong-secret back-off per source address.
    pub auth_throttle: Mutex<AuthThrottle>,
    /// Connections not yet authenticated, in all and per source ([`crate::handshakes`]).
    pub handshakes: Mutex<HandshakeBudget>,
    next_session_id: AtomicU64,
    /// `[tls]`, loaded: every connection on either listener runs TLS when present.
    pub tls: Option<Arc<crate::tls::TlsServer>>,
}

impl Shared {
    pub fn state(&self) -> RunState {
        match self.state.load(Ordering::Acquire) {
            0 => RunState::Running,
            _ => RunState::Draining,
        }
    }

    pub fn next_session_id(&self) -> u64 {
        self.next_session_id.fetch_add(1, Ordering::Relaxed)
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

    pub fn lock_handshakes(&self) -> std::sync::MutexGuard<'_, HandshakeBudget> {
        self.handshakes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn lock_auth_throttle(&self) -> std::sync::MutexGuard<'_, AuthThrottle> {
        self.auth_throttle.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn lock_control(&self) -> std::sync::MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings the token counters of the Prometheus metrics up to the qos ledgers (admin thread).
    pub fn refresh_token_metrics(&self) {
        let mut totals = {
            let control = self.lock_control();
            let mut totals = control.retired.clone();
            for (owner, handle) in control.live.values() {
                totals[owner.0 as usize].add(&handle.counters());
            }
            totals
        };
        for (i, t) in totals.iter_mut().enumerate() {
            let m = &self.tenant_metrics[i];
            bump(&m.tokens_earned_mtok, t.earned_mtok);
            bump(&m.tokens_spent_mtok, t.spent_mtok);
            bump(&m.tokens_donated_mtok, t.donated_mtok);
            bump(&m.deficit_hits, t.deficit_hits);
        }
        self.metrics.set_memory(crate::metrics::MemoryTotals {
            charged_bytes: self.memory.charged_bytes(),
            peak_bytes: self.memory.peak_bytes(),
            limit_bytes: self.memory.limit_bytes(),
            tenant_budget_bytes: self.memory.tenant_budget_bytes(),
        });
        for (i, m) in self.tenant_metrics.iter().enumerate() {
            let charged = self.memory.tenant_charged_bytes(TenantId(i as u32));
            m.memory_charged_bytes.set(crate::metrics::gauge(charged));
        }
        for v in &self.volumes {
            if let Some([lc, tp]) = v.volume.device_commands_by_class() {
                bump(
                    &self.metrics.device_commands(&v.name, "latency_critical"),
                    lc,
                );
                bump(&self.metrics.device_commands(&v.name, "throughput"), tp);
            }
        }
    }
}

/// Raises a monotonic counter to `target` (only the admin thread writes these).
fn bump(counter: &prometheus_client::metrics::counter::Counter, target: u64) {
    let now = counter.get();
    if target > now {
        counter.inc_by(target - now);
    }
}

impl Shared {
    /// Opens the volumes, resolves tenants and exports, admits the default flows.
    pub fn new(config: ServerConfig) -> Result<Shared, StartError> {
        config.validate()?;
        let mut volumes = Vec::with_capacity(config.volumes.len());
        for v in &config.volumes {
            let volume = open_volume(v)?;
            let size_bytes = volume.size_bytes();
            tracing::info!(volume = %v.name, kind = volume.kind(), size_bytes, "volume opened");
            volumes.push(VolumeEntry {
                name: v.name.clone(),
                geometry: VolumeGeometry {
                    size_bytes,
                    block_bytes: v.block_bytes,
                },
                volume,
            });
        }
        let tenants = Tenants::from_config(&config);
        let exports = config
            .exports
            .iter()
            .map(|e| ExportEntry {
                name: e.name.clone(),
                description: e.description.clone().unwrap_or_default(),
                volume: VolumeId(
                    config
                        .volumes
                        .iter()
                        .position(|v| v.name == e.volume)
                        .unwrap_or(0) as u16,
                ),
                tenant: tenants
                    .by_name(&e.tenant)
                    .map(|t| t.id)
                    .unwrap_or(TenantId(0)),
            })
            .collect();

        let profile = config.qos.device_profile()?;
        let registry = qos::Registry::new(
            profile,
            qos::RegistryConfig {
                max_tenants: (config.tenants.len() as u32).saturating_add(65_536),
                lc_surge_pct: config.qos.lc_surge_pct,
            },
        );
        let bucket = registry.shared();
        let vrate_on = config.qos.vrate == crate::config::VrateMode::On;
        let mut control = Control {
            registry,
            live: HashMap::new(),
            retired: vec![TokenTotals::default(); tenants.len()],
            windows: HashMap::new(),
            track_windows: vrate_on,
        };
        let mut default_flows = Vec::with_capacity(tenants.len());
        for t in tenants.iter() {
            let spec = match (t.class, &t.slo) {
                (TenantClass::BestEffort, _) => {
                    Some(qos::TenantSpec::BestEffort(qos::BeSpec::default()))
                }
                (TenantClass::LatencyCritical, Some(slo)) => {
                    Some(qos::TenantSpec::LatencyCritical(slo.to_qos()))
                }
                (TenantClass::LatencyCritical, None) => None,
            };
            let flow = match spec {
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
        let memory = MemoryLedger::new(config.limits.max_memory_bytes.0, tenants.len());
        let sessions = Sessions::new(
            &tenants,
            config.limits.max_connections_per_tenant,
            config.limits.open_sessions_per_source(),
        );
        let tls = match &config.tls {
            Some(t) => Some(Arc::new(crate::tls::TlsServer::from_config(t)?)),
            None => None,
        };
        Ok(Shared {
            tls,
            tenants,
            volumes,
            exports,
            control: Mutex::new(control),
            bucket,
            default_flows,
            default_windows,
            metrics,
            tenant_metrics,
            state: AtomicU8::new(RunState::Running as u8),
            open_connections: AtomicUsize::new(0),
            sessions,
            memory,
            auth_throttle: Mutex::new(AuthThrottle::default()),
            handshakes: Mutex::new(HandshakeBudget::new(
                config.limits.unauthenticated_budget(),
                config.limits.max_unauthenticated_per_source,
            )),
            next_session_id: AtomicU64::new(1),
            config,
        })
    }

    /// A connection the acceptor handed over was dropped before a worker adopted it: its
    /// `max_connections` slot and its unauthenticated slot go back.
    pub fn forget_new_conn(&self, peer: Option<std::net::SocketAddr>) {
        self.open_connections.fetch_sub(1, Ordering::AcqRel);
        if let Some(peer) = peer {
            self.lock_handshakes().give_back(peer.ip());
        }
    }

    /// Tells every thread to drain (see `ServerHandle::shutdown`).
    pub fn begin_drain(&self) {
        self.state
            .store(RunState::Draining as u8, Ordering::Release);
    }
}
