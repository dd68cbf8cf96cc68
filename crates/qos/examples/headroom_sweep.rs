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
use qos::{
    AdmissionHeadroom, BeSpec, DeviceProfile, LcSlo, LoadMix, RegistryConfig, SchedulerConfig,
    TenantSpec,
};

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
/// Adds a best-effort tenant flooding at depth 32 with `read_pct` % reads.
fn be_flood(h: &mut Harness, read_pct: u8) {
    h.add(
        TenantSpec::BestEffort(BeSpec::default()),
        Load::Flood {
            depth: 32,
            read_pct,
            bytes: 4096,
        },
        &[0],
    );
}

/// Adds scenario 1's two LC tenants (Poisson at their rates) and its two BE floods; returns
/// the LC tenants' indices.
fn scenario_one(h: &mut Harness, a: &LcSlo, b: &LcSlo) -> (usize, usize) {
    let ta = h.add(TenantSpec::LatencyCritical(*a), pois(a), &[0]);
    let tb = h.add(TenantSpec::LatencyCritical(*b), pois(b), &[0]);
    be_flood(h, 95);
    be_flood(h, 25);
    (ta, tb)
}

/// Runs 100 ms to settle, then `secs` measured; returns the LC surge the registry left.
fn settle_and_measure(h: &mut Harness, secs: u64) -> u32 {
    let surge = h.registry.capacity().lc_surge_ppm;
    h.run_for(100 * MS);
    h.reset_measurements();
    h.run_for(secs * 1000 * MS);
    surge
}

/// A one-worker harness on `profile` that gives LC tenants a surge of `surge_pct`, admitting
/// what the published rule admits (the sweep measures what the headroom rule would ask for).
fn harness(profile: DeviceProfile, round_ns: u64, cfg: SchedulerConfig, surge_pct: u32) -> Harness {
    Harness::with_profile(
        profile,
        1,
        round_ns,
        cfg,
        RegistryConfig {
            lc_surge_pct: surge_pct,
            headroom: AdmissionHeadroom::Off,
            ..RegistryConfig::default()
        },
    )
}

const USAGE: &str = "usage: headroom_sweep s1x|s1|b|n ROUND_NS SECONDS borrow|noborrow ARG \
     (see the example's doc comment)";

/// The `i`-th argument parsed, or the usage and the bad value.
fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    let text = args
        .get(i)
        .unwrap_or_else(|| panic!("missing {what}\n{USAGE}"));
    text.parse()
        .unwrap_or_else(|_| panic!("{what} {text:?} is not a valid number\n{USAGE}"))
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
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    let round_ns: u64 = arg(&args, 2, "ROUND_NS");
    let secs: u64 = arg(&args, 3, "SECONDS");
    let borrow = args.get(4).is_none_or(|s| s == "borrow");
    let cfg = SchedulerConfig {
        lc_borrows_spare: borrow,
        ..SchedulerConfig::default()
    };
    match mode {
        // Scenario 1 on `reflex-a` scaled to PCT %.
        "s1" => {
            let pct: u64 = arg(&args, 5, "PCT");
            for surge in [50u32, 16, 14, 12, 10] {
                let mut h = harness(scaled(pct), round_ns, cfg, surge);
                let a = slo(120_000 * pct / 100, 100, 500);
                let b = slo(70_000 * pct / 100, 80, 500);
                let (ta, tb) = scenario_one(&mut h, &a, &b);
                let s = settle_and_measure(&mut h, secs);
                println!(
                    "s1 pct {pct} round {round_ns} borrow {borrow} surge {s} ppm: A p95 {} B p95 {} ns",
                    h.read_wait_p95_ns(ta),
                    h.read_wait_p95_ns(tb)
                );
            }
        }
        // B alone beside a BE flood, at PCT % of its published rate.
        "b" => {
            let pct: u64 = arg(&args, 5, "PCT");
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
                let mut h = harness(scaled(pct * 10), round_ns, cfg, surge);
                let tb = h.add(TenantSpec::LatencyCritical(b), pois(&b), &[0]);
                be_flood(&mut h, 25);
                let s = settle_and_measure(&mut h, secs);
                println!(
                    "B pct {pct} round {round_ns} surge {s} ppm: p95 {} ns",
                    h.read_wait_p95_ns(tb)
                );
            }
        }
        // N of the 50 K-IOPS tenants beside a BE flood.
        "n" => {
            let n: usize = arg(&args, 5, "N");
            for surge in [8u32, 10, 11, 12] {
                let mut h = harness(scaled(200), round_ns, cfg, surge);
                let s50 = slo(50_000, 90, 500);
                let ts: Vec<usize> = (0..n)
                    .map(|_| h.add(TenantSpec::LatencyCritical(s50), pois(&s50), &[0]))
                    .collect();
                be_flood(&mut h, 90);
                let s = settle_and_measure(&mut h, secs);
                let p: Vec<u64> = ts.iter().map(|&t| h.read_wait_p95_ns(t)).collect();
                println!("n {n} round {round_ns} surge {s} ppm: p95 {p:?}");
            }
        }
        // Scenario 1 at a tenth, the device rate set so that the surge is exactly PPM.
        "s1x" => {
            let ppm: u64 = arg(&args, 5, "PPM");
            let reserved = 12_000 + 19_600u64;
            let rate = reserved + 2 * reserved * ppm / 1_000_000 + 1;
            let mut p = DeviceProfile::reflex_a();
            p.points[0].tokens_per_sec = rate;
            p.points[1].tokens_per_sec = rate * 57 / 42;
            p.points[0].read_only_tokens_per_sec = rate * 2;
            p.points[1].read_only_tokens_per_sec = rate * 2;
            let mut h = Harness::with_profile(p, 1, round_ns, cfg, RegistryConfig::default());
            let (ta, tb) = scenario_one(&mut h, &slo(12_000, 100, 500), &slo(7_000, 80, 500));
            let s = settle_and_measure(&mut h, secs);
            println!(
                "s1x round {round_ns} surge {s} ppm: A p95 {} B p95 {} ns",
                h.read_wait_p95_ns(ta),
                h.read_wait_p95_ns(tb)
            );
        }
        other => panic!("unknown mode {other:?}\n{USAGE}"),
    }
}
