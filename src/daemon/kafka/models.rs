//! The models topic: a trainer publishes every model it swaps in and every fresh threshold of
//! its active model (header `threshold_version`), scorers install them.

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::BaseConsumer;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};

use super::Loop;
use crate::engine::machine::Engine;
use crate::engine::store::StoredModel;
use crate::stream::kafka::{log_librdkafka, Logged};
use crate::telemetry::Metrics;

/// The trainer's producer of the models topic: delivery results are logged and counted.
pub(super) struct ModelContext {
    pub(super) metrics: Metrics,
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
pub(super) enum ModelLink {
    None,
    Publish {
        producer: ThreadedProducer<ModelContext>,
        topic: String,
        max_bytes: usize,
    },
    Read {
        consumer: BaseConsumer<Logged>,
        max_bytes: u64,
    },
}

impl Loop {
    /// Trainer: publishes the active model (just swapped in) to the models topic, keyed by
    /// its configuration fingerprint so that compaction keeps the newest per configuration.
    /// Publishes the active model when it (or its threshold) is not the one `published` last;
    /// `published` becomes its (version, threshold_version).
    pub(super) fn publish_changes(&self, engine: &Engine, published: &mut Option<(u64, u64)>) {
        let Some(model) = engine.active() else {
            return;
        };
        let current = Some((model.meta.version, model.threshold_version));
        if current != *published {
            *published = current;
            self.publish_model(engine);
        }
    }

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
        let threshold_text = model.threshold_version.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "model_version",
                value: Some(&version_text),
            })
            .insert(Header {
                key: "threshold_version",
                value: Some(&threshold_text),
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
    pub(super) fn read_models(&self, engine: &mut Engine) {
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
            // The threshold version travels as a header (the model file does not carry it);
            // a message without one is the threshold the model was trained with.
            let threshold_version = message
                .headers()
                .and_then(|headers| {
                    headers
                        .iter()
                        .find(|h| h.key == "threshold_version")
                        .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse::<u64>().ok())
                })
                .unwrap_or(0);
            match decoded.map_err(|e| e.to_string()).and_then(|mut m| {
                m.threshold_version = threshold_version;
                engine.install_remote(m)
            }) {
                Ok(version) => tracing::info!(
                    version,
                    threshold_version,
                    "model from the models topic installed"
                ),
                Err(reason) => tracing::warn!(
                    offset = message.offset(),
                    %reason,
                    "model from the models topic not installed"
                ),
            }
        }
    }
}
