//! Runs: wires the models into simulations and reports their results.
//!
//! - [`device_run`]: device-level runs — fio-like jobs straight into the SSD model's NVMe
//!   queues through a thin host with fixed costs (`ullstack sim --device … --job …`).
//! - [`net`], [`remote`]: the remote-flash server — TCP links, dataplane threads running the
//!   real `qos` scheduler, the device model — driven by `ullstack bench` scenario files.
//! - [`config`]: run configuration (TOML) and host cost presets.
//! - [`report`]: `summary.json`, latency CSVs, the terminal table.
//! - [`series`]: `timeseries.csv`, per-window rates, latencies, occupancy, GC and CPU.
//! - [`stack`]: named stacks (`--stack NAME`): the switch sets the studies compare.
//! - [`trace_replay`]: a block trace as a device-level job (`ullstack sim --device … --trace …`).
//! - [`system`]: full-system runs — applications on the host model over the device model,
//!   in lock-step (`ullstack sim` with no arguments, or `--system FILE.toml`).

pub mod config;
pub mod device_run;
pub mod net;
pub mod remote;
pub mod report;
pub mod series;
pub mod stack;
pub mod system;
pub mod trace_replay;

pub use config::{DeviceRunConfig, HostCosts, RunFileSettings};
pub use device_run::{DeviceRun, Progress, RunError, Silent, Spinner};
pub use report::RunSummary;
pub use trace_replay::{TraceInfo, TraceSpec};
