//! The daemon's state machine between the stream and the learner, whatever drives it: the
//! recorded-stream and Kafka drivers live above this room and feed it one message at a time.
//!
//! - [`machine`]: the [`machine::Engine`]: intake, windows, retrain trigger, warm-started
//!   training, the gate, the swap, scoring and the sinks.
//! - [`outputs`]: the sink trait for scores and dead letters, each with the input position it
//!   answers.
//! - [`window`]: per-channel sliding windows (count, event-time age and byte bounds, dedup by
//!   id, eviction reports and source low watermarks) and which events calibrate instead of
//!   train: the stable hash of `model.calibration = "hash"` ([`window::in_calibration`]) or
//!   the newest of a channel for `"recent"` ([`window::newest_held_out`]).
//! - [`window_scores`]: the active model's scores of window events (and whether it trained
//!   on them), remembered between fresh thresholds.
//! - [`store`]: accepted models and the never-reused version counter in the state directory,
//!   written atomically.
//! - [`registry`]: the active model, swapped atomically, and the accepted history for rollback.
//! - [`scoring`]: a batch of events scored by one model, and the score object.
//! - [`drift`]: the drift detector on the active model's unlabeled scores (two-sample KS
//!   against its reference scores).
//! - [`audit`]: the background audit: a stratified sample of the windows certified by the
//!   exact S3VM, the active model's labelling measured against it, the runner trait the
//!   daemon implements and the board `GET /v1/audit` reads.
//! - [`prequential`]: a replay's test-then-train accounting: per-block observed FPR and TPR
//!   against the events' truth, blocks beyond binomial noise, figures per model and threshold
//!   version (`replay --report json`).
//!
//! The engine owns the feature-dimension lock (the loaded model's, else the first valid
//! event's) and hands it to [`crate::stream::parse_event`]. It depends on [`crate::stream`],
//! [`crate::data`], [`crate::learn`], [`crate::config`] (its own sections) and
//! [`crate::telemetry`], never on rdkafka, tokio or axum, and nothing below points up to it.

pub mod audit;
pub mod drift;
pub mod machine;
pub mod outputs;
pub mod prequential;
pub mod registry;
pub mod scoring;
pub mod store;
pub mod window;
pub mod window_scores;

pub use window::{
    fnv1a64, in_calibration, newest_held_out, Entry, EvictReason, Evicted, InsertOutcome, Snapshot,
    SourcePos, Window, WindowConfig, WindowError,
};
