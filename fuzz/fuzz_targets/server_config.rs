//! Arbitrary text through the server's TOML config parser and validator: a config file is
//! operator input, but a mistake in it must be an error naming the key, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = server::config::ServerConfig::from_toml_str(text) {
            let _ = e.to_string();
        }
    }
});
