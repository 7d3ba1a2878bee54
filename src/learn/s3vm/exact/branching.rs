//! The branching rule of note B.4.8 (the paper's rule, note G-B4): among the undecided
//! points, the candidate set B holds those whose row X_ii ≥ 1 is active (a multiplier above
//! [`ACTIVE_DUAL`]) and whose coordinate in QP (24)'s solution x̄ for sign(x̂) is ±1 (within
//! [`ON_MARGIN`]); B is ranked by the approximation errors of X̂ against x̂x̂ᵀ
//!
//! ```text
//!   e1 = |Σ_j C_ij (x̂_i x̂_j − X̂_ij)|    e2 = |Σ_j (x̂_i x̂_j − X̂_ij)|
//!   e3 = Σ_j |C_ij (x̂_i x̂_j − X̂_ij)|    e4 = Σ_j |x̂_i x̂_j − X̂_ij|
//! ```
//!
//! and the box measure β_i = min(1 − L_i, 1 + U_i), each in decreasing order; the point with
//! the smallest sum of rank positions is branched on (ties: the lower index). With B empty,
//! the most fractional point (smallest |x̂_i|).

use faer::Mat;

/// A multiplier above this marks X_ii ≥ 1 active (the authors' TOL_D, note B.4.10).
pub const ACTIVE_DUAL: f64 = 1e-4;
/// |x̄_i| within this of 1 counts as on the margin (note B.4.8).
pub const ON_MARGIN: f64 = 1e-4;

/// What the rule reads from a node's relaxation.
pub struct NodeView<'a> {
    pub c: &'a Mat<f64>,
    /// x̂, the relaxation's x.
    pub x_hat: &'a [f64],
    /// Y = [[X̂, x̂], [x̂ᵀ, 1]] of the relaxation.
    pub y: &'a Mat<f64>,
    /// The multiplier of X_ii ≥ 1 per point (0 without the row).
    pub diag_duals: &'a [f64],
    /// QP (24)'s x̄ for sign(x̂), when that labelling is feasible.
    pub x_bar: Option<&'a [f64]>,
    pub lower: &'a [f64],
    pub upper: &'a [f64],
}

/// The point to branch on among `undecided` (not empty).
pub fn choose(view: &NodeView<'_>, undecided: &[usize]) -> usize {
    let candidates: Vec<usize> = undecided
        .iter()
        .copied()
        .filter(|&i| {
            view.diag_duals[i] > ACTIVE_DUAL
                && view
                    .x_bar
                    .is_some_and(|x| (x[i].abs() - 1.0).abs() <= ON_MARGIN)
        })
        .collect();
    if candidates.is_empty() {
        return most_fractional(view.x_hat, undecided);
    }
    let rows: Vec<[f64; 5]> = candidates
        .iter()
        .map(|&i| {
            let (mut s1, mut s2, mut e3, mut e4) = (0.0, 0.0, 0.0, 0.0);
            for (j, &xj) in view.x_hat.iter().enumerate() {
                let d = view.x_hat[i] * xj - view.y[(i, j)];
                let cd = view.c[(i, j)] * d;
                s1 += cd;
                s2 += d;
                e3 += cd.abs();
                e4 += d.abs();
            }
            let beta = (1.0 - view.lower[i]).min(1.0 + view.upper[i]);
            [s1.abs(), s2.abs(), e3, e4, beta]
        })
        .collect();
    // One column per measure: e1–e4, β.
    let columns: Vec<Vec<f64>> = (0..5)
        .map(|m| rows.iter().map(|row| row[m]).collect())
        .collect();
    let mut rank_sum = vec![0usize; candidates.len()];
    for column in &columns {
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        // Decreasing; equal values share the better rank, so an uninformative measure (β with
        // unbounded boxes) adds nothing.
        order.sort_by(|&a, &b| column[b].total_cmp(&column[a]).then(a.cmp(&b)));
        let mut rank = 0;
        for (pos, &c) in order.iter().enumerate() {
            if pos > 0 && column[c] != column[order[pos - 1]] {
                rank = pos;
            }
            rank_sum[c] += rank;
        }
    }
    let best = (0..candidates.len())
        .min_by_key(|&c| (rank_sum[c], candidates[c]))
        .unwrap_or(0);
    candidates[best]
}

/// The undecided point with the smallest |x̂_i| (ties: the lower index).
pub fn most_fractional(x_hat: &[f64], undecided: &[usize]) -> usize {
    undecided
        .iter()
        .copied()
        .min_by(|&a, &b| x_hat[a].abs().total_cmp(&x_hat[b].abs()).then(a.cmp(&b)))
        .unwrap_or(0)
}
