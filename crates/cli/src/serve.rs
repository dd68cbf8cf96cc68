//! `ullstack serve` argument wiring. Placeholder until the owning crate lands its entry point.

/// Arguments of `ullstack serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("`ullstack serve` is not built yet")
}
