//! Bound tightening and cut management around relaxation (20) of the exact S3VM, the parts of
//! the node bounding loop (note B.4.6) between two SDP solves:
//!
//! - RLT separation and removal (note B.4.3, B.4.6 step 5): [`TightenValidParams::separate_cuts`];
//! - the projection of Remark 2 and node infeasibility (note B.4.1, B.4.4): [`project_boxes`];
//! - marginals-based tightening (note B.4.4, Lemmas 1–2):
//!   [`TightenValidParams::tighten_marginals`];
//! - OBBT (note B.4.1, eq. (18)) with Lagrangian certificates: [`TightenValidParams::obbt`],
//!   one problem at a time through [`Obbt`].
//!
//! Every bound here is valid for every point of model (8) in the node, i.e. every x with
//! L ≤ x ≤ U, |x_i| ≥ 1 (labelled points by their sign box, unlabeled by x_j² ≥ 1) and the
//! balance row (11); the parameters are those of note B.4.10.

use faer::linalg::solvers::{DenseSolveCore, Solve};
use faer::Mat;
use rayon::prelude::*;

use super::relax::{Relaxation, RelaxedSdp, RltCut, RltKind, RowKind};
use super::{SdpError, Sense};

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
            .filter(|(_, d)| d.is_nan() || d.abs() < self.params.drop_below)
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
        if l.is_nan() || u.is_nan() || l > u || l == f64::INFINITY || u == f64::NEG_INFINITY {
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
        // x_k² ≥ t_k (Lemma 2) on a side that is fixed: |x_k| ≥ √t_k.
        let t = relaxation.diag_lower.get(k).copied().unwrap_or(1.0);
        if t > 1.0 {
            if relaxation.lower[k] >= 1.0 {
                relaxation.lower[k] = relaxation.lower[k].max(t.sqrt());
            }
            if relaxation.upper[k] <= -1.0 {
                relaxation.upper[k] = relaxation.upper[k].min(-t.sqrt());
            }
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
        // The smallest x_k² in the box: t_k when both signs remain, else the nearer bound².
        let least = if l >= 1.0 {
            l * l
        } else if u <= -1.0 {
            u * u
        } else {
            t.max(1.0)
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

/// What marginals-based tightening did ([`TightenValidParams::tighten_marginals`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Marginals {
    /// The safe lower bound of the duals (note B.4.5), T from the incumbent: the LB of
    /// Δ = UB − LB.
    pub lower_bound: f64,
    /// How many entries of L, U and ū moved.
    pub changed: usize,
    /// `Some` when the node holds no point at or below the incumbent.
    pub infeasible: Option<Infeasibility>,
}

impl TightenValidParams {
    /// Marginals-based tightening (note B.4.4, eq. (23), Lemmas 1–2) of the node `relaxation`
    /// from a solve of its relaxation.
    ///
    /// Inputs: `relaxed`, what [`Relaxation::build`] made of `relaxation` for that solve (its
    /// rows' right-hand sides are the bounds the multipliers belong to); the solve's Y
    /// (`primal`, order n + 1) and `duals` (one per row, however inexact); `upper`, the
    /// incumbent's objective UB.
    ///
    /// Why it is valid: with the multipliers projected onto their signs, LB the safe bound of
    /// note B.4.5 and T bounding trace(Y) on the Y at or below UB, every Y of the relaxation
    /// with ⟨C̃, Y⟩ ≤ UB has ⟨C̃, Y⟩ ≥ LB + Σ_k λ_k·slack_k(Y), each term ≥ 0; so the slack of
    /// a row with λ_k > 0 is at most Δ/λ_k, Δ = UB − LB. The rank-one Y of every point of
    /// model (8) in the node is such a Y. Then:
    ///
    /// - x_i ≥ L_i with λ: U_i ≤ L_i + Δ/λ; x_i ≤ U_i with λ: L_i ≥ U_i − Δ/λ;
    /// - X_ii ≥ 1 with λ (Lemma 1): ū_i ≤ 1 + Δ/λ, and |x_i| ≤ √(1 + Δ/λ);
    /// - X_ii ≤ ū_i with λ (Lemma 2): x_i² ≥ t = ū_i − Δ/λ; when t > 1 and L_i > −√t the sign
    ///   is + and L_i ≥ √t, when U_i < √t it is − and U_i ≤ −√t.
    ///
    /// Only active rows are used (primal within `active_primal` of the bound, |dual| >
    /// `active_dual`); every result is widened by `widen` in the safe direction; the
    /// projection of Remark 2 ([`project_boxes`]) follows. Guarantees: every point of model
    /// (8) in the node with objective ≤ `upper` stays in the new boxes and has x_i² ≤ ū_i;
    /// bounds only shrink. Δ < 0 reports [`Infeasibility::Bound`] and leaves the boxes.
    pub fn tighten_marginals(
        &self,
        relaxation: &mut Relaxation,
        relaxed: &RelaxedSdp,
        primal: &Mat<f64>,
        duals: &[f64],
        upper: f64,
    ) -> Result<Marginals, TightenError> {
        let n = relaxation.lower.len();
        let order = relaxed.problem.order();
        if order != n + 1 || primal.nrows() != order || primal.ncols() != order {
            return Err(TightenError::Input(format!(
                "a node of {n} points, a relaxation of order {order} and a {}×{} Y",
                primal.nrows(),
                primal.ncols()
            )));
        }
        if relaxation.upper.len() != n
            || relaxation.diag_upper.len() != n
            || relaxation.diag_lower.len() != n
        {
            return Err(TightenError::Input(format!(
                "{n} lower, {} upper, {} diagonal upper and {} diagonal lower bounds",
                relaxation.upper.len(),
                relaxation.diag_upper.len(),
                relaxation.diag_lower.len()
            )));
        }
        if !upper.is_finite() {
            return Err(TightenError::Input(format!(
                "the incumbent's objective must be finite, got {upper}"
            )));
        }
        let lower_bound = relaxed.safe_lower_bound(duals, Some(upper))?.value;
        let mut outcome = Marginals {
            lower_bound,
            changed: 0,
            infeasible: None,
        };
        let delta = upper - lower_bound;
        if delta < 0.0 {
            outcome.infeasible = Some(Infeasibility::Bound);
            return Ok(outcome);
        }
        if !delta.is_finite() {
            return Ok(outcome);
        }
        let before = (
            relaxation.lower.clone(),
            relaxation.upper.clone(),
            relaxation.diag_upper.clone(),
            relaxation.diag_lower.clone(),
        );
        let p = &self.params;
        let w = p.widen;
        for ((kind, row), &dual) in relaxed
            .kinds
            .iter()
            .zip(relaxed.problem.constraints())
            .zip(duals)
        {
            let lambda = match row.sense {
                Sense::Ge => dual.max(0.0),
                Sense::Le => (-dual).max(0.0),
                Sense::Eq => continue,
            };
            if lambda <= p.active_dual || (row.value(primal) - row.rhs).abs() > p.active_primal {
                continue;
            }
            let reach = delta / lambda;
            let b = row.rhs;
            match *kind {
                RowKind::Lower(i) => tighten_upper(relaxation, i, b + reach + w),
                RowKind::Upper(i) => tighten_lower(relaxation, i, b - reach - w),
                RowKind::DiagLower(i) => {
                    let most = b + reach + w;
                    relaxation.diag_upper[i] = relaxation.diag_upper[i].min(most);
                    let s = (b + reach).sqrt() + w;
                    tighten_lower(relaxation, i, -s);
                    tighten_upper(relaxation, i, s);
                }
                RowKind::DiagUpper(i) => {
                    let t = b - reach - w;
                    if t > 1.0 {
                        let s = t.sqrt();
                        let (l, u) = (relaxation.lower[i], relaxation.upper[i]);
                        if l > -s {
                            tighten_lower(relaxation, i, s);
                        }
                        if u < s {
                            tighten_upper(relaxation, i, -s);
                        }
                        if l <= -s && u >= s {
                            relaxation.diag_lower[i] = relaxation.diag_lower[i].max(t);
                        }
                    }
                }
                RowKind::Corner | RowKind::Balance | RowKind::Cut(_) => {}
            }
        }
        outcome.infeasible = project_boxes(relaxation).err();
        outcome.changed = count_changes(&before.0, &relaxation.lower)
            + count_changes(&before.1, &relaxation.upper)
            + count_changes(&before.2, &relaxation.diag_upper)
            + count_changes(&before.3, &relaxation.diag_lower);
        Ok(outcome)
    }
}

fn tighten_lower(relaxation: &mut Relaxation, i: usize, bound: f64) {
    if bound > relaxation.lower[i] {
        relaxation.lower[i] = bound;
    }
}

fn tighten_upper(relaxation: &mut Relaxation, i: usize, bound: f64) {
    if bound < relaxation.upper[i] {
        relaxation.upper[i] = bound;
    }
}

fn count_changes(before: &[f64], after: &[f64]) -> usize {
    before.iter().zip(after).filter(|(a, b)| a != b).count()
}

/// Which end of x_k an OBBT problem bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// min x_k: a new L_k.
    Lower,
    /// max x_k: a new U_k.
    Upper,
}

/// One certified OBBT bound ([`Obbt::bound`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObbtBound {
    /// For [`Direction::Lower`] a value ≤ min x_k over the set of (18), for
    /// [`Direction::Upper`] a value ≥ max x_k (±∞ when the set is empty), not yet widened.
    pub bound: f64,
    /// The interior-point iterate's x_k at the end (not certified; bound − primal measures
    /// what the certificate gave away, 0 at an exact solve).
    pub primal: f64,
    pub iterations: usize,
}

/// The interior-point method's stopping rule for one OBBT problem (scaled units, UB = 1):
/// primal infeasibility below this and certified bound within it (relative) of the primal.
const OBBT_TOL: f64 = 1e-8;
const OBBT_MAX_ITERATIONS: usize = 60;

/// The data of one OBBT round (note B.4.1, eq. (18)) on the boxes of a node: for each k, min
/// and max x_k subject to xᵀCx ≤ UB, the balance row (11) and L ≤ x ≤ U without k's own two
/// bounds. [`Obbt::bound`] solves one of these; problems are independent (a driver may run
/// them on several threads).
///
/// Work in z = x/√UB (so zᵀCz ≤ 1). The certificate is Lagrangian: for min cᵀz and any
/// multipliers ν (balance), α ≥ 0 (lower bounds), β ≥ 0 (upper bounds), μ ≥ 0 (ellipsoid),
/// min_z cᵀz + μ(zᵀCz − 1) − ν(aᵀz − ρ') − αᵀ(z − l) + βᵀ(z − u) is a lower bound; with
/// h = c − νa − α + β the minimum over z is −hᵀC⁻¹h/(4μ), and the best μ gives
///
/// ```text
///   d(ν, α, β) = −√(hᵀC⁻¹h) + νρ' + αᵀl − βᵀu   ≤   min cᵀz over the set,
/// ```
///
/// valid for any multipliers, so an inexact solve still gives a valid bound. The multipliers
/// come from a primal–dual interior-point method on the problem itself (below); ν is then
/// re-optimised in closed form for the α, β found, and the best d over the iterations kept.
#[derive(Debug, Clone)]
pub struct Obbt {
    c: Mat<f64>,
    /// C⁻¹.
    c_inverse: Mat<f64>,
    /// L/√UB, U/√UB.
    lower: Vec<f64>,
    upper: Vec<f64>,
    /// The balance row's indicator a, ρ/√UB, C⁻¹a and aᵀC⁻¹a.
    balance: Option<ScaledBalance>,
    /// √UB.
    scale: f64,
}

#[derive(Debug, Clone)]
struct ScaledBalance {
    a: Vec<f64>,
    rho: f64,
    ka: Vec<f64>,
    aka: f64,
}

impl Obbt {
    /// The round's data from the node's C, boxes and balance row and the incumbent's
    /// objective `upper` (> 0; C ≻ 0 makes every objective positive but x = 0's).
    pub fn new(relaxation: &Relaxation, upper: f64) -> Result<Obbt, TightenError> {
        let n = relaxation.c.nrows();
        if relaxation.c.ncols() != n || relaxation.lower.len() != n || relaxation.upper.len() != n {
            return Err(TightenError::Input(format!(
                "a {}×{} C with {} lower and {} upper bounds",
                n,
                relaxation.c.ncols(),
                relaxation.lower.len(),
                relaxation.upper.len()
            )));
        }
        if !(upper.is_finite() && upper > 0.0) {
            return Err(TightenError::Input(format!(
                "the incumbent's objective must be finite and > 0, got {upper}"
            )));
        }
        let c = Mat::from_fn(n, n, |i, j| {
            0.5 * (relaxation.c[(i, j)] + relaxation.c[(j, i)])
        });
        let c_inverse = c
            .llt(faer::Side::Lower)
            .map_err(|_| SdpError::NotPositiveDefinite(f64::NAN))?
            .inverse();
        let scale = upper.sqrt();
        let balance = match &relaxation.balance {
            None => None,
            Some(b) => {
                let mut a = vec![0.0; n];
                for &j in &b.unlabeled {
                    let slot = a.get_mut(j).ok_or_else(|| {
                        TightenError::Input(format!("balance row: point {j} out of range"))
                    })?;
                    *slot = 1.0;
                }
                let ka = mat_vec(&c_inverse, &a);
                let aka = dot(&a, &ka);
                Some(ScaledBalance {
                    a,
                    rho: b.rho / scale,
                    ka,
                    aka,
                })
            }
        };
        Ok(Obbt {
            c,
            c_inverse,
            lower: relaxation.lower.iter().map(|l| l / scale).collect(),
            upper: relaxation.upper.iter().map(|u| u / scale).collect(),
            balance,
            scale,
        })
    }

    /// The certified bound of one problem of (18) (see [`Obbt`]), in x's units.
    pub fn bound(&self, k: usize, direction: Direction) -> Result<ObbtBound, TightenError> {
        let n = self.lower.len();
        if k >= n {
            return Err(TightenError::Input(format!("point {k} of {n}")));
        }
        let sign = match direction {
            Direction::Lower => 1.0,
            Direction::Upper => -1.0,
        };
        let solved = self.solve(k, sign);
        // min sign·z_k ≥ d: for Lower, x_k ≥ √UB·d; for Upper, x_k ≤ −√UB·d.
        Ok(ObbtBound {
            bound: sign * self.scale * solved.certified,
            primal: sign * self.scale * solved.objective,
            iterations: solved.iterations,
        })
    }

    /// d(ν, α, β) of [`Obbt`] for min sign·z_k, the larger of its value at `nu` and at the
    /// ν maximising it for these α, β. `alpha`, `beta` are indexed like `il`, `iu` and
    /// projected onto ≥ 0 here.
    #[allow(clippy::too_many_arguments)]
    fn certificate(
        &self,
        k: usize,
        sign: f64,
        il: &[usize],
        alpha: &[f64],
        iu: &[usize],
        beta: &[f64],
        nu: f64,
    ) -> f64 {
        let n = self.lower.len();
        let mut p = vec![0.0; n];
        p[k] = sign;
        let mut constant = 0.0;
        for (&i, &a) in il.iter().zip(alpha) {
            let a = a.max(0.0);
            p[i] -= a;
            constant += a * self.lower[i];
        }
        for (&i, &b) in iu.iter().zip(beta) {
            let b = b.max(0.0);
            p[i] += b;
            constant -= b * self.upper[i];
        }
        let kp = mat_vec(&self.c_inverse, &p);
        let Some(bal) = &self.balance else {
            return -dot(&p, &kp).max(0.0).sqrt() + constant;
        };
        let value = |nu: f64| {
            let q: f64 = (0..n)
                .map(|i| (p[i] - nu * bal.a[i]) * (kp[i] - nu * bal.ka[i]))
                .sum();
            -q.max(0.0).sqrt() + nu * bal.rho + constant
        };
        let (a, b, pp) = (bal.aka, dot(&bal.a, &kp), dot(&p, &kp));
        let rho2 = bal.rho * bal.rho;
        if rho2 > a * (1.0 + 1e-9) {
            // min zᵀCz on aᵀz = ρ' is ρ'²/(aᵀC⁻¹a) > 1: the set is empty.
            return f64::INFINITY;
        }
        let mut best = value(nu);
        if rho2 < a * (1.0 - 1e-9) {
            let reduced = (pp - b * b / a).max(0.0);
            let t = -bal.rho * (reduced / (1.0 - rho2 / a)).sqrt();
            best = best.max(value((b - t) / a));
        }
        best
    }

    /// The primal–dual interior-point method (Mehrotra predictor–corrector, infeasible
    /// start through slacks) on min sign·z_k s.t. zᵀCz + s₀ = 1, z_i − s_i = l_i (i ∈ il),
    /// z_i + s_i = u_i (i ∈ iu), aᵀz = ρ', slacks ≥ 0, with multipliers μ, α, β ≥ 0 and ν.
    /// Each Newton step eliminates to (2μC + (4μ/s₀)ggᵀ + diag(α/s_l, β/s_u)) Δz − aΔν = r,
    /// g = Cz, and aᵀΔz = −r_a: one Cholesky factor per iteration.
    fn solve(&self, k: usize, sign: f64) -> Solved {
        let n = self.lower.len();
        let il: Vec<usize> = (0..n)
            .filter(|&i| i != k && self.lower[i].is_finite())
            .collect();
        let iu: Vec<usize> = (0..n)
            .filter(|&i| i != k && self.upper[i].is_finite())
            .collect();
        let m = (1 + il.len() + iu.len()) as f64;
        let mut z = vec![0.0; n];
        let (mut s0, mut mu, mut nu) = (1.0, 1.0, 0.0);
        let mut sl: Vec<f64> = il.iter().map(|&i| (-self.lower[i]).max(1.0)).collect();
        let mut su: Vec<f64> = iu.iter().map(|&i| self.upper[i].max(1.0)).collect();
        let mut al = vec![1.0; il.len()];
        let mut be = vec![1.0; iu.len()];
        let mut best = f64::NEG_INFINITY;
        let mut iterations = 0;
        let (ra_of, a_vec) = match &self.balance {
            Some(b) => (b.rho, Some(&b.a)),
            None => (0.0, None),
        };
        loop {
            let g = mat_vec(&self.c, &z);
            let q = dot(&z, &g);
            best = best.max(self.certificate(k, sign, &il, &al, &iu, &be, nu));
            let objective = sign * z[k];
            let mut r_d: Vec<f64> = g.iter().map(|gi| 2.0 * mu * gi).collect();
            r_d[k] += sign;
            if let Some(a) = a_vec {
                for (r, ai) in r_d.iter_mut().zip(a) {
                    *r -= nu * ai;
                }
            }
            for (&i, &a) in il.iter().zip(&al) {
                r_d[i] -= a;
            }
            for (&i, &b) in iu.iter().zip(&be) {
                r_d[i] += b;
            }
            let r0 = s0 + q - 1.0;
            let rl: Vec<f64> = il
                .iter()
                .zip(&sl)
                .map(|(&i, s)| s - z[i] + self.lower[i])
                .collect();
            let ru: Vec<f64> = iu
                .iter()
                .zip(&su)
                .map(|(&i, s)| s + z[i] - self.upper[i])
                .collect();
            let ra = a_vec.map_or(0.0, |a| dot(a, &z) - ra_of);
            let infeasibility = (q - 1.0)
                .max(0.0)
                .max(ra.abs())
                .max(il.iter().map(|&i| self.lower[i] - z[i]).fold(0.0, f64::max))
                .max(iu.iter().map(|&i| z[i] - self.upper[i]).fold(0.0, f64::max));
            if (infeasibility <= OBBT_TOL && objective - best <= OBBT_TOL * (1.0 + objective.abs()))
                || iterations >= OBBT_MAX_ITERATIONS
                || best == f64::INFINITY
            {
                return Solved {
                    certified: best,
                    objective,
                    iterations,
                };
            }
            iterations += 1;
            let gap = (mu * s0 + dot(&al, &sl) + dot(&be, &su)) / m;
            let mut h = Mat::from_fn(n, n, |i, j| {
                2.0 * mu * self.c[(i, j)] + 4.0 * mu / s0 * g[i] * g[j]
            });
            for (t, &i) in il.iter().enumerate() {
                h[(i, i)] += al[t] / sl[t];
            }
            for (t, &i) in iu.iter().enumerate() {
                h[(i, i)] += be[t] / su[t];
            }
            let Ok(llt) = h.llt(faer::Side::Lower) else {
                return Solved {
                    certified: best,
                    objective,
                    iterations,
                };
            };
            let ha = a_vec.map(|a| solve_with(&llt, a));
            // The direction for complementarity targets (c₀, c_l, c_u): μs₀ + …-terms.
            let direction = |c0: f64, cl: &[f64], cu: &[f64]| -> Step {
                let mut rhs: Vec<f64> = r_d.iter().map(|r| -r).collect();
                let f0 = (c0 + mu * r0) / s0;
                for (r, gi) in rhs.iter_mut().zip(&g) {
                    *r -= 2.0 * gi * f0;
                }
                for (t, &i) in il.iter().enumerate() {
                    rhs[i] += (cl[t] + al[t] * rl[t]) / sl[t];
                }
                for (t, &i) in iu.iter().enumerate() {
                    rhs[i] -= (cu[t] + be[t] * ru[t]) / su[t];
                }
                let mut dz = solve_with(&llt, &rhs);
                let mut dnu = 0.0;
                if let (Some(a), Some(ha)) = (a_vec, &ha) {
                    dnu = (-ra - dot(a, &dz)) / dot(a, ha);
                    for (d, h) in dz.iter_mut().zip(ha) {
                        *d += dnu * h;
                    }
                }
                let ds0 = -r0 - 2.0 * dot(&g, &dz);
                let dmu = (c0 - mu * ds0) / s0;
                let dsl: Vec<f64> = (0..il.len()).map(|t| dz[il[t]] - rl[t]).collect();
                let dal: Vec<f64> = (0..il.len())
                    .map(|t| (cl[t] - al[t] * dsl[t]) / sl[t])
                    .collect();
                let dsu: Vec<f64> = (0..iu.len()).map(|t| -dz[iu[t]] - ru[t]).collect();
                let dbe: Vec<f64> = (0..iu.len())
                    .map(|t| (cu[t] - be[t] * dsu[t]) / su[t])
                    .collect();
                Step {
                    dz,
                    dnu,
                    ds0,
                    dmu,
                    dsl,
                    dal,
                    dsu,
                    dbe,
                }
            };
            let cl0: Vec<f64> = al.iter().zip(&sl).map(|(a, s)| -a * s).collect();
            let cu0: Vec<f64> = be.iter().zip(&su).map(|(b, s)| -b * s).collect();
            let affine = direction(-mu * s0, &cl0, &cu0);
            let step = |d: &Step| {
                let mut t: f64 = 1.0;
                let mut limit = |v: f64, dv: f64| {
                    if dv < 0.0 {
                        t = t.min(-v / dv);
                    }
                };
                limit(s0, d.ds0);
                limit(mu, d.dmu);
                for (v, dv) in sl.iter().zip(&d.dsl).chain(su.iter().zip(&d.dsu)) {
                    limit(*v, *dv);
                }
                for (v, dv) in al.iter().zip(&d.dal).chain(be.iter().zip(&d.dbe)) {
                    limit(*v, *dv);
                }
                t
            };
            let t_aff = step(&affine);
            let gap_aff = ((mu + t_aff * affine.dmu) * (s0 + t_aff * affine.ds0)
                + (0..il.len())
                    .map(|t| (al[t] + t_aff * affine.dal[t]) * (sl[t] + t_aff * affine.dsl[t]))
                    .sum::<f64>()
                + (0..iu.len())
                    .map(|t| (be[t] + t_aff * affine.dbe[t]) * (su[t] + t_aff * affine.dsu[t]))
                    .sum::<f64>())
                / m;
            let sigma = (gap_aff / gap).clamp(0.0, 1.0).powi(3);
            let target = sigma * gap;
            let c0 = target - mu * s0 - affine.dmu * affine.ds0;
            let cl: Vec<f64> = (0..il.len())
                .map(|t| target - al[t] * sl[t] - affine.dal[t] * affine.dsl[t])
                .collect();
            let cu: Vec<f64> = (0..iu.len())
                .map(|t| target - be[t] * su[t] - affine.dbe[t] * affine.dsu[t])
                .collect();
            let d = direction(c0, &cl, &cu);
            let t = (0.95 * step(&d)).min(1.0);
            if t < 1e-12 {
                return Solved {
                    certified: best,
                    objective,
                    iterations,
                };
            }
            for (zi, dzi) in z.iter_mut().zip(&d.dz) {
                *zi += t * dzi;
            }
            nu += t * d.dnu;
            s0 += t * d.ds0;
            mu += t * d.dmu;
            for (v, dv) in sl.iter_mut().zip(&d.dsl) {
                *v += t * dv;
            }
            for (v, dv) in al.iter_mut().zip(&d.dal) {
                *v += t * dv;
            }
            for (v, dv) in su.iter_mut().zip(&d.dsu) {
                *v += t * dv;
            }
            for (v, dv) in be.iter_mut().zip(&d.dbe) {
                *v += t * dv;
            }
        }
    }
}

/// What one OBBT solve found, in z's units for min sign·z_k.
struct Solved {
    certified: f64,
    objective: f64,
    iterations: usize,
}

/// One interior-point direction.
struct Step {
    dz: Vec<f64>,
    dnu: f64,
    ds0: f64,
    dmu: f64,
    dsl: Vec<f64>,
    dal: Vec<f64>,
    dsu: Vec<f64>,
    dbe: Vec<f64>,
}

/// What one OBBT round did ([`TightenValidParams::obbt`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ObbtRound {
    /// Problems solved and skipped (L_k ≥ 1 for min, U_k ≤ −1 for max, note B.4.1).
    pub solved: usize,
    pub skipped: usize,
    /// How many entries of L, U and ū moved.
    pub changed: usize,
    /// Interior-point iterations over all problems.
    pub iterations: usize,
    /// The largest certified bound − primal gap of a problem (x's units): what the
    /// certificates gave away.
    pub worst_certificate_gap: f64,
    /// `Some` when the node holds no point at or below the incumbent.
    pub infeasible: Option<Infeasibility>,
}

impl TightenValidParams {
    /// One round of OBBT (note B.4.1, eq. (18)) on the boxes of `relaxation`, for the
    /// incumbent's objective `upper`.
    ///
    /// Every problem is solved on the boxes as they were at the start of the round (the
    /// problems are independent); each new bound is the Lagrangian certificate of [`Obbt`],
    /// valid however inexactly the interior-point method stopped, widened by `widen`. The
    /// projection of Remark 2 follows ([`project_boxes`]; it also caps ū at max(L², U²)).
    /// Guarantees: every point of model (8) in the node with objective ≤ `upper` stays in the
    /// new boxes; after a round every bound is finite (the ellipsoid xᵀCx ≤ UB is bounded),
    /// unless the node is reported infeasible; bounds only shrink.
    pub fn obbt(&self, relaxation: &mut Relaxation, upper: f64) -> Result<ObbtRound, TightenError> {
        let obbt = Obbt::new(relaxation, upper)?;
        let n = relaxation.lower.len();
        let before = (
            relaxation.lower.clone(),
            relaxation.upper.clone(),
            relaxation.diag_upper.clone(),
        );
        let mut round = ObbtRound {
            solved: 0,
            skipped: 0,
            changed: 0,
            iterations: 0,
            worst_certificate_gap: 0.0,
            infeasible: None,
        };
        // The problems are independent (all use the boxes before the round), so they are
        // solved in parallel on the caller's rayon pool and applied in a fixed order: the
        // result does not depend on the number of threads.
        let problems: Vec<(usize, Direction)> = (0..n)
            .flat_map(|k| [(k, Direction::Lower), (k, Direction::Upper)])
            .filter(|&(k, direction)| match direction {
                Direction::Lower => before.0[k] < 1.0,
                Direction::Upper => before.1[k] > -1.0,
            })
            .collect();
        round.skipped = 2 * n - problems.len();
        let bounds: Vec<ObbtBound> = problems
            .par_iter()
            .map(|&(k, direction)| obbt.bound(k, direction))
            .collect::<Result<_, _>>()?;
        for (&(k, direction), found) in problems.iter().zip(bounds) {
            round.solved += 1;
            round.iterations += found.iterations;
            let gap = (found.bound - found.primal).abs();
            if gap.is_finite() {
                round.worst_certificate_gap = round.worst_certificate_gap.max(gap);
            }
            match direction {
                Direction::Lower => tighten_lower(relaxation, k, found.bound - self.params.widen),
                Direction::Upper => tighten_upper(relaxation, k, found.bound + self.params.widen),
            }
        }
        round.infeasible = project_boxes(relaxation).err();
        round.changed = count_changes(&before.0, &relaxation.lower)
            + count_changes(&before.1, &relaxation.upper)
            + count_changes(&before.2, &relaxation.diag_upper);
        Ok(round)
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// M v for a dense square M.
fn mat_vec(m: &Mat<f64>, v: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; m.nrows()];
    for (j, &vj) in v.iter().enumerate() {
        if vj != 0.0 {
            for (o, mij) in out.iter_mut().zip(m.col_as_slice(j)) {
                *o += mij * vj;
            }
        }
    }
    out
}

/// H⁻¹ b from H's Cholesky factor.
fn solve_with(llt: &faer::linalg::solvers::Llt<f64>, b: &[f64]) -> Vec<f64> {
    let rhs = Mat::from_fn(b.len(), 1, |i, _| b[i]);
    let x = llt.solve(&rhs);
    (0..b.len()).map(|i| x[(i, 0)]).collect()
}
