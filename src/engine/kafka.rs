//! The daemon on Kafka: one poll loop feeding the [`Engine`], outputs produced to topics,
//! offsets committed at least once, training on its own thread.
//!
//! - **Poll loop** ([`run`]): a `BaseConsumer` subscribed to the input topics (group
//!   `kafka.group_id`, cooperative-sticky). Each message becomes a [`Record`] and goes to
//!   [`Engine::handle`], which scores unlabeled events with the active model and windows
//!   everything. Retrains are deferred: the loop hands [`Engine::due_retrain`]'s job to a
//!   training thread and gates/installs the result when it returns, so polling, scoring and
//!   heartbeats never wait for a solver.
//! - **Outputs** ([`KafkaOutputs`]): scores to `kafka.topics.scores` (key = event id; headers
//!   `model_version` — absent for an unscored output —, `source_topic`, `source_partition`,
//!   `source_offset`), rejected messages to `kafka.topics.dlq` (original key, payload and
//!   headers, plus Kafka Connect's `__connect.errors.topic`, `.partition`, `.offset`,
//!   `.exception.class.name` = the reason code and `.exception.message` = the detail). One
//!   idempotent producer, on its own thread ([`Producing`]): the loop books the round's
//!   outputs and hands them over in one batch; that thread serialises scores, sends in order
//!   and serves the delivery reports. A send that fails after librdkafka's own retries is
//!   counted and sent again, never dropped.
//! - **At-least-once** ([`crate::stream::offsets`]): per input partition the loop commits the
//!   oldest offset whose output is unacknowledged or whose event is still in a window (or
//!   waits for a first model), every `kafka.commit_interval_ms`, on revocation and at
//!   shutdown. Alongside, it commits `done` (all outputs below it acknowledged) as the offset
//!   of the companion group `<group_id>.done`, which never has members. A restarted daemon,
//!   or the member a partition moves to, re-reads the windows from the group's offset with
//!   [`Engine::restore`] and scores again only from `done`. Retrains wait until every
//!   assigned partition has been restored, so the first retrain after a restart sees the
//!   windows as they were.
//! - **Backpressure**: above `kafka.max_in_flight` unacknowledged outputs the loop pauses its
//!   partitions (still polling, so the group membership stays alive) and resumes below half.
//!
//! Choices where the issue is silent: partitions revoked from this member keep their events in
//! this member's windows until they age out (training data is not thrown away by a
//! rebalance), but their offsets are no longer committed here.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError as RdKafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::config::{KafkaConfig, Role};
use crate::engine::daemon::{Engine, EngineError, RetrainOutcome, TrainedRetrain};
use crate::engine::outputs::{Origin, OutputError, Outputs};
use crate::engine::scoring::ScoreOutput;
use crate::engine::store::StoredModel;
use crate::stream::dlq::DlqRecord;
use crate::stream::kafka::{
    consumer_config, headers_of, input_topics, model_producer_config, model_reader_config,
    producer_config, read_without_headers, ConsumerRole,
};
use crate::stream::offsets::{InputPartition, OffsetBook};
use crate::stream::record::Record;
use crate::stream::Channel;
use crate::telemetry::Metrics;

/// Largest dead letter produced (librdkafka's default `message.max.bytes` is 1 000 000, and
/// brokers default to about 1 MiB); larger ones are cut ([`KafkaOutputs::dead_letter`]).
const DLQ_MAX_BYTES: usize = 900_000;
/// Messages handled per round of the loop at most.
const BATCH: usize = 256;
/// How long one poll waits for a message; also the loop's reaction time to a stop.
const POLL: Duration = Duration::from_millis(50);
/// Pause before sending failed deliveries again.
const RESEND_BACKOFF: Duration = Duration::from_millis(500);
/// Deadline of a committed-offsets lookup after an assignment.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum KafkaRunError {
    #[error("kafka client: {0}")]
    Client(#[from] RdKafkaError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("cannot start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
    #[error("producing outputs: {0}")]
    Produce(String),
}

/// What [`run`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KafkaSummary {
    /// Messages handled (scored, windowed or dead-lettered).
    pub handled: u64,
    /// Messages re-read after a restart that only rebuilt a window.
    pub restored: u64,
    /// Outputs still unacknowledged when the shutdown deadline passed (their input offsets
    /// were not committed, so they are read again by the next member).
    pub unacknowledged: usize,
}

/// Channel ↔ topic names of one configuration.
#[derive(Debug, Clone)]
struct Topics {
    /// Input topic → channel: at most three, so lookups scan (once per message, cheaper than
    /// hashing the topic name).
    inputs: Vec<(String, Channel)>,
    /// Shared by every output message (a clone per message is a reference count).
    scores: Arc<str>,
    dlq: Arc<str>,
}

impl Topics {
    fn of(k: &KafkaConfig) -> Topics {
        Topics {
            inputs: input_topics(k),
            scores: k.topics.scores.as_str().into(),
            dlq: k.topics.dlq.as_str().into(),
        }
    }

    fn channel(&self, topic: &str) -> Option<Channel> {
        self.inputs
            .iter()
            .find(|(t, _)| t.as_str() == topic)
            .map(|(_, c)| *c)
    }

    fn input(&self, channel: Channel) -> Option<&str> {
        self.inputs
            .iter()
            .find(|(_, c)| *c == channel)
            .map(|(t, _)| t.as_str())
    }

    /// `channel`'s input topic for a header (empty if this member does not read it).
    fn input_name(&self, channel: Channel) -> &str {
        self.input(channel).unwrap_or_default()
    }
}

/// A header name: the daemon's own are static, a dead letter's originals are copied.
type HeaderKey = std::borrow::Cow<'static, str>;

/// One message to produce, owned so that it can wait and be sent again.
#[derive(Debug, Clone)]
struct Outgoing {
    topic: Arc<str>,
    key: Option<Vec<u8>>,
    payload: Vec<u8>,
    headers: Vec<(HeaderKey, Vec<u8>)>,
    /// The input message it answers.
    hold: (InputPartition, i64),
}

impl Outgoing {
    fn from_message(m: &BorrowedMessage<'_>, hold: (InputPartition, i64)) -> Outgoing {
        let headers = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| {
                        let key = HeaderKey::Owned(h.key.to_string());
                        (key, h.value.unwrap_or_default().to_vec())
                    })
                    .collect()
            })
            .unwrap_or_default();
        Outgoing {
            topic: m.topic().into(),
            key: m.key().map(<[u8]>::to_vec),
            payload: m.payload().unwrap_or_default().to_vec(),
            headers,
            hold,
        }
    }
}

/// What the producer's delivery callback reports to the loop. A failure is boxed: every
/// acknowledgement passes through the channel, and its slots are as large as the largest
/// variant.
enum Delivery {
    Acknowledged((InputPartition, i64)),
    Failed {
        error: String,
        message: Box<Outgoing>,
    },
}

/// Producer context: delivery reports go to the loop through a channel (a `Sender` is `Sync`:
/// no lock per report).
struct DeliveryContext {
    reports: mpsc::Sender<Delivery>,
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka("producer", level, fac, message);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<(InputPartition, i64)>;

    fn delivery(&self, result: &DeliveryResult<'_>, hold: Self::DeliveryOpaque) {
        let report = match result {
            Ok(_) => Delivery::Acknowledged(*hold),
            Err((e, message)) => Delivery::Failed {
                error: e.to_string(),
                message: Box::new(Outgoing::from_message(message, *hold)),
            },
        };
        // The loop is gone only after its final flush; nothing is waiting then.
        let _ = self.reports.send(report);
    }
}

fn log_librdkafka(client: &str, level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(client, fac, "librdkafka: {message}"),
        RDKafkaLogLevel::Warning => tracing::warn!(client, fac, "librdkafka: {message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(client, fac, "librdkafka: {message}")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(client, fac, "librdkafka: {message}"),
    }
}

/// What the loop hands to the produce thread, in order.
enum Produce {
    /// A score: serialised, with its headers, on the produce thread.
    Score(ScoreOutput, Origin),
    /// A message built on the loop thread (a dead letter).
    Message(Outgoing),
    /// A failed delivery, sent again after [`RESEND_BACKOFF`].
    Resend(Outgoing),
}

/// What is not yet acknowledged, and this round's outputs; shared by the engine's
/// [`KafkaOutputs`] and the loop (same thread, so the lock is never contended). Both write to
/// it once per round, not per event ([`Loop::settle_round`]): an uncontended lock is still an
/// atomic exchange, a full fence that waited for the window's cache-missing stores each time
/// (about a twentieth of the poll thread in `neyman bench kafka`).
struct Outbox {
    book: OffsetBook,
    /// Outputs of this round, handed to the produce thread in one batch by
    /// [`Loop::drain_deliveries`] (one wake-up per round, not per output).
    batch: Vec<Produce>,
}

impl Outbox {
    /// Outputs not yet acknowledged (waiting, sent, or being sent again).
    fn unacknowledged(&self) -> usize {
        self.book.in_flight()
    }
}

type SharedOutbox = Arc<Mutex<Outbox>>;

/// The producer on its own thread. Serialising a score and handing a message with four headers
/// to librdkafka cost about as much as everything else the poll loop does per event (perf,
/// `neyman bench kafka`), so the loop only books outputs and this thread sends them. Order is
/// kept: batches arrive in order, and a send librdkafka refuses holds back everything behind
/// it.
///
/// The thread also serves the producer's delivery reports (a `BaseProducer`, not a
/// `ThreadedProducer` with a polling thread of its own): librdkafka frees each sent message and
/// its headers where the reports are served, so they are freed by the thread that allocated
/// them, and one thread fewer competes for the cores (measured in `neyman bench kafka`).
struct Producing {
    producer: BaseProducer<DeliveryContext>,
    topics: Topics,
    /// Outputs not yet handed to librdkafka, in order: its queue was full, or a delivery
    /// failed and waits for [`RESEND_BACKOFF`].
    backlog: VecDeque<Produce>,
    /// After a failed delivery the backlog waits until then: a broker that is down is not
    /// hammered with resends.
    retry_at: Option<Instant>,
    /// The score being sent, as JSON: one buffer reused, not an allocation per score.
    payload: Vec<u8>,
}

/// How often a backlog is retried while librdkafka's queue is full.
const BACKLOG_RETRY: Duration = Duration::from_millis(1);

/// How often delivery reports are served while outputs are in flight and no batch arrives:
/// an acknowledgement waits at most this long for the loop to hear of it.
const DELIVERY_POLL: Duration = Duration::from_millis(1);

impl Producing {
    fn new(producer: BaseProducer<DeliveryContext>, topics: Topics) -> Producing {
        Producing {
            producer,
            topics,
            backlog: VecDeque::new(),
            retry_at: None,
            payload: Vec::new(),
        }
    }

    /// Sends batches and serves delivery reports until the loop hangs up. A send refused for
    /// another reason than a full queue (e.g. a message over the broker's limit) is fatal: it
    /// goes to `fatal`, the loop stops with it, and the offset stays uncommitted.
    fn run(mut self, batches: mpsc::Receiver<Vec<Produce>>, fatal: &Mutex<Option<String>>) {
        loop {
            let next = if !self.backlog.is_empty() {
                // While a resend backs off (a broker is down), sleep until then.
                let backoff = self.retry_at.map_or(Duration::ZERO, |at| {
                    at.saturating_duration_since(Instant::now())
                });
                batches.recv_timeout(backoff.max(BACKLOG_RETRY))
            } else if self.producer.in_flight_count() > 0 {
                batches.recv_timeout(DELIVERY_POLL)
            } else {
                batches
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
            };
            match next {
                Ok(batch) => {
                    for item in batch {
                        self.take(item);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            // Reports first: librdkafka counts a message against its queue bound until its
            // report is served, so a full queue empties only here.
            self.serve_deliveries();
            if let Err(e) = self.drain_backlog() {
                tracing::error!(error = %e, "an output cannot be produced");
                *lock(fatal) = Some(e);
                return;
            }
        }
    }

    /// Serves the delivery reports that are ready (the callbacks tell the loop). One poll
    /// serves one event, a produce request's reports; it stops when a poll changes nothing.
    fn serve_deliveries(&self) {
        loop {
            let before = self.producer.in_flight_count();
            if before == 0 {
                return;
            }
            self.producer.poll(Duration::ZERO);
            if self.producer.in_flight_count() == before {
                return;
            }
        }
    }

    fn take(&mut self, item: Produce) {
        if let Produce::Resend(_) = item {
            self.retry_at = Some(Instant::now() + RESEND_BACKOFF);
        }
        self.backlog.push_back(item);
    }

    /// Sends the backlog in order until librdkafka refuses again.
    fn drain_backlog(&mut self) -> Result<(), String> {
        if self.retry_at.is_some_and(|at| Instant::now() < at) {
            return Ok(());
        }
        self.retry_at = None;
        while let Some(item) = self.backlog.front() {
            let sent = match item {
                Produce::Score(output, origin) => send_score(
                    &self.producer,
                    &self.topics,
                    &mut self.payload,
                    output,
                    *origin,
                ),
                Produce::Message(out) | Produce::Resend(out) => send(&self.producer, out),
            };
            match sent {
                Ok(()) => {
                    self.backlog.pop_front();
                }
                Err(RdKafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) => break,
                Err(e) => {
                    let topic = match item {
                        Produce::Score(..) => &self.topics.scores,
                        Produce::Message(out) | Produce::Resend(out) => &out.topic,
                    };
                    return Err(format!("send to {topic}: {e}"));
                }
            }
        }
        Ok(())
    }
}

/// The produce thread as the loop sees it.
struct ProduceThread {
    batches: Option<mpsc::Sender<Vec<Produce>>>,
    handle: Option<JoinHandle<()>>,
    fatal: Arc<Mutex<Option<String>>>,
}

impl ProduceThread {
    fn start(producing: Producing) -> std::io::Result<ProduceThread> {
        let (tx, rx) = mpsc::channel();
        let fatal = Arc::new(Mutex::new(None));
        let reported = Arc::clone(&fatal);
        let handle = std::thread::Builder::new()
            .name("neyman-produce".into())
            .spawn(move || producing.run(rx, &reported))?;
        Ok(ProduceThread {
            batches: Some(tx),
            handle: Some(handle),
            fatal,
        })
    }

    /// Hands a batch over; the error says why the thread is gone.
    fn send(&self, batch: Vec<Produce>) -> Result<(), KafkaRunError> {
        if let Some(e) = lock(&self.fatal).take() {
            return Err(KafkaRunError::Produce(e));
        }
        if batch.is_empty() {
            return Ok(());
        }
        match &self.batches {
            Some(tx) if tx.send(batch).is_ok() => Ok(()),
            _ => Err(KafkaRunError::Produce(
                "the produce thread stopped".to_string(),
            )),
        }
    }

    /// Hangs up and waits for the thread (it drops the producer).
    fn stop(&mut self) {
        self.batches = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// An owned message (a dead letter, or a failed delivery sent again) to librdkafka.
fn send(producer: &BaseProducer<DeliveryContext>, out: &Outgoing) -> KafkaResult<()> {
    let mut headers = OwnedHeaders::new_with_capacity(out.headers.len());
    for (key, value) in &out.headers {
        headers = headers.insert(Header {
            key,
            value: Some(value),
        });
    }
    let mut record = BaseRecord::with_opaque_to(&out.topic, Box::new(out.hold))
        .payload(&out.payload)
        .headers(headers);
    if let Some(key) = &out.key {
        record = record.key(key);
    }
    producer.send(record).map_err(|(e, _)| e)
}

/// A score as a message: key = event id, the score JSON, and the headers of the module docs.
/// Built straight from the score (JSON in `payload`, numbers formatted on the stack by itoa,
/// which costs a fraction of `core::fmt`): first
/// building an owned [`Outgoing`] (six allocations) took two fifths of this thread, JSON
/// included.
fn send_score(
    producer: &BaseProducer<DeliveryContext>,
    topics: &Topics,
    payload: &mut Vec<u8>,
    output: &ScoreOutput,
    origin: Origin,
) -> KafkaResult<()> {
    payload.clear();
    output.write_json(payload);
    let (mut version, mut partition, mut offset) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
    let mut headers = OwnedHeaders::new_with_capacity(4);
    if let Some(v) = output.model_version {
        headers = headers.insert(Header {
            key: "model_version",
            value: Some(version.format(v).as_bytes()),
        });
    }
    let headers = headers
        .insert(Header {
            key: "source_topic",
            value: Some(topics.input_name(origin.channel).as_bytes()),
        })
        .insert(Header {
            key: "source_partition",
            value: Some(partition.format(origin.partition).as_bytes()),
        })
        .insert(Header {
            key: "source_offset",
            value: Some(offset.format(origin.offset).as_bytes()),
        });
    let hold = ((origin.channel, origin.partition), origin.offset);
    let record = BaseRecord::with_opaque_to(&topics.scores, Box::new(hold))
        .payload(&payload[..])
        .key(output.id.as_bytes())
        .headers(headers);
    producer.send(record).map_err(|(e, _)| e)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep going with it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The engine's outputs as Kafka messages; see the module docs for their form.
pub struct KafkaOutputs {
    outbox: SharedOutbox,
    topics: Topics,
    /// Outputs since the last [`Outputs::flush`], with the input each answers: booked and
    /// moved to the [`Outbox`] there, under one lock.
    batch: Vec<Produce>,
    sent: Vec<(InputPartition, i64)>,
}

impl KafkaOutputs {
    /// Queues an output of the input at `hold` until the next flush.
    fn queue(&mut self, hold: (InputPartition, i64), produce: Produce) {
        self.sent.push(hold);
        self.batch.push(produce);
    }
}

impl Outputs for KafkaOutputs {
    fn score(&mut self, output: ScoreOutput, origin: Option<Origin>) -> Result<(), OutputError> {
        let origin = origin.ok_or_else(|| {
            OutputError::Kafka(format!("score of {:?} has no input position", output.id))
        })?;
        let hold = ((origin.channel, origin.partition), origin.offset);
        self.queue(hold, Produce::Score(output, origin));
        Ok(())
    }

    fn dead_letter(&mut self, letter: &DlqRecord) -> Result<(), OutputError> {
        let r = &letter.record;
        let (Some(partition), Some(offset)) = (r.partition, r.offset) else {
            return Err(OutputError::Kafka(
                "dead letter without an input position".into(),
            ));
        };
        let key = r.key.clone().map(String::into_bytes);
        let mut headers: Vec<(HeaderKey, Vec<u8>)> = r
            .headers
            .iter()
            .map(|(k, v)| (HeaderKey::Owned(k.clone()), v.clone().into_bytes()))
            .collect();
        let header_bytes = |hs: &[(HeaderKey, Vec<u8>)]| -> usize {
            hs.iter().map(|(k, v)| k.len() + v.len() + 16).sum()
        };
        // A message too large to produce would stop this partition for good: keep the
        // dead letter under the producer's limit, cutting the payload (then the original
        // headers) and saying so in a header.
        let mut payload = r.payload.clone();
        let mut envelope = key.as_ref().map_or(0, Vec::len) + header_bytes(&headers) + 1024;
        if envelope > DLQ_MAX_BYTES {
            headers.clear();
            headers.push((
                "neyman.headers_dropped".into(),
                r.headers.len().to_string().into_bytes(),
            ));
            envelope = key.as_ref().map_or(0, Vec::len) + 1024;
        }
        if envelope + payload.len() > DLQ_MAX_BYTES {
            headers.push((
                "neyman.truncated_from".into(),
                payload.len().to_string().into_bytes(),
            ));
            payload.truncate(DLQ_MAX_BYTES.saturating_sub(envelope));
        }
        for (key, value) in [
            (
                "__connect.errors.topic",
                self.topics.input_name(r.channel).to_string(),
            ),
            ("__connect.errors.partition", partition.to_string()),
            ("__connect.errors.offset", offset.to_string()),
            (
                "__connect.errors.exception.class.name",
                letter.reason.as_str().to_string(),
            ),
            (
                "__connect.errors.exception.message",
                letter.detail.chars().take(512).collect(),
            ),
        ] {
            headers.push((key.into(), value.into_bytes()));
        }
        let hold = ((r.channel, partition), offset);
        let out = Outgoing {
            topic: Arc::clone(&self.topics.dlq),
            key,
            payload,
            headers,
            hold,
        };
        self.queue(hold, Produce::Message(out));
        Ok(())
    }

    /// Books the queued outputs as sent and moves them to the outbox, for the loop to hand to
    /// the produce thread. Acknowledgements arrive on their own, and the loop waits for them
    /// at shutdown.
    fn flush(&mut self) -> Result<(), OutputError> {
        if self.sent.is_empty() {
            return Ok(());
        }
        let mut outbox = lock(&self.outbox);
        for (partition, offset) in self.sent.drain(..) {
            outbox.book.sent(partition, offset);
        }
        if outbox.batch.is_empty() {
            // The outbox's empty batch (a round's capacity) comes back for the next round.
            std::mem::swap(&mut outbox.batch, &mut self.batch);
        } else {
            outbox.batch.append(&mut self.batch);
        }
        Ok(())
    }
}

/// What the consumer's rebalance callback tells the loop.
enum GroupChange {
    Assigned(Vec<(String, i32)>),
    Revoked(Vec<(String, i32)>),
}

/// The latest commit point per (topic, partition): the offset and `done`.
type CommitPoints = BTreeMap<(String, i32), (i64, i64)>;

/// Consumer context: rebalances, commit results and lag statistics.
struct GroupContext {
    metrics: Metrics,
    /// The consumer group (`group_id`, or `<group_id>.trainer`): the lag gauge's `group` label,
    /// so lag is summed per group and a trainer's view of the inputs never adds to the scorers'.
    group: String,
    changes: Mutex<Vec<GroupChange>>,
    /// Committed synchronously when a partition is revoked, before another member takes it.
    commit_points: Mutex<CommitPoints>,
    /// A client of the companion group `<group_id>.done`, never subscribed: it only commits
    /// and reads `done` marks.
    done: BaseConsumer<DoneContext>,
}

/// Context of the `done` client: its librdkafka logs go to tracing.
struct DoneContext;

impl ClientContext for DoneContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka("done", level, fac, message);
    }
}

impl ConsumerContext for DoneContext {}

/// Commits `points` synchronously (offsets to the group, `done` marks to the companion group)
/// and counts the results. Synchronous because librdkafka reports nothing back for an
/// asynchronous manual commit; [`Committer`] keeps that wait off the poll loop.
fn commit_both(consumer: &BaseConsumer<GroupContext>, points: &CommitPoints) {
    if points.is_empty() {
        return;
    }
    let offsets = commit_list(points.iter().map(|(tp, (offset, _))| (tp, *offset)));
    let done = commit_list(points.iter().map(|(tp, (_, done))| (tp, *done)));
    let context = consumer.context();
    for (result, what) in [
        (consumer.commit(&offsets, CommitMode::Sync), "offsets"),
        (context.done.commit(&done, CommitMode::Sync), "done marks"),
    ] {
        match result {
            Ok(()) => context.metrics.kafka_commits.inc(),
            // librdkafka skips a commit whose offsets did not move: nothing failed.
            Err(RdKafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => {
                context.metrics.kafka_commit_failures.inc();
                tracing::warn!(error = %e, what, "commit failed");
            }
        }
    }
}

/// Commits on its own thread, newest points first: a slow broker delays commits, never the
/// poll loop. A point computed just before a revocation may land after it; it is never
/// ahead of what was delivered, so the next owner at worst re-reads a little more.
struct Committer {
    points: Option<mpsc::Sender<CommitPoints>>,
    handle: Option<JoinHandle<()>>,
}

impl Committer {
    fn start(consumer: Arc<BaseConsumer<GroupContext>>) -> std::io::Result<Committer> {
        let (tx, rx) = mpsc::channel::<CommitPoints>();
        let handle = std::thread::Builder::new()
            .name("neyman-commit".into())
            .spawn(move || {
                while let Ok(mut points) = rx.recv() {
                    while let Ok(newer) = rx.try_recv() {
                        points = newer;
                    }
                    commit_both(&consumer, &points);
                }
            })?;
        Ok(Committer {
            points: Some(tx),
            handle: Some(handle),
        })
    }

    fn submit(&self, points: CommitPoints) {
        if let Some(tx) = &self.points {
            let _ = tx.send(points);
        }
    }

    /// Waits for the commits already submitted.
    fn stop(&mut self) {
        self.points = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A commit request: each partition at its offset.
fn commit_list<'a>(points: impl Iterator<Item = (&'a (String, i32), i64)>) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in points {
        // Only an invalid offset value fails here, and offsets come from the broker.
        let _ = tpl.add_partition_offset(topic, *partition, Offset::Offset(offset));
    }
    tpl
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka("consumer", level, fac, message);
    }

    fn stats(&self, statistics: Statistics) {
        let lags = statistics.topics.iter().flat_map(|(topic, t)| {
            t.partitions
                .iter()
                .map(move |(partition, p)| (topic.as_str(), *partition, p.consumer_lag))
        });
        publish_lags(&self.metrics, &self.group, lags);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka consumer error");
    }
}

/// Sets the lag gauge of `group` from librdkafka's per-partition statistics.
fn publish_lags<'a>(
    metrics: &Metrics,
    group: &str,
    lags: impl Iterator<Item = (&'a str, i32, i64)>,
) {
    for (topic, partition, lag) in lags {
        // Partition -1 is librdkafka's internal "unassigned" entry; -1 lag is unknown.
        if partition >= 0 && lag >= 0 {
            metrics
                .kafka_consumer_lag
                .with_label_values(&[group, topic, &partition.to_string()])
                .set(lag);
        }
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let revoked = partitions_of(tpl);
            self.metrics
                .kafka_rebalances
                .with_label_values(&["revoke"])
                .inc();
            tracing::info!(partitions = ?revoked, "partitions revoked");
            let points = lock(&self.commit_points).clone();
            // A revoked partition's lag is another member's to report now.
            for (topic, partition) in &revoked {
                let _ = self.metrics.kafka_consumer_lag.remove_label_values(&[
                    &self.group,
                    topic,
                    &partition.to_string(),
                ]);
            }
            let revoked_points: CommitPoints = points
                .into_iter()
                .filter(|(tp, _)| revoked.contains(tp))
                .collect();
            commit_both(consumer, &revoked_points);
            lock(&self.changes).push(GroupChange::Revoked(revoked));
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let assigned = partitions_of(tpl);
                self.metrics
                    .kafka_rebalances
                    .with_label_values(&["assign"])
                    .inc();
                tracing::info!(partitions = ?assigned, "partitions assigned");
                lock(&self.changes).push(GroupChange::Assigned(assigned));
            }
            Rebalance::Error(e) => {
                self.metrics
                    .kafka_rebalances
                    .with_label_values(&["error"])
                    .inc();
                tracing::warn!(error = %e, "rebalance error");
            }
            Rebalance::Revoke(_) => {}
        }
    }
}

/// An assigned input partition.
#[derive(Debug, Clone, Copy, Default)]
struct Assigned {
    /// The committed offset found at assignment (where reading starts).
    committed: Option<i64>,
    /// `done` from the commit metadata: messages below it only rebuild windows.
    restore_until: Option<i64>,
}

/// The trainer's producer of the models topic: delivery results are logged and counted.
struct ModelContext {
    metrics: Metrics,
}

impl ClientContext for ModelContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka("models", level, fac, message);
    }
}

impl ProducerContext for ModelContext {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, version: Box<u64>) {
        match result {
            Ok(m) => tracing::info!(
                version = *version,
                topic = m.topic(),
                offset = m.offset(),
                "model published"
            ),
            Err((e, _)) => {
                self.metrics
                    .kafka_model_publish_failures
                    .with_label_values(&["delivery"])
                    .inc();
                tracing::error!(version = *version, error = %e, "model not published");
            }
        }
    }
}

/// Publishing (trainer) or reading (scorer) the models topic.
enum ModelLink {
    None,
    Publish {
        producer: ThreadedProducer<ModelContext>,
        topic: String,
        max_bytes: usize,
    },
    Read {
        consumer: BaseConsumer,
        max_bytes: u64,
    },
}

/// The clients [`run`] uses; [`connect`] makes them from `[kafka]`.
pub struct KafkaClients {
    role: Role,
    models: ModelLink,
    consumer: Arc<BaseConsumer<GroupContext>>,
    produce: ProduceThread,
    outbox: SharedOutbox,
    deliveries: mpsc::Receiver<Delivery>,
    topics: Topics,
    commit_interval: Duration,
    max_in_flight: usize,
}

/// Creates the consumer (subscribed to the input topics its role reads), the producer (on its
/// thread, [`Producing`]; [`run`] stops it at the end), the models-topic link of a trainer or scorer, and the [`KafkaOutputs`] to build the engine
/// with. Topics must exist (see [`crate::stream::kafka::ensure_topics`]).
///
/// Groups: `both` and `scorer` members share `group_id` (a scorer reads only `unlabeled`); a
/// trainer uses `<group_id>.trainer`, so it reads every partition of every input topic while
/// the scorers split `unlabeled` among themselves.
pub fn connect(
    k: &KafkaConfig,
    metrics: &Metrics,
) -> Result<(KafkaClients, KafkaOutputs), KafkaRunError> {
    let mut topics = Topics::of(k);
    if k.role == Role::Scorer {
        topics.inputs.retain(|(_, c)| *c == Channel::Unlabeled);
    }
    let group = match k.role {
        Role::Trainer => format!("{}.trainer", k.group_id),
        Role::Both | Role::Scorer => k.group_id.clone(),
    };
    let models = match k.role {
        Role::Both => ModelLink::None,
        Role::Trainer => ModelLink::Publish {
            producer: model_producer_config(k).create_with_context(ModelContext {
                metrics: metrics.clone(),
            })?,
            topic: k.topics.models.clone(),
            max_bytes: k.model_max_bytes,
        },
        Role::Scorer => {
            let consumer: BaseConsumer = model_reader_config(k).create()?;
            let metadata = consumer.fetch_metadata(Some(&k.topics.models), LOOKUP_TIMEOUT)?;
            let mut tpl = TopicPartitionList::new();
            for t in metadata.topics() {
                for p in t.partitions() {
                    tpl.add_partition_offset(t.name(), p.id(), Offset::Beginning)?;
                }
            }
            consumer.assign(&tpl)?;
            // A model decompresses to a few times its compressed size at most.
            let max_bytes = (k.model_max_bytes as u64).saturating_mul(16);
            ModelLink::Read {
                consumer,
                max_bytes,
            }
        }
    };
    let (reports, deliveries) = mpsc::channel();
    let producer: BaseProducer<DeliveryContext> =
        producer_config(k).create_with_context(DeliveryContext { reports })?;
    let mut done_config: ClientConfig = consumer_config(k, ConsumerRole::Daemon);
    done_config.set("group.id", format!("{group}.done"));
    done_config.remove("group.instance.id");
    done_config.set("statistics.interval.ms", "0");
    let done: BaseConsumer<DoneContext> = done_config.create_with_context(DoneContext)?;
    let context = GroupContext {
        metrics: metrics.clone(),
        group: group.clone(),
        changes: Mutex::new(Vec::new()),
        commit_points: Mutex::new(BTreeMap::new()),
        done,
    };
    let mut config: ClientConfig = consumer_config(k, ConsumerRole::Daemon);
    config.set("group.id", &group);
    let consumer: BaseConsumer<GroupContext> = config.create_with_context(context)?;
    let names: Vec<&str> = topics.inputs.iter().map(|(t, _)| t.as_str()).collect();
    consumer.subscribe(&names)?;
    let produce = ProduceThread::start(Producing::new(producer, topics.clone()))
        .map_err(|e| KafkaRunError::Thread("produce", e))?;
    let outbox = Arc::new(Mutex::new(Outbox {
        book: OffsetBook::new(),
        batch: Vec::new(),
    }));
    let outputs = KafkaOutputs {
        outbox: Arc::clone(&outbox),
        topics: topics.clone(),
        batch: Vec::with_capacity(BATCH),
        sent: Vec::with_capacity(BATCH),
    };
    let clients = KafkaClients {
        role: k.role,
        models,
        consumer: Arc::new(consumer),
        produce,
        outbox,
        deliveries,
        topics,
        commit_interval: Duration::from_millis(u64::from(k.commit_interval_ms)),
        max_in_flight: k.max_in_flight,
    };
    Ok((clients, outputs))
}

/// The loop's state besides the engine.
struct Loop {
    clients: KafkaClients,
    metrics: Metrics,
    assigned: BTreeMap<InputPartition, Assigned>,
    paused: bool,
    summary: KafkaSummary,
    /// Messages handled this round, booked by [`Loop::settle_round`].
    handled: Vec<(InputPartition, i64)>,
}

impl Loop {
    fn apply_group_changes(&mut self) -> Result<(), KafkaRunError> {
        let changes = std::mem::take(&mut *lock(&self.clients.consumer.context().changes));
        for change in changes {
            match change {
                GroupChange::Assigned(list) => self.assign(&list)?,
                GroupChange::Revoked(list) => {
                    for (topic, partition) in list {
                        if let Some(channel) = self.clients.topics.channel(&topic) {
                            self.assigned.remove(&(channel, partition));
                        }
                        lock(&self.clients.consumer.context().commit_points)
                            .remove(&(topic, partition));
                    }
                }
            }
        }
        Ok(())
    }

    /// Looks up the committed offsets and `done` marks of newly assigned partitions.
    fn assign(&mut self, list: &[(String, i32)]) -> Result<(), KafkaRunError> {
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in list {
            tpl.add_partition(topic, *partition);
        }
        let consumer = &self.clients.consumer;
        let committed = consumer.committed_offsets(tpl.clone(), LOOKUP_TIMEOUT)?;
        let done_marks = consumer
            .context()
            .done
            .committed_offsets(tpl, LOOKUP_TIMEOUT)?;
        let absolute = |o: Offset| match o {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        for e in committed.elements() {
            let Some(channel) = self.clients.topics.channel(e.topic()) else {
                continue;
            };
            let offset = absolute(e.offset());
            let done = done_marks
                .find_partition(e.topic(), e.partition())
                .and_then(|d| absolute(d.offset()));
            // Without a committed offset the group starts over (auto.offset.reset), and every
            // message is new to it.
            let restore_until = offset.and(done);
            if let Some(done) = restore_until {
                tracing::info!(
                    topic = e.topic(),
                    partition = e.partition(),
                    from = offset,
                    done,
                    "re-reading the window; scoring resumes at done"
                );
            }
            self.assigned.insert(
                (channel, e.partition()),
                Assigned {
                    committed: offset,
                    restore_until,
                },
            );
        }
        if self.paused {
            // New partitions join the pause.
            self.clients.consumer.pause(&committed)?;
        }
        Ok(())
    }

    /// Whether some assigned partition is still below its `done` mark.
    fn restoring(&self) -> bool {
        let outbox = lock(&self.clients.outbox);
        self.assigned.iter().any(|(ip, a)| match a.restore_until {
            Some(done) => outbox
                .book
                .next(*ip)
                .or(a.committed)
                .is_some_and(|n| n < done),
            None => false,
        })
    }

    fn handle(
        &mut self,
        engine: &mut Engine,
        record: &Record,
        headers: impl FnOnce() -> Vec<(String, String)>,
    ) -> Result<(), KafkaRunError> {
        let (Some(partition), Some(offset)) = (record.partition, record.offset) else {
            return Ok(());
        };
        let ip = (record.channel, partition);
        let restore = self
            .assigned
            .get(&ip)
            .and_then(|a| a.restore_until)
            .is_some_and(|done| offset < done);
        if restore {
            engine.restore(record);
            self.summary.restored += 1;
        } else {
            engine.handle_with_headers(record, headers)?;
            self.summary.handled += 1;
        }
        self.handled.push((ip, offset));
        Ok(())
    }

    /// Brings the outbox up to date with this round: the engine's outputs are booked as sent,
    /// then the messages as handled. In that order, so that an offset never counts as handled
    /// while its outputs are unbooked (`done` could pass it), and before any commit point is
    /// computed: an output made above the batch (a finished retrain scoring the events that
    /// waited for a first model) has left the engine's owed list and is in the book only from
    /// here. Backpressure and restores read the book at most one round late.
    fn settle_round(&mut self, engine: &mut Engine) -> Result<(), KafkaRunError> {
        engine.flush()?;
        let mut outbox = lock(&self.clients.outbox);
        for (ip, offset) in self.handled.drain(..) {
            outbox.book.handled(ip, offset);
        }
        Ok(())
    }

    /// Applies delivery reports (acknowledgements free offsets, failures are sent again) and
    /// hands this round's outputs to the produce thread.
    fn drain_deliveries(&mut self) -> Result<(), KafkaRunError> {
        let mut outbox = lock(&self.clients.outbox);
        let mut failed: BTreeMap<String, (u64, String)> = BTreeMap::new();
        while let Ok(report) = self.clients.deliveries.try_recv() {
            match report {
                Delivery::Acknowledged((ip, offset)) => outbox.book.acknowledged(ip, offset),
                Delivery::Failed { error, message } => {
                    self.metrics
                        .kafka_produce_errors
                        .with_label_values(&[&message.topic])
                        .inc();
                    let f = failed.entry(message.topic.to_string()).or_default();
                    f.0 += 1;
                    f.1 = error;
                    outbox.batch.push(Produce::Resend(*message));
                }
            }
        }
        // One line per topic and batch, not per message: an outage fails thousands at once.
        for (topic, (count, error)) in failed {
            tracing::warn!(%topic, count, last_error = %error, "deliveries failed; sending them again");
        }
        self.metrics
            .kafka_in_flight
            .set(i64::try_from(outbox.unacknowledged()).unwrap_or(i64::MAX));
        // The next round's batch starts at a round's size: grown one output at a time, it
        // took seven allocations and six copies per round.
        let batch = if outbox.batch.is_empty() {
            Vec::new()
        } else {
            std::mem::replace(&mut outbox.batch, Vec::with_capacity(BATCH))
        };
        self.clients.produce.send(batch)
    }

    /// Pauses every assigned partition above `max_in_flight` unacknowledged outputs, and
    /// resumes below half of it.
    fn backpressure(&mut self) -> Result<(), KafkaRunError> {
        let in_flight = lock(&self.clients.outbox).unacknowledged();
        let max = self.clients.max_in_flight;
        if !self.paused && in_flight > max {
            let assignment = self.clients.consumer.assignment()?;
            self.clients.consumer.pause(&assignment)?;
            self.paused = true;
            self.metrics
                .kafka_paused_partitions
                .set(assignment.count() as i64);
            tracing::warn!(in_flight, max, "outputs not acknowledged: input paused");
        } else if self.paused && in_flight <= max / 2 {
            let assignment = self.clients.consumer.assignment()?;
            self.clients.consumer.resume(&assignment)?;
            self.paused = false;
            self.metrics.kafka_paused_partitions.set(0);
            tracing::info!(in_flight, "input resumed");
        }
        Ok(())
    }

    /// The commit for every assigned partition that has seen a message: offset and `done`.
    fn commit_points(&self, engine: &Engine) -> CommitPoints {
        let outbox = lock(&self.clients.outbox);
        let mut points = BTreeMap::new();
        for channel in Channel::ALL {
            let Some(topic) = self.clients.topics.input(channel) else {
                continue;
            };
            let owed = engine.owed_outputs(channel);
            let held = engine.low_watermarks(channel);
            for (&(c, partition), a) in self.assigned.range((channel, i32::MIN)..) {
                if c != channel {
                    break;
                }
                let ip = (channel, partition);
                let owed = owed.get(&partition).copied();
                let (Some(done), Some(commit)) = (
                    outbox.book.done(ip, owed),
                    outbox
                        .book
                        .commit_point(ip, owed, held.get(&partition).copied()),
                ) else {
                    continue;
                };
                let done = a.restore_until.map_or(done, |r| r.max(done));
                points.insert((topic.to_string(), partition), (commit, done));
            }
        }
        points
    }

    /// The current commit points, remembered for a revocation.
    fn commit_points_now(&self, engine: &Engine) -> CommitPoints {
        let points = self.commit_points(engine);
        tracing::debug!(?points, "commit points (offset, done)");
        lock(&self.clients.consumer.context().commit_points).clone_from(&points);
        points
    }
}

/// The training thread of a deferred retrain.
struct Trainer {
    handle: JoinHandle<()>,
    result: mpsc::Receiver<TrainedRetrain>,
}

impl Trainer {
    fn start(job: crate::engine::daemon::RetrainJob) -> std::io::Result<Trainer> {
        let (tx, result) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("neyman-train".into())
            .spawn(move || {
                let _ = tx.send(job.run());
            })?;
        Ok(Trainer { handle, result })
    }

    /// The result if training ended: `Some(Ok)` trained, `Some(Err)` the thread died.
    fn poll(&self) -> Option<Result<TrainedRetrain, String>> {
        match self.result.try_recv() {
            Ok(trained) => Some(Ok(trained)),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => {
                Some(Err("the training thread ended without a result".into()))
            }
        }
    }

    fn wait(self) -> Result<TrainedRetrain, String> {
        let trained = self
            .result
            .recv()
            .map_err(|_| "the training thread ended without a result".to_string());
        let _ = self.handle.join();
        trained
    }
}

fn finish_training(engine: &mut Engine, result: Result<TrainedRetrain, String>) -> bool {
    match result {
        Ok(trained) => matches!(
            engine.complete_retrain(trained),
            RetrainOutcome::Swapped { .. }
        ),
        Err(detail) => {
            engine.abandon_retrain(detail);
            false
        }
    }
}

impl Loop {
    /// Trainer: publishes the active model (just swapped in) to the models topic, keyed by
    /// its configuration fingerprint so that compaction keeps the newest per configuration.
    fn publish_model(&self, engine: &Engine) {
        let ModelLink::Publish {
            producer,
            topic,
            max_bytes,
        } = &self.clients.models
        else {
            return;
        };
        let Some(model) = engine.active() else {
            return;
        };
        let failed = |reason: &str| {
            self.metrics
                .kafka_model_publish_failures
                .with_label_values(&[reason])
                .inc();
        };
        let version = model.meta.version;
        let bytes = match model.to_wire() {
            Ok(b) => b,
            Err(e) => {
                failed("encode");
                tracing::error!(version, error = %e, "model not published: cannot encode it");
                return;
            }
        };
        if bytes.len() > *max_bytes {
            failed("oversize");
            tracing::error!(
                version,
                bytes = bytes.len(),
                max = *max_bytes,
                "model not published: it is larger than kafka.model_max_bytes"
            );
            return;
        }
        let key = format!("{:016x}", model.meta.config_fingerprint);
        let version_text = version.to_string();
        let headers = OwnedHeaders::new().insert(Header {
            key: "model_version",
            value: Some(&version_text),
        });
        let record = BaseRecord::with_opaque_to(topic, Box::new(version))
            .key(&key)
            .payload(&bytes)
            .headers(headers);
        if let Err((e, _)) = producer.send(record) {
            failed("delivery");
            tracing::error!(version, error = %e, "model not published");
        }
    }

    /// Scorer: installs the models published since the last call (newest wins).
    fn read_models(&self, engine: &mut Engine) {
        let ModelLink::Read {
            consumer,
            max_bytes,
        } = &self.clients.models
        else {
            return;
        };
        while let Some(result) = consumer.poll(Duration::ZERO) {
            let message = match result {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the models topic");
                    return;
                }
            };
            let decoded = StoredModel::from_wire(message.payload().unwrap_or_default(), *max_bytes);
            match decoded
                .map_err(|e| e.to_string())
                .and_then(|m| engine.install_remote(m))
            {
                Ok(version) => tracing::info!(version, "model from the models topic installed"),
                Err(reason) => tracing::warn!(
                    offset = message.offset(),
                    %reason,
                    "model from the models topic not installed"
                ),
            }
        }
    }
}

/// Runs the daemon on Kafka until `stop`: see the module docs. At the end: the retrain in
/// flight is awaited (the caller sets the engine's cancel flag to cut it short), events still
/// waiting for a first model are emitted unscored, outputs are awaited until `drain_timeout`,
/// the final offsets are committed synchronously and the consumer leaves the group.
pub fn run(
    mut engine: Engine,
    clients: KafkaClients,
    metrics: &Metrics,
    stop: &AtomicBool,
    drain_timeout: Duration,
) -> Result<KafkaSummary, KafkaRunError> {
    engine.defer_retrains();
    engine.set_role(clients.role);
    let mut lp = Loop {
        clients,
        metrics: metrics.clone(),
        assigned: BTreeMap::new(),
        paused: false,
        summary: KafkaSummary::default(),
        handled: Vec::with_capacity(BATCH),
    };
    let mut trainer: Option<Trainer> = None;
    let mut committer = Committer::start(Arc::clone(&lp.clients.consumer))
        .map_err(|e| KafkaRunError::Thread("commit", e))?;
    let mut last_commit = Instant::now();
    // Every message is read into this one record (its buffers reused).
    let mut record = Record::new(Channel::Unlabeled, 0, None, Vec::new());
    while !stop.load(Ordering::SeqCst) {
        lp.drain_deliveries()?;
        if let Some(result) = trainer.as_ref().and_then(Trainer::poll) {
            if let Some(t) = trainer.take() {
                let _ = t.handle.join();
            }
            if finish_training(&mut engine, result) {
                lp.publish_model(&engine);
            }
        }
        lp.read_models(&mut engine);
        if trainer.is_none() && engine.retrain_wanted() && !lp.restoring() {
            if let Some(job) = engine.due_retrain() {
                match Trainer::start(job) {
                    Ok(t) => trainer = Some(t),
                    Err(e) => {
                        engine.abandon_retrain(format!("cannot start a training thread: {e}"))
                    }
                }
            }
        }
        lp.backpressure()?;
        // Up to BATCH messages per round, so the housekeeping above is amortised; the first
        // poll waits, the others take only what is already fetched.
        let consumer = Arc::clone(&lp.clients.consumer);
        for i in 0..BATCH {
            let wait = if i == 0 { POLL } else { Duration::ZERO };
            let message = match consumer.poll(wait) {
                None => None,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "kafka consumer");
                    None
                }
                Some(Ok(message)) => Some(message),
            };
            // Assignments made inside that poll are applied before its message is handled.
            lp.apply_group_changes()?;
            let Some(message) = message else { break };
            if let Some(channel) = lp.clients.topics.channel(message.topic()) {
                read_without_headers(&mut record, &message, channel);
                lp.handle(&mut engine, &record, || headers_of(&message).0)?;
            }
        }
        // Also books the outputs made above the batch (a finished retrain scores the events
        // that waited for a first model).
        lp.settle_round(&mut engine)?;
        if last_commit.elapsed() >= lp.clients.commit_interval {
            committer.submit(lp.commit_points_now(&engine));
            last_commit = Instant::now();
        }
    }
    tracing::info!("stopping: finishing the retrain in flight, draining outputs");
    if let Some(t) = trainer.take() {
        finish_training(&mut engine, t.wait());
    }
    engine.finish()?;
    lp.settle_round(&mut engine)?;
    let deadline = Instant::now() + drain_timeout;
    loop {
        lp.drain_deliveries()?;
        let left = lock(&lp.clients.outbox).unacknowledged();
        if left == 0 || Instant::now() >= deadline {
            lp.summary.unacknowledged = left;
            if left > 0 {
                tracing::warn!(
                    unacknowledged = left,
                    "outputs still unacknowledged at the drain deadline; their offsets stay uncommitted"
                );
            }
            break;
        }
        // Serve callbacks (rebalances) while waiting; partitions stay paused meanwhile.
        let assignment = lp.clients.consumer.assignment()?;
        lp.clients.consumer.pause(&assignment)?;
        let _ = lp.clients.consumer.poll(Duration::from_millis(10));
        lp.apply_group_changes()?;
    }
    lp.clients.produce.stop();
    committer.stop();
    commit_both(&lp.clients.consumer, &lp.commit_points_now(&engine));
    if let ModelLink::Publish { producer, .. } = &lp.clients.models {
        let left = deadline.saturating_duration_since(Instant::now());
        if let Err(e) = producer.flush(left.max(Duration::from_secs(1))) {
            tracing::warn!(error = %e, "the last model may not be published");
        }
    }
    lp.clients.consumer.unsubscribe();
    Ok(lp.summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::scoring::ScoreStatus;

    /// A producer whose broker never answers (nothing listens on port 1), so every message
    /// stays queued in librdkafka: enough to see what the produce thread hands over and what
    /// it refuses.
    fn producing(settings: &[(&str, &str)]) -> (Producing, mpsc::Receiver<Delivery>) {
        let mut k = KafkaConfig::new("127.0.0.1:1");
        for (key, value) in settings {
            k.librdkafka
                .insert((*key).to_string(), (*value).to_string());
        }
        let (reports, deliveries) = mpsc::channel();
        let producer = producer_config(&k)
            .create_with_context(DeliveryContext { reports })
            .expect("producer");
        let producing = Producing::new(producer, Topics::of(&k));
        (producing, deliveries)
    }

    fn message(offset: i64, bytes: usize) -> Outgoing {
        Outgoing {
            topic: "neyman.dlq".into(),
            key: Some(format!("k{offset}").into_bytes()),
            payload: vec![b'x'; bytes],
            headers: vec![("h".into(), b"v".to_vec())],
            hold: ((Channel::Unlabeled, 0), offset),
        }
    }

    #[test]
    fn a_send_librdkafka_refuses_stops_the_thread_with_the_reason() {
        let (producing, _deliveries) = producing(&[("message.max.bytes", "1000")]);
        let mut thread = ProduceThread::start(producing).expect("thread");
        thread
            .send(vec![Produce::Message(message(7, 5000))])
            .expect("handed over");
        let deadline = Instant::now() + Duration::from_secs(10);
        let error = loop {
            match thread.send(Vec::new()) {
                Err(KafkaRunError::Produce(e)) => break e,
                Err(other) => panic!("{other}"),
                Ok(()) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Ok(()) => panic!("the oversize message was not refused"),
            }
        };
        assert!(error.contains("send to neyman.dlq"), "{error}");
        // The thread is gone: later batches are refused too, not silently dropped.
        assert!(matches!(
            thread.send(vec![Produce::Message(message(8, 10))]),
            Err(KafkaRunError::Produce(_))
        ));
        thread.stop();
    }

    #[test]
    fn a_full_queue_holds_back_everything_behind_it_in_order() {
        let (mut producing, _deliveries) = producing(&[("queue.buffering.max.messages", "2")]);
        for (offset, item) in [
            (1, Produce::Message(message(1, 10))),
            (2, Produce::Message(message(2, 10))),
            (3, Produce::Score(score(3), origin(3))),
            (4, Produce::Resend(message(4, 10))),
        ] {
            assert_eq!(item_offset(&item), offset);
            producing.take(item);
        }
        // A resend waits for its backoff, and so does everything queued with it.
        assert!(producing.retry_at.is_some());
        producing.drain_backlog().expect("no refusal");
        assert_eq!(producing.backlog.len(), 4);
        producing.retry_at = None;
        producing
            .drain_backlog()
            .expect("a full queue is not an error");
        let waiting: Vec<i64> = producing.backlog.iter().map(item_offset).collect();
        assert_eq!(
            waiting,
            [3, 4],
            "librdkafka took two, the rest wait in order"
        );
    }

    fn score(offset: i64) -> ScoreOutput {
        ScoreOutput {
            id: format!("e{offset}"),
            ts: Some(offset),
            score: Some(0.5),
            flagged: Some(true),
            threshold: Some(0.25),
            model_version: Some(3),
            status: ScoreStatus::Scored,
            meta: None,
        }
    }

    fn origin(offset: i64) -> Origin {
        Origin {
            channel: Channel::Unlabeled,
            partition: 0,
            offset,
        }
    }

    fn item_offset(item: &Produce) -> i64 {
        match item {
            Produce::Message(o) | Produce::Resend(o) => o.hold.1,
            Produce::Score(_, origin) => origin.offset,
        }
    }

    /// Outputs reach the book and the hand-over batch together, at the flush, and a flush
    /// onto a batch not yet handed over keeps its order.
    #[test]
    fn outputs_are_booked_and_batched_at_the_flush_in_order() {
        let k = KafkaConfig::new("127.0.0.1:1");
        let outbox = Arc::new(Mutex::new(Outbox {
            book: OffsetBook::new(),
            batch: Vec::new(),
        }));
        let mut outputs = KafkaOutputs {
            outbox: Arc::clone(&outbox),
            topics: Topics::of(&k),
            batch: Vec::new(),
            sent: Vec::new(),
        };
        for offset in [5, 6] {
            outputs
                .score(score(offset), Some(origin(offset)))
                .expect("queued");
        }
        assert_eq!(
            lock(&outbox).unacknowledged(),
            0,
            "nothing booked before the flush"
        );
        outputs.flush().expect("flushed");
        outputs.score(score(7), Some(origin(7))).expect("queued");
        outputs.flush().expect("flushed");
        let outbox = lock(&outbox);
        assert_eq!(outbox.unacknowledged(), 3);
        let offsets: Vec<i64> = outbox.batch.iter().map(item_offset).collect();
        assert_eq!(offsets, [5, 6, 7]);
        // Booked as sent: `done` stays at the oldest unacknowledged output.
        let mut book = outbox.book.clone();
        for offset in 5..8 {
            book.handled((Channel::Unlabeled, 0), offset);
        }
        assert_eq!(book.done((Channel::Unlabeled, 0), None), Some(5));
    }

    #[test]
    fn lag_is_published_per_group_and_unknown_entries_are_skipped() {
        let registry = prometheus::Registry::new();
        let metrics = Metrics::new(&registry).expect("metrics");
        let lags = [
            ("neyman.unlabeled", 0, 12),
            ("neyman.unlabeled", -1, 99),
            ("neyman.unlabeled", 1, -1),
            ("neyman.positive", 2, 0),
        ];
        publish_lags(&metrics, "neyman.trainer", lags.into_iter());
        let gauge = |t: &str, p: &str| {
            metrics
                .kafka_consumer_lag
                .get_metric_with_label_values(&["neyman.trainer", t, p])
                .map(|g| g.get())
                .ok()
        };
        assert_eq!(gauge("neyman.unlabeled", "0"), Some(12));
        assert_eq!(gauge("neyman.positive", "2"), Some(0));
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("encode");
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("neyman_kafka_consumer_lag_messages{"))
            .collect();
        assert_eq!(series.len(), 2, "{series:?}");
        assert!(series
            .iter()
            .all(|l| l.contains("group=\"neyman.trainer\"")));
    }
}
