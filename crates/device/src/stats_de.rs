//! Reading the device's counters back from `summary.json` (`Deserialize`).
//!
//! The counters derive `Deserialize` beside their `Serialize`, with `default` on every field the
//! summary leaves out while it is 0 or absent, so a summary reads back to the stats that wrote
//! it. Two kinds of field need more than a derive:
//!
//! - **Names from a fixed set** (`drain.mode`, a ghost group's `class`, `ftl.alloc.policy`) are
//!   `&'static str` in the stats. [`one_of`] reads the name and returns the matching static
//!   string, refusing a name the simulator never writes.
//! - **The FTL's counters** ([`FtlStats`], [`AllocStats`]) are read through the remote
//!   definitions below. serde builds the real structs from them field by field, so a counter
//!   added to either struct and not here is a compile error, not a silently dropped field.

use serde::de::{Deserializer, Error};
use serde::Deserialize;

use crate::ftl::{AllocStats, FtlStats};

/// A name from a fixed set, as the stats hold it. Spelled through this alias so that serde's
/// derive does not take the field for a borrowed `&str`, which would tie the input read to
/// `'static`; such a field is read with [`one_of`].
pub type StaticName = &'static str;

/// Reads a string that must be one of `names`, giving back the static one.
pub fn one_of<'de, D: Deserializer<'de>>(
    d: D,
    names: &[&'static str],
) -> Result<&'static str, D::Error> {
    let s = String::deserialize(d)?;
    names
        .iter()
        .find(|n| **n == s)
        .copied()
        .ok_or_else(|| D::Error::custom(format!("`{s}` is not one of {names:?}")))
}

/// `ftl.alloc.policy`: an `ftl.alloc` policy's name as its stats give it.
fn alloc_policy<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    one_of(d, &["sequential", "lsb-skip", "latency-aware"])
}

#[derive(Deserialize)]
#[serde(remote = "AllocStats")]
struct AllocStatsDef {
    #[serde(deserialize_with = "alloc_policy")]
    policy: StaticName,
    host_rows_lsb: u64,
    host_rows_csb: u64,
    host_rows_msb: u64,
    pages_skipped: u64,
    foreground_fallbacks: u64,
    lsb_region_superblocks_max: u64,
}

#[derive(Deserialize)]
struct AllocStatsIn(#[serde(with = "AllocStatsDef")] AllocStats);

fn alloc<'de, D: Deserializer<'de>>(d: D) -> Result<Option<AllocStats>, D::Error> {
    Ok(Option::<AllocStatsIn>::deserialize(d)?.map(|a| a.0))
}

#[derive(Deserialize)]
#[serde(remote = "FtlStats")]
struct FtlStatsDef {
    host_units_programmed: u64,
    gc_units_programmed: u64,
    units_wasted: u64,
    gc_runs: u64,
    erases: u64,
    trims: u64,
    bad_blocks: u64,
    blocks_remapped: u64,
    superblocks_retired: u64,
    #[serde(default, deserialize_with = "alloc")]
    alloc: Option<AllocStats>,
}

/// `device.ftl` (the field attribute `DeviceStats` reads it with).
pub fn ftl<'de, D: Deserializer<'de>>(d: D) -> Result<FtlStats, D::Error> {
    FtlStatsDef::deserialize(d)
}

#[cfg(test)]
mod tests {
    use serde::de::value::{Error, StrDeserializer};

    use super::*;
    use crate::config::Alloc;

    fn policy(name: &str) -> String {
        match alloc_policy(StrDeserializer::<Error>::new(name)) {
            Ok(n) => n.to_string(),
            Err(e) => e.to_string(),
        }
    }

    /// Every `ftl.alloc` policy reads back by the name its config spells (the allocator's
    /// stats use the same), and a name outside the set is refused, naming the set.
    #[test]
    fn the_alloc_policies_read_back_by_name_and_an_unknown_name_is_refused() {
        for alloc in [Alloc::Sequential, Alloc::LsbSkip, Alloc::LatencyAware] {
            let name = toml::Value::try_from(alloc).unwrap();
            let name = name.as_str().unwrap();
            assert_eq!(policy(name), name);
        }
        let e = policy("lsb_skip");
        assert!(
            e.contains("`lsb_skip` is not one of") && e.contains("lsb-skip"),
            "{e}"
        );
    }
}
