//! Remote-flash scenarios: what a load on the remote-flash server is made of, how it is written
//! down, and what one tenant's run of it measured.
//!
//! A tenant is written `--tenant key=value,...` on `ullstack bench`'s command line or as a
//! `[[tenant]]` table in a TOML scenario file ([`parse_scenario`]). Both go through one parser
//! ([`parse_tenant_pairs`]) so they accept exactly the same keys and give the same errors. The
//! same types drive the real load generator (`ullstack bench`, crate `client`) and the simulated
//! remote server (`sim::remote`), so one scenario file drives both: `bench` ignores the file's
//! `[sim]` table, which tells the simulator what server, network and device to model. Both
//! report a tenant's figures as one [`TenantResult`] (the `reflex` study sets the simulated and
//! the real one beside each other), its class the scheduler's [`TenantClass`] (`lc` / `be`).
//!
//! ## Map
//! | module | what |
//! | --- | --- |
//! | `tenant` | [`TenantSpec`]: class and SLO, registration, open/closed/trace load, mix, size, pattern; [`parse_tenant`] |
//! | `file` | [`Scenario`]: a scenario file's globals, tenants and `[sim]` table; [`parse_scenario`] |
//! | `result` | [`TenantResult`]: one tenant's figures over the measured window, simulated or real |
//!
//! # Tenant keys
//! | key | meaning | default |
//! | --- | --- | --- |
//! | `name` | tenant name sent in HELLO (required) | |
//! | `secret` | its secret | empty |
//! | `volume` | volume to open | `default` |
//! | `class` | `lc` (latency-critical, needs `iops` and `p95`) or `be` (best-effort) | `be` |
//! | `iops` | LC only: the SLO's IOPS (registered; also the offered rate unless `rate`/`qd`) | |
//! | `p95` | LC only: the SLO's p95 read latency, e.g. `500us`, `2ms` | |
//! | `rate` | open loop: offered IOPS, Poisson arrivals | LC: `iops` |
//! | `qd` | closed loop: requests kept in flight per tenant | BE: 16 |
//! | `read` | percentage of reads, 0..=100 | 100 |
//! | `size` | request size, e.g. `4k`, `1k`, `128k` | `4k` |
//! | `pattern` | `random`, `seq`, `zipf` or `zipf:THETA` (θ default 0.99) | `random` |
//! | `conns` | connections (the load and the SLO's IOPS are split evenly over them) | 1 |
//! | `count` | replicate this tenant N times, named `NAME-0` .. `NAME-(N-1)` | 1 |
//! | `fua` | `yes` = every write is FUA | `no` |
//! | `register` | `no` = skip REGISTER and use the session's default best-effort flow | `yes` |
//! | `span` | only address the first SPAN bytes of the volume, e.g. `1g` | whole volume |
//! | `trace` | replay a block trace file (any format `ullstack trace stats` reads; see `trace`): its reads, writes, sizes and times; excludes `rate`, `read`, `pattern` | |
//! | `speed` | with `trace` and no `qd`: trace times are divided by this | 1 |
//! | `trace_format` | with `trace`: `blkparse`, `msr`, `spc`, `csv`, `mqsim` or `disksim` (`--trace-format`) | detected |
//! | `trace_device` | with `trace`: only this device's records, a number or `MAJ:MIN` (`--trace-device`) | all |
//! | `from`, `to` | with `trace`: only records with `from <= time < to`, trace time from its first record, e.g. `10s`, `250ms` (`--from`, `--to`) | whole trace |
//! | `skip_bad_lines` | with `trace`: `yes` = count malformed lines instead of stopping (`--skip-bad-lines`) | `no` |
//!
//! Sizes (`size`, `span`), times (`p95`, `from`, `to`, a scenario's `duration` and `warmup`) and
//! counts (`iops`, `rate`, `qd`, `ios`, …) are written in the tree's one grammar,
//! `engine::units`: `4k` = `4KiB` = 4096 but `4KB` = 4000; a bare time is seconds; `120k` IOPS
//! is 120,000.
//!
//! Example (reflex scenario 1, tenant A):
//! `name=A,class=lc,iops=120000,p95=500us,read=100,size=4k` → an LC tenant registering
//! (p95 500 µs, 120 000 IOPS, 100 % reads, 4096 B) and offering 120 000 IOPS open-loop.

mod file;
mod result;
mod tenant;

pub use file::{parse_scenario, Scenario, SCENARIO_KEYS};
/// The write mode a tenant's writes travel with: the wire's own.
pub use proto::wire::WriteMode;
/// The scheduler's class of a tenant, spelled `lc` / `be` in files and results.
pub use qos::TenantClass;
pub use result::{ClientSide, TenantResult};
pub use tenant::{
    parse_tenant, parse_tenant_pairs, Load, Pattern, Registration, TenantSpec, TraceLoad,
    BE_DEFAULT_QUEUE_DEPTH, TENANT_KEYS, TRACE_MAX_REQUEST_BYTES, ZIPF_DEFAULT_THETA_MILLI,
};

use thiserror::Error;

/// A spec that cannot be used, naming the bad value and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{context}: {problem}")]
pub struct SpecError {
    pub context: String,
    pub problem: String,
}

fn err(context: impl Into<String>, problem: impl Into<String>) -> SpecError {
    SpecError {
        context: context.into(),
        problem: problem.into(),
    }
}

#[cfg(test)]
mod tests;
