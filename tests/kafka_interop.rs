//! Interoperability with an independent client: Python `confluent-kafka` produces the events
//! into the topics of `config/kafka.toml` and reads the scores back; the daemon between them
//! is `neyman run`. Needs `NEYMAN_PYTHON` (a Python with confluent-kafka; scripts/test.sh
//! installs it in a venv) and `TANSU_BIN`.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::broker::{free_port, Broker};
use common::http::{http, sample};
use neyman::stream::{Channel, RecordReader};
use serde_json::{json, Value};

const STREAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/streams/spambase.jsonl.gz"
);
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/client.py");

fn python() -> String {
    std::env::var("NEYMAN_PYTHON").unwrap_or_else(|_| {
        panic!(
            "NEYMAN_PYTHON is not set: this test needs a Python with confluent-kafka. Run \
             scripts/test.sh (it installs one in ~/.cache/neyman-venv and exports NEYMAN_PYTHON)"
        )
    })
}

/// Runs the client; its stdout lines as JSON.
fn client(args: &[&str]) -> Vec<Value> {
    let out = Command::new(python())
        .arg(CLIENT)
        .args(args)
        .output()
        .expect("run the Python client");
    assert!(
        out.status.success(),
        "client {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_python_client_produces_events_and_reads_back_their_scores() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let log = dir.path().join("daemon.log");
    let daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_neyman"))
            .args(["run", "--config"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/kafka.toml"))
            .env("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap())
            .env("NEYMAN_STATE_DIR", dir.path().join("state"))
            .env("NEYMAN_HTTP_LISTEN", format!("127.0.0.1:{port}"))
            .env("NEYMAN_MODEL_ALGORITHM", "tfpl")
            .env("NEYMAN_MODEL_KERNEL", "linear")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("neyman run"),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let metrics = || {
        http(port, "GET", "/metrics", "")
            .map(|(_, b)| b)
            .unwrap_or_default()
    };
    // The HTTP API answers once the daemon has created its topics.
    while metrics().is_empty() {
        assert!(
            Instant::now() < deadline,
            "daemon not up: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The events, as the Python client will produce them.
    let input = dir.path().join("events.jsonl");
    let mut lines = String::new();
    let mut unlabeled = 0;
    for r in RecordReader::open(Path::new(STREAM))
        .expect("stream")
        .take(2500)
    {
        let r = r.expect("record");
        let topic = match r.channel {
            Channel::Positive => "neyman.positive",
            Channel::Unlabeled => "neyman.unlabeled",
            Channel::Negative => "neyman.negative",
        };
        unlabeled += usize::from(r.channel == Channel::Unlabeled);
        let value = String::from_utf8(r.payload).expect("UTF-8 event");
        lines.push_str(&json!({"topic": topic, "key": r.key, "value": value}).to_string());
        lines.push('\n');
    }
    std::fs::write(&input, lines).expect("write events");
    let delivered = client(&[
        "produce",
        &broker.bootstrap(),
        input.to_str().expect("utf-8"),
    ]);
    assert_eq!(delivered.len(), 2500);
    let offsets: HashMap<String, (i64, i64)> = delivered
        .iter()
        .filter(|d| d["topic"] == "neyman.unlabeled")
        .map(|d| {
            (
                d["key"].as_str().expect("key").to_string(),
                (
                    d["partition"].as_i64().expect("partition"),
                    d["offset"].as_i64().expect("offset"),
                ),
            )
        })
        .collect();
    assert_eq!(offsets.len(), unlabeled);

    while sample(
        &metrics(),
        "neyman_events_total{channel=\"unlabeled\",outcome=\"scored\"}",
    )
    .unwrap_or(0.0)
        < unlabeled as f64
    {
        assert!(
            Instant::now() < deadline,
            "not every event scored: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(daemon);

    let scores = client(&[
        "consume",
        &broker.bootstrap(),
        "neyman.scores",
        &unlabeled.to_string(),
        "60",
    ]);
    assert_eq!(scores.len(), unlabeled, "one score per unlabeled event");
    for s in &scores {
        let key = s["key"].as_str().expect("key");
        let body: Value =
            serde_json::from_str(s["value"].as_str().expect("value")).expect("score JSON");
        assert_eq!(body["id"], key);
        assert_eq!(body["status"], "scored");
        let h = &s["headers"];
        assert_eq!(
            h["model_version"].as_str(),
            Some(body["model_version"].to_string().as_str())
        );
        assert_eq!(h["source_topic"], "neyman.unlabeled");
        let (partition, offset) = offsets[key];
        assert_eq!(
            h["source_partition"].as_str(),
            Some(partition.to_string().as_str()),
            "{key}"
        );
        assert_eq!(
            h["source_offset"].as_str(),
            Some(offset.to_string().as_str()),
            "{key}"
        );
    }
}
