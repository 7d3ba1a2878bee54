//! neyman's own semidefinite-programming engine, for the bounds of the exact S3VM (seed 004:
//! Piccialli, Schwiddessen & Sudoso; the equations as rebuilt in the S3VM note, Part B).
//!
//! - This file: the problem shape ([`SdpProblem`]: one PSD block Y plus sparse linear rows,
//!   inequalities through nonnegative slacks), the one error type, and the **safe lower bound**
//!   of note B.4.5 ([`safe_lower_bound`]), valid however inexactly the problem was solved.
//! - [`ipm`]: the primal–dual interior-point method (HKM direction, Mehrotra
//!   predictor–corrector, a Schur complement assembled from the rows' few entries).
//! - [`relax`]: the S3VM objective C = ½(K + D)⁻¹ of model (8) and the builder of relaxation
//!   (20) (note B.4.2) with its RLT cuts (B.4.3).
//! - [`tighten`]: what the node loop (note B.4.6) does between solves: RLT separation and
//!   removal, the projection of Remark 2 and node infeasibility, marginals-based tightening
//!   (B.4.4) and OBBT (B.4.1), each bound valid for every point of the node at or below the
//!   incumbent.
//!
//! Why an own engine: clarabel's PSD cone factorises a KKT system with a dense block of order
//! N(N+1)/2 and grew like n⁵ on these problems (note Part C); first-order methods are not
//! accurate enough for the safe bound, which loses T·Σλ⁻(Z) with T ≈ 1 + Σū_i.
//!
//! The problem, in the primal form every file here uses:
//!
//! ```text
//!   min ⟨C̃, Y⟩  s.t.  ⟨A_k, Y⟩ {=, ≥, ≤} b_k  (k = 1..m),   Y ⪰ 0 (order N)
//!   dual:  max bᵀy  s.t.  Z = C̃ − Σ_k y_k A_k ⪰ 0,  y_k ≥ 0 on ≥ rows,  y_k ≤ 0 on ≤ rows
//! ```

pub mod ipm;
pub mod relax;
pub mod tighten;

use faer::Mat;

/// Everything that can go wrong before or around a solve; how a solve ended is an
/// [`ipm::SdpStatus`], not an error, because an unfinished solve still gives a safe bound.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SdpError {
    #[error("sdp: {0}")]
    Param(String),
    #[error("sdp problem: {0}")]
    Problem(String),
    #[error("sdp: the objective matrix is not positive definite (smallest eigenvalue {0:e})")]
    NotPositiveDefinite(f64),
    #[error("sdp: {0} failed (non-finite values?)")]
    Numerical(&'static str),
}

/// The sense of a linear row ⟨A_k, Y⟩ · b_k.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sense {
    Eq,
    Ge,
    Le,
}

/// One linear row: `entries` are (i, j, v) with i ≤ j, v the coefficient of Y_ij in the row
/// (so a row "X_ij ≥ …" with i ≠ j is the one entry (i, j, 1), whatever the symmetric A_k).
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    pub entries: Vec<(usize, usize, f64)>,
    pub sense: Sense,
    pub rhs: f64,
}

impl Constraint {
    pub fn new(entries: Vec<(usize, usize, f64)>, sense: Sense, rhs: f64) -> Constraint {
        Constraint {
            entries,
            sense,
            rhs,
        }
    }

    /// ⟨A_k, W⟩ for a symmetric W.
    pub fn value(&self, w: &Mat<f64>) -> f64 {
        self.entries.iter().map(|&(i, j, v)| v * w[(i, j)]).sum()
    }
}

/// A checked problem: the objective C̃ (symmetric, order N) and the rows, their entries in the
/// upper triangle, merged, inside the matrix and finite.
#[derive(Debug, Clone, PartialEq)]
pub struct SdpProblem {
    objective: Mat<f64>,
    constraints: Vec<Constraint>,
}

impl SdpProblem {
    pub fn new(objective: Mat<f64>, constraints: Vec<Constraint>) -> Result<SdpProblem, SdpError> {
        let n = objective.nrows();
        if n == 0 || objective.ncols() != n {
            return Err(SdpError::Problem(format!(
                "the objective must be a non-empty square matrix, got {}×{}",
                objective.nrows(),
                objective.ncols()
            )));
        }
        let mut scale = 0.0f64;
        for j in 0..n {
            for i in 0..n {
                let (a, b) = (objective[(i, j)], objective[(j, i)]);
                if !a.is_finite() {
                    return Err(SdpError::Problem(format!(
                        "objective entry ({i}, {j}) is {a}"
                    )));
                }
                scale = scale.max(a.abs());
                if (a - b).abs() > 1e-12 * scale.max(1.0) {
                    return Err(SdpError::Problem(format!(
                        "the objective is not symmetric at ({i}, {j}): {a} vs {b}"
                    )));
                }
            }
        }
        let objective = Mat::from_fn(n, n, |i, j| 0.5 * (objective[(i, j)] + objective[(j, i)]));
        let mut rows = Vec::with_capacity(constraints.len());
        for (k, mut row) in constraints.into_iter().enumerate() {
            if !row.rhs.is_finite() {
                return Err(SdpError::Problem(format!(
                    "row {k}: right-hand side {}",
                    row.rhs
                )));
            }
            for e in &mut row.entries {
                if e.0 > e.1 {
                    *e = (e.1, e.0, e.2);
                }
                if e.1 >= n || !e.2.is_finite() {
                    return Err(SdpError::Problem(format!(
                        "row {k}: entry ({}, {}, {}) outside the order-{n} matrix or not finite",
                        e.0, e.1, e.2
                    )));
                }
            }
            row.entries.sort_by_key(|e| (e.0, e.1));
            row.entries.dedup_by(|later, first| {
                let same = (later.0, later.1) == (first.0, first.1);
                if same {
                    first.2 += later.2;
                }
                same
            });
            row.entries.retain(|e| e.2 != 0.0);
            if row.entries.is_empty() {
                return Err(SdpError::Problem(format!("row {k} has no entries")));
            }
            rows.push(row);
        }
        Ok(SdpProblem {
            objective,
            constraints: rows,
        })
    }

    /// N, the order of Y.
    pub fn order(&self) -> usize {
        self.objective.nrows()
    }

    pub fn objective(&self) -> &Mat<f64> {
        &self.objective
    }

    pub fn constraints(&self) -> &[Constraint] {
        &self.constraints
    }

    /// ⟨C̃, Y⟩.
    pub fn objective_value(&self, y: &Mat<f64>) -> f64 {
        frobenius_dot(&self.objective, y)
    }

    /// The dual slack C̃ − Σ_k y_k A_k (A_k symmetric: an off-diagonal coefficient v puts v/2
    /// on both sides).
    pub fn dual_slack(&self, duals: &[f64]) -> Mat<f64> {
        let mut z = self.objective.clone();
        for (row, &yk) in self.constraints.iter().zip(duals) {
            for &(i, j, v) in &row.entries {
                if i == j {
                    z[(i, i)] -= yk * v;
                } else {
                    z[(i, j)] -= 0.5 * yk * v;
                    z[(j, i)] -= 0.5 * yk * v;
                }
            }
        }
        z
    }

    /// The largest violation of a row at Y, relative to 1 + |b_k|.
    pub fn max_row_violation(&self, y: &Mat<f64>) -> f64 {
        self.constraints
            .iter()
            .map(|row| {
                let r = row.value(y) - row.rhs;
                let v = match row.sense {
                    Sense::Eq => r.abs(),
                    Sense::Ge => (-r).max(0.0),
                    Sense::Le => r.max(0.0),
                };
                v / (1.0 + row.rhs.abs())
            })
            .fold(0.0, f64::max)
    }
}

/// Σ_ij A_ij B_ij.
pub(crate) fn frobenius_dot(a: &Mat<f64>, b: &Mat<f64>) -> f64 {
    let mut sum = 0.0;
    for j in 0..a.ncols() {
        for (x, y) in a.col_as_slice(j).iter().zip(b.col_as_slice(j)) {
            sum += x * y;
        }
    }
    sum
}

/// The safe lower bound of note B.4.5 and its parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SafeBound {
    /// bᵀy + T·Σ_{λ_i(Z) < 0} λ_i(Z): a lower bound on the optimum.
    pub value: f64,
    /// bᵀy with the projected multipliers.
    pub dual_value: f64,
    /// λ_min of Z = C̃ − Σ y_k A_k.
    pub min_eigenvalue: f64,
    /// Σ of the negative eigenvalues of Z (≤ 0).
    pub negative_sum: f64,
    /// T, the bound on trace(Y) used.
    pub trace_bound: f64,
}

/// The safe lower bound of note B.4.5: the multipliers of ≥ rows projected onto y ≥ 0 and of
/// ≤ rows onto y ≤ 0, Z = C̃ − Σ y_k A_k, and LB = bᵀy + T·Σ_{λ_i(Z)<0} λ_i(Z), where T bounds
/// trace(Y) on the feasible set (or on its part at or below a known objective value).
///
/// Valid for **any** `duals`, however inexactly the problem was solved: for a feasible Y,
/// ⟨C̃, Y⟩ = ⟨Z, Y⟩ + Σ y_k⟨A_k, Y⟩; the sign projection makes Σ y_k⟨A_k, Y⟩ ≥ bᵀy, and
/// ⟨Z, Y⟩ ≥ λ_max(Y)·Σλ⁻(Z) ≥ T·Σλ⁻(Z) since 0 ≤ λ_max(Y) ≤ trace(Y) ≤ T. With T = ∞ the
/// bound is bᵀy when Z ⪰ 0 and −∞ otherwise.
pub fn safe_lower_bound(
    problem: &SdpProblem,
    duals: &[f64],
    trace_bound: f64,
) -> Result<SafeBound, SdpError> {
    if duals.len() != problem.constraints.len() {
        return Err(SdpError::Param(format!(
            "{} multipliers for {} rows",
            duals.len(),
            problem.constraints.len()
        )));
    }
    if trace_bound.is_nan() || trace_bound < 1.0 {
        return Err(SdpError::Param(format!(
            "the trace bound T must be at least 1 (the corner of Y), got {trace_bound}"
        )));
    }
    let projected: Vec<f64> = problem
        .constraints
        .iter()
        .zip(duals)
        .map(|(row, &y)| match row.sense {
            Sense::Eq => y,
            Sense::Ge => y.max(0.0),
            Sense::Le => y.min(0.0),
        })
        .collect();
    if projected.iter().any(|y| !y.is_finite()) {
        return Err(SdpError::Param("the multipliers are not finite".into()));
    }
    let dual_value: f64 = problem
        .constraints
        .iter()
        .zip(&projected)
        .map(|(row, y)| row.rhs * y)
        .sum();
    let z = problem.dual_slack(&projected);
    let eigenvalues = z
        .self_adjoint_eigenvalues(faer::Side::Lower)
        .map_err(|_| SdpError::Numerical("the eigenvalues of Z"))?;
    let min_eigenvalue = eigenvalues.iter().copied().fold(f64::INFINITY, f64::min);
    let negative_sum: f64 = eigenvalues.iter().filter(|&&l| l < 0.0).sum();
    let value = if negative_sum < 0.0 {
        dual_value + trace_bound * negative_sum
    } else {
        dual_value
    };
    Ok(SafeBound {
        value,
        dual_value,
        min_eigenvalue,
        negative_sum,
        trace_bound,
    })
}
