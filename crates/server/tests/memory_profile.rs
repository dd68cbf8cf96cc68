//! A memory volume is priced as memory, not as flash (`config/profile.rs`): the quick start's
//! config (`[qos] profile = "auto"`, one memory volume) charges a 1 KiB write one token, and
//! pipelined small writes on one connection run at the server's pace, not at the flash profile's
//! 57 K writes/s. The same load on the same volume with `profile = "reflex-a"` asked for is
//! the control: it is paced, so the comparison shows a mechanism this machine can exercise.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proto::nbd::transmission::CommandType;
use server::config::ServerConfig;

/// Writes per run: 100 K at reflex-a's 10 tokens each and 570 K tokens/s take at least 1.75 s
/// of token time; unpaced, this server takes a fraction of that.
const WRITES: u64 = 100_000;
/// Each write's payload: a small write, below one 4 KiB cost unit.
const WRITE_BYTES: usize = 1024;
/// Longest either run may take before the test fails instead of hanging.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// The quick start's shape with an admin listener: one memory volume `default`, the open BE
/// tenant `open`, the NBD export `default`; `qos` is the `[qos]` section (empty: `auto`).
fn quick_start_toml(qos: &str) -> String {
    quick_start_beside(qos, "")
}

/// The quick start with `volumes` (`[[volume]]` tables) after its memory volume.
fn quick_start_beside(qos: &str, volumes: &str) -> String {
    format!(
        r#"
[listen]
nbd = "127.0.0.1:0"
admin = "127.0.0.1:0"

{qos}

[[volume]]
name = "default"
backend = {{ kind = "memory", size = "256MiB" }}

{volumes}

[[tenant]]
name = "open"
open = true
class = "be"
acl = [{{ volume = "default", access = "read-write" }}]

[[export]]
name = "default"
volume = "default"
tenant = "open"
"#
    )
}

/// What one run of pipelined writes showed.
struct Run {
    elapsed: Duration,
    tokens_spent_mtok: u64,
}

/// `WRITES` 1 KiB writes pipelined on one NBD connection (a writer thread sends, this thread
/// reads every reply), then the tenant's tokens from `/metrics`.
fn pipelined_small_writes(nbd_addr: SocketAddr, admin: SocketAddr) -> Run {
    let mut nbd = common::RawNbd::connect(nbd_addr, "default").expect("connect");
    let mut tx = nbd.stream.try_clone().expect("clone");
    let payload = vec![0x5au8; WRITE_BYTES];
    let started = Instant::now();
    let writer = std::thread::spawn(move || {
        const FRAMES_PER_SEND: usize = 64;
        let mut frames = Vec::with_capacity(FRAMES_PER_SEND * (28 + WRITE_BYTES));
        for i in 0..WRITES {
            let offset = (i * WRITE_BYTES as u64) % (128 << 20);
            frames.extend_from_slice(&proto::nbd::REQUEST_MAGIC.to_be_bytes());
            frames.extend_from_slice(&0u16.to_be_bytes());
            frames.extend_from_slice(&CommandType::Write.to_u16().to_be_bytes());
            frames.extend_from_slice(&i.to_be_bytes());
            frames.extend_from_slice(&offset.to_be_bytes());
            frames.extend_from_slice(&(WRITE_BYTES as u32).to_be_bytes());
            frames.extend_from_slice(&payload);
            if frames.len() >= FRAMES_PER_SEND * (28 + WRITE_BYTES) {
                tx.write_all(&frames).expect("send writes");
                frames.clear();
            }
        }
        tx.write_all(&frames).expect("send writes");
    });
    for _ in 0..WRITES {
        assert!(
            started.elapsed() < RUN_LIMIT,
            "replies took over {RUN_LIMIT:?}"
        );
        let (err, cookie) = nbd.recv_head();
        assert_eq!(err, 0, "write {cookie} failed");
    }
    let elapsed = started.elapsed();
    writer.join().expect("writer");
    nbd.disconnect();
    let text = common::scrape(admin);
    Run {
        elapsed,
        tokens_spent_mtok: common::metric(
            &text,
            "ullstack_tenant_tokens_spent_mtok_total{tenant=\"open\"}",
        ),
    }
}

fn run_with(qos: &str) -> Run {
    run_on(&quick_start_toml(qos))
}

fn run_on(config: &str) -> Run {
    let server = common::start(config);
    let nbd = server.addrs.nbd.expect("nbd listener");
    let admin = server.addrs.admin.expect("admin listener");
    pipelined_small_writes(nbd, admin)
}

#[test]
fn memory_volume_small_writes_are_not_paced_at_flash_cost() {
    let flash = qos::DeviceProfile::reflex_a();
    let memory = qos::DeviceProfile::memory();
    let paced = run_with("[qos]\nprofile = \"reflex-a\"");
    let auto = run_with("");
    println!(
        "{WRITES} pipelined {WRITE_BYTES} B writes on one connection to a memory volume: \
         profile auto {:?} ({} mtok), reflex-a {:?} ({} mtok)",
        auto.elapsed, auto.tokens_spent_mtok, paced.elapsed, paced.tokens_spent_mtok
    );
    // Prices: a small write costs one cost unit of its profile.
    assert_eq!(paced.tokens_spent_mtok, WRITES * flash.write_cost_mtok);
    assert_eq!(
        auto.tokens_spent_mtok,
        WRITES * memory.write_cost_mtok,
        "the memory volume was priced as {} mtok per write, not memory's {}",
        auto.tokens_spent_mtok / WRITES,
        memory.write_cost_mtok
    );
    // Pace: the flash profile holds the load to its token rate (the control: pacing happens on
    // this machine); the memory volume under `auto` is not held to it.
    let flash_floor = Duration::from_millis(
        WRITES * flash.write_cost_mtok * 1000 / flash.max_rate_mtok_per_sec(qos::LoadMix::Mixed),
    );
    assert!(
        paced.elapsed >= flash_floor / 2,
        "reflex-a should pace {WRITES} writes to about {flash_floor:?}; took {:?}",
        paced.elapsed
    );
    assert!(
        auto.elapsed * 2 < paced.elapsed,
        "the memory volume took {:?}, not under half of the flash-paced {:?}",
        auto.elapsed,
        paced.elapsed
    );
}

#[test]
fn the_quick_start_says_each_volume_is_priced_as_memory() {
    let config = ServerConfig::quick_start(server::config::ByteSize(1 << 30), None, None);
    let lines = config.volume_profile_lines().expect("valid quick start");
    assert_eq!(
        lines,
        ["volume default (memory): QoS profile memory (auto: every volume is in memory)"]
    );
    assert_eq!(
        config.device_profile().expect("valid"),
        qos::DeviceProfile::memory()
    );
    let summary = config.summary_toml();
    assert!(summary.contains(&format!("# {}", lines[0])), "{summary}");
    assert!(
        summary.contains("# profile in use: \"memory\""),
        "{summary}"
    );
}

/// A server with a memory volume and a file volume prices each by its backend
/// (`config/profile.rs`): under `auto` the bucket is the file volume's (`reflex-a`) and the
/// memory volume keeps the `memory` profile, which never paces it, so its writes skip the
/// flash bucket — charged nothing, and not held to reflex-a's 57 K writes/s. The control is
/// the same server with `profile = "reflex-a"` asked for, which paces the memory volume as
/// flash (before per-volume profiles, `auto` did that too).
#[test]
fn a_memory_volume_beside_a_file_volume_is_not_paced_as_flash() {
    let file = common::TempFile::new("mixed-profile");
    let volumes = format!(
        "[[volume]]\nname = \"disk\"\nbackend = {}\n",
        common::file_backend(&file.0, "16MiB")
    );
    let config = ServerConfig::from_toml_str(&quick_start_beside("", &volumes)).expect("valid");
    let lines = config.volume_profile_lines().expect("valid");
    println!("{lines:#?}");
    assert!(
        lines[0].starts_with("volume default (memory): QoS profile memory (auto: in memory beside"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("volume disk (file): QoS profile reflex-a (auto: "),
        "{lines:?}"
    );
    let flash = qos::DeviceProfile::reflex_a();
    let paced = run_on(&quick_start_beside(
        "[qos]\nprofile = \"reflex-a\"",
        &volumes,
    ));
    let auto = run_on(&quick_start_beside("", &volumes));
    println!(
        "{WRITES} pipelined {WRITE_BYTES} B writes to the memory volume of a memory + file \
         server: profile auto {:?} ({} mtok), reflex-a for both {:?} ({} mtok)",
        auto.elapsed, auto.tokens_spent_mtok, paced.elapsed, paced.tokens_spent_mtok
    );
    assert_eq!(paced.tokens_spent_mtok, WRITES * flash.write_cost_mtok);
    assert_eq!(
        auto.tokens_spent_mtok, 0,
        "the memory volume's writes were charged to the flash bucket"
    );
    assert!(
        auto.elapsed * 2 < paced.elapsed,
        "the memory volume took {:?}, not under half of the flash-paced {:?}",
        auto.elapsed,
        paced.elapsed
    );
}
