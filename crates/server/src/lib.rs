//! # server — `ullstack serve`: remote flash with per-tenant QoS
//!
//! The real server of remote.md: block I/O over TCP from a few run-to-completion worker
//! threads, every request checked against its tenant's secret and ACL before it reaches
//! storage, and scheduled by the token scheduler of crate `qos` so latency-critical tenants keep
//! their SLOs while best-effort tenants share the rest. Two faces on one dataplane: the own
//! protocol (crate `proto::wire`; the client library and `ullstack bench` speak it) and
//! fixed-newstyle NBD (fio, nbdinfo, nbdcopy, qemu, the kernel's nbd-client).
//!
//! | module | what it is |
//! | --- | --- |
//! | [`config`] | `server.toml`: listeners, dataplane, limits, QoS profile, volumes, tenants, exports |
//! | [`tenant`] | tenants, constant-time secrets, ACLs: the check every request passes |
//! | [`backend`] | volumes: `memory` (sparse), `file` (io_uring, O_DIRECT), `emulated` (the SSD model in real time) |
//! | [`buf`] | 4 KiB-aligned I/O buffers and the per-worker pool |
//! | [`sched`] | a worker's share of the QoS scheduler (or FIFO with `scheduler = "off"`) |
//! | [`worker`] | the dataplane loop: epoll, decode, check, schedule, submit, reap, reply |
//! | [`coalesce`] | adaptive request coalescing: a short pause under pipelined load |
//! | [`calibrate`] | measuring a QoS device profile from the SSD model (emulated volumes) |
//! | [`vrate`] | the closed loop: LC p95 per window → device rate scale |
//! | [`native`] | own protocol sessions: HELLO, REGISTER/UNREGISTER, READ/WRITE/FLUSH/TRIM/STATS |
//! | [`nbd`] | NBD export: handshake via `proto::nbd`, transmission, truthful flags |
//! | [`metrics`] | Prometheus metrics and the admin `GET /metrics` endpoint |
//! | [`server`] | start/stop: shared state, acceptor, worker threads, graceful drain |
//! | [`signals`] | SIGINT/SIGTERM for `ullstack serve` |
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

pub mod backend;
pub mod buf;
pub mod calibrate;
pub mod coalesce;
pub mod config;
pub mod metrics;
pub mod native;
pub mod nbd;
pub mod sched;
pub mod server;
pub mod signals;
pub mod tenant;
pub mod vrate;
pub mod worker;

pub use server::{start, BoundAddrs, ServerHandle, StartError};

/// Logs to stderr; `RUST_LOG` filters (default `info`). Safe to call twice.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
