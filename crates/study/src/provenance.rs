//! Provenance: which build ran a study, how, when and where.
//!
//! A number in a report is only as good as the reader's knowledge of what produced it. Every
//! study folder records:
//!
//! - the **build** ([`Build`]): crate version, the git commit baked in at build time with a dirty
//!   flag (and, when dirty, a hash of the uncommitted difference, so two edited builds at one
//!   commit are told apart), cargo profile and rustc version (`crates/cli/build.rs` sets them);
//! - the **seeds** of the runs;
//! - every **invocation** that wrote into the folder ([`Invocation`]): the full command line and
//!   working folder, start and end time (UTC), the host (name, CPU model, cores, kernel), the
//!   build, and how many runs it simulated and reused.
//!
//! ## Where it goes, and why there
//! `study.json` must be byte-identical across `--jobs`, sharding and interruption for one build
//! (the crate essay; the CLI and Slurm tests compare the files byte for byte): that is what lets
//! a reader check a resumed or merged study against a fresh one with `cmp`. Time stamps, command
//! lines, PIDs and hosts differ between two such executions, so they cannot be in it. Hence two
//! records:
//!
//! - `study.json`'s `provenance` object ([`Record`]) holds what is the same for every execution
//!   of one study by one build: the build, any other builds that wrote into the folder
//!   (`other_builds`, only after `--force`), the seeds, and the name of the second file;
//! - `provenance.json` ([`Provenance`]) holds the invocations, appended to by each one: it is
//!   written when an invocation starts (so a folder whose first invocation was interrupted still
//!   says which build made its runs) and again when it ends. An invocation without `ended_utc`
//!   was interrupted or killed. A merge copies the shards' invocations and adds its own.
//!
//! `report.html` shows both (its "Provenance" section); it is not compared byte for byte.
//!
//! ## Another build's folder
//! Resuming reuses the runs already in a folder, so a folder written by another build would mix
//! two builds' results in one table. [`check_folder`] refuses that, naming both builds, unless
//! `--force`; merging refuses shards of different builds the same way ([`check_shards`]). A
//! folder with results but no `provenance.json` was written before this record existed: it
//! counts as another build. "Same build" means the same *source*: version, commit, dirty flag
//! and diff hash ([`Build::same_source`]). The profile and the compiler are recorded but not
//! compared: the simulator's arithmetic is IEEE without fast-math and its floating point that
//! decides event times goes through the pure-Rust `libm`, so a `checked` build and a `release`
//! build of one commit compute the same bytes (the tests run `checked` and users `release`).
//!
//! ## What it leaves out
//! Two builds both outside a git checkout (commit `unknown`) of one version cannot be told
//! apart. The dirty hash covers `crates/`, `Cargo.toml` and `Cargo.lock`, not the toolchain's
//! own files or the registry's crates (pinned by `Cargo.lock`). Hosts are described, not
//! fingerprinted: the CPU model is `/proc/cpuinfo`'s first `model name`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::table::{esc, Table};

/// The per-invocation record's file name inside a study folder.
pub const PROVENANCE_FILE: &str = "provenance.json";

/// What a binary was built from (set at build time by `crates/cli/build.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// The `ullstack` crate's version.
    pub crate_version: String,
    /// `git rev-parse HEAD` at build time, or `unknown` outside a git checkout.
    pub git_commit: String,
    /// The source (`crates/`, `Cargo.toml`, `Cargo.lock`) differed from the commit.
    pub git_dirty: bool,
    /// FNV-1a 64 of the difference (diff and untracked files), 16 hex digits; `None` if clean.
    pub git_diff_hash: Option<String>,
    /// The cargo profile (`dev`, `release`, `checked`, …).
    pub profile: String,
    /// `rustc --version` of the compiler that built it.
    pub rustc: String,
}

impl Build {
    /// Whether `other` was built from the same source (see the module essay: the profile and
    /// compiler are not compared).
    pub fn same_source(&self, other: &Build) -> bool {
        (
            &self.crate_version,
            &self.git_commit,
            self.git_dirty,
            &self.git_diff_hash,
        ) == (
            &other.crate_version,
            &other.git_commit,
            other.git_dirty,
            &other.git_diff_hash,
        )
    }

    /// One line naming the build, e.g. `ullstack 0.1.0, commit 1a2b3c4d5e6f (clean), profile
    /// checked, rustc VERSION (HASH YYYY-MM-DD)` (rustc's own `--version` text).
    pub fn describe(&self) -> String {
        let commit: String = self.git_commit.chars().take(12).collect();
        let state = match (&self.git_dirty, &self.git_diff_hash) {
            (false, _) => "clean".to_string(),
            (true, Some(h)) => format!("with uncommitted changes, diff {h}"),
            (true, None) => "with uncommitted changes".to_string(),
        };
        format!(
            "ullstack {}, commit {commit} ({state}), profile {}, {}",
            self.crate_version, self.profile, self.rustc
        )
    }
}

/// The machine an invocation ran on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    /// `/proc/cpuinfo`'s first `model name` (or the ARM equivalents), else `unknown`.
    pub cpu_model: String,
    /// Logical CPUs this process could run on (affinity and cgroup limits applied).
    pub cores: usize,
    /// The kernel release (`uname -r`).
    pub kernel: String,
}

impl Host {
    /// This machine.
    pub fn this() -> Host {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .ok()
                .filter(|s| !s.is_empty())
        };
        Host {
            name: read("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into()),
            cpu_model: read("/proc/cpuinfo")
                .and_then(|t| cpu_model(&t))
                .unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: read("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
        }
    }
}

/// The CPU model named in `/proc/cpuinfo`'s text: x86's `model name`, else ARM's `Model`,
/// `Hardware` or `CPU part` line.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    for key in ["model name", "Model", "Hardware", "CPU part"] {
        let found = cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key && !v.trim().is_empty()).then(|| v.trim().to_string())
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

/// One invocation of `ullstack study` (or `study merge`) that wrote into a folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invocation {
    /// The command line, one word per element, as the process received it.
    pub command: Vec<String>,
    /// The working folder (relative paths in `command` are relative to it).
    pub cwd: String,
    /// What it did: `run`, `shard I/N` or `merge of N folders`.
    pub what: String,
    /// RFC 3339, UTC (`YYYY-MM-DDThh:mm:ssZ`).
    pub started_utc: String,
    /// When it finished writing; `None`: interrupted, killed or still running.
    pub ended_utc: Option<String>,
    /// Runs simulated, and reused from the folder (or copied from shards), once ended.
    pub ran: Option<usize>,
    pub reused: Option<usize>,
    /// It was told `--force` to accept another build's runs.
    pub forced: bool,
    pub pid: u32,
    pub host: Host,
    pub build: Build,
}

impl Invocation {
    /// This process, starting now.
    pub fn start(build: &Build, what: &str, forced: bool) -> Invocation {
        Invocation {
            command: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            cwd: std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            what: what.to_string(),
            started_utc: now_utc(),
            ended_utc: None,
            ran: None,
            reused: None,
            forced,
            pid: std::process::id(),
            host: Host::this(),
            build: build.clone(),
        }
    }

    /// Records that it simulated `ran` runs and reused `reused`.
    pub fn counts(&mut self, ran: usize, reused: usize) {
        self.ran = Some(ran);
        self.reused = Some(reused);
    }

    /// Marks it ended now.
    pub fn end(&mut self) {
        self.ended_utc = Some(now_utc());
    }

    /// The command line as a shell would take it back (words quoted where needed).
    pub fn command_line(&self) -> String {
        shell_words(&self.command)
    }

    fn key(&self) -> (&str, u32, &str) {
        (&self.host.name, self.pid, &self.started_utc)
    }
}

/// `provenance.json`: every invocation that wrote into a study folder, oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    pub study: String,
    pub invocations: Vec<Invocation>,
}

impl Provenance {
    /// `dir`'s record, `None` if it has none.
    pub fn read(dir: &Path) -> Result<Option<Provenance>, String> {
        let path = dir.join(PROVENANCE_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{}: not a provenance record: {e}", path.display()))
    }

    /// Writes it into `dir` (through a temporary file, renamed into place).
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).expect("provenance serialises") + "\n";
        let path = dir.join(PROVENANCE_FILE);
        let tmp = dir.join(format!(".{PROVENANCE_FILE}.tmp"));
        std::fs::write(&tmp, text).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("renaming to {}: {e}", path.display()))
    }

    /// Appends `inv` unless it is already there (a merge into one of its shard folders).
    pub fn add(&mut self, inv: Invocation) {
        if !self.invocations.iter().any(|i| i.key() == inv.key()) {
            self.invocations.push(inv);
        }
    }

    /// The invocation being recorded: the last one added.
    pub fn current_mut(&mut self) -> &mut Invocation {
        self.invocations
            .last_mut()
            .expect("an invocation is added before it is recorded")
    }

    /// The builds recorded, each once, in order of first appearance.
    pub fn builds(&self) -> Vec<&Build> {
        let mut out: Vec<&Build> = Vec::new();
        for i in &self.invocations {
            if !out.iter().any(|b| b.same_source(&i.build)) {
                out.push(&i.build);
            }
        }
        out
    }
}

/// `study.json`'s `provenance` object: what every execution of one study by one build shares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Record {
    /// The build that wrote this `study.json`.
    pub build: Build,
    /// Builds of other source that wrote runs into the folder (`--force`); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_builds: Vec<Build>,
    /// Every run's seed, each once, ascending.
    pub seeds: Vec<u64>,
    /// The file holding each invocation's command line, times and host.
    pub invocations: &'static str,
}

impl Record {
    /// The record for `build` writing a study whose runs have `seeds`, its folder's
    /// invocations being `prov`.
    pub fn new(build: &Build, seeds: impl IntoIterator<Item = u64>, prov: &Provenance) -> Record {
        let mut seeds: Vec<u64> = seeds.into_iter().collect();
        seeds.sort_unstable();
        seeds.dedup();
        Record {
            build: build.clone(),
            other_builds: prov
                .builds()
                .into_iter()
                .filter(|b| !b.same_source(build))
                .cloned()
                .collect(),
            seeds,
            invocations: PROVENANCE_FILE,
        }
    }
}

/// Refuses to resume `dir` with `build` when another build wrote into it, naming both, unless
/// `force`. `Ok(Some(note))` when `force` let it through (the note says which builds now mix).
pub fn check_folder(dir: &Path, build: &Build, force: bool) -> Result<Option<String>, String> {
    let others: Vec<String> = match Provenance::read(dir)? {
        Some(p) => p
            .builds()
            .into_iter()
            .filter(|b| !b.same_source(build))
            .map(Build::describe)
            .collect(),
        None if has_results(dir) => vec![format!(
            "a build that kept no {PROVENANCE_FILE} (an ullstack from before it was recorded)"
        )],
        None => Vec::new(),
    };
    if others.is_empty() {
        return Ok(None);
    }
    let what = format!(
        "{} holds runs made by {}; this is {}",
        dir.display(),
        others.join(" and by "),
        build.describe()
    );
    if force {
        Ok(Some(format!(
            "{what}: resuming anyway (--force); its results mix both builds, as {PROVENANCE_FILE} and study.json record"
        )))
    } else {
        Err(format!(
            "{what}: resuming would mix the two builds' results; choose another --out, or pass --force to resume anyway"
        ))
    }
}

/// Whether `dir` already holds a study's results (its `study.json` or a finished run).
fn has_results(dir: &Path) -> bool {
    dir.join("study.json").is_file()
        || std::fs::read_dir(dir.join("runs")).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| !e.file_name().to_string_lossy().starts_with('.'))
        })
}

/// Refuses to merge shards (`dirs`, their records `provs`) made by builds of different source,
/// or by a build other than `build` (the merger's), naming two of them, unless `force`.
/// Returns the shards' invocations joined, each once, for the merged folder.
pub fn check_shards(
    dirs: &[&Path],
    provs: &[Option<Provenance>],
    build: &Build,
    force: bool,
) -> Result<Vec<Invocation>, String> {
    let mut joined = Provenance {
        study: String::new(),
        invocations: Vec::new(),
    };
    let mut conflict = None;
    for (dir, prov) in dirs.iter().zip(provs) {
        match prov {
            Some(p) => {
                for b in p.builds() {
                    if conflict.is_none() && !b.same_source(build) {
                        conflict = Some(format!("{} was made by {}", dir.display(), b.describe()));
                    }
                }
                for inv in &p.invocations {
                    joined.add(inv.clone());
                }
            }
            None if conflict.is_none() => {
                conflict = Some(format!(
                    "{} has no {PROVENANCE_FILE} (made by an ullstack from before it was recorded)",
                    dir.display()
                ));
            }
            None => {}
        }
    }
    match conflict {
        Some(c) if !force => Err(format!(
            "{c}, but this merge is {}: the merged study would mix builds; re-run that shard with this build, or pass --force to merge anyway",
            build.describe()
        )),
        _ => Ok(joined.invocations),
    }
}

/// The "Provenance" section of `report.html`.
pub fn html(record: &Record, prov: &Provenance) -> String {
    let mut out = String::from("<h2 id=\"provenance\">Provenance</h2>\n");
    out.push_str(&format!(
        "<p>Written by {}. Seeds: {}.",
        esc(&record.build.describe()),
        record
            .seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for b in &record.other_builds {
        out.push_str(&format!(
            " <b>Some runs were made by another build</b> (resumed with --force): {}.",
            esc(&b.describe())
        ));
    }
    out.push_str(&format!(
        " Every invocation that wrote into this folder ({PROVENANCE_FILE}):</p>\n"
    ));
    out.push_str(&invocations_table(prov).to_html());
    out
}

/// The invocations, one row each.
pub fn invocations_table(prov: &Provenance) -> Table {
    let header = [
        "started (UTC)",
        "ended (UTC)",
        "what",
        "ran / reused",
        "host",
        "CPU",
        "cores",
        "build",
        "command",
    ];
    let rows = prov
        .invocations
        .iter()
        .map(|i| {
            vec![
                i.started_utc.clone(),
                i.ended_utc
                    .clone()
                    .unwrap_or_else(|| "did not finish (interrupted or killed)".into()),
                i.what.clone(),
                match (i.ran, i.reused) {
                    (Some(r), Some(u)) => format!("{r} / {u}"),
                    _ => "-".into(),
                },
                format!("{} (Linux {})", i.host.name, i.host.kernel),
                i.host.cpu_model.clone(),
                i.host.cores.to_string(),
                i.build.describe() + if i.forced { " (--force)" } else { "" },
                format!(
                    "cd {} && {}",
                    shell_words(std::slice::from_ref(&i.cwd)),
                    i.command_line()
                ),
            ]
        })
        .collect();
    Table {
        header: header.map(String::from).to_vec(),
        rows,
    }
}

/// Words joined by spaces, each single-quoted when a shell would split or expand it.
pub fn shell_words(words: &[String]) -> String {
    let plain = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-./=:,@%+".contains(c))
    };
    words
        .iter()
        .map(|w| {
            if plain(w) {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Now, RFC 3339 in UTC to the second.
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t = Civil::from_unix(secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// A UTC calendar date and time of day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl Civil {
    /// The UTC date and time `secs` after the Unix epoch.
    pub fn from_unix(secs: u64) -> Civil {
        let (days, rem) = (secs / 86_400, secs % 86_400);
        // Howard Hinnant's days-to-civil algorithm, for days since 1970-01-01.
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Civil {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A build of `commit`, clean.
    pub(crate) fn build(commit: &str) -> Build {
        Build {
            crate_version: "0.1.0".into(),
            git_commit: commit.into(),
            git_dirty: false,
            git_diff_hash: None,
            profile: "checked".into(),
            rustc: "rustc 1.87.0".into(),
        }
    }

    fn prov_of(builds: &[&Build]) -> Provenance {
        Provenance {
            study: "ull".into(),
            invocations: builds
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let mut inv = Invocation::start(b, "run", false);
                    // Distinct invocations, as two processes' would be.
                    inv.started_utc = format!("{}-{i}", b.git_commit);
                    inv
                })
                .collect(),
        }
    }

    #[test]
    fn the_same_source_is_the_same_build_whatever_the_profile_or_compiler() {
        let a = build("aaaa");
        let mut release = a.clone();
        release.profile = "release".into();
        release.rustc = "rustc 1.90.0".into();
        assert!(a.same_source(&release));
        let mut dirty = a.clone();
        dirty.git_dirty = true;
        dirty.git_diff_hash = Some("00000000000000ff".into());
        assert!(!a.same_source(&dirty));
        let mut other_edit = dirty.clone();
        other_edit.git_diff_hash = Some("00000000000000fe".into());
        assert!(!dirty.same_source(&other_edit), "two edits at one commit");
        assert!(!a.same_source(&build("bbbb")));
        assert!(dirty
            .describe()
            .contains("uncommitted changes, diff 00000000000000ff"));
        assert!(a
            .describe()
            .contains("commit aaaa (clean), profile checked"));
    }

    #[test]
    fn a_folder_of_another_build_is_refused_naming_both_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (build("1111111111111111"), build("2222222222222222"));
        // An empty folder, then one of this build: nothing to refuse.
        assert_eq!(check_folder(dir.path(), &new, false), Ok(None));
        prov_of(&[&new]).write(dir.path()).unwrap();
        assert_eq!(check_folder(dir.path(), &new, false), Ok(None));
        prov_of(&[&old, &new]).write(dir.path()).unwrap();
        let e = check_folder(dir.path(), &new, false).unwrap_err();
        assert!(
            e.contains("commit 111111111111 (clean)")
                && e.contains("this is ullstack 0.1.0, commit 222222222222")
                && e.contains("--force"),
            "{e}"
        );
        let note = check_folder(dir.path(), &new, true).unwrap().unwrap();
        assert!(note.contains("mix both builds"), "{note}");
    }

    #[test]
    fn a_folder_with_results_but_no_record_counts_as_another_build() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runs/.tmp-x")).unwrap();
        // Only a temporary (unfinished) run: no results yet.
        assert_eq!(check_folder(dir.path(), &build("a"), false), Ok(None));
        std::fs::create_dir_all(dir.path().join("runs/x")).unwrap();
        let e = check_folder(dir.path(), &build("a"), false).unwrap_err();
        assert!(e.contains("kept no provenance.json"), "{e}");
    }

    #[test]
    fn shards_of_two_builds_are_refused_and_one_builds_invocations_are_joined_once() {
        let (a, b) = (build("aaaaaaaaaaaaaaaa"), build("bbbbbbbbbbbbbbbb"));
        let (pa, pb) = (prov_of(&[&a]), prov_of(&[&b]));
        let (da, db) = (Path::new("/s/a"), Path::new("/s/b"));
        let e =
            check_shards(&[da, db], &[Some(pa.clone()), Some(pb.clone())], &a, false).unwrap_err();
        assert!(
            e.contains("/s/b was made by ullstack 0.1.0, commit bbbbbbbbbbbb")
                && e.contains("this merge is ullstack 0.1.0, commit aaaaaaaaaaaa"),
            "{e}"
        );
        let joined = check_shards(&[da, db], &[Some(pa.clone()), Some(pb)], &a, true).unwrap();
        assert_eq!(joined.len(), 2);
        // The same shard given twice (or merged into itself): its invocation once.
        let joined = check_shards(&[da, da], &[Some(pa.clone()), Some(pa)], &a, false).unwrap();
        assert_eq!(joined.len(), 1);
        let e = check_shards(&[da], &[None], &a, false).unwrap_err();
        assert!(e.contains("/s/a has no provenance.json"), "{e}");
    }

    #[test]
    fn the_record_lists_seeds_once_and_only_builds_that_differ() {
        let (a, b) = (build("a"), build("b"));
        let r = Record::new(&a, [3, 1, 3, 2], &prov_of(&[&a, &a]));
        assert_eq!(r.seeds, [1, 2, 3]);
        assert!(r.other_builds.is_empty());
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("other_builds"), "{json}");
        let r = Record::new(&a, [1], &prov_of(&[&b, &a]));
        assert_eq!(r.other_builds, std::slice::from_ref(&b));
        assert!(html(&r, &prov_of(&[&b, &a])).contains("made by another build"));
    }

    #[test]
    fn cpu_models_are_read_from_x86_and_arm_cpuinfo() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            cpu_model(x86).as_deref(),
            Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
        let arm =
            "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nModel\t: Raspberry Pi 4\n";
        assert_eq!(cpu_model(arm).as_deref(), Some("Raspberry Pi 4"));
        assert_eq!(cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn command_lines_are_quoted_for_a_shell() {
        let words = ["ullstack", "study", "ull", "--out", "my results", "it's"].map(String::from);
        assert_eq!(
            shell_words(&words),
            r"ullstack study ull --out 'my results' 'it'\''s'"
        );
        assert_eq!(shell_words(&["".into()]), "''");
    }

    #[test]
    fn utc_dates_are_civil() {
        // `date -u -d @SECS '+%F %T'` for each.
        let c = Civil::from_unix(1_700_000_000);
        assert_eq!((c.year, c.month, c.day), (2023, 11, 14));
        assert_eq!((c.hour, c.minute, c.second), (22, 13, 20));
        let leap = Civil::from_unix(951_782_400);
        assert_eq!((leap.year, leap.month, leap.day), (2000, 2, 29));
        let now = now_utc();
        assert!(
            now.len() == 20 && now.ends_with('Z') && now.as_bytes()[10] == b'T',
            "{now}"
        );
    }
}
