//! The on/off switch every model's config uses for a mechanism it can leave out.
//!
//! A config file reads `super_channel = "on"` or `lc_queue = "off"`: a word, not a boolean, so
//! a mode that later grows a third setting becomes an enum of its own without changing how the
//! files that set it to on or off read. `device` and `host` configs share this one type; their
//! modes with more than two settings (`drain`, `completion`, …) are enums of their own.

use serde::{Deserialize, Serialize};

/// A mechanism that is on or off (`"on"` / `"off"` in config files and reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Switch {
    Off,
    On,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Cfg {
        mode: Switch,
    }

    #[test]
    fn reads_and_writes_as_the_words_on_and_off() {
        for (switch, word) in [(Switch::On, "on"), (Switch::Off, "off")] {
            let text = format!("mode = \"{word}\"\n");
            assert_eq!(toml::to_string(&Cfg { mode: switch }).unwrap(), text);
            assert_eq!(toml::from_str::<Cfg>(&text).unwrap(), Cfg { mode: switch });
        }
        assert!(
            toml::from_str::<Cfg>("mode = true\n").is_err(),
            "a boolean is refused"
        );
    }
}
