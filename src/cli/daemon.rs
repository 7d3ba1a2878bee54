//! `neyman run` and `neyman replay`: the daemon on a recorded stream.
//!
//! `run --config FILE` replays the config's `[source] path`; `replay FILE --config FILE`
//! replays FILE instead. Both feed every record, in file order, to the
//! [`crate::engine::daemon::Engine`]. At `--speed max` (the default) event time is the only
//! clock and retrains run inline, so the same input, config and empty state give byte-identical
//! scores; `realtime` and `xN` sleep between records by their event-time gaps.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::args::{ReplayArgs, RunArgs};
use super::CliError;
use crate::config::{parse_speed, LoadedConfig};
use crate::engine::daemon::{Engine, EngineParts};
use crate::engine::registry::Registry;
use crate::engine::store::ModelStore;
use crate::stream::dlq::DlqWriter;
use crate::stream::record::RecordReader;
use crate::telemetry::Metrics;

/// Loads and checks the configuration (exit 2 on any problem).
pub fn load_config(path: &Path) -> Result<LoadedConfig, CliError> {
    LoadedConfig::load(path).map_err(|e| CliError::Usage(e.to_string()))
}

pub fn run(args: &RunArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    let source = loaded
        .config
        .source
        .path
        .clone()
        .ok_or_else(|| CliError::Usage("source.path: required for kind = \"replay\"".into()))?;
    daemon(loaded, &source, args.speed.as_deref(), args.no_resume)
}

pub fn replay(args: &ReplayArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    daemon(loaded, &args.file, args.speed.as_deref(), args.no_resume)
}

fn daemon(
    loaded: LoadedConfig,
    source: &Path,
    speed: Option<&str>,
    no_resume: bool,
) -> Result<(), CliError> {
    let config = loaded.config;
    let speed_text = speed.unwrap_or(&config.source.speed).to_string();
    let speed = parse_speed(&speed_text).ok_or_else(|| {
        CliError::Usage(format!(
            "--speed {speed_text:?}: use max, realtime or xN (N > 0)"
        ))
    })?;
    let prometheus = prometheus::Registry::new();
    let metrics =
        Metrics::new(&prometheus).map_err(|e| CliError::Training(format!("metrics: {e}")))?;
    let store = ModelStore::open(&config.state.dir, config.state.keep_models)
        .map_err(|e| CliError::Training(e.to_string()))?;
    let scores: Box<dyn Write + Send> = if config.output.scores.as_os_str() == "-" {
        Box::new(std::io::BufWriter::new(std::io::stdout()))
    } else {
        let path = &config.output.scores;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| CliError::file(dir, e))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| CliError::file(path, e))?;
        Box::new(std::io::BufWriter::new(file))
    };
    if let Some(dir) = config.output.dlq.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CliError::file(dir, e))?;
    }
    let dlq =
        DlqWriter::open(&config.output.dlq).map_err(|e| CliError::file(&config.output.dlq, e))?;
    let registry = Arc::new(Registry::new(config.state.keep_models));
    let cancel = Arc::new(AtomicBool::new(false));
    let mut engine = Engine::new(
        EngineParts {
            config,
            metrics,
            registry,
            store,
            scores,
            dlq,
            cancel,
        },
        !no_resume,
    )
    .map_err(|e| CliError::Training(e.to_string()))?;

    let reader = RecordReader::open(source).map_err(|e| CliError::file(source, e))?;
    let started = Instant::now();
    let mut first_ts = None;
    let mut handled = 0u64;
    for record in reader {
        let record = record.map_err(|e| CliError::Training(e.to_string()))?;
        if let Some(factor) = speed {
            let first = *first_ts.get_or_insert(record.ts);
            let due = Duration::from_secs_f64(
                (record.ts.saturating_sub(first)).max(0) as f64 / 1000.0 / factor,
            );
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        engine
            .handle(&record)
            .map_err(|e| CliError::Training(e.to_string()))?;
        handled += 1;
    }
    engine
        .finish()
        .map_err(|e| CliError::Training(e.to_string()))?;
    tracing::info!(
        events = handled,
        seconds = started.elapsed().as_secs_f64(),
        "end of the recorded stream"
    );
    Ok(())
}
