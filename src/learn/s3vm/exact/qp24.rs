//! QP (24) of note B.4.7: the best x for one full labelling ŷ,
//!
//! ```text
//!   min xᵀCx  s.t.  ŷ_k x_k ≥ 1 (every k),  Σ_{j unlabeled} x_j = ρ  (balance (11), optional)
//! ```
//!
//! solved exactly by a primal active-set method (Nocedal & Wright, Algorithm 16.3) in
//! z = ŷ∘x: min ½zᵀPz with P = 2·ŶCŶ ≻ 0, z ≥ 1, aᵀz = ρ (a_k = ŷ_k on the balance points,
//! else 0). Every iterate is feasible; on a working set W (z_W = 1) the step solves the
//! equality-constrained subproblem with one Cholesky factor of P_FF over the free points F,
//! so the final z is the subproblem's solution up to rounding, as leaves need (note G-B9).
//! Why z and C rather than the L2-SVM dual in K̂: C is formed for the relaxation anyway, and
//! the working set starts at z = 1 (every point a support vector), the usual case for the
//! small C_u of the unlabeled points, so few free points are factored.

use faer::linalg::solvers::Solve;
use faer::{Mat, Side};

use super::ExactError;
use crate::learn::s3vm::sdp::relax::Balance;

/// The solution of QP (24) for one labelling.
#[derive(Debug, Clone, PartialEq)]
pub struct Qp24Solution {
    /// x, with ŷ_k x_k ≥ 1 and the balance row met.
    pub x: Vec<f64>,
    /// xᵀCx: the L2-SVM primal optimum under this labelling (with (11)).
    pub objective: f64,
}

/// xᵀCx.
pub fn quadratic(c: &Mat<f64>, x: &[f64]) -> f64 {
    x.iter()
        .enumerate()
        .map(|(j, xj)| {
            let s: f64 = c.col_as_slice(j).iter().zip(x).map(|(a, b)| a * b).sum();
            s * xj
        })
        .sum()
}

/// QP (24) for the labelling `signs` (±1 per point), with the balance row when given.
/// `None` when no x meets the balance row with these signs (every |x_j| ≥ 1 pushes the sum
/// the wrong way).
pub fn solve(
    c: &Mat<f64>,
    signs: &[f64],
    balance: Option<&Balance>,
) -> Result<Option<Qp24Solution>, ExactError> {
    let n = c.nrows();
    if signs.len() != n || signs.iter().any(|s| s.abs() != 1.0) {
        return Err(ExactError::Labelling(format!(
            "QP (24) needs one sign ±1 per point ({n}), got {} values",
            signs.len()
        )));
    }
    let mut a = vec![0.0; n];
    let mut z = vec![1.0; n];
    if let Some(b) = balance {
        for &j in &b.unlabeled {
            a[j] = signs[j];
        }
        // A feasible start: z = 1 and the residual spread over the points that move the sum
        // its way (z_k grows, so z ≥ 1 stays).
        let residual = b.rho - a.iter().sum::<f64>();
        if residual != 0.0 {
            let takers: Vec<usize> = (0..n).filter(|&k| a[k] * residual > 0.0).collect();
            if takers.is_empty() {
                return Ok(None);
            }
            let share = residual.abs() / takers.len() as f64;
            for k in takers {
                z[k] += share;
            }
        }
    }
    let has_balance = balance.is_some();
    let p = Mat::from_fn(n, n, |i, j| signs[i] * signs[j] * (c[(i, j)] + c[(j, i)]));
    let mut fixed: Vec<bool> = z.iter().map(|&v| v == 1.0).collect();
    // After a step of length zero (a point just released is blocked at once) release one
    // point at a time, the textbook rule, so the method cannot cycle through releases.
    let mut single_release = false;
    let max_iterations = 100 + 20 * n;
    for _ in 0..max_iterations {
        let free: Vec<usize> = (0..n).filter(|&k| !fixed[k]).collect();
        let g = mat_vec(&p, &z);
        let (step, nu) = direction(&p, &g, &a, &free)?;
        let scale = 1.0 + free.iter().map(|&k| z[k].abs()).fold(0.0, f64::max);
        let longest = step.iter().map(|v| v.abs()).fold(0.0, f64::max);
        if longest > 1e-13 * scale {
            let (mut length, mut blocking) = (1.0, None);
            for (s, &k) in step.iter().zip(&free) {
                if *s < 0.0 {
                    let t = (z[k] - 1.0) / -s;
                    if t < length {
                        length = t;
                        blocking = Some(k);
                    }
                }
            }
            for (s, &k) in step.iter().zip(&free) {
                z[k] += length * s;
            }
            if let Some(k) = blocking {
                z[k] = 1.0;
                fixed[k] = true;
                if length == 0.0 {
                    single_release = true;
                }
            }
            continue;
        }
        for (s, &k) in step.iter().zip(&free) {
            z[k] += s;
        }
        // z minimises on the face: the multipliers λ = Pz − νa of the fixed points decide.
        let g = mat_vec(&p, &z);
        let nu = match nu {
            Some(nu) => nu,
            None if has_balance => free_balance_multiplier(&g, &a, &fixed),
            None => 0.0,
        };
        let tol = 1e-12 * (1.0 + g.iter().map(|v| v.abs()).fold(0.0, f64::max));
        let mut negative: Vec<(f64, usize)> = (0..n)
            .filter(|&k| fixed[k])
            .map(|k| (g[k] - nu * a[k], k))
            .filter(|&(l, _)| l < -tol)
            .collect();
        if negative.is_empty() {
            let x: Vec<f64> = z.iter().zip(signs).map(|(z, s)| z * s).collect();
            let objective = quadratic(c, &x);
            return Ok(Some(Qp24Solution { x, objective }));
        }
        negative.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        if single_release {
            negative.truncate(1);
            single_release = false;
        }
        for (_, k) in negative {
            fixed[k] = false;
        }
    }
    Err(ExactError::Qp24NotConverged(max_iterations))
}

/// The step of the equality-constrained subproblem on the free points F:
/// P_FF p_F + g_F = ν a_F, a_Fᵀ p_F = 0; `None` for ν when a_F = 0 (the balance row is then
/// held by the fixed points alone and ν is free).
fn direction(
    p: &Mat<f64>,
    g: &[f64],
    a: &[f64],
    free: &[usize],
) -> Result<(Vec<f64>, Option<f64>), ExactError> {
    if free.is_empty() {
        return Ok((Vec::new(), None));
    }
    let m = free.len();
    let pff = Mat::from_fn(m, m, |i, j| p[(free[i], free[j])]);
    let llt = pff
        .llt(Side::Lower)
        .map_err(|_| ExactError::Numerical("the Cholesky factor of QP (24)'s free block"))?;
    let rhs = Mat::from_fn(m, 2, |i, j| if j == 0 { g[free[i]] } else { a[free[i]] });
    let sol = llt.solve(&rhs);
    let aw: f64 = (0..m).map(|i| a[free[i]] * sol[(i, 1)]).sum();
    if aw > 0.0 {
        let au: f64 = (0..m).map(|i| a[free[i]] * sol[(i, 0)]).sum();
        let nu = au / aw;
        Ok((
            (0..m).map(|i| -sol[(i, 0)] + nu * sol[(i, 1)]).collect(),
            Some(nu),
        ))
    } else {
        Ok(((0..m).map(|i| -sol[(i, 0)]).collect(), None))
    }
}

/// ν when every balance point is fixed: λ_k = g_k − ν a_k ≥ 0 asks ν ≤ g_k (a_k = 1) and
/// ν ≥ −g_k (a_k = −1); the middle of that interval (or its finite end) keeps the most
/// multipliers non-negative, and a negative one left is released next.
fn free_balance_multiplier(g: &[f64], a: &[f64], fixed: &[bool]) -> f64 {
    let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
    for k in 0..g.len() {
        if fixed[k] && a[k] > 0.0 {
            hi = hi.min(g[k]);
        } else if fixed[k] && a[k] < 0.0 {
            lo = lo.max(-g[k]);
        }
    }
    match (lo.is_finite(), hi.is_finite()) {
        (true, true) => 0.5 * (lo + hi),
        (true, false) => lo,
        (false, true) => hi,
        (false, false) => 0.0,
    }
}

/// P z.
fn mat_vec(p: &Mat<f64>, z: &[f64]) -> Vec<f64> {
    let n = z.len();
    let mut out = vec![0.0; n];
    for (j, &zj) in z.iter().enumerate() {
        if zj != 0.0 {
            for (o, v) in out.iter_mut().zip(p.col_as_slice(j)) {
                *o += v * zj;
            }
        }
    }
    out
}
