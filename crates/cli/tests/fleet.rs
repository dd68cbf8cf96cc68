//! A fleet of three `ullstack serve` processes placed through a real etcd (Debian's
//! `etcd-server`, started by the test on 127.0.0.1 with a temporary data folder).
//!
//! Demand exceeds capacity, so placements race for the last places of every server: 42 LC
//! tenants are placed by 6 concurrent `ullstack place` processes (7 each) on a fleet that holds
//! 36. Exactly 36 are admitted — every server full to its capacity, none above — and exactly 6
//! refused, each with every server's reason. Every admitted tenant then connects to the server
//! it was placed on and meets its SLO (memory backend, `ullstack bench --registry`), while
//! beside them on each server a best-effort tenant that reserved nothing, at queue depth 32,
//! misses that bound: the control run, at the same moment and under the same machine load,
//! shows the bound tells the tenants the scheduler protects from one it does not. One tenant
//! connects through the client library (`Client::connect_via_registry`) and NBD finds its URI
//! with `place --lookup` (checked with `nbdinfo`). One server is killed with SIGKILL: within
//! TTL + 1 s it is gone from the registry (while the two that refresh their leases are still
//! live) and no longer named by placement; after 5 releases, a newcomer takes one free place
//! and `place --rebalance` moves exactly 4 of the dead server's 12 tenants and names the
//! other 8.
//!
//! Sizes: each server's profile sustains 2,400 tokens/s at a 20 ms p95 (read-only reads cost one
//! token), each tenant reserves 200 IOPS of 4 KiB reads at 20 ms, so a server holds 12 (the
//! test recomputes this with the servers' own admission rule) and the fleet 36. (20 ms, not
//! tighter: the tenants' clients, 3 servers and etcd share the test machine's cores with
//! whatever else runs, and a client stalled by the OS scheduler reports its stall as latency,
//! measured from each request's scheduled time. A run on a 2-core VM at load average 10 saw a
//! client's send lag reach 67 ms; at 5 ms that failed the test for a reason that is not the
//! server's.)

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TEST: &str = "fleet";
const TTL_S: u64 = 2;
const SECRET: &str = "fleet-secret-0123";
/// Concurrent placing clients, and tenants each places.
const CLIENTS: usize = 6;
const PER_CLIENT: usize = 7;
/// A lease expires at most this long after SIGKILL: the TTL (the last refresh was at most
/// TTL/3 before the kill, so usually less), plus etcd's periodic sweep for expired leases and
/// this test's polling; 1 s covers both with room.
const EXPIRY_SLACK: Duration = Duration::from_secs(1);

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
    (0..CLIENTS)
        .flat_map(|c| (0..PER_CLIENT).map(move |i| format!("c{c}-{i}")))
        .collect()
}

fn server_config(native_port: u16, nbd_port: u16) -> String {
    let mut s = format!(
        "[listen]\nnative = \"127.0.0.1:{native_port}\"\nnbd = \"127.0.0.1:{nbd_port}\"\n\n\
         [qos]\nscheduler = \"on\"\n\
         [qos.profile]\nname = \"fleet-test\"\nwrite_cost_mtok = 10000\nread_only_read_cost_mtok = 1000\n\
         [[qos.profile.points]]\np95_read_latency_ns = 20000000\ntokens_per_sec = 2400\nread_only_tokens_per_sec = 2400\n\n\
         [[volume]]\nname = \"fast\"\nbackend = {{ kind = \"memory\", size = \"64MiB\" }}\n\n\
         [[tenant]]\nname = \"reader\"\nopen = true\nclass = \"be\"\nacl = [{{ volume = \"fast\", access = \"read\" }}]\n\n\
         [[export]]\nname = \"fast-nbd\"\nvolume = \"fast\"\ntenant = \"reader\"\n"
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

/// The p95 every fleet tenant asks for, in `spec` and checked after the benches.
const SLO_P95_NS: u64 = 20_000_000;

fn spec(name: &str) -> String {
    format!(
        "name={name},secret={SECRET},volume=fast,class=lc,iops=200,p95={}ms,read=100,size=4k",
        SLO_P95_NS / 1_000_000
    )
}

/// The control tenant of the QoS check: best-effort (no reservation), open, closed loop at
/// queue depth 32 of 4 KiB reads.
const CONTROL_BE: &str = "name=reader,volume=fast,class=be,qd=32,read=100,size=4k";

/// `ullstack bench` of `tenants` for 2 s after 200 ms of warm-up, on its own thread, reaching
/// its server by `reach` (`--registry URL` or `--server ADDR`) and writing its report to
/// `json`.
fn bench_on_thread(
    reach: [&str; 2],
    tenants: &[String],
    json: &Path,
) -> std::thread::JoinHandle<(bool, String)> {
    let mut cmd = ullstack();
    cmd.arg("bench")
        .args(reach)
        .args([
            "--duration",
            "2s",
            "--warmup",
            "200ms",
            "--no-progress",
            "--json",
        ])
        .arg(json);
    for t in tenants {
        cmd.args(["--tenant", t]);
    }
    std::thread::spawn(move || testkit::run(&mut cmd).expect("bench runs"))
}

/// A bench report's tenant was admitted and saw no errors.
fn served_without_errors(server: &str, t: &serde_json::Value) {
    assert!(t["refused"].is_null(), "{server}: {t}");
    assert_eq!(
        t["errors"].as_object().map(|e| e.len()),
        Some(0),
        "{server}: {t}"
    );
}

/// A bench report's tenant's read p95.
fn read_p95_ns(t: &serde_json::Value) -> u64 {
    t["reads"]["latency_ns"]["p95"]
        .as_u64()
        .unwrap_or_else(|| panic!("no read p95: {t}"))
}

/// `refused NAME: why` lines: (name, why).
fn refusals(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (name, why) = l.strip_prefix("refused ")?.split_once(": ")?;
            Some((name.to_string(), why.to_string()))
        })
        .collect()
}

/// How many tenants of `spec(_)` fit on an empty server with `profile`: the servers' own
/// admission rule, asked one tenant at a time.
fn capacity(profile: &qos::DeviceProfile) -> usize {
    let tenant = |i: usize| fleet::PlacedTenant {
        name: format!("t{i}"),
        volume: "fast".into(),
        spec: qos::TenantSpec::LatencyCritical(qos::LcSlo {
            p95_read_latency_ns: 20_000_000,
            iops: 200,
            read_pct: 100,
            request_bytes: 4096,
        }),
    };
    let mut placed = Vec::new();
    while fleet::model::fit(profile, &placed, &tenant(placed.len()).spec).is_ok() {
        placed.push(tenant(placed.len()));
        assert!(placed.len() < 1000, "never full");
    }
    placed.len()
}

/// `placed NAME on ID (…; X ms, N attempts)` lines: (name, server id, ms, attempts).
fn placements(text: &str) -> Vec<(String, String, f64, u32)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("placed ")?;
            let mut w = rest.split_whitespace();
            let name = w.next()?.to_string();
            w.next()?; // "on"
            let id = w.next()?.to_string();
            let timing = l.split("; ").nth(1)?;
            let ms = timing.split(" ms").next()?.parse().ok()?;
            let attempts = timing.split(", ").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((name, id, ms, attempts))
        })
        .collect()
}

#[test]
fn more_tenants_than_fit_race_for_the_last_places_and_a_dead_server_is_rebalanced() {
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
    let mut servers: Vec<(String, Proc)> = Vec::new();
    for i in 0..3 {
        let cfg = d.join(format!("s{i}.toml"));
        std::fs::write(&cfg, server_config(free_port(), free_port())).unwrap();
        let p = spawn(
            ullstack()
                .args(["serve", "--config"])
                .arg(&cfg)
                .args(["--registry", &url, "--registry-id", &format!("s{i}")])
                .args(["--registry-ttl", &TTL_S.to_string()]),
            &d.join(format!("s{i}.log")),
        );
        servers.push((format!("s{i}"), p));
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
    let mut etcd = fleet::Etcd::connect(&url).unwrap();
    let live = fleet::place::servers(&mut etcd).unwrap();
    let cap = capacity(&live["s0"].profile);
    let demand = CLIENTS * PER_CLIENT;
    assert!(
        demand > 3 * cap,
        "the test needs more tenants ({demand}) than the fleet holds ({})",
        3 * cap
    );

    // 42 tenants from 6 concurrent clients (7 each), for 36 places.
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut cmd = ullstack();
                cmd.args(["place", "--registry", &url]);
                for i in 0..PER_CLIENT {
                    cmd.args(["--tenant", &spec(&format!("c{c}-{i}"))]);
                }
                let (ok, text) = testkit::run(&mut cmd).expect("ullstack place runs");
                (ok, text)
            })
        })
        .collect();
    let (mut placed, mut refused) = (Vec::new(), Vec::new());
    for c in clients {
        let (ok, text) = c.join().expect("client thread");
        let (p, r) = (placements(&text), refusals(&text));
        assert_eq!(
            p.len() + r.len(),
            PER_CLIENT,
            "one line per tenant:\n{text}"
        );
        // A client with a refusal says so in its exit status and its last line.
        assert_eq!(ok, r.is_empty(), "{text}");
        if !r.is_empty() {
            assert!(
                text.contains(&format!(
                    "{} of {PER_CLIENT} tenants could not be placed",
                    r.len()
                )),
                "{text}"
            );
        }
        placed.extend(p);
        refused.extend(r);
    }
    assert_eq!(
        placed.len(),
        3 * cap,
        "exactly the fleet's capacity is admitted: {placed:?}"
    );
    assert_eq!(refused.len(), demand - 3 * cap, "{refused:?}");
    for (name, why) in &refused {
        assert!(why.contains("fits on no server"), "{name}: {why}");
        // Full: the reservations leave too little headroom for the LC tenants' surge
        // (qos admission/headroom.rs, on by default).
        for id in ["s0", "s1", "s2"] {
            assert!(
                why.contains(&format!(
                    "{id}: reservation of 200 tokens/s leaves too little headroom"
                )),
                "{name}'s refusal names {id} full: {why}"
            );
        }
    }
    let mut names: Vec<&String> = placed
        .iter()
        .map(|p| &p.0)
        .chain(refused.iter().map(|r| &r.0))
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), demand, "every tenant answered once");
    let mut ms: Vec<f64> = placed.iter().map(|p| p.2).collect();
    ms.sort_by(f64::total_cmp);
    println!(
        "placement + reservation, {} admitted of {demand} from {CLIENTS} concurrent clients: median {:.2} ms, max {:.2} ms; {} placements lost a compare-and-swap race and retried",
        placed.len(),
        ms[ms.len() / 2],
        ms[ms.len() - 1],
        placed.iter().filter(|p| p.3 > 1).count()
    );

    // Every server is full to exactly its capacity, none above, and the registry agrees with
    // the output.
    let reserved = fleet::place::reservations(&mut etcd).unwrap();
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
        assert_eq!(tenants.len(), cap, "{id} holds its capacity");
        for t in &tenants {
            assert!(
                placed.iter().any(|p| p.0 == t.name && &p.1 == id),
                "{} on {id}",
                t.name
            );
        }
    }

    // Every admitted tenant connects to its server and meets its SLO; on each server at the
    // same moment a best-effort tenant that reserved nothing (the open `reader`, queue depth
    // 32) is the control: it waits for the tokens the reservations leave, so its p95 shows
    // that this server, on this machine under this load, can miss the bound.
    let benches: Vec<_> = servers
        .iter()
        .map(|(id, _)| {
            let mine: Vec<String> = placed
                .iter()
                .filter(|p| &p.1 == id)
                .map(|p| spec(&p.0))
                .collect();
            let (json, be_json) = (
                d.join(format!("bench-{id}.json")),
                d.join(format!("bench-{id}-be.json")),
            );
            let native = live[id].native.clone().expect("own protocol announced");
            (
                id.clone(),
                mine.len(),
                // Connect by the registry: bench finds the server holding these reservations.
                bench_on_thread(["--registry", &url], &mine, &json),
                json,
                bench_on_thread(["--server", &native], &[CONTROL_BE.to_string()], &be_json),
                be_json,
            )
        })
        .collect();
    for (id, n, lc_bench, json, be_bench, be_json) in benches {
        let (ok, text) = lc_bench.join().unwrap();
        assert!(ok, "bench on {id}: {text}");
        assert!(
            text.contains(&format!("bench: server {id} at")),
            "resolved elsewhere: {text}"
        );
        let v: serde_json::Value = serde_json::from_str(&read(&json)).unwrap();
        let tenants = v["tenants"].as_array().expect("tenants");
        assert_eq!(tenants.len(), n);
        let mut lc_p95_max = 0;
        for t in tenants {
            served_without_errors(&id, t);
            let p95 = read_p95_ns(t);
            // The SLO itself: a tighter bound (5 ms once) fails on a loaded CI machine
            // whose scheduler stalls the bench client (p95 5.12 ms seen in CI).
            assert!(
                p95 <= SLO_P95_NS,
                "{id}: p95 {p95} ns over the {} ms SLO: {t}",
                SLO_P95_NS / 1_000_000
            );
            lc_p95_max = lc_p95_max.max(p95);
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
        let (ok, text) = be_bench.join().unwrap();
        assert!(ok, "the control's bench on {id}: {text}");
        let v: serde_json::Value = serde_json::from_str(&read(&be_json)).unwrap();
        let be = &v["tenants"][0];
        served_without_errors(&id, be);
        let be_p95 = read_p95_ns(be);
        println!(
            "{id}: LC read p95 at most {:.2} ms; beside them the control (BE, no reservation, QD 32) {:.2} ms",
            lc_p95_max as f64 / 1e6,
            be_p95 as f64 / 1e6
        );
        assert!(
            be_p95 > SLO_P95_NS,
            "{id}: the control's p95 {be_p95} ns is within the {SLO_P95_NS} ns bound too: the bound does not tell a tenant the scheduler protects from one it does not"
        );
    }

    // The client library connects by volume name: to the server holding the reservation.
    let (who, home, _, _) = &placed[0];
    let native = live[home].native.clone().expect("own protocol announced");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let creds = client::Credentials {
            tenant: who.clone(),
            secret: SECRET.into(),
            volume: "fast".into(),
        };
        let c = client::Client::connect_via_registry(&url, &creds, None)
            .await
            .expect("connects through the registry");
        assert_eq!(c.peer().to_string(), native, "{who} placed on {home}");
        let h = c
            .register(client::latency_critical(20_000_000, 200, 100, 4096))
            .await
            .expect("its reservation admits it");
        c.write(h, 0, &[0x5a; 4096], client::WriteMode::Fua)
            .await
            .unwrap();
        assert_eq!(c.read(h, 0, 4096).await.unwrap(), vec![0x5a; 4096]);
        // A volume no server has is named.
        let nowhere = client::Credentials {
            volume: "nosuch".into(),
            ..creds
        };
        let e = client::Client::connect_via_registry(&url, &nowhere, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("no live server hosts volume `nosuch`"), "{e}");
    });

    // NBD users look the URI up; nbdinfo opens it.
    let (ok, text) = testkit::run(ullstack().args([
        "place",
        "--registry",
        &url,
        "--lookup",
        "fast",
        "--name",
        who,
    ]))
    .unwrap();
    assert!(
        ok && text.starts_with(&format!("volume fast: server {home} ")),
        "{text}"
    );
    let uri = text
        .lines()
        .find_map(|l| l.strip_prefix("nbd "))
        .unwrap_or_else(|| panic!("no nbd line: {text}"))
        .to_string();
    assert_eq!(
        uri,
        format!("nbd://{}/fast-nbd", live[home].nbd.clone().unwrap())
    );
    if let Some(nbdinfo) = testkit::tool("nbdinfo", TEST, "apt-get install libnbd-bin") {
        let (ok, size) = testkit::run(Command::new(nbdinfo).args(["--size", &uri])).unwrap();
        assert!(
            ok && size.trim() == (64u64 << 20).to_string(),
            "nbdinfo {uri}: {size}"
        );
    }

    // A reader that stops early (`| true`) ends `--list` quietly: no panic, exit 0.
    let o = Command::new("bash")
        .args([
            "-c",
            "set -o pipefail; \"$0\" place --registry \"$1\" --list | true",
        ])
        .arg(env!("CARGO_BIN_EXE_ullstack"))
        .arg(&url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && !err.contains("panicked"),
        "{:?}: {err}",
        o.status
    );

    // Kill one server without shutdown: within TTL + 1 s it is gone from the registry.
    let (dead_id, mut dead) = servers.remove(0);
    dead.0.kill().unwrap();
    let killed = Instant::now();
    let gone = testkit::wait_until(Duration::from_secs(TTL_S) + EXPIRY_SLACK, || {
        fleet::place::is_live(&mut etcd, &dead_id).is_ok_and(|l| !l)
    });
    let gone_after = killed.elapsed();
    assert!(
        gone.is_ok(),
        "{dead_id} still live {gone_after:?} after SIGKILL (TTL {TTL_S} s + {EXPIRY_SLACK:?})"
    );
    println!(
        "{dead_id} left the fleet {:.2} s after SIGKILL (TTL {TTL_S} s)",
        gone_after.as_secs_f64()
    );
    // The control: the same probe finds the servers that refresh their leases still live.
    for (id, _) in &servers {
        assert!(
            fleet::place::is_live(&mut etcd, id).is_ok_and(|l| l),
            "{id} is gone too, {gone_after:?} after {dead_id}'s SIGKILL: the lease expired under a live server"
        );
    }

    // The survivors are full: a newcomer is refused, and the dead server is not a candidate.
    let late = |name: &str| {
        testkit::run(ullstack().args(["place", "--registry", &url, "--tenant", &spec(name)]))
            .unwrap()
    };
    let (ok, text) = late("late-0");
    let r = refusals(&text);
    assert!(!ok && r.len() == 1, "{text}");
    assert!(
        r[0].1.contains("s1: ") && r[0].1.contains("s2: ") && !r[0].1.contains("s0"),
        "only live servers are named: {text}"
    );

    // Free 5 places on the survivors; a newcomer takes one (not on the dead server).
    let survivors: Vec<&String> = placed
        .iter()
        .filter(|p| p.1 != dead_id)
        .map(|p| &p.0)
        .collect();
    for name in survivors.iter().take(5) {
        let (ok, text) =
            testkit::run(ullstack().args(["place", "--registry", &url, "--release", name]))
                .unwrap();
        assert!(
            ok && text.contains(&format!("released {name} from s")),
            "{text}"
        );
    }
    let (ok, text) = late("late-1");
    assert!(ok, "{text}");
    let l = placements(&text);
    assert_eq!(l.len(), 1);
    assert_ne!(l[0].1, dead_id, "placed on the dead server: {text}");

    // Rebalancing moves exactly as many as fit (4) and names the rest.
    let dead_tenants = reserved[&dead_id].0.tenants.len();
    assert_eq!(dead_tenants, cap);
    let (ok, text) =
        testkit::run(ullstack().args(["place", "--registry", &url, "--rebalance"])).unwrap();
    assert!(ok, "{text}");
    let moved = text.lines().filter(|l| l.starts_with("moved ")).count();
    let unplaced: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("could not place "))
        .collect();
    assert_eq!((moved, unplaced.len()), (4, dead_tenants - 4), "{text}");
    assert!(
        unplaced.iter().all(|l| l.contains("fits on no server")),
        "{text}"
    );
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
        assert_eq!(tenants.len(), cap, "{id} full again");
    }
    let left = reserved
        .get(&dead_id)
        .map(|r| r.0.tenants.len())
        .unwrap_or(0);
    assert_eq!(
        left,
        unplaced.len(),
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
    // An unreachable registry: one line naming the URL and the cause, no gRPC dump.
    let o = ullstack()
        .args(["place", "--registry", &url, "--list"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("cannot reach etcd at {url}")) && err.contains("connection refused"),
        "{err}"
    );
    assert!(
        !err.contains("tonic") && !err.contains("Transport"),
        "{err}"
    );
    // `serve --registry` reaches the registry before it binds anything.
    let o = ullstack()
        .args(["serve", "--memory", "64MiB", "--listen", "127.0.0.1:0"])
        .args(["--registry", &url])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains(&format!("cannot reach etcd at {url}")),
        "{err}"
    );
    assert!(
        !err.contains("NBD on"),
        "started before checking the registry: {err}"
    );
    // A lease TTL etcd would not grant is refused by --check, from the config or the flag.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("s.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}\n[registry]\nurl = \"{url}\"\nttl_s = 0\n",
            server_config(0, 0)
        ),
    )
    .unwrap();
    for extra in [&[][..], &["--registry-ttl", "0"][..]] {
        let mut cmd = ullstack();
        cmd.args(["serve", "--check", "--config"])
            .arg(&cfg)
            .args(extra);
        if !extra.is_empty() {
            std::fs::write(
                &cfg,
                format!("{}\n[registry]\nurl = \"{url}\"\n", server_config(0, 0)),
            )
            .unwrap();
        }
        let o = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success()
                && err.contains("registry.ttl_s")
                && err.contains("= 0")
                && err.contains("expected 1..="),
            "{extra:?}: {err}"
        );
    }
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
