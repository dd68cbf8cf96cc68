//! Reading the device's counters back from `summary.json` (`Deserialize`).
//!
//! The counters derive `Deserialize` beside their `Serialize`, with `default` on every field the
//! summary leaves out while it is 0 or absent, so a summary reads back to the stats that wrote
//! it. One kind of field needs more than a derive: a **name from a fixed set** (`drain.mode`, a
//! ghost group's `class`, `ftl.alloc.policy`) is a `&'static str` in the stats, and [`one_of`]
//! reads the name and returns the matching static string, refusing a name the simulator never
//! writes.

use serde::de::{Deserializer, Error};
use serde::Deserialize;

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
pub(crate) fn alloc_policy<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    one_of(d, &["sequential", "lsb-skip", "latency-aware"])
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
