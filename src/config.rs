//! The daemon's configuration file (TOML), its defaults, environment overrides and checks.
//!
//! Every key is documented on its field below; `config/neyman.toml` (the embedded default) lists
//! them all. Rules:
//! - Unknown keys are errors (`deny_unknown_fields`), so a typo never silently falls back to a
//!   default.
//! - Relative paths resolve against the directory of the config file, so a config runs the same
//!   from any working directory.
//! - Environment overrides: `NEYMAN_<SECTION>_<KEY>` sets `[section] key`, where SECTION is a
//!   top-level table and KEY the rest, lower-cased, underscores kept (`NEYMAN_MODEL_PRIOR` sets
//!   `[model] prior`, `NEYMAN_KAFKA_BOOTSTRAP_SERVERS` sets `[kafka] bootstrap_servers`); `__`
//!   descends into a nested table (`NEYMAN_WINDOWS_POSITIVE__MAX_EVENTS` sets
//!   `[windows.positive] max_events`). The value is read as a TOML value (`0.3`, `true`,
//!   `[1, 2]`), else as a string. `NEYMAN_` variables whose first word is not a section are not
//!   config (benches use `NEYMAN_BENCH_*`) and are left alone.
//! - Durations are strings with a unit (`"250ms"`, `"10s"`, `"5m"`, `"1h"`, `"7d"`) or seconds as
//!   a number.
//! - Secrets (tokens, passwords) are held in [`Secret`], which prints as `"<redacted>"` in
//!   `Debug`, in logs and in `neyman config check`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::data::ScaleKind;
use crate::learn::spec::{
    AlgorithmSpec, KernelKind, KernelSpec, LearnerSpec, SolverLimits, TfplSpec, ThresholdSettings,
    UsmoSpec,
};
use crate::learn::tfpl::TfplSolver;
use crate::learn::threshold::{OobRule, ThresholdMethod};

/// Top-level tables; the first word of a `NEYMAN_` variable must be one of them to be an
/// override.
pub const SECTIONS: [&str; 11] = [
    "source", "output", "state", "windows", "retrain", "model", "gate", "scoring", "http", "log",
    "kafka",
];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("{path}: `{key}`: {message}")]
    Invalid {
        path: String,
        key: String,
        message: String,
    },
}

/// A value that must never be printed: `Debug`, `Display` and `Serialize` show `<redacted>`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

/// A duration written `"250ms"`, `"10s"`, `"5m"`, `"1h"`, `"7d"` or as seconds (`600`, `0.5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Seconds(f64),
            Text(String),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Seconds(s) => s.to_string(),
            Raw::Text(t) => t,
        };
        parse_duration(&text)
            .map(HumanDuration)
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

/// `600`, `0.5` (seconds) or a number with `ms`, `s`, `m`, `h` or `d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 600, 0.5, 600s, 10m, 1h)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        _ => {
            return Err(format!(
                "unknown duration unit {unit:?} (use ms, s, m, h or d)"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| format!("{text:?} is not a non-negative finite duration"))
}

/// The shortest exact spelling among `d`, `h`, `m`, `s`, `ms`.
fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if d.subsec_nanos() % 1_000_000 != 0 {
        return format!("{}s", d.as_secs_f64());
    }
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms > 0 && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub source: SourceConfig,
    #[serde(default)]
    pub output: OutputConfig,
    #[serde(default)]
    pub state: StateConfig,
    #[serde(default)]
    pub windows: WindowsConfig,
    #[serde(default)]
    pub retrain: RetrainConfig,
    pub model: ModelConfig,
    #[serde(default)]
    pub gate: GateConfig,
    #[serde(default)]
    pub scoring: ScoringConfig,
    #[serde(default)]
    pub http: HttpConfig,
    #[serde(default)]
    pub log: LogConfig,
    /// The Kafka connection; absent: no Kafka (the daemon replays files).
    #[serde(default)]
    pub kafka: Option<KafkaConfig>,
}

/// Where events come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `replay`: a recorded stream file (JSON Lines, optionally gzip); `kafka`: the `[kafka]`
    /// input topics, with scores and dead letters produced to its topics (`[output]` is then
    /// not used).
    #[serde(default = "default_source_kind")]
    pub kind: SourceKind,
    /// The recorded stream to replay (`kind = "replay"`).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Replay pace: `max` (virtual time, as fast as possible), `realtime`, or `xN` (N times
    /// real time, e.g. `x10`).
    #[serde(default = "default_speed")]
    pub speed: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Replay,
    Kafka,
}

fn default_source_kind() -> SourceKind {
    SourceKind::Replay
}
fn default_speed() -> String {
    "max".into()
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            kind: default_source_kind(),
            path: None,
            speed: default_speed(),
        }
    }
}

/// Where scores and rejected events go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Score sink: `"-"` for stdout, else a JSON Lines file (appended).
    #[serde(default = "default_scores")]
    pub scores: PathBuf,
    /// Dead-letter file (JSON Lines) for events that fail validation.
    #[serde(default = "default_dlq")]
    pub dlq: PathBuf,
}

fn default_scores() -> PathBuf {
    PathBuf::from("-")
}
fn default_dlq() -> PathBuf {
    PathBuf::from("dlq.jsonl")
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            scores: default_scores(),
            dlq: default_dlq(),
        }
    }
}

/// Persistence of accepted models and the version counter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Directory for model files and the version counter; created when missing.
    #[serde(default = "default_state_dir")]
    pub dir: PathBuf,
    /// How many accepted models to keep on disk (the newest first; ≥ 2 so rollback works).
    #[serde(default = "default_keep_models")]
    pub keep_models: usize,
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("state")
}
fn default_keep_models() -> usize {
    5
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            dir: default_state_dir(),
            keep_models: default_keep_models(),
        }
    }
}

/// One channel's sliding window: bounded by count, by age (event time) and by bytes. The
/// defaults are the same for every channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Most events kept; the oldest leave first.
    #[serde(default = "default_window_events")]
    pub max_events: usize,
    /// Events older than this (relative to the newest event time seen) leave the window.
    #[serde(default = "default_window_age")]
    pub max_age: HumanDuration,
    /// Memory budget of the window's rows and ids, in MiB; the oldest leave first beyond it.
    #[serde(default = "default_window_mb")]
    pub max_mb: usize,
}

fn default_window_events() -> usize {
    5_000
}
fn default_window_age() -> HumanDuration {
    HumanDuration(Duration::from_secs(7 * 86_400))
}
fn default_window_mb() -> usize {
    256
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            max_events: default_window_events(),
            max_age: default_window_age(),
            max_mb: default_window_mb(),
        }
    }
}

/// The three channels' windows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowsConfig {
    #[serde(default)]
    pub positive: WindowConfig,
    #[serde(default)]
    pub unlabeled: WindowConfig,
    #[serde(default)]
    pub negative: WindowConfig,
}

/// When to retrain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrainConfig {
    /// The first retrain waits until the positive window holds this many training events.
    #[serde(default = "default_min_positive")]
    pub min_positive: usize,
    /// … and the unlabeled window this many.
    #[serde(default = "default_min_unlabeled")]
    pub min_unlabeled: usize,
    /// tfpl trains positive vs negative once the negative window holds this many training
    /// events, otherwise positive vs unlabeled; `umbrella` thresholds need it too.
    #[serde(default = "default_min_negative")]
    pub min_negative: usize,
    /// Retrain after this many new window events (0: never by count).
    #[serde(default = "default_every_events")]
    pub every_events: u64,
    /// Retrain after this much event time (absent: never by time).
    #[serde(default)]
    pub every: Option<HumanDuration>,
}

fn default_min_positive() -> usize {
    50
}
fn default_min_unlabeled() -> usize {
    300
}
fn default_min_negative() -> usize {
    200
}
fn default_every_events() -> u64 {
    1_000
}

impl Default for RetrainConfig {
    fn default() -> Self {
        RetrainConfig {
            min_positive: default_min_positive(),
            min_unlabeled: default_min_unlabeled(),
            min_negative: default_min_negative(),
            every_events: default_every_events(),
            every: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlgorithmName {
    Usmo,
    Tfpl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdName {
    Oob,
    Umbrella,
    PuUmbrella,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KernelName {
    Linear,
    Rbf,
    Poly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScaleName {
    None,
    Standard,
    Minmax,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OobRuleName {
    Quantile,
    Npscore,
}

/// The learner, its false-positive target and its threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// `usmo` (positive vs unlabeled SVM) or `tfpl` (τ-FPL ranking).
    pub algorithm: AlgorithmName,
    /// π: the positive share of the unlabeled stream (required for usmo).
    #[serde(default)]
    pub prior: Option<f64>,
    /// pu-umbrella: lower end of the plausible π (default: `prior`).
    #[serde(default)]
    pub prior_min: Option<f64>,
    /// pu-umbrella: upper end of the plausible π (default: `prior`).
    #[serde(default)]
    pub prior_max: Option<f64>,
    /// τ: the target false-positive rate.
    pub tau: f64,
    /// tfpl: the τ used for ranking (default: `tau`). Trained against the unlabeled window (no
    /// negatives yet), tfpl ranks at π + (1 − π)·rank_tau of it, π the middle of
    /// [prior_min, prior_max]: the unlabeled share an FPR-`rank_tau` threshold leaves above it.
    #[serde(default)]
    pub rank_tau: Option<f64>,
    /// δ: the allowed probability that the true FPR exceeds τ.
    #[serde(default = "default_delta")]
    pub delta: f64,
    /// `oob`, `umbrella` or `pu-umbrella`; absent: `umbrella` when the negative window holds
    /// `retrain.min_negative` events, else `pu-umbrella`.
    #[serde(default)]
    pub threshold: Option<ThresholdName>,
    /// Share of events (by a stable hash of the id) kept out of training for calibration, in
    /// percent.
    #[serde(default = "default_calibration_percent")]
    pub calibration_percent: u8,
    /// usmo: λ, the L2 regularisation.
    #[serde(default = "default_lambda")]
    pub lambda: f64,
    /// tfpl: R, the L2 regularisation.
    #[serde(default = "default_reg")]
    pub reg: f64,
    /// Kernel: `linear`, `rbf` or `poly` (default: rbf for usmo, linear for tfpl).
    #[serde(default)]
    pub kernel: Option<KernelName>,
    /// RBF / poly γ (default 1 / number of features).
    #[serde(default)]
    pub gamma: Option<f64>,
    #[serde(default = "default_degree")]
    pub degree: u32,
    #[serde(default = "default_coef0")]
    pub coef0: f64,
    /// Feature scaling fitted on each training snapshot: `none`, `standard`, `minmax`.
    #[serde(default = "default_scale")]
    pub scale: ScaleName,
    /// Solver tolerance (default: the solver's own, 1e-3 for usmo, 1e-6 gain-relative duality
    /// gap for tfpl). tfpl solves a linear kernel with at most 512 features by an interior point
    /// (20–35 iterations whatever `reg`), anything else by FISTA.
    #[serde(default)]
    pub tol: Option<f64>,
    /// Solver iteration cap.
    #[serde(default)]
    pub max_iter: Option<u64>,
    /// Solver wall-time cap per retrain.
    #[serde(default)]
    pub time_limit: Option<HumanDuration>,
    /// usmo kernel-row cache budget, MiB.
    #[serde(default = "default_cache_mb")]
    pub cache_mb: usize,
    /// tfpl: largest Gram matrix allowed for a non-linear kernel, MiB; also the largest dense copy
    /// of the window the interior-point solver may make (above it FISTA solves).
    #[serde(default = "default_max_gram_mb")]
    pub max_gram_mb: usize,
    /// oob: bootstrap rounds.
    #[serde(default = "default_rounds")]
    pub rounds: usize,
    /// oob: per-round rule.
    #[serde(default = "default_oob_rule")]
    pub oob_rule: OobRuleName,
    /// Seed of every random choice in training (calibration splits, bootstrap).
    #[serde(default)]
    pub seed: u64,
}

impl ModelConfig {
    /// The learner these settings describe: the one place the `[model]` table maps into
    /// [`LearnerSpec`]. A missing `prior_min` or `prior_max` is `prior`; the threshold method
    /// is left to the data (umbrella with negatives, else pu-umbrella) unless `threshold` is
    /// set.
    pub fn learner_spec(&self) -> LearnerSpec {
        let algorithm = match self.algorithm {
            AlgorithmName::Usmo => AlgorithmSpec::Usmo(UsmoSpec {
                prior: self.prior,
                lambda: self.lambda,
                cache_bytes: self.cache_mb.saturating_mul(1 << 20),
            }),
            AlgorithmName::Tfpl => AlgorithmSpec::Tfpl(TfplSpec {
                rank_tau: self.rank_tau,
                reg: self.reg,
                solver: TfplSolver::Auto,
                max_gram_bytes: self.max_gram_mb.saturating_mul(1 << 20),
            }),
        };
        LearnerSpec {
            algorithm,
            kernel: KernelSpec {
                kind: self.kernel.map(|k| match k {
                    KernelName::Linear => KernelKind::Linear,
                    KernelName::Rbf => KernelKind::Rbf,
                    KernelName::Poly => KernelKind::Poly,
                }),
                gamma: self.gamma,
                degree: self.degree,
                coef0: self.coef0,
            },
            scale: match self.scale {
                ScaleName::None => ScaleKind::None,
                ScaleName::Standard => ScaleKind::Standard,
                ScaleName::Minmax => ScaleKind::MinMax,
            },
            limits: SolverLimits {
                tol: self.tol,
                max_iter: self.max_iter,
                time_limit: self.time_limit.map(|d| d.0),
            },
            threshold: Some(ThresholdSettings {
                method: self.threshold.map(|t| match t {
                    ThresholdName::Oob => ThresholdMethod::Oob,
                    ThresholdName::Umbrella => ThresholdMethod::Umbrella,
                    ThresholdName::PuUmbrella => ThresholdMethod::PuUmbrella,
                }),
                tau: self.tau,
                delta: self.delta,
                calibration_fraction: f64::from(self.calibration_percent) / 100.0,
                prior_min: self.prior_min.or(self.prior),
                prior_max: self.prior_max.or(self.prior),
                rounds: self.rounds,
                oob_rule: match self.oob_rule {
                    OobRuleName::Quantile => OobRule::Quantile,
                    OobRuleName::Npscore => OobRule::NpScore,
                },
            }),
            seed: self.seed,
        }
    }
}

fn default_delta() -> f64 {
    0.05
}
fn default_calibration_percent() -> u8 {
    30
}
fn default_lambda() -> f64 {
    1e-3
}
fn default_reg() -> f64 {
    1e-2
}
fn default_degree() -> u32 {
    3
}
fn default_coef0() -> f64 {
    1.0
}
fn default_scale() -> ScaleName {
    ScaleName::Standard
}
fn default_cache_mb() -> usize {
    256
}
fn default_max_gram_mb() -> usize {
    1024
}
fn default_rounds() -> usize {
    10
}
fn default_oob_rule() -> OobRuleName {
    OobRuleName::Quantile
}

/// Which retrained models may replace the active one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// A new model is rejected when its NP-score on recent calibration events is worse than the
    /// active model's by more than this.
    #[serde(default = "default_margin")]
    pub margin: f64,
    /// oob thresholds carry no certificate: accept when `fpr_estimate` ≤ τ + this.
    #[serde(default = "default_oob_slack")]
    pub oob_slack: f64,
}

fn default_margin() -> f64 {
    0.05
}
fn default_oob_slack() -> f64 {
    0.01
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            margin: default_margin(),
            oob_slack: default_oob_slack(),
        }
    }
}

/// `[kafka]`: the broker connection, the topics and the client settings neyman owns.
///
/// Only the options that matter to neyman's guarantees are typed (and checked together);
/// anything else librdkafka understands goes through `[kafka.librdkafka]` unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]` (required in the section; `NEYMAN_KAFKA_BOOTSTRAP_SERVERS`).
    pub bootstrap_servers: String,
    /// Consumer group of the daemon; `neyman record` uses `<group_id>-record`.
    #[serde(default = "default_group_id")]
    pub group_id: String,
    #[serde(default)]
    pub topics: KafkaTopics,
    /// Where a group with no committed offset starts: `earliest` (default: nothing retained is
    /// skipped) or `latest`.
    #[serde(default)]
    pub auto_offset_reset: OffsetReset,
    /// A member silent this long is dropped from the group. Default 6000, not librdkafka's
    /// 45000: joins take about half of it on some brokers. At least 3000 (below it some
    /// brokers never finish a rebalance).
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: u32,
    /// Consumer heartbeat period; at most a third of `session_timeout_ms`.
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u32,
    /// Static membership (KIP-345): a stable id per instance avoids a rebalance on restart.
    /// Absent: dynamic membership.
    #[serde(default)]
    pub group_instance_id: Option<String>,
    /// `plaintext` (default), `ssl`, `sasl_plaintext` or `sasl_ssl`.
    #[serde(default)]
    pub security_protocol: SecurityProtocol,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`; required with a `sasl_*` protocol.
    #[serde(default)]
    pub sasl_mechanism: Option<String>,
    #[serde(default)]
    pub sasl_username: Option<String>,
    /// Never printed (shown as `<redacted>`).
    #[serde(default)]
    pub sasl_password: Option<Secret>,
    /// CA bundle (PEM) to verify the brokers; absent: the system's.
    #[serde(default)]
    pub ssl_ca_location: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; needs `ssl_key_location`.
    #[serde(default)]
    pub ssl_certificate_location: Option<PathBuf>,
    /// Client private key (PEM); needs `ssl_certificate_location`.
    #[serde(default)]
    pub ssl_key_location: Option<PathBuf>,
    /// Partitions of a topic neyman creates when it is missing (never changes existing ones).
    /// Default 1: order within a channel is only kept within a partition.
    #[serde(default = "default_partitions")]
    pub partitions: i32,
    /// Replication factor of a topic neyman creates.
    #[serde(default = "default_replication_factor")]
    pub replication_factor: i32,
    /// How often the daemon commits its input offsets (at least 50). Each commit is the
    /// at-least-once point: per partition, the oldest offset whose output is not yet
    /// acknowledged or whose event is still in a window. A final commit runs at shutdown.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u32,
    /// Scores and dead letters sent but not yet acknowledged, above which the daemon pauses
    /// its input partitions (resumed below half of it): memory stays bounded when the broker
    /// is slow or down. The default is librdkafka's own producer queue limit
    /// (`queue.buffering.max.messages`); about 1 KB per output with ~150-byte events, both
    /// copies counted. Much lower caps pause on ordinary acknowledgement bursts, and a pause
    /// drops the messages librdkafka had already fetched for the partition.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// `both` (default), `trainer` or `scorer`: see the README's scale-out section.
    #[serde(default)]
    pub role: Role,
    /// Largest model message (compressed) the trainer publishes to `topics.models`; the topic
    /// is created with this `max.message.bytes` and the producer allows it. A larger model is
    /// not published (an error naming both sizes, and a counter). Default 64 MiB.
    #[serde(default = "default_model_max_bytes")]
    pub model_max_bytes: usize,
    /// Other librdkafka properties, passed through as written (e.g. `"fetch.queue.backoff.ms"
    /// = "10"`). Keys the fields above own are refused, so a value is never set twice.
    #[serde(default)]
    pub librdkafka: BTreeMap<String, String>,
}

/// Topic names, one per channel and per output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaTopics {
    /// Channel `positive` (default `neyman.positive`).
    #[serde(default = "default_topic_positive")]
    pub positive: String,
    /// Channel `unlabeled` (default `neyman.unlabeled`).
    #[serde(default = "default_topic_unlabeled")]
    pub unlabeled: String,
    /// Channel `negative`; absent: no negative feedback channel.
    #[serde(default)]
    pub negative: Option<String>,
    /// Scores out (default `neyman.scores`).
    #[serde(default = "default_topic_scores")]
    pub scores: String,
    /// Rejected events out (default `neyman.dlq`).
    #[serde(default = "default_topic_dlq")]
    pub dlq: String,
    /// Accepted-model announcements out (default `neyman.models`).
    #[serde(default = "default_topic_models")]
    pub models: String,
}

impl KafkaTopics {
    /// Every configured topic with its key (`kafka.topics.<name>`), inputs first.
    pub fn all(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![
            ("kafka.topics.positive", self.positive.as_str()),
            ("kafka.topics.unlabeled", self.unlabeled.as_str()),
        ];
        if let Some(n) = &self.negative {
            out.push(("kafka.topics.negative", n.as_str()));
        }
        out.extend([
            ("kafka.topics.scores", self.scores.as_str()),
            ("kafka.topics.dlq", self.dlq.as_str()),
            ("kafka.topics.models", self.models.as_str()),
        ]);
        out
    }
}

impl Default for KafkaTopics {
    fn default() -> Self {
        KafkaTopics {
            positive: default_topic_positive(),
            unlabeled: default_topic_unlabeled(),
            negative: None,
            scores: default_topic_scores(),
            dlq: default_topic_dlq(),
            models: default_topic_models(),
        }
    }
}

/// What one daemon does in a scaled-out deployment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Trains and scores (one process, or several sharing the partitions).
    #[default]
    Both,
    /// Consumes the training channels in group `<group_id>.trainer`, trains, and publishes
    /// each accepted model to `topics.models`; scores nothing.
    Trainer,
    /// Shares the `unlabeled` partitions with the other scorers of `group_id` and scores with
    /// the newest model read from `topics.models`; never trains.
    Scorer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Both => "both",
            Role::Trainer => "trainer",
            Role::Scorer => "scorer",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffsetReset {
    #[default]
    Earliest,
    Latest,
}

impl OffsetReset {
    pub fn as_str(self) -> &'static str {
        match self {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// librdkafka's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    pub fn uses_ssl(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

/// The SASL mechanisms that need nothing beyond a username and password.
pub const SASL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// librdkafka properties the typed `[kafka]` fields (or neyman itself) set; refused in
/// `[kafka.librdkafka]`.
pub const KAFKA_OWNED_PROPERTIES: [&str; 17] = [
    "bootstrap.servers",
    "metadata.broker.list",
    "group.id",
    "auto.offset.reset",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "group.instance.id",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "enable.idempotence",
    "enable.auto.commit",
];

fn default_group_id() -> String {
    "neyman".into()
}
fn default_session_timeout_ms() -> u32 {
    6000
}
fn default_heartbeat_interval_ms() -> u32 {
    2000
}
fn default_commit_interval_ms() -> u32 {
    1000
}
fn default_max_in_flight() -> usize {
    100_000
}
fn default_model_max_bytes() -> usize {
    64 << 20
}
fn default_partitions() -> i32 {
    1
}
fn default_replication_factor() -> i32 {
    1
}
fn default_topic_positive() -> String {
    "neyman.positive".into()
}
fn default_topic_unlabeled() -> String {
    "neyman.unlabeled".into()
}
fn default_topic_scores() -> String {
    "neyman.scores".into()
}
fn default_topic_dlq() -> String {
    "neyman.dlq".into()
}
fn default_topic_models() -> String {
    "neyman.models".into()
}

impl KafkaConfig {
    /// A section with every default and these bootstrap servers.
    pub fn new(bootstrap_servers: impl Into<String>) -> KafkaConfig {
        KafkaConfig {
            bootstrap_servers: bootstrap_servers.into(),
            group_id: default_group_id(),
            topics: KafkaTopics::default(),
            auto_offset_reset: OffsetReset::default(),
            session_timeout_ms: default_session_timeout_ms(),
            heartbeat_interval_ms: default_heartbeat_interval_ms(),
            group_instance_id: None,
            security_protocol: SecurityProtocol::default(),
            sasl_mechanism: None,
            sasl_username: None,
            sasl_password: None,
            ssl_ca_location: None,
            ssl_certificate_location: None,
            ssl_key_location: None,
            partitions: default_partitions(),
            replication_factor: default_replication_factor(),
            commit_interval_ms: default_commit_interval_ms(),
            max_in_flight: default_max_in_flight(),
            role: Role::default(),
            model_max_bytes: default_model_max_bytes(),
            librdkafka: BTreeMap::new(),
        }
    }

    /// The section's rules; the error names the key (`kafka.<key>`).
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |key: &str, message: String| Err((format!("kafka.{key}"), message));
        let servers: Vec<&str> = self.bootstrap_servers.split(',').map(str::trim).collect();
        for server in &servers {
            let port = server
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            if !matches!(port, Some((host, Ok(p))) if !host.is_empty() && p > 0) {
                return bad(
                    "bootstrap_servers",
                    format!(
                        "{server:?} is not host:port (in {:?})",
                        self.bootstrap_servers
                    ),
                );
            }
        }
        if self.group_id.trim().is_empty() {
            return bad("group_id", "must not be empty".into());
        }
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (key, topic) in self.topics.all() {
            let key = key.trim_start_matches("kafka.");
            let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
            if topic.is_empty()
                || topic.len() > 249
                || !topic.chars().all(legal)
                || topic == "."
                || topic == ".."
            {
                return bad(
                    key,
                    format!("{topic:?} is not a topic name (1-249 of a-z A-Z 0-9 . _ -)"),
                );
            }
            if let Some(other) = seen.insert(topic, key) {
                return bad(
                    key,
                    format!("{topic:?} is also kafka.{other}; each topic has one job"),
                );
            }
        }
        if self.session_timeout_ms < 3000 || self.session_timeout_ms > 300_000 {
            return bad(
                "session_timeout_ms",
                format!("must be in 3000..=300000, got {}", self.session_timeout_ms),
            );
        }
        if self.heartbeat_interval_ms == 0
            || u64::from(self.heartbeat_interval_ms) * 3 > u64::from(self.session_timeout_ms)
        {
            return bad(
                "heartbeat_interval_ms",
                format!(
                    "must be in 1..=session_timeout_ms / 3 ({}), got {}",
                    self.session_timeout_ms / 3,
                    self.heartbeat_interval_ms
                ),
            );
        }
        if self
            .group_instance_id
            .as_deref()
            .is_some_and(|id| id.trim().is_empty())
        {
            return bad("group_instance_id", "must not be empty when set".into());
        }
        let protocol = self.security_protocol;
        let sasl_fields = [
            ("sasl_mechanism", self.sasl_mechanism.is_some()),
            ("sasl_username", self.sasl_username.is_some()),
            ("sasl_password", self.sasl_password.is_some()),
        ];
        if protocol.uses_sasl() {
            for (key, set) in sasl_fields {
                if !set {
                    return bad(
                        key,
                        format!("required with security_protocol = {:?}", protocol.as_str()),
                    );
                }
            }
            if let Some(m) = &self.sasl_mechanism {
                if !SASL_MECHANISMS.contains(&m.as_str()) {
                    return bad(
                        "sasl_mechanism",
                        format!("{m:?} is not one of {}", SASL_MECHANISMS.join(", ")),
                    );
                }
            }
        } else if let Some((key, _)) = sasl_fields.iter().find(|(_, set)| *set) {
            return bad(
                key,
                format!(
                    "set but security_protocol = {:?} does not use SASL (use sasl_plaintext or sasl_ssl)",
                    protocol.as_str()
                ),
            );
        }
        let ssl_fields = [
            ("ssl_ca_location", self.ssl_ca_location.is_some()),
            (
                "ssl_certificate_location",
                self.ssl_certificate_location.is_some(),
            ),
            ("ssl_key_location", self.ssl_key_location.is_some()),
        ];
        if !protocol.uses_ssl() {
            if let Some((key, _)) = ssl_fields.iter().find(|(_, set)| *set) {
                return bad(
                    key,
                    format!(
                        "set but security_protocol = {:?} does not use TLS (use ssl or sasl_ssl)",
                        protocol.as_str()
                    ),
                );
            }
        }
        match (&self.ssl_certificate_location, &self.ssl_key_location) {
            (None, Some(_)) => {
                return bad("ssl_key_location", "needs ssl_certificate_location".into())
            }
            (Some(_), None) => {
                return bad("ssl_certificate_location", "needs ssl_key_location".into())
            }
            _ => {}
        }
        if self.partitions < 1 {
            return bad(
                "partitions",
                format!("must be ≥ 1, got {}", self.partitions),
            );
        }
        if self.replication_factor < 1 {
            return bad(
                "replication_factor",
                format!("must be ≥ 1, got {}", self.replication_factor),
            );
        }
        if self.commit_interval_ms < 50 {
            return bad(
                "commit_interval_ms",
                format!("must be ≥ 50, got {}", self.commit_interval_ms),
            );
        }
        if self.max_in_flight == 0 {
            return bad("max_in_flight", "must be ≥ 1".into());
        }
        // librdkafka's message.max.bytes ceiling, less room for the record framing.
        if self.model_max_bytes < 1024 || self.model_max_bytes > 999_000_000 {
            return bad(
                "model_max_bytes",
                format!("must be in 1024..=999000000, got {}", self.model_max_bytes),
            );
        }
        for key in self.librdkafka.keys() {
            if KAFKA_OWNED_PROPERTIES.contains(&key.as_str()) {
                return bad(
                    &format!("librdkafka.\"{key}\""),
                    format!("{key:?} is set by neyman or a typed [kafka] key; set it there"),
                );
            }
        }
        Ok(())
    }
}

/// Intake limits and scoring before the first model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoringConfig {
    /// Unlabeled events held before the first model exists, scored once it does; beyond this
    /// they are emitted with `"status": "unscored"`.
    #[serde(default = "default_buffer_before_model")]
    pub buffer_before_model: usize,
    /// Largest accepted event, bytes; larger ones go to the DLQ as `too_large`.
    #[serde(default = "default_max_event_bytes")]
    pub max_event_bytes: usize,
}

fn default_buffer_before_model() -> usize {
    100_000
}
fn default_max_event_bytes() -> usize {
    1 << 20
}

impl Default for ScoringConfig {
    fn default() -> Self {
        ScoringConfig {
            buffer_before_model: default_buffer_before_model(),
            max_event_bytes: default_max_event_bytes(),
        }
    }
}

/// The HTTP API and `/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Listen address; the default binds loopback only.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// File holding the admin bearer token (`POST /v1/model/rollback`); absent together with
    /// `admin_token_env`: admin routes answer 403.
    #[serde(default)]
    pub admin_token_file: Option<PathBuf>,
    /// Environment variable holding the admin bearer token.
    #[serde(default)]
    pub admin_token_env: Option<String>,
    /// Largest request body, bytes.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Most events in one `POST /v1/score` batch.
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
}

fn default_listen() -> String {
    "127.0.0.1:8787".into()
}
fn default_max_body_bytes() -> usize {
    4 << 20
}
fn default_max_batch() -> usize {
    1024
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: default_listen(),
            admin_token_file: None,
            admin_token_env: None,
            max_body_bytes: default_max_body_bytes(),
            max_batch: default_max_batch(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Logs (stderr).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `pretty` or `json` (one object per line).
    #[serde(default = "default_log_format")]
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `neyman=debug`; `RUST_LOG` wins when set.
    #[serde(default = "default_log_level")]
    pub level: String,
    /// How long a graceful shutdown may take before the process exits anyway.
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout: HumanDuration,
}

fn default_log_format() -> LogFormat {
    LogFormat::Pretty
}
fn default_log_level() -> String {
    "info".into()
}
fn default_shutdown_timeout() -> HumanDuration {
    HumanDuration(Duration::from_secs(10))
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: default_log_format(),
            level: default_log_level(),
            shutdown_timeout: default_shutdown_timeout(),
        }
    }
}

/// A checked configuration, where it came from and which keys the environment set.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    pub config: Config,
    pub path: PathBuf,
    /// `section.key` → the variable that set it.
    pub from_env: BTreeMap<String, String>,
}

impl LoadedConfig {
    /// Reads `path`, applies the `NEYMAN_*` variables of the process, resolves relative paths
    /// and checks every key.
    pub fn load(path: &Path) -> Result<LoadedConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_str_with_env(&text, path, std::env::vars())
    }

    /// As [`LoadedConfig::load`], from text and an explicit environment (for tests).
    pub fn from_str_with_env(
        text: &str,
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<LoadedConfig, ConfigError> {
        let shown = path.display().to_string();
        let mut table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Parse {
                    path: shown.clone(),
                    message: e.to_string().trim_end().replace('\n', " "),
                })?;
        let overrides = env_overrides(env)?;
        let mut from_env = BTreeMap::new();
        for o in &overrides {
            set_path(&mut table, &o.keys, toml_value(&o.raw)).map_err(|message| {
                ConfigError::Env {
                    var: o.var.clone(),
                    message,
                }
            })?;
            from_env.insert(o.keys.join("."), o.var.clone());
        }
        let mut config = deserialize(&table, &overrides).map_err(|message| ConfigError::Parse {
            path: shown.clone(),
            message,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        config
            .check()
            .map_err(|(key, message)| ConfigError::Invalid {
                path: shown,
                key,
                message,
            })?;
        Ok(LoadedConfig {
            config,
            path: path.to_path_buf(),
            from_env,
        })
    }

    /// The effective configuration as TOML, secrets redacted, each environment-set key
    /// followed by a comment naming its variable.
    pub fn render(&self) -> String {
        let value = match toml::Table::try_from(&self.config) {
            Ok(v) => v,
            Err(e) => return format!("# cannot render the configuration: {e}\n"),
        };
        let mut out = format!("# effective configuration of {}\n", self.path.display());
        render_table(&value, &mut Vec::new(), &self.from_env, &mut out);
        out
    }
}

struct Override {
    var: String,
    keys: Vec<String>,
    raw: String,
}

fn env_overrides(
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<Override>, ConfigError> {
    let mut out = Vec::new();
    for (var, raw) in env {
        let Some(rest) = var.strip_prefix("NEYMAN_") else {
            continue;
        };
        let lower = rest.to_ascii_lowercase();
        let Some((section, key)) = lower.split_once('_') else {
            continue;
        };
        if !SECTIONS.contains(&section) {
            continue;
        }
        let mut keys = vec![section.to_string()];
        keys.extend(key.split("__").map(str::to_string));
        if keys.iter().any(String::is_empty) {
            return Err(ConfigError::Env {
                var,
                message: "names an empty key".into(),
            });
        }
        out.push(Override { var, keys, raw });
    }
    // Deterministic order whatever the environment's.
    out.sort_by(|a, b| a.var.cmp(&b.var));
    Ok(out)
}

/// A TOML value when `raw` parses as one (numbers, booleans, arrays, quoted strings), else the
/// raw text as a string.
fn toml_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

fn set_path(table: &mut toml::Table, keys: &[String], value: toml::Value) -> Result<(), String> {
    let (last, parents) = keys.split_last().ok_or("names no key")?;
    let mut here = table;
    for k in parents {
        let entry = here
            .entry(k.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{k}` is not a table in the file"))?;
    }
    here.insert(last.clone(), value);
    Ok(())
}

/// Deserializes; when that fails and an environment value was read as a non-string TOML value
/// (`NEYMAN_KAFKA_GROUP_ID=123`), retries with it as the string it also is.
fn deserialize(table: &toml::Table, overrides: &[Override]) -> Result<Config, String> {
    let first = match Config::deserialize(toml::Value::Table(table.clone())) {
        Ok(c) => return Ok(c),
        Err(e) => e.to_string().trim_end().replace('\n', " "),
    };
    let mut table = table.clone();
    for o in overrides {
        if matches!(toml_value(&o.raw), toml::Value::String(_)) {
            continue;
        }
        set_path(&mut table, &o.keys, toml::Value::String(o.raw.clone()))?;
        if let Ok(c) = Config::deserialize(toml::Value::Table(table.clone())) {
            return Ok(c);
        }
    }
    Err(first)
}

/// A key as TOML writes it: bare when it can be, else quoted (`"fetch.queue.backoff.ms"`
/// under `[kafka.librdkafka]` must stay one key, not three nested ones).
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_string()
    } else {
        toml::Value::String(key.to_string()).to_string()
    }
}

fn render_table(
    table: &toml::Table,
    path: &mut Vec<String>,
    from_env: &BTreeMap<String, String>,
    out: &mut String,
) {
    let (scalars, tables): (Vec<_>, Vec<_>) = table.iter().partition(|(_, v)| !v.is_table());
    if !path.is_empty() && !scalars.is_empty() {
        let header: Vec<String> = path.iter().map(|k| toml_key(k)).collect();
        out.push_str(&format!("\n[{}]\n", header.join(".")));
    }
    for (k, v) in scalars {
        let key = path
            .iter()
            .chain([k])
            .cloned()
            .collect::<Vec<_>>()
            .join(".");
        let note = from_env
            .get(&key)
            .map(|var| format!("  # from {var}"))
            .unwrap_or_default();
        out.push_str(&format!("{} = {v}{note}\n", toml_key(k)));
    }
    for (k, v) in tables {
        if let toml::Value::Table(t) = v {
            path.push(k.clone());
            render_table(t, path, from_env, out);
            path.pop();
        }
    }
}

fn resolve(base: &Path, path: &mut PathBuf) {
    if path.is_relative() && path.as_os_str() != "-" {
        *path = base.join(&*path);
    }
}

impl Config {
    fn resolve_paths(&mut self, base: &Path) {
        if let Some(p) = self.source.path.as_mut() {
            resolve(base, p);
        }
        resolve(base, &mut self.output.scores);
        resolve(base, &mut self.output.dlq);
        resolve(base, &mut self.state.dir);
        if let Some(p) = self.http.admin_token_file.as_mut() {
            resolve(base, p);
        }
        if let Some(k) = self.kafka.as_mut() {
            for p in [
                &mut k.ssl_ca_location,
                &mut k.ssl_certificate_location,
                &mut k.ssl_key_location,
            ]
            .into_iter()
            .flatten()
            {
                resolve(base, p);
            }
        }
    }

    /// Every cross-key and range rule; the error names the key.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |key: &str, message: String| Err((key.to_string(), message));
        let unit = |key: &str, v: f64| -> Result<(), (String, String)> {
            if v.is_finite() && v > 0.0 && v < 1.0 {
                Ok(())
            } else {
                Err((key.to_string(), format!("must be in (0, 1), got {v}")))
            }
        };
        let m = &self.model;
        if self.source.kind == SourceKind::Replay && self.source.path.is_none() {
            return bad("source.path", "required for kind = \"replay\"".into());
        }
        if self.source.kind == SourceKind::Kafka && self.kafka.is_none() {
            return bad(
                "source.kind",
                "\"kafka\" needs a [kafka] section (bootstrap_servers at least)".into(),
            );
        }
        if let Some(k) = &self.kafka {
            k.check()?;
        }
        if parse_speed(&self.source.speed).is_none() {
            return bad(
                "source.speed",
                format!("{:?} is not max, realtime or xN (N > 0)", self.source.speed),
            );
        }
        unit("model.tau", m.tau)?;
        unit("model.delta", m.delta)?;
        if let Some(t) = m.rank_tau {
            unit("model.rank_tau", t)?;
        }
        for (key, v) in [
            ("model.prior", m.prior),
            ("model.prior_min", m.prior_min),
            ("model.prior_max", m.prior_max),
        ] {
            if let Some(v) = v {
                unit(key, v)?;
            }
        }
        if m.algorithm == AlgorithmName::Usmo && m.prior.is_none() {
            return bad("model.prior", "required when algorithm = \"usmo\"".into());
        }
        let (lo, hi) = self.prior_interval();
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if lo > hi {
                return bad(
                    "model.prior_min",
                    format!("{lo} is above model.prior_max {hi}"),
                );
            }
            if let Some(p) = m.prior {
                if p < lo || p > hi {
                    return bad(
                        "model.prior",
                        format!("{p} is outside [prior_min, prior_max] = [{lo}, {hi}]"),
                    );
                }
            }
        }
        if m.threshold == Some(ThresholdName::PuUmbrella) && (lo.is_none() || hi.is_none()) {
            return bad(
                "model.prior_min",
                "pu-umbrella needs prior (or prior_min and prior_max)".into(),
            );
        }
        if m.threshold == Some(ThresholdName::Oob) && m.algorithm == AlgorithmName::Usmo {
            return bad(
                "model.threshold",
                "oob needs negatives in training; use umbrella or pu-umbrella with usmo".into(),
            );
        }
        if m.calibration_percent == 0 || m.calibration_percent >= 100 {
            return bad(
                "model.calibration_percent",
                format!("must be in 1..=99, got {}", m.calibration_percent),
            );
        }
        for (key, v) in [("model.lambda", m.lambda), ("model.reg", m.reg)] {
            if !(v.is_finite() && v > 0.0) {
                return bad(key, format!("must be finite and > 0, got {v}"));
            }
        }
        if let Some(g) = m.gamma {
            if !(g.is_finite() && g > 0.0) {
                return bad("model.gamma", format!("must be finite and > 0, got {g}"));
            }
        }
        if let Some(t) = m.tol {
            if !(t.is_finite() && t > 0.0) {
                return bad("model.tol", format!("must be finite and > 0, got {t}"));
            }
        }
        if m.rounds == 0 {
            return bad("model.rounds", "must be ≥ 1".into());
        }
        for (name, w) in [
            ("positive", &self.windows.positive),
            ("unlabeled", &self.windows.unlabeled),
            ("negative", &self.windows.negative),
        ] {
            if w.max_events == 0 {
                return bad(&format!("windows.{name}.max_events"), "must be ≥ 1".into());
            }
            if w.max_mb == 0 {
                return bad(&format!("windows.{name}.max_mb"), "must be ≥ 1".into());
            }
            if w.max_age.0.is_zero() {
                return bad(&format!("windows.{name}.max_age"), "must be > 0".into());
            }
        }
        let r = &self.retrain;
        if r.min_positive == 0 || r.min_positive > self.windows.positive.max_events {
            return bad(
                "retrain.min_positive",
                format!(
                    "must be in 1..=windows.positive.max_events ({}), got {}",
                    self.windows.positive.max_events, r.min_positive
                ),
            );
        }
        if r.min_unlabeled == 0 || r.min_unlabeled > self.windows.unlabeled.max_events {
            return bad(
                "retrain.min_unlabeled",
                format!(
                    "must be in 1..=windows.unlabeled.max_events ({}), got {}",
                    self.windows.unlabeled.max_events, r.min_unlabeled
                ),
            );
        }
        if r.every_events == 0 && r.every.is_none() {
            return bad(
                "retrain.every_events",
                "is 0 and retrain.every is absent: the model would never be retrained".into(),
            );
        }
        if !(self.gate.margin.is_finite() && self.gate.margin >= 0.0) {
            return bad("gate.margin", "must be finite and ≥ 0".into());
        }
        if !(self.gate.oob_slack.is_finite() && self.gate.oob_slack >= 0.0) {
            return bad("gate.oob_slack", "must be finite and ≥ 0".into());
        }
        if self.state.keep_models < 2 {
            return bad(
                "state.keep_models",
                "must be ≥ 2 (rollback needs the previous model)".into(),
            );
        }
        if self.scoring.max_event_bytes == 0 {
            return bad("scoring.max_event_bytes", "must be ≥ 1".into());
        }
        if self.http.listen.parse::<SocketAddr>().is_err() {
            return bad(
                "http.listen",
                format!("{:?} is not an IP:port address", self.http.listen),
            );
        }
        if self.http.admin_token_file.is_some() && self.http.admin_token_env.is_some() {
            return bad(
                "http.admin_token_file",
                "set either admin_token_file or admin_token_env, not both".into(),
            );
        }
        if self.http.max_batch == 0 || self.http.max_body_bytes == 0 {
            return bad("http.max_batch", "limits must be ≥ 1".into());
        }
        Ok(())
    }

    /// [π_min, π_max], each defaulting to `prior`.
    pub fn prior_interval(&self) -> (Option<f64>, Option<f64>) {
        let m = &self.model;
        (m.prior_min.or(m.prior), m.prior_max.or(m.prior))
    }
}

/// Replay pace: `None` = as fast as possible (virtual time), `Some(f)` = f × real time.
pub fn parse_speed(text: &str) -> Option<Option<f64>> {
    match text {
        "max" => Some(None),
        "realtime" => Some(Some(1.0)),
        _ => {
            let f: f64 = text.strip_prefix('x')?.parse().ok()?;
            (f.is_finite() && f > 0.0).then_some(Some(f))
        }
    }
}

/// Reads the admin token named by `[http]`, if any.
pub fn admin_token(http: &HttpConfig) -> Result<Option<Secret>, ConfigError> {
    if let Some(path) = &http.admin_token_file {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            message: format!("admin token: {e}"),
        })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(ConfigError::Read {
                path: path.display().to_string(),
                message: "admin token file is empty".into(),
            });
        }
        return Ok(Some(Secret::new(token)));
    }
    if let Some(var) = &http.admin_token_env {
        let token = std::env::var(var).map_err(|_| ConfigError::Env {
            var: var.clone(),
            message: "named by http.admin_token_env but not set".into(),
        })?;
        return Ok(Some(Secret::new(token)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[source]
path = "stream.jsonl.gz"

[model]
algorithm = "usmo"
prior = 0.3
tau = 0.05
"#;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
        LoadedConfig::from_str_with_env(
            text,
            Path::new("/etc/neyman/neyman.toml"),
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    }

    #[test]
    fn defaults_fill_a_minimal_file_and_paths_resolve_against_its_directory() {
        let c = load(MINIMAL, &[]).expect("valid").config;
        assert_eq!(
            c.source.path,
            Some(PathBuf::from("/etc/neyman/stream.jsonl.gz"))
        );
        assert_eq!(c.state.dir, PathBuf::from("/etc/neyman/state"));
        assert_eq!(c.output.scores, PathBuf::from("-"));
        assert_eq!(c.model.delta, 0.05);
        assert_eq!(c.retrain.min_positive, 50);
        assert_eq!(c.retrain.min_unlabeled, 300);
        assert_eq!(c.scoring.buffer_before_model, 100_000);
        assert_eq!(c.log.shutdown_timeout.0, Duration::from_secs(10));
        assert_eq!(c.http.listen, "127.0.0.1:8787");
    }

    #[test]
    fn env_overrides_set_keys_with_types_and_are_marked() {
        let loaded = load(
            MINIMAL,
            &[
                ("NEYMAN_MODEL_PRIOR", "0.2"),
                ("NEYMAN_MODEL_PRIOR_MIN", "0.1"),
                ("NEYMAN_WINDOWS_POSITIVE__MAX_EVENTS", "77"),
                ("NEYMAN_RETRAIN_EVERY", "5m"),
                ("NEYMAN_BENCH_DATA", "magic"),
                ("NEYMAN_HTTP_LISTEN", "127.0.0.1:9999"),
            ],
        )
        .expect("valid");
        let c = &loaded.config;
        assert_eq!(c.model.prior, Some(0.2));
        assert_eq!(c.model.prior_min, Some(0.1));
        assert_eq!(c.windows.positive.max_events, 77);
        assert_eq!(
            c.retrain.every,
            Some(HumanDuration(Duration::from_secs(300)))
        );
        assert_eq!(c.http.listen, "127.0.0.1:9999");
        assert_eq!(
            loaded.from_env.get("model.prior").map(String::as_str),
            Some("NEYMAN_MODEL_PRIOR")
        );
        let text = loaded.render();
        assert!(
            text.contains("prior = 0.2  # from NEYMAN_MODEL_PRIOR"),
            "{text}"
        );
        assert!(text.contains("max_events = 77  # from NEYMAN_WINDOWS_POSITIVE__MAX_EVENTS"));
        // The rendered text is itself a valid configuration.
        let again = load(&text, &[]).expect("round trip");
        assert_eq!(again.config.model.prior, Some(0.2));
    }

    #[test]
    fn a_numeric_env_value_for_a_string_key_stays_a_string() {
        let c = load(MINIMAL, &[("NEYMAN_LOG_LEVEL", "5")]);
        // "5" is not a valid filter for the daemon, but it is a string: the config layer
        // takes it as written.
        assert_eq!(c.expect("string kept").config.log.level, "5");
    }

    #[test]
    fn every_error_names_its_key() {
        // (file text, environment, the key the error must name)
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case; 9] = [
            (
                "[model]\nalgorithm = \"usmo\"\ntau = 0.05\n[source]\npath = \"s\"",
                &[],
                "model.prior",
            ),
            (MINIMAL, &[("NEYMAN_MODEL_TAU", "1.5")], "model.tau"),
            (
                MINIMAL,
                &[("NEYMAN_MODEL_PRIOR_MIN", "0.5")],
                "model.prior_min",
            ),
            (
                MINIMAL,
                &[("NEYMAN_MODEL_THRESHOLD", "oob")],
                "model.threshold",
            ),
            (
                MINIMAL,
                &[("NEYMAN_HTTP_LISTEN", "localhost")],
                "http.listen",
            ),
            (MINIMAL, &[("NEYMAN_SOURCE_SPEED", "fast")], "source.speed"),
            (
                MINIMAL,
                &[("NEYMAN_RETRAIN_MIN_POSITIVE", "5001")],
                "retrain.min_positive",
            ),
            (
                MINIMAL,
                &[("NEYMAN_STATE_KEEP_MODELS", "1")],
                "state.keep_models",
            ),
            (
                MINIMAL,
                &[("NEYMAN_MODEL_CALIBRATION_PERCENT", "0")],
                "model.calibration_percent",
            ),
        ];
        for (text, env, key) in cases {
            match load(text, env) {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}: expected an invalid-key error, got {other:?}"),
            }
        }
    }

    #[test]
    fn unknown_keys_and_bad_types_are_parse_errors_naming_the_file() {
        for text in [
            format!("{MINIMAL}\n[gate]\nmargn = 0.1\n"),
            MINIMAL.replace("tau = 0.05", "tau = \"high\""),
            "[model\n".to_string(),
        ] {
            let e = load(&text, &[]).expect_err("rejected");
            assert!(matches!(e, ConfigError::Parse { .. }), "{e:?}");
            assert!(
                e.to_string().starts_with("/etc/neyman/neyman.toml: "),
                "{e}"
            );
        }
        let e = load(&format!("{MINIMAL}\n[gate]\nmargn = 0.1\n"), &[]).expect_err("unknown");
        assert!(e.to_string().contains("margn"), "{e}");
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "\"<redacted>\"");
        assert_eq!(s.to_string(), "<redacted>");
        assert_eq!(serde_json::to_string(&s).expect("json"), "\"<redacted>\"");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn durations_parse_and_print_in_every_documented_form() {
        assert_eq!(parse_duration("600"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("600s"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("10w").is_err());
        assert!(parse_duration("abc").is_err());
        for (d, text) in [
            (Duration::from_secs(7 * 86_400), "7d"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(90), "90s"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }

    #[test]
    fn speeds_parse() {
        assert_eq!(parse_speed("max"), Some(None));
        assert_eq!(parse_speed("realtime"), Some(Some(1.0)));
        assert_eq!(parse_speed("x10"), Some(Some(10.0)));
        assert_eq!(parse_speed("x0"), None);
        assert_eq!(parse_speed("10"), None);
    }

    const KAFKA: &str = "\n[kafka]\nbootstrap_servers = \"broker-1:9092,broker-2:9092\"\n";

    #[test]
    fn kafka_defaults_and_the_bootstrap_override() {
        let c = load(&format!("{MINIMAL}{KAFKA}"), &[])
            .expect("valid")
            .config;
        let k = c.kafka.expect("section");
        assert_eq!(k.bootstrap_servers, "broker-1:9092,broker-2:9092");
        assert_eq!(k.group_id, "neyman");
        assert_eq!(k.topics.positive, "neyman.positive");
        assert_eq!(k.topics.negative, None);
        assert_eq!(k.topics.models, "neyman.models");
        assert_eq!(k.auto_offset_reset, OffsetReset::Earliest);
        assert_eq!(
            (k.session_timeout_ms, k.heartbeat_interval_ms),
            (6000, 2000)
        );
        assert_eq!(k.security_protocol, SecurityProtocol::Plaintext);
        assert_eq!((k.partitions, k.replication_factor), (1, 1));
        assert_eq!(load(MINIMAL, &[]).expect("valid").config.kafka, None);

        // The documented override works with and without a [kafka] section in the file.
        for text in [format!("{MINIMAL}{KAFKA}"), MINIMAL.to_string()] {
            let loaded = load(
                &text,
                &[("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:39092")],
            )
            .expect("valid");
            let k = loaded.config.kafka.as_ref().expect("section");
            assert_eq!(k.bootstrap_servers, "127.0.0.1:39092");
            assert_eq!(
                loaded
                    .from_env
                    .get("kafka.bootstrap_servers")
                    .map(String::as_str),
                Some("NEYMAN_KAFKA_BOOTSTRAP_SERVERS")
            );
        }
        // The rendered effective config reads back, passthrough keys with dots included.
        let text =
            format!("{MINIMAL}{KAFKA}[kafka.librdkafka]\n\"fetch.queue.backoff.ms\" = \"10\"\n");
        let loaded = load(&text, &[]).expect("valid");
        let rendered = loaded.render();
        assert!(
            rendered.contains("\"fetch.queue.backoff.ms\" = \"10\""),
            "{rendered}"
        );
        assert_eq!(
            load(&rendered, &[]).expect("round trip").config,
            loaded.config
        );
        // A numeric-looking group id stays a string.
        let c = load(
            &format!("{MINIMAL}{KAFKA}"),
            &[("NEYMAN_KAFKA_GROUP_ID", "123")],
        );
        assert_eq!(
            c.expect("valid").config.kafka.expect("section").group_id,
            "123"
        );
    }

    #[test]
    fn kafka_ssl_paths_resolve_and_the_password_never_prints() {
        let text = format!(
            "{MINIMAL}{KAFKA}security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"SCRAM-SHA-512\"\n\
             sasl_username = \"neyman\"\nsasl_password = \"hunter2\"\nssl_ca_location = \"ca.pem\"\n"
        );
        let loaded = load(&text, &[]).expect("valid");
        let k = loaded.config.kafka.as_ref().expect("section");
        assert_eq!(k.ssl_ca_location, Some(PathBuf::from("/etc/neyman/ca.pem")));
        assert_eq!(
            k.sasl_password.as_ref().map(Secret::expose),
            Some("hunter2")
        );
        let shown = format!("{}\n{:?}", loaded.render(), loaded.config);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("sasl_password = \"<redacted>\""), "{shown}");
    }

    #[test]
    fn kafka_invalid_combinations_name_their_key() {
        let sasl = "security_protocol = \"sasl_plaintext\"\nsasl_mechanism = \"PLAIN\"\n\
                    sasl_username = \"u\"\nsasl_password = \"p\"\n";
        // (extra lines in [kafka], the key the error must name)
        for servers in ["broker", "a:9092,:9092", "a:port", ""] {
            match load(
                &format!("{MINIMAL}{KAFKA}"),
                &[("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", servers)],
            ) {
                Err(ConfigError::Invalid { key, .. }) => {
                    assert_eq!(key, "kafka.bootstrap_servers", "{servers:?}")
                }
                other => panic!("{servers:?}: expected an invalid-key error, got {other:?}"),
            }
        }
        let cases: [(&str, &str); 18] = [
            ("group_id = \" \"", "kafka.group_id"),
            ("session_timeout_ms = 2000\nheartbeat_interval_ms = 500", "kafka.session_timeout_ms"),
            ("heartbeat_interval_ms = 2001", "kafka.heartbeat_interval_ms"),
            ("heartbeat_interval_ms = 0", "kafka.heartbeat_interval_ms"),
            ("group_instance_id = \"\"", "kafka.group_instance_id"),
            ("sasl_username = \"u\"", "kafka.sasl_username"),
            ("security_protocol = \"ssl\"\nsasl_password = \"p\"", "kafka.sasl_password"),
            ("security_protocol = \"sasl_ssl\"", "kafka.sasl_mechanism"),
            (
                "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"",
                "kafka.sasl_username",
            ),
            (
                "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"PLAIN\"\nsasl_username = \"u\"",
                "kafka.sasl_password",
            ),
            (
                "security_protocol = \"sasl_ssl\"\nsasl_mechanism = \"GSSAPI\"\nsasl_username = \"u\"\nsasl_password = \"p\"",
                "kafka.sasl_mechanism",
            ),
            ("ssl_ca_location = \"ca.pem\"", "kafka.ssl_ca_location"),
            (
                "security_protocol = \"ssl\"\nssl_key_location = \"k.pem\"",
                "kafka.ssl_key_location",
            ),
            (
                "security_protocol = \"ssl\"\nssl_certificate_location = \"c.pem\"",
                "kafka.ssl_certificate_location",
            ),
            ("[kafka.topics]\npositive = \"bad topic\"", "kafka.topics.positive"),
            ("[kafka.topics]\nnegative = \"neyman.unlabeled\"", "kafka.topics.negative"),
            ("[kafka.librdkafka]\n\"group.id\" = \"x\"", "kafka.librdkafka.\"group.id\""),
            ("[kafka.librdkafka]\n\"enable.idempotence\" = \"false\"", "kafka.librdkafka.\"enable.idempotence\""),
        ];
        for (extra, key) in cases {
            match load(&format!("{MINIMAL}{KAFKA}{extra}\n"), &[]) {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key, "{extra}"),
                other => panic!("{extra}: expected an invalid-key error, got {other:?}"),
            }
        }
        // Valid combinations pass.
        for extra in [
            sasl,
            "security_protocol = \"ssl\"\nssl_certificate_location = \"c.pem\"\nssl_key_location = \"k.pem\"",
            "group_instance_id = \"neyman-1\"\nauto_offset_reset = \"latest\"",
            "[kafka.librdkafka]\n\"fetch.queue.backoff.ms\" = \"10\"",
        ] {
            load(&format!("{MINIMAL}{KAFKA}{extra}\n"), &[]).unwrap_or_else(|e| panic!("{extra}: {e}"));
        }
        // Unknown keys and bad enum values are parse errors naming the key.
        for (extra, word) in [
            ("bootstrap = \"x\"", "bootstrap"),
            ("auto_offset_reset = \"smallest\"", "smallest"),
            ("security_protocol = \"tls\"", "tls"),
        ] {
            let e = load(&format!("{MINIMAL}{KAFKA}{extra}\n"), &[]).expect_err(extra);
            assert!(
                matches!(e, ConfigError::Parse { .. }) && e.to_string().contains(word),
                "{e}"
            );
        }
        // kind = "kafka" needs the section, and not source.path.
        let kafka_source = MINIMAL.replace("path = \"stream.jsonl.gz\"", "kind = \"kafka\"");
        match load(&kafka_source, &[]) {
            Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "source.kind"),
            other => panic!("expected source.kind, got {other:?}"),
        }
        let c = load(&format!("{kafka_source}{KAFKA}"), &[]).expect("valid");
        assert_eq!(c.config.source.kind, SourceKind::Kafka);
    }
}
