//! The tenant spec `ullstack bench` takes lives in crate `workload` ([`workload::remote`]) so
//! the simulated remote server (`sim::remote`) reads the very same files; this module re-exports
//! it under its old path and converts its write mode to the wire's.

pub use workload::remote::*;

/// The wire's write mode for a spec's.
pub fn wire_write_mode(mode: WriteMode) -> proto::wire::WriteMode {
    match mode {
        WriteMode::WriteBack => proto::wire::WriteMode::WriteBack,
        WriteMode::Fua => proto::wire::WriteMode::Fua,
    }
}

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
