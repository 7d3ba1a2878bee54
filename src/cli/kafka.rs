//! `neyman record` and `neyman replay FILE --to-kafka`: recorded streams from and to the
//! `[kafka]` topics. The work is in [`crate::stream::kafka`]; this part owns files, limits,
//! signals and the report.

use std::collections::BTreeMap;

use super::args::{RecordArgs, ReplayArgs};
use super::{write_atomic_with, CliError};
use crate::config::{KafkaConfig, LoadedConfig};
use crate::daemon::shutdown_signal;
use crate::stream::kafka::{self, RecordLimits, RecordSummary};
use crate::stream::record::{is_gzip_path, RecordReader, RecordWriter};
use crate::stream::Channel;

/// The `[kafka]` section, or a usage error naming the file.
fn kafka_section(loaded: &LoadedConfig) -> Result<&KafkaConfig, CliError> {
    loaded.config.kafka.as_ref().ok_or_else(|| {
        CliError::Usage(format!(
            "{}: no [kafka] section (set kafka.bootstrap_servers, e.g. with \
             NEYMAN_KAFKA_BOOTSTRAP_SERVERS)",
            loaded.path.display()
        ))
    })
}

/// One runtime per command: rdkafka's futures need a tokio reactor, and one thread is
/// plenty for a single consumer or producer.
fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Training(format!("cannot start the async runtime: {e}")))
}

/// `neyman record`: the input topics into `--out`, written atomically once recording stops, so
/// an interrupted or failed run leaves no partial file.
pub fn record(args: &RecordArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    let k = kafka_section(&loaded)?;
    if args.max_events == Some(0) {
        return Err(CliError::Usage("--max-events: must be ≥ 1".into()));
    }
    let limits = RecordLimits {
        max_events: args.max_events,
        duration: args.duration,
    };
    let rt = runtime()?;
    let mut summary = RecordSummary::default();
    write_atomic_with(&args.out, |file| {
        let mut writer = RecordWriter::new(&args.out, file, is_gzip_path(&args.out));
        summary = rt.block_on(kafka::record(k, &mut writer, limits, shutdown_signal()))?;
        writer.finish().map_err(|e| CliError::file(&args.out, e))?;
        Ok(())
    })?;
    if summary.lossy_keys > 0 || summary.lossy_headers > 0 {
        tracing::warn!(
            keys = summary.lossy_keys,
            header_values = summary.lossy_headers,
            "keys or header values were not UTF-8; recorded with U+FFFD replacements"
        );
    }
    let count = |c: Channel| summary.per_channel.get(&c).copied().unwrap_or(0);
    println!(
        "recorded {} events ({} positive, {} unlabeled, {} negative) -> {}",
        summary.events,
        count(Channel::Positive),
        count(Channel::Unlabeled),
        count(Channel::Negative),
        args.out.display()
    );
    Ok(())
}

/// `neyman replay FILE --to-kafka`: publishes FILE and exits once every message is
/// acknowledged.
pub fn replay_to_kafka(args: &ReplayArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    let k = kafka_section(&loaded)?;
    let reader = RecordReader::open(&args.file).map_err(|e| CliError::file(&args.file, e))?;
    let mut per_channel: BTreeMap<Channel, u64> = BTreeMap::new();
    let counted = reader.inspect(|r| {
        if let Ok(rec) = r {
            *per_channel.entry(rec.channel).or_default() += 1;
        }
    });
    let sent = runtime()?.block_on(kafka::publish(k, counted))?;
    let count = |c: Channel| per_channel.get(&c).copied().unwrap_or(0);
    println!(
        "published {sent} events ({} positive, {} unlabeled, {} negative) from {} to {}",
        count(Channel::Positive),
        count(Channel::Unlabeled),
        count(Channel::Negative),
        args.file.display(),
        k.bootstrap_servers
    );
    Ok(())
}
