//! fio's NBD engine against an emulated drive: what a real client sees of the SSD model run in
//! real time (4 KiB random reads at QD1 and QD32, then random writes at QD32).
//!
//! ```text
//! cargo run --release -p server --example emulated_fio -- [DEVICE] [SECONDS]
//! ```
//! DEVICE is a preset (`zssd` by default, `nvme-tlc`, …). Skips (with the reason) without fio.

mod common;

use common::fio_nbd;

use std::process::Command;

use server::config::{BackendConfig, ByteSize, DeviceSpec, ServerConfig};

fn fio(uri: &str, rw: &str, iodepth: u32, seconds: u64) -> Option<String> {
    let extra = [
        "--name=job".to_string(),
        format!("--rw={rw}"),
        format!("--iodepth={iodepth}"),
    ];
    let json = fio_nbd(uri, seconds, &extra)?;
    let side = if rw.contains("read") { "read" } else { "write" };
    let r = &json[side];
    let pct = |p: &str| r["clat_ns"]["percentile"][p].as_f64().unwrap_or(0.0) / 1000.0;
    Some(format!(
        "{rw:<9} QD{iodepth:<3} {:>8.0} IOPS  clat p50 {:>7.1} us  p95 {:>7.1} us  p99 {:>7.1} us",
        r["iops"].as_f64()?,
        pct("50.000000"),
        pct("95.000000"),
        pct("99.000000")
    ))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let device = args.next().unwrap_or_else(|| "zssd".into());
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let have_fio = Command::new("sh")
        .arg("-c")
        .arg("command -v fio >/dev/null")
        .status()
        .is_ok_and(|s| s.success());
    if !have_fio {
        println!("SKIP: fio is not installed (apt-get install fio)");
        return;
    }
    let mut config = ServerConfig::quick_start(ByteSize(1 << 30), "127.0.0.1:0".parse().ok(), None);
    config.volumes[0].backend = BackendConfig::Emulated {
        device: DeviceSpec::Named(device.clone()),
        size: ByteSize(1 << 30),
        sq_depth: server::config::DEFAULT_SQ_DEPTH,
    };
    let model_ns = device::DeviceConfig::preset(&device)
        .ok()
        .and_then(|d| {
            server::backend::emulated::unloaded_latency_ns(&d, engine::IoOp::Read, 1 << 20, 4096)
                .ok()
        })
        .unwrap_or(0);
    let server = match server::start(config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("server did not start: {e}");
            std::process::exit(1);
        }
    };
    let Some(addr) = server.addrs.nbd else {
        unreachable!("quick start listens on NBD")
    };
    let uri = format!("nbd://{addr}/default");
    println!(
        "emulated {device} (model: QD1 4 KiB read {:.1} us), fio nbd engine, {seconds} s per job",
        model_ns as f64 / 1000.0
    );
    for (rw, qd) in [("randread", 1), ("randread", 32), ("randwrite", 32)] {
        match fio(&uri, rw, qd, seconds) {
            Some(line) => println!("{line}"),
            None => println!("{rw} QD{qd}: fio failed"),
        }
    }
    server.shutdown();
}
