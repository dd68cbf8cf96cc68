//! What operators see (issue 29): `--check`'s config summary carries no secret; refused
//! authentications and bad input are logged at info or warn with the client's address (an
//! audit trail fail2ban can act on); listeners have a real accept backlog; refused PSK
//! handshakes are counted; STATS on a handle that was never registered is an error.
//!
//! The log tests share one process-wide subscriber writing into a buffer; each looks only for
//! lines naming its own client's address (`peer=127.0.0.1:PORT`), so they may run in parallel.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use common::*;
use proto::wire::{RequestHeader, Status};
use server::config::ServerConfig;

const ALICE_KEY: &str = "6b9b0c9a1e3f5d7c2a4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4";

/// Log lines written so far by every server of this test binary.
#[derive(Clone, Default)]
struct LogSink(Arc<Mutex<Vec<u8>>>);

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The process's subscriber: level info, as `ullstack serve` logs by default.
fn logs() -> &'static LogSink {
    static SINK: OnceLock<LogSink> = OnceLock::new();
    SINK.get_or_init(|| {
        let sink = LogSink::default();
        let writer = sink.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init()
            .expect("the test binary's only subscriber");
        sink
    })
}

/// Waits for a log line of level info or warn that names `peer` and contains `text`.
fn wait_for_log(peer: SocketAddr, text: &str) {
    let sink = logs();
    let needle = format!("peer={peer}");
    let found = testkit::wait_until(IO_TIMEOUT, || {
        let bytes = sink.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).lines().any(|l| {
            l.contains(&needle) && l.contains(text) && (l.contains("INFO") || l.contains("WARN"))
        })
    });
    if found.is_err() {
        let bytes = sink.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        panic!(
            "no info/warn line with {needle} and {text:?}; the log:\n{}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

fn key_file() -> TempFile {
    let file = TempFile::new("operators-psk");
    std::fs::write(&file.0, format!("alice:{ALICE_KEY}\n")).expect("write key file");
    file
}

/// The summary `--check` prints names every tenant but none of their secrets; it is TOML; and
/// the config's `Debug` (what `--check` printed before) hides them too.
#[test]
fn the_config_summary_carries_no_secret() {
    let config = ServerConfig::from_toml_str(&standard_config(&memory_backend("8MiB"), "on"))
        .expect("valid");
    let text = config.summary_toml();
    for secret in ["alice-secret", "reader-secret", "ranged-secret"] {
        assert!(!text.contains(secret), "{secret} printed:\n{text}");
        assert!(
            !format!("{config:?}").contains(secret),
            "{secret} in the Debug form"
        );
    }
    assert!(
        text.contains("name = \"alice\"") && text.contains("(redacted)"),
        "{text}"
    );
    assert!(text.contains("max_memory_bytes = "), "{text}");
    if let Err(e) = text.parse::<toml::Table>() {
        panic!("the summary is not TOML: {e}\n{text}");
    }
}

/// A wrong HELLO secret, garbage on the own protocol, a bad NBD handshake and a failed TLS-PSK
/// handshake each leave an info/warn line naming the client's address.
#[test]
fn refused_authentications_and_bad_input_are_logged_with_the_peer() {
    logs();
    let server = start(&standard_config(&memory_backend("8MiB"), "on"));

    let mut wrong = RawNative::connect(server.addrs.native.expect("native"));
    assert_eq!(
        wrong.hello("alice", "not-the-secret", "vol").status,
        Status::AuthFailed
    );
    wait_for_log(wrong.stream.local_addr().expect("addr"), "HELLO refused");

    let mut garbage = RawNative::connect(server.addrs.native.expect("native"));
    garbage.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n and more bytes that are not a frame");
    assert!(garbage.closed_by_server());
    wait_for_log(garbage.stream.local_addr().expect("addr"), "bad input");

    let mut nbd = TcpStream::connect(server.addrs.nbd.expect("nbd")).expect("connect");
    nbd.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let mut greeting = [0u8; proto::nbd::handshake::GREETING_BYTES];
    nbd.read_exact(&mut greeting).expect("greeting");
    nbd.write_all(&0xdead_beefu32.to_be_bytes())
        .expect("bad client flags");
    wait_for_log(nbd.local_addr().expect("addr"), "bad input");

    let keys = key_file();
    let mut toml = standard_config(&memory_backend("8MiB"), "on");
    toml.push_str(&format!("\n[tls]\npsk_file = \"{}\"\n", keys.0.display()));
    let tls_server = start(&toml);
    let tcp = TcpStream::connect(tls_server.addrs.native.expect("native")).expect("connect");
    tcp.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let local = tcp.local_addr().expect("addr");
    let config = psk_client("alice", vec![1u8; 32]);
    // TLS 1.3: the server's verdict on the key may come with the first read.
    if let Ok(mut tls) = config.connect("localhost", tcp) {
        let _ = tls.write_all(&RequestHeader::stats(1, 0).encode());
        let mut byte = [0u8; 1];
        let _ = tls.read(&mut byte);
    }
    wait_for_log(local, "TLS-PSK handshake failed");
}

/// Every listener accepts with a backlog of `LISTEN_BACKLOG` (or the kernel's cap), not std's
/// 128: `ss` shows a listening socket's backlog as its Send-Q.
#[test]
fn listeners_have_a_large_accept_backlog() {
    let test = "listeners_have_a_large_accept_backlog";
    let Some(ss) = tool("ss", test) else {
        return;
    };
    let somaxconn: i32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(i32::MAX);
    let expected = server::server::LISTEN_BACKLOG.min(somaxconn);
    if expected <= 128 {
        println!("SKIP {test}: net.core.somaxconn = {somaxconn} caps every backlog at 128 or less");
        return;
    }
    let server = start(&standard_config(&memory_backend("8MiB"), "on"));
    let addrs = server.addrs;
    for addr in [addrs.native, addrs.nbd, addrs.admin].into_iter().flatten() {
        let (ok, text) =
            run(Command::new(&ss).args(["-ltnH", &format!("sport = :{}", addr.port())]));
        assert!(ok, "{text}");
        let backlog: Option<i32> = text
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(2))
            .and_then(|v| v.parse().ok());
        assert_eq!(backlog, Some(expected), "{addr}: {text}");
    }
}

/// Failed authentications are counted by kind (`ullstack_auth_failures_total`): a wrong HELLO
/// secret, a TLS-PSK handshake with a wrong key (nbdinfo, GnuTLS). A PSK handshake from an
/// address that is backing off is refused unchecked and counted in
/// `ullstack_auth_throttled_total`, as docs/server.md says.
#[test]
fn failed_and_refused_authentications_are_counted() {
    let test = "failed_and_refused_authentications_are_counted";
    let Some(nbdinfo) = tool("nbdinfo", test) else {
        return;
    };
    let keys = key_file();
    let mut toml = standard_config(&memory_backend("8MiB"), "on");
    toml.push_str(&format!("\n[tls]\npsk_file = \"{}\"\n", keys.0.display()));
    let server = start(&toml);
    let addr = server.addrs.nbd.expect("nbd");
    let admin = server.addrs.admin.expect("admin");
    let shared = server.shared().clone();

    let wrong = TempFile::new("operators-wrong-psk");
    std::fs::write(&wrong.0, format!("alice:{}\n", "01".repeat(32))).expect("write key file");
    let uri = |file: &TempFile| {
        format!(
            "nbds://alice@{addr}/default?tls-psk-file={}",
            file.0.display()
        )
    };
    let (ok, text) = run(Command::new(&nbdinfo).arg(uri(&wrong)));
    assert!(!ok, "a wrong key was accepted: {text}");
    let counted = testkit::wait_until(IO_TIMEOUT, || {
        shared.metrics.auth_failures_total("tls_psk") == 1
    });
    let text = scrape(admin);
    assert!(
        counted.is_ok() && metric(&text, "ullstack_auth_failures_total{kind=\"tls_psk\"}") == 1,
        "a failed PSK handshake was not counted:\n{text}"
    );

    let ip: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
    let now = server::clock::now_ns();
    for _ in 0..13 {
        shared.lock_auth_throttle().failed(ip, now);
    }
    let (ok, text) = run(Command::new(&nbdinfo).arg(uri(&keys)));
    assert!(!ok, "the right key was accepted while blocked: {text}");
    let counted = testkit::wait_until(IO_TIMEOUT, || shared.metrics.auth_throttled_total() > 0);
    let text = scrape(admin);
    assert!(
        counted.is_ok() && metric(&text, "ullstack_auth_throttled_total") > 0,
        "a refused PSK handshake was not counted:\n{text}"
    );
}

/// A wrong HELLO secret is counted in `ullstack_auth_failures_total{kind="hello"}`.
#[test]
fn failed_hellos_are_counted() {
    let server = start(&standard_config(&memory_backend("8MiB"), "on"));
    let mut c = RawNative::connect(server.addrs.native.expect("native"));
    assert_eq!(
        c.hello("alice", "not-the-secret", "vol").status,
        Status::AuthFailed
    );
    let text = scrape(server.addrs.admin.expect("admin"));
    assert_eq!(
        metric(&text, "ullstack_auth_failures_total{kind=\"hello\"}"),
        1,
        "{text}"
    );
}

/// STATS names a flow by its header's handle: 0 or a registered one is answered, any other is
/// `UNKNOWN_HANDLE` as for data requests.
#[test]
fn stats_on_an_unregistered_handle_is_an_error() {
    let server = start(&standard_config(&memory_backend("8MiB"), "on"));
    let mut c = RawNative::connect(server.addrs.native.expect("native"));
    assert_eq!(c.hello("alice", "alice-secret", "vol").status, Status::Ok);
    assert_eq!(c.call(RequestHeader::stats(0, 0), &[]).status, Status::Ok);
    assert_eq!(
        c.call(RequestHeader::stats(0, 99), &[]).status,
        Status::UnknownHandle
    );
    // Still serving.
    assert_eq!(c.read(0, 4096).status, Status::Ok);
}
