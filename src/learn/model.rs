//! Trained models, their data fingerprint, and the model file layout.
//!
//! A model file is `codec::frame(MAGIC, FORMAT_VERSION, algorithm tag, bincode(Model))`: magic
//! header, format version, algorithm tag, payload length and CRC-32, so a truncated or corrupted
//! file is rejected before decoding. Reading and writing the file itself is the caller's job.

use std::cell::RefCell;

use ndarray::{Array2, ArrayView2};
use serde::{Deserialize, Serialize};

use crate::codec::{self, CodecError};
use crate::data::{Dataset, Label, RowRef, Rows, Scaler};
use crate::learn::kernel::KernelExpansion;
use crate::learn::tfpl::TfplModel;
use crate::learn::threshold::ThresholdResult;
use crate::learn::usmo::UsmoModel;
use crate::learn::Scorer;

/// The first 8 bytes of every model file.
pub const MAGIC: &[u8; 8] = b"NEYMANMD";
/// The layout version written and read. Version 2 added τ-FPL models and the calibrated
/// threshold; version 3 added `newton_steps` to the USMO report. Older files are refused with
/// the version named: retrain them.
pub const FORMAT_VERSION: u32 = 3;

/// A trained scorer of any algorithm, with what it was trained on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Model {
    Usmo(UsmoEntry),
    Tfpl(TfplEntry),
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

/// A summary of the training rows that identifies them (sizes and an FNV-1a hash of ids, labels
/// and raw feature values).
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
                h.write(&v.to_bits().to_le_bytes());
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
}

impl Model {
    pub fn algorithm(&self) -> &'static str {
        match self {
            Model::Usmo(_) => "usmo",
            Model::Tfpl(_) => "tfpl",
        }
    }

    fn tag(&self) -> u8 {
        match self {
            Model::Usmo(_) => 1,
            Model::Tfpl(_) => 2,
        }
    }

    pub fn scaler(&self) -> &Scaler {
        match self {
            Model::Usmo(m) => &m.scaler,
            Model::Tfpl(m) => &m.scaler,
        }
    }

    /// The calibrated threshold, if the model was trained with one.
    pub fn threshold(&self) -> Option<&ThresholdResult> {
        match self {
            Model::Usmo(m) => m.threshold.as_ref(),
            Model::Tfpl(m) => m.threshold.as_ref(),
        }
    }

    /// The bytes of a model file.
    pub fn to_file_bytes(&self) -> Result<Vec<u8>, ModelError> {
        let payload = codec::to_bytes(self)?;
        Ok(codec::frame(MAGIC, FORMAT_VERSION, self.tag(), &payload))
    }

    /// Parses a model file, rejecting a wrong magic, version, length or checksum.
    pub fn from_file_bytes(bytes: &[u8]) -> Result<Model, ModelError> {
        let frame = codec::unframe(bytes, MAGIC, FORMAT_VERSION..=FORMAT_VERSION)?;
        let model: Model = codec::from_bytes(frame.payload)?;
        if model.tag() != frame.tag {
            return Err(ModelError::TagMismatch {
                tag: frame.tag,
                found: model.algorithm(),
            });
        }
        Ok(model)
    }

    pub fn expansion(&self) -> &KernelExpansion {
        match self {
            Model::Usmo(m) => &m.fit.expansion,
            Model::Tfpl(m) => &m.fit.expansion,
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
