//! TLS end to end: `nbdinfo` over TLS-PSK (libnbd on GnuTLS against the server's OpenSSL),
//! plain NBD refused with `NBD_REP_ERR_TLS_REQD`, a wrong key refused, PSK identities mapped
//! to tenants, and the own protocol's implicit TLS.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;

use common::*;
use proto::nbd;
use proto::wire::{self, HelloBody, RequestHeader, Status};

const ALICE_KEY: &str = "6b9b0c9a1e3f5d7c2a4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4";
const READER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
/// An identity with a key but no tenant of its name.
const MALLORY_KEY: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

struct KeyFile(TempFile);

fn key_file(tag: &str, lines: &[(&str, &str)]) -> KeyFile {
    let file = TempFile::new(tag);
    let text: String = lines
        .iter()
        .map(|(id, key)| format!("{id}:{key}\n"))
        .collect();
    std::fs::write(&file.0, text).expect("write key file");
    KeyFile(file)
}

fn server_keys() -> KeyFile {
    key_file(
        "psk-server",
        &[
            ("alice", ALICE_KEY),
            ("reader", READER_KEY),
            ("mallory", MALLORY_KEY),
        ],
    )
}

/// The standard config (exports `default` → tenant alice, `ro` → reader) with `[tls]`.
fn start_tls(keys: &KeyFile) -> server::ServerHandle {
    let mut toml = standard_config(&memory_backend("8MiB"), "on");
    toml.push_str(&format!(
        "\n[tls]\npsk_file = \"{}\"\n",
        keys.0 .0.display()
    ));
    start(&toml)
}

fn nbds(addr: SocketAddr, user: &str, export: &str, keys: &KeyFile) -> String {
    format!(
        "nbds://{user}@{addr}/{export}?tls-psk-file={}",
        keys.0 .0.display()
    )
}

#[test]
fn nbdinfo_with_the_psk_works_plain_and_wrong_keys_are_refused() {
    let test = "nbdinfo_with_the_psk_works_plain_and_wrong_keys_are_refused";
    let Some(nbdinfo) = tool("nbdinfo", test) else {
        return;
    };
    let keys = server_keys();
    let server = start_tls(&keys);
    let addr = server.addrs.nbd.expect("nbd");

    let client = key_file("psk-alice", &[("alice", ALICE_KEY)]);
    let (ok, text) = run(Command::new(&nbdinfo).arg(nbds(addr, "alice", "default", &client)));
    assert!(ok, "nbdinfo over TLS-PSK failed: {text}");
    assert!(text.contains("with TLS"), "not reported as TLS: {text}");
    assert!(text.contains("export-size: 8388608"), "{text}");

    let (ok, text) = run(Command::new(&nbdinfo).arg(format!("nbd://{addr}/default")));
    assert!(!ok, "plain nbd:// was served: {text}");

    let wrong = key_file("psk-wrong", &[("alice", READER_KEY)]);
    let (ok, text) = run(Command::new(&nbdinfo).arg(nbds(addr, "alice", "default", &wrong)));
    assert!(!ok, "a wrong key was accepted: {text}");
    let unknown = key_file("psk-unknown", &[("eve", ALICE_KEY)]);
    let (ok, text) = run(Command::new(&nbdinfo).arg(nbds(addr, "eve", "default", &unknown)));
    assert!(!ok, "an unknown identity was accepted: {text}");
}

#[test]
fn a_psk_identity_reaches_only_its_own_tenants_exports() {
    let test = "a_psk_identity_reaches_only_its_own_tenants_exports";
    let Some(nbdinfo) = tool("nbdinfo", test) else {
        return;
    };
    let keys = server_keys();
    let server = start_tls(&keys);
    let addr = server.addrs.nbd.expect("nbd");
    let reader = key_file("psk-reader", &[("reader", READER_KEY)]);
    let (ok, text) = run(Command::new(&nbdinfo).arg(nbds(addr, "reader", "ro", &reader)));
    assert!(ok, "reader on its own export failed: {text}");
    let (ok, text) = run(Command::new(&nbdinfo).arg(nbds(addr, "reader", "default", &reader)));
    assert!(!ok, "reader reached alice's export: {text}");
    let mallory = key_file("psk-mallory", &[("mallory", MALLORY_KEY)]);
    let (ok, text) = run(Command::new(&nbdinfo).arg(nbds(addr, "mallory", "default", &mallory)));
    assert!(
        !ok,
        "an identity without a tenant reached an export: {text}"
    );
    // The list shows a PSK client only what it may use.
    let (ok, text) = run(Command::new(&nbdinfo).args([
        "--list",
        &format!(
            "nbds://reader@{addr}/?tls-psk-file={}",
            reader.0 .0.display()
        ),
    ]));
    assert!(ok, "nbdinfo --list over TLS failed: {text}");
    assert!(text.contains("export=\"ro\""), "{text}");
    assert!(!text.contains("export=\"default\""), "{text}");
}

/// One option on a raw socket: the first reply's type.
fn raw_option(s: &mut TcpStream, option: u32, data: &[u8]) -> u32 {
    let mut frame = nbd::IHAVEOPT.to_be_bytes().to_vec();
    frame.extend_from_slice(&option.to_be_bytes());
    frame.extend_from_slice(&(data.len() as u32).to_be_bytes());
    frame.extend_from_slice(data);
    s.write_all(&frame).expect("send option");
    let mut head = [0u8; 20];
    s.read_exact(&mut head).expect("option reply");
    let len = u32::from_be_bytes(head[16..20].try_into().expect("4 bytes")) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("option reply data");
    u32::from_be_bytes(head[12..16].try_into().expect("4 bytes"))
}

#[test]
fn before_starttls_options_get_tls_reqd_and_export_name_closes() {
    let keys = server_keys();
    let server = start_tls(&keys);
    let addr = server.addrs.nbd.expect("nbd");
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).expect("greeting");
    s.write_all(&nbd::FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .expect("flags");
    let mut go = 7u32.to_be_bytes().to_vec();
    go.extend_from_slice(b"default");
    go.extend_from_slice(&0u16.to_be_bytes());
    assert_eq!(raw_option(&mut s, nbd::OPT_GO, &go), nbd::REP_ERR_TLS_REQD);
    assert_eq!(
        raw_option(&mut s, nbd::OPT_LIST, &[]),
        nbd::REP_ERR_TLS_REQD
    );
    assert_eq!(
        raw_option(&mut s, nbd::OPT_STRUCTURED_REPLY, &[]),
        nbd::REP_ERR_TLS_REQD
    );
    // EXPORT_NAME cannot carry the error: the server hangs up.
    let mut frame = nbd::IHAVEOPT.to_be_bytes().to_vec();
    frame.extend_from_slice(&nbd::OPT_EXPORT_NAME.to_be_bytes());
    frame.extend_from_slice(&7u32.to_be_bytes());
    frame.extend_from_slice(b"default");
    s.write_all(&frame).expect("send EXPORT_NAME");
    let mut rest = Vec::new();
    let n = s.read_to_end(&mut rest).expect("EOF, not a timeout");
    assert_eq!(n, 0, "the server sent {n} bytes instead of closing");
}

fn hello_frame(tenant: &str, secret: &str, volume: &str) -> Vec<u8> {
    let body = HelloBody {
        tenant,
        secret: secret.as_bytes(),
        volume,
    };
    let mut payload = Vec::new();
    body.encode_into(&mut payload).expect("hello body");
    let mut frame = RequestHeader::hello(0, payload.len() as u32)
        .encode()
        .to_vec();
    frame.extend_from_slice(&payload);
    frame
}

#[test]
fn own_protocol_speaks_tls_from_the_first_byte() {
    let keys = server_keys();
    let server = start_tls(&keys);
    let addr = server.addrs.native.expect("native");

    // In clear, HELLO is not served: the bytes are not a TLS record, the server closes.
    let mut plain = RawNative::connect(addr);
    plain.send_raw(&hello_frame("alice", "alice-secret", "vol"));
    assert!(plain.recv().is_none(), "a plaintext HELLO was answered");

    // Over TLS-PSK (OpenSSL client), HELLO and a write/read round trip work.
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let config = psk_client("alice", hex_bytes(ALICE_KEY));
    let mut tls = config.connect("localhost", tcp).expect("TLS-PSK handshake");
    tls.write_all(&hello_frame("alice", "alice-secret", "vol"))
        .expect("send HELLO");
    let mut head = [0u8; wire::REPLY_HEADER_BYTES];
    tls.read_exact(&mut head).expect("HELLO reply");
    let reply = match wire::decode_reply_header(&head, 1 << 20) {
        Ok(proto::Decode::Done { frame, .. }) => frame,
        other => panic!("bad reply header: {other:?}"),
    };
    assert_eq!(reply.status, Status::Ok);
    let mut payload = vec![0u8; reply.payload_len as usize];
    tls.read_exact(&mut payload).expect("HELLO reply body");

    // 1 MiB up and back: the reply is four times what the server encrypts ahead of the socket.
    let data = pattern(0, 1 << 20, 3);
    let write = RequestHeader::write(1, 0, 0, data.len() as u32, wire::WriteMode::WriteBack);
    tls.write_all(&write.encode()).expect("send WRITE");
    tls.write_all(&data).expect("send WRITE payload");
    tls.write_all(&RequestHeader::read(2, 0, 0, data.len() as u32).encode())
        .expect("send READ");
    let mut back = Vec::new();
    for cookie in [1, 2] {
        tls.read_exact(&mut head).expect("reply header");
        let reply = match wire::decode_reply_header(&head, 2 << 20) {
            Ok(proto::Decode::Done { frame, .. }) => frame,
            other => panic!("bad reply header: {other:?}"),
        };
        assert_eq!((reply.cookie, reply.status), (cookie, Status::Ok));
        back = vec![0u8; reply.payload_len as usize];
        tls.read_exact(&mut back).expect("reply payload");
    }
    assert!(back == data, "data changed on the way through TLS");
    // Everything sent and nothing queued: the connection gives back what the 1 MiB grew
    // (input buffer at most its keep size, TLS buffers at most theirs) and the ledger says so.
    let bound = (server::inbuf::INPUT_KEEP_BYTES + 3 * server::tls::TLS_KEEP_BYTES) as u64;
    let shared = server.shared().clone();
    let settled = testkit::wait_until(std::time::Duration::from_secs(5), || {
        shared.memory.charged_bytes() <= bound
    });
    assert!(
        settled.is_ok(),
        "an idle TLS connection stays charged {} bytes (bound {bound})",
        shared.memory.charged_bytes()
    );
}

#[test]
fn nbdcopy_round_trips_data_over_tls_psk() {
    let test = "nbdcopy_round_trips_data_over_tls_psk";
    let Some(nbdcopy) = tool("nbdcopy", test) else {
        return;
    };
    let keys = server_keys();
    let server = start_tls(&keys);
    let addr = server.addrs.nbd.expect("nbd");
    let client = key_file("psk-copy", &[("alice", ALICE_KEY)]);
    let uri = nbds(addr, "alice", "default", &client);
    // 8 MiB of pattern data up, then back down: many full-size TLS records each way.
    let src = TempFile::new("tls-src");
    let data = pattern(0, 8 << 20, 7);
    std::fs::write(&src.0, &data).expect("write source");
    let (ok, text) = run(Command::new(&nbdcopy).args([src.0.to_str().expect("utf-8"), &uri]));
    assert!(ok, "nbdcopy up over TLS failed: {text}");
    // Down in 4 MiB requests: each reply is larger than the ciphertext the server encrypts
    // ahead of the socket (tls::ENCRYPT_AHEAD_BYTES), so it is taken from the queue in parts.
    let back = TempFile::new("tls-back");
    let (ok, text) = run(Command::new(&nbdcopy).args([
        "--request-size=4194304",
        &uri,
        back.0.to_str().expect("utf-8"),
    ]));
    assert!(ok, "nbdcopy down over TLS failed: {text}");
    let got = std::fs::read(&back.0).expect("read copy");
    assert!(got == data, "data changed on the way through TLS");
}

#[test]
fn qemu_io_writes_and_reads_over_tls_psk() {
    let test = "qemu_io_writes_and_reads_over_tls_psk";
    let Some(qemu_io) = tool("qemu-io", test) else {
        return;
    };
    let keys = server_keys();
    let server = start_tls(&keys);
    let addr = server.addrs.nbd.expect("nbd");
    // qemu's tls-creds-psk reads `keys.psk` from a directory.
    let dir = std::env::temp_dir().join(format!("ullstack-qemu-psk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("psk dir");
    std::fs::write(dir.join("keys.psk"), format!("alice:{ALICE_KEY}\n")).expect("qemu keys");
    let object = format!(
        "tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice",
        dir.display()
    );
    let image = format!(
        "driver=nbd,host={},port={},export=default,tls-creds=tls0",
        addr.ip(),
        addr.port()
    );
    let (ok, text) = run(Command::new(&qemu_io).args([
        "--object",
        &object,
        "--image-opts",
        &image,
        "-c",
        "write -P 0x5a 65536 131072",
        "-c",
        "read -P 0x5a 65536 131072",
        "-c",
        "read -P 0 0 65536",
    ]));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "qemu-io over TLS-PSK failed: {text}");
    assert!(!text.contains("Pattern verification failed"), "{text}");
    assert_eq!(text.matches("read 131072/131072").count(), 1, "{text}");
}

#[test]
fn certificate_mode_serves_tls_clients_and_refuses_plain_ones() {
    let test = "certificate_mode_serves_tls_clients_and_refuses_plain_ones";
    let Some(nbdinfo) = tool("nbdinfo", test) else {
        return;
    };
    let (cert, key) = self_signed("tls-cert");
    let mut toml = standard_config(&memory_backend("8MiB"), "on");
    toml.push_str(&format!(
        "\n[tls]\ncertificate = \"{}\"\nkey = \"{}\"\n",
        cert.0.display(),
        key.0.display()
    ));
    let server = start(&toml);
    let addr = server.addrs.nbd.expect("nbd");
    // The certificate is self-signed, so the client skips verification; the session is TLS.
    let (ok, text) =
        run(Command::new(&nbdinfo).arg(format!("nbds://{addr}/default?tls-verify-peer=false")));
    assert!(ok, "nbdinfo over certificate TLS failed: {text}");
    assert!(text.contains("with TLS"), "{text}");
    let (ok, text) = run(Command::new(&nbdinfo).arg(format!("nbd://{addr}/default")));
    assert!(!ok, "plain nbd:// was served: {text}");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A TLS-PSK handshake on the own protocol's port with `key_hex` for identity alice.
fn psk_handshake(addr: SocketAddr, key_hex: &str) -> bool {
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let config = psk_client("alice", hex_bytes(key_hex));
    match config.connect("localhost", tcp) {
        // TLS 1.3: the server's verdict on the key may come with the first read.
        Ok(mut tls) => {
            let hello = hello_frame("alice", "alice-secret", "vol");
            tls.write_all(&hello).is_ok() && {
                let mut head = [0u8; wire::REPLY_HEADER_BYTES];
                tls.read_exact(&mut head).is_ok()
            }
        }
        Err(_) => false,
    }
}

#[test]
fn failed_psk_handshakes_back_off_per_address_like_wrong_secrets() {
    let keys = server_keys();
    let server = start_tls(&keys);
    let addr = server.addrs.native.expect("native");
    let shared = server.shared().clone();
    let ip: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
    let failures = || shared.lock_auth_throttle().failures(ip);
    let wrong = "01".repeat(32);

    // Plaintext on the TLS port offers no PSK identity: not an authentication failure.
    let mut plain = RawNative::connect(addr);
    plain.send_raw(&hello_frame("alice", "alice-secret", "vol"));
    assert!(plain.recv().is_none(), "a plaintext HELLO was answered");
    assert_eq!(failures(), 0, "a non-PSK handshake failure was counted");

    // Each wrong key is a failure of the address, as a wrong secret is.
    for n in 1..=server::throttle::AUTH_FREE_FAILURES {
        assert!(!psk_handshake(addr, &wrong), "wrong key {n} accepted");
        testkit::wait_until(IO_TIMEOUT, || failures() == n)
            .unwrap_or_else(|_| panic!("failure {n} not recorded: {}", failures()));
    }
    // Still free: the right key works and clears the record.
    assert!(psk_handshake(addr, ALICE_KEY), "right key refused");
    testkit::wait_until(IO_TIMEOUT, || failures() == 0).expect("success clears the record");

    // An address backing off (as after 13 wrong keys: 5.12 s) has its PSK refused unchecked,
    // even the right key, and the refusal does not lengthen the back-off.
    let now = server::clock::now_ns();
    for _ in 0..13 {
        shared.lock_auth_throttle().failed(ip, now);
    }
    let throttled_before = shared.metrics.auth_throttled_total();
    assert!(
        !psk_handshake(addr, ALICE_KEY),
        "right key accepted while blocked"
    );
    testkit::wait_until(IO_TIMEOUT, || {
        shared.metrics.auth_throttled_total() > throttled_before
    })
    .expect("the refusal is counted as throttled");
    assert_eq!(
        failures(),
        13,
        "a refused-unchecked handshake counted as a failure"
    );
}

/// Client library and `ullstack bench` over TLS-PSK against a live server: a round trip, a
/// bench run, and a wrong key refused with a TLS error.
#[test]
fn the_client_library_and_bench_speak_tls_psk() {
    use client::bench::{self, spec, BenchConfig, Progress};
    use client::{Client, ClientError, ClientTls, Credentials, TenantHandle, WriteMode};
    let keys = server_keys();
    let server = start_tls(&keys);
    let addr = server.addrs.native.expect("native").to_string();
    let creds = Credentials {
        tenant: "alice".into(),
        secret: "alice-secret".into(),
        volume: "vol".into(),
    };
    let tls = ClientTls::psk_file(&keys.0 .0, Some("alice")).expect("alice's key");
    runtime().block_on(async {
        let c = Client::connect_tls(&addr, &creds, &tls)
            .await
            .expect("TLS-PSK connect");
        // 1 MiB each way: several TLS records, pipelined with a small write.
        let data = pattern(0, 1 << 20, 9);
        let (a, b) = tokio::join!(
            c.write(TenantHandle::DEFAULT, 0, &data, WriteMode::WriteBack),
            c.write(TenantHandle::DEFAULT, 2 << 20, &[5u8; 4096], WriteMode::Fua)
        );
        a.expect("write 1 MiB");
        b.expect("write 4 KiB");
        let back = c
            .read(TenantHandle::DEFAULT, 0, 1 << 20)
            .await
            .expect("read");
        assert!(back == data, "data changed on the way through TLS");

        // The same key under another identity is not alice's: the handshake fails.
        let wrong = ClientTls::psk("alice", vec![1u8; 32]).expect("key");
        match Client::connect_tls(&addr, &creds, &wrong).await {
            Err(ClientError::Tls { detail }) => assert!(detail.contains("handshake"), "{detail}"),
            other => panic!("a wrong key gave {other:?}"),
        }
        // Plain TCP to the TLS port is not served either.
        assert!(
            Client::connect(&addr, &creds).await.is_err(),
            "plain HELLO served on a TLS port"
        );
    });

    let report = bench::run(&BenchConfig {
        server: addr,
        duration_ns: None,
        ios_per_tenant: Some(2_000),
        warmup_ns: 0,
        threads: 1,
        seed: 3,
        tenants: spec::parse_tenant("name=alice,secret=alice-secret,volume=vol,qd=8,read=70")
            .expect("tenant"),
        progress: Progress::Hidden,
        tls: Some(tls),
    })
    .expect("bench over TLS");
    let t = &report.tenants[0];
    let done = t.reads.count + t.writes.count;
    assert_eq!(
        (done, t.errors.is_empty()),
        (2_000, true),
        "bench over TLS: {}",
        report.to_json()
    );
}

/// Certificate TLS from the client library: verified against the right CA it connects;
/// against another CA it is refused; unverified it connects.
#[test]
fn the_client_library_verifies_the_servers_certificate() {
    use client::{Client, ClientError, ClientTls, Credentials, ServerCheck, TenantHandle};
    let (cert, key) = self_signed("client-cert");
    let (other_cert, _other_key) = self_signed("client-other");
    let mut toml = standard_config(&memory_backend("8MiB"), "on");
    toml.push_str(&format!(
        "\n[tls]\ncertificate = \"{}\"\nkey = \"{}\"\n",
        cert.0.display(),
        key.0.display()
    ));
    let server = start(&toml);
    let addr = server.addrs.native.expect("native").to_string();
    let creds = Credentials {
        tenant: "alice".into(),
        secret: "alice-secret".into(),
        volume: "vol".into(),
    };
    runtime().block_on(async {
        let trusted = ClientTls::certificate(ServerCheck::CaFile(cert.0.clone()));
        let c = Client::connect_tls(&addr, &creds, &trusted)
            .await
            .expect("verified TLS connect");
        c.read(TenantHandle::DEFAULT, 0, 4096).await.expect("read");
        let untrusted = ClientTls::certificate(ServerCheck::CaFile(other_cert.0.clone()));
        match Client::connect_tls(&addr, &creds, &untrusted).await {
            Err(ClientError::Tls { detail }) => assert!(detail.contains("handshake"), "{detail}"),
            other => panic!("an untrusted certificate gave {other:?}"),
        }
        let insecure = ClientTls::certificate(ServerCheck::Insecure);
        let c = Client::connect_tls(&addr, &creds, &insecure)
            .await
            .expect("unverified TLS connect");
        c.read(TenantHandle::DEFAULT, 0, 4096).await.expect("read");
    });
}
