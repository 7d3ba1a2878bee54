//! End-to-end tests of `neyman replay` on the bundled stream with bad events mixed in:
//! byte-identical output across runs, no event lost (scores + DLQ = inputs), every DLQ reason,
//! and restart recovery when the newest stored model is corrupt; and on a PU stream whose
//! retrains are all refused, every unlabeled event answered unscored within
//! `scoring.max_wait`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::broker::free_port;
use common::http::{http, sample};
use common::streams::{bundled, pu_stream};
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
    let records = bundled(n);
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

/// `replay` flags for a report in blocks of 300 with the online-lr baseline.
const REPORT_WITH_BASELINE: [&str; 6] = [
    "--report",
    "json",
    "--block",
    "300",
    "--baseline",
    "online-lr",
];

/// Runs `command`, asserts it succeeded, and reads its stdout as one JSON value.
fn json_of(command: &mut Command) -> Value {
    let out = command.output().expect("run neyman");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON value on stdout")
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
    // The replay ends with a one-line summary of the same counts.
    let summary = format!(
        "{} events: {} scored, 0 unscored, {} dead-lettered; models: ",
        inputs.len(),
        scores.len(),
        dlq.len()
    );
    assert!(stderr.contains(&summary), "want {summary:?} in {stderr}");
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
        assert_eq!(s["certified"], true, "{s}");
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

/// `threshold = "none"`: the replay answers every unlabeled event with a score that flags
/// nothing and certifies nothing, from models accepted without a threshold; the scores still
/// rank the spam above the ham. For τ-FPL, `tau` is then the rank τ.
#[test]
fn a_ranking_only_replay_scores_every_event_unflagged_and_uncertified() {
    for algorithm in ["usmo", "tfpl"] {
        ranking_only_replay(algorithm);
    }
}

fn ranking_only_replay(algorithm: &str) {
    let dir = tempfile::tempdir().expect("dir");
    let (stream, _) = stream_with_bad_events(dir.path(), 1500);
    let path = config(dir.path());
    let text = std::fs::read_to_string(&path).expect("config").replace(
        "algorithm = \"usmo\"",
        &format!("algorithm = \"{algorithm}\""),
    );
    std::fs::write(&path, text + "threshold = \"none\"\n").expect("config");
    let out = Command::new(BIN)
        .arg("replay")
        .arg(&stream)
        .arg("--config")
        .arg(&path)
        .output()
        .expect("run neyman");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scores = lines(&dir.path().join("scores.jsonl"));
    let scored: Vec<&Value> = scores.iter().filter(|s| s["status"] == "scored").collect();
    assert!(
        scored.len() > scores.len() / 2,
        "{} of {}",
        scored.len(),
        scores.len()
    );
    for s in &scored {
        assert_eq!(s["flagged"], false, "{s}");
        assert_eq!(s["threshold"], Value::Null, "{s}");
        assert_eq!(s["certified"], false, "{s}");
    }
    // AUC of the scores against the hidden labels.
    let (pos, neg): (Vec<f64>, Vec<f64>) = (
        scored
            .iter()
            .filter(|s| s["meta"]["label"] == 1)
            .map(|s| s["score"].as_f64().expect("score"))
            .collect(),
        scored
            .iter()
            .filter(|s| s["meta"]["label"] == -1)
            .map(|s| s["score"].as_f64().expect("score"))
            .collect(),
    );
    let wins: f64 = pos
        .iter()
        .map(|p| {
            neg.iter()
                .map(|n| {
                    if p > n {
                        1.0
                    } else if p == n {
                        0.5
                    } else {
                        0.0
                    }
                })
                .sum::<f64>()
        })
        .sum();
    let auc = wins / (pos.len() * neg.len()) as f64;
    assert!(
        auc > 0.8,
        "{algorithm}: AUC {auc} on {} spam, {} ham",
        pos.len(),
        neg.len()
    );
}

#[test]
fn a_corrupt_newest_model_falls_back_to_the_previous_one() {
    let dir = tempfile::tempdir().expect("dir");
    let (stream, _) = stream_with_bad_events(dir.path(), 2500);
    let (code, stderr) = replay(dir.path(), &stream, &[]);
    assert_eq!(code, 0, "{stderr}");
    let models = dir.path().join("state/models");
    // Model files only: a fresh threshold's file sits beside its model.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&models)
        .expect("models")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "nmd"))
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
        .filter(|p| p.extension().is_some_and(|e| e == "nmd"))
        .max()
        .expect("a stored model");
    let report = json_of(
        Command::new(BIN)
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
            .arg(&model),
    );
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

/// `scoring.max_wait` of the refused-PU tests, in event-time milliseconds.
const MAX_WAIT_MS: i64 = 100;

/// A PU configuration no retrain can certify: τ = 0.1 % needs thousands of held-out
/// unlabeled events (even a threshold that flags none of them has a one-sided upper bound
/// near ln(1/δ)/n on its flag rate), and the stream has about 1 100.
fn refused_pu_config(dir: &Path, port: u16) -> PathBuf {
    let path = dir.join("neyman.toml");
    std::fs::write(
        &path,
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
every_events = 300
[scoring]
max_wait = "{MAX_WAIT_MS}ms"
[http]
listen = "127.0.0.1:{port}"
[model]
algorithm = "tfpl"
kernel = "linear"
prior = 0.38
prior_min = 0.33
prior_max = 0.43
tau = 0.001
seed = 1
"#
        ),
    )
    .expect("write config");
    path
}

/// The issue's PU stream: 150 positives, then 1 100 unlabeled events 1 ms apart (1 250
/// records), with two messages for the DLQ among the unlabeled ones.
fn refused_pu_stream() -> Vec<Record> {
    let mut records = pu_stream(10, 150, 1100, 0.38);
    for at in [400, 900] {
        let ts = records[at].ts;
        records.insert(
            at,
            Record::new(Channel::Unlabeled, ts, None, b"{not json".to_vec()),
        );
    }
    records
}

fn write_stream(path: &Path, records: &[Record]) {
    let mut w = RecordWriter::create(path).expect("create");
    for r in records {
        w.write(r).expect("write");
    }
    w.finish().expect("finish");
}

/// Checks the outputs of a replay of `records` with [`refused_pu_config`]: one unscored output
/// per valid unlabeled event, in arrival order; `no_accepted_model` exactly for the events
/// whose `scoring.max_wait` had passed by the last event's time (so none waited longer, and
/// none was given up early), `shutdown` for the rest. Returns the count per reason.
fn check_unscored_outputs(dir: &Path, records: &[Record]) -> BTreeMap<String, usize> {
    let scores = lines(&dir.join("scores.jsonl"));
    let dlq = lines(&dir.join("dlq.jsonl"));
    let unlabeled: Vec<&Record> = records
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .collect();
    // Scores + unscored + DLQ = unlabeled inputs.
    assert_eq!(scores.len() + dlq.len(), unlabeled.len());
    let valid: Vec<&&Record> = unlabeled.iter().filter(|r| r.key.is_some()).collect();
    assert_eq!(dlq.len(), unlabeled.len() - valid.len());
    let end = records.iter().map(|r| r.ts).max().expect("records");
    let mut reasons = BTreeMap::new();
    for (s, r) in scores.iter().zip(&valid) {
        assert_eq!(s["id"].as_str(), r.key.as_deref(), "arrival order");
        assert_eq!(s["status"], "unscored", "{s}");
        assert!(s["score"].is_null() && s["model_version"].is_null(), "{s}");
        let due = r.ts + MAX_WAIT_MS <= end;
        let want = if due { "no_accepted_model" } else { "shutdown" };
        assert_eq!(s["reason"], want, "{s} (stream ends at {end})");
        *reasons.entry(want.to_string()).or_default() += 1;
    }
    reasons
}

#[test]
fn a_pu_replay_whose_retrains_are_all_refused_answers_every_event_within_max_wait() {
    let records = refused_pu_stream();

    // Cut anywhere, a replay is the same run stopped there: at each cut, exactly the events
    // whose max_wait had passed have been given up, the rest leave at the end of input.
    for cut in [500, 800, 1100] {
        let dir = tempfile::tempdir().expect("dir");
        let prefix = &records[..cut];
        let stream = dir.path().join("stream.jsonl");
        write_stream(&stream, prefix);
        refused_pu_config(dir.path(), 0);
        let out = Command::new(BIN)
            .arg("replay")
            .arg(&stream)
            .arg("--config")
            .arg(dir.path().join("neyman.toml"))
            .env("RUST_LOG", "neyman=info")
            .output()
            .expect("run neyman");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let reasons = check_unscored_outputs(dir.path(), prefix);
        assert!(reasons["no_accepted_model"] > 0, "{cut}: {reasons:?}");
    }

    // The whole stream, with the counters read from /metrics before the daemon stops.
    let dir = tempfile::tempdir().expect("dir");
    let stream = dir.path().join("stream.jsonl");
    write_stream(&stream, &records);
    let port = free_port();
    let config = refused_pu_config(dir.path(), port);
    let log = dir.path().join("stderr.log");
    let mut child = Command::new(BIN)
        .arg("replay")
        .arg(&stream)
        .arg("--config")
        .arg(&config)
        .arg("--keep-serving")
        .env("RUST_LOG", "neyman=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start neyman replay");
    let valid = records
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled && r.key.is_some())
        .count();
    let unscored = |m: &str, reason: &str| {
        sample(
            m,
            &format!("neyman_unscored_events_total{{reason=\"{reason}\"}}"),
        )
        .unwrap_or(0.0)
    };
    // Generous: a slow machine only waits longer.
    let started = Instant::now();
    let metrics = loop {
        let m = http(port, "GET", "/metrics", "")
            .map(|(_, body)| body)
            .unwrap_or_default();
        if unscored(&m, "no_accepted_model") + unscored(&m, "shutdown") >= valid as f64 {
            break m;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the replay did not end:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill")
        .success());
    let status = child.wait().expect("exit");
    let stderr = std::fs::read_to_string(&log).expect("log");
    assert_eq!(status.code(), Some(0), "{stderr}");
    let reasons = check_unscored_outputs(dir.path(), &records);
    eprintln!("refused PU replay: {reasons:?}");
    for reason in ["no_accepted_model", "shutdown"] {
        assert_eq!(
            unscored(&metrics, reason),
            reasons[reason] as f64,
            "{reason}"
        );
    }
    assert_eq!(unscored(&metrics, "buffer_full"), 0.0);
    assert_eq!(
        sample(
            &metrics,
            "neyman_events_total{channel=\"unlabeled\",outcome=\"unscored\"}"
        ),
        Some(valid as f64)
    );
    // Every retrain ran and was refused: no model ever scored.
    assert!(
        sample(&metrics, "neyman_retrains_total{result=\"rejected\"}").unwrap_or(0.0) >= 3.0,
        "{stderr}"
    );
    assert_eq!(
        sample(&metrics, "neyman_retrains_total{result=\"swapped\"}"),
        Some(0.0)
    );
    assert!(stderr.contains("no_threshold"), "{stderr}");
}

/// `replay --report json --block N --baseline online-lr --plot FILE`: the report's blocks are
/// the score file's runs of N lines, counted against `meta.label`; its totals and summary agree
/// with the file, the baseline answers the same events, and the chart is written. With scores
/// on stdout the report is refused (exit 2), as is --baseline without --report.
#[test]
fn the_prequential_report_accounts_every_score_by_block() {
    let dir = tempfile::tempdir().expect("dir");
    let (stream, _) = stream_with_bad_events(dir.path(), 2500);
    let plot = dir.path().join("blocks.svg");
    let report = json_of(
        Command::new(BIN)
            .arg("replay")
            .arg(&stream)
            .arg("--config")
            .arg(config(dir.path()))
            .args(REPORT_WITH_BASELINE)
            .arg("--plot")
            .arg(&plot),
    );
    let scores = lines(&dir.path().join("scores.jsonl"));
    assert_eq!(report["scored"], scores.len());
    assert_eq!(report["summary"]["scored"], scores.len());
    assert_eq!(report["block"], 300);
    assert_eq!(report["tau"], 0.05);
    let blocks = report["blocks"].as_array().expect("blocks");
    assert_eq!(blocks.len(), scores.len().div_ceil(300));
    for (b, chunk) in blocks.iter().zip(scores.chunks(300)) {
        let count = |label: i64, flagged: bool| {
            chunk
                .iter()
                .filter(|s| s["meta"]["label"] == label && (!flagged || s["flagged"] == true))
                .count()
        };
        assert_eq!(b["negatives"], count(-1, false), "{b}");
        assert_eq!(b["false_positives"], count(-1, true), "{b}");
        assert_eq!(b["positives"], count(1, false), "{b}");
        assert_eq!(b["true_positives"], count(1, true), "{b}");
        let fpr = b["false_positives"].as_f64().expect("n") / b["negatives"].as_f64().expect("n");
        assert!((b["fpr"].as_f64().expect("fpr") - fpr).abs() < 1e-12);
        assert_eq!(
            b["beyond_noise"],
            b["p_value"].as_f64().expect("p") < 0.05,
            "{b}"
        );
    }
    let beyond = blocks.iter().filter(|b| b["beyond_noise"] == true).count();
    assert_eq!(report["blocks_beyond_noise"], beyond);
    assert_eq!(report["without_truth"], 0);
    let by_version: u64 = report["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["scored"].as_u64().expect("scored"))
        .sum();
    assert_eq!(by_version, scores.len() as u64);
    assert!(report["summary"]["models_swapped"].as_u64().expect("swaps") >= 2);
    let svg = std::fs::read_to_string(&plot).expect("chart written");
    assert!(svg.starts_with("<svg") && svg.contains("FPR"));
    // The baseline answers the same unlabeled events in the same blocks: unscored until it has
    // learned and seen a negative, then flagged against its rolling quantile.
    let baseline = &report["baseline"];
    assert_eq!(baseline["name"], "online-lr");
    assert_eq!(baseline["window"], 1000);
    assert_eq!(baseline["block"], 300);
    let answered =
        |r: &Value| r["scored"].as_u64().expect("n") + r["unscored"].as_u64().expect("n");
    assert_eq!(answered(baseline), answered(&report));
    assert_eq!(
        baseline["blocks"].as_array().expect("blocks").len(),
        blocks.len()
    );
    assert!(baseline["scored"].as_u64().expect("n") > 0, "{baseline}");
    assert!(baseline["tpr"].as_f64().expect("tpr") > 0.0, "{baseline}");
    assert_eq!(baseline["without_truth"], 0);
    let no_report = Command::new(BIN)
        .arg("replay")
        .arg(&stream)
        .arg("--config")
        .arg(config(dir.path()))
        .args(["--baseline", "online-lr"])
        .output()
        .expect("run neyman");
    assert_eq!(no_report.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_report.stderr).contains("--report"));

    let refused = Command::new(BIN)
        .arg("replay")
        .arg(&stream)
        .arg("--config")
        .arg(config(dir.path()))
        .args(["--report", "json"])
        .env("NEYMAN_OUTPUT_SCORES", "-")
        .output()
        .expect("run neyman");
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("output.scores"));
}

/// `bench replay` runs the real daemon and the real baseline: its prequential figures are
/// `replay --report json --baseline online-lr`'s on the same stream and config, each round
/// reads every event, the rates are events over seconds, and the rounds leave no files.
#[test]
fn bench_replay_times_the_daemon_against_the_baseline_on_the_same_stream() {
    let dir = tempfile::tempdir().expect("dir");
    let (stream, _) = stream_with_bad_events(dir.path(), 2500);
    let config = config(dir.path());
    let bench = json_of(
        Command::new(BIN)
            .args(["bench", "replay"])
            .arg(&stream)
            .arg("--config")
            .arg(&config)
            .args(["--rounds", "2", "--block", "300", "--report", "json"]),
    );
    assert!(
        !dir.path().join("scores.jsonl").exists(),
        "the bench writes to its own directories"
    );
    let replayed = json_of(
        Command::new(BIN)
            .arg("replay")
            .arg(&stream)
            .arg("--config")
            .arg(&config)
            .args(REPORT_WITH_BASELINE),
    );
    let events = replayed["summary"]["handled"].as_u64().expect("handled");
    assert!(events > 2500, "{events}");
    assert_eq!(bench["events"], events);
    assert_eq!(bench["baseline"], "online-lr");
    let summary = &replayed["summary"];
    let retrains = ["models_swapped", "models_rejected", "retrains_failed"]
        .iter()
        .map(|k| summary[k].as_u64().expect("count"))
        .sum::<u64>();
    assert_eq!(bench["retrains"], retrains);
    assert!(retrains > 0);
    for (side, report) in [
        ("daemon_prequential", &replayed),
        ("baseline_prequential", &replayed["baseline"]),
    ] {
        for key in ["fpr", "tpr", "blocks_beyond_noise", "blocks_with_negatives"] {
            assert_eq!(bench[side][key], report[key], "{side} {key}");
        }
    }
    let rounds = bench["rounds"].as_array().expect("rounds");
    assert_eq!(rounds.len(), 2);
    let seconds = |key: &str| -> f64 {
        rounds
            .iter()
            .map(|r| r[key].as_f64().expect("seconds"))
            .sum()
    };
    let rate = |key: &str| bench[key].as_f64().expect("rate");
    let pooled = |key: &str| 2.0 * events as f64 / seconds(key);
    assert!((rate("daemon_per_second") / pooled("daemon_seconds") - 1.0).abs() < 1e-9);
    assert!((rate("baseline_per_second") / pooled("baseline_seconds") - 1.0).abs() < 1e-9);
    let ratio = rate("daemon_per_second") / rate("baseline_per_second");
    assert!((bench["daemon_over_baseline"].as_f64().expect("ratio") / ratio - 1.0).abs() < 1e-9);
}

/// Issue 21: a truncated `.gz` stopped the replay and dropped every event waiting for the first
/// model. Everything read before the unreadable part is answered (unscored, `shutdown`, in
/// arrival order), then the replay fails naming the file.
#[test]
fn a_truncated_stream_answers_what_was_read_then_fails_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let records = bundled(400);
    let whole = dir.path().join("whole.jsonl.gz");
    write_stream(&whole, &records);
    let bytes = std::fs::read(&whole).expect("read");
    let stream = dir.path().join("truncated.jsonl.gz");
    std::fs::write(&stream, &bytes[..bytes.len() * 2 / 3]).expect("write");
    let (code, stderr) = replay(dir.path(), &stream, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("truncated.jsonl.gz"), "{stderr}");
    let scores = lines(&dir.path().join("scores.jsonl"));
    assert!(!scores.is_empty(), "{stderr}");
    // The run's line, failed or not: the events read and how they were answered.
    let line = stderr
        .lines()
        .find(|l| l.contains(" events: ") && l.contains(" unscored, "))
        .unwrap_or_else(|| panic!("no summary line:\n{stderr}"));
    assert!(
        line.contains(&format!(
            "0 scored, {} unscored, 0 dead-lettered",
            scores.len()
        )),
        "{line}"
    );
    let handled: usize = line
        .split(" events: ")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(handled >= scores.len() && handled < records.len(), "{line}");
    let unlabeled = records.iter().filter(|r| r.channel == Channel::Unlabeled);
    for (s, r) in scores.iter().zip(unlabeled) {
        assert_eq!(s["id"].as_str(), r.key.as_deref(), "arrival order");
        assert_eq!(
            (&s["status"], &s["reason"]),
            (&"unscored".into(), &"shutdown".into())
        );
    }
}

/// Issue 21: two daemons on one state directory both ran and deleted each other's models.
/// The second is refused (exit 2), naming the first one's pid; once the first is gone (even
/// by kill -9), the directory is free again.
#[test]
fn a_second_daemon_on_the_same_state_directory_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut first = Command::new(BIN)
        .arg("replay")
        .arg(STREAM)
        .arg("--config")
        .arg(config(dir.path()))
        .arg("--keep-serving")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let lock = dir.path().join("state").join("lock");
    let pid = first.id().to_string();
    let started = Instant::now();
    while std::fs::read_to_string(&lock).map_or(true, |held| held.trim() != pid) {
        assert!(started.elapsed() < Duration::from_secs(60), "no lock taken");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, stderr) = replay(dir.path(), Path::new(STREAM), &[]);
    first.kill().expect("kill");
    first.wait().expect("wait");
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("in use by another neyman (pid {pid})")),
        "{stderr}"
    );
    let (code, stderr) = replay(dir.path(), Path::new(STREAM), &[]);
    assert_eq!(code, 0, "{stderr}");
}

/// Issue 21 item 10, state and output files an earlier run or the disk left broken: a garbled
/// version counter is refused at start (exit 2, the file named) instead of failing every
/// retrain; orphaned temporary files of interrupted writes are removed; a half-written last
/// line of the scores file is cut, so every line of it parses; a full disk under the scores
/// file fails the replay naming the file.
#[test]
fn broken_state_and_output_files_are_named_cleaned_or_cut() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    std::fs::create_dir_all(state.join("models")).expect("mkdir");
    let stream = dir.path().join("short.jsonl");
    write_stream(&stream, &bundled(300));

    std::fs::write(state.join("version"), "7 models\n").expect("write");
    let (code, stderr) = replay(dir.path(), &stream, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&state.join("version").display().to_string())
            && stderr.contains("not a version number"),
        "{stderr}"
    );

    std::fs::write(state.join("version"), "7\n").expect("write");
    let orphan = state
        .join("models")
        .join(format!(".model-{:020}.nmd.tmp", 8));
    std::fs::write(&orphan, b"half a model").expect("write");
    let scores = dir.path().join("scores.jsonl");
    std::fs::write(&scores, "{\"id\":\"from-before\"}\n{\"id\":\"cut-sh").expect("write");
    let (code, stderr) = replay(dir.path(), &stream, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!orphan.exists(), "{stderr}");
    assert!(stderr.contains("cut a half-written last line"), "{stderr}");
    let written = lines(&scores);
    assert_eq!(written[0]["id"], "from-before");
    let unlabeled = bundled(300)
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .count();
    assert_eq!(written.len(), 1 + unlabeled);

    let out = Command::new(BIN)
        .arg("replay")
        .arg(&stream)
        .arg("--config")
        .arg(config(dir.path()))
        .env("NEYMAN_OUTPUT_SCORES", "/dev/full")
        .output()
        .expect("run neyman");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/dev/full"), "{stderr}");
}

/// Issue 21 item 3: a line of a recorded stream that is not a record (malformed JSON, bytes
/// that are not UTF-8) is dead-lettered as `invalid_record` with its file and line, and the
/// replay goes on: every unlabeled event after it is answered too.
#[test]
fn a_bad_line_is_a_dead_letter_and_the_replay_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let records = bundled(300);
    let mut text = Vec::new();
    for (i, r) in records.iter().enumerate() {
        match i {
            10 => text.extend_from_slice(b"{\"channel\": \"unlabeled\", \"ts\": \n"),
            20 => text.extend_from_slice(b"\xff\xfe not UTF-8\n"),
            _ => {}
        }
        text.extend_from_slice(r.to_json_line().as_bytes());
        text.push(b'\n');
    }
    let stream = dir.path().join("with-bad-lines.jsonl");
    std::fs::write(&stream, text).expect("write");
    let (code, stderr) = replay(dir.path(), &stream, &[]);
    assert_eq!(code, 0, "{stderr}");
    let dead = lines(&dir.path().join("dlq.jsonl"));
    let located: Vec<(&str, u64)> = dead
        .iter()
        .map(|d| {
            assert!(
                d["source"]
                    .as_str()
                    .is_some_and(|s| s.ends_with("with-bad-lines.jsonl")),
                "{d}"
            );
            (
                d["reason"].as_str().unwrap_or(""),
                d["line"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        located,
        vec![("invalid_record", 11), ("invalid_record", 22)]
    );
    let unlabeled = records
        .iter()
        .filter(|r| r.channel == Channel::Unlabeled)
        .count();
    assert_eq!(lines(&dir.path().join("scores.jsonl")).len(), unlabeled);
}

/// The one-line summary is the replay's answer: it is printed even when `log.level` hides
/// `info` logs.
#[test]
fn the_summary_line_survives_a_warn_log_level() {
    let dir = tempfile::tempdir().expect("dir");
    let (stream, _) = stream_with_bad_events(dir.path(), 400);
    let out = Command::new(BIN)
        .arg("replay")
        .arg(&stream)
        .arg("--config")
        .arg(config(dir.path()))
        .env_remove("RUST_LOG")
        .env("NEYMAN_LOG_LEVEL", "warn")
        .output()
        .expect("run neyman");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let inputs = RecordReader::open(&stream).expect("stream").count();
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&format!("{inputs} events: ")))
        .unwrap_or_else(|| panic!("no summary line in {stderr}"));
    assert!(line.contains(" dead-lettered; models: "), "{line}");
    assert!(
        !stderr.contains(" INFO "),
        "info logs stay hidden: {stderr}"
    );
}
