//! Prometheus metrics and the admin endpoint that serves them.
//!
//! # What it implements
//! The operations half of remote.md: per tenant, requests and bytes by operation (IOPS is the
//! rate of `ullstack_tenant_requests_total`), read and write latency histograms, tokens
//! earned / spent / donated, deficit-limit hits and SLO misses; per worker, loop iterations,
//! batch sizes and open connections. `GET /metrics` on the admin address returns them in the
//! OpenMetrics text format (`prometheus-client`).
//!
//! # Design
//! Every metric handle is created once, when the server starts (tenants) or a worker starts,
//! and kept by the dataplane; a request then costs one relaxed atomic add per counter and one
//! short uncontended lock per histogram observation — no label lookup on the hot path. Latency
//! buckets are powers of two from 4 µs to 65 ms: the interesting range of a ULL device behind a
//! TCP hop (a 4 KiB read over loopback ≈ 20-40 µs; an SLO of 500 µs sits between buckets 7
//! and 8).
//!
//! The admin endpoint is a deliberately tiny HTTP/1.0 responder: an accept thread hands each
//! client to a short-lived thread (at most [`ADMIN_MAX_CLIENTS`] at once, and at most
//! [`ADMIN_MAX_CLIENTS_PER_SOURCE`] of them from one address, so slow clients on one address
//! cannot take every slot from the scraper) that reads one request head (at most
//! [`ADMIN_MAX_REQUEST_BYTES`], all of it within [`ADMIN_READ_TIMEOUT_MS`] of the accept: a
//! client trickling one byte a second is cut off there, not kept alive by each byte),
//! answers `GET /metrics`, `GET /health` and `POST /reload` (what the server does with the
//! last is [`AdminRoutes`]' business: `crate::admin` checks the `[admin] token` and reloads),
//! and closes. Eight clients each sending a byte a
//! second used to get every scrape answered 503 for as long as they went on. It never touches a worker: scraping does not perturb the
//! dataplane beyond the atomics it reads.
//!
//! Worked example: `curl -s http://127.0.0.1:9100/metrics | grep tenant_requests` shows
//! `ullstack_tenant_requests_total{tenant="alice",op="read"} 120345`; its `rate()` over 10 s is
//! alice's read IOPS.
//!
//! # What it leaves out
//! Keep-alive, TLS, and authentication of the reads (bind the admin port to a private
//! address; `POST /reload` alone needs a token).
//!
//! # Config keys
//! `[listen] admin`, `[admin] token`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Largest HTTP request head the admin endpoint reads.
pub const ADMIN_MAX_REQUEST_BYTES: usize = 8192;
/// How long the admin endpoint waits for a whole request head, from the accept.
pub const ADMIN_READ_TIMEOUT_MS: u64 = 2_000;
/// Admin clients answered at once (one thread each); a scraper needs one.
pub const ADMIN_MAX_CLIENTS: usize = 8;
/// Of those, from one source address: half, so a scraper, a health check and a human with
/// curl on one host fit, and no one address holds every slot.
pub const ADMIN_MAX_CLIENTS_PER_SOURCE: usize = ADMIN_MAX_CLIENTS / 2;

type Labels = Vec<(String, String)>;

fn latency_histogram() -> Histogram {
    // 4 µs · 2^k, k = 0..15: 4 µs … 65.5 ms, in seconds (Prometheus convention).
    Histogram::new(exponential_buckets(4e-6, 2.0, 15))
}

fn batch_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])
}

/// The server's metric families.
pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<Labels, Counter>,
    bytes: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    tokens_earned: Family<Labels, Counter>,
    tokens_spent: Family<Labels, Counter>,
    tokens_donated: Family<Labels, Counter>,
    deficit_hits: Family<Labels, Counter>,
    slo_misses: Family<Labels, Counter>,
    worker_loops: Family<Labels, Counter>,
    worker_coalesce_waits: Family<Labels, Counter>,
    worker_rounds_deferred: Family<Labels, Counter>,
    worker_coalesce_window: Family<Labels, Gauge>,
    worker_batch: Family<Labels, Histogram, fn() -> Histogram>,
    worker_connections: Family<Labels, Gauge>,
    worker_input_read_bytes: Family<Labels, Counter>,
    worker_socket_ring_ops: Family<Labels, Counter>,
    worker_socket_ring_file_ops: Family<Labels, Counter>,
    worker_input_moved_bytes: Family<Labels, Counter>,
    worker_input_in_place_bytes: Family<Labels, Counter>,
    worker_zerocopy_sends: Family<Labels, Counter>,
    worker_zerocopy_copied: Family<Labels, Counter>,
    worker_zerocopy_orphans: Family<Labels, Gauge>,
    refused_connections: Counter,
    reloads: Family<Labels, Counter>,
    memory_charged_bytes: Gauge,
    memory_peak_bytes: Gauge,
    memory_limit_bytes: Gauge,
    tenant_memory_budget_bytes: Gauge,
    tenant_memory_charged_bytes: Family<Labels, Gauge>,
    auth_throttled: Counter,
    auth_failures: Family<Labels, Counter>,
    tenant_connection_refusals: Family<Labels, Counter>,
    rate_scale_ppm: Gauge,
    protocol_errors: Family<Labels, Counter>,
    device_commands: Family<Labels, Counter>,
    file_reads: Family<Labels, Counter>,
}

/// The memory ledger's totals as a scrape publishes them ([`crate::memory`]).
#[derive(Debug, Clone, Copy)]
pub struct MemoryTotals {
    pub charged_bytes: u64,
    pub peak_bytes: u64,
    pub limit_bytes: u64,
    pub tenant_budget_bytes: u64,
}

/// Per-tenant handles, held by the dataplane.
#[derive(Clone, Debug)]
pub struct TenantMetrics {
    pub reads: Counter,
    pub writes: Counter,
    pub flushes: Counter,
    pub trims: Counter,
    pub read_bytes: Counter,
    pub write_bytes: Counter,
    /// Requests answered with a non-OK status (denied, refused, device error).
    pub errors: Counter,
    pub read_latency: Histogram,
    pub write_latency: Histogram,
    /// Milli-tokens (1 token = one 4 KiB random read).
    pub tokens_earned_mtok: Counter,
    pub tokens_spent_mtok: Counter,
    pub tokens_donated_mtok: Counter,
    pub deficit_hits: Counter,
    pub slo_misses: Counter,
    /// Bytes charged to the tenant's memory budget (set at each scrape).
    pub memory_charged_bytes: Gauge,
}

/// Per-worker handles.
#[derive(Clone, Debug)]
pub struct WorkerMetrics {
    pub loops: Counter,
    pub coalesce_waits: Counter,
    /// Steps of a throttled worker, woken by completions only, that ran no scheduling round.
    pub rounds_deferred: Counter,
    /// The coalescing pause the worker takes now, ns (0: none).
    pub coalesce_window_ns: Gauge,
    pub batch: Histogram,
    pub connections: Gauge,
    /// Bytes read from client sockets into input buffers.
    pub input_read_bytes: Counter,
    /// Bytes the input buffers moved to compact themselves (at most what was read).
    pub input_moved_bytes: Counter,
    /// Bytes of multishot receives decoded where the kernel put them ([`crate::inplace`]).
    pub input_in_place_bytes: Counter,
    /// Socket receives and sends completed through the worker's io_uring.
    pub socket_ring_ops: Counter,
    /// File volumes' operations completed through the worker's socket ring.
    pub socket_ring_file_ops: Counter,
    /// Zero-copy socket sends that moved bytes (`dataplane.send_zc`).
    pub zerocopy_sends: Counter,
    /// Zero-copy sends whose notification said the kernel copied after all (loopback: all).
    pub zerocopy_copied: Counter,
    /// Closed connections' frames a zero-copy send may still read, held until their
    /// notifications come (0 when none is awaited: nothing leaks).
    pub zerocopy_orphans: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("ullstack");
        let m = Metrics {
            requests: Family::default(),
            bytes: Family::default(),
            errors: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            tokens_earned: Family::default(),
            tokens_spent: Family::default(),
            tokens_donated: Family::default(),
            deficit_hits: Family::default(),
            slo_misses: Family::default(),
            worker_loops: Family::default(),
            worker_coalesce_waits: Family::default(),
            worker_rounds_deferred: Family::default(),
            worker_coalesce_window: Family::default(),
            worker_batch: Family::new_with_constructor(batch_histogram as fn() -> Histogram),
            worker_connections: Family::default(),
            worker_input_read_bytes: Family::default(),
            worker_socket_ring_ops: Family::default(),
            worker_socket_ring_file_ops: Family::default(),
            worker_input_moved_bytes: Family::default(),
            worker_input_in_place_bytes: Family::default(),
            worker_zerocopy_sends: Family::default(),
            worker_zerocopy_copied: Family::default(),
            worker_zerocopy_orphans: Family::default(),
            refused_connections: Counter::default(),
            reloads: Family::default(),
            memory_charged_bytes: Gauge::default(),
            memory_peak_bytes: Gauge::default(),
            memory_limit_bytes: Gauge::default(),
            tenant_memory_budget_bytes: Gauge::default(),
            tenant_memory_charged_bytes: Family::default(),
            auth_throttled: Counter::default(),
            auth_failures: Family::default(),
            tenant_connection_refusals: Family::default(),
            rate_scale_ppm: Gauge::default(),
            protocol_errors: Family::default(),
            device_commands: Family::default(),
            file_reads: Family::default(),
            registry: Mutex::new(Registry::default()),
        };
        registry.register(
            "tenant_requests",
            "Requests completed, by tenant and operation",
            m.requests.clone(),
        );
        registry.register(
            "tenant_bytes",
            "Payload bytes moved, by tenant and direction",
            m.bytes.clone(),
        );
        registry.register(
            "tenant_errors",
            "Requests answered with a non-OK status",
            m.errors.clone(),
        );
        registry.register(
            "tenant_latency_seconds",
            "Request latency from decode to reply queued, by tenant and operation",
            m.latency.clone(),
        );
        registry.register(
            "tenant_tokens_earned_mtok",
            "Milli-tokens earned by the tenant (1 token = one 4 KiB random read)",
            m.tokens_earned.clone(),
        );
        registry.register(
            "tenant_tokens_spent_mtok",
            "Milli-tokens spent on requests",
            m.tokens_spent.clone(),
        );
        registry.register(
            "tenant_tokens_donated_mtok",
            "Milli-tokens donated to the shared best-effort bucket",
            m.tokens_donated.clone(),
        );
        registry.register(
            "tenant_deficit_hits",
            "Times the tenant hit its deficit limit and was rate-limited",
            m.deficit_hits.clone(),
        );
        registry.register(
            "tenant_slo_misses",
            "Reads of an LC tenant slower than its p95 latency target",
            m.slo_misses.clone(),
        );
        registry.register(
            "worker_loop_iterations",
            "Dataplane loop iterations",
            m.worker_loops.clone(),
        );
        registry.register(
            "worker_coalesce_waits",
            "Pauses a worker took before reading again, so the next step takes a batch (dataplane.coalesce_ns)",
            m.worker_coalesce_waits.clone(),
        );
        registry.register(
            "worker_rounds_deferred",
            "Steps of a throttled worker, woken only by completions, that ran no scheduling round until its throttled sleep was over",
            m.worker_rounds_deferred.clone(),
        );
        registry.register(
            "worker_coalesce_window_ns",
            "The coalescing pause a worker takes between steps now, ns (0: none; the ladder in dataplane.coalesce_ns)",
            m.worker_coalesce_window.clone(),
        );
        registry.register(
            "worker_batch_requests",
            "Requests taken in by one loop step (adaptive batching, at most batch_limit)",
            m.worker_batch.clone(),
        );
        registry.register(
            "worker_connections",
            "Open connections",
            m.worker_connections.clone(),
        );
        registry.register(
            "worker_input_read_bytes",
            "Bytes read from client sockets into connection input buffers",
            m.worker_input_read_bytes.clone(),
        );
        registry.register(
            "worker_socket_ring_ops",
            "Socket receives and sends a worker completed through its io_uring (dataplane.socket_io = \"uring\"; 0 on the epoll path)",
            m.worker_socket_ring_ops.clone(),
        );
        registry.register(
            "worker_socket_ring_file_ops",
            "File volumes' io_uring operations a worker completed through its socket ring (dataplane.file_io = \"socket-ring\"; 0 where each file volume has its own ring)",
            m.worker_socket_ring_file_ops.clone(),
        );
        registry.register(
            "worker_input_moved_bytes",
            "Bytes input buffers moved to compact themselves (bounded by the bytes read)",
            m.worker_input_moved_bytes.clone(),
        );
        registry.register(
            "worker_input_in_place_bytes",
            "Bytes of multishot socket receives decoded in the provided buffer the kernel filled, never copied into an input buffer (dataplane.socket_recv = \"multishot\")",
            m.worker_input_in_place_bytes.clone(),
        );
        registry.register(
            "worker_zerocopy_sends",
            "Socket sends that went zero-copy (SENDMSG_ZC) and moved bytes (dataplane.send_zc; 0 when off)",
            m.worker_zerocopy_sends.clone(),
        );
        registry.register(
            "worker_zerocopy_copied",
            "Zero-copy socket sends whose completion notification said the kernel copied the data after all (always, over loopback)",
            m.worker_zerocopy_copied.clone(),
        );
        registry.register(
            "worker_zerocopy_orphans",
            "Closed connections whose zero-copy sends' pages the kernel may still read, held by the worker until their notifications come",
            m.worker_zerocopy_orphans.clone(),
        );
        registry.register(
            "memory_charged_bytes",
            "Bytes clients make the server hold: in-flight payloads, queued replies, input and TLS buffers",
            m.memory_charged_bytes.clone(),
        );
        registry.register(
            "memory_peak_bytes",
            "Highest memory_charged_bytes since start",
            m.memory_peak_bytes.clone(),
        );
        registry.register(
            "memory_limit_bytes",
            "limits.max_memory_bytes, shared equally by the tenants as their memory budgets",
            m.memory_limit_bytes.clone(),
        );
        registry.register(
            "tenant_memory_budget_bytes",
            "Each tenant's memory budget (max_memory_bytes / tenants): at it, the tenant's connections are not read until its replies drain",
            m.tenant_memory_budget_bytes.clone(),
        );
        registry.register(
            "tenant_memory_charged_bytes",
            "Bytes charged to the tenant's memory budget: its sessions' in-flight payloads, queued replies, input and TLS buffers",
            m.tenant_memory_charged_bytes.clone(),
        );
        registry.register(
            "auth_throttled",
            "HELLOs and TLS-PSK handshakes refused unchecked because their source address is backing off after failed authentications",
            m.auth_throttled.clone(),
        );
        registry.register(
            "auth_failures",
            "Failed authentications, by kind: hello (wrong secret or unknown tenant), tls_psk (wrong key or unknown identity), psk_identity (HELLO as another tenant than the TLS-PSK identity)",
            m.auth_failures.clone(),
        );
        registry.register(
            "tenant_connection_refusals",
            "Sessions refused because the tenant held limits.max_connections_per_tenant",
            m.tenant_connection_refusals.clone(),
        );
        registry.register(
            "refused_connections",
            "Connections closed at accept: limits.max_connections reached, or the unauthenticated budget, its per-source share or the per-source accept rate",
            m.refused_connections.clone(),
        );
        registry.register(
            "reloads",
            "Config reloads (SIGHUP, POST /reload) by outcome: applied, or refused with nothing changed",
            m.reloads.clone(),
        );
        registry.register(
            "rate_scale_ppm",
            "Device rate scale of the closed loop ([qos] vrate), ppm of the calibrated rate",
            m.rate_scale_ppm.clone(),
        );
        registry.register(
            "protocol_errors",
            "Connections closed for malformed input or timeouts, by reason",
            m.protocol_errors.clone(),
        );
        registry.register(
            "device_commands",
            "Commands an emulated volume's device model received, by the I/O class in their reserved field",
            m.device_commands.clone(),
        );
        registry.register(
            "file_reads",
            "Reads of a file volume with registered buffers, by buffer: registered (READ_FIXED) or fallback (none was free)",
            m.file_reads.clone(),
        );
        *m.registry.lock().unwrap_or_else(|p| p.into_inner()) = registry;
        m
    }

    /// The handles of one tenant (created on first call).
    pub fn tenant(&self, name: &str) -> TenantMetrics {
        let t = |op: &str| {
            vec![
                ("tenant".to_string(), name.to_string()),
                ("op".to_string(), op.to_string()),
            ]
        };
        let only = vec![("tenant".to_string(), name.to_string())];
        TenantMetrics {
            reads: self.requests.get_or_create_owned(&t("read")),
            writes: self.requests.get_or_create_owned(&t("write")),
            flushes: self.requests.get_or_create_owned(&t("flush")),
            trims: self.requests.get_or_create_owned(&t("trim")),
            read_bytes: self.bytes.get_or_create_owned(&t("read")),
            write_bytes: self.bytes.get_or_create_owned(&t("write")),
            errors: self.errors.get_or_create_owned(&only),
            read_latency: self.latency.get_or_create_owned(&t("read")),
            write_latency: self.latency.get_or_create_owned(&t("write")),
            tokens_earned_mtok: self.tokens_earned.get_or_create_owned(&only),
            tokens_spent_mtok: self.tokens_spent.get_or_create_owned(&only),
            tokens_donated_mtok: self.tokens_donated.get_or_create_owned(&only),
            deficit_hits: self.deficit_hits.get_or_create_owned(&only),
            slo_misses: self.slo_misses.get_or_create_owned(&only),
            memory_charged_bytes: self.tenant_memory_charged_bytes.get_or_create_owned(&only),
        }
    }

    /// The handles of worker `index`.
    pub fn worker(&self, index: usize) -> WorkerMetrics {
        let l = vec![("worker".to_string(), index.to_string())];
        WorkerMetrics {
            loops: self.worker_loops.get_or_create_owned(&l),
            coalesce_waits: self.worker_coalesce_waits.get_or_create_owned(&l),
            rounds_deferred: self.worker_rounds_deferred.get_or_create_owned(&l),
            coalesce_window_ns: self.worker_coalesce_window.get_or_create_owned(&l),
            batch: self.worker_batch.get_or_create_owned(&l),
            connections: self.worker_connections.get_or_create_owned(&l),
            input_read_bytes: self.worker_input_read_bytes.get_or_create_owned(&l),
            socket_ring_ops: self.worker_socket_ring_ops.get_or_create_owned(&l),
            socket_ring_file_ops: self.worker_socket_ring_file_ops.get_or_create_owned(&l),
            input_moved_bytes: self.worker_input_moved_bytes.get_or_create_owned(&l),
            input_in_place_bytes: self.worker_input_in_place_bytes.get_or_create_owned(&l),
            zerocopy_sends: self.worker_zerocopy_sends.get_or_create_owned(&l),
            zerocopy_copied: self.worker_zerocopy_copied.get_or_create_owned(&l),
            zerocopy_orphans: self.worker_zerocopy_orphans.get_or_create_owned(&l),
        }
    }

    /// Publishes the memory ledger's totals (admin thread, at each scrape; the tenants'
    /// charges go to their [`TenantMetrics::memory_charged_bytes`]).
    pub fn set_memory(&self, totals: MemoryTotals) {
        self.memory_charged_bytes.set(gauge(totals.charged_bytes));
        self.memory_peak_bytes.set(gauge(totals.peak_bytes));
        self.memory_limit_bytes.set(gauge(totals.limit_bytes));
        self.tenant_memory_budget_bytes
            .set(gauge(totals.tenant_budget_bytes));
    }

    /// Counts a HELLO or TLS-PSK handshake refused by the back-off of failed authentications.
    pub fn auth_throttled(&self) {
        self.auth_throttled.inc();
    }

    /// The HELLOs and PSK handshakes refused by the back-off so far.
    pub fn auth_throttled_total(&self) -> u64 {
        self.auth_throttled.get()
    }

    /// Counts a failed authentication of `kind` (`hello`, `tls_psk`, `psk_identity`).
    pub fn auth_failed(&self, kind: &str) {
        self.auth_failures
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .inc();
    }

    /// Failed authentications of `kind` so far.
    pub fn auth_failures_total(&self, kind: &str) -> u64 {
        self.auth_failures
            .get_or_create(&vec![("kind".to_string(), kind.to_string())])
            .get()
    }

    /// Counts a session refused by `limits.max_connections_per_tenant`.
    pub fn tenant_connection_refused(&self, tenant: &str) {
        self.tenant_connection_refusals
            .get_or_create(&vec![("tenant".to_string(), tenant.to_string())])
            .inc();
    }

    /// Counts a config reload that was `applied` or `refused`.
    pub fn reloaded(&self, outcome: &str) {
        self.reloads
            .get_or_create(&vec![("outcome".to_string(), outcome.to_string())])
            .inc();
    }

    pub fn connection_refused(&self) {
        self.refused_connections.inc();
    }

    /// The counter of commands of `class` (`latency_critical` or `throughput`) that volume
    /// `volume`'s device model received.
    pub fn device_commands(&self, volume: &str, class: &str) -> Counter {
        self.device_commands.get_or_create_owned(&vec![
            ("volume".to_string(), volume.to_string()),
            ("class".to_string(), class.to_string()),
        ])
    }

    /// The counter of file volume `volume`'s reads that went in with a registered buffer
    /// (`buffer = "registered"`) or found none free (`"fallback"`).
    pub fn file_reads(&self, volume: &str, buffer: &str) -> Counter {
        self.file_reads.get_or_create_owned(&vec![
            ("volume".to_string(), volume.to_string()),
            ("buffer".to_string(), buffer.to_string()),
        ])
    }

    /// Publishes the closed loop's device rate scale.
    pub fn set_rate_scale_ppm(&self, ppm: u32) {
        self.rate_scale_ppm.set(i64::from(ppm));
    }

    /// Counts a connection closed for `reason` (a short static name).
    pub fn protocol_error(&self, reason: &str) {
        self.protocol_errors
            .get_or_create(&vec![("reason".to_string(), reason.to_string())])
            .inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn encode_text(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}

/// An answer of the admin endpoint: an HTTP status line's code and reason, and a text body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminReply {
    pub status: &'static str,
    pub body: String,
}

/// What the admin endpoint asks of the server beyond the metrics it encodes. A closure is
/// the `refresh` of an endpoint that serves metrics only.
pub trait AdminRoutes: Send + Sync + 'static {
    /// Runs before each scrape (it copies the scheduler's token ledgers into the counters).
    fn refresh(&self);
    /// `POST /reload` from `peer`, with the value of its `Authorization` header.
    fn reload(&self, peer: SocketAddr, authorization: Option<&str>) -> AdminReply {
        let _ = (peer, authorization);
        AdminReply {
            status: "404 Not Found",
            body: "this endpoint serves no POST /reload\n".into(),
        }
    }
}

impl<F: Fn() + Send + Sync + 'static> AdminRoutes for F {
    fn refresh(&self) {
        self()
    }
}

/// Serves the admin endpoint until `stop` is set. Runs on its own thread and answers each
/// client on a short-lived thread of its own (at most [`ADMIN_MAX_CLIENTS`] at once and
/// [`ADMIN_MAX_CLIENTS_PER_SOURCE`] per address; more get `503` at once), so a client that
/// connects and says nothing, or trickles, holds only its own thread, for at most
/// [`ADMIN_READ_TIMEOUT_MS`].
pub fn serve_admin(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
    routes: impl AdminRoutes,
) {
    use std::os::fd::AsRawFd;
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!(error = %e, "admin listener cannot be made nonblocking; admin endpoint disabled");
        return;
    }
    let routes = Arc::new(routes);
    let active = Arc::new(AtomicUsize::new(0));
    let by_source: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, usize>>> = Arc::default();
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((mut stream, peer)) => {
                let source_full = {
                    let mut map = by_source.lock().unwrap_or_else(|p| p.into_inner());
                    let held = map.entry(peer.ip()).or_insert(0);
                    let full = *held >= ADMIN_MAX_CLIENTS_PER_SOURCE
                        || active.load(Ordering::Acquire) >= ADMIN_MAX_CLIENTS;
                    if !full {
                        *held += 1;
                    } else if *held == 0 {
                        map.remove(&peer.ip());
                    }
                    full
                };
                if source_full {
                    let _ = stream.set_nonblocking(true);
                    let _ = respond(
                        &mut stream,
                        "503 Service Unavailable",
                        "text/plain",
                        b"busy\n",
                    );
                    continue;
                }
                active.fetch_add(1, Ordering::AcqRel);
                // Released when the client's thread ends, or at once if it cannot start.
                let slot = AdminSlot {
                    ip: peer.ip(),
                    active: active.clone(),
                    by_source: by_source.clone(),
                };
                let (metrics, routes) = (metrics.clone(), routes.clone());
                let spawned = std::thread::Builder::new()
                    .name("ullstack-admin-client".into())
                    .spawn(move || {
                        let _slot = slot;
                        if let Err(e) = answer(stream, peer, &metrics, &*routes) {
                            tracing::debug!(%peer, error = %e, "admin request failed");
                        }
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start an admin client thread");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                let _ = crate::sys::poll(&mut fds, 100);
            }
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// An admin client's place in [`ADMIN_MAX_CLIENTS`] and its address's share, given back on
/// drop.
struct AdminSlot {
    ip: std::net::IpAddr,
    active: Arc<AtomicUsize>,
    by_source: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

impl Drop for AdminSlot {
    fn drop(&mut self) {
        let mut map = self.by_source.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = map.get_mut(&self.ip) {
            *held -= 1;
            if *held == 0 {
                map.remove(&self.ip);
            }
        }
        self.active.fetch_sub(1, Ordering::AcqRel);
    }
}

fn answer(
    mut stream: TcpStream,
    peer: SocketAddr,
    metrics: &Metrics,
    routes: &dyn AdminRoutes,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let deadline = std::time::Instant::now() + Duration::from_millis(ADMIN_READ_TIMEOUT_MS);
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        // The whole head within the deadline: a byte a second does not extend it.
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
        if head.len() > ADMIN_MAX_REQUEST_BYTES {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request head too large\n",
            );
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    match (method, path) {
        ("GET", "/metrics") => {
            routes.refresh();
            let body = metrics.encode_text();
            respond(
                &mut stream,
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body.as_bytes(),
            )
        }
        ("GET", "/health") => respond(&mut stream, "200 OK", "text/plain", b"ok\n"),
        ("POST", "/reload") => {
            let reply = routes.reload(peer, header(&head, "authorization").as_deref());
            respond(
                &mut stream,
                reply.status,
                "text/plain",
                reply.body.as_bytes(),
            )
        }
        ("GET", _) => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"try GET /metrics\n",
        ),
        _ => respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            b"only GET, and POST /reload\n",
        ),
    }
}

/// The value of header `name` (lower case) in a request head, trimmed.
fn header(head: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(head)
        .lines()
        .skip(1)
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

/// Binds the admin address (for callers that want the port before starting the thread).
pub fn bind_admin(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
}

/// A byte count as a gauge value (saturating: gauges are i64).
pub fn gauge(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_metrics_appear_in_text() {
        let m = Metrics::new();
        let t = m.tenant("alice");
        t.reads.inc_by(3);
        t.read_latency.observe(20e-6);
        m.worker(0).loops.inc();
        let text = m.encode_text();
        assert!(
            text.contains("ullstack_tenant_requests_total{tenant=\"alice\",op=\"read\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("ullstack_tenant_latency_seconds_count{tenant=\"alice\",op=\"read\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ullstack_worker_loop_iterations_total{worker=\"0\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn headers_are_found_by_name_in_any_case() {
        let head = b"POST /reload HTTP/1.0\r\nHost: x\r\nauthorization:  Bearer abc \r\n\r\n";
        assert_eq!(header(head, "authorization").as_deref(), Some("Bearer abc"));
        assert_eq!(header(head, "cookie"), None);
    }

    #[test]
    fn admin_endpoint_answers_get_metrics() {
        let m = Arc::new(Metrics::new());
        m.tenant("bob").writes.inc();
        let listener = bind_admin("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (m, stop) = (m.clone(), stop.clone());
            std::thread::spawn(move || serve_admin(listener, m, stop, || {}))
        };
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
        assert!(body.contains("tenant=\"bob\",op=\"write\"} 1"), "{body}");
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.0 405"), "{body}");
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /reload HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.0 404"), "{body}");
        stop.store(true, Ordering::Release);
        thread.join().unwrap();
    }
}
