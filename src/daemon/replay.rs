//! The daemon on a recorded stream: every record, in file order, to the [`Engine`]; scores
//! and dead letters to files ([`FileOutputs`]).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{DaemonError, Summary};
use crate::config::OutputConfig;
use crate::engine::machine::Engine;
use crate::engine::outputs::{Origin, OutputError, Outputs};
use crate::engine::prequential::Prequential;
use crate::engine::scoring::{Prescore, ScoreOutput};
use crate::engine::window::Evicted;
use crate::stream::dlq::{DlqRecord, DlqWriter, UnreadableLine};
use crate::stream::record::{FilePosition, Record, RecordError, RecordReader};
use crate::stream::{Channel, Event};

/// Scores as JSON lines to a writer (a file or stdout, named in errors), dead letters to a
/// [`DlqWriter`].
pub struct FileOutputs {
    scores: Box<dyn Write + Send>,
    scores_name: String,
    dlq: DlqWriter,
}

impl FileOutputs {
    pub fn new(scores: Box<dyn Write + Send>, scores_name: String, dlq: DlqWriter) -> FileOutputs {
        FileOutputs {
            scores,
            scores_name,
            dlq,
        }
    }

    fn scores_error(&self, source: std::io::Error) -> OutputError {
        OutputError::Scores {
            name: self.scores_name.clone(),
            source,
        }
    }
}

impl Outputs for FileOutputs {
    fn score(&mut self, output: ScoreOutput, _origin: Option<Origin>) -> Result<(), OutputError> {
        writeln!(self.scores, "{}", output.to_json_line()).map_err(|e| self.scores_error(e))
    }

    fn dead_letter(&mut self, letter: &DlqRecord) -> Result<(), OutputError> {
        Ok(self.dlq.write(letter)?)
    }

    fn unreadable_line(&mut self, letter: &UnreadableLine) -> Result<(), OutputError> {
        Ok(self.dlq.write_unreadable(letter)?)
    }

    fn flush(&mut self) -> Result<(), OutputError> {
        self.scores.flush().map_err(|e| self.scores_error(e))?;
        Ok(self.dlq.flush()?)
    }
}

/// The prequential accounting of a replay: the writing thread updates it, the caller takes
/// the report at the end.
#[derive(Debug, Clone)]
pub struct Tracker(Arc<Mutex<Prequential>>);

impl Tracker {
    pub fn new(prequential: Prequential) -> Tracker {
        Tracker(Arc::new(Mutex::new(prequential)))
    }

    // Every update is one call that cannot leave the counts half-edited, so a poisoned lock
    // is still usable.
    fn lock(&self) -> MutexGuard<'_, Prequential> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The accounting so far (the replay has ended when the caller asks).
    pub fn take(&self) -> Prequential {
        let mut guard = self.lock();
        let (block, tau) = guard.settings();
        std::mem::replace(&mut *guard, Prequential::new(block, tau))
    }
}

/// What the writing thread does, in the order the engine's thread asked for it.
enum Written {
    Score(ScoreOutput),
    /// A labelled record's id and channel: the truth of its unlabeled copy.
    Label(String, Channel),
    DeadLetter(DlqRecord),
    Unreadable(UnreadableLine),
    /// Everything before it is written and pushed to the OS when this is answered.
    Flush(SyncSender<()>),
}

/// Items per hand-over to the writing thread.
const WRITE_BATCH: usize = 256;

/// Batches in flight to the writing thread (a bound on the memory it holds).
const WRITE_BATCHES: usize = 16;

/// The queue to the writing thread. The engine's sink ([`Writer`]) and the replay driver
/// ([`Labels`]) both append to it from the engine's thread, so the thread sees scores and
/// labels in the order they happened.
struct WriteQueue {
    batch: Mutex<Vec<Written>>,
    sender: SyncSender<Vec<Written>>,
}

impl WriteQueue {
    fn push(&self, item: Written) -> Result<(), OutputError> {
        let full = {
            let mut batch = self.batch.lock().unwrap_or_else(|p| p.into_inner());
            batch.push(item);
            (batch.len() >= WRITE_BATCH)
                .then(|| std::mem::replace(&mut *batch, Vec::with_capacity(WRITE_BATCH)))
        };
        match full {
            Some(batch) => self.send(batch),
            None => Ok(()),
        }
    }

    /// Hands over what is queued now.
    fn send_queued(&self) -> Result<(), OutputError> {
        let batch = std::mem::take(&mut *self.batch.lock().unwrap_or_else(|p| p.into_inner()));
        if batch.is_empty() {
            return Ok(());
        }
        self.send(batch)
    }

    fn send(&self, batch: Vec<Written>) -> Result<(), OutputError> {
        self.sender
            .send(batch)
            .map_err(|_| OutputError::WriterGone("it stopped taking outputs".into()))
    }
}

/// The engine's sink on a replay: scores, dead letters and the prequential accounting are
/// done by a thread of its own, in the engine's order (formatting the score lines and the
/// accounting were an eighth of the engine thread's samples on a 1 M-event replay, and the
/// engine's thread is the replay's bound). `flush` waits until everything before it is
/// written, so what a flush covers is on disk as before. An error is returned by every call
/// after the thread met it, from the next one on.
pub struct Writer {
    queue: Arc<WriteQueue>,
    /// The first error the writing thread met.
    failed: Arc<Mutex<Option<String>>>,
}

/// The replay driver's side of the queue: labelled records for the accounting.
#[derive(Clone)]
pub struct Labels(Arc<WriteQueue>);

impl Labels {
    /// A labelled record's id is the truth of its unlabeled copy: the record key when it has
    /// one (`stream make` and Kafka producers key by id), else the payload's `id`. A failed
    /// hand-over is the sink's to report (its next call returns the error).
    fn observe_record(&self, record: &Record) {
        if record.channel == Channel::Unlabeled {
            return;
        }
        #[derive(serde::Deserialize)]
        struct Id {
            id: String,
        }
        let id = match &record.key {
            Some(key) => key.clone(),
            None => match serde_json::from_slice::<Id>(&record.payload) {
                Ok(parsed) => parsed.id,
                Err(_) => return,
            },
        };
        let _ = self.0.push(Written::Label(id, record.channel));
    }
}

/// Starts the writing thread over `files`; with a `tracker`, it also keeps the prequential
/// accounting, and the returned [`Labels`] hands it the labelled records.
pub fn writing_thread(
    files: FileOutputs,
    tracker: Option<Tracker>,
) -> Result<(Writer, Option<Labels>), DaemonError> {
    let (sender, batches) = std::sync::mpsc::sync_channel::<Vec<Written>>(WRITE_BATCHES);
    let failed: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&failed);
    let tracking = tracker.is_some();
    let mut files = files;
    std::thread::Builder::new()
        .name("replay-writer".into())
        .spawn(move || {
            // After an error nothing more is written; the queue is still drained, so the
            // engine never blocks on it, and every flush is answered (after the error is
            // recorded, so the flushing call sees it).
            let mut healthy = true;
            for item in batches.into_iter().flatten() {
                if let Some(t) = &tracker {
                    match &item {
                        Written::Score(output) => t.lock().observe_score(output),
                        Written::Label(id, channel) => t.lock().observe_label(id, *channel),
                        _ => {}
                    }
                }
                let (written, flushed) = match item {
                    Written::Score(output) => (healthy.then(|| files.score(output, None)), None),
                    Written::Label(..) => (None, None),
                    Written::DeadLetter(letter) => {
                        (healthy.then(|| files.dead_letter(&letter)), None)
                    }
                    Written::Unreadable(letter) => {
                        (healthy.then(|| files.unreadable_line(&letter)), None)
                    }
                    Written::Flush(done) => (healthy.then(|| files.flush()), Some(done)),
                };
                if let Some(Err(e)) = written {
                    healthy = false;
                    let mut first = seen.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert(e.to_string());
                }
                if let Some(done) = flushed {
                    let _ = done.send(());
                }
            }
        })
        .map_err(|e| DaemonError::runtime(format!("cannot start the writing thread: {e}")))?;
    let queue = Arc::new(WriteQueue {
        batch: Mutex::new(Vec::with_capacity(WRITE_BATCH)),
        sender,
    });
    let labels = tracking.then(|| Labels(Arc::clone(&queue)));
    Ok((Writer { queue, failed }, labels))
}

impl Writer {
    /// The error the writing thread met, if any.
    fn check(&self) -> Result<(), OutputError> {
        match &*self.failed.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(OutputError::Earlier(e.clone())),
            None => Ok(()),
        }
    }
}

impl Outputs for Writer {
    fn score(&mut self, output: ScoreOutput, _origin: Option<Origin>) -> Result<(), OutputError> {
        self.check()?;
        self.queue.push(Written::Score(output))
    }

    fn dead_letter(&mut self, letter: &DlqRecord) -> Result<(), OutputError> {
        self.check()?;
        self.queue.push(Written::DeadLetter(letter.clone()))
    }

    fn unreadable_line(&mut self, letter: &UnreadableLine) -> Result<(), OutputError> {
        self.check()?;
        self.queue.push(Written::Unreadable(letter.clone()))
    }

    fn flush(&mut self) -> Result<(), OutputError> {
        let (done, flushed) = std::sync::mpsc::sync_channel(1);
        self.queue.push(Written::Flush(done))?;
        self.queue.send_queued()?;
        flushed
            .recv()
            .map_err(|_| OutputError::WriterGone("it ended before the flush".into()))?;
        self.check()
    }
}

impl Drop for Writer {
    /// What is still queued is written before the sink goes.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// The `[output]` files (scores appended, `-` for stdout; the dead-letter file), their
/// directories created.
pub fn file_outputs(output: &OutputConfig) -> Result<FileOutputs, DaemonError> {
    let scores: Box<dyn Write + Send> = if output.scores.as_os_str() == "-" {
        Box::new(std::io::BufWriter::new(std::io::stdout()))
    } else {
        let path = &output.scores;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| DaemonError::file(dir, e))?;
        }
        let (file, cut) =
            crate::files::open_append_whole_lines(path).map_err(|e| DaemonError::file(path, e))?;
        warn_cut(path, cut);
        Box::new(std::io::BufWriter::new(file))
    };
    if let Some(dir) = output.dlq.parent() {
        std::fs::create_dir_all(dir).map_err(|e| DaemonError::file(dir, e))?;
    }
    let dlq = DlqWriter::open(&output.dlq).map_err(|e| DaemonError::file(&output.dlq, e))?;
    warn_cut(&output.dlq, dlq.cut_bytes());
    let scores_name = match output.scores.as_os_str() == "-" {
        true => "standard output".to_string(),
        false => output.scores.display().to_string(),
    };
    Ok(FileOutputs::new(scores, scores_name, dlq))
}

/// Says that a half-written last line (a crash or a full disk) was cut from an output file.
fn warn_cut(path: &Path, bytes: u64) {
    if bytes > 0 {
        tracing::warn!(
            file = %path.display(),
            bytes,
            "cut a half-written last line left by an earlier run"
        );
    }
}

/// The events posted to the HTTP API during a replay.
pub struct PostedEvents {
    /// The queue from `POST /v1/events/*`; `None` takes none.
    pub feed: Option<Receiver<crate::serve::Posted>>,
    /// Keep taking them after the end of the stream (`replay --serve`, `run`).
    pub serve_after: bool,
}

impl PostedEvents {
    /// Takes the requests already queued, showing their records to `labels` first.
    fn take_queued(
        &self,
        engine: &mut Engine,
        labels: Option<&Labels>,
    ) -> Result<u64, DaemonError> {
        let Some(feed) = &self.feed else {
            return Ok(0);
        };
        super::posted::take_queued(engine, feed, |record| {
            if let Some(labels) = labels {
                labels.observe_record(record);
            }
        })
    }
}

/// A log line every [`PROGRESS_EVERY`] while a replay runs: events so far, how far into the
/// file (compressed bytes for a `.gz`) and the time left at that pace.
struct ReplayProgress {
    position: FilePosition,
    started: Instant,
    last: Instant,
}

/// How often a replay logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl ReplayProgress {
    fn new(position: FilePosition) -> ReplayProgress {
        let now = Instant::now();
        ReplayProgress {
            position,
            started: now,
            last: now,
        }
    }

    fn report(&mut self, events: u64) {
        if self.last.elapsed() < PROGRESS_EVERY {
            return;
        }
        self.last = Instant::now();
        let elapsed = self.started.elapsed().as_secs_f64();
        let read = self.position.read();
        match self.position.size.filter(|&size| size > 0 && read > 0) {
            Some(size) => {
                let share = (read as f64 / size as f64).min(1.0);
                let eta_seconds = (elapsed * (1.0 - share) / share).round();
                tracing::info!(
                    events,
                    percent = (share * 100.0).round(),
                    eta_seconds,
                    "replaying"
                );
            }
            None => tracing::info!(events, seconds = elapsed.round(), "replaying"),
        }
    }
}

/// The recorded stream at `path`.
pub fn open(path: &Path) -> Result<RecordReader, DaemonError> {
    RecordReader::open(path).map_err(|e| DaemonError::file(path, e))
}

/// Records per batch handed from the reading thread to the engine.
const READ_AHEAD_BATCH: usize = 256;

/// Batches in flight between the reading thread and the engine (a bound on the memory the
/// read-ahead holds: a few thousand records).
const READ_AHEAD_BATCHES: usize = 16;

/// A record (or the error in its place), its payload as read ahead and its score by the
/// model active then ([`Engine::prescoring_preparse`]).
type ReadAhead = (Result<Record, RecordError>, Option<Event>, Option<Prescore>);

/// What the engine hands back to the reading thread to free: handled records and the events
/// that left the windows ([`Engine::keep_evicted`]).
type Spent = (Vec<Record>, Vec<Evicted>);

/// The read-ahead between the reading thread and the engine: batches one way, handled
/// records back, so the thread that allocated them frees them (freeing them on the engine's
/// thread was 2.5 % of a 1 M-event replay's samples, all of it on the busiest thread).
struct ReadAheadChannel {
    batches: std::sync::mpsc::Receiver<Vec<ReadAhead>>,
    handled: std::sync::mpsc::Sender<Spent>,
    reading: std::thread::JoinHandle<()>,
}

/// Decompresses and parses the stream's lines, and reads their payloads with `preparse`
/// ([`Engine::preparse`]), on a thread of their own, in file order, so that this work
/// overlaps the engine's (on a 1 M-event replay it was a third of the loop). An error is
/// handed on in its place like a record; the thread ends at the end of input or when the
/// receiver is dropped. Before each batch it drops the records handed back, at most a
/// read-ahead's worth.
fn read_ahead(
    reader: RecordReader,
    mut preparse: impl FnMut(Channel, &[u8]) -> (Option<Event>, Option<Prescore>) + Send + 'static,
) -> ReadAheadChannel {
    let (sender, batches) = std::sync::mpsc::sync_channel(READ_AHEAD_BATCHES);
    let (handled, spent) = std::sync::mpsc::channel::<Spent>();
    let reading = std::thread::spawn(move || {
        let mut reader = reader;
        loop {
            // What comes back is dropped here, where it was allocated.
            while spent.try_recv().is_ok() {}
            let batch: Vec<ReadAhead> = reader
                .by_ref()
                .take(READ_AHEAD_BATCH)
                .map(|record| {
                    let (parsed, prescore) = match &record {
                        Ok(r) => preparse(r.channel, &r.payload),
                        Err(_) => (None, None),
                    };
                    (record, parsed, prescore)
                })
                .collect();
            if batch.is_empty() || sender.send(batch).is_err() {
                return;
            }
        }
    });
    ReadAheadChannel {
        batches,
        handled,
        reading,
    }
}

/// Feeds every record to the engine until the end of input or `stop`; then emits what still
/// waits for a model as unscored (`shutdown`) and flushes the sinks. A line that is not a
/// record (malformed, not UTF-8) is dead-lettered as `invalid_record` with its file and line,
/// and the replay goes on. A file that cannot be read on (a truncated `.gz`) ends the input
/// there: everything read before it is answered all the same, then the error is returned.
/// With `labels`, each
/// labelled record is shown to the accounting before the engine sees it. Waits for a first model
/// are bounded by event time only (`scoring.max_wait`), even when paced, so a replay's
/// outputs never depend on the machine's speed. With a `speed`, sleeps between
/// records by their event-time gaps divided by it.
///
/// Events posted to the HTTP API (`posted`) are taken between records (every read-ahead
/// batch, and while pacing); with `serve_after`, the engine goes on taking them after the end
/// of the stream until `stop` ([`super::posted::run`]).
pub fn run(
    mut engine: Engine,
    reader: RecordReader,
    speed: Option<f64>,
    stop: &AtomicBool,
    labels: Option<&Labels>,
    posted: &PostedEvents,
) -> Result<Summary, DaemonError> {
    let started = Instant::now();
    let mut first_ts = None;
    let mut handled = 0u64;
    let mut progress = ReplayProgress::new(reader.position());
    let ReadAheadChannel {
        batches,
        handled: spent,
        reading,
    } = read_ahead(reader, engine.prescoring_preparse());
    engine.keep_evicted(true);
    let mut unreadable = None;
    let mut handled_records = Vec::with_capacity(READ_AHEAD_BATCH);
    let records = batches
        .iter()
        .flat_map(|batch| (batch.into_iter().enumerate()).map(|(i, item)| (i == 0, item)));
    for (batch_start, (record, parsed, prescore)) in records {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if batch_start {
            // After the end of input the reading thread is gone and they are dropped here.
            let records =
                std::mem::replace(&mut handled_records, Vec::with_capacity(READ_AHEAD_BATCH));
            let _ = spent.send((records, engine.take_evicted()));
            handled += posted.take_queued(&mut engine, labels)?;
            progress.report(handled);
        }
        let record = match record {
            Ok(record) => record,
            Err(e) => match UnreadableLine::of(e) {
                // A line that is not a record is a dead letter; the next line may be fine.
                Ok(letter) => {
                    engine
                        .dead_letter_line(&letter)
                        .map_err(DaemonError::runtime)?;
                    continue;
                }
                // The file itself cannot be read on (a truncated `.gz`): the input ends here.
                Err(e) => {
                    unreadable = Some(e);
                    break;
                }
            },
        };
        if let Some(factor) = speed {
            let first = *first_ts.get_or_insert(record.ts);
            let due = Duration::from_secs_f64(
                (record.ts.saturating_sub(first)).max(0) as f64 / 1000.0 / factor,
            );
            // Short naps, so a shutdown never waits for a long event-time gap.
            while let Some(wait) = due.checked_sub(started.elapsed()) {
                if stop.load(Ordering::SeqCst) || wait.is_zero() {
                    break;
                }
                std::thread::sleep(wait.min(Duration::from_millis(100)));
                handled += posted.take_queued(&mut engine, labels)?;
            }
        }
        if let Some(labels) = labels {
            labels.observe_record(&record);
        }
        engine
            .handle_preparsed(&record, parsed, prescore)
            .map_err(DaemonError::runtime)?;
        handled_records.push(record);
        handled += 1;
    }
    // Dropping the receiver ends the reading thread at its next batch.
    drop(batches);
    engine.keep_evicted(false);
    if reading.join().is_err() {
        return Err(DaemonError::runtime(
            "the recorded stream's reading thread panicked",
        ));
    }
    if let Some(e) = unreadable {
        engine.finish().map_err(DaemonError::runtime)?;
        tracing::error!(events = handled, error = %e, "the recorded stream ends unreadable");
        return Err(DaemonError::runtime(e));
    }
    tracing::info!(events = handled, "end of the recorded stream");
    if let Some(feed) = &posted.feed {
        handled += super::posted::take_queued(&mut engine, feed, |_| {})?;
    }
    // The end of the stream answers what still waits, whatever comes after, so a replay's
    // outputs stay the same with and without `--serve`.
    engine.finish().map_err(DaemonError::runtime)?;
    if let (Some(feed), true) = (&posted.feed, posted.serve_after) {
        if !stop.load(Ordering::SeqCst) {
            tracing::info!("taking events posted to /v1/events until SIGINT or SIGTERM");
            handled += super::posted::run(engine, feed, stop)?;
        }
    }
    Ok(Summary {
        handled,
        ..Summary::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(id: &str, flagged: bool) -> ScoreOutput {
        let line = format!(
            r#"{{"id":"{id}","ts":1,"score":0.5,"flagged":{flagged},"threshold":0.0,"certified":true,"model_version":1,"threshold_version":0,"status":"scored","meta":null}}"#
        );
        serde_json::from_str(&line).expect("a score output")
    }

    fn labelled(id: &str, channel: Channel) -> Record {
        Record::new(channel, 1, Some(id.to_string()), b"{}".to_vec())
    }

    fn writer_to(dir: &Path, scores: &Path) -> (Writer, Option<Labels>, Tracker) {
        let file = std::fs::File::create(scores).expect("scores file");
        let dlq = DlqWriter::open(&dir.join("dlq.jsonl")).expect("dlq");
        let files = FileOutputs::new(
            Box::new(std::io::BufWriter::new(file)),
            scores.display().to_string(),
            dlq,
        );
        let tracker = Tracker::new(Prequential::new(100, 0.05));
        let (writer, labels) =
            writing_thread(files, Some(tracker.clone())).expect("writing thread");
        (writer, labels, tracker)
    }

    /// Scores and labels reach the accounting in the order the engine's thread made them,
    /// across hand-overs, and a flush returns once every score before it is in the file.
    #[test]
    fn the_writing_thread_keeps_the_engine_order_and_flushes_what_came_before() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("scores.jsonl");
        let (mut writer, labels, tracker) = writer_to(dir.path(), &path);
        let labels = labels.expect("labels with a tracker");
        let n = 3 * WRITE_BATCH + 17;
        let (mut tp, mut fp) = (0, 0);
        for i in 0..n {
            let id = format!("e{i}");
            let (positive, flagged) = (i % 3 == 0, i % 2 == 0);
            let channel = match positive {
                true => Channel::Positive,
                false => Channel::Negative,
            };
            // Half the labels come before their score, half after.
            if i % 4 < 2 {
                labels.observe_record(&labelled(&id, channel));
            }
            writer.score(scored(&id, flagged), None).expect("queued");
            if i % 4 >= 2 {
                labels.observe_record(&labelled(&id, channel));
            }
            tp += usize::from(positive && flagged);
            fp += usize::from(!positive && flagged);
        }
        writer.flush().expect("flushed");
        let written = std::fs::read_to_string(&path).expect("scores");
        let ids: Vec<String> = written
            .lines()
            .map(|l| serde_json::from_str::<ScoreOutput>(l).expect("a score").id)
            .collect();
        let expected: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
        assert_eq!(ids, expected);
        let report = tracker.take().finish();
        assert_eq!(report.total.scored, n as u64);
        assert_eq!(report.total.true_positives, tp as u64);
        assert_eq!(report.total.false_positives, fp as u64);
        assert_eq!(report.total.positives, n.div_ceil(3) as u64);
        assert_eq!(report.without_truth, 0);
    }

    /// A write that fails is returned, naming the file, by every call after the thread met
    /// it: the engine cannot go on as if its scores were written.
    #[test]
    fn a_failed_write_is_returned_by_every_later_call() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut writer, _, _) = writer_to(dir.path(), Path::new("/dev/full"));
        let mut first = None;
        for i in 0..100 * WRITE_BATCH {
            if let Err(e) = writer.score(scored(&format!("e{i}"), true), None) {
                first = Some(e.to_string());
                break;
            }
        }
        let first = match first {
            Some(e) => e,
            None => writer.flush().expect_err("the flush fails").to_string(),
        };
        assert!(first.contains("/dev/full"), "{first}");
        for _ in 0..3 {
            let again = writer.flush().expect_err("still failing").to_string();
            assert_eq!(again, first);
            let score = writer.score(scored("late", true), None);
            assert_eq!(score.expect_err("refused").to_string(), first);
        }
    }
}
