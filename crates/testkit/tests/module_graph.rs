//! The workspace's layout rule, checked: within each crate, modules depend on each other without
//! a cycle (STYLE.md §1: the layout is the architecture; a cycle means two modules that cannot be
//! read, tested or replaced apart).
//!
//! # The graph
//! A node is a module as its file names it: `src/lib.rs` and `src/main.rs` are the crate root,
//! `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs` is `a::b`, at any depth. An edge `m → n` is
//! a path in `m`'s code that names `n` or an item in it:
//! - `crate::a::b::X` from anywhere;
//! - `super::X`, `super::super::X`, `self::x::Y`, relative to `m`;
//! - `child::X` where `child` is a module declared under `m` (Rust 2018 paths: the parent's own
//!   children need no prefix);
//! - every leaf of a grouped import, at any depth (`use super::{a::X, b::{c::Y, self}}`).
//!
//! A path resolves to the deepest module it names: `crate::a::b::X` is `a::b` when `src/a/b.rs`
//! exists, else `a` (then `b` is an item of `a`). Paths into the module itself are no edges.
//!
//! # The check
//! No crate's graph may hold a cycle, a parent and its own child using each other included:
//! each strongly connected component of more than one module fails the test, with one cycle
//! through it named. Break one by moving what the modules share into a module that names none of
//! them (a crate root that only declares and re-exports; a parent holding the types its children
//! read, with whatever uses a child in a sibling module).
//!
//! What it leaves out: code in `#[cfg(test)]` blocks (a test module may use its siblings; test
//! modules sit at the end of a file in this workspace), comments, `pub use` re-exports (a parent
//! that re-exports its children is their facade, not a user of them: a child importing a
//! sibling's item through it still depends on the parent, and that edge is counted), inline
//! `mod x { … }` blocks (only test modules are inline here), `#[path]` attributes (none here),
//! and macros' expansions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`[]` is the root).
type Module = Vec<String>;
type Graph = BTreeMap<Module, BTreeSet<Module>>;

fn crates_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, as (path relative to `root`, text).
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).expect("under src").to_path_buf();
            out.push((rel, std::fs::read_to_string(&path).expect("read source")));
        }
    }
}

/// The module a file under `src/` holds (see the module essay).
fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(".rs").to_string();
    }
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// The code of a file without line comments, without `pub use` re-exports and without
/// everything from its first `#[cfg(test)]` on.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    let uncommented: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    // Re-exports run to their `;`, over lines.
    let mut out = String::new();
    let mut rest = uncommented.as_str();
    while let Some(i) = find_reexport(rest) {
        out.push_str(&rest[..i]);
        rest = match rest[i..].find(';') {
            Some(end) => &rest[i + end + 1..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// Where the next `pub use` / `pub(crate) use` / `pub(super) use` starts.
fn find_reexport(code: &str) -> Option<usize> {
    ["pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .filter_map(|p| {
            code.match_indices(p)
                .map(|(i, _)| i)
                .find(|&i| i == 0 || !is_ident_byte(code.as_bytes()[i - 1]))
        })
        .min()
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The paths a use tree starting at `s` names, each as its segments after the start
/// (`a::{b::X, c}` gives `[a, b, X]` and `[a, c]`; `self` in a group names the group's prefix).
fn use_tree(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    let mut s = s.trim_start();
    loop {
        if let Some(group) = s.strip_prefix('{') {
            for item in top_level_items(group) {
                use_tree(item, &path, out);
            }
            return;
        }
        let name = ident_at(s);
        if name.is_empty() {
            break;
        }
        if name != "self" {
            path.push(name.to_string());
        }
        let after = s[name.len()..].trim_start();
        match after.strip_prefix("::") {
            Some(next) => s = next.trim_start(),
            None => break,
        }
    }
    out.push(path);
}

/// The depth-1 comma-separated items of a group whose `{` has been taken.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 1;
    let mut start = 0;
    for (j, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    items.push(&group[start..j]);
                    break;
                }
            }
            ',' if depth == 1 => {
                items.push(&group[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    items.retain(|i| !i.trim().is_empty());
    items
}

/// The modules `code`, the code of module `me`, names (see the module essay); `modules` is every
/// module of the crate.
fn deps_of(code: &str, me: &Module, modules: &BTreeSet<Module>) -> BTreeSet<Module> {
    let children: BTreeSet<&str> = modules
        .iter()
        .filter(|m| m.len() == me.len() + 1 && m.starts_with(me))
        .map(|m| m[me.len()].as_str())
        .collect();
    let bytes = code.as_bytes();
    let mut deps = BTreeSet::new();
    let mut i = 0;
    while i < code.len() {
        let at_token = (i == 0 || !(is_ident_byte(bytes[i - 1]) || bytes[i - 1] == b'$'))
            && is_ident_byte(bytes[i]);
        if !at_token || !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let name = ident_at(&code[i..]);
        let preceded_by_path = code[..i].trim_end().ends_with("::");
        let after = code[i + name.len()..].trim_start();
        if preceded_by_path || !after.starts_with("::") {
            i += name.len().max(1);
            continue;
        }
        let base: Option<Module> = match name {
            "crate" => Some(Vec::new()),
            "self" => Some(me.clone()),
            "super" => me.split_last().map(|(_, parent)| parent.to_vec()),
            child if children.contains(child) => Some(me.clone()),
            _ => None,
        };
        if let Some(base) = base {
            // `super::super::x` and `self::x` are walked by the tree below; a child's name is
            // the tree's first segment.
            let tree_start = if children.contains(name) {
                i
            } else {
                i + name.len() + (code[i + name.len()..].len() - after.len()) + 2
            };
            let mut paths = Vec::new();
            use_tree(&code[tree_start..], &[], &mut paths);
            for path in paths {
                let mut module = base.clone();
                let mut segments = path.iter().peekable();
                while segments.peek().is_some_and(|s| *s == "super") {
                    segments.next();
                    module.pop();
                }
                for seg in segments {
                    let mut deeper = module.clone();
                    deeper.push(seg.clone());
                    if !modules.contains(&deeper) {
                        break;
                    }
                    module = deeper;
                }
                if module != *me {
                    deps.insert(module);
                }
            }
        }
        i += name.len();
    }
    deps
}

/// Module → the crate's other modules it uses, from the crate's files (path under `src/`, text).
fn module_graph(files: &[(PathBuf, String)]) -> Graph {
    // `src/bin/*.rs` are crates of their own; the graph is the library's or the binary's.
    let files: Vec<&(PathBuf, String)> = files
        .iter()
        .filter(|(rel, _)| !rel.starts_with("bin"))
        .collect();
    let modules: BTreeSet<Module> = files.iter().map(|(rel, _)| module_of(rel)).collect();
    let mut graph = Graph::new();
    for (rel, text) in files {
        let me = module_of(rel);
        let deps = deps_of(&code_of(text), &me, &modules);
        graph.entry(me).or_default().extend(deps);
    }
    graph
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// A cycle of the graph, if it has one (depth-first search with colours).
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        White,
        Grey,
        Black,
    }
    fn visit(
        v: &Module,
        graph: &Graph,
        colour: &mut BTreeMap<Module, Colour>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<String>> {
        colour.insert(v.clone(), Colour::Grey);
        stack.push(v.clone());
        for w in graph.get(v).into_iter().flatten() {
            match colour.get(w).copied().unwrap_or(Colour::Black) {
                Colour::Grey => {
                    let from = stack.iter().position(|s| s == w).expect("on stack");
                    let mut cycle: Vec<String> = stack[from..].iter().map(name).collect();
                    cycle.push(name(w));
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
        colour.insert(v.clone(), Colour::Black);
        None
    }
    let mut colour: BTreeMap<Module, Colour> =
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

/// The strongly connected components of more than one module (Tarjan's algorithm): every
/// cycle of the graph lies within one of them.
fn cyclic_components(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        out: Vec<Vec<String>>,
    }
    fn connect<'g>(v: &'g Module, s: &mut State<'g>) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flatten() {
            let Some((w, _)) = graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                connect(w, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(name(w));
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            connect(v, &mut s);
        }
    }
    s.out.sort();
    s.out
}

/// One cycle through the modules of `component` (a strongly connected component of `graph`),
/// to name in a failure.
fn cycle_within(graph: &Graph, component: &[String]) -> Vec<String> {
    let within: Graph = graph
        .iter()
        .filter(|(m, _)| component.contains(&name(m)))
        .map(|(m, d)| (m.clone(), d.clone()))
        .collect();
    find_cycle(&within).unwrap_or_default()
}

#[test]
fn no_crate_has_a_cycle_between_its_modules() {
    let mut failures = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(crates_dir()).expect("crates/").flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        let krate = entry.file_name().to_string_lossy().into_owned();
        let mut files = Vec::new();
        rust_files(&src, &src, &mut files);
        let graph = module_graph(&files);
        for component in cyclic_components(&graph) {
            failures.push(format!(
                "{krate}: {} (the cycle's component: {})",
                cycle_within(&graph, &component).join(" → "),
                component.join(", ")
            ));
        }
    }
    assert!(crates >= 10, "found only {crates} crates under crates/");
    assert!(
        failures.is_empty(),
        "module import cycles:\n{}",
        failures.join("\n")
    );
}

/// A synthetic crate from (path under `src/`, text) pairs.
fn tree(files: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
    files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect()
}

fn module(path: &str) -> Module {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn paths_resolve_to_the_deepest_module_they_name() {
    let files = tree(&[
        ("lib.rs", "pub mod cpu;\npub mod blk;\npub use blk::Blk;"),
        (
            "cpu.rs",
            "use crate::{blk::{queue::{Rq, self}, Blk}, nvme};",
        ),
        ("blk/mod.rs", "mod queue;\nfn f() { queue::Rq::new(); }"),
        (
            "blk/queue.rs",
            "use super::super::cpu::Core; use self::inner::X;",
        ),
        (
            "nvme.rs",
            "use super::blk::queue as q; let y = $crate::cpu::A; // crate::cpu",
        ),
    ]);
    let graph = module_graph(&files);
    let deps = |m: &str| -> Vec<String> { graph[&module(m)].iter().map(name).collect() };
    // The root's `pub use` is a re-export, not a use.
    assert!(deps("").is_empty(), "{:?}", deps(""));
    assert_eq!(deps("cpu"), ["blk", "blk::queue", "nvme"]);
    assert_eq!(deps("blk"), ["blk::queue"]);
    assert_eq!(deps("blk::queue"), ["cpu"]);
    assert_eq!(deps("nvme"), ["blk::queue"]);
    let cycle = find_cycle(&graph).expect("cpu → blk::queue → cpu");
    assert!(cycle.contains(&"cpu".to_string()) && cycle.contains(&"blk::queue".to_string()));
}

/// The cycle the old `crates/cli/src/calibrate/` had, between two nested modules through
/// `super::`, which a checker of top-level `crate::` paths could not see.
#[test]
fn the_checker_finds_a_cycle_between_nested_modules_through_super() {
    let old = tree(&[
        ("main.rs", "mod calibrate;\nfn main() { calibrate::run(); }"),
        ("calibrate/mod.rs", "mod nbd;\nmod target;\nuse target::Target;\npub fn run() {}"),
        ("calibrate/target.rs", "use super::nbd::NbdUri;\npub const HEAD_BYTES: usize = 1;"),
        (
            "calibrate/nbd.rs",
            "use super::target::{signature, HEAD_BYTES};\npub struct NbdUri;\n#[cfg(test)]\nuse super::Target;",
        ),
    ]);
    let cycle = find_cycle(&module_graph(&old)).expect("the old cycle");
    assert_eq!(cycle.first(), cycle.last());
    let mut found: Vec<&str> = cycle.iter().map(String::as_str).collect();
    found.sort_unstable();
    found.dedup();
    assert_eq!(found, ["calibrate::nbd", "calibrate::target"]);
    // With the shared pieces in a module both use, there is none.
    let new = tree(&[
        (
            "lib.rs",
            "mod nbd;\nmod signature;\nmod target;\npub use target::Target;",
        ),
        ("signature.rs", "pub const HEAD_BYTES: usize = 1;"),
        (
            "target.rs",
            "use crate::nbd::NbdUri;\nuse crate::signature::signature;",
        ),
        (
            "nbd.rs",
            "use crate::signature::{signature, HEAD_BYTES};\npub struct NbdUri;",
        ),
    ]);
    assert_eq!(find_cycle(&module_graph(&new)), None);
}

/// A parent that uses its child while the child uses the parent's items through `super::` is a
/// cycle (the shape `study`'s flashshare ↔ flashshare::knee had: the parent's run list called
/// the child's, the child read the parent's constants); the component names both, and with
/// the run list in a sibling the parent names no child and there is none.
#[test]
fn the_checker_finds_a_parent_and_child_using_each_other() {
    let old = tree(&[
        ("lib.rs", "pub mod study;"),
        (
            "study.rs",
            "pub mod knee;\npub const HOST: &str = \"h\";\npub fn runs() { knee::runs(); }",
        ),
        ("study/knee.rs", "use super::HOST;\npub fn runs() {}"),
    ]);
    let graph = module_graph(&old);
    assert_eq!(cyclic_components(&graph), [["study", "study::knee"]]);
    let cycle = cycle_within(&graph, &["study".into(), "study::knee".into()]);
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 3, "{cycle:?}");
    let new = tree(&[
        ("lib.rs", "pub mod study;"),
        (
            "study.rs",
            "pub mod knee;\nmod run_list;\npub use run_list::runs;\npub const HOST: &str = \"h\";",
        ),
        ("study/knee.rs", "use super::HOST;\npub fn runs() {}"),
        (
            "study/run_list.rs",
            "use super::knee;\npub fn runs() { knee::runs(); }",
        ),
    ]);
    assert!(cyclic_components(&module_graph(&new)).is_empty());
}

#[test]
fn comments_tests_and_other_crates_are_not_edges() {
    let code = code_of("// crate::a\nlet b = 1; // crate::c\npub use crate::e::{\n X,\n};\nuse crate::f;\n#[cfg(test)]\nuse crate::d;");
    assert!(!code.contains("crate::a") && !code.contains("crate::c"));
    assert!(!code.contains("crate::d") && !code.contains("crate::e"));
    assert!(code.contains("crate::f"));
    let modules: BTreeSet<Module> = [module(""), module("a"), module("io")]
        .into_iter()
        .collect();
    // `std::io::Read` and `proto::nbd` are not this crate's `io` and `nbd`.
    let deps = deps_of(
        "use std::io::Read; use proto::nbd; mycrate::a::X;",
        &module(""),
        &modules,
    );
    assert!(deps.is_empty(), "{deps:?}");
}
