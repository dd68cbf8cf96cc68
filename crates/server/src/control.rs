//! The control plane: admission (crate `qos`'s registry) and the flows it admitted, by owner.
//!
//! # What it implements
//! Every flow the server schedules — each config tenant's *default flow* (handle 0 on the own
//! protocol, every NBD connection of the tenant's exports) and each flow a client REGISTERs —
//! is admitted here and recorded with the config tenant that owns it, so token counters add up
//! per tenant ([`Control::token_totals`]) and a reload can find what a removed tenant held.
//!
//! # Design
//! One mutex (in [`crate::shared::Life`]), taken on REGISTER / UNREGISTER, by the admin
//! thread's scrape, by the closed loop, and by a reload — never per request. A reload changes
//! the admitted set in one step ([`Control::reconfigure`], over
//! [`qos::Registry::reconfigure`]): the flows of tenants it removes leave admission at once
//! (*retiring*: workers still hold them until they adopt the new config; their counters are
//! kept until the last one lets go), LC tenants whose SLO changed keep their flow with the new
//! reservation, and new tenants' default flows are admitted — or nothing changes.
//!
//! Worked example: tenant `a` (LC, default flow 1, and flow 7 a client REGISTERed) is removed
//! by a reload that adds `b`: flows 1 and 7 retire, `b`'s default flow 8 is admitted in the
//! same step; the client's connection ends, and its close unregisters 7 here without asking the
//! registry again; flow 1 is collected once no worker holds it.
//!
//! # What it leaves out
//! Moving a flow between owners (a tenant renamed is a new tenant).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::latency::LatencyWindow;
use crate::tenant::TenantId;

/// Totals of token counters of flows that have been unregistered, per config tenant.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenTotals {
    pub earned_mtok: u64,
    pub spent_mtok: u64,
    pub donated_mtok: u64,
    pub deficit_hits: u64,
}

impl TokenTotals {
    pub fn add(&mut self, c: &qos::TenantCounters) {
        self.earned_mtok += c.earned_mtok;
        self.spent_mtok += c.spent_mtok;
        self.donated_mtok += c.donated_mtok;
        self.deficit_hits += c.deficit_hits;
    }

    pub fn plus(mut self, other: TokenTotals) -> TokenTotals {
        self.earned_mtok += other.earned_mtok;
        self.spent_mtok += other.spent_mtok;
        self.donated_mtok += other.donated_mtok;
        self.deficit_hits += other.deficit_hits;
        self
    }
}

/// What a reload asks of the control plane (see the module essay).
#[derive(Debug, Clone, Default)]
pub struct FlowPlan {
    /// Config tenants whose every flow retires (removed, or replaced under a new id).
    pub retire_owners: Vec<TenantId>,
    /// Default flows whose LC SLO changes: the flow and its new spec.
    pub respec: Vec<(qos::TenantId, qos::TenantSpec)>,
    /// New default flows: their owner and spec.
    pub add: Vec<(TenantId, qos::TenantSpec)>,
}

/// The control plane: admission and the flows it admitted.
pub struct Control {
    registry: qos::Registry,
    live: HashMap<qos::TenantId, (TenantId, qos::TenantHandle)>,
    /// Flows a reload took out of admission that are still recorded in `live` (see the module
    /// essay).
    retiring: HashSet<qos::TenantId>,
    retired: Vec<TokenTotals>,
    /// Latency windows of LC flows, kept while the closed loop (`[qos] vrate`) is on.
    windows: HashMap<qos::TenantId, Arc<LatencyWindow>>,
    track_windows: bool,
}

impl Control {
    /// A control plane over `registry` for `owners` config tenant ids; `track_windows` keeps a
    /// latency window per LC flow (the closed loop is on).
    pub fn new(registry: qos::Registry, owners: usize, track_windows: bool) -> Control {
        Control {
            registry,
            live: HashMap::new(),
            retiring: HashSet::new(),
            retired: vec![TokenTotals::default(); owners],
            windows: HashMap::new(),
            track_windows,
        }
    }

    /// Admits a flow of config tenant `owner`.
    pub fn register(
        &mut self,
        owner: TenantId,
        spec: qos::TenantSpec,
    ) -> Result<qos::TenantHandle, qos::Refusal> {
        let handle = self.registry.register(spec)?;
        self.record(owner, &handle);
        Ok(handle)
    }

    fn record(&mut self, owner: TenantId, handle: &qos::TenantHandle) {
        self.live.insert(handle.id(), (owner, handle.clone()));
        if self.track_windows && handle.class() == qos::TenantClass::LatencyCritical {
            self.windows
                .insert(handle.id(), Arc::new(LatencyWindow::new()));
        }
    }

    /// A reload's change of the admitted set, all or nothing; returns the respecified and the
    /// added handles, in the plan's order.
    pub fn reconfigure(
        &mut self,
        plan: &FlowPlan,
    ) -> Result<qos::Reconfigured, qos::ReconfigureError> {
        let retire: Vec<qos::TenantId> = self
            .live
            .iter()
            .filter(|(id, (owner, _))| {
                plan.retire_owners.contains(owner) && !self.retiring.contains(id)
            })
            .map(|(id, _)| *id)
            .collect();
        let change = qos::Reconfiguration {
            retire: retire.clone(),
            respec: plan.respec.clone(),
            add: plan.add.iter().map(|(_, spec)| *spec).collect(),
        };
        let done = self.registry.reconfigure(&change)?;
        for id in retire {
            self.retiring.insert(id);
            self.windows.remove(&id);
        }
        for handle in &done.respecified {
            if let Some(entry) = self.live.get_mut(&handle.id()) {
                entry.1 = handle.clone();
            }
        }
        for ((owner, _), handle) in plan.add.iter().zip(&done.added) {
            self.record(*owner, handle);
        }
        let owners = plan
            .add
            .iter()
            .map(|(owner, _)| owner.0 as usize + 1)
            .max()
            .unwrap_or(0);
        self.ensure_owners(owners);
        self.collect_retiring();
        Ok(done)
    }

    /// Makes room for token totals of `owners` config tenant ids.
    pub fn ensure_owners(&mut self, owners: usize) {
        if self.retired.len() < owners {
            self.retired.resize(owners, TokenTotals::default());
        }
    }

    /// Forgets retiring flows no worker holds any more (their counters join their owner's
    /// totals).
    pub fn collect_retiring(&mut self) {
        let free: Vec<qos::TenantId> = self
            .retiring
            .iter()
            .filter(|id| {
                self.live
                    .get(id)
                    .is_none_or(|(_, h)| h.attached_workers() == 0)
            })
            .copied()
            .collect();
        for id in free {
            self.retiring.remove(&id);
            self.forget(id);
        }
    }

    fn forget(&mut self, id: qos::TenantId) {
        if let Some((owner, handle)) = self.live.remove(&id) {
            self.ensure_owners(owner.0 as usize + 1);
            self.retired[owner.0 as usize].add(&handle.counters());
        }
        self.windows.remove(&id);
    }

    /// The latency window of an LC flow (None when the closed loop is off).
    pub fn window(&self, id: qos::TenantId) -> Option<Arc<LatencyWindow>> {
        self.windows.get(&id).cloned()
    }

    /// Every measured LC flow: its id, handle and window.
    pub fn lc_windows(
        &self,
    ) -> impl Iterator<Item = (qos::TenantId, &qos::TenantHandle, &Arc<LatencyWindow>)> {
        self.windows
            .iter()
            .filter_map(|(id, w)| self.live.get(id).map(|(_, h)| (*id, h, w)))
    }

    /// Applies the closed loop's device rate scale (ppm of the calibrated rate).
    pub fn set_rate_scale_ppm(&mut self, ppm: u32) -> Result<(), qos::RegistryError> {
        self.registry.set_rate_scale_ppm(ppm)
    }

    /// The device rate scale in force, ppm (1,000,000 = as calibrated).
    pub fn rate_scale_ppm(&self) -> u32 {
        self.registry.rate_scale_ppm()
    }

    /// The LC surge in force, ppm of a reservation (crate qos, `admission`).
    pub fn lc_surge_ppm(&self) -> u32 {
        self.registry.shared().lc_surge_ppm()
    }

    /// The allocation in force (reservations, BE share).
    pub fn capacity(&self) -> qos::Capacity {
        self.registry.capacity()
    }

    /// Removes a flow (its token counters move to the owner's retired totals). A flow a reload
    /// retired already left the registry.
    pub fn unregister(&mut self, id: qos::TenantId) {
        self.forget(id);
        self.retiring.remove(&id);
        if self.registry.get(id).is_none() {
            tracing::debug!(flow = %id, "unregister of a flow a reload retired");
            return;
        }
        if let Err(e) = self.registry.unregister(id) {
            tracing::warn!(error = %e, "unregister of a flow still attached");
        }
    }

    /// Flows admitted and not retiring.
    pub fn registered(&self) -> usize {
        self.live.len() - self.retiring.len()
    }

    /// Token counters per config tenant id: flows gone plus flows recorded now.
    pub fn token_totals(&self) -> Vec<TokenTotals> {
        let mut totals = self.retired.clone();
        for (owner, handle) in self.live.values() {
            if let Some(t) = totals.get_mut(owner.0 as usize) {
                t.add(&handle.counters());
            }
        }
        totals
    }
}
