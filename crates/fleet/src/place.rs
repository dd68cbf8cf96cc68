//! Placement and rebalancing (the rules are in the crate essay).

use std::collections::BTreeMap;

use crate::etcd::{CasWrite, Etcd, FleetError, Versioned};
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
    /// (tenant, from server): gone from the dead server before this rebalance moved it
    /// (another rebalance took it, it was released, or the server rejoined).
    pub taken: Vec<(String, String)>,
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

/// The server `tenant` goes to in `snap`: among the live servers (minus `exclude`) that host its
/// volume and where it fits, the least loaded after placing it (ties: the smaller id, the map's
/// order), with that load in ppm. Else the reason, naming each server's.
fn choose<'a>(
    snap: &'a Snapshot,
    tenant: &PlacedTenant,
    exclude: &[&str],
    url: &str,
) -> Result<(u64, &'a ServerRecord), String> {
    let mut reasons = Vec::new();
    let mut best: Option<(u64, &ServerRecord)> = None;
    for (id, server) in &snap.servers {
        if exclude.contains(&id.as_str()) {
            continue;
        }
        if !server.volumes.contains(&tenant.volume) {
            reasons.push(format!("{id}: no volume `{}`", tenant.volume));
            continue;
        }
        let current = snap
            .reserved
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
    best.ok_or_else(|| {
        if reasons.is_empty() {
            format!("no live server in registry {url}")
        } else {
            format!(
                "tenant `{}` fits on no server: {}",
                tenant.name,
                reasons.join("; ")
            )
        }
    })
}

/// `list` with `tenant` added, and the write that puts it at server `id`'s key read at
/// revision `revision` (0: no key yet).
fn with_tenant(list: Option<&(Reservations, i64)>, id: &str, tenant: &PlacedTenant) -> CasWrite {
    let (mut list, revision) = list
        .cloned()
        .unwrap_or_else(|| (Reservations::default(), 0));
    list.tenants.push(tenant.clone());
    CasWrite {
        key: reserved_key(id),
        expected: revision,
        value: Some(serde_json::to_vec(&list).expect("reservations serialise")),
    }
}

/// Places `tenant` on the least-loaded live server that hosts its volume and where it fits,
/// skipping `exclude`; reserves it there by compare-and-swap. Refuses, with each server's
/// reason, when none fits.
pub fn place(
    etcd: &mut Etcd,
    tenant: &PlacedTenant,
    exclude: &[&str],
) -> Result<Placement, FleetError> {
    let url = etcd.url().to_string();
    for attempt in 1..=MAX_ATTEMPTS {
        let snap = snapshot(etcd)?;
        if let Some((id, _)) = snap
            .reserved
            .iter()
            .find(|(_, (r, _))| r.tenants.iter().any(|t| t.name == tenant.name))
        {
            return Err(FleetError::Refused(format!(
                "tenant `{}` is already placed on server {id}",
                tenant.name
            )));
        }
        let (load_ppm, server) =
            choose(&snap, tenant, exclude, &url).map_err(FleetError::Refused)?;
        let write = with_tenant(snap.reserved.get(&server.id), &server.id, tenant);
        if etcd.compare_and_swap_all(&[write])? {
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
///
/// Each move is **one** transaction that removes the tenant from the dead server's list and
/// adds it to the chosen server's, compared on both keys' revisions: a crash between the two
/// halves cannot lose or duplicate a tenant, and of two rebalancers racing for one tenant
/// exactly one commits; the other re-reads, finds the tenant gone from the dead server and
/// skips it (reported in [`RebalanceReport::taken`]). A dead server that rejoined in the
/// meantime keeps its tenants.
pub fn rebalance(etcd: &mut Etcd) -> Result<RebalanceReport, FleetError> {
    let snap = snapshot(etcd)?;
    let mut report = RebalanceReport::default();
    for (id, (list, _)) in &snap.reserved {
        if snap.servers.contains_key(id) {
            continue;
        }
        let mut tenants = list.tenants.clone();
        // Largest reservation first: the hardest to fit get the most room.
        tenants.sort_by_key(|t| std::cmp::Reverse(cost_key(t)));
        for t in tenants {
            match move_tenant(etcd, id, &t.name)? {
                Moved::To(to) => report.moved.push((t.name.clone(), id.clone(), to)),
                Moved::Nowhere(why) => report.unplaced.push((t.name.clone(), id.clone(), why)),
                Moved::Taken => report.taken.push((t.name.clone(), id.clone())),
            }
        }
    }
    Ok(report)
}

/// What became of one tenant of a dead server.
enum Moved {
    To(String),
    Nowhere(String),
    /// No longer on the dead server (another rebalancer moved it, or it was released), or
    /// the server rejoined the fleet.
    Taken,
}

/// Moves tenant `name` off dead server `from` in one transaction (see [`rebalance`]).
fn move_tenant(etcd: &mut Etcd, from: &str, name: &str) -> Result<Moved, FleetError> {
    let url = etcd.url().to_string();
    for _ in 0..MAX_ATTEMPTS {
        let snap = snapshot(etcd)?;
        if snap.servers.contains_key(from) {
            return Ok(Moved::Taken);
        }
        let Some((list, from_revision)) = snap.reserved.get(from) else {
            return Ok(Moved::Taken);
        };
        let Some(tenant) = list.tenants.iter().find(|t| t.name == name) else {
            return Ok(Moved::Taken);
        };
        let server = match choose(&snap, tenant, &[from], &url) {
            Ok((_, server)) => server,
            Err(why) => return Ok(Moved::Nowhere(why)),
        };
        let mut rest = list.clone();
        rest.tenants.retain(|t| t.name != name);
        let off = CasWrite {
            key: reserved_key(from),
            expected: *from_revision,
            value: (!rest.tenants.is_empty())
                .then(|| serde_json::to_vec(&rest).expect("reservations serialise")),
        };
        let on = with_tenant(snap.reserved.get(&server.id), &server.id, tenant);
        if etcd.compare_and_swap_all(&[off, on])? {
            return Ok(Moved::To(server.id.clone()));
        }
    }
    Err(FleetError::Refused(format!(
        "moving `{name}` off {from}: {MAX_ATTEMPTS} compare-and-swap attempts all lost a race"
    )))
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

/// The server a client should connect to for `volume`: the one holding tenant `name`'s
/// reservation if any, else the least-loaded live server hosting the volume.
pub fn resolve(
    etcd: &mut Etcd,
    volume: &str,
    name: Option<&str>,
) -> Result<ServerRecord, FleetError> {
    let Snapshot {
        servers: live,
        reserved,
    } = snapshot(etcd)?;
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
