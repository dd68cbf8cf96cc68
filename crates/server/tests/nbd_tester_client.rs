//! The NBD project's conformance client, `nbd-tester-client`, against the server with its
//! default limits (no `[limits]` section): the integrity test and the loose-integrity test on
//! the memory and the file backends, the integrity test over certificate TLS, and the
//! handshake test in TLS mode.
//!
//! *The integrity test* (`-i -t integrity-test.tr`) replays the NBD project's transaction log
//! (about 69 K requests over a 50 MiB export: 512 B-aligned writes, most of them not aligned to
//! 4 KiB, 1,189 of them FUA, 1,191 flushes and 105 reads) as fast as the server takes them: it keeps writing requests while any are queued, reads replies only as the socket
//! offers them, never waits for a reply before sending, and holds back only a request that
//! overlaps one in flight (a read behind a write, a write behind either). Every 512-byte block
//! it writes carries the sequence number of its request, and every read is checked against
//! the last write to that block. Any select() that finds nothing to do for 5 s ends it with
//! "Timeout reading from socket": what a server that stops reading requests while replies
//! wait shows. `-l` (loose ordering) drops the hold-back, so reads and writes of one block
//! race in flight, and the check then accepts any write the client has sent.
//!
//! *The TLS handshake test* (`-h` with a key) sends an unknown option in clear and expects
//! `NBD_REP_ERR_UNSUP`. The client starts TLS only for its full connections, never for the
//! handshake test, so against a server that requires TLS (ours, whenever `[tls]` is set: the
//! spec's FORCEDTLS) the option arrives before TLS, and the spec says the server MUST answer
//! every option but `STARTTLS` and `ABORT` with `NBD_REP_ERR_TLS_REQD` then, "including
//! unsupported options" (doc/proto.md, "FORCEDTLS"). The NBD project's nbd-server does the
//! same with `force_tls`. So the client's "status does not match" is its expectation, not a
//! defect; the test pins the server's answer (TLS_REQD for the unknown option, UNSUP for it
//! after STARTTLS, which the integrity test over TLS exercises) and the client's report.
//!
//! Where the client comes from: `.ci/nbd-tester-client` builds it from the NBD project's
//! source (pinned, checksummed) into a cache folder with the transaction logs beside it, and
//! `.ci/run` exports that folder as `ULLSTACK_NBD_TESTER_DIR`; without the variable the tests
//! look in the script's default folder. Missing, they skip with a printed reason (under
//! `ULLSTACK_REQUIRE_TOOLS=1`, as in CI, they fail).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The NBD release `.ci/nbd-tester-client` builds (its default cache folder is named for it).
const NBD_VERSION: &str = "3.26.1";
/// The export size the NBD project's integrity test needs (its transaction log's span; its
/// own `make check` serves `filesize = 52428800`).
const EXPORT_SIZE: &str = "50MiB";
/// Wall limit of one run of the client. It ends itself after 5 s without progress; a healthy
/// run of the integrity log takes a few seconds here.
const CLIENT_LIMIT: Duration = Duration::from_secs(120);

/// The client's folder: `nbd-tester-client`, `integrity-test.tr` and `integrityhuge-test.tr`.
struct TesterClient {
    dir: PathBuf,
}

impl TesterClient {
    /// The built client, or `None` after a skip (a failure under `ULLSTACK_REQUIRE_TOOLS`).
    fn find(test: &str) -> Option<TesterClient> {
        let dir = std::env::var_os("ULLSTACK_NBD_TESTER_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                let cache = std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| {
                        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"))
                    })?;
                Some(
                    cache
                        .join("ullstack")
                        .join(format!("nbd-tester-client-{NBD_VERSION}")),
                )
            });
        match dir {
            Some(dir) if dir.join("nbd-tester-client").is_file() => Some(TesterClient { dir }),
            other => {
                testkit::skip(
                    test,
                    &format!(
                        "nbd-tester-client is not built (looked in {:?}; run .ci/nbd-tester-client \
                         and set ULLSTACK_NBD_TESTER_DIR to the folder it prints)",
                        other.map(|d| d.display().to_string())
                    ),
                );
                None
            }
        }
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Runs the client with `args` to completion or [`CLIENT_LIMIT`] (then kills it): whether
    /// it exited 0, and its output.
    fn run(&self, args: &[&str]) -> (bool, String) {
        let scratch = tempfile::tempdir().expect("scratch dir");
        let mut child = Command::new(self.dir.join("nbd-tester-client"))
            .args(args)
            .current_dir(scratch.path())
            // The client prints a line per thousand requests unless told not to.
            .env("NBD_TEST_SILENT", "1")
            .env("TMPDIR", scratch.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nbd-tester-client");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for nbd-tester-client") {
                break Some(status);
            }
            if started.elapsed() > CLIENT_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut text = String::new();
        if let Some(mut out) = child.stdout.take() {
            let _ = out.read_to_string(&mut text);
        }
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut text);
        }
        match status {
            Some(status) => (status.success(), text),
            None => (false, format!("killed after {CLIENT_LIMIT:?}\n{text}")),
        }
    }
}

/// One volume `vol` of `backend`, exported over NBD as `export1` to an open tenant, with the
/// default limits; `tls` is appended as given.
fn config(backend: &str, tls: &str) -> String {
    format!(
        r#"
[listen]
nbd = "127.0.0.1:0"

[[volume]]
name = "vol"
backend = {backend}

[[tenant]]
name = "conformance"
open = true
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]

[[export]]
name = "export1"
volume = "vol"
tenant = "conformance"
{tls}"#
    )
}

/// The client's integrity test (`loose`: with `-l`) on a fresh server over `backend`; panics
/// with the client's output when it fails.
fn integrity(backend: &str, loose: bool, test: &str) {
    let Some(client) = TesterClient::find(test) else {
        return;
    };
    let server = start(&config(backend, ""));
    let addr = server.addrs.nbd.expect("nbd listener");
    let log = client.log("integrity-test.tr");
    let port = addr.port().to_string();
    let mut args = vec!["-N", "export1", "-i", "-t", path_str(&log)];
    if loose {
        args.push("-l");
    }
    args.extend(["127.0.0.1", &port]);
    let started = Instant::now();
    let (ok, text) = client.run(&args);
    println!(
        "{test}: nbd-tester-client {} took {:?}",
        args.join(" "),
        started.elapsed()
    );
    assert!(ok, "nbd-tester-client {}: failed:\n{text}", args.join(" "));
}

/// The client's TLS flags: its certificate and key, trusting the server's self-signed
/// certificate (`-A`) issued for 127.0.0.1 (`-H`).
fn tls_flags<'a>(cert: &'a Path, key: &'a Path) -> [&'a str; 8] {
    [
        "-C",
        path_str(cert),
        "-K",
        path_str(key),
        "-A",
        path_str(cert),
        "-H",
        "127.0.0.1",
    ]
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

#[test]
fn integrity_memory() {
    integrity(&memory_backend(EXPORT_SIZE), false, "integrity_memory");
}

#[test]
fn loose_integrity_memory() {
    integrity(&memory_backend(EXPORT_SIZE), true, "loose_integrity_memory");
}

#[test]
fn integrity_file() {
    let file = TempFile::new("nbd-tester-integrity");
    integrity(&file_backend(&file.0, EXPORT_SIZE), false, "integrity_file");
}

#[test]
fn loose_integrity_file() {
    let file = TempFile::new("nbd-tester-loose");
    integrity(
        &file_backend(&file.0, EXPORT_SIZE),
        true,
        "loose_integrity_file",
    );
}

/// The `[tls]` section serving `cert` and `key`.
fn tls_section(cert: &Path, key: &Path) -> String {
    format!(
        "\n[tls]\ncertificate = \"{}\"\nkey = \"{}\"\n",
        cert.display(),
        key.display()
    )
}

/// The NBD project's `tls` test: the integrity test inside TLS, the client verifying the
/// server's certificate (`-A` trusts it, `-H` names the address it was issued for).
#[test]
fn integrity_over_certificate_tls() {
    let test = "integrity_over_certificate_tls";
    let Some(client) = TesterClient::find(test) else {
        return;
    };
    let (cert, key) = self_signed("nbd-tester-tls");
    let server = start(&config(
        &memory_backend(EXPORT_SIZE),
        &tls_section(&cert.0, &key.0),
    ));
    let port = server.addrs.nbd.expect("nbd listener").port().to_string();
    let log = client.log("integrity-test.tr");
    let mut args = vec!["-N", "export1", "-i", "-t", path_str(&log)];
    args.extend(tls_flags(&cert.0, &key.0));
    args.extend(["127.0.0.1", &port]);
    let (ok, text) = client.run(&args);
    assert!(ok, "nbd-tester-client over TLS failed:\n{text}");
}

/// Sends one option in the newstyle negotiation (after the greeting and client flags, which
/// the first call reads and writes) and returns the reply's type.
fn option_reply(stream: &mut TcpStream, option: u32, data: &[u8]) -> u32 {
    let mut frame = Vec::new();
    frame.extend_from_slice(&0x4948_4156_454F_5054u64.to_be_bytes()); // IHAVEOPT
    frame.extend_from_slice(&option.to_be_bytes());
    frame.extend_from_slice(&(data.len() as u32).to_be_bytes());
    frame.extend_from_slice(data);
    stream.write_all(&frame).expect("send option");
    let mut head = [0u8; 20];
    stream.read_exact(&mut head).expect("option reply");
    let echoed = u32::from_be_bytes(head[8..12].try_into().expect("4 bytes"));
    assert_eq!(echoed, option, "the reply names the option");
    let reply = u32::from_be_bytes(head[12..16].try_into().expect("4 bytes"));
    let len = u32::from_be_bytes(head[16..20].try_into().expect("4 bytes"));
    let mut body = vec![0u8; len as usize];
    stream.read_exact(&mut body).expect("option reply data");
    reply
}

/// An NBD client past the greeting (fixed newstyle, no zeroes) at `addr`.
fn negotiating(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting).expect("greeting");
    stream
        .write_all(&3u32.to_be_bytes())
        .expect("client flags: fixed newstyle, no zeroes");
    stream
}

const NBD_REP_ERR_UNSUP: u32 = (1 << 31) | 1;
const NBD_REP_ERR_TLS_REQD: u32 = (1 << 31) | 5;
/// The option the client's handshake test sends: unknown to every server.
const UNKNOWN_OPTION: u32 = 0x0765_4321;

/// The handshake test in TLS mode: the client sends its unknown option in clear, the server
/// requires TLS first (the spec's FORCEDTLS: `NBD_REP_ERR_TLS_REQD`, even for an unknown
/// option), and the client reports "status does not match" because it expected
/// `NBD_REP_ERR_UNSUP`. Without TLS the same test passes (the server's UNSUP).
#[test]
fn handshake_test_in_tls_mode_meets_forcedtls() {
    let test = "handshake_test_in_tls_mode_meets_forcedtls";
    let Some(client) = TesterClient::find(test) else {
        return;
    };
    // Without TLS: the client's own expectation holds.
    let plain = start(&config(&memory_backend("1MiB"), ""));
    let port = plain.addrs.nbd.expect("nbd listener").port().to_string();
    let (ok, text) = client.run(&["-h", "-N", "export1", "127.0.0.1", &port]);
    assert!(ok, "handshake test without TLS failed:\n{text}");
    let mut raw = negotiating(plain.addrs.nbd.expect("nbd"));
    assert_eq!(
        option_reply(&mut raw, UNKNOWN_OPTION, &[0; 4]),
        NBD_REP_ERR_UNSUP
    );

    // With TLS: the server's answer is the spec's, and the client reports the difference.
    let (cert, key) = self_signed("nbd-tester-handshake");
    let tls = start(&config(
        &memory_backend("1MiB"),
        &tls_section(&cert.0, &key.0),
    ));
    let addr = tls.addrs.nbd.expect("nbd listener");
    let mut raw = negotiating(addr);
    assert_eq!(
        option_reply(&mut raw, UNKNOWN_OPTION, &[0; 4]),
        NBD_REP_ERR_TLS_REQD,
        "before STARTTLS every option but STARTTLS and ABORT is TLS_REQD (FORCEDTLS)"
    );
    let port = addr.port().to_string();
    let mut args = vec!["-h", "-N", "export1"];
    args.extend(tls_flags(&cert.0, &key.0));
    args.extend(["127.0.0.1", &port]);
    let (ok, text) = client.run(&args);
    assert!(
        !ok && text.contains("status does not match"),
        "the client's handshake test sends its unknown option before TLS and expects UNSUP; \
         it reported:\n{text}"
    );
}
