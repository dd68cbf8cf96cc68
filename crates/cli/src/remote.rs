//! `ullstack sim --remote FILE [--profile PROFILE]`: a remote scenario on the simulated server
//! (crate sim, module `remote`), printed as a per-tenant table and written as `summary.json`;
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
    println!(
        "remote: {} threads, scheduler {:?}, device {}, profile {}, {} ms measured, seed {}",
        summary.workers,
        summary.scheduler,
        summary.device,
        summary.profile,
        summary.duration_ns / 1_000_000,
        summary.seed
    );
    println!(
        "{:<12} {:>5} {:>10} {:>10} {:>10} {:>10} {:>12} {:>6}",
        "tenant", "class", "IOPS", "p50 µs", "p95 µs", "p99 µs", "tokens/s", "SLO"
    );
    for t in &summary.tenants {
        println!(
            "{:<12} {:>5} {:>10.0} {:>10.1} {:>10.1} {:>10.1} {:>12.0} {:>6}",
            t.name,
            t.class,
            t.iops,
            t.read_latency_ns_p50 as f64 / 1e3,
            t.read_latency_ns_p95 as f64 / 1e3,
            t.read_latency_ns_p99 as f64 / 1e3,
            t.tokens_per_sec,
            match t.slo_met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "-",
            }
        );
    }
    println!(
        "dataplane threads busy: {}",
        summary
            .worker_busy_pct
            .iter()
            .map(|p| format!("{p:.0} %"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("wrote {}/summary.json", out.display());
    Ok(())
}
