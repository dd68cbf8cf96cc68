//! Named stacks: the configurations the studies compare, usable on any system run as
//! `ullstack sim --stack NAME` (`--stack list` prints them).
//!
//! A published design is a set of switches across the layers: FastDrain's `fd-buf` turns on the
//! flusher's victimization hint in the host *and* watermark eviction in the device. A [`Stack`]
//! names such a set once, so a study, a test and a user at the command line mean the same
//! thing by `fd-buf`. Each stack lists the config keys it sets, in the system file's own TOML
//! form (`("host.pagecache.victim_hint", "\"on\"")`), and may be based on another stack: its
//! full setting list is its ancestors' settings, oldest first, then its own (so the studies'
//! "each adding to the one before" is written down once, as `based_on`).
//!
//! Applying a stack merges its keys into the system file's `[host]` and `[device]` tables before
//! they are parsed, so a stack can set exactly what a file can and the usual checks (unknown
//! keys, bad values) apply. A key the file also sets to a *different* value is an error naming
//! both (a silent override would make a run claim a stack it did not run); the same value is
//! fine. Keys the file leaves out come from the presets, as always.
//!
//! Worked example: `ullstack sim --system corun.toml --stack fd` on a file that sets only
//! `[device] preset = "nvme-tlc"` runs with `host.pagecache.victim_hint = "on"`,
//! `device.cache.drain = "fastdrain"` (from `fd-buf`), `device.ftl.alloc = "latency-aware"`
//! (`fd-ftl`) and `host.pagecache.adaptive_dirty = "on"` (`fd`); the summary names the stack
//! and those four switches. Had the file set `[device.cache] drain = "oracle"`, the run would
//! stop with an error naming both `drain` values.
//!
//! The families live one per file: [`flashshare`] (latency classes across the stack) and
//! [`fastdrain`] (write-back without buffer overflow). `vanilla`,
//! the stock stack that sets nothing, lives here; the [`Stack`] type they all fill in is
//! `stack/def.rs`'s.

mod def;
pub mod fastdrain;
pub mod flashshare;

pub use def::Stack;
use serde::{Deserialize, Serialize};

/// The stock stack: every switch at its preset's value.
pub static VANILLA: Stack = Stack {
    name: "vanilla",
    based_on: None,
    about: "the stock stack: every switch as its preset has it",
    sets: &[],
};

/// Every stack, in the order `--stack list` prints them.
pub fn all() -> Vec<&'static Stack> {
    let mut all = vec![&VANILLA];
    all.extend(flashshare::STACKS.iter());
    all.extend(fastdrain::STACKS.iter());
    all
}

/// The stack called `name`, or an error listing the known ones.
pub fn find(name: &str) -> Result<&'static Stack, String> {
    all().into_iter().find(|s| s.name == name).ok_or_else(|| {
        let known: Vec<&str> = all().iter().map(|s| s.name).collect();
        format!("unknown stack `{name}`; known stacks: {}", known.join(", "))
    })
}

/// What a run's summary says about its stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackInfo {
    pub name: String,
    pub based_on: Option<String>,
    /// `key = value`, ancestors' first.
    pub switches: Vec<String>,
}

impl Stack {
    /// Every setting of the stack: its ancestors' (oldest first), then its own.
    pub fn settings(&self) -> Vec<(&'static str, &'static str)> {
        let mut chain = vec![self];
        while let Some(base) = chain.last().and_then(|s| s.based_on) {
            let base = find(base).unwrap_or_else(|e| panic!("stack `{}`: {e}", self.name));
            assert!(
                chain.len() < 16 && !chain.iter().any(|s| s.name == base.name),
                "stack `{}`: `based_on` loops through `{}`",
                self.name,
                base.name
            );
            chain.push(base);
        }
        chain
            .iter()
            .rev()
            .flat_map(|s| s.sets.iter().copied())
            .collect()
    }

    pub fn info(&self) -> StackInfo {
        StackInfo {
            name: self.name.to_string(),
            based_on: self.based_on.map(str::to_string),
            switches: self
                .settings()
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect(),
        }
    }

    /// Merges the stack's settings into a system file's `[host]` and `[device]` tables (see
    /// the module essay); a key the file sets to another value is an error naming both.
    pub fn apply(&self, host: &mut toml::Table, device: &mut toml::Table) -> Result<(), String> {
        for (key, text) in self.settings() {
            let value = parse_value(text)
                .map_err(|e| format!("stack `{}`: {key} = {text}: {e}", self.name))?;
            let (table, path) = match key.split_once('.') {
                Some(("host", rest)) => (&mut *host, rest),
                Some(("device", rest)) => (&mut *device, rest),
                _ => {
                    return Err(format!(
                        "stack `{}`: key `{key}` is under neither `host.` nor `device.`",
                        self.name
                    ))
                }
            };
            let mut parts: Vec<&str> = path.split('.').collect();
            let leaf = parts.pop().expect("split yields at least one part");
            let mut at = table;
            for part in parts {
                let entry = at
                    .entry(part.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                at = match entry {
                    toml::Value::Table(t) => t,
                    other => {
                        return Err(format!(
                            "stack `{}` sets {key}, but the system file sets `{part}` to {other}, not a table",
                            self.name
                        ))
                    }
                };
            }
            match at.get(leaf) {
                Some(existing) if *existing != value => {
                    return Err(format!(
                    "stack `{}` sets {key} = {text}, but the system file sets {key} = {existing}: \
                         remove one of them",
                    self.name
                ))
                }
                _ => {
                    at.insert(leaf.to_string(), value);
                }
            }
        }
        Ok(())
    }
}

fn parse_value(text: &str) -> Result<toml::Value, String> {
    let mut t: toml::Table = toml::from_str(&format!("v = {text}")).map_err(|e| e.to_string())?;
    t.remove("v").ok_or_else(|| "no value".to_string())
}

/// The `--stack list` text: each stack, what it is based on, and the switches it sets.
pub fn list_text() -> String {
    let mut out = String::new();
    for s in all() {
        out.push_str(&format!("{:<18} {}\n", s.name, s.about));
        if let Some(b) = s.based_on {
            out.push_str(&format!("{:<18} based on {b}\n", ""));
        }
        for (k, v) in s.settings() {
            out.push_str(&format!("{:<18}   {k} = {v}\n", ""));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_base_is_known() {
        let all = all();
        for (i, s) in all.iter().enumerate() {
            assert!(
                all[..i].iter().all(|t| t.name != s.name),
                "two stacks are called `{}`",
                s.name
            );
            if let Some(b) = s.based_on {
                find(b).unwrap();
            }
            for (_, text) in s.settings() {
                parse_value(text).unwrap_or_else(|e| panic!("{}: {text}: {e}", s.name));
            }
        }
        let e = find("fastdrian").unwrap_err();
        assert!(e.contains("fastdrian") && e.contains("fd-buf"), "{e}");
    }

    #[test]
    fn a_stack_adds_its_settings_after_its_ancestors() {
        let fd = find("fd").unwrap();
        let keys: Vec<&str> = fd.settings().iter().map(|s| s.0).collect();
        assert_eq!(
            keys,
            [
                "host.pagecache.victim_hint",
                "device.cache.drain",
                "device.ftl.alloc",
                "host.pagecache.adaptive_dirty"
            ]
        );
        assert!(VANILLA.settings().is_empty());
    }

    #[test]
    fn a_conflicting_key_is_an_error_naming_both_values_and_an_equal_one_is_not() {
        let fd_buf = find("fd-buf").unwrap();
        let mut host = toml::Table::new();
        let mut device: toml::Table = toml::from_str("[cache]\ndrain = \"oracle\"\n").unwrap();
        let e = fd_buf.apply(&mut host, &mut device).unwrap_err();
        assert!(
            e.contains("device.cache.drain = \"fastdrain\"")
                && e.contains("device.cache.drain = \"oracle\"")
                && e.contains("fd-buf"),
            "{e}"
        );
        let mut device: toml::Table = toml::from_str("[cache]\ndrain = \"fastdrain\"\n").unwrap();
        fd_buf.apply(&mut host, &mut device).unwrap();
        assert_eq!(host["pagecache"]["victim_hint"].as_str(), Some("on"));
    }
}
