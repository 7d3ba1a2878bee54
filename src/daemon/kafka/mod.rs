//! The daemon on Kafka: one poll loop feeding the [`Engine`], outputs produced to topics,
//! offsets committed at least once, training on its own thread.
//!
//! - **Poll loop** ([`run`]): a `BaseConsumer` subscribed to the input topics (group
//!   `kafka.group_id`, cooperative-sticky). Each message becomes a [`Record`] and goes to
//!   [`Engine::handle`], which scores unlabeled events with the active model and windows
//!   everything. Retrains are deferred: the loop hands [`Engine::due_retrain`]'s job to a
//!   training thread and gates/installs the result when it returns, so polling, scoring and
//!   heartbeats never wait for a solver. Each round also hands the wall clock to
//!   [`Engine::tick`]: an event waiting for a first model is emitted unscored after
//!   `scoring.max_wait` of event time or of wall-clock time, whichever comes first.
//! - **Outputs** ([`KafkaOutputs`]): scores to `kafka.topics.scores` (key = event id; headers
//!   `model_version` and `threshold_version` — absent for an unscored output —, `source_topic`, `source_partition`,
//!   `source_offset`), rejected messages to `kafka.topics.dlq` (original key, payload and
//!   headers, plus Kafka Connect's `__connect.errors.topic`, `.partition`, `.offset`,
//!   `.exception.class.name` = the reason code and `.exception.message` = the detail). One
//!   idempotent producer, on its own thread (`Producing`): the loop books the round's
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
//! This room is split by concern: `produce` (the producer thread and the engine's Kafka
//! outputs), `group` (group membership, restores and commits), `models` (the models topic of
//! trainers and scorers); this file holds the loop. Deferred retrains run on
//! [`super::trainer`]'s thread.

mod group;
mod models;
mod produce;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::trainer::{finish_training, Trainer};
use super::Summary;
use crate::config::{KafkaConfig, Role};
use crate::engine::machine::{Engine, EngineError};
use crate::serve::{Forward, ForwardError, Forwarded, Forwarding};
use crate::stream::kafka::{
    consumer_config, create_client, headers_of, input_topics, model_producer_config,
    model_reader_config, producer_config, read_without_headers, ConsumerRole, CreateError,
    EventProducer, KafkaError, Logged,
};
use crate::stream::offsets::{InputPartition, OffsetBook};
use crate::stream::record::Record;
use crate::stream::Channel;
use crate::telemetry::Metrics;
use group::{commit_both, Assigned, Committer, DoneContext, GroupContext};
use models::{ModelContext, ModelLink};
pub use produce::KafkaOutputs;
use produce::{Delivery, DeliveryContext, Outbox, Produce, ProduceThread, Producing, SharedOutbox};

/// Messages handled per round of the loop at most.
const BATCH: usize = 256;
/// How long one poll waits for a message; also the loop's reaction time to a stop.
const POLL: Duration = Duration::from_millis(50);
/// Deadline of a committed-offsets lookup after an assignment.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Before leaving the group, how long no rebalance must have come ([`settle_group`]) …
const SETTLE_QUIET: Duration = Duration::from_millis(500);
/// … waiting at most this long.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);
/// How long leaving the consumer group may take at shutdown ([`leave_group`]).
const LEAVE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum KafkaRunError {
    #[error("kafka client: {0}")]
    Client(#[from] RdKafkaError),
    #[error(transparent)]
    Create(#[from] CreateError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("cannot start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
    #[error("producing outputs: {0}")]
    Produce(String),
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep going with it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
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
/// thread, `Producing`; [`run`] stops it at the end), the models-topic link of a trainer or scorer, and the [`KafkaOutputs`] to build the engine
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
            producer: create_client(
                k,
                &model_producer_config(k),
                ModelContext {
                    metrics: metrics.clone(),
                },
            )?,
            topic: k.topics.models.clone(),
            max_bytes: k.model_max_bytes,
        },
        Role::Scorer => {
            let consumer: BaseConsumer<Logged> =
                create_client(k, &model_reader_config(k), Logged("models"))?;
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
        create_client(k, &producer_config(k), DeliveryContext { reports })?;
    let mut done_config: ClientConfig = consumer_config(k, ConsumerRole::Daemon);
    done_config.set("group.id", format!("{group}.done"));
    done_config.remove("group.instance.id");
    done_config.set("statistics.interval.ms", "0");
    let done: BaseConsumer<DoneContext> = create_client(k, &done_config, DoneContext)?;
    let context = GroupContext {
        metrics: metrics.clone(),
        group: group.clone(),
        changes: Mutex::new(Vec::new()),
        last_rebalance: Mutex::new(None),
        commit_points: Mutex::new(BTreeMap::new()),
        done,
    };
    let mut config: ClientConfig = consumer_config(k, ConsumerRole::Daemon);
    config.set("group.id", &group);
    let consumer: BaseConsumer<GroupContext> = create_client(k, &config, context)?;
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
    summary: Summary,
    /// Messages handled this round, booked by [`Loop::settle_round`].
    handled: Vec<(InputPartition, i64)>,
}

impl Loop {
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
}

/// Runs the poll loop until `stop` is set (see the module docs). Then the retrain in
/// flight is awaited (the caller sets the engine's cancel flag to cut it short), events still
/// waiting for a first model are emitted unscored (`shutdown`), outputs are awaited until
/// `drain_timeout`, the final offsets and `done` marks are committed synchronously (the
/// events emitted at shutdown count as answered once acknowledged) and the consumer leaves
/// the group.
pub fn run(
    mut engine: Engine,
    clients: KafkaClients,
    metrics: &Metrics,
    stop: &AtomicBool,
    drain_timeout: Duration,
) -> Result<Summary, KafkaRunError> {
    engine.defer_retrains();
    engine.set_role(clients.role);
    let mut lp = Loop {
        clients,
        metrics: metrics.clone(),
        assigned: BTreeMap::new(),
        paused: false,
        summary: Summary::default(),
        handled: Vec::with_capacity(BATCH),
    };
    let result = drive(&mut lp, engine, stop, drain_timeout);
    let summary = lp.summary;
    let consumer = Arc::clone(&lp.clients.consumer);
    drop(lp);
    settle_group(&consumer);
    leave_group(consumer);
    result.map(|()| summary)
}

/// Serves the consumer's callbacks, its partitions paused and its messages left unread (their
/// offsets are not committed: the next owner reads them), until no rebalance has come for
/// [`SETTLE_QUIET`], at most [`SETTLE_LIMIT`]. Closing while an assignment just served is
/// still being applied aborts the process inside librdkafka (`rd_kafka_cgrp_terminated`:
/// `!rd_kafka_assignment_in_progress`; seen in CI when a member stopped right as the
/// partitions of one that had left came back to it).
fn settle_group(consumer: &BaseConsumer<GroupContext>) {
    let started = Instant::now();
    while started.elapsed() < SETTLE_LIMIT {
        let last = *lock(&consumer.context().last_rebalance);
        if last.map_or(true, |at| at.elapsed() >= SETTLE_QUIET) {
            return;
        }
        if let Ok(assignment) = consumer.assignment() {
            let _ = consumer.pause(&assignment);
        }
        let _ = consumer.poll(Duration::from_millis(10));
    }
    tracing::warn!(
        limit = ?SETTLE_LIMIT,
        "rebalances went on while leaving the group; closing the consumer anyway"
    );
}

/// `POST /v1/events/*` on a Kafka source: the events go to their channel's input topic.
#[derive(Debug)]
pub struct ToTopics(pub EventProducer);

impl Forward for ToTopics {
    fn forward(&self, records: Vec<Record>) -> Forwarding<'_> {
        Box::pin(async move {
            // A request's events share one channel, so a missing topic is found before any
            // of them is produced.
            let produced = self.0.produce(&records).await.map_err(|e| match e {
                KafkaError::NoTopic { channel, .. } => ForwardError::NoTopic(format!(
                    "this daemon has no {channel} topic (kafka.topics.{channel} is not set)"
                )),
                e => ForwardError::Failed(e.to_string()),
            })?;
            Ok(produced
                .into_iter()
                .map(|p| Forwarded {
                    topic: p.topic,
                    partition: p.partition,
                    offset: p.offset,
                })
                .collect())
        })
    }
}

/// [`run`]'s loop and drain, up to the consumer's close.
fn drive(
    lp: &mut Loop,
    mut engine: Engine,
    stop: &AtomicBool,
    drain_timeout: Duration,
) -> Result<(), KafkaRunError> {
    let mut trainer: Option<Trainer> = None;
    let mut committer = Committer::start(Arc::clone(&lp.clients.consumer))
        .map_err(|e| KafkaRunError::Thread("commit", e))?;
    let mut last_commit = Instant::now();
    // Every message is read into this one record (its buffers reused).
    let mut record = Record::new(Channel::Unlabeled, 0, None, Vec::new());
    // A resumed model was published by the run that trained it.
    let mut published = engine
        .active()
        .map(|m| (m.meta.version, m.threshold_version));
    while !stop.load(Ordering::SeqCst) {
        lp.drain_deliveries()?;
        if let Some(result) = trainer.as_ref().and_then(Trainer::poll) {
            if let Some(t) = trainer.take() {
                let _ = t.handle.join();
            }
            finish_training(&mut engine, result);
        }
        // A swapped-in model, or a fresh threshold made while the last batch was handled.
        lp.publish_changes(&engine, &mut published);
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
        // The wall clock bounds the wait for a first model (scoring.max_wait) even when no
        // message arrives to move event time.
        engine.tick(Instant::now())?;
        // Also books the outputs made above the batch (a finished retrain scores the events
        // that waited for a first model, the tick emits those that waited too long).
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
    Ok(())
}

/// Unsubscribes and closes the consumer (librdkafka's close: the revocation callback, then
/// LeaveGroup) on a thread of its own, waiting at most [`LEAVE_TIMEOUT`]. librdkafka 2.12 can
/// block forever in the close's incremental unassign when a cooperative rebalance is under way
/// at SIGTERM (seen when another member left just before); the offsets and `done` marks are
/// committed before this, so giving up loses nothing: the broker drops the member after
/// `session_timeout_ms`, and the process exits.
fn leave_group(consumer: Arc<BaseConsumer<GroupContext>>) {
    let (left, wait) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("neyman-leave".into())
        .spawn(move || {
            consumer.unsubscribe();
            drop(consumer);
            let _ = left.send(());
        });
    if let Err(e) = spawned {
        // The closure, consumer included, was dropped here: the close ran on this thread.
        tracing::warn!(error = %e, "cannot start a thread to leave the group");
        return;
    }
    if wait.recv_timeout(LEAVE_TIMEOUT).is_err() {
        tracing::warn!(
            timeout = ?LEAVE_TIMEOUT,
            "the consumer did not leave the group in time; exiting anyway (offsets are committed; \
             the broker removes the member after session_timeout_ms)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request to a channel without an input topic is refused as such (404 over HTTP),
    /// before anything is produced: no broker is needed to find it.
    #[tokio::test]
    async fn posting_to_a_channel_without_a_topic_is_no_topic() {
        let config = KafkaConfig::new("127.0.0.1:1");
        assert_eq!(config.topics.negative, None);
        let to_topics = ToTopics(EventProducer::new(&config).expect("producer"));
        let record = Record::new(Channel::Negative, 1, None, br#"{"id":"a"}"#.to_vec());
        match to_topics.forward(vec![record]).await {
            Err(ForwardError::NoTopic(message)) => assert_eq!(
                message,
                "this daemon has no negative topic (kafka.topics.negative is not set)"
            ),
            other => panic!("{other:?}"),
        }
    }
}
