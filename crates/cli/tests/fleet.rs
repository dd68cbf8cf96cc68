//! A fleet of three `ullstack serve` processes placed through a real etcd (Debian's
//! `etcd-server`, started by the test on 127.0.0.1 with a temporary data folder).
//!
//! 30 LC tenants are placed by 6 concurrent `ullstack place` processes; no server is promised
//! more than its capacity; every tenant then connects to the server it was placed on and meets
//! its SLO (memory backend, `ullstack bench`); one server is killed with SIGKILL and within its
//! lease TTL placement stops choosing it; `place --rebalance` moves its tenants where they fit
//! and names those that fit nowhere.
//!
//! Sizes: each server's profile sustains 2,400 tokens/s at a 20 ms p95 (read-only reads cost one
//! token), each tenant reserves 200 IOPS of 4 KiB reads at 20 ms, so a server holds 12 and the
//! fleet 36. (20 ms, not tighter: the 30 tenants' clients, 3 servers and etcd share the test
//! machine's cores with whatever else runs, and a client stalled by the OS scheduler reports
//! its stall as latency, measured from each request's scheduled time. A run on a 2-core VM at
//! load average 10 saw a client's send lag reach 67 ms; at 5 ms that failed the test for a
//! reason that is not the server's.) After the kill the two survivors have 24 - 20 = 4 free places for the dead
//! server's tenants: at least some move and the rest are reported unplaced.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TEST: &str = "fleet";
const TTL_S: u64 = 2;
const SECRET: &str = "fleet-secret-0123";

fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A child killed (SIGKILL) and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> Proc {
    let f = std::fs::File::create(log).unwrap();
    Proc(
        cmd.stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}")),
    )
}

fn tenant_names() -> Vec<String> {
    (0..6)
        .flat_map(|c| (0..5).map(move |i| format!("c{c}-{i}")))
        .collect()
}

fn server_config(native_port: u16) -> String {
    let mut s = format!(
        "[listen]\nnative = \"127.0.0.1:{native_port}\"\n\n\
         [qos]\nscheduler = \"on\"\n\
         [qos.profile]\nname = \"fleet-test\"\nwrite_cost_mtok = 10000\nread_only_read_cost_mtok = 1000\n\
         [[qos.profile.points]]\np95_read_latency_ns = 20000000\ntokens_per_sec = 2400\nread_only_tokens_per_sec = 2400\n\n\
         [[volume]]\nname = \"fast\"\nbackend = {{ kind = \"memory\", size = \"64MiB\" }}\n"
    );
    for name in tenant_names()
        .iter()
        .chain(std::iter::once(&"late".to_string()))
    {
        s += &format!(
            "\n[[tenant]]\nname = \"{name}\"\nsecret = \"{SECRET}\"\nclass = \"lc\"\nacl = [{{ volume = \"fast\", access = \"read-write\" }}]\n"
        );
    }
    s
}

fn spec(name: &str) -> String {
    format!("name={name},secret={SECRET},volume=fast,class=lc,iops=200,p95=20ms,read=100,size=4k")
}

/// `placed NAME on ID (…; X ms, …)` lines: (name, server id, ms).
fn placements(text: &str) -> Vec<(String, String, f64)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("placed ")?;
            let mut w = rest.split_whitespace();
            let name = w.next()?.to_string();
            w.next()?; // "on"
            let id = w.next()?.to_string();
            let ms = l.split("; ").nth(1)?.split(" ms").next()?.parse().ok()?;
            Some((name, id, ms))
        })
        .collect()
}

#[test]
fn thirty_tenants_from_six_clients_never_oversubscribe_and_a_dead_server_is_rebalanced() {
    let Some(etcd_bin) = testkit::tool("etcd", TEST, "apt-get install etcd-server") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (client_port, peer_port) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let _etcd = spawn(
        Command::new(etcd_bin)
            .args(["--name", "fleet-test", "--data-dir"])
            .arg(d.join("etcd"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("fleet-test={peer}")])
            .args(["--log-level", "warn"]),
        &d.join("etcd.log"),
    );
    let up = testkit::wait_until(Duration::from_secs(30), || {
        fleet::Etcd::connect(&url)
            .and_then(|mut e| e.list("/"))
            .is_ok()
    });
    assert!(
        up.is_ok(),
        "etcd never answered: {}",
        read(&d.join("etcd.log"))
    );

    // Three servers join the fleet.
    let mut servers: Vec<(String, Proc, u16)> = Vec::new();
    for i in 0..3 {
        let port = free_port();
        let cfg = d.join(format!("s{i}.toml"));
        std::fs::write(&cfg, server_config(port)).unwrap();
        let p = spawn(
            ullstack()
                .args(["serve", "--config"])
                .arg(&cfg)
                .args(["--registry", &url, "--registry-id", &format!("s{i}")])
                .args(["--registry-ttl", &TTL_S.to_string()]),
            &d.join(format!("s{i}.log")),
        );
        servers.push((format!("s{i}"), p, port));
    }
    let all_live = testkit::wait_until(Duration::from_secs(30), || {
        fleet::Etcd::connect(&url)
            .and_then(|mut e| fleet::place::servers(&mut e))
            .is_ok_and(|s| s.len() == 3)
    });
    assert!(
        all_live.is_ok(),
        "servers never all joined: {}",
        read(&d.join("s0.log"))
    );

    // 30 tenants from 6 concurrent clients (5 each).
    let clients: Vec<_> = (0..6)
        .map(|c| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut cmd = ullstack();
                cmd.args(["place", "--registry", &url]);
                for i in 0..5 {
                    cmd.args(["--tenant", &spec(&format!("c{c}-{i}"))]);
                }
                let (ok, text) = testkit::run(&mut cmd).expect("ullstack place runs");
                assert!(ok, "client {c}: {text}");
                text
            })
        })
        .collect();
    let mut placed = Vec::new();
    for c in clients {
        placed.extend(placements(&c.join().expect("client thread")));
    }
    assert_eq!(placed.len(), 30, "every tenant placed: {placed:?}");
    let mut ms: Vec<f64> = placed.iter().map(|p| p.2).collect();
    ms.sort_by(f64::total_cmp);
    println!(
        "placement + reservation over 30 tenants, 6 concurrent clients: median {:.2} ms, max {:.2} ms",
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );

    // No server is promised more than its capacity, and the registry agrees with the output.
    let mut etcd = fleet::Etcd::connect(&url).unwrap();
    let live = fleet::place::servers(&mut etcd).unwrap();
    let reserved = fleet::place::reservations(&mut etcd).unwrap();
    let mut total = 0;
    for (id, s) in &live {
        let tenants = reserved
            .get(id)
            .map(|r| r.0.tenants.clone())
            .unwrap_or_default();
        let load = fleet::model::load(&s.profile, &tenants).unwrap();
        assert!(
            load.reserved_mtok_per_sec <= load.rate_mtok_per_sec,
            "{id} oversubscribed: {load:?}"
        );
        for t in &tenants {
            assert!(
                placed.iter().any(|p| p.0 == t.name && &p.1 == id),
                "{} on {id}",
                t.name
            );
        }
        total += tenants.len();
    }
    assert_eq!(total, 30);

    // Every tenant connects to its server and meets its SLO.
    let benches: Vec<_> = servers
        .iter()
        .map(|(id, _, _)| {
            let mine: Vec<String> = placed
                .iter()
                .filter(|p| &p.1 == id)
                .map(|p| p.0.clone())
                .collect();
            let json = d.join(format!("bench-{id}.json"));
            let mut cmd = ullstack();
            // Connect by the registry: bench finds the server holding these reservations.
            cmd.args(["bench", "--registry", &url])
                .args([
                    "--duration",
                    "2s",
                    "--warmup",
                    "200ms",
                    "--no-progress",
                    "--json",
                ])
                .arg(&json);
            for t in &mine {
                cmd.args(["--tenant", &spec(t)]);
            }
            (
                id.clone(),
                mine.len(),
                json,
                std::thread::spawn(move || testkit::run(&mut cmd).expect("bench runs")),
            )
        })
        .collect();
    for (id, n, json, h) in benches {
        let (ok, text) = h.join().unwrap();
        if n == 0 {
            continue;
        }
        assert!(ok, "bench on {id}: {text}");
        assert!(
            text.contains(&format!("bench: server {id} at")),
            "resolved elsewhere: {text}"
        );
        let v: serde_json::Value = serde_json::from_str(&read(&json)).unwrap();
        let tenants = v["tenants"].as_array().expect("tenants");
        assert_eq!(tenants.len(), n);
        for t in tenants {
            assert!(t["refused"].is_null(), "{id}: {t}");
            assert_eq!(
                t["errors"].as_object().map(|e| e.len()),
                Some(0),
                "{id}: {t}"
            );
            let p95 = t["reads"]["latency_ns"]["p95"]
                .as_u64()
                .expect("a read p95");
            assert!(
                p95 <= 5_000_000,
                "{id}: p95 {p95} ns over the 20 ms SLO: {t}"
            );
            // Served what it offered: Poisson arrivals at 200/s over the 2 s window are
            // 400 ± 20 requests, so bench's own `slo_met` (≥ 95 % of 200 IOPS, i.e. one
            // standard deviation) misses one tenant in six by chance alone; 4 standard
            // deviations below the mean (320 requests) cannot be chance.
            let reads = t["reads"]["count"].as_u64().unwrap();
            assert!(
                reads >= 320,
                "{id}: only {reads} reads served in 2 s at 200/s: {t}"
            );
        }
    }

    // Kill one server without shutdown: within the TTL it is no longer chosen.
    let (dead_id, mut dead, _) = servers.remove(0);
    dead.0.kill().unwrap();
    let killed = Instant::now();
    let gone = testkit::wait_until(Duration::from_secs(TTL_S * 5), || {
        fleet::place::is_live(&mut etcd, &dead_id).is_ok_and(|l| !l)
    });
    let gone_after = killed.elapsed();
    assert!(
        gone.is_ok(),
        "{dead_id} still live {gone_after:?} after SIGKILL"
    );
    println!(
        "{dead_id} left the fleet {:.1} s after SIGKILL (TTL {TTL_S} s)",
        gone_after.as_secs_f64()
    );
    let (ok, text) =
        testkit::run(ullstack().args(["place", "--registry", &url, "--tenant", &spec("late")]))
            .unwrap();
    assert!(ok, "{text}");
    let late = placements(&text);
    assert_eq!(late.len(), 1);
    assert_ne!(late[0].1, dead_id, "placed on the dead server: {text}");

    // Rebalancing moves what fits and names what does not.
    let dead_tenants = reserved
        .get(&dead_id)
        .map(|r| r.0.tenants.len())
        .unwrap_or(0);
    let (ok, text) =
        testkit::run(ullstack().args(["place", "--registry", &url, "--rebalance"])).unwrap();
    assert!(ok, "{text}");
    let moved = text.lines().filter(|l| l.starts_with("moved ")).count();
    let unplaced = text
        .lines()
        .filter(|l| l.starts_with("could not place "))
        .count();
    assert_eq!(moved + unplaced, dead_tenants, "{text}");
    assert!(moved > 0, "free places existed: {text}");
    assert!(text
        .lines()
        .filter(|l| l.starts_with("moved "))
        .all(|l| !l.ends_with(&format!("-> {dead_id}"))));
    let live = fleet::place::servers(&mut etcd).unwrap();
    let reserved = fleet::place::reservations(&mut etcd).unwrap();
    for (id, s) in &live {
        let tenants = reserved
            .get(id)
            .map(|r| r.0.tenants.clone())
            .unwrap_or_default();
        let load = fleet::model::load(&s.profile, &tenants).unwrap();
        assert!(
            load.reserved_mtok_per_sec <= load.rate_mtok_per_sec,
            "{id} oversubscribed after rebalance"
        );
    }
    let left = reserved
        .get(&dead_id)
        .map(|r| r.0.tenants.len())
        .unwrap_or(0);
    assert_eq!(
        left, unplaced,
        "the unplaced stay listed on the dead server"
    );
}

fn read(p: &PathBuf) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[test]
fn bad_registries_are_named() {
    let port = free_port(); // nothing listens there
    let url = format!("http://127.0.0.1:{port}");
    let o = ullstack()
        .args(["place", "--registry", &url, "--list"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(&url), "{err}");
    let o = ullstack()
        .args(["place", "--registry", "https://h:1", "--list"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected http://HOST:PORT"));
    let o = ullstack()
        .args(["serve", "--memory", "64MiB", "--registry-id", "x"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("need a registry"));
    let o = ullstack()
        .args(["place", "--registry", &url, "--tenant", "name=b,class=be"])
        .output()
        .unwrap();
    assert!(!o.status.success());
}
