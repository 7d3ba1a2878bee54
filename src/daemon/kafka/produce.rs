//! The producer on its own thread, and the engine's outputs as Kafka messages.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError as RdKafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use super::{lock, KafkaRunError, Topics};
use crate::engine::outputs::{Origin, OutputError, Outputs};
use crate::engine::scoring::ScoreOutput;
use crate::stream::dlq::DlqRecord;
use crate::stream::kafka::log_librdkafka;
use crate::stream::offsets::{InputPartition, OffsetBook};

/// Largest dead letter produced (librdkafka's default `message.max.bytes` is 1 000 000, and
/// brokers default to about 1 MiB); larger ones are cut ([`KafkaOutputs::dead_letter`]).
const DLQ_MAX_BYTES: usize = 900_000;
/// Pause before sending failed deliveries again.
const RESEND_BACKOFF: Duration = Duration::from_millis(500);

/// A header name: the daemon's own are static, a dead letter's originals are copied.
pub(super) type HeaderKey = std::borrow::Cow<'static, str>;

/// One message to produce, owned so that it can wait and be sent again.
#[derive(Debug, Clone)]
pub(super) struct Outgoing {
    pub(super) topic: Arc<str>,
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
pub(super) enum Delivery {
    Acknowledged((InputPartition, i64)),
    Failed {
        error: String,
        message: Box<Outgoing>,
    },
}

/// Producer context: delivery reports go to the loop through a channel (a `Sender` is `Sync`:
/// no lock per report).
pub(super) struct DeliveryContext {
    pub(super) reports: mpsc::Sender<Delivery>,
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

/// What the loop hands to the produce thread, in order.
pub(super) enum Produce {
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
pub(super) struct Outbox {
    pub(super) book: OffsetBook,
    /// Outputs of this round, handed to the produce thread in one batch by
    /// [`Loop::drain_deliveries`] (one wake-up per round, not per output).
    pub(super) batch: Vec<Produce>,
}

impl Outbox {
    /// Outputs not yet acknowledged (waiting, sent, or being sent again).
    pub(super) fn unacknowledged(&self) -> usize {
        self.book.in_flight()
    }
}

pub(super) type SharedOutbox = Arc<Mutex<Outbox>>;

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
pub(super) struct Producing {
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
    pub(super) fn new(producer: BaseProducer<DeliveryContext>, topics: Topics) -> Producing {
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
pub(super) struct ProduceThread {
    batches: Option<mpsc::Sender<Vec<Produce>>>,
    handle: Option<JoinHandle<()>>,
    fatal: Arc<Mutex<Option<String>>>,
}

impl ProduceThread {
    pub(super) fn start(producing: Producing) -> std::io::Result<ProduceThread> {
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
    pub(super) fn send(&self, batch: Vec<Produce>) -> Result<(), KafkaRunError> {
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
    pub(super) fn stop(&mut self) {
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
    let (mut version, mut threshold_version, mut partition, mut offset) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
    let mut headers = OwnedHeaders::new_with_capacity(5);
    if let Some(v) = output.model_version {
        headers = headers.insert(Header {
            key: "model_version",
            value: Some(version.format(v).as_bytes()),
        });
    }
    if let Some(v) = output.threshold_version {
        headers = headers.insert(Header {
            key: "threshold_version",
            value: Some(threshold_version.format(v).as_bytes()),
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

/// The engine's outputs as Kafka messages; see the module docs for their form.
pub struct KafkaOutputs {
    pub(super) outbox: SharedOutbox,
    pub(super) topics: Topics,
    /// Outputs since the last [`Outputs::flush`], with the input each answers: booked and
    /// moved to the [`Outbox`] there, under one lock.
    pub(super) batch: Vec<Produce>,
    pub(super) sent: Vec<(InputPartition, i64)>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KafkaConfig;
    use crate::engine::scoring::ScoreStatus;
    use crate::stream::kafka::producer_config;
    use crate::stream::Channel;

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
            certified: Some(true),
            model_version: Some(3),
            threshold_version: Some(0),
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
}
