//! A trace tenant of `ullstack bench` against a real in-process server: every request carries
//! exactly its record's bytes. (A write used to send the tenant's whole buffer, 1 MiB by
//! default, whatever the record said: near the end of the volume that is out of range, and
//! elsewhere it writes megabytes the trace never asked for.)

mod common;

use client::bench::{self, BenchConfig, Progress};

/// The volume: 64 MiB of memory.
const VOLUME_BYTES: u64 = 64 << 20;

/// 400 MQSim records (ns, device, sector, sectors, type 1 = read) all within the last 64 KiB
/// of the volume once folded (their trace addresses are several volumes further up), 1 in 2
/// a write, sizes 512 B to 16 KiB: (read bytes, write bytes, the trace's text).
fn trace_near_the_end() -> (u64, u64, String) {
    let sizes_sectors = [1u64, 8, 16, 32];
    let (mut reads, mut writes) = (0, 0);
    let mut text = String::new();
    for i in 0..400u64 {
        let sectors = sizes_sectors[(i % 4) as usize];
        let len = sectors * 512;
        // The request ends within the last 64 KiB: start = end of volume - 64 KiB + a step.
        let start = VOLUME_BYTES - (64 << 10) + (i * 4096) % ((64 << 10) - len);
        let folded_from = start + (3 + i % 5) * VOLUME_BYTES;
        let read = i % 2 == 0;
        if read {
            reads += len;
        } else {
            writes += len;
        }
        text.push_str(&format!(
            "{} 0 {} {sectors} {}\n",
            i * 1000,
            folded_from / 512,
            u8::from(read)
        ));
    }
    (reads, writes, text)
}

#[test]
fn trace_writes_send_exactly_their_records_bytes() {
    let config = common::standard_config(&common::memory_backend("64MiB"), "off");
    let server = common::start(&config);
    let native = server.addrs.native.expect("native listener");
    let admin = server.addrs.admin.expect("admin listener");
    let (read_bytes, write_bytes, text) = trace_near_the_end();
    let path = std::env::temp_dir().join(format!(
        "ullstack-bench-trace-live-{}.mqsim",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("write the trace");
    for tenant in [
        // Closed loop over two connections, then open loop at 10x the trace's 1 µs pace.
        format!(
            "name=alice,secret=alice-secret,volume=vol,qd=8,conns=2,trace={}",
            path.display()
        ),
        format!(
            "name=alice,secret=alice-secret,volume=vol,speed=10,trace={}",
            path.display()
        ),
    ] {
        let before = common::scrape(admin);
        let report = bench::run(&BenchConfig {
            server: native.to_string(),
            duration_ns: None,
            ios_per_tenant: None,
            warmup_ns: 0,
            threads: 1,
            seed: 1,
            tenants: bench::spec::parse_tenant(&tenant).expect("tenant spec"),
            progress: Progress::Hidden,
            tls: None,
        })
        .expect("bench runs");
        let after = common::scrape(admin);
        let t = &report.tenants[0];
        assert!(t.errors.is_empty(), "{tenant}: errors {:?}", t.errors);
        assert_eq!((t.reads.count, t.writes.count), (200, 200), "{tenant}");
        let served = |op: &str| {
            let name = format!("ullstack_tenant_bytes_total{{tenant=\"alice\",op=\"{op}\"}}");
            common::metric(&after, &name) - common::metric(&before, &name)
        };
        assert_eq!(
            served("write"),
            write_bytes,
            "{tenant}: the server wrote {} B for {write_bytes} B of trace writes",
            served("write")
        );
        assert_eq!(served("read"), read_bytes, "{tenant}");
    }
    let _ = std::fs::remove_file(&path);
    server.shutdown();
}
