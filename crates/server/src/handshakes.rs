//! Room for connections that have not authenticated yet: a budget of its own, per source and
//! in all, and a per-source accept rate.
//!
//! # What it implements
//! A connection is *unauthenticated* from accept until HELLO succeeds (own protocol) or the
//! NBD handshake binds it to an export. Such connections cost a slot of `max_connections`
//! and an input buffer, yet prove nothing: an attacker holding `max_connections` raw sockets
//! that never handshake, reopening each as `handshake_timeout_ms` closes it, locked out every
//! tenant (26 of 28 sessions of a legitimate tenant failed, issue 29). So the acceptor admits
//! an unauthenticated connection only while
//!
//! * fewer than `limits.max_unauthenticated_connections` are unauthenticated in all (default a
//!   quarter of `max_connections`), so at least the rest of `max_connections` is always left
//!   to connections that have authenticated;
//! * its source address holds fewer than `limits.max_unauthenticated_per_source`, so one
//!   address cannot take that whole budget from everyone else's handshakes;
//! * its source address has accept tokens left: `limits.accepts_per_source_per_sec`, with a
//!   burst of one second's worth ([`AcceptRate`]).
//!
//! Worked example (the defaults): `max_connections` 10,000 → 2,500 unauthenticated at most, 64
//! from one address. An attacker on one address holds 64 handshakes; a tenant's clients from
//! other addresses still find 2,436 handshake slots and, once authenticated, 7,500 more.
//!
//! # Design
//! [`HandshakeBudget`] is sans-I/O and behind one mutex in [`crate::shared::Shared`], taken
//! at accept and once when a connection authenticates or closes unauthenticated, never per
//! request. [`AcceptRate`] belongs to the acceptor thread alone. Both forget addresses: the
//! budget when an address holds nothing, the rate's buckets once full again.
//!
//! # What it leaves out
//! A distributed attacker with more addresses than `max_unauthenticated_connections / 64`
//! still fills the handshake budget (authenticated tenants keep their room); prefixes
//! (a /64 of IPv6) are counted as separate addresses.

use std::collections::HashMap;
use std::net::IpAddr;

/// Why an unauthenticated connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `limits.max_unauthenticated_connections` are unauthenticated already.
    Budget,
    /// Its address holds `limits.max_unauthenticated_per_source` already.
    Source,
    /// Its address connects faster than `limits.accepts_per_source_per_sec`.
    Rate,
}

impl Refusal {
    /// A short name for logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Budget => "unauthenticated_budget",
            Refusal::Source => "unauthenticated_per_source",
            Refusal::Rate => "accept_rate",
        }
    }
}

/// Unauthenticated connections, in all and per source address.
#[derive(Debug)]
pub struct HandshakeBudget {
    max_total: usize,
    max_per_source: usize,
    total: usize,
    by_source: HashMap<IpAddr, usize>,
}

impl HandshakeBudget {
    pub fn new(max_total: usize, max_per_source: usize) -> HandshakeBudget {
        HandshakeBudget {
            max_total,
            max_per_source,
            total: 0,
            by_source: HashMap::new(),
        }
    }

    /// Takes a slot for a new connection from `ip`, or says why not.
    pub fn try_take(&mut self, ip: IpAddr) -> Result<(), Refusal> {
        if self.total >= self.max_total {
            return Err(Refusal::Budget);
        }
        let held = self.by_source.entry(ip).or_insert(0);
        if *held >= self.max_per_source {
            return Err(Refusal::Source);
        }
        *held += 1;
        self.total += 1;
        Ok(())
    }

    /// Returns the slot of a connection from `ip` that authenticated or closed.
    pub fn give_back(&mut self, ip: IpAddr) {
        let Some(held) = self.by_source.get_mut(&ip) else {
            debug_assert!(false, "{ip} gave back a handshake slot it did not hold");
            return;
        };
        assert!(*held > 0 && self.total > 0, "handshake budget underflow");
        *held -= 1;
        self.total -= 1;
        if *held == 0 {
            self.by_source.remove(&ip);
        }
    }

    /// Unauthenticated connections now.
    pub fn total(&self) -> usize {
        self.total
    }
}

/// Per-source accept tokens: `per_sec` a second, at most one second's worth banked.
#[derive(Debug)]
pub struct AcceptRate {
    per_sec: u64,
    /// Address → (milli-tokens, when last refilled, ns).
    buckets: HashMap<IpAddr, (u64, u64)>,
}

/// Addresses an [`AcceptRate`] tracks before it drops the full buckets (a few MB).
pub const ACCEPT_RATE_MAX_ADDRESSES: usize = 65_536;

impl AcceptRate {
    /// `per_sec` = 0: unlimited.
    pub fn new(per_sec: u32) -> AcceptRate {
        AcceptRate {
            per_sec: u64::from(per_sec),
            buckets: HashMap::new(),
        }
    }

    /// Whether a connection from `ip` may be accepted at `now_ns` (takes a token if so).
    pub fn allow(&mut self, ip: IpAddr, now_ns: u64) -> bool {
        if self.per_sec == 0 {
            return true;
        }
        let full_milli = self.per_sec * 1000;
        if self.buckets.len() >= ACCEPT_RATE_MAX_ADDRESSES {
            let per_sec = self.per_sec;
            self.buckets.retain(|_, (milli, last)| {
                *milli + now_ns.saturating_sub(*last) * per_sec / 1_000_000 < full_milli
            });
        }
        let (milli, last) = self.buckets.entry(ip).or_insert((full_milli, now_ns));
        let earned = now_ns.saturating_sub(*last) * self.per_sec / 1_000_000;
        *milli = (*milli + earned).min(full_milli);
        *last = now_ns;
        if *milli < 1000 {
            return false;
        }
        *milli -= 1000;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_caps_each_source_and_the_total_and_is_given_back() {
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let b: IpAddr = "192.0.2.2".parse().expect("ip");
        let c: IpAddr = "192.0.2.3".parse().expect("ip");
        let mut budget = HandshakeBudget::new(5, 3);
        for _ in 0..3 {
            assert_eq!(budget.try_take(a), Ok(()));
        }
        assert_eq!(budget.try_take(a), Err(Refusal::Source));
        assert_eq!(budget.try_take(b), Ok(()));
        assert_eq!(budget.try_take(b), Ok(()));
        assert_eq!(budget.try_take(c), Err(Refusal::Budget));
        budget.give_back(a);
        assert_eq!(budget.try_take(c), Ok(()));
        assert_eq!(budget.total(), 5);
        for ip in [a, a, b, b, c] {
            budget.give_back(ip);
        }
        assert_eq!(budget.total(), 0);
        assert!(
            budget.by_source.is_empty(),
            "addresses holding nothing are forgotten"
        );
    }

    #[test]
    fn the_accept_rate_allows_a_seconds_burst_then_the_rate() {
        let ip: IpAddr = "192.0.2.1".parse().expect("ip");
        let mut rate = AcceptRate::new(10);
        let allowed = (0..100).filter(|_| rate.allow(ip, 0)).count();
        assert_eq!(allowed, 10, "the burst is one second's worth");
        assert!(!rate.allow(ip, 50_000_000), "half a token after 50 ms");
        assert!(rate.allow(ip, 100_000_000), "a token after 100 ms");
        assert!(AcceptRate::new(0).allow(ip, 0), "0 is unlimited");
    }
}
