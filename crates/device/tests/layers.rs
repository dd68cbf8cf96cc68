//! The module dependency order of the device model (lib.rs's essay, "Modules, by layer"):
//! each module uses only the modules its row allows, so there is no cycle and a reader finds a
//! mechanism by its layer. Checked on the source text, outside each file's tests.

/// `(module, modules it may use)`, in dependency order.
const ALLOWED: &[(&str, &[&str])] = &[
    ("config", &[]),
    ("sys", &[]),
    ("stats_de", &[]),
    ("pcie", &["config"]),
    ("ctrl", &["config"]),
    ("flash", &["config"]),
    ("ftl", &["config", "flash", "stats_de", "sys"]),
    ("cache_split", &["config"]),
    ("ghost", &["config", "stats_de"]),
    ("cache_index", &[]),
    (
        "cache",
        &["config", "cache_index", "cache_split", "ghost", "sys"],
    ),
    ("drain", &["config", "stats_de"]),
];

/// The modules named after `crate::` in `code` (`crate::x::…` and `crate::{x, y::…}`).
fn used_modules(code: &str) -> Vec<String> {
    let mut used = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => group[..group.find('}').unwrap_or(group.len())]
                .split(',')
                .collect(),
            None => vec![rest],
        };
        for name in names {
            let name: String = name
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                used.push(name);
            }
        }
    }
    used
}

/// Files of `lib.rs`'s own state machine, split from it by idea: they add methods to `Ssd` and
/// may use `lib.rs` and every layer, as `lib.rs` does; no layer may use them.
const ROUTER_PARTS: &[&str] = &[
    "routing",
    "read_path",
    "write_path",
    "flash_done",
    "summary",
];

#[test]
fn modules_use_only_the_layers_below_them() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for &(module, allowed) in ALLOWED {
        let path = src.join(format!("{module}.rs"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for used in used_modules(code) {
            assert!(
                allowed.contains(&used.as_str()),
                "{module}.rs uses crate::{used}; its layer may use only {allowed:?} (lib.rs essay)"
            );
        }
        assert!(
            !code.contains("super::"),
            "{module}.rs reaches into lib.rs via super::; pass what it needs instead"
        );
    }
}

#[test]
fn the_check_sees_both_import_forms() {
    assert_eq!(
        used_modules("use crate::flash::Geometry;\nuse crate::{config::X, cache};"),
        ["flash", "config", "cache"]
    );
}

#[test]
fn every_module_file_is_in_the_table() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(module) = name.strip_suffix(".rs") else {
            continue;
        };
        assert!(
            module == "lib"
                || module == "tests" // lib.rs's unit tests
                || ROUTER_PARTS.contains(&module)
                || ALLOWED.iter().any(|&(m, _)| m == module),
            "src/{name} is not in the layer table: add it (and to lib.rs's essay)"
        );
    }
}
