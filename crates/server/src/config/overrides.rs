//! Command-line values over a config: what `ullstack serve`'s flags do to the config it
//! starts (and reloads) with. [`Overrides::build`] takes the config from a file, or builds the
//! quick start's (one in-memory volume), applies each value given and validates the result;
//! the command keeps only the flags' parsing and help.
//!
//! `listen` and `listen_native` over a file replace its `[listen]` addresses; in the quick
//! start they are its addresses (NBD default [`DEFAULT_NBD_ADDR`], the own protocol on the NBD
//! port + 1, or port 0 beside an NBD port 0). The `registry*` values apply before validation,
//! so a bad TTL is refused whichever of the file and the flags gave it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{
    ByteSize, ConfigError, IdlePolicy, ProfileConfig, RegistryConfig, SchedulerMode, ServerConfig,
    DEFAULT_REGISTRY_TTL_S,
};

/// The quick start's NBD address when `listen` is not given: 127.0.0.1:10809.
pub const DEFAULT_NBD_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 10809);

/// Values given on the command line; `None` (or `false`) leaves the config's own.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `[listen] nbd`.
    pub listen: Option<SocketAddr>,
    /// `[listen] native`.
    pub listen_native: Option<SocketAddr>,
    /// `[listen] admin`.
    pub admin: Option<SocketAddr>,
    /// `[dataplane] workers`.
    pub workers: Option<usize>,
    /// `[dataplane] idle`.
    pub idle: Option<IdlePolicy>,
    /// `[dataplane] coalesce_ns`.
    pub coalesce_ns: Option<u64>,
    /// `[limits] max_memory_bytes`, as written (a [`ByteSize`]).
    pub max_memory: Option<String>,
    /// A profile file (TOML) that becomes `[qos.profile]`, inline.
    pub profile: Option<PathBuf>,
    /// `[qos] scheduler = "off"`.
    pub no_scheduler: bool,
    /// `[tls] psk_file`.
    pub tls_psk: Option<PathBuf>,
    /// `[tls] certificate`; applied only together with `tls_key`.
    pub tls_certificate: Option<PathBuf>,
    /// `[tls] key`; applied only together with `tls_certificate`.
    pub tls_key: Option<PathBuf>,
    /// `[registry] url` (creates `[registry]` with the default TTL if the config has none).
    pub registry: Option<String>,
    /// `[registry] id`; needs a registry from the file or `registry`.
    pub registry_id: Option<String>,
    /// `[registry] ttl_s`; needs a registry from the file or `registry`.
    pub registry_ttl: Option<i64>,
}

/// Why [`Overrides::build`] made no config; each names the flag or file at fault.
#[derive(Debug, Error)]
pub enum OverrideError {
    #[error("give --memory SIZE for the quick start (e.g. `ullstack serve --memory 1GiB --listen 127.0.0.1:10809`) or --config FILE")]
    NoSource,
    #[error("reading config file {}", path.display())]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("in config file {}", path.display())]
    ParseConfig {
        path: PathBuf,
        #[source]
        source: ConfigError,
    },
    #[error("--memory: {0}")]
    Memory(String),
    #[error(
        "--listen port {0} leaves no room for the own protocol on port+1; give --listen-native"
    )]
    NoNativePort(u16),
    #[error("--max-memory: {0}")]
    MaxMemory(String),
    #[error("--profile: reading {}", path.display())]
    ReadProfile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--profile {}: not valid TOML", path.display())]
    ProfileToml {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("--profile {}", path.display())]
    Profile {
        path: PathBuf,
        #[source]
        source: qos::ProfileError,
    },
    #[error("--registry-id and --registry-ttl need a registry: --registry URL or [registry] in the config")]
    RegistryFlagsWithoutRegistry,
    #[error("invalid configuration")]
    Invalid(#[source] ConfigError),
}

impl Overrides {
    /// The config read from `file`, else the quick start with a memory volume of `memory`
    /// bytes (a [`ByteSize`]), with these values applied, validated.
    pub fn build(
        &self,
        file: Option<&Path>,
        memory: Option<&str>,
    ) -> Result<ServerConfig, OverrideError> {
        let mut config = match (file, memory) {
            (Some(path), _) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| OverrideError::ReadConfig {
                        path: path.to_path_buf(),
                        source,
                    })?;
                let mut config = ServerConfig::from_toml_str(&text).map_err(|source| {
                    OverrideError::ParseConfig {
                        path: path.to_path_buf(),
                        source,
                    }
                })?;
                if let Some(a) = self.listen {
                    config.listen.nbd = Some(a);
                }
                if let Some(a) = self.listen_native {
                    config.listen.native = Some(a);
                }
                config
            }
            (None, Some(size)) => self.quick_start(size)?,
            (None, None) => return Err(OverrideError::NoSource),
        };
        self.apply(&mut config)?;
        config.validate().map_err(OverrideError::Invalid)?;
        Ok(config)
    }

    /// The quick start's config at this command line's addresses.
    fn quick_start(&self, size: &str) -> Result<ServerConfig, OverrideError> {
        let size = ByteSize::parse(size).map_err(OverrideError::Memory)?;
        let nbd = self.listen.unwrap_or(DEFAULT_NBD_ADDR);
        let native = match self.listen_native {
            Some(a) => a,
            None if nbd.port() == 0 => SocketAddr::new(nbd.ip(), 0),
            None => {
                let port = nbd
                    .port()
                    .checked_add(1)
                    .ok_or(OverrideError::NoNativePort(nbd.port()))?;
                SocketAddr::new(nbd.ip(), port)
            }
        };
        Ok(ServerConfig::quick_start(size, Some(nbd), Some(native)))
    }

    /// Every value but the listen addresses onto `config` (not validated).
    fn apply(&self, config: &mut ServerConfig) -> Result<(), OverrideError> {
        if let Some(a) = self.admin {
            config.listen.admin = Some(a);
        }
        if let Some(w) = self.workers {
            config.dataplane.workers = w;
        }
        if let Some(idle) = self.idle {
            config.dataplane.idle = idle;
        }
        if let Some(ns) = self.coalesce_ns {
            config.dataplane.coalesce_ns = ns;
        }
        if let Some(size) = &self.max_memory {
            config.limits.max_memory_bytes =
                ByteSize::parse(size).map_err(OverrideError::MaxMemory)?;
        }
        if self.tls_psk.is_some() || self.tls_certificate.is_some() {
            let tls = config.tls.get_or_insert_with(Default::default);
            if let Some(p) = &self.tls_psk {
                tls.psk_file = Some(p.clone());
            }
            if let (Some(c), Some(k)) = (&self.tls_certificate, &self.tls_key) {
                tls.certificate = Some(c.clone());
                tls.key = Some(k.clone());
            }
        }
        if let Some(path) = &self.profile {
            config.qos.profile = ProfileConfig::Inline(profile_table(path)?);
        }
        if self.no_scheduler {
            config.qos.scheduler = SchedulerMode::Off;
        }
        self.apply_registry(config)
    }

    /// `registry`, `registry_id` and `registry_ttl` over the config's `[registry]`.
    fn apply_registry(&self, config: &mut ServerConfig) -> Result<(), OverrideError> {
        if let Some(url) = &self.registry {
            match config.registry.as_mut() {
                Some(r) => r.url = url.clone(),
                None => {
                    config.registry = Some(RegistryConfig {
                        url: url.clone(),
                        id: None,
                        ttl_s: DEFAULT_REGISTRY_TTL_S,
                    })
                }
            }
        }
        let Some(r) = config.registry.as_mut() else {
            if self.registry_id.is_some() || self.registry_ttl.is_some() {
                return Err(OverrideError::RegistryFlagsWithoutRegistry);
            }
            return Ok(());
        };
        if let Some(id) = &self.registry_id {
            r.id = Some(id.clone());
        }
        if let Some(ttl) = self.registry_ttl {
            r.ttl_s = ttl;
        }
        Ok(())
    }
}

/// A profile file as the inline `[qos.profile]` table, refused unless it is a device profile.
fn profile_table(path: &Path) -> Result<toml::Table, OverrideError> {
    let text = std::fs::read_to_string(path).map_err(|source| OverrideError::ReadProfile {
        path: path.to_path_buf(),
        source,
    })?;
    let table: toml::Table = text.parse().map_err(|source| OverrideError::ProfileToml {
        path: path.to_path_buf(),
        source,
    })?;
    qos::DeviceProfile::from_toml_str(&text).map_err(|source| OverrideError::Profile {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(o: &Overrides) -> Result<ServerConfig, OverrideError> {
        o.build(None, Some("64MiB"))
    }

    #[test]
    fn the_quick_start_listens_on_the_default_and_the_next_port() {
        let c = memory(&Overrides::default()).unwrap();
        assert_eq!(c.listen.nbd, Some(DEFAULT_NBD_ADDR));
        assert_eq!(c.listen.native, Some("127.0.0.1:10810".parse().unwrap()));
        let o = Overrides {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            ..Overrides::default()
        };
        assert_eq!(
            memory(&o).unwrap().listen.native,
            Some("127.0.0.1:0".parse().unwrap())
        );
        let o = Overrides {
            listen: Some("127.0.0.1:65535".parse().unwrap()),
            ..Overrides::default()
        };
        let e = memory(&o).unwrap_err().to_string();
        assert!(e.contains("--listen port 65535 leaves no room"), "{e}");
    }

    #[test]
    fn given_values_replace_the_configs_and_absent_ones_leave_it() {
        let base = memory(&Overrides::default()).unwrap();
        let o = Overrides {
            workers: Some(7),
            coalesce_ns: Some(0),
            max_memory: Some("512MiB".into()),
            no_scheduler: true,
            ..Overrides::default()
        };
        let c = memory(&o).unwrap();
        assert_eq!(c.dataplane.workers, 7);
        assert_eq!(c.dataplane.coalesce_ns, 0);
        assert_eq!(
            c.limits.max_memory_bytes,
            ByteSize::parse("512MiB").unwrap()
        );
        assert_eq!(c.qos.scheduler, SchedulerMode::Off);
        assert_eq!(c.dataplane.idle, base.dataplane.idle);
        assert_eq!(c.listen, base.listen);
        assert_ne!(base.dataplane.workers, 7);
    }

    #[test]
    fn bad_values_name_their_flag() {
        let e = |o: Overrides| memory(&o).unwrap_err().to_string();
        assert!(e(Overrides {
            max_memory: Some("lots".into()),
            ..Overrides::default()
        })
        .starts_with("--max-memory: "));
        assert_eq!(
            e(Overrides {
                registry_ttl: Some(5),
                ..Overrides::default()
            }),
            "--registry-id and --registry-ttl need a registry: --registry URL or [registry] in the config"
        );
        assert!(matches!(
            Overrides::default().build(None, None),
            Err(OverrideError::NoSource)
        ));
        assert!(Overrides::default()
            .build(None, Some("huge"))
            .unwrap_err()
            .to_string()
            .starts_with("--memory: "));
    }

    #[test]
    fn a_registry_flag_creates_the_registry_with_the_default_ttl() {
        let o = Overrides {
            registry: Some("http://127.0.0.1:2379".into()),
            registry_id: Some("a".into()),
            ..Overrides::default()
        };
        let r = memory(&o).unwrap().registry.unwrap();
        assert_eq!(
            (r.url.as_str(), r.id.as_deref(), r.ttl_s),
            ("http://127.0.0.1:2379", Some("a"), DEFAULT_REGISTRY_TTL_S)
        );
        let o = Overrides {
            registry_ttl: Some(0),
            ..o
        };
        let e = memory(&o).unwrap_err();
        assert!(matches!(e, OverrideError::Invalid(_)), "{e}");
    }
}
