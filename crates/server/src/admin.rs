//! The admin endpoint's server side: scrapes of the generation in force, and `POST /reload`.
//!
//! # What it implements
//! [`AdminApi`] is what the HTTP responder of [`crate::metrics`] calls: before each scrape it
//! brings the token counters of the generation in force up to date, and it answers
//! `POST /reload`, which re-reads the config file as SIGHUP does ([`crate::reload`]).
//!
//! `POST /reload` is off unless the config has `[admin] token`: then it needs
//! `Authorization: Bearer TOKEN`, compared in constant time. Answers: `200` with the changes
//! (`generation 3: tenant bob added; …`), `422` with the reason the new config was refused
//! (nothing changed), `401` for a missing or wrong token, `403` when no token is configured,
//! `429` while the address backs off after wrong tokens (the back-off of wrong HELLO secrets,
//! [`crate::throttle`]: an address that guesses is slowed down exponentially), `503` while the
//! server stops. Every refusal is logged with `event = "refusal"` and the peer; every reload,
//! applied or refused, with `event = "reload"`.
//!
//! Worked example: `curl -s -X POST -H "Authorization: Bearer $(cat /etc/ullstack/admin.token)"
//! http://127.0.0.1:9100/reload` after removing a tenant from the file prints `generation 1:
//! tenant bob removed: its sessions end`.
//!
//! # What it leaves out
//! TLS on the admin port (bind it to loopback or a management network), and other writes.
//!
//! # Config keys
//! `[listen] admin`, `[admin] token`.

use std::net::SocketAddr;
use std::sync::Arc;

use subtle::ConstantTimeEq;

use crate::metrics::{AdminReply, AdminRoutes};
use crate::reload::ReloadError;
use crate::shared::Shared;

/// The server's admin routes (see the module essay); holds any generation of the server.
pub struct AdminApi {
    shared: Arc<Shared>,
}

impl AdminApi {
    pub fn new(shared: Arc<Shared>) -> AdminApi {
        AdminApi { shared }
    }

    fn refuse(
        &self,
        peer: SocketAddr,
        status: &'static str,
        reason: &str,
        body: String,
    ) -> AdminReply {
        tracing::warn!(
            target: "audit",
            event = "refusal",
            peer = %peer,
            reason,
            "POST /reload refused"
        );
        AdminReply { status, body }
    }
}

/// The bearer token of an `Authorization` header value (the scheme in any case).
fn bearer(authorization: Option<&str>) -> &str {
    authorization
        .and_then(|a| {
            let (scheme, token) = a.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then_some(token.trim())
        })
        .unwrap_or("")
}

impl AdminRoutes for AdminApi {
    fn refresh(&self) {
        if let Some(current) = self.shared.current() {
            current.refresh_token_metrics();
        }
    }

    fn reload(&self, peer: SocketAddr, authorization: Option<&str>) -> AdminReply {
        let Some(current) = self.shared.current() else {
            return AdminReply {
                status: "503 Service Unavailable",
                body: "the server is stopping\n".into(),
            };
        };
        let Some(token) = current.config.admin.token.as_deref() else {
            return self.refuse(
                peer,
                "403 Forbidden",
                "admin_token_off",
                "POST /reload is off: set [admin] token in the config (then send Authorization: Bearer TOKEN), or send SIGHUP\n".into(),
            );
        };
        let now = crate::clock::now_ns();
        if let Err(wait_ns) = self.shared.lock_auth_throttle().check(peer.ip(), now) {
            self.shared.metrics.auth_throttled();
            let wait_ms = wait_ns.div_ceil(1_000_000);
            return self.refuse(
                peer,
                "429 Too Many Requests",
                "admin_token_backoff",
                format!(
                    "too many wrong tokens from {}: retry in {wait_ms} ms\n",
                    peer.ip()
                ),
            );
        }
        let presented = bearer(authorization);
        let right = bool::from(presented.as_bytes().ct_eq(token.as_bytes()));
        if !right {
            self.shared.lock_auth_throttle().failed(peer.ip(), now);
            self.shared.metrics.auth_failed("admin_token");
            return self.refuse(
                peer,
                "401 Unauthorized",
                "admin_token_wrong",
                "a missing or wrong admin token: send Authorization: Bearer TOKEN ([admin] token)\n".into(),
            );
        }
        self.shared.lock_auth_throttle().succeeded(peer.ip());
        match crate::reload::reload(&self.shared, "http") {
            Ok(report) => AdminReply {
                status: "200 OK",
                body: format!("{report}\n"),
            },
            Err(ReloadError::Stopping) => AdminReply {
                status: "503 Service Unavailable",
                body: "reload refused: the server is stopping\n".into(),
            },
            Err(e) => AdminReply {
                status: "422 Unprocessable Entity",
                body: format!("reload refused, nothing changed: {e}\n"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        assert_eq!(bearer(Some("Bearer abc")), "abc");
        assert_eq!(bearer(Some("bearer  abc ")), "abc");
        assert_eq!(bearer(Some("Basic abc")), "");
        assert_eq!(bearer(None), "");
    }
}
