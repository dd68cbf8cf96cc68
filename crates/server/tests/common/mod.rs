//! Shared helpers of the server's end-to-end tests: starting a server on 127.0.0.1 with
//! kernel-chosen ports, a raw own-protocol client (for malformed frames the client library
//! refuses to send), a raw NBD client, and tool lookup that skips with a printed reason.
#![allow(dead_code)]

pub mod admin;
pub mod emulated_qos;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use proto::nbd;
use proto::nbd::transmission::CommandType;
use proto::wire::{self, HelloBody, Opcode, RequestHeader, Status, WriteMode};
use server::config::ServerConfig;
use server::ServerHandle;

/// Read timeout of every test socket: a hung server fails the test instead of hanging it.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// Starts a server from `toml`. `ULLSTACK_TEST_SOCKET_IO=uring|epoll` sets its
/// `[dataplane] socket_io`, `ULLSTACK_TEST_SOCKET_RECV=multishot|single` its
/// `socket_recv` and `ULLSTACK_TEST_FILE_IO=socket-ring|own-ring` its `file_io`, so a suite
/// runs over any socket and file path.
pub fn start(toml: &str) -> ServerHandle {
    let mut config = ServerConfig::from_toml_str(toml)
        .unwrap_or_else(|e| panic!("test config invalid: {e}\n{toml}"));
    match std::env::var("ULLSTACK_TEST_SOCKET_IO").as_deref() {
        Ok("uring") => config.dataplane.socket_io = server::config::SocketIo::Uring,
        Ok("epoll") => config.dataplane.socket_io = server::config::SocketIo::Epoll,
        _ => {}
    }
    match std::env::var("ULLSTACK_TEST_SOCKET_RECV").as_deref() {
        Ok("single") => config.dataplane.socket_recv = server::config::SocketRecv::Single,
        Ok("multishot") => config.dataplane.socket_recv = server::config::SocketRecv::Multishot,
        _ => {}
    }
    match std::env::var("ULLSTACK_TEST_FILE_IO").as_deref() {
        Ok("socket-ring") => config.dataplane.file_io = server::config::FileIo::SocketRing,
        Ok("own-ring") => config.dataplane.file_io = server::config::FileIo::OwnRing,
        _ => {}
    }
    server::start(config).unwrap_or_else(|e| panic!("server did not start: {e}"))
}

/// `text` with the same `ULLSTACK_TEST_SOCKET_IO` / `ULLSTACK_TEST_SOCKET_RECV` /
/// `ULLSTACK_TEST_FILE_IO` overrides
/// [`start`] applies, for a config file a test reloads: without them a reload would see the
/// running `[dataplane]` differ from the file's and refuse it. Unchanged when neither is set
/// or when `text` is not TOML.
pub fn with_socket_env(text: &str) -> String {
    let set: Vec<(&str, String)> = [
        ("socket_io", "ULLSTACK_TEST_SOCKET_IO", ["uring", "epoll"]),
        (
            "socket_recv",
            "ULLSTACK_TEST_SOCKET_RECV",
            ["single", "multishot"],
        ),
        (
            "file_io",
            "ULLSTACK_TEST_FILE_IO",
            ["socket-ring", "own-ring"],
        ),
    ]
    .into_iter()
    .filter_map(|(key, var, known)| {
        let value = std::env::var(var).ok()?;
        known.contains(&value.as_str()).then_some((key, value))
    })
    .collect();
    if set.is_empty() {
        return text.to_string();
    }
    // A file a test writes broken on purpose goes out as it is.
    let Ok(mut table) = text.parse::<toml::Table>() else {
        return text.to_string();
    };
    let dataplane = table
        .entry("dataplane")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .expect("[dataplane] is a table");
    for (key, value) in set {
        dataplane.insert(key.to_string(), toml::Value::String(value));
    }
    toml::to_string(&table).expect("a TOML table prints")
}

/// A server with two workers, one volume `vol` of `backend` (a TOML inline table) and two
/// tenants with read-write access to it: `lc` (latency-critical, secret "lc-secret-1") and
/// `be` (best effort, "be-secret-1"), scheduled by `profile`. Not yet validated: callers set
/// their `[qos]` fields first.
pub fn lc_be_config(backend: &str, profile: &qos::DeviceProfile) -> ServerConfig {
    let text = format!(
        r#"
[listen]
native = "127.0.0.1:0"

[dataplane]
workers = 2

[[volume]]
name = "vol"
backend = {backend}

[[tenant]]
name = "lc"
secret = "lc-secret-1"
class = "lc"
acl = [{{ volume = "vol", access = "read-write" }}]

[[tenant]]
name = "be"
secret = "be-secret-1"
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]
"#
    );
    let mut config = ServerConfig::from_toml_str(&text)
        .unwrap_or_else(|e| panic!("test config invalid: {e}\n{text}"));
    config.qos.profile = server::config::ProfileConfig::Inline(
        profile
            .to_toml_string()
            .parse()
            .expect("profile TOML round trip"),
    );
    config
}

/// A config with one volume `vol` of `backend` and tenants:
/// `alice` (rw, secret "alice-secret"), `reader` (read-only, "reader-secret"),
/// `ranged` (rw on LBAs [0, 2048) only, "ranged-secret"); exports `default` (alice) and
/// `ro` (reader).
pub fn standard_config(backend: &str, scheduler: &str) -> String {
    format!(
        r#"
[listen]
native = "127.0.0.1:0"
nbd = "127.0.0.1:0"
admin = "127.0.0.1:0"

[dataplane]
workers = 2

[qos]
scheduler = "{scheduler}"

[[volume]]
name = "vol"
backend = {backend}

[[volume]]
name = "other"
backend = {{ kind = "memory", size = "1MiB" }}

[[tenant]]
name = "alice"
secret = "alice-secret"
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]

[[tenant]]
name = "reader"
secret = "reader-secret"
class = "be"
acl = [{{ volume = "vol", access = "read" }}]

[[tenant]]
name = "ranged"
secret = "ranged-secret"
class = "be"
acl = [{{ volume = "vol", access = "read-write", lba_ranges = [[0, 2048]] }}]

[[export]]
name = "default"
volume = "vol"
tenant = "alice"

[[export]]
name = "ro"
volume = "vol"
tenant = "reader"
"#
    )
}

pub fn memory_backend(size: &str) -> String {
    format!("{{ kind = \"memory\", size = \"{size}\" }}")
}

pub fn file_backend(path: &std::path::Path, size: &str) -> String {
    format!(
        "{{ kind = \"file\", path = \"{}\", size = \"{size}\" }}",
        path.display()
    )
}

/// A scratch file path unique to this test process and `tag`, removed on drop.
pub struct TempFile(pub std::path::PathBuf);

impl TempFile {
    /// A path of its own: the tests of one binary run in parallel in one process, so two of
    /// them asking for the same `tag` must not share a file (the first to finish would delete
    /// the other's).
    pub fn new(tag: &str) -> TempFile {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        TempFile(dir.join(format!("ullstack-{tag}-{}-{n}.img", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs an external tool to completion: whether it succeeded, and its stdout then stderr.
pub fn run(cmd: &mut Command) -> (bool, String) {
    testkit::run(cmd).expect("spawn tool")
}

/// `Some(path)` if `tool` is on PATH; otherwise prints why the test is skipped (or, with
/// `ULLSTACK_REQUIRE_TOOLS=1` as in CI, fails it).
pub fn tool(name: &str, test: &str) -> Option<String> {
    testkit::tool(name, test, "apt-get install fio libnbd-bin qemu-utils")
        .map(|p| p.to_string_lossy().into_owned())
}

/// Deterministic test pattern: byte i of the block at `offset` (changes with both).
pub fn pattern(offset: u64, len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = offset
                .wrapping_add(i as u64)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                >> 56;
            (x as u8) ^ seed ^ (i as u8)
        })
        .collect()
}

/// A blocking own-protocol client speaking raw frames.
pub struct RawNative {
    pub stream: TcpStream,
    next_cookie: u64,
}

/// A decoded reply.
#[derive(Debug)]
pub struct RawReply {
    pub opcode: Opcode,
    pub status: Status,
    pub cookie: u64,
    pub payload: Vec<u8>,
}

impl RawNative {
    pub fn connect(addr: SocketAddr) -> RawNative {
        RawNative::over(TcpStream::connect(addr).expect("connect to own protocol"))
    }

    /// A client over a stream the caller connected (from another source address, say).
    pub fn over(stream: TcpStream) -> RawNative {
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        stream.set_nodelay(true).expect("nodelay");
        RawNative {
            stream,
            next_cookie: 1,
        }
    }

    fn cookie(&mut self) -> u64 {
        self.next_cookie += 1;
        self.next_cookie
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Sends a request header + payload; returns the cookie used.
    pub fn send(&mut self, mut header: RequestHeader, payload: &[u8]) -> u64 {
        header.cookie = self.cookie();
        let mut frame = header.encode().to_vec();
        frame.extend_from_slice(payload);
        self.send_raw(&frame);
        header.cookie
    }

    /// Reads one reply (None: the server closed the connection).
    pub fn recv(&mut self) -> Option<RawReply> {
        let mut head = [0u8; wire::REPLY_HEADER_BYTES];
        if self.stream.read_exact(&mut head).is_err() {
            return None;
        }
        let header = match wire::decode_reply_header(&head, 64 << 20) {
            Ok(proto::Decode::Done { frame, .. }) => frame,
            other => panic!("bad reply header from server: {other:?}"),
        };
        let mut payload = vec![0u8; header.payload_len as usize];
        self.stream.read_exact(&mut payload).expect("reply payload");
        Some(RawReply {
            opcode: header.opcode,
            status: header.status,
            cookie: header.cookie,
            payload,
        })
    }

    pub fn call(&mut self, header: RequestHeader, payload: &[u8]) -> RawReply {
        let cookie = self.send(header, payload);
        let reply = self
            .recv()
            .expect("server closed the connection instead of replying");
        assert_eq!(reply.cookie, cookie, "cookie echoed");
        reply
    }

    pub fn hello(&mut self, tenant: &str, secret: &str, volume: &str) -> RawReply {
        let body = HelloBody {
            tenant,
            secret: secret.as_bytes(),
            volume,
        };
        let mut payload = Vec::new();
        body.encode_into(&mut payload).expect("hello body");
        self.call(RequestHeader::hello(0, payload.len() as u32), &payload)
    }

    pub fn read(&mut self, offset: u64, len: u32) -> RawReply {
        self.call(RequestHeader::read(0, 0, offset, len), &[])
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> RawReply {
        self.call(
            RequestHeader::write(0, 0, offset, data.len() as u32, WriteMode::WriteBack),
            data,
        )
    }

    /// True if the server closed the connection (EOF) within the timeout.
    pub fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        loop {
            match self.stream.read(&mut byte) {
                Ok(0) => return true,
                Ok(_) => continue, // drain any error reply before the close
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

/// `NBD_INFO_BLOCK_SIZE` as the server advertised it in GO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NbdBlockSizes {
    pub minimum_bytes: u32,
    pub preferred_bytes: u32,
    pub maximum_bytes: u32,
}

/// A blocking NBD client: fixed newstyle, NBD_OPT_GO, simple replies.
pub struct RawNbd {
    pub stream: TcpStream,
    pub size_bytes: u64,
    pub flags: u16,
    /// `None` if the server sent no `NBD_INFO_BLOCK_SIZE` (the client asks for it).
    pub block_sizes: Option<NbdBlockSizes>,
    next_cookie: u64,
}

impl RawNbd {
    /// Connects and runs the client handshake of `proto::nbd::client` (GO with a
    /// BLOCK_SIZE info request, simple replies).
    pub fn connect(addr: SocketAddr, export: &str) -> Result<RawNbd, String> {
        let s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        RawNbd::over(s, export)
    }

    /// The same handshake over a stream the caller connected (from another source address,
    /// say).
    pub fn over(mut s: TcpStream, export: &str) -> Result<RawNbd, String> {
        s.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let c = nbd::client::handshake(&mut s, nbd::client::ClientOptions::simple(export))
            .map_err(|e| format!("GO refused: {e}"))?;
        Ok(RawNbd {
            stream: s,
            size_bytes: c.size_bytes,
            flags: c.flags.bits(),
            block_sizes: c.block_sizes.map(|b| NbdBlockSizes {
                minimum_bytes: b.minimum_bytes,
                preferred_bytes: b.preferred_bytes,
                maximum_bytes: b.maximum_bytes,
            }),
            next_cookie: 100,
        })
    }

    /// Sends one command; returns its cookie.
    pub fn send(&mut self, command: u16, flags: u16, offset: u64, len: u32, payload: &[u8]) -> u64 {
        self.next_cookie += 1;
        let mut frame = Vec::with_capacity(28 + payload.len());
        frame.extend_from_slice(&nbd::REQUEST_MAGIC.to_be_bytes());
        frame.extend_from_slice(&flags.to_be_bytes());
        frame.extend_from_slice(&command.to_be_bytes());
        frame.extend_from_slice(&self.next_cookie.to_be_bytes());
        frame.extend_from_slice(&offset.to_be_bytes());
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(payload);
        self.stream.write_all(&frame).expect("nbd send");
        self.next_cookie
    }

    /// Reads one simple reply: (errno, cookie).
    pub fn recv_head(&mut self) -> (u32, u64) {
        let mut head = [0u8; 16];
        self.stream.read_exact(&mut head).expect("nbd reply");
        assert_eq!(
            u32::from_be_bytes(head[0..4].try_into().unwrap_or_default()),
            nbd::SIMPLE_REPLY_MAGIC
        );
        (
            u32::from_be_bytes(head[4..8].try_into().unwrap_or_default()),
            u64::from_be_bytes(head[8..16].try_into().unwrap_or_default()),
        )
    }

    pub fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        let cookie = self.send(CommandType::Read.to_u16(), 0, offset, len, &[]);
        let (err, c) = self.recv_head();
        assert_eq!(c, cookie);
        if err != 0 {
            return Err(err);
        }
        let mut data = vec![0u8; len as usize];
        self.stream.read_exact(&mut data).expect("nbd read payload");
        Ok(data)
    }

    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> u32 {
        let cookie = self.send(
            CommandType::Write.to_u16(),
            u16::from(fua),
            offset,
            data.len() as u32,
            data,
        );
        let (err, c) = self.recv_head();
        assert_eq!(c, cookie);
        err
    }

    pub fn flush(&mut self) -> u32 {
        self.command(CommandType::Flush, 0, 0, 0)
    }

    /// NBD_CMD_TRIM of `len` bytes at `offset`; returns the reply's errno.
    pub fn trim(&mut self, offset: u64, len: u32) -> u32 {
        self.command(CommandType::Trim, 0, offset, len)
    }

    /// NBD_CMD_WRITE_ZEROES with command `flags` (FUA, NO_HOLE); returns the reply's errno.
    pub fn write_zeroes(&mut self, offset: u64, len: u32, flags: u16) -> u32 {
        self.command(CommandType::WriteZeroes, flags, offset, len)
    }

    /// A command without payload in either direction; returns the reply's errno.
    pub fn command(&mut self, command: CommandType, flags: u16, offset: u64, len: u32) -> u32 {
        let cookie = self.send(command.to_u16(), flags, offset, len, &[]);
        let (err, c) = self.recv_head();
        assert_eq!(c, cookie);
        err
    }

    pub fn disconnect(mut self) {
        self.send(CommandType::Disc.to_u16(), 0, 0, 0, &[]);
    }
}

/// Resident set size of this process, bytes.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// `GET /metrics` from the admin endpoint.
pub fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("admin connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("admin request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("admin response");
    assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
    text
}

/// The value of the first sample line starting with `name` (labels included), 0 if absent.
pub fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// The bytes of a hex string (a PSK as the key file holds it). Panics on bad hex: test data.
pub fn hex_bytes(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd-length hex {hex:?}");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// An OpenSSL client configuration for TLS-PSK as identity `identity` with `key`: PSK suites
/// only, no certificate or host name check (the server has no certificate).
pub fn psk_client(identity: &str, key: Vec<u8>) -> openssl::ssl::ConnectConfiguration {
    use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
    let mut connector = SslConnector::builder(SslMethod::tls_client()).expect("connector");
    connector.set_verify(SslVerifyMode::NONE);
    connector
        .set_cipher_list("ECDHEPSK:PSK")
        .expect("PSK suites");
    let mut id = identity.as_bytes().to_vec();
    id.push(0);
    connector.set_psk_client_callback(move |_, _hint, identity, psk| {
        identity[..id.len()].copy_from_slice(&id);
        psk[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    let mut config = connector.build().configure().expect("configure");
    config.set_verify_hostname(false);
    config
}

/// A TLS-PSK session (OpenSSL client) to the own protocol as `identity` with `key_hex`.
pub fn psk_session(
    addr: SocketAddr,
    identity: &str,
    key_hex: &str,
) -> openssl::ssl::SslStream<TcpStream> {
    try_psk_session(addr, identity, key_hex).expect("TLS-PSK handshake")
}

/// The same, or the handshake's error (a key the server does not hold).
pub fn try_psk_session(
    addr: SocketAddr,
    identity: &str,
    key_hex: &str,
) -> Result<openssl::ssl::SslStream<TcpStream>, String> {
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    psk_client(identity, hex_bytes(key_hex))
        .connect("localhost", tcp)
        .map_err(|e| e.to_string())
}

/// HELLO as `tenant` with `secret` for `volume` over an own-protocol TLS session; the reply's
/// status.
pub fn psk_hello(
    tls: &mut openssl::ssl::SslStream<TcpStream>,
    tenant: &str,
    secret: &str,
    volume: &str,
) -> Status {
    let body = HelloBody {
        tenant,
        secret: secret.as_bytes(),
        volume,
    };
    let mut payload = Vec::new();
    body.encode_into(&mut payload).expect("hello body");
    let mut frame = RequestHeader::hello(7, payload.len() as u32)
        .encode()
        .to_vec();
    frame.extend_from_slice(&payload);
    tls.write_all(&frame).expect("send HELLO");
    let mut head = [0u8; wire::REPLY_HEADER_BYTES];
    tls.read_exact(&mut head).expect("HELLO reply");
    let reply = match wire::decode_reply_header(&head, 1 << 20) {
        Ok(proto::Decode::Done { frame, .. }) => frame,
        other => panic!("bad reply header: {other:?}"),
    };
    let mut rest = vec![0u8; reply.payload_len as usize];
    tls.read_exact(&mut rest).expect("HELLO reply body");
    reply.status
}

/// A self-signed certificate and key for 127.0.0.1, written as PEM files.
pub fn self_signed(tag: &str) -> (TempFile, TempFile) {
    use openssl::asn1::Asn1Time;
    use openssl::hash::MessageDigest;
    use openssl::pkey::PKey;
    use openssl::rsa::Rsa;
    use openssl::x509::{X509NameBuilder, X509};
    let key = PKey::from_rsa(Rsa::generate(2048).expect("rsa")).expect("pkey");
    let mut name = X509NameBuilder::new().expect("name");
    name.append_entry_by_text("CN", "127.0.0.1").expect("cn");
    let name = name.build();
    let mut cert = X509::builder().expect("x509");
    cert.set_version(2).expect("v3");
    cert.set_subject_name(&name).expect("subject");
    cert.set_issuer_name(&name).expect("issuer");
    cert.set_pubkey(&key).expect("pubkey");
    cert.set_not_before(&Asn1Time::days_from_now(0).expect("now"))
        .expect("nb");
    cert.set_not_after(&Asn1Time::days_from_now(2).expect("later"))
        .expect("na");
    // The address as a subject alternative name: what a verifying client checks.
    let san = openssl::x509::extension::SubjectAlternativeName::new()
        .ip("127.0.0.1")
        .build(&cert.x509v3_context(None, None))
        .expect("san");
    cert.append_extension(san).expect("append san");
    cert.sign(&key, MessageDigest::sha256()).expect("sign");
    let (c, k) = (
        TempFile::new(&format!("{tag}-cert")),
        TempFile::new(&format!("{tag}-key")),
    );
    std::fs::write(&c.0, cert.build().to_pem().expect("cert pem")).expect("write cert");
    std::fs::write(&k.0, key.private_key_to_pem_pkcs8().expect("key pem")).expect("write key");
    (c, k)
}

/// `ullstack bench` against `addr`: 1 s of warm-up, then 3 s measured, on one thread with
/// `seed`, no TLS; panics if the bench fails.
pub fn bench_4s(
    addr: SocketAddr,
    tenants: Vec<client::bench::spec::TenantSpec>,
    seed: u64,
) -> client::bench::report::BenchReport {
    client::bench::run(&client::bench::BenchConfig {
        server: addr.to_string(),
        duration_ns: Some(3_000_000_000),
        ios_per_tenant: None,
        warmup_ns: 1_000_000_000,
        threads: 1,
        seed,
        tenants,
        progress: client::bench::Progress::Hidden,
        tls: None,
    })
    .expect("bench runs")
}
