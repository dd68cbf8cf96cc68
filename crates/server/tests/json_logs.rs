//! Logs as JSON lines (issue 28, day two; `ullstack serve --log-format json`): every line the
//! server logs is one JSON object with `ts`, `level`, `target`, `event` and `message`, and the
//! events an operator builds on are there with their fields — `conn_open` and `conn_close`
//! once per connection (the close with its tenant and reason), `refusal` for a wrong secret,
//! an unknown export and a wrong admin token, `reload` applied and refused, `stop`. The test
//! process logs through the server's JSON formatter into a buffer it then parses; real TCP on
//! 127.0.0.1; every wait is bounded.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::admin::{post_reload, ConfigFile};
use common::{RawNative, RawNbd};
use proto::wire::Status;
use serde_json::Value;
use server::ConfigSource;

const TOKEN: &str = "json-logs-token-0123456789";
const WAIT: Duration = Duration::from_secs(10);

/// Where the test's log lines go.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    /// Every line so far, each parsed (a line that is not one JSON object fails the test).
    fn events(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let text = String::from_utf8(bytes).expect("log is UTF-8");
        text.lines()
            .map(|line| {
                let v: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                assert!(v.is_object(), "not an object: {line}");
                v
            })
            .collect()
    }

    /// Waits (bounded) for an event named `name` whose fields match `want`; returns it.
    fn wait_for(&self, name: &str, want: &[(&str, &str)]) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = self.events().into_iter().find(|e| {
                e["event"] == name && want.iter().all(|(k, v)| e[*k].as_str() == Some(v))
            });
            if let Some(e) = found {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "no {name} event with {want:?} within {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn config(tenants: &[&str]) -> String {
    let mut text = format!(
        r#"
[listen]
native = "127.0.0.1:0"
nbd = "127.0.0.1:0"
admin = "127.0.0.1:0"

[admin]
token = "{TOKEN}"

[[volume]]
name = "vol"
backend = {{ kind = "memory", size = "16MiB" }}
"#
    );
    for t in tenants {
        text.push_str(&format!(
            r#"
[[tenant]]
name = "{t}"
secret = "{t}-secret-1"
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]

[[export]]
name = "{t}"
volume = "vol"
tenant = "{t}"
"#
        ));
    }
    text
}

fn port_of(addr: SocketAddr) -> String {
    addr.to_string()
}

#[test]
fn connection_refusal_reload_and_stop_events_are_json_lines() {
    let buffer = Buffer::default();
    let out = buffer.clone();
    tracing::subscriber::set_global_default(server::logfmt::json_subscriber(
        move || out.clone(),
        tracing_subscriber::EnvFilter::new("info"),
    ))
    .expect("the test's subscriber");

    let file = ConfigFile::new(&config(&["alice", "bob"]));
    let server = common::start(&config(&["alice", "bob"]));
    server.set_config_source(ConfigSource::file(file.path.clone()));
    let (nbd, native, admin) = (
        server.addrs.nbd.expect("nbd"),
        server.addrs.native.expect("native"),
        server.addrs.admin.expect("admin"),
    );

    // A connection's open and close, with its tenant and why it closed.
    let alice = RawNbd::connect(nbd, "alice").expect("alice");
    let alice_port = port_of(alice.stream.local_addr().expect("addr"));
    let open = buffer.wait_for("conn_open", &[("peer", &alice_port), ("protocol", "nbd")]);
    assert_eq!(open["level"], "info");
    assert!(open["worker"].is_u64(), "{open}");
    alice.disconnect();
    let close = buffer.wait_for("conn_close", &[("peer", &alice_port)]);
    assert_eq!(close["tenant"], "alice");
    assert_eq!(close["reason"], "nbd_disconnect");
    assert!(close["open_ms"].is_u64(), "{close}");

    // Refusals: a wrong secret, an unknown export, a wrong admin token.
    let mut wrong = RawNative::connect(native);
    assert_eq!(
        wrong.hello("alice", "not-the-secret", "vol").status,
        Status::AuthFailed
    );
    let wrong_port = port_of(wrong.stream.local_addr().expect("addr"));
    let refusal = buffer.wait_for(
        "refusal",
        &[("peer", &wrong_port), ("reason", "hello_auth")],
    );
    assert_eq!(
        (refusal["level"].as_str(), refusal["target"].as_str()),
        (Some("warn"), Some("audit"))
    );
    assert!(RawNbd::connect(nbd, "nobody").is_err());
    buffer.wait_for(
        "refusal",
        &[("reason", "nbd_unknown_export"), ("export", "\"nobody\"")],
    );
    assert_eq!(
        post_reload(admin, Some("json-logs-token-WRONG-0000")).0,
        401
    );
    buffer.wait_for("refusal", &[("reason", "admin_token_wrong")]);

    // A bob session ended by a reload closes with that reason.
    let bob = RawNbd::connect(nbd, "bob").expect("bob");
    let bob_port = port_of(bob.stream.local_addr().expect("addr"));
    file.rewrite(&config(&["alice"]));
    assert_eq!(post_reload(admin, Some(TOKEN)).0, 200);
    let reload = buffer.wait_for("reload", &[("outcome", "applied"), ("trigger", "http")]);
    assert_eq!(reload["generation"], 1);
    assert!(
        reload["changes"]
            .as_str()
            .is_some_and(|c| c.contains("tenant bob removed")),
        "{reload}"
    );
    let ended = buffer.wait_for("conn_close", &[("peer", &bob_port)]);
    assert_eq!(
        (ended["tenant"].as_str(), ended["reason"].as_str()),
        (Some("bob"), Some("tenant_removed"))
    );
    file.rewrite("[listen]\nnbd = \"127.0.0.1:1\"\n");
    assert_eq!(post_reload(admin, Some(TOKEN)).0, 422);
    let refused = buffer.wait_for("reload", &[("outcome", "refused")]);
    assert_eq!(refused["level"], "error");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("restart")),
        "{refused}"
    );
    drop(bob);

    let _ = server.shutdown();
    buffer.wait_for("stop", &[]);
    // Every line is JSON (checked by `events`), and each names its event and time.
    for e in buffer.events() {
        for key in ["ts", "level", "target", "event", "message"] {
            assert!(e[key].is_string(), "{key} missing in {e}");
        }
    }
}
