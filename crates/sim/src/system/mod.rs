//! Full-system runs: applications on a modelled host (crate `host`) over the modelled SSD
//! (crate `device`), advanced in lock-step.
//!
//! - [`config`]: the system config in TOML (host preset, device preset, processes, duration,
//!   seed) and the embedded default (`apache` + `pagerank` on `arm8` + `zssd`, 10 s).
//! - [`run`]: the lock-step loop and the message adapter between host and device.
//! - [`summary`]: `summary.json`, CSVs and the terminal table.
//! - `trace`: a block trace as a process (`trace = "file"`), streamed by each run.
//!
//! [`run`](fn@run) runs the configured processes and, if the config asks for it (`alone =
//! true`), the latency-critical online services again by themselves, so their response times
//! can be compared co-run vs alone.

pub mod config;
pub mod run;
pub mod summary;
mod trace;

pub use config::{SystemConfig, SystemConfigError, DEFAULT_SYSTEM_TOML};
pub use run::{run_system, run_system_with_series, SeriesOut, SystemRunError, SystemRunResult};
pub use summary::{SystemRunSummary, SystemSummary};

use crate::device_run::Progress;

/// Runs the system and, if `cfg.alone`, the alone reference.
pub fn run(
    cfg: &SystemConfig,
    progress: &mut dyn Progress,
) -> Result<SystemSummary, SystemRunError> {
    run_with_series(cfg, progress, None)
}

/// [`run`], writing the co-run's time series (`series`; the alone reference has none).
pub fn run_with_series(
    cfg: &SystemConfig,
    progress: &mut dyn Progress,
    series: Option<SeriesOut>,
) -> Result<SystemSummary, SystemRunError> {
    let main = run_system_with_series(cfg, progress, series)?;
    let run = SystemRunSummary::new(cfg, &main);
    let alone = match cfg.alone.then(|| cfg.alone_config()).flatten() {
        Some(alone_cfg) => {
            let r = run_system(&alone_cfg, progress)?;
            Some(SystemRunSummary::new(&alone_cfg, &r))
        }
        None => None,
    };
    Ok(SystemSummary { run, alone })
}
