//! `GET /v1/model` and `GET /v1/models`: what the daemon scores with, for operators and
//! dashboards (the metrics show the same numbers as time series).

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use super::{ApiError, Shared};
use crate::engine::store::StoredModel;
use crate::learn::threshold::ThresholdMethod;
use crate::learn::Scorer;

/// Training events per channel in the model's snapshot.
#[derive(Debug, Serialize)]
struct WindowSizes {
    positive: usize,
    unlabeled: usize,
    negative: usize,
}

/// The body of `GET /v1/model`. Threshold fields are null for a model without a threshold,
/// `delta` and `fpr_bound` also for `oob` (which certifies nothing).
#[derive(Debug, Serialize)]
pub(super) struct ModelView {
    version: u64,
    /// Which of this model's thresholds scores now: 0 the one it was trained with, one more
    /// per fresh threshold (`[recalibrate]`).
    threshold_version: u64,
    algorithm: &'static str,
    n_features: usize,
    trained_at: String,
    trained_at_ms: i64,
    window_sizes: WindowSizes,
    threshold: Option<f64>,
    /// Whether `fpr_bound` certifies the FPR at confidence 1 − δ (umbrella, pu-umbrella); false
    /// for oob and for a ranking-only model (`threshold = "none"`).
    certified: bool,
    tau: Option<f64>,
    delta: Option<f64>,
    threshold_method: Option<ThresholdMethod>,
    fpr_bound: Option<f64>,
    fpr_estimate: Option<f64>,
    tpr_estimate: Option<f64>,
    calibration_size: Option<usize>,
}

impl ModelView {
    fn of(m: &StoredModel) -> ModelView {
        let t = m.model.threshold();
        let [positive, unlabeled, negative] = m.meta.window_sizes;
        ModelView {
            version: m.meta.version,
            threshold_version: m.threshold_version,
            algorithm: m.model.algorithm(),
            n_features: m.model.n_features(),
            trained_at: rfc3339_ms(m.meta.trained_at_ms),
            trained_at_ms: m.meta.trained_at_ms,
            window_sizes: WindowSizes {
                positive,
                unlabeled,
                negative,
            },
            threshold: t.map(|t| t.threshold),
            certified: t.is_some_and(|t| t.fpr_bound.is_some()),
            tau: t.map(|t| t.tau),
            delta: t.and_then(|t| t.delta),
            threshold_method: t.map(|t| t.method),
            fpr_bound: t.and_then(|t| t.fpr_bound),
            fpr_estimate: t.map(|t| t.fpr_estimate),
            tpr_estimate: t.and_then(|t| t.tpr_estimate),
            calibration_size: t.map(|t| t.calibration_size()),
        }
    }
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Serialize)]
struct ListedModel {
    version: u64,
    threshold_version: u64,
    algorithm: &'static str,
    trained_at: String,
    trained_at_ms: i64,
    threshold: Option<f64>,
    fpr_bound: Option<f64>,
    active: bool,
}

#[derive(Debug, Serialize)]
pub(super) struct ModelList {
    models: Vec<ListedModel>,
}

pub(super) async fn active(State(state): State<Shared>) -> Result<Json<ModelView>, ApiError> {
    let model = state.registry.active().ok_or_else(ApiError::no_model)?;
    Ok(Json(ModelView::of(&model)))
}

/// Empty before the first model (not 503: an empty history is a valid answer).
pub(super) async fn list(State(state): State<Shared>) -> Json<ModelList> {
    let models = state
        .registry
        .models()
        .into_iter()
        .map(|(m, active)| {
            let t = m.model.threshold();
            ListedModel {
                version: m.meta.version,
                threshold_version: m.threshold_version,
                algorithm: m.model.algorithm(),
                trained_at: rfc3339_ms(m.meta.trained_at_ms),
                trained_at_ms: m.meta.trained_at_ms,
                threshold: t.map(|t| t.threshold),
                fpr_bound: t.and_then(|t| t.fpr_bound),
                active,
            }
        })
        .collect();
    Json(ModelList { models })
}

/// Epoch milliseconds as RFC 3339 UTC with milliseconds (`2026-01-01T00:00:00.000Z`).
/// Howard Hinnant's days-to-civil algorithm: exact for every `i64` day count the proleptic
/// Gregorian calendar covers, without a date library for one formatting call.
pub(crate) fn rfc3339_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::rfc3339_ms;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_767_225_600_000), "2026-01-01T00:00:00.000Z");
        // 2024-02-29 (a leap day) 23:59:59.999
        assert_eq!(rfc3339_ms(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }
}
