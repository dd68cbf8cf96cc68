//! The dataplane worker: one thread, its connections, its rings, its scheduler share, one
//! run-to-completion loop.
//!
//! # What it implements
//! remote.md's dataplane: each worker owns the connections the acceptor gave it, an `epoll`
//! instance over their sockets, a per-volume backend handle (its own io_uring for file volumes),
//! and its share of the QoS scheduler. One loop iteration ("step") does, in order:
//!
//! 1. `epoll_wait` (timeout 0 while busy; see *idle policy*), adopt new connections;
//! 2. **read + decode**: for each readable connection, one `read` into its input buffer, then
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
//!    payloads without copying them together;
//! 8. **coalesce**: under pipelined load (steps average ≥ 1.25 requests), sleep
//!    `coalesce_ns` before the next step so it reads a batch ([`crate::coalesce`]).
//!
//! # Design
//! Level-triggered epoll; a connection's interest set follows its state (no EPOLLIN while its
//! in-flight limits are hit or it is closing, EPOLLOUT only while output is queued), so a slow
//! reader or a flooding writer cannot make the loop spin. Connections and requests live in slabs
//! indexed by small integers; a request's slab index is its scheduler `RequestId` and its
//! backend tag, and a connection reference carries a generation so a completion for a
//! connection that has since closed is recognized and dropped.
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
//! timer (timeouts are checked every [`TIMER_SCAN_NS`]), or [`BACKEND_WAKE_EARLY_NS`] before a
//! time-driven backend's next event (the emulated device), whichever comes first; it never
//! sleeps past a device event (ns timeout, 1 ns timer slack). While the scheduler holds requests
//! back the worker polls (tokens accrue with time, not with events).
//!
//! *Draining.* On shutdown a worker stops reading requests, lets everything already read run
//! to completion, flushes replies, then closes its connections (bounded by
//! [`DRAIN_DEADLINE_NS`]).
//!
//! # What it leaves out
//! Work stealing between workers (a connection stays on its worker), zero-copy receive.
//!
//! # Config keys
//! `[dataplane] batch_limit, idle, idle_spin_ns, coalesce_ns`; `[limits] max_inflight_requests,
//! max_inflight_bytes, max_request_bytes, idle_timeout_ms, handshake_timeout_ms`.

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use engine::IoClass;

use crate::backend::{Backend, Completion, StorageError, StorageOp, Submitted};
use crate::buf::{BufPool, IoBuf};
use crate::coalesce::Coalescer;
use crate::config::IdlePolicy;
use crate::metrics::WorkerMetrics;
use crate::native::NativeSession;
use crate::nbd::NbdSession;
use crate::sched::{Flow, SchedShare};
use crate::server::{EventFd, RunState, Shared, StartError};
use crate::tenant::{TenantId, VolumeId};

/// How often timeouts are checked and lazily kept counters synced.
pub const TIMER_SCAN_NS: u64 = 10_000_000;
/// Longest a draining worker waits for in-flight requests and unsent replies.
pub const DRAIN_DEADLINE_NS: u64 = 10_000_000_000;
/// At shutdown, how long a connection may linger so its last replies reach the client.
pub const LINGER_DEADLINE_NS: u64 = 2_000_000_000;
/// An idle connection's input buffer above this capacity is freed (5,000 idle connections must
/// not pin 5,000 large buffers).
const INPUT_KEEP_BYTES: usize = 256 * 1024;
/// Free space below which the input buffer is compacted or grown before a read.
const INPUT_MIN_READ_BYTES: usize = 16 * 1024;
/// Most iovecs one writev gathers.
const WRITEV_MAX_IOVECS: usize = 64;
/// Events one epoll_wait returns at most.
const EPOLL_EVENTS: usize = 256;

const TOKEN_WAKE: u64 = u64::MAX;
const TOKEN_BACKEND: u64 = u64::MAX - 1;

/// Nanoseconds since the first call in this process (monotonic, shared by all workers so the
/// scheduler's shared bucket sees one time line).
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// How long before a time-driven backend's next event (the emulated device's) a sleeping
/// worker asks to be woken; it polls from there. A blocked thread's wake-up takes 5–50 µs on a
/// loaded VM even with 1 ns timer slack; waking early keeps completions from being late.
pub const BACKEND_WAKE_EARLY_NS: u64 = 30_000;
/// Longest single sleep of an idle worker (it re-checks its state after this).
const MAX_SLEEP_NS: u64 = 100_000_000;

/// How long the next wait may block, ns (0: just poll). An idle worker sleeps until its next
/// timer scan, or until [`BACKEND_WAKE_EARLY_NS`] before a backend's next event, whichever is
/// first — never past the event.
pub fn wait_ns(polling: bool, now_ns: u64, next_scan_ns: u64, backend_next_ns: Option<u64>) -> u64 {
    if polling {
        return 0;
    }
    let mut until = next_scan_ns.min(now_ns + MAX_SLEEP_NS);
    if let Some(t) = backend_next_ns {
        until = until.min(t.saturating_sub(BACKEND_WAKE_EARLY_NS));
    }
    until.saturating_sub(now_ns)
}

/// Asks for 1 ns timer slack on this thread (the default 50 µs would make a worker sleeping
/// until a device event oversleep it).
fn set_fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Which protocol a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Native,
    Nbd,
}

/// A connection handed from the acceptor to a worker.
pub struct NewConn {
    pub stream: TcpStream,
    pub protocol: Protocol,
}

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

/// A reference to a connection slot that survives the slot's reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnRef {
    pub index: u32,
    pub generation: u32,
}

impl ConnRef {
    fn token(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }
    fn from_token(token: u64) -> ConnRef {
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

    fn as_slice(&self) -> &[u8] {
        match self {
            Head::Inline { bytes, len } => &bytes[..*len as usize],
            Head::Heap(v) => v,
        }
    }
}

/// One queued reply: a header and an optional payload buffer.
pub struct OutFrame {
    pub head: Head,
    pub payload: Option<IoBuf>,
}

impl OutFrame {
    fn len(&self) -> usize {
        self.head.as_slice().len() + self.payload.as_ref().map_or(0, |p| p.len())
    }
}

/// The input buffer of a connection: bytes received, not yet decoded, from `start`.
pub struct InBuf {
    buf: Vec<u8>,
    start: usize,
    /// Bytes the decoder said the next frame needs (validated against limits by the codec).
    pub want_bytes: usize,
}

impl InBuf {
    fn new() -> InBuf {
        InBuf {
            buf: Vec::new(),
            start: 0,
            want_bytes: 0,
        }
    }

    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    pub fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.buf.len());
        if self.start >= self.buf.len() {
            self.buf.clear();
            self.start = 0;
            if self.buf.capacity() > INPUT_KEEP_BYTES {
                self.buf = Vec::new();
            }
        }
        self.want_bytes = 0;
    }

    /// Makes room for at least `INPUT_MIN_READ_BYTES` more, and for the whole frame in progress.
    fn prepare_read(&mut self) {
        let pending = self.buf.len() - self.start;
        let need_total = self.want_bytes.max(pending + INPUT_MIN_READ_BYTES);
        if self.start > 0 && self.buf.capacity() - self.start < need_total {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.buf.capacity() - self.start < need_total {
            self.buf.reserve(need_total - (self.buf.len() - self.start));
        }
    }

    /// One `read` into the spare capacity. Ok(0) = peer closed.
    fn read_from(&mut self, fd: RawFd) -> io::Result<usize> {
        self.prepare_read();
        let spare = self.buf.capacity() - self.buf.len();
        // SAFETY: reads at most `spare` bytes into the vector's spare capacity, then extends
        // the length by exactly what the kernel wrote.
        let n = unsafe { libc::read(fd, self.buf.as_mut_ptr().add(self.buf.len()).cast(), spare) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel initialized n bytes.
        unsafe { self.buf.set_len(self.buf.len() + n as usize) };
        Ok(n as usize)
    }
}

/// How a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closing {
    Open,
    /// Read nothing more; close once in-flight requests are answered and output is sent.
    AfterDrain,
}

/// Per-protocol session state.
pub enum Session {
    Native(NativeSession),
    Nbd(NbdSession),
}

/// Everything of a connection except its input buffer (split so a decoded frame can borrow the
/// input while the handler mutates the rest).
pub struct ConnCore {
    pub stream: TcpStream,
    pub me: ConnRef,
    pub out: VecDeque<OutFrame>,
    out_sent: usize,
    pub out_bytes: usize,
    pub inflight_reqs: usize,
    pub inflight_bytes: u64,
    pub closing: Closing,
    epoll_events: u32,
    pub last_active_ns: u64,
    pub handshake_deadline_ns: Option<u64>,
}

impl ConnCore {
    pub fn push(&mut self, frame: OutFrame) {
        self.out_bytes += frame.len();
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

pub struct Conn {
    pub input: InBuf,
    pub core: ConnCore,
    pub session: Session,
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
    pub window: Option<Arc<crate::vrate::LatencyWindow>>,
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
}

/// What a worker lends a protocol handler while it decodes one connection's input.
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub sched: &'a mut SchedShare,
    pub requests: &'a mut Slab<Req>,
    pub pool: &'a mut BufPool,
    pub local_flows: &'a mut Vec<Option<Flow>>,
    pub budget: &'a mut usize,
    pub now_ns: u64,
}

impl Ctx<'_> {
    /// The worker-local flow of a config tenant's default flow (attached on first use).
    pub fn default_flow(&mut self, tenant: TenantId) -> Option<Flow> {
        let slot = &mut self.local_flows[tenant.0 as usize];
        if slot.is_none() {
            let handle = self.shared.default_flows[tenant.0 as usize].as_ref()?;
            *slot = Some(self.sched.attach(handle));
        }
        *slot
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
        let cost = self.sched.cost_mtok(cost_op, cost_len_bytes);
        let id = self.requests.insert(req);
        self.sched.enqueue(flow, cost, qos::RequestId(id as u64));
        *self.budget = self.budget.saturating_sub(1);
    }

    /// Whether the connection may take another request now.
    pub fn can_take(&self, core: &ConnCore) -> bool {
        let limits = &self.shared.config.limits;
        *self.budget > 0
            && core.closing == Closing::Open
            && core.inflight_reqs < limits.max_inflight_requests
            && core.inflight_bytes < limits.max_inflight_bytes.0
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

/// A slab: stable indexes, O(1) insert/remove, free slots reused.
pub struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, item: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                debug_assert!(self.items[i].is_none());
                self.items[i] = Some(item);
                i
            }
            None => {
                self.items.push(Some(item));
                self.items.len() - 1
            }
        }
    }

    pub fn remove(&mut self, i: usize) -> Option<T> {
        let item = self.items.get_mut(i)?.take();
        if item.is_some() {
            self.free.push(i);
        }
        item
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.items.get_mut(i)?.as_mut()
    }

    pub fn len(&self) -> usize {
        self.items.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One dataplane thread.
pub struct Worker {
    index: usize,
    shared: Arc<Shared>,
    inbox: Arc<WorkerInbox>,
    epoll: OwnedFd,
    conns: Vec<Option<Conn>>,
    generations: Vec<u32>,
    free_conns: Vec<usize>,
    requests: Slab<Req>,
    backends: Vec<Box<dyn Backend>>,
    sched: SchedShare,
    local_flows: Vec<Option<Flow>>,
    pool: BufPool,
    metrics: WorkerMetrics,
    /// Connections with undecoded input or output to retry this step.
    pending: Vec<usize>,
    /// `in_pending[i]`: slot i is in `pending` (keeps the list free of duplicates).
    in_pending: Vec<bool>,
    released: Vec<qos::RequestId>,
    completions: Vec<Completion>,
}

impl Worker {
    pub fn new(
        index: usize,
        shared: Arc<Shared>,
        inbox: Arc<WorkerInbox>,
    ) -> Result<Worker, StartError> {
        // SAFETY: plain syscall; checked.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(StartError::Os {
                what: "epoll",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: fresh descriptor we own.
        let epoll = unsafe { OwnedFd::from_raw_fd(epfd) };
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
            released: Vec::new(),
            completions: Vec::new(),
            shared,
        };
        w.epoll_add(w.inbox.wake.raw(), TOKEN_WAKE, libc::EPOLLIN as u32)
            .map_err(|source| StartError::Os {
                what: "epoll registration",
                source,
            })?;
        for b in &w.backends {
            if let Some(fd) = b.wake_fd() {
                w.epoll_add(fd, TOKEN_BACKEND, libc::EPOLLIN as u32)
                    .map_err(|source| StartError::Os {
                        what: "epoll registration",
                        source,
                    })?;
            }
        }
        Ok(w)
    }

    fn epoll_add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: valid epoll fd, fd and event.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The loop; returns when the server drained.
    pub fn run(mut self) {
        set_fine_timer_slack();
        let mut events: Vec<libc::epoll_event> =
            vec![libc::epoll_event { events: 0, u64: 0 }; EPOLL_EVENTS];
        let mut last_busy_ns = now_ns();
        let mut next_scan_ns = last_busy_ns + TIMER_SCAN_NS;
        let mut drain_deadline_ns: Option<u64> = None;
        let batch_limit = self.shared.config.dataplane.batch_limit;
        let idle = self.shared.config.dataplane.idle;
        let spin_ns = self.shared.config.dataplane.idle_spin_ns;
        let mut readable: Vec<usize> = Vec::with_capacity(EPOLL_EVENTS);
        let mut coalescer = Coalescer::new(self.shared.config.dataplane.coalesce_ns);
        loop {
            let now = now_ns();
            let draining = self.shared.state() == RunState::Draining;
            if draining {
                let deadline = *drain_deadline_ns.get_or_insert(now + DRAIN_DEADLINE_NS);
                if self.drained() || now >= deadline {
                    break;
                }
            }
            let backend_next_ns = self.backends.iter().filter_map(|b| b.next_event_ns()).min();
            let polling = idle == IdlePolicy::Spin
                || now.saturating_sub(last_busy_ns) < spin_ns
                || self.sched.queued() > 0
                || !self.pending.is_empty()
                || draining;
            let timeout_ns = wait_ns(polling, now, next_scan_ns, backend_next_ns);
            let timeout = libc::timespec {
                tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: events has EPOLL_EVENTS valid slots; timeout is a valid timespec.
            let n = unsafe {
                libc::epoll_pwait2(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    EPOLL_EVENTS as i32,
                    &timeout,
                    std::ptr::null(),
                )
            };
            let n = if n < 0 { 0 } else { n as usize };
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
                busy = true;
            }
            // 4-6. Schedule, submit, reap.
            busy |= self.schedule_and_submit(now);
            for b in &mut self.backends {
                b.commit();
            }
            busy |= self.reap(now);
            // 7. Send and close.
            self.flush_pending_output();
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
        }
        self.close_all();
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
        self.requests.is_empty() && self.conns.iter().flatten().all(|c| c.core.out.is_empty())
    }

    fn adopt(&mut self, now: u64) {
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
            let session = match new.protocol {
                Protocol::Native => Session::Native(NativeSession::new()),
                Protocol::Nbd => Session::Nbd(NbdSession::new()),
            };
            let handshake_ms = self.shared.config.limits.handshake_timeout_ms;
            let mut conn = Conn {
                input: InBuf::new(),
                core: ConnCore {
                    stream: new.stream,
                    me,
                    out: VecDeque::new(),
                    out_sent: 0,
                    out_bytes: 0,
                    inflight_reqs: 0,
                    inflight_bytes: 0,
                    closing: Closing::Open,
                    epoll_events: 0,
                    last_active_ns: now,
                    handshake_deadline_ns: (handshake_ms > 0)
                        .then(|| now + handshake_ms * 1_000_000),
                },
                session,
            };
            if let Session::Nbd(nbd) = &mut conn.session {
                nbd.start(&mut conn.core);
            }
            let events = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
            if let Err(e) = self.epoll_add(conn.core.stream.as_raw_fd(), me.token(), events) {
                tracing::warn!(error = %e, "cannot watch new connection");
                self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
                self.free_conns.push(index);
                continue;
            }
            conn.core.epoll_events = events;
            self.conns[index] = Some(conn);
            self.metrics.connections.inc();
            self.mark_pending(index);
        }
    }

    /// One read from a readable connection.
    fn read_conn(&mut self, i: usize, now: u64) {
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return;
        };
        if conn.core.closing != Closing::Open {
            return;
        }
        match conn.input.read_from(conn.core.stream.as_raw_fd()) {
            Ok(0) => {
                // Peer closed its side: finish what is in flight, then close.
                conn.core.closing = Closing::AfterDrain;
            }
            Ok(_) => conn.core.last_active_ns = now,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => conn.core.closing = Closing::AfterDrain,
        }
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
            Session::Native(s) => s.decode(&mut conn.input, &mut conn.core, &mut ctx),
            Session::Nbd(s) => s.decode(&mut conn.input, &mut conn.core, &mut ctx),
        };
        self.conns[i] = Some(conn);
        match verdict {
            Verdict::Continue => self.mark_pending(i),
            Verdict::CloseNow(reason) => {
                self.shared.metrics.protocol_error(reason);
                tracing::debug!(worker = self.index, reason, "closing connection");
                self.close(i);
                return;
            }
        }
        self.update_interest(i);
    }

    fn schedule_and_submit(&mut self, now: u64) -> bool {
        self.released.clear();
        // Nothing queued: skip the round (earnings accrue by elapsed time at the next one, and
        // the shared bucket's max-age rule covers resets while this worker is idle).
        if self.sched.queued() == 0 {
            return false;
        }
        let deficit_hits = self.sched.round(now, &mut self.released);
        let _ = deficit_hits; // per-tenant deficit hits come from the qos ledgers
        if self.released.is_empty() {
            return false;
        }
        let released = std::mem::take(&mut self.released);
        for id in &released {
            self.submit_one(id.0 as usize, now);
        }
        self.released = released;
        true
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
            if !conn.core.out.is_empty() {
                self.flush_output(i);
            }
            let Some(conn) = self.conns.get(i).and_then(|c| c.as_ref()) else {
                continue;
            };
            if conn.core.closing == Closing::AfterDrain
                && conn.core.inflight_reqs == 0
                && conn.core.out.is_empty()
            {
                self.close(i);
                continue;
            }
            let limits = &self.shared.config.limits;
            let undecoded = conn.core.closing == Closing::Open
                && !conn.input.data().is_empty()
                && conn.input.data().len() >= conn.input.want_bytes
                && conn.core.inflight_reqs < limits.max_inflight_requests
                && conn.core.inflight_bytes < limits.max_inflight_bytes.0;
            if undecoded {
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
        let core = &mut conn.core;
        let mut failed = false;
        while !core.out.is_empty() {
            let mut iov: [libc::iovec; WRITEV_MAX_IOVECS] = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; WRITEV_MAX_IOVECS];
            let mut count = 0usize;
            let mut skip = core.out_sent;
            'frames: for frame in core.out.iter() {
                let payload = frame.payload.as_ref().map(|p| p.as_slice()).unwrap_or(&[]);
                for part in [frame.head.as_slice(), payload] {
                    if part.is_empty() {
                        continue;
                    }
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    let rest = &part[skip..];
                    skip = 0;
                    iov[count] = libc::iovec {
                        iov_base: rest.as_ptr() as *mut libc::c_void,
                        iov_len: rest.len(),
                    };
                    count += 1;
                    if count == WRITEV_MAX_IOVECS {
                        break 'frames;
                    }
                }
            }
            if count == 0 {
                break;
            }
            // SAFETY: iov[..count] point into buffers owned by `core.out`, alive for the call.
            let n = unsafe { libc::writev(core.stream.as_raw_fd(), iov.as_ptr(), count as i32) };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        failed = true;
                        break;
                    }
                }
            }
            let mut advanced = core.out_sent + n as usize;
            while let Some(front) = core.out.front() {
                let len = front.len();
                if advanced < len {
                    break;
                }
                advanced -= len;
                core.out_bytes -= len;
                if let Some(frame) = core.out.pop_front() {
                    if let Some(p) = frame.payload {
                        self.pool.give(p);
                    }
                }
            }
            core.out_sent = advanced;
        }
        if failed {
            // The peer is gone: nothing more can be delivered.
            core.out.clear();
            core.out_bytes = 0;
            core.out_sent = 0;
            core.closing = Closing::AfterDrain;
            self.mark_pending(i);
        }
        self.update_interest(i);
    }

    /// Sets the epoll interest from the connection's state.
    fn update_interest(&mut self, i: usize) {
        let limits = &self.shared.config.limits;
        let running = self.shared.state() == RunState::Running;
        let Some(conn) = self.conns.get_mut(i).and_then(|c| c.as_mut()) else {
            return;
        };
        let core = &mut conn.core;
        let mut want = 0u32;
        if core.closing == Closing::Open
            && running
            && core.inflight_reqs < limits.max_inflight_requests
            && core.inflight_bytes < limits.max_inflight_bytes.0
        {
            want |= (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        }
        if !core.out.is_empty() {
            want |= libc::EPOLLOUT as u32;
        }
        if want != core.epoll_events {
            let mut ev = libc::epoll_event {
                events: want,
                u64: core.me.token(),
            };
            // SAFETY: valid descriptors and event.
            unsafe {
                libc::epoll_ctl(
                    self.epoll.as_raw_fd(),
                    libc::EPOLL_CTL_MOD,
                    core.stream.as_raw_fd(),
                    &mut ev,
                );
            }
            core.epoll_events = want;
        }
    }

    fn scan_timeouts(&mut self, now: u64) {
        let idle_ms = self.shared.config.limits.idle_timeout_ms;
        let mut expired = Vec::new();
        for (i, conn) in self.conns.iter().enumerate() {
            let Some(conn) = conn else { continue };
            let handshake = conn.core.handshake_deadline_ns.is_some_and(|d| now >= d);
            let idle = idle_ms > 0
                && conn.core.inflight_reqs == 0
                && now.saturating_sub(conn.core.last_active_ns) > idle_ms * 1_000_000;
            if handshake {
                expired.push((i, "handshake_timeout"));
            } else if idle {
                expired.push((i, "idle_timeout"));
            }
        }
        for (i, reason) in expired {
            self.shared.metrics.protocol_error(reason);
            self.close(i);
        }
    }

    /// Closes a connection now; requests it has at the backend complete into the void.
    fn close(&mut self, i: usize) {
        let Some(mut conn) = self.conns.get_mut(i).and_then(|c| c.take()) else {
            return;
        };
        let mut unsent = Vec::new();
        match &mut conn.session {
            Session::Native(s) => s.close(&self.shared, &mut self.sched, &mut unsent),
            Session::Nbd(_) => {}
        }
        for id in unsent {
            if let Some(req) = self.requests.remove(id.0 as usize) {
                if let Some(b) = req.buf {
                    self.pool.give(b);
                }
            }
        }
        for frame in conn.core.out.drain(..) {
            if let Some(p) = frame.payload {
                self.pool.give(p);
            }
        }
        // SAFETY: valid descriptors; removal of a descriptor we added.
        unsafe {
            libc::epoll_ctl(
                self.epoll.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                conn.core.stream.as_raw_fd(),
                std::ptr::null_mut(),
            );
        }
        drop(conn);
        self.generations[i] = self.generations[i].wrapping_add(1);
        self.free_conns.push(i);
        self.in_pending[i] = false;
        self.metrics.connections.dec();
        self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
    }

    /// Closes every connection at shutdown without losing replies already queued.
    ///
    /// Closing a TCP socket whose receive queue holds unread bytes (a client that kept
    /// pipelining after the drain stopped reading) makes Linux answer with RST and discard the
    /// send queue's unsent tail; data arriving after the close does the same. So a connection
    /// with unread input or unacknowledged output lingers: its write side is shut (FIN after
    /// the queued replies), its input is read and dropped, and it is closed once the client
    /// has acknowledged everything or closed, or after [`LINGER_DEADLINE_NS`].
    fn close_all(&mut self) {
        let mut lingering = Vec::new();
        for i in 0..self.conns.len() {
            let Some(conn) = self.conns[i].as_ref() else {
                continue;
            };
            let fd = conn.core.stream.as_raw_fd();
            if socket_queue(fd, libc::FIONREAD) > 0 || socket_queue(fd, libc::TIOCOUTQ) > 0 {
                // SAFETY: a valid socket descriptor.
                unsafe { libc::shutdown(fd, libc::SHUT_WR) };
                lingering.push(i);
            } else {
                self.close(i);
            }
        }
        let deadline = now_ns() + LINGER_DEADLINE_NS;
        let mut scratch = vec![0u8; 64 * 1024];
        while !lingering.is_empty() && now_ns() < deadline {
            lingering.retain(|&i| {
                let Some(conn) = self.conns[i].as_ref() else {
                    return false;
                };
                let fd = conn.core.stream.as_raw_fd();
                let done = loop {
                    // SAFETY: scratch is a valid writable buffer of its length.
                    let n = unsafe { libc::read(fd, scratch.as_mut_ptr().cast(), scratch.len()) };
                    if n > 0 {
                        continue;
                    }
                    let would_block =
                        n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock;
                    // EOF or a dead socket: nothing more to deliver.
                    break !would_block || socket_queue(fd, libc::TIOCOUTQ) == 0;
                };
                if done {
                    self.close(i);
                }
                !done
            });
            if !lingering.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        for i in lingering {
            if self.conns[i].is_some() {
                self.close(i);
            }
        }
        // Connections handed over while we were stopping.
        for new in self.inbox.take() {
            drop(new);
            self.shared.open_connections.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Bytes in a socket's receive queue (`FIONREAD`) or not yet acknowledged by the peer
/// (`TIOCOUTQ`); 0 if the query fails.
fn socket_queue(fd: RawFd, request: libc::Ioctl) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: both requests write one int through the pointer.
    let rc = unsafe { libc::ioctl(fd, request, &mut n) };
    if rc < 0 {
        0
    } else {
        n
    }
}

/// What decoding decided about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// Malformed input: close without waiting (the reason is a metrics label).
    CloseNow(&'static str),
}

/// Queues the reply to a finished request.
fn push_reply(
    core: &mut ConnCore,
    reply: ReplyTo,
    result: Result<(), StorageError>,
    payload: Option<IoBuf>,
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
    }
}
