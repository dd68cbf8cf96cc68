//! The workspace's layout rule, checked: within each crate, the top-level modules depend on each
//! other without a cycle (STYLE.md §1: the layout is the architecture; a cycle means two layers
//! that cannot be read, tested or replaced apart). Dependencies are the `crate::module` paths in
//! each module's code (comments and `#[cfg(test)]` blocks excluded).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without line comments and without everything from its first
/// `#[cfg(test)]` on (test modules sit at the end of a file in this workspace).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segments after each `crate::` (`crate::a::X`, `crate::{a::X, b}`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut deps = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        if i > 0 {
            let before = code.as_bytes()[i - 1];
            if before.is_ascii_alphanumeric() || before == b'_' || before == b'$' {
                continue; // e.g. `$crate::`, `mycrate::`
            }
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: at its start and after each depth-1 comma.
            let mut depth = 1;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => start = true,
                    c if start && !c.is_whitespace() => {
                        start = false;
                        let name = ident_at(&group[j..]);
                        if !name.is_empty() {
                            deps.insert(name.to_string());
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident_at(rest);
            if !name.is_empty() {
                deps.insert(name.to_string());
            }
        }
    }
    deps
}

/// Module → the crate's other top-level modules it uses.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component");
        let top = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read source");
        let deps = crate_paths(&code_of(&text));
        graph
            .entry(top.clone())
            .or_default()
            .extend(deps.into_iter().filter(|d| *d != top));
    }
    let names: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| names.contains(d));
    }
    graph
}

/// A cycle of the graph, if it has one (depth-first search with colours).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        White,
        Grey,
        Black,
    }
    fn visit(
        v: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        colour: &mut BTreeMap<String, Colour>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        colour.insert(v.to_string(), Colour::Grey);
        stack.push(v.to_string());
        for w in &graph[v] {
            match colour[w] {
                Colour::Grey => {
                    let from = stack.iter().position(|s| s == w).expect("on stack");
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(w.clone());
                    return Some(cycle);
                }
                Colour::White => {
                    if let Some(c) = visit(w, graph, colour, stack) {
                        return Some(c);
                    }
                }
                Colour::Black => {}
            }
        }
        stack.pop();
        colour.insert(v.to_string(), Colour::Black);
        None
    }
    let mut colour: BTreeMap<String, Colour> =
        graph.keys().map(|k| (k.clone(), Colour::White)).collect();
    for v in graph.keys() {
        if colour[v] == Colour::White {
            if let Some(c) = visit(v, graph, &mut colour, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_crate_has_a_cycle_between_its_modules() {
    let mut cycles = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(crates_dir()).expect("crates/").flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        if let Some(cycle) = find_cycle(&module_graph(&src)) {
            cycles.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                cycle.join(" → ")
            ));
        }
    }
    assert!(crates >= 10, "found only {crates} crates under crates/");
    assert!(
        cycles.is_empty(),
        "module import cycles:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_checker_sees_grouped_imports_and_finds_cycles() {
    let deps = crate_paths("use crate::{cpu::{Core, Timer}, nvme, pagecache::Lookup};\nuse crate::blk::Blk;\nlet x = $crate::no;");
    let want: BTreeSet<String> = ["cpu", "nvme", "pagecache", "blk"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(deps, want);
    assert!(
        code_of("// crate::a\nlet b = 1; // crate::c\n#[cfg(test)]\nuse crate::d;")
            .find("crate::")
            .is_none()
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    let cycle = find_cycle(&graph).expect("a → b → c → a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
}
