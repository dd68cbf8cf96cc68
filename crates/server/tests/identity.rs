//! Who a client is (issue 29, "Identity"): a TLS-PSK identity is the tenant on the own protocol
//! as on NBD; certificate TLS, which names no client, is not offered next to PSK where it would
//! open PSK tenants' NBD exports to clients without a key; NBD beyond loopback without TLS is
//! warned about at start.

mod common;

use common::*;
use proto::wire::Status;
use server::config::ServerConfig;

const ALICE_KEY: &str = "6b9b0c9a1e3f5d7c2a4e6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4";
const READER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn key_file() -> TempFile {
    let file = TempFile::new("identity-psk");
    std::fs::write(&file.0, format!("alice:{ALICE_KEY}\nreader:{READER_KEY}\n"))
        .expect("write key file");
    file
}

/// A connection authenticated as PSK identity `alice` cannot HELLO as tenant `reader`, even
/// with reader's right secret; as `alice` it can.
#[test]
fn a_psk_identity_may_hello_only_as_its_own_tenant() {
    let keys = key_file();
    let mut toml = standard_config(&memory_backend("8MiB"), "on");
    toml.push_str(&format!("\n[tls]\npsk_file = \"{}\"\n", keys.0.display()));
    let server = start(&toml);
    let addr = server.addrs.native.expect("native");

    let mut as_alice = psk_session(addr, "alice", ALICE_KEY);
    assert_eq!(
        psk_hello(&mut as_alice, "reader", "reader-secret", "vol"),
        Status::AuthFailed,
        "PSK identity alice completed HELLO as reader"
    );
    assert_eq!(
        psk_hello(&mut as_alice, "alice", "alice-secret", "vol"),
        Status::Ok
    );

    let mut as_reader = psk_session(addr, "reader", READER_KEY);
    assert_eq!(
        psk_hello(&mut as_reader, "reader", "reader-secret", "vol"),
        Status::Ok
    );
}

fn tls_config(psk: bool, certificate: bool, nbd: bool) -> String {
    let mut toml = standard_config(&memory_backend("8MiB"), "on");
    if !nbd {
        toml = toml.replace("nbd = \"127.0.0.1:0\"\n", "");
    }
    toml.push_str("\n[tls]\n");
    if psk {
        toml.push_str("psk_file = \"/etc/ullstack/keys.psk\"\n");
    }
    if certificate {
        toml.push_str(
            "certificate = \"/etc/ullstack/cert.pem\"\nkey = \"/etc/ullstack/key.pem\"\n",
        );
    }
    toml
}

/// PSK and a certificate together, with NBD exports of tenants that have secrets: a client
/// with no key would reach them over certificate TLS, so the config is refused with an error
/// naming both keys and the export. Either alone, or both without NBD, is accepted.
#[test]
fn psk_next_to_certificate_tls_is_refused_where_it_would_open_nbd_exports() {
    let err = ServerConfig::from_toml_str(&tls_config(true, true, true))
        .expect_err("PSK + certificate with tenants' NBD exports was accepted")
        .to_string();
    assert!(
        err.contains("tls.psk_file + tls.certificate")
            && err.contains("keys.psk")
            && err.contains("cert.pem")
            && err.contains("\"default\""),
        "{err}"
    );
    for (psk, cert, nbd) in [
        (true, false, true),
        (false, true, true),
        (true, true, false),
    ] {
        let toml = tls_config(psk, cert, nbd);
        if let Err(e) = ServerConfig::from_toml_str(&toml) {
            panic!("psk {psk} certificate {cert} nbd {nbd} refused: {e}");
        }
    }
}

/// NBD on a non-loopback address without TLS is warned about (it has no authentication);
/// on loopback, or with TLS, it is not.
#[test]
fn nbd_beyond_loopback_without_tls_is_warned_about() {
    let open = standard_config(&memory_backend("8MiB"), "on")
        .replace("nbd = \"127.0.0.1:0\"", "nbd = \"0.0.0.0:0\"");
    let warnings = ServerConfig::from_toml_str(&open)
        .expect("valid")
        .startup_warnings();
    assert!(
        warnings.iter().any(|w| w.contains("0.0.0.0:0")
            && w.contains("without TLS")
            && w.contains("psk_file")),
        "{warnings:?}"
    );
    let loopback = ServerConfig::from_toml_str(&standard_config(&memory_backend("8MiB"), "on"))
        .expect("valid");
    assert!(loopback.startup_warnings().is_empty());
    let with_tls = format!("{open}\n[tls]\npsk_file = \"/etc/ullstack/keys.psk\"\n");
    let with_tls = ServerConfig::from_toml_str(&with_tls).expect("valid");
    assert!(with_tls.startup_warnings().is_empty());
}
