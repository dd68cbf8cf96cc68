//! `ullstack study`: results do not depend on `--jobs`, sharding or interruption; a run's
//! `config.toml` re-runs it alone; the report renders in headless Chromium.
//!
//! Every test runs the `ull` study's `--quick` version through the binary; one uninterrupted
//! `--jobs 2` run is shared as the reference.

mod browser;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

fn run_ok(cmd: &mut Command) -> String {
    let (ok, text) = testkit::run(cmd).expect("ullstack runs");
    assert!(ok, "{cmd:?} failed:\n{text}");
    text
}

fn quick(out: &Path, extra: &[&str]) -> String {
    run_ok(
        ullstack()
            .args(["study", "ull", "--quick", "--quiet", "--out"])
            .arg(out)
            .args(extra),
    )
}

/// The reference: the whole quick study, `--jobs 2`, uninterrupted.
fn reference() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        quick(dir.path(), &["--jobs", "2"]);
        dir
    })
    .path()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `summary.json` without the one field that is wall time (and the job file's path, which
/// names where it was loaded from).
fn summary_without_wall(p: &Path) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(&read(p)).unwrap();
    let sim = v["sim"].as_object_mut().expect("sim object");
    sim.remove("wall_ns").expect("wall_ns present");
    sim.remove("job_source").expect("job_source present");
    v
}

fn run_ids(dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| !n.starts_with('.'))
        .collect();
    ids.sort();
    ids
}

/// Same study.json, same plot CSVs, same summaries (but wall time) in both folders.
fn assert_same_results(a: &Path, b: &Path) {
    assert_eq!(read(&a.join("study.json")), read(&b.join("study.json")));
    let ids = run_ids(a);
    assert_eq!(ids, run_ids(b));
    for id in &ids {
        let s = |d: &Path| summary_without_wall(&d.join("runs").join(id).join("summary.json"));
        assert_eq!(s(a), s(b), "run {id}");
    }
    for entry in std::fs::read_dir(a).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.ends_with(".csv") {
            assert_eq!(read(&entry.path()), read(&b.join(&name)), "{name}");
        }
    }
}

#[test]
fn list_names_the_ull_study_with_its_run_counts() {
    let out = run_ok(ullstack().args(["study", "list"]));
    let line = out.lines().find(|l| l.starts_with("ull ")).expect(&out);
    // 92 runs per seed: five replicates in a full study, one with --quick.
    assert!(line.contains("460 runs (--quick: 92)"), "{line}");
}

/// Bad flags fail before anything runs, naming the value and what was expected.
#[test]
fn bad_flags_name_the_value_and_what_is_expected() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    for (args, expect) in [
        (
            &["ull", "--shard", "3/2"][..],
            &["3/2", "expected I/N with 0 <= I < N"][..],
        ),
        (
            &["ull", "--jobs", "0"],
            &["--jobs 0", "expected at least 1"],
        ),
        (
            &["nosuch"],
            &[
                "unknown study `nosuch`",
                "known studies: ull, fastdrain, flashshare, reflex",
            ],
        ),
        (&["flashhsare"], &["(did you mean `flashshare`?)"]),
        (
            &["ull", "--quick", "--sim-only"],
            &["--sim-only: study `ull` has no real-server half"],
        ),
        (
            &["fastdrain", "--sim-only", "--slurm", "2", "--dry-run"],
            &["--sim-only: study `fastdrain` has no real-server half"],
        ),
        (
            &["merge", "a", "--seed", "2"],
            &["`study merge` takes only"],
        ),
        (
            &["ull", "--replicates", "0"],
            &["--replicates 0", "expected at least 1"],
        ),
        (
            &["reflex", "--replicates", "0", "--sim-only"],
            &["--replicates 0", "expected at least 1"],
        ),
        (
            &["ull", "--quick", "--reference", "/nonexistent/ref.toml"],
            &["--reference /nonexistent/ref.toml"],
        ),
        // reflex's real-server half runs here: no cluster mode, said so before anything runs.
        (
            &["reflex", "--slurm", "2", "--dry-run"],
            &[
                "`study reflex` has no cluster mode (--slurm 2)",
                "on this machine",
                "--sim-only",
            ],
        ),
        (
            &["reflex", "--quick", "--k8s", "2"],
            &["`study reflex` has no cluster mode (--k8s 2)"],
        ),
        (
            &["reflex", "--quick", "--dry-run"],
            &["`study reflex` has no cluster mode (--dry-run)"],
        ),
        (
            &["reflex", "--quick", "--partition", "p"],
            &["`study reflex` has no cluster mode (--partition p)"],
        ),
    ] {
        let (ok, text) =
            testkit::run(ullstack().arg("study").args(args).arg("--out").arg(&out)).unwrap();
        assert!(!ok, "{args:?} must fail:\n{text}");
        for e in expect {
            assert!(text.contains(e), "{args:?}: no `{e}` in:\n{text}");
        }
    }
    assert!(!out.exists(), "nothing was written");
}

/// `study --help` and `place --help` show their examples and rules, not only the one-liner.
#[test]
fn long_help_shows_the_examples() {
    let study = run_ok(ullstack().args(["study", "--help"]));
    for want in [
        "--shard auto",
        "--slurm 8",
        "--k8s 8 --dry-run",
        "study merge a b",
        "--force",
    ] {
        assert!(
            study.contains(want),
            "study --help lacks `{want}`:\n{study}"
        );
    }
    // Every study, with what --quick does to it.
    for name in ["ull", "fastdrain", "flashshare", "reflex"] {
        let line = study
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("study --help lists no `{name}`:\n{study}"));
        assert!(line.contains("--quick: "), "{line}");
    }
    let ull_quick = format!(
        "{} I/Os per point instead of {}",
        study::ull::QUICK_IOS,
        study::ull::FULL_IOS
    );
    assert!(study.contains(&ull_quick), "no `{ull_quick}` in:\n{study}");
    let place = run_ok(ullstack().args(["place", "--help"]));
    for want in ["least-loaded", "worst fit", "--rebalance", "--lookup"] {
        assert!(
            place.contains(want),
            "place --help lacks `{want}`:\n{place}"
        );
    }
    // The top-level list still has one line each.
    let top = run_ok(ullstack().arg("--help"));
    let line = |name: &str| {
        top.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` in:\n{top}"))
            .to_string()
    };
    assert!(line("study").contains("Run a study"), "{top}");
    assert!(line("place").contains("Place"), "{top}");
}

/// A second study into a folder another one is writing is refused, naming the holder; once
/// that process is killed (SIGKILL: nothing released), the next run takes the folder over.
#[test]
fn a_second_study_into_a_busy_folder_is_refused_until_the_first_dies() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("busy");
    // The full study (not --quick) runs long enough to be caught holding the folder.
    let mut first = ullstack()
        .args(["study", "ull", "--quiet", "--jobs", "1", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lock = out.join(".ullstack.lock");
    let held = testkit::wait_until(std::time::Duration::from_secs(60), || {
        std::fs::read_to_string(&lock).is_ok_and(|t| t.starts_with("PID"))
    });
    assert!(held.is_ok(), "the first study never took its lock");
    let (ok, text) = testkit::run(
        ullstack()
            .args(["study", "ull", "--quick", "--quiet", "--out"])
            .arg(&out),
    )
    .unwrap();
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!("is in use by PID {}", first.id()))
            && text.contains("study ull --quiet --jobs 1")
            && text.contains("wait for it to finish"),
        "{text}"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    let (ok, text) = testkit::run(
        ullstack()
            .args(["study", "ull", "--quick", "--quiet", "--out"])
            .arg(&out),
    )
    .unwrap();
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("was locked by PID {}", first.id()))
            && text.contains("(no longer running)"),
        "{text}"
    );
    assert!(!lock.exists(), "released at the end");
}

#[test]
fn jobs_1_gives_the_same_results_as_jobs_2() {
    let dir = tempfile::tempdir().unwrap();
    quick(dir.path(), &["--jobs", "1"]);
    assert_same_results(reference(), dir.path());
    let study: serde_json::Value =
        serde_json::from_str(&read(&dir.path().join("study.json"))).unwrap();
    assert_eq!(study["runs"].as_array().unwrap().len(), 92);
}

#[test]
fn shards_merged_equal_one_run_and_an_incomplete_merge_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    quick(&a, &["--shard", "0/2", "--jobs", "1"]);
    quick(&b, &["--shard", "1/2", "--jobs", "1"]);
    assert_eq!(run_ids(&a).len(), 46);
    assert!(!a.join("report.html").exists(), "a shard draws no report");
    let (ok, text) = testkit::run(
        ullstack()
            .args(["study", "merge"])
            .arg(&a)
            .arg("--out")
            .arg(dir.path().join("lonely")),
    )
    .unwrap();
    assert!(!ok, "merging one of two shards must fail");
    assert!(
        text.contains("46 of 92 runs are missing") && text.contains("1/2"),
        "{text}"
    );
    let merged = dir.path().join("merged");
    run_ok(
        ullstack()
            .args(["study", "merge"])
            .arg(&a)
            .arg(&b)
            .arg("--out")
            .arg(&merged),
    );
    assert_same_results(reference(), &merged);
    assert!(merged.join("report.html").is_file());
    // The merged folder lists both shards' invocations and its own.
    let prov: serde_json::Value =
        serde_json::from_str(&read(&merged.join("provenance.json"))).unwrap();
    let what: Vec<&str> = prov["invocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["what"].as_str().unwrap())
        .collect();
    assert_eq!(what, ["shard 0/2", "shard 1/2", "merge of 2 folders"]);

    // A shard made by another build is refused, naming both builds, unless --force.
    let record = b.join("provenance.json");
    let this_commit = prov["invocations"][0]["build"]["git_commit"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(&record, read(&record).replace(&this_commit, OTHER_COMMIT)).unwrap();
    let (ok, text) = testkit::run(
        ullstack()
            .args(["study", "merge"])
            .arg(&a)
            .arg(&b)
            .arg("--out")
            .arg(dir.path().join("mixed")),
    )
    .unwrap();
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!("{} was made by ullstack", b.display()))
            && text.contains(&format!("commit {}", &OTHER_COMMIT[..12]))
            && text.contains(&format!(
                "but this merge is ullstack {}",
                env!("CARGO_PKG_VERSION")
            ))
            && text.contains("--force"),
        "{text}"
    );
    run_ok(
        ullstack()
            .args(["study", "merge", "--force", "--quiet"])
            .arg(&a)
            .arg(&b)
            .arg("--out")
            .arg(dir.path().join("mixed")),
    );
}

/// A commit no build of this repository has.
const OTHER_COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// study.json names the build (the same for every execution, so the byte-for-byte comparisons
/// hold); provenance.json the command line, times and host; report.html both.
#[test]
fn study_json_and_the_report_record_the_build_and_the_invocation() {
    let study: serde_json::Value =
        serde_json::from_str(&read(&reference().join("study.json"))).unwrap();
    let p = &study["provenance"];
    let build = &p["build"];
    assert_eq!(build["crate_version"], env!("CARGO_PKG_VERSION"));
    let commit = build["git_commit"].as_str().unwrap();
    assert!(
        commit == "unknown"
            || (commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit}"
    );
    // The commit exists in this checkout (when there is one, and git to ask).
    if commit != "unknown" && testkit::which("git").is_some() {
        let (ok, text) = testkit::run(
            Command::new("git")
                .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
                .current_dir(env!("CARGO_MANIFEST_DIR")),
        )
        .unwrap();
        assert!(ok, "commit {commit} is not in this repository: {text}");
    }
    assert!(build["git_dirty"].is_boolean(), "{build}");
    assert_eq!(
        build["git_diff_hash"].is_null(),
        build["git_dirty"] == false,
        "{build}"
    );
    // The profile: cargo's folder the binary was built in (`debug` for `dev`).
    let exe = Path::new(env!("CARGO_BIN_EXE_ullstack"));
    let dir = exe.parent().unwrap().file_name().unwrap().to_string_lossy();
    let profile = if dir == "debug" { "dev" } else { &dir };
    assert_eq!(build["profile"], profile, "{build}");
    assert!(
        build["rustc"].as_str().unwrap().starts_with("rustc 1."),
        "{build}"
    );
    assert_eq!(p["seeds"], serde_json::json!([1]));
    assert_eq!(p["invocations"], "provenance.json");
    assert!(p.get("other_builds").is_none(), "{p}");

    let prov: serde_json::Value =
        serde_json::from_str(&read(&reference().join("provenance.json"))).unwrap();
    let [inv] = prov["invocations"].as_array().unwrap().as_slice() else {
        panic!("one invocation: {prov}");
    };
    let command: Vec<&str> = inv["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(
        command[1..6],
        ["study", "ull", "--quick", "--quiet", "--out"]
    );
    assert_eq!(command[7..], ["--jobs", "2"]);
    let (started, ended) = (
        inv["started_utc"].as_str().unwrap(),
        inv["ended_utc"].as_str().unwrap(),
    );
    for t in [started, ended] {
        assert!(
            t.len() == 20 && t.ends_with('Z') && t.as_bytes()[10] == b'T',
            "{t}"
        );
    }
    assert!(started <= ended, "{started} {ended}");
    assert_eq!(
        (inv["ran"].as_u64(), inv["reused"].as_u64()),
        (Some(92), Some(0))
    );
    assert!(inv["host"]["cores"].as_u64().unwrap() >= 1, "{inv}");
    assert!(
        !inv["host"]["cpu_model"].as_str().unwrap().is_empty(),
        "{inv}"
    );
    assert_eq!(&inv["build"], build);

    let html = read(&reference().join("report.html"));
    for want in [
        "<h2 id=\"provenance\">Provenance</h2>",
        &commit[..12],
        started,
        ended,
        "study ull --quick --quiet --out",
    ] {
        assert!(html.contains(want), "report.html lacks `{want}`");
    }
}

/// A folder another build wrote into is refused for resume, naming both builds; --force resumes
/// it, and study.json then names the other build too.
#[test]
fn a_folder_of_another_build_is_refused_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    quick(&out, &["--shard", "0/23"]);
    let record = out.join("provenance.json");
    let text = read(&record);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let this_commit = v["invocations"][0]["build"]["git_commit"].as_str().unwrap();
    std::fs::write(&record, text.replace(this_commit, OTHER_COMMIT)).unwrap();
    let (ok, text) = testkit::run(
        ullstack()
            .args([
                "study", "ull", "--quick", "--quiet", "--shard", "0/23", "--out",
            ])
            .arg(&out),
    )
    .unwrap();
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!(
            "holds runs made by ullstack {}",
            env!("CARGO_PKG_VERSION")
        )) && text.contains(&format!("commit {}", &OTHER_COMMIT[..12]))
            && text.contains(&format!("this is ullstack {}", env!("CARGO_PKG_VERSION")))
            && text.contains("--force"),
        "{text}"
    );
    let text = quick(&out, &["--shard", "0/23", "--force"]);
    assert!(
        text.contains("0 simulated, 4 reused") && text.contains("resuming anyway"),
        "{text}"
    );
    let study: serde_json::Value = serde_json::from_str(&read(&out.join("study.json"))).unwrap();
    assert_eq!(
        study["provenance"]["other_builds"][0]["git_commit"],
        OTHER_COMMIT
    );
}

/// Ctrl-C (SIGINT) mid-study says what is kept and the command that resumes, exits 130 with
/// the folder unlocked, and the resumed study equals an uninterrupted one byte for byte; the
/// interrupted invocation stays in provenance.json as one that did not finish.
#[test]
fn an_interrupted_study_says_what_it_keeps_and_resumes_to_the_same_study_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    let stderr_path = dir.path().join("stderr.txt");
    let mut child = ullstack()
        .args(["study", "ull", "--quick", "--quiet", "--jobs", "1", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let done = |out: &Path| {
        std::fs::read_dir(out.join("runs")).map_or(0, |d| {
            // A run being written lives in `.tmp-<id>` until it is renamed into place: not done.
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with(".tmp"))
                .filter(|e| e.path().join("summary.json").is_file())
                .count()
        })
    };
    testkit::wait_until(Duration::from_secs(120), || done(&out) >= 3)
        .expect("three runs finish within two minutes");
    testkit::interrupt(&child).expect("SIGINT to the study");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    let finished = done(&out);
    assert!(
        (3..92).contains(&finished),
        "interrupted mid-study: {finished} of 92 runs done"
    );
    assert!(
        !out.join("study.json").exists(),
        "interrupted before the end"
    );
    assert!(!out.join(".ullstack.lock").exists(), "the lock is released");
    let said = read(&stderr_path);
    let kept: usize = said
        .split("interrupted: ")
        .nth(1)
        .and_then(|r| r.split(" of 92 runs are complete and kept in ").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of kept runs in:\n{said}"));
    // A run in flight may have been renamed into place between the count and the exit.
    assert!(
        kept == finished || kept + 1 == finished,
        "{kept} vs {finished}:\n{said}"
    );
    assert!(
        said.contains("resume with: ")
            && said.contains(" study ull --quick --quiet --jobs 1 --out "),
        "{said}"
    );
    let prov: serde_json::Value =
        serde_json::from_str(&read(&out.join("provenance.json"))).unwrap();
    assert!(prov["invocations"][0]["ended_utc"].is_null(), "{prov}");
    let text = quick(&out, &["--jobs", "2"]);
    assert!(
        text.contains(&format!("{} simulated, {finished} reused", 92 - finished)),
        "the rerun reuses exactly the finished runs ({finished}): {text}"
    );
    assert!(
        !run_ids(&out).iter().any(|n| n.starts_with(".tmp")),
        "no temporary folders left"
    );
    assert_same_results(reference(), &out);
    let prov: serde_json::Value =
        serde_json::from_str(&read(&out.join("provenance.json"))).unwrap();
    let invocations = prov["invocations"].as_array().unwrap();
    assert_eq!(invocations.len(), 2, "{prov}");
    assert_eq!(invocations[1]["reused"], finished, "{prov}");
    assert!(read(&out.join("report.html")).contains("did not finish (interrupted or killed)"));
}

#[test]
fn a_changed_run_config_is_redone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s");
    quick(&out, &["--shard", "0/23"]);
    let id = run_ids(&out)[0].clone();
    let cfg = out.join("runs").join(&id).join("config.toml");
    std::fs::write(&cfg, read(&cfg).replace("seed = 1", "seed = 2")).unwrap();
    let text = quick(&out, &["--shard", "0/23"]);
    assert!(text.contains("1 simulated, 3 reused"), "{text}");
    assert!(read(&cfg).contains("seed = 1\n"));
}

#[test]
fn a_run_config_reruns_alone_with_ullstack_sim() {
    let runs = reference().join("runs");
    for id in ["qd-zssd-randread-qd4", "sync-nvme-tlc-write-poll"] {
        let dir = runs.join(id);
        let out = tempfile::tempdir().unwrap();
        run_ok(
            ullstack()
                .args(["sim", "--config"])
                .arg(dir.join("config.toml"))
                .arg("--out")
                .arg(out.path()),
        );
        assert_eq!(
            summary_without_wall(&dir.join("summary.json")),
            summary_without_wall(&out.path().join("summary.json")),
            "{id}"
        );
    }
}

/// Decodes standard base64 (RFC 4648, padded); `None` on a character outside the alphabet.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let bytes = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in bytes {
        acc = (acc << 6) | u32::from(val(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Decodes a PNG into (width, height, RGB(A) pixels as colour tuples).
fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<Vec<u8>>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    let channels = info.color_type.samples();
    let px = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|c| c.to_vec())
        .collect();
    (info.width, info.height, px)
}

/// The browser check catches what it is there for: two labels drawn over each other, a label
/// off its figure, and an image that does not load (a PNG cut short).
#[test]
fn the_browser_check_finds_overlapping_text_and_broken_images() {
    let dir = tempfile::tempdir().unwrap();
    let svg = "<svg width=\"200\" height=\"100\" xmlns=\"http://www.w3.org/2000/svg\">\
               <text x=\"10\" y=\"50\" font-size=\"14\">db-update</text>\
               <text x=\"40\" y=\"52\" font-size=\"14\">imageserver-fetch</text>\
               <text x=\"190\" y=\"20\" font-size=\"14\">cut off</text></svg>";
    std::fs::write(dir.path().join("f.svg"), svg).unwrap();
    std::fs::write(
        dir.path().join("report.html"),
        "<!DOCTYPE html><html><body><figure><img alt=\"f\" \
         src=\"data:image/png;base64,iVBORw0KGgo=\"></figure></body></html>",
    )
    .unwrap();
    let Some(v) = browser::verdict(
        dir.path(),
        "the_browser_check_finds_overlapping_text_and_broken_images",
    ) else {
        return;
    };
    assert_eq!(v["images"][0]["ok"], false, "{v}");
    assert_eq!(v["overlaps"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["overlaps"][0]["a"], "db-update", "{v}");
    assert_eq!(v["outside"][0]["text"], "cut off", "{v}");
}

#[test]
fn report_is_self_contained_and_renders_in_headless_chromium() {
    let html_path = reference().join("report.html");
    let html = read(&html_path);
    // Every image is inline and decodes; nothing is fetched from anywhere.
    let srcs: Vec<&str> = html
        .split("<img ")
        .skip(1)
        .map(|tag| {
            let at = tag.find("src=\"").expect("an img has a src") + 5;
            &tag[at..at + tag[at..].find('"').unwrap()]
        })
        .collect();
    assert_eq!(srcs.len(), 11, "one image per figure");
    for src in &srcs {
        let data = src
            .strip_prefix("data:image/png;base64,")
            .unwrap_or_else(|| {
                panic!(
                    "img src is not an inline PNG: {}",
                    &src[..40.min(src.len())]
                )
            });
        let png = base64_decode(data).expect("valid base64");
        let (w, h, px) = decode_png(&png);
        assert_eq!((w, h), (800, 500));
        assert!(px.iter().filter(|p| p[..3] != [255, 255, 255]).count() > 5_000);
    }
    for bad in ["http://", "https://", "<script", "<link", "<svg"] {
        assert!(!html.contains(bad), "report.html contains {bad}");
    }
    for id in run_ids(reference()) {
        assert!(html.contains(&id), "the report lists run {id}");
    }
    let Some(chromium) = testkit::tool(
        "chromium",
        "report_is_self_contained_and_renders_in_headless_chromium",
        "apt-get install chromium",
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let shot = tmp.path().join("shot.png");
    let profile: PathBuf = tmp.path().join("profile");
    let url = format!("file://{}", html_path.canonicalize().unwrap().display());
    let (ok, text) = testkit::run(
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--window-size=1200,2000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(&url),
    )
    .unwrap();
    assert!(ok && shot.is_file(), "chromium made no screenshot:\n{text}");
    let (w, h, px) = decode_png(&std::fs::read(&shot).unwrap());
    assert_eq!((w, h), (1200, 2000));
    let non_white = px.iter().filter(|p| p[..3] != [255, 255, 255]).count();
    let mut colours: Vec<&[u8]> = px.iter().map(|p| &p[..3]).collect();
    colours.sort_unstable();
    colours.dedup();
    // A page of text alone has grey anti-aliasing; the plots add their series' colours.
    assert!(
        non_white > 50_000 && colours.len() > 50,
        "screenshot looks blank: {non_white} non-white pixels, {} colours",
        colours.len()
    );
    let red = px
        .iter()
        .filter(|p| p[0] > 180 && p[1] < 80 && p[2] < 80)
        .count();
    assert!(
        red > 200,
        "no plot colour (red series) on screen: {red} red pixels"
    );
    // Every image loads, and no two text boxes of any figure overlap (nor leave the figure).
    browser::check_report(
        reference(),
        "report_is_self_contained_and_renders_in_headless_chromium",
    );
}

/// zssd writes no faster than it reads: its 4 KiB writes ride the link as the root complex's
/// 64 B read completions (device `pcie.rs`), so they top out near 3.0 GB/s against the reads'
/// 3.55 GB/s, and the write-utilisation rows, shares of the device's (read) maximum averaged
/// over depths, stay under 100 %. When the link carried write data like read data, zssd's
/// 4 KiB writes reached 101 % of its read maximum, and the rows divided by the same pattern's
/// reads at each depth read 114 % for random writes.
#[test]
fn zssd_writes_at_most_its_read_maximum() {
    let study: serde_json::Value =
        serde_json::from_str(&read(&reference().join("study.json"))).expect("study.json");
    let runs = study["runs"].as_array().expect("runs");
    let best = |rw: &str, op: &str| {
        runs.iter()
            .filter(|r| {
                r["id"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("qd-zssd-{rw}-qd"))
            })
            .map(|r| r[op]["bytes_per_sec"].as_f64().expect("bandwidth"))
            .fold(0.0, f64::max)
    };
    let max_read = best("read", "read").max(best("randread", "read"));
    for rw in ["write", "randwrite"] {
        let share = best(rw, "write") / max_read;
        assert!(
            (0.75..0.90).contains(&share),
            "zssd {rw}: best {share:.3} of the read maximum"
        );
    }
    let rows = study["published"].as_array().expect("published rows");
    for id in [
        "zssd.write_bw_utilization.sequential",
        "zssd.write_bw_utilization.random",
    ] {
        let row = rows.iter().find(|r| r["id"] == id).expect(id);
        let v = row["simulated"]["value"].as_f64().expect("a value");
        assert!(v > 30.0 && v < 90.0, "{id}: {v}");
    }
}

/// The quick study opens its report with the published figures beside ours (study.json carries
/// the same rows, one per ull outcome of the shipped reference), says it is a smoke test, and
/// is sized so its write points fill the (scaled) write buffer: nvme-tlc's writes then reach
/// well under the device's read bandwidth, as on the real drive. Into an empty buffer they
/// went faster than reads (103 % of the read maximum).
#[test]
fn the_quick_report_opens_with_the_published_figures_and_its_writes_fill_the_buffer() {
    let study: serde_json::Value =
        serde_json::from_str(&read(&reference().join("study.json"))).expect("study.json");
    let rows = study["published"].as_array().expect("published rows");
    let shipped =
        read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../reference/published.toml"));
    let expected = shipped.matches("study = \"ull\"").count();
    assert_eq!(rows.len(), expected, "one row per ull outcome");
    let row = |id: &str| {
        rows.iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no row {id}"))
    };
    let utilisation = row("nvme.write_bw_utilization")["simulated"]["value"]
        .as_f64()
        .expect("a simulated write utilisation");
    assert!(
        utilisation < 90.0,
        "nvme-tlc writes at {utilisation:.0} % of its read maximum: the buffer never filled"
    );
    // Too few I/Os for five nines: said, not printed.
    let tail = row("nvme.read_p99999_at_20pct_writes");
    assert!(tail["simulated"].is_null(), "{tail}");
    assert!(
        tail["note"].as_str().unwrap().starts_with("n/a ("),
        "{tail}"
    );
    let html = read(&reference().join("report.html"));
    let smoke = html.find("Smoke test (--quick)").expect("smoke-test line");
    let table = html
        .find("The published figures beside ours")
        .expect("table");
    assert!(smoke < table && table < html.find("Headline numbers").expect("headline"));
}
