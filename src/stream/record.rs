//! Recorded streams: JSON Lines, gzip'd when the file name ends in `.gz`.
//!
//! One message per line, as it arrived:
//!
//! ```json
//! {"channel":"positive","ts":1767225600000,"key":"a1","payload":"{\"id\":\"a1\",...}"}
//! {"channel":"unlabeled","ts":1767225600042,"key":null,"payload_b64":"/w==","partition":0,"offset":17,"headers":[["source","web"]]}
//! ```
//!
//! `ts` is the arrival time (epoch ms; Kafka's message timestamp), not the event's own `ts`.
//! `payload` holds the message text when it is UTF-8, `payload_b64` (standard base64, padded)
//! otherwise; exactly one of them is present. `partition`, `offset` and `headers` are optional.
//! Unknown fields are an error (a misspelt field must not pass as absent).
//!
//! A malformed *line* is a [`RecordError`] naming file and line; a malformed *payload* is not:
//! the record is returned and intake validation turns it into a dead letter.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use super::Channel;

/// One message of a stream, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub channel: Channel,
    /// Arrival time, epoch milliseconds.
    pub ts: i64,
    /// The message key (the event id when neyman produced the stream), if any.
    pub key: Option<String>,
    /// The message bytes exactly as received.
    pub payload: Vec<u8>,
    /// Source position when the message came from Kafka.
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// Message headers, in order (Kafka allows repeated names).
    pub headers: Vec<(String, String)>,
}

impl Record {
    /// A record with no source position and no headers.
    pub fn new(channel: Channel, ts: i64, key: Option<String>, payload: Vec<u8>) -> Record {
        Record {
            channel,
            ts,
            key,
            payload,
            partition: None,
            offset: None,
            headers: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot open {}: {source}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}:{line}: read error: {source}", .path.display())]
    Read {
        path: PathBuf,
        line: usize,
        #[source]
        source: io::Error,
    },
    #[error("{}:{line}: the line is not valid UTF-8", .path.display())]
    NotUtf8 { path: PathBuf, line: usize },
    #[error("{}:{line}: {message}", .path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Whether a file name asks for gzip (ends in `.gz`).
pub fn is_gzip_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// The payload's JSON form: the text when it is UTF-8, else base64.
pub(crate) enum PayloadRepr<'a> {
    Text(&'a str),
    Base64(String),
}

impl<'a> PayloadRepr<'a> {
    pub(crate) fn of(bytes: &'a [u8]) -> PayloadRepr<'a> {
        match std::str::from_utf8(bytes) {
            Ok(text) => PayloadRepr::Text(text),
            Err(_) => PayloadRepr::Base64(base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    }

    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            PayloadRepr::Text(t) => Some(t),
            PayloadRepr::Base64(_) => None,
        }
    }

    pub(crate) fn base64(&self) -> Option<&str> {
        match self {
            PayloadRepr::Text(_) => None,
            PayloadRepr::Base64(b) => Some(b),
        }
    }
}

/// Exactly one of `payload` / `payload_b64`, decoded to bytes.
fn payload_bytes(payload: Option<String>, payload_b64: Option<String>) -> Result<Vec<u8>, String> {
    match (payload, payload_b64) {
        (Some(text), None) => Ok(text.into_bytes()),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .map_err(|e| format!("payload_b64 is not base64: {e}")),
        (Some(_), Some(_)) => Err("both payload and payload_b64".to_owned()),
        (None, None) => Err("no payload or payload_b64".to_owned()),
    }
}

/// A record's fields as a line writes them; the dead-letter line adds its own in front.
#[derive(Serialize)]
pub(crate) struct RecordOut<'a> {
    channel: Channel,
    ts: i64,
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_b64: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    headers: &'a [(String, String)],
}

/// A record's fields as a line holds them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordIn {
    channel: Channel,
    ts: i64,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    payload_b64: Option<String>,
    #[serde(default)]
    partition: Option<i32>,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    headers: Vec<(String, String)>,
}

impl<'a> RecordOut<'a> {
    /// `record`'s fields, its payload as `payload` represents it.
    pub(crate) fn of(record: &'a Record, payload: &'a PayloadRepr) -> RecordOut<'a> {
        RecordOut {
            channel: record.channel,
            ts: record.ts,
            key: record.key.as_deref(),
            payload: payload.text(),
            payload_b64: payload.base64(),
            partition: record.partition,
            offset: record.offset,
            headers: &record.headers,
        }
    }
}

impl RecordIn {
    /// The record, its payload decoded.
    pub(crate) fn into_record(self) -> Result<Record, String> {
        Ok(Record {
            channel: self.channel,
            ts: self.ts,
            key: self.key,
            payload: payload_bytes(self.payload, self.payload_b64)?,
            partition: self.partition,
            offset: self.offset,
            headers: self.headers,
        })
    }
}

impl Record {
    /// The record as one JSON line (without the newline); the same record gives the same text.
    pub fn to_json_line(&self) -> String {
        let payload = PayloadRepr::of(&self.payload);
        // A struct of strings and integers always serialises.
        serde_json::to_string(&RecordOut::of(self, &payload)).unwrap_or_default()
    }

    /// Parses one line of a recorded stream; the error is the message for [`RecordError`].
    pub fn from_json_line(line: &str) -> Result<Record, String> {
        serde_json::from_str::<RecordIn>(line)
            .map_err(|e| e.to_string())?
            .into_record()
    }
}

/// Reads a recorded stream line by line (never the whole file at once). Blank lines are
/// skipped. After a malformed line the reader goes on with the next one; after an I/O error it
/// stops.
pub struct RecordReader {
    path: PathBuf,
    input: Box<dyn BufRead + Send>,
    line: usize,
    buf: Vec<u8>,
    done: bool,
    position: FilePosition,
}

/// How far into its file a [`RecordReader`] has read (compressed bytes for a `.gz`), for
/// progress reports; clones share the count.
#[derive(Debug, Clone, Default)]
pub struct FilePosition {
    read: Arc<AtomicU64>,
    /// The file's size when it was opened; `None` for a reader over another input.
    pub size: Option<u64>,
}

impl FilePosition {
    /// Bytes of the file read so far.
    pub fn read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }
}

/// A file that counts the bytes read from it into a [`FilePosition`].
struct Counted {
    file: File,
    read: Arc<AtomicU64>,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl RecordReader {
    /// Opens a file, gunzipping it when its name ends in `.gz`.
    pub fn open(path: &Path) -> Result<RecordReader, RecordError> {
        let file = File::open(path).map_err(|source| RecordError::Open {
            path: path.to_owned(),
            source,
        })?;
        let position = FilePosition {
            read: Arc::default(),
            size: file.metadata().ok().map(|m| m.len()),
        };
        let file = Counted {
            file,
            read: Arc::clone(&position.read),
        };
        let input: Box<dyn BufRead + Send> = if is_gzip_path(path) {
            Box::new(BufReader::new(MultiGzDecoder::new(BufReader::new(file))))
        } else {
            Box::new(BufReader::new(file))
        };
        Ok(RecordReader {
            position,
            ..RecordReader::new(path, input)
        })
    }

    /// How far into the file this reader is.
    pub fn position(&self) -> FilePosition {
        self.position.clone()
    }

    /// Reads already-decompressed lines from `input`; `name` is used in error messages.
    pub fn new(name: impl Into<PathBuf>, input: Box<dyn BufRead + Send>) -> RecordReader {
        RecordReader {
            path: name.into(),
            input,
            line: 0,
            buf: Vec::new(),
            done: false,
            position: FilePosition::default(),
        }
    }

    /// The 1-based number of the last line read.
    pub fn line(&self) -> usize {
        self.line
    }
}

impl Iterator for RecordReader {
    type Item = Result<Record, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            match self.input.read_until(b'\n', &mut self.buf) {
                Ok(0) => self.done = true,
                Ok(_) => {
                    self.line += 1;
                    let line = match std::str::from_utf8(&self.buf) {
                        Ok(l) => l.trim_end_matches(['\n', '\r']),
                        Err(_) => {
                            return Some(Err(RecordError::NotUtf8 {
                                path: self.path.clone(),
                                line: self.line,
                            }))
                        }
                    };
                    if line.trim().is_empty() {
                        continue;
                    }
                    return Some(Record::from_json_line(line).map_err(|message| {
                        RecordError::Malformed {
                            path: self.path.clone(),
                            line: self.line,
                            message,
                        }
                    }));
                }
                Err(source) => {
                    self.done = true;
                    return Some(Err(RecordError::Read {
                        path: self.path.clone(),
                        line: self.line + 1,
                        source,
                    }));
                }
            }
        }
        None
    }
}

enum Sink<W: Write> {
    Plain(W),
    Gzip(GzEncoder<W>),
}

/// Writes a recorded stream, one line per record. Gzip output has a fixed header (mtime 0), so
/// the same records always give the same bytes.
pub struct RecordWriter<W: Write = BufWriter<File>> {
    path: PathBuf,
    sink: Sink<W>,
    written: u64,
}

impl RecordWriter<BufWriter<File>> {
    /// Creates (truncates) a file, gzip'd when its name ends in `.gz`.
    pub fn create(path: &Path) -> Result<Self, RecordError> {
        let file = File::create(path).map_err(|source| RecordError::Write {
            path: path.to_owned(),
            source,
        })?;
        Ok(RecordWriter::new(
            path,
            BufWriter::new(file),
            is_gzip_path(path),
        ))
    }
}

impl<W: Write> RecordWriter<W> {
    /// Writes to `inner`; `name` is used in error messages.
    pub fn new(name: impl Into<PathBuf>, inner: W, gzip: bool) -> Self {
        let sink = if gzip {
            Sink::Gzip(
                flate2::GzBuilder::new()
                    .mtime(0)
                    .write(inner, flate2::Compression::default()),
            )
        } else {
            Sink::Plain(inner)
        };
        RecordWriter {
            path: name.into(),
            sink,
            written: 0,
        }
    }

    fn err(&self, source: io::Error) -> RecordError {
        RecordError::Write {
            path: self.path.clone(),
            source,
        }
    }

    pub fn write(&mut self, record: &Record) -> Result<(), RecordError> {
        let mut line = record.to_json_line();
        line.push('\n');
        let result = match &mut self.sink {
            Sink::Plain(w) => w.write_all(line.as_bytes()),
            Sink::Gzip(w) => w.write_all(line.as_bytes()),
        };
        result.map_err(|e| self.err(e))?;
        self.written += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Pushes everything written so far to the inner writer (a gzip sync point).
    pub fn flush(&mut self) -> Result<(), RecordError> {
        let result = match &mut self.sink {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
        };
        result.map_err(|e| self.err(e))
    }

    /// Ends the stream (the gzip trailer), flushes and returns the inner writer.
    pub fn finish(self) -> Result<W, RecordError> {
        let result = match self.sink {
            Sink::Plain(w) => Ok(w),
            Sink::Gzip(w) => w.finish(),
        };
        let mut inner = result.map_err(|source| RecordError::Write {
            path: self.path.clone(),
            source,
        })?;
        inner.flush().map_err(|source| RecordError::Write {
            path: self.path.clone(),
            source,
        })?;
        Ok(inner)
    }
}

/// The wall clock in epoch milliseconds (0 before 1970), the unit of event times.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        let mut with_source = Record::new(
            Channel::Unlabeled,
            1_767_225_600_042,
            None,
            vec![0xff, b'{', 0x00],
        );
        with_source.partition = Some(3);
        with_source.offset = Some(17);
        with_source.headers = vec![("a".into(), "1".into()), ("a".into(), "2".into())];
        vec![
            Record::new(
                Channel::Positive,
                1_767_225_600_000,
                Some("a1".into()),
                br#"{"id":"a1","ts":1767225600000,"x":[1.0,"\u00e9"]}"#.to_vec(),
            ),
            with_source,
            Record::new(
                Channel::Negative,
                0,
                Some("é".into()),
                b"not json\n".to_vec(),
            ),
        ]
    }

    #[test]
    fn lines_have_the_documented_form() {
        let records = sample();
        assert_eq!(
            records[0].to_json_line(),
            r#"{"channel":"positive","ts":1767225600000,"key":"a1","payload":"{\"id\":\"a1\",\"ts\":1767225600000,\"x\":[1.0,\"\\u00e9\"]}"}"#
        );
        assert_eq!(
            records[1].to_json_line(),
            r#"{"channel":"unlabeled","ts":1767225600042,"key":null,"payload_b64":"/3sA","partition":3,"offset":17,"headers":[["a","1"],["a","2"]]}"#
        );
    }

    #[test]
    fn plain_and_gzip_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let records = sample();
        for name in ["s.jsonl", "s.jsonl.gz"] {
            let path = dir.path().join(name);
            let mut w = RecordWriter::create(&path).unwrap();
            for r in &records {
                w.write(r).unwrap();
            }
            assert_eq!(w.written(), 3);
            w.finish().unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.starts_with(&[0x1f, 0x8b]), name.ends_with(".gz"));
            let reader = RecordReader::open(&path).unwrap();
            let position = reader.position();
            assert_eq!(position.size, Some(bytes.len() as u64));
            let back: Vec<Record> = reader.collect::<Result<_, _>>().unwrap();
            assert_eq!(back, records);
            // Every byte of the file was read, compressed or not (the replay's progress).
            assert_eq!(position.read(), bytes.len() as u64);
        }
    }

    #[test]
    fn gzip_output_is_deterministic() {
        let write = || {
            let mut w = RecordWriter::new("mem", Vec::new(), true);
            for r in sample() {
                w.write(&r).unwrap();
            }
            w.finish().unwrap()
        };
        let a = write();
        assert_eq!(a, write());
        assert_eq!(&a[4..8], &[0, 0, 0, 0], "mtime must be 0");
    }

    #[test]
    fn malformed_lines_name_file_and_line_and_reading_goes_on() {
        let text = concat!(
            "{\"channel\":\"positive\",\"ts\":1,\"key\":\"k\",\"payload\":\"p\"}\n",
            "\n",
            "{\"channel\":\"spam\",\"ts\":1,\"payload\":\"p\"}\n",
            "{\"channel\":\"positive\",\"ts\":1}\n",
            "{\"channel\":\"positive\",\"ts\":1,\"payload\":\"p\",\"payload_b64\":\"cA==\"}\n",
            "{\"channel\":\"positive\",\"ts\":1,\"payload_b64\":\"***\"}\n",
            "{\"channel\":\"positive\",\"ts\":1.5,\"payload\":\"p\"}\n",
            "{\"channel\":\"positive\",\"ts\":1,\"payload\":\"p\",\"paylod\":1}\n",
            "not json\n",
            "\u{ff}\n",
            "{\"channel\":\"negative\",\"ts\":2,\"payload_b64\":\"cA==\"}\r\n",
        )
        .replace('\u{ff}', "\u{1}");
        let mut bytes = text.into_bytes();
        // Line 10 becomes invalid UTF-8.
        let at = bytes.iter().position(|&b| b == 1).unwrap();
        bytes[at] = 0xff;
        let reader = RecordReader::new("rec.jsonl", Box::new(io::Cursor::new(bytes)));
        let results: Vec<_> = reader.collect();
        assert_eq!(results.len(), 10);
        let ok = results[0].as_ref().unwrap();
        assert_eq!(
            (ok.channel, ok.ts, ok.key.as_deref(), &ok.payload[..]),
            (Channel::Positive, 1, Some("k"), &b"p"[..])
        );
        let errors: Vec<String> = results[1..9]
            .iter()
            .map(|r| r.as_ref().unwrap_err().to_string())
            .collect();
        assert!(
            errors[0].starts_with("rec.jsonl:3: unknown variant `spam`"),
            "{}",
            errors[0]
        );
        assert_eq!(errors[1], "rec.jsonl:4: no payload or payload_b64");
        assert_eq!(errors[2], "rec.jsonl:5: both payload and payload_b64");
        assert!(
            errors[3].starts_with("rec.jsonl:6: payload_b64 is not base64"),
            "{}",
            errors[3]
        );
        assert!(
            errors[4].starts_with("rec.jsonl:7: invalid type: floating point"),
            "{}",
            errors[4]
        );
        assert!(
            errors[5].starts_with("rec.jsonl:8: unknown field `paylod`"),
            "{}",
            errors[5]
        );
        assert!(
            errors[6].starts_with("rec.jsonl:9: expected ident"),
            "{}",
            errors[6]
        );
        assert_eq!(errors[7], "rec.jsonl:10: the line is not valid UTF-8");
        let last = results[9].as_ref().unwrap();
        assert_eq!(
            (last.channel, &last.payload[..]),
            (Channel::Negative, &b"p"[..])
        );
    }

    #[test]
    fn the_json_schema_matches_the_reader() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../docs/record.schema.json")).unwrap();
        assert_eq!(schema["required"], serde_json::json!(["channel", "ts"]));
        let channels: Vec<&str> = Channel::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            schema["properties"]["channel"]["enum"],
            serde_json::json!(channels)
        );
        // The fields of a record with everything set (its payload is binary, so add the
        // text form) are exactly the schema's properties.
        let written: serde_json::Value = serde_json::from_str(&sample()[1].to_json_line()).unwrap();
        let mut properties: Vec<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        properties.sort();
        let mut all: Vec<String> = written
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .chain(["payload".to_owned()])
            .collect();
        all.sort();
        assert_eq!(all, properties);
        for example in schema["examples"].as_array().unwrap() {
            Record::from_json_line(&example.to_string()).unwrap();
        }
    }

    #[test]
    fn a_missing_file_is_an_open_error() {
        let err = RecordReader::open(Path::new("/nonexistent/x.jsonl"))
            .err()
            .unwrap();
        assert!(err
            .to_string()
            .starts_with("cannot open /nonexistent/x.jsonl: "));
    }
}
