//! End-to-end tests of `neyman stream make`: channel counts follow the fractions, ids are
//! unique, time never goes back, reruns are byte-identical, cycling, errors, and the shipped
//! stream `data/streams/spambase.jsonl.gz` is exactly what the command in `data/README.md`
//! rebuilds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use neyman::stream::{parse_event, Channel, EventLimits, Record, RecordReader};
use serde_json::Value;

mod common;
use common::cli::neyman;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const HEART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/heart_statlog.csv");

fn make(out: &Path, extra: &[&str]) -> serde_json::Map<String, Value> {
    let out = out.to_str().unwrap();
    let mut args = vec!["stream", "make", "--out", out, "--report", "json"];
    args.extend_from_slice(extra);
    let run = neyman(&args);
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    match serde_json::from_str(run.stdout.trim()) {
        Ok(Value::Object(m)) => m,
        _ => panic!("not one JSON object: {}", run.stdout),
    }
}

fn records(path: &Path) -> Vec<Record> {
    RecordReader::open(path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn count(records: &[Record], channel: Channel) -> usize {
    records.iter().filter(|r| r.channel == channel).count()
}

/// Checks ids (unique, equal to the key), time order and the true labels; returns the number
/// of positive-labelled events on each channel.
fn check_stream(records: &[Record]) -> [usize; 3] {
    let mut ids = BTreeSet::new();
    let mut positives = [0; 3];
    for (k, r) in records.iter().enumerate() {
        let e = parse_event(&r.payload, Some(13), &EventLimits::default()).unwrap();
        assert_eq!(r.key.as_deref(), Some(e.id.as_str()));
        assert_eq!(r.ts, e.ts);
        assert!(ids.insert(e.id.clone()), "duplicate id {}", e.id);
        if k > 0 {
            assert!(r.ts >= records[k - 1].ts, "ts goes back at {k}");
        }
        let label = e.meta.as_ref().unwrap()["label"].as_i64().unwrap();
        match r.channel {
            Channel::Positive => assert_eq!(label, 1),
            Channel::Negative => assert_eq!(label, -1),
            Channel::Unlabeled => assert!(label == 1 || label == -1),
        }
        let slot = Channel::ALL.iter().position(|&c| c == r.channel).unwrap();
        positives[slot] += usize::from(label == 1);
    }
    positives
}

#[test]
fn channel_counts_follow_the_fractions() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("heart.jsonl");
    // heart_statlog: 120 positives, 150 negatives.
    let report = make(
        &out,
        &[
            "--data",
            HEART,
            "--pu-labeled-fraction",
            "0.25",
            "--negative-feedback-fraction",
            "0.1",
            "--seed",
            "3",
            "--rate",
            "5",
        ],
    );
    let recs = records(&out);
    assert_eq!(recs.len(), 270);
    assert_eq!(count(&recs, Channel::Positive), 30);
    assert_eq!(count(&recs, Channel::Negative), 15);
    assert_eq!(count(&recs, Channel::Unlabeled), 225);
    let positives = check_stream(&recs);
    assert_eq!(positives, [30, 90, 0]);
    assert_eq!(report["events"], 270);
    assert_eq!(report["positive"], 30);
    assert_eq!(report["negative"], 15);
    assert_eq!(report["unlabeled"], 225);
    assert_eq!(report["unlabeled_true_positive"], 90);
    assert_eq!(report["unlabeled_true_negative"], 135);
    assert_eq!(report["first_ts"], 1_767_225_600_000_i64);
    assert_eq!(recs[0].ts, 1_767_225_600_000);
    // 269 gaps of mean 200 ms: about 54 s.
    let span = recs[269].ts - recs[0].ts;
    assert!((40_000..70_000).contains(&span), "{span}");
    // Every row appears once, as `<row>-0`.
    let rows: BTreeSet<String> = recs
        .iter()
        .map(|r| {
            r.key
                .clone()
                .unwrap()
                .strip_suffix("-0")
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(rows, (0..270).map(|i| i.to_string()).collect());
}

#[test]
fn reruns_are_byte_identical_and_the_seed_matters() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, seed: &str| {
        let out = dir.path().join(name);
        make(
            &out,
            &[
                "--data",
                HEART,
                "--pu-labeled-fraction",
                "0.3",
                "--negative-feedback-fraction",
                "0.2",
                "--seed",
                seed,
                "--rate",
                "100",
                "--events",
                "500",
            ],
        );
        std::fs::read(out).unwrap()
    };
    let a = run("a.jsonl.gz", "9");
    assert_eq!(&a[..2], &[0x1f, 0x8b]);
    assert_eq!(a, run("b.jsonl.gz", "9"));
    assert_ne!(a, run("c.jsonl.gz", "10"));
}

#[test]
fn events_cycle_the_rows_with_fresh_ids() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cycled.jsonl.gz");
    let report = make(
        &out,
        &[
            "--data",
            HEART,
            "--pu-labeled-fraction",
            "0.5",
            "--negative-feedback-fraction",
            "0.2",
            "--rate",
            "1000",
            "--events",
            "600",
            "--start-ms",
            "1000",
        ],
    );
    let recs = records(&out);
    assert_eq!(recs.len(), 600);
    assert_eq!(report["events"], 600);
    assert_eq!(recs[0].ts, 1000);
    check_stream(&recs);
    // Two full cycles of 270 (60 positive + 30 negative feedback each), then 60 events.
    for cycle in 0..2 {
        let part = &recs[270 * cycle..270 * (cycle + 1)];
        assert!(part
            .iter()
            .all(|r| r.key.as_ref().unwrap().ends_with(&format!("-{cycle}"))));
        assert_eq!(count(part, Channel::Positive), 60);
        assert_eq!(count(part, Channel::Negative), 30);
    }
    assert!(recs[540..]
        .iter()
        .all(|r| r.key.as_ref().unwrap().ends_with("-2")));
}

/// `--drift prior` from half-way: the second half is marked drifted and holds a larger share
/// of positives (heart: 120 of 270, 44 %; with size 3 the odds grow 4×, to about 76 %); the
/// stream keeps its length, ids stay unique, and the same flags give the same bytes.
#[test]
fn a_drifting_stream_marks_its_drift_and_shifts_the_prior() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--data",
        HEART,
        "--pu-labeled-fraction",
        "0.3",
        "--rate",
        "10",
        "--events",
        "2000",
        "--drift",
        "prior",
        "--drift-size",
        "3",
        "--seed",
        "4",
    ];
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let report = make(&a, &flags);
    assert_eq!(report["events"], 2000);
    assert_eq!(report["drifted"], 1000);
    make(&b, &flags);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let records = records(&a);
    check_stream(&records);
    let share = |part: &[Record]| {
        let positives = part
            .iter()
            .filter(|r| {
                let e = parse_event(&r.payload, Some(13), &EventLimits::default()).unwrap();
                e.meta.as_ref().unwrap()["label"] == 1
            })
            .count();
        positives as f64 / part.len() as f64
    };
    let (before, after) = records.split_at(1000);
    assert!(
        (share(before) - 120.0 / 270.0).abs() < 0.03,
        "{}",
        share(before)
    );
    let odds = 4.0 * 120.0 / 150.0;
    let want = odds / (1.0 + odds);
    assert!((share(after) - want).abs() < 0.04, "{}", share(after));
}

#[test]
fn bad_flags_and_bad_data_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.jsonl");
    let out_s = out.to_str().unwrap();
    let base = ["stream", "make", "--data", HEART, "--out", out_s];
    for (extra, want) in [
        (
            vec!["--pu-labeled-fraction", "1.5", "--rate", "1"],
            "error: --pu-labeled-fraction must be in [0, 1], got 1.5",
        ),
        (
            vec!["--pu-labeled-fraction", "0.5", "--rate", "-2"],
            "error: --rate must be a positive number of events per second, got -2",
        ),
        (
            vec![
                "--pu-labeled-fraction",
                "0.5",
                "--rate",
                "1",
                "--events",
                "0",
            ],
            "error: --events must be at least 1",
        ),
        (
            vec![
                "--pu-labeled-fraction",
                "0.5",
                "--rate",
                "1",
                "--drift",
                "prior",
                "--at",
                "1.5",
            ],
            "error: --at must be in [0, 1), got 1.5",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(extra);
        let run = neyman(&args);
        assert_eq!((run.code, run.stderr.trim()), (2, want));
    }
    assert!(!out.exists());

    let pu = dir.path().join("pu.csv");
    std::fs::write(&pu, "a,b,label\n1,2,1\n3,4,0\n").unwrap();
    let run = neyman(&[
        "stream",
        "make",
        "--data",
        pu.to_str().unwrap(),
        "--pu-labeled-fraction",
        "0.5",
        "--rate",
        "1",
        "--out",
        out_s,
    ]);
    assert_eq!(run.code, 1);
    assert_eq!(
        run.stderr.trim(),
        format!(
            "error: {}: row \"1\" is unlabeled; stream make needs every label to be 1 or -1",
            pu.display()
        )
    );
    assert!(!out.exists());
    assert!(!dir.path().join(".x.jsonl.tmp").exists());
}

/// The `neyman stream make` line recorded in data/README.md, as arguments.
fn readme_command() -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("data/README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.trim_start().starts_with("neyman stream make "))
        .expect("data/README.md records the stream make command");
    line.split_whitespace().skip(1).map(str::to_owned).collect()
}

#[test]
fn the_shipped_stream_is_what_the_recorded_command_rebuilds() {
    let shipped = PathBuf::from(ROOT).join("data/streams/spambase.jsonl.gz");
    let mut args = readme_command();
    let at = args.iter().position(|a| a == "--out").unwrap();
    assert_eq!(args[at + 1], "data/streams/spambase.jsonl.gz");
    let dir = tempfile::tempdir().unwrap();
    let rebuilt = dir.path().join("spambase.jsonl.gz");
    args[at + 1] = rebuilt.to_str().unwrap().to_owned();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = neyman(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read(&rebuilt).unwrap(),
        std::fs::read(&shipped).unwrap(),
        "rebuild data/streams/spambase.jsonl.gz with the command in data/README.md"
    );
    // What data/README.md says about it.
    let recs = records(&shipped);
    assert_eq!(recs.len(), 4601);
    assert_eq!(count(&recs, Channel::Positive), 363);
    assert_eq!(count(&recs, Channel::Negative), 418);
    assert_eq!(count(&recs, Channel::Unlabeled), 3820);
    assert!(count(&recs[..1000], Channel::Positive) >= 50);
    assert!(std::fs::metadata(&shipped).unwrap().len() < 2 << 20);
}
