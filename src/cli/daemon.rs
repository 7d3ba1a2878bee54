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
        return kafka_daemon(loaded, args.no_resume, args.threads);
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
    CliError::Daemon(e.to_string())
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

/// What every daemon shares, whatever its source.
struct Service {
    prometheus: prometheus::Registry,
    metrics: Metrics,
    store: ModelStore,
    registry: Arc<Registry>,
    admin_token: Option<crate::config::Secret>,
    cancel: Arc<AtomicBool>,
}

impl Service {
    fn new(config: &crate::config::Config) -> Result<Service, CliError> {
        let admin_token = admin_token(&config.http).map_err(|e| CliError::Usage(e.to_string()))?;
        let prometheus = prometheus::Registry::new();
        let metrics = Metrics::new(&prometheus).map_err(runtime_error)?;
        let store =
            ModelStore::open(&config.state.dir, config.state.keep_models).map_err(runtime_error)?;
        Ok(Service {
            prometheus,
            metrics,
            store,
            registry: Arc::new(Registry::new(config.state.keep_models)),
            admin_token,
            cancel: Arc::new(AtomicBool::new(false)),
        })
    }

    fn engine(
        &self,
        config: crate::config::Config,
        outputs: Box<dyn crate::engine::outputs::Outputs>,
        resume: bool,
    ) -> Result<Engine, CliError> {
        Engine::new(
            EngineParts {
                config,
                metrics: self.metrics.clone(),
                registry: Arc::clone(&self.registry),
                store: self.store.clone(),
                outputs,
                cancel: Arc::clone(&self.cancel),
            },
            resume,
        )
        .map_err(runtime_error)
    }

    fn app_state(self, http: &crate::config::HttpConfig, limits: EventLimits) -> AppState {
        AppState {
            registry: self.registry,
            store: Some(self.store),
            metrics: self.metrics,
            prometheus: self.prometheus,
            admin_token: self.admin_token,
            limits: HttpLimits::new(http, limits),
        }
    }
}

fn event_limits(config: &crate::config::Config) -> EventLimits {
    EventLimits {
        max_bytes: config.scoring.max_event_bytes,
        ..EventLimits::default()
    }
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .map_err(runtime_error)
}

/// Serves HTTP while `intake` runs on a blocking thread; SIGINT/SIGTERM set `stop` and
/// `cancel`. After the intake ends, keeps serving until a signal if `keep_serving`, then stops
/// the server, waiting at most `shutdown_timeout` for open requests.
async fn serve_while<F>(
    http: crate::config::HttpConfig,
    state: AppState,
    shutdown_timeout: Duration,
    keep_serving: bool,
    stop: Arc<AtomicBool>,
    cancel: Arc<AtomicBool>,
    intake: F,
) -> Result<(), CliError>
where
    F: FnOnce() -> Result<(), CliError> + Send + 'static,
{
    let listener = bind(&http.listen).await.map_err(runtime_error)?;
    let (stop_http, http_stopped) = tokio::sync::watch::channel(false);
    let mut wait_stop = http_stopped.clone();
    let server = tokio::spawn(serve(listener, state, async move {
        let _ = wait_stop.wait_for(|&stopped| stopped).await;
    }));
    let signalled = Arc::new(AtomicBool::new(false));
    let on_signal = {
        let (stop, signalled) = (Arc::clone(&stop), Arc::clone(&signalled));
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutdown requested: stopping intake, cancelling any retrain");
            signalled.store(true, Ordering::SeqCst);
            stop.store(true, Ordering::SeqCst);
            cancel.store(true, Ordering::SeqCst);
        })
    };
    let intake = tokio::task::spawn_blocking(intake);
    intake.await.map_err(runtime_error)??;
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
    let service = Service::new(&config)?;
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
    let stop = Arc::new(AtomicBool::new(false));
    let http = config.http.clone();
    let shutdown_timeout = config.log.shutdown_timeout.0;
    let limits = event_limits(&config);
    let engine = service.engine(config, Box::new(FileOutputs::new(scores, dlq)), !no_resume)?;
    let cancel = Arc::clone(&service.cancel);
    let state = service.app_state(&http, limits);
    let reader = RecordReader::open(&source).map_err(|e| CliError::file(&source, e))?;
    let intake = {
        let stop = Arc::clone(&stop);
        move || {
            let handled = replay_records(engine, reader, speed, &stop)?;
            tracing::info!(events = handled, "end of the recorded stream");
            Ok(())
        }
    };
    runtime(threads)?.block_on(serve_while(
        http,
        state,
        shutdown_timeout,
        keep_serving,
        stop,
        cancel,
        intake,
    ))
}

/// The daemon on Kafka ([`crate::engine::kafka`]): creates missing topics, joins the group,
/// and runs until SIGINT/SIGTERM, then drains (at most `log.shutdown_timeout` for outputs),
/// commits and leaves the group. `[source] path` and `[output]` are not used.
fn kafka_daemon(loaded: LoadedConfig, no_resume: bool, threads: usize) -> Result<(), CliError> {
    let config = loaded.config;
    let kafka = config
        .kafka
        .clone()
        .ok_or_else(|| CliError::Usage("source.kind = \"kafka\" needs a [kafka] section".into()))?;
    let service = Service::new(&config)?;
    let runtime = runtime(threads)?;
    let created = runtime.block_on(async {
        let admin = crate::stream::kafka::admin_client(&kafka)?;
        crate::stream::kafka::ensure_topics(&admin, &kafka).await
    })?;
    if !created.is_empty() {
        tracing::info!(topics = ?created, "created missing topics");
    }
    let (clients, outputs) = crate::engine::kafka::connect(&kafka, &service.metrics)?;
    let stop = Arc::new(AtomicBool::new(false));
    let http = config.http.clone();
    let shutdown_timeout = config.log.shutdown_timeout.0;
    let limits = event_limits(&config);
    let engine = service.engine(config, Box::new(outputs), !no_resume)?;
    let cancel = Arc::clone(&service.cancel);
    let metrics = service.metrics.clone();
    let state = service.app_state(&http, limits);
    let intake = {
        let stop = Arc::clone(&stop);
        move || {
            let summary =
                crate::engine::kafka::run(engine, clients, &metrics, &stop, shutdown_timeout)?;
            tracing::info!(
                handled = summary.handled,
                restored = summary.restored,
                unacknowledged = summary.unacknowledged,
                "kafka source stopped"
            );
            Ok(())
        }
    };
    runtime.block_on(serve_while(
        http,
        state,
        shutdown_timeout,
        false,
        stop,
        cancel,
        intake,
    ))
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
