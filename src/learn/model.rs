//! Trained models, their data fingerprint, and the one model file format.
//!
//! # Model files
//!
//! Every model file, written by `neyman train` or by the daemon's model store, is
//! `codec::frame(MAGIC, FORMAT_VERSION, algorithm tag, bincode(ModelFile))`: the magic
//! `NEYMANMD`, format version 5, the algorithm tag (1 USMO, 2 τ-FPL, 3 CutS3VM), payload length
//! and CRC-32,
//! then the payload, so a truncated or corrupted file is rejected before decoding. The payload
//! is a [`ModelFile`]: an optional [`Provenance`] (present when the daemon trained the model;
//! `train` writes none), then the [`Model`].
//!
//! [`from_file_bytes`] also reads the layouts earlier releases wrote:
//! - `NEYMANMD` version 4: the layout of version 5, whose [`Model`] only added CutS3VM;
//! - `NEYMANMD` version 3 (`neyman train`): the payload is bincode(`Model`), no provenance;
//! - `NEYMANDM` version 2 (the daemon's model store): the payload is
//!   bincode((`Provenance`, `Model`)).
//!
//! Other versions of either (`NEYMANMD` 1 and 2, `NEYMANDM` 1) are refused with the version
//! named: retrain them. Bytes in, bytes out: reading and writing the file itself is the
//! caller's job.

use std::cell::RefCell;

use ndarray::{Array2, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::codec::{self, CodecError};
use crate::data::{Dataset, Label, RowRef, Rows, Scaler};
use crate::learn::kernel::KernelExpansion;
use crate::learn::s3vm::cut::CutS3vmModel;
use crate::learn::tfpl::TfplModel;
use crate::learn::threshold::ThresholdResult;
use crate::learn::usmo::UsmoModel;
use crate::learn::Scorer;

/// The first 8 bytes of every model file written now.
pub const MAGIC: &[u8; 8] = b"NEYMANMD";
/// The layout version written. Version 2 added τ-FPL models and the calibrated threshold;
/// version 3 added `newton_steps` to the USMO report; version 4 added the optional provenance
/// and replaced the daemon's own `NEYMANDM` files; version 5 added CutS3VM models (variants
/// are appended, so a version-4 payload decodes unchanged).
pub const FORMAT_VERSION: u32 = 5;
/// The `NEYMANMD` version `neyman train` wrote before [`FORMAT_VERSION`]: the model alone.
const MODEL_ONLY_VERSION: u32 = 3;
/// The magic and the one version of the model files the daemon's store wrote before
/// [`FORMAT_VERSION`]: provenance and model.
const DAEMON_MAGIC: &[u8; 8] = b"NEYMANDM";
const DAEMON_VERSION: u32 = 2;

/// Where a model the daemon trained came from: what the daemon knows about it besides the
/// model itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// Never reused, increasing in issue order.
    pub version: u64,
    /// Event time (epoch ms) of the newest event in the training windows: virtual time, so
    /// replays are reproducible.
    pub trained_at_ms: i64,
    /// Hash of what makes models interchangeable: algorithm, dimension and model parameters.
    /// On start only a model with the current fingerprint is resumed.
    pub config_fingerprint: u64,
    pub n_features: usize,
    /// Training events per channel (positive, unlabeled, negative) in the snapshot.
    pub window_sizes: [usize; 3],
}

/// What a model file holds: the model and, when the daemon trained it, its provenance.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModelFile {
    pub provenance: Option<Provenance>,
    pub model: Model,
}

/// [`ModelFile`] borrowed, for writing without copying the model; bincode encodes it as the
/// owned form.
#[derive(Serialize)]
struct ModelFileRef<'a> {
    provenance: Option<&'a Provenance>,
    model: &'a Model,
}

/// The bytes of a model file in the current layout: `model` with `provenance`, if any.
pub fn to_file_bytes(
    model: &Model,
    provenance: Option<&Provenance>,
) -> Result<Vec<u8>, ModelError> {
    let payload = codec::to_bytes(&ModelFileRef { provenance, model })?;
    Ok(codec::frame(MAGIC, FORMAT_VERSION, model.tag(), &payload))
}

/// Parses a model file of any layout listed in the module docs, rejecting a wrong magic, an
/// unsupported version, a wrong length or checksum, or a payload that is not the model its
/// algorithm tag says.
pub fn from_file_bytes(bytes: &[u8]) -> Result<ModelFile, ModelError> {
    let (tag, file) = if bytes.starts_with(DAEMON_MAGIC) {
        let frame = codec::unframe(bytes, DAEMON_MAGIC, DAEMON_VERSION..=DAEMON_VERSION)?;
        let (provenance, model) = codec::from_bytes(frame.payload)?;
        let file = ModelFile {
            provenance: Some(provenance),
            model,
        };
        (frame.tag, file)
    } else {
        let frame = codec::unframe(bytes, MAGIC, MODEL_ONLY_VERSION..=FORMAT_VERSION)?;
        let file = if frame.format_version == MODEL_ONLY_VERSION {
            ModelFile {
                provenance: None,
                model: codec::from_bytes(frame.payload)?,
            }
        } else {
            codec::from_bytes(frame.payload)?
        };
        (frame.tag, file)
    };
    if file.model.tag() != tag {
        return Err(ModelError::TagMismatch {
            tag,
            found: file.model.algorithm(),
        });
    }
    Ok(file)
}

/// A trained scorer of any algorithm, with what it was trained on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Model {
    Usmo(UsmoEntry),
    Tfpl(TfplEntry),
    CutS3vm(CutS3vmEntry),
}

/// A USMO model: the scaler fitted on its training rows, the fit itself (support vectors,
/// coefficients, bias, warm-start state, report) and the training data's fingerprint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsmoEntry {
    pub scaler: Scaler,
    pub fit: UsmoModel,
    pub tol: f64,
    pub fingerprint: Fingerprint,
    pub threshold: Option<ThresholdResult>,
}

/// A τ-FPL model: the scaler (which also divides by the largest training row norm, so
/// ‖x‖ ≤ 1 on the training rows), the fit, the training data's fingerprint and the threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TfplEntry {
    pub scaler: Scaler,
    pub fit: TfplModel,
    pub tol: f64,
    pub fingerprint: Fingerprint,
    pub threshold: Option<ThresholdResult>,
}

/// A CutS3VM model: the scaler (fitted on every training row, labelled and unlabeled), the fit
/// (w, w·μ_u, b, π, C_l, C_u, ε, the optional Nyström map and the report), the training
/// data's fingerprint and the threshold. `tol` is ε.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutS3vmEntry {
    pub scaler: Scaler,
    pub fit: CutS3vmModel,
    pub tol: f64,
    pub fingerprint: Fingerprint,
    pub threshold: Option<ThresholdResult>,
}

/// A summary of the training rows that identifies them (sizes and an FNV-1a hash of ids and
/// labels, and of the raw feature values a 64-bit word at a time, [`codec::Fnv1a::write_word`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub n_rows: usize,
    pub n_features: usize,
    pub n_positive: usize,
    pub n_unlabeled: usize,
    pub n_negative: usize,
    pub hash: u64,
}

impl Fingerprint {
    pub fn of(data: &Dataset) -> Fingerprint {
        let mut h = codec::Fnv1a::default();
        let mut dense = vec![0.0; data.rows.n_features()];
        for i in 0..data.len() {
            h.write(data.ids[i].as_bytes());
            h.write(&[0xff, data.labels[i].code() as u8]);
            data.rows.row(i).write_dense(&mut dense);
            for v in &dense {
                h.write_word(v.to_bits());
            }
        }
        Fingerprint {
            n_rows: data.len(),
            n_features: data.rows.n_features(),
            n_positive: data.count(Label::Positive),
            n_unlabeled: data.count(Label::Unlabeled),
            n_negative: data.count(Label::Negative),
            hash: h.finish(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("the model file says algorithm tag {tag} but holds a {found} model")]
    TagMismatch { tag: u8, found: &'static str },
    #[error(
        "the model file records no provenance (version, training time, configuration \
         fingerprint): it was written by `neyman train`, not by the daemon"
    )]
    NoProvenance,
}

impl Model {
    pub fn algorithm(&self) -> &'static str {
        match self {
            Model::Usmo(_) => "usmo",
            Model::Tfpl(_) => "tfpl",
            Model::CutS3vm(_) => "cuts3vm",
        }
    }

    fn tag(&self) -> u8 {
        match self {
            Model::Usmo(_) => 1,
            Model::Tfpl(_) => 2,
            Model::CutS3vm(_) => 3,
        }
    }

    pub fn scaler(&self) -> &Scaler {
        match self {
            Model::Usmo(m) => &m.scaler,
            Model::Tfpl(m) => &m.scaler,
            Model::CutS3vm(m) => &m.scaler,
        }
    }

    /// The calibrated threshold, if the model was trained with one.
    pub fn threshold(&self) -> Option<&ThresholdResult> {
        match self {
            Model::Usmo(m) => m.threshold.as_ref(),
            Model::Tfpl(m) => m.threshold.as_ref(),
            Model::CutS3vm(m) => m.threshold.as_ref(),
        }
    }

    /// The labelling this model gives `data`, ±1 per row: labelled rows keep their labels,
    /// unlabeled ones take its decision (its threshold, else score ≥ 0); `scores` receives
    /// every row's score. How `certify --compare-model` and the daemon's audit compare a
    /// model with the exact S3VM's optimum.
    pub fn labelling(&self, data: &Dataset, scores: &mut [f64]) -> Vec<f64> {
        self.score_batch(&data.rows, scores);
        let threshold = self.threshold();
        data.labels
            .iter()
            .zip(scores.iter())
            .map(|(&label, &score)| match label {
                Label::Unlabeled => {
                    let flagged = threshold.map_or(score >= 0.0, |t| t.is_positive(score));
                    if flagged {
                        1.0
                    } else {
                        -1.0
                    }
                }
                l => f64::from(l.code()),
            })
            .collect()
    }

    /// Replaces the calibrated threshold (a fresh one between retrains).
    pub fn set_threshold(&mut self, threshold: ThresholdResult) {
        match self {
            Model::Usmo(m) => m.threshold = Some(threshold),
            Model::Tfpl(m) => m.threshold = Some(threshold),
            Model::CutS3vm(m) => m.threshold = Some(threshold),
        }
    }

    /// The bytes of a model file holding this model without provenance (what `neyman train`
    /// writes); see [`to_file_bytes`].
    pub fn to_file_bytes(&self) -> Result<Vec<u8>, ModelError> {
        to_file_bytes(self, None)
    }

    pub fn expansion(&self) -> &KernelExpansion {
        match self {
            Model::Usmo(m) => &m.fit.expansion,
            Model::Tfpl(m) => &m.fit.expansion,
            Model::CutS3vm(m) => &m.fit.expansion,
        }
    }

    /// The model without its warm-start state, which only a trainer needs: USMO's per-sample
    /// σ and support ids, τ-FPL's duals. Scores and threshold are unchanged.
    pub fn scoring_only(&self) -> Model {
        let mut out = self.clone();
        match &mut out {
            Model::Usmo(e) => {
                e.fit.state.unlabeled = Vec::new();
                e.fit.state.support_ids = Vec::new();
            }
            Model::Tfpl(e) => {
                e.fit.alpha = Vec::new();
                e.fit.beta = Vec::new();
            }
            Model::CutS3vm(_) => {}
        }
        out
    }

    /// The solver's report (what `train --report json` prints).
    /// The solver's report as JSON; a τ-FPL report adds `degenerate`
    /// ([`crate::learn::tfpl::TfplReport::degenerate`]).
    pub fn report(&self) -> serde_json::Value {
        match self {
            Model::Usmo(e) => serde_json::json!(e.fit.report),
            Model::Tfpl(e) => {
                let mut report = serde_json::json!(e.fit.report);
                report["degenerate"] = serde_json::json!(e.fit.report.degenerate());
                report
            }
            Model::CutS3vm(e) => {
                let mut report = serde_json::json!(e.fit.report);
                report["degenerate"] = serde_json::json!(self.degenerate());
                report["prior_used"] = serde_json::json!(e.fit.prior);
                report
            }
        }
    }

    /// Whether the solver reports a solution that gains nothing over a constant scorer (τ-FPL,
    /// and CutS3VM at w = 0; a USMO model that scores every event alike is caught by its
    /// coefficients).
    pub fn degenerate(&self) -> bool {
        match self {
            Model::Usmo(_) => false,
            Model::Tfpl(e) => e.fit.report.degenerate(),
            Model::CutS3vm(e) => e.fit.w.iter().all(|&v| v == 0.0),
        }
    }

    /// The algorithm's own settings and provenance as `model inspect` shows them: its
    /// hyper-parameters, the solver tolerance, the training data's fingerprint and the report.
    pub fn details(&self) -> serde_json::Value {
        match self {
            Model::Usmo(e) => serde_json::json!({
                "prior": e.fit.state.prior,
                "lambda": e.fit.state.lambda,
                "tol": e.tol,
                "fingerprint": e.fingerprint,
                "report": e.fit.report,
            }),
            Model::Tfpl(e) => serde_json::json!({
                "rank_tau": e.fit.tau,
                "reg": e.fit.reg,
                "tol": e.tol,
                "fingerprint": e.fingerprint,
                "report": e.fit.report,
            }),
            Model::CutS3vm(e) => serde_json::json!({
                "prior": e.fit.prior,
                "cl": e.fit.cl,
                "cu": e.fit.cu,
                "epsilon": e.fit.epsilon,
                "b": e.fit.b,
                "w_dot_mu": e.fit.w_dot_mu,
                "nystrom_rank": e.fit.nystrom.as_ref().map(|m| m.landmarks.n_rows()),
                "kernel": e.fit.expansion.kernel,
                "fingerprint": e.fingerprint,
                "report": e.fit.report,
            }),
        }
    }
}

/// Rows scaled per block when scoring dense input.
const SCORE_BLOCK: usize = 256;

thread_local! {
    static SCALED: RefCell<Array2<f64>> = RefCell::new(Array2::zeros((0, 0)));
}

impl Model {
    /// The score of one dense row, bit for bit what [`Scorer::score_batch`] gives it in a batch
    /// of one, without stacking it into rows first (the daemon scores events one at a time).
    ///
    /// # Panics
    /// If `x.len()` is not [`Scorer::n_features`] (a caller bug).
    pub fn score_dense_row(&self, x: &[f64]) -> f64 {
        assert_eq!(x.len(), self.n_features(), "feature count");
        let mut out = [0.0];
        SCALED.with(|cell| {
            let mut block = cell.borrow_mut();
            if block.dim() != (SCORE_BLOCK, self.n_features()) {
                *block = Array2::zeros((SCORE_BLOCK, self.n_features()));
            }
            // The block's first row, without ndarray's general slicing (a few percent of the
            // Kafka poll loop per event).
            let d = self.n_features();
            let flat = block.as_slice_mut().expect("standard layout");
            self.scaler()
                .transform_row_into(RowRef::Dense(x), &mut flat[..d]);
            let row = ArrayView2::from_shape((1, d), &flat[..d]).expect("one row of d values");
            self.expansion().decision_dense(row, &mut out);
        });
        out[0]
    }
}

impl Scorer for Model {
    fn n_features(&self) -> usize {
        self.scaler().n_features()
    }

    fn score_batch(&self, rows: &Rows, out: &mut [f64]) {
        assert_eq!(rows.n_rows(), out.len(), "one score per row");
        assert_eq!(rows.n_features(), self.n_features(), "feature count");
        let scaler = self.scaler();
        let expansion = self.expansion();
        if rows.is_sparse() {
            expansion.decision_batch(&scaler.transform(rows), out);
            return;
        }
        SCALED.with(|cell| {
            let mut block = cell.borrow_mut();
            for r0 in (0..rows.n_rows()).step_by(SCORE_BLOCK) {
                let r1 = (r0 + SCORE_BLOCK).min(rows.n_rows());
                if block.dim() != (SCORE_BLOCK, self.n_features()) {
                    *block = Array2::zeros((SCORE_BLOCK, self.n_features()));
                }
                let mut part = block.slice_mut(ndarray::s![..r1 - r0, ..]);
                for (k, mut dst) in part.outer_iter_mut().enumerate() {
                    let dst = dst.as_slice_mut().expect("standard layout");
                    scaler.transform_row_into(rows.row(r0 + k), dst);
                }
                expansion.decision_dense(part.view(), &mut out[r0..r1]);
            }
        });
    }
}

/// Small fixed models for tests: the crate's unit tests and the integration tests in `tests/`
/// build their models here, from one set of toy values, instead of each writing its own.
pub mod toy {
    use std::sync::atomic::AtomicBool;

    use ndarray::array;

    use super::{Fingerprint, Model, Provenance, UsmoEntry};
    use crate::data::{Dataset, Label, Rows, ScaleKind, Scaler};
    use crate::learn::kernel::Kernel;
    use crate::learn::threshold::{ThresholdMethod, ThresholdResult};
    use crate::learn::usmo::UsmoParams;

    /// A USMO model (π 0.3, λ 0.1, `kernel`, features scaled by `scale`) fitted on five rows of
    /// two features, two positive and three unlabeled, without a threshold. Its report's
    /// `train_seconds` is zero: the one field in which two identical fits differ.
    ///
    /// # Panics
    /// If the fit fails (it does not on these rows).
    pub fn usmo(kernel: Kernel, scale: ScaleKind) -> Model {
        let data = Dataset {
            rows: Rows::dense(array![
                [1.0, 0.0],
                [0.9, 0.1],
                [0.0, 1.0],
                [0.1, 0.8],
                [0.8, 0.3]
            ]),
            labels: vec![
                Label::Positive,
                Label::Positive,
                Label::Unlabeled,
                Label::Unlabeled,
                Label::Unlabeled,
            ],
            ids: (0..5).map(|i| i.to_string()).collect(),
        };
        let mut fit = UsmoParams::new(0.3, 0.1, kernel)
            .check()
            .expect("valid parameters")
            .fit(&data, &AtomicBool::new(false))
            .expect("fit");
        fit.report.train_seconds = 0.0;
        Model::Usmo(UsmoEntry {
            scaler: Scaler::fit(scale, &data.rows),
            fit,
            tol: 1e-3,
            fingerprint: Fingerprint::of(&data),
            threshold: None,
        })
    }

    /// The provenance of a model of [`usmo`] as daemon model `version`: trained at time 0 under
    /// configuration fingerprint 1 on windows of 2 positive and 3 unlabeled events.
    pub fn provenance(version: u64) -> Provenance {
        Provenance {
            version,
            trained_at_ms: 0,
            config_fingerprint: 1,
            n_features: 2,
            window_sizes: [2, 3, 0],
        }
    }

    /// An umbrella threshold at `threshold` (τ 0.1, δ 0.05, FPR bound 0.08, calibrated on 100
    /// negatives and 10 positives).
    pub fn threshold(threshold: f64) -> ThresholdResult {
        ThresholdResult {
            method: ThresholdMethod::Umbrella,
            tau: 0.1,
            delta: Some(0.05),
            threshold,
            fpr_bound: Some(0.08),
            fpr_estimate: 0.05,
            tpr_estimate: Some(0.9),
            calibration_negatives: 100,
            calibration_positives: 10,
            calibration_unlabeled: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::ScaleKind;
    use crate::learn::kernel::Kernel;

    fn model() -> Model {
        let mut model = toy::usmo(Kernel::Linear, ScaleKind::None);
        if let Model::Usmo(e) = &mut model {
            e.threshold = Some(toy::threshold(0.25));
        }
        model
    }

    #[test]
    fn files_round_trip_with_and_without_provenance() {
        let model = model();
        let bare = model.to_file_bytes().expect("encode");
        assert_eq!(&bare[..8], MAGIC);
        assert_eq!(bare[8..12], FORMAT_VERSION.to_le_bytes());
        assert_eq!(
            from_file_bytes(&bare).expect("decode"),
            ModelFile {
                provenance: None,
                model: model.clone(),
            }
        );
        let provenance = Provenance {
            trained_at_ms: 1_767_225_600_000,
            ..toy::provenance(12)
        };
        let full = to_file_bytes(&model, Some(&provenance)).expect("encode");
        assert_eq!(
            from_file_bytes(&full).expect("decode"),
            ModelFile {
                provenance: Some(provenance),
                model,
            }
        );
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_rejected() {
        let model = model();
        let bytes = to_file_bytes(&model, Some(&toy::provenance(3))).expect("encode");
        for cut in 0..bytes.len() {
            assert!(from_file_bytes(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut flipped = bytes.clone();
        for at in 0..bytes.len() {
            flipped[at] ^= 0xff;
            assert!(from_file_bytes(&flipped).is_err(), "byte {at} flipped");
            flipped[at] ^= 0xff;
        }
        let payload_byte = bytes.len() / 2;
        flipped[payload_byte] ^= 0x01;
        let e = from_file_bytes(&flipped).expect_err("corrupt");
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    /// Version 5 only appended the CutS3VM variant to [`Model`], so the payload of a USMO or
    /// τ-FPL model is what version 4 wrote: a file with the version-4 header reads the same.
    #[test]
    fn a_version_four_file_still_loads() {
        let model = model();
        let mut bytes = model.to_file_bytes().expect("encode");
        bytes[8..12].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(from_file_bytes(&bytes).expect("version 4").model, model);
    }

    #[test]
    fn an_unsupported_version_or_a_wrong_magic_is_named() {
        let bytes = model().to_file_bytes().expect("encode");
        let with_version = |magic: &[u8; 8], version: u32| {
            let mut b = bytes.clone();
            b[..8].copy_from_slice(magic);
            b[8..12].copy_from_slice(&version.to_le_bytes());
            from_file_bytes(&b).expect_err("unsupported").to_string()
        };
        for (magic, version) in [(MAGIC, 2), (MAGIC, 6), (DAEMON_MAGIC, 1), (DAEMON_MAGIC, 3)] {
            let e = with_version(magic, version);
            assert!(
                e.contains(&format!("unsupported format version {version}")),
                "{e}"
            );
        }
        let e = from_file_bytes(b"id,score\n0,0.5\n").expect_err("text");
        assert!(e.to_string().contains("bad magic"), "{e}");
    }

    #[test]
    fn a_header_naming_another_algorithm_is_rejected() {
        let model = model();
        let payload = codec::to_bytes(&ModelFileRef {
            provenance: None,
            model: &model,
        })
        .expect("encode");
        let bytes = codec::frame(MAGIC, FORMAT_VERSION, 2, &payload);
        assert_eq!(
            from_file_bytes(&bytes),
            Err(ModelError::TagMismatch {
                tag: 2,
                found: "usmo"
            })
        );
    }
}
