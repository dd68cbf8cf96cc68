//! One tenant's figures over a run's measured window, from the simulator or a real run.

use serde::Serialize;

use crate::TenantClass;

/// One tenant's results over the measured window (requests issued in it), from the simulator
/// or from a real run (the `reflex` study sets the two beside each other, and reads both
/// through this one type). IOPS count the requests issued in the window; latencies run from a
/// request's arrival (open loop) or send (closed loop) to its reply.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TenantResult {
    pub name: String,
    pub class: TenantClass,
    /// The SLO's p95 read-latency target (LC), ns.
    pub slo_p95_read_latency_ns: Option<u64>,
    pub slo_iops: Option<u64>,
    /// The scenario's read percentage and request size, as the simulator reports them (a real
    /// run's report has never carried them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_pct: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u32>,
    pub reads: u64,
    pub writes: u64,
    pub iops: f64,
    pub read_latency_ns_p50: u64,
    pub read_latency_ns_p95: u64,
    pub read_latency_ns_p99: u64,
    pub read_latency_ns_mean: u64,
    pub write_latency_ns_p95: u64,
    pub write_latency_ns_mean: u64,
    /// Tokens per second its completed requests were charged: the scheduler's price when the
    /// dataplane read each one (a read-only device load prices reads lower, as on the server);
    /// with the scheduler off, the profile's mixed-load price.
    pub tokens_per_sec: f64,
    /// LC: p95 read latency within the SLO's target.
    pub slo_met: Option<bool>,
    /// What only a real load generator sees (`None` from the simulator).
    #[serde(flatten)]
    pub client: Option<ClientSide>,
}

/// A real run's figures the simulator has no counterpart for.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClientSide {
    /// Open loop: p99 of the lag between an arrival's scheduled time and its send (the load
    /// generator falling behind shows here, and is part of the latency).
    pub send_lag_ns_p99: Option<u64>,
    /// Failed requests (any status but OK).
    pub errors: u64,
}
