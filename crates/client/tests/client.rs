//! The client library against an in-test fake server built from `proto`.

mod common;

use std::sync::atomic::Ordering;

use client::{
    latency_critical, Client, ClientError, Credentials, RegisterClass, Status, TenantHandle,
};
use common::Mode;
use proto::wire::{RefusalCode, WriteMode};

fn creds(tenant: &str, secret: &str, volume: &str) -> Credentials {
    Credentials {
        tenant: tenant.into(),
        secret: secret.into(),
        volume: volume.into(),
    }
}

async fn connect(fake: &common::Fake) -> Client {
    Client::connect(fake.addr, &creds("A", "pw", common::VOLUME))
        .await
        .expect("connect")
}

#[tokio::test]
async fn hello_reports_the_session_and_refuses_bad_credentials() {
    let fake = common::start(Mode::Normal).await;
    let c = connect(&fake).await;
    let s = c.session();
    assert_eq!(s.volume_size_bytes, common::VOLUME_BYTES);
    assert_eq!(s.max_payload_bytes, common::MAX_PAYLOAD);
    assert_eq!(s.block_size_bytes, 512);

    let err = Client::connect(fake.addr, &creds("A", "wrong", common::VOLUME))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(Status::AuthFailed), "{err}");
    let err = Client::connect(fake.addr, &creds("A", "pw", "nope"))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(Status::NoSuchVolume));
    assert!(err.to_string().contains("nope"), "{err}");
}

#[tokio::test]
async fn register_returns_a_handle_or_the_servers_refusal() {
    let fake = common::start(Mode::Normal).await;
    let c = connect(&fake).await;
    let h = c
        .register(latency_critical(500_000, 60_000, 100, 4096))
        .await
        .unwrap();
    assert_ne!(h, TenantHandle::DEFAULT);
    let be = c.register(RegisterClass::BestEffort).await.unwrap();
    assert_ne!(be, h);
    match c
        .register(latency_critical(500_000, 50_000, 80, 4096))
        .await
    {
        Err(ClientError::Refused { code, reason }) => {
            assert_eq!(code, RefusalCode::CapacityExceeded);
            assert!(reason.contains("40000 left"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    c.unregister(h).await.unwrap();
    // Capacity came back.
    c.register(latency_critical(500_000, 50_000, 80, 4096))
        .await
        .unwrap();
    let stats = c.stats(TenantHandle::DEFAULT).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(v["reserved_iops"], 50_000);
}

#[tokio::test]
async fn data_round_trips_and_errors_carry_the_status() {
    let fake = common::start(Mode::Normal).await;
    let c = connect(&fake).await;
    let h = c.register(RegisterClass::BestEffort).await.unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    c.write(h, 4096, &data, WriteMode::Fua).await.unwrap();
    assert_eq!(c.read(h, 4096, 8192).await.unwrap(), data);
    // A large write goes out as header + payload in two writes.
    let big = vec![0x5au8; 300_000];
    c.write(h, 1 << 20, &big, WriteMode::WriteBack)
        .await
        .unwrap();
    assert_eq!(c.read(h, 1 << 20, 300_000).await.unwrap(), big);
    c.trim(h, 4096, 4096).await.unwrap();
    assert_eq!(c.read(h, 4096, 4096).await.unwrap(), vec![0u8; 4096]);
    c.flush(h).await.unwrap();

    let err = c.read(h, common::VOLUME_BYTES, 4096).await.unwrap_err();
    assert_eq!(err.status(), Some(Status::OutOfRange));
    assert!(err.to_string().contains("beyond the volume"), "{err}");
    let err = c.read(TenantHandle(999), 0, 4096).await.unwrap_err();
    assert_eq!(err.status(), Some(Status::UnknownHandle));
    // The connection survives error replies.
    assert_eq!(c.read(h, 4096 + 4096, 4096).await.unwrap(), data[4096..]);
    // Oversize requests are refused before they are sent.
    let err = c.read(h, 0, common::MAX_PAYLOAD + 1).await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err}");
    assert!(!c.is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_requests_in_flight_are_matched_by_cookie_out_of_order() {
    let fake = common::start(Mode::Normal).await;
    let c = connect(&fake).await;
    let h = c.register(RegisterClass::BestEffort).await.unwrap();
    // Stamp each 4 KB block with its index.
    let blocks = 256u64;
    let mut writes = Vec::new();
    for b in 0..blocks {
        let c = c.clone();
        writes.push(tokio::spawn(async move {
            c.write(h, b * 4096, &[b as u8; 4096], WriteMode::WriteBack)
                .await
        }));
    }
    for w in writes {
        w.await.unwrap().unwrap();
    }
    let mut reads = Vec::new();
    for round in 0..4 {
        for b in 0..blocks {
            let c = c.clone();
            reads.push(tokio::spawn(async move {
                let d = c.read(h, b * 4096, 4096).await?;
                Ok::<_, ClientError>((b, round, d))
            }));
        }
    }
    for r in reads {
        let (b, _, d) = r.await.unwrap().unwrap();
        assert!(
            d.iter().all(|&x| x == b as u8),
            "block {b} got another block's data"
        );
    }
    assert_eq!(c.in_flight(), 0);
    // Pipelining really happened: the server saw batches of several requests, which it
    // answered in reverse order.
    assert!(fake.max_batch.load(Ordering::Relaxed) > 1);
    assert!(fake.requests.load(Ordering::Relaxed) >= 256 * 5);
}

#[tokio::test]
async fn a_server_that_closes_fails_everything_in_flight() {
    let fake = common::start(Mode::CloseOnRead).await;
    let c = connect(&fake).await;
    let (a, b) = tokio::join!(
        c.read(TenantHandle::DEFAULT, 0, 512),
        c.read(TenantHandle::DEFAULT, 512, 512)
    );
    assert!(matches!(a, Err(ClientError::Closed)), "{a:?}");
    assert!(matches!(b, Err(ClientError::Closed)), "{b:?}");
    assert!(c.is_closed());
    assert!(matches!(
        c.flush(TenantHandle::DEFAULT).await,
        Err(ClientError::Closed)
    ));
}

#[tokio::test]
async fn a_garbage_reply_closes_the_connection() {
    let fake = common::start(Mode::GarbageOnRead).await;
    let c = connect(&fake).await;
    let r = c.read(TenantHandle::DEFAULT, 0, 512).await;
    assert!(matches!(r, Err(ClientError::Closed)), "{r:?}");
    assert!(c.is_closed());
}

#[tokio::test]
async fn dropping_a_request_midway_does_not_confuse_later_replies() {
    let fake = common::start(Mode::Normal).await;
    let c = connect(&fake).await;
    c.write(TenantHandle::DEFAULT, 0, &[1u8; 512], WriteMode::WriteBack)
        .await
        .unwrap();
    // Start reads and abandon them once sent; their replies must be discarded, not delivered
    // to the next caller.
    for _ in 0..20 {
        let fut = c.read(TenantHandle::DEFAULT, 0, 512);
        let _ = tokio::time::timeout(std::time::Duration::from_micros(1), fut).await;
    }
    // Abandoned requests are still sent whole; the connection stays usable and later
    // replies go to the right callers.
    c.write(
        TenantHandle::DEFAULT,
        512,
        &[2u8; 512],
        WriteMode::WriteBack,
    )
    .await
    .unwrap();
    assert!(!c.is_closed());
    assert_eq!(
        c.read(TenantHandle::DEFAULT, 512, 512).await.unwrap(),
        vec![2u8; 512]
    );
    // Wait (bounded) until the reader task has consumed every abandoned request's reply.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while c.in_flight() != 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(
        c.in_flight(),
        0,
        "abandoned requests' replies were consumed"
    );
}
