//! Model files written by earlier releases (`tests/fixtures/models/`, its README says how each
//! was made) still load and score exactly as recorded: through the library, the daemon's model
//! store, the models topic and the command line. Files written now use the one current layout.

use std::path::{Path, PathBuf};
use std::process::Command;

use neyman::data::Rows;
use neyman::engine::store::{trained_under, ModelStore, StoredModel};
use neyman::learn::model::{self, Model, ModelFile, Provenance};
use neyman::learn::Scorer;

const BIN: &str = env!("CARGO_BIN_EXE_neyman");

/// The feature rows of `probe.csv`, in order.
const PROBE: [[f64; 9]; 6] = [
    [4.0, 6.0, 6.0, 5.0, 7.0, 6.0, 7.0, 7.0, 3.0],
    [8.0, 7.0, 4.0, 4.0, 5.0, 3.0, 5.0, 10.0, 1.0],
    [10.0, 10.0, 7.0, 8.0, 7.0, 1.0, 10.0, 10.0, 3.0],
    [2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0],
    [5.0, 1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 1.0, 1.0],
    [4.0, 2.0, 4.0, 3.0, 2.0, 2.0, 2.0, 1.0, 1.0],
];

/// A fixture file and what it must give (the README's table).
struct Fixture {
    file: &'static str,
    scores: [f64; 6],
    threshold: Option<f64>,
    provenance: Option<Provenance>,
}

fn daemon_provenance() -> Provenance {
    Provenance {
        version: 1,
        trained_at_ms: 1_767_225_623_011,
        config_fingerprint: 3_399_956_146_604_509_514,
        n_features: 9,
        window_sizes: [40, 120, 80],
    }
}

const DAEMON_SCORES: [f64; 6] = [
    -0.9387800718810699,
    -0.9241921830359331,
    -0.9035244615592121,
    -1.0031718441090665,
    -1.0033641172914576,
    -1.0000821321221975,
];

fn fixtures() -> [Fixture; 3] {
    [
        Fixture {
            file: "usmo-v3.nmd",
            scores: [
                -0.05081653709871504,
                -0.04470969497994249,
                -0.048319049245754864,
                -0.9375784226228555,
                -0.7687359354617949,
                -0.5059477631180171,
            ],
            threshold: None,
            provenance: None,
        },
        Fixture {
            file: "tfpl-v3.nmd",
            scores: [
                1.2536582174503637,
                1.1813937728920674,
                2.253349034880082,
                -1.2413902706203543,
                -0.892500950068866,
                -0.5513893403205322,
            ],
            threshold: Some(-0.7582555310488811),
            provenance: None,
        },
        Fixture {
            file: "daemon-v2.nmd",
            scores: DAEMON_SCORES,
            threshold: Some(-1.000569780874286),
            provenance: Some(daemon_provenance()),
        },
    ]
}

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/models")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The probe scores, checked to be the same one row at a time (the daemon's path) as in a batch.
fn probe_scores(model: &Model) -> [f64; 6] {
    let rows = Rows::dense(ndarray::Array2::from_shape_fn((6, 9), |(i, j)| PROBE[i][j]));
    let mut out = [0.0; 6];
    model.score_batch(&rows, &mut out);
    for (row, score) in PROBE.iter().zip(out) {
        assert_eq!(model.score_dense_row(row).to_bits(), score.to_bits());
    }
    out
}

fn assert_bits(got: [f64; 6], want: [f64; 6], what: &str) {
    assert_eq!(
        got.map(f64::to_bits),
        want.map(f64::to_bits),
        "{what}: {got:?} != {want:?}"
    );
}

#[test]
fn every_fixture_loads_and_scores_as_recorded() {
    for f in fixtures() {
        let file =
            model::from_file_bytes(&read(f.file)).unwrap_or_else(|e| panic!("{}: {e}", f.file));
        assert_bits(probe_scores(&file.model), f.scores, f.file);
        assert_eq!(
            file.model.threshold().map(|t| t.threshold.to_bits()),
            f.threshold.map(f64::to_bits),
            "{}",
            f.file
        );
        assert_eq!(file.provenance, f.provenance, "{}", f.file);
    }
}

#[test]
fn a_fixture_written_again_is_the_current_layout_and_reads_back_alike() {
    for f in fixtures() {
        let old = model::from_file_bytes(&read(f.file)).expect("read");
        let bytes = model::to_file_bytes(&old.model, old.provenance.as_ref()).expect("write");
        assert_eq!(&bytes[..8], model::MAGIC, "{}", f.file);
        assert_eq!(
            bytes[8..12],
            model::FORMAT_VERSION.to_le_bytes(),
            "{}",
            f.file
        );
        let again: ModelFile = model::from_file_bytes(&bytes).expect("read again");
        assert_eq!(again, old, "{}", f.file);
    }
}

#[test]
fn the_store_resumes_a_file_the_earlier_daemon_wrote_and_saves_the_current_layout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).expect("mkdir");
    std::fs::copy(
        fixture_path("daemon-v2.nmd"),
        models.join(format!("model-{:020}.nmd", 1)),
    )
    .expect("copy");
    let store = ModelStore::open(dir.path(), 5).expect("open");
    let provenance = daemon_provenance();
    let (usable, skipped) = store
        .load_usable(|m| trained_under(m, &[provenance.config_fingerprint]))
        .expect("load");
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(usable.len(), 1);
    assert_eq!(usable[0].meta, provenance);
    assert_bits(probe_scores(&usable[0].model), DAEMON_SCORES, "resumed");

    let version = store.next_version().expect("issue");
    assert_eq!(version, 2);
    let next = StoredModel::new(
        Provenance {
            version,
            ..provenance
        },
        usable[0].model.clone(),
    );
    let path = store.save(&next).expect("save");
    let bytes = std::fs::read(path).expect("read");
    assert_eq!(&bytes[..8], model::MAGIC);
    assert_eq!(bytes[8..12], model::FORMAT_VERSION.to_le_bytes());
    assert_eq!(store.load(2).expect("load"), next);
}

#[test]
fn a_models_topic_value_of_the_earlier_release_is_read() {
    let stored = StoredModel::from_wire(&read("daemon-v2.wire.gz"), 1 << 20).expect("decode");
    assert_eq!(stored.meta, daemon_provenance());
    assert_bits(probe_scores(&stored.model), DAEMON_SCORES, "wire");
    let Model::Usmo(entry) = &stored.model else {
        panic!("a usmo model")
    };
    assert!(entry.fit.state.unlabeled.is_empty() && entry.fit.state.support_ids.is_empty());

    // And the value written now reads back alike.
    let again =
        StoredModel::from_wire(&stored.to_wire().expect("encode"), 1 << 20).expect("decode");
    assert_eq!(again, stored);
}

#[test]
fn the_command_line_scores_every_fixture_as_recorded() {
    for f in fixtures() {
        let out = Command::new(BIN)
            .args(["score", "--model"])
            .arg(fixture_path(f.file))
            .arg("--data")
            .arg(fixture_path("probe.csv"))
            .output()
            .expect("run neyman");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{}: {stderr}", f.file);
        let text = String::from_utf8(out.stdout).expect("UTF-8");
        let scores: Vec<f64> = text
            .lines()
            .skip(1)
            .map(|line| {
                let score = line.split(',').nth(1).expect("a score column");
                score.parse().expect("a number")
            })
            .collect();
        let scores: [f64; 6] = scores.try_into().expect("six rows");
        assert_bits(scores, f.scores, f.file);
    }
}
