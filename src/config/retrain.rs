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
    /// Before the first accepted model, a retrain that installed nothing (refused by the gate,
    /// failed, e.g. too few calibration negatives had arrived yet) is retried after this many
    /// new window events, the next after twice as many, and so on up to `every_events`. Retries
    /// leave the schedule as it was: the next scheduled retrain comes when it would have.
    /// 0 (the default): wait for `every_events` / `every`. A live source answers sooner with
    /// it (the shipped `kafka.toml` and `http.toml` set 100); the first model then trains on
    /// fewer events, and its TPR is lower (the bundled stream's over the whole replay: 0.599
    /// without, 0.546 with 100; docs/benchmarks.md, stop 44). Whatever this is, a live source
    /// (Kafka, HTTP) whose events have waited half of `scoring.max_wait` on the wall clock
    /// retries once the windows grew since the last attempt, at most once per half
    /// `scoring.max_wait`: an input that pauses after a refused first retrain moves no count
    /// schedule, and its events would otherwise wait all of `max_wait`. Replays have no wall
    /// clock and never retry that way.
    #[serde(default = "default_first_model_retry_events")]
    pub first_model_retry_events: u64,
    /// Retrain after this much event time (absent: never by time).
    #[serde(default)]
    pub every: Option<HumanDuration>,
    /// Wall time one retrain may take, all of it (prior pre-pass, ranking-depth search, fit,
    /// calibration). When it runs out the retrain is stopped and counted as failed
    /// (`neyman_retrain_failures_total{reason="time_limit"}`, a warning); the active model
    /// keeps serving and the next retrain starts warm from the last finished one. A retrain
    /// normally takes well under a second to a few seconds; one that does not (labels with no
    /// signal left USMO iterating for minutes) would otherwise hold back the next one
    /// indefinitely, and on a replay the intake too. Default 2m.
    #[serde(default = "default_time_limit")]
    pub time_limit: HumanDuration,
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
fn default_first_model_retry_events() -> u64 {
    0
}
fn default_time_limit() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(120))
}

impl Default for RetrainConfig {
    fn default() -> Self {
        RetrainConfig {
            min_positive: default_min_positive(),
            min_unlabeled: default_min_unlabeled(),
            min_negative: default_min_negative(),
            every_events: default_every_events(),
            first_model_retry_events: default_first_model_retry_events(),
            every: None,
            time_limit: default_time_limit(),
        }
    }
}
