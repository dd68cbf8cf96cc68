//! `[limits]`: what one client may cost the server: connections (in all, per tenant, not yet
//! authenticated, per source address), requests and bytes in flight, the largest request, the
//! memory all connections together may make the server hold, and the timeouts (idle,
//! handshake, request, shutdown grace).
//!
//! The limits are checked against each other: `max_inflight_bytes` holds at least one largest
//! request, and `max_memory_bytes` at least `max_inflight_bytes`. Worked example:
//! `max_request_bytes = "1MiB"` with `max_inflight_bytes = "512KiB"` is refused, naming
//! `limits.max_inflight_bytes` and the 1 MiB it must reach.

use serde::Deserialize;

use super::{invalid, ByteSize, ConfigError};

/// Largest request either protocol accepts (real NBD clients send up to 32 MiB).
pub const MAX_REQUEST_BYTES_LIMIT: u64 = 32 * 1024 * 1024;
/// Smallest request-size cap a config may set: below one 4 KiB block nothing useful works.
pub const MIN_REQUEST_BYTES_LIMIT: u64 = 4096;

/// `[limits]`: what one client may cost the server.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Open connections across all workers and both protocols; more are accepted and closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Requests one connection may have in flight; beyond it the server stops reading that socket.
    #[serde(default = "default_max_inflight_requests")]
    pub max_inflight_requests: usize,
    /// Payload bytes one connection may have in flight (reads and writes).
    #[serde(default = "default_max_inflight_bytes")]
    pub max_inflight_bytes: ByteSize,
    /// Largest single request; larger ones get a status (never an allocation).
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: ByteSize,
    /// Connections one tenant may hold open (counted once HELLO / the NBD handshake names the
    /// tenant), so one tenant's connections cannot lock the others out of `max_connections`.
    #[serde(default = "default_max_connections_per_tenant")]
    pub max_connections_per_tenant: usize,
    /// Bytes all connections together may hold (request and reply payloads, queued replies,
    /// input buffers); over it the server stops reading requests until replies drain.
    /// Default: a quarter of the machine's physical memory ([`default_max_memory_bytes`]).
    #[serde(default = "default_max_memory_bytes")]
    pub max_memory_bytes: ByteSize,
    /// Close a connection after this long without a request and with nothing in flight (0: never).
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Close a connection that has not finished HELLO / the NBD handshake in this time.
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
    /// Close a connection whose client started a request (or a refused payload being dropped)
    /// and has not sent the rest within this time (0: never): any byte resets the idle timer,
    /// so without it a request trickled at 1 byte/s held its connection forever.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Connections not yet authenticated (no HELLO / NBD export yet) the server holds at most;
    /// absent: a quarter of `max_connections`. The rest of `max_connections` stays for
    /// authenticated ones, so raw sockets that never handshake cannot lock tenants out.
    #[serde(default)]
    pub max_unauthenticated_connections: Option<usize>,
    /// Unauthenticated connections one source address may hold, so one address cannot take
    /// the whole unauthenticated budget.
    #[serde(default = "default_max_unauthenticated_per_source")]
    pub max_unauthenticated_per_source: usize,
    /// Connections accepted per second from one source address (a burst of one second's worth;
    /// 0: unlimited), so a reconnect loop cannot keep the acceptor busy.
    #[serde(default = "default_accepts_per_source_per_sec")]
    pub accepts_per_source_per_sec: u32,
    /// Sessions of an open tenant (no secret) one source (an IPv4 address, an IPv6 /64) may
    /// hold; absent: a quarter of `max_connections_per_tenant`, at most 64. Anyone is an open
    /// tenant, so without it one address's idle sessions took the whole tenant cap
    /// ([`crate::sessions`]).
    #[serde(default)]
    pub max_open_sessions_per_source: Option<usize>,
    /// How long a stopping server (SIGTERM, SIGINT) waits for the requests it has read to be
    /// answered and their replies taken by the clients; then it closes what is left and exits.
    /// Keep systemd's `TimeoutStopSec` above it. A reload applies a new value.
    #[serde(default = "default_shutdown_grace_ms")]
    pub shutdown_grace_ms: u64,
}

impl LimitsConfig {
    /// `max_unauthenticated_connections` in force (its default: a quarter of
    /// `max_connections`, at least 1).
    pub fn unauthenticated_budget(&self) -> usize {
        self.max_unauthenticated_connections
            .unwrap_or((self.max_connections / 4).max(1))
    }

    /// `max_open_sessions_per_source` in force (its default: a quarter of
    /// `max_connections_per_tenant`, at least 1 and at most
    /// [`DEFAULT_MAX_OPEN_SESSIONS_PER_SOURCE`]).
    pub fn open_sessions_per_source(&self) -> usize {
        self.max_open_sessions_per_source.unwrap_or(
            (self.max_connections_per_tenant / 4).clamp(1, DEFAULT_MAX_OPEN_SESSIONS_PER_SOURCE),
        )
    }
}

/// 64: the most sessions of an open tenant one source holds by default. A host running fio
/// with a few dozen jobs or nbdcopy's 4 connections fits; 16 sources are needed to fill the
/// default 1,000-session cap, where one did before.
pub const DEFAULT_MAX_OPEN_SESSIONS_PER_SOURCE: usize = 64;

/// 64: a NAT or a host running many NBD clients opens a few dozen handshakes at once; an
/// attacker on one address holds no more.
fn default_max_unauthenticated_per_source() -> usize {
    64
}
/// 10,000 a second: above what one client host opens in earnest (5,000 sequential connects
/// with HELLO, `tests/control.rs`, run at about that rate; nbdkit took 1,000 connects in
/// 0.03 s), while an address looping on connect costs the acceptor at most that many
/// accept-and-close a second.
fn default_accepts_per_source_per_sec() -> u32 {
    10_000
}

fn default_max_connections() -> usize {
    10_000
}
/// 30 s: a 32 MiB reply reaches a client at 1.1 MB/s within it, and it is systemd's default
/// stop timeout (the packaged unit waits 40 s before SIGKILL).
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 30_000;
/// Longest grace a config may set: one hour.
pub const MAX_SHUTDOWN_GRACE_MS: u64 = 3_600_000;
fn default_shutdown_grace_ms() -> u64 {
    DEFAULT_SHUTDOWN_GRACE_MS
}
fn default_max_inflight_requests() -> usize {
    256
}
fn default_max_inflight_bytes() -> ByteSize {
    ByteSize(128 << 20)
}
fn default_max_request_bytes() -> ByteSize {
    ByteSize(MAX_REQUEST_BYTES_LIMIT)
}
fn default_max_connections_per_tenant() -> usize {
    1_000
}
/// Idle connections are closed after 5 minutes by default: 50 forgotten connections must not
/// hold `max_connections` forever (NBD clients reconnect; the own client opens a new session).
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;
fn default_idle_timeout_ms() -> u64 {
    DEFAULT_IDLE_TIMEOUT_MS
}
/// The floor of the default `limits.max_memory_bytes` (a small VM still serves a few clients).
pub const MIN_MEMORY_LIMIT_BYTES: u64 = 256 << 20;
/// A quarter of the machine's physical memory (at least [`MIN_MEMORY_LIMIT_BYTES`]): the
/// default `limits.max_memory_bytes`.
pub fn default_max_memory_bytes() -> ByteSize {
    let physical = crate::sys::physical_memory_bytes().unwrap_or(4 * MIN_MEMORY_LIMIT_BYTES);
    ByteSize((physical / 4).max(MIN_MEMORY_LIMIT_BYTES))
}
fn default_handshake_timeout_ms() -> u64 {
    10_000
}
/// 60 s: a 32 MiB WRITE (the largest request) arrives within it at 0.6 MB/s; a client slower
/// than that is not served by a storage server anyway.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 60_000;
/// Shortest request deadline a config may set: timeouts are checked every 10 ms, and below
/// 100 ms a loaded client's ordinary segment delays would close it.
pub const MIN_REQUEST_TIMEOUT_MS: u64 = 100;
fn default_request_timeout_ms() -> u64 {
    DEFAULT_REQUEST_TIMEOUT_MS
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_connections: default_max_connections(),
            max_inflight_requests: default_max_inflight_requests(),
            max_inflight_bytes: default_max_inflight_bytes(),
            max_request_bytes: default_max_request_bytes(),
            max_connections_per_tenant: default_max_connections_per_tenant(),
            max_memory_bytes: default_max_memory_bytes(),
            idle_timeout_ms: default_idle_timeout_ms(),
            handshake_timeout_ms: default_handshake_timeout_ms(),
            request_timeout_ms: default_request_timeout_ms(),
            max_unauthenticated_connections: None,
            max_unauthenticated_per_source: default_max_unauthenticated_per_source(),
            accepts_per_source_per_sec: default_accepts_per_source_per_sec(),
            max_open_sessions_per_source: None,
            shutdown_grace_ms: default_shutdown_grace_ms(),
        }
    }
}

impl LimitsConfig {
    /// Checks the ranges serde cannot, and the limits against each other.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = self;
        if l.max_connections == 0 {
            return Err(invalid("limits.max_connections", 0, "at least 1"));
        }
        if l.max_inflight_requests == 0 || l.max_inflight_requests > 65_536 {
            return Err(invalid(
                "limits.max_inflight_requests",
                l.max_inflight_requests,
                "1..=65536",
            ));
        }
        if l.max_request_bytes.0 < MIN_REQUEST_BYTES_LIMIT
            || l.max_request_bytes.0 > MAX_REQUEST_BYTES_LIMIT
        {
            return Err(invalid(
                "limits.max_request_bytes",
                l.max_request_bytes,
                format!("{MIN_REQUEST_BYTES_LIMIT}..={MAX_REQUEST_BYTES_LIMIT} bytes"),
            ));
        }
        if l.max_inflight_bytes.0 < l.max_request_bytes.0 {
            return Err(invalid(
                "limits.max_inflight_bytes",
                l.max_inflight_bytes,
                format!(
                    "at least limits.max_request_bytes ({})",
                    l.max_request_bytes
                ),
            ));
        }
        if l.max_connections_per_tenant == 0 {
            return Err(invalid(
                "limits.max_connections_per_tenant",
                0,
                "at least 1",
            ));
        }
        if let Some(n) = l.max_unauthenticated_connections {
            if n == 0 || n > l.max_connections {
                return Err(invalid(
                    "limits.max_unauthenticated_connections",
                    n,
                    format!(
                        "1..=limits.max_connections ({}); fewer leaves authenticated tenants room",
                        l.max_connections
                    ),
                ));
            }
        }
        if let Some(n) = l.max_open_sessions_per_source {
            if n == 0 || n > l.max_connections_per_tenant {
                return Err(invalid(
                    "limits.max_open_sessions_per_source",
                    n,
                    format!(
                        "1..=limits.max_connections_per_tenant ({})",
                        l.max_connections_per_tenant
                    ),
                ));
            }
        }
        if l.max_unauthenticated_per_source == 0 {
            return Err(invalid(
                "limits.max_unauthenticated_per_source",
                0,
                "at least 1",
            ));
        }
        if l.request_timeout_ms != 0 && l.request_timeout_ms < MIN_REQUEST_TIMEOUT_MS {
            return Err(invalid(
                "limits.request_timeout_ms",
                l.request_timeout_ms,
                format!("0 (never) or at least {MIN_REQUEST_TIMEOUT_MS} ms"),
            ));
        }
        if l.shutdown_grace_ms > MAX_SHUTDOWN_GRACE_MS {
            return Err(invalid(
                "limits.shutdown_grace_ms",
                l.shutdown_grace_ms,
                format!("0..={MAX_SHUTDOWN_GRACE_MS} ms (0: close at once)"),
            ));
        }
        if l.max_memory_bytes.0 < l.max_inflight_bytes.0 {
            return Err(invalid(
                "limits.max_memory_bytes",
                l.max_memory_bytes,
                format!(
                    "at least limits.max_inflight_bytes ({})",
                    l.max_inflight_bytes
                ),
            ));
        }
        Ok(())
    }
}
