//! Scoring events with the active model, and the score object every sink and `POST /v1/score`
//! emits.
//!
//! The score object (JSON):
//! `{"id", "ts", "score", "flagged", "threshold", "model_version", "status", "meta"}` with
//! `status` `"scored"` (every other field set by the model that scored it) or `"unscored"`
//! (`score`, `flagged`, `threshold` and `model_version` null: no model existed and the
//! pre-model buffer was full). `ts` is null only for HTTP events sent without one; `meta` is the
//! event's, passed through, or null.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::engine::store::StoredModel;
use crate::learn::threshold::ThresholdResult;
use crate::learn::Scorer;
use crate::stream::event::{features_to_rows, Event};
use crate::stream::Features;

/// Whether an event got a score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScoreStatus {
    Scored,
    Unscored,
}

/// One event's score, as written to the score sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreOutput {
    pub id: String,
    pub ts: Option<i64>,
    pub score: Option<f64>,
    pub flagged: Option<bool>,
    pub threshold: Option<f64>,
    pub model_version: Option<u64>,
    pub status: ScoreStatus,
    pub meta: Option<Map<String, Value>>,
}

impl ScoreOutput {
    /// The output for an event no model could score.
    pub fn unscored(event: &Event) -> ScoreOutput {
        ScoreOutput {
            id: event.id.clone(),
            ts: Some(event.ts),
            score: None,
            flagged: None,
            threshold: None,
            model_version: None,
            status: ScoreStatus::Unscored,
            meta: event.meta.clone(),
        }
    }

    /// One JSON line (no trailing newline). Serialising plain data cannot fail; if it ever
    /// did, the line still names the event.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| self.error_line(&e))
    }

    /// [`ScoreOutput::to_json_line`] appended to `out` (a reused buffer: no allocation per
    /// score once it has grown).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let start = out.len();
        if let Err(e) = serde_json::to_writer(&mut *out, self) {
            out.truncate(start);
            out.extend_from_slice(self.error_line(&e).as_bytes());
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

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScoringError {
    #[error("event {id:?} has {found} features, the model {expected}")]
    Dimension {
        id: String,
        found: usize,
        expected: usize,
    },
    #[error("the model {version} has no threshold")]
    NoThreshold { version: u64 },
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
    let threshold = model.model.threshold().ok_or(ScoringError::NoThreshold {
        version: model.meta.version,
    })?;
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
    let threshold = model.model.threshold().ok_or(ScoringError::NoThreshold {
        version: model.meta.version,
    })?;
    let score = model.model.score_dense_row(x);
    Ok(scored(model, threshold, event, score, true))
}

fn scored(
    model: &StoredModel,
    threshold: &ThresholdResult,
    event: &Event,
    score: f64,
    ts_given: bool,
) -> ScoreOutput {
    ScoreOutput {
        id: event.id.clone(),
        ts: ts_given.then_some(event.ts),
        score: Some(score),
        flagged: Some(threshold.is_positive(score)),
        threshold: Some(threshold.threshold),
        model_version: Some(model.meta.version),
        status: ScoreStatus::Scored,
        meta: event.meta.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use ndarray::array;

    use super::*;
    use crate::data::{Dataset, Label, Rows, ScaleKind, Scaler};
    use crate::engine::store::ModelMeta;
    use crate::learn::kernel::Kernel;
    use crate::learn::model::{Fingerprint, Model, UsmoEntry};
    use crate::learn::threshold::{ThresholdMethod, ThresholdResult};
    use crate::learn::usmo::UsmoParams;
    use crate::stream::event::Features;

    fn model(threshold: f64) -> StoredModel {
        model_with(threshold, Kernel::Linear, ScaleKind::None)
    }

    fn model_with(threshold: f64, kernel: Kernel, scale: ScaleKind) -> StoredModel {
        let data = Dataset {
            rows: Rows::dense(array![
                [1.0, 0.0],
                [0.9, 0.1],
                [0.0, 1.0],
                [0.1, 0.8],
                [0.8, 0.3]
            ]),
            labels: vec![
                Label::Positive,
                Label::Positive,
                Label::Unlabeled,
                Label::Unlabeled,
                Label::Unlabeled,
            ],
            ids: (0..5).map(|i| i.to_string()).collect(),
        };
        let fit = UsmoParams::new(0.3, 0.1, kernel)
            .check()
            .expect("valid")
            .fit(&data, &AtomicBool::new(false))
            .expect("fit");
        StoredModel {
            meta: ModelMeta {
                version: 7,
                trained_at_ms: 0,
                config_fingerprint: 1,
                n_features: 2,
                window_sizes: [2, 3, 0],
            },
            model: Model::Usmo(UsmoEntry {
                scaler: Scaler::fit(scale, &data.rows),
                fit,
                tol: 1e-3,
                fingerprint: Fingerprint::of(&data),
                threshold: Some(ThresholdResult {
                    method: ThresholdMethod::Umbrella,
                    tau: 0.1,
                    delta: Some(0.05),
                    threshold,
                    fpr_bound: Some(0.08),
                    fpr_estimate: 0.05,
                    tpr_estimate: Some(0.9),
                    calibration_negatives: 100,
                    calibration_positives: 10,
                    calibration_unlabeled: 0,
                }),
            }),
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
        let u = ScoreOutput::unscored(&bad);
        let v: Value = serde_json::from_str(&u.to_json_line()).expect("json");
        assert_eq!(v["status"], "unscored");
        assert!(v["score"].is_null() && v["model_version"].is_null());
    }
}
