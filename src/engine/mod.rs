//! The daemon's state between the stream and the learner.
//!
//! - [`daemon`]: the event loop: intake, windows, retrain trigger, warm-started training, the
//!   gate, the swap, scoring and the sinks.
//! - [`outputs`]: where scores and dead letters go (files, or Kafka topics), each with the
//!   input position it answers.
//! - [`kafka`]: the daemon on Kafka: poll loop, produced outputs, at-least-once commits with
//!   window low watermarks, restore after a restart, backpressure, training off the loop.
//! - [`window`]: per-channel sliding windows (count, event-time age and byte bounds, dedup by
//!   id, eviction reports and source low watermarks) and the stable hash that decides which
//!   events calibrate instead of train ([`window::in_calibration`]).
//! - [`store`]: accepted models and the never-reused version counter in the state directory,
//!   written atomically.
//! - [`registry`]: the active model, swapped atomically, and the accepted history for rollback.
//! - [`scoring`]: a batch of events scored by one model, and the score object.
//!
//! The engine owns the feature-dimension lock (the loaded model's, else the first valid
//! event's) and hands it to [`crate::stream::parse_event`]. It depends on [`crate::stream`],
//! [`crate::data`] and [`crate::learn`], never the other way round.

pub mod daemon;
pub mod kafka;
pub mod outputs;
pub mod registry;
pub mod scoring;
pub mod store;
pub mod window;

pub use window::{
    fnv1a64, in_calibration, Entry, EvictReason, Evicted, InsertOutcome, Snapshot, SourcePos,
    Window, WindowConfig, WindowError,
};
