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
//! coalesce_ns, socket_io, socket_recv, ring_wait, ring_spin, ring_sqpoll_idle_ms, file_io,
//! send_zc;
//! `[limits]` max_connections, max_connections_per_tenant, max_inflight_requests,
//! max_inflight_bytes, max_memory_bytes, max_request_bytes, idle_timeout_ms,
//! handshake_timeout_ms, request_timeout_ms, max_unauthenticated_connections,
//! max_unauthenticated_per_source, accepts_per_source_per_sec, max_open_sessions_per_source,
//! shutdown_grace_ms; `[admin]` token; `[qos]` scheduler, profile (`"auto"` by default: each
//! volume by its backend, `memory` or `reflex-a`, module `profile`; or a name) | `[qos.profile]` (inline), `[qos.tuning]`; `[[volume]]` name, block_bytes, backend; `[[tenant]]` name, secret | open, class,
//! slo, acl; `[[export]]` name, volume, tenant. docs/server.md has the full reference.
//!
//! # Layout
//! This module holds the whole config, its errors, sizes, `[listen]` and `[tls]`; each other
//! section lives in a child module with its keys, defaults and checks: `dataplane`, `limits`,
//! `qos_section` (`[qos]`; `profile` chooses each volume's profile), `volumes`, `tenants`
//! (`[[tenant]]` and `[[export]]`), `admin` and `registry`. `overrides` applies the command
//! line and `summary` prints the effective config.

mod admin;
mod dataplane;
mod limits;
pub mod overrides;
mod profile;
mod qos_section;
mod registry;
pub mod summary;
mod tenants;
mod volumes;
pub use admin::{AdminConfig, MAX_ADMIN_TOKEN_BYTES, MIN_ADMIN_TOKEN_BYTES};
pub use dataplane::{
    DataplaneConfig, FileIo, IdlePolicy, RingSpin, RingWait, SendZcSetting, SocketIo, SocketRecv,
    MAX_BATCH_LIMIT, MAX_COALESCE_NS, MAX_SEND_ZC_BYTES,
};
pub use limits::{
    default_max_memory_bytes, LimitsConfig, DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_MAX_OPEN_SESSIONS_PER_SOURCE, DEFAULT_REQUEST_TIMEOUT_MS, DEFAULT_SHUTDOWN_GRACE_MS,
    MAX_REQUEST_BYTES_LIMIT, MAX_SHUTDOWN_GRACE_MS, MIN_MEMORY_LIMIT_BYTES,
    MIN_REQUEST_BYTES_LIMIT, MIN_REQUEST_TIMEOUT_MS,
};
pub use profile::{
    backend_kind, Pacing, ProfileChoice, ProfileSource, VolumeProfile, AUTO_PROFILE_NAME,
    FLASH_DEFAULT_PROFILE,
};
pub use qos_section::{
    ProbeMode, ProfileConfig, QosConfig, SchedulerMode, VrateMode, DEFAULT_PROFILE_NAME,
    VRATE_WINDOW_MS_RANGE,
};
pub use registry::{RegistryConfig, DEFAULT_REGISTRY_TTL_S, MAX_REGISTRY_TTL_S};
pub use tenants::{Access, AclConfig, ExportConfig, SloConfig, TenantClass, TenantConfig};
pub use volumes::{
    BackendConfig, DeviceSpec, DirectIo, VolumeConfig, DEFAULT_BLOCK_BYTES, DEFAULT_SQ_DEPTH,
    MAX_EMULATED_DRAM_BYTES, MAX_SQ_DEPTH,
};

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

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
                block_bytes: DEFAULT_BLOCK_BYTES,
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
        self.dataplane.validate()?;
        self.limits.validate()?;
        self.qos.validate()?;
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

#[cfg(test)]
mod tests;
