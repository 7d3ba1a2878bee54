//! End-to-end tests of `neyman replay` on the bundled stream with bad events mixed in:
//! byte-identical output across runs, no event lost (scores + DLQ = inputs), every DLQ reason,
//! and restart recovery when the newest stored model is corrupt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use neyman::stream::record::{Record, RecordReader, RecordWriter};
use neyman::stream::Channel;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_neyman");
const STREAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/streams/spambase.jsonl.gz"
);

/// The first `n` bundled records, with one bad message of each kind among them; returns the
/// path and the reasons expected in the DLQ.
fn stream_with_bad_events(dir: &Path, n: usize) -> (PathBuf, Vec<&'static str>) {
    let records: Vec<Record> = RecordReader::open(Path::new(STREAM))
        .expect("bundled stream")
        .take(n)
        .map(|r| r.expect("record"))
        .collect();
    let bad: [(&[u8], &str); 6] = [
        (b"{not json", "invalid_json"),
        (br#"{"ts": 1, "x": [1.0]}"#, "missing_id"),
        (
            br#"{"id": "short", "ts": 1767225600500, "x": [1.0, 2.0]}"#,
            "dimension_mismatch",
        ),
        (
            br#"{"id": "huge", "ts": 1767225600500, "x": [1e400]}"#,
            "non_finite",
        ),
        (b"\xff\xfe\x00binary", "invalid_utf8"),
        (
            br#"{"id": "late", "ts": "yesterday", "x": [1.0]}"#,
            "invalid_ts",
        ),
    ];
    let path = dir.join("stream.jsonl");
    let mut w = RecordWriter::create(&path).expect("create");
    for (i, r) in records.iter().enumerate() {
        w.write(r).expect("write");
        if i % 97 == 50 && i / 97 < bad.len() {
            let (payload, _) = bad[i / 97];
            let mut b = Record::new(Channel::Unlabeled, r.ts, None, payload.to_vec());
            b.partition = Some(0);
            b.offset = Some(i as i64);
            w.write(&b).expect("write");
        }
    }
    w.finish().expect("finish");
    (path, bad.iter().map(|(_, r)| *r).collect())
}

fn config(dir: &Path) -> PathBuf {
    let path = dir.join("neyman.toml");
    std::fs::write(
        &path,
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
every_events = 500
[http]
listen = "127.0.0.1:0"
[model]
algorithm = "usmo"
prior = 0.38
prior_min = 0.33
prior_max = 0.43
tau = 0.05
seed = 1
"#,
    )
    .expect("write config");
    path
}

fn replay(dir: &Path, stream: &Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new(BIN)
        .arg("replay")
        .arg(stream)
        .arg("--config")
        .arg(config(dir))
        .args(extra)
        .env("RUST_LOG", "neyman=info")
        .output()
        .expect("run neyman");
    let code = out.status.code().expect("exit code");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(code, 101, "panicked: {stderr}");
    (code, stderr)
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[test]
fn replay_is_reproducible_and_loses_nothing() {
    let (a, b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (stream, reasons) = stream_with_bad_events(a.path(), 2500);
    std::fs::copy(&stream, b.path().join("stream.jsonl")).expect("copy");
    let (code, stderr) = replay(a.path(), &stream, &["--threads", "2"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = replay(
        b.path(),
        &b.path().join("stream.jsonl"),
        &["--no-resume", "--threads", "1"],
    );
    assert_eq!(code, 0, "{stderr}");
    let first = std::fs::read(a.path().join("scores.jsonl")).expect("scores");
    assert_eq!(
        first,
        std::fs::read(b.path().join("scores.jsonl")).expect("scores"),
        "the same input and config give the same bytes, on 2 and on 1 runtime threads"
    );

    // Conservation: every unlabeled input is a score line or a DLQ line.
    let inputs: Vec<Record> = RecordReader::open(&stream)
        .expect("stream")
        .map(|r| r.expect("record"))
        .collect();
    let unlabeled = inputs
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .count();
    let scores = lines(&a.path().join("scores.jsonl"));
    let dlq = lines(&a.path().join("dlq.jsonl"));
    assert_eq!(scores.len() + dlq.len(), unlabeled);
    let got: Vec<&str> = dlq
        .iter()
        .map(|d| d["reason"].as_str().expect("reason"))
        .collect();
    assert_eq!(got, reasons);
    assert!(dlq.iter().all(|d| d["channel"] == "unlabeled"));
    assert_eq!(
        dlq[4]["payload_b64"].as_str().map(|s| !s.is_empty()),
        Some(true)
    );

    // Every score names the model that produced it; versions only move forward.
    let mut last = 0;
    let mut by_version: BTreeMap<u64, usize> = BTreeMap::new();
    for s in &scores {
        assert_eq!(s["status"], "scored", "{s}");
        let v = s["model_version"].as_u64().expect("integer version");
        assert!(v >= last, "version went back from {last} to {v}");
        last = v;
        *by_version.entry(v).or_default() += 1;
        let flagged = s["flagged"].as_bool().expect("flagged");
        let score = s["score"].as_f64().expect("score");
        let threshold = s["threshold"].as_f64().expect("threshold");
        assert_eq!(flagged, score > threshold);
    }
    assert!(
        by_version.len() >= 2,
        "retrains swapped models: {by_version:?}"
    );
    // The false-positive rate on the truly negative unlabeled events stays near τ.
    let (neg, fp) = scores.iter().fold((0, 0), |(n, f), s| {
        if s["meta"]["label"] == -1 {
            (n + 1, f + usize::from(s["flagged"] == true))
        } else {
            (n, f)
        }
    });
    let fpr = fp as f64 / neg as f64;
    assert!(
        fpr <= 0.05 + 2.0 * (0.05 * 0.95 / neg as f64).sqrt(),
        "FPR {fpr} on {neg}"
    );
}

#[test]
fn a_corrupt_newest_model_falls_back_to_the_previous_one() {
    let dir = tempfile::tempdir().expect("dir");
    let (stream, _) = stream_with_bad_events(dir.path(), 2500);
    let (code, stderr) = replay(dir.path(), &stream, &[]);
    assert_eq!(code, 0, "{stderr}");
    let models = dir.path().join("state/models");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&models)
        .expect("models")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    let newest = files.last().expect("newest").clone();
    let mut bytes = std::fs::read(&newest).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&newest, bytes).expect("corrupt");
    let version_of = |p: &Path| -> u64 {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| {
                n.trim_start_matches("model-")
                    .trim_end_matches(".nmd")
                    .parse()
                    .ok()
            })
            .expect("version in the name")
    };
    let previous = version_of(&files[files.len() - 2]);

    // A short second stream: a few unlabeled events, too few for a retrain.
    let short = dir.path().join("short.jsonl");
    let mut w = RecordWriter::create(&short).expect("create");
    for r in RecordReader::open(&stream)
        .expect("stream")
        .map(|r| r.expect("record"))
        .filter(|r| r.channel == Channel::Unlabeled)
        .take(20)
    {
        w.write(&r).expect("write");
    }
    w.finish().expect("finish");
    std::fs::remove_file(dir.path().join("scores.jsonl")).expect("fresh scores");
    let (code, stderr) = replay(dir.path(), &short, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("not resumed") && stderr.contains("checksum"),
        "{stderr}"
    );
    let scores = lines(&dir.path().join("scores.jsonl"));
    assert_eq!(scores.len(), 20);
    assert!(scores.iter().all(|s| s["model_version"] == previous));
}

#[test]
fn bench_scoring_and_inspect_read_a_daemon_model() {
    let dir = tempfile::tempdir().expect("dir");
    let (stream, _) = stream_with_bad_events(dir.path(), 1500);
    let (code, stderr) = replay(dir.path(), &stream, &[]);
    assert_eq!(code, 0, "{stderr}");
    let model = std::fs::read_dir(dir.path().join("state/models"))
        .expect("models")
        .map(|e| e.expect("entry").path())
        .max()
        .expect("a stored model");
    let out = Command::new(BIN)
        .args([
            "bench",
            "scoring",
            "--events",
            "300",
            "--repeats",
            "1",
            "--report",
            "json",
            "--model",
        ])
        .arg(&model)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["events"], 300);
    assert_eq!(report["n_features"], 57);
    assert!(report["n_support"].as_u64().expect("n_support") > 0);
    for key in ["rbf", "linear"] {
        assert!(report[key]["ours_seconds"].as_f64().expect("seconds") > 0.0);
    }
    assert!(report["rbf"]["speedup"].as_f64().expect("speedup") > 0.0);
    assert!(report["linear"]["ratio"].as_f64().expect("ratio") > 0.0);
    // The fast paths compute the same values as the plain loops.
    assert!(report["max_relative_difference"].as_f64().expect("diff") < 1e-9);

    let out = Command::new(BIN)
        .args(["model", "inspect"])
        .arg(&model)
        .output()
        .expect("run");
    assert!(out.status.success());
    let meta: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(meta["algorithm"], "usmo");
    assert_eq!(meta["n_features"], 57);
}
