//! `neyman bench kafka`: the daemon's Kafka pipeline against a raw rdkafka loop, on the same
//! broker, in the same run.
//!
//! 1. A linear τ-FPL model is trained in-process on generated events and stored, so the
//!    pipeline resumes it and scores from its first message.
//! 2. `--events` generated unlabeled events (~150 bytes, `--dim` features) are produced into a
//!    fresh input topic (all topic and group names are unique to the run).
//! 3. **consume only**: a consumer counts them.
//! 4. `--rounds` times, alternately (fresh consumer groups each round):
//!    - **raw loop**: one thread consumes them, produces each payload unchanged to another
//!      topic with the daemon's producer settings, and stores each offset after its delivery
//!      (auto-commit of stored offsets);
//!    - **pipeline**: [`crate::daemon::kafka::run`] consumes them (windows, scoring, scores
//!      with headers, at-least-once commits), until every score is acknowledged.
//!
//!    The raw and pipeline rates pool the rounds (all events over all seconds), and each
//!    round's pair is reported too: on a machine whose speed drifts (shared cores), one raw
//!    run followed by one pipeline run compares two different machines half of the time.
//! 6. **engine alone**: the same events through [`Engine::handle`] in-process, scores to a
//!    sink: the work the pipeline adds to the raw loop's. Its time plus the raw loop's is what
//!    one thread doing both needs, so `single_thread_bound_over_raw` = t_raw / (t_raw +
//!    t_engine) bounds `pipeline_over_raw` for a single poll thread.
//! 7. **latency**: a second pipeline reads a topic fed at `--rate` events/s while it runs;
//!    end-to-end latency of an event = CreateTime of its score − CreateTime of the event
//!    (both stamped by producers on this machine), p50/p99 over `--paced-events`.
//!
//! Rates are counted from each consumer's first message, so group joins are not in them. The
//! target: pipeline ≥ 0.5 × raw loop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{
    BaseRecord, DefaultProducerContext, DeliveryResult, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::ClientContext;
use serde_json::json;

use super::args::{BenchKafkaArgs, ReportFormat};
use super::progress::Progress;
use super::CliError;
use crate::config::{AlgorithmName, Config, KafkaConfig, KernelName, LoadedConfig};
use crate::daemon::replay::FileOutputs;
use crate::engine::machine::{Engine, EngineConfig, EngineParts};
use crate::engine::registry::Registry;
use crate::engine::store::ModelStore;
use crate::stream::dlq::DlqWriter;
use crate::stream::kafka::{
    admin_client, consumer_config, delete_topics_with_prefix, ensure_topics, producer_config,
    ConsumerRole,
};
use crate::stream::{Channel, Record};
use crate::telemetry::Metrics;

/// Generated messages: (key, payload).
type Payloads = Vec<(String, Vec<u8>)>;

fn failed(e: impl std::fmt::Display) -> CliError {
    CliError::Daemon(format!("bench kafka: {e}"))
}

/// One generated event: `dim` features with 3 decimals; positives are shifted.
fn event(rng: &mut ChaCha8Rng, id: &str, ts: i64, dim: usize, positive: bool) -> Vec<u8> {
    let shift = if positive { 1.5 } else { 0.0 };
    let x: Vec<String> = (0..dim)
        .map(|_| format!("{:.3}", rng.gen_range(-1.0..1.0) + shift))
        .collect();
    format!("{{\"id\":\"{id}\",\"ts\":{ts},\"x\":[{}]}}", x.join(",")).into_bytes()
}

/// The bench's copy of `[kafka]`: topics and groups named after `prefix`.
fn bench_kafka(k: &KafkaConfig, prefix: &str, input: &str, scores: &str) -> KafkaConfig {
    let mut b = k.clone();
    b.group_id = format!("{prefix}.group.{input}");
    b.topics.positive = format!("{prefix}.positive");
    b.topics.unlabeled = format!("{prefix}.{input}");
    b.topics.negative = None;
    b.topics.scores = format!("{prefix}.{scores}");
    b.topics.dlq = format!("{prefix}.dlq");
    b.topics.models = format!("{prefix}.models");
    b.partitions = 1;
    b
}

fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, CliError> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(failed)?
        .block_on(f))
}

/// Produces `payloads` (keyed by id) to `topic` and waits for every acknowledgement.
fn produce_all(
    k: &KafkaConfig,
    topic: &str,
    payloads: &[(String, Vec<u8>)],
) -> Result<(), CliError> {
    let producer: ThreadedProducer<DefaultProducerContext> =
        producer_config(k).create().map_err(failed)?;
    for (key, payload) in payloads {
        loop {
            match producer.send(BaseRecord::to(topic).key(key).payload(payload)) {
                Ok(()) => break,
                Err((e, _)) if is_queue_full(&e) => std::thread::sleep(Duration::from_millis(1)),
                Err((e, _)) => return Err(failed(e)),
            }
        }
    }
    producer.flush(Duration::from_secs(120)).map_err(failed)
}

fn is_queue_full(e: &rdkafka::error::KafkaError) -> bool {
    matches!(
        e,
        rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)
    )
}

/// An engine on `config.state.dir` without Kafka: scores go to a sink, dead letters to
/// `<name>-dlq.jsonl` there; with `resume`, the stored model is served at once.
fn in_process_engine(config: &Config, name: &str, resume: bool) -> Result<Engine, CliError> {
    let dir = &config.state.dir;
    Engine::new(
        EngineParts {
            config: EngineConfig::of(config),
            metrics: Metrics::new(&prometheus::Registry::new()).map_err(failed)?,
            registry: Arc::new(Registry::new(2)),
            store: ModelStore::open(dir, 2).map_err(failed)?,
            outputs: Box::new(FileOutputs::new(
                Box::new(std::io::sink()),
                "a discarding sink".into(),
                DlqWriter::open(&dir.join(format!("{name}-dlq.jsonl"))).map_err(failed)?,
            )),
            cancel: Arc::new(AtomicBool::new(false)),
        },
        resume,
    )
    .map_err(failed)
}

/// A model for the pipeline: linear τ-FPL trained in-process on generated events and stored
/// in `config.state.dir`, which the pipeline then resumes.
fn pretrain(config: &Config, dim: usize, rng: &mut ChaCha8Rng) -> Result<(), CliError> {
    let mut engine = in_process_engine(config, "pretrain", false)?;
    for i in 0..3000 {
        let positive_label = i % 10 == 0;
        let positive = positive_label || rng.gen::<f64>() < 0.3;
        let channel = if positive_label {
            Channel::Positive
        } else {
            Channel::Unlabeled
        };
        let id = format!("train-{i}");
        let payload = event(rng, &id, 1_767_225_600_000 + i, dim, positive);
        engine
            .handle(&Record::new(
                channel,
                1_767_225_600_000 + i,
                Some(id),
                payload,
            ))
            .map_err(failed)?;
    }
    if engine.active().is_none() {
        return Err(failed("pretraining produced no accepted model"));
    }
    Ok(())
}

/// The engine alone, in-process, on the same events: the pretrained model resumed, each
/// payload parsed, scored, windowed and its score serialised (to a sink). Seconds for all.
fn engine_only(config: &Config, payloads: &Payloads) -> Result<f64, CliError> {
    let mut engine = in_process_engine(config, "engine-only", true)?;
    if engine.active().is_none() {
        return Err(failed("the engine did not resume the pretrained model"));
    }
    let started = Instant::now();
    for (i, (id, payload)) in payloads.iter().enumerate() {
        let record = Record::new(
            Channel::Unlabeled,
            1_767_300_000_000 + i as i64,
            Some(id.clone()),
            payload.clone(),
        );
        engine.handle(&record).map_err(failed)?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Consumes `n` messages of `topic`; seconds from the first message to the n-th.
fn consume_only(k: &KafkaConfig, topic: &str, n: usize) -> Result<f64, CliError> {
    let consumer: BaseConsumer = consumer_config(k, ConsumerRole::Record)
        .set("group.id", format!("{}.count", k.group_id))
        .create()
        .map_err(failed)?;
    consumer.subscribe(&[topic]).map_err(failed)?;
    let (mut seen, mut first) = (0usize, None);
    let deadline = Instant::now() + Duration::from_secs(600);
    while seen < n && Instant::now() < deadline {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            first.get_or_insert_with(Instant::now);
            seen += 1;
        }
    }
    finish_rate(seen, n, first)
}

fn finish_rate(seen: usize, n: usize, first: Option<Instant>) -> Result<f64, CliError> {
    match first {
        Some(t) if seen >= n => Ok(t.elapsed().as_secs_f64()),
        _ => Err(failed(format!(
            "only {seen} of {n} messages within 10 minutes"
        ))),
    }
}

/// Delivery reports of the raw loop: (partition, offset) of the input message.
struct RawContext {
    acked: mpsc::Sender<(i32, i64)>,
}

impl ClientContext for RawContext {}

impl ProducerContext for RawContext {
    type DeliveryOpaque = Box<(i32, i64)>;

    fn delivery(&self, result: &DeliveryResult<'_>, input: Box<(i32, i64)>) {
        if result.is_ok() {
            let _ = self.acked.send(*input);
        }
    }
}

/// The baseline: consume, produce the payload unchanged with the daemon's producer settings,
/// store the input offset after delivery. Seconds from the first message to the n-th ack.
fn raw_loop(k: &KafkaConfig, input: &str, output: &str, n: usize) -> Result<f64, CliError> {
    let mut config = consumer_config(k, ConsumerRole::Daemon);
    config.set("group.id", format!("{}.raw", k.group_id));
    config.set("enable.auto.commit", "true");
    let consumer: BaseConsumer = config.create().map_err(failed)?;
    consumer.subscribe(&[input]).map_err(failed)?;
    let (tx, acks) = mpsc::channel();
    let producer: ThreadedProducer<RawContext> = producer_config(k)
        .create_with_context(RawContext { acked: tx })
        .map_err(failed)?;
    let (mut acked, mut first) = (0usize, None);
    let deadline = Instant::now() + Duration::from_secs(600);
    while acked < n && Instant::now() < deadline {
        while let Ok((partition, offset)) = acks.try_recv() {
            consumer
                .store_offset(input, partition, offset)
                .map_err(failed)?;
            acked += 1;
        }
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(10)) else {
            continue;
        };
        first.get_or_insert_with(Instant::now);
        let input_pos = Box::new((m.partition(), m.offset()));
        let payload = m.payload().unwrap_or_default();
        let key = m.key().unwrap_or_default();
        let mut record = BaseRecord::with_opaque_to(output, input_pos)
            .key(key)
            .payload(payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, back)) if is_queue_full(&e) => {
                    record = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err((e, _)) => return Err(failed(e)),
            }
        }
    }
    finish_rate(acked, n, first)
}

/// Runs the daemon's loop on `k` (resuming the pretrained model) until `n` scores are
/// acknowledged; seconds from the first handled message. With `feed`, a thread produces
/// those events at their pace while the loop runs.
fn pipeline(
    config: &Config,
    k: &KafkaConfig,
    n: usize,
    feed: Option<(Payloads, f64)>,
) -> Result<f64, CliError> {
    let metrics = Metrics::new(&prometheus::Registry::new()).map_err(failed)?;
    let (clients, outputs) = crate::daemon::kafka::connect(k, &metrics).map_err(failed)?;
    let engine = Engine::new(
        EngineParts {
            store: ModelStore::open(&config.state.dir, 2).map_err(failed)?,
            config: EngineConfig::of(config),
            metrics: metrics.clone(),
            registry: Arc::new(Registry::new(2)),
            outputs: Box::new(outputs),
            cancel: Arc::new(AtomicBool::new(false)),
        },
        true,
    )
    .map_err(failed)?;
    if engine.active().is_none() {
        return Err(failed("the pipeline did not resume the pretrained model"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let daemon = {
        let (metrics, stop) = (metrics.clone(), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("pipeline".into())
            .spawn(move || {
                crate::daemon::kafka::run(engine, clients, &metrics, &stop, Duration::from_secs(30))
            })
            .map_err(failed)?
    };
    let feeder = feed.map(|(payloads, rate)| {
        let (k, topic) = (k.clone(), k.topics.unlabeled.clone());
        let joined = metrics.kafka_rebalances.with_label_values(&["assign"]);
        // Feeding starts once the pipeline holds its partitions: the group join (seconds) is
        // not end-to-end latency.
        // The feeder's producer connects first as well: its metadata round trips would
        // otherwise hold the first events back with their CreateTime already stamped.
        std::thread::spawn(move || {
            let producer: ThreadedProducer<DefaultProducerContext> =
                producer_config(&k).create().map_err(failed)?;
            producer
                .client()
                .fetch_metadata(Some(&topic), Duration::from_secs(30))
                .map_err(failed)?;
            let deadline = Instant::now() + Duration::from_secs(120);
            while joined.get() == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(500));
            paced(&producer, &topic, &payloads, rate)
        })
    });
    // Any outcome counts as handled (a scorer windows nothing).
    let handled = || {
        ["windowed", "duplicate", "scored", "buffered", "rejected"]
            .iter()
            .map(|o| metrics.events.with_label_values(&["unlabeled", o]).get())
            .sum::<u64>()
    };
    let scored = || {
        metrics
            .events
            .with_label_values(&["unlabeled", "scored"])
            .get()
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first = None;
    let result = loop {
        if first.is_none() && handled() > 0 {
            first = Some(Instant::now());
        }
        if scored() >= n as u64 && metrics.kafka_in_flight.get() == 0 {
            break first
                .map(|t| t.elapsed().as_secs_f64())
                .ok_or_else(|| failed("no message handled"));
        }
        if Instant::now() > deadline || daemon.is_finished() {
            break Err(failed(format!("only {} of {n} scored", scored())));
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    stop.store(true, Ordering::SeqCst);
    let joined = daemon
        .join()
        .map_err(|_| failed("the pipeline thread panicked"))?;
    joined.map_err(failed)?;
    if let Some(f) = feeder {
        f.join().map_err(|_| failed("the feeder panicked"))??;
    }
    result
}

/// Produces `payloads` at `rate` per second (in 10 ms batches).
fn paced(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    payloads: &[(String, Vec<u8>)],
    rate: f64,
) -> Result<(), CliError> {
    let started = Instant::now();
    for (i, (key, payload)) in payloads.iter().enumerate() {
        let due = Duration::from_secs_f64(i as f64 / rate);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        producer
            .send(BaseRecord::to(topic).key(key).payload(payload))
            .map_err(|(e, _)| failed(e))?;
    }
    producer.flush(Duration::from_secs(60)).map_err(failed)
}

/// CreateTime of every message of `topic` (n of them), by (partition, offset); with
/// `by_source`, keyed by the `source_offset` header instead (scores).
fn timestamps(
    k: &KafkaConfig,
    topic: &str,
    n: usize,
    by_source: bool,
) -> Result<HashMap<i64, i64>, CliError> {
    let consumer: BaseConsumer = consumer_config(k, ConsumerRole::Record)
        .set("group.id", format!("{}.ts.{topic}", k.group_id))
        .create()
        .map_err(failed)?;
    consumer.subscribe(&[topic]).map_err(failed)?;
    let mut out = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while out.len() < n && Instant::now() < deadline {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let ts = m.timestamp().to_millis().unwrap_or(0);
        let key = if by_source {
            m.headers()
                .and_then(|hs| hs.iter().find(|h| h.key == "source_offset"))
                .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse().ok())
                .unwrap_or(-1)
        } else {
            m.offset()
        };
        out.insert(key, ts);
    }
    Ok(out)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub fn kafka(args: &BenchKafkaArgs) -> Result<(), CliError> {
    if args.events == 0
        || args.rounds == 0
        || args.paced_events == 0
        || args.dim == 0
        || args.rate.is_nan()
        || args.rate <= 0.0
    {
        return Err(CliError::Usage(
            "--events, --rounds, --paced-events, --dim and --rate must be positive".into(),
        ));
    }
    let loaded = LoadedConfig::load(&args.config).map_err(|e| CliError::Usage(e.to_string()))?;
    let mut config = loaded.config;
    let k = config.kafka.clone().ok_or_else(|| {
        CliError::Usage(format!(
            "{}: bench kafka needs a [kafka] section",
            args.config.display()
        ))
    })?;
    let prefix = format!(
        "neyman-bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let state = std::env::temp_dir().join(format!("{prefix}-state"));
    config.state.dir = state.clone();
    config.model.algorithm = AlgorithmName::Tfpl;
    config.model.kernel = Some(KernelName::Linear);
    let result = measure(args, &config, &k, &prefix);
    // The scratch state (the pretrained model) and topics, whether the bench finished or not.
    let _ = std::fs::remove_dir_all(&state);
    if args.keep_topics {
        eprintln!("topics kept: {prefix}.*");
    } else {
        let deleted = block_on(async {
            delete_topics_with_prefix(&admin_client(&k)?, &format!("{prefix}.")).await
        })
        .and_then(|r| r.map_err(failed));
        match deleted {
            Ok(names) => eprintln!("deleted the bench's {} topics ({prefix}.*)", names.len()),
            Err(e) => eprintln!("warning: the bench's topics {prefix}.* are left: {e}"),
        }
    }
    result
}

fn measure(
    args: &BenchKafkaArgs,
    config: &Config,
    k: &KafkaConfig,
    prefix: &str,
) -> Result<(), CliError> {
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    pretrain(config, args.dim, &mut rng)?;
    let bulk = bench_kafka(k, prefix, "in", "scores");
    let lat = bench_kafka(k, prefix, "paced", "scores-paced");
    let mut raw_out = bench_kafka(k, prefix, "raw-out", "scores");
    raw_out.topics.unlabeled = format!("{prefix}.raw-out");
    for topics in [&bulk, &lat, &raw_out] {
        block_on(async { ensure_topics(&admin_client(topics)?, topics).await })?.map_err(failed)?;
    }
    let generate = |rng: &mut ChaCha8Rng, tag: &str, n: usize| -> Vec<(String, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let id = format!("{tag}-{i}");
                let payload = event(rng, &id, 1_767_300_000_000 + i as i64, args.dim, false);
                (id, payload)
            })
            .collect()
    };
    let payloads = generate(&mut rng, "u", args.events);
    let mean_bytes =
        payloads.iter().map(|(_, p)| p.len()).sum::<usize>() as f64 / payloads.len() as f64;
    produce_all(&bulk, &bulk.topics.unlabeled, &payloads)?;

    let n = args.events;
    let consume = consume_only(&bulk, &bulk.topics.unlabeled, n)?;
    let mut rounds = Vec::with_capacity(args.rounds);
    let progress = Progress::new(false, "bench kafka", args.rounds, "rounds");
    for round in progress.over(0..args.rounds) {
        let mut k = bulk.clone();
        k.group_id = format!("{}.round{round}", bulk.group_id);
        let raw = raw_loop(&k, &k.topics.unlabeled, &raw_out.topics.unlabeled, n)?;
        let piped = pipeline(config, &k, n, None)?;
        rounds.push((raw, piped));
    }
    let raw = rounds.iter().map(|r| r.0).sum::<f64>() / args.rounds as f64;
    let piped = rounds.iter().map(|r| r.1).sum::<f64>() / args.rounds as f64;
    // Seconds per run, so raw / pipeline seconds is pipeline / raw rate.
    let round_ratios: Vec<f64> = rounds.iter().map(|(r, p)| r / p).collect();
    let mut sorted_ratios = round_ratios.clone();
    sorted_ratios.sort_by(f64::total_cmp);
    let engine = engine_only(config, &payloads)?;

    let paced_payloads = generate(&mut rng, "p", args.paced_events);
    let _ = pipeline(
        config,
        &lat,
        args.paced_events,
        Some((paced_payloads, args.rate)),
    )?;
    let sent = timestamps(&lat, &lat.topics.unlabeled, args.paced_events, false)?;
    let scored = timestamps(&lat, &lat.topics.scores, args.paced_events, true)?;
    let mut latencies: Vec<f64> = scored
        .iter()
        .filter_map(|(offset, t)| Some((t - sent.get(offset)?) as f64 / 1000.0))
        .collect();
    latencies.sort_by(f64::total_cmp);

    let rate = |seconds: f64| n as f64 / seconds;
    let report = json!({
        "events": n,
        "mean_event_bytes": mean_bytes,
        "consume_only_per_second": rate(consume),
        "raw_loop_per_second": rate(raw),
        "pipeline_per_second": rate(piped),
        "pipeline_over_raw": raw / piped,
        "target_pipeline_over_raw": 0.5,
        "rounds": rounds.iter().zip(&round_ratios).map(|((r, p), ratio)| json!({
            "raw_loop_per_second": rate(*r),
            "pipeline_per_second": rate(*p),
            "pipeline_over_raw": ratio,
        })).collect::<Vec<_>>(),
        "median_round_pipeline_over_raw": quantile(&sorted_ratios, 0.5),
        "engine_only_per_second": rate(engine),
        "single_thread_bound_over_raw": raw / (raw + engine),
        "latency": {
            "rate_per_second": args.rate,
            "events": latencies.len(),
            "p50_seconds": quantile(&latencies, 0.5),
            "p99_seconds": quantile(&latencies, 0.99),
        },
        "topic_prefix": prefix,
    });
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => println!(
            "{n} events of {mean_bytes:.0} bytes\nconsume only: {:.0}/s\nraw loop (consume → produce → store offset): {:.0}/s\npipeline (consume → score → produce → commit): {:.0}/s = {:.2} × raw (target ≥ 0.5; {} rounds, per round {})\nengine alone (parse → score → window → serialise, no Kafka): {:.0}/s; one thread doing the raw loop's and the engine's work: ≤ {:.2} × raw\nlatency at {}/s: p50 {:.4}s, p99 {:.4}s over {} events",
            rate(consume),
            rate(raw),
            rate(piped),
            raw / piped,
            args.rounds,
            round_ratios
                .iter()
                .map(|ratio| format!("{ratio:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            rate(engine),
            raw / (raw + engine),
            args.rate,
            quantile(&latencies, 0.5),
            quantile(&latencies, 0.99),
            latencies.len()
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_events_are_valid_and_about_150_bytes() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let payload = event(&mut rng, "u-123456", 1_767_300_000_000, 12, false);
        let e = crate::stream::event::parse_event(
            &payload,
            Some(12),
            &crate::stream::EventLimits::default(),
        )
        .expect("valid event");
        assert_eq!(e.id, "u-123456");
        assert!((100..=200).contains(&payload.len()), "{}", payload.len());
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.5), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn bench_topics_are_unique_to_the_run() {
        let k = KafkaConfig::new("b:1");
        let b = bench_kafka(&k, "p", "in", "scores");
        assert_eq!(b.topics.unlabeled, "p.in");
        assert_eq!(b.topics.scores, "p.scores");
        assert_eq!(b.topics.negative, None);
        assert!(b.group_id.starts_with("p."));
    }
}
