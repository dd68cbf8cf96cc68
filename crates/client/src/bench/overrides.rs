//! Command-line values over a scenario file: what `ullstack bench`'s flags do to the run it
//! starts. [`Overrides::build`] reads the scenario (or starts from an empty one), adds the
//! command line's tenants after the file's, lets each global the command line gives replace
//! the file's, and resolves the server; the command keeps only the flags' parsing and help.
//!
//! The rules, in the order they are applied (the first error wins):
//! * tenants: the file's `[[tenant]]` tables, then each `--tenant` spec; with none at all, the
//!   quick start's open tenant [`DEFAULT_TENANT`];
//! * `duration`, `ios`, `warmup`, `threads`, `seed`: the flag, else the file's key, else the
//!   default (no duration, no I/O cap, no warm-up, the available cores up to
//!   [`DEFAULT_THREADS_MAX`], seed 1); `threads` 0 is refused whichever gave it;
//! * TLS: `tls_psk` (with `tls_psk_identity`), else `tls_ca`, else `tls_insecure`, else none;
//! * server: through the fleet registry at `registry` (one server for every tenant), else the
//!   flag, else the file's `server`, else [`DEFAULT_SERVER`].
//!
//! Worked example: a scenario with `duration = "30s"`, `threads = 2` and two tenants, run with
//! `--duration 5s --tenant name=x,qd=4`, gives a 5 s run on 2 threads with three tenants (the
//! file's two, then `x`) against the file's `server`, seed 1.

use std::path::PathBuf;

use thiserror::Error;

use super::{BenchConfig, Progress};
use crate::tls::{ClientTls, ServerCheck};
use crate::ClientError;
use scenario::{parse_scenario, parse_tenant, Scenario, SpecError};

/// The tenant a run without any gets: the quick start's open tenant at QD1 (4 KB reads).
pub const DEFAULT_TENANT: &str = "name=open,qd=1";
/// The server without `--server`, `--registry` or a scenario's `server`: the quick start's.
pub const DEFAULT_SERVER: &str = "127.0.0.1:10810";
/// Without `--threads` or a scenario's `threads`: the available cores, at most this many.
pub const DEFAULT_THREADS_MAX: usize = 8;
/// Without `--threads`, when the available cores cannot be read.
const FALLBACK_THREADS: usize = 2;

/// Values given on the command line; `None` (or empty, or `false`) leaves the scenario's own.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// A scenario file (TOML) to start from.
    pub scenario: Option<PathBuf>,
    /// Tenant specs (`key=value,...`), added after the scenario's.
    pub tenants: Vec<String>,
    /// The own-protocol address, `host:port`.
    pub server: Option<String>,
    /// A fleet registry URL to find the server in, instead of `server`.
    pub registry: Option<String>,
    /// Measured time, as written (`10s`).
    pub duration: Option<String>,
    /// Requests per tenant, as written (`100000`, `1m`).
    pub ios: Option<String>,
    /// Warm-up before measuring, as written.
    pub warmup: Option<String>,
    pub threads: Option<usize>,
    pub seed: Option<u64>,
    /// No progress line.
    pub no_progress: bool,
    /// A psktool file (`identity:hexkey` lines).
    pub tls_psk: Option<PathBuf>,
    /// The identity to use from `tls_psk` (default: its first line).
    pub tls_psk_identity: Option<String>,
    /// CA certificates (PEM) to check the server's certificate against.
    pub tls_ca: Option<PathBuf>,
    /// Certificate TLS without checking the server.
    pub tls_insecure: bool,
}

/// Why [`Overrides::build`] made no run; each names the flag or file at fault.
#[derive(Debug, Error)]
pub enum OverrideError {
    #[error("cannot read scenario {}", path.display())]
    ReadScenario {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A bad scenario file or `--tenant` spec (the message names which).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A duration flag that is not one; `flag` is `--duration` or `--warmup`.
    #[error("{flag}: {problem}")]
    Duration {
        flag: &'static str,
        problem: engine::units::UnitError,
    },
    #[error("--ios {0:?}: expected a positive count like 100000 or 1m")]
    Ios(String),
    #[error("--threads 0: expected at least 1")]
    NoThreads,
    #[error("--tls-psk")]
    TlsPsk(#[source] ClientError),
    /// The registry could not name one server for every tenant.
    #[error(transparent)]
    Registry(Box<dyn std::error::Error + Send + Sync>),
}

/// The run the command line asks for, and where its server came from.
#[derive(Debug)]
pub struct Built {
    pub config: BenchConfig,
    /// With a registry: the id of the server it named (at `config.server`).
    pub registry_server_id: Option<String>,
}

impl Overrides {
    /// The scenario read from `scenario` (or an empty one) with these values applied, and the
    /// server resolved (through the registry when one is given: that asks it over the network).
    pub fn build(&self) -> Result<Built, OverrideError> {
        let mut scenario = self.scenario_file()?;
        for t in &self.tenants {
            scenario.tenants.extend(parse_tenant(t)?);
        }
        if scenario.tenants.is_empty() {
            scenario.tenants = parse_tenant(DEFAULT_TENANT)?;
        }
        let duration_ns = match &self.duration {
            Some(v) => Some(duration("--duration", v)?),
            None => scenario.duration_ns,
        };
        let ios_per_tenant = match &self.ios {
            Some(v) => Some(
                engine::units::count(v)
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| OverrideError::Ios(v.clone()))?,
            ),
            None => scenario.ios,
        };
        let warmup_ns = match &self.warmup {
            Some(v) => duration("--warmup", v)?,
            None => scenario.warmup_ns.unwrap_or(0),
        };
        let threads = self.threads.or(scenario.threads).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get().min(DEFAULT_THREADS_MAX))
                .unwrap_or(FALLBACK_THREADS)
        });
        if threads == 0 {
            return Err(OverrideError::NoThreads);
        }
        let tls = self.tls()?;
        let (server, registry_server_id) = match &self.registry {
            Some(url) => {
                let (id, addr) = crate::registry::resolve_bench_server(url, &scenario.tenants)
                    .map_err(OverrideError::Registry)?;
                (addr, Some(id))
            }
            None => (
                self.server
                    .clone()
                    .or(scenario.server)
                    .unwrap_or_else(|| DEFAULT_SERVER.to_owned()),
                None,
            ),
        };
        let config = BenchConfig {
            server,
            duration_ns,
            ios_per_tenant,
            warmup_ns,
            threads,
            seed: self.seed.or(scenario.seed).unwrap_or(1),
            tenants: scenario.tenants,
            progress: if self.no_progress {
                Progress::Hidden
            } else {
                Progress::Bar
            },
            tls,
        };
        Ok(Built {
            config,
            registry_server_id,
        })
    }

    /// The scenario file's contents, or an empty scenario without one.
    fn scenario_file(&self) -> Result<Scenario, OverrideError> {
        let Some(path) = &self.scenario else {
            return Ok(Scenario::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| OverrideError::ReadScenario {
            path: path.clone(),
            source,
        })?;
        Ok(parse_scenario(&text, &path.display().to_string())?)
    }

    /// The TLS these values ask for, if any.
    fn tls(&self) -> Result<Option<ClientTls>, OverrideError> {
        if let Some(path) = &self.tls_psk {
            return ClientTls::psk_file(path, self.tls_psk_identity.as_deref())
                .map(Some)
                .map_err(OverrideError::TlsPsk);
        }
        if let Some(ca) = &self.tls_ca {
            return Ok(Some(ClientTls::certificate(ServerCheck::CaFile(
                ca.clone(),
            ))));
        }
        if self.tls_insecure {
            return Ok(Some(ClientTls::certificate(ServerCheck::Insecure)));
        }
        Ok(None)
    }
}

/// A duration flag's value in nanoseconds.
fn duration(flag: &'static str, v: &str) -> Result<u64, OverrideError> {
    engine::units::duration_ns(v).map_err(|problem| OverrideError::Duration { flag, problem })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scenario file in a fresh temporary folder (kept alive by the returned guard).
    fn scenario_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    const FILE: &str = r#"
server = "10.0.0.1:7000"
duration = "30s"
ios = "5k"
warmup = "2s"
threads = 2
seed = 9

[[tenant]]
name = "a"
qd = 8

[[tenant]]
name = "b"
qd = 2
"#;

    fn built(o: &Overrides) -> BenchConfig {
        o.build().unwrap().config
    }

    fn error(o: Overrides) -> String {
        o.build().unwrap_err().to_string()
    }

    #[test]
    fn without_a_file_or_flags_the_quick_start_tenant_runs_against_the_quick_start_server() {
        let c = built(&Overrides {
            threads: Some(3),
            ..Overrides::default()
        });
        assert_eq!(c.server, DEFAULT_SERVER);
        assert_eq!(c.tenants, parse_tenant(DEFAULT_TENANT).unwrap());
        assert_eq!(
            (c.duration_ns, c.ios_per_tenant, c.warmup_ns),
            (None, None, 0)
        );
        assert_eq!((c.threads, c.seed), (3, 1));
        assert_eq!(c.progress, Progress::Bar);
        assert!(c.tls.is_none());
        let c = built(&Overrides::default());
        assert!(
            (1..=DEFAULT_THREADS_MAX).contains(&c.threads),
            "{}",
            c.threads
        );
    }

    #[test]
    fn flags_replace_the_files_globals_and_add_tenants_after_its_own() {
        let (_dir, path) = scenario_file(FILE);
        let file_only = built(&Overrides {
            scenario: Some(path.clone()),
            ..Overrides::default()
        });
        assert_eq!(file_only.server, "10.0.0.1:7000");
        assert_eq!(file_only.duration_ns, Some(30_000_000_000));
        assert_eq!(file_only.ios_per_tenant, Some(5_000));
        assert_eq!(file_only.warmup_ns, 2_000_000_000);
        assert_eq!((file_only.threads, file_only.seed), (2, 9));
        let names = |c: &BenchConfig| c.tenants.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&file_only), ["a", "b"]);

        let c = built(&Overrides {
            scenario: Some(path),
            tenants: vec!["name=x,qd=4".into()],
            server: Some("10.0.0.2:7000".into()),
            duration: Some("5s".into()),
            ios: Some("1m".into()),
            warmup: Some("0".into()),
            threads: Some(4),
            seed: Some(3),
            no_progress: true,
            ..Overrides::default()
        });
        assert_eq!(names(&c), ["a", "b", "x"]);
        assert_eq!(c.server, "10.0.0.2:7000");
        assert_eq!(c.duration_ns, Some(5_000_000_000));
        assert_eq!(c.ios_per_tenant, Some(1_000_000));
        assert_eq!(c.warmup_ns, 0);
        assert_eq!((c.threads, c.seed), (4, 3));
        assert_eq!(c.progress, Progress::Hidden);
    }

    #[test]
    fn a_tls_flag_chooses_the_mode_and_the_ca_wins_over_insecure() {
        let c = built(&Overrides {
            tls_ca: Some("ca.pem".into()),
            tls_insecure: true,
            ..Overrides::default()
        });
        assert_eq!(
            c.tls,
            Some(ClientTls::certificate(ServerCheck::CaFile("ca.pem".into())))
        );
        let c = built(&Overrides {
            tls_insecure: true,
            ..Overrides::default()
        });
        assert_eq!(c.tls, Some(ClientTls::certificate(ServerCheck::Insecure)));
    }

    #[test]
    fn bad_values_name_their_flag_or_file() {
        assert!(error(Overrides {
            duration: Some("soon".into()),
            ..Overrides::default()
        })
        .starts_with("--duration: duration `soon`: expected "));
        assert!(error(Overrides {
            warmup: Some("1 fortnight".into()),
            ..Overrides::default()
        })
        .starts_with("--warmup: duration `1 fortnight`"));
        for ios in ["0", "many"] {
            assert_eq!(
                error(Overrides {
                    ios: Some(ios.into()),
                    ..Overrides::default()
                }),
                format!("--ios {ios:?}: expected a positive count like 100000 or 1m")
            );
        }
        assert_eq!(
            error(Overrides {
                threads: Some(0),
                ..Overrides::default()
            }),
            "--threads 0: expected at least 1"
        );
        let (_dir, path) = scenario_file("threads = 0\n");
        let e = error(Overrides {
            scenario: Some(path.clone()),
            ..Overrides::default()
        });
        assert!(
            e.starts_with(&format!("{}: threads: ", path.display())),
            "{e}"
        );
        assert!(error(Overrides {
            tenants: vec!["name=x,colour=red".into()],
            ..Overrides::default()
        })
        .starts_with("--tenant \"name=x,colour=red\": unknown key \"colour\""));
        let missing = PathBuf::from("/nonexistent/s.toml");
        let e = Overrides {
            scenario: Some(missing),
            ..Overrides::default()
        }
        .build()
        .unwrap_err();
        assert_eq!(e.to_string(), "cannot read scenario /nonexistent/s.toml");
        assert!(std::error::Error::source(&e).is_some());
        let e = Overrides {
            tls_psk: Some("/nonexistent/keys.psk".into()),
            ..Overrides::default()
        }
        .build()
        .unwrap_err();
        assert_eq!(e.to_string(), "--tls-psk");
        let cause = std::error::Error::source(&e).unwrap().to_string();
        assert!(cause.contains("PSK file /nonexistent/keys.psk"), "{cause}");
    }

    #[test]
    fn the_first_bad_value_in_rule_order_is_the_one_reported() {
        let e = error(Overrides {
            duration: Some("x".into()),
            ios: Some("0".into()),
            threads: Some(0),
            ..Overrides::default()
        });
        assert!(e.starts_with("--duration: "), "{e}");
        let e = error(Overrides {
            ios: Some("0".into()),
            threads: Some(0),
            ..Overrides::default()
        });
        assert!(e.starts_with("--ios "), "{e}");
    }
}
