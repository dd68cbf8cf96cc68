//! Client side of ullstack's remote flash: an async, pipelined client library for the
//! ullstack wire protocol v1, and the `ullstack bench` load generator built on it.
//!
//! * [`Client`] — connect (TCP, or TLS with a PSK or the server's certificate: [`tls`]), authenticate (HELLO), register a flow as latency-critical with
//!   an SLO or as best-effort (REGISTER → [`TenantHandle`], or [`ClientError::Refused`] with the
//!   server's reason), then READ / WRITE (optionally FUA) / FLUSH / TRIM / STATS with any number
//!   of requests in flight on one connection, replies matched by cookie in any order. The
//!   design is in [`connection`].
//! * [`registry`] — connect by volume name through a fleet's etcd registry
//!   ([`Client::connect_via_registry`]: the server holding the tenant's reservation, found
//!   with crate `fleet`), or [`registry::locate`] a volume's addresses and NBD URIs.
//! * [`bench`](mod@bench) — open-loop (Poisson arrivals, latency measured from the scheduled send time)
//!   and closed-loop (fixed queue depth) load from several tenants at once, each with its own
//!   class, SLO, read ratio, size and access pattern, reported as per-tenant IOPS, MB/s and
//!   HDR latency percentiles.
//!
//! ```no_run
//! # async fn demo() -> Result<(), client::ClientError> {
//! use client::{Client, Credentials, TenantHandle, latency_critical};
//! use proto::wire::WriteMode;
//! let creds = Credentials { tenant: "A".into(), secret: "s3cret".into(), volume: "default".into() };
//! let c = Client::connect("127.0.0.1:7000", &creds).await?;
//! let h = c.register(latency_critical(500_000, 120_000, 100, 4096)).await?;
//! c.write(h, 0, &[7u8; 4096], WriteMode::Fua).await?;
//! let data = c.read(h, 0, 4096).await?;
//! assert_eq!(data[0], 7);
//! c.unregister(h).await?;
//! # let _ = TenantHandle::DEFAULT; Ok(()) }
//! ```

pub mod bench;
pub mod connection;
mod error;
pub mod registry;
mod sys;
pub mod tls;

pub use connection::{latency_critical, register_class, Client, Credentials, TenantHandle};
pub use error::ClientError;
pub use proto::wire::{Access, RegisterClass, Slo, Status, WriteMode};
pub use tls::{ClientTls, ServerCheck};
