//! End-to-end tests of the `neyman` binary: `eval`, `train`, `score` and `model inspect`, their
//! JSON reports, model files (round trip, warm start, corruption), data-file errors, usage errors
//! and sparse (LIBSVM) input.
//!
//! Every test runs the built binary with `std::process::Command` and asserts on values: exit
//! codes, stderr wording (file:line:column), report fields and scores. No error path may exit
//! with 101 (a panic); [`neyman`] checks that for every run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use tempfile::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_neyman");
const HEART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/heart_statlog.csv");
const PIMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/pima_diabetes.csv");
const IONOSPHERE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/ionosphere.csv");

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The outcome of one run of the binary.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    /// The command line, for assertion messages.
    line: String,
}

impl Run {
    /// Asserts exit code 0 and returns self.
    fn ok(self) -> Run {
        assert_eq!(
            self.code, 0,
            "`{}` failed with {}; stderr:\n{}",
            self.line, self.code, self.stderr
        );
        self
    }

    /// Asserts the exit code and returns self.
    fn code(self, want: i32) -> Run {
        assert_eq!(
            self.code, want,
            "`{}`: exit code {} (want {want}); stdout:\n{}\nstderr:\n{}",
            self.line, self.code, self.stdout, self.stderr
        );
        self
    }

    /// Asserts stderr is exactly one line starting with `error: ` and returns that line.
    fn one_error_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "`{}`: want a one-line stderr, got:\n{}",
            self.line,
            self.stderr
        );
        assert!(
            lines[0].starts_with("error: "),
            "`{}`: stderr does not start with `error: `: {}",
            self.line,
            lines[0]
        );
        lines[0]
    }

    /// stdout parsed as exactly one JSON object (and nothing else but whitespace).
    fn json(&self) -> serde_json::Map<String, Value> {
        assert_eq!(
            self.stdout.trim_end().lines().count(),
            1,
            "`{}`: want one line of JSON on stdout, got:\n{}",
            self.line,
            self.stdout
        );
        match serde_json::from_str::<Value>(&self.stdout) {
            Ok(Value::Object(map)) => map,
            Ok(other) => panic!("`{}`: stdout is JSON but not an object: {other}", self.line),
            Err(e) => panic!(
                "`{}`: stdout is not one JSON value ({e}):\n{}",
                self.line, self.stdout
            ),
        }
    }
}

/// Runs the binary with `args`; never with a panic's exit code 101 or a signal.
fn neyman(args: &[&str]) -> Run {
    let output = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("the neyman binary runs");
    let line = format!("neyman {}", args.join(" "));
    let stdout = String::from_utf8(output.stdout).expect("stdout is UTF-8");
    let stderr = String::from_utf8(output.stderr).expect("stderr is UTF-8");
    let code = output
        .status
        .code()
        .unwrap_or_else(|| panic!("`{line}` was killed by a signal; stderr:\n{stderr}"));
    assert_ne!(code, 101, "`{line}` panicked:\n{stderr}");
    assert!(!stderr.contains("panicked"), "`{line}` panicked:\n{stderr}");
    Run {
        code,
        stdout,
        stderr,
        line,
    }
}

/// A path as a `&str` argument (temp dirs are UTF-8 on every platform the tests run on).
fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

fn f64_of(map: &serde_json::Map<String, Value>, key: &str) -> f64 {
    map.get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{key:?} is not a number in {map:?}"))
}

fn u64_of(map: &serde_json::Map<String, Value>, key: &str) -> u64 {
    map.get(key)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{key:?} is not an unsigned integer in {map:?}"))
}

fn bool_of(map: &serde_json::Map<String, Value>, key: &str) -> bool {
    map.get(key)
        .and_then(Value::as_bool)
        .unwrap_or_else(|| panic!("{key:?} is not a boolean in {map:?}"))
}

/// The heart_statlog training flags shared by several tests (PU labelling with seed 1).
const HEART_TRAIN: [&str; 12] = [
    "--algo",
    "usmo",
    "--data",
    HEART,
    "--pu-labeled-fraction",
    "0.19",
    "--seed",
    "1",
    "--prior",
    "0.44",
    "--lambda",
    "0.1",
];

/// `train` on heart_statlog with [`HEART_TRAIN`], `extra` flags and `--out out`; the kernel is
/// RBF with γ 0.5 unless `extra` names one.
fn train_heart(out: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["train"];
    args.extend_from_slice(&HEART_TRAIN);
    if !extra.contains(&"--kernel") {
        args.extend_from_slice(&["--kernel", "rbf", "--gamma", "0.5"]);
    }
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--out", s(out)]);
    neyman(&args)
}

/// `id,score` CSV (with header) into (id, score) pairs; scores parsed exactly.
fn parse_score_csv(text: &str) -> Vec<(String, f64)> {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id,score"), "score CSV header");
    lines
        .map(|line| {
            let (id, score) = line
                .split_once(',')
                .unwrap_or_else(|| panic!("score line without a comma: {line:?}"));
            let score: f64 = score
                .parse()
                .unwrap_or_else(|_| panic!("score is not a number: {line:?}"));
            (id.to_owned(), score)
        })
        .collect()
}

/// JSON Lines `{"id": "...", "score": x}` into (id, score) pairs. The score is parsed from its
/// text with `str::parse` (correctly rounded), so it can be compared bit for bit with the CSV.
fn parse_score_jsonl(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
            let obj = value.as_object().expect("each line is an object");
            assert_eq!(obj.len(), 2, "exactly id and score: {line}");
            let id = obj["id"].as_str().expect("id is a string").to_owned();
            assert!(obj["score"].is_number(), "score is a number: {line}");
            let raw = line
                .split_once("\"score\":")
                .map(|(_, rest)| rest.split([',', '}']).next().unwrap_or("").trim())
                .expect("a score field");
            let score: f64 = raw.parse().expect("score text parses as f64");
            (id, score)
        })
        .collect()
}

fn read_scores(path: &Path) -> Vec<(String, f64)> {
    let text = std::fs::read_to_string(path).expect("score output exists");
    if path.extension().is_some_and(|e| e == "jsonl") {
        parse_score_jsonl(&text)
    } else {
        parse_score_csv(&text)
    }
}

fn score_to(model: &Path, data: &str, out: &Path) -> Vec<(String, f64)> {
    neyman(&[
        "score",
        "--model",
        s(model),
        "--data",
        data,
        "--out",
        s(out),
    ])
    .ok();
    read_scores(out)
}

fn write(dir: &TempDir, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("write a temp file");
    path
}

// ---------------------------------------------------------------------------------------------
// 1. eval: the USMO paper's degenerate, split-independent cells
// ---------------------------------------------------------------------------------------------

/// Runs the paper-protocol eval and checks the schema and the exact F1 cell.
fn check_degenerate_cell(
    data: &str,
    rows: u64,
    fraction: &str,
    prior: &str,
    kernel: &[&str],
    want_f1: f64,
    want_rounded: u64,
) {
    for seed in ["1", "2024"] {
        let mut args = vec![
            "eval",
            "--algo",
            "usmo",
            "--data",
            data,
            "--pu-labeled-fraction",
            fraction,
            "--repeats",
            "3",
            "--seed",
            seed,
            "--transductive",
            "--f1-class",
            "majority",
            "--scale",
            "minmax",
            "--prior",
            prior,
            "--lambda",
            "0.1",
            "--report",
            "json",
        ];
        args.extend_from_slice(kernel);
        let run = neyman(&args).ok();
        let report = run.json();
        for key in [
            "algo",
            "dataset_rows",
            "repeats",
            "protocol",
            "accuracy_mean",
            "accuracy_sd",
            "f1_mean",
            "f1_sd",
            "auc_mean",
            "auc_sd",
            "results",
        ] {
            assert!(report.contains_key(key), "{key:?} missing from {report:?}");
        }
        assert_eq!(report["algo"], "usmo");
        assert_eq!(report["protocol"], "transductive");
        assert_eq!(u64_of(&report, "dataset_rows"), rows);
        assert_eq!(u64_of(&report, "repeats"), 3);
        assert_eq!(report["results"], Value::Array(vec![]));

        let f1 = f64_of(&report, "f1_mean");
        assert!(
            (f1 - want_f1).abs() < 5e-4,
            "{data} seed {seed}: f1_mean {f1}, want {want_f1}"
        );
        assert_eq!(
            (f1 * 1000.0).round() as u64,
            want_rounded,
            "{data}: f1 {f1}"
        );
        // Split-independent: every repeat gives the same F1 (up to the mean's round-off).
        let f1_sd = f64_of(&report, "f1_sd");
        assert!(f1_sd.abs() < 1e-12, "{data} seed {seed}: f1_sd {f1_sd}");
        let accuracy = f64_of(&report, "accuracy_mean");
        assert!((0.0..=1.0).contains(&accuracy), "accuracy {accuracy}");
        assert!(f64_of(&report, "accuracy_sd") >= 0.0);
        let auc = f64_of(&report, "auc_mean");
        assert!((0.0..=1.0).contains(&auc), "auc {auc}");
        assert!(f64_of(&report, "auc_sd") >= 0.0);
    }
}

#[test]
fn eval_paper_cell_heart_statlog_rbf() {
    check_degenerate_cell(
        HEART,
        270,
        "0.19",
        "0.44",
        &["--kernel", "rbf", "--gamma", "0.5"],
        0.7557,
        756,
    );
}

#[test]
fn eval_paper_cell_pima_linear() {
    check_degenerate_cell(
        PIMA,
        768,
        "0.198",
        "0.35",
        &["--kernel", "linear"],
        0.82305,
        823,
    );
}

#[test]
fn eval_paper_cell_pima_rbf() {
    check_degenerate_cell(
        PIMA,
        768,
        "0.198",
        "0.35",
        &["--kernel", "rbf", "--gamma", "0.5"],
        0.82305,
        823,
    );
}

#[test]
fn eval_paper_cell_ionosphere_rbf() {
    check_degenerate_cell(
        IONOSPHERE,
        351,
        "0.195",
        "0.64",
        &["--kernel", "rbf", "--gamma", "0.5"],
        0.7418,
        742,
    );
}

// ---------------------------------------------------------------------------------------------
// 2. train --report json
// ---------------------------------------------------------------------------------------------

#[test]
fn train_report_json_fields_and_optimality() {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("m.bin");
    let run = train_heart(&model, &["--report", "json"]).ok();
    let report = run.json();
    for key in [
        "iterations",
        "newton_steps",
        "passes",
        "kernel_evaluations",
        "cache_hit_rate",
        "dual_objective",
        "primal_objective",
        "duality_residual",
        "bias",
        "converged",
        "cancelled",
        "train_seconds",
        "n_positive",
        "n_unlabeled",
    ] {
        assert!(report.contains_key(key), "{key:?} missing from {report:?}");
    }
    // round(0.19 · 120) = 23 of heart_statlog's 120 positives stay labelled.
    assert_eq!(u64_of(&report, "n_positive"), 23);
    assert_eq!(u64_of(&report, "n_unlabeled"), 247);
    assert!(bool_of(&report, "converged"));
    assert!(!bool_of(&report, "cancelled"));
    let iterations = u64_of(&report, "iterations");
    assert!(iterations > 0);
    assert!(u64_of(&report, "passes") >= iterations);
    assert!(u64_of(&report, "kernel_evaluations") > 0);
    let hit = f64_of(&report, "cache_hit_rate");
    assert!((0.0..=1.0).contains(&hit), "cache_hit_rate {hit}");
    assert!(f64_of(&report, "train_seconds") >= 0.0);
    assert!(f64_of(&report, "bias").is_finite());
    assert!(f64_of(&report, "primal_objective").is_finite());
    let dual = f64_of(&report, "dual_objective");
    let residual = f64_of(&report, "duality_residual");
    assert!(dual.is_finite() && dual < 0.0, "dual {dual}");
    assert!(
        residual.abs() <= 1e-3 * dual.abs().max(1.0),
        "duality residual {residual} vs dual {dual}"
    );
    assert!(model.is_file(), "the model file is written");
    // The report is stored in the model as printed.
    let inspect = neyman(&["model", "inspect", s(&model)]).ok().json();
    assert_eq!(inspect["report"], Value::Object(report));
}

// ---------------------------------------------------------------------------------------------
// 3. Model round trip: train → score (CSV twice, JSON Lines, stdout) → inspect
// ---------------------------------------------------------------------------------------------

/// USMO's kernel defaults to RBF with γ = 1/n_features on the command line, as in the daemon:
/// the same model as naming them.
#[test]
fn usmo_kernel_defaults_to_rbf_as_in_the_daemon() {
    let dir = TempDir::new().unwrap();
    let (default, named) = (dir.path().join("d.bin"), dir.path().join("n.bin"));
    let mut args = vec!["train"];
    args.extend_from_slice(&HEART_TRAIN);
    args.extend_from_slice(&["--out", s(&default)]);
    neyman(&args).ok();
    let gamma = format!("{}", 1.0 / 13.0);
    train_heart(&named, &["--kernel", "rbf", "--gamma", &gamma]).ok();
    let inspect = |m: &Path| neyman(&["model", "inspect", s(m)]).ok().json();
    let (d, n) = (inspect(&default), inspect(&named));
    assert_eq!(d["kernel"], n["kernel"], "{d:?}");
    assert!(d["kernel"]["rbf"]["gamma"].is_number(), "{d:?}");
    assert_eq!(
        score_to(&default, HEART, &dir.path().join("d.csv")),
        score_to(&named, HEART, &dir.path().join("n.csv"))
    );
}

#[test]
fn model_round_trip_scores_and_inspect() {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("m.bin");
    let report = train_heart(&model, &["--report", "json"]).ok().json();

    let first = score_to(&model, HEART, &dir.path().join("x.csv"));
    let second = score_to(&model, HEART, &dir.path().join("y.csv"));
    let jsonl = score_to(&model, HEART, &dir.path().join("x.jsonl"));
    let stdout = parse_score_csv(
        &neyman(&["score", "--model", s(&model), "--data", HEART])
            .ok()
            .stdout,
    );

    assert_eq!(first.len(), 270, "one score per row");
    for (i, (id, score)) in first.iter().enumerate() {
        assert_eq!(
            id,
            &i.to_string(),
            "ids are the 0-based row numbers in order"
        );
        assert!(score.is_finite(), "row {i}: {score}");
    }
    let bits = |v: &[(String, f64)]| -> Vec<(String, u64)> {
        v.iter().map(|(id, x)| (id.clone(), x.to_bits())).collect()
    };
    assert_eq!(
        bits(&first),
        bits(&second),
        "scores are identical across runs"
    );
    assert_eq!(
        bits(&first),
        bits(&jsonl),
        "CSV and JSON Lines carry the same scores"
    );
    assert_eq!(
        bits(&first),
        bits(&stdout),
        "stdout CSV equals the --out CSV"
    );
    // A real decision function, not a constant.
    let (lo, hi) = first
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, x)| {
            (lo.min(*x), hi.max(*x))
        });
    assert!(hi - lo > 1e-3, "scores span [{lo}, {hi}]");

    let inspect = neyman(&["model", "inspect", s(&model)]).ok().json();
    assert_eq!(inspect["algorithm"], "usmo");
    assert_eq!(u64_of(&inspect, "n_features"), 13);
    assert_eq!(f64_of(&inspect, "prior"), 0.44);
    assert_eq!(f64_of(&inspect, "lambda"), 0.1);
    assert_eq!(f64_of(&inspect, "bias"), f64_of(&report, "bias"));
    assert_eq!(inspect["scale"], "standard");
}

// ---------------------------------------------------------------------------------------------
// 4. Warm start through the CLI
// ---------------------------------------------------------------------------------------------

#[test]
fn warm_start_matches_a_cold_train_on_the_new_window() {
    let dir = TempDir::new().unwrap();
    let (m1, warm, cold) = (
        dir.path().join("m1.bin"),
        dir.path().join("warm.bin"),
        dir.path().join("cold.bin"),
    );
    // --scale none everywhere: a warm start reuses the previous model's scaler.
    let common = ["--scale", "none", "--tol", "1e-6", "--report", "json"];
    let with = |extra: &[&str]| -> Vec<String> {
        common.iter().chain(extra).map(|x| x.to_string()).collect()
    };
    let args = with(&["--rows", "0:240"]);
    let r1 = train_heart(&m1, &args.iter().map(String::as_str).collect::<Vec<_>>())
        .ok()
        .json();
    let args = with(&["--rows", "27:270", "--warm-start", s(&m1)]);
    let rw = train_heart(&warm, &args.iter().map(String::as_str).collect::<Vec<_>>())
        .ok()
        .json();
    let args = with(&["--rows", "27:270"]);
    let rc = train_heart(&cold, &args.iter().map(String::as_str).collect::<Vec<_>>())
        .ok()
        .json();

    assert!(bool_of(&r1, "converged"));
    assert!(bool_of(&rw, "converged"));
    assert!(bool_of(&rc, "converged"));
    assert!(!bool_of(&r1, "warm_start"));
    assert!(bool_of(&rw, "warm_start"));
    assert!(!bool_of(&rc, "warm_start"));
    // The same window (243 rows) whichever way it was reached.
    assert_eq!(u64_of(&r1, "n_positive") + u64_of(&r1, "n_unlabeled"), 240);
    assert_eq!(u64_of(&rw, "n_positive"), u64_of(&rc, "n_positive"));
    assert_eq!(u64_of(&rw, "n_unlabeled"), u64_of(&rc, "n_unlabeled"));
    assert_eq!(u64_of(&rw, "n_positive") + u64_of(&rw, "n_unlabeled"), 243);
    let (dw, dc) = (f64_of(&rw, "dual_objective"), f64_of(&rc, "dual_objective"));
    assert!(
        (dw - dc).abs() <= 1e-6 * dc.abs().max(1.0),
        "dual {dw} vs {dc}"
    );

    let warm_scores = score_to(&warm, HEART, &dir.path().join("warm.csv"));
    let cold_scores = score_to(&cold, HEART, &dir.path().join("cold.csv"));
    assert_eq!(warm_scores.len(), 270);
    assert_eq!(cold_scores.len(), 270);
    for ((id_w, w), (id_c, c)) in warm_scores.iter().zip(&cold_scores) {
        assert_eq!(id_w, id_c);
        assert!((w - c).abs() <= 1e-4, "row {id_w}: warm {w} vs cold {c}");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Corrupted model files
// ---------------------------------------------------------------------------------------------

#[test]
fn corrupted_model_files_are_named_as_such() {
    let dir = TempDir::new().unwrap();
    let good = dir.path().join("good.bin");
    train_heart(&good, &["--kernel", "linear"]).ok();
    let bytes = std::fs::read(&good).unwrap();
    assert!(bytes.len() > 100, "a model file of {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"NEYMANMD", "the model magic");

    let mut flipped = bytes.clone();
    flipped[bytes.len() / 2] ^= 0xff;
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(b"junk");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("flipped.bin", flipped, "checksum"),
        ("half.bin", bytes[..bytes.len() / 2].to_vec(), "truncated"),
        ("short.bin", bytes[..bytes.len() - 1].to_vec(), "truncated"),
        ("header.bin", bytes[..10].to_vec(), "truncated"),
        ("empty.bin", Vec::new(), "truncated"),
        ("trailing.bin", trailing, "trailing bytes"),
        (
            "text.bin",
            b"id,score\n0,0.5\nthis is not a model file at all\n".to_vec(),
            "not a neyman model file",
        ),
    ];
    for (name, content, fragment) in cases {
        let path = write(&dir, name, &content);
        let out = dir.path().join(format!("{name}.csv"));
        let runs = [
            neyman(&[
                "score",
                "--model",
                s(&path),
                "--data",
                HEART,
                "--out",
                s(&out),
            ]),
            neyman(&["model", "inspect", s(&path)]),
            train_heart(
                &dir.path().join("never.bin"),
                &["--kernel", "linear", "--warm-start", s(&path)],
            ),
        ];
        for run in runs {
            let run = run.code(1);
            let line = run.one_error_line();
            assert!(
                line.contains(fragment),
                "{name}: want {fragment:?} in {line:?}"
            );
            assert!(line.contains(s(&path)), "{name}: the path in {line:?}");
            assert!(run.stdout.is_empty(), "{name}: stdout {:?}", run.stdout);
        }
        assert!(!out.exists(), "{name}: no scores written");
        assert!(
            !dir.path().join("never.bin").exists(),
            "{name}: no model written"
        );
    }
    // The good file still works after all that.
    assert_eq!(
        score_to(&good, HEART, &dir.path().join("ok.csv")).len(),
        270
    );
}

// ---------------------------------------------------------------------------------------------
// 6. Bad data files: exit 1, one line naming file:line[:column]
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_data_files_exit_1_naming_file_line_and_column() {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("m.bin");
    train_heart(&model, &["--kernel", "linear"]).ok();

    /// (file name, content, extra flags, location after the path, message fragments)
    type Case<'a> = (&'a str, &'a str, &'a [&'a str], &'a str, &'a [&'a str]);
    let cases: [Case; 9] = [
        (
            "text.csv",
            "a,b,label\n1,2,1\n3,abc,0\n",
            &[],
            ":3:2: ",
            &[r#""abc" is not a number"#, r#"(column "b")"#],
        ),
        (
            "ragged.csv",
            "a,b,label\n1,2,1\n4,5,0\n1,0\n",
            &[],
            ":4: ",
            &["expected 3 fields, found 2"],
        ),
        (
            "nan.csv",
            "a,b,label\n1,2,1\nNaN,1,0\n",
            &[],
            ":3:1: ",
            &[r#""NaN" is not finite"#, r#"(column "a")"#],
        ),
        (
            "inf.csv",
            "a,b,label\n1,2,1\n4,inf,0\n",
            &[],
            ":3:2: ",
            &[r#""inf" is not finite"#, r#"(column "b")"#],
        ),
        (
            "label.csv",
            "a,b,label\n1,2,1\n3,4,2\n",
            &[],
            ":3:3: ",
            &[r#"unknown label "2""#, "expected 1, -1 or 0"],
        ),
        ("empty.csv", "a,b,label\n", &[], ": ", &["no data rows"]),
        (
            "dup.csv",
            "id,a,label\nr1,1,1\nr2,2,0\n\nr1,3,0\n",
            &["--id-column", "id"],
            ":5: ",
            &[r#"duplicate id "r1""#, "first on line 2"],
        ),
        (
            "order.svm",
            "1 1:1 2:2\n0 3:1 2:1\n",
            &[],
            ":2:3: ",
            &["index 2 out of order after 3", "indices must increase"],
        ),
        (
            "zero.svm",
            "1 1:1\n0 0:1 2:1\n",
            &[],
            ":2:2: ",
            &[r#"index 0 in "0:1""#, "LIBSVM indices start at 1"],
        ),
    ];
    for (name, content, extra, location, fragments) in cases {
        let path = write(&dir, name, content);
        let out = dir.path().join(format!("{name}.out"));
        let mut train = vec![
            "train",
            "--algo",
            "usmo",
            "--data",
            s(&path),
            "--prior",
            "0.5",
            "--lambda",
            "0.1",
            "--kernel",
            "linear",
            "--out",
            s(&out),
        ];
        train.extend_from_slice(extra);
        let scores = dir.path().join(format!("{name}.scores.csv"));
        let mut score = vec![
            "score",
            "--model",
            s(&model),
            "--data",
            s(&path),
            "--out",
            s(&scores),
        ];
        score.extend_from_slice(extra);
        for run in [neyman(&train), neyman(&score)] {
            let run = run.code(1);
            let line = run.one_error_line();
            let want = format!("error: {}{location}", s(&path));
            assert!(
                line.starts_with(&want),
                "{name}: want {want:?} to start {line:?}"
            );
            for fragment in fragments {
                assert!(
                    line.contains(fragment),
                    "{name}: want {fragment:?} in {line:?}"
                );
            }
        }
        assert!(!out.exists(), "{name}: no model written");
        assert!(!scores.exists(), "{name}: no scores written");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Usage errors: exit 2
// ---------------------------------------------------------------------------------------------

#[test]
fn usage_errors_exit_2() {
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("never.bin");
    let dat = write(&dir, "x.dat", "1 1:1 2:0.5\n0 2:1\n0 1:0.25\n");
    let train = |data: &str, rest: &[&str]| -> Run {
        let mut args = vec!["train", "--algo", "usmo", "--data", data, "--out", s(&out)];
        args.extend_from_slice(rest);
        neyman(&args)
    };
    let good = ["--prior", "0.4", "--lambda", "0.1", "--kernel", "linear"];
    fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["--pu-labeled-fraction", "0.19"];
        v.extend_from_slice(extra);
        v
    }

    // (what, run, fragment of a one-line message; None for clap's multi-line usage errors)
    let cases: Vec<(&str, Run, Option<&str>)> = vec![
        (
            "unknown extension",
            train(s(&dat), &good),
            Some("cannot infer the format of"),
        ),
        (
            "--prior 1.5",
            train(
                HEART,
                &with(&["--prior", "1.5", "--lambda", "0.1", "--kernel", "linear"]),
            ),
            Some("prior must be in (0, 1), got 1.5"),
        ),
        (
            "missing --prior",
            train(HEART, &with(&["--lambda", "0.1", "--kernel", "linear"])),
            Some("--prior"),
        ),
        (
            "missing --lambda",
            train(HEART, &with(&["--prior", "0.4", "--kernel", "linear"])),
            Some("--lambda"),
        ),
        (
            "--gamma=-1",
            train(
                HEART,
                &with(&[
                    "--prior",
                    "0.4",
                    "--lambda",
                    "0.1",
                    "--kernel",
                    "rbf",
                    "--gamma=-1",
                ]),
            ),
            Some("gamma must be finite and > 0, got -1"),
        ),
        (
            "--gamma 0",
            train(
                HEART,
                &with(&[
                    "--prior", "0.4", "--lambda", "0.1", "--kernel", "rbf", "--gamma", "0",
                ]),
            ),
            Some("gamma must be finite and > 0, got 0"),
        ),
        (
            "--tol 0",
            train(
                HEART,
                &with(&[
                    "--prior", "0.4", "--lambda", "0.1", "--kernel", "linear", "--tol", "0",
                ]),
            ),
            Some("tol must be finite and > 0"),
        ),
        (
            "--lambda 0",
            train(
                HEART,
                &with(&["--prior", "0.4", "--lambda", "0", "--kernel", "linear"]),
            ),
            Some("lambda must be finite and > 0"),
        ),
        (
            "--gamma -1 (clap sees a flag)",
            train(
                HEART,
                &with(&[
                    "--prior", "0.4", "--lambda", "0.1", "--kernel", "rbf", "--gamma", "-1",
                ]),
            ),
            None,
        ),
        (
            "--time-limit 10w",
            train(
                HEART,
                &with(&[&good[..], &["--time-limit", "10w"]].concat()),
            ),
            None,
        ),
        (
            "--time-limit=-1",
            train(HEART, &with(&[&good[..], &["--time-limit=-1"]].concat())),
            None,
        ),
        (
            "unknown flag",
            train(HEART, &with(&[&good[..], &["--no-such-flag"]].concat())),
            None,
        ),
        (
            "unknown kernel",
            train(
                HEART,
                &with(&["--prior", "0.4", "--lambda", "0.1", "--kernel", "sigmoid"]),
            ),
            None,
        ),
        ("no subcommand", neyman(&[]), None),
    ];
    for (what, run, fragment) in cases {
        let run = run.code(2);
        match fragment {
            Some(fragment) => {
                let line = run.one_error_line();
                assert!(
                    line.contains(fragment),
                    "{what}: want {fragment:?} in {line:?}"
                );
            }
            // clap: `error: ...` plus usage hints, or the command list when none is given.
            None => assert!(
                run.stderr.starts_with("error: ") || run.stderr.contains("Usage: neyman <COMMAND>"),
                "{what}: {}",
                run.stderr
            ),
        }
        assert!(!out.exists(), "{what}: no model written");
    }
    // clap's messages name the offending value.
    let run = train(
        HEART,
        &with(&[&good[..], &["--time-limit", "10w"]].concat()),
    );
    assert!(run.stderr.contains("10w"), "{}", run.stderr);
    let run = train(HEART, &with(&[&good[..], &["--no-such-flag"]].concat()));
    assert!(run.stderr.contains("--no-such-flag"), "{}", run.stderr);
    // The unknown-extension message names the file and the way out.
    let run = train(s(&dat), &good);
    assert!(
        run.stderr.contains(s(&dat)) && run.stderr.contains("--format"),
        "{}",
        run.stderr
    );

    // The same file with an explicit --format trains (negatives absent: rows 2-3 are unlabeled).
    let r = train(
        s(&dat),
        &[&good[..], &["--format", "libsvm", "--report", "json"]].concat(),
    )
    .ok()
    .json();
    assert_eq!(
        (u64_of(&r, "n_positive"), u64_of(&r, "n_unlabeled")),
        (1, 2)
    );
    std::fs::remove_file(&out).unwrap();

    // eval validates its flags the same way.
    let eval = |rest: &[&str]| -> Run {
        let mut args = vec!["eval", "--algo", "usmo", "--pu-labeled-fraction", "0.19"];
        args.extend_from_slice(rest);
        neyman(&args)
    };
    for (what, run, fragment) in [
        (
            "eval x.dat",
            eval(&[&["--data", s(&dat)], &good[..]].concat()),
            "cannot infer the format",
        ),
        (
            "eval --prior 1.5",
            eval(&[
                "--data", HEART, "--prior", "1.5", "--lambda", "0.1", "--kernel", "linear",
            ]),
            "prior must be in (0, 1)",
        ),
        (
            "eval --gamma=-1",
            eval(&[
                "--data",
                HEART,
                "--prior",
                "0.4",
                "--lambda",
                "0.1",
                "--kernel",
                "rbf",
                "--gamma=-1",
            ]),
            "gamma must be finite and > 0",
        ),
        (
            "eval --repeats 0",
            eval(&[&["--data", HEART, "--repeats", "0"], &good[..]].concat()),
            "--repeats",
        ),
        (
            "eval --test-fraction 1",
            eval(&[&["--data", HEART, "--test-fraction", "1"], &good[..]].concat()),
            "--test-fraction",
        ),
    ] {
        let run = run.code(2);
        let line = run.one_error_line();
        assert!(
            line.contains(fragment),
            "{what}: want {fragment:?} in {line:?}"
        );
        assert!(run.stdout.is_empty(), "{what}: stdout {:?}", run.stdout);
    }
}

/// Documents a src bug: `score` reads its data with `data::read` directly instead of through
/// `read_data`, so an unknown extension is a run-time error (exit 1) in `score` but a usage error
/// (exit 2) in `train` and `eval` (src/cli/mod.rs, `score`, `read(&args.data, &opts)?`).
#[test]
fn score_unknown_extension_is_a_usage_error() {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("m.bin");
    train_heart(&model, &["--kernel", "linear"]).ok();
    let dat = write(&dir, "x.dat", "1 1:1\n");
    let run = neyman(&["score", "--model", s(&model), "--data", s(&dat)]).code(2);
    assert!(run.one_error_line().contains("cannot infer the format"));
}

/// Documents a src bug: `score --data` says "its label column is optional" (src/cli/args.rs),
/// but a CSV without a `label` column is rejected by the reader.
#[test]
fn score_accepts_a_csv_without_labels() {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("m.bin");
    train_heart(&model, &["--kernel", "linear"]).ok();
    let text = std::fs::read_to_string(HEART).unwrap();
    let unlabeled: String = text
        .lines()
        .map(|l| l.rsplit_once(',').unwrap().0.to_owned() + "\n")
        .collect();
    let path = write(&dir, "nolabel.csv", unlabeled);
    let without = score_to(&model, s(&path), &dir.path().join("a.csv"));
    let with = score_to(&model, HEART, &dir.path().join("b.csv"));
    assert_eq!(without, with);
}

// ---------------------------------------------------------------------------------------------
// 8. --time-limit forms and --max-iter
// ---------------------------------------------------------------------------------------------

#[test]
fn time_limit_forms_and_max_iter() {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("m.bin");
    let free = train_heart(&model, &["--report", "json"]).ok().json();
    let free_iterations = u64_of(&free, "iterations");
    assert!(bool_of(&free, "converged"));
    assert!(free_iterations > 3, "{free_iterations} iterations");

    // Training takes milliseconds, so every generous limit ends in convergence, unchanged.
    for limit in ["0.5", "500ms", "1m", "2s", "1h"] {
        let r = train_heart(&model, &["--time-limit", limit, "--report", "json"])
            .ok()
            .json();
        assert!(bool_of(&r, "converged"), "--time-limit {limit}");
        assert_eq!(
            u64_of(&r, "iterations"),
            free_iterations,
            "--time-limit {limit}"
        );
        assert_eq!(
            f64_of(&r, "dual_objective"),
            f64_of(&free, "dual_objective")
        );
    }
    // A zero limit stops before the first pair step, still writing a model.
    let r = train_heart(&model, &["--time-limit", "0", "--report", "json"])
        .ok()
        .json();
    assert!(!bool_of(&r, "converged"));
    assert!(!bool_of(&r, "cancelled"));
    assert_eq!(u64_of(&r, "iterations"), 0);

    let capped = dir.path().join("capped.bin");
    let r = train_heart(&capped, &["--max-iter", "3", "--report", "json"])
        .ok()
        .json();
    assert!(!bool_of(&r, "converged"));
    assert!(!bool_of(&r, "cancelled"));
    assert_eq!(u64_of(&r, "iterations"), 3);
    assert_eq!(u64_of(&r, "n_positive"), 23);
    assert!(f64_of(&r, "bias").is_finite());

    // The unconverged model is a usable model.
    let inspect = neyman(&["model", "inspect", s(&capped)]).ok().json();
    let stored = inspect["report"].as_object().expect("a stored report");
    assert!(!bool_of(stored, "converged"));
    assert_eq!(u64_of(stored, "iterations"), 3);
    let scores = score_to(&capped, HEART, &dir.path().join("capped.csv"));
    assert_eq!(scores.len(), 270);
    assert!(scores.iter().all(|(_, x)| x.is_finite()));
    let converged_scores = score_to(&model, HEART, &dir.path().join("free.csv"));
    assert_ne!(
        scores, converged_scores,
        "three pair steps do not reach the optimum"
    );
}

// ---------------------------------------------------------------------------------------------
// 9. Sparse (LIBSVM) input gives the same model as the dense CSV
// ---------------------------------------------------------------------------------------------

/// heart_statlog.csv as LIBSVM: the label, then the 1-based `idx:val` of every non-zero feature,
/// features in CSV column order (label column removed). Values are copied as text, so they parse
/// to the same f64s.
fn heart_as_libsvm() -> String {
    let text = std::fs::read_to_string(HEART).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').map(str::trim).collect();
    let label_at = header
        .iter()
        .position(|&h| h == "label")
        .expect("a label column");
    let mut out = String::new();
    let mut rows = 0;
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        assert_eq!(fields.len(), header.len());
        out.push_str(fields[label_at]);
        let features = fields
            .iter()
            .enumerate()
            .filter(|&(c, _)| c != label_at)
            .map(|(_, v)| *v);
        for (k, value) in features.enumerate() {
            if value.parse::<f64>().unwrap() != 0.0 {
                out.push_str(&format!(" {}:{}", k + 1, value));
            }
        }
        out.push('\n');
        rows += 1;
    }
    assert_eq!(rows, 270);
    out
}

fn sparse_matches_dense(scale_and_kernel: &[&str]) {
    let dir = TempDir::new().unwrap();
    let svm = write(&dir, "heart.svm", heart_as_libsvm());
    let train = |data: &str, out: &Path| -> serde_json::Map<String, Value> {
        let mut args = vec![
            "train",
            "--algo",
            "usmo",
            "--data",
            data,
            "--pu-labeled-fraction",
            "0.19",
            "--seed",
            "3",
            "--prior",
            "0.44",
            "--lambda",
            "0.1",
            "--report",
            "json",
            "--out",
            s(out),
        ];
        args.extend_from_slice(scale_and_kernel);
        neyman(&args).ok().json()
    };
    let (csv_model, svm_model) = (dir.path().join("csv.bin"), dir.path().join("svm.bin"));
    let dense = train(HEART, &csv_model);
    let sparse = train(s(&svm), &svm_model);

    for key in ["n_positive", "n_unlabeled"] {
        assert_eq!(u64_of(&dense, key), u64_of(&sparse, key), "{key}");
    }
    assert_eq!(u64_of(&sparse, "n_positive"), 23);
    assert!(bool_of(&dense, "converged") && bool_of(&sparse, "converged"));
    let (a, b) = (
        f64_of(&dense, "dual_objective"),
        f64_of(&sparse, "dual_objective"),
    );
    assert!(
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
        "dual objectives {a} vs {b}"
    );
    let inspect = neyman(&["model", "inspect", s(&svm_model)]).ok().json();
    assert_eq!(u64_of(&inspect, "n_features"), 13);

    let from_dense = score_to(&csv_model, HEART, &dir.path().join("dense.csv"));
    let from_sparse = score_to(&svm_model, s(&svm), &dir.path().join("sparse.csv"));
    // The dense model also scores sparse rows.
    let crossed = score_to(&csv_model, s(&svm), &dir.path().join("crossed.csv"));
    assert_eq!(from_dense.len(), 270);
    assert_eq!(from_sparse.len(), 270);
    assert_eq!(crossed.len(), 270);
    for (((id_d, d), (id_s, sp)), (_, x)) in from_dense.iter().zip(&from_sparse).zip(&crossed) {
        assert_eq!(id_d, id_s, "same row ids");
        assert!(
            (d - sp).abs() <= 1e-9 * d.abs().max(1.0),
            "row {id_d}: dense {d} vs sparse {sp}"
        );
        assert!(
            (d - x).abs() <= 1e-9 * d.abs().max(1.0),
            "row {id_d}: dense {d} vs crossed {x}"
        );
    }
}

#[test]
fn sparse_libsvm_matches_dense_csv_unscaled_rbf() {
    sparse_matches_dense(&["--scale", "none", "--kernel", "rbf", "--gamma", "0.5"]);
}

/// Sparse standard scaling divides by the same standard deviation but does not centre; the RBF
/// kernel is translation-invariant, so the model is the same as the dense one.
#[test]
fn sparse_libsvm_matches_dense_csv_standard_rbf() {
    sparse_matches_dense(&["--scale", "standard", "--kernel", "rbf", "--gamma", "0.1"]);
}

// ---------------------------------------------------------------------------------------------
// τ-FPL and calibrated thresholds
// ---------------------------------------------------------------------------------------------

const BREAST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/breast_cancer_wisconsin.csv"
);

#[test]
fn tfpl_umbrella_threshold_is_certified_and_flags_scores() {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("t.model");
    let run = neyman(&[
        "train",
        "--algo",
        "tfpl",
        "--data",
        BREAST,
        "--tau",
        "0.1",
        "--reg",
        "0.01",
        "--seed",
        "4",
        "--out",
        s(&model),
        "--report",
        "json",
    ])
    .ok();
    let r = run.json();
    assert_eq!(r["threshold_method"], "umbrella");
    assert!(bool_of(&r, "converged"));
    assert!(f64_of(&r, "relative_gap") <= 1e-6);
    // 444 negatives, half held out for calibration.
    assert_eq!(u64_of(&r, "calibration_size"), 222);
    assert_eq!(u64_of(&r, "n_negative"), 222);
    // k = ⌊τ'·222⌋ + 1 at the depth τ' the search chose (0.2 with seed 4: 45).
    let depth = f64_of(&r, "rank_tau");
    assert_eq!(
        u64_of(&r, "k"),
        (depth * 222.0).floor() as u64 + 1,
        "depth {depth}"
    );
    let bound = f64_of(&r, "fpr_bound");
    assert!(bound > 0.0 && bound <= 0.1, "fpr_bound {bound}");
    assert!(f64_of(&r, "tpr_estimate") > 0.8);
    let threshold = f64_of(&r, "threshold");
    // score writes `flagged` = score > threshold.
    let out = dir.path().join("s.csv");
    neyman(&[
        "score",
        "--model",
        s(&model),
        "--data",
        BREAST,
        "--out",
        s(&out),
    ])
    .ok();
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id,score,flagged"));
    let mut rows = 0;
    for line in lines {
        let parts: Vec<&str> = line.split(',').collect();
        let score: f64 = parts[1].parse().unwrap();
        assert_eq!(parts[2], if score > threshold { "true" } else { "false" });
        rows += 1;
    }
    assert_eq!(rows, 683);
    let inspect = neyman(&["model", "inspect", s(&model)]).ok().json();
    assert_eq!(inspect["algorithm"], "tfpl");
    assert_eq!(inspect["format_version"], 5);
    assert_eq!(inspect["threshold"]["method"], "umbrella");
}

#[test]
fn tfpl_oob_and_usmo_umbrella_and_refusals() {
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("o.model");
    let r = neyman(&[
        "train",
        "--algo",
        "tfpl",
        "--data",
        BREAST,
        "--tau",
        "0.05",
        "--threshold",
        "oob",
        "--rounds",
        "3",
        "--oob-rule",
        "npscore",
        "--out",
        s(&model),
        "--report",
        "json",
    ])
    .ok()
    .json();
    assert_eq!(r["threshold_method"], "oob");
    assert_eq!(r["fpr_bound"], Value::Null);
    let fpr = f64_of(&r, "fpr_estimate");
    assert!((0.0..=0.2).contains(&fpr), "oob fpr estimate {fpr}");

    // A PU file with feedback negatives: 40 positives keep label 1, the first 80 negatives and
    // the other positives become unlabeled, the last 70 negatives stay -1. USMO never trains on
    // negatives, so all 70 calibrate the umbrella.
    let heart = std::fs::read_to_string(HEART).unwrap();
    let mut mixed = String::new();
    let (mut pos, mut neg) = (0, 0);
    for (i, line) in heart.lines().enumerate() {
        if i == 0 {
            mixed.push_str(line);
        } else {
            let (features, label) = line.rsplit_once(',').unwrap();
            let label = match label {
                "1" => {
                    pos += 1;
                    if pos <= 40 {
                        "1"
                    } else {
                        "0"
                    }
                }
                _ => {
                    neg += 1;
                    if neg <= 80 {
                        "0"
                    } else {
                        "-1"
                    }
                }
            };
            mixed.push_str(&format!("{features},{label}"));
        }
        mixed.push('\n');
    }
    let mixed = write(&dir, "mixed.csv", mixed);
    let r = neyman(&[
        "train",
        "--algo",
        "usmo",
        "--data",
        s(&mixed),
        "--prior",
        "0.44",
        "--lambda",
        "0.01",
        "--kernel",
        "rbf",
        "--tau",
        "0.1",
        "--out",
        s(&model),
        "--report",
        "json",
    ])
    .ok()
    .json();
    assert_eq!(r["threshold_method"], "umbrella");
    assert_eq!(u64_of(&r, "calibration_size"), 70);
    assert_eq!(u64_of(&r, "n_unlabeled"), 160);
    assert!(f64_of(&r, "fpr_bound") <= 0.1);

    // Too few calibration negatives for τ = 1 %: the message says how many are needed.
    let run = neyman(&[
        "train",
        "--algo",
        "tfpl",
        "--data",
        HEART,
        "--tau",
        "0.01",
        "--out",
        s(&model),
    ])
    .code(1);
    assert!(run.one_error_line().contains("299"), "{}", run.stderr);
    // oob needs tfpl; pu-umbrella needs a prior interval; tfpl needs --tau: usage errors.
    neyman(&[
        "train",
        "--algo",
        "usmo",
        "--data",
        HEART,
        "--prior",
        "0.44",
        "--lambda",
        "0.01",
        "--kernel",
        "rbf",
        "--tau",
        "0.1",
        "--threshold",
        "oob",
        "--out",
        s(&model),
    ])
    .code(2);
    neyman(&[
        "train",
        "--algo",
        "usmo",
        "--data",
        HEART,
        "--pu-labeled-fraction",
        "0.3",
        "--prior",
        "0.44",
        "--lambda",
        "0.01",
        "--kernel",
        "rbf",
        "--tau",
        "0.1",
        "--out",
        s(&model),
    ])
    .code(2);
    neyman(&[
        "train",
        "--algo",
        "tfpl",
        "--data",
        HEART,
        "--out",
        s(&model),
    ])
    .code(2);
    // A non-linear Gram matrix over the budget is refused with the sizes.
    let run = neyman(&[
        "train",
        "--algo",
        "tfpl",
        "--data",
        BREAST,
        "--tau",
        "0.1",
        "--kernel",
        "rbf",
        "--max-gram-mb",
        "1",
        "--out",
        s(&model),
    ])
    .code(1);
    assert!(
        run.one_error_line().contains("Gram matrix"),
        "{}",
        run.stderr
    );
}

/// What `train FLAGS` on `data` holds out to calibrate, by the library's own split (the flags
/// parsed as the binary parses them), and the data as `train` labels it.
fn train_split(data: &str, flags: &[&str]) -> (Vec<bool>, neyman::data::Dataset) {
    use clap::Parser;
    use neyman::cli::args::{Cli, Command};
    let mut line = vec!["neyman", "train", "--data", data, "--out", "unused.model"];
    line.extend_from_slice(flags);
    let Command::Train(args) = Cli::try_parse_from(line).expect("valid flags").command else {
        panic!("not train")
    };
    let mut data = neyman::data::read(&args.data.data, &args.data.read.options(false)).unwrap();
    if let Some(fraction) = args.pu_labeled_fraction {
        data.pu_relabel(fraction, args.seed).unwrap();
    }
    let learner = args.learner_spec().unwrap().check().unwrap();
    let algorithm = learner.solver(data.rows.n_features()).unwrap();
    let spec = learner.threshold_spec().expect("--tau");
    (algorithm.held_out(&spec, &data).unwrap(), data)
}

/// Trains with `flags` on `data`; the model file's scaler.
fn trained_scaler(dir: &TempDir, data: &Path, flags: &[&str]) -> neyman::data::Scaler {
    let out = dir.path().join("scaled.model");
    let mut args = vec!["train", "--data", s(data), "--out", s(&out)];
    args.extend_from_slice(flags);
    neyman(&args).ok();
    let bytes = std::fs::read(&out).unwrap();
    let file = neyman::learn::model::from_file_bytes(&bytes).unwrap();
    file.model.scaler().clone()
}

/// Per feature: (mean, population standard deviation) of `rows` scaled by `scaler`, and the
/// largest scaled row norm.
fn scaled_moments(
    scaler: &neyman::data::Scaler,
    rows: &neyman::data::Rows,
) -> (Vec<(f64, f64)>, f64) {
    let scaled = scaler.transform(rows);
    let m = scaled.as_dense().expect("dense rows");
    let n = m.nrows() as f64;
    let moments = m
        .columns()
        .into_iter()
        .map(|c| {
            let mean = c.sum() / n;
            (mean, (c.mapv(|v| (v - mean).powi(2)).sum() / n).sqrt())
        })
        .collect();
    let largest = m
        .rows()
        .into_iter()
        .map(|r| r.dot(&r).sqrt())
        .fold(0.0, f64::max);
    (moments, largest)
}

/// `train --tau` splits before it scales: the stored scaler is the scorer's training rows' own.
/// τ-FPL with umbrella holds out half the negatives; pushing them far out (features ×1000 +
/// 1e4) leaves the stored scaler as it was, and on the training rows it centres every feature,
/// gives every feature the same spread and the largest row norm 1. USMO with pu-umbrella holds
/// out half the positives and unlabeled rows: its scaler gives the training rows mean 0 and
/// standard deviation 1 exactly (fitted on every row it was off by the noise between the
/// halves: a mean of 0.08 on one feature).
#[test]
fn train_fits_the_scaler_on_the_scorer_training_rows_only() {
    let dir = TempDir::new().unwrap();
    let tfpl = [
        "--algo", "tfpl", "--tau", "0.1", "--reg", "0.01", "--seed", "4",
    ];
    let (held, data) = train_split(BREAST, &tfpl);
    let n_held = held.iter().filter(|&&h| h).count();
    assert_eq!(n_held, 222, "half of the 444 negatives");
    let text = std::fs::read_to_string(BREAST).unwrap();
    let mut moved = String::new();
    for (i, line) in text.lines().enumerate() {
        match i.checked_sub(1) {
            Some(row) if held[row] => {
                let (features, label) = line.rsplit_once(',').unwrap();
                for v in features.split(',') {
                    let v: f64 = v.parse().unwrap();
                    moved.push_str(&format!("{},", 1e3 * v + 1e4));
                }
                moved.push_str(label);
            }
            _ => moved.push_str(line),
        }
        moved.push('\n');
    }
    let moved = write(&dir, "moved.csv", moved);
    let scaler = trained_scaler(&dir, Path::new(BREAST), &tfpl);
    assert_eq!(
        trained_scaler(&dir, &moved, &tfpl),
        scaler,
        "the calibration rows moved the scaler"
    );
    let kept: Vec<usize> = (0..data.len()).filter(|&i| !held[i]).collect();
    let (moments, largest) = scaled_moments(&scaler, &data.rows.select(&kept));
    let spread = moments[0].1;
    assert!(spread > 0.0);
    for (mean, sd) in moments {
        assert!(
            mean.abs() < 1e-12 && (sd - spread).abs() < 1e-12,
            "{mean} {sd} {spread}"
        );
    }
    assert!((largest - 1.0).abs() < 1e-12, "largest norm {largest}");

    let usmo = [
        "--algo",
        "usmo",
        "--pu-labeled-fraction",
        "0.5",
        "--prior",
        "0.21",
        "--prior-min",
        "0.2",
        "--prior-max",
        "0.22",
        "--lambda",
        "0.01",
        "--tau",
        "0.3",
        "--seed",
        "4",
    ];
    let (held, data) = train_split(BREAST, &usmo);
    let kept: Vec<usize> = (0..data.len()).filter(|&i| !held[i]).collect();
    assert!(
        kept.len() > 300 && kept.len() < 400,
        "{} training rows",
        kept.len()
    );
    let scaler = trained_scaler(&dir, Path::new(BREAST), &usmo);
    let (moments, _) = scaled_moments(&scaler, &data.rows.select(&kept));
    for (mean, sd) in moments {
        assert!(
            mean.abs() < 1e-12 && (sd - 1.0).abs() < 1e-12,
            "{mean} {sd}"
        );
    }
}

#[test]
fn bench_projection_reports_medians_and_linear_visits() {
    for (n, fraction) in [("2000", "0.0001"), ("2000", "0.5"), ("3000", "1")] {
        let run = neyman(&[
            "bench",
            "projection",
            "--n",
            n,
            "--k-fraction",
            fraction,
            "--repeats",
            "1",
            "--report",
            "json",
        ])
        .ok();
        // Progress goes to stderr (a line, stderr not being a terminal), the report to stdout.
        assert!(
            run.stderr.contains("bench projection: 1/1 repeats"),
            "{}",
            run.stderr
        );
        let r = run.json();
        let n: u64 = n.parse().unwrap();
        assert_eq!(u64_of(&r, "m"), n);
        let k = u64_of(&r, "k");
        assert!(k >= 1 && k <= n);
        for key in ["dc_seconds", "sort_seconds", "stream_seconds"] {
            assert!(f64_of(&r, key) >= 0.0, "{key}");
        }
        let visits = u64_of(&r, "visits");
        assert!(
            visits > 0 && visits <= 6 * 2 * n,
            "visits {visits} for m = n = {n}"
        );
    }
    neyman(&["bench", "projection", "--n", "0"]).code(2);
    neyman(&["bench", "projection", "--n", "10", "--k-fraction", "2"]).code(2);
}

#[test]
fn bench_tfpl_reports_every_factor_and_the_time_ratios() {
    let r = neyman(&[
        "bench",
        "tfpl",
        "--data",
        HEART,
        "--tau",
        "0.1",
        "--reg",
        "0.1",
        "--factors",
        "8,1,2",
        "--repeats",
        "1",
        "--report",
        "json",
    ])
    .ok()
    .json();
    assert_eq!(u64_of(&r, "rows"), 270);
    assert_eq!(u64_of(&r, "repeats"), 1);
    let factors = r["factors"].as_array().expect("factors is an array");
    let got: Vec<u64> = factors
        .iter()
        .map(|f| f["factor"].as_u64().unwrap())
        .collect();
    assert_eq!(got, vec![1, 2, 8], "sorted");
    let mut iterations = Vec::new();
    for f in factors {
        let f = f.as_object().unwrap();
        let factor = u64_of(f, "factor");
        assert_eq!(u64_of(f, "n"), 270 * factor);
        assert_eq!(u64_of(f, "n_positive"), 120 * factor);
        assert_eq!(u64_of(f, "n_negative"), 150 * factor);
        // k = ⌊τn⌋ + 1 on the up-sampled negatives.
        assert_eq!(u64_of(f, "k"), (15 * factor) + 1);
        assert!(bool_of(f, "converged"));
        assert!(f64_of(f, "relative_gap") <= 1e-6);
        assert!(f64_of(f, "median_seconds") > 0.0);
        assert_eq!(f["seconds"].as_array().unwrap().len(), 1);
        iterations.push(u64_of(f, "iterations"));
    }
    assert!(iterations.iter().all(|&i| i > 0), "{iterations:?}");
    let t = |i: usize| f64_of(factors[i].as_object().unwrap(), "median_seconds");
    let want = (t(2) / t(0)) / 8.0;
    assert!((f64_of(&r, "ratio_max_over_min") - want).abs() <= 1e-12 * want);
    assert!((f64_of(&r, "t8_over_t1") - t(2) / t(0)).abs() <= 1e-12 * want);

    // Without both 1 and 8 there is no t8_over_t1.
    let r = neyman(&[
        "bench",
        "tfpl",
        "--data",
        HEART,
        "--tau",
        "0.1",
        "--factors",
        "2,3",
        "--repeats",
        "1",
        "--report",
        "json",
    ])
    .ok()
    .json();
    assert_eq!(r["t8_over_t1"], Value::Null);
    assert!(f64_of(&r, "ratio_max_over_min") > 0.0);

    for bad in [
        &["--tau", "0.1", "--factors", "0,1"][..],
        &["--tau", "0.1", "--repeats", "0"],
        &["--tau", "0.1", "--reg", "0"],
        &["--tau", "1.5"],
    ] {
        let mut args = vec!["bench", "tfpl", "--data", HEART];
        args.extend_from_slice(bad);
        let run = neyman(&args).code(2);
        assert!(!run
            .one_error_line()
            .contains("cannot be used multiple times"));
    }
    neyman(&[
        "bench",
        "tfpl",
        "--data",
        "/nonexistent.csv",
        "--tau",
        "0.1",
    ])
    .code(1);
}

// ---------------------------------------------------------------------------------------------
// prior
// ---------------------------------------------------------------------------------------------

const SPAMBASE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/spambase.csv.gz");

/// The JSON report of `neyman COMMAND` on spambase made PU (30 % of the spam labelled by
/// `seed`) with the `extra` flags.
fn spambase_pu(command: &str, seed: &str, extra: &[&str]) -> serde_json::Map<String, Value> {
    let mut args = vec![
        command,
        "--data",
        SPAMBASE,
        "--pu-labeled-fraction",
        "0.3",
        "--seed",
        seed,
        "--report",
        "json",
    ];
    args.extend_from_slice(extra);
    neyman(&args).ok().json()
}

/// `neyman prior` on spambase made PU (30 % of the spam labelled): on three seeds the true share
/// of spam among the unlabeled rows lies in the reported interval, the upper end is informative
/// (below 0.5 where π ≈ 0.31) and the estimate is near π. The lower end rests on the anchor
/// assumption and DKW bands at δ/4; it is often 0 here, so only its validity is asserted.
#[test]
fn prior_brackets_the_true_share_on_spambase() {
    for seed in ["0", "1", "2"] {
        let report = spambase_pu("prior", seed, &[]);
        let (lower, upper) = (
            f64_of(&report, "prior_lower_bound"),
            f64_of(&report, "prior_upper_bound"),
        );
        let truth = f64_of(&report, "prior_true");
        let estimate = f64_of(&report, "prior_estimate");
        assert!((0.30..0.33).contains(&truth), "{report:?}");
        assert!(lower <= truth && truth <= upper, "{report:?}");
        assert!(lower >= 0.0 && upper < 0.5, "{report:?}");
        assert!((estimate - truth).abs() < 0.1, "{report:?}");
        assert_eq!(f64_of(&report, "delta"), 0.05);
        assert_eq!(f64_of(&report, "anchor"), 0.2);
        assert_eq!(u64_of(&report, "calibration_positives"), 272);
        assert!(u64_of(&report, "calibration_unlabeled") > 2000);
        assert!(bool_of(&report, "converged"));
        assert_eq!(report["algorithm"], "tfpl");
    }
}

/// `train --prior-min auto --prior-max auto` on spambase made PU (30 % of the spam labelled):
/// the report gives the prior bounds taken from the calibration rows, the true share of spam
/// among the unlabeled rows (from `neyman prior` on the same relabelling) lies between them, the
/// certificate ran at δ/2 and its threshold is usable.
#[test]
fn train_with_auto_prior_ends_reports_bounds_around_the_true_share() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = dir.path().join("auto.model");
    let train = |seed: &str, prior_min: &str, prior_max: &str| {
        let flags = ["--algo", "tfpl", "--tau", "0.1", "--out", s(&model)];
        let prior = ["--prior-min", prior_min, "--prior-max", prior_max];
        spambase_pu("train", seed, &[&flags[..], &prior[..]].concat())
    };
    for seed in ["0", "1"] {
        let truth = f64_of(&spambase_pu("prior", seed, &[]), "prior_true");
        let report = train(seed, "auto", "auto");
        let (lower, estimate, upper) = (
            f64_of(&report, "prior_lower_bound"),
            f64_of(&report, "prior_estimate"),
            f64_of(&report, "prior_upper_bound"),
        );
        assert!(lower <= estimate && estimate <= upper, "{report:?}");
        assert!(
            lower <= truth && truth <= upper,
            "truth {truth}: {report:?}"
        );
        assert!(upper < 0.5, "an informative upper end: {report:?}");
        assert_eq!(report["threshold_method"], "pu-umbrella");
        assert_eq!(
            f64_of(&report, "delta"),
            0.025,
            "the certificate's share of δ"
        );
        assert!(f64_of(&report, "tpr_estimate") > 0.0, "{report:?}");
    }
    // Without `auto` the report has no prior fields.
    let report = train("0", "0.25", "0.4");
    assert!(!report.contains_key("prior_estimate"), "{report:?}");
}

/// `--prior-min`/`--prior-max` take a number in (0, 1) or `auto`; anything else is a usage
/// error naming the flag (train and eval).
#[test]
fn prior_end_flags_refuse_anything_but_a_unit_number_or_auto() {
    for (command, flag, value) in [
        ("train", "--prior-min", "automatic"),
        ("train", "--prior-max", "1.5"),
        ("eval", "--prior-min", "x"),
    ] {
        let run = neyman(&[
            command, "--algo", "tfpl", "--data", HEART, "--tau", "0.1", flag, value,
        ]);
        assert_eq!(run.code, 2, "`{}`: {}", run.line, run.stderr);
        assert!(
            run.stderr.contains(flag) && run.stderr.contains("\"auto\""),
            "{}",
            run.stderr
        );
    }
}

/// Bad settings of `neyman prior` are usage errors naming the flag.
#[test]
fn prior_rejects_bad_settings() {
    let line = |extra: &[&str]| {
        let mut args = vec!["prior", "--data", HEART, "--pu-labeled-fraction", "0.3"];
        args.extend_from_slice(extra);
        let run = neyman(&args);
        assert_eq!(run.code, 2, "`{}`: {}", run.line, run.stderr);
        run.one_error_line().to_string()
    };
    assert!(line(&["--delta", "1.5"]).contains("delta"));
    assert!(line(&["--anchor", "0"]).contains("anchor"));
    assert!(line(&["--algo", "usmo", "--prior", "0.4"]).contains("--lambda"));
    assert!(line(&["--calibration-fraction", "1.2"]).contains("fraction"));
}

/// `--threshold none`: train makes a ranking-only model (no threshold, every row trains, as
/// without `--tau`), eval refuses it (there is nothing to measure) naming the flag.
#[test]
fn threshold_none_trains_a_ranking_only_model_and_eval_refuses_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = dir.path().join("rank.model");
    train_heart(&model, &["--tau", "0.05", "--threshold", "none"]).ok();
    let inspect = neyman(&["model", "inspect", s(&model)]).ok().json();
    assert_eq!(inspect["threshold"], Value::Null, "{inspect:?}");
    let plain = dir.path().join("plain.model");
    train_heart(&plain, &[]).ok();
    let scores = |m: &Path| score_to(m, HEART, &dir.path().join("s.csv"));
    assert_eq!(
        scores(&model),
        scores(&plain),
        "the same scorer as training without --tau"
    );
    // τ-FPL without a threshold ranks at --tau, as with --rank-tau.
    let tfpl = |out: &Path, extra: &[&str]| {
        let mut args = vec!["train", "--algo", "tfpl", "--data", HEART, "--out", s(out)];
        args.extend_from_slice(extra);
        neyman(&args).ok();
    };
    let ranked = dir.path().join("tfpl-none.model");
    tfpl(&ranked, &["--tau", "0.1", "--threshold", "none"]);
    let inspect = neyman(&["model", "inspect", s(&ranked)]).ok().json();
    assert_eq!(inspect["threshold"], Value::Null, "{inspect:?}");
    let explicit = dir.path().join("tfpl-rank.model");
    tfpl(
        &explicit,
        &["--tau", "0.1", "--rank-tau", "0.1", "--threshold", "none"],
    );
    assert_eq!(scores(&ranked), scores(&explicit));
    let eval = neyman(&[
        "eval",
        "--algo",
        "tfpl",
        "--data",
        HEART,
        "--tau",
        "0.05",
        "--threshold",
        "none",
    ]);
    assert_eq!(eval.code, 2, "{}", eval.stderr);
    assert!(eval.one_error_line().contains("--threshold none"));
}

/// pima at τ = 5 %: ranking at τ the exact τ-FPL optimum is w = 0 (reported degenerate, a
/// constant that certifies nothing useful); the default `--rank-tau auto` searches τ, 2τ, … 0.5
/// on held-back training rows and trains a scorer that flags positives at a certified FPR.
#[test]
fn train_rank_tau_auto_leaves_a_depth_with_a_constant_optimum() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("m.model");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "train", "--algo", "tfpl", "--data", PIMA, "--tau", "0.05", "--seed", "1", "--out",
        ];
        args.push(s(&out));
        args.extend_from_slice(extra);
        neyman(&args)
    };
    let train = |extra: &[&str]| run(&[&["--report", "json"], extra].concat()).ok().json();
    let fixed_run = run(&["--report", "json", "--rank-tau", "0.05"]).ok();
    assert!(
        fixed_run.stderr.contains("the model is degenerate"),
        "a constant model is not written silently: {}",
        fixed_run.stderr
    );
    let fixed = fixed_run.json();
    assert_eq!(fixed["degenerate"], true, "{fixed:?}");
    assert_eq!(fixed["rank_tau"], 0.05);
    assert!(fixed.get("rank_tau_search").is_none());
    let auto = train(&[]);
    let without_time = |mut report: serde_json::Map<String, Value>| {
        report.remove("train_seconds");
        report
    };
    assert_eq!(
        without_time(auto.clone()),
        without_time(train(&["--rank-tau", "auto"])),
        "auto is the default"
    );
    assert_eq!(auto["degenerate"], false, "{auto:?}");
    assert!(!run(&[]).ok().stderr.contains("degenerate"));
    let search = &auto["rank_tau_search"];
    assert_eq!(search["criterion"], "validation");
    let tried = search["tried"].as_array().expect("tried");
    let depths: Vec<f64> = tried
        .iter()
        .filter_map(|t| t["rank_tau"].as_f64())
        .collect();
    assert_eq!(depths, [0.05, 0.1, 0.2, 0.4, 0.5]);
    assert_eq!(tried[0]["degenerate"], true);
    assert_eq!(tried[0]["validation_tpr"], 0.0);
    let chosen = search["rank_tau"].as_f64().expect("chosen");
    assert_eq!(auto["rank_tau"].as_f64(), Some(chosen));
    let best = tried
        .iter()
        .filter_map(|t| t["validation_tpr"].as_f64())
        .fold(0.0, f64::max);
    let at_chosen = tried
        .iter()
        .find(|t| t["rank_tau"].as_f64() == Some(chosen))
        .expect("chosen depth tried");
    assert_eq!(at_chosen["validation_tpr"].as_f64(), Some(best));
    assert!(f64_of(&auto, "fpr_bound") <= 0.05);
    assert!(f64_of(&auto, "tpr_estimate") > 0.1, "{auto:?}");
    let bad = run(&["--rank-tau", "deep"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("auto"), "{}", bad.stderr);
}

/// Issue 22: `score` on a labelled file reports like svm-predict — accuracy, FPR and TPR at
/// the model's threshold on stderr, as a JSON object with `--report json` — with counts that
/// match the flags it wrote; piped into `head` it ends quietly with exit 0.
#[test]
fn score_reports_accuracy_fpr_and_tpr_on_a_labelled_file_and_a_closed_pipe_is_no_error() {
    const SPAM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/spambase.csv.gz");
    let dir = TempDir::new().unwrap();
    let model = dir.path().join("m.nmd");
    neyman(&[
        "train",
        "--algo",
        "tfpl",
        "--data",
        SPAM,
        "--tau",
        "0.05",
        "--out",
        s(&model),
    ])
    .ok();
    let out = dir.path().join("scores.csv");
    let run = neyman(&[
        "score",
        "--model",
        s(&model),
        "--data",
        SPAM,
        "--out",
        s(&out),
        "--report",
        "json",
    ])
    .ok();
    let report: serde_json::Value = serde_json::from_str(run.stderr.trim()).expect("JSON report");
    // The truth: spambase's label column (1 spam, -1 not), in row order like the scores.
    let text = std::fs::read_to_string(&out).expect("scores");
    let flagged: Vec<bool> = text
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next() == Some("true"))
        .collect();
    let truth: Vec<bool> = {
        use std::io::Read;
        let mut csv = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(SPAM).expect("data"))
            .read_to_string(&mut csv)
            .expect("gzip");
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().expect("header").split(',').collect();
        let at = header
            .iter()
            .position(|h| *h == "label")
            .expect("label column");
        lines.map(|l| l.split(',').nth(at) == Some("1")).collect()
    };
    assert_eq!(flagged.len(), truth.len());
    let count = |want_truth: bool, want_flag: bool| {
        truth
            .iter()
            .zip(&flagged)
            .filter(|(t, f)| **t == want_truth && **f == want_flag)
            .count() as u64
    };
    let (tp, fp) = (count(true, true), count(false, true));
    let (positives, negatives) = (tp + count(true, false), fp + count(false, false));
    assert_eq!(report["true_positives"], tp);
    assert_eq!(report["false_positives"], fp);
    assert_eq!(report["positives"], positives);
    assert_eq!(report["negatives"], negatives);
    let fpr = report["fpr"].as_f64().expect("fpr");
    assert!((fpr - fp as f64 / negatives as f64).abs() < 1e-12);
    assert!(
        fpr < 0.08 && report["tpr"].as_f64().expect("tpr") > 0.5,
        "{report}"
    );

    let text = neyman(&["score", "--model", s(&model), "--data", SPAM])
        .ok()
        .stderr;
    assert!(text.starts_with("Accuracy = "), "{text}");
    assert!(
        text.contains(&format!("FPR = {:.2}% ({fp}/{negatives})", 100.0 * fpr)),
        "{text}"
    );

    let piped = Command::new("bash")
        .args([
            "-c",
            &format!(
                "set -o pipefail; {BIN} score --model {} --data {SPAM} | head -2",
                s(&model)
            ),
        ])
        .output()
        .expect("bash");
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(piped.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&piped.stdout).lines().count(), 2);
    assert!(!stderr.contains("error"), "{stderr}");
}

/// Issue 22: shell completions for bash, zsh and fish, and a man page with one section per
/// subcommand, generated from the same clap definition as `--help`.
#[test]
fn completions_and_the_man_page_cover_every_subcommand() {
    let subcommands = [
        "train", "score", "eval", "prior", "model", "bench", "run", "replay", "config", "record",
        "stream",
    ];
    for shell in ["bash", "zsh", "fish"] {
        let script = neyman(&["completions", shell]).ok().stdout;
        for sub in subcommands {
            assert!(script.contains(sub), "{shell}: {sub}");
        }
        assert!(script.contains("pu-labeled-fraction"), "{shell}");
    }
    assert_eq!(neyman(&["completions", "tcsh"]).code, 2);
    let man = neyman(&["man"]).ok().stdout;
    assert!(
        man.starts_with(".ie") || man.contains(".TH neyman 1"),
        "{}",
        &man[..200]
    );
    for sub in subcommands {
        assert!(man.contains(&format!(".TH neyman-{sub} 1")), "man: {sub}");
    }
}
