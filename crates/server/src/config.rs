//! `server.toml`: everything `ullstack serve` needs to know, parsed and checked before a socket
//! opens.
//!
//! # What it describes
//! A server is a set of *volumes* (each on its own backend), a set of *tenants* (who may connect,
//! with which secret, in which QoS class, and which byte ranges of which volumes they may read or
//! write), a set of *NBD exports* (an export name bound to one volume and the one tenant whose
//! tokens and ACL that NBD traffic uses), the listen addresses, the dataplane shape and the
//! per-connection limits.
//!
//! # Design
//! Parsing is two steps. `toml` + serde (`deny_unknown_fields` everywhere) turns the text into
//! the plain structs below; a misspelt key fails there with the key and the accepted keys (the
//! `toml` crate adds the line and column). [`ServerConfig::validate`] then checks what the types
//! cannot: ranges (`batch_limit` ≤ 64, at least one worker), unique names, references (an export
//! naming a volume that does not exist is an error naming the export and the missing volume),
//! ACL ranges inside their volume, and an LC tenant's SLO being complete. Every error names the
//! key path and the bad value and says what was expected.
//!
//! Worked example: the quick start (`ullstack serve --memory 1GiB --listen 127.0.0.1:10809`)
//! builds, in code, the equivalent of
//!
//! ```toml
//! [listen]
//! nbd = "127.0.0.1:10809"
//! native = "127.0.0.1:10810"
//!
//! [[volume]]
//! name = "default"
//! backend = { kind = "memory", size = "1GiB" }
//!
//! [[tenant]]
//! name = "open"
//! open = true              # no secret: any HELLO secret is accepted
//! class = "be"
//! acl = [{ volume = "default", access = "read-write" }]
//!
//! [[export]]
//! name = "default"
//! volume = "default"
//! tenant = "open"
//! ```
//!
//! and, since its one volume is in memory, `[qos] profile = "auto"` prices it with the built-in
//! `memory` profile, which never paces RAM; a `file` or `emulated` volume gets the flash
//! profile `reflex-a` unless given a calibrated one, and a memory volume beside it keeps
//! `memory`, unpaced (module `profile`).
//!
//! Sizes are integers (bytes) or strings with a binary or decimal suffix (`"64KiB"`, `"1GiB"`,
//! `"4k"`, `"1G"` — one-letter suffixes are binary, as in nbdkit and fio).
//!
//! # What it leaves out
//! Secrets from files or the environment (they sit in the config; keep it `0600`). A running
//! server re-reads its config on SIGHUP or `POST /reload` ([`crate::reload`] says which keys a
//! reload applies and which take a restart).
//!
//! # Keys
//! `[listen]` native | nbd | admin; `[dataplane]` workers, batch_limit, idle, idle_spin_ns,
//! coalesce_ns;
//! `[limits]` max_connections, max_connections_per_tenant, max_inflight_requests,
//! max_inflight_bytes, max_memory_bytes, max_request_bytes, idle_timeout_ms,
//! handshake_timeout_ms, request_timeout_ms, max_unauthenticated_connections,
//! max_unauthenticated_per_source, accepts_per_source_per_sec, max_open_sessions_per_source,
//! shutdown_grace_ms; `[admin]` token; `[qos]` scheduler, profile (`"auto"` by default: each
//! volume by its backend, `memory` or `reflex-a`, module `profile`; or a name) | `[qos.profile]` (inline), `[qos.tuning]`; `[[volume]]` name, block_bytes, backend; `[[tenant]]` name, secret | open, class,
//! slo, acl; `[[export]]` name, volume, tenant. docs/server.md has the full reference.

mod admin;
pub mod overrides;
mod profile;
mod registry;
pub mod summary;
pub use admin::{AdminConfig, MAX_ADMIN_TOKEN_BYTES, MIN_ADMIN_TOKEN_BYTES};
pub use profile::{
    backend_kind, Pacing, ProfileChoice, ProfileSource, VolumeProfile, AUTO_PROFILE_NAME,
    FLASH_DEFAULT_PROFILE,
};
pub use registry::{RegistryConfig, DEFAULT_REGISTRY_TTL_S, MAX_REGISTRY_TTL_S};

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Most requests one dataplane step takes from its sockets: the adaptive batch cap.
pub const MAX_BATCH_LIMIT: usize = 64;
/// Largest request either protocol accepts (real NBD clients send up to 32 MiB).
pub const MAX_REQUEST_BYTES_LIMIT: u64 = 32 * 1024 * 1024;
/// Smallest request-size cap a config may set: below one 4 KiB block nothing useful works.
pub const MIN_REQUEST_BYTES_LIMIT: u64 = 4096;

/// Everything wrong with a config, each naming the key path and the bad value.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The TOML did not parse or did not match the schema (unknown key, wrong type).
    #[error("config does not parse: {0}")]
    Parse(String),
    /// A value out of its range or inconsistent with another.
    #[error("config key `{key}` = {value}: expected {expected}")]
    Invalid {
        key: String,
        value: String,
        expected: String,
    },
    /// A name used twice where names must be unique.
    #[error("config key `{key}`: name {name:?} is defined more than once")]
    Duplicate { key: String, name: String },
    /// A reference to a volume or tenant that is not defined.
    #[error(
        "config key `{key}` = {name:?}: no {kind} of that name is defined (defined: {defined})"
    )]
    UnknownReference {
        key: String,
        name: String,
        kind: &'static str,
        defined: String,
    },
}

fn invalid(
    key: impl Into<String>,
    value: impl fmt::Display,
    expected: impl Into<String>,
) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

/// A byte count, written in the config as an integer or a string with a unit suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses a size in the tree's one grammar (`engine::units`): `"1GiB"`, `"64k"` (IEC),
    /// `"1GB"` (SI), `"4096"` (bytes); `"1.5G"` is refused (whole numbers only).
    pub fn parse(text: &str) -> Result<ByteSize, String> {
        engine::units::bytes(text)
            .map(ByteSize)
            .map_err(|e| e.to_string())
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;
        impl Visitor<'_> for SizeVisitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count: an integer or a string such as \"64KiB\" or \"1GiB\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("size {v}: expected a non-negative byte count")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(SizeVisitor)
    }
}

/// The whole `server.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    #[serde(default)]
    pub listen: ListenConfig,
    #[serde(default)]
    pub dataplane: DataplaneConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub qos: QosConfig,
    #[serde(default, rename = "volume")]
    pub volumes: Vec<VolumeConfig>,
    #[serde(default, rename = "tenant")]
    pub tenants: Vec<TenantConfig>,
    #[serde(default, rename = "export")]
    pub exports: Vec<ExportConfig>,
    /// TLS for both listeners (NBD: required via STARTTLS; own protocol: from the first byte).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The admin endpoint's write side: `POST /reload` needs `[admin] token`.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Fleet membership through an etcd registry (`ullstack serve --registry`; crate `fleet`).
    /// The server itself does not read it: the command that starts it announces it.
    #[serde(default)]
    pub registry: Option<RegistryConfig>,
}

/// `[tls]`: a PSK key file (psktool's `identity:hexkey` lines; an identity names a tenant)
/// and/or a PEM certificate chain with its key. See [`crate::tls`]. Both together only where
/// NBD serves no export of a tenant with a secret: a certificate client names no tenant and
/// would reach those exports without a key.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub psk_file: Option<PathBuf>,
    pub certificate: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// `[listen]`: where each face of the server accepts connections. A missing address turns that
/// face off; port 0 asks the kernel for a free port (the started server reports the bound one).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// The own (ullstack) protocol.
    pub native: Option<SocketAddr>,
    /// Fixed-newstyle NBD.
    pub nbd: Option<SocketAddr>,
    /// HTTP `GET /metrics` (Prometheus text), and `POST /reload` with `[admin] token`.
    pub admin: Option<SocketAddr>,
}

/// What a worker does when a loop iteration found nothing to do.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum IdlePolicy {
    /// Poll forever: lowest latency, one core per worker at 100 %.
    Spin,
    /// Poll for `idle_spin_ns`, then sleep in `epoll_wait` until a socket or the ring wakes us.
    #[default]
    BlockAfterSpin,
}

/// `[dataplane]`: the worker threads and their loop.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Worker threads (thread per core); each owns its connections, ring and scheduler share.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Most requests one loop step takes in (adaptive batching: what is ready, up to this).
    #[serde(default = "default_batch_limit")]
    pub batch_limit: usize,
    #[serde(default)]
    pub idle: IdlePolicy,
    /// How long an idle worker keeps polling before it blocks (block-after-spin only).
    #[serde(default = "default_idle_spin_ns")]
    pub idle_spin_ns: u64,
    /// Under pipelined load, the longest pause between loop steps so the next step takes a batch;
    /// the worker picks a shorter one when a longer one would not gather more (0: never pause;
    /// see `coalesce`).
    #[serde(default = "default_coalesce_ns")]
    pub coalesce_ns: u64,
    /// How workers do their socket I/O: `epoll` (readiness, then `read`/`writev` per
    /// connection) or `uring` (receives and sends as io_uring operations, all of a step in one
    /// `io_uring_enter`; falls back to epoll where io_uring is refused). See `worker`.
    #[serde(default)]
    pub socket_io: SocketIo,
}

/// `[dataplane] socket_io`: how a worker reads and writes its sockets.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SocketIo {
    /// Level-triggered epoll; one `read` and one `writev` per connection and step.
    #[default]
    Epoll,
    /// A per-worker io_uring: one RECV armed per connection that wants input, one SENDMSG
    /// per connection with output, submitted and reaped with one `io_uring_enter` per step.
    Uring,
}

impl SocketIo {
    /// As the config and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            SocketIo::Epoll => "epoll",
            SocketIo::Uring => "uring",
        }
    }
}

fn default_workers() -> usize {
    2
}
fn default_batch_limit() -> usize {
    MAX_BATCH_LIMIT
}
/// 5 µs: catches a request that is already on its way (a pipelining client's next command)
/// without a sleep/wake-up, and costs little CPU: measured here, 20 µs of spinning cut the
/// I/Os served per CPU-second by ~20 % under fio iodepth 32, while 0 and 5 µs were equal.
fn default_idle_spin_ns() -> u64 {
    5_000
}

/// 160 µs, the longest pause (the coalescer climbs to it only while doubling its pause at least
/// 1.5×'s its batch, and stops at a 16-request batch; see `coalesce`): under fio iodepth 32 a
/// fixed 50 µs pause took the server from ~1.5 to ~6 requests per step; the ladder reaches
/// ~20 (the runs are in CHANGELOG.md); a QD1 client never triggers it.
fn default_coalesce_ns() -> u64 {
    160_000
}
/// Longest coalescing window a config may set.
pub const MAX_COALESCE_NS: u64 = 1_000_000;

impl Default for DataplaneConfig {
    fn default() -> Self {
        DataplaneConfig {
            workers: default_workers(),
            batch_limit: default_batch_limit(),
            idle: IdlePolicy::default(),
            idle_spin_ns: default_idle_spin_ns(),
            coalesce_ns: default_coalesce_ns(),
            socket_io: SocketIo::default(),
        }
    }
}

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

/// Whether requests pass through the token scheduler (`[qos] scheduler = "on" | "off"`).
pub use qos::SchedulerMode;

/// The device's QoS profile: `"auto"` (the default: chosen by the volumes' backends, module
/// `profile`), a named profile of the `qos` crate (`profile = "reflex-a"`, `"memory"`) or an
/// inline table in the `qos` crate's profile format (`[qos.profile]` with `preset = "reflex-a"`
/// and overrides, or a complete profile with `points`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ProfileConfig {
    Named(String),
    Inline(toml::Table),
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig::Named(DEFAULT_PROFILE_NAME.to_string())
    }
}

/// The profile used when the config names none: `auto`, chosen by the volumes' backends.
pub const DEFAULT_PROFILE_NAME: &str = AUTO_PROFILE_NAME;

/// `[qos]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    #[serde(default)]
    pub scheduler: SchedulerMode,
    #[serde(default)]
    pub profile: ProfileConfig,
    /// The scheduler's knobs (`deficit_limit`, `donate_pct`, `cap_rounds`, `bucket_reset`,
    /// `bucket_max_age_ns`), as the `qos` crate defines them.
    #[serde(default)]
    pub tuning: qos::SchedulerConfig,
    /// The closed-loop correction of the device rate from measured LC p95 latency.
    #[serde(default)]
    pub vrate: VrateMode,
    /// Its measurement window.
    #[serde(default = "default_vrate_window_ms")]
    pub vrate_window_ms: u64,
    /// The controller's knobs, as the `qos` crate defines them (`step_down_ppm`, …).
    #[serde(default)]
    pub vrate_tuning: qos::VrateConfig,
    /// LC surge: LC tenants earn up to this percentage above their reservations, out of the
    /// unreserved rate (crate qos, `admission`); 0 paces them at exactly their reservations.
    #[serde(default = "default_lc_surge_pct")]
    pub lc_surge_pct: u32,
    /// `"slo"` (the default): admission also keeps the headroom the LC flows need to meet
    /// their SLOs at their rates (crate qos, `admission/headroom.rs`); `"off"`: Σ reservations
    /// ≤ the device rate, as published.
    #[serde(default)]
    pub admission_headroom: qos::AdmissionHeadroom,
    /// `"on"`: `ullstack serve` probes the first file volume's device for about a second at
    /// start-up when no profile is configured, and prices the flash volumes with the fitted
    /// profile (crate calibrate, module `probe`; module `profile`); `"off"` (the default).
    #[serde(default)]
    pub probe: ProbeMode,
    /// The profile the start-up probe fitted: not a config key (`ullstack serve` sets it).
    #[serde(skip)]
    pub probed_profile: Option<qos::DeviceProfile>,
}

/// Whether `ullstack serve` probes a file volume's device at start-up (`[qos] probe`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeMode {
    /// Use the configured profile, or `reflex-a` for flash volumes.
    #[default]
    Off,
    /// Fit a profile to a quick probe when none is configured.
    On,
}

impl Default for QosConfig {
    fn default() -> Self {
        QosConfig {
            scheduler: SchedulerMode::default(),
            profile: ProfileConfig::default(),
            tuning: qos::SchedulerConfig::default(),
            vrate: VrateMode::default(),
            vrate_window_ms: default_vrate_window_ms(),
            vrate_tuning: qos::VrateConfig::default(),
            lc_surge_pct: default_lc_surge_pct(),
            admission_headroom: qos::AdmissionHeadroom::default(),
            probe: ProbeMode::Off,
            probed_profile: None,
        }
    }
}

fn default_lc_surge_pct() -> u32 {
    qos::DEFAULT_LC_SURGE_PCT
}

/// Whether the closed loop (`server::vrate`) corrects the device rate.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum VrateMode {
    /// Trust the profile (the published design).
    #[default]
    Off,
    /// Lower the rate when LC flows within their reservations miss their SLOs; raise it back
    /// when they meet them with margin.
    On,
}

/// 100 ms: at 1,000 reads/s an LC flow gives the controller 100 reads per window, its default
/// `min_reads_per_window`; a shorter window would ignore such flows.
fn default_vrate_window_ms() -> u64 {
    100
}
/// Window bounds: below 10 ms a p95 is noise; above 10 s the loop reacts too late.
pub const VRATE_WINDOW_MS_RANGE: std::ops::RangeInclusive<u64> = 10..=10_000;

/// Whether the file backend opens its file with `O_DIRECT`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DirectIo {
    /// Try `O_DIRECT`; fall back to buffered I/O where the filesystem refuses it (tmpfs).
    #[default]
    Auto,
    /// `O_DIRECT` or fail at start.
    On,
    /// Buffered I/O through the page cache.
    Off,
}

/// `backend = { kind = ..., ... }` of a volume.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum BackendConfig {
    /// Sparse RAM: 64 KiB chunks allocated on first write, zeros elsewhere.
    Memory { size: ByteSize },
    /// A regular file or block device through io_uring. `size` creates/extends a regular file
    /// (default: the file's current size).
    File {
        path: PathBuf,
        size: Option<ByteSize>,
        #[serde(default)]
        direct: DirectIo,
    },
    /// The SSD model of crate `device` run against the wall clock; the bytes live in a sparse
    /// map as for `memory`. `device` is a preset name (`"zssd"`) or a device table (`preset`
    /// plus overrides, or a complete description, in crate `device`'s format); `preset` is
    /// accepted as an alias of `device`. `sq_depth`: each worker's submission queue on the model.
    Emulated {
        #[serde(alias = "preset")]
        device: DeviceSpec,
        size: ByteSize,
        #[serde(default = "default_sq_depth")]
        sq_depth: u32,
    },
}

/// Default depth of each worker's submission queue on an emulated device: what a Linux NVMe
/// driver gives one hardware queue (`io_queue_depth` = 1024). Requests beyond it wait in the
/// worker, as they would in blk-mq.
pub const DEFAULT_SQ_DEPTH: u32 = 1024;
/// Largest device DRAM an emulated volume may model (its cache lines live in host memory).
pub const MAX_EMULATED_DRAM_BYTES: u64 = 64 << 30;
/// Deepest submission queue NVMe allows.
pub const MAX_SQ_DEPTH: u32 = 65536;

fn default_sq_depth() -> u32 {
    DEFAULT_SQ_DEPTH
}

/// An emulated volume's device: a preset of crate `device` by name, or a device table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum DeviceSpec {
    Named(String),
    Inline(toml::Table),
}

impl DeviceSpec {
    /// The device description this names or spells out.
    pub fn device_config(&self) -> Result<device::DeviceConfig, device::config::ConfigError> {
        match self {
            DeviceSpec::Named(name) => device::DeviceConfig::preset(name),
            DeviceSpec::Inline(table) => device::DeviceConfig::from_toml_table(table.clone()),
        }
    }
}

/// `[[volume]]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VolumeConfig {
    pub name: String,
    /// The logical block size: LBAs in ACLs count these, requests must be aligned to it.
    #[serde(default = "default_block_bytes")]
    pub block_bytes: u32,
    pub backend: BackendConfig,
}

fn default_block_bytes() -> u32 {
    512
}

/// QoS class of a tenant (`class = "lc" | "be"`): latency-critical tenants have an SLO and get
/// a reservation, best-effort ones share what they leave.
pub use qos::TenantClass;

/// A latency-critical tenant's service-level objective.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SloConfig {
    pub p95_read_latency_us: u64,
    pub iops: u64,
    /// Percent of requests that are reads (0..=100).
    pub read_ratio_pct: u8,
    #[serde(default = "default_slo_request_bytes")]
    pub request_bytes: ByteSize,
}

fn default_slo_request_bytes() -> ByteSize {
    ByteSize(4096)
}

impl SloConfig {
    /// The `qos` crate's form of this SLO.
    pub fn to_qos(&self) -> qos::LcSlo {
        qos::LcSlo {
            p95_read_latency_ns: self.p95_read_latency_us.saturating_mul(1000),
            iops: self.iops,
            read_pct: self.read_ratio_pct,
            request_bytes: self.request_bytes.0,
        }
    }
}

/// Rights an ACL entry grants (`access = "read" | "read-write"`): the one type the HELLO reply
/// and an NBD export report.
pub use proto::Access;

/// One ACL entry: rights on a volume, optionally limited to LBA ranges.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AclConfig {
    pub volume: String,
    /// Half-open `[first_lba, end_lba)` ranges in the volume's blocks; absent = whole volume.
    #[serde(default)]
    pub lba_ranges: Option<Vec<[u64; 2]>>,
    pub access: Access,
}

/// `[[tenant]]`. Its `Debug` shows the secret as `(redacted)` ([`summary`]).
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    /// The shared secret HELLO must present (compared in constant time).
    #[serde(default)]
    pub secret: Option<String>,
    /// An open tenant accepts any secret (quick start). Must be set explicitly.
    #[serde(default)]
    pub open: bool,
    pub class: TenantClass,
    /// Fixed SLO of an LC tenant (required for an LC tenant behind an NBD export, which cannot
    /// send REGISTER); a native REGISTER of this tenant may ask for it or anything looser.
    #[serde(default)]
    pub slo: Option<SloConfig>,
    #[serde(default)]
    pub acl: Vec<AclConfig>,
}

impl fmt::Debug for TenantConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TenantConfig")
            .field("name", &self.name)
            .field("secret", &self.secret.as_ref().map(|_| summary::REDACTED))
            .field("open", &self.open)
            .field("class", &self.class)
            .field("slo", &self.slo)
            .field("acl", &self.acl)
            .finish()
    }
}

/// `[[export]]`: an NBD export name bound to a volume and a tenant.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    pub name: String,
    pub volume: String,
    pub tenant: String,
    /// Shown by `nbdinfo` / NBD_INFO_DESCRIPTION.
    #[serde(default)]
    pub description: Option<String>,
}

/// Parses and validates a config. The fuzz target calls this: it must never panic.
pub fn from_toml_str(text: &str) -> Result<ServerConfig, ConfigError> {
    let config: ServerConfig =
        toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
    config.validate()?;
    Ok(config)
}

impl ServerConfig {
    /// Parses and validates (same as [`from_toml_str`]).
    pub fn from_toml_str(text: &str) -> Result<ServerConfig, ConfigError> {
        from_toml_str(text)
    }

    /// The quick-start config: one memory volume `default` of `size`, NBD export `default` and
    /// the own protocol, one open best-effort tenant `open`.
    pub fn quick_start(
        size: ByteSize,
        nbd: Option<SocketAddr>,
        native: Option<SocketAddr>,
    ) -> ServerConfig {
        ServerConfig {
            listen: ListenConfig {
                native,
                nbd,
                admin: None,
            },
            dataplane: DataplaneConfig::default(),
            limits: LimitsConfig::default(),
            qos: QosConfig::default(),
            volumes: vec![VolumeConfig {
                name: "default".into(),
                block_bytes: default_block_bytes(),
                backend: BackendConfig::Memory { size },
            }],
            tenants: vec![TenantConfig {
                name: "open".into(),
                secret: None,
                open: true,
                class: TenantClass::BestEffort,
                slo: None,
                acl: vec![AclConfig {
                    volume: "default".into(),
                    lba_ranges: None,
                    access: Access::ReadWrite,
                }],
            }],
            exports: vec![ExportConfig {
                name: "default".into(),
                volume: "default".into(),
                tenant: "open".into(),
                description: Some("ullstack quick-start memory volume".into()),
            }],
            tls: None,
            admin: AdminConfig::default(),
            registry: None,
        }
    }

    /// Checks everything serde cannot: ranges, uniqueness, references.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_dataplane()?;
        self.validate_limits()?;
        self.validate_qos()?;
        let volumes = self.validate_volumes()?;
        let tenants = self.validate_tenants(&volumes)?;
        self.validate_exports(&volumes, &tenants)?;
        self.validate_tls()?;
        self.admin.validate()?;
        if let Some(r) = &self.registry {
            r.validate()?;
        }
        Ok(())
    }

    fn validate_tls(&self) -> Result<(), ConfigError> {
        let Some(tls) = &self.tls else {
            return Ok(());
        };
        let shown = |p: &Option<PathBuf>| {
            p.as_ref().map_or("(none)".to_owned(), |p| {
                format!("{:?}", p.display().to_string())
            })
        };
        if tls.certificate.is_some() != tls.key.is_some() {
            return Err(invalid(
                "tls.certificate / tls.key",
                format!("{} / {}", shown(&tls.certificate), shown(&tls.key)),
                "both set (a PEM certificate chain and its private key) or neither",
            ));
        }
        if tls.psk_file.is_none() && tls.certificate.is_none() {
            return Err(invalid(
                "tls",
                "a section without keys",
                "psk_file, or certificate and key (both only without NBD exports of tenants with secrets)",
            ));
        }
        if let (Some(psk), Some(cert)) = (&tls.psk_file, &tls.certificate) {
            if let Some(export) = self.nbd_export_behind_a_secret() {
                return Err(invalid(
                    "tls.psk_file + tls.certificate",
                    format!(
                        "{} + {} with NBD on and export {:?} of tenant {:?}",
                        shown(&Some(psk.clone())),
                        shown(&Some(cert.clone())),
                        export.name,
                        export.tenant
                    ),
                    "one of them: a certificate client carries no tenant identity (client \
                     certificates are not mapped to tenants), so next to PSK it would reach every \
                     tenant's NBD exports without a key; use psk_file alone for NBD tenants, or \
                     serve certificate TLS on a server whose NBD exports are open tenants' only",
                ));
            }
        }
        Ok(())
    }

    /// What an operator should hear about this config at start (it is valid, but exposed):
    /// NBD listening beyond loopback without TLS, where NBD has no authentication at all.
    pub fn startup_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(addr) = self.listen.nbd {
            if !addr.ip().is_loopback() && self.tls.is_none() {
                warnings.push(format!(
                    "NBD listens on {addr} without TLS: NBD has no authentication of its own, so \
                     anyone who reaches the port may use every export; require TLS with `[tls] \
                     psk_file` (`--tls-psk FILE`: PSK identities are tenants) or listen on a \
                     loopback address"
                ));
            }
        }
        warnings
    }

    /// The first NBD export (NBD listening) whose tenant has a secret: what a client without
    /// a PSK identity must not reach.
    fn nbd_export_behind_a_secret(&self) -> Option<&ExportConfig> {
        self.listen.nbd?;
        self.exports
            .iter()
            .find(|e| self.tenants.iter().any(|t| t.name == e.tenant && !t.open))
    }

    fn validate_dataplane(&self) -> Result<(), ConfigError> {
        let d = &self.dataplane;
        if d.workers == 0 || d.workers > 256 {
            return Err(invalid(
                "dataplane.workers",
                d.workers,
                "1..=256 worker threads",
            ));
        }
        if d.batch_limit == 0 || d.batch_limit > MAX_BATCH_LIMIT {
            return Err(invalid(
                "dataplane.batch_limit",
                d.batch_limit,
                format!("1..={MAX_BATCH_LIMIT} requests per loop step"),
            ));
        }
        if d.idle_spin_ns > 1_000_000_000 {
            return Err(invalid(
                "dataplane.idle_spin_ns",
                d.idle_spin_ns,
                "at most 1 s (1000000000 ns)",
            ));
        }
        if d.coalesce_ns > MAX_COALESCE_NS {
            return Err(invalid(
                "dataplane.coalesce_ns",
                d.coalesce_ns,
                format!("at most {MAX_COALESCE_NS} ns (0 turns coalescing off)"),
            ));
        }
        Ok(())
    }

    fn validate_limits(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
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

    fn validate_qos(&self) -> Result<(), ConfigError> {
        self.qos.configured_profile()?;
        if !VRATE_WINDOW_MS_RANGE.contains(&self.qos.vrate_window_ms) {
            return Err(invalid(
                "qos.vrate_window_ms",
                self.qos.vrate_window_ms,
                format!(
                    "{}..={} ms",
                    VRATE_WINDOW_MS_RANGE.start(),
                    VRATE_WINDOW_MS_RANGE.end()
                ),
            ));
        }
        if let Err(e) = qos::RateController::new(self.qos.vrate_tuning) {
            return Err(invalid(
                "qos.vrate_tuning",
                "(table)",
                format!("valid controller settings: {e}"),
            ));
        }
        if self.qos.lc_surge_pct > qos::MAX_LC_SURGE_PCT {
            return Err(invalid(
                "qos.lc_surge_pct",
                self.qos.lc_surge_pct,
                format!("0..={}", qos::MAX_LC_SURGE_PCT),
            ));
        }
        if self.qos.tuning.donate_pct > 100 {
            return Err(invalid(
                "qos.tuning.donate_pct",
                self.qos.tuning.donate_pct,
                "0..=100",
            ));
        }
        let rounds = self.qos.tuning.cap_rounds;
        if rounds == 0 || rounds > qos::sched::MAX_CAP_ROUNDS {
            return Err(invalid(
                "qos.tuning.cap_rounds",
                rounds,
                format!("1..={}", qos::sched::MAX_CAP_ROUNDS),
            ));
        }
        Ok(())
    }

    fn validate_volumes(&self) -> Result<BTreeMap<&str, &VolumeConfig>, ConfigError> {
        let mut by_name = BTreeMap::new();
        for (i, v) in self.volumes.iter().enumerate() {
            check_name(&format!("volume[{i}].name"), &v.name)?;
            if by_name.insert(v.name.as_str(), v).is_some() {
                return Err(ConfigError::Duplicate {
                    key: "volume.name".into(),
                    name: v.name.clone(),
                });
            }
            if !v.block_bytes.is_power_of_two() || !(512..=4096).contains(&v.block_bytes) {
                return Err(invalid(
                    format!("volume[{i}].block_bytes"),
                    v.block_bytes,
                    "512, 1024, 2048 or 4096",
                ));
            }
            let block = u64::from(v.block_bytes);
            let size = match &v.backend {
                BackendConfig::Memory { size } | BackendConfig::Emulated { size, .. } => {
                    Some(*size)
                }
                BackendConfig::File { size, path, .. } => {
                    if path.as_os_str().is_empty() {
                        return Err(invalid(
                            format!("volume[{i}].backend.path"),
                            "\"\"",
                            "a file or block device path",
                        ));
                    }
                    *size
                }
            };
            if let Some(size) = size {
                if size.0 == 0 || size.0 % block != 0 {
                    return Err(invalid(
                        format!("volume[{i}].backend.size"),
                        size,
                        format!("a positive multiple of block_bytes ({block})"),
                    ));
                }
            }
            if let BackendConfig::Emulated {
                device, sq_depth, ..
            } = &v.backend
            {
                if let Ok(d) = device.device_config() {
                    if d.cache.dram_bytes > MAX_EMULATED_DRAM_BYTES {
                        return Err(invalid(
                            format!("volume[{i}].backend.device.cache.dram_bytes"),
                            d.cache.dram_bytes,
                            format!(
                                "at most {MAX_EMULATED_DRAM_BYTES} bytes (the model keeps a line per 4 KiB of device DRAM in host memory)"
                            ),
                        ));
                    }
                }
                if let Err(e) = device.device_config() {
                    let value = match device {
                        DeviceSpec::Named(name) => format!("{name:?}"),
                        DeviceSpec::Inline(_) => "(inline table)".to_string(),
                    };
                    return Err(invalid(
                        format!("volume[{i}].backend.device"),
                        value,
                        format!(
                            "a device preset ({}) or a valid device table: {e}",
                            device::config::PRESET_NAMES.join(", ")
                        ),
                    ));
                }
                if *sq_depth < 2 || *sq_depth > MAX_SQ_DEPTH {
                    return Err(invalid(
                        format!("volume[{i}].backend.sq_depth"),
                        sq_depth,
                        format!("2..={MAX_SQ_DEPTH}"),
                    ));
                }
            }
        }
        Ok(by_name)
    }

    fn validate_tenants<'a>(
        &'a self,
        volumes: &BTreeMap<&str, &VolumeConfig>,
    ) -> Result<BTreeMap<&'a str, &'a TenantConfig>, ConfigError> {
        let mut by_name = BTreeMap::new();
        for (i, t) in self.tenants.iter().enumerate() {
            let key = format!("tenant[{i}]");
            check_name(&format!("{key}.name"), &t.name)?;
            if by_name.insert(t.name.as_str(), t).is_some() {
                return Err(ConfigError::Duplicate {
                    key: "tenant.name".into(),
                    name: t.name.clone(),
                });
            }
            match (&t.secret, t.open) {
                (None, false) => {
                    return Err(invalid(
                        format!("{key}.secret"),
                        format!("(missing, tenant {:?})", t.name),
                        "a secret, or `open = true` for a tenant that accepts any secret",
                    ))
                }
                (Some(_), true) => {
                    return Err(invalid(
                        format!("{key}.open"),
                        format!("true (tenant {:?} also has a secret)", t.name),
                        "either a secret or `open = true`, not both",
                    ))
                }
                (Some(s), false) if s.len() < 8 => {
                    return Err(invalid(
                        format!("{key}.secret"),
                        format!("({} bytes)", s.len()),
                        "at least 8 bytes",
                    ))
                }
                _ => {}
            }
            if let Some(s) = &t.secret {
                if s.len() > 255 {
                    return Err(invalid(
                        format!("{key}.secret"),
                        format!("({} bytes)", s.len()),
                        "at most 255 bytes",
                    ));
                }
            }
            if let Some(slo) = &t.slo {
                if t.class == TenantClass::BestEffort {
                    return Err(invalid(
                        format!("{key}.slo"),
                        format!("(set on best-effort tenant {:?})", t.name),
                        "an SLO only on class = \"lc\"",
                    ));
                }
                check_slo(&format!("{key}.slo"), slo)?;
            }
            for (j, acl) in t.acl.iter().enumerate() {
                let acl_key = format!("{key}.acl[{j}]");
                let Some(volume) = volumes.get(acl.volume.as_str()) else {
                    return Err(ConfigError::UnknownReference {
                        key: format!("{acl_key}.volume"),
                        name: acl.volume.clone(),
                        kind: "volume",
                        defined: names(volumes.keys().copied()),
                    });
                };
                let blocks = match &volume.backend {
                    BackendConfig::Memory { size } | BackendConfig::Emulated { size, .. } => {
                        Some(size.0 / u64::from(volume.block_bytes))
                    }
                    BackendConfig::File { size, .. } => {
                        size.map(|s| s.0 / u64::from(volume.block_bytes))
                    }
                };
                for (k, [first, end]) in acl.lba_ranges.iter().flatten().enumerate() {
                    let bad_end = blocks.is_some_and(|b| *end > b);
                    if first >= end || bad_end {
                        return Err(invalid(
                            format!("{acl_key}.lba_ranges[{k}]"),
                            format!("[{first}, {end}]"),
                            match blocks {
                                Some(b) => format!(
                                    "first < end ≤ {b} (volume {:?} has {b} blocks)",
                                    volume.name
                                ),
                                None => "first < end".to_string(),
                            },
                        ));
                    }
                }
            }
        }
        Ok(by_name)
    }

    fn validate_exports(
        &self,
        volumes: &BTreeMap<&str, &VolumeConfig>,
        tenants: &BTreeMap<&str, &TenantConfig>,
    ) -> Result<(), ConfigError> {
        let mut seen = BTreeMap::new();
        for (i, e) in self.exports.iter().enumerate() {
            let key = format!("export[{i}]");
            if e.name.len() > 4096 {
                return Err(invalid(
                    format!("{key}.name"),
                    format!("({} bytes)", e.name.len()),
                    "at most 4096 bytes",
                ));
            }
            if seen.insert(e.name.as_str(), ()).is_some() {
                return Err(ConfigError::Duplicate {
                    key: "export.name".into(),
                    name: e.name.clone(),
                });
            }
            if !volumes.contains_key(e.volume.as_str()) {
                return Err(ConfigError::UnknownReference {
                    key: format!("{key}.volume"),
                    name: e.volume.clone(),
                    kind: "volume",
                    defined: names(volumes.keys().copied()),
                });
            }
            let Some(tenant) = tenants.get(e.tenant.as_str()) else {
                return Err(ConfigError::UnknownReference {
                    key: format!("{key}.tenant"),
                    name: e.tenant.clone(),
                    kind: "tenant",
                    defined: names(tenants.keys().copied()),
                });
            };
            if !tenant.acl.iter().any(|a| a.volume == e.volume) {
                return Err(invalid(
                    format!("{key}.tenant"),
                    format!("{:?}", e.tenant),
                    format!("a tenant with an ACL entry for volume {:?}", e.volume),
                ));
            }
            if tenant.class == TenantClass::LatencyCritical && tenant.slo.is_none() {
                return Err(invalid(
                    format!("{key}.tenant"),
                    format!("{:?} (latency-critical without `slo`)", e.tenant),
                    "a best-effort tenant or an LC tenant with a fixed `slo` (NBD clients cannot REGISTER)",
                ));
            }
        }
        Ok(())
    }
}

fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            key,
            format!("{name:?}"),
            "1-64 characters from [A-Za-z0-9._-]",
        ))
    }
}

fn check_slo(key: &str, slo: &SloConfig) -> Result<(), ConfigError> {
    if slo.p95_read_latency_us == 0 {
        return Err(invalid(
            format!("{key}.p95_read_latency_us"),
            0,
            "a positive latency in µs",
        ));
    }
    if slo.iops == 0 {
        return Err(invalid(format!("{key}.iops"), 0, "a positive IOPS rate"));
    }
    if slo.read_ratio_pct > 100 {
        return Err(invalid(
            format!("{key}.read_ratio_pct"),
            slo.read_ratio_pct,
            "0..=100",
        ));
    }
    if slo.request_bytes.0 == 0 || slo.request_bytes.0 > MAX_REQUEST_BYTES_LIMIT {
        return Err(invalid(
            format!("{key}.request_bytes"),
            slo.request_bytes,
            format!("1..={MAX_REQUEST_BYTES_LIMIT} bytes"),
        ));
    }
    Ok(())
}

fn names<'a>(iter: impl Iterator<Item = &'a str>) -> String {
    let list: Vec<&str> = iter.collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

#[cfg(test)]
mod tests;
