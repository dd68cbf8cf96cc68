//! A worker's TLS duties: upgrading a connection at NBD_OPT_STARTTLS, and reporting each
//! TLS-PSK outcome to the per-address authentication back-off.
//!
//! # What it implements
//! [`Worker::start_tls`] starts a session on a connection whose NBD STARTTLS was acknowledged:
//! replies queued before it go out in clear ahead of TLS, and input buffered behind the option
//! is the client's first TLS bytes. [`Worker::note_psk`] reports a session's PSK outcome once:
//! a failed handshake after the client offered an identity is a failed authentication, a
//! completed one a success, a PSK refused unchecked because the address backs off is counted as
//! throttled ([`crate::throttle`]). [`Worker::tls_blocked`] says whether a new session from an
//! address must refuse PSK unchecked.
//!
//! # Design
//! The back-off is the same one the own protocol's HELLO uses, so an attacker guessing keys
//! gains nothing by switching between a plain HELLO and TLS-PSK. Worked example: 5 failed PSK
//! handshakes from one address put it in back-off; the 6th session from it refuses PSK without
//! checking the key, and the refusal is logged as `tls_psk_backoff`.
//!
//! # What it leaves out
//! The TLS sessions themselves ([`crate::tls`]).

use super::Worker;
use crate::clock::now_ns;
use crate::conn::Peer;
use crate::tls::PskAttempt;

impl Worker {
    /// NBD_OPT_STARTTLS was acknowledged: what is queued goes out in clear ahead of TLS, and
    /// input buffered behind the option is the client's first TLS bytes.
    pub(super) fn start_tls(&mut self, i: usize) -> Result<(), &'static str> {
        let Some(server) = self.shared.tls.clone() else {
            return Err("nbd_starttls_without_tls");
        };
        // TLS reads and writes the socket itself: off the ring first (what a receive in
        // flight brings is the client's first TLS bytes).
        if let Err(e) = self.ring_to_epoll(i) {
            tracing::warn!(error = %e, "cannot watch a connection starting TLS");
            return Err("tls_setup");
        }
        let Some(conn) = self.conns.get(i) else {
            return Ok(());
        };
        let blocked = self.tls_blocked(conn.core.peer.map(|a| a.ip()), now_ns());
        let Some(conn) = self.conns.get_mut(i) else {
            return Ok(());
        };
        let mut tls = server.session(blocked).map_err(|e| {
            tracing::warn!(error = %e, "cannot start TLS");
            "tls_setup"
        })?;
        let mut clear = Vec::new();
        conn.core
            .drain_unsent_into(&mut clear, &mut self.pool, usize::MAX);
        let early = conn.input.data().len();
        tls.start(&clear, conn.input.data());
        conn.input.consume(early);
        let failed = early > 0
            && match tls.advance(&mut conn.input) {
                Ok(true) => false,
                Ok(false) => {
                    conn.core.finish("tls_closed");
                    false
                }
                Err(_) => true,
            };
        conn.tls = Some(Box::new(tls));
        self.note_psk(i, failed, now_ns());
        if failed {
            return Err("tls");
        }
        Ok(())
    }

    /// Whether a TLS session from `peer` must refuse PSK unchecked (its address backs off).
    pub(super) fn tls_blocked(&self, peer: Option<std::net::IpAddr>, now: u64) -> bool {
        peer.is_some_and(|ip| self.shared.lock_auth_throttle().check(ip, now).is_err())
    }

    /// Reports connection `i`'s PSK outcome to the per-address back-off, once: a handshake
    /// that failed after the client offered a PSK identity is a failed authentication, a
    /// completed one a success, a PSK refused because the address backs off is counted as
    /// throttled ([`crate::throttle`]).
    pub(super) fn note_psk(&mut self, i: usize, failed: bool, now: u64) {
        let Some(conn) = self.conns.get_mut(i) else {
            return;
        };
        let Some(tls) = conn.tls.as_ref() else {
            return;
        };
        if conn.psk_noted || !(failed || tls.established()) {
            return;
        }
        conn.psk_noted = true;
        let attempt = tls.psk_attempt();
        let peer = conn.core.peer;
        let Some(ip) = peer.map(|a| a.ip()) else {
            return;
        };
        match (attempt, failed) {
            (Some(PskAttempt::RefusedBlocked), _) => {
                self.shared.metrics.auth_throttled();
                tracing::warn!(
                    target: "audit",
                    event = "refusal",
                    reason = "tls_psk_backoff",
                    peer = %Peer(peer),
                    "TLS-PSK handshake refused unchecked: the address is backing off after failed authentications"
                );
            }
            (Some(PskAttempt::Tried), true) => {
                let block_ns = self.shared.lock_auth_throttle().failed(ip, now);
                tracing::warn!(
                    target: "audit",
                    event = "refusal",
                    reason = "tls_psk",
                    peer = %Peer(peer),
                    block_ms = block_ns.div_ceil(1_000_000),
                    "TLS-PSK handshake failed: wrong key or unknown identity"
                );
                self.shared.metrics.auth_failed("tls_psk");
            }
            (Some(PskAttempt::Tried), false) => self.shared.lock_auth_throttle().succeeded(ip),
            _ => {}
        }
    }
}
