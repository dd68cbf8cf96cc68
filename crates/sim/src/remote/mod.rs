//! The remote-flash server in the simulator: tenants on client machines, TCP links, the
//! dataplane threads of `ullstack serve` with the real QoS scheduler, and the SSD model.
//!
//! # What it models
//! The published remote-flash dataplane (and `ullstack serve`, which rebuilds it): a few
//! threads, each owning its connections and one NVMe queue pair, each running a
//! run-to-completion loop. One iteration of a thread's loop ([`run`]'s `step`):
//! 1. read what is at the NIC — at most `batch_limit` (64) requests, adaptive batching: take
//!    what is ready — paying `net.server_message_ns + costs.request_ns` of CPU for each, and
//!    queue each in the thread's scheduler with its token cost;
//! 2. run one **scheduling round of crate `qos`** at the thread's current time (the very
//!    `qos::Scheduler` the server's workers run, through the adapter they run,
//!    `qos::SchedShare`, with its FIFO baseline for `scheduler = "off"`), when anything is
//!    queued — the server's worker skips empty rounds too. Each request is priced as it is
//!    queued, by the scheduler (a read costs less while every tenant is read-only, as on the
//!    server);
//! 3. submit what the round released to the device's submission queue (`costs.submit_ns`
//!    each; beyond [`run::SQ_DEPTH`] entries they wait in the thread);
//! 4. reap the device's completions and send the replies (`costs.complete_ns +
//!    net.server_message_ns` each), through the connection's link ([`crate::net`]).
//!
//! Each iteration also costs `costs.loop_ns`. A thread with nothing to do sleeps until a
//! request reaches its NIC or a completion its CQ; one whose scheduler holds requests back
//! spins, which the model approximates by a round every `costs.spin_round_ns`.
//! Besides per-tenant figures, a run reports `device_iops_in_window`: commands submitted to
//! the device inside the measured window, per second — what the server sustained, where the
//! tenants' IOPS (requests issued in the window, served whenever) show what was offered.
//! Tenants are the `ullstack bench` tenant spec (crate `scenario`): open loop
//! (Poisson arrivals at a rate) or closed loop (a queue depth), a read percentage, a size, an
//! SLO for latency-critical ones; each connection of a tenant registers a flow with its share
//! of the SLO's IOPS (as `bench` does) and is placed on the threads round-robin (as the server
//! places connections). Admission control is the real registry's: a scenario whose SLOs do not
//! fit the profile is refused, naming the tenant and the reason.
//!
//! Worked example (defaults, zssd, one LC tenant reading 4 KiB at QD1): the client's request
//! reaches the server after 5 + 0.026 + 5 µs; the thread spends 0.1 (loop) + 0.4 + 0.2
//! (read and price) + 0.1 (submit) µs before the doorbell; the device reads (≈ 9 µs); the
//! thread reaps and replies (0.1 + 0.4 µs); the reply takes 3.3 + 5 + 5 µs. Client-observed:
//! the device's time plus ≈ 25 µs.
//!
//! # What it leaves out
//! The CPU cost of a scheduling round as tenants grow (`loop_ns` is flat), FUA (a FUA write is
//! a plain write to the model), Zipf address patterns (refused, naming the tenant), the
//! closed-loop rate correction (`vrate`) and TLS. Client machines are not contended: their TCP
//! cost is delay only.
//!
//! # Config
//! A `ullstack bench` scenario file plus a `[sim]` table ([`config`]); `bench` ignores `[sim]`,
//! so one file drives both the real server and the model.

pub mod config;
pub mod run;

pub use config::{DataplaneCosts, RemoteConfigError, RemoteRunConfig, ServerModel};
/// Whether the token scheduler runs (`[sim] scheduler = "on" | "off"`).
pub use qos::SchedulerMode;
pub use run::{run, RemoteError, RemoteSummary};

#[cfg(test)]
mod tests;
