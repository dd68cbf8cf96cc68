//! Calibrates a QoS device profile for an emulated drive from the SSD model (virtual time; see
//! crate `calibrate`), and prints it as a `[qos.profile]` table for `server.toml`.
//!
//! ```text
//! cargo run --release -p calibrate --example calibrate_emulated -- DEVICE [TARGETS_US] [READ_PCTS]
//! cargo run --release -p calibrate --example calibrate_emulated -- sweep DEVICE READ_PCT IOPS...
//! ```
//! DEVICE is a preset name (`zssd`, `nvme-tlc`, …) or a TOML file in crate `device`'s format.
//! TARGETS_US defaults to `500,1000,2000`, READ_PCTS to `90,75,50`. `sweep` prints the p95 read
//! latency of single probes instead.

use std::time::Instant;

use calibrate::{calibrate, probe, CalibrationConfig};

fn device(arg: &str) -> device::DeviceConfig {
    let parsed = if std::path::Path::new(arg).exists() {
        std::fs::read_to_string(arg)
            .map_err(|e| e.to_string())
            .and_then(|t| device::DeviceConfig::from_toml_str(&t).map_err(|e| e.to_string()))
    } else {
        device::DeviceConfig::preset(arg).map_err(|e| e.to_string())
    };
    parsed.unwrap_or_else(|e| {
        eprintln!("device {arg:?}: {e}");
        std::process::exit(2)
    })
}

fn list(arg: Option<String>, default: &str) -> Vec<u64> {
    arg.as_deref()
        .unwrap_or(default)
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("sweep") {
        let d = device(args.get(1).map(String::as_str).unwrap_or("zssd"));
        let pct: u8 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(90);
        let config = CalibrationConfig::new(d.name.clone());
        for iops in args.iter().skip(3).filter_map(|s| s.parse::<u64>().ok()) {
            let t = Instant::now();
            match probe(&d, &config, pct, iops) {
                Ok(r) => println!(
                    "{pct:>3}% reads {iops:>9} IOPS: p95 read {:>10} ns over {} reads ({:.1} s)",
                    r.p95_read_ns,
                    r.reads,
                    t.elapsed().as_secs_f64()
                ),
                Err(e) => println!("{iops}: {e}"),
            }
        }
        return;
    }
    let mut args = args.into_iter();
    let d = device(args.next().as_deref().unwrap_or("zssd"));
    let mut config = CalibrationConfig::new(format!("emulated-{}", d.name));
    config.targets_ns = list(args.next(), "500,1000,2000")
        .into_iter()
        .map(|us| us * 1000)
        .collect();
    config.read_pcts = list(args.next(), "90,75,50")
        .into_iter()
        .map(|p| p.min(99) as u8)
        .collect();
    let t = Instant::now();
    let cal = match calibrate(&d, &config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("calibration failed: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "# {} probes of {} ms (+{} ms settling) in {:.1} s; headroom {} %",
        cal.probes,
        config.measure_ns / 1_000_000,
        config.settle_ns / 1_000_000,
        t.elapsed().as_secs_f64(),
        config.headroom_pct
    );
    print!("# highest IOPS with p95 read ≤ target × 0.8:");
    for t in &config.targets_ns {
        print!(" {:>8}", format!("{} us", t / 1000));
    }
    println!();
    for row in &cal.rows {
        print!("#   {:>3} % reads                          ", row.read_pct);
        for v in &row.iops {
            print!(" {v:>8}");
        }
        println!();
    }
    println!("[qos.profile]\n{}", cal.profile.to_toml_string());
}
