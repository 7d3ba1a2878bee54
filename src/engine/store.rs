//! Persistence of accepted models and of the model-version counter in the state directory.
//!
//! Layout of `state.dir`:
//! - `version`: the highest model version ever issued, in decimal. [`ModelStore::next_version`]
//!   writes the new value (atomically) *before* returning it, so a version is never issued twice,
//!   even across a crash between issuing and saving.
//! - `models/model-<version, 20 digits>.nmd`: one file per accepted model, in the one model
//!   file format of [`crate::learn::model`] (the model with its [`Provenance`]); the newest
//!   `keep` files are kept. The zero padding makes name order version order. Files an earlier
//!   release wrote (`NEYMANDM` version 2) are read as well.
//! - `models/model-<version, 20 digits>.threshold.json`: the newest fresh threshold of that
//!   model ([`crate::config::RecalibrateConfig`]), `{"version", "threshold_version",
//!   "threshold"}`, so a restart resumes the threshold that followed the drift rather than
//!   the one calibrated at training. Written at most once a second and at the end of a run
//!   ([`crate::engine::machine::Engine`]); one that does not parse, names another model or
//!   holds a non-finite threshold is ignored with a warning.
//! - `models/model-<version, 20 digits>.heldout.json`: with `model.calibration = "recent"`, the
//!   ids that model's snapshot held out to calibrate (a JSON array), so a restarted daemon
//!   still knows which events it never trained on. Missing or unreadable: they count as
//!   trained on, with a warning.
//! - `engine.json`: the engine's state that is not a model's, [`EngineState`]: the event time
//!   from which fresh thresholds take their negatives after a detected change, so a restart
//!   (a crash included: it is written when it changes) keeps the cut. Missing (a state
//!   directory of an earlier release) or unreadable: no cut, with a warning when unreadable.
//!   Fields are only ever added, each with a default, so older files keep loading.
//!
//! Every write is atomic ([`crate::files`]). A reader therefore sees either the old file or the
//! whole new one; a file that still fails its checksum (disk fault, manual edit), has no
//! provenance or a layout this build does not read is skipped with a warning and the previous
//! one is used.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::codec::CodecError;
use crate::files::write_atomic;
use crate::learn::model::{self, Model, ModelError, Provenance};
use crate::learn::threshold::ThresholdResult;

/// The file of a model's newest fresh threshold.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FreshThreshold {
    version: u64,
    threshold_version: u64,
    threshold: ThresholdResult,
}

/// The engine's persisted state beside the models (`engine.json`). Every field has a default:
/// a file of an earlier release, without it, loads.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineState {
    /// After a detected change, fresh thresholds take only negatives from this event time
    /// (milliseconds) on ([`crate::engine::machine::Engine`]); `None`: every negative.
    #[serde(default)]
    pub calibration_since: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Corrupt { path: String, message: String },
}

impl StoreError {
    fn io(path: &Path, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    fn corrupt(path: &Path, message: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            path: path.display().to_string(),
            message: message.into(),
        }
    }
}

/// A persisted model with its provenance, which the daemon needs (its version, training time
/// and configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredModel {
    pub meta: Provenance,
    pub model: Model,
    /// Which of this model's thresholds `model` holds: 0 is the one calibrated when it was
    /// trained (the one in its file), and each fresh threshold between retrains
    /// ([`crate::config::RecalibrateConfig`]) counts up. The newest is persisted beside the
    /// model file ([`ModelStore::save_threshold`]).
    pub threshold_version: u64,
}

impl StoredModel {
    /// A model with its trained threshold (`threshold_version` 0).
    pub fn new(meta: Provenance, model: Model) -> StoredModel {
        StoredModel {
            meta,
            model,
            threshold_version: 0,
        }
    }

    /// Points the active-model gauges at this model.
    pub fn publish(&self, metrics: &crate::telemetry::Metrics) {
        metrics.set_active(
            self.meta.version,
            self.model.algorithm(),
            self.threshold_version,
            self.meta.trained_at_ms,
            self.model.threshold(),
        );
    }

    /// The model without its warm-start state ([`Model::scoring_only`]); metadata unchanged.
    pub fn scoring_only(&self) -> StoredModel {
        StoredModel {
            meta: self.meta.clone(),
            model: self.model.scoring_only(),
            threshold_version: self.threshold_version,
        }
    }

    /// The model-topic value: the scoring-only model's file bytes, gzip-compressed.
    pub fn to_wire(&self) -> Result<Vec<u8>, ModelError> {
        use std::io::Write;
        let bytes = self.scoring_only().to_file_bytes()?;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&bytes)
            .and_then(|()| gz.finish())
            .map_err(|e| CodecError::Decode(format!("compressing the model: {e}")).into())
    }

    /// Reads a model-topic value (of this release or an earlier one); at most `max_bytes` are
    /// decompressed.
    pub fn from_wire(bytes: &[u8], max_bytes: u64) -> Result<StoredModel, ModelError> {
        use std::io::Read;
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .take(max_bytes.saturating_add(1))
            .read_to_end(&mut raw)
            .map_err(|e| CodecError::Decode(format!("decompressing the model: {e}")))?;
        if raw.len() as u64 > max_bytes {
            return Err(CodecError::Decode(format!(
                "the model decompresses to more than {max_bytes} bytes"
            ))
            .into());
        }
        StoredModel::from_file_bytes(&raw)
    }

    /// The bytes of this model's file ([`model::to_file_bytes`] with the provenance).
    pub fn to_file_bytes(&self) -> Result<Vec<u8>, ModelError> {
        model::to_file_bytes(&self.model, Some(&self.meta))
    }

    /// Reads a model file of any layout [`model::from_file_bytes`] reads; one without
    /// provenance is an error.
    pub fn from_file_bytes(bytes: &[u8]) -> Result<StoredModel, ModelError> {
        let file = model::from_file_bytes(bytes)?;
        let meta = file.provenance.ok_or(ModelError::NoProvenance)?;
        Ok(StoredModel::new(meta, file.model))
    }
}

/// A model file that could not be used on start, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct ModelStore {
    dir: PathBuf,
    keep: usize,
}

impl ModelStore {
    /// Opens (creating when missing) `dir` and `dir/models`; keeps the newest `keep` models.
    /// A version counter that is not a number, or that can issue no further version, is an
    /// error now rather than at the first retrain (which would fail every time while the
    /// daemon looked healthy).
    pub fn open(dir: &Path, keep: usize) -> Result<ModelStore, StoreError> {
        let models = dir.join("models");
        std::fs::create_dir_all(&models).map_err(|e| StoreError::io(&models, e))?;
        let store = ModelStore {
            dir: dir.to_path_buf(),
            keep: keep.max(1),
        };
        store.issuable(store.last_version()?)?;
        Ok(store)
    }

    /// Deletes the temporary files a write interrupted by a crash left behind
    /// ([`crate::files::write_atomic`]'s `.<name>.tmp`); returns their paths. Only the holder of
    /// the state directory's lock may call it: another writer's file in flight looks the same.
    pub fn remove_orphans(&self) -> Result<Vec<PathBuf>, StoreError> {
        let mut removed = Vec::new();
        for dir in [self.dir.clone(), self.dir.join("models")] {
            let entries = std::fs::read_dir(&dir).map_err(|e| StoreError::io(&dir, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| StoreError::io(&dir, e))?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') && name.ends_with(".tmp") {
                    let path = entry.path();
                    std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
                    removed.push(path);
                }
            }
        }
        Ok(removed)
    }

    /// The version after `last`, or an error when the counter is at its end.
    fn issuable(&self, last: u64) -> Result<u64, StoreError> {
        last.checked_add(1).ok_or_else(|| StoreError::Corrupt {
            path: self.counter_path().display().to_string(),
            message: format!(
                "the model version counter is at its maximum {last}: no new version can be \
                 issued; move the state directory aside to start from 1"
            ),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn counter_path(&self) -> PathBuf {
        self.dir.join("version")
    }

    /// Where the model of `version` is (or would be) stored.
    pub fn model_path(&self, version: u64) -> PathBuf {
        self.beside_model(version, "nmd")
    }

    /// A file of model `version` in `models/`: `model-<version, 20 digits>.<suffix>`.
    fn beside_model(&self, version: u64, suffix: &str) -> PathBuf {
        self.dir
            .join("models")
            .join(format!("model-{version:020}.{suffix}"))
    }

    /// Where the newest fresh threshold of model `version` is (or would be) stored.
    pub fn threshold_path(&self, version: u64) -> PathBuf {
        self.beside_model(version, "threshold.json")
    }

    /// Where the ids model `version` held out are (or would be) stored.
    pub fn held_out_path(&self, version: u64) -> PathBuf {
        self.beside_model(version, "heldout.json")
    }

    /// Where the engine's own state is stored ([`EngineState`]).
    pub fn engine_state_path(&self) -> PathBuf {
        self.dir.join("engine.json")
    }

    /// Persists the engine's own state (atomically).
    pub fn save_engine_state(&self, state: &EngineState) -> Result<(), StoreError> {
        write_json(&self.engine_state_path(), state)
    }

    /// The engine's stored state; `None` when there is none.
    pub fn engine_state(&self) -> Result<Option<EngineState>, StoreError> {
        read_json(&self.engine_state_path())
    }

    /// Persists `stored`'s threshold as its model's newest fresh one (atomically).
    pub fn save_threshold(&self, stored: &StoredModel) -> Result<(), StoreError> {
        let Some(threshold) = stored.model.threshold() else {
            return Ok(());
        };
        let file = FreshThreshold {
            version: stored.meta.version,
            threshold_version: stored.threshold_version,
            threshold: threshold.clone(),
        };
        write_json(&self.threshold_path(stored.meta.version), &file)
    }

    /// Persists the ids model `version`'s snapshot held out (atomically).
    pub fn save_held_out(&self, version: u64, ids: &BTreeSet<String>) -> Result<(), StoreError> {
        write_json(&self.held_out_path(version), ids)
    }

    /// The ids model `version` held out; `None` when they were not stored.
    pub fn held_out(&self, version: u64) -> Result<Option<BTreeSet<String>>, StoreError> {
        read_json(&self.held_out_path(version))
    }

    /// The newest fresh threshold stored for model `version` and its threshold version;
    /// `None` when there is none. A file that does not parse, names another model or holds a
    /// non-finite threshold is an error naming it.
    pub fn fresh_threshold(
        &self,
        version: u64,
    ) -> Result<Option<(u64, ThresholdResult)>, StoreError> {
        let path = self.threshold_path(version);
        let Some(file) = read_json::<FreshThreshold>(&path)? else {
            return Ok(None);
        };
        if file.version != version {
            return Err(StoreError::corrupt(
                &path,
                format!(
                    "it is the threshold of model {}, not {version}",
                    file.version
                ),
            ));
        }
        if !file.threshold.threshold.is_finite() {
            return Err(StoreError::corrupt(
                &path,
                format!("the threshold {} is not finite", file.threshold.threshold),
            ));
        }
        Ok(Some((file.threshold_version, file.threshold)))
    }

    /// The highest version ever issued (0 when none), from the counter and the model files.
    pub fn last_version(&self) -> Result<u64, StoreError> {
        let path = self.counter_path();
        let from_counter = match std::fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse::<u64>()
                .map_err(|_| StoreError::Corrupt {
                    path: path.display().to_string(),
                    message: format!("{:?} is not a version number", text.trim()),
                })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(StoreError::io(&path, e)),
        };
        let from_files = self.scan(true)?.last().copied().unwrap_or(0);
        Ok(from_counter.max(from_files))
    }

    /// Issues the next version and persists it before returning.
    pub fn next_version(&self) -> Result<u64, StoreError> {
        let next = self.issuable(self.last_version()?)?;
        let path = self.counter_path();
        write_atomic(&path, format!("{next}\n").as_bytes())
            .map_err(|e| StoreError::io(&path, e))?;
        Ok(next)
    }

    /// Versions with a model file in service, ascending.
    pub fn versions(&self) -> Result<Vec<u64>, StoreError> {
        self.scan(false)
    }

    /// Versions with a file, in service or (with `retired`) retired too, ascending.
    fn scan(&self, retired: bool) -> Result<Vec<u64>, StoreError> {
        let models = self.dir.join("models");
        let entries = std::fs::read_dir(&models).map_err(|e| StoreError::io(&models, e))?;
        let mut versions = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| StoreError::io(&models, e))?;
            let name = entry.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("model-")) else {
                continue;
            };
            let version = rest
                .strip_suffix(".nmd")
                .or_else(|| retired.then(|| rest.strip_suffix(".nmd.retired")).flatten())
                .and_then(|s| s.parse::<u64>().ok());
            versions.extend(version);
        }
        versions.sort_unstable();
        Ok(versions)
    }

    /// Saves `stored` atomically, then deletes all but the newest `keep` model files.
    pub fn save(&self, stored: &StoredModel) -> Result<PathBuf, StoreError> {
        let path = self.model_path(stored.meta.version);
        let bytes = stored.to_file_bytes().map_err(|e| StoreError::Corrupt {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        write_atomic(&path, &bytes).map_err(|e| StoreError::io(&path, e))?;
        let versions = self.versions()?;
        let excess = versions.len().saturating_sub(self.keep);
        for &v in &versions[..excess] {
            let old = self.model_path(v);
            std::fs::remove_file(&old).map_err(|e| StoreError::io(&old, e))?;
            for beside in [self.threshold_path(v), self.held_out_path(v)] {
                match std::fs::remove_file(&beside) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(StoreError::io(&beside, e))
                    }
                    _ => {}
                }
            }
        }
        Ok(path)
    }

    /// Takes a model out of service (rollback): its file is renamed to `….nmd.retired`, so a
    /// restart does not resume it, but it stays on disk for inspection.
    pub fn retire(&self, version: u64) -> Result<(), StoreError> {
        let path = self.model_path(version);
        let mut retired = path.clone().into_os_string();
        retired.push(".retired");
        std::fs::rename(&path, &retired).map_err(|e| StoreError::io(&path, e))
    }

    /// Reads one model file.
    pub fn load(&self, version: u64) -> Result<StoredModel, StoreError> {
        let path = self.model_path(version);
        let bytes = std::fs::read(&path).map_err(|e| StoreError::io(&path, e))?;
        StoredModel::from_file_bytes(&bytes).map_err(|e| StoreError::Corrupt {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }

    /// The stored models usable now, newest first, with the files skipped on the way and why:
    /// corrupt ones, and ones `judge` refuses (trained under another configuration, say; see
    /// [`trained_under`]). A directory I/O error is an error; a bad file is not.
    pub fn load_usable(
        &self,
        judge: impl Fn(&StoredModel) -> Result<(), String>,
    ) -> Result<(Vec<StoredModel>, Vec<Skipped>), StoreError> {
        let mut usable = Vec::new();
        let mut skipped = Vec::new();
        for v in self.versions()?.into_iter().rev() {
            let reason = match self.load(v) {
                Ok(m) => match judge(&m) {
                    Ok(()) => {
                        usable.push(m);
                        continue;
                    }
                    Err(reason) => reason,
                },
                Err(e) => e.to_string(),
            };
            skipped.push(Skipped {
                path: self.model_path(v),
                reason,
            });
        }
        Ok((usable, skipped))
    }
}

/// Writes `value` as JSON to `path` (atomically).
fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(value).map_err(|e| StoreError::corrupt(path, e.to_string()))?;
    write_atomic(path, &bytes).map_err(|e| StoreError::io(path, e))
}

/// The JSON value in `path`; `None` when there is no such file.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::corrupt(path, e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

/// Whether `stored` was trained under one of `config_fingerprints` (the first is the current
/// one, named in the refusal).
pub fn trained_under(stored: &StoredModel, config_fingerprints: &[u64]) -> Result<(), String> {
    if config_fingerprints.contains(&stored.meta.config_fingerprint) {
        return Ok(());
    }
    Err(format!(
        "trained under another [model] configuration (fingerprint {:016x}, here {:016x})",
        stored.meta.config_fingerprint,
        config_fingerprints.first().copied().unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use ndarray::array;

    use super::*;
    use crate::data::{Rows, ScaleKind};
    use crate::learn::kernel::Kernel;
    use crate::learn::model::toy;

    fn stored(version: u64, fingerprint: u64) -> StoredModel {
        StoredModel::new(
            Provenance {
                trained_at_ms: 1_700_000_000_000 + version as i64,
                config_fingerprint: fingerprint,
                ..toy::provenance(version)
            },
            toy::usmo(Kernel::Linear, ScaleKind::None),
        )
    }

    #[test]
    fn the_wire_form_scores_alike_without_warm_start_state() {
        use crate::learn::Scorer;
        let full = stored(3, 9);
        let wire = full.to_wire().expect("encode");
        let back = StoredModel::from_wire(&wire, 1 << 20).expect("decode");
        assert_eq!(back.meta, full.meta);
        let Model::Usmo(e) = &back.model else {
            panic!("usmo")
        };
        assert!(e.fit.state.unlabeled.is_empty() && e.fit.state.support_ids.is_empty());
        let rows = Rows::dense(array![[0.3, 0.7], [1.0, -1.0], [0.0, 0.0]]);
        let (mut a, mut b) = (vec![0.0; 3], vec![0.0; 3]);
        full.model.score_batch(&rows, &mut a);
        back.model.score_batch(&rows, &mut b);
        assert_eq!(a, b);
        // Corrupt, truncated or oversized values are decode errors, not panics.
        assert!(StoredModel::from_wire(&wire[..wire.len() / 2], 1 << 20).is_err());
        assert!(StoredModel::from_wire(b"not gzip", 1 << 20).is_err());
        assert!(StoredModel::from_wire(&wire, 16).is_err());
    }

    #[test]
    fn versions_are_never_reused_and_only_the_newest_are_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ModelStore::open(dir.path(), 2).expect("open");
        assert_eq!(store.last_version().expect("read"), 0);
        for _ in 0..4 {
            let v = store.next_version().expect("issue");
            store.save(&stored(v, 7)).expect("save");
        }
        // Issued but never saved (e.g. a rejected retrain): still never reissued.
        assert_eq!(store.next_version().expect("issue"), 5);
        assert_eq!(store.versions().expect("list"), vec![3, 4]);
        let reopened = ModelStore::open(dir.path(), 2).expect("open");
        assert_eq!(reopened.next_version().expect("issue"), 6);
        let (usable, skipped) = reopened
            .load_usable(|m| trained_under(m, &[7]))
            .expect("load");
        assert_eq!(
            usable.iter().map(|m| m.meta.version).collect::<Vec<_>>(),
            vec![4, 3]
        );
        assert!(skipped.is_empty());
        assert_eq!(usable[0], stored(4, 7));
    }

    #[test]
    fn a_corrupt_newest_file_falls_back_to_the_previous_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ModelStore::open(dir.path(), 5).expect("open");
        for v in 1..=3 {
            store.save(&stored(v, 7)).expect("save");
        }
        let newest = dir
            .path()
            .join("models")
            .join(format!("model-{:020}.nmd", 3));
        let mut bytes = std::fs::read(&newest).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&newest, &bytes).expect("corrupt");
        let (usable, skipped) = store.load_usable(|m| trained_under(m, &[7])).expect("load");
        assert_eq!(usable[0].meta.version, 2);
        assert_eq!(skipped.len(), 1);
        assert!(
            skipped[0].reason.contains("checksum"),
            "{}",
            skipped[0].reason
        );
    }

    #[test]
    fn models_of_another_configuration_are_skipped_with_the_reason() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ModelStore::open(dir.path(), 5).expect("open");
        store.save(&stored(1, 7)).expect("save");
        store.save(&stored(2, 8)).expect("save");
        let (usable, skipped) = store.load_usable(|m| trained_under(m, &[7])).expect("load");
        assert_eq!(usable.len(), 1);
        assert_eq!(usable[0].meta.version, 1);
        assert!(skipped[0].reason.contains("another [model] configuration"));
    }

    #[test]
    fn a_model_file_without_provenance_is_skipped_with_the_reason() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ModelStore::open(dir.path(), 5).expect("open");
        store.save(&stored(1, 7)).expect("save");
        let trained = stored(2, 7).model.to_file_bytes().expect("encode");
        std::fs::write(store.model_path(2), trained).expect("write");
        let (usable, skipped) = store.load_usable(|m| trained_under(m, &[7])).expect("load");
        assert_eq!(usable, vec![stored(1, 7)]);
        assert_eq!(skipped.len(), 1);
        assert!(
            skipped[0].reason.contains("no provenance"),
            "{}",
            skipped[0].reason
        );
    }

    #[test]
    fn a_retired_model_is_not_resumed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ModelStore::open(dir.path(), 5).expect("open");
        store.save(&stored(1, 7)).expect("save");
        store.save(&stored(2, 7)).expect("save");
        store.retire(2).expect("retire");
        assert_eq!(store.versions().expect("list"), vec![1]);
        // Its version is still never reissued.
        assert_eq!(store.next_version().expect("issue"), 3);
    }

    /// A garbled counter is refused when the store opens, not at the first retrain; so is a
    /// counter that can issue no further version (it wrapped to 0).
    #[test]
    fn a_garbled_or_exhausted_counter_is_refused_on_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (text, says) in [
            ("twelve", "not a version number"),
            ("18446744073709551615\n", "at its maximum"),
            ("18446744073709551616\n", "not a version number"),
        ] {
            std::fs::write(dir.path().join("version"), text).expect("write");
            let e = ModelStore::open(dir.path(), 5).expect_err(text).to_string();
            assert!(e.contains(says) && e.contains("version"), "{text}: {e}");
        }
        std::fs::write(dir.path().join("version"), "18446744073709551614\n").expect("write");
        let store = ModelStore::open(dir.path(), 5).expect("one version left");
        assert_eq!(store.next_version().expect("the last"), u64::MAX);
        let e = store.next_version().expect_err("none left").to_string();
        assert!(e.contains("at its maximum"), "{e}");
    }

    /// The temporary files of interrupted writes are removed; nothing else is.
    #[test]
    fn orphaned_temporary_files_are_removed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ModelStore::open(dir.path(), 5).expect("open");
        store.save(&stored(1, 7)).expect("save");
        let orphans = [
            dir.path().join(".version.tmp"),
            dir.path()
                .join("models")
                .join(format!(".model-{:020}.nmd.tmp", 2)),
        ];
        for o in &orphans {
            std::fs::write(o, b"half").expect("write");
        }
        std::fs::write(dir.path().join("notes.tmp"), b"mine").expect("write");
        let mut removed = store.remove_orphans().expect("clean");
        removed.sort();
        assert_eq!(removed, orphans.to_vec());
        assert!(dir.path().join("notes.tmp").exists());
        assert_eq!(store.versions().expect("list"), vec![1]);
    }

    #[test]
    fn a_garbled_counter_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = ModelStore::open(dir.path(), 5).expect("open");
        std::fs::write(dir.path().join("version"), "twelve").expect("write");
        let e = store.next_version().expect_err("garbled");
        assert!(e.to_string().contains("version"), "{e}");
        assert!(e.to_string().contains("twelve"), "{e}");
    }

    #[test]
    fn every_truncation_of_a_model_file_is_rejected() {
        let bytes = stored(1, 7).to_file_bytes().expect("encode");
        assert_eq!(
            StoredModel::from_file_bytes(&bytes).expect("decode"),
            stored(1, 7)
        );
        for cut in [0, 7, 20, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                StoredModel::from_file_bytes(&bytes[..cut]).is_err(),
                "cut {cut}"
            );
        }
    }
}
