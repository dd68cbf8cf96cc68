//! Every job file in the repository's `examples/` parses, and says what its name promises.

use std::path::PathBuf;

use workload::{Completion, IoEngine, IoGenerator, JobFile, JobSpec, RwPattern};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("examples/ exists")
        .map(|entry| entry.expect("readable dir entry").path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "fio" || e == "ini" || e == "toml")
        })
        .collect();
    files.sort();
    files
}

fn load(name: &str) -> Vec<JobSpec> {
    JobFile::load(examples_dir().join(name))
        .unwrap_or_else(|e| panic!("{e}"))
        .jobs
}

#[test]
fn every_example_parses_and_fits_a_small_device() {
    let files = example_files();
    assert!(
        files.len() >= 7,
        "expected at least 7 examples, found {files:?}"
    );
    let capacity_bytes = 16u64 << 30;
    for path in files {
        let file = JobFile::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!file.jobs.is_empty(), "{}", path.display());
        for job in &file.jobs {
            for clone in 0..job.numjobs {
                let gen = IoGenerator::new(job, clone, capacity_bytes)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                // Short runs on purpose: every example ends after at most 300 000 I/Os, or is
                // time based with at most one second of (simulated) runtime.
                match gen.remaining_ios() {
                    Some(ios) => assert!(ios <= 300_000, "{}: {ios} I/Os", path.display()),
                    None => {
                        let runtime = job.runtime_ns.expect("an endless example has a runtime");
                        assert!(
                            runtime <= 1_000_000_000,
                            "{}: runtime {runtime} ns",
                            path.display()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn examples_say_what_their_names_promise() {
    let qd1 = &load("randread-qd1.fio")[0];
    assert_eq!((qd1.pattern, qd1.iodepth), (RwPattern::RandRead, 1));
    assert_eq!(qd1.number_ios, Some(100_000));
    let qd32 = &load("randread-qd32.fio")[0];
    assert_eq!((qd32.pattern, qd32.iodepth), (RwPattern::RandRead, 32));
    let w = &load("randwrite-qd1.fio")[0];
    assert_eq!((w.pattern, w.iodepth), (RwPattern::RandWrite, 1));
    let mixed = &load("mixed-70-30.fio")[0];
    assert_eq!(
        (mixed.pattern, mixed.read_pct, mixed.iodepth),
        (RwPattern::RandRw, 70, 32)
    );
    let seq = &load("seqread.fio")[0];
    assert_eq!(seq.pattern, RwPattern::Read);
    let polled = load("sync-polled.fio");
    assert_eq!(polled.len(), 2);
    assert_eq!(polled[0].completion, Completion::Interrupt);
    assert_eq!(polled[1].completion, Completion::Polled);
    assert!(polled.iter().all(|j| j.engine == IoEngine::Sync));
    assert_eq!((polled[0].group, polled[1].group), (0, 1));
    let mut toml = load("randread-qd32.toml")[0].clone();
    toml.line = qd32.line;
    assert_eq!(
        &toml, qd32,
        "the TOML example is the same job as the fio one"
    );
}

/// The examples must also be valid for real fio. Skips (with the reason) where fio is missing; fails
/// there in CI (`ULLSTACK_REQUIRE_TOOLS=1`).
#[test]
fn real_fio_accepts_the_fio_examples() {
    if testkit::tool(
        "fio",
        "real_fio_accepts_the_fio_examples",
        "apt-get install fio",
    )
    .is_none()
    {
        return;
    }
    for path in example_files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "fio"))
    {
        let out = std::process::Command::new("fio")
            .args(["--parse-only", "--filename=/dev/null"])
            .arg(&path)
            .output()
            .expect("fio runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("fio:"),
            "fio rejects {}: {stderr}",
            path.display()
        );
    }
}
