//! A small blocking face on the etcd v3 client (crate `etcd-client`, gRPC): the handful of
//! operations the fleet needs, each a call that returns when etcd answered.
//!
//! The server and the CLI are synchronous programs; each [`Etcd`] owns a current-thread tokio
//! runtime and blocks on it per call, so no async leaks out of this module. Every call has a
//! deadline ([`CALL_TIMEOUT`]): an unreachable registry is an error naming the URL, not a hang.
//! Errors are one line — `cannot reach etcd at http://127.0.0.1:2379 (listing
//! /ullstack/v1/): connection refused` — not the gRPC stack's debug dump ([`describe`]).

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use thiserror::Error;
use tokio::runtime::Runtime;

/// Deadline of one etcd call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What went wrong talking to the registry or with what it holds.
#[derive(Debug, Error)]
pub enum FleetError {
    /// etcd did not answer (refused, unreachable, timed out).
    #[error("cannot reach etcd at {url} ({what}): {why}")]
    Unreachable {
        url: String,
        what: String,
        why: String,
    },
    #[error("registry {url}: {message}")]
    Registry { url: String, message: String },
    #[error("registry {url}: key {key} holds invalid JSON: {message}")]
    Corrupt {
        url: String,
        key: String,
        message: String,
    },
    #[error("{0}")]
    Refused(String),
    /// A server's reservations that its device profile cannot price.
    #[error("{0}")]
    Model(String),
}

/// A key's value and its modification revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// One write of [`Etcd::compare_and_swap_all`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CasWrite {
    pub key: String,
    /// The `mod_revision` the key must still have (`0`: it must not exist).
    pub expected: i64,
    /// The new value, or `None` to delete the key.
    pub value: Option<Vec<u8>>,
}

/// Why an etcd call failed, in one line: [`Why::Unreachable`] with the deepest cause of the
/// transport's error chain (`connection refused`) for a registry that does not answer, else
/// the gRPC status and etcd's message — never the chain's debug dump.
pub enum Why {
    Unreachable(String),
    Answered(String),
}

/// Classifies and words an etcd client error (see [`Why`]).
pub fn describe(e: &etcd_client::Error) -> Why {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(status) => match (status.code(), root_cause(status)) {
            (tonic::Code::Unavailable | tonic::Code::Unknown, Some(root)) => Why::Unreachable(root),
            (tonic::Code::Unavailable, None) => Why::Unreachable(status.message().to_string()),
            (tonic::Code::DeadlineExceeded, _) => {
                Why::Unreachable(format!("no answer within {} s", CALL_TIMEOUT.as_secs()))
            }
            (code, _) => Why::Answered(format!("etcd answered {code:?}: {}", status.message())),
        },
        E::TransportError(t) => Why::Unreachable(root_cause(t).unwrap_or_else(|| t.to_string())),
        other => Why::Answered(other.to_string()),
    }
}

/// The error of call `what` to the registry at `url`.
fn error(url: &str, what: &str, e: &etcd_client::Error) -> FleetError {
    match describe(e) {
        Why::Unreachable(why) => FleetError::Unreachable {
            url: url.into(),
            what: what.into(),
            why,
        },
        Why::Answered(message) => FleetError::Registry {
            url: url.into(),
            message: format!("{what}: {message}"),
        },
    }
}

/// The innermost error of `e`'s source chain, lower-cased as a clause (`connection refused`),
/// or `None` if `e` has no source.
fn root_cause(e: &dyn std::error::Error) -> Option<String> {
    let mut cur = e.source()?;
    while let Some(next) = cur.source() {
        cur = next;
    }
    let text = cur.to_string();
    // io::Error prints "Connection refused (os error 111)": the errno adds nothing here.
    let text = match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    let mut chars = text.chars();
    Some(match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => text,
    })
}

/// A connection to one etcd endpoint.
pub struct Etcd {
    url: String,
    rt: Runtime,
    client: Client,
}

impl Etcd {
    /// Connects to `url` (`http://HOST:PORT`, or `HOST:PORT`).
    pub fn connect(url: &str) -> Result<Etcd, FleetError> {
        let endpoint = url
            .strip_prefix("http://")
            .unwrap_or(url)
            .trim_end_matches('/')
            .to_string();
        if endpoint.is_empty() || url.starts_with("https://") {
            return Err(FleetError::Registry {
                url: url.into(),
                message: "expected http://HOST:PORT (TLS to etcd is not supported yet)".into(),
            });
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| FleetError::Registry {
                url: url.into(),
                message: format!("starting a runtime: {e}"),
            })?;
        let options = ConnectOptions::new()
            .with_connect_timeout(CALL_TIMEOUT)
            .with_timeout(CALL_TIMEOUT);
        let client = rt
            .block_on(Client::connect([endpoint.as_str()], Some(options)))
            .map_err(|e| error(url, "connecting", &e))?;
        Ok(Etcd {
            url: url.into(),
            rt,
            client,
        })
    }

    /// The URL this connects to.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn err(&self, what: &str, e: etcd_client::Error) -> FleetError {
        error(&self.url, what, &e)
    }

    /// Every key under `prefix`, in key order.
    pub fn list(&mut self, prefix: &str) -> Result<Vec<Versioned>, FleetError> {
        let resp = self
            .rt
            .block_on(
                self.client
                    .get(prefix, Some(GetOptions::new().with_prefix())),
            )
            .map_err(|e| self.err(&format!("listing {prefix}"), e))?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| Versioned {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                value: kv.value().to_vec(),
                mod_revision: kv.mod_revision(),
            })
            .collect())
    }

    /// One key, if present.
    pub fn get(&mut self, key: &str) -> Result<Option<Versioned>, FleetError> {
        let resp = self
            .rt
            .block_on(self.client.get(key, None))
            .map_err(|e| self.err(&format!("reading {key}"), e))?;
        Ok(resp.kvs().first().map(|kv| Versioned {
            key: key.into(),
            value: kv.value().to_vec(),
            mod_revision: kv.mod_revision(),
        }))
    }

    /// Writes `value` at `key` if the key's `mod_revision` is still `expected` (`0`: the key
    /// must not exist). `Ok(false)` when someone else changed it first.
    pub fn compare_and_put(
        &mut self,
        key: &str,
        expected: i64,
        value: Vec<u8>,
    ) -> Result<bool, FleetError> {
        let cmp = if expected == 0 {
            Compare::create_revision(key, CompareOp::Equal, 0)
        } else {
            Compare::mod_revision(key, CompareOp::Equal, expected)
        };
        let txn = Txn::new()
            .when([cmp])
            .and_then([TxnOp::put(key, value, None)]);
        let resp = self
            .rt
            .block_on(self.client.txn(txn))
            .map_err(|e| self.err(&format!("updating {key}"), e))?;
        Ok(resp.succeeded())
    }

    /// Deletes `key` if its `mod_revision` is still `expected`.
    pub fn compare_and_delete(&mut self, key: &str, expected: i64) -> Result<bool, FleetError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::delete(key, None)]);
        let resp = self
            .rt
            .block_on(self.client.txn(txn))
            .map_err(|e| self.err(&format!("deleting {key}"), e))?;
        Ok(resp.succeeded())
    }

    /// Applies every write of `writes` in one transaction if every key's `mod_revision` is
    /// still the one given (`0`: the key must not exist); `None` as the value deletes the key.
    /// `Ok(false)` when any of them changed first, and then nothing is written.
    pub fn compare_and_swap_all(&mut self, writes: &[CasWrite]) -> Result<bool, FleetError> {
        let cmps: Vec<Compare> = writes
            .iter()
            .map(|w| {
                if w.expected == 0 {
                    Compare::create_revision(w.key.as_str(), CompareOp::Equal, 0)
                } else {
                    Compare::mod_revision(w.key.as_str(), CompareOp::Equal, w.expected)
                }
            })
            .collect();
        let ops: Vec<TxnOp> = writes
            .iter()
            .map(|w| match &w.value {
                Some(v) => TxnOp::put(w.key.as_str(), v.clone(), None),
                None => TxnOp::delete(w.key.as_str(), None),
            })
            .collect();
        let keys: Vec<&str> = writes.iter().map(|w| w.key.as_str()).collect();
        let resp = self
            .rt
            .block_on(self.client.txn(Txn::new().when(cmps).and_then(ops)))
            .map_err(|e| self.err(&format!("updating {}", keys.join(" and ")), e))?;
        Ok(resp.succeeded())
    }

    /// Grants a lease of `ttl_s` seconds; its id.
    pub fn grant_lease(&mut self, ttl_s: i64) -> Result<i64, FleetError> {
        let resp = self
            .rt
            .block_on(self.client.lease_grant(ttl_s, None))
            .map_err(|e| self.err("granting a lease", e))?;
        Ok(resp.id())
    }

    /// Writes `key` under lease `lease`.
    pub fn put_with_lease(
        &mut self,
        key: &str,
        value: Vec<u8>,
        lease: i64,
    ) -> Result<(), FleetError> {
        self.rt
            .block_on(
                self.client
                    .put(key, value, Some(PutOptions::new().with_lease(lease))),
            )
            .map_err(|e| self.err(&format!("writing {key}"), e))?;
        Ok(())
    }

    /// Refreshes lease `lease` once; its remaining TTL in seconds (0: it had expired).
    pub fn keep_alive_once(&mut self, lease: i64) -> Result<i64, FleetError> {
        let url = self.url.clone();
        let client = &mut self.client;
        self.rt.block_on(async move {
            let err =
                |e: etcd_client::Error| error(&url, &format!("keeping lease {lease:x} alive"), &e);
            let (mut keeper, mut stream) = client.lease_keep_alive(lease).await.map_err(err)?;
            keeper.keep_alive().await.map_err(err)?;
            let ttl = stream.message().await.map_err(err)?.map_or(0, |r| r.ttl());
            Ok(ttl)
        })
    }

    /// Revokes lease `lease` (its keys disappear at once).
    pub fn revoke(&mut self, lease: i64) -> Result<(), FleetError> {
        self.rt
            .block_on(self.client.lease_revoke(lease))
            .map_err(|e| self.err("revoking the lease", e))?;
        Ok(())
    }
}
