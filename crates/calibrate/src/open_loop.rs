//! Calibrating a QoS device profile for an emulated drive, from the model itself (open loop,
//! as the server's `emulated` backend uses); the closed-loop curves and fit that `ullstack
//! calibrate` uses for any target are in [`crate::curves`].
//!
//! # What it implements
//! The token scheduler needs a [`qos::DeviceProfile`]: what a write costs in read tokens, and
//! how many tokens per second the drive sustains before its p95 read latency crosses each
//! target. The published scheduler measures that offline on the real drive; for an `emulated`
//! volume the drive *is* the model of crate `device`, so this module measures the model, in
//! virtual time (no wall clock, no server: deterministic for a seed, and far faster than real
//! time). The numbers are therefore what the emulated device can actually sustain, not guesses.
//!
//! # Method (ReFlex's calibration, on the model)
//! 1. **Probe**: a fresh model, its write buffer first filled to the steady state of a mixed
//!    load (writes at queue depth [`PREFILL_QD`] until the buffer is full, so later writes wait
//!    for flash programs, as they do after the first seconds of any sustained write load), then
//!    open-loop Poisson arrivals of 4 KiB random reads and writes (uniform over `span_bytes`) at a
//!    given IOPS and read percentage for `settle_ns`, then for at least `measure_ns` and
//!    `min_reads` reads; the p95 latency of the reads that arrived after `settle_ns` is the
//!    probe's answer. A probe whose backlog passes
//!    [`OVERLOAD_IN_FLIGHT`] commands is over the device's capacity (p95 = ∞).
//! 2. **Per mix and target**: for each read percentage in `read_pcts` (the mixed loads) and
//!    100 % (read-only), and each latency target `L`, the highest IOPS whose p95 stays at or
//!    below `L × (100 − headroom_pct) / 100` (the headroom is left for the server and network on
//!    top of the device), found by doubling and then bisection to [`SEARCH_PRECISION_PCT`].
//! 3. **Write cost**: for a write weight `W` (read = 1 token), a mix of read fraction `r` at
//!    `x` IOPS is `x · (r + (1 − r) · W)` tokens/s. The weight that makes those token rates agree
//!    best across mixes (least max/min spread, summed over targets; the lightest weight within
//!    `SPREAD_TOLERANCE_PCT` of the least) is the profile's `write_cost_mtok`; this is the
//!    "curves of all read ratios coincide" criterion.
//! 4. **Table**: each target's `tokens_per_sec` is the *smallest* token rate over the mixes
//!    (the profile must hold whatever the mix); its `read_only_tokens_per_sec` is the read-only
//!    IOPS times the read-only read cost, which is set to the mixed rate over the read-only IOPS
//!    (the median over targets, at most one token). A stricter target's rate also satisfies a
//!    looser one, so rates are made non-decreasing with latency by carrying the maximum forward.
//!    Targets below the idle device's p95 get no point.
//! 5. **Verification**: each point's token rate, turned back into IOPS at every mix with the
//!    fitted write cost, is probed again on a held-out stream (seed + [`VERIFY_SEED_OFFSET`]);
//!    the device's p95 must stay within the point's target less the headroom, as in step 2.
//!    (Step 4 takes the lowest mix through a fitted weight and carries rates forward, and near a
//!    TLC cliff p95 is not monotonic in load, so the table can promise more than any probe
//!    showed.) A point that misses is lowered in 10 % steps, and the points below it with it;
//!    one still missing after [`VERIFY_MAX_STEPS`] steps is an error.
//!
//! Worked example (the QoS test's slow TLC drive: `nvme-tlc` cut to 4 LUNs, a 256 KiB write
//! buffer drained a row at a time, programs 1.7/6.6/15 ms; `tests/common/emulated_qos.rs`):
//! reads take 60–110 µs, and a read that meets a program waits for it, so the read tail is set
//! by how often reads meet programs. `cargo run --release -p calibrate --example
//! calibrate_emulated -- sweep slow-tlc.toml 50 200 300 400` (that file's `DEVICE` saved as
//! `slow-tlc.toml`) prints p95 0.14 ms at 200 IOPS, 4.0 ms at 300 and 5.4 ms at 400 at 50 %
//! reads; `… sweep slow-tlc.toml 90 500 1000` 0.13 ms at 500 IOPS and 0.17 ms at 1,000 at
//! 90 % reads. The test's calibration (50 % headroom, targets 3, 6 and 12 ms; `cargo test
//! --profile checked -p server --test qos_emulated -- --nocapture` prints the profile) puts
//! the 6 ms point at ≈ 6,560 tokens/s with a write weight of 47.25 reads: about 140 writes/s
//! when nothing else runs. (The model is deterministic: these are what the commands print
//! until the model changes; re-run them then.)
//! For the presets (`cargo run --release -p calibrate --example calibrate_emulated -- zssd`),
//! the fitted write weight on both `zssd` and `nvme-tlc` is the smallest the search tries (the
//! rates the command printed are in CHANGELOG.md): the mixes sustain more IOPS the
//! more they write, a shape a per-write weight cannot express. For `zssd` that is the model
//! (its PCIe link's read direction is the bottleneck, see [`crate::curves`]); for `nvme-tlc` the
//! closed-loop sweep of [`crate::curves`] found the cause to be the prefilled write buffer, whose
//! backlog every mix's reads meet whatever the mix writes, and dropped the prefill there. This
//! open-loop probe still prefills (the `emulated` backend's QoS tests are fitted with it); it
//! has not been re-examined here.
//!
//! # What it leaves out
//! Garbage collection steady state (probes start from a freshly preconditioned drive and are
//! too short to start GC: an aged drive is slower, which is what the closed-loop vrate
//! correction is for), request sizes other than 4 KiB, and the host-side queueing of the real
//! server (the headroom stands in for it).
//!
//! # Keys
//! [`CalibrationConfig`]: `targets_ns`, `read_pcts`, `headroom_pct`, `settle_ns`, `measure_ns`,
//! `min_reads`, `span_bytes`, `seed`.

use std::collections::BTreeMap;

use device::{DeviceConfig, DeviceOptions, Hint, NvmeCommand, SqPriority, Ssd};
use engine::{IoClass, IoOp, LatencyHistogram, SimTime};

/// Queue depth of the writes that fill the write buffer before a probe.
pub const PREFILL_QD: u32 = 64;
/// Commands in flight beyond which a probe's load is declared above capacity.
pub const OVERLOAD_IN_FLIGHT: usize = 8192;
/// The IOPS search stops when its bracket is this close (percent of the lower end).
pub const SEARCH_PRECISION_PCT: u64 = 3;
/// First IOPS tried when searching upward.
const SEARCH_START_IOPS: u64 = 500;
/// Longest virtual time one probe measures, however few reads it has by then.
const MAX_MEASURE_NS: u64 = 30_000_000_000;
/// Highest IOPS the search tries (far above any modelled drive).
const SEARCH_MAX_IOPS: u64 = 50_000_000;
/// Write weights tried, in milli-tokens: 0.25 to 1,000 tokens in steps of 0.25 token (a TLC
/// write without program suspend costs a read tail ~100 reads).
const WRITE_COST_STEP_MTOK: u64 = 250;
const WRITE_COST_MAX_MTOK: u64 = 1_000_000;
/// A write weight whose token-rate spread across mixes is within this percentage of the best
/// weight's counts as agreeing (see `calibrate`).
const SPREAD_TOLERANCE_PCT: u64 = 2;
/// Bytes of every calibration request.
const REQUEST_BYTES: u64 = 4096;
/// The verification pass probes with `seed + VERIFY_SEED_OFFSET`: streams the search never
/// saw (with the search's own seed, a rate it probed replays the stream it was fitted on; on
/// the QoS test's slow TLC drive a fresh stream then read 3.15–3.51 ms at a 3 ms point: the
/// figure that decided this rule, CHANGELOG.md).
pub const VERIFY_SEED_OFFSET: u64 = 0x5eed;

/// Most 10 % reductions the verification pass applies to one point before giving up on it.
pub const VERIFY_MAX_STEPS: u32 = 20;

/// What to measure.
#[derive(Debug, Clone)]
pub struct CalibrationConfig {
    /// Name of the resulting profile.
    pub name: String,
    /// p95 read-latency targets of the table, ns, strictly increasing.
    pub targets_ns: Vec<u64>,
    /// Read percentages of the mixed loads (each < 100; 100 % is always measured too).
    pub read_pcts: Vec<u8>,
    /// Share of each target left for the host and network (the device must meet the rest).
    pub headroom_pct: u8,
    /// Virtual time each probe runs before measuring.
    pub settle_ns: u64,
    /// Virtual time each probe measures, at least (see `min_reads`).
    pub measure_ns: u64,
    /// Reads each probe measures, at least: a low-rate probe runs longer (a p95 of a few dozen
    /// reads is noise).
    pub min_reads: u64,
    /// Requests go uniformly over `[0, span_bytes)` (capped at the device's capacity).
    pub span_bytes: u64,
    pub seed: u64,
}

impl CalibrationConfig {
    /// Targets 500 µs, 1 ms and 2 ms; mixes of 90, 75 and 50 % reads; 20 % headroom; 50 ms to
    /// settle and at least 300 ms and 4,000 reads measured per probe; the whole device.
    pub fn new(name: impl Into<String>) -> CalibrationConfig {
        CalibrationConfig {
            name: name.into(),
            targets_ns: vec![500_000, 1_000_000, 2_000_000],
            read_pcts: vec![90, 75, 50],
            headroom_pct: 20,
            settle_ns: 50_000_000,
            measure_ns: 300_000_000,
            min_reads: 4000,
            span_bytes: u64::MAX,
            seed: 1,
        }
    }
}

/// Why a calibration produced no profile.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("device model: {0}")]
    Device(String),
    #[error("calibration config: {0}")]
    Config(String),
    #[error("no latency target is reachable: the idle device's p95 read latency is {idle_p95_ns} ns, above every target × (100 − headroom) %")]
    Unreachable { idle_p95_ns: u64 },
    #[error("the measured table is not a valid profile: {0}")]
    Profile(String),
    #[error("the {target_ns} ns point still gives a p95 read latency of {p95_ns} ns at {tokens_per_sec} tokens/s after {VERIFY_MAX_STEPS} 10 % reductions: the device's tail is not controllable by rate near this target")]
    Unverified {
        target_ns: u64,
        p95_ns: u64,
        tokens_per_sec: u64,
    },
}

/// One probe's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeResult {
    /// p95 latency of the measured reads, ns (`u64::MAX` when overloaded or no reads).
    pub p95_read_ns: u64,
    /// Reads measured.
    pub reads: u64,
}

/// Highest IOPS per (read %, target) that met the target, for the report.
#[derive(Debug, Clone)]
pub struct MixRow {
    pub read_pct: u8,
    /// Per target (same order as the config's), the IOPS found (0: not even the lowest load).
    pub iops: Vec<u64>,
}

/// The result: the profile and the measurements behind it.
#[derive(Debug, Clone)]
pub struct Calibration {
    pub profile: qos::DeviceProfile,
    pub rows: Vec<MixRow>,
    /// Targets that got a point (a subset of the config's).
    pub targets_ns: Vec<u64>,
    pub probes: u64,
}

/// Runs one probe: `iops` open-loop 4 KiB requests, `read_pct` % reads.
pub fn probe(
    device: &DeviceConfig,
    config: &CalibrationConfig,
    read_pct: u8,
    iops: u64,
) -> Result<ProbeResult, CalibrationError> {
    let mut ssd = Ssd::new(device, DeviceOptions { integrity: false })
        .map_err(|e| CalibrationError::Device(e.to_string()))?;
    let units = (config.span_bytes.min(ssd.capacity_bytes()) / REQUEST_BYTES).max(1);
    ssd.create_queue_pair(1, 1, u32::from(u16::MAX), SqPriority::Medium);
    ssd.set_interrupts(1, false);
    let tag = format!("calibrate/{read_pct}/{iops}");
    let mut offsets = engine::rng::stream(config.seed, &format!("{tag}/offsets"));
    let mut arrivals = engine::rng::stream(config.seed, &format!("{tag}/arrivals"));
    let mut ops = engine::rng::stream(config.seed, &format!("{tag}/ops"));
    let mut host = Host::default();
    let mut done = Vec::new();
    let mut now = SimTime::ZERO;

    // Fill the write buffer (steady state of a mixed load).
    if read_pct < 100 {
        let buffer_units = device.cache.write_buffer_bytes / REQUEST_BYTES;
        let mut issued = 0u64;
        while ssd.write_buffer_pct() < 100 && issued < buffer_units * 2 {
            while host.in_flight() < PREFILL_QD as usize {
                let lpn = engine::rng::below(&mut offsets, units);
                host.submit(&mut ssd, now, IoOp::Write, lpn, false)?;
                issued += 1;
            }
            let Some(t) = ssd.next_event_time() else {
                break;
            };
            now = t;
            ssd.advance_to(now, &mut done);
            host.complete(&mut done, None);
        }
    }

    let start = now;
    let measure_from = start + config.settle_ns;
    let read_iops = (iops * u64::from(read_pct) / 100).max(1);
    let for_reads_ns = config.min_reads.saturating_mul(1_000_000_000) / read_iops;
    let end = measure_from + config.measure_ns.max(for_reads_ns).min(MAX_MEASURE_NS);
    let mean_gap_ns = (1_000_000_000 / iops.max(1)).max(1);
    let mut next_arrival = start + engine::rng::exp_ns(&mut arrivals, mean_gap_ns);
    let mut hist = LatencyHistogram::new();
    loop {
        let arriving = next_arrival < end;
        let event = ssd.next_event_time();
        match (arriving, event) {
            (true, Some(e)) if e < next_arrival => {
                now = e;
                ssd.advance_to(now, &mut done);
            }
            (true, _) => {
                now = next_arrival;
                ssd.advance_to(now, &mut done);
                let read = engine::rng::chance(&mut ops, u64::from(read_pct), 100);
                let lpn = engine::rng::below(&mut offsets, units);
                let op = if read { IoOp::Read } else { IoOp::Write };
                host.submit(&mut ssd, now, op, lpn, now >= measure_from)?;
                next_arrival = now + engine::rng::exp_ns(&mut arrivals, mean_gap_ns).max(1);
            }
            (false, Some(e)) => {
                if host.measured_in_flight == 0 {
                    break;
                }
                now = e;
                ssd.advance_to(now, &mut done);
            }
            (false, None) => break,
        }
        host.complete(&mut done, Some(&mut hist));
        if host.in_flight() > OVERLOAD_IN_FLIGHT {
            return Ok(ProbeResult {
                p95_read_ns: u64::MAX,
                reads: hist.count(),
            });
        }
    }
    let reads = hist.count();
    Ok(ProbeResult {
        p95_read_ns: if reads == 0 {
            u64::MAX
        } else {
            hist.quantile_ns(0.95)
        },
        reads,
    })
}

/// The probe's host side: command slots, submit times, which reads are measured.
#[derive(Default)]
struct Host {
    /// (submitted at, measured read)
    slots: Vec<Option<(SimTime, bool)>>,
    free: Vec<u32>,
    live: usize,
    measured_in_flight: usize,
}

impl Host {
    fn in_flight(&self) -> usize {
        self.live
    }

    fn submit(
        &mut self,
        ssd: &mut Ssd,
        now: SimTime,
        op: IoOp,
        lpn: u64,
        measure: bool,
    ) -> Result<(), CalibrationError> {
        let measured = measure && op == IoOp::Read;
        let cid = match self.free.pop() {
            Some(c) => {
                self.slots[c as usize] = Some((now, measured));
                c
            }
            None => {
                self.slots.push(Some((now, measured)));
                (self.slots.len() - 1) as u32
            }
        };
        let cmd = NvmeCommand {
            cid,
            op,
            slba: lpn * REQUEST_BYTES / device::SECTOR_BYTES,
            sectors: (REQUEST_BYTES / device::SECTOR_BYTES) as u32,
            class: IoClass::Throughput,
            hint: Hint::None,
            version: 0,
        };
        ssd.submit(now, 1, cmd)
            .map_err(|e| CalibrationError::Device(e.to_string()))?;
        self.live += 1;
        if measured {
            self.measured_in_flight += 1;
        }
        Ok(())
    }

    fn complete(
        &mut self,
        done: &mut Vec<device::Completion>,
        mut hist: Option<&mut LatencyHistogram>,
    ) {
        for c in done.drain(..) {
            let Some((at, measured)) = self.slots.get_mut(c.cid as usize).and_then(Option::take)
            else {
                debug_assert!(false, "completion for unknown cid {}", c.cid);
                continue;
            };
            self.free.push(c.cid);
            self.live -= 1;
            if measured {
                self.measured_in_flight -= 1;
                if let Some(h) = hist.as_deref_mut() {
                    h.record(c.at.0 - at.0);
                }
            }
        }
    }
}

/// Probes of one mix, memoized by IOPS.
struct Mix<'a> {
    device: &'a DeviceConfig,
    config: &'a CalibrationConfig,
    read_pct: u8,
    seen: BTreeMap<u64, u64>,
    probes: u64,
}

impl Mix<'_> {
    fn p95(&mut self, iops: u64) -> Result<u64, CalibrationError> {
        if let Some(&p) = self.seen.get(&iops) {
            return Ok(p);
        }
        let r = probe(self.device, self.config, self.read_pct, iops)?;
        self.probes += 1;
        self.seen.insert(iops, r.p95_read_ns);
        Ok(r.p95_read_ns)
    }

    /// Highest IOPS with p95 ≤ `limit_ns` (0 if even the lowest load misses it).
    fn max_iops(&mut self, limit_ns: u64) -> Result<u64, CalibrationError> {
        // Start from what earlier targets learned: the best known good and worst known bad.
        let mut good = self
            .seen
            .iter()
            .filter(|(_, &p)| p <= limit_ns)
            .map(|(&x, _)| x)
            .max()
            .unwrap_or(0);
        let mut bad = self
            .seen
            .iter()
            .filter(|(&x, &p)| p > limit_ns && x > good)
            .map(|(&x, _)| x)
            .min()
            .unwrap_or(0);
        if good == 0 && bad == 0 {
            let x = SEARCH_START_IOPS;
            if self.p95(x)? <= limit_ns {
                good = x;
            } else {
                bad = x;
            }
        }
        if good == 0 {
            // Search down for any load that meets the target.
            let mut x = bad;
            while x > 10 {
                x /= 4;
                if self.p95(x)? <= limit_ns {
                    good = x;
                    break;
                }
                bad = x;
            }
            if good == 0 {
                return Ok(0);
            }
        }
        if bad == 0 {
            let mut x = good;
            loop {
                x = x.saturating_mul(2);
                if x > SEARCH_MAX_IOPS {
                    return Ok(good);
                }
                if self.p95(x)? <= limit_ns {
                    good = x;
                } else {
                    bad = x;
                    break;
                }
            }
        }
        while bad - good > good * SEARCH_PRECISION_PCT / 100 {
            let mid = good + (bad - good) / 2;
            if self.p95(mid)? <= limit_ns {
                good = mid;
            } else {
                bad = mid;
            }
        }
        Ok(good)
    }
}

/// Token rate of `iops` at `read_pct` % reads when a write costs `write_cost_mtok`, tokens/s.
pub(crate) fn tokens_per_sec(iops: u64, read_pct: u8, write_cost_mtok: u64) -> u64 {
    let reads = u128::from(iops) * u128::from(read_pct);
    let writes = u128::from(iops) * u128::from(100 - read_pct);
    let mtok = reads * u128::from(qos::cost::READ_COST_MTOK) + writes * u128::from(write_cost_mtok);
    (mtok / 100 / u128::from(qos::cost::MTOK_PER_TOKEN)) as u64
}

/// I/Os per second at `read_pct` % reads that spend `tokens_per_sec` (the inverse of
/// [`tokens_per_sec`]).
fn iops_at(tokens_per_sec: u64, read_pct: u8, write_cost_mtok: u64) -> u64 {
    let per_io_mtok = (u64::from(read_pct) * qos::cost::READ_COST_MTOK
        + u64::from(100 - read_pct) * write_cost_mtok)
        / 100;
    tokens_per_sec * qos::cost::MTOK_PER_TOKEN / per_io_mtok.max(1)
}

/// The write weight (milli-tokens per 4 KiB write) that makes the mixes' token rates agree best:
/// `mixed` holds, per read percentage, the IOPS it sustained at each target (same targets for
/// every mix). The criterion is the least max/min spread of `iops × (r + (1 − r) × W)` summed
/// over targets; of the weights within `SPREAD_TOLERANCE_PCT` of the least, the lightest.
pub fn fit_write_cost_mtok(mixed: &[(u8, Vec<u64>)]) -> u64 {
    let targets = mixed.first().map_or(0, |m| m.1.len());
    let spread = |w: u64| -> f64 {
        (0..targets)
            .map(|i| {
                let rates: Vec<u64> = mixed
                    .iter()
                    .map(|(pct, iops)| tokens_per_sec(iops[i], *pct, w))
                    .collect();
                let max = rates.iter().copied().max().unwrap_or(1) as f64;
                let min = rates.iter().copied().min().unwrap_or(1).max(1) as f64;
                max / min
            })
            .sum()
    };
    let candidates =
        || (1..=WRITE_COST_MAX_MTOK / WRITE_COST_STEP_MTOK).map(|k| k * WRITE_COST_STEP_MTOK);
    let best = candidates()
        .map(spread)
        .min_by(f64::total_cmp)
        .unwrap_or(1.0);
    // The lightest weight that agrees about as well as the best: when writes alone set the
    // limit, the spread keeps shrinking towards an asymptote as the weight grows, and the
    // smallest weight that has reached it is the one the data supports.
    candidates()
        .find(|&w| spread(w) <= best * (100 + SPREAD_TOLERANCE_PCT) as f64 / 100.0)
        .unwrap_or(qos::cost::MTOK_PER_TOKEN)
}

/// The smallest floor [`fit_write_cost_mtok`] can return (its search step): a fit at the floor
/// means the mixes sustain more IOPS the more they write.
pub const WRITE_COST_FLOOR_MTOK: u64 = WRITE_COST_STEP_MTOK;

/// Token rate of `iops` at `read_pct` % reads with a write weight, tokens/s (public form).
pub fn weighted_tokens_per_sec(iops: u64, read_pct: u8, write_cost_mtok: u64) -> u64 {
    tokens_per_sec(iops, read_pct, write_cost_mtok)
}

/// IOPS at `read_pct` % reads that spend `tokens_per_sec` (public form of the inverse).
pub fn weighted_iops_at(tokens_per_sec: u64, read_pct: u8, write_cost_mtok: u64) -> u64 {
    iops_at(tokens_per_sec, read_pct, write_cost_mtok)
}

/// Builds the profile from the table: per target (strictly increasing) the mixed token rate
/// and the read-only IOPS; the read-only read cost is the median of mixed rate / read-only
/// IOPS over the targets, clamped to 1..=1000 mtok.
pub fn assemble_profile(
    name: &str,
    targets_ns: &[u64],
    mixed_rates: &[u64],
    ro_iops: &[u64],
    write_cost_mtok: u64,
) -> Result<qos::DeviceProfile, CalibrationError> {
    if targets_ns.is_empty() {
        return Err(CalibrationError::Profile("no target got a point".into()));
    }
    let mut ratios: Vec<u64> = mixed_rates
        .iter()
        .zip(ro_iops)
        .map(|(&m, &ro)| (m * qos::cost::MTOK_PER_TOKEN / ro.max(1)).max(1))
        .collect();
    ratios.sort_unstable();
    let read_only_read_cost_mtok = ratios[ratios.len() / 2].clamp(1, qos::cost::MTOK_PER_TOKEN);
    let points = targets_ns
        .iter()
        .enumerate()
        .map(|(k, &t)| qos::RatePoint {
            p95_read_latency_ns: t,
            tokens_per_sec: mixed_rates[k].max(1),
            read_only_tokens_per_sec: (ro_iops[k] * read_only_read_cost_mtok
                / qos::cost::MTOK_PER_TOKEN)
                .max(1),
        })
        .collect();
    qos::DeviceProfile::new(name, write_cost_mtok, read_only_read_cost_mtok, points)
        .map_err(|e| CalibrationError::Profile(e.to_string()))
}

/// Measures `device` and builds its profile (see the module essay for the method).
pub fn calibrate(
    device: &DeviceConfig,
    config: &CalibrationConfig,
) -> Result<Calibration, CalibrationError> {
    if config.targets_ns.is_empty() || config.targets_ns.windows(2).any(|w| w[1] <= w[0]) {
        return Err(CalibrationError::Config(format!(
            "targets_ns = {:?}: expected strictly increasing targets",
            config.targets_ns
        )));
    }
    if config.read_pcts.is_empty() || config.read_pcts.iter().any(|&p| p >= 100) {
        return Err(CalibrationError::Config(format!(
            "read_pcts = {:?}: expected mixed loads (each below 100 %)",
            config.read_pcts
        )));
    }
    if config.headroom_pct >= 100 {
        return Err(CalibrationError::Config(format!(
            "headroom_pct = {}: expected below 100",
            config.headroom_pct
        )));
    }
    let limit = |t: u64| t * u64::from(100 - config.headroom_pct) / 100;
    let mut pcts: Vec<u8> = config.read_pcts.clone();
    pcts.push(100);
    let mut rows = Vec::new();
    let mut probes = 0;
    for &read_pct in &pcts {
        let mut mix = Mix {
            device,
            config,
            read_pct,
            seen: BTreeMap::new(),
            probes: 0,
        };
        let mut iops = Vec::new();
        for &t in &config.targets_ns {
            iops.push(mix.max_iops(limit(t))?);
        }
        probes += mix.probes;
        rows.push(MixRow { read_pct, iops });
    }
    // Targets every mix (read-only included) can meet at some load.
    let usable: Vec<usize> = (0..config.targets_ns.len())
        .filter(|&i| rows.iter().all(|r| r.iops[i] > 0))
        .collect();
    if usable.is_empty() {
        let idle = probe(device, config, pcts[0], 10)?;
        return Err(CalibrationError::Unreachable {
            idle_p95_ns: idle.p95_read_ns,
        });
    }
    let mixed: Vec<&MixRow> = rows.iter().filter(|r| r.read_pct < 100).collect();
    let mixed_at_usable: Vec<(u8, Vec<u64>)> = mixed
        .iter()
        .map(|r| (r.read_pct, usable.iter().map(|&i| r.iops[i]).collect()))
        .collect();
    let write_cost_mtok = fit_write_cost_mtok(&mixed_at_usable);
    let read_only = rows
        .iter()
        .find(|r| r.read_pct == 100)
        .map(|r| r.iops.clone())
        .unwrap_or_default();
    let mut mixed_rates: Vec<u64> = usable
        .iter()
        .map(|&i| {
            mixed
                .iter()
                .map(|r| tokens_per_sec(r.iops[i], r.read_pct, write_cost_mtok))
                .min()
                .unwrap_or(0)
        })
        .collect();
    let mut ro_iops: Vec<u64> = usable.iter().map(|&i| read_only[i]).collect();
    for v in [&mut mixed_rates, &mut ro_iops] {
        for i in 1..v.len() {
            v[i] = v[i].max(v[i - 1]);
        }
    }
    // Step 5 of the essay: verify each point at every mix, lowering it (and the points below
    // it, so rates still grow with the target) until the device meets the target — on a
    // held-out stream (another seed), so the table holds for traffic it was not fitted on.
    let held_out = CalibrationConfig {
        seed: config.seed.wrapping_add(VERIFY_SEED_OFFSET),
        ..config.clone()
    };
    for k in (0..mixed_rates.len()).rev() {
        if k + 1 < mixed_rates.len() {
            mixed_rates[k] = mixed_rates[k].min(mixed_rates[k + 1]);
        }
        let target = config.targets_ns[usable[k]];
        // The held-out stream must meet what the search's own stream met: the target less
        // the headroom (a stream that only meets the target itself leaves the next one to
        // chance near a TLC cliff: 7.6 ms at a 6 ms point before this rule, CHANGELOG.md).
        let verify_limit = limit(target);
        let mut steps = 0;
        loop {
            let mut worst = 0;
            for r in &mixed {
                let iops = iops_at(mixed_rates[k], r.read_pct, write_cost_mtok);
                worst = worst.max(probe(device, &held_out, r.read_pct, iops.max(1))?.p95_read_ns);
                probes += 1;
            }
            if worst <= verify_limit {
                break;
            }
            if steps == VERIFY_MAX_STEPS || mixed_rates[k] <= 1 {
                return Err(CalibrationError::Unverified {
                    target_ns: target,
                    p95_ns: worst,
                    tokens_per_sec: mixed_rates[k],
                });
            }
            mixed_rates[k] = mixed_rates[k] * 9 / 10;
            steps += 1;
        }
    }
    let targets: Vec<u64> = usable.iter().map(|&i| config.targets_ns[i]).collect();
    let profile = assemble_profile(
        &config.name,
        &targets,
        &mixed_rates,
        &ro_iops,
        write_cost_mtok,
    )?;
    Ok(Calibration {
        profile,
        rows,
        targets_ns: usable.iter().map(|&i| config.targets_ns[i]).collect(),
        probes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small, slow TLC drive (the QoS test's): 4 LUNs, a 256 KiB write buffer, little
    /// DRAM, programs 3× the preset's.
    fn small_tlc() -> DeviceConfig {
        DeviceConfig::from_toml_str(
            "preset = \"nvme-tlc\"\n[cache]\ndram_bytes = 4194304\nwrite_buffer_bytes = 262144\n[flash]\nchannels = 2\npackages_per_channel = 1\nblocks_per_plane = 64\nprogram_ns = { lsb = 1680000, csb = 6600000, msb = 15000000 }\n",
        )
        .unwrap()
    }

    fn quick(name: &str) -> CalibrationConfig {
        CalibrationConfig {
            settle_ns: 20_000_000,
            measure_ns: 100_000_000,
            min_reads: 2000,
            targets_ns: vec![3_000_000, 6_000_000],
            read_pcts: vec![90, 50],
            ..CalibrationConfig::new(name)
        }
    }

    #[test]
    fn more_load_and_more_writes_raise_the_read_tail() {
        let d = small_tlc();
        let c = quick("t");
        let light = probe(&d, &c, 90, 200).unwrap();
        let heavy = probe(&d, &c, 90, 1_500).unwrap();
        let writes = probe(&d, &c, 50, 400).unwrap();
        assert!(light.reads > 100);
        assert!(heavy.p95_read_ns > light.p95_read_ns, "{light:?} {heavy:?}");
        assert!(
            writes.p95_read_ns > light.p95_read_ns,
            "{light:?} {writes:?}"
        );
    }

    #[test]
    fn probes_are_deterministic_for_a_seed() {
        let d = small_tlc();
        let c = quick("t");
        assert_eq!(
            probe(&d, &c, 75, 800).unwrap(),
            probe(&d, &c, 75, 800).unwrap()
        );
    }

    #[test]
    fn calibration_gives_a_valid_profile_whose_rates_meet_the_targets() {
        let d = small_tlc();
        let c = quick("small-tlc");
        let cal = calibrate(&d, &c).unwrap();
        let p = &cal.profile;
        assert!(
            p.write_cost_mtok > 2_000,
            "TLC writes cost several reads: {p:?}"
        );
        // Re-probe each point's rate in every mix with streams the calibration never saw
        // (other seeds: with its own seed a re-probe at a rate it searched replays the very
        // stream it was fitted on), measured 4× longer so the p95 is the rate's and not one
        // short stream's: the device's p95 stays within the point's latency (the search kept
        // it under 80 % of it; near the edge of the TLC cliff a fresh stream may land above
        // that, never above the target itself).
        for seed in [c.seed + 101, c.seed + 202] {
            let fresh = CalibrationConfig {
                seed,
                measure_ns: 4 * c.measure_ns,
                min_reads: 4 * c.min_reads,
                ..c.clone()
            };
            for (k, point) in p.points.iter().enumerate() {
                for &pct in &c.read_pcts {
                    let per_io_mtok =
                        (u64::from(pct) * 1000 + u64::from(100 - pct) * p.write_cost_mtok) / 100;
                    let iops = point.tokens_per_sec * 1000 / per_io_mtok;
                    let r = probe(&d, &fresh, pct, iops).unwrap();
                    assert!(
                        r.p95_read_ns <= point.p95_read_latency_ns,
                        "seed {seed}, point {k} {point:?} at {pct}% reads = {iops} IOPS: p95 {} ns",
                        r.p95_read_ns
                    );
                }
            }
        }
        assert!(cal.probes > 5);
    }
}
