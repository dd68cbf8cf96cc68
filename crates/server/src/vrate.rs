//! The closed loop: per-LC-flow read latency per window → the `qos` rate controller → the
//! device rate the scheduler hands out.
//!
//! # What it implements
//! remote.md's "beyond the published design" (b), wired into the server. The scheduler trusts
//! its device profile; a drive that is slower than its calibration (aged, fuller, hotter, or a
//! profile measured on another drive) breaks SLOs while every tenant stays within its
//! reservation. With `[qos] vrate = "on"`, a control thread measures each latency-critical
//! flow's p95 read latency over every `vrate_window_ms` window, and feeds
//! [`qos::RateController`] (blk-iocost's `vrate` idea, crate `qos`): a miss by a flow that
//! stayed within its reservation lowers the device rate scale, targets met with margin for a
//! few windows raise it again; the scale goes to [`qos::Registry::set_rate_scale_ppm`], so
//! admission and the best-effort share use the corrected rate at once (LC reservations are
//! kept).
//!
//! # Design
//! *Measuring without a lock on the data path.* Each LC flow admitted while the loop is on
//! gets a [`crate::latency::LatencyWindow`]: a log-linear histogram of atomic counters (8 sub-buckets per power
//! of two, so a bucket spans at most 12.5 % of its value) that the worker completing a read
//! increments (one relaxed `fetch_add`). The control thread swaps every counter to zero at the
//! end of a window and reads the p95 from what it took; a read completing during the swap lands
//! in this window or the next, never in both. The p95 reported is the upper edge of its
//! bucket, so the loop errs on the side of "missed".
//!
//! *Within reservation?* A flow's own tokens spent over the window (its `qos` ledger: spent
//! less what it borrowed from the shared bucket's spare tokens) against what its own tokens
//! allow, reservation × (1 + LC surge) × window, with [`RESERVATION_SLACK_PCT`] slack for a
//! burst straddling two windows; a flow over it missing its SLO is its own doing and does not
//! lower the rate. (Counting spare tokens, or judging against the bare reservation, flagged a
//! Poisson flow at exactly its reservation as over it often enough that the loop stalled:
//! LC p95 55–158 ms against a 6 ms SLO in `tests/vrate_emulated.rs`.)
//!
//! Worked example (the test `tests/vrate_emulated.rs`): a profile that promises five times what
//! the emulated drive sustains gives the best-effort writer ~670 writes/s where ~100 are
//! sustainable; the LC flow (1,000 reads/s Poisson, at exactly its 1,000 IOPS reservation) sees p95
//! ≈ 11 ms against a 6 ms SLO. With 150 ms windows and `step_down_ppm` = 150,000 the scale
//! falls 1.0 → 0.85 → 0.72 … and the BE share with it; after 3 s it sits at 0.10–0.12 (BE
//! ~80 writes/s; it undershoots a little because the drive's queue of writes drains a few
//! windows after each cut) and the LC p95 over the next 2.5 s is 0.7–1.2 ms.
//!
//! # What it leaves out
//! Write-latency targets and per-flow corrections (one scale for the device, as in the `qos`
//! crate), and flows of several servers sharing one drive.
//!
//! # Config keys
//! `[qos] vrate = "off" | "on"`, `vrate_window_ms` (100), `[qos.vrate_tuning]` (crate `qos`'s
//! [`qos::VrateConfig`]: `step_down_ppm`, `step_up_ppm`, `raise_below_pct`,
//! `raise_after_windows`, `min_scale_ppm`, `max_scale_ppm`, `min_reads_per_window`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::control::Control;
use crate::shared::Shared;

/// Percent over its reservation a flow may spend in a window and still count as within it.
pub const RESERVATION_SLACK_PCT: u64 = 10;
/// How often the control thread checks for shutdown while it waits for a window to end.
const STOP_POLL_MS: u64 = 10;

/// The control loop's state between windows.
pub struct VrateLoop {
    controller: qos::RateController,
    window_ns: u64,
    /// Tokens each LC flow had spent at the end of the previous window.
    spent_mtok: HashMap<qos::TenantId, u64>,
}

impl VrateLoop {
    pub fn new(
        config: qos::VrateConfig,
        window_ns: u64,
    ) -> Result<VrateLoop, qos::VrateConfigError> {
        Ok(VrateLoop {
            controller: qos::RateController::new(config)?,
            window_ns,
            spent_mtok: HashMap::new(),
        })
    }

    /// Ends a window: samples every LC flow, lets the controller decide, applies the scale.
    /// A flow seen for the first time only sets its baseline.
    pub fn end_window(&mut self, control: &mut Control) -> (qos::Decision, Vec<qos::WindowSample>) {
        let mut samples = Vec::new();
        let mut seen = HashMap::with_capacity(self.spent_mtok.len());
        let surge_ppm = control.lc_surge_ppm();
        for (id, handle, window) in control.lc_windows() {
            let counters = handle.counters();
            let spent = counters.spent_mtok.saturating_sub(counters.borrowed_mtok);
            seen.insert(id, spent);
            let (reads, p95_ns) = window.take();
            let Some(&before) = self.spent_mtok.get(&id) else {
                continue;
            };
            let qos::TenantSpec::LatencyCritical(slo) = handle.spec() else {
                continue;
            };
            let own_rate =
                qos::lc_earning_rate_mtok_per_sec(handle.reservation_mtok_per_sec(), surge_ppm);
            let allowed = u128::from(own_rate)
                * u128::from(self.window_ns)
                * u128::from(100 + RESERVATION_SLACK_PCT)
                / 100
                / 1_000_000_000;
            let usage = if u128::from(spent.saturating_sub(before)) <= allowed {
                qos::Usage::WithinReservation
            } else {
                qos::Usage::OverReservation
            };
            samples.push(qos::WindowSample {
                tenant: id,
                slo_p95_read_latency_ns: slo.p95_read_latency_ns,
                measured_p95_read_latency_ns: p95_ns,
                reads,
                usage,
            });
        }
        self.spent_mtok = seen;
        let decision = self.controller.observe(&samples);
        if let Err(e) = control.set_rate_scale_ppm(self.controller.scale_ppm()) {
            tracing::error!(error = %e, "rate scale refused by the registry");
        }
        (decision, samples)
    }

    pub fn scale_ppm(&self) -> u32 {
        self.controller.scale_ppm()
    }
}

/// The control thread: one window after another until `stop`.
pub fn run(shared: Arc<Shared>, mut vrate: VrateLoop, stop: Arc<AtomicBool>) {
    let window_ms = (vrate.window_ns / 1_000_000).max(1);
    loop {
        let mut waited_ms = 0;
        while waited_ms < window_ms {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let step = STOP_POLL_MS.min(window_ms - waited_ms);
            std::thread::sleep(Duration::from_millis(step));
            waited_ms += step;
        }
        let (decision, samples) = {
            let mut control = shared.lock_control();
            vrate.end_window(&mut control)
        };
        shared.metrics.set_rate_scale_ppm(vrate.scale_ppm());
        if decision != qos::Decision::Hold {
            tracing::info!(
                ?decision,
                scale_ppm = vrate.scale_ppm(),
                flows = samples.len(),
                worst_p95_ns = samples
                    .iter()
                    .map(|s| s.measured_p95_read_latency_ns)
                    .max()
                    .unwrap_or(0),
                "device rate scale changed"
            );
        }
    }
}
