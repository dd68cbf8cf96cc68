//! Trace tenants (`trace=FILE`) against the in-test fake server: the trace's reads, writes and
//! sizes are sent once over all connections, open loop at the trace's pace or closed loop, and
//! a bad line is reported as the tenant's error.

mod common;

use client::bench::{self, spec::parse_tenant, BenchConfig, Progress};
use common::Mode;

fn config(addr: std::net::SocketAddr, tenant: &str) -> BenchConfig {
    BenchConfig {
        server: addr.to_string(),
        duration_ns: None,
        ios_per_tenant: None,
        warmup_ns: 0,
        threads: 2,
        seed: 1,
        tenants: parse_tenant(tenant).unwrap(),
        progress: Progress::Hidden,
        tls: None,
    }
}

/// 300 CSV records `gap_ns` apart: 2 reads of 4 KiB per write of 8 KiB.
fn trace_file(name: &str, gap_ns: u64, extra: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ullstack-bench-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = String::new();
    for i in 0..300u64 {
        let (op, len) = if i % 3 == 2 { ("W", 8192) } else { ("R", 4096) };
        s.push_str(&format!("{},{op},{},{len}\n", i * gap_ns, i * 8192));
    }
    s.push_str(extra);
    let path = dir.join(name);
    std::fs::write(&path, s).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_trace_sends_each_record_once_over_all_connections() {
    let fake = common::start(Mode::Normal).await;
    let path = trace_file("closed.csv", 1_000_000_000, "");
    let cfg = config(
        fake.addr,
        &format!(
            "name=A,secret=pw,volume=vol,qd=4,conns=2,trace={}",
            path.display()
        ),
    );
    let r = bench::run_async(&cfg).await.unwrap();
    let t = &r.tenants[0];
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    assert_eq!((t.reads.count, t.writes.count), (200, 100));
    // Records are 1 s apart: closed loop ignores that (300 s otherwise).
    assert!(r.window_s < 30.0, "window {} s", r.window_s);
    // Bytes follow the trace's sizes: 200 × 4 KiB + 100 × 8 KiB.
    let mb = t.mb_per_s * r.window_s;
    assert!((mb - 1.6384).abs() < 0.01, "{mb} MB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_trace_keeps_the_pace_scaled_by_speed() {
    let fake = common::start(Mode::Normal).await;
    // 300 records 1 ms apart: 299 ms of trace, 149.5 ms at speed 2.
    let path = trace_file("open.csv", 1_000_000, "");
    let cfg = config(
        fake.addr,
        &format!(
            "name=A,secret=pw,volume=vol,speed=2,trace={}",
            path.display()
        ),
    );
    let r = bench::run_async(&cfg).await.unwrap();
    let t = &r.tenants[0];
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    assert_eq!(t.reads.count + t.writes.count, 300);
    assert!(
        (0.149..5.0).contains(&r.window_s),
        "the run took {} s: it did not wait for the trace's times",
        r.window_s
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_errors_are_reported() {
    let fake = common::start(Mode::Normal).await;
    let path = trace_file("bad.csv", 1000, "400000,X,0,4096\n");
    let cfg = config(
        fake.addr,
        &format!("name=A,secret=pw,volume=vol,qd=2,trace={}", path.display()),
    );
    let r = bench::run_async(&cfg).await.unwrap();
    let t = &r.tenants[0];
    assert_eq!(t.reads.count + t.writes.count, 300);
    let e: Vec<_> = t.errors.keys().collect();
    assert!(
        e.len() == 1 && e[0].contains("bad.csv:301: op `X`"),
        "{e:?}"
    );

    let missing = config(
        fake.addr,
        "name=A,secret=pw,volume=vol,trace=/nonexistent/t.csv",
    );
    let e = bench::run_async(&missing).await.err().unwrap().to_string();
    assert!(e.contains("/nonexistent/t.csv"), "{e}");
    for (spec, want) in [
        ("name=A,trace=t.csv,rate=100", "exclude"),
        ("name=A,trace=t.csv,read=50", "exclude"),
        ("name=A,speed=2", "needs trace"),
        ("name=A,trace=t.csv,speed=2,qd=4", "exclude"),
        ("name=A,trace=t.csv,speed=0", "speed="),
    ] {
        let e = parse_tenant(spec).unwrap_err().to_string();
        assert!(e.contains(want), "{spec}: {e}");
    }
}
