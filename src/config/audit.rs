//! The `[audit]` table.

use serde::{Deserialize, Serialize};

use super::values::HumanDuration;

/// The background audit (README, "Auditing the active model"): every `every` of event time a
/// stratified sub-sample of the windows (each channel keeps its share of the rows, drawn at
/// random) is certified by the exact S3VM of `neyman certify` on its own thread, off the
/// scoring path: the optimum of model (8) with the balance row, its certified gap, and how
/// far the active model's labelling of the same unlabeled events is from it. The positive
/// and negative windows are the labelled rows, the unlabeled window the unlabeled ones; the
/// balance row takes π from `prior` (ρ = u·(2π − 1), eq. (10)), not from the labelled share,
/// which the window sizes set. Absent: no audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Event time between two audits; the first starts once a model is active and the
    /// windows hold `max_rows` events, or `retrain.min_positive` positives and
    /// `retrain.min_unlabeled` unlabeled events (a resumed model is active at once).
    #[serde(default = "default_every")]
    pub every: HumanDuration,
    /// Rows of the sub-sample, at most 600: the SDP is n×n (memory n², time n³ per node).
    #[serde(default = "default_max_rows")]
    pub max_rows: usize,
    /// Wall time of one audit's search; then it reports the best labelling found and the
    /// certified lower bound (status `time_limit`).
    #[serde(default = "default_time_limit")]
    pub time_limit: HumanDuration,
    /// C_l of model (8): the labelled rows' penalty.
    #[serde(default = "default_cl")]
    pub cl: f64,
    /// δ: the unlabeled rows' penalty is C_u = (l/u)·δ·C_l.
    #[serde(default = "default_cu_factor")]
    pub cu_factor: f64,
    /// `"linear"` or `"rbf"`.
    #[serde(default = "default_kernel")]
    pub kernel: AuditKernel,
    /// RBF γ (default 1/n_features).
    #[serde(default)]
    pub gamma: Option<f64>,
    /// π, the positive share of the unlabeled events, for the balance row (default
    /// `model.prior`; one of the two is required).
    #[serde(default)]
    pub prior: Option<f64>,
    /// The search stops when (objective − lower bound)/objective falls below this.
    #[serde(default = "default_gap")]
    pub gap: f64,
    /// Seed of the sub-sample (each audit draws with this seed and its number).
    #[serde(default)]
    pub seed: u64,
}

/// The audit's kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditKernel {
    Linear,
    Rbf,
}

/// Above this many rows the audit is refused (`certify --max-rows`' default).
pub const AUDIT_MAX_ROWS: usize = 600;

fn default_every() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(3600))
}
fn default_max_rows() -> usize {
    200
}
fn default_time_limit() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(300))
}
fn default_cl() -> f64 {
    1.0
}
fn default_cu_factor() -> f64 {
    1.0
}
fn default_kernel() -> AuditKernel {
    AuditKernel::Linear
}
fn default_gap() -> f64 {
    1e-3
}

impl AuditConfig {
    /// The table's checks, each naming its key; `model_prior` is `model.prior`.
    pub(super) fn check(&self, model_prior: Option<f64>) -> Result<(), (String, String)> {
        let bad = |key: &str, message: String| Err((format!("audit.{key}"), message));
        if self.every.0.is_zero() {
            return bad("every", "must be > 0".into());
        }
        if !(4..=AUDIT_MAX_ROWS).contains(&self.max_rows) {
            return bad(
                "max_rows",
                format!(
                    "must be in [4, {AUDIT_MAX_ROWS}] (the SDP is n×n), got {}",
                    self.max_rows
                ),
            );
        }
        if self.time_limit.0.is_zero() {
            return bad("time_limit", "must be > 0".into());
        }
        for (key, value) in [("cl", self.cl), ("cu_factor", self.cu_factor)] {
            if !(value.is_finite() && value > 0.0) {
                return bad(key, format!("must be finite and > 0, got {value}"));
            }
        }
        if let Some(g) = self.gamma {
            if !(g.is_finite() && g > 0.0) {
                return bad("gamma", format!("must be finite and > 0, got {g}"));
            }
        }
        if !(self.gap >= 0.0 && self.gap < 1.0) {
            return bad("gap", format!("must be in [0, 1), got {}", self.gap));
        }
        match self.prior.or(model_prior) {
            None => bad(
                "prior",
                "required when model.prior is unset: the balance row needs π".into(),
            ),
            Some(p) if !(p > 0.0 && p < 1.0) => bad("prior", format!("must be in (0, 1), got {p}")),
            Some(_) => Ok(()),
        }
    }
}
