//! `ullstack study`'s flags, checked: which of them go together, and the one thing they ask
//! for ([`Command`]). The command line parses them into [`Flags`] and runs the [`Command`]
//! [`Flags::command`] returns; every refusal is here, with its reason and what to do instead.
//!
//! The rules, by target:
//! * `list`: no folders.
//! * `merge DIR...`: at least one folder; only `--out`, `--force`, `--reference`, `--markdown`
//!   and `--quiet` besides (size, seed and shards come from the folders' `study.json`).
//! * `reflex`: no folders, no `--shard`, no cluster flag (its real half measures this
//!   machine), no `--force` (it never resumes); `--replicates` repeats the simulated runs behind
//!   its published rows (the real half runs once: it measures wall-clock behaviour).
//! * any other study: no folders; `--sim-only` only for `reflex`; `--dry-run` with `--slurm N`
//!   or `--k8s N`; with either, no `--force` and no `--jobs`; `--partition`, `--time` and
//!   `--cpus-per-task` only with `--slurm`; `--image` only with `--k8s`; `--k8s` only with
//!   `--dry-run`. `--shard auto` reads the shard from an array job's environment.
//! * everywhere: `--jobs 0` is refused; `--jobs` defaults to every core, `--seed` to 1, `--out`
//!   to `results/study/NAME` (for `merge`, the first folder).
//!
//! Worked example: `ullstack study ull --slurm 8 --time 30` is [`Command::Slurm`] with 8 tasks
//! of 30 minutes each into `results/study/ull`; `ullstack study ull --k8s 8` is refused (the
//! manifests need `--dry-run`); `ullstack study reflex --replicates 0` is refused, saying at
//! least 1 is expected.

use std::path::PathBuf;

use thiserror::Error;

use crate::driver::{self, StudyOptions};
use crate::k8s;
use crate::plan::{Plan, Size};
use crate::provenance::Build;
use crate::reflex::ReflexOptions;
use crate::results::ShardInfo;
use crate::shard_env;
use crate::slurm::{self, SlurmPlan};
use crate::studies::StudyDef;

/// The flags of `ullstack study`, as given (`None`, empty or `false`: not given).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// A study name, `list` or `merge`.
    pub target: String,
    /// With `merge`: the shard folders.
    pub dirs: Vec<PathBuf>,
    pub quick: bool,
    pub out: Option<PathBuf>,
    pub jobs: Option<usize>,
    pub seed: Option<u64>,
    /// `I/N`, `auto` or `auto/N`.
    pub shard: Option<String>,
    /// Slurm array tasks.
    pub slurm: Option<usize>,
    pub partition: Option<String>,
    pub time: Option<String>,
    pub cpus_per_task: Option<usize>,
    /// Kubernetes shard pods.
    pub k8s: Option<usize>,
    pub image: Option<String>,
    pub dry_run: bool,
    pub quiet: bool,
    pub sim_only: bool,
    pub force: bool,
    pub replicates: Option<u64>,
    pub reference: Option<PathBuf>,
}

/// Flags that do not go together, or a value that is not one; the message says why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct FlagError(pub String);

impl From<String> for FlagError {
    fn from(message: String) -> FlagError {
        FlagError(message)
    }
}

/// What the flags ask for.
pub enum Command {
    /// `study list`.
    List,
    /// `study merge DIR...` into `out`.
    Merge {
        dirs: Vec<PathBuf>,
        out: PathBuf,
        force: bool,
        reference: Option<PathBuf>,
    },
    /// `study reflex` (its real-server half unless `sim_only`).
    Reflex {
        options: ReflexOptions,
        sim_only: bool,
    },
    /// A study (or one shard of it) run here.
    Run {
        def: StudyDef,
        options: StudyOptions,
    },
    /// Kubernetes manifests for `pods` shard pods and a merge Job, written into `dir`.
    K8s {
        def: StudyDef,
        plan: Plan,
        pods: usize,
        image: String,
        dir: PathBuf,
    },
    /// A Slurm array of shard tasks and a merge job.
    Slurm {
        def: StudyDef,
        request: SlurmRequest,
    },
}

/// A Slurm submission before its folder and binary are made absolute ([`SlurmRequest::plan`]).
#[derive(Debug, Clone)]
pub struct SlurmRequest {
    pub plan: Plan,
    pub tasks: usize,
    /// The results folder as given (the caller creates it and makes it absolute).
    pub out: PathBuf,
    pub partition: Option<String>,
    pub time: Option<String>,
    pub cpus_per_task: usize,
    /// Write the scripts, submit nothing.
    pub dry_run: bool,
}

impl SlurmRequest {
    /// The plan to submit, with the results folder `out` and the `ullstack` binary `exe`, both
    /// absolute (the tasks run on other nodes, from other folders).
    pub fn plan(&self, out: PathBuf, exe: PathBuf) -> SlurmPlan {
        SlurmPlan {
            size: self.plan.size,
            seed: self.plan.seed,
            replicates: self.plan.replicates,
            tasks: self.tasks,
            out,
            exe,
            partition: self.partition.clone(),
            time: self.time.clone(),
            cpus_per_task: self.cpus_per_task,
        }
    }
}

/// Shorthand for a refusal.
fn refuse<T>(message: impl Into<String>) -> Result<T, FlagError> {
    Err(FlagError(message.into()))
}

impl Flags {
    /// The command these flags ask for, run by `build`. `env` reads an environment variable
    /// (for `--shard auto`); `note` hears where an automatic shard came from.
    pub fn command(
        &self,
        build: Build,
        env: &dyn Fn(&str) -> Option<String>,
        note: &mut dyn FnMut(&str),
    ) -> Result<Command, FlagError> {
        match self.target.as_str() {
            "list" => {
                if let Some(dir) = self.dirs.first() {
                    return refuse(format!(
                        "`study list` takes no folders (got {})",
                        dir.display()
                    ));
                }
                Ok(Command::List)
            }
            "merge" => self.merge(),
            "reflex" => self.reflex(build),
            _ => self.study(build, env, note),
        }
    }

    fn size(&self) -> Size {
        if self.quick {
            Size::Quick
        } else {
            Size::Full
        }
    }

    /// `--jobs`, refused at 0; every core by default.
    fn jobs(&self) -> Result<usize, FlagError> {
        if self.jobs == Some(0) {
            return refuse("--jobs 0: expected at least 1");
        }
        Ok(self
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())))
    }

    /// `--out`, else `results/study/NAME`.
    fn out(&self, name: &str) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| PathBuf::from("results/study").join(name))
    }

    /// The plan the flags ask for (size, seed, replicates).
    fn plan(&self) -> Result<Plan, FlagError> {
        let plan = Plan::new(self.size(), self.seed.unwrap_or(1));
        match self.replicates {
            Some(n) => Ok(plan.with_replicates(n)?),
            None => Ok(plan),
        }
    }

    /// The cluster flags given (`--slurm N`, `--k8s N`, `--dry-run` and their options), as typed.
    fn cluster_flags(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(n) = self.slurm {
            v.push(format!("--slurm {n}"));
        }
        if let Some(n) = self.k8s {
            v.push(format!("--k8s {n}"));
        }
        if self.dry_run {
            v.push("--dry-run".into());
        }
        v.extend(self.slurm_only_flags());
        if let Some(i) = &self.image {
            v.push(format!("--image {i}"));
        }
        v
    }

    /// The Slurm-only options given (`--partition`, `--time`, `--cpus-per-task`).
    fn slurm_only_flags(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(p) = &self.partition {
            v.push(format!("--partition {p}"));
        }
        if let Some(t) = &self.time {
            v.push(format!("--time {t}"));
        }
        if let Some(c) = self.cpus_per_task {
            v.push(format!("--cpus-per-task {c}"));
        }
        v
    }

    fn merge(&self) -> Result<Command, FlagError> {
        let Some(first) = self.dirs.first() else {
            return refuse(
                "`study merge` needs the shard folders: ullstack study merge DIR... [--out DIR]",
            );
        };
        if self.quick
            || self.jobs.is_some()
            || self.shard.is_some()
            || self.seed.is_some()
            || self.slurm.is_some()
            || self.k8s.is_some()
            || self.sim_only
        {
            return refuse("`study merge` takes only folders, --out, --force, --reference, --markdown and --quiet (size, seed and shards come from the folders' study.json)");
        }
        Ok(Command::Merge {
            dirs: self.dirs.clone(),
            out: self.out.clone().unwrap_or_else(|| first.clone()),
            force: self.force,
            reference: self.reference.clone(),
        })
    }

    fn reflex(&self, build: Build) -> Result<Command, FlagError> {
        if !self.dirs.is_empty() || self.shard.is_some() {
            return refuse("`study reflex` takes no folders and no --shard");
        }
        if let Some(flag) = self.cluster_flags().first() {
            return refuse(format!(
                "`study reflex` has no cluster mode ({flag}): its real-server half runs `ullstack serve` \
                 and `bench` on this machine and measures them here, so it cannot be split into array \
                 tasks; run it here (--sim-only skips the real-server half)"
            ));
        }
        let plan = self.plan()?;
        let jobs = self.jobs()?;
        if self.force {
            return refuse("--force: `study reflex` does not resume (it runs everything again), so there is no other build's folder to accept");
        }
        Ok(Command::Reflex {
            options: ReflexOptions {
                size: plan.size,
                seed: plan.seed,
                replicates: plan.replicates,
                out: self.out("reflex"),
                jobs,
                progress: !self.quiet,
                build,
                reference: self.reference.clone(),
            },
            sim_only: self.sim_only,
        })
    }

    fn study(
        &self,
        build: Build,
        env: &dyn Fn(&str) -> Option<String>,
        note: &mut dyn FnMut(&str),
    ) -> Result<Command, FlagError> {
        if let Some(dir) = self.dirs.first() {
            return refuse(format!(
                "`study {}` takes no folders (got {}); folders go to `study merge`",
                self.target,
                dir.display()
            ));
        }
        let def = crate::studies::find(&self.target)?;
        if self.sim_only {
            let name = def.name;
            return refuse(format!(
                "--sim-only: study `{name}` has no real-server half to skip (only `reflex` runs one); \
                 every run of `{name}` is simulated already, drop the flag"
            ));
        }
        if self.dry_run && self.slurm.is_none() && self.k8s.is_none() {
            return refuse(
                "--dry-run goes with --slurm N or --k8s N (it writes their scripts without submitting)",
            );
        }
        if self.slurm.is_some() || self.k8s.is_some() {
            if self.force {
                return refuse("--force goes with a study run here or `study merge`: the cluster's shard tasks each start a folder of their own");
            }
            return self.cluster(def);
        }
        if let Some(flag) = self.slurm_only_flags().first() {
            return refuse(format!(
                "{flag} goes with --slurm N (it sets the Slurm jobs' #SBATCH options)"
            ));
        }
        if let Some(i) = &self.image {
            return refuse(format!(
                "--image {i} goes with --k8s N (the pods' container image)"
            ));
        }
        let shard = self.shard(env, note)?;
        let jobs = self.jobs()?;
        let options = StudyOptions {
            size: self.size(),
            seed: self.seed.unwrap_or(1),
            out: self.out(def.name),
            jobs,
            shard,
            progress: !self.quiet,
            replicates: self.replicates,
            reference: self.reference.clone(),
            build,
            force: self.force,
        };
        Ok(Command::Run { def, options })
    }

    /// `--shard`: `I/N`, or read from the environment for `auto` (told to `note`).
    fn shard(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        note: &mut dyn FnMut(&str),
    ) -> Result<Option<ShardInfo>, FlagError> {
        match self.shard.as_deref() {
            None => Ok(None),
            Some(s) if shard_env::is_auto(s) => {
                let auto = shard_env::resolve(s, env)?;
                note(&format!(
                    "shard {}/{} from the environment ({})",
                    auto.shard.index, auto.shard.count, auto.source
                ));
                Ok(Some(auto.shard))
            }
            Some(s) => Ok(Some(driver::parse_shard(s)?)),
        }
    }

    /// `--slurm N` and `--k8s N`.
    fn cluster(&self, def: StudyDef) -> Result<Command, FlagError> {
        let plan = self.plan()?;
        let out = self.out(def.name);
        if self.jobs.is_some() {
            return refuse("--jobs sets one process's parallelism; with --slurm use --cpus-per-task, with --k8s each pod runs one run at a time");
        }
        if let Some(n) = self.k8s {
            if let Some(flag) = self.slurm_only_flags().first() {
                return refuse(format!("{flag} is a Slurm option and does nothing with --k8s {n}: a pod's resources and deadline go in the manifest (spec.template.spec.containers[].resources, activeDeadlineSeconds)"));
            }
            if !self.dry_run {
                return refuse(format!("--k8s {n}: ullstack writes the manifests but does not talk to a cluster; add --dry-run and apply them with kubectl"));
            }
            return Ok(Command::K8s {
                def,
                plan,
                pods: n,
                image: self
                    .image
                    .clone()
                    .unwrap_or_else(|| k8s::DEFAULT_IMAGE.to_owned()),
                dir: out.join("k8s"),
            });
        }
        let tasks = self
            .slurm
            .expect("cluster() is called with --slurm or --k8s");
        if let Some(i) = &self.image {
            return refuse(format!(
                "--image {i} goes with --k8s N; Slurm tasks run this ullstack binary"
            ));
        }
        if let Some(t) = &self.time {
            slurm::parse_time_limit(t)?;
        }
        Ok(Command::Slurm {
            def,
            request: SlurmRequest {
                plan,
                tasks,
                out,
                partition: self.partition.clone(),
                time: self.time.clone(),
                cpus_per_task: self.cpus_per_task.unwrap_or(1),
                dry_run: self.dry_run,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build() -> Build {
        Build {
            crate_version: "0.0.0".into(),
            git_commit: "unknown".into(),
            git_dirty: false,
            git_diff_hash: None,
            profile: "test".into(),
            rustc: "rustc".into(),
        }
    }

    fn flags(target: &str) -> Flags {
        Flags {
            target: target.into(),
            ..Flags::default()
        }
    }

    fn command(f: &Flags) -> Result<Command, FlagError> {
        f.command(build(), &|_| None, &mut |_| {})
    }

    fn refused(f: Flags) -> String {
        match command(&f) {
            Err(e) => e.0,
            Ok(_) => panic!("{:?} accepted", f.target),
        }
    }

    #[test]
    fn a_study_run_here_gets_the_defaults() {
        let Command::Run { def, options } = command(&flags("ull")).unwrap() else {
            panic!("not a run");
        };
        assert_eq!(def.name, "ull");
        assert_eq!(options.out, PathBuf::from("results/study/ull"));
        assert_eq!((options.size, options.seed), (Size::Full, 1));
        assert!(options.jobs >= 1 && options.shard.is_none() && options.progress);
        let f = Flags {
            quick: true,
            seed: Some(7),
            jobs: Some(3),
            shard: Some("1/2".into()),
            quiet: true,
            ..flags("ull")
        };
        let Command::Run { options, .. } = command(&f).unwrap() else {
            panic!("not a run");
        };
        assert_eq!(
            (options.size, options.seed, options.jobs),
            (Size::Quick, 7, 3)
        );
        assert_eq!(options.shard.map(|s| (s.index, s.count)), Some((1, 2)));
        assert!(!options.progress);
    }

    #[test]
    fn an_automatic_shard_comes_from_the_environment_and_is_told() {
        let f = Flags {
            shard: Some("auto".into()),
            ..flags("ull")
        };
        let env = |k: &str| match k {
            "SLURM_ARRAY_TASK_ID" => Some("2".to_string()),
            "SLURM_ARRAY_TASK_COUNT" => Some("4".to_string()),
            _ => None,
        };
        let mut notes = Vec::new();
        let c = f.command(build(), &env, &mut |l| notes.push(l.to_string()));
        let Ok(Command::Run { options, .. }) = c else {
            panic!("not a run");
        };
        assert_eq!(options.shard.map(|s| (s.index, s.count)), Some((2, 4)));
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].starts_with("shard 2/4 from the environment ("),
            "{notes:?}"
        );
    }

    #[test]
    fn list_and_merge_take_their_own_flags_only() {
        assert!(matches!(command(&flags("list")), Ok(Command::List)));
        let f = Flags {
            dirs: vec!["a".into()],
            ..flags("list")
        };
        assert_eq!(refused(f), "`study list` takes no folders (got a)");
        assert!(refused(flags("merge")).starts_with("`study merge` needs the shard folders"));
        let f = Flags {
            dirs: vec!["a".into(), "b".into()],
            force: true,
            ..flags("merge")
        };
        let Ok(Command::Merge {
            dirs, out, force, ..
        }) = command(&f)
        else {
            panic!("not a merge");
        };
        assert_eq!((dirs.len(), out, force), (2, PathBuf::from("a"), true));
        let f = Flags {
            dirs: vec!["a".into()],
            seed: Some(2),
            ..flags("merge")
        };
        assert!(refused(f).starts_with("`study merge` takes only folders, --out"));
    }

    #[test]
    fn reflex_refuses_what_its_real_half_cannot_do() {
        let r = |f: Flags| {
            refused(Flags {
                target: "reflex".into(),
                ..f
            })
        };
        assert!(r(Flags {
            shard: Some("0/2".into()),
            ..Flags::default()
        })
        .starts_with("`study reflex` takes no folders and no --shard"));
        assert!(r(Flags {
            time: Some("30".into()),
            ..Flags::default()
        })
        .starts_with("`study reflex` has no cluster mode (--time 30): "));
        assert!(r(Flags {
            replicates: Some(0),
            ..Flags::default()
        })
        .starts_with("--replicates 0: expected at least 1"));
        assert!(r(Flags {
            force: true,
            ..Flags::default()
        })
        .starts_with("--force: `study reflex` does not resume"));
        assert_eq!(
            r(Flags {
                jobs: Some(0),
                force: true,
                ..Flags::default()
            }),
            "--jobs 0: expected at least 1"
        );
        let c = command(&Flags {
            sim_only: true,
            ..flags("reflex")
        });
        let Ok(Command::Reflex { options, sim_only }) = c else {
            panic!("not reflex");
        };
        assert!(sim_only);
        assert_eq!(options.out, PathBuf::from("results/study/reflex"));
        // Replicates as the other studies: five for a full study, one quick, or as asked.
        assert_eq!(options.replicates, crate::plan::DEFAULT_REPLICATES);
        for (quick, asked, expect) in [(true, None, 1), (false, Some(3), 3), (true, Some(2), 2)] {
            let Ok(Command::Reflex { options, .. }) = command(&Flags {
                quick,
                replicates: asked,
                ..flags("reflex")
            }) else {
                panic!("not reflex");
            };
            assert_eq!(
                options.replicates, expect,
                "quick {quick}, --replicates {asked:?}"
            );
        }
    }

    #[test]
    fn cluster_flags_go_with_their_cluster() {
        let f = |g: Flags| Flags {
            target: "ull".into(),
            ..g
        };
        assert!(refused(f(Flags {
            dry_run: true,
            ..Flags::default()
        }))
        .starts_with("--dry-run goes with --slurm N or --k8s N"));
        assert!(refused(f(Flags {
            k8s: Some(2),
            ..Flags::default()
        }))
        .starts_with("--k8s 2: ullstack writes the manifests but does not talk to a cluster"));
        assert!(refused(f(Flags {
            k8s: Some(2),
            dry_run: true,
            partition: Some("p".into()),
            ..Flags::default()
        }))
        .starts_with("--partition p is a Slurm option and does nothing with --k8s 2"));
        assert!(refused(f(Flags {
            slurm: Some(2),
            jobs: Some(2),
            ..Flags::default()
        }))
        .starts_with("--jobs sets one process's parallelism"));
        assert!(refused(f(Flags {
            slurm: Some(2),
            force: true,
            ..Flags::default()
        }))
        .starts_with("--force goes with a study run here or `study merge`"));
        assert_eq!(
            refused(f(Flags {
                cpus_per_task: Some(4),
                ..Flags::default()
            })),
            "--cpus-per-task 4 goes with --slurm N (it sets the Slurm jobs' #SBATCH options)"
        );
        assert_eq!(
            refused(f(Flags {
                image: Some("i".into()),
                ..Flags::default()
            })),
            "--image i goes with --k8s N (the pods' container image)"
        );
        assert!(refused(f(Flags {
            slurm: Some(2),
            time: Some("soon".into()),
            ..Flags::default()
        }))
        .starts_with("--time `soon`: "));
        let c = command(&f(Flags {
            k8s: Some(3),
            dry_run: true,
            out: Some("o".into()),
            ..Flags::default()
        }));
        let Ok(Command::K8s {
            pods, image, dir, ..
        }) = c
        else {
            panic!("not k8s");
        };
        assert_eq!((pods, image.as_str()), (3, k8s::DEFAULT_IMAGE));
        assert_eq!(dir, PathBuf::from("o/k8s"));
        let c = command(&f(Flags {
            slurm: Some(8),
            time: Some("30".into()),
            ..Flags::default()
        }));
        let Ok(Command::Slurm { request, .. }) = c else {
            panic!("not slurm");
        };
        assert_eq!((request.tasks, request.cpus_per_task), (8, 1));
        let p = request.plan("/abs/out".into(), "/bin/ullstack".into());
        assert_eq!((p.tasks, p.time.as_deref()), (8, Some("30")));
        assert_eq!(p.out, PathBuf::from("/abs/out"));
    }

    #[test]
    fn sim_only_is_for_reflex_and_an_unknown_study_is_named() {
        let f = Flags {
            sim_only: true,
            ..flags("ull")
        };
        assert!(refused(f).starts_with("--sim-only: study `ull` has no real-server half"));
        let f = Flags {
            dirs: vec!["d".into()],
            ..flags("ull")
        };
        assert_eq!(
            refused(f),
            "`study ull` takes no folders (got d); folders go to `study merge`"
        );
        let Err(unknown) = crate::studies::find("nope") else {
            panic!("a study named nope");
        };
        assert_eq!(refused(flags("nope")), unknown);
    }
}
