//! `POST /v1/score`: one event object → one score object; an array of events → an array of
//! score objects in the same order.
//!
//! The events are validated by the stream's own intake check ([`parse_event_with`], `ts`
//! optional here) against the active model's dimension, and the whole request is scored by the
//! one model [`Registry::active`](crate::engine::registry::Registry::active) returned when it
//! started ([`score_batch`]), so a swap in between never splits a batch. HTTP-scored events are
//! only scored: they never enter a training window, and they do not count in the stream's
//! event metrics (they have no channel).

use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::value::RawValue;

use super::body::RequestBody;
use super::{ApiError, AppState, Shared};
use crate::engine::scoring::{score_batch, ScoreOutput, ScoringError};
use crate::engine::store::StoredModel;
use crate::learn::Scorer;
use crate::stream::event::{parse_event_with, Event, RejectReason, Rejection};

pub(super) async fn score(
    State(state): State<Shared>,
    body: RequestBody,
) -> Result<Response, ApiError> {
    // The one registry load of this request.
    let model = state.registry.active().ok_or_else(ApiError::no_model)?;
    // Parsing and kernel scoring are CPU work: keep them off the async workers, which must
    // stay free to answer /healthz and /metrics while a large batch is scored.
    tokio::task::spawn_blocking(move || score_body(&state, &model, &body))
        .await
        .map_err(|e| ApiError::internal(format!("the scoring task failed: {e}")))?
}

/// The body as the text of one JSON value (leading space trimmed): 400 when it is not UTF-8,
/// empty, or not JSON. Syntax is checked for the whole body first, so a malformed body is
/// reported with serde_json's line and column in the body rather than in one event.
pub(super) fn json_body(body: &[u8]) -> Result<&str, ApiError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the request body is not UTF-8: {e}"),
        )
        .with("reason", RejectReason::InvalidUtf8.as_str())
    })?;
    if text.trim().is_empty() {
        return Err(malformed(
            "the request body is empty; send an event object or an array of events",
        ));
    }
    let raw: &RawValue =
        serde_json::from_str(text).map_err(|e| malformed(format!("malformed JSON body: {e}")))?;
    Ok(raw.get().trim_start())
}

/// The events of a JSON array body, at most `max_batch` (413 beyond).
pub(super) fn batch_items(raw: &str, max_batch: usize) -> Result<Vec<&RawValue>, ApiError> {
    let items: Vec<&RawValue> =
        serde_json::from_str(raw).map_err(|e| malformed(format!("malformed JSON body: {e}")))?;
    if items.len() > max_batch {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} events in one request, http.max_batch is {max_batch}",
                items.len()
            ),
        ));
    }
    Ok(items)
}

fn score_body(state: &AppState, model: &StoredModel, body: &[u8]) -> Result<Response, ApiError> {
    let raw = json_body(body)?;
    let n_features = model.model.n_features();
    if raw.starts_with('{') {
        let (event, ts_given) = parse(raw, n_features, state)
            .map_err(|r| ApiError::from_rejection(&r, "invalid event", None))?;
        let mut out = score_timed(state, model, &[&event], &[ts_given])?;
        return match out.pop() {
            Some(one) => Ok(Json(one).into_response()),
            None => Err(ApiError::internal("scoring one event returned no score")),
        };
    }
    if !raw.starts_with('[') {
        return Err(malformed(
            "the request body must be an event object or an array of event objects",
        ));
    }
    let items = batch_items(raw, state.limits.max_batch)?;
    let mut events = Vec::with_capacity(items.len());
    let mut ts_given = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let (event, given) = parse(item.get(), n_features, state)
            .map_err(|r| ApiError::from_rejection(&r, &format!("invalid event {i}"), Some(i)))?;
        events.push(event);
        ts_given.push(given);
    }
    let refs: Vec<&Event> = events.iter().collect();
    Ok(Json(score_timed(state, model, &refs, &ts_given)?).into_response())
}

fn parse(raw: &str, n_features: usize, state: &AppState) -> Result<(Event, bool), Rejection> {
    parse_event_with(raw.as_bytes(), Some(n_features), &state.limits.event, false)
}

/// Scores with `model`, observing the per-event latency (batch time / batch size, once per
/// event, as the stream path does).
fn score_timed(
    state: &AppState,
    model: &StoredModel,
    events: &[&Event],
    ts_given: &[bool],
) -> Result<Vec<ScoreOutput>, ApiError> {
    let started = Instant::now();
    let out = score_batch(model, events, Some(ts_given))
        .map_err(|e: ScoringError| ApiError::internal(format!("cannot score: {e}")))?;
    if !events.is_empty() {
        let per_event = started.elapsed().as_secs_f64() / events.len() as f64;
        for _ in events {
            state.metrics.scoring_latency.observe(per_event);
        }
    }
    Ok(out)
}

pub(super) fn malformed(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
        .with("reason", RejectReason::InvalidJson.as_str())
}

impl ApiError {
    /// 400 for an event the intake check rejected: the detail, its stable reason, and for a
    /// batch the event's index.
    fn from_rejection(r: &Rejection, what: &str, index: Option<usize>) -> ApiError {
        let e = ApiError::new(StatusCode::BAD_REQUEST, format!("{what}: {}", r.detail))
            .with("reason", r.reason.as_str());
        match index {
            Some(i) => e.with("index", i),
            None => e,
        }
    }
}
