//! Reading fio and TOML job files: inheritance, values, and errors that name what is wrong.

use workload::{
    Buffering, Completion, Distribution, FioEngine, IoEngine, JobError, JobFile, JobStart, KbBase,
    RandomMap, Reporting, RunUntil, RwPattern,
};

fn parse(text: &str) -> JobFile {
    match JobFile::parse_fio(text, "test.fio") {
        Ok(file) => file,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn parse_err(text: &str) -> JobError {
    match JobFile::parse_fio(text, "test.fio") {
        Ok(file) => panic!("expected an error, got {file:?}"),
        Err(e) => e,
    }
}

#[test]
fn full_job_reads_every_supported_option() {
    let text = "\
; a comment
# another comment
[global]
ioengine=io_uring
direct=1
bs=8k            ; trailing comment
kb_base=1024

[full]
description=everything at once
filename=/dev/nvme0n1
rw=randrw
rwmixwrite=30
size=10g
io_size=1g
offset=1m
offset_increment=2g
iodepth=16
numjobs=4
runtime=500ms
time_based
ramp_time=2
number_ios=1k
rate_iops=50000
hipri
random_distribution=zipf:1.2
randrepeat=1
randseed=42
thinktime=10
group_reporting
";
    let file = parse(text);
    assert_eq!(file.jobs.len(), 1);
    let job = &file.jobs[0];
    assert_eq!(job.name, "full");
    assert_eq!(job.description.as_deref(), Some("everything at once"));
    assert_eq!(job.filename.as_deref(), Some("/dev/nvme0n1"));
    assert_eq!(job.pattern, RwPattern::RandRw);
    assert_eq!(job.read_pct, 70);
    assert_eq!(job.block_size_bytes, 8192);
    assert_eq!(job.size_bytes, Some(10 << 30));
    assert_eq!(job.io_size_bytes, Some(1 << 30));
    assert_eq!(job.offset_bytes, 1 << 20);
    assert_eq!(job.offset_increment_bytes, 2 << 30);
    assert_eq!(job.iodepth, 16);
    assert_eq!(job.numjobs, 4);
    assert_eq!(job.runtime_ns, Some(500_000_000));
    assert_eq!(job.run_until, RunUntil::Runtime);
    assert_eq!(job.ramp_time_ns, 2_000_000_000);
    assert_eq!(job.number_ios, Some(1024));
    assert_eq!(job.rate_iops, Some(50_000));
    assert_eq!(job.buffering, Buffering::Direct);
    assert_eq!(job.ioengine, FioEngine::IoUring);
    assert_eq!(job.engine, IoEngine::Async);
    assert_eq!(job.completion, Completion::Polled);
    assert_eq!(job.distribution, Distribution::Zipf { theta: 1.2 });
    assert_eq!(
        job.random_map,
        RandomMap::Off,
        "non-uniform turns the map off"
    );
    assert_eq!(job.randseed, Some(42));
    assert_eq!(job.thinktime_ns, 10_000, "a bare thinktime is microseconds");
    assert_eq!(job.effective_iodepth(), 1, "thinktime caps the depth");
    assert_eq!(job.reporting, Reporting::PerGroup);
    assert_eq!(job.kb_base, KbBase::Binary1024);
    assert_eq!(job.line, 9);
}

#[test]
fn defaults_follow_fio() {
    let job = &parse("[plain]\n").jobs[0];
    assert_eq!(job.pattern, RwPattern::Read);
    assert_eq!(job.read_pct, 100);
    assert_eq!(job.block_size_bytes, 4096);
    assert_eq!(job.size_bytes, None);
    assert_eq!(job.iodepth, 1);
    assert_eq!(job.numjobs, 1);
    assert_eq!(job.runtime_ns, None);
    assert_eq!(job.run_until, RunUntil::IoDone);
    assert_eq!(job.ioengine, FioEngine::Psync);
    assert_eq!(job.engine, IoEngine::Sync);
    assert_eq!(job.completion, Completion::Interrupt);
    assert_eq!(job.buffering, Buffering::Buffered);
    assert_eq!(job.distribution, Distribution::Uniform);
    assert_eq!(job.random_map, RandomMap::CoverEachBlock);
    assert_eq!(job.start, JobStart::WithPrevious);
    assert_eq!(job.group, 0);
    assert_eq!(job.reporting, Reporting::PerJob);
    let mixed = &parse("[m]\nrw=rw\n").jobs[0];
    assert_eq!(mixed.read_pct, 50, "fio's default rwmixread");
    let writes = &parse("[w]\nrw=randwrite\nrwmixread=90\n").jobs[0];
    assert_eq!(writes.read_pct, 0, "rwmix only matters for mixed patterns");
}

#[test]
fn global_applies_to_later_jobs_only_and_jobs_override_it() {
    let text = "\
[global]
bs=4k
iodepth=8
[a]
[global]
bs=8k
[b]
[c]
bs=16k
iodepth=2
";
    let jobs = parse(text).jobs;
    let got: Vec<(&str, u64, u32)> = jobs
        .iter()
        .map(|j| (j.name.as_str(), j.block_size_bytes, j.iodepth))
        .collect();
    assert_eq!(got, [("a", 4096, 8), ("b", 8192, 8), ("c", 16384, 2)]);
}

#[test]
fn last_setting_wins_and_aliases_work() {
    let job = &parse("[j]\nblocksize=4k\nbs=64k\nreadwrite=randread\ndirect=1\nbuffered=1\ntimeout=3\nwait_for_previous\nrwmixread=10\nrwmixwrite=25\nrw=randrw\n").jobs[0];
    assert_eq!(job.block_size_bytes, 64 << 10);
    assert_eq!(job.buffering, Buffering::Buffered);
    assert_eq!(job.runtime_ns, Some(3_000_000_000));
    assert_eq!(job.start, JobStart::AfterPrevious);
    assert_eq!(job.read_pct, 75);
    assert_eq!(job.pattern, RwPattern::RandRw);
}

#[test]
fn flags_take_no_value_or_zero_or_one() {
    let job = &parse("[j]\nrw=randread\nnorandommap=0\ngroup_reporting=1\n").jobs[0];
    assert_eq!(job.random_map, RandomMap::CoverEachBlock);
    assert_eq!(job.reporting, Reporting::PerGroup);
    let job = &parse("[j]\nrw=randread\nnorandommap\n").jobs[0];
    assert_eq!(job.random_map, RandomMap::Off);
    let job = &parse("[j]\nruntime=1\ntime_based=0\n").jobs[0];
    assert_eq!(job.run_until, RunUntil::IoDone);
}

#[test]
fn name_option_overrides_section_name_and_whitespace_is_trimmed() {
    let job = &parse("[ section ]\n  name = custom  \n   bs = 16k   \n").jobs[0];
    assert_eq!(job.name, "custom");
    assert_eq!(job.block_size_bytes, 16384);
}

#[test]
fn stonewall_starts_new_groups() {
    let text = "[a]\n[b]\n[c]\nstonewall\n[d]\n[e]\nstonewall\n";
    let file = parse(text);
    let groups: Vec<u32> = file.jobs.iter().map(|j| j.group).collect();
    assert_eq!(groups, [0, 0, 1, 1, 2]);
    assert_eq!(file.groups(), 3);
    let first = parse("[a]\nstonewall\n[b]\n");
    assert_eq!(
        first.jobs.iter().map(|j| j.group).collect::<Vec<_>>(),
        [0, 0]
    );
}

#[test]
fn sync_engines_and_polling() {
    for (engine, class) in [
        ("libaio", IoEngine::Async),
        ("io_uring", IoEngine::Async),
        ("psync", IoEngine::Sync),
        ("pvsync2", IoEngine::Sync),
        ("sync", IoEngine::Sync),
        ("pvsync", IoEngine::Sync),
    ] {
        let job = &parse(&format!("[j]\nioengine={engine}\niodepth=32\n")).jobs[0];
        assert_eq!(job.engine, class, "{engine}");
        let expected_depth = if class == IoEngine::Sync { 1 } else { 32 };
        assert_eq!(job.effective_iodepth(), expected_depth, "{engine}");
    }
    let job = &parse("[j]\nioengine=pvsync2\nhipri\n").jobs[0];
    assert_eq!(job.completion, Completion::Polled);
    let job = &parse("[j]\nioengine=pvsync2\nhipri=0\n").jobs[0];
    assert_eq!(job.completion, Completion::Interrupt);
}

#[test]
fn unsupported_option_names_it_its_line_and_the_supported_ones() {
    let err = parse_err("[global]\nbs=4k\n[j]\nrw=read\nthread\n");
    let msg = err.to_string();
    assert!(
        matches!(&err, JobError::UnsupportedOption { line: 5, key, .. } if key == "thread"),
        "{err:?}"
    );
    assert!(msg.contains("test.fio:5"), "{msg}");
    assert!(msg.contains("`thread`"), "{msg}");
    for supported in [
        "rw (readwrite)",
        "bs (blocksize)",
        "iodepth",
        "norandommap",
        "hipri",
    ] {
        assert!(msg.contains(supported), "{msg} lacks {supported}");
    }
    // An unsupported option in [global] is reported at its own line.
    let err = parse_err("[global]\niodepth_batch_submit=4\n[j]\n");
    assert!(
        matches!(err, JobError::UnsupportedOption { line: 2, .. }),
        "{err:?}"
    );
    // Keys are case sensitive, as in fio.
    let err = parse_err("[j]\nBS=4k\n");
    assert!(
        matches!(err, JobError::UnsupportedOption { line: 2, .. }),
        "{err:?}"
    );
}

/// Asserts that `text` fails with InvalidValue at `line` for `key`=`value`, and that the message
/// contains `hint`.
fn assert_invalid(text: &str, line: u32, key: &str, value: &str, hint: &str) {
    let err = parse_err(text);
    let msg = err.to_string();
    match &err {
        JobError::InvalidValue {
            line: l,
            key: k,
            value: v,
            ..
        } => {
            assert_eq!((*l, k.as_str(), v.as_str()), (line, key, value), "{msg}");
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
    assert!(msg.contains(&format!("test.fio:{line}")), "{msg}");
    assert!(msg.contains(hint), "{msg} lacks {hint:?}");
}

#[test]
fn invalid_values_name_value_line_and_expectation() {
    assert_invalid("[j]\nbs=0\n", 2, "bs", "0", "positive multiple of 512");
    assert_invalid("[j]\n\nbs=1000\n", 3, "bs", "1000", "multiple of 512");
    assert_invalid("[j]\nbs=4KiB\n", 2, "bs", "4KiB", "kb_base=1000");
    assert_invalid("[j]\nbs=1.5k\n", 2, "bs", "1.5k", "whole number");
    assert_invalid("[j]\nbs=4k,8k\n", 2, "bs", "4k,8k", "per-direction");
    assert_invalid(
        "[j]\nrw=randrw\nrwmixread=150\n",
        3,
        "rwmixread",
        "150",
        "0 to 100",
    );
    assert_invalid("[j]\niodepth=0\n", 2, "iodepth", "0", "from 1 to");
    assert_invalid("[j]\nnumjobs=0\n", 2, "numjobs", "0", "from 1 to");
    assert_invalid("[j]\nrw=randomread\n", 2, "rw", "randomread", "randread");
    assert_invalid(
        "[j]\nrw=randread:8\n",
        2,
        "rw",
        "randread:8",
        "offset modifiers",
    );
    assert_invalid("[j]\nrw=trim\n", 2, "rw", "trim", "trim patterns");
    assert_invalid("[j]\nioengine=spdk\n", 2, "ioengine", "spdk", "libaio");
    assert_invalid("[j]\ndirect=true\n", 2, "direct", "true", "1 or 0");
    assert_invalid("[j]\ntime_based=yes\n", 2, "time_based", "yes", "bare flag");
    assert_invalid("[j]\nruntime=10 s\n", 2, "runtime", "10 s", "time suffix");
    assert_invalid(
        "[j]\nthinktime=1.5ms\n",
        2,
        "thinktime",
        "1.5ms",
        "microseconds",
    );
    assert_invalid("[j]\nsize=50%\n", 2, "size", "50%", "percentages");
    assert_invalid("[j]\nsize=${SIZE}\n", 2, "size", "${SIZE}", "environment");
    assert_invalid("[j]\nsize=0\n", 2, "size", "0", "positive");
    assert_invalid("[j]\noffset=1000\n", 2, "offset", "1000", "multiple of 512");
    assert_invalid(
        "[j]\nrandom_distribution=zipf:1\n",
        2,
        "random_distribution",
        "zipf:1",
        "!= 1",
    );
    assert_invalid(
        "[j]\nrandom_distribution=zipf:1.2:0.25\n",
        2,
        "random_distribution",
        "zipf:1.2:0.25",
        "centred",
    );
    assert_invalid(
        "[j]\nrandom_distribution=pareto:0.9\n",
        2,
        "random_distribution",
        "pareto:0.9",
        "not supported",
    );
    assert_invalid("[j]\nrandrepeat=0\n", 2, "randrepeat", "0", "randseed");
    assert_invalid("[j]\nkb_base=1001\n", 2, "kb_base", "1001", "1024");
}

#[test]
fn missing_values_and_syntax_errors() {
    let err = parse_err("[j]\nbs\n");
    assert!(
        matches!(&err, JobError::MissingValue { line: 2, key, .. } if key == "bs"),
        "{err:?}"
    );
    let err = parse_err("[j]\ndirect\n");
    assert!(err.to_string().contains("1 or 0"), "{err}");
    let err = parse_err("bs=4k\n[j]\n");
    assert!(matches!(err, JobError::Syntax { line: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("outside"), "{err}");
    let err = parse_err("[j]\n[broken\n");
    assert!(matches!(err, JobError::Syntax { line: 2, .. }), "{err:?}");
    let err = parse_err("[j]\n=4k\n");
    assert!(matches!(err, JobError::Syntax { line: 2, .. }), "{err:?}");
    let err = parse_err("[j]\ninclude other.fio\n");
    assert!(err.to_string().contains("include"), "{err}");
    let err = parse_err("; only comments\n[global]\nbs=4k\n");
    assert!(matches!(err, JobError::NoJobs { .. }), "{err:?}");
}

#[test]
fn conflicts_name_the_job_and_line() {
    let err = parse_err("[global]\nioengine=libaio\n[polled]\nhipri\n");
    let msg = err.to_string();
    assert!(
        matches!(&err, JobError::Conflict { line: 4, job, .. } if job == "polled"),
        "{err:?}"
    );
    assert!(msg.contains("line 2") && msg.contains("libaio"), "{msg}");
    let err = parse_err("[tb]\nrw=randread\ntime_based\n");
    assert!(matches!(err, JobError::Conflict { line: 3, .. }), "{err:?}");
    assert!(err.to_string().contains("runtime"), "{err}");
    let err = parse_err("[small]\nbs=8k\nsize=4k\n");
    assert!(matches!(err, JobError::Conflict { line: 3, .. }), "{err:?}");
}

const TOML_JOB: &str = r#"
[global]
ioengine = "libaio"
direct = 1
bs = "4k"

[[job]]
name = "randread-qd32"
rw = "randread"
iodepth = 32
size = 1073741824
time_based = true
runtime = "10s"

[[job]]
rw = "randrw"
rwmixread = 70
stonewall = true
"#;

#[test]
fn toml_jobs_mean_what_the_fio_spelling_means() {
    let toml = JobFile::parse_toml(TOML_JOB, "test.toml").expect("valid toml");
    let fio = parse(
        "[global]\nioengine=libaio\ndirect=1\nbs=4k\n[randread-qd32]\nrw=randread\niodepth=32\nsize=1g\ntime_based\nruntime=10s\n[job1]\nrw=randrw\nrwmixread=70\nstonewall\n",
    );
    assert_eq!(toml.jobs.len(), 2);
    for (t, f) in toml.jobs.iter().zip(&fio.jobs) {
        let mut t = t.clone();
        t.line = f.line; // lines differ between the two spellings
        assert_eq!(&t, f);
    }
    assert_eq!(toml.jobs[1].name, "job1");
    assert_eq!(toml.jobs[1].group, 1);
}

#[test]
fn toml_unknown_key_is_named_with_its_line() {
    let text = "[[job]]\nrw = \"randread\"\niodepht = 4\n";
    let err = JobFile::parse_toml(text, "bad.toml").unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, JobError::Toml { line: Some(3), .. }),
        "{err:?}"
    );
    assert!(msg.contains("iodepht") && msg.contains("iodepth"), "{msg}");
    assert!(msg.starts_with("bad.toml:3"), "{msg}");
}

#[test]
fn toml_invalid_values_point_at_their_line() {
    let text = "[global]\nbs = \"4k\"\n\n[[job]]\nrw = \"randrw\"\nrwmixread = 150\n";
    let err = JobFile::parse_toml(text, "bad.toml").unwrap_err();
    assert!(
        matches!(&err, JobError::InvalidValue { line: 6, key, value, .. } if key == "rwmixread" && value == "150"),
        "{err:?}"
    );
    let err = JobFile::parse_toml("[[job]]\nbs = 4.5\n", "bad.toml").unwrap_err();
    assert!(
        matches!(err, JobError::InvalidValue { line: 2, .. }),
        "{err:?}"
    );
    let err = JobFile::parse_toml("[[job]]\nbs = -4096\n", "bad.toml").unwrap_err();
    assert!(
        matches!(err, JobError::InvalidValue { line: 2, .. }),
        "{err:?}"
    );
    let err = JobFile::parse_toml("[global]\nbs = \"4k\"\n", "bad.toml").unwrap_err();
    assert!(matches!(err, JobError::NoJobs { .. }), "{err:?}");
    let err = JobFile::parse_toml("[[jobs]]\nbs = \"4k\"\n", "bad.toml").unwrap_err();
    assert!(err.to_string().contains("jobs"), "{err}");
}

#[test]
fn load_picks_the_format_by_extension() {
    let dir = std::env::temp_dir().join(format!("workload-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fio_path = dir.join("a.ini");
    std::fs::write(&fio_path, "[a]\nrw=write\n").unwrap();
    let toml_path = dir.join("b.TOML");
    std::fs::write(&toml_path, "[[job]]\nrw = \"write\"\n").unwrap();
    assert_eq!(
        JobFile::load(&fio_path).unwrap().jobs[0].pattern,
        RwPattern::Write
    );
    assert_eq!(
        JobFile::load(&toml_path).unwrap().jobs[0].pattern,
        RwPattern::Write
    );
    let err = JobFile::load(dir.join("missing.fio")).unwrap_err();
    assert!(matches!(err, JobError::Io { .. }), "{err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

mod robustness {
    use proptest::prelude::*;
    use workload::JobFile;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary INI-like text never panics the fio reader: it is a job file or an error.
        #[test]
        fn fio_reader_never_panics(text in "([\\[\\]=;# a-z0-9_:.,%$\\n]|bs|rw|size|global|zipf|0x){0,200}") {
            let _ = JobFile::parse_fio(&text, "fuzz.fio");
        }

        /// Lines built from real option names with arbitrary values never panic either.
        #[test]
        fn fio_options_with_arbitrary_values_never_panic(
            lines in prop::collection::vec(
                (prop::sample::select(vec![
                    "bs", "size", "rw", "rwmixread", "iodepth", "runtime", "thinktime",
                    "random_distribution", "offset", "number_ios", "kb_base", "hipri", "ioengine",
                ]), "[0-9a-zA-Z:.,%]{0,12}"),
                0..12,
            )
        ) {
            let mut text = String::from("[j]\n");
            for (key, value) in lines {
                text.push_str(&format!("{key}={value}\n"));
            }
            let _ = JobFile::parse_fio(&text, "fuzz.fio");
        }

        /// Arbitrary text never panics the TOML reader.
        #[test]
        fn toml_reader_never_panics(text in "([\\[\\]=\"# a-z0-9_.\\n]|job|bs|rw){0,200}") {
            let _ = JobFile::parse_toml(&text, "fuzz.toml");
        }
    }
}
