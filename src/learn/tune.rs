//! Hyper-parameter choice by stratified cross-validation, as in the τ-FPL paper's experiments
//! (5-fold CV on a grid, the grid extended when the optimum is on its boundary; docs/tau-fpl.md
//! §5.1).
//!
//! τ-FPL's R is chosen by the paper's criterion (3): on each validation fold, the fraction of
//! positives scored at or below the (⌊τ·n_val⌋ + 1)-th largest validation-negative score
//! ([`tau_rank_loss`]; lower is better), averaged over the folds. It measures the ranking at τ
//! and needs no threshold, which is why the paper uses it for R and leaves the threshold to a
//! separate calibration step.

use std::sync::atomic::AtomicBool;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::data::{Dataset, Label, Rows};
use crate::learn::tfpl::{TfplError, TfplModel, TfplParams};
use crate::learn::threshold::{quantile_threshold, ThresholdError};

/// The initial R grid, 10 down to 1e-6 in decades, searched from large R (fast, well
/// conditioned) to small R so each fit warm-starts from the previous one.
pub const REG_GRID: [f64; 8] = [10.0, 1.0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6];

/// At most this many one-decade extensions of [`REG_GRID`] when the best R is at an end.
pub const MAX_EXTENSIONS: usize = 2;

/// Criteria closer than this count as tied (they are means of fold fractions, so a real
/// difference is at least ~1/(folds·n_val_pos)); ties go to the larger R.
const TIE_EPS: f64 = 1e-12;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Tfpl(#[from] TfplError),
    #[error(transparent)]
    Threshold(#[from] ThresholdError),
    #[error(
        "{folds}-fold cross-validation needs at least {folds} samples of each class and at \
         least 2 folds; the training part has {positives} positives and {negatives} negatives"
    )]
    Folds {
        folds: usize,
        positives: usize,
        negatives: usize,
    },
}

/// Fold numbers 0..folds for each sample, stratified by label: each label's indices are
/// shuffled by `seed` (ChaCha8Rng) and dealt round-robin, so fold sizes per class differ by at
/// most one.
pub fn stratified_folds(labels: &[Label], folds: usize, seed: u64) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut fold_of = vec![0; labels.len()];
    for label in [Label::Positive, Label::Negative, Label::Unlabeled] {
        let mut idx: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] == label).collect();
        idx.shuffle(&mut rng);
        for (k, &i) in idx.iter().enumerate() {
            fold_of[i] = k % folds.max(1);
        }
    }
    fold_of
}

/// Criterion (3) of the τ-FPL paper: the fraction of `positive_scores` at or below the
/// (⌊τ·n⌋ + 1)-th largest of the n `negative_scores` (the threshold that keeps the empirical
/// FPR ≤ τ). 0 is a perfect ranking at τ; lower is better.
pub fn tau_rank_loss(
    positive_scores: &[f64],
    negative_scores: &[f64],
    tau: f64,
) -> Result<f64, ThresholdError> {
    if positive_scores.is_empty() {
        return Err(ThresholdError::Empty("positive"));
    }
    let t = quantile_threshold(negative_scores, tau)?;
    let below = positive_scores.iter().filter(|&&s| s <= t).count();
    Ok(below as f64 / positive_scores.len() as f64)
}

/// The outcome of [`choose_reg`].
#[derive(Debug, Clone, PartialEq)]
pub struct RegChoice {
    /// The chosen R.
    pub reg: f64,
    /// Its mean validation criterion (3).
    pub criterion: f64,
    /// Every (R, mean criterion) tried, in the order tried.
    pub tried: Vec<(f64, f64)>,
    /// Solver iterations over all folds, per R tried (same order): what the search cost.
    pub iterations: Vec<u64>,
    /// Whether every fit converged.
    pub converged: bool,
    /// The first fold's fit at the chosen R: a warm start for fits at that R on (nearly) the
    /// same rows.
    pub warm_start: TfplModel,
}

/// One cross-validation fold: its training part, validation rows by class, and the fits at
/// the smallest and largest R so far (warm starts for the next R in either direction).
struct Fold {
    train: Dataset,
    val_pos: Rows,
    val_neg: Rows,
    smallest: Option<TfplModel>,
    largest: Option<TfplModel>,
}

/// Chooses τ-FPL's R by `folds`-fold cross-validation on `data` (positives against negatives;
/// unlabeled rows are ignored, as in training), minimising the mean over folds of
/// [`tau_rank_loss`] at `eval_tau`. `params` gives everything but R (its rank τ, kernel and
/// tolerances). The grid is [`REG_GRID`]; while the best R is the smallest or largest tried and
/// strictly better than its neighbour, the grid grows by one decade in that direction, at most
/// [`MAX_EXTENSIONS`] times. Ties go to the larger R (the simpler model). A tie at the boundary
/// does not extend: the criterion is then flat there, and with ‖x‖ ≤ 1 large R only rescales
/// the same limit solution, at a higher cost (measurements in docs/tau-fpl.md §5.1). Fold `f`'s
/// fit at each R warm-starts from its fit at the neighbouring R
/// ([`crate::learn::tfpl::TfplValidParams::fit_with`]).
pub fn choose_reg(
    params: &TfplParams,
    data: &Dataset,
    eval_tau: f64,
    folds: usize,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<RegChoice, TuneError> {
    let (positives, negatives) = (data.count(Label::Positive), data.count(Label::Negative));
    if folds < 2 || positives < folds || negatives < folds {
        return Err(TuneError::Folds {
            folds,
            positives,
            negatives,
        });
    }
    let fold_of = stratified_folds(&data.labels, folds, seed);
    let mut parts: Vec<Fold> = (0..folds)
        .map(|f| {
            let rows_where = |keep: &dyn Fn(usize) -> bool| -> Vec<usize> {
                (0..data.len()).filter(|&i| keep(i)).collect()
            };
            let train = rows_where(&|i| fold_of[i] != f);
            let val_pos = rows_where(&|i| fold_of[i] == f && data.labels[i] == Label::Positive);
            let val_neg = rows_where(&|i| fold_of[i] == f && data.labels[i] == Label::Negative);
            Fold {
                train: data.select(&train),
                val_pos: data.rows.select(&val_pos),
                val_neg: data.rows.select(&val_neg),
                smallest: None,
                largest: None,
            }
        })
        .collect();

    let mut converged = true;
    // The first fold's fit per R tried, in the order tried.
    let mut first_fold_fits: Vec<TfplModel> = Vec::new();
    let mut iterations_per_reg: Vec<u64> = Vec::new();
    let mut evaluate = |parts: &mut [Fold], reg: f64, upward: bool| -> Result<f64, TuneError> {
        let valid = TfplParams {
            reg,
            ..params.clone()
        }
        .check()?;
        let mut total = 0.0;
        let mut iterations = 0;
        for (f, fold) in parts.iter_mut().enumerate() {
            let warm = if upward {
                fold.largest.as_ref()
            } else {
                fold.smallest.as_ref()
            };
            let fit = valid.fit_with(warm, &fold.train, cancel)?;
            converged &= fit.report.converged;
            iterations += fit.report.iterations;
            let score = |rows: &Rows| {
                let mut out = vec![0.0; rows.n_rows()];
                fit.expansion.decision_batch(rows, &mut out);
                out
            };
            total += tau_rank_loss(&score(&fold.val_pos), &score(&fold.val_neg), eval_tau)?;
            if f == 0 {
                first_fold_fits.push(fit.clone());
            }
            if fold.largest.is_none() || upward {
                fold.largest = Some(fit.clone());
            }
            if !upward || fold.smallest.is_none() {
                fold.smallest = Some(fit);
            }
        }
        iterations_per_reg.push(iterations);
        Ok(total / parts.len() as f64)
    };

    let mut tried = Vec::with_capacity(REG_GRID.len() + MAX_EXTENSIONS);
    for reg in REG_GRID {
        tried.push((reg, evaluate(&mut parts, reg, false)?));
    }
    let best = |tried: &[(f64, f64)]| {
        tried
            .iter()
            .copied()
            .fold((f64::NAN, f64::INFINITY), |b, t| {
                let better = t.1 < b.1 - TIE_EPS;
                let tie_larger = (t.1 - b.1).abs() <= TIE_EPS && t.0 > b.0;
                if better || tie_larger {
                    t
                } else {
                    b
                }
            })
    };
    for _ in 0..MAX_EXTENSIONS {
        let (reg, criterion) = best(&tried);
        let mut by_reg = tried.clone();
        by_reg.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let last = by_reg.len() - 1;
        // Extend only past a boundary that is strictly better than its neighbour: where the
        // criterion is flat up to the boundary, further decades only rescale the same solution.
        let next = if reg == by_reg[0].0 && criterion < by_reg[1].1 - TIE_EPS {
            (reg / 10.0, false)
        } else if reg == by_reg[last].0 && criterion < by_reg[last - 1].1 - TIE_EPS {
            (reg * 10.0, true)
        } else {
            break;
        };
        tried.push((next.0, evaluate(&mut parts, next.0, next.1)?));
    }
    let (reg, criterion) = best(&tried);
    let position = tried.iter().position(|t| t.0 == reg).unwrap_or(0);
    Ok(RegChoice {
        reg,
        criterion,
        tried,
        iterations: iterations_per_reg,
        converged,
        warm_start: first_fold_fits.swap_remove(position),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_loss_counts_positives_at_or_below_the_kth_largest_negative() {
        // 10 negatives 0..9; τ = 0.1 → k = 2 → the 2nd largest negative, 8.
        let neg: Vec<f64> = (0..10).map(f64::from).collect();
        let pos = [8.0, 8.5, 9.5, 3.0];
        // 8.0 (tied, counts as below) and 3.0 are at or below 8.
        assert_eq!(tau_rank_loss(&pos, &neg, 0.1), Ok(0.5));
        // τ = 0.29, n = 10 → k = 3 → 7: only 3.0 is below.
        assert_eq!(tau_rank_loss(&pos, &neg, 0.29), Ok(0.25));
        assert_eq!(
            tau_rank_loss(&[], &neg, 0.1),
            Err(ThresholdError::Empty("positive"))
        );
    }

    /// Positives around (0.5, 0), negatives around (−0.5, 0): separable, so every R ranks
    /// every validation positive above every negative.
    fn separable(m: usize, n: usize) -> Dataset {
        let mut rows = Vec::new();
        let mut labels = Vec::new();
        for i in 0..m + n {
            let jitter = ((i * 37 % 11) as f64 - 5.0) / 50.0;
            let x = if i < m { 0.5 } else { -0.5 };
            rows.extend_from_slice(&[x + jitter / 2.0, jitter]);
            labels.push(if i < m {
                Label::Positive
            } else {
                Label::Negative
            });
        }
        Dataset {
            rows: Rows::dense(
                ndarray::Array2::from_shape_vec((m + n, 2), rows).expect("(m+n)×2 values"),
            ),
            labels,
            ids: (0..m + n).map(|i| format!("r{i}")).collect(),
        }
    }

    #[test]
    fn a_flat_criterion_picks_the_largest_r_without_extending() {
        let data = separable(20, 40);
        let params = TfplParams::new(0.1, 1.0);
        let choice = choose_reg(&params, &data, 0.1, 5, 3, &AtomicBool::new(false))
            .expect("a CV on separable data");
        // Every R of the grid was tried, largest first, and scored perfectly.
        let regs: Vec<f64> = choice.tried.iter().map(|t| t.0).collect();
        assert_eq!(regs, REG_GRID.to_vec());
        assert!(
            choice.tried.iter().all(|t| t.1 == 0.0),
            "{:?}",
            choice.tried
        );
        // All tied: the largest R, and no extension past a tie at the boundary.
        assert_eq!((choice.reg, choice.criterion), (10.0, 0.0));
        assert_eq!(choice.warm_start.reg, 10.0);
        assert!(choice.converged);
    }

    #[test]
    fn too_few_samples_for_the_folds_is_an_error() {
        let data = separable(3, 40);
        let params = TfplParams::new(0.1, 1.0);
        assert_eq!(
            choose_reg(&params, &data, 0.1, 5, 3, &AtomicBool::new(false)),
            Err(TuneError::Folds {
                folds: 5,
                positives: 3,
                negatives: 40
            })
        );
    }

    #[test]
    fn folds_are_stratified_and_balanced() {
        let labels: Vec<Label> = (0..23)
            .map(|i| {
                if i % 3 == 0 {
                    Label::Positive
                } else {
                    Label::Negative
                }
            })
            .collect();
        let fold_of = stratified_folds(&labels, 5, 7);
        for label in [Label::Positive, Label::Negative] {
            let mut sizes = [0usize; 5];
            for (f, l) in fold_of.iter().zip(&labels) {
                if *l == label {
                    sizes[*f] += 1;
                }
            }
            let (lo, hi) = (sizes.iter().min(), sizes.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{sizes:?}");
        }
        assert_eq!(fold_of, stratified_folds(&labels, 5, 7));
    }
}
