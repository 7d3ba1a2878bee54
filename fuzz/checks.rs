//! What every fuzz target checks, shared by the libFuzzer targets (`fuzz/fuzz_targets/`, run
//! with `cargo +nightly fuzz run TARGET`) and by `tests/fuzz_corpus.rs`, which runs the same
//! checks over the committed corpus (`fuzz/corpus/TARGET/`) on stable in every test run.
//! Each check may return an error (the input is bad) but must never panic, and states what
//! must hold when the input is accepted.

use std::path::Path;

use neyman::config::LoadedConfig;
use neyman::engine::scoring::score_one;
use neyman::engine::store::StoredModel;
use neyman::stream::event::{parse_event, parse_event_with, EventLimits};
use neyman::stream::{Record, RecordReader};

/// The event parser, both paths (the fast dense scanner and the JSON reader): an event
/// accepted without a locked dimension is accepted again, identically, at its own dimension
/// and with `ts` optional; every accepted event has finite features within the limits.
pub fn event(data: &[u8]) {
    let limits = EventLimits::default();
    let Ok(event) = parse_event(data, None, &limits) else {
        return;
    };
    let dim = event.x.dim();
    assert!(dim >= 1 && dim <= limits.max_features, "dim {dim}");
    assert!(!event.id.is_empty() && event.id.len() <= limits.max_id_len);
    let again = parse_event(data, Some(dim), &limits).expect("accepted at its own dimension");
    assert_eq!(again, event);
    let (optional, had_ts) =
        parse_event_with(data, Some(dim), &limits, false).expect("accepted with ts optional");
    assert!(had_ts);
    assert_eq!(optional, event);
    if dim > 1 {
        assert!(parse_event(data, Some(dim - 1), &limits).is_err());
    }
}

/// One line of a recorded stream: an accepted record writes back to a line that reads as
/// the same record.
pub fn record_line(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(record) = Record::from_json_line(line) else {
        return;
    };
    let again = Record::from_json_line(&record.to_json_line()).expect("written back");
    assert_eq!(again, record);
}

/// A recorded-stream file (plain or gzip, by its first bytes): reading never panics, and
/// stops at the first error.
pub fn stream_file(data: &[u8], scratch: &Path) {
    let name = if data.starts_with(&[0x1f, 0x8b]) {
        "s.jsonl.gz"
    } else {
        "s.jsonl"
    };
    let path = scratch.join(name);
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok(reader) = RecordReader::open(&path) else {
        return;
    };
    for record in reader {
        if record.is_err() {
            break;
        }
    }
}

/// A model file: a loaded one scores a dense all-zero event of its dimension to a finite
/// number or a clear error, never a panic.
pub fn model_file(data: &[u8]) {
    let Ok(model) = StoredModel::from_file_bytes(data) else {
        return;
    };
    let n = model.meta.n_features;
    if n == 0 || n > 4096 {
        return;
    }
    let payload = format!(
        "{{\"id\":\"z\",\"ts\":1,\"x\":[{}]}}",
        vec!["0"; n].join(",")
    );
    let Ok(event) = parse_event(payload.as_bytes(), Some(n), &EventLimits::default()) else {
        return;
    };
    let _ = score_one(&model, &event);
}

/// A configuration file: loading gives a checked configuration or an error naming what.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/etc/neyman/fuzz.toml");
    if let Err(e) = LoadedConfig::from_str_with_env(text, path, std::iter::empty()) {
        assert!(!e.to_string().is_empty());
    }
}
