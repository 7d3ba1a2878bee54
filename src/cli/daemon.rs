//! `neyman run` and `neyman replay`: the daemon on a recorded stream.
//!
//! `run --config FILE` replays the config's `[source] path`; `replay FILE --config FILE`
//! replays FILE instead. Both feed every record, in file order, to the
//! [`crate::engine::daemon::Engine`]. At `--speed max` (the default) event time is the only
//! clock and retrains run inline, so the same input, config and empty state give byte-identical
//! scores; `realtime` and `xN` sleep between records by their event-time gaps.
//!
//! The HTTP API (`[http] listen`) serves from start to exit, on the same registry the replay
//! installs models into. `run` keeps serving after the stream ends; `replay` exits at the end of
//! input unless `--keep-serving`. SIGINT/SIGTERM stop intake, cancel a retrain in flight (counted
//! as cancelled), emit the events still waiting for a model as unscored, flush the sinks and exit
//! 0, waiting at most `log.shutdown_timeout` for open HTTP requests. Accepted models are already
//! on disk when they are installed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::args::{ReplayArgs, RunArgs};
use super::CliError;
use crate::config::{admin_token, parse_speed, LoadedConfig, SourceKind};
use crate::engine::daemon::{Engine, EngineParts};
use crate::engine::outputs::FileOutputs;
use crate::engine::registry::Registry;
use crate::engine::store::ModelStore;
use crate::serve::{bind, serve, AppState, HttpLimits};
use crate::stream::dlq::DlqWriter;
use crate::stream::record::RecordReader;
use crate::stream::EventLimits;
use crate::telemetry::Metrics;

/// Loads and checks the configuration (exit 2 on any problem).
pub fn load_config(path: &Path) -> Result<LoadedConfig, CliError> {
    LoadedConfig::load(path).map_err(|e| CliError::Usage(e.to_string()))
}

pub fn run(args: &RunArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    if loaded.config.source.kind == SourceKind::Kafka {
        return Err(CliError::Usage(
            "source.kind = \"kafka\": the Kafka source is not implemented yet; use kind = \"replay\" \
             or `neyman replay FILE` (and `neyman record` to capture the topics into a FILE)"
                .into(),
        ));
    }
    let source = loaded
        .config
        .source
        .path
        .clone()
        .ok_or_else(|| CliError::Usage("source.path: required for kind = \"replay\"".into()))?;
    // `run` is the service: it keeps answering HTTP after the recorded stream ends.
    daemon(
        loaded,
        source,
        args.speed.clone(),
        args.no_resume,
        true,
        args.threads,
    )
}

pub fn replay(args: &ReplayArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    if args.to_kafka {
        return super::kafka::replay_to_kafka(args, loaded);
    }
    daemon(
        loaded,
        args.file.clone(),
        args.speed.clone(),
        args.no_resume,
        args.keep_serving,
        args.threads,
    )
}

fn runtime_error(e: impl std::fmt::Display) -> CliError {
    CliError::Training(e.to_string())
}

/// Resolves on SIGINT or SIGTERM.
pub(super) async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

fn daemon(
    loaded: LoadedConfig,
    source: PathBuf,
    speed: Option<String>,
    no_resume: bool,
    keep_serving: bool,
    threads: usize,
) -> Result<(), CliError> {
    let config = loaded.config;
    let speed_text = speed.unwrap_or_else(|| config.source.speed.clone());
    let speed = parse_speed(&speed_text).ok_or_else(|| {
        CliError::Usage(format!(
            "--speed {speed_text:?}: use max, realtime or xN (N > 0)"
        ))
    })?;
    let admin_token = admin_token(&config.http).map_err(|e| CliError::Usage(e.to_string()))?;
    let prometheus = prometheus::Registry::new();
    let metrics = Metrics::new(&prometheus).map_err(runtime_error)?;
    let store =
        ModelStore::open(&config.state.dir, config.state.keep_models).map_err(runtime_error)?;
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
    let stop = Arc::new(AtomicBool::new(false));
    let http = config.http.clone();
    let shutdown_timeout = config.log.shutdown_timeout.0;
    let event_limits = EventLimits {
        max_bytes: config.scoring.max_event_bytes,
        ..EventLimits::default()
    };
    let state = AppState {
        registry: Arc::clone(&registry),
        store: Some(store.clone()),
        metrics: metrics.clone(),
        prometheus,
        admin_token,
        limits: HttpLimits::new(&http, event_limits),
    };
    let engine = Engine::new(
        EngineParts {
            config,
            metrics,
            registry,
            store,
            outputs: Box::new(FileOutputs::new(scores, dlq)),
            cancel: Arc::clone(&cancel),
        },
        !no_resume,
    )
    .map_err(runtime_error)?;
    let reader = RecordReader::open(&source).map_err(|e| CliError::file(&source, e))?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .map_err(runtime_error)?;
    runtime.block_on(async move {
        let listener = bind(&http.listen).await.map_err(runtime_error)?;
        let (stop_http, http_stopped) = tokio::sync::watch::channel(false);
        let mut wait_stop = http_stopped.clone();
        let server = tokio::spawn(serve(listener, state, async move {
            let _ = wait_stop.wait_for(|&stopped| stopped).await;
        }));
        let signalled = Arc::new(AtomicBool::new(false));
        let on_signal = {
            let (stop, cancel, signalled) = (
                Arc::clone(&stop),
                Arc::clone(&cancel),
                Arc::clone(&signalled),
            );
            tokio::spawn(async move {
                shutdown_signal().await;
                tracing::info!("shutdown requested: stopping intake, cancelling any retrain");
                signalled.store(true, Ordering::SeqCst);
                stop.store(true, Ordering::SeqCst);
                cancel.store(true, Ordering::SeqCst);
            })
        };
        let intake = {
            let stop = Arc::clone(&stop);
            tokio::task::spawn_blocking(move || replay_records(engine, reader, speed, &stop))
        };
        let handled = intake.await.map_err(runtime_error)??;
        tracing::info!(events = handled, "end of the recorded stream");
        if keep_serving && !signalled.load(Ordering::SeqCst) {
            tracing::info!("still serving HTTP; SIGINT or SIGTERM stops");
            let _ = on_signal.await;
        } else {
            on_signal.abort();
        }
        let _ = stop_http.send(true);
        match tokio::time::timeout(shutdown_timeout, server).await {
            Ok(joined) => joined.map_err(runtime_error)?.map_err(runtime_error)?,
            Err(_) => tracing::warn!(
                seconds = shutdown_timeout.as_secs_f64(),
                "HTTP requests still open at log.shutdown_timeout; exiting anyway"
            ),
        }
        Ok(())
    })
}

/// Feeds every record to the engine until the end of input or `stop`; then emits what still
/// waits for a model as unscored and flushes the sinks. Returns the records handled.
fn replay_records(
    mut engine: Engine,
    reader: RecordReader,
    speed: Option<f64>,
    stop: &AtomicBool,
) -> Result<u64, CliError> {
    let started = Instant::now();
    let mut first_ts = None;
    let mut handled = 0u64;
    for record in reader {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let record = record.map_err(runtime_error)?;
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
            }
        }
        engine.handle(&record).map_err(runtime_error)?;
        handled += 1;
    }
    engine.finish().map_err(runtime_error)?;
    Ok(handled)
}
