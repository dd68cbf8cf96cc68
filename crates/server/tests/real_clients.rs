//! Real NBD clients against the server: fio's nbd engine with a crc32c verify job, nbdinfo's
//! view of size and flags, qemu-io (FUA on every write), and the admin endpoint's metrics.
//! Each test skips with a printed reason when its tool is not installed.

mod common;

use std::process::Command;

use common::*;

fn fio_verify(backend: &str, test: &str) {
    let Some(fio) = tool("fio", test) else { return };
    let s = start(&standard_config(backend, "on"));
    let uri = format!("nbd://{}/default", s.addrs.nbd.unwrap());
    // fio writes verify state files into its working directory; keep them out of the tree.
    let scratch = tempfile::tempdir().expect("scratch dir");
    let (ok, text) = run(Command::new(fio).current_dir(scratch.path()).args([
        "--name=verify",
        "--verify_state_save=0",
        "--ioengine=nbd",
        &format!("--uri={uri}"),
        "--rw=randwrite",
        "--bs=4k",
        "--size=32m",
        "--iodepth=32",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--runtime=60",
        "--output-format=json",
    ]));
    assert!(ok, "fio verify job failed:\n{text}");
    let json_start = text.find('{').expect("fio JSON output");
    let v: serde_json::Value = serde_json::from_str(&text[json_start..]).expect("fio JSON parses");
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "fio reported an error: {text}");
    let written = job["write"]["io_bytes"].as_u64().unwrap_or(0);
    let read = job["read"]["io_bytes"].as_u64().unwrap_or(0);
    assert_eq!(written, 32 << 20, "fio wrote the whole 32 MiB");
    assert_eq!(
        read,
        32 << 20,
        "fio read back and verified the whole 32 MiB"
    );
    // The same I/O shows up in the per-tenant metrics.
    let metrics = scrape(s.addrs.admin.unwrap());
    let writes = metric(
        &metrics,
        "ullstack_tenant_requests_total{tenant=\"alice\",op=\"write\"}",
    );
    assert_eq!(
        writes, 8192,
        "8192 4 KiB writes counted for alice:\n{metrics}"
    );
}

#[test]
fn fio_nbd_verify_crc32c_memory() {
    fio_verify(&memory_backend("64MiB"), "fio_nbd_verify_crc32c_memory");
}

#[test]
fn fio_nbd_verify_crc32c_file() {
    let file = TempFile::new("fio");
    fio_verify(
        &file_backend(&file.0, "64MiB"),
        "fio_nbd_verify_crc32c_file",
    );
}

#[test]
fn nbdinfo_reports_size_and_truthful_flags() {
    let Some(nbdinfo) = tool("nbdinfo", "nbdinfo_reports_size_and_truthful_flags") else {
        return;
    };
    let s = start(&standard_config(&memory_backend("96MiB"), "on"));
    let addr = s.addrs.nbd.unwrap();
    let (ok, text) = run(Command::new(&nbdinfo).args(["--json", &format!("nbd://{addr}/default")]));
    assert!(ok, "nbdinfo failed: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("nbdinfo JSON");
    let e = &v["exports"][0];
    assert_eq!(e["export-size"], 96u64 << 20);
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["can_flush"], true);
    assert_eq!(e["can_fua"], true);
    assert_eq!(e["can_trim"], true);
    assert_eq!(e["can_zero"], true);
    assert_eq!(
        e["can_multi_conn"], true,
        "memory: a flush on one connection covers all"
    );
    assert_eq!(e["can_df"], false, "no structured replies, so no DF");
    assert_eq!(e["block_size_minimum"], 512);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 32u64 << 20);

    let (ok, text) = run(Command::new(&nbdinfo).args(["--json", &format!("nbd://{addr}/ro")]));
    assert!(ok, "nbdinfo ro failed: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("nbdinfo JSON");
    let e = &v["exports"][0];
    assert_eq!(
        e["is_read_only"], true,
        "tenant `reader` only has read rights"
    );
    assert_eq!(e["can_trim"], false);
    assert_eq!(e["can_fua"], false);

    let (ok, text) =
        run(Command::new(&nbdinfo).args(["--list", "--json", &format!("nbd://{addr}")]));
    assert!(ok, "nbdinfo --list failed: {text}");
    assert!(
        text.contains("\"default\"") && text.contains("\"ro\""),
        "both exports listed: {text}"
    );
}

#[test]
fn qemu_io_writes_with_fua_and_reads_back() {
    let Some(qemu_io) = tool("qemu-io", "qemu_io_writes_with_fua_and_reads_back") else {
        return;
    };
    let s = start(&standard_config(&memory_backend("16MiB"), "on"));
    let uri = format!("nbd://{}/default", s.addrs.nbd.unwrap());
    let (ok, text) = run(Command::new(&qemu_io).args([
        "-f",
        "raw",
        "-c",
        "write -f -P 0xab 0 64k",
        "-c",
        "write -P 0xcd 1m 3m",
        "-c",
        "read -P 0xab 0 64k",
        "-c",
        "read -P 0xcd 1m 3m",
        "-c",
        "flush",
        &uri,
    ]));
    assert!(
        ok && !text.contains("Pattern verification failed"),
        "qemu-io: {text}"
    );
    let mut nbd = RawNbd::connect(s.addrs.nbd.unwrap(), "default").expect("nbd");
    assert_eq!(nbd.read(2 << 20, 4096).expect("read"), vec![0xcd; 4096]);
}

#[test]
fn admin_metrics_count_tenant_io_tokens_and_worker_loops() {
    let s = start(&standard_config(&memory_backend("16MiB"), "on"));
    let mut c = RawNative::connect(s.addrs.native.unwrap());
    assert_eq!(
        c.hello("alice", "alice-secret", "vol").status,
        proto::wire::Status::Ok
    );
    for i in 0..10u64 {
        assert_eq!(
            c.write(i * 4096, &[1u8; 4096]).status,
            proto::wire::Status::Ok
        );
    }
    for i in 0..5u64 {
        assert_eq!(c.read(i * 4096, 8192).status, proto::wire::Status::Ok);
    }
    assert_eq!(c.read(1, 4096).status, proto::wire::Status::Misaligned);
    let text = scrape(s.addrs.admin.unwrap());
    assert_eq!(
        metric(
            &text,
            "ullstack_tenant_requests_total{tenant=\"alice\",op=\"write\"}"
        ),
        10
    );
    assert_eq!(
        metric(
            &text,
            "ullstack_tenant_requests_total{tenant=\"alice\",op=\"read\"}"
        ),
        5
    );
    assert_eq!(
        metric(
            &text,
            "ullstack_tenant_bytes_total{tenant=\"alice\",op=\"read\"}"
        ),
        5 * 8192
    );
    assert_eq!(
        metric(&text, "ullstack_tenant_errors_total{tenant=\"alice\"}"),
        1
    );
    assert_eq!(
        metric(
            &text,
            "ullstack_tenant_latency_seconds_count{tenant=\"alice\",op=\"read\"}"
        ),
        5
    );
    // Latency is measured from decode to the reply, not from one loop step's clock to itself:
    // even memory-backed reads take a measurable time.
    let read_latency_sum: f64 = text
        .lines()
        .find(|l| {
            l.starts_with("ullstack_tenant_latency_seconds_sum{tenant=\"alice\",op=\"read\"}")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("read latency sum exported");
    assert!(
        read_latency_sum > 0.0,
        "5 reads took {read_latency_sum} s in all"
    );
    // Both volumes are in memory, so `auto` prices with the `memory` profile: a 4 KiB write
    // 1 token (reflex-a's would be 10), an 8 KiB read 2 tokens.
    let spent = metric(
        &text,
        "ullstack_tenant_tokens_spent_mtok_total{tenant=\"alice\"}",
    );
    assert_eq!(
        spent,
        10 * 1_000 + 5 * 2_000,
        "tokens spent by alice (mtok)"
    );
    assert!(
        metric(
            &text,
            "ullstack_tenant_tokens_earned_mtok_total{tenant=\"alice\"}"
        ) > 0
    );
    let loops: u64 = (0..2)
        .map(|w| {
            metric(
                &text,
                &format!("ullstack_worker_loop_iterations_total{{worker=\"{w}\"}}"),
            )
        })
        .sum();
    assert!(loops > 0, "worker loops counted:\n{text}");
    assert!(
        text.contains("ullstack_worker_batch_requests_bucket"),
        "batch histogram exported"
    );
}
