//! `ullstack calibrate TARGET`: the arguments, handed to crate `calibrate` (which holds the
//! method, the probers, the refusal rules and the report; see its essay).

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;

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

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    // TARGET is checked before --size, so a command with both wrong names TARGET.
    let target = ::calibrate::Target::parse(&args.target, args.destructive)?;
    let size_bytes = match &args.size {
        Some(s) => Some(
            server::config::ByteSize::parse(s)
                .map_err(|e| anyhow!("--size {s:?}: {e}"))?
                .0,
        ),
        None => None,
    };
    let options = ::calibrate::Options {
        target: args.target,
        out: args.out,
        quick: args.quick,
        precondition: args.precondition,
        duration_secs: args.duration,
        destructive: args.destructive,
        size_bytes,
    };
    ::calibrate::run(&target, &options)
}
