//! `[kafka]`, its topics and the librdkafka passthrough.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::values::{HumanDuration, Secret};

/// `[kafka]`: the broker connection, the topics and the client settings neyman owns.
///
/// Only the options that matter to neyman's guarantees are typed (and checked together);
/// anything else librdkafka understands goes through `[kafka.librdkafka]` unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]` (required in the section; `NEYMAN_KAFKA_BOOTSTRAP_SERVERS`).
    pub bootstrap_servers: String,
    /// How long `run` waits for the broker at start: it retries (logging each attempt with
    /// the bootstrap servers) and then fails naming them. HTTP is served meanwhile, `/healthz`
    /// live and `/readyz` not ready. Default 60s.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: HumanDuration,
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
    /// = "10"`). Keys the fields above own are refused, so a value is never set twice. The
    /// values of secret properties ([`is_secret_property`]) are never printed.
    #[serde(default)]
    pub librdkafka: Passthrough,
}

/// Whether a librdkafka property holds a secret: its name contains `password`, `secret`,
/// `token`, `key` (`ssl.key.pem`, `ssl.keystore.password`, …), `.pem` or `oauthbearer.config`.
/// Such values print as `<redacted>` in `config check`, logs and error messages.
pub fn is_secret_property(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "token",
        "key",
        ".pem",
        "oauthbearer.config",
    ]
    .iter()
    .any(|s| key.contains(s))
}

/// `[kafka.librdkafka]`: property → value as written. `Debug` and `Serialize` show the values of
/// secret properties as `<redacted>`.
#[derive(Clone, Default, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct Passthrough(BTreeMap<String, String>);

impl Passthrough {
    pub fn insert(&mut self, key: String, value: String) {
        self.0.insert(key, value);
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }

    /// The values of the secret properties, which error messages must not show.
    pub fn secret_values(&self) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(|(k, _)| is_secret_property(k))
            .map(|(_, v)| v.as_str())
    }

    fn shown(&self) -> BTreeMap<&str, &str> {
        self.0
            .iter()
            .map(|(k, v)| match is_secret_property(k) {
                true => (k.as_str(), "<redacted>"),
                false => (k.as_str(), v.as_str()),
            })
            .collect()
    }
}

impl<'a> IntoIterator for &'a Passthrough {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl std::fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.shown()).finish()
    }
}

impl Serialize for Passthrough {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.shown().serialize(s)
    }
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
fn default_connect_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(60))
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
            connect_timeout: default_connect_timeout(),
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
            librdkafka: Passthrough::default(),
        }
    }

    /// The section's rules; the error names the key (`kafka.<key>`).
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |key: &str, message: String| Err((format!("kafka.{key}"), message));
        if self.connect_timeout.0.is_zero() {
            return bad("connect_timeout", "must be > 0".into());
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{load, MINIMAL};
    use crate::config::{ConfigError, SourceKind};

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
