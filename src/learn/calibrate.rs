//! Training with a false-positive threshold: which rows train the scorer, which calibrate it.
//!
//! The threshold methods of [`crate::learn::threshold`] each need data the scorer never saw:
//! - `umbrella`: held-out negatives. τ-FPL trains on positives and the other negatives; USMO
//!   never trains on negatives, so all of them calibrate it.
//! - `pu-umbrella`: a held-out part of the labelled positives and of the unlabeled rows; the
//!   candidate thresholds are the training rows' distinct scores, tested from the highest down
//!   (fixed without the calibration data). τ-FPL without negatives ranks the positives against
//!   the unlabeled rows at the rank τ of [`crate::learn::spec::pu_rank_tau`].
//! - `oob` (τ-FPL only): stratified bootstrap rounds over positives and negatives, one scorer per
//!   round, thresholds from each round's out-of-bag scores; the final scorer is the mean of the
//!   round scorers and the threshold the mean of the round thresholds.
//!
//! Without an explicit method, `umbrella` is used when the data has negatives, else
//! `pu-umbrella`. The calibration split is drawn from `seed`, so a fit is reproducible.

use std::sync::atomic::AtomicBool;

use crate::data::{Dataset, Label, Rows};
use crate::learn::kernel::KernelExpansion;
use crate::learn::prior::{PriorBounds, PriorError};
use crate::learn::s3vm::cut::CutError;
use crate::learn::spec::{Algorithm, Fit, SpecError, ThresholdSpec};
use crate::learn::tfpl::TfplError;
use crate::learn::threshold::{
    bootstrap_rounds, calibration_split, oob, pu_candidates, pu_umbrella, umbrella, ThresholdError,
    ThresholdMethod, ThresholdResult,
};
use crate::learn::usmo::UsmoError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Usmo(#[from] UsmoError),
    #[error(transparent)]
    Tfpl(#[from] TfplError),
    #[error(transparent)]
    CutS3vm(#[from] CutError),
    #[error(transparent)]
    Threshold(#[from] ThresholdError),
    #[error("the {0} threshold needs {1}")]
    Needs(&'static str, &'static str),
    #[error(transparent)]
    Prior(#[from] PriorError),
    /// pu-umbrella certified no candidate with an interval whose `auto` ends came from
    /// `bounds`: the refusal, and the bounds it was computed with (the daemon still exports them).
    #[error(
        "{error} (the prior interval's auto ends: [{:.4}, {:.4}], estimate {:.4}, from the \
         calibration rows)",
        bounds.lower,
        bounds.upper,
        bounds.estimate
    )]
    Uncertified {
        error: ThresholdError,
        bounds: Box<PriorBounds>,
    },
}

impl From<SpecError> for CalibrateError {
    fn from(e: SpecError) -> CalibrateError {
        match e {
            SpecError::Usmo(u) => CalibrateError::Usmo(u),
            SpecError::Tfpl(t) => CalibrateError::Tfpl(t),
            SpecError::CutS3vm(c) => CalibrateError::CutS3vm(c),
        }
    }
}

impl Algorithm {
    /// The rows of `data` the scorer is trained on under `spec`; the others calibrate it. For
    /// `oob` that is every row (the rounds resample them). Hyper-parameters chosen on these rows
    /// only leave the calibration rows unseen, which the umbrella guarantees need.
    pub fn scorer_rows(
        &self,
        spec: &ThresholdSpec,
        data: &Dataset,
    ) -> Result<Vec<usize>, CalibrateError> {
        Ok(match spec.method_for(data) {
            ThresholdMethod::Umbrella => self.umbrella_split(spec, data)?.0,
            ThresholdMethod::PuUmbrella => pu_split(spec, data)?.0,
            ThresholdMethod::Oob => (0..data.len()).collect(),
        })
    }

    /// [`Algorithm::scorer_rows`] as a mask over `data`'s rows: `true` for a row that
    /// calibrates (never trains) under `spec`. Callers split first and fit the feature scaler
    /// and any hyper-parameter on the rows left `false`, then pass the same mask to
    /// [`Algorithm::fit_with_held_out`].
    pub fn held_out(
        &self,
        spec: &ThresholdSpec,
        data: &Dataset,
    ) -> Result<Vec<bool>, CalibrateError> {
        let mut held_out = vec![true; data.len()];
        for i in self.scorer_rows(spec, data)? {
            held_out[i] = false;
        }
        Ok(held_out)
    }

    /// (training rows, calibration negatives) of the umbrella method.
    fn umbrella_split(
        &self,
        spec: &ThresholdSpec,
        data: &Dataset,
    ) -> Result<(Vec<usize>, Vec<usize>), CalibrateError> {
        let negatives = data.indices_of(Label::Negative);
        if negatives.is_empty() {
            return Err(CalibrateError::Needs("umbrella", "negatives (label -1)"));
        }
        if !self.trains_on_negatives() {
            // Every negative is unseen by such a scorer.
            return Ok(((0..data.len()).collect(), negatives));
        }
        let (_, cal) = calibration_split(&negatives, spec.calibration_fraction, spec.seed)?;
        Ok((without(data.len(), &cal), cal))
    }

    /// Trains the scorer and calibrates its threshold per `spec` (see the module docs); the
    /// held-out rows are drawn from `spec.seed` ([`Algorithm::scorer_rows`]).
    pub fn fit_with_threshold(
        &self,
        previous: Option<&Fit>,
        spec: &ThresholdSpec,
        data: &Dataset,
        cancel: &AtomicBool,
    ) -> Result<(Fit, ThresholdResult, Option<PriorBounds>), CalibrateError> {
        if spec.method_for(data) == ThresholdMethod::PuUmbrella && spec.prior_interval.is_none() {
            return Err(CalibrateError::Needs(
                "pu-umbrella",
                "the prior interval of the unlabeled data (prior_min and prior_max)",
            ));
        }
        let held_out = self.held_out(spec, data)?;
        self.fit_with_held_out(previous, spec, data, &held_out, cancel)
    }

    /// As [`Algorithm::fit_with_threshold`], with the held-out rows given: rows with
    /// `held_out[i]` never train the scorer. `umbrella` calibrates on the held-out negatives
    /// (USMO, which never trains on negatives: on every negative); `pu-umbrella` on the
    /// held-out positives and unlabeled rows; `oob` bootstraps the rows that are not held out.
    /// The daemon holds out by a stable hash of the event id (an event never trains one model
    /// and calibrates the next) or the newest events of each channel (`model.calibration`).
    /// Also returns the prior bounds that the `auto` ends of
    /// pu-umbrella's interval were taken from ([`ThresholdSpec::calibration_prior`]).
    pub fn fit_with_held_out(
        &self,
        previous: Option<&Fit>,
        spec: &ThresholdSpec,
        data: &Dataset,
        held_out: &[bool],
        cancel: &AtomicBool,
    ) -> Result<(Fit, ThresholdResult, Option<PriorBounds>), CalibrateError> {
        let negatives = data.indices_of(Label::Negative);
        let held: Vec<usize> = (0..data.len()).filter(|&i| held_out[i]).collect();
        let mut train = data.select(&without(data.len(), &held));
        match spec.method_for(data) {
            ThresholdMethod::Umbrella => {
                if negatives.is_empty() {
                    return Err(CalibrateError::Needs("umbrella", "negatives (label -1)"));
                }
                let calibration: Vec<usize> = if self.trains_on_negatives() {
                    negatives.into_iter().filter(|&i| held_out[i]).collect()
                } else {
                    negatives
                };
                let fit = self.fit(previous, &train, cancel)?;
                let cal_scores = fit.scores(&data.rows.select(&calibration));
                // The training positives give an (optimistic) TPR estimate.
                let pos_scores = fit.scores(&train.rows.select(&train.indices_of(Label::Positive)));
                let result = umbrella(&cal_scores, spec.tau, spec.delta, Some(&pos_scores))?;
                Ok((fit, result, None))
            }
            ThresholdMethod::PuUmbrella => {
                let (prior_min, prior_max) = spec.prior_interval.ok_or(CalibrateError::Needs(
                    "pu-umbrella",
                    "the prior interval of the unlabeled data (prior_min and prior_max)",
                ))?;
                let held_of = |label| -> Vec<usize> {
                    data.indices_of(label)
                        .into_iter()
                        .filter(|&i| held_out[i])
                        .collect()
                };
                let (cal_p, cal_u) = (held_of(Label::Positive), held_of(Label::Unlabeled));
                // Without negatives, an algorithm that needs them (τ-FPL) trains the positives
                // against the unlabeled rows, ranking at the unlabeled share that an FPR-τ
                // threshold above every positive leaves.
                let stand_in = if negatives.is_empty() {
                    self.for_unlabeled_as_negatives(prior_min, prior_max)?
                } else {
                    None
                };
                if stand_in.is_some() {
                    train.unlabeled_as_negatives();
                }
                let algorithm = stand_in.as_ref().unwrap_or(self);
                let fit = algorithm.fit(previous, &train, cancel)?;
                let (cal_p, cal_u) = (
                    fit.scores(&data.rows.select(&cal_p)),
                    fit.scores(&data.rows.select(&cal_u)),
                );
                let training_scores = fit.scores(&train.rows);
                let training_positive_scores: Vec<f64> = train
                    .indices_of(Label::Positive)
                    .into_iter()
                    .map(|i| training_scores[i])
                    .collect();
                // `auto` ends from the same calibration scores, at a share of δ.
                let prior = spec.calibration_prior(
                    (prior_min, prior_max),
                    &cal_p,
                    &cal_u,
                    &training_positive_scores,
                )?;
                // The candidates and their order come from the training rows' scores only
                // (docs/certificates.md §2).
                let result = pu_umbrella(
                    &pu_candidates(&training_scores),
                    &cal_p,
                    &cal_u,
                    spec.tau,
                    prior.delta,
                    prior.prior_min,
                    prior.prior_max,
                )
                .map_err(|error| match prior.bounds {
                    Some(bounds) => CalibrateError::Uncertified {
                        error,
                        bounds: Box::new(bounds),
                    },
                    None => error.into(),
                })?;
                Ok((fit, result, prior.bounds))
            }
            ThresholdMethod::Oob => {
                if !self.trains_on_negatives() {
                    return Err(CalibrateError::Needs(
                        "oob",
                        "an algorithm trained on negatives (--algo tfpl)",
                    ));
                }
                // Every round starts from `previous`: the rounds resample the same ids, so a
                // fit of the same problem is a close starting point for each of them.
                let (fits, result) = oob_calibrate(
                    spec,
                    &train,
                    |in_bag| {
                        self.fit(previous, in_bag, cancel)
                            .map_err(CalibrateError::from)
                    },
                    |fit, rows| fit.scores(rows),
                )?;
                Ok((average(fits), result, None))
            }
        }
    }
}

/// Row indices: (training rows, calibration positives, calibration unlabeled rows).
type PuSplit = (Vec<usize>, Vec<usize>, Vec<usize>);

/// The rows of pu-umbrella's split.
fn pu_split(spec: &ThresholdSpec, data: &Dataset) -> Result<PuSplit, CalibrateError> {
    let positives = data.indices_of(Label::Positive);
    let unlabeled = data.indices_of(Label::Unlabeled);
    let (_, cal_p) = calibration_split(&positives, spec.calibration_fraction, spec.seed)?;
    let (_, cal_u) = calibration_split(&unlabeled, spec.calibration_fraction, spec.seed ^ 1)?;
    let mut held: Vec<usize> = cal_p.iter().chain(&cal_u).copied().collect();
    held.sort_unstable();
    Ok((without(data.len(), &held), cal_p, cal_u))
}

/// Out-of-bootstrap calibration (docs/tau-fpl.md §3.2) for any scorer: for each of `spec.rounds`
/// stratified bootstrap rounds over `data`'s positives and negatives, `train` fits a scorer on
/// the in-bag rows and `score` scores the out-of-bag rows; the threshold is [`oob`] of those
/// scores with `spec.oob_rule`. Returns the round scorers (the final scorer is their mean, so
/// that mean_r(f_r(x) − b_r) = f̄(x) − b̄) and the threshold. Shared by τ-FPL and the
/// evaluation's linear-SVM baseline so both are thresholded by the same procedure.
pub fn oob_calibrate<S, E: From<CalibrateError>>(
    spec: &ThresholdSpec,
    data: &Dataset,
    mut train: impl FnMut(&Dataset) -> Result<S, E>,
    score: impl Fn(&S, &Rows) -> Vec<f64>,
) -> Result<(Vec<S>, ThresholdResult), E> {
    let positives = data.indices_of(Label::Positive);
    let negatives = data.indices_of(Label::Negative);
    if negatives.is_empty() {
        return Err(CalibrateError::Needs("oob", "negatives (label -1)").into());
    }
    let mut per_round = Vec::with_capacity(spec.rounds);
    let mut fits = Vec::with_capacity(spec.rounds);
    for (in_bag, out_of_bag) in bootstrap_rounds(&positives, &negatives, spec.rounds, spec.seed) {
        let fit = train(&data.select(&in_bag))?;
        let oob_rows = data.select(&out_of_bag);
        let scores = score(&fit, &oob_rows.rows);
        let (mut pos, mut neg) = (Vec::new(), Vec::new());
        for (s, l) in scores.iter().zip(&oob_rows.labels) {
            if *l == Label::Positive {
                pos.push(*s);
            } else {
                neg.push(*s);
            }
        }
        per_round.push((pos, neg));
        fits.push(fit);
    }
    let result = oob(&per_round, spec.oob_rule, spec.tau).map_err(CalibrateError::from)?;
    Ok((fits, result))
}

/// The mean of the round scorers: their expansions stacked, each coefficient divided by the
/// number of rounds (for the linear kernel this is the mean weight vector). The report and
/// warm-start state are those of the last round.
fn average(fits: Vec<Fit>) -> Fit {
    let rounds = fits.len() as f64;
    let kernel = fits[0].expansion().kernel;
    let mut coef = Vec::new();
    let mut row_sets = Vec::new();
    for f in &fits {
        coef.extend(f.expansion().coef.iter().map(|c| c / rounds));
        row_sets.push(&f.expansion().support);
    }
    let support = Rows::concat(&row_sets);
    let last = fits.into_iter().last().expect("at least one round");
    last.with_expansion(KernelExpansion::new(kernel, support, coef, 0.0))
}

/// 0..len without the sorted `removed` indices.
fn without(len: usize, removed: &[usize]) -> Vec<usize> {
    let mut sorted = removed.to_vec();
    sorted.sort_unstable();
    (0..len)
        .filter(|i| sorted.binary_search(i).is_err())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use crate::learn::spec::pu_rank_tau;
    use crate::learn::tfpl::TfplParams;
    use crate::learn::threshold::OobRule;

    use ndarray::Array2;

    use super::*;
    use crate::data::Rows;
    use crate::learn::metrics::roc_auc;

    #[test]
    fn pu_rank_tau_is_the_unlabeled_share_above_an_fpr_tau_threshold() {
        assert!((pu_rank_tau(0.05, 0.33, 0.43) - (0.38 + 0.62 * 0.05)).abs() < 1e-15);
        assert_eq!(pu_rank_tau(0.0, 0.2, 0.2), 0.2);
        assert!(pu_rank_tau(0.5, 0.99, 0.99) < 1.0);
    }

    /// 600 labelled positives around (0.9, 0.9, 0), 3 000 unlabeled rows of which 40 % come from
    /// the positives' distribution and the rest from negatives around 0: ranked at the
    /// unlabeled share of `pu_rank_tau`, τ-FPL separates the two; ranked at τ = 5 % of the
    /// unlabeled rows (mostly positives themselves) its exact optimum is w = 0.
    #[test]
    fn pu_tfpl_ranks_against_the_unlabeled_share_an_fpr_threshold_leaves() {
        let mut s = 0x2545_f491_4f6c_dd1d_u64;
        let mut uniform = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        };
        let (n_pos, n_unl) = (600, 3000);
        let mut values = Vec::new();
        let (mut labels, mut truth) = (Vec::new(), Vec::new());
        for i in 0..n_pos + n_unl {
            let positive = i < n_pos || (i - n_pos) % 5 < 2;
            let shift = if positive { 0.9 } else { 0.0 };
            values.extend([shift + uniform(), shift + uniform(), uniform()]);
            labels.push(if i < n_pos {
                Label::Positive
            } else {
                Label::Unlabeled
            });
            truth.push(positive);
        }
        let data = Dataset {
            rows: Rows::dense(Array2::from_shape_vec((n_pos + n_unl, 3), values).unwrap()),
            labels,
            ids: (0..n_pos + n_unl).map(|i| format!("e{i}")).collect(),
        };
        let spec = ThresholdSpec {
            method: Some(ThresholdMethod::PuUmbrella),
            tau: 0.05,
            delta: 0.05,
            calibration_fraction: 0.3,
            prior_interval: Some((0.35, 0.45)),
            prior_auto: None,
            rounds: 10,
            oob_rule: OobRule::Quantile,
            seed: 7,
        };
        let params = TfplParams::new(0.05, 1e-2).check().unwrap();
        let cancel = AtomicBool::new(false);
        let (fit, ..) = Algorithm::Tfpl(params.clone())
            .fit_with_threshold(None, &spec, &data, &cancel)
            .unwrap();
        let Fit::Tfpl(model) = &fit else {
            panic!("a tfpl fit")
        };
        assert!(model.report.converged, "{:?}", model.report);
        let unlabeled: Vec<usize> = (n_pos..n_pos + n_unl).collect();
        let scores = fit.scores(&data.rows.select(&unlabeled));
        let is_positive: Vec<bool> = unlabeled.iter().map(|&i| truth[i]).collect();
        let auc = roc_auc(&scores, &is_positive).unwrap();
        assert!(auc > 0.9, "AUC {auc}");

        // The same positives-against-unlabeled problem ranked at τ itself: w* = 0.
        let mut pu = data.clone();
        pu.unlabeled_as_negatives();
        let degenerate = params.fit(&pu, &cancel).unwrap();
        assert!(
            1.0 - degenerate.report.dual_objective <= 1e-9,
            "{:?}",
            degenerate.report
        );
    }
}
