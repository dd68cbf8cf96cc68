//! What a study invocation runs: the size (`--quick` or full), the first seed and the
//! replicates of each comparison. Every study's run list is a function of a [`Plan`].

/// Full study, or the short `--quick` version (seconds; used by tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Quick,
    Full,
}

impl Size {
    pub fn as_str(self) -> &'static str {
        match self {
            Size::Quick => "quick",
            Size::Full => "full",
        }
    }

    pub fn parse(s: &str) -> Option<Size> {
        match s {
            "quick" => Some(Size::Quick),
            "full" => Some(Size::Full),
            _ => None,
        }
    }
}

/// Replicates (seeds `seed`, `seed + 1`, …) of every comparison in a full study: five, so a
/// headline ratio's 95 % bootstrap interval rests on more than one run's luck ([`crate::published`]).
pub const DEFAULT_REPLICATES: u64 = 5;

/// What to run: the size, the first seed and how many replicates of each comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub size: Size,
    pub seed: u64,
    /// Runs of each replicated comparison, seeds `seed` … `seed + replicates - 1` (≥ 1).
    pub replicates: u64,
}

impl Plan {
    /// The default plan of a size: [`DEFAULT_REPLICATES`] for a full study, one for `--quick`
    /// (a smoke test: its intervals are not computed).
    pub fn new(size: Size, seed: u64) -> Plan {
        let replicates = match size {
            Size::Quick => 1,
            Size::Full => DEFAULT_REPLICATES,
        };
        Plan {
            size,
            seed,
            replicates,
        }
    }

    /// The same with `replicates` runs per comparison (`--replicates N`; N ≥ 1).
    pub fn with_replicates(self, replicates: u64) -> Result<Plan, String> {
        if replicates == 0 {
            return Err("--replicates 0: expected at least 1 run per comparison".to_string());
        }
        Ok(Plan { replicates, ..self })
    }

    /// The seed of replicate `r`.
    pub fn seed_of(&self, r: u64) -> u64 {
        self.seed + r
    }
}
