//! The issue-20 "rain vs no rain" case on the real weather series `data/noaa_weather.csv.gz`
//! (18 159 days in time order; data/README.md): `stream make --keep-order` with supervised
//! feedback (every day scored, its label 2 s later), replayed with τ = 5 %, windows of 5 000,
//! a retrain every 1 000 window events, blocks of 1 000. τ-FPL (linear, `rank_tau` auto) must
//! never serve a model that flags nothing, and its TPR must be within 0.05 of USMO's (RBF) on
//! the same stream; both answer every day. Figures: docs/certificates.md §6.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_neyman");
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/noaa_weather.csv.gz");
const DAYS: u64 = 18_159;

fn config(dir: &Path, algorithm: &str, kernel: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{algorithm}.toml"));
    let text = format!(
        r#"
[source]
path = "rain.jsonl.gz"
[output]
scores = "{algorithm}-scores.jsonl"
dlq = "{algorithm}-dlq.jsonl"
[state]
dir = "{algorithm}-state"
[windows.positive]
max_events = 5000
[windows.unlabeled]
max_events = 5000
[windows.negative]
max_events = 5000
[retrain]
every_events = 1000
[http]
listen = "127.0.0.1:0"
[model]
algorithm = "{algorithm}"
kernel = "{kernel}"
prior = 0.31
prior_min = 0.2
prior_max = 0.4
tau = 0.05
seed = 1
"#
    );
    std::fs::write(&path, text).expect("write config");
    path
}

fn replay(dir: &Path, algorithm: &str, kernel: &str) -> Value {
    let out = Command::new(BIN)
        .arg("replay")
        .arg(dir.join("rain.jsonl.gz"))
        .arg("--config")
        .arg(config(dir, algorithm, kernel))
        .args(["--report", "json"])
        .env("RUST_LOG", "neyman=warn")
        .output()
        .expect("run neyman");
    assert!(
        out.status.success(),
        "{algorithm}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON report")
}

#[test]
fn tau_fpl_serves_no_degenerate_model_and_keeps_up_with_usmo_on_the_rain_stream() {
    let dir = tempfile::tempdir().expect("dir");
    let made = Command::new(BIN)
        .args(["stream", "make", "--data", DATA])
        .args([
            "--pu-labeled-fraction",
            "1",
            "--negative-feedback-fraction",
            "1",
        ])
        .args([
            "--feedback-delay-ms",
            "2000",
            "--seed",
            "3",
            "--rate",
            "100",
        ])
        .arg("--keep-order")
        .arg("--out")
        .arg(dir.path().join("rain.jsonl.gz"))
        .args(["--quiet", "--report", "json"])
        .output()
        .expect("run neyman");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    let tfpl = replay(dir.path(), "tfpl", "linear");
    let usmo = replay(dir.path(), "usmo", "rbf");
    for (name, report) in [("tfpl", &tfpl), ("usmo", &usmo)] {
        assert_eq!(report["scored"], DAYS, "{name}: every day scored");
        assert_eq!(report["without_truth"], 0, "{name}");
        assert_eq!(report["summary"]["dead_lettered"], 0, "{name}");
    }
    // The days arrive in file order: the first score is day 0's.
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(dir.path().join("tfpl-scores.jsonl"))
            .expect("scores")
            .lines()
            .next()
            .expect("a line"),
    )
    .expect("json");
    assert_eq!(first["id"], "0-0");

    // No served τ-FPL model flags nothing: every model version that scored at least 100
    // rainy days flagged some of them (all its threshold versions pooled).
    let mut by_model: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for v in tfpl["versions"].as_array().expect("versions") {
        let model = v["model_version"].as_u64().expect("version");
        let entry = by_model.entry(model).or_default();
        entry.0 += v["positives"].as_u64().expect("n");
        entry.1 += v["true_positives"].as_u64().expect("n");
    }
    assert!(by_model.len() >= 5, "{by_model:?}");
    for (model, (positives, flagged)) in &by_model {
        if *model > 0 && *positives >= 100 {
            assert!(
                *flagged > 0,
                "model {model} flagged none of {positives} rainy days"
            );
        }
    }

    let rate = |r: &Value, k: &str| r[k].as_f64().expect("rate");
    let (tpr, usmo_tpr) = (rate(&tfpl, "tpr"), rate(&usmo, "tpr"));
    assert!(tpr >= usmo_tpr - 0.05, "tfpl TPR {tpr} vs usmo {usmo_tpr}");
    assert!(tpr > 0.2, "tfpl TPR {tpr}");
    for (name, report) in [("tfpl", &tfpl), ("usmo", &usmo)] {
        assert!(rate(report, "fpr") <= 0.05, "{name}: {report}");
    }
}
