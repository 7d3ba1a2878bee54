//! The `[gate]` table.

use serde::{Deserialize, Serialize};

/// Which retrained models may replace the active one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// A new model is rejected when its NP-score on recent calibration events is worse than the
    /// active model's by more than this.
    #[serde(default = "default_margin")]
    pub margin: f64,
    /// oob thresholds carry no certificate: accept when `fpr_estimate` ≤ τ + this.
    #[serde(default = "default_oob_slack")]
    pub oob_slack: f64,
}

fn default_margin() -> f64 {
    0.05
}
fn default_oob_slack() -> f64 {
    0.01
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            margin: default_margin(),
            oob_slack: default_oob_slack(),
        }
    }
}
