//! The fuzz targets' checks (fuzz/checks.rs) over their committed corpus (fuzz/corpus/), on
//! stable in every test run: the smoke run of each target. Fuzzing itself is
//! `cargo +nightly fuzz run TARGET` in fuzz/ (fuzz/README.md); what it finds is added to the
//! corpus, so it is checked here from then on.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

/// The corpus files of `target`; at least `min` of them.
fn corpus(target: &str, min: usize) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= min, "{target}: {} corpus files", files.len());
    files
        .iter()
        .map(|f| std::fs::read(f).expect("corpus file"))
        .collect()
}

#[test]
fn event_corpus() {
    for input in corpus("event", 10) {
        checks::event(&input);
    }
}

#[test]
fn record_line_corpus() {
    for input in corpus("record_line", 5) {
        checks::record_line(&input);
    }
}

#[test]
fn stream_file_corpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    for input in corpus("stream_file", 3) {
        checks::stream_file(&input, dir.path());
    }
}

#[test]
fn model_file_corpus() {
    for input in corpus("model_file", 3) {
        checks::model_file(&input);
    }
}

#[test]
fn config_corpus() {
    for input in corpus("config", 3) {
        checks::config(&input);
    }
}
