//! The tenant spec `ullstack bench` takes lives in crate `scenario` so the simulated remote
//! server (`sim::remote`) reads the very same files; this module re-exports it under its old
//! path and checks the scenario files shipped beside this crate.

pub use scenario::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_scenarios_parse() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let s = parse_scenario(&text, &path.display().to_string()).unwrap();
            assert!(!s.tenants.is_empty(), "{}", path.display());
            n += 1;
        }
        assert!(n >= 5);
    }
}
