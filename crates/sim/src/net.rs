//! The network between remote tenants and the remote-flash server: a TCP link per client.
//!
//! # What it models
//! A client machine talks to the server over TCP on an Ethernet link. A message (a request
//! header, a write's payload, a read's reply) costs, in order:
//! 1. **the sender's TCP processing**: the system calls, the TCP/IP stack and the NIC driver on
//!    the sending side (`client_message_ns` on a client, `server_message_ns` on the server);
//! 2. **serialization** onto the wire: `bytes / bandwidth`, one message after another — a
//!    direction of a link is a FIFO pipe, so a message waits for the one before it to leave;
//! 3. **propagation**: the one-way latency (`latency_ns`: NIC, switch and wire);
//! 4. **the receiver's TCP processing** (the other side's per-message cost).
//!
//! The server's costs are CPU time of the dataplane thread that owns the connection, so
//! `sim::remote` books them on that thread (they queue behind its other work); a client's are
//! pure delay (client machines are many and not the bottleneck in the experiments modelled).
//!
//! Worked example (defaults: 5 µs one way, 10 Gb/s, 5 µs per message on a client, 0.4 µs on
//! the server): a 4 KiB read at QD1 sends a 32-byte request — 5 µs client TCP, 26 ns on the
//! wire, 5 µs propagation, 0.4 µs server TCP — and gets back 32 + 4096 bytes: 0.4 µs server
//! TCP, 3.3 µs on the wire, 5 µs propagation, 5 µs client TCP. The network adds 24.1 µs to the
//! device's time, of which 10 µs is propagation and 3.3 µs serialization (what
//! `remote::tests::the_network_adds_its_latency_and_no_more_at_qd1` checks with the costs set
//! to zero).
//!
//! # Where the defaults come from
//! Not measured here (no physical network): they are assumptions of the order of a 10 GbE
//! datacenter link, stated so a run's report can be read. `latency_ns` 5 µs: one switch hop and
//! two NICs; `bandwidth_bytes_per_sec` 1.25 GB/s: 10 Gb/s; `client_message_ns` 5 µs: a Linux
//! TCP send or receive of a small message (on this VM a loopback TCP echo, two sends and two
//! receives, measured 4.3–4.4 µs p50: `qd1_latency`, CHANGELOG.md); `server_message_ns`
//! 0.4 µs: a polling dataplane's per-message TCP cost, one part of the 1.2 µs per request that
//! makes the published dataplane's ~850 K 4 KB IOPS per core (`remote::DataplaneCosts`).
//!
//! # What it leaves out
//! Congestion, loss and retransmission, TCP windows and Nagle, segmentation (a message is one
//! unit on the wire), interrupt coalescing, and sharing of a NIC between clients (each client
//! has its own link; the server's NIC is not a bottleneck at these rates).
//!
//! # Config keys (`[sim.net]` of a remote scenario)
//! `latency_ns`, `bandwidth_bytes_per_sec`, `client_message_ns`, `server_message_ns`.

use engine::SimTime;
use serde::{Deserialize, Serialize};

/// Bytes of the own protocol's fixed header on every request and reply (docs/protocol.md).
pub const MESSAGE_HEADER_BYTES: u64 = 32;

const NS_PER_SEC: u128 = 1_000_000_000;

/// A link's parameters (both directions alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetConfig {
    /// One-way propagation latency (NICs, switch, wire), ns.
    pub latency_ns: u64,
    /// Wire bandwidth of each direction, bytes per second (0: infinite).
    pub bandwidth_bytes_per_sec: u64,
    /// A client's TCP processing per message sent or received, ns (delay only).
    pub client_message_ns: u64,
    /// The server's TCP processing per message sent or received, ns (dataplane CPU time).
    pub server_message_ns: u64,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            latency_ns: 5_000,
            bandwidth_bytes_per_sec: 1_250_000_000,
            client_message_ns: 5_000,
            server_message_ns: 400,
        }
    }
}

impl NetConfig {
    /// Nanoseconds `bytes` occupy the wire (rounded up; 0 with infinite bandwidth).
    pub fn wire_ns(&self, bytes: u64) -> u64 {
        if self.bandwidth_bytes_per_sec == 0 {
            return 0;
        }
        let ns =
            (u128::from(bytes) * NS_PER_SEC).div_ceil(u128::from(self.bandwidth_bytes_per_sec));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// One direction of a link: messages leave in order, one at a time.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pipe {
    /// When the wire is free for the next message.
    free_at: SimTime,
}

impl Pipe {
    /// A message handed to the wire at `ready` (after the sender's processing) of `bytes`:
    /// returns when its last byte reaches the receiver's NIC.
    pub fn transmit(&mut self, cfg: &NetConfig, ready: SimTime, bytes: u64) -> SimTime {
        let start = ready.max(self.free_at);
        let done = start + cfg.wire_ns(bytes);
        assert!(done >= self.free_at, "a pipe's wire went back in time");
        self.free_at = done;
        done + cfg.latency_ns
    }
}

/// A client's TCP connection to the server: a pipe each way.
#[derive(Clone, Copy, Debug, Default)]
pub struct Link {
    to_server: Pipe,
    to_client: Pipe,
}

impl Link {
    /// A client sends `bytes` at `now`: when the message is at the server's NIC (the server's
    /// receive cost is the caller's to book on its dataplane thread).
    pub fn client_send(&mut self, cfg: &NetConfig, now: SimTime, bytes: u64) -> SimTime {
        self.to_server
            .transmit(cfg, now + cfg.client_message_ns, bytes)
    }

    /// The server hands `bytes` to the wire at `sent` (its send cost already booked): when the
    /// client application has the message.
    pub fn server_send(&mut self, cfg: &NetConfig, sent: SimTime, bytes: u64) -> SimTime {
        self.to_client.transmit(cfg, sent, bytes) + cfg.client_message_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_link_adds_costs_wire_time_and_latency_exactly() {
        let cfg = NetConfig::default();
        let mut link = Link::default();
        let t0 = SimTime(1_000_000);
        // Request: 5 µs client TCP + 26 ns (32 B at 1.25 GB/s, rounded up) + 5 µs.
        assert_eq!(link.client_send(&cfg, t0, 32), t0 + 5_000 + 26 + 5_000);
        // Reply: 4128 B = 3303 ns on the wire (rounded up), 5 µs, 5 µs client TCP.
        let sent = SimTime(2_000_000);
        assert_eq!(
            link.server_send(&cfg, sent, 4_128),
            sent + 3_303 + 5_000 + 5_000
        );
    }

    #[test]
    fn back_to_back_messages_queue_for_the_wire() {
        let cfg = NetConfig {
            latency_ns: 1_000,
            bandwidth_bytes_per_sec: 1_000_000_000, // 1 byte per ns
            client_message_ns: 0,
            server_message_ns: 0,
        };
        let mut pipe = Pipe::default();
        let t = SimTime(100);
        assert_eq!(pipe.transmit(&cfg, t, 500), SimTime(100 + 500 + 1_000));
        // Ready at the same time: waits for the first to leave the wire.
        assert_eq!(pipe.transmit(&cfg, t, 500), SimTime(100 + 1_000 + 1_000));
        // Ready after the wire is free: no wait.
        assert_eq!(
            pipe.transmit(&cfg, SimTime(5_000), 10),
            SimTime(5_000 + 10 + 1_000)
        );
    }

    #[test]
    fn infinite_bandwidth_costs_no_wire_time() {
        let cfg = NetConfig {
            bandwidth_bytes_per_sec: 0,
            ..NetConfig::default()
        };
        assert_eq!(cfg.wire_ns(1 << 30), 0);
    }
}
