//! The daemon's event loop, source-independent: intake validation, windows, retrain trigger,
//! training with warm start, the gate, the atomic swap, scoring and the sinks.
//!
//! [`Engine::handle`] takes one message at a time, in arrival order. In this synchronous form a
//! retrain triggered by event i completes (gate included) before event i+1 is handled, which is
//! what makes a `--speed max` replay reproducible byte for byte: event time is the only clock
//! (`trained_at` is the newest event time in the windows), every random choice is seeded from
//! `[model] seed`, and nothing iterates a hash map into arithmetic or output.
//!
//! Choices where the spec is silent (also in the README):
//! - Calibration events stay in the windows but never train the snapshot's model: with
//!   `model.calibration = "hash"` the ids with `fnv1a64(id) mod 100 < calibration_percent`
//!   (the same events for every model), with `"recent"` the newest `calibration_percent` % of
//!   each channel in the snapshot (by event time, ties by id). USMO calibrates `umbrella` on
//!   every negative, since it never trains on them.
//! - The scaler is fitted on the first training snapshot's training events (never the held-out
//!   ones that calibrate) and kept while training warm-starts, because a warm start needs every
//!   kept id to keep its features; a cold start (first model, or after a restart without a
//!   resumable model) fits it anew.
//! - An id seen on several channels trains with its labelled channel (positive, then negative);
//!   its unlabeled copy is left out of the snapshot.
//! - Negatives join training (τ-FPL positive vs negative) and make `umbrella` the default
//!   threshold only when the negative window holds `retrain.min_negative` events; otherwise
//!   τ-FPL trains positive vs unlabeled and the threshold is `pu-umbrella`.
//! - The gate's NP-score comparison uses the held-out events newer than the active model's
//!   training time; it is skipped (and says so in the log) when they hold no positive, or
//!   neither a negative nor a prior to estimate the FPR from.
//! - An unlabeled event waits for a first accepted model from the engine's clock when it
//!   arrived (the newest event time seen, not its own `ts`, so a late event is not emitted the
//!   moment it arrives). The waits are checked once a message has been handled, before a
//!   retrain it triggers: an event whose `scoring.max_wait` has passed is emitted unscored
//!   even if that retrain would have scored it. Wall-clock waits start at the first
//!   [`Engine::tick`] after the arrival.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::codec::fnv1a64;
use crate::config::{
    AuditConfig, CalibrationName, Config, DriftConfig, GateConfig, ModelConfig, RecalibrateConfig,
    RetrainConfig, Role, ScoringConfig, ThresholdName, WindowsConfig,
};
use crate::data::{Dataset, Label, Rows, Scaler};
use crate::engine::audit::{draw_sample, AuditJob, AuditRunner};
use crate::engine::drift::{Detection, FeatureDetection, FeatureDrift, ScoreDrift};
use crate::engine::outputs::{Origin, OutputError, Outputs};
use crate::engine::registry::Registry;
use crate::engine::scoring::{prescore, score_one_with, Prescore, ScoreOutput, UnscoredReason};
use crate::engine::store::{
    trained_under, EngineState, ModelStore, Skipped, StoreError, StoredModel,
};
use crate::engine::window::{
    in_calibration, newest_held_out, Entry, Evicted, InsertOutcome, Window, WindowConfig,
};
use crate::engine::window_scores::{Remembered, WindowScores};
use crate::learn::calibrate::CalibrateError;
use crate::learn::kernel::KernelExpansion;
use crate::learn::metrics::np_score;
use crate::learn::model::{Fingerprint, Model, Provenance};
use crate::learn::prior::{resolve_training_prior, PriorBounds};
use crate::learn::rank_tau::RankChoice;
use crate::learn::spec::{fit_of, model_of, Algorithm, AlgorithmSpec, Fit, LearnerSpec};
use crate::learn::threshold::{binomial_upper_tail, umbrella, ThresholdMethod, ThresholdResult};
use crate::learn::Scorer;
use crate::stream::dlq::{DlqRecord, UnreadableLine};
use crate::stream::event::{
    features_to_rows, parse_event, Event, EventLimits, Features, RejectReason, Rejection,
};
use crate::stream::record::{now_ms, Record};
use crate::stream::Channel;
use crate::telemetry::{Answer, EventOutcome, Intake, Metrics, ANSWER_OUTCOMES, INTAKE_OUTCOMES};

/// A valid event held until the dimension is locked (`scoring.dimension_quorum`).
struct Held {
    record: Record,
    headers: Vec<(String, String)>,
    /// Its feature count: its vote.
    dim: usize,
}

/// Feedback and unlabeled outcomes remembered for the observed-FPR and flag-rate gauges.
const ROLLING_EVENTS: usize = 1000;
/// `neyman_scoring_latency_seconds` times one scored stream event in this many: two clock
/// reads per event were 3 % of the Kafka poll thread (perf, `bench kafka`), and a regular
/// sample keeps the histogram's quantiles.
const LATENCY_SAMPLE_EVERY: u32 = 16;

/// The shortest time between two writes of the active model's fresh threshold.
const THRESHOLD_SAVE_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("configuration: {0}")]
    Config(String),
}

/// Why a retrained model was not installed; the snake_case name is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateReason {
    NonFinite,
    NoThreshold,
    FprBound,
    OobEstimate,
    NpScore,
    /// The model gives every event the same score: it cannot rank, whatever its threshold.
    ConstantScores,
    /// The threshold flags none of the calibration positives (TPR estimate 0).
    FlagsNothing,
    /// The solver reports a degenerate solution: no gain over a constant scorer (τ-FPL with
    /// P(w) = 1, a ranking depth too shallow for the data).
    NoGain,
}

impl GateReason {
    pub fn as_str(self) -> &'static str {
        match self {
            GateReason::NonFinite => "non_finite",
            GateReason::NoThreshold => "no_threshold",
            GateReason::FprBound => "fpr_bound",
            GateReason::OobEstimate => "oob_estimate",
            GateReason::NpScore => "np_score",
            GateReason::ConstantScores => "constant_scores",
            GateReason::FlagsNothing => "flags_nothing",
            GateReason::NoGain => "no_gain",
        }
    }
}

/// What became of one event handed to [`Engine::handle_answered`].
#[derive(Debug, Clone, PartialEq)]
pub enum Taken {
    /// Taken in: scored, windowed, held for the dimension quorum, or a duplicate id.
    Accepted,
    /// Written to the dead-letter output, for this reason.
    DeadLettered(Rejection),
}

/// How one retrain ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RetrainOutcome {
    Swapped {
        version: u64,
    },
    Rejected {
        reason: GateReason,
        detail: String,
    },
    Failed {
        detail: String,
    },
    /// `retrain.time_limit` ran out and the retrain was stopped.
    TimedOut {
        limit: Duration,
    },
    Cancelled,
}

/// Why a retrain is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// The first one, `retrain.every_events` / `every`, or an early retrain.
    Scheduled,
    /// No model yet: `retrain.first_model_retry_events` since the last attempt.
    FirstModelRetry,
    /// No model yet, events have waited half of `scoring.max_wait` on the wall clock and the
    /// windows grew since the last attempt ([`Engine::tick`]: live sources only).
    WaitingRetry,
}

/// An unlabeled event waiting for a first accepted model.
struct Waiting {
    event: Event,
    origin: Option<Origin>,
    /// The engine's event-time clock when it arrived.
    arrived_ts: i64,
    /// The first [`Engine::tick`] after it arrived (live sources); `None` before one.
    seen_at: Option<Instant>,
}

/// The training state carried between retrains.
struct Learner {
    scaler: Scaler,
    /// The last finite solution, accepted or rejected: the next warm start.
    previous: Option<Fit>,
    /// τ-FPL's last `auto` ranking depth, kept while it pays; `None`: search on the next
    /// retrain.
    rank: Option<RankMemory>,
    /// Retrains prepared so far: every `model.cuts3vm.cold_every`-th starts cold.
    retrains: usize,
}

/// A ranking depth and R chosen by a search ([`crate::learn::rank_tau`]) and what they gave.
#[derive(Debug, Clone, Copy)]
struct RankMemory {
    rank_tau: f64,
    reg: f64,
    /// The threshold's TPR estimate of the model trained right after the search, and the
    /// positives it is a share of.
    tpr_at_choice: Option<(f64, usize)>,
    /// Retrains that reused it since.
    reused: usize,
    /// The training snapshot's rows at the search.
    rows_at_choice: usize,
}

impl RankMemory {
    /// A kept depth is searched again after this many retrains, whatever they gave: the
    /// data's best depth can move without any single retrain showing it.
    const REUSE_LIMIT: usize = 20;
    /// A TPR drop smaller than this is not worth a search, however sure: a search costs
    /// 8–12 fits.
    const TPR_DROP: f64 = 0.05;
    /// The one-sided normal quantile of the drop test, Φ⁻¹(1 − 0.05/20): a kept choice is
    /// tested on each of its up to [`RankMemory::REUSE_LIMIT`] retrains, so a 5 % chance of
    /// a search on noise alone over a choice's life (Bonferroni) asks for 0.25 % per test.
    const DROP_Z: f64 = 2.807;
    /// A search is redone once the training snapshot holds this many times the rows it was
    /// made on: the first search runs on the first model's few rows (validation TPRs of a
    /// few dozen positives), and a choice made there would otherwise last 20 retrains.
    const GROWTH: usize = 2;

    /// Whether a retrain on `rows` training rows reuses this choice.
    fn reusable(&self, rows: usize) -> bool {
        self.reused < Self::REUSE_LIMIT && rows < Self::GROWTH.saturating_mul(self.rows_at_choice)
    }

    /// Whether a TPR estimate of `now` = (share, positives) fell below `then`'s beyond both
    /// its sampling noise and [`RankMemory::TPR_DROP`]: `then − now > max(TPR_DROP, z·se)`,
    /// with se the pooled two-proportion standard error
    /// √(p̄(1 − p̄)(1/n₁ + 1/n₂)) and z = [`RankMemory::DROP_Z`]. A fixed 0.05 alone fires on
    /// noise when the estimates rest on few positives: at TPR 0.85 on 300 positives each, two
    /// draws of the same model differ by more than 0.05 once in 23 retrains (se 0.029). From
    /// about 800 positives each on, z·se < 0.05 and the floor decides.
    fn dropped(then: (f64, usize), now: (f64, usize)) -> bool {
        let ((p1, n1), (p2, n2)) = (then, now);
        if n1 == 0 || n2 == 0 {
            return false;
        }
        let (n1, n2) = (n1 as f64, n2 as f64);
        let pooled = (p1 * n1 + p2 * n2) / (n1 + n2);
        let se = (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt();
        p1 - p2 > Self::TPR_DROP.max(Self::DROP_Z * se)
    }
}

/// The configuration sections the engine reads.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub windows: WindowsConfig,
    pub retrain: RetrainConfig,
    pub model: ModelConfig,
    pub gate: GateConfig,
    pub recalibrate: RecalibrateConfig,
    pub drift: DriftConfig,
    pub scoring: ScoringConfig,
    /// Accepted models remembered for rollback (`state.keep_models`).
    pub keep_models: usize,
    /// The background audit; `None`: none.
    pub audit: Option<AuditConfig>,
}

impl EngineConfig {
    pub fn of(config: &Config) -> EngineConfig {
        EngineConfig {
            windows: config.windows.clone(),
            retrain: config.retrain.clone(),
            model: config.model.clone(),
            gate: config.gate.clone(),
            recalibrate: config.recalibrate.clone(),
            drift: config.drift.clone(),
            scoring: config.scoring.clone(),
            keep_models: config.state.keep_models,
            audit: config.audit.clone(),
        }
    }
}

/// What an engine is built from.
pub struct EngineParts {
    pub config: EngineConfig,
    pub metrics: Metrics,
    /// Shared with the HTTP API, which scores with the same active model.
    pub registry: Arc<Registry>,
    pub store: ModelStore,
    /// Where scores and dead letters go.
    pub outputs: Box<dyn Outputs>,
    /// Set on shutdown: an in-flight retrain stops and is counted as cancelled.
    pub cancel: Arc<AtomicBool>,
}

/// The daemon's state machine; see the module docs.
pub struct Engine {
    config: EngineConfig,
    metrics: Metrics,
    registry: Arc<Registry>,
    store: ModelStore,
    windows: [Window; 3],
    limits: EventLimits,
    dim: Option<usize>,
    /// Valid events held until `scoring.dimension_quorum` of them agree on the dimension.
    unlocked: VecDeque<Held>,
    /// When the oldest held event was first seen by a [`Engine::tick`] (wall clock): after
    /// `scoring.max_wait` the most common dimension locks, so a quiet stream is answered.
    held_since: Option<Instant>,
    /// Unlabeled events waiting for a first model, in arrival order.
    pending: VecDeque<Waiting>,
    /// `scoring.max_wait` in event-time milliseconds.
    max_wait_ms: i64,
    /// `windows.max_future` in milliseconds.
    max_future_ms: i64,
    new_window_events: u64,
    /// The score of the event being handled, computed ahead ([`Engine::handle_preparsed`]).
    prescore: Option<Prescore>,
    /// While no model is active: the new window events after which a retrain that installed
    /// nothing is retried (`retrain.first_model_retry_events`, doubled per retry).
    first_model_retry: u64,
    /// New window events since the last retrain of any kind; `new_window_events` counts
    /// from the last scheduled one, so retries do not move the schedule.
    events_since_attempt: u64,
    /// Evicted window events kept for the caller ([`Engine::keep_evicted`]).
    evicted_bin: Option<Vec<Evicted>>,
    /// Set by [`Engine::tick`]: a retry for the events waiting for a first model is due.
    waiting_retry: bool,
    /// When the last such retry was asked for: at most one per half `scoring.max_wait`.
    waiting_retry_at: Option<Instant>,
    /// New negative-feedback events since the active model's threshold was last calibrated.
    negatives_since_calibration: usize,
    /// New labelled positives since then (they drive a pu-umbrella model's fresh thresholds).
    positives_since_calibration: usize,
    /// A fresh threshold flagged none of the fresh positives: retrain as soon as the windows
    /// allow, without waiting for the schedule.
    early_retrain: bool,
    /// The drift detector on the active model's unlabeled scores (`None`: `drift.enabled`
    /// is false).
    drift: Option<ScoreDrift>,
    /// The detector on the unlabeled events' feature means (`None`: `drift.enabled` or
    /// `drift.features` off).
    feature_drift: Option<FeatureDrift>,
    /// A drift was detected and neither a swap nor a fresh threshold followed yet.
    certificate_stale: bool,
    /// New negative-feedback events since the last `feedback` drift test.
    feedback_since_test: usize,
    /// After a detection: fresh thresholds use only events from this event time on, the
    /// change's start as the detection saw it. Persisted in the state directory
    /// ([`EngineState`]) and resumed.
    calibration_since: Option<i64>,
    /// The active model's scores of window events, for fresh thresholds and the feedback test.
    window_scores: WindowScores,
    last_retrain_ts: Option<i64>,
    newest_ts: Option<i64>,
    /// The source is a recording read from its start ([`Engine::reads_a_recording`]).
    reads_a_recording: bool,
    learner: Option<Learner>,
    /// With `model.calibration = "recent"`, the ids each model this engine trained held out
    /// (which one is recent differs per snapshot), for the models the registry still
    /// remembers (a rollback reinstates an older one), by version: at most
    /// `calibration_percent` % of the windows per model. Persisted beside each model
    /// ([`ModelStore::save_held_out`]) and resumed with it; a model whose file is missing has
    /// none, and [`Engine::unseen`] then counts only the events newer than its snapshot as
    /// unseen (its held-out events count as seen, so they never calibrate a fresh threshold
    /// or test the feedback) until the next swap.
    recent_held_out: BTreeMap<u64, HeldOutIds>,
    feedback: Rolling,
    recent_flags: Rolling,
    /// The active model's fresh threshold is newer than its file beside the model
    /// ([`ModelStore::save_threshold`]); written at most every [`THRESHOLD_SAVE_EVERY`].
    threshold_unsaved: bool,
    threshold_saved_at: Option<Instant>,
    /// Scored events since the last timed one ([`LATENCY_SAMPLE_EVERY`]).
    untimed_scores: u32,
    /// `neyman_events_total` handles by channel and outcome, resolved once: a label lookup
    /// per event costs more than the rest of the bookkeeping.
    event_counters: Vec<prometheus::IntCounter>,
    /// `neyman_intake_events_total`, by channel then [`Intake`].
    intake_counters: Vec<prometheus::IntCounter>,
    /// `neyman_answers_total`, by [`Answer`].
    answer_counters: Vec<prometheus::IntCounter>,
    /// `neyman_window_events` and `neyman_window_bytes` handles per channel.
    window_gauges: Vec<(prometheus::IntGauge, prometheus::IntGauge)>,
    /// `neyman_unscored_events_total` handles, indexed like [`UnscoredReason::ALL`].
    unscored_counters: Vec<prometheus::IntCounter>,
    outputs: Box<dyn Outputs>,
    cancel: Arc<AtomicBool>,
    /// Inline: a due retrain runs inside [`Engine::handle`] (replay). Deferred: the caller
    /// takes it with [`Engine::due_retrain`] and runs it on another thread (Kafka), so the
    /// poll loop never waits for training.
    inline_retrain: bool,
    /// A deferred retrain is running; no second one starts meanwhile.
    training: bool,
    /// Windows and retrains (off for a scorer).
    trains: bool,
    /// Scores unlabeled events and dead-letters bad ones (off for a trainer: the scorers own
    /// the unlabeled channel's outputs).
    scores: bool,
    /// Runs `[audit]`'s audits ([`Engine::set_auditor`]); `None`: no audit.
    auditor: Option<Box<dyn AuditRunner>>,
    /// Event time of the last audit's sample, and the audits started.
    last_audit_ts: Option<i64>,
    audits: u64,
}

/// Which events [`Engine::newest_scored`] picks: of `channel`, the newest `limit` that the
/// model never trained on (`fresh`) from event time `since` on, or that it did train on.
#[derive(Debug, Clone, Copy)]
struct Newest {
    channel: Channel,
    fresh: bool,
    since: i64,
    limit: usize,
}

/// The ids a model's own snapshot held out (`model.calibration = "recent"`), asked about
/// for every feedback event a fresh threshold reads: hashed, not ordered.
type HeldOutIds = HashSet<String, foldhash::fast::RandomState>;

fn channel_index(c: Channel) -> usize {
    match c {
        Channel::Positive => 0,
        Channel::Unlabeled => 1,
        Channel::Negative => 2,
    }
}

fn window_of(w: &crate::config::WindowConfig) -> WindowConfig {
    WindowConfig {
        max_events: w.max_events,
        max_age_ms: Some(i64::try_from(w.max_age.0.as_millis()).unwrap_or(i64::MAX)),
        max_bytes: Some(w.max_mb.saturating_mul(1 << 20)),
    }
}

impl Engine {
    /// A new engine. With `resume`, the newest stored model whose configuration fingerprint
    /// matches is served at once (its dimension locks the stream's); corrupt or foreign files
    /// are skipped with a warning.
    pub fn new(parts: EngineParts, resume: bool) -> Result<Engine, EngineError> {
        let EngineParts {
            config,
            metrics,
            registry,
            store,
            outputs,
            cancel,
        } = parts;
        let w = &config.windows;
        let make = |c: &crate::config::WindowConfig| {
            Window::new(window_of(c)).map_err(|e| EngineError::Config(e.to_string()))
        };
        let windows = [make(&w.positive)?, make(&w.unlabeled)?, make(&w.negative)?];
        let limits = EventLimits {
            max_bytes: config.scoring.max_event_bytes,
            max_features: config.scoring.max_features,
            ..EventLimits::default()
        };
        metrics.target_fpr.set(config.model.tau);
        let first_model_retry = config.retrain.first_model_retry_events;
        let event_counters = Channel::ALL
            .iter()
            .flat_map(|c| {
                EventOutcome::ALL
                    .iter()
                    .map(|o| metrics.events.with_label_values(&[c.as_str(), o.as_str()]))
            })
            .collect();
        let intake_counters = Channel::ALL
            .iter()
            .flat_map(|c| {
                INTAKE_OUTCOMES
                    .iter()
                    .map(|o| metrics.intake_events.with_label_values(&[c.as_str(), o]))
            })
            .collect();
        let answer_counters = ANSWER_OUTCOMES
            .iter()
            .map(|o| metrics.answers.with_label_values(&[o]))
            .collect();
        let window_gauges = Channel::ALL
            .iter()
            .map(|c| {
                (
                    metrics.window_events.with_label_values(&[c.as_str()]),
                    metrics.window_bytes.with_label_values(&[c.as_str()]),
                )
            })
            .collect();
        let unscored_counters = UnscoredReason::ALL
            .iter()
            .map(|r| metrics.unscored_events.with_label_values(&[r.as_str()]))
            .collect();
        let max_wait_ms = i64::try_from(config.scoring.max_wait.0.as_millis()).unwrap_or(i64::MAX);
        let max_future_ms =
            i64::try_from(config.windows.max_future.0.as_millis()).unwrap_or(i64::MAX);
        let drift = config.drift.enabled.then(|| ScoreDrift::new(&config.drift));
        let feature_drift = (config.drift.enabled && config.drift.features)
            .then(|| FeatureDrift::new(&config.drift));
        let mut engine = Engine {
            config,
            metrics,
            registry,
            store,
            windows,
            limits,
            dim: None,
            unlocked: VecDeque::new(),
            held_since: None,
            pending: VecDeque::new(),
            max_wait_ms,
            max_future_ms,
            new_window_events: 0,
            prescore: None,
            first_model_retry,
            events_since_attempt: 0,
            evicted_bin: None,
            waiting_retry: false,
            waiting_retry_at: None,
            negatives_since_calibration: 0,
            positives_since_calibration: 0,
            early_retrain: false,
            drift,
            feature_drift,
            certificate_stale: false,
            feedback_since_test: 0,
            calibration_since: None,
            window_scores: WindowScores::default(),
            last_retrain_ts: None,
            newest_ts: None,
            reads_a_recording: false,
            learner: None,
            recent_held_out: BTreeMap::new(),
            feedback: Rolling::default(),
            recent_flags: Rolling::default(),
            threshold_unsaved: false,
            threshold_saved_at: None,
            untimed_scores: 0,
            event_counters,
            intake_counters,
            answer_counters,
            window_gauges,
            unscored_counters,
            outputs,
            cancel,
            inline_retrain: true,
            training: false,
            trains: true,
            scores: true,
            auditor: None,
            last_audit_ts: None,
            audits: 0,
        };
        if let Some(n) = engine.config.model.n_features {
            engine.dim = Some(n);
            tracing::info!(
                n_features = n,
                "feature dimension locked by model.n_features"
            );
        }
        if resume {
            engine.resume()?;
        } else if engine.store.engine_state_path().exists() {
            // A fresh start must not leave an older run's cut for a later resumed one.
            engine.store.save_engine_state(&EngineState::default())?;
        }
        Ok(engine)
    }

    fn resume(&mut self) -> Result<(), EngineError> {
        let (mut usable, mut skipped) = self.store.load_usable(|m| self.resumable(m))?;
        // The newest usable model fixes the dimension; an older one of another dimension
        // could never serve beside it.
        if let Some(dim) = usable.first().map(|m| m.meta.n_features) {
            let (same, other): (Vec<_>, Vec<_>) =
                usable.into_iter().partition(|m| m.meta.n_features == dim);
            usable = same;
            skipped.extend(other.into_iter().map(|m| Skipped {
                path: self.store.model_path(m.meta.version),
                reason: format!(
                    "it has {} features, the newest usable model {dim}",
                    m.meta.n_features
                ),
            }));
        }
        for s in &skipped {
            tracing::warn!(path = %s.path.display(), reason = %s.reason, "model file not resumed");
        }
        match self.store.engine_state() {
            Ok(state) => self.calibration_since = state.and_then(|s| s.calibration_since),
            Err(e) => tracing::warn!(
                error = %e,
                "engine state not resumed; fresh thresholds use the whole window"
            ),
        }
        for m in &mut usable {
            self.resume_fresh_threshold(m);
        }
        if self.config.model.calibration == CalibrationName::Recent {
            for m in usable.iter().take(self.config.keep_models) {
                let version = m.meta.version;
                match self.store.held_out(version) {
                    Ok(Some(ids)) => {
                        self.recent_held_out
                            .insert(version, ids.into_iter().collect());
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(
                        error = %e,
                        "held-out ids not resumed; the model's held-out events count as trained on"
                    ),
                }
            }
        }
        let Some(newest) = usable.first() else {
            if !skipped.is_empty() {
                tracing::warn!(
                    files = skipped.len(),
                    dir = %self.store.dir().display(),
                    "no stored model resumed: every model file is corrupt, fails the gate's \
                     checks or was trained under another [model] configuration (reasons above); \
                     serving starts after the first retrain"
                );
            }
            return Ok(());
        };
        self.dim = Some(newest.meta.n_features);
        self.learner = Some(Learner {
            scaler: newest.model.scaler().clone(),
            previous: Some(fit_of(&newest.model)),
            rank: None,
            // The resumed model counts as the cold start: the next retrain starts from it.
            retrains: 1,
        });
        newest.publish(&self.metrics);
        tracing::info!(version = newest.meta.version, "resumed the stored model");
        let keep = self.config.keep_models;
        let mut oldest_first: Vec<StoredModel> = usable.into_iter().take(keep).collect();
        oldest_first.reverse();
        for m in oldest_first {
            self.registry.install(m);
        }
        Ok(())
    }

    /// Gives a resumed model its newest persisted fresh threshold, when that passes the same
    /// checks as the model; otherwise it keeps its trained one, with a warning.
    fn resume_fresh_threshold(&self, stored: &mut StoredModel) {
        let version = stored.meta.version;
        let path = self.store.threshold_path(version);
        let (threshold_version, threshold) = match self.store.fresh_threshold(version) {
            Ok(Some(found)) => found,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "fresh threshold not resumed; the trained one serves");
                return;
            }
        };
        let mut model = stored.model.clone();
        model.set_threshold(threshold);
        if let Err(reason) = self.servable(&model) {
            tracing::warn!(
                path = %path.display(),
                %reason,
                "fresh threshold not resumed; the trained one serves"
            );
            return;
        }
        stored.model = model;
        stored.threshold_version = threshold_version;
        tracing::info!(
            version,
            threshold_version,
            "resumed the model's fresh threshold"
        );
    }

    /// Whether a stored model may be resumed: the configured dimension (when one is), this
    /// configuration at its own dimension, and the checks of [`Engine::servable`].
    fn resumable(&self, stored: &StoredModel) -> Result<(), String> {
        let n = stored.meta.n_features;
        if let Some(d) = self.config.model.n_features.filter(|&d| d != n) {
            return Err(format!("it has {n} features, model.n_features is {d}"));
        }
        trained_under(stored, &self.accepted_fingerprints(n))?;
        self.servable(&stored.model)
    }

    /// The fingerprint of everything that makes two models interchangeable: the `[model]`
    /// settings that are not at their defaults ([`ModelConfig::identity`]) and the dimension.
    pub fn fingerprint(&self, n_features: usize) -> u64 {
        let text = self.config.model.identity();
        fnv1a64(format!("{text}|{n_features}").as_bytes())
    }

    /// The fingerprints a model may carry to be used here: [`Engine::fingerprint`], and the
    /// one of the releases before it, over the whole `[model]` table with every default
    /// spelled out (resumed and accepted from a trainer for one more release).
    fn accepted_fingerprints(&self, n_features: usize) -> [u64; 2] {
        let whole = serde_json::to_string(&self.config.model).unwrap_or_default();
        [
            self.fingerprint(n_features),
            fnv1a64(format!("{whole}|{n_features}").as_bytes()),
        ]
    }

    /// The model that scores now.
    pub fn active(&self) -> Option<Arc<StoredModel>> {
        self.registry.active()
    }

    /// With `[audit]`: `runner` runs the audits this engine finds due (once a model is
    /// active and the windows hold `audit.max_rows` events or a retrain's minimums, then every
    /// `audit.every` of event time); without it, ignored.
    pub fn set_auditor(&mut self, runner: Box<dyn AuditRunner>) {
        if self.config.audit.is_some() {
            self.auditor = Some(runner);
        }
    }

    /// Hands a due audit its sample of the windows: one runs at a time, off this thread.
    fn start_due_audit(&mut self) {
        let (Some(config), Some(newest), Some(n_features)) =
            (&self.config.audit, self.newest_ts, self.dim)
        else {
            return;
        };
        let every = i64::try_from(config.every.0.as_millis()).unwrap_or(i64::MAX);
        if self
            .last_audit_ts
            .is_some_and(|last| newest.saturating_sub(last) < every)
            || !self.trains
            || !self.auditor.as_ref().is_some_and(|a| !a.busy())
        {
            return;
        }
        let Some(model) = self.registry.active() else {
            return;
        };
        let [p, u, n] = &self.windows;
        // A resumed model is active at the first event: wait for a sample worth certifying.
        let retrain = &self.config.retrain;
        let too_few = p.len() + u.len() + n.len() < config.max_rows
            && (p.len() < retrain.min_positive || u.len() < retrain.min_unlabeled);
        // Checked on the counts first: building the sample reads every window entry.
        if too_few || u.is_empty() || p.len() + n.len() == 0 {
            return;
        }
        fn entries(w: &Window, n_features: usize) -> Vec<&Entry> {
            w.checked(n_features)
                .map(|e| e.collect())
                .unwrap_or_default()
        }
        // An event both labelled and in the unlabeled window counts as labelled, as in
        // training.
        let (positives, negatives) = (entries(p, n_features), entries(n, n_features));
        let labelled: HashSet<&str> = positives
            .iter()
            .chain(&negatives)
            .map(|e| e.id.as_str())
            .collect();
        let unlabeled: Vec<&Entry> = entries(u, n_features)
            .into_iter()
            .filter(|e| !labelled.contains(e.id.as_str()))
            .collect();
        let number = self.audits + 1;
        let Some(sample) = draw_sample(
            [positives, unlabeled, negatives],
            n_features,
            config.max_rows,
            config.seed.wrapping_add(number),
        ) else {
            return;
        };
        let prior = config.prior.or(self.config.model.prior).unwrap_or(0.5);
        let job = AuditJob {
            number,
            event_time: newest,
            sample,
            model: Some(model),
            config: config.clone(),
            prior,
        };
        self.audits = number;
        self.last_audit_ts = Some(newest);
        tracing::info!(
            audit = number,
            rows = job.sample.len(),
            "audit started on a sample of the windows"
        );
        if let Some(runner) = self.auditor.as_mut() {
            runner.start(job);
        }
    }

    /// The locked feature dimension, if any.
    pub fn dimension(&self) -> Option<usize> {
        self.dim
    }

    /// Runs due retrains on the caller's thread ([`Engine::due_retrain`]) instead of inside
    /// [`Engine::handle`].
    pub fn defer_retrains(&mut self) {
        self.inline_retrain = false;
    }

    /// What this engine does: `Both` (default), `Trainer` (windows and retrains; unlabeled
    /// events are windowed, not scored) or `Scorer` (scores with models handed to
    /// [`Engine::install_remote`]; no windows, no retrains).
    pub fn set_role(&mut self, role: Role) {
        self.trains = role != Role::Scorer;
        self.scores = role != Role::Trainer;
    }

    /// The events come from a recording read from its start (`replay`), not from a source that
    /// resumes where it stopped (Kafka offsets): a resumed calibration cut that lies after the
    /// first event's time is dropped. Kafka keeps it, since events redelivered after a crash
    /// may precede it.
    pub fn reads_a_recording(&mut self) {
        self.reads_a_recording = true;
    }

    /// With `keep`, the events that leave the windows are kept for [`Engine::take_evicted`]
    /// instead of freed here: a replay hands them back to the thread that read them (freeing
    /// them on the engine's thread was 4.5 % of its samples on a 1 M-event replay). Without
    /// it (the default) they are freed at once.
    pub fn keep_evicted(&mut self, keep: bool) {
        if !keep {
            self.evicted_bin = None;
        } else if self.evicted_bin.is_none() {
            self.evicted_bin = Some(Vec::new());
        }
    }

    /// The events evicted since the last call ([`Engine::keep_evicted`]; empty without it).
    pub fn take_evicted(&mut self) -> Vec<Evicted> {
        self.evicted_bin
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Parses a message and locks the dimension on the first valid one.
    fn parse(&mut self, record: &Record) -> Result<Event, Rejection> {
        self.parse_or_take(record, None)
    }

    /// [`Engine::parse`], taking `parsed` instead when it is the record's payload read as
    /// [`Engine::preparse`] does and dense with the locked dimension: then reading it again
    /// with the dimension gives the same event (the dimension only adds its own check for
    /// dense features). Anything else is read again, so every rejection is the usual one.
    fn parse_or_take(
        &mut self,
        record: &Record,
        parsed: Option<Event>,
    ) -> Result<Event, Rejection> {
        let taken = parsed.filter(|e| {
            matches!(e.x, Features::Dense(_)) && self.dim.map_or(true, |d| d == e.x.dim())
        });
        let event = match taken {
            Some(event) => event,
            None => parse_event(&record.payload, self.dim, &self.limits)?,
        };
        // Before the event can lock the dimension or move the clock.
        // The wall clock is read only for an event already beyond the newest event time.
        let beyond = |clock: i64| event.ts > clock.saturating_add(self.max_future_ms);
        if self.newest_ts.map_or(true, beyond) && beyond(now_ms()) {
            let clock = self.newest_ts.unwrap_or(i64::MIN).max(now_ms());
            return Err(Rejection {
                reason: RejectReason::TsOutOfRange,
                detail: format!(
                    "ts {} is more than windows.max_future ({} ms) ahead of the newest event \
                     time and the wall clock ({clock})",
                    event.ts, self.max_future_ms
                ),
            });
        }
        if self.newest_ts.is_none() && self.reads_a_recording {
            self.drop_cut_ahead_of(event.ts);
        }
        self.newest_ts = Some(self.newest_ts.map_or(event.ts, |t| t.max(event.ts)));
        Ok(event)
    }

    /// Locks the feature dimension (logged as a warning: it decides which events are
    /// dead-lettered from now on) and handles the events held until now, re-read at it:
    /// the ones of another dimension go to the DLQ as `dimension_mismatch`.
    fn lock_dimension(&mut self, dim: usize, why: &str) -> Result<(), EngineError> {
        self.dim = Some(dim);
        self.held_since = None;
        tracing::warn!(
            n_features = dim,
            held = self.unlocked.len(),
            why,
            "feature dimension locked; events with another count are dead-lettered as \
             dimension_mismatch (set model.n_features to lock it from the configuration)"
        );
        while let Some(held) = self.unlocked.pop_front() {
            match parse_event(&held.record.payload, Some(dim), &self.limits) {
                Ok(event) => self.process(&held.record, || held.headers.clone(), event)?,
                Err(rejection) => self.reject(&held.record, || held.headers.clone(), rejection)?,
            }
        }
        Ok(())
    }

    /// Holds `event` until a dimension has `scoring.dimension_quorum` votes (dense events and
    /// sparse ones with their own `dim` vote), or until 10 × the quorum are held: then the
    /// most common one (the earliest among equals) locks.
    fn hold_for_quorum(
        &mut self,
        record: &Record,
        headers: impl FnOnce() -> Vec<(String, String)>,
        event: Event,
    ) -> Result<(), EngineError> {
        let dim = event.x.dim();
        self.unlocked.push_back(Held {
            record: record.clone(),
            headers: headers(),
            dim,
        });
        let quorum = self.config.scoring.dimension_quorum;
        let votes = self.unlocked.iter().filter(|h| h.dim == dim).count();
        if votes >= quorum {
            return self.lock_dimension(dim, "quorum");
        }
        if self.unlocked.len() >= quorum.saturating_mul(10) {
            if let Some(best) = self.most_common_held_dimension() {
                return self.lock_dimension(best, "most common among the held events");
            }
        }
        Ok(())
    }

    /// The dimension most held events have (the earliest seen among equals).
    fn most_common_held_dimension(&self) -> Option<usize> {
        let mut counts: Vec<(usize, usize)> = Vec::new();
        for h in &self.unlocked {
            match counts.iter_mut().find(|(d, _)| *d == h.dim) {
                Some((_, n)) => *n += 1,
                None => counts.push((h.dim, 1)),
            }
        }
        let most = counts.iter().map(|&(_, n)| n).max()?;
        counts.into_iter().find(|&(_, n)| n == most).map(|(d, _)| d)
    }

    /// Handles one message. With inline retrains, a due retrain runs to completion before
    /// this returns.
    pub fn handle(&mut self, record: &Record) -> Result<(), EngineError> {
        self.handle_with_headers(record, || record.headers.clone())
    }

    /// A function that reads payloads as this engine will, without its state, so that a
    /// driver can do it ahead on another thread.
    pub fn preparse(&self) -> impl Fn(&[u8]) -> Option<Event> + Send + 'static {
        let limits = self.limits;
        move |payload| parse_event(payload, None, &limits).ok()
    }

    /// [`Engine::preparse`] that also scores, with the model active at the time, the events
    /// this engine will score (unlabeled and negative-feedback events of a scoring engine);
    /// [`Engine::handle_preparsed`] takes its result. A score from a model that is no longer
    /// active when the event is handled is not used.
    pub fn prescoring_preparse(
        &self,
    ) -> impl FnMut(Channel, &[u8]) -> (Option<Event>, Option<Prescore>) + Send + 'static {
        let preparse = self.preparse();
        let mut active = self.registry.watch();
        let scores = self.scores;
        move |channel, payload| {
            let event = preparse(payload);
            let scored = scores && matches!(channel, Channel::Unlabeled | Channel::Negative);
            let prescore = match (&event, active.load()) {
                (Some(event), Some(model)) if scored => prescore(model, event),
                _ => None,
            };
            (event, prescore)
        }
    }

    /// [`Engine::handle`] with the record's payload already read by [`Engine::preparse`]
    /// and, perhaps, scored by [`Engine::prescoring_preparse`].
    pub fn handle_preparsed(
        &mut self,
        record: &Record,
        parsed: Option<Event>,
        prescore: Option<Prescore>,
    ) -> Result<(), EngineError> {
        self.prescore = prescore;
        let handled = self.handle_parsed(record, || record.headers.clone(), parsed);
        self.prescore = None;
        handled
    }

    /// [`Engine::handle`] for a source whose headers cost something to read (librdkafka
    /// parses them on first access): `record.headers` is ignored, and `headers` is called only
    /// for a dead letter, the one output that carries them.
    pub fn handle_with_headers(
        &mut self,
        record: &Record,
        headers: impl FnOnce() -> Vec<(String, String)>,
    ) -> Result<(), EngineError> {
        self.handle_parsed(record, headers, None)
    }

    /// [`Engine::handle`], saying what became of the event: the answer `POST /v1/events` gives.
    /// An event held for the dimension quorum is `Accepted`; if the lock later goes to another
    /// dimension, it is dead-lettered then, like a held stream event.
    pub fn handle_answered(&mut self, record: &Record) -> Result<Taken, EngineError> {
        match self.parse(record) {
            Ok(event) => {
                self.handle_valid(record, || record.headers.clone(), event)?;
                Ok(Taken::Accepted)
            }
            Err(rejection) => {
                self.reject(record, || record.headers.clone(), rejection.clone())?;
                Ok(Taken::DeadLettered(rejection))
            }
        }
    }

    fn handle_parsed(
        &mut self,
        record: &Record,
        headers: impl FnOnce() -> Vec<(String, String)>,
        parsed: Option<Event>,
    ) -> Result<(), EngineError> {
        match self.parse_or_take(record, parsed) {
            Ok(event) => self.handle_valid(record, headers, event),
            Err(rejection) => self.reject(record, headers, rejection),
        }
    }

    /// Holds a valid event for the dimension quorum, or handles it at the locked dimension.
    fn handle_valid(
        &mut self,
        record: &Record,
        headers: impl FnOnce() -> Vec<(String, String)>,
        event: Event,
    ) -> Result<(), EngineError> {
        if self.threshold_unsaved {
            self.save_fresh_threshold(false);
        }
        if self.dim.is_none() {
            // `max_wait = 0` asks for every answer at once: nothing is held then either.
            if self.config.scoring.dimension_quorum > 1 && !self.config.scoring.max_wait.0.is_zero()
            {
                return self.hold_for_quorum(record, headers, event);
            }
            self.lock_dimension(
                event.x.dim(),
                "first valid event (scoring.dimension_quorum = 1)",
            )?;
        }
        self.process(record, headers, event)
    }

    /// Scores, observes and windows a valid event of the locked dimension.
    fn process(
        &mut self,
        record: &Record,
        headers: impl FnOnce() -> Vec<(String, String)>,
        event: Event,
    ) -> Result<(), EngineError> {
        let channel = record.channel;
        let origin = record
            .partition
            .zip(record.offset)
            .map(|(partition, offset)| Origin {
                channel,
                partition,
                offset,
            });
        match channel {
            Channel::Unlabeled if self.scores => self.score_unlabeled(&event, origin)?,
            Channel::Negative => self.observe_feedback(&event),
            Channel::Unlabeled | Channel::Positive => {}
        }
        self.expire_waiting(None)?;
        if !self.trains {
            self.count_intake(channel, Intake::NotWindowed);
            return Ok(());
        }
        let entry = entry_of(event, record);
        let window = &mut self.windows[channel_index(channel)];
        let outcome = match window.insert(entry) {
            InsertOutcome::Added { evicted } => {
                if let Some(bin) = &mut self.evicted_bin {
                    bin.extend(evicted);
                }
                self.new_window_events += 1;
                self.events_since_attempt += 1;
                EventOutcome::Windowed
            }
            InsertOutcome::Duplicate => EventOutcome::Duplicate,
            InsertOutcome::TooOld => EventOutcome::Expired,
            InsertOutcome::TooLarge => {
                let rejection = Rejection {
                    reason: RejectReason::TooLarge,
                    detail: "the event alone exceeds the window's byte budget".into(),
                };
                return self.reject(record, headers, rejection);
            }
        };
        self.count(channel, outcome);
        self.publish_window(channel);
        if self.inline_retrain && self.retrain_due() {
            self.retrain();
        }
        if outcome == EventOutcome::Windowed {
            self.start_due_audit();
        }
        if outcome == EventOutcome::Windowed {
            self.note_feedback(channel);
        }
        Ok(())
    }

    /// A drift detected on the active model's scores: the certificate is marked stale (its
    /// calibration events no longer describe the stream) until the next swap or fresh
    /// threshold, a retrain is asked for at once, and fresh thresholds calibrate only on
    /// negatives from the detecting event's time `at` on (see
    /// [`Engine::unlabeled_drift_detected`]).
    fn on_drift(&mut self, model: &StoredModel, detection: Detection, at: i64) {
        tracing::warn!(
            version = model.meta.version,
            threshold_version = model.threshold_version,
            statistic = detection.statistic,
            p_value = detection.p_value,
            "drift detected on the unlabeled scores; the certificate is stale until the next model or fresh threshold"
        );
        self.unlabeled_drift_detected("scores", at);
    }

    /// A shift of the unlabeled events' feature means: handled as a drift of the scores.
    fn on_feature_drift(&mut self, model: &StoredModel, detection: FeatureDetection, at: i64) {
        tracing::warn!(
            version = model.meta.version,
            threshold_version = model.threshold_version,
            feature = detection.feature,
            z = detection.z,
            p_value = detection.p_value,
            "drift detected on the unlabeled feature means; the certificate is stale until the next model or fresh threshold"
        );
        self.unlabeled_drift_detected("features", at);
    }

    /// What every detection does: counted under `signal`, the certificate stale, a retrain at
    /// once, and τ-FPL's ranking depth searched again.
    fn drift_detected(&mut self, signal: &str) {
        self.metrics
            .drift_detected
            .with_label_values(&[signal])
            .inc();
        self.set_stale(true);
        self.early_retrain = true;
        self.forget_rank_choice();
    }

    /// A `scores` or `features` detection at event time `at` (see [`Engine::on_drift`]): also
    /// the fresh-threshold counts and both unlabeled detectors start again, so one change
    /// fires once, and fresh thresholds take only negatives from `at` on. A threshold over the
    /// newest `recalibrate.window` negatives keeps its pre-change level until nearly all of
    /// them were drawn after the change (its k-th largest score is a pre-change one while k
    /// of those remain): on a spambase stream shifted by one standard deviation that left a
    /// model flagging 0 of 250 positives for 500 events (docs/certificates.md §6). Until
    /// `umbrella_min_negatives` negatives have arrived since `at` the old threshold stays,
    /// marked stale.
    fn unlabeled_drift_detected(&mut self, signal: &str, at: i64) {
        self.drift_detected(signal);
        self.set_calibration_since(Some(
            self.calibration_since.map_or(at, |since| since.max(at)),
        ));
        self.negatives_since_calibration = 0;
        self.positives_since_calibration = 0;
        if let Some(drift) = &mut self.drift {
            drift.reset(Vec::new());
        }
        if let Some(drift) = &mut self.feature_drift {
            drift.reset(None);
        }
    }

    /// The `feedback` drift signal: every `drift.every` new negative-feedback events, the
    /// share of the newest `drift.window` negatives in the window that the active model never
    /// trained on that its threshold flags, against τ: P(Bin(n, τ) ≥ flagged) below `drift.p_value` is a detection. The
    /// negatives are scored by the active model at the test, so a swap or a fresh threshold
    /// is judged at once; a fresh threshold over a long window that the newest negatives
    /// exceed is what a concept change looks like (the unlabeled scores do not move when only
    /// P(y | x) does). A detection recalibrates at once on the negatives from the tested
    /// ones' oldest event time on.
    fn test_feedback(&mut self) {
        // The settings are copied out, not the section cloned, on every negative event: the
        // test borrows the engine mutably below.
        let (enabled, every, window, p_limit) = {
            let c = &self.config.drift;
            (c.enabled, c.every, c.window, c.p_value)
        };
        if !enabled {
            return;
        }
        self.feedback_since_test += 1;
        if self.feedback_since_test < every {
            return;
        }
        self.feedback_since_test = 0;
        let Some(model) = self.registry.active() else {
            return;
        };
        let Some(t) = model.model.threshold() else {
            return;
        };
        // Negatives the model trained on score low; only unseen ones test the threshold.
        let query = Newest {
            channel: Channel::Negative,
            fresh: true,
            since: i64::MIN,
            limit: window,
        };
        let Some(newest) = self.newest_scored(&model, query) else {
            return;
        };
        if newest.len() < window {
            return;
        }
        let scores: Vec<f64> = newest.iter().map(|&(_, s)| s).collect();
        let flagged = scores.iter().filter(|&&s| t.is_positive(s)).count();
        let n = scores.len();
        let p_value = binomial_upper_tail(n, flagged, self.config.model.tau);
        if p_value >= p_limit {
            return;
        }
        let since = newest.iter().map(|&(ts, _)| ts).min();
        tracing::warn!(
            version = model.meta.version,
            threshold_version = model.threshold_version,
            negatives = n,
            flagged,
            p_value,
            "drift detected on the negative feedback: the threshold flags more than tau of the newest negatives; recalibrating on them"
        );
        self.drift_detected("feedback");
        self.set_calibration_since(since);
        if self.config.recalibrate.enabled {
            self.recalibrate();
        }
    }

    /// Sets the cut of fresh thresholds' negatives and persists it when it changed
    /// ([`EngineState`]): a restart that rebuilds the windows would otherwise calibrate on the
    /// pre-change negatives again. A failed write is logged; the cut holds in memory.
    fn set_calibration_since(&mut self, since: Option<i64>) {
        if since == self.calibration_since {
            return;
        }
        self.calibration_since = since;
        let state = EngineState {
            calibration_since: since,
        };
        if let Err(e) = self.store.save_engine_state(&state) {
            tracing::warn!(
                error = %e,
                "cannot persist the calibration cut; after a restart fresh thresholds use the whole window"
            );
        }
    }

    /// Drops a resumed calibration cut that lies after a recording's first event time `ts`:
    /// the recording does not continue where the cut was made (the same file read again from
    /// its start), and the cut would keep fresh thresholds away until event time passes it.
    fn drop_cut_ahead_of(&mut self, ts: i64) {
        if let Some(since) = self.calibration_since.filter(|&since| ts < since) {
            tracing::info!(
                calibration_since = since,
                first_event_ts = ts,
                "the stream starts before the resumed calibration cut; the cut is dropped"
            );
            self.set_calibration_since(None);
        }
    }

    /// The next retrain searches τ-FPL's ranking depth again (`rank_tau = "auto"`).
    fn forget_rank_choice(&mut self) {
        if let Some(learner) = self.learner.as_mut() {
            learner.rank = None;
        }
    }

    fn set_stale(&mut self, stale: bool) {
        self.certificate_stale = stale;
        self.metrics.certificate_stale.set(i64::from(stale));
    }

    /// A new active model: the drift detectors start from `reference` (its scores on
    /// held-out unlabeled events of its snapshot, and their rows; none: from its first
    /// events) and the certificate is fresh.
    fn reset_drift(&mut self, reference: Vec<f64>, rows: Option<(&Rows, &[usize])>) {
        if let Some(drift) = &mut self.drift {
            drift.reset(reference);
        }
        if let Some(drift) = &mut self.feature_drift {
            drift.reset(rows);
        }
        self.set_stale(false);
    }

    /// Counts a new labelled event; every `recalibrate.every` negatives (or, for a
    /// pu-umbrella threshold, positives) the active model gets a fresh threshold
    /// ([`Engine::recalibrate`]).
    fn note_feedback(&mut self, channel: Channel) {
        if channel == Channel::Negative {
            self.test_feedback();
        }
        if !self.config.recalibrate.enabled {
            return;
        }
        let every = self.config.recalibrate.every;
        let due = match channel {
            Channel::Negative => {
                self.negatives_since_calibration += 1;
                self.negatives_since_calibration >= every
            }
            Channel::Positive => {
                self.positives_since_calibration += 1;
                self.positives_since_calibration >= every
                    && self.registry.active().is_some_and(|m| {
                        m.model
                            .threshold()
                            .is_some_and(|t| t.method == ThresholdMethod::PuUmbrella)
                    })
            }
            Channel::Unlabeled => false,
        };
        if due {
            self.recalibrate();
        }
    }

    /// Whether `model` never trained on the event `id` of `channel` at event time `ts`: a
    /// held-out id (it calibrated, never trained: with `model.calibration = "hash"` by its
    /// hash, with `"recent"` if the model's snapshot held it out, the engine's
    /// `recent_held_out`), or an event newer than every event of the training snapshot whose
    /// unlabeled copy (if any) is newer too. USMO never trains on negatives, so of a negative
    /// only an unlabeled copy can have been trained on. A snapshot holds an id out on every
    /// channel at once (an id with a labelled copy trains or calibrates with its label, and its
    /// unlabeled copy is left out), so no copy of a held-out id was trained on.
    fn unseen(&self, channel: Channel, (id, ts): (&str, i64), model: &StoredModel) -> bool {
        let held_out = match self.config.model.calibration {
            CalibrationName::Hash => in_calibration(id, self.config.model.calibration_percent),
            CalibrationName::Recent => self
                .recent_held_out
                .get(&model.meta.version)
                .is_some_and(|ids| ids.contains(id)),
        };
        if held_out {
            return true;
        }
        let trained_at = model.meta.trained_at_ms;
        let trains_on_it = channel != Channel::Negative || !matches!(model.model, Model::Usmo(_));
        // The window lookup last: most events of a window are older than the model.
        (ts > trained_at || !trains_on_it)
            && self.windows[channel_index(Channel::Unlabeled)]
                .get(id)
                .map_or(true, |u| u.ts > trained_at)
    }

    /// [`Engine::newest_scored_with`] on the engine's own [`WindowScores`].
    fn newest_scored(&mut self, model: &StoredModel, query: Newest) -> Option<Vec<(i64, f64)>> {
        let mut cache = std::mem::take(&mut self.window_scores);
        let scored = self.newest_scored_with(&mut cache, model, query);
        self.window_scores = cache;
        scored
    }

    /// The newest `query.limit` events of `query.channel` that `model` never trained on
    /// (`query.fresh`, [`Engine::unseen`]; from event time `query.since` on), or did train
    /// on, newest first, as (event time, the model's score); `None` if scoring fails. Both
    /// facts are remembered per event for the model in `cache`.
    fn newest_scored_with(
        &self,
        cache: &mut WindowScores,
        model: &StoredModel,
        query: Newest,
    ) -> Option<Vec<(i64, f64)>> {
        cache.belong_to((model.meta.version, model.meta.trained_at_ms));
        let c = channel_index(query.channel);
        let scored = if query.fresh {
            self.newest_unseen_scored(cache, model, query)
        } else {
            self.newest_seen_scored(cache, model, query)
        };
        cache.prune(c, self.windows[c].oldest_seq());
        scored
    }

    /// [`Engine::newest_scored_with`] for events `model` never trained on: the cache's list
    /// of them ([`WindowScores::newest_unseen`]), scores kept in it.
    fn newest_unseen_scored(
        &self,
        cache: &mut WindowScores,
        model: &StoredModel,
        query: Newest,
    ) -> Option<Vec<(i64, f64)>> {
        let Newest {
            channel,
            since,
            limit,
            ..
        } = query;
        let c = channel_index(channel);
        let window = &self.windows[c];
        let unseen = |e: &Entry| self.unseen(channel, (&e.id, e.ts), model);
        let mut picked = cache.newest_unseen(c, window, (since, limit), unseen);
        let unscored: Vec<(usize, &Entry)> = picked
            .iter()
            .enumerate()
            .filter(|(_, event)| event.score.is_none())
            .filter_map(|(at, event)| Some((at, window.entry_at(event.seq)?)))
            .collect();
        if !unscored.is_empty() {
            let entries: Vec<&Entry> = unscored.iter().map(|&(_, e)| e).collect();
            let scores = score_entries(&model.model, &entries)?;
            for (&(at, _), score) in unscored.iter().zip(&scores) {
                picked[at].score = Some(*score);
            }
            let seqs = unscored.iter().map(|&(at, _)| picked[at].seq);
            cache.remember_unseen_scores(c, seqs.zip(scores));
        }
        picked
            .iter()
            .map(|event| Some((event.ts, event.score?)))
            .collect()
    }

    /// [`Engine::newest_scored_with`] for events `model` trained on: a walk over the window,
    /// newest first (only pu-umbrella's fresh thresholds ask).
    fn newest_seen_scored(
        &self,
        cache: &mut WindowScores,
        model: &StoredModel,
        query: Newest,
    ) -> Option<Vec<(i64, f64)>> {
        let Newest { channel, limit, .. } = query;
        let c = channel_index(channel);
        let window = &self.windows[c];
        let mut picked = Vec::new();
        for (seq, entry) in window.newest_first_with_seq() {
            if picked.len() == limit {
                break;
            }
            let unseen = match cache.get(c, seq) {
                Some(remembered) => remembered.unseen,
                None => {
                    let unseen = self.unseen(channel, (&entry.id, entry.ts), model);
                    let decided = Remembered {
                        unseen,
                        score: None,
                    };
                    cache.set(c, seq, decided);
                    unseen
                }
            };
            if !unseen {
                picked.push((seq, entry));
            }
        }
        let unscored: Vec<(u64, &Entry)> = picked
            .iter()
            .copied()
            .filter(|&(seq, _)| cache.get(c, seq).and_then(|r| r.score).is_none())
            .collect();
        if !unscored.is_empty() {
            let entries: Vec<&Entry> = unscored.iter().map(|&(_, e)| e).collect();
            let scores = score_entries(&model.model, &entries)?;
            for (&(seq, _), score) in unscored.iter().zip(scores) {
                let remembered = Remembered {
                    unseen: false,
                    score: Some(score),
                };
                cache.set(c, seq, remembered);
            }
        }
        picked
            .iter()
            .map(|&(seq, e)| Some((e.ts, cache.get(c, seq)?.score?)))
            .collect()
    }

    /// A fresh threshold for the active model (docs/certificates.md §6): the umbrella
    /// threshold over the newest `recalibrate.window` negative-feedback events it never
    /// trained on, scored by it now, with the TPR estimated on the newest unseen positives.
    /// Those events come from the stream's most recent distribution, which is what a
    /// threshold under drift needs; the certificate holds for any scorer fixed before they
    /// were drawn (docs/certificates.md §1). The copy replaces the active model atomically
    /// with `threshold_version` one higher. Skipped (and counted) with too few unseen
    /// negatives, for `oob` (which certifies nothing) and without a threshold. A threshold
    /// that flags none of the fresh positives is still installed, since the one it replaces
    /// no longer holds τ on these negatives, and asks for an early retrain.
    fn recalibrate(&mut self) {
        self.negatives_since_calibration = 0;
        self.positives_since_calibration = 0;
        let Some(active) = self.registry.active() else {
            return;
        };
        let Some(current) = active.model.threshold() else {
            return;
        };
        if current.method == ThresholdMethod::Oob {
            return;
        }
        let pu = current.method == ThresholdMethod::PuUmbrella;
        let window = self.config.recalibrate.window;
        // The newest `window` events of a channel the model never trained on (`fresh`), or the
        // newest it did train on (the PU candidates' source), newest first, with their scores.
        let since = self.calibration_since.unwrap_or(i64::MIN);
        let mut cache = std::mem::take(&mut self.window_scores);
        let mut newest = |channel: Channel, fresh: bool| {
            let query = Newest {
                channel,
                fresh,
                since,
                limit: window,
            };
            self.newest_scored_with(&mut cache, &active, query)
                .unwrap_or_default()
        };
        let negatives = newest(Channel::Negative, true);
        let fresh_positives = newest(Channel::Positive, true);
        let (tau, delta) = (self.config.model.tau, self.config.model.delta);
        let min_negatives =
            crate::learn::threshold::umbrella_min_negatives(tau, delta).unwrap_or(usize::MAX);
        // The configured method, else umbrella once enough unseen negatives exist.
        let use_umbrella = match self.config.model.threshold {
            Some(ThresholdName::Umbrella) => true,
            Some(ThresholdName::PuUmbrella) => false,
            _ => negatives.len() >= min_negatives || !pu,
        };
        let scores = |scored: &[(i64, f64)]| scored.iter().map(|&(_, s)| s).collect::<Vec<_>>();
        let mut calibration_positives = fresh_positives.len();
        let fresh = if use_umbrella {
            let positives = scores(&fresh_positives);
            umbrella(&scores(&negatives), tau, delta, Some(&positives)).ok()
        } else {
            // pu-umbrella compares the positives with the positives among the unlabeled
            // events, so both samples must cover the same span of event time: a held-out
            // positive from before a drift beside post-drift unlabeled events breaks the test.
            let mut unlabeled = newest(Channel::Unlabeled, true);
            let trained_positives = newest(Channel::Positive, false);
            let trained_unlabeled = newest(Channel::Unlabeled, false);
            let oldest = |scored: &[(i64, f64)]| scored.iter().map(|&(ts, _)| ts).min();
            let since = oldest(&fresh_positives)
                .max(oldest(&unlabeled))
                .unwrap_or(i64::MAX);
            let mut positives = fresh_positives.clone();
            positives.retain(|&(ts, _)| ts >= since);
            unlabeled.retain(|&(ts, _)| ts >= since);
            calibration_positives = positives.len();
            self.fresh_pu_threshold(
                &scores(&positives),
                &scores(&unlabeled),
                &scores(&trained_positives),
                &scores(&trained_unlabeled),
            )
        };
        self.window_scores = cache;
        let (negatives, positives) = (negatives.len(), calibration_positives);
        let Some(fresh) = fresh else {
            tracing::debug!(
                negatives,
                positives,
                "too few unseen feedback events for a fresh threshold"
            );
            self.count_recalibration("skipped");
            return;
        };
        let flags_nothing = fresh.tpr_estimate == Some(0.0);
        let mut copy = active.scoring_only();
        copy.model.set_threshold(fresh);
        copy.threshold_version += 1;
        let (version, threshold_version) = (copy.meta.version, copy.threshold_version);
        let threshold = copy.model.threshold().map(|t| t.threshold);
        let Some(installed) = self.registry.replace_active(copy) else {
            return;
        };
        installed.publish(&self.metrics);
        self.set_stale(false);
        self.threshold_unsaved = true;
        self.save_fresh_threshold(false);
        if flags_nothing {
            tracing::warn!(
                version,
                threshold_version,
                ?threshold,
                positives,
                "the fresh threshold flags none of the recent positives; retraining early"
            );
            self.early_retrain = true;
            self.forget_rank_choice();
            self.count_recalibration("flags_nothing");
        } else {
            tracing::debug!(version, threshold_version, ?threshold, "fresh threshold");
            self.count_recalibration("recalibrated");
        }
    }

    /// pu-umbrella on fresh data: the unseen `positives` and `unlabeled` scores calibrate, the
    /// candidates are the scores of events the model trained on (fixed without the calibration
    /// events, docs/certificates.md §2), and `auto` prior ends come from the same calibration
    /// scores at a share of δ (§5), as at a retrain.
    fn fresh_pu_threshold(
        &self,
        positives: &[f64],
        unlabeled: &[f64],
        trained_positives: &[f64],
        trained_unlabeled: &[f64],
    ) -> Option<ThresholdResult> {
        let learner = self.config.model.learner_spec();
        let spec = learner.threshold.as_ref()?.spec(learner.seed);
        // Both ends `auto`: calibration_prior replaces both, so the interval passed is moot.
        let interval = spec.prior_interval.unwrap_or((0.0, 1.0));
        let prior = spec
            .calibration_prior(interval, positives, unlabeled, trained_positives)
            .ok()?;
        let mut trained: Vec<f64> = trained_positives.to_vec();
        trained.extend_from_slice(trained_unlabeled);
        crate::learn::threshold::pu_umbrella(
            &crate::learn::threshold::pu_candidates(&trained),
            positives,
            unlabeled,
            self.config.model.tau,
            prior.delta,
            prior.prior_min,
            prior.prior_max,
        )
        .ok()
    }

    fn count_recalibration(&self, result: &str) {
        self.metrics
            .recalibrations
            .with_label_values(&[result])
            .inc();
    }

    /// Rebuilds the windows from a message whose outputs were already delivered before a
    /// restart (Kafka re-reads from the windows' low watermark): the event joins its window
    /// if it is valid, and nothing is scored, dead-lettered or counted as new for the retrain
    /// schedule. Counted as outcome `restored`.
    pub fn restore(&mut self, record: &Record) {
        if !self.trains {
            return;
        }
        let Ok(event) = self.parse(record) else {
            return;
        };
        // Re-read events were accepted under a lock before the restart: they agree.
        if self.dim.is_none() {
            self.dim = Some(event.x.dim());
        }
        let channel = record.channel;
        let entry = entry_of(event, record);
        if let InsertOutcome::Added { .. } = self.windows[channel_index(channel)].insert(entry) {
            self.count(channel, EventOutcome::Restored);
        }
        self.publish_window(channel);
    }

    /// Per partition of `channel`'s topic, the oldest offset still in the channel's window
    /// (its low watermark). With [`Engine::owed_outputs`], what a consumer may not commit past.
    pub fn low_watermarks(&self, channel: Channel) -> BTreeMap<i32, i64> {
        let mut low = self.windows[channel_index(channel)].oldest_offset_per_partition();
        // Events held for the dimension quorum are in no window yet, and must be re-read
        // after a crash.
        for (partition, offset) in self.held_offsets(channel) {
            let e = low.entry(partition).or_insert(offset);
            *e = (*e).min(offset);
        }
        low
    }

    fn held_offsets(&self, channel: Channel) -> impl Iterator<Item = (i32, i64)> + '_ {
        self.unlocked
            .iter()
            .filter(move |h| h.record.channel == channel)
            .filter_map(|h| h.record.partition.zip(h.record.offset))
    }

    /// Per partition of `channel`'s topic, the oldest offset whose output is still owed
    /// (unlabeled events waiting for a first model).
    pub fn owed_outputs(&self, channel: Channel) -> BTreeMap<i32, i64> {
        let mut low = BTreeMap::new();
        let waiting = self
            .pending
            .iter()
            .filter_map(|w| w.origin.filter(|o| o.channel == channel))
            .map(|o| (o.partition, o.offset));
        for (partition, offset) in waiting.chain(self.held_offsets(channel)) {
            let e = low.entry(partition).or_insert(offset);
            *e = (*e).min(offset);
        }
        low
    }

    fn reject(
        &mut self,
        record: &Record,
        headers: impl FnOnce() -> Vec<(String, String)>,
        rejection: Rejection,
    ) -> Result<(), EngineError> {
        let reason = rejection.reason.as_str();
        if matches!(
            rejection.reason,
            RejectReason::TsOutOfRange | RejectReason::DimensionTooLarge
        ) {
            // Not a malformed event but one that would have switched the daemon off.
            tracing::warn!(channel = record.channel.as_str(), reason, detail = %rejection.detail, "event to the DLQ");
        } else {
            tracing::debug!(channel = record.channel.as_str(), reason, detail = %rejection.detail, "event to the DLQ");
        }
        self.metrics.dlq.with_label_values(&[reason]).inc();
        self.count(record.channel, EventOutcome::Rejected);
        if record.channel == Channel::Unlabeled && !self.scores {
            return Ok(());
        }
        let record = Record {
            headers: headers(),
            ..record.clone()
        };
        self.outputs
            .dead_letter(&DlqRecord::new(record, rejection))?;
        Ok(())
    }

    fn emit(&mut self, output: ScoreOutput, origin: Option<Origin>) -> Result<(), EngineError> {
        Ok(self.outputs.score(output, origin)?)
    }

    /// Emits `event` with `"status": "unscored"` and counts it.
    fn emit_unscored(
        &mut self,
        event: &Event,
        origin: Option<Origin>,
        reason: UnscoredReason,
    ) -> Result<(), EngineError> {
        self.emit(ScoreOutput::unscored(event, reason), origin)?;
        self.count(Channel::Unlabeled, EventOutcome::Unscored);
        if let Some(c) = self.unscored_counters.get(reason as usize) {
            c.inc();
        }
        Ok(())
    }

    /// Live sources: the wall clock, at least once per poll round. Events that arrived since
    /// the last tick start their wall-clock wait now; those waiting `scoring.max_wait` since
    /// their first tick (or by event time) are emitted unscored.
    pub fn tick(&mut self, now: Instant) -> Result<(), EngineError> {
        if !self.unlocked.is_empty() {
            let since = *self.held_since.get_or_insert(now);
            if now.saturating_duration_since(since) >= self.config.scoring.max_wait.0 {
                if let Some(dim) = self.most_common_held_dimension() {
                    self.lock_dimension(dim, "scoring.max_wait passed before the quorum")?;
                }
            }
        }
        // Unstamped events are the newest: stamp from the back.
        for w in self.pending.iter_mut().rev() {
            if w.seen_at.is_some() {
                break;
            }
            w.seen_at = Some(now);
        }
        self.ask_waiting_retry(now);
        self.expire_waiting(Some(now))
    }

    /// Before a first model, a refused first retrain would leave the waiting events to
    /// `scoring.max_wait` when the input pauses (nothing then moves the count schedule): once
    /// the oldest has waited half of it on the wall clock and the windows grew since the last
    /// attempt, a retry is due, at most one per half `scoring.max_wait`. Replays never tick,
    /// so their results do not depend on the wall clock.
    fn ask_waiting_retry(&mut self, now: Instant) {
        if self.waiting_retry
            || self.last_retrain_ts.is_none()
            || self.events_since_attempt == 0
            || self.registry.active().is_some()
        {
            return;
        }
        let half = self.config.scoring.max_wait.0 / 2;
        let Some(seen) = self.pending.front().and_then(|w| w.seen_at) else {
            return;
        };
        let rested = self
            .waiting_retry_at
            .map_or(true, |at| now.saturating_duration_since(at) >= half);
        if rested && now.saturating_duration_since(seen) >= half {
            tracing::info!(
                waiting = self.pending.len(),
                new_window_events = self.events_since_attempt,
                "events have waited half of scoring.max_wait for a first model; retrying the retrain"
            );
            self.waiting_retry = true;
            self.waiting_retry_at = Some(now);
        }
    }

    /// Emits the waiting events whose `scoring.max_wait` has passed by the event-time clock,
    /// or by `now` on the wall clock, as unscored (`no_accepted_model`). Both waits grow
    /// along the queue, so the expired events are a prefix of it.
    fn expire_waiting(&mut self, now: Option<Instant>) -> Result<(), EngineError> {
        let Some(clock) = self.newest_ts else {
            return Ok(());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        let max_wait = self.config.scoring.max_wait.0;
        while let Some(w) = self.pending.front() {
            let by_event_time = clock.saturating_sub(w.arrived_ts) >= self.max_wait_ms;
            let by_wall_clock = matches!(
                (now, w.seen_at),
                (Some(now), Some(seen)) if now.saturating_duration_since(seen) >= max_wait
            );
            if !(by_event_time || by_wall_clock) {
                break;
            }
            if let Some(w) = self.pending.pop_front() {
                self.emit_unscored(&w.event, w.origin, UnscoredReason::NoAcceptedModel)?;
            }
        }
        self.metrics.unscored_buffer.set(self.pending.len() as i64);
        Ok(())
    }

    fn score_unlabeled(
        &mut self,
        event: &Event,
        origin: Option<Origin>,
    ) -> Result<(), EngineError> {
        let Some(model) = self.registry.active() else {
            if self.pending.len() < self.config.scoring.buffer_before_model {
                self.pending.push_back(Waiting {
                    event: event.clone(),
                    origin,
                    arrived_ts: self.newest_ts.unwrap_or(event.ts),
                    seen_at: None,
                });
                self.count(Channel::Unlabeled, EventOutcome::Buffered);
            } else {
                self.emit_unscored(event, origin, UnscoredReason::BufferFull)?;
            }
            self.metrics.unscored_buffer.set(self.pending.len() as i64);
            return Ok(());
        };
        let timed = self.untimed_scores == 0;
        self.untimed_scores = (self.untimed_scores + 1) % LATENCY_SAMPLE_EVERY;
        let started = timed.then(Instant::now);
        match score_one_with(&model, event, self.prescore.take()) {
            Ok(out) => {
                if let Some(started) = started {
                    self.metrics
                        .scoring_latency
                        .observe(started.elapsed().as_secs_f64());
                }
                self.recent_flags.push(out.flagged == Some(true));
                self.count(Channel::Unlabeled, EventOutcome::Scored);
                let detection = match (&mut self.drift, out.score) {
                    (Some(drift), Some(score)) => drift.observe(score),
                    _ => None,
                };
                let feature_detection = self
                    .feature_drift
                    .as_mut()
                    .and_then(|drift| drift.observe(&event.x));
                self.metrics
                    .model_age
                    .set((event.ts - model.meta.trained_at_ms) as f64 / 1000.0);
                self.emit(out, origin)?;
                self.publish_rates(&model);
                if let Some(detection) = detection {
                    self.on_drift(&model, detection, event.ts);
                } else if let Some(detection) = feature_detection {
                    self.on_feature_drift(&model, detection, event.ts);
                }
            }
            // The dimension is locked to the model's, so this is unreachable in practice;
            // still, an event is never dropped silently.
            Err(e) => {
                tracing::warn!(id = %event.id, error = %e, "scoring failed");
                self.emit_unscored(event, origin, UnscoredReason::ScoringFailed)?;
            }
        }
        Ok(())
    }

    fn observe_feedback(&mut self, event: &Event) {
        let Some(model) = self.registry.active() else {
            return;
        };
        if let Some(flagged) = crate::engine::scoring::flags(&model, event, self.prescore.take()) {
            self.feedback.push(flagged);
            let flagged = self.feedback.flagged;
            self.metrics
                .fpr_observed_negatives
                .set(self.feedback.len() as i64);
            self.metrics.fpr_observed_flagged.set(flagged as i64);
            self.metrics.fpr_observed.set(self.feedback.rate());
            let p_value = self.feedback.p_value(self.config.model.tau);
            self.metrics.fpr_observed_p_value.set(p_value);
        }
    }

    /// Counts `outcome` in the deprecated `neyman_events_total` and in the family it belongs
    /// to: intake (`neyman_intake_events_total`) or answer (`neyman_answers_total`); a
    /// rejected unlabeled event is both (its dead letter answers it on a scoring daemon).
    fn count(&self, channel: Channel, outcome: EventOutcome) {
        let at = channel_index(channel) * EventOutcome::ALL.len() + outcome as usize;
        if let Some(c) = self.event_counters.get(at) {
            c.inc();
        }
        let (intake, answer) = match outcome {
            EventOutcome::Windowed => (Some(Intake::Windowed), None),
            EventOutcome::Restored => (Some(Intake::Restored), None),
            EventOutcome::Duplicate => (Some(Intake::Duplicate), None),
            EventOutcome::Expired => (Some(Intake::Expired), None),
            EventOutcome::Rejected => (
                Some(Intake::Rejected),
                (channel == Channel::Unlabeled && self.scores).then_some(Answer::DeadLettered),
            ),
            EventOutcome::Scored => (None, Some(Answer::Scored)),
            EventOutcome::Unscored => (None, Some(Answer::Unscored)),
            EventOutcome::Buffered => (None, None),
        };
        if let Some(i) = intake {
            self.count_intake(channel, i);
        }
        if let Some(c) = answer.and_then(|a| self.answer_counters.get(a as usize)) {
            c.inc();
        }
    }

    fn count_intake(&self, channel: Channel, intake: Intake) {
        let at = channel_index(channel) * INTAKE_OUTCOMES.len() + intake as usize;
        if let Some(c) = self.intake_counters.get(at) {
            c.inc();
        }
    }

    fn publish_window(&self, channel: Channel) {
        let i = channel_index(channel);
        if let Some((events, bytes)) = self.window_gauges.get(i) {
            events.set(self.windows[i].len() as i64);
            bytes.set(self.windows[i].bytes() as i64);
        }
    }

    fn publish_rates(&self, model: &StoredModel) {
        if self.recent_flags.len() == 0 {
            return;
        }
        let rate = self.recent_flags.rate();
        self.metrics.flag_rate.set(rate);
        let tpr = model.model.threshold().and_then(|t| t.tpr_estimate);
        if let (Some(prior), Some(tpr)) = (self.config.model.prior, tpr) {
            let estimate = ((rate - prior * tpr) / (1.0 - prior)).clamp(0.0, 1.0);
            self.metrics.fpr_pu_estimate.set(estimate);
        }
    }

    fn retrain_due(&self) -> bool {
        self.due().is_some()
    }

    /// Which retrain is due now, if any.
    fn due(&self) -> Option<Due> {
        if !self.trains {
            return None;
        }
        let r = &self.config.retrain;
        let [p, u, _] = &self.windows;
        if p.len() < r.min_positive || u.len() < r.min_unlabeled {
            return None;
        }
        let Some(last) = self.last_retrain_ts else {
            return Some(Due::Scheduled);
        };
        let by_count = r.every_events > 0 && self.new_window_events >= r.every_events;
        let by_time = match (r.every, self.newest_ts) {
            (Some(every), Some(now)) => {
                now.saturating_sub(last) >= i64::try_from(every.0.as_millis()).unwrap_or(i64::MAX)
            }
            _ => false,
        };
        if self.early_retrain || by_count || by_time {
            return Some(Due::Scheduled);
        }
        if self.registry.active().is_some() {
            return None;
        }
        if self.first_model_retry > 0 && self.events_since_attempt >= self.first_model_retry {
            return Some(Due::FirstModelRetry);
        }
        self.waiting_retry.then_some(Due::WaitingRetry)
    }

    /// Resets the schedule as a retrain starts. A retry for a first model leaves the
    /// schedule where it was (the next scheduled retrain comes when it would have), and a
    /// later retry waits twice as long.
    fn start_retrain_schedule(&mut self) {
        let due = self.due();
        self.events_since_attempt = 0;
        self.waiting_retry = false;
        match due {
            Some(Due::FirstModelRetry) => {
                self.first_model_retry = self.first_model_retry.saturating_mul(2);
                return;
            }
            Some(Due::WaitingRetry) => return,
            Some(Due::Scheduled) | None => {}
        }
        self.new_window_events = 0;
        self.early_retrain = false;
        self.last_retrain_ts = self.newest_ts;
    }

    /// Trains on the window snapshot, gates, and swaps, on this thread; counts and logs the
    /// outcome.
    pub fn retrain(&mut self) -> RetrainOutcome {
        let started = Instant::now();
        self.start_retrain_schedule();
        let (outcome, fallback) = match self.prepare_retrain(started) {
            Ok(job) => {
                let trained = job.run();
                let fallback = trained.fallback();
                (self.finish_retrain(trained), fallback)
            }
            Err(outcome) => (outcome, None),
        };
        self.count_retrain(&outcome, started, fallback.as_deref());
        outcome
    }

    /// With deferred retrains: the due retrain, if one is due and none is running. Run it
    /// anywhere ([`RetrainJob::run`]) and hand the result to [`Engine::complete_retrain`];
    /// meanwhile events keep being scored by the active model. A retrain that cannot start
    /// (no dimension yet, an invalid configuration) is counted as failed here.
    pub fn due_retrain(&mut self) -> Option<RetrainJob> {
        if self.training || !self.retrain_due() {
            return None;
        }
        let started = Instant::now();
        self.start_retrain_schedule();
        match self.prepare_retrain(started) {
            Ok(job) => {
                self.training = true;
                Some(job)
            }
            Err(outcome) => {
                self.count_retrain(&outcome, started, None);
                None
            }
        }
    }

    /// Whether [`Engine::due_retrain`] would start one now (cheap; no copying).
    pub fn retrain_wanted(&self) -> bool {
        !self.training && self.retrain_due()
    }

    /// Gates and installs the result of a deferred retrain; counts and logs the outcome.
    pub fn complete_retrain(&mut self, trained: TrainedRetrain) -> RetrainOutcome {
        self.training = false;
        let started = trained.job.started;
        let fallback = trained.fallback();
        let outcome = self.finish_retrain(trained);
        self.count_retrain(&outcome, started, fallback.as_deref());
        outcome
    }

    /// A deferred retrain that will never complete (its thread died): counted as failed, and
    /// the next due retrain may start.
    pub fn abandon_retrain(&mut self, detail: String) {
        self.training = false;
        self.count_retrain(&RetrainOutcome::Failed { detail }, Instant::now(), None);
    }

    /// Counts and logs how a retrain ended; `fallback`: why CutS3VM's fallback trained
    /// instead (its swapped model counts as `fallback`).
    fn count_retrain(&self, outcome: &RetrainOutcome, started: Instant, fallback: Option<&str>) {
        let algorithm = self.config.model.learner_spec().algorithm.name();
        if let (Some(why), false) = (fallback, matches!(outcome, RetrainOutcome::Swapped { .. })) {
            tracing::info!(why, "the fallback learner trained this retrain");
        }
        let result = match outcome {
            RetrainOutcome::Swapped { version } => match fallback {
                Some(why) => {
                    tracing::warn!(version, why, "the fallback learner's model swapped in");
                    "fallback"
                }
                None => {
                    tracing::info!(version, "retrained model swapped in");
                    "swapped"
                }
            },
            RetrainOutcome::Rejected { reason, detail } => {
                tracing::warn!(reason = reason.as_str(), %detail, "retrained model rejected by the gate");
                self.metrics
                    .retrain_rejections
                    .with_label_values(&[reason.as_str()])
                    .inc();
                "rejected"
            }
            RetrainOutcome::Failed { detail } => {
                tracing::warn!(%detail, "retrain failed");
                self.metrics
                    .retrain_failures
                    .with_label_values(&["error"])
                    .inc();
                "failed"
            }
            RetrainOutcome::TimedOut { limit } => {
                tracing::warn!(
                    limit = ?limit,
                    "retrain stopped: retrain.time_limit ran out; the active model keeps serving \
                     and the next retrain starts from the last finished one"
                );
                self.metrics
                    .retrain_failures
                    .with_label_values(&["time_limit"])
                    .inc();
                "failed"
            }
            RetrainOutcome::Cancelled => {
                tracing::info!("retrain cancelled");
                "cancelled"
            }
        };
        if !matches!(
            outcome,
            RetrainOutcome::Cancelled
                | RetrainOutcome::Failed { .. }
                | RetrainOutcome::TimedOut { .. }
        ) {
            self.metrics
                .retrain_duration
                .with_label_values(&[algorithm])
                .observe(started.elapsed().as_secs_f64());
        }
        self.metrics.retrains.with_label_values(&[result]).inc();
    }

    /// Everything a retrain needs, copied out of the windows: the snapshot (scaled by the
    /// kept scaler, fitted here on the first one's training events), the checked solver, the
    /// threshold spec and the warm start.
    fn prepare_retrain(&mut self, started: Instant) -> Result<RetrainJob, RetrainOutcome> {
        let Some(n_features) = self.dim else {
            return Err(RetrainOutcome::Failed {
                detail: "no valid event has fixed the feature dimension yet".into(),
            });
        };
        let snapshot = self
            .training_snapshot(n_features)
            .map_err(|detail| RetrainOutcome::Failed { detail })?;
        let with_negatives = snapshot.data.count(Label::Negative) > 0;
        let mode = if with_negatives {
            "positive_negative"
        } else {
            "positive_unlabeled"
        };
        tracing::debug!(mode, rows = snapshot.data.len(), "training snapshot");
        let spec = self.config.model.learner_spec();
        // Fitted on the training events only: held-out events calibrate the threshold. With
        // "hash" they are the same events on every retrain, with "recent" a later snapshot's
        // are newer than this one's training events (late arrivals aside), so a kept scaler
        // never saw one either.
        let learner = self.learner.get_or_insert_with(|| Learner {
            scaler: spec.training_scaler(&snapshot.data, &snapshot.held_out),
            previous: None,
            rank: None,
            retrains: 0,
        });
        // CutS3VM's CCCP is local: a periodic cold start lets it leave an optimum the windows
        // have moved away from.
        let cold = self
            .config
            .model
            .cuts3vm_table()
            .is_some_and(|c| learner.retrains % c.cold_every == 0);
        learner.retrains += 1;
        let scaled = Dataset {
            rows: learner.scaler.transform(&snapshot.data.rows),
            labels: snapshot.data.labels.clone(),
            ids: snapshot.data.ids.clone(),
        };
        let rows = snapshot.data.len();
        Ok(RetrainJob {
            started,
            n_features,
            with_negatives,
            spec,
            snapshot,
            scaled,
            scaler: learner.scaler.clone(),
            previous: learner.previous.clone().filter(|_| !cold),
            fallback: self.config.model.fallback(),
            tuning: learner
                .rank
                .filter(|r| r.reusable(rows))
                .map(|r| (r.rank_tau, r.reg)),
            cancel: Arc::clone(&self.cancel),
            time_limit: self.config.retrain.time_limit.0,
        })
    }

    /// The gate, the save and the swap of a trained job.
    fn finish_retrain(&mut self, trained: TrainedRetrain) -> RetrainOutcome {
        let TrainedRetrain {
            job,
            fitted,
            timed_out,
        } = trained;
        if self.cancel.load(Ordering::Relaxed) {
            return RetrainOutcome::Cancelled;
        }
        // Before the warm start is replaced: a stopped solve is no start for the next one.
        if timed_out {
            return RetrainOutcome::TimedOut {
                limit: job.time_limit,
            };
        }
        // Also when the certificate is refused: the bounds say why (docs/certificates.md §5).
        let prior = match &fitted {
            Ok(f) => f.prior,
            Err(CalibrateError::Uncertified { bounds, .. }) => Some(**bounds),
            Err(_) => None,
        };
        if let Some(b) = prior {
            self.metrics.prior_estimate.set(b.estimate);
            self.metrics.prior_lower_bound.set(b.lower);
            self.metrics.prior_upper_bound.set(b.upper);
        }
        let (fit, threshold, algorithm, rank_choice) = match fitted {
            Ok(f) => (f.fit, f.threshold, f.algorithm, f.rank_choice),
            // No certifiable threshold (too few calibration events, a prior interval too wide)
            // is the gate's "its threshold exists" failing, not a training fault.
            Err(e @ (CalibrateError::Threshold(_) | CalibrateError::Uncertified { .. })) => {
                return RetrainOutcome::Rejected {
                    reason: GateReason::NoThreshold,
                    detail: e.to_string(),
                }
            }
            Err(e) => {
                return RetrainOutcome::Failed {
                    detail: e.to_string(),
                }
            }
        };
        self.metrics.solver_iterations.inc_by(fit.iterations());
        self.metrics
            .solver_kernel_evaluations
            .inc_by(fit.kernel_evaluations());
        if !finite_solution(fit.expansion(), threshold.as_ref()) {
            return RetrainOutcome::Rejected {
                reason: GateReason::NonFinite,
                detail: "the solution has non-finite coefficients or threshold".into(),
            };
        }
        if let Some(learner) = self.learner.as_mut() {
            learner.previous = Some(fit.clone());
        }
        let model = model_of(
            &algorithm,
            job.scaler,
            fit,
            Fingerprint::of(&job.scaled),
            threshold,
        );
        let snapshot = job.snapshot;
        let rejection = self.gate(&model, &snapshot);
        self.remember_rank_choice(rank_choice, &model, rejection.as_ref(), snapshot.data.len());
        if let Some(rejection) = rejection {
            return rejection;
        }
        let version = match self.store.next_version() {
            Ok(v) => v,
            Err(e) => {
                return RetrainOutcome::Failed {
                    detail: e.to_string(),
                }
            }
        };
        let n_features = job.n_features;
        let stored = StoredModel::new(
            Provenance {
                version,
                trained_at_ms: snapshot.newest_ts,
                config_fingerprint: self.fingerprint(n_features),
                n_features,
                window_sizes: snapshot.sizes,
            },
            model,
        );
        if let Err(e) = self.store.save(&stored) {
            return RetrainOutcome::Failed {
                detail: e.to_string(),
            };
        }
        let reference_rows = held_out_unlabeled(&snapshot, self.config.drift.window);
        let reference = self.drift.as_ref().map_or_else(Vec::new, |_| {
            let mut scores = vec![0.0; reference_rows.len()];
            stored
                .model
                .score_batch(&snapshot.data.rows.select(&reference_rows), &mut scores);
            scores
        });
        stored.publish(&self.metrics);
        self.registry.install(stored);
        if self.config.model.calibration == CalibrationName::Recent {
            let rows = 0..snapshot.data.len();
            let ids = &snapshot.data.ids;
            // An id on two labelled channels (both copies are rows) is held out only if both are.
            let trained: HashSet<&str, foldhash::fast::RandomState> = rows
                .clone()
                .filter(|&i| !snapshot.held_out[i])
                .map(|i| ids[i].as_str())
                .collect();
            let held: BTreeSet<String> = rows
                .filter(|&i| snapshot.held_out[i] && !trained.contains(ids[i].as_str()))
                .map(|i| ids[i].clone())
                .collect();
            if let Err(e) = self.store.save_held_out(version, &held) {
                tracing::warn!(
                    version,
                    error = %e,
                    "cannot persist the held-out ids; after a restart they count as trained on"
                );
            }
            self.recent_held_out
                .insert(version, held.into_iter().collect());
            let kept: BTreeSet<u64> = self
                .registry
                .models()
                .iter()
                .map(|(m, _)| m.meta.version)
                .collect();
            self.recent_held_out.retain(|v, _| kept.contains(v));
        }
        self.reset_drift(reference, Some((&snapshot.data.rows, &reference_rows)));
        self.negatives_since_calibration = 0;
        self.positives_since_calibration = 0;
        if let Err(e) = self.flush_pending() {
            return RetrainOutcome::Failed {
                detail: e.to_string(),
            };
        }
        RetrainOutcome::Swapped { version }
    }

    /// Keeps a new ranking-depth choice, or judges the kept one by the model it gave: a
    /// refused useless model (no gain, constant scores, nothing flagged) or a TPR estimate
    /// below the search's beyond its noise ([`RankMemory::dropped`]) means it stopped paying,
    /// and the next retrain searches again.
    fn remember_rank_choice(
        &mut self,
        choice: Option<RankChoice>,
        model: &Model,
        rejection: Option<&RetrainOutcome>,
        rows: usize,
    ) {
        let tpr = model
            .threshold()
            .and_then(|t| Some((t.tpr_estimate?, t.calibration_positives)));
        let Some(learner) = self.learner.as_mut() else {
            return;
        };
        if let Some(choice) = choice {
            tracing::info!(
                rank_tau = choice.rank_tau,
                reg = choice.reg,
                criterion = choice.criterion,
                tried = ?choice
                    .tried
                    .iter()
                    .map(|t| (t.rank_tau, t.reg, t.validation_tpr))
                    .collect::<Vec<_>>(),
                "tfpl ranking depth and R chosen"
            );
            self.metrics.rank_tau_searches.inc();
            self.metrics.rank_tau.set(choice.rank_tau);
            self.metrics.tfpl_reg.set(choice.reg);
            learner.rank = Some(RankMemory {
                rank_tau: choice.rank_tau,
                reg: choice.reg,
                tpr_at_choice: tpr,
                reused: 0,
                rows_at_choice: rows,
            });
            return;
        }
        let Some(memory) = learner.rank.as_mut() else {
            return;
        };
        memory.reused += 1;
        let useless = matches!(
            rejection,
            Some(RetrainOutcome::Rejected {
                reason: GateReason::NoGain | GateReason::ConstantScores | GateReason::FlagsNothing,
                ..
            })
        );
        let dropped = matches!((tpr, memory.tpr_at_choice),
            (Some(now), Some(then)) if RankMemory::dropped(then, now));
        if useless || dropped {
            tracing::info!(
                rank_tau = memory.rank_tau,
                ?tpr,
                tpr_at_choice = ?memory.tpr_at_choice,
                "tfpl ranking depth stopped paying; the next retrain searches again"
            );
            learner.rank = None;
        }
    }

    /// Installs a model a trainer published (scorer role): it must be trained under this
    /// configuration and dimension, newer than the active one, finite, and pass the gate's
    /// data-free checks (`certify`). Events waiting for a first model are scored.
    /// Returns the version installed, or why not.
    ///
    /// The trainer also publishes its fresh thresholds (step 7 of the README's *How the daemon
    /// works*): the active model again with a higher `threshold_version`. That replaces the
    /// active model's threshold when the version and every coefficient are the active one's,
    /// with the trainer's policy: a fresh threshold that flags none of its fresh positives is
    /// installed all the same (the old one no longer holds τ).
    pub fn install_remote(&mut self, stored: StoredModel) -> Result<u64, String> {
        if let Some(active) = self.registry.active() {
            if stored.meta.version == active.meta.version
                && stored.threshold_version > active.threshold_version
            {
                return self.install_remote_threshold(&active, stored);
            }
        }
        let n = stored.meta.n_features;
        if let Some(d) = self.dim.filter(|&d| d != n) {
            return Err(format!("it has {n} features, the stream {d}"));
        }
        trained_under(&stored, &self.accepted_fingerprints(n))?;
        if let Some(active) = self.registry.active() {
            if stored.meta.version <= active.meta.version {
                return Err(format!(
                    "version {} is not newer than the active {}",
                    stored.meta.version, active.meta.version
                ));
            }
        }
        self.servable(&stored.model)?;
        let version = stored.meta.version;
        if self.dim.is_none() {
            self.dim = Some(n);
        }
        stored.publish(&self.metrics);
        self.registry.install(stored);
        self.reset_drift(Vec::new(), None);
        self.flush_pending().map_err(|e| e.to_string())?;
        Ok(version)
    }

    /// A fresh threshold of the active model from its trainer ([`Engine::install_remote`]).
    fn install_remote_threshold(
        &mut self,
        active: &StoredModel,
        stored: StoredModel,
    ) -> Result<u64, String> {
        if stored.meta.config_fingerprint != active.meta.config_fingerprint
            || stored.model.expansion() != active.model.expansion()
        {
            return Err(format!(
                "threshold version {} of model {} does not carry the active model's coefficients",
                stored.threshold_version, stored.meta.version
            ));
        }
        let Some(threshold) = stored.model.threshold().cloned() else {
            return Err("a fresh threshold without a threshold".into());
        };
        if !threshold.threshold.is_finite() {
            return Err("a non-finite fresh threshold".into());
        }
        let mut copy = active.scoring_only();
        copy.model.set_threshold(threshold);
        copy.threshold_version = stored.threshold_version;
        let version = copy.meta.version;
        let Some(installed) = self.registry.replace_active(copy) else {
            return Err(format!("model {version} is no longer active"));
        };
        installed.publish(&self.metrics);
        self.set_stale(false);
        self.threshold_unsaved = true;
        self.save_fresh_threshold(false);
        Ok(version)
    }

    /// Persists the active model's fresh threshold beside its file: now with `now`, else when
    /// the last write is [`THRESHOLD_SAVE_EVERY`] old (a recalibration every few dozen
    /// negatives would otherwise write and sync a file as often). A failed write is logged
    /// and left for the next fresh threshold.
    fn save_fresh_threshold(&mut self, now: bool) {
        if !self.threshold_unsaved
            || (!now
                && self
                    .threshold_saved_at
                    .is_some_and(|t| t.elapsed() < THRESHOLD_SAVE_EVERY))
        {
            return;
        }
        self.threshold_unsaved = false;
        self.threshold_saved_at = Some(Instant::now());
        let Some(active) = self.registry.active() else {
            return;
        };
        if active.threshold_version == 0 {
            return;
        }
        if let Err(e) = self.store.save_threshold(&active) {
            tracing::warn!(
                version = active.meta.version,
                threshold_version = active.threshold_version,
                error = %e,
                "cannot persist the fresh threshold; a restart serves an older one"
            );
        }
    }

    /// A line of a recorded stream that is not a record: counted with the dead letters
    /// (`invalid_record`), logged, and written to the dead-letter sink.
    pub fn dead_letter_line(&mut self, letter: &UnreadableLine) -> Result<(), EngineError> {
        tracing::warn!(
            file = %letter.source.display(),
            line = letter.line,
            detail = %letter.detail,
            "recorded-stream line dead-lettered: not a record"
        );
        self.metrics
            .dlq
            .with_label_values(&[letter.reason.as_str()])
            .inc();
        Ok(self.outputs.unreadable_line(letter)?)
    }

    /// Scores the events buffered before the first model, in arrival order.
    fn flush_pending(&mut self) -> Result<(), EngineError> {
        let pending = std::mem::take(&mut self.pending);
        self.metrics.unscored_buffer.set(0);
        for w in &pending {
            self.score_unlabeled(&w.event, w.origin)?;
        }
        Ok(())
    }

    /// Whether a model that did not come from this engine's own retrain (a stored file on
    /// resume, a trainer's upload) may serve: every number finite, and the gate's data-free
    /// checks ([`Engine::certify`]). A file's checksum only says the bytes are the ones written,
    /// not that the model in them is usable.
    fn servable(&self, model: &Model) -> Result<(), String> {
        let e = model.expansion();
        // Support vectors too: a retrain's come from checked events, a file's do not.
        if !(finite_solution(e, model.threshold()) && e.support.all_finite()) {
            return Err("non-finite coefficients, support vectors or threshold".into());
        }
        if let Err(k) = e.kernel.check() {
            return Err(k.to_string());
        }
        match self.certify(model) {
            Some((reason, detail)) => Err(format!("{}: {detail}", reason.as_str())),
            None => Ok(()),
        }
    }

    /// The gate's checks that need no data: a threshold exists and certifies τ (oob: its
    /// estimate is within `gate.oob_slack`).
    fn certify(&self, model: &Model) -> Option<(GateReason, String)> {
        let cfg = &self.config.model;
        let e = model.expansion();
        if e.coef.iter().all(|&c| c == 0.0) {
            return Some((
                GateReason::ConstantScores,
                format!(
                    "every coefficient is 0: the model scores every event {}",
                    e.bias
                ),
            ));
        }
        if model.degenerate() {
            return Some((
                GateReason::NoGain,
                format!(
                    "the solution gains nothing over a constant scorer (P(w) = {}): the ranking depth rank_tau is too shallow for this data",
                    model.report()["primal_objective"]
                ),
            ));
        }
        let Some(t) = model.threshold() else {
            if cfg.threshold == Some(ThresholdName::None) {
                return None;
            }
            return Some((GateReason::NoThreshold, "the model has no threshold".into()));
        };
        if t.tpr_estimate == Some(0.0) {
            return Some((
                GateReason::FlagsNothing,
                format!(
                    "threshold {} flags none of the {} calibration positives",
                    t.threshold, t.calibration_positives
                ),
            ));
        }
        match t.method {
            ThresholdMethod::Oob => {
                (t.fpr_estimate > cfg.tau + self.config.gate.oob_slack).then(|| {
                    (
                        GateReason::OobEstimate,
                        format!(
                            "oob fpr_estimate {:.4} > tau {} + gate.oob_slack {}",
                            t.fpr_estimate, cfg.tau, self.config.gate.oob_slack
                        ),
                    )
                })
            }
            _ => match t.fpr_bound {
                Some(b) if b <= cfg.tau => None,
                bound => Some((
                    GateReason::FprBound,
                    format!("fpr_bound {bound:?} is not ≤ tau {}", cfg.tau),
                )),
            },
        }
    }

    fn gate(&self, model: &Model, snapshot: &TrainingSnapshot) -> Option<RetrainOutcome> {
        if let Some((reason, detail)) = self.certify(model) {
            return Some(RetrainOutcome::Rejected { reason, detail });
        }
        if let Some(detail) = constant_on(model, &snapshot.data) {
            return Some(RetrainOutcome::Rejected {
                reason: GateReason::ConstantScores,
                detail,
            });
        }
        let t = model.threshold()?;
        let active = self.registry.active()?;
        let since = active.meta.trained_at_ms;
        // Held out by the new model, newer than the active one's snapshot, and not trained on
        // by it through an older unlabeled copy.
        let data = &snapshot.data;
        let recent: Vec<usize> = (0..data.len())
            .filter(|&i| {
                let channel = match data.labels[i] {
                    Label::Positive => Channel::Positive,
                    Label::Unlabeled => Channel::Unlabeled,
                    Label::Negative => Channel::Negative,
                };
                snapshot.held_out[i]
                    && snapshot.ts[i] > since
                    && self.unseen(channel, (&data.ids[i], snapshot.ts[i]), &active)
            })
            .collect();
        let recent_data = snapshot.data.select(&recent);
        let new_np = self.np_estimate(model, t, &recent_data)?;
        let old_np = self.np_estimate(&active.model, active.model.threshold()?, &recent_data)?;
        if new_np > old_np + self.config.gate.margin {
            return Some(RetrainOutcome::Rejected {
                reason: GateReason::NpScore,
                detail: format!(
                    "NP-score {new_np:.4} on {} recent calibration events is worse than the active model's {old_np:.4} by more than gate.margin {}",
                    recent.len(),
                    self.config.gate.margin
                ),
            });
        }
        None
    }

    /// NP-score max(fpr, τ)/τ − tpr of `model` on held-out events: FPR from negatives, else the
    /// PU estimate (flag rate of unlabeled − π·TPR)/(1 − π); `None` without the events needed.
    fn np_estimate(&self, model: &Model, t: &ThresholdResult, data: &Dataset) -> Option<f64> {
        let tau = self.config.model.tau;
        let flagged_share = |label: Label| -> Option<f64> {
            let rows = data.indices_of(label);
            if rows.is_empty() {
                return None;
            }
            let mut s = vec![0.0; rows.len()];
            model.score_batch(&data.rows.select(&rows), &mut s);
            Some(s.iter().filter(|&&v| t.is_positive(v)).count() as f64 / rows.len() as f64)
        };
        let tpr = flagged_share(Label::Positive)?;
        let fpr = match flagged_share(Label::Negative) {
            Some(f) => f,
            None => {
                let prior = self.config.model.prior?;
                let rate = flagged_share(Label::Unlabeled)?;
                ((rate - prior * tpr) / (1.0 - prior)).clamp(0.0, 1.0)
            }
        };
        Some(np_score(fpr, tpr, tau))
    }

    fn training_snapshot(&self, n_features: usize) -> Result<TrainingSnapshot, String> {
        let r = &self.config.retrain;
        let [p, u, n] = &self.windows;
        let use_negatives = n.len() >= r.min_negative;
        // Every row is copied once, from the windows' entries into the snapshot's rows.
        let checked = |w| Window::checked(w, n_features).map_err(|e| e.to_string());
        let positives: Vec<&Entry> = checked(p)?.collect();
        let unlabeled = checked(u)?;
        let negatives: Vec<&Entry> = if use_negatives {
            checked(n)?.collect()
        } else {
            Vec::new()
        };
        let labelled: HashSet<&str, foldhash::fast::RandomState> = positives
            .iter()
            .chain(&negatives)
            .map(|e| e.id.as_str())
            .collect();
        let unlabeled: Vec<&Entry> = unlabeled
            .filter(|e| !labelled.contains(e.id.as_str()))
            .collect();
        let sizes = [positives.len(), unlabeled.len(), negatives.len()];
        let mut labels = vec![Label::Positive; sizes[0]];
        labels.extend(std::iter::repeat(Label::Unlabeled).take(sizes[1]));
        labels.extend(std::iter::repeat(Label::Negative).take(sizes[2]));
        let entries: Vec<&Entry> = positives
            .into_iter()
            .chain(unlabeled)
            .chain(negatives)
            .collect();
        let ids: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
        let ts: Vec<i64> = entries.iter().map(|e| e.ts).collect();
        let rows = features_to_rows(entries.iter().map(|e| &e.x), n_features)
            .map_err(|e| e.to_string())?;
        let ranking_only = self.config.model.threshold == Some(ThresholdName::None);
        let percent = if ranking_only {
            0
        } else {
            self.config.model.calibration_percent
        };
        let held_out = match self.config.model.calibration {
            CalibrationName::Hash => ids.iter().map(|id| in_calibration(id, percent)).collect(),
            CalibrationName::Recent => {
                // Channel by channel: the rows are the positives, the unlabeled, the negatives.
                let mut held_out = Vec::with_capacity(ids.len());
                let mut start = 0;
                for n in sizes {
                    let end = start + n;
                    held_out.extend(newest_held_out(&ts[start..end], &ids[start..end], percent));
                    start = end;
                }
                held_out
            }
        };
        let newest_ts = ts.iter().copied().max().unwrap_or(0);
        Ok(TrainingSnapshot {
            data: Dataset { rows, labels, ids },
            ts,
            held_out,
            newest_ts,
            sizes,
        })
    }

    /// End of input (a replay's end, a shutdown): the events still waiting for a first model
    /// are emitted as unscored (`shutdown`; never dropped), then the sinks are flushed.
    pub fn finish(&mut self) -> Result<(), EngineError> {
        // Events still held for the dimension quorum are answered too.
        if let Some(dim) = self.most_common_held_dimension() {
            self.lock_dimension(dim, "the input ended before the quorum")?;
        }
        while let Some(w) = self.pending.pop_front() {
            self.emit_unscored(&w.event, w.origin, UnscoredReason::Shutdown)?;
        }
        self.metrics.unscored_buffer.set(0);
        self.save_fresh_threshold(true);
        self.flush()
    }

    pub fn flush(&mut self) -> Result<(), EngineError> {
        self.save_fresh_threshold(false);
        Ok(self.outputs.flush()?)
    }
}

/// A retrain copied out of the engine ([`Engine::due_retrain`]); [`RetrainJob::run`] is the
/// solve and the threshold, pure computation that may run on any thread.
pub struct RetrainJob {
    started: Instant,
    n_features: usize,
    snapshot: TrainingSnapshot,
    scaled: Dataset,
    scaler: Scaler,
    /// Whether the snapshot holds negatives (the default threshold method: umbrella).
    with_negatives: bool,
    /// The `[model]` settings, resolved and checked in [`RetrainJob::run`]: an `auto` prior
    /// end needs a pre-pass fit, which belongs off the engine thread.
    spec: LearnerSpec,
    previous: Option<Fit>,
    /// CutS3VM's fallback learner and the labelled events per class it needs
    /// ([`crate::config::ModelConfig::fallback`]).
    fallback: Option<(LearnerSpec, usize)>,
    /// τ-FPL's kept ranking depth and R; `None` with `rank_tau` or `reg` `"auto"`: search
    /// them.
    tuning: Option<(f64, f64)>,
    cancel: Arc<AtomicBool>,
    /// `retrain.time_limit`.
    time_limit: Duration,
}

/// A solved [`RetrainJob`], for [`Engine::complete_retrain`].
pub struct TrainedRetrain {
    job: RetrainJob,
    fitted: Result<Fitted, CalibrateError>,
    /// `retrain.time_limit` stopped it.
    timed_out: bool,
}

impl TrainedRetrain {
    /// Why CutS3VM's fallback trained instead, if it did.
    fn fallback(&self) -> Option<String> {
        self.fitted.as_ref().ok().and_then(|f| f.fallback.clone())
    }
}

/// What a retrain computed.
struct Fitted {
    fit: Fit,
    threshold: Option<ThresholdResult>,
    /// The bounds the `auto` prior ends came from.
    prior: Option<PriorBounds>,
    /// The solver that made the fit.
    algorithm: Algorithm,
    /// τ-FPL's ranking-depth search, if this retrain ran one.
    rank_choice: Option<RankChoice>,
    /// Why CutS3VM's fallback trained instead, if it did.
    fallback: Option<String>,
}

impl RetrainJob {
    /// Trains (warm-started from the previous solution) and calibrates the threshold on the
    /// held-out events. Stops early when the engine's cancel flag is set or
    /// `retrain.time_limit` runs out.
    pub fn run(self) -> TrainedRetrain {
        let (fitted, timed_out) =
            with_deadline(&self.cancel, self.time_limit, |stop| self.fit(stop));
        TrainedRetrain {
            job: self,
            fitted,
            timed_out,
        }
    }

    /// The solver from the settings (with an `auto` prior end, the π needed before training
    /// comes from the training events alone, docs/certificates.md §5), its fit and, unless
    /// `threshold = "none"` (every row trains, no threshold), the threshold.
    fn fit(&self, stop: &AtomicBool) -> Result<Fitted, CalibrateError> {
        let (spec, fallback) = self.cuts3vm_or_fallback();
        let (spec, _) =
            resolve_training_prior(&spec, &self.snapshot.data, &self.snapshot.held_out, stop)?;
        let spec = spec.check()?;
        let previous = self.previous.as_ref();
        let (spec, rank_choice) = match self.tuning {
            Some((rank_tau, reg)) => (spec.tuned_at(rank_tau, reg), None),
            None => {
                spec.with_rank_tau_chosen(&self.scaled, &self.snapshot.held_out, previous, stop)?
            }
        };
        let algorithm = spec.solver(self.n_features)?;
        let Some(mut threshold) = spec.threshold_spec() else {
            let fit = algorithm.fit(previous, &self.scaled, stop)?;
            return Ok(Fitted {
                fit,
                threshold: None,
                prior: None,
                algorithm,
                rank_choice,
                fallback,
            });
        };
        threshold.method.get_or_insert(if self.with_negatives {
            ThresholdMethod::Umbrella
        } else {
            ThresholdMethod::PuUmbrella
        });
        let (fit, t, prior) = algorithm.fit_with_held_out(
            previous,
            &threshold,
            &self.scaled,
            &self.snapshot.held_out,
            stop,
        )?;
        Ok(Fitted {
            fit,
            threshold: Some(t),
            prior,
            algorithm,
            rank_choice,
            fallback,
        })
    }

    /// The settings this retrain trains with: CutS3VM's, or its fallback's and why, when the
    /// training events hold fewer than `min_labeled_per_class` labelled events of a class.
    /// Other algorithms' as they are.
    fn cuts3vm_or_fallback(&self) -> (LearnerSpec, Option<String>) {
        let spec = self.spec.clone();
        let AlgorithmSpec::CutS3vm(_) = &spec.algorithm else {
            return (spec, None);
        };
        let training = |label| {
            let labels = self.snapshot.data.labels.iter();
            labels
                .zip(&self.snapshot.held_out)
                .filter(|&(&l, &held)| l == label && !held)
                .count()
        };
        let (positive, negative) = (training(Label::Positive), training(Label::Negative));
        if let Some((fallback, least)) = &self.fallback {
            if positive < *least || negative < *least {
                let why = format!(
                    "{positive} positive and {negative} negative labelled training events, \
                     fewer than model.cuts3vm.min_labeled_per_class = {least} of a class"
                );
                return (fallback.clone(), Some(why));
            }
        }
        (spec, None)
    }
}

/// Whether a solution's coefficients, bias and threshold are finite (a missing threshold is
/// the certify check's to judge).
fn finite_solution(e: &KernelExpansion, threshold: Option<&ThresholdResult>) -> bool {
    e.coef.iter().all(|c| c.is_finite())
        && e.bias.is_finite()
        && threshold.map_or(true, |t| t.threshold.is_finite())
}

/// Runs `work` with a stop flag that is raised when `cancel` is or `limit` has passed (checked
/// by a watchdog thread every 50 ms at most; the solvers poll the flag). Returns what `work`
/// returned and whether the limit stopped it.
fn with_deadline<T>(
    cancel: &AtomicBool,
    limit: Duration,
    work: impl FnOnce(&AtomicBool) -> T,
) -> (T, bool) {
    let stop = AtomicBool::new(false);
    let done = (Mutex::new(false), Condvar::new());
    // A limit too far ahead to represent is no limit.
    let deadline = Instant::now().checked_add(limit);
    let timed_out = AtomicBool::new(false);
    let out = std::thread::scope(|scope| {
        scope.spawn(|| {
            let (lock, wake) = &done;
            let mut finished = lock.lock().unwrap_or_else(|p| p.into_inner());
            while !*finished {
                let now = Instant::now();
                if cancel.load(Ordering::Relaxed) {
                    stop.store(true, Ordering::Relaxed);
                } else if deadline.is_some_and(|d| now >= d) {
                    timed_out.store(true, Ordering::Relaxed);
                    stop.store(true, Ordering::Relaxed);
                    return;
                }
                let poll = Duration::from_millis(50);
                let wait = deadline.map_or(poll, |d| (d - now).min(poll));
                finished = wake
                    .wait_timeout(finished, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        });
        let out = work(&stop);
        let (lock, wake) = &done;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        wake.notify_one();
        out
    });
    (out, timed_out.load(Ordering::Relaxed))
}

/// `model`'s scores on window `entries`; `None` if their features do not stack into rows.
fn score_entries(model: &Model, entries: &[&Entry]) -> Option<Vec<f64>> {
    let rows = features_to_rows(entries.iter().map(|e| &e.x), model.n_features()).ok()?;
    let mut scores = vec![0.0; entries.len()];
    model.score_batch(&rows, &mut scores);
    Some(scores)
}

/// The newest `limit` held-out unlabeled events of `snapshot`, in event time order: the
/// drift detectors' reference for a model trained on it.
fn held_out_unlabeled(snapshot: &TrainingSnapshot, limit: usize) -> Vec<usize> {
    let data = &snapshot.data;
    let mut rows: Vec<usize> = (0..data.len())
        .filter(|&i| snapshot.held_out[i] && data.labels[i] == Label::Unlabeled)
        .collect();
    rows.sort_by_key(|&i| snapshot.ts[i]);
    rows.drain(..rows.len().saturating_sub(limit));
    rows
}

/// Rows of the snapshot [`constant_on`] scores: enough to see any spread, bounded so the
/// check costs a small share of a retrain.
const CONSTANT_CHECK_ROWS: usize = 1000;

/// Why `model` counts as constant on `data` (every score of up to [`CONSTANT_CHECK_ROWS`]
/// evenly spaced rows equal up to rounding), or `None`.
fn constant_on(model: &Model, data: &Dataset) -> Option<String> {
    let n = data.len();
    if n < 2 {
        return None;
    }
    let stride = n.div_ceil(CONSTANT_CHECK_ROWS);
    let rows: Vec<usize> = (0..n).step_by(stride).collect();
    let mut scores = vec![0.0; rows.len()];
    model.score_batch(&data.rows.select(&rows), &mut scores);
    let (lo, hi) = scores
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    (hi - lo <= 1e-9 * (1.0 + hi.abs().max(lo.abs()))).then(|| {
        format!(
            "the model scores all {} checked training events {lo} (a constant scorer)",
            rows.len()
        )
    })
}

struct TrainingSnapshot {
    data: Dataset,
    ts: Vec<i64>,
    held_out: Vec<bool>,
    newest_ts: i64,
    sizes: [usize; 3],
}

fn entry_of(event: Event, record: &Record) -> Entry {
    Entry {
        id: event.id,
        ts: event.ts,
        x: event.x,
        source: record
            .partition
            .zip(record.offset)
            .map(|(partition, offset)| crate::engine::window::SourcePos { partition, offset }),
    }
}

/// The last [`ROLLING_EVENTS`] flags and how many of them are set.
#[derive(Debug, Default)]
struct Rolling {
    flags: VecDeque<bool>,
    flagged: usize,
    /// P(Bin(len, τ) ≥ flagged) by (len, flagged, τ): once the window is full only `flagged`
    /// moves, within a narrow range, and an incomplete beta per feedback event was a few
    /// percent of a replay.
    p_values: HashMap<(usize, usize, u64), f64, foldhash::fast::FixedState>,
}

impl Rolling {
    /// Distinct (len, flagged, τ) kept before the memo starts over.
    const P_VALUES_KEPT: usize = 4096;

    /// The one-sided p-value of the flagged share against `tau`
    /// ([`binomial_upper_tail`]).
    fn p_value(&mut self, tau: f64) -> f64 {
        let key = (self.len(), self.flagged, tau.to_bits());
        if let Some(&p) = self.p_values.get(&key) {
            return p;
        }
        if self.p_values.len() >= Self::P_VALUES_KEPT {
            self.p_values.clear();
        }
        let p = binomial_upper_tail(key.0, key.1, tau);
        self.p_values.insert(key, p);
        p
    }

    fn push(&mut self, flag: bool) {
        if self.flags.len() == ROLLING_EVENTS && self.flags.pop_front() == Some(true) {
            self.flagged -= 1;
        }
        self.flags.push_back(flag);
        self.flagged += usize::from(flag);
    }

    fn len(&self) -> usize {
        self.flags.len()
    }

    fn rate(&self) -> f64 {
        self.flagged as f64 / self.flags.len().max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LoadedConfig;
    use crate::engine::scoring::score_one;
    use crate::stream::record::RecordReader;
    use crate::telemetry::RECALIBRATION_RESULTS;

    /// These tests read the registry, not the outputs.
    struct Discard;

    impl Outputs for Discard {
        fn score(&mut self, _: ScoreOutput, _: Option<Origin>) -> Result<(), OutputError> {
            Ok(())
        }

        fn dead_letter(&mut self, _: &DlqRecord) -> Result<(), OutputError> {
            Ok(())
        }

        fn flush(&mut self) -> Result<(), OutputError> {
            Ok(())
        }
    }

    const STREAM: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/streams/spambase.jsonl.gz"
    );

    fn engine(dir: &std::path::Path, extra: &str) -> (Engine, Arc<Registry>) {
        engine_with(dir, extra, Box::new(Discard))
    }

    /// The outputs of an engine, shared with the test.
    #[derive(Clone, Default)]
    struct Recorded(Arc<std::sync::Mutex<Vec<ScoreOutput>>>);

    impl Recorded {
        /// The outputs since the last call.
        fn take(&self) -> Vec<ScoreOutput> {
            std::mem::take(&mut *self.0.lock().expect("lock"))
        }
    }

    impl Outputs for Recorded {
        fn score(&mut self, output: ScoreOutput, _: Option<Origin>) -> Result<(), OutputError> {
            self.0.lock().expect("lock").push(output);
            Ok(())
        }

        fn dead_letter(&mut self, _: &DlqRecord) -> Result<(), OutputError> {
            Ok(())
        }

        fn flush(&mut self) -> Result<(), OutputError> {
            Ok(())
        }
    }

    /// Payloads read ahead ([`Engine::preparse`]), and read and scored ahead
    /// ([`Engine::prescoring_preparse`]), give the same scores, dead letters (by reason) and
    /// windows as payloads the engine reads itself, bad ones and ones the locked dimension
    /// refuses included.
    #[test]
    fn preparsed_payloads_are_handled_as_the_engine_reads_them() {
        let mut records: Vec<Record> = RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"))
            .take(2500)
            .collect();
        let odd = [
            r#"{"id":"short","ts":1767225600000,"x":[1,2,3]}"#,
            r#"{"id":"sparse","ts":1767225600000,"x":{"indices":[0,3],"values":[1,2],"dim":57}}"#,
            r#"{"id":"undimensioned","ts":1767225600000,"x":{"indices":[0,3],"values":[1,2]}}"#,
            r#"{"id":"huge","ts":1767225600000,"x":[1e999]}"#,
            r#"{"id":"","ts":1767225600000,"x":[1]}"#,
            "not json",
        ];
        for (i, payload) in odd.iter().enumerate() {
            for channel in [Channel::Unlabeled, Channel::Positive] {
                let record = Record::new(
                    channel,
                    1_767_225_600_000,
                    None,
                    payload.as_bytes().to_vec(),
                );
                records.insert(20 + 300 * i, record);
            }
        }
        // How the payloads reach the engine: read by it, read ahead, or read and scored ahead
        // in batches of 300 with the model active at the batch's start (a swap in a batch
        // leaves scores of the model before it, which must not be used).
        #[derive(Clone, Copy)]
        enum Read {
            ByTheEngine,
            Ahead,
            ScoredAhead,
        }
        let run = |read: Read| {
            let dir = tempfile::tempdir().expect("temp dir");
            let recorded = Recorded::default();
            // Retrains every 500 window events: swaps within batches.
            let extra = "every_events = 500\n";
            let (mut e, registry) = engine_with(dir.path(), extra, Box::new(recorded.clone()));
            let preparse = e.preparse();
            let mut prescoring = e.prescoring_preparse();
            let mut stale = 0;
            for batch in records.chunks(300) {
                let ahead: Vec<_> = batch
                    .iter()
                    .map(|r| prescoring(r.channel, &r.payload))
                    .collect();
                for (record, (parsed, prescore)) in batch.iter().zip(ahead) {
                    let active = registry.active().map(|m| m.meta.version);
                    stale += usize::from(prescore.is_some_and(|p| Some(p.version) != active));
                    let handled = match read {
                        Read::ByTheEngine => e.handle(record),
                        Read::Ahead => e.handle_preparsed(record, preparse(&record.payload), None),
                        Read::ScoredAhead => e.handle_preparsed(record, parsed, prescore),
                    };
                    handled.expect("handled");
                }
            }
            let reasons = [
                "dimension_mismatch",
                "invalid_sparse",
                "non_finite",
                "invalid_id",
                "invalid_json",
            ];
            let dead: Vec<u64> = reasons
                .iter()
                .map(|r| e.metrics.dlq.with_label_values(&[r]).get())
                .collect();
            let windows: Vec<usize> = e.windows.iter().map(Window::len).collect();
            ((recorded.take(), dead, windows), stale)
        };
        let (ahead, _) = run(Read::Ahead);
        let (outputs, dead, _) = &ahead;
        assert!(outputs.iter().any(|o| o.score.is_some()), "a model scored");
        // The sparse events are valid (the locked dimension, given or taken): read again.
        assert_eq!(dead, &[2, 0, 2, 2, 2]);
        assert_eq!(ahead, run(Read::ByTheEngine).0);
        let (scored_ahead, stale) = run(Read::ScoredAhead);
        assert!(stale > 0, "a swap within a batch");
        assert_eq!(ahead, scored_ahead);
    }

    /// Issue 22: `neyman_intake_events_total` counts each event once per channel and
    /// `neyman_answers_total` each unlabeled event once, across the wait for a first model,
    /// dead letters and a duplicate; the deprecated `neyman_events_total` counts an unlabeled
    /// event in several outcomes.
    #[test]
    fn intake_and_answer_outcomes_sum_to_the_events() {
        let mut records: Vec<Record> = RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"))
            .take(2000)
            .collect();
        for channel in [Channel::Unlabeled, Channel::Positive] {
            records.insert(
                50,
                Record::new(channel, 1_767_225_600_000, None, b"{".to_vec()),
            );
        }
        let again = records
            .iter()
            .find(|r| r.channel == Channel::Unlabeled)
            .cloned()
            .expect("an unlabeled event");
        records.push(again);
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, _) = engine(dir.path(), "");
        for record in &records {
            e.handle(record).expect("handled");
        }
        e.finish().expect("finished");
        let sum = |family: &prometheus::IntCounterVec,
                   labels: &dyn Fn(&str) -> Vec<String>,
                   of: &[&str]|
         -> u64 {
            of.iter()
                .map(|o| {
                    let l = labels(o);
                    let l: Vec<&str> = l.iter().map(String::as_str).collect();
                    family.with_label_values(&l).get()
                })
                .sum()
        };
        for channel in Channel::ALL {
            let arrived = records.iter().filter(|r| r.channel == channel).count() as u64;
            let c = channel.as_str();
            let intake = sum(
                &e.metrics.intake_events,
                &|o| vec![c.to_string(), o.to_string()],
                &INTAKE_OUTCOMES,
            );
            assert_eq!(intake, arrived, "{c}");
        }
        let unlabeled = records
            .iter()
            .filter(|r| r.channel == Channel::Unlabeled)
            .count() as u64;
        let answers = sum(
            &e.metrics.answers,
            &|o| vec![o.to_string()],
            &ANSWER_OUTCOMES,
        );
        assert_eq!(answers, unlabeled);
        assert_eq!(
            e.metrics
                .answers
                .with_label_values(&["dead_lettered"])
                .get(),
            1
        );
        assert_eq!(
            e.metrics
                .intake_events
                .with_label_values(&["unlabeled", "duplicate"])
                .get(),
            1
        );
        let old: u64 = EventOutcome::ALL
            .iter()
            .map(|o| {
                e.metrics
                    .events
                    .with_label_values(&["unlabeled", o.as_str()])
                    .get()
            })
            .sum();
        assert!(old > unlabeled, "{old} vs {unlabeled}");
    }

    /// Issue 21 item 2: one stray valid 3-feature event first used to lock the dimension at 3
    /// and dead-letter the whole bundled stream after it. With the default quorum (10
    /// agreeing events) the stray one is the only dead letter and the stream trains at 57;
    /// with `dimension_quorum = 1` the old lock is still there to be had.
    #[test]
    fn a_stray_first_event_does_not_lock_the_dimension_without_a_quorum() {
        let stray = Record::new(
            Channel::Unlabeled,
            1_767_225_600_000,
            Some("stray".into()),
            br#"{"id":"stray","ts":1767225600000,"x":[1,2,3]}"#.to_vec(),
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine(dir.path(), "");
        e.handle(&stray).expect("handled");
        assert_eq!(e.dimension(), None);
        feed_until_first_model(&mut e, &registry);
        assert_eq!(e.dimension(), Some(57));
        assert_eq!(dead_letters(&e, "dimension_mismatch"), 1);

        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, _) = engine(dir.path(), "[scoring]\ndimension_quorum = 1\n");
        e.handle(&stray).expect("handled");
        assert_eq!(e.dimension(), Some(3));
    }

    /// Events held for the quorum count for the Kafka commit (their offsets are owed and held
    /// back), are handled in arrival order once the lock is made, and are answered at the end
    /// of the input even without a quorum.
    #[test]
    fn events_held_for_the_quorum_hold_back_the_commit_and_are_answered() {
        let dir = tempfile::tempdir().expect("temp dir");
        let recorded = Recorded::default();
        let (mut e, _) = engine_with(
            dir.path(),
            "[scoring]\ndimension_quorum = 5\n",
            Box::new(recorded.clone()),
        );
        let records: Vec<Record> = RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"))
            .filter(|r| r.channel == Channel::Unlabeled)
            .take(3)
            .enumerate()
            .map(|(i, mut r)| {
                r.partition = Some(0);
                r.offset = Some(40 + i as i64);
                r
            })
            .collect();
        for r in &records {
            e.handle(r).expect("handled");
        }
        assert_eq!(e.dimension(), None);
        assert_eq!(
            e.owed_outputs(Channel::Unlabeled),
            BTreeMap::from([(0, 40)])
        );
        assert_eq!(
            e.low_watermarks(Channel::Unlabeled),
            BTreeMap::from([(0, 40)])
        );
        assert!(recorded.take().is_empty());
        e.finish().expect("finished");
        assert_eq!(e.dimension(), Some(57));
        let ids: Vec<String> = recorded.take().into_iter().map(|o| o.id).collect();
        let want: Vec<String> = records.iter().filter_map(|r| r.key.clone()).collect();
        assert_eq!(ids, want);
        assert!(e.owed_outputs(Channel::Unlabeled).is_empty());

        // A quiet live stream: after `scoring.max_wait` of wall clock the most common
        // dimension locks, and the held events go on (here to wait for a first model).
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, _) = engine_with(
            dir.path(),
            "[scoring]\ndimension_quorum = 5\nmax_wait = \"1s\"\n",
            Box::new(Discard),
        );
        for r in &records {
            e.handle(r).expect("handled");
        }
        let t0 = Instant::now();
        e.tick(t0).expect("tick");
        assert_eq!(e.dimension(), None);
        e.tick(t0 + Duration::from_secs(1)).expect("tick");
        assert_eq!(e.dimension(), Some(57));
        assert_eq!(e.metrics.unscored_buffer.get(), 3);
    }

    /// Events dead-lettered for `reason` so far.
    fn dead_letters(e: &Engine, reason: &str) -> u64 {
        e.metrics.dlq.with_label_values(&[reason]).get()
    }

    /// Issue 21's crash: a schema-valid sparse event with `"dim": 2⁴⁰` used to lock the
    /// dimension, and the first retrain aborted allocating 44 TB. It is dead-lettered as
    /// `dimension_too_large` before it locks anything, and the stream after it trains as usual.
    #[test]
    fn a_huge_dimension_is_dead_lettered_before_it_locks_anything() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine(dir.path(), "");
        let huge = r#"{"id":"huge","ts":1767225600000,"x":{"indices":[0],"values":[1],"dim":1099511627776}}"#;
        for channel in [Channel::Unlabeled, Channel::Positive] {
            let record = Record::new(channel, 1_767_225_600_000, None, huge.as_bytes().to_vec());
            e.handle(&record).expect("handled");
        }
        let dead = |e: &Engine| dead_letters(e, "dimension_too_large");
        assert_eq!((dead(&e), e.dimension()), (2, None));
        feed_until_first_model(&mut e, &registry);
        assert_eq!((dead(&e), e.dimension()), (2, Some(57)));
    }

    /// Issue 21: an event with `"ts": i64::MAX` used to move the clock so far that every
    /// window expired and no model came again. An event more than `windows.max_future` ahead
    /// of the newest event time and the wall clock is dead-lettered as `ts_out_of_range`
    /// without moving the clock or locking the dimension; the stream after it trains.
    #[test]
    fn an_event_from_far_in_the_future_is_dead_lettered() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine(dir.path(), "");
        let two_days_ahead = now_ms() + 2 * 86_400_000;
        for ts in [i64::MAX, two_days_ahead] {
            let payload = format!(r#"{{"id":"future","ts":{ts},"x":[1,2,3]}}"#);
            let record = Record::new(Channel::Unlabeled, 0, None, payload.into_bytes());
            e.handle(&record).expect("handled");
        }
        let dead = |e: &Engine| dead_letters(e, "ts_out_of_range");
        assert_eq!((dead(&e), e.newest_ts, e.dimension()), (2, None, None));
        feed_until_first_model(&mut e, &registry);
        assert_eq!((dead(&e), e.dimension()), (2, Some(57)));
    }

    /// Issue 21: a first valid 3-feature event used to lock the dimension and dead-letter the
    /// whole 57-feature stream after it. With `model.n_features` the dimension is the
    /// configured one from the start: that event is the one dead-lettered.
    #[test]
    fn a_configured_dimension_is_locked_from_the_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = "algorithm = \"tfpl\"\nprior = 0.38\ntau = 0.05\nn_features = 57\n";
        let (mut e, registry) = engine_of(dir.path(), model, "", Box::new(Discard));
        assert_eq!(e.dimension(), Some(57));
        let short = r#"{"id":"short","ts":1767225600000,"x":[1,2,3]}"#;
        let record = Record::new(Channel::Unlabeled, 0, None, short.as_bytes().to_vec());
        e.handle(&record).expect("handled");
        let dead = |e: &Engine| dead_letters(e, "dimension_mismatch");
        assert_eq!(dead(&e), 1);
        feed_until_first_model(&mut e, &registry);
        assert_eq!((dead(&e), e.dimension()), (1, Some(57)));
    }

    fn engine_with(
        dir: &std::path::Path,
        extra: &str,
        outputs: Box<dyn Outputs>,
    ) -> (Engine, Arc<Registry>) {
        // Hash-held-out calibration: the drift and fresh-threshold tests' premises (how far the
        // first model's threshold sits from the relabelled events) were measured with it;
        // `recent` has its own test.
        engine_of(dir, HASH_USMO, extra, outputs)
    }

    /// The `[model]` table of [`engine_with`].
    const HASH_USMO: &str = "algorithm = \"usmo\"\nprior = 0.38\nprior_min = 0.33\nprior_max = 0.43\ntau = 0.05\ncalibration = \"hash\"\nseed = 1\n";

    /// An engine on the bundled stream with the `[model]` table `model`.
    fn engine_of(
        dir: &std::path::Path,
        model: &str,
        extra: &str,
        outputs: Box<dyn Outputs>,
    ) -> (Engine, Arc<Registry>) {
        engine_resuming(dir, model, extra, outputs, false)
    }

    /// [`engine_of`], resuming the state directory's newest model with `resume`.
    fn engine_resuming(
        dir: &std::path::Path,
        model: &str,
        extra: &str,
        outputs: Box<dyn Outputs>,
        resume: bool,
    ) -> (Engine, Arc<Registry>) {
        let text = format!(
            "[source]\npath = \"{STREAM}\"\n[state]\ndir = \"state\"\n[model]\n{model}[retrain]\nmin_negative = 100\n{extra}"
        );
        let loaded =
            LoadedConfig::from_str_with_env(&text, &dir.join("neyman.toml"), std::iter::empty())
                .expect("valid config");
        let config = loaded.config;
        let registry = Arc::new(Registry::new(5));
        let store = ModelStore::open(&config.state.dir, 5).expect("store");
        let metrics = Metrics::new(&prometheus::Registry::new()).expect("metrics");
        let e = Engine::new(
            EngineParts {
                config: EngineConfig::of(&config),
                metrics,
                registry: Arc::clone(&registry),
                store,
                outputs,
                cancel: Arc::new(AtomicBool::new(false)),
            },
            resume,
        )
        .expect("engine");
        (e, registry)
    }

    /// The `[model]` table of a CutS3VM daemon on the bundled stream, with `extra` lines in
    /// its `[model.cuts3vm]` table.
    fn cuts3vm_model(extra: &str) -> String {
        format!(
            "algorithm = \"cuts3vm\"\nprior = 0.38\ntau = 0.05\ncalibration = \"hash\"\nseed = 1\n\
             [model.cuts3vm]\ncl = 10.0\ncu = 1.0\n{extra}"
        )
    }

    /// CutS3VM in the daemon: the first model is a certified CutS3VM model trained on the
    /// positive and negative windows plus the unlabeled one; the next retrains warm-start from
    /// its w, and every `cold_every`-th starts cold (the labelled-only fit and the C_u stages
    /// run again, which a warm start skips).
    #[test]
    fn cuts3vm_trains_on_all_three_windows_and_starts_cold_every_few_retrains() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = cuts3vm_model("cold_every = 2\n");
        let (mut e, registry) = engine_of(dir.path(), &model, "", Box::new(Discard));
        feed_until_first_model(&mut e, &registry);
        let active = registry.active().expect("a model");
        let Model::CutS3vm(entry) = &active.model else {
            panic!("a cuts3vm model, got {}", active.model.algorithm());
        };
        assert!(entry.fit.report.converged, "{:?}", entry.fit.report);
        assert!(
            entry.fit.report.first_iterate_rounds > 0,
            "a cold first fit"
        );
        assert!(entry.threshold.is_some(), "certified");
        assert!(!active.model.degenerate());
        let fingerprint = &entry.fingerprint;
        assert!(fingerprint.n_positive > 0 && fingerprint.n_negative > 0);
        assert!(fingerprint.n_unlabeled > 0);
        assert_eq!(e.metrics.retrains.with_label_values(&["swapped"]).get(), 1);
        // Every second retrain prepared starts cold; the others from the last w (no first
        // iterate, no stages).
        let (mut warm, mut cold) = (0, 0);
        for _ in 0..2 {
            let prepared = e.learner.as_ref().map_or(0, |l| l.retrains);
            let job = e.prepare_retrain(Instant::now()).expect("a retrain job");
            let trained = job.run();
            let fit = &trained.fitted.as_ref().expect("trained").fit;
            let Fit::CutS3vm(m) = fit else {
                panic!("a cuts3vm fit")
            };
            let r = &m.report;
            if prepared % 2 == 0 {
                assert!(
                    r.first_iterate_rounds > 0 && r.anneal_stages == 4,
                    "cold: {r:?}"
                );
                cold += 1;
            } else {
                assert_eq!(
                    (r.first_iterate_rounds, r.anneal_stages),
                    (0, 0),
                    "warm: {r:?}"
                );
                warm += 1;
            }
            e.complete_retrain(trained);
        }
        assert_eq!((warm, cold), (1, 1));
    }

    /// While the training events hold fewer labelled events of a class than
    /// `min_labeled_per_class`, the fallback trains, its model is swapped in and counted as
    /// `fallback`, and the configuration's fingerprint covers the `[model.cuts3vm]` table.
    #[test]
    fn cuts3vm_falls_back_while_a_class_has_too_few_labelled_events() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = cuts3vm_model("min_labeled_per_class = 100000\n");
        let (mut e, registry) = engine_of(dir.path(), &model, "", Box::new(Discard));
        feed_until_first_model(&mut e, &registry);
        let active = registry.active().expect("a model");
        assert_eq!(active.model.algorithm(), "tfpl");
        assert_eq!(e.metrics.retrains.with_label_values(&["fallback"]).get(), 1);
        assert_eq!(e.metrics.retrains.with_label_values(&["swapped"]).get(), 0);
        let other = cuts3vm_model("min_labeled_per_class = 100000\nepsilon = 0.05\n");
        let dir2 = tempfile::tempdir().expect("temp dir");
        let (e2, _) = engine_of(dir2.path(), &other, "", Box::new(Discard));
        assert_ne!(e.fingerprint(57), e2.fingerprint(57));
    }

    /// Feeds the bundled stream until the first model is active; returns its version.
    fn feed_until_first_model(e: &mut Engine, registry: &Registry) -> u64 {
        for record in RecordReader::open(std::path::Path::new(STREAM)).expect("stream") {
            e.handle(&record.expect("record")).expect("handled");
            if let Some(active) = registry.active() {
                return active.meta.version;
            }
        }
        panic!("the bundled stream trains a first model");
    }

    /// With `prior_min = prior_max = "auto"` (and USMO's π left to the training events), each
    /// retrain sets the prior gauges from its calibration events: NaN before, then a bracket
    /// around the bundled stream's spam share (0.38 of its unlabeled events, its shipped `prior`),
    /// also when the retrain is refused.
    #[test]
    fn auto_prior_ends_set_the_prior_gauges_at_each_retrain() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = "algorithm = \"usmo\"\nprior_min = \"auto\"\nprior_max = \"auto\"\nthreshold = \"pu-umbrella\"\ntau = 0.3\nseed = 1\n";
        let (mut e, registry) = engine_of(dir.path(), model, "", Box::new(Discard));
        let gauges = |e: &Engine| {
            [
                e.metrics.prior_lower_bound.get(),
                e.metrics.prior_estimate.get(),
                e.metrics.prior_upper_bound.get(),
            ]
        };
        assert!(
            gauges(&e).iter().all(|v| v.is_nan()),
            "NaN before a retrain"
        );
        feed_until_first_model(&mut e, &registry);
        let [lower, estimate, upper] = gauges(&e);
        assert!(
            0.0 <= lower && lower <= estimate && estimate <= upper && upper <= 1.0,
            "{:?}",
            gauges(&e)
        );
        assert!(lower <= 0.38 && 0.38 <= upper, "{:?}", gauges(&e));
        // A refused certificate still sets them, and its detail names the bounds it used.
        for gauge in [
            &e.metrics.prior_lower_bound,
            &e.metrics.prior_estimate,
            &e.metrics.prior_upper_bound,
        ] {
            gauge.set(f64::NAN);
        }
        e.config.model.tau = 0.001;
        match e.retrain() {
            RetrainOutcome::Rejected {
                reason: GateReason::NoThreshold,
                detail,
            } => assert!(detail.contains("auto ends"), "{detail}"),
            other => panic!("{other:?}"),
        }
        let [lower, estimate, upper] = gauges(&e);
        assert!(lower <= estimate && estimate <= upper, "{:?}", gauges(&e));
        assert!(lower <= 0.38 && 0.38 <= upper, "{:?}", gauges(&e));
    }

    /// Retrains started so far, whatever their outcome.
    fn retrains_started(e: &Engine) -> u64 {
        ["swapped", "rejected", "failed"]
            .iter()
            .map(|r| e.metrics.retrains.with_label_values(&[r]).get())
            .sum()
    }

    /// The bundled stream's first retrain comes before enough negatives have arrived and is
    /// refused. Without a model the next one is due after `first_model_retry_events` new
    /// window events, then after twice as many: the first model comes long before
    /// `every_events`; with 0 it waits for them.
    #[test]
    fn a_refused_first_retrain_is_retried_on_a_doubling_schedule() {
        let run = |retry: u64| {
            let dir = tempfile::tempdir().expect("temp dir");
            let extra = format!(
                "every_events = 100000
first_model_retry_events = {retry}
"
            );
            let (mut e, registry) = engine(dir.path(), &extra);
            let mut gaps = Vec::new();
            for record in RecordReader::open(std::path::Path::new(STREAM)).expect("stream") {
                let before = (retrains_started(&e), e.events_since_attempt);
                e.handle(&record.expect("record")).expect("handled");
                if retrains_started(&e) > before.0 {
                    gaps.push(before.1 + 1);
                }
                if registry.active().is_some() {
                    break;
                }
            }
            (gaps, registry.active().map(|m| m.meta.version))
        };
        let (gaps, version) = run(0);
        assert_eq!(gaps.len(), 1, "only the first retrain: {gaps:?}");
        assert_eq!(version, None);
        let (gaps, version) = run(100);
        assert!(version.is_some(), "a first model: {gaps:?}");
        assert!(gaps.len() >= 2, "{gaps:?}");
        let retries: Vec<u64> = (0..gaps.len() - 1).map(|i| 100 << i).collect();
        assert_eq!(gaps[1..], retries[..]);
    }

    /// A live source that pauses after a refused first retrain: once the oldest waiting
    /// event has waited half of `scoring.max_wait` on the wall clock and the windows grew
    /// since, a retry is due (once per half wait), and it leaves the schedule as it was.
    #[test]
    fn events_waiting_for_a_first_model_ask_for_a_retry_after_half_the_wait() {
        let dir = tempfile::tempdir().expect("temp dir");
        let extra = "every_events = 100000\n[scoring]\nmax_wait = \"1h\"\n";
        let (mut e, registry) = engine(dir.path(), extra);
        let mut records = RecordReader::open(std::path::Path::new(STREAM)).expect("stream");
        let mut feed = |e: &mut Engine, n: usize| {
            for record in records.by_ref().take(n) {
                e.handle(&record.expect("record")).expect("handled");
            }
        };
        while retrains_started(&e) == 0 {
            feed(&mut e, 1);
        }
        assert!(registry.active().is_none(), "the first retrain is refused");
        assert!(!e.pending.is_empty(), "events wait for a first model");
        let start = Instant::now();
        let half = Duration::from_secs(1800);
        // Nothing new in the windows since the attempt: no retry, however long they wait.
        e.tick(start).expect("tick");
        e.tick(start + half).expect("tick");
        assert!(!e.retrain_wanted());
        // τ = 0.1 % certifies nothing on these windows: every retry is refused.
        e.config.model.tau = 0.001;
        feed(&mut e, 1000);
        let scheduled = e.new_window_events;
        e.tick(start + half - Duration::from_millis(1))
            .expect("tick");
        assert!(!e.retrain_wanted(), "before half of max_wait");
        e.tick(start + half).expect("tick");
        assert!(e.retrain_wanted(), "the oldest waited half of max_wait");
        e.retrain();
        assert_eq!(retrains_started(&e), 2);
        assert!(registry.active().is_none());
        // At most one retry per half wait.
        feed(&mut e, 1000);
        e.tick(start + half + half / 2).expect("tick");
        assert!(
            !e.retrain_wanted(),
            "the last retry was less than half a wait ago"
        );
        e.config.model.tau = 0.05;
        e.tick(start + half + half).expect("tick");
        assert!(e.retrain_wanted());
        e.retrain();
        assert_eq!(retrains_started(&e), 3, "the schedule alone started none");
        assert!(
            registry.active().is_some(),
            "2000 more events certify a model"
        );
        assert_eq!(
            e.new_window_events,
            scheduled + 1000,
            "retries left the schedule"
        );
        // Those seen at `start` waited all of max_wait now and went unscored; the model
        // answered the others.
        assert!(e.pending.is_empty(), "every waiting event was answered");
    }

    /// Retries for a first model do not move the schedule: with them, retrains start at
    /// the same events as without, plus the retries, all before the first model.
    #[test]
    fn first_model_retries_leave_the_schedule_as_it_was() {
        let run = |retry: u64| {
            let dir = tempfile::tempdir().expect("temp dir");
            let extra = format!("every_events = 1000\nfirst_model_retry_events = {retry}\n");
            let (mut e, registry) = engine(dir.path(), &extra);
            let mut starts = Vec::new();
            let records = RecordReader::open(std::path::Path::new(STREAM)).expect("stream");
            for (i, record) in records.take(4000).enumerate() {
                let (before, had_model) = (retrains_started(&e), registry.active().is_some());
                e.handle(&record.expect("record")).expect("handled");
                if retrains_started(&e) > before {
                    starts.push((i, had_model));
                }
            }
            starts
        };
        let (scheduled, with_retries) = (run(0), run(100));
        assert!(scheduled.len() >= 3, "{scheduled:?}");
        let at = |starts: &[(usize, bool)]| starts.iter().map(|&(i, _)| i).collect::<Vec<_>>();
        let retries: Vec<(usize, bool)> = with_retries
            .iter()
            .copied()
            .filter(|(i, _)| !at(&scheduled).contains(i))
            .collect();
        assert!(!retries.is_empty(), "{with_retries:?}");
        assert!(
            retries.iter().all(|&(_, had_model)| !had_model),
            "{retries:?}"
        );
        assert!(
            at(&scheduled).iter().all(|i| at(&with_retries).contains(i)),
            "{scheduled:?} {with_retries:?}"
        );
    }

    #[test]
    fn a_rejected_retrain_keeps_the_active_model() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine(dir.path(), "");
        let active = feed_until_first_model(&mut e, &registry);
        // τ = 0.1 % needs ⌈log 0.05 / log 0.999⌉ = 2995 calibration negatives: none certify.
        e.config.model.tau = 0.001;
        let outcome = e.retrain();
        assert!(
            matches!(
                outcome,
                RetrainOutcome::Rejected {
                    reason: GateReason::NoThreshold,
                    ..
                }
            ),
            "{outcome:?}"
        );
        assert_eq!(registry.active().map(|m| m.meta.version), Some(active));
        assert_eq!(
            e.metrics.retrains.with_label_values(&["rejected"]).get(),
            // The bundled stream's first retrain (before enough negatives) is rejected too.
            2
        );
        // A bad parameter is a failed retrain, also keeping the model.
        e.config.model.tau = 0.05;
        e.config.model.lambda = f64::NAN;
        assert!(matches!(e.retrain(), RetrainOutcome::Failed { .. }));
        assert_eq!(registry.active().map(|m| m.meta.version), Some(active));
        assert_eq!(e.metrics.retrains.with_label_values(&["failed"]).get(), 1);
    }

    #[test]
    fn a_non_finite_solution_is_rejected_and_not_kept_as_warm_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine(dir.path(), "");
        let active = feed_until_first_model(&mut e, &registry);
        let warm_before = e.learner.as_ref().and_then(|l| l.previous.clone());
        assert!(warm_before.is_some(), "the first model left a warm start");
        let started = Instant::now();
        let job = e.prepare_retrain(started).expect("a retrain job");
        let mut trained = job.run();
        // A solver that diverged: one NaN coefficient (intake never lets a NaN feature through,
        // so this is the only way one reaches the gate).
        match &mut trained.fitted.as_mut().expect("trained").fit {
            Fit::Usmo(m) => m.expansion.coef[0] = f64::NAN,
            Fit::Tfpl(m) => m.expansion.coef[0] = f64::NAN,
            Fit::CutS3vm(m) => m.expansion.coef[0] = f64::NAN,
        }
        let outcome = e.complete_retrain(trained);
        assert!(
            matches!(
                outcome,
                RetrainOutcome::Rejected {
                    reason: GateReason::NonFinite,
                    ..
                }
            ),
            "{outcome:?}"
        );
        assert_eq!(registry.active().map(|m| m.meta.version), Some(active));
        assert_eq!(
            e.metrics
                .retrain_rejections
                .with_label_values(&["non_finite"])
                .get(),
            1
        );
        // The next retrain warm-starts from the last finite solution, not the NaN one.
        let warm_after = e.learner.as_ref().and_then(|l| l.previous.clone());
        assert_eq!(
            warm_after.map(|f| f.expansion().coef.clone()),
            warm_before.map(|f| f.expansion().coef.clone())
        );
    }

    /// Issue 21 item 9: a retrain that `retrain.time_limit` stopped is a failure with reason
    /// `time_limit`; the active model keeps serving and the warm start is the last finished
    /// solution, not the stopped one.
    #[test]
    fn a_retrain_stopped_by_its_time_limit_fails_and_keeps_the_warm_start() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine(dir.path(), "");
        let active = feed_until_first_model(&mut e, &registry);
        let warm_before = e.learner.as_ref().and_then(|l| l.previous.clone());
        let job = e.prepare_retrain(Instant::now()).expect("a retrain job");
        let mut trained = job.run();
        assert!(
            !trained.timed_out,
            "a retrain of the bundled stream takes far under 2m"
        );
        trained.timed_out = true;
        match &mut trained.fitted.as_mut().expect("trained").fit {
            Fit::Usmo(m) => m.expansion.coef[0] += 1.0,
            Fit::Tfpl(m) => m.expansion.coef[0] += 1.0,
            Fit::CutS3vm(m) => m.expansion.coef[0] += 1.0,
        }
        let outcome = e.complete_retrain(trained);
        assert!(
            matches!(outcome, RetrainOutcome::TimedOut { limit } if limit == Duration::from_secs(120)),
            "{outcome:?}"
        );
        assert_eq!(registry.active().map(|m| m.meta.version), Some(active));
        let failures = |reason: &str| {
            e.metrics
                .retrain_failures
                .with_label_values(&[reason])
                .get()
        };
        assert_eq!((failures("time_limit"), failures("error")), (1, 0));
        assert_eq!(e.metrics.retrains.with_label_values(&["failed"]).get(), 1);
        let warm_after = e.learner.as_ref().and_then(|l| l.previous.clone());
        assert_eq!(
            warm_after.map(|f| f.expansion().coef.clone()),
            warm_before.map(|f| f.expansion().coef.clone())
        );
    }

    /// The watchdog raises the stop flag once the limit has passed (work that runs until
    /// stopped returns, and says it was stopped), passes a cancel through (not counted as the
    /// limit), and leaves work that ends in time alone.
    #[test]
    fn the_deadline_stops_work_that_runs_past_it() {
        let spin = |stop: &AtomicBool| {
            let mut polls = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                polls += 1;
                std::thread::yield_now();
            }
            polls
        };
        let never = AtomicBool::new(false);
        let (_, timed_out) = with_deadline(&never, Duration::from_millis(20), spin);
        assert!(timed_out);
        let cancelled = AtomicBool::new(true);
        let (_, timed_out) = with_deadline(&cancelled, Duration::from_secs(3600), spin);
        assert!(!timed_out);
        let (value, timed_out) = with_deadline(&never, Duration::from_secs(3600), |_| 7);
        assert_eq!((value, timed_out), (7, false));
        let (value, timed_out) = with_deadline(&never, Duration::MAX, |_| 8);
        assert_eq!((value, timed_out), (8, false));
    }

    #[test]
    fn the_gate_rejects_a_worse_np_score_and_a_loose_fpr_bound() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine(dir.path(), "");
        let mut handled = 0;
        for record in RecordReader::open(std::path::Path::new(STREAM)).expect("stream") {
            e.handle(&record.expect("record")).expect("handled");
            handled += 1;
            if registry.active().is_some() && handled > 2500 {
                break;
            }
        }
        let active = registry.active().expect("model");
        let n = e.dimension().expect("locked");
        let snapshot = e.training_snapshot(n).expect("snapshot");
        // The active model against itself passes.
        assert_eq!(e.gate(&active.model, &snapshot), None);
        // A threshold whose certificate misses τ fails.
        let mut loose = active.model.clone();
        if let Model::Usmo(entry) = &mut loose {
            if let Some(t) = entry.threshold.as_mut() {
                t.fpr_bound = Some(0.2);
            }
        }
        assert!(matches!(
            e.gate(&loose, &snapshot),
            Some(RetrainOutcome::Rejected {
                reason: GateReason::FprBound,
                ..
            })
        ));
        // A threshold that flags nothing has TPR 0: its NP-score is worse by ~ the TPR.
        let mut blind = active.model.clone();
        if let Model::Usmo(entry) = &mut blind {
            if let Some(t) = entry.threshold.as_mut() {
                t.threshold = f64::INFINITY;
            }
        }
        assert!(matches!(
            e.gate(&blind, &snapshot),
            Some(RetrainOutcome::Rejected {
                reason: GateReason::NpScore,
                ..
            })
        ));
    }

    #[test]
    fn the_gate_refuses_a_constant_model_and_a_threshold_that_flags_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine(dir.path(), "");
        feed_until_first_model(&mut e, &registry);
        let active = registry.active().expect("model");
        let n = e.dimension().expect("locked");
        let snapshot = e.training_snapshot(n).expect("snapshot");
        let with_coef = |scale: f64| {
            let mut m = active.model.clone();
            if let Model::Usmo(entry) = &mut m {
                entry
                    .fit
                    .expansion
                    .coef
                    .iter_mut()
                    .for_each(|c| *c *= scale);
            }
            m
        };
        let reason = |e: &Engine, m: &Model| match e.gate(m, &snapshot) {
            Some(RetrainOutcome::Rejected { reason, .. }) => Some(reason),
            _ => None,
        };
        // Every coefficient 0: refused without looking at data (also for remote installs).
        assert_eq!(
            reason(&e, &with_coef(0.0)),
            Some(GateReason::ConstantScores)
        );
        // Coefficients so small that every score rounds to the bias: refused on the snapshot.
        assert_eq!(
            reason(&e, &with_coef(1e-300)),
            Some(GateReason::ConstantScores)
        );
        // A certified threshold above every calibration positive.
        let mut blind = active.model.clone();
        if let Model::Usmo(entry) = &mut blind {
            if let Some(t) = entry.threshold.as_mut() {
                t.tpr_estimate = Some(0.0);
            }
        }
        assert_eq!(reason(&e, &blind), Some(GateReason::FlagsNothing));
        // Without a threshold a model is refused unless the configuration asks for none.
        let mut ranking = active.model.clone();
        if let Model::Usmo(entry) = &mut ranking {
            entry.threshold = None;
        }
        assert_eq!(reason(&e, &ranking), Some(GateReason::NoThreshold));
        e.config.model.threshold = Some(ThresholdName::None);
        assert_eq!(reason(&e, &ranking), None);
    }

    /// A model stored by the release before (its fingerprint over the whole `[model]` table,
    /// defaults spelled out) is resumed after the upgrade; one of another τ is not.
    #[test]
    fn a_model_of_the_release_before_is_resumed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = "algorithm = \"tfpl\"\nprior = 0.38\ntau = 0.05\nseed = 1\n";
        let (mut e, registry) = engine_of(dir.path(), model, "", Box::new(Discard));
        let version = feed_until_first_model(&mut e, &registry);
        let mut stored = e.store.load(version).expect("stored");
        let n = stored.meta.n_features;
        let [now, before] = e.accepted_fingerprints(n);
        assert_eq!(stored.meta.config_fingerprint, now);
        assert_ne!(before, now);
        stored.meta.config_fingerprint = before;
        e.store.save(&stored).expect("save");
        drop(e);
        let (_, registry) = engine_resuming(dir.path(), model, "", Box::new(Discard), true);
        let resumed = registry.active().expect("resumed");
        assert_eq!(
            (resumed.meta.version, resumed.meta.config_fingerprint),
            (version, before)
        );
        let other = model.replace("tau = 0.05", "tau = 0.1");
        let (_, registry) = engine_resuming(dir.path(), &other, "", Box::new(Discard), true);
        assert!(registry.active().is_none());
    }

    /// A restart resumes the newest fresh threshold, not the trained one: it is written
    /// beside the model (at most once a second, and at the end of the run). A file for
    /// another model, or with a threshold the gate refuses, leaves the trained threshold.
    #[test]
    fn a_restart_resumes_the_newest_fresh_threshold() {
        let dir = tempfile::tempdir().expect("temp dir");
        let extra = "[recalibrate]\nwindow = 200\nevery = 50\n";
        let model = HASH_USMO;
        let (mut e, registry) = engine_with(dir.path(), extra, Box::new(Discard));
        let version = feed_until_first_model(&mut e, &registry);
        e.config.retrain.every_events = 1_000_000;
        let trained = registry.active().expect("model");
        handle_drifted_negatives(&mut e, trained.meta.trained_at_ms);
        e.finish().expect("finish");
        let fresh = registry.active().expect("model");
        assert_eq!((fresh.meta.version, fresh.threshold_version), (version, 8));
        let store = e.store.clone();
        drop(e);
        let (resumed, registry) =
            engine_resuming(dir.path(), model, extra, Box::new(Discard), true);
        let active = registry.active().expect("resumed");
        assert_eq!(
            (active.meta.version, active.threshold_version),
            (version, 8)
        );
        assert_eq!(active.model.threshold(), fresh.model.threshold());
        assert_ne!(active.model.threshold(), trained.model.threshold());
        assert_eq!(resumed.metrics.threshold_version.get(), 8);
        drop(resumed);

        // Another model's file, then a NaN threshold: the trained threshold serves.
        let path = store.threshold_path(version);
        let text = std::fs::read_to_string(&path).expect("threshold file");
        let value: serde_json::Value = serde_json::from_str(&text).expect("json");
        let mut other = value.clone();
        other["version"] = (version + 1).into();
        let mut infinite = value.clone();
        infinite["threshold"]["threshold"] = serde_json::Value::Null;
        for bad in [other.to_string(), infinite.to_string(), "{".to_owned()] {
            std::fs::write(&path, bad).expect("write");
            let (_, registry) = engine_resuming(dir.path(), model, extra, Box::new(Discard), true);
            let active = registry.active().expect("resumed");
            assert_eq!(active.threshold_version, 0);
            assert_eq!(active.model.threshold(), trained.model.threshold());
        }
    }

    /// A detected change's cut of fresh thresholds' negatives survives a restart, a crash
    /// included (no `finish`): it is written to `engine.json` when it changes and resumed. A
    /// state directory without the file (an earlier release's), or with one that does not
    /// parse, resumes without a cut; without `resume` nothing is read and the file is cleared.
    #[test]
    fn a_restart_keeps_the_calibration_cut() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, registry) = engine_with(dir.path(), "", Box::new(Discard));
        feed_until_first_model(&mut e, &registry);
        assert_eq!(e.calibration_since, None);
        let at = registry.active().expect("model").meta.trained_at_ms;
        e.unlabeled_drift_detected("scores", at);
        // A later detection moves the cut forward, never back.
        e.unlabeled_drift_detected("features", at - 5_000);
        assert_eq!(e.calibration_since, Some(at));
        e.unlabeled_drift_detected("scores", at + 7_000);
        assert_eq!(e.calibration_since, Some(at + 7_000));
        let store = e.store.clone();
        drop(e);
        let resume = |resume: bool| {
            engine_resuming(dir.path(), HASH_USMO, "", Box::new(Discard), resume)
                .0
                .calibration_since
        };
        assert_eq!(resume(true), Some(at + 7_000));
        let text = std::fs::read_to_string(store.engine_state_path()).expect("engine.json");
        assert_eq!(text, format!(r#"{{"calibration_since":{}}}"#, at + 7_000));
        // A recording whose first event is after the cut keeps it; one that starts before it
        // (the same file read again from its start) drops it, on disk too.
        let mut first_events = RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"));
        let first = first_events.next().expect("a first record");
        let mut later = first.clone();
        let mut payload: serde_json::Value =
            serde_json::from_slice(&first.payload).expect("a JSON event");
        payload["ts"] = serde_json::json!(at + 8_000);
        later.payload = serde_json::to_vec(&payload).expect("JSON");
        later.ts = at + 8_000;
        let (mut resumed, _) = engine_resuming(dir.path(), HASH_USMO, "", Box::new(Discard), true);
        resumed.reads_a_recording();
        resumed.handle(&later).expect("handled");
        assert_eq!(resumed.calibration_since, Some(at + 7_000));
        drop(resumed);
        // A source that resumes where it stopped (Kafka) keeps it: redelivered events may
        // precede it.
        let (mut resumed, _) = engine_resuming(dir.path(), HASH_USMO, "", Box::new(Discard), true);
        resumed.handle(&first).expect("handled");
        assert_eq!(resumed.calibration_since, Some(at + 7_000));
        drop(resumed);
        let (mut resumed, _) = engine_resuming(dir.path(), HASH_USMO, "", Box::new(Discard), true);
        resumed.reads_a_recording();
        resumed.handle(&first).expect("handled");
        assert_eq!(resumed.calibration_since, None);
        assert_eq!(resume(true), None);
        std::fs::write(
            store.engine_state_path(),
            format!(r#"{{"calibration_since":{}}}"#, at + 7_000),
        )
        .expect("write");
        // A fresh start (`--no-resume`) clears it, so a later resumed run does not take an
        // older run's cut.
        assert_eq!(resume(false), None);
        assert_eq!(resume(true), None);
        // Fields added later are ignored by this release; a missing field is no cut.
        std::fs::write(
            store.engine_state_path(),
            r#"{"calibration_since":12,"later":1}"#,
        )
        .expect("write");
        assert_eq!(resume(true), Some(12));
        std::fs::write(store.engine_state_path(), "{}").expect("write");
        assert_eq!(resume(true), None);
        std::fs::write(store.engine_state_path(), "{").expect("write");
        assert_eq!(resume(true), None);
        std::fs::remove_file(store.engine_state_path()).expect("remove");
        assert_eq!(resume(true), None);
    }

    /// A stored model whose checksum is valid but whose threshold is NaN or −∞ is not
    /// resumed (issue 21: it was served, scoring `null` as "scored"); the previous model is.
    /// With no usable file left, nothing is served.
    #[test]
    fn a_stored_model_that_fails_the_gate_is_not_resumed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = "algorithm = \"tfpl\"\nprior = 0.38\ntau = 0.05\nseed = 1\n";
        let (mut e, registry) = engine_of(dir.path(), model, "", Box::new(Discard));
        let good = feed_until_first_model(&mut e, &registry);
        let stored = e.store.load(good).expect("stored");
        for (bad, value) in [(good + 1, f64::NAN), (good + 2, f64::NEG_INFINITY)] {
            let mut broken = stored.clone();
            broken.meta.version = bad;
            let mut t = broken.model.threshold().cloned().expect("a threshold");
            t.threshold = value;
            broken.model.set_threshold(t);
            e.store.save(&broken).expect("save");
        }
        drop(e);
        let (resumed, registry) = engine_resuming(dir.path(), model, "", Box::new(Discard), true);
        let active = registry.active().expect("resumed");
        assert_eq!(active.meta.version, good);
        assert_eq!(resumed.dimension(), Some(stored.meta.n_features));

        std::fs::remove_file(resumed.store.model_path(good)).expect("remove the good one");
        drop(resumed);
        let (_, registry) = engine_resuming(dir.path(), model, "", Box::new(Discard), true);
        assert!(registry.active().is_none());
    }

    /// `n` records of `channel` from the bundled stream, re-sent as negative feedback with new
    /// ids and event times after `after`, with their events.
    /// `model.calibration = "recent"`: a retrain holds out exactly the newest 30 % of each
    /// channel (by event time, then id), certifies its umbrella threshold on the held-out
    /// negatives alone, and [`Engine::unseen`] then calls exactly those events (and later ones)
    /// unseen. A restarted engine resumes them from beside the model file; without that file
    /// it counts them as seen.
    #[test]
    fn recent_calibration_holds_out_the_newest_of_each_channel() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model =
            "algorithm = \"tfpl\"\nprior = 0.38\ntau = 0.05\ncalibration = \"recent\"\nseed = 1\n";
        // No retrain starts by itself: the test runs the first one.
        let (mut e, registry) = engine_of(
            dir.path(),
            model,
            "min_positive = 5000\n",
            Box::new(Discard),
        );
        let records: Vec<Record> = RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"))
            .take(6000)
            .collect();
        for record in &records {
            e.handle(record).expect("handled");
        }
        let job = e.prepare_retrain(Instant::now()).expect("a retrain job");
        let snapshot = &job.snapshot;
        let data = &snapshot.data;
        let mut held_ids = BTreeSet::new();
        for label in [Label::Positive, Label::Unlabeled, Label::Negative] {
            let mut rows = data.indices_of(label);
            assert!(rows.len() >= 100, "{label:?}: {} rows", rows.len());
            rows.sort_by(|&a, &b| {
                (snapshot.ts[a], &data.ids[a]).cmp(&(snapshot.ts[b], &data.ids[b]))
            });
            let held = (rows.len() * 30).div_ceil(100);
            let (older, newest) = rows.split_at(rows.len() - held);
            assert!(newest.iter().all(|&i| snapshot.held_out[i]), "{label:?}");
            assert!(older.iter().all(|&i| !snapshot.held_out[i]), "{label:?}");
            held_ids.extend(newest.iter().map(|&i| data.ids[i].clone()));
        }
        let held_negatives: Vec<usize> = data
            .indices_of(Label::Negative)
            .into_iter()
            .filter(|&i| snapshot.held_out[i])
            .collect();
        let rows = data.rows.select(&held_negatives);
        let snapshot_ts = snapshot.newest_ts;
        let outcome = e.finish_retrain(job.run());
        assert!(
            matches!(outcome, RetrainOutcome::Swapped { .. }),
            "{outcome:?}"
        );
        let active = registry.active().expect("model");
        assert_eq!(active.meta.trained_at_ms, snapshot_ts);
        // The threshold is the umbrella over the held-out negatives' scores, nothing else.
        let t = active.model.threshold().expect("threshold");
        assert_eq!(t.method, ThresholdMethod::Umbrella);
        assert_eq!(t.calibration_negatives, held_negatives.len());
        let mut scores = vec![0.0; held_negatives.len()];
        active.model.score_batch(&rows, &mut scores);
        let (tau, delta) = (e.config.model.tau, e.config.model.delta);
        let expected = umbrella(&scores, tau, delta, None).expect("umbrella");
        assert_eq!(t.threshold.to_bits(), expected.threshold.to_bits());
        assert!(t.fpr_bound.is_some_and(|b| b <= tau));
        // Every event in the windows is older than the snapshot's newest: unseen iff held out.
        let unseen_ids = |e: &Engine, active: &StoredModel| {
            let mut unseen = BTreeSet::new();
            for c in Channel::ALL {
                for entry in e.windows[channel_index(c)].iter() {
                    assert!(entry.ts <= active.meta.trained_at_ms);
                    if e.unseen(c, (&entry.id, entry.ts), active) {
                        unseen.insert(entry.id.clone());
                    }
                }
            }
            unseen
        };
        assert_eq!(unseen_ids(&e, &active), held_ids);
        let later = (Channel::Positive, ("later", active.meta.trained_at_ms + 1));
        assert!(
            e.unseen(later.0, later.1, &active),
            "newer than the snapshot"
        );
        // A restart resumes the held-out ids from beside the model file; without that file
        // they are unknown and only newer events are unseen.
        let held_out_file = e.store.held_out_path(active.meta.version);
        drop(e);
        let restart = || {
            let (mut resumed, registry) = engine_resuming(
                dir.path(),
                model,
                "min_positive = 5000\n",
                Box::new(Discard),
                true,
            );
            let active = registry.active().expect("resumed model");
            for record in &records {
                resumed.restore(record);
            }
            (resumed, active)
        };
        let (resumed, active) = restart();
        assert_eq!(unseen_ids(&resumed, &active), held_ids);
        assert!(resumed.unseen(later.0, later.1, &active));
        drop(resumed);
        std::fs::remove_file(&held_out_file).expect("remove the held-out ids");
        let (resumed, active) = restart();
        assert!(unseen_ids(&resumed, &active).is_empty());
        assert!(resumed.unseen(later.0, later.1, &active));
    }

    fn relabelled_as_negatives(
        e: &Engine,
        channel: Channel,
        after: i64,
        n: usize,
        prefix: &str,
    ) -> Vec<(Record, Event)> {
        RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"))
            .filter(|r| r.channel == channel)
            .take(n)
            .enumerate()
            .map(|(i, record)| {
                let mut event: serde_json::Value =
                    serde_json::from_slice(&record.payload).expect("json");
                let (id, ts) = (format!("{prefix}-{i}"), after + 1 + i as i64);
                event["id"] = id.clone().into();
                event["ts"] = ts.into();
                let payload = serde_json::to_vec(&event).expect("json");
                let negative = Record::new(Channel::Negative, ts, Some(id), payload);
                let event = parse_event(&negative.payload, e.dim, &e.limits).expect("event");
                (negative, event)
            })
            .collect()
    }

    /// 400 unlabeled events of the bundled stream, re-sent as negative feedback after
    /// `after` and handled: negatives drifted onto the unlabeled distribution (a third spam).
    fn handle_drifted_negatives(e: &mut Engine, after: i64) -> Vec<(Record, Event)> {
        let drifted = relabelled_as_negatives(e, Channel::Unlabeled, after, 400, "drift");
        for (record, _) in &drifted {
            e.handle(record).expect("handled");
        }
        drifted
    }

    fn recalibrations(e: &Engine, result: &str) -> u64 {
        e.metrics.recalibrations.with_label_values(&[result]).get()
    }

    /// Negative feedback that drifts onto the unlabeled events (a third of which are spam)
    /// pushes the active model's FPR far above τ; the fresh thresholds raise the threshold,
    /// without a retrain, until at most τ of the newest `recalibrate.window` negatives are
    /// flagged, and every score says which threshold decided it. Negatives that look like
    /// the training positives leave a threshold that flags none of the fresh positives: it
    /// is installed all the same and an early retrain follows.
    #[test]
    fn fresh_thresholds_follow_drifted_negatives_between_retrains() {
        let dir = tempfile::tempdir().expect("temp dir");
        let recorded = Recorded::default();
        let extra = "[recalibrate]\nwindow = 200\nevery = 50\n";
        let (mut e, registry) = engine_with(dir.path(), extra, Box::new(recorded.clone()));
        let version = feed_until_first_model(&mut e, &registry);
        e.config.retrain.every_events = 1_000_000;
        let first = registry.active().expect("model");
        assert_eq!(first.threshold_version, 0);
        let drifted = handle_drifted_negatives(&mut e, first.meta.trained_at_ms);
        let active = registry.active().expect("model");
        assert_eq!(
            (active.meta.version, active.threshold_version),
            (version, 8),
            "one fresh threshold per 50 negatives, no retrain: {:?}",
            RECALIBRATION_RESULTS.map(|r| recalibrations(&e, r))
        );
        assert_eq!(e.metrics.threshold_version.get(), 8);
        assert_eq!(recalibrations(&e, "recalibrated"), 8);
        // The remembered scores are the model's scores of the newest unseen negatives.
        let remembered = e
            .newest_scored(
                &active,
                Newest {
                    channel: Channel::Negative,
                    fresh: true,
                    since: i64::MIN,
                    limit: 200,
                },
            )
            .expect("scored");
        let newest_first = drifted[drifted.len() - 200..].iter().rev();
        assert_eq!(remembered.len(), 200);
        for (&(_, cached), (_, event)) in remembered.iter().zip(newest_first) {
            let score = score_one(&active, event).expect("scored").score;
            let score = score.expect("score");
            assert!(
                (cached - score).abs() <= 1e-12 * score.abs().max(1.0),
                "{cached} {score}"
            );
        }
        let t = active.model.threshold().expect("threshold");
        assert_eq!(t.method, ThresholdMethod::Umbrella);
        assert_eq!(t.calibration_negatives, 200);
        let flagged_share = |threshold: &ThresholdResult| {
            let newest = &drifted[drifted.len() - 200..];
            let flagged = newest
                .iter()
                .filter(|(_, ev)| {
                    let out = score_one(&active, ev).expect("scored");
                    threshold.is_positive(out.score.expect("score"))
                })
                .count();
            flagged as f64 / 200.0
        };
        let before = first.model.threshold().expect("threshold");
        assert!(
            flagged_share(before) > 0.15,
            "{} {}",
            flagged_share(before),
            before.threshold
        );
        assert!(flagged_share(t) <= 0.05, "{}", flagged_share(t));
        assert!(t.threshold > before.threshold);
        recorded.take();
        let unlabeled = RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"))
            .find(|r| r.channel == Channel::Unlabeled)
            .expect("an unlabeled event");
        e.handle(&unlabeled).expect("handled");
        let out = recorded.take();
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].model_version, out[0].threshold_version),
            (Some(version), Some(8))
        );
        assert_eq!(out[0].threshold, Some(t.threshold));

        let memorised = relabelled_as_negatives(
            &e,
            Channel::Positive,
            e.newest_ts.expect("clock"),
            100,
            "spam",
        );
        for (record, _) in &memorised {
            e.handle(record).expect("handled");
        }
        assert!(recalibrations(&e, "flags_nothing") >= 1);
        let retrained = registry.active().expect("model");
        assert!(retrained.meta.version > version, "an early retrain ran");
    }

    /// Negative feedback that the active threshold flags far above τ (unlabeled events, a
    /// third of them spam, relabelled as negatives) is a `feedback` drift: detected within a
    /// few tests, and the fresh threshold it triggers is calibrated on the negatives from the
    /// tested window's start on only, not on the long `recalibrate.window`.
    #[test]
    fn feedback_above_tau_is_a_drift_and_recalibrates_on_the_newest_negatives() {
        let dir = tempfile::tempdir().expect("temp dir");
        let extra =
            "[recalibrate]\nwindow = 1000\nevery = 1000\n[drift]\nwindow = 100\nevery = 20\n";
        let (mut e, registry) = engine_with(dir.path(), extra, Box::new(Discard));
        let version = feed_until_first_model(&mut e, &registry);
        e.config.retrain.every_events = 1_000_000;
        e.config.retrain.min_positive = usize::MAX;
        let first = registry.active().expect("model");
        let drifted = relabelled_as_negatives(
            &e,
            Channel::Unlabeled,
            first.meta.trained_at_ms,
            300,
            "drift",
        );
        let detections = |e: &Engine| {
            e.metrics
                .drift_detected
                .with_label_values(&["feedback"])
                .get()
        };
        let fired_after = drifted.iter().position(|(record, _)| {
            e.handle(record).expect("handled");
            detections(&e) > 0
        });
        let fired_after = fired_after.expect("the feedback drift is detected") + 1;
        assert!(fired_after <= 200, "after {fired_after} negatives");
        let active = registry.active().expect("model");
        assert_eq!(active.meta.version, version);
        assert_eq!(active.threshold_version, 1, "recalibrated at the detection");
        let t = active.model.threshold().expect("threshold");
        assert!(
            t.calibration_negatives <= 100,
            "only the tested window's negatives calibrate: {t:?}"
        );
        assert!(t.threshold > first.model.threshold().expect("threshold").threshold);
        assert_eq!(e.metrics.certificate_stale.get(), 0, "fresh again");
    }

    /// A pu-umbrella model gets fresh thresholds from the newest positives and unlabeled
    /// events it never trained on, every `recalibrate.every` new positives; each certifies τ
    /// with the configured prior interval, on at most `recalibrate.window` events per channel.
    #[test]
    fn pu_models_get_fresh_pu_umbrella_thresholds_from_positives_and_unlabeled_events() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = "algorithm = \"usmo\"\nprior = 0.38\nprior_min = 0.33\nprior_max = 0.43\nthreshold = \"pu-umbrella\"\ntau = 0.3\nseed = 1\n";
        let extra = "[recalibrate]\nwindow = 400\nevery = 10\n";
        let (mut e, registry) = engine_of(dir.path(), model, extra, Box::new(Discard));
        let version = feed_until_first_model(&mut e, &registry);
        e.config.retrain.every_events = 1_000_000;
        let first = registry.active().expect("model");
        let mut ts = first.meta.trained_at_ms;
        // The stream again, under new ids and later times: every event is unseen.
        for record in RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"))
            .filter(|r| r.channel != Channel::Negative)
            .take(1500)
        {
            let mut event: serde_json::Value =
                serde_json::from_slice(&record.payload).expect("json");
            ts += 1;
            let id = format!("again-{ts}");
            event["id"] = id.clone().into();
            event["ts"] = ts.into();
            let payload = serde_json::to_vec(&event).expect("json");
            e.handle(&Record::new(record.channel, ts, Some(id), payload))
                .expect("handled");
        }
        let active = registry.active().expect("model");
        assert_eq!(active.meta.version, version, "no retrain ran");
        let fresh = recalibrations(&e, "recalibrated") + recalibrations(&e, "flags_nothing");
        assert!(
            fresh >= 5,
            "{:?}",
            RECALIBRATION_RESULTS.map(|r| recalibrations(&e, r))
        );
        assert_eq!(active.threshold_version, fresh);
        let t = active.model.threshold().expect("threshold");
        assert_eq!(t.method, ThresholdMethod::PuUmbrella);
        assert_eq!(t.fpr_bound, Some(0.3));
        assert!(
            t.calibration_positives <= 400 && t.calibration_unlabeled == 400,
            "{t:?}"
        );
        assert!(t.tpr_estimate.is_some_and(|tpr| tpr > 0.0), "{t:?}");
    }

    /// Unlabeled events whose features all triple (a covariate shift) move the active model's
    /// scores: the detector fires within a window, marks the certificate stale and asks for a
    /// retrain at once; the swap that follows makes the certificate fresh again. The unshifted
    /// stream before it raised no alarm.
    #[test]
    fn a_covariate_shift_is_detected_and_marks_the_certificate_stale_until_a_swap() {
        check_covariate_shift("features = false\n", "scores");
    }

    /// The same shift moves the feature means, which the `features` signal (on by default)
    /// sees first here; it acts as the `scores` one.
    #[test]
    fn a_covariate_shift_of_the_feature_means_is_a_drift_too() {
        check_covariate_shift("", "features");
    }

    fn check_covariate_shift(drift_keys: &str, signal: &str) {
        let dir = tempfile::tempdir().expect("temp dir");
        let extra = format!("[drift]\nwindow = 200\nevery = 20\n{drift_keys}");
        let (mut e, registry) = engine_with(dir.path(), &extra, Box::new(Discard));
        let version = feed_until_first_model(&mut e, &registry);
        e.config.retrain.every_events = 1_000_000;
        let records: Vec<Record> = RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .map(|r| r.expect("record"))
            .filter(|r| r.channel == Channel::Unlabeled)
            .collect();
        let detections = |e: &Engine| e.metrics.drift_detected.with_label_values(&[signal]).get();
        let mut ts = e.newest_ts.expect("clock");
        let mut resend = |e: &mut Engine, record: &Record, scale: f64, tag: &str| {
            let mut event: serde_json::Value =
                serde_json::from_slice(&record.payload).expect("json");
            for v in event["x"].as_array_mut().expect("dense") {
                *v = (v.as_f64().expect("number") * scale).into();
            }
            ts += 1;
            let id = format!("{tag}-{ts}");
            event["id"] = id.clone().into();
            event["ts"] = ts.into();
            let payload = serde_json::to_vec(&event).expect("json");
            e.handle(&Record::new(Channel::Unlabeled, ts, Some(id), payload))
                .expect("handled");
        };
        for record in &records[..600] {
            resend(&mut e, record, 1.0, "same");
        }
        assert_eq!(detections(&e), 0, "no alarm on the unshifted stream");
        assert_eq!(e.metrics.certificate_stale.get(), 0);
        // No retrain can run meanwhile, so the stale mark stays visible.
        let min_positive = e.config.retrain.min_positive;
        e.config.retrain.min_positive = usize::MAX;
        let fired_at = records[600..900]
            .iter()
            .enumerate()
            .find_map(|(i, record)| {
                resend(&mut e, record, 3.0, "shifted");
                (detections(&e) > 0).then_some(i)
            });
        let fired_at = fired_at.expect("the shift is detected");
        assert!(fired_at < 200, "detected after {fired_at} shifted events");
        assert_eq!(detections(&e), 1);
        assert_eq!(e.metrics.certificate_stale.get(), 1);
        assert!(e.early_retrain);
        assert_eq!(registry.active().map(|m| m.meta.version), Some(version));
        e.config.retrain.min_positive = min_positive;
        resend(&mut e, &records[900], 3.0, "shifted");
        assert!(
            registry.active().expect("model").meta.version > version,
            "the early retrain swapped a model in"
        );
        assert_eq!(e.metrics.certificate_stale.get(), 0, "fresh after the swap");
    }

    /// A τ-FPL solution that gains nothing over a constant scorer is refused as `no_gain`,
    /// before its threshold is looked at (also for a model a trainer publishes).
    #[test]
    fn the_gate_refuses_a_degenerate_tfpl_solution() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = "algorithm = \"tfpl\"\ntau = 0.05\nseed = 1\n";
        let (mut e, registry) = engine_of(dir.path(), model, "", Box::new(Discard));
        feed_until_first_model(&mut e, &registry);
        let active = registry.active().expect("model");
        assert!(!active.model.degenerate());
        assert_eq!(active.model.report()["degenerate"], false);
        let mut flat = active.model.clone();
        if let Model::Tfpl(entry) = &mut flat {
            entry.fit.report.primal_objective = 1.0;
        }
        assert!(flat.degenerate());
        match e.certify(&flat) {
            Some((GateReason::NoGain, detail)) => assert!(detail.contains("rank_tau"), "{detail}"),
            other => panic!("{other:?}"),
        }
    }

    /// The R a τ-FPL model was fitted with.
    fn fitted_reg(model: &Model) -> f64 {
        match model {
            Model::Tfpl(t) => t.fit.reg,
            other => panic!("not a tfpl model: {other:?}"),
        }
    }

    /// With `rank_tau` and `reg` `"auto"` (the defaults) the first retrain searches τ-FPL's
    /// depth and R; later ones reuse them until a drift detection forgets them or a model
    /// shows they stopped paying.
    #[test]
    fn an_auto_rank_tau_is_searched_once_and_reused_while_it_pays() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = "algorithm = \"tfpl\"\ntau = 0.05\nseed = 1\n";
        let (mut e, registry) = engine_of(dir.path(), model, "", Box::new(Discard));
        assert!(e.metrics.rank_tau.get().is_nan());
        assert!(e.metrics.tfpl_reg.get().is_nan());
        feed_until_first_model(&mut e, &registry);
        let searches = |e: &Engine| e.metrics.rank_tau_searches.get();
        let memory = |e: &Engine| e.learner.as_ref().and_then(|l| l.rank);
        assert_eq!(searches(&e), 1);
        let kept = memory(&e).expect("a kept depth");
        let (chosen, reg) = (kept.rank_tau, kept.reg);
        assert_eq!(e.metrics.rank_tau.get(), chosen);
        assert_eq!(e.metrics.tfpl_reg.get(), reg);
        assert!(crate::learn::rank_tau::rank_grid(0.05).contains(&chosen));
        assert!(crate::learn::rank_tau::REG_GRID.contains(&reg));
        let active = registry.active().expect("model");
        assert!(!active.model.degenerate());
        assert_eq!(
            fitted_reg(&active.model),
            reg,
            "the model is fitted at the chosen R"
        );
        e.retrain();
        assert_eq!(searches(&e), 1, "the kept depth is reused");
        assert_eq!(
            memory(&e).map(|m| (m.rank_tau, m.reg, m.reused)),
            Some((chosen, reg, 1))
        );
        assert_eq!(fitted_reg(&registry.active().expect("model").model), reg);
        e.forget_rank_choice();
        e.retrain();
        assert_eq!(searches(&e), 2, "searched again after being forgotten");
        if let Some(m) = e.learner.as_mut().and_then(|l| l.rank.as_mut()) {
            m.tpr_at_choice = Some((2.0, 1000));
        }
        e.retrain();
        assert_eq!(searches(&e), 2);
        assert!(memory(&e).is_none(), "a TPR drop forgets the depth");
        e.retrain();
        assert_eq!(searches(&e), 3);
    }

    /// A kept depth stops paying only on a TPR drop beyond both 0.05 and its noise.
    #[test]
    fn a_tpr_drop_within_its_noise_keeps_the_depth() {
        // Φ⁻¹(1 − 0.05/20).
        let z = std::f64::consts::SQRT_2 * statrs::function::erf::erf_inv(1.0 - 2.0 * 0.0025);
        assert!((RankMemory::DROP_Z - z).abs() < 1e-3, "{z}");
        // 0.885 on 3 489 positives, then 0.816 on 582 (the 1 M-event replay's first drop):
        // se 0.0148, z·se 0.042 < 0.069.
        assert!(RankMemory::dropped((0.885, 3489), (0.816, 582)));
        // 0.85 then 0.79 on 300 each: se 0.0314, z·se 0.088 > 0.06 (the fixed 0.05 fired).
        assert!(!RankMemory::dropped((0.85, 300), (0.79, 300)));
        // 0.85 then 0.75 on 300 each: se 0.0327, z·se 0.092 < 0.10.
        assert!(RankMemory::dropped((0.85, 300), (0.75, 300)));
        // 0.04 on 5 000 each is far beyond noise (se 0.0076) but under the 0.05 floor.
        assert!(!RankMemory::dropped((0.85, 5000), (0.81, 5000)));
        assert!(RankMemory::dropped((0.85, 5000), (0.79, 5000)));
        // No positives: nothing to judge by.
        assert!(!RankMemory::dropped((0.9, 0), (0.1, 500)));
        assert!(!RankMemory::dropped((0.9, 500), (0.0, 0)));
    }

    /// A `rank_tau` and `reg` that are numbers are used as they are: nothing is searched.
    #[test]
    fn a_fixed_rank_tau_and_reg_are_not_searched() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = "algorithm = \"tfpl\"\ntau = 0.05\nrank_tau = 0.2\nreg = 0.003\nseed = 1\n";
        let (mut e, registry) = engine_of(dir.path(), model, "", Box::new(Discard));
        feed_until_first_model(&mut e, &registry);
        assert_eq!(e.metrics.rank_tau_searches.get(), 0);
        assert!(e.metrics.tfpl_reg.get().is_nan());
        let active = registry.active().expect("model");
        assert_eq!(fitted_reg(&active.model), 0.003);
    }

    /// A scorer takes its trainer's fresh thresholds: the active model again with a higher
    /// `threshold_version` replaces the threshold only; an older threshold version, or other
    /// coefficients under the same model version, are refused.
    #[test]
    fn a_scorer_installs_the_fresh_thresholds_of_its_active_model() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (mut trainer, trained) = engine(dir.path(), "");
        feed_until_first_model(&mut trainer, &trained);
        let active = trained.active().expect("model");
        let scorer_dir = tempfile::tempdir().expect("temp dir");
        let (mut scorer, registry) = engine(scorer_dir.path(), "");
        let version = active.meta.version;
        assert_eq!(scorer.install_remote(active.scoring_only()), Ok(version));
        let mut fresh = active.scoring_only();
        let mut threshold = fresh.model.threshold().cloned().expect("threshold");
        threshold.threshold += 0.25;
        fresh.model.set_threshold(threshold.clone());
        fresh.threshold_version = 3;
        assert_eq!(scorer.install_remote(fresh.clone()), Ok(version));
        let now = registry.active().expect("model");
        assert_eq!(now.threshold_version, 3);
        assert_eq!(now.model.threshold(), Some(&threshold));
        assert_eq!(scorer.metrics.threshold_version.get(), 3);
        assert_eq!(registry.models().len(), 1, "the same model, not a new one");
        let mut older = fresh.clone();
        older.threshold_version = 2;
        assert!(scorer.install_remote(older).is_err());
        let mut other = fresh.clone();
        other.threshold_version = 4;
        if let Model::Usmo(entry) = &mut other.model {
            entry.fit.expansion.coef[0] += 1.0;
        }
        let refused = scorer
            .install_remote(other)
            .expect_err("other coefficients");
        assert!(refused.contains("coefficients"), "{refused}");
        assert_eq!(registry.active().expect("model").threshold_version, 3);
    }

    #[test]
    fn a_ranking_only_engine_serves_every_event_unflagged_and_uncertified() {
        let dir = tempfile::tempdir().expect("temp dir");
        let recorded = Recorded::default();
        let (mut e, registry) = engine_with(dir.path(), "", Box::new(recorded.clone()));
        e.config.model.threshold = Some(ThresholdName::None);
        let mut unlabeled = 0;
        for record in RecordReader::open(std::path::Path::new(STREAM))
            .expect("stream")
            .take(2000)
        {
            let record = record.expect("record");
            unlabeled += usize::from(record.channel == Channel::Unlabeled);
            e.handle(&record).expect("handled");
        }
        e.finish().expect("finish");
        let active = registry.active().expect("a ranking-only model is accepted");
        assert!(active.model.threshold().is_none());
        let outputs = recorded.take();
        assert_eq!(outputs.len(), unlabeled);
        let scored: Vec<&ScoreOutput> = outputs
            .iter()
            .filter(|o| o.status == crate::engine::scoring::ScoreStatus::Scored)
            .collect();
        assert!(
            scored.len() > unlabeled / 2,
            "{} of {unlabeled}",
            scored.len()
        );
        for o in &scored {
            assert_eq!(o.flagged, Some(false));
            assert_eq!(o.threshold, None);
            assert_eq!(o.certified, Some(false));
            assert!(o.score.is_some_and(f64::is_finite));
        }
        // Nothing was held out: every snapshot row trained the scorer.
        let n = e.dimension().expect("locked");
        let snapshot = e.training_snapshot(n).expect("snapshot");
        assert!(snapshot.held_out.iter().all(|&h| !h));
    }

    /// The first retrain's scaler is fitted on the training events alone: calibration events
    /// far out (features near 1e4) leave it at the training events' own mean and standard
    /// deviation (the job's scaler is the one its model stores).
    #[test]
    fn the_retrain_scaler_is_fitted_on_the_training_events_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        // No retrain starts by itself: the test prepares the first one. The held-out events are
        // chosen by their hash, so the test knows them before sending.
        let model =
            "algorithm = \"usmo\"\nprior = 0.38\ntau = 0.05\ncalibration = \"hash\"\nseed = 1\n";
        let (mut e, _) = engine_of(dir.path(), model, "min_positive = 1000", Box::new(Discard));
        let percent = e.config.model.calibration_percent;
        let mut training: Vec<[f64; 3]> = Vec::new();
        for i in 0..600_i64 {
            let (channel, id) = if i % 4 == 0 {
                (Channel::Positive, format!("p{i}"))
            } else {
                (Channel::Unlabeled, format!("u{i}"))
            };
            let k = i as f64;
            let x = if in_calibration(&id, percent) {
                [1e4 + k, -3e4, 5e3 * (k % 2.0)]
            } else {
                let x = [k % 7.0, -(k % 5.0), 0.25 * (k % 3.0)];
                training.push(x);
                x
            };
            let ts = 1_000_000 + i;
            let payload = format!(
                "{{\"id\":\"{id}\",\"ts\":{ts},\"x\":[{},{},{}]}}",
                x[0], x[1], x[2]
            );
            let record = Record::new(channel, ts, Some(id), payload.into_bytes());
            e.handle(&record).expect("handled");
        }
        let n = training.len() as f64;
        assert!(n > 300.0 && n < 500.0, "{n} training events of 600");
        let job = e.prepare_retrain(Instant::now()).expect("a retrain job");
        // Per feature: the training events' mean maps to 0 and mean + sd to 1.
        let mean: Vec<f64> = (0..3)
            .map(|j| training.iter().map(|x| x[j]).sum::<f64>() / n)
            .collect();
        let sd: Vec<f64> = (0..3)
            .map(|j| {
                let ss: f64 = training.iter().map(|x| (x[j] - mean[j]).powi(2)).sum();
                (ss / n).sqrt()
            })
            .collect();
        let scaled = |x: &[f64]| {
            let mut out = [0.0; 3];
            job.scaler
                .transform_row_into(crate::data::RowRef::Dense(x), &mut out);
            out
        };
        let plus_sd: Vec<f64> = mean.iter().zip(&sd).map(|(m, s)| m + s).collect();
        for (got, want) in [(scaled(&mean), 0.0), (scaled(&plus_sd), 1.0)] {
            assert!(
                got.iter().all(|v| (v - want).abs() < 1e-9),
                "{got:?}, want {want} (mean {mean:?}, sd {sd:?})"
            );
        }
        // The same scaler as fitted on the snapshot's rows that are not held out.
        let snapshot = &job.snapshot;
        let kept = crate::learn::spec::training_rows(&snapshot.held_out);
        assert_eq!(kept.len() as f64, n);
        let spec = e.config.model.learner_spec().check().expect("spec");
        assert_eq!(job.scaler, spec.scaler(&snapshot.data.select(&kept)));
    }

    /// A three-feature event on `channel` at event time `ts`.
    fn event(channel: Channel, id: &str, ts: i64) -> Record {
        let payload = format!("{{\"id\":\"{id}\",\"ts\":{ts},\"x\":[0.5,-1.0,2.0]}}");
        Record::new(channel, ts, Some(id.into()), payload.into_bytes())
    }

    fn reason_of(o: &ScoreOutput) -> Option<UnscoredReason> {
        match o.status {
            crate::engine::scoring::ScoreStatus::Unscored { reason } => Some(reason),
            crate::engine::scoring::ScoreStatus::Scored => None,
        }
    }

    fn unscored_count(e: &Engine, reason: &str) -> u64 {
        e.metrics.unscored_events.with_label_values(&[reason]).get()
    }

    #[test]
    fn an_event_waits_for_a_first_model_at_most_max_wait_of_event_time() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Recorded::default();
        // No retrain can start (too few positives): every unlabeled event waits.
        let (mut e, _) = engine_with(
            dir.path(),
            "min_positive = 1000\n[scoring]\nmax_wait = \"100ms\"\ndimension_quorum = 1",
            Box::new(out.clone()),
        );
        let max_wait = 100;
        let mut arrived: BTreeMap<String, i64> = BTreeMap::new();
        let (mut clock, mut unlabeled) = (1_000_000_i64, 0);
        for i in 0..400_i64 {
            // Irregular gaps; every fifth event a positive, which moves the clock too.
            let before = clock;
            clock += [1, 7, 3, 0, 12][(i % 5) as usize];
            let (channel, id) = if i % 5 == 4 {
                (Channel::Positive, format!("p{i}"))
            } else {
                (Channel::Unlabeled, format!("u{i}"))
            };
            // One late event: older than the clock (which it does not move), it still waits
            // from its arrival.
            let ts = if i == 200 {
                clock = before;
                clock - 5_000
            } else {
                clock
            };
            if channel == Channel::Unlabeled {
                arrived.insert(id.clone(), clock);
                unlabeled += 1;
            }
            e.handle(&event(channel, &id, ts)).expect("handled");
            for o in out.take() {
                assert_eq!(
                    reason_of(&o),
                    Some(UnscoredReason::NoAcceptedModel),
                    "{o:?}"
                );
                let waited = clock - arrived[&o.id];
                assert!(waited >= max_wait, "{} emitted after {waited} ms", o.id);
                assert!(
                    before - arrived[&o.id] < max_wait,
                    "{} waited past max_wait: due at {before} already",
                    o.id
                );
                arrived.remove(&o.id);
            }
        }
        let expired = unlabeled - arrived.len();
        assert!(expired > 250, "{expired} of {unlabeled} expired");
        assert_eq!(unscored_count(&e, "no_accepted_model"), expired as u64);
        assert_eq!(e.metrics.unscored_buffer.get(), arrived.len() as i64);
        // The end of input emits the rest, in arrival order.
        e.finish().expect("finished");
        let rest = out.take();
        assert_eq!(rest.len(), arrived.len());
        assert!(rest
            .iter()
            .all(|o| reason_of(o) == Some(UnscoredReason::Shutdown)
                && clock - arrived[&o.id] < max_wait));
        assert_eq!(unscored_count(&e, "shutdown"), rest.len() as u64);
        assert_eq!(
            e.metrics
                .events
                .with_label_values(&["unlabeled", "unscored"])
                .get(),
            unlabeled as u64
        );
        assert_eq!(e.metrics.unscored_buffer.get(), 0);
    }

    #[test]
    fn on_a_live_source_the_wall_clock_ends_the_wait_too() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Recorded::default();
        let (mut e, _) = engine_with(
            dir.path(),
            "min_positive = 1000\n[scoring]\nmax_wait = \"20s\"",
            Box::new(out.clone()),
        );
        let t0 = Instant::now();
        let s = std::time::Duration::from_secs;
        // Event time moves 1 ms per event: it never ends a wait here.
        for i in 0..10 {
            e.handle(&event(Channel::Unlabeled, &format!("a{i}"), i))
                .expect("handled");
        }
        e.tick(t0).expect("tick");
        e.tick(t0 + s(19)).expect("tick");
        assert!(out.take().is_empty());
        for i in 10..15 {
            e.handle(&event(Channel::Unlabeled, &format!("b{i}"), i))
                .expect("handled");
        }
        // The first ten waited 20 s since the tick that saw them; the five newer ones start
        // waiting at this tick.
        e.tick(t0 + s(20)).expect("tick");
        let first = out.take();
        assert_eq!(
            first.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
            (0..10).map(|i| format!("a{i}")).collect::<Vec<_>>()
        );
        assert!(first
            .iter()
            .all(|o| reason_of(o) == Some(UnscoredReason::NoAcceptedModel)));
        e.tick(t0 + s(39)).expect("tick");
        assert!(out.take().is_empty());
        e.tick(t0 + s(40)).expect("tick");
        assert_eq!(out.take().len(), 5);
        assert_eq!(unscored_count(&e, "no_accepted_model"), 15);
        assert_eq!(e.metrics.unscored_buffer.get(), 0);
    }

    #[test]
    fn a_full_buffer_or_a_zero_wait_emits_at_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Recorded::default();
        let (mut e, _) = engine_with(
            dir.path(),
            "min_positive = 1000\n[scoring]\nbuffer_before_model = 3\ndimension_quorum = 1",
            Box::new(out.clone()),
        );
        for i in 0..5 {
            e.handle(&event(Channel::Unlabeled, &format!("u{i}"), i))
                .expect("handled");
        }
        let full = out.take();
        assert_eq!(
            full.iter()
                .map(|o| (o.id.as_str(), reason_of(o)))
                .collect::<Vec<_>>(),
            [
                ("u3", Some(UnscoredReason::BufferFull)),
                ("u4", Some(UnscoredReason::BufferFull))
            ]
        );
        assert_eq!(unscored_count(&e, "buffer_full"), 2);
        assert_eq!(e.metrics.unscored_buffer.get(), 3);

        let dir = tempfile::tempdir().expect("temp dir");
        let (mut e, _) = engine_with(
            dir.path(),
            "min_positive = 1000\n[scoring]\nmax_wait = 0",
            Box::new(out.clone()),
        );
        e.handle(&event(Channel::Unlabeled, "now", 7))
            .expect("handled");
        let now = out.take();
        assert_eq!(now.len(), 1);
        assert_eq!(reason_of(&now[0]), Some(UnscoredReason::NoAcceptedModel));
    }
}
