//! The README's examples are files (`examples/`, `scripts/dev-broker.sh`) that these tests run
//! exactly as the README invokes them, so the two cannot drift: `examples/score.sh` on the
//! daemon of the README's first command (`run --config config/neyman.toml`), and the Kafka
//! quickstart — `scripts/dev-broker.sh`, `run --config config/kafka.toml`, `replay --to-kafka`
//! and `examples/kafka_read_scores.py` (with `NEYMAN_PYTHON`, a Python with confluent-kafka,
//! as in tests/kafka_interop.rs); `examples/post_events.py` on the HTTP-only daemon of
//! `config/http.toml`; and `examples/audit.sh` on the first command's daemon with an audit.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::broker::Broker;
use common::daemon::{Daemon, BIN, DEADLINE};
use common::http::sample;
use common::streams::bundled;
use neyman::stream::Channel;
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The README's text.
fn readme() -> String {
    std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README.md")
}

/// Every `examples/…` and `scripts/…` path the README names exists, every file in `examples/`
/// is named by the README, and each is run by a test in this file.
#[test]
fn the_readme_names_every_example_file_and_each_is_run_here() {
    let readme = readme();
    let named: BTreeSet<String> = readme
        .split(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c)))
        .filter(|w| w.starts_with("examples/") || w.starts_with("scripts/"))
        .map(|w| w.trim_end_matches('.').to_string())
        .collect();
    for path in &named {
        // `examples/` names the directory, `examples/score.sh` a file.
        let exists = match path.strip_suffix('/') {
            Some(dir) => Path::new(ROOT).join(dir).is_dir(),
            None => Path::new(ROOT).join(path).is_file(),
        };
        assert!(exists, "README names {path}, which does not exist");
    }
    let this = std::fs::read_to_string(Path::new(ROOT).join("tests/examples.rs")).expect("self");
    for entry in std::fs::read_dir(Path::new(ROOT).join("examples")).expect("examples/") {
        let name = format!(
            "examples/{}",
            entry.expect("entry").file_name().to_string_lossy()
        );
        assert!(named.contains(&name), "README does not show {name}");
        assert!(
            this.contains(&format!("\"{name}\"")),
            "no test here runs {name}"
        );
    }
}

fn python() -> String {
    std::env::var("NEYMAN_PYTHON").unwrap_or_else(|_| {
        panic!(
            "NEYMAN_PYTHON is not set: this test needs a Python with confluent-kafka. Run \
             scripts/test.sh (it installs one in ~/.cache/neyman-venv and exports NEYMAN_PYTHON)"
        )
    })
}

/// Runs `program args` in the repository root; (exit status, stdout, stderr).
fn run(program: &str, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let out = Command::new(program)
        .args(args)
        .current_dir(ROOT)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// README, *Score over HTTP*: `bash examples/score.sh` while the first command's daemon runs
/// (and *HTTP API*'s `bash examples/score_batch.sh`).
/// The script's event has the bundled stream's 57 features, so the daemon (locked at 57)
/// scores it with its active model.
#[test]
fn score_sh_scores_an_event_on_the_daemon_of_the_first_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scores = dir.path().join("scores.jsonl");
    let dlq = dir.path().join("dlq.jsonl");
    let mut daemon = Daemon::start_config(
        &Path::new(ROOT).join("config/neyman.toml"),
        &dir.path().join("state"),
        &[
            ("NEYMAN_OUTPUT_SCORES", scores.to_str().expect("utf-8")),
            ("NEYMAN_OUTPUT_DLQ", dlq.to_str().expect("utf-8")),
        ],
    );
    daemon.wait_for("a first model", |m| {
        sample(m, "neyman_model_version").is_some_and(|v| v >= 1.0)
    });
    let url = format!("http://127.0.0.1:{}", daemon.port);
    let (status, out, err) = run("bash", &["examples/score.sh", &url]);
    assert!(status.success(), "{status}\n{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    let score: Value = serde_json::from_str(lines[0]).expect("score JSON");
    assert_eq!(score["id"], "629-0", "{score}");
    assert!(
        score["score"].as_f64().is_some_and(f64::is_finite),
        "{score}"
    );
    assert!(score["flagged"].is_boolean(), "{score}");
    assert_eq!(score["certified"], true, "{score}");
    assert!(score["model_version"].as_u64().is_some_and(|v| v >= 1));
    let model: Value = serde_json::from_str(lines[1]).expect("model JSON");
    assert_eq!(model["algorithm"], "usmo", "{model}");
    assert!(
        lines[2..]
            .iter()
            .any(|l| l.starts_with("neyman_model_version ")),
        "{out}"
    );

    // README, *HTTP API*: a batch, answered in order by one model.
    let (status, out, err) = run("bash", &["examples/score_batch.sh", &url]);
    assert!(status.success(), "{status}\n{out}\n{err}");
    let batch: Value = serde_json::from_str(out.trim()).expect("batch JSON");
    let batch = batch.as_array().expect("array");
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[0]["id"], "4339-0");
    assert_eq!(batch[1]["id"], "629-0");
    assert_eq!(batch[0]["model_version"], batch[1]["model_version"]);
    assert_eq!(batch[1]["status"], "scored");
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{status}\n{log}");
}

/// README, *Feedback without Kafka*: `python3 examples/post_events.py` on the daemon of
/// `run --config config/http.toml`, which learns from the posted events alone.
/// README, *Auditing the active model*: the first command's daemon with
/// `NEYMAN_AUDIT_MAX_ROWS=60 NEYMAN_AUDIT_TIME_LIMIT=30s`, then `bash examples/audit.sh`.
#[test]
fn audit_sh_shows_the_first_audit_of_the_first_commands_daemon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scores = dir.path().join("scores.jsonl");
    let dlq = dir.path().join("dlq.jsonl");
    let daemon = Daemon::start_config(
        &Path::new(ROOT).join("config/neyman.toml"),
        &dir.path().join("state"),
        &[
            ("NEYMAN_OUTPUT_SCORES", scores.to_str().expect("utf-8")),
            ("NEYMAN_OUTPUT_DLQ", dlq.to_str().expect("utf-8")),
            ("NEYMAN_AUDIT_MAX_ROWS", "60"),
            ("NEYMAN_AUDIT_TIME_LIMIT", "30s"),
        ],
    );
    let url = format!("http://127.0.0.1:{}", daemon.port);
    let (status, out, err) = run("bash", &["examples/audit.sh", &url]);
    assert!(status.success(), "{status}\n{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    let report: Value = serde_json::from_str(lines[0]).expect("report JSON");
    assert_eq!(report["number"], 1, "{report}");
    assert_eq!(report["rows"], 60, "{report}");
    assert!(
        report["gap"]
            .as_f64()
            .is_some_and(|g| (0.0..1.0).contains(&g)),
        "{report}"
    );
    assert!(
        report["model_gap"]
            .as_f64()
            .is_some_and(|g| g >= report["gap"].as_f64().unwrap_or(1.0) - 1e-9),
        "{report}"
    );
    assert!(
        lines[1..]
            .iter()
            .any(|l| l.starts_with("neyman_audit_gap ")),
        "{out}"
    );
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{status}\n{log}");
}

#[test]
fn post_events_py_feeds_the_http_only_daemon_until_it_has_a_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scores = dir.path().join("scores.jsonl");
    let dlq = dir.path().join("dlq.jsonl");
    let token = "change-me";
    let daemon = Daemon::start_config(
        &Path::new(ROOT).join("config/http.toml"),
        &dir.path().join("state"),
        &[
            ("NEYMAN_OUTPUT_SCORES", scores.to_str().expect("utf-8")),
            ("NEYMAN_OUTPUT_DLQ", dlq.to_str().expect("utf-8")),
            ("ADMIN_TOKEN", token),
        ],
    );
    let url = format!("http://127.0.0.1:{}", daemon.port);
    let started = Instant::now();
    while common::http::http(daemon.port, "GET", "/healthz", "").is_err() {
        assert!(started.elapsed() < DEADLINE, "{}", daemon.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = Command::new("python3")
        .args(["examples/post_events.py", &url])
        .env("ADMIN_TOKEN", token)
        .current_dir(ROOT)
        .output()
        .expect("python3");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let (mut posted, mut unlabeled) = (0, 0);
    for line in &lines[..lines.len() - 1] {
        // channel, events, accepted, dead-lettered
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields.len(), 4, "{line}");
        assert_eq!(fields[1], fields[2], "every event accepted: {line}");
        assert_eq!(fields[3], "0", "{line}");
        let n: usize = fields[1].parse().expect("count");
        posted += n;
        if fields[0] == "unlabeled" {
            unlabeled += n;
        }
    }
    assert_eq!(posted, 3000);
    let model: Value = serde_json::from_str(lines[lines.len() - 1]).expect("model JSON");
    assert_eq!(model["algorithm"], "usmo", "{model}");
    assert_eq!(model["n_features"], 57, "{model}");
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{status}\n{log}");
    // Every posted unlabeled event is answered in the scores file.
    let written = std::fs::read_to_string(&scores).expect("scores");
    assert_eq!(written.lines().count(), unlabeled, "{log}");
}

/// README, *Kafka*: the quickstart's four steps as written, on the broker of
/// `scripts/dev-broker.sh` (on a free port instead of 9092). The reader prints one line per
/// unlabeled event of the bundled stream — its id, the headers, the score — and exits by
/// itself at the end of the topic; piped into `head` it ends quietly.
#[test]
fn the_kafka_quickstart_runs_as_written() {
    let python = python();
    let broker = Broker::start_dev_script();
    let bootstrap = broker.bootstrap();
    let dir = tempfile::tempdir().expect("tempdir");
    let daemon = Daemon::start(&broker, &dir.path().join("state"), &[]);
    let replay = Command::new(BIN)
        .args([
            "replay",
            "data/streams/spambase.jsonl.gz",
            "--to-kafka",
            "--config",
            "config/kafka.toml",
        ])
        .current_dir(ROOT)
        .env("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", &bootstrap)
        .output()
        .expect("replay --to-kafka");
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let unlabeled: BTreeSet<String> = bundled(4601)
        .into_iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .filter_map(|r| r.key)
        .collect();
    assert_eq!(unlabeled.len(), 3820);

    let script = ["examples/kafka_read_scores.py", "--bootstrap", &bootstrap];
    let deadline = Instant::now() + DEADLINE;
    let out = loop {
        let (status, out, err) = run(&python, &script);
        assert!(status.success(), "{status}\n{err}");
        if out.lines().count() >= unlabeled.len() {
            assert_eq!(
                err.trim(),
                format!("{} scores read from neyman.scores", out.lines().count())
            );
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} scores after {DEADLINE:?}:\n{}",
            out.lines().count(),
            unlabeled.len(),
            daemon.log_text()
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    let mut keys = BTreeSet::new();
    for line in out.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "{line}");
        let headers: Value = serde_json::from_str(fields[1]).expect("headers JSON");
        assert!(headers.is_object(), "{line}");
        let score: Value = serde_json::from_str(fields[2]).expect("score JSON");
        assert_eq!(score["id"], fields[0], "{line}");
        assert!(keys.insert(fields[0].to_string()), "answered twice: {line}");
    }
    assert_eq!(keys, unlabeled);

    let (status, out, err) = run(
        "bash",
        &[
            "-c",
            &format!("set -o pipefail; {python} examples/kafka_read_scores.py --bootstrap {bootstrap} | head -3"),
        ],
    );
    assert!(status.success(), "{status}\n{err}");
    assert_eq!(out.lines().count(), 3);
    assert!(!err.contains("Traceback"), "{err}");

    let (status, log) = daemon.terminate();
    assert!(status.success(), "{status}\n{log}");
}
