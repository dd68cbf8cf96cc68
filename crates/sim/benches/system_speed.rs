//! Speed of full-system runs, printed (not asserted): simulated seconds per wall-clock second
//! for (a) the embedded default co-run — apache (latency-critical) with pagerank on arm8 +
//! zssd, 10 s simulated — and (b) imageserver co-running with ungzip (write-back heavy), 10 s;
//! (c) is (a) under the `cacheopt` stack, whose device cache (split by class, ghost prefetch)
//! every FlashShare stack but `vanilla` runs: five in six of `ullstack study flashshare`'s
//! co-runs cost what (c) costs, not what (a) does.
//! The target: (a) in under 2 s of wall time on one core.
//!
//! Each case also prints the CPU time of the run's thread (`/proc/thread-self/schedstat`,
//! nanoseconds on a core): on a machine shared with other work the wall time stretches with
//! the load and the CPU time much less, so two builds are best compared by the CPU time.
//!
//! Run: `cargo bench -p sim --bench system_speed` (a filter argument selects one case; a
//! `.toml` argument runs that system config instead and prints its table).

use std::time::Instant;

use sim::system::{run_system, SystemConfig};
use sim::Silent;
use testkit::heap::calls;

/// Counts heap allocations, to check that the event loop allocates nothing in steady state
/// (a run twice as long should allocate about as often).
#[global_allocator]
static GLOBAL: testkit::heap::Calls = testkit::heap::Calls;

fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Nanoseconds this thread has spent on a core (`/proc/thread-self/schedstat`'s first field);
/// `None` where the kernel does not provide it.
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn bench(label: &str, cfg: &SystemConfig) {
    // Allocations of the same run at half the length: steady state should add (almost) none.
    let mut half = cfg.clone();
    half.duration = engine::SimTime(cfg.duration.0 / 2);
    let before = calls();
    run_system(&half, &mut Silent).expect("run completes");
    let allocs_half = calls() - before;
    let before = calls();
    let cpu_before = thread_cpu_ns();
    let wall = Instant::now();
    let r = run_system(cfg, &mut Silent).expect("run completes");
    let secs = wall.elapsed().as_secs_f64();
    let cpu = match (cpu_before, thread_cpu_ns()) {
        (Some(a), Some(b)) => {
            let cpu_secs = b.saturating_sub(a) as f64 / 1e9;
            format!(
                " (CPU {cpu_secs:.3} s = {:.1} simulated s per CPU s)",
                r.host.end.as_secs_f64() / cpu_secs
            )
        }
        _ => String::new(),
    };
    let allocs_full = calls() - before;
    let simulated = r.host.end.as_secs_f64();
    println!(
        "{label}: simulated {simulated:.3} s in {secs:.3} s wall = {:.1} simulated s per wall s{cpu}; \
         {} NVMe commands, {} events ({:.1} M events/s); peak RSS {} MiB; \
         heap allocations {allocs_full} (half-length run: {allocs_half})",
        simulated / secs,
        r.host.commands,
        r.events,
        r.events as f64 / secs / 1e6,
        peak_rss_mib()
    );
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    if let Some(path) = filter.as_deref().filter(|f| f.ends_with(".toml")) {
        let cfg = SystemConfig::load(std::path::Path::new(path)).expect("valid system config");
        let wall = Instant::now();
        let s = sim::system::run(&cfg, &mut Silent).expect("run completes");
        print!("{}", s.table());
        println!("total wall {:.3} s", wall.elapsed().as_secs_f64());
        return;
    }
    let want = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    if want("a-default-apache-pagerank") {
        let cfg = SystemConfig::embedded_default();
        bench("a-default-apache-pagerank (co-run only)", &cfg);
    }
    if want("b-imageserver-ungzip") {
        let text = "seed = 1\nduration_ms = 10000\n[host]\npreset = \"arm8\"\n[device]\npreset = \"zssd\"\n\
                    [[process]]\nprofile = \"imageserver\"\n[[process]]\nprofile = \"ungzip\"\n";
        let cfg = SystemConfig::parse(text, "bench", std::path::Path::new(".")).expect("valid");
        bench("b-imageserver-ungzip", &cfg);
    }
    if want("c-cacheopt-apache-pagerank") {
        let stack = sim::stack::find("cacheopt").expect("a FlashShare stack");
        let cfg = SystemConfig::parse_with_stack(
            sim::system::DEFAULT_SYSTEM_TOML,
            "embedded-default",
            std::path::Path::new("."),
            Some(stack),
        )
        .expect("the embedded default system config is valid");
        bench("c-cacheopt-apache-pagerank (co-run only)", &cfg);
    }
}
