//! A server joining the fleet (`ullstack serve --registry URL`): what it tells the registry
//! about itself, and the order in which it does so.
//!
//! A [`Member`] is what placement needs to know of a server: its volumes and NBD exports,
//! its device profile (the token rate reservations are priced against), whether it requires
//! TLS, and the latency-critical tenants its own config already serves, which become its first
//! reservations. [`Member::join`] writes those reservations (`reserved/<id>`, only if the key
//! is new: a restarted server keeps what placement put there meanwhile) and then announces the
//! server's record under a lease ([`crate::announce`]), so that no client is placed on a server
//! whose own tenants are not yet counted.
//!
//! The id is the configured one, else the own-protocol address, else the NBD address
//! ([`member_id`]): `10.0.0.5:10810` for a server listening there with no `[registry] id`.

use std::net::SocketAddr;

use crate::announce::{announce, Announcement};
use crate::etcd::{Etcd, FleetError};
use crate::model::{NbdExport, PlacedTenant, ServerRecord};
use crate::place::seed;

/// What the fleet knows of one server.
#[derive(Clone, Debug)]
pub struct Member {
    pub volumes: Vec<String>,
    pub profile: qos::DeviceProfile,
    /// The tenants with an SLO in the server's own config: its first reservations.
    pub lc_tenants: Vec<PlacedTenant>,
    pub exports: Vec<NbdExport>,
    pub tls: bool,
}

/// The id a server joins under: `configured`, else its own-protocol address, else its NBD
/// address; an error when it has neither listener.
pub fn member_id(
    configured: Option<&str>,
    native: Option<SocketAddr>,
    nbd: Option<SocketAddr>,
) -> Result<String, FleetError> {
    match (configured, native, nbd) {
        (Some(id), _, _) => Ok(id.to_string()),
        (None, Some(a), _) | (None, None, Some(a)) => Ok(a.to_string()),
        (None, None, None) => Err(FleetError::Refused(
            "--registry: the server has no listener to announce".into(),
        )),
    }
}

impl Member {
    /// Seeds this server's reservations in the registry at `url`, then announces it as `id`
    /// with its listeners under a lease of `ttl_s` seconds.
    pub fn join(
        self,
        url: &str,
        id: &str,
        native: Option<SocketAddr>,
        nbd: Option<SocketAddr>,
        ttl_s: i64,
    ) -> Result<Announcement, FleetError> {
        let record = ServerRecord {
            id: id.to_string(),
            native: native.map(|a| a.to_string()),
            nbd: nbd.map(|a| a.to_string()),
            volumes: self.volumes,
            profile: self.profile,
            exports: self.exports,
            tls: self.tls,
        };
        let mut etcd = Etcd::connect(url)?;
        seed(&mut etcd, id, &self.lc_tenants)?;
        announce(url, record, ttl_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_configured_one_else_the_native_else_the_nbd_address() {
        let native: SocketAddr = "10.0.0.5:10810".parse().unwrap();
        let nbd: SocketAddr = "10.0.0.5:10809".parse().unwrap();
        assert_eq!(member_id(Some("a"), Some(native), Some(nbd)).unwrap(), "a");
        assert_eq!(
            member_id(None, Some(native), Some(nbd)).unwrap(),
            "10.0.0.5:10810"
        );
        assert_eq!(member_id(None, None, Some(nbd)).unwrap(), "10.0.0.5:10809");
        assert_eq!(
            member_id(None, None, None).unwrap_err().to_string(),
            "--registry: the server has no listener to announce"
        );
    }
}
