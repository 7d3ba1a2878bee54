//! neyman learns low-false-positive classifiers (positive-unlabeled SVMs, FPR-constrained
//! rankers) and serves them.
//!
//! # Layout
//!
//! - [`learn`]: pure math, no I/O: kernels and the bounded kernel-row cache ([`learn::kernel`]),
//!   the USMO positive-unlabeled solver ([`learn::usmo`]), the τ-FPL ranker ([`learn::tfpl`])
//!   and its projection onto Γ_k ([`learn::projection`]), the cost-sensitive linear SVM
//!   baseline ([`learn::linsvm`]), false-positive thresholds on score
//!   arrays ([`learn::threshold`]), which rows train and which calibrate
//!   ([`learn::calibrate`]), evaluation metrics ([`learn::metrics`]), the model type, the
//!   [`learn::Scorer`] trait and the model file layout ([`learn::model`]).
//! - [`data`]: samples and their files: dense and sparse rows behind one access type
//!   ([`data::rows`]), CSV and LIBSVM readers ([`data::read`]), feature scaling
//!   ([`data::scale`]), PU relabelling and row ranges.
//! - [`codec`]: the one place that turns values into bytes and back (bincode 2, serde).
//! - `main.rs`: the `neyman` command line (clap) and nothing else; the subcommands' work lives in
//!   [`cli`].
//!
//! Dependencies point down: `cli` uses `data` and `learn`; `learn` uses only `data::rows` (the
//! row type) and `data::scale` (the scaler stored in a model).

pub mod cli;
pub mod codec;
pub mod data;
pub mod learn;
