//! `neyman run` as a service: the HTTP API answers while and after the stream is replayed,
//! `/metrics` passes promtool, and SIGTERM ends the process with exit 0 and nothing lost.

mod common;

use std::io::Write;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::broker::free_port;
use common::http::http;
use common::streams::bundled;
use neyman::stream::record::RecordWriter;
use neyman::stream::Channel;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_neyman");
#[test]
fn run_serves_http_and_stops_cleanly_on_sigterm() {
    let records = bundled(2500);
    let (mut child, port, dir) = start_run("");

    // Ready once a model is active (generous: a slow machine only waits longer).
    let started = Instant::now();
    loop {
        if let Ok((200, _)) = http(port, "GET", "/readyz", "") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "not ready: {}",
            std::fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default()
        );
        assert!(child.try_wait().expect("status").is_none(), "exited early");
        std::thread::sleep(Duration::from_millis(100));
    }

    let event = records
        .iter()
        .find(|r| r.channel == Channel::Unlabeled)
        .map(|r| String::from_utf8(r.payload.clone()).expect("utf-8"))
        .expect("an unlabeled event");
    let (status, body) = http(port, "POST", "/v1/score", &event).expect("score");
    assert_eq!(status, 200, "{body}");
    let score: Value = serde_json::from_str(&body).expect("json");
    assert!(score["model_version"].as_u64().expect("version") >= 1);
    assert_eq!(score["status"], "scored");

    let (status, body) = http(port, "GET", "/v1/model", "").expect("model");
    assert_eq!(status, 200);
    let model: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(model["algorithm"], "usmo");
    assert_eq!(model["n_features"], 57);
    assert!(model["fpr_bound"].as_f64().expect("bound") <= 0.05);

    // Wait for the end of the stream (the service keeps serving), then check the metrics.
    let started = Instant::now();
    while !std::fs::read_to_string(dir.path().join("stderr.log"))
        .unwrap_or_default()
        .contains("end of the recorded stream")
    {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "stream never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, metrics) = http(port, "GET", "/metrics", "").expect("metrics");
    assert_eq!(status, 200);
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (installed by scripts/test.sh)");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(metrics.as_bytes())
        .expect("write");
    let linted = promtool.wait_with_output().expect("promtool");
    assert!(
        linted.status.success(),
        "{}{}",
        String::from_utf8_lossy(&linted.stdout),
        String::from_utf8_lossy(&linted.stderr)
    );
    let value = |line_start: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{line_start} missing in\n{metrics}"))
    };
    assert!(value("neyman_retrains_total{result=\"swapped\"}") >= 1.0);
    assert!(value("neyman_model_version ") >= 1.0);
    assert_eq!(value("neyman_target_fpr "), 0.05);
    assert!(value("neyman_http_requests_total{route=\"/v1/score\",status=\"200\"}") >= 1.0);

    // SIGTERM: exit 0, and every unlabeled input is in the score file.
    terminate(&mut child);
    let unlabeled = records
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .count();
    let scored = std::fs::read_to_string(dir.path().join("scores.jsonl"))
        .expect("scores")
        .lines()
        .count();
    assert_eq!(scored, unlabeled);
}

#[test]
fn sigterm_mid_stream_loses_no_event_that_was_read() {
    let dir = tempfile::tempdir().expect("dir");
    let records = bundled(3000);
    let stream = dir.path().join("stream.jsonl");
    let mut w = RecordWriter::create(&stream).expect("create");
    for r in &records {
        w.write(r).expect("write");
    }
    w.finish().expect("finish");
    let config = dir.path().join("neyman.toml");
    std::fs::write(
        &config,
        r#"
[source]
path = "stream.jsonl"
[output]
scores = "scores.jsonl"
dlq = "dlq.jsonl"
[state]
dir = "state"
[http]
listen = "127.0.0.1:0"
[model]
algorithm = "usmo"
prior = 0.38
prior_min = 0.33
prior_max = 0.43
tau = 0.05
"#,
    )
    .expect("config");
    let log = dir.path().join("stderr.log");
    // x20: the 3000 events span about 150 s of event time, so 7 s of wall time.
    let mut child = Command::new(BIN)
        .args(["replay", "stream.jsonl", "--speed", "x20", "--config"])
        .arg(&config)
        .current_dir(dir.path())
        .env("RUST_LOG", "neyman=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start neyman replay");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill")
        .success());
    let status = child.wait().expect("exit");
    let stderr = std::fs::read_to_string(&log).expect("log");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let handled: usize = stderr
        .lines()
        .find_map(|l| {
            l.contains("end of the recorded stream")
                .then(|| l.split("events=").nth(1))
                .flatten()
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or_else(|| panic!("no end-of-stream line in {stderr}"));
    assert!(handled < records.len(), "stopped mid-stream: {handled}");
    let unlabeled_read = records[..handled]
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .count();
    let outputs: Vec<Value> = std::fs::read_to_string(dir.path().join("scores.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(outputs.len(), unlabeled_read, "scored + unscored = read");
}

#[test]
fn swaps_under_http_load_never_mix_models_or_lose_outputs() {
    let dir = tempfile::tempdir().expect("dir");
    let records = bundled(usize::MAX);
    let stream = dir.path().join("stream.jsonl");
    let mut w = RecordWriter::create(&stream).expect("create");
    for r in &records {
        w.write(r).expect("write");
    }
    w.finish().expect("finish");
    let port = free_port();
    std::fs::write(
        dir.path().join("neyman.toml"),
        format!(
            r#"
[source]
path = "stream.jsonl"
[output]
scores = "scores.jsonl"
dlq = "dlq.jsonl"
[state]
dir = "state"
keep_models = 50
[retrain]
min_negative = 100
every_events = 400
[http]
listen = "127.0.0.1:{port}"
[model]
algorithm = "usmo"
prior = 0.38
prior_min = 0.33
prior_max = 0.43
tau = 0.05
"#
        ),
    )
    .expect("config");
    // x40: the stream spans ~230 s of event time, so ~6 s of retrains under load.
    let mut child = Command::new(BIN)
        .args([
            "replay",
            "stream.jsonl",
            "--speed",
            "x40",
            "--config",
            "neyman.toml",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start");
    let event = records
        .iter()
        .find(|r| r.channel == Channel::Unlabeled)
        .map(|r| String::from_utf8(r.payload.clone()).expect("utf-8"))
        .expect("an unlabeled event");
    let batch = format!("[{event},{event},{event},{event}]");
    let mut versions = Vec::new();
    let started = Instant::now();
    while child.try_wait().expect("status").is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "replay never ended"
        );
        let Ok((status, body)) = http(port, "POST", "/v1/score", &batch) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        if status == 503 {
            continue;
        }
        if status == 0 {
            // No reply at all: only the daemon's exit at the end of the replay may close a
            // connection unanswered, so it must be gone (or going) now.
            let closed_at = Instant::now();
            while child.try_wait().expect("status").is_none() {
                assert!(
                    closed_at.elapsed() < Duration::from_secs(10),
                    "a connection was closed without a reply while the daemon kept running"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            break;
        }
        assert_eq!(status, 200, "{body}");
        let scores: Vec<Value> = serde_json::from_str(&body).expect("json array");
        let v = scores[0]["model_version"].as_u64().expect("version");
        // One batch, one model: every score of the batch has the same version and value.
        assert!(scores
            .iter()
            .all(|s| s["model_version"] == v && s["score"] == scores[0]["score"]));
        versions.push(v);
    }
    assert_eq!(child.wait().expect("exit").code(), Some(0));
    assert!(
        versions.len() > 10,
        "too few requests landed: {}",
        versions.len()
    );
    assert!(
        versions.windows(2).all(|w| w[0] <= w[1]),
        "versions went back: {versions:?}"
    );
    let distinct: std::collections::BTreeSet<u64> = versions.iter().copied().collect();
    assert!(
        distinct.len() >= 2,
        "a swap happened under load: {distinct:?}"
    );
    // Every version a response carried was a stored (accepted) model.
    for v in &distinct {
        assert!(
            dir.path()
                .join(format!("state/models/model-{v:020}.nmd"))
                .exists(),
            "version {v} was never accepted"
        );
    }
    // No output lost on the stream side either.
    let unlabeled = records
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .count();
    let lines = std::fs::read_to_string(dir.path().join("scores.jsonl"))
        .expect("scores")
        .lines()
        .count();
    assert_eq!(lines, unlabeled);
}

#[test]
fn an_http_source_learns_from_posted_events_scores_them_and_dead_letters_the_bad_ones() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("neyman.toml");
    std::fs::write(
        &config,
        r#"
[source]
kind = "http"
[output]
scores = "scores.jsonl"
dlq = "dlq.jsonl"
[http]
admin_token_env = "EVENTS_TOKEN"
[retrain]
min_negative = 100
[model]
algorithm = "usmo"
prior = 0.38
prior_min = 0.33
prior_max = 0.43
tau = 0.05
seed = 1
"#,
    )
    .expect("config");
    let token = "posted-events-token";
    let mut daemon = common::daemon::Daemon::start_config(
        &config,
        &dir.path().join("state"),
        &[("EVENTS_TOKEN", token)],
    );
    let port = daemon.port;
    daemon.wait_for("the HTTP API", |m| m.contains("neyman_build_info"));

    // Refused without the token, with a wrong one, on an unknown channel, a malformed body.
    let event = r#"{"id":"a","ts":1,"x":[1,2,3]}"#;
    let post = |path: &str, token: Option<&str>, body: &str| {
        common::http::http_as(port, "POST", path, token, body).expect("post")
    };
    assert_eq!(post("/v1/events/unlabeled", None, event).0, 401);
    assert_eq!(post("/v1/events/unlabeled", Some("wrong"), event).0, 401);
    let (status, body) = post("/v1/events/spam", Some(token), event);
    assert_eq!(status, 404);
    assert!(body.contains("unknown channel"), "{body}");
    let (status, body) = post("/v1/events/unlabeled", Some(token), "[{\"id\":");
    assert_eq!(status, 400);
    assert!(body.contains("invalid_json"), "{body}");

    let records = bundled(2500);
    let posted = common::http::post_events(port, token, &records);
    assert_eq!(posted, records.len());
    daemon.wait_for("a model trained on the posted events", |m| {
        m.contains("\nneyman_model_info{")
    });
    // Now the dimension is locked at the stream's: a 3-feature event is a dead letter with
    // its reason in the answer, and a good one is taken in the same request.
    let good = String::from_utf8(
        records
            .iter()
            .find(|r| r.channel == Channel::Unlabeled)
            .expect("unlabeled")
            .payload
            .clone(),
    )
    .expect("utf-8")
    .replacen("\"id\":\"", "\"id\":\"again-", 1);
    let (status, body) = post(
        "/v1/events/unlabeled",
        Some(token),
        &format!("[{good},{event}]"),
    );
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["accepted"], 1, "{answer}");
    assert_eq!(answer["dead_letters"][0]["index"], 1, "{answer}");
    assert_eq!(
        answer["dead_letters"][0]["reason"], "dimension_mismatch",
        "{answer}"
    );

    let (status, log) = daemon.terminate();
    assert!(status.success(), "{log}");
    let unlabeled = records
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .count();
    // Every posted unlabeled event is answered once in the scores file (the last one too).
    let scores = std::fs::read_to_string(dir.path().join("scores.jsonl")).expect("scores");
    assert_eq!(scores.lines().count(), unlabeled + 1);
    let scored = scores
        .lines()
        .filter(|l| l.contains("\"status\":\"scored\""))
        .count();
    assert!(scored > unlabeled / 2, "{scored} of {unlabeled} scored");
    let dlq = std::fs::read_to_string(dir.path().join("dlq.jsonl")).expect("dlq");
    assert_eq!(dlq.lines().count(), 1, "{dlq}");
    assert!(dlq.contains("dimension_mismatch"), "{dlq}");
    assert!(
        log.contains(&format!("{} events:", posted + 2)),
        "the summary counts every posted event: {log}"
    );
}

/// Starts `neyman run` (USMO, τ = 0.05) on the first 2500 bundled records, with `extra`
/// appended to its configuration; returns the child, its port and its directory.
fn start_run(extra: &str) -> (std::process::Child, u16, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("dir");
    let mut w = RecordWriter::create(&dir.path().join("stream.jsonl")).expect("create");
    for r in &bundled(2500) {
        w.write(r).expect("write");
    }
    w.finish().expect("finish");
    let port = free_port();
    let config = dir.path().join("neyman.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[source]
path = "stream.jsonl"
[output]
scores = "scores.jsonl"
dlq = "dlq.jsonl"
[state]
dir = "state"
[retrain]
min_negative = 100
[http]
listen = "127.0.0.1:{port}"
[model]
algorithm = "usmo"
prior = 0.38
prior_min = 0.33
prior_max = 0.43
tau = 0.05
seed = 1
{extra}
"#
        ),
    )
    .expect("config");
    (spawn_run(dir.path()), port, dir)
}

/// `neyman run --config DIR/neyman.toml`, its stderr appended to `DIR/stderr.log`.
fn spawn_run(dir: &std::path::Path) -> std::process::Child {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("stderr.log"))
        .expect("log");
    Command::new(BIN)
        .args(["run", "--config"])
        .arg(dir.join("neyman.toml"))
        .env("RUST_LOG", "neyman=info")
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start neyman run")
}

/// GET /v1/audit until it answers 200 (503 meanwhile), while `child` runs.
fn wait_for_audit(port: u16, child: &mut std::process::Child, dir: &std::path::Path) -> Value {
    let started = Instant::now();
    loop {
        match http(port, "GET", "/v1/audit", "") {
            Ok((200, body)) => return serde_json::from_str(&body).expect("json"),
            Ok((503, body)) => assert!(body.contains("no audit has finished yet"), "{body}"),
            _ => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(400),
            "no audit: {}",
            std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default()
        );
        assert!(child.try_wait().expect("status").is_none(), "exited early");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGTERM, then exit 0 within a minute.
fn terminate(child: &mut std::process::Child) {
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("status") {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}

/// `[audit]`: once the first model is active, a stratified sample of the windows is certified
/// off the scoring path; GET /v1/audit and the gauges give the optimum's certified gap and the
/// active model's, which can only be larger (its labellings are starts of the search).
#[test]
fn an_audit_certifies_a_sample_of_the_windows_and_measures_the_active_model() {
    let (mut child, port, dir) = start_run(
        "[audit]\nevery = \"1000d\"\nmax_rows = 40\ntime_limit = \"2m\"\nkernel = \"linear\"\ncl = 1.0\n",
    );
    let report = wait_for_audit(port, &mut child, dir.path());
    let f = |key: &str| {
        report[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {report}"))
    };
    assert_eq!(report["number"], 1);
    assert!(
        ["optimal", "time_limit"].contains(&report["status"].as_str().expect("status")),
        "{report}"
    );
    assert_eq!(f("rows"), 40.0);
    assert_eq!(f("positives") + f("negatives") + f("unlabeled"), 40.0);
    assert!(f("unlabeled") >= 1.0 && f("positives") >= 1.0, "{report}");
    assert!((f("rho") - f("unlabeled") * (2.0 * 0.38 - 1.0)).abs() < 1e-9);
    let (objective, lower) = (f("objective"), f("lower_bound"));
    assert!(lower <= objective * (1.0 + 1e-9), "{report}");
    assert!((f("gap") - (objective - lower) / objective).abs() < 1e-9);
    if report["status"] == "optimal" {
        assert!(f("gap") <= 1e-3 + 1e-12, "{report}");
    }
    assert!(report["model_version"].as_u64().expect("model") >= 1);
    assert_eq!(report["model_feasible"], true, "{report}");
    assert!(f("model_objective") >= objective * (1.0 - 1e-9), "{report}");
    assert!(f("model_gap") >= f("gap") - 1e-9, "{report}");
    assert!(
        f("model_ranked_objective") >= objective * (1.0 - 1e-9),
        "{report}"
    );
    for key in [
        "agreement",
        "model_positive_share",
        "optimum_positive_share",
    ] {
        assert!((0.0..=1.0).contains(&f(key)), "{key}: {report}");
    }

    let (status, metrics) = http(port, "GET", "/metrics", "").expect("metrics");
    assert_eq!(status, 200);
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(value("neyman_audit_gap "), f("gap"));
    assert_eq!(value("neyman_audit_model_gap "), f("model_gap"));
    assert_eq!(value("neyman_audit_seconds "), f("seconds"));
    let status = report["status"].as_str().expect("status");
    assert_eq!(
        value(&format!("neyman_audits_total{{status=\"{status}\"}}")),
        1.0
    );
    terminate(&mut child);
    let log = std::fs::read_to_string(dir.path().join("stderr.log")).expect("log");
    assert!(log.contains("audit finished"), "{log}");

    // Resumed, the model is active at the first event; the audit waits for a full sample.
    let mut child = spawn_run(dir.path());
    let report = wait_for_audit(port, &mut child, dir.path());
    assert_eq!(report["rows"], 40, "{report}");
    terminate(&mut child);
}

/// A shutdown does not wait for an audit: the search is cancelled and the process exits 0
/// with every read event answered.
#[test]
fn a_shutdown_does_not_wait_for_a_running_audit() {
    let (mut child, port, dir) = start_run(
        "[audit]\nevery = \"1000d\"\nmax_rows = 400\ntime_limit = \"1h\"\nkernel = \"rbf\"\ngap = 0.0\n",
    );
    let log = dir.path().join("stderr.log");
    let started = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("end of the recorded stream")
    {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "stream never ended"
        );
        assert!(child.try_wait().expect("status").is_none(), "exited early");
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("audit started"), "{text}");
    let (status, body) = http(port, "GET", "/v1/audit", "").expect("audit");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"running\":1"), "{body}");
    terminate(&mut child);
    let scored = std::fs::read_to_string(dir.path().join("scores.jsonl"))
        .expect("scores")
        .lines()
        .count();
    let unlabeled = bundled(2500)
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .count();
    assert_eq!(scored, unlabeled);
}
