//! The examples we ship must work against the server: every secret in the bench scenarios
//! (`crates/client/scenarios/*.toml`) is one a server config accepts (at least 8 characters).

use server::config::ServerConfig;

#[test]
fn scenario_secrets_are_accepted_by_the_server() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../client/scenarios");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).expect("scenarios dir") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("read scenario");
        let scenario = client::bench::spec::parse_scenario(&text, &path.display().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for t in scenario.tenants.iter().filter(|t| !t.secret.is_empty()) {
            let toml = format!(
                "[[volume]]\nname = \"default\"\nbackend = {{ kind = \"memory\", size = \"1MiB\" }}\n\
                 [[tenant]]\nname = \"{}\"\nsecret = \"{}\"\nclass = \"be\"\n\
                 acl = [{{ volume = \"default\", access = \"read-write\" }}]\n",
                t.name, t.secret
            );
            if let Err(e) = ServerConfig::from_toml_str(&toml) {
                panic!("{}: tenant {:?}: {e}", path.display(), t.name);
            }
            checked += 1;
        }
    }
    assert!(checked >= 8, "only {checked} secrets found");
}
