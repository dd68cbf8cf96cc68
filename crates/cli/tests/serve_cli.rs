//! `ullstack serve` and `ullstack bench` as a user runs them: the quick-start server as a
//! process on 127.0.0.1 ports picked here, `nbdinfo` sees its volume, SIGINT / SIGTERM under
//! a running fio job drain it to exit 0, and `ullstack bench` reports load against it, as a
//! table and as JSON. Tests needing an external tool skip with a printed reason without it (fail in CI, where
//! `ULLSTACK_REQUIRE_TOOLS=1`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Ports are picked by binding port 0 and dropping the listener; another process may take
/// one before the server binds it, so starting is retried this many times with fresh ports.
const START_ATTEMPTS: u32 = 5;
/// Longest wait for a started server to accept on all three ports.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the server to exit after a signal (a drain whose clients take their replies
/// ends in well under a second; the quick start's grace, `limits.shutdown_grace_ms`, is 30 s).
const EXIT_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest wait for fio to get going, and to notice the server is gone.
const FIO_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests fio must have completed before the signal: the server is under load.
const FIO_WARM_REQUESTS: u64 = 1000;
/// fio's own time bound; the server is stopped long before.
const FIO_RUNTIME_S: u32 = 20;
const POLL: Duration = Duration::from_millis(20);
/// Socket timeout of the test's own connections.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const VOLUME_BYTES: u64 = 64 << 20;

/// `Some(path)` if `name` is on PATH; otherwise prints why `test` is skipped (or, with
/// `ULLSTACK_REQUIRE_TOOLS=1` as in CI, fails it).
fn tool(name: &str, test: &str) -> Option<String> {
    testkit::tool(name, test, "apt-get install fio libnbd-bin")
        .map(|p| p.to_string_lossy().into_owned())
}

/// Collects a child's pipe on a thread so the child never blocks on a full pipe.
fn collect(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Waits for `child` to exit within `timeout`; `None` if it is still running.
fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// Three distinct free ports on 127.0.0.1 (all bound at once, then released).
fn free_ports() -> [u16; 3] {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    let port = |i: usize| listeners[i].local_addr().expect("local addr").port();
    [port(0), port(1), port(2)]
}

/// `GET /metrics` from the admin endpoint (None while it does not answer).
fn scrape(admin: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&admin, IO_TIMEOUT).ok()?;
    s.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.starts_with("HTTP/1.0 200 OK").then_some(text)
}

/// The value of the sample line starting with `name` (labels included), 0 if absent.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn open_tenant_requests(admin: SocketAddr, op: &str) -> u64 {
    scrape(admin).map_or(0, |t| {
        metric(
            &t,
            &format!("ullstack_tenant_requests_total{{tenant=\"open\",op=\"{op}\"}}"),
        )
    })
}

/// `ullstack serve --memory 64MiB` (or `--config FILE`) as a child process, killed on drop
/// if still running.
struct Serve {
    child: Child,
    nbd: SocketAddr,
    native: SocketAddr,
    admin: SocketAddr,
    stderr: Option<JoinHandle<String>>,
    /// The config file it runs, removed on drop.
    config: Option<std::path::PathBuf>,
}

/// The quick start's command line on three addresses (NBD, own protocol, admin).
fn quick_start_args([nbd, native, admin]: [SocketAddr; 3]) -> Vec<String> {
    [
        "serve",
        "--memory",
        "64MiB",
        "--listen",
        &nbd.to_string(),
        "--listen-native",
        &native.to_string(),
        "--admin",
        &admin.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

impl Serve {
    fn start() -> Serve {
        Serve::start_with(|addrs| (quick_start_args(addrs), None))
    }

    /// Starts `ullstack serve` with the arguments (and the config file it reads, if any)
    /// `launch` gives for three free addresses, retrying with fresh ports.
    fn start_with(
        launch: impl Fn([SocketAddr; 3]) -> (Vec<String>, Option<std::path::PathBuf>),
    ) -> Serve {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let addrs = free_ports().map(|port| SocketAddr::from(([127, 0, 0, 1], port)));
            let (args, config) = launch(addrs);
            match Serve::try_start(addrs, &args, config) {
                Ok(serve) => return serve,
                Err(why) => failures.push(why),
            }
        }
        panic!(
            "ullstack serve did not start in {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n---\n")
        );
    }

    /// Starts the server with `args` on `addrs` (NBD, own protocol, admin) and waits until all
    /// accept; `Err` with its stderr if it exited first (a port taken meanwhile).
    fn try_start(
        [nbd, native, admin]: [SocketAddr; 3],
        args: &[String],
        config: Option<std::path::PathBuf>,
    ) -> Result<Serve, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ullstack"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ullstack serve");
        let stderr = child.stderr.take().map(collect);
        let mut serve = Serve {
            child,
            nbd,
            native,
            admin,
            stderr,
            config,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = serve.child.try_wait() {
                return Err(format!("exited early ({status}):\n{}", serve.take_stderr()));
            }
            let accepting = [serve.nbd, serve.native]
                .iter()
                .all(|a| TcpStream::connect_timeout(a, IO_TIMEOUT).is_ok());
            if accepting && scrape(serve.admin).is_some() {
                return Ok(serve);
            }
            if Instant::now() >= deadline {
                return Err(format!("not accepting after {READY_TIMEOUT:?}"));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Sends `signal` (`INT`, `TERM`) with kill(1): no unsafe code, and no libc dependency.
    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .expect("spawn kill");
        assert!(status.success(), "kill -s {signal} {pid}: {status}");
    }

    /// Waits (bounded) for the exit; returns its status and everything it wrote to stderr.
    fn wait_exit(mut self, timeout: Duration) -> (ExitStatus, String) {
        let status = wait_bounded(&mut self.child, timeout);
        let Some(status) = status else {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!(
                "ullstack serve still running {timeout:?} after the signal:\n{}",
                self.take_stderr()
            );
        };
        (status, self.take_stderr())
    }

    /// Everything written to stderr; call only once the child has exited (or been killed).
    fn take_stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(path) = &self.config {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A fio nbd job (random reads, iodepth 32, time-bounded) against `serve`'s export.
fn start_fio(fio: &str, serve: &Serve) -> (Child, JoinHandle<String>) {
    let mut child = Command::new(fio)
        .current_dir(std::env::temp_dir())
        .args([
            "--name=load",
            "--ioengine=nbd",
            &format!("--uri=nbd://{}/default", serve.nbd),
            "--rw=randread",
            "--bs=4k",
            "--iodepth=32",
            "--size=64m",
            "--time_based",
            &format!("--runtime={FIO_RUNTIME_S}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fio");
    let out = child.stdout.take().map(collect);
    let err = child.stderr.take().map(collect);
    let text = std::thread::spawn(move || {
        let mut t = out.and_then(|h| h.join().ok()).unwrap_or_default();
        t.push_str(&err.and_then(|h| h.join().ok()).unwrap_or_default());
        t
    });
    (child, text)
}

/// Starts a server, checks `nbdinfo`'s view, signals it under fio load, and checks it drains,
/// says so and exits 0 within the bound; fio then ends too (its connection is gone).
fn signal_under_fio_load_exits_0(signal: &str, test: &str) {
    let name = format!("SIG{signal}");
    let Some(nbdinfo) = tool("nbdinfo", test) else {
        return;
    };
    let Some(fio) = tool("fio", test) else { return };
    let serve = Serve::start();

    let out = Command::new(&nbdinfo)
        .args(["--size", &format!("nbd://{}/default", serve.nbd)])
        .output()
        .expect("spawn nbdinfo");
    let size = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nbdinfo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(size.trim(), VOLUME_BYTES.to_string(), "export size");

    let (mut fio_child, fio_text) = start_fio(&fio, &serve);
    let deadline = Instant::now() + FIO_TIMEOUT;
    while open_tenant_requests(serve.admin, "read") < FIO_WARM_REQUESTS {
        if Instant::now() >= deadline || matches!(fio_child.try_wait(), Ok(Some(_))) {
            let _ = fio_child.kill();
            let _ = fio_child.wait();
            panic!(
                "fio did not complete {FIO_WARM_REQUESTS} reads:\n{}",
                fio_text.join().unwrap_or_default()
            );
        }
        std::thread::sleep(POLL);
    }

    let nbd = serve.nbd;
    let signalled = Instant::now();
    serve.signal(signal);
    let (status, stderr) = serve.wait_exit(EXIT_TIMEOUT);
    let took = signalled.elapsed();
    let fio_status = wait_bounded(&mut fio_child, FIO_TIMEOUT);
    if fio_status.is_none() {
        let _ = fio_child.kill();
        let _ = fio_child.wait();
    }
    let fio_text = fio_text.join().unwrap_or_default();
    println!("{name}: server exited {status} {took:?} after the signal; fio {fio_status:?}");

    assert!(
        status.success(),
        "exit status {status} after {name}:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("ullstack serve: NBD on {nbd} (exports: default)")),
        "startup line:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "ullstack serve: {name}: draining in-flight I/O and stopping"
        )),
        "drain message for {name}:\n{stderr}"
    );
    assert!(
        stderr.trim_end().ends_with("ullstack serve: stopped"),
        "`stopped` is the last line:\n{stderr}"
    );
    assert!(
        fio_status.is_some(),
        "fio still running {FIO_TIMEOUT:?} after the server exited:\n{fio_text}"
    );
}

#[test]
fn serve_drains_and_exits_0_on_sigint_under_fio_load() {
    signal_under_fio_load_exits_0("INT", "serve_drains_and_exits_0_on_sigint_under_fio_load");
}

#[test]
fn serve_drains_and_exits_0_on_sigterm_under_fio_load() {
    signal_under_fio_load_exits_0("TERM", "serve_drains_and_exits_0_on_sigterm_under_fio_load");
}

/// A one-second closed-loop run (QD 8, 70 % reads) of the quick start's open tenant: the
/// table has its row and total, the JSON parses with the per-tenant fields, IOPS > 0 and the
/// server counted at least the requests the client measured.
#[test]
fn bench_reports_iops_and_json_against_a_serve_process() {
    let serve = Serve::start();
    let json_path =
        std::env::temp_dir().join(format!("ullstack-cli-{}-bench.json", std::process::id()));
    let _ = std::fs::remove_file(&json_path);
    let mut bench = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args(["bench", "--server", &serve.native.to_string()])
        .args(["--tenant", "name=open,qd=8,read=70"])
        .args(["--duration", "1s", "--threads", "1", "--seed", "7"])
        .arg("--no-progress")
        .arg("--json")
        .arg(&json_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ullstack bench");
    let stdout = bench.stdout.take().map(collect);
    let stderr = bench.stderr.take().map(collect);
    let status = wait_bounded(&mut bench, Duration::from_secs(30));
    if status.is_none() {
        let _ = bench.kill();
        let _ = bench.wait();
    }
    let stdout = stdout.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let status = status.unwrap_or_else(|| panic!("bench ran over 30 s:\n{stdout}{stderr}"));
    assert!(status.success(), "bench {status}:\n{stdout}{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("open ")) && stdout.contains("total: "),
        "table with the tenant's row and the total:\n{stdout}"
    );

    let text = std::fs::read_to_string(&json_path).expect("bench wrote --json");
    let _ = std::fs::remove_file(&json_path);
    let v: serde_json::Value = serde_json::from_str(&text).expect("bench JSON parses");
    assert_eq!(v["server"], serve.native.to_string());
    assert_eq!(v["seed"], 7);
    assert!(v["window_s"].as_f64().unwrap_or(0.0) >= 1.0, "{text}");
    assert!(v["total_iops"].as_f64().unwrap_or(0.0) > 0.0, "{text}");
    let tenants = v["tenants"].as_array().expect("tenants array");
    assert_eq!(tenants.len(), 1, "{text}");
    let t = &tenants[0];
    assert_eq!(t["name"], "open");
    assert_eq!(t["class"], "be");
    assert_eq!(t["load"], "closed qd 8");
    assert_eq!(t["connections"], 1);
    assert_eq!(t["read_pct"], 70);
    assert_eq!(t["size_bytes"], 4096);
    assert!(t["refused"].is_null(), "not refused: {}", t["refused"]);
    assert_eq!(t["errors"], serde_json::json!({}), "no failed requests");
    assert!(t["iops"].as_f64().unwrap_or(0.0) > 0.0, "{t}");
    assert!(t["mb_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{t}");
    for op in ["reads", "writes"] {
        let r = &t[op];
        assert!(r["count"].as_u64().unwrap_or(0) > 0, "{op}: {r}");
        assert!(r["iops"].as_f64().unwrap_or(0.0) > 0.0, "{op}: {r}");
        let lat = &r["latency_ns"];
        for key in ["p50", "p95", "p99", "p99_9", "max"] {
            assert!(
                lat[key].as_u64().unwrap_or(0) > 0,
                "{op}.latency_ns.{key}: {r}"
            );
        }
        assert!(
            lat["p50"].as_u64() <= lat["p99"].as_u64()
                && lat["p99"].as_u64() <= lat["max"].as_u64(),
            "{op}: percentiles ordered: {r}"
        );
    }
    let iops_sum =
        t["reads"]["iops"].as_f64().unwrap_or(0.0) + t["writes"]["iops"].as_f64().unwrap_or(0.0);
    assert!(
        (t["iops"].as_f64().unwrap_or(0.0) - iops_sum).abs() < 1e-6,
        "tenant IOPS = reads + writes: {t}"
    );
    for (op, key) in [("read", "reads"), ("write", "writes")] {
        let measured = t[key]["count"].as_u64().unwrap_or(0);
        let served = open_tenant_requests(serve.admin, op);
        assert!(
            served >= measured,
            "server counted {served} {op}s, bench measured {measured}"
        );
    }
}

#[test]
fn serve_help_and_check_show_the_server_wide_memory_limit() {
    let help = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args(["serve", "--help"])
        .output()
        .expect("ullstack serve --help");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--max-memory") && text.contains("quarter of physical memory"),
        "{text}"
    );
    let check = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args([
            "serve",
            "--memory",
            "64MiB",
            "--max-memory",
            "512MiB",
            "--check",
        ])
        .output()
        .expect("ullstack serve --check");
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{text}");
    let after = text.split("max_memory_bytes").nth(1).unwrap_or("");
    assert!(
        after
            .split("idle_timeout_ms")
            .next()
            .unwrap_or("")
            .contains("536870912"),
        "{text}"
    );
}

/// NBD on a non-loopback address without TLS (anyone reaching the port may use every export)
/// is warned about when `serve` starts and by `--check`; on loopback it is not.
#[test]
fn serve_warns_when_nbd_listens_beyond_loopback_without_tls() {
    let check = |listen: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_ullstack"))
            .args(["serve", "--memory", "64MiB", "--listen", listen, "--check"])
            .output()
            .expect("ullstack serve --check");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = check("0.0.0.0:0");
    assert!(
        stderr.contains("warning")
            && stderr.contains("without TLS")
            && stderr.contains("--tls-psk"),
        "{stderr}"
    );
    let stderr = check("127.0.0.1:0");
    assert!(!stderr.contains("without TLS"), "{stderr}");
}

/// `--check` prints the effective config as TOML with every tenant's secret redacted.
#[test]
fn serve_check_prints_toml_without_secrets() {
    let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("serve-check-{}.toml", std::process::id()));
    let toml = r#"
[listen]
nbd = "127.0.0.1:0"

[[volume]]
name = "vol"
backend = { kind = "memory", size = "8MiB" }

[[tenant]]
name = "alice"
secret = "alice-very-secret-1"
class = "be"
acl = [{ volume = "vol", access = "read-write" }]

[[export]]
name = "default"
volume = "vol"
tenant = "alice"
"#;
    std::fs::write(&path, toml).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args(["serve", "--config"])
        .arg(&path)
        .arg("--check")
        .output()
        .expect("ullstack serve --check");
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(!stdout.contains("alice-very-secret-1"), "{stdout}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("alice-very-secret-1"));
    assert!(
        stdout.contains("[[tenant]]") && stdout.contains("secret = \"(redacted)\""),
        "{stdout}"
    );
    if let Err(e) = stdout.parse::<toml::Table>() {
        panic!("--check output is not TOML: {e}\n{stdout}");
    }
}

/// Logs written to a pipe or a file carry no ANSI colour codes.
#[test]
fn serve_logs_to_a_pipe_without_colour_codes() {
    let serve = Serve::start();
    serve.signal("INT");
    let (status, stderr) = serve.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("server started"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in the log: {stderr:?}"
    );
}

/// `serve` says which QoS profile prices each volume: at start-up (the quick start's memory
/// volume: `memory`) and in `--check-config` (the packaged config's file volume: `reflex-a`).
#[test]
fn serve_says_which_profile_prices_each_volume() {
    let serve = Serve::start();
    serve.signal("INT");
    let (status, stderr) = serve.wait_exit(EXIT_TIMEOUT);
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "ullstack serve: volume default (memory): QoS profile memory (auto: every volume is in memory)"
        ),
        "{stderr}"
    );
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../../packaging/server.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args(["serve", "--check-config", shipped])
        .output()
        .expect("ullstack serve --check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("# volume default (file): QoS profile reflex-a (auto: ")
            && stdout.contains("# profile in use: \"reflex-a\""),
        "{stdout}"
    );
}

/// `--check-config FILE` validates FILE as `--config FILE --check` does: the packaged default
/// config passes (exit 0, the effective config printed); a bad file fails naming the file and
/// the key; it cannot be combined with --config or --memory.
#[test]
fn serve_check_config_validates_the_packaged_config_and_refuses_a_bad_one() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../../packaging/server.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args(["serve", "--check-config", shipped])
        .output()
        .expect("ullstack serve --check-config");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("[[volume]]") && stdout.contains("/var/lib/ullstack/default.img"),
        "{stdout}"
    );

    let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let bad = dir.join(format!("check-config-bad-{}.toml", std::process::id()));
    std::fs::write(&bad, "[dataplane]\nworkers = 0\n").expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args(["serve", "--check-config"])
        .arg(&bad)
        .output()
        .expect("ullstack serve --check-config");
    let _ = std::fs::remove_file(&bad);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains(&*bad.to_string_lossy()) && stderr.contains("workers"),
        "{stderr}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_ullstack"))
        .args(["serve", "--memory", "1MiB", "--check-config", shipped])
        .output()
        .expect("ullstack serve");
    assert!(
        !out.status.success(),
        "--check-config with --memory must be refused"
    );
}

/// A config for `serve --config` on `addrs` (NBD, own protocol, admin): a 1 s shutdown grace,
/// a 64 MiB memory volume, and per tenant (best effort) an NBD export of its name.
fn reload_config([nbd, native, admin]: [SocketAddr; 3], tenants: &[&str]) -> String {
    let mut text = format!(
        "[listen]\nnbd = \"{nbd}\"\nnative = \"{native}\"\nadmin = \"{admin}\"\n\n\
         [limits]\nshutdown_grace_ms = {RELOAD_GRACE_MS}\n\n\
         [[volume]]\nname = \"vol\"\nbackend = {{ kind = \"memory\", size = \"64MiB\" }}\n"
    );
    for t in tenants {
        text.push_str(&format!(
            "\n[[tenant]]\nname = \"{t}\"\nsecret = \"{t}-secret-1\"\nclass = \"be\"\n\
             acl = [{{ volume = \"vol\", access = \"read-write\" }}]\n\n\
             [[export]]\nname = \"{t}\"\nvolume = \"vol\"\ntenant = \"{t}\"\n"
        ));
    }
    text
}

/// The grace of the reload test's server.
const RELOAD_GRACE_MS: u64 = 1_000;

/// An NBD session (fixed newstyle, GO) on `export`.
fn nbd_session(addr: SocketAddr, export: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect to NBD");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    proto::nbd::client::handshake(&mut s, proto::nbd::client::ClientOptions::simple(export))
        .unwrap_or_else(|e| panic!("GO {export}: {e}"));
    s
}

/// Sends an NBD READ of `len` bytes at 0.
fn nbd_send_read(s: &mut TcpStream, cookie: u64, len: u32) {
    let mut frame = Vec::with_capacity(28);
    frame.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
    frame.extend_from_slice(&0u16.to_be_bytes());
    frame.extend_from_slice(
        &proto::nbd::transmission::CommandType::Read
            .to_u16()
            .to_be_bytes(),
    );
    frame.extend_from_slice(&cookie.to_be_bytes());
    frame.extend_from_slice(&0u64.to_be_bytes());
    frame.extend_from_slice(&len.to_be_bytes());
    s.write_all(&frame).expect("NBD READ");
}

/// One 4 KiB READ answered on `s`.
fn nbd_reads_4k(s: &mut TcpStream, cookie: u64) {
    nbd_send_read(s, cookie, 4096);
    let mut reply = [0u8; 16 + 4096];
    s.read_exact(&mut reply).expect("NBD reply");
    assert_eq!(&reply[4..8], &[0; 4], "errno of a healthy READ");
    assert_eq!(&reply[8..16], &cookie.to_be_bytes(), "cookie");
}

/// Waits (bounded) for the admin endpoint's `name` sample to reach `at_least`.
fn wait_metric(admin: SocketAddr, name: &str, at_least: u64) {
    let deadline = Instant::now() + READY_TIMEOUT;
    while scrape(admin).map_or(0, |t| metric(&t, name)) < at_least {
        assert!(
            Instant::now() < deadline,
            "{name} < {at_least} after {READY_TIMEOUT:?}"
        );
        std::thread::sleep(POLL);
    }
}

/// `ullstack serve --config F --log-format json` as an operator drives it: SIGHUP after
/// removing a tenant ends that tenant's connection and keeps the process and the other
/// tenant's connection (SIGHUP used to kill it); SIGHUP with a broken file changes nothing;
/// SIGTERM with a client that never takes a 32 MiB reply stops after the 1 s grace with exit
/// status 3; every stderr line is a JSON object, the reloads and the ended session among them.
#[test]
fn serve_reloads_on_sighup_and_stops_under_its_grace() {
    let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("serve-reload-{}.toml", std::process::id()));
    let serve = Serve::start_with(|addrs| {
        std::fs::write(&path, reload_config(addrs, &["alice", "bob"])).expect("write config");
        let args = [
            "serve",
            "--config",
            &*path.to_string_lossy(),
            "--log-format",
            "json",
        ];
        (args.map(String::from).to_vec(), Some(path.clone()))
    });
    let addrs = [serve.nbd, serve.native, serve.admin];
    let mut alice = nbd_session(serve.nbd, "alice");
    let mut bob = nbd_session(serve.nbd, "bob");
    nbd_reads_4k(&mut alice, 1);

    std::fs::write(&path, reload_config(addrs, &["alice"])).expect("rewrite config");
    serve.signal("HUP");
    let mut byte = [0u8; 1];
    match bob.read(&mut byte) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("bob's connection did not end after SIGHUP: {other:?}"),
    }
    wait_metric(
        serve.admin,
        "ullstack_reloads_total{outcome=\"applied\"}",
        1,
    );
    nbd_reads_4k(&mut alice, 2);

    std::fs::write(&path, "not TOML [").expect("break config");
    serve.signal("HUP");
    wait_metric(
        serve.admin,
        "ullstack_reloads_total{outcome=\"refused\"}",
        1,
    );
    nbd_reads_4k(&mut alice, 3);

    // alice keeps a request open: a READ whose 32 MiB reply it never takes.
    nbd_send_read(&mut alice, 4, 32 << 20);
    wait_metric(
        serve.admin,
        "ullstack_tenant_requests_total{tenant=\"alice\",op=\"read\"}",
        4,
    );
    let signalled = Instant::now();
    serve.signal("TERM");
    let (status, stderr) = serve.wait_exit(EXIT_TIMEOUT);
    let took = signalled.elapsed();
    println!("SIGTERM with a stuck reader: exit {status} after {took:?}");
    assert_eq!(
        status.code(),
        Some(3),
        "exit status after the grace:\n{stderr}"
    );
    // Not before the grace (the reader is stuck until it ends); how long after is the machine's
    // and has no bound here: exit status 3, the grace's own, says the grace ended the wait.
    let grace = Duration::from_millis(RELOAD_GRACE_MS);
    assert!(
        took >= grace,
        "stopped {took:?} after SIGTERM, within the {grace:?} grace"
    );

    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |event: &str, key: &str, value: &str| {
        events
            .iter()
            .any(|e| e["event"] == event && e[key].as_str().is_some_and(|v| v.contains(value)))
    };
    assert!(find("reload", "changes", "tenant bob removed"), "{stderr}");
    assert!(find("reload", "trigger", "sighup"), "{stderr}");
    assert!(find("reload", "error", "does not parse"), "{stderr}");
    assert!(find("conn_close", "reason", "tenant_removed"), "{stderr}");
    assert!(find("conn_close", "reason", "shutdown_grace"), "{stderr}");
    assert!(find("serve", "message", "exit status 3"), "{stderr}");
}
