//! `ullstack place`: tenant placement on a fleet of servers through their etcd registry. The
//! work is in crate `fleet`.

use std::time::Instant;

use anyhow::{anyhow, bail};
use client::bench::spec::{parse_tenant, ClassSpec};
use fleet::{Etcd, PlacedTenant};

/// Place latency-critical tenants on a fleet of `ullstack serve --registry URL` servers.
///
///   ullstack place --registry http://127.0.0.1:2379 --tenant name=alice,class=lc,iops=20000,p95=500us,read=90
///       picks the least-loaded live server that hosts the volume and can honour the SLO next
///       to the tenants already placed there (the server's own admission rule), reserves it
///       there by an etcd compare-and-swap, and prints where to connect
///   ullstack place --registry URL --list           live servers, their load and tenants
///   ullstack place --registry URL --rebalance      re-place the tenants of servers whose lease
///                                                  expired; says which fit nowhere
///   ullstack place --registry URL --release alice  give a tenant's reservation back
///
/// The tenant keys are `ullstack bench`'s (name, volume, class, iops, p95, read, size, count),
/// so the same spec then drives the load: ullstack bench --server ADDR --tenant SPEC.
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct PlaceArgs {
    /// The etcd registry, http://HOST:PORT.
    #[arg(long, value_name = "URL")]
    registry: String,
    /// A tenant to place (bench's key=value syntax; `count=N` places N of them). Repeatable:
    /// placed one after the other.
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["rebalance", "list", "release"])]
    tenant: Vec<String>,
    /// Re-place the tenants of servers that left the fleet.
    #[arg(long, conflicts_with_all = ["list", "release"])]
    rebalance: bool,
    /// List live servers, their reserved load and tenants.
    #[arg(long, conflicts_with = "release")]
    list: bool,
    /// Remove tenant NAME's reservation.
    #[arg(long, value_name = "NAME")]
    release: Option<String>,
}

pub fn run(args: PlaceArgs) -> anyhow::Result<()> {
    let mut etcd = Etcd::connect(&args.registry)?;
    if !args.tenant.is_empty() {
        for spec in &args.tenant {
            place(&mut etcd, spec)?;
        }
        return Ok(());
    }
    if args.rebalance {
        let r = fleet::rebalance(&mut etcd)?;
        for (t, from, to) in &r.moved {
            println!("moved {t}: {from} -> {to}");
        }
        for (t, from, why) in &r.unplaced {
            println!("could not place {t} (was on {from}): {why}");
        }
        println!(
            "rebalanced: {} moved, {} could not be placed",
            r.moved.len(),
            r.unplaced.len()
        );
        return Ok(());
    }
    if let Some(name) = &args.release {
        let servers = fleet::place::reservations(&mut etcd)?;
        for id in servers.keys() {
            if fleet::place::release(&mut etcd, id, name)? {
                println!("released {name} from {id}");
                return Ok(());
            }
        }
        bail!("tenant `{name}` is not placed on any server");
    }
    if args.list {
        return list(&mut etcd);
    }
    bail!("nothing to do: give --tenant SPEC, --rebalance, --list or --release NAME")
}

fn place(etcd: &mut Etcd, spec: &str) -> anyhow::Result<()> {
    let tenants = parse_tenant(spec).map_err(|e| anyhow!(e))?;
    for t in tenants {
        let ClassSpec::LatencyCritical {
            p95_read_latency_ns,
            iops,
        } = t.class
        else {
            bail!(
                "tenant `{}` is best-effort: placement reserves SLOs, so give class=lc with iops and p95",
                t.name
            );
        };
        let placed = PlacedTenant {
            name: t.name.clone(),
            volume: t.volume.clone(),
            spec: qos::TenantSpec::LatencyCritical(qos::LcSlo {
                p95_read_latency_ns,
                iops,
                read_pct: t.read_pct,
                request_bytes: u64::from(t.size_bytes),
            }),
        };
        let started = Instant::now();
        let p = fleet::place(etcd, &placed, &[])?;
        let took = started.elapsed();
        let at = |a: &Option<String>| a.clone().unwrap_or_else(|| "-".into());
        println!(
            "placed {} on {} ({:.1} % reserved after; {:.2} ms, {} attempt{}): own protocol {}, NBD {}",
            t.name,
            p.server.id,
            p.load_ppm as f64 / 10_000.0,
            took.as_secs_f64() * 1e3,
            p.attempts,
            if p.attempts == 1 { "" } else { "s" },
            at(&p.server.native),
            at(&p.server.nbd),
        );
    }
    Ok(())
}

fn list(etcd: &mut Etcd) -> anyhow::Result<()> {
    let servers = fleet::place::servers(etcd)?;
    let reserved = fleet::place::reservations(etcd)?;
    for (id, s) in &servers {
        let tenants = reserved
            .get(id)
            .map(|(r, _)| r.tenants.clone())
            .unwrap_or_default();
        let load = fleet::model::load(&s.profile, &tenants).map_err(|e| anyhow!(e))?;
        let names: Vec<&str> = tenants.iter().map(|t| t.name.as_str()).collect();
        println!(
            "{id}: {:.1} % of {} tokens/s reserved, volumes {}, tenants [{}]",
            load.load_ppm() as f64 / 10_000.0,
            load.rate_mtok_per_sec / 1000,
            s.volumes.join(","),
            names.join(", ")
        );
    }
    for (id, (r, _)) in &reserved {
        if !servers.contains_key(id) {
            println!(
                "{id}: NOT LIVE (lease expired), {} tenant(s) to rebalance",
                r.tenants.len()
            );
        }
    }
    Ok(())
}
