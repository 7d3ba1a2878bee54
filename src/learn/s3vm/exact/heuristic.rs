//! The primal heuristic of note B.4.7 (paper Algorithm 1): QP (24) for a labelling, then the
//! 2-opt local search over pairs of movable points, then QP (24) for the new signs, until a
//! sweep finds nothing.
//!
//! A pair move keeps k = x_i + x_j (so (11) holds) and puts x_j = t, x_i = k − t with every
//! other coordinate fixed: the objective changes by a t² + b t + const with
//! a = C_ii + C_jj − 2C_ij > 0 and b from g̃ = Cx without i and j. Proposition 2: the best
//! feasible t (|t| ≥ 1, |k − t| ≥ 1) is among −b/(2a), ±1, k ± 1 (and k/2, as the authors'
//! code tries; candidates inside (−1, 1) snapped to ±1). Cx is kept, so a pair costs O(1) and
//! an accepted move O(n).

use faer::Mat;

use super::qp24::{self, Qp24Solution};
use super::ExactError;
use crate::learn::s3vm::sdp::relax::Balance;

/// Rounds of sweep + QP (24) at most; each strictly lowers the objective, so this only caps
/// a pathological run.
const MAX_ROUNDS: usize = 200;

/// The heuristic from the labelling `signs`: `movable` are the points whose sign the local
/// search may change (the undecided unlabeled points of a node). Returns the final labelling
/// and its QP (24) solution, or `None` when `signs` cannot meet the balance row.
pub fn improve(
    c: &Mat<f64>,
    signs: &[f64],
    movable: &[usize],
    balance: Option<&Balance>,
) -> Result<Option<(Vec<f64>, Qp24Solution)>, ExactError> {
    let Some(mut best) = qp24::solve(c, signs, balance)? else {
        return Ok(None);
    };
    let mut signs = signs.to_vec();
    for _ in 0..MAX_ROUNDS {
        let mut x = best.x.clone();
        if !sweep(c, &mut x, movable, best.objective) {
            break;
        }
        let next_signs: Vec<f64> = x
            .iter()
            .map(|&v| if v < 0.0 { -1.0 } else { 1.0 })
            .collect();
        match qp24::solve(c, &next_signs, balance)? {
            Some(next) if next.objective < best.objective => {
                best = next;
                signs = next_signs;
            }
            _ => break,
        }
    }
    Ok(Some((signs, best)))
}

/// One sweep of pair moves over `movable` in a fixed order (deterministic), accepting each
/// improving move at once. True when some move improved the objective.
fn sweep(c: &Mat<f64>, x: &mut [f64], movable: &[usize], objective: f64) -> bool {
    let n = x.len();
    let mut g = vec![0.0; n];
    for (j, &xj) in x.iter().enumerate() {
        for (gi, v) in g.iter_mut().zip(c.col_as_slice(j)) {
            *gi += v * xj;
        }
    }
    let threshold = 1e-12 * (1.0 + objective.abs());
    let mut improved = false;
    for (p, &i) in movable.iter().enumerate() {
        for &j in &movable[p + 1..] {
            let (cii, cjj, cij) = (c[(i, i)], c[(j, j)], c[(i, j)]);
            let k = x[i] + x[j];
            let gi = g[i] - cii * x[i] - cij * x[j];
            let gj = g[j] - cij * x[i] - cjj * x[j];
            let a = cii + cjj - 2.0 * cij;
            let b = -2.0 * k * cii + 2.0 * k * cij - 2.0 * gi + 2.0 * gj;
            if a <= 0.0 {
                continue;
            }
            let f = |t: f64| a * t * t + b * t;
            let now = f(x[j]);
            let mut best: Option<(f64, f64)> = None;
            for t in [-b / (2.0 * a), -1.0, 1.0, k - 1.0, k + 1.0, 0.5 * k] {
                let t = if t.abs() < 1.0 {
                    if t < 0.0 {
                        -1.0
                    } else {
                        1.0
                    }
                } else {
                    t
                };
                if (k - t).abs() < 1.0 {
                    continue;
                }
                let v = f(t);
                if v < now - threshold && best.map_or(true, |(bv, _)| v < bv) {
                    best = Some((v, t));
                }
            }
            if let Some((_, t)) = best {
                let di = (k - t) - x[i];
                let dj = t - x[j];
                x[i] = k - t;
                x[j] = t;
                let (ci, cj) = (c.col_as_slice(i), c.col_as_slice(j));
                for ((gm, a), b) in g.iter_mut().zip(ci).zip(cj) {
                    *gm += a * di + b * dj;
                }
                improved = true;
            }
        }
    }
    improved
}
