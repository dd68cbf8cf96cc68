//! What a calibration measures, whatever the target: the sweeps (read mixes, queue depths,
//! sizes, interrupt-driven and polled), the [`Prober`] that takes their points, and the latency
//! targets the fit reads them at.
//!
//! A prober keeps a queue depth of requests in flight (closed loop) and returns one
//! [`CurvePoint`] per depth; [`measure`] asks it for every sweep in turn: the 4 KiB queue-depth
//! sweep at each of [`READ_PCTS`], the read size sweep ([`SIZES_BYTES`] at [`SIZE_QDS`]), and,
//! where [`Prober::polling`] says polled completion works, the read-only sweep and the QD1
//! size sweep again, polled. The probers: [`crate::model`] (the SSD model, virtual time),
//! [`crate::uring`] (a file or block device), [`crate::nbd`] (an NBD export).
//!
//! What it leaves out: open-loop (Poisson) load for real targets, and several submitting
//! threads or connections.

use crate::curves::CurvePoint;

/// p95 read-latency targets of the table (the published table's points and the midpoint).
pub const TARGETS_NS: [u64; 3] = [500_000, 1_000_000, 2_000_000];
/// Read percentages of the load curves.
pub const READ_PCTS: [u8; 6] = [100, 99, 95, 90, 75, 50];
/// Request sizes of the size sweep, bytes.
pub const SIZES_BYTES: [u64; 6] = [4096, 8192, 16384, 32768, 65536, 131072];
/// Queue depths of the size sweep.
pub const SIZE_QDS: [u32; 2] = [1, 16];

/// How completions are reaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Completion {
    /// The task sleeps until the device's interrupt wakes it.
    Interrupt,
    /// The kernel spins on the device's poll queue (IORING_SETUP_IOPOLL).
    Polled,
}

/// Whether polled completion can be measured on a target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Polling {
    /// The question does not arise (the model; a network target): why.
    NotApplicable(String),
    /// Tried at QD1 and refused: the error.
    Unavailable(String),
    /// Works: polled curves are measured too.
    Available,
}

impl Polling {
    /// The line the terminal and the report print.
    pub fn describe(&self) -> String {
        match self {
            Polling::NotApplicable(why) => why.clone(),
            Polling::Unavailable(e) => format!(
                "polled completion unavailable on this target ({e}); every curve is interrupt-driven"
            ),
            Polling::Available => "polled completion (IORING_SETUP_IOPOLL) works here: the read-only QD sweep and the QD1 size sweep were measured polled too (figures interrupt_vs_polled_*)".into(),
        }
    }
}

/// Takes curve points: closed-loop loads of each queue depth in turn.
pub trait Prober {
    fn sweep(
        &mut self,
        read_pct: u8,
        size_bytes: u64,
        qds: &[u32],
        completion: Completion,
    ) -> anyhow::Result<Vec<CurvePoint>>;

    /// Whether polled completion can be measured (may take a point to find out).
    fn polling(&mut self) -> Polling;
}

/// The polled sweeps, where polling works.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PolledCurves {
    /// The read-only 4 KiB queue-depth sweep, polled.
    pub read_only: Vec<CurvePoint>,
    /// Reads of each size at QD1, polled.
    pub sizes: Vec<CurvePoint>,
}

/// Every curve of a calibration.
#[derive(Clone, Debug)]
pub struct Measurements {
    /// Per read percentage, the queue-depth sweep at 4 KiB (interrupt-driven).
    pub curves: Vec<(u8, Vec<CurvePoint>)>,
    pub sizes: Vec<CurvePoint>,
    pub polling: Polling,
    pub polled: Option<PolledCurves>,
}

/// Runs every sweep of the module essay on `prober`.
pub fn measure(prober: &mut dyn Prober, qds: &[u32]) -> anyhow::Result<Measurements> {
    let polling = prober.polling();
    let mut curves = Vec::new();
    for &pct in &READ_PCTS {
        curves.push((pct, prober.sweep(pct, 4096, qds, Completion::Interrupt)?));
    }
    let mut sizes = Vec::new();
    for &s in &SIZES_BYTES {
        sizes.extend(prober.sweep(100, s, &SIZE_QDS, Completion::Interrupt)?);
    }
    let polled = if polling == Polling::Available {
        let read_only = prober.sweep(100, 4096, qds, Completion::Polled)?;
        let mut sizes = Vec::new();
        for &s in &SIZES_BYTES {
            sizes.extend(prober.sweep(100, s, &[1], Completion::Polled)?);
        }
        Some(PolledCurves { read_only, sizes })
    } else {
        None
    };
    Ok(Measurements {
        curves,
        sizes,
        polling,
        polled,
    })
}

/// The table's targets: the published 500 µs, 1 ms and 2 ms, plus 2, 4 and 8 times the
/// slowest mix's lightest-load p95 (rounded up to µs), so a device whose tails sit above the
/// published targets still gets a table (a target some mix misses even at its lightest load
/// gets no point).
pub fn targets_for(curves: &[(u8, Vec<CurvePoint>)]) -> Vec<u64> {
    let slowest = curves
        .iter()
        .map(|(_, c)| c.iter().map(|p| p.read_p95_ns).min().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let mut t: Vec<u64> = TARGETS_NS.to_vec();
    for m in [2, 4, 8] {
        t.push((slowest * m).div_ceil(1000).max(1) * 1000);
    }
    t.sort_unstable();
    t.dedup();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prober whose device follows a known shape: a read costs 10 µs of one server, a write
    /// 40 µs, so at QD q the p95 is q × the mean cost; polled completion shaves 2 µs. Records
    /// every sweep it is asked for.
    struct Stub {
        polls: bool,
        asked: Vec<(u8, u64, Vec<u32>, Completion)>,
    }

    impl Prober for Stub {
        fn sweep(
            &mut self,
            read_pct: u8,
            size_bytes: u64,
            qds: &[u32],
            completion: Completion,
        ) -> anyhow::Result<Vec<CurvePoint>> {
            self.asked
                .push((read_pct, size_bytes, qds.to_vec(), completion));
            let r = f64::from(read_pct) / 100.0;
            let mean_ns = (r * 10_000.0 + (1.0 - r) * 40_000.0) * size_bytes as f64 / 4096.0;
            let poll_saving = if completion == Completion::Polled {
                2_000.0
            } else {
                0.0
            };
            Ok(qds
                .iter()
                .map(|&qd| {
                    let lat = (f64::from(qd) * mean_ns - poll_saving) as u64;
                    CurvePoint {
                        read_pct,
                        size_bytes,
                        queue_depth: qd,
                        iops: 1e9 / mean_ns,
                        reads: 1000,
                        read_p50_ns: lat,
                        read_p95_ns: lat,
                        read_p99_ns: lat,
                        read_mean_ns: lat,
                        write_mean_ns: lat,
                        write_buffer_units_end: None,
                    }
                })
                .collect())
        }

        fn polling(&mut self) -> Polling {
            if self.polls {
                Polling::Available
            } else {
                Polling::Unavailable("io_uring setup: Operation not supported (os error 95)".into())
            }
        }
    }

    #[test]
    fn where_polling_works_the_qd1_curves_are_measured_polled_and_drawn() {
        let mut stub = Stub {
            polls: true,
            asked: Vec::new(),
        };
        let qds = [1, 4, 16];
        let m = measure(&mut stub, &qds).unwrap();
        let p = m.polled.as_ref().expect("polled curves");
        assert_eq!(p.read_only.len(), qds.len());
        assert!(p.sizes.iter().all(|x| x.queue_depth == 1));
        assert_eq!(p.sizes.len(), SIZES_BYTES.len());
        let polled_sweeps = stub
            .asked
            .iter()
            .filter(|a| a.3 == Completion::Polled)
            .count();
        assert_eq!(polled_sweeps, 1 + SIZES_BYTES.len());
        // Polled is faster by the stub's 2 µs at QD1.
        assert_eq!(
            m.curves[0].1[0].read_p50_ns - p.read_only[0].read_p50_ns,
            2_000
        );
        let targets = targets_for(&m.curves);
        let fit = crate::curves::fit_curves("stub", &m.curves, &targets).unwrap();
        let figs = crate::report::figures(&m, &fit);
        let f = figs
            .iter()
            .find(|f| f.stem == "interrupt_vs_polled_qd")
            .expect("an interrupt-vs-polled figure");
        assert!(f.series.iter().any(|s| s.name.contains("polled")));
        assert!(figs.iter().any(|f| f.stem == "interrupt_vs_polled_size"));
        assert!(m.polling.describe().contains("works here"));
    }

    #[test]
    fn where_polling_fails_it_is_said_and_nothing_is_measured_polled() {
        let mut stub = Stub {
            polls: false,
            asked: Vec::new(),
        };
        let m = measure(&mut stub, &[1, 4, 16]).unwrap();
        assert!(m.polled.is_none());
        assert!(stub.asked.iter().all(|a| a.3 == Completion::Interrupt));
        let text = m.polling.describe();
        assert!(
            text.contains("unavailable") && text.contains("os error 95"),
            "{text}"
        );
        let targets = targets_for(&m.curves);
        let fit = crate::curves::fit_curves("stub", &m.curves, &targets).unwrap();
        assert!(crate::report::figures(&m, &fit)
            .iter()
            .all(|f| !f.stem.contains("polled")));
    }

    /// The stub's costs are exact: a write is 4 reads. The report's model curves then lie on
    /// the measured ones, and the band of the weighted figure is as wide as the spread.
    #[test]
    fn the_model_is_drawn_over_the_curves_with_its_error() {
        let mut stub = Stub {
            polls: false,
            asked: Vec::new(),
        };
        let m = measure(&mut stub, &[1, 2, 4, 8, 16, 32, 64]).unwrap();
        let targets = targets_for(&m.curves);
        let fit = crate::curves::fit_curves("stub", &m.curves, &targets).unwrap();
        assert_eq!(fit.profile.write_cost_mtok, 4_000, "{:?}", fit.profile);
        let figs = crate::report::figures(&m, &fit);
        let load = figs.iter().find(|f| f.stem == "load_latency").unwrap();
        let model: Vec<_> = load
            .series
            .iter()
            .filter(|s| s.name.starts_with("model"))
            .collect();
        assert_eq!(model.len(), READ_PCTS.len());
        assert!(model
            .iter()
            .all(|s| s.stroke == study::plot::Stroke::Dashed));
        let weighted = figs.iter().find(|f| f.stem == "weighted_load").unwrap();
        let lower = weighted
            .series
            .iter()
            .find(|s| s.name == "model: table rate")
            .unwrap();
        let upper = weighted
            .series
            .iter()
            .find(|s| s.name == "model + fit error")
            .unwrap();
        for ((lo, hi), spread) in lower.points.iter().zip(&upper.points).zip(&fit.spread_pct) {
            assert!((hi.0 / lo.0 - 1.0 - spread / 100.0).abs() < 1e-9);
        }
        // The mixed curves use colours 1..=5; the band uses 0, which only the read-only
        // curve uses in the other figure.
        assert!(weighted
            .series
            .iter()
            .filter(|s| !s.name.starts_with("model"))
            .all(|s| s.colour != lower.colour));
        let table = crate::report::model_table(&fit, &targets, &m.curves);
        assert_eq!(table.rows.len(), READ_PCTS.len());
    }
}
