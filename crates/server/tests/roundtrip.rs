//! Data written through one face reads back identically through the other: own protocol (the
//! client library) ↔ NBD (our raw client and nbdcopy, a real libnbd client), on the memory and
//! the file backend.

mod common;

use std::process::Command;

use client::{Client, Credentials, TenantHandle};
use common::*;
use proto::wire::WriteMode;

const VOLUME_BYTES: u64 = 8 << 20;

fn alice() -> Credentials {
    Credentials {
        tenant: "alice".into(),
        secret: "alice-secret".into(),
        volume: "vol".into(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Blocks written by the client library: offsets and sizes from 1 KiB to 1 MiB.
const BLOCKS: [(u64, usize); 5] = [
    (0, 4096),
    (8192, 1024),
    (1 << 20, 1 << 20),
    (3 << 20, 65536),
    (VOLUME_BYTES - 4096, 4096),
];

fn native_then_nbd(server: &server::ServerHandle, seed: u8) {
    let rt = runtime();
    rt.block_on(async {
        let c = Client::connect(server.addrs.native.unwrap(), &alice())
            .await
            .expect("connect");
        // Pipelined: all writes in flight at once, replies in any order.
        let writes = BLOCKS.iter().map(|&(off, len)| {
            let c = c.clone();
            async move {
                let mode = if off == 0 {
                    WriteMode::Fua
                } else {
                    WriteMode::WriteBack
                };
                c.write(TenantHandle::DEFAULT, off, &pattern(off, len, seed), mode)
                    .await
            }
        });
        for r in futures_join(writes).await {
            r.expect("write");
        }
        c.flush(TenantHandle::DEFAULT).await.expect("flush");
    });
    let mut nbd = RawNbd::connect(server.addrs.nbd.unwrap(), "default").expect("nbd");
    assert_eq!(nbd.size_bytes, VOLUME_BYTES);
    for &(off, len) in &BLOCKS {
        let data = nbd.read(off, len as u32).expect("nbd read");
        assert!(
            data == pattern(off, len, seed),
            "NBD read of {len} B at {off} differs from the native write"
        );
    }
    nbd.disconnect();
}

fn nbd_then_native(server: &server::ServerHandle, seed: u8) {
    let mut nbd = RawNbd::connect(server.addrs.nbd.unwrap(), "default").expect("nbd");
    for &(off, len) in &BLOCKS {
        assert_eq!(
            nbd.write(off, &pattern(off, len, seed), off == 0),
            0,
            "nbd write at {off}"
        );
    }
    assert_eq!(nbd.flush(), 0);
    nbd.disconnect();
    let rt = runtime();
    rt.block_on(async {
        let c = Client::connect(server.addrs.native.unwrap(), &alice())
            .await
            .expect("connect");
        for &(off, len) in &BLOCKS {
            let data = c
                .read(TenantHandle::DEFAULT, off, len as u32)
                .await
                .expect("read");
            assert!(
                data == pattern(off, len, seed),
                "native read of {len} B at {off} differs from the NBD write"
            );
        }
    });
}

/// Joins futures without pulling in a combinator crate: tokio's JoinSet on a local set.
async fn futures_join<F, T>(futs: impl IntoIterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T>,
{
    let mut out = Vec::new();
    let pinned: Vec<_> = futs.into_iter().map(Box::pin).collect();
    // Poll them concurrently: select over the remaining ones until all finish.
    let mut pending: Vec<_> = pinned.into_iter().map(Some).collect();
    let mut results: Vec<Option<T>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    for r in results {
        out.push(r.expect("every future finished"));
    }
    out
}

#[test]
fn memory_backend_roundtrips_both_ways() {
    let s = start(&standard_config(&memory_backend("8MiB"), "on"));
    native_then_nbd(&s, 0x11);
    nbd_then_native(&s, 0x22);
}

#[test]
fn file_backend_roundtrips_both_ways_and_persists() {
    let file = TempFile::new("roundtrip");
    {
        let s = start(&standard_config(&file_backend(&file.0, "8MiB"), "on"));
        native_then_nbd(&s, 0x33);
        nbd_then_native(&s, 0x44);
        s.shutdown();
    }
    // The bytes are in the file itself.
    let bytes = std::fs::read(&file.0).expect("backing file");
    assert_eq!(bytes.len() as u64, VOLUME_BYTES);
    for &(off, len) in &BLOCKS {
        assert!(
            bytes[off as usize..off as usize + len] == pattern(off, len, 0x44)[..],
            "file content at {off}"
        );
    }
    // And a restarted server serves them.
    let s = start(&standard_config(&file_backend(&file.0, "8MiB"), "off"));
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    assert_eq!(
        nbd.read(1 << 20, 4096).expect("read"),
        pattern(1 << 20, 4096, 0x44)[..4096].to_vec()
    );
}

#[test]
fn nbdcopy_reads_what_the_client_library_wrote() {
    let Some(nbdcopy) = tool("nbdcopy", "nbdcopy_reads_what_the_client_library_wrote") else {
        return;
    };
    let s = start(&standard_config(&memory_backend("8MiB"), "on"));
    native_then_nbd(&s, 0x55);
    let out = TempFile::new("nbdcopy-out");
    let uri = format!("nbd://{}/default", s.addrs.nbd.unwrap());
    // nbdcopy opens several connections (multi-conn is advertised) and requests up to 32 MiB.
    let status = Command::new(&nbdcopy)
        .args([
            uri.as_str(),
            out.0.to_str().unwrap_or_default(),
            "--request-size=33554432",
        ])
        .status()
        .expect("run nbdcopy");
    assert!(status.success(), "nbdcopy failed: {status}");
    let bytes = std::fs::read(&out.0).expect("copy");
    assert_eq!(bytes.len() as u64, VOLUME_BYTES);
    for &(off, len) in &BLOCKS {
        assert!(
            bytes[off as usize..off as usize + len] == pattern(off, len, 0x55)[..],
            "nbdcopy data at {off}"
        );
    }
    // And back: nbdcopy writes a file into the export, the client library reads it.
    let input = TempFile::new("nbdcopy-in");
    let data: Vec<u8> = (0..VOLUME_BYTES as usize)
        .map(|i| (i % 251) as u8)
        .collect();
    std::fs::write(&input.0, &data).expect("input file");
    let status = Command::new(&nbdcopy)
        .args([input.0.to_str().unwrap_or_default(), uri.as_str()])
        .status()
        .expect("run nbdcopy");
    assert!(status.success(), "nbdcopy upload failed: {status}");
    runtime().block_on(async {
        let c = Client::connect(s.addrs.native.unwrap(), &alice())
            .await
            .expect("connect");
        let got = c
            .read(TenantHandle::DEFAULT, 3 << 20, 1 << 20)
            .await
            .expect("read");
        assert!(
            got[..] == data[3 << 20..4 << 20],
            "client library reads nbdcopy's upload"
        );
    });
}
