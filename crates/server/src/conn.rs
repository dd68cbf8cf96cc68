//! The connection types: what a worker knows about one client connection and one request.
//!
//! # What it implements
//! The vocabulary shared by the protocol handlers ([`crate::native`], [`crate::nbd`]) and the
//! worker loop: a connection's identity across slot reuse ([`ConnRef`]), its output queue of
//! replies ([`OutFrame`]) and how it is written ([`ConnCore::write_out`]), its in-flight
//! accounting and closing state ([`ConnCore`]), a decoded and checked request on its way to
//! storage ([`Req`], [`ReplyTo`]), and what a worker lends a handler while it decodes ([`Ctx`]).
//!
//! # Design
//! A connection is split in three so a decoded frame can borrow the input buffer
//! ([`crate::inbuf::InBuf`]) while its handler mutates the rest ([`ConnCore`]) and its session
//! state (the worker's `Session`). Replies are queued as frames — an inline header of at most
//! 40 bytes plus optional [`ReplyData`] (a pooled [`IoBuf`], or views of a memory volume's
//! pages, `crate::buf`) — and written with one `writev` gathering up to [`WRITEV_MAX_IOVECS`]
//! parts, so a read's payload is never copied into a send buffer.
//! Worked example: 32 completed 4 KiB NBD reads queue 32 frames (16 B header + 4 KiB payload);
//! one `writev` of 64 iovecs sends 131,584 bytes if the socket takes them, and
//! [`ConnCore::write_out`] returns each sent frame's buffer to the pool.
//!
//! With TLS ([`crate::tls`]) the worker does not call [`ConnCore::write_out`]: the TLS session
//! drains whole frames as plaintext ([`ConnCore::drain_unsent_into`]) and writes ciphertext.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use engine::IoClass;
use qos::{Flow, SchedShare};

use crate::backend::{StorageError, StorageOp};
use crate::buf::{BufPool, IoBuf, ReplyData};
use crate::config::{LimitsConfig, Pacing};
use crate::latency::LatencyWindow;
use crate::memory::Charge;
use crate::shared::{RunState, Shared};
use crate::slab::Slab;
use crate::tenant::{TenantId, VolumeId};

/// Most iovecs one writev gathers.
pub const WRITEV_MAX_IOVECS: usize = 64;

/// Which protocol a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Native,
    Nbd,
}

impl Protocol {
    /// As log events name it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Native => "native",
            Protocol::Nbd => "nbd",
        }
    }
}

/// A client address as audit log lines print it: `IP:PORT`, or `unknown` when the socket had
/// no peer at accept. Every refused authentication and every connection closed on bad input
/// is logged at info or warn with `peer=` (target `audit`), so fail2ban and the like can act on
/// it (docs/server.md, *Audit log*).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub Option<SocketAddr>);

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(a) => write!(f, "{a}"),
            None => f.write_str("unknown"),
        }
    }
}

/// A connection handed from the acceptor to a worker.
pub struct NewConn {
    pub stream: TcpStream,
    /// The address `accept` returned.
    pub peer: Option<SocketAddr>,
    pub protocol: Protocol,
}

/// A reference to a connection slot that survives the slot's reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnRef {
    pub index: u32,
    pub generation: u32,
}

impl ConnRef {
    /// The epoll token of this connection.
    pub fn token(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }
    pub fn from_token(token: u64) -> ConnRef {
        ConnRef {
            index: token as u32,
            generation: (token >> 32) as u32,
        }
    }
}

/// Reply header bytes: inline for the fixed headers, heap for handshake and bodies.
pub enum Head {
    Inline { bytes: [u8; 40], len: u8 },
    Heap(Vec<u8>),
}

impl Head {
    pub fn inline(src: &[u8]) -> Head {
        assert!(src.len() <= 40, "inline head of {} bytes", src.len());
        let mut bytes = [0u8; 40];
        bytes[..src.len()].copy_from_slice(src);
        Head::Inline {
            bytes,
            len: src.len() as u8,
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Head::Inline { bytes, len } => &bytes[..*len as usize],
            Head::Heap(v) => v,
        }
    }
}

/// One queued reply: a header and an optional payload buffer.
pub struct OutFrame {
    pub head: Head,
    pub payload: Option<ReplyData>,
}

impl OutFrame {
    /// The frame's bytes as the slices they lie in, in wire order: the header, then the data.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> + '_ {
        std::iter::once(self.head.as_slice()).chain(self.payload.iter().flat_map(ReplyData::parts))
    }

    /// Bytes this frame puts on the wire.
    pub fn wire_bytes(&self) -> usize {
        self.head.as_slice().len() + self.payload.as_ref().map_or(0, |p| p.len())
    }
}

/// How a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    Open,
    /// Read nothing more; close once in-flight requests are answered and output is sent.
    AfterDrain,
}

/// Everything of a connection except its input buffer (split so a decoded frame can borrow the
/// input while the handler mutates the rest).
pub struct ConnCore {
    pub stream: TcpStream,
    /// The client's address, read once at accept (for the back-off, budgets and audit logs;
    /// a socket whose peer already left has none).
    pub peer: Option<SocketAddr>,
    pub me: ConnRef,
    pub out: VecDeque<OutFrame>,
    /// Bytes of the front frame already written.
    out_sent: usize,
    /// Bytes queued in `out`, counted until the socket took them (replies of every kind).
    pub out_bytes: usize,
    pub inflight_reqs: usize,
    /// Payload bytes of requests decoded and not yet completed.
    pub inflight_bytes: u64,
    /// This connection's charge as last published to the server's memory ledger.
    pub published: Charge,
    /// The tenant its memory is charged to, from authentication on ([`crate::memory`]).
    pub memory_owner: Option<TenantId>,
    /// Not read only because its tenant is at its memory budget (listed in the worker's
    /// `memory_paused`).
    pub memory_paused: bool,
    pub closing: Closing,
    /// The epoll interest set in force.
    pub epoll_events: u32,
    pub last_active_ns: u64,
    pub handshake_deadline_ns: Option<u64>,
    /// Since when the client owes the rest of a frame: (the input's consumed byte count then,
    /// the time it was first seen incomplete). Any frame completed restarts it.
    pub partial_since: Option<(u64, u64)>,
    /// Holds a slot of the unauthenticated budget ([`crate::handshakes`]) until HELLO
    /// succeeds or the NBD handshake binds an export (or the connection closes).
    pub unauthenticated: bool,
    /// Why the connection ends, once decided (the `conn_close` event's reason).
    pub end: Option<&'static str>,
    /// When it was adopted by its worker.
    pub opened_ns: u64,
    /// A send in the kernel points into the queued output (io_uring path): until it completes
    /// no queued frame may be dropped or moved off the queue.
    pub out_lent: bool,
}

/// How writing a connection's output went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Everything was sent, or the socket is full (EPOLLOUT will say when to go on).
    Sent,
    /// The peer is gone: the queue was dropped, nothing more can be delivered.
    PeerGone,
}

impl ConnCore {
    /// A freshly accepted connection.
    pub fn new(
        stream: TcpStream,
        peer: Option<SocketAddr>,
        me: ConnRef,
        now_ns: u64,
        handshake_timeout_ms: u64,
    ) -> ConnCore {
        ConnCore {
            peer,
            stream,
            me,
            out: VecDeque::new(),
            out_sent: 0,
            out_bytes: 0,
            inflight_reqs: 0,
            inflight_bytes: 0,
            published: Charge::ZERO,
            memory_owner: None,
            memory_paused: false,
            closing: Closing::Open,
            epoll_events: 0,
            last_active_ns: now_ns,
            handshake_deadline_ns: (handshake_timeout_ms > 0)
                .then(|| now_ns + handshake_timeout_ms * 1_000_000),
            partial_since: None,
            unauthenticated: peer.is_some(),
            end: None,
            opened_ns: now_ns,
            out_lent: false,
        }
    }

    /// Reads nothing more; closes once what is in flight is answered and sent. `reason` is the
    /// first one given (the `conn_close` event's).
    pub fn finish(&mut self, reason: &'static str) {
        self.closing = Closing::AfterDrain;
        self.end.get_or_insert(reason);
    }

    /// The connection authenticated as `tenant` (HELLO succeeded, or NBD entered
    /// transmission): no handshake deadline any more, its unauthenticated slot goes back, and
    /// what it holds is charged to the tenant from now on.
    pub fn authenticated(&mut self, shared: &Shared, tenant: TenantId) {
        self.handshake_deadline_ns = None;
        self.release_handshake_slot(shared);
        assert!(
            self.memory_owner.is_none(),
            "a connection authenticated twice"
        );
        shared.memory.assign(tenant, self.published);
        self.memory_owner = Some(tenant);
    }

    /// Whether memory stops this connection: its tenant is at its budget
    /// ([`crate::memory`]). Handshakes are never stopped: they hold little (an input buffer, a
    /// HELLO reply or option replies) and there are at most
    /// `limits.max_unauthenticated_connections` of them, so new clients are let in while a
    /// tenant's clients that never read hold its budget; other tenants are not stopped by it
    /// (issue 29: at the server-wide limit no connection was read, new ones included).
    pub fn memory_limited(&self, shared: &Shared) -> bool {
        self.memory_owner
            .is_some_and(|t| shared.memory.tenant_stopped(t))
    }

    /// Gives back the unauthenticated slot, once (authenticated or closing).
    pub fn release_handshake_slot(&mut self, shared: &Shared) {
        if let (true, Some(peer)) = (self.unauthenticated, self.peer) {
            shared.lock_handshakes().give_back(peer.ip());
        }
        self.unauthenticated = false;
    }

    /// Writes as much queued output as the socket takes; sent frames' buffers go to `pool`.
    pub fn write_out(&mut self, pool: &mut BufPool) -> WriteOutcome {
        while !self.out.is_empty() {
            let mut parts: [IoSlice<'_>; WRITEV_MAX_IOVECS] =
                [IoSlice::new(&[]); WRITEV_MAX_IOVECS];
            let count = self.gather_out(&mut parts);
            if count == 0 {
                break;
            }
            let written = match crate::sys::writev(self.stream.as_raw_fd(), &parts[..count]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.discard_output(pool);
                    return WriteOutcome::PeerGone;
                }
            };
            self.advance_out(written, pool);
        }
        WriteOutcome::Sent
    }

    /// Fills `parts` with the queued output not yet sent, in order (headers and payloads, up
    /// to `parts.len()` of them); returns how many it filled.
    pub fn gather_out<'a>(&'a self, parts: &mut [IoSlice<'a>]) -> usize {
        let mut count = 0usize;
        let mut skip = self.out_sent;
        for frame in self.out.iter() {
            for part in frame.parts() {
                if part.is_empty() {
                    continue;
                }
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                if count == parts.len() {
                    return count;
                }
                parts[count] = IoSlice::new(&part[skip..]);
                skip = 0;
                count += 1;
            }
        }
        count
    }

    /// `written` more bytes of the queued output reached the socket: frames sent whole leave
    /// the queue and their payload buffers go to `pool`.
    pub fn advance_out(&mut self, written: usize, pool: &mut BufPool) {
        assert!(!self.out_lent, "output advanced while the kernel holds it");
        let mut advanced = self.out_sent + written;
        while let Some(front) = self.out.front() {
            let len = front.wire_bytes();
            if advanced < len {
                break;
            }
            advanced -= len;
            self.out_bytes -= len;
            if let Some(frame) = self.out.pop_front() {
                if let Some(p) = frame.payload {
                    pool.give_reply_data(p);
                }
            }
        }
        self.out_sent = advanced;
    }

    /// Bytes this connection holds apart from its input buffer: in-flight payloads and queued
    /// output. Reading stops while it is at `limits.max_inflight_bytes`.
    pub fn held_bytes(&self) -> u64 {
        self.inflight_bytes + self.out_bytes as u64
    }

    /// Whether the connection may take more requests as far as its own state goes (open,
    /// under its request and byte limits).
    pub fn within_limits(&self, limits: &LimitsConfig) -> bool {
        self.closing == Closing::Open
            && self.inflight_reqs < limits.max_inflight_requests
            && self.held_bytes() < limits.max_inflight_bytes.0
    }

    /// Whether a connection that stopped being read may be read again: a quarter of its
    /// request and byte allowance free. The hysteresis makes a client kept at its limit (a
    /// throttled pipeliner) be read once per quarter of the allowance, not once per completed
    /// request: one wake-up and one `read` for 64 requests instead of 64.
    pub fn below_resume_mark(&self, limits: &LimitsConfig) -> bool {
        let reqs = limits.max_inflight_requests;
        let bytes = limits.max_inflight_bytes.0;
        self.closing == Closing::Open
            && self.inflight_reqs <= reqs - reqs / 4
            && self.held_bytes() <= bytes - bytes / 4
    }

    /// Moves up to `max_bytes - out.len()` bytes of queued output (skipping what was already
    /// sent) into `out`; payload buffers of frames moved whole go back to `pool`. A frame that
    /// does not fit is moved in part and stays queued (and charged in `out_bytes`) with the
    /// rest, so `out` never exceeds `max_bytes`: the TLS path's ciphertext ahead of the socket
    /// is bounded by [`crate::tls::ENCRYPT_AHEAD_BYTES`] even behind a 32 MiB READ reply. For
    /// the TLS path (encrypt what this returns) and the STARTTLS switch (what was queued
    /// before it goes out in clear).
    pub fn drain_unsent_into(&mut self, out: &mut Vec<u8>, pool: &mut BufPool, max_bytes: usize) {
        assert!(!self.out_lent, "output drained while the kernel holds it");
        while out.len() < max_bytes {
            let Some(frame) = self.out.front() else {
                break;
            };
            let room = max_bytes - out.len();
            let mut skip = self.out_sent;
            for part in frame.parts() {
                let from = skip.min(part.len());
                skip -= from;
                let take = (part.len() - from).min(max_bytes - out.len());
                out.extend_from_slice(&part[from..from + take]);
            }
            let len = frame.wire_bytes();
            let left = len - self.out_sent;
            if left > room {
                self.out_sent += room;
                break;
            }
            self.out_sent = 0;
            self.out_bytes -= len;
            if let Some(p) = self.out.pop_front().and_then(|f| f.payload) {
                pool.give_reply_data(p);
            }
        }
        assert!(out.len() <= max_bytes, "drained {} bytes", out.len());
    }

    /// Drops every queued reply (the peer is gone or the connection closes); payload buffers
    /// go back to `pool`.
    pub fn discard_output(&mut self, pool: &mut BufPool) {
        assert!(!self.out_lent, "output dropped while the kernel holds it");
        for frame in self.out.drain(..) {
            if let Some(p) = frame.payload {
                pool.give_reply_data(p);
            }
        }
        self.out_bytes = 0;
        self.out_sent = 0;
    }

    pub fn push(&mut self, frame: OutFrame) {
        self.out_bytes += frame.wire_bytes();
        self.out.push_back(frame);
    }

    pub fn push_head(&mut self, head: &[u8]) {
        self.push(OutFrame {
            head: if head.len() <= 40 {
                Head::inline(head)
            } else {
                Head::Heap(head.to_vec())
            },
            payload: None,
        });
    }
}

/// A request from decode to reply.
pub struct Req {
    pub conn: ConnRef,
    pub reply: ReplyTo,
    pub op: StorageOp,
    pub volume: VolumeId,
    pub tenant: TenantId,
    pub buf: Option<IoBuf>,
    /// Payload bytes counted against the connection's in-flight byte limit.
    pub accounted_bytes: u64,
    pub start_ns: u64,
    /// The flow's p95 read-latency target (0: none), for SLO-miss counting.
    pub slo_p95_ns: u64,
    /// The flow's I/O class (latency-critical flows are the ones with an SLO), passed to the
    /// backend with the request.
    pub class: IoClass,
    /// The flow's latency window when the closed loop measures it (LC flows, `vrate = "on"`).
    pub window: Option<Arc<LatencyWindow>>,
}

/// How to answer a request.
#[derive(Debug, Clone, Copy)]
pub enum ReplyTo {
    Native {
        cookie: u64,
        opcode: proto::wire::Opcode,
    },
    Nbd {
        cookie: u64,
    },
    /// An NBD READ on a session with structured replies: one `OFFSET_DATA` chunk (or an
    /// `ERROR` chunk).
    NbdChunkedRead {
        cookie: u64,
        offset_bytes: u64,
    },
}

/// What a worker lends a protocol handler while it decodes one connection's input.
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub sched: &'a mut SchedShare,
    pub requests: &'a mut Slab<Req>,
    pub pool: &'a mut BufPool,
    /// Default flows attached on this worker, by tenant id, with the registry's id of the flow
    /// (a reload compares it with the new generation's).
    pub local_flows: &'a mut Vec<Option<(Flow, qos::TenantId)>>,
    pub budget: &'a mut usize,
    pub now_ns: u64,
}

impl Ctx<'_> {
    /// The worker-local flow of a config tenant's default flow (attached on first use).
    pub fn default_flow(&mut self, tenant: TenantId) -> Option<Flow> {
        let t = tenant.0 as usize;
        if let Some(Some((flow, _))) = self.local_flows.get(t) {
            return Some(*flow);
        }
        let handle = self.shared.default_flows.get(t)?.as_ref()?;
        let flow = self.sched.attach(handle);
        if self.local_flows.len() <= t {
            self.local_flows.resize(t + 1, None);
        }
        self.local_flows[t] = Some((flow, handle.id()));
        Some(flow)
    }

    /// Accepts a checked request: records it and queues it in the scheduler.
    pub fn submit(
        &mut self,
        core: &mut ConnCore,
        flow: Flow,
        cost_op: qos::Op,
        cost_len_bytes: u64,
        req: Req,
    ) {
        core.inflight_reqs += 1;
        core.inflight_bytes += req.accounted_bytes;
        // Charged at once, so the tenant's budget holds within a step's batch too.
        assert_eq!(
            core.memory_owner,
            Some(req.tenant),
            "a request charged to another tenant than its connection's"
        );
        let charge = Charge::held(req.accounted_bytes);
        self.shared
            .memory
            .adjust(core.memory_owner, Charge::ZERO, charge);
        core.published = core.published.plus(charge);
        let pacing = self.shared.volume(req.volume).pacing;
        let cost = self.sched.cost_mtok(cost_op, cost_len_bytes);
        let id = qos::RequestId(self.requests.insert(req) as u64);
        match pacing {
            Pacing::Bucket => self.sched.enqueue(flow, cost, id),
            // A volume whose own profile never paces it (memory beside flash volumes).
            Pacing::Unpaced => self.sched.enqueue_unpaced(id),
        }
        *self.budget = self.budget.saturating_sub(1);
    }

    /// Whether the connection may take another request now.
    pub fn can_take(&self, core: &ConnCore) -> bool {
        *self.budget > 0
            && core.within_limits(&self.shared.config.limits)
            && !core.memory_limited(self.shared)
            && self.shared.state() == RunState::Running
    }
}

/// The I/O class of a flow: latency-critical flows are exactly those with an SLO (admission
/// gives every LC flow one; best-effort flows have none).
pub fn class_of(slo_p95_ns: u64) -> IoClass {
    if slo_p95_ns > 0 {
        IoClass::LatencyCritical
    } else {
        IoClass::Throughput
    }
}

/// What decoding decided about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// Malformed input: read and decode nothing more, answer what was decoded before it (its
    /// requests complete, queued replies are sent), then close. The reason is a metrics label.
    /// A client that pipelined a valid READ and then a bad frame in one send gets the READ's
    /// reply before the close (issue 29; `server/tests/replies.rs`).
    Close(&'static str),
    /// NBD_OPT_STARTTLS was acknowledged: queued output goes out in clear, then everything
    /// on the socket is TLS ([`crate::tls`]); decode again once plaintext arrives.
    StartTls,
}

/// Queues the reply to a finished request. `payload` is the data of a successful read, and
/// `None` otherwise (the caller returns other buffers to its pool).
pub fn push_reply(
    core: &mut ConnCore,
    reply: ReplyTo,
    result: Result<(), StorageError>,
    payload: Option<ReplyData>,
) {
    match reply {
        ReplyTo::Native { cookie, opcode } => {
            let status = match result {
                Ok(()) => proto::wire::Status::Ok,
                Err(_) => proto::wire::Status::IoError,
            };
            let len = payload.as_ref().map_or(0, |p| p.len()) as u32;
            let head = proto::wire::ReplyHeader::new(opcode, status, cookie, len).encode();
            core.push(OutFrame {
                head: Head::inline(&head),
                payload,
            });
        }
        ReplyTo::Nbd { cookie } => {
            use proto::nbd::{transmission::SimpleReply, Errno};
            let reply = match result {
                Ok(()) => SimpleReply::ok(cookie),
                Err(StorageError::NoSpace) => SimpleReply::error(cookie, Errno::NoSpc),
                Err(StorageError::NotSupported) => SimpleReply::error(cookie, Errno::NotSup),
                Err(StorageError::Io(_)) => SimpleReply::error(cookie, Errno::Io),
            };
            core.push(OutFrame {
                head: Head::inline(&reply.encode()),
                payload,
            });
        }
        ReplyTo::NbdChunkedRead {
            cookie,
            offset_bytes,
        } => {
            use proto::nbd::{transmission as tx, Errno};
            let errno = match result {
                Ok(()) => {
                    let len = payload.as_ref().map_or(0, |p| p.len()) as u32;
                    let head = tx::offset_data_head(cookie, offset_bytes, len);
                    core.push(OutFrame {
                        head: Head::inline(&head),
                        payload,
                    });
                    return;
                }
                Err(StorageError::NoSpace) => Errno::NoSpc,
                Err(StorageError::NotSupported) => Errno::NotSup,
                Err(StorageError::Io(_)) => Errno::Io,
            };
            // The worker returned a failed read's buffer to its pool already.
            debug_assert!(payload.is_none(), "a failed read carries no payload");
            core.push(OutFrame {
                head: Head::inline(&tx::error_chunk(cookie, errno)),
                payload: None,
            });
        }
    }
}

/// Answers a request that will not run because its session ended (a reload removed or
/// replaced its tenant): own protocol `NOT_AUTHENTICATED` with `why`, NBD `ESHUTDOWN`.
pub fn push_ended(core: &mut ConnCore, reply: ReplyTo, why: &str) {
    use proto::nbd::{transmission as tx, Errno};
    match reply {
        ReplyTo::Native { cookie, opcode } => {
            let mut body = Vec::new();
            proto::wire::ErrorBody {
                code: 0,
                message: why,
            }
            .encode_into(&mut body);
            let status = proto::wire::Status::NotAuthenticated;
            let head =
                proto::wire::ReplyHeader::new(opcode, status, cookie, body.len() as u32).encode();
            let mut frame = head.to_vec();
            frame.extend_from_slice(&body);
            core.push_head(&frame);
        }
        ReplyTo::Nbd { cookie } => {
            let reply = tx::SimpleReply::error(cookie, Errno::Shutdown);
            core.push_head(&reply.encode());
        }
        ReplyTo::NbdChunkedRead { cookie, .. } => {
            core.push_head(&tx::error_chunk(cookie, Errno::Shutdown));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core() -> (ConnCore, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let me = ConnRef {
            index: 0,
            generation: 1,
        };
        (ConnCore::new(server, None, me, 0, 0), client)
    }

    /// The TLS path drains at most what it asks for, even out of a reply larger than that; the
    /// rest stays queued and charged, and comes out next time where the last part ended.
    #[test]
    fn draining_never_takes_more_than_asked_and_keeps_the_rest_charged() {
        let (mut core, _client) = core();
        let mut pool = BufPool::new();
        let mut payload = pool.take(1 << 20);
        for (i, b) in payload.as_mut_slice().iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let expected: Vec<u8> = [&[0xaa; 16][..], payload.as_slice(), &[0xbb; 8]].concat();
        core.push(OutFrame {
            head: Head::inline(&[0xaa; 16]),
            payload: Some(ReplyData::Buf(payload)),
        });
        core.push_head(&[0xbb; 8]);
        let total = expected.len();
        assert_eq!(core.out_bytes, total);
        let max = 256 * 1024;
        let mut got = Vec::new();
        while !core.out.is_empty() {
            let mut out = Vec::new();
            core.drain_unsent_into(&mut out, &mut pool, max);
            assert!(out.len() <= max, "drained {} bytes for {max}", out.len());
            assert!(!out.is_empty(), "no progress");
            got.extend_from_slice(&out);
            // Whatever is still queued is still charged.
            let queued: usize = core.out.iter().map(OutFrame::wire_bytes).sum();
            assert_eq!(core.out_bytes, queued);
        }
        assert_eq!(got.len(), total);
        assert!(
            got == expected,
            "the drained bytes differ from the queued ones"
        );
        assert_eq!(core.out_bytes, 0);
    }

    /// A reply of page views (a memory volume's read across pages) goes out as one part a
    /// page, in order, through `writev`s of at most [`WRITEV_MAX_IOVECS`] parts that the socket
    /// may cut anywhere: the client gets the header and the pages' bytes exactly once.
    #[test]
    fn a_reply_of_page_views_goes_out_whole_and_in_order() {
        use crate::buf::{Page, PageView, PageViews, PAGE_BYTES};
        use std::io::Read;
        use std::sync::Arc;
        let (mut core, mut client) = core();
        let mut pool = BufPool::new();
        let pages = 3 * WRITEV_MAX_IOVECS;
        let mut views = PageViews::new();
        let mut expected = vec![0xaau8; 16];
        for k in 0..pages {
            let page: Page = std::array::from_fn(|i| ((i + 7 * k) % 251) as u8);
            let (off, len) = if k == 0 {
                (100, PAGE_BYTES - 100)
            } else {
                (0, PAGE_BYTES)
            };
            expected.extend_from_slice(&page[off..off + len]);
            views.push(PageView::new(Arc::new(page), off, len));
        }
        core.push(OutFrame {
            head: Head::inline(&[0xaa; 16]),
            payload: Some(ReplyData::Pages(views)),
        });
        assert_eq!(core.out_bytes, expected.len());
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; expected.len()];
            client.read_exact(&mut got).expect("reply bytes");
            (got, expected)
        });
        while !core.out.is_empty() {
            assert_eq!(core.write_out(&mut pool), WriteOutcome::Sent);
        }
        let (got, expected) = reader.join().expect("reader");
        assert!(got == expected, "the sent bytes differ from the pages'");
        assert_eq!(core.out_bytes, 0);
    }
}
