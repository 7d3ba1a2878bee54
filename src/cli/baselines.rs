//! The τ-FPL paper's linear-SVM baselines for `eval --tau ... --compare` (Table 3), run on the
//! same splits and with the same feature scaling as tfpl (`--scale`, then divided by the
//! largest training row norm), using [`crate::learn::linsvm`]:
//!
//! - **bs-svm**: a linear SVM (C₊ = C₋ = C) whose threshold is shifted on its own *training*
//!   data: the (⌊τ·n⌋+1)-th largest training-negative score, so the training FPR is ≤ τ. C is
//!   chosen per τ from [`C_GRID`] by `--cv`-fold stratified CV of the validation NP-score, each
//!   fold's model thresholded the same way on its fold-training negatives. Training scores are
//!   optimistic, so its test FPR overshoots τ — the paper's point about this baseline.
//! - **cs-svm-oob**: a cost-sensitive linear SVM (C₊ = C·r, C₋ = C) thresholded out of
//!   bootstrap exactly as tfpl's `oob` ([`crate::learn::calibrate::oob_calibrate`]: `--rounds`,
//!   `--oob-rule`, round scorers and thresholds averaged). C ∈ [`C_GRID`] and r ∈
//!   [`COST_RATIO_GRID`] are chosen per τ by CV of the validation NP-score of the plain
//!   CS-SVM decision (score > 0), which is how the paper tunes CS-SVM; the OOB threshold then
//!   replaces 0. (Running OOB inside every fold would cost `--rounds` times more.)
//!
//! The SVM fits do not depend on τ, so one CV serves every τ; ties go to the earlier grid
//! entry (smaller C, then the ratio closer to 1). With `--pu-labeled-fraction` the unlabeled
//! training rows count as negatives.

use std::sync::atomic::AtomicBool;

use super::np_cells::{Cell, Method, Plan, TestPart};
use super::CliError;
use crate::data::{Dataset, Label, Rows};
use crate::learn::calibrate::oob_calibrate;
use crate::learn::linsvm::{LinearSvm, LinearSvmError, LinearSvmParams};
use crate::learn::metrics::np_score;
use crate::learn::threshold::{quantile_threshold, ThresholdMethod};
use crate::learn::tune::stratified_folds;

/// C of both baselines: five decades, wide enough for rows scaled into the unit ball (small
/// feature values need a large C) without reaching where dual coordinate descent stalls.
pub const C_GRID: [f64; 5] = [1e-2, 1e-1, 1.0, 10.0, 100.0];

/// C₊/C₋ of cs-svm-oob: 1 (plain SVM) down to 1/10, making false positives up to ten times
/// dearer than misses — the direction a low-FPR target needs.
pub const COST_RATIO_GRID: [f64; 4] = [1.0, 0.5, 0.25, 0.1];

/// Mixed into the split seed for the SVM folds (distinct from tfpl's).
const SVM_CV_SALT: u64 = 0x5e_5ca1;

impl From<LinearSvmError> for CliError {
    fn from(e: LinearSvmError) -> CliError {
        match e {
            LinearSvmError::Param(_) => CliError::Usage(e.to_string()),
            other => CliError::Training(other.to_string()),
        }
    }
}

/// Fits a linear SVM with costs (C·ratio, C) on `data` (positives against every other row).
fn fit(
    data: &Dataset,
    c: f64,
    ratio: f64,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<LinearSvm, CliError> {
    let mut params = LinearSvmParams::new(c).with_costs(c * ratio, c);
    params.seed = seed;
    let positive: Vec<bool> = data.labels.iter().map(|&l| l == Label::Positive).collect();
    Ok(params.check()?.fit(&data.rows, &positive, cancel)?)
}

fn scores(model: &LinearSvm, rows: &Rows) -> Vec<f64> {
    let mut out = vec![0.0; rows.n_rows()];
    model.decision_batch(rows, &mut out);
    out
}

/// The scores of `data`'s negatives under `model`.
fn negative_scores(model: &LinearSvm, data: &Dataset) -> Vec<f64> {
    scores(model, &data.rows.select(&data.indices_of(Label::Negative)))
}

/// NP-score at τ of the rule score > threshold against `truth`.
fn np_at(scores: &[f64], truth: &[bool], threshold: f64, tau: f64) -> f64 {
    let (mut tp, mut p, mut fp, mut n) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (&s, &positive) in scores.iter().zip(truth) {
        let flagged = f64::from(u8::from(s > threshold));
        if positive {
            p += 1.0;
            tp += flagged;
        } else {
            n += 1.0;
            fp += flagged;
        }
    }
    np_score(fp / n.max(1.0), tp / p.max(1.0), tau)
}

/// The best grid entry per τ by mean validation NP-score over stratified folds. `grid` is
/// (C, ratio) in tie-break order; `threshold(model, fold_train, τ)` is a fold model's threshold.
fn choose(
    plan: &Plan,
    data: &Dataset,
    grid: &[(f64, f64)],
    threshold: &dyn Fn(&LinearSvm, &Dataset, f64) -> Result<f64, CliError>,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<Vec<(f64, f64)>, CliError> {
    let folds = plan.folds;
    let (positives, negatives) = (data.count(Label::Positive), data.count(Label::Negative));
    if positives < folds || negatives < folds {
        return Err(CliError::Usage(format!(
            "{folds}-fold cross-validation needs at least {folds} samples of each class; the \
             training part has {positives} positives and {negatives} negatives"
        )));
    }
    let fold_of = stratified_folds(&data.labels, folds, seed ^ SVM_CV_SALT);
    // total[g][t]: summed validation NP-score of grid entry g at τ_t.
    let mut total = vec![vec![0.0; plan.taus.len()]; grid.len()];
    for f in 0..folds {
        let train: Vec<usize> = (0..data.len()).filter(|&i| fold_of[i] != f).collect();
        let val: Vec<usize> = (0..data.len()).filter(|&i| fold_of[i] == f).collect();
        let (train, val) = (data.select(&train), data.select(&val));
        let truth: Vec<bool> = val.labels.iter().map(|&l| l == Label::Positive).collect();
        for (g, &(c, ratio)) in grid.iter().enumerate() {
            let model = fit(&train, c, ratio, seed, cancel)?;
            let val_scores = scores(&model, &val.rows);
            for (t, &tau) in plan.taus.iter().enumerate() {
                let b = threshold(&model, &train, tau)?;
                total[g][t] += np_at(&val_scores, &truth, b, tau);
            }
        }
    }
    Ok((0..plan.taus.len())
        .map(|t| {
            let mut best = 0;
            for g in 1..grid.len() {
                if total[g][t] < total[best][t] - 1e-12 {
                    best = g;
                }
            }
            grid[best]
        })
        .collect())
}

/// The (⌊τ·n⌋+1)-th largest training-negative score: training FPR ≤ τ.
fn training_quantile(model: &LinearSvm, train: &Dataset, tau: f64) -> Result<f64, CliError> {
    quantile_threshold(&negative_scores(model, train), tau)
        .map_err(|e| CliError::Threshold(e.to_string()))
}

/// A baseline on one split: a cell per τ. `data` is the scaled training part with labels
/// positive/negative; `test_rows` the scaled test rows.
pub(super) fn svm_cells(
    plan: &Plan,
    method: Method,
    data: &Dataset,
    test_rows: &Rows,
    test: &TestPart,
    seed: u64,
    cancel: &AtomicBool,
) -> Result<Vec<Cell>, CliError> {
    let mut cells = Vec::with_capacity(plan.taus.len());
    match method {
        Method::BsSvm => {
            let grid: Vec<(f64, f64)> = C_GRID.iter().map(|&c| (c, 1.0)).collect();
            let chosen = choose(plan, data, &grid, &training_quantile, seed, cancel)?;
            // One fit per distinct C, shared by the τ that chose it.
            let mut fits: Vec<(f64, LinearSvm)> = Vec::new();
            for (&tau, &(c, _)) in plan.taus.iter().zip(&chosen) {
                let model = match fits.iter().find(|f| f.0 == c) {
                    Some(f) => f.1.clone(),
                    None => {
                        let m = fit(data, c, 1.0, seed, cancel)?;
                        fits.push((c, m.clone()));
                        m
                    }
                };
                let b = training_quantile(&model, data, tau)?;
                let mut cell = test.cell(&scores(&model, test_rows), tau, b, "train-quantile", c);
                cell.converged = model.report.converged;
                cells.push(cell);
            }
        }
        Method::CsSvmOob => {
            let grid: Vec<(f64, f64)> = C_GRID
                .iter()
                .flat_map(|&c| COST_RATIO_GRID.iter().map(move |&r| (c, r)))
                .collect();
            let at_zero = |_: &LinearSvm, _: &Dataset, _: f64| Ok(0.0);
            let chosen = choose(plan, data, &grid, &at_zero, seed, cancel)?;
            for (&tau, &(c, ratio)) in plan.taus.iter().zip(&chosen) {
                let mut spec = plan.spec(tau, seed);
                spec.method = Some(ThresholdMethod::Oob);
                let (models, result) = oob_calibrate(
                    &spec,
                    data,
                    |in_bag| fit(in_bag, c, ratio, seed, cancel),
                    scores,
                )?;
                let converged = models.iter().all(|m| m.report.converged);
                let model = average(models);
                let mut cell =
                    test.cell(&scores(&model, test_rows), tau, result.threshold, "oob", c);
                cell.cost_ratio = Some(ratio);
                cell.converged = converged;
                cells.push(cell);
            }
        }
        Method::Tfpl | Method::Usmo => {
            return Err(CliError::Usage(format!(
                "{} is not a linear-SVM baseline",
                method.name()
            )))
        }
    }
    Ok(cells)
}

/// The mean of the round models' (w, bias): mean_r(w_rᵀx + b_r) = w̄ᵀx + b̄, paired with the
/// mean of the round thresholds. The report is the last round's.
fn average(models: Vec<LinearSvm>) -> LinearSvm {
    let rounds = models.len().max(1) as f64;
    let mut w = vec![0.0; models.first().map_or(0, |m| m.w.len())];
    let mut bias = 0.0;
    for m in &models {
        w.iter_mut().zip(&m.w).for_each(|(a, b)| *a += b / rounds);
        bias += m.bias / rounds;
    }
    let report = models.last().map(|m| m.report.clone());
    LinearSvm {
        w,
        bias,
        alpha: Vec::new(),
        report: report.unwrap_or(crate::learn::linsvm::LinearSvmReport {
            epochs: 0,
            converged: false,
            cancelled: false,
            dual_objective: f64::NAN,
            primal_objective: f64::NAN,
            train_seconds: 0.0,
        }),
    }
}
