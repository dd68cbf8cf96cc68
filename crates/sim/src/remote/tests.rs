use super::*;
use crate::net::NetConfig;

fn qd1_reader(net: NetConfig) -> RemoteRunConfig {
    let text = r#"
duration = "20ms"
warmup = "1ms"
seed = 3
[[tenant]]
name = "r"
qd = 1
read = 100
[sim]
device = "zssd"
workers = 1
"#;
    let mut cfg = RemoteRunConfig::parse(text, "qd1.toml").expect("valid scenario");
    cfg.server.net = net;
    cfg
}

/// At QD1 nothing queues: the client-observed latency is the device's and the dataplane's time
/// plus exactly the link's propagation both ways and the two messages' wire time.
#[test]
fn the_network_adds_its_latency_and_no_more_at_qd1() {
    let free = NetConfig {
        latency_ns: 0,
        bandwidth_bytes_per_sec: 0,
        client_message_ns: 0,
        server_message_ns: 0,
    };
    let wire = NetConfig {
        latency_ns: 7_000,
        bandwidth_bytes_per_sec: 1_250_000_000,
        ..free
    };
    let base = run(&qd1_reader(free)).expect("runs");
    let with = run(&qd1_reader(wire)).expect("runs");
    let (b, w) = (&base.tenants[0], &with.tenants[0]);
    assert!(b.reads > 500, "{} reads", b.reads);
    // Request 32 B (26 ns at 1.25 GB/s, rounded up) and reply 4128 B (3303 ns), 7 µs each way.
    let added_ns = 2 * 7_000 + 26 + 3_303;
    let diff = w.read_latency_ns_mean as i64 - b.read_latency_ns_mean as i64;
    assert!(
        (diff - added_ns as i64).abs() <= 100,
        "mean {} → {} ns: added {diff} ns, expected {added_ns}",
        b.read_latency_ns_mean,
        w.read_latency_ns_mean
    );
    // Fewer reads fit in the window by the added latency, and no more than that.
    let expected_reads =
        b.reads as f64 * b.read_latency_ns_mean as f64 / (b.read_latency_ns_mean + added_ns) as f64;
    assert!(
        (w.reads as f64 - expected_reads).abs() <= expected_reads * 0.02 + 2.0,
        "{} reads, expected about {expected_reads:.0}",
        w.reads
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let cfg = qd1_reader(NetConfig::default());
    let a = run(&cfg).expect("runs");
    let b = run(&cfg).expect("runs");
    let strip = |s: &RemoteSummary| {
        let mut v = serde_json::to_value(s).expect("json");
        v.as_object_mut().expect("object").remove("wall_ms");
        v
    };
    assert_eq!(strip(&a), strip(&b));
}

#[test]
fn a_scenario_beyond_the_profile_is_refused_naming_the_tenant() {
    let text = r#"
[[tenant]]
name = "greedy"
class = "lc"
iops = 600000
read = 50
p95 = "500us"
"#;
    let cfg = RemoteRunConfig::parse(text, "g.toml").expect("parses");
    let err = run(&cfg).unwrap_err().to_string();
    assert!(err.contains("greedy"), "{err}");
}

#[test]
fn bad_sim_keys_are_named() {
    let err = RemoteRunConfig::parse("[[tenant]]\nname = \"a\"\n[sim]\nworkerz = 2\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("workerz"), "{err}");
    let err = RemoteRunConfig::parse("[[tenant]]\nname = \"a\"\n[sim]\nworkers = 0\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("workers = 0"), "{err}");
}
