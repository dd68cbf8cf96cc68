//! `[admin]`: what may change the server through its admin listener (`[listen] admin`).
//!
//! The admin listener answers `GET /metrics` and `GET /health` to anyone who reaches it; its
//! one write, `POST /reload` (re-read the config file, as SIGHUP does), is off unless `token`
//! is set, and then needs `Authorization: Bearer TOKEN` ([`crate::admin`]). The token is a
//! secret like a tenant's: it prints as `(redacted)` in `--check` and in `Debug`, and is
//! compared in constant time. A reload applies a changed token to the requests after it.
//!
//! Keys: `token` (16..=256 visible ASCII characters; `openssl rand -hex 32` makes one).

use std::fmt;

use serde::Deserialize;

use super::{invalid, summary, ConfigError};

/// Shortest admin token: 16 characters (a reload is not guessed by trying).
pub const MIN_ADMIN_TOKEN_BYTES: usize = 16;
/// Longest admin token: it travels in one HTTP header line.
pub const MAX_ADMIN_TOKEN_BYTES: usize = 256;

/// `[admin]`.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Bearer token of `POST /reload`; absent: the admin listener changes nothing.
    #[serde(default)]
    pub token: Option<String>,
}

impl fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminConfig")
            .field("token", &self.token.as_ref().map(|_| summary::REDACTED))
            .finish()
    }
}

impl AdminConfig {
    /// The token's length and alphabet: visible ASCII, so it fits a header without quoting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        if !(MIN_ADMIN_TOKEN_BYTES..=MAX_ADMIN_TOKEN_BYTES).contains(&token.len()) {
            return Err(invalid(
                "admin.token",
                format!("({} bytes)", token.len()),
                format!("{MIN_ADMIN_TOKEN_BYTES}..={MAX_ADMIN_TOKEN_BYTES} bytes"),
            ));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                "admin.token",
                "(a space or a control or non-ASCII character)",
                "visible ASCII characters only (it is sent as `Authorization: Bearer TOKEN`)",
            ));
        }
        Ok(())
    }
}
