//! The daemon's HTTP API (axum on tokio), served from the daemon's own process so it reads the
//! same [`Registry`] the learner swaps models into.
//!
//! Routes (README "HTTP API" has examples):
//!
//! | route | answer |
//! | --- | --- |
//! | `POST /v1/score` | one event → one score object; an array → an array, same order |
//! | `GET /v1/model` | the active model's metadata and threshold |
//! | `GET /v1/models` | the remembered models, newest first, with which one is active |
//! | `GET /v1/audit` | the last `[audit]` report (404 without `[audit]`, 503 before the first) |
//! | `POST /v1/model/rollback` | admin (bearer token): reinstate the previous model |
//! | `POST /v1/events/{channel}` | admin (bearer token): events into the daemon's intake |
//! | `GET /metrics` | Prometheus text exposition |
//! | `GET /healthz`, `GET /readyz` | liveness; readiness (a model is active) |
//!
//! Every error is JSON `{"error": "..."}` (plus `reason`/`index` for rejected events), every
//! response is counted in `neyman_http_requests_total{route, status}` under its route
//! *template*: an unknown path counts as `other`, so a scanner cannot blow up the label set.
//!
//! The daemon starts it with [`bind`] and [`serve`] on an [`AppState`]; tests drive
//! [`router`] directly. Handlers by route: `score` (scoring), `model` (model metadata and the
//! remembered models), `admin` (rollback and the bearer token), `events` (events posted into the intake), `body` (request bodies read
//! into one buffer, a large one in its own memory map); health, readiness and `/metrics` are here; `listen`
//! accepts connections within [`ConnectionLimits`] (a cap that evicts idle connections, a
//! header-read timeout, graceful shutdown). Every request has `request_timeout` (408), and the
//! `/v1/*` routes share `max_concurrent_requests`.

mod admin;
mod body;
mod events;
mod listen;
mod model;
mod score;

pub use events::{
    event_feed, EventFeed, EventsTarget, Forward, ForwardError, Forwarded, Forwarding, Posted,
};
pub use listen::ConnectionLimits;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use crate::config::{HttpConfig, Secret};
use crate::engine::audit::{AuditBoard, AuditReport};
use crate::engine::registry::Registry;
use crate::engine::store::ModelStore;
use crate::stream::EventLimits;
use crate::telemetry::{self, Metrics};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("http.listen {addr:?}: cannot listen: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP server on {addr}: {source}")]
    Serve {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// Request size and connection limits of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body, bytes (413 beyond it, checked before the body is buffered).
    pub max_body_bytes: usize,
    /// Most events in one `POST /v1/score` array (413 beyond it).
    pub max_batch: usize,
    /// Per-event limits, the same the stream intake applies, so an event the API accepts is
    /// one the stream would accept too.
    pub event: EventLimits,
    /// Connections, timeouts and requests in progress.
    pub connections: ConnectionLimits,
}

impl HttpLimits {
    /// The limits of `[http]`, with the stream's per-event limits.
    pub fn new(http: &HttpConfig, event: EventLimits) -> HttpLimits {
        HttpLimits {
            max_body_bytes: http.max_body_bytes,
            max_batch: http.max_batch,
            event,
            connections: ConnectionLimits::of(http),
        }
    }
}

/// What the handlers share. The router holds it in an `Arc`, so cloning the router or the
/// state per connection costs a reference count.
#[derive(Debug)]
pub struct AppState {
    /// The daemon's registry: the learner installs into it, the API reads and rolls back.
    pub registry: Arc<Registry>,
    /// The state directory, when the daemon persists models: a rollback retires the rolled-back
    /// model's file there, so a restart does not resume it.
    pub store: Option<ModelStore>,
    pub metrics: Metrics,
    /// The registry [`Metrics`] is registered on, exposed at `GET /metrics`.
    pub prometheus: prometheus::Registry,
    /// The admin bearer token; `None` disables the admin routes (403).
    pub admin_token: Option<Secret>,
    pub limits: HttpLimits,
    /// Where `POST /v1/events/{channel}` sends the events.
    pub events: EventsTarget,
    /// The last audit; `None` without `[audit]`.
    pub audit: Option<AuditBoard>,
}

type Shared = Arc<AppState>;

/// The API's routes on `state`.
pub fn router(state: AppState) -> Router {
    let state: Shared = Arc::new(state);
    let limits = state.limits.connections;
    let api = Router::new()
        .route("/v1/score", post(score::score))
        .route("/v1/model", get(model::active))
        .route("/v1/models", get(model::list))
        .route("/v1/audit", get(audit))
        .route("/v1/model/rollback", post(admin::rollback))
        .route("/v1/events/{channel}", post(events::post))
        .route_layer(GlobalConcurrencyLimitLayer::new(
            limits.max_concurrent_requests,
        ));
    Router::new()
        .merge(api)
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            count_requests,
        ))
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        .with_state(state)
}

/// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`). Tokio's
/// default, 1 024, overflowed under a flood of 5 000 connections: the SYN of a `/healthz`
/// probe behind them was dropped and retried after the 1 s retransmission timeout
/// (scripts/probe.py `connections`).
const LISTEN_BACKLOG: u32 = 8192;

/// Binds `addr` (`http.listen`), naming it in the error.
pub async fn bind(addr: &str) -> Result<TcpListener, ServeError> {
    let failed = |source| ServeError::Bind {
        addr: addr.to_owned(),
        source,
    };
    let mut last = None;
    for address in tokio::net::lookup_host(addr).await.map_err(failed)? {
        let socket = match address {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        };
        let listening = socket.and_then(|socket| {
            socket.set_reuseaddr(true)?;
            socket.bind(address)?;
            socket.listen(LISTEN_BACKLOG)
        });
        match listening {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(failed(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    })))
}

/// Serves the API on `listener` until `shutdown` completes, then stops accepting and waits for
/// the requests in flight to finish (graceful shutdown).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let addr = listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a: SocketAddr| a.to_string());
    let limits = state.limits.connections.within_descriptor_limit();
    tracing::info!(
        %addr,
        max_connections = limits.max_connections,
        "HTTP API listening"
    );
    listen::accept(listener, router(state), limits, shutdown)
        .await
        .map_err(|source| ServeError::Serve { addr, source })
}

/// An error response: a status and the JSON object `{"error": ..., ...}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    body: Map<String, Value>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        let mut body = Map::new();
        body.insert("error".into(), Value::String(message.into()));
        ApiError {
            status,
            body,
            headers: Vec::new(),
        }
    }

    /// Adds a field besides `error`.
    pub(crate) fn with(mut self, key: &str, value: impl Into<Value>) -> ApiError {
        self.body.insert(key.into(), value.into());
        self
    }

    /// Sets the `WWW-Authenticate` challenge a 401 must carry (RFC 7235).
    pub(crate) fn challenge(self, challenge: &'static str) -> ApiError {
        self.header(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        )
    }

    /// Adds a response header.
    pub(crate) fn header(mut self, name: HeaderName, value: HeaderValue) -> ApiError {
        self.headers.push((name, value));
        self
    }

    pub(crate) fn no_model() -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no model is active yet")
    }

    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(Value::Object(self.body))).into_response();
        response.headers_mut().extend(self.headers);
        response
    }
}

/// Counts every response under its route template (`other` when no route matched), after the
/// handler ran, so the status is the one sent.
async fn count_requests(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    state
        .metrics
        .http_requests
        .with_label_values(&[route.as_str(), response.status().as_str()])
        .inc();
    response
}

/// The Prometheus text format version 0.0.4 content type, which scrapers negotiate on.
const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";

async fn metrics(State(state): State<Shared>) -> Result<Response, ApiError> {
    let text = telemetry::encode(&state.prometheus)
        .map_err(|e| ApiError::internal(format!("cannot encode the metrics: {e}")))?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROMETHEUS_CONTENT_TYPE),
        )],
        text,
    )
        .into_response())
}

/// Liveness: answering at all is the signal.
async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The last audit's report (`[audit]`): 404 when the daemon runs none, 503 until the first
/// one finishes.
async fn audit(State(state): State<Shared>) -> Result<Json<AuditReport>, ApiError> {
    let board = state.audit.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no audit is configured (add an [audit] table to the configuration)",
        )
    })?;
    board.last().map(Json).ok_or_else(|| {
        let error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no audit has finished yet: the first starts once a model is active",
        );
        match board.running() {
            Some(number) => error.with("running", number),
            None => error,
        }
    })
}

/// Readiness: scoring works only once a model is active, so a load balancer should not send
/// traffic before.
async fn readyz(State(state): State<Shared>) -> Result<Json<Value>, ApiError> {
    let model = state.registry.active().ok_or_else(ApiError::no_model)?;
    Ok(Json(
        json!({"status": "ready", "model_version": model.meta.version}),
    ))
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", request.method(), request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}
