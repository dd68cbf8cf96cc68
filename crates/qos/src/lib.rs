//! # qos — the QoS core of ullstack
//!
//! The token scheduler of the published remote-flash server (ReFlex), rebuilt as pure,
//! deterministic logic that the real server (`ullstack serve`, one scheduler per worker thread)
//! and the simulator (`ullstack sim`) both run. No clock, no I/O, no threads: time comes in as
//! integer nanoseconds, requests come in as `(tenant, cost, opaque id)`, and each round says
//! which ids may be submitted now.
//!
//! | module | models |
//! | --- | --- |
//! | [`cost`] | the request-cost model: tokens per request, in milli-tokens |
//! | [`profile`] | a device's calibrated prices and latency → token-rate table; the `reflex-a` and `memory` presets |
//! | [`tenant`] | SLOs, reservations, the per-tenant ledger and counters |
//! | [`admission`] | the registry: admission control with reasons for refusal, the BE share |
//! | [`bucket`] | the shared bucket (the only state workers share) and its reset protocol |
//! | [`sched`] | one worker's scheduling round: LC earn/spend/donate, BE round-robin |
//! | [`share`] | one dataplane thread's share of the scheduler, or the FIFO baseline |
//! | [`vrate`] | closed-loop correction of the device rate from measured p95 latency |
//!
//! # How the server uses it
//! ```text
//! control plane (behind a mutex)             worker thread k (owns its connections)
//! ------------------------------             -------------------------------------
//! let mut reg = Registry::new(profile, cfg)  let mut s = Scheduler::new(reg.shared(), qos_cfg)?;
//! REGISTER → reg.register(spec)              let t = s.attach(&handle);   // per tenant here
//!     Ok(handle) | Err(refusal)              READ/WRITE → s.enqueue(t, s.cost_mtok(op, len), id)?
//!     refusal.code(), refusal.to_string()    every loop: s.round(now_ns, &mut ready); submit ready
//! close → s.detach(t, &mut unsent)?; then reg.unregister(handle.id())?
//! metrics → handle.counters(), shared.stats(), s.stats(), reg.capacity()
//! ```

pub mod admission;
pub mod bucket;
pub mod cost;
pub mod profile;
pub mod sched;
pub mod share;
pub mod tenant;
pub mod vrate;

pub use admission::{needed_surge_ppm, AdmissionHeadroom, SCHED_WAIT_SHARE_PCT};
pub use admission::{
    Capacity, Reconfiguration, ReconfigureError, Reconfigured, Refusal, RefusalCode, Registry,
    RegistryConfig, RegistryError, DEFAULT_LC_SURGE_PCT, DEFAULT_ROUND_NS, MAX_LC_SURGE_PCT,
    RATE_SCALE_MAX_PPM, RATE_SCALE_UNITY_PPM,
};
pub use bucket::{BucketStats, SharedBucket};
pub use cost::{CostModel, LoadMix, Op, MTOK_PER_TOKEN, UNIT_BYTES};
pub use profile::{
    DeviceProfile, ProfileError, RatePoint, SloTooTight, KNOWN_PROFILES, MEMORY,
    MEMORY_TIGHTEST_P95_NS, MEMORY_TOKENS_PER_SEC, REFLEX_A,
};
pub use sched::{
    BucketReset, ConfigError, DeficitLimit, LocalTenant, RequestId, RoundStats, SchedError,
    Scheduler, SchedulerConfig, SchedulerStats, DEFAULT_DEFICIT_LIMIT_MTOK, MAX_CAP_ROUNDS,
};
pub use share::{Flow, SchedShare, SchedulerMode};
pub use tenant::lc_earning_rate_mtok_per_sec;
pub use tenant::{
    lc_reservation_mtok_per_sec, BeSpec, DeclaredMix, LcSlo, TenantClass, TenantCounters,
    TenantHandle, TenantId, TenantSpec,
};
pub use vrate::{Decision, RateController, Usage, VrateConfig, VrateConfigError, WindowSample};
