//! The daemon's configuration file (TOML), its defaults, environment overrides and checks.
//!
//! Every key is documented on its field, in the file of its table: `source.rs`, `output.rs`,
//! `state.rs`, `windows.rs`, `retrain.rs`, `model.rs` (which also maps `[model]` into the
//! learner spec), `gate.rs`, `recalibrate.rs`, `drift.rs`, `scoring.rs`, `http.rs`, `log.rs`, `kafka.rs`
//! and `audit.rs`;
//! `config/neyman.toml` (the embedded default) lists them all. This file holds
//! the top-level [`Config`], loading ([`LoadedConfig`]), environment overrides, relative
//! paths, the cross-key checks and the rendering of `neyman config check`; `values.rs` the value
//! types tables share. Rules:
//! - Unknown keys are errors (`deny_unknown_fields`), so a typo never silently falls back to a
//!   default.
//! - Relative paths resolve against the directory of the config file, so a config runs the same
//!   from any working directory.
//! - Environment overrides: `NEYMAN_<SECTION>_<KEY>` sets `[section] key`, where SECTION is a
//!   top-level table and KEY the rest, lower-cased, underscores kept (`NEYMAN_MODEL_PRIOR` sets
//!   `[model] prior`, `NEYMAN_KAFKA_BOOTSTRAP_SERVERS` sets `[kafka] bootstrap_servers`); `__`
//!   descends into a nested table (`NEYMAN_WINDOWS_POSITIVE__MAX_EVENTS` sets
//!   `[windows.positive] max_events`). The value is read as a TOML value (`0.3`, `true`,
//!   `[1, 2]`), else as a string. Under `[kafka.librdkafka]` an underscore stands for a dot
//!   (`NEYMAN_KAFKA_LIBRDKAFKA__QUEUED_MAX_MESSAGES_KBYTES` sets `"queued.max.messages.kbytes"`),
//!   except in librdkafka's own `log_level` and `enabled_events`. Any other `NEYMAN_` variable
//!   is an error naming it, but for [`NOT_CONFIG`] and `NEYMAN_BENCH_*` (tests and benches), so
//!   a misspelled variable never goes unnoticed; a misspelled key is blamed on its variable.
//! - Durations are strings with a unit (`"250ms"`, `"10s"`, `"5m"`, `"1h"`, `"7d"`) or seconds as
//!   a number.
//! - Secrets (tokens, passwords) are held in [`Secret`], which prints as `"<redacted>"` in
//!   `Debug`, in logs and in `neyman config check`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod audit;
mod drift;
mod gate;
mod http;
mod kafka;
mod log;
mod model;
mod output;
mod recalibrate;
mod retrain;
mod scoring;
mod source;
mod state;
mod values;
mod windows;

pub use audit::{AuditConfig, AuditKernel, AUDIT_MAX_ROWS};
pub use drift::DriftConfig;
pub use gate::GateConfig;
pub use http::{admin_token, HttpConfig};
pub use kafka::{
    is_secret_property, KafkaConfig, KafkaTopics, OffsetReset, Passthrough, Role, SecurityProtocol,
    KAFKA_OWNED_PROPERTIES, SASL_MECHANISMS,
};
pub use log::{LogConfig, LogFormat};
pub use model::{
    AlgorithmName, CalibrationName, KernelName, ModelConfig, OobRuleName, ScaleName, ThresholdName,
};
pub use output::OutputConfig;
pub use recalibrate::RecalibrateConfig;
pub use retrain::RetrainConfig;
pub use scoring::ScoringConfig;
pub use source::{SourceConfig, SourceKind};
pub use state::StateConfig;
pub use values::{parse_duration, parse_speed, HumanDuration, Secret};
pub use windows::{WindowConfig, WindowsConfig};

/// Top-level tables; the first word of a `NEYMAN_` variable must be one of them to be an
/// override.
pub const SECTIONS: [&str; 14] = [
    "source",
    "output",
    "state",
    "windows",
    "retrain",
    "model",
    "gate",
    "recalibrate",
    "drift",
    "scoring",
    "http",
    "log",
    "kafka",
    "audit",
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
    pub recalibrate: RecalibrateConfig,
    #[serde(default)]
    pub drift: DriftConfig,
    #[serde(default)]
    pub scoring: ScoringConfig,
    #[serde(default)]
    pub http: HttpConfig,
    #[serde(default)]
    pub log: LogConfig,
    /// The Kafka connection; absent: no Kafka (the daemon replays files).
    #[serde(default)]
    pub kafka: Option<KafkaConfig>,
    /// The background audit by the exact S3VM; absent: none.
    #[serde(default)]
    pub audit: Option<AuditConfig>,
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
        let mut config = deserialize(&table, &overrides)
            .map_err(|message| blame(text, &shown, &overrides, message))?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        config
            .check()
            .map_err(|(key, message)| ConfigError::Invalid {
                // A key the environment set is the variable's fault, not the file's.
                path: from_env
                    .get(&key)
                    .map_or(shown, |var| format!("environment variable {var}")),
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

/// `NEYMAN_` variables that are not configuration: read by the benches and the tests, listed
/// in the README. Any other `NEYMAN_` variable must name a key.
pub const NOT_CONFIG: [&str; 3] = ["NEYMAN_PYTHON", "NEYMAN_QP_N", "NEYMAN_LIBSVM_N"];
/// Prefix of the benches' variables (`NEYMAN_BENCH_DATA`, `NEYMAN_BENCH_SIZES`, …).
pub const NOT_CONFIG_PREFIX: &str = "NEYMAN_BENCH_";

/// librdkafka's settable properties whose names have an underscore; in every other
/// `NEYMAN_KAFKA_LIBRDKAFKA__…` name an underscore stands for a dot.
const LIBRDKAFKA_UNDERSCORED: [&str; 2] = ["log_level", "enabled_events"];

/// The error of a configuration that does not deserialize: the first environment variable
/// after which it stops deserializing when the file alone does, else the file's.
fn blame(text: &str, shown: &str, overrides: &[Override], message: String) -> ConfigError {
    let Ok(mut table) = text.parse::<toml::Table>() else {
        return ConfigError::Parse {
            path: shown.to_string(),
            message,
        };
    };
    if deserialize(&table, &[]).is_ok() {
        for (i, o) in overrides.iter().enumerate() {
            if set_path(&mut table, &o.keys, toml_value(&o.raw)).is_err() {
                break;
            }
            if let Err(message) = deserialize(&table, &overrides[..=i]) {
                return ConfigError::Env {
                    var: o.var.clone(),
                    message,
                };
            }
        }
    }
    ConfigError::Parse {
        path: shown.to_string(),
        message,
    }
}

fn env_overrides(
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<Override>, ConfigError> {
    let mut out = Vec::new();
    for (var, raw) in env {
        let Some(rest) = var.strip_prefix("NEYMAN_") else {
            continue;
        };
        if NOT_CONFIG.contains(&var.as_str()) || var.starts_with(NOT_CONFIG_PREFIX) {
            continue;
        }
        let lower = rest.to_ascii_lowercase();
        let (section, key) = lower.split_once('_').unwrap_or((&lower, ""));
        if !SECTIONS.contains(&section) {
            return Err(ConfigError::Env {
                message: format!(
                    "not a configuration key: `{section}` is not a section (NEYMAN_<SECTION>_<KEY>, \
                     SECTION one of {}); the variables that are not configuration are {} and \
                     {NOT_CONFIG_PREFIX}*",
                    SECTIONS.join(", "),
                    NOT_CONFIG.join(", ")
                ),
                var,
            });
        }
        let mut keys = vec![section.to_string()];
        keys.extend(key.split("__").map(str::to_string));
        if keys.iter().any(String::is_empty) {
            return Err(ConfigError::Env {
                var,
                message: "names an empty key".into(),
            });
        }
        if let [section, table, property] = keys.as_mut_slice() {
            if section == "kafka"
                && table == "librdkafka"
                && !LIBRDKAFKA_UNDERSCORED.contains(&property.as_str())
            {
                *property = property.replace('_', ".");
            }
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
        self.model.check()?;
        if let Some(a) = &self.audit {
            a.check(self.model.prior)?;
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
        if r.time_limit.0.is_zero() {
            return bad("retrain.time_limit", "must be > 0".into());
        }
        if !(self.gate.margin.is_finite() && self.gate.margin >= 0.0) {
            return bad("gate.margin", "must be finite and ≥ 0".into());
        }
        if !(self.gate.oob_slack.is_finite() && self.gate.oob_slack >= 0.0) {
            return bad("gate.oob_slack", "must be finite and ≥ 0".into());
        }
        let rc = &self.recalibrate;
        if rc.enabled && rc.window == 0 {
            return bad("recalibrate.window", "must be ≥ 1".into());
        }
        if rc.enabled && rc.every == 0 {
            return bad("recalibrate.every", "must be ≥ 1".into());
        }
        let d = &self.drift;
        if d.enabled && d.window < 2 {
            return bad("drift.window", "must be ≥ 2".into());
        }
        if d.enabled && d.every == 0 {
            return bad("drift.every", "must be ≥ 1".into());
        }
        if d.enabled && !(d.p_value > 0.0 && d.p_value < 1.0) {
            return bad(
                "drift.p_value",
                format!("must be in (0, 1), got {}", d.p_value),
            );
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
        if !(1..=10_000).contains(&self.scoring.dimension_quorum) {
            return bad(
                "scoring.dimension_quorum",
                format!(
                    "must be in 1..=10000, got {}",
                    self.scoring.dimension_quorum
                ),
            );
        }
        if self.scoring.max_features == 0 {
            return bad("scoring.max_features", "must be ≥ 1".into());
        }
        if let Some(n) = self
            .model
            .n_features
            .filter(|&n| n > self.scoring.max_features)
        {
            return bad(
                "model.n_features",
                format!(
                    "{n} is above scoring.max_features {}",
                    self.scoring.max_features
                ),
            );
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
        if self.http.max_connections == 0 {
            return bad("http.max_connections", "must be ≥ 1".into());
        }
        if self.http.max_concurrent_requests == 0 {
            return bad("http.max_concurrent_requests", "must be ≥ 1".into());
        }
        for (key, d) in [
            ("http.header_timeout", self.http.header_timeout),
            ("http.request_timeout", self.http.request_timeout),
        ] {
            if d.0.is_zero() {
                return bad(key, "must be > 0".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    pub(super) const MINIMAL: &str = r#"
[source]
path = "stream.jsonl.gz"

[model]
algorithm = "usmo"
prior = 0.3
tau = 0.05
"#;

    pub(super) fn load(text: &str, env: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
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
        assert_eq!(
            c.model.prior_min,
            Some(crate::learn::spec::PriorEnd::Value(0.1))
        );
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

    /// `[audit]` is off when absent, every key has its default, each bad value names its
    /// key, and π comes from `audit.prior` or `model.prior` (one is required).
    #[test]
    fn the_audit_table_is_optional_defaulted_and_checked() {
        assert_eq!(load(MINIMAL, &[]).expect("valid").config.audit, None);
        let a = load(&format!("{MINIMAL}\n[audit]\n"), &[])
            .expect("valid")
            .config
            .audit
            .expect("audit");
        assert_eq!(a.every.0, Duration::from_secs(3600));
        assert_eq!(a.time_limit.0, Duration::from_secs(300));
        assert_eq!(
            (a.max_rows, a.cl, a.cu_factor, a.gap),
            (200, 1.0, 1.0, 1e-3)
        );
        assert_eq!(
            (a.kernel, a.gamma, a.prior),
            (AuditKernel::Linear, None, None)
        );
        let c = load(MINIMAL, &[("NEYMAN_AUDIT_MAX_ROWS", "50")]).expect("valid");
        assert_eq!(c.config.audit.expect("audit").max_rows, 50);
        let without_prior = "[source]\npath = \"s\"\n[model]\nalgorithm = \"tfpl\"\ntau = 0.05\n";
        for (text, key) in [
            (
                format!("{MINIMAL}[audit]\nmax_rows = 601\n"),
                "audit.max_rows",
            ),
            (
                format!("{MINIMAL}[audit]\nmax_rows = 3\n"),
                "audit.max_rows",
            ),
            (format!("{MINIMAL}[audit]\nevery = 0\n"), "audit.every"),
            (
                format!("{MINIMAL}[audit]\ntime_limit = 0\n"),
                "audit.time_limit",
            ),
            (format!("{MINIMAL}[audit]\ncl = -1.0\n"), "audit.cl"),
            (
                format!("{MINIMAL}[audit]\ncu_factor = 0.0\n"),
                "audit.cu_factor",
            ),
            (format!("{MINIMAL}[audit]\ngamma = 0.0\n"), "audit.gamma"),
            (format!("{MINIMAL}[audit]\ngap = 1.0\n"), "audit.gap"),
            (format!("{MINIMAL}[audit]\nprior = 1.0\n"), "audit.prior"),
            (format!("{without_prior}[audit]\n"), "audit.prior"),
        ] {
            match load(&text, &[]) {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key, "{text}"),
                other => panic!("{key}: expected an invalid-key error, got {other:?}"),
            }
        }
        let own = load(&format!("{without_prior}[audit]\nprior = 0.2\n"), &[]).expect("valid");
        assert_eq!(own.config.audit.expect("audit").prior, Some(0.2));
        let typo = load(&format!("{MINIMAL}[audit]\nevry = \"1h\"\n"), &[]).expect_err("typo");
        assert!(typo.to_string().contains("evry"), "{typo}");
    }

    /// Issue 22: a misspelled variable is an error naming it, whether its section
    /// (`NEYMAN_MODLE_TAU`) or its key (`NEYMAN_MODEL_TAUU`) is wrong, and a bad value names
    /// the variable rather than the file; the tests' and benches' own variables pass.
    #[test]
    fn a_misspelled_or_bad_variable_is_an_error_naming_it() {
        for (var, value, says) in [
            ("NEYMAN_MODLE_TAU", "0.01", "`modle` is not a section"),
            ("NEYMAN_MODEL_TAUU", "0.01", "unknown field `tauu`"),
            ("NEYMAN_NOSUCH", "1", "`nosuch` is not a section"),
            ("NEYMAN_WINDOWS_POSITIVE__MAX_EVENTZ", "5", "max_eventz"),
        ] {
            let e = load(MINIMAL, &[(var, value)]).expect_err(var);
            assert!(
                matches!(&e, ConfigError::Env { var: v, .. } if v == var),
                "{var}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("environment variable {var}: ")),
                "{text}"
            );
            assert!(text.contains(says), "{text}");
        }
        let e = load(MINIMAL, &[("NEYMAN_MODEL_TAU", "1.5")]).expect_err("tau");
        assert!(
            e.to_string()
                .starts_with("environment variable NEYMAN_MODEL_TAU: `model.tau`: "),
            "{e}"
        );
        let env = [
            ("NEYMAN_PYTHON", "/usr/bin/python3"),
            ("NEYMAN_QP_N", "100"),
            ("NEYMAN_LIBSVM_N", "100"),
            ("NEYMAN_BENCH_SIZES", "1000"),
        ];
        assert!(load(MINIMAL, &env).is_ok());
    }

    /// librdkafka's dotted property names through the environment: `_` stands for `.` under
    /// `NEYMAN_KAFKA_LIBRDKAFKA__`, but in its two underscored properties.
    #[test]
    fn librdkafka_properties_have_an_environment_spelling() {
        let text = format!("{MINIMAL}\n[kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\n");
        let c = load(
            &text,
            &[
                (
                    "NEYMAN_KAFKA_LIBRDKAFKA__QUEUED_MAX_MESSAGES_KBYTES",
                    "2048",
                ),
                ("NEYMAN_KAFKA_LIBRDKAFKA__LOG_LEVEL", "3"),
                ("NEYMAN_KAFKA_LIBRDKAFKA__SSL_KEY_PASSWORD", "hunter2"),
            ],
        )
        .expect("loads");
        let properties = &c.config.kafka.expect("kafka").librdkafka;
        let rendered = format!("{properties:?}");
        let get = |key: &str| {
            properties
                .into_iter()
                .find(|(k, _)| k.as_str() == key)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(
            get("queued.max.messages.kbytes").as_deref(),
            Some("2048"),
            "{rendered}"
        );
        assert_eq!(get("log_level").as_deref(), Some("3"));
        assert_eq!(get("ssl.key.password").as_deref(), Some("hunter2"));
        assert!(!rendered.contains("hunter2"), "{rendered}");
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
}
