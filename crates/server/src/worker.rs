//! The dataplane worker: one thread, its connections, its rings, its scheduler share, one
//! run-to-completion loop.
//!
//! # What it implements
//! remote.md's dataplane: each worker owns the connections the acceptor gave it, an `epoll`
//! instance over their sockets, a per-volume backend handle (its own io_uring for file volumes),
//! and its share of the QoS scheduler. One loop iteration ("step") does, in order:
//!
//! 1. `epoll_wait` (timeout 0 while busy; see *idle policy*), adopt new connections;
//! 2. **read + decode**: for each readable connection, one `read` into its input buffer
//!    (through the connection's TLS session when it has one, [`crate::tls`]), then
//!    decode frames (own protocol or NBD) until the step's batch budget (`batch_limit` ≤ 64
//!    requests) or the connection's in-flight limits are reached. Every request is **checked
//!    before storage** — authentication, ACL (volume, LBA range, rights), alignment, size — and
//!    a refused one is answered on the spot;
//! 3. **enqueue** accepted requests in the scheduler with their token cost;
//! 4. **schedule**: one round at the current time releases what the tokens allow;
//! 5. **submit** released requests to their volume's backend (the memory backend completes
//!    inline; io_uring ones are pushed and `commit`ted with one `io_uring_enter` per ring);
//! 6. **reap** completions and turn each into a reply (replies go out in completion order, not
//!    request order: cookies say which is which);
//! 7. **send**: one `writev` per connection with output, gathering reply headers and read
//!    payloads without copying them together (a TLS connection encrypts them first);
//! 8. **coalesce**: under pipelined load (steps average ≥ 1.25 requests), sleep before the
//!    next step so it reads a batch, as long as (up to `coalesce_ns`) a longer sleep gathers
//!    a bigger one ([`crate::coalesce`]).
//!
//! # Design
//! Level-triggered epoll; a connection's interest set follows its state (no EPOLLIN while its
//! in-flight limits are hit, its input read-ahead is full, its tenant is at its share of
//! `max_memory_bytes` (handshakes and other tenants are still read then), or it is
//! closing; EPOLLOUT only while output is queued), so a slow
//! reader or a flooding writer cannot make the loop spin. A connection that stopped being read
//! is read (and its buffered input decoded) again only once a quarter of its allowance is
//! free — hysteresis, so a client held at its limit costs one wake-up per batch. Every byte a
//! connection makes the server hold is charged to it until it is gone ([`crate::memory`]):
//! payloads in flight, every queued reply until the socket took it, its input and TLS buffers.
//! Connections and requests live in slabs indexed by small integers; a request's slab index
//! is its scheduler `RequestId` and its backend tag, and a connection reference carries a
//! generation so a completion for a connection that has since closed is recognized and
//! dropped.
//!
//! *Adaptive batching.* The budget caps what one step takes in, not what it waits for: at low
//! load a step handles the one request that arrived (QD1 latency is one step), under load it
//! takes up to 64 so the per-step costs (epoll_wait, the round, io_uring_enter) are shared.
//! Worked example: fio with iodepth 32 on one NBD connection: one `read` returns ~32 headers
//! (28 B each), the step decodes all 32, the memory backend completes them inline, and one
//! `writev` sends 32 × (16 B header + 4 KiB) — about three syscalls for 32 I/Os.
//!
//! *Idle policy.* `spin` never sleeps. `block-after-spin` (default) keeps polling for
//! `idle_spin_ns` after the last useful step, then blocks in `epoll_pwait2` (sockets, the
//! io_uring fds and the wake-up eventfd are all in the set) until something arrives, the next
//! timer (timeouts are checked every [`TIMER_SCAN_NS`]), or [`crate::idle::BACKEND_WAKE_EARLY_NS`] before a
//! time-driven backend's next event (the emulated device), whichever comes first; it never
//! sleeps past a device event (ns timeout, 1 ns timer slack). When the scheduler holds every
//! queued request back (tokens accrue with time, not with events) the worker sleeps
//! [`crate::idle::THROTTLED_RETRY_MIN_NS`] before the next round, doubling up to [`crate::idle::THROTTLED_RETRY_MAX_NS`]
//! while rounds release fewer than [`crate::idle::THROTTLED_BATCH_TARGET`]; it used to poll, which cost a
//! core per throttled pipelining client.
//!
//! *Throttled rounds.* While throttled, a step woken only by completions reaps and replies but
//! runs no round until that sleep is over: tokens accrue with time, so an early round would
//! release the few requests the last tens of µs paid for, whose completions wake the worker
//! again for another tiny round. With io_uring-punted writes (a buffered file on ext4) that
//! ping-pong left write runs of ~7 writes; deferring the round made them ~14 (1 M pipelined
//! 1 KiB writes of a throttled best-effort tenant, `nbd_cpu_efficiency`; `backend/file.rs`).
//! A round still runs at once when the step decoded new requests (they may belong to a flow
//! within its rate), when a latency-critical request is queued (an LC flow is never held by
//! this), or when draining.
//!
//! *Draining.* On shutdown a worker stops reading requests, lets everything already read run
//! to completion, flushes replies, then closes its connections. All of it within
//! `limits.shutdown_grace_ms` of the drain's start: at the deadline a connection still owed
//! a reply, or still holding replies its client has not taken, is closed as it is (its
//! unanswered requests were never acknowledged), and counted in
//! [`crate::shared::Life::cut_connections`]. Worked example: grace 30 s; at SIGTERM a client
//! has a 32 MiB READ reply it never reads and another one has 8 writes at the backend: the
//! writes complete and are answered in milliseconds, that connection closes; the reader's
//! connection is closed at 30 s and the server exits, reporting one connection cut.
//!
//! *Reloads.* Each step, as its wait returns and before anything it woke for is handled, compares
//! the generation in force with the worker's (`worker/generation.rs`): a newer one is adopted
//! then, and what it changes for this worker's connections is applied ([`crate::reload`]). So
//! a connection accepted after a reload was published — a client trying a rotated-out TLS key
//! the moment the reload returned — meets the new config, never the old one.
//!
//! # What it leaves out
//! Work stealing between workers (a connection stays on its worker), zero-copy receive.
//!
//! # Config keys
//! `[dataplane] batch_limit, idle, idle_spin_ns, coalesce_ns`; `[limits] max_inflight_requests,
//! max_inflight_bytes, max_memory_bytes, max_request_bytes, idle_timeout_ms,
//! handshake_timeout_ms, request_timeout_ms` (a request has a deadline from its first byte to
//! its last: any byte resets the idle timer, only a completed frame resets this one).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use qos::{Flow, SchedShare};

mod generation;

use crate::backend::{Backend, Completion, StorageOp, Submitted};
use crate::buf::{BufPool, IoBuf};
use crate::clock::now_ns;
use crate::coalesce::Coalescer;
use crate::config::IdlePolicy;
use crate::conn::{
    push_reply, Closing, ConnCore, ConnRef, Ctx, NewConn, Peer, Protocol, Req, Verdict,
    WriteOutcome,
};
use crate::idle::{next_throttled_wait_ns, wait_ns, BACKEND_WAKE_EARLY_NS, THROTTLED_RETRY_MIN_NS};
use crate::inbuf::InBuf;
use crate::memory::Charge;
use crate::metrics::WorkerMetrics;
use crate::native::NativeSession;
use crate::nbd::NbdSession;
use crate::shared::{RunState, Shared, StartError};
use crate::slab::Slab;
use crate::sys::{self, Epoll, EventFd, SocketQueue};
use crate::tls::{PskAttempt, TlsConn};

/// How often timeouts are checked and lazily kept counters synced.
pub const TIMER_SCAN_NS: u64 = 10_000_000;
/// At shutdown, how long a connection may linger so its last replies reach the client.
pub const LINGER_DEADLINE_NS: u64 = 2_000_000_000;
/// Events one epoll_wait returns at most.
const EPOLL_EVENTS: usize = 256;

const TOKEN_WAKE: u64 = u64::MAX;
const TOKEN_BACKEND: u64 = u64::MAX - 1;

/// Where the acceptor leaves new connections for a worker, and how it wakes it.
pub struct WorkerInbox {
    queue: Mutex<Vec<NewConn>>,
    wake: EventFd,
}

impl WorkerInbox {
    pub fn new() -> io::Result<WorkerInbox> {
        Ok(WorkerInbox {
            queue: Mutex::new(Vec::new()),
            wake: EventFd::new()?,
        })
    }

    pub fn push(&self, conn: NewConn) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
        self.wake.signal();
    }

    pub fn wake(&self) {
        self.wake.signal();
    }

    fn take(&self) -> Vec<NewConn> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Per-protocol session state.
pub enum Session {
    Native(NativeSession),
    Nbd(NbdSession),
}

pub struct Conn {
    pub input: InBuf,
    pub core: ConnCore,
    pub session: Session,
    /// The TLS session, from the first byte (own protocol) or from NBD_OPT_STARTTLS on.
    pub tls: Option<Box<TlsConn>>,
    /// The TLS session's PSK outcome has reached the per-address back-off.
    pub psk_noted: bool,
}

impl Conn {
    /// Whether anything waits for the socket: queued replies or TLS bytes.
    fn has_output(&self) -> bool {
        !self.core.out.is_empty() || self.tls.as_ref().is_some_and(|t| t.pending_output() > 0)
    }
}

/// One dataplane thread.
pub struct Worker {
    index: usize,
    shared: Arc<Shared>,
    inbox: Arc<WorkerInbox>,
    epoll: Epoll,
    conns: Vec<Option<Conn>>,
    generations: Vec<u32>,
    free_conns: Vec<usize>,
    requests: Slab<Req>,
    backends: Vec<Box<dyn Backend>>,
    sched: SchedShare,
    /// Default flows attached here, by tenant id, with the registry's id of each.
    local_flows: Vec<Option<(Flow, qos::TenantId)>>,
    pool: BufPool,
    metrics: WorkerMetrics,
    /// Connections with undecoded input or output to retry this step.
    pending: Vec<usize>,
    /// `in_pending[i]`: slot i is in `pending` (keeps the list free of duplicates).
    in_pending: Vec<bool>,
    released: Vec<qos::RequestId>,
    completions: Vec<Completion>,
    /// Connections not read only because their tenant is at its memory budget; their
    /// interest is restored once the tenant is under it again.
    memory_paused: Vec<usize>,
}

impl Worker {
    pub fn new(
        index: usize,
        shared: Arc<Shared>,
        inbox: Arc<WorkerInbox>,
    ) -> Result<Worker, StartError> {
        let epoll = Epoll::new().map_err(|source| StartError::Os {
            what: "epoll",
            source,
        })?;
        let mut backends = Vec::with_capacity(shared.volumes.len());
        for v in &shared.volumes {
            backends.push(v.volume.clone().attach()?);
        }
        let sched = SchedShare::new(
            shared.config.qos.scheduler,
            shared.bucket.clone(),
            shared.config.qos.tuning,
        )
        .map_err(|e| StartError::Scheduler(e.to_string()))?;
        let w = Worker {
            index,
            metrics: shared.metrics.worker(index),
            local_flows: vec![None; shared.tenants.len()],
            inbox,
            epoll,
            conns: Vec::new(),
            generations: Vec::new(),
            free_conns: Vec::new(),
            requests: Slab::default(),
            backends,
            sched,
            pool: BufPool::new(),
            pending: Vec::new(),
            in_pending: Vec::new(),
            memory_paused: Vec::new(),
            released: Vec::new(),
            completions: Vec::new(),
            shared,
        };
        w.epoll
            .add(w.inbox.wake.raw(), TOKEN_WAKE, libc::EPOLLIN as u32)
            .map_err(|source| StartError::Os {
                what: "epoll registration",
                source,
            })?;
        for b in &w.backends {
            if let Some(fd) = b.wake_fd() {
                w.epoll
                    .add(fd, TOKEN_BACKEND, libc::EPOLLIN as u32)
                    .map_err(|source| StartError::Os {
                        what: "epoll registration",
                        source,
                    })?;
            }
        }
        Ok(w)
    }

    /// The loop; returns when the server drained.
    pub fn run(mut self) {
        sys::set_fine_timer_slack();
        self.attach_default_flows();
        let mut events = vec![sys::empty_event(); EPOLL_EVENTS];
        let mut last_busy_ns = now_ns();
        let mut next_scan_ns = last_busy_ns + TIMER_SCAN_NS;
        let batch_limit = self.shared.config.dataplane.batch_limit;
        let idle = self.shared.config.dataplane.idle;
        let spin_ns = self.shared.config.dataplane.idle_spin_ns;
        let mut readable: Vec<usize> = Vec::with_capacity(EPOLL_EVENTS);
        let mut coalescer = Coalescer::new(self.shared.config.dataplane.coalesce_ns);
        let mut released_last_round = true;
        let mut throttled_wait_ns = THROTTLED_RETRY_MIN_NS;
        // When a throttled worker's next round is due (see *Throttled rounds*).
        let mut throttled_round_ns = 0u64;
        let grace_deadline_ns = loop {
            let now = now_ns();
            let draining = self.shared.state() == RunState::Draining;
            if draining {
                let deadline = self.grace_deadline_ns();
                if self.drained() || now >= deadline {
                    break deadline;
                }
            }
            let backend_next_ns = self.backends.iter().filter_map(|b| b.next_event_ns()).min();
            // Requests held back by the scheduler (the last round released none of them) wait
            // for tokens, which accrue with time: re-run the round after a short wait instead
            // of spinning (a throttled pipelining client otherwise costs a full core).
            let throttled = self.sched.queued() > 0 && !released_last_round;
            // Draining does not spin: what it waits for (completions, a client taking its
            // replies) wakes the worker, and the grace deadline is at most one timer scan away.
            let polling = idle == IdlePolicy::Spin
                || now.saturating_sub(last_busy_ns) < spin_ns
                || (self.sched.queued() > 0 && !throttled)
                || !self.pending.is_empty();
            let mut timeout_ns = wait_ns(polling, now, next_scan_ns, backend_next_ns);
            if throttled && idle != IdlePolicy::Spin {
                timeout_ns = timeout_ns.min(throttled_round_ns.saturating_sub(now));
            }
            let n = self.epoll.wait(&mut events, timeout_ns);
            // After the wait, before anything it woke for: a connection accepted, or a request
            // sent, after a reload was published is handled under the new config.
            if !draining {
                self.follow_reloads();
            }
            self.metrics.loops.inc();
            let now = now_ns();
            let mut busy = n > 0;
            readable.clear();
            for ev in &events[..n] {
                let token = ev.u64;
                let flags = ev.events;
                match token {
                    TOKEN_WAKE => {
                        self.inbox.wake.drain();
                        self.adopt(now);
                    }
                    TOKEN_BACKEND => {}
                    _ => {
                        let r = ConnRef::from_token(token);
                        if self.generations.get(r.index as usize) != Some(&r.generation) {
                            continue;
                        }
                        let i = r.index as usize;
                        if flags & libc::EPOLLOUT as u32 != 0 {
                            self.flush_output(i);
                        }
                        if flags
                            & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP)
                                as u32
                            != 0
                        {
                            readable.push(i);
                        }
                    }
                }
            }
            // 2-3. Read and decode, within the batch budget.
            let mut budget = batch_limit;
            let work = self.take_pending();
            for &i in readable.iter() {
                self.read_conn(i, now);
            }
            for i in work.into_iter().chain(readable.iter().copied()) {
                if budget == 0 {
                    self.mark_pending(i);
                    continue;
                }
                self.decode_conn(i, now, &mut budget);
            }
            let taken = batch_limit - budget;
            if taken > 0 {
                self.metrics.batch.observe(taken as f64);
                coalescer.observe(taken);
                self.metrics
                    .coalesce_window_ns
                    .set(coalescer.window_ns() as i64);
                busy = true;
            }
            // 4-6. Schedule, submit, reap. A throttled worker woken only by completions
            // skips the round (see *Throttled rounds*).
            let round_due = !throttled
                || taken > 0
                || self.sched.queued_lc() > 0
                || now >= throttled_round_ns
                || draining;
            let released = if round_due {
                self.schedule_and_submit(now)
            } else {
                self.metrics.rounds_deferred.inc();
                0
            };
            if throttled && round_due {
                throttled_wait_ns =
                    next_throttled_wait_ns(throttled_wait_ns, released, self.sched.queued() > 0);
            }
            released_last_round = released > 0;
            if round_due && !released_last_round && self.sched.queued() > 0 {
                throttled_round_ns = now + throttled_wait_ns;
            }
            busy |= released_last_round;
            for b in &mut self.backends {
                b.commit();
            }
            busy |= self.reap(now);
            // 7. Send and close.
            self.flush_pending_output();
            self.resume_memory_paused();
            if now >= next_scan_ns {
                next_scan_ns = now + TIMER_SCAN_NS;
                self.scan_timeouts(now);
                self.sched.sync_counters();
            }
            if busy {
                last_busy_ns = now;
            }
            if taken > 0 && !draining && self.pending.is_empty() && self.sched.queued() == 0 {
                if let Some(until) = coalescer.hold_until(now_ns()) {
                    self.hold(until);
                }
            }
        };
        self.close_all(grace_deadline_ns);
    }

    /// When the shutdown grace ends: `limits.shutdown_grace_ms` after the drain began.
    fn grace_deadline_ns(&self) -> u64 {
        let grace_ns = self
            .shared
            .config
            .limits
            .shutdown_grace_ms
            .saturating_mul(1_000_000);
        self.shared.drain_started_ns().saturating_add(grace_ns)
    }

    /// Coalescing pause: sleeps until `until_ns`, or until just before a backend's next event.
    fn hold(&mut self, until_ns: u64) {
        let backend_next = self.backends.iter().filter_map(|b| b.next_event_ns()).min();
        let until = match backend_next {
            Some(t) => until_ns.min(t.saturating_sub(BACKEND_WAKE_EARLY_NS)),
            None => until_ns,
        };
        let now = now_ns();
        if until > now {
            self.metrics.coalesce_waits.inc();
            std::thread::sleep(std::time::Duration::from_nanos(until - now));
        }
    }

    /// Worker 0 attaches every config tenant's default flow at start, idle. The registry counts
    /// a default flow in the BE share (or its LC reservation) from start; a flow attached to no
    /// worker is in no idle aggregate, so what it earns while nobody uses it would never reach
    /// the shared bucket: a BE tenant that REGISTERs a flow next to its unused default flow got
    /// half the device (measured: 5.3 K against 10.2 K IOPS on a 20 K tokens/s profile). Other
    /// workers attach a default flow on first use, as before (the flow then spans workers,
    /// which crate `qos` charges once).
    fn attach_default_flows(&mut self) {
        if self.index != 0 {
            return;
        }
        if self.local_flows.len() < self.shared.default_flows.len() {
            self.local_flows
                .resize(self.shared.default_flows.len(), None);
        }
        for (t, handle) in self.shared.default_flows.iter().enumerate() {
            if let (Some(handle), Some(slot)) = (handle, self.local_flows.get_mut(t)) {
                if slot.is_none() {
                    *slot = Some((self.sched.attach(handle), handle.id()));
                }
            }
        }
    }

    /// Remembers that connection `i` has work for the send/close phase or the next step.
    fn mark_pending(&mut self, i: usize) {
        if self.conns.get(i).is_some_and(|c| c.is_some()) && !self.in_pending[i] {
            self.in_pending[i] = true;
            self.pending.push(i);
        }
    }

    fn take_pending(&mut self) -> Vec<usize> {
        let list = std::mem::take(&mut self.pending);
        for &i in &list {
            self.in_pending[i] = false;
        }
        list
    }

    fn drained(&self) -> bool {
        self.requests.is_empty() && self.conns.iter().flatten().all(|c| !c.has_output())
    }

    fn adopt(&mut self, now: u64) {
        // The inbox may hold connections accepted after a reload this step has not seen.
        if self.shared.state() == RunState::Running {
            self.follow_reloads();
        }
        for new in self.inbox.take() {
            let index = match self.free_conns.pop() {
                Some(i) => i,
                None => {
                    self.conns.push(None);
                    self.generations.push(0);
                    self.in_pending.push(false);
                    self.conns.len() - 1
                }
            };
            self.generations[index] = self.generations[index].wrapping_add(1);
            let me = ConnRef {
                index: index as u32,
                generation: self.generations[index],
            };
            let protocol = new.protocol;
            let peer = new.peer;
            let session = match new.protocol {
                Protocol::Native => Session::Native(NativeSession::new()),
                Protocol::Nbd => Session::Nbd(NbdSession::for_server(&self.shared)),
            };
            // The own protocol speaks TLS from its first byte when TLS is configured.
            let tls = match (new.protocol, &self.shared.tls) {
                (Protocol::Native, Some(server)) => {
                    match server.session(self.tls_blocked(new.peer.map(|a| a.ip()), now)) {
                        Ok(t) => Some(Box::new(t)),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot start TLS for a new connection");
                            self.shared.forget_new_conn(new.peer);
                            self.free_conns.push(index);
                            continue;
                        }
                    }
                }
                _ => None,
            };
            let handshake_ms = self.shared.config.limits.handshake_timeout_ms;
            let mut conn = Conn {
                input: InBuf::new(),
                core: ConnCore::new(new.stream, new.peer, me, now, handshake_ms),
                session,
                tls,
                psk_noted: false,
            };
            if let Session::Nbd(nbd) = &mut conn.session {
                nbd.start(&mut conn.core);
            }
            let events = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
            if let Err(e) = self
                .epoll
                .add(conn.core.stream.as_raw_fd(), me.token(), events)
            {
                tracing::warn!(error = %e, "cannot watch new connection");
                conn.core.release_handshake_slot(&self.shared);
                self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
                self.free_conns.push(index);
                continue;
            }
            conn.core.epoll_events = events;
            self.conns[index] = Some(conn);
            self.metrics.connections.inc();
            tracing::info!(
                event = "conn_open",
                peer = %Peer(peer),
                protocol = protocol.name(),
                worker = self.index,
                "connection opened"
            );
            self.mark_pending(index);
        }
    }

    /// One read from a readable connection.
    fn read_conn(&mut self, i: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return;
        };
        if conn.core.closing != Closing::Open || !conn.input.has_room() {
            return;
        }
        let fd = conn.core.stream.as_raw_fd();
        let result = match conn.tls.as_mut() {
            Some(tls) => tls.read_from(fd, &mut conn.input),
            None => conn.input.read_from(fd),
        };
        if let Ok(n) = result {
            self.metrics.input_read_bytes.inc_by(n as u64);
        }
        self.metrics
            .input_moved_bytes
            .inc_by(conn.input.take_moved_bytes());
        let mut tls_failed = false;
        match result {
            Ok(0) => {
                // Peer closed its side: finish what is in flight, then close.
                conn.core.finish("client_closed");
            }
            Ok(_) => conn.core.last_active_ns = now,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                if e.kind() == io::ErrorKind::InvalidData {
                    tracing::info!(
                        target: "audit",
                        peer = %Peer(conn.core.peer),
                        error = %e,
                        "TLS failed; closing"
                    );
                    self.shared.metrics.protocol_error("tls");
                    tls_failed = true;
                    conn.core.finish("tls");
                }
                conn.core.finish("read_error");
            }
        }
        if conn.tls.is_some() && !conn.psk_noted {
            self.note_psk(i, tls_failed, now);
        }
        self.note_partial(i, now);
    }

    /// Starts, keeps or clears connection `i`'s request deadline: from the first time its
    /// input was seen holding part of a frame, until a frame is completed (see
    /// `limits.request_timeout_ms`; any byte resets the idle timer, this one only a whole
    /// frame). On TLS, bytes that have not become plaintext yet (part of a record) are part of
    /// a frame too, unless a whole frame waits to be decoded (then the server, not the client,
    /// is behind).
    fn note_partial(&mut self, i: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return;
        };
        let consumed = conn.input.consumed_total_bytes();
        let whole_frame_waits =
            conn.input.pending_bytes() > 0 && conn.input.pending_bytes() >= conn.input.want_bytes;
        let owes_record = conn.tls.as_ref().is_some_and(|t| t.owes_record()) && !whole_frame_waits;
        conn.core.partial_since = match conn.core.partial_since {
            _ if !conn.input.incomplete_frame() && !owes_record => None,
            Some((at, since)) if at == consumed => Some((at, since)),
            _ => Some((consumed, now)),
        };
    }

    /// Decodes what a connection's input holds, within the budget.
    fn decode_conn(&mut self, i: usize, now: u64, budget: &mut usize) {
        let Some(mut conn) = self.conns.get_mut(i).and_then(|c| c.take()) else {
            return;
        };
        let mut ctx = Ctx {
            shared: &self.shared,
            sched: &mut self.sched,
            requests: &mut self.requests,
            pool: &mut self.pool,
            local_flows: &mut self.local_flows,
            budget,
            now_ns: now,
        };
        let verdict = match &mut conn.session {
            Session::Native(s) => s.decode(
                &mut conn.input,
                &mut conn.core,
                &mut ctx,
                conn.tls.as_ref().and_then(|t| t.psk_identity()),
            ),
            Session::Nbd(s) => s.decode(
                &mut conn.input,
                &mut conn.core,
                &mut ctx,
                conn.tls.as_deref(),
            ),
        };
        self.conns[i] = Some(conn);
        self.note_partial(i, now);
        match verdict {
            Verdict::Continue => self.mark_pending(i),
            Verdict::StartTls => {
                if let Err(reason) = self.start_tls(i) {
                    self.shared.metrics.protocol_error(reason);
                    self.close_now(i, reason);
                    return;
                }
                self.mark_pending(i);
            }
            Verdict::Close(reason) => {
                self.shared.metrics.protocol_error(reason);
                let peer = self
                    .conns
                    .get(i)
                    .and_then(|c| c.as_ref())
                    .map(|c| c.core.peer);
                tracing::info!(
                    target: "audit",
                    peer = %Peer(peer.flatten()),
                    reason,
                    "connection closed on bad input"
                );
                // Not at once: what was decoded before the bad input is answered first
                // (`flush_pending_output` closes once nothing is in flight or queued).
                if let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) {
                    conn.core.finish(reason);
                }
                self.mark_pending(i);
            }
        }
        self.update_interest(i);
    }

    /// NBD_OPT_STARTTLS was acknowledged: what is queued goes out in clear ahead of TLS, and
    /// input buffered behind the option is the client's first TLS bytes.
    fn start_tls(&mut self, i: usize) -> Result<(), &'static str> {
        let Some(server) = self.shared.tls.clone() else {
            return Err("nbd_starttls_without_tls");
        };
        let Some(conn) = self.conns.get(i).and_then(|c| c.as_ref()) else {
            return Ok(());
        };
        let blocked = self.tls_blocked(conn.core.peer.map(|a| a.ip()), now_ns());
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        let mut tls = server.session(blocked).map_err(|e| {
            tracing::warn!(error = %e, "cannot start TLS");
            "tls_setup"
        })?;
        let mut clear = Vec::new();
        conn.core
            .drain_unsent_into(&mut clear, &mut self.pool, usize::MAX);
        let early = conn.input.data().len();
        tls.start(&clear, conn.input.data());
        conn.input.consume(early);
        let failed = early > 0
            && match tls.advance(&mut conn.input) {
                Ok(true) => false,
                Ok(false) => {
                    conn.core.finish("tls_closed");
                    false
                }
                Err(_) => true,
            };
        conn.tls = Some(Box::new(tls));
        self.note_psk(i, failed, now_ns());
        if failed {
            return Err("tls");
        }
        Ok(())
    }

    /// Whether a TLS session from `peer` must refuse PSK unchecked (its address backs off).
    fn tls_blocked(&self, peer: Option<std::net::IpAddr>, now: u64) -> bool {
        peer.is_some_and(|ip| self.shared.lock_auth_throttle().check(ip, now).is_err())
    }

    /// Reports connection `i`'s PSK outcome to the per-address back-off, once: a handshake
    /// that failed after the client offered a PSK identity is a failed authentication, a
    /// completed one a success, a PSK refused because the address backs off is counted as
    /// throttled ([`crate::throttle`]).
    fn note_psk(&mut self, i: usize, failed: bool, now: u64) {
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return;
        };
        let Some(tls) = conn.tls.as_ref() else {
            return;
        };
        if conn.psk_noted || !(failed || tls.established()) {
            return;
        }
        conn.psk_noted = true;
        let attempt = tls.psk_attempt();
        let peer = conn.core.peer;
        let Some(ip) = peer.map(|a| a.ip()) else {
            return;
        };
        match (attempt, failed) {
            (Some(PskAttempt::RefusedBlocked), _) => {
                self.shared.metrics.auth_throttled();
                tracing::warn!(
                    target: "audit",
                    event = "refusal",
                    reason = "tls_psk_backoff",
                    peer = %Peer(peer),
                    "TLS-PSK handshake refused unchecked: the address is backing off after failed authentications"
                );
            }
            (Some(PskAttempt::Tried), true) => {
                let block_ns = self.shared.lock_auth_throttle().failed(ip, now);
                tracing::warn!(
                    target: "audit",
                    event = "refusal",
                    reason = "tls_psk",
                    peer = %Peer(peer),
                    block_ms = block_ns.div_ceil(1_000_000),
                    "TLS-PSK handshake failed: wrong key or unknown identity"
                );
                self.shared.metrics.auth_failed("tls_psk");
            }
            (Some(PskAttempt::Tried), false) => self.shared.lock_auth_throttle().succeeded(ip),
            _ => {}
        }
    }

    /// One scheduling round; returns how many requests it released to storage.
    fn schedule_and_submit(&mut self, now: u64) -> usize {
        self.released.clear();
        // Nothing queued: skip the round (earnings accrue by elapsed time at the next one, and
        // the shared bucket's max-age rule covers resets while this worker is idle).
        if self.sched.queued() == 0 {
            return 0;
        }
        let deficit_hits = self.sched.round(now, &mut self.released);
        let _ = deficit_hits; // per-tenant deficit hits come from the qos ledgers
        let released = std::mem::take(&mut self.released);
        for id in &released {
            self.submit_one(id.0 as usize, now);
        }
        let count = released.len();
        self.released = released;
        count
    }

    fn submit_one(&mut self, id: usize, now: u64) {
        let Some(req) = self.requests.get_mut(id) else {
            debug_assert!(false, "released request {id} not in the slab");
            return;
        };
        let alive = self.generations.get(req.conn.index as usize) == Some(&req.conn.generation)
            && self.conns[req.conn.index as usize].is_some();
        if !alive {
            if let Some(req) = self.requests.remove(id) {
                self.release_orphan(&req);
                if let Some(b) = req.buf {
                    self.pool.give(b);
                }
            }
            return;
        }
        let buf = req.buf.take().unwrap_or_else(IoBuf::empty);
        let (op, class) = (req.op, req.class);
        let volume = req.volume.0 as usize;
        match self.backends[volume].submit(id as u64, op, class, buf) {
            Submitted::Done(c) => self.complete(c, now),
            Submitted::Pending => {}
        }
    }

    fn reap(&mut self, now: u64) -> bool {
        let mut any = false;
        let mut out = std::mem::take(&mut self.completions);
        for b in &mut self.backends {
            if b.in_flight() > 0 || b.next_event_ns().is_some() {
                b.poll(now, &mut out);
            }
        }
        for c in out.drain(..) {
            any = true;
            self.complete(c, now);
        }
        self.completions = out;
        any
    }

    /// Turns a finished storage operation into a reply.
    fn complete(&mut self, c: Completion, now: u64) {
        let Some(req) = self.requests.remove(c.tag as usize) else {
            debug_assert!(false, "completion for unknown request {}", c.tag);
            return;
        };
        let i = req.conn.index as usize;
        let alive = self.generations.get(i) == Some(&req.conn.generation);
        let Some(conn) = self
            .conns
            .get_mut(i)
            .and_then(|c| c.as_mut())
            .filter(|_| alive)
        else {
            self.release_orphan(&req);
            self.pool.give(c.buf);
            return;
        };
        conn.core.inflight_reqs -= 1;
        conn.core.inflight_bytes -= req.accounted_bytes;
        let m = &self.shared.tenant_metrics[req.tenant.0 as usize];
        // A fresh clock read: `now` is the step's start, which is also the request's start
        // when it completes within the step it was read in (memory backend, cached file I/O).
        let latency_ns = now_ns().max(now).saturating_sub(req.start_ns);
        let ok = c.result.is_ok();
        if ok {
            match req.op {
                StorageOp::Read { .. } => {
                    m.reads.inc();
                    m.read_bytes.inc_by(c.buf.len() as u64);
                    m.read_latency.observe(latency_ns as f64 * 1e-9);
                    if req.slo_p95_ns > 0 && latency_ns > req.slo_p95_ns {
                        m.slo_misses.inc();
                    }
                    if let Some(w) = &req.window {
                        w.record(latency_ns);
                    }
                }
                StorageOp::Write { .. } => {
                    m.writes.inc();
                    m.write_bytes.inc_by(c.buf.len() as u64);
                    m.write_latency.observe(latency_ns as f64 * 1e-9);
                }
                StorageOp::WriteZeroes { .. } => {
                    m.writes.inc();
                    m.write_latency.observe(latency_ns as f64 * 1e-9);
                }
                StorageOp::Flush => {
                    m.flushes.inc();
                }
                StorageOp::Trim { .. } => {
                    m.trims.inc();
                }
            }
        } else {
            m.errors.inc();
        }
        let payload = match (&c.result, req.op) {
            (Ok(()), StorageOp::Read { .. }) => Some(c.buf),
            _ => {
                self.pool.give(c.buf);
                None
            }
        };
        push_reply(&mut conn.core, req.reply, c.result, payload);
        self.mark_pending(i);
    }

    fn flush_pending_output(&mut self) {
        let work = self.take_pending();
        for i in work {
            let Some(conn) = self.conns.get(i).and_then(|c| c.as_ref()) else {
                continue;
            };
            if conn.has_output() {
                self.flush_output(i);
            }
            let Some(conn) = self.conns.get(i).and_then(|c| c.as_ref()) else {
                continue;
            };
            if conn.core.closing == Closing::AfterDrain
                && conn.core.inflight_reqs == 0
                && !conn.has_output()
            {
                let notify = self.conns[i]
                    .as_mut()
                    .and_then(|c| c.tls.as_mut())
                    .is_some_and(|t| t.close_notify());
                if notify {
                    // Send the TLS close_notify first; close once it is out.
                    self.flush_output(i);
                    self.mark_pending(i);
                    continue;
                }
                self.close(i);
                continue;
            }
            self.settle(i);
            if self.may_decode(i) {
                self.mark_pending(i);
            }
            self.update_interest(i);
        }
    }

    /// Writes as much queued output as the socket takes.
    fn flush_output(&mut self, i: usize) {
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return;
        };
        let outcome = match conn.tls.as_mut() {
            Some(tls) => {
                let fd = conn.core.stream.as_raw_fd();
                let (core, pool) = (&mut conn.core, &mut self.pool);
                match tls.pump_out(fd, |buf, max| core.drain_unsent_into(buf, pool, max)) {
                    Ok(()) => WriteOutcome::Sent,
                    Err(_) => {
                        core.discard_output(pool);
                        WriteOutcome::PeerGone
                    }
                }
            }
            None => conn.core.write_out(&mut self.pool),
        };
        if outcome == WriteOutcome::PeerGone {
            conn.core.finish("peer_gone");
            self.mark_pending(i);
        }
        // Output drained below the limit: requests already buffered can be decoded now (no
        // EPOLLIN will come for bytes that were read before).
        self.settle(i);
        if self.may_decode(i) {
            self.mark_pending(i);
        }
        self.update_interest(i);
    }

    /// Whether connection `i` holds a whole undecoded frame and should be decoded again: it is
    /// a quarter below its limits (hysteresis: a connection held at its limit is decoded in
    /// batches, not once per completed request; decoding itself goes on up to the limits).
    fn may_decode(&self, i: usize) -> bool {
        let Some(conn) = self.conns.get(i).and_then(|c| c.as_ref()) else {
            return false;
        };
        !conn.input.data().is_empty()
            && conn.input.data().len() >= conn.input.want_bytes
            && conn.core.below_resume_mark(&self.shared.config.limits)
            && !conn.core.memory_limited(&self.shared)
    }

    /// Publishes connection `i`'s charge (in-flight payloads, queued output, input buffer, TLS
    /// buffers) to the memory ledger, in all and to its tenant.
    fn settle(&mut self, i: usize) {
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return;
        };
        let tls_bytes = conn.tls.as_ref().map_or(0, |t| t.held_bytes());
        let buffers = (conn.input.capacity_bytes() + tls_bytes) as u64;
        let now = Charge::new(conn.core.held_bytes(), buffers);
        self.shared
            .memory
            .adjust(conn.core.memory_owner, conn.core.published, now);
        conn.core.published = now;
    }

    /// Releases the charge of a request whose connection is gone (its buffer is back).
    fn release_orphan(&self, req: &Req) {
        self.shared.memory.adjust(
            Some(req.tenant),
            Charge::held(req.accounted_bytes),
            Charge::ZERO,
        );
    }

    /// Restores reading on connections paused by their tenant's memory budget once the
    /// tenant is under it (checked every step; a blocked worker wakes for its timer scan).
    fn resume_memory_paused(&mut self) {
        if self.memory_paused.is_empty() {
            return;
        }
        let paused = std::mem::take(&mut self.memory_paused);
        for i in paused {
            let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
                continue;
            };
            if !conn.core.memory_paused {
                // The slot closed (and may have been reused) since it was listed.
                continue;
            }
            if conn.core.memory_limited(&self.shared) {
                self.memory_paused.push(i);
                continue;
            }
            conn.core.memory_paused = false;
            self.mark_pending(i);
            self.update_interest(i);
        }
    }

    /// Sets the epoll interest from the connection's state.
    fn update_interest(&mut self, i: usize) {
        let limits = &self.shared.config.limits;
        let running = self.shared.state() == RunState::Running;
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return;
        };
        let reading = conn.core.epoll_events & libc::EPOLLIN as u32 != 0;
        // Hysteresis: a connection being read goes on to its limits; one that stopped is read
        // again once a quarter of its allowance is free.
        let allowed = if reading {
            conn.input.has_room() && conn.core.within_limits(limits)
        } else {
            conn.input.below_resume_mark() && conn.core.below_resume_mark(limits)
        };
        let has_output = conn.has_output();
        let core = &mut conn.core;
        let mut want = 0u32;
        if running && allowed {
            if core.memory_limited(&self.shared) {
                if !core.memory_paused {
                    core.memory_paused = true;
                    self.memory_paused.push(i);
                }
            } else {
                want |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
            }
        }
        if has_output {
            want |= libc::EPOLLOUT as u32;
        }
        if want != core.epoll_events {
            if let Err(e) = self
                .epoll
                .modify(core.stream.as_raw_fd(), core.me.token(), want)
            {
                tracing::warn!(error = %e, "epoll interest change failed");
            }
            core.epoll_events = want;
        }
    }

    fn scan_timeouts(&mut self, now: u64) {
        let idle_ms = self.shared.config.limits.idle_timeout_ms;
        let request_ms = self.shared.config.limits.request_timeout_ms;
        let mut expired = Vec::new();
        for (i, conn) in self.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            let handshake = conn.core.handshake_deadline_ns.is_some_and(|d| now >= d);
            let idle = idle_ms > 0
                && conn.core.inflight_reqs == 0
                && now.saturating_sub(conn.core.last_active_ns) > idle_ms * 1_000_000;
            let trickle = request_ms > 0
                && conn
                    .core
                    .partial_since
                    .is_some_and(|(_, since)| now.saturating_sub(since) > request_ms * 1_000_000);
            if handshake {
                expired.push((i, "handshake_timeout"));
            } else if trickle {
                expired.push((i, "request_timeout"));
            } else if idle {
                expired.push((i, "idle_timeout"));
            }
        }
        for (i, reason) in expired {
            self.shared.metrics.protocol_error(reason);
            let peer = self
                .conns
                .get(i)
                .and_then(|c| c.as_ref())
                .map(|c| c.core.peer);
            if let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) {
                conn.core.end.get_or_insert(reason);
            }
            if reason == "handshake_timeout" {
                tracing::info!(
                    target: "audit",
                    peer = %Peer(peer.flatten()),
                    "closed: no HELLO / NBD handshake within limits.handshake_timeout_ms"
                );
            } else if reason == "request_timeout" {
                tracing::info!(
                    target: "audit",
                    peer = %Peer(peer.flatten()),
                    "closed: a request was not received whole within limits.request_timeout_ms"
                );
            }
            self.close(i);
        }
    }

    /// Closes a connection now, for `reason` unless one was decided before.
    fn close_now(&mut self, i: usize, reason: &'static str) {
        if let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) {
            conn.core.end.get_or_insert(reason);
        }
        self.close(i);
    }

    /// Closes a connection now; requests it has at the backend complete into the void.
    fn close(&mut self, i: usize) {
        let Some(mut conn) = self.conns.get_mut(i).and_then(|c| c.take()) else {
            return;
        };
        self.log_close(&conn);
        // Requests still queued or at the backend stay charged until their buffers return.
        self.shared.memory.adjust(
            conn.core.memory_owner,
            conn.core.published,
            Charge::held(conn.core.inflight_bytes),
        );
        let mut unsent = Vec::new();
        match &mut conn.session {
            Session::Native(s) => s.close(&self.shared, &mut self.sched, &mut unsent),
            Session::Nbd(s) => s.close(&self.shared),
        }
        for id in unsent {
            if let Some(req) = self.requests.remove(id.0 as usize) {
                self.release_orphan(&req);
                if let Some(b) = req.buf {
                    self.pool.give(b);
                }
            }
        }
        conn.core.discard_output(&mut self.pool);
        conn.core.release_handshake_slot(&self.shared);
        // Before the close, so no stale event can name this slot (errors: already gone).
        let _ = self.epoll.delete(conn.core.stream.as_raw_fd());
        drop(conn);
        self.generations[i] = self.generations[i].wrapping_add(1);
        self.free_conns.push(i);
        self.in_pending[i] = false;
        self.metrics.connections.dec();
        self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
    }

    /// The `conn_close` event of a connection being closed.
    fn log_close(&self, conn: &Conn) {
        let (protocol, tenant) = match &conn.session {
            Session::Native(s) => (Protocol::Native, s.bound().map(|(t, _)| t)),
            Session::Nbd(s) => (Protocol::Nbd, s.bound().map(|(_, t, _)| t)),
        };
        let tenant = tenant
            .filter(|t| (t.0 as usize) < self.shared.tenants.len())
            .map_or("-", |t| self.shared.tenants.get(t).name.as_str());
        let open_ms = now_ns().saturating_sub(conn.core.opened_ns) / 1_000_000;
        tracing::info!(
            event = "conn_close",
            peer = %Peer(conn.core.peer),
            protocol = protocol.name(),
            tenant,
            reason = conn.core.end.unwrap_or("closed"),
            open_ms,
            worker = self.index,
            "connection closed"
        );
    }

    /// Closes every connection at shutdown without losing replies already queued, within the
    /// shutdown grace ending at `grace_deadline_ns`.
    ///
    /// Closing a TCP socket whose receive queue holds unread bytes (a client that kept
    /// pipelining after the drain stopped reading) makes Linux answer with RST and discard the
    /// send queue's unsent tail; data arriving after the close does the same. So a connection
    /// with unread input or unacknowledged output lingers: its write side is shut (FIN after
    /// the queued replies), its input is read and dropped, and it is closed once the client
    /// has acknowledged everything or closed, or after [`LINGER_DEADLINE_NS`] — or at the
    /// grace deadline, whichever comes first. A connection closed at the grace deadline with
    /// requests unanswered, replies unsent or replies not yet taken by its client is counted
    /// as cut ([`crate::shared::Life::cut_connections`]).
    fn close_all(&mut self, grace_deadline_ns: u64) {
        let expired = now_ns() >= grace_deadline_ns;
        let mut cut = 0usize;
        let mut lingering = Vec::new();
        for i in 0..self.conns.len() {
            let Some(conn) = self.conns[i].as_ref() else {
                continue;
            };
            if expired && (conn.core.inflight_reqs > 0 || conn.has_output()) {
                cut += 1;
                self.close_now(i, "shutdown_grace");
                continue;
            }
            let fd = conn.core.stream.as_raw_fd();
            if sys::socket_queue_bytes(fd, SocketQueue::Receive) > 0
                || sys::socket_queue_bytes(fd, SocketQueue::Send) > 0
            {
                sys::shutdown_write(fd);
                lingering.push(i);
            } else {
                self.close_now(i, "shutdown");
            }
        }
        let deadline = (now_ns() + LINGER_DEADLINE_NS).min(grace_deadline_ns);
        let mut scratch = vec![0u8; 64 * 1024];
        while !lingering.is_empty() && now_ns() < deadline {
            lingering.retain(|&i| {
                let Some(conn) = self.conns[i].as_ref() else {
                    return false;
                };
                let fd = conn.core.stream.as_raw_fd();
                let done = loop {
                    if now_ns() >= deadline {
                        break false;
                    }
                    match sys::read(fd, &mut scratch) {
                        Ok(n) if n > 0 => continue,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            break sys::socket_queue_bytes(fd, SocketQueue::Send) == 0
                        }
                        // EOF or a dead socket: nothing more to deliver.
                        _ => break true,
                    }
                };
                if done {
                    self.close_now(i, "shutdown");
                }
                !done
            });
            if !lingering.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        let graceless = now_ns() >= grace_deadline_ns;
        for i in lingering {
            if self.conns[i].is_some() {
                if graceless {
                    cut += 1;
                    self.close_now(i, "shutdown_grace");
                } else {
                    self.close_now(i, "shutdown_linger");
                }
            }
        }
        if cut > 0 {
            self.shared.cut_connections.fetch_add(cut, Ordering::AcqRel);
            tracing::warn!(
                event = "stop",
                worker = self.index,
                connections_cut = cut,
                "limits.shutdown_grace_ms passed: connections closed with replies or requests pending"
            );
        }
        // Connections handed over while we were stopping.
        for new in self.inbox.take() {
            self.shared.forget_new_conn(new.peer);
            drop(new);
        }
    }
}
