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
//! parts (up to [`WRITEV_LARGE_IOVECS`] when more are queued: a large reply of page views), so
//! a read's payload is never copied into a send buffer. A cursor keeps where in the front
//! frame the unsent bytes start (its part and the bytes of it sent), so a reply the socket
//! takes in several calls is gathered from there, not walked again from its header.
//! Worked example: 32 completed 4 KiB NBD reads queue 32 frames (16 B header + 4 KiB payload);
//! one `writev` of 64 iovecs sends 131,584 bytes if the socket takes them, and
//! [`ConnCore::write_out`] returns each sent frame's buffer to the pool. A 1 MiB READ of a
//! memory volume queues a header and 256 page views: one `writev` of 257 iovecs; if the
//! socket takes 300,000 bytes, the cursor is at byte 976 of part 74 and the next call
//! gathers from there.
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

/// Most iovecs one gather fills for a `writev` of ordinary output (and for the socket ring's
/// SENDMSG): 32 small replies, a header and a payload each.
pub const WRITEV_MAX_IOVECS: usize = 64;
/// Most iovecs one `writev` gathers when more output than [`WRITEV_MAX_IOVECS`] parts is
/// queued (Linux's `IOV_MAX`): a 1 MiB reply of page views (257 parts) goes in one call, not 5.
pub const WRITEV_LARGE_IOVECS: usize = 1024;

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
        self.parts_from(0)
    }

    /// The slices from part `k` on (part 0 is the header), found without walking the parts
    /// before it.
    pub fn parts_from(&self, k: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let head = (k == 0).then(|| self.head.as_slice());
        let data = self
            .payload
            .as_ref()
            .map(|p| p.parts_from(k.saturating_sub(1)));
        head.into_iter().chain(data.into_iter().flatten())
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
    /// Where in the front frame the unsent bytes start, so a gather resumes there.
    out_cursor: OutCursor,
    /// Bytes queued in `out`, counted until the socket took them (replies of every kind).
    pub out_bytes: usize,
    pub inflight_reqs: usize,
    /// Payload bytes of requests decoded and not yet completed.
    pub inflight_bytes: u64,
    /// Bytes of frames that left `out` with a zero-copy send and wait for its notification
    /// (`crate::sockring::ZcLoans`): still the kernel's to read, so still charged.
    pub zc_lent_bytes: u64,
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

/// Where the unsent bytes of a connection's front frame start: the first of its parts not
/// wholly sent and the bytes of that part already sent (less than its length). A large reply
/// that takes several calls is gathered from here, never from its start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct OutCursor {
    part: usize,
    offset_bytes: usize,
}

/// What a gather of queued output filled.
#[derive(Debug, Clone, Copy)]
struct Gathered {
    /// Slices filled.
    count: usize,
    /// Unsent parts were left out (the slices were too few).
    more: bool,
    /// Parts looked at, the one that did not fit included (what a test checks: parts already
    /// sent are never among them).
    #[cfg_attr(not(test), allow(dead_code))]
    visited: usize,
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
            out_cursor: OutCursor::default(),
            out_bytes: 0,
            zc_lent_bytes: 0,
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
            let written = {
                let mut parts: [IoSlice<'_>; WRITEV_MAX_IOVECS] =
                    [IoSlice::new(&[]); WRITEV_MAX_IOVECS];
                let gathered = self.gather(&mut parts);
                if gathered.count == 0 {
                    break;
                }
                if gathered.more {
                    self.writev_large()
                } else {
                    crate::sys::writev(self.stream.as_raw_fd(), &parts[..gathered.count])
                }
            };
            let written = match written {
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

    /// One `writev` of up to [`WRITEV_LARGE_IOVECS`] parts (more output is queued than
    /// [`WRITEV_MAX_IOVECS`] parts: a large reply of page views).
    #[cold]
    fn writev_large(&self) -> io::Result<usize> {
        let mut parts: [IoSlice<'_>; WRITEV_LARGE_IOVECS] =
            [IoSlice::new(&[]); WRITEV_LARGE_IOVECS];
        let count = self.gather_out(&mut parts);
        crate::sys::writev(self.stream.as_raw_fd(), &parts[..count])
    }

    /// Fills `parts` with the queued output not yet sent, in order (headers and payloads, up
    /// to `parts.len()` of them), starting where the last write stopped; returns how many it
    /// filled.
    pub fn gather_out<'a>(&'a self, parts: &mut [IoSlice<'a>]) -> usize {
        self.gather(parts).count
    }

    /// [`ConnCore::gather_out`], with whether queued output was left out (it fills `parts`
    /// and has more).
    pub fn gather_out_more<'a>(&'a self, parts: &mut [IoSlice<'a>]) -> (usize, bool) {
        let gathered = self.gather(parts);
        (gathered.count, gathered.more)
    }

    /// [`ConnCore::gather_out`], with whether parts were left out and how many it looked at.
    fn gather<'a>(&'a self, parts: &mut [IoSlice<'a>]) -> Gathered {
        let (mut count, mut visited) = (0usize, 0usize);
        for (i, frame) in self.out.iter().enumerate() {
            let (from, mut skip) = if i == 0 {
                (self.out_cursor.part, self.out_cursor.offset_bytes)
            } else {
                (0, 0)
            };
            for part in frame.parts_from(from) {
                visited += 1;
                let part = &part[skip..];
                skip = 0;
                if part.is_empty() {
                    continue;
                }
                if count == parts.len() {
                    return Gathered {
                        count,
                        more: true,
                        visited,
                    };
                }
                parts[count] = IoSlice::new(part);
                count += 1;
            }
        }
        Gathered {
            count,
            more: false,
            visited,
        }
    }

    /// `written` more bytes of the queued output reached the socket: frames sent whole leave
    /// the queue and their payload buffers go to `pool`; the cursor moves past the parts sent
    /// of a frame sent in part (walking only those).
    pub fn advance_out(&mut self, written: usize, pool: &mut BufPool) {
        self.advance_out_with(written, |frame| {
            if let Some(p) = frame.payload {
                pool.give_reply_data(p);
            }
        });
    }

    /// [`ConnCore::advance_out`], handing frames sent whole to `retire` instead of a pool
    /// (a zero-copy send's pages stay lent until its notification, `sockring::zc`).
    pub fn advance_out_with(&mut self, written: usize, mut retire: impl FnMut(OutFrame)) {
        assert!(!self.out_lent, "output advanced while the kernel holds it");
        let mut left = written;
        while let Some(front) = self.out.front() {
            let len = front.wire_bytes();
            let unsent = len - self.out_sent;
            if left < unsent {
                if left > 0 {
                    self.out_sent += left;
                    self.out_cursor = front_cursor_after(front, self.out_cursor, left);
                }
                return;
            }
            left -= unsent;
            self.out_bytes -= len;
            self.out_sent = 0;
            self.out_cursor = OutCursor::default();
            if let Some(frame) = self.out.pop_front() {
                retire(frame);
            }
        }
        assert_eq!(left, 0, "more bytes written than were queued");
    }

    /// Bytes this connection holds apart from its input buffer: in-flight payloads, queued
    /// output and output a zero-copy send still lends the kernel. Reading stops while it is at
    /// `limits.max_inflight_bytes`.
    pub fn held_bytes(&self) -> u64 {
        self.inflight_bytes + self.out_bytes as u64 + self.zc_lent_bytes
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
            let before = out.len();
            let mut skip = self.out_cursor.offset_bytes;
            for part in frame.parts_from(self.out_cursor.part) {
                let take = (part.len() - skip).min(max_bytes - out.len());
                out.extend_from_slice(&part[skip..skip + take]);
                skip = 0;
                if out.len() == max_bytes {
                    break;
                }
            }
            let moved = out.len() - before;
            self.advance_out(moved, pool);
        }
        assert!(out.len() <= max_bytes, "drained {} bytes", out.len());
    }

    /// Drops every queued reply (the peer is gone or the connection closes); payload buffers
    /// go back to `pool`.
    pub fn discard_output(&mut self, pool: &mut BufPool) {
        self.discard_output_with(|frame| {
            if let Some(p) = frame.payload {
                pool.give_reply_data(p);
            }
        });
    }

    /// [`ConnCore::discard_output`], handing every queued frame to `retire` (the front one
    /// may be partly in a zero-copy send's pages, `sockring::zc`).
    pub fn discard_output_with(&mut self, retire: impl FnMut(OutFrame)) {
        assert!(!self.out_lent, "output dropped while the kernel holds it");
        self.out.drain(..).for_each(retire);
        self.out_bytes = 0;
        self.out_sent = 0;
        self.out_cursor = OutCursor::default();
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

/// The cursor `sent` more bytes past `at` within `frame` (fewer than it has unsent), walking
/// only the parts those bytes cover.
fn front_cursor_after(frame: &OutFrame, at: OutCursor, sent: usize) -> OutCursor {
    let mut c = at;
    let mut left = sent;
    for part in frame.parts_from(at.part) {
        let rest = part.len() - c.offset_bytes;
        if left < rest {
            c.offset_bytes += left;
            return c;
        }
        left -= rest;
        c.part += 1;
        c.offset_bytes = 0;
    }
    unreachable!("a cursor moved past its frame's end");
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
    /// page, in order, through `writev`s of at most [`WRITEV_LARGE_IOVECS`] parts (more parts
    /// than one call takes) into a non-blocking socket that cuts them wherever its buffer
    /// fills: the client gets the header and the pages' bytes exactly once.
    #[test]
    fn a_reply_of_page_views_goes_out_whole_and_in_order() {
        use crate::buf::{Page, PageView, PageViews, PAGE_BYTES};
        use std::io::Read;
        use std::sync::Arc;
        let (mut core, mut client) = core();
        let mut pool = BufPool::new();
        core.stream.set_nonblocking(true).expect("non-blocking");
        let pages = WRITEV_LARGE_IOVECS + WRITEV_MAX_IOVECS;
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

    /// The queued parts `gather` hands out, copied up to `take` bytes as a socket that takes
    /// only that much would; then the cursor advances by what was taken.
    fn send_some(
        core: &mut ConnCore,
        pool: &mut BufPool,
        take: usize,
        got: &mut Vec<u8>,
    ) -> Gathered {
        let mut parts = [IoSlice::new(&[]); WRITEV_MAX_IOVECS];
        let gathered = core.gather(&mut parts);
        let mut taken = 0;
        for part in &parts[..gathered.count] {
            let n = part.len().min(take - taken);
            got.extend_from_slice(&part[..n]);
            taken += n;
        }
        core.advance_out(taken, pool);
        gathered
    }

    /// `pages` page views (the first from byte 100 of its page), each page a different pattern;
    /// the views and their bytes.
    fn page_views(pages: usize, seed: usize) -> (crate::buf::PageViews, Vec<u8>) {
        use crate::buf::{Page, PageView, PageViews, PAGE_BYTES};
        let mut views = PageViews::new();
        let mut bytes = Vec::new();
        for k in 0..pages {
            let page: Page = std::array::from_fn(|i| ((i + 7 * k + seed) % 251) as u8);
            let off = if k == 0 { 100 } else { 0 };
            bytes.extend_from_slice(&page[off..]);
            views.push(PageView::new(Arc::new(page), off, PAGE_BYTES - off));
        }
        (views, bytes)
    }

    /// Output sent in pieces the socket cuts anywhere (inside a header, inside a page, on a
    /// part's edge, across frames) comes out whole and in order, through every kind of frame:
    /// a bare header, a pooled buffer, an empty payload, many page views.
    #[test]
    fn output_sent_in_arbitrary_pieces_goes_out_whole_and_in_order() {
        let (mut core, _client) = core();
        let mut pool = BufPool::new();
        let mut expected = Vec::new();
        for f in 0..12u8 {
            let head = [f; 16];
            expected.extend_from_slice(&head);
            let payload = match f % 4 {
                0 => None,
                1 => {
                    let mut b = pool.take(5000);
                    b.as_mut_slice().fill(f ^ 0x5a);
                    expected.extend_from_slice(b.as_slice());
                    Some(ReplyData::Buf(b))
                }
                2 => Some(ReplyData::Buf(IoBuf::empty())),
                _ => {
                    let (views, bytes) = page_views(40 + usize::from(f), usize::from(f));
                    expected.extend_from_slice(&bytes);
                    Some(ReplyData::Pages(views))
                }
            };
            core.push(OutFrame {
                head: Head::inline(&head),
                payload,
            });
        }
        assert_eq!(core.out_bytes, expected.len());
        let mut got = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut calls = 0;
        while !core.out.is_empty() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Cuts from 1 byte to about 4 pages: inside headers, pages and across frames.
            let take = 1 + (x % 17_000) as usize;
            send_some(&mut core, &mut pool, take, &mut got);
            let queued: usize = core.out.iter().map(OutFrame::wire_bytes).sum();
            assert_eq!(core.out_bytes, queued, "what is queued is charged");
            calls += 1;
            assert!(calls < 10_000, "no progress");
        }
        assert_eq!(got.len(), expected.len());
        assert!(
            got == expected,
            "the sent bytes differ from the queued ones"
        );
        assert_eq!(core.out_bytes, 0);
    }

    /// A large reply sent in many calls is gathered from where the last call stopped: over
    /// the whole reply the gathers look at each part once, plus per call the part cut in two,
    /// what was gathered but not taken and the one a full gather could not take (walking the
    /// sent parts again would look at about parts × calls / 2 of them: 33,000 for this
    /// 2,049-part reply).
    #[test]
    fn a_reply_sent_in_many_calls_never_revisits_sent_parts() {
        let (mut core, _client) = core();
        let mut pool = BufPool::new();
        let pages = 2048;
        let (views, bytes) = page_views(pages, 3);
        core.push(OutFrame {
            head: Head::inline(&[0xaa; 16]),
            payload: Some(ReplyData::Pages(views)),
        });
        let mut got = Vec::new();
        let (mut visited, mut calls) = (0usize, 0usize);
        while !core.out.is_empty() {
            // A socket that takes 63 and a half pages of the 64 parts gathered: every cut
            // lands inside a page.
            let g = send_some(&mut core, &mut pool, 63 * 4096 + 2048, &mut got);
            assert!(
                g.visited <= g.count + 1,
                "a gather of {} parts looked at {}",
                g.count,
                g.visited
            );
            visited += g.visited;
            calls += 1;
        }
        assert!(calls > 30, "{calls} calls");
        assert!(
            visited <= pages + 1 + 3 * calls,
            "{visited} parts looked at for {} parts in {calls} calls",
            pages + 1
        );
        assert_eq!(&got[..16], &[0xaa; 16]);
        assert!(got[16..] == bytes[..], "the pages' bytes differ");
    }
}
