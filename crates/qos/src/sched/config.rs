//! The scheduler's settings (`[qos.tuning]` in the server's config): how far into debt an LC
//! tenant may go, how much of a balance above its cap it donates, over how many rounds the cap
//! is measured, when the shared bucket is emptied and what it keeps, and whether held LC
//! tenants may borrow spare tokens. The defaults are the published design's, except
//! `lc_borrows_spare` (on; [`crate::sched`]'s essay says why) and `bucket_carry_mtok` (a reset
//! keeps one 4 KB write of the device instead of emptying the bucket).
//!
//! Worked example: `donate_pct = 80` and `deficit_limit = { rate_window_ns = 100000 }` give an
//! LC tenant reserving 10 000 tokens/s a deficit limit of 1 token (100 µs of its rate) and make
//! it donate 80 % of what it holds above its cap; `cap_rounds = 9` is refused
//! ([`MAX_CAP_ROUNDS`] rounds of history are kept).

use serde::{Deserialize, Serialize};

/// How far below zero an LC tenant's balance may go before it is held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeficitLimit {
    /// A fixed number of milli-tokens for every tenant (published default: 50 tokens).
    FixedMtok(u64),
    /// The tenant's reservation × this window (e.g. 100 µs of its rate): scales with the tenant.
    RateWindowNs(u64),
}

/// When the shared bucket is emptied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BucketReset {
    /// After every worker has run a round since the last reset (as published), or when the
    /// bucket is older than `bucket_max_age_ns`.
    AfterEveryWorkerRound,
    /// Never (ablation: lets donations pile up into bursts).
    Never,
}

/// Settings of a scheduler; a `[qos]` table in the server's config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// How far into debt an LC tenant may go.
    pub deficit_limit: DeficitLimit,
    /// Share of an LC balance above its cap that is donated, percent (published: 90).
    pub donate_pct: u8,
    /// An LC tenant's cap is its earnings over this many of the worker's last rounds (published: 3).
    pub cap_rounds: u8,
    /// When the shared bucket is emptied.
    pub bucket_reset: BucketReset,
    /// Empty the bucket at least this often even if a worker stopped running rounds, ns.
    pub bucket_max_age_ns: u64,
    /// What a reset leaves in the bucket, mtok; `None`: one 4 KB write of the device (see
    /// [`crate::bucket`]); `Some(0)`: empty it completely, as published.
    pub bucket_carry_mtok: Option<u64>,
    /// An LC tenant held at its deficit limit may pay its next requests from the shared bucket
    /// (spare tokens: donations and idle BE shares), before BE tenants borrow (default: on;
    /// off: as published).
    pub lc_borrows_spare: bool,
}

/// Published deficit limit: 50 tokens.
pub const DEFAULT_DEFICIT_LIMIT_MTOK: u64 = 50_000;

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            deficit_limit: DeficitLimit::FixedMtok(DEFAULT_DEFICIT_LIMIT_MTOK),
            donate_pct: 90,
            cap_rounds: 3,
            bucket_reset: BucketReset::AfterEveryWorkerRound,
            bucket_max_age_ns: 1_000_000,
            bucket_carry_mtok: None,
            lc_borrows_spare: true,
        }
    }
}

/// A bad scheduler setting.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `donate_pct` above 100.
    #[error("donate_pct = {0}; expected 0..=100")]
    DonatePct(u8),
    /// `cap_rounds` of zero or more than the history kept.
    #[error("cap_rounds = {0}; expected 1..={max}", max = MAX_CAP_ROUNDS)]
    CapRounds(u8),
}

/// Most rounds of history the cap can span.
pub const MAX_CAP_ROUNDS: u8 = 8;

impl SchedulerConfig {
    /// Checks the settings serde cannot: `donate_pct` is a percentage and `cap_rounds` fits the
    /// history kept.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.donate_pct > 100 {
            return Err(ConfigError::DonatePct(self.donate_pct));
        }
        if self.cap_rounds == 0 || self.cap_rounds > MAX_CAP_ROUNDS {
            return Err(ConfigError::CapRounds(self.cap_rounds));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_reads_from_toml_with_unknown_keys_refused() {
        let c: SchedulerConfig = toml::from_str(
            "deficit_limit = { rate_window_ns = 100000 }\ndonate_pct = 80\nbucket_reset = \"never\"\n",
        )
        .expect("valid");
        assert_eq!(c.deficit_limit, DeficitLimit::RateWindowNs(100_000));
        assert_eq!(c.donate_pct, 80);
        assert_eq!(c.bucket_reset, BucketReset::Never);
        assert_eq!(c.cap_rounds, 3, "defaults fill the rest");
        let err = toml::from_str::<SchedulerConfig>("donate_percent = 80\n").unwrap_err();
        assert!(err.to_string().contains("donate_percent"), "{err}");
    }

    #[test]
    fn out_of_range_settings_are_refused_and_the_defaults_pass() {
        assert_eq!(SchedulerConfig::default().validate(), Ok(()));
        let c = |donate_pct, cap_rounds| SchedulerConfig {
            donate_pct,
            cap_rounds,
            ..SchedulerConfig::default()
        };
        assert_eq!(c(100, MAX_CAP_ROUNDS).validate(), Ok(()));
        assert_eq!(c(101, 3).validate(), Err(ConfigError::DonatePct(101)));
        assert_eq!(c(90, 0).validate(), Err(ConfigError::CapRounds(0)));
        assert_eq!(
            c(90, MAX_CAP_ROUNDS + 1).validate(),
            Err(ConfigError::CapRounds(MAX_CAP_ROUNDS + 1))
        );
    }
}
