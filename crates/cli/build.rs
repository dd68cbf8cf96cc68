//! Bakes this build's identity into the `ullstack` binary, for the provenance every study
//! records (`study::provenance`): the git commit the source was checked out at, whether the
//! source differed from it (and a hash of the difference), the cargo profile and the compiler.
//!
//! The variables set (read with `env!` in `src/study.rs`):
//! - `ULLSTACK_GIT_COMMIT`: `git rev-parse HEAD`, or `unknown` outside a git checkout (a source
//!   tarball, a container build without `.git`);
//! - `ULLSTACK_GIT_DIRTY`: `true` when `git status` shows changes to the files the binary is
//!   built from (`crates/`, `Cargo.toml`, `Cargo.lock`; untracked files there included), else
//!   `false`. Edits to docs do not make a build dirty: they change nothing it computes;
//! - `ULLSTACK_GIT_DIFF_HASH`: for a dirty build, a 64-bit FNV-1a hash (16 hex digits) of
//!   `git diff HEAD` over those paths and of every untracked file there (path and bytes), so two
//!   builds with different uncommitted edits at one commit are told apart; empty when clean;
//! - `ULLSTACK_BUILD_PROFILE`: the cargo profile (`dev`, `release`, `checked`, …), from the
//!   output folder cargo named after it;
//! - `ULLSTACK_RUSTC_VERSION`: `$RUSTC --version`.
//!
//! It re-runs when the checkout moves (HEAD, the branch's ref, packed refs), when the index
//! changes (a commit, an add) and when anything under those source paths changes, so the dirty
//! flag and hash follow uncommitted edits. `git` runs with `--no-optional-locks`: a plain `git
//! status` may rewrite the index to refresh its stat cache, which would change the index's
//! mtime and make every later build re-run this script (and re-link the binary).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The paths, relative to the workspace root, whose contents the binary is built from.
const SOURCE_PATHS: [&str; 3] = ["crates", "Cargo.toml", "Cargo.lock"];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest
        .parent()
        .and_then(Path::parent)
        .expect("crates/cli sits two levels below the workspace root")
        .to_path_buf();
    println!("cargo:rerun-if-changed=build.rs");

    let commit = git(&root, &["rev-parse", "HEAD"]).map(|s| s.trim().to_string());
    let (commit, dirty, diff_hash) = match commit {
        Some(c) if !c.is_empty() => {
            watch_git(&root);
            for p in SOURCE_PATHS {
                let path = root.join(p);
                if path.exists() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
            let dirty = is_dirty(&root);
            let hash = if dirty {
                diff_hash(&root)
            } else {
                String::new()
            };
            (c, dirty, hash)
        }
        _ => ("unknown".to_string(), false, String::new()),
    };
    println!("cargo:rustc-env=ULLSTACK_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=ULLSTACK_GIT_DIRTY={dirty}");
    println!("cargo:rustc-env=ULLSTACK_GIT_DIFF_HASH={diff_hash}");
    println!("cargo:rustc-env=ULLSTACK_BUILD_PROFILE={}", profile());
    println!("cargo:rustc-env=ULLSTACK_RUSTC_VERSION={}", rustc_version());
}

/// `git ARGS` in `dir`, its stdout if it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    git_bytes(dir, args).map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn git_bytes(dir: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let out = Command::new("git")
        .arg("--no-optional-locks")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status.success().then_some(out.stdout)
}

/// Re-run when HEAD moves, its branch's ref changes (loose or packed) or the index changes.
fn watch_git(root: &Path) {
    let mut files = vec!["HEAD".to_string(), "index".into(), "packed-refs".into()];
    if let Some(r) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        files.push(r.trim().to_string());
    }
    for f in files {
        let Some(p) = git(root, &["rev-parse", "--git-path", &f]) else {
            continue;
        };
        let path = root.join(p.trim());
        // A missing file would make cargo re-run the script on every build.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

fn is_dirty(root: &Path) -> bool {
    let mut args = vec!["status", "--porcelain", "--untracked-files=normal", "--"];
    args.extend(SOURCE_PATHS);
    git(root, &args).is_some_and(|s| !s.trim().is_empty())
}

/// FNV-1a 64 over the diff against HEAD and every untracked file (path, NUL, bytes, NUL).
fn diff_hash(root: &Path) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(PRIME);
        }
    };
    let mut diff = vec!["diff", "HEAD", "--binary", "--"];
    diff.extend(SOURCE_PATHS);
    feed(&git_bytes(root, &diff).unwrap_or_default());
    let mut untracked = vec!["ls-files", "--others", "--exclude-standard", "-z", "--"];
    untracked.extend(SOURCE_PATHS);
    let list = git_bytes(root, &untracked).unwrap_or_default();
    for name in list.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        feed(name);
        feed(&[0]);
        let path = root.join(String::from_utf8_lossy(name).as_ref());
        feed(&std::fs::read(path).unwrap_or_default());
        feed(&[0]);
    }
    format!("{h:016x}")
}

/// The profile's name: cargo builds into `target/<dir>/build/<pkg>-<hash>/out`, `<dir>` being
/// the profile's name except `debug` for `dev`.
fn profile() -> String {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    let dir = out
        .ancestors()
        .nth(3)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "unknown".into());
    match dir.as_str() {
        "debug" => "dev".into(),
        _ => dir,
    }
}

fn rustc_version() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}
