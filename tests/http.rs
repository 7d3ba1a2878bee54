//! The HTTP API over a real socket: a server from `serve::serve` on `127.0.0.1:0`, requests
//! from a minimal HTTP/1.1 client on a `TcpStream`, so routing, status codes, headers, bodies
//! and the request counters are checked as a client and a scraper see them.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ndarray::array;
use neyman::config::Secret;
use neyman::data::{Rows, ScaleKind};
use neyman::engine::registry::Registry;
use neyman::engine::store::{ModelStore, StoredModel};
use neyman::learn::kernel::Kernel;
use neyman::learn::model::{toy, Model, Provenance};
use neyman::learn::threshold::ThresholdResult;
use neyman::learn::Scorer;
use neyman::serve::{
    self, event_feed, AppState, ConnectionLimits, EventsTarget, HttpLimits, ServeError,
};
use neyman::stream::EventLimits;
use neyman::telemetry::Metrics;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Rows the tests score, and the threshold splitting their scores (two flagged, two not).
const PROBES: [[f64; 2]; 4] = [[0.9, 0.0], [0.0, 1.0], [0.5, 0.5], [0.2, 0.8]];

/// A linear USMO model on 2 features, trained on a fixed toy set; `version` shifts nothing
/// but the metadata. The threshold is the midpoint of the middle two probe scores.
fn stored(version: u64) -> StoredModel {
    let mut model = toy::usmo(Kernel::Linear, ScaleKind::None);
    let mut scores = probe_scores(&model);
    scores.sort_by(f64::total_cmp);
    let threshold = (scores[1] + scores[2]) / 2.0;
    if let Model::Usmo(entry) = &mut model {
        entry.threshold = Some(ThresholdResult {
            calibration_negatives: 120,
            calibration_positives: 30,
            ..toy::threshold(threshold)
        });
    }
    StoredModel::new(
        Provenance {
            trained_at_ms: 1_767_225_600_000 + version as i64 * 1000,
            ..toy::provenance(version)
        },
        model,
    )
}

fn probe_scores(model: &Model) -> Vec<f64> {
    let rows = Rows::dense(array![
        [PROBES[0][0], PROBES[0][1]],
        [PROBES[1][0], PROBES[1][1]],
        [PROBES[2][0], PROBES[2][1]],
        [PROBES[3][0], PROBES[3][1]]
    ]);
    let mut out = vec![0.0; PROBES.len()];
    model.score_batch(&rows, &mut out);
    out
}

struct Options {
    admin_token: Option<&'static str>,
    store: Option<ModelStore>,
    max_body_bytes: usize,
    max_batch: usize,
    connections: ConnectionLimits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            admin_token: None,
            store: None,
            max_body_bytes: 64 * 1024,
            max_batch: 16,
            connections: ConnectionLimits::default(),
        }
    }
}

/// A running server and the handles a test needs to drive and stop it.
struct Server {
    addr: SocketAddr,
    registry: Arc<Registry>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Server {
    async fn start(options: Options) -> Server {
        let registry = Arc::new(Registry::new(5));
        let prometheus = prometheus::Registry::new();
        let metrics = Metrics::new(&prometheus).expect("metrics");
        let state = AppState {
            audit: None,
            registry: Arc::clone(&registry),
            store: options.store,
            metrics,
            prometheus,
            admin_token: options.admin_token.map(Secret::new),
            limits: HttpLimits {
                max_body_bytes: options.max_body_bytes,
                max_batch: options.max_batch,
                event: EventLimits::default(),
                connections: options.connections,
            },
            // No engine behind this server: posted events are answered 503.
            events: EventsTarget::Engine(event_feed().0),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve::serve(listener, state, async move {
            let _ = rx.await;
        }));
        Server {
            addr,
            registry,
            shutdown: Some(tx),
            task,
        }
    }

    async fn get(&self, path: &str) -> Reply {
        request(self.addr, "GET", path, &[], b"").await
    }

    async fn post(&self, path: &str, body: &str) -> Reply {
        request(
            self.addr,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
        .await
    }

    async fn stop(mut self) -> Result<(), ServeError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.await.expect("server task")
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`, so the reply ends at EOF).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(body).await.expect("write body");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read reply");
    let text = String::from_utf8(raw).expect("UTF-8 reply");
    let (head, rest) = text.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

fn event(id: &str, x: [f64; 2], ts: Option<i64>) -> Value {
    match ts {
        Some(ts) => json!({"id": id, "ts": ts, "x": x}),
        None => json!({"id": id, "x": x}),
    }
}

fn assert_close(v: &Value, want: f64) {
    let got = v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"));
    assert!(
        (got - want).abs() <= 1e-12 * want.abs().max(1.0),
        "{got} vs {want}"
    );
}

/// The value of one sample line of the exposition (`name{labels} value`).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn before_a_model_scoring_and_model_answer_503_and_readyz_flips() {
    let server = Server::start(Options::default()).await;
    let r = server
        .post("/v1/score", &event("a", [1.0, 0.0], None).to_string())
        .await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json(), json!({"error": "no model is active yet"}));
    let r = server.get("/v1/model").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"], "no model is active yet");
    assert_eq!(server.get("/readyz").await.status, 503);
    let r = server.get("/healthz").await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    let r = server.get("/v1/models").await;
    assert_eq!((r.status, r.json()), (200, json!({"models": []})));
    // Without [audit] the route says how to turn it on (503 and 200: tests/daemon_http.rs).
    let r = server.get("/v1/audit").await;
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]
        .as_str()
        .expect("error")
        .contains("[audit]"));

    server.registry.install(stored(3));
    let r = server.get("/readyz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"status": "ready", "model_version": 3}));
    assert_eq!(server.get("/healthz").await.status, 200);
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn single_and_batch_scores_equal_the_model_scores() {
    let server = Server::start(Options::default()).await;
    let model = stored(7);
    let want = probe_scores(&model.model);
    let threshold = model.model.threshold().expect("threshold").threshold;
    server.registry.install(model);

    // One event, with a ts and meta: one score object, ts echoed, meta passed through.
    let mut one = event("one", PROBES[0], Some(1_767_225_600_123));
    one["meta"] = json!({"label": 1});
    let r = server.post("/v1/score", &one.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let mut v = r.json();
    // serde_json parses floats to within an ulp, not always bit-exactly: compare with a
    // tolerance far below any score difference that matters.
    assert_close(&v["score"], want[0]);
    assert_close(&v["threshold"], threshold);
    v["score"] = Value::Null;
    v["threshold"] = Value::Null;
    assert_eq!(
        v,
        json!({
            "id": "one",
            "ts": 1_767_225_600_123_i64,
            "score": null,
            "flagged": want[0] > threshold,
            "threshold": null,
            "certified": true,
            "model_version": 7,
            "threshold_version": 0,
            "status": "scored",
            "meta": {"label": 1},
        })
    );

    // A batch: dense with and without ts, sparse without dim (the model's is used) and with.
    let batch = json!([
        event("b0", PROBES[0], Some(5)),
        event("b1", PROBES[1], None),
        {"id": "b2", "ts": 6, "x": {"indices": [0, 1], "values": [PROBES[2][0], PROBES[2][1]]}},
        {"id": "b3", "x": {"indices": [0, 1], "values": [PROBES[3][0], PROBES[3][1]], "dim": 2}},
    ]);
    let r = server.post("/v1/score", &batch.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let out = r.json();
    let out = out.as_array().expect("an array for an array");
    assert_eq!(out.len(), 4);
    let mut flagged = 0;
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o["id"], format!("b{i}"), "same order");
        let score = o["score"].as_f64().expect("score");
        assert_close(&o["score"], want[i]);
        assert_eq!(o["flagged"], json!(want[i] > threshold), "{i}");
        assert_close(&o["threshold"], threshold);
        assert_eq!(o["model_version"], 7);
        assert_eq!(o["status"], "scored");
        assert_eq!(o["meta"], Value::Null);
        flagged += usize::from(score > threshold);
    }
    assert_eq!(flagged, 2, "the threshold splits the probes");
    assert_eq!(
        out.iter().map(|o| o["ts"].clone()).collect::<Vec<_>>(),
        vec![json!(5), Value::Null, json!(6), Value::Null]
    );

    // An empty batch is an empty answer.
    let r = server.post("/v1/score", "[]").await;
    assert_eq!((r.status, r.json()), (200, json!([])));

    // One latency observation per scored event (1 + 4).
    let text = server.get("/metrics").await.body;
    assert_eq!(
        sample(&text, "neyman_scoring_latency_seconds_count"),
        Some(5.0)
    );
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn bad_events_are_400_with_the_reason_and_the_index() {
    let server = Server::start(Options::default()).await;
    server.registry.install(stored(1));
    let cases: Vec<(String, &str, Option<usize>)> = vec![
        (
            json!({"ts": 1, "x": [1, 2]}).to_string(),
            "missing_id",
            None,
        ),
        (
            json!({"id": "a", "x": [1, 2, 3]}).to_string(),
            "dimension_mismatch",
            None,
        ),
        (
            json!({"id": "a", "x": {"indices": [2], "values": [1.0]}}).to_string(),
            "invalid_sparse",
            None,
        ),
        (
            json!({"id": "a", "ts": -4, "x": [1, 2]}).to_string(),
            "invalid_ts",
            None,
        ),
        (
            json!([event("ok", [1.0, 2.0], None), {"id": "b", "x": [1]}]).to_string(),
            "dimension_mismatch",
            Some(1),
        ),
        (
            json!([
                event("ok", [1.0, 2.0], None),
                event("ok2", [0.0, 1.0], None),
                7
            ])
            .to_string(),
            "invalid_json",
            Some(2),
        ),
        (
            json!([{"id": "m", "x": [1, 2], "meta": [1]}]).to_string(),
            "invalid_meta",
            Some(0),
        ),
    ];
    for (body, reason, index) in cases {
        let r = server.post("/v1/score", &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        let v = r.json();
        assert_eq!(v["reason"], reason, "{body}: {v}");
        assert_eq!(v["index"], json!(index), "{body}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
    let r = server
        .post("/v1/score", "[{\"id\":\"a\",\"x\":[1,2]},")
        .await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["reason"], "invalid_json");
    let error = v["error"].as_str().expect("message");
    assert!(
        error.starts_with("malformed JSON body:")
            && error.contains("EOF while parsing a value at line 1 column 22"),
        "{error}"
    );
    let r = server.post("/v1/score", "").await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap_or("").contains("empty"));
    let r = server.post("/v1/score", "\"an event\"").await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"],
        "the request body must be an event object or an array of event objects"
    );
    let r = request(server.addr, "POST", "/v1/score", &[], b"{\"id\":\"\xff\"}").await;
    assert_eq!(
        (r.status, r.json()["reason"].clone()),
        (400, json!("invalid_utf8"))
    );
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn body_and_batch_limits_answer_413() {
    let server = Server::start(Options {
        max_body_bytes: 1024,
        max_batch: 3,
        ..Options::default()
    })
    .await;
    server.registry.install(stored(1));
    let batch = |n: usize| {
        Value::Array(
            (0..n)
                .map(|i| event(&i.to_string(), [1.0, 0.0], None))
                .collect(),
        )
        .to_string()
    };
    let r = server.post("/v1/score", &batch(3)).await;
    assert_eq!(r.status, 200, "at the limit: {}", r.body);
    assert_eq!(r.json().as_array().map(Vec::len), Some(3));
    let r = server.post("/v1/score", &batch(4)).await;
    assert_eq!(r.status, 413);
    assert_eq!(
        r.json(),
        json!({"error": "4 events in one request, http.max_batch is 3"})
    );
    let mut big = event("big", [1.0, 0.0], None);
    big["meta"] = json!({"pad": "p".repeat(1100)});
    let r = server.post("/v1/score", &big.to_string()).await;
    assert_eq!(r.status, 413);
    assert_eq!(
        r.json(),
        json!({"error": "the request body is larger than http.max_body_bytes = 1024 bytes"})
    );
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn model_routes_describe_the_active_and_remembered_models() {
    let server = Server::start(Options::default()).await;
    server.registry.install(stored(4));
    server.registry.install(stored(6));
    let r = server.get("/v1/model").await;
    assert_eq!(r.status, 200);
    let threshold = stored(6).model.threshold().expect("threshold").threshold;
    let mut v = r.json();
    assert_close(&v["threshold"], threshold);
    v["threshold"] = json!("checked");
    assert_eq!(
        v,
        json!({
            "version": 6,
            "threshold_version": 0,
            "algorithm": "usmo",
            "n_features": 2,
            "trained_at": "2026-01-01T00:00:06.000Z",
            "trained_at_ms": 1_767_225_606_000_i64,
            "window_sizes": {"positive": 2, "unlabeled": 3, "negative": 0},
            "threshold": "checked",
            "certified": true,
            "tau": 0.1,
            "delta": 0.05,
            "threshold_method": "umbrella",
            "fpr_bound": 0.08,
            "fpr_estimate": 0.05,
            "tpr_estimate": 0.9,
            "calibration_size": 120,
        })
    );
    let r = server.get("/v1/models").await;
    assert_eq!(r.status, 200);
    let models = r.json()["models"].clone();
    assert_eq!(
        models
            .as_array()
            .expect("array")
            .iter()
            .map(|m| (m["version"].clone(), m["active"].clone()))
            .collect::<Vec<_>>(),
        vec![(json!(6), json!(true)), (json!(4), json!(false))]
    );
    let mut older = models[1].clone();
    assert_close(&older["threshold"], threshold);
    older["threshold"] = json!("checked");
    assert_eq!(
        older,
        json!({
            "version": 4,
            "threshold_version": 0,
            "algorithm": "usmo",
            "trained_at": "2026-01-01T00:00:04.000Z",
            "trained_at_ms": 1_767_225_604_000_i64,
            "threshold": "checked",
            "fpr_bound": 0.08,
            "active": false,
        })
    );
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn rollback_without_a_configured_token_is_403() {
    let server = Server::start(Options::default()).await;
    server.registry.install(stored(1));
    server.registry.install(stored(2));
    let r = request(
        server.addr,
        "POST",
        "/v1/model/rollback",
        &[("Authorization", "Bearer anything")],
        b"",
    )
    .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json(),
        json!({"error": "admin API disabled: set http.admin_token_file or http.admin_token_env"})
    );
    assert_eq!(server.registry.active().map(|m| m.meta.version), Some(2));
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn posted_events_need_the_admin_token_and_a_running_intake() {
    let event = br#"{"id":"a","ts":1,"x":[1.0,2.0]}"#;
    let open = Server::start(Options::default()).await;
    let r = request(
        open.addr,
        "POST",
        "/v1/events/negative",
        &[("Authorization", "Bearer anything")],
        event,
    )
    .await;
    assert_eq!(r.status, 403, "no token configured, no posting: {}", r.body);
    open.stop().await.expect("clean shutdown");

    // This server's intake queue has no engine behind it: the answer says so, and nothing is
    // taken silently.
    let server = Server::start(Options {
        admin_token: Some("events-token"),
        ..Options::default()
    })
    .await;
    let post = |path: &'static str, auth: &'static str, body: &'static [u8]| {
        let addr = server.addr;
        async move { request(addr, "POST", path, &[("Authorization", auth)], body).await }
    };
    let r = post("/v1/events/negative", "Bearer wrong", event).await;
    assert_eq!(r.status, 401);
    let r = post("/v1/events/labelled", "Bearer events-token", event).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = post("/v1/events/negative", "Bearer events-token", b"42").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["reason"], "invalid_json");
    let r = post("/v1/events/negative", "Bearer events-token", event).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.json()["error"]
            .as_str()
            .is_some_and(|e| e.contains("intake has ended")),
        "{}",
        r.body
    );
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn rollback_needs_the_token_and_retires_the_file() {
    const TOKEN: &str = "s3cret-admin-token";
    let dir = tempfile::tempdir().expect("temp dir");
    let store = ModelStore::open(dir.path(), 5).expect("store");
    for v in 1..=2 {
        store.save(&stored(v)).expect("save");
    }
    let server = Server::start(Options {
        admin_token: Some(TOKEN),
        store: Some(store.clone()),
        ..Options::default()
    })
    .await;
    let rollback = |auth: Option<&'static str>| {
        let addr = server.addr;
        async move {
            let headers: Vec<(&str, &str)> =
                auth.map(|a| vec![("Authorization", a)]).unwrap_or_default();
            request(addr, "POST", "/v1/model/rollback", &headers, b"").await
        }
    };
    // Nothing installed: nothing to roll back to.
    let r = rollback(Some("Bearer s3cret-admin-token")).await;
    assert_eq!(r.status, 409, "{}", r.body);
    server.registry.install(stored(1));
    server.registry.install(stored(2));

    let r = rollback(None).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert!(r.json()["error"]
        .as_str()
        .unwrap_or("")
        .contains("missing bearer token"));
    for wrong in [
        "Bearer s3cret-admin-tokem",
        "Bearer s3cret",
        "Basic czNjcmV0",
    ] {
        let r = rollback(Some(wrong)).await;
        assert_eq!(r.status, 401, "{wrong}");
        assert!(
            r.header("www-authenticate")
                .is_some_and(|h| h.starts_with("Bearer")),
            "{wrong}"
        );
        assert!(!r.body.contains(TOKEN), "the token is never echoed");
    }
    assert_eq!(server.registry.active().map(|m| m.meta.version), Some(2));

    let r = rollback(Some("bearer s3cret-admin-token")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json(), json!({"retired": 2, "active": 1}));
    assert_eq!(server.registry.active().map(|m| m.meta.version), Some(1));
    assert_eq!(store.versions().expect("versions"), vec![1]);
    assert!(dir
        .path()
        .join("models")
        .join(format!("model-{:020}.nmd.retired", 2))
        .exists());
    assert_eq!(server.get("/v1/model").await.json()["version"], 1);
    let text = server.get("/metrics").await.body;
    assert_eq!(sample(&text, "neyman_model_rollbacks_total"), Some(1.0));
    assert_eq!(sample(&text, "neyman_model_version"), Some(1.0));
    assert_eq!(sample(&text, "neyman_fpr_bound"), Some(0.08));
    assert_eq!(sample(&text, "neyman_target_fpr"), Some(0.1));
    assert_eq!(
        sample(&text, "neyman_model_trained_at_seconds"),
        Some(1_767_225_601.0)
    );

    let r = rollback(Some("Bearer s3cret-admin-token")).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json(),
        json!({"error": "model 1 is the only one kept; there is nothing to roll back to", "active": 1})
    );
    let r = server.get("/v1/model/rollback").await;
    assert_eq!(r.status, 405);
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn metrics_pass_promtool_and_count_requests_by_route_template() {
    let server = Server::start(Options::default()).await;
    assert_eq!(server.post("/v1/score", "{}").await.status, 503);
    server.registry.install(stored(1));
    let ok = event("a", [1.0, 0.0], None).to_string();
    assert_eq!(server.post("/v1/score", &ok).await.status, 200);
    assert_eq!(server.post("/v1/score", &ok).await.status, 200);
    let r = server.get("/v1/nope/123").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json(), json!({"error": "no route GET /v1/nope/123"}));
    let r = server.get("/v1/score").await;
    assert_eq!(r.status, 405);
    assert_eq!(
        r.json(),
        json!({"error": "GET is not allowed on /v1/score"})
    );
    assert_eq!(r.header("allow"), Some("POST"));
    assert_eq!(server.get("/metrics").await.status, 200);

    let r = server.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain; version=0.0.4"));
    let text = r.body;
    let count = |route: &str, status: u16| {
        sample(
            &text,
            &format!("neyman_http_requests_total{{route=\"{route}\",status=\"{status}\"}}"),
        )
    };
    assert_eq!(count("/v1/score", 503), Some(1.0));
    assert_eq!(count("/v1/score", 200), Some(2.0));
    assert_eq!(count("/v1/score", 405), Some(1.0));
    assert_eq!(count("other", 404), Some(1.0));
    // This scrape is counted after it is encoded: only the earlier one shows.
    assert_eq!(count("/metrics", 200), Some(1.0));
    assert!(!text.contains("/v1/nope"), "raw paths never become labels");

    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool not found: run scripts/test.sh, which installs Debian `prometheus`");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write exposition");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool check metrics exit {:?}:\n{}{}\n--- exposition ---\n{text}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    server.stop().await.expect("clean shutdown");
}

#[tokio::test]
async fn shutdown_stops_the_server_cleanly() {
    let server = Server::start(Options::default()).await;
    let addr = server.addr;
    assert_eq!(server.get("/healthz").await.status, 200);
    server
        .stop()
        .await
        .expect("serve returns Ok after shutdown");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn the_router_answers_without_a_socket() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let prometheus = prometheus::Registry::new();
    let state = AppState {
        audit: None,
        registry: Arc::new(Registry::new(2)),
        store: None,
        metrics: Metrics::new(&prometheus).expect("metrics"),
        prometheus,
        admin_token: Some(Secret::new("zq9-admin-secret")),
        limits: HttpLimits {
            max_body_bytes: 1024,
            max_batch: 4,
            event: EventLimits::default(),
            connections: ConnectionLimits::default(),
        },
        events: EventsTarget::Engine(event_feed().0),
    };
    let debug = format!("{state:?}");
    assert!(
        !debug.contains("zq9") && debug.contains("<redacted>"),
        "the token never shows in Debug"
    );
    let response = serve::router(state)
        .oneshot(
            axum::http::Request::put("/healthz")
                .body(axum::body::Body::empty())
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(response.status(), 405);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(
        serde_json::from_slice::<Value>(&body).expect("JSON"),
        json!({"error": "PUT is not allowed on /healthz"})
    );
}

/// Issue 21 item 4: idle and half-open connections cannot lock the API out. With a cap of 8
/// connections, 200 connections that send nothing are each accepted in turn and the oldest idle
/// one closed for it; `/healthz` is still answered, the closed ones read end-of-file, and an
/// idle connection left alone is closed after `header_timeout`.
#[tokio::test]
async fn idle_connections_cannot_lock_out_the_api() {
    let server = Server::start(Options {
        connections: ConnectionLimits {
            max_connections: 8,
            header_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
            max_concurrent_requests: 4,
        },
        ..Options::default()
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    let health = tokio::time::timeout(Duration::from_secs(30), server.get("/healthz"))
        .await
        .expect("healthz answered while 200 idle connections were opened");
    assert_eq!(health.status, 200);
    // Guard timeouts only: a connection the server closed reads end-of-file at once.
    for (i, stream) in idle.iter_mut().enumerate() {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut byte))
            .await
            .unwrap_or_else(|_| panic!("idle connection {i} still open after 30 s"));
        assert!(matches!(read, Ok(0) | Err(_)), "connection {i}: {read:?}");
    }
    server.stop().await.expect("clean stop");
}

/// An upload that stalls is answered 408 after `request_timeout` and its connection closed, so
/// the body read so far is freed (issue 21: 100 uploads stalled under 4 MiB held 477 MB).
#[tokio::test]
async fn a_stalled_upload_times_out_with_408() {
    let server = Server::start(Options {
        connections: ConnectionLimits {
            request_timeout: Duration::from_secs(1),
            ..ConnectionLimits::default()
        },
        ..Options::default()
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let head = format!(
        "POST /v1/score HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n[{{\"id\":",
        server.addr
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw))
        .await
        .expect("the server answered and closed within 30 s")
        .expect("read");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    server.stop().await.expect("clean stop");
}
