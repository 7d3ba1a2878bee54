//! Model (8) of the exact S3VM and its SDP relaxation (20) (note B.1, B.4.2), with the RLT
//! cuts of (21)–(22) (B.4.3).
//!
//! Model (8): min xᵀCx over x ∈ Rⁿ with C = ½(K + D)⁻¹, D = diag(1/(2c_k)) (note B.1), the
//! labelled rows' signs as boxes L ≤ x ≤ U, x_j² ≥ 1 on the others and the balance row (11)
//! Σ_{j unlabeled} x_j = ρ. Relaxation (20) lifts X = xxᵀ:
//!
//! ```text
//!   min ⟨C, X⟩  s.t.  Y = [[X, x], [xᵀ, 1]] ⪰ 0,  Σ_j x_j = ρ,  L ≤ x ≤ U,  1 ≤ X_ii ≤ ū_i
//! ```
//!
//! Y has order N = n + 1, its corner fixed to 1 by an equality row, and C̃ = blkdiag(C, 0).

use faer::linalg::solvers::DenseSolveCore;
use faer::{Mat, Side};

use super::{safe_lower_bound, Constraint, SafeBound, SdpError, SdpProblem, Sense};
use crate::data::{Label, Rows};
use crate::learn::kernel::Kernel;

/// The Gram matrix K_ij = k(x_i, x_j) of `rows`.
pub fn gram(kernel: &Kernel, rows: &Rows) -> Mat<f64> {
    let n = rows.n_rows();
    let mut k = Mat::zeros(n, n);
    for i in 0..n {
        for j in 0..=i {
            let v = kernel.eval(rows.row(i), rows.row(j));
            k[(i, j)] = v;
            k[(j, i)] = v;
        }
    }
    k
}

/// C = ½(K + D)⁻¹ with D = diag(1/(2c_k)) (note B.1): positive definite for any PSD K because
/// D ≻ 0. Through a Cholesky factor of K + D, never a general inverse.
pub fn objective_matrix(gram: &Mat<f64>, penalties: &[f64]) -> Result<Mat<f64>, SdpError> {
    let n = gram.nrows();
    if gram.ncols() != n || penalties.len() != n {
        return Err(SdpError::Problem(format!(
            "a {}×{} Gram matrix with {} penalties",
            gram.nrows(),
            gram.ncols(),
            penalties.len()
        )));
    }
    if let Some(c) = penalties.iter().find(|c| !(c.is_finite() && **c > 0.0)) {
        return Err(SdpError::Param(format!(
            "the penalties c_k must be finite and > 0, got {c}"
        )));
    }
    let k_hat = Mat::from_fn(n, n, |i, j| {
        0.5 * (gram[(i, j)] + gram[(j, i)]) + if i == j { 0.5 / penalties[i] } else { 0.0 }
    });
    let llt = k_hat
        .llt(Side::Lower)
        .map_err(|_| SdpError::Numerical("the Cholesky factor of K + D"))?;
    let inverse = llt.inverse();
    Ok(Mat::from_fn(n, n, |i, j| {
        0.25 * (inverse[(i, j)] + inverse[(j, i)])
    }))
}

/// The balance row (11): Σ_{j ∈ unlabeled} x_j = ρ.
#[derive(Debug, Clone, PartialEq)]
pub struct Balance {
    pub unlabeled: Vec<usize>,
    pub rho: f64,
}

/// Which box and diagonal rows (20) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowRule {
    /// The authors' "small relaxation" (note B.4.2), fewer rows for a faster solve: x_i ≥ L_i
    /// only when L_i > 0, x_i ≤ U_i only when U_i < 0, X_ii ≥ 1 only where the box does not
    /// imply it (L_i < 1 and U_i > −1), X_ii ≤ ū_i wherever ū_i is finite. At the root (one-
    /// sided labelled boxes, unbounded unlabeled ones) it equals [`RowRule::Full`], the
    /// omitted X_ii ≥ 1 following from x_i ≥ 1 and Y ⪰ 0; on a node with finite two-sided
    /// boxes it can be weaker (|x_i| ≤ √ū_i implies only the wider side of the box), the RLT
    /// cuts carrying the box instead (note G-B8).
    Small,
    /// Every finite box row and X_ii ≥ 1 for every i, as (20) is written.
    Full,
}

/// The four RLT products of a pair (note B.4.3, eq. (21)), each linearised by X_ij = x_i x_j.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RltKind {
    /// (U_i − x_i)(U_j − x_j) ≥ 0
    T1,
    /// (x_i − L_i)(x_j − L_j) ≥ 0
    T2,
    /// (x_i − L_i)(U_j − x_j) ≥ 0
    T3,
    /// (U_i − x_i)(x_j − L_j) ≥ 0
    T4,
}

/// One RLT cut on the pair (i, j), i ≠ j.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RltCut {
    pub i: usize,
    pub j: usize,
    pub kind: RltKind,
}

/// What one row of the built problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// Y_NN = 1.
    Corner,
    /// (11).
    Balance,
    /// x_i ≥ L_i.
    Lower(usize),
    /// x_i ≤ U_i.
    Upper(usize),
    /// X_ii ≥ t_i ([`Relaxation::diag_lower`], 1 unless Lemma 2 raised it).
    DiagLower(usize),
    /// X_ii ≤ ū_i.
    DiagUpper(usize),
    Cut(RltCut),
}

/// Relaxation (20) of one node (unchecked): [`Relaxation::build`] checks it and makes the
/// [`SdpProblem`].
#[derive(Debug, Clone, PartialEq)]
pub struct Relaxation {
    /// C of model (8), n×n, positive definite.
    pub c: Mat<f64>,
    /// L (−∞ allowed).
    pub lower: Vec<f64>,
    /// U (+∞ allowed).
    pub upper: Vec<f64>,
    /// ū_i of X_ii ≤ ū_i (+∞: no row); [`Relaxation::new`] sets max(L_i², U_i²) (note B.4.2).
    pub diag_upper: Vec<f64>,
    /// t_i of X_ii ≥ t_i (at least 1, the row of (20)); [`Relaxation::new`] sets 1, and
    /// marginals tightening raises it where Lemma 2 finds x_i² ≥ t_i > 1 for a point whose
    /// sign stays open (docs/exact-s3vm.md §9).
    pub diag_lower: Vec<f64>,
    pub balance: Option<Balance>,
    pub rows: RowRule,
    pub cuts: Vec<RltCut>,
}

impl Relaxation {
    /// The relaxation of boxes `lower`, `upper` with ū_i = max(L_i², U_i²), the small row rule,
    /// no balance row and no cuts.
    pub fn new(c: Mat<f64>, lower: Vec<f64>, upper: Vec<f64>) -> Relaxation {
        let diag_upper = lower
            .iter()
            .zip(&upper)
            .map(|(l, u)| (l * l).max(u * u))
            .collect();
        let diag_lower = vec![1.0; lower.len()];
        Relaxation {
            c,
            lower,
            upper,
            diag_upper,
            diag_lower,
            balance: None,
            rows: RowRule::Small,
            cuts: Vec::new(),
        }
    }

    /// The root relaxation of a labelling: a labelled row i gets L_i = 1 (label 1) or U_i = −1
    /// (label −1), an unlabeled row the box (−∞, ∞); with `balance`, the row (11) with
    /// ρ = (u/l)·Σ_i y_i over the labelled rows (note B.2).
    pub fn for_labels(
        c: Mat<f64>,
        labels: &[Label],
        balance: bool,
    ) -> Result<Relaxation, SdpError> {
        let (mut lower, mut upper) = (Vec::new(), Vec::new());
        for label in labels {
            let (l, u) = match label {
                Label::Positive => (1.0, f64::INFINITY),
                Label::Negative => (f64::NEG_INFINITY, -1.0),
                Label::Unlabeled => (f64::NEG_INFINITY, f64::INFINITY),
            };
            lower.push(l);
            upper.push(u);
        }
        let mut relaxation = Relaxation::new(c, lower, upper);
        if balance {
            let unlabeled: Vec<usize> = (0..labels.len())
                .filter(|&i| labels[i] == Label::Unlabeled)
                .collect();
            let labelled = labels.len() - unlabeled.len();
            if labelled == 0 {
                return Err(SdpError::Problem(
                    "the balance row needs labelled rows (ρ = (u/l)·Σ y_i)".into(),
                ));
            }
            let sum: f64 = labels.iter().map(|l| f64::from(l.code())).sum();
            relaxation.balance = Some(Balance {
                rho: unlabeled.len() as f64 / labelled as f64 * sum,
                unlabeled,
            });
        }
        Ok(relaxation)
    }

    /// A point of model (8) with (11) for the full labelling `signs` (±1 per point): x = signs,
    /// then the balance residual ρ − Σ_j x_j spread evenly over the unlabeled points of its
    /// sign, so every |x_j| stays ≥ 1. `None` when the residual has no such point to go to
    /// (or `signs` is not one per point).
    pub fn labelling_point(&self, signs: &[f64]) -> Option<Vec<f64>> {
        if signs.len() != self.lower.len() {
            return None;
        }
        let mut x = signs.to_vec();
        let Some(balance) = &self.balance else {
            return Some(x);
        };
        let sum: f64 = balance
            .unlabeled
            .iter()
            .map(|&j| x.get(j).copied())
            .sum::<Option<f64>>()?;
        let residual = balance.rho - sum;
        if residual == 0.0 {
            return Some(x);
        }
        let takers: Vec<usize> = balance
            .unlabeled
            .iter()
            .copied()
            .filter(|&j| x[j] * residual > 0.0)
            .collect();
        if takers.is_empty() {
            return None;
        }
        let share = residual / takers.len() as f64;
        for j in takers {
            x[j] += share;
        }
        Some(x)
    }

    /// Checks the node and builds its SDP: rows in the order corner, balance, per i the box and
    /// diagonal rows, then the cuts ([`RelaxedSdp::kinds`] names each).
    pub fn build(&self) -> Result<RelaxedSdp, SdpError> {
        let n = self.c.nrows();
        if n == 0 || self.c.ncols() != n {
            return Err(SdpError::Problem(format!(
                "C must be a non-empty square matrix, got {}×{}",
                self.c.nrows(),
                self.c.ncols()
            )));
        }
        if self.lower.len() != n
            || self.upper.len() != n
            || self.diag_upper.len() != n
            || self.diag_lower.len() != n
        {
            return Err(SdpError::Problem(format!(
                "{} lower, {} upper, {} diagonal upper and {} diagonal lower bounds for n = {n}",
                self.lower.len(),
                self.upper.len(),
                self.diag_upper.len(),
                self.diag_lower.len()
            )));
        }
        for i in 0..n {
            let (l, u, d) = (self.lower[i], self.upper[i], self.diag_upper[i]);
            let t = self.diag_lower[i];
            if l.is_nan()
                || u.is_nan()
                || d.is_nan()
                || !(1.0..f64::INFINITY).contains(&t)
                || l == f64::INFINITY
                || u == f64::NEG_INFINITY
            {
                return Err(SdpError::Problem(format!(
                    "point {i}: bounds L = {l}, U = {u}, ū = {d}, t = {t}"
                )));
            }
        }
        let eigenvalues = self
            .c
            .self_adjoint_eigenvalues(Side::Lower)
            .map_err(|_| SdpError::Numerical("the eigenvalues of C"))?;
        let min_eigenvalue_c = eigenvalues.iter().copied().fold(f64::INFINITY, f64::min);
        if min_eigenvalue_c.is_nan() || min_eigenvalue_c <= 0.0 {
            return Err(SdpError::NotPositiveDefinite(min_eigenvalue_c));
        }
        let corner = n;
        let mut rows = vec![Constraint::new(vec![(corner, corner, 1.0)], Sense::Eq, 1.0)];
        let mut kinds = vec![RowKind::Corner];
        if let Some(balance) = &self.balance {
            let mut seen = vec![false; n];
            for &j in &balance.unlabeled {
                if j >= n || std::mem::replace(&mut seen[j], true) {
                    return Err(SdpError::Problem(format!(
                        "balance row: point {j} is out of range or listed twice"
                    )));
                }
            }
            if !balance.rho.is_finite() || balance.unlabeled.is_empty() {
                return Err(SdpError::Problem(format!(
                    "balance row over {} points with ρ = {}",
                    balance.unlabeled.len(),
                    balance.rho
                )));
            }
            let entries = balance
                .unlabeled
                .iter()
                .map(|&j| (j, corner, 1.0))
                .collect();
            rows.push(Constraint::new(entries, Sense::Eq, balance.rho));
            kinds.push(RowKind::Balance);
        }
        let full = self.rows == RowRule::Full;
        for i in 0..n {
            let (l, u) = (self.lower[i], self.upper[i]);
            if l.is_finite() && (full || l > 0.0) {
                rows.push(Constraint::new(vec![(i, corner, 1.0)], Sense::Ge, l));
                kinds.push(RowKind::Lower(i));
            }
            if u.is_finite() && (full || u < 0.0) {
                rows.push(Constraint::new(vec![(i, corner, 1.0)], Sense::Le, u));
                kinds.push(RowKind::Upper(i));
            }
            if full || (l < 1.0 && u > -1.0) {
                rows.push(Constraint::new(
                    vec![(i, i, 1.0)],
                    Sense::Ge,
                    self.diag_lower[i],
                ));
                kinds.push(RowKind::DiagLower(i));
            }
            if self.diag_upper[i].is_finite() {
                rows.push(Constraint::new(
                    vec![(i, i, 1.0)],
                    Sense::Le,
                    self.diag_upper[i],
                ));
                kinds.push(RowKind::DiagUpper(i));
            }
        }
        for &cut in &self.cuts {
            rows.push(self.cut_row(cut)?);
            kinds.push(RowKind::Cut(cut));
        }
        let objective = Mat::from_fn(n + 1, n + 1, |i, j| {
            if i < n && j < n {
                0.5 * (self.c[(i, j)] + self.c[(j, i)])
            } else {
                0.0
            }
        });
        let trace_bound_boxes = 1.0 + self.diag_upper.iter().sum::<f64>();
        Ok(RelaxedSdp {
            problem: SdpProblem::new(objective, rows)?,
            kinds,
            trace_bound_boxes,
            min_eigenvalue_c,
        })
    }

    /// The row of one RLT cut (eq. (21)), its constant moved to the right-hand side.
    fn cut_row(&self, cut: RltCut) -> Result<Constraint, SdpError> {
        let n = self.c.nrows();
        let RltCut { i, j, kind } = cut;
        if i == j || i >= n || j >= n {
            return Err(SdpError::Problem(format!(
                "RLT cut on ({i}, {j}): needs two distinct points below {n}"
            )));
        }
        let (li, ui, lj, uj) = (self.lower[i], self.upper[i], self.lower[j], self.upper[j]);
        // (sign of X_ij, coefficient of x_i, coefficient of x_j, right-hand side), row ≥ rhs.
        let (xij, ci, cj, rhs) = match kind {
            RltKind::T1 => (1.0, -uj, -ui, -ui * uj),
            RltKind::T2 => (1.0, -lj, -li, -li * lj),
            RltKind::T3 => (-1.0, uj, li, li * uj),
            RltKind::T4 => (-1.0, lj, ui, ui * lj),
        };
        if ![ci, cj, rhs].iter().all(|v| v.is_finite()) {
            return Err(SdpError::Problem(format!(
                "RLT cut {kind:?} on ({i}, {j}) needs finite bounds, got [{li}, {ui}] and [{lj}, {uj}]"
            )));
        }
        Ok(Constraint::new(
            vec![(i.min(j), i.max(j), xij), (i, n, ci), (j, n, cj)],
            Sense::Ge,
            rhs,
        ))
    }
}

/// A built relaxation: the problem and what its rows are.
#[derive(Debug, Clone, PartialEq)]
pub struct RelaxedSdp {
    pub problem: SdpProblem,
    /// One per row of `problem`.
    pub kinds: Vec<RowKind>,
    /// 1 + Σ ū_i (∞ when some ū_i is).
    trace_bound_boxes: f64,
    min_eigenvalue_c: f64,
}

impl RelaxedSdp {
    /// T for the safe bound: the smaller of 1 + Σ ū_i (the diagonal rows bound trace(Y)) and,
    /// given `upper` ≥ the optimum (any feasible point's objective, e.g. an incumbent's),
    /// 1 + upper/λ_min(C): ⟨C, X⟩ ≥ λ_min(C)·trace(X) for X ⪰ 0, so every Y at or below
    /// `upper` has trace(Y) ≤ T, and the optimum is among them.
    pub fn trace_bound(&self, upper: Option<f64>) -> f64 {
        let from_upper = upper.map_or(f64::INFINITY, |ub| {
            1.0 + ub.max(0.0) / self.min_eigenvalue_c
        });
        self.trace_bound_boxes.min(from_upper)
    }

    /// xᵀCx when Y = [x; 1][x; 1]ᵀ satisfies every row (to 1e-10 relative, for rounding):
    /// then it bounds the optimum of the relaxation from above, the `upper` of
    /// [`RelaxedSdp::trace_bound`]. `None` when some row is violated.
    pub fn rank_one_objective(&self, x: &[f64]) -> Option<f64> {
        let n = self.problem.order() - 1;
        if x.len() != n {
            return None;
        }
        let v = |i: usize| if i < n { x[i] } else { 1.0 };
        let y = Mat::from_fn(n + 1, n + 1, |i, j| v(i) * v(j));
        (self.problem.max_row_violation(&y) <= 1e-10).then(|| self.problem.objective_value(&y))
    }

    /// The safe lower bound (note B.4.5, [`safe_lower_bound`]) of `duals` with
    /// [`RelaxedSdp::trace_bound`]`(upper)`.
    pub fn safe_lower_bound(
        &self,
        duals: &[f64],
        upper: Option<f64>,
    ) -> Result<SafeBound, SdpError> {
        safe_lower_bound(&self.problem, duals, self.trace_bound(upper))
    }
}
