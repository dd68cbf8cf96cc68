//! One pipelined connection to `ullstack serve` speaking the ullstack wire protocol v1.
//!
//! # Design
//! A [`Client`] is a cheap handle (`Clone`) on one TCP connection. Any number of tasks may call
//! it at once; every call is one request, and they are all in flight together:
//!
//! * **Send path.** The call takes a slot in the pending table (its cookie = slot generation
//!   << 32 | slot index, so a stale or forged cookie never matches a live request), appends
//!   the 40-byte header and the payload to the connection's outbox (one short critical
//!   section, no I/O) and, if the connection's writer task is idle, wakes it. The writer
//!   takes the whole outbox and sends it with one `write_all`: requests issued together (a
//!   queue depth of 32 refilled in one poll) leave in one system call, and at queue depth 1
//!   the cost is one wake-up of a task on the same worker. Because the caller never writes to
//!   the socket itself, dropping a call's future (a timeout) can never leave a half-written
//!   frame: the request is sent anyway and its reply discarded.
//! * **Receive path (one reader task per connection).** It reads into a reusable buffer, lets
//!   [`proto::wire::decode_reply`] cut frames (replies may be out of order), finds the slot by
//!   cookie, checks the echoed opcode, and completes the caller's oneshot with the status and
//!   payload. A reply that matches no request is a protocol violation and closes the
//!   connection.
//!
//! Worked example: tasks T1 and T2 call `read(h, 0, 4096)` and `write(h, 8192, ..)` together.
//! T1 takes slot 0 (cookie `0x1_0000_0000`), T2 slot 1 (cookie `0x1_0000_0001`); both headers go
//! out; the server answers the WRITE first; the reader completes T2, then T1. Slots return to
//! the free list when their reply arrives, with the generation bumped.
//!
//! # Failure
//! Every non-OK reply becomes [`ClientError::Server`] carrying the server's status, detail code
//! and message (REGISTER refusals become [`ClientError::Refused`] with the reason). When the
//! connection breaks, every request in flight fails with [`ClientError::Closed`] and new ones
//! fail at once. A slot abandoned by a dropped future stays until its reply arrives, so the
//! table never holds more than the requests really in flight.
//!
//! *TLS.* [`Client::connect_tls`] runs the TLS handshake ([`crate::tls`]) first and gives the
//! reader and writer tasks the two halves of the TLS stream (`tokio::io::split`); everything
//! above is the same.
//!
//! # What it leaves out
//! No reconnection, no request timeouts (wrap calls in `tokio::time::timeout`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use proto::wire::{
    self, Access, ErrorBody, HelloBody, HelloReply, Opcode, RefusalCode, RegisterBody,
    RegisterClass, RegisterReply, ReplyHeader, RequestHeader, Status, WriteMode,
    CONTROL_PAYLOAD_MAX_BYTES,
};
use proto::Decode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::ClientError;
use crate::tls::ClientTls;

/// The writer keeps an outbox buffer up to this capacity between bursts; a larger one (after a
/// big WRITE) is released so idle connections stay small.
pub const OUTBOX_KEEP_BYTES: usize = 1 << 20;
/// Initial size of the reader's buffer; it grows to the largest frame seen.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Who the client is and which volume it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub tenant: String,
    pub secret: String,
    pub volume: String,
}

/// A flow registered with REGISTER; requests carry it so the scheduler charges that flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TenantHandle(pub u32);

impl TenantHandle {
    /// The session's default best-effort flow (no REGISTER needed).
    pub const DEFAULT: TenantHandle = TenantHandle(0);
}

/// A pipelined connection; clone it freely to issue requests from many tasks.
#[derive(Clone)]
pub struct Client {
    conn: Arc<Connection>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("peer", &self.conn.shared.peer)
            .field("session", &self.conn.shared.session.get())
            .finish()
    }
}

/// Owns the reader and writer tasks; when the last `Client` clone goes, they are stopped.
struct Connection {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

struct Shared {
    peer: SocketAddr,
    outbox: Mutex<Outbox>,
    writer_wake: tokio::sync::Notify,
    pending: Mutex<Pending>,
    closed: AtomicBool,
    /// Largest READ the server accepts (control limit until HELLO succeeds).
    max_payload_bytes: AtomicU32,
    session: OnceLock<HelloReply>,
}

/// Bytes waiting for the writer task.
struct Outbox {
    bytes: Vec<u8>,
    /// The writer has been woken and will take the outbox; appenders need not wake it.
    writer_scheduled: bool,
}

/// What the reader hands back to a waiting call.
struct RawReply {
    status: Status,
    payload: Vec<u8>,
}

type Completion = oneshot::Sender<Result<RawReply, ClientError>>;

struct Slot {
    generation: u32,
    waiting: Option<(Opcode, Completion)>,
}

#[derive(Default)]
struct Pending {
    slots: Vec<Slot>,
    free: Vec<u32>,
    in_flight: usize,
}

impl Pending {
    fn insert(&mut self, opcode: Opcode, tx: Completion) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 1,
                    waiting: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.waiting.is_none(), "a free slot must be empty");
        slot.waiting = Some((opcode, tx));
        self.in_flight += 1;
        (u64::from(slot.generation) << 32) | u64::from(index)
    }

    fn take(&mut self, cookie: u64) -> Option<(Opcode, Completion)> {
        let index = (cookie & 0xffff_ffff) as usize;
        let generation = (cookie >> 32) as u32;
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let waiting = slot.waiting.take()?;
        slot.generation = slot.generation.wrapping_add(1).max(1);
        self.free.push(index as u32);
        self.in_flight -= 1;
        Some(waiting)
    }

    fn fail_all(&mut self) {
        for slot in &mut self.slots {
            if let Some((_, tx)) = slot.waiting.take() {
                let _ = tx.send(Err(ClientError::Closed));
            }
        }
        self.slots.clear();
        self.free.clear();
        self.in_flight = 0;
    }
}

impl Shared {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Ok(mut p) = self.pending.lock() {
            p.fail_all();
        }
    }
}

impl Client {
    /// Connect over TCP and authenticate with HELLO. Fails with [`ClientError::Server`] carrying
    /// `AuthFailed` / `NoSuchVolume` when the server says so.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        credentials: &Credentials,
    ) -> Result<Client, ClientError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| ClientError::Connect { source })?;
        Self::handshake(stream, credentials).await
    }

    /// Connect over TCP, run the TLS handshake `tls` describes, and authenticate with HELLO
    /// inside the session. `addr` is `host:port`; the host is the name a certificate is
    /// checked against (unless the [`ClientTls`] names another). A refused handshake (wrong
    /// key, untrusted certificate, a server without TLS) is [`ClientError::Tls`].
    pub async fn connect_tls(
        addr: &str,
        credentials: &Credentials,
        tls: &ClientTls,
    ) -> Result<Client, ClientError> {
        let host = match addr.rsplit_once(':') {
            Some((host, _port)) => host.trim_start_matches('[').trim_end_matches(']'),
            None => addr,
        };
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| ClientError::Connect { source })?;
        stream.set_nodelay(true).map_err(ClientError::Io)?;
        let peer = stream.peer_addr().map_err(ClientError::Io)?;
        let session = tls.connect(stream, host).await?;
        let (read_half, write_half) = tokio::io::split(session);
        Self::start(read_half, write_half, peer, credentials).await
    }

    /// Authenticate on an already connected stream.
    pub async fn handshake(
        stream: TcpStream,
        credentials: &Credentials,
    ) -> Result<Client, ClientError> {
        stream.set_nodelay(true).map_err(ClientError::Io)?;
        let peer = stream.peer_addr().map_err(ClientError::Io)?;
        let (read_half, write_half) = stream.into_split();
        Self::start(read_half, write_half, peer, credentials).await
    }

    /// Starts the reader and writer tasks on the two halves of a connection, then HELLO.
    async fn start<R, W>(
        read_half: R,
        write_half: W,
        peer: SocketAddr,
        credentials: &Credentials,
    ) -> Result<Client, ClientError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            peer,
            outbox: Mutex::new(Outbox {
                bytes: Vec::with_capacity(64 * 1024),
                writer_scheduled: false,
            }),
            writer_wake: tokio::sync::Notify::new(),
            pending: Mutex::new(Pending::default()),
            closed: AtomicBool::new(false),
            max_payload_bytes: AtomicU32::new(CONTROL_PAYLOAD_MAX_BYTES),
            session: OnceLock::new(),
        });
        let reader = tokio::spawn(read_loop(read_half, shared.clone()));
        let writer = tokio::spawn(write_loop(write_half, shared.clone()));
        let client = Client {
            conn: Arc::new(Connection {
                shared,
                reader,
                writer,
            }),
        };

        let body = HelloBody {
            tenant: &credentials.tenant,
            secret: credentials.secret.as_bytes(),
            volume: &credentials.volume,
        };
        let mut payload = Vec::with_capacity(body.encoded_len());
        body.encode_into(&mut payload)
            .map_err(|e| ClientError::InvalidArgument(format!("HELLO: {e}")))?;
        let header = RequestHeader::hello(0, payload.len() as u32);
        let reply = client.call(header, &payload).await?;
        let hello = HelloReply::decode(&reply).map_err(|e| ClientError::Protocol {
            detail: format!("HELLO reply: {e}"),
        })?;
        let shared = &client.conn.shared;
        shared
            .max_payload_bytes
            .store(hello.max_payload_bytes, Ordering::Release);
        let _ = shared.session.set(hello);
        Ok(client)
    }

    /// What HELLO returned: session id, volume size, block size, max payload, access.
    pub fn session(&self) -> HelloReply {
        // Set before `handshake` returns the client, never unset.
        self.conn
            .shared
            .session
            .get()
            .copied()
            .unwrap_or(HelloReply {
                session_id: 0,
                volume_size_bytes: 0,
                block_size_bytes: 1,
                max_payload_bytes: CONTROL_PAYLOAD_MAX_BYTES,
                access: Access::ReadOnly,
            })
    }

    /// The server's address.
    pub fn peer(&self) -> SocketAddr {
        self.conn.shared.peer
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.conn
            .shared
            .pending
            .lock()
            .map(|p| p.in_flight)
            .unwrap_or(0)
    }

    /// Whether the connection has failed or was closed.
    pub fn is_closed(&self) -> bool {
        self.conn.shared.closed.load(Ordering::Acquire)
    }

    /// Register a flow as latency-critical (with its SLO) or best-effort. A refusal by
    /// admission control is [`ClientError::Refused`] with the server's code and reason.
    pub async fn register(&self, class: RegisterClass) -> Result<TenantHandle, ClientError> {
        let body = RegisterBody { class }.encode();
        match self.call(RequestHeader::register(0), &body).await {
            Ok(payload) => {
                let reply = RegisterReply::decode(&payload).map_err(|e| ClientError::Protocol {
                    detail: format!("REGISTER reply: {e}"),
                })?;
                Ok(TenantHandle(reply.handle))
            }
            Err(ClientError::Server {
                status: Status::Refused,
                code,
                message,
                ..
            }) => Err(ClientError::Refused {
                code: RefusalCode::from_u32(code),
                reason: message,
            }),
            Err(e) => Err(e),
        }
    }

    /// Release a registered flow.
    pub async fn unregister(&self, handle: TenantHandle) -> Result<(), ClientError> {
        self.call(RequestHeader::unregister(0, handle.0), &[])
            .await
            .map(drop)
    }

    /// Read `length_bytes` at `offset_bytes`.
    pub async fn read(
        &self,
        handle: TenantHandle,
        offset_bytes: u64,
        length_bytes: u32,
    ) -> Result<Vec<u8>, ClientError> {
        let max = self.conn.shared.max_payload_bytes.load(Ordering::Acquire);
        if length_bytes > max {
            return Err(ClientError::InvalidArgument(format!(
                "READ of {length_bytes} bytes; the server accepts at most {max}"
            )));
        }
        let data = self
            .call(
                RequestHeader::read(0, handle.0, offset_bytes, length_bytes),
                &[],
            )
            .await?;
        if data.len() != length_bytes as usize {
            self.conn.shared.close();
            return Err(ClientError::Protocol {
                detail: format!(
                    "READ of {length_bytes} bytes answered with {} bytes",
                    data.len()
                ),
            });
        }
        Ok(data)
    }

    /// Write `data` at `offset_bytes`; with [`WriteMode::Fua`] the server replies only once it
    /// is durable.
    pub async fn write(
        &self,
        handle: TenantHandle,
        offset_bytes: u64,
        data: &[u8],
        mode: WriteMode,
    ) -> Result<(), ClientError> {
        let max = self.conn.shared.max_payload_bytes.load(Ordering::Acquire);
        let len = u32::try_from(data.len())
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| {
                ClientError::InvalidArgument(format!(
                    "WRITE of {} bytes; the server accepts at most {max}",
                    data.len()
                ))
            })?;
        self.call(
            RequestHeader::write(0, handle.0, offset_bytes, len, mode),
            data,
        )
        .await
        .map(drop)
    }

    /// Make every write completed before this call durable.
    pub async fn flush(&self, handle: TenantHandle) -> Result<(), ClientError> {
        self.call(RequestHeader::flush(0, handle.0), &[])
            .await
            .map(drop)
    }

    /// Discard `length_bytes` at `offset_bytes`.
    pub async fn trim(
        &self,
        handle: TenantHandle,
        offset_bytes: u64,
        length_bytes: u32,
    ) -> Result<(), ClientError> {
        self.call(
            RequestHeader::trim(0, handle.0, offset_bytes, length_bytes),
            &[],
        )
        .await
        .map(drop)
    }

    /// The server's counters for `handle` (or the whole session with
    /// [`TenantHandle::DEFAULT`]), as the JSON text the server sent.
    pub async fn stats(&self, handle: TenantHandle) -> Result<String, ClientError> {
        let payload = self.call(RequestHeader::stats(0, handle.0), &[]).await?;
        String::from_utf8(payload).map_err(|_| ClientError::Protocol {
            detail: "STATS reply is not UTF-8".into(),
        })
    }

    /// Send one request (its cookie is assigned here) and wait for its reply's payload.
    async fn call(
        &self,
        mut header: RequestHeader,
        payload: &[u8],
    ) -> Result<Vec<u8>, ClientError> {
        let shared = &*self.conn.shared;
        let (tx, rx) = oneshot::channel();
        header.cookie = {
            let mut pending = shared.pending.lock().map_err(|_| ClientError::Closed)?;
            // `close` sets the flag before it takes this lock to fail every slot, so checking
            // under the lock means a slot is either refused here or failed by `close`.
            if shared.closed.load(Ordering::Acquire) {
                return Err(ClientError::Closed);
            }
            pending.insert(header.opcode, tx)
        };
        let wake = {
            let mut outbox = shared.outbox.lock().map_err(|_| ClientError::Closed)?;
            outbox.bytes.extend_from_slice(&header.encode());
            outbox.bytes.extend_from_slice(payload);
            !std::mem::replace(&mut outbox.writer_scheduled, true)
        };
        if wake {
            shared.writer_wake.notify_one();
        }
        let reply = rx.await.map_err(|_| ClientError::Closed)??;
        if reply.status == Status::Ok {
            return Ok(reply.payload);
        }
        let (code, message) = match ErrorBody::decode(&reply.payload) {
            Ok(body) => (body.code, body.message.to_owned()),
            Err(e) => (0, format!("(unreadable error body: {e})")),
        };
        Err(ClientError::Server {
            opcode: header.opcode,
            status: reply.status,
            code,
            message,
        })
    }
}

/// Sends whatever the outbox holds, one `write_all` per burst, until the connection closes.
async fn write_loop<W: AsyncWrite + Unpin>(mut half: W, shared: Arc<Shared>) {
    let mut sending: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        shared.writer_wake.notified().await;
        loop {
            {
                let Ok(mut outbox) = shared.outbox.lock() else {
                    shared.close();
                    return;
                };
                if outbox.bytes.is_empty() {
                    outbox.writer_scheduled = false;
                    break;
                }
                std::mem::swap(&mut outbox.bytes, &mut sending);
            }
            let sent = match half.write_all(&sending).await {
                // A TLS stream buffers records: push them out with the burst.
                Ok(()) => half.flush().await,
                Err(e) => Err(e),
            };
            if let Err(e) = sent {
                tracing::debug!(peer = %shared.peer, error = %e, "write failed; closing");
                shared.close();
                return;
            }
            sending.clear();
            if sending.capacity() > OUTBOX_KEEP_BYTES {
                sending = Vec::with_capacity(64 * 1024);
            }
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(mut half: R, shared: Arc<Shared>) {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    let (mut start, mut end) = (0usize, 0usize);
    loop {
        // Cut every complete frame in the buffer.
        loop {
            let max = shared.max_payload_bytes.load(Ordering::Acquire);
            match wire::decode_reply(&buf[start..end], max) {
                Ok(Decode::Done {
                    frame,
                    consumed_bytes,
                }) => {
                    if !deliver(&shared, frame.header, frame.payload) {
                        shared.close();
                        return;
                    }
                    start += consumed_bytes;
                }
                Ok(Decode::NeedMore { total_bytes }) => {
                    if start == end {
                        start = 0;
                        end = 0;
                    } else if start + total_bytes > buf.len() {
                        buf.copy_within(start..end, 0);
                        end -= start;
                        start = 0;
                        if total_bytes > buf.len() {
                            buf.resize(total_bytes, 0);
                        }
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(peer = %shared.peer, error = %e, "bad reply from server; closing");
                    shared.close();
                    return;
                }
            }
        }
        match half.read(&mut buf[end..]).await {
            Ok(0) | Err(_) => {
                shared.close();
                return;
            }
            Ok(n) => end += n,
        }
    }
}

/// Complete the request `header.cookie` names. `false` = the reply matches nothing we sent.
fn deliver(shared: &Shared, header: ReplyHeader, payload: &[u8]) -> bool {
    let waiting = match shared.pending.lock() {
        Ok(mut p) => p.take(header.cookie),
        Err(_) => return false,
    };
    let Some((opcode, tx)) = waiting else {
        tracing::warn!(cookie = header.cookie, "reply for no request in flight");
        return false;
    };
    if opcode != header.opcode {
        let _ = tx.send(Err(ClientError::Protocol {
            detail: format!(
                "reply to cookie {:#x} echoes {} but the request was {}",
                header.cookie, header.opcode, opcode
            ),
        }));
        return false;
    }
    // The caller may have given up (dropped its future); that is not an error.
    let _ = tx.send(Ok(RawReply {
        status: header.status,
        payload: payload.to_vec(),
    }));
    true
}

/// The wire's image of what a tenant registers with the scheduler: the one conversion from
/// `qos::TenantSpec` (which the scenario's tenants carry) to [`RegisterClass`]; the server's
/// REGISTER handler (`server::native`) converts back. The wire has no declared mix for a
/// best-effort flow, and holds the request size in a `u32` (a larger size is sent as
/// `u32::MAX`; a tenant spec's `size` is a `u32`, so never from a parsed tenant).
pub fn register_class(spec: &qos::TenantSpec) -> RegisterClass {
    match spec {
        qos::TenantSpec::LatencyCritical(slo) => latency_critical(
            slo.p95_read_latency_ns,
            slo.iops,
            slo.read_pct,
            u32::try_from(slo.request_bytes).unwrap_or(u32::MAX),
        ),
        qos::TenantSpec::BestEffort(_) => RegisterClass::BestEffort,
    }
}

/// Helper for callers that build an SLO from the usual units.
pub fn latency_critical(
    p95_read_latency_ns: u64,
    iops: u64,
    read_pct: u8,
    request_size_bytes: u32,
) -> RegisterClass {
    RegisterClass::LatencyCritical(proto::wire::Slo {
        p95_read_latency_ns,
        iops,
        read_pct,
        request_size_bytes,
    })
}
