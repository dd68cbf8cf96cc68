//! `ullstack place`: tenant placement on a fleet of servers through their etcd registry. The
//! work, and the lines it prints, are in crate `fleet` (`place`, `show`).

use std::io::Write;
use std::time::Instant;

use anyhow::{anyhow, bail};
use client::bench::spec::parse_tenant;
use fleet::{Etcd, PlacedTenant};

/// Place latency-critical tenants on a fleet of `ullstack serve --registry URL` servers
///
///   ullstack place --registry http://127.0.0.1:2379 --tenant name=alice,class=lc,iops=20000,p95=500us,read=90
///       picks the least-loaded live server that hosts the volume and can honour the SLO next
///       to the tenants already placed there (the server's own admission rule), reserves it
///       there by an etcd compare-and-swap, and prints where to connect; a tenant that fits
///       nowhere is refused with each server's reason (the others given are still placed)
///   ullstack place --registry URL --list           live servers, their load and tenants
///   ullstack place --registry URL --lookup fast [--name alice]
///                                                  where volume `fast` is served (for alice:
///                                                  her reservation's server): the own-protocol
///                                                  address and the NBD URIs, for nbdinfo/qemu/fio
///   ullstack place --registry URL --rebalance      re-place the tenants of servers whose lease
///                                                  expired; says which fit nowhere
///   ullstack place --registry URL --release alice  give a tenant's reservation back
///
/// Least-loaded: among the servers where the tenant fits, the one whose reserved share of its
/// device rate is lowest after adding it (worst fit; ties to the smaller id).
/// The tenant keys are `ullstack bench`'s (name, volume, class, iops, p95, read, size, count),
/// so the same spec then drives the load: ullstack bench --registry URL --tenant SPEC (or the
/// client library's Client::connect_via_registry).
#[derive(clap::Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct PlaceArgs {
    /// The etcd registry, http://HOST:PORT.
    #[arg(long, value_name = "URL")]
    registry: String,
    /// A tenant to place (bench's key=value syntax; `count=N` places N of them). Repeatable:
    /// placed one after the other.
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["rebalance", "list", "release", "lookup"])]
    tenant: Vec<String>,
    /// Re-place the tenants of servers that left the fleet.
    #[arg(long, conflicts_with_all = ["list", "release", "lookup"])]
    rebalance: bool,
    /// List live servers, their reserved load and tenants.
    #[arg(long, conflicts_with_all = ["release", "lookup"])]
    list: bool,
    /// Where VOLUME is served: server, own-protocol address and NBD URIs (`nbd LINE` per URI).
    #[arg(long, value_name = "VOLUME", conflicts_with = "release")]
    lookup: Option<String>,
    /// With --lookup: the tenant whose reservation decides the server (default: the
    /// least-loaded live server with the volume).
    #[arg(long, value_name = "TENANT", requires = "lookup")]
    name: Option<String>,
    /// Remove tenant NAME's reservation.
    #[arg(long, value_name = "NAME")]
    release: Option<String>,
}

/// Prints a line to stdout; a reader that went away (`place --list | head -1`) ends the
/// command quietly instead of panicking, as a Unix filter ends on SIGPIPE.
macro_rules! say {
    ($($arg:tt)*) => {
        say_line(format_args!($($arg)*))
    };
}

fn say_line(line: std::fmt::Arguments) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(1);
    }
}

pub fn run(args: PlaceArgs) -> anyhow::Result<()> {
    let mut etcd = Etcd::connect(&args.registry)?;
    if !args.tenant.is_empty() {
        let (mut placed, mut refused) = (0, Vec::new());
        for spec in &args.tenant {
            place(&mut etcd, spec, &mut placed, &mut refused)?;
        }
        if !refused.is_empty() {
            bail!(
                "{} of {} tenants could not be placed: {}",
                refused.len(),
                placed + refused.len(),
                refused.join(", ")
            );
        }
        return Ok(());
    }
    if args.rebalance {
        let r = fleet::rebalance(&mut etcd)?;
        for (t, from, to) in &r.moved {
            say!("moved {t}: {from} -> {to}");
        }
        for (t, from, why) in &r.unplaced {
            say!("could not place {t} (was on {from}): {why}");
        }
        for (t, from) in &r.taken {
            say!("skipped {t} (was on {from}): no longer there, another rebalance or a release took it");
        }
        say!(
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
                say!("released {name} from {id}");
                return Ok(());
            }
        }
        bail!("tenant `{name}` is not placed on any server");
    }
    if let Some(volume) = &args.lookup {
        fleet::show::lookup(&mut etcd, volume, args.name.as_deref(), |l| say!("{l}"))?;
        return Ok(());
    }
    if args.list {
        fleet::show::list(&mut etcd, |l| say!("{l}"))?;
        return Ok(());
    }
    bail!(
        "nothing to do: give --tenant SPEC, --rebalance, --list, --lookup VOLUME or --release NAME"
    )
}

/// Places every tenant of `spec`: prints `placed …` or `refused NAME: why` per tenant, counting
/// into `placed` and `refused`; errors only when the registry itself fails.
fn place(
    etcd: &mut Etcd,
    spec: &str,
    placed_count: &mut usize,
    refused: &mut Vec<String>,
) -> anyhow::Result<()> {
    let tenants = parse_tenant(spec).map_err(|e| anyhow!(e))?;
    for t in tenants {
        let spec @ qos::TenantSpec::LatencyCritical(_) = t.class else {
            bail!(
                "tenant `{}` is best-effort: placement reserves SLOs, so give class=lc with iops and p95",
                t.name
            );
        };
        let placed = PlacedTenant {
            name: t.name.clone(),
            volume: t.volume.clone(),
            spec,
        };
        let started = Instant::now();
        let p = match fleet::place(etcd, &placed, &[]) {
            Ok(p) => p,
            Err(fleet::FleetError::Refused(why)) => {
                say!("refused {}: {why}", t.name);
                refused.push(t.name.clone());
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let took = started.elapsed();
        *placed_count += 1;
        say!("{}", fleet::show::placed(&t.name, &t.volume, &p, took));
    }
    Ok(())
}
