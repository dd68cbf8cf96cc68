//! Connecting by volume name through a fleet's etcd registry (crate `fleet`).
//!
//! A fleet of `ullstack serve --registry URL` servers announces each server's addresses and
//! volumes in etcd, and `ullstack place` reserves each tenant on one server. A client then
//! needs only the registry's URL and its credentials (tenant, secret, volume):
//! [`Client::connect_via_registry`] asks the registry which server to use — the one holding
//! the tenant's reservation, else the least-loaded live server hosting the volume
//! (`fleet::place::resolve`) — and connects there, over TLS when the server announced TLS.
//!
//! ```no_run
//! # async fn demo() -> Result<(), client::ClientError> {
//! use client::{Client, Credentials};
//! let creds = Credentials { tenant: "alice".into(), secret: "s3cret-key".into(), volume: "fast".into() };
//! let c = Client::connect_via_registry("http://10.0.0.5:2379", &creds, None).await?;
//! # let _ = c; Ok(()) }
//! ```
//!
//! NBD clients (`nbdinfo`, qemu, fio's nbd engine) cannot ask etcd themselves: `ullstack place
//! --registry URL --lookup VOLUME` prints the URI to give them ([`locate`] and
//! `fleet::ServerRecord::nbd_uris`).
//!
//! The etcd calls are blocking (crate `fleet` keeps its own small runtime), so the async
//! constructor runs them on a thread of their own and awaits the answer: it never blocks the
//! caller's runtime.

use crate::{Client, ClientError, ClientTls, Credentials};

/// Where a volume is served, as the registry says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The server's id in the fleet.
    pub server: String,
    /// Its own-protocol address (`host:port`), if it serves the own protocol.
    pub native: Option<String>,
    /// NBD URIs serving the volume (`nbd://host:port/export`, `nbds://` under TLS).
    pub nbd_uris: Vec<String>,
    /// Whether the server requires TLS.
    pub tls: bool,
}

/// Asks the registry at `registry` (`http://HOST:PORT`) where `volume` is served for tenant
/// `tenant` (its reservation's server), or for anyone (the least-loaded live server with the
/// volume) when `tenant` is `None`. Blocking: a few etcd round trips.
pub fn locate(registry: &str, volume: &str, tenant: Option<&str>) -> Result<Located, ClientError> {
    let err = |e: fleet::FleetError| ClientError::Registry(e.to_string());
    let mut etcd = fleet::Etcd::connect(registry).map_err(err)?;
    let s = fleet::place::resolve(&mut etcd, volume, tenant).map_err(err)?;
    Ok(Located {
        nbd_uris: s.nbd_uris(volume),
        server: s.id,
        native: s.native,
        tls: s.tls,
    })
}

/// The one server a bench run's `tenants` resolve to through the registry at `url` (each
/// tenant's reservation's server, else the least-loaded live server with its volume): its id
/// and own-protocol address. A bench drives one server, so tenants resolving to different
/// servers are an error, as is a server without the own protocol. Blocking.
pub fn resolve_bench_server(
    url: &str,
    tenants: &[crate::bench::TenantSpec],
) -> Result<(String, String), Box<dyn std::error::Error + Send + Sync>> {
    let mut etcd = fleet::Etcd::connect(url)?;
    let mut chosen: Option<(String, String)> = None;
    for t in tenants {
        let s = fleet::place::resolve(&mut etcd, &t.volume, Some(&t.name))?;
        let addr = s.native.clone().ok_or_else(|| {
            format!(
                "server {} (from {url}) does not serve the own protocol",
                s.id
            )
        })?;
        match &chosen {
            None => chosen = Some((s.id, addr)),
            Some((id, _)) if *id == s.id => {}
            Some((id, _)) => {
                return Err(format!(
                    "tenant `{}` resolves to server {} but an earlier tenant to {id}: bench drives one server; run one bench per server",
                    t.name,
                    s.id
                )
                .into())
            }
        }
    }
    Ok(chosen.ok_or("no tenants to resolve")?)
}

impl Client {
    /// Connects to the server the fleet registry at `registry` names for `credentials` (the
    /// one holding the tenant's reservation for the volume, else the least-loaded live server
    /// with the volume), then authenticates with HELLO as [`Client::connect`] does. A server
    /// that announced TLS needs `tls`; one without TLS ignores it.
    ///
    /// Errors: [`ClientError::Registry`] when the registry cannot be reached or names no
    /// server (the message says why: no live server with the volume, the reservation's
    /// server is dead), or when the server serves no own protocol or needs TLS and `tls` is
    /// `None`; else those of [`Client::connect`] / [`Client::connect_tls`].
    pub async fn connect_via_registry(
        registry: &str,
        credentials: &Credentials,
        tls: Option<&ClientTls>,
    ) -> Result<Client, ClientError> {
        let (url, volume, tenant) = (
            registry.to_string(),
            credentials.volume.clone(),
            credentials.tenant.clone(),
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("registry-lookup".into())
            .spawn(move || {
                let _ = tx.send(locate(&url, &volume, Some(&tenant)));
            })
            .map_err(|e| ClientError::Registry(format!("starting the lookup thread: {e}")))?;
        let at = rx
            .await
            .map_err(|_| ClientError::Registry("the registry lookup thread stopped".into()))??;
        let addr = at.native.ok_or_else(|| {
            ClientError::Registry(format!(
                "server {} (from {registry}) serves volume `{}` over NBD only: {}",
                at.server,
                credentials.volume,
                at.nbd_uris.join(", ")
            ))
        })?;
        match (at.tls, tls) {
            (true, Some(t)) => Client::connect_tls(&addr, credentials, t).await,
            (true, None) => Err(ClientError::Registry(format!(
                "server {} at {addr} (from {registry}) requires TLS: pass a ClientTls",
                at.server
            ))),
            (false, _) => Client::connect(addr.as_str(), credentials).await,
        }
    }
}
