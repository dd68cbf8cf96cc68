//! `ullstack sim` argument wiring. Placeholder until the owning crate lands its entry point.

/// Arguments of `ullstack sim`.
#[derive(clap::Args, Debug)]
pub struct SimArgs {}

pub fn run(_args: SimArgs) -> anyhow::Result<()> {
    anyhow::bail!("`ullstack sim` is not built yet")
}
