//! The attribute every I/O carries through every layer (architecture rule 1).
//!
//! A process is latency-critical or throughput; each record made for its I/O — page-cache
//! write-back included — keeps that class on the copies it makes, down to the NVMe command's
//! reserved field and into the SSD's firmware. Statistics split by it.

use serde::{Deserialize, Serialize};

/// Workload class of an I/O (the published `chworkload_attr` attribute).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum IoClass {
    LatencyCritical,
    #[default]
    Throughput,
}

impl IoClass {
    pub const ALL: [IoClass; 2] = [IoClass::LatencyCritical, IoClass::Throughput];

    /// Index for per-class arrays.
    pub const fn index(self) -> usize {
        match self {
            IoClass::LatencyCritical => 0,
            IoClass::Throughput => 1,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            IoClass::LatencyCritical => "latency-critical",
            IoClass::Throughput => "throughput",
        }
    }
}

/// What an I/O does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoOp {
    Read,
    Write,
    Flush,
    Trim,
}
