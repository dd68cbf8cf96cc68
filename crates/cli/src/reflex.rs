//! The real-server half of `ullstack study reflex`: each scaled scenario runs through
//! `ullstack serve`'s server (in process, the emulated device backend, bound to 127.0.0.1 on a
//! port the kernel picks) and `ullstack bench`'s load generator, bounded by the scenario's
//! duration. The device profile is `reflex-a` scaled by the same share as the tenants' rates,
//! so the scenario keeps its shape: the same share of the device rate reserved, the same BE
//! share left.

use client::bench::{self, BenchConfig, Progress};
use study::reflex::{real_scale_pct, RealOutcome, RealRunner, RealTenant, DEVICE_A_TOML};

/// Runs real scenarios in this process.
pub struct InProcess;

fn server_toml(scheduler_on: bool, scale_pct: u64) -> String {
    let a = qos::DeviceProfile::reflex_a();
    let mut points = String::new();
    for p in &a.points {
        points.push_str(&format!(
            "[[qos.profile.points]]\np95_read_latency_ns = {}\ntokens_per_sec = {}\nread_only_tokens_per_sec = {}\n",
            p.p95_read_latency_ns,
            p.tokens_per_sec * scale_pct / 100,
            p.read_only_tokens_per_sec * scale_pct / 100
        ));
    }
    let tenant = |name: &str, class: &str| {
        format!(
            "[[tenant]]\nname = \"{name}\"\nsecret = \"secret-{}\"\nclass = \"{class}\"\nacl = [{{ volume = \"default\", access = \"read-write\" }}]\n",
            name.to_lowercase()
        )
    };
    format!(
        "[listen]\nnative = \"127.0.0.1:0\"\n[dataplane]\nworkers = 1\n\
         [qos]\nscheduler = \"{}\"\n[qos.profile]\npreset = \"reflex-a\"\nname = \"reflex-a-{scale_pct}pct\"\n{points}\
         [[volume]]\nname = \"default\"\nbackend = {{ kind = \"emulated\", device = {DEVICE_A_TOML}, size = \"1GiB\" }}\n\
         {}{}{}{}",
        if scheduler_on { "on" } else { "off" },
        tenant("A", "lc"),
        tenant("B", "lc"),
        tenant("C", "be"),
        tenant("D", "be"),
    )
}

impl RealRunner for InProcess {
    fn run(
        &self,
        id: &str,
        scenario_toml: &str,
        scheduler_on: bool,
    ) -> Result<RealOutcome, String> {
        let scale = real_scale_pct();
        let cfg_text = server_toml(scheduler_on, scale);
        let config = server::config::ServerConfig::from_toml_str(&cfg_text)
            .map_err(|e| format!("{id}: server config: {e}"))?;
        let scenario = bench::spec::parse_scenario(scenario_toml, id).map_err(|e| e.to_string())?;
        let handle = server::start(config).map_err(|e| format!("{id}: server: {e}"))?;
        let addr = handle
            .addrs
            .native
            .ok_or_else(|| format!("{id}: the server has no native listener"))?;
        let report = bench::run(&BenchConfig {
            server: addr.to_string(),
            duration_ns: scenario.duration_ns,
            ios_per_tenant: None,
            warmup_ns: scenario.warmup_ns.unwrap_or(0),
            threads: scenario.threads.unwrap_or(1),
            seed: scenario.seed.unwrap_or(1),
            tenants: scenario.tenants.clone(),
            progress: Progress::Hidden,
            tls: None,
        });
        handle.shutdown();
        let report = report.map_err(|e| format!("{id}: bench: {e}"))?;
        let mut tenants = Vec::new();
        for t in &report.tenants {
            if let Some(r) = &t.refused {
                return Err(format!("{id}: tenant {} refused: {r}", t.name));
            }
            tenants.push(RealTenant {
                name: t.name.clone(),
                iops: t.iops,
                read_latency_ns_p95: t.reads.latency_ns.as_ref().map_or(0, |l| l.p95),
                slo_p95_read_latency_ns: t.slo.as_ref().map(|s| s.p95_read_latency_ns),
            });
        }
        Ok(RealOutcome {
            id: id.to_string(),
            scenario_toml: scenario_toml.to_string(),
            note: format!(
                "in-process server, 1 worker, scheduler {}, emulated device {DEVICE_A_TOML}, \
                 profile reflex-a scaled to {scale} %; bench with {} thread(s); server config:\n{cfg_text}",
                if scheduler_on { "on" } else { "off" },
                scenario.threads.unwrap_or(1)
            ),
            tenants,
        })
    }
}
