//! The `[output]` table.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where scores and rejected events go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Score sink: `"-"` for stdout, else a JSON Lines file (appended).
    #[serde(default = "default_scores")]
    pub scores: PathBuf,
    /// Dead-letter file (JSON Lines) for events that fail validation.
    #[serde(default = "default_dlq")]
    pub dlq: PathBuf,
}

fn default_scores() -> PathBuf {
    PathBuf::from("-")
}
fn default_dlq() -> PathBuf {
    PathBuf::from("dlq.jsonl")
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            scores: default_scores(),
            dlq: default_dlq(),
        }
    }
}
