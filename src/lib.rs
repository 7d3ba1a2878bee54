//! neyman learns low-false-positive classifiers (positive-unlabeled SVMs, FPR-constrained
//! rankers) and serves them.
//!
//! # Layout
//!
//! - [`learn`]: pure math, no I/O: kernels and the bounded kernel-row cache ([`learn::kernel`]),
//!   the USMO positive-unlabeled solver ([`learn::usmo`]), the τ-FPL ranker ([`learn::tfpl`]:
//!   FISTA on the dual, an interior point on the primal for few features) and its projection
//!   onto Γ_k ([`learn::projection`]), the cost-sensitive linear SVM
//!   baseline ([`learn::linsvm`]), false-positive thresholds on score
//!   arrays ([`learn::threshold`]), which rows train and which calibrate
//!   ([`learn::calibrate`]), evaluation metrics ([`learn::metrics`]), the model type, the
//!   [`learn::Scorer`] trait and the model file layout ([`learn::model`]).
//! - [`data`]: samples and their files: dense and sparse rows behind one access type
//!   ([`data::rows`]), CSV and LIBSVM readers ([`data::read`]), feature scaling
//!   ([`data::scale`]), PU relabelling and row ranges.
//! - [`config`]: the daemon's TOML configuration: every key with its default and doc,
//!   `NEYMAN_*` environment overrides, path resolution, checks that name the key, secrets that
//!   redact themselves.
//! - [`telemetry`]: the daemon's Prometheus metrics on an injected registry.
//! - [`stream`]: events and where they come from: the event payload and its intake validation
//!   with stable rejection reasons ([`stream::event`]), the channels (positive, unlabeled,
//!   negative), recorded-stream files ([`stream::record`]), the dead-letter file
//!   ([`stream::dlq`]), PU streams generated from labelled data ([`stream::make`]) and Kafka:
//!   client settings from `[kafka]`, topic creation, recording topics to a file and publishing
//!   a file into topics ([`stream::kafka`], rdkafka).
//! - [`engine`]: the daemon's state: per-channel sliding windows with eviction reports, source
//!   watermarks and the stable calibration hash ([`engine::window`]), model persistence in the
//!   state directory ([`engine::store`]) and the atomically swapped active model
//!   ([`engine::registry`]).
//! - [`serve`]: the daemon's HTTP API (axum on tokio, in the daemon's process): scoring
//!   requests with the active model, model metadata, the admin rollback, `/metrics`, health and
//!   readiness; every response counted by route template.
//! - [`codec`]: the one place that turns values into bytes and back (bincode 2, serde).
//! - [`files`]: files written atomically (temporary file beside, fsync, rename, directory fsync).
//! - `main.rs`: the `neyman` command line (clap) and nothing else; the subcommands' work lives in
//!   [`cli`].
//!
//! Dependencies point down: `cli` uses everything; `serve` uses `engine`, `stream`, `config`
//! and `telemetry`; `engine` uses `stream`, `data`, `learn`, `config` and `telemetry`;
//! `telemetry` uses only `learn::threshold`; `stream` uses `data` and, for `[kafka]`, `config`;
//! `learn` uses only `data::rows` (the row type) and `data::scale` (the scaler stored in a
//! model).

pub mod cli;
pub mod codec;
pub mod config;
pub mod data;
pub mod engine;
pub mod files;
pub mod learn;
pub mod serve;
pub mod stream;
pub mod telemetry;
