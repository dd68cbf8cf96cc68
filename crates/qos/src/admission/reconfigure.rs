//! Changing the admitted set in one step: what a server's config reload asks of admission.
//!
//! # What it implements
//! [`Registry::reconfigure`] applies a [`Reconfiguration`] — tenants to retire, admitted LC
//! tenants whose SLO changes in place, tenants to add — all or nothing. A reload that removes
//! tenant A (40 % of the device) and adds tenant B (50 %) must not be refused because A and B
//! do not fit *together*, and one that shrinks C and grows D must not depend on the order the
//! two are written in; so the check is of the set the change leaves, and a refusal leaves the
//! registry exactly as it was.
//!
//! # Design
//! Retired tenants and those changing their SLO leave the set first; what stays is a subset of
//! the admitted set. Then each changed SLO and each newcomer is admitted by [`Registry::check`]
//! against the set built so far — every intermediate set is a subset of the final one, and a
//! subset of an admissible set is admissible (fewer reservations, a looser or equal strictest
//! target), so the change is admitted iff its final set is, with the same rule and the same
//! refusal sentences as one registration. Any refusal restores the saved set.
//!
//! A tenant whose SLO changes keeps its id and its ledger (balance, counters): schedulers that
//! hold it go on with it, and its reservation — an atomic in the ledger — takes the new value
//! at their next round. A retired tenant leaves admission at once even while schedulers still
//! hold it (they detach it when they next look); [`Registry::unregister`] would wait for that.
//!
//! Worked example (the module essay's device A, 420 K tokens/s at 500 µs): A (120 K) and B
//! (196 K) admitted; a reload retires A and adds E asking 200 K: B + E = 396 K ≤ 420 K,
//! admitted, although A + B + E would not be. The same reload changing B to 250 K instead is
//! refused (450 K), and A, B and their reservations stay as they were.
//!
//! # What it leaves out
//! Changing a tenant's class in place (LC ↔ BE): retire it and add the new one.

use std::sync::atomic::Ordering;

use super::{Refusal, Registry, RegistryError};
use crate::cost::LoadMix;
use crate::tenant::{lc_reservation_mtok_per_sec, DeclaredMix, TenantHandle, TenantId, TenantSpec};

/// One change of the admitted set (see the module essay).
#[derive(Debug, Clone, Default)]
pub struct Reconfiguration {
    /// Tenants that leave admission now (their schedulers detach them later).
    pub retire: Vec<TenantId>,
    /// Admitted LC tenants and their new SLO (same class), kept under their id and ledger.
    pub respec: Vec<(TenantId, TenantSpec)>,
    /// Tenants to admit.
    pub add: Vec<TenantSpec>,
}

/// Why a reconfiguration was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconfigureError {
    /// The set it would leave is not admissible.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// It names a tenant that is not admitted, or changes a tenant's class.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A respec changes the class of the tenant.
    #[error("{0} cannot change class in place; retire it and add the new tenant")]
    ClassChange(TenantId),
}

/// What an applied reconfiguration gives back.
#[derive(Debug, Clone)]
pub struct Reconfigured {
    /// The respecified tenants' handles (same ids and ledgers, the new specs), in order.
    pub respecified: Vec<TenantHandle>,
    /// The added tenants' handles, in order.
    pub added: Vec<TenantHandle>,
}

impl Registry {
    /// Applies `change` if the set it leaves is admissible; otherwise changes nothing and says
    /// why (see the module essay).
    pub fn reconfigure(
        &mut self,
        change: &Reconfiguration,
    ) -> Result<Reconfigured, ReconfigureError> {
        for id in change
            .retire
            .iter()
            .chain(change.respec.iter().map(|(id, _)| id))
        {
            if !self.tenants.contains_key(id) {
                return Err(RegistryError::UnknownTenant(*id).into());
            }
        }
        for (id, spec) in &change.respec {
            let old = &self.tenants[id];
            if old.spec.class() != spec.class() {
                return Err(ReconfigureError::ClassChange(*id));
            }
        }
        let saved = self.tenants.clone();
        let result = self.apply(change);
        if result.is_err() {
            self.tenants = saved;
            self.recount();
        }
        let mix = self.mix();
        self.reprice(mix);
        self.publish();
        result
    }

    fn apply(&mut self, change: &Reconfiguration) -> Result<Reconfigured, ReconfigureError> {
        let mut leaving: Vec<(TenantId, TenantHandle)> = Vec::new();
        for id in &change.retire {
            self.tenants.remove(id);
        }
        for (id, _) in &change.respec {
            if let Some(handle) = self.tenants.remove(id) {
                leaving.push((*id, handle));
            }
        }
        self.recount();
        let mut respecified = Vec::with_capacity(change.respec.len());
        for ((id, spec), (_, old)) in change.respec.iter().zip(&leaving) {
            self.check(spec)?;
            let handle = TenantHandle {
                id: *id,
                spec: *spec,
                ledger: old.ledger.clone(),
            };
            self.tenants.insert(*id, handle.clone());
            self.recount();
            respecified.push(handle);
        }
        let mut added = Vec::with_capacity(change.add.len());
        for spec in &change.add {
            added.push(self.register(*spec)?);
        }
        Ok(Reconfigured { respecified, added })
    }

    /// Recomputes the admission totals from the admitted set.
    fn recount(&mut self) {
        let cost = self.profile.cost_model();
        self.slo_targets.clear();
        self.lc_sum_mixed_mtok_per_sec = 0;
        self.lc_sum_read_only_mtok_per_sec = 0;
        self.lc_tenants = 0;
        self.be_tenants = 0;
        self.mixed_tenants = 0;
        self.pool_mixed = Default::default();
        self.pool_read_only = Default::default();
        let lc_slos: Vec<_> = self
            .tenants
            .values()
            .filter_map(|h| match h.spec {
                TenantSpec::LatencyCritical(slo) => Some(slo),
                TenantSpec::BestEffort(_) => None,
            })
            .collect();
        for slo in &lc_slos {
            self.count_needed_surge(slo, true);
        }
        for handle in self.tenants.values() {
            if handle.spec.declared_mix() == DeclaredMix::Mixed {
                self.mixed_tenants += 1;
            }
            match &handle.spec {
                TenantSpec::LatencyCritical(slo) => {
                    *self.slo_targets.entry(slo.p95_read_latency_ns).or_insert(0) += 1;
                    self.lc_sum_mixed_mtok_per_sec +=
                        lc_reservation_mtok_per_sec(slo, &cost, LoadMix::Mixed);
                    self.lc_sum_read_only_mtok_per_sec +=
                        lc_reservation_mtok_per_sec(slo, &cost, LoadMix::ReadOnly);
                    self.lc_tenants += 1;
                }
                TenantSpec::BestEffort(_) => self.be_tenants += 1,
            }
        }
    }

    /// The reservation an admitted tenant holds now, mtok/s (0 for BE or unknown tenants).
    pub fn reservation_mtok_per_sec(&self, id: TenantId) -> u64 {
        self.tenants
            .get(&id)
            .map_or(0, |h| h.ledger.rate_mtok_per_sec.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::RegistryConfig;
    use crate::profile::DeviceProfile;
    use crate::tenant::{BeSpec, LcSlo};

    fn lc(iops: u64) -> TenantSpec {
        TenantSpec::LatencyCritical(LcSlo {
            p95_read_latency_ns: 500_000,
            iops,
            read_pct: 100,
            request_bytes: 4096,
        })
    }

    fn registry() -> Registry {
        Registry::new(DeviceProfile::reflex_a(), RegistryConfig::default())
    }

    /// The largest read-only 4 KiB IOPS one LC tenant may reserve alone at 500 µs.
    fn alone_iops(r: &Registry) -> u64 {
        let profile = r.profile();
        let cap = profile
            .rate_mtok_per_sec(500_000, LoadMix::ReadOnly)
            .expect("500 us is in reflex-a's table");
        let TenantSpec::LatencyCritical(slo) = lc(1_000) else {
            unreachable!("lc() is latency-critical")
        };
        let per_thousand =
            lc_reservation_mtok_per_sec(&slo, &profile.cost_model(), LoadMix::ReadOnly);
        cap * 1_000 / per_thousand.max(1)
    }

    #[test]
    fn retiring_and_adding_is_checked_on_the_set_it_leaves() {
        let mut r = registry();
        let n = alone_iops(&r);
        let a = r.register(lc(n * 4 / 10)).expect("A fits");
        let b = r.register(lc(n * 4 / 10)).expect("B fits");
        assert!(r.register(lc(n / 2)).is_err(), "A + B + E does not fit");
        let change = Reconfiguration {
            retire: vec![a.id()],
            add: vec![lc(n / 2)],
            ..Reconfiguration::default()
        };
        let done = r.reconfigure(&change).expect("B + E fits");
        assert_eq!(done.added.len(), 1);
        assert!(r.get(a.id()).is_none() && r.get(b.id()).is_some());
        assert_eq!(r.capacity().lc_tenants, 2);
    }

    #[test]
    fn a_refused_change_leaves_every_reservation_as_it_was() {
        let mut r = registry();
        let n = alone_iops(&r);
        let a = r.register(lc(n * 4 / 10)).expect("A");
        let b = r.register(lc(n * 4 / 10)).expect("B");
        let before = (r.capacity(), r.reservation_mtok_per_sec(b.id()));
        let change = Reconfiguration {
            retire: vec![],
            respec: vec![(b.id(), lc(n * 7 / 10))],
            add: vec![TenantSpec::BestEffort(BeSpec::default())],
        };
        let err = r.reconfigure(&change).expect_err("A + 70 % does not fit");
        assert!(matches!(err, ReconfigureError::Refused(_)), "{err}");
        assert_eq!((r.capacity(), r.reservation_mtok_per_sec(b.id())), before);
        assert!(r.get(a.id()).is_some());
        assert_eq!(r.tenants().count(), 2, "the BE newcomer was rolled back");
    }

    #[test]
    fn a_shrunk_reservation_is_in_the_ledger_the_schedulers_hold() {
        let mut r = registry();
        let n = alone_iops(&r);
        let a = r.register(lc(n / 2)).expect("A");
        let held = a.clone();
        let before = held.reservation_mtok_per_sec();
        let done = r
            .reconfigure(&Reconfiguration {
                respec: vec![(a.id(), lc(n / 4))],
                ..Reconfiguration::default()
            })
            .expect("shrinking fits");
        assert_eq!(done.respecified[0].id(), a.id());
        let after = held.reservation_mtok_per_sec();
        assert!(
            after < before && after * 2 <= before + 1_000,
            "the handle a scheduler holds sees the shrink: {before} -> {after} mtok/s"
        );
        assert!(matches!(
            r.reconfigure(&Reconfiguration {
                respec: vec![(a.id(), TenantSpec::BestEffort(BeSpec::default()))],
                ..Reconfiguration::default()
            }),
            Err(ReconfigureError::ClassChange(_))
        ));
    }
}
