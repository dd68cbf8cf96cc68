//! The checks behind the pooled headroom rule (`qos::admission`, `admission/headroom.rs`):
//! the scheduler's p95 read wait (arrival to release) of LC tenants, Poisson at their full
//! rates beside BE floods, on the tests' deterministic harness (`tests/common`), against the
//! surge they get. Deterministic: the same lines on every run.
//!
//! `cargo run -p qos --example headroom_sweep --profile checked -- MODE ROUND_NS SECONDS
//! borrow|noborrow ARG`, MODE one of:
//! * `s1x PPM`: the reflex study's scenario 1 at a tenth (A 12 K IOPS of reads, B 7 K at 80 %
//!   reads, two BE floods) on a device whose rate leaves a surge of PPM;
//! * `s1 PCT`: the same on `reflex-a` scaled to PCT %, for surges of 50, 16, 14, 12, 10 %;
//! * `b PCT`: B alone (at PCT % of its published rate) beside a BE flood, surges 10-30 %;
//! * `n N`: N of the tenants (50 K IOPS, 90 % reads) beside a BE flood, surges 8-12 %.

#[path = "../tests/common/mod.rs"]
mod common;

use common::surge::MS;
use common::{Harness, Load};
use qos::{BeSpec, DeviceProfile, LcSlo, LoadMix, RegistryConfig, SchedulerConfig, TenantSpec};

fn scaled(pct: u64) -> DeviceProfile {
    let mut p = DeviceProfile::reflex_a();
    for pt in &mut p.points {
        pt.tokens_per_sec = pt.tokens_per_sec * pct / 100;
        pt.read_only_tokens_per_sec = pt.read_only_tokens_per_sec * pct / 100;
    }
    p
}

fn slo(iops: u64, read_pct: u8, p95_us: u64) -> LcSlo {
    LcSlo {
        p95_read_latency_ns: p95_us * 1000,
        iops,
        read_pct,
        request_bytes: 4096,
    }
}
fn pois(s: &LcSlo) -> Load {
    Load::Poisson {
        iops: s.iops,
        read_pct: s.read_pct,
        bytes: 4096,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].as_str();
    let round_ns: u64 = args[2].parse().unwrap();
    let secs: u64 = args[3].parse().unwrap();
    let borrow = args.get(4).map(|s| s == "borrow").unwrap_or(true);
    let cfg = SchedulerConfig {
        lc_borrows_spare: borrow,
        ..SchedulerConfig::default()
    };
    match mode {
        // scaled scenario 1: A, B + two BE floods, profile pct
        "s1" => {
            let pct: u64 = args[5].parse().unwrap();
            for surge in [50u32, 16, 14, 12, 10] {
                let mut h = Harness::with_profile(
                    scaled(pct),
                    1,
                    round_ns,
                    cfg,
                    RegistryConfig {
                        lc_surge_pct: surge,
                        ..RegistryConfig::default()
                    },
                );
                let a = slo(120_000 * pct / 100, 100, 500);
                let b = slo(70_000 * pct / 100, 80, 500);
                let ta = h.add(TenantSpec::LatencyCritical(a), pois(&a), &[0]);
                let tb = h.add(TenantSpec::LatencyCritical(b), pois(&b), &[0]);
                h.add(
                    TenantSpec::BestEffort(BeSpec::default()),
                    Load::Flood {
                        depth: 32,
                        read_pct: 95,
                        bytes: 4096,
                    },
                    &[0],
                );
                h.add(
                    TenantSpec::BestEffort(BeSpec::default()),
                    Load::Flood {
                        depth: 32,
                        read_pct: 25,
                        bytes: 4096,
                    },
                    &[0],
                );
                let s = h.registry.capacity().lc_surge_ppm;
                h.run_for(100 * MS);
                h.reset_measurements();
                h.run_for(secs * 1000 * MS);
                println!("s1 pct {pct} round {round_ns} borrow {borrow} surge {s} ppm: A p95 {} B p95 {} ns", h.read_wait_p95_ns(ta), h.read_wait_p95_ns(tb));
            }
        }
        // B alone (+BE flood) at pct scale
        "b" => {
            let pct: u64 = args[5].parse().unwrap();
            let b = slo(70_000 * pct / 100, 80, 500);
            let need = qos::needed_surge_ppm(
                &b,
                &DeviceProfile::reflex_a().cost_model(),
                LoadMix::Mixed,
                qos::DeficitLimit::FixedMtok(50_000),
                round_ns,
            );
            println!("formula need {need}");
            for surge in [10u32, 14, 16, 18, 20, 22, 25, 30] {
                let mut h = Harness::with_profile(
                    scaled(pct * 10),
                    1,
                    round_ns,
                    cfg,
                    RegistryConfig {
                        lc_surge_pct: surge,
                        ..RegistryConfig::default()
                    },
                );
                let tb = h.add(TenantSpec::LatencyCritical(b), pois(&b), &[0]);
                h.add(
                    TenantSpec::BestEffort(BeSpec::default()),
                    Load::Flood {
                        depth: 32,
                        read_pct: 25,
                        bytes: 4096,
                    },
                    &[0],
                );
                let s = h.registry.capacity().lc_surge_ppm;
                h.run_for(100 * MS);
                h.reset_measurements();
                h.run_for(secs * 1000 * MS);
                println!(
                    "B pct {pct} round {round_ns} surge {s} ppm: p95 {} ns",
                    h.read_wait_p95_ns(tb)
                );
            }
        }
        "n" => {
            let n: usize = args[5].parse().unwrap();
            for surge in [8u32, 10, 11, 12] {
                let mut h = Harness::with_profile(
                    scaled(200),
                    1,
                    round_ns,
                    cfg,
                    RegistryConfig {
                        lc_surge_pct: surge,
                        ..RegistryConfig::default()
                    },
                );
                let s50 = slo(50_000, 90, 500);
                let ts: Vec<usize> = (0..n)
                    .map(|_| h.add(TenantSpec::LatencyCritical(s50), pois(&s50), &[0]))
                    .collect();
                h.add(
                    TenantSpec::BestEffort(BeSpec::default()),
                    Load::Flood {
                        depth: 32,
                        read_pct: 90,
                        bytes: 4096,
                    },
                    &[0],
                );
                let s = h.registry.capacity().lc_surge_ppm;
                h.run_for(100 * MS);
                h.reset_measurements();
                h.run_for(secs * 1000 * MS);
                let p: Vec<u64> = ts.iter().map(|&t| h.read_wait_p95_ns(t)).collect();
                println!("n {n} round {round_ns} surge {s} ppm: p95 {p:?}");
            }
        }
        "s1x" => {
            // scaled s1 with the device rate set so that the surge is exactly args[5] ppm
            let ppm: u64 = args[5].parse().unwrap();
            let reserved = 12_000 + 19_600u64;
            let rate = reserved + 2 * reserved * ppm / 1_000_000 + 1;
            let mut p = DeviceProfile::reflex_a();
            p.points[0].tokens_per_sec = rate;
            p.points[1].tokens_per_sec = rate * 57 / 42;
            p.points[0].read_only_tokens_per_sec = rate * 2;
            p.points[1].read_only_tokens_per_sec = rate * 2;
            let mut h = Harness::with_profile(p, 1, round_ns, cfg, RegistryConfig::default());
            let a = slo(12_000, 100, 500);
            let b = slo(7_000, 80, 500);
            let ta = h.add(TenantSpec::LatencyCritical(a), pois(&a), &[0]);
            let tb = h.add(TenantSpec::LatencyCritical(b), pois(&b), &[0]);
            h.add(
                TenantSpec::BestEffort(BeSpec::default()),
                Load::Flood {
                    depth: 32,
                    read_pct: 95,
                    bytes: 4096,
                },
                &[0],
            );
            h.add(
                TenantSpec::BestEffort(BeSpec::default()),
                Load::Flood {
                    depth: 32,
                    read_pct: 25,
                    bytes: 4096,
                },
                &[0],
            );
            let s = h.registry.capacity().lc_surge_ppm;
            h.run_for(100 * MS);
            h.reset_measurements();
            h.run_for(secs * 1000 * MS);
            println!(
                "s1x round {round_ns} surge {s} ppm: A p95 {} B p95 {} ns",
                h.read_wait_p95_ns(ta),
                h.read_wait_p95_ns(tb)
            );
        }
        _ => panic!(),
    }
}
