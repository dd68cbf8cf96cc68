//! The NBD export, server side: fixed-newstyle handshake, then transmission through the same
//! checks, scheduler and backends as the own protocol.
//!
//! # What it implements
//! remote.md's NBD face, driving crate `proto`'s sans-I/O handshake state machine
//! (`proto::nbd::handshake`) and transmission codec. An export binds an NBD name to a volume
//! and a tenant (`[[export]]`): its traffic is that tenant's default flow in the scheduler, its
//! requests are checked against that tenant's ACL, and what it advertises is true:
//!
//! * size = the volume's size; `READ_ONLY` if the tenant's grant is read-only;
//! * `SEND_FLUSH`, `SEND_FUA`, `SEND_TRIM`, `SEND_WRITE_ZEROES` from the backend's
//!   capabilities;
//! * `CAN_MULTI_CONN` only if the backend guarantees that a FLUSH on one connection covers
//!   writes completed on every connection (memory: writes are visible and durable-for-its-
//!   lifetime at completion; file: `fdatasync` of the one file all workers write to);
//! * block sizes: minimum = the volume's block size (512 B by default), preferred 4 KiB,
//!   maximum = `limits.max_request_bytes` (32 MiB). Requests from 1 KiB to 32 MiB are served
//!   whatever the client takes the preferred size to mean (nbdcopy and nbdfuse ignore it).
//!
//! # Design
//! During the handshake, the state machine's output is copied into the connection's output
//! queue after every step, and its questions (which export, which list) are answered from the
//! server's export table at once. On `GO` / `EXPORT_NAME` the connection switches to
//! transmission and the bytes already buffered behind the option are decoded as requests.
//!
//! Worked example: `nbdinfo nbd://127.0.0.1:PORT/default` against the quick start: GO
//! "default" → INFO(EXPORT: 1 GiB, flags HAS_FLAGS|SEND_FLUSH|SEND_FUA|SEND_TRIM|
//! SEND_WRITE_ZEROES|CAN_MULTI_CONN), INFO(BLOCK_SIZE 512/4096/33554432), ACK; nbdinfo then
//! sends DISC, which finishes in-flight requests and closes.
//!
//! A transmission request is decoded header-first: a READ or WRITE longer than the maximum is
//! answered `EINVAL` (the spec's error with simple replies; `EOVERFLOW` belongs to structured
//! replies) and the connection goes on — an oversize WRITE's payload of up to 32 MiB (2^25,
//! which the spec says SHOULD NOT be taken for an attack) is dropped as it arrives, never
//! buffered; a longer one closes the connection after the reply. A bad magic closes the connection
//! once the requests before it are answered. `check_request` rejects flags and commands the export
//! did not advertise (`EINVAL`), writes on read-only exports (`EPERM`) and ranges past the end;
//! then the tenant's ACL decides (`EPERM` for no grant or read-only, `EINVAL` for misaligned or
//! outside the granted ranges).
//!
//! *Structured replies and block status.* Once negotiated, a READ's reply is one `OFFSET_DATA`
//! chunk queued like a simple reply (a 28-byte head plus the payload buffer: still one writev,
//! no copy), and errors on READ/BLOCK_STATUS become `ERROR` chunks. BLOCK_STATUS is answered
//! during decode from the volume's allocation map ([`crate::backend::Volume::allocation`]),
//! without the scheduler: it moves no data. Worked example: on an 8 MiB memory export with
//! 64 KiB written at 1 MiB, `BLOCK_STATUS 0+8 MiB` answers extents
//! `[1 MiB hole|zero, 64 KiB data, 7 MiB - 64 KiB hole|zero]`.
//!
//! *TLS.* With `[tls]` the handshake runs with TLS required; at STARTTLS, decode returns
//! [`Verdict::StartTls`] and the worker switches the socket to [`crate::tls`]. The PSK identity
//! (after the TLS handshake) picks which exports the connection may use: its own tenant's and
//! open tenants'.
//!
//! # What it leaves out
//! Extended headers, `OFFSET_HOLE` chunks (holes are read as zeros in one data chunk), client
//! certificates as identities.
//!
//! # Config keys
//! `[[export]] name, volume, tenant, description`; `[limits] max_request_bytes`.

use proto::nbd::handshake::{
    ExportPurpose, ExportQuery, ExportRefusal, Handshake, HandshakeEvent, HandshakeLimits,
    Negotiated, RefusalKind, TlsPolicy,
};
use proto::nbd::transmission::{self as tx, CommandType, SimpleReply};
use proto::nbd::{
    BlockSizes, Errno, ExportInfo, TransmissionFlags, META_BASE_ALLOCATION_ID, STATE_HOLE,
    STATE_ZERO,
};
use proto::Decode;
use qos::Flow;

use crate::backend::{AllocRun, Fua, StorageOp};
use crate::config::Access;
use crate::conn::{class_of, Closing, ConnCore, Ctx, Peer, ReplyTo, Req, Verdict};
use crate::inplace::FrameInput;
use crate::sessions::SessionSlot;
use crate::shared::{RunState, Shared};
use crate::tenant::{AccessKind, Denied, IoCheck, Payload, TenantId, VolumeId};
use crate::tls::TlsConn;

/// Most extents one BLOCK_STATUS reply carries (8 bytes each: a 8 KiB reply); a client asks
/// again from where the reply ended, as `nbdinfo --map` and `nbdcopy` do.
pub const MAX_BLOCK_STATUS_EXTENTS: usize = 1024;

/// Preferred block size advertised to clients.
pub const PREFERRED_BLOCK_BYTES: u32 = 4096;

/// The export a connection entered transmission with.
pub struct Bound {
    /// The export's name (a reload that removes or re-points it ends the connection).
    export: String,
    tenant: TenantId,
    /// The tenant's session slot, given back at close.
    session: SessionSlot,
    volume: VolumeId,
    flags: TransmissionFlags,
    size_bytes: u64,
    flow: Flow,
    negotiated: Negotiated,
}

/// Per-connection NBD state.
pub enum NbdSession {
    Handshake(Box<Handshake>),
    Transmission(Bound),
}

impl Default for NbdSession {
    fn default() -> Self {
        Self::new()
    }
}

/// What an export looks like to NBD clients (flags built from the backend and the grant).
pub fn export_info(shared: &Shared, name: &str) -> Option<ExportInfo> {
    let export = shared.export_by_name(name)?;
    let volume = shared.volume(export.volume);
    let tenant = shared.tenants.get(export.tenant);
    let access = tenant
        .grant(export.volume)
        .map_or(Access::ReadOnly, |g| g.access);
    let caps = volume.volume.caps();
    let flags = TransmissionFlags::builder(access)
        .flush(caps.flush)
        .fua(caps.fua)
        .trim(caps.trim)
        .write_zeroes(caps.write_zeroes)
        .multi_conn(caps.multi_conn)
        .build();
    Some(ExportInfo {
        name: export.name.clone(),
        description: export.description.clone(),
        size_bytes: volume.geometry.size_bytes,
        flags,
        block_sizes: Some(BlockSizes {
            minimum_bytes: volume.geometry.block_bytes,
            preferred_bytes: PREFERRED_BLOCK_BYTES.max(volume.geometry.block_bytes),
            maximum_bytes: shared.config.limits.max_request_bytes.0 as u32,
        }),
    })
}

fn denied_errno(d: Denied) -> Errno {
    match d {
        Denied::NoGrant | Denied::ReadOnly => Errno::Perm,
        Denied::OutOfRange | Denied::Misaligned => Errno::Inval,
        // Simple replies: an over-length request is EINVAL (EOVERFLOW is for structured ones).
        Denied::TooLarge => Errno::Inval,
    }
}

fn reply_errno(core: &mut ConnCore, cookie: u64, errno: Errno) {
    core.push_head(&SimpleReply::error(cookie, errno).encode());
}

/// An error reply in the form the command needs: READ and BLOCK_STATUS on a session with
/// structured replies get an `ERROR` chunk, everything else a simple reply.
fn reply_error(
    core: &mut ConnCore,
    cookie: u64,
    command: CommandType,
    errno: Errno,
    negotiated: Negotiated,
) {
    let chunked = matches!(command, CommandType::Read | CommandType::BlockStatus);
    if chunked && negotiated.structured_replies {
        core.push_head(&tx::error_chunk(cookie, errno));
    } else {
        reply_errno(core, cookie, errno);
    }
}

/// Whether a connection may use `export_tenant`'s exports: PSK clients only their own
/// tenant's and open tenants'; clients without a PSK identity (no TLS, or a certificate
/// handshake) every export.
fn may_use(shared: &Shared, identity: Option<&str>, export_tenant: TenantId) -> bool {
    shared
        .tenants
        .get(export_tenant)
        .admits_psk_identity(identity)
}

impl NbdSession {
    pub fn new() -> NbdSession {
        NbdSession::Handshake(Box::new(Handshake::new(HandshakeLimits::default())))
    }

    /// Returns the tenant's session slot of a session in transmission.
    pub fn close(&mut self, shared: &Shared) {
        if let NbdSession::Transmission(_) = self {
            if let NbdSession::Transmission(bound) = std::mem::take(self) {
                shared.sessions.release(bound.session);
            }
        }
    }

    /// The export, tenant and volume of a session in transmission.
    pub fn bound(&self) -> Option<(&str, TenantId, VolumeId)> {
        match self {
            NbdSession::Transmission(b) => Some((b.export.as_str(), b.tenant, b.volume)),
            NbdSession::Handshake(_) => None,
        }
    }

    /// A session for this server: TLS required when `[tls]` is configured.
    pub fn for_server(shared: &Shared) -> NbdSession {
        let policy = if shared.tls.is_some() {
            TlsPolicy::Required
        } else {
            TlsPolicy::Off
        };
        NbdSession::Handshake(Box::new(Handshake::with_tls(
            HandshakeLimits::default(),
            policy,
        )))
    }

    /// Queues the greeting.
    pub fn start(&mut self, core: &mut ConnCore) {
        if let NbdSession::Handshake(hs) = self {
            move_output(hs, core);
        }
    }

    /// Decodes buffered input; `tls` is the connection's TLS session, once STARTTLS ran.
    pub fn decode<I: FrameInput>(
        &mut self,
        input: &mut I,
        core: &mut ConnCore,
        ctx: &mut Ctx<'_>,
        tls: Option<&TlsConn>,
    ) -> Verdict {
        if let NbdSession::Handshake(hs) = self {
            let identity = tls.and_then(|t| t.psk_identity());
            match handshake(hs, input, core, ctx, identity) {
                Ok(Outcome::Bound(bound)) => *self = NbdSession::Transmission(bound),
                Ok(Outcome::Wait) => return Verdict::Continue,
                Ok(Outcome::StartTls) => return Verdict::StartTls,
                Err(reason) => return Verdict::Close(reason),
            }
        }
        match self {
            NbdSession::Transmission(bound) => transmission(bound, input, core, ctx),
            NbdSession::Handshake(_) => Verdict::Continue,
        }
    }
}

fn move_output(hs: &mut Handshake, core: &mut ConnCore) {
    let out = hs.pending_output();
    if !out.is_empty() {
        let n = out.len();
        core.push_head(out);
        hs.consume_output(n);
    }
}

/// Where a handshake step left the connection.
enum Outcome {
    /// Needs more input (or is closing).
    Wait,
    /// STARTTLS acknowledged: switch the socket to TLS.
    StartTls,
    /// Entered transmission with this export.
    Bound(Bound),
}

/// Runs the handshake over buffered input.
fn handshake<I: FrameInput>(
    hs: &mut Handshake,
    input: &mut I,
    core: &mut ConnCore,
    ctx: &mut Ctx<'_>,
    identity: Option<&str>,
) -> Result<Outcome, &'static str> {
    loop {
        if core.closing != Closing::Open {
            return Ok(Outcome::Wait);
        }
        let step = match hs.receive(input.data()) {
            Ok(step) => step,
            Err(e) => {
                tracing::debug!(error = %e, "NBD handshake error");
                move_output(hs, core);
                return Err("nbd_handshake");
            }
        };
        input.consume(step.consumed_bytes);
        let event = match step.event {
            Some(HandshakeEvent::ExportRequested(query)) => {
                answer(hs, &query, ctx, identity, core.peer)
            }
            Some(HandshakeEvent::ListRequested) => {
                let list: Vec<(&str, &str)> = ctx
                    .shared
                    .exports
                    .iter()
                    .filter(|e| may_use(ctx.shared, identity, e.tenant))
                    .map(|e| (e.name.as_str(), e.description.as_str()))
                    .collect();
                hs.answer_list(&list);
                None
            }
            other => other,
        };
        move_output(hs, core);
        match event {
            Some(HandshakeEvent::Transmission { info }) => {
                let Some(export) = ctx.shared.export_by_name(&info.name) else {
                    return Err("nbd_export_vanished");
                };
                let tenant = export.tenant;
                let Some(flow) = ctx.default_flow(tenant) else {
                    return Err("nbd_export_without_flow");
                };
                let Ok(session) = ctx
                    .shared
                    .sessions
                    .acquire(tenant, core.peer.map(|a| a.ip()))
                else {
                    // Raced past the check in `answer`: nothing sensible to say any more.
                    let name = &ctx.shared.tenants.get(tenant).name;
                    ctx.shared.metrics.tenant_connection_refused(name);
                    return Err("nbd_tenant_connection_limit");
                };
                core.authenticated(ctx.shared, tenant);
                return Ok(Outcome::Bound(Bound {
                    export: export.name.clone(),
                    negotiated: hs.negotiated(),
                    tenant,
                    session,
                    volume: export.volume,
                    flags: info.flags,
                    size_bytes: info.size_bytes,
                    flow,
                }));
            }
            Some(HandshakeEvent::Closed(_)) => {
                core.finish("nbd_abort");
                return Ok(Outcome::Wait);
            }
            Some(HandshakeEvent::StartTls) => {
                if ctx.shared.tls.is_none() {
                    return Err("nbd_starttls_without_tls");
                }
                return Ok(Outcome::StartTls);
            }
            Some(HandshakeEvent::ExportRequested(_)) | Some(HandshakeEvent::ListRequested) => {
                unreachable!("answered above")
            }
            None => {
                if step.consumed_bytes == 0 {
                    return Ok(Outcome::Wait);
                }
            }
        }
    }
}

fn answer(
    hs: &mut Handshake,
    query: &ExportQuery,
    ctx: &mut Ctx<'_>,
    identity: Option<&str>,
    peer: Option<std::net::SocketAddr>,
) -> Option<HandshakeEvent> {
    let forbidden = ctx
        .shared
        .export_by_name(&query.name)
        .filter(|e| !may_use(ctx.shared, identity, e.tenant));
    let reply = if ctx.shared.state() != RunState::Running {
        Err(ExportRefusal {
            kind: RefusalKind::ShuttingDown,
            message: "server is shutting down".into(),
        })
    } else if let Some(export) = forbidden {
        let tenant = &ctx.shared.tenants.get(export.tenant).name;
        Err(ExportRefusal {
            kind: RefusalKind::Policy,
            message: format!(
                "export {:?} belongs to tenant {tenant:?}; PSK identity {:?} may use only its own tenant's exports and open ones",
                query.name,
                identity.unwrap_or_default()
            ),
        })
    } else {
        match export_info(ctx.shared, &query.name) {
            Some(info) => {
                let tenant = ctx.shared.export_by_name(&query.name).map(|e| e.tenant);
                let refused = tenant.and_then(|t| {
                    let refusal = ctx.shared.sessions.check(t, peer.map(|a| a.ip())).err()?;
                    Some((t, refusal))
                });
                match refused {
                    Some((t, refusal)) => {
                        let name = &ctx.shared.tenants.get(t).name;
                        ctx.shared.metrics.tenant_connection_refused(name);
                        let message = refusal.explain(name, &ctx.shared.config.limits);
                        tracing::info!(
                            target: "audit",
                            event = "refusal",
                            reason = "tenant_sessions",
                            peer = %Peer(peer),
                            "NBD export refused: {message}"
                        );
                        Err(ExportRefusal {
                            kind: RefusalKind::Policy,
                            message,
                        })
                    }
                    None => Ok(info),
                }
            }
            None => {
                let known: Vec<&str> = ctx.shared.exports.iter().map(|e| e.name.as_str()).collect();
                Err(ExportRefusal {
                    kind: RefusalKind::Unknown,
                    message: format!(
                        "no export named {:?}; exports: {}",
                        query.name,
                        known.join(", ")
                    ),
                })
            }
        }
    };
    if let Err(refused) = &reply {
        // Refused for the tenant's session cap is logged above, with the cap.
        let reason = match refused.kind {
            RefusalKind::Unknown => Some("nbd_unknown_export"),
            RefusalKind::ShuttingDown => Some("shutting_down"),
            RefusalKind::Policy if forbidden.is_some() => Some("nbd_export_psk_identity"),
            RefusalKind::Policy => None,
        };
        if let Some(reason) = reason {
            tracing::info!(
                target: "audit",
                event = "refusal",
                reason,
                peer = %Peer(peer),
                export = ?query.name,
                "NBD export refused"
            );
        }
    }
    if query.purpose == ExportPurpose::ExportName && reply.is_err() {
        tracing::debug!(export = %query.name, "NBD_OPT_EXPORT_NAME for an unknown export");
    }
    hs.answer_export(reply)
}

/// Decodes transmission requests.
fn transmission<I: FrameInput>(
    bound: &mut Bound,
    input: &mut I,
    core: &mut ConnCore,
    ctx: &mut Ctx<'_>,
) -> Verdict {
    let max_payload = ctx.shared.config.limits.max_request_bytes.0 as u32;
    while ctx.can_take(core) {
        let data = input.data();
        if data.is_empty() {
            break;
        }
        let header = match tx::decode_request_header(data, max_payload) {
            Ok(Decode::Done { frame, .. }) => frame,
            Ok(Decode::NeedMore { total_bytes }) => {
                input.set_want_bytes(total_bytes);
                break;
            }
            Err(e) => {
                // Only an oversize READ or WRITE is answered; its command picks the reply's
                // form (an ERROR chunk for a READ on a structured-reply session).
                let tx::TransmissionError::TooLarge { command, .. } = e else {
                    return Verdict::Close("nbd_bad_magic");
                };
                ctx.shared.tenant_metrics[bound.tenant.0 as usize]
                    .errors
                    .inc();
                match e.disposition() {
                    proto::Disposition::ReplyAndContinue {
                        cookie,
                        consumed_bytes,
                    } => {
                        reply_error(core, cookie, command, e.errno(), bound.negotiated);
                        // The header, and an oversize WRITE's payload as it arrives.
                        input.discard(consumed_bytes);
                        continue;
                    }
                    proto::Disposition::ReplyThenClose { cookie } => {
                        // A WRITE whose payload is too long to skip.
                        reply_error(core, cookie, command, e.errno(), bound.negotiated);
                        core.finish("nbd_oversize_write");
                        return Verdict::Continue;
                    }
                    proto::Disposition::Close => return Verdict::Close("nbd_bad_magic"),
                }
            }
        };
        let frame_len = tx::REQUEST_HEADER_BYTES + header.payload_len();
        if data.len() < frame_len {
            input.set_want_bytes(frame_len);
            break;
        }
        let payload = &data[tx::REQUEST_HEADER_BYTES..frame_len];
        if header.command == CommandType::Disc {
            input.consume(frame_len);
            core.finish("nbd_disconnect");
            break;
        }
        if let Err(errno) =
            tx::check_request_in(&header, bound.flags, bound.size_bytes, bound.negotiated)
        {
            ctx.shared.tenant_metrics[bound.tenant.0 as usize]
                .errors
                .inc();
            reply_error(core, header.cookie, header.command, errno, bound.negotiated);
            input.consume(frame_len);
            continue;
        }
        if header.command == CommandType::BlockStatus {
            block_status(bound, &header, core, ctx);
            input.consume(frame_len);
            continue;
        }
        request(bound, &header, payload, core, ctx);
        input.consume(frame_len);
    }
    Verdict::Continue
}

fn request(
    bound: &Bound,
    header: &tx::RequestHeader,
    payload: &[u8],
    core: &mut ConnCore,
    ctx: &mut Ctx<'_>,
) {
    let cookie = header.cookie;
    let offset_bytes = header.offset_bytes;
    let len_bytes = u64::from(header.length_bytes);
    let fua = if header.fua() { Fua::Yes } else { Fua::No };
    let (kind, op, payload_kind, cost_op) = match header.command {
        CommandType::Read => (
            AccessKind::Read,
            StorageOp::Read { offset_bytes },
            Payload::Carried,
            qos::Op::Read,
        ),
        CommandType::Write => (
            AccessKind::Write,
            StorageOp::Write { offset_bytes, fua },
            Payload::Carried,
            qos::Op::Write,
        ),
        CommandType::Flush => (
            AccessKind::Flush,
            StorageOp::Flush,
            Payload::RangeOnly,
            qos::Op::Flush,
        ),
        CommandType::Trim => (
            AccessKind::Write,
            StorageOp::Trim {
                offset_bytes,
                len_bytes,
            },
            Payload::RangeOnly,
            qos::Op::Trim,
        ),
        // Priced as a TRIM of its range (the backends deallocate or zero without moving
        // payload; crate `qos` charges a trim unit per started MiB).
        CommandType::WriteZeroes => (
            AccessKind::Write,
            StorageOp::WriteZeroes {
                offset_bytes,
                len_bytes,
                fua,
            },
            Payload::RangeOnly,
            qos::Op::Trim,
        ),
        _ => {
            reply_errno(core, cookie, Errno::Inval);
            return;
        }
    };
    let tenant = ctx.shared.tenants.get(bound.tenant);
    let geometry = ctx.shared.volume(bound.volume).geometry;
    let max = ctx.shared.config.limits.max_request_bytes.0;
    let command = header.command;
    if let Err(d) = tenant.check(
        bound.volume,
        geometry,
        IoCheck::new(kind, offset_bytes, len_bytes, payload_kind),
        max,
    ) {
        ctx.shared.tenant_metrics[bound.tenant.0 as usize]
            .errors
            .inc();
        reply_error(core, cookie, command, denied_errno(d), bound.negotiated);
        return;
    }
    let (buf, accounted, cost_len) = match op {
        StorageOp::Read { .. } => (
            Some(ctx.pool.take(len_bytes as usize)),
            len_bytes,
            len_bytes,
        ),
        StorageOp::Write { .. } => {
            let mut b = ctx.pool.take(payload.len());
            b.as_mut_slice().copy_from_slice(payload);
            (Some(b), len_bytes, len_bytes)
        }
        // Range operations are priced by their range (TRIM and WRITE_ZEROES: a trim unit per
        // started MiB, crate `qos`); they carry no payload, so nothing is held for them.
        StorageOp::WriteZeroes { .. } | StorageOp::Trim { .. } => (None, 0, len_bytes),
        _ => (None, 0, 0),
    };
    let reply = match op {
        StorageOp::Read { offset_bytes } if bound.negotiated.structured_replies => {
            ReplyTo::NbdChunkedRead {
                cookie,
                offset_bytes,
            }
        }
        _ => ReplyTo::Nbd { cookie },
    };
    // From the generation in force: a reload may have changed the tenant's fixed SLO.
    let slo_p95_ns = tenant.slo.map_or(0, |s| s.p95_read_latency_us * 1000);
    let req = Req {
        conn: core.me,
        reply,
        op,
        volume: bound.volume,
        tenant: bound.tenant,
        buf,
        accounted_bytes: accounted,
        start_ns: ctx.now_ns,
        slo_p95_ns,
        class: class_of(slo_p95_ns),
        window: ctx.shared.default_windows[bound.tenant.0 as usize].clone(),
    };
    ctx.submit(core, bound.flow, cost_op, cost_len, req);
}

/// Answers NBD_CMD_BLOCK_STATUS (`base:allocation`) at once from the volume's metadata: the
/// tenant's ACL must cover the range (read access, its blocks rounded outward, so a client's
/// unaligned query length is served); the reply is one BLOCK_STATUS chunk of at most
/// [`MAX_BLOCK_STATUS_EXTENTS`] extents (one with REQ_ONE), never past the requested range.
/// Not charged tokens: it moves no data and touches no device.
fn block_status(bound: &Bound, header: &tx::RequestHeader, core: &mut ConnCore, ctx: &mut Ctx<'_>) {
    let cookie = header.cookie;
    let offset_bytes = header.offset_bytes;
    let len_bytes = u64::from(header.length_bytes);
    let volume = ctx.shared.volume(bound.volume);
    let block = u64::from(volume.geometry.block_bytes.max(1));
    let start = offset_bytes - offset_bytes % block;
    let end = (offset_bytes + len_bytes).div_ceil(block) * block;
    let tenant = ctx.shared.tenants.get(bound.tenant);
    let check = IoCheck::new(AccessKind::Read, start, end - start, Payload::RangeOnly);
    if let Err(d) = tenant.check(bound.volume, volume.geometry, check, u64::MAX) {
        ctx.shared.tenant_metrics[bound.tenant.0 as usize]
            .errors
            .inc();
        reply_error(
            core,
            cookie,
            header.command,
            denied_errno(d),
            bound.negotiated,
        );
        return;
    }
    let max_runs = if header.flags & tx::CMD_FLAG_REQ_ONE != 0 {
        1
    } else {
        MAX_BLOCK_STATUS_EXTENTS
    };
    let mut runs: Vec<AllocRun> = Vec::new();
    if let Err(e) = volume
        .volume
        .allocation(offset_bytes, len_bytes, max_runs, &mut runs)
    {
        tracing::debug!(error = ?e, "block status failed");
        reply_error(core, cookie, header.command, Errno::Io, bound.negotiated);
        return;
    }
    let extents = extents_of(&runs, len_bytes);
    let mut out = Vec::with_capacity(tx::STRUCTURED_REPLY_HEADER_BYTES + 4 + extents.len() * 8);
    tx::encode_block_status(cookie, META_BASE_ALLOCATION_ID, &extents, &mut out);
    core.push_head(&out);
}

/// `base:allocation` extents from allocation runs, cut at `len_bytes` (≤ u32::MAX, the
/// request's length) so none extends past the query.
pub fn extents_of(runs: &[AllocRun], len_bytes: u64) -> Vec<tx::Extent> {
    let mut left = len_bytes;
    let mut extents = Vec::with_capacity(runs.len());
    for run in runs {
        let take = run.len_bytes.min(left);
        if take == 0 {
            break;
        }
        left -= take;
        extents.push(tx::Extent {
            length_bytes: take as u32,
            flags: if run.hole { STATE_HOLE | STATE_ZERO } else { 0 },
        });
    }
    extents
}
