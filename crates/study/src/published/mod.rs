//! The published figures beside ours: what the seed papers measured, what each study simulates
//! in the same terms, with 95 % intervals, and whether the two agree.
//!
//! # What it implements
//! `reference/published.toml` (shipped in the repository, compiled into the binary; `--reference
//! FILE` replaces it) lists the papers' headline outcomes: an `id` per study, what was measured,
//! the value, its unit and its source. Each study computes every outcome of its own from its
//! runs ([`Simulated`], built by the study's `outcomes` module) and the report opens with one
//! row per outcome ([`Row`]):
//!
//! | published | simulated (95 % interval) | ratio of effects | direction | basis |
//!
//! * **ratio of effects**: for a ratio to a baseline (unit `x`) the effect is the distance from
//!   1 (`0.78` is an effect of −0.22), and the column is simulated effect / published effect:
//!   1.0 reproduces the paper, 0.3 is a third of its gain, a negative value the wrong sign. For a
//!   gain in percent the effect is the value itself; for a level (a latency, a queue depth, a
//!   utilisation) it is simulated / published.
//! * **direction**: ✓ when the simulated effect has the published sign (for a bound, when the
//!   simulated value is on its side); "no effect" when the interval spans the no-effect value
//!   (1 for a ratio, 0 for a gain), which is ✓ only if the paper also reports none.
//! * **basis**: "calibrated" when a model parameter was fitted to that very figure
//!   ([`CALIBRATIONS`]: the parameter's doc comment names the figure; a test checks it), else
//!   "predicted".
//!
//! # The intervals
//! A comparison (stack vs vanilla, co-run vs alone, polled vs interrupt) is measured over
//! *pairs* (a service with one partner; a workload) and *replicates* (the same pair with seeds
//! `seed`, `seed + 1`, …; the two arms of a replicate share its seed, so they are paired). The
//! point estimate of a ratio is the mean over pairs of (median over replicates of the arm) /
//! (median over replicates of the baseline) — the median because a run's p99 beside a
//! CPU-bound partner is bimodal and flips with the seed (`flashshare`'s essay). The 95 %
//! interval is a percentile bootstrap ([`BOOTSTRAP_RESAMPLES`] resamples): each resample draws
//! the pairs with replacement and, within each drawn pair, the replicate indices with
//! replacement (one draw for both arms: the pairing is kept), and recomputes the estimate; the
//! interval is the 2.5th and 97.5th percentiles. The resampling stream is seeded from the
//! outcome's id, so `study.json` is byte-identical run to run.
//!
//! Worked example: five replicates of apache + pagerank under vanilla give p99s (ms) 0.61,
//! 0.58, 2.9, 0.60, 0.63 and alone 0.36, 0.37, 0.35, 0.36, 0.38: the estimate is 0.61 / 0.36 =
//! 1.69; a resample that draws the 2.9 three times has a median of 2.9 and a ratio near 8, one
//! that never draws it a ratio near 1.65, so the interval is wide on the upper side — exactly
//! the luck a single run hides. With one replicate and one pair (`--quick`) no interval exists
//! and the row says so.
//!
//! # What it leaves out
//! Significance tests beyond the interval, and multiple-comparison corrections: the table is a
//! reader's map of where the model stands, not a hypothesis test.

pub mod replicates;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::table::Table;

/// The shipped reference: the seed papers' headline outcomes.
pub const SHIPPED_TOML: &str = include_str!("../../../../reference/published.toml");

/// Bootstrap resamples per interval: the 2.5th percentile of 2,000 is the 50th value, stable to
/// about a percent of the interval's width.
pub const BOOTSTRAP_RESAMPLES: usize = 2_000;

/// Model parameters fitted to a published figure: (`study/id`, the parameter, where its doc
/// comment says so). Their rows are "calibrated", every other row "predicted".
pub const CALIBRATIONS: &[Calibration] = &[
    Calibration {
        outcome: "flashshare/motivation.blk_layer_corun",
        parameter: "blk.cold_submit_ns",
        file: "crates/host/src/config.rs",
    },
    Calibration {
        outcome: "ull/nvme.write_bw_utilization",
        parameter: "ctrl.firmware_read_ns (nvme-tlc)",
        file: "crates/device/src/config.rs",
    },
];

/// A parameter fitted to a published outcome.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    /// `study/id` of the outcome.
    pub outcome: &'static str,
    /// The config key.
    pub parameter: &'static str,
    /// The source file whose doc comment names the outcome.
    pub file: &'static str,
}

/// One published outcome (an `[[outcome]]` of the reference file).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    pub study: String,
    pub id: String,
    pub what: String,
    pub value: f64,
    pub unit: String,
    pub source: String,
}

/// The reference file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    pub outcome: Vec<Outcome>,
}

/// Units the reference file may use.
pub const UNITS: [&str; 7] = ["x", "pct", "us", "ms", "qd", "ktok_s", "bool"];

impl Reference {
    /// The shipped file.
    pub fn shipped() -> Reference {
        Reference::parse(SHIPPED_TOML, "reference/published.toml")
            .expect("the shipped reference parses")
    }

    /// Parses a reference file's text; `name` is for errors.
    pub fn parse(text: &str, name: &str) -> Result<Reference, String> {
        let r: Reference = toml::from_str(text).map_err(|e| format!("{name}: {e}"))?;
        let mut seen = std::collections::HashSet::new();
        for o in &r.outcome {
            if !UNITS.contains(&o.unit.as_str()) {
                return Err(format!(
                    "{name}: outcome `{}/{}` has unit `{}`; expected one of {}",
                    o.study,
                    o.id,
                    o.unit,
                    UNITS.join(", ")
                ));
            }
            if !o.value.is_finite() {
                return Err(format!(
                    "{name}: outcome `{}/{}` has no finite value",
                    o.study, o.id
                ));
            }
            if !seen.insert((o.study.clone(), o.id.clone())) {
                return Err(format!(
                    "{name}: outcome `{}/{}` appears twice",
                    o.study, o.id
                ));
            }
        }
        Ok(r)
    }

    /// Reads a reference file (`--reference FILE`).
    pub fn load(path: &Path) -> Result<Reference, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading --reference {}: {e}", path.display()))?;
        Reference::parse(&text, &path.display().to_string())
    }

    /// The outcomes of `study`, in file order.
    pub fn of<'a>(&'a self, study: &'a str) -> impl Iterator<Item = &'a Outcome> + 'a {
        self.outcome.iter().filter(move |o| o.study == study)
    }
}

/// How a simulated outcome compares with the published one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A ratio to a baseline: no effect at 1.
    Ratio,
    /// A gain in percent: no effect at 0.
    Gain,
    /// A level (latency, depth, utilisation, rate): compared as simulated / published.
    Level,
    /// The paper gives an upper bound: agrees when the simulated value is at most it.
    AtMost,
    /// The paper gives a lower bound: agrees when the simulated value is at least it.
    AtLeast,
    /// Yes (1) or no (0).
    Bool,
}

/// A value with its 95 % interval (absent when there is nothing to resample: one run).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    /// 2.5th and 97.5th percentiles of the bootstrap.
    pub low: Option<f64>,
    pub high: Option<f64>,
    /// Runs per arm the estimate rests on (pairs × replicates).
    pub runs: usize,
}

impl Estimate {
    /// A value with no interval.
    pub fn point(value: f64, runs: usize) -> Estimate {
        Estimate {
            value,
            low: None,
            high: None,
            runs,
        }
    }

    /// Whether the interval contains `x` (false without an interval).
    pub fn spans(&self, x: f64) -> bool {
        matches!((self.low, self.high), (Some(l), Some(h)) if l <= x && x <= h)
    }

    /// Maps value and bounds through a monotone function (`increasing` says which way).
    pub fn map(self, f: impl Fn(f64) -> f64, increasing: bool) -> Estimate {
        let (low, high) = match (self.low.map(&f), self.high.map(&f)) {
            (Some(a), Some(b)) if !increasing => (Some(b), Some(a)),
            (a, b) => (a, b),
        };
        Estimate {
            value: f(self.value),
            low,
            high,
            runs: self.runs,
        }
    }
}

/// What a study simulated for one published outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulated {
    pub id: &'static str,
    pub kind: Kind,
    /// `None`: the runs needed are missing (a shard, an interrupted study), or too few
    /// samples for the statistic (`note` says which).
    pub estimate: Option<Estimate>,
    /// Why there is no estimate, when the reason is not missing runs.
    pub note: Option<String>,
}

impl Simulated {
    /// An outcome with its estimate (or none: runs missing).
    pub fn new(id: &'static str, kind: Kind, estimate: Option<Estimate>) -> Simulated {
        Simulated {
            id,
            kind,
            estimate,
            note: None,
        }
    }
}

/// Whether the simulated effect goes the published way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    Agrees,
    Disagrees,
    /// The interval spans the no-effect value while the paper reports an effect.
    NoEffect,
    /// Nothing to compare: a level, or no simulated value.
    NotApplicable,
}

/// Whether a row's model was fitted to the figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    Calibrated,
    Predicted,
}

/// One row of the comparison (`study.json`'s `published`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub id: String,
    pub what: String,
    pub unit: String,
    pub kind: Option<Kind>,
    pub published: f64,
    pub simulated: Option<Estimate>,
    /// See the module essay; `None` when undefined (no simulated value, a zero published
    /// effect, a bound or a yes/no).
    pub ratio_of_effects: Option<f64>,
    pub direction: Direction,
    pub basis: Basis,
    /// Set when the study computes no such outcome (an id of a user's reference file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub source: String,
}

/// Distance from no effect of a value of `kind` (`None` for levels, bounds and yes/no).
fn effect(kind: Kind, v: f64) -> Option<f64> {
    match kind {
        Kind::Ratio => Some(v - 1.0),
        Kind::Gain => Some(v),
        Kind::Level | Kind::AtMost | Kind::AtLeast | Kind::Bool => None,
    }
}

/// A published effect this small is "none" (zssd's read latency under writes, 1.0x: "almost
/// sustainable"): the file gives exactly 1.
const NO_EFFECT_EPSILON: f64 = 1e-9;

/// A simulated effect within this of none counts as none where the paper reports none, or
/// where there is no interval (one run): the papers' "no effect" is read off plots at about
/// this resolution (2 % of the baseline).
pub const NEGLIGIBLE_EFFECT: f64 = 0.02;

/// The comparison row of a published outcome and what was simulated for it.
pub fn row(o: &Outcome, sim: Option<&Simulated>) -> Row {
    let full_id = format!("{}/{}", o.study, o.id);
    let basis = if CALIBRATIONS.iter().any(|c| c.outcome == full_id) {
        Basis::Calibrated
    } else {
        Basis::Predicted
    };
    let mut r = Row {
        id: o.id.clone(),
        what: o.what.clone(),
        unit: o.unit.clone(),
        kind: sim.map(|s| s.kind),
        published: o.value,
        simulated: sim.and_then(|s| s.estimate),
        ratio_of_effects: None,
        direction: Direction::NotApplicable,
        basis,
        note: match sim {
            None => Some("this study computes no outcome of this id".to_string()),
            Some(s) => s.note.clone(),
        },
        source: o.source.clone(),
    };
    let (Some(s), Some(est)) = (sim, r.simulated) else {
        return r;
    };
    let no_effect = match s.kind {
        Kind::Ratio => Some(1.0),
        Kind::Gain => Some(0.0),
        _ => None,
    };
    match (effect(s.kind, o.value), effect(s.kind, est.value)) {
        (Some(p), Some(v)) => {
            let published_none = p.abs() < NO_EFFECT_EPSILON;
            if !published_none {
                r.ratio_of_effects = Some(v / p);
            }
            // A gain is in percent.
            let scale = if s.kind == Kind::Gain { 100.0 } else { 1.0 };
            let negligible = v.abs() < NEGLIGIBLE_EFFECT * scale;
            let spans = match (est.low, no_effect) {
                (Some(_), Some(x)) => est.spans(x),
                // One run: "none" when the effect is negligible.
                (None, Some(_)) => negligible,
                (_, None) => false,
            };
            // A paper's "no effect" is read off a plot: a simulated effect too small to see
            // there agrees with it, however tight its interval (zssd's reads under writes:
            // 0.998 [0.998, 0.999]).
            let spans = spans || (published_none && negligible);
            r.direction = match (published_none, spans) {
                (true, true) => Direction::Agrees,
                (true, false) => Direction::Disagrees,
                (false, true) => Direction::NoEffect,
                (false, false) if p.signum() == v.signum() => Direction::Agrees,
                (false, false) => Direction::Disagrees,
            };
        }
        _ => {
            r.direction = match s.kind {
                Kind::AtMost if est.value <= o.value => Direction::Agrees,
                Kind::AtLeast if est.value >= o.value => Direction::Agrees,
                Kind::Bool if (est.value >= 0.5) == (o.value >= 0.5) => Direction::Agrees,
                Kind::AtMost | Kind::AtLeast | Kind::Bool => Direction::Disagrees,
                _ => Direction::NotApplicable,
            };
            if s.kind == Kind::Level && o.value != 0.0 {
                r.ratio_of_effects = Some(est.value / o.value);
            }
        }
    }
    r
}

/// Every outcome of `study` in `reference`, beside what `simulated` holds.
pub fn rows(reference: &Reference, study: &str, simulated: &[Simulated]) -> Vec<Row> {
    reference
        .of(study)
        .map(|o| row(o, simulated.iter().find(|s| s.id == o.id)))
        .collect()
}

/// A number with three significant digits (the table's cells).
fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.digits$}")
}

fn unit_suffix(unit: &str) -> &str {
    match unit {
        "x" => "x",
        "pct" => " %",
        "us" => " µs",
        "ms" => " ms",
        "qd" => " QD",
        "ktok_s" => " ktok/s",
        _ => "",
    }
}

/// A simulated cell: the value, its interval and the runs behind it.
pub fn simulated_cell(r: &Row) -> String {
    let Some(e) = r.simulated else {
        return r
            .note
            .clone()
            .unwrap_or_else(|| "- (runs missing)".to_string());
    };
    let u = unit_suffix(&r.unit);
    match (e.low, e.high) {
        (Some(l), Some(h)) => format!("{}{u} [{}, {}]", sig3(e.value), sig3(l), sig3(h)),
        _ => format!("{}{u} (no interval: {} run(s))", sig3(e.value), e.runs),
    }
}

/// The table the report opens with.
pub fn table(rows: &[Row]) -> Table {
    let header = [
        "outcome",
        "published",
        "simulated (95 % interval)",
        "ratio of effects",
        "direction",
        "basis",
    ];
    Table {
        header: header.iter().map(|s| s.to_string()).collect(),
        rows: rows
            .iter()
            .map(|r| {
                vec![
                    r.id.clone(),
                    format!("{}{}", sig3(r.published), unit_suffix(&r.unit)),
                    simulated_cell(r),
                    r.ratio_of_effects.map_or("-".into(), sig3),
                    match r.direction {
                        Direction::Agrees => "✓".into(),
                        Direction::Disagrees => "✗".into(),
                        Direction::NoEffect => "no effect".into(),
                        Direction::NotApplicable => "-".into(),
                    },
                    match r.basis {
                        Basis::Calibrated => "calibrated".into(),
                        Basis::Predicted => "predicted".into(),
                    },
                ]
            })
            .collect(),
    }
}

/// A ratio with its interval as a table prints it: "0.64 [0.46, 0.85]", and "(no effect)"
/// when the interval spans 1 (vanilla over itself: just its 1.00).
pub fn ratio_cell(e: &Estimate) -> String {
    if e.low == e.high && e.value == 1.0 {
        return format!("{:.2}", e.value);
    }
    match (e.low, e.high) {
        (Some(l), Some(h)) if e.spans(1.0) => {
            format!("{:.2} [{l:.2}, {h:.2}] (no effect)", e.value)
        }
        (Some(l), Some(h)) => format!("{:.2} [{l:.2}, {h:.2}]", e.value),
        _ => format!("{:.2}", e.value),
    }
}

/// An interval as a figure's whisker (NaN: none).
pub fn whisker(e: &Estimate) -> (f64, f64) {
    (e.low.unwrap_or(f64::NAN), e.high.unwrap_or(f64::NAN))
}

/// The median of `values` (`None` when empty).
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// One pair of a paired comparison: the arm's and the baseline's value per replicate (index r
/// of both is seed `seed + r`).
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    pub arm: Vec<f64>,
    pub base: Vec<f64>,
}

/// Mean over pairs of median(arm) / median(base), over the replicate indices `idx` of each.
fn ratio_estimate(pairs: &[&Pair], idx: &[Vec<usize>]) -> Option<f64> {
    let mut sum = 0.0;
    for (p, i) in pairs.iter().zip(idx) {
        let arm: Vec<f64> = i.iter().map(|&k| p.arm[k]).collect();
        let base: Vec<f64> = i.iter().map(|&k| p.base[k]).collect();
        let b = median(&base)?;
        if b <= 0.0 {
            return None;
        }
        sum += median(&arm)? / b;
    }
    (!pairs.is_empty()).then(|| sum / pairs.len() as f64)
}

/// The 2.5th and 97.5th percentiles of `stats`.
fn percentile_interval(mut stats: Vec<f64>) -> (f64, f64) {
    stats.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let k = ((stats.len() - 1) as f64 * q).round() as usize;
        stats[k]
    };
    (at(0.025), at(0.975))
}

/// The paired ratio of `pairs` (see the essay) with its bootstrap interval; `None` when a pair
/// is empty, its arms' replicate counts differ, or a baseline is zero. `stream` seeds the
/// resampling (the outcome's id: deterministic per outcome).
pub fn paired_ratio(pairs: &[Pair], stream: &str) -> Option<Estimate> {
    if pairs.is_empty()
        || pairs
            .iter()
            .any(|p| p.arm.is_empty() || p.arm.len() != p.base.len())
    {
        return None;
    }
    let all: Vec<&Pair> = pairs.iter().collect();
    let full: Vec<Vec<usize>> = pairs.iter().map(|p| (0..p.arm.len()).collect()).collect();
    let value = ratio_estimate(&all, &full)?;
    let runs = pairs.iter().map(|p| p.arm.len()).sum();
    let resamplable = pairs.len() > 1 || pairs[0].arm.len() > 1;
    if !resamplable {
        return Some(Estimate::point(value, runs));
    }
    let mut rng = engine::rng::stream(0, stream);
    let mut stats = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        let drawn: Vec<&Pair> = (0..pairs.len())
            .map(|_| &pairs[engine::rng::below(&mut rng, pairs.len() as u64) as usize])
            .collect();
        let idx: Vec<Vec<usize>> = drawn
            .iter()
            .map(|p| {
                (0..p.arm.len())
                    .map(|_| engine::rng::below(&mut rng, p.arm.len() as u64) as usize)
                    .collect()
            })
            .collect();
        if let Some(s) = ratio_estimate(&drawn, &idx) {
            stats.push(s);
        }
    }
    if stats.is_empty() {
        return Some(Estimate::point(value, runs));
    }
    let (low, high) = percentile_interval(stats);
    Some(Estimate {
        value,
        low: Some(low),
        high: Some(high),
        runs,
    })
}

/// The median of one quantity over replicates, with its bootstrap interval (resampling the
/// replicates); `None` when there are none.
pub fn level(values: &[f64], stream: &str) -> Option<Estimate> {
    let value = median(values)?;
    if values.len() < 2 {
        return Some(Estimate::point(value, values.len()));
    }
    let mut rng = engine::rng::stream(0, stream);
    let stats: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .filter_map(|_| {
            let v: Vec<f64> = (0..values.len())
                .map(|_| values[engine::rng::below(&mut rng, values.len() as u64) as usize])
                .collect();
            median(&v)
        })
        .collect();
    let (low, high) = percentile_interval(stats);
    Some(Estimate {
        value,
        low: Some(low),
        high: Some(high),
        runs: values.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_reference_parses_with_outcomes_for_every_study() {
        let r = Reference::shipped();
        for study in ["ull", "flashshare", "fastdrain", "reflex"] {
            assert!(r.of(study).count() > 0, "{study}");
        }
    }

    #[test]
    fn a_bad_reference_is_refused_naming_the_outcome() {
        let text = "[[outcome]]\nstudy = \"ull\"\nid = \"a\"\nwhat = \"w\"\nvalue = 1\nunit = \"furlongs\"\nsource = \"s\"\n";
        let e = Reference::parse(text, "mine.toml").unwrap_err();
        assert!(
            e.contains("ull/a") && e.contains("furlongs") && e.contains("mine.toml"),
            "{e}"
        );
        let twice = format!(
            "{}{}",
            text.replace("furlongs", "x"),
            text.replace("furlongs", "x")
        );
        let e = Reference::parse(&twice, "mine.toml").unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }

    /// Every calibration names a published outcome, and the parameter's file says so in a doc
    /// comment ("calibrated to `study/id`").
    #[test]
    fn every_calibration_is_named_in_its_parameters_doc_comment() {
        let r = Reference::shipped();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for c in CALIBRATIONS {
            let (study, id) = c.outcome.split_once('/').expect("study/id");
            assert!(
                r.of(study).any(|o| o.id == id),
                "{} is not in the reference",
                c.outcome
            );
            let text = std::fs::read_to_string(root.join(c.file)).expect(c.file);
            let needle = format!("calibrated to `{}`", c.outcome);
            assert!(
                text.lines()
                    .any(|l| l.trim_start().starts_with("///") && l.contains(&needle)),
                "{} has no doc comment saying {needle} for {}",
                c.file,
                c.parameter
            );
        }
    }

    fn outcome(value: f64, unit: &str) -> Outcome {
        Outcome {
            study: "s".into(),
            id: "i".into(),
            what: "w".into(),
            value,
            unit: unit.into(),
            source: "src".into(),
        }
    }

    fn sim(kind: Kind, value: f64, low: f64, high: f64) -> Simulated {
        Simulated {
            id: "i",
            kind,
            estimate: Some(Estimate {
                value,
                low: Some(low),
                high: Some(high),
                runs: 10,
            }),
            note: None,
        }
    }

    #[test]
    fn ratio_rows_compare_effects_and_directions() {
        let o = outcome(0.78, "x");
        // A third of the published gain, clearly below 1: agrees in direction.
        let r = row(&o, Some(&sim(Kind::Ratio, 0.93, 0.90, 0.96)));
        assert!((r.ratio_of_effects.unwrap() - 0.07 / 0.22).abs() < 1e-9);
        assert_eq!(r.direction, Direction::Agrees);
        // An interval spanning 1: no effect.
        let r = row(&o, Some(&sim(Kind::Ratio, 0.97, 0.90, 1.04)));
        assert_eq!(r.direction, Direction::NoEffect);
        // The wrong way.
        let r = row(&o, Some(&sim(Kind::Ratio, 1.2, 1.1, 1.3)));
        assert_eq!(r.direction, Direction::Disagrees);
        assert!(r.ratio_of_effects.unwrap() < 0.0);
        // A published "no effect" (1.0) agrees only with an interval that spans 1.
        let none = outcome(1.0, "x");
        assert_eq!(
            row(&none, Some(&sim(Kind::Ratio, 1.01, 0.99, 1.03))).direction,
            Direction::Agrees
        );
        assert_eq!(
            row(&none, Some(&sim(Kind::Ratio, 1.3, 1.2, 1.4))).direction,
            Direction::Disagrees
        );
        // A tight interval off 1 by less than the plots show still agrees with "none".
        assert_eq!(
            row(&none, Some(&sim(Kind::Ratio, 0.998, 0.998, 0.999))).direction,
            Direction::Agrees
        );
    }

    /// One run has no interval: an effect within 2 % of none is none, a larger one counts.
    #[test]
    fn a_point_estimate_near_no_effect_agrees_with_a_published_none() {
        let none = outcome(1.0, "x");
        let point = |v: f64| Simulated::new("i", Kind::Ratio, Some(Estimate::point(v, 1)));
        assert_eq!(row(&none, Some(&point(0.997))).direction, Direction::Agrees);
        assert_eq!(
            row(&none, Some(&point(1.2))).direction,
            Direction::Disagrees
        );
        let gain = outcome(7.5, "pct");
        let g = |v: f64| Simulated::new("i", Kind::Gain, Some(Estimate::point(v, 1)));
        assert_eq!(row(&gain, Some(&g(1.0))).direction, Direction::NoEffect);
        assert_eq!(row(&gain, Some(&g(9.0))).direction, Direction::Agrees);
    }

    #[test]
    fn bounds_levels_and_missing_outcomes() {
        let r = row(
            &outcome(350.0, "us"),
            Some(&sim(Kind::AtMost, 120.0, 110.0, 130.0)),
        );
        assert_eq!(r.direction, Direction::Agrees);
        let r = row(
            &outcome(2.0, "ms"),
            Some(&sim(Kind::AtLeast, 1.0, 0.9, 1.1)),
        );
        assert_eq!(r.direction, Direction::Disagrees);
        let r = row(&outcome(6.0, "qd"), Some(&sim(Kind::Level, 3.0, 2.0, 4.0)));
        assert_eq!(r.ratio_of_effects, Some(0.5));
        assert_eq!(r.direction, Direction::NotApplicable);
        let r = row(&outcome(6.0, "qd"), None);
        assert!(r.note.is_some() && r.simulated.is_none());
    }

    #[test]
    fn the_calibrated_row_says_so() {
        let r = Reference::shipped();
        let rows = rows(&r, "flashshare", &[]);
        let cal = rows
            .iter()
            .find(|r| r.id == "motivation.blk_layer_corun")
            .expect("row");
        assert_eq!(cal.basis, Basis::Calibrated);
        assert!(rows
            .iter()
            .any(|r| r.id == "avg.xler" && r.basis == Basis::Predicted));
    }

    /// The interval widens with the spread of the replicates, and a flipped replicate moves the
    /// median less than it widens the interval's upper side.
    #[test]
    fn paired_ratio_intervals_follow_the_replicates_spread() {
        let tight = Pair {
            arm: vec![0.61, 0.60, 0.62, 0.61, 0.60],
            base: vec![0.36, 0.36, 0.37, 0.36, 0.36],
        };
        let flipped = Pair {
            arm: vec![0.61, 0.58, 2.9, 0.60, 0.63],
            base: vec![0.36, 0.37, 0.35, 0.36, 0.38],
        };
        let a = paired_ratio(std::slice::from_ref(&tight), "t").unwrap();
        let b = paired_ratio(std::slice::from_ref(&flipped), "t").unwrap();
        assert!(a.low.unwrap() <= a.value && a.value <= a.high.unwrap());
        let width = |e: &Estimate| e.high.unwrap() - e.low.unwrap();
        assert!(width(&b) > 5.0 * width(&a), "{a:?} {b:?}");
        assert!((b.value - 0.61 / 0.36).abs() < 1e-9);
        assert!(b.high.unwrap() > 3.0, "{b:?}");
        // Deterministic: the same stream gives the same interval.
        assert_eq!(paired_ratio(std::slice::from_ref(&flipped), "t"), Some(b));
        // One run: a point, no interval.
        let one = Pair {
            arm: vec![1.0],
            base: vec![2.0],
        };
        let e = paired_ratio(&[one], "t").unwrap();
        assert_eq!((e.value, e.low), (0.5, None));
    }

    /// Many pairs with one replicate each are still resampled (over pairs).
    #[test]
    fn pairs_alone_give_an_interval() {
        let pairs: Vec<Pair> = (0..10)
            .map(|i| Pair {
                arm: vec![0.8 + 0.02 * i as f64],
                base: vec![1.0],
            })
            .collect();
        let e = paired_ratio(&pairs, "p").unwrap();
        assert!((e.value - 0.89).abs() < 1e-9);
        assert!(e.low.unwrap() > 0.8 && e.high.unwrap() < 0.98, "{e:?}");
        assert!(!e.spans(1.0));
    }

    #[test]
    fn levels_take_the_median_and_map_through_transforms() {
        let e = level(&[3.0, 1.0, 2.0, 10.0, 2.5], "l").unwrap();
        assert_eq!(e.value, 2.5);
        let g = e.map(|v| 100.0 * (1.0 - v), false);
        assert!(g.low.unwrap() <= g.value && g.value <= g.high.unwrap());
    }

    #[test]
    fn the_table_marks_no_effect_and_calibration() {
        let r = Reference::shipped();
        let o = r
            .of("flashshare")
            .find(|o| o.id == "p99.xler")
            .unwrap()
            .clone();
        let row = row(&o, Some(&sim(Kind::Ratio, 0.97, 0.9, 1.05)));
        let t = table(&[row]);
        let text = t.to_text();
        assert!(
            text.contains("no effect") && text.contains("predicted"),
            "{text}"
        );
        assert!(text.contains("[0.900, 1.05]"), "{text}");
    }
}
