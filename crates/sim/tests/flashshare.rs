//! FlashShare's questions asked of full-system runs: where the vanilla stack's latency goes,
//! apache's published I/O share, strict-priority arbitration with its drain rule, and that
//! each host switch changes what it should and only that.

use std::path::{Path, PathBuf};

use engine::IoClass;
use host::Breakdown;
use sim::system::{run_system, SystemConfig, SystemRunResult};
use sim::Silent;

fn run_in(dir: &Path, text: &str) -> SystemRunResult {
    let cfg = SystemConfig::parse(text, "test.toml", dir).unwrap();
    run_system(&cfg, &mut Silent).unwrap()
}

fn run(text: &str) -> SystemRunResult {
    run_in(Path::new("."), text)
}

fn lc(r: &SystemRunResult) -> &Breakdown {
    &r.host.breakdown[IoClass::LatencyCritical.index()]
}

fn tp(r: &SystemRunResult) -> &Breakdown {
    &r.host.breakdown[IoClass::Throughput.index()]
}

/// A scratch directory holding `files`, for configs that name a job file.
fn scratch(test: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ullstack-fs-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

/// A co-run in which apache's bios find pagerank's code on their core (apache + pagerank on
/// all eight cores, arm8 + zssd, vanilla), 2 s: a latency-critical request's block-layer time
/// is its submission CPU (bio
/// submit 1.5 µs + dispatch 0.8 µs), plus `blk.cold_submit_ns` (37.2 µs, split between the
/// two in that proportion) for each bio that found pagerank's user code had run on its core
/// since the worker's last submission —
/// nearly all of them, as apache's worker sleeps through every I/O and pagerank takes the core
/// meanwhile — and a few ns of interrupts. About 39 µs in all, the published figure the cold
/// cost is calibrated to (`host`'s `config` essay). Alone, apache's submissions are never
/// cold: the idle loop runs no user code. No request waits for a tag or a deferred queue run.
#[test]
fn vanilla_co_run_latency_critical_block_layer_time_is_its_submission_cpu_cold() {
    // apache as it ran before its knee calibration (four workers, 0.25 ms requests, one read
    // per 1.5 requests): a worker woken for a request on a core pagerank held. (With one
    // worker computing 1.5 ms per request, most reads follow the worker's own compute: warm.)
    // pagerank on every core (its profile leaves one free): each wake-up finds pagerank there.
    let corun =
        "seed = 1\nduration_ms = 2000\n[host]\npreset = \"arm8\"\n[device]\npreset = \"zssd\"\n\
         [[process]]\nprofile = \"apache\"\nthreads = 4\ninstructions_per_request = 500000\n\
         [[process]]\nprofile = \"pagerank\"\nthreads = 8\n";
    let r = run(corun);
    let b = lc(&r);
    assert!(b.requests > 400, "{b:?}");
    let blk = &r.host.blk;
    let lcs = &blk.latency_critical;
    assert!(
        lcs.cold_bios * 100 > lcs.bios * 95,
        "{} of {} bios cold",
        lcs.cold_bios,
        lcs.bios
    );
    // One bio per request: the software queue is the submission, cold or not.
    assert_eq!(lcs.bios, b.requests);
    // The cold extra splits as the warm path: 1.5 / 2.3 to the submission, 0.8 / 2.3 to the
    // dispatch.
    // The costs, cold extra included, are means drawn per bio (`jitter.cost_cv_pct`, 10 %:
    // the mean of some 500 draws of the cold submission's 25.6 µs has a standard deviation of
    // 110 ns, the dispatch's 13.7 µs one of 60 ns), hence 2 % either side; without the cold
    // cost, or with it all on one side, either is off by more than half.
    let submit = 1_500 + 37_200 * 1_500 / 2_300 * lcs.cold_bios / lcs.bios;
    let dispatch = 800 + 37_200 * 800 / 2_300 * lcs.cold_bios / lcs.bios;
    assert!(
        b.software_queue.abs_diff(submit) <= submit / 50,
        "{b:?}: expected {submit} ns of submission"
    );
    assert!(
        b.hardware_queue.abs_diff(dispatch) <= dispatch / 50,
        "{b:?}: expected {dispatch} ns of dispatch"
    );
    let total = b.software_queue + b.hardware_queue;
    assert!((37_000..41_000).contains(&total), "{b:?}");
    assert_eq!((blk.allocation_waits, blk.deferred_dispatches), (0, 0));

    let alone = run(&corun.replace("[[process]]\nprofile = \"pagerank\"\nthreads = 8\n", ""));
    let b = lc(&alone);
    assert_eq!(alone.host.blk.latency_critical.cold_bios, 0);
    assert!((1_500..1_560).contains(&b.software_queue), "{b:?}");
}

/// The study's own co-run (apache's one worker beside `pagerank` on seven cores, which leaves
/// apache a core): pagerank's code on the other cores refills the L2 all eight share, so
/// apache's bios are cold though pagerank seldom runs on the worker's core (host's `cpu`
/// essay, *Whose code ran on a core*) — those that follow the worker's previous bio by at
/// least `cpu.llc_sweep_ns` (164 µs), about three in four with its exponential compute gaps
/// (mean 375 µs) — and its block layer rises toward the published 39 µs.
/// With private caches (`cpu.llc_shared_cores = 1`) only a pagerank thread on the worker's
/// own core makes a bio cold: few are, and the block layer stays near its warm 2.3 µs. A
/// model that counted only the submitter's core, or one that counted nothing, fails the
/// first half; one that made every co-run bio cold whatever the topology fails the second.
#[test]
fn a_co_runner_on_the_other_cores_makes_the_service_s_bios_cold_through_the_shared_llc() {
    let corun = |llc: &str| {
        format!(
            "seed = 1\nduration_ms = 2000\n[host]\npreset = \"arm8\"\n{llc}[device]\n\
             preset = \"zssd\"\n[[process]]\nprofile = \"apache\"\n\
             [[process]]\nprofile = \"pagerank\"\n"
        )
    };
    let shared = run(&corun(""));
    let private = run(&corun("[host.cpu]\nllc_shared_cores = 1\n"));
    let cold = |r: &SystemRunResult| {
        let b = &r.host.blk.latency_critical;
        (b.cold_bios, b.bios)
    };
    let blk_ns = |r: &SystemRunResult| lc(r).software_queue + lc(r).hardware_queue;
    let (c, n) = cold(&shared);
    assert!(
        n > 1_000 && c * 100 >= n * 60,
        "{c} of {n} cold (shared L2)"
    );
    assert!(
        (25_000..41_000).contains(&blk_ns(&shared)),
        "{:?}",
        lc(&shared)
    );
    let (c, n) = cold(&private);
    assert!(n > 1_000 && c * 10 < n, "{c} of {n} cold (private caches)");
    assert!(blk_ns(&private) < 6_000, "{:?}", lc(&private));
}

/// presets.md: apache's device I/O is at least 19 % of its response time on an NVMe SSD. Its
/// profile's I/O density (`workload::Profile::instructions_per_io`, one read per 750 750
/// instructions) is set from that; alone on `nvme-tlc` at low load (50 requests/s: the share of
/// a request's work, before any queueing) its read calls take that share of its mean response
/// time (and not much more: the profile's own rate would give about 12 %). At 400 requests/s,
/// the knee on `zssd`, `nvme-tlc`'s slower reads put apache past its knee, where the wait for
/// the worker dilutes the share (about 7 %).
#[test]
fn apache_s_io_share_of_its_response_time_is_at_least_19_pct() {
    let text = "seed = 1\nduration_ms = 4000\n[host]\npreset = \"arm8\"\n[device]\npreset = \"nvme-tlc\"\n\
         [[process]]\nprofile = \"apache\"\nrequests_per_sec = 50\n";
    let r = run(text);
    let p = &r.host.processes[0];
    let io_per_request = p.ios as f64 * p.io_latency.mean_ns() as f64 / p.requests as f64;
    let share = io_per_request / p.response.mean_ns() as f64;
    assert!(
        (0.19..0.25).contains(&share),
        "apache's I/O share {share:.3}"
    );
    // The figure is the profile's, not a name's: a process key overrides it, and the host's
    // default applies to services without a published figure.
    let cfg = SystemConfig::parse(text, "t.toml", Path::new(".")).unwrap();
    assert_eq!(
        cfg.processes[0].instructions_per_request,
        workload::APACHE_INSTRUCTIONS_PER_REQUEST
    );
    let other = SystemConfig::parse(
        &text.replace(
            "\"apache\"",
            "\"apache\"\ninstructions_per_request = 700000",
        ),
        "t.toml",
        Path::new("."),
    )
    .unwrap();
    assert_eq!(other.processes[0].instructions_per_request, 700_000);
    let image = SystemConfig::parse(
        &text.replace("\"apache\"", "\"apache-fetch\""),
        "t.toml",
        Path::new("."),
    )
    .unwrap();
    assert_eq!(
        image.processes[0].instructions_per_request,
        image.host.app.instructions_per_request
    );
}

/// apache beside fio throughput readers (32 reads in flight each) on a controller whose fetch
/// engine is slower than the host's submissions (`ctrl.fetch_ns` raised from 600 ns: the
/// default engine outpaces anything the host's CPUs can submit, so no SQ ever backs up and
/// neither priority nor the drain can act). With `nvme.lc_queue` the driver creates urgent
/// twin SQs and asks for strict priority:
/// - three readers, 3 µs per fetch: the throughput SQs back up but stay under 8 commands;
///   apache's commands are fetched ahead of them: their device queueing drops more than
///   tenfold against round robin, and no drain fires;
/// - one reader, 10 µs per fetch: its SQ stays above 8 commands, so it is drained again and
///   again, and a latency-critical command waits at most one drain (the SQ's 31 commands,
///   310 µs) between two, not forever; the reader loses nothing.
///
/// The host's caches are private here (`cpu.llc_shared_cores = 1`): with the presets' shared
/// L2, apache's code on another core makes every fio submission cold (37.2 µs, host's
/// `blk_submit` essay), the readers' SQs never back up, and arbitration has nothing to act
/// on (strict priority then left apache's device queue at 6.2 µs against round robin's 6.5).
#[test]
fn strict_priority_fetches_the_lc_sq_first_and_drains_fire() {
    let job = |jobs: u32| {
        format!(
            "[global]\nioengine=libaio\niodepth=32\ndirect=1\nbs=4k\nrw=randread\ntime_based\n\
             runtime=300ms\n[tp]\nnumjobs={jobs}\n"
        )
    };
    let dir = scratch("arb", &[("one.fio", &job(1)), ("three.fio", &job(3))]);
    let corun = |fio: &str, fetch_ns: u64, lc_queue: &str| {
        run_in(
            &dir,
            &format!(
                "seed = 1\nduration_ms = 300\n[host]\npreset = \"arm8\"\nattr = \"on\"\n\
                 [host.cpu]\nllc_shared_cores = 1\n\
                 [host.nvme]\nlc_queue = \"{lc_queue}\"\n[device]\npreset = \"zssd\"\n\
                 [device.ctrl]\nfetch_ns = {fetch_ns}\n[[process]]\nprofile = \"apache\"\n\
                 [[process]]\nfio = \"{fio}\"\nclass = \"throughput\"\n"
            ),
        )
    };
    let (rr, sp) = (
        corun("three.fio", 3_000, "off"),
        corun("three.fio", 3_000, "on"),
    );
    assert_eq!(rr.device.commands.arbitration_drains, 0);
    assert_eq!(sp.device.commands.arbitration_drains, 0);
    assert!(
        lc(&sp).device_queue * 10 < lc(&rr).device_queue,
        "strict {:?} vs round robin {:?}",
        lc(&sp),
        lc(&rr)
    );
    let (rr, sp) = (
        corun("one.fio", 10_000, "off"),
        corun("one.fio", 10_000, "on"),
    );
    assert_eq!(
        rr.device.commands.arbitration_drains, 0,
        "no drains without priority"
    );
    let drains = sp.device.commands.arbitration_drains;
    assert!(drains >= lc(&sp).requests / 2, "{drains} drains");
    assert!(lc(&sp).device_queue < 32 * 10_000, "{:?}", lc(&sp));
    let apache = &sp.host.processes[0];
    assert_eq!(apache.unfinished_requests, 0);
    assert_eq!(apache.requests, rr.host.processes[0].requests);
    let ios = |r: &SystemRunResult| r.host.processes[1].ios;
    assert!(
        ios(&sp) * 100 >= ios(&rr) * 99,
        "{} vs {}",
        ios(&sp),
        ios(&rr)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The FlashShare host switches over a co-run (apache + pagerank, arm8 + zssd, 1 s) or over
/// pagerank alone, with `attr = "on"` in every run.
fn with_switch(switch: &str, apache: bool) -> SystemRunResult {
    let apache = if apache {
        // apache as it ran before its knee calibration (four workers, 0.25 ms requests):
        // this compares the switches' paths under that load, not the service's shape; pagerank
        // on every core, as the figures below were measured.
        "[[process]]\nprofile = \"apache\"\nthreads = 4\ninstructions_per_request = 500000\n"
    } else {
        ""
    };
    run(&format!(
        "seed = 1\nduration_ms = 1000\n[host]\npreset = \"arm8\"\nattr = \"on\"\n{switch}\
         [device]\npreset = \"zssd\"\n{apache}[[process]]\nprofile = \"pagerank\"\nthreads = 8\n"
    ))
}

const BYPASS: &str = "[host.blk]\nbypass_lc = \"on\"\n";
const LC_QUEUE: &str = "[host.nvme]\nlc_queue = \"on\"\n";
const SELECTIVE: &str = "[host.nvme]\ncompletion = \"selective\"\n";

/// What a run did, for comparing two runs exactly: per-layer times of both classes, every
/// process's I/Os and instructions, the device's commands by direction and class, and the
/// cores' switches and interrupts.
fn outcome(r: &SystemRunResult) -> String {
    let c = &r.device.commands;
    let procs: Vec<(u64, u64)> = r
        .host
        .processes
        .iter()
        .map(|p| (p.ios, p.instructions))
        .collect();
    let cores: Vec<(u64, u64)> = r
        .host
        .cores
        .iter()
        .map(|c| (c.context_switches, c.interrupts))
        .collect();
    format!(
        "{:?} {:?} {procs:?} {:?} {cores:?}",
        r.host.breakdown,
        r.host.request_latency.each_ref().map(|h| h.mean_ns()),
        (c.reads, c.writes, c.latency_critical, c.throughput)
    )
}

/// `b` within `pct` percent of `a`.
fn near(a: u64, b: u64, pct: u64) -> bool {
    a.abs_diff(b) * 100 <= a * pct
}

/// Bypass, latency-critical SQs and selective completion act only on latency-critical I/O:
/// with none (pagerank alone) each of them, and all three, leave the run exactly as it was.
#[test]
fn host_switches_change_nothing_without_latency_critical_io() {
    let base = outcome(&with_switch("", false));
    for switch in [
        BYPASS,
        LC_QUEUE,
        SELECTIVE,
        "[host.blk]\nbypass_lc = \"on\"\n[host.nvme]\nlc_queue = \"on\"\ncompletion = \"selective\"\n",
    ] {
        assert_eq!(outcome(&with_switch(switch, false)), base, "{switch}");
    }
    // And the attribute alone changes nothing for a single class either.
    let vanilla = run(
        "seed = 1\nduration_ms = 1000\n[host]\npreset = \"arm8\"\n[device]\n\
         preset = \"zssd\"\n[[process]]\nprofile = \"pagerank\"\nthreads = 8\n",
    );
    assert_eq!(outcome(&vanilla), base);
}

/// In the co-run, bypass empties the latency-critical requests' hardware-queue time and
/// leaves the throughput path's layers as they were: completion to the nanosecond of its
/// cost; the software queue, dispatch and driver within the few percent the co-run's changed
/// schedule moves them. An apache worker woken on a pagerank core while pagerank dispatches
/// holds pagerank's request for its run, which may include a cold submission (37.2 µs); a
/// 37 µs hold moves the throughput means (≈ 6,700 requests a run) by ≈ 5 ns. Seed 1: the
/// throughput hardware queue (800 ns of dispatch, plus the cold dispatches of pagerank's own
/// cold bios) is 1,350 ns without the bypass and 1,395 ns with it. The
/// latency-critical SQs change nothing here (the fetch engine never has two SQs to choose
/// from: `strict_priority_fetches_the_lc_sq_first_and_drains_fire`), and selective completion
/// polls only the latency-critical I/O: the throughput I/O keeps its interrupt path.
#[test]
fn each_host_switch_changes_the_latency_critical_path_and_leaves_the_throughput_path() {
    let base = with_switch("", true);
    let (b_lc, b_tp) = (lc(&base), tp(&base));
    assert!(
        b_lc.hardware_queue >= 800 && b_lc.requests > 200,
        "{b_lc:?}"
    );
    let same_tp_path = |r: &SystemRunResult| {
        let t = tp(r);
        assert!(near(b_tp.requests, t.requests, 1), "{t:?} vs {b_tp:?}");
        assert!(
            near(b_tp.software_queue, t.software_queue, 5),
            "{t:?} vs {b_tp:?}"
        );
        assert!(
            near(b_tp.hardware_queue, t.hardware_queue, 6),
            "{t:?} vs {b_tp:?}"
        );
        assert!(near(b_tp.irq, t.irq, 2), "{t:?} vs {b_tp:?}");
        // The same mean cost, drawn per request (`jitter.cost_cv_pct`): within 1 %.
        assert!(
            near(b_tp.blk_complete, t.blk_complete, 1),
            "{t:?} vs {b_tp:?}"
        );
        assert_eq!(t.poll, 0, "{t:?}");
    };
    let bypass = with_switch(BYPASS, true);
    assert_eq!(lc(&bypass).hardware_queue, 0, "{:?}", lc(&bypass));
    assert_eq!(bypass.host.blk.bypassed, lc(&bypass).requests);
    same_tp_path(&bypass);
    assert!(near(b_tp.driver, tp(&bypass).driver, 5));
    // Exactly the same run with private caches. With the presets' shared L2 whether a bio is
    // cold depends on how long ago its submitter's last bio was (`cpu.llc_sweep_ns`, a sharp
    // boundary), so the twin SQ's other place in the fetch order moves a few bios across it
    // and the runs part (seed 1: 269 latency-critical requests against 255).
    let private = "[host.cpu]\nllc_shared_cores = 1\n";
    assert_eq!(
        outcome(&with_switch(&format!("{private}{LC_QUEUE}"), true)),
        outcome(&with_switch(private, true))
    );
    let selective = with_switch(SELECTIVE, true);
    let s_lc = lc(&selective);
    assert!(s_lc.irq == 0 && s_lc.poll > 0, "{s_lc:?}");
    same_tp_path(&selective);
}

/// The study's `apache + index` pair under each FlashShare stack (300 ms, seed 1), read back
/// from `summary.json` as the study reads it: every process's spans add up to its threads'
/// lives and every online request's parts to its response time, to the nanosecond; apache's
/// requests poll only where the stack polls latency-critical I/O (selective completion, not
/// `xler`, whose accelerator interrupts the driver, nor `dedcore`, whose poller is a kernel
/// thread), and index never polls. Accounting changes no outcome: the same run twice gives the
/// same summary.
#[test]
fn apache_and_index_time_adds_up_under_every_stack() {
    let text = "seed = 1\nduration_ms = 300\n[host]\npreset = \"arm8\"\n[device]\n\
                preset = \"zssd\"\n[[process]]\nprofile = \"apache\"\n[[process]]\n\
                profile = \"index\"\n";
    let stacks = std::iter::once(sim::stack::VANILLA.name)
        .chain(sim::stack::flashshare::STACKS.iter().map(|s| s.name));
    for stack in stacks {
        let s = sim::stack::find(stack).unwrap();
        let cfg = SystemConfig::parse_with_stack(text, "fs.toml", Path::new("."), Some(s)).unwrap();
        let json = sim::system::run(&cfg, &mut Silent).unwrap().to_json();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let sum = |m: &serde_json::Value| -> u64 {
            m.as_object()
                .unwrap()
                .values()
                .map(|x| x.as_u64().unwrap())
                .sum()
        };
        for p in v["processes"].as_array().unwrap() {
            let e = &p["exec_time"];
            let life = e["lifetime_ns"].as_u64().unwrap();
            assert_eq!(sum(&e["ns"]), life, "{stack}: {}", p["name"]);
            let fractions: f64 = e["fraction"]
                .as_object()
                .unwrap()
                .values()
                .map(|f| f.as_f64().unwrap())
                .sum();
            assert!(
                (fractions - 1.0).abs() < 0.002,
                "{stack}: fractions sum to {fractions}"
            );
        }
        let apache = &v["processes"][0];
        let index = &v["processes"][1];
        let rt = &apache["request_time"];
        assert_eq!(
            sum(&rt["sum_ns"]),
            rt["response_ns"].as_u64().unwrap(),
            "{stack}"
        );
        assert_eq!(rt["requests"], apache["requests"], "{stack}");
        assert_eq!(
            rt["response_ns"].as_u64().unwrap() / rt["requests"].as_u64().unwrap(),
            apache["response_time_ns"]["mean"].as_u64().unwrap(),
            "{stack}"
        );
        let polls = rt["sum_ns"]["poll"].as_u64().unwrap() > 0;
        assert_eq!(
            polls,
            stack == "selectisr",
            "{stack}: apache's requests poll"
        );
        assert_eq!(index["exec_time"]["ns"]["poll"], 0, "{stack}");
        assert_eq!(
            index["exec_time"]["threads"], 7,
            "a worker per core but one"
        );
        if stack == "selectisr" {
            let again = sim::system::run(&cfg, &mut Silent).unwrap().to_json();
            let strip = |j: &str| {
                let mut v: serde_json::Value = serde_json::from_str(j).unwrap();
                v["sim"]["wall_ns"] = 0.into();
                v.to_string()
            };
            assert_eq!(strip(&json), strip(&again));
        }
    }
}
