//! `ullstack serve`: argument parsing for the remote-flash server; the work is in crate `server`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use server::config::overrides::Overrides;
use server::config::{IdlePolicy, ServerConfig};

/// Serve remote flash over the ullstack protocol and NBD, with per-tenant QoS.
///
/// Quick start (no config file), as with nbdkit:
///
///   ullstack serve --memory 1GiB --listen 127.0.0.1:10809
///
/// serves one sparse in-memory volume as the NBD export `default` on 127.0.0.1:10809 and on
/// the own protocol on the next port (127.0.0.1:10810; change it with --listen-native), to
/// one open best-effort tenant named `open` (any secret is accepted), priced with the
/// `memory` QoS profile, which does not pace RAM. Try it with
///
///   nbdinfo nbd://127.0.0.1:10809/default
///   fio --ioengine=nbd --uri=nbd://127.0.0.1:10809/default --rw=randread --bs=4k --name=r
///
/// Full form: `ullstack serve --config server.toml` (volumes on memory or files, tenants with
/// secrets, SLOs and ACLs, NBD exports, limits, QoS profile: docs/server.md). Flags given
/// with --config override the file's values.
///
/// TLS (both listeners; NBD clients must STARTTLS, plain nbd:// is refused):
///
///   ullstack serve --memory 1GiB --tls-psk keys.psk
///   nbdinfo 'nbds://alice@127.0.0.1:10809/default?tls-psk-file=keys.psk'
///
/// with keys.psk in psktool's format (`alice:` and a hex key per line; `psktool -u alice -p
/// keys.psk` writes one). A PSK identity is a tenant name: it may use its own tenant's exports
/// and open ones. --tls-certificate/--tls-key serve a PEM certificate instead or as well.
///
/// SIGINT or SIGTERM stops accepting, drains in-flight I/O, replies and exits 0; connections
/// still owed something after `limits.shutdown_grace_ms` (default 30 s) are closed and the
/// exit status is 3. SIGHUP re-reads --config FILE (tenants, secrets, ACLs, exports, new
/// volumes, TLS keys) without a restart, or refuses it and changes nothing; so does `POST
/// /reload` on the admin address with `[admin] token`.
#[derive(clap::Args, Debug, Clone)]
#[command(verbatim_doc_comment)]
pub struct ServeArgs {
    /// Server config file (TOML). Mutually exclusive with --memory.
    #[arg(long, value_name = "FILE", conflicts_with = "memory")]
    config: Option<PathBuf>,

    /// Quick start: serve one in-memory volume of this size (e.g. 1GiB, 512MiB, 4G).
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,

    /// NBD listen address (quick start default 127.0.0.1:10809).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Own-protocol listen address (quick start default: the NBD port + 1).
    #[arg(long, value_name = "ADDR")]
    listen_native: Option<SocketAddr>,

    /// Admin address for `GET /metrics` (Prometheus text); off unless given or in the config.
    #[arg(long, value_name = "ADDR")]
    admin: Option<SocketAddr>,

    /// Worker threads (thread per core; default 2).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,

    /// What an idle worker does: `spin` (lowest latency, burns a core) or `block-after-spin`.
    #[arg(long, value_name = "POLICY", value_parser = str::parse::<IdlePolicy>)]
    idle: Option<IdlePolicy>,

    /// Under pipelined load, the longest pause between loop steps so each takes a batch (0: off;
    /// default 160000). The worker climbs to it (from 40 µs, doubling) only while a longer
    /// pause gathers a bigger batch; QD1 and shallow closed-loop clients get no pause.
    #[arg(long, value_name = "NS")]
    coalesce_ns: Option<u64>,

    /// Bytes all connections together may make the server hold (in-flight payloads, queued
    /// replies, input buffers); over it no connection is read until replies drain. Default: a
    /// quarter of physical memory (`limits.max_memory_bytes`; at least 256 MiB).
    #[arg(long, value_name = "SIZE")]
    max_memory: Option<String>,

    /// QoS device profile file (what `ullstack calibrate` writes as profile.toml); replaces
    /// the config's `[qos] profile`, whose default `auto` prices memory volumes with the
    /// built-in `memory` profile and file or emulated ones with `reflex-a`.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,

    /// Send requests to storage in arrival order, without the token scheduler (baseline runs).
    #[arg(long)]
    no_scheduler: bool,

    /// TLS-PSK key file (`identity:hexkey` lines, as psktool, nbdkit and qemu-nbd use).
    #[arg(long, value_name = "FILE")]
    tls_psk: Option<PathBuf>,

    /// TLS certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_certificate: Option<PathBuf>,

    /// Private key (PEM) of --tls-certificate.
    #[arg(long, value_name = "FILE", requires = "tls_certificate")]
    tls_key: Option<PathBuf>,

    /// Join a fleet: announce this server (addresses, volumes, device profile) in the etcd
    /// registry at URL under a lease kept alive while it runs, so `ullstack place` can put
    /// tenants on it. Its config's LC tenants are its first reservations.
    #[arg(long, value_name = "URL")]
    registry: Option<String>,

    /// With --registry: this server's id in the fleet (default: the own-protocol address, else
    /// the NBD address).
    #[arg(long, value_name = "ID")]
    registry_id: Option<String>,

    /// With --registry: the lease TTL in seconds (default 10); a server killed without
    /// shutting down leaves the fleet this long after its last refresh.
    #[arg(long, value_name = "S")]
    registry_ttl: Option<i64>,

    /// Print the effective configuration (parsed and validated; TOML, secrets redacted) and
    /// exit.
    #[arg(long)]
    check: bool,

    /// Check config FILE and exit: `--config FILE --check` in one flag, as an operator runs it
    /// on an edited /etc/ullstack/server.toml before `systemctl restart ullstack`. Exit status
    /// 0 and the effective configuration if it is valid; 1 and the error otherwise.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["config", "memory"])]
    check_config: Option<PathBuf>,

    /// Log format on stderr: `text` (one human line per event) or `json` (one JSON object per
    /// line: ts, level, target, event, message and the event's fields; connection open and
    /// close, refusals, reloads and the stop are events).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = str::parse::<server::LogFormat>)]
    log_format: server::LogFormat,
}

/// The config the flags ask for: `server::config::overrides` reads or builds it and applies
/// them.
fn build_config(args: &ServeArgs) -> anyhow::Result<ServerConfig> {
    let overrides = Overrides {
        listen: args.listen,
        listen_native: args.listen_native,
        admin: args.admin,
        workers: args.workers,
        idle: args.idle,
        coalesce_ns: args.coalesce_ns,
        max_memory: args.max_memory.clone(),
        profile: args.profile.clone(),
        no_scheduler: args.no_scheduler,
        tls_psk: args.tls_psk.clone(),
        tls_certificate: args.tls_certificate.clone(),
        tls_key: args.tls_key.clone(),
        registry: args.registry.clone(),
        registry_id: args.registry_id.clone(),
        registry_ttl: args.registry_ttl,
    };
    Ok(overrides.build(args.config.as_deref(), args.memory.as_deref())?)
}

/// `[qos] probe = "on"` with no profile configured: fits a profile to a quick probe of the
/// first file volume's device (crate calibrate, module `probe`); `None` otherwise.
fn probe_file_volume(
    config: &server::config::ServerConfig,
    format: server::LogFormat,
) -> anyhow::Result<Option<qos::DeviceProfile>> {
    let Some((name, dir)) = config.probe_target()? else {
        return Ok(None);
    };
    let probe = calibrate::probe::probe_dir(&dir, &format!("probe-{name}"))
        .with_context(|| format!("probing volume {name}'s device in {}", dir.display()))?;
    say(format, &probe.summary_line(&name, &dir));
    Ok(Some(probe.fit.profile))
}

/// What `ullstack serve` tells its operator outside the events: a line on stderr in the text
/// format, an event `serve` in the JSON format (so stderr stays JSON lines).
fn say(format: server::LogFormat, line: &str) {
    match format {
        server::LogFormat::Text => eprintln!("ullstack serve: {line}"),
        server::LogFormat::Json => tracing::info!(event = "serve", "{line}"),
    }
}

/// Runs the server until SIGINT or SIGTERM; returns the exit status (0, or
/// [`server::server::EXIT_GRACE_EXPIRED`] when the shutdown grace cut connections).
pub fn run(mut args: ServeArgs) -> anyhow::Result<u8> {
    let format = args.log_format;
    server::init_logging(format);
    if let Some(path) = args.check_config.take() {
        args.config = Some(path);
        args.check = true;
    }
    let mut config = build_config(&args)?;
    for warning in config.startup_warnings() {
        match format {
            server::LogFormat::Text => eprintln!("ullstack serve: warning: {warning}"),
            server::LogFormat::Json => tracing::warn!(event = "serve", "{warning}"),
        }
    }
    config
        .volume_profile_lines()
        .context("choosing the QoS profile")?;
    if args.check {
        // Secrets redacted: the check's output ends up in shells, CI logs and tickets.
        print!("{}", config.summary_toml());
        return Ok(0);
    }
    config.qos.probed_profile = probe_file_volume(&config, format)?;
    let profile_lines = config
        .volume_profile_lines()
        .context("choosing the QoS profile")?;
    server::signals::block_signals().context("blocking SIGINT/SIGTERM/SIGHUP")?;
    let (registry, member) = (config.registry.clone(), config.fleet_member()?);
    if let Some(r) = &registry {
        // Reach the registry before binding and opening volumes: an unreachable one is a
        // one-line error now, not after the server started.
        fleet::Etcd::connect(&r.url)?.get(&fleet::server_key("-"))?;
    }
    let handle = server::start(config).context("starting the server")?;
    if args.config.is_some() {
        // A reload reads the file again with this command line's overrides, as at start.
        let again = args.clone();
        // The probe ran once: a reload keeps its profile (probing again would change it).
        let probed = handle.shared().config.qos.probed_profile.clone();
        handle.set_config_source(server::ConfigSource::new(move || {
            let mut c = build_config(&again).map_err(|e| format!("{e:#}"))?;
            c.qos.probed_profile = probed.clone();
            Ok(c)
        }));
    }
    let a = handle.addrs;
    let announcement = match registry {
        Some(r) => Some(join_fleet(&r, a, member)?),
        None => None,
    };
    if let Some(nbd) = a.nbd {
        let exports: Vec<String> = handle
            .shared()
            .exports
            .iter()
            .map(|e| e.name.clone())
            .collect();
        say(
            format,
            &format!("NBD on {nbd} (exports: {})", exports.join(", ")),
        );
    }
    if let Some(native) = a.native {
        say(format, &format!("own protocol on {native}"));
    }
    for line in &profile_lines {
        say(format, line);
    }
    if let Some(admin) = a.admin {
        say(format, &format!("metrics on http://{admin}/metrics"));
    }
    let signal = loop {
        let signal = server::signals::wait_signal().context("waiting for a signal")?;
        if signal != server::signals::Signal::Hangup {
            break signal;
        }
        // The reload logs its outcome (event `reload`); the text format also says it here.
        let outcome = handle.reload("sighup");
        if format == server::LogFormat::Text {
            match outcome {
                Ok(report) => eprintln!("ullstack serve: SIGHUP: config reloaded: {report}"),
                Err(e) => eprintln!("ullstack serve: SIGHUP: reload refused, nothing changed: {e}"),
            }
        }
    };
    say(
        format,
        &format!("{}: draining in-flight I/O and stopping", signal.name()),
    );
    if let Some(a) = announcement {
        // Leave the fleet first, so no new tenant is placed on a server that is stopping.
        a.stop();
    }
    let stopped = handle.shutdown();
    match stopped {
        server::Stopped::Drained => say(format, "stopped"),
        server::Stopped::GraceExpired { connections_cut } => say(
            format,
            &format!(
                "stopped: limits.shutdown_grace_ms passed with {connections_cut} connection(s) still owed replies; they were closed (exit status {})",
                stopped.exit_code()
            ),
        ),
    }
    Ok(stopped.exit_code())
}

/// Announces the started server in the registry and seeds its reservations.
fn join_fleet(
    registry: &server::config::RegistryConfig,
    addrs: server::BoundAddrs,
    member: fleet::Member,
) -> anyhow::Result<fleet::Announcement> {
    let url = registry.url.as_str();
    let id = fleet::member_id(registry.id.as_deref(), addrs.native, addrs.nbd)?;
    let a = member.join(url, &id, addrs.native, addrs.nbd, registry.ttl_s)?;
    eprintln!(
        "ullstack serve: in the fleet registry {url} as `{id}` (lease {}, TTL {} s)",
        a.lease, registry.ttl_s
    );
    Ok(a)
}
