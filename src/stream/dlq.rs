//! The dead-letter queue as a JSON Lines file: one line per rejected message, appended.
//!
//! ```json
//! {"reason":"dimension_mismatch","detail":"2 features, the locked dimension is 57","channel":"unlabeled","ts":1767225600042,"key":"a1","payload":"{...}","partition":0,"offset":17}
//! ```
//!
//! A line carries everything needed to inspect or re-send the message: the stable `reason`
//! ([`RejectReason`]), a human `detail`, and the record as received (channel, arrival `ts`,
//! `key`, `payload` or `payload_b64`, and `partition`/`offset`/`headers` when known).
//! Lines are buffered; [`DlqWriter::flush`] pushes them to the file (the engine calls it before
//! committing source offsets, so a committed rejection is never lost).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::event::{RejectReason, Rejection};
use super::record::{PayloadRepr, Record, RecordError, RecordIn, RecordOut};

/// One rejected message with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DlqRecord {
    pub reason: RejectReason,
    pub detail: String,
    pub record: Record,
}

impl DlqRecord {
    pub fn new(record: Record, rejection: Rejection) -> DlqRecord {
        DlqRecord {
            reason: rejection.reason,
            detail: rejection.detail,
            record,
        }
    }

    /// The record as one JSON line (without the newline): `reason` and `detail`, then the
    /// record's fields as a recorded-stream line has them.
    pub fn to_json_line(&self) -> String {
        let payload = PayloadRepr::of(&self.record.payload);
        let out = DlqOut {
            reason: self.reason,
            detail: &self.detail,
            record: RecordOut::of(&self.record, &payload),
        };
        // Strings, integers and unit enums always serialise.
        serde_json::to_string(&out).unwrap_or_default()
    }

    /// Parses one dead-letter line (for inspection tools and re-sending). Fields other than
    /// `reason`, `detail` and a record's are refused, as in a recorded stream.
    pub fn from_json_line(line: &str) -> Result<DlqRecord, String> {
        let mut fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(line).map_err(|e| e.to_string())?;
        let mut take = |name: &str| {
            fields
                .remove(name)
                .ok_or_else(|| format!("missing field `{name}`"))
        };
        let reason: RejectReason =
            serde_json::from_value(take("reason")?).map_err(|e| format!("reason: {e}"))?;
        let detail: String =
            serde_json::from_value(take("detail")?).map_err(|e| format!("detail: {e}"))?;
        let record: RecordIn =
            serde_json::from_value(serde_json::Value::Object(fields)).map_err(|e| e.to_string())?;
        Ok(DlqRecord {
            reason,
            detail,
            record: record.into_record()?,
        })
    }
}

/// A line of a recorded stream that is not a record, as a dead letter: the reason
/// (`invalid_record`), the file and line number, and why. It has no channel or payload to keep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnreadableLine {
    pub reason: RejectReason,
    pub detail: String,
    pub source: PathBuf,
    pub line: usize,
}

impl UnreadableLine {
    pub fn new(source: PathBuf, line: usize, detail: String) -> UnreadableLine {
        UnreadableLine {
            reason: RejectReason::InvalidRecord,
            detail,
            source,
            line,
        }
    }

    /// The dead letter of a reader error that concerns one line (malformed, not UTF-8); the
    /// error itself when the file cannot be read on.
    pub fn of(error: RecordError) -> Result<UnreadableLine, RecordError> {
        match error {
            RecordError::Malformed {
                path,
                line,
                message,
            } => Ok(UnreadableLine::new(path, line, message)),
            RecordError::NotUtf8 { path, line } => {
                Ok(UnreadableLine::new(path, line, "not valid UTF-8".into()))
            }
            e => Err(e),
        }
    }

    /// One JSON line (without the newline).
    pub fn to_json_line(&self) -> String {
        // A path, strings and integers always serialise.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[derive(Serialize)]
struct DlqOut<'a> {
    reason: RejectReason,
    detail: &'a str,
    #[serde(flatten)]
    record: RecordOut<'a>,
}

#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    #[error("cannot open the dead-letter file {}: {source}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the dead-letter file {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Appends dead letters to a file (created if missing; earlier lines are kept across restarts,
/// a half-written last one is cut: [`crate::files::open_append_whole_lines`]).
pub struct DlqWriter {
    path: PathBuf,
    out: BufWriter<File>,
    written: u64,
    cut_bytes: u64,
}

impl DlqWriter {
    pub fn open(path: &Path) -> Result<DlqWriter, DlqError> {
        let (file, cut_bytes) =
            crate::files::open_append_whole_lines(path).map_err(|source| DlqError::Open {
                path: path.to_owned(),
                source,
            })?;
        Ok(DlqWriter {
            path: path.to_owned(),
            out: BufWriter::new(file),
            written: 0,
            cut_bytes,
        })
    }

    /// The bytes of a half-written last line cut when the file was opened.
    pub fn cut_bytes(&self) -> u64 {
        self.cut_bytes
    }

    /// Buffers one dead letter; it reaches the file at the latest on [`DlqWriter::flush`].
    pub fn write(&mut self, letter: &DlqRecord) -> Result<(), DlqError> {
        self.write_line(letter.to_json_line())
    }

    /// Buffers the dead letter of a recorded-stream line that is not a record.
    pub fn write_unreadable(&mut self, letter: &UnreadableLine) -> Result<(), DlqError> {
        self.write_line(letter.to_json_line())
    }

    fn write_line(&mut self, mut line: String) -> Result<(), DlqError> {
        line.push('\n');
        self.out
            .write_all(line.as_bytes())
            .map_err(|source| DlqError::Write {
                path: self.path.clone(),
                source,
            })?;
        self.written += 1;
        Ok(())
    }

    /// Dead letters written by this writer (not counting lines already in the file).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes the buffered lines and syncs the file's data to disk.
    pub fn flush(&mut self) -> Result<(), DlqError> {
        let err = |source| DlqError::Write {
            path: self.path.clone(),
            source,
        };
        self.out.flush().map_err(err)?;
        self.out.get_ref().sync_data().map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::event::{parse_event, EventLimits};
    use crate::stream::Channel;

    fn rejected(payload: &[u8], partition: Option<i32>) -> DlqRecord {
        let mut record = Record::new(Channel::Unlabeled, 42, Some("k1".into()), payload.to_vec());
        record.partition = partition;
        record.offset = partition.map(|_| 9);
        let rejection = parse_event(payload, Some(2), &EventLimits::default()).unwrap_err();
        DlqRecord::new(record, rejection)
    }

    #[test]
    fn dead_letters_have_the_documented_form() {
        let letter = rejected(br#"{"id":"a","ts":1,"x":[1,2,3]}"#, Some(0));
        assert_eq!(
            letter.to_json_line(),
            r#"{"reason":"dimension_mismatch","detail":"3 features, the locked dimension is 2","channel":"unlabeled","ts":42,"key":"k1","payload":"{\"id\":\"a\",\"ts\":1,\"x\":[1,2,3]}","partition":0,"offset":9}"#
        );
        let binary = rejected(&[0xc3, 0x28], None);
        assert_eq!(
            binary.to_json_line(),
            r#"{"reason":"invalid_utf8","detail":"invalid utf-8 sequence of 1 bytes from index 0","channel":"unlabeled","ts":42,"key":"k1","payload_b64":"wyg="}"#
        );
    }

    #[test]
    fn the_file_is_appended_flushed_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dlq.jsonl");
        let letters = [
            rejected(b"nope", Some(1)),
            rejected(&[0xff], None),
            rejected(br#"{"id":"","ts":1,"x":[1,2]}"#, None),
        ];
        let mut w = DlqWriter::open(&path).unwrap();
        w.write(&letters[0]).unwrap();
        w.write(&letters[1]).unwrap();
        w.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
        drop(w);
        // Reopening appends.
        let mut w = DlqWriter::open(&path).unwrap();
        w.write(&letters[2]).unwrap();
        w.flush().unwrap();
        assert_eq!(w.written(), 1);
        let text = std::fs::read_to_string(&path).unwrap();
        let back: Vec<DlqRecord> = text
            .lines()
            .map(|l| DlqRecord::from_json_line(l).unwrap())
            .collect();
        assert_eq!(back, letters);
        let reasons: Vec<&str> = back.iter().map(|d| d.reason.as_str()).collect();
        assert_eq!(reasons, ["invalid_json", "invalid_utf8", "invalid_id"]);
    }

    #[test]
    fn a_line_with_an_unknown_or_missing_field_is_refused() {
        let line = rejected(b"nope", Some(1)).to_json_line();
        let extra = line.replacen('{', r#"{"extra":1,"#, 1);
        assert!(DlqRecord::from_json_line(&extra)
            .unwrap_err()
            .contains("unknown field `extra`"));
        let no_reason = line.replacen(r#""reason":"invalid_json","#, "", 1);
        assert_eq!(
            DlqRecord::from_json_line(&no_reason).unwrap_err(),
            "missing field `reason`"
        );
    }

    #[test]
    fn an_unwritable_path_is_an_open_error() {
        let err = DlqWriter::open(Path::new("/nonexistent/dlq.jsonl"))
            .err()
            .unwrap();
        assert!(err
            .to_string()
            .starts_with("cannot open the dead-letter file /nonexistent/dlq.jsonl: "));
    }
}
