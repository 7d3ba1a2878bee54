//! Prometheus metrics of the daemon, registered on an injected [`prometheus::Registry`] (no
//! global state, so tests and several daemons in one process never share counters).
//!
//! Names follow the Prometheus conventions that `promtool check metrics` enforces: a `neyman_`
//! prefix, base units in the name (`_seconds`, `_bytes`), `_total` on counters. Label values
//! known in advance (channels, outcomes, retrain results) are created at zero, so a rate or an
//! absence alert works before the first event of its kind. The README's metrics table documents
//! each family; [`FAMILIES`] lists them for the tests (promtool's lint, the Grafana dashboard).

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::learn::threshold::ThresholdResult;

/// The channels an event can arrive on.
pub const CHANNELS: [&str; 3] = ["positive", "unlabeled", "negative"];
/// What happened to an arriving event: the `outcome` label of `neyman_events_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    Windowed,
    Restored,
    Duplicate,
    Expired,
    Scored,
    Buffered,
    Unscored,
    Rejected,
}

impl EventOutcome {
    /// Every outcome, in label order (the engine keeps one counter per channel and outcome,
    /// indexed by this order, so counting an event is an array lookup).
    pub const ALL: [EventOutcome; 8] = [
        EventOutcome::Windowed,
        EventOutcome::Restored,
        EventOutcome::Duplicate,
        EventOutcome::Expired,
        EventOutcome::Scored,
        EventOutcome::Buffered,
        EventOutcome::Unscored,
        EventOutcome::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventOutcome::Windowed => "windowed",
            EventOutcome::Restored => "restored",
            EventOutcome::Duplicate => "duplicate",
            EventOutcome::Expired => "expired",
            EventOutcome::Scored => "scored",
            EventOutcome::Buffered => "buffered",
            EventOutcome::Unscored => "unscored",
            EventOutcome::Rejected => "rejected",
        }
    }
}
/// How an arriving event entered (or did not enter) its window: the `outcome` label of
/// `neyman_intake_events_total`, exactly one per event handled (`not_windowed`: a scorer,
/// which keeps no windows).
pub const INTAKE_OUTCOMES: [&str; 6] = [
    "windowed",
    "restored",
    "duplicate",
    "expired",
    "rejected",
    "not_windowed",
];
/// An [`INTAKE_OUTCOMES`] label as its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    Windowed,
    Restored,
    Duplicate,
    Expired,
    Rejected,
    NotWindowed,
}

/// An [`ANSWER_OUTCOMES`] label as its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Scored,
    Unscored,
    DeadLettered,
}

/// How an unlabeled event was answered: the `outcome` label of `neyman_answers_total`,
/// exactly one per event answered (events waiting for a first model are answered later).
pub const ANSWER_OUTCOMES: [&str; 3] = ["scored", "unscored", "dead_lettered"];

/// How a due retrain ended (`fallback`: CutS3VM's fallback learner trained, and its model was
/// swapped in).
pub const RETRAIN_RESULTS: [&str; 6] = [
    "swapped",
    "fallback",
    "rejected",
    "skipped",
    "failed",
    "cancelled",
];
/// Why a retrain failed: `time_limit` (`retrain.time_limit` ran out; the retrain was stopped)
/// or `error` (the data or the solver refused; the log says which).
pub const RETRAIN_FAILURES: [&str; 2] = ["time_limit", "error"];
/// How a due recalibration ended: a fresh threshold swapped in, one swapped in that flags none
/// of the fresh positives (an early retrain is asked for), or none (too few fresh negatives).
pub const RECALIBRATION_RESULTS: [&str; 3] = ["recalibrated", "flags_nothing", "skipped"];
/// What a drift detection was seen on: the `signal` label of `neyman_drift_detected_total`.
pub const DRIFT_SIGNALS: [&str; 3] = ["scores", "features", "feedback"];

/// Families kept for one release after a replacement; the dashboard no longer charts them.
/// `neyman_events_total`: by `neyman_intake_events_total` and `neyman_answers_total`.
pub const DEPRECATED_FAMILIES: [&str; 1] = ["neyman_events_total"];

/// The git commit this binary was built from (build.rs; `unknown` outside a git checkout).
pub const BUILD_COMMIT: &str = env!("BUILT_FROM_COMMIT");

/// Every metric family name, for the promtool test and the dashboard check.
pub const FAMILIES: [&str; 55] = [
    "neyman_events_total",
    "neyman_model_info",
    "neyman_build_info",
    "neyman_intake_events_total",
    "neyman_answers_total",
    "neyman_dlq_events_total",
    "neyman_window_events",
    "neyman_window_bytes",
    "neyman_retrains_total",
    "neyman_retrain_rejections_total",
    "neyman_retrain_failures_total",
    "neyman_retrain_duration_seconds",
    "neyman_solver_iterations_total",
    "neyman_solver_kernel_evaluations_total",
    "neyman_model_version",
    "neyman_model_trained_at_seconds",
    "neyman_model_age_seconds",
    "neyman_threshold",
    "neyman_threshold_version",
    "neyman_recalibrations_total",
    "neyman_drift_detected_total",
    "neyman_certificate_stale",
    "neyman_rank_tau_searches_total",
    "neyman_rank_tau",
    "neyman_tfpl_reg",
    "neyman_target_fpr",
    "neyman_fpr_bound",
    "neyman_fpr_pu_estimate",
    "neyman_prior_estimate",
    "neyman_prior_lower_bound",
    "neyman_prior_upper_bound",
    "neyman_tpr_estimate",
    "neyman_fpr_observed",
    "neyman_fpr_observed_negatives",
    "neyman_fpr_observed_flagged",
    "neyman_fpr_observed_p_value",
    "neyman_flag_rate",
    "neyman_scoring_latency_seconds",
    "neyman_http_requests_total",
    "neyman_unscored_buffer_events",
    "neyman_unscored_events_total",
    "neyman_model_rollbacks_total",
    "neyman_kafka_consumer_lag_messages",
    "neyman_kafka_uncommitted_messages",
    "neyman_kafka_rebalances_total",
    "neyman_kafka_commits_total",
    "neyman_kafka_commit_failures_total",
    "neyman_kafka_produce_errors_total",
    "neyman_kafka_in_flight_messages",
    "neyman_kafka_paused_partitions",
    "neyman_kafka_model_publish_failures_total",
    "neyman_audits_total",
    "neyman_audit_gap",
    "neyman_audit_model_gap",
    "neyman_audit_seconds",
];
/// How an audit ended: the exact search's statuses, or `failed` (it could not run).
pub const AUDIT_STATUSES: [&str; 5] =
    ["optimal", "time_limit", "node_limit", "cancelled", "failed"];
/// Rebalance callbacks by kind.
pub const REBALANCE_KINDS: [&str; 3] = ["assign", "revoke", "error"];
/// Why a model was not published to the `models` topic.
pub const MODEL_PUBLISH_FAILURES: [&str; 3] = ["oversize", "encode", "delivery"];

/// The daemon's metric handles.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Events by channel and outcome. Deprecated (kept for one release): an unlabeled event
    /// counts in several outcomes (`windowed`, `buffered`, then `scored`), so the outcomes do
    /// not sum to the events; `intake_events` and `answers` do.
    pub events: IntCounterVec,
    /// Events by channel and how they entered the windows ([`INTAKE_OUTCOMES`]): one each.
    pub intake_events: IntCounterVec,
    /// Unlabeled events by how they were answered ([`ANSWER_OUTCOMES`]): one each.
    pub answers: IntCounterVec,
    /// Events sent to the dead-letter queue, by reason.
    pub dlq: IntCounterVec,
    /// Events held in each channel's window.
    pub window_events: IntGaugeVec,
    /// Approximate heap bytes of each channel's window.
    pub window_bytes: IntGaugeVec,
    /// Due retrains by result.
    pub retrains: IntCounterVec,
    /// Rejected retrains by gate reason.
    pub retrain_rejections: IntCounterVec,
    /// Failed retrains by reason ([`RETRAIN_FAILURES`]).
    pub retrain_failures: IntCounterVec,
    /// Wall time of retrains that ran (training and calibration), by algorithm.
    pub retrain_duration: HistogramVec,
    /// Pair steps (usmo) or gradient steps (tfpl) of every retrain.
    pub solver_iterations: IntCounter,
    /// Kernel values computed by every retrain.
    pub solver_kernel_evaluations: IntCounter,
    /// Version of the active model (0 before the first).
    pub model_version: IntGauge,
    /// 1 for the active model: `version`, `algorithm`, `threshold_method` as labels.
    pub model_info: IntGaugeVec,
    /// 1: `version` and `commit` of this build.
    pub build_info: IntGaugeVec,
    /// Event time the active model was trained at, seconds since the epoch.
    pub model_trained_at: Gauge,
    /// Event time of the newest scored event minus `model_trained_at`.
    pub model_age: Gauge,
    /// The active model's score threshold.
    pub threshold: Gauge,
    /// Which of the active model's thresholds scores now (0: the one it was trained with).
    pub threshold_version: IntGauge,
    /// Due recalibrations by result ([`RECALIBRATION_RESULTS`]).
    pub recalibrations: IntCounterVec,
    /// Drift detections by signal ([`DRIFT_SIGNALS`]).
    pub drift_detected: IntCounterVec,
    /// 1 from a drift detection until the next model swap or fresh threshold, else 0.
    pub certificate_stale: IntGauge,
    /// τ-FPL ranking-depth and R searches (`rank_tau` or `reg` `"auto"`).
    pub rank_tau_searches: IntCounter,
    /// The depth the last search chose (NaN before one).
    pub rank_tau: Gauge,
    /// The R the last search chose (NaN before one).
    pub tfpl_reg: Gauge,
    /// τ, the target false-positive rate.
    pub target_fpr: Gauge,
    /// The active threshold's certified FPR bound (umbrella, pu-umbrella; NaN for oob).
    pub fpr_bound: Gauge,
    /// PU estimate of the FPR: (flag rate − π·TPR) / (1 − π) on recent unlabeled events.
    pub fpr_pu_estimate: Gauge,
    /// With `prior_min` or `prior_max` = `"auto"`: the positive share of the unlabeled events
    /// estimated from the last retrain's calibration events, and the bounds on it
    /// (docs/certificates.md §5; the lower bound assumes an anchor). NaN before any value.
    pub prior_estimate: Gauge,
    pub prior_lower_bound: Gauge,
    pub prior_upper_bound: Gauge,
    /// Held-out TPR estimate of the active model.
    pub tpr_estimate: Gauge,
    /// Flagged share of the negative-feedback events in the rolling window.
    pub fpr_observed: Gauge,
    /// Negative-feedback events in the rolling window (the denominator of `fpr_observed`).
    pub fpr_observed_negatives: IntGauge,
    /// Flagged negative-feedback events in the rolling window (the numerator).
    pub fpr_observed_flagged: IntGauge,
    /// P(Bin(negatives, τ) ≥ flagged): the one-sided p-value of the observed false positives
    /// against the target; an alert on it is a test, not a raw-rate threshold.
    pub fpr_observed_p_value: Gauge,
    /// Flagged share of recently scored unlabeled events.
    pub flag_rate: Gauge,
    /// Time to score one batch, per event (the stream path times one event in 16).
    pub scoring_latency: Histogram,
    /// HTTP requests by route and status code.
    pub http_requests: IntCounterVec,
    /// Unlabeled events held until the first model exists.
    pub unscored_buffer: IntGauge,
    /// Unlabeled events emitted without a score, by reason (the engine creates its reasons at
    /// zero: they are the JSON `reason` values it writes).
    pub unscored_events: IntCounterVec,
    /// Rollbacks through the admin API.
    pub rollbacks: IntCounter,
    /// Consumer lag per assigned input partition: the backlog not yet read (librdkafka
    /// statistics: high watermark minus the position handed to neyman). Reads 0 when neyman
    /// keeps up. Absent with a replay source.
    pub kafka_consumer_lag: IntGaugeVec,
    /// Messages read but not yet committed per assigned input partition (the position handed
    /// to neyman minus the committed offset): events the windows still hold, or whose outputs
    /// are not acknowledged yet. Large by design (the windows' span), not a backlog.
    pub kafka_uncommitted: IntGaugeVec,
    /// Consumer-group rebalance callbacks by kind (assign, revoke, error).
    pub kafka_rebalances: IntCounterVec,
    /// Offset commits that succeeded.
    pub kafka_commits: IntCounter,
    /// Offset commits the broker or client refused (retried at the next commit).
    pub kafka_commit_failures: IntCounter,
    /// Produce attempts that failed for good (after librdkafka's retries), by topic; the
    /// message is sent again and its input offset is not committed meanwhile.
    pub kafka_produce_errors: IntCounterVec,
    /// Scores and dead letters sent and not yet acknowledged by the broker.
    pub kafka_in_flight: IntGauge,
    /// Input partitions paused by backpressure (too many unacknowledged outputs).
    pub kafka_paused_partitions: IntGauge,
    /// Accepted models that could not be published to the `models` topic, by reason.
    pub kafka_model_publish_failures: IntCounterVec,
    /// Audits by how they ended ([`AUDIT_STATUSES`]).
    pub audits: IntCounterVec,
    /// The last audit's certified gap: (objective − lower bound)/objective of the optimum it
    /// found (NaN before the first).
    pub audit_gap: Gauge,
    /// The last audit's gap of the active model's labelling: (its objective − lower
    /// bound)/its objective (NaN without a model or when its labelling breaks the balance row).
    pub audit_model_gap: Gauge,
    /// Wall time of the last audit.
    pub audit_seconds: Gauge,
}

fn register<T: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: T,
) -> Result<T, prometheus::Error> {
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

/// A counter with one label whose known values start at zero.
fn labelled_counter(
    registry: &Registry,
    name: &str,
    help: &str,
    label: &str,
    values: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    let counter = register(
        registry,
        IntCounterVec::new(Opts::new(name, help), &[label])?,
    )?;
    for v in values {
        counter.with_label_values(&[v]);
    }
    Ok(counter)
}

/// A gauge registered at NaN (no value yet).
fn nan_gauge(registry: &Registry, name: &str, help: &str) -> Result<Gauge, prometheus::Error> {
    let gauge = register(registry, Gauge::new(name, help)?)?;
    gauge.set(f64::NAN);
    Ok(gauge)
}

impl Metrics {
    /// Creates every family on `registry` and zero-initialises the known label values.
    pub fn new(registry: &Registry) -> Result<Metrics, prometheus::Error> {
        let r = registry;
        // CPU, memory, file descriptors and threads of this process (`process_*`).
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        let events = register(
            r,
            IntCounterVec::new(
                Opts::new("neyman_events_total", "Events by channel and outcome."),
                &["channel", "outcome"],
            )?,
        )?;
        for channel in CHANNELS {
            for outcome in EventOutcome::ALL {
                events.with_label_values(&[channel, outcome.as_str()]);
            }
        }
        let intake_events = register(
            r,
            IntCounterVec::new(
                Opts::new(
                    "neyman_intake_events_total",
                    "Events by channel and how they entered the windows; one outcome per event.",
                ),
                &["channel", "outcome"],
            )?,
        )?;
        for channel in CHANNELS {
            for outcome in INTAKE_OUTCOMES {
                intake_events.with_label_values(&[channel, outcome]);
            }
        }
        let answers = register(
            r,
            IntCounterVec::new(
                Opts::new(
                    "neyman_answers_total",
                    "Unlabeled events answered: scored, unscored or dead-lettered; one outcome per event.",
                ),
                &["outcome"],
            )?,
        )?;
        for outcome in ANSWER_OUTCOMES {
            answers.with_label_values(&[outcome]);
        }
        let window_events = register(
            r,
            IntGaugeVec::new(
                Opts::new(
                    "neyman_window_events",
                    "Events held in each channel's window.",
                ),
                &["channel"],
            )?,
        )?;
        let window_bytes = register(
            r,
            IntGaugeVec::new(
                Opts::new(
                    "neyman_window_bytes",
                    "Approximate heap bytes of each channel's window.",
                ),
                &["channel"],
            )?,
        )?;
        for channel in CHANNELS {
            window_events.with_label_values(&[channel]);
            window_bytes.with_label_values(&[channel]);
        }
        let retrains = register(
            r,
            IntCounterVec::new(
                Opts::new("neyman_retrains_total", "Due retrains by result."),
                &["result"],
            )?,
        )?;
        for result in RETRAIN_RESULTS {
            retrains.with_label_values(&[result]);
        }
        let retrain_failures = register(
            r,
            IntCounterVec::new(
                Opts::new(
                    "neyman_retrain_failures_total",
                    "Failed retrains by reason: time_limit (retrain.time_limit ran out) or error.",
                ),
                &["reason"],
            )?,
        )?;
        for reason in RETRAIN_FAILURES {
            retrain_failures.with_label_values(&[reason]);
        }
        let seconds_buckets = vec![
            0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
        ];
        Ok(Metrics {
            events,
            intake_events,
            answers,
            dlq: register(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "neyman_dlq_events_total",
                        "Events sent to the dead-letter queue, by reason.",
                    ),
                    &["reason"],
                )?,
            )?,
            window_events,
            window_bytes,
            retrains,
            retrain_rejections: register(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "neyman_retrain_rejections_total",
                        "Retrained models the gate rejected, by reason.",
                    ),
                    &["reason"],
                )?,
            )?,
            retrain_failures,
            retrain_duration: register(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "neyman_retrain_duration_seconds",
                        "Wall time of retrains (training and calibration), by algorithm.",
                    )
                    .buckets(seconds_buckets),
                    &["algorithm"],
                )?,
            )?,
            solver_iterations: register(
                r,
                IntCounter::new(
                    "neyman_solver_iterations_total",
                    "Solver steps of all retrains (usmo pair steps, tfpl gradient steps).",
                )?,
            )?,
            solver_kernel_evaluations: register(
                r,
                IntCounter::new(
                    "neyman_solver_kernel_evaluations_total",
                    "Kernel values computed by all retrains.",
                )?,
            )?,
            model_version: register(
                r,
                IntGauge::new(
                    "neyman_model_version",
                    "Version of the active model (0 before the first).",
                )?,
            )?,
            model_info: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "neyman_model_info",
                        "1 for the active model, labelled with its version, algorithm and threshold method (none: no threshold).",
                    ),
                    &["version", "algorithm", "threshold_method"],
                )?,
            )?,
            build_info: {
                let g = register(
                    r,
                    IntGaugeVec::new(
                        Opts::new(
                            "neyman_build_info",
                            "1, labelled with the neyman version and the git commit it was built from.",
                        ),
                        &["version", "commit"],
                    )?,
                )?;
                g.with_label_values(&[env!("CARGO_PKG_VERSION"), BUILD_COMMIT])
                    .set(1);
                g
            },
            model_trained_at: register(
                r,
                Gauge::new(
                    "neyman_model_trained_at_seconds",
                    "Event time the active model was trained at, seconds since the epoch.",
                )?,
            )?,
            model_age: register(
                r,
                Gauge::new(
                    "neyman_model_age_seconds",
                    "Event time of the newest scored event minus the active model's training time.",
                )?,
            )?,
            threshold: register(
                r,
                Gauge::new("neyman_threshold", "Score threshold of the active model.")?,
            )?,
            threshold_version: register(
                r,
                IntGauge::new(
                    "neyman_threshold_version",
                    "Which of the active model's thresholds scores now (0: the one it was trained with; one more per fresh threshold).",
                )?,
            )?,
            recalibrations: labelled_counter(
                r,
                "neyman_recalibrations_total",
                "Fresh-threshold recalibrations of the active model, by result.",
                "result",
                &RECALIBRATION_RESULTS,
            )?,
            drift_detected: labelled_counter(
                r,
                "neyman_drift_detected_total",
                "Drift detections on the active model's unlabeled scores, by signal.",
                "signal",
                &DRIFT_SIGNALS,
            )?,
            certificate_stale: register(
                r,
                IntGauge::new(
                    "neyman_certificate_stale",
                    "1 from a drift detection until the next model swap or fresh threshold, else 0.",
                )?,
            )?,
            rank_tau_searches: register(
                r,
                IntCounter::new(
                    "neyman_rank_tau_searches_total",
                    "tfpl ranking-depth and R searches (rank_tau or reg = auto): on the first retrain, after a drift detection and when the kept choice stops paying.",
                )?,
            )?,
            rank_tau: nan_gauge(
                r,
                "neyman_rank_tau",
                "The tfpl ranking depth the last search chose (rank_tau = auto; NaN before one).",
            )?,
            tfpl_reg: nan_gauge(
                r,
                "neyman_tfpl_reg",
                "The tfpl regularisation weight R the last search chose (reg = auto; NaN before one).",
            )?,
            target_fpr: register(
                r,
                Gauge::new("neyman_target_fpr", "Target false-positive rate tau.")?,
            )?,
            fpr_bound: register(
                r,
                Gauge::new(
                    "neyman_fpr_bound",
                    "Certified FPR bound of the active threshold at confidence 1-delta (NaN for oob).",
                )?,
            )?,
            fpr_pu_estimate: register(
                r,
                Gauge::new(
                    "neyman_fpr_pu_estimate",
                    "PU estimate of the FPR from the unlabeled flag rate, the prior and the held-out TPR.",
                )?,
            )?,
            prior_estimate: nan_gauge(
                r,
                "neyman_prior_estimate",
                "Positive share of the unlabeled events estimated at the last retrain (prior = auto).",
            )?,
            prior_lower_bound: nan_gauge(
                r,
                "neyman_prior_lower_bound",
                "Lower confidence bound on the positive share of the unlabeled events (prior_min = auto; assumes an anchor).",
            )?,
            prior_upper_bound: nan_gauge(
                r,
                "neyman_prior_upper_bound",
                "Upper confidence bound on the positive share of the unlabeled events (prior_max = auto).",
            )?,
            tpr_estimate: register(
                r,
                Gauge::new(
                    "neyman_tpr_estimate",
                    "Held-out true-positive rate estimate of the active model.",
                )?,
            )?,
            fpr_observed: register(
                r,
                Gauge::new(
                    "neyman_fpr_observed",
                    "Flagged share of negative-feedback events in the rolling window.",
                )?,
            )?,
            fpr_observed_negatives: register(
                r,
                IntGauge::new(
                    "neyman_fpr_observed_negatives",
                    "Negative-feedback events in the rolling window.",
                )?,
            )?,
            fpr_observed_flagged: register(
                r,
                IntGauge::new(
                    "neyman_fpr_observed_flagged",
                    "Flagged negative-feedback events in the rolling window.",
                )?,
            )?,
            // NaN until negative feedback arrives: 0 would read as proof that the FPR is
            // above tau (issue 22).
            fpr_observed_p_value: nan_gauge(
                r,
                "neyman_fpr_observed_p_value",
                "One-sided binomial p-value of the observed false positives against tau; NaN before any negative feedback.",
            )?,
            flag_rate: register(
                r,
                Gauge::new(
                    "neyman_flag_rate",
                    "Flagged share of recently scored unlabeled events.",
                )?,
            )?,
            scoring_latency: register(
                r,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "neyman_scoring_latency_seconds",
                        "Scoring time per event (batch time divided by batch size; one stream event in 16 is timed).",
                    )
                    .buckets(vec![
                        1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1,
                    ]),
                )?,
            )?,
            http_requests: register(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "neyman_http_requests_total",
                        "HTTP requests by route and status code.",
                    ),
                    &["route", "status"],
                )?,
            )?,
            unscored_buffer: register(
                r,
                IntGauge::new(
                    "neyman_unscored_buffer_events",
                    "Unlabeled events held until the first model exists.",
                )?,
            )?,
            unscored_events: register(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "neyman_unscored_events_total",
                        "Unlabeled events emitted without a score, by reason.",
                    ),
                    &["reason"],
                )?,
            )?,
            rollbacks: register(
                r,
                IntCounter::new(
                    "neyman_model_rollbacks_total",
                    "Rollbacks to the previous model through the admin API.",
                )?,
            )?,
            kafka_consumer_lag: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "neyman_kafka_consumer_lag_messages",
                        "Backlog per assigned input partition: high watermark minus the position read.",
                    ),
                    &["group", "topic", "partition"],
                )?,
            )?,
            kafka_uncommitted: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "neyman_kafka_uncommitted_messages",
                        "Messages read but not yet committed per assigned input partition (held by the windows or awaiting output acknowledgement).",
                    ),
                    &["group", "topic", "partition"],
                )?,
            )?,
            kafka_rebalances: labelled_counter(
                r,
                "neyman_kafka_rebalances_total",
                "Consumer-group rebalance callbacks by kind.",
                "kind",
                &REBALANCE_KINDS,
            )?,
            kafka_commits: register(
                r,
                IntCounter::new(
                    "neyman_kafka_commits_total",
                    "Offset commits that succeeded.",
                )?,
            )?,
            kafka_commit_failures: register(
                r,
                IntCounter::new(
                    "neyman_kafka_commit_failures_total",
                    "Offset commits that failed (retried at the next commit).",
                )?,
            )?,
            kafka_produce_errors: register(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "neyman_kafka_produce_errors_total",
                        "Produce attempts that failed after the client's retries, by topic.",
                    ),
                    &["topic"],
                )?,
            )?,
            kafka_in_flight: register(
                r,
                IntGauge::new(
                    "neyman_kafka_in_flight_messages",
                    "Scores and dead letters sent and not yet acknowledged by the broker.",
                )?,
            )?,
            kafka_paused_partitions: register(
                r,
                IntGauge::new(
                    "neyman_kafka_paused_partitions",
                    "Input partitions paused by backpressure.",
                )?,
            )?,
            kafka_model_publish_failures: labelled_counter(
                r,
                "neyman_kafka_model_publish_failures_total",
                "Accepted models not published to the models topic, by reason.",
                "reason",
                &MODEL_PUBLISH_FAILURES,
            )?,
            audits: labelled_counter(
                r,
                "neyman_audits_total",
                "Audits of the windows by the exact S3VM, by how they ended.",
                "status",
                &AUDIT_STATUSES,
            )?,
            audit_gap: nan_gauge(
                r,
                "neyman_audit_gap",
                "Certified relative gap of the last audit's optimum.",
            )?,
            audit_model_gap: nan_gauge(
                r,
                "neyman_audit_model_gap",
                "Relative gap of the active model's labelling to the last audit's lower bound.",
            )?,
            audit_seconds: nan_gauge(
                r,
                "neyman_audit_seconds",
                "Wall time of the last audit in seconds.",
            )?,
        })
    }
}

impl Metrics {
    /// Points the active-model gauges (version, training time, threshold, τ, FPR bound, TPR
    /// estimate) at `model`; called after every install and rollback, so the dashboards
    /// describe the model that scores now and not the last one trained. A value the model does
    /// not have (no threshold; `oob`'s bound) is NaN, which Prometheus shows as absent data
    /// rather than a misleading 0.
    pub fn set_active(
        &self,
        version: u64,
        algorithm: &str,
        threshold_version: u64,
        trained_at_ms: i64,
        threshold: Option<&ThresholdResult>,
    ) {
        self.model_version
            .set(i64::try_from(version).unwrap_or(i64::MAX));
        self.model_info.reset();
        let method = threshold.map_or("none", |t| t.method.as_str());
        self.model_info
            .with_label_values(&[&version.to_string(), algorithm, method])
            .set(1);
        self.threshold_version
            .set(i64::try_from(threshold_version).unwrap_or(i64::MAX));
        self.model_trained_at.set(trained_at_ms as f64 / 1000.0);
        let t = threshold;
        self.threshold.set(t.map_or(f64::NAN, |t| t.threshold));
        self.target_fpr.set(t.map_or(f64::NAN, |t| t.tau));
        self.fpr_bound
            .set(t.and_then(|t| t.fpr_bound).unwrap_or(f64::NAN));
        self.tpr_estimate
            .set(t.and_then(|t| t.tpr_estimate).unwrap_or(f64::NAN));
    }
}

/// The text exposition of `registry` (what `GET /metrics` serves).
pub fn encode(registry: &Registry) -> Result<String, prometheus::Error> {
    let mut out = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut out)?;
    String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine indexes its counters by `outcome as usize`, so `ALL` must list the outcomes
    /// in declaration order, each once.
    #[test]
    fn event_outcomes_are_listed_in_declaration_order() {
        for (i, outcome) in EventOutcome::ALL.iter().enumerate() {
            assert_eq!(*outcome as usize, i, "{outcome:?}");
        }
        let mut names: Vec<&str> = EventOutcome::ALL.iter().map(|o| o.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), EventOutcome::ALL.len());
    }

    #[test]
    fn every_family_is_exposed_once_with_zeroed_known_labels() {
        let registry = Registry::new();
        let m = Metrics::new(&registry).expect("metrics");
        m.events
            .with_label_values(&["unlabeled", "scored"])
            .inc_by(3);
        m.dlq.with_label_values(&["invalid_json"]).inc();
        m.retrain_duration.with_label_values(&["usmo"]).observe(0.2);
        m.retrain_rejections.with_label_values(&["fpr_bound"]).inc();
        m.unscored_events
            .with_label_values(&["no_accepted_model"])
            .inc();
        m.http_requests
            .with_label_values(&["/v1/score", "200"])
            .inc();
        m.kafka_consumer_lag
            .with_label_values(&["neyman", "neyman.unlabeled", "0"])
            .set(5);
        m.kafka_uncommitted
            .with_label_values(&["neyman", "neyman.unlabeled", "0"])
            .set(700);
        m.kafka_produce_errors
            .with_label_values(&["neyman.scores"])
            .inc();
        m.set_active(7, "usmo", 0, 1_767_225_600_000, None);
        m.set_active(8, "tfpl", 0, 1_767_225_600_000, None);
        let text = encode(&registry).expect("encode");
        // One info series, the active model's; the build's version and commit.
        assert_eq!(text.matches("\nneyman_model_info{").count(), 1, "{text}");
        assert!(text.contains(
            "neyman_model_info{algorithm=\"tfpl\",threshold_method=\"none\",version=\"8\"} 1"
        ));
        assert!(text.contains(&format!(
            "neyman_build_info{{commit=\"{BUILD_COMMIT}\",version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
        for family in FAMILIES {
            assert_eq!(
                text.matches(&format!("# TYPE {family} ")).count(),
                1,
                "{family} in\n{text}"
            );
        }
        assert!(text.contains("neyman_events_total{channel=\"unlabeled\",outcome=\"scored\"} 3"));
        assert!(text.contains("neyman_events_total{channel=\"negative\",outcome=\"rejected\"} 0"));
        assert!(text.contains("neyman_retrains_total{result=\"cancelled\"} 0"));
        // No feedback yet is no evidence: NaN, not 0 (which reads as "FPR above tau").
        assert!(
            text.contains("\nneyman_fpr_observed_p_value NaN\n"),
            "{text}"
        );
        // A second daemon in the same process has its own registry.
        let other = Registry::new();
        Metrics::new(&other).expect("independent registry");
        assert!(
            Metrics::new(&registry).is_err(),
            "names are unique per registry"
        );
    }
}
