//! `ullstack calibrate TARGET`: measure a device, a file, an NBD export or the SSD model the way
//! storage papers do, and fit the QoS cost model and latency → token-rate table that `serve`
//! and `sim` load.
//!
//! # What it does
//! 1. **Target** (`target.rs`): `model:NAME` or `model:FILE.toml` (the SSD model, in virtual
//!    time: deterministic), a regular file (created at `--size` if missing), a block device,
//!    or `nbd://host[:port]/export` (`nbd.rs`). The mixes write, so a target that holds data
//!    is refused unless `--destructive`, and a block device that something uses (mounted,
//!    swap, holders) or a missing name under `/dev` is refused always.
//! 2. **Curves** (closed loop: a queue depth of requests kept in flight, uniform random over the
//!    target): p95/p50 read latency against load for read ratios 100, 99, 95, 90, 75 and 50 %
//!    at 4 KiB (a queue-depth sweep each); latency against queue depth (the read-only sweep);
//!    sizes 4–128 KiB at QD 1 and 16 (reads). Files and block devices go through io_uring
//!    with O_DIRECT where the filesystem allows (buffered otherwise, and the report says so)
//!    (`uring.rs`); NBD through io_uring SEND/RECV on one TCP connection, where O_DIRECT and
//!    polled completion do not apply (`nbd.rs`). **Polled completion** (IORING_SETUP_IOPOLL)
//!    is tried at QD1 on files and devices: where it works, the read-only QD sweep and the
//!    QD1 size sweep are measured polled as well and drawn against the interrupt-driven ones;
//!    where it fails (this VM's virtio disk: EOPNOTSUPP) the terminal and the report say so.
//! 3. **Fit** (`server::calibrate::fit_curves`, method in `server::calibrate::curves`): at each
//!    p95 target (500 µs, 1 ms, 2 ms: the published table's; also 2, 4 and 8 × the slowest
//!    mix's lightest-load p95, so a slow or loaded device still gets points: [`targets_for`])
//!    read each curve's IOPS; the write weight is the one that makes the mixes' token rates
//!    agree best (the "curves coincide" criterion); the table's rate is the smallest mix's;
//!    the read-only read cost is the mixed rate over the read-only IOPS. The fit error is the
//!    remaining spread of the mixes' token rates at each target.
//! 4. **Output** (`--out`, default `results/calibrate/NAME`): `profile.toml` (`ullstack serve
//!    --profile FILE`, `ullstack sim --remote FILE --profile FILE`, or `[sim] profile =
//!    "FILE"`), `calibration.json` (every point), the figures (CSV, SVG, PNG through the study
//!    machinery, `report.rs`: the model drawn over the measured curves, the fit error as a
//!    band) and `report.html`.
//!
//! # The write weight of the presets
//! `zssd` fits the floor (0.25 read per write): its reads are bound by the PCIe link's
//! device → host direction, writes use the other direction and SLC programs with suspend, so a
//! mix that writes more sustains more IOPS (the CLI test `model_zssd_recovers_the_models_known_costs`).
//! `nvme-tlc` used to fit the floor too; the cause was the model sweep's prefilled write buffer
//! (see `server::calibrate::curves`), and it now fits tens of reads per write. A device whose
//! write cost is known by construction (one firmware core, 10 µs per read and 40 µs per write:
//! 4 reads per write) comes back within the CLI test's tolerance.
//!
//! # What it leaves out
//! Open-loop (Poisson) load for real targets (closed loop gives the load points), several
//! submitting threads or connections, TLS for NBD.

mod nbd;
mod report;
mod target;
mod uring;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use server::calibrate::{closed_loop_sweep, fit_curves, CurvePoint};

use target::Target;

/// Measure a device, file, NBD export or the SSD model and fit the QoS device profile.
///
///   ullstack calibrate model:zssd --quick                the model, in virtual time
///   ullstack calibrate /tmp/cal.img --size 1GiB          a file (created if missing)
///   ullstack calibrate /dev/nvme1n1 --destructive        a block device (its data is overwritten)
///   ullstack calibrate nbd://server:10809/vol --quick    an NBD export (a fresh one, or --destructive)
///
/// Writes profile.toml (for `ullstack serve --profile FILE`, `ullstack sim --remote FILE
/// --profile FILE` and `[sim] profile = "FILE"`), calibration.json, plots and report.html
/// into --out.
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CalibrateArgs {
    /// model:NAME | model:FILE.toml | a file | a block device | nbd://host[:port]/export
    #[arg(value_name = "TARGET")]
    target: String,
    /// Results folder (default results/calibrate/<target name>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Fewer, shorter points (seconds).
    #[arg(long)]
    quick: bool,
    /// Write the whole target sequentially once before measuring (a created file is always
    /// filled; the model starts preconditioned, as its preset says).
    #[arg(long)]
    precondition: bool,
    /// Measured seconds per point on a real target (default 1, --quick 0.2).
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Allow writing to a target that holds data (its contents are destroyed). A block
    /// device in use (mounted, swap, held) is refused even so.
    #[arg(long)]
    destructive: bool,
    /// Size of a file that does not exist yet (default 1GiB, --quick 256MiB); also caps the
    /// span measured on a larger target.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
}

/// p95 read-latency targets of the table (the published table's points and the midpoint).
pub const TARGETS_NS: [u64; 3] = [500_000, 1_000_000, 2_000_000];
/// Read percentages of the load curves.
pub const READ_PCTS: [u8; 6] = [100, 99, 95, 90, 75, 50];
/// Request sizes of the size sweep, bytes.
pub const SIZES_BYTES: [u64; 6] = [4096, 8192, 16384, 32768, 65536, 131072];
/// Queue depths of the size sweep.
pub const SIZE_QDS: [u32; 2] = [1, 16];

/// How completions are reaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Completion {
    /// The task sleeps until the device's interrupt wakes it.
    Interrupt,
    /// The kernel spins on the device's poll queue (IORING_SETUP_IOPOLL).
    Polled,
}

/// Whether polled completion can be measured on a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Polling {
    /// The question does not arise (the model; a network target): why.
    NotApplicable(String),
    /// Tried at QD1 and refused: the error.
    Unavailable(String),
    /// Works: polled curves are measured too.
    Available,
}

impl Polling {
    /// The line the terminal and the report print.
    pub fn describe(&self) -> String {
        match self {
            Polling::NotApplicable(why) => why.clone(),
            Polling::Unavailable(e) => format!(
                "polled completion unavailable on this target ({e}); every curve is interrupt-driven"
            ),
            Polling::Available => "polled completion (IORING_SETUP_IOPOLL) works here: the read-only QD sweep and the QD1 size sweep were measured polled too (figures interrupt_vs_polled_*)".into(),
        }
    }
}

/// Takes curve points: closed-loop loads of each queue depth in turn.
trait Prober {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
        completion: Completion,
    ) -> anyhow::Result<Vec<CurvePoint>>;

    /// Whether polled completion can be measured (may take a point to find out).
    fn polling(&mut self) -> Polling;
}

struct ModelProber<'a> {
    device: &'a device::DeviceConfig,
    settle_ns: u64,
    measure_ns: u64,
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

impl Prober for uring::UringProber {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
        completion: Completion,
    ) -> anyhow::Result<Vec<CurvePoint>> {
        qds.iter()
            .map(|&qd| self.run(read_pct, size_bytes, qd, completion))
            .collect()
    }

    fn polling(&mut self) -> Polling {
        match self.run(100, 4096, 1, Completion::Polled) {
            Ok(_) => Polling::Available,
            Err(e) => Polling::Unavailable(format!("{e:#}")),
        }
    }
}

impl Prober for nbd::NbdProber {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
        _: Completion,
    ) -> anyhow::Result<Vec<CurvePoint>> {
        qds.iter()
            .map(|&qd| self.run(read_pct, size_bytes, qd))
            .collect()
    }

    fn polling(&mut self) -> Polling {
        Polling::NotApplicable(NETWORK_COMPLETION.into())
    }
}

/// What the report says about completion on a network target.
const NETWORK_COMPLETION: &str = "O_DIRECT and polled completion do not apply to a network \
     target (no page cache on this side; IOPOLL is for block devices); the latency includes both \
     TCP stacks, the network and the server's own path";

/// The polled sweeps, where polling works.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PolledCurves {
    /// The read-only 4 KiB queue-depth sweep, polled.
    pub read_only: Vec<CurvePoint>,
    /// Reads of each size at QD1, polled.
    pub sizes: Vec<CurvePoint>,
}

/// Every curve of a calibration.
#[derive(Clone, Debug)]
pub struct Measurements {
    /// Per read percentage, the queue-depth sweep at 4 KiB (interrupt-driven).
    pub curves: Vec<(u8, Vec<CurvePoint>)>,
    pub sizes: Vec<CurvePoint>,
    pub polling: Polling,
    pub polled: Option<PolledCurves>,
}

/// Runs every sweep of the module essay on `prober`.
fn measure(prober: &mut dyn Prober, qds: &[u32]) -> anyhow::Result<Measurements> {
    let polling = prober.polling();
    let mut curves = Vec::new();
    for &pct in &READ_PCTS {
        curves.push((pct, prober.sweep(pct, 4096, qds, Completion::Interrupt)?));
    }
    let mut sizes = Vec::new();
    for &s in &SIZES_BYTES {
        sizes.extend(prober.sweep(100, s, &SIZE_QDS, Completion::Interrupt)?);
    }
    let polled = if polling == Polling::Available {
        let read_only = prober.sweep(100, 4096, qds, Completion::Polled)?;
        let mut sizes = Vec::new();
        for &s in &SIZES_BYTES {
            sizes.extend(prober.sweep(100, s, &[1], Completion::Polled)?);
        }
        Some(PolledCurves { read_only, sizes })
    } else {
        None
    };
    Ok(Measurements {
        curves,
        sizes,
        polling,
        polled,
    })
}

/// Everything measured, as written to `calibration.json`.
#[derive(serde::Serialize)]
struct Measured {
    target: String,
    method: String,
    /// Per read percentage, the queue-depth sweep at 4 KiB.
    curves: Vec<(u8, Vec<CurvePoint>)>,
    sizes: Vec<CurvePoint>,
    polled: String,
    polled_curves: Option<PolledCurves>,
    write_cost_mtok: u64,
    read_only_read_cost_mtok: u64,
    targets_ns: Vec<u64>,
    tokens_per_sec: Vec<u64>,
    spread_pct: Vec<f64>,
    write_weight_at_floor: bool,
}

/// The prober for `target` and the method line of the report.
fn prober<'a>(
    target: &'a Target,
    args: &CalibrateArgs,
    size_bytes: u64,
) -> anyhow::Result<(Box<dyn Prober + 'a>, String)> {
    let secs = || -> anyhow::Result<f64> {
        let secs = args.duration.unwrap_or(if args.quick { 0.2 } else { 1.0 });
        if !(0.01..=600.0).contains(&secs) {
            bail!("--duration {secs}: expected 0.01..=600 seconds per point");
        }
        Ok(secs)
    };
    Ok(match target {
        Target::Model { name, device } => {
            let (settle_ns, measure_ns) = if args.quick {
                (5_000_000, 20_000_000)
            } else {
                (20_000_000, 200_000_000)
            };
            let method = format!(
                "the SSD model `{name}` in virtual time (closed loop from an empty write buffer, {} ms settle + {} ms measured per point, seed 1, deterministic)",
                settle_ns / 1_000_000,
                measure_ns / 1_000_000
            );
            (
                Box::new(ModelProber {
                    device,
                    settle_ns,
                    measure_ns,
                }),
                method,
            )
        }
        Target::File { path, block_device } => {
            let secs = secs()?;
            let p = uring::UringProber::open(
                path,
                size_bytes,
                *block_device,
                args.precondition,
                Duration::from_secs_f64(secs),
            )?;
            let method = format!(
                "io_uring on {} ({}), {secs} s measured per point after {:.2} s settle, span {} bytes",
                path.display(),
                if p.direct { "O_DIRECT" } else { "buffered: the filesystem refused O_DIRECT, so the page cache is measured too" },
                secs / 5.0,
                p.span_bytes
            );
            (Box::new(p), method)
        }
        Target::Nbd(uri) => {
            let secs = secs()?;
            let p = nbd::NbdProber::open(
                uri,
                size_bytes,
                args.destructive,
                args.precondition,
                Duration::from_secs_f64(secs),
            )?;
            let method = format!(
                "NBD to {} (export {:?}, {} bytes), io_uring SEND/RECV on one TCP connection, {secs} s measured per point after {:.2} s settle, span {} bytes; {NETWORK_COMPLETION}",
                uri.uri,
                uri.export,
                p.export.size_bytes,
                secs / 5.0,
                p.span_bytes
            );
            (Box::new(p), method)
        }
    })
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target, args.destructive)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results/calibrate").join(target.name()));
    let qds: &[u32] = if args.quick {
        &[1, 4, 16, 64]
    } else {
        &[1, 2, 4, 8, 16, 32, 64, 128]
    };
    let size_bytes = match &args.size {
        Some(s) => {
            server::config::ByteSize::parse(s)
                .map_err(|e| anyhow!("--size {s:?}: {e}"))?
                .0
        }
        None if args.quick => 256 << 20,
        None => 1 << 30,
    };
    let started = Instant::now();
    let (mut prober, method) = prober(&target, &args, size_bytes)?;
    let m = measure(prober.as_mut(), qds)
        .with_context(|| format!("TARGET {:?}: measuring", args.target))?;
    drop(prober);
    let polled = m.polling.describe();
    let name = format!("calibrated-{}", target.name());
    let targets = targets_for(&m.curves);
    let fit = fit_curves(&name, &m.curves, &targets)
        .map_err(|e| anyhow!("fitting {}: {e}", args.target))?;
    let profile = &fit.profile;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let profile_text = format!(
        "# ullstack calibrate {} — {method}\n{}",
        args.target,
        profile.to_toml_string()
    );
    std::fs::write(out.join("profile.toml"), &profile_text).context("writing profile.toml")?;
    let measured = Measured {
        target: args.target.clone(),
        method: method.clone(),
        curves: m.curves.clone(),
        sizes: m.sizes.clone(),
        polled: polled.clone(),
        polled_curves: m.polled.clone(),
        write_cost_mtok: profile.write_cost_mtok,
        read_only_read_cost_mtok: profile.read_only_read_cost_mtok,
        targets_ns: fit.targets_ns.clone(),
        tokens_per_sec: profile.points.iter().map(|p| p.tokens_per_sec).collect(),
        spread_pct: fit.spread_pct.clone(),
        write_weight_at_floor: profile.write_cost_mtok == server::calibrate::WRITE_COST_FLOOR_MTOK,
    };
    std::fs::write(
        out.join("calibration.json"),
        serde_json::to_string_pretty(&measured)?,
    )
    .context("writing calibration.json")?;
    let figures = report::figures(&m, &fit);
    let mut pngs = Vec::new();
    for f in &figures {
        pngs.push(f.write(&out).map_err(|e| anyhow!(e))?);
    }
    let summary = report::summary_table(&fit);
    let model = report::model_table(&fit, &targets, &m.curves);
    let html = report::report_html(&report::Report {
        target: &args.target,
        method: &method,
        polled: &polled,
        summary: &summary,
        model: &model,
        figures: &figures,
        pngs: &pngs,
        profile: &profile_text,
    });
    std::fs::write(out.join("report.html"), html).context("writing report.html")?;
    println!("{method}");
    print!("{}", summary.to_text());
    println!("{polled}");
    if measured.write_weight_at_floor {
        println!("note: the write weight is at its floor (mixes sustained more IOPS the more they wrote)");
    }
    println!(
        "calibrated in {:.1} s; profile: {}/profile.toml (ullstack serve --profile FILE); report: {}/report.html",
        started.elapsed().as_secs_f64(),
        out.display(),
        out.display()
    );
    Ok(())
}

/// The table's targets: the published 500 µs, 1 ms and 2 ms, plus 2, 4 and 8 times the
/// slowest mix's lightest-load p95 (rounded up to µs), so a device whose tails sit above the
/// published targets still gets a table (a target some mix misses even at its lightest load
/// gets no point).
pub fn targets_for(curves: &[(u8, Vec<CurvePoint>)]) -> Vec<u64> {
    let slowest = curves
        .iter()
        .map(|(_, c)| c.iter().map(|p| p.read_p95_ns).min().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let mut t: Vec<u64> = TARGETS_NS.to_vec();
    for m in [2, 4, 8] {
        t.push((slowest * m).div_ceil(1000).max(1) * 1000);
    }
    t.sort_unstable();
    t.dedup();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prober whose device follows a known shape: a read costs 10 µs of one server, a write
    /// 40 µs, so at QD q the p95 is q × the mean cost; polled completion shaves 2 µs. Records
    /// every sweep it is asked for.
    struct Stub {
        polls: bool,
        asked: Vec<(u8, u64, Vec<u32>, Completion)>,
    }

    impl Prober for Stub {
        fn sweep(
            &mut self,
            read_pct: u8,
            size_bytes: u64,
            qds: &[u32],
            completion: Completion,
        ) -> anyhow::Result<Vec<CurvePoint>> {
            self.asked
                .push((read_pct, size_bytes, qds.to_vec(), completion));
            let r = f64::from(read_pct) / 100.0;
            let mean_ns = (r * 10_000.0 + (1.0 - r) * 40_000.0) * size_bytes as f64 / 4096.0;
            let poll_saving = if completion == Completion::Polled {
                2_000.0
            } else {
                0.0
            };
            Ok(qds
                .iter()
                .map(|&qd| {
                    let lat = (f64::from(qd) * mean_ns - poll_saving) as u64;
                    CurvePoint {
                        read_pct,
                        size_bytes,
                        queue_depth: qd,
                        iops: 1e9 / mean_ns,
                        reads: 1000,
                        read_p50_ns: lat,
                        read_p95_ns: lat,
                        read_p99_ns: lat,
                        read_mean_ns: lat,
                        write_mean_ns: lat,
                        write_buffer_units_end: None,
                    }
                })
                .collect())
        }

        fn polling(&mut self) -> Polling {
            if self.polls {
                Polling::Available
            } else {
                Polling::Unavailable("io_uring setup: Operation not supported (os error 95)".into())
            }
        }
    }

    #[test]
    fn where_polling_works_the_qd1_curves_are_measured_polled_and_drawn() {
        let mut stub = Stub {
            polls: true,
            asked: Vec::new(),
        };
        let qds = [1, 4, 16];
        let m = measure(&mut stub, &qds).unwrap();
        let p = m.polled.as_ref().expect("polled curves");
        assert_eq!(p.read_only.len(), qds.len());
        assert!(p.sizes.iter().all(|x| x.queue_depth == 1));
        assert_eq!(p.sizes.len(), SIZES_BYTES.len());
        let polled_sweeps = stub
            .asked
            .iter()
            .filter(|a| a.3 == Completion::Polled)
            .count();
        assert_eq!(polled_sweeps, 1 + SIZES_BYTES.len());
        // Polled is faster by the stub's 2 µs at QD1.
        assert_eq!(
            m.curves[0].1[0].read_p50_ns - p.read_only[0].read_p50_ns,
            2_000
        );
        let targets = targets_for(&m.curves);
        let fit = fit_curves("stub", &m.curves, &targets).unwrap();
        let figs = report::figures(&m, &fit);
        let f = figs
            .iter()
            .find(|f| f.stem == "interrupt_vs_polled_qd")
            .expect("an interrupt-vs-polled figure");
        assert!(f.series.iter().any(|s| s.name.contains("polled")));
        assert!(figs.iter().any(|f| f.stem == "interrupt_vs_polled_size"));
        assert!(m.polling.describe().contains("works here"));
    }

    #[test]
    fn where_polling_fails_it_is_said_and_nothing_is_measured_polled() {
        let mut stub = Stub {
            polls: false,
            asked: Vec::new(),
        };
        let m = measure(&mut stub, &[1, 4, 16]).unwrap();
        assert!(m.polled.is_none());
        assert!(stub.asked.iter().all(|a| a.3 == Completion::Interrupt));
        let text = m.polling.describe();
        assert!(
            text.contains("unavailable") && text.contains("os error 95"),
            "{text}"
        );
        let targets = targets_for(&m.curves);
        let fit = fit_curves("stub", &m.curves, &targets).unwrap();
        assert!(report::figures(&m, &fit)
            .iter()
            .all(|f| !f.stem.contains("polled")));
    }

    /// The stub's costs are exact: a write is 4 reads. The report's model curves then lie on
    /// the measured ones, and the band of the weighted figure is as wide as the spread.
    #[test]
    fn the_model_is_drawn_over_the_curves_with_its_error() {
        let mut stub = Stub {
            polls: false,
            asked: Vec::new(),
        };
        let m = measure(&mut stub, &[1, 2, 4, 8, 16, 32, 64]).unwrap();
        let targets = targets_for(&m.curves);
        let fit = fit_curves("stub", &m.curves, &targets).unwrap();
        assert_eq!(fit.profile.write_cost_mtok, 4_000, "{:?}", fit.profile);
        let figs = report::figures(&m, &fit);
        let load = figs.iter().find(|f| f.stem == "load_latency").unwrap();
        let model: Vec<_> = load
            .series
            .iter()
            .filter(|s| s.name.starts_with("model"))
            .collect();
        assert_eq!(model.len(), READ_PCTS.len());
        assert!(model
            .iter()
            .all(|s| s.stroke == study::plot::Stroke::Dashed));
        let weighted = figs.iter().find(|f| f.stem == "weighted_load").unwrap();
        let lower = weighted
            .series
            .iter()
            .find(|s| s.name == "model: table rate")
            .unwrap();
        let upper = weighted
            .series
            .iter()
            .find(|s| s.name == "model + fit error")
            .unwrap();
        for ((lo, hi), spread) in lower.points.iter().zip(&upper.points).zip(&fit.spread_pct) {
            assert!((hi.0 / lo.0 - 1.0 - spread / 100.0).abs() < 1e-9);
        }
        // The mixed curves use colours 1..=5; the band uses 0, which only the read-only
        // curve uses in the other figure.
        assert!(weighted
            .series
            .iter()
            .filter(|s| !s.name.starts_with("model"))
            .all(|s| s.colour != lower.colour));
        let table = report::model_table(&fit, &targets, &m.curves);
        assert_eq!(table.rows.len(), READ_PCTS.len());
    }
}
