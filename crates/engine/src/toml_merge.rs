//! A config file is a preset plus overrides: the deep merge both model configs read theirs with.
//!
//! `device` and `host` configs are written as `preset = "zssd"` and then only the keys that
//! differ. The reader serialises the preset to a TOML table and merges the file's table over
//! it with [`deep_merge`]: a table merges key by key, at any depth; any other value (a number,
//! a string, an array) replaces the preset's whole. Every key the file sets must exist in the
//! preset, so a misspelt key is an error that names it by its dotted path and lists the keys
//! accepted beside it, rather than a setting silently ignored. E.g. over a preset with
//! `[flash] channels = 8, page_bytes = 16384`, the file `[flash] chanels = 16` gives
//! "unknown key `flash.chanels`; keys accepted here: channels, page_bytes".
//!
//! What it leaves out: types. A table may replace a number or a number a table here; the
//! config's own `Deserialize` (with `deny_unknown_fields`) rejects that after the merge.

use thiserror::Error;

/// A key the overrides set that the base does not have.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unknown key `{path}`; keys accepted here: {}", .accepted.join(", "))]
pub struct UnknownKey {
    /// The key's dotted path from the top of the document (`flash.chanels`).
    pub path: String,
    /// The keys of the base table the key was looked for in, in the table's order.
    pub accepted: Vec<String>,
}

/// Merges `over` into `base`: tables key by key at any depth, other values replace; a key
/// absent from `base` is an [`UnknownKey`].
pub fn deep_merge(base: &mut toml::Table, over: toml::Table) -> Result<(), UnknownKey> {
    merge_at(base, over, "")
}

fn merge_at(base: &mut toml::Table, over: toml::Table, path: &str) -> Result<(), UnknownKey> {
    for (key, value) in over {
        let full = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_at(b, o, &full)?,
            (Some(slot), v) => *slot = v,
            (None, _) => {
                return Err(UnknownKey {
                    path: full,
                    accepted: base.keys().cloned().collect(),
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().expect("test TOML")
    }

    const BASE: &str = "name = \"zssd\"\n\
                        [flash]\nchannels = 8\npage_bytes = 16384\n\
                        [flash.read_ns]\nlsb = 3000\nmsb = 5000\n";

    #[test]
    fn nested_tables_merge_key_by_key() {
        let mut base = table(BASE);
        deep_merge(&mut base, table("[flash.read_ns]\nmsb = 7000\n")).unwrap();
        assert_eq!(
            base,
            table(&BASE.replace("msb = 5000", "msb = 7000")),
            "only flash.read_ns.msb changes; its sibling and the outer tables stay"
        );
    }

    #[test]
    fn scalars_and_arrays_override_whole() {
        let mut base = table("n = 1\nlist = [1, 2, 3]\ns = \"a\"\n");
        deep_merge(&mut base, table("n = 2\nlist = [9]\ns = \"b\"\n")).unwrap();
        assert_eq!(base, table("n = 2\nlist = [9]\ns = \"b\"\n"));
    }

    #[test]
    fn an_empty_override_changes_nothing() {
        let mut base = table(BASE);
        deep_merge(&mut base, toml::Table::new()).unwrap();
        assert_eq!(base, table(BASE));
    }

    #[test]
    fn unknown_keys_are_refused_with_their_dotted_path_and_the_accepted_keys() {
        let mut base = table(BASE);
        let err = deep_merge(&mut base, table("[flash.read_ns]\ncsb = 1\n")).unwrap_err();
        assert_eq!(err.path, "flash.read_ns.csb");
        assert_eq!(err.accepted, ["lsb", "msb"]);
        assert_eq!(
            err.to_string(),
            "unknown key `flash.read_ns.csb`; keys accepted here: lsb, msb"
        );

        let err = deep_merge(&mut table(BASE), table("colour = 1\n")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown key `colour`; keys accepted here: flash, name"
        );
    }

    #[test]
    fn a_table_over_a_scalar_replaces_it_for_the_config_to_reject() {
        let mut base = table("n = 1\n");
        deep_merge(&mut base, table("[n]\nx = 1\n")).unwrap();
        assert_eq!(base, table("[n]\nx = 1\n"));
    }
}
