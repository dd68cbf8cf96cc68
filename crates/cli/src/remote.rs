//! `ullstack sim --remote FILE [--profile PROFILE]`: a remote scenario on the simulated server
//! (crate sim, module `remote`, which also draws the per-tenant table), written as
//! `summary.json`;
//! `--profile` replaces the scenario's `[sim] profile` with a profile TOML (what `ullstack
//! calibrate` writes).

use std::path::Path;

use anyhow::Context;

pub fn run(
    path: &Path,
    seed: Option<u64>,
    profile: Option<&Path>,
    out: &Path,
    json: bool,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the remote scenario {}", path.display()))?;
    let mut cfg = sim::remote::RemoteRunConfig::parse(&text, &path.display().to_string())?;
    if let Some(s) = seed {
        cfg.seed = s;
    }
    if let Some(p) = profile {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("--profile: reading {}", p.display()))?;
        cfg.server.profile = qos::DeviceProfile::from_toml_str(&text)
            .with_context(|| format!("--profile {}", p.display()))?;
    }
    let summary = sim::remote::run(&cfg)?;
    let body = serde_json::to_string_pretty(&summary)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(out.join("summary.json"), &body)
        .with_context(|| format!("writing {}/summary.json", out.display()))?;
    if json {
        println!("{body}");
        return Ok(());
    }
    print!("{}", summary.table());
    println!("wrote {}/summary.json", out.display());
    Ok(())
}
