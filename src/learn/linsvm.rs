//! Cost-sensitive linear SVM: the BS-SVM and CS-SVM(-OOB) baselines of the τ-FPL paper.
//!
//! With labels y_i ∈ {+1, −1} (`positive[i]`), per-class costs C₊, C₋ and C_i the cost of row
//! i's class, the primal is
//!
//! ```text
//!   min_{w,b}  ½‖w‖² + ½b² + Σ_i C_i ξ_i,   ξ_i ≥ 1 − y_i (wᵀx_i + b),  ξ_i ≥ 0   (hinge loss)
//! ```
//!
//! The bias is *regularised*: it is the weight of a constant feature 1 appended to every row
//! (LIBLINEAR's `-B 1`). That removes the equality constraint Σ α_i y_i = 0 from the dual, so
//! every dual coordinate can move on its own, which is what makes coordinate descent exact and
//! cheap; the price is a small pull of b towards 0, harmless on standardised features. With
//! x̃_i = (x_i, 1) and w̃ = (w, b) the dual, in minimisation form, is
//!
//! ```text
//!   min_α  f(α) = ½ αᵀQα − Σ_i α_i,   0 ≤ α_i ≤ C_i,   Q_ij = y_i y_j x̃_iᵀx̃_j,
//! ```
//!
//! and w̃ = Σ_i α_i y_i x̃_i. [`LinearSvmReport::dual_objective`] is −f(α) = Σα − ½‖w̃‖², a lower
//! bound of the primal optimum, so primal − dual ≥ 0 is the duality gap.
//!
//! Solver: dual coordinate descent (Hsieh, Chang, Lin, Keerthi, Sundararajan, "A dual
//! coordinate descent method for large-scale linear SVM", ICML 2008, Algorithms 1 and 3). Each
//! coordinate step is the exact minimiser of f along α_i clipped to the box, using the
//! maintained w̃ so one step costs O(nnz(x_i)). Coordinates are visited in a fresh random order
//! every epoch (from `seed`, so a fit is deterministic), and with shrinking a coordinate stuck
//! at a bound whose gradient pushes it further out is dropped until the active set converges,
//! after which every coordinate is checked again before stopping.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::data::{RowRef, Rows};
use crate::learn::kernel::dots_into;
use crate::learn::{positive_finite, Scorer};

/// Unchecked hyper-parameters; [`LinearSvmParams::check`] makes [`LinearSvmValidParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct LinearSvmParams {
    /// C₊: the cost of a margin violation by a positive row, > 0.
    pub c_positive: f64,
    /// C₋: the cost of a margin violation by a negative row, > 0. CS-SVM raises C₋/C₊ to push
    /// the false-positive rate down.
    pub c_negative: f64,
    /// Stop when the spread max(0, max PG) − min(0, min PG) of the projected gradient over all
    /// coordinates in one full epoch is ≤ tol (so every |PG| ≤ tol). The gradient is in margin
    /// units (∂f/∂α_i = y_i f(x_i) − 1), so tol bounds how far any row's margin is from its
    /// optimality condition, and the duality gap is then about tol·Σ C_i at most. Default 1e-3,
    /// not LIBLINEAR's 0.1: a low-FPR threshold sits on the few highest-scoring negatives, so
    /// their margins should be right to well under 0.1. (On standardised spambase with
    /// C = 0.01, 1e-3 ends at a relative gap of about 5e-6.)
    pub tol: f64,
    /// Cap on epochs, i.e. passes over the active coordinates (a pass over a shrunk set is
    /// cheaper but counts as one, as LIBLINEAR's iterations do); default 1000 as LIBLINEAR.
    /// A fit that hits it reports `converged: false` and keeps its (feasible) iterate. Dual
    /// coordinate descent slows down as C·max‖x_i‖² grows: on standardised data with outlying
    /// rows (spambase, shuttle) C ≥ 1 does not converge within the default cap.
    pub max_epochs: u64,
    /// Seed of the per-epoch coordinate order.
    pub seed: u64,
    /// Drop bound-stuck coordinates while the active set converges (Hsieh et al. §3.2); the
    /// result is the same to within `tol`, usually in less time. Default on.
    pub shrinking: bool,
}

impl LinearSvmParams {
    /// Both costs `c`, tol 1e-3, 1000 epochs, seed 0, shrinking on.
    pub fn new(c: f64) -> Self {
        LinearSvmParams {
            c_positive: c,
            c_negative: c,
            tol: 1e-3,
            max_epochs: 1000,
            seed: 0,
            shrinking: true,
        }
    }

    /// Sets the per-class costs (C₊, C₋).
    pub fn with_costs(mut self, c_positive: f64, c_negative: f64) -> Self {
        self.c_positive = c_positive;
        self.c_negative = c_negative;
        self
    }

    pub fn check(self) -> Result<LinearSvmValidParams, LinearSvmError> {
        positive_finite("c_positive", self.c_positive).map_err(LinearSvmError::Param)?;
        positive_finite("c_negative", self.c_negative).map_err(LinearSvmError::Param)?;
        positive_finite("tol", self.tol).map_err(LinearSvmError::Param)?;
        if self.max_epochs == 0 {
            return Err(LinearSvmError::Param(
                "max_epochs must be at least 1".into(),
            ));
        }
        Ok(LinearSvmValidParams(self))
    }
}

/// Checked hyper-parameters; the only way to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearSvmValidParams(LinearSvmParams);

impl std::ops::Deref for LinearSvmValidParams {
    type Target = LinearSvmParams;
    fn deref(&self) -> &LinearSvmParams {
        &self.0
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinearSvmError {
    #[error("invalid linear SVM parameter: {0}")]
    Param(String),
    #[error("{rows} rows but {labels} labels")]
    LengthMismatch { rows: usize, labels: usize },
    #[error("the linear SVM needs at least one positive row; the data has none")]
    NoPositives,
    #[error("the linear SVM needs at least one negative row; the data has none")]
    NoNegatives,
    #[error("row {row} has a non-finite feature value")]
    NonFinite { row: usize },
}

/// The outcome of a fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinearSvmReport {
    /// Passes over the active coordinates (shrunk passes count too).
    pub epochs: u64,
    /// The projected-gradient spread over all coordinates reached `tol`.
    pub converged: bool,
    /// The cancel flag stopped the fit; the model is the iterate reached so far.
    pub cancelled: bool,
    /// Σα − ½‖w̃‖², a lower bound of the primal optimum.
    pub dual_objective: f64,
    /// ½‖w̃‖² + Σ C_i ξ_i at the returned (w, b).
    pub primal_objective: f64,
    pub train_seconds: f64,
}

/// A fitted linear scorer f(x) = wᵀx + bias, with its dual solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinearSvm {
    pub w: Vec<f64>,
    pub bias: f64,
    /// α_i per training row, in row order; 0 ≤ α_i ≤ C_i (rows with α_i > 0 are the support
    /// vectors).
    pub alpha: Vec<f64>,
    pub report: LinearSvmReport,
}

impl LinearSvm {
    /// f(x_i) = wᵀx_i + bias for every row into `out` (`out.len() == rows.n_rows()`, and the
    /// rows have the training feature count).
    pub fn decision_batch(&self, rows: &Rows, out: &mut [f64]) {
        dots_into(rows, RowRef::Dense(&self.w), out);
        out.iter_mut().for_each(|s| *s += self.bias);
    }
}

impl Scorer for LinearSvm {
    fn n_features(&self) -> usize {
        self.w.len()
    }

    fn score_batch(&self, rows: &Rows, out: &mut [f64]) {
        self.decision_batch(rows, out);
    }
}

/// w̃ += delta · x̃ (the constant feature is folded into `bias`).
fn axpy(delta: f64, x: RowRef<'_>, w: &mut [f64], bias: &mut f64) {
    match x {
        RowRef::Dense(x) => w.iter_mut().zip(x).for_each(|(a, b)| *a += delta * b),
        RowRef::Sparse { indices, values } => {
            for (&i, &v) in indices.iter().zip(values) {
                w[i as usize] += delta * v;
            }
        }
    }
    *bias += delta;
}

impl LinearSvmValidParams {
    /// Fits on every row of `rows`, positive where `positive[i]`. Cancelling keeps the iterate
    /// reached so far and reports `cancelled: true`.
    pub fn fit(
        &self,
        rows: &Rows,
        positive: &[bool],
        cancel: &AtomicBool,
    ) -> Result<LinearSvm, LinearSvmError> {
        let start = Instant::now();
        let n = rows.n_rows();
        if positive.len() != n {
            return Err(LinearSvmError::LengthMismatch {
                rows: n,
                labels: positive.len(),
            });
        }
        if !positive.iter().any(|&p| p) {
            return Err(LinearSvmError::NoPositives);
        }
        if positive.iter().all(|&p| p) {
            return Err(LinearSvmError::NoNegatives);
        }
        if !rows.all_finite() {
            let row = (0..n)
                .find(|&i| match rows.row(i) {
                    RowRef::Dense(x) => x.iter().any(|v| !v.is_finite()),
                    RowRef::Sparse { values, .. } => values.iter().any(|v| !v.is_finite()),
                })
                .unwrap_or(0);
            return Err(LinearSvmError::NonFinite { row });
        }

        let y: Vec<f64> = positive
            .iter()
            .map(|&p| if p { 1.0 } else { -1.0 })
            .collect();
        let cost: Vec<f64> = positive
            .iter()
            .map(|&p| if p { self.c_positive } else { self.c_negative })
            .collect();
        // Q_ii = ‖x̃_i‖² = ‖x_i‖² + 1 > 0: the constant feature keeps every step well defined.
        let qd: Vec<f64> = rows.squared_norms().iter().map(|s| s + 1.0).collect();
        let mut alpha = vec![0.0; n];
        let mut w = vec![0.0; rows.n_features()];
        let mut bias = 0.0;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut active: Vec<usize> = (0..n).collect();
        let mut active_len = n;
        // Shrinking thresholds: last epoch's max / min projected gradient (Hsieh et al. Alg. 3).
        let (mut pg_max_old, mut pg_min_old) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut epochs, mut converged, mut cancelled) = (0u64, false, false);

        while epochs < self.max_epochs {
            if cancel.load(Ordering::Relaxed) {
                cancelled = true;
                break;
            }
            epochs += 1;
            active[..active_len].shuffle(&mut rng);
            // The spread starts from 0 on both sides, so it bounds every |PG| and not only
            // their differences: the box-only dual is optimal iff PG = 0 everywhere, and
            // equal but non-zero PGs (every α at 0 with the same gradient −1, say) are far
            // from it.
            let (mut pg_max, mut pg_min) = (0.0f64, 0.0f64);
            let mut s = 0;
            while s < active_len {
                let i = active[s];
                let x = rows.row(i);
                let g = y[i] * (x.dot(&RowRef::Dense(&w)) + bias) - 1.0;
                let pg = if alpha[i] == 0.0 {
                    if self.shrinking && g > pg_max_old {
                        active_len -= 1;
                        active.swap(s, active_len);
                        continue;
                    }
                    g.min(0.0)
                } else if alpha[i] == cost[i] {
                    if self.shrinking && g < pg_min_old {
                        active_len -= 1;
                        active.swap(s, active_len);
                        continue;
                    }
                    g.max(0.0)
                } else {
                    g
                };
                pg_max = pg_max.max(pg);
                pg_min = pg_min.min(pg);
                if pg.abs() > 1e-12 {
                    let old = alpha[i];
                    alpha[i] = (old - g / qd[i]).clamp(0.0, cost[i]);
                    let delta = (alpha[i] - old) * y[i];
                    if delta != 0.0 {
                        axpy(delta, x, &mut w, &mut bias);
                    }
                }
                s += 1;
            }
            if pg_max - pg_min <= self.tol {
                if active_len == n {
                    converged = true;
                    break;
                }
                // The shrunk problem converged: check every coordinate again before stopping.
                active_len = n;
                pg_max_old = f64::INFINITY;
                pg_min_old = f64::NEG_INFINITY;
                continue;
            }
            pg_max_old = if pg_max <= 0.0 { f64::INFINITY } else { pg_max };
            pg_min_old = if pg_min >= 0.0 {
                f64::NEG_INFINITY
            } else {
                pg_min
            };
        }

        // Rebuild w̃ from α so the reported objectives belong exactly to (α, w̃), free of the
        // round-off the incremental updates accumulated.
        w.fill(0.0);
        bias = 0.0;
        for i in 0..n {
            if alpha[i] != 0.0 {
                axpy(alpha[i] * y[i], rows.row(i), &mut w, &mut bias);
            }
        }
        let norm2 = w.iter().map(|v| v * v).sum::<f64>() + bias * bias;
        let mut f = vec![0.0; n];
        dots_into(rows, RowRef::Dense(&w), &mut f);
        let loss: f64 = (0..n)
            .map(|i| cost[i] * (1.0 - y[i] * (f[i] + bias)).max(0.0))
            .sum();
        Ok(LinearSvm {
            w,
            bias,
            report: LinearSvmReport {
                epochs,
                converged,
                cancelled,
                dual_objective: alpha.iter().sum::<f64>() - 0.5 * norm2,
                primal_objective: 0.5 * norm2 + loss,
                train_seconds: start.elapsed().as_secs_f64(),
            },
            alpha,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::CsrMatrix;
    use ndarray::array;

    fn fit(params: LinearSvmParams, rows: &Rows, positive: &[bool]) -> LinearSvm {
        params
            .check()
            .unwrap()
            .fit(rows, positive, &AtomicBool::new(false))
            .unwrap()
    }

    #[test]
    fn two_points_have_the_closed_form_solution() {
        // x₊ = 1, x₋ = −1 in one dimension: by symmetry b = 0 and α₊ = α₋ = a, w = 2a. The
        // dual ½·a²·(Q₊₊ + 2Q₊₋ + Q₋₋) − 2a with Q₊₊ = Q₋₋ = 2, Q₊₋ = y₊y₋(−1 + 1) = 0 gives
        // a = 1/2 (below C = 10), so w = 1 and both margins are exactly 1.
        let rows = Rows::dense(array![[1.0], [-1.0]]);
        let mut p = LinearSvmParams::new(10.0);
        p.tol = 1e-12;
        let m = fit(p, &rows, &[true, false]);
        assert!(m.report.converged);
        assert!((m.w[0] - 1.0).abs() < 1e-12, "{m:?}");
        assert!(m.bias.abs() < 1e-12);
        assert!((m.alpha[0] - 0.5).abs() < 1e-12 && (m.alpha[1] - 0.5).abs() < 1e-12);
        // P = ½·1 = 0.5 = Σα − ½‖w̃‖² = 1 − 0.5.
        assert!((m.report.primal_objective - 0.5).abs() < 1e-12);
        assert!((m.report.dual_objective - 0.5).abs() < 1e-12);
        let mut out = [0.0; 2];
        m.decision_batch(&rows, &mut out);
        assert!((out[0] - 1.0).abs() < 1e-12 && (out[1] + 1.0).abs() < 1e-12);
        // With C = 0.1 both α hit the box: α = 0.1, w = 0.2.
        let mut p = LinearSvmParams::new(0.1);
        p.tol = 1e-12;
        let m = fit(p, &rows, &[true, false]);
        assert_eq!(m.alpha, vec![0.1, 0.1]);
        assert!((m.w[0] - 0.2).abs() < 1e-12);
    }

    #[test]
    fn sparse_rows_give_the_dense_model_and_the_seed_fixes_the_fit() {
        let dense = array![
            [1.0, 0.0, 2.0],
            [0.0, 1.5, 0.0],
            [2.0, 0.5, 0.0],
            [-1.0, 0.0, -0.5],
            [0.0, -2.0, 1.0],
            [-0.5, -0.5, 0.0]
        ];
        let mut csr = CsrMatrix::new(3);
        for r in dense.outer_iter() {
            let (idx, val): (Vec<u32>, Vec<f64>) = r
                .iter()
                .enumerate()
                .filter(|(_, v)| **v != 0.0)
                .map(|(j, &v)| (j as u32, v))
                .unzip();
            csr.push_row(&idx, &val).unwrap();
        }
        let (dense, sparse) = (Rows::dense(dense), Rows::Sparse(csr));
        let positive = [true, true, true, false, false, false];
        let mut p = LinearSvmParams::new(1.0).with_costs(0.5, 2.0);
        p.tol = 1e-10;
        let d = fit(p.clone(), &dense, &positive);
        let s = fit(p.clone(), &sparse, &positive);
        assert!(d.report.converged && s.report.converged);
        for (a, b) in d.w.iter().zip(&s.w) {
            assert!((a - b).abs() < 1e-9, "{d:?} vs {s:?}");
        }
        assert!((d.bias - s.bias).abs() < 1e-9);
        // Same seed: the same visiting order, so bit-identical; another seed: the same optimum.
        let mut again = fit(p.clone(), &dense, &positive);
        again.report.train_seconds = d.report.train_seconds;
        assert_eq!(again, d);
        p.seed = 7;
        let other = fit(p, &dense, &positive);
        for (a, b) in d.w.iter().zip(&other.w) {
            assert!((a - b).abs() < 1e-8);
        }
    }

    #[test]
    fn epoch_cap_and_cancel_stop_early_with_a_feasible_iterate() {
        let rows = Rows::dense(array![
            [1.0, 0.2],
            [0.8, -0.1],
            [-1.0, 0.3],
            [-0.7, -0.4],
            [0.1, 0.0]
        ]);
        let positive = [true, true, false, false, true];
        let mut p = LinearSvmParams::new(100.0);
        p.tol = 1e-14;
        p.max_epochs = 2;
        let m = fit(p, &rows, &positive);
        assert_eq!(m.report.epochs, 2);
        assert!(!m.report.converged && !m.report.cancelled);
        assert!(m.alpha.iter().all(|&a| (0.0..=100.0).contains(&a)));
        assert!(m.report.primal_objective >= m.report.dual_objective);
        let m = LinearSvmParams::new(1.0)
            .check()
            .unwrap()
            .fit(&rows, &positive, &AtomicBool::new(true))
            .unwrap();
        assert!(m.report.cancelled && m.report.epochs == 0);
        assert_eq!(m.w, vec![0.0, 0.0]);
        // α = 0: P = Σ C_i·1 = 5, D = 0.
        assert_eq!(m.report.primal_objective, 5.0);
        assert_eq!(m.report.dual_objective, 0.0);
    }

    #[test]
    fn errors_name_the_problem() {
        let rows = Rows::dense(array![[1.0], [f64::NAN], [0.0]]);
        let prm = LinearSvmParams::new(1.0).check().unwrap();
        let cancel = AtomicBool::new(false);
        assert_eq!(
            prm.fit(&rows, &[true, false], &cancel).unwrap_err(),
            LinearSvmError::LengthMismatch { rows: 3, labels: 2 }
        );
        assert_eq!(
            prm.fit(&rows, &[false; 3], &cancel).unwrap_err(),
            LinearSvmError::NoPositives
        );
        assert_eq!(
            prm.fit(&rows, &[true; 3], &cancel).unwrap_err(),
            LinearSvmError::NoNegatives
        );
        assert_eq!(
            prm.fit(&rows, &[true, false, false], &cancel).unwrap_err(),
            LinearSvmError::NonFinite { row: 1 }
        );
        let err = LinearSvmParams::new(1.0)
            .with_costs(1.0, -1.0)
            .check()
            .unwrap_err();
        assert!(err.to_string().contains("c_negative"), "{err}");
        let mut p = LinearSvmParams::new(1.0);
        p.max_epochs = 0;
        assert!(p.check().unwrap_err().to_string().contains("max_epochs"));
        let mut p = LinearSvmParams::new(1.0);
        p.tol = f64::NAN;
        assert!(p.check().unwrap_err().to_string().contains("tol"));
        assert!(LinearSvmParams::new(0.0)
            .check()
            .unwrap_err()
            .to_string()
            .contains("c_positive"));
    }
}
