//! `fastdrain`'s rows of `reference/published.toml`: each stack's p99 over vanilla's, over the
//! replicates present ([`crate::published::replicates`]).

use super::{fastdrain_pair, WORKLOADS};
use crate::published::{paired_ratio, Kind, Pair, Simulated};
use crate::results::Results;

/// `fastdrain`: each stack's p99 over vanilla's, mean over the six workloads.
pub fn published(results: &Results) -> Vec<Simulated> {
    const IDS: [(&str, &str); 4] = [
        ("fd-buf", "p99.fd-buf"),
        ("fd-ftl", "p99.fd-ftl"),
        ("fd", "p99.fd"),
        ("oracle", "p99.oracle"),
    ];
    IDS.iter()
        .map(|&(stack, id)| {
            let pairs: Option<Vec<Pair>> = WORKLOADS
                .iter()
                .map(|w| fastdrain_pair(results, stack, w))
                .collect();
            let est = pairs.and_then(|p| paired_ratio(&p, &format!("fastdrain/{id}")));
            Simulated::new(id, Kind::Ratio, est)
        })
        .collect()
}
