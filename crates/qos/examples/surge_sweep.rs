//! The exploration behind `qos::DEFAULT_LC_SURGE_PCT`: an LC tenant reserving 20 K IOPS
//! (4 KiB, 90 % reads, 500 µs p95 target) offered Poisson arrivals at 75-110 % of its
//! reservation, alone and next to a best-effort flood at queue depth 32, for each LC surge of
//! 0-100 %; it prints the scheduler's p95 and maximum read wait (arrival to release) and the
//! backlog left after 2 s measured (after 100 ms of warm-up). Deterministic: the same table on
//! every run.
//!
//! `cargo run -p qos --example surge_sweep --profile checked`
//!
//! What each surge must achieve is asserted in `tests/surge.rs`; this prints the landscape
//! around it. It drives the same deterministic harness as the tests (`tests/common`).

#[path = "../tests/common/mod.rs"]
mod common;

use common::surge::{flood, lc, poisson, MS, ROUND_NS};
use common::Harness;
use qos::{BeSpec, RegistryConfig, SchedulerConfig, TenantSpec};

fn main() {
    for surge in [0u32, 10, 25, 50, 100] {
        for be in [false, true] {
            for pct in [75u64, 95, 100, 110] {
                let mut h = Harness::with_registry(
                    1,
                    ROUND_NS,
                    SchedulerConfig::default(),
                    RegistryConfig {
                        lc_surge_pct: surge,
                        ..RegistryConfig::default()
                    },
                );
                let t = h.add(lc(20_000), poisson(20_000 * pct / 100), &[0]);
                if be {
                    h.add(TenantSpec::BestEffort(BeSpec::default()), flood(), &[0]);
                }
                h.run_for(100 * MS);
                h.reset_measurements();
                h.run_for(2_000 * MS);
                println!(
                    "surge {surge:3}% be {be:5} offered {pct:3}%: p95 wait {:7} ns, max {:8} ns, backlog {}",
                    h.read_wait_p95_ns(t),
                    h.tenants[t].max_wait_ns,
                    h.tenants[t].outstanding()
                );
            }
        }
    }
}
