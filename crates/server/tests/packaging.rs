//! What the Debian package ships (`packaging/`, docs/packaging.md): the default config parses
//! and validates as `ullstack serve` would read it, and the systemd unit agrees with it (the
//! unit runs the config the package installs, every file volume lies where the hardened unit
//! may write, and `systemctl stop` waits out the config's shutdown grace).

use server::config::{BackendConfig, ServerConfig};

const PACKAGING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../packaging");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{PACKAGING}/{name}"))
        .unwrap_or_else(|e| panic!("packaging/{name}: {e}"))
}

/// The values of `key=` lines of the unit, in order.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_string())
        .collect()
}

#[test]
fn the_shipped_default_config_parses_and_validates() {
    let config = ServerConfig::from_toml_str(&read("server.toml"))
        .unwrap_or_else(|e| panic!("packaging/server.toml: {e}"));
    assert!(!config.volumes.is_empty() && !config.exports.is_empty());
    // Loopback only: the default tenant is open.
    for addr in [config.listen.nbd, config.listen.native, config.listen.admin]
        .into_iter()
        .flatten()
    {
        assert!(
            addr.ip().is_loopback(),
            "default listener {addr} beyond loopback"
        );
    }
}

#[test]
fn the_unit_runs_the_installed_config_and_may_write_its_volumes() {
    let unit = read("ullstack.service");
    let config = ServerConfig::from_toml_str(&read("server.toml")).expect("valid");
    assert_eq!(
        unit_values(&unit, "ExecStart"),
        ["/usr/bin/ullstack serve --config /etc/ullstack/server.toml"]
    );
    assert_eq!(unit_values(&unit, "User"), ["ullstack"]);
    assert_eq!(unit_values(&unit, "CapabilityBoundingSet"), [""]);
    assert_eq!(
        unit_values(&unit, "ExecReload"),
        ["/bin/kill -HUP $MAINPID"]
    );
    for key in ["NoNewPrivileges", "PrivateTmp"] {
        assert_eq!(unit_values(&unit, key), ["yes"], "{key}");
    }
    assert_eq!(unit_values(&unit, "ProtectSystem"), ["strict"]);
    let writable = unit_values(&unit, "ReadWritePaths");
    for volume in &config.volumes {
        if let BackendConfig::File { path, .. } = &volume.backend {
            assert!(
                writable.iter().any(|w| path.starts_with(w)),
                "volume {:?} at {} is outside the unit's ReadWritePaths {writable:?}",
                volume.name,
                path.display()
            );
        }
    }
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../cli/Cargo.toml"))
            .expect("crates/cli/Cargo.toml");
    assert!(
        manifest.contains("\"etc/ullstack/server.toml\"")
            && manifest.contains("conf-files = [\"/etc/ullstack/server.toml\"]"),
        "the package installs the config the unit runs, as a conffile"
    );
}

/// `systemctl stop` lets the drain run out its grace: the unit's `TimeoutStopSec` (before
/// SIGKILL) is above the shipped config's `limits.shutdown_grace_ms`, with room to close and
/// exit; a stop the grace cut (exit status 3) is a success for systemd; `systemctl reload`
/// sends SIGHUP, which the server handles.
#[test]
fn the_unit_waits_out_the_grace_and_reload_sends_sighup() {
    let unit = read("ullstack.service");
    let config = ServerConfig::from_toml_str(&read("server.toml")).expect("valid");
    let stop_s: u64 = unit_values(&unit, "TimeoutStopSec")
        .first()
        .and_then(|v| v.parse().ok())
        .expect("TimeoutStopSec in seconds");
    let grace_ms = config.limits.shutdown_grace_ms;
    assert!(
        stop_s * 1000 >= grace_ms + 5_000,
        "TimeoutStopSec={stop_s} leaves less than 5 s above the {grace_ms} ms grace"
    );
    let success = unit_values(&unit, "SuccessExitStatus");
    assert!(
        success.iter().any(|v| v
            .split_whitespace()
            .any(|c| c == server::server::EXIT_GRACE_EXPIRED.to_string())),
        "SuccessExitStatus {success:?} lacks the grace's exit status"
    );
    assert_eq!(unit_values(&unit, "KillSignal"), ["SIGTERM"]);
    assert_eq!(
        unit_values(&unit, "ExecReload"),
        ["/bin/kill -HUP $MAINPID"]
    );
}
