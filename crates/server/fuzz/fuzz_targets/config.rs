//! `cargo fuzz run -s none config` (from crates/server): arbitrary bytes into the config
//! parser and validator. It must return Ok or an error, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = server::config::from_toml_str(text);
    }
});
