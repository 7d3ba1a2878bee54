//! The `[log]` table.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::HumanDuration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Logs (stderr).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `pretty` or `json` (one object per line).
    #[serde(default = "default_log_format")]
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `neyman=debug`; `RUST_LOG` wins when set.
    #[serde(default = "default_log_level")]
    pub level: String,
    /// How long a graceful shutdown may take before the process exits anyway.
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout: HumanDuration,
}

fn default_log_format() -> LogFormat {
    LogFormat::Pretty
}
fn default_log_level() -> String {
    "info".into()
}
fn default_shutdown_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: default_log_format(),
            level: default_log_level(),
            shutdown_timeout: default_shutdown_timeout(),
        }
    }
}
