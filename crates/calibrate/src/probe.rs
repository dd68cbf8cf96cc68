//! The start-up probe: a file volume's device measured in about a second, with the full
//! calibration's fit, when the server is given no calibrated profile (`ullstack serve` with
//! `[qos] probe = "on"`).
//!
//! # What it measures
//! The device under the file volume's directory, through a scratch file of its own
//! ([`PROBE_FILE_BYTES`], created beside the volume, filled, removed afterwards): the volume's
//! data is never written. Closed-loop points of 4 KiB requests, O_DIRECT where the filesystem
//! allows ([`crate::uring::UringProber`], the full calibration's prober), for the read
//! ratios [`PROBE_READ_PCTS`] at the queue depths [`PROBE_QDS`], each measured for
//! [`PROBE_POINT_MS`] after a fifth of that unmeasured: 9 points, about 0.9 s plus the fill.
//!
//! # The fit
//! [`crate::curves::fit_curves`] over those curves at [`crate::sweep::targets_for`]'s targets,
//! exactly as `ullstack calibrate FILE` fits its longer sweep: the write weight that makes the
//! mixes' token rates agree, the table's rate the smallest mix's at each target, the read-only
//! read cost from the read-only curve. `cargo test -p calibrate --lib probe -- --nocapture`
//! probes a temp dir and prints what it found: how long it took (at least the nine points'
//! 9 × 96 ms = 864 ms, which the test checks, plus the fill), whether O_DIRECT held, the write
//! weight and the fitted points. Those figures are the disk's and vary from run to run on one
//! machine (runs' figures: CHANGELOG.md).
//!
//! # What it leaves out
//! Everything the full calibration adds: more read ratios and queue depths, request sizes,
//! polled completion, the report. Three queue depths give each curve three points, so the
//! table is coarse; a device that is busy while the server starts is measured busy. For a
//! profile to trust, run `ullstack calibrate` and pass `--profile`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::curves::{fit_curves, CurveFit, CurvePoint};
use crate::sweep::{targets_for, Completion};
use crate::uring::UringProber;

/// Read ratios probed, percent: read-only and two mixes (the write-weight fit compares mixes).
pub const PROBE_READ_PCTS: [u8; 3] = [100, 90, 50];
/// Queue depths probed per read ratio.
pub const PROBE_QDS: [u32; 3] = [1, 4, 16];
/// Each point's measured time, ms (a fifth more runs unmeasured first).
pub const PROBE_POINT_MS: u64 = 80;
/// The scratch file's size: big enough that 4 KiB random reads are spread over it, small
/// enough to fill in a fraction of the probe.
pub const PROBE_FILE_BYTES: u64 = 32 << 20;

/// What the probe found.
#[derive(Debug, Clone)]
pub struct Probe {
    pub fit: CurveFit,
    /// Whether the scratch file was opened with O_DIRECT (else the page cache answered).
    pub direct: bool,
    /// How long the probe took, fill included.
    pub elapsed: Duration,
}

impl Probe {
    /// One line for the operator: what was probed (volume `volume`'s device under `dir`), how
    /// it was opened, how long it took, and the fitted write cost, rate and p95.
    pub fn summary_line(&self, volume: &str, dir: &Path) -> String {
        let p = &self.fit.profile;
        format!(
            "probed volume {volume}'s device ({}, {}) in {} ms: a write costs {} mtok, {} tokens/s \
             at a p95 of {} us",
            dir.display(),
            if self.direct {
                "O_DIRECT"
            } else {
                "page cache"
            },
            self.elapsed.as_millis(),
            p.write_cost_mtok,
            p.points[0].tokens_per_sec,
            p.points[0].p95_read_latency_ns / 1000
        )
    }
}

/// Removes the scratch file however the probe ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Probes the device under `dir` (see the module essay) and fits a profile named `name`.
pub fn probe_dir(dir: &Path, name: &str) -> anyhow::Result<Probe> {
    let started = Instant::now();
    let scratch = Scratch(dir.join(format!(".ullstack-probe-{}.tmp", std::process::id())));
    let mut prober = UringProber::open(
        &scratch.0,
        PROBE_FILE_BYTES,
        false,
        true,
        Duration::from_millis(PROBE_POINT_MS),
    )?;
    let mut curves: Vec<(u8, Vec<CurvePoint>)> = Vec::new();
    for pct in PROBE_READ_PCTS {
        let mut points = Vec::with_capacity(PROBE_QDS.len());
        for qd in PROBE_QDS {
            points.push(prober.run(pct, 4096, qd, Completion::Interrupt)?);
        }
        curves.push((pct, points));
    }
    let fit = fit_curves(name, &curves, &targets_for(&curves))?;
    Ok(Probe {
        fit,
        direct: prober.direct,
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a file in a temp dir: a valid profile, every point measured for its whole window (the
    /// probe takes at least the nine points' 80 ms plus their unmeasured fifth), and the scratch
    /// file gone. How long it took beyond that is the machine's: printed, not bounded (no
    /// control run could tell a slow disk from a slow probe).
    #[test]
    fn a_temp_dir_is_probed_for_every_points_window() {
        let dir = std::env::temp_dir().join(format!("ullstack-probe-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let probe = probe_dir(&dir, "probe");
        let left = std::fs::read_dir(&dir).expect("dir").count();
        let _ = std::fs::remove_dir_all(&dir);
        let probe = probe.expect("probe");
        println!(
            "probe of {}: {:?}, direct {}, write {} mtok, points {:?}",
            dir.display(),
            probe.elapsed,
            probe.direct,
            probe.fit.profile.write_cost_mtok,
            probe.fit.profile.points
        );
        probe.fit.profile.validate().expect("a valid profile");
        let points = (PROBE_READ_PCTS.len() * PROBE_QDS.len()) as u32;
        let windows = Duration::from_millis(PROBE_POINT_MS * 6 / 5) * points;
        assert!(
            probe.elapsed >= windows,
            "the probe took {:?}, less than its {points} points' {windows:?}",
            probe.elapsed
        );
        assert_eq!(left, 0, "the scratch file was left behind");
    }
}
