//! What the server's examples share: the CPU time of the in-process server's threads, read from
//! `/proc` as `top` reads it, a fio run over NBD, and the median of a few runs. Each example
//! uses part of it.
#![allow(dead_code)]

/// The kernel's clock ticks per second, the unit of `/proc/*/stat`'s CPU times.
pub fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// (utime, stime) from one `stat` file's text, seconds.
pub fn stat_user_sys_seconds(stat: &str) -> (f64, f64) {
    // Fields after the ")" of the command name; utime and stime are fields 14 and 15.
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let stime: f64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (utime / clock_ticks_per_sec(), stime / clock_ticks_per_sec())
}

/// User and system CPU time so far, seconds, of this process's live threads whose name starts
/// with one of `prefixes` (`ullstack-` for the in-process server's threads).
pub fn threads_user_sys_seconds(prefixes: &[&str]) -> (f64, f64) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0.0, 0.0);
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        .filter(|stat| prefixes.iter().any(|p| stat.contains(&format!("({p}"))))
        .map(|stat| stat_user_sys_seconds(&stat))
        .fold((0.0, 0.0), |(u, s), (du, ds)| (u + du, s + ds))
}

/// Name prefixes of the in-process server's threads: its own (`ullstack-*`) and the kernel's
/// io_uring threads of the process (`iou-sqp-*`, a ring's submission-polling thread, and
/// `iou-wrk-*`, its workers), whose CPU is the server's too.
pub const SERVER_THREAD_PREFIXES: [&str; 2] = ["ullstack-", "iou-"];

/// The in-process server's CPU time so far (its threads, [`SERVER_THREAD_PREFIXES`]), seconds.
pub fn server_cpu_seconds() -> f64 {
    let (user, sys) = threads_user_sys_seconds(&SERVER_THREAD_PREFIXES);
    user + sys
}

/// The median of `v` (the upper one of an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// fio's first job (`jobs[0]` of its JSON report) after `seconds` of 4 KiB I/O over NBD to
/// `uri` (1 GiB, time based), with `extra` options (`--rw`, `--iodepth`, `--numjobs` …); None if
/// fio failed or printed no report.
pub fn fio_nbd(uri: &str, seconds: u64, extra: &[String]) -> Option<serde_json::Value> {
    let out = std::process::Command::new("fio")
        .args([
            "--ioengine=nbd".to_string(),
            format!("--uri={uri}"),
            "--bs=4k".to_string(),
            "--size=1g".to_string(),
            "--time_based".to_string(),
            format!("--runtime={seconds}"),
            "--output-format=json".to_string(),
        ])
        .args(extra)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut json: serde_json::Value = serde_json::from_str(&text[text.find('{')?..]).ok()?;
    Some(json["jobs"][0].take())
}

/// The random-read load of the CPU benchmarks: `jobs` connections at QD32, reported as one
/// group; fio's read side of it.
pub fn fio_randread_qd32(uri: &str, jobs: u32, seconds: u64) -> Option<serde_json::Value> {
    let extra = [
        format!("--numjobs={jobs}"),
        "--group_reporting".to_string(),
        "--name=randread".to_string(),
        "--rw=randread".to_string(),
        "--iodepth=32".to_string(),
    ];
    let mut job = fio_nbd(uri, seconds, &extra)?;
    Some(job["read"].take())
}

/// `name` read as a number: `None` when it is unset; a value that is not one stops the example
/// with the value and what was expected.
pub fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?}: expected a whole number")),
    )
}

/// The dataplane settings the examples take from the environment, each left at the config's
/// default when unset: `ULLSTACK_SOCKET_IO=epoll|uring`,
/// `ULLSTACK_SOCKET_RECV=multishot|single` (multishot only with uring),
/// `ULLSTACK_IDLE=spin|block-after-spin`, `ULLSTACK_WORKERS=N` (N ≥ 1),
/// `ULLSTACK_RING_WAIT=first|batch|min-wait`, `ULLSTACK_RING_SPIN=fixed|sized`,
/// `ULLSTACK_RING_SQPOLL_IDLE_MS=N` (0: off). A value outside those stops the example naming
/// it.
pub fn dataplane_from_env(d: &mut server::config::DataplaneConfig) {
    use server::config::{IdlePolicy, RingSpin, RingWait, SocketIo, SocketRecv};
    if let Ok(v) = std::env::var("ULLSTACK_RING_WAIT") {
        d.ring_wait = match v.as_str() {
            "first" => RingWait::First,
            "batch" => RingWait::Batch,
            "min-wait" => RingWait::MinWait,
            _ => panic!("ULLSTACK_RING_WAIT={v:?}: expected first, batch or min-wait"),
        };
    }
    if let Ok(v) = std::env::var("ULLSTACK_RING_SPIN") {
        d.ring_spin = match v.as_str() {
            "fixed" => RingSpin::Fixed,
            "sized" => RingSpin::Sized,
            _ => panic!("ULLSTACK_RING_SPIN={v:?}: expected fixed or sized"),
        };
    }
    if let Ok(v) = std::env::var("ULLSTACK_SOCKET_IO") {
        d.socket_io = match v.as_str() {
            "epoll" => SocketIo::Epoll,
            "uring" => SocketIo::Uring,
            _ => panic!("ULLSTACK_SOCKET_IO={v:?}: expected epoll or uring"),
        };
    }
    if let Ok(v) = std::env::var("ULLSTACK_SOCKET_RECV") {
        d.socket_recv = match v.as_str() {
            "multishot" => SocketRecv::Multishot,
            "single" => SocketRecv::Single,
            _ => panic!("ULLSTACK_SOCKET_RECV={v:?}: expected multishot or single"),
        };
    }
    if let Ok(v) = std::env::var("ULLSTACK_IDLE") {
        d.idle = match v.as_str() {
            "spin" => IdlePolicy::Spin,
            "block-after-spin" => IdlePolicy::BlockAfterSpin,
            _ => panic!("ULLSTACK_IDLE={v:?}: expected spin or block-after-spin"),
        };
    }
    if let Some(ms) = env_number::<u32>("ULLSTACK_RING_SQPOLL_IDLE_MS") {
        d.ring_sqpoll_idle_ms = ms;
    }
    if let Some(n) = env_number::<usize>("ULLSTACK_WORKERS") {
        assert!(n > 0, "ULLSTACK_WORKERS=0: expected at least 1 worker");
        d.workers = n;
    }
}

/// Thread ids of this process's threads whose name starts with `prefix`.
pub fn thread_ids(prefix: &str) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
        })
        .map(|t| t.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Runs `perf stat -e raw_syscalls:sys_enter` (and `syscalls:sys_enter_<name>` for each of
/// `named`) on `tids` for `seconds`: (total syscalls, (name, count) of the named ones), or why
/// not.
pub fn perf_syscalls(
    tids: &[String],
    seconds: u64,
    named: &[&str],
) -> Result<(u64, Vec<(String, u64)>), String> {
    let mut events = vec!["raw_syscalls:sys_enter".to_string()];
    events.extend(named.iter().map(|n| format!("syscalls:sys_enter_{n}")));
    let out = std::process::Command::new("perf")
        .args([
            "stat",
            "-x",
            ",",
            "-e",
            &events.join(","),
            "-t",
            &tids.join(","),
        ])
        .args(["--", "sleep", &seconds.to_string()])
        .output()
        .map_err(|e| format!("perf: {e}"))?;
    let text = String::from_utf8_lossy(&out.stderr);
    let mut total = None;
    let mut counts = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        let (Some(count), Some(event)) = (fields.first(), fields.get(2)) else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        if *event == "raw_syscalls:sys_enter" {
            total = Some(count);
        } else if let Some(name) = event.strip_prefix("syscalls:sys_enter_") {
            counts.push((name.to_string(), count));
        }
    }
    match total {
        Some(t) => Ok((t, counts)),
        None => Err(format!("perf stat counted nothing: {}", text.trim())),
    }
}
