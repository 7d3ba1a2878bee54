//! τ-FPL's ranking depth chosen from the data (`rank_tau = "auto"`).
//!
//! Problem (5) of the τ-FPL paper ranks the positives against the mean of the top
//! k = ⌊τn⌋ + 1 negatives. Where the positives' mean lies in the hull of k-averages of negatives
//! (heavily overlapping classes: pima, magic at τ = 5 %), the exact optimum is w = 0, a
//! constant scorer ([`crate::learn::tfpl::TfplReport::degenerate`]). Ranking deeper — 2τ, the
//! paper's 2τ-FPL, then 4τ, … up to ½ — gives the solver room; how deep pays is a property of
//! the data, so it is chosen on it: each depth of [`rank_grid`] is fitted on three quarters of
//! the training rows (each fit warm-started from the previous depth's), and the depth whose
//! scorer flags the most held-back positives on average over the held-back FPRs 0 … τ wins
//! (ties to the shallower; [`mean_tpr_up_to`]: a certified threshold operates below τ, so the
//! TPR at τ alone is the wrong target, and one order statistic is a noisy one). The
//! calibration rows never enter, so the threshold's certificate is untouched.
//!
//! With `reg = "auto"` R is chosen the same way, after the depth: at the chosen depth each R of
//! [`REG_GRID`] is fitted (largest first, each warm-started from the previous), and the best
//! held-back criterion wins (ties keep the R the depths were compared at). With a previous fit
//! (the daemon's later searches) R instead walks from the previous R a decade at a time, each
//! way, while the criterion improves. The two are chosen in turn, not jointly, so a search
//! costs |depths| + |R grid| fits at most, not their product. On the
//! spambase drift streams R = 1e-2 (the `train` default) left up to 0.07 TPR at the same
//! certified FPR (docs/benchmarks.md).
//!
//! Without negatives (PU) the unlabeled rows stand in for them and depth τ' ranks at
//! π + (1 − π)·τ' ([`crate::learn::spec::pu_rank_tau`]); the held-back FPR is then the PU
//! estimate (flag rate of unlabeled − π·TPR)/(1 − π) at the middle of the prior interval.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::data::{Dataset, Label};
use crate::learn::observe::FitStep;
use crate::learn::spec::pu_rank_tau;
use crate::learn::tfpl::{TfplError, TfplModel, TfplParams, TfplValidParams};
use crate::learn::tune::stratified_folds;

/// The deepest ranking the search tries: beyond it the top-k mean is most of the negatives.
pub const MAX_RANK_TAU: f64 = 0.5;

/// The R values an `auto` R is chosen from, largest first: the cross-validation grid of
/// `eval` (whose choices on the repo's datasets range from 10 on magic to 1e-5 on spambase).
pub const REG_GRID: [f64; 8] = crate::learn::tune::REG_GRID;

/// The R an `auto` R starts at before any fit: the middle of [`REG_GRID`].
pub const REG_START: f64 = 1e-3;

/// What a search chooses; a setting not searched stays at the given parameters' value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchAxes {
    /// The ranking depth (`rank_tau = "auto"`).
    pub depth: bool,
    /// R (`reg = "auto"`).
    pub reg: bool,
}

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
    pub reg: f64,
    /// The held-back criterion: the mean share of held-back positives flagged at held-back
    /// FPRs 0 … τ ([`mean_tpr_up_to`]; with PU data, the positives flagged at a PU-estimated
    /// FPR ≤ τ); `None`: not validated.
    pub validation_tpr: Option<f64>,
    /// The fit gains nothing over a constant scorer.
    pub degenerate: bool,
}

/// The outcome of [`choose_rank_tau`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankChoice {
    /// The chosen depth τ' (for PU data the solver ranks at π + (1 − π)·τ').
    pub rank_tau: f64,
    /// The chosen R.
    pub reg: f64,
    /// `"validation"`: the best held-back TPR; `"non_degenerate"`: too few held-back rows, the
    /// shallowest depth that is not degenerate.
    pub criterion: &'static str,
    pub validation_positives: usize,
    pub validation_negatives: usize,
    /// Every fit tried: the depths, shallowest first, then the other R values at the chosen
    /// depth, largest first.
    pub tried: Vec<RankTried>,
}

/// Chooses the ranking depth and R for FPR level `tau` on the (scaled) training rows `data`,
/// each only if `axes` says so; the others are `params`' own (its `tau` is then the depth
/// τ', before the PU mapping). When `data` has no negatives its unlabeled rows stand in for
/// them, over `prior_interval` (without one there is nothing to rank against:
/// [`TfplError::NoNegatives`]). `previous` warm-starts the first fit. The search stops at the
/// first cancelled fit and chooses among the fits made so far.
#[allow(clippy::too_many_arguments)]
pub fn choose_rank_tau(
    params: &TfplValidParams,
    tau: f64,
    data: &Dataset,
    prior_interval: Option<(f64, f64)>,
    previous: Option<&TfplModel>,
    seed: u64,
    axes: SearchAxes,
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
    // Fits (depth, R) warm-started from `warm`, and scores it: a scorer that gains beats one
    // that does not (key −1); then the held-back TPR decides.
    let try_fit = |depth: f64, reg: f64, warm: Option<&TfplModel>| {
        let solver_depth = match pu_prior {
            Some((lo, hi)) => pu_rank_tau(depth, lo, hi),
            None => depth,
        };
        let solver = TfplParams {
            tau: solver_depth,
            reg,
            ..(**params).clone()
        }
        .check()?;
        let fit = solver.fit_with(warm, &train, cancel)?;
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
                None => mean_tpr_up_to(&sp, &sn, tau),
            }
        });
        let key = if degenerate {
            -1.0
        } else {
            validation_tpr.unwrap_or(0.0)
        };
        let tried = RankTried {
            rank_tau: depth,
            reg,
            validation_tpr,
            degenerate,
        };
        Ok::<_, TfplError>((fit, tried, key))
    };
    // The best fit so far: its depth, R, key, and the fit (the R search's first warm start).
    struct Best {
        depth: f64,
        reg: f64,
        key: f64,
        fit: TfplModel,
    }
    let better = |key: f64, best: &Option<Best>| match best {
        None => true,
        Some(b) => key > b.key + 1e-12,
    };
    let depths = if axes.depth {
        rank_grid(tau)
    } else {
        vec![params.tau]
    };
    // R is compared on held-back rows only: without them the given R stays. Without a
    // previous fit every R of the grid is tried; with one (the daemon's later searches) R
    // walks from the start one decade at a time in each direction while the criterion
    // improves: retrains move R little, and the walk costs 2–3 fits instead of 7.
    let walk = previous.is_some();
    let directions: Vec<Vec<f64>> = if walk {
        vec![
            REG_GRID
                .into_iter()
                .filter(|&reg| reg > params.reg)
                .rev()
                .collect(),
            REG_GRID
                .into_iter()
                .filter(|&reg| reg < params.reg)
                .collect(),
        ]
    } else {
        vec![REG_GRID
            .into_iter()
            .filter(|&reg| reg != params.reg)
            .collect()]
    };
    let search_reg = axes.reg && validated;
    let most = depths.len()
        + if search_reg {
            directions.iter().map(Vec::len).sum()
        } else {
            0
        };
    let report = |done: usize| params.observer.report(FitStep::Search { done, most });
    let mut tried = Vec::new();
    let mut best: Option<Best> = None;
    let mut warm = previous.cloned();
    for depth in depths {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        let (fit, attempt, key) = try_fit(depth, params.reg, warm.as_ref())?;
        let gains = !attempt.degenerate;
        tried.push(attempt);
        report(tried.len());
        if better(key, &best) {
            best = Some(Best {
                depth,
                reg: params.reg,
                key,
                fit: fit.clone(),
            });
        }
        warm = Some(fit);
        if !validated && gains {
            break;
        }
    }
    let depth = best.as_ref().map(|b| b.depth);
    if let (true, Some(depth)) = (search_reg, depth) {
        for direction in directions {
            let mut warm = best.as_ref().map(|b| b.fit.clone());
            for reg in direction {
                if cancel.load(Ordering::Relaxed) {
                    break;
                }
                let (fit, attempt, key) = try_fit(depth, reg, warm.as_ref())?;
                tried.push(attempt);
                report(tried.len());
                let improved = better(key, &best);
                if improved {
                    best = Some(Best {
                        depth,
                        reg,
                        key,
                        fit: fit.clone(),
                    });
                }
                warm = Some(fit);
                if walk && !improved {
                    break;
                }
            }
        }
    }
    Ok(RankChoice {
        rank_tau: best.as_ref().map_or(params.tau, |b| b.depth),
        reg: best.as_ref().map_or(params.reg, |b| b.reg),
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

/// The mean, over the empirical FPR levels 0, 1/n, …, ⌊τn⌋/n of the n `negative` scores, of
/// the share of `positive` scores above the threshold at that level (the (j + 1)-th largest
/// negative): the partial AUC over FPR ∈ [0, τ], normalised to [0, 1]. It counts the TPR at
/// every FPR a certificate may leave below τ (an umbrella threshold on a few hundred
/// calibration negatives sits near 0.7τ), not only at τ, and it averages ⌊τn⌋ + 1 thresholds
/// instead of resting on one order statistic; at the last level it is 1 − [`crate::learn::tune::tau_rank_loss`].
fn mean_tpr_up_to(positive: &[f64], negative: &[f64], tau: f64) -> f64 {
    if positive.is_empty() || negative.is_empty() {
        return 0.0;
    }
    let descending = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| b.total_cmp(a));
        v
    };
    let (positive, negative) = (descending(positive), descending(negative));
    let levels = ((tau * negative.len() as f64).floor() as usize + 1).min(negative.len());
    let (mut above, mut sum) = (0, 0.0);
    // The thresholds fall with the level, so the positives above them only grow.
    for &t in &negative[..levels] {
        while above < positive.len() && positive[above] > t {
            above += 1;
        }
        sum += above as f64 / positive.len() as f64;
    }
    sum / levels as f64
}

/// The largest share of `positive` scores above a threshold whose PU-estimated FPR,
/// (flag rate of `unlabeled` − π·TPR)/(1 − π), is ≤ `tau`; thresholds range over the scores.
/// A NaN score is above no threshold: it counts in its sample's size, never as flagged.
fn pu_tpr_at_fpr(positive: &[f64], unlabeled: &[f64], tau: f64, prior: f64) -> f64 {
    // NaN is left out of the walk: it never equals itself, so its tie group below would never
    // advance (a loop without end, without a cancel check, on a fit gone NaN).
    let mut all: Vec<(f64, bool)> = positive
        .iter()
        .map(|&s| (s, true))
        .chain(unlabeled.iter().map(|&s| (s, false)))
        .filter(|(s, _)| !s.is_nan())
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

    const DEPTH: SearchAxes = SearchAxes {
        depth: true,
        reg: false,
    };

    #[test]
    fn the_criterion_averages_the_tpr_over_the_fprs_up_to_tau() {
        // 20 negatives 1..=20; τ = 0.1 gives levels 0, 1/20, 2/20 with thresholds 20, 19, 18.
        let negative: Vec<f64> = (1..=20).map(f64::from).collect();
        // Positives: 2 above 20, 1 at 19.5, 1 at 18.5, 6 below 18.
        let positive = [25.0, 21.0, 19.5, 18.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mean = (0.2 + 0.3 + 0.4) / 3.0;
        assert!((mean_tpr_up_to(&positive, &negative, 0.1) - mean).abs() < 1e-15);
        // The last level is the τ-rank criterion.
        let loss = crate::learn::tune::tau_rank_loss(&positive, &negative, 0.1).unwrap();
        assert!((1.0 - loss - 0.4).abs() < 1e-15);
        // τ below 1/n: the top negative alone; a tie with it is not flagged.
        assert_eq!(mean_tpr_up_to(&[20.0, 30.0], &negative, 0.01), 0.5);
        assert_eq!(mean_tpr_up_to(&[], &negative, 0.1), 0.0);
    }

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

    /// A NaN score (a fit gone NaN) stalled the tie walk forever. It is flagged by no
    /// threshold but counts in its sample: positives [NaN, 2], unlabeled [NaN, 1, 0] at
    /// π = 0.5 flag one positive of two at FPR est (0 − 0.25)/0.5 ≤ τ; all NaN flags nothing.
    #[test]
    fn the_pu_criterion_ends_on_nan_scores_and_flags_none_of_them() {
        let nan = f64::NAN;
        assert_eq!(pu_tpr_at_fpr(&[nan, 2.0], &[nan, 1.0, 0.0], 0.05, 0.5), 0.5);
        assert_eq!(pu_tpr_at_fpr(&[nan; 3], &[nan; 4], 0.05, 0.5), 0.0);
        assert_eq!(pu_tpr_at_fpr(&[-nan, 2.0], &[1.0], 0.05, 0.5), 0.5);
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
        let choice = choose_rank_tau(&params, 0.05, &data, None, None, 1, DEPTH, &cancel).unwrap();
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

    /// With `reg` searched too, every other R of the grid is fitted at the chosen depth, and
    /// `neyman train` shows the search through the observer: one report per fit, counting up
    /// to the fits made, each against the most the search could make, and the solver's
    /// iterations with its gap in between.
    #[test]
    fn the_observer_sees_each_fit_of_the_search_and_the_solver_steps() {
        use crate::learn::observe::{FitStep, Observer};
        use std::sync::{Arc, Mutex};
        let data = overlapping(400, 7);
        let steps = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&steps);
        let mut params = TfplParams::new(0.05, REG_START);
        params.observer = Observer::new(move |step| seen.lock().unwrap().push(step));
        let params = params.check().unwrap();
        let cancel = AtomicBool::new(false);
        let both = SearchAxes {
            depth: true,
            reg: true,
        };
        let choice = choose_rank_tau(&params, 0.05, &data, None, None, 1, both, &cancel).unwrap();
        let steps = steps.lock().unwrap();
        let most = rank_grid(0.05).len() + REG_GRID.len() - 1;
        let searched: Vec<FitStep> = steps
            .iter()
            .filter(|s| matches!(s, FitStep::Search { .. }))
            .copied()
            .collect();
        let expected: Vec<FitStep> = (1..=choice.tried.len())
            .map(|done| FitStep::Search { done, most })
            .collect();
        assert_eq!(searched, expected);
        let solver_steps = steps
            .iter()
            .filter(|s| matches!(s, FitStep::Solver { gap, tol, .. } if gap.is_finite() && *tol == 1e-6))
            .count();
        assert!(
            solver_steps >= choice.tried.len(),
            "{solver_steps} solver reports"
        );
    }

    /// the choice is the best held-back TPR of all the fits (the start R on ties).
    #[test]
    fn an_auto_r_is_chosen_after_the_depth() {
        let data = overlapping(400, 7);
        let params = TfplParams::new(0.05, REG_START).check().unwrap();
        let cancel = AtomicBool::new(false);
        let both = SearchAxes {
            depth: true,
            reg: true,
        };
        let choice = choose_rank_tau(&params, 0.05, &data, None, None, 1, both, &cancel).unwrap();
        let depths = rank_grid(0.05).len();
        assert_eq!(choice.tried.len(), depths + REG_GRID.len() - 1);
        assert!(choice.tried[..depths].iter().all(|t| t.reg == REG_START));
        let by_reg = &choice.tried[depths..];
        assert!(by_reg.iter().all(|t| t.rank_tau == choice.rank_tau));
        let regs: Vec<f64> = by_reg.iter().map(|t| t.reg).collect();
        let others: Vec<f64> = REG_GRID.into_iter().filter(|&r| r != REG_START).collect();
        assert_eq!(regs, others, "largest first, the start R not refitted");
        let top = choice
            .tried
            .iter()
            .filter(|t| !t.degenerate)
            .filter_map(|t| t.validation_tpr)
            .fold(0.0, f64::max);
        let chosen = choice
            .tried
            .iter()
            .find(|t| (t.rank_tau, t.reg) == (choice.rank_tau, choice.reg))
            .unwrap();
        assert_eq!(chosen.validation_tpr, Some(top), "{choice:?}");
        // The first fit with the best TPR wins: the start R, else the largest R.
        let first = choice
            .tried
            .iter()
            .find(|t| !t.degenerate && t.validation_tpr == Some(top))
            .unwrap();
        assert_eq!((first.rank_tau, first.reg), (choice.rank_tau, choice.reg));

        // With a previous fit R walks from the start a decade at a time each way, and stops
        // in a direction at its first fit that does not improve.
        let previous = params.fit(&data, &cancel).unwrap();
        let walked = choose_rank_tau(
            &params,
            0.05,
            &data,
            None,
            Some(&previous),
            1,
            both,
            &cancel,
        )
        .unwrap();
        let by_reg = &walked.tried[depths..];
        assert!(by_reg.iter().all(|t| t.rank_tau == walked.rank_tau));
        assert!(
            by_reg.len() >= 2 && by_reg.len() < REG_GRID.len() - 1,
            "{walked:?}"
        );
        assert_eq!(by_reg[0].reg, 1e-2, "one decade above the start");
        let down = by_reg.iter().position(|t| t.reg < REG_START).unwrap();
        assert_eq!(by_reg[down].reg, 1e-4, "one decade below the start");
        let best = walked
            .tried
            .iter()
            .filter_map(|t| t.validation_tpr)
            .fold(0.0, f64::max);
        let chosen = walked
            .tried
            .iter()
            .find(|t| (t.rank_tau, t.reg) == (walked.rank_tau, walked.reg))
            .unwrap();
        assert_eq!(chosen.validation_tpr, Some(best));

        // Only R: the depth stays the given one.
        let fixed = TfplParams::new(0.4, 1e-2).check().unwrap();
        let only_reg = SearchAxes {
            depth: false,
            reg: true,
        };
        let choice =
            choose_rank_tau(&fixed, 0.05, &data, None, None, 1, only_reg, &cancel).unwrap();
        assert_eq!(choice.rank_tau, 0.4);
        assert_eq!(choice.tried.len(), REG_GRID.len());
        assert!(choice.tried.iter().all(|t| t.rank_tau == 0.4));
        assert!(REG_GRID.contains(&choice.reg));
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
        let choice = choose_rank_tau(&params, 0.05, &data, None, None, 1, DEPTH, &cancel).unwrap();
        assert_eq!(choice.rank_tau, 0.05);
        assert!(choice.tried.iter().all(|t| t.validation_tpr == Some(1.0)));
    }

    #[test]
    fn few_rows_take_the_shallowest_depth_that_gains() {
        let data = overlapping(12, 5);
        let params = TfplParams::new(0.05, 1e-2).check().unwrap();
        let cancel = AtomicBool::new(false);
        let choice = choose_rank_tau(&params, 0.05, &data, None, None, 1, DEPTH, &cancel).unwrap();
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
        let choice =
            choose_rank_tau(&params, 0.05, &data, Some(prior), None, 2, DEPTH, &cancel).unwrap();
        assert_eq!(choice.criterion, "validation");
        assert!(choice.validation_negatives > choice.validation_positives);
        assert!(rank_grid(0.05).contains(&choice.rank_tau));
        assert!(choice.tried.iter().all(|t| t.validation_tpr.is_some()));
    }
}
