//! `[model]` and the names it chooses among.

use serde::{Deserialize, Serialize};

use super::values::HumanDuration;
use crate::data::ScaleKind;
use crate::learn::s3vm::cut::CutS3vmParams;
use crate::learn::spec::{
    AlgorithmSpec, CutS3vmSpec, KernelKind, KernelSpec, LearnerSpec, PriorAuto, PriorEnd, RankTau,
    Reg, SolverLimits, TfplSpec, ThresholdSettings, UsmoSpec,
};
use crate::learn::tfpl::TfplSolver;
use crate::learn::threshold::{OobRule, ThresholdMethod};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AlgorithmName {
    Usmo,
    Tfpl,
    /// CutS3VM: labelled positives and negatives plus unlabeled events (`[model.cuts3vm]`).
    #[value(name = "cuts3vm")]
    Cuts3vm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdName {
    Oob,
    Umbrella,
    PuUmbrella,
    /// No threshold: the scorer only ranks (see [`ThresholdName::method`]).
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KernelName {
    Linear,
    Rbf,
    Poly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ScaleName {
    None,
    Standard,
    Minmax,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OobRuleName {
    Quantile,
    Npscore,
}

/// Which events of a training snapshot are held out to calibrate the threshold
/// (`model.calibration`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CalibrationName {
    /// The ids with `fnv1a64(id) mod 100 < calibration_percent`: the calibration events are
    /// spread over the window's whole span of event time, and an event keeps its role for
    /// every model (it never trains one and calibrates the next).
    Hash,
    /// Per channel (positive, unlabeled, negative), the newest `calibration_percent` % of the
    /// snapshot's events by event time (ties by id): the threshold is calibrated on the
    /// stream's newest distribution, which is what a drifting stream needs, at the price of
    /// training on the older events only.
    Recent,
}

impl From<KernelName> for KernelKind {
    fn from(k: KernelName) -> KernelKind {
        match k {
            KernelName::Linear => KernelKind::Linear,
            KernelName::Rbf => KernelKind::Rbf,
            KernelName::Poly => KernelKind::Poly,
        }
    }
}

impl From<ScaleName> for ScaleKind {
    fn from(s: ScaleName) -> ScaleKind {
        match s {
            ScaleName::None => ScaleKind::None,
            ScaleName::Standard => ScaleKind::Standard,
            ScaleName::Minmax => ScaleKind::MinMax,
        }
    }
}

impl ThresholdName {
    /// The calibration this name asks for; `None` for `none`, which asks for no threshold:
    /// the model is accepted without a certificate and serves scores with `"flagged": false`,
    /// `"threshold": null`, `"certified": false`, for users who only rank.
    pub fn method(self) -> Option<ThresholdMethod> {
        match self {
            ThresholdName::Oob => Some(ThresholdMethod::Oob),
            ThresholdName::Umbrella => Some(ThresholdMethod::Umbrella),
            ThresholdName::PuUmbrella => Some(ThresholdMethod::PuUmbrella),
            ThresholdName::None => None,
        }
    }
}

impl From<OobRuleName> for OobRule {
    fn from(r: OobRuleName) -> OobRule {
        match r {
            OobRuleName::Quantile => OobRule::Quantile,
            OobRuleName::Npscore => OobRule::NpScore,
        }
    }
}

/// The learner, its false-positive target and its threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// `usmo` (positive vs unlabeled SVM), `tfpl` (τ-FPL ranking) or `cuts3vm` (semi-supervised
    /// SVM; its settings in `[model.cuts3vm]`).
    pub algorithm: AlgorithmName,
    /// π: the positive share of the unlabeled stream (required for usmo unless `prior_min` or
    /// `prior_max` is `"auto"`; then it defaults to the prior estimate of the training events).
    #[serde(default)]
    pub prior: Option<f64>,
    /// pu-umbrella: lower end of the plausible π (default: `prior`); a number or `"auto"`.
    /// `"auto"` takes it at each retrain from the held-out calibration events scored by the new
    /// model (a lower confidence bound at δ/2; the certificate then runs at δ/2, so both hold
    /// together with probability ≥ 1 − δ; docs/certificates.md §5). It **assumes an anchor**:
    /// no negative scores above the top `prior_anchor` share of the model's training
    /// positives' scores. Where negatives score as high as the best positives the bound can land
    /// above the true π and the FPR promise is then void, so it is not the default.
    #[serde(default)]
    pub prior_min: Option<PriorEnd>,
    /// pu-umbrella: upper end of the plausible π (default: `prior`); a number or `"auto"`.
    /// `"auto"` takes it from the calibration events as for `prior_min`, but needs no
    /// assumption beyond SCAR (FPR ≥ 0 bounds π from above).
    #[serde(default)]
    pub prior_max: Option<PriorEnd>,
    /// The anchor share an `"auto"` `prior_min` assumes: the top share of the model's training
    /// positives' scores that no negative reaches, in (0, 1].
    #[serde(default = "default_prior_anchor")]
    pub prior_anchor: f64,
    /// τ: the target false-positive rate.
    pub tau: f64,
    /// tfpl: the τ used for ranking (k = ⌊τn⌋ + 1), a number in (0, 1) or `"auto"` (the
    /// default): the depth among τ, 2τ, 4τ, … ½ whose scorer, fitted on three quarters of the
    /// training events, flags the most of the other quarter's positives at an FPR ≤ `tau` there
    /// (never the calibration events). The daemon searches on its first retrain and again when
    /// the choice stops paying (a refused model, a TPR estimate 0.05 below the search's, a
    /// drift detection, or every 20 retrains); the choice is in `/v1/model` and the log. With
    /// `threshold = "none"` the default is `tau`. Trained against the unlabeled window (no
    /// negatives yet), tfpl ranks at π + (1 − π)·rank_tau of it, π the middle of
    /// [prior_min, prior_max]: the unlabeled share an FPR-`rank_tau` threshold leaves above it.
    #[serde(default)]
    pub rank_tau: Option<RankTau>,
    /// δ: the allowed probability that the true FPR exceeds τ.
    #[serde(default = "default_delta")]
    pub delta: f64,
    /// `oob`, `umbrella`, `pu-umbrella` or `none`; absent: `umbrella` when the negative window
    /// holds `retrain.min_negative` events, else `pu-umbrella`. `none` trains on every event
    /// (nothing is held out) and accepts the model without a certificate: scores are served with
    /// `"flagged": false`, `"threshold": null`, `"certified": false`, for users who only rank.
    #[serde(default)]
    pub threshold: Option<ThresholdName>,
    /// Share of events kept out of training for calibration, in percent (which ones:
    /// `calibration`).
    #[serde(default = "default_calibration_percent")]
    pub calibration_percent: u8,
    /// Which events calibrate: `hash` (a stable hash of the id picks them, spread over the
    /// windows' whole span of event time) or `recent` (the newest of each channel: the
    /// threshold describes the newest distribution, as drift needs, and the scorer trains on
    /// the older events). See [`CalibrationName`] and docs/certificates.md §7.
    #[serde(default = "default_calibration")]
    pub calibration: CalibrationName,
    /// usmo: λ, the L2 regularisation.
    #[serde(default = "default_lambda")]
    pub lambda: f64,
    /// tfpl: R, the L2 regularisation, a positive number or `"auto"` (the default): chosen
    /// after the ranking depth, as `rank_tau = "auto"` chooses it and at the same times, from
    /// 1e-1 … 1e-6 by the held-back positives flagged at an FPR ≤ `tau` (starting from the
    /// last choice, else 1e-3). `neyman train`'s fixed default, 1e-2, left 0.03–0.07 TPR on the
    /// spambase drift streams (docs/benchmarks.md). With `threshold = "none"` nothing is held
    /// back and `auto` is 1e-3.
    #[serde(default = "default_reg")]
    pub reg: Reg,
    /// Kernel: `linear`, `rbf` or `poly` (default: rbf for usmo, linear for tfpl).
    /// tfpl with a non-linear kernel solves by FISTA over the Gram matrix, which takes
    /// minutes for a few thousand events (docs/tau-fpl.md §1.4): the daemon's retrains then
    /// end at `retrain.time_limit` and nothing is served. For a kernel model in the daemon
    /// use usmo.
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
    /// CutS3VM's settings, required with `algorithm = "cuts3vm"` (its `cl` and `cu`).
    #[serde(default)]
    pub cuts3vm: Option<Cuts3vmConfig>,
    /// The feature count of the stream, when known. Given, it is the locked dimension from the
    /// start: an event of another count is dead-lettered as `dimension_mismatch`, whatever
    /// arrives first. Unset, the first valid event's count locks it (or a resumed model's).
    #[serde(default)]
    pub n_features: Option<usize>,
}

/// `[model.cuts3vm]`: CutS3VM's settings (docs/cuts3vm.md). It trains on the positive and
/// negative windows as labelled events and the unlabeled window, with π = `model.prior` (the
/// positive share of the unlabeled stream), which it requires: unlike `neyman train`, which
/// defaults π to the labelled rows' share, the daemon's labelled share is set by the window
/// sizes and the feedback rates, not by the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cuts3vmConfig {
    /// C_l of objective (1): the weight of the labelled events' hinge sum divided by n.
    pub cl: f64,
    /// C_u of objective (1): the weight of the unlabeled events' hinge sum divided by n.
    pub cu: f64,
    /// ε of the outer stop H(w) ≤ ξ + ε.
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
    /// The CCCP inner loop stops when the objective falls by less than this share.
    #[serde(default = "default_cccp_tol")]
    pub cccp_tol: f64,
    /// Cap on the cutting-plane rounds of one retrain (then `converged: false`).
    #[serde(default = "default_max_rounds")]
    pub max_rounds: usize,
    /// Cap on the working set; at it the longest-inactive constraint makes room.
    #[serde(default = "default_max_constraints")]
    pub max_constraints: usize,
    /// Cap on the CCCP steps of one round.
    #[serde(default = "default_max_cccp_steps")]
    pub max_cccp_steps: usize,
    /// Stages of C_u/2^k solved before C_u on a cold start.
    #[serde(default = "default_anneal_stages")]
    pub anneal_stages: u32,
    /// Landmarks of the Nyström map a non-linear `model.kernel` needs.
    #[serde(default)]
    pub nystrom_rank: Option<usize>,
    /// What trains while the training events hold fewer than `min_labeled_per_class` labelled
    /// events of either class: `"usmo"` (positives against unlabeled events, with
    /// `model.prior`) or `"tfpl"` (the default). Counted as
    /// `neyman_retrains_total{result="fallback"}` when its model is swapped in.
    #[serde(default = "default_fallback")]
    pub fallback: AlgorithmName,
    /// Labelled events of each class (positive, negative) the training events must hold for
    /// CutS3VM to train.
    #[serde(default = "default_min_labeled_per_class")]
    pub min_labeled_per_class: usize,
    /// Every this many CutS3VM retrains one starts cold (the labelled-only fit, then the C_u
    /// stages) instead of from the last w: CCCP is local, and warm starts alone can hold on to
    /// an optimum the windows have left.
    #[serde(default = "default_cold_every")]
    pub cold_every: usize,
}

impl Cuts3vmConfig {
    /// The learner settings of this table with π = `prior`.
    fn spec(&self, prior: Option<f64>) -> CutS3vmSpec {
        CutS3vmSpec {
            prior,
            epsilon: self.epsilon,
            cccp_tol: self.cccp_tol,
            max_rounds: self.max_rounds,
            max_constraints: self.max_constraints,
            max_cccp_steps: self.max_cccp_steps,
            anneal_stages: self.anneal_stages,
            nystrom_rank: self.nystrom_rank,
            ..CutS3vmSpec::new(self.cl, self.cu)
        }
    }

    /// The table's checks, each naming its key; the solver's own (with `model`'s kernel and
    /// a stand-in π, which the retrain fills in) name the table.
    fn check(&self, model: &ModelConfig) -> Result<(), (String, String)> {
        let bad = |key: &str, message: String| Err((format!("model.cuts3vm.{key}"), message));
        if self.fallback == AlgorithmName::Cuts3vm {
            return bad("fallback", "must be \"usmo\" or \"tfpl\"".into());
        }
        if self.min_labeled_per_class == 0 {
            return bad("min_labeled_per_class", "must be ≥ 1".into());
        }
        if self.cold_every == 0 {
            return bad("cold_every", "must be ≥ 1".into());
        }
        let mut spec = model.learner_spec();
        if let AlgorithmSpec::CutS3vm(s) = &mut spec.algorithm {
            s.prior.get_or_insert(0.5);
        }
        spec.check()
            .map(|_| ())
            .map_err(|e| ("model.cuts3vm".to_string(), e.to_string()))
    }
}

fn default_epsilon() -> f64 {
    CutS3vmParams::DEFAULT_EPSILON
}
fn default_cccp_tol() -> f64 {
    CutS3vmParams::DEFAULT_CCCP_TOL
}
fn default_max_rounds() -> usize {
    CutS3vmParams::DEFAULT_MAX_ROUNDS
}
fn default_max_constraints() -> usize {
    CutS3vmParams::DEFAULT_MAX_CONSTRAINTS
}
fn default_max_cccp_steps() -> usize {
    CutS3vmParams::DEFAULT_MAX_CCCP_STEPS
}
fn default_anneal_stages() -> u32 {
    CutS3vmParams::DEFAULT_ANNEAL_STAGES
}
fn default_fallback() -> AlgorithmName {
    AlgorithmName::Tfpl
}
fn default_min_labeled_per_class() -> usize {
    10
}
fn default_cold_every() -> usize {
    10
}

/// The `[model]` keys without a default.
const REQUIRED: [&str; 2] = ["algorithm", "tau"];

impl ModelConfig {
    /// The settings that make two models differ, as canonical JSON (keys sorted): every key
    /// whose value is not its default, except the resource budgets (`cache_mb`, `max_gram_mb`,
    /// `time_limit`), which change how a fit runs, not what it fits, and `n_features`, which
    /// only fixes the dimension a model has anyway. A key a later release adds with a default
    /// is absent here, so the models of the release before still match.
    pub fn identity(&self) -> String {
        const BUDGETS: [&str; 4] = ["cache_mb", "max_gram_mb", "time_limit", "n_features"];
        let Ok(serde_json::Value::Object(set)) = serde_json::to_value(self) else {
            return String::new();
        };
        let required = serde_json::json!({"algorithm": set["algorithm"], "tau": set["tau"]});
        let defaults =
            match serde_json::from_value::<ModelConfig>(required).and_then(serde_json::to_value) {
                Ok(serde_json::Value::Object(defaults)) => defaults,
                _ => serde_json::Map::new(),
            };
        let differing: std::collections::BTreeMap<&String, &serde_json::Value> = set
            .iter()
            .filter(|(key, value)| {
                !BUDGETS.contains(&key.as_str())
                    && (REQUIRED.contains(&key.as_str()) || defaults.get(*key) != Some(*value))
            })
            .collect();
        serde_json::to_string(&differing).unwrap_or_default()
    }

    /// The `[model]` table's own checks, each naming its key (run by [`super::Config::check`]
    /// in its place among the other sections').
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |key: &str, message: String| Err((key.to_string(), message));
        let unit = |key: &str, v: f64| -> Result<(), (String, String)> {
            if v.is_finite() && v > 0.0 && v < 1.0 {
                Ok(())
            } else {
                Err((key.to_string(), format!("must be in (0, 1), got {v}")))
            }
        };
        let m = self;
        unit("model.tau", m.tau)?;
        unit("model.delta", m.delta)?;
        if let Some(t) = m.rank_tau.and_then(RankTau::value) {
            unit("model.rank_tau", t)?;
        }
        for (key, v) in [
            ("model.prior", m.prior),
            ("model.prior_min", m.prior_min.and_then(PriorEnd::value)),
            ("model.prior_max", m.prior_max.and_then(PriorEnd::value)),
        ] {
            if let Some(v) = v {
                unit(key, v)?;
            }
        }
        if !(m.prior_anchor > 0.0 && m.prior_anchor <= 1.0) {
            return bad(
                "model.prior_anchor",
                format!("must be in (0, 1], got {}", m.prior_anchor),
            );
        }
        if m.algorithm == AlgorithmName::Cuts3vm {
            if m.prior.is_none() {
                return bad(
                    "model.prior",
                    "required when algorithm = \"cuts3vm\": the positive share of the unlabeled \
                     stream (b = 2π − 1); the windows' labelled share reflects their sizes and \
                     the feedback rates, not the stream"
                        .into(),
                );
            }
            let Some(c) = &m.cuts3vm else {
                return bad(
                    "model.cuts3vm",
                    "required when algorithm = \"cuts3vm\": a [model.cuts3vm] table with cl and cu"
                        .into(),
                );
            };
            c.check(m)?;
        }
        let auto = self.prior_auto().is_some();
        if m.algorithm == AlgorithmName::Usmo && m.prior.is_none() && !auto {
            return bad(
                "model.prior",
                "required when algorithm = \"usmo\" (unless prior_min or prior_max is \"auto\")"
                    .into(),
            );
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
        if m.threshold == Some(ThresholdName::PuUmbrella) && !auto && (lo.is_none() || hi.is_none())
        {
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
        let numbers = [
            ("model.lambda", Some(m.lambda)),
            ("model.reg", m.reg.value()),
        ];
        for (key, v) in numbers.into_iter().filter_map(|(key, v)| Some((key, v?))) {
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
        if m.n_features == Some(0) {
            return bad("model.n_features", "must be ≥ 1".into());
        }
        Ok(())
    }

    /// [π_min, π_max], each defaulting to `prior`; an `"auto"` end is `None`.
    pub fn prior_interval(&self) -> (Option<f64>, Option<f64>) {
        let given = |end: Option<PriorEnd>| match end {
            Some(end) => end.value(),
            None => self.prior,
        };
        (given(self.prior_min), given(self.prior_max))
    }

    /// The ends that are `"auto"`, if any, with the anchor share.
    pub fn prior_auto(&self) -> Option<PriorAuto> {
        PriorAuto::of(self.prior_min, self.prior_max, self.prior_anchor)
    }

    /// The `[model.cuts3vm]` table when CutS3VM is the algorithm (a table beside another
    /// algorithm is ignored).
    pub fn cuts3vm_table(&self) -> Option<&Cuts3vmConfig> {
        self.cuts3vm
            .as_ref()
            .filter(|_| self.algorithm == AlgorithmName::Cuts3vm)
    }

    /// CutS3VM's fallback learner (the same `[model]` settings with `fallback` as the
    /// algorithm) and the labelled events per class below which it trains instead.
    pub fn fallback(&self) -> Option<(LearnerSpec, usize)> {
        let c = self.cuts3vm_table()?;
        Some((self.learner_spec_for(c.fallback), c.min_labeled_per_class))
    }

    /// The learner these settings describe: the one place the `[model]` table maps into
    /// [`LearnerSpec`]. A missing `prior_min` or `prior_max` is `prior`; the threshold method
    /// is left to the data (umbrella with negatives, else pu-umbrella) unless `threshold` is
    /// set. With `threshold = "none"` τ-FPL ranks at `rank_tau`, else at `tau`.
    pub fn learner_spec(&self) -> LearnerSpec {
        self.learner_spec_for(self.algorithm)
    }

    /// [`ModelConfig::learner_spec`] with `algorithm` training.
    fn learner_spec_for(&self, algorithm: AlgorithmName) -> LearnerSpec {
        let ranking_only = self.threshold == Some(ThresholdName::None);
        let (prior_min, prior_max) = self.prior_interval();
        let algorithm = match algorithm {
            AlgorithmName::Usmo => AlgorithmSpec::Usmo(UsmoSpec {
                prior: self.prior,
                lambda: self.lambda,
                cache_bytes: self.cache_mb.saturating_mul(1 << 20),
            }),
            AlgorithmName::Tfpl => AlgorithmSpec::Tfpl(TfplSpec {
                rank_tau: self.rank_tau.unwrap_or(if ranking_only {
                    RankTau::Value(self.tau)
                } else {
                    RankTau::Auto
                }),
                reg: self.reg,
                solver: TfplSolver::Auto,
                max_gram_bytes: self.max_gram_mb.saturating_mul(1 << 20),
            }),
            AlgorithmName::Cuts3vm => AlgorithmSpec::CutS3vm(
                self.cuts3vm
                    .as_ref()
                    .map_or(CutS3vmSpec::new(f64::NAN, f64::NAN), |c| c.spec(self.prior)),
            ),
        };
        LearnerSpec {
            algorithm,
            kernel: KernelSpec {
                kind: self.kernel.map(Into::into),
                gamma: self.gamma,
                degree: self.degree,
                coef0: self.coef0,
            },
            scale: self.scale.into(),
            limits: SolverLimits {
                tol: self.tol,
                max_iter: self.max_iter,
                time_limit: self.time_limit.map(|d| d.0),
                observer: Default::default(),
            },
            threshold: (!ranking_only).then(|| ThresholdSettings {
                method: self.threshold.and_then(ThresholdName::method),
                tau: self.tau,
                delta: self.delta,
                calibration_fraction: f64::from(self.calibration_percent) / 100.0,
                prior_min,
                prior_max,
                prior_auto: self.prior_auto(),
                rounds: self.rounds,
                oob_rule: self.oob_rule.into(),
            }),
            seed: self.seed,
        }
    }
}

fn default_prior_anchor() -> f64 {
    PriorAuto::DEFAULT_ANCHOR
}
fn default_delta() -> f64 {
    0.05
}
fn default_calibration_percent() -> u8 {
    30
}
/// `hash`: with fresh thresholds and drift detection on, 16 replayed spambase streams at
/// windows of 5 000 gave it 0.026 more mean TPR than `recent` (0.10 to 0.26 more after an
/// abrupt shift, where `recent` trains on pre-shift events only) for 7 against 6 blocks
/// beyond noise of 280 (docs/certificates.md §7).
fn default_calibration() -> CalibrationName {
    CalibrationName::Hash
}
fn default_lambda() -> f64 {
    1e-3
}
fn default_reg() -> Reg {
    Reg::Auto
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

#[cfg(test)]
mod tests {
    use super::super::tests::load;
    use super::CalibrationName;
    use crate::learn::spec::{AlgorithmSpec, KernelKind, PriorAuto, Reg};

    const TFPL: &str = "[source]\npath = \"s\"\n[model]\nalgorithm = \"tfpl\"\ntau = 0.05\n";

    /// The identity that fingerprints models holds the required keys and the settings off
    /// their defaults, sorted, without the resource budgets: spelling a default out, or a
    /// budget, does not change it; any other setting does.
    #[test]
    fn the_identity_is_the_settings_off_their_defaults() {
        let identity = |extra: &str| {
            let text = format!("{TFPL}{extra}");
            load(&text, &[]).unwrap().config.model.identity()
        };
        assert_eq!(identity(""), r#"{"algorithm":"tfpl","tau":0.05}"#);
        assert_eq!(
            identity("delta = 0.05\nreg = \"auto\"\ncache_mb = 9\n"),
            identity("")
        );
        assert_eq!(
            identity("max_gram_mb = 9\ntime_limit = \"5s\"\nn_features = 57\n"),
            identity("")
        );
        assert_eq!(
            identity("seed = 3\nreg = 0.1\n"),
            r#"{"algorithm":"tfpl","reg":0.1,"seed":3,"tau":0.05}"#
        );
    }

    /// `[model]` maps into the spec: the interval's ends default to `prior`, and a lone end
    /// (without `prior`) is a point interval, as on the command line.
    #[test]
    fn the_prior_interval_defaults_to_prior_and_a_lone_end_is_a_point() {
        let spec = |text: &str| load(text, &[]).unwrap().config.model.learner_spec();
        let usmo = spec("[source]\npath = \"s\"\n[model]\nalgorithm = \"usmo\"\nprior = 0.3\ntau = 0.05\nprior_max = 0.4\n");
        let t = usmo.threshold.as_ref().unwrap();
        assert_eq!(t.prior_interval(), Some((0.3, 0.4)));
        let AlgorithmSpec::Usmo(u) = &usmo.algorithm else {
            panic!("usmo")
        };
        assert_eq!(u.prior, Some(0.3));
        let lone = spec(&format!("{TFPL}prior_min = 0.2\n"));
        assert_eq!(lone.threshold.unwrap().prior_interval(), Some((0.2, 0.2)));
        let tfpl = spec(&format!("{TFPL}kernel = \"rbf\"\n"));
        assert_eq!(tfpl.kernel.kind, Some(KernelKind::Rbf));
        assert_eq!(spec(TFPL).kernel.kind, None, "the algorithm's default");
    }

    /// `prior_min`/`prior_max` = `"auto"` map to the spec's `prior_auto` (usmo then needs no
    /// `prior`); any other string, or a number outside (0, 1), is refused naming the key.
    #[test]
    fn auto_prior_ends_are_accepted_and_bad_ones_name_their_key() {
        let usmo = "[source]\npath = \"s\"\n[model]\nalgorithm = \"usmo\"\ntau = 0.05\n";
        let loaded = load(
            &format!("{usmo}prior_min = \"auto\"\nprior_max = 0.5\nprior_anchor = 0.3\n"),
            &[],
        )
        .expect("auto accepted");
        let t = loaded.config.model.learner_spec().threshold.unwrap();
        assert_eq!((t.prior_min, t.prior_max), (None, Some(0.5)));
        assert_eq!(
            t.prior_auto,
            Some(PriorAuto {
                min: true,
                max: false,
                anchor: 0.3
            })
        );
        let both = load(
            &format!(
                "{TFPL}prior_min = \"auto\"\nprior_max = \"auto\"\nthreshold = \"pu-umbrella\"\n"
            ),
            &[],
        )
        .expect("both auto");
        assert_eq!(both.config.model.prior_anchor, PriorAuto::DEFAULT_ANCHOR);
        for (extra, key) in [
            ("prior_min = \"automatic\"\n", "prior_min"),
            ("prior_max = \"0.3\"\n", "prior_max"),
            ("prior_max = 1.5\n", "model.prior_max"),
            (
                "prior_min = \"auto\"\nprior_anchor = 0.0\n",
                "model.prior_anchor",
            ),
        ] {
            let e = load(&format!("{TFPL}{extra}"), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{extra}: {e}");
        }
        let e = load(&format!("{usmo}prior_min = 0.2\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("model.prior") && e.contains("auto"), "{e}");
    }

    /// `algorithm = "cuts3vm"` needs its `[model.cuts3vm]` table; the table maps into the
    /// spec with `prior`, and every bad value is refused naming its key.
    #[test]
    fn the_cuts3vm_table_is_required_checked_and_mapped() {
        let no_prior = "[source]\npath = \"s\"\n[model]\nalgorithm = \"cuts3vm\"\ntau = 0.05\n";
        let e = load(&format!("{no_prior}[model.cuts3vm]\ncl = 1\ncu = 1\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("model.prior") && e.contains("cuts3vm"), "{e}");
        let cut = format!("{no_prior}prior = 0.3\n");
        let e = load(&cut, &[]).unwrap_err().to_string();
        assert!(
            e.contains("model.cuts3vm") && e.contains("cl and cu"),
            "{e}"
        );
        let loaded = load(
            &format!("{cut}[model.cuts3vm]\ncl = 5\ncu = 0.5\nepsilon = 0.05\n"),
            &[],
        )
        .expect("valid");
        let spec = loaded.config.model.learner_spec();
        let AlgorithmSpec::CutS3vm(c) = &spec.algorithm else {
            panic!("cuts3vm")
        };
        assert_eq!(
            (c.cl, c.cu, c.epsilon, c.prior),
            (5.0, 0.5, 0.05, Some(0.3))
        );
        let (fallback, least) = loaded.config.model.fallback().expect("a fallback");
        assert_eq!((fallback.algorithm.name(), least), ("tfpl", 10));
        for (table, key) in [
            ("cl = 0\ncu = 1\n", "model.cuts3vm"),
            (
                "cl = 1\ncu = 1\nfallback = \"cuts3vm\"\n",
                "model.cuts3vm.fallback",
            ),
            (
                "cl = 1\ncu = 1\ncold_every = 0\n",
                "model.cuts3vm.cold_every",
            ),
            (
                "cl = 1\ncu = 1\nmin_labeled_per_class = 0\n",
                "min_labeled_per_class",
            ),
            ("cl = 1\ncu = 1\nnystrom = 5\n", "nystrom"),
        ] {
            let e = load(&format!("{cut}[model.cuts3vm]\n{table}"), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{table}: {e}");
        }
        let rbf = load(
            &format!("{cut}kernel = \"rbf\"\n[model.cuts3vm]\ncl = 1\ncu = 1\n"),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(rbf.contains("--nystrom-rank"), "{rbf}");
    }

    /// `calibration` is `hash` or `recent`, from the file or `NEYMAN_MODEL_CALIBRATION`
    /// (marked as such by `config check`); any other value is refused naming the key.
    #[test]
    fn calibration_is_hash_or_recent_from_the_file_or_the_environment() {
        let calibration =
            |text: &str, env: &[(&str, &str)]| load(text, env).map(|l| l.config.model.calibration);
        assert_eq!(
            calibration(TFPL, &[]),
            Ok(super::default_calibration()),
            "the default"
        );
        for (value, want) in [
            ("hash", CalibrationName::Hash),
            ("recent", CalibrationName::Recent),
        ] {
            let text = format!("{TFPL}calibration = \"{value}\"\n");
            assert_eq!(calibration(&text, &[]), Ok(want), "{value}");
            assert_eq!(
                calibration(TFPL, &[("NEYMAN_MODEL_CALIBRATION", value)]),
                Ok(want),
                "{value} from the environment"
            );
        }
        let loaded = load(TFPL, &[("NEYMAN_MODEL_CALIBRATION", "recent")]).expect("valid");
        let rendered = loaded.render();
        assert!(
            rendered.contains("calibration = \"recent\"  # from NEYMAN_MODEL_CALIBRATION"),
            "{rendered}"
        );
        for (text, env, value) in [
            (
                format!("{TFPL}calibration = \"newest\"\n"),
                &[][..],
                "newest",
            ),
            (
                TFPL.to_string(),
                &[("NEYMAN_MODEL_CALIBRATION", "Recent")][..],
                "Recent",
            ),
        ] {
            let e = load(&text, env).unwrap_err().to_string();
            assert!(e.contains("model.calibration") && e.contains(value), "{e}");
        }
    }

    /// `reg` is a positive number or `"auto"` (the default), from the file or
    /// `NEYMAN_MODEL_REG`; the learner spec carries it as given; anything else is refused
    /// naming the key.
    #[test]
    fn reg_is_a_positive_number_or_auto() {
        let reg = |text: &str, env: &[(&str, &str)]| load(text, env).map(|l| l.config.model.reg);
        assert_eq!(reg(TFPL, &[]), Ok(Reg::Auto), "the default");
        assert_eq!(
            reg(&format!("{TFPL}reg = 0.003\n"), &[]),
            Ok(Reg::Value(0.003))
        );
        assert_eq!(reg(&format!("{TFPL}reg = 10\n"), &[]), Ok(Reg::Value(10.0)));
        assert_eq!(
            reg(TFPL, &[("NEYMAN_MODEL_REG", "1e-4")]),
            Ok(Reg::Value(1e-4))
        );
        assert_eq!(
            reg(
                &format!("{TFPL}reg = 0.01\n"),
                &[("NEYMAN_MODEL_REG", "auto")]
            ),
            Ok(Reg::Auto)
        );
        let loaded = load(&format!("{TFPL}reg = 0.003\n"), &[]).expect("valid");
        match loaded.config.model.learner_spec().algorithm {
            AlgorithmSpec::Tfpl(t) => assert_eq!(t.reg, Reg::Value(0.003)),
            other => panic!("{other:?}"),
        }
        for extra in ["reg = -1\n", "reg = 0\n", "reg = \"fast\"\n", "reg = nan\n"] {
            let e = load(&format!("{TFPL}{extra}"), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains("model.reg") || e.contains("reg"), "{extra}: {e}");
        }
    }
}
