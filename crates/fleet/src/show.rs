//! The fleet as `ullstack place` shows it: one line a fact, for a terminal or a script.
//!
//! - [`list`]: a line per live server, `ID: 12.5 % of 1000000 tokens/s reserved, volumes V,
//!   tenants [a, b]` (the reserved share from [`crate::model::load`]), then a line per server
//!   whose lease expired but whose reservations remain (`ID: NOT LIVE (lease expired), 2
//!   tenant(s) to rebalance`).
//! - [`lookup`]: where a volume is served, `volume V: server ID (why)`, then `native ADDR` and
//!   one `nbd URI` line each, what a script greps for.
//! - [`placed`]: a placement's line: server, reserved share after, time and attempts, and where
//!   to connect.
//!
//! Each takes a `say` callback and hands it the lines as they are known, so a reader sees the
//! first servers before a slow or failing registry call for a later one.

use std::time::Duration;

use crate::etcd::{Etcd, FleetError};
use crate::place::{reservations, resolve, servers, Placement};

/// `place --list`: live servers, their reserved load and tenants; then servers that left the
/// fleet with tenants still reserved on them.
pub fn list(etcd: &mut Etcd, mut say: impl FnMut(String)) -> Result<(), FleetError> {
    let servers = servers(etcd)?;
    let reserved = reservations(etcd)?;
    for (id, s) in &servers {
        let tenants = reserved
            .get(id)
            .map(|(r, _)| r.tenants.clone())
            .unwrap_or_default();
        let load = crate::model::load(&s.profile, &tenants).map_err(FleetError::Model)?;
        let names: Vec<&str> = tenants.iter().map(|t| t.name.as_str()).collect();
        say(format!(
            "{id}: {:.1} % of {} tokens/s reserved, volumes {}, tenants [{}]",
            load.load_ppm() as f64 / 10_000.0,
            load.rate_mtok_per_sec / 1000,
            s.volumes.join(","),
            names.join(", ")
        ));
    }
    for (id, (r, _)) in &reserved {
        if !servers.contains_key(id) {
            say(format!(
                "{id}: NOT LIVE (lease expired), {} tenant(s) to rebalance",
                r.tenants.len()
            ));
        }
    }
    Ok(())
}

/// `place --lookup VOLUME [--name TENANT]`: `volume V: server ID …`, then `native ADDR` and one
/// `nbd URI` line each.
pub fn lookup(
    etcd: &mut Etcd,
    volume: &str,
    name: Option<&str>,
    mut say: impl FnMut(String),
) -> Result<(), FleetError> {
    let s = resolve(etcd, volume, name)?;
    let why = match name {
        Some(n) => format!("{n}'s reservation, or the least-loaded with it"),
        None => "the least-loaded live server with it".to_string(),
    };
    say(format!(
        "volume {volume}: server {} ({why}){}",
        s.id,
        if s.tls { ", TLS required" } else { "" }
    ));
    if let Some(native) = &s.native {
        say(format!("native {native}"));
    }
    for uri in s.nbd_uris(volume) {
        say(format!("nbd {uri}"));
    }
    Ok(())
}

/// The line for tenant `name` (of `volume`) placed as `p`, `took` after the placement started.
pub fn placed(name: &str, volume: &str, p: &Placement, took: Duration) -> String {
    let at = |a: &Option<String>| a.clone().unwrap_or_else(|| "-".into());
    format!(
        "placed {} on {} ({:.1} % reserved after; {:.2} ms, {} attempt{}): own protocol {}, NBD {}",
        name,
        p.server.id,
        p.load_ppm as f64 / 10_000.0,
        took.as_secs_f64() * 1e3,
        p.attempts,
        if p.attempts == 1 { "" } else { "s" },
        at(&p.server.native),
        match p.server.nbd_uris(volume).as_slice() {
            [] => at(&p.server.nbd),
            uris => uris.join(" "),
        },
    )
}
