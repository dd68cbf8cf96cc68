//! `ullstack study --slurm` against a real single-node Slurm cluster started by the test.
//!
//! The cluster is Debian's `slurm-wlm` and `munge`: `munged`, `slurmctld` and `slurmd` in the
//! foreground with their state, sockets, logs and config in a temporary folder, bound to
//! 127.0.0.1 on ports the test picks (`CommunicationParameters=NoCtldInAddrAny,NoInAddrAny`),
//! no systemd. Every daemon the test starts is killed by its PID when the cluster is dropped,
//! pass or fail. The study runs in `--quick` size; its merged `study.json` must equal a local
//! run's byte for byte.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TEST: &str = "slurm";
const INSTALL: &str = "apt-get install slurm-wlm munge";

fn ullstack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ullstack"))
}

/// `name` on PATH or in the sbin folders root's PATH has (daemons live in /usr/sbin).
fn find_tool(name: &str) -> Option<PathBuf> {
    testkit::which(name).or_else(|| {
        ["/usr/sbin", "/sbin", "/usr/local/sbin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A single-node Slurm cluster in a temporary folder; its daemons die with it.
struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    children: Vec<(String, Child)>,
}

impl Cluster {
    fn start() -> Option<Cluster> {
        let mut tools = Vec::new();
        for name in [
            "munged",
            "slurmctld",
            "slurmd",
            "sbatch",
            "scontrol",
            "sinfo",
        ] {
            match find_tool(name) {
                Some(p) => tools.push(p),
                None => {
                    testkit::skip(TEST, &format!("`{name}` is not installed ({INSTALL})"));
                    return None;
                }
            }
        }
        let [munged, slurmctld, slurmd, ..] = tools.as_slice() else {
            unreachable!()
        };
        // The daemons run as SlurmUser=root/SlurmdUser=root (slurmd must be root to start jobs
        // as the submitting user); as anyone else slurmctld refuses the config.
        if !is_root() {
            testkit::skip(
                TEST,
                "not root: the test cluster's daemons run as root (SlurmUser=root)",
            );
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        for sub in ["ctld", "spool"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        // A fresh random munge key, readable by its owner only (munged refuses others).
        let mut key = [0u8; 1024];
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .expect("1 KiB from /dev/urandom");
        let key_path = d.join("munge.key");
        std::fs::write(&key_path, key).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let sock = d.join("munge.sock");
        let host = hostname();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (ctld_port, d_port) = (free_port(), free_port());
        let p = |name: &str| d.join(name).display().to_string();
        let conf = d.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=ullci\n\
                 SlurmctldHost={host}(127.0.0.1)\n\
                 SlurmUser=root\nSlurmdUser=root\n\
                 SlurmctldPort={ctld_port}\nSlurmdPort={d_port}\n\
                 CommunicationParameters=NoCtldInAddrAny,NoInAddrAny\n\
                 AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n\
                 StateSaveLocation={ctld}\nSlurmdSpoolDir={spool}\n\
                 SlurmctldPidFile={ctld_pid}\nSlurmdPidFile={d_pid}\n\
                 SlurmctldLogFile={ctld_log}\nSlurmdLogFile={d_log}\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
                 JobCompType=jobcomp/none\nMpiDefault=none\nReturnToService=2\n\
                 SchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
                 PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                sock = sock.display(),
                ctld = p("ctld"),
                spool = p("spool"),
                ctld_pid = p("slurmctld.pid"),
                d_pid = p("slurmd.pid"),
                ctld_log = p("slurmctld.log"),
                d_log = p("slurmd.log"),
            ),
        )
        .unwrap();
        let mut cluster = Cluster {
            conf: conf.clone(),
            children: Vec::new(),
            dir,
        };
        let d = cluster.dir.path().to_path_buf();
        cluster.spawn(
            "munged",
            Command::new(munged).args([
                "-F".to_string(),
                "-f".to_string(),
                format!("--socket={}", sock.display()),
                format!("--key-file={}", key_path.display()),
                format!("--log-file={}", d.join("munged.log").display()),
                format!("--pid-file={}", d.join("munged.pid").display()),
                format!("--seed-file={}", d.join("munged.seed").display()),
            ]),
        );
        testkit::wait_until(Duration::from_secs(20), || sock.exists())
            .unwrap_or_else(|_| panic!("munged did not create its socket:\n{}", cluster.logs()));
        cluster.spawn(
            "slurmctld",
            Command::new(slurmctld)
                .arg("-D")
                .arg("-i")
                .arg("-f")
                .arg(&conf),
        );
        cluster.spawn(
            "slurmd",
            Command::new(slurmd)
                .arg("-D")
                .arg("-f")
                .arg(&conf)
                .arg("-N")
                .arg(&host),
        );
        let idle = testkit::wait_until(Duration::from_secs(60), || {
            cluster.output("sinfo", &["-h", "-o", "%T"]).trim() == "idle"
        });
        if idle.is_err() {
            panic!("the node never became idle:\n{}", cluster.logs());
        }
        Some(cluster)
    }

    fn spawn(&mut self, name: &str, cmd: &mut Command) {
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.out"))).unwrap();
        let child = cmd
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        self.children.push((name.to_string(), child));
    }

    /// Runs a Slurm client command against this cluster; its stdout.
    fn output(&self, tool: &str, args: &[&str]) -> String {
        let out = Command::new(find_tool(tool).expect("checked at start"))
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `JobState=…` of a job (for an array: every task's, joined).
    fn job_state(&self, id: &str) -> String {
        let text = self.output("scontrol", &["show", "job", id]);
        text.split_whitespace()
            .filter_map(|w| w.strip_prefix("JobState="))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// (submit, start, end) of job `id`, each task of an array, in seconds (Slurm's own
    /// timestamps, whole seconds, from `scontrol show job`; kept for `MinJobAge` after the end).
    fn job_times(&self, id: &str) -> Vec<(i64, i64, i64)> {
        let text = self.output("scontrol", &["show", "job", id]);
        text.split("\n\n")
            .filter(|rec| rec.contains("JobId="))
            .map(|rec| {
                let at = |key: &str| {
                    let v = rec
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix(key))
                        .unwrap_or_else(|| panic!("no {key} in {rec}"));
                    epoch_s(v).unwrap_or_else(|| panic!("{key}{v}: not a time"))
                };
                (at("SubmitTime="), at("StartTime="), at("EndTime="))
            })
            .collect()
    }

    /// Waits for job `id` to reach a final state; returns it.
    fn wait_final(&self, id: &str, timeout: Duration) -> String {
        let finals = ["COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL"];
        let mut last = String::new();
        let done = testkit::wait_until(timeout, || {
            last = self.job_state(id);
            !last.is_empty() && last.split(',').all(|s| finals.contains(&s))
        });
        if done.is_err() {
            panic!(
                "job {id} still `{last}` after {timeout:?}:\n{}",
                self.logs()
            );
        }
        last
    }

    /// Every daemon's and job's log, for a failure message.
    fn logs(&self) -> String {
        let mut s = String::new();
        for entry in walk(self.dir.path()) {
            if entry.extension().is_some_and(|e| e == "out" || e == "log") {
                let text = std::fs::read_to_string(&entry).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                s += &format!("--- {}\n", entry.display());
                for l in tail.iter().rev() {
                    s += l;
                    s.push('\n');
                }
            }
        }
        s
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // By PID, the daemons this test started and nothing else; slurmd before slurmctld
        // before munged, so none logs the others' disappearance as an error it acts on.
        // SIGTERM first so slurmctld stops its own helper (slurmscriptd) too; SIGKILL after 10 s.
        for (_, child) in self.children.iter_mut().rev() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let exited = testkit::wait_until(Duration::from_secs(10), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if exited.is_err() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SS` (Slurm's local time) as seconds since 1970-01-01 in that zone; only
/// differences are used.
fn epoch_s(t: &str) -> Option<i64> {
    let (date, time) = t.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let h: Vec<i64> = time
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let ([y, m, day], [hh, mm, ss]) = (d.as_slice(), h.as_slice()) else {
        return None;
    };
    // Days from civil (Howard Hinnant's algorithm).
    let y = if *m <= 2 { y - 1 } else { *y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Seconds covered by the union of `[start, end]` intervals, and how many disjoint stretches
/// they form.
fn busy(mut spans: Vec<(i64, i64)>) -> (i64, usize) {
    spans.sort();
    let (mut total, mut stretches) = (0, 0);
    let mut cur: Option<(i64, i64)> = None;
    for (s, e) in spans {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            _ => {
                if let Some((cs, ce)) = cur {
                    total += ce - cs;
                }
                stretches += 1;
                cur = Some((s, e));
            }
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    (total, stretches)
}

/// Whether this process runs as uid 0 (`Uid:` in /proc/self/status: real, effective, …).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

fn hostname() -> String {
    let out = Command::new("hostname")
        .arg("-s")
        .output()
        .expect("hostname");
    let h = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!h.is_empty(), "hostname -s printed nothing");
    h
}

/// `ullstack study ull --quick --slurm 4 --partition ci --time 10 --out OUT`.
fn submit_cmd(cluster: &Cluster, out: &Path) -> Command {
    let mut cmd = ullstack();
    cmd.args([
        "study",
        "ull",
        "--quick",
        "--slurm",
        "4",
        "--partition",
        "ci",
        "--time",
        "10",
        "--out",
    ])
    .arg(out)
    .env("SLURM_CONF", &cluster.conf);
    cmd
}

/// Runs `ullstack study ull --quick --slurm 4` into `out`; returns (array id, merge id) and
/// what it printed.
fn submit(cluster: &Cluster, out: &Path) -> (Option<String>, String, String) {
    let o = submit_cmd(cluster, out).output().expect("ullstack runs");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "--slurm failed:\n{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // "submitted Slurm array job 12 (…) and merge job 13, …" or "… submitted merge job 13"
    let after = |key: &str| {
        text.split(key).nth(1).map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_digit())
                .collect::<String>()
        })
    };
    let array = after("array job ");
    let merge = after("merge job ").expect("a merge job id");
    (array, merge, text)
}

#[test]
fn a_study_as_a_slurm_array_merges_to_the_local_result_and_reruns_only_failed_shards() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();

    // The local reference, and its wall time.
    let local = work.path().join("local");
    let t = Instant::now();
    let (ok, text) = testkit::run(
        ullstack()
            .args(["study", "ull", "--quick", "--quiet", "--out"])
            .arg(&local),
    )
    .unwrap();
    assert!(ok, "{text}");
    let local_wall = t.elapsed();
    let reference = std::fs::read(local.join("study.json")).unwrap();

    // 1. Four tasks and the merge: the same study.json.
    let out = work.path().join("slurm");
    let t = Instant::now();
    let (array, merge, text) = submit(&cluster, &out);
    let array = array.unwrap_or_else(|| panic!("no array job submitted:\n{text}"));
    assert!(text.contains("4 of 4 (0-3)"), "{text}");
    // A second submission into the same folder while those jobs are queued or running is
    // refused, naming them.
    let (ok, again) = testkit::run(&mut submit_cmd(&cluster, &out)).unwrap();
    assert!(
        !ok && again.contains("still queued or running")
            && again.contains(&format!("scancel {array} {merge}")),
        "{again}"
    );
    assert_eq!(
        cluster.wait_final(&merge, Duration::from_secs(300)),
        "COMPLETED",
        "merge job:\n{}",
        cluster.logs()
    );
    let slurm_wall = t.elapsed();
    assert_eq!(
        cluster.job_state(&array),
        "COMPLETED,COMPLETED,COMPLETED,COMPLETED"
    );
    assert!(
        std::fs::read(out.join("study.json")).unwrap() == reference,
        "the Slurm study.json differs from the local one"
    );
    assert!(out.join("report.html").is_file());
    // The cluster's scheduling delay, from Slurm's own timestamps: the time between the first
    // submission and the merge's end during which none of the study's jobs was running (waiting
    // to be dispatched, for the dependency to release the merge, for a node's daemon to start
    // the job). The target: `--slurm 4` within 2 x the local wall time plus that delay.
    let mut jobs = cluster.job_times(&array);
    assert_eq!(jobs.len(), 4, "four array tasks");
    jobs.extend(cluster.job_times(&merge));
    let first_submit = jobs.iter().map(|j| j.0).min().unwrap();
    let merge_end = jobs.last().unwrap().2;
    let (busy_s, stretches) = busy(jobs.iter().map(|j| (j.1, j.2)).collect());
    let delay_s = (merge_end - first_submit) - busy_s;
    let timeline: Vec<String> = jobs
        .iter()
        .map(|j| format!("{}-{}", j.1 - first_submit, j.2 - first_submit))
        .collect();
    println!(
        "quick ull: local {:.1} s; --slurm 4 submit to merged {:.1} s (Slurm's clock: {} s; jobs running {} s in {stretches} stretch(es), scheduling delay {delay_s} s; tasks then merge ran at s {} after the submission)",
        local_wall.as_secs_f64(),
        slurm_wall.as_secs_f64(),
        merge_end - first_submit,
        busy_s,
        timeline.join(", ")
    );
    // Slurm's timestamps are whole seconds: the span from submission to the merge's end can be
    // off by up to 1 s, and the running time by up to 1 s per stretch, so the delay by up to
    // stretches + 1 s; that is the slack.
    let slack_s = stretches + 1;
    let bound = 2.0 * local_wall.as_secs_f64() + delay_s as f64 + slack_s as f64;
    println!(
        "  bound: 2 x {:.1} + {delay_s} + {slack_s} (timestamp rounding) = {bound:.1} s",
        local_wall.as_secs_f64()
    );
    assert!(
        slurm_wall.as_secs_f64() <= bound,
        "--slurm 4 took {:.1} s, over 2 x local ({:.1} s) + scheduling delay ({delay_s} s) + {slack_s} s of timestamp rounding",
        slurm_wall.as_secs_f64(),
        local_wall.as_secs_f64(),
    );

    // 2. A task that fails (its folder's name is taken by a file): the merge is cancelled,
    // not left pending; rerunning resubmits only that shard and completes.
    let out = work.path().join("retry");
    std::fs::create_dir_all(out.join("shards")).unwrap();
    std::fs::write(out.join("shards").join("task-2"), "in the way").unwrap();
    let (array, merge, _) = submit(&cluster, &out);
    let array = array.expect("an array job");
    let state = cluster.wait_final(&merge, Duration::from_secs(300));
    assert_eq!(state, "CANCELLED", "merge after a failed task");
    assert!(
        cluster.job_state(&array).contains("FAILED"),
        "{}",
        cluster.job_state(&array)
    );
    assert!(!out.join("study.json").exists());
    let shard0 = out.join("shards/task-0/study.json");
    let before = std::fs::metadata(&shard0).unwrap().modified().unwrap();
    std::fs::remove_file(out.join("shards").join("task-2")).unwrap();
    let (array, merge, text) = submit(&cluster, &out);
    assert!(
        text.contains("1 of 4 (2)"),
        "only shard 2 is redone:\n{text}"
    );
    array.expect("an array job for shard 2");
    assert_eq!(
        cluster.wait_final(&merge, Duration::from_secs(300)),
        "COMPLETED"
    );
    assert_eq!(
        std::fs::metadata(&shard0).unwrap().modified().unwrap(),
        before,
        "shard 0 was not touched by the rerun"
    );
    assert!(
        std::fs::read(out.join("study.json")).unwrap() == reference,
        "the rerun's study.json differs from the local one"
    );
}

/// Fake `sbatch` and `squeue` in a folder put first on PATH: the array submission succeeds
/// (job 41), the merge's fails as a full queue would (or, with `merge_ok`, is job 42), and
/// squeue says job 41 still runs.
fn fake_slurm(dir: &Path, merge_ok: bool) -> std::ffi::OsString {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let merge = if merge_ok {
        "echo 42"
    } else {
        "echo 'sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user'\"'\"'s size and/or time limits)' >&2; exit 1"
    };
    script(
        "sbatch",
        &format!("case \"$*\" in *--array=*) echo 41;; *) {merge};; esac\n"),
    );
    script("squeue", "echo '41_[1-3] PENDING'\necho '41_0 RUNNING'\n");
    let mut path = bin.into_os_string();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    path
}

#[test]
fn a_failed_merge_submission_names_the_orphan_array_and_blocks_a_resubmission() {
    let dir = tempfile::tempdir().unwrap();
    let path = fake_slurm(dir.path(), false);
    let out = dir.path().join("out");
    let run = || {
        testkit::run(
            ullstack()
                .args(["study", "ull", "--quick", "--slurm", "4", "--out"])
                .arg(&out)
                .env("PATH", &path),
        )
        .unwrap()
    };
    let (ok, text) = run();
    assert!(!ok, "{text}");
    assert!(
        text.contains("submitted array job 41 (shards 0-3), but not its merge job")
            && text.contains("QOS policy")
            && text.contains("scancel 41"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("slurm/jobs")).unwrap(),
        "array 41\n"
    );
    // Rerunning while job 41 runs would put a second task on each shard folder: refused.
    let (ok, text) = run();
    assert!(
        !ok && text.contains("still queued or running (41_[1-3] PENDING, 41_0 RUNNING)")
            && text.contains("scancel 41"),
        "{text}"
    );
}

/// `--dry-run`'s submit.sh, run by hand, records its job ids as `--slurm` does, so a later
/// `--slurm` into the folder sees them still running.
#[test]
fn a_hand_submission_from_the_dry_run_records_its_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = fake_slurm(dir.path(), true);
    let out = dir.path().join("out");
    let mut cmd = ullstack();
    cmd.args([
        "study",
        "ull",
        "--quick",
        "--slurm",
        "2",
        "--dry-run",
        "--out",
    ])
    .arg(&out);
    let (ok, text) = testkit::run(&mut cmd).unwrap();
    assert!(ok, "{text}");
    let (ok, text) = testkit::run(
        Command::new("sh")
            .arg(out.join("slurm/submit.sh"))
            .env("PATH", &path),
    )
    .unwrap();
    assert!(
        ok && text.contains("submitted: array job 41, merge job 42"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("slurm/jobs")).unwrap(),
        "array 41\nmerge 42\n"
    );
    let (ok, text) = testkit::run(
        ullstack()
            .args(["study", "ull", "--quick", "--slurm", "2", "--out"])
            .arg(&out)
            .env("PATH", &path),
    )
    .unwrap();
    assert!(
        !ok && text.contains("still queued or running") && text.contains("scancel 41 42"),
        "{text}"
    );
}

/// Flags that do nothing where they were given are refused, naming them and why.
#[test]
fn cluster_flags_out_of_place_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    for (args, expect) in [
        (
            &["ull", "--k8s", "2", "--dry-run", "--partition", "p"][..],
            "--partition p is a Slurm option",
        ),
        (
            &["ull", "--k8s", "2", "--dry-run", "--time", "30"],
            "--time 30 is a Slurm option",
        ),
        (
            &["ull", "--k8s", "2", "--dry-run", "--cpus-per-task", "2"],
            "--cpus-per-task 2 is a Slurm option",
        ),
        (
            &["ull", "--slurm", "2", "--dry-run", "--image", "x"],
            "--image x goes with --k8s",
        ),
        (
            &["ull", "--partition", "p"],
            "--partition p goes with --slurm N",
        ),
        (&["ull", "--image", "x"], "--image x goes with --k8s N"),
        (
            &["ull", "--slurm", "2", "--dry-run", "--time", "abc"],
            "--time `abc`",
        ),
        (
            &["ull", "--slurm", "2", "--dry-run", "--time", "1:75:00"],
            "75 minutes (at most 59)",
        ),
    ] {
        let (ok, text) =
            testkit::run(ullstack().arg("study").args(args).arg("--out").arg(&out)).unwrap();
        assert!(
            !ok && text.contains(expect),
            "{args:?}: no `{expect}` in:\n{text}"
        );
    }
    assert!(
        !out.join("slurm").exists() && !out.join("k8s").exists(),
        "nothing written"
    );
    // A valid time goes into the scripts.
    let (ok, text) = testkit::run(
        ullstack()
            .args([
                "study",
                "ull",
                "--quick",
                "--slurm",
                "2",
                "--dry-run",
                "--time",
                "1-02:03:04",
                "--out",
            ])
            .arg(&out),
    )
    .unwrap();
    assert!(ok, "{text}");
    let script = std::fs::read_to_string(out.join("slurm/array.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --time=1-02:03:04"), "{script}");
}

#[test]
fn shard_auto_reads_the_array_index_and_says_where_from() {
    let dir = tempfile::tempdir().unwrap();
    let o = ullstack()
        .args([
            "study", "ull", "--quick", "--quiet", "--shard", "auto", "--out",
        ])
        .arg(dir.path())
        .env("SLURM_ARRAY_TASK_ID", "1")
        .env("SLURM_ARRAY_TASK_COUNT", "2")
        .env("SLURM_ARRAY_TASK_MIN", "0")
        .env("SLURM_ARRAY_TASK_MAX", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "shard 1/2 from the environment (SLURM_ARRAY_TASK_ID=1, SLURM_ARRAY_TASK_COUNT=2)"
        ),
        "{err}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("study.json")).unwrap())
            .unwrap();
    assert_eq!(json["shard"]["index"], 1);
    assert_eq!(json["shard"]["count"], 2);

    // Kubernetes: the index without a count is refused, naming what to add.
    let o = ullstack()
        .args(["study", "ull", "--quick", "--shard", "auto", "--out"])
        .arg(dir.path())
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env("JOB_COMPLETION_INDEX", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("--shard auto/N"),
        "{err}"
    );

    // --dry-run alone, and --k8s without it, are refused with the reason.
    let o = ullstack()
        .args(["study", "ull", "--dry-run"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("--slurm N or --k8s N"));
    let o = ullstack()
        .args(["study", "ull", "--k8s", "2", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("add --dry-run"));
}
