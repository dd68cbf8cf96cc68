//! What the fleet stores in etcd, and the fit check (the server's own admission rule).

use qos::{DeviceProfile, Registry, RegistryConfig, TenantSpec};
use serde::{Deserialize, Serialize};

/// A live server, as it announces itself (`servers/<id>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRecord {
    pub id: String,
    /// The own protocol's address, if served.
    pub native: Option<String>,
    /// The NBD address, if served.
    pub nbd: Option<String>,
    /// Volume names.
    pub volumes: Vec<String>,
    /// The device profile admission uses (cost model and rate table).
    pub profile: DeviceProfile,
    /// NBD exports: name and the volume it serves (absent in records of older servers).
    #[serde(default)]
    pub exports: Vec<NbdExport>,
    /// Both listeners require TLS (own protocol from the first byte, NBD by STARTTLS).
    #[serde(default)]
    pub tls: bool,
}

/// One NBD export of a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NbdExport {
    pub name: String,
    pub volume: String,
}

impl ServerRecord {
    /// The NBD URIs serving `volume` (`nbd://HOST:PORT/EXPORT`, `nbds://` under TLS), as
    /// libnbd's `nbdinfo`, qemu and fio's nbd engine take them.
    pub fn nbd_uris(&self, volume: &str) -> Vec<String> {
        let Some(addr) = &self.nbd else {
            return Vec::new();
        };
        let scheme = if self.tls { "nbds" } else { "nbd" };
        self.exports
            .iter()
            .filter(|e| e.volume == volume)
            .map(|e| format!("{scheme}://{addr}/{}", e.name))
            .collect()
    }
}

/// One tenant placed on a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedTenant {
    pub name: String,
    pub volume: String,
    pub spec: TenantSpec,
}

/// The tenants placed on one server (`reserved/<id>`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservations {
    pub tenants: Vec<PlacedTenant>,
}

/// How full a server would be with a newcomer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fit {
    /// Σ LC reservations with the newcomer, mtok/s.
    pub reserved_mtok_per_sec: u64,
    /// The device rate in force with the newcomer, mtok/s.
    pub rate_mtok_per_sec: u64,
}

impl Fit {
    /// Reserved share, parts per million of the rate.
    pub fn load_ppm(&self) -> u64 {
        self.reserved_mtok_per_sec.saturating_mul(1_000_000) / self.rate_mtok_per_sec.max(1)
    }
}

/// The admission registry a server with `profile` would have with `tenants` registered.
fn registry(profile: &DeviceProfile, tenants: &[PlacedTenant]) -> Result<Registry, String> {
    // No surge in the check: the surge is paid out of unreserved capacity, it never decides
    // admission (qos::admission: "An LC tenant is admitted iff Σ reservations ≤ that rate").
    let mut r = Registry::new(profile.clone(), RegistryConfig::default());
    for t in tenants {
        r.register(t.spec)
            .map_err(|e| format!("reserved tenant `{}` no longer fits: {e}", t.name))?;
    }
    Ok(r)
}

/// Whether `spec` fits next to `tenants` on a server with `profile`: the load after it, or the
/// server's refusal sentence.
pub fn fit(
    profile: &DeviceProfile,
    tenants: &[PlacedTenant],
    spec: &TenantSpec,
) -> Result<Fit, String> {
    let mut r = registry(profile, tenants)?;
    r.check(spec).map_err(|e| e.to_string())?;
    r.register(*spec).map_err(|e| e.to_string())?;
    let c = r.capacity();
    Ok(Fit {
        reserved_mtok_per_sec: c.lc_reserved_mtok_per_sec,
        rate_mtok_per_sec: c.device_rate_mtok_per_sec,
    })
}

/// The load of a server as it stands (for listing and checks).
pub fn load(profile: &DeviceProfile, tenants: &[PlacedTenant]) -> Result<Fit, String> {
    let c = registry(profile, tenants)?.capacity();
    Ok(Fit {
        reserved_mtok_per_sec: c.lc_reserved_mtok_per_sec,
        rate_mtok_per_sec: c.device_rate_mtok_per_sec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use qos::LcSlo;

    fn lc(iops: u64, p95_us: u64) -> TenantSpec {
        TenantSpec::LatencyCritical(LcSlo {
            p95_read_latency_ns: p95_us * 1000,
            iops,
            read_pct: 100,
            request_bytes: 4096,
        })
    }

    fn placed(name: &str, spec: TenantSpec) -> PlacedTenant {
        PlacedTenant {
            name: name.into(),
            volume: "default".into(),
            spec,
        }
    }

    #[test]
    fn the_fit_is_the_servers_admission_rule() {
        let profile = DeviceProfile::named("reflex-a").expect("profile");
        // Read-only at 500 µs: the newcomer fits until the table's rate is reserved.
        let mut tenants = Vec::new();
        let mut n = 0;
        while fit(&profile, &tenants, &lc(100_000, 500)).is_ok() {
            tenants.push(placed(&format!("t{n}"), lc(100_000, 500)));
            n += 1;
            assert!(n < 100, "never full");
        }
        assert!(n >= 1);
        let full = load(&profile, &tenants).unwrap();
        assert!(full.reserved_mtok_per_sec <= full.rate_mtok_per_sec);
        let e = fit(&profile, &tenants, &lc(100_000, 500)).unwrap_err();
        assert!(!e.is_empty());
        // A target tighter than the table is refused on an empty server too.
        assert!(fit(&profile, &[], &lc(10, 1)).is_err());
    }

    #[test]
    fn records_round_trip_through_json() {
        let r = Reservations {
            tenants: vec![placed("a", lc(1000, 2000))],
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Reservations>(&text).unwrap(), r);
    }
}
