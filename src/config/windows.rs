//! `[windows]` and its three channel tables.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::HumanDuration;

/// One channel's sliding window: bounded by count, by age (event time) and by bytes. The
/// defaults are the same for every channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Most events kept; the oldest leave first.
    #[serde(default = "default_window_events")]
    pub max_events: usize,
    /// Events older than this (relative to the newest event time seen) leave the window.
    #[serde(default = "default_window_age")]
    pub max_age: HumanDuration,
    /// Memory budget of the window's rows and ids, in MiB; the oldest leave first beyond it.
    #[serde(default = "default_window_mb")]
    pub max_mb: usize,
}

fn default_window_events() -> usize {
    5_000
}
fn default_window_age() -> HumanDuration {
    HumanDuration(Duration::from_secs(7 * 86_400))
}
fn default_window_mb() -> usize {
    256
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            max_events: default_window_events(),
            max_age: default_window_age(),
            max_mb: default_window_mb(),
        }
    }
}

/// The three channels' windows, and how far ahead an event time may run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowsConfig {
    #[serde(default)]
    pub positive: WindowConfig,
    #[serde(default)]
    pub unlabeled: WindowConfig,
    #[serde(default)]
    pub negative: WindowConfig,
    /// An event whose `ts` is more than this ahead of both the newest event time seen and the
    /// wall clock goes to the DLQ as `ts_out_of_range`: event time drives every window's age
    /// and the retrain clock, so one event from far in the future would otherwise expire
    /// every window. Default `"1d"`, room for producers' clock skew; a replay of a stream
    /// recorded with future times needs more.
    #[serde(default = "default_max_future")]
    pub max_future: HumanDuration,
}

fn default_max_future() -> HumanDuration {
    HumanDuration(Duration::from_secs(86_400))
}

impl Default for WindowsConfig {
    fn default() -> Self {
        WindowsConfig {
            positive: WindowConfig::default(),
            unlabeled: WindowConfig::default(),
            negative: WindowConfig::default(),
            max_future: default_max_future(),
        }
    }
}
