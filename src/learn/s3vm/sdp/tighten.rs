//! Bound tightening and cut management around relaxation (20) of the exact S3VM, the parts of
//! the node bounding loop (note B.4.6) between two SDP solves:
//!
//! - RLT separation and removal (note B.4.3, B.4.6 step 5): [`TightenValidParams::separate_cuts`];
//! - the projection of Remark 2 and node infeasibility (note B.4.1, B.4.4): [`project_boxes`];
//!
//! Every bound here is valid for every point of model (8) in the node, i.e. every x with
//! L ≤ x ≤ U, |x_i| ≥ 1 (labelled points by their sign box, unlabeled by x_j² ≥ 1) and the
//! balance row (11); the parameters are those of note B.4.10.

use faer::Mat;

use super::relax::{Relaxation, RelaxedSdp, RltCut, RltKind, RowKind};
use super::SdpError;

/// What can go wrong in this module: bad parameters or inputs that do not fit together.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TightenError {
    #[error("tighten: {0}")]
    Param(String),
    #[error("tighten: {0}")]
    Input(String),
    #[error(transparent)]
    Sdp(#[from] SdpError),
}

/// The tolerances and caps of note B.4.10 (unchecked); [`TightenParams::check`] validates them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TightenParams {
    /// A new RLT cut must be violated by more than this (absolute, in the cut's units).
    pub min_violation: f64,
    /// At most this many new cuts per point and round (3 → 3n).
    pub cuts_per_point: usize,
    /// A cut whose |dual| is below this is dropped.
    pub drop_below: f64,
    /// Every tightened bound is widened by this in the safe direction (TOL_BOUND).
    pub widen: f64,
    /// A row is active when its primal value is within this of its bound (TOL_P).
    pub active_primal: f64,
    /// … and its |dual| exceeds this (TOL_D).
    pub active_dual: f64,
}

impl Default for TightenParams {
    fn default() -> TightenParams {
        TightenParams {
            min_violation: 1e-2,
            cuts_per_point: 3,
            drop_below: 1e-4,
            widen: 1e-5,
            active_primal: 1e-5,
            active_dual: 1e-4,
        }
    }
}

impl TightenParams {
    pub fn check(self) -> Result<TightenValidParams, TightenError> {
        let nonnegative = [
            ("min_violation", self.min_violation),
            ("drop_below", self.drop_below),
            ("widen", self.widen),
            ("active_primal", self.active_primal),
            ("active_dual", self.active_dual),
        ];
        for (name, v) in nonnegative {
            if !(v.is_finite() && v >= 0.0) {
                return Err(TightenError::Param(format!(
                    "{name} must be finite and ≥ 0, got {v}"
                )));
            }
        }
        Ok(TightenValidParams { params: self })
    }
}

/// Checked [`TightenParams`]: the tightening steps are its methods.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TightenValidParams {
    params: TightenParams,
}

/// A new RLT cut and how much the solved Y violates it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeparatedCut {
    pub cut: RltCut,
    /// rhs − row value at Y (> 0: violated), in the row's units of (21).
    pub violation: f64,
}

/// One round of cut management (note B.4.6 step 5).
#[derive(Debug, Clone, PartialEq)]
pub struct CutRound {
    /// Indices into the current cut list of the cuts to drop, ascending.
    pub drop: Vec<usize>,
    /// The new cuts, most violated first.
    pub add: Vec<SeparatedCut>,
}

impl CutRound {
    /// The next cut list: `cuts` without [`CutRound::drop`], then [`CutRound::add`].
    pub fn apply(&self, cuts: &[RltCut]) -> Vec<RltCut> {
        let mut dropped = vec![false; cuts.len()];
        for &d in &self.drop {
            if let Some(flag) = dropped.get_mut(d) {
                *flag = true;
            }
        }
        cuts.iter()
            .zip(&dropped)
            .filter(|(_, &d)| !d)
            .map(|(&c, _)| c)
            .chain(self.add.iter().map(|s| s.cut))
            .collect()
    }
}

/// The one form of a cut among its equal twins: the product (21) is symmetric, so T1 and T2
/// on (j, i) are the same row as on (i, j), and T3 on (j, i) is T4 on (i, j).
fn canonical(cut: RltCut) -> RltCut {
    if cut.i < cut.j {
        return cut;
    }
    let kind = match cut.kind {
        RltKind::T1 => RltKind::T1,
        RltKind::T2 => RltKind::T2,
        RltKind::T3 => RltKind::T4,
        RltKind::T4 => RltKind::T3,
    };
    RltCut {
        i: cut.j,
        j: cut.i,
        kind,
    }
}

/// The violation of the RLT cut (21) at the symmetric Y = [[X, x], [xᵀ, 1]] of order n + 1
/// with the boxes of `relaxation`: the product's bound minus its linearised value, e.g. for T1
/// −(X_ij − U_j x_i − U_i x_j + U_i U_j). `None` when a bound the cut uses is infinite or the
/// indices do not fit.
pub fn rlt_violation(relaxation: &Relaxation, y: &Mat<f64>, cut: RltCut) -> Option<f64> {
    let n = relaxation.lower.len();
    let RltCut { i, j, kind } = cut;
    if i == j || i >= n || j >= n || y.nrows() != n + 1 || y.ncols() != n + 1 {
        return None;
    }
    let (xi, xj, xij) = (y[(i, n)], y[(j, n)], y[(i, j)]);
    let (li, ui) = (relaxation.lower[i], relaxation.upper[i]);
    let (lj, uj) = (relaxation.lower[j], relaxation.upper[j]);
    // (bound of x_i, bound of x_j, sign): the product s·(x_i − a)(x_j − b) ≥ 0 with s = +1
    // for two bounds of the same side, −1 for mixed sides, linearised by X_ij.
    let (a, b, s) = match kind {
        RltKind::T1 => (ui, uj, 1.0),
        RltKind::T2 => (li, lj, 1.0),
        RltKind::T3 => (li, uj, -1.0),
        RltKind::T4 => (ui, lj, -1.0),
    };
    if !(a.is_finite() && b.is_finite()) {
        return None;
    }
    Some(-s * (xij - b * xi - a * xj + a * b))
}

/// The multipliers of the cut rows of `relaxed`, in the order of its cut list (the order
/// [`Relaxation::build`] adds them), from the solve's `duals` (one per row).
pub fn cut_duals(relaxed: &RelaxedSdp, duals: &[f64]) -> Result<Vec<f64>, TightenError> {
    if duals.len() != relaxed.kinds.len() {
        return Err(TightenError::Input(format!(
            "{} multipliers for {} rows",
            duals.len(),
            relaxed.kinds.len()
        )));
    }
    Ok(relaxed
        .kinds
        .iter()
        .zip(duals)
        .filter(|(kind, _)| matches!(kind, RowKind::Cut(_)))
        .map(|(_, &d)| d)
        .collect())
}

impl TightenValidParams {
    pub fn params(&self) -> &TightenParams {
        &self.params
    }

    /// Cut management after a solve (note B.4.3, B.4.6 step 5, B.4.10).
    ///
    /// Inputs: the node's `relaxation` (its boxes, possibly tightened since the solve, and its
    /// cut list), the solved Y (order n + 1) and `cut_duals`, one multiplier per cut of
    /// `relaxation.cuts` ([`cut_duals`]).
    ///
    /// Guarantees: `drop` lists the cuts with |dual| < `drop_below`; `add` holds at most
    /// `cuts_per_point`·n cuts, each violated at Y by more than `min_violation`, most violated
    /// first (ties by pair and kind), only on pairs whose bounds the cut uses are finite, none
    /// equal to a cut of the current list (kept or dropped) or to another added one (T1, T2
    /// symmetric in the pair, T3 on (j, i) = T4 on (i, j)); added cuts have i < j.
    pub fn separate_cuts(
        &self,
        relaxation: &Relaxation,
        y: &Mat<f64>,
        cut_duals: &[f64],
    ) -> Result<CutRound, TightenError> {
        let n = relaxation.lower.len();
        if relaxation.upper.len() != n || y.nrows() != n + 1 || y.ncols() != n + 1 {
            return Err(TightenError::Input(format!(
                "boxes of {} and {} points with a {}×{} Y",
                n,
                relaxation.upper.len(),
                y.nrows(),
                y.ncols()
            )));
        }
        if cut_duals.len() != relaxation.cuts.len() {
            return Err(TightenError::Input(format!(
                "{} cut multipliers for {} cuts",
                cut_duals.len(),
                relaxation.cuts.len()
            )));
        }
        let drop = cut_duals
            .iter()
            .enumerate()
            .filter(|(_, d)| !(d.abs() >= self.params.drop_below))
            .map(|(k, _)| k)
            .collect();
        let existing: std::collections::HashSet<(usize, usize, u8)> =
            relaxation.cuts.iter().map(|&c| key(canonical(c))).collect();
        let mut found = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                for kind in [RltKind::T1, RltKind::T2, RltKind::T3, RltKind::T4] {
                    let cut = RltCut { i, j, kind };
                    if let Some(violation) = rlt_violation(relaxation, y, cut) {
                        if violation > self.params.min_violation && !existing.contains(&key(cut)) {
                            found.push(SeparatedCut { cut, violation });
                        }
                    }
                }
            }
        }
        // Stable: equal violations keep the (i, j, kind) order of the loop.
        found.sort_by(|a, b| b.violation.total_cmp(&a.violation));
        found.truncate(self.params.cuts_per_point.saturating_mul(n));
        Ok(CutRound { drop, add: found })
    }
}

fn key(cut: RltCut) -> (usize, usize, u8) {
    let kind = match cut.kind {
        RltKind::T1 => 1,
        RltKind::T2 => 2,
        RltKind::T3 => 3,
        RltKind::T4 => 4,
    };
    (cut.i, cut.j, kind)
}

/// Why a node holds no point of model (8) (note B.4.4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Infeasibility {
    /// L_i > U_i (or a NaN or an infinite bound on the wrong side).
    EmptyBox(usize),
    /// L_i > −1 and U_i < 1: neither sign fits |x_i| ≥ 1.
    NoSign(usize),
    /// ū_i < 1 (or below L_i², U_i² of a sign-fixed box): X_ii = x_i² ≥ 1 cannot hold.
    Diagonal(usize),
    /// The boxes make Σ_j x_j = ρ (11) impossible.
    Balance,
    /// The safe lower bound exceeds the incumbent: nothing in the node is at or below it.
    Bound,
}

/// How many pieces the set of reachable balance sums may keep before it is replaced by its
/// hull (a superset: the test stays valid, only weaker).
const BALANCE_PIECES: usize = 64;

/// The projection of Remark 2 (note B.4.1) and the infeasibility tests of note B.4.4, in
/// place on the boxes of `relaxation`.
///
/// Guarantees: L_k > −1 becomes L_k = max(L_k, 1) and U_k < 1 becomes U_k = min(U_k, −1)
/// (every point of model (8) has |x_k| ≥ 1); ū_k becomes min(ū_k, max(L_k², U_k²)) when both
/// bounds are finite; no point of model (8) in the node is lost. `Err` when the node holds no
/// such point: a box empty or with no sign, ū_k < 1 or below the square of the nearest bound
/// of a sign-fixed box, or a balance row (11) no choice of x_j ∈ [L_j, U_j], |x_j| ≥ 1 can
/// meet (up to 1e-9·(1 + |ρ|)).
pub fn project_boxes(relaxation: &mut Relaxation) -> Result<(), Infeasibility> {
    let n = relaxation.lower.len();
    for k in 0..n {
        let (l, u) = (relaxation.lower[k], relaxation.upper[k]);
        if !(l <= u) || l == f64::INFINITY || u == f64::NEG_INFINITY {
            return Err(Infeasibility::EmptyBox(k));
        }
        if l > -1.0 && u < 1.0 {
            return Err(Infeasibility::NoSign(k));
        }
        if l > -1.0 {
            relaxation.lower[k] = l.max(1.0);
        }
        if u < 1.0 {
            relaxation.upper[k] = u.min(-1.0);
        }
        let (l, u) = (relaxation.lower[k], relaxation.upper[k]);
        if l > u {
            return Err(Infeasibility::EmptyBox(k));
        }
        let Some(d) = relaxation.diag_upper.get_mut(k) else {
            continue;
        };
        if l.is_finite() && u.is_finite() {
            *d = d.min((l * l).max(u * u));
        }
        // The smallest x_k² in the box: 1 when both signs remain, else the nearer bound².
        let least = if l >= 1.0 {
            l * l
        } else if u <= -1.0 {
            u * u
        } else {
            1.0
        };
        if *d < least {
            return Err(Infeasibility::Diagonal(k));
        }
    }
    if let Some(balance) = &relaxation.balance {
        if !balance_reachable(relaxation, &balance.unlabeled, balance.rho) {
            return Err(Infeasibility::Balance);
        }
    }
    Ok(())
}

/// Whether ρ lies in the set of sums Σ_j x_j with x_j ∈ [L_j, U_j] and |x_j| ≥ 1 (after
/// [`project_boxes`]' projection each x_j ranges over one interval, or over [L_j, −1] ∪ [1, U_j]
/// when both signs remain): the Minkowski sum of these unions, pieces merged, replaced by
/// its hull past [`BALANCE_PIECES`] pieces.
fn balance_reachable(relaxation: &Relaxation, unlabeled: &[usize], rho: f64) -> bool {
    let mut sums: Vec<(f64, f64)> = vec![(0.0, 0.0)];
    for &j in unlabeled {
        let (Some(&l), Some(&u)) = (relaxation.lower.get(j), relaxation.upper.get(j)) else {
            continue;
        };
        let pieces: Vec<(f64, f64)> = if l <= -1.0 && u >= 1.0 {
            vec![(l, -1.0), (1.0, u)]
        } else {
            vec![(l, u)]
        };
        let mut next: Vec<(f64, f64)> = sums
            .iter()
            .flat_map(|&(a, b)| pieces.iter().map(move |&(c, d)| (a + c, b + d)))
            .collect();
        next.sort_by(|p, q| p.0.total_cmp(&q.0));
        let mut merged: Vec<(f64, f64)> = Vec::with_capacity(next.len());
        for (a, b) in next {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        if merged.len() > BALANCE_PIECES {
            let low = merged.first().map_or(0.0, |p| p.0);
            let high = merged.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            merged = vec![(low, high)];
        }
        sums = merged;
    }
    let slack = 1e-9 * (1.0 + rho.abs());
    sums.iter()
        .any(|&(a, b)| rho >= a - slack && rho <= b + slack)
}
