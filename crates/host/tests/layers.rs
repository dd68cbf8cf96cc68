//! The host's ownership rules (lib.rs's essay, "State is owned by its layer"), checked on the
//! source text outside each file's tests. Rust's privacy keeps most of them: `Host`'s fields
//! are private to `machine` and its children, and the state types keep theirs. What privacy
//! cannot say is checked here:
//! - a state module never imports the machine (it knows nothing of `Host` or its events);
//! - the machine's children, whose `impl Host` blocks could name a private field of their
//!   parent, use the machine's own bookkeeping only through its primitives (`now()`,
//!   `schedule()`, `cost()`, …);
//! - the children do not import each other, and `machine` names none of them (they call each
//!   other's methods on `Host`), so every dependency runs child → machine.

use std::path::{Path, PathBuf};

/// The state modules: each layer's state and the operations on it alone.
const STATE_MODULES: &[&str] = &[
    "config",
    "jitter",
    "pagecache",
    "flusher",
    "exectime",
    "cpu",
    "process",
    "blk",
    "blk_bypass",
    "nvme",
    "accel",
    "task",
    "breakdown",
];

/// The machine's children: each layer's behaviour, an `impl Host` block.
const BEHAVIOUR_MODULES: &[&str] = &[
    "spawn",
    "app",
    "fio",
    "syscall",
    "blk_submit",
    "kblockd",
    "nvme_complete",
    "dedcore",
    "accel_path",
    "writeback",
    "tick",
];

/// `Host`'s bookkeeping fields, which `machine.rs` alone reads and writes.
const BOOKKEEPING: &[&str] = &[
    "now",
    "events",
    "costs",
    "dedicated_core",
    "duration",
    "stopping",
    "layer_times",
    "scratch",
    "errors",
    "poll_lock_rng",
    "waker",
    "kblockd",
    "io_log",
    "response_log",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A file's code before its tests, without line comments.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The bodies of the `impl Host` blocks in `code`.
fn impl_host_blocks(code: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    for (at, _) in code.match_indices("impl Host {") {
        let body = &code[at + "impl Host ".len()..];
        let mut depth = 0;
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        blocks.push(&body[..=i]);
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    blocks
}

/// Whether `code` names the identifier `ident` (as a whole word).
fn names(code: &str, ident: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(ident).any(|(at, _)| {
        let before = code[..at].chars().next_back().unwrap_or(' ');
        let after = code[at + ident.len()..].chars().next().unwrap_or(' ');
        !is_ident(before) && !is_ident(after)
    })
}

/// The field accesses `self.<name>` in `code` that are not method calls.
fn field_uses<'a>(code: &str, names: &[&'a str]) -> Vec<&'a str> {
    let mut found = Vec::new();
    for &name in names {
        let pat = format!("self.{name}");
        for (at, _) in code.match_indices(&pat) {
            let next = code[at + pat.len()..].chars().next().unwrap_or(' ');
            if next != '(' && !(next.is_alphanumeric() || next == '_') {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn state_modules_know_nothing_of_the_machine() {
    for module in STATE_MODULES {
        let path = src().join(format!("{module}.rs"));
        let code = code(&path);
        assert!(
            !code.contains("crate::machine") && !names(&code, "Host"),
            "{module}.rs names the machine; a state module offers operations and knows nothing \
             of Host (lib.rs essay)"
        );
    }
}

#[test]
fn the_children_use_the_machines_bookkeeping_through_its_primitives() {
    for module in BEHAVIOUR_MODULES {
        let code = code(&src().join("machine").join(format!("{module}.rs")));
        let blocks = impl_host_blocks(&code);
        assert!(
            !blocks.is_empty(),
            "machine/{module}.rs has no `impl Host` block"
        );
        for block in blocks {
            let used = field_uses(block, BOOKKEEPING);
            assert!(
                used.is_empty(),
                "machine/{module}.rs reads or writes the machine's bookkeeping {used:?}; use its \
                 primitives (now(), schedule(), cost(), ...) instead"
            );
        }
    }
}

#[test]
fn dependencies_run_from_child_to_machine() {
    let machine = code(&src().join("machine.rs"));
    for module in BEHAVIOUR_MODULES {
        assert!(
            !machine.contains(&format!("{module}::")),
            "machine.rs names its child {module}; call its methods on Host instead"
        );
        let code = code(&src().join("machine").join(format!("{module}.rs")));
        for other in BEHAVIOUR_MODULES {
            for path in [format!("super::{other}"), format!("machine::{other}")] {
                assert!(
                    !code.contains(&path),
                    "machine/{module}.rs imports its sibling {other}; call its methods on Host"
                );
            }
        }
    }
}

#[test]
fn the_checks_see_what_they_look_for() {
    let code = "impl Host {\n fn f(&mut self) { self.now = 1; let a = self.now(); self.nows; }\n}";
    let blocks = impl_host_blocks(code);
    assert_eq!(blocks.len(), 1);
    assert_eq!(field_uses(blocks[0], BOOKKEEPING), ["now"]);
    assert!(names("fn f(h: &Host)", "Host"));
    assert!(!names("cfg: HostConfig, HostCommand", "Host"));
}
