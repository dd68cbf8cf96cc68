//! Structured replies and block status end to end: a raw client speaking the chunks on the
//! protocol level, `nbdinfo --map` on memory and file exports with holes, and `nbdcopy`'s
//! sparse copy of such an export.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::process::Command;

use common::*;
use proto::nbd::transmission::{self as tx, ChunkHeader, CommandType, Extent};
use proto::nbd::{self, STATE_HOLE, STATE_ZERO};

const MIB: u64 = 1 << 20;
/// Where the tests write: 64 KiB at 1 MiB and 4 KiB at 5 MiB of an 8 MiB volume.
const WRITES: [(u64, usize); 2] = [(MIB, 64 * 1024), (5 * MIB, 4096)];

fn config(backend: &str) -> String {
    standard_config(backend, "on")
}

/// Writes [`WRITES`] (pattern data) over a plain connection.
fn write_pattern(addr: SocketAddr) {
    let mut c = RawNbd::connect(addr, "default").expect("connect");
    for (i, (offset, len)) in WRITES.iter().enumerate() {
        let data = pattern(*offset, *len, i as u8 + 1);
        assert_eq!(c.write(*offset, &data, false), 0, "write at {offset}");
    }
    c.disconnect();
}

/// A client that negotiates structured replies and (optionally) `base:allocation`.
struct Chunked {
    s: TcpStream,
    cookie: u64,
}

impl Chunked {
    /// Connects through `proto::nbd::client`: structured replies, and `base:allocation` when
    /// `meta` (the server must select it, with its fixed id).
    fn connect(addr: SocketAddr, meta: bool) -> Chunked {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
        let options = nbd::client::ClientOptions {
            export: "default".into(),
            structured_replies: true,
            base_allocation: meta,
        };
        let c = nbd::client::handshake(&mut s, options).expect("handshake");
        assert!(c.structured_replies, "{c:?}");
        let want = meta.then_some(nbd::META_BASE_ALLOCATION_ID);
        assert_eq!(c.base_allocation_id, want, "{c:?}");
        Chunked { s, cookie: 0 }
    }

    fn send(&mut self, command: CommandType, flags: u16, offset: u64, len: u32) -> u64 {
        self.cookie += 1;
        let header = tx::RequestHeader {
            flags,
            command,
            cookie: self.cookie,
            offset_bytes: offset,
            length_bytes: len,
        };
        self.s.write_all(&header.encode()).expect("request");
        self.cookie
    }

    /// One chunk: header and payload.
    fn chunk(&mut self) -> (ChunkHeader, Vec<u8>) {
        let mut head = [0u8; tx::STRUCTURED_REPLY_HEADER_BYTES];
        self.s.read_exact(&mut head).expect("chunk header");
        let h = ChunkHeader::decode(&head).expect("structured reply magic");
        let mut body = vec![0u8; h.length_bytes as usize];
        self.s.read_exact(&mut body).expect("chunk payload");
        (h, body)
    }

    fn block_status(&mut self, flags: u16, offset: u64, len: u32) -> Result<Vec<Extent>, u32> {
        let cookie = self.send(CommandType::BlockStatus, flags, offset, len);
        let (h, body) = self.chunk();
        assert_eq!(h.cookie, cookie);
        assert!(h.done(), "one context: one chunk, the last");
        if h.reply_type == tx::REPLY_TYPE_ERROR {
            return Err(u32::from_be_bytes(body[..4].try_into().expect("errno")));
        }
        assert_eq!(h.reply_type, tx::REPLY_TYPE_BLOCK_STATUS);
        let (id, extents) = tx::decode_block_status(&body).expect("block status payload");
        assert_eq!(id, nbd::META_BASE_ALLOCATION_ID);
        Ok(extents)
    }
}

fn hole(len: u64) -> Extent {
    Extent {
        length_bytes: len as u32,
        flags: STATE_HOLE | STATE_ZERO,
    }
}

fn data(len: u64) -> Extent {
    Extent {
        length_bytes: len as u32,
        flags: 0,
    }
}

#[test]
fn raw_client_gets_block_status_and_chunked_reads_from_a_memory_export() {
    let server = start(&config(&memory_backend("8MiB")));
    let addr = server.addrs.nbd.expect("nbd");
    write_pattern(addr);
    let mut c = Chunked::connect(addr, true);

    // The whole volume: memory chunks are 64 KiB, so the 4 KiB write shows as 64 KiB of data.
    let all = c
        .block_status(0, 0, (8 * MIB) as u32)
        .expect("block status");
    let chunk = 64 * 1024;
    assert_eq!(
        all,
        [
            hole(MIB),
            data(chunk),
            hole(4 * MIB - chunk),
            data(chunk),
            hole(3 * MIB - chunk),
        ]
    );
    // An unaligned window inside the first hole and the data: cut exactly at its end.
    let window = c.block_status(0, MIB - 1000, 3000).expect("window");
    assert_eq!(window, [hole(1000), data(2000)]);
    // REQ_ONE: exactly one extent.
    let one = c
        .block_status(tx::CMD_FLAG_REQ_ONE, 0, (8 * MIB) as u32)
        .expect("one");
    assert_eq!(one, [hole(MIB)]);
    // Past the end and zero length: EINVAL in an error chunk; the connection goes on.
    assert_eq!(c.block_status(0, 8 * MIB - 512, 1024), Err(22));
    assert_eq!(c.block_status(0, 0, 0), Err(22));

    // A READ is one OFFSET_DATA chunk with the data.
    let (offset, len) = WRITES[0];
    let cookie = c.send(CommandType::Read, 0, offset, len as u32);
    let (h, body) = c.chunk();
    assert_eq!(
        (h.cookie, h.reply_type, h.done()),
        (cookie, tx::REPLY_TYPE_OFFSET_DATA, true)
    );
    assert_eq!(&body[..8], &offset.to_be_bytes());
    assert!(
        body[8..] == pattern(offset, len, 1)[..],
        "read data differs"
    );
    // A READ past the end: an ERROR chunk (EINVAL).
    let cookie = c.send(CommandType::Read, 0, 8 * MIB, 512);
    let (h, body) = c.chunk();
    assert_eq!((h.cookie, h.reply_type), (cookie, tx::REPLY_TYPE_ERROR));
    assert_eq!(&body[..4], &22u32.to_be_bytes());
}

#[test]
fn block_status_without_a_selected_context_is_einval() {
    let server = start(&config(&memory_backend("8MiB")));
    let mut c = Chunked::connect(server.addrs.nbd.expect("nbd"), false);
    assert_eq!(c.block_status(0, 0, 4096), Err(22));
}

/// `nbdinfo --map --json`: (offset, length, type) per extent.
fn nbdinfo_map(nbdinfo: &str, uri: &str) -> Vec<(u64, u64, u64)> {
    let (ok, text) = run(Command::new(nbdinfo).args(["--map", "--json", uri]));
    assert!(ok, "nbdinfo --map failed: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("nbdinfo --map JSON");
    v.as_array()
        .expect("a list of extents")
        .iter()
        .map(|e| {
            let f = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k} in {e}"));
            (f("offset"), f("length"), f("type"))
        })
        .collect()
}

/// Checks a map: contiguous from 0 to `size`, every written byte in a data extent, and the
/// unwritten `holes` in hole extents.
fn check_map(map: &[(u64, u64, u64)], size: u64, holes: &[(u64, u64)]) {
    let mut at = 0;
    for &(offset, length, _) in map {
        assert_eq!(offset, at, "extents not contiguous: {map:?}");
        at += length;
    }
    assert_eq!(at, size, "map does not cover the export: {map:?}");
    let kind_at = |pos: u64| {
        map.iter()
            .find(|(o, l, _)| pos >= *o && pos < o + l)
            .map(|e| e.2)
            .expect("covered")
    };
    for (offset, len) in WRITES {
        for pos in [offset, offset + len as u64 - 1] {
            assert_eq!(
                kind_at(pos) & 1,
                0,
                "written byte {pos} reported as a hole: {map:?}"
            );
        }
    }
    for &(offset, len) in holes {
        for pos in [offset, offset + len / 2, offset + len - 1] {
            assert_eq!(kind_at(pos), 3, "unwritten byte {pos} not a hole: {map:?}");
        }
    }
}

/// Writes [`WRITES`], maps the export with nbdinfo and checks the map; returns it (`None`:
/// nbdinfo missing, test skipped).
fn nbdinfo_map_case(backend: &str, test: &str) -> Option<Vec<(u64, u64, u64)>> {
    let nbdinfo = tool("nbdinfo", test)?;
    let server = start(&config(backend));
    let addr = server.addrs.nbd.expect("nbd");
    write_pattern(addr);
    let map = nbdinfo_map(&nbdinfo, &format!("nbd://{addr}/default"));
    check_map(
        &map,
        8 * MIB,
        &[(0, MIB), (2 * MIB, 2 * MIB), (6 * MIB, 2 * MIB)],
    );
    Some(map)
}

#[test]
fn nbdinfo_map_shows_holes_and_data_memory() {
    let test = "nbdinfo_map_shows_holes_and_data_memory";
    let Some(map) = nbdinfo_map_case(&memory_backend("8MiB"), test) else {
        return;
    };
    // Memory reports at its 64 KiB chunk granularity: the map is exact.
    let k = 64 * 1024;
    assert_eq!(
        map,
        [
            (0, MIB, 3),
            (MIB, k, 0),
            (MIB + k, 4 * MIB - k, 3),
            (5 * MIB, k, 0),
            (5 * MIB + k, 3 * MIB - k, 3)
        ]
    );
}

#[test]
fn nbdinfo_map_shows_holes_and_data_file() {
    let file = TempFile::new("map");
    let backend = file_backend(&file.0, "8MiB");
    nbdinfo_map_case(&backend, "nbdinfo_map_shows_holes_and_data_file");
}

#[test]
fn nbdcopy_sparse_copy_of_an_export_with_holes_is_identical_and_sparse() {
    let test = "nbdcopy_sparse_copy_of_an_export_with_holes_is_identical_and_sparse";
    let Some(nbdcopy) = tool("nbdcopy", test) else {
        return;
    };
    let server = start(&config(&memory_backend("8MiB")));
    let addr = server.addrs.nbd.expect("nbd");
    write_pattern(addr);
    let out = TempFile::new("nbdcopy-out");
    let (ok, text) = run(Command::new(&nbdcopy).args([
        &format!("nbd://{addr}/default"),
        out.0.to_str().expect("utf-8 path"),
    ]));
    assert!(ok, "nbdcopy failed: {text}");
    let copy = std::fs::read(&out.0).expect("read the copy");
    let mut want = vec![0u8; (8 * MIB) as usize];
    for (i, (offset, len)) in WRITES.iter().enumerate() {
        want[*offset as usize..*offset as usize + len].copy_from_slice(&pattern(
            *offset,
            *len,
            i as u8 + 1,
        ));
    }
    assert_eq!(copy.len(), want.len());
    assert!(copy == want, "the copy differs from the export");
    // Holes were skipped, not written as zeros: far less than the 8 MiB is allocated.
    let allocated = std::fs::metadata(&out.0).expect("stat").blocks() * 512;
    assert!(
        allocated <= 2 * MIB,
        "copy allocates {allocated} bytes of 8 MiB: not sparse"
    );
}

/// Oversize requests on a session with structured replies: a READ gets an `ERROR` chunk
/// (EINVAL), a WRITE a simple reply (writes never answer in chunks) and its payload is skipped
/// unparsed; the connection goes on either way.
#[test]
fn oversize_requests_get_the_reply_form_of_their_command() {
    let mut toml = config(&memory_backend("8MiB"));
    toml.push_str("\n[limits]\nmax_request_bytes = \"1MiB\"\nmax_inflight_bytes = \"1MiB\"\n");
    let server = start(&toml);
    let mut c = Chunked::connect(server.addrs.nbd.expect("nbd"), false);

    let cookie = c.send(CommandType::Read, 0, 0, 2 << 20);
    let (h, body) = c.chunk();
    assert_eq!(
        (h.cookie, h.reply_type, h.done()),
        (cookie, tx::REPLY_TYPE_ERROR, true)
    );
    assert_eq!(&body[..4], &nbd::Errno::Inval.to_u32().to_be_bytes());

    let cookie = c.send(CommandType::Write, 0, 0, 2 << 20);
    c.s.write_all(&vec![9u8; 2 << 20])
        .expect("oversize payload");
    let mut head = [0u8; tx::SIMPLE_REPLY_BYTES];
    c.s.read_exact(&mut head)
        .expect("simple reply to the WRITE");
    let reply = tx::SimpleReply::decode(&head).expect("simple reply magic");
    assert_eq!(
        (reply.cookie, reply.error),
        (cookie, nbd::Errno::Inval.to_u32())
    );

    // The payload was neither applied nor parsed as requests: a READ sees zeros.
    let cookie = c.send(CommandType::Read, 0, 0, 4096);
    let (h, body) = c.chunk();
    assert_eq!(
        (h.cookie, h.reply_type),
        (cookie, tx::REPLY_TYPE_OFFSET_DATA)
    );
    assert!(
        body[8..] == [0u8; 4096][..],
        "the oversize payload was written"
    );

    // A WRITE longer than the 2^25 bytes the spec says to skip: the same simple reply, then
    // the server closes (it will not read 4 GiB to stay in step).
    let cookie = c.send(CommandType::Write, 0, 0, (1 << 25) + 1);
    c.s.read_exact(&mut head)
        .expect("simple reply to the long WRITE");
    let reply = tx::SimpleReply::decode(&head).expect("simple reply magic");
    assert_eq!(
        (reply.cookie, reply.error),
        (cookie, nbd::Errno::Inval.to_u32())
    );
    let mut rest = [0u8; 1];
    assert_eq!(c.s.read(&mut rest).ok(), Some(0), "the connection was kept");
    // Every refusal is counted as the tenant's error.
    assert_eq!(server.shared().tenant_metrics[0].errors.get(), 3);
    server.shutdown();
}
