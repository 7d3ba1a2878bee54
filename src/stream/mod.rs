//! Streams: events, the channels they arrive on, recorded streams, generated streams and the
//! dead-letter queue.
//!
//! - [`event`]: the event payload and the intake validation ([`event::parse_event`]) that turns a
//!   raw message into an [`Event`] or a [`Rejection`] with a stable reason.
//! - [`record`]: the recorded-stream file format (JSON Lines, optionally gzip): one message per
//!   line with its channel, arrival time, key and payload as received; reader and writer.
//! - [`dlq`]: the dead-letter sink: one JSON line per rejected message.
//! - [`make`]: a realistic PU stream generated from a fully labelled data set.
//! - [`kafka`]: Kafka client settings from `[kafka]`, topic creation, recording topics into a
//!   recorded-stream file and publishing one into the topics.
//! - [`offsets`]: at-least-once offset bookkeeping (what is acknowledged, what may be
//!   committed, and the `done` mark a restart resumes scoring from).
//!
//! This room knows nothing of windows, models or training: it only turns bytes into checked
//! events and back. It depends on [`crate::data`] and, for `[kafka]`, [`crate::config`].

pub mod dlq;
pub mod event;
pub mod kafka;
pub mod make;
pub mod offsets;
pub mod record;

pub use dlq::{DlqError, DlqRecord, DlqWriter};
pub use event::{
    parse_event, parse_event_with, Event, EventLimits, Features, RejectReason, Rejection,
};
pub use record::{Record, RecordError, RecordReader, RecordWriter};

use serde::{Deserialize, Serialize};

use crate::data::Label;

/// Where an event arrived, which is also what it says about its label: the channel comes from
/// the topic (or a recorded line's `channel`), never from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// Confirmed positives (e.g. reported spam).
    Positive,
    /// Everything else that is seen: the bulk of traffic, labels unknown.
    Unlabeled,
    /// Confirmed negatives (feedback, e.g. "not spam" reports); used for calibration.
    Negative,
}

impl Channel {
    pub const ALL: [Channel; 3] = [Channel::Positive, Channel::Unlabeled, Channel::Negative];

    /// The stable name: `positive`, `unlabeled` or `negative`.
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Positive => "positive",
            Channel::Unlabeled => "unlabeled",
            Channel::Negative => "negative",
        }
    }

    /// The training label an event on this channel carries.
    pub fn label(self) -> Label {
        match self {
            Channel::Positive => Label::Positive,
            Channel::Unlabeled => Label::Unlabeled,
            Channel::Negative => Label::Negative,
        }
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Channel {
    type Err = String;

    fn from_str(s: &str) -> Result<Channel, String> {
        Channel::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                format!("unknown channel {s:?} (expected positive, unlabeled or negative)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_round_trip() {
        for c in Channel::ALL {
            assert_eq!(c.as_str().parse::<Channel>(), Ok(c));
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{c}\""));
        }
        assert_eq!(Channel::Negative.label().code(), -1);
        assert_eq!(Channel::Unlabeled.label().code(), 0);
        assert!("Positive".parse::<Channel>().is_err());
    }
}
