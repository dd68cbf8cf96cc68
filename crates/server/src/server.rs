//! Starting and stopping a server: shared state, listeners, the acceptor and the workers.
//!
//! # What it implements
//! [`start`] turns a validated [`ServerConfig`] into a running server: it opens every volume,
//! resolves tenants and exports, builds the QoS control plane (the `qos` registry, with every
//! tenant's *default flow* admitted up front — a best-effort share, or the fixed SLO of an LC
//! tenant, so a config whose fixed SLOs do not fit the device fails at start, naming the
//! tenant), binds the listeners, and spawns the threads:
//!
//! ```text
//!   acceptor ──(new socket, round robin)──▶ worker 0 … worker N-1 ──▶ backends
//!   admin (GET /metrics)                      each: epoll + its io_uring(s) + scheduler share
//! ```
//!
//! [`ServerHandle::shutdown`] (what SIGINT/SIGTERM trigger in `ullstack serve`) stops the
//! acceptor, tells workers to drain — stop reading new requests, finish every request already
//! read (queued in the scheduler or at the backend), send the replies, close — and joins them.
//!
//! # Design
//! The acceptor is one thread blocked in `poll` on the listeners and a wake-up eventfd; it hands
//! each accepted socket to the next worker in turn (through a mutex-protected inbox and the
//! worker's eventfd), so the workers never contend on `accept`. Everything a worker needs from
//! others is read-only ([`Shared`]) except the registry mutex, taken only on REGISTER /
//! UNREGISTER and by the admin thread.
//!
//! Worked example: `workers = 2`, 5 NBD connections from fio's nbd engine (`nrfiles=5`) land as
//! worker 0: #1, #3, #5; worker 1: #2, #4.
//!
//! # What it leaves out
//! Hot reconfiguration, and moving a connection between workers after accept.
//!
//! # Config keys
//! `[listen]`, `[dataplane] workers`, `[limits] max_connections`, `[qos]`.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::backend::{open_volume, BackendError, Volume};
use crate::config::{ServerConfig, TenantClass};
use crate::metrics::{Metrics, TenantMetrics};
use crate::tenant::{TenantId, Tenants, VolumeGeometry, VolumeId};
use crate::vrate::{LatencyWindow, VrateLoop};
use crate::worker::{NewConn, Protocol, Worker, WorkerInbox};

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
    next_session_id: AtomicU64,
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

/// The addresses a started server listens on (port 0 in the config resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundAddrs {
    pub native: Option<SocketAddr>,
    pub nbd: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
}

/// A running server.
pub struct ServerHandle {
    pub addrs: BoundAddrs,
    shared: Arc<Shared>,
    acceptor_wake: Arc<EventFd>,
    worker_inboxes: Vec<Arc<WorkerInbox>>,
    admin_stop: Arc<AtomicBool>,
    threads: Vec<(String, JoinHandle<()>)>,
}

impl ServerHandle {
    /// Shared state (tests read metrics and registrations through it).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops accepting, drains in-flight I/O, replies, closes every connection, joins threads.
    pub fn shutdown(mut self) {
        self.begin_shutdown();
        for (name, thread) in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!(thread = %name, "thread panicked");
            }
        }
    }

    fn begin_shutdown(&self) {
        self.shared
            .state
            .store(RunState::Draining as u8, Ordering::Release);
        self.acceptor_wake.signal();
        for inbox in &self.worker_inboxes {
            inbox.wake();
        }
        self.admin_stop.store(true, Ordering::Release);
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.begin_shutdown();
            for (_, thread) in self.threads.drain(..) {
                let _ = thread.join();
            }
        }
    }
}

/// A nonblocking eventfd used to wake a thread blocked in poll/epoll.
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64. EAGAIN (counter saturated) is harmless.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

fn bind(what: &'static str, addr: Option<SocketAddr>) -> Result<Option<TcpListener>, StartError> {
    let Some(addr) = addr else { return Ok(None) };
    let listener =
        TcpListener::bind(addr).map_err(|source| StartError::Bind { what, addr, source })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| StartError::Bind { what, addr, source })?;
    Ok(Some(listener))
}

/// Starts a server in this process; returns once every listener is bound.
pub fn start(config: ServerConfig) -> Result<ServerHandle, StartError> {
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
            (TenantClass::Be, _) => Some(qos::TenantSpec::BestEffort(qos::BeSpec::default())),
            (TenantClass::Lc, Some(slo)) => Some(qos::TenantSpec::LatencyCritical(slo.to_qos())),
            (TenantClass::Lc, None) => None,
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
    let native = bind("native", config.listen.native)?;
    let nbd = bind("nbd", config.listen.nbd)?;
    let admin = match config.listen.admin {
        Some(addr) => Some(TcpListener::bind(addr).map_err(|source| StartError::Bind {
            what: "admin",
            addr,
            source,
        })?),
        None => None,
    };
    let addrs = BoundAddrs {
        native: native.as_ref().and_then(|l| l.local_addr().ok()),
        nbd: nbd.as_ref().and_then(|l| l.local_addr().ok()),
        admin: admin.as_ref().and_then(|l| l.local_addr().ok()),
    };

    let shared = Arc::new(Shared {
        tenants,
        volumes,
        exports,
        control: Mutex::new(control),
        bucket,
        default_flows,
        default_windows,
        metrics: metrics.clone(),
        tenant_metrics,
        state: AtomicU8::new(RunState::Running as u8),
        open_connections: AtomicUsize::new(0),
        next_session_id: AtomicU64::new(1),
        config,
    });

    let mut threads = Vec::new();
    let mut inboxes = Vec::new();
    for index in 0..shared.config.dataplane.workers {
        let inbox = Arc::new(WorkerInbox::new().map_err(|source| StartError::Os {
            what: "worker eventfd",
            source,
        })?);
        let worker = Worker::new(index, shared.clone(), inbox.clone())?;
        let name = format!("ullstack-w{index}");
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || worker.run())
            .map_err(|source| StartError::Thread {
                what: name.clone(),
                source,
            })?;
        threads.push((name, thread));
        inboxes.push(inbox);
    }

    let acceptor_wake = Arc::new(EventFd::new().map_err(|source| StartError::Os {
        what: "acceptor eventfd",
        source,
    })?);
    {
        let shared = shared.clone();
        let wake = acceptor_wake.clone();
        let inboxes = inboxes.clone();
        let thread = std::thread::Builder::new()
            .name("ullstack-accept".into())
            .spawn(move || accept_loop(shared, native, nbd, wake, inboxes))
            .map_err(|source| StartError::Thread {
                what: "acceptor".into(),
                source,
            })?;
        threads.push(("acceptor".into(), thread));
    }
    let admin_stop = Arc::new(AtomicBool::new(false));
    if let Some(listener) = admin {
        let shared2 = shared.clone();
        let stop = admin_stop.clone();
        let thread = std::thread::Builder::new()
            .name("ullstack-admin".into())
            .spawn(move || {
                let refresh_from = shared2.clone();
                crate::metrics::serve_admin(listener, shared2.metrics.clone(), stop, move || {
                    refresh_from.refresh_token_metrics()
                })
            })
            .map_err(|source| StartError::Thread {
                what: "admin".into(),
                source,
            })?;
        threads.push(("admin".into(), thread));
    }
    if vrate_on {
        let q = &shared.config.qos;
        let vrate = VrateLoop::new(q.vrate_tuning, q.vrate_window_ms * 1_000_000)
            .map_err(|e| StartError::Scheduler(format!("qos.vrate_tuning: {e}")))?;
        let shared2 = shared.clone();
        let stop = admin_stop.clone();
        let thread = std::thread::Builder::new()
            .name("ullstack-vrate".into())
            .spawn(move || crate::vrate::run(shared2, vrate, stop))
            .map_err(|source| StartError::Thread {
                what: "vrate".into(),
                source,
            })?;
        threads.push(("vrate".into(), thread));
    }
    tracing::info!(
        ?addrs,
        workers = shared.config.dataplane.workers,
        "server started"
    );
    Ok(ServerHandle {
        addrs,
        shared,
        acceptor_wake,
        worker_inboxes: inboxes,
        admin_stop,
        threads,
    })
}

fn accept_loop(
    shared: Arc<Shared>,
    native: Option<TcpListener>,
    nbd: Option<TcpListener>,
    wake: Arc<EventFd>,
    inboxes: Vec<Arc<WorkerInbox>>,
) {
    let listeners: Vec<(TcpListener, Protocol)> = native
        .map(|l| (l, Protocol::Native))
        .into_iter()
        .chain(nbd.map(|l| (l, Protocol::Nbd)))
        .collect();
    let mut next_worker = 0usize;
    let max_connections = shared.config.limits.max_connections;
    loop {
        if shared.state() != RunState::Running {
            break;
        }
        let mut fds: Vec<libc::pollfd> = listeners
            .iter()
            .map(|(l, _)| libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        fds.push(libc::pollfd {
            fd: wake.raw(),
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: fds is a valid array of pollfd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1000) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(error = %e, "acceptor poll failed");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            continue;
        }
        for (i, (listener, protocol)) in listeners.iter().enumerate() {
            if fds[i].revents == 0 {
                continue;
            }
            // Accept everything pending on this listener.
            loop {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        if shared.open_connections.load(Ordering::Acquire) >= max_connections {
                            shared.metrics.connection_refused();
                            tracing::warn!(%peer, max_connections, "connection refused: limits.max_connections reached");
                            drop(stream);
                            continue;
                        }
                        if let Err(e) = prepare(&stream) {
                            tracing::warn!(%peer, error = %e, "cannot configure accepted socket");
                            continue;
                        }
                        shared.open_connections.fetch_add(1, Ordering::AcqRel);
                        let inbox = &inboxes[next_worker % inboxes.len()];
                        next_worker = next_worker.wrapping_add(1);
                        inbox.push(NewConn {
                            stream,
                            protocol: *protocol,
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        // EMFILE and friends: log and back off rather than spin.
                        tracing::warn!(error = %e, "accept failed");
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        break;
                    }
                }
            }
        }
        if fds[listeners.len()].revents != 0 {
            wake.drain();
        }
    }
}

fn prepare(stream: &TcpStream) -> io::Result<()> {
    stream.set_nonblocking(true)?;
    stream.set_nodelay(true)?;
    Ok(())
}
