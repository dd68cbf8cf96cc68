//! # server — `ullstack serve`: remote flash with per-tenant QoS
//!
//! The real server of remote.md: block I/O over TCP from a few run-to-completion worker
//! threads, every request checked against its tenant's secret and ACL before it reaches
//! storage, and scheduled by the token scheduler of crate `qos` so latency-critical tenants keep
//! their SLOs while best-effort tenants share the rest. Two faces on one dataplane: the own
//! protocol (crate `proto::wire`; the client library and `ullstack bench` speak it) and
//! fixed-newstyle NBD (fio, nbdinfo, nbdcopy, qemu, the kernel's nbd-client).
//!
//! # Layout: modules in dependency order
//! Each module uses only modules above it in this list (no cycles), so the server reads from
//! the bottom up: leaves, storage, shared state, connections, protocols, the loop, the server.
//!
//! | layer | module | what it is |
//! | --- | --- | --- |
//! | leaves | [`clock`] | monotonic nanoseconds shared by every thread |
//! | | [`appendvec`] | a vector that only grows, read by every thread without a lock (per-tenant counters) |
//! | | [`logfmt`] | the log: human lines, or JSON lines (`--log-format json`) |
//! | | [`latency`] | per-LC-flow latency windows (lock-free histograms) the closed loop reads |
//! | | [`sys`] | safe wrappers for epoll, eventfd, read, writev, socket ioctls, poll, aligned allocation, and the io_uring [`sys::Ring`] that owns what its submissions point at |
//! | | [`buf`] | 4 KiB-aligned I/O buffers, the per-worker pool, replies that view a memory volume's pages |
//! | | [`slab`] | stable indexes for in-flight requests |
//! | | [`throttle`] | exponential back-off of wrong secrets per source address |
//! | | [`handshakes`] | room for unauthenticated connections: per source, in all, accept rate |
//! | | [`inbuf`] | a connection's input buffer |
//! | | [`inplace`] | frames decoded where a multishot receive put them; only what straddles a buffer is copied |
//! | | [`idle`] | when an idle or throttled worker sleeps, and how long |
//! | | [`coalesce`] | adaptive request coalescing: a short pause under pipelined load |
//! | config | [`config`] | `server.toml`: listeners, dataplane, limits, QoS profile, volumes, tenants, exports |
//! | | [`tenant`] | tenants, constant-time secrets, ACLs: the check every request passes |
//! | | [`metrics`] | Prometheus metrics and the admin endpoint's HTTP responder |
//! | | [`tls`] | TLS (OpenSSL, PSK and certificates) over in-memory pipes: the socket hook |
//! | storage | [`backend`] | volumes: `memory` (sparse), `file` (io_uring, O_DIRECT), `emulated` (the SSD model in real time) |
//! | shared | [`memory`] | the ledger of bytes clients make the server hold, per tenant budget and in all |
//! | | [`sessions`] | sessions per tenant, and per source for open tenants |
//! | | [`control`] | the control plane: admission and the flows it admitted, by owner |
//! | | [`shared`] | one generation of the config (volumes, tenants, exports, TLS) and the server's life (run state, counts, control plane) |
//! | connections | [`conn`] | connection identity, output queue and writev, requests, the decode context |
//! | protocols | [`native`] | own protocol sessions: HELLO, REGISTER/UNREGISTER, READ/WRITE/FLUSH/TRIM/STATS |
//! | | [`nbd`] | NBD export: handshake via `proto::nbd`, transmission, truthful flags |
//! | | [`ringwait`] | how a uring worker waits: completions per wait, a spin sized from the wake cost |
//! | | [`sockring`] | the socket ring of `socket_io = "uring"`: RECV, SENDMSG, cancel, one enter per step |
//! | dataplane | [`worker`] | the loop: epoll or the socket ring, decode, check, schedule (`qos::SchedShare`), submit, reap, reply, drain |
//! | control | [`reload`] | SIGHUP / `POST /reload`: the next generation, all or nothing |
//! | | [`admin`] | the admin routes: scrapes of the generation in force, `POST /reload` behind a token |
//! | | [`vrate`] | the closed loop: LC p95 per window → device rate scale |
//! | | [`server`] | start/stop: listeners, acceptor, worker threads, graceful drain under a deadline |
//! | | [`signals`] | SIGINT/SIGTERM (stop) and SIGHUP (reload) for `ullstack serve` |
//!
//! # Using it in-process
//! ```no_run
//! use server::config::{ByteSize, ServerConfig};
//! let config = ServerConfig::quick_start(ByteSize(1 << 30), "127.0.0.1:0".parse().ok(), "127.0.0.1:0".parse().ok());
//! let handle = server::start(config).expect("server starts");
//! println!("NBD on {:?}, own protocol on {:?}", handle.addrs.nbd, handle.addrs.native);
//! handle.shutdown(); // drains in-flight I/O, replies, closes
//! ```
//!
//! The operator's guide (quick start, every config key, the metrics) is `docs/server.md`.

// Leaves.
pub mod appendvec;
pub mod buf;
pub mod clock;
pub mod coalesce;
pub mod handshakes;
pub mod idle;
pub mod inbuf;
pub mod inplace;
pub mod latency;
pub mod logfmt;
pub mod slab;
pub mod sys;
pub mod throttle;
// Config, tenants, metrics.
pub mod config;
pub mod metrics;
pub mod tenant;
pub mod tls;
// Storage and scheduling.
pub mod backend;
// Shared state, connections, protocols, the loop, the server.
pub mod conn;
pub mod control;
pub mod memory;
pub mod native;
pub mod nbd;
pub mod ringwait;
pub mod sessions;
pub mod shared;
pub mod sockring;
pub mod worker;
// Control threads and process glue.
pub mod admin;
pub mod reload;
pub mod server;
pub mod signals;
pub mod vrate;

pub use logfmt::LogFormat;
pub use reload::{ReloadError, ReloadReport};
pub use server::{start, BoundAddrs, ServerHandle, StartError, Stopped};
pub use shared::ConfigSource;

/// Logs to stderr in `format` ([`logfmt`]); `RUST_LOG` filters (default `info`). Safe to
/// call twice.
pub fn init_logging(format: LogFormat) {
    logfmt::init(format);
}
