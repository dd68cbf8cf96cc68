//! Full-system runs: conservation laws, behaviour that must come out of the model, determinism
//! and config errors.

mod common;

use std::path::Path;

use common::without_wall_clock;
use engine::IoClass;
use sim::system::{run, run_system, SystemConfig, SystemSummary};
use sim::Silent;

fn config(text: &str) -> SystemConfig {
    SystemConfig::parse(text, "test.toml", Path::new(".")).unwrap()
}

/// The error a config that must not parse gives.
fn config_error(text: &str) -> String {
    SystemConfig::parse(text, "test.toml", Path::new("."))
        .expect_err("the config is refused")
        .to_string()
}

fn summary(text: &str) -> SystemSummary {
    run(&config(text), &mut Silent).unwrap()
}

fn process<'a>(
    s: &'a sim::system::SystemRunSummary,
    name: &str,
) -> &'a sim::system::summary::ProcessSummary {
    s.processes.iter().find(|p| p.name == name).unwrap()
}

/// Co-run of a read-mostly service with a write-heavy job on a host whose page cache is small,
/// so write-back waves run throughout.
const WRITEBACK_MIX: &str = "
seed = 3
duration_ms = 600
[host]
preset = \"arm8\"
attr = \"on\"
[host.pagecache]
memory_bytes = 536870912
reserved_bytes = 134217728
[device]
preset = \"zssd\"
# imageserver as it ran before its knee calibration (four workers, 1 M instructions).
[[process]]
profile = \"imageserver\"
threads = 4
instructions_per_request = 1000000
[[process]]
profile = \"ungzip\"
threads = 4
";

#[test]
fn conservation_every_io_once_cpu_time_adds_up_dirty_pages_accounted() {
    let cfg = config(WRITEBACK_MIX);
    let r = run_system(&cfg, &mut Silent).unwrap();
    let h = &r.host;
    // Every command the host issued reached the device and completed exactly once (the run
    // itself fails if a request is left in flight or completes twice).
    let dev = &r.device.commands;
    assert_eq!(h.commands, dev.reads + dev.writes);
    assert_eq!(
        h.commands,
        h.blk.latency_critical.requests + h.blk.throughput.requests
    );
    assert_eq!(h.nvme.commands_latency_critical, dev.latency_critical);
    assert_eq!(h.nvme.commands_throughput, dev.throughput);
    // Every bio became a request or merged into one.
    for c in [&h.blk.latency_critical, &h.blk.throughput] {
        assert_eq!(c.bios, c.requests + c.merged_bios + c.same_lba_merges);
    }
    // Per core, the accounted categories add up to the simulated time.
    for core in &h.cores {
        let total: u64 = core.ns.iter().sum();
        assert_eq!(
            total,
            h.end.as_ns(),
            "core {} accounts {total} ns",
            core.core
        );
    }
    // Dirty pages written back = pages dirtied − pages still dirty (nothing under write-back
    // once the run drained).
    let pc = &h.pagecache;
    assert!(pc.writeback_waves > 0, "the mix must write back");
    assert_eq!(pc.writeback_pages, 0);
    let dirtied = pc.latency_critical.pages_dirtied + pc.throughput.pages_dirtied;
    let written = pc.latency_critical.pages_written_back + pc.throughput.pages_written_back;
    assert!(written > 0);
    assert_eq!(written, dirtied - pc.dirty_pages);
    assert!(pc.resident_pages <= pc.capacity_pages);
}

#[test]
fn new_idle_balance_moves_threads_and_keeps_the_conservation_laws() {
    let balanced = WRITEBACK_MIX.replace(
        "[device]",
        "[host.cpu]\nload_balance = \"new-idle\"\n[device]",
    );
    let r = run_system(&config(&balanced), &mut Silent).unwrap();
    let h = &r.host;
    let moved: u64 = h.cores.iter().map(|c| c.migrations_in).sum();
    assert!(
        moved > 0,
        "a co-run with blocking threads gives idle cores work"
    );
    let dev = &r.device.commands;
    assert_eq!(h.commands, dev.reads + dev.writes);
    for core in &h.cores {
        assert_eq!(
            core.ns.iter().sum::<u64>(),
            h.end.as_ns(),
            "core {}",
            core.core
        );
    }
    // Off (the default): nothing moves but at wake-up, and the count stays out of reports.
    let r = run_system(&config(WRITEBACK_MIX), &mut Silent).unwrap();
    assert!(r.host.cores.iter().all(|c| c.migrations_in == 0));
    let json = serde_json::to_string(&r.host.cores).unwrap();
    assert!(!json.contains("migrations_in"), "{json}");
}

#[test]
fn latency_critical_tail_is_worse_co_running_than_alone() {
    let s = summary(
        "seed = 1\nduration_ms = 3000\nalone = true\n[[process]]\nprofile = \"apache\"\n[[process]]\nprofile = \"pagerank\"\n",
    );
    let co = process(&s.run, "apache").response_time_ns.unwrap();
    let alone = s.alone.as_ref().unwrap();
    let al = process(alone, "apache").response_time_ns.unwrap();
    assert_eq!(
        alone.processes.len(),
        1,
        "the alone run has only the service"
    );
    assert!(co.p99 > al.p99, "p99 co-run {} vs alone {}", co.p99, al.p99);
    assert!(
        co.p99_9 > al.p99_9,
        "p99.9 co-run {} vs alone {}",
        co.p99_9,
        al.p99_9
    );
    assert!(co.mean > al.mean);
    // The I/O path itself also gets slower: the waiting thread's switch back costs more.
    assert!(s.run.breakdown_ns.context_switch > alone.breakdown_ns.context_switch);
}

#[test]
fn polling_occupies_the_core_and_removes_isr_and_switch_from_the_path() {
    let mk = |completion: &str| {
        summary(&format!(
            "seed = 5\nduration_ms = 1000\n[host.nvme]\ncompletion = \"{completion}\"\n[[process]]\nprofile = \"imageserver\"\n"
        ))
    };
    let irq = mk("interrupt");
    let polled = mk("polled");
    let (bi, bp) = (&irq.run.breakdown_ns, &polled.run.breakdown_ns);
    assert!(
        bi.irq > 0 && bi.context_switch > 0 && bi.poll == 0,
        "{bi:?}"
    );
    assert_eq!((bp.irq, bp.context_switch), (0, 0), "{bp:?}");
    assert!(bp.poll > 0);
    assert_eq!(irq.run.cpu.poll, 0.0);
    // The poller spins through the whole device time of every I/O: poll CPU time covers it.
    let device_ns = bp.requests as f64 * (bp.device_queue + bp.device_service) as f64;
    assert!(
        polled.run.cpu.poll * 1e9 >= device_ns,
        "poll {} s, device time {} s",
        polled.run.cpu.poll,
        device_ns / 1e9
    );
    assert!(polled.run.cpu.irq < irq.run.cpu.irq / 10.0);
    assert_eq!(polled.run.host.nvme.interrupts, 0);
    // And the service's I/O is faster.
    let li = process(&irq.run, "imageserver").io_latency_ns.mean;
    let lp = process(&polled.run, "imageserver").io_latency_ns.mean;
    assert!(lp < li, "polled I/O {lp} ns vs interrupt {li} ns");
}

#[test]
fn hybrid_polling_sleeps_first_then_polls() {
    let mk = |completion: &str| {
        summary(&format!(
            "seed = 5\nduration_ms = 1000\n[host.nvme]\ncompletion = \"{completion}\"\n[[process]]\nprofile = \"imageserver\"\n"
        ))
    };
    let polled = mk("polled");
    let hybrid = mk("hybrid");
    let nh = &hybrid.run.host.nvme;
    assert!(nh.hybrid_sleeps > 0 && nh.polled_completions > 0, "{nh:?}");
    assert_eq!(
        nh.interrupts, 0,
        "poll queues raise no MSI (timer interrupts wake the sleepers)"
    );
    assert!(hybrid.run.cpu.poll < polled.run.cpu.poll / 2.0);
    assert!(hybrid.run.cpu.interrupts > 0);
    assert_eq!(
        process(&hybrid.run, "imageserver").requests,
        process(&polled.run, "imageserver").requests
    );
}

#[test]
fn shallow_queues_exhaust_tags_and_everything_still_completes() {
    let dir = std::env::temp_dir().join(format!("ullstack-tags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mix.fio"),
        "[mix]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randrw\nrwmixread=70\niodepth=16\nnorandommap\nnumber_ios=4000\ntime_based\nruntime=10s\n",
    )
    .unwrap();
    for (scheduler, nr_requests) in [
        ("none", 0),
        ("none", 12),
        ("mq-deadline", 12),
        ("kyber", 12),
    ] {
        let text = format!(
            "seed = 1\nduration_ms = 1000\n[host]\npreset = \"x86-4\"\n[host.nvme]\nqueue_depth = 4\n[host.blk]\nscheduler = \"{scheduler}\"\nnr_requests = {nr_requests}\nkyber_write_depth = 1\n[[process]]\nfio = \"mix.fio\"\n"
        );
        let cfg = SystemConfig::parse(&text, "tags.toml", &dir).unwrap();
        let s = run(&cfg, &mut Silent).unwrap();
        let j = &s.run.jobs[0];
        assert_eq!(j.read.ios + j.write.ios, 4000, "{scheduler}/{nr_requests}");
        let b = &s.run.host.blk;
        if nr_requests == 0 {
            assert!(
                b.allocation_waits > 0,
                "3 requests for 16 in flight: submitters wait"
            );
        } else {
            assert!(
                b.deferred_dispatches > 0,
                "{scheduler}: requests wait for driver tags"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn crossing_dirty_ratio_blocks_the_writer() {
    // A 12 MiB page cache: with dirty_ratio 5 % (153 pages) every 145-page ungzip write crosses
    // the limit; with 90 % the background flusher keeps dirty pages well below it (its passes
    // start at 50 % and put at most a 1,024-page chunk under write-back: 60 % would leave a
    // margin of 307 pages, less than one chunk). Four writer threads: each pass writes
    // everything dirty in so small a cache, which one writer alone seldom outruns.
    let mk = |ratio: u32, bg: u32| {
        summary(&format!(
            "seed = 2\nduration_ms = 500\n[host.pagecache]\nmemory_bytes = 16777216\nreserved_bytes = 4194304\ndirty_ratio_pct = {ratio}\ndirty_background_ratio_pct = {bg}\n[[process]]\nprofile = \"ungzip\"\nthreads = 4\n"
        ))
    };
    let low = mk(5, 3);
    let high = mk(90, 50);
    let (pl, ph) = (&low.run.host.pagecache, &high.run.host.pagecache);
    assert!(pl.throughput.throttled_writes > 0, "{pl:?}");
    assert_eq!(ph.throughput.throttled_writes, 0, "{ph:?}");
    let (wl, wh) = (process(&low.run, "ungzip"), process(&high.run, "ungzip"));
    assert!(
        wl.io_latency_ns.mean > 2 * wh.io_latency_ns.mean,
        "blocked writers wait for write-back: {} vs {}",
        wl.io_latency_ns.mean,
        wh.io_latency_ns.mean
    );
    assert!(wl.instructions_per_sec.unwrap() < wh.instructions_per_sec.unwrap());
    // The run stops at its duration (plus draining), not at the next periodic flush.
    assert!(
        low.run.sim.simulated_ns < 600_000_000,
        "{}",
        low.run.sim.simulated_ns
    );
}

#[test]
fn fsync_writes_back_and_blocks_the_caller() {
    let mk = |every: u32| {
        summary(&format!(
            "seed = 8\nduration_ms = 500\n[[process]]\nprofile = \"db-update\"\nfsync_every_writes = {every}\n"
        ))
    };
    let without = mk(0);
    let with = mk(1);
    let (pw, pn) = (&with.run.host.pagecache, &without.run.host.pagecache);
    assert!(pw.fsyncs > 0 && pn.fsyncs == 0);
    // Every write was followed by its write-back: nothing the service dirtied stays dirty.
    assert_eq!(pw.dirty_pages, 0);
    assert_eq!(
        pw.latency_critical.pages_written_back,
        pw.latency_critical.pages_dirtied
    );
    assert!(pn.latency_critical.pages_written_back < pn.latency_critical.pages_dirtied);
    let (rw, rn) = (
        process(&with.run, "db-update").response_time_ns.unwrap(),
        process(&without.run, "db-update").response_time_ns.unwrap(),
    );
    assert!(
        rw.mean > rn.mean,
        "fsync puts the write-back on the request's path"
    );
}

#[test]
fn merging_reduces_nvme_commands_for_a_sequential_stream() {
    let dir = std::env::temp_dir().join(format!("ullstack-merge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("seqwrite.fio"),
        "[seq]\nrw=write\nbs=4k\nsize=96m\nioengine=psync\ndirect=0\n",
    )
    .unwrap();
    let mk = |merges: &str| {
        let text = format!(
            "seed = 4\nduration_ms = 2000\n[host]\npreset = \"arm8\"\n[host.blk]\nmerges = \"{merges}\"\n[host.pagecache]\nmemory_bytes = 536870912\nreserved_bytes = 134217728\n[[process]]\nfio = \"seqwrite.fio\"\n"
        );
        let cfg = SystemConfig::parse(&text, "merge.toml", &dir).unwrap();
        run(&cfg, &mut Silent).unwrap()
    };
    let on = mk("adjacent");
    let off = mk("off");
    let (bon, boff) = (&on.run.host.blk.throughput, &off.run.host.blk.throughput);
    assert!(bon.merged_bios > 0 && boff.merged_bios == 0);
    assert!(bon.write_bytes > 32 << 20, "write-back happened: {bon:?}");
    assert_eq!(bon.write_bytes, boff.write_bytes, "same pages written back");
    assert!(
        bon.requests * 8 < boff.requests,
        "merged {} commands vs unmerged {}",
        bon.requests,
        boff.requests
    );
    assert_eq!(on.run.device.commands.writes, bon.requests);
    assert_eq!(
        on.run.jobs[0].write.ios,
        96 << 8,
        "every 4 KiB write of the job completed"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_class_travels_to_the_device_through_write_back() {
    let s = summary(
        "seed = 6\nduration_ms = 800\n[host]\npreset = \"arm8\"\nattr = \"on\"\n[host.pagecache]\nmemory_bytes = 536870912\nreserved_bytes = 134217728\n[[process]]\nprofile = \"apache-upload\"\n[[process]]\nprofile = \"ungzip\"\nthreads = 2\n",
    );
    let h = &s.run.host;
    let pc = &h.pagecache.latency_critical;
    assert!(pc.pages_dirtied > 0 && pc.pages_written_back > 0, "{pc:?}");
    // The flusher (a kernel thread) wrote the service's pages as latency-critical commands.
    assert!(h.blk.latency_critical.write_bytes >= pc.pages_written_back * 4096);
    assert_eq!(
        s.run.device.commands.latency_critical,
        h.nvme.commands_latency_critical
    );
    assert!(s.run.device.commands.latency_critical > 0);
    assert_eq!(
        s.run.device.commands.throughput, h.blk.throughput.requests,
        "throughput commands are the throughput class's requests"
    );
    let p = process(&s.run, "apache-upload");
    assert_eq!(p.class, IoClass::LatencyCritical);
    // Without `attr` the kernel knows no class: the device sees every command unclassified.
    let off = summary(
        "seed = 6\nduration_ms = 800\n[host]\npreset = \"arm8\"\n[host.pagecache]\nmemory_bytes = 536870912\nreserved_bytes = 134217728\n[[process]]\nprofile = \"apache-upload\"\n[[process]]\nprofile = \"ungzip\"\nthreads = 2\n",
    );
    let d = &off.run.device.commands;
    assert_eq!(d.latency_critical, 0);
    assert_eq!(d.throughput, d.reads + d.writes);
    assert!(
        off.run.host.nvme.commands_latency_critical > 0,
        "the reports still label them"
    );
}

fn strip_wall(s: &SystemSummary) -> String {
    without_wall_clock(&s.to_json())
}

#[test]
fn same_config_and_seed_give_identical_summaries() {
    let text = "seed = 9\nduration_ms = 700\nalone = true\n[[process]]\nprofile = \"apache\"\n[[process]]\nprofile = \"gzip\"\n";
    let a = strip_wall(&summary(text));
    let b = strip_wall(&summary(text));
    assert_eq!(a, b);
    let c = strip_wall(&summary(&text.replace("seed = 9", "seed = 10")));
    assert_ne!(a, c, "a different seed changes something");
}

#[test]
fn fio_through_the_host_stack() {
    let dir = std::env::temp_dir().join(format!("ullstack-fio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("qd1.fio"),
        "[global]\nioengine=pvsync2\ndirect=1\nbs=4k\nrw=randread\nnorandommap\nnumber_ios=3000\ntime_based\nruntime=10s\n[irq]\n[polled]\nstonewall\nhipri\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("irq.fio"),
        "[global]\nioengine=pvsync2\ndirect=1\nbs=4k\nrw=randread\nnorandommap\nnumber_ios=3000\ntime_based\nruntime=10s\n[irq]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("polled.fio"),
        "[global]\nioengine=pvsync2\ndirect=1\nbs=4k\nrw=randread\nnorandommap\nnumber_ios=3000\ntime_based\nruntime=10s\n[polled]\nhipri\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("aio.fio"),
        "[aio]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randread\niodepth=16\nnorandommap\nnumber_ios=20000\ntime_based\nruntime=10s\n",
    )
    .unwrap();
    let run_file = |body: &str| -> SystemSummary {
        let text = format!("seed = 1\nduration_ms = 1000\n[host]\npreset = \"x86-4\"\n{body}");
        let cfg = SystemConfig::parse(&text, "fio.toml", &dir).unwrap();
        run(&cfg, &mut Silent).unwrap()
    };
    // Stonewall groups are refused with a reason.
    let text = "seed = 1\n[[process]]\nfio = \"qd1.fio\"\n";
    let cfg = SystemConfig::parse(text, "fio.toml", &dir).unwrap();
    let e = run(&cfg, &mut Silent).err().unwrap().to_string();
    assert!(e.contains("stonewall"), "{e}");
    let irq = run_file("[[process]]\nfio = \"irq.fio\"\n");
    let polled = run_file("[[process]]\nfio = \"polled.fio\"\n");
    let (ri, rp) = (&irq.run.jobs[0].read, &polled.run.jobs[0].read);
    assert_eq!((ri.ios, rp.ios), (3000, 3000));
    // zssd QD1 4 KiB random read from a 4 GHz host: device.md's 12.6-16 µs (interrupt) /
    // 13.6 µs (polled) class of numbers; the full host model is allowed some slack.
    assert!(
        (10_000..25_000).contains(&ri.latency_ns.mean),
        "interrupt QD1 mean {}",
        ri.latency_ns.mean
    );
    assert!(rp.latency_ns.mean < ri.latency_ns.mean);
    assert!(polled.run.cpu.poll > 0.0);
    // fio jobs report their threads' CPU: no user code in the model, kernel work in thread
    // context; a polling thread spins in its own context, so it shows far more.
    let (ci, cp) = (irq.run.jobs[0].cpu, polled.run.jobs[0].cpu);
    assert_eq!((ci.user_ns, cp.user_ns), (0, 0));
    assert!(
        ci.kernel_ns > 0 && cp.kernel_ns > 2 * ci.kernel_ns,
        "{ci:?} vs {cp:?}"
    );
    assert_eq!(
        process(&irq.run, "irq").cpu,
        ci,
        "one job: the process's CPU is the job's"
    );
    let aio = run_file("[[process]]\nfio = \"aio.fio\"\n");
    let ra = &aio.run.jobs[0].read;
    assert_eq!(ra.ios, 20000);
    assert!(
        ra.iops > 2.0 * ri.iops,
        "QD16 {} IOPS vs QD1 {}",
        ra.iops,
        ri.iops
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn traces_replay_open_loop_and_as_fast_as_possible() {
    let dir = std::env::temp_dir().join(format!("ullstack-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // 2000 4 KiB I/Os, one every 20 µs (50 K IOPS), 1 in 4 a write.
    let mut trace = String::from("# time_ns,op,offset_bytes,bytes\n");
    for i in 0..2000u64 {
        let op = if i % 4 == 3 { "W" } else { "R" };
        trace.push_str(&format!(
            "{},{op},{},4096\n",
            i * 20_000,
            (i * 7919 % 100_000) * 4096
        ));
    }
    std::fs::write(dir.join("t.csv"), trace).unwrap();
    let mk = |keys: &str| {
        let text = format!(
            "seed = 1\nduration_ms = 1000\n[host]\npreset = \"x86-4\"\n[[process]]\ntrace = \"t.csv\"\n{keys}\n"
        );
        run(
            &SystemConfig::parse(&text, "trace.toml", &dir).unwrap(),
            &mut Silent,
        )
        .unwrap()
    };
    let span = |j: &sim::report::JobResult| j.read.ios as f64 / j.read.iops;
    let open = mk("trace_mode = \"open-loop\"");
    let afap = mk("trace_mode = \"afap\"");
    let closed = mk("trace_qd = 16");
    let (o, a, c) = (&open.run.jobs[0], &afap.run.jobs[0], &closed.run.jobs[0]);
    assert_eq!(
        (
            o.read.ios + o.write.ios,
            a.read.ios + a.write.ios,
            c.read.ios + c.write.ios
        ),
        (2000, 2000, 2000)
    );
    // Closed loop at QD 16 overlaps what AFAP (QD 1) waits for.
    assert!(
        span(c) < 0.5 * span(a),
        "QD16 span {} vs AFAP {}",
        span(c),
        span(a)
    );
    // The trace is read again by each run: the same config gives the same summary.
    assert_eq!(
        without_wall_clock(&closed.to_json()),
        without_wall_clock(&mk("trace_mode = \"closed-loop\"\ntrace_qd = 16").to_json())
    );
    assert_eq!(o.write.ios, 500);
    // Open loop keeps the trace's pace: 2000 I/Os over 40 ms; AFAP runs them back to back.
    assert!(
        (0.039..0.041).contains(&span(o)),
        "open-loop span {}",
        span(o)
    );
    assert!(span(a) < 0.035, "afap span {}", span(a));
    assert_eq!(open.run.processes[0].kind, host::ProcessKind::Trace);
    // summary.json names the trace as its source, not as a profile.
    let json: serde_json::Value = serde_json::from_str(&open.to_json()).unwrap();
    let p = &json["processes"][0];
    assert_eq!(p["kind"], "trace");
    assert!(p.get("profile").is_none(), "{p}");
    assert!(p["source"].as_str().unwrap().ends_with("t.csv"), "{p}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_bad_trace_line_is_a_config_error_first_and_a_run_error_later() {
    let dir = std::env::temp_dir().join(format!("ullstack-trace-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = |trace: &str, extra: &str| {
        std::fs::write(dir.join("t.csv"), trace).unwrap();
        let text = format!(
            "seed = 1\nduration_ms = 100\n[host]\npreset = \"x86-4\"\n[[process]]\ntrace = \"t.csv\"\ntrace_qd = 4\n{extra}"
        );
        SystemConfig::parse(&text, "bad.toml", &dir)
    };
    // The first I/O is read when the config is: a bad first line, or none in the window.
    let e = cfg("0,X,0,4096\n", "trace_format = \"csv\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.csv:1: op `X`"), "{e}");
    let e = cfg("0,R,0,4096\n", "trace_device = 3\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no reads or writes to replay"), "{e}");
    // A bad line further on is met by the run, which fails naming it...
    let mut trace = String::new();
    for i in 0..500 {
        trace.push_str(&format!("{i},R,{},4096\n", i * 4096));
    }
    trace.push_str("500,R,0,4O96\n");
    let c = cfg(&trace, "").unwrap();
    let e = run_system(&c, &mut Silent).err().unwrap().to_string();
    assert!(
        e.contains("process `t`") && e.contains("t.csv:501: bytes `4O96`"),
        "{e}"
    );
    // ...unless bad lines are skipped.
    let c = cfg(&trace, "skip_bad_lines = true\n").unwrap();
    let r = run_system(&c, &mut Silent).unwrap();
    assert_eq!(r.host.processes[0].ios, 500);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_system_configs_are_clear_errors() {
    let e = config_error("[[process]]\nprofile = \"pagerang\"\n");
    assert!(
        e.contains("pagerang") && e.contains("known") && e.contains("pagerank"),
        "{e}"
    );
    let cfg = config("[[process]]\nprofile = \"apache\"\nfile_bytes = 900000000000000\n");
    let e = run_system(&cfg, &mut Silent).err().unwrap().to_string();
    assert!(
        e.contains("apache") && e.contains("900000000000000") && e.contains("device holds"),
        "{e}"
    );
    let e = config_error("[[process]]\nfio = \"/nonexistent/x.fio\"\n");
    assert!(e.contains("/nonexistent/x.fio"), "{e}");
}

mod seeds {
    use super::*;
    use proptest::prelude::*;

    const ONLINE: [&str; 5] = [
        "apache",
        "imageserver",
        "apache-update",
        "db-update",
        "imageserver-upload",
    ];
    const OFFLINE: [&str; 5] = ["pagerank", "ungzip", "wc", "gzip", "bfs"];
    const COMPLETION: [&str; 3] = ["interrupt", "polled", "hybrid"];
    const SCHEDULER: [&str; 3] = ["none", "mq-deadline", "kyber"];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
        /// Any short mix, any seed: the run drains, every core's time adds up, dirty pages are
        /// conserved, and every command the host issued completed in the device.
        #[test]
        fn short_mixes_keep_the_invariants(
            seed in 0u64..1_000_000,
            online in 0usize..5,
            offline in 0usize..5,
            completion in 0usize..3,
            scheduler in 0usize..3,
            fsync in 0u32..3,
        ) {
            let text = format!(
                "seed = {seed}\nduration_ms = 150\n[host]\npreset = \"arm8\"\n[host.pagecache]\nmemory_bytes = 268435456\nreserved_bytes = 67108864\n\
                 [host.nvme]\ncompletion = \"{}\"\n[host.blk]\nscheduler = \"{}\"\n\
                 [[process]]\nprofile = \"{}\"\nfsync_every_writes = {fsync}\nrequests_per_sec = 2000\n[[process]]\nprofile = \"{}\"\nthreads = 3\n",
                COMPLETION[completion], SCHEDULER[scheduler], ONLINE[online], OFFLINE[offline]
            );
            let cfg = config(&text);
            let r = run_system(&cfg, &mut Silent).map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
            let h = &r.host;
            prop_assert_eq!(h.commands, r.device.commands.reads + r.device.commands.writes);
            for core in &h.cores {
                prop_assert_eq!(core.ns.iter().sum::<u64>(), h.end.as_ns());
            }
            let pc = &h.pagecache;
            let dirtied = pc.latency_critical.pages_dirtied + pc.throughput.pages_dirtied;
            let written = pc.latency_critical.pages_written_back + pc.throughput.pages_written_back;
            prop_assert_eq!(written + pc.dirty_pages, dirtied);
            let online = &h.processes[0];
            prop_assert!(online.requests > 0);
        }
    }
}

/// Every system config in `examples/system/` loads and runs (cut to 100 ms), and the written-out
/// default is the embedded one.
#[test]
fn every_system_example_loads_and_runs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/system");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/system exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "expected the system examples, found {files:?}"
    );
    for path in &files {
        let mut cfg = SystemConfig::load(path).unwrap_or_else(|e| panic!("{e}"));
        cfg.duration = engine::SimTime::from_ms(100);
        let s = run(&cfg, &mut Silent).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(s.run.sim.ios > 0, "{}: no I/O in 100 ms", path.display());
    }
    let written = SystemConfig::load(&dir.join("default.toml")).unwrap();
    let embedded = SystemConfig::embedded_default();
    assert_eq!(written.seed, embedded.seed);
    assert_eq!(written.duration, embedded.duration);
    assert_eq!(written.alone, embedded.alone);
    assert_eq!(
        format!("{:?}", written.host),
        format!("{:?}", embedded.host)
    );
    assert_eq!(
        format!("{:?}", written.device),
        format!("{:?}", embedded.device)
    );
    assert_eq!(
        format!("{:?}", written.processes),
        format!("{:?}", embedded.processes)
    );
}

/// `ramp_time` in a fio job inside a full-system run behaves as in fio and in device-level
/// runs: the ramp's I/Os are not recorded and `runtime` and `number_ios` count after it. A job
/// paced at 10 000 IOPS makes the counts exact.
#[test]
fn fio_ramp_time_in_a_system_run_is_lead_in() {
    let job = "[paced]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnorandommap\nrate_iops=10000\ntime_based\nramp_time=10ms\nruntime=20ms\n";
    let dir = scratch_dir("fio-ramp", &[("paced.fio", job)]);
    let s = run_in(
        &dir,
        "seed = 1\nduration_ms = 100\n[host]\npreset = \"x86-4\"\n[[process]]\nfio = \"paced.fio\"\n",
    );
    let r = &s.run.jobs[0].read;
    assert_eq!(r.ios, 200, "20 ms after a 10 ms ramp at 10 000 IOPS");
    assert!((9_900.0..10_100.0).contains(&r.iops), "IOPS {}", r.iops);
    std::fs::remove_dir_all(&dir).ok();
}

/// Writes `files` (name, text) into a fresh temporary folder for one test.
fn scratch_dir(test: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ullstack-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

fn run_in(dir: &Path, text: &str) -> SystemSummary {
    let cfg = SystemConfig::parse(text, "test.toml", dir).unwrap();
    run(&cfg, &mut Silent).unwrap()
}

#[test]
fn kyber_lets_reads_overtake_queued_writes() {
    // One driver tag per queue (queue_depth 2) and 7 requests: a QD7 random read/write job
    // keeps ~6 requests waiting in its hardware queue. FIFO makes each read wait behind the
    // writes queued before it; kyber dispatches queued reads first.
    let dir = scratch_dir(
        "kyber",
        &[(
            "mix.fio",
            "[mix]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randrw\nrwmixread=50\niodepth=7\nnorandommap\nnumber_ios=4000\n",
        )],
    );
    let mk = |scheduler: &str| {
        run_in(
            &dir,
            &format!(
                "seed = 1\nduration_ms = 1000\n[host]\npreset = \"x86-4\"\n[host.nvme]\nqueue_depth = 2\n[host.blk]\nscheduler = \"{scheduler}\"\nnr_requests = 7\n[[process]]\nfio = \"mix.fio\"\n"
            ),
        )
    };
    let fifo = mk("none");
    let kyber = mk("kyber");
    let (f, k) = (&fifo.run.jobs[0], &kyber.run.jobs[0]);
    assert_eq!(f.read.ios + f.write.ios, 4000);
    assert_eq!((k.read.ios, k.write.ios), (f.read.ios, f.write.ios));
    assert!(
        fifo.run.host.blk.deferred_dispatches > 1000,
        "requests wait in the queue"
    );
    assert!(
        2 * k.read.latency_ns.mean < f.read.latency_ns.mean,
        "read mean: kyber {} ns vs none {} ns",
        k.read.latency_ns.mean,
        f.read.latency_ns.mean
    );
    assert!(k.read.latency_ns.p99 < f.read.latency_ns.p99);
    // The writes pay for it.
    assert!(
        k.write.latency_ns.mean > f.write.latency_ns.mean,
        "write mean: kyber {} ns vs none {} ns",
        k.write.latency_ns.mean,
        f.write.latency_ns.mean
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn same_lba_merging_turns_repeated_writes_into_fewer_commands() {
    // QD7 direct writes all to the file's first 4 KiB, one driver tag: while one write is in
    // the device the next ones queue, and with same-LBA merging they ride along with the
    // queued one instead of each becoming a command.
    let dir = scratch_dir(
        "samelba",
        &[(
            "hot.fio",
            "[hot]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randwrite\nsize=4k\niodepth=7\nnorandommap\nnumber_ios=2000\ntime_based\nruntime=10s\n",
        )],
    );
    let mk = |merges: &str| {
        run_in(
            &dir,
            &format!(
                "seed = 1\nduration_ms = 1000\n[host]\npreset = \"x86-4\"\n[host.nvme]\nqueue_depth = 2\n[host.blk]\nmerges = \"{merges}\"\nnr_requests = 7\n[[process]]\nfio = \"hot.fio\"\n"
            ),
        )
    };
    let off = mk("adjacent");
    let on = mk("adjacent-and-same-lba");
    let (boff, bon) = (&off.run.host.blk.throughput, &on.run.host.blk.throughput);
    for s in [&off, &on] {
        assert_eq!(s.run.jobs[0].write.ios, 2000, "every write completed");
        let b = &s.run.host.blk.throughput;
        assert_eq!(b.bios, 2000);
        assert_eq!(s.run.device.commands.writes, b.requests);
    }
    assert_eq!((boff.requests, boff.same_lba_merges), (2000, 0));
    assert_eq!(bon.requests + bon.same_lba_merges, 2000);
    assert!(
        2 * bon.requests < boff.requests,
        "same-LBA merging: {} commands vs {}",
        bon.requests,
        boff.requests
    );
    assert_eq!(
        bon.write_bytes,
        bon.requests * 4096,
        "ride-alongs add no bytes"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn direct_io_bypasses_the_page_cache() {
    // A sequential reader and a sequential writer, the same jobs with direct=1 and direct=0.
    let job = |rw: &str, direct: u32| {
        format!("[{rw}]\nioengine=psync\ndirect={direct}\nbs=16k\nrw={rw}\nnumber_ios=300\n")
    };
    let mk = |direct: u32| {
        let (r, w) = (job("read", direct), job("write", direct));
        let dir = scratch_dir(&format!("direct{direct}"), &[("r.fio", &r), ("w.fio", &w)]);
        let s = run_in(
            &dir,
            "seed = 1\nduration_ms = 200\n[host]\npreset = \"x86-4\"\n[[process]]\nfio = \"r.fio\"\n[[process]]\nfio = \"w.fio\"\n",
        );
        std::fs::remove_dir_all(&dir).ok();
        s
    };
    let direct = mk(1);
    let buffered = mk(0);
    for s in [&direct, &buffered] {
        let ios: Vec<u64> = s
            .run
            .jobs
            .iter()
            .map(|j| j.read.ios + j.write.ios)
            .collect();
        assert_eq!(ios, vec![300, 300]);
    }
    let (pd, pb) = (&direct.run.host.pagecache, &buffered.run.host.pagecache);
    // Direct: the cache is never touched.
    let t = &pd.throughput;
    assert_eq!(
        (
            t.read_hits,
            t.read_misses,
            t.readahead_pages,
            t.pages_dirtied
        ),
        (0, 0, 0, 0),
        "{pd:?}"
    );
    assert_eq!((pd.resident_pages, pd.dirty_pages), (0, 0));
    assert_eq!(direct.run.cpu.pagecache, 0.0);
    // Every byte went to the device as the job issued it.
    let bd = &direct.run.host.blk.throughput;
    assert_eq!((bd.read_bytes, bd.write_bytes), (300 << 14, 300 << 14));
    // Buffered: misses with read-ahead for the reader, dirty pages for the writer (which stay
    // in the cache: 1200 pages are far below the background threshold).
    let t = &pb.throughput;
    assert_eq!(t.read_hits + t.read_misses, 1200, "{pb:?}");
    assert!(t.read_hits > 0 && t.readahead_pages > 0, "{pb:?}");
    assert_eq!((t.pages_dirtied, pb.dirty_pages), (1200, 1200));
    assert!(pb.resident_pages >= 2400);
    assert!(buffered.run.cpu.pagecache > 0.0);
    assert_eq!(buffered.run.host.blk.throughput.write_bytes, 0);
}

#[test]
fn merge_search_cpu_is_accounted_in_blk_time() {
    // Random 4 KiB direct writes with requests waiting in the hardware queue (one driver tag,
    // 7 in flight): each bio's merge search compares it with the queued requests and
    // finds nothing to merge with, yet costs `merge_check_ns` per comparison. Blk CPU time is
    // bio submission + merge search + dispatch, so the search is what remains after taking
    // out the other two (costs constant, `cost_cv_pct = 0`, so the remainder is exact).
    let dir = scratch_dir(
        "mergecpu",
        &[(
            "rw.fio",
            "[rw]\nioengine=libaio\ndirect=1\nbs=4k\nrw=randwrite\niodepth=7\nnorandommap\nnumber_ios=3000\n",
        )],
    );
    let mk = |merges: &str, scan: u32| {
        let text = format!(
            "seed = 1\nduration_ms = 1000\n[host]\npreset = \"x86-4\"\n[host.nvme]\nqueue_depth = 2\n[host.blk]\nmerges = \"{merges}\"\nmerge_scan_requests = {scan}\nnr_requests = 7\n[host.jitter]\ncost_cv_pct = 0\n[[process]]\nfio = \"rw.fio\"\n"
        );
        let cfg = SystemConfig::parse(&text, "test.toml", &dir).unwrap();
        let s = run(&cfg, &mut Silent).unwrap();
        let h = &s.run.host;
        let blk_ns: u64 = h.cores.iter().map(|c| c.ns[host::Cat::Blk.index()]).sum();
        let (b, c) = (&h.blk, &cfg.host);
        let t = &b.throughput;
        assert_eq!((t.bios, t.merged_bios), (3000, 0), "no merge happens");
        // Every request is dispatched once, by its submitter or by kblockd, for `dispatch_ns`
        // of blk time (the driver's part is nvme time).
        let submits = t.bios + b.allocation_waits;
        let search_ns = blk_ns - submits * c.blk.bio_submit_ns - t.requests * c.blk.dispatch_ns;
        assert_eq!(search_ns % c.blk.merge_check_ns, 0);
        search_ns / c.blk.merge_check_ns
    };
    // Comparisons per bio: none when merging is off, and more with a longer scan.
    let off = mk("off", 8);
    let short = mk("adjacent", 1);
    let long = mk("adjacent", 8);
    assert_eq!(off, 0);
    assert!(short > 0 && short <= 3000, "scan 1: {short} comparisons");
    assert!(
        long > 3 * short && long <= 3000 * 16,
        "scan 8: {long} comparisons, scan 1: {short}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Host jitter (`[host.jitter]`) on everything at once — cost variance, a 1000 Hz tick, the
/// shared poll lock on poll queues two cores share — in a co-run with polled and interrupt
/// I/O: the same seed gives byte-identical summaries, and the disturbances change them.
#[test]
fn host_jitter_on_same_seed_gives_identical_summaries() {
    let base = "seed = 4\nduration_ms = 300\n[host]\npreset = \"arm8\"\n[host.nvme]\n\
                completion = \"polled\"\npoll_queues = 2\n[[process]]\nprofile = \"apache\"\n\
                [[process]]\nprofile = \"ungzip\"\nthreads = 4\n";
    let jitter = "[host.jitter]\ncost_cv_pct = 20\ntick_hz = 1000\npoll_lock = \"shared\"\n";
    // `[host.jitter]` must come before the process tables.
    let on = base.replacen("[[process]]", &format!("{jitter}[[process]]"), 1);
    let a = strip_wall(&summary(&on));
    let b = strip_wall(&summary(&on));
    assert_eq!(a, b);
    let off = base.replacen(
        "[[process]]",
        "[host.jitter]\ncost_cv_pct = 0\ntick_hz = 0\n[[process]]",
        1,
    );
    assert_ne!(a, strip_wall(&summary(&off)), "the disturbances act");
}

/// A polled fio job spinning on a core it shares with a CPU-bound thread is preempted when its
/// slice ends (CFS): its I/Os that span the other thread's slice wait milliseconds. Alone on
/// the core, no I/O waits more than a few microseconds beyond the device.
#[test]
fn a_spinning_poller_is_preempted_by_a_cpu_hog_on_its_core() {
    let dir = scratch_dir(
        "poll-preempt",
        &[(
            "spin.fio",
            "[p]\nioengine=pvsync2\nhipri\ndirect=1\nbs=4k\nrw=randread\nnorandommap\n\
             time_based\nruntime=1s\n",
        )],
    );
    let host = "seed = 1\nduration_ms = 1000\n[host]\npreset = \"arm8\"\n[host.cpu]\ncores = 1\n\
                [[process]]\nfio = \"spin.fio\"\n";
    let alone = run_in(&dir, host);
    let co = run_in(
        &dir,
        &format!("{host}[[process]]\nprofile = \"pagerank\"\nthreads = 1\n"),
    );
    let (a, c) = (&alone.run.jobs[0].read, &co.run.jobs[0].read);
    assert!(a.latency_ns.max < 50_000, "alone: {:?}", a.latency_ns);
    // Costs are drawn per operation and the hog's switches draw from the same streams, so
    // the two runs' I/Os are not the same draws: their p99s agree within a microsecond, where
    // an I/O that waits for the hog waits milliseconds.
    assert!(
        a.latency_ns.p99.abs_diff(c.latency_ns.p99) < 1_000,
        "most I/Os never meet the hog: p99 {} alone, {} beside it",
        a.latency_ns.p99,
        c.latency_ns.p99
    );
    assert!(
        c.latency_ns.max > 1_000_000,
        "an I/O spanning the hog's slice waits for it: {:?}",
        c.latency_ns
    );
    assert!(co.run.cpu.context_switches > 100);
    std::fs::remove_dir_all(&dir).ok();
}

/// `start_ms` delays a process by exactly that: a fio job alone on the host makes its first
/// I/O `start_ms` later and otherwise runs the same (same I/O count and latencies); an online
/// service's first I/O also comes later; a start at or after the run's end is an error naming
/// the process.
#[test]
fn start_ms_delays_a_process_by_exactly_that() {
    let job = "[qd1]\nioengine=psync\ndirect=1\nbs=4k\nrw=randread\nnorandommap\nnumber_ios=500\n";
    let dir = scratch_dir("start-ms", &[("qd1.fio", job)]);
    let with_start = |start: &str| {
        run_in(
            &dir,
            // The timer tick fires at fixed instants of the run, so a process that starts 7 ms
            // later meets it at other points of its I/Os: off here, to compare like with like.
            &format!("seed = 1\nduration_ms = 100\n[host]\npreset = \"x86-4\"\n[host.jitter]\ntick_hz = 0\n[[process]]\nfio = \"qd1.fio\"\n{start}"),
        )
    };
    let a = with_start("");
    let b = with_start("start_ms = 7\n");
    let (pa, pb) = (process(&a.run, "qd1"), process(&b.run, "qd1"));
    let first_a = pa.first_io_ns.expect("the job made I/Os");
    let first_b = pb.first_io_ns.expect("the job made I/Os");
    assert_eq!(
        first_b - first_a,
        7_000_000,
        "first I/O shifted by start_ms"
    );
    assert_eq!(pb.start_ns, 7_000_000);
    assert_eq!(pa.ios, pb.ios);
    assert_eq!(pa.io_latency_ns, pb.io_latency_ns, "the same run, later");
    // An online service that starts later makes its first I/O exactly that much later (its
    // client's first request is the start plus the same first gap).
    let svc = |start: &str| {
        let s = summary(&format!(
            "seed = 2\nduration_ms = 200\n[host]\npreset = \"arm8\"\n[host.jitter]\ntick_hz = 0\n\
             [[process]]\nprofile = \"apache\"\n{start}"
        ));
        process(&s.run, "apache").first_io_ns.expect("apache reads")
    };
    assert_eq!(svc("start_ms = 50\n") - svc(""), 50_000_000);
    // A start at or past the end is refused, naming the process.
    let e = config_error(
        "duration_ms = 100\n[[process]]\nname = \"late\"\nprofile = \"apache\"\nstart_ms = 100\n",
    );
    assert!(e.contains("late") && e.contains("start_ms = 100"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The FlashShare host switches are keys of the system file's `[host]` tables, and each takes
/// effect in a full-system co-run: with the attribute, bypass, latency-critical SQs and
/// selective completion, apache's requests reach the device classified, skip the hardware
/// queue, and are all polled (no interrupt); with DedCore one core of eight only polls.
#[test]
fn flashshare_host_switches_work_from_the_system_file() {
    let base = "seed = 1\nduration_ms = 100\n[host]\npreset = \"arm8\"\nattr = \"on\"\n\
        [host.blk]\nbypass_lc = \"on\"\n[host.nvme]\nlc_queue = \"on\"\ncompletion = \"selective\"\n";
    let procs = "[[process]]\nprofile = \"apache\"\n[[process]]\nprofile = \"pagerank\"\n";
    let r = run_system(&config(&format!("{base}{procs}")), &mut Silent).unwrap();
    let h = &r.host;
    let lc = &h.breakdown[IoClass::LatencyCritical.index()];
    assert!(lc.requests > 0);
    assert_eq!(r.device.commands.latency_critical, lc.requests);
    assert_eq!(h.blk.bypassed, lc.requests);
    assert_eq!((lc.hardware_queue, lc.irq), (0, 0), "{lc:?}");
    assert_eq!(h.nvme.polled_completions, lc.requests);
    let ded = run_system(
        &config(&format!("{base}dedcore = \"on\"\n{procs}")),
        &mut Silent,
    )
    .unwrap();
    let poll = host::Cat::Poll as usize;
    let last = &ded.host.cores[7];
    assert!(
        last.ns[poll] * 10 > ded.host.end.as_ns() * 9,
        "the last core polls: {last:?}"
    );
    let ded_lc = &ded.host.breakdown[IoClass::LatencyCritical.index()];
    assert_eq!(ded.host.nvme.polled_completions, ded_lc.requests);
    // The queue accelerator on top: no thread polls, the driver's time is the register writes.
    let xler = run_system(
        &config(&format!("{base}accelerator = \"on\"\n{procs}")),
        &mut Silent,
    )
    .unwrap();
    let x_lc = &xler.host.breakdown[IoClass::LatencyCritical.index()];
    assert!(x_lc.requests > 0);
    // `accel_register_ns` (200 on arm8), drawn per request (cv 10 %): the mean within 5 %.
    assert!((190..=210).contains(&x_lc.driver), "{x_lc:?}");
    assert_eq!(x_lc.poll, 0, "{x_lc:?}");
    assert_eq!(xler.host.nvme.polled_completions, 0);
    // A mechanism without the attribute is refused, naming the key.
    let e = config_error(
        "[host]\npreset = \"arm8\"\n[host.blk]\nbypass_lc = \"on\"\n[[process]]\nprofile = \"apache\"\n",
    );
    assert!(e.contains("blk.bypass_lc") && e.contains("attr"), "{e}");
}
