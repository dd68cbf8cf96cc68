//! `ullstack bench` argument wiring. Placeholder until the owning crate lands its entry point.

/// Arguments of `ullstack bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("`ullstack bench` is not built yet")
}
