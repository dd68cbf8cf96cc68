//! Test support shared by every crate's integration tests (a dev-dependency only).
//!
//! # Tools and capabilities: skip with a reason, or fail in CI
//! Tests that drive real clients (fio, nbdinfo, qemu-io, …) or need a capability of the machine
//! (`O_DIRECT` on some filesystem, a high descriptor limit) skip with a printed `SKIP` line when
//! they are missing, so a developer's machine without them still runs the rest. In CI a skip would
//! hide missing coverage: `.ci/run` sets [`REQUIRE_TOOLS_ENV`]` = 1`, under which a missing tool or
//! capability fails the test instead, naming what is missing and how to install it.
//!
//! # Heap meter
//! [`heap`]: a per-thread counting allocator for tests that claim constant memory. Its
//! `GlobalAlloc` impl is in `sys.rs`, the crate's only `unsafe` (with [`interrupt`], Ctrl-C
//! for a child process, and [`peak_rss_kib`] for benches).
//!
//! # Waiting, not sleeping
//! [`wait_until`] polls a condition with a short back-off until it holds or a deadline passes, and
//! returns how long it took, so tests synchronize on the state they need rather than on a sleep
//! that is either too long (slow suite) or too short on a loaded machine (flaky suite).

#![deny(unsafe_code)]

pub mod heap;
// The allocators' `unsafe impl GlobalAlloc`, `kill(2)` and `getrusage(2)`: the crate's one
// exception to the lint above.
#[allow(unsafe_code)]
mod sys;

pub use sys::{interrupt, peak_rss_kib};

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The environment variable that turns skips into failures (`1`, `true` or `yes`).
pub const REQUIRE_TOOLS_ENV: &str = "ULLSTACK_REQUIRE_TOOLS";

/// Whether this run must have every tool and capability (CI).
pub fn tools_required() -> bool {
    std::env::var(REQUIRE_TOOLS_ENV)
        .map(|v| matches!(v.trim(), "1" | "true" | "yes"))
        .unwrap_or(false)
}

/// Skips `test` for `reason` (prints a `SKIP` line), or panics when [`tools_required`].
/// Call it and `return` from the test when it returns.
pub fn skip(test: &str, reason: &str) {
    if tools_required() {
        panic!("{test}: {reason}, and {REQUIRE_TOOLS_ENV}=1 says it must be there");
    }
    println!("SKIP {test}: {reason}");
}

/// The path of `name` if it is on `PATH`. Otherwise [`skip`]s `test` (naming `install`, how to
/// get it) and returns `None`; under [`REQUIRE_TOOLS_ENV`] it fails instead.
pub fn tool(name: &str, test: &str, install: &str) -> Option<PathBuf> {
    match which(name) {
        Some(path) => Some(path),
        None => {
            skip(test, &format!("`{name}` is not installed ({install})"));
            None
        }
    }
}

/// The first executable called `name` on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Polls `cond` every few milliseconds (1 ms, doubling to 50 ms) until it returns true or
/// `timeout` passes. `Ok(elapsed)` when it held, `Err(timeout)` when it never did.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> Result<Duration, Duration> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        if cond() {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return Err(timeout);
        }
        std::thread::sleep(pause.min(timeout.saturating_sub(start.elapsed())));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Whether process `pid` itself holds a TCP socket listening on `port` (IPv4 or IPv6, any
/// address), read from `/proc/net/tcp{,6}` (the LISTEN rows of the port and their socket
/// inodes) and `/proc/PID/fd` (the process's sockets). A test that starts a server on a port it
/// picked waits for this rather than for a connect to succeed: between picking the port and
/// the server's bind another process may take it, and a connect would then reach that one.
pub fn listens_on(pid: u32, port: u16) -> bool {
    /// `st` of a listening socket in `/proc/net/tcp`.
    const TCP_LISTEN: &str = "0A";
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for row in text.lines().skip(1) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            let (Some(local), Some(st), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9))
            else {
                continue;
            };
            let row_port = local
                .rsplit(':')
                .next()
                .and_then(|hex| u16::from_str_radix(hex, 16).ok());
            if *st == TCP_LISTEN && row_port == Some(port) {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

/// Runs `cmd` to completion: whether it succeeded, and its stdout then stderr.
pub fn run(cmd: &mut Command) -> std::io::Result<(bool, String)> {
    let out = cmd.output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listens_on_names_the_process_that_listens_and_no_other() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let me = std::process::id();
        assert!(listens_on(me, port), "this process listens on {port}");
        // pid 1 (init) does not hold this test's socket.
        assert!(!listens_on(1, port), "another process does not");
        drop(listener);
        assert!(!listens_on(me, port), "not after the listener closed");
    }

    #[test]
    fn finds_sh_and_not_a_made_up_tool() {
        assert!(which("sh").is_some(), "sh is on PATH on every unix");
        assert!(which("ullstack-no-such-tool-7f3a").is_none());
    }

    #[test]
    fn wait_until_returns_when_the_condition_holds_and_times_out_otherwise() {
        let mut n = 0;
        let took = wait_until(Duration::from_secs(5), || {
            n += 1;
            n >= 3
        });
        assert!(took.is_ok());
        assert_eq!(n, 3);
        let never = wait_until(Duration::from_millis(20), || false);
        assert_eq!(never, Err(Duration::from_millis(20)));
    }
}
