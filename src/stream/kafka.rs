//! Kafka in and out (rdkafka, bundled librdkafka): client settings built from `[kafka]`, topic
//! creation, recording topics into a recorded-stream file and publishing such a file into the
//! topics.
//!
//! - Settings: [`consumer_config`], [`producer_config`] and [`admin_config`] turn a checked
//!   [`KafkaConfig`] into an `rdkafka::ClientConfig`. `[kafka.librdkafka]` entries come first and
//!   the typed keys after, so a typed key always wins (the config check also refuses overlaps).
//!   Log a client config only through [`Redacted`]: rdkafka's own `Debug` prints passwords.
//! - [`ensure_topics`]: creates the configured topics that are missing. Some brokers never
//!   auto-create topics and others create them with their own partition count, so neyman
//!   creates its topics itself, with `kafka.partitions` and `kafka.replication_factor`.
//! - [`record`]: consumes the input topics into a [`RecordWriter`], one record per message
//!   (channel from the topic, `ts` the message timestamp, key, payload, partition, offset,
//!   headers). It never commits offsets, so every run starts at the earliest retained message.
//! - [`publish`]: produces recorded records into the channels' topics with an idempotent
//!   producer. Idempotence keeps the send order within a partition even with several requests
//!   in flight, so a channel's order is kept whenever its topic has one partition (the
//!   default for topics neyman creates) and per key otherwise.
//!
//! Text that is not UTF-8: payloads are kept as bytes (the file uses `payload_b64`). Keys and
//! header values are text in the recorded format; bytes that are not UTF-8 are replaced with
//! U+FFFD and counted in [`RecordSummary`] (`lossy_keys`, `lossy_headers`), which `neyman
//! record` reports. A header without a value is recorded as the empty string.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;

use super::record::{now_ms, Record, RecordError, RecordWriter};
use super::Channel;
use crate::config::{is_secret_property, KafkaConfig};

#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("kafka client: {0}")]
    Client(#[from] RdKafkaError),
    #[error(transparent)]
    Create(#[from] CreateError),
    #[error("topic {topic:?} (`{key}`): the broker refused to create it: {message}")]
    TopicRefused {
        topic: String,
        key: String,
        message: String,
    },
    #[error(
        "record {index}: channel {channel} has no topic (`kafka.topics.{channel}` is not set)"
    )]
    NoTopic { index: u64, channel: Channel },
    #[error("record {index} to topic {topic:?}: delivery failed: {message}")]
    Delivery {
        index: u64,
        topic: String,
        message: String,
    },
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(
        "no Kafka broker answered at {servers} (`kafka.bootstrap_servers`) within {waited:.0?} \
         (`kafka.connect_timeout`): {message}"
    )]
    Unreachable {
        servers: String,
        waited: Duration,
        message: String,
    },
}

/// How long an admin or metadata request may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
/// One attempt of [`wait_for_broker`].
const CONNECT_ATTEMPT: Duration = Duration::from_secs(5);
/// Sends waiting for their acknowledgement at once; bounds memory on large files.
const MAX_PENDING: usize = 10_000;

/// Which consumer: the daemon's group, or `neyman record`'s throwaway one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerRole {
    /// `kafka.group_id`, static membership when `group_instance_id` is set, cooperative-sticky
    /// assignment, no automatic commits: the daemon's Kafka driver commits the offsets it
    /// computed itself, so a crash re-delivers rather than loses.
    Daemon,
    /// `<group_id>-record`, earliest, no commits, no static membership.
    Record,
}

/// The settings every client shares: passthrough first, then brokers and security.
fn common_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (key, value) in &k.librdkafka {
        c.set(key, value);
    }
    c.set("bootstrap.servers", &k.bootstrap_servers);
    c.set("security.protocol", k.security_protocol.as_str());
    if let Some(m) = &k.sasl_mechanism {
        c.set("sasl.mechanism", m);
    }
    if let Some(u) = &k.sasl_username {
        c.set("sasl.username", u);
    }
    if let Some(p) = &k.sasl_password {
        c.set("sasl.password", p.expose());
    }
    for (key, path) in [
        ("ssl.ca.location", &k.ssl_ca_location),
        ("ssl.certificate.location", &k.ssl_certificate_location),
        ("ssl.key.location", &k.ssl_key_location),
    ] {
        if let Some(p) = path {
            c.set(key, p.display().to_string());
        }
    }
    c
}

/// A consumer's settings for `role`.
pub fn consumer_config(k: &KafkaConfig, role: ConsumerRole) -> ClientConfig {
    let mut c = common_config(k);
    c.set("session.timeout.ms", k.session_timeout_ms.to_string());
    c.set("heartbeat.interval.ms", k.heartbeat_interval_ms.to_string());
    match role {
        ConsumerRole::Daemon => {
            c.set("group.id", &k.group_id);
            c.set("auto.offset.reset", k.auto_offset_reset.as_str());
            c.set("enable.auto.commit", "false");
            c.set("enable.auto.offset.store", "false");
            if let Some(id) = &k.group_instance_id {
                c.set("group.instance.id", id);
            }
            // Defaults a `[kafka.librdkafka]` entry may override: incremental rebalances (a
            // member joining does not stop the others), lag statistics every 5 s, a fetch
            // backoff that does not stall a consumer doing real work per message for a second,
            // and a fetch wait that bounds latency on brokers that hold fetches for the whole
            // wait (tansu does: p50 latency fell from 150 ms at librdkafka's 500 ms).
            for (key, value) in [
                ("partition.assignment.strategy", "cooperative-sticky"),
                ("statistics.interval.ms", "5000"),
                ("fetch.queue.backoff.ms", "10"),
                ("fetch.wait.max.ms", "100"),
            ] {
                if !k.librdkafka.contains_key(key) {
                    c.set(key, value);
                }
            }
        }
        ConsumerRole::Record => {
            c.set("group.id", format!("{}-record", k.group_id));
            c.set("auto.offset.reset", "earliest");
            c.set("enable.auto.commit", "false");
        }
    }
    c
}

/// An idempotent producer's settings: no duplicates on retry and the send order kept per
/// partition. Defaults a `[kafka.librdkafka]` entry may override: `message.timeout.ms` 30 s
/// (librdkafka's 300 s hides a dead broker for five minutes) and `compression.type` lz4
/// (librdkafka's default is none; JSON scores compress well, and brokers then store and
/// forward a batch without touching each record: faster in `neyman bench kafka`, see
/// docs/benchmarks.md).
pub fn producer_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = common_config(k);
    c.set("enable.idempotence", "true");
    if !k.librdkafka.contains_key("message.timeout.ms") {
        c.set("message.timeout.ms", "30000");
    }
    if !k.librdkafka.contains_key("compression.type")
        && !k.librdkafka.contains_key("compression.codec")
    {
        c.set("compression.type", "lz4");
    }
    c
}

/// The trainer's producer for the models topic: idempotent, and allowing messages up to
/// `model_max_bytes` plus room for the record framing.
pub fn model_producer_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = producer_config(k);
    c.set(
        "message.max.bytes",
        (k.model_max_bytes + 64 * 1024)
            .min(1_000_000_000)
            .to_string(),
    );
    c
}

/// A plain reader's settings (assigned partitions, never joins nor commits; librdkafka still
/// wants a group id): the scorer reads the models topic with it, with fetch limits that fit
/// `model_max_bytes`.
pub fn model_reader_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = common_config(k);
    c.set("group.id", format!("{}.models-reader", k.group_id));
    c.set("enable.auto.commit", "false");
    c.set(
        "fetch.message.max.bytes",
        (k.model_max_bytes + 64 * 1024)
            .min(1_000_000_000)
            .to_string(),
    );
    c.set(
        "receive.message.max.bytes",
        (k.model_max_bytes + (1 << 20))
            .min(2_147_483_647)
            .to_string(),
    );
    c
}

/// An admin client's settings.
pub fn admin_config(k: &KafkaConfig) -> ClientConfig {
    common_config(k)
}

/// The context of the clients made here: librdkafka's log lines and errors go to tracing
/// (rdkafka's default context hands them to the `log` crate, which nothing here reads), so a
/// TLS handshake refused on the CA is in the log, not only the transport failure it causes.
/// The name says which client in the log.
pub struct Logged(pub &'static str);

impl ClientContext for Logged {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka(self.0, level, fac, message);
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        tracing::warn!(client = self.0, %error, reason, "kafka client error");
    }
}

impl ConsumerContext for Logged {}

/// One librdkafka log line to tracing, at its level.
pub fn log_librdkafka(client: &str, level: RDKafkaLogLevel, fac: &str, message: &str) {
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

/// A client could not be made from its settings; the message has the settings' secret values
/// replaced by `<redacted>` ([`create_client`]).
#[derive(Debug, thiserror::Error)]
#[error("kafka client: {0}")]
pub struct CreateError(String);

/// A client made from `config` (built from `k`) with `context`. librdkafka's messages quote the
/// value they refuse (`Client config error: … socket.timeout.ms hunter2`), so on failure every
/// secret value of `k` is replaced by `<redacted>` in the error, wherever it appears.
pub fn create_client<C, T>(
    k: &KafkaConfig,
    config: &ClientConfig,
    context: C,
) -> Result<T, CreateError>
where
    C: rdkafka::client::ClientContext,
    T: rdkafka::config::FromClientConfigAndContext<C>,
{
    T::from_config_and_context(config, context).map_err(|e| CreateError::redacted(k, e))
}

impl CreateError {
    fn redacted(k: &KafkaConfig, e: RdKafkaError) -> CreateError {
        let mut message = e.to_string();
        let secrets = k
            .librdkafka
            .secret_values()
            .chain(k.sasl_password.as_ref().map(|p| p.expose()));
        for secret in secrets.filter(|s| !s.is_empty()) {
            message = message.replace(secret, "<redacted>");
        }
        CreateError(message)
    }
}

/// Checks `config` as librdkafka will when a client is made (every property known, every value
/// valid for this build: `security.protocol = "ssl"` needs TLS support built in), without
/// making a client, so `config check` fails where `run` would.
pub fn check_client_config(k: &KafkaConfig, config: &ClientConfig) -> Result<(), CreateError> {
    config
        .create_native_config()
        .map(drop)
        .map_err(|e| CreateError::redacted(k, e))
}

/// A client config for logs: every property, secrets shown as `<redacted>`.
pub struct Redacted<'a>(pub &'a ClientConfig);

impl Redacted<'_> {
    pub fn map(&self) -> BTreeMap<String, String> {
        self.0
            .config_map()
            .into_iter()
            .map(|(k, v)| {
                let v = if is_secret_property(k) {
                    "<redacted>"
                } else {
                    v
                };
                (k.to_string(), v.to_string())
            })
            .collect()
    }
}

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.map()).finish()
    }
}

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.map().iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(" "))
    }
}

/// Waits until the broker answers a metadata request, retrying every few seconds with a
/// warning naming the bootstrap servers, for at most `kafka.connect_timeout`; `stop` (a
/// shutdown) ends the wait early with `Ok(false)`. librdkafka itself retries forever and
/// reports only "transport failure", so the timeout and the address are ours.
pub fn wait_for_broker(
    admin: &AdminClient<Logged>,
    k: &KafkaConfig,
    stop: &AtomicBool,
) -> Result<bool, KafkaError> {
    let started = Instant::now();
    let deadline = started + k.connect_timeout.0;
    tracing::info!(bootstrap_servers = %k.bootstrap_servers, "connecting to Kafka");
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let error = match admin
            .inner()
            .fetch_metadata(None, left.min(CONNECT_ATTEMPT))
        {
            Ok(_) => return Ok(true),
            Err(e) => e,
        };
        if stop.load(Ordering::SeqCst) {
            return Ok(false);
        }
        if Instant::now() >= deadline {
            return Err(KafkaError::Unreachable {
                servers: k.bootstrap_servers.clone(),
                waited: started.elapsed(),
                message: error.to_string(),
            });
        }
        tracing::warn!(
            bootstrap_servers = %k.bootstrap_servers,
            attempt,
            %error,
            waited_s = started.elapsed().as_secs(),
            timeout_s = k.connect_timeout.0.as_secs(),
            "Kafka not reachable yet; retrying"
        );
    }
}

/// Deletes every topic whose name starts with `prefix` and returns their names (for scratch
/// topics, such as `bench kafka`'s). A topic deleted concurrently counts as deleted.
pub async fn delete_topics_with_prefix(
    admin: &AdminClient<Logged>,
    prefix: &str,
) -> Result<Vec<String>, KafkaError> {
    let metadata = admin.inner().fetch_metadata(None, ADMIN_TIMEOUT)?;
    let names: Vec<String> = metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|name| name.starts_with(prefix))
        .collect();
    if names.is_empty() {
        return Ok(names);
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let options = AdminOptions::new()
        .operation_timeout(Some(Timeout::After(ADMIN_TIMEOUT)))
        .request_timeout(Some(Timeout::After(ADMIN_TIMEOUT)));
    for result in admin.delete_topics(&refs, &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((topic, code)) => {
                return Err(KafkaError::TopicRefused {
                    topic,
                    key: "bench".into(),
                    message: format!("cannot delete it: {code}"),
                })
            }
        }
    }
    Ok(names)
}

/// Creates the configured topics that the broker does not have yet (all six, or five without
/// a negative topic) and returns the names it created. A topic created concurrently by someone
/// else counts as present.
pub async fn ensure_topics(
    admin: &AdminClient<Logged>,
    k: &KafkaConfig,
) -> Result<Vec<String>, KafkaError> {
    let metadata = admin.inner().fetch_metadata(None, ADMIN_TIMEOUT)?;
    let present: Vec<&str> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| t.name())
        .collect();
    let wanted = k.topics.all();
    let missing: Vec<(&str, &str)> = wanted
        .iter()
        .copied()
        .filter(|(_, topic)| !present.contains(topic))
        .collect();
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    let max_bytes = k.model_max_bytes.to_string();
    let new: Vec<NewTopic> = missing
        .iter()
        .map(|(_, topic)| {
            let t = NewTopic::new(
                topic,
                k.partitions,
                TopicReplication::Fixed(k.replication_factor),
            );
            // The models topic keeps the newest model per configuration, however large.
            if *topic == k.topics.models {
                t.set("cleanup.policy", "compact")
                    .set("max.message.bytes", &max_bytes)
            } else {
                t
            }
        })
        .collect();
    let options = AdminOptions::new()
        .operation_timeout(Some(Timeout::After(ADMIN_TIMEOUT)))
        .request_timeout(Some(Timeout::After(ADMIN_TIMEOUT)));
    let results = admin.create_topics(new.iter(), &options).await?;
    let mut created = Vec::new();
    for result in results {
        match result {
            Ok(topic) => created.push(topic),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => {
                let key = missing
                    .iter()
                    .find(|(_, t)| *t == topic)
                    .map_or("kafka.topics", |(key, _)| key);
                return Err(KafkaError::TopicRefused {
                    topic,
                    key: key.to_string(),
                    message: code.to_string(),
                });
            }
        }
    }
    Ok(created)
}

/// A new admin client for `k`.
pub fn admin_client(k: &KafkaConfig) -> Result<AdminClient<Logged>, KafkaError> {
    Ok(create_client(k, &admin_config(k), Logged("admin"))?)
}

/// When [`record`] stops (besides its `stop` future).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordLimits {
    pub max_events: Option<u64>,
    pub duration: Option<Duration>,
}

/// What [`record`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordSummary {
    pub events: u64,
    pub per_channel: BTreeMap<Channel, u64>,
    /// Keys that were not UTF-8 (recorded with U+FFFD replacements).
    pub lossy_keys: u64,
    /// Header values that were not UTF-8 (recorded with U+FFFD replacements).
    pub lossy_headers: u64,
}

/// The input topics and their channels.
pub fn input_topics(k: &KafkaConfig) -> Vec<(String, Channel)> {
    let mut out = vec![
        (k.topics.positive.clone(), Channel::Positive),
        (k.topics.unlabeled.clone(), Channel::Unlabeled),
    ];
    if let Some(n) = &k.topics.negative {
        out.push((n.clone(), Channel::Negative));
    }
    out
}

/// Consumes the input topics (creating missing ones first) into `writer` until
/// `limits.max_events` records, `limits.duration` or `stop` resolves, whichever comes first.
/// A message without a timestamp is recorded at the time it was received.
pub async fn record<W: Write>(
    k: &KafkaConfig,
    writer: &mut RecordWriter<W>,
    limits: RecordLimits,
    stop: impl Future<Output = ()>,
) -> Result<RecordSummary, KafkaError> {
    ensure_topics(&admin_client(k)?, k).await?;
    let channels: HashMap<String, Channel> = input_topics(k).into_iter().collect();
    let consumer: StreamConsumer<Logged> = create_client(
        k,
        &consumer_config(k, ConsumerRole::Record),
        Logged("record"),
    )?;
    let names: Vec<&str> = channels.keys().map(String::as_str).collect();
    consumer.subscribe(&names)?;
    let mut summary = RecordSummary::default();
    let deadline = limits.duration.map(|d| tokio::time::Instant::now() + d);
    let until_deadline = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until_deadline, stop);
    while !matches!(limits.max_events, Some(n) if summary.events >= n) {
        let message = tokio::select! {
            m = consumer.recv() => m?,
            _ = &mut until_deadline => break,
            _ = &mut stop => break,
        };
        let Some(&channel) = channels.get(message.topic()) else {
            continue;
        };
        let (rec, lossy) = record_of(&message, channel);
        summary.lossy_keys += u64::from(lossy.key);
        summary.lossy_headers += lossy.headers;
        writer.write(&rec)?;
        summary.events += 1;
        *summary.per_channel.entry(channel).or_default() += 1;
    }
    Ok(summary)
}

/// What [`record_of`] had to replace with U+FFFD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lossy {
    /// The key was not UTF-8.
    pub key: bool,
    /// Header values that were not UTF-8.
    pub headers: u64,
}

/// A consumed message as a [`Record`] of `channel`: payload bytes as received, key and header
/// values as text (bytes that are not UTF-8 replaced, and counted in [`Lossy`]), the message
/// timestamp or, without one, the time it was received.
pub fn record_of(message: &impl Message, channel: Channel) -> (Record, Lossy) {
    let mut record = Record::new(channel, 0, None, Vec::new());
    let key_lossy = read_without_headers(&mut record, message, channel);
    let (headers, lossy_headers) = headers_of(message);
    record.headers = headers;
    let lossy = Lossy {
        key: key_lossy,
        headers: lossy_headers,
    };
    (record, lossy)
}

/// [`record_of`] without the headers (left empty), written over `record` so that its key and
/// payload buffers are reused (the poll loop reads every message through one record); returns
/// whether the key was not UTF-8. librdkafka parses a consumed message's headers on first
/// access, at a cost comparable to the rest of the conversion; the daemon reads them with
/// [`headers_of`] only for a dead letter.
pub fn read_without_headers(record: &mut Record, message: &impl Message, channel: Channel) -> bool {
    let mut lossy_key = false;
    match message.key() {
        Some(bytes) => {
            let key = record.key.get_or_insert_with(String::new);
            key.clear();
            match std::str::from_utf8(bytes) {
                Ok(text) => key.push_str(text),
                Err(_) => {
                    lossy_key = true;
                    key.push_str(&String::from_utf8_lossy(bytes));
                }
            }
        }
        None => record.key = None,
    }
    record.channel = channel;
    record.ts = message.timestamp().to_millis().unwrap_or_else(now_ms);
    record.payload.clear();
    record
        .payload
        .extend_from_slice(message.payload().unwrap_or_default());
    record.partition = Some(message.partition());
    record.offset = Some(message.offset());
    record.headers.clear();
    lossy_key
}

/// A message's headers as text, and how many values were not UTF-8.
pub fn headers_of(message: &impl Message) -> (Vec<(String, String)>, u64) {
    let mut headers = Vec::new();
    let mut lossy = 0;
    if let Some(hs) = message.headers() {
        for h in hs.iter() {
            let value = h.value.unwrap_or_default();
            if std::str::from_utf8(value).is_err() {
                lossy += 1;
            }
            headers.push((
                h.key.to_string(),
                String::from_utf8_lossy(value).into_owned(),
            ));
        }
    }
    (headers, lossy)
}

/// Produces `records` into their channels' topics (creating missing topics first): key and
/// headers kept, the message timestamp set to the record's `ts`. Returns once every message is
/// acknowledged, with the count; the first failed delivery is the error.
pub async fn publish(
    k: &KafkaConfig,
    records: impl IntoIterator<Item = Result<Record, RecordError>>,
) -> Result<u64, KafkaError> {
    ensure_topics(&admin_client(k)?, k).await?;
    let producer: FutureProducer<Logged> =
        create_client(k, &producer_config(k), Logged("publish"))?;
    let topic_of = |c: Channel| match c {
        Channel::Positive => Some(k.topics.positive.as_str()),
        Channel::Unlabeled => Some(k.topics.unlabeled.as_str()),
        Channel::Negative => k.topics.negative.as_deref(),
    };
    let mut pending: VecDeque<(u64, &str, DeliveryFuture)> = VecDeque::new();
    let mut sent = 0u64;
    for rec in records {
        let rec = rec?;
        let index = sent + 1;
        let topic = topic_of(rec.channel).ok_or(KafkaError::NoTopic {
            index,
            channel: rec.channel,
        })?;
        let mut headers = OwnedHeaders::new_with_capacity(rec.headers.len());
        for (name, value) in &rec.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_str()),
            });
        }
        loop {
            let mut message = FutureRecord::to(topic)
                .payload(&rec.payload)
                .timestamp(rec.ts)
                .headers(headers.clone());
            if let Some(key) = &rec.key {
                message = message.key(key);
            }
            match producer.send_result(message) {
                Ok(delivery) => {
                    pending.push_back((index, topic, delivery));
                    break;
                }
                // librdkafka's queue is full: wait for the oldest send, then retry.
                Err((RdKafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _))
                    if !pending.is_empty() =>
                {
                    await_delivery(pending.pop_front()).await?;
                }
                Err((e, _)) => {
                    return Err(KafkaError::Delivery {
                        index,
                        topic: topic.to_string(),
                        message: e.to_string(),
                    })
                }
            }
        }
        sent += 1;
        if pending.len() >= MAX_PENDING {
            await_delivery(pending.pop_front()).await?;
        }
    }
    while let Some(p) = pending.pop_front() {
        await_delivery(Some(p)).await?;
    }
    producer.flush(Timeout::After(ADMIN_TIMEOUT))?;
    Ok(sent)
}

/// Where one produced record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Produces events posted to the HTTP API into the input topic of their channel, for the
/// daemon's consumers to take like any other message (`POST /v1/events/*` on a Kafka source).
pub struct EventProducer {
    producer: FutureProducer<Logged>,
    positive: String,
    unlabeled: String,
    negative: Option<String>,
}

impl fmt::Debug for EventProducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventProducer")
            .field("positive", &self.positive)
            .field("unlabeled", &self.unlabeled)
            .field("negative", &self.negative)
            .finish_non_exhaustive()
    }
}

impl EventProducer {
    /// An idempotent producer with `[kafka]`'s settings (it connects on first use).
    pub fn new(k: &KafkaConfig) -> Result<EventProducer, KafkaError> {
        Ok(EventProducer {
            producer: create_client(k, &producer_config(k), Logged("events"))?,
            positive: k.topics.positive.clone(),
            unlabeled: k.topics.unlabeled.clone(),
            negative: k.topics.negative.clone(),
        })
    }

    /// The input topic of `channel`, if it has one.
    pub fn topic(&self, channel: Channel) -> Option<&str> {
        match channel {
            Channel::Positive => Some(&self.positive),
            Channel::Unlabeled => Some(&self.unlabeled),
            Channel::Negative => self.negative.as_deref(),
        }
    }

    /// Produces `records` in order, each keyed by its payload's string `id` when it has one
    /// (so one id stays on one partition, as `stream make` keys), stamped with its `ts`;
    /// returns once all are acknowledged, or the first failure.
    pub async fn produce(&self, records: &[Record]) -> Result<Vec<Produced>, KafkaError> {
        #[derive(serde::Deserialize)]
        struct Id<'a> {
            #[serde(borrow)]
            id: Option<&'a str>,
        }
        let mut pending = Vec::with_capacity(records.len());
        for (i, rec) in records.iter().enumerate() {
            let index = i as u64 + 1;
            let topic = self.topic(rec.channel).ok_or(KafkaError::NoTopic {
                index,
                channel: rec.channel,
            })?;
            let key = serde_json::from_slice::<Id<'_>>(&rec.payload)
                .ok()
                .and_then(|parsed| parsed.id);
            let mut message = FutureRecord::to(topic)
                .payload(&rec.payload)
                .timestamp(rec.ts);
            if let Some(key) = key {
                message = message.key(key);
            }
            let delivery =
                self.producer
                    .send_result(message)
                    .map_err(|(e, _)| KafkaError::Delivery {
                        index,
                        topic: topic.to_string(),
                        message: e.to_string(),
                    })?;
            pending.push((index, topic, delivery));
        }
        let mut produced = Vec::with_capacity(pending.len());
        for (index, topic, delivery) in pending {
            let failed = |message: String| KafkaError::Delivery {
                index,
                topic: topic.to_string(),
                message,
            };
            match delivery.await {
                Ok(Ok(delivered)) => produced.push(Produced {
                    topic: topic.to_string(),
                    partition: delivered.partition,
                    offset: delivered.offset,
                }),
                Ok(Err((e, _))) => return Err(failed(e.to_string())),
                Err(_) => return Err(failed("the producer was dropped".into())),
            }
        }
        Ok(produced)
    }
}

async fn await_delivery(pending: Option<(u64, &str, DeliveryFuture)>) -> Result<(), KafkaError> {
    let Some((index, topic, delivery)) = pending else {
        return Ok(());
    };
    let failed = |message: String| KafkaError::Delivery {
        index,
        topic: topic.to_string(),
        message,
    };
    match delivery.await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err((e, _))) => Err(failed(e.to_string())),
        Err(_) => Err(failed(
            "the producer was dropped before the acknowledgement".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Secret, SecurityProtocol};

    fn secure() -> KafkaConfig {
        let mut k = KafkaConfig::new("b1:9092,b2:9092");
        k.security_protocol = SecurityProtocol::SaslSsl;
        k.sasl_mechanism = Some("SCRAM-SHA-512".into());
        k.sasl_username = Some("neyman".into());
        k.sasl_password = Some(Secret::new("hunter2"));
        k.group_instance_id = Some("neyman-1".into());
        k.librdkafka
            .insert("fetch.queue.backoff.ms".into(), "10".into());
        k.librdkafka
            .insert("ssl.keystore.password".into(), "swordfish".into());
        k
    }

    #[test]
    fn client_configs_carry_the_typed_keys_per_role() {
        let k = secure();
        let daemon = consumer_config(&k, ConsumerRole::Daemon);
        for (key, value) in [
            ("bootstrap.servers", "b1:9092,b2:9092"),
            ("group.id", "neyman"),
            ("group.instance.id", "neyman-1"),
            ("auto.offset.reset", "earliest"),
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "2000"),
            ("enable.auto.offset.store", "false"),
            ("enable.auto.commit", "false"),
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.password", "hunter2"),
            ("fetch.queue.backoff.ms", "10"),
        ] {
            assert_eq!(daemon.get(key), Some(value), "{key}");
        }
        let record = consumer_config(&k, ConsumerRole::Record);
        assert_eq!(record.get("group.id"), Some("neyman-record"));
        assert_eq!(record.get("enable.auto.commit"), Some("false"));
        assert_eq!(record.get("group.instance.id"), None);
        let producer = producer_config(&k);
        assert_eq!(producer.get("enable.idempotence"), Some("true"));
        assert_eq!(producer.get("message.timeout.ms"), Some("30000"));
        assert_eq!(producer.get("group.id"), None);
        let admin = admin_config(&k);
        assert_eq!(admin.get("bootstrap.servers"), Some("b1:9092,b2:9092"));
        // A passthrough message.timeout.ms wins over neyman's default.
        let mut k2 = KafkaConfig::new("b:1");
        k2.librdkafka
            .insert("message.timeout.ms".into(), "5000".into());
        assert_eq!(producer_config(&k2).get("message.timeout.ms"), Some("5000"));
    }

    #[test]
    fn redacted_client_configs_never_show_secrets() {
        let c = consumer_config(&secure(), ConsumerRole::Daemon);
        let shown = format!("{:?} {}", Redacted(&c), Redacted(&c));
        assert!(
            !shown.contains("hunter2") && !shown.contains("swordfish"),
            "{shown}"
        );
        let map = Redacted(&c).map();
        assert_eq!(
            map.get("sasl.password").map(String::as_str),
            Some("<redacted>")
        );
        assert_eq!(
            map.get("ssl.keystore.password").map(String::as_str),
            Some("<redacted>")
        );
        assert_eq!(map.get("sasl.username").map(String::as_str), Some("neyman"));
    }

    /// librdkafka quotes the value it refuses; a secret's value never reaches the error, even
    /// when it was pasted under a key that is not secret.
    #[test]
    fn a_refused_client_config_never_shows_a_secret() {
        let mut k = KafkaConfig::new("127.0.0.1:1");
        k.sasl_password = Some(Secret::new("hunter2"));
        k.librdkafka
            .insert("ssl.key.password".into(), "swordfish".into());
        k.librdkafka
            .insert("socket.timeout.ms".into(), "swordfish".into());
        let c = consumer_config(&k, ConsumerRole::Daemon);
        let made: Result<StreamConsumer<Logged>, _> = create_client(&k, &c, Logged("test"));
        let Err(e) = made else {
            panic!("an integer property set to text is refused");
        };
        let checked = check_client_config(&k, &c)
            .expect_err("refused")
            .to_string();
        for shown in [e.to_string(), format!("{e:?}"), checked] {
            assert!(shown.contains("socket.timeout.ms"), "{shown}");
            assert!(
                !shown.contains("swordfish") && !shown.contains("hunter2"),
                "{shown}"
            );
            assert!(shown.contains("<redacted>"), "{shown}");
        }
    }

    #[test]
    fn input_topics_follow_the_channels() {
        let mut k = KafkaConfig::new("b:1");
        assert_eq!(
            input_topics(&k),
            vec![
                ("neyman.positive".to_string(), Channel::Positive),
                ("neyman.unlabeled".to_string(), Channel::Unlabeled)
            ]
        );
        k.topics.negative = Some("fb".into());
        assert_eq!(input_topics(&k)[2], ("fb".to_string(), Channel::Negative));
        assert_eq!(k.topics.all().len(), 6);
    }
}
