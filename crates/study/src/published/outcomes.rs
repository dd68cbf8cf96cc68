//! Each study's published outcomes, computed from its runs in `reference/published.toml`'s
//! terms (what each `id` measures is in its `what`; how a study measures it is written here
//! beside it).
//!
//! Every function reads the replicates present (replicate 0 up to the first missing), so a
//! `--quick` study (one replicate) gives points without intervals and a full one (five by
//! default) gives 95 % intervals ([`super`]'s essay).

use super::{level, paired_ratio, Estimate, Kind, Pair, Simulated};
use crate::results::{OpHeadline, ProcessHeadline, Results, RunResult};
use crate::{fastdrain, flashshare, ull};

/// Replicates of a run present in `results`, in order, from replicate 0 up to the first missing.
pub(crate) fn present(results: &Results, id: impl Fn(u64) -> String) -> Vec<&RunResult> {
    (0..).map_while(|r| results.get(&id(r))).collect()
}

fn process<'a>(run: &'a RunResult, name: &str) -> Option<&'a ProcessHeadline> {
    run.system
        .as_ref()?
        .processes
        .iter()
        .find(|p| p.name == name)
}

/// A statistic of process `name` in every present replicate (`None` if one lacks it).
pub(crate) fn stat_over(
    runs: &[&RunResult],
    name: &str,
    of: impl Fn(&ProcessHeadline) -> Option<u64>,
) -> Option<Vec<f64>> {
    runs.iter()
        .map(|r| process(r, name).and_then(&of).map(|v| v as f64))
        .collect()
}

/// A pair with both arms cut to the replicates both have.
pub(crate) fn pair(mut arm: Vec<f64>, mut base: Vec<f64>) -> Option<Pair> {
    let n = arm.len().min(base.len());
    (n > 0).then(|| {
        arm.truncate(n);
        base.truncate(n);
        Pair { arm, base }
    })
}

pub(crate) type Stat = fn(&ProcessHeadline) -> Option<u64>;
const AVG: Stat = |p| p.response_mean_ns;
const P95: Stat = |p| p.response_p95_ns;
pub(crate) const P99: Stat = |p| p.response_p99_ns;

/// `flashshare`: the motivation (apache + pagerank vs alone, vanilla) and each stack's mean
/// average and p99 response time over all 30 online/offline pairs, normalised to vanilla.
pub fn flashshare(results: &Results) -> Vec<Simulated> {
    let runs = |stack: &str, online: &str, partner: &str| {
        present(results, |r| {
            flashshare::replicate_id(stack, online, partner, r)
        })
    };
    let corun = runs("vanilla", "apache", "pagerank");
    let alone = runs("vanilla", "apache", flashshare::ALONE);
    let motivation = |of: Stat, id: &'static str| {
        let p = pair(
            stat_over(&corun, "apache", of)?,
            stat_over(&alone, "apache", of)?,
        )?;
        paired_ratio(&[p], id)
    };
    let mut out = vec![
        Simulated::new(
            "motivation.apache_pagerank.avg",
            Kind::Ratio,
            motivation(AVG, "flashshare/motivation.apache_pagerank.avg"),
        ),
        Simulated::new(
            "motivation.apache_pagerank.p95",
            Kind::Ratio,
            motivation(P95, "flashshare/motivation.apache_pagerank.p95"),
        ),
        Simulated::new(
            "motivation.apache_pagerank.p99",
            Kind::Ratio,
            motivation(P99, "flashshare/motivation.apache_pagerank.p99"),
        ),
        Simulated::new(
            "motivation.apache_alone.p99",
            Kind::Level,
            stat_over(&alone, "apache", P99)
                .and_then(|v| level(&ms(&v), "flashshare/motivation.apache_alone.p99")),
        ),
        Simulated::new(
            "motivation.blk_layer_corun",
            Kind::Level,
            corun
                .iter()
                .map(|r| {
                    let b = &r.system.as_ref()?.host.breakdown_lc_ns;
                    (b.requests > 0).then(|| (b.software_queue + b.hardware_queue) as f64 / 1e3)
                })
                .collect::<Option<Vec<f64>>>()
                .and_then(|v| level(&v, "flashshare/motivation.blk_layer_corun")),
        ),
    ];
    const IDS: [(&str, &str, &str); 4] = [
        ("cacheopt", "avg.cacheopt", "p99.cacheopt"),
        ("kernelopt", "avg.kernelopt", "p99.kernelopt"),
        ("selectisr", "avg.selectisr", "p99.selectisr"),
        ("xler", "avg.xler", "p99.xler"),
    ];
    for (stack, avg_id, p99_id) in IDS {
        for (id, of) in [(avg_id, AVG), (p99_id, P99)] {
            let pairs: Option<Vec<Pair>> = flashshare::ONLINE
                .iter()
                .flat_map(|online| flashshare::OFFLINE.iter().map(move |off| (online, off)))
                .map(|(online, off)| {
                    pair(
                        stat_over(&runs(stack, online, off), online, of)?,
                        stat_over(&runs("vanilla", online, off), online, of)?,
                    )
                })
                .collect();
            let est = pairs.and_then(|p| paired_ratio(&p, &format!("flashshare/{id}")));
            out.push(Simulated::new(id, Kind::Ratio, est));
        }
    }
    out
}

fn ms(ns: &[f64]) -> Vec<f64> {
    ns.iter().map(|v| v / 1e6).collect()
}

/// The pair (this stack's service p99s, vanilla's) of one fastdrain workload, per replicate.
pub(crate) fn fastdrain_pair(results: &Results, stack: &str, workload: &str) -> Option<Pair> {
    let arm = present(results, |r| fastdrain::replicate_id(stack, workload, r));
    let base = present(results, |r| fastdrain::replicate_id("vanilla", workload, r));
    pair(
        stat_over(&arm, workload, P99)?,
        stat_over(&base, workload, P99)?,
    )
}

/// `fastdrain`: each stack's p99 over vanilla's, mean over the six workloads.
pub fn fastdrain(results: &Results) -> Vec<Simulated> {
    const IDS: [(&str, &str); 4] = [
        ("fd-buf", "p99.fd-buf"),
        ("fd-ftl", "p99.fd-ftl"),
        ("fd", "p99.fd"),
        ("oracle", "p99.oracle"),
    ];
    IDS.iter()
        .map(|&(stack, id)| {
            let pairs: Option<Vec<Pair>> = fastdrain::WORKLOADS
                .iter()
                .map(|w| fastdrain_pair(results, stack, w))
                .collect();
            let est = pairs.and_then(|p| paired_ratio(&p, &format!("fastdrain/{id}")));
            Simulated::new(id, Kind::Ratio, est)
        })
        .collect()
}

/// Share of a curve's peak bandwidth a depth must reach to count as "reaching the peak": the
/// paper reads its depths off plotted curves, where the last 5 % is not told apart.
pub const PEAK_SHARE_PCT: f64 = 95.0;

/// Samples above a tail percentile below which it is not reported (its value would be one or
/// two samples, i.e. the maximum).
pub const MIN_TAIL_SAMPLES: f64 = 10.0;

/// Samples above the p99.999 of `ios` I/Os.
pub fn samples_above_p99999(ios: u64) -> f64 {
    ios as f64 * 1e-5
}

fn op(r: &RunResult, o: ull::Op) -> Option<&OpHeadline> {
    match o {
        ull::Op::Read => r.read.as_ref(),
        ull::Op::Write => r.write.as_ref(),
    }
}

/// One replicate of the ull study: its runs are the base ids with the replicate's suffix.
struct Replicate<'a> {
    results: &'a Results,
    r: u64,
}

impl<'a> Replicate<'a> {
    fn get(&self, id: &str) -> Option<&'a RunResult> {
        self.results.get(&ull::replicate_id(id, self.r))
    }
}

/// A quantity of each ull replicate present (replicate 0 up to the first whose first run is
/// missing), computed from that replicate's runs; `None` if any lacks it.
fn per_replicate(
    results: &Results,
    mut f: impl FnMut(&Replicate<'_>) -> Option<f64>,
) -> Option<Vec<f64>> {
    let mut values = Vec::new();
    for r in 0.. {
        let rep = Replicate { results, r };
        if rep.get(&ull::qd_id("zssd", "read", 1)).is_none() {
            break;
        }
        values.push(f(&rep)?);
    }
    (!values.is_empty()).then_some(values)
}

/// The bandwidth curve of `device`'s pattern `rw` over the bandwidth depths.
fn curve(get: &Replicate<'_>, device: &str, rw: &str, o: ull::Op) -> Option<Vec<(u32, f64)>> {
    ull::BANDWIDTH_QDS
        .iter()
        .map(|&qd| {
            Some((
                qd,
                op(get.get(&ull::qd_id(device, rw, qd))?, o)?.bytes_per_sec,
            ))
        })
        .collect()
}

/// The smallest depth whose bandwidth is within [`PEAK_SHARE_PCT`] of the curve's peak.
fn depth_to_peak(c: &[(u32, f64)]) -> Option<f64> {
    let peak = c.iter().map(|p| p.1).fold(0.0, f64::max);
    c.iter()
        .find(|p| p.1 * 100.0 >= PEAK_SHARE_PCT * peak)
        .map(|p| f64::from(p.0))
}

/// The most any read pattern of `device` reached: the device's maximum bandwidth
/// ([`ull::device_max`], which the bandwidth figures divide by).
fn device_max(get: &Replicate<'_>, device: &str) -> Option<f64> {
    ull::device_max(device, |id| get.get(id))
}

/// The mean over a curve's depths of its bandwidth as a percent of `max`: the
/// `zssd.write_bw_utilization.*` rows, whose published text measures writes "as a share of the
/// device's maximum, averaged over queue depths" (experiments.md, part 2: bandwidth
/// "normalized to each device's maximum"), the maximum being [`device_max`], as for
/// `nvme.write_bw_utilization`. Not a share of the same pattern's reads at each depth: at depths
/// below the peak a buffered write (11 µs at QD1 on zssd) outruns a read (14.5 µs), so that
/// ratio exceeded 100 % for random writes (114 %) while the device wrote no faster than it read.
fn mean_share_of_max(c: &[(u32, f64)], max: f64) -> Option<f64> {
    (!c.is_empty() && max > 0.0)
        .then(|| c.iter().map(|p| 100.0 * p.1 / max).sum::<f64>() / c.len() as f64)
}

/// `ull`: depths to the peak, write bandwidth utilisation, reads under writes, polling's gain
/// and CPU.
pub fn ull(results: &Results) -> Vec<Simulated> {
    use ull::Op::{Read, Write};
    let mut out = Vec::new();
    let lvl = |id: &'static str, v: Option<Vec<f64>>| {
        Simulated::new(
            id,
            Kind::Level,
            v.and_then(|v| level(&v, &format!("ull/{id}"))),
        )
    };
    out.push(lvl(
        "zssd.qd_to_max_bw.sequential",
        per_replicate(results, |get| {
            let r = depth_to_peak(&curve(get, "zssd", "read", Read)?)?;
            let w = depth_to_peak(&curve(get, "zssd", "write", Write)?)?;
            Some((r + w) / 2.0)
        }),
    ));
    out.push(lvl(
        "zssd.qd_to_max_bw.worst",
        per_replicate(results, |get| {
            ull::PATTERNS
                .iter()
                .map(|&(rw, _, o)| depth_to_peak(&curve(get, "zssd", rw, o)?))
                .collect::<Option<Vec<f64>>>()
                .map(|v| v.into_iter().fold(0.0, f64::max))
        }),
    ));
    out.push(lvl(
        "nvme.write_bw_utilization",
        per_replicate(results, |get| {
            let max = device_max(get, "nvme-tlc")?;
            let mut best: f64 = 0.0;
            for rw in ["write", "randwrite"] {
                best = best.max(
                    curve(get, "nvme-tlc", rw, Write)?
                        .iter()
                        .map(|p| p.1)
                        .fold(0.0, f64::max),
                );
            }
            Some(100.0 * best / max)
        }),
    ));
    for (id, write_rw) in [
        ("zssd.write_bw_utilization.sequential", "write"),
        ("zssd.write_bw_utilization.random", "randwrite"),
    ] {
        out.push(lvl(
            id,
            per_replicate(results, |get| {
                mean_share_of_max(
                    &curve(get, "zssd", write_rw, Write)?,
                    device_max(get, "zssd")?,
                )
            }),
        ));
    }
    for (id, device) in [
        ("nvme.read_latency_at_20pct_writes", "nvme-tlc"),
        ("zssd.read_latency_at_20pct_writes", "zssd"),
    ] {
        let arm = per_replicate(results, |get| {
            Some(op(get.get(&ull::mix_id(device, 20))?, Read)?.mean_ns as f64)
        });
        let base = per_replicate(results, |get| {
            Some(op(get.get(&ull::mix_id(device, 0))?, Read)?.mean_ns as f64)
        });
        let est = arm
            .zip(base)
            .and_then(|(a, b)| pair(a, b))
            .and_then(|p| paired_ratio(&[p], &format!("ull/{id}")));
        out.push(Simulated::new(id, Kind::Ratio, est));
    }
    for (id, device, kind, scale) in [
        (
            "nvme.read_p99999_at_20pct_writes",
            "nvme-tlc",
            Kind::Level,
            1e6,
        ),
        (
            "zssd.read_p99999_at_20pct_writes",
            "zssd",
            Kind::AtMost,
            1e3,
        ),
    ] {
        let mut fewest = u64::MAX;
        let values = per_replicate(results, |get| {
            let h = op(get.get(&ull::mix_id(device, 20))?, Read)?;
            fewest = fewest.min(h.ios);
            Some(h.p99_999_ns as f64 / scale)
        });
        let mut s = Simulated::new(id, kind, None);
        match values {
            Some(_) if samples_above_p99999(fewest) < MIN_TAIL_SAMPLES => {
                s.note = Some(format!(
                    "n/a ({fewest} samples: fewer than {MIN_TAIL_SAMPLES} above p99.999)"
                ));
            }
            Some(v) => s.estimate = level(&v, &format!("ull/{id}")),
            None => {}
        }
        out.push(s);
    }
    for (id, device, o, rw) in [
        ("zssd.poll_gain.read", "zssd", Read, Read),
        ("zssd.poll_gain.write", "zssd", Write, Write),
        ("nvme.poll_gain.read", "nvme-tlc", Read, Read),
        ("nvme.poll_gain.write", "nvme-tlc", Write, Write),
    ] {
        let mean = |c| {
            per_replicate(results, |get| {
                Some(op(get.get(&ull::sync_id(device, o, c))?, rw)?.mean_ns as f64)
            })
        };
        let est = mean(workload::Completion::Polled)
            .zip(mean(workload::Completion::Interrupt))
            .and_then(|(poll, irq)| pair(poll, irq))
            .and_then(|p| paired_ratio(&[p], &format!("ull/{id}")))
            .map(|e: Estimate| e.map(|ratio| 100.0 * (1.0 - ratio), false));
        out.push(Simulated::new(id, Kind::Gain, est));
    }
    out.push(lvl(
        "poll_cpu",
        per_replicate(results, |get| {
            Some(
                get.get(&ull::sync_id("zssd", Read, workload::Completion::Polled))?
                    .cpu
                    .kernel_pct,
            )
        }),
    ));
    out
}

/// `reflex`: scenario 1 at full scale on the simulated server (LC tenants' SLOs and B's
/// tokens with the scheduler on, every tenant's p95 with it off) and part 5's unloaded reads
/// (remote minus local). One run each: no interval.
pub fn reflex(sims: &[crate::reflex::RunOutcome]) -> Vec<Simulated> {
    use crate::reflex::real::RunView;
    let view = |id: &str| {
        sims.iter()
            .find(|o| o.id == id)
            .map(|o| RunView::sim(&o.summary))
    };
    let on = view("s1-on");
    let off = view("s1-off");
    let tenant = |v: &RunView, name: &str| v.tenants.iter().find(|t| t.name == name).cloned();
    let met = on.as_ref().and_then(|v| {
        let (a, b) = (tenant(v, "A")?, tenant(v, "B")?);
        Some(f64::from(u8::from(a.slo_met? && b.slo_met?)))
    });
    let b_tokens = on
        .as_ref()
        .and_then(|v| tenant(v, "B"))
        .map(|b| b.tokens_per_sec / 1e3);
    let least_p95_ms = off.as_ref().and_then(|v| {
        v.tenants
            .iter()
            .filter(|t| t.reads > 0)
            .map(|t| t.read_latency_ns_p95 as f64 / 1e6)
            .reduce(f64::min)
    });
    let mean_read_us = |id: &str| {
        view(id).and_then(|v| Some(v.tenants.first()?.read_latency_ns_mean as f64 / 1e3))
    };
    let remote_minus_local = mean_read_us("unloaded-read-remote")
        .zip(mean_read_us("unloaded-read-local"))
        .map(|(r, l)| r - l);
    let one = |v: Option<f64>| v.map(|v| Estimate::point(v, 1));
    vec![
        Simulated::new("scenario1.lc_slo_met", Kind::Bool, one(met)),
        Simulated::new("scenario1.b_tokens", Kind::Level, one(b_tokens)),
        Simulated::new("scenario1.no_qos_p95", Kind::AtLeast, one(least_p95_ms)),
        Simulated::new(
            "unloaded.remote_minus_local",
            Kind::Level,
            one(remote_minus_local),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_depth_to_the_peak_is_the_first_within_the_share() {
        let c = [
            (1, 100.0),
            (2, 180.0),
            (4, 300.0),
            (8, 380.0),
            (16, 400.0),
            (32, 398.0),
        ];
        assert_eq!(depth_to_peak(&c), Some(8.0));
        let flat = [(1, 400.0), (2, 400.0)];
        assert_eq!(depth_to_peak(&flat), Some(1.0));
    }

    /// zssd's curves as the model draws them: buffered writes outrun reads below the peak
    /// (11 µs vs 14.5 µs at QD1) and both flatten at the link. The utilisation rows divide each
    /// depth's write bandwidth by the device's maximum (its best read), not by the same
    /// pattern's reads at that depth, whose ratio would exceed 100 % here.
    #[test]
    fn write_utilisation_is_a_share_of_the_device_maximum_averaged_over_depths() {
        use crate::results::CpuUse;
        let headline = |bw: f64| OpHeadline {
            ios: 1_000,
            iops: bw / 4096.0,
            bytes_per_sec: bw,
            mean_ns: 10_000,
            p99_ns: 10_000,
            p99_999_ns: 10_000,
        };
        let read_bw = |qd: u32| (f64::from(qd) * 280e6).min(3_550e6);
        let write_bw = |qd: u32| (f64::from(qd) * 360e6).min(3_600e6);
        let mut results = Results::new();
        for (rw, _, o) in ull::PATTERNS {
            for qd in ull::BANDWIDTH_QDS {
                let (read, write) = match o {
                    ull::Op::Read => (Some(headline(read_bw(qd))), None),
                    ull::Op::Write => (None, Some(headline(write_bw(qd)))),
                };
                let id = ull::qd_id("zssd", rw, qd);
                results.insert(
                    id.clone(),
                    RunResult {
                        id,
                        config_hash: String::new(),
                        device: "zssd".into(),
                        host: ull::HOST.into(),
                        job: rw.into(),
                        simulated_ns: 1,
                        read,
                        write,
                        cpu: CpuUse {
                            kernel_pct: 0.0,
                            user_pct: 0.0,
                        },
                        system: None,
                    },
                );
            }
        }
        let depths = ull::BANDWIDTH_QDS.len() as f64;
        let expected: f64 = ull::BANDWIDTH_QDS
            .iter()
            .map(|&qd| 100.0 * write_bw(qd) / 3_550e6)
            .sum::<f64>()
            / depths;
        let same_depth_reads: f64 = ull::BANDWIDTH_QDS
            .iter()
            .map(|&qd| 100.0 * write_bw(qd) / read_bw(qd))
            .sum::<f64>()
            / depths;
        assert!(same_depth_reads > 100.0 && expected < 100.0);
        let rows = ull(&results);
        for id in [
            "zssd.write_bw_utilization.sequential",
            "zssd.write_bw_utilization.random",
        ] {
            let row = rows.iter().find(|r| r.id == id).expect(id);
            let got = row.estimate.as_ref().expect("an estimate").value;
            assert!((got - expected).abs() < 1e-9, "{id}: {got} vs {expected}");
        }
    }

    #[test]
    fn a_five_nines_needs_a_million_ios_for_ten_samples() {
        assert!(samples_above_p99999(1_000_000) >= MIN_TAIL_SAMPLES);
        assert!(samples_above_p99999(800_000) < MIN_TAIL_SAMPLES);
    }
}
