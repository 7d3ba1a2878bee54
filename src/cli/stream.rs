//! `neyman stream ...`: recorded-stream tools.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use super::args::{ReportFormat, StreamMakeArgs};
use super::progress::Progress;
use super::{write_atomic_with, CliError};
use crate::data::read;
use crate::stream::make::{Drift, MakeError, MakeParams, StreamMaker};
use crate::stream::record::{is_gzip_path, RecordError, RecordWriter};
use crate::stream::{parse_event, Channel, EventLimits};

fn make_error(data: &Path, e: MakeError) -> CliError {
    match e {
        MakeError::Empty | MakeError::Unlabeled { .. } => CliError::file(data, e),
        _ => CliError::Usage(e.to_string()),
    }
}

fn write_error(out: &Path, e: RecordError) -> CliError {
    match e {
        RecordError::Write { source, .. } => CliError::file(out, source),
        other => CliError::file(out, other),
    }
}

/// `neyman stream make`: writes the generated stream atomically and reports the counts per
/// channel, and per channel and true label (from the events' `meta.label`).
pub fn make(args: &StreamMakeArgs) -> Result<(), CliError> {
    let data = read(&args.data, &args.read.options(false))?;
    let params = MakeParams {
        pu_labeled_fraction: args.pu_labeled_fraction,
        negative_feedback_fraction: args.negative_feedback_fraction,
        seed: args.seed,
        rate: args.rate,
        events: args.events,
        start_ms: args.start_ms,
        drift: args.drift.map(|kind| Drift {
            kind: kind.into(),
            at: args.at,
            size: args.drift_size,
        }),
        feedback_delay_ms: args.feedback_delay_ms,
        keep_order: args.keep_order,
    };
    let maker = StreamMaker::new(&data, &params).map_err(|e| make_error(&args.data, e))?;
    // Exact, except that delayed feedback copies (--feedback-delay-ms) add a few more.
    let (at_least, exactly) = maker.size_hint();
    let progress = Progress::new(
        args.quiet,
        "making the stream",
        exactly.unwrap_or(at_least),
        "events",
    );
    let mut channels: BTreeMap<Channel, usize> = Channel::ALL.iter().map(|&c| (c, 0)).collect();
    let mut true_positives: BTreeMap<Channel, usize> = channels.clone();
    let (mut first_ts, mut last_ts, mut events, mut drifted) = (None, None, 0usize, 0usize);
    let limits = EventLimits {
        max_bytes: usize::MAX,
        ..EventLimits::default()
    };
    write_atomic_with(&args.out, |file| {
        let mut writer = RecordWriter::new(&args.out, file, is_gzip_path(&args.out));
        for record in maker {
            // The generator's own output always validates; counting the true label from the
            // payload checks that on every event.
            let event = parse_event(&record.payload, None, &limits)
                .map_err(|r| CliError::Training(format!("generated an invalid event: {r}")))?;
            let meta = |key: &str| event.meta.as_ref().and_then(|m| m.get(key));
            let label = meta("label").and_then(|l| l.as_i64());
            drifted += usize::from(meta("drifted").is_some());
            *channels.entry(record.channel).or_default() += 1;
            if label == Some(1) {
                *true_positives.entry(record.channel).or_default() += 1;
            }
            first_ts.get_or_insert(record.ts);
            last_ts = Some(record.ts);
            events += 1;
            progress.inc();
            writer
                .write(&record)
                .map_err(|e| write_error(&args.out, e))?;
        }
        writer.finish().map_err(|e| write_error(&args.out, e))?;
        Ok(())
    })?;
    drop(progress);
    let count = |c: Channel| channels.get(&c).copied().unwrap_or(0);
    let positives_in = |c: Channel| true_positives.get(&c).copied().unwrap_or(0);
    let report = json!({
        "events": events,
        "positive": count(Channel::Positive),
        "unlabeled": count(Channel::Unlabeled),
        "negative": count(Channel::Negative),
        "unlabeled_true_positive": positives_in(Channel::Unlabeled),
        "unlabeled_true_negative": count(Channel::Unlabeled) - positives_in(Channel::Unlabeled),
        "drifted": drifted,
        "first_ts": first_ts,
        "last_ts": last_ts,
        "out": args.out.display().to_string(),
    });
    match args.report {
        Some(ReportFormat::Json) => println!("{report}"),
        None => println!(
            "wrote {events} events ({} positive, {} unlabeled of which {} truly positive, {} negative) over {:.1} s -> {}",
            count(Channel::Positive),
            count(Channel::Unlabeled),
            positives_in(Channel::Unlabeled),
            count(Channel::Negative),
            (last_ts.unwrap_or(0) - first_ts.unwrap_or(0)) as f64 / 1000.0,
            args.out.display()
        ),
    }
    Ok(())
}
