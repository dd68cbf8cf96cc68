//! The latency breakdown: where each block-layer request's time went, layer by layer.
//!
//! ## Per-request timestamps and the latency breakdown
//! Each request records when its first bio entered the block layer, when it was dispatched,
//! when the driver started on it, when the doorbell rang, when the CQE landed and when its
//! completion work started and ended. Per class, the run reports the mean time in each layer:
//! software queue (block-layer entry → dispatch: submission CPU, a cold submission's included,
//! plug and queue waits; `blk.bypass_lc` removes the waits, not the CPU), hardware
//! queue (dispatch work), driver (command build + doorbell), device (doorbell → CQE, split into
//! an estimated service time — the fastest time the run saw for the same direction and size —
//! and the queueing beyond it), irq (CQE → completion work starts: waiting for the core + ISR),
//! poll (CQE → a poller reaps it), block-layer completion, and context switch (a woken thread's
//! wait for its core, switch included). Means are per request, so they add up to the mean
//! request latency plus the wake-up.
//!
//! On a real system blktrace's `Q2D` (queued → issued to the driver) and `D2C` (issued →
//! completed) intervals give a coarser version of this split; here it comes from the model's
//! own timestamps (`blk::Request::t_*`).
//!
//! ## What it leaves out
//! Distributions per layer (means only; the whole request's latency has a histogram per
//! class), and the device's own split of its time (the device model reports that).

use engine::{IoOp, LatencyHistogram, SimTime};
use serde::{Deserialize, Serialize};

use crate::blk::Request;
use crate::SECTORS_PER_PAGE;

#[derive(Clone, Copy, Debug, Default)]
struct Acc {
    sum_ns: u128,
}

/// Sums of per-layer times of one class.
#[derive(Clone, Debug, Default)]
struct BreakdownAcc {
    requests: u64,
    sw: Acc,
    hw: Acc,
    driver: Acc,
    device: Acc,
    irq: Acc,
    poll: Acc,
    blk_complete: Acc,
    ctx_switch: Acc,
    /// Requests per (direction, size in 4 KiB units): each is charged its shape's fastest
    /// device time as service.
    requests_by_shape: Vec<u64>,
}

/// Request shapes per direction: sizes of 1 to 256 pages (larger ones count as 256).
const SHAPES_PER_OP: usize = 257;

fn shape_index(op: IoOp, sectors: u32) -> usize {
    let units = (sectors as u64).div_ceil(SECTORS_PER_PAGE).clamp(1, 256) as usize;
    match op {
        IoOp::Read => units,
        _ => SHAPES_PER_OP + units,
    }
}

/// Mean nanoseconds per request spent in each layer (one class): `breakdown_ns` of a system
/// run's `summary.json`, read back by `study` through this type.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Breakdown {
    /// Requests the means are over.
    pub requests: u64,
    pub software_queue: u64,
    pub hardware_queue: u64,
    pub driver: u64,
    /// Device time beyond the fastest seen for the same direction and size (estimate).
    pub device_queue: u64,
    /// The fastest device time seen for the same direction and size (estimate of service).
    pub device_service: u64,
    pub irq: u64,
    pub poll: u64,
    pub blk_complete: u64,
    pub context_switch: u64,
}

/// The run's per-layer sums, by class (`IoClass::index`).
pub(crate) struct LayerTimes {
    acc: [BreakdownAcc; 2],
    /// Fastest device time seen per request shape.
    device_min_ns: Vec<u64>,
    /// Block-layer request latency (first bio in → completion done), by class.
    request_latency: [LatencyHistogram; 2],
}

impl LayerTimes {
    pub(crate) fn new() -> LayerTimes {
        let mut acc = [BreakdownAcc::default(), BreakdownAcc::default()];
        for a in &mut acc {
            a.requests_by_shape = vec![0; 2 * SHAPES_PER_OP];
        }
        LayerTimes {
            acc,
            device_min_ns: vec![u64::MAX; 2 * SHAPES_PER_OP],
            request_latency: [LatencyHistogram::new(), LatencyHistogram::new()],
        }
    }

    /// Adds request `req`, whose completion work ran from `started` to `now`; `polled` if a
    /// poller reaped its CQE (the wait for it counts as poll, not irq).
    pub(crate) fn record(&mut self, req: &Request, started: SimTime, now: SimTime, polled: bool) {
        let device_ns = req.t_cqe - req.t_doorbell;
        let shape = shape_index(req.op, req.sectors);
        self.device_min_ns[shape] = self.device_min_ns[shape].min(device_ns);
        let acc = &mut self.acc[req.class.index()];
        acc.requests += 1;
        acc.sw.sum_ns += (req.t_dispatch - req.t_submit) as u128;
        acc.hw.sum_ns += (req.t_driver - req.t_dispatch) as u128;
        acc.driver.sum_ns += (req.t_doorbell - req.t_driver) as u128;
        acc.device.sum_ns += device_ns as u128;
        let wait = (started - req.t_cqe) as u128;
        if polled {
            acc.poll.sum_ns += wait;
        } else {
            acc.irq.sum_ns += wait;
        }
        acc.blk_complete.sum_ns += (now - started) as u128;
        acc.requests_by_shape[shape] += 1;
        self.request_latency[req.class.index()].record(now - req.t_submit);
    }

    /// Adds a woken thread's wait for its core (`class` is `IoClass::index`).
    pub(crate) fn record_context_switch(&mut self, class: usize, waited_ns: u64) {
        self.acc[class].ctx_switch.sum_ns += waited_ns as u128;
    }

    pub(crate) fn request_latency(&self) -> [LatencyHistogram; 2] {
        self.request_latency.clone()
    }

    /// The means of class `class` (`IoClass::index`).
    pub(crate) fn means(&self, class: usize) -> Breakdown {
        let acc = &self.acc[class];
        let n = acc.requests;
        if n == 0 {
            return Breakdown::default();
        }
        let mean = |a: &Acc| (a.sum_ns / n as u128) as u64;
        let service_sum: u128 = acc
            .requests_by_shape
            .iter()
            .zip(&self.device_min_ns)
            .map(|(&count, &min)| {
                if count == 0 {
                    0
                } else {
                    count as u128 * min as u128
                }
            })
            .sum();
        let device = mean(&acc.device);
        let service = (service_sum / n as u128) as u64;
        Breakdown {
            requests: n,
            software_queue: mean(&acc.sw),
            hardware_queue: mean(&acc.hw),
            driver: mean(&acc.driver),
            device_queue: device.saturating_sub(service),
            device_service: service.min(device),
            irq: mean(&acc.irq),
            poll: mean(&acc.poll),
            blk_complete: mean(&acc.blk_complete),
            context_switch: mean(&acc.ctx_switch),
        }
    }
}
