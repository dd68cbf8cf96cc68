//! Bounded resources whatever a client does: memory held for clients that never read their
//! replies, input buffers of pipelining clients, connections per tenant, wrong secrets, and
//! an admin endpoint that idle clients cannot stall.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{memory_backend, standard_config, start, RawNative, RawNbd};
use proto::nbd::transmission::CommandType;
use proto::wire::Status;

const MIB: u64 = 1 << 20;

fn config_with_limits(limits: &str) -> String {
    let mut toml = standard_config(&memory_backend("1GiB"), "off");
    toml.push_str("\n[limits]\n");
    toml.push_str(limits);
    toml.push('\n');
    toml
}

/// Sends `count` NBD READs of `len` bytes without reading any reply (the writes go out from a
/// thread so a server that stops reading cannot hang the test).
fn flood_reads(nbd: &RawNbd, count: u32, len: u32) -> std::thread::JoinHandle<u32> {
    let mut stream = nbd.stream.try_clone().expect("clone");
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .expect("write timeout");
    std::thread::spawn(move || {
        let mut sent = 0;
        for i in 0..count {
            let mut frame = Vec::with_capacity(28);
            frame.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
            frame.extend_from_slice(&0u16.to_be_bytes());
            frame.extend_from_slice(&CommandType::Read.to_u16().to_be_bytes());
            frame.extend_from_slice(&u64::from(i + 1).to_be_bytes());
            frame.extend_from_slice(&(u64::from(i) * u64::from(len) % (512 * MIB)).to_be_bytes());
            frame.extend_from_slice(&len.to_be_bytes());
            if stream.write_all(&frame).is_err() {
                break;
            }
            sent += 1;
        }
        sent
    })
}

/// Waits (bounded) until `cond` holds; panics with `what` otherwise.
fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    if testkit::wait_until(timeout, cond).is_err() {
        panic!("timed out waiting for {what}");
    }
}

/// Reads `count` NBD read replies of `len` bytes each.
fn drain_replies(nbd: &mut RawNbd, count: u32, len: u32) {
    let mut payload = vec![0u8; len as usize];
    for _ in 0..count {
        let (err, _) = nbd.recv_head();
        assert_eq!(err, 0, "read failed");
        nbd.stream.read_exact(&mut payload).expect("payload");
    }
}

#[test]
fn a_client_that_never_reads_its_32_mib_replies_holds_at_most_its_limit() {
    let server = start(&config_with_limits(r#"max_inflight_bytes = "128MiB""#));
    let addr = server.addrs.nbd.expect("nbd");
    let mut nbd = RawNbd::connect(addr, "default").expect("connect");
    let len = 32 << 20;
    let count = 40; // 1.25 GiB of replies asked for
    let flood = flood_reads(&nbd, count, len);
    let shared = server.shared().clone();
    // The server fills the connection's allowance, then must stop reading it.
    wait_for("the limit to fill", Duration::from_secs(30), || {
        shared.memory.charged_bytes() >= 128 * MIB
    });
    let reads = || shared.tenant_metrics[0].reads.get();
    let bound = 128 * MIB + 32 * MIB + 2 * MIB;
    // Observe for a while: the charge stays bounded and, once the allowance is served, no
    // more requests are taken while the client reads nothing.
    let observe = |ms: u64| {
        let until = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < until {
            let peak = shared.memory.peak_bytes();
            assert!(
                peak <= bound,
                "held {peak} bytes for one connection with a 128 MiB limit"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    observe(300);
    let before = reads();
    observe(300);
    assert!(
        reads() <= 6 && reads() == before,
        "{} of {count} 32 MiB reads were served to a client that read no reply",
        reads()
    );
    // Once the client reads, everything is served and the charge returns to (almost) zero.
    let sent = flood.join().expect("flood");
    assert_eq!(sent, count, "40 headers fit in the socket buffers");
    drain_replies(&mut nbd, count, len);
    wait_for("the charge to drop", Duration::from_secs(10), || {
        shared.memory.charged_bytes() < MIB
    });
    assert!(shared.memory.peak_bytes() <= 162 * MIB);
    nbd.disconnect();
    server.shutdown();
}

#[test]
fn error_replies_count_against_the_limit() {
    // 1 MiB per connection; every request is out of range and answered with a 16-byte error.
    let server = start(&config_with_limits(
        r#"max_request_bytes = "1MiB"
max_inflight_bytes = "1MiB""#,
    ));
    let addr = server.addrs.nbd.expect("nbd");
    let nbd = RawNbd::connect(addr, "default").expect("connect");
    let mut stream = nbd.stream.try_clone().expect("clone");
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut frame = Vec::new();
    for i in 0..1_000u64 {
        frame.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
        frame.extend_from_slice(&0u16.to_be_bytes());
        frame.extend_from_slice(&CommandType::Read.to_u16().to_be_bytes());
        frame.extend_from_slice(&i.to_be_bytes());
        frame.extend_from_slice(&(2u64 << 30).to_be_bytes());
        frame.extend_from_slice(&4096u32.to_be_bytes());
    }
    // 500 K bad requests (14 MB); the client never reads the 8 MB of error replies.
    let mut sent = 0;
    for _ in 0..500 {
        if stream.write_all(&frame).is_err() {
            break;
        }
        sent += 1000;
    }
    let shared = server.shared().clone();
    let errors = || shared.tenant_metrics[0].errors.get();
    wait_for("errors to be answered", Duration::from_secs(20), || {
        errors() >= 100_000
    });
    let peak = shared.memory.peak_bytes();
    assert!(
        peak <= MIB + 512 * 1024,
        "{peak} bytes held for error replies nobody reads (limit 1 MiB); {sent} requests sent, {} answered",
        errors()
    );
    assert!(
        errors() < sent,
        "the server kept reading: {} of {sent} answered",
        errors()
    );
    drop(stream);
    drop(nbd);
    server.shutdown();
}

/// Three connections of one tenant, each allowed 64 MiB, ask for 384 MiB of replies: the
/// tenant's memory budget (288 MiB shared by the config's three tenants: 96 MiB) pauses them
/// all, and each is served in the end as replies drain.
#[test]
fn a_tenants_memory_budget_pauses_its_connections_until_replies_drain() {
    let mut toml = config_with_limits(
        r#"max_inflight_bytes = "64MiB"
max_memory_bytes = "288MiB""#,
    );
    toml = toml.replace("workers = 2", "workers = 1");
    let server = start(&toml);
    let addr = server.addrs.nbd.expect("nbd");
    let len = 32 << 20;
    let clients: Vec<RawNbd> = (0..3)
        .map(|_| RawNbd::connect(addr, "default").expect("connect"))
        .collect();
    let floods: Vec<_> = clients.iter().map(|c| flood_reads(c, 4, len)).collect();
    let shared = server.shared().clone();
    let alice = shared.tenants.by_name("alice").expect("alice").id;
    assert_eq!(shared.memory.tenant_budget_bytes(), 96 * MIB);
    wait_for("the tenant's budget", Duration::from_secs(30), || {
        shared.memory.tenant_charged_bytes(alice) >= 96 * MIB
    });
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let peak = shared.memory.peak_bytes();
    assert!(
        peak <= 96 * MIB + 32 * MIB + 2 * MIB,
        "peak {peak} bytes with a 96 MiB tenant budget"
    );
    for f in floods {
        assert_eq!(f.join().expect("flood"), 4);
    }
    // Every client is served in the end: reading replies frees memory for the paused ones.
    // The clients read at once, as independent clients do: one reading its replies in turn
    // could wait on requests the server has not read yet, while memory is held by replies
    // queued for the others.
    let readers: Vec<_> = clients
        .into_iter()
        .map(|mut c| std::thread::spawn(move || drain_replies(&mut c, 4, len)))
        .collect();
    for r in readers {
        r.join().expect("every client gets its four replies");
    }
    assert!(shared.memory.peak_bytes() <= 96 * MIB + 32 * MIB + 2 * MIB);
    server.shutdown();
}

#[test]
fn pipelined_small_writes_cost_linear_input_copying() {
    let server = start(&standard_config(&memory_backend("256MiB"), "off"));
    let addr = server.addrs.nbd.expect("nbd");
    let nbd = RawNbd::connect(addr, "default").expect("connect");
    let mut tx = nbd.stream.try_clone().expect("clone");
    let mut rx = nbd.stream;
    let count: u64 = 100_000;
    let writer = std::thread::spawn(move || {
        let data = [0x5au8; 1024];
        let mut batch = Vec::with_capacity(1000 * 1052);
        for i in 0..count {
            batch.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
            batch.extend_from_slice(&0u16.to_be_bytes());
            batch.extend_from_slice(&CommandType::Write.to_u16().to_be_bytes());
            batch.extend_from_slice(&i.to_be_bytes());
            batch.extend_from_slice(&((i % 200_000) * 1024).to_be_bytes());
            batch.extend_from_slice(&1024u32.to_be_bytes());
            batch.extend_from_slice(&data);
            if batch.len() >= 1000 * 1052 {
                tx.write_all(&batch).expect("send writes");
                batch.clear();
            }
        }
        tx.write_all(&batch).expect("send writes");
    });
    let mut head = [0u8; 16];
    for _ in 0..count {
        rx.read_exact(&mut head).expect("write reply");
        assert_eq!(&head[4..8], &[0, 0, 0, 0], "write failed");
    }
    writer.join().expect("writer");
    let m = &server.shared().metrics;
    let (mut read, mut moved) = (0, 0);
    for w in 0..2 {
        read += m.worker(w).input_read_bytes.get();
        moved += m.worker(w).input_moved_bytes.get();
    }
    assert!(read >= count * 1052, "{read} bytes read");
    assert!(
        moved <= read,
        "input compaction moved {moved} bytes for {read} received (must be linear)"
    );
    server.shutdown();
}

#[test]
fn one_tenant_cannot_take_every_connection() {
    let server = start(&config_with_limits("max_connections_per_tenant = 2"));
    let native = server.addrs.native.expect("native");
    let nbd_addr = server.addrs.nbd.expect("nbd");
    let mut a1 = RawNative::connect(native);
    assert_eq!(a1.hello("alice", "alice-secret", "vol").status, Status::Ok);
    let a2 = RawNbd::connect(nbd_addr, "default").expect("second alice connection");
    let mut a3 = RawNative::connect(native);
    assert_eq!(
        a3.hello("alice", "alice-secret", "vol").status,
        Status::Busy,
        "a third connection of alice"
    );
    let refused = RawNbd::connect(nbd_addr, "default");
    assert!(refused.is_err(), "NBD GO for a full tenant is refused");
    let mut other = RawNative::connect(native);
    assert_eq!(
        other.hello("reader", "reader-secret", "vol").status,
        Status::Ok,
        "other tenants are not locked out"
    );
    a2.disconnect();
    wait_for("alice's slot to free", Duration::from_secs(10), || {
        let mut c = RawNative::connect(native);
        c.hello("alice", "alice-secret", "vol").status == Status::Ok
    });
    drop(a1);
    server.shutdown();
}

#[test]
fn wrong_secrets_are_throttled_per_address() {
    let server = start(&standard_config(&memory_backend("16MiB"), "off"));
    let native = server.addrs.native.expect("native");
    let mut c = RawNative::connect(native);
    let attempts = 300;
    for _ in 0..attempts {
        assert_eq!(
            c.hello("alice", "wrong-secret", "vol").status,
            Status::AuthFailed
        );
    }
    let throttled = server.shared().metrics.auth_throttled_total();
    assert!(
        throttled >= attempts - 20,
        "only {throttled} of {attempts} wrong HELLOs were refused unchecked"
    );
    // Fail until the block is long enough to test within (≥ 50 ms; 80 ms after 7 failures).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            Instant::now() < deadline,
            "the back-off never reached 50 ms"
        );
        let reply = c.hello("alice", "wrong-secret", "vol");
        let text = String::from_utf8_lossy(&reply.payload).to_string();
        let wait_ms: u64 = text
            .rsplit("retry in ")
            .next()
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        if wait_ms >= 50 {
            break;
        }
    }
    // While backing off, even the right secret is not looked at …
    let mut c2 = RawNative::connect(native);
    let reply = c2.hello("alice", "alice-secret", "vol");
    assert_eq!(reply.status, Status::AuthFailed);
    assert!(
        String::from_utf8_lossy(&reply.payload).contains("retry in"),
        "the refusal says when to retry"
    );
    // … and after the back-off it is accepted.
    wait_for("the back-off to end", Duration::from_secs(15), || {
        let mut c = RawNative::connect(native);
        c.hello("alice", "alice-secret", "vol").status == Status::Ok
    });
    server.shutdown();
}

/// Whether the server still holds `c` without having answered or closed it: a read finds
/// nothing yet, neither a reply nor the end of the stream.
fn still_held(c: &TcpStream) -> bool {
    c.set_nonblocking(true).expect("nonblocking");
    let (mut byte, mut reader) = ([0u8; 1], c);
    let held =
        matches!(reader.read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    c.set_nonblocking(false).expect("blocking");
    held
}

#[test]
fn idle_admin_clients_do_not_stall_metrics() {
    let server = start(&standard_config(&memory_backend("16MiB"), "off"));
    let admin = server.addrs.admin.expect("admin");
    // Three clients that connect and say nothing (each used to hold the endpoint for its
    // whole read deadline, one after another).
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(admin).expect("idle admin client"))
        .collect();
    let text = common::scrape(admin);
    assert!(text.contains("ullstack_memory_limit_bytes"), "{text}");
    // Answered while the server still holds all three: the scrape did not wait for them (an
    // endpoint that answered one client at a time could answer it only after giving up on
    // each idle client at its deadline).
    for (i, c) in idle.iter().enumerate() {
        assert!(
            still_held(c),
            "idle client {i} was let go before the scrape was answered"
        );
    }
    // The control: the same probe sees the server let them go at their deadline.
    let deadline = Duration::from_millis(server::metrics::ADMIN_READ_TIMEOUT_MS);
    wait_for("the idle clients' deadline", 5 * deadline, || {
        idle.iter().all(|c| !still_held(c))
    });
    drop(idle);
    server.shutdown();
}

#[test]
fn an_oversize_nbd_write_is_refused_and_its_payload_skipped() {
    let server = start(&config_with_limits(
        r#"max_request_bytes = "1MiB"
max_inflight_bytes = "1MiB""#,
    ));
    let addr = server.addrs.nbd.expect("nbd");
    let mut nbd = RawNbd::connect(addr, "default").expect("connect");
    assert_eq!(nbd.write(0, &[1u8; 4096], false), 0);
    // 2 MiB of payload against a 1 MiB maximum: EINVAL, nothing written, connection kept.
    let err = nbd.write(0, &vec![9u8; 2 << 20], false);
    assert_eq!(err, proto::nbd::Errno::Inval.to_u32());
    assert_eq!(
        nbd.read(0, 4096),
        Ok(vec![1u8; 4096]),
        "the payload was not applied"
    );
    assert_eq!(nbd.flush(), 0, "the payload was not parsed as requests");
    // An oversize READ: EINVAL too, and the connection goes on.
    assert_eq!(nbd.read(0, 2 << 20), Err(proto::nbd::Errno::Inval.to_u32()));
    assert_eq!(nbd.read(0, 4096), Ok(vec![1u8; 4096]));
    assert!(
        server.shared().memory.peak_bytes() < 3 * MIB,
        "the payload was never buffered"
    );
    nbd.disconnect();
    server.shutdown();
}

#[test]
fn range_operations_are_priced_by_their_range() {
    let server = start(&standard_config(&memory_backend("1GiB"), "on"));
    let addr = server.addrs.nbd.expect("nbd");
    let mut nbd = RawNbd::connect(addr, "default").expect("connect");
    let shared = server.shared().clone();
    let spent = || {
        shared.refresh_token_metrics();
        shared.tenant_metrics[0].tokens_spent_mtok.get()
    };
    assert_eq!(nbd.trim(0, 4096), 0);
    let small = spent();
    // 512 MiB of TRIM and 512 MiB of WRITE_ZEROES: a trim unit (1 token) per MiB each.
    assert_eq!(nbd.trim(0, 512 << 20), 0);
    assert_eq!(nbd.write_zeroes(512 << 20, 512 << 20, 0), 0);
    let big = spent() - small;
    assert!(
        big >= 1024 * 1000,
        "1 GiB of range operations cost {big} mtok (a 4 KiB TRIM cost {small})"
    );
    nbd.disconnect();
    server.shutdown();
}

#[test]
fn a_throttled_pipelining_client_does_not_make_the_worker_spin() {
    // The scheduler on (reflex-a): a best-effort tenant's 1 KiB writes cost 10 tokens each and
    // are held to ~57 K/s, so 20,000 of them take ~0.35 s, most of it waiting for tokens.
    let mut toml = standard_config(&memory_backend("256MiB"), "on");
    toml = toml.replace("workers = 2", "workers = 1");
    let server = start(&toml);
    let addr = server.addrs.nbd.expect("nbd");
    let nbd = RawNbd::connect(addr, "default").expect("connect");
    let mut tx = nbd.stream.try_clone().expect("clone");
    let mut rx = nbd.stream;
    let count: u64 = 20_000;
    let loops = || server.shared().metrics.worker(0).loops.get();
    let before = loops();
    let t0 = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut batch = Vec::new();
        for i in 0..count {
            batch.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
            batch.extend_from_slice(&0u16.to_be_bytes());
            batch.extend_from_slice(&CommandType::Write.to_u16().to_be_bytes());
            batch.extend_from_slice(&i.to_be_bytes());
            batch.extend_from_slice(&(i * 1024).to_be_bytes());
            batch.extend_from_slice(&1024u32.to_be_bytes());
            batch.extend_from_slice(&[1u8; 1024]);
        }
        tx.write_all(&batch).expect("send writes");
    });
    let mut head = [0u8; 16];
    for _ in 0..count {
        rx.read_exact(&mut head).expect("write reply");
    }
    writer.join().expect("writer");
    let took = t0.elapsed();
    let steps = loops() - before;
    // Spinning, a step takes ~1 µs: about a million steps per second, and still hundreds of
    // thousands per second on a loaded machine. Sleeping between rounds, a step per wake-up
    // (≥ 50 µs) or per batch read. A rate, not a count: on a loaded machine the run takes
    // longer and the client's writes arrive in more, smaller batches (one suite run took
    // 1.06 s and 10,284 steps: 9.7 K steps/s).
    let steps_per_s = steps as f64 / took.as_secs_f64();
    assert!(
        steps_per_s < 50_000.0,
        "{steps} loop steps ({steps_per_s:.0}/s) for {count} throttled writes in {took:?}"
    );
    server.shutdown();
}

#[test]
fn idle_connections_are_closed_and_free_their_tenant_slot() {
    let server = start(&config_with_limits(
        "idle_timeout_ms = 200\nmax_connections_per_tenant = 1",
    ));
    let native = server.addrs.native.expect("native");
    let mut idle = RawNative::connect(native);
    assert_eq!(
        idle.hello("alice", "alice-secret", "vol").status,
        Status::Ok
    );
    let mut second = RawNative::connect(native);
    assert_eq!(
        second.hello("alice", "alice-secret", "vol").status,
        Status::Busy
    );
    // The idle session is closed (bounded by the test socket's read timeout) …
    assert!(idle.closed_by_server(), "an idle connection was kept");
    // … and its tenant slot is free again.
    wait_for("alice's slot to free", Duration::from_secs(10), || {
        let mut c = RawNative::connect(native);
        c.hello("alice", "alice-secret", "vol").status == Status::Ok
    });
    server.shutdown();
}
