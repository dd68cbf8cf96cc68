//! Throttling wrong secrets: exponential back-off per source address.
//!
//! # What it implements
//! A HELLO with a wrong secret (or an unknown tenant) costs the client time: after
//! [`AUTH_FREE_FAILURES`] failures from one IP address, each further failure blocks that
//! address for twice as long as the previous one, from [`AUTH_BACKOFF_BASE_NS`] up to
//! [`AUTH_BACKOFF_MAX_NS`]. A HELLO arriving while its address is blocked is answered
//! `AUTH_FAILED` ("retry in N ms") without its secret being looked at, so guessing cannot go
//! faster than the back-off allows. A successful HELLO clears the address's record.
//!
//! # Design
//! A map from address to (failures, blocked until, last seen), bounded at
//! [`AUTH_MAX_ADDRESSES`]: records idle for [`AUTH_FORGET_NS`] are dropped first, then the
//! least recently seen. Time is an argument (sans-I/O), so the tests drive it. Worked example:
//! a client retrying a wrong secret as fast as it can, 1,667 times a second for 1.2 s (the
//! refused load the issue measured), gets 3 free tries, then waits 10, 20, 40 … 640 ms: 10
//! secrets are checked instead of 2,000.
//!
//! The same records count failed TLS-PSK handshakes ([`crate::tls`], on either listener): a
//! handshake in which the client offered a PSK identity and then failed (a wrong key, an
//! unknown identity) is a failure of its address, a completed PSK handshake a success, and a
//! connection from a blocked address has its PSK handshake refused without a key being looked
//! up (counted in `ullstack_auth_throttled_total`, as a refused HELLO is). A client that sent
//! no PSK identity (plaintext on a TLS port, a certificate handshake) is not counted.
//!
//! # What it leaves out
//! Throttling per tenant name (a distributed guesser from many addresses).

use std::collections::HashMap;
use std::net::IpAddr;

/// Failures an address may have before back-off starts (typos happen).
pub const AUTH_FREE_FAILURES: u32 = 3;
/// Block after the first failure beyond the free ones; doubles with each further failure.
pub const AUTH_BACKOFF_BASE_NS: u64 = 10_000_000;
/// Longest block.
pub const AUTH_BACKOFF_MAX_NS: u64 = 10_000_000_000;
/// A record with no attempt for this long is forgotten.
pub const AUTH_FORGET_NS: u64 = 600_000_000_000;
/// Addresses remembered at most (a few MB).
pub const AUTH_MAX_ADDRESSES: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Record {
    failures: u32,
    blocked_until_ns: u64,
    last_ns: u64,
}

/// Failed-authentication records by source address.
#[derive(Debug, Default)]
pub struct AuthThrottle {
    records: HashMap<IpAddr, Record>,
}

impl AuthThrottle {
    /// Ok if `addr` may try a secret now; Err(ns to wait) if it is blocked.
    pub fn check(&self, addr: IpAddr, now_ns: u64) -> Result<(), u64> {
        match self.records.get(&addr) {
            Some(r) if r.blocked_until_ns > now_ns => Err(r.blocked_until_ns - now_ns),
            _ => Ok(()),
        }
    }

    /// Records a failed attempt; returns how long the address is now blocked (0: not).
    pub fn failed(&mut self, addr: IpAddr, now_ns: u64) -> u64 {
        if !self.records.contains_key(&addr) && self.records.len() >= AUTH_MAX_ADDRESSES {
            self.evict(now_ns);
        }
        let r = self.records.entry(addr).or_insert(Record {
            failures: 0,
            blocked_until_ns: 0,
            last_ns: now_ns,
        });
        r.failures = r.failures.saturating_add(1);
        r.last_ns = now_ns;
        let block_ns = backoff_ns(r.failures);
        r.blocked_until_ns = now_ns + block_ns;
        assert!(self.records.len() <= AUTH_MAX_ADDRESSES);
        block_ns
    }

    /// A successful HELLO: the address starts afresh.
    pub fn succeeded(&mut self, addr: IpAddr) {
        self.records.remove(&addr);
    }

    /// Failures on record for `addr` (0: none, or cleared by a success).
    pub fn failures(&self, addr: IpAddr) -> u32 {
        self.records.get(&addr).map_or(0, |r| r.failures)
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn evict(&mut self, now_ns: u64) {
        self.records
            .retain(|_, r| now_ns.saturating_sub(r.last_ns) < AUTH_FORGET_NS);
        if self.records.len() >= AUTH_MAX_ADDRESSES {
            let oldest = self
                .records
                .iter()
                .min_by_key(|(_, r)| r.last_ns)
                .map(|(a, _)| *a);
            if let Some(a) = oldest {
                self.records.remove(&a);
            }
        }
    }
}

/// The block after the `failures`-th failure.
pub fn backoff_ns(failures: u32) -> u64 {
    if failures <= AUTH_FREE_FAILURES {
        return 0;
    }
    let doublings = (failures - AUTH_FREE_FAILURES - 1).min(20);
    (AUTH_BACKOFF_BASE_NS << doublings).min(AUTH_BACKOFF_MAX_NS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, n])
    }

    #[test]
    fn a_fast_guesser_gets_few_tries() {
        let mut t = AuthThrottle::default();
        let (mut checked, mut now) = (0, 0u64);
        // 2,000 attempts at 1,667/s.
        for _ in 0..2_000 {
            if t.check(ip(1), now).is_ok() {
                checked += 1;
                t.failed(ip(1), now);
            }
            now += 600_000;
        }
        assert!((4..=12).contains(&checked), "{checked} secrets checked");
        assert!(
            t.check(ip(2), now).is_ok(),
            "other addresses are not affected"
        );
        t.succeeded(ip(1));
        assert!(t.check(ip(1), now).is_ok());
    }

    #[test]
    fn backoff_doubles_to_a_cap() {
        assert_eq!(backoff_ns(AUTH_FREE_FAILURES), 0);
        assert_eq!(backoff_ns(AUTH_FREE_FAILURES + 1), AUTH_BACKOFF_BASE_NS);
        assert_eq!(backoff_ns(AUTH_FREE_FAILURES + 2), 2 * AUTH_BACKOFF_BASE_NS);
        assert_eq!(backoff_ns(u32::MAX), AUTH_BACKOFF_MAX_NS);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = AuthThrottle::default();
        for i in 0..(AUTH_MAX_ADDRESSES as u32 + 10) {
            t.failed(IpAddr::from(i.to_be_bytes()), u64::from(i));
        }
        assert_eq!(t.len(), AUTH_MAX_ADDRESSES);
    }
}
