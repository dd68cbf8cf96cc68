//! `[registry]`: fleet membership through an etcd registry (`ullstack serve --registry`, crate
//! `fleet`). The server itself does not read it: the command that starts it announces it, as
//! the [`fleet::Member`] that [`ServerConfig::fleet_member`] describes: the config's volumes,
//! NBD exports, device profile and TLS, and its latency-critical tenants (those with an SLO) as
//! the server's first reservations, each on the first volume. Worked example: volumes `fast`
//! and `bulk` and tenants `a` (SLO 20 000 IOPS at p95 500 µs) and `b` (best-effort) make a
//! member with volumes `[fast, bulk]` and one reservation, `a` on `fast`.
//!
//! Keys: `url` (`http://HOST:PORT`, required), `id` (default: the own-protocol address, else
//! the NBD one; no `/`, it is an etcd key component), `ttl_s` (lease TTL, 1..=9 × 10⁹ s,
//! default 10: a server killed without shutting down leaves the fleet about this long after
//! its last refresh, plus etcd's expiry sweep).

use serde::Deserialize;

use super::{invalid, ConfigError, ServerConfig};

/// `[registry]`: join a fleet placed through etcd (crate `fleet`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// `http://HOST:PORT` of an etcd endpoint.
    pub url: String,
    /// This server's id in the fleet (default: its own-protocol address, else its NBD one).
    pub id: Option<String>,
    /// Lease TTL, seconds: a killed server leaves the fleet this long after its last refresh.
    #[serde(default = "default_registry_ttl_s")]
    pub ttl_s: i64,
}

/// Default `[registry] ttl_s`: a dead server stops being chosen about 10 s after it dies, at
/// the cost of one lease refresh every TTL/3 per server.
pub const DEFAULT_REGISTRY_TTL_S: i64 = 10;

/// Largest `[registry] ttl_s`: etcd's own maximum lease TTL (`MaxLeaseTTL`, 9 × 10⁹ s), beyond
/// which it refuses to grant a lease.
pub const MAX_REGISTRY_TTL_S: i64 = 9_000_000_000;

fn default_registry_ttl_s() -> i64 {
    DEFAULT_REGISTRY_TTL_S
}

impl RegistryConfig {
    /// Checks the URL is given, the TTL is one etcd grants and the id is a key component.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.url.trim().is_empty() {
            return Err(invalid(
                "registry.url",
                "\"\"",
                "http://HOST:PORT of an etcd endpoint",
            ));
        }
        if !(1..=MAX_REGISTRY_TTL_S).contains(&self.ttl_s) {
            return Err(invalid(
                "registry.ttl_s",
                self.ttl_s,
                format!(
                    "1..={MAX_REGISTRY_TTL_S} seconds (the lease a killed server leaves the fleet after)"
                ),
            ));
        }
        if let Some(id) = &self.id {
            if id.is_empty() || id.contains('/') {
                return Err(invalid(
                    "registry.id",
                    format!("{id:?}"),
                    "a non-empty id without `/` (it is an etcd key component)",
                ));
            }
        }
        Ok(())
    }
}

impl ServerConfig {
    /// What the fleet knows of this server (see the module's essay); an error only when the
    /// device profile cannot be chosen.
    pub fn fleet_member(&self) -> Result<fleet::Member, ConfigError> {
        let volumes: Vec<String> = self.volumes.iter().map(|v| v.name.clone()).collect();
        let lc_tenants = self
            .tenants
            .iter()
            .filter_map(|t| {
                t.slo.as_ref().map(|slo| fleet::PlacedTenant {
                    name: t.name.clone(),
                    volume: volumes.first().cloned().unwrap_or_default(),
                    spec: qos::TenantSpec::LatencyCritical(slo.to_qos()),
                })
            })
            .collect();
        Ok(fleet::Member {
            profile: self.device_profile()?,
            volumes,
            lc_tenants,
            exports: self
                .exports
                .iter()
                .map(|e| fleet::NbdExport {
                    name: e.name.clone(),
                    volume: e.volume.clone(),
                })
                .collect(),
            tls: self.tls.is_some(),
        })
    }
}
