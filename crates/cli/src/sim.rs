//! `ullstack sim` argument wiring.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use sim::config::DeviceRunOverrides;
use sim::system::SystemConfig;
use sim::{DeviceRun, DeviceRunConfig, RunFileSettings, Spinner};

/// Run a deterministic simulation.
///
/// With no arguments: the embedded full-system default — the online service apache
/// (latency-critical) co-running with the offline job pagerank on the arm8 host and the zssd
/// device for 10 s simulated, and apache alone; prints response times co-run vs alone, the
/// offline job's throughput, CPU time by category and the latency-critical I/O's time per layer.
///
///   ullstack sim
///   ullstack sim --system my-system.toml --out results/mine   (see sim::system::config)
///
/// Device-level run: fio-like jobs go straight into the SSD model's NVMe queues through a thin
/// host with fixed per-I/O costs.
///
///   ullstack sim --device zssd --job examples/randread-qd32.fio
///   ullstack sim --device nvme-tlc --job examples/mixed-70-30.fio --seed 7 --out results/tlc
///   ullstack sim --config run.toml          (device overrides, host costs, job file, seed)
///
/// Device-level trace replay: a block trace (blkparse text, MSR Cambridge, SPC, DiskSim or
/// MQSim ASCII, or ullstack's CSV) streamed into the device, open loop at its own times
/// (`--speed F` to scale them) or closed loop at `--qd N`; addresses are folded onto the
/// device's capacity (modulo; see workload::trace::replay).
///
///   ullstack sim --device zssd --trace hm_1.csv --speed 4 --from 10s --to 70s
///   ullstack sim --device zssd --trace sda.blkparse.txt --qd 32 --trace-device 8,0
///
/// A device-level run with no job runs the embedded device-level default (4 KiB random read
/// and write at QD1 and QD32). The same configuration and seed always give the same results
/// (summary.json is identical apart from `sim.wall_ns`).
///
/// A remote run (the server of `ullstack serve` modelled; see sim::remote) can take the device
/// profile `ullstack calibrate` wrote:
///
///   ullstack sim --remote scenario.toml --profile results/calibrate/model-zssd/profile.toml
///
/// A named stack sets the switches of a published design on any system run (`--stack list`
/// prints every stack with the switches it sets; a key the system file sets to another value
/// is an error):
///
///   ullstack sim --system corun.toml --stack fd
///
/// Either kind of run writes a time series with `--series-ms N` (timeseries.csv, one row per
/// N ms of simulated time; columns in sim::series).
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct SimArgs {
    /// Remote run: a `ullstack bench` scenario file whose `[sim]` table describes the server,
    /// network and device to model (sim::remote); the same file drives `ullstack bench`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["system", "device", "job", "config", "host", "integrity", "series_ms"])]
    remote: Option<PathBuf>,
    /// The modelled server's device profile for a `--remote` run: a profile TOML, as
    /// `ullstack calibrate` writes it (profile.toml), overriding the scenario's `[sim] profile`.
    #[arg(long, value_name = "FILE", requires = "remote")]
    profile: Option<PathBuf>,
    /// Full-system run from a system config (host, device, processes, duration, seed).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["device", "job", "config", "host", "integrity"])]
    system: Option<PathBuf>,
    /// Named stack applied to the system run (vanilla, fd-buf, fd-ftl, fd, oracle, …), or
    /// `list` to print every stack and the switches it sets.
    #[arg(long, value_name = "NAME|list", conflicts_with_all = ["device", "job", "config", "host", "integrity", "device_level"])]
    stack: Option<String>,
    /// Device preset (zssd, nvme-tlc, bics, vnand) or a device TOML file (`preset = ".."` + overrides).
    #[arg(long, value_name = "PRESET|FILE")]
    device: Option<String>,
    /// fio job file (INI, as fio reads it) or TOML job file.
    #[arg(long, value_name = "FILE")]
    job: Option<PathBuf>,
    /// Run configuration in TOML (seed, job_file, integrity, [device], [host]); flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Host cost preset of the thin host: x86-4 (default), arm8, arm8-4g.
    #[arg(long, value_name = "PRESET")]
    host: Option<String>,
    /// Seed of every random stream in the run.
    #[arg(long)]
    seed: Option<u64>,
    /// Results folder (summary.json, latency CSVs).
    #[arg(long, value_name = "DIR", default_value = "results/sim")]
    out: PathBuf,
    /// Force a device-level run (the embedded device-level default when no job is given).
    #[arg(long, conflicts_with = "system")]
    device_level: bool,
    /// Data-integrity mode: track a version per written 4 KiB unit and check every read.
    #[arg(long)]
    integrity: bool,
    /// Print summary.json to stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write timeseries.csv into the results folder: one row per N ms of simulated time
    /// (I/O rates and latency percentiles per class, dirty pages, write buffer, cache, GC, CPU
    /// per category). Off by default; it does not change summary.json.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    series_ms: Option<u64>,
    #[command(flatten)]
    replay: crate::trace::ReplayArgs,
}

/// Opens `<out>/timeseries.csv` for `--series-ms`.
fn series_file(args: &SimArgs) -> anyhow::Result<Option<(u64, Box<dyn std::io::Write>)>> {
    let Some(ms) = args.series_ms else {
        return Ok(None);
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let path = args.out.join("timeseries.csv");
    let f = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    Ok(Some((ms * 1_000_000, Box::new(std::io::BufWriter::new(f)))))
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    if args.stack.as_deref() == Some("list") {
        print!("{}", sim::stack::list_text());
        return Ok(());
    }
    if let Some(path) = &args.remote {
        return crate::remote::run(
            path,
            args.seed,
            args.profile.as_deref(),
            &args.out,
            args.json,
        );
    }
    let device_level = args.device_level
        || args.device.is_some()
        || args.job.is_some()
        || args.config.is_some()
        || args.host.is_some()
        || args.integrity
        || args.replay.trace.is_some();
    if !device_level {
        return run_system(args);
    }
    let file = match &args.config {
        Some(p) => RunFileSettings::load(p)?,
        None => RunFileSettings::default(),
    };
    let device = match &args.device {
        Some(d) if d.ends_with(".toml") => {
            let text =
                std::fs::read_to_string(d).with_context(|| format!("reading device file {d}"))?;
            Some(
                device::DeviceConfig::from_toml_str(&text)
                    .with_context(|| format!("device file {d}"))?,
            )
        }
        Some(d) => Some(device::DeviceConfig::preset(d)?),
        None => None,
    };
    let overrides = DeviceRunOverrides {
        seed: args.seed,
        device,
        host: args.host.clone(),
        job_file: args.job.clone(),
        integrity: args.integrity,
    };
    let mut cfg = DeviceRunConfig::resolve(file, overrides)?;
    let trace = args.replay.spec()?;
    if let Some(t) = &trace {
        cfg.job_source = t.path.display().to_string();
    }
    let mut run = match &trace {
        Some(t) => DeviceRun::with_trace(&cfg, t)?,
        None => DeviceRun::new(&cfg)?,
    };
    if let Some((window_ns, out)) = series_file(&args)? {
        run.enable_series(window_ns, out)?;
    }
    let summary = run.run(&mut Spinner::default())?;
    for w in &summary.device.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(t) = &summary.sim.trace {
        eprintln!("{}", t.line());
    }
    summary
        .write_folder(&args.out)
        .with_context(|| format!("writing results to {}", args.out.display()))?;
    if args.json {
        println!("{}", summary.to_json());
    } else {
        print!("{}", summary.table());
        println!("results: {}", args.out.display());
    }
    Ok(())
}

/// A full-system run: `--system FILE`, or the embedded default.
fn run_system(args: SimArgs) -> anyhow::Result<()> {
    let stack = match &args.stack {
        Some(name) => Some(sim::stack::find(name).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let mut cfg = match (&args.system, stack) {
        (Some(p), stack) => SystemConfig::load_with_stack(p, stack)?,
        (None, None) => SystemConfig::embedded_default(),
        (None, Some(stack)) => SystemConfig::parse_with_stack(
            sim::system::DEFAULT_SYSTEM_TOML,
            "embedded-default",
            std::path::Path::new("."),
            Some(stack),
        )?,
    };
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    let series =
        series_file(&args)?.map(|(window_ns, out)| sim::system::SeriesOut { window_ns, out });
    let summary = sim::system::run_with_series(&cfg, &mut Spinner::default(), series)?;
    for w in &summary.run.device.warnings {
        eprintln!("warning: {w}");
    }
    summary
        .write_folder(&args.out)
        .with_context(|| format!("writing results to {}", args.out.display()))?;
    if args.json {
        println!("{}", summary.to_json());
    } else {
        print!("{}", summary.table());
        println!("results: {}", args.out.display());
    }
    Ok(())
}
