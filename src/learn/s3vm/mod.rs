//! Semi-supervised SVMs: labelled positives and negatives plus unlabeled rows.
//!
//! - [`cut`]: CutS3VM (seed 002), the cutting-plane linear S3VM, near-linear in the rows.
//! - [`nystrom`]: the explicit Nyström feature map through which CutS3VM takes a non-linear
//!   kernel, so no n×n matrix is ever formed.
//! - [`sdp`]: the exact S3VM's (seed 004) SDP engine: an interior-point method for relaxation
//!   (20) of model (8), its builder with RLT cuts, and the safe lower bound.
//! - [`exact`]: the exact S3VM's branch-and-bound on that engine (`neyman certify`): QP (24)
//!   per labelling, the 2-opt heuristic and the branching rule.
//!
//! The class ratio shared by every semi-supervised learner: π, the positive share of the
//! **unlabeled** rows (the same π as USMO's and pu-umbrella's). Where none is given it is the
//! labelled positive share clamped to [0.05, 0.95] ([`labelled_prior`]).

pub mod cut;
pub mod exact;
pub mod nystrom;
pub mod sdp;

use crate::data::Label;

/// Where π came from, as reports name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PriorSource {
    /// `--prior P` or the config's `prior`.
    Given,
    /// The labelled rows' positive share, clamped ([`labelled_prior`]).
    Labelled,
    /// The true positive share of the rows whose labels were hidden (`eval --prior oracle`).
    Oracle,
}

/// The default π: the positive share of the labelled rows among `labels`, clamped to
/// [0.05, 0.95], or `None` without labelled rows.
pub fn labelled_prior<'a>(labels: impl IntoIterator<Item = &'a Label>) -> Option<f64> {
    let (mut p, mut n) = (0usize, 0usize);
    for label in labels {
        match label {
            Label::Positive => p += 1,
            Label::Negative => n += 1,
            Label::Unlabeled => {}
        }
    }
    (p + n > 0).then(|| (p as f64 / (p + n) as f64).clamp(0.05, 0.95))
}
