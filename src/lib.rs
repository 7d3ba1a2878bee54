//! neyman learns low-false-positive classifiers (positive-unlabeled SVMs, FPR-constrained
//! rankers) and serves them.
//!
//! # Layout
//!
//! - [`learn`]: pure math — no I/O, no async, no logging: kernels and the bounded kernel-row
//!   cache ([`learn::kernel`]), the USMO positive-unlabeled solver ([`learn::usmo`]), the τ-FPL
//!   ranker ([`learn::tfpl`]: FISTA on the dual, an interior point on the primal for few
//!   features) and its projection onto Γ_k ([`learn::projection`]), the cost-sensitive linear
//!   SVM baseline ([`learn::linsvm`]), the semi-supervised SVMs ([`learn::s3vm`]: CutS3VM and
//!   the Nyström map it takes kernels through; the exact S3VM's own SDP interior-point engine,
//!   relaxation (20) and its safe lower bound, and the branch-and-bound on it with QP (24),
//!   the 2-opt heuristic and the branching rule, [`learn::s3vm::exact`]), the online
//!   logistic-regression baseline of `replay
//!   --baseline` ([`learn::online`]), false-positive thresholds on score arrays
//!   ([`learn::threshold`]), which rows train and which calibrate ([`learn::calibrate`]),
//!   hyper-parameter choice by cross-validation ([`learn::tune`]), τ-FPL's ranking depth
//!   chosen on held-back training rows ([`learn::rank_tau`]), evaluation metrics
//!   ([`learn::metrics`]), bounds on the positive share of unlabeled data ([`learn::prior`]),
//!   the model type, the [`learn::Scorer`] trait and the model file layout ([`learn::model`]),
//!   a running fit's progress for whoever shows it ([`learn::observe`]),
//!   and the one learner spec that every front end maps its
//!   settings into ([`learn::spec`]).
//! - [`data`]: samples and their files: dense and sparse rows behind one access type
//!   ([`data::rows`]), CSV and LIBSVM readers ([`mod@data::read`]), feature scaling
//!   ([`data::scale`]), PU relabelling, the semi-supervised labelled-row protocols and row
//!   ranges.
//! - [`codec`]: the one place that turns values into bytes and back (bincode 2, serde).
//! - [`deque`]: searches and removals on sorted deques, for the windows and the offset book.
//! - [`files`]: files written atomically (temporary file beside, fsync, rename, directory
//!   fsync), for models, the version counter and command outputs; and the exclusive lock
//!   that keeps a state directory to one daemon.
//! - [`config`]: the daemon's TOML configuration, one file per section: every key with its
//!   default and doc, `NEYMAN_*` environment overrides, path resolution, checks that name the
//!   key, secrets that redact themselves; `[model]` maps into [`learn::spec`].
//! - [`telemetry`]: the daemon's Prometheus metrics on an injected registry.
//! - [`stream`]: events and where they come from: the event payload and its intake validation
//!   with stable rejection reasons ([`stream::event`]), the channels (positive, unlabeled,
//!   negative), recorded-stream files ([`stream::record`]), the dead-letter file
//!   ([`stream::dlq`]), PU streams generated from labelled data ([`stream::make`]), Kafka
//!   client settings, topic creation, recording topics and publishing files
//!   ([`stream::kafka`], rdkafka), and at-least-once offset bookkeeping ([`stream::offsets`]).
//! - [`engine`]: the daemon's state machine, whatever drives it: per-channel sliding windows
//!   ([`engine::window`]), intake, retrain scheduling, the gate and the swap
//!   ([`engine::machine`]), model persistence in the state directory ([`engine::store`]), the
//!   atomically swapped active model ([`engine::registry`]), scoring ([`engine::scoring`]),
//!   the sink trait ([`engine::outputs`]), a replay's prequential accounting
//!   ([`engine::prequential`]) and the background audit's sample and report
//!   ([`engine::audit`]).
//! - [`daemon`]: running the service: [`daemon::run`] wires metrics, store, registry, HTTP and
//!   a source, and shuts down; [`daemon::replay`] drives the engine from a recorded stream
//!   into files; [`daemon::kafka`] from Kafka topics into topics (consumer group and commits,
//!   the producer thread, the models topic, the trainer role); [`daemon::posted`] from the
//!   events posted over HTTP (`source.kind = "http"`, and between a replay's records).
//! - [`serve`]: the HTTP API (axum on tokio, in the daemon's process): scoring requests with
//!   the active model, model metadata, the admin rollback, events posted into the intake,
//!   the last audit, `/metrics`, health and readiness; every response counted by route
//!   template.
//! - [`cli`] and `main.rs`: the `neyman` command line (clap); `main.rs` parses, the
//!   subcommands' work is in [`cli`].
//!
//! Dependencies point down, and `tests/layout.rs` checks it: `learn` names only `data` and
//! `codec`, and no tokio, rdkafka, axum or tracing; `data` names nothing of the crate;
//! `codec`, `deque` and `files` are leaves; `config` names `learn` and `data`; `telemetry` names only
//! `learn`; `stream` names `data`, `config` and `deque`, never `engine`; `engine` names
//! `stream`, `data`, `learn`, `config`, `telemetry`, `codec` and `deque`, and no rdkafka,
//! tokio or axum; `serve` names `engine`, `stream`, `learn`, `config` and `telemetry`;
//! `daemon` names everything below it and only `cli` names `daemon`; nothing names `cli`.

pub mod cli;
pub mod codec;
pub mod config;
pub mod daemon;
pub mod data;
pub mod deque;
pub mod engine;
pub mod files;
pub mod learn;
pub mod serve;
pub mod stream;
pub mod telemetry;
