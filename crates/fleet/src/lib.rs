//! A fleet of ullstack servers with one placement authority: etcd (ReFlex's global control
//! plane, which the published work left as future work).
//!
//! # What lives in etcd
//! Everything is under [`PREFIX`] (`/ullstack/v1/`), values are JSON:
//!
//! * `servers/<id>` — a [`ServerRecord`]: where the server listens, its volumes and its device
//!   profile (the cost model and the latency → token-rate table). Written under a **lease** the
//!   server keeps alive (`announce`); if the server dies the lease expires after its TTL and the
//!   key disappears, so placement stops choosing it.
//! * `reserved/<id>` — a [`Reservations`]: the tenants placed on that server with their SLOs.
//!   Not under the lease: a dead server's reservations outlive it, so `rebalance` knows whom
//!   to move.
//!
//! # Reservations change by compare-and-swap
//! A placement reads `reserved/<id>` with its `mod_revision`, checks the newcomer fits, and
//! writes the new list in a transaction that succeeds only if the key's `mod_revision` is still
//! the one read (or, for a server with no reservations yet, the key still does not exist). Two
//! clients racing for the last capacity of one server both read revision r; the first commit
//! moves it to r' and the second's compare fails, so it re-reads, finds the server full and
//! goes elsewhere. No server is ever promised more than its capacity, whatever the
//! interleaving (`crates/cli/tests/fleet.rs` has 6 concurrent clients race 42 tenants for a
//! fleet's 36 places and checks that exactly 36 are admitted, every server full and none over).
//!
//! # Whether a tenant fits: the server's own admission rule
//! "Fits" is decided by the same code the server runs at REGISTER: a [`qos::Registry`] built
//! from the server's profile, with every reserved tenant registered in order, then
//! [`qos::Registry::check`] for the newcomer. So the device rate is the profile's rate at the
//! strictest p95 among the tenants, a mixed load re-prices read-only reservations, and a target
//! tighter than the profile's table is refused — exactly as the server would refuse it.
//!
//! # Placement: least loaded that fits
//! Among the live servers that host the tenant's volume and where it fits, the one whose
//! reserved share *after* adding the tenant (Σ LC reservations / device rate, both as the
//! registry computes them with the newcomer) is lowest; ties go to the smaller server id. This
//! spreads load so each server keeps headroom for bursts and later tenants, the usual choice
//! for bin packing with unknown future arrivals (worst fit). Worked example: servers s1 (4 of
//! 12 K tokens/s reserved) and s2 (8 of 12 K); a 1 K tenant makes s1 5/12 = 42 % and s2
//! 9/12 = 75 %, so it goes to s1.
//!
//! # Rebalancing
//! `rebalance` finds `reserved/<id>` keys whose `servers/<id>` is gone (the lease expired) and
//! places each of their tenants elsewhere by the rule above (largest reservation first, so the
//! hardest to fit get the most room). Each move is one transaction over two keys: the dead
//! server's list without the tenant and the new server's list with it, compared on both keys'
//! revisions. So a rebalancer that crashes mid-way leaves every tenant listed exactly once, and
//! of two rebalancers racing for a tenant one commits and the other, re-reading, finds it gone
//! and skips it. Tenants that fit nowhere stay listed on the dead server and are reported.
//!
//! # Connecting by volume
//! [`place::resolve`] names the server a client should use for a volume: the one holding the
//! tenant's reservation, else the least-loaded live server with the volume. The `client`
//! crate's `Client::connect_via_registry` resolves and connects in one call; NBD users get the
//! export URIs from `ullstack place --registry URL --lookup VOLUME` ([`ServerRecord::nbd_uris`]).

pub mod announce;
pub mod etcd;
pub mod member;
pub mod model;
pub mod place;
pub mod show;

pub use announce::{announce, Announcement};
pub use etcd::{CasWrite, Etcd, FleetError};
pub use member::{member_id, Member};
pub use model::{NbdExport, PlacedTenant, Reservations, ServerRecord};
pub use place::{place, rebalance, Placement, RebalanceReport};

/// Every key of the fleet starts with this.
pub const PREFIX: &str = "/ullstack/v1/";

/// The key of server `id`'s record.
pub fn server_key(id: &str) -> String {
    format!("{PREFIX}servers/{id}")
}

/// The key of server `id`'s reservations.
pub fn reserved_key(id: &str) -> String {
    format!("{PREFIX}reserved/{id}")
}
