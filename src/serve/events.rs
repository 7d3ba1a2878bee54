//! `POST /v1/events/{positive,unlabeled,negative}`: events fed to the daemon's own intake
//! over HTTP, for a service without Kafka (README "Feedback without Kafka").
//!
//! The route is admin-protected like the rollback (the same bearer token): events change what
//! the next model learns. The body is one event object or an array of at most
//! `http.max_batch`, each in the stream's event format (`id`, `ts`, `x`, `meta`), its bytes
//! kept exactly. The events go, in order, to the engine's thread over a bounded queue
//! ([`EventFeed`]) and are handled there like a recorded or consumed event of that channel:
//! the same checks, windows, scoring of unlabeled events into `[output] scores`, and dead
//! letters with their reason into `[output] dlq`. The answer comes after the engine has taken
//! them: `{"accepted": a, "dead_lettered": d, "dead_letters": [{"index", "reason", "error"}]}`
//! (200, even when some were dead-lettered, as bulk APIs do; each is also in the DLQ). A full
//! queue is 503 with `Retry-After: 1`; a body that is not JSON, or not an object or array, is
//! 400 and nothing is taken. A retried request whose events carry ids is harmless: a window
//! keeps one event per id.
//!
//! On a Kafka source the events are produced to their channel's input topic instead
//! ([`Forward`]), keyed by their `id`, and the answer comes once the broker has acknowledged
//! them, with `"produced": [{"topic", "partition", "offset"}]`; they are checked when
//! consumed, like any message, so `dead_lettered` is 0 there and dead letters go to the DLQ
//! topic.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::body::RequestBody;
use super::score::{batch_items, json_body, malformed};
use super::{admin, ApiError, Shared};
use crate::engine::machine::Taken;
use crate::stream::record::{now_ms, Record};
use crate::stream::Channel;

/// Requests queued for the engine's thread at most; each holds at most `http.max_body_bytes`,
/// so the queue's memory is bounded by 16 of them.
const QUEUED_REQUESTS: usize = 16;

/// One request's events, in order, and where the engine sends what became of each.
#[derive(Debug)]
pub struct Posted {
    pub records: Vec<Record>,
    /// One [`Taken`] per record, or the engine's error (the run then stops).
    pub reply: oneshot::Sender<Result<Vec<Taken>, String>>,
}

/// The HTTP side of the queue to the engine's thread.
#[derive(Debug, Clone)]
pub struct EventFeed(SyncSender<Posted>);

/// A queue from the API to the engine: the API keeps the [`EventFeed`], the intake loop
/// receives.
pub fn event_feed() -> (EventFeed, Receiver<Posted>) {
    let (sender, receiver) = mpsc::sync_channel(QUEUED_REQUESTS);
    (EventFeed(sender), receiver)
}

/// Where one forwarded event landed: the message's topic, partition and offset.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Forwarded {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A future of [`Forward::forward`].
pub type Forwarding<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Forwarded>, ForwardError>> + Send + 'a>>;

/// Why events could not be forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// The channel has no input topic.
    #[error("{0}")]
    NoTopic(String),
    /// The broker did not take them.
    #[error("{0}")]
    Failed(String),
}

/// Hands posted events to the daemon's source instead of its engine: on a Kafka source, the
/// input topic of their channel, so every member's consumers take them like any other
/// message (checked there; dead letters go to the DLQ topic).
pub trait Forward: Send + Sync + std::fmt::Debug {
    fn forward(&self, records: Vec<Record>) -> Forwarding<'_>;
}

/// Where `POST /v1/events/*` goes.
#[derive(Debug, Clone)]
pub enum EventsTarget {
    /// The engine's thread of this daemon.
    Engine(EventFeed),
    /// The daemon's source (Kafka topics).
    Forward(Arc<dyn Forward>),
}

pub(super) async fn post(
    State(state): State<Shared>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: RequestBody,
) -> Result<Response, ApiError> {
    let channel: Channel = channel
        .parse()
        .map_err(|e: String| ApiError::new(StatusCode::NOT_FOUND, e))?;
    admin::authorize(&state, &headers)?;
    let records = records(&body, channel, state.limits.max_batch)?;
    let feed = match &state.events {
        EventsTarget::Engine(feed) => feed.clone(),
        EventsTarget::Forward(forward) => {
            let produced = forward.forward(records).await.map_err(|e| match e {
                ForwardError::NoTopic(m) => ApiError::new(StatusCode::NOT_FOUND, m),
                ForwardError::Failed(m) => ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the events were not produced: {m}"),
                )
                .header(header::RETRY_AFTER, HeaderValue::from_static("1")),
            })?;
            return Ok(Json(json!({
                "accepted": produced.len(),
                "dead_lettered": 0,
                "dead_letters": [],
                "produced": produced,
            }))
            .into_response());
        }
    };
    let (reply, answer) = oneshot::channel();
    feed.0
        .try_send(Posted { records, reply })
        .map_err(|e| match e {
            TrySendError::Full(_) => busy(),
            TrySendError::Disconnected(_) => ended(),
        })?;
    let taken = answer
        .await
        .map_err(|_| ended())?
        .map_err(|e| ApiError::internal(format!("the engine stopped: {e}")))?;
    Ok(Json(answer_json(&taken)).into_response())
}

/// The body's events as records of `channel`, arriving now.
fn records(body: &[u8], channel: Channel, max_batch: usize) -> Result<Vec<Record>, ApiError> {
    let raw = json_body(body)?;
    let items: Vec<&RawValue> = if raw.starts_with('{') {
        vec![serde_json::from_str(raw).map_err(|e| malformed(format!("malformed JSON: {e}")))?]
    } else if raw.starts_with('[') {
        batch_items(raw, max_batch)?
    } else {
        return Err(malformed(
            "the request body must be an event object or an array of event objects",
        ));
    };
    let ts = now_ms();
    Ok(items
        .into_iter()
        .map(|item| Record::new(channel, ts, None, item.get().as_bytes().to_vec()))
        .collect())
}

fn answer_json(taken: &[Taken]) -> Value {
    let dead_letters: Vec<Value> = taken
        .iter()
        .enumerate()
        .filter_map(|(index, t)| match t {
            Taken::Accepted => None,
            Taken::DeadLettered(r) => Some(json!({
                "index": index,
                "reason": r.reason.as_str(),
                "error": r.detail,
            })),
        })
        .collect();
    json!({
        "accepted": taken.len() - dead_letters.len(),
        "dead_lettered": dead_letters.len(),
        "dead_letters": dead_letters,
    })
}

fn busy() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the intake queue is full; retry later",
    )
    .header(header::RETRY_AFTER, HeaderValue::from_static("1"))
}

fn ended() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "this daemon's intake has ended (the recorded stream is over, or it is shutting down); \
         run it with `run` or `replay --serve` to post events",
    )
}
