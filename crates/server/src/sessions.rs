//! Sessions per tenant: `max_connections_per_tenant` for every tenant and, for an open tenant
//! (no secret), `max_open_sessions_per_source` from one source.
//!
//! # What it implements
//! A *session* is a connection bound to a tenant: a HELLO that succeeded, or an NBD handshake
//! that entered transmission with one of the tenant's exports. Each takes one of the tenant's
//! `limits.max_connections_per_tenant` slots until it closes, so one tenant's connections
//! cannot take `max_connections` from the others. That alone does not protect the clients
//! *of* a tenant from each other, which matters when the tenant is open: anyone who reaches
//! the port is that tenant, so 1,000 idle NBD sessions from one address took the quick
//! start's whole cap and every other NBD client was refused for the 300 s of their idle
//! timeout (issue 29). So an open tenant's sessions are also counted per source, and one
//! source holds at most `limits.max_open_sessions_per_source` of them (default a quarter of
//! the tenant's cap, at most 64).
//!
//! A *source* is an IPv4 address or an IPv6 /64: a host is usually given a whole /64, and
//! counting its 2^64 addresses one by one would give it 2^64 shares.
//!
//! Worked example (the defaults): the quick start's `open` tenant has 1,000 slots; one address
//! holds at most 64, so it takes 16 addresses (or /64s) to fill the tenant, and an address
//! that holds 64 idle sessions leaves 936 to everyone else. A tenant with a secret is not
//! capped per source: its clients proved who they are, and the operator sized its cap for
//! them (a NAT or a hypervisor may run all of them from one address).
//!
//! # Design
//! The tenants' totals are atomics (taken once per session, never per request); the open
//! tenants' per-source counts sit in one map behind a mutex that only sessions of open
//! tenants take, at bind and at close. [`SessionSlot`] is what a session holds and gives
//! back: it is neither `Clone` nor `Copy`, so a slot is returned at most once, and an address
//! is forgotten when it holds nothing.
//!
//! # What it leaves out
//! A distributed client with `max_connections_per_tenant / max_open_sessions_per_source`
//! sources (16 by default) still fills an open tenant; give tenants reachable beyond a
//! trusted network a secret (or TLS-PSK) instead. Idle sessions of an open tenant are closed
//! only by `idle_timeout_ms`, not earlier when others wait.
//!
//! # Config keys
//! `[limits] max_connections_per_tenant, max_open_sessions_per_source`; `[[tenant]] open`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::appendvec::{AppendVec, Full};
use crate::config::LimitsConfig;
use crate::tenant::{TenantId, Tenants};

/// Where a session comes from, as the per-source cap counts it: an IPv4 address, or the /64
/// prefix of an IPv6 address (an IPv4-mapped IPv6 address counts as its IPv4 address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    V4(u32),
    V6Prefix64(u64),
}

impl Source {
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(u32::from(v4)),
                None => Source::V6Prefix64((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// Why a session was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRefusal {
    /// The tenant holds `limits.max_connections_per_tenant` sessions.
    Tenant,
    /// The tenant is open and this source holds `limits.max_open_sessions_per_source` of its
    /// sessions.
    Source,
}

impl SessionRefusal {
    /// What the client is told (an NBD option error's text, a HELLO's BUSY message).
    pub fn explain(self, tenant: &str, limits: &LimitsConfig) -> String {
        match self {
            SessionRefusal::Tenant => format!(
                "tenant {tenant:?} already holds limits.max_connections_per_tenant ({}) connections",
                limits.max_connections_per_tenant
            ),
            SessionRefusal::Source => format!(
                "open tenant {tenant:?} already holds limits.max_open_sessions_per_source ({}) sessions from this address",
                limits.open_sessions_per_source()
            ),
        }
    }
}

/// A session's hold on its tenant's slots; give it back with [`Sessions::release`].
#[derive(Debug, PartialEq, Eq)]
pub struct SessionSlot {
    tenant: TenantId,
    /// Counted per source (open tenants with a known peer).
    source: Option<Source>,
}

impl SessionSlot {
    pub fn tenant(&self) -> TenantId {
        self.tenant
    }
}

/// One tenant id's sessions.
#[derive(Debug, Default)]
struct TenantSessions {
    /// Whether the tenant is open (sessions counted per source). Set once, when its id is
    /// made: a tenant that changes between open and secret gets a new id ([`crate::reload`]).
    open: AtomicBool,
    held: AtomicUsize,
}

/// Sessions of every tenant, and of open tenants per source.
#[derive(Debug)]
pub struct Sessions {
    max_per_tenant: usize,
    max_open_per_source: usize,
    /// By tenant id; grows when a reload adds tenants ([`crate::appendvec`]).
    per_tenant: AppendVec<TenantSessions>,
    open_by_source: Mutex<HashMap<(TenantId, Source), usize>>,
}

impl Sessions {
    pub fn new(
        tenants: &Tenants,
        max_per_tenant: usize,
        max_open_per_source: usize,
    ) -> Result<Sessions, Full> {
        let sessions = Sessions {
            max_per_tenant,
            max_open_per_source,
            per_tenant: AppendVec::with_len(0)?,
            open_by_source: Mutex::new(HashMap::new()),
        };
        sessions.add_tenants(tenants)?;
        Ok(sessions)
    }

    /// Makes room for every id of `tenants` (a reload's) and records whether each is open.
    pub fn add_tenants(&self, tenants: &Tenants) -> Result<(), Full> {
        self.per_tenant.grow_to(tenants.len())?;
        for t in tenants.iter() {
            self.per_tenant[t.id.0 as usize]
                .open
                .store(t.is_open(), Ordering::Release);
        }
        Ok(())
    }

    fn of(&self, tenant: TenantId) -> &TenantSessions {
        &self.per_tenant[tenant.0 as usize]
    }

    /// The source a session of `tenant` from `peer` is counted under (None: not counted per
    /// source: a tenant with a secret, or a peer that left before accept told its address).
    fn source(&self, tenant: TenantId, peer: Option<IpAddr>) -> Option<Source> {
        self.of(tenant)
            .open
            .load(Ordering::Acquire)
            .then_some(peer.map(Source::of))
            .flatten()
    }

    fn lock_sources(&self) -> std::sync::MutexGuard<'_, HashMap<(TenantId, Source), usize>> {
        self.open_by_source
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a session slot of `tenant` for a connection from `peer`.
    pub fn acquire(
        &self,
        tenant: TenantId,
        peer: Option<IpAddr>,
    ) -> Result<SessionSlot, SessionRefusal> {
        let count = &self.of(tenant).held;
        if count.fetch_add(1, Ordering::AcqRel) >= self.max_per_tenant {
            count.fetch_sub(1, Ordering::AcqRel);
            return Err(SessionRefusal::Tenant);
        }
        let source = self.source(tenant, peer);
        if let Some(source) = source {
            let mut by_source = self.lock_sources();
            let held = by_source.entry((tenant, source)).or_insert(0);
            if *held >= self.max_open_per_source {
                drop(by_source);
                count.fetch_sub(1, Ordering::AcqRel);
                return Err(SessionRefusal::Source);
            }
            *held += 1;
        }
        Ok(SessionSlot { tenant, source })
    }

    /// Whether [`Sessions::acquire`] would succeed now (a hint for the NBD option phase, which
    /// answers an export query before the client commits to it).
    pub fn check(&self, tenant: TenantId, peer: Option<IpAddr>) -> Result<(), SessionRefusal> {
        if self.of(tenant).held.load(Ordering::Acquire) >= self.max_per_tenant {
            return Err(SessionRefusal::Tenant);
        }
        match self.source(tenant, peer) {
            Some(source)
                if self
                    .lock_sources()
                    .get(&(tenant, source))
                    .copied()
                    .unwrap_or(0)
                    >= self.max_open_per_source =>
            {
                Err(SessionRefusal::Source)
            }
            _ => Ok(()),
        }
    }

    /// Gives a slot back.
    pub fn release(&self, slot: SessionSlot) {
        if let Some(source) = slot.source {
            let mut by_source = self.lock_sources();
            let key = (slot.tenant, source);
            let held = by_source.get_mut(&key);
            assert!(
                held.as_ref().is_some_and(|h| **h > 0),
                "{:?} gave back a session slot its source did not hold",
                slot.tenant
            );
            if let Some(held) = held {
                *held -= 1;
                if *held == 0 {
                    by_source.remove(&key);
                }
            }
        }
        let old = self.of(slot.tenant).held.fetch_sub(1, Ordering::AcqRel);
        assert!(
            old > 0,
            "tenant {:?} released a session it did not hold",
            slot.tenant
        );
    }

    /// Sessions `tenant` holds now.
    pub fn held(&self, tenant: TenantId) -> usize {
        self.of(tenant).held.load(Ordering::Acquire)
    }

    /// Sources holding sessions of open tenants now (each forgotten when it holds none).
    pub fn sources(&self) -> usize {
        self.lock_sources().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;

    fn tenants() -> Tenants {
        let config = ServerConfig::from_toml_str(
            r#"
[[volume]]
name = "v"
backend = { kind = "memory", size = "1MiB" }

[[tenant]]
name = "open"
open = true
class = "be"
acl = [{ volume = "v", access = "read-write" }]

[[tenant]]
name = "alice"
secret = "alice-secret"
class = "be"
acl = [{ volume = "v", access = "read-write" }]
"#,
        )
        .expect("config");
        Tenants::from_config(&config)
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().expect("ip"))
    }

    #[test]
    fn an_open_tenant_is_capped_per_source_and_the_slots_come_back() {
        let t = tenants();
        let open = t.by_name("open").expect("open").id;
        let s = Sessions::new(&t, 5, 2).expect("sessions");
        let a: Vec<_> = (0..2)
            .map(|_| s.acquire(open, ip("192.0.2.1")).expect("a"))
            .collect();
        assert_eq!(
            s.acquire(open, ip("192.0.2.1")),
            Err(SessionRefusal::Source)
        );
        assert_eq!(s.check(open, ip("192.0.2.1")), Err(SessionRefusal::Source));
        assert_eq!(s.check(open, ip("192.0.2.2")), Ok(()));
        let b1 = s.acquire(open, ip("192.0.2.2")).expect("b");
        let b2 = s.acquire(open, ip("192.0.2.2")).expect("b");
        let c = s.acquire(open, ip("192.0.2.3")).expect("c");
        assert_eq!(
            s.acquire(open, ip("192.0.2.4")),
            Err(SessionRefusal::Tenant)
        );
        assert_eq!(s.held(open), 5);
        for slot in a.into_iter().chain([b1, b2, c]) {
            s.release(slot);
        }
        assert_eq!((s.held(open), s.sources()), (0, 0));
    }

    #[test]
    fn a_tenant_with_a_secret_is_not_capped_per_source() {
        let t = tenants();
        let alice = t.by_name("alice").expect("alice").id;
        let s = Sessions::new(&t, 5, 2).expect("sessions");
        let slots: Vec<_> = (0..5)
            .map(|_| s.acquire(alice, ip("192.0.2.1")).expect("alice"))
            .collect();
        assert_eq!(
            s.acquire(alice, ip("192.0.2.1")),
            Err(SessionRefusal::Tenant)
        );
        assert_eq!(s.sources(), 0);
        slots.into_iter().for_each(|slot| s.release(slot));
    }

    #[test]
    fn an_ipv6_host_is_one_source_per_64() {
        let t = tenants();
        let open = t.by_name("open").expect("open").id;
        let s = Sessions::new(&t, 10, 2).expect("sessions");
        let _a = s.acquire(open, ip("2001:db8:1:2::1")).expect("first");
        let _b = s.acquire(open, ip("2001:db8:1:2::ffff")).expect("second");
        assert_eq!(
            s.acquire(open, ip("2001:db8:1:2:ffff::7")),
            Err(SessionRefusal::Source),
            "another address of the same /64"
        );
        assert!(
            s.acquire(open, ip("2001:db8:1:3::1")).is_ok(),
            "another /64"
        );
        assert_eq!(
            Source::of("::ffff:192.0.2.1".parse().expect("ip")),
            Source::of("192.0.2.1".parse().expect("ip"))
        );
    }
}
