//! Reloading the config without a restart: SIGHUP and `POST /reload`.
//!
//! # What it implements
//! [`reload`] re-reads the config from where the server was started ([`ConfigSource`]: the
//! file, with the same command-line overrides) and [`apply`] makes it the config in force:
//! tenants (added, removed, secrets, ACLs, SLOs), NBD exports, new volumes, TLS keys, the admin
//! token and `limits.shutdown_grace_ms`. It is all or nothing: a file that does not parse or
//! validate, a volume that does not open, TLS keys that do not load, fixed SLOs that admission
//! refuses, or a change that needs a restart is refused with the reason, logged (and returned
//! to `POST /reload`), and the server goes on exactly as before.
//!
//! What happens to the connections, each worker applies when it adopts the new generation
//! (`worker/generation.rs`, within one loop step of the publication):
//! * a tenant that stays under the same identity (name, class, secret or open, whether it has a
//!   fixed SLO) keeps its id: its sessions go on; new ACLs apply to their next request; a
//!   changed fixed SLO keeps the tenant's flow and its new reservation applies at the
//!   scheduler's next round (crate qos, `Registry::reconfigure`);
//! * a tenant removed, or changed in identity (it gets a new id; clients authenticate again),
//!   has its sessions ended: what they sent that already reached storage completes and is
//!   answered; what waits in the scheduler is answered with a status that says why (own
//!   protocol `NOT_AUTHENTICATED` with the message, NBD `ESHUTDOWN`); then the connection
//!   closes. An own-protocol session whose volume is no longer granted ends the same way;
//! * an NBD connection whose export is removed or now names another volume or tenant ends;
//! * handshakes in progress finish under the new config; new connections get the new TLS keys.
//!
//! # Design
//! Everything that can fail runs before anything changes: parse and validate, compare with
//! the config in force ([`restart_needed`]), open the added volumes (and attach each once, so
//! a file that cannot get an io_uring fails here), load TLS, resolve tenants and exports. Then
//! one step that can refuse and changes nothing when it does: the control plane's
//! reconfiguration (admission of the new set of default flows: retired tenants' flows leave,
//! changed SLOs and new tenants are checked against what stays). After it, the new generation
//! is assembled from infallible parts and published.
//!
//! Worked example: tenants `a` (BE) and `b` (LC, 5,000 IOPS at p95 500 µs); the file now
//! drops `a`, sets `b` to 2,000 IOPS and adds export `e2` of `b`. The reload reports
//! `generation 1: tenant a removed: its sessions end; tenant b: fixed SLO changed (the new
//! reservation applies at the next scheduling round); export a removed: its connections end;
//! export e2 added`; `a`'s connections end, `b`'s go on at the lower rate. Had the file also changed `[limits] max_connections`, it would have been refused:
//! `[limits] changed (only shutdown_grace_ms applies without a restart)`.
//!
//! # What it leaves out (each refused with "a restart applies it")
//! `[listen]` (the listeners stay bound), `[dataplane]` (the workers are running), `[limits]`
//! other than `shutdown_grace_ms` (budgets sized at start), `[qos]` and a new volume that changes
//! what `profile = "auto"` picks (the registry and the
//! schedulers are built on the profile), `[registry]` (the fleet announcement), and removing
//! or changing a volume (its backend is in use; add a volume under a new name instead).
//!
//! # Config keys
//! All of them are read; the ones above need a restart. `[admin] token` enables `POST
//! /reload` ([`crate::admin`]).

use std::sync::Arc;

use crate::config::{ConfigError, ServerConfig};
use crate::control::FlowPlan;
use crate::shared::{
    default_spec, resolve_exports, volume_ids, ConfigSource, Generation, RunState, Shared,
    VolumeEntry,
};
use crate::tenant::{TenantId, Tenants};

/// Why a reload was refused (nothing changed).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("nothing to re-read: the server was started without a config file")]
    NoSource,
    #[error("the server is stopping")]
    Stopping,
    #[error("{0}")]
    Source(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{}; a restart applies it", .0.join("; "))]
    RestartNeeded(Vec<String>),
    #[error("volume {name}: {source}")]
    Volume {
        name: String,
        source: crate::backend::BackendError,
    },
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("the tenants' fixed SLOs are not admitted: {0}")]
    Admission(String),
    #[error(
        "too many tenant ids for this server's life (at most {}); a restart starts over",
        crate::appendvec::MAX_SLOTS
    )]
    TooManyTenants,
    #[error("too many volumes (at most {})", u16::MAX)]
    TooManyVolumes,
}

/// What a reload changed, one line per change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// The generation now in force.
    pub generation: u64,
    pub changes: Vec<String>,
    /// Tenants whose sessions end (removed, or changed in identity).
    pub tenants_ended: Vec<String>,
}

impl std::fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.changes.is_empty() {
            write!(f, "generation {}: no change", self.generation)
        } else {
            write!(
                f,
                "generation {}: {}",
                self.generation,
                self.changes.join("; ")
            )
        }
    }
}

/// Applies `config` as [`reload`] does, logging the outcome (event `reload`).
pub fn apply_logged(
    shared: &Shared,
    config: ServerConfig,
    trigger: &'static str,
) -> Result<ReloadReport, ReloadError> {
    let result = apply(shared, config);
    log(shared, &result, trigger);
    result
}

/// Re-reads the config from the server's [`ConfigSource`] and applies it; logs the outcome
/// (event `reload`).
pub fn reload(shared: &Shared, trigger: &'static str) -> Result<ReloadReport, ReloadError> {
    let read = {
        let source = shared.source.lock().unwrap_or_else(|p| p.into_inner());
        source.as_ref().map(ConfigSource::read)
    };
    let result = match read {
        None => Err(ReloadError::NoSource),
        Some(Err(e)) => Err(ReloadError::Source(e)),
        Some(Ok(config)) => apply(shared, config),
    };
    log(shared, &result, trigger);
    result
}

/// Logs a reload's outcome (event `reload`) and counts it (`ullstack_reloads_total`).
fn log(shared: &Shared, result: &Result<ReloadReport, ReloadError>, trigger: &'static str) {
    shared
        .metrics
        .reloaded(if result.is_ok() { "applied" } else { "refused" });
    match result {
        Ok(report) => tracing::info!(
            event = "reload",
            trigger,
            outcome = "applied",
            generation = report.generation,
            changes = %report.changes.join("; "),
            "config reloaded"
        ),
        Err(e) => tracing::error!(
            event = "reload",
            trigger,
            outcome = "refused",
            error = %e,
            "config reload refused; nothing changed"
        ),
    }
}

/// Makes `config` the config in force (see the module essay); `shared` is any generation of
/// the server.
pub fn apply(shared: &Shared, config: ServerConfig) -> Result<ReloadReport, ReloadError> {
    let life = shared.life();
    let _one_at_a_time = life.reloading.lock().unwrap_or_else(|p| p.into_inner());
    if life.state() != RunState::Running {
        return Err(ReloadError::Stopping);
    }
    let old = life.current().ok_or(ReloadError::Stopping)?;
    config.validate()?;
    let restart = restart_needed(&old.config, &config);
    if !restart.is_empty() {
        return Err(ReloadError::RestartNeeded(restart));
    }
    let mut changes = Vec::new();
    let mut volumes = old.volumes.clone();
    let profiles = config.volume_profiles()?;
    for (v, profile) in config.volumes.iter().zip(&profiles) {
        if old.volume_by_name(&v.name).is_some() {
            continue;
        }
        let fail = |source| ReloadError::Volume {
            name: v.name.clone(),
            source,
        };
        let entry = VolumeEntry::open(v, profile.pacing).map_err(fail)?;
        // Each worker attaches it when it adopts the generation; a failure shows here.
        drop(entry.volume.clone().attach().map_err(fail)?);
        volumes.push(entry);
        changes.push(format!("volume {} added", v.name));
    }
    if volumes.len() > usize::from(u16::MAX) {
        return Err(ReloadError::TooManyVolumes);
    }
    let tls = match &config.tls {
        Some(t) => Some(Arc::new(crate::tls::TlsServer::from_config(t)?)),
        None => None,
    };
    if config.tls.is_some() || old.config.tls.is_some() {
        changes.push(match (&old.config.tls, &config.tls) {
            (None, Some(_)) => "TLS on for new connections".to_string(),
            (Some(_), None) => "TLS off for new connections".to_string(),
            _ => "TLS keys re-read for new connections".to_string(),
        });
    }
    let ids = volume_ids(&volumes);
    let tenants = old.tenants.reloaded(&config, &ids);
    if tenants.len() > crate::appendvec::MAX_SLOTS {
        return Err(ReloadError::TooManyTenants);
    }
    let exports = resolve_exports(&config, &ids, &tenants);
    let (plan, ended) = flow_plan(&old, &tenants, &mut changes);
    describe_exports(&old, &exports, &volumes, &tenants, &mut changes);
    if old.config.admin != config.admin {
        changes.push("admin token changed".into());
    }
    if old.config.limits.shutdown_grace_ms != config.limits.shutdown_grace_ms {
        changes.push(format!(
            "limits.shutdown_grace_ms {} -> {}",
            old.config.limits.shutdown_grace_ms, config.limits.shutdown_grace_ms
        ));
    }
    // Room for the new ids' per-tenant state (harmless if admission refuses below: the next
    // reload hands out the same ids).
    life.sessions
        .add_tenants(&tenants)
        .map_err(|_| ReloadError::TooManyTenants)?;
    life.memory
        .set_tenants(tenants.len(), old.tenants.live().count())
        .map_err(|_| ReloadError::TooManyTenants)?;
    let (default_flows, default_windows) = {
        let mut control = life.lock_control();
        let done = control
            .reconfigure(&plan)
            .map_err(|e| ReloadError::Admission(e.to_string()))?;
        let mut flows: Vec<Option<qos::TenantHandle>> = (0..tenants.len())
            .map(|i| old.default_flows.get(i).cloned().flatten())
            .collect();
        for t in tenants.iter().filter(|t| !t.live) {
            flows[t.id.0 as usize] = None;
        }
        for handle in &done.respecified {
            if let Some(slot) = flows
                .iter_mut()
                .find(|f| f.as_ref().is_some_and(|h| h.id() == handle.id()))
            {
                *slot = Some(handle.clone());
            }
        }
        for ((owner, _), handle) in plan.add.iter().zip(&done.added) {
            flows[owner.0 as usize] = Some(handle.clone());
        }
        let windows = flows
            .iter()
            .map(|f| f.as_ref().and_then(|h| control.window(h.id())))
            .collect();
        (flows, windows)
    };
    // The limit is shared by the tenants in force from now on (cannot fail: room was made).
    let _ = life
        .memory
        .set_tenants(tenants.len(), tenants.live().count());
    let mut tenant_metrics = old.tenant_metrics.clone();
    for t in tenants.iter().skip(tenant_metrics.len()) {
        tenant_metrics.push(life.metrics.tenant(&t.name));
    }
    let next = old.next(Generation {
        config,
        tenants,
        volumes,
        exports,
        default_flows,
        default_windows,
        tenant_metrics,
        tls,
    });
    let generation = next.generation;
    life.publish(Arc::new(next));
    Ok(ReloadReport {
        generation,
        changes,
        tenants_ended: ended,
    })
}

/// The sections and volumes of `next` that differ from `now` and need a restart (empty: the
/// reload may go on).
pub fn restart_needed(now: &ServerConfig, next: &ServerConfig) -> Vec<String> {
    let mut why = Vec::new();
    if now.listen != next.listen {
        why.push("[listen] changed (the listeners stay bound)".to_string());
    }
    if now.dataplane != next.dataplane {
        why.push("[dataplane] changed (the workers are running)".to_string());
    }
    let mut limits = now.limits.clone();
    limits.shutdown_grace_ms = next.limits.shutdown_grace_ms;
    if limits != next.limits {
        why.push("[limits] changed (only shutdown_grace_ms applies without a restart)".into());
    }
    if now.qos != next.qos {
        why.push("[qos] changed (the scheduler is built on it)".to_string());
    } else if now.device_profile().ok() != next.device_profile().ok() {
        why.push(
            "the volumes' backends change what [qos] profile = \"auto\" picks (the scheduler \
             is built on it)"
                .to_string(),
        );
    }
    if now.registry != next.registry {
        why.push("[registry] changed (the fleet announcement)".to_string());
    }
    for v in &now.volumes {
        match next.volumes.iter().find(|n| n.name == v.name) {
            None => why.push(format!(
                "volume {} removed (its backend is in use until a restart)",
                v.name
            )),
            Some(n) if n != v => why.push(format!(
                "volume {} changed (backend, size or block size; add a volume under a new name instead)",
                v.name
            )),
            Some(_) => {}
        }
    }
    why
}

/// The control plane's part of the reload, and the lines that describe the tenants' changes;
/// returns the plan and the names of the tenants whose sessions end.
fn flow_plan(old: &Shared, next: &Tenants, changes: &mut Vec<String>) -> (FlowPlan, Vec<String>) {
    let mut plan = FlowPlan::default();
    let mut ended = Vec::new();
    for t in old.tenants.live() {
        if next.get(t.id).live {
            continue;
        }
        plan.retire_owners.push(t.id);
        ended.push(t.name.clone());
        match next.by_name(&t.name) {
            Some(_) => changes.push(format!(
                "tenant {} replaced (secret, open, class or fixed SLO changed): its sessions end",
                t.name
            )),
            None => changes.push(format!("tenant {} removed: its sessions end", t.name)),
        }
    }
    for t in next.live() {
        let before = (t.id.0 as usize) < old.tenants.len();
        if !before {
            if let Some(spec) = default_spec(t) {
                plan.add.push((t.id, spec));
            }
            if old.tenants.by_name(&t.name).is_none() {
                changes.push(format!("tenant {} added", t.name));
            }
            continue;
        }
        let was = old.tenants.get(t.id);
        if was.slo != t.slo {
            if let (Some(handle), Some(spec)) =
                (&old.default_flows[t.id.0 as usize], default_spec(t))
            {
                plan.respec.push((handle.id(), spec));
            }
            changes.push(format!(
                "tenant {}: fixed SLO changed (the new reservation applies at the next scheduling round)",
                t.name
            ));
        }
        if !same_grants(was, t) {
            changes.push(format!("tenant {}: ACL changed", t.name));
        }
    }
    (plan, ended)
}

fn same_grants(a: &crate::tenant::Tenant, b: &crate::tenant::Tenant) -> bool {
    a.grants.len() == b.grants.len()
        && a.grants.iter().zip(&b.grants).all(|(x, y)| {
            x.volume == y.volume && x.access == y.access && x.byte_ranges == y.byte_ranges
        })
}

fn describe_exports(
    old: &Shared,
    next: &[crate::shared::ExportEntry],
    volumes: &[VolumeEntry],
    tenants: &Tenants,
    changes: &mut Vec<String>,
) {
    let name_of = |t: TenantId| tenants.get(t).name.as_str();
    let volume_of = |v: crate::tenant::VolumeId| volumes[v.0 as usize].name.as_str();
    for e in &old.exports {
        match next.iter().find(|n| n.name == e.name) {
            None => changes.push(format!("export {} removed: its connections end", e.name)),
            Some(n) if n.volume != e.volume || n.tenant != e.tenant => changes.push(format!(
                "export {} now serves volume {} to tenant {}: its connections end",
                e.name,
                volume_of(n.volume),
                name_of(n.tenant)
            )),
            Some(_) => {}
        }
    }
    for e in next {
        if !old.exports.iter().any(|o| o.name == e.name) {
            changes.push(format!("export {} added", e.name));
        }
    }
}
