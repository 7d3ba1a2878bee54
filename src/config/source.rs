//! The `[source]` table.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where events come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `replay`: a recorded stream file (JSON Lines, optionally gzip); `kafka`: the `[kafka]`
    /// input topics, with scores and dead letters produced to its topics (`[output]` is then
    /// not used); `http`: no stream, only the events posted to `POST /v1/events/{channel}`
    /// (admin token required), with scores and dead letters to `[output]`. Every kind also
    /// takes posted events.
    #[serde(default = "default_source_kind")]
    pub kind: SourceKind,
    /// The recorded stream to replay (`kind = "replay"`).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Replay pace: `max` (virtual time, as fast as possible), `realtime`, or `xN` (N times
    /// real time, e.g. `x10`).
    #[serde(default = "default_speed")]
    pub speed: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Replay,
    Kafka,
    Http,
}

fn default_source_kind() -> SourceKind {
    SourceKind::Replay
}
fn default_speed() -> String {
    "max".into()
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            kind: default_source_kind(),
            path: None,
            speed: default_speed(),
        }
    }
}
