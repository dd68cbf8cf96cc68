//! Reloading the config without a restart (issue 28, day two): `POST /reload` and what SIGHUP
//! calls (`ServerHandle::reload`) re-read the file. A removed tenant's connections end — the
//! requests they had queued are answered with a status that says why (NBD `ESHUTDOWN`, own
//! protocol `NOT_AUTHENTICATED` naming the tenant), then the server closes them — while the
//! other tenants' connections go on; a bad file (unparsable, needing a restart, refused by
//! admission) is refused with its reason and changes nothing; a shrunk reservation is in the
//! flow the scheduler holds at once; `POST /reload` is off without `[admin] token`. Real TCP on
//! 127.0.0.1, kernel-chosen ports; every wait is bounded in count and time.

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::admin::{post_reload, ConfigFile};
use common::{pattern, RawNative, RawNbd};
use proto::nbd::transmission::CommandType;
use proto::wire::{RequestHeader, Status};
use server::config::overrides::Overrides;
use server::config::ServerConfig;
use server::{ConfigSource, ServerHandle};

const TOKEN: &str = "reload-token-0123456789abcdef";
/// The device's tokens per second: a 4 KiB read costs one, so a tenant's pipeline of a
/// thousand reads waits seconds in the scheduler — long enough to be there at the reload.
const DEVICE_TOKENS_PER_SEC: u64 = 300;
/// Reads a removed tenant pipelines before the reload (its connection takes 256 at a time).
const PIPELINED_READS: u64 = 1_000;
/// Longest wait for a connection to end after the reload (the worker adopts within 10 ms).
const END_TIMEOUT: Duration = Duration::from_secs(10);
const ESHUTDOWN: u32 = 108;

fn base(admin: &str) -> String {
    format!(
        r#"
[listen]
native = "127.0.0.1:0"
nbd = "127.0.0.1:0"
admin = "127.0.0.1:0"

[dataplane]
workers = 2
{admin}

[[volume]]
name = "vol"
backend = {{ kind = "memory", size = "64MiB" }}
"#
    )
}

/// A best-effort tenant `name` with `secret`, read-write on `volumes`, without an export.
fn tenant_on(name: &str, secret: &str, volumes: &[&str]) -> String {
    let acl: Vec<String> = volumes
        .iter()
        .map(|v| format!("{{ volume = \"{v}\", access = \"read-write\" }}"))
        .collect();
    format!(
        "\n[[tenant]]\nname = \"{name}\"\nsecret = \"{secret}\"\nclass = \"be\"\nacl = [{}]\n",
        acl.join(", ")
    )
}

const SECOND_VOLUME: &str =
    "\n[[volume]]\nname = \"vol2\"\nbackend = { kind = \"memory\", size = \"8MiB\" }\n";

fn token_section() -> String {
    format!("\n[admin]\ntoken = \"{TOKEN}\"\n")
}

/// A best-effort tenant `name` (secret `NAME-secret-1`) and its NBD export `name`.
fn tenant(name: &str) -> String {
    format!(
        r#"
[[tenant]]
name = "{name}"
secret = "{name}-secret-1"
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]

[[export]]
name = "{name}"
volume = "vol"
tenant = "{name}"
"#
    )
}

fn tiny_profile() -> tempfile::TempPath {
    let point = |p95_us: u64| qos::RatePoint {
        p95_read_latency_ns: p95_us * 1000,
        tokens_per_sec: DEVICE_TOKENS_PER_SEC,
        read_only_tokens_per_sec: DEVICE_TOKENS_PER_SEC,
    };
    let profile = qos::DeviceProfile::new("tiny", 10_000, 1_000, vec![point(500), point(50_000)])
        .expect("valid profile");
    let mut file = tempfile::NamedTempFile::new().expect("profile file");
    std::io::Write::write_all(&mut file, profile.to_toml_string().as_bytes()).expect("write");
    file.into_temp_path()
}

/// The file's config with the profile file `profile` in `[qos]`, read through the same
/// [`Overrides::build`] that `ullstack serve --config F --profile P` runs at start and at every
/// reload; the error is its whole chain, as serve reports it.
fn read_config(
    file: &std::path::Path,
    profile: Option<&std::path::Path>,
) -> Result<ServerConfig, String> {
    let overrides = Overrides {
        profile: profile.map(std::path::Path::to_path_buf),
        ..Overrides::default()
    };
    overrides.build(Some(file), None).map_err(|e| {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    })
}

/// A server started from `file` that reloads from it (and from `profile`, kept alive with it).
fn start(file: &ConfigFile, profile: Option<tempfile::TempPath>) -> ServerHandle {
    let config = read_config(&file.path, profile.as_deref()).expect("initial config");
    let server = server::start(config).expect("server starts");
    let path = file.path.clone();
    server.set_config_source(ConfigSource::new(move || {
        read_config(&path, profile.as_deref())
    }));
    server
}

fn addrs(server: &ServerHandle) -> (SocketAddr, SocketAddr, SocketAddr) {
    let a = server.addrs;
    (
        a.nbd.expect("nbd"),
        a.native.expect("native"),
        a.admin.expect("admin"),
    )
}

fn hello(addr: SocketAddr, tenant: &str) -> RawNative {
    let mut c = RawNative::connect(addr);
    let secret = format!("{tenant}-secret-1");
    let r = c.hello(tenant, &secret, "vol");
    assert_eq!(r.status, Status::Ok, "HELLO {tenant}");
    c
}

/// One NBD simple reply: its errno, reading a read's payload when it succeeded; None at EOF.
fn nbd_reply(nbd: &mut RawNbd, len: usize) -> Option<u32> {
    let mut head = [0u8; 16];
    nbd.stream.read_exact(&mut head).ok()?;
    let errno = u32::from_be_bytes(head[4..8].try_into().ok()?);
    if errno == 0 {
        let mut data = vec![0u8; len];
        nbd.stream.read_exact(&mut data).ok()?;
    }
    Some(errno)
}

/// Checks a healthy tenant's connections still serve, on the connections opened before.
fn still_serves(nbd: &mut RawNbd, native: &mut RawNative, seed: u8) {
    let data = pattern(8192, 4096, seed);
    assert_eq!(
        nbd.write(8192, &data, false),
        0,
        "NBD write after the reload"
    );
    assert_eq!(nbd.read(8192, 4096).expect("NBD read"), data);
    let r = native.read(8192, 4096);
    assert_eq!(
        (r.status, r.payload == data),
        (Status::Ok, true),
        "own protocol read"
    );
}

#[test]
fn a_removed_tenants_connections_end_with_a_status_and_the_others_stay() {
    let file = ConfigFile::new(&(base(&token_section()) + &tenant("alice") + &tenant("bob")));
    let server = start(&file, Some(tiny_profile()));
    let (nbd, native, admin) = addrs(&server);
    let mut alice_nbd = RawNbd::connect(nbd, "alice").expect("alice's export");
    let mut alice_native = hello(native, "alice");
    still_serves(&mut alice_nbd, &mut alice_native, 1);

    // bob pipelines more reads than the device serves in seconds, on both protocols.
    let mut bob_nbd = RawNbd::connect(nbd, "bob").expect("bob's export");
    bob_nbd
        .stream
        .set_read_timeout(Some(END_TIMEOUT))
        .expect("timeout");
    for i in 0..PIPELINED_READS {
        bob_nbd.send(CommandType::Read.to_u16(), 0, (i % 1024) * 4096, 4096, &[]);
    }
    assert_eq!(
        nbd_reply(&mut bob_nbd, 4096),
        Some(0),
        "bob is served before the reload"
    );
    let mut bob_native = hello(native, "bob");
    bob_native
        .stream
        .set_read_timeout(Some(END_TIMEOUT))
        .expect("timeout");
    // As many as over NBD, and one answered before the reload, as there: a session ending
    // reads nothing more, so requests still in the socket when the worker adopts the reload
    // (a loaded machine's worker may not have read them yet) are never answered.
    for i in 0..PIPELINED_READS {
        bob_native.send(RequestHeader::read(0, 0, (i % 1024) * 4096, 4096), &[]);
    }
    let first = bob_native.recv().expect("bob's first own-protocol reply");
    assert_eq!(
        first.status,
        Status::Ok,
        "bob's own-protocol session is served before the reload"
    );

    file.rewrite(&(base(&token_section()) + &tenant("alice")));
    let (code, body) = post_reload(admin, Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("tenant bob removed"), "{body}");
    assert_eq!(server.current().generation, 1);

    // bob's NBD connection: reads that reached storage are answered, the queued ones get
    // ESHUTDOWN, then the server closes it.
    let started = Instant::now();
    let (mut served, mut shut) = (0u64, 0u64);
    for _ in 0..PIPELINED_READS {
        match nbd_reply(&mut bob_nbd, 4096) {
            Some(0) => served += 1,
            Some(ESHUTDOWN) => shut += 1,
            Some(other) => panic!("bob's NBD read answered errno {other}"),
            None => break,
        }
    }
    println!("bob over NBD after the reload: {served} served, {shut} ESHUTDOWN, then closed");
    assert!(shut > 0, "bob's queued reads were not told why");
    let mut byte = [0u8; 1];
    assert!(
        matches!(bob_nbd.stream.read(&mut byte), Ok(0) | Err(_)),
        "bob's NBD connection was not closed"
    );
    assert!(
        started.elapsed() < END_TIMEOUT,
        "bob's NBD connection took {:?} to end",
        started.elapsed()
    );

    // bob's own-protocol session: the same, with a status naming the tenant.
    let mut ended = 0;
    for _ in 0..PIPELINED_READS {
        let Some(r) = bob_native.recv() else { break };
        if r.status == Status::NotAuthenticated {
            let message = String::from_utf8_lossy(&r.payload).into_owned();
            assert!(message.contains("\"bob\""), "{message}");
            ended += 1;
        } else {
            assert_eq!(r.status, Status::Ok, "bob's own-protocol read");
        }
    }
    assert!(
        ended > 0,
        "bob's queued own-protocol reads were not told why"
    );
    assert!(
        bob_native.closed_by_server(),
        "bob's own-protocol session was not closed"
    );

    // alice's connections, opened before the reload, go on; bob cannot come back.
    still_serves(&mut alice_nbd, &mut alice_native, 2);
    assert!(RawNbd::connect(nbd, "bob").is_err(), "bob's export is gone");
    let r = RawNative::connect(native).hello("bob", "bob-secret-1", "vol");
    assert_eq!(r.status, Status::AuthFailed);
    drop(server);
}

#[test]
fn a_bad_file_is_refused_with_its_reason_and_changes_nothing() {
    let good = base(&token_section()) + &tenant("alice") + &tenant("bob");
    let file = ConfigFile::new(&good);
    let server = start(&file, None);
    let (nbd, native, admin) = addrs(&server);
    let mut bob_nbd = RawNbd::connect(nbd, "bob").expect("bob's export");
    let mut bob_native = hello(native, "bob");
    still_serves(&mut bob_nbd, &mut bob_native, 3);

    let carol_lc = r#"
[[tenant]]
name = "carol"
secret = "carol-secret-1"
class = "lc"
slo = { p95_read_latency_us = 500, iops = 100000000, read_ratio_pct = 100 }
acl = [{ volume = "vol", access = "read-write" }]
"#;
    let bad = [
        ("not TOML [", "does not parse"),
        (
            &*(base(&token_section()).replace("workers = 2", "workers = 3") + &tenant("alice")),
            "[dataplane] changed",
        ),
        (
            &*(base(&token_section()).replace("name = \"vol\"", "name = \"vol2\"")),
            "volume vol removed",
        ),
        (
            &*(base(&token_section()) + &tenant("alice") + carol_lc),
            "not admitted",
        ),
    ];
    for (text, reason) in bad {
        file.rewrite(text);
        let (code, body) = post_reload(admin, Some(TOKEN));
        assert_eq!(code, 422, "{body}");
        assert!(body.contains(reason), "expected {reason:?} in {body}");
        assert!(body.contains("nothing changed"), "{body}");
        let sighup = server.reload("sighup").expect_err("SIGHUP refuses it too");
        assert!(sighup.to_string().contains(reason), "{sighup}");
        // Nothing changed: same generation, bob's connections serve, carol does not exist.
        assert_eq!(server.current().generation, 0, "after {reason}");
        still_serves(&mut bob_nbd, &mut bob_native, 4);
        assert!(server.current().tenants.by_name("carol").is_none());
    }
    let r = RawNative::connect(native).hello("carol", "carol-secret-1", "vol");
    assert_eq!(r.status, Status::AuthFailed, "carol was never admitted");

    // The refusals left nothing half-done: the good file applies.
    file.rewrite(&(good + &tenant("dave")));
    let report = server.reload("sighup").expect("a good file applies");
    assert_eq!(report.generation, 1);
    assert!(
        report.changes.iter().any(|c| c == "tenant dave added"),
        "{report}"
    );
    hello(native, "dave");
    still_serves(&mut bob_nbd, &mut bob_native, 5);
}

#[test]
fn post_reload_is_off_without_a_token_and_needs_the_right_one() {
    let file = ConfigFile::new(&(base("") + &tenant("alice")));
    let server = start(&file, None);
    let (_, _, admin) = addrs(&server);
    let (code, body) = post_reload(admin, Some(TOKEN));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("[admin] token"), "{body}");

    // The operator adds a token and sends SIGHUP; from then on POST /reload works with it.
    file.rewrite(&(base(&token_section()) + &tenant("alice")));
    let report = server.reload("sighup").expect("token added");
    assert!(
        report.changes.iter().any(|c| c == "admin token changed"),
        "{report}"
    );
    for wrong in [None, Some("reload-token-0123456789abcdeX")] {
        let (code, body) = post_reload(admin, wrong);
        assert_eq!(code, 401, "{body}");
    }
    let m = &server.shared().metrics;
    assert_eq!(m.auth_failures_total("admin_token"), 2);
    // Two wrong tokens are within the free failures of the back-off (crate::throttle).
    let (code, body) = post_reload(admin, Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    assert!(body.starts_with("generation 2: no change"), "{body}");
}

#[test]
fn a_shrunk_reservation_is_in_the_flow_the_scheduler_holds() {
    let lc = |iops: u64| {
        format!(
            r#"
[[tenant]]
name = "lc"
secret = "lc-secret-1"
class = "lc"
slo = {{ p95_read_latency_us = 1000, iops = {iops}, read_ratio_pct = 100 }}
acl = [{{ volume = "vol", access = "read-write" }}]
"#
        )
    };
    let file = ConfigFile::new(&(base(&token_section()) + &lc(40_000)));
    let server = start(&file, None);
    let (_, native, admin) = addrs(&server);
    let mut session = hello(native, "lc");
    let reservation = |s: &mut RawNative| -> u64 {
        let r = s.call(RequestHeader::stats(0, 0), &[]);
        assert_eq!(r.status, Status::Ok);
        let stats: serde_json::Value = serde_json::from_slice(&r.payload).expect("STATS JSON");
        stats["flows"][0]["reservation_mtok_per_sec"]
            .as_u64()
            .expect("reservation")
    };
    // The handle as the server started: the schedulers hold clones of it.
    let held = server.shared().default_flows[0]
        .clone()
        .expect("lc's default flow");
    let before = reservation(&mut session);
    assert_eq!(held.reservation_mtok_per_sec(), before);

    file.rewrite(&(base(&token_section()) + &lc(10_000)));
    let (code, body) = post_reload(admin, Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("tenant lc: fixed SLO changed"), "{body}");
    let after = reservation(&mut session);
    println!("lc's reservation: {before} -> {after} mtok/s");
    assert_eq!(
        after * 4,
        before,
        "a quarter of the IOPS, a quarter of the tokens"
    );
    assert_eq!(
        held.reservation_mtok_per_sec(),
        after,
        "the flow in use has it"
    );
    let r = session.read(0, 4096);
    assert_eq!(r.status, Status::Ok, "the session goes on");
    assert_eq!(
        server.current().default_flows[0].as_ref().map(|h| h.id()),
        Some(held.id())
    );
}

#[test]
fn a_reload_adds_a_volume_and_a_changed_secret_ends_the_old_sessions() {
    let before = base(&token_section())
        + &tenant_on("alice", "alice-secret-1", &["vol"])
        + &tenant_on("bob", "bob-secret-1", &["vol"]);
    let file = ConfigFile::new(&before);
    let server = start(&file, None);
    let (_, native, admin) = addrs(&server);
    let mut alice_old = hello(native, "alice");
    let mut bob = hello(native, "bob");

    file.rewrite(
        &(base(&token_section())
            + SECOND_VOLUME
            + &tenant_on("alice", "alice-secret-2", &["vol", "vol2"])
            + &tenant_on("bob", "bob-secret-1", &["vol", "vol2"])),
    );
    let (code, body) = post_reload(admin, Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    for change in [
        "volume vol2 added",
        "tenant alice replaced",
        "tenant bob: ACL changed",
    ] {
        assert!(body.contains(change), "{change:?} missing in {body}");
    }

    // alice authenticated with the old secret: her session ends; the new secret works.
    assert!(alice_old.closed_by_server(), "alice's old session goes on");
    let mut again = RawNative::connect(native);
    assert_eq!(
        again.hello("alice", "alice-secret-1", "vol2").status,
        Status::AuthFailed
    );
    let mut again = RawNative::connect(native);
    assert_eq!(
        again.hello("alice", "alice-secret-2", "vol2").status,
        Status::Ok
    );
    // The added volume serves on every worker (a session per worker: round robin).
    let mut second = RawNative::connect(native);
    assert_eq!(
        second.hello("bob", "bob-secret-1", "vol2").status,
        Status::Ok
    );
    for (i, c) in [&mut again, &mut second].into_iter().enumerate() {
        let data = pattern(4096 * i as u64, 4096, 9);
        assert_eq!(c.write(4096 * i as u64, &data).status, Status::Ok);
        let r = c.read(4096 * i as u64, 4096);
        assert_eq!(
            (r.status, r.payload == data),
            (Status::Ok, true),
            "vol2 on session {i}"
        );
    }
    // bob's session, opened before, goes on on its volume.
    let r = bob.read(0, 4096);
    assert_eq!(r.status, Status::Ok);
}

#[test]
fn a_reload_rereads_psk_keys_for_new_connections_and_keeps_the_sessions_in_tls() {
    const OLD_KEY: &str = "6b9b0c9a1e3f5d7c2a4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4";
    const NEW_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = dir.path().join("keys.psk");
    std::fs::write(&keys, format!("alice:{OLD_KEY}\n")).expect("key file");
    let text = base(&token_section())
        + &format!("\n[tls]\npsk_file = \"{}\"\n", keys.display())
        + &tenant_on("alice", "alice-secret-1", &["vol"]);
    let file = ConfigFile::new(&text);
    let server = start(&file, None);
    let (_, native, admin) = addrs(&server);
    let mut old = common::psk_session(native, "alice", OLD_KEY);

    std::fs::write(&keys, format!("alice:{NEW_KEY}\n")).expect("rotate the key");
    let (code, body) = post_reload(admin, Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("TLS keys re-read"), "{body}");

    assert!(
        common::try_psk_session(native, "alice", OLD_KEY).is_err(),
        "a new connection with the old key was let in"
    );
    let mut new = common::psk_session(native, "alice", NEW_KEY);
    assert_eq!(
        common::psk_hello(&mut new, "alice", "alice-secret-1", "vol"),
        Status::Ok
    );
    assert_eq!(
        common::psk_hello(&mut old, "alice", "alice-secret-1", "vol"),
        Status::Ok,
        "the session in TLS since before the reload goes on"
    );
}
