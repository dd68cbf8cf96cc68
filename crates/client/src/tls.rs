//! TLS for the client library: the own protocol's implicit TLS, as `ullstack serve` speaks it.
//!
//! # What it implements
//! With `[tls]` configured, the server's own-protocol listener speaks TLS from its first byte
//! (docs/protocol.md §1.1). A [`ClientTls`] says how this client authenticates that session:
//!
//! * **PSK** ([`ClientTls::psk`], [`ClientTls::psk_file`]): an identity and its key, the same
//!   `identity:hexkey` lines (psktool's format) the server's `tls.psk_file` holds. TLS 1.3 with
//!   the SHA-256 suites and TLS 1.2's `ECDHE-PSK` / `PSK` suites are offered, which is what the
//!   server's OpenSSL callback serves. The identity names a tenant on the server's NBD face; on
//!   the own protocol HELLO still authenticates the tenant inside the session.
//! * **Certificate** ([`ClientTls::certificate`]): the server's certificate is verified against
//!   a CA file (PEM) and the name the client connects to, as any TLS client does; or, with
//!   [`ServerCheck::Insecure`], not verified at all (a self-signed test server: the session is
//!   encrypted but the server unauthenticated, as `nbdinfo ?tls-verify-peer=false`).
//!
//! # Design
//! OpenSSL (the `openssl` crate over the system library, as the server): rustls has no external
//! PSK. [`tokio_openssl::SslStream`] drives it over the tokio `TcpStream`; the connection's
//! reader and writer tasks get the two halves of `tokio::io::split`, so the pipelining design
//! of [`crate::connection`] is unchanged.
//!
//! Worked example: `ClientTls::psk_file("keys.psk", Some("alice"))` reads alice's 32-byte key;
//! `Client::connect_tls(addr, &creds, &tls)` connects, runs the handshake (TLS 1.3,
//! `TLS_AES_128_GCM_SHA256`, identity "alice"), then sends HELLO inside the session. A wrong
//! key fails the handshake: [`ClientError::Tls`] with OpenSSL's reason, and the server counts a
//! failed authentication against this address.
//!
//! # What it leaves out
//! Client certificates (the server does not check them) and session resumption.

use std::path::{Path, PathBuf};
use std::pin::Pin;

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode, SslVersion};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use crate::error::ClientError;

/// Longest PSK OpenSSL takes.
pub use proto::psk::MAX_PSK_BYTES;

/// How a TLS client checks the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerCheck {
    /// Against the CA certificates in this PEM file, and the server's name.
    CaFile(PathBuf),
    /// Against the system's CA certificates, and the server's name.
    System,
    /// Not at all (encryption without server authentication; test servers).
    Insecure,
}

/// How the client authenticates its TLS session.
#[derive(Clone, PartialEq, Eq)]
pub enum ClientTls {
    /// A pre-shared key for `identity`.
    Psk { identity: String, key: Vec<u8> },
    /// The server's certificate, checked as `check` says; `server_name` is the name sent
    /// (SNI) and verified (default: the host part of the address).
    Certificate {
        check: ServerCheck,
        server_name: Option<String>,
    },
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Never print a key.
            ClientTls::Psk { identity, key } => f
                .debug_struct("Psk")
                .field("identity", identity)
                .field("key_bytes", &key.len())
                .finish(),
            ClientTls::Certificate { check, server_name } => f
                .debug_struct("Certificate")
                .field("check", check)
                .field("server_name", server_name)
                .finish(),
        }
    }
}

impl ClientTls {
    /// PSK with this identity and key; the key must be 1..=[`MAX_PSK_BYTES`] bytes.
    pub fn psk(identity: &str, key: Vec<u8>) -> Result<ClientTls, ClientError> {
        if identity.is_empty() || identity.len() > 255 {
            return Err(ClientError::InvalidArgument(format!(
                "PSK identity {identity:?}: expected 1..=255 bytes"
            )));
        }
        if key.is_empty() || key.len() > MAX_PSK_BYTES {
            return Err(ClientError::InvalidArgument(format!(
                "PSK of {} bytes: expected 1..={MAX_PSK_BYTES}",
                key.len()
            )));
        }
        Ok(ClientTls::Psk {
            identity: identity.to_owned(),
            key,
        })
    }

    /// PSK from a psktool file (`identity:hexkey` lines, `#` comments): the line of
    /// `identity`, or the first line when `identity` is None.
    pub fn psk_file(path: &Path, identity: Option<&str>) -> Result<ClientTls, ClientError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ClientError::InvalidArgument(format!("PSK file {}: {e}", path.display()))
        })?;
        let lines = proto::psk::parse(&text).map_err(|e| {
            ClientError::InvalidArgument(format!(
                "PSK file {} line {}: {}; expected `identity:hexkey`",
                path.display(),
                e.line,
                e.problem
            ))
        })?;
        if let Some(l) = lines
            .into_iter()
            .find(|l| identity.is_none_or(|want| want == l.identity))
        {
            return ClientTls::psk(&l.identity, l.key);
        }
        Err(ClientError::InvalidArgument(format!(
            "PSK file {}: no line for identity {}",
            path.display(),
            identity.map_or("(any)".to_owned(), |i| format!("{i:?}"))
        )))
    }

    /// Certificate mode, checked as `check` says.
    pub fn certificate(check: ServerCheck) -> ClientTls {
        ClientTls::Certificate {
            check,
            server_name: None,
        }
    }

    /// Connects TLS over `tcp` to `host` (the name used for SNI and verification when no
    /// explicit server name is set).
    pub(crate) async fn connect(
        &self,
        tcp: TcpStream,
        host: &str,
    ) -> Result<SslStream<TcpStream>, ClientError> {
        let tls_err = |what: &str, e: &dyn std::fmt::Display| ClientError::Tls {
            detail: format!("{what}: {e}"),
        };
        let mut builder =
            SslConnector::builder(SslMethod::tls_client()).map_err(|e| tls_err("context", &e))?;
        builder
            .set_min_proto_version(Some(SslVersion::TLS1_2))
            .map_err(|e| tls_err("minimum version", &e))?;
        let mut verify_name = true;
        let name = match self {
            ClientTls::Psk { identity, key } => {
                // No certificate in PSK mode: the key authenticates both sides.
                builder.set_verify(SslVerifyMode::NONE);
                verify_name = false;
                builder
                    .set_ciphersuites("TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256")
                    .map_err(|e| tls_err("TLS 1.3 suites", &e))?;
                builder
                    .set_cipher_list("ECDHEPSK:PSK")
                    .map_err(|e| tls_err("TLS 1.2 PSK suites", &e))?;
                let (identity, key) = (identity.clone(), key.clone());
                builder.set_psk_client_callback(move |_, _hint, id_out, psk_out| {
                    // The identity is a C string: it and its NUL must fit.
                    if identity.len() >= id_out.len() || key.len() > psk_out.len() {
                        return Ok(0);
                    }
                    id_out[..identity.len()].copy_from_slice(identity.as_bytes());
                    id_out[identity.len()] = 0;
                    psk_out[..key.len()].copy_from_slice(&key);
                    Ok(key.len())
                });
                host.to_owned()
            }
            ClientTls::Certificate { check, server_name } => {
                match check {
                    ServerCheck::CaFile(path) => builder
                        .set_ca_file(path)
                        .map_err(|e| tls_err(&format!("CA file {}", path.display()), &e))?,
                    ServerCheck::System => {}
                    ServerCheck::Insecure => {
                        builder.set_verify(SslVerifyMode::NONE);
                        verify_name = false;
                    }
                }
                server_name.clone().unwrap_or_else(|| host.to_owned())
            }
        };
        let mut config = builder
            .build()
            .configure()
            .map_err(|e| tls_err("session", &e))?;
        config.set_verify_hostname(verify_name);
        // An IP address is verified as one, not as a DNS name.
        if verify_name {
            if let Ok(ip) = name.parse::<std::net::IpAddr>() {
                config.set_verify_hostname(false);
                config
                    .param_mut()
                    .set_ip(ip)
                    .map_err(|e| tls_err("server address check", &e))?;
            }
        }
        let ssl = config.into_ssl(&name).map_err(|e| tls_err("session", &e))?;
        let mut stream = SslStream::new(ssl, tcp).map_err(|e| tls_err("stream", &e))?;
        Pin::new(&mut stream)
            .connect()
            .await
            .map_err(|e| tls_err("handshake", &e))?;
        Ok(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(tag: &str, text: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("ullstack-client-{tag}-{}", std::process::id()));
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn psk_files_are_read_by_identity_and_errors_name_the_line() {
        let path = write("psk", "# keys\nbob:0102\nalice:a0b1c2\n");
        match ClientTls::psk_file(&path, Some("alice")).expect("alice") {
            ClientTls::Psk { identity, key } => {
                assert_eq!((identity.as_str(), key), ("alice", vec![0xa0, 0xb1, 0xc2]))
            }
            other => panic!("{other:?}"),
        }
        match ClientTls::psk_file(&path, None).expect("first") {
            ClientTls::Psk { identity, .. } => assert_eq!(identity, "bob"),
            other => panic!("{other:?}"),
        }
        let missing = ClientTls::psk_file(&path, Some("carol"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("carol"), "{missing}");
        let bad = write("psk-bad", "alice:xyz1\n");
        let e = ClientTls::psk_file(&bad, None).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("\"xy\""), "{e}");
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(bad);
    }

    #[test]
    fn keys_are_bounded_and_never_printed() {
        assert!(ClientTls::psk("alice", vec![]).is_err());
        assert!(ClientTls::psk("alice", vec![1; MAX_PSK_BYTES + 1]).is_err());
        assert!(ClientTls::psk("", vec![1]).is_err());
        let t = ClientTls::psk("alice", vec![0xab; 32]).expect("ok");
        let shown = format!("{t:?}");
        assert!(!shown.contains("171") && !shown.contains("ab"), "{shown}");
    }
}
