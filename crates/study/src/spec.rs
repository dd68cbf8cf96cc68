//! One run of a study: a complete device-level configuration that stands on its own.
//!
//! A run is written out as `runs/<id>/config.toml` (exactly the file `ullstack sim --config`
//! reads: seed, job file, integrity, `[device]`, `[host]`) and `runs/<id>/job.fio` beside it, so
//! any point of any plot can be re-run alone:
//!
//! ```text
//! ullstack sim --config results/study/ull/runs/lat-zssd-randread-qd4/config.toml
//! ```
//!
//! The run's *config hash* is a 64-bit FNV-1a hash of the canonical config text, a NUL byte and
//! the job text (the seed is in the config text). It is a pure function of what the run
//! simulates, so it decides whether a finished run can be reused (resuming) and whether shards
//! being merged ran the same thing. FNV-1a is not a cryptographic hash; it only has to tell
//! configurations apart, not resist forgery. It is written as 16 lower-case hex digits; change
//! one byte of the config or the job text and it changes (`hash_changes_with_seed_job_and_device`).
//!
//! ## Full-system runs
//! A run with [`RunSpec::system`] set is a full-system run instead: `job_fio` then holds the
//! whole system file (host, device, processes, duration, seed), written as `config.toml`, and
//! the run applies the named stack to it, so it re-runs alone as
//!
//! ```text
//! ullstack sim --system results/study/fastdrain/runs/fd-apache-upload/config.toml --stack fd
//! ```
//!
//! (the file's first line says so). Its hash covers the file, the stack and the series window.
//!
//! The id is a readable slug chosen by the study (`lat-zssd-randread-qd4`), unique within it;
//! the hash, not the id, says whether a stored result is still valid.

use std::path::Path;

use engine::rng::Fnv1a64;
use sim::config::DeviceRunOverrides;
use sim::{DeviceRunConfig, RunFileSettings};

/// The job file's name inside a run folder (the config's `job_file`).
pub const JOB_FILE: &str = "job.fio";
/// The config's name inside a run folder.
pub const CONFIG_FILE: &str = "config.toml";

/// A complete device-level run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSpec {
    /// Readable slug, unique within the study; the run's folder name.
    pub id: String,
    /// Device preset name (`zssd`, `nvme-tlc`, …).
    pub device: String,
    /// Thin-host cost preset (`x86-4`, …).
    pub host: String,
    /// The fio job file, as text.
    pub job_fio: String,
    /// Seed of every random stream in the run.
    pub seed: u64,
    /// A full-system run (`job_fio` is then the system file; see the module essay).
    pub system: Option<SystemRun>,
    /// Tables overriding the device preset of a device-level run, as TOML (`[device.cache]`
    /// and its keys); empty: the preset as it is. A `--quick` study scales a device this way.
    pub device_keys: String,
}

/// What makes a run a full-system run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemRun {
    /// The named stack applied to the system file (`sim::stack`).
    pub stack: String,
    /// Also write `timeseries.csv` with windows of this many ms (0: none).
    pub series_ms: u64,
}

/// A full-system run's system file, built in the order `ullstack sim --system` documents:
/// seed and duration, `[host]`, `[device]` and its tables, then the processes. Each piece is
/// written as the studies wrote it by hand, so a study's config text (and hash) is unchanged.
#[derive(Clone, Debug)]
pub struct SystemFile {
    text: String,
}

impl SystemFile {
    /// `seed`, `duration_ms` and `[host] preset = host`.
    pub fn new(seed: u64, duration_ms: u64, host: &str) -> SystemFile {
        SystemFile {
            text: format!(
                "seed = {seed}\nduration_ms = {duration_ms}\n\n[host]\npreset = \"{host}\"\n"
            ),
        }
    }

    /// A `key = value` line appended to the table written last.
    pub fn key(mut self, line: &str) -> SystemFile {
        self.text.push_str(line);
        self.text.push('\n');
        self
    }

    /// `[device] preset = device`.
    pub fn device(self, preset: &str) -> SystemFile {
        self.table("device").key(&format!("preset = \"{preset}\""))
    }

    /// A table header (`[device.cache]`), after a blank line.
    pub fn table(mut self, name: &str) -> SystemFile {
        self.text.push_str(&format!("\n[{name}]\n"));
        self
    }

    /// A `[[process]]` running `profile`, after a blank line.
    pub fn process(mut self, profile: &str) -> SystemFile {
        self.text
            .push_str(&format!("\n[[process]]\nprofile = \"{profile}\"\n"));
        self
    }

    /// Lines appended as they are (each ending in a newline, or empty).
    pub fn raw(mut self, lines: &str) -> SystemFile {
        self.text.push_str(lines);
        self
    }

    pub fn finish(self) -> String {
        self.text
    }
}

impl RunSpec {
    /// The canonical `config.toml` text: what `ullstack sim --config` reads (for a system
    /// run, the system file `ullstack sim --system` reads).
    pub fn config_toml(&self) -> String {
        if let Some(sys) = &self.system {
            return format!(
                "# {id}: re-run alone with `ullstack sim --system {CONFIG_FILE} --stack {stack}{series}` \
                 from this folder\n{text}",
                id = self.id,
                stack = sys.stack,
                series = match sys.series_ms {
                    0 => String::new(),
                    ms => format!(" --series-ms {ms}"),
                },
                text = self.job_fio,
            );
        }
        format!(
            "# {id}: re-run alone with `ullstack sim --config {CONFIG_FILE}` from this folder\n\
             seed = {seed}\n\
             job_file = \"{JOB_FILE}\"\n\
             integrity = false\n\
             \n\
             [device]\n\
             preset = \"{device}\"\n\
             {device_keys}\
             \n\
             [host]\n\
             preset = \"{host}\"\n",
            id = self.id,
            seed = self.seed,
            device = self.device,
            device_keys = if self.device_keys.is_empty() {
                String::new()
            } else {
                format!("\n{}", self.device_keys)
            },
            host = self.host,
        )
    }

    /// The config hash: FNV-1a 64 over config text, NUL, job text; 16 lower-case hex digits.
    pub fn config_hash(&self) -> String {
        let mut h = Fnv1a64::new();
        h.write(self.config_toml().as_bytes());
        h.write(&[0]);
        match &self.system {
            // The config is the system file; the stack and series window are in its header.
            Some(_) => {}
            None => h.write(self.job_fio.as_bytes()),
        }
        format!("{:016x}", h.finish())
    }

    /// Writes `config.toml` and `job.fio` into `dir` (which must exist).
    pub fn write_files(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::write(dir.join(CONFIG_FILE), self.config_toml())?;
        if self.system.is_some() {
            return Ok(());
        }
        std::fs::write(dir.join(JOB_FILE), &self.job_fio)
    }

    /// Whether `dir` holds exactly this run's config and job files.
    pub fn files_match(&self, dir: &Path) -> bool {
        let read = |name| std::fs::read_to_string(dir.join(name)).ok();
        read(CONFIG_FILE).as_deref() == Some(self.config_toml().as_str())
            && (self.system.is_some() || read(JOB_FILE).as_deref() == Some(self.job_fio.as_str()))
    }

    /// A system run's configuration, read back from `dir` through the loader `ullstack sim
    /// --system … --stack …` uses.
    pub fn load_system(&self, dir: &Path) -> Result<sim::system::SystemConfig, String> {
        let sys = self
            .system
            .as_ref()
            .ok_or_else(|| format!("run `{}` is not a system run", self.id))?;
        let stack = sim::stack::find(&sys.stack)?;
        sim::system::SystemConfig::load_with_stack(&dir.join(CONFIG_FILE), Some(stack))
            .map_err(|e| e.to_string())
    }

    /// The simulator's configuration, read back from the files in `dir` through the same
    /// loader `ullstack sim --config` uses, so a study run and a re-run agree by construction.
    pub fn load_config(&self, dir: &Path) -> Result<DeviceRunConfig, String> {
        let path = dir.join(CONFIG_FILE);
        let file = RunFileSettings::load(&path).map_err(|e| e.to_string())?;
        // The study writes every key: a missing one means the folder is not this study's.
        let missing = [
            (file.seed.is_none(), "seed"),
            (file.device.is_none(), "[device] table"),
            (file.host.is_none(), "[host] table"),
            (file.job_file.is_none(), "job_file"),
        ];
        if let Some((_, what)) = missing.iter().find(|(absent, _)| *absent) {
            return Err(format!("{}: no {what}", path.display()));
        }
        let mut cfg = DeviceRunConfig::resolve(file, DeviceRunOverrides::default())
            .map_err(|e| e.to_string())?;
        cfg.job_source = JOB_FILE.to_string();
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_system_file_reads_as_the_studies_wrote_it() {
        let text = SystemFile::new(3, 1000, "arm8")
            .key("attr = \"on\"")
            .device("zssd")
            .table("device.cache")
            .raw("ways = 4\n")
            .process("apache")
            .key("requests_per_sec = 400")
            .process("pagerank")
            .finish();
        assert_eq!(
            text,
            "seed = 3\nduration_ms = 1000\n\n[host]\npreset = \"arm8\"\nattr = \"on\"\n\n\
             [device]\npreset = \"zssd\"\n\n[device.cache]\nways = 4\n\n\
             [[process]]\nprofile = \"apache\"\nrequests_per_sec = 400\n\n\
             [[process]]\nprofile = \"pagerank\"\n"
        );
        let parsed: toml::Table = text.parse().expect("a valid TOML file");
        assert_eq!(parsed["process"].as_array().map(Vec::len), Some(2));
    }

    use super::*;

    fn spec() -> RunSpec {
        RunSpec {
            id: "t".into(),
            device: "zssd".into(),
            host: "x86-4".into(),
            job_fio: "[j]\nrw=read\nnumber_ios=10\n".into(),
            seed: 1,
            system: None,
            device_keys: String::new(),
        }
    }

    #[test]
    fn hash_changes_with_seed_job_and_device() {
        let base = spec().config_hash();
        assert_eq!(base, spec().config_hash(), "stable across calls");
        let mut s = spec();
        s.seed = 2;
        assert_ne!(s.config_hash(), base);
        let mut s = spec();
        s.job_fio.push(' ');
        assert_ne!(s.config_hash(), base);
        let mut s = spec();
        s.device = "nvme-tlc".into();
        assert_ne!(s.config_hash(), base);
    }

    #[test]
    fn written_config_loads_back_as_the_same_run() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec();
        s.write_files(dir.path()).unwrap();
        assert!(s.files_match(dir.path()));
        let cfg = s.load_config(dir.path()).unwrap();
        assert_eq!(cfg.seed, 1);
        assert_eq!(cfg.device.name, "zssd");
        assert_eq!(cfg.host_name, "x86-4");
        assert_eq!(cfg.jobs.jobs.len(), 1);
        let mut other = spec();
        other.seed = 3;
        assert!(!other.files_match(dir.path()));
    }
}
