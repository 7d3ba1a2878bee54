//! `[http]` and reading its admin token.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::values::{HumanDuration, Secret};
use super::ConfigError;

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
    /// Most open connections. At the cap a new connection is still taken: the oldest one with
    /// no request in progress is closed for it, so idle or half-open connections cannot lock
    /// `/healthz` out. Lowered at start (with a warning) to leave 512 file descriptors of the
    /// process limit for the state directory, Kafka and logs.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// A connection that has not sent a whole request head this long after it opened (or
    /// after its last response) is closed.
    #[serde(default = "default_header_timeout")]
    pub header_timeout: HumanDuration,
    /// Longest a request may take, body upload included; then 408 and the body read so far
    /// is freed.
    #[serde(default = "default_request_timeout")]
    pub request_timeout: HumanDuration,
    /// Most `/v1/*` requests in progress at once; more wait. Bounds the memory of uploads
    /// (`max_body_bytes` each). Health, readiness and `/metrics` are not counted.
    #[serde(default = "default_max_concurrent_requests")]
    pub max_concurrent_requests: usize,
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
fn default_max_connections() -> usize {
    1024
}
fn default_header_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(5))
}
fn default_request_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}
fn default_max_concurrent_requests() -> usize {
    64
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: default_listen(),
            admin_token_file: None,
            admin_token_env: None,
            max_body_bytes: default_max_body_bytes(),
            max_batch: default_max_batch(),
            max_connections: default_max_connections(),
            header_timeout: default_header_timeout(),
            request_timeout: default_request_timeout(),
            max_concurrent_requests: default_max_concurrent_requests(),
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
