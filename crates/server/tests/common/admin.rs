//! The admin endpoint's write side and a config file a test rewrites: what the reload tests
//! share.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;

use super::{with_socket_env, IO_TIMEOUT};

/// An HTTP request to the admin endpoint: (status code, body).
pub fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("admin connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(format!("{method} {path} HTTP/1.0\r\n{auth}\r\n").as_bytes())
        .expect("admin request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("admin response");
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (code, body)
}

/// `POST /reload` with `token`.
pub fn post_reload(addr: SocketAddr, token: Option<&str>) -> (u16, String) {
    request(addr, "POST", "/reload", token)
}

/// A config file in a directory of its own, removed on drop.
pub struct ConfigFile {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ConfigFile {
    pub fn new(text: &str) -> ConfigFile {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("server.toml");
        std::fs::write(&path, with_socket_env(text)).expect("write config");
        ConfigFile { path, _dir: dir }
    }

    /// Replaces the file's text (what an operator's editor does before SIGHUP).
    pub fn rewrite(&self, text: &str) {
        std::fs::write(&self.path, with_socket_env(text)).expect("rewrite config");
    }
}
