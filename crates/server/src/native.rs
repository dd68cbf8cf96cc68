//! The own (ullstack wire v1) protocol, server side: sessions, control requests, data requests.
//!
//! # What it implements
//! The session rules of remote.md on top of crate `proto`'s codec (`proto::wire`, layout in
//! docs/protocol.md):
//!
//! * **HELLO** names a tenant, its secret and one volume. The secret is compared in constant
//!   time; a wrong one, or an unknown tenant, gets `AUTH_FAILED` (not told apart) and the
//!   connection stays open for another try. A volume the tenant has no grant on gets
//!   `NO_SUCH_VOLUME`. Success returns the volume's size, block size, the server's maximum
//!   payload and the tenant's rights on it. Over TLS-PSK the identity is the tenant: a
//!   connection authenticated as identity `alice` may HELLO only as `alice` or an open tenant
//!   (`AUTH_FAILED` naming both otherwise, even with the other tenant's right secret), the
//!   rule NBD applies to exports.
//! * **REGISTER** asks admission control (the `qos` registry) for a flow: LC with an SLO (only
//!   for tenants of class `lc`) or BE. Admitted: a handle (1, 2, …) the client puts in later
//!   headers. Refused: `REFUSED` with a [`proto::wire::RefusalCode`] and the registry's sentence
//!   (which numbers did not fit). Handle 0 is the tenant's default flow from the config.
//! * **UNREGISTER** returns the reservation; requests of that flow still queued are answered
//!   `UNKNOWN_HANDLE`. Closing the connection unregisters all its flows.
//! * **READ / WRITE (FUA) / FLUSH / TRIM** are checked (handle, ACL, range, alignment, size)
//!   and then go through the scheduler to the backend; the reply carries the status and the
//!   echoed cookie, out of order.
//! * **STATS** returns a small JSON document: the session's tenant, flows and their token
//!   counters. Its header's handle must be 0 or a registered one (`UNKNOWN_HANDLE` otherwise).
//!
//! # Design
//! Decoding is the codec's two-stage decode: the 40-byte header is validated (magic, version,
//! opcode, payload length against `max_request_bytes`) before the payload is awaited, so a
//! header claiming 4 GB closes the connection after 40 bytes with nothing allocated; once the
//! frame is whole, per-request errors are answered and the connection goes on.
//!
//! Worked example: `WRITE cookie=9 handle=0 offset=4096 len=4096 FUA` from tenant `reader`,
//! whose grant on the volume is read-only: the ACL check answers `READ_ONLY` with cookie 9 and
//! the next request on the connection is decoded as usual; no byte reached storage.
//!
//! # What it leaves out
//! Re-HELLO to switch volume on a live session (open another connection).

use std::sync::Arc;

use proto::wire::{self, Command, Opcode, Status};
use proto::Decode;
use qos::{Flow, SchedShare};

use crate::backend::{Fua, StorageOp};
use crate::config::TenantClass;
use crate::conn::{class_of, ConnCore, Ctx, Peer, ReplyTo, Req, Verdict};
use crate::inplace::FrameInput;
use crate::latency::LatencyWindow;
use crate::sessions::SessionSlot;
use crate::shared::Shared;
use crate::tenant::{AccessKind, Denied, IoCheck, Payload, TenantId, VolumeId};

/// A flow registered on this session.
struct SessionFlow {
    handle: u32,
    flow: Flow,
    qos: qos::TenantHandle,
    slo_p95_ns: u64,
    window: Option<Arc<LatencyWindow>>,
}

/// An authenticated session.
struct Authed {
    tenant: TenantId,
    /// The tenant's session slot, given back at close.
    session: SessionSlot,
    volume: VolumeId,
    flows: Vec<SessionFlow>,
    next_handle: u32,
}

/// Per-connection state of the own protocol.
pub struct NativeSession {
    authed: Option<Authed>,
}

impl Default for NativeSession {
    fn default() -> Self {
        Self::new()
    }
}

fn denied_status(d: Denied) -> Status {
    match d {
        Denied::NoGrant => Status::AccessDenied,
        Denied::OutOfRange => Status::OutOfRange,
        Denied::ReadOnly => Status::ReadOnly,
        Denied::Misaligned => Status::Misaligned,
        Denied::TooLarge => Status::TooLarge,
    }
}

fn refusal_code(code: qos::RefusalCode) -> wire::RefusalCode {
    match code {
        qos::RefusalCode::ReservationsExceedCapacity
        | qos::RefusalCode::HeadroomExceedsCapacity => wire::RefusalCode::CapacityExceeded,
        qos::RefusalCode::SloTighterThanTable => wire::RefusalCode::SloTooStrict,
        qos::RefusalCode::TooManyTenants => wire::RefusalCode::TooManyTenants,
        qos::RefusalCode::InvalidSlo => wire::RefusalCode::InvalidSlo,
    }
}

/// Detaches a session's flow from the worker's scheduler; requests it still had queued go to
/// `unsent`. A flow this worker never attached is a bug: stopped in debug builds, logged in
/// release (its requests stay wherever they are).
fn detach(sched: &mut SchedShare, flow: Flow, unsent: &mut Vec<qos::RequestId>) {
    if let Err(e) = sched.detach(flow, unsent) {
        debug_assert!(false, "detach of an unattached flow: {e}");
        tracing::warn!(error = %e, "detach of an unattached flow");
    }
}

/// Queues a reply with `status` and an optional body.
fn reply(core: &mut ConnCore, opcode: Opcode, status: Status, cookie: u64, body: &[u8]) {
    let head = wire::ReplyHeader::new(opcode, status, cookie, body.len() as u32).encode();
    if body.is_empty() {
        core.push_head(&head);
    } else {
        let mut frame = Vec::with_capacity(head.len() + body.len());
        frame.extend_from_slice(&head);
        frame.extend_from_slice(body);
        core.push_head(&frame);
    }
}

/// Queues an error reply whose body says why.
fn reply_error(
    core: &mut ConnCore,
    opcode: Opcode,
    status: Status,
    cookie: u64,
    code: u32,
    message: &str,
) {
    let mut body = Vec::new();
    wire::ErrorBody { code, message }.encode_into(&mut body);
    reply(core, opcode, status, cookie, &body);
}

impl NativeSession {
    pub fn new() -> NativeSession {
        NativeSession { authed: None }
    }

    /// Decodes and handles frames from `input` while the budget and limits allow.
    /// `psk_identity`: the TLS-PSK identity the connection authenticated with, if any.
    pub fn decode<I: FrameInput>(
        &mut self,
        input: &mut I,
        core: &mut ConnCore,
        ctx: &mut Ctx<'_>,
        psk_identity: Option<&str>,
    ) -> Verdict {
        let max_payload = ctx.shared.config.limits.max_request_bytes.0 as u32;
        while ctx.can_take(core) {
            let data = input.data();
            if data.is_empty() {
                break;
            }
            let header = match wire::decode_request_header(data, max_payload) {
                Ok(Decode::Done { frame, .. }) => frame,
                Ok(Decode::NeedMore { total_bytes }) => {
                    input.set_want_bytes(total_bytes);
                    break;
                }
                Err(e) => return self.fatal(core, &e),
            };
            let frame_len = header.frame_len();
            if data.len() < frame_len {
                input.set_want_bytes(frame_len);
                break;
            }
            let payload = &data[wire::REQUEST_HEADER_BYTES..frame_len];
            match wire::validate_request(&header, payload, max_payload) {
                Ok(request) => self.handle(request, core, ctx, psk_identity),
                Err(e) => {
                    let opcode = e.opcode().unwrap_or(header.opcode);
                    reply_error(core, opcode, e.status(), header.cookie, 0, &e.to_string());
                }
            }
            input.consume(frame_len);
        }
        Verdict::Continue
    }

    /// A header that cannot be trusted: answer if a cookie is known, then close.
    fn fatal(&self, core: &mut ConnCore, e: &wire::WireError) -> Verdict {
        match e.disposition() {
            proto::Disposition::ReplyThenClose { cookie }
            | proto::Disposition::ReplyAndContinue { cookie, .. } => {
                let opcode = e.opcode().unwrap_or(Opcode::Hello);
                reply_error(core, opcode, e.status(), cookie, 0, &e.to_string());
                core.finish("native_bad_frame");
                Verdict::Continue
            }
            proto::Disposition::Close => Verdict::Close("native_bad_frame"),
        }
    }

    fn handle(
        &mut self,
        request: wire::Request<'_>,
        core: &mut ConnCore,
        ctx: &mut Ctx<'_>,
        psk_identity: Option<&str>,
    ) {
        let cookie = request.cookie;
        let opcode = request.command.opcode();
        if let Command::Hello(hello) = &request.command {
            self.hello(hello, cookie, core, ctx, psk_identity);
            return;
        }
        let Some(authed) = self.authed.as_mut() else {
            reply(core, opcode, Status::NotAuthenticated, cookie, &[]);
            return;
        };
        match request.command {
            Command::Hello(_) => unreachable!("handled above"),
            Command::Register(body) => Self::register(authed, body, cookie, core, ctx),
            Command::Unregister => Self::unregister(authed, request.handle, cookie, core, ctx),
            Command::Stats => Self::stats(authed, request.handle, cookie, core, ctx),
            Command::Read {
                offset_bytes,
                length_bytes,
            } => Self::data(
                authed,
                request.handle,
                cookie,
                opcode,
                AccessKind::Read,
                StorageOp::Read { offset_bytes },
                offset_bytes,
                u64::from(length_bytes),
                None,
                core,
                ctx,
            ),
            Command::Write {
                offset_bytes,
                mode,
                data,
            } => {
                let fua = if mode == wire::WriteMode::Fua {
                    Fua::Yes
                } else {
                    Fua::No
                };
                Self::data(
                    authed,
                    request.handle,
                    cookie,
                    opcode,
                    AccessKind::Write,
                    StorageOp::Write { offset_bytes, fua },
                    offset_bytes,
                    data.len() as u64,
                    Some(data),
                    core,
                    ctx,
                )
            }
            Command::Flush => Self::data(
                authed,
                request.handle,
                cookie,
                opcode,
                AccessKind::Flush,
                StorageOp::Flush,
                0,
                0,
                None,
                core,
                ctx,
            ),
            Command::Trim {
                offset_bytes,
                length_bytes,
            } => Self::data(
                authed,
                request.handle,
                cookie,
                opcode,
                AccessKind::Write,
                StorageOp::Trim {
                    offset_bytes,
                    len_bytes: u64::from(length_bytes),
                },
                offset_bytes,
                u64::from(length_bytes),
                None,
                core,
                ctx,
            ),
        }
    }

    fn hello(
        &mut self,
        hello: &wire::HelloBody<'_>,
        cookie: u64,
        core: &mut ConnCore,
        ctx: &mut Ctx<'_>,
        psk_identity: Option<&str>,
    ) {
        if self.authed.is_some() {
            reply_error(
                core,
                Opcode::Hello,
                Status::BadRequest,
                cookie,
                0,
                "session already authenticated",
            );
            return;
        }
        let peer = core.peer.map(|a| a.ip());
        if let Some(ip) = peer {
            let blocked = ctx.shared.lock_auth_throttle().check(ip, ctx.now_ns);
            if let Err(wait_ns) = blocked {
                ctx.shared.metrics.auth_throttled();
                tracing::warn!(
                    target: "audit",
                    event = "refusal",
                    reason = "hello_backoff",
                    peer = %Peer(core.peer),
                    tenant = ?hello.tenant,
                    wait_ms = wait_ns.div_ceil(1_000_000),
                    "HELLO refused unchecked: the address is backing off after failed authentications"
                );
                let message = format!(
                    "too many failed HELLOs from {ip}: retry in {} ms",
                    wait_ns.div_ceil(1_000_000)
                );
                reply_error(core, Opcode::Hello, Status::AuthFailed, cookie, 0, &message);
                return;
            }
        }
        let authenticated = ctx.shared.tenants.authenticate(hello.tenant, hello.secret);
        if let Some(ip) = peer {
            let mut throttle = ctx.shared.lock_auth_throttle();
            match authenticated {
                Some(_) => throttle.succeeded(ip),
                None => {
                    throttle.failed(ip, ctx.now_ns);
                }
            }
        }
        let Some(tenant_id) = authenticated else {
            tracing::warn!(
                target: "audit",
                event = "refusal",
                reason = "hello_auth",
                peer = %Peer(core.peer),
                tenant = ?hello.tenant,
                "HELLO refused: wrong secret or unknown tenant"
            );
            ctx.shared.metrics.auth_failed("hello");
            reply(core, Opcode::Hello, Status::AuthFailed, cookie, &[]);
            return;
        };
        let tenant = ctx.shared.tenants.get(tenant_id);
        if !tenant.admits_psk_identity(psk_identity) {
            tracing::warn!(
                target: "audit",
                event = "refusal",
                reason = "hello_psk_identity",
                peer = %Peer(core.peer),
                tenant = ?tenant.name,
                psk_identity = ?psk_identity.unwrap_or_default(),
                "HELLO refused: the TLS-PSK identity is another tenant"
            );
            ctx.shared.metrics.auth_failed("psk_identity");
            let message = format!(
                "this connection authenticated as TLS-PSK identity {:?}: it may HELLO only as \
                 that tenant or an open one, not as {:?}",
                psk_identity.unwrap_or_default(),
                tenant.name
            );
            reply_error(core, Opcode::Hello, Status::AuthFailed, cookie, 0, &message);
            return;
        }
        let volume = ctx
            .shared
            .volume_by_name(hello.volume)
            .filter(|v| tenant.grant(*v).is_some());
        let Some(volume) = volume else {
            let message = format!(
                "volume {:?} does not exist or is not granted to this tenant",
                hello.volume
            );
            reply_error(
                core,
                Opcode::Hello,
                Status::NoSuchVolume,
                cookie,
                0,
                &message,
            );
            return;
        };
        let access = tenant
            .grant(volume)
            .map_or(wire::Access::ReadOnly, |g| g.access);
        let session = match ctx
            .shared
            .sessions
            .acquire(tenant_id, core.peer.map(|a| a.ip()))
        {
            Ok(slot) => slot,
            Err(refusal) => {
                ctx.shared.metrics.tenant_connection_refused(&tenant.name);
                let message = refusal.explain(&tenant.name, &ctx.shared.config.limits);
                tracing::info!(
                    target: "audit",
                    event = "refusal",
                    reason = "tenant_sessions",
                    peer = %Peer(core.peer),
                    "HELLO refused: {message}"
                );
                reply_error(core, Opcode::Hello, Status::Busy, cookie, 0, &message);
                return;
            }
        };
        let geometry = ctx.shared.volume(volume).geometry;
        let body = wire::HelloReply {
            session_id: ctx.shared.next_session_id(),
            volume_size_bytes: geometry.size_bytes,
            block_size_bytes: geometry.block_bytes,
            max_payload_bytes: ctx.shared.config.limits.max_request_bytes.0 as u32,
            access,
        }
        .encode();
        reply(core, Opcode::Hello, Status::Ok, cookie, &body);
        core.authenticated(ctx.shared, tenant_id);
        self.authed = Some(Authed {
            tenant: tenant_id,
            session,
            volume,
            flows: Vec::new(),
            next_handle: 1,
        });
    }

    fn register(
        authed: &mut Authed,
        body: wire::RegisterBody,
        cookie: u64,
        core: &mut ConnCore,
        ctx: &mut Ctx<'_>,
    ) {
        let tenant = ctx.shared.tenants.get(authed.tenant);
        let (spec, slo_p95_ns) = match body.class {
            wire::RegisterClass::LatencyCritical(slo) => {
                if tenant.class != TenantClass::LatencyCritical {
                    let message = format!(
                        "tenant {:?} is best-effort in the server's config; it may not register a latency-critical SLO",
                        tenant.name
                    );
                    reply_error(
                        core,
                        Opcode::Register,
                        Status::Refused,
                        cookie,
                        wire::RefusalCode::NotPermitted.to_u32(),
                        &message,
                    );
                    return;
                }
                let lc = qos::LcSlo {
                    p95_read_latency_ns: slo.p95_read_latency_ns,
                    iops: slo.iops,
                    read_pct: slo.read_pct,
                    request_bytes: u64::from(slo.request_size_bytes),
                };
                (
                    qos::TenantSpec::LatencyCritical(lc),
                    slo.p95_read_latency_ns,
                )
            }
            wire::RegisterClass::BestEffort => {
                (qos::TenantSpec::BestEffort(qos::BeSpec::default()), 0)
            }
        };
        let admitted = {
            let mut control = ctx.shared.lock_control();
            control.register(authed.tenant, spec).map(|h| {
                let window = control.window(h.id());
                (h, window)
            })
        };
        match admitted {
            Ok((handle, window)) => {
                let flow = ctx.sched.attach(&handle);
                let number = authed.next_handle;
                authed.next_handle += 1;
                authed.flows.push(SessionFlow {
                    handle: number,
                    flow,
                    qos: handle,
                    slo_p95_ns,
                    window,
                });
                let body = wire::RegisterReply { handle: number }.encode();
                reply(core, Opcode::Register, Status::Ok, cookie, &body);
            }
            Err(refusal) => {
                let code = refusal_code(refusal.code()).to_u32();
                reply_error(
                    core,
                    Opcode::Register,
                    Status::Refused,
                    cookie,
                    code,
                    &refusal.to_string(),
                );
            }
        }
    }

    fn unregister(
        authed: &mut Authed,
        handle: u32,
        cookie: u64,
        core: &mut ConnCore,
        ctx: &mut Ctx<'_>,
    ) {
        let Some(pos) = authed.flows.iter().position(|f| f.handle == handle) else {
            reply(core, Opcode::Unregister, Status::UnknownHandle, cookie, &[]);
            return;
        };
        let flow = authed.flows.swap_remove(pos);
        let mut unsent = Vec::new();
        detach(ctx.sched, flow.flow, &mut unsent);
        ctx.shared.lock_control().unregister(flow.qos.id());
        for id in unsent {
            if let Some(req) = ctx.requests.remove(id.0 as usize) {
                core.inflight_reqs -= 1;
                core.inflight_bytes -= req.accounted_bytes;
                if let Some(b) = req.buf {
                    ctx.pool.give(b);
                }
                if let ReplyTo::Native { cookie, opcode } = req.reply {
                    reply(core, opcode, Status::UnknownHandle, cookie, &[]);
                }
            }
        }
        reply(core, Opcode::Unregister, Status::Ok, cookie, &[]);
    }

    /// The session's flows and their counters. `handle` 0 (the default flow) or a registered
    /// one; any other is `UNKNOWN_HANDLE`, as for data requests.
    fn stats(authed: &Authed, handle: u32, cookie: u64, core: &mut ConnCore, ctx: &mut Ctx<'_>) {
        if handle != 0 && !authed.flows.iter().any(|f| f.handle == handle) {
            reply(core, Opcode::Stats, Status::UnknownHandle, cookie, &[]);
            return;
        }
        let tenant = ctx.shared.tenants.get(authed.tenant);
        let mut json = format!(
            "{{\"tenant\":\"{}\",\"volume\":\"{}\",\"flows\":[",
            tenant.name,
            ctx.shared.volume(authed.volume).name
        );
        let default = ctx.shared.default_flows[authed.tenant.0 as usize].as_ref();
        let flows = default
            .map(|h| (0u32, h))
            .into_iter()
            .chain(authed.flows.iter().map(|f| (f.handle, &f.qos)));
        for (n, (handle, h)) in flows.enumerate() {
            let c = h.counters();
            if n > 0 {
                json.push(',');
            }
            json.push_str(&format!(
                "{{\"handle\":{handle},\"class\":\"{}\",\"reservation_mtok_per_sec\":{},\"earned_mtok\":{},\"spent_mtok\":{},\"donated_mtok\":{},\"deficit_hits\":{},\"requests_submitted\":{},\"requests_queued\":{},\"balance_mtok\":{}}}",
                h.class(),
                h.reservation_mtok_per_sec(),
                c.earned_mtok,
                c.spent_mtok,
                c.donated_mtok,
                c.deficit_hits,
                c.requests_submitted,
                c.requests_queued,
                c.balance_mtok
            ));
        }
        json.push_str("]}");
        reply(core, Opcode::Stats, Status::Ok, cookie, json.as_bytes());
    }

    #[allow(clippy::too_many_arguments)]
    fn data(
        authed: &Authed,
        handle: u32,
        cookie: u64,
        opcode: Opcode,
        kind: AccessKind,
        op: StorageOp,
        offset_bytes: u64,
        len_bytes: u64,
        write_data: Option<&[u8]>,
        core: &mut ConnCore,
        ctx: &mut Ctx<'_>,
    ) {
        let (flow, slo_p95_ns, window) = if handle == 0 {
            match ctx.default_flow(authed.tenant) {
                Some(f) => (
                    f,
                    ctx.shared
                        .tenants
                        .get(authed.tenant)
                        .slo
                        .map_or(0, |s| s.p95_read_latency_us * 1000),
                    ctx.shared.default_windows[authed.tenant.0 as usize].clone(),
                ),
                None => {
                    reply_error(
                        core,
                        opcode,
                        Status::UnknownHandle,
                        cookie,
                        0,
                        "this latency-critical tenant has no fixed SLO in the config: REGISTER first and use the returned handle",
                    );
                    return;
                }
            }
        } else {
            match authed.flows.iter().find(|f| f.handle == handle) {
                Some(f) => (f.flow, f.slo_p95_ns, f.window.clone()),
                None => {
                    reply(core, opcode, Status::UnknownHandle, cookie, &[]);
                    return;
                }
            }
        };
        let tenant = ctx.shared.tenants.get(authed.tenant);
        let geometry = ctx.shared.volume(authed.volume).geometry;
        let payload_kind = if matches!(op, StorageOp::Trim { .. }) {
            Payload::RangeOnly
        } else {
            Payload::Carried
        };
        let max = ctx.shared.config.limits.max_request_bytes.0;
        if let Err(d) = tenant.check(
            authed.volume,
            geometry,
            IoCheck::new(kind, offset_bytes, len_bytes, payload_kind),
            max,
        ) {
            ctx.shared.tenant_metrics[authed.tenant.0 as usize]
                .errors
                .inc();
            reply_error(core, opcode, denied_status(d), cookie, 0, &d.to_string());
            return;
        }
        let (buf, accounted, cost_op) = match op {
            StorageOp::Read { .. } => (
                Some(ctx.pool.take(len_bytes as usize)),
                len_bytes,
                qos::Op::Read,
            ),
            StorageOp::Write { .. } => {
                let mut b = ctx.pool.take(len_bytes as usize);
                b.as_mut_slice().copy_from_slice(write_data.unwrap_or(&[]));
                (Some(b), len_bytes, qos::Op::Write)
            }
            StorageOp::Flush => (None, 0, qos::Op::Flush),
            _ => (None, 0, qos::Op::Trim),
        };
        let req = Req {
            conn: core.me,
            reply: ReplyTo::Native { cookie, opcode },
            op,
            volume: authed.volume,
            tenant: authed.tenant,
            buf,
            accounted_bytes: accounted,
            start_ns: ctx.now_ns,
            slo_p95_ns,
            class: class_of(slo_p95_ns),
            window,
        };
        ctx.submit(core, flow, cost_op, len_bytes, req);
    }

    /// The tenant and volume the session authenticated for (None before HELLO).
    pub fn bound(&self) -> Option<(TenantId, VolumeId)> {
        self.authed.as_ref().map(|a| (a.tenant, a.volume))
    }

    /// The session ends (a reload removed its tenant or its grant): its REGISTERed flows are
    /// detached and unregistered now, their queued requests go to `unsent`; the session slot
    /// is given back at [`NativeSession::close`].
    pub fn revoke(
        &mut self,
        shared: &Shared,
        sched: &mut SchedShare,
        unsent: &mut Vec<qos::RequestId>,
    ) {
        if let Some(authed) = self.authed.as_mut() {
            for f in authed.flows.drain(..) {
                detach(sched, f.flow, unsent);
                shared.lock_control().unregister(f.qos.id());
            }
        }
    }

    /// Unregisters the session's flows; their queued requests go to `unsent`.
    pub fn close(
        &mut self,
        shared: &Shared,
        sched: &mut SchedShare,
        unsent: &mut Vec<qos::RequestId>,
    ) {
        if let Some(authed) = self.authed.take() {
            shared.sessions.release(authed.session);
            for f in authed.flows {
                detach(sched, f.flow, unsent);
                shared.lock_control().unregister(f.qos.id());
            }
        }
    }
}
