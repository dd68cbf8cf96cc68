//! Closed-loop curves and the cost model fitted to them: what `ullstack calibrate` measures.
//!
//! # What it implements
//! `ullstack calibrate` (crate `cli`) measures a device the way storage papers draw it: for
//! each read ratio, a queue-depth sweep (closed loop: `queue_depth` requests of one size kept
//! in flight, uniform random over the target) gives a curve of p95 read latency against IOPS.
//! This module holds the sweep of the SSD model in virtual time ([`closed_loop_sweep`], for
//! `model:NAME` targets; real targets are swept by the CLI through io_uring or NBD, into the
//! same [`CurvePoint`]s) and the fit of the QoS cost model to the curves ([`fit_curves`]):
//! 1. At each p95 target, each curve's IOPS ([`iops_at_latency`]: linear between the last point
//!    within the target and the first beyond it; the highest measured IOPS when every point is
//!    within it, so such a target is a lower bound for that mix, never an extrapolation).
//! 2. The write weight `W` that makes the mixes' token rates `IOPS × (r + (1 − r)·W)` agree
//!    best — the "curves coincide" criterion, by [`crate::open_loop::fit_write_cost_mtok`].
//! 3. The table: each target's rate is the smallest mix's token rate (rates carried forward so
//!    a looser target never gets less), the read-only read cost is the mixed rate over the
//!    read-only IOPS (median over targets), and the fit error per target is the remaining
//!    spread `(max − min) / min` of the mixes' token rates.
//!
//! Worked example (`ullstack calibrate model:fw.toml`, where `fw.toml` is `preset = "zssd"`
//! with `[ctrl] firmware_cores = 1, firmware_read_ns = 10000, firmware_write_ns = 40000`, the
//! device of the CLI test `a_model_whose_write_cost_is_known`): the one firmware core is the
//! bottleneck, a read holds it 10 µs and a write 40 µs, so a write costs exactly 4 reads and
//! the device sustains 100,000 tokens/s. The read-only curve reaches 100,000 IOPS at QD 2 with
//! p95 20 µs and stays there (p95 640 µs at QD 64); the 50 % mix saturates at 39,640–40,420
//! IOPS = 0.5·1 + 0.5·4 = 2.5 tokens each ≈ 100,000 tokens/s. The fit gave write weight 4.00,
//! read-only read cost 1.000 and 99,910–100,234 tokens/s at the 149 µs–2 ms targets, spread
//! 0.3–0.8 % (full run; `--quick`: 3.75, spread 5–7 %).
//!
//! # Why the model's sweep starts with an empty write buffer
//! A real drive at a calibration load below its drain rate holds a nearly empty write buffer
//! (it flushes on idle dies), and a real target here starts after an `fdatasync`; the model's
//! sweep starts drained too, so a mix's reads meet the mix's own writes. A sweep that filled
//! the buffer first, as the open-loop calibrator does before a mixed probe
//! ([`crate::open_loop::probe`]), would leave a backlog of programs the dies work through
//! during every point of every mix: on `nvme-tlc` (TLC, no suspend) every read would meet
//! them whatever the mix wrote, each mix's IOPS at a target would be its deepest point's,
//! where buffered writes win, and the write weight would come out at the search's floor
//! (0.25). Worked example: `nvme-tlc`'s buffer holds 131,072 4 KiB units (512 MB); a 99 %
//! mix at QD 1 writes ~110 times a second, which its 128 dies program long before the next
//! write, so each point ends with the buffer nearly empty (`write_buffer_units_end` in
//! calibration.json) and the mix's p95 is the read-only one's. `zssd` fits the floor, and
//! there it is the model: its reads are bound by the PCIe link's device → host direction
//! (879 K 4 KiB transfers/s) while writes use the other direction and SLC programs with
//! suspend, so a mix that writes more sustains more IOPS (the CLI test
//! `model_zssd_recovers_the_models_known_costs`).
//!
//! # What it leaves out
//! Open-loop (Poisson) load points (the closed loop's queue depths are the load axis, so a
//! target beyond a curve's deepest point is a lower bound, see step 1), per-size costs (the
//! size sweep is drawn, not fitted), garbage collection steady state (as [`crate::open_loop::probe`]).
//!
//! # Keys
//! [`closed_loop_sweep`]: the device, read percentage, size, queue depths, `settle_ns`,
//! `measure_ns`, seed; [`fit_curves`]: the profile name, the curves and the p95 targets.

use device::{DeviceConfig, DeviceOptions, Hint, NvmeCommand, SqPriority, Ssd};
use engine::{IoClass, IoOp, LatencyHistogram, SimTime};

use crate::open_loop::{
    assemble_profile, fit_write_cost_mtok, tokens_per_sec, CalibrationError, MixRow,
};

/// One point of a measured curve: a closed-loop load (queue depth) of one mix and size.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CurvePoint {
    pub read_pct: u8,
    pub size_bytes: u64,
    pub queue_depth: u32,
    pub iops: f64,
    pub reads: u64,
    pub read_p50_ns: u64,
    pub read_p95_ns: u64,
    pub read_p99_ns: u64,
    pub read_mean_ns: u64,
    pub write_mean_ns: u64,
    /// The model only: dirty 4 KiB units in its write buffer when the point ended (a buffer
    /// that keeps growing means the point's write rate is beyond what the flash drains, and
    /// the point is a transient, not a steady state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_buffer_units_end: Option<u64>,
}

/// Summarises histograms into a [`CurvePoint`].
pub fn curve_point(
    read_pct: u8,
    size_bytes: u64,
    queue_depth: u32,
    measured_ns: u64,
    reads: &LatencyHistogram,
    writes: &LatencyHistogram,
) -> CurvePoint {
    let secs = measured_ns.max(1) as f64 / 1e9;
    CurvePoint {
        read_pct,
        size_bytes,
        queue_depth,
        iops: (reads.count() + writes.count()) as f64 / secs,
        reads: reads.count(),
        read_p50_ns: reads.quantile_ns(0.50),
        read_p95_ns: if reads.is_empty() {
            0
        } else {
            reads.quantile_ns(0.95)
        },
        read_p99_ns: reads.quantile_ns(0.99),
        read_mean_ns: reads.mean_ns(),
        write_mean_ns: writes.mean_ns(),
        write_buffer_units_end: None,
    }
}

/// A closed-loop sweep of the model in virtual time: for each queue depth in turn,
/// `queue_depth` requests of `size_bytes` (uniform over the device, `read_pct` % reads) kept in
/// flight, `settle_ns` unmeasured, then `measure_ns` measured (requests submitted in the
/// window). One device for the whole sweep, starting with an empty write buffer (see the
/// module essay: why not prefilled), each depth from the state the previous one left, as on
/// real hardware. Deterministic for a seed.
pub fn closed_loop_sweep(
    device: &DeviceConfig,
    read_pct: u8,
    size_bytes: u64,
    queue_depths: &[u32],
    settle_ns: u64,
    measure_ns: u64,
    seed: u64,
) -> Result<Vec<CurvePoint>, CalibrationError> {
    if size_bytes == 0
        || !size_bytes.is_multiple_of(device::SECTOR_BYTES)
        || queue_depths.contains(&0)
    {
        return Err(CalibrationError::Config(format!(
            "closed-loop sweep: size {size_bytes} B, queue depths {queue_depths:?}: expected a \
             positive multiple of {} B and depths ≥ 1",
            device::SECTOR_BYTES
        )));
    }
    let mut ssd = Ssd::new(device, DeviceOptions { integrity: false })
        .map_err(|e| CalibrationError::Device(e.to_string()))?;
    ssd.create_queue_pair(1, 1, u32::from(u16::MAX), SqPriority::Medium);
    ssd.set_interrupts(1, false);
    let tag = format!("calibrate-closed/{read_pct}/{size_bytes}");
    let mut rng = engine::rng::stream(seed, &tag);
    let mut now = SimTime::ZERO;
    let mut points = Vec::new();
    for &queue_depth in queue_depths {
        let (p, t) = closed_loop_run(
            &mut ssd,
            &mut rng,
            now,
            read_pct,
            size_bytes,
            queue_depth,
            settle_ns,
            measure_ns,
        )?;
        now = t;
        points.push(p);
    }
    Ok(points)
}

/// One depth of [`closed_loop_sweep`] on `ssd` from `now`; returns the point and when the last
/// request completed.
#[allow(clippy::too_many_arguments)]
fn closed_loop_run(
    ssd: &mut Ssd,
    rng: &mut engine::SimRng,
    mut now: SimTime,
    read_pct: u8,
    size_bytes: u64,
    queue_depth: u32,
    settle_ns: u64,
    measure_ns: u64,
) -> Result<(CurvePoint, SimTime), CalibrationError> {
    let slots = (ssd.capacity_bytes() / size_bytes).max(1);
    let mut done = Vec::new();
    let start = now;
    let measure_from = start + settle_ns;
    let end = measure_from + measure_ns;
    // cid → (submitted at, op)
    let mut slot_of: Vec<(SimTime, IoOp)> = vec![(SimTime::ZERO, IoOp::Read); queue_depth as usize];
    let (mut reads, mut writes) = (LatencyHistogram::new(), LatencyHistogram::new());
    let submit = |ssd: &mut Ssd, rng: &mut engine::SimRng, now: SimTime, cid: u32| {
        let op = if engine::rng::chance(rng, u64::from(read_pct), 100) {
            IoOp::Read
        } else {
            IoOp::Write
        };
        let slot = engine::rng::below(rng, slots);
        let cmd = NvmeCommand {
            cid,
            op,
            slba: slot * size_bytes / device::SECTOR_BYTES,
            sectors: (size_bytes / device::SECTOR_BYTES) as u32,
            class: IoClass::Throughput,
            hint: Hint::None,
            version: 0,
        };
        ssd.submit(now, 1, cmd)
            .map(|()| op)
            .map_err(|e| CalibrationError::Device(e.to_string()))
    };
    for cid in 0..queue_depth {
        let op = submit(ssd, rng, now, cid)?;
        slot_of[cid as usize] = (now, op);
    }
    let mut live = queue_depth;
    while live > 0 {
        let Some(t) = ssd.next_event_time() else {
            break;
        };
        now = t;
        ssd.advance_to(now, &mut done);
        for c in done.drain(..) {
            let (at, op) = slot_of[c.cid as usize];
            if at >= measure_from && at < end {
                let h = if op == IoOp::Read {
                    &mut reads
                } else {
                    &mut writes
                };
                h.record(c.at.0 - at.0);
            }
            if c.at < end {
                let op = submit(ssd, rng, c.at, c.cid)?;
                slot_of[c.cid as usize] = (c.at, op);
            } else {
                live -= 1;
            }
        }
    }
    let point = CurvePoint {
        write_buffer_units_end: Some(ssd.write_buffer_units().0),
        ..curve_point(
            read_pct,
            size_bytes,
            queue_depth,
            measure_ns,
            &reads,
            &writes,
        )
    };
    Ok((point, now))
}

/// IOPS a closed-loop curve sustains with its p95 read latency at `limit_ns`: linear between
/// the last point within the limit and the first beyond it; the highest measured IOPS if every
/// point is within it (no extrapolation); 0 if none is.
pub fn iops_at_latency(curve: &[CurvePoint], limit_ns: u64) -> u64 {
    let mut pts: Vec<(f64, u64)> = curve.iter().map(|p| (p.iops, p.read_p95_ns)).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut best = 0.0f64;
    for w in 0..pts.len() {
        let (x, p) = pts[w];
        if p <= limit_ns {
            best = best.max(x);
            if let Some(&(x2, p2)) = pts.get(w + 1) {
                if p2 > limit_ns && p2 > p {
                    let f = (limit_ns - p) as f64 / (p2 - p) as f64;
                    best = best.max(x + (x2 - x) * f);
                }
            }
        }
    }
    best as u64
}

/// A profile fitted to measured curves, with its error.
#[derive(Debug, Clone)]
pub struct CurveFit {
    pub profile: qos::DeviceProfile,
    /// Per mix, the IOPS read off its curve at each of the config's targets.
    pub rows: Vec<MixRow>,
    /// Targets that got a point.
    pub targets_ns: Vec<u64>,
    /// Per target that got a point: (max − min) / min of the mixes' token rates under the
    /// fitted write weight, percent — how far the curves are from coinciding.
    pub spread_pct: Vec<f64>,
}

/// Fits the cost model and the latency → token-rate table to closed-loop curves: one per read
/// percentage (100 % included), each a queue-depth sweep of 4 KiB requests.
pub fn fit_curves(
    name: &str,
    curves: &[(u8, Vec<CurvePoint>)],
    targets_ns: &[u64],
) -> Result<CurveFit, CalibrationError> {
    if !curves.iter().any(|(p, _)| *p == 100) || !curves.iter().any(|(p, _)| *p < 100) {
        return Err(CalibrationError::Config(
            "fit_curves: needs a read-only curve and at least one mixed curve".into(),
        ));
    }
    let rows: Vec<MixRow> = curves
        .iter()
        .map(|(pct, c)| MixRow {
            read_pct: *pct,
            iops: targets_ns.iter().map(|&t| iops_at_latency(c, t)).collect(),
        })
        .collect();
    let usable: Vec<usize> = (0..targets_ns.len())
        .filter(|&i| rows.iter().all(|r| r.iops[i] > 0))
        .collect();
    if usable.is_empty() {
        let lightest: Vec<String> = curves
            .iter()
            .map(|(pct, c)| {
                let p = c.iter().map(|p| p.read_p95_ns).min().unwrap_or(0);
                format!("{pct} % reads: {p} ns")
            })
            .collect();
        return Err(CalibrationError::Config(format!(
            "no target in {targets_ns:?} ns is met by every mix at its lightest load ({})",
            lightest.join(", ")
        )));
    }
    let mixed: Vec<(u8, Vec<u64>)> = rows
        .iter()
        .filter(|r| r.read_pct < 100)
        .map(|r| (r.read_pct, usable.iter().map(|&i| r.iops[i]).collect()))
        .collect();
    let write_cost_mtok = fit_write_cost_mtok(&mixed);
    let mut mixed_rates: Vec<u64> = (0..usable.len())
        .map(|k| {
            mixed
                .iter()
                .map(|(pct, iops)| tokens_per_sec(iops[k], *pct, write_cost_mtok))
                .min()
                .unwrap_or(0)
        })
        .collect();
    let spread_pct = (0..usable.len())
        .map(|k| {
            let rates: Vec<u64> = mixed
                .iter()
                .map(|(pct, iops)| tokens_per_sec(iops[k], *pct, write_cost_mtok))
                .collect();
            let max = rates.iter().copied().max().unwrap_or(0) as f64;
            let min = rates.iter().copied().min().unwrap_or(0).max(1) as f64;
            100.0 * (max - min) / min
        })
        .collect();
    let read_only = rows
        .iter()
        .find(|r| r.read_pct == 100)
        .expect("checked above");
    let mut ro_iops: Vec<u64> = usable.iter().map(|&i| read_only.iops[i]).collect();
    for v in [&mut mixed_rates, &mut ro_iops] {
        for i in 1..v.len() {
            v[i] = v[i].max(v[i - 1]);
        }
    }
    let targets: Vec<u64> = usable.iter().map(|&i| targets_ns[i]).collect();
    let profile = assemble_profile(name, &targets, &mixed_rates, &ro_iops, write_cost_mtok)?;
    Ok(CurveFit {
        profile,
        rows,
        targets_ns: targets,
        spread_pct,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Curves made from a known cost model — a write costs 10 reads, a read-only read 0.5, and
    /// p95 = 50 µs + 3 µs per K tokens/s of load — must give that model back: weight 10 reads
    /// exactly, read-only cost 0.5, and the table's rate at each target within the search and
    /// interpolation error (1 %).
    #[test]
    fn fit_curves_recovers_a_known_cost_model() {
        const W: f64 = 10.0;
        let p95_ns = |tokens: f64| (50_000.0 + 3.0 * tokens) as u64;
        let curve = |pct: u8| -> Vec<CurvePoint> {
            (1..=12)
                .map(|k| {
                    let tokens = 60_000.0 * f64::from(k);
                    let r = f64::from(pct) / 100.0;
                    let per_io = if pct == 100 { 0.5 } else { r + (1.0 - r) * W };
                    CurvePoint {
                        read_pct: pct,
                        size_bytes: 4096,
                        queue_depth: k,
                        iops: tokens / per_io,
                        reads: 10_000,
                        read_p50_ns: p95_ns(tokens) / 2,
                        read_p95_ns: p95_ns(tokens),
                        read_p99_ns: p95_ns(tokens),
                        read_mean_ns: p95_ns(tokens) / 2,
                        write_mean_ns: 0,
                        write_buffer_units_end: None,
                    }
                })
                .collect()
        };
        let curves: Vec<(u8, Vec<CurvePoint>)> = [100, 99, 95, 90, 75, 50]
            .iter()
            .map(|&p| (p, curve(p)))
            .collect();
        let fit = fit_curves("known", &curves, &[500_000, 1_000_000, 2_000_000]).expect("fits");
        assert_eq!(fit.profile.write_cost_mtok, 10_000, "{:?}", fit.profile);
        let ro = fit.profile.read_only_read_cost_mtok;
        assert!((495..=505).contains(&ro), "read-only cost {ro} mtok");
        for p in &fit.profile.points {
            // p95 = 50 µs + 3 µs per K tokens/s: the target's load is (target − 50 µs) / 3 µs K.
            let expected = (p.p95_read_latency_ns as f64 - 50_000.0) / 3.0;
            let got = p.tokens_per_sec as f64;
            assert!(
                (got - expected).abs() <= expected * 0.01,
                "{} ns: {got} tokens/s, expected {expected}",
                p.p95_read_latency_ns
            );
        }
        assert!(
            fit.spread_pct.iter().all(|&s| s < 1.0),
            "{:?}",
            fit.spread_pct
        );
    }

    fn p95_at(curve: &[CurvePoint], qd: u32) -> u64 {
        curve
            .iter()
            .find(|p| p.queue_depth == qd)
            .map(|p| p.read_p95_ns)
            .expect("depth measured")
    }

    /// On `nvme-tlc` (TLC programs of 0.56–5 ms, no suspend) a mix's own writes set its read
    /// tail: at QD 1 a 99 % mix writes ~110 times a second and its p95 is the read-only one's
    /// (116 µs here), while at QD 16 a 50 % mix keeps dies programming and its p95 is over
    /// 1 ms. Each point ends with the buffer nearly empty: the loads are below what the flash
    /// drains (a prefilled buffer would have every mix read a program's time at QD 1, whatever
    /// it wrote).
    #[test]
    fn a_mix_meets_its_own_writes_not_a_prefilled_backlog() {
        let d = DeviceConfig::preset("nvme-tlc").unwrap();
        let sweep =
            |pct| closed_loop_sweep(&d, pct, 4096, &[1, 16], 5_000_000, 20_000_000, 1).unwrap();
        let (ro, light, heavy) = (sweep(100), sweep(99), sweep(50));
        assert!(
            p95_at(&light, 1) <= 2 * p95_at(&ro, 1),
            "99 % at QD1: {light:?} vs read-only {ro:?}"
        );
        assert!(p95_at(&heavy, 16) > 1_000_000, "{heavy:?}");
        assert!(
            p95_at(&heavy, 16) > 4 * p95_at(&light, 16),
            "{heavy:?} {light:?}"
        );
        let capacity = d.cache.write_buffer_bytes / 4096;
        for p in light.iter().chain(&heavy) {
            let end = p
                .write_buffer_units_end
                .expect("model points carry the buffer");
            assert!(
                end * 100 < capacity,
                "{p:?}: {end} of {capacity} units dirty"
            );
        }
    }
}
