//! The config's tests: parsing, defaults, validation errors naming the bad key and value.

use super::*;

const FULL: &str = r#"
[listen]
native = "127.0.0.1:0"
nbd = "127.0.0.1:0"
admin = "127.0.0.1:0"

[dataplane]
workers = 1
batch_limit = 32
idle = "spin"

[limits]
max_request_bytes = "1MiB"

[[volume]]
name = "fast"
backend = { kind = "memory", size = "1GiB" }

[[volume]]
name = "disk"
block_bytes = 4096
backend = { kind = "file", path = "/tmp/x.img", size = "64MiB", direct = "off" }

[[tenant]]
name = "alice"
secret = "correct horse battery"
class = "lc"
slo = { p95_read_latency_us = 500, iops = 10000, read_ratio_pct = 90 }
acl = [{ volume = "fast", access = "read-write", lba_ranges = [[0, 2048]] },
   { volume = "disk", access = "read" }]

[[tenant]]
name = "bob"
secret = "hunter2hunter2"
class = "be"
acl = [{ volume = "fast", access = "read" }]

[[export]]
name = "default"
volume = "fast"
tenant = "alice"
"#;

#[test]
fn full_config_parses_with_values() {
    let c = from_toml_str(FULL).expect("valid config");
    assert_eq!(c.dataplane.workers, 1);
    assert_eq!(c.dataplane.idle, IdlePolicy::Spin);
    assert_eq!(c.limits.max_request_bytes, ByteSize(1 << 20));
    assert_eq!(c.volumes.len(), 2);
    assert_eq!(
        c.volumes[0].backend,
        BackendConfig::Memory {
            size: ByteSize(1 << 30)
        }
    );
    assert_eq!(c.tenants[0].acl[0].lba_ranges, Some(vec![[0, 2048]]));
    assert_eq!(c.tenants[1].class, TenantClass::BestEffort);
    assert_eq!(c.exports[0].tenant, "alice");
    assert_eq!(
        c.qos.profile,
        ProfileConfig::Named(DEFAULT_PROFILE_NAME.into())
    );
}

#[test]
fn tls_section_needs_keys_and_certificate_with_key() {
    let c = from_toml_str("[tls]\npsk_file = \"/k.psk\"\n").expect("PSK only");
    assert_eq!(
        c.tls.and_then(|t| t.psk_file),
        Some(PathBuf::from("/k.psk"))
    );
    let both = "[tls]\ncertificate = \"/c.pem\"\nkey = \"/k.pem\"\n";
    assert!(from_toml_str(both).is_ok());
    let err = from_toml_str("[tls]\ncertificate = \"/c.pem\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tls.certificate / tls.key") && err.contains("/c.pem"),
        "{err}"
    );
    let err = from_toml_str("[tls]\n").unwrap_err().to_string();
    assert!(err.contains("psk_file"), "{err}");
    let err = from_toml_str("[tls]\npsk = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("psk"), "misspelt key is named: {err}");
    assert!(from_toml_str("").expect("no tls").tls.is_none());
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = from_toml_str("").expect("empty config is valid");
    assert_eq!(c.dataplane.workers, 2);
    assert_eq!(c.dataplane.batch_limit, 64);
    assert_eq!(c.dataplane.idle, IdlePolicy::BlockAfterSpin);
    assert_eq!(c.limits.max_request_bytes.0, 32 << 20);
    assert_eq!(c.qos.scheduler, SchedulerMode::On);
}

#[test]
fn unknown_key_is_named() {
    let err = from_toml_str("[dataplane]\nwokers = 3\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("wokers"), "{err}");
    assert!(err.contains("workers"), "should list accepted keys: {err}");
}

#[test]
fn batch_limit_above_64_is_rejected_with_value() {
    let err = from_toml_str("[dataplane]\nbatch_limit = 65\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dataplane.batch_limit") && err.contains("65"),
        "{err}"
    );
}

#[test]
fn export_with_unknown_volume_names_it() {
    let text = FULL.replace(
        "volume = \"fast\"\ntenant = \"alice\"",
        "volume = \"nope\"\ntenant = \"alice\"",
    );
    let err = from_toml_str(&text).unwrap_err();
    match &err {
        ConfigError::UnknownReference {
            key, name, kind, ..
        } => {
            assert_eq!(key, "export[0].volume");
            assert_eq!(name, "nope");
            assert_eq!(*kind, "volume");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("fast, disk") || err.to_string().contains("disk, fast"));
}

#[test]
fn acl_range_beyond_volume_is_rejected() {
    let text = FULL.replace("[[0, 2048]]", "[[0, 99999999999]]");
    let err = from_toml_str(&text).unwrap_err().to_string();
    assert!(
        err.contains("lba_ranges[0]") && err.contains("99999999999"),
        "{err}"
    );
}

#[test]
fn sizes_parse_with_units() {
    assert_eq!(ByteSize::parse("4k"), Ok(ByteSize(4096)));
    assert_eq!(ByteSize::parse("1GiB"), Ok(ByteSize(1 << 30)));
    assert_eq!(ByteSize::parse("1GB"), Ok(ByteSize(1_000_000_000)));
    assert_eq!(ByteSize::parse("123"), Ok(ByteSize(123)));
    assert!(ByteSize::parse("1.5G").is_err());
    assert!(ByteSize::parse("GiB").is_err());
    assert!(ByteSize::parse("99999999999999999999").is_err());
    assert!(ByteSize::parse("20000000T").is_err());
}

#[test]
fn tenant_without_secret_or_open_is_rejected() {
    let text = "[[tenant]]\nname = \"x\"\nclass = \"be\"\n";
    let err = from_toml_str(text).unwrap_err().to_string();
    assert!(err.contains("tenant[0].secret"), "{err}");
}

#[test]
fn secret_length_errors_count_bytes() {
    let with = |secret: &str| {
        let text = format!("[[tenant]]\nname = \"x\"\nclass = \"be\"\nsecret = \"{secret}\"\n");
        from_toml_str(&text).unwrap_err().to_string()
    };
    let err = with("short");
    assert!(
        err.contains("tenant[0].secret") && err.contains("(5 bytes)"),
        "{err}"
    );
    // 130 two-byte characters: 260 bytes, over the 255-byte wire limit.
    let err = with(&"é".repeat(130));
    assert!(
        err.contains("(260 bytes)") && err.contains("at most 255 bytes"),
        "{err}"
    );
}

#[test]
fn lc_export_tenant_needs_fixed_slo() {
    let text = FULL.replace(
        "slo = { p95_read_latency_us = 500, iops = 10000, read_ratio_pct = 90 }\n",
        "",
    );
    let err = from_toml_str(&text).unwrap_err().to_string();
    assert!(
        err.contains("export[0].tenant") && err.contains("slo"),
        "{err}"
    );
}

#[test]
fn quick_start_is_valid() {
    let c = ServerConfig::quick_start(ByteSize(1 << 30), "127.0.0.1:0".parse().ok(), None);
    c.validate().expect("quick start validates");
}

/// Forgotten connections are closed by default, and the memory limit follows the machine.
#[test]
fn defaults_bound_idle_connections_and_memory() {
    let l = LimitsConfig::default();
    assert_eq!(l.idle_timeout_ms, DEFAULT_IDLE_TIMEOUT_MS);
    assert!(l.idle_timeout_ms > 0);
    assert!(l.max_memory_bytes.0 >= MIN_MEMORY_LIMIT_BYTES);
    assert!(l.max_memory_bytes.0 >= l.max_inflight_bytes.0);
    assert!(l.max_connections_per_tenant < l.max_connections);
    let err = from_toml_str("[limits]\nmax_memory_bytes = \"1MiB\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("limits.max_memory_bytes"), "{err}");
}

#[test]
fn qos_profile_named_inline_and_bad() {
    let c = from_toml_str("[qos]\nprofile = \"reflex-a\"\n").unwrap();
    assert_eq!(c.device_profile().unwrap().name, "reflex-a");
    let c =
        from_toml_str("[qos.profile]\npreset = \"reflex-a\"\nwrite_cost_mtok = 16000\n").unwrap();
    assert_eq!(c.device_profile().unwrap().write_cost_mtok, 16000);
    let err = from_toml_str("[qos]\nprofile = \"nope\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("qos.profile") && err.contains("nope"), "{err}");
    let err = from_toml_str("[qos.tuning]\ndonate_pct = 120\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("donate_pct") && err.contains("120"), "{err}");
    assert_eq!(
        from_toml_str("").unwrap().qos.lc_surge_pct,
        qos::DEFAULT_LC_SURGE_PCT
    );
    assert_eq!(
        from_toml_str("[qos]\nlc_surge_pct = 0\n")
            .unwrap()
            .qos
            .lc_surge_pct,
        0
    );
    let err = from_toml_str("[qos]\nlc_surge_pct = 5000\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("qos.lc_surge_pct") && err.contains("5000"),
        "{err}"
    );
}

proptest::proptest! {
    /// Any text, and any mutation of a valid config, parses or fails with an error.
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
        let _ = from_toml_str(&text);
    }

    #[test]
    fn mutated_config_never_panics(cut in 0usize..2000, insert in "[\\[\\]=\"a-z0-9 .\n{},-]{0,12}") {
        let mut text = FULL.to_string();
        let at = cut.min(text.len());
        let at = (0..=at).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.insert_str(at, &insert);
        let _ = from_toml_str(&text);
    }
}

#[test]
fn never_panics_on_junk() {
    for text in [
        "[[volume]]\nname=1",
        "x",
        "[limits]\nmax_inflight_bytes = -5",
        "[[export]]\n",
        "\u{0}",
    ] {
        assert!(from_toml_str(text).is_err(), "{text:?} should fail");
    }
}

#[test]
fn the_fleet_member_reserves_the_lc_tenants_on_the_first_volume() {
    let mut c = from_toml_str(FULL).expect("valid config");
    let m = c.fleet_member().unwrap();
    assert_eq!(m.volumes, ["fast", "disk"]);
    let placed: Vec<_> = m
        .lc_tenants
        .iter()
        .map(|t| (t.name.as_str(), t.volume.as_str()))
        .collect();
    assert_eq!(placed, [("alice", "fast")], "bob is best-effort");
    assert_eq!(
        m.lc_tenants[0].spec,
        qos::TenantSpec::LatencyCritical(c.tenants[0].slo.unwrap().to_qos())
    );
    let exports: Vec<_> = m
        .exports
        .iter()
        .map(|e| (e.name.as_str(), e.volume.as_str()))
        .collect();
    assert_eq!(exports, [("default", "fast")]);
    assert_eq!(m.profile, c.device_profile().unwrap());
    assert!(!m.tls);
    // The first volume, whichever the tenant's ACL names first.
    c.volumes.swap(0, 1);
    assert_eq!(c.fleet_member().unwrap().lc_tenants[0].volume, "disk");
}

#[test]
fn the_idle_flag_takes_the_config_names_and_block() {
    assert_eq!("spin".parse::<IdlePolicy>(), Ok(IdlePolicy::Spin));
    for s in ["block-after-spin", "block"] {
        assert_eq!(s.parse::<IdlePolicy>(), Ok(IdlePolicy::BlockAfterSpin));
    }
    let e = "nap".parse::<IdlePolicy>().unwrap_err();
    assert!(
        e.contains("\"nap\"") && e.contains("block-after-spin"),
        "{e}"
    );
}

/// A polled submission queue is an io_uring path with a bounded idle: on epoll, or idle past
/// a second, it is refused naming the key; with `socket_io = "uring"` it parses, and so does
/// the kernel's minimum wait.
#[test]
fn a_polled_submission_queue_needs_the_uring_socket_path() {
    let text = FULL.replace(
        "idle = \"spin\"",
        "idle = \"spin\"\nring_sqpoll_idle_ms = 2",
    );
    let err = from_toml_str(&text).unwrap_err().to_string();
    assert!(
        err.contains("dataplane.ring_sqpoll_idle_ms") && err.contains("uring"),
        "{err}"
    );
    let text = text.replace(
        "ring_sqpoll_idle_ms",
        "socket_io = \"uring\"\nring_wait = \"min-wait\"\nring_sqpoll_idle_ms",
    );
    let c = from_toml_str(&text).expect("a polled queue with uring is valid");
    assert_eq!(c.dataplane.ring_sqpoll_idle_ms, 2);
    assert_eq!(c.dataplane.ring_wait, RingWait::MinWait);
    let too_long = text.replace("ring_sqpoll_idle_ms = 2", "ring_sqpoll_idle_ms = 1001");
    let err = from_toml_str(&too_long).unwrap_err().to_string();
    assert!(
        err.contains("dataplane.ring_sqpoll_idle_ms") && err.contains("1000"),
        "{err}"
    );
    assert_eq!(DataplaneConfig::default().ring_sqpoll_idle_ms, 0);
}

/// Multishot receives are an io_uring path: asking for them on epoll is refused, naming the
/// key, its value and what it needs; with `socket_io = "uring"` they parse.
#[test]
fn multishot_receive_needs_the_uring_socket_path() {
    let text = FULL.replace(
        "idle = \"spin\"",
        "idle = \"spin\"\nsocket_recv = \"multishot\"",
    );
    let err = from_toml_str(&text).unwrap_err().to_string();
    assert!(
        err.contains("dataplane.socket_recv") && err.contains("multishot") && err.contains("uring"),
        "{err}"
    );
    let text = text.replace("socket_recv", "socket_io = \"uring\"\nsocket_recv");
    let c = from_toml_str(&text).expect("multishot with uring is valid");
    assert_eq!(c.dataplane.socket_recv, SocketRecv::Multishot);
}
