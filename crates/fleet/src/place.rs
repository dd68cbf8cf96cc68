//! Placement and rebalancing (the rules are in the crate essay).

use std::collections::BTreeMap;

use crate::etcd::{Etcd, FleetError, Versioned};
use crate::model::{fit, PlacedTenant, Reservations, ServerRecord};
use crate::{reserved_key, server_key, PREFIX};

/// Compare-and-swap attempts before a placement gives up (each failure means another client
/// committed in between; 6 clients racing for 3 servers needed at most a handful).
pub const MAX_ATTEMPTS: usize = 64;

/// Where a tenant was placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub server: ServerRecord,
    /// The server's reserved share after placing, ppm of its rate.
    pub load_ppm: u64,
    /// Compare-and-swap attempts it took (1 = no race).
    pub attempts: usize,
}

/// What a rebalance did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RebalanceReport {
    /// (tenant, from server, to server)
    pub moved: Vec<(String, String, String)>,
    /// (tenant, from server, why it fits nowhere)
    pub unplaced: Vec<(String, String, String)>,
}

fn parse<T: serde::de::DeserializeOwned>(url: &str, kv: &Versioned) -> Result<T, FleetError> {
    serde_json::from_slice(&kv.value).map_err(|e| FleetError::Corrupt {
        url: url.into(),
        key: kv.key.clone(),
        message: e.to_string(),
    })
}

/// The live servers, by id.
pub fn servers(etcd: &mut Etcd) -> Result<BTreeMap<String, ServerRecord>, FleetError> {
    let url = etcd.url().to_string();
    etcd.list(&format!("{PREFIX}servers/"))?
        .iter()
        .map(|kv| parse::<ServerRecord>(&url, kv).map(|r| (r.id.clone(), r)))
        .collect()
}

/// Every server's reservations (live or not), by id, with the revision read.
pub fn reservations(etcd: &mut Etcd) -> Result<BTreeMap<String, (Reservations, i64)>, FleetError> {
    let url = etcd.url().to_string();
    let prefix = format!("{PREFIX}reserved/");
    etcd.list(&prefix)?
        .iter()
        .map(|kv| {
            let id = kv.key[prefix.len()..].to_string();
            parse::<Reservations>(&url, kv).map(|r| (id, (r, kv.mod_revision)))
        })
        .collect()
}

/// The live servers and every server's reservations, read in one range request (one
/// consistent revision of the registry, and one round trip instead of two).
pub fn snapshot(etcd: &mut Etcd) -> Result<Snapshot, FleetError> {
    let url = etcd.url().to_string();
    let servers_prefix = format!("{PREFIX}servers/");
    let reserved_prefix = format!("{PREFIX}reserved/");
    let mut snap = Snapshot::default();
    for kv in etcd.list(PREFIX)? {
        if kv.key.starts_with(&servers_prefix) {
            let r: ServerRecord = parse(&url, &kv)?;
            snap.servers.insert(r.id.clone(), r);
        } else if let Some(id) = kv.key.strip_prefix(&reserved_prefix) {
            let r: Reservations = parse(&url, &kv)?;
            snap.reserved.insert(id.to_string(), (r, kv.mod_revision));
        }
    }
    Ok(snap)
}

/// The registry at one revision.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub servers: BTreeMap<String, ServerRecord>,
    /// Reservations by server id, with the revision read.
    pub reserved: BTreeMap<String, (Reservations, i64)>,
}

/// Places `tenant` on the least-loaded live server that hosts its volume and where it fits,
/// skipping `exclude`; reserves it there by compare-and-swap. Refuses, with each server's
/// reason, when none fits.
pub fn place(
    etcd: &mut Etcd,
    tenant: &PlacedTenant,
    exclude: &[&str],
) -> Result<Placement, FleetError> {
    for attempt in 1..=MAX_ATTEMPTS {
        let Snapshot {
            servers: live,
            reserved,
        } = snapshot(etcd)?;
        if let Some((id, _)) = reserved
            .iter()
            .find(|(_, (r, _))| r.tenants.iter().any(|t| t.name == tenant.name))
        {
            return Err(FleetError::Refused(format!(
                "tenant `{}` is already placed on server {id}",
                tenant.name
            )));
        }
        let mut reasons = Vec::new();
        let mut best: Option<(u64, &ServerRecord)> = None;
        for (id, server) in &live {
            if exclude.contains(&id.as_str()) {
                continue;
            }
            if !server.volumes.contains(&tenant.volume) {
                reasons.push(format!("{id}: no volume `{}`", tenant.volume));
                continue;
            }
            let current = reserved
                .get(id)
                .map(|(r, _)| r.tenants.as_slice())
                .unwrap_or(&[]);
            match fit(&server.profile, current, &tenant.spec) {
                Ok(f) => {
                    let load = f.load_ppm();
                    if best.is_none_or(|(b, _)| load < b) {
                        best = Some((load, server));
                    }
                }
                Err(why) => reasons.push(format!("{id}: {why}")),
            }
        }
        let Some((load_ppm, server)) = best else {
            return Err(FleetError::Refused(if live.is_empty() {
                format!("no live server in registry {}", etcd.url())
            } else {
                format!(
                    "tenant `{}` fits on no server: {}",
                    tenant.name,
                    reasons.join("; ")
                )
            }));
        };
        let (mut list, revision) = reserved
            .get(&server.id)
            .cloned()
            .unwrap_or_else(|| (Reservations::default(), 0));
        list.tenants.push(tenant.clone());
        let value = serde_json::to_vec(&list).expect("reservations serialise");
        if etcd.compare_and_put(&reserved_key(&server.id), revision, value)? {
            return Ok(Placement {
                server: server.clone(),
                load_ppm,
                attempts: attempt,
            });
        }
    }
    Err(FleetError::Refused(format!(
        "tenant `{}`: {MAX_ATTEMPTS} compare-and-swap attempts all lost a race; the registry is too busy",
        tenant.name
    )))
}

/// Removes tenant `name` from server `id`'s reservations (compare-and-swap, retried).
pub fn release(etcd: &mut Etcd, id: &str, name: &str) -> Result<bool, FleetError> {
    let url = etcd.url().to_string();
    for _ in 0..MAX_ATTEMPTS {
        let Some(kv) = etcd.get(&reserved_key(id))? else {
            return Ok(false);
        };
        let mut list: Reservations = parse(&url, &kv)?;
        let before = list.tenants.len();
        list.tenants.retain(|t| t.name != name);
        if list.tenants.len() == before {
            return Ok(false);
        }
        let done = if list.tenants.is_empty() {
            etcd.compare_and_delete(&reserved_key(id), kv.mod_revision)?
        } else {
            let value = serde_json::to_vec(&list).expect("reservations serialise");
            etcd.compare_and_put(&reserved_key(id), kv.mod_revision, value)?
        };
        if done {
            return Ok(true);
        }
    }
    Err(FleetError::Refused(format!(
        "releasing `{name}` from {id}: every compare-and-swap lost a race"
    )))
}

/// Moves the tenants of servers whose lease expired to live servers where they fit.
pub fn rebalance(etcd: &mut Etcd) -> Result<RebalanceReport, FleetError> {
    let live = servers(etcd)?;
    let mut report = RebalanceReport::default();
    for (id, (list, _)) in reservations(etcd)? {
        if live.contains_key(&id) {
            continue;
        }
        let mut tenants = list.tenants.clone();
        // Largest reservation first: the hardest to fit get the most room.
        tenants.sort_by_key(|t| std::cmp::Reverse(cost_key(t)));
        for t in tenants {
            // Take it off the dead server first, so `place` does not see it as placed.
            release(etcd, &id, &t.name)?;
            match place(etcd, &t, &[id.as_str()]) {
                Ok(p) => report.moved.push((t.name.clone(), id.clone(), p.server.id)),
                Err(FleetError::Refused(why)) => {
                    // Put it back where it was, so it is not lost from the registry.
                    restore(etcd, &id, &t)?;
                    report.unplaced.push((t.name.clone(), id.clone(), why));
                }
                Err(e) => {
                    restore(etcd, &id, &t)?;
                    return Err(e);
                }
            }
        }
    }
    Ok(report)
}

/// A sort key for "largest first": IOPS × (100 + write %), a proxy for the token reservation
/// that does not need the (dead) server's profile.
fn cost_key(t: &PlacedTenant) -> u64 {
    match t.spec {
        qos::TenantSpec::LatencyCritical(slo) => {
            slo.iops * (200 - u64::from(slo.read_pct.min(100)))
        }
        qos::TenantSpec::BestEffort(_) => 0,
    }
}

fn restore(etcd: &mut Etcd, id: &str, t: &PlacedTenant) -> Result<(), FleetError> {
    let url = etcd.url().to_string();
    for _ in 0..MAX_ATTEMPTS {
        let (mut list, rev) = match etcd.get(&reserved_key(id))? {
            Some(kv) => (parse::<Reservations>(&url, &kv)?, kv.mod_revision),
            None => (Reservations::default(), 0),
        };
        list.tenants.push(t.clone());
        let value = serde_json::to_vec(&list).expect("reservations serialise");
        if etcd.compare_and_put(&reserved_key(id), rev, value)? {
            return Ok(());
        }
    }
    Err(FleetError::Refused(format!(
        "putting `{}` back on {id}: every compare-and-swap lost a race",
        t.name
    )))
}

/// The server a client should connect to for `volume`: the one holding tenant `name`'s
/// reservation if any, else the least-loaded live server hosting the volume.
pub fn resolve(
    etcd: &mut Etcd,
    volume: &str,
    name: Option<&str>,
) -> Result<ServerRecord, FleetError> {
    let live = servers(etcd)?;
    let reserved = reservations(etcd)?;
    if let Some(name) = name {
        for (id, (list, _)) in &reserved {
            if list
                .tenants
                .iter()
                .any(|t| t.name == name && t.volume == volume)
            {
                return live.get(id).cloned().ok_or_else(|| {
                    FleetError::Refused(format!(
                        "tenant `{name}` is placed on server {id}, whose lease expired: run `ullstack place --rebalance`"
                    ))
                });
            }
        }
    }
    live.into_values()
        .filter(|s| s.volumes.iter().any(|v| v == volume))
        .min_by_key(|s| {
            let tenants = reserved
                .get(&s.id)
                .map(|(r, _)| r.tenants.as_slice())
                .unwrap_or(&[]);
            crate::model::load(&s.profile, tenants).map_or(u64::MAX, |f| f.load_ppm())
        })
        .ok_or_else(|| FleetError::Refused(format!("no live server hosts volume `{volume}`")))
}

/// `servers/<id>` exists (the server is live).
pub fn is_live(etcd: &mut Etcd, id: &str) -> Result<bool, FleetError> {
    Ok(etcd.get(&server_key(id))?.is_some())
}

/// Creates server `id`'s reservations with `tenants` if it has none yet (a restarted server
/// keeps what placement gave it).
pub fn seed(etcd: &mut Etcd, id: &str, tenants: &[PlacedTenant]) -> Result<(), FleetError> {
    let value = serde_json::to_vec(&Reservations {
        tenants: tenants.to_vec(),
    })
    .expect("reservations serialise");
    etcd.compare_and_put(&reserved_key(id), 0, value)?;
    Ok(())
}
