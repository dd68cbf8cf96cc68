//! `[[tenant]]` and `[[export]]`: who may connect (a secret, or open to any), in which QoS
//! class, with which SLO, and which byte ranges of which volumes they may read or write; and
//! the NBD exports, each an export name bound to one volume and the one tenant whose tokens
//! and ACL its traffic uses.
//!
//! Checked against the volumes: an ACL names a defined volume and ranges inside it; an export
//! names a defined volume and tenant, and that tenant has an ACL entry for the volume and, if
//! latency-critical, a fixed SLO (NBD clients cannot REGISTER one). Worked example: an export
//! of volume `fast` to a tenant whose ACL lists only `bulk` is refused, naming
//! `export[0].tenant`.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::{
    check_name, invalid, summary, BackendConfig, ByteSize, ConfigError, ServerConfig, VolumeConfig,
    MAX_REQUEST_BYTES_LIMIT,
};

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

/// `[[tenant]]`. Its `Debug` shows the secret as `(redacted)` ([`super::summary`]).
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

impl ServerConfig {
    /// Checks each `[[tenant]]` against the volumes and returns them by name.
    pub(super) fn validate_tenants<'a>(
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

    /// Checks each `[[export]]` against the volumes and tenants.
    pub(super) fn validate_exports(
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
