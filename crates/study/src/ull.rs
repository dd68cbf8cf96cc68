//! The `ull` study: what an ultra-low-latency device changes (experiments.md, `ull`).
//!
//! Presets `zssd` (Z-NAND-class SLC, µs reads) and `nvme-tlc` (a TLC NVMe SSD), each driven raw
//! by fio-like jobs through the thin host (`x86-4` costs), 4 KiB blocks, O_DIRECT:
//!
//! 1. **Latency vs queue depth** 1, 2, 4, 8, 16 — sequential read, random read, sequential
//!    write, random write (libaio): average and five-nines (p99.999).
//! 2. **Bandwidth vs queue depth** 1 … 256 (powers of two), the same four patterns, normalised to
//!    each device's maximum ([`device_max`]: the most its reads reached at any depth). Runs
//!    at depth ≤ 16 are shared with part 1.
//! 3. **Read/write interference**: random mixed I/O at depth [`INTERFERENCE_QD`] with 0, 20, 40,
//!    60, 80 and 100 % writes: average and five-nines read latency (0–80 %), and the write
//!    latency the 100 % point gives.
//! 4. **Interrupt vs polled completion**: synchronous `pvsync2` at depth 1, without and with
//!    `hipri`, random reads and random writes: latency (average, five-nines) and CPU use.
//!
//! ## How many I/Os
//! A five-nines figure needs enough samples above it: at 100 000 I/Os p99.999 is the worst
//! one; the full study runs [`FULL_IOS`] (1 000 000, ten samples above p99.999) per
//! point over all of its threads, the bandwidth-only points (depth 32 … 256) included: a curve whose points ran
//! different amounts of I/O compares different device states (nvme-tlc random writes at depth 32
//! ran at 276 K IOPS over 200 000 I/Os and at 209 K over 1 000 000, once garbage collection
//! had started). `--quick` runs [`QUICK_IOS`] I/Os per point —
//! enough for averages and for tests, not for the tail; its captions say so. Jobs are
//! `time_based` with a one-hour cap and `number_ios`, so sequential jobs wrap at the end of the
//! device as fio does, and every run stops at its I/O count.
//!
//! ## Submitting threads
//! A point's queue depth is spread over up to [`SUBMIT_THREADS`] threads (`numjobs`, each with
//! `iodepth` = depth / threads, `group_reporting`), as fio users load a fast device: one libaio
//! thread pays the thin host's submit, interrupt and wake-up costs on one core (5.2 µs of
//! kernel time per I/O on `x86-4`, about 2.5 µs of it on the submit side), so a single thread
//! tops out near 400 K IOPS whatever the device (every zssd point from depth 32 on landed on
//! exactly 400 000 IOPS with its core 100 % busy). Depth 1 stays one thread with one I/O in
//! flight; depth 2 is two threads of one, and so on up to four threads.
//!
//! What the threads do to the depth a curve needs: spread over four threads, zssd's 4 KiB
//! reads peak at the link (870 K/s, 3.57 GB/s), which by Little's law needs 870 K/s × about
//! 16 µs ≈ 14 I/Os in flight, so its curves reach 95 % of their peak at depth 16 (32 for random
//! reads, at 94 % by 16); one thread's core caps every pattern at 400 K IOPS, reached by depth
//! 4 (sequential reads, writes) or 8 (random reads). The published `zssd.qd_to_max_bw` rows (6
//! and 16) lie between the two.
//!
//! ## CPU use
//! Part 4's CPU figure is the thread's CPU time as the run's summary reports it
//! (`jobs[0].cpu`: kernel and user, see `results.rs`).

pub mod outcomes;

use crate::plan::Size;
use crate::plot::{Figure, Series, Stroke};
use crate::results::{OpHeadline, Results, RunResult};
use crate::spec::RunSpec;
use crate::table::Table;

use engine::time::format_ns;
use workload::Completion;

/// The two devices compared.
pub const DEVICES: [&str; 2] = ["zssd", "nvme-tlc"];
/// Thin-host cost preset of every run.
pub const HOST: &str = "x86-4";
/// Queue depths of the latency plots.
pub const LATENCY_QDS: [u32; 5] = [1, 2, 4, 8, 16];
/// Queue depths of the bandwidth plots.
pub const BANDWIDTH_QDS: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// Write shares of the interference experiment, percent.
pub const WRITE_PCTS: [u32; 6] = [0, 20, 40, 60, 80, 100];
/// Queue depth of the interference experiment: a moderate load, so that what reads suffer is
/// writes in their way inside the device rather than a saturated queue.
pub const INTERFERENCE_QD: u32 = 4;
/// Most submitting threads per point: the `x86-4` host's cores.
pub const SUBMIT_THREADS: u32 = 4;
/// Where each clone of a sequential point starts (`job_index` × 64 GiB): far enough apart that
/// no clone reaches the next one's stream within the full study's 1 000 000 I/Os (4 GB).
const SEQ_OFFSET_GIB: u32 = 64;
/// I/Os per point in the full study (≥ 100 000 so p99.999 is measured, not guessed), the
/// bandwidth-only points included, so every point of a curve covers the same device state (see
/// the module essay).
pub const FULL_IOS: u64 = 1_000_000;
/// Extra I/Os of a mixed point, percent, so its randomly drawn reads reach the point's count
/// (a standard deviation of the read count at 1.25 M I/Os and 80 % reads is about 450).
pub const MIX_READ_MARGIN_PCT: u64 = 1;
/// I/Os per point with `--quick`.
pub const QUICK_IOS: u64 = 4_000;

/// The four access patterns of parts 1 and 2: (fio `rw`, label, which op carries the latency).
pub const PATTERNS: [(&str, &str, Op); 4] = [
    ("read", "sequential read", Op::Read),
    ("randread", "random read", Op::Read),
    ("write", "sequential write", Op::Write),
    ("randwrite", "random write", Op::Write),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

/// How part 4's run ids name a completion mode.
fn slug(c: Completion) -> &'static str {
    match c {
        Completion::Interrupt => "irq",
        Completion::Polled => "poll",
    }
}

/// I/Os per point, over all of the point's threads.
fn ios_for(size: Size) -> u64 {
    match size {
        Size::Quick => QUICK_IOS,
        Size::Full => FULL_IOS,
    }
}

/// The devices' write buffer in a `--quick` study: 16 MiB, a 32nd of both presets' 512 MiB, so
/// a quick write point can fill it. With 4,000 I/Os into the whole buffer a write point never
/// reached the flash (nvme-tlc random writes at 3.9x the full study's bandwidth).
pub const QUICK_WRITE_BUFFER_BYTES: u64 = 16 << 20;
/// Times its write buffer a `--quick` write point writes: four, so the buffer fills and the
/// point measures mostly the flash's write rate, as the full study's points do.
pub const QUICK_WRITE_BUFFER_FILLS: u64 = 4;

/// The device overrides of every run: with `--quick` the scaled write buffer.
fn device_keys(size: Size) -> String {
    match size {
        Size::Quick => {
            format!("[device.cache]\nwrite_buffer_bytes = {QUICK_WRITE_BUFFER_BYTES}\n")
        }
        Size::Full => String::new(),
    }
}

/// I/Os of a point of parts 1 and 2: [`ios_for`], and with `--quick` enough writes to fill the
/// scaled write buffer [`QUICK_WRITE_BUFFER_FILLS`] times.
pub fn point_ios(size: Size, op: Op) -> u64 {
    let base = ios_for(size);
    if size == Size::Full || op == Op::Read {
        return base;
    }
    base.max(QUICK_WRITE_BUFFER_FILLS * QUICK_WRITE_BUFFER_BYTES / 4096)
}

/// How parts 1 and 2 spread a queue depth over threads, for their captions.
fn threads_note() -> String {
    format!(
        "spread over up to {SUBMIT_THREADS} submitting threads (numjobs = min(depth, \
         {SUBMIT_THREADS}), each with iodepth = depth / numjobs; sequential clones start \
         {SEQ_OFFSET_GIB} GiB apart)"
    )
}

fn job_header(comment: &str, engine: &str, ios: u64) -> String {
    format!(
        "; ull study: {comment}\n[global]\nioengine={engine}\ndirect=1\nbs=4k\nnorandommap\n\
         time_based\nruntime=3600s\nnumber_ios={ios}\n\n"
    )
}

pub fn qd_id(device: &str, rw: &str, qd: u32) -> String {
    format!("qd-{device}-{rw}-qd{qd}")
}

pub fn mix_id(device: &str, write_pct: u32) -> String {
    format!("mix-{device}-w{write_pct}")
}

pub fn sync_id(device: &str, op: Op, c: Completion) -> String {
    let op = match op {
        Op::Read => "read",
        Op::Write => "write",
    };
    format!("sync-{device}-{op}-{}", slug(c))
}

/// Every run of the study, in a fixed order.
pub fn runs(plan: &crate::plan::Plan) -> Vec<RunSpec> {
    let base = runs_of_seed(plan.size, plan.seed);
    let mut out = base.clone();
    for r in 1..plan.replicates {
        out.extend(base.iter().map(|s| RunSpec {
            id: replicate_id(&s.id, r),
            seed: plan.seed_of(r),
            ..s.clone()
        }));
    }
    out
}

/// Id of replicate `r` of run `id` (seed + `r`); replicate 0 is `id` itself.
pub fn replicate_id(id: &str, r: u64) -> String {
    match r {
        0 => id.to_string(),
        r => format!("{id}-r{r}"),
    }
}

/// Every run of one replicate (seed), in a fixed order.
fn runs_of_seed(size: Size, seed: u64) -> Vec<RunSpec> {
    let mut out = Vec::new();
    let spec = |id: String, device: &str, job_fio: String| RunSpec {
        device_keys: device_keys(size),
        id,
        device: device.to_string(),
        host: HOST.to_string(),
        job_fio,
        seed,
        system: None,
    };
    for device in DEVICES {
        for (rw, label, op) in PATTERNS {
            for qd in BANDWIDTH_QDS {
                let ios = point_ios(size, op);
                let id = qd_id(device, rw, qd);
                let threads = qd.min(SUBMIT_THREADS);
                debug_assert_eq!(qd % threads, 0, "depths are powers of two");
                let per_thread = ios.div_ceil(u64::from(threads));
                let mut job = job_header(
                    &format!("{label}, queue depth {qd} over {threads} thread(s)"),
                    "libaio",
                    per_thread,
                ) + &format!(
                    "[{rw}-qd{qd}]\nrw={rw}\nnumjobs={threads}\niodepth={}\ngroup_reporting\n",
                    qd / threads
                );
                if threads > 1 && !rw.starts_with("rand") {
                    // Sequential clones each get a stream of their own, as fio users set it:
                    // without it, every clone walks the same LBAs.
                    job.push_str(&format!("offset_increment={SEQ_OFFSET_GIB}g\n"));
                }
                out.push(spec(id, device, job));
            }
        }
        for w in WRITE_PCTS {
            // Enough I/Os that the reads alone reach the point's count: a read p99.999 from
            // the 20 % point of a 1 M run would rest on 8 samples above it, not 10. fio draws
            // each I/O's direction at random, so the reads are ios × share ± a few standard
            // deviations (999,382 of a planned 1,000,000 in one run): MIX_READ_MARGIN_PCT more.
            let ios = match w {
                100 => ios_for(size),
                w => (ios_for(size) * (100 + MIX_READ_MARGIN_PCT)).div_ceil(u64::from(100 - w)),
            };
            let job = job_header(
                &format!("random mixed I/O, {w} % writes, queue depth {INTERFERENCE_QD}"),
                "libaio",
                ios,
            ) + &format!(
                "[randrw-w{w}]\nrw=randrw\nrwmixread={}\niodepth={INTERFERENCE_QD}\n",
                100 - w
            );
            out.push(spec(mix_id(device, w), device, job));
        }
        for (op, rw) in [(Op::Read, "randread"), (Op::Write, "randwrite")] {
            for c in [Completion::Interrupt, Completion::Polled] {
                let ios = ios_for(size);
                let how = match c {
                    Completion::Interrupt => "interrupt completion",
                    Completion::Polled => "polled completion (hipri)",
                };
                let mut job = job_header(&format!("synchronous {rw}, {how}"), "pvsync2", ios)
                    + &format!("[{rw}-{}]\nrw={rw}\niodepth=1\n", slug(c));
                if c == Completion::Polled {
                    job.push_str("hipri\n");
                }
                out.push(spec(sync_id(device, op, c), device, job));
            }
        }
    }
    out
}

fn op_of(r: &RunResult, op: Op) -> Option<&OpHeadline> {
    match op {
        Op::Read => r.read.as_ref(),
        Op::Write => r.write.as_ref(),
    }
}

/// A latency statistic a figure draws: its name, its stroke, and where it is in a headline.
type LatencyStat = (&'static str, Stroke, fn(&OpHeadline) -> u64);

/// The two latency statistics every latency figure draws.
const LATENCY_STATS: [LatencyStat; 2] = [
    ("avg", Stroke::Solid, |h| h.mean_ns),
    ("p99.999", Stroke::Dashed, |h| h.p99_999_ns),
];

/// Samples above a tail percentile below which it is not reported (its value would be one or
/// two samples, i.e. the maximum).
pub const MIN_TAIL_SAMPLES: f64 = 10.0;

/// Samples above the p99.999 of `ios` I/Os.
pub fn samples_above_p99999(ios: u64) -> f64 {
    ios as f64 * 1e-5
}

/// Whether a figure draws `stat` of `h`: a p99.999 only from at least
/// [`MIN_TAIL_SAMPLES`] samples above it (a quick point's
/// "five nines" is its worst I/O: not drawn; the caption says why).
fn drawable(stat: &str, h: &OpHeadline) -> bool {
    stat != "p99.999" || samples_above_p99999(h.ios) >= MIN_TAIL_SAMPLES
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1_000.0
}

fn common_caption(size: Size, seed: u64, ios: u64) -> String {
    let tail = if ios < 100_000 {
        format!(
            " With --quick each point has only {ios} I/Os: too few for five nines (fewer than \
             10 samples above it), so no p99.999 is drawn; the full study runs {FULL_IOS} per \
             point."
        )
    } else {
        String::new()
    };
    format!(
        "Presets zssd and nvme-tlc, host costs {HOST}, seed {seed}, {} study, {ios} I/Os per point.{tail}",
        size.as_str()
    )
}

/// A device's maximum bandwidth: the most any of its read patterns reached at any depth of
/// part 2, `get` giving a run by its base id. The bandwidth figures are normalised to it
/// (experiments.md: "normalized to each device's maximum"), and so are the published
/// write-utilisation rows (`ull::outcomes`), whose reference text names the maximum as
/// the one "reached by reads".
pub fn device_max<'a>(device: &str, get: impl Fn(&str) -> Option<&'a RunResult>) -> Option<f64> {
    let mut best: f64 = 0.0;
    for (rw, _, o) in PATTERNS {
        if o == Op::Read {
            for qd in BANDWIDTH_QDS {
                best = best.max(op_of(get(&qd_id(device, rw, qd))?, o)?.bytes_per_sec);
            }
        }
    }
    (best > 0.0).then_some(best)
}

/// The study's figures from its results.
pub fn figures(results: &Results, size: Size, seed: u64) -> Vec<Figure> {
    let ios = ios_for(size);
    let mut figs = Vec::new();
    for (rw, label, op) in PATTERNS {
        let mut series = Vec::new();
        for (d, device) in DEVICES.iter().enumerate() {
            for (stat, stroke, ns_of) in LATENCY_STATS {
                let points = LATENCY_QDS
                    .iter()
                    .filter_map(|&qd| {
                        let h = op_of(results.get(&qd_id(device, rw, qd))?, op)?;
                        drawable(stat, h).then(|| (f64::from(qd), us(ns_of(h))))
                    })
                    .collect();
                series.push(Series {
                    name: format!("{device} {stat}"),
                    points,
                    stroke,
                    colour: d,
                    ..Default::default()
                });
            }
        }
        figs.push(Figure {
            stem: format!("latency-{rw}"),
            title: format!("{label}: latency vs queue depth"),
            caption: format!(
                "fio-like {label}, libaio, O_DIRECT, 4 KiB, queue depth 1–16 {}. Solid: average; \
                 dashed: five nines (p99.999). Log–log axes. {}",
                threads_note(),
                common_caption(size, seed, ios)
            ),
            x_label: "queue depth".into(),
            y_label: "latency (µs)".into(),
            x_log: true,
            y_log: true,
            x_categories: vec![],
            series,
            ..Default::default()
        });
    }
    let maxima: Vec<Option<f64>> = DEVICES
        .iter()
        .map(|d| device_max(d, |id| results.get(id)))
        .collect();
    let maxima_note = DEVICES
        .iter()
        .zip(&maxima)
        .map(|(d, m)| match m {
            Some(m) => format!("{d} {:.0} MB/s", m / 1e6),
            None => format!("{d} -"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    for (rw, label, op) in PATTERNS {
        let mut series = Vec::new();
        for (d, (device, max)) in DEVICES.iter().zip(&maxima).enumerate() {
            let points = BANDWIDTH_QDS
                .iter()
                .filter_map(|&qd| {
                    let h = op_of(results.get(&qd_id(device, rw, qd))?, op)?;
                    Some((f64::from(qd), h.bytes_per_sec / (*max)?))
                })
                .collect();
            series.push(Series {
                name: device.to_string(),
                points,
                stroke: Stroke::Solid,
                colour: d,
                ..Default::default()
            });
        }
        figs.push(Figure {
            stem: format!("bandwidth-{rw}"),
            title: format!("{label}: bandwidth vs queue depth"),
            caption: format!(
                "fio-like {label}, libaio, O_DIRECT, 4 KiB, queue depth 1–256 {}. Bandwidth \
                 divided by each device's maximum, the most its reads reached at any depth \
                 ({maxima_note}): a write curve above 1 writes faster than the device reads. {}",
                threads_note(),
                common_caption(size, seed, ios)
            ),
            x_label: "queue depth".into(),
            y_label: "bandwidth / device maximum".into(),
            x_log: true,
            y_log: false,
            x_categories: vec![],
            series,
            ..Default::default()
        });
    }
    let mut series = Vec::new();
    for (d, device) in DEVICES.iter().enumerate() {
        for (stat, stroke, ns_of) in LATENCY_STATS {
            let points = WRITE_PCTS
                .iter()
                .filter_map(|&w| {
                    let h = results.get(&mix_id(device, w))?.read.as_ref()?;
                    drawable(stat, h).then(|| (f64::from(w), us(ns_of(h))))
                })
                .collect();
            series.push(Series {
                name: format!("{device} read {stat}"),
                points,
                stroke,
                colour: d,
                ..Default::default()
            });
        }
    }
    figs.push(Figure {
        stem: "interference-read-latency".into(),
        title: "random reads with writes interleaved".into(),
        caption: format!(
            "fio-like random mixed I/O (randrw), libaio, O_DIRECT, 4 KiB, queue depth \
             {INTERFERENCE_QD}, 0–80 % writes: read latency, solid average, dashed five nines \
             (the 100 % point has no reads; its write latency is in the table). {}",
            common_caption(size, seed, ios)
        ),
        x_label: "writes (% of I/Os)".into(),
        y_label: "read latency (µs)".into(),
        x_log: false,
        y_log: true,
        x_categories: vec![],
        series,
        ..Default::default()
    });
    figs.extend(sync_figures(results, size, seed, ios));
    figs
}

fn sync_figures(results: &Results, size: Size, seed: u64, ios: u64) -> Vec<Figure> {
    let cats = vec!["interrupt".to_string(), "polled".to_string()];
    let modes = [Completion::Interrupt, Completion::Polled];
    let mut lat = Vec::new();
    let mut cpu = Vec::new();
    for (d, device) in DEVICES.iter().enumerate() {
        for (o, (op, name)) in [(Op::Read, "read"), (Op::Write, "write")]
            .into_iter()
            .enumerate()
        {
            let colour = 2 * d + o;
            for (stat, stroke, ns_of) in LATENCY_STATS {
                let points = modes
                    .iter()
                    .enumerate()
                    .filter_map(|(x, &c)| {
                        let h = op_of(results.get(&sync_id(device, op, c))?, op)?;
                        drawable(stat, h).then(|| (x as f64, us(ns_of(h))))
                    })
                    .collect();
                lat.push(Series {
                    name: format!("{device} {name} {stat}"),
                    points,
                    stroke,
                    colour,
                    ..Default::default()
                });
            }
            for (part, stroke) in [("kernel", Stroke::Solid), ("user", Stroke::Dashed)] {
                let points = modes
                    .iter()
                    .enumerate()
                    .filter_map(|(x, &c)| {
                        let u = &results.get(&sync_id(device, op, c))?.cpu;
                        let v = if part == "kernel" {
                            u.kernel_pct
                        } else {
                            u.user_pct
                        };
                        Some((x as f64, v))
                    })
                    .collect();
                cpu.push(Series {
                    name: format!("{device} {name} {part}"),
                    points,
                    stroke,
                    colour,
                    ..Default::default()
                });
            }
        }
    }
    let what = "synchronous pvsync2, O_DIRECT, 4 KiB, queue depth 1; interrupt completion vs \
                polled (hipri)";
    vec![
        Figure {
            stem: "completion-latency".into(),
            title: "interrupt vs polled completion: latency".into(),
            caption: format!(
                "Random reads and writes, {what}. Filled bars: average; outlined: five nines. {}",
                common_caption(size, seed, ios)
            ),
            x_label: "completion".into(),
            y_label: "latency (µs)".into(),
            x_log: false,
            y_log: true,
            x_categories: cats.clone(),
            series: lat,
            ..Default::default()
        },
        Figure {
            stem: "completion-cpu".into(),
            title: "interrupt vs polled completion: CPU use".into(),
            caption: format!(
                "Random reads and writes, {what}: CPU time of the I/O thread's core, percent. \
                 Filled bars: kernel; outlined: user (the thin host has no per-I/O user cost: 0). \
                 {}",
                common_caption(size, seed, ios)
            ),
            x_label: "completion".into(),
            y_label: "CPU (% of one core)".into(),
            x_log: false,
            y_log: false,
            x_categories: cats,
            series: cpu,
            ..Default::default()
        },
    ]
}

/// The compact headline table: metrics down, devices across.
/// A p99.999 as a table prints it: the value when at least
/// [`MIN_TAIL_SAMPLES`] samples lie above it, else "n/a (N
/// samples)" (a five-nines of 4,000 I/Os is the worst one, not a percentile).
pub fn five_nines_cell(h: &OpHeadline) -> String {
    if samples_above_p99999(h.ios) < MIN_TAIL_SAMPLES {
        format!("n/a ({} samples)", h.ios)
    } else {
        format_ns(h.p99_999_ns)
    }
}

pub fn headline(results: &Results) -> Table {
    let mut t = Table {
        header: std::iter::once("metric".to_string())
            .chain(DEVICES.iter().map(|d| d.to_string()))
            .collect(),
        rows: vec![],
    };
    let lat = |id: &dyn Fn(&str) -> String, op: Op| -> Vec<String> {
        DEVICES
            .iter()
            .map(|d| {
                results
                    .get(&id(d))
                    .and_then(|r| op_of(r, op))
                    .map_or("-".into(), |h| {
                        format!("{} / {}", format_ns(h.mean_ns), five_nines_cell(h))
                    })
            })
            .collect()
    };
    let mut row = |name: &str, cells: Vec<String>| {
        t.rows
            .push(std::iter::once(name.to_string()).chain(cells).collect());
    };
    row(
        "random read QD1, avg / p99.999",
        lat(&|d| qd_id(d, "randread", 1), Op::Read),
    );
    row(
        "random write QD1, avg / p99.999",
        lat(&|d| qd_id(d, "randwrite", 1), Op::Write),
    );
    row(
        "random read QD16, avg / p99.999",
        lat(&|d| qd_id(d, "randread", 16), Op::Read),
    );
    for (rw, label, op) in PATTERNS {
        let cells = DEVICES
            .iter()
            .map(|d| {
                let best = BANDWIDTH_QDS
                    .iter()
                    .filter_map(|&qd| {
                        let h = op_of(results.get(&qd_id(d, rw, qd))?, op)?;
                        Some((h.bytes_per_sec, h.iops, qd))
                    })
                    .fold(None, |acc: Option<(f64, f64, u32)>, x| match acc {
                        Some(a) if a.0 >= x.0 => Some(a),
                        _ => Some(x),
                    });
                best.map_or("-".into(), |(bw, iops, qd)| {
                    format!("{:.0} MB/s, {:.0}k IOPS @QD{qd}", bw / 1e6, iops / 1e3)
                })
            })
            .collect();
        row(&format!("{label} max bandwidth"), cells);
    }
    row(
        &format!("read at 80 % writes QD{INTERFERENCE_QD}, avg / p99.999"),
        lat(&|d| mix_id(d, 80), Op::Read),
    );
    for (op, name) in [(Op::Read, "read"), (Op::Write, "write")] {
        for c in [Completion::Interrupt, Completion::Polled] {
            row(
                &format!("sync {name} {}, avg / p99.999", slug(c)),
                lat(&|d| sync_id(d, op, c), op),
            );
        }
    }
    for c in [Completion::Interrupt, Completion::Polled] {
        let cells = DEVICES
            .iter()
            .map(|d| {
                results
                    .get(&sync_id(d, Op::Read, c))
                    .map_or("-".into(), |r| {
                        format!("{:.0} % / {:.0} %", r.cpu.kernel_pct, r.cpu.user_pct)
                    })
            })
            .collect();
        row(&format!("sync read {} CPU kernel / user", slug(c)), cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_five_nines_needs_a_million_ios_for_ten_samples() {
        assert!(samples_above_p99999(1_000_000) >= MIN_TAIL_SAMPLES);
        assert!(samples_above_p99999(800_000) < MIN_TAIL_SAMPLES);
    }

    #[test]
    fn run_ids_are_unique_and_every_job_parses() {
        let specs = runs(&crate::plan::Plan::new(Size::Quick, 1));
        let mut ids: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), specs.len());
        assert_eq!(specs.len(), 2 * (4 * 9 + 6 + 4));
        for s in &specs {
            let jobs = workload::JobFile::parse_fio(&s.job_fio, &s.id)
                .unwrap_or_else(|e| panic!("{}: {e}", s.id));
            assert_eq!(jobs.jobs.len(), 1, "{}", s.id);
        }
    }

    #[test]
    fn full_latency_points_have_enough_ios_for_five_nines() {
        // Every point of the full study, over all its threads, runs FULL_IOS I/Os (or
        // the next multiple of its thread count); a mixed point runs enough that its reads
        // alone are FULL_IOS.
        let value = |text: &str, key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().parse::<u64>().expect("a number"))
        };
        for s in runs(&crate::plan::Plan::new(Size::Full, 1)) {
            let per_thread = value(&s.job_fio, "number_ios=").expect("number_ios");
            let threads = value(&s.job_fio, "numjobs=").unwrap_or(1);
            let mut total = per_thread * threads;
            if let Some(read_pct) = value(&s.job_fio, "rwmixread=").filter(|&p| p > 0) {
                total = total * read_pct / 100;
            }
            let most = FULL_IOS * (100 + MIX_READ_MARGIN_PCT) / 100 + threads;
            assert!(
                (FULL_IOS..most).contains(&total),
                "{}: {threads} × {per_thread}",
                s.id
            );
        }
        const { assert!(FULL_IOS >= 100_000) };
    }
}

#[cfg(test)]
mod quick_tests {
    use super::*;

    /// A p99.999 with fewer than ten samples above it is not drawn; the average is.
    #[test]
    fn five_nines_of_too_few_ios_are_not_drawn() {
        let h = |ios| OpHeadline {
            ios,
            iops: 1.0,
            bytes_per_sec: 1.0,
            mean_ns: 10,
            p99_ns: 20,
            p99_999_ns: 30,
        };
        assert!(!drawable("p99.999", &h(4_000)));
        assert!(drawable("avg", &h(4_000)));
        assert!(drawable("p99.999", &h(1_000_000)));
        assert_eq!(five_nines_cell(&h(4_000)), "n/a (4000 samples)");
    }

    /// A quick write point writes its scaled buffer several times over (it reaches the
    /// flash), and every quick run's config carries the scaled buffer; full runs use the
    /// presets as they are.
    #[test]
    fn quick_write_points_fill_the_scaled_buffer() {
        let fills = QUICK_WRITE_BUFFER_FILLS * QUICK_WRITE_BUFFER_BYTES;
        for s in runs(&crate::plan::Plan::new(Size::Quick, 1)) {
            assert!(
                s.config_toml()
                    .contains(&format!("write_buffer_bytes = {QUICK_WRITE_BUFFER_BYTES}")),
                "{}",
                s.id
            );
            if s.id.starts_with("qd-") && s.id.contains("write-") {
                let value = |key: &str| {
                    s.job_fio
                        .lines()
                        .find_map(|l| l.strip_prefix(key))
                        .map_or(1, |v| v.trim().parse::<u64>().expect("a number"))
                };
                let bytes = value("number_ios=") * value("numjobs=") * 4096;
                assert!(bytes >= fills, "{}: {bytes} bytes", s.id);
            }
        }
        assert!(runs(&crate::plan::Plan::new(Size::Full, 1))
            .iter()
            .all(|s| s.device_keys.is_empty()));
    }
}

#[cfg(test)]
mod thread_tests {
    use super::*;

    #[test]
    fn deep_points_spread_over_threads_and_sequential_clones_get_their_own_stream() {
        let runs = runs(&crate::plan::Plan::new(Size::Full, 1));
        let job = |id: &str| &runs.iter().find(|r| r.id == id).expect(id).job_fio;
        let qd1 = job("qd-zssd-read-qd1");
        assert!(qd1.contains("numjobs=1\n") && qd1.contains("iodepth=1\n"));
        assert!(!qd1.contains("offset_increment"));
        let deep = job("qd-zssd-read-qd256");
        assert!(
            deep.contains("numjobs=4\n") && deep.contains("iodepth=64\n"),
            "{deep}"
        );
        assert!(deep.contains("group_reporting") && deep.contains("offset_increment="));
        let random = job("qd-zssd-randread-qd256");
        assert!(!random.contains("offset_increment"), "{random}");
    }
}
