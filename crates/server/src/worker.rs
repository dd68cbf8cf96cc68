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
//! core per throttled pipelining client. On the io_uring socket path `ring_spin = "sized"`
//! replaces the `idle_spin_ns` poll with a spin on the ring sized from the measured wake cost,
//! and `ring_wait = "batch"` sizes the blocking wait in completions ([`crate::ringwait`]).
//!
//! *Throttled rounds.* While throttled, a step woken only by completions reaps and replies but
//! runs no round until that sleep is over: tokens accrue with time, so an early round would
//! release the few requests the last tens of µs paid for, whose completions wake the worker
//! again for another tiny round. With io_uring-punted writes (a buffered file on ext4) that
//! ping-pong left write runs of ~7 writes; deferring the round made them ~14 (1 M pipelined
//! 1 KiB writes of a throttled best-effort tenant, `nbd_cpu_efficiency`; `backend/file/runs.rs`).
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
//! *Socket I/O on io_uring.* With `[dataplane] socket_io = "uring"` plain-TCP connections are
//! not in the epoll set: each has at most one RECV (multishot into the worker's provided
//! buffers, whose whole frames the step's decode parses where they lie, `crate::inplace`; or
//! single-shot into its input buffer's spare room, `socket_recv = "single"`) and one
//! SENDMSG (gathering its queued replies, as the `writev` would) in the worker's socket ring
//! ([`crate::sockring`], `worker/uring.rs`). Steps 1, 2 and 7 become: one `io_uring_enter`
//! submits the receives and sends the last step queued and waits (the same timeout as
//! `epoll_pwait2`); a completed receive is the `read` (its connection is decoded), a completed
//! send the `writev`'s result; a coalescing pause submits and sleeps in the same enter. A
//! receive is armed where epoll would have EPOLLIN, so flow control is unchanged. The file
//! volumes' reads and writes go into the same ring with `file_io = "socket-ring"`
//! (`backend/file.rs`, *One ring per worker*), so one enter submits and waits for the sockets
//! and the device. epoll still watches the wake-up eventfd, TLS connections and the rings of
//! file volumes that keep their own (`file_io = "own-ring"`, the default), through a POLL on its
//! descriptor in the ring. A connection leaves the ring (close, NBD STARTTLS, shutdown)
//! by cancelling its operations and waiting for their completions before anything they point
//! at is freed. A kernel that refuses the ring or an opcode leaves the worker on epoll (logged;
//! `ullstack_worker_socket_ring_ops` stays 0).
//!
//! # Files
//! This file holds the loop and adopting connections; the rest is one idea per file under
//! `worker/`: `table.rs` (the generational connection table), `session.rs` (what a connection
//! holds), `inbox.rs` (the acceptor's hand-over), `input.rs` (read, decode, interest),
//! `storage.rs` (round, submit, complete), `output.rs` (send, close after drain), `tls.rs`
//! (STARTTLS and the PSK back-off), `close.rs` (timeouts, close, shutdown), `generation.rs`
//! (reloads), `uring.rs` (socket I/O on the worker's io_uring).
//!
//! # What it leaves out
//! Work stealing between workers (a connection stays on its worker), zero-copy receive of
//! payloads that span provided buffers, SEND_ZC.
//!
//! # Config keys
//! `[dataplane] batch_limit, idle, idle_spin_ns, coalesce_ns, socket_io, socket_recv, file_io`; `[limits] max_inflight_requests,
//! max_inflight_bytes, max_memory_bytes, max_request_bytes, idle_timeout_ms,
//! handshake_timeout_ms, request_timeout_ms` (a request has a deadline from its first byte to
//! its last: any byte resets the idle timer, only a completed frame resets this one).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use qos::{Flow, SchedShare};

mod close;
mod generation;
mod inbox;
mod input;
mod output;
mod session;
mod storage;
mod table;
mod tls;
mod uring;

pub use inbox::WorkerInbox;
pub use session::{Conn, Session};
use table::ConnTable;

use crate::backend::{Backend, Completion};
use crate::buf::BufPool;
use crate::clock::now_ns;
use crate::coalesce::Coalescer;
use crate::config::IdlePolicy;
use crate::conn::{ConnCore, ConnRef, Peer, Protocol, Req};
use crate::idle::{next_throttled_wait_ns, wait_ns, BACKEND_WAKE_EARLY_NS, THROTTLED_RETRY_MIN_NS};
use crate::inbuf::InBuf;
use crate::metrics::WorkerMetrics;
use crate::native::NativeSession;
use crate::nbd::NbdSession;
use crate::shared::{RunState, Shared, StartError};
use crate::slab::Slab;
use crate::sockring::{Done, SockRing};
use crate::sys::{self, Epoll, Provided};

/// How often timeouts are checked and lazily kept counters synced.
pub const TIMER_SCAN_NS: u64 = 10_000_000;
/// At shutdown, how long a connection may linger so its last replies reach the client.
pub const LINGER_DEADLINE_NS: u64 = 2_000_000_000;
/// Events one epoll_wait returns at most.
const EPOLL_EVENTS: usize = 256;

const TOKEN_WAKE: u64 = u64::MAX;
const TOKEN_BACKEND: u64 = u64::MAX - 1;

/// One dataplane thread.
pub struct Worker {
    index: usize,
    shared: Arc<Shared>,
    inbox: Arc<WorkerInbox>,
    epoll: Epoll,
    /// The socket ring (`socket_io = "uring"`, set up on the worker's thread). Declared before
    /// the connections so that, should the worker unwind with operations in the kernel, the
    /// ring is closed before the buffers they point at are freed.
    ring: Option<SockRing>,
    conns: ConnTable<Conn>,
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
    /// Ring completions not handled yet.
    ring_done: Vec<Done>,
    /// The ring's POLL on the epoll descriptor is in the kernel.
    poll_armed: bool,
    /// Ring connections that want a receive armed before the next wait.
    recv_wanted: Vec<ConnRef>,
    /// Ring connections holding provided buffers for this step's decode (`RingConn::held`).
    held_conns: Vec<ConnRef>,
    /// An empty list swapped with a connection's held buffers while they are decoded.
    held_scratch: Vec<Provided>,
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
            conns: ConnTable::default(),
            requests: Slab::default(),
            backends,
            sched,
            pool: BufPool::new(),
            pending: Vec::new(),
            in_pending: Vec::new(),
            memory_paused: Vec::new(),
            released: Vec::new(),
            completions: Vec::new(),
            ring: None,
            ring_done: Vec::new(),
            poll_armed: false,
            recv_wanted: Vec::new(),
            held_conns: Vec::new(),
            held_scratch: Vec::new(),
            shared,
        };
        w.epoll
            .add(w.inbox.wake_fd(), TOKEN_WAKE, libc::EPOLLIN as u32)
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
        self.ring_start();
        self.attach_default_flows();
        let mut events = vec![sys::empty_event(); EPOLL_EVENTS];
        let mut last_busy_ns = now_ns();
        let mut next_scan_ns = last_busy_ns + TIMER_SCAN_NS;
        let batch_limit = self.shared.config.dataplane.batch_limit;
        let idle = self.shared.config.dataplane.idle;
        // A ring with a sized spin spins in its wait instead (`ring_spin = "sized"`).
        let spin_ns = if self.ring_spins() {
            0
        } else {
            self.shared.config.dataplane.idle_spin_ns
        };
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
            let n = if self.ring.is_some() {
                self.ring_wait(&mut events, timeout_ns)
            } else {
                self.epoll.wait(&mut events, timeout_ns)
            };
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
                        self.inbox.drain_wake();
                        self.adopt(now);
                    }
                    TOKEN_BACKEND => {}
                    _ => {
                        let r = ConnRef::from_token(token);
                        if !self.conns.is_current(r) {
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
            // Ring completions: received bytes are in the input buffers already.
            busy |= self.ring_process(now, &mut readable);
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
            // Provided buffers the budget left undecoded: into the inputs, back to the ring.
            self.release_held();
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
            self.commit_backends();
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
            if !self.ring_hold(until - now) {
                std::thread::sleep(std::time::Duration::from_nanos(until - now));
            }
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
        if self.conns.get(i).is_some() && !self.in_pending[i] {
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
        self.requests.is_empty() && self.conns.iter().all(|c| !c.has_output())
    }

    fn adopt(&mut self, now: u64) {
        // The inbox may hold connections accepted after a reload this step has not seen.
        if self.shared.state() == RunState::Running {
            self.follow_reloads();
        }
        for new in self.inbox.take() {
            let me = self.conns.reserve();
            let index = me.index as usize;
            if index == self.in_pending.len() {
                self.in_pending.push(false);
            }
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
                            self.conns.abandon(me);
                            continue;
                        }
                    }
                }
                _ => None,
            };
            let handshake_ms = self.shared.config.limits.handshake_timeout_ms;
            let ring = if tls.is_none() {
                self.ring_for_new()
            } else {
                None
            };
            let mut conn = Conn {
                input: InBuf::new(),
                core: ConnCore::new(new.stream, new.peer, me, now, handshake_ms),
                session,
                tls,
                psk_noted: false,
                ring,
            };
            if let Session::Nbd(nbd) = &mut conn.session {
                nbd.start(&mut conn.core);
            }
            let events = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
            // A ring connection is not watched by epoll: its receive is armed by its first
            // interest update (the decode below).
            if conn.ring.is_some() {
                conn.core.epoll_events = 0;
            } else if let Err(e) = self
                .epoll
                .add(conn.core.stream.as_raw_fd(), me.token(), events)
            {
                tracing::warn!(error = %e, "cannot watch new connection");
                conn.core.release_handshake_slot(&self.shared);
                self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
                self.conns.abandon(me);
                continue;
            }
            if conn.ring.is_none() {
                conn.core.epoll_events = events;
            }
            self.conns.fill(me, conn);
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
}
