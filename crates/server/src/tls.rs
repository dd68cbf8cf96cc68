//! TLS for both faces of the server: PSK (the `identity:hexkey` files of nbdkit and qemu-nbd)
//! and certificates, run sans-I/O over the worker's non-blocking sockets.
//!
//! # What it implements
//! `[tls] psk_file, certificate, key` (or `ullstack serve --tls-psk FILE --tls-certificate
//! CERT --tls-key KEY`). With TLS configured, the NBD face is in the spec's FORCEDTLS mode: a
//! client must send `NBD_OPT_STARTTLS` before anything else (`NBD_REP_ERR_TLS_REQD` otherwise),
//! and the reply to STARTTLS is the last byte sent in clear. The own protocol's listener speaks
//! TLS from its first byte (implicit TLS; the own protocol has no STARTTLS). A PSK client's
//! identity is a tenant name: on NBD it may use the exports of that tenant and of open tenants
//! ([`crate::nbd`]), so exports stop being open to anyone who reaches the port.
//!
//! # Design
//! *Why OpenSSL, not rustls.* The clients this must work with — libnbd (`nbdinfo`, `nbdcopy`)
//! and qemu, both on GnuTLS — authenticate NBD with TLS-PSK, and rustls has no external-PSK
//! support (rustls issue #174 is open; the PR adding it is unmerged). OpenSSL 3 does: a PSK
//! server callback serves TLS 1.2 PSK suites (`ECDHE-PSK`, `DHE-PSK`, `PSK`) and TLS 1.3 with
//! SHA-256 suites, which is what GnuTLS clients offer. So the `openssl` crate over the system
//! library (`libssl-dev`, `pkg-config` to build).
//!
//! *Sans-I/O.* The worker owns the socket, reads into its own buffers and never blocks, so
//! OpenSSL never touches the socket: an [`openssl::ssl::SslStream`] runs over [`MemPipe`], two
//! in-memory queues. Bytes read from the socket are appended to the pipe's input
//! ([`TlsConn::read_from`]); OpenSSL consumes them (handshake records, then application data,
//! decrypted into the connection's `InBuf`) and answers into the pipe's output; reading an
//! empty input is `WouldBlock`, which OpenSSL reports as `WANT_READ` and the worker takes as
//! "wait for EPOLLIN". Replies are drained from the connection's output queue, encrypted into
//! the pipe's output, and written to the socket ([`TlsConn::pump_out`]); when the socket is
//! full the ciphertext waits in the pipe and EPOLLOUT resumes it. At most
//! [`ENCRYPT_AHEAD_BYTES`] of plaintext is taken from the queue and encrypted ahead of the
//! socket (a larger reply is taken in parts), so a connection's TLS buffers stay bounded
//! whatever its queue holds, and what is not yet taken stays charged in the queue. The
//! buffers themselves ([`TlsConn::held_bytes`]) are charged to the server's memory ledger
//! with the connection's other buffers ([`crate::memory`]), and those grown past
//! [`TLS_KEEP_BYTES`] are freed once everything queued is out.
//!
//! *STARTTLS.* Bytes queued before the switch (the option reply that acknowledges STARTTLS)
//! are moved into the pipe's output unencrypted ([`TlsConn::start`]), so they reach the socket
//! in clear and before any TLS record; input already buffered after the STARTTLS option is the
//! client's first TLS record and is fed to OpenSSL.
//!
//! Worked example: `nbdinfo 'nbds://alice@127.0.0.1:PORT/default?tls-psk-file=keys.psk'`:
//! greeting and client flags in clear; `STARTTLS` → `REP_ACK` (clear); ClientHello with PSK
//! identity "alice" → the callback finds alice's key in the file → handshake completes
//! (TLS 1.3, `TLS_AES_128_GCM_SHA256`); GO "default" inside TLS → the export's tenant is `open`,
//! so alice may use it. A client with a wrong key fails the handshake (the PSK binder or the
//! Finished message does not verify) and the connection is closed.
//!
//! # What it leaves out
//! Client certificates (certificate mode authenticates the server and encrypts; any client
//! that completes the handshake may use every export, as without TLS; which is why the config
//! refuses a certificate next to PSK where NBD serves exports of tenants with secrets,
//! [`crate::config`]); TLS for the admin endpoint. A config reload ([`crate::reload`]) loads
//! the key files again for new connections; a connection keeps the session it started with.
//! (The client library's side is `client::tls`.)
//!
//! *Back-off.* A PSK lookup is recorded in the session ([`PskAttempt`]): the worker reports a
//! handshake that failed after a lookup to the per-address back-off of wrong secrets
//! ([`crate::throttle`]), a completed one as a success, and a session made for a blocked
//! address refuses PSK in the callback without looking at the key.
//!
//! # Config keys
//! `[tls] psk_file, certificate, key`.

use std::collections::HashMap;
use std::fs;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;

use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslFiletype, SslMethod, SslOptions, SslStream,
    SslVersion,
};

use crate::config::TlsConfig;
use crate::inbuf::InBuf;

/// Most ciphertext produced ahead of the socket per connection.
pub const ENCRYPT_AHEAD_BYTES: usize = 256 * 1024;
/// Longest PSK accepted from a key file (crate proto: OpenSSL's own limit).
pub use proto::psk::MAX_PSK_BYTES;
/// Plaintext decrypted per `SSL_read` call.
const DECRYPT_CHUNK_BYTES: usize = 16 * 1024;
/// A TLS buffer above this capacity is freed once everything queued is out (5,000 idle TLS
/// connections must not pin 5,000 × [`ENCRYPT_AHEAD_BYTES`] of cipher- and plaintext).
pub const TLS_KEEP_BYTES: usize = 64 * 1024;

/// Why TLS could not be set up from the config.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls.psk_file {path}: {source}")]
    PskFileRead { path: String, source: io::Error },
    #[error(
        "tls.psk_file {path} line {line}: {problem}; expected `identity:hexkey` (psktool format)"
    )]
    PskFileLine {
        path: String,
        line: usize,
        problem: String,
    },
    #[error("tls.psk_file {path}: no `identity:hexkey` line")]
    PskFileEmpty { path: String },
    #[error("TLS setup ({what}): {source}")]
    OpenSsl { what: String, source: ErrorStack },
}

fn ossl(what: impl Into<String>) -> impl FnOnce(ErrorStack) -> TlsError {
    let what = what.into();
    move |source| TlsError::OpenSsl { what, source }
}

/// PSK keys by identity, parsed from a psktool file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PskKeys {
    keys: HashMap<String, Vec<u8>>,
}

impl PskKeys {
    /// Parses `identity:hexkey` lines (blank lines and `#` comments skipped). Every error names
    /// the line and what was wrong with it.
    pub fn parse(path: &str, text: &str) -> Result<PskKeys, TlsError> {
        let bad = |line: usize, problem: String| TlsError::PskFileLine {
            path: path.to_owned(),
            line,
            problem,
        };
        let mut keys = HashMap::new();
        for l in proto::psk::parse(text).map_err(|e| bad(e.line, e.problem))? {
            if keys.contains_key(&l.identity) {
                return Err(bad(
                    l.line,
                    format!("identity {:?} appears twice", l.identity),
                ));
            }
            keys.insert(l.identity, l.key);
        }
        if keys.is_empty() {
            return Err(TlsError::PskFileEmpty {
                path: path.to_owned(),
            });
        }
        Ok(PskKeys { keys })
    }

    /// Reads and parses a key file.
    pub fn load(path: &Path) -> Result<PskKeys, TlsError> {
        let shown = path.display().to_string();
        let text = fs::read_to_string(path).map_err(|source| TlsError::PskFileRead {
            path: shown.clone(),
            source,
        })?;
        PskKeys::parse(&shown, &text)
    }

    /// The identities, sorted.
    pub fn identities(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.keys.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }

    fn get(&self, identity: &str) -> Option<&[u8]> {
        self.keys.get(identity).map(Vec::as_slice)
    }
}

/// The server's TLS context, built once from `[tls]` and shared by every worker.
pub struct TlsServer {
    context: SslContext,
    identity_index: Index<Ssl, String>,
    psk_index: Index<Ssl, PskAttempt>,
    psk: bool,
}

/// What became of a session's PSK lookup, for the per-address back-off ([`crate::throttle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PskAttempt {
    /// The connection's address is backing off: any PSK handshake is refused without a key
    /// being looked up (set when the session is made).
    Blocked,
    /// Blocked, and the client did offer a PSK identity (refused unchecked).
    RefusedBlocked,
    /// The client offered an identity and a key was looked up: a failed handshake from here
    /// is a wrong key or an unknown identity, and counts as a failed authentication.
    Tried,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer").field("psk", &self.psk).finish()
    }
}

impl TlsServer {
    /// Loads the key file and/or certificate and key named by the config.
    pub fn from_config(config: &TlsConfig) -> Result<TlsServer, TlsError> {
        let psk = match &config.psk_file {
            Some(path) => Some(PskKeys::load(path)?),
            None => None,
        };
        let mut builder =
            SslContextBuilder::new(SslMethod::tls_server()).map_err(ossl("context"))?;
        builder
            .set_min_proto_version(Some(SslVersion::TLS1_2))
            .map_err(ossl("minimum version TLS 1.2"))?;
        builder.set_options(SslOptions::NO_TICKET | SslOptions::CIPHER_SERVER_PREFERENCE);
        let identity_index = Ssl::new_ex_index::<String>().map_err(ossl("ex_data index"))?;
        let psk_index = Ssl::new_ex_index::<PskAttempt>().map_err(ossl("ex_data index"))?;
        if let (Some(cert), Some(key)) = (&config.certificate, &config.key) {
            builder
                .set_certificate_chain_file(cert)
                .map_err(ossl(format!("tls.certificate {}", cert.display())))?;
            builder
                .set_private_key_file(key, SslFiletype::PEM)
                .map_err(ossl(format!("tls.key {}", key.display())))?;
            builder
                .check_private_key()
                .map_err(ossl("tls.key does not match tls.certificate"))?;
        }
        let has_psk = psk.is_some();
        if let Some(keys) = psk {
            let keys = Arc::new(keys);
            // TLS 1.3 uses a callback PSK with SHA-256 suites only: list those first.
            builder
                .set_ciphersuites(
                    "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384",
                )
                .map_err(ossl("TLS 1.3 suites"))?;
            let suites = if config.certificate.is_some() {
                "ECDHEPSK:DHEPSK:PSK:HIGH:!aNULL:!eNULL"
            } else {
                "ECDHEPSK:DHEPSK:PSK:!aNULL:!eNULL"
            };
            builder
                .set_cipher_list(suites)
                .map_err(ossl("TLS 1.2 PSK suites"))?;
            builder.set_psk_server_callback(move |ssl, identity, psk_out| {
                if let Some(PskAttempt::Blocked | PskAttempt::RefusedBlocked) =
                    ssl.ex_data(psk_index)
                {
                    // Backing off: no key is looked at, the handshake fails.
                    ssl.set_ex_data(psk_index, PskAttempt::RefusedBlocked);
                    return Ok(0);
                }
                ssl.set_ex_data(psk_index, PskAttempt::Tried);
                let Some(identity) = identity.and_then(|i| std::str::from_utf8(i).ok()) else {
                    return Ok(0);
                };
                match keys.get(identity) {
                    Some(key) if key.len() <= psk_out.len() => {
                        psk_out[..key.len()].copy_from_slice(key);
                        ssl.set_ex_data(identity_index, identity.to_owned());
                        Ok(key.len())
                    }
                    // Unknown identity: no key, and the handshake fails.
                    _ => Ok(0),
                }
            });
        }
        Ok(TlsServer {
            context: builder.build(),
            identity_index,
            psk_index,
            psk: has_psk,
        })
    }

    /// Whether PSK authentication is configured (identities map to tenants).
    pub fn psk(&self) -> bool {
        self.psk
    }

    /// A server-side TLS session for one connection, handshake not yet started. `blocked`: the
    /// connection's address is backing off after failed authentications, so a PSK handshake
    /// is refused without its key being looked up (a certificate handshake goes on).
    pub fn session(&self, blocked: bool) -> Result<TlsConn, TlsError> {
        let mut ssl = Ssl::new(&self.context).map_err(ossl("session"))?;
        if blocked {
            ssl.set_ex_data(self.psk_index, PskAttempt::Blocked);
        }
        let stream = SslStream::new(ssl, MemPipe::default()).map_err(ossl("stream"))?;
        Ok(TlsConn {
            stream,
            established: false,
            closing: false,
            identity_index: self.identity_index,
            psk_index: self.psk_index,
            scratch: Vec::new(),
            owes_record: false,
        })
    }
}

/// Two in-memory byte queues OpenSSL reads from and writes to instead of a socket.
#[derive(Debug, Default)]
pub struct MemPipe {
    /// Received from the socket, not yet consumed by OpenSSL.
    input: Vec<u8>,
    input_pos: usize,
    /// Produced for the socket (clear prefix, then TLS records), not yet written.
    output: Vec<u8>,
    output_pos: usize,
}

impl Read for MemPipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = &self.input[self.input_pos..];
        if avail.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.input_pos += n;
        if self.input_pos == self.input.len() {
            self.input.clear();
            self.input_pos = 0;
            if self.input.capacity() > TLS_KEEP_BYTES {
                self.input = Vec::new();
            }
        }
        Ok(n)
    }
}

impl Write for MemPipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl MemPipe {
    fn pending_output(&self) -> usize {
        self.output.len() - self.output_pos
    }
}

/// One connection's TLS session over a [`MemPipe`]; see the module essay.
pub struct TlsConn {
    stream: SslStream<MemPipe>,
    established: bool,
    /// close_notify was queued.
    closing: bool,
    identity_index: Index<Ssl, String>,
    psk_index: Index<Ssl, PskAttempt>,
    scratch: Vec<u8>,
    /// The client sent bytes that have not become plaintext yet: part of a record, or records
    /// of a handshake message not yet whole ([`TlsConn::owes_record`]).
    owes_record: bool,
}

/// The TLS session failed (handshake refused, bad record): close the connection after sending
/// what is queued (an alert, if OpenSSL produced one).
#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsFailed(pub String);

impl TlsConn {
    /// Switches a connection to TLS: `clear_prefix` (what was queued before the switch) goes
    /// out first, unencrypted; `ciphertext` (input buffered after the switch) is the client's
    /// first TLS bytes.
    pub fn start(&mut self, clear_prefix: &[u8], ciphertext: &[u8]) {
        let pipe = self.stream.get_mut();
        pipe.output.extend_from_slice(clear_prefix);
        pipe.input.extend_from_slice(ciphertext);
    }

    /// Whether the handshake has completed.
    pub fn established(&self) -> bool {
        self.established
    }

    /// The PSK identity the client authenticated with (PSK mode, after the handshake).
    pub fn psk_identity(&self) -> Option<&str> {
        self.stream
            .ssl()
            .ex_data(self.identity_index)
            .map(String::as_str)
    }

    /// What became of the PSK lookup so far (None: no PSK identity offered, not blocked).
    pub fn psk_attempt(&self) -> Option<PskAttempt> {
        self.stream.ssl().ex_data(self.psk_index).copied()
    }

    /// Queues a close_notify alert once (after an established session), so the client sees
    /// a clean end rather than a truncated stream. Returns whether it queued one now.
    pub fn close_notify(&mut self) -> bool {
        if !self.established || self.closing {
            return false;
        }
        self.closing = true;
        // Errors here only mean the alert could not be produced; the close goes on.
        let _ = self.stream.shutdown();
        self.pending_output() > 0
    }

    /// Whether the client owes the rest of what it started sending: the last bytes it sent
    /// have not become plaintext (nor finished the handshake) yet — part of a record, say.
    /// Such bytes never reach the connection's input buffer, so the request deadline
    /// (`limits.request_timeout_ms`) asks this too: a record trickled a byte at a time is
    /// timed out like a frame trickled in clear, not kept alive by the idle timer.
    pub fn owes_record(&self) -> bool {
        self.owes_record
    }

    /// Bytes waiting for the socket.
    pub fn pending_output(&self) -> usize {
        self.stream.get_ref().pending_output()
    }

    /// Bytes of memory this session's buffers hold (their capacities): ciphertext in and out
    /// and the plaintext being encrypted, for the memory ledger.
    pub fn held_bytes(&self) -> usize {
        let pipe = self.stream.get_ref();
        pipe.input.capacity() + pipe.output.capacity() + self.scratch.capacity()
    }

    /// One `read` from the socket, then as much handshake and decryption as the bytes allow;
    /// plaintext is appended to `input`. `Ok(0)`: the peer closed (EOF or close_notify).
    /// `Ok(n > 0)`: `n` bytes were read from the socket (plaintext may or may not have come
    /// of them).
    pub fn read_from(&mut self, fd: RawFd, input: &mut InBuf) -> Result<usize, io::Error> {
        let mut raw = [0u8; DECRYPT_CHUNK_BYTES];
        let n = crate::sys::read(fd, &mut raw)?;
        if n == 0 {
            return Ok(0);
        }
        self.stream.get_mut().input.extend_from_slice(&raw[..n]);
        match self.advance(input) {
            Ok(true) => Ok(n),
            Ok(false) => Ok(0),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    /// Feeds what the pipe holds to OpenSSL. `Ok(false)`: the peer sent close_notify.
    pub fn advance(&mut self, input: &mut InBuf) -> Result<bool, TlsFailed> {
        // Bytes fed now owe plaintext until some comes of them (or the handshake finishes).
        self.owes_record = true;
        if !self.established {
            match self.stream.accept() {
                Ok(()) => {
                    self.established = true;
                    self.owes_record = false;
                }
                Err(e) if wants_io(e.code()) => return Ok(true),
                Err(e) => return Err(TlsFailed(format!("handshake failed: {e}"))),
            }
        }
        let mut plain = [0u8; DECRYPT_CHUNK_BYTES];
        loop {
            match self.stream.ssl_read(&mut plain) {
                Ok(0) => return Ok(false),
                Ok(k) => {
                    input.extend_from_slice(&plain[..k]);
                    self.owes_record = false;
                }
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => return Ok(false),
                Err(e) if wants_io(e.code()) => return Ok(true),
                Err(e) => return Err(TlsFailed(format!("record: {e}"))),
            }
        }
    }

    /// Writes pending bytes to the socket; when they are all out and the handshake is done,
    /// asks `refill` for more plaintext (it appends up to the byte count it is given),
    /// encrypts it and goes on. Returns once the socket is full or nothing is left.
    pub fn pump_out(
        &mut self,
        fd: RawFd,
        mut refill: impl FnMut(&mut Vec<u8>, usize),
    ) -> io::Result<()> {
        loop {
            let pipe = self.stream.get_mut();
            while pipe.pending_output() > 0 {
                let part = [IoSlice::new(&pipe.output[pipe.output_pos..])];
                match crate::sys::writev(fd, &part) {
                    Ok(n) => pipe.output_pos += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // The peer is gone: nothing queued can be delivered.
                        pipe.output.clear();
                        pipe.output_pos = 0;
                        return Err(e);
                    }
                }
            }
            pipe.output.clear();
            pipe.output_pos = 0;
            if !self.established {
                return Ok(());
            }
            self.scratch.clear();
            refill(&mut self.scratch, ENCRYPT_AHEAD_BYTES);
            if self.scratch.is_empty() {
                // All sent, nothing queued: give back what a burst of large replies grew.
                let pipe = self.stream.get_mut();
                if pipe.output.capacity() > TLS_KEEP_BYTES {
                    pipe.output = Vec::new();
                }
                if self.scratch.capacity() > TLS_KEEP_BYTES {
                    self.scratch = Vec::new();
                }
                return Ok(());
            }
            let mut at = 0;
            while at < self.scratch.len() {
                match self.stream.ssl_write(&self.scratch[at..]) {
                    Ok(k) => at += k,
                    Err(e) => return Err(io::Error::other(format!("TLS write: {e}"))),
                }
            }
        }
    }
}

/// OpenSSL wants more input (or, never here, room for output): wait for the socket.
fn wants_io(code: ErrorCode) -> bool {
    code == ErrorCode::WANT_READ || code == ErrorCode::WANT_WRITE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_file_parses_psktool_lines_and_names_bad_ones() {
        let keys = PskKeys::parse("k", "# keys\nalice:00ff10\n\nbob:abcdef01\n").expect("parses");
        assert_eq!(keys.identities(), ["alice", "bob"]);
        assert_eq!(keys.get("alice"), Some(&[0x00, 0xff, 0x10][..]));
        let err = PskKeys::parse("k", "alice:0g").unwrap_err().to_string();
        assert!(err.contains("line 1") && err.contains("\"0g\""), "{err}");
        let err = PskKeys::parse("k", "alice:abc").unwrap_err().to_string();
        assert!(err.contains("3 hex digits"), "{err}");
        let err = PskKeys::parse("k", "a:00\na:01").unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("twice"), "{err}");
        assert!(PskKeys::parse("k", "\n# nothing\n").is_err());
        assert!(PskKeys::parse("k", "nocolon").is_err());
    }

    #[test]
    fn setup_errors_name_the_file() {
        let missing = TlsConfig {
            psk_file: Some("/nonexistent/ullstack-keys.psk".into()),
            ..Default::default()
        };
        let err = TlsServer::from_config(&missing).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/ullstack-keys.psk"), "{err}");
        let bad_cert = TlsConfig {
            psk_file: None,
            certificate: Some("/nonexistent/cert.pem".into()),
            key: Some("/nonexistent/key.pem".into()),
        };
        let err = TlsServer::from_config(&bad_cert).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/cert.pem"), "{err}");
    }
}
