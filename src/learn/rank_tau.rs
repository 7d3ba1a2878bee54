//! τ-FPL's ranking depth chosen from the data (`rank_tau = "auto"`).
//!
//! Problem (5) of the τ-FPL paper ranks the positives against the mean of the top
//! k = ⌊τn⌋ + 1 negatives. Where the positives' mean lies in the hull of k-averages of negatives
//! (heavily overlapping classes: pima, magic at τ = 5 %), the exact optimum is w = 0, a
//! constant scorer ([`crate::learn::tfpl::TfplReport::degenerate`]). Ranking deeper — 2τ, the
//! paper's 2τ-FPL, then 4τ, … up to ½ — gives the solver room; how deep pays is a property of
//! the data, so it is chosen on it: each depth of [`rank_grid`] is fitted on three quarters of
//! the training rows (each fit warm-started from the previous depth's), and the depth whose
//! scorer flags the most held-back positives at a held-back FPR ≤ τ wins (ties to the
//! shallower). The calibration rows never enter, so the threshold's certificate is untouched.
//!
//! Without negatives (PU) the unlabeled rows stand in for them and depth τ' ranks at
//! π + (1 − π)·τ' ([`crate::learn::spec::pu_rank_tau`]); the held-back FPR is then the PU
//! estimate (flag rate of unlabeled − π·TPR)/(1 − π) at the middle of the prior interval.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::data::{Dataset, Label};
use crate::learn::spec::pu_rank_tau;
use crate::learn::tfpl::{TfplError, TfplModel, TfplParams, TfplValidParams};
use crate::learn::tune::{stratified_folds, tau_rank_loss};

/// The deepest ranking the search tries: beyond it the top-k mean is most of the negatives.
pub const MAX_RANK_TAU: f64 = 0.5;

/// One in this many training rows of each class is held back to compare the depths.
const VALIDATION_FOLDS: usize = 4;

/// Fewer held-back positives or negatives than this cannot tell depths apart; the search then
/// takes the shallowest depth whose fit on every training row gains over a constant scorer.
pub const MIN_VALIDATION: usize = 10;

/// The depths tried for an FPR level `tau`: τ, 2τ, 4τ, … while below [`MAX_RANK_TAU`], then
/// [`MAX_RANK_TAU`] itself.
pub fn rank_grid(tau: f64) -> Vec<f64> {
    let mut grid = Vec::new();
    let mut depth = tau;
    while depth > 0.0 && depth < MAX_RANK_TAU {
        grid.push(depth);
        depth *= 2.0;
    }
    grid.push(MAX_RANK_TAU);
    grid
}

/// One depth the search fitted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankTried {
    pub rank_tau: f64,
    /// The held-back positives flagged at a held-back FPR ≤ τ (`None`: not validated).
    pub validation_tpr: Option<f64>,
    /// The fit gains nothing over a constant scorer.
    pub degenerate: bool,
}

/// The outcome of [`choose_rank_tau`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankChoice {
    /// The chosen depth τ' (for PU data the solver ranks at π + (1 − π)·τ').
    pub rank_tau: f64,
    /// `"validation"`: the best held-back TPR; `"non_degenerate"`: too few held-back rows, the
    /// shallowest depth that is not degenerate.
    pub criterion: &'static str,
    pub validation_positives: usize,
    pub validation_negatives: usize,
    /// Every depth tried, shallowest first.
    pub tried: Vec<RankTried>,
}

/// Chooses the ranking depth for FPR level `tau` on the (scaled) training rows `data`.
/// `params` gives everything but the depth. When `data` has no negatives its unlabeled rows
/// stand in for them, over `prior_interval` (without one there is nothing to rank against:
/// [`TfplError::NoNegatives`]). `previous` warm-starts the first fit. The search stops at the
/// first cancelled fit and chooses among the depths fitted so far.
pub fn choose_rank_tau(
    params: &TfplValidParams,
    tau: f64,
    data: &Dataset,
    prior_interval: Option<(f64, f64)>,
    previous: Option<&TfplModel>,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<RankChoice, TfplError> {
    let pu_prior = match data.count(Label::Negative) {
        0 => Some(prior_interval.ok_or(TfplError::NoNegatives)?),
        _ => None,
    };
    let mut data = data.clone();
    if pu_prior.is_some() {
        data.unlabeled_as_negatives();
    }
    let folds = stratified_folds(&data.labels, VALIDATION_FOLDS, seed);
    let (mut fit_rows, mut val_pos, mut val_neg) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &fold) in folds.iter().enumerate() {
        match (fold == 0, data.labels[i]) {
            (true, Label::Positive) => val_pos.push(i),
            (true, Label::Negative) => val_neg.push(i),
            (_, Label::Unlabeled) => {}
            (false, _) => fit_rows.push(i),
        }
    }
    let validated = val_pos.len() >= MIN_VALIDATION && val_neg.len() >= MIN_VALIDATION;
    let train = if validated {
        data.select(&fit_rows)
    } else {
        data.clone()
    };
    let (val_pos, val_neg) = (data.rows.select(&val_pos), data.rows.select(&val_neg));
    let prior = pu_prior.map(|(lo, hi)| 0.5 * (lo + hi));
    let mut tried = Vec::new();
    let mut best: Option<(f64, f64)> = None;
    let mut warm = previous.cloned();
    for depth in rank_grid(tau) {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        let solver_depth = match pu_prior {
            Some((lo, hi)) => pu_rank_tau(depth, lo, hi),
            None => depth,
        };
        let solver = TfplParams {
            tau: solver_depth,
            ..(**params).clone()
        }
        .check()?;
        let fit = solver.fit_with(warm.as_ref(), &train, cancel)?;
        let degenerate = fit.report.degenerate();
        let validation_tpr = validated.then(|| {
            if degenerate {
                return 0.0;
            }
            let mut sp = vec![0.0; val_pos.n_rows()];
            let mut sn = vec![0.0; val_neg.n_rows()];
            fit.expansion.decision_batch(&val_pos, &mut sp);
            fit.expansion.decision_batch(&val_neg, &mut sn);
            match prior {
                Some(prior) => pu_tpr_at_fpr(&sp, &sn, tau, prior),
                None => 1.0 - tau_rank_loss(&sp, &sn, tau).unwrap_or(1.0),
            }
        });
        tried.push(RankTried {
            rank_tau: depth,
            validation_tpr,
            degenerate,
        });
        warm = Some(fit);
        // A scorer that gains beats one that does not (key −1); then the held-back TPR decides.
        let key = if degenerate {
            -1.0
        } else {
            validation_tpr.unwrap_or(0.0)
        };
        let better = match best {
            None => true,
            Some((_, best_key)) => key > best_key + 1e-12,
        };
        if better {
            best = Some((depth, key));
        }
        if !validated && !degenerate {
            break;
        }
    }
    Ok(RankChoice {
        rank_tau: best.map_or(tau, |(depth, _)| depth),
        criterion: if validated {
            "validation"
        } else {
            "non_degenerate"
        },
        validation_positives: if validated { val_pos.n_rows() } else { 0 },
        validation_negatives: if validated { val_neg.n_rows() } else { 0 },
        tried,
    })
}

/// The largest share of `positive` scores above a threshold whose PU-estimated FPR,
/// (flag rate of `unlabeled` − π·TPR)/(1 − π), is ≤ `tau`; thresholds range over the scores.
fn pu_tpr_at_fpr(positive: &[f64], unlabeled: &[f64], tau: f64, prior: f64) -> f64 {
    let mut all: Vec<(f64, bool)> = positive
        .iter()
        .map(|&s| (s, true))
        .chain(unlabeled.iter().map(|&s| (s, false)))
        .collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (np, nu) = (positive.len() as f64, unlabeled.len() as f64);
    let (mut tp, mut fu, mut best) = (0.0, 0.0, 0.0_f64);
    let mut i = 0;
    while i < all.len() {
        // Every score tied at this value is flagged together (the rule is score > threshold
        // for a threshold just below it).
        let value = all[i].0;
        while i < all.len() && all[i].0 == value {
            if all[i].1 {
                tp += 1.0;
            } else {
                fu += 1.0;
            }
            i += 1;
        }
        let tpr = tp / np;
        if (fu / nu - prior * tpr) / (1.0 - prior) <= tau {
            best = best.max(tpr);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Rows;
    use ndarray::Array2;

    #[test]
    fn the_grid_doubles_from_tau_and_ends_at_one_half() {
        assert_eq!(rank_grid(0.05), vec![0.05, 0.1, 0.2, 0.4, 0.5]);
        assert_eq!(rank_grid(0.3), vec![0.3, 0.5]);
        assert_eq!(rank_grid(0.5), vec![0.5]);
        assert_eq!(rank_grid(0.01).len(), 7);
    }

    #[test]
    fn the_pu_criterion_counts_the_positives_above_the_deepest_admissible_threshold() {
        // 10 positives scored 2; 15 unlabeled rows: 5 scored 2, 5 scored 1, 5 scored 0.
        let positive = vec![2.0; 10];
        let mut unlabeled = vec![2.0; 5];
        unlabeled.extend(vec![1.0; 5]);
        unlabeled.extend(vec![0.0; 5]);
        // At threshold just below 2: TPR 1, flag rate 5/15, FPR est (1/3 − 1/2)/(1/2) < 0 ≤ τ.
        assert_eq!(pu_tpr_at_fpr(&positive, &unlabeled, 0.05, 0.5), 1.0);
        // With a prior of 0.1, flagging the 5 unlabeled at 2 costs FPR (1/3 − 0.1)/0.9 = 0.26.
        assert_eq!(pu_tpr_at_fpr(&positive, &unlabeled, 0.05, 0.1), 0.0);
        assert_eq!(pu_tpr_at_fpr(&positive, &unlabeled, 0.3, 0.1), 1.0);
    }

    /// Two classes whose means differ along feature 0, with the negatives' upper tail reaching
    /// past the positives' mean: at a shallow depth the top-k negatives' mean is above the
    /// positives' in every direction (w* = 0), at depth 0.4 and 0.5 it is not.
    fn overlapping(n: usize, seed: u64) -> Dataset {
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut x = Array2::zeros((2 * n, 2));
        let mut labels = Vec::new();
        for i in 0..2 * n {
            let positive = i < n;
            // Negatives: U(−½, ½) on feature 0, positives U(0.05, 0.65) (mean 0.35); the top
            // τ' share of negatives averages ½ − τ'/2, above 0.35 up to τ' = 0.3.
            x[[i, 0]] = if positive {
                0.05 + 0.6 * uniform()
            } else {
                uniform() - 0.5
            };
            x[[i, 1]] = (uniform() - 0.5) * 0.1;
            labels.push(if positive {
                Label::Positive
            } else {
                Label::Negative
            });
        }
        Dataset {
            rows: Rows::Dense(x),
            labels,
            ids: (0..2 * n).map(|i| format!("r{i}")).collect(),
        }
    }

    #[test]
    fn the_search_leaves_a_depth_where_the_solution_is_constant() {
        let data = overlapping(400, 7);
        let params = TfplParams::new(0.05, 1e-2).check().unwrap();
        let cancel = AtomicBool::new(false);
        assert!(params.fit(&data, &cancel).unwrap().report.degenerate());
        let choice = choose_rank_tau(&params, 0.05, &data, None, None, 1, &cancel).unwrap();
        assert_eq!(choice.criterion, "validation");
        assert_eq!(choice.tried.len(), 5);
        assert!(choice.tried[0].degenerate);
        assert_eq!(choice.tried[0].validation_tpr, Some(0.0));
        let chosen = choice
            .tried
            .iter()
            .find(|t| t.rank_tau == choice.rank_tau)
            .unwrap();
        assert!(!chosen.degenerate);
        assert!(chosen.validation_tpr.unwrap() > 0.0, "{choice:?}");
        // The chosen depth is the best validated one.
        let top = choice
            .tried
            .iter()
            .filter_map(|t| t.validation_tpr)
            .fold(0.0, f64::max);
        assert_eq!(chosen.validation_tpr, Some(top));
    }

    #[test]
    fn separable_data_keeps_the_papers_depth() {
        let mut data = overlapping(200, 3);
        // Move the positives far above every negative: every depth ranks them all on top.
        if let Rows::Dense(x) = &mut data.rows {
            for i in 0..200 {
                x[[i, 0]] += 5.0;
            }
        }
        let params = TfplParams::new(0.05, 1e-2).check().unwrap();
        let cancel = AtomicBool::new(false);
        let choice = choose_rank_tau(&params, 0.05, &data, None, None, 1, &cancel).unwrap();
        assert_eq!(choice.rank_tau, 0.05);
        assert!(choice.tried.iter().all(|t| t.validation_tpr == Some(1.0)));
    }

    #[test]
    fn few_rows_take_the_shallowest_depth_that_gains() {
        let data = overlapping(12, 5);
        let params = TfplParams::new(0.05, 1e-2).check().unwrap();
        let cancel = AtomicBool::new(false);
        let choice = choose_rank_tau(&params, 0.05, &data, None, None, 1, &cancel).unwrap();
        assert_eq!(choice.criterion, "non_degenerate");
        // The search stops at the first depth that gains; if none does, the paper's τ stays
        // (and the gate refuses the constant model).
        let last = choice.tried.last().unwrap();
        if last.degenerate {
            assert_eq!(choice.rank_tau, 0.05);
        } else {
            assert_eq!(last.rank_tau, choice.rank_tau);
        }
        assert!(choice.tried[..choice.tried.len() - 1]
            .iter()
            .all(|t| t.degenerate));
    }

    #[test]
    fn a_pu_search_ranks_the_unlabeled_rows_at_the_pu_depth() {
        let mut data = overlapping(300, 11);
        // Half the positives unlabeled among the negatives: π = 150/450.
        for i in 0..150 {
            data.labels[i] = Label::Unlabeled;
        }
        for l in data.labels.iter_mut() {
            if *l == Label::Negative {
                *l = Label::Unlabeled;
            }
        }
        let params = TfplParams::new(0.05, 1e-2).check().unwrap();
        let cancel = AtomicBool::new(false);
        let prior = (0.3, 0.36);
        let choice = choose_rank_tau(&params, 0.05, &data, Some(prior), None, 2, &cancel).unwrap();
        assert_eq!(choice.criterion, "validation");
        assert!(choice.validation_negatives > choice.validation_positives);
        assert!(rank_grid(0.05).contains(&choice.rank_tau));
        assert!(choice.tried.iter().all(|t| t.validation_tpr.is_some()));
    }
}
