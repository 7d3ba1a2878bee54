//! What every split of the Neyman–Pearson evaluation shares ([`Plan`]) and what it yields per
//! (split, τ, method) ([`Cell`]): the vocabulary of [`super::np_eval`] and
//! [`super::baselines`], kept apart so neither imports the other's internals.

use super::args::EvalArgs;
use crate::learn::metrics::{f1_for, np_score, roc_auc, tpr_at_fpr, Confusion, F1Class};
use crate::learn::spec::{PriorAuto, PriorEnd, RankTau, ThresholdSettings, ThresholdSpec};
use crate::learn::threshold::{npscore_threshold, OobRule, ThresholdMethod};

/// A method evaluated on every split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Tfpl,
    Usmo,
    BsSvm,
    CsSvmOob,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Tfpl => "tfpl",
            Method::Usmo => "usmo",
            Method::BsSvm => "bs-svm",
            Method::CsSvmOob => "cs-svm-oob",
        }
    }

    /// The name of the hyper-parameter reported per split.
    pub fn hyper_name(self) -> &'static str {
        match self {
            Method::Tfpl => "reg",
            Method::Usmo => "lambda",
            Method::BsSvm | Method::CsSvmOob => "c",
        }
    }
}

/// What every split shares: the validated flags.
pub struct Plan<'a> {
    pub args: &'a EvalArgs,
    pub taus: Vec<f64>,
    /// tfpl's ranking depth per τ: a number, or `auto` (chosen per split).
    pub rank_taus: Vec<RankTau>,
    pub methods: Vec<Method>,
    pub folds: usize,
    /// The threshold method of `--algo`.
    pub threshold: ThresholdMethod,
    pub oob_rule: OobRule,
}

impl Plan<'_> {
    /// The threshold spec of `--algo` at τ for a split's seed.
    pub fn spec(&self, tau: f64, seed: u64) -> ThresholdSpec {
        let t = &self.args.threshold;
        ThresholdSettings {
            method: Some(self.threshold),
            tau,
            delta: t.delta,
            calibration_fraction: t.calibration_fraction,
            prior_min: t.prior_min.and_then(PriorEnd::value),
            prior_max: t.prior_max.and_then(PriorEnd::value),
            prior_auto: PriorAuto::of(t.prior_min, t.prior_max, t.prior_anchor),
            rounds: t.rounds,
            oob_rule: self.oob_rule,
        }
        .spec(seed)
    }
}

/// One (split, τ, method) outcome on the test part.
#[derive(Debug, Clone)]
pub struct Cell {
    pub fpr: f64,
    pub tpr: f64,
    pub n_test_negatives: usize,
    pub accuracy: f64,
    pub f1: f64,
    pub auc: Option<f64>,
    /// The threshold procedure's name in the report.
    pub threshold_method: &'static str,
    /// R (tfpl), λ (usmo) or C (baselines).
    pub hyper: f64,
    /// tfpl: the ranking depth it was trained at (chosen on the split with `--rank-tau auto`).
    pub rank_tau: Option<f64>,
    /// C₊/C₋ of cs-svm-oob.
    pub cost_ratio: Option<f64>,
    /// The certified FPR level of an umbrella threshold.
    pub fpr_bound: Option<f64>,
    /// The test scores (kept for split 0 when `--plot` asks for them, else empty).
    pub test_scores: Vec<f64>,
    /// The NP-score of the best threshold for the test part itself: what a perfect threshold
    /// would reach with this scorer, separating ranking quality from threshold choice.
    pub oracle_np_score: f64,
    /// The highest test TPR at a test FPR ≤ τ ([`tpr_at_fpr`]): the scorer's own test-picked
    /// TPR, the ceiling any threshold chosen without the test labels can only approach.
    pub oracle_tpr: f64,
    pub converged: bool,
    /// The umbrella or pu-umbrella method could not certify τ on this split: the classifier
    /// flags nothing (FPR 0, TPR 0), as a deployment that refuses would.
    pub refused: bool,
}

/// Test-part scores against the truth at a threshold (positive iff score > threshold).
pub struct TestPart<'a> {
    pub truth: &'a [bool],
    pub f1_class: F1Class,
}

impl TestPart<'_> {
    pub fn cell(
        &self,
        scores: &[f64],
        tau: f64,
        threshold: f64,
        threshold_method: &'static str,
        hyper: f64,
    ) -> Cell {
        let confusion = |t: f64| {
            let predicted: Vec<bool> = scores.iter().map(|&s| s > t).collect();
            Confusion::from_predictions(&predicted, self.truth)
        };
        let class = |positive: bool| -> Vec<f64> {
            scores
                .iter()
                .zip(self.truth)
                .filter(|(_, &t)| t == positive)
                .map(|(&s, _)| s)
                .collect()
        };
        let (pos, neg) = (class(true), class(false));
        let oracle_np_score = npscore_threshold(&pos, &neg, tau).map_or(f64::NAN, |t| {
            let c = confusion(t);
            np_score(c.fpr(), c.tpr(), tau)
        });
        let conf = confusion(threshold);
        Cell {
            fpr: conf.fpr(),
            tpr: conf.tpr(),
            n_test_negatives: conf.fp + conf.tn,
            accuracy: conf.accuracy(),
            f1: f1_for(&conf, self.f1_class),
            auc: roc_auc(scores, self.truth),
            threshold_method,
            hyper,
            rank_tau: None,
            cost_ratio: None,
            fpr_bound: None,
            test_scores: scores.to_vec(),
            oracle_np_score,
            oracle_tpr: tpr_at_fpr(scores, self.truth, tau).unwrap_or(f64::NAN),
            converged: true,
            refused: false,
        }
    }
}
