//! `flashshare`'s rows of `reference/published.toml`: the motivation (apache + pagerank vs
//! alone, vanilla) and each stack's average and p99 response time over vanilla's, over the
//! replicates present ([`crate::published::replicates`]).

use crate::published::replicates::{pair, present, stat_over, Stat, AVG, P95, P99};
use crate::published::{level, paired_ratio, Kind, Pair, Simulated};
use crate::results::Results;

/// `flashshare`: the motivation (apache + pagerank vs alone, vanilla) and each stack's mean
/// average and p99 response time over all 30 online/offline pairs, normalised to vanilla.
pub fn published(results: &Results) -> Vec<Simulated> {
    let runs = |stack: &str, online: &str, partner: &str| {
        present(results, |r| super::replicate_id(stack, online, partner, r))
    };
    let corun = runs("vanilla", "apache", "pagerank");
    let alone = runs("vanilla", "apache", super::ALONE);
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
            let pairs: Option<Vec<Pair>> = super::ONLINE
                .iter()
                .flat_map(|online| super::OFFLINE.iter().map(move |off| (online, off)))
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
