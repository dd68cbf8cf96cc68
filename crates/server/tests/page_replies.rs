//! Replies sent from a memory volume's pages (`server/src/buf.rs`, *Replies from a memory
//! volume's pages*): a READ's reply carries the bytes the pages held when the READ ran, even
//! when a WRITE to them completes while the reply still waits in the server's output queue.

mod common;

use std::io::Read;
use std::time::Duration;

use common::{memory_backend, metric, scrape, standard_config, start, RawNbd};
use proto::nbd::transmission::CommandType;

const MIB: u32 = 1 << 20;
/// The page the test reads and then overwrites.
const PAGE_OFFSET: u64 = 200 << 20;
/// A read across three pages (starting and ending inside a page; NBD wants 512-byte
/// multiples) after that one, overwritten too.
const SPAN_OFFSET: u64 = PAGE_OFFSET + 4096 + 1024;
const SPAN_BYTES: u32 = 2 * 4096 + 2048;

/// The largest socket buffer (bytes) this kernel lets a TCP socket grow to, from
/// `/proc/sys/net/ipv4/tcp_{r,w}mem` (third field); 8 MiB when unreadable.
fn tcp_buffer_max_bytes(which: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/tcp_{which}"))
        .ok()
        .and_then(|t| t.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(8 << 20)
}

fn reads_done(server: &server::ServerHandle) -> u64 {
    let admin = server.addrs.admin.expect("admin listener");
    metric(
        &scrape(admin),
        "ullstack_tenant_requests_total{tenant=\"alice\",op=\"read\"}",
    )
}

/// Reader A floods 1 MiB READs without reading replies (more bytes than both socket buffers
/// can hold, so the server keeps the tail queued), then READs one 4 KiB page and a range
/// across three pages; once the server has served those READs, writer B overwrites them and
/// gets its ack. A then drains: both replies must hold the old bytes in full (a reply that
/// viewed the pages in place, without copy-on-write, would send B's bytes), and fresh READs
/// see B's.
fn reply_keeps_bytes_of_read_time(socket_io: &str) {
    let mut toml = standard_config(&memory_backend("1GiB"), "off");
    toml.push_str("\n[limits]\nmax_inflight_bytes = \"512MiB\"\nmax_inflight_requests = 512\n");
    let toml = toml.replace(
        "[dataplane]\nworkers = 2",
        &format!("[dataplane]\nworkers = 2\nsocket_io = \"{socket_io}\""),
    );
    let server = start(&toml);
    let nbd = server.addrs.nbd.expect("nbd listener");
    let old = vec![0x11u8; 4 * 4096];
    let new = vec![0x22u8; 4 * 4096];
    let mut writer = RawNbd::connect(nbd, "default").expect("writer");
    assert_eq!(writer.write(PAGE_OFFSET, &old, false), 0);

    let queued_bytes =
        tcp_buffer_max_bytes("rmem") + tcp_buffer_max_bytes("wmem") + u64::from(16 * MIB);
    let floods = queued_bytes.div_ceil(u64::from(MIB)).min(200) as u32;
    let mut reader = RawNbd::connect(nbd, "default").expect("reader");
    let before = reads_done(&server);
    for i in 0..floods {
        reader.send(CommandType::Read.to_u16(), 0, u64::from(i * MIB), MIB, &[]);
    }
    let page_cookie = reader.send(CommandType::Read.to_u16(), 0, PAGE_OFFSET, 4096, &[]);
    let span_cookie = reader.send(CommandType::Read.to_u16(), 0, SPAN_OFFSET, SPAN_BYTES, &[]);
    let served = testkit::wait_until(Duration::from_secs(20), || {
        reads_done(&server) >= before + u64::from(floods) + 2
    });
    assert!(
        served.is_ok(),
        "{socket_io}: the server served {} of the {} reads",
        reads_done(&server) - before,
        floods + 2
    );

    assert_eq!(writer.write(PAGE_OFFSET, &new, false), 0, "{socket_io}");

    let mut sink = vec![0u8; MIB as usize];
    for _ in 0..floods {
        let (err, _) = reader.recv_head();
        assert_eq!(err, 0);
        reader.stream.read_exact(&mut sink).expect("flood payload");
    }
    for (cookie, len) in [(page_cookie, 4096), (span_cookie, SPAN_BYTES as usize)] {
        let (err, got_cookie) = reader.recv_head();
        assert_eq!((err, got_cookie), (0, cookie), "{socket_io}");
        let mut got = vec![0u8; len];
        reader.stream.read_exact(&mut got).expect("page payload");
        assert!(
            got == old[..len],
            "{socket_io}: a reply of {len} bytes changed after its READ ran: {} bytes are the \
             later write's",
            got.iter().filter(|&&b| b == 0x22).count()
        );
    }
    assert_eq!(reader.read(PAGE_OFFSET, 4096), Ok(new[..4096].to_vec()));
    assert_eq!(
        reader.read(SPAN_OFFSET, SPAN_BYTES),
        Ok(new[..SPAN_BYTES as usize].to_vec())
    );
}

#[test]
fn a_queued_page_reply_keeps_its_bytes_over_epoll() {
    reply_keeps_bytes_of_read_time("epoll");
}

#[test]
fn a_queued_page_reply_keeps_its_bytes_over_uring() {
    reply_keeps_bytes_of_read_time("uring");
}

/// A READ of 2 MiB (512 pages: far more parts than a small gather's 64) of distinct bytes
/// comes back whole and in order over the socket ring, which sends it in large SENDMSGs;
/// several such READs queued at once mix large payload parts with their headers.
#[test]
fn a_large_page_reply_arrives_whole_over_uring() {
    let toml = standard_config(&memory_backend("64MiB"), "off").replace(
        "[dataplane]\nworkers = 2",
        "[dataplane]\nworkers = 2\nsocket_io = \"uring\"",
    );
    let server = start(&toml);
    let nbd = server.addrs.nbd.expect("nbd listener");
    let mut client = RawNbd::connect(nbd, "default").expect("client");
    let len = 2 * MIB as usize;
    let data: Vec<u8> = (0..len as u32)
        .map(|i| (i / 4096 * 31 + i % 251) as u8)
        .collect();
    assert_eq!(client.write(MIB.into(), &data, false), 0);
    let cookies: Vec<u64> = (0..4)
        .map(|_| client.send(CommandType::Read.to_u16(), 0, MIB.into(), 2 * MIB, &[]))
        .collect();
    for cookie in cookies {
        let (err, got_cookie) = client.recv_head();
        assert_eq!((err, got_cookie), (0, cookie));
        let mut got = vec![0u8; len];
        client.stream.read_exact(&mut got).expect("payload");
        assert!(got == data, "a 2 MiB reply came back altered");
    }
}
