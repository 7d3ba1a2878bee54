//! Running the service: the [`Engine`] fed from a recorded stream ([`replay`]), from Kafka
//! ([`kafka`]) or from events posted over HTTP ([`posted`]), the HTTP API beside it, and the
//! shutdown.
//!
//! [`run`] is the library entry the `run` and `replay` commands call: it builds what every
//! daemon shares (metrics on an injected registry, the model store, the registry of the active
//! model, the admin token), starts the HTTP API on `[http] listen` from start to exit, and
//! runs the source on a blocking thread until it ends or `shutdown` resolves. Then intake
//! stops, a retrain in flight is cancelled (counted as cancelled), the events still waiting for
//! a model are emitted as unscored, the sinks are flushed, and open HTTP requests get at most
//! `log.shutdown_timeout`. Accepted models are already on disk when they are installed.
//!
//! A recorded stream at `--speed max` (the default) uses event time as its only clock and
//! runs retrains inline, so the same input, config and empty state give byte-identical scores;
//! `realtime` and `xN` sleep between records by their event-time gaps. On Kafka, missing
//! topics are created, the group is joined, and at shutdown outputs are drained (at most
//! `log.shutdown_timeout`), offsets committed and the group left; `[source] path` and
//! `[output]` are not used. With `source.kind = "http"` the only input is
//! `POST /v1/events/{channel}`: live, with retrains on the training thread ([`trainer`]) and the
//! wall clock for `scoring.max_wait`, until `shutdown`. A replay takes posted events between
//! its records, a Kafka source produces them to its input topics. [`baseline`] runs a
//! replayed stream through the streaming baseline of `replay --baseline`. `[audit]`'s audits
//! run on their own thread ([`audit`]), never in the way of scoring or retrains; a shutdown
//! does not wait for one. Idle async workers return freed memory to the system ([`memory`]).

mod audit;
pub mod baseline;
pub mod kafka;
mod memory;
pub mod posted;
pub mod replay;
mod trainer;

use audit::AuditThread;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{admin_token, Config, HttpConfig, Secret};
use crate::engine::audit::AuditBoard;
use crate::engine::machine::{Engine, EngineConfig, EngineParts};
use crate::engine::outputs::Outputs;
use crate::engine::prequential::{Prequential, PrequentialReport};
use crate::engine::registry::Registry;
use crate::engine::store::ModelStore;
use crate::files::{ExclusiveLock, LockError};
use crate::serve::{bind, serve, AppState, EventsTarget, HttpLimits};
use crate::stream::EventLimits;
use crate::telemetry::Metrics;

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A configuration or option mistake (the command exits 2).
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error(transparent)]
    Kafka(#[from] crate::stream::kafka::KafkaError),
    #[error("kafka source: {0}")]
    KafkaRun(#[from] kafka::KafkaRunError),
    /// Anything else at run time: the engine, its sinks, the HTTP listener, the runtime.
    #[error("daemon: {0}")]
    Runtime(String),
}

impl DaemonError {
    fn file(path: &std::path::Path, message: impl std::fmt::Display) -> DaemonError {
        DaemonError::File {
            path: path.display().to_string(),
            message: message.to_string(),
        }
    }

    fn runtime(e: impl std::fmt::Display) -> DaemonError {
        DaemonError::Runtime(e.to_string())
    }
}

/// Where the events come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A recorded-stream file, in file order; `speed` is `None` for as fast as possible, else
    /// the factor on event-time gaps (1 = real time).
    Replay { path: PathBuf, speed: Option<f64> },
    /// The `[kafka]` topics.
    Kafka,
    /// Only the events posted to `POST /v1/events/{channel}`, until `shutdown`.
    Http,
}

/// How to run, besides the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub source: Source,
    /// Serve the newest stored model of this configuration at once.
    pub resume: bool,
    /// Keep answering HTTP after a recorded stream ends, until `shutdown`.
    pub keep_serving: bool,
    /// Worker threads of the async runtime (HTTP).
    pub threads: usize,
    /// A recorded stream only: account every score against the events' truth in blocks of
    /// this many unlabeled outputs ([`crate::engine::prequential`]); the result is
    /// [`Finished::report`].
    pub report_block: Option<usize>,
}

/// What [`run`] returns.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finished {
    pub summary: Summary,
    /// With [`Options::report_block`] on a recorded stream.
    pub report: Option<ReplayReport>,
}

/// A replay's prequential report (`neyman replay --report json`): the per-block accounting,
/// the run's summary, and the gate's rejections and the fresh thresholds by kind.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReplayReport {
    #[serde(flatten)]
    pub prequential: PrequentialReport,
    pub summary: Summary,
    /// Retrained models the gate refused, by reason (the reasons that occurred).
    pub rejections: BTreeMap<String, u64>,
    /// Fresh-threshold recalibrations by result.
    pub recalibrations: BTreeMap<String, u64>,
    /// Drift detections by signal.
    pub drift_detections: BTreeMap<String, u64>,
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Messages handled (scored, windowed or dead-lettered).
    pub handled: u64,
    /// Kafka: messages re-read after a restart that only rebuilt a window.
    pub restored: u64,
    /// Kafka: outputs still unacknowledged when the shutdown deadline passed (their input
    /// offsets were not committed, so they are read again by the next member).
    pub unacknowledged: usize,
    /// Events answered with a score, answered `"status": "unscored"`, and dead-lettered.
    pub scored: u64,
    pub unscored: u64,
    pub dead_lettered: u64,
    /// Retrains whose model was swapped in, refused by the gate, and failed.
    pub models_swapped: u64,
    pub models_rejected: u64,
    pub retrains_failed: u64,
}

impl Summary {
    /// This summary with the answers and retrains counted by `metrics` over the run (each run
    /// has its own registry, so the counters start at zero).
    fn with_counts(self, metrics: &Metrics) -> Summary {
        let family_sum = |family| label_counts(family).values().sum();
        let retrains = |result: &str| metrics.retrains.with_label_values(&[result]).get();
        Summary {
            scored: metrics.answers.with_label_values(&["scored"]).get(),
            unscored: family_sum(&metrics.unscored_events),
            dead_lettered: family_sum(&metrics.dlq),
            models_swapped: retrains("swapped"),
            models_rejected: retrains("rejected"),
            retrains_failed: retrains("failed"),
            ..self
        }
    }
}

/// The line every `run` and `replay` ends with.
impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} events: {} scored, {} unscored, {} dead-lettered; models: {} swapped in, {} \
             rejected by the gate, {} failed retrains",
            self.handled,
            self.scored,
            self.unscored,
            self.dead_lettered,
            self.models_swapped,
            self.models_rejected,
            self.retrains_failed
        )
    }
}

/// Runs the daemon until its source ends (and, with `keep_serving`, until `shutdown`) or
/// `shutdown` resolves; see the module docs.
pub fn run(
    config: Config,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Finished, DaemonError> {
    // The `[kafka]` section is checked before anything is created.
    let source = match options.source {
        Source::Replay { path, speed } => Input::Replay { path, speed },
        Source::Http => Input::Http,
        Source::Kafka => Input::Kafka(Box::new(config.kafka.clone().ok_or_else(|| {
            DaemonError::Usage("source.kind = \"kafka\" needs a [kafka] section".into())
        })?)),
    };
    // Held to the end of the run, and taken before the state directory is read or cleaned: a
    // second daemon on it would delete this one's models (it keeps only the newest
    // `state.keep_models`) and its files in flight.
    let _state_lock = lock_state_dir(&config.state.dir)?;
    let service = Service::new(&config)?;
    let metrics = service.metrics.clone();
    let runtime = runtime(options.threads)?;
    let http = config.http.clone();
    let shutdown_timeout = config.log.shutdown_timeout.0;
    let limits = EventLimits {
        max_bytes: config.scoring.max_event_bytes,
        max_features: config.scoring.max_features,
        ..EventLimits::default()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let cancel = Arc::clone(&service.cancel);
    let mut tracker = None;
    let (feed, posted) = crate::serve::event_feed();
    let mut events = EventsTarget::Engine(feed);
    let (intake, keep_serving): (Intake, bool) = match source {
        Input::Replay { path, speed } => {
            let files = replay::file_outputs(&config.output)?;
            tracker = options
                .report_block
                .map(|block| replay::Tracker::new(Prequential::new(block, config.model.tau)));
            let (writer, labels) = replay::writing_thread(files, tracker.clone())?;
            let mut engine = service.engine(&config, Box::new(writer), options.resume)?;
            engine.reads_a_recording();
            let reader = replay::open(&path)?;
            let stop = Arc::clone(&stop);
            let posted = replay::PostedEvents {
                feed: Some(posted),
                serve_after: options.keep_serving,
            };
            let intake =
                move || replay::run(engine, reader, speed, &stop, labels.as_ref(), &posted);
            (Box::new(intake), options.keep_serving)
        }
        Input::Http => {
            let outputs = Box::new(replay::file_outputs(&config.output)?);
            let engine = service.engine(&config, outputs, options.resume)?;
            let stop = Arc::clone(&stop);
            let intake = move || {
                let handled = posted::run(engine, &posted, &stop)?;
                Ok(Summary {
                    handled,
                    ..Summary::default()
                })
            };
            (Box::new(intake), false)
        }
        Input::Kafka(k) => {
            events = EventsTarget::Forward(Arc::new(kafka::ToTopics(
                crate::stream::kafka::EventProducer::new(&k)?,
            )));
            // Connecting runs behind the HTTP API (live, not ready), so a probe sees a live
            // process while the broker is awaited (`kafka.connect_timeout`).
            let admin = crate::stream::kafka::admin_client(&k)?;
            let make_engine = service.engine_maker(&config, options.resume);
            let metrics = service.metrics.clone();
            let stop = Arc::clone(&stop);
            let handle = runtime.handle().clone();
            let intake = move || {
                if !crate::stream::kafka::wait_for_broker(&admin, &k, &stop)? {
                    return Ok(Summary::default());
                }
                let created = handle.block_on(crate::stream::kafka::ensure_topics(&admin, &k))?;
                drop(admin);
                if !created.is_empty() {
                    tracing::info!(topics = ?created, "created missing topics");
                }
                let (clients, outputs) = kafka::connect(&k, &metrics)?;
                let engine = make_engine(Box::new(outputs))?;
                let summary = kafka::run(engine, clients, &metrics, &stop, shutdown_timeout)?;
                tracing::info!(
                    handled = summary.handled,
                    restored = summary.restored,
                    unacknowledged = summary.unacknowledged,
                    "kafka source stopped"
                );
                Ok(summary)
            };
            (Box::new(intake), false)
        }
    };
    let state = service.app_state(&http, limits, events);
    let served = runtime.block_on(serve_while(
        ServeWhile {
            http,
            state,
            shutdown_timeout,
            keep_serving,
            stop,
            cancel,
        },
        shutdown,
        intake,
    ));
    let summary = match served {
        Ok(summary) => summary.with_counts(&metrics),
        Err(e) => {
            // A failed run still ends with its line: what was handled and answered before.
            let handled = Summary {
                handled: intake_total(&metrics),
                ..Summary::default()
            };
            tracing::info!("{}", handled.with_counts(&metrics));
            return Err(e);
        }
    };
    tracing::info!("{summary}");
    let report = tracker.map(|t| ReplayReport {
        prequential: t.take().finish(),
        summary,
        rejections: label_counts(&metrics.retrain_rejections),
        recalibrations: label_counts(&metrics.recalibrations),
        drift_detections: label_counts(&metrics.drift_detected),
    });
    Ok(Finished { summary, report })
}

/// Events handled by the intake (every outcome but `restored`, which re-reads).
fn intake_total(metrics: &Metrics) -> u64 {
    crate::telemetry::CHANNELS
        .iter()
        .flat_map(|channel| {
            crate::telemetry::INTAKE_OUTCOMES
                .iter()
                .filter(|o| **o != "restored")
                .map(move |o| metrics.intake_events.with_label_values(&[channel, o]).get())
        })
        .sum()
}

/// A counter family's values by its one label.
fn label_counts(family: &prometheus::IntCounterVec) -> BTreeMap<String, u64> {
    use prometheus::core::Collector;
    family
        .collect()
        .iter()
        .flat_map(|f| f.get_metric())
        .filter_map(|m| {
            let label = m.get_label().first()?.value().to_string();
            Some((label, m.get_counter().get_value() as u64))
        })
        .collect()
}

/// Resolves on SIGINT or SIGTERM: the `shutdown` of the commands.
pub async fn shutdown_signal() {
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

/// A [`Source`] with what it needs from the configuration.
enum Input {
    Replay { path: PathBuf, speed: Option<f64> },
    Kafka(Box<crate::config::KafkaConfig>),
    Http,
}

/// A source's loop, run on a blocking thread.
type Intake = Box<dyn FnOnce() -> Result<Summary, DaemonError> + Send + 'static>;

/// What every daemon shares, whatever its source.
struct Service {
    prometheus: prometheus::Registry,
    metrics: Metrics,
    store: ModelStore,
    registry: Arc<Registry>,
    admin_token: Option<Secret>,
    cancel: Arc<AtomicBool>,
    /// The last audit, when `[audit]` is configured.
    audit: Option<AuditBoard>,
}

impl Service {
    fn new(config: &Config) -> Result<Service, DaemonError> {
        let admin_token =
            admin_token(&config.http).map_err(|e| DaemonError::Usage(e.to_string()))?;
        let prometheus = prometheus::Registry::new();
        let metrics = Metrics::new(&prometheus).map_err(DaemonError::runtime)?;
        let store = ModelStore::open(&config.state.dir, config.state.keep_models)
            .map_err(|e| DaemonError::Usage(format!("state.dir: {e}")))?;
        for path in store.remove_orphans().map_err(DaemonError::runtime)? {
            tracing::info!(file = %path.display(), "removed the temporary file of an interrupted write");
        }
        Ok(Service {
            prometheus,
            metrics,
            store,
            registry: Arc::new(Registry::new(config.state.keep_models)),
            admin_token,
            cancel: Arc::new(AtomicBool::new(false)),
            audit: config.audit.as_ref().map(|_| AuditBoard::default()),
        })
    }

    fn engine(
        &self,
        config: &Config,
        outputs: Box<dyn Outputs>,
        resume: bool,
    ) -> Result<Engine, DaemonError> {
        self.engine_maker(config, resume)(outputs)
    }

    /// Makes the engine later, on the intake's thread, once its outputs exist (Kafka's need
    /// a connected broker).
    fn engine_maker(
        &self,
        config: &Config,
        resume: bool,
    ) -> impl FnOnce(Box<dyn Outputs>) -> Result<Engine, DaemonError> + Send + 'static {
        let config = EngineConfig::of(config);
        let metrics = self.metrics.clone();
        let registry = Arc::clone(&self.registry);
        let store = self.store.clone();
        let cancel = Arc::clone(&self.cancel);
        let auditor = self
            .audit
            .clone()
            .map(|board| AuditThread::new(board, self.metrics.clone(), Arc::clone(&self.cancel)));
        move |outputs| {
            let mut engine = Engine::new(
                EngineParts {
                    config,
                    metrics,
                    registry,
                    store,
                    outputs,
                    cancel,
                },
                resume,
            )
            .map_err(DaemonError::runtime)?;
            if let Some(auditor) = auditor {
                engine.set_auditor(Box::new(auditor));
            }
            Ok(engine)
        }
    }

    fn app_state(self, http: &HttpConfig, limits: EventLimits, events: EventsTarget) -> AppState {
        AppState {
            registry: self.registry,
            store: Some(self.store),
            metrics: self.metrics,
            prometheus: self.prometheus,
            admin_token: self.admin_token,
            limits: HttpLimits::new(http, limits),
            events,
            audit: self.audit,
        }
    }
}

/// The exclusive lock on `dir`'s `lock` file; held by another process, a usage error (exit 2)
/// that names its pid.
fn lock_state_dir(dir: &std::path::Path) -> Result<ExclusiveLock, DaemonError> {
    std::fs::create_dir_all(dir).map_err(|e| DaemonError::file(dir, e))?;
    ExclusiveLock::take(&dir.join("lock")).map_err(|e| match e {
        LockError::Held { holder, .. } => DaemonError::Usage(format!(
            "state.dir {}: in use by another neyman (pid {holder}); give each daemon its own \
             state directory",
            dir.display()
        )),
        e @ LockError::Io { .. } => DaemonError::runtime(e),
    })
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, DaemonError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .on_thread_park(memory::on_park)
        .enable_all()
        .build()
        .map_err(DaemonError::runtime)?;
    runtime.spawn(memory::sweep());
    Ok(runtime)
}

/// The HTTP side of a run and the flags that stop its intake.
struct ServeWhile {
    http: HttpConfig,
    state: AppState,
    shutdown_timeout: Duration,
    keep_serving: bool,
    /// Read by the intake: stop taking input.
    stop: Arc<AtomicBool>,
    /// Read by the engine: cancel a retrain in flight.
    cancel: Arc<AtomicBool>,
}

/// Serves HTTP while `intake` runs on a blocking thread; `shutdown` sets `stop` and `cancel`.
/// After the intake ends, keeps serving until `shutdown` if `keep_serving`, then stops the
/// server, waiting at most `shutdown_timeout` for open requests.
async fn serve_while(
    serving: ServeWhile,
    shutdown: impl Future<Output = ()> + Send + 'static,
    intake: Intake,
) -> Result<Summary, DaemonError> {
    let listener = bind(&serving.http.listen)
        .await
        .map_err(DaemonError::runtime)?;
    let (stop_http, http_stopped) = tokio::sync::watch::channel(false);
    let mut wait_stop = http_stopped.clone();
    let server = tokio::spawn(serve(listener, serving.state, async move {
        let _ = wait_stop.wait_for(|&stopped| stopped).await;
    }));
    let signalled = Arc::new(AtomicBool::new(false));
    let on_signal = {
        let (stop, cancel, signalled) = (
            Arc::clone(&serving.stop),
            Arc::clone(&serving.cancel),
            Arc::clone(&signalled),
        );
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutdown requested: stopping intake, cancelling any retrain");
            signalled.store(true, Ordering::SeqCst);
            stop.store(true, Ordering::SeqCst);
            cancel.store(true, Ordering::SeqCst);
        })
    };
    let intake = tokio::task::spawn_blocking(intake);
    let summary = intake.await.map_err(DaemonError::runtime)??;
    if serving.keep_serving && !signalled.load(Ordering::SeqCst) {
        tracing::info!("still serving HTTP; SIGINT or SIGTERM stops");
        let _ = on_signal.await;
    } else {
        on_signal.abort();
    }
    let _ = stop_http.send(true);
    match tokio::time::timeout(serving.shutdown_timeout, server).await {
        Ok(joined) => joined
            .map_err(DaemonError::runtime)?
            .map_err(DaemonError::runtime)?,
        Err(_) => tracing::warn!(
            seconds = serving.shutdown_timeout.as_secs_f64(),
            "HTTP requests still open at log.shutdown_timeout; exiting anyway"
        ),
    }
    Ok(summary)
}
