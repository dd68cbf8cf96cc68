//! The PCIe link between host memory and the controller.
//!
//! ## What it models
//! A PCIe link of `generation` × `lanes` carries, in each direction independently, the
//! controller's DMA: write data host → device, read data and completion entries device → host.
//! Transfers in one direction serialize (each waits for the link to be free), so a burst of
//! 128 KiB reads delays the completion entries queued behind it. Each DMA also pays a fixed
//! `dma_setup_ns` (request TLP round trip, headers).
//!
//! Worked example: Gen3 ×4 moves 8 GT/s × 4 lanes × 128/130 = 3.94 GB/s; a 4 KiB read's data
//! takes 4096 B / 3.94 GB/s = 1,040 ns plus 300 ns setup.
//!
//! Doorbell writes (MMIO, host → device) and command fetches are costed by the controller
//! (`pcie.doorbell_ns`, `ctrl.fetch_ns`): they are small and latency-bound, not bandwidth-bound.
//!
//! ## What it leaves out
//! Flow-control credits, TLP size limits, link power states.

use engine::SimTime;

use crate::config::PcieConfig;

/// Direction of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    HostToDevice,
    DeviceToHost,
}

pub struct PcieLink {
    bytes_per_sec: u64,
    dma_setup_ns: u64,
    pub doorbell_ns: u64,
    free_at: [SimTime; 2],
    pub bytes_moved: [u64; 2],
}

/// Usable bytes per second of one lane of a PCIe generation (after line encoding).
fn lane_bytes_per_sec(generation: u32) -> u64 {
    match generation {
        1 => 250_000_000,   // 2.5 GT/s, 8b/10b
        2 => 500_000_000,   // 5 GT/s, 8b/10b
        3 => 984_615_384,   // 8 GT/s, 128b/130b
        4 => 1_969_230_769, // 16 GT/s, 128b/130b
        _ => 3_938_461_538, // 32 GT/s, 128b/130b
    }
}

impl PcieLink {
    pub fn new(config: &PcieConfig) -> PcieLink {
        PcieLink {
            bytes_per_sec: lane_bytes_per_sec(config.generation) * config.lanes as u64,
            dma_setup_ns: config.dma_setup_ns,
            doorbell_ns: config.doorbell_ns,
            free_at: [SimTime::ZERO; 2],
            bytes_moved: [0; 2],
        }
    }

    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        (bytes as u128 * 1_000_000_000).div_ceil(self.bytes_per_sec as u128) as u64
    }

    /// Moves `bytes` in `direction` starting no earlier than `now`; returns when it is done.
    pub fn dma(&mut self, now: SimTime, direction: Direction, bytes: u64) -> SimTime {
        let d = direction as usize;
        let start = self.free_at[d].max(now);
        let end = start + self.dma_setup_ns + self.transfer_ns(bytes);
        self.free_at[d] = end;
        self.bytes_moved[d] += bytes;
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gen3_x4_moves_4k_in_about_a_microsecond() {
        let link = PcieLink::new(&PcieConfig {
            generation: 3,
            lanes: 4,
            doorbell_ns: 500,
            dma_setup_ns: 300,
        });
        assert_eq!(link.transfer_ns(4096), 1_041); // 4096 B / 3.938 GB/s, rounded up
    }

    #[test]
    fn transfers_in_one_direction_serialize_but_not_across_directions() {
        let mut link = PcieLink::new(&PcieConfig {
            generation: 3,
            lanes: 4,
            doorbell_ns: 500,
            dma_setup_ns: 0,
        });
        let a = link.dma(SimTime::ZERO, Direction::DeviceToHost, 4096);
        let b = link.dma(SimTime::ZERO, Direction::DeviceToHost, 4096);
        let c = link.dma(SimTime::ZERO, Direction::HostToDevice, 4096);
        assert_eq!((a.0, b.0, c.0), (1_041, 2_082, 1_041));
    }
}
