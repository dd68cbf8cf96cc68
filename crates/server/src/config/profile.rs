//! Which QoS profile prices a server's requests, chosen to fit its volumes' backends.
//!
//! # What it models
//! The token scheduler (crate `qos`) prices every request with a device profile: what a read,
//! a write, a FLUSH cost in tokens, and how many tokens per second the device sustains at a
//! latency target. A flash profile is right for flash: device "A" (`reflex-a`) prices a write
//! at ten reads because a flash write disturbs the reads around it. RAM has no such cost, and
//! pricing it as flash paces it as flash: 1 M pipelined 1 KiB writes to the quick start's
//! memory volume cost 10 M tokens, 17.5 s at reflex-a's 570 K tokens/s, where nbdkit's memory
//! plugin takes 3.7 s at the same server CPU.
//!
//! # The choice
//! Every volume has a profile of its own. `[qos] profile = "auto"` (the default, what the
//! quick start uses) picks by backend:
//! - a `memory` volume: the built-in `memory` profile (one token per 4 KB unit for every
//!   operation, 16 M tokens/s from a 10 µs p95 target; crate `qos`, `profile`): the bucket
//!   never paces RAM;
//! - a `file` or `emulated` volume: [`FLASH_DEFAULT_PROFILE`] (`reflex-a`), the profile of the
//!   published server's device, until a calibrated one is given.
//!
//! The server has one token bucket, as the published design has one device per server: its
//! profile is the flash volumes' when there are any, `memory` when every volume is in memory.
//! A memory volume beside flash volumes keeps its own profile, which never paces it, so its
//! requests skip the flash device's bucket ([`Pacing::Unpaced`], `qos::SchedShare::
//! enqueue_unpaced`): they are released at the next round and charged nothing, and RAM
//! neither waits for flash tokens nor spends them.
//!
//! A profile named (`profile = "reflex-a"`, `profile = "memory"`), spelt out (`[qos.profile]`)
//! or given on the command line (`ullstack serve --profile profile.toml`, what `ullstack
//! calibrate` writes) is used as given, for every volume: a test that wants flash prices on a
//! memory volume asks for them.
//!
//! Worked example: the quick start (`ullstack serve --memory 1GiB`) logs
//! `volume default (memory): QoS profile memory (auto: every volume is in memory)`; the same
//! server with a `file` volume `f` added logs `volume default (memory): QoS profile memory
//! (auto: in memory beside flash volumes; not paced by their bucket)` and `volume f (file):
//! QoS profile reflex-a (auto: a file or emulated volume is priced as flash; give a calibrated
//! profile with --profile)`.
//!
//! `[qos] probe = "on"`: with no profile configured, `ullstack serve` probes the first file
//! volume's device for about a second before starting (crate calibrate, module `probe`: a
//! scratch file beside the volume, the full calibration's fit) and the flash volumes are
//! priced with what it fitted ([`ProfileSource::AutoProbed`]); a reload keeps that profile.
//!
//! # What it leaves out
//! A bucket per flash volume (two file volumes on different disks share the server's one
//! bucket and its one profile), tokens counted for the unpaced requests of a memory volume
//! beside flash (the request metrics count them; the tenants' token counters do not), and the
//! full calibration (`ullstack calibrate` measures a device offline; the probe is a second of it).
//!
//! # Config keys
//! `[qos] profile` (`"auto"`, a profile name, or the `[qos.profile]` table); `[[volume]]
//! backend.kind` decides `auto`.

use super::{
    invalid, BackendConfig, ConfigError, ProbeMode, ProfileConfig, QosConfig, ServerConfig,
};

/// `[qos] profile = "auto"`: pick the profile by the volumes' backends (the default).
pub const AUTO_PROFILE_NAME: &str = "auto";

/// The profile `auto` gives a server with a file or emulated volume: the published device "A".
pub const FLASH_DEFAULT_PROFILE: &str = qos::REFLEX_A;

/// Where a volume's profile (or the server's bucket's) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileSource {
    /// Named, spelt out or given with `--profile`: used as given.
    Configured,
    /// `auto`, and every volume is in memory: the built-in `memory` profile.
    AutoMemory,
    /// `auto`, a memory volume beside file or emulated volumes: the `memory` profile, unpaced.
    AutoMemoryBesideFlash,
    /// `auto`, a file or an emulated drive: [`FLASH_DEFAULT_PROFILE`].
    AutoFlash,
    /// `auto` with `[qos] probe = "on"`: the profile the start-up probe fitted to the first
    /// file volume's device.
    AutoProbed,
}

impl ProfileSource {
    /// Why the profile is the one it is, for the start-up log and `--check`.
    pub fn reason(self) -> &'static str {
        match self {
            ProfileSource::Configured => "configured",
            ProfileSource::AutoMemory => "auto: every volume is in memory",
            ProfileSource::AutoMemoryBesideFlash => {
                "auto: in memory beside flash volumes; not paced by their bucket"
            }
            ProfileSource::AutoProbed => {
                "auto: fitted to a start-up probe of the file volume's device ([qos] probe = \"on\"); \
                 give a calibrated profile with --profile"
            }
            ProfileSource::AutoFlash => {
                "auto: a file or emulated volume is priced as flash; give a calibrated profile \
                 with --profile"
            }
        }
    }
}

/// Whether a volume's requests draw on the server's token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// Priced by the bucket's profile and paced by it.
    Bucket,
    /// Its own profile never paces it and the bucket is another device's: released at the
    /// next round, charged nothing (a memory volume beside flash volumes).
    Unpaced,
}

/// The profile a server's scheduler prices with, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileChoice {
    pub profile: qos::DeviceProfile,
    pub source: ProfileSource,
}

/// One volume's profile, why, and whether the bucket paces it.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeProfile {
    pub profile: qos::DeviceProfile,
    pub source: ProfileSource,
    pub pacing: Pacing,
}

impl QosConfig {
    /// The profile this `[qos]` names or spells out; `None` for `auto` (the volumes decide,
    /// [`ServerConfig::profile_choice`]).
    pub fn configured_profile(&self) -> Result<Option<qos::DeviceProfile>, ConfigError> {
        match &self.profile {
            ProfileConfig::Named(name) if name == AUTO_PROFILE_NAME => Ok(None),
            ProfileConfig::Named(name) => qos::DeviceProfile::named(name).map(Some).map_err(|e| {
                invalid(
                    "qos.profile",
                    format!("{name:?}"),
                    format!("{AUTO_PROFILE_NAME:?} or a known profile: {e}"),
                )
            }),
            ProfileConfig::Inline(table) => {
                let text = toml::to_string(table).map_err(|e| ConfigError::Parse(e.to_string()))?;
                qos::DeviceProfile::from_toml_str(&text)
                    .map(Some)
                    .map_err(|e| {
                        invalid(
                            "qos.profile",
                            "(inline table)",
                            format!("a valid device profile: {e}"),
                        )
                    })
            }
        }
    }
}

impl ServerConfig {
    /// The profile the scheduler prices every request with (see the module essay).
    pub fn profile_choice(&self) -> Result<ProfileChoice, ConfigError> {
        if let Some(profile) = self.qos.configured_profile()? {
            return Ok(ProfileChoice {
                profile,
                source: ProfileSource::Configured,
            });
        }
        let all_memory = self
            .volumes
            .iter()
            .all(|v| matches!(v.backend, BackendConfig::Memory { .. }));
        let (profile, source) = if all_memory {
            (qos::DeviceProfile::memory(), ProfileSource::AutoMemory)
        } else if let Some(probed) = &self.qos.probed_profile {
            (probed.clone(), ProfileSource::AutoProbed)
        } else {
            let flash = qos::DeviceProfile::named(FLASH_DEFAULT_PROFILE)
                .unwrap_or_else(|e| unreachable!("the flash default is shipped: {e}"));
            (flash, ProfileSource::AutoFlash)
        };
        Ok(ProfileChoice { profile, source })
    }

    /// What `[qos] probe = "on"` probes: the first file volume's name and the folder its file
    /// is in (the probe's scratch file goes beside it); `None` when the probe is off, a
    /// profile is configured or no volume is a file.
    pub fn probe_target(&self) -> Result<Option<(String, std::path::PathBuf)>, ConfigError> {
        if self.qos.probe != ProbeMode::On || self.qos.configured_profile()?.is_some() {
            return Ok(None);
        }
        Ok(self.volumes.iter().find_map(|v| match &v.backend {
            BackendConfig::File { path, .. } => {
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => std::path::PathBuf::from("."),
                };
                Some((v.name.clone(), dir))
            }
            _ => None,
        }))
    }

    /// The device profile of [`Self::profile_choice`].
    pub fn device_profile(&self) -> Result<qos::DeviceProfile, ConfigError> {
        Ok(self.profile_choice()?.profile)
    }

    /// Each volume's profile, in `[[volume]]` order (see the module essay).
    pub fn volume_profiles(&self) -> Result<Vec<VolumeProfile>, ConfigError> {
        let bucket = self.profile_choice()?;
        Ok(self
            .volumes
            .iter()
            .map(|v| {
                let memory = matches!(v.backend, BackendConfig::Memory { .. });
                let flash_bucket = matches!(
                    bucket.source,
                    ProfileSource::AutoFlash | ProfileSource::AutoProbed
                );
                if memory && flash_bucket {
                    VolumeProfile {
                        profile: qos::DeviceProfile::memory(),
                        source: ProfileSource::AutoMemoryBesideFlash,
                        pacing: Pacing::Unpaced,
                    }
                } else {
                    VolumeProfile {
                        profile: bucket.profile.clone(),
                        source: bucket.source,
                        pacing: Pacing::Bucket,
                    }
                }
            })
            .collect())
    }

    /// One line per volume naming its backend and the profile that prices it, as `serve` logs
    /// them at start-up and `--check` prints them.
    pub fn volume_profile_lines(&self) -> Result<Vec<String>, ConfigError> {
        let profiles = self.volume_profiles()?;
        let paced = match self.qos.scheduler {
            super::SchedulerMode::On => "",
            super::SchedulerMode::Off => "; scheduler off: nothing is paced",
        };
        Ok(self
            .volumes
            .iter()
            .zip(&profiles)
            .map(|(v, p)| {
                format!(
                    "volume {} ({}): QoS profile {} ({}{paced})",
                    v.name,
                    backend_kind(&v.backend),
                    p.profile.name,
                    p.source.reason()
                )
            })
            .collect())
    }
}

/// `backend.kind` as the config spells it.
pub fn backend_kind(backend: &BackendConfig) -> &'static str {
    match backend {
        BackendConfig::Memory { .. } => "memory",
        BackendConfig::File { .. } => "file",
        BackendConfig::Emulated { .. } => "emulated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(volumes: &str, qos: &str) -> ServerConfig {
        let text = format!("[listen]\nnative = \"127.0.0.1:0\"\n{qos}\n{volumes}");
        ServerConfig::from_toml_str(&text).expect("valid")
    }

    const MEMORY: &str =
        "[[volume]]\nname = \"m\"\nbackend = { kind = \"memory\", size = \"1MiB\" }\n";
    const FILE: &str =
        "[[volume]]\nname = \"f\"\nbackend = { kind = \"file\", path = \"/tmp/x\", size = \"1MiB\" }\n";

    #[test]
    fn auto_picks_memory_for_ram_and_flash_otherwise() {
        let c = config(MEMORY, "");
        let choice = c.profile_choice().expect("valid");
        assert_eq!(choice.source, ProfileSource::AutoMemory);
        assert_eq!(choice.profile, qos::DeviceProfile::memory());

        let c = config(FILE, "");
        let choice = c.profile_choice().expect("valid");
        assert_eq!(choice.source, ProfileSource::AutoFlash);
        assert_eq!(choice.profile.name, FLASH_DEFAULT_PROFILE);

        // Mixed: the bucket is the flash volume's; the memory volume keeps its own, unpaced.
        let c = config(&format!("{MEMORY}{FILE}"), "");
        assert_eq!(
            c.device_profile().expect("valid").name,
            FLASH_DEFAULT_PROFILE
        );
        let volumes = c.volume_profiles().expect("valid");
        assert_eq!(volumes[0].profile, qos::DeviceProfile::memory());
        assert_eq!(volumes[0].source, ProfileSource::AutoMemoryBesideFlash);
        assert_eq!(volumes[0].pacing, Pacing::Unpaced);
        assert_eq!(volumes[1].profile.name, FLASH_DEFAULT_PROFILE);
        assert_eq!(volumes[1].pacing, Pacing::Bucket);
        // A configured profile prices and paces every volume.
        let c = config(
            &format!("{MEMORY}{FILE}"),
            "[qos]\nprofile = \"reflex-a\"\n",
        );
        let volumes = c.volume_profiles().expect("valid");
        assert!(volumes
            .iter()
            .all(|v| v.pacing == Pacing::Bucket && v.profile.name == "reflex-a"));
    }

    /// `[qos] probe = "on"` probes the first file volume, beside its file; nothing is probed
    /// with the probe off, a configured profile or no file volume.
    #[test]
    fn the_probe_targets_the_first_file_volume_s_folder() {
        let on = "[qos]\nprobe = \"on\"\n";
        let (name, dir) = config(&format!("{MEMORY}{FILE}"), on)
            .probe_target()
            .expect("valid")
            .expect("a file volume to probe");
        assert_eq!(name, "f");
        assert_eq!(dir, std::path::PathBuf::from("/tmp"));
        assert_eq!(config(FILE, "").probe_target().expect("valid"), None);
        assert_eq!(config(MEMORY, on).probe_target().expect("valid"), None);
        let configured = "[qos]\nprobe = \"on\"\nprofile = \"reflex-a\"\n";
        assert_eq!(
            config(FILE, configured).probe_target().expect("valid"),
            None
        );
    }

    /// A probed profile (what `ullstack serve` sets with `[qos] probe = "on"`) prices the flash
    /// volumes under `auto`; a memory volume beside them stays unpaced; a configured profile
    /// wins over it; an all-memory server ignores it.
    #[test]
    fn a_probed_profile_prices_the_flash_volumes() {
        let mut probed = qos::DeviceProfile::reflex_a();
        probed.name = "probe-f".into();
        let mut c = config(&format!("{MEMORY}{FILE}"), "[qos]\nprobe = \"on\"\n");
        assert_eq!(c.qos.probe, super::super::ProbeMode::On);
        c.qos.probed_profile = Some(probed.clone());
        let volumes = c.volume_profiles().expect("valid");
        assert_eq!(volumes[0].pacing, Pacing::Unpaced);
        assert_eq!(volumes[1].profile, probed);
        assert_eq!(volumes[1].source, ProfileSource::AutoProbed);
        let mut c = config(FILE, "[qos]\nprofile = \"memory\"\n");
        c.qos.probed_profile = Some(probed.clone());
        assert_eq!(c.device_profile().expect("valid").name, "memory");
        let mut c = config(MEMORY, "");
        c.qos.probed_profile = Some(probed);
        assert_eq!(c.device_profile().expect("valid").name, "memory");
    }

    #[test]
    fn a_configured_profile_is_used_as_given() {
        let c = config(MEMORY, "[qos]\nprofile = \"reflex-a\"\n");
        let choice = c.profile_choice().expect("valid");
        assert_eq!(choice.source, ProfileSource::Configured);
        assert_eq!(choice.profile.name, "reflex-a");
        let c = config(FILE, "[qos]\nprofile = \"memory\"\n");
        assert_eq!(c.device_profile().expect("valid").name, "memory");
    }

    #[test]
    fn each_volume_says_its_profile() {
        let lines = config(MEMORY, "").volume_profile_lines().expect("valid");
        assert_eq!(
            lines,
            ["volume m (memory): QoS profile memory (auto: every volume is in memory)"]
        );
        let lines = config(&format!("{MEMORY}{FILE}"), "[qos]\nscheduler = \"off\"\n")
            .volume_profile_lines()
            .expect("valid");
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with("volume m (memory): QoS profile memory (auto: in memory beside"),
            "{lines:?}"
        );
        assert!(lines[1].starts_with("volume f (file): QoS profile reflex-a (auto: "));
        assert!(
            lines[1].ends_with("; scheduler off: nothing is paced)"),
            "{lines:?}"
        );
    }
}
