//! The memory ledger: bytes clients make the server hold, per tenant and in all, against
//! `limits.max_memory_bytes`.
//!
//! # What it implements
//! Every byte a client makes the server hold is charged to its connection until it is gone:
//! a request's payload buffer from decode to completion, every queued reply (headers, error
//! replies, handshake output, read payloads) until the socket took it, and the connection's
//! input buffer and TLS buffers ([`crate::tls`]). A connection over `limits.max_inflight_bytes`
//! is not read. Above that, memory is charged **per tenant**: each tenant has a budget of
//! `max_memory_bytes / tenants`, and a tenant at its budget has its connections not read until
//! their replies drain; the other tenants, and handshakes, go on. (It used to be one
//! server-wide limit: six clients of one tenant that never read their replies froze every
//! client of every tenant, new ones included, issue 29.)
//!
//! A connection is charged to the server-wide total from accept, and to its tenant from the
//! moment it authenticates (HELLO, or an NBD export: [`MemoryLedger::assign`] moves what it
//! holds then); handshakes are charged in all only and never stopped — they hold little, and
//! there are at most `limits.max_unauthenticated_connections` of them.
//!
//! A tenant is stopped when its charge reaches its budget *and* part of that charge drains
//! without the server reading: payloads in flight and queued replies ([`Charge::held_bytes`]).
//! Input and TLS buffers count towards the budget but cannot stop a tenant alone: they shrink
//! only by being decoded, so a tenant stopped on buffers would be stopped forever.
//!
//! # Design
//! Workers publish each connection's charge as a delta to atomics ([`MemoryLedger::adjust`])
//! when the connection's state changed in a step — one `fetch_add` on the total and two on its
//! tenant per busy connection per step, not per byte. A request is charged at once when it is
//! decoded, so a tenant's next request on any worker sees it. A request still at the backend
//! when its connection closes stays charged until the backend gives its buffer back (its
//! buffer is still memory).
//!
//! Budgets are shares, not loans: a tenant does not borrow an idle tenant's budget, because
//! what a client that never reads its replies borrowed could not be taken back when the idle
//! tenant returns. Worked example: the default limit on this 24 GiB machine is 6 GiB; with
//! three tenants each may hold 2 GiB. Sixteen clients of tenant A that send 32 MiB READs and
//! never read the replies hold A's 2 GiB (plus one request's overshoot per worker), then A's
//! connections are not read; B and C still have 2 GiB each, and a new client of any tenant
//! still completes its handshake. The quick start has one tenant, which has all 6 GiB.
//!
//! # What it leaves out
//! Budgets within a tenant: the clients of one tenant (an open tenant's clients are anyone)
//! share its budget, so one of them that never reads holds it for all (the per-connection
//! `max_inflight_bytes` and the open tenant's per-source session cap bound how much one
//! client takes). Weighted budgets, the buffer pools' idle buffers (bounded per worker by
//! `buf::POOL_KEEP_BYTES_PER_CLASS`), the backends' own memory (a memory volume's data), and
//! OpenSSL's per-session state inside a TLS connection (about one 16 KiB record each way; the
//! buffers around it, [`crate::tls::TlsConn::held_bytes`], are charged).
//!
//! # Config keys
//! `[limits] max_memory_bytes, max_inflight_bytes`.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::appendvec::{AppendVec, Full};
use crate::tenant::TenantId;

/// What a connection (or a request) makes the server hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Charge {
    /// Everything: buffers, payloads in flight, queued replies.
    pub total_bytes: u64,
    /// Of it, what drains without the client being read: payloads in flight and queued
    /// replies.
    pub held_bytes: u64,
}

impl Charge {
    pub const ZERO: Charge = Charge {
        total_bytes: 0,
        held_bytes: 0,
    };

    /// A request's payload: held, and all of the charge.
    pub fn held(bytes: u64) -> Charge {
        Charge {
            total_bytes: bytes,
            held_bytes: bytes,
        }
    }

    /// `held_bytes` of held data plus `buffer_bytes` of buffers.
    pub fn new(held_bytes: u64, buffer_bytes: u64) -> Charge {
        Charge {
            total_bytes: held_bytes + buffer_bytes,
            held_bytes,
        }
    }

    pub fn plus(self, other: Charge) -> Charge {
        Charge {
            total_bytes: self.total_bytes + other.total_bytes,
            held_bytes: self.held_bytes + other.held_bytes,
        }
    }
}

/// One tenant's charge.
#[derive(Debug, Default)]
struct TenantAccount {
    total_bytes: AtomicU64,
    held_bytes: AtomicU64,
}

/// Charged bytes against the limit and the tenants' budgets, shared by all workers.
#[derive(Debug)]
pub struct MemoryLedger {
    charged_bytes: AtomicU64,
    peak_bytes: AtomicU64,
    limit_bytes: u64,
    /// By tenant id; grows when a reload adds tenants ([`crate::appendvec`]).
    tenants: AppendVec<TenantAccount>,
    /// `limit_bytes / live tenants`, set again by every reload.
    tenant_budget_bytes: AtomicU64,
}

/// Moves `counter` from `before` to `after` (an underflow is a bug: more released than
/// charged); returns the new value.
fn move_counter(counter: &AtomicU64, before: u64, after: u64, what: &str) -> u64 {
    if after >= before {
        counter.fetch_add(after - before, Ordering::Relaxed) + (after - before)
    } else {
        let old = counter.fetch_sub(before - after, Ordering::Relaxed);
        assert!(
            old >= before - after,
            "memory ledger underflow ({what}): releasing {} of {old} bytes",
            before - after
        );
        old - (before - after)
    }
}

impl MemoryLedger {
    /// A ledger of `limit_bytes` shared equally by `tenants` tenants.
    pub fn new(limit_bytes: u64, tenants: usize) -> Result<MemoryLedger, Full> {
        Ok(MemoryLedger {
            charged_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
            limit_bytes,
            tenants: AppendVec::with_len(tenants)?,
            tenant_budget_bytes: AtomicU64::new(limit_bytes / tenants.max(1) as u64),
        })
    }

    /// After a reload: accounts for tenant ids below `ids` exist, and the limit is shared by
    /// `live` tenants. A retired tenant's account keeps what its last connections hold until
    /// they close; the budget of the others does not wait for that.
    pub fn set_tenants(&self, ids: usize, live: usize) -> Result<(), Full> {
        self.tenants.grow_to(ids)?;
        self.tenant_budget_bytes
            .store(self.limit_bytes / live.max(1) as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Moves a charge from `before` to `after`: in all, and to `owner` when the connection
    /// has authenticated.
    pub fn adjust(&self, owner: Option<TenantId>, before: Charge, after: Charge) {
        assert!(
            before.held_bytes <= before.total_bytes && after.held_bytes <= after.total_bytes,
            "a charge holds more than its total: {before:?} -> {after:?}"
        );
        let now = move_counter(
            &self.charged_bytes,
            before.total_bytes,
            after.total_bytes,
            "total",
        );
        self.peak_bytes.fetch_max(now, Ordering::Relaxed);
        if let Some(account) = owner.and_then(|t| self.tenants.get(t.0 as usize)) {
            move_counter(
                &account.total_bytes,
                before.total_bytes,
                after.total_bytes,
                "tenant",
            );
            move_counter(
                &account.held_bytes,
                before.held_bytes,
                after.held_bytes,
                "tenant held",
            );
        }
    }

    /// A connection holding `charge` (charged in all so far) authenticated as `tenant`: from
    /// now on the charge is also the tenant's.
    pub fn assign(&self, tenant: TenantId, charge: Charge) {
        if let Some(account) = self.tenants.get(tenant.0 as usize) {
            account
                .total_bytes
                .fetch_add(charge.total_bytes, Ordering::Relaxed);
            account
                .held_bytes
                .fetch_add(charge.held_bytes, Ordering::Relaxed);
        }
    }

    /// Whether `tenant`'s connections must wait: its charge reached its budget and part of
    /// it drains without the server reading (see the module essay).
    pub fn tenant_stopped(&self, tenant: TenantId) -> bool {
        self.tenants.get(tenant.0 as usize).is_some_and(|a| {
            a.total_bytes.load(Ordering::Relaxed) >= self.tenant_budget_bytes()
                && a.held_bytes.load(Ordering::Relaxed) > 0
        })
    }

    /// Bytes charged to `tenant` now.
    pub fn tenant_charged_bytes(&self, tenant: TenantId) -> u64 {
        self.tenants
            .get(tenant.0 as usize)
            .map_or(0, |a| a.total_bytes.load(Ordering::Relaxed))
    }

    /// Each tenant's budget: `max_memory_bytes / tenants` (the live ones, since the last
    /// reload).
    pub fn tenant_budget_bytes(&self) -> u64 {
        self.tenant_budget_bytes.load(Ordering::Relaxed)
    }

    /// Whether the charge in all reached `max_memory_bytes` (the sum of the budgets: reached
    /// only when every tenant is near its budget, or by overshoot and handshakes).
    pub fn over_limit(&self) -> bool {
        self.charged_bytes.load(Ordering::Relaxed) >= self.limit_bytes
    }

    pub fn charged_bytes(&self) -> u64 {
        self.charged_bytes.load(Ordering::Relaxed)
    }

    /// The highest charge seen since start.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes.load(Ordering::Relaxed)
    }

    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: TenantId = TenantId(0);
    const B: TenantId = TenantId(1);

    #[test]
    fn charges_peaks_and_limits() {
        let m = MemoryLedger::new(100, 1).expect("ledger");
        m.adjust(None, Charge::ZERO, Charge::new(0, 60));
        m.adjust(None, Charge::ZERO, Charge::new(0, 30));
        assert!(!m.over_limit());
        m.adjust(None, Charge::new(0, 30), Charge::new(0, 50));
        assert!(m.over_limit());
        m.adjust(None, Charge::new(0, 60), Charge::ZERO);
        assert_eq!((m.charged_bytes(), m.peak_bytes()), (50, 110));
        assert!(!m.over_limit());
    }

    #[test]
    fn a_tenant_at_its_budget_stops_only_itself() {
        let m = MemoryLedger::new(100, 2).expect("ledger");
        assert_eq!(m.tenant_budget_bytes(), 50);
        // A handshake's buffers, then it authenticates as A and a request is decoded.
        m.adjust(None, Charge::ZERO, Charge::new(0, 10));
        m.assign(A, Charge::new(0, 10));
        m.adjust(Some(A), Charge::ZERO, Charge::held(45));
        assert!(m.tenant_stopped(A), "A holds 55 of its 50");
        assert!(!m.tenant_stopped(B), "B holds nothing");
        assert_eq!(
            (m.tenant_charged_bytes(A), m.tenant_charged_bytes(B)),
            (55, 0)
        );
        // The reply drains: A goes on.
        m.adjust(Some(A), Charge::held(45), Charge::ZERO);
        assert!(!m.tenant_stopped(A));
        assert_eq!(m.charged_bytes(), 10);
    }

    #[test]
    fn buffers_alone_never_stop_a_tenant() {
        let m = MemoryLedger::new(100, 2).expect("ledger");
        m.adjust(Some(A), Charge::ZERO, Charge::new(0, 80));
        assert!(
            !m.tenant_stopped(A),
            "buffers shrink only by being decoded: stopping A on them would stop it forever"
        );
        m.adjust(Some(A), Charge::new(0, 80), Charge::new(1, 80));
        assert!(m.tenant_stopped(A));
    }

    #[test]
    fn a_reload_shares_the_limit_among_the_live_tenants() {
        let m = MemoryLedger::new(100, 2).expect("ledger");
        m.adjust(Some(A), Charge::ZERO, Charge::held(40));
        // A retired (id 0 stays with its charge), B kept, C and D (ids 2, 3) added.
        m.set_tenants(4, 3).expect("grow");
        assert_eq!(m.tenant_budget_bytes(), 33);
        assert!(m.tenant_stopped(A), "A's last connections still hold 40");
        m.adjust(Some(TenantId(3)), Charge::ZERO, Charge::held(10));
        assert_eq!(m.tenant_charged_bytes(TenantId(3)), 10);
        m.adjust(Some(A), Charge::held(40), Charge::ZERO);
        assert!(!m.tenant_stopped(A));
    }

    #[test]
    #[should_panic(expected = "underflow")]
    fn releasing_more_than_charged_is_a_bug() {
        let m = MemoryLedger::new(100, 1).expect("ledger");
        m.adjust(None, Charge::ZERO, Charge::new(0, 10));
        m.adjust(None, Charge::new(0, 20), Charge::ZERO);
    }
}
