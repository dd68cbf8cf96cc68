//! Tenants, their secrets and their access-control lists: every request is checked here before
//! it can reach storage.
//!
//! # What it implements
//! The security half of remote.md: a tenant authenticates with a per-tenant secret (compared in
//! constant time), and holds an ACL of grants — a volume, optionally LBA ranges of it, and read
//! or read-write rights. [`Tenant::check`] decides one request: the volume must be granted, the
//! byte range must be aligned to the volume's block size, inside the volume, inside one granted
//! range, within the request size limit, and a write needs read-write rights.
//!
//! # Design
//! The config's names become dense ids at start ([`TenantId`], [`VolumeId`]): the dataplane
//! never hashes a string per request. Grants store byte ranges (LBA × block size) merged and
//! sorted, so a check is a short scan (most tenants have one range).
//!
//! Worked example: tenant `alice` has `{ volume = "fast", lba_ranges = [[0, 2048]], access =
//! "read-write" }` on a 512-byte-block volume: a 4 KiB write at byte 1,044,480 (LBA 2040) ends at
//! byte 1,048,576 = LBA 2048 and passes; the same write at LBA 2041 ends past the range and gets
//! [`Denied::OutOfRange`]; a write at byte 100 gets [`Denied::Misaligned`].
//!
//! Authentication with an unknown tenant name still runs one constant-time comparison against a
//! dummy secret, so timing does not reveal which tenant names exist.
//!
//! # What it leaves out
//! Per-request signatures or TLS (the secret authenticates the connection once, in HELLO).
//!
//! # Config keys
//! `[[tenant]]` name, secret | open, class, slo, acl = [{ volume, lba_ranges?, access }].

use std::collections::HashMap;

use subtle::ConstantTimeEq;

use crate::config::{Access, ServerConfig, SloConfig, TenantClass, TenantConfig};

/// Dense index of a tenant in [`Tenants`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(pub u32);

/// Dense index of a volume (the order of `[[volume]]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeId(pub u16);

/// What a request wants to do with its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessKind {
    Read,
    Write,
    /// FLUSH: needs any grant on the volume, no range.
    Flush,
}

/// Why a request is refused before storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("no grant on this volume")]
    NoGrant,
    #[error("range outside the volume or the tenant's granted LBA ranges")]
    OutOfRange,
    #[error("write on a read-only grant")]
    ReadOnly,
    #[error("offset or length not a multiple of the volume's block size")]
    Misaligned,
    #[error("request larger than the server's maximum request size")]
    TooLarge,
}

/// One ACL entry, resolved.
#[derive(Debug, Clone)]
pub struct Grant {
    pub volume: VolumeId,
    /// Sorted, merged, half-open byte ranges; None = the whole volume.
    pub byte_ranges: Option<Vec<(u64, u64)>>,
    pub access: Access,
}

/// A tenant as the dataplane sees it.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    secret: Option<Vec<u8>>,
    pub class: TenantClass,
    pub slo: Option<SloConfig>,
    pub grants: Vec<Grant>,
    /// In the config in force. A reload keeps a retired tenant's entry (its id is never
    /// reused: requests of its last connections still complete under it), not live.
    pub live: bool,
}

/// Geometry of a volume needed for checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeGeometry {
    pub size_bytes: u64,
    pub block_bytes: u32,
}

impl Tenant {
    /// Constant-time secret check; an open tenant accepts any secret.
    pub fn authenticate(&self, presented: &[u8]) -> bool {
        match &self.secret {
            Some(secret) => bool::from(secret.as_slice().ct_eq(presented)),
            None => true,
        }
    }

    /// Whether the tenant accepts any secret (`open = true`).
    pub fn is_open(&self) -> bool {
        self.secret.is_none()
    }

    /// Whether a client whose TLS-PSK identity is `psk_identity` may act as this tenant: the
    /// identity is the tenant, so only its own tenant or an open one. Without an identity (no
    /// TLS, or certificate TLS) the tenant's secret (HELLO) or the export's ownership decides.
    pub fn admits_psk_identity(&self, psk_identity: Option<&str>) -> bool {
        psk_identity.is_none_or(|id| self.is_open() || self.name == id)
    }

    /// Whether config tenant `t` is this tenant under the same identity: name, class, secret
    /// (or open), and whether it has a fixed SLO. A reload keeps the id of a tenant whose
    /// identity stays (its sessions go on under its new ACL and SLO) and gives a new one to a
    /// tenant whose identity changed (its sessions end: they authenticated as someone else).
    pub fn same_identity(&self, t: &TenantConfig) -> bool {
        self.name == t.name
            && self.class == t.class
            && self.secret.as_deref() == t.secret.as_deref().map(str::as_bytes)
            && self.is_open() == t.open
            && self.slo.is_some() == t.slo.is_some()
    }

    pub fn grant(&self, volume: VolumeId) -> Option<&Grant> {
        self.grants.iter().find(|g| g.volume == volume)
    }

    /// Decides one request `io` on `volume`.
    pub fn check(
        &self,
        volume: VolumeId,
        geometry: VolumeGeometry,
        io: IoCheck,
        max_request_bytes: u64,
    ) -> Result<(), Denied> {
        let IoCheck {
            kind,
            offset_bytes,
            len_bytes,
            payload,
        } = io;
        let grant = self.grant(volume).ok_or(Denied::NoGrant)?;
        if kind == AccessKind::Flush {
            return Ok(());
        }
        if payload == Payload::Carried && len_bytes > max_request_bytes {
            return Err(Denied::TooLarge);
        }
        let block = u64::from(geometry.block_bytes);
        if !offset_bytes.is_multiple_of(block) || !len_bytes.is_multiple_of(block) || len_bytes == 0
        {
            return Err(Denied::Misaligned);
        }
        let end = offset_bytes
            .checked_add(len_bytes)
            .ok_or(Denied::OutOfRange)?;
        if end > geometry.size_bytes {
            return Err(Denied::OutOfRange);
        }
        if let Some(ranges) = &grant.byte_ranges {
            let inside = ranges
                .iter()
                .any(|&(first, last)| offset_bytes >= first && end <= last);
            if !inside {
                return Err(Denied::OutOfRange);
            }
        }
        if kind == AccessKind::Write && grant.access != Access::ReadWrite {
            return Err(Denied::ReadOnly);
        }
        Ok(())
    }
}

/// What a request wants, for [`Tenant::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoCheck {
    pub kind: AccessKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub payload: Payload,
}

impl IoCheck {
    pub fn new(kind: AccessKind, offset_bytes: u64, len_bytes: u64, payload: Payload) -> IoCheck {
        IoCheck {
            kind,
            offset_bytes,
            len_bytes,
            payload,
        }
    }
}

/// Whether a request's length is a payload the server buffers (READ, WRITE) or only a range
/// (TRIM, WRITE_ZEROES), which the request-size limit does not apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    Carried,
    RangeOnly,
}

/// All tenants of a server, by id and by name.
#[derive(Debug, Clone, Default)]
pub struct Tenants {
    list: Vec<Tenant>,
    by_name: HashMap<String, TenantId>,
}

/// Compared against when HELLO names an unknown tenant, so timing is the same.
const DUMMY_SECRET: &[u8] = b"ullstack-no-such-tenant-dummy-secret-0000000000000000";

/// A volume as ACLs name it: its id and block size.
pub type VolumeIds<'a> = HashMap<&'a str, (VolumeId, u32)>;

impl Tenants {
    /// Resolves the config's tenants (the config is already validated): ids in config order,
    /// volumes in config order.
    pub fn from_config(config: &ServerConfig) -> Tenants {
        let volume_ids: VolumeIds = config
            .volumes
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.as_str(), (VolumeId(i as u16), v.block_bytes)))
            .collect();
        Tenants::default().reloaded(config, &volume_ids)
    }

    /// The tenants of `config` after these: a tenant of the same identity
    /// ([`Tenant::same_identity`]) keeps its id, any other gets the next unused one; the ids of
    /// tenants `config` drops stay, not live. `volume_ids` resolves ACLs' volume names.
    pub fn reloaded(&self, config: &ServerConfig, volume_ids: &VolumeIds) -> Tenants {
        let mut next = Tenants {
            list: self
                .list
                .iter()
                .map(|t| Tenant {
                    live: false,
                    ..t.clone()
                })
                .collect(),
            by_name: HashMap::new(),
        };
        for t in &config.tenants {
            let kept = self.by_name(&t.name).filter(|old| old.same_identity(t));
            let id = match kept {
                Some(old) => old.id,
                None => TenantId(next.list.len() as u32),
            };
            let tenant = resolve(t, id, volume_ids);
            match next.list.get_mut(id.0 as usize) {
                Some(slot) => *slot = tenant,
                None => next.list.push(tenant),
            }
            next.by_name.insert(t.name.clone(), id);
        }
        next
    }

    /// Tenants in the config in force.
    pub fn live(&self) -> impl Iterator<Item = &Tenant> {
        self.list.iter().filter(|t| t.live)
    }

    pub fn get(&self, id: TenantId) -> &Tenant {
        &self.list[id.0 as usize]
    }

    /// The live tenant named `name`.
    pub fn by_name(&self, name: &str) -> Option<&Tenant> {
        self.by_name.get(name).map(|id| self.get(*id))
    }

    /// Ids in use: live tenants and the retired ones before them (ids are dense).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Every id's tenant, retired ones included.
    pub fn iter(&self) -> impl Iterator<Item = &Tenant> {
        self.list.iter()
    }

    /// HELLO: the tenant named `name` if `secret` is right. Runs one constant-time comparison
    /// whether or not the name exists.
    pub fn authenticate(&self, name: &str, secret: &[u8]) -> Option<TenantId> {
        match self.by_name(name) {
            Some(t) => t.authenticate(secret).then_some(t.id),
            None => {
                let _ = DUMMY_SECRET.ct_eq(secret);
                None
            }
        }
    }
}

/// One config tenant as tenant `id`.
fn resolve(t: &TenantConfig, id: TenantId, volume_ids: &VolumeIds) -> Tenant {
    let grants = t
        .acl
        .iter()
        .filter_map(|a| {
            let (volume, block) = *volume_ids.get(a.volume.as_str())?;
            let byte_ranges = a.lba_ranges.as_ref().map(|ranges| {
                let bytes = ranges
                    .iter()
                    .map(|[f, e]| {
                        (
                            f.saturating_mul(u64::from(block)),
                            e.saturating_mul(u64::from(block)),
                        )
                    })
                    .collect();
                merge_ranges(bytes)
            });
            Some(Grant {
                volume,
                byte_ranges,
                access: a.access,
            })
        })
        .collect();
    Tenant {
        id,
        name: t.name.clone(),
        secret: t.secret.as_ref().map(|s| s.as_bytes().to_vec()),
        class: t.class,
        slo: t.slo,
        grants,
        live: true,
    }
}

/// Sorts and merges overlapping or touching ranges.
fn merge_ranges(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (f, e) in ranges {
        match merged.last_mut() {
            Some(last) if f <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((f, e)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::from_toml_str;

    const CONFIG: &str = r#"
[[volume]]
name = "fast"
backend = { kind = "memory", size = "1GiB" }
[[volume]]
name = "other"
backend = { kind = "memory", size = "1MiB" }
[[tenant]]
name = "alice"
secret = "correct horse battery"
class = "be"
acl = [{ volume = "fast", access = "read-write", lba_ranges = [[0, 2048], [2048, 4096], [10000, 10008]] }]
[[tenant]]
name = "reader"
secret = "reader-secret"
class = "be"
acl = [{ volume = "fast", access = "read" }]
"#;

    fn setup() -> Tenants {
        Tenants::from_config(&from_toml_str(CONFIG).unwrap())
    }

    const GEO: VolumeGeometry = VolumeGeometry {
        size_bytes: 1 << 30,
        block_bytes: 512,
    };
    const MAX: u64 = 32 << 20;

    #[test]
    fn secrets_are_checked() {
        let t = setup();
        assert_eq!(
            t.authenticate("alice", b"correct horse battery"),
            Some(TenantId(0))
        );
        assert_eq!(t.authenticate("alice", b"correct horse batterY"), None);
        assert_eq!(t.authenticate("alice", b""), None);
        assert_eq!(t.authenticate("mallory", b"correct horse battery"), None);
    }

    #[test]
    fn ranges_merge_and_bound_requests() {
        let t = setup();
        let alice = t.by_name("alice").unwrap();
        assert_eq!(
            alice.grants[0].byte_ranges.as_deref(),
            Some(&[(0, 4096 * 512), (10000 * 512, 10008 * 512)][..])
        );
        let v = VolumeId(0);
        let w = |off: u64, len: u64| {
            alice.check(
                v,
                GEO,
                IoCheck::new(AccessKind::Write, off, len, Payload::Carried),
                MAX,
            )
        };
        assert_eq!(
            w(2040 * 512, 4096),
            Ok(()),
            "crosses the merged boundary at LBA 2048"
        );
        assert_eq!(w(4089 * 512, 4096), Err(Denied::OutOfRange));
        assert_eq!(w(100, 4096), Err(Denied::Misaligned));
        assert_eq!(w(10000 * 512, 4096), Ok(()));
        assert_eq!(w(0, 0), Err(Denied::Misaligned));
        assert_eq!(w(u64::MAX - 511, 512), Err(Denied::OutOfRange));
        assert_eq!(
            alice.check(
                VolumeId(1),
                GEO,
                IoCheck::new(AccessKind::Read, 0, 512, Payload::Carried),
                MAX
            ),
            Err(Denied::NoGrant)
        );
        assert_eq!(w(0, 64 << 20), Err(Denied::TooLarge));
    }

    #[test]
    fn read_only_grant_refuses_writes_only() {
        let t = setup();
        let r = t.by_name("reader").unwrap();
        let v = VolumeId(0);
        assert_eq!(
            r.check(
                v,
                GEO,
                IoCheck::new(AccessKind::Read, 4096, 4096, Payload::Carried),
                MAX
            ),
            Ok(())
        );
        assert_eq!(
            r.check(
                v,
                GEO,
                IoCheck::new(AccessKind::Write, 4096, 4096, Payload::Carried),
                MAX
            ),
            Err(Denied::ReadOnly)
        );
        assert_eq!(
            r.check(
                v,
                GEO,
                IoCheck::new(AccessKind::Flush, 0, 0, Payload::Carried),
                MAX
            ),
            Ok(())
        );
        assert_eq!(
            r.check(
                v,
                GEO,
                IoCheck::new(AccessKind::Read, (1 << 30) - 512, 1024, Payload::Carried),
                MAX
            ),
            Err(Denied::OutOfRange)
        );
    }

    #[test]
    fn a_reload_keeps_the_ids_of_tenants_whose_identity_stays() {
        let t = setup();
        let mut config = from_toml_str(CONFIG).unwrap();
        // alice's ACL narrows (same identity); reader's secret changes (new identity);
        // carol is new.
        config.tenants[0].acl[0].lba_ranges = Some(vec![[0, 8]]);
        config.tenants[1].secret = Some("reader-secret-2".into());
        let mut carol = config.tenants[0].clone();
        carol.name = "carol".into();
        config.tenants.push(carol);
        let volumes: VolumeIds = [("fast", (VolumeId(0), 512)), ("other", (VolumeId(1), 512))]
            .into_iter()
            .collect();
        let next = t.reloaded(&config, &volumes);
        let alice = next.by_name("alice").unwrap();
        assert_eq!(alice.id, TenantId(0));
        assert_eq!(
            alice.grants[0].byte_ranges.as_deref(),
            Some(&[(0, 8 * 512)][..])
        );
        assert_eq!(next.by_name("reader").unwrap().id, TenantId(2));
        assert!(!next.get(TenantId(1)).live, "the old reader is retired");
        assert_eq!(next.by_name("carol").unwrap().id, TenantId(3));
        assert_eq!((next.len(), next.live().count()), (4, 3));
        assert_eq!(next.authenticate("reader", b"reader-secret"), None);
        assert_eq!(
            next.authenticate("reader", b"reader-secret-2"),
            Some(TenantId(2))
        );
    }

    #[test]
    fn range_only_ops_ignore_request_size_limit() {
        let t = setup();
        let r = t.by_name("reader").unwrap();
        assert_eq!(
            r.check(
                VolumeId(0),
                GEO,
                IoCheck::new(AccessKind::Read, 0, 512 << 20, Payload::RangeOnly),
                MAX
            ),
            Ok(())
        );
    }
}
