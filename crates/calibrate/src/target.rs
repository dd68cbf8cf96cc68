//! What `ullstack calibrate` may measure, and the refusals that keep it from destroying data.
//!
//! Calibration writes (the mixes are 1–50 % writes, uniform over the target), so every rule
//! here is about a target that holds something:
//! - **A missing path** is created as a regular file at `--size` — except under `/dev` or on a
//!   devtmpfs, where a missing name is a disk that is not there (a typo, an unplugged drive):
//!   creating it would make a RAM-backed regular file in `/dev` and "calibrate" that. Refused
//!   as "no such block device". (The audit's `calibrate /dev/sda` on a VM without one created a
//!   256 MiB `/dev/sda`.)
//! - **An existing regular file** that is not empty is refused unless `--destructive`.
//! - **A block device** is refused, *even with `--destructive`*, when something uses it: the
//!   device or one of its partitions is mounted (`/proc/self/mountinfo`, by device number and
//!   by source path), is an active swap (`/proc/swaps`), or has holders
//!   (`/sys/class/block/NAME/holders`: device-mapper, LVM, md, bcache); each is named. Then the
//!   kernel is asked too: an exclusive open (`O_EXCL` on a block device, no `O_CREAT`) fails
//!   with `EBUSY` if the device or a partition is claimed by anything, and the measurement
//!   keeps its descriptor open exclusively so nothing can mount it meanwhile. A free device
//!   with a partition-table or filesystem signature in its first 70,000 bytes is refused *by
//!   name* (GPT, ext2/3/4, XFS, …) unless `--destructive`; one without any signature too,
//!   generically (an unknown filesystem is still data).
//! - **An NBD export** (`nbd://host[:port]/export`) is checked once connected (`nbd.rs`).
//!
//! Worked example (the CLI test on a loop device): a 64 MiB file, `losetup`, `mkfs.ext4`: the
//! refusal names "ext2/3/4"; `wipefs -a`: the refusal is generic; with `--destructive` it
//! runs; mounted, it is refused even with `--destructive`, naming the mount point.
//!
//! What it leaves out: signatures beyond the table ([`crate::signature::SIGNATURES`]; `blkid` knows hundreds),
//! multipath and zoned devices' own rules.

use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::nbd::NbdUri;
use crate::signature::{signature, HEAD_BYTES};

/// What is measured.
#[derive(Debug)]
pub enum Target {
    Model {
        name: String,
        device: Box<device::DeviceConfig>,
    },
    File {
        path: PathBuf,
        block_device: bool,
    },
    Nbd(NbdUri),
}

impl Target {
    /// Parses TARGET and applies the refusal rules (see the module essay).
    pub fn parse(target: &str, destructive: bool) -> anyhow::Result<Target> {
        if let Some(model) = target.strip_prefix("model:") {
            let device = if model.ends_with(".toml") {
                let text = std::fs::read_to_string(model)
                    .with_context(|| format!("TARGET {target:?}: cannot read {model}"))?;
                device::DeviceConfig::from_toml_str(&text)
                    .with_context(|| format!("TARGET {target:?}"))?
            } else {
                device::DeviceConfig::preset(model).with_context(|| {
                    format!("TARGET {target:?}: expected model:PRESET or model:FILE.toml")
                })?
            };
            return Ok(Target::Model {
                name: device.name.clone(),
                device: Box::new(device),
            });
        }
        if target.starts_with("nbd") && target.contains("://") {
            return Ok(Target::Nbd(NbdUri::parse(target)?));
        }
        if target.is_empty() || target.contains("://") {
            bail!(
                "TARGET {target:?}: expected model:NAME, model:FILE.toml, a file, a block device \
                 or nbd://host:port/export"
            );
        }
        let path = PathBuf::from(target);
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = path
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                if !parent.is_dir() {
                    bail!(
                        "TARGET {target:?}: {} is not a directory, so the file cannot be created",
                        parent.display()
                    );
                }
                if let Some(why) = device_directory(parent) {
                    bail!(
                        "TARGET {target:?}: no such block device ({why}: a missing name there is \
                         a disk that is not attached, and is not created as a file)"
                    );
                }
                Ok(Target::File {
                    path,
                    block_device: false,
                })
            }
            Err(e) => bail!("TARGET {target:?}: {e}"),
            Ok(m) if m.file_type().is_block_device() => {
                check_block_device(target, &path, m.rdev(), destructive)?;
                Ok(Target::File {
                    path,
                    block_device: true,
                })
            }
            Ok(m) if m.is_file() => {
                if m.len() > 0 && !destructive {
                    bail!(
                        "TARGET {target:?}: the file holds data ({} bytes); calibration writes \
                         to it: give --destructive to overwrite it, or name a file that does not exist",
                        m.len()
                    );
                }
                Ok(Target::File {
                    path,
                    block_device: false,
                })
            }
            Ok(_) => bail!("TARGET {target:?}: not a regular file or block device"),
        }
    }

    /// A short name for the results folder and the profile.
    pub fn name(&self) -> String {
        match self {
            Target::Model { name, .. } => format!("model-{name}"),
            Target::File { path, .. } => path
                .file_name()
                .map_or_else(|| "target".into(), |n| n.to_string_lossy().to_string()),
            Target::Nbd(u) => u.name(),
        }
    }
}

/// Why `dir` is a directory of device nodes (`None` if it is not): `/dev` itself, or any
/// directory on a devtmpfs (by the longest mount point of `/proc/self/mountinfo` above it).
pub fn device_directory(dir: &Path) -> Option<String> {
    let canon = std::fs::canonicalize(dir).ok()?;
    if canon == Path::new("/dev") {
        return Some("/dev holds device nodes".into());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let fstype = mountinfo
        .lines()
        .filter_map(|l| {
            let f = MountInfo::parse(l)?;
            canon
                .starts_with(&f.mount_point)
                .then(|| (f.mount_point.as_os_str().len(), f.fstype))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, t)| t)?;
    (fstype == "devtmpfs").then(|| format!("{} is on a devtmpfs", canon.display()))
}

/// The fields of a `/proc/self/mountinfo` line this module reads.
struct MountInfo {
    /// `major:minor` of the mounted filesystem's device.
    dev: String,
    mount_point: PathBuf,
    fstype: String,
    source: String,
}

impl MountInfo {
    /// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw`: the fields before
    /// ` - ` are fixed up to the optional tags; fstype and source follow it.
    fn parse(line: &str) -> Option<MountInfo> {
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let mut right = right.split(' ');
        Some(MountInfo {
            dev: (*left.get(2)?).to_owned(),
            mount_point: PathBuf::from(unescape(left.get(4)?)),
            fstype: right.next()?.to_owned(),
            source: unescape(right.next()?),
        })
    }
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        if let Some(d) = octal {
            out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Linux's `dev_t` split (glibc's `gnu_dev_major`/`gnu_dev_minor`).
fn major_minor(rdev: u64) -> (u64, u64) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (major, minor & 0xffff_ffff)
}

/// One block device as sysfs names it.
struct BlockDev {
    name: String,
    /// `major:minor`.
    dev: String,
    sys: PathBuf,
}

/// The device with number `rdev` and its partitions.
fn device_and_partitions(rdev: u64) -> Vec<BlockDev> {
    let (major, minor) = major_minor(rdev);
    let dev = format!("{major}:{minor}");
    let Ok(sys) = std::fs::canonicalize(format!("/sys/dev/block/{dev}")) else {
        return Vec::new();
    };
    let name = sys
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut out = vec![BlockDev {
        name,
        dev,
        sys: sys.clone(),
    }];
    if let Ok(entries) = std::fs::read_dir(&sys) {
        for e in entries.flatten() {
            let p = e.path();
            if p.join("partition").is_file() {
                if let Ok(dev) = std::fs::read_to_string(p.join("dev")) {
                    out.push(BlockDev {
                        name: e.file_name().to_string_lossy().into_owned(),
                        dev: dev.trim().to_owned(),
                        sys: p,
                    });
                }
            }
        }
    }
    out
}

/// Everything that uses the block device `rdev` or one of its partitions, each named.
pub fn users_of(rdev: u64) -> Vec<String> {
    let devs = device_and_partitions(rdev);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounts: Vec<MountInfo> = mountinfo.lines().filter_map(MountInfo::parse).collect();
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    let rdev_of = |p: &str| std::fs::metadata(p).ok().map(|m| m.rdev());
    let mut users = Vec::new();
    for d in &devs {
        let this_rdev = |p: &str| {
            rdev_of(p)
                .map(major_minor)
                .is_some_and(|(a, b)| format!("{a}:{b}") == d.dev)
        };
        for m in &mounts {
            if m.dev == d.dev || (m.source.starts_with('/') && this_rdev(&m.source)) {
                users.push(format!(
                    "{} is mounted on {} ({})",
                    d.name,
                    m.mount_point.display(),
                    m.fstype
                ));
            }
        }
        for line in swaps.lines().skip(1) {
            if let Some(path) = line.split_whitespace().next() {
                let path = unescape(path);
                if this_rdev(&path) {
                    users.push(format!(
                        "{} is an active swap ({path} in /proc/swaps)",
                        d.name
                    ));
                }
            }
        }
        if let Ok(holders) = std::fs::read_dir(d.sys.join("holders")) {
            let names: Vec<String> = holders
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            if !names.is_empty() {
                users.push(format!(
                    "{} is held by {} (device-mapper, LVM, md or bcache: /sys/class/block/{}/holders)",
                    d.name,
                    names.join(", "),
                    d.name
                ));
            }
        }
    }
    users
}

/// The block-device rules of the module essay; `Ok` = it may be measured.
fn check_block_device(
    target: &str,
    path: &Path,
    rdev: u64,
    destructive: bool,
) -> anyhow::Result<()> {
    let users = users_of(rdev);
    if !users.is_empty() {
        bail!(
            "TARGET {target:?}: the block device is in use ({}); refusing to write to it, even \
             with --destructive",
            users.join("; ")
        );
    }
    let head = read_head(path).with_context(|| {
        format!("TARGET {target:?}: opening it exclusively (O_EXCL) to read its first bytes")
    })?;
    if !destructive {
        match signature(&head) {
            Some(name) => bail!(
                "TARGET {target:?}: the block device holds a signature of {name}; calibration \
                 writes to it: give --destructive to overwrite it"
            ),
            None => bail!(
                "TARGET {target:?}: a block device; calibration writes to it: give \
                 --destructive to overwrite its contents"
            ),
        }
    }
    Ok(())
}

/// The first [`HEAD_BYTES`] of a block device, read through an exclusive open (which fails
/// with EBUSY, named, when the kernel has it claimed).
fn read_head(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EBUSY) => anyhow::anyhow!(
                "EBUSY: the kernel has the device claimed (mounted, a swap, or held by \
                 device-mapper/md), even if no mount names it; refusing, even with --destructive"
            ),
            _ => anyhow::Error::new(e),
        })?;
    let mut buf = vec![0u8; HEAD_BYTES];
    let mut n = 0;
    while n < HEAD_BYTES {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    buf.truncate(n);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_and_device_numbers_parse() {
        let m = MountInfo::parse(
            "36 35 98:0 / /mnt/my\\040disk rw,noatime master:1 - ext3 /dev/root rw,errors=continue",
        )
        .expect("parses");
        assert_eq!(m.dev, "98:0");
        assert_eq!(m.mount_point, PathBuf::from("/mnt/my disk"));
        assert_eq!(
            (m.fstype.as_str(), m.source.as_str()),
            ("ext3", "/dev/root")
        );
        assert!(MountInfo::parse("garbage").is_none());
        // 259:3 (an NVMe partition) and 7:0 (loop0), as glibc's makedev builds them.
        assert_eq!(major_minor((259 << 8) | 3), (259, 3));
        assert_eq!(major_minor(7 << 8), (7, 0));
        assert_eq!(major_minor((8 << 8) | 0xff | (0x100 << 12)), (8, 0x1ff));
    }

    #[test]
    fn dev_is_a_device_directory_and_tmp_is_not() {
        assert!(device_directory(Path::new("/dev")).is_some());
        assert!(device_directory(&std::env::temp_dir()).is_none());
    }
}
