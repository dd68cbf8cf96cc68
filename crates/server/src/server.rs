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
//! `[listen]`, `[dataplane] workers`, `[limits] max_connections,
//! max_unauthenticated_connections, max_unauthenticated_per_source,
//! accepts_per_source_per_sec` ([`crate::handshakes`]), `[qos]`.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::ServerConfig;
use crate::conn::{NewConn, Protocol};
use crate::handshakes::{AcceptRate, Refusal};
pub use crate::shared::StartError;
use crate::shared::{RunState, Shared};
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
    let shared = Arc::new(Shared::new(config)?);
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
                            tracing::warn!(%peer, max_connections, "connection refused: limits.max_connections reached");
                            drop(stream);
                            continue;
                        }
                        if let Err(refusal) = admit_unauthenticated(&shared, &mut accept_rate, peer)
                        {
                            shared.metrics.connection_refused();
                            tracing::debug!(%peer, reason = refusal.name(), "connection refused");
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
