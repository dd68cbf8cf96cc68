//! Placement decision + reservation latency against a local etcd (issue 16's target: ≤ 5 ms
//! p99). Starts its own etcd (`etcd` on PATH) on free loopback ports with a temporary data
//! folder, announces `SERVERS` fake servers with the reflex-a profile, places `N` small LC
//! tenants one after another from one client, and prints p50 / p99 / max of `fleet::place`.
//!
//!   cargo run --release -p fleet --example place_latency -- [N=500] [SERVERS=3]

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleet::{Etcd, PlacedTenant, ServerRecord};

fn port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let n = args.first().copied().unwrap_or(500) as usize;
    let servers = args.get(1).copied().unwrap_or(3) as usize;
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = (port(), port());
    let url = format!("http://127.0.0.1:{c}");
    let peer = format!("http://127.0.0.1:{p}");
    let mut etcd_proc = Command::new("etcd")
        .args(["--name", "bench", "--data-dir"])
        .arg(dir.path().join("etcd"))
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
        .args([
            "--initial-cluster",
            &format!("bench={peer}"),
            "--log-level",
            "error",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd on PATH (apt-get install etcd-server)");
    let start = Instant::now();
    let mut etcd = loop {
        match Etcd::connect(&url).and_then(|mut e| e.list("/").map(|_| e)) {
            Ok(e) => break e,
            Err(_) if start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("etcd never answered: {e}"),
        }
    };
    let profile = qos::DeviceProfile::named("reflex-a").unwrap();
    let lease = etcd.grant_lease(600).unwrap();
    for i in 0..servers {
        let r = ServerRecord {
            id: format!("s{i}"),
            native: Some(format!("127.0.0.1:{}", 20000 + i)),
            nbd: None,
            volumes: vec!["default".into()],
            profile: profile.clone(),
            exports: Vec::new(),
            tls: false,
        };
        etcd.put_with_lease(
            &fleet::server_key(&r.id),
            serde_json::to_vec(&r).unwrap(),
            lease,
        )
        .unwrap();
    }
    let mut ms = Vec::with_capacity(n);
    for i in 0..n {
        let t = PlacedTenant {
            name: format!("t{i}"),
            volume: "default".into(),
            spec: qos::TenantSpec::LatencyCritical(qos::LcSlo {
                p95_read_latency_ns: 2_000_000,
                iops: 100,
                read_pct: 90,
                request_bytes: 4096,
            }),
        };
        let t0 = Instant::now();
        fleet::place(&mut etcd, &t, &[]).expect("placed");
        ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    let q = |f: f64| ms[((ms.len() as f64 * f) as usize).min(ms.len() - 1)];
    println!(
        "place + reserve, {n} tenants on {servers} servers, one client: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        q(0.5),
        q(0.99),
        ms[ms.len() - 1]
    );
    let _ = etcd_proc.kill();
    let _ = etcd_proc.wait();
}
