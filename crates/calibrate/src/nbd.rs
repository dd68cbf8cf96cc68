//! `ullstack calibrate nbd://host[:port]/export`: measuring a remote export over NBD.
//!
//! # Connecting
//! The URI gives the host (a name, an IPv4 address or `[IPv6]`), the port (default 10809, the
//! IANA NBD port) and the export name (empty = the server's default export). The handshake is
//! `proto::nbd::client` (fixed newstyle, `NBD_OPT_GO`, falling back to `NBD_OPT_EXPORT_NAME`
//! on a server without GO): the same codec constants the server side of this project answers
//! `nbdinfo` with. A port that is not a number, a host that does not resolve or accept, and an
//! export the server does not have each give an error naming the URI and the bad part.
//! `nbds://` (TLS) and `nbd+unix://` are refused by name.
//!
//! # Does the export hold data?
//! A second-phase check before any write, on its own connection with structured replies and
//! the `base:allocation` metadata context asked for: the first 72 KiB are read and checked for
//! the partition-table and filesystem signatures a block device is checked for (`target.rs`,
//! refused by name); then, if the server offers `base:allocation`, `NBD_CMD_BLOCK_STATUS` walks
//! the export, and any extent that is neither a hole nor reads as zeros means data: refused
//! with the allocated byte count. A server without `base:allocation` cannot say; then an export
//! whose first bytes are not all zero is refused as holding data, and an all-zero one as
//! "cannot tell". `--destructive` overrides all of it. A read-only export is refused always.
//!
//! # The measurement: io_uring on the socket, one thread
//! The closed loop keeps `QD` requests in flight on one TCP connection (simple replies). One
//! ring holds at most two operations: a `RECV` that is always posted (into a 1 MiB buffer, so
//! the server can always deliver replies and a blocked send can never deadlock against a full
//! reply path), and at most one `SEND`. The replies' byte stream goes through
//! `proto::nbd::client::SimpleReplyReader`, which says when a reply's last data byte is in: the
//! latency clock stops there, and the slot's next request is queued at once. Every request made
//! ready while a SEND is in flight waits in a user-space buffer and leaves in the next SEND,
//! so a batch of replies turns into one send. The clock starts when a request is queued, so
//! that wait is in its latency, as it would be for an application.
//!
//! Why not a sender and a receiver thread with blocking sockets: in a closed loop the receiver
//! would have to hand every completion to the sender — a futex wake-up per request, and on a
//! loaded 2-core machine a trip through the scheduler — inside the loop being measured, which
//! lowers the load a low QD offers and adds scheduler noise to it; and two threads need two
//! cores to not measure each other. The ring also keeps this prober shaped like the file
//! prober (`uring.rs`).
//!
//! What a network target is not: **O_DIRECT and polled completion do not apply** (there is no
//! page cache on this side and IOPOLL is for block devices); the latency includes both TCP
//! stacks, the network and the server's own path, which is what a tenant of that server sees.
//!
//! # What it leaves out
//! TLS, several connections (one connection is one server worker's view), and extended headers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

use crate::curves::{curve_point, CurvePoint};
use crate::signature::{signature, HEAD_BYTES};
use crate::sweep::{Completion, Polling, Prober};
use crate::sys::{SockRing, RECV_TAG, SEND_TAG};
use anyhow::{anyhow, bail, Context};
use engine::LatencyHistogram;
use proto::nbd::client::{self, ClientOptions, Connected, SimpleReplyReader};
use proto::nbd::transmission::{
    self as tx, ChunkHeader, CommandType, RequestHeader, REQUEST_HEADER_BYTES,
};
use proto::nbd::{TransmissionFlags, STATE_HOLE, STATE_ZERO};

/// The IANA port of NBD, used when the URI names none.
pub const DEFAULT_PORT: u16 = 10809;
/// Longest wait for a TCP connection to be accepted.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for any reply of the handshake, the data check and the precondition.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the next completion in a measurement (a server that stopped answering).
const STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes the data check reads from the start: [`HEAD_BYTES`] rounded up to 4 KiB blocks.
const CHECK_READ_BYTES: u32 = HEAD_BYTES.div_ceil(4096) as u32 * 4096;
/// Most BLOCK_STATUS requests of one walk (each covers up to 4 GiB; a server answering in tiny
/// extents stops the walk here, and the rest counts as unknown).
const MAX_BLOCK_STATUS_REQUESTS: u32 = 65_536;
/// Largest BLOCK_STATUS range asked at once: the protocol's u32 length, 4 KiB-aligned.
const BLOCK_STATUS_RANGE_BYTES: u64 = 0xffff_f000;
/// Largest structured-reply chunk accepted in the check (a 72 KiB read's data plus headers).
const MAX_CHUNK_BYTES: u32 = 1 << 20;
/// The receive buffer of the measurement ring: 8 of the largest replies (128 KiB reads).
const RECV_BUFFER_BYTES: usize = 1 << 20;
/// Requests of the sequential precondition, bytes each.
const PRECONDITION_CHUNK_BYTES: u32 = 1 << 20;

/// A parsed `nbd://` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    /// As given (for messages).
    pub uri: String,
    pub host: String,
    pub port: u16,
    pub export: String,
}

impl NbdUri {
    pub fn parse(uri: &str) -> anyhow::Result<NbdUri> {
        let rest = match uri.split_once("://") {
            Some(("nbd", rest)) => rest,
            Some((scheme, _)) => bail!(
                "TARGET {uri:?}: {scheme}:// is not supported (no TLS or Unix sockets here); \
                 expected nbd://host[:port]/export"
            ),
            None => bail!("TARGET {uri:?}: expected nbd://host[:port]/export"),
        };
        let (authority, export) = rest.split_once('/').unwrap_or((rest, ""));
        if export.contains('?') || export.contains('#') {
            bail!("TARGET {uri:?}: query parameters are not supported; expected nbd://host[:port]/export");
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| anyhow!("TARGET {uri:?}: `[` without `]` around an IPv6 host"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            bail!("TARGET {uri:?}: no host; expected nbd://host[:port]/export");
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 => n,
                _ => bail!("TARGET {uri:?}: port {p:?}: expected a number 1–65535"),
            },
        };
        Ok(NbdUri {
            uri: uri.to_owned(),
            host: host.to_owned(),
            port,
            export: export.to_owned(),
        })
    }

    /// A file-name-safe name: `nbd-HOST-PORT-EXPORT`.
    pub fn name(&self) -> String {
        let raw = format!("nbd-{}-{}-{}", self.host, self.port, self.export);
        raw.trim_end_matches('-')
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// Connects and runs the handshake.
    fn connect(&self, options: ClientOptions) -> anyhow::Result<(TcpStream, Connected)> {
        let uri = &self.uri;
        let addrs: Vec<SocketAddr> = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .with_context(|| format!("TARGET {uri:?}: cannot resolve host {:?}", self.host))?
            .collect();
        let mut last = None;
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, CONNECT_TIMEOUT) {
                Ok(mut s) => {
                    s.set_nodelay(true)?;
                    s.set_read_timeout(Some(IO_TIMEOUT))?;
                    s.set_write_timeout(Some(IO_TIMEOUT))?;
                    let c = client::handshake(&mut s, options)
                        .map_err(|e| anyhow!("TARGET {uri:?}: {e}"))?;
                    return Ok((s, c));
                }
                Err(e) => last = Some(format!("{addr}: {e}")),
            }
        }
        bail!(
            "TARGET {uri:?}: cannot connect ({})",
            last.unwrap_or_else(|| format!("{:?} resolved to no address", self.host))
        )
    }
}

/// Sends one request on a blocking connection.
fn send(
    s: &mut TcpStream,
    command: CommandType,
    cookie: u64,
    offset: u64,
    len: u32,
    payload: &[u8],
) -> std::io::Result<()> {
    let header = RequestHeader {
        flags: 0,
        command,
        cookie,
        offset_bytes: offset,
        length_bytes: len,
    };
    s.write_all(&header.encode())?;
    s.write_all(payload)
}

/// Reads the chunks of one structured reply to `cookie` until DONE.
fn chunks(s: &mut TcpStream, cookie: u64) -> anyhow::Result<Vec<(ChunkHeader, Vec<u8>)>> {
    let mut out = Vec::new();
    loop {
        let mut head = [0u8; tx::STRUCTURED_REPLY_HEADER_BYTES];
        s.read_exact(&mut head)?;
        let h = ChunkHeader::decode(&head).ok_or_else(|| {
            anyhow!(
                "a reply that is not a structured chunk (magic {:02x?})",
                &head[..4]
            )
        })?;
        if h.cookie != cookie {
            bail!("a chunk for cookie {}; expected {cookie}", h.cookie);
        }
        if h.length_bytes > MAX_CHUNK_BYTES {
            bail!(
                "a chunk of {} bytes; at most {MAX_CHUNK_BYTES} expected",
                h.length_bytes
            );
        }
        let mut body = vec![0u8; h.length_bytes as usize];
        s.read_exact(&mut body)?;
        if h.reply_type == tx::REPLY_TYPE_ERROR || h.reply_type == tx::REPLY_TYPE_ERROR_OFFSET {
            let errno = body
                .get(..4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            bail!("the server answered errno {errno}");
        }
        let done = h.done();
        out.push((h, body));
        if done {
            return Ok(out);
        }
    }
}

/// Reads `len` bytes at 0 (structured or simple replies, as negotiated).
fn read_head(s: &mut TcpStream, c: &Connected, len: u32) -> anyhow::Result<Vec<u8>> {
    send(s, CommandType::Read, 1, 0, len, &[])?;
    let mut data = vec![0u8; len as usize];
    if !c.structured_replies {
        let mut head = [0u8; tx::SIMPLE_REPLY_BYTES];
        s.read_exact(&mut head)?;
        let r = tx::SimpleReply::decode(&head).ok_or_else(|| anyhow!("not a simple reply"))?;
        if r.error != 0 {
            bail!("the server answered errno {}", r.error);
        }
        s.read_exact(&mut data)?;
        return Ok(data);
    }
    for (h, body) in chunks(s, 1)? {
        if h.reply_type == tx::REPLY_TYPE_OFFSET_DATA && body.len() >= 8 {
            let off = u64::from_be_bytes(body[..8].try_into().unwrap_or_default());
            let piece = &body[8..];
            let at = usize::try_from(off).unwrap_or(usize::MAX);
            let end = at.checked_add(piece.len()).filter(|&e| e <= data.len());
            let end = end.ok_or_else(|| {
                anyhow!("read data at {off}+{} beyond the {len} asked", piece.len())
            })?;
            data[at..end].copy_from_slice(piece);
        }
        // OFFSET_HOLE reads as zeros, which `data` already holds.
    }
    Ok(data)
}

/// Bytes of `[0, size)` that `base:allocation` reports as data (neither hole nor zero), and
/// whether the walk covered the whole export. Stops at the first data found.
fn allocated_bytes(s: &mut TcpStream, size: u64, context: u32) -> anyhow::Result<(u64, bool)> {
    let mut offset = 0u64;
    for request in 0..MAX_BLOCK_STATUS_REQUESTS {
        if offset >= size {
            return Ok((0, true));
        }
        let len = (size - offset).min(BLOCK_STATUS_RANGE_BYTES) as u32;
        let cookie = 2 + u64::from(request);
        send(s, CommandType::BlockStatus, cookie, offset, len, &[])?;
        let mut covered = 0u64;
        let mut data = 0u64;
        for (h, body) in chunks(s, cookie)? {
            if h.reply_type != tx::REPLY_TYPE_BLOCK_STATUS {
                continue;
            }
            let (id, extents) = tx::decode_block_status(&body).ok_or_else(|| {
                anyhow!(
                    "a BLOCK_STATUS chunk of {} bytes that does not decode",
                    body.len()
                )
            })?;
            if id != context {
                continue;
            }
            for e in extents {
                if e.flags & (STATE_HOLE | STATE_ZERO) == 0 {
                    data += u64::from(e.length_bytes);
                }
                covered += u64::from(e.length_bytes);
            }
        }
        if data > 0 {
            return Ok((data, false));
        }
        if covered == 0 {
            bail!("BLOCK_STATUS at {offset} covered no bytes");
        }
        offset += covered;
    }
    Ok((0, offset >= size))
}

/// The data check of the module essay; `Ok` = the export may be written.
pub fn check_export(uri: &NbdUri, destructive: bool) -> anyhow::Result<Connected> {
    let u = &uri.uri;
    let (mut s, c) = uri.connect(ClientOptions {
        export: uri.export.clone(),
        structured_replies: true,
        base_allocation: true,
    })?;
    if c.flags.contains(TransmissionFlags::READ_ONLY) {
        bail!("TARGET {u:?}: the export is read-only; calibration writes to it");
    }
    let len = CHECK_READ_BYTES.min(u32::try_from(c.size_bytes).unwrap_or(u32::MAX));
    let head = read_head(&mut s, &c, len)
        .with_context(|| format!("TARGET {u:?}: reading its first {len} bytes"))?;
    let verdict = match signature(&head) {
        Some(name) => Some(format!("the export holds a signature of {name}")),
        None => match c.base_allocation_id {
            Some(id) => {
                let (data, whole) = allocated_bytes(&mut s, c.size_bytes, id)
                    .with_context(|| format!("TARGET {u:?}: NBD_CMD_BLOCK_STATUS"))?;
                if data > 0 {
                    Some(format!("the export holds data ({data} bytes allocated, by base:allocation)"))
                } else if !whole {
                    Some(format!(
                        "base:allocation did not cover the export in {MAX_BLOCK_STATUS_REQUESTS} requests, so it may hold data"
                    ))
                } else {
                    None
                }
            }
            None if head.iter().any(|&b| b != 0) => Some(format!(
                "the export holds data in its first {len} bytes (the server offers no base:allocation to say more)"
            )),
            None => Some(
                "the server offers no base:allocation, so whether the export holds data cannot be told".into(),
            ),
        },
    };
    let _ = send(&mut s, CommandType::Disc, 0, 0, 0, &[]);
    if let (Some(why), false) = (verdict, destructive) {
        bail!("TARGET {u:?}: {why}; calibration writes to it: give --destructive to overwrite it");
    }
    Ok(c)
}

/// A closed loop over an NBD export (see the module essay).
pub struct NbdProber {
    stream: TcpStream,
    pub export: Connected,
    pub span_bytes: u64,
    measure: Duration,
    rng: engine::SimRng,
}

impl NbdProber {
    /// Checks the export ([`check_export`]), connects the measuring connection and, with
    /// `precondition`, writes the span once.
    pub fn open(
        uri: &NbdUri,
        size_cap_bytes: u64,
        destructive: bool,
        precondition: bool,
        measure: Duration,
    ) -> anyhow::Result<NbdProber> {
        check_export(uri, destructive)?;
        let u = &uri.uri;
        let (stream, export) = uri.connect(ClientOptions::simple(&uri.export))?;
        if let Some(b) = export.block_sizes {
            let largest = *crate::sweep::SIZES_BYTES.last().unwrap_or(&4096);
            if 4096 % b.minimum_bytes.max(1) != 0 || u64::from(b.maximum_bytes) < largest {
                bail!(
                    "TARGET {u:?}: block sizes {}–{} bytes; calibration needs 4 KiB requests \
                     aligned to the minimum and {largest}-byte ones within the maximum",
                    b.minimum_bytes,
                    b.maximum_bytes
                );
            }
        }
        let span_bytes = export.size_bytes.min(size_cap_bytes) / (128 << 10) * (128 << 10);
        if span_bytes == 0 {
            bail!(
                "TARGET {u:?}: {} bytes is too small to calibrate (at least 128 KiB)",
                export.size_bytes
            );
        }
        let mut p = NbdProber {
            stream,
            export,
            span_bytes,
            measure,
            rng: engine::stream(1, "calibrate-nbd"),
        };
        if precondition {
            p.precondition()
                .with_context(|| format!("TARGET {u:?}: preconditioning"))?;
        }
        Ok(p)
    }

    /// Writes the span once, 1 MiB at a time, then FLUSH (one request in flight).
    fn precondition(&mut self) -> anyhow::Result<()> {
        let data: Vec<u8> = (0..PRECONDITION_CHUNK_BYTES)
            .map(|i| (i as u8) ^ 0x5a)
            .collect();
        let mut off = 0u64;
        let mut reply = [0u8; tx::SIMPLE_REPLY_BYTES];
        while off < self.span_bytes {
            let n = (self.span_bytes - off).min(u64::from(PRECONDITION_CHUNK_BYTES)) as u32;
            send(
                &mut self.stream,
                CommandType::Write,
                1,
                off,
                n,
                &data[..n as usize],
            )?;
            self.stream.read_exact(&mut reply)?;
            match tx::SimpleReply::decode(&reply) {
                Some(r) if r.error == 0 => {}
                r => bail!("write at {off}: {r:?}"),
            }
            off += u64::from(n);
        }
        if self.export.flags.contains(TransmissionFlags::SEND_FLUSH) {
            send(&mut self.stream, CommandType::Flush, 1, 0, 0, &[])?;
            self.stream.read_exact(&mut reply)?;
        }
        Ok(())
    }

    /// One closed-loop point: `qd` requests of `size_bytes` in flight. After a failure with a
    /// receive or send still in flight, the socket is shut down so both complete, and they are
    /// reaped before the buffers go (`sys::SockRing`); the prober is unusable afterwards.
    pub fn run(&mut self, read_pct: u8, size_bytes: u64, qd: u32) -> anyhow::Result<CurvePoint> {
        let mut io = SockRing::new(8, RECV_BUFFER_BYTES).context("io_uring setup")?;
        let result = self.closed_loop(&mut io, read_pct, size_bytes, qd);
        if result.is_err() && (io.recv_live() || io.send_busy()) {
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
            io.reap_after_shutdown(STALL_TIMEOUT);
        }
        result
    }

    fn closed_loop(
        &mut self,
        io: &mut SockRing,
        read_pct: u8,
        size_bytes: u64,
        qd: u32,
    ) -> anyhow::Result<CurvePoint> {
        let fd = io_uring::types::Fd(self.stream.as_raw_fd());
        let slots = self.span_bytes / size_bytes;
        let payload: Vec<u8> = (0..size_bytes).map(|i| (i as u8) ^ 0xa5).collect();
        let len = size_bytes as u32;
        // Per slot: when its request was queued, whether it is a read, whether it is in flight.
        let mut meta: Vec<(Instant, bool, bool)> = vec![(Instant::now(), true, false); qd as usize];
        let (mut reads, mut writes) = (LatencyHistogram::new(), LatencyHistogram::new());
        let mut pending: Vec<u8> = Vec::new();
        let mut sent = 0usize;
        let mut reader = SimpleReplyReader::new();
        let settle = self.measure / 5;
        let start = Instant::now();
        let (measure_from, end) = (start + settle, start + settle + self.measure);
        let rng = &mut self.rng;
        let mut enqueue = |pending: &mut Vec<u8>, slot: u32| -> (Instant, bool, bool) {
            let read = engine::rng::chance(rng, u64::from(read_pct), 100);
            let offset = engine::rng::below(rng, slots) * size_bytes;
            let header = RequestHeader {
                flags: 0,
                command: if read {
                    CommandType::Read
                } else {
                    CommandType::Write
                },
                cookie: u64::from(slot),
                offset_bytes: offset,
                length_bytes: len,
            };
            pending.extend_from_slice(&header.encode());
            if !read {
                pending.extend_from_slice(&payload);
            }
            (Instant::now(), read, true)
        };
        pending.reserve(qd as usize * (REQUEST_HEADER_BYTES + size_bytes as usize));
        for slot in 0..qd {
            meta[slot as usize] = enqueue(&mut pending, slot);
        }
        io.post_recv(fd)?;
        let mut live = qd;
        let mut cancel_sent = false;
        let timeout = io_uring::types::Timespec::from(STALL_TIMEOUT);
        let mut done: Vec<tx::SimpleReply> = Vec::new();
        while live > 0 || io.send_busy() || io.recv_live() {
            if !io.send_busy() && !pending.is_empty() {
                io.swap_sending(&mut pending);
                pending.clear();
                sent = 0;
                io.post_send(fd, 0)?;
            }
            if live == 0 && !io.send_busy() && io.recv_live() && !cancel_sent {
                // Every reply is in: cancel the receive so its buffer can be freed.
                cancel_sent = true;
                io.cancel_recv()?;
            }
            match io.submit_and_wait(&timeout) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => bail!(
                    "no completion from the server in {STALL_TIMEOUT:?} ({live} requests in flight)"
                ),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e).context("io_uring_enter"),
            }
            for (tag, res) in io.completions() {
                match tag {
                    SEND_TAG => {
                        if res < 0 {
                            bail!("send: {}", std::io::Error::from_raw_os_error(-res));
                        }
                        sent += res as usize;
                        if sent < io.sending_len() {
                            io.post_send(fd, sent)?;
                        }
                    }
                    RECV_TAG => {
                        if res == -libc::ECANCELED {
                            continue;
                        }
                        if res < 0 {
                            bail!("recv: {}", std::io::Error::from_raw_os_error(-res));
                        }
                        if res == 0 {
                            bail!("the server closed the connection ({live} requests in flight)");
                        }
                        if live == 0 {
                            bail!("{res} bytes from the server with no request in flight");
                        }
                        reader
                            .push(
                                io.received(res as usize),
                                |cookie| {
                                    let (_, read, busy) =
                                        *meta.get(usize::try_from(cookie).ok()?)?;
                                    busy.then_some(if read { len } else { 0 })
                                },
                                |r| done.push(r),
                            )
                            .map_err(|e| anyhow!("{e}"))?;
                        io.post_recv(fd)?;
                    }
                    _ => {} // the cancel's own completion
                }
            }
            let now = Instant::now();
            for r in done.drain(..) {
                let slot = r.cookie as usize;
                let (at, read, _) = meta[slot];
                if r.error != 0 {
                    bail!(
                        "the server answered errno {} to a {}-byte {}",
                        r.error,
                        len,
                        if read { "READ" } else { "WRITE" }
                    );
                }
                if at >= measure_from && at < end {
                    let h = if read { &mut reads } else { &mut writes };
                    h.record(now.duration_since(at).as_nanos() as u64);
                }
                if now < end {
                    meta[slot] = enqueue(&mut pending, slot as u32);
                } else {
                    meta[slot].2 = false;
                    live -= 1;
                }
            }
        }
        if !reader.is_between_replies() {
            bail!("the connection ended inside a reply");
        }
        Ok(curve_point(
            read_pct,
            size_bytes,
            qd,
            self.measure.as_nanos() as u64,
            &reads,
            &writes,
        ))
    }
}

impl Prober for NbdProber {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
        _: Completion,
    ) -> anyhow::Result<Vec<CurvePoint>> {
        qds.iter()
            .map(|&qd| self.run(read_pct, size_bytes, qd))
            .collect()
    }

    fn polling(&mut self) -> Polling {
        Polling::NotApplicable(NETWORK_COMPLETION.into())
    }
}

/// What the report says about completion on a network target.
pub const NETWORK_COMPLETION: &str = "O_DIRECT and polled completion do not apply to a network \
     target (no page cache on this side; IOPOLL is for block devices); the latency includes both \
     TCP stacks, the network and the server's own path";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_and_bad_parts_are_named() {
        let u = NbdUri::parse("nbd://127.0.0.1:10810/vol").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.export.as_str()),
            ("127.0.0.1", 10810, "vol")
        );
        let u = NbdUri::parse("nbd://[::1]/").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.export.as_str()),
            ("::1", DEFAULT_PORT, "")
        );
        assert_eq!(NbdUri::parse("nbd://h").unwrap().name(), "nbd-h-10809");
        for (bad, needle) in [
            ("nbd://h:port/x", "\"port\""),
            ("nbd://h:0/x", "\"0\""),
            ("nbd://h:70000/x", "\"70000\""),
            ("nbd:///x", "no host"),
            ("nbds://h/x", "nbds://"),
            ("nbd+unix:///x?socket=/s", "nbd+unix://"),
            ("nbd://h/x?tls=on", "query"),
        ] {
            let e = NbdUri::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains(needle), "{bad}: {e}");
        }
    }
}
