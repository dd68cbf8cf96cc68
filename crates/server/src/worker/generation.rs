//! A worker adopting a reloaded config: the new generation, applied to its connections.
//!
//! # What it implements
//! As each step's wait returns, a worker compares the generation in force
//! ([`crate::shared::Life::generation`], one atomic load) with its own; when a reload published
//! a newer one, [`Worker::follow_reloads`] takes it and, before any request is decoded under it:
//!
//! 1. attaches the volumes it added (a file volume gets this worker's io_uring);
//! 2. ends the sessions it revokes: an own-protocol session whose tenant left (removed, or
//!    replaced under a new id when its secret, open flag, class or fixed-SLO presence changed)
//!    or whose volume is no longer granted; an NBD session whose tenant left or whose export
//!    was removed or now names another volume or tenant. Such a connection reads nothing
//!    more; its REGISTERed flows are detached;
//! 3. detaches the default flows of tenants that left (and of any tenant whose default flow
//!    is another one now);
//! 4. answers every request those detachments took out of the scheduler — requests that were
//!    read but never reached storage — with a status naming the cause (own protocol
//!    `NOT_AUTHENTICATED` and the message, NBD `ESHUTDOWN`);
//! 5. worker 0 attaches the new tenants' default flows (as at start).
//!
//! Requests already at the backend complete and are answered as usual; the connection then
//! closes (`conn_close` with the reason: `tenant_removed`, `grant_removed`, `export_removed`,
//! `export_changed`). Healthy connections are not touched: their next request is checked
//! against the new ACLs, and a changed reservation is in the flow's ledger already.
//!
//! Worked example: tenant `a` removed while one of its NBD connections has 3 reads at the
//! file backend and 5 queued behind its tokens: the 5 get `ESHUTDOWN` at once, the 3 complete
//! with their data, and the connection closes with reason `tenant_removed` — within one step
//! of the worker noticing the reload (≤ [`super::TIMER_SCAN_NS`] when it sleeps).
//!
//! # What it leaves out
//! Moving a connection to another export or tenant: a client whose session ended connects
//! again.

use std::sync::Arc;

use super::{Session, Worker, TOKEN_BACKEND};
use crate::backend::{Backend, Completion, StorageError, Submitted};
use crate::buf::IoBuf;
use crate::conn::push_ended;
use crate::shared::Shared;
use crate::tenant::{TenantId, VolumeId};

/// A volume this worker could not attach: every request on it fails with EIO (logged once).
struct Unattached;

impl Backend for Unattached {
    fn submit(
        &mut self,
        tag: u64,
        _op: crate::backend::StorageOp,
        _class: engine::IoClass,
        buf: IoBuf,
    ) -> Submitted {
        Submitted::Done(Completion {
            tag,
            result: Err(StorageError::Io(libc::EIO)),
            buf,
            pages: None,
        })
    }

    fn poll(&mut self, _now_ns: u64, _out: &mut Vec<Completion>) {}

    fn in_flight(&self) -> usize {
        0
    }
}

/// Why a session ends under the new generation (None: it goes on).
fn native_fate(shared: &Shared, tenant: TenantId, volume: VolumeId) -> Option<&'static str> {
    let t = shared.tenants.get(tenant);
    if !t.live {
        Some("tenant_removed")
    } else if t.grant(volume).is_none() {
        Some("grant_removed")
    } else {
        None
    }
}

fn nbd_fate(
    shared: &Shared,
    export: &str,
    tenant: TenantId,
    volume: VolumeId,
) -> Option<&'static str> {
    if !shared.tenants.get(tenant).live {
        return Some("tenant_removed");
    }
    match shared.exports.iter().find(|e| e.name == export) {
        None => Some("export_removed"),
        Some(e) if e.tenant != tenant || e.volume != volume => Some("export_changed"),
        Some(_) => None,
    }
}

/// What a client whose request will not run is told.
fn ended_message(reason: &str, tenant: &str) -> String {
    match reason {
        "grant_removed" => format!(
            "a config reload removed tenant {tenant:?}'s grant on this session's volume; the session has ended"
        ),
        "export_removed" | "export_changed" => {
            "a config reload removed or changed this NBD export; the connection has ended".into()
        }
        _ => format!(
            "a config reload removed or replaced tenant {tenant:?}; the session has ended (authenticate again)"
        ),
    }
}

impl Worker {
    /// Adopts the generation in force when it is newer than this worker's (see the module
    /// essay).
    pub(super) fn follow_reloads(&mut self) {
        if self.shared.life().generation() == self.shared.generation {
            return;
        }
        let Some(next) = self.shared.life().current() else {
            return;
        };
        if next.generation <= self.shared.generation {
            return;
        }
        self.shared = next;
        self.attach_new_volumes();
        let mut unsent = Vec::new();
        let ended = self.end_revoked_sessions(&mut unsent);
        self.detach_stale_flows(&mut unsent);
        self.answer_unsent(unsent);
        self.attach_default_flows();
        tracing::debug!(
            worker = self.index,
            generation = self.shared.generation,
            sessions_ended = ended,
            "worker adopted a reloaded config"
        );
    }

    fn attach_new_volumes(&mut self) {
        let shared = Arc::clone(&self.shared);
        for v in shared.volumes.iter().skip(self.backends.len()) {
            let backend: Box<dyn Backend> = match v.volume.clone().attach() {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(volume = %v.name, worker = self.index, error = %e, "cannot attach a volume a reload added; its requests on this worker fail");
                    Box::new(Unattached)
                }
            };
            if let Some(fd) = backend.wake_fd() {
                if let Err(e) = self.epoll.add(fd, TOKEN_BACKEND, libc::EPOLLIN as u32) {
                    tracing::warn!(volume = %v.name, error = %e, "cannot watch a volume's completions");
                }
            }
            self.backends.push(backend);
        }
        // A uring worker's new file volumes join its socket ring as the first ones did.
        self.host_file_volumes();
    }

    /// Ends the sessions the new generation revokes; their REGISTERed flows' queued requests
    /// go to `unsent`. Returns how many ended.
    fn end_revoked_sessions(&mut self, unsent: &mut Vec<qos::RequestId>) -> usize {
        let mut ended = Vec::new();
        for i in 0..self.conns.slots() {
            let Some(conn) = self.conns.get_mut(i) else {
                continue;
            };
            let fate = match &conn.session {
                Session::Native(s) => s.bound().and_then(|(t, v)| native_fate(&self.shared, t, v)),
                Session::Nbd(s) => s
                    .bound()
                    .and_then(|(e, t, v)| nbd_fate(&self.shared, e, t, v)),
            };
            let Some(reason) = fate else {
                continue;
            };
            if let Session::Native(s) = &mut conn.session {
                s.revoke(&self.shared, &mut self.sched, unsent);
            }
            conn.core.finish(reason);
            ended.push(i);
        }
        for &i in &ended {
            self.mark_pending(i);
            self.update_interest(i);
        }
        ended.len()
    }

    /// Detaches default flows the new generation no longer has (their tenant left, or its
    /// default flow is another one); their queued requests go to `unsent`.
    fn detach_stale_flows(&mut self, unsent: &mut Vec<qos::RequestId>) {
        for t in 0..self.local_flows.len() {
            let Some((flow, id)) = self.local_flows[t] else {
                continue;
            };
            let now = self
                .shared
                .default_flows
                .get(t)
                .and_then(|f| f.as_ref())
                .map(|h| h.id());
            if now == Some(id) {
                continue;
            }
            self.local_flows[t] = None;
            if let Err(e) = self.sched.detach(flow, unsent) {
                debug_assert!(false, "detach of an unattached default flow: {e}");
                tracing::warn!(error = %e, "detach of an unattached default flow");
            }
        }
    }

    /// Answers requests taken out of the scheduler by a reload (they never reached storage).
    fn answer_unsent(&mut self, unsent: Vec<qos::RequestId>) {
        for id in unsent {
            let Some(req) = self.requests.remove(id.0 as usize) else {
                continue;
            };
            if let Some(b) = req.buf {
                self.pool.give(b);
            }
            let i = req.conn.index as usize;
            let alive = self.conns.is_current(req.conn);
            let Some(conn) = self.conns.get_mut(i).filter(|_| alive) else {
                self.shared.memory.adjust(
                    Some(req.tenant),
                    crate::memory::Charge::held(req.accounted_bytes),
                    crate::memory::Charge::ZERO,
                );
                continue;
            };
            conn.core.inflight_reqs -= 1;
            conn.core.inflight_bytes -= req.accounted_bytes;
            let reason = conn.core.end.unwrap_or("tenant_removed");
            let tenant = &self.shared.tenants.get(req.tenant).name;
            push_ended(&mut conn.core, req.reply, &ended_message(reason, tenant));
            conn.core.finish(reason);
            self.mark_pending(i);
        }
    }
}
