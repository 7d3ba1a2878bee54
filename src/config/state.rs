//! The `[state]` table.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Persistence of accepted models and the version counter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Directory for model files and the version counter; created when missing.
    #[serde(default = "default_state_dir")]
    pub dir: PathBuf,
    /// How many accepted models to keep on disk (the newest first; ≥ 2 so rollback works).
    #[serde(default = "default_keep_models")]
    pub keep_models: usize,
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("state")
}
fn default_keep_models() -> usize {
    5
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            dir: default_state_dir(),
            keep_models: default_keep_models(),
        }
    }
}
