//! Starting and stopping a server: shared state, listeners, the acceptor and the workers.
//!
//! # What it implements
//! [`start`] turns a validated [`ServerConfig`] into a running server: it builds the shared
//! state ([`crate::shared::Shared::new`]: volumes, tenants, exports, the QoS control plane with
//! every default flow admitted), binds the listeners, and spawns the threads:
//!
//! ```text
//!   acceptor ──(new socket, round robin)──▶ worker 0 … worker N-1 ──▶ backends
//!   admin (GET /metrics)                      each: epoll + its io_uring(s) + scheduler share
//! ```
//!
//! [`ServerHandle::shutdown`] (what SIGINT/SIGTERM trigger in `ullstack serve`) stops the
//! acceptor, tells workers to drain — stop reading new requests, finish every request already
//! read (queued in the scheduler or at the backend), send the replies, close — and joins them,
//! all within `limits.shutdown_grace_ms`: a connection still owed something then is closed as
//! it is, and [`Stopped::GraceExpired`] says how many were (`ullstack serve` exits with
//! [`EXIT_GRACE_EXPIRED`] then, 0 after a complete drain). No reply is sent for a request that
//! did not complete, so no acknowledged write is lost either way.
//!
//! [`ServerHandle::reload`] (SIGHUP, and `POST /reload` on the admin listener) re-reads the
//! config ([`crate::reload`]).
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
//! *Why an acceptor and not `SO_REUSEPORT`.* One listener per worker with `SO_REUSEPORT` would
//! save the hand-over (an inbox lock and an eventfd write per connection, nothing per I/O), but
//! the kernel picks the listener by a hash of the connection's addresses, so 4 connections
//! over 2 workers land 2:2 only 3 times in 8 (a 4:0 split leaves a worker idle for the
//! connections' whole life), and the per-source admission checks ([`crate::handshakes`]) would
//! be split over the workers' threads. Connections are long-lived and few per client, so the
//! even spread is worth the hand-over. `server/tests/workers.rs` checks it through the
//! per-worker gauge `ullstack_worker_connections` (6 connections, both protocols: 3 and 3 with
//! 2 workers, 6 with 1), and `cargo run --release -p server --example workers_scaling` prints
//! the aggregate IOPS of an LC tenant under fio with 1 and 2 workers.
//!
//! # What it leaves out
//! Moving a connection between workers after accept; changing the listeners or the number of
//! workers without a restart.
//!
//! # Config keys
//! `[listen]`, `[dataplane] workers`, `[limits] max_connections,
//! max_unauthenticated_connections, max_unauthenticated_per_source,
//! accepts_per_source_per_sec` ([`crate::handshakes`]), `shutdown_grace_ms`; `[qos]`; `[admin]
//! token`.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::ServerConfig;
use crate::conn::{NewConn, Protocol};
use crate::handshakes::{AcceptRate, Refusal};
use crate::reload::{ReloadError, ReloadReport};
pub use crate::shared::StartError;
use crate::shared::{ConfigSource, RunState, Shared};
use crate::sys::EventFd;
use crate::vrate::VrateLoop;
use crate::worker::{Worker, WorkerInbox};

/// The addresses a started server listens on (port 0 in the config resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundAddrs {
    pub native: Option<SocketAddr>,
    pub nbd: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
}

/// `ullstack serve`'s exit status when `limits.shutdown_grace_ms` passed before every
/// connection was drained (0 after a complete drain). Non-zero so a script or a rolling
/// upgrade can tell that clients lost their connection mid-request; the packaged systemd unit
/// lists it in `SuccessExitStatus`, so such a stop is not a unit failure.
pub const EXIT_GRACE_EXPIRED: u8 = 3;

/// How a server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every request read was answered and every connection closed in time.
    Drained,
    /// The shutdown grace passed first: this many connections were closed with requests
    /// unanswered or replies not taken.
    GraceExpired { connections_cut: usize },
}

impl Stopped {
    /// `ullstack serve`'s exit status for it.
    pub fn exit_code(self) -> u8 {
        match self {
            Stopped::Drained => 0,
            Stopped::GraceExpired { .. } => EXIT_GRACE_EXPIRED,
        }
    }
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
    /// Shared state as the server started (tests read metrics and registrations through it;
    /// [`ServerHandle::current`] is the generation a reload put in force).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The generation of the config in force.
    pub fn current(&self) -> Arc<Shared> {
        self.shared.current().unwrap_or_else(|| self.shared.clone())
    }

    /// Where [`ServerHandle::reload`] (and SIGHUP, `POST /reload`) reads the config.
    pub fn set_config_source(&self, source: ConfigSource) {
        self.shared.set_source(source);
    }

    /// Re-reads the config from its source and applies it, or refuses it and changes nothing
    /// ([`crate::reload`]); `trigger` names the cause in the log (`sighup`, `api`).
    pub fn reload(&self, trigger: &'static str) -> Result<ReloadReport, ReloadError> {
        crate::reload::reload(&self.shared, trigger)
    }

    /// Applies `config` as a reload would (logged with trigger `api`).
    pub fn apply_config(&self, config: ServerConfig) -> Result<ReloadReport, ReloadError> {
        crate::reload::apply_logged(&self.shared, config, "api")
    }

    /// Stops accepting, drains in-flight I/O, replies, closes every connection within
    /// `limits.shutdown_grace_ms`, joins the threads.
    pub fn shutdown(mut self) -> Stopped {
        self.begin_shutdown();
        tracing::info!(
            event = "stop",
            grace_ms = self.current().config.limits.shutdown_grace_ms,
            "stopping: draining in-flight I/O"
        );
        for (name, thread) in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!(thread = %name, "thread panicked");
            }
        }
        self.shared.release_current();
        match self.shared.cut_connections.load(Ordering::Acquire) {
            0 => Stopped::Drained,
            n => Stopped::GraceExpired { connections_cut: n },
        }
    }

    fn begin_shutdown(&self) {
        self.shared.begin_drain();
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
        self.shared.release_current();
    }
}

/// Accept queue length of every listener. std's `TcpListener::bind` listens with 128: a burst
/// of connects beyond that has SYNs dropped and retried after 1 s (1,000 sequential connects
/// took 6.1 s against nbdkit's 0.03 s). 4096 is Linux's default `net.core.somaxconn` since
/// 5.4, which caps whatever is asked.
pub const LISTEN_BACKLOG: i32 = 4096;

fn bind(what: &'static str, addr: Option<SocketAddr>) -> Result<Option<TcpListener>, StartError> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = bind_blocking(what, addr)?;
    listener
        .set_nonblocking(true)
        .map_err(|source| StartError::Bind { what, addr, source })?;
    Ok(Some(listener))
}

/// Binds and listens with [`LISTEN_BACKLOG`].
fn bind_blocking(what: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    let listener =
        TcpListener::bind(addr).map_err(|source| StartError::Bind { what, addr, source })?;
    crate::sys::listen(listener.as_raw_fd(), LISTEN_BACKLOG)
        .map_err(|source| StartError::Bind { what, addr, source })?;
    Ok(listener)
}

/// Starts a server in this process; returns once every listener is bound.
pub fn start(config: ServerConfig) -> Result<ServerHandle, StartError> {
    for warning in config.startup_warnings() {
        tracing::warn!("{warning}");
    }
    let shared = Shared::new(config)?;
    let listen = shared.config.listen.clone();
    let native = bind("native", listen.native)?;
    let nbd = bind("nbd", listen.nbd)?;
    let admin = match listen.admin {
        Some(addr) => Some(bind_blocking("admin", addr)?),
        None => None,
    };
    let addrs = BoundAddrs {
        native: native.as_ref().and_then(|l| l.local_addr().ok()),
        nbd: nbd.as_ref().and_then(|l| l.local_addr().ok()),
        admin: admin.as_ref().and_then(|l| l.local_addr().ok()),
    };

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
                let metrics = shared2.metrics.clone();
                let routes = crate::admin::AdminApi::new(shared2);
                crate::metrics::serve_admin(listener, metrics, stop, routes)
            })
            .map_err(|source| StartError::Thread {
                what: "admin".into(),
                source,
            })?;
        threads.push(("admin".into(), thread));
    }
    if shared.config.qos.vrate == crate::config::VrateMode::On {
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
        socket_io = socket_io_in_use(shared.config.dataplane.socket_io),
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

/// The socket path the workers use: `uring` when configured and the kernel gives a socket
/// ring the opcodes it needs (a probe ring, dropped at once; each worker sets up its own and
/// falls back alone), `epoll` otherwise.
fn socket_io_in_use(configured: crate::config::SocketIo) -> &'static str {
    match configured {
        crate::config::SocketIo::Epoll => "epoll",
        crate::config::SocketIo::Uring => match crate::sockring::SockRing::new(
            // The probe needs no provided buffers.
            crate::config::SocketRecv::Single,
        ) {
            Ok(_) => "uring",
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "dataplane.socket_io = \"uring\" refused by the kernel: workers use epoll"
                );
                "epoll"
            }
        },
    }
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
    let mut accept_rate = AcceptRate::new(shared.config.limits.accepts_per_source_per_sec);
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
        if let Err(e) = crate::sys::poll(&mut fds, 1000) {
            tracing::error!(error = %e, "acceptor poll failed");
            std::thread::sleep(std::time::Duration::from_millis(10));
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
                            tracing::warn!(
                                event = "refusal",
                                %peer,
                                reason = "max_connections",
                                max_connections,
                                "connection refused: limits.max_connections reached"
                            );
                            drop(stream);
                            continue;
                        }
                        if let Err(refusal) = admit_unauthenticated(&shared, &mut accept_rate, peer)
                        {
                            shared.metrics.connection_refused();
                            tracing::info!(
                                event = "refusal",
                                %peer,
                                reason = refusal.name(),
                                "connection refused"
                            );
                            drop(stream);
                            continue;
                        }
                        if let Err(e) = prepare(&stream) {
                            tracing::warn!(%peer, error = %e, "cannot configure accepted socket");
                            shared.lock_handshakes().give_back(peer.ip());
                            continue;
                        }
                        shared.open_connections.fetch_add(1, Ordering::AcqRel);
                        let inbox = &inboxes[next_worker % inboxes.len()];
                        next_worker = next_worker.wrapping_add(1);
                        inbox.push(NewConn {
                            stream,
                            peer: Some(peer),
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

/// Admits a new (so far unauthenticated) connection from `peer` under the per-source accept
/// rate and the unauthenticated budget ([`crate::handshakes`]); takes its budget slot.
fn admit_unauthenticated(
    shared: &Shared,
    rate: &mut AcceptRate,
    peer: SocketAddr,
) -> Result<(), Refusal> {
    if !rate.allow(peer.ip(), crate::clock::now_ns()) {
        return Err(Refusal::Rate);
    }
    shared.lock_handshakes().try_take(peer.ip())
}

fn prepare(stream: &TcpStream) -> io::Result<()> {
    stream.set_nonblocking(true)?;
    stream.set_nodelay(true)?;
    Ok(())
}
