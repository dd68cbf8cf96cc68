//! The SSD model as a calibration target (`model:NAME`, `model:FILE.toml`): each point is a
//! closed-loop run of crate `device` in virtual time ([`crate::curves::closed_loop_sweep`]), so
//! it is deterministic and far faster than real time. Completion mode does not apply: the
//! model's latency is device time.

use anyhow::anyhow;

use crate::curves::{closed_loop_sweep, CurvePoint};
use crate::sweep::{Completion, Polling, Prober};

/// A closed loop over the SSD model.
pub struct ModelProber<'a> {
    pub device: &'a device::DeviceConfig,
    pub settle_ns: u64,
    pub measure_ns: u64,
}

impl Prober for ModelProber<'_> {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
        _: Completion,
    ) -> anyhow::Result<Vec<CurvePoint>> {
        closed_loop_sweep(
            self.device,
            read_pct,
            size_bytes,
            qds,
            self.settle_ns,
            self.measure_ns,
            1,
        )
        .map_err(|e| anyhow!("{e}"))
    }

    fn polling(&mut self) -> Polling {
        Polling::NotApplicable(
            "model: completion mode does not apply (the model's latency is device time)".into(),
        )
    }
}
