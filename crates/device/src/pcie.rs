//! The PCIe link between host memory and the controller.
//!
//! ## What it models
//! A PCIe link of `generation` × `lanes` carries, in each direction independently, the
//! controller's DMA: write data host → device, read data and completion entries device → host.
//! Each direction's wire carries one transfer at a time (a burst of 128 KiB reads delays the
//! completion entries queued behind it), and every transfer pays for its packets' overhead, not
//! only its payload.
//!
//! **Protocol overhead.** Data moves in transaction-layer packets (TLPs) of at most
//! `max_payload_bytes` (the negotiated Max_Payload_Size, 256 B on most root complexes). On the
//! wire each TLP adds, per the PCIe base spec (Gen3 framing): a 4 B STP token carrying the
//! sequence number, a 16 B header (4 DW: memory write with a 64-bit address) and a 4 B LCRC —
//! `tlp_overhead_bytes` = 24. The line encoding (128b/130b from Gen3, 8b/10b before) is already
//! out of the per-lane rate. Gen1/2 framing (1 B STP + 2 B sequence + 16 B header + 4 B LCRC +
//! 1 B END) also comes to 24 B.
//!
//! **Pipelining.** Each DMA also waits `dma_setup_ns` before its first byte is on the wire (the
//! DMA engine's setup; for host → device data, the read request's round trip). That is latency,
//! not wire time: a transfer's setup overlaps the transfers ahead of it, so back-to-back 4 KiB
//! transfers are bounded by the wire, not by setup + wire.
//!
//! Worked example (Gen3 ×4, MPS 256 B): the wire moves 8 GT/s × 4 lanes × 128/130 = 3.938 GB/s.
//! A 4 KiB read's data is 16 TLPs × (256 + 24) B = 4,480 B: 1,138 ns on the wire, so one 4 KiB
//! transfer alone takes 250 + 1,138 = 1,388 ns and 32 queued ones 250 + 32 × 1,138 ns (the
//! link's 4 KiB ceiling: 879 K transfers/s, 3.6 GB/s of payload). Large transfers carry
//! 256 / 280 of the wire rate as payload: 3.938 × 256 / 280 = 3.60 GB/s, below the 3.94 GB/s a
//! payload-only model gives. A 16 B completion entry is one 40 B TLP: 11 ns.
//!
//! **Write data comes as read completions.** Host → device data is not pushed by the host: the
//! controller reads it from host memory (memory-read requests up, completions with data down),
//! and the root complex answers a read in completions split at its Read Completion Boundary
//! (PCIe base spec 3.0, §2.3.1.1: a completer may split a completion at RCB-aligned addresses;
//! a root port's RCB is 64 B or 128 B). Root complexes return cache-line-sized completions, 64 B
//! each (Neugebauer et al., "Understanding PCIe performance for end host networking", SIGCOMM
//! 2018, whose PCIe model answers a device's DMA reads in completions of the 64 B RCB), so
//! each `pcie.read_completion_bytes` (64) of write data pays a completion TLP whose 3-DW header
//! makes it 4 B lighter than a memory write's (`tlp_overhead_bytes` − 4 = 20 B). A 4 KiB write's
//! data is 64 × (64 + 20) = 5,376 B on the wire: 1,366 ns, so the link moves at most 733 K
//! 4 KiB writes (3.0 GB/s of payload, and 3.0 GB/s for large writes) against 879 K reads
//! (3.6 GB/s): a drive on this link writes slower than it reads even when nothing inside it is
//! slower.
//!
//! Doorbell writes (MMIO, host → device) and command fetches are costed by the controller
//! (`pcie.doorbell_ns`, `ctrl.fetch_ns`): they are small and latency-bound, not bandwidth-bound.
//!
//! ## What it leaves out
//! Flow-control credits (the model never runs out), DLLPs (ACKs and flow-control updates: a few
//! 8 B packets per several TLPs, mostly in the opposite direction to the data) and SKP ordered
//! sets (one 16-symbol set per ~370 blocks, 0.3 %); the read requests a host → device transfer
//! sends device → host (24 B each per up to 512 B of data, on the other direction's wire);
//! link power states.

use engine::SimTime;

use crate::config::PcieConfig;

/// Direction of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    HostToDevice,
    DeviceToHost,
}

pub struct PcieLink {
    /// Wire rate of the link after line encoding, bytes per second.
    bytes_per_sec: u64,
    dma_setup_ns: u64,
    max_payload_bytes: u64,
    tlp_overhead_bytes: u64,
    /// Data bytes per completion TLP of host → device data (at most a TLP's payload).
    completion_bytes: u64,
    /// Wire bytes a completion TLP adds: a 3-DW header, 4 B less than a memory write's 4 DW.
    completion_overhead_bytes: u64,
    pub doorbell_ns: u64,
    /// When each direction's wire is next free.
    free_at: [SimTime; 2],
    /// Per direction, the wire times of the two payload sizes last moved (see
    /// [`dma`](Self::dma)).
    recent: [RecentSizes; 2],
    /// Payload bytes moved per direction.
    pub bytes_moved: [u64; 2],
}

/// Two payload sizes and their wire times, the older replaced first. A run moves few sizes,
/// alternating (device → host: a read's data, then its 16 B completion entry), and a wire
/// time costs two divisions (TLPs, then nanoseconds; one of them by a 128-bit divisor).
#[derive(Clone, Copy, Debug)]
struct RecentSizes {
    bytes: [u64; 2],
    ns: [u64; 2],
    /// The entry replaced next.
    older: usize,
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
        assert!(
            config.max_payload_bytes > 0 && config.read_completion_bytes > 0,
            "pcie.max_payload_bytes and pcie.read_completion_bytes must be positive (validated \
             config)"
        );
        let mut link = PcieLink {
            bytes_per_sec: lane_bytes_per_sec(config.generation) * config.lanes as u64,
            dma_setup_ns: config.dma_setup_ns,
            max_payload_bytes: config.max_payload_bytes as u64,
            tlp_overhead_bytes: config.tlp_overhead_bytes as u64,
            completion_bytes: config.read_completion_bytes.min(config.max_payload_bytes) as u64,
            completion_overhead_bytes: config.tlp_overhead_bytes.saturating_sub(4) as u64,
            doorbell_ns: config.doorbell_ns,
            free_at: [SimTime::ZERO; 2],
            recent: [RecentSizes {
                bytes: [0; 2],
                ns: [0; 2],
                older: 0,
            }; 2],
            bytes_moved: [0; 2],
        };
        // Start from true entries (a completion entry, a 4 KiB unit), so none is a sentinel.
        for direction in [Direction::HostToDevice, Direction::DeviceToHost] {
            let sizes = [COMPLETION_ENTRY_BYTES, 4096];
            link.recent[direction as usize] = RecentSizes {
                bytes: sizes,
                ns: sizes.map(|b| link.transfer_ns(direction, b)),
                older: 0,
            };
        }
        link
    }

    /// Bytes on the wire for a payload of `bytes` in `direction`: the payload plus each TLP's
    /// overhead; device → host in memory writes of up to Max_Payload_Size, host → device in
    /// read completions of up to `pcie.read_completion_bytes` (module essay).
    pub fn wire_bytes(&self, direction: Direction, bytes: u64) -> u64 {
        let (per_tlp, overhead) = match direction {
            Direction::DeviceToHost => (self.max_payload_bytes, self.tlp_overhead_bytes),
            Direction::HostToDevice => (self.completion_bytes, self.completion_overhead_bytes),
        };
        bytes + bytes.div_ceil(per_tlp).max(1) * overhead
    }

    /// Wire time of a payload of `bytes` in `direction`.
    pub fn transfer_ns(&self, direction: Direction, bytes: u64) -> u64 {
        (self.wire_bytes(direction, bytes) as u128 * 1_000_000_000)
            .div_ceil(self.bytes_per_sec as u128) as u64
    }

    /// Moves `bytes` in `direction`, asked for at `now`: it goes on the wire once its setup is
    /// done and the wire is free. Returns when the last byte is across.
    /// The wire time comes from the two sizes last moved that way when it is one of them.
    #[inline]
    pub fn dma(&mut self, now: SimTime, direction: Direction, bytes: u64) -> SimTime {
        let d = direction as usize;
        let start = self.free_at[d].max(now + self.dma_setup_ns);
        let recent = &self.recent[d];
        let wire_ns = if recent.bytes[0] == bytes {
            recent.ns[0]
        } else if recent.bytes[1] == bytes {
            recent.ns[1]
        } else {
            self.remember(direction, bytes)
        };
        let end = start + wire_ns;
        self.free_at[d] = end;
        self.bytes_moved[d] += bytes;
        end
    }

    /// Computes the wire time of `bytes` moved in `direction` and keeps it in place of the
    /// older of the two remembered sizes.
    #[cold]
    fn remember(&mut self, direction: Direction, bytes: u64) -> u64 {
        let ns = self.transfer_ns(direction, bytes);
        let recent = &mut self.recent[direction as usize];
        recent.bytes[recent.older] = bytes;
        recent.ns[recent.older] = ns;
        recent.older ^= 1;
        ns
    }
}

/// Bytes of an NVMe completion queue entry.
pub const COMPLETION_ENTRY_BYTES: u64 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    fn gen3_x4(dma_setup_ns: u64) -> PcieLink {
        PcieLink::new(&PcieConfig {
            generation: 3,
            lanes: 4,
            doorbell_ns: 500,
            dma_setup_ns,
            max_payload_bytes: 256,
            tlp_overhead_bytes: 24,
            read_completion_bytes: 64,
        })
    }

    #[test]
    fn gen3_x4_moves_4k_in_16_tlps() {
        let link = gen3_x4(300);
        let up = Direction::DeviceToHost;
        assert_eq!(link.wire_bytes(up, 4096), 4096 + 16 * 24);
        assert_eq!(link.transfer_ns(up, 4096), 1_138); // 4480 B / 3.938 GB/s, rounded up
        assert_eq!(link.transfer_ns(up, 16), 11); // one 40 B TLP
    }

    /// Write data arrives in 64 B read completions with 3-DW headers: 64 × 84 B for 4 KiB.
    #[test]
    fn host_to_device_data_pays_a_completion_per_64_bytes() {
        let link = gen3_x4(300);
        let down = Direction::HostToDevice;
        assert_eq!(link.wire_bytes(down, 4096), 64 * (64 + 20));
        assert_eq!(link.transfer_ns(down, 4096), 1_366); // 5376 B / 3.938 GB/s, rounded up
                                                         // A root complex that does not split answers in Max_Payload_Size completions.
        let whole = PcieLink::new(&PcieConfig {
            generation: 3,
            lanes: 4,
            doorbell_ns: 500,
            dma_setup_ns: 0,
            max_payload_bytes: 256,
            tlp_overhead_bytes: 24,
            read_completion_bytes: 4096,
        });
        assert_eq!(whole.wire_bytes(down, 4096), 16 * (256 + 20));
    }

    /// The remembered wire times are the computed ones, whatever sizes come in what order.
    #[test]
    fn remembered_wire_times_are_the_computed_ones() {
        let mut link = gen3_x4(0);
        let reference = gen3_x4(0);
        let sizes = [
            4096, 16, 4096, 512, 16, 131_072, 512, 512, 4096, 1, 16, 8192,
        ];
        for direction in [Direction::DeviceToHost, Direction::HostToDevice] {
            for &bytes in &sizes {
                let free = link.free_at[direction as usize];
                let end = link.dma(SimTime::ZERO, direction, bytes);
                assert_eq!(end.0 - free.0, reference.transfer_ns(direction, bytes));
            }
        }
    }

    #[test]
    fn transfers_in_one_direction_serialize_but_not_across_directions() {
        let mut link = gen3_x4(0);
        let a = link.dma(SimTime::ZERO, Direction::DeviceToHost, 4096);
        let b = link.dma(SimTime::ZERO, Direction::DeviceToHost, 4096);
        let c = link.dma(SimTime::ZERO, Direction::HostToDevice, 4096);
        assert_eq!((a.0, b.0, c.0), (1_138, 2_276, 1_366));
    }

    /// Setup overlaps the transfers ahead: 32 queued 4 KiB reads take one setup plus 32 wire
    /// times (a serial setup would add 31 × 300 ns more).
    #[test]
    fn setup_overlaps_transfers_ahead() {
        let mut link = gen3_x4(300);
        let last = (0..32)
            .map(|_| link.dma(SimTime::ZERO, Direction::DeviceToHost, 4096))
            .last()
            .unwrap();
        assert_eq!(last.0, 300 + 32 * 1_138);
    }

    /// Large reads carry 256/280 of the wire rate as payload: about 3.6 GB/s on Gen3 ×4, not the
    /// 3.94 GB/s of the raw lanes.
    #[test]
    fn sequential_128k_payload_rate_pays_the_tlp_overhead() {
        let mut link = gen3_x4(300);
        let n = 1000u64;
        let mut end = SimTime::ZERO;
        for _ in 0..n {
            end = link.dma(SimTime::ZERO, Direction::DeviceToHost, 128 << 10);
        }
        let mb_per_sec = n * (128 << 10) * 1000 / end.0;
        assert!(
            (3_550..=3_650).contains(&mb_per_sec),
            "128 KiB payload rate {mb_per_sec} MB/s; expected 3.6 GB/s (3.938 × 256/280)"
        );
    }

    /// Large writes carry 64/84 of the wire rate as payload: 3.0 GB/s on Gen3 ×4, below reads.
    #[test]
    fn sequential_128k_writes_move_slower_than_reads() {
        let mut link = gen3_x4(300);
        let n = 1000u64;
        let mut end = SimTime::ZERO;
        for _ in 0..n {
            end = link.dma(SimTime::ZERO, Direction::HostToDevice, 128 << 10);
        }
        let mb_per_sec = n * (128 << 10) * 1000 / end.0;
        assert!(
            (2_950..=3_050).contains(&mb_per_sec),
            "128 KiB write payload rate {mb_per_sec} MB/s; expected 3.0 GB/s (3.938 × 64/84)"
        );
    }
}
