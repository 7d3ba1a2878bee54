//! The `[scoring]` table.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::HumanDuration;

/// Intake limits and scoring before the first model.
///
/// Before the first accepted model, unlabeled events wait and are scored by it. None waits
/// for ever: each is emitted with `"status": "unscored"` and a `"reason"` (and counted in
/// `neyman_unscored_events_total{reason}`) once it has waited `max_wait` (`no_accepted_model`),
/// when it arrives to a full buffer (`buffer_full`), or when the replay ends or the daemon
/// stops first (`shutdown`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoringConfig {
    /// Unlabeled events held before the first model exists, scored once it does; an event
    /// arriving while this many wait is emitted at once with `"status": "unscored"`,
    /// `"reason": "buffer_full"`.
    #[serde(default = "default_buffer_before_model")]
    pub buffer_before_model: usize,
    /// How long an unlabeled event waits for a first accepted model before it is emitted with
    /// `"status": "unscored"`, `"reason": "no_accepted_model"` (`0` emits it at once). Measured
    /// in event time (the newest event time seen, so a `--speed max` replay stays
    /// reproducible) and, on Kafka, also in wall-clock time from the poll round that read it
    /// (a stream that stops does not hold its last events back). Default `"5m"`: the bundled
    /// stream's first model arrives about 90 s of event time in, and a stream whose retrains
    /// are all refused still answers every event within minutes.
    #[serde(default = "default_max_wait")]
    pub max_wait: HumanDuration,
    /// Largest accepted event, bytes; larger ones go to the DLQ as `too_large`.
    #[serde(default = "default_max_event_bytes")]
    pub max_event_bytes: usize,
    /// Largest accepted feature count (a sparse event's `dim`, a dense event's length); larger
    /// ones go to the DLQ as `dimension_too_large`. The dimension sizes every retrain's
    /// allocations, so it is bounded before any event may lock it. Default 2²⁴ = 16 777 216,
    /// room for hashed text features.
    #[serde(default = "default_max_features")]
    pub max_features: usize,
    /// Without `model.n_features` or a resumed model, the feature dimension is locked by this
    /// many valid events that agree on it (dense events and sparse ones that give `dim`), so
    /// one stray first event cannot switch the daemon off by dead-lettering every real event
    /// after it. Events are held until then — at most 10 × the quorum of them and, on Kafka,
    /// `max_wait` of wall-clock time; then the most common dimension locks — and the ones of
    /// another dimension go to the DLQ as `dimension_mismatch`. `1` (or `max_wait = 0`) locks
    /// on the first valid event. Default 10.
    #[serde(default = "default_dimension_quorum")]
    pub dimension_quorum: usize,
}

fn default_buffer_before_model() -> usize {
    100_000
}
fn default_max_wait() -> HumanDuration {
    HumanDuration(Duration::from_secs(300))
}
fn default_max_event_bytes() -> usize {
    1 << 20
}
fn default_max_features() -> usize {
    1 << 24
}
fn default_dimension_quorum() -> usize {
    10
}

impl Default for ScoringConfig {
    fn default() -> Self {
        ScoringConfig {
            buffer_before_model: default_buffer_before_model(),
            max_wait: default_max_wait(),
            max_event_bytes: default_max_event_bytes(),
            max_features: default_max_features(),
            dimension_quorum: default_dimension_quorum(),
        }
    }
}
