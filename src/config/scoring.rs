//! The `[scoring]` table.

use serde::{Deserialize, Serialize};

/// Intake limits and scoring before the first model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoringConfig {
    /// Unlabeled events held before the first model exists, scored once it does; beyond this
    /// they are emitted with `"status": "unscored"`.
    #[serde(default = "default_buffer_before_model")]
    pub buffer_before_model: usize,
    /// Largest accepted event, bytes; larger ones go to the DLQ as `too_large`.
    #[serde(default = "default_max_event_bytes")]
    pub max_event_bytes: usize,
}

fn default_buffer_before_model() -> usize {
    100_000
}
fn default_max_event_bytes() -> usize {
    1 << 20
}

impl Default for ScoringConfig {
    fn default() -> Self {
        ScoringConfig {
            buffer_before_model: default_buffer_before_model(),
            max_event_bytes: default_max_event_bytes(),
        }
    }
}
