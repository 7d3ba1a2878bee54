//! Scoring events with the active model, and the score object every sink and `POST /v1/score`
//! emits.
//!
//! The score object (JSON):
//! `{"id", "ts", "score", "flagged", "threshold", "certified", "model_version",
//! "threshold_version", "status", "meta"}` with `status` `"scored"` (every other field set by
//! the model that scored it) or `"unscored"`, followed by a `"reason"` ([`UnscoredReason`];
//! `score`, `flagged`, `threshold`, `certified`, `model_version` and `threshold_version` null).
//! `threshold_version` says which of the model's thresholds decided `flagged`: 0 the one it
//! was trained with, then one more per fresh threshold ([`StoredModel::threshold_version`]). `certified` is true when the threshold carries an
//! FPR bound at confidence 1 − δ (umbrella, pu-umbrella), false for `oob` (an estimate) and for
//! a ranking-only model (`threshold = "none"`: `flagged` false, `threshold` null). `ts` is null only for HTTP events sent without one; `meta` is the
//! event's, passed through, or null.

use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::engine::store::StoredModel;
use crate::learn::threshold::ThresholdResult;
use crate::learn::Scorer;
use crate::stream::event::{features_to_rows, Event};
use crate::stream::Features;

/// Whether an event got a score; written as `"status"`, and for an unscored event
/// `"reason"` right after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ScoreStatus {
    Scored,
    Unscored { reason: UnscoredReason },
}

/// Why an event has no score: the `"reason"` of an unscored output and the `reason` label of
/// `neyman_unscored_events_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnscoredReason {
    /// It waited `scoring.max_wait` and no model had been accepted.
    NoAcceptedModel,
    /// No model had been accepted and `scoring.buffer_before_model` events were waiting.
    BufferFull,
    /// It was still waiting for a first model when the replay ended or the daemon stopped.
    Shutdown,
    /// The active model could not score it (its dimension is locked to the model's, so this
    /// does not happen in practice).
    ScoringFailed,
}

impl UnscoredReason {
    /// Every reason, in declaration order (the engine keeps one counter per reason, indexed
    /// by this order).
    pub const ALL: [UnscoredReason; 4] = [
        UnscoredReason::NoAcceptedModel,
        UnscoredReason::BufferFull,
        UnscoredReason::Shutdown,
        UnscoredReason::ScoringFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            UnscoredReason::NoAcceptedModel => "no_accepted_model",
            UnscoredReason::BufferFull => "buffer_full",
            UnscoredReason::Shutdown => "shutdown",
            UnscoredReason::ScoringFailed => "scoring_failed",
        }
    }
}

/// One event's score, as written to the score sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreOutput {
    pub id: String,
    pub ts: Option<i64>,
    pub score: Option<f64>,
    pub flagged: Option<bool>,
    pub threshold: Option<f64>,
    pub certified: Option<bool>,
    pub model_version: Option<u64>,
    pub threshold_version: Option<u64>,
    #[serde(flatten)]
    pub status: ScoreStatus,
    pub meta: Option<Map<String, Value>>,
}

impl ScoreOutput {
    /// The output for an event no model could score, and why.
    pub fn unscored(event: &Event, reason: UnscoredReason) -> ScoreOutput {
        ScoreOutput {
            id: event.id.clone(),
            ts: Some(event.ts),
            score: None,
            flagged: None,
            threshold: None,
            certified: None,
            model_version: None,
            threshold_version: None,
            status: ScoreStatus::Unscored { reason },
            meta: event.meta.clone(),
        }
    }

    /// One JSON line (no trailing newline): [`ScoreOutput::write_json`].
    pub fn to_json_line(&self) -> String {
        let mut out = Vec::with_capacity(160);
        self.write_json(&mut out);
        // Only UTF-8 is written; the lossy path is never taken.
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// The score object appended to `out` (a reused buffer: no allocation per score once it
    /// has grown): exactly the bytes serde's derived serialiser writes (a property test
    /// holds them equal), written field by field. The derived serialiser spent most of its
    /// time escaping the eight constant keys; this is a tenth of the Kafka producer thread's
    /// work per score. Serialising plain data cannot fail; if `meta` ever did, the line still
    /// names the event.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(b"{\"id\":");
        write_json_str(out, &self.id);
        out.extend_from_slice(b",\"ts\":");
        match self.ts {
            Some(ts) => out.extend_from_slice(itoa::Buffer::new().format(ts).as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"score\":");
        write_json_f64(out, self.score);
        out.extend_from_slice(b",\"flagged\":");
        write_json_bool(out, self.flagged);
        out.extend_from_slice(b",\"threshold\":");
        write_json_f64(out, self.threshold);
        out.extend_from_slice(b",\"certified\":");
        write_json_bool(out, self.certified);
        out.extend_from_slice(b",\"model_version\":");
        write_json_u64(out, self.model_version);
        out.extend_from_slice(b",\"threshold_version\":");
        write_json_u64(out, self.threshold_version);
        match self.status {
            ScoreStatus::Scored => out.extend_from_slice(b",\"status\":\"scored\",\"meta\":"),
            ScoreStatus::Unscored { reason } => {
                out.extend_from_slice(b",\"status\":\"unscored\",\"reason\":\"");
                out.extend_from_slice(reason.as_str().as_bytes());
                out.extend_from_slice(b"\",\"meta\":");
            }
        }
        let meta = match &self.meta {
            Some(meta) => serde_json::to_writer(&mut *out, meta),
            None => {
                out.extend_from_slice(b"null");
                Ok(())
            }
        };
        match meta {
            Ok(()) => out.push(b'}'),
            Err(e) => {
                out.truncate(start);
                out.extend_from_slice(self.error_line(&e).as_bytes());
            }
        }
    }

    fn error_line(&self, e: &serde_json::Error) -> String {
        format!(
            "{{\"id\":{},\"status\":\"unscored\",\"error\":{}}}",
            Value::String(self.id.clone()),
            Value::String(e.to_string())
        )
    }
}

/// A JSON string as serde_json writes it: ids rarely hold a character it escapes (`"`, `\\`,
/// control characters), so they are copied as they are, and serde_json escapes the others.
fn write_json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let mut serializer = serde_json::Serializer::new(&mut *out);
        // Writing a string to a vector cannot fail.
        let _ = serializer.serialize_str(s);
    }
}

fn write_json_u64(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_json_bool(out: &mut Vec<u8>, value: Option<bool>) {
    out.extend_from_slice(match value {
        Some(true) => b"true",
        Some(false) => b"false",
        None => b"null",
    });
}

/// A number as serde_json writes an `Option<f64>`: null when absent or not finite, else
/// serde_json's own shortest round-trip form.
fn write_json_f64(out: &mut Vec<u8>, value: Option<f64>) {
    match value {
        Some(v) if v.is_finite() => {
            use serde_json::ser::Formatter;
            // Writing to a vector cannot fail.
            let _ = serde_json::ser::CompactFormatter.write_f64(&mut *out, v);
        }
        _ => out.extend_from_slice(b"null"),
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScoringError {
    #[error("event {id:?} has {found} features, the model {expected}")]
    Dimension {
        id: String,
        found: usize,
        expected: usize,
    },
    #[error("cannot stack the events into rows: {0}")]
    Rows(String),
}

/// Scores `events` with `model` as one batch; every output carries `model.meta.version`.
///
/// The caller loads the active model once per batch ([`crate::engine::registry::Registry`]),
/// so one batch is never split across two models. `ts_given[i] == false` (HTTP events without a
/// `ts`) writes a null `ts`.
pub fn score_batch(
    model: &StoredModel,
    events: &[&Event],
    ts_given: Option<&[bool]>,
) -> Result<Vec<ScoreOutput>, ScoringError> {
    let n_features = model.model.n_features();
    if let Some(e) = events.iter().find(|e| e.x.dim() != n_features) {
        return Err(ScoringError::Dimension {
            id: e.id.clone(),
            found: e.x.dim(),
            expected: n_features,
        });
    }
    let threshold = model.model.threshold();
    let rows = features_to_rows(events.iter().map(|e| &e.x), n_features)
        .map_err(|e| ScoringError::Rows(e.to_string()))?;
    let mut scores = vec![0.0; events.len()];
    model.model.score_batch(&rows, &mut scores);
    Ok(events
        .iter()
        .zip(scores)
        .enumerate()
        .map(|(i, (e, score))| {
            let ts_given = ts_given.map_or(true, |given| given.get(i).copied().unwrap_or(true));
            scored(model, threshold, e, score, ts_given)
        })
        .collect())
}

/// [`score_batch`] of one event, the same output; a dense event is scored without stacking
/// it into rows ([`crate::learn::model::Model::score_dense_row`]).
pub fn score_one(model: &StoredModel, event: &Event) -> Result<ScoreOutput, ScoringError> {
    score_one_with(model, event, None)
}

/// A dense event's score computed ahead, off the engine's thread ([`prescore`]), by the
/// model of `version`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prescore {
    pub version: u64,
    pub score: f64,
}

/// What [`score_one`] computes for a dense event of `model`'s dimension, to be handed to
/// [`score_one_with`] or [`flags`] later; `None` for other events.
pub fn prescore(model: &StoredModel, event: &Event) -> Option<Prescore> {
    match &event.x {
        Features::Dense(x) if x.len() == model.model.n_features() => Some(Prescore {
            version: model.meta.version,
            score: model.model.score_dense_row(x),
        }),
        _ => None,
    }
}

/// The dense score of `x` under `model`: `prescore`'s when it came from this model's
/// version (the same function of the same weights, so the same bits), else computed now.
fn dense_score(model: &StoredModel, x: &[f64], prescore: Option<Prescore>) -> f64 {
    match prescore {
        Some(p) if p.version == model.meta.version => p.score,
        _ => model.model.score_dense_row(x),
    }
}

/// [`score_one`], taking the score from `prescore` when it came from `model`.
pub fn score_one_with(
    model: &StoredModel,
    event: &Event,
    prescore: Option<Prescore>,
) -> Result<ScoreOutput, ScoringError> {
    let Features::Dense(x) = &event.x else {
        let mut out = score_batch(model, &[event], None)?;
        return out
            .pop()
            .ok_or(ScoringError::Rows("no output for one event".into()));
    };
    let expected = model.model.n_features();
    if x.len() != expected {
        return Err(ScoringError::Dimension {
            id: event.id.clone(),
            found: x.len(),
            expected,
        });
    }
    let threshold = model.model.threshold();
    let score = dense_score(model, x, prescore);
    Ok(scored(model, threshold, event, score, true))
}

/// Whether `model` flags `event`, as [`score_one`]'s `flagged` says, without building the
/// output (the drift and FPR gauges ask it of every negative-feedback event); `None` when the
/// event cannot be scored. The score is `prescore`'s when it came from `model`.
pub fn flags(model: &StoredModel, event: &Event, prescore: Option<Prescore>) -> Option<bool> {
    match &event.x {
        Features::Dense(x) if x.len() == model.model.n_features() => {
            let score = dense_score(model, x, prescore);
            Some(
                model
                    .model
                    .threshold()
                    .is_some_and(|t| t.is_positive(score)),
            )
        }
        _ => score_one(model, event).ok()?.flagged,
    }
}

/// The output of a scored event. A model without a threshold (`threshold = "none"`, accepted
/// by the gate only then) ranks: it flags nothing and certifies nothing.
fn scored(
    model: &StoredModel,
    threshold: Option<&ThresholdResult>,
    event: &Event,
    score: f64,
    ts_given: bool,
) -> ScoreOutput {
    ScoreOutput {
        id: event.id.clone(),
        ts: ts_given.then_some(event.ts),
        score: Some(score),
        flagged: Some(threshold.is_some_and(|t| t.is_positive(score))),
        threshold: threshold.map(|t| t.threshold),
        certified: Some(threshold.is_some_and(|t| t.fpr_bound.is_some())),
        model_version: Some(model.meta.version),
        threshold_version: Some(model.threshold_version),
        status: ScoreStatus::Scored,
        meta: event.meta.clone(),
    }
}

#[cfg(test)]
mod tests {
    use ndarray::array;

    use super::*;
    use crate::data::{Rows, ScaleKind};
    use crate::learn::kernel::Kernel;
    use crate::learn::model::{toy, Model};
    use crate::stream::event::Features;

    fn model(threshold: f64) -> StoredModel {
        model_with(threshold, Kernel::Linear, ScaleKind::None)
    }

    fn model_with(threshold: f64, kernel: Kernel, scale: ScaleKind) -> StoredModel {
        let mut model = toy::usmo(kernel, scale);
        if let Model::Usmo(entry) = &mut model {
            entry.threshold = Some(toy::threshold(threshold));
        }
        StoredModel {
            threshold_version: 0,
            meta: toy::provenance(7),
            model,
        }
    }

    fn event(id: &str, x: Features) -> Event {
        Event {
            id: id.into(),
            ts: 5,
            x,
            meta: None,
        }
    }

    /// A two-feature event with one stored value.
    fn sparse_event(id: &str, index: u32, value: f64) -> Event {
        event(
            id,
            Features::Sparse {
                dim: 2,
                indices: vec![index],
                values: vec![value],
            },
        )
    }

    #[test]
    fn one_event_scores_as_a_batch_of_one() {
        let kernels = [Kernel::Linear, Kernel::Rbf { gamma: 0.7 }];
        for (kernel, scale) in kernels
            .into_iter()
            .zip([ScaleKind::Standard, ScaleKind::MinMax])
        {
            let m = model_with(0.05, kernel, scale);
            for (k, x) in [[0.9, 0.0], [0.0, 1.0], [-3.5, 2.25], [0.45, 0.45]]
                .iter()
                .enumerate()
            {
                let e = event(&format!("e{k}"), Features::Dense(x.to_vec()));
                let one = score_one(&m, &e).expect("scored");
                let batch = score_batch(&m, &[&e], None).expect("scored");
                assert_eq!(one, batch[0], "{kernel:?} {x:?}");
                assert_eq!(
                    one.score.map(f64::to_bits),
                    batch[0].score.map(f64::to_bits)
                );
            }
            let sparse = sparse_event("s", 1, 0.5);
            assert_eq!(
                score_one(&m, &sparse),
                score_batch(&m, &[&sparse], None).map(|mut o| o.remove(0))
            );
            let wide = event("w", Features::Dense(vec![0.0; 3]));
            assert_eq!(
                score_one(&m, &wide),
                Err(ScoringError::Dimension {
                    id: "w".into(),
                    found: 3,
                    expected: 2
                })
            );
        }
    }

    #[test]
    fn dense_and_sparse_events_score_alike_and_carry_the_version() {
        let m = model(0.0);
        let dense = event("d", Features::Dense(vec![0.9, 0.0]));
        let sparse = sparse_event("s", 0, 0.9);
        let far = event("f", Features::Dense(vec![0.0, 1.0]));
        let out =
            score_batch(&m, &[&dense, &sparse, &far], Some(&[true, false, true])).expect("scored");
        let mut want = [0.0; 2];
        m.model
            .score_batch(&Rows::dense(array![[0.9, 0.0], [0.0, 1.0]]), &mut want);
        assert_eq!(out[0].score, Some(want[0]));
        assert!((out[1].score.expect("scored") - want[0]).abs() < 1e-12);
        assert_eq!(out[2].score, Some(want[1]));
        assert_eq!(out[0].flagged, Some(want[0] > 0.0));
        assert_eq!(out[2].flagged, Some(want[1] > 0.0));
        assert!(out.iter().all(|o| o.model_version == Some(7)));
        assert_eq!(out[1].ts, None, "ts not given");
        assert_eq!(out[0].ts, Some(5));
        let line = out[0].to_json_line();
        let v: Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["model_version"], 7);
        assert_eq!(v["status"], "scored");
        assert_eq!(v["threshold"], 0.0);
    }

    #[test]
    fn a_wrong_dimension_is_an_error_naming_the_event() {
        let m = model(0.0);
        let bad = event("b", Features::Dense(vec![1.0, 2.0, 3.0]));
        let e = score_batch(&m, &[&bad], None).expect_err("dimension");
        assert_eq!(
            e,
            ScoringError::Dimension {
                id: "b".into(),
                found: 3,
                expected: 2
            }
        );
        let u = ScoreOutput::unscored(&bad, UnscoredReason::NoAcceptedModel);
        let v: Value = serde_json::from_str(&u.to_json_line()).expect("json");
        assert_eq!(v["status"], "unscored");
        assert_eq!(v["reason"], "no_accepted_model");
        assert!(v["score"].is_null() && v["model_version"].is_null());
        // The reason comes right after the status; a scored output has none.
        assert!(u.to_json_line().contains(
            "\"model_version\":null,\"threshold_version\":null,\"status\":\"unscored\",\"reason\":\"no_accepted_model\",\"meta\":null}"
        ));
        assert_eq!(
            serde_json::from_str::<ScoreOutput>(&u.to_json_line()).ok(),
            Some(u)
        );
    }

    /// The engine indexes its counters by `reason as usize`; the JSON name is the label.
    #[test]
    fn unscored_reasons_are_listed_in_order_and_named_alike_in_json_and_metrics() {
        for (i, reason) in UnscoredReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i, "{reason:?}");
            assert_eq!(
                serde_json::to_value(reason).ok(),
                Some(Value::String(reason.as_str().into()))
            );
        }
    }

    fn meta_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ]
    }

    proptest::proptest! {
        /// The hand-written score object is byte for byte what serde's derived serialiser
        /// writes, for any id (quotes, backslashes, control and non-ASCII characters), any
        /// number (non-finite ones are null) and any meta.
        #[test]
        fn write_json_is_serdes_output(
            id in proptest::prop_oneof![
                proptest::prelude::any::<String>(),
                "[\\x00-\\x1f\\x7f\"\\\\/aé😀-]{0,8}",
            ],
            ts in proptest::option::of(proptest::prelude::any::<i64>()),
            score in proptest::option::of(proptest::num::f64::ANY),
            flagged in proptest::option::of(proptest::bool::ANY),
            threshold in proptest::option::of(proptest::num::f64::ANY),
            certified in proptest::option::of(proptest::bool::ANY),
            model_version in proptest::option::of(proptest::prelude::any::<u64>()),
            threshold_version in proptest::option::of(proptest::prelude::any::<u64>()),
            status in proptest::prop_oneof![
                proptest::strategy::Just(ScoreStatus::Scored),
                proptest::strategy::Strategy::prop_map(
                    proptest::sample::select(UnscoredReason::ALL.to_vec()),
                    |reason| ScoreStatus::Unscored { reason },
                ),
            ],
            meta in proptest::option::of(proptest::collection::btree_map(
                proptest::prelude::any::<String>(), meta_value(), 0..4)),
        ) {
            let output = ScoreOutput {
                id,
                ts,
                score,
                flagged,
                threshold,
                certified,
                model_version,
                threshold_version,
                status,
                meta: meta.map(|m| m.into_iter().collect()),
            };
            let mut written = b"prefix".to_vec();
            output.write_json(&mut written);
            let want = serde_json::to_vec(&output).expect("serde");
            proptest::prop_assert_eq!(&written[6..], &want[..]);
            proptest::prop_assert_eq!(output.to_json_line().into_bytes(), want);
        }
    }
}
