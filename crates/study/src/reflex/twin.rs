//! The simulated twin of a real run: the `[sim]` table that models *this machine's* server, so
//! the real server and the model run the very same scenario file and can be compared point
//! for point.
//!
//! # What it models
//! A real run of the study is `ullstack serve`'s server (in process, the emulated device, a
//! given number of workers) and `ullstack bench`'s load generator talking over loopback TCP on
//! this 2-core VM. Its twin is `sim::remote` with the same tenants, device, profile, scheduler
//! and worker count (all in the scenario file), and with the network and the dataplane's CPU
//! costs of this machine instead of the published 10 GbE server's defaults:
//!
//! | key | value | source |
//! | --- | --- | --- |
//! | `net.latency_ns` | 0 | loopback: no wire, no switch |
//! | `net.bandwidth_bytes_per_sec` | 0 (infinite) | the copy is part of the per-message cost |
//! | `net.client_message_ns` | 1 100 | a loopback TCP echo of the same bytes, two sends and two receives: p50 4.3–4.4 µs (`qd1_latency`; CHANGELOG.md) → 1.1 µs a message |
//! | `net.server_message_ns` | 400 | the published dataplane's figure, kept (an assumption: the split below needs one) |
//! | `costs.loop_ns` | 3 700 | fitted, below |
//! | `costs.request_ns` / `submit_ns` / `complete_ns` | 250 / 100 / 100 | fitted, below (split by judgement) |
//!
//! The fit uses two figures of the real server on this VM (`cargo run --release -p server
//! --example qd1_latency`, and `ullstack bench` at QD32 against `ullstack serve --memory 1GiB`;
//! the runs are in CHANGELOG.md), with `m` the server's per-message cost, `w` its
//! per-request work and `L` its cost per loop iteration (epoll, the socket reads and the reply
//! `writev`):
//! * QD1 4 KiB read through the client library on the memory backend, p50 7.1–7.2 µs against
//!   the echo's 4.35 µs: the server's part is the echo's two server messages (2.2 µs) plus
//!   2.8 µs = 4.95 µs for one request in one iteration: `2m + w + L = 4.95 µs`;
//! * pipelined QD32 on the memory backend: 480–591 K requests per server-CPU-second, about 6
//!   requests per iteration: `2m + w + L/6 = 1.87 µs` (the midpoint, 535 K/s).
//!
//! Subtracting: `L × 5/6 = 3.08 µs`, `L` ≈ 3.7 µs, `2m + w` ≈ 1.25 µs; with `m` = 0.4 µs,
//! `w` = 0.45 µs. Worked example, a QD1 4 KiB read on the twin of an emulated `nvme-tlc`: the
//! client sends (1.1 µs), the worker's iteration reads, prices and submits (3.7 + 0.4 + 0.25 +
//! 0.1 µs), the device reads (≈ 68 µs), a second iteration reaps and replies (3.7 + 0.1 +
//! 0.4 µs), the client receives (1.1 µs): the device's time plus ≈ 10.9 µs.
//!
//! # What it leaves out
//! * The real server's adaptive coalescing (`dataplane.coalesce_ns`, `coalesce.rs`: under
//!   pipelined load a worker pauses between iterations, up to 160 µs by default, so each reads
//!   a batch). The fit's "6 requests an iteration" is what the pipelined run's pauses gathered,
//!   folded into `L`; the twin batches only what arrived during an iteration, so under many
//!   open-loop clients (part 4) its iterations are small and its thread busier than the real
//!   one for the same load. `L` holds whatever batches the fitted runs' pauses gathered;
//!   the two commands above print the figures to fit it to the server's ladder as it is.
//! * The real server's wait while the scheduler holds requests back (an `epoll` wait with a
//!   short timeout): the twin's thread spins, as the published polling dataplane does, so its
//!   busy share is 100 % whenever tokens are short.
//! * Its idle policy (a worker that blocks wakes later than one that spins).
//! * The load generator's own CPU: the model's clients are never short of it; on this VM bench
//!   shares the two cores with the server and with whatever else runs, and an open-loop tenant's
//!   latency includes how late bench sent each request (the report gives that send lag).
//! * Other processes on the machine; the report gives each real run's load average.

use std::fmt::Write as _;

/// `[sim.net]`: loopback (see the table above).
pub const LOOPBACK_LATENCY_NS: u64 = 0;
pub const LOOPBACK_BANDWIDTH_BYTES_PER_SEC: u64 = 0;
pub const CLIENT_MESSAGE_NS: u64 = 1_100;
pub const SERVER_MESSAGE_NS: u64 = 400;
/// `[sim.costs]`: this VM's server (see the fit above).
pub const LOOP_NS: u64 = 3_700;
pub const REQUEST_NS: u64 = 250;
pub const SUBMIT_NS: u64 = 100;
pub const COMPLETE_NS: u64 = 100;

/// The `[sim.net]` and `[sim.costs]` tables of a real run's twin. `local`: the device alone
/// (no network, no dataplane cost), the twin of a run that drives the emulated device in
/// process.
pub fn net_and_costs(local: bool) -> String {
    let (lat, bw, client, server, lp, req, sub, comp) = if local {
        (0, 0, 0, 0, 0, 0, 0, 0)
    } else {
        (
            LOOPBACK_LATENCY_NS,
            LOOPBACK_BANDWIDTH_BYTES_PER_SEC,
            CLIENT_MESSAGE_NS,
            SERVER_MESSAGE_NS,
            LOOP_NS,
            REQUEST_NS,
            SUBMIT_NS,
            COMPLETE_NS,
        )
    };
    let mut s = String::new();
    write!(
        s,
        "[sim.net]\nlatency_ns = {lat}\nbandwidth_bytes_per_sec = {bw}\nclient_message_ns = {client}\nserver_message_ns = {server}\n\
         [sim.costs]\nrequest_ns = {req}\nsubmit_ns = {sub}\ncomplete_ns = {comp}\nloop_ns = {lp}\n"
    )
    .expect("string");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fit's two equations hold with the chosen split (to 0.1 µs).
    #[test]
    fn the_costs_reproduce_the_two_measured_figures() {
        let per_request = 2 * SERVER_MESSAGE_NS + REQUEST_NS + SUBMIT_NS + COMPLETE_NS;
        let qd1 = per_request + LOOP_NS;
        let batched = per_request as f64 + LOOP_NS as f64 / 6.0;
        assert!((qd1 as f64 - 4_950.0).abs() <= 100.0, "{qd1}");
        assert!((batched - 1_870.0).abs() <= 100.0, "{batched}");
    }
}
