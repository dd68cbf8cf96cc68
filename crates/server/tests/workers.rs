//! Connections are spread over the workers: the acceptor hands each accepted socket to the
//! next worker in turn, whatever its protocol, and each worker serves the requests of its own
//! connections. Checked through the admin metrics a worker keeps per worker
//! (`ullstack_worker_connections`, `ullstack_worker_batch_requests_count`), with a one-worker
//! server as the control: the same clients there all land on worker 0.

mod common;

use std::time::{Duration, Instant};

use common::{metric, pattern, scrape, start, RawNative, RawNbd};

fn config(workers: usize) -> String {
    format!(
        r#"
[listen]
native = "127.0.0.1:0"
nbd = "127.0.0.1:0"
admin = "127.0.0.1:0"

[dataplane]
workers = {workers}

[[volume]]
name = "vol"
backend = {{ kind = "memory", size = "8MiB" }}

[[tenant]]
name = "alice"
secret = "alice-secret"
class = "be"
acl = [{{ volume = "vol", access = "read-write" }}]

[[export]]
name = "default"
volume = "vol"
tenant = "alice"
"#
    )
}

/// `ullstack_worker_connections` and the steps that took requests, per worker.
fn per_worker(text: &str, workers: usize) -> (Vec<u64>, Vec<u64>) {
    (0..workers)
        .map(|w| {
            (
                metric(
                    text,
                    &format!("ullstack_worker_connections{{worker=\"{w}\"}}"),
                ),
                metric(
                    text,
                    &format!("ullstack_worker_batch_requests_count{{worker=\"{w}\"}}"),
                ),
            )
        })
        .unzip()
}

/// Opens 3 own-protocol and 3 NBD connections, each writing and reading back its own block,
/// and returns the per-worker connections and request-taking steps while they are open; then
/// closes them and waits until every worker's connection gauge is back to 0.
fn six_clients(workers: usize) -> (Vec<u64>, Vec<u64>) {
    let s = start(&config(workers));
    let admin = s.addrs.admin.expect("admin listener");
    let mut native = Vec::new();
    let mut nbd = Vec::new();
    for _ in 0..3 {
        let mut c = RawNative::connect(s.addrs.native.expect("native listener"));
        assert_eq!(
            c.hello("alice", "alice-secret", "vol").status,
            proto::wire::Status::Ok
        );
        native.push(c);
        nbd.push(RawNbd::connect(s.addrs.nbd.expect("nbd listener"), "default").expect("nbd"));
    }
    for (i, c) in native.iter_mut().enumerate() {
        let offset = i as u64 * 4096;
        let data = pattern(offset, 4096, 1);
        assert_eq!(c.write(offset, &data).status, proto::wire::Status::Ok);
        assert_eq!(c.read(offset, 4096).payload, data);
    }
    for (i, c) in nbd.iter_mut().enumerate() {
        let offset = (16 + i as u64) * 4096;
        let data = pattern(offset, 4096, 2);
        assert_eq!(c.write(offset, &data, false), 0);
        assert_eq!(c.read(offset, 4096).expect("nbd read"), data);
    }
    // Every connection has had a round trip, so every worker has adopted its own.
    let text = scrape(admin);
    let spread = per_worker(&text, workers);
    drop(native);
    for c in nbd {
        c.disconnect();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (open, _) = per_worker(&scrape(admin), workers);
        if open.iter().all(|&n| n == 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "connections still open per worker after the clients left: {open:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    s.shutdown();
    spread
}

#[test]
fn connections_of_both_protocols_are_spread_over_two_workers_and_served_there() {
    let (open, steps) = six_clients(2);
    assert_eq!(
        open,
        vec![3, 3],
        "6 connections over 2 workers, in turn: 3 each"
    );
    assert!(
        steps.iter().all(|&n| n >= 3),
        "each worker took its connections' requests (at least one step per connection): {steps:?}"
    );
}

#[test]
fn control_one_worker_serves_every_connection() {
    let (open, steps) = six_clients(1);
    assert_eq!(open, vec![6]);
    assert!(steps[0] >= 6, "{steps:?}");
}
