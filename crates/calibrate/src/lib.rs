//! Calibration: measure a device, a file, an NBD export or the SSD model the way storage papers
//! do, and fit the QoS cost model (`qos::DeviceProfile`: what a write costs in read tokens, and
//! the token rate that keeps p95 read latency under each target) that `ullstack serve` and
//! `ullstack sim` load. `ullstack calibrate TARGET` is this crate behind a command line.
//!
//! # What it implements
//! 1. **Target** ([`target`]): `model:NAME` or `model:FILE.toml` (the SSD model, in virtual
//!    time: deterministic), a regular file (created at `--size` if missing), a block device,
//!    or `nbd://host[:port]/export` ([`nbd`]). The mixes write, so a target that holds data
//!    is refused unless `--destructive` (by the partition-table and filesystem [`signature`]s
//!    of its first bytes, and for NBD by `base:allocation`), and a block device that something
//!    uses (mounted, swap, holders) or a missing name under `/dev` is refused always.
//! 2. **Curves** ([`sweep`]; closed loop: a queue depth of requests kept in flight, uniform
//!    random over the target): p95/p50 read latency against load for read ratios 100, 99, 95,
//!    90, 75 and 50 % at 4 KiB (a queue-depth sweep each); latency against queue depth (the
//!    read-only sweep); sizes 4–128 KiB at QD 1 and 16 (reads). One [`sweep::Prober`] per kind
//!    of target takes the points: [`model`] (crate `device` in virtual time, through
//!    [`curves::closed_loop_sweep`]); [`uring`] (files and block devices through io_uring with
//!    O_DIRECT where the filesystem allows, buffered otherwise, and the report says so, in
//!    4 KiB-aligned [`sys::AlignedBuf`]s); [`nbd`] (io_uring SEND/RECV on one TCP connection,
//!    where O_DIRECT and polled completion do not apply). **Polled completion**
//!    (IORING_SETUP_IOPOLL) is tried at QD1 on files and devices: where it works, the
//!    read-only QD sweep and the QD1 size sweep are measured polled as well and drawn against
//!    the interrupt-driven ones; where it fails (this VM's virtio disk: EOPNOTSUPP) the
//!    terminal and the report say so.
//! 3. **Fit** ([`curves::fit_curves`]): at each p95 target (500 µs, 1 ms, 2 ms: the published
//!    table's; also 2, 4 and 8 × the slowest mix's lightest-load p95, so a slow or loaded device
//!    still gets points: [`sweep::targets_for`]) read each curve's IOPS; the write weight is the
//!    one that makes the mixes' token rates agree best (the "curves coincide" criterion,
//!    [`open_loop::fit_write_cost_mtok`]); the table's rate is the smallest mix's; the
//!    read-only read cost is the mixed rate over the read-only IOPS. The fit error is the
//!    remaining spread of the mixes' token rates at each target.
//! 4. **Output** ([`mod@run`]; `--out`, default `results/calibrate/NAME`): `profile.toml`
//!    (`ullstack serve --profile FILE`, `ullstack sim --remote FILE --profile FILE`, or
//!    `[sim] profile = "FILE"`), `calibration.json` (every point), the figures (CSV, SVG, PNG
//!    through the study machinery, [`report`]: the model drawn over the measured curves, the fit
//!    error as a band) and `report.html`.
//!
//! [`mod@probe`] is a second of the closed loop, for `ullstack serve`'s start-up probe of a file
//! volume's device (`[qos] probe = "on"`): nine points on a scratch file, the same fit.
//!
//! Beside the closed loop, [`open_loop`] calibrates the server's `emulated` backend from the
//! model with open-loop (Poisson) probes, a search per mix and target, and a verification pass
//! on held-out streams; it shares the write-weight fit and profile assembly with [`curves`].
//!
//! # The design
//! The layers depend one way: [`signature`] and [`mod@sys`] depend on nothing here;
//! [`open_loop`] holds the fit both methods use; [`curves`] builds on it; [`sweep`] says what is
//! measured in terms of [`curves::CurvePoint`]; each prober implements [`sweep::Prober`] in its
//! own module; [`target`] parses TARGET and applies the refusal rules; [`report`] draws a
//! [`sweep::Measurements`]; [`mod@run`] ties them together. No module uses one that uses it
//! (`crates/testkit/tests/module_graph.rs` checks).
//!
//! # The write weight of the presets
//! `zssd` fits the floor (0.25 read per write): its reads are bound by the PCIe link's
//! device → host direction, writes use the other direction and SLC programs with suspend, so a
//! mix that writes more sustains more IOPS (the CLI test `model_zssd_recovers_the_models_known_costs`).
//! `nvme-tlc` fits tens of reads per write: its TLC programs hold a die for many reads' time,
//! and the model's sweep starts from an empty write buffer, so a mix's reads meet that mix's
//! own writes (see [`curves`], *Why the model's sweep starts with an empty write buffer*). A
//! device whose write cost is
//! known by construction (one firmware core, 10 µs per read and 40 µs per write: 4 reads per
//! write) comes back within the CLI test's tolerance.
//!
//! # What it leaves out
//! Open-loop (Poisson) load for real targets (closed loop gives the load points), several
//! submitting threads or connections, TLS for NBD. Errors of the real-target path are
//! `anyhow` (they end at the command line as one message naming the target and the bad
//! part); the model's are [`CalibrationError`].

pub mod curves;
pub mod model;
pub mod nbd;
pub mod open_loop;
pub mod probe;
pub mod report;
pub mod run;
pub mod signature;
pub mod sweep;
pub mod sys;
pub mod target;
pub mod uring;

pub use curves::{
    closed_loop_sweep, curve_point, fit_curves, iops_at_latency, CurveFit, CurvePoint,
};
pub use open_loop::{
    assemble_profile, calibrate, fit_write_cost_mtok, probe, weighted_iops_at,
    weighted_tokens_per_sec, Calibration, CalibrationConfig, CalibrationError, MixRow, ProbeResult,
    OVERLOAD_IN_FLIGHT, PREFILL_QD, SEARCH_PRECISION_PCT, VERIFY_MAX_STEPS, VERIFY_SEED_OFFSET,
    WRITE_COST_FLOOR_MTOK,
};
pub use run::{run, Options};
pub use target::Target;
