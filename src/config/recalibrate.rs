//! The `[recalibrate]` table.

use serde::{Deserialize, Serialize};

/// Fresh thresholds between retrains: the active model's threshold is recomputed from the
/// newest labelled feedback it never trained on, and swapped in without a retrain (README,
/// "Fresh thresholds"; docs/certificates.md §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecalibrateConfig {
    /// Recalibrate at all. On by default: under drift a threshold calibrated at the last
    /// retrain is the part that goes stale first.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// The umbrella threshold is taken over the newest this-many negative-feedback events the
    /// active model never trained on (fewer if the negative window holds fewer). Smaller
    /// follows a drift sooner; larger certifies a lower threshold (more TPR) on a steady
    /// stream.
    #[serde(default = "default_window")]
    pub window: usize,
    /// Recalibrate after this many new negative-feedback events, or for a pu-umbrella
    /// threshold this many new labelled positives (the counts restart when a retrained model
    /// is swapped in, with its own fresh threshold). A pu-umbrella recalibration takes the
    /// newest `window` unseen positives and unlabeled events.
    #[serde(default = "default_every")]
    pub every: usize,
}

fn default_enabled() -> bool {
    true
}
fn default_window() -> usize {
    1_000
}
fn default_every() -> usize {
    25
}

impl Default for RecalibrateConfig {
    fn default() -> Self {
        RecalibrateConfig {
            enabled: default_enabled(),
            window: default_window(),
            every: default_every(),
        }
    }
}
