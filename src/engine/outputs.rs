//! Where the engine's outputs go: one score per unlabeled event and one dead letter per
//! rejected message. The daemon provides the sink: JSON-lines files for a recorded stream,
//! topics on Kafka, which is why every output carries the position of the message it
//! answers: a Kafka sink commits an input offset only after the output for it is
//! acknowledged.

use crate::engine::scoring::ScoreOutput;
use crate::stream::dlq::{DlqError, DlqRecord, UnreadableLine};
use crate::stream::Channel;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot write the scores to {name}: {source}")]
    Scores {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Dlq(#[from] DlqError),
    #[error("kafka sink: {0}")]
    Kafka(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("the writing thread is gone: {0}")]
    WriterGone(String),
    /// A sink that writes on a thread of its own met this error earlier; it writes no more.
    #[error("{0}")]
    Earlier(String),
}

/// The Kafka position of the input message an output answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    pub channel: Channel,
    pub partition: i32,
    pub offset: i64,
}

/// A sink for the engine's outputs.
pub trait Outputs: Send {
    /// One event's score (or unscored output), answering the message at `origin` if any.
    /// Owned: a sink that sends it later (Kafka's produce thread) keeps it without a copy.
    fn score(&mut self, output: ScoreOutput, origin: Option<Origin>) -> Result<(), OutputError>;
    /// One rejected message; its position is in `letter.record`.
    fn dead_letter(&mut self, letter: &DlqRecord) -> Result<(), OutputError>;
    /// A line of a recorded stream that is not a record. Only a replay reads lines, so only
    /// its sink takes them; the others refuse.
    fn unreadable_line(&mut self, letter: &UnreadableLine) -> Result<(), OutputError> {
        Err(OutputError::Unsupported(format!(
            "{}:{}: this sink takes no recorded-stream lines",
            letter.source.display(),
            letter.line
        )))
    }
    /// Pushes buffered outputs out (files: to the OS; Kafka: nothing to wait for here).
    fn flush(&mut self) -> Result<(), OutputError>;
}
