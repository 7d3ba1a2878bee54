//! The `[retrain]` table.

use serde::{Deserialize, Serialize};

use super::values::HumanDuration;

/// When to retrain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrainConfig {
    /// The first retrain waits until the positive window holds this many training events.
    #[serde(default = "default_min_positive")]
    pub min_positive: usize,
    /// … and the unlabeled window this many.
    #[serde(default = "default_min_unlabeled")]
    pub min_unlabeled: usize,
    /// tfpl trains positive vs negative once the negative window holds this many training
    /// events, otherwise positive vs unlabeled; `umbrella` thresholds need it too.
    #[serde(default = "default_min_negative")]
    pub min_negative: usize,
    /// Retrain after this many new window events (0: never by count).
    #[serde(default = "default_every_events")]
    pub every_events: u64,
    /// Retrain after this much event time (absent: never by time).
    #[serde(default)]
    pub every: Option<HumanDuration>,
}

fn default_min_positive() -> usize {
    50
}
fn default_min_unlabeled() -> usize {
    300
}
fn default_min_negative() -> usize {
    200
}
fn default_every_events() -> u64 {
    1_000
}

impl Default for RetrainConfig {
    fn default() -> Self {
        RetrainConfig {
            min_positive: default_min_positive(),
            min_unlabeled: default_min_unlabeled(),
            min_negative: default_min_negative(),
            every_events: default_every_events(),
            every: None,
        }
    }
}
