//! A calibration end to end, as `ullstack calibrate TARGET` runs it: the prober for the target,
//! every sweep ([`crate::sweep::measure`]), the fit ([`crate::curves::fit_curves`]), and the
//! results folder (`profile.toml`, `calibration.json`, the figures, `report.html`) with the
//! summary printed on the terminal. The method and its outputs are in the crate essay.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use crate::curves::{fit_curves, CurvePoint};
use crate::nbd::NETWORK_COMPLETION;
use crate::open_loop::WRITE_COST_FLOOR_MTOK;
use crate::sweep::{measure, targets_for, PolledCurves, Prober};
use crate::target::Target;
use crate::{model, nbd, report, uring};

/// What the command line asks of a calibration (`ullstack calibrate --help` says each).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// TARGET as given (for messages, the report and profile.toml's first line).
    pub target: String,
    /// Results folder (default `results/calibrate/<target name>`).
    pub out: Option<PathBuf>,
    /// Fewer, shorter points.
    pub quick: bool,
    /// Write the whole target sequentially once before measuring.
    pub precondition: bool,
    /// Measured seconds per point on a real target (default 1, quick 0.2; 0.01..=600).
    pub duration_secs: Option<f64>,
    /// Allow writing to a target that holds data.
    pub destructive: bool,
    /// Size of a file that does not exist yet, and the cap on the span measured (default
    /// 1 GiB, quick 256 MiB).
    pub size_bytes: Option<u64>,
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
    args: &Options,
    size_bytes: u64,
) -> anyhow::Result<(Box<dyn Prober + 'a>, String)> {
    let secs = || -> anyhow::Result<f64> {
        let secs = args
            .duration_secs
            .unwrap_or(if args.quick { 0.2 } else { 1.0 });
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
                Box::new(model::ModelProber {
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

/// Calibrates `target` (parsed by [`Target::parse`], which applies the refusal rules) as
/// `args` says: measures every sweep, fits the profile, writes profile.toml, calibration.json,
/// the figures and report.html into the results folder, and prints the summary.
pub fn run(target: &Target, args: &Options) -> anyhow::Result<()> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results/calibrate").join(target.name()));
    let qds: &[u32] = if args.quick {
        &[1, 4, 16, 64]
    } else {
        &[1, 2, 4, 8, 16, 32, 64, 128]
    };
    let size_bytes = match args.size_bytes {
        Some(bytes) => bytes,
        None if args.quick => 256 << 20,
        None => 1 << 30,
    };
    let started = Instant::now();
    let (mut prober, method) = prober(target, args, size_bytes)?;
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
        write_weight_at_floor: profile.write_cost_mtok == WRITE_COST_FLOOR_MTOK,
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
