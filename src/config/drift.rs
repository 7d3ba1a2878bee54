//! The `[drift]` table.

use serde::{Deserialize, Serialize};

/// Drift detection (README, "How the daemon works", step 8): on the unlabeled events' scores,
/// a two-sample Kolmogorov–Smirnov test between the active model's reference scores (its
/// held-out unlabeled events at training, else its first `window` unlabeled scores) and its
/// latest `window` scores; on the same events' feature means (`features`); on the negative
/// feedback, the share of the newest `window` unseen negatives its threshold flags, against τ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftConfig {
    /// Detect at all. On by default: a detection marks the certificate stale, asks for an
    /// early retrain and restarts the fresh-threshold count.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Scores in the reference and in the recent sample, and negatives in the feedback test.
    /// Keep it below the unlabeled events between two retrains: a swap restarts the samples.
    #[serde(default = "default_window")]
    pub window: usize,
    /// Test after this many new unlabeled scores (once both samples are full), and the
    /// feedback after this many new negatives.
    #[serde(default = "default_every")]
    pub every: usize,
    /// A test whose p-value is below this is a detection. Small, because the test runs every
    /// `every` scores: on stationary streams the false alarms are measured in the README.
    #[serde(default = "default_p_value")]
    pub p_value: f64,
    /// Also test the unlabeled events' feature means (Welch's z per feature against the same
    /// reference events, Bonferroni over the features, at `p_value`): a covariate shift the
    /// scores do not show. Costs O(features) per test and `window` events of memory.
    #[serde(default = "default_enabled")]
    pub features: bool,
}

fn default_enabled() -> bool {
    true
}
fn default_window() -> usize {
    300
}
fn default_every() -> usize {
    50
}
fn default_p_value() -> f64 {
    1e-4
}

impl Default for DriftConfig {
    fn default() -> Self {
        DriftConfig {
            enabled: default_enabled(),
            window: default_window(),
            every: default_every(),
            p_value: default_p_value(),
            features: default_enabled(),
        }
    }
}
