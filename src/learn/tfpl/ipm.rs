//! A primal–dual interior-point solver of τ-FPL for a linear scorer with few features.
//!
//! FISTA on dual (7) needs O(1/√R)-many steps as R shrinks (spambase, 57 features: 75 000 steps
//! at R = 1e-6) and, at large R, many more than the objective's own scale asks for, because the
//! α-block's curvature ½ caps the step while β's curvature is ~1/(mR). With few features the
//! primal is small, so a Newton-type method whose iteration count hardly depends on R is far
//! cheaper: 20–35 iterations on every R of the evaluation grid.
//!
//! Primal (6) as a convex QP (docs/tau-fpl.md §1.5). With top-k mean(s) = min_t t +
//! (1/k) Σ_j [s_j − t]₊ and l non-decreasing in the top-k mean, (6) is
//!
//!   min (1/m) Σ_i ξ_i² + (R/2)‖w‖²  over w, t, h, η ∈ ℝⁿ, ξ ∈ ℝᵐ, subject to
//!   ξ_i + x_iᵀw − h ≥ 1 (multiplier λ_i),  η_j − x_jᵀw + t ≥ 0 (μ_j),  η_j ≥ 0 (ζ_j),
//!   h − t − (1/k) Σ_j η_j = 0 (ν).
//!
//! (ξ needs no sign constraint: ξ_i ≥ 1 − z_i with z_i = x_iᵀw − h, and ξ_i² is smallest at
//! ξ_i = [1 − z_i]₊.) Stationarity gives w = (Σ λ_i x_i − Σ μ_j x_j)/R, Σλ = ν = Σμ and
//! μ_j = ν/k − ζ_j ≤ ν/k: with α = mλ and β = mμ this is (8) and Γ_k, so the QP's dual is (7).
//!
//! Each iteration is a Mehrotra predictor–corrector step. The Newton system is reduced by
//! eliminating ξ, λ, η, μ, ζ and the slacks entry by entry (all diagonal), leaving a symmetric
//! system in (Δw, Δt, Δh, Δν): an SPD (d+2)×(d+2) block S, factored once per iteration by
//! Cholesky, bordered by the equality's column, solved by a Schur complement on Δν. Forming S
//! costs O((m+n)d²), the rest O((m+n)d).
//!
//! Stopping is certified, as for FISTA: (mλ, mμ) is projected onto Γ_k (Algorithm 2,
//! [`crate::learn::projection::project_from`], started at the previous iteration's λ*) and
//! scaled optimally along its ray, which gives a feasible dual point and the lower bound D;
//! the primal iterate w gives P(w). The solver stops when the gain-relative gap of
//! [`super::TfplReport::relative_gap`] is ≤ tol, and returns the best primal and dual points
//! seen.
//!
//! A warm solve (a retrain) works with the negatives whose scores rank near or above the k-th
//! and adds back in flight those that climb ([`screen`]): every row still enters P(w) and the
//! certificate, only S and the other O(·d) products skip the rest.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use faer::linalg::solvers::Solve;
use ndarray::{s, Array2, ArrayView1, ArrayView2, Axis};

use super::{certified, dual_gain, primal_gain, relative_gap, Stop, TfplError, TfplParams};
use crate::data::rows::{dense_dot, gather_rows};
use crate::data::Rows;
use crate::learn::observe::FitStep;
use crate::learn::projection::{project_from, ProjectionWorkspace};

/// Iterations after which the solver gives up (it needs 20–40 on well-posed problems).
const MAX_ITERATIONS: u64 = 200;

/// Rows per block when S_ww is accumulated (a 512 × d block of doubles stays in cache for
/// d up to a few hundred).
const BLOCK_ROWS: usize = 512;

/// Relative ridges tried, in turn, when S fails its Cholesky factorisation.
const RIDGES: [f64; 4] = [0.0, 1e-14, 1e-12, 1e-10];

/// Fraction of the step to the boundary taken (keeps the iterate strictly interior).
const STEP_FRACTION: f64 = 0.99;

/// Iterations after which a step that raised the mean complementarity is followed by a plain
/// centring step (docs/tau-fpl.md §1.5, "A safeguarded corrector"). Before it, a rise is the
/// normal cost of shrinking a stale warm start's residuals.
const SAFEGUARD_AFTER: u64 = 10;

/// The least centring weight σ of a safeguarded step.
const SAFEGUARD_SIGMA: f64 = 0.5;

/// What the interior-point solve returns.
pub(super) struct IpmOutcome {
    /// The best primal point found.
    pub w: Vec<f64>,
    /// The best certified dual point (α, β) ∈ Γ_k, positives first, then every negative in
    /// `z`'s order (β = 0 for those screened out).
    pub dual: Vec<f64>,
    /// 1 − P(w) and the dual's 1 − D (see [`super::dual_gain`]).
    pub gain_primal: f64,
    pub gain_dual: f64,
    pub iterations: u64,
    pub stop: Stop,
    pub visits: u64,
    pub screening: Screening,
}

/// What the screening of a warm solve did ([`screen`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Screening {
    /// Negatives the solve started with (all of them when none was screened out).
    pub kept_first: usize,
    /// Negatives in the problem when it stopped.
    pub kept_last: usize,
    /// Iterations at which screened-out negatives were added back (see [`screen`]).
    pub readded: u32,
}

/// The iterate: primal (w, t, h, η, ξ), slacks (p, q) and multipliers (λ, μ, ζ, ν).
struct Point {
    w: Vec<f64>,
    t: f64,
    h: f64,
    eta: Vec<f64>,
    xi: Vec<f64>,
    p: Vec<f64>,
    q: Vec<f64>,
    lam: Vec<f64>,
    mu: Vec<f64>,
    zeta: Vec<f64>,
    nu: f64,
}

/// A search direction has the layout of a point.
type Direction = Point;

/// Residuals of the KKT system at a point (zero at the optimum, complementarity aside).
struct Residuals {
    w: Vec<f64>,
    xi: Vec<f64>,
    t: f64,
    h: f64,
    eta: Vec<f64>,
    p: Vec<f64>,
    q: Vec<f64>,
    e: f64,
}

/// The per-iteration factorisation: eliminated diagonals and the Cholesky factor of S.
struct Reduced {
    /// 1/(m/2 + p/λ) per positive.
    a: Vec<f64>,
    /// q/μ per negative.
    v: Vec<f64>,
    /// 1/(1 + v·ζ/η) per negative.
    e: Vec<f64>,
    /// (ζ/η)·e per negative.
    g: Vec<f64>,
    llt: faer::linalg::solvers::Llt<f64>,
    /// The equality's border b and S⁻¹b, and bᵀS⁻¹b + c.
    border: Vec<f64>,
    border_solved: Vec<f64>,
    schur: f64,
}

/// Solves (6) for the rows `z` (positives first: m of them, then the negatives). Sparse rows
/// are copied dense once; the caller checks that copy against the byte budget. A warm start
/// screens the negatives ([`screen`]).
pub(super) fn solve(
    z: &Rows,
    m: usize,
    k: usize,
    params: &TfplParams,
    warm: Option<&[f64]>,
    cancel: &AtomicBool,
    start: Instant,
) -> Result<IpmOutcome, TfplError> {
    solve_screened(z, m, k, params, warm, screen_size, cancel, start)
}

/// [`solve`] keeping `size(k, n)` negatives at a warm start.
#[allow(clippy::too_many_arguments)]
pub(super) fn solve_screened(
    z: &Rows,
    m: usize,
    k: usize,
    params: &TfplParams,
    warm: Option<&[f64]>,
    size: fn(usize, usize) -> usize,
    cancel: &AtomicBool,
    start: Instant,
) -> Result<IpmOutcome, TfplError> {
    let densified;
    let x = match z.as_dense() {
        Some(view) => view,
        None => {
            let mut dense = Array2::zeros((z.n_rows(), z.n_features()));
            for (i, mut row) in dense.rows_mut().into_iter().enumerate() {
                if let Some(out) = row.as_slice_mut() {
                    z.row(i).write_dense(out);
                }
            }
            densified = dense;
            densified.view()
        }
    };
    let (len, d) = x.dim();
    let n = len - m;
    let (xp, xn) = (x.slice(s![..m, ..]), x.slice(s![m.., ..]));
    let (mf, kf, reg) = (m as f64, k as f64, params.reg);
    let warm = warm.filter(|w| w.len() == d);
    let mut negs = match warm {
        Some(w) => screen(xn, w, k, size(k, n)),
        None => Negatives::all(xn),
    };
    let mut pt = match warm {
        Some(w) => warm_point(w, xp, negs.rows(), k),
        None => cold_point(d, m, n, kf),
    };
    let mut ws = ProjectionWorkspace::default();
    let mut scratch = Vec::new();
    let mut outcome = IpmOutcome {
        w: vec![0.0; d],
        dual: vec![0.0; len],
        gain_primal: 0.0,
        gain_dual: f64::INFINITY,
        iterations: 0,
        stop: Stop::Limit,
        visits: 0,
        screening: Screening {
            kept_first: negs.kept.len(),
            ..Screening::default()
        },
    };
    let mut alpha = vec![0.0; m];
    // The multipliers move little between late iterations, so each projection starts at
    // the previous one's λ* (the result does not depend on the start, only the work).
    let mut last_lambda = None;
    let mut last_mu_bar = f64::INFINITY;
    let mut block = vec![0.0; BLOCK_ROWS.min(len) * d];
    loop {
        if cancel.load(Ordering::Relaxed) {
            outcome.stop = Stop::Cancelled;
            break;
        }
        let w_view = ArrayView1::from(&pt.w[..]);
        let sp = scores(xp, &pt.w);
        let mut sn = scores(negs.rows(), &pt.w);
        // Screened-out negatives that reach the `size`-th largest kept score join the problem
        // (see `screen`); the primal gain is the full problem's, with every negative's score.
        let mut all_sn = Vec::new();
        if !negs.dropped.is_empty() {
            let mut sd: Vec<f64> = negs
                .dropped
                .iter()
                .map(|&j| negs.all.row(j).dot(&w_view))
                .collect();
            let bar = kth_largest(&sn, negs.size);
            if sd.iter().any(|s| *s >= bar) {
                let (joining, staying): (Vec<usize>, Vec<usize>) =
                    (0..sd.len()).partition(|&i| sd[i] >= bar);
                let scores: Vec<f64> = joining.iter().map(|&i| sd[i]).collect();
                sd = staying.iter().map(|&i| sd[i]).collect();
                pt.add_negatives(&scores, kf);
                sn.extend_from_slice(&scores);
                negs.add(&joining);
                outcome.screening.readded += 1;
            }
            all_sn.extend_from_slice(&sn);
            all_sn.extend_from_slice(&sd);
        }

        // The certificate: the primal gain at w, the dual gain at the projected multipliers
        // (with β = 0 for the screened-out negatives).
        let gain_p = primal_gain(
            &sp,
            if negs.dropped.is_empty() {
                &sn
            } else {
                &all_sn
            },
            k,
            0.5 * reg * dense_dot(&pt.w, &pt.w),
            &mut scratch,
        );
        if gain_p > outcome.gain_primal {
            outcome.gain_primal = gain_p;
            outcome.w.clone_from(&pt.w);
        }
        // From here on the problem is the kept negatives'.
        let xn = negs.rows();
        let mut beta = vec![0.0; negs.kept.len()];
        let a0: Vec<f64> = pt.lam.iter().map(|l| l * mf).collect();
        let b0: Vec<f64> = pt.mu.iter().map(|u| u * mf).collect();
        let stats = project_from(&a0, &b0, k, &mut alpha, &mut beta, &mut ws, last_lambda)?;
        last_lambda = Some(stats.lambda);
        outcome.visits += stats.visits;
        // Everything this iteration needs of Xpᵀ and Xnᵀ, each read once.
        let diagonals = Diagonals::of(&pt);
        let products = Products::of(xp, xn, &alpha, &beta, &pt, &diagonals);
        let v = &products.dual;
        let (gain_d, scale) = dual_gain(&alpha, dense_dot(v, v) / (mf * reg));
        if gain_d < outcome.gain_dual {
            outcome.gain_dual = gain_d;
            outcome.dual.fill(0.0);
            for (o, a) in outcome.dual.iter_mut().zip(&alpha) {
                *o = a * scale;
            }
            for (&j, b) in negs.kept.iter().zip(&beta) {
                outcome.dual[m + j] = b * scale;
            }
        }
        if certified(outcome.gain_primal, outcome.gain_dual, params.tol) {
            outcome.stop = Stop::Converged;
            break;
        }
        params.observer.report(FitStep::Solver {
            solver: "ipm",
            iterations: outcome.iterations,
            gap: relative_gap(outcome.gain_primal, outcome.gain_dual),
            tol: params.tol,
        });
        if outcome.iterations >= MAX_ITERATIONS || params.limit_reached(outcome.iterations, start) {
            break;
        }

        let r = residuals(&pt, &products.multipliers, &sp, &sn, reg, kf);
        let Some(red) = reduce(&pt, diagonals, &products, xp, xn, reg, kf, &mut block) else {
            // S lost positive definiteness to round-off: the iterate cannot improve further.
            break;
        };
        let (pairs, mu_bar) = (pt.pairs(), pt.mean_complementarity());

        // Predictor: the affine direction (complementarity driven to zero).
        let solve_for = |c_p: &[f64], c_q: &[f64], c_z: &[f64]| {
            direction(&pt, &r, &red, xp, xn, kf, c_p, c_q, c_z)
        };
        let neg = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| -a * b).collect::<Vec<_>>();
        let affine = solve_for(
            &neg(&pt.p, &pt.lam),
            &neg(&pt.q, &pt.mu),
            &neg(&pt.eta, &pt.zeta),
        );
        let step_aff = max_step(&pt, &affine);
        let after = |x: &[f64], dx: &[f64], y: &[f64], dy: &[f64]| -> f64 {
            (0..x.len())
                .map(|i| (x[i] + step_aff * dx[i]) * (y[i] + step_aff * dy[i]))
                .sum::<f64>()
        };
        let mu_aff = (after(&pt.p, &affine.p, &pt.lam, &affine.lam)
            + after(&pt.q, &affine.q, &pt.mu, &affine.mu)
            + after(&pt.eta, &affine.eta, &pt.zeta, &affine.zeta))
            / pairs;
        let sigma = (mu_aff / mu_bar).powi(3).min(1.0);

        // Corrector: centring at σμ̄ plus the second-order term of the affine step; a plain
        // centring step instead once the second-order term has stopped paying.
        let safeguard = outcome.iterations >= SAFEGUARD_AFTER && mu_bar > last_mu_bar;
        last_mu_bar = mu_bar;
        let (target, second_order) = if safeguard {
            (sigma.max(SAFEGUARD_SIGMA) * mu_bar, 0.0)
        } else {
            (sigma * mu_bar, 1.0)
        };
        let centre = |x: &[f64], y: &[f64], dx: &[f64], dy: &[f64]| -> Vec<f64> {
            (0..x.len())
                .map(|i| target - x[i] * y[i] - second_order * dx[i] * dy[i])
                .collect()
        };
        let dir = solve_for(
            &centre(&pt.p, &pt.lam, &affine.p, &affine.lam),
            &centre(&pt.q, &pt.mu, &affine.q, &affine.mu),
            &centre(&pt.eta, &pt.zeta, &affine.eta, &affine.zeta),
        );
        let step = (STEP_FRACTION * max_step(&pt, &dir)).min(1.0);
        if !(step > 0.0 && step.is_finite()) {
            break;
        }
        let mut next = take_step(&pt, &dir, step);
        if !next.is_finite() {
            break;
        }
        std::mem::swap(&mut pt, &mut next);
        outcome.iterations += 1;
    }
    outcome.screening.kept_last = negs.kept.len();
    Ok(outcome)
}

/// A warm solve works with the negatives ranked in the top ⌈[`SCREEN_FACTOR`]·k⌉ +
/// [`SCREEN_SLACK`] ([`screen`]). 3 rather than 1.5: at the small R that `calibration = "hash"`
/// settles on, a retrain's optimum moves further from the previous w, and with 1.5 most warm
/// solves had negatives climb back until every one was re-added (docs/benchmarks.md, the
/// factors measured on the 1 M-event replay).
const SCREEN_FACTOR: f64 = 3.0;
const SCREEN_SLACK: usize = 32;

/// Screening is not tried when it would keep more than this share of the negatives: the
/// restricted problem would cost nearly as much as the full one.
pub(super) const SCREEN_MAX_SHARE: f64 = 0.9;

/// Negatives a warm solve keeps at depth k (of n negatives).
pub(super) fn screen_size(k: usize, _n: usize) -> usize {
    ((SCREEN_FACTOR * k as f64).ceil() as usize).saturating_add(SCREEN_SLACK)
}

/// Screening of a warm solve: it starts with the negatives of the `size` largest scores under
/// the warm w (all of them when that is over [`SCREEN_MAX_SHARE`] of them), and at each iterate
/// the left-out ones that reach the `size`-th largest kept score join (`run`), so the kept
/// negatives always hold the `size` ≥ k largest scores.
///
/// Exact: leaving negatives out only lowers the top-k mean, so the restricted P_K ≤ P, equal
/// wherever the k largest scores are kept, so the restricted optimum is the full one. The
/// certificate is the full problem's anyway: P(w) over every row, and the dual padded with
/// β = 0 lies in the full Γ_k with the same g (docs/tau-fpl.md §1.5).
fn screen<'a>(xn: ArrayView2<'a, f64>, w: &[f64], k: usize, size: usize) -> Negatives<'a> {
    let n = xn.nrows();
    // At least k are kept, or Γ_k of the kept negatives would hold α = 0 only.
    let size = size.max(k);
    if size as f64 > SCREEN_MAX_SHARE * n as f64 {
        return Negatives::all(xn);
    }
    let scores = scores(xn, w);
    let mut order: Vec<usize> = (0..n).collect();
    order.select_nth_unstable_by(size, |a, b| scores[*b].total_cmp(&scores[*a]));
    let mut keep = vec![false; n];
    for &j in &order[..size] {
        keep[j] = true;
    }
    let kept: Vec<usize> = (0..n).filter(|&j| keep[j]).collect();
    let dropped = (0..n).filter(|&j| !keep[j]).collect();
    Negatives {
        all: xn,
        copy: Some(gather_rows(xn, &kept)),
        kept,
        dropped,
        size,
    }
}

/// The negatives a solve works with: `kept` (indices into `all`, rows copied in `copy` unless
/// all are kept) and the screened-out rest.
struct Negatives<'a> {
    all: ArrayView2<'a, f64>,
    copy: Option<Array2<f64>>,
    kept: Vec<usize>,
    dropped: Vec<usize>,
    /// The kept negatives include the `size` largest scores of all at every iterate.
    size: usize,
}

impl<'a> Negatives<'a> {
    fn all(xn: ArrayView2<'a, f64>) -> Self {
        Negatives {
            all: xn,
            copy: None,
            kept: (0..xn.nrows()).collect(),
            dropped: Vec::new(),
            size: xn.nrows(),
        }
    }

    /// The kept negatives' rows, in `kept` order.
    fn rows(&self) -> ArrayView2<'_, f64> {
        match &self.copy {
            Some(copy) => copy.view(),
            None => self.all.view(),
        }
    }

    /// Moves the dropped negatives at `positions` (ascending, into `dropped`) to the end of
    /// the kept ones.
    fn add(&mut self, positions: &[usize]) {
        let joining: Vec<usize> = positions.iter().map(|&i| self.dropped[i]).collect();
        let rows = gather_rows(self.all, &joining);
        self.kept.extend_from_slice(&joining);
        // The rows have the copy's columns, so appending them cannot fail; a fresh copy if
        // it did.
        let grown = self.copy.take().and_then(|mut copy| {
            copy.append(Axis(0), rows.view()).ok()?;
            Some(copy)
        });
        self.copy = Some(grown.unwrap_or_else(|| gather_rows(self.all, &self.kept)));
        let mut position = positions.iter().peekable();
        let mut index = 0;
        self.dropped.retain(|_| {
            let leaving = position.next_if_eq(&&index).is_some();
            index += 1;
            !leaving
        });
    }
}

/// The k-th largest of `values` (−∞ if there are fewer).
fn kth_largest(values: &[f64], k: usize) -> f64 {
    if k == 0 || k > values.len() {
        return f64::NEG_INFINITY;
    }
    let mut scratch = values.to_vec();
    *scratch
        .select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a))
        .1
}

/// The cold start: w = 0 and every slack and multiplier at a central value.
fn cold_point(d: usize, m: usize, n: usize, kf: f64) -> Point {
    let (mf, nu0) = (m as f64, 2.0);
    Point {
        w: vec![0.0; d],
        t: 0.0,
        h: 0.0,
        eta: vec![1.0; n],
        xi: vec![1.0; m],
        p: vec![1.0; m],
        q: vec![1.0; n],
        lam: vec![2.0 / mf; m],
        mu: vec![nu0 / (2.0 * kf); n],
        zeta: vec![nu0 / (2.0 * kf); n],
        nu: nu0,
    }
}

/// Complementarity of the warm start (every pair's product): small enough to skip the cold
/// start's first iterations, large enough that the residuals of a stale w can still shrink
/// with it.
const WARM_CENTRALITY: f64 = 1e-4;

/// A start from a previous model's `w`: its scores fix the threshold t (the k-th largest
/// negative score) and margins; then every complementarity pair is put at
/// [`WARM_CENTRALITY`] while the ξ, η and h equations hold exactly (λ_i = 2ξ_i/m,
/// μ_j + ζ_j = ν/k, h = t + Σ η/k), solving each pair's quadratic in closed form. Only the
/// w, t and ν residuals remain, which the infeasible method removes as it goes.
fn warm_point(w: &[f64], xp: ArrayView2<'_, f64>, xn: ArrayView2<'_, f64>, k: usize) -> Point {
    let (m, n) = (xp.nrows(), xn.nrows());
    let (mf, kf, c0) = (m as f64, k as f64, WARM_CENTRALITY);
    let sp = scores(xp, w);
    let sn = scores(xn, w);
    let mut sorted = sn.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let t = sorted[(k - 1).min(n - 1)];
    let build = |nu: f64| {
        let kappa = nu / kf;
        let (mut eta, mut q, mut mu, mut zeta) =
            (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for j in 0..n {
            (eta[j], q[j], mu[j], zeta[j]) = negative_pair(sn[j] - t, kappa, c0);
        }
        let h = t + eta.iter().sum::<f64>() / kf;
        let (mut xi, mut p, mut lam) = (vec![0.0; m], vec![0.0; m], vec![0.0; m]);
        for i in 0..m {
            // ξ − r = p, p·λ = c0, λ = 2ξ/m: ξ² − rξ − c0·m/2 = 0.
            let r = 1.0 - (sp[i] - h);
            xi[i] = (r + (r * r + 2.0 * c0 * mf).sqrt()) / 2.0;
            p[i] = xi[i] - r;
            lam[i] = 2.0 * xi[i] / mf;
        }
        let nu = lam.iter().sum::<f64>();
        Point {
            w: w.to_vec(),
            t,
            h,
            eta,
            xi,
            p,
            q,
            lam,
            mu,
            zeta,
            nu,
        }
    };
    // ν/k from the cold start's scale first, then from the λ that start implies.
    build(build(2.0).nu)
}

/// (η, q, μ, ζ) of a negative whose score is c above the threshold t, with μ + ζ = κ and both
/// complementarity products c0: η − c = q, q·μ = η·ζ = c0 give κη² − (κc + 2c0)η + c0·c = 0,
/// whose root above max(0, c) is η, and κq² + (κc − 2c0)q − c0·c = 0 for q; both have the
/// discriminant D² = (κc)² + 4c0². Each root is taken in the form that adds numbers of one
/// sign: far from t, η or q is tiny against |c|, and a difference would lose it to
/// cancellation (negatives joining a screened solve late, when c0 is small).
fn negative_pair(c: f64, kappa: f64, c0: f64) -> (f64, f64, f64, f64) {
    let root = (kappa * c).hypot(2.0 * c0);
    let (b_eta, b_q) = (kappa * c + 2.0 * c0, kappa * c - 2.0 * c0);
    let eta = if b_eta >= 0.0 {
        (b_eta + root) / (2.0 * kappa)
    } else {
        2.0 * c0 * c / (b_eta - root)
    };
    let q = if b_q <= 0.0 {
        (root - b_q) / (2.0 * kappa)
    } else {
        2.0 * c0 * c / (b_q + root)
    };
    (eta, q, c0 / q, c0 / eta)
}

/// Xpᵀa − Xnᵀb.
fn signed_transpose(
    xp: ArrayView2<'_, f64>,
    xn: ArrayView2<'_, f64>,
    a: &[f64],
    b: &[f64],
) -> Vec<f64> {
    let mut out = vec![0.0; xp.ncols()];
    add_transpose_product(xp, a, 1.0, &mut out);
    add_transpose_product(xn, b, -1.0, &mut out);
    out
}

/// `out` += sign · xᵀc. By faer's matrix product, which picks the machine's SIMD width at run
/// time (the crate's own loops are built for baseline x86-64: two lanes).
fn add_transpose_product(x: ArrayView2<'_, f64>, c: &[f64], sign: f64, out: &mut [f64]) {
    let (rows, d) = x.dim();
    match x.as_slice() {
        Some(flat) if rows > 0 && d > 0 => faer::linalg::matmul::matmul(
            faer::MatMut::from_column_major_slice_mut(out, d, 1),
            faer::Accum::Add,
            faer::MatRef::from_row_major_slice(flat, rows, d).transpose(),
            faer::MatRef::from_column_major_slice(c, rows, 1),
            sign,
            faer::Par::Seq,
        ),
        _ => {
            for (row, &ci) in x.outer_iter().zip(c) {
                let ci = sign * ci;
                out.iter_mut().zip(row).for_each(|(o, x)| *o += ci * x);
            }
        }
    }
}

/// x·w, one score per row, by faer's matrix product as [`add_transpose_product`].
fn scores(x: ArrayView2<'_, f64>, w: &[f64]) -> Vec<f64> {
    let (rows, d) = x.dim();
    match x.as_slice() {
        Some(flat) if rows > 0 && d > 0 => {
            let mut out = vec![0.0; rows];
            faer::linalg::matmul::matmul(
                faer::MatMut::from_column_major_slice_mut(&mut out, rows, 1),
                faer::Accum::Replace,
                faer::MatRef::from_row_major_slice(flat, rows, d),
                faer::MatRef::from_column_major_slice(w, d, 1),
                1.0,
                faer::Par::Seq,
            );
            out
        }
        _ => x.dot(&ArrayView1::from(w)).to_vec(),
    }
}

/// The residuals at `pt`, with `lam_mu_x` = Xpᵀλ − Xnᵀμ.
fn residuals(pt: &Point, lam_mu_x: &[f64], sp: &[f64], sn: &[f64], reg: f64, kf: f64) -> Residuals {
    let mf = pt.xi.len() as f64;
    Residuals {
        w: (0..pt.w.len())
            .map(|c| reg * pt.w[c] - lam_mu_x[c])
            .collect(),
        xi: pt
            .xi
            .iter()
            .zip(&pt.lam)
            .map(|(x, l)| 2.0 / mf * x - l)
            .collect(),
        t: pt.nu - pt.mu.iter().sum::<f64>(),
        h: pt.lam.iter().sum::<f64>() - pt.nu,
        eta: pt
            .mu
            .iter()
            .zip(&pt.zeta)
            .map(|(u, z)| -u - z + pt.nu / kf)
            .collect(),
        p: (0..pt.xi.len())
            .map(|i| pt.xi[i] + sp[i] - pt.h - 1.0 - pt.p[i])
            .collect(),
        q: (0..pt.eta.len())
            .map(|j| pt.eta[j] - sn[j] + pt.t - pt.q[j])
            .collect(),
        e: pt.h - pt.t - pt.eta.iter().sum::<f64>() / kf,
    }
}

/// The eliminated diagonals of an iterate.
struct Diagonals {
    /// 1/(m/2 + p/λ) per positive.
    a: Vec<f64>,
    /// q/μ per negative.
    v: Vec<f64>,
    /// 1/(1 + v·ζ/η) per negative.
    e: Vec<f64>,
    /// (ζ/η)·e per negative.
    g: Vec<f64>,
}

impl Diagonals {
    fn of(pt: &Point) -> Diagonals {
        let (m, n) = (pt.xi.len(), pt.eta.len());
        let half_m = 0.5 * m as f64;
        let a: Vec<f64> = (0..m)
            .map(|i| 1.0 / (half_m + pt.p[i] / pt.lam[i]))
            .collect();
        let v: Vec<f64> = (0..n).map(|j| pt.q[j] / pt.mu[j]).collect();
        let u: Vec<f64> = (0..n).map(|j| pt.zeta[j] / pt.eta[j]).collect();
        let e: Vec<f64> = (0..n).map(|j| 1.0 / (1.0 + v[j] * u[j])).collect();
        let g: Vec<f64> = (0..n).map(|j| u[j] * e[j]).collect();
        Diagonals { a, v, e, g }
    }
}

/// The products with Xpᵀ and Xnᵀ that an iteration needs before its directions: the
/// certificate's, the residuals' and S's borders.
struct Products {
    /// Xpᵀα − Xnᵀβ at the projected multipliers.
    dual: Vec<f64>,
    /// Xpᵀλ − Xnᵀμ at the iterate.
    multipliers: Vec<f64>,
    /// Xpᵀa, Xnᵀg and Xnᵀe, S's borders.
    sax: Vec<f64>,
    sgx: Vec<f64>,
    sex: Vec<f64>,
}

impl Products {
    /// All of them in one product per matrix (as many columns as vectors): the products are
    /// bound by reading the rows, so each further column costs little.
    fn of(
        xp: ArrayView2<'_, f64>,
        xn: ArrayView2<'_, f64>,
        alpha: &[f64],
        beta: &[f64],
        pt: &Point,
        diagonals: &Diagonals,
    ) -> Products {
        let d = xp.ncols();
        let positive = transpose_products(xp, &[alpha, &pt.lam, &diagonals.a]);
        let negative = transpose_products(xn, &[beta, &pt.mu, &diagonals.g, &diagonals.e]);
        let column = |products: &[f64], c: usize| products[c * d..(c + 1) * d].to_vec();
        let difference = |c: usize| -> Vec<f64> {
            column(&positive, c)
                .iter()
                .zip(&negative[c * d..(c + 1) * d])
                .map(|(p, n)| p - n)
                .collect()
        };
        Products {
            dual: difference(0),
            multipliers: difference(1),
            sax: column(&positive, 2),
            sgx: column(&negative, 2),
            sex: column(&negative, 3),
        }
    }
}

/// xᵀ[c₁ … c_k] as d × k, column-major, in one product.
fn transpose_products(x: ArrayView2<'_, f64>, columns: &[&[f64]]) -> Vec<f64> {
    let (rows, d) = x.dim();
    let mut out = vec![0.0; d * columns.len()];
    match x.as_slice() {
        Some(flat) if rows > 0 && d > 0 => {
            let stacked: Vec<f64> = columns.iter().flat_map(|c| c.iter().copied()).collect();
            faer::linalg::matmul::matmul(
                faer::MatMut::from_column_major_slice_mut(&mut out, d, columns.len()),
                faer::Accum::Replace,
                faer::MatRef::from_row_major_slice(flat, rows, d).transpose(),
                faer::MatRef::from_column_major_slice(&stacked, rows, columns.len()),
                1.0,
                faer::Par::Seq,
            );
        }
        _ => {
            for (c, column) in columns.iter().enumerate() {
                add_transpose_product(x, column, 1.0, &mut out[c * d..(c + 1) * d]);
            }
        }
    }
    out
}

/// The factorisation of S (None if S is not numerically SPD).
#[allow(clippy::too_many_arguments)]
fn reduce(
    pt: &Point,
    diagonals: Diagonals,
    products: &Products,
    xp: ArrayView2<'_, f64>,
    xn: ArrayView2<'_, f64>,
    reg: f64,
    kf: f64,
    block: &mut [f64],
) -> Option<Reduced> {
    let (m, n, d) = (pt.xi.len(), pt.eta.len(), pt.w.len());
    let Diagonals { a, v, e, g } = diagonals;
    let Products { sax, sgx, sex, .. } = products;

    // S_ww = R·I + Xpᵀ diag(a) Xp + Xnᵀ diag(g) Xn, bordered by Xpᵀa, Xnᵀg and Xnᵀe: most of
    // an iteration's work, so large problems split the rows in two halves summed on two
    // threads (a fixed split, so the result does not depend on the machine).
    let weights = Weights {
        xp: xp.view(),
        xn: xn.view(),
        a: &a,
        g: &g,
    };
    let sww = if m + n >= PARALLEL_GRAM_ROWS {
        let half = (m + n) / 2;
        let size = block.len();
        let (mut first, second) = rayon::join(
            || weights.gram(0..half, block),
            || weights.gram(half..m + n, &mut vec![0.0; size]),
        );
        first.iter_mut().zip(&second).for_each(|(x, y)| *x += y);
        first
    } else {
        weights.gram(0..m + n, block)
    };
    let (sum_a, sum_g) = (a.iter().sum::<f64>(), g.iter().sum::<f64>());
    let sum_e = e.iter().sum::<f64>();
    // S = [[S_ww, −Xnᵀg, −Xpᵀa], [·, Σg, 0], [·, 0, Σa]] over (w, t, h).
    let border_column = |c: usize| if c == d { sgx } else { sax };
    let corner = |c: usize| if c == d { sum_g } else { sum_a };
    let entry = |r: usize, c: usize| match (r < d, c < d) {
        (true, true) => sww[r.max(c) * d + r.min(c)] + if r == c { reg } else { 0.0 },
        (true, false) => -border_column(c)[r],
        (false, true) => -border_column(r)[c],
        (false, false) if r == c => corner(r),
        (false, false) => 0.0,
    };
    // Near a degenerate optimum (w* = 0: every score ties) round-off can cost S its positive
    // definiteness; a ridge of a few ulps of its largest diagonal entry restores it.
    let largest = (0..d + 2).map(|i| entry(i, i)).fold(0.0, f64::max);
    let llt = RIDGES.iter().find_map(|ridge| {
        faer::Mat::from_fn(d + 2, d + 2, |r, c| {
            entry(r, c) + if r == c { ridge * largest } else { 0.0 }
        })
        .llt(faer::Side::Lower)
        .ok()
    })?;
    let mut border: Vec<f64> = sex.iter().map(|x| x / kf).collect();
    border.push(1.0 - sum_e / kf);
    border.push(-1.0);
    let border_solved = solve_s(&llt, &border);
    let c = (0..n).map(|j| e[j] * v[j]).sum::<f64>() / (kf * kf);
    let schur = dense_dot(&border, &border_solved) + c;
    if !(schur > 0.0 && schur.is_finite()) {
        return None;
    }
    Some(Reduced {
        a,
        v,
        e,
        g,
        llt,
        border,
        border_solved,
        schur,
    })
}

/// Rows from which [`reduce`] forms S_ww on two threads.
const PARALLEL_GRAM_ROWS: usize = 2048;

/// The rows and their weights in S_ww: positives (rows of `xp`) by `a`, negatives (rows of
/// `xn`, numbered after the positives) by `g`.
struct Weights<'a> {
    xp: ArrayView2<'a, f64>,
    xn: ArrayView2<'a, f64>,
    a: &'a [f64],
    g: &'a [f64],
}

impl Weights<'_> {
    /// The share of `rows` in S_ww (row-major d × d, lower triangle only), as Σ YᵀY over
    /// blocks of rows scaled by √weight (a block stays in cache between its scaling and its
    /// product).
    fn gram(&self, rows: std::ops::Range<usize>, block: &mut [f64]) -> Vec<f64> {
        let (m, d) = (self.xp.nrows(), self.xp.ncols());
        let mut sww = vec![0.0; d * d];
        let capacity = block.len().checked_div(d).unwrap_or(0);
        let mut filled = 0;
        let last = rows.end;
        for i in rows {
            let (source, weight) = if i < m {
                (self.xp.row(i), self.a[i])
            } else {
                (self.xn.row(i - m), self.g[i - m])
            };
            let root = weight.sqrt();
            let target = &mut block[filled * d..(filled + 1) * d];
            // Over slices the loop vectorises; ndarray's element iterator does not.
            for (y, &x) in target.iter_mut().zip(contiguous(&source).iter()) {
                *y = root * x;
            }
            filled += 1;
            if filled == capacity || i + 1 == last {
                lower_gram_add(&block[..filled * d], filled, d, &mut sww);
                filled = 0;
            }
        }
        sww
    }
}

/// A row as a slice: borrowed when it is contiguous (always, for the solver's own copies),
/// else copied.
fn contiguous<'a>(row: &'a ArrayView1<'_, f64>) -> std::borrow::Cow<'a, [f64]> {
    match row.as_slice() {
        Some(slice) => std::borrow::Cow::Borrowed(slice),
        None => std::borrow::Cow::Owned(row.to_vec()),
    }
}

/// The lower triangle of the row-major d × d `sww` += YᵀY for the `rows` × d row-major `y`
/// (the upper one is left as it is): half of the general product's work, and S_ww is most of
/// an iteration's.
fn lower_gram_add(y: &[f64], rows: usize, d: usize, sww: &mut [f64]) {
    let y = faer::MatRef::from_row_major_slice(y, rows, d);
    let out = faer::MatMut::from_row_major_slice_mut(sww, d, d);
    faer::linalg::matmul::triangular::matmul(
        out,
        faer::linalg::matmul::triangular::BlockStructure::TriangularLower,
        faer::Accum::Add,
        y.transpose(),
        faer::linalg::matmul::triangular::BlockStructure::Rectangular,
        y,
        faer::linalg::matmul::triangular::BlockStructure::Rectangular,
        1.0,
        faer::Par::Seq,
    );
}

fn solve_s(llt: &faer::linalg::solvers::Llt<f64>, rhs: &[f64]) -> Vec<f64> {
    let b = faer::Mat::from_fn(rhs.len(), 1, |r, _| rhs[r]);
    let x = llt.solve(&b);
    (0..rhs.len()).map(|r| x[(r, 0)]).collect()
}

/// The Newton direction for complementarity right-hand sides `c_p`, `c_q`, `c_z` (the targets
/// of p∘λ, q∘μ, η∘ζ minus their current values).
#[allow(clippy::too_many_arguments)]
fn direction(
    pt: &Point,
    r: &Residuals,
    red: &Reduced,
    xp: ArrayView2<'_, f64>,
    xn: ArrayView2<'_, f64>,
    kf: f64,
    c_p: &[f64],
    c_q: &[f64],
    c_z: &[f64],
) -> Direction {
    let (m, n, d) = (pt.xi.len(), pt.eta.len(), pt.w.len());
    let half_m = 0.5 * m as f64;
    let rho: Vec<f64> = (0..m)
        .map(|i| -r.p[i] + half_m * r.xi[i] + c_p[i] / pt.lam[i])
        .collect();
    let phi: Vec<f64> = (0..n)
        .map(|j| -r.q[j] + c_q[j] / pt.mu[j] + red.v[j] * (c_z[j] / pt.eta[j] - r.eta[j]))
        .collect();
    let psi: Vec<f64> = (0..n).map(|j| r.eta[j] - c_z[j] / pt.eta[j]).collect();
    let a_rho: Vec<f64> = (0..m).map(|i| red.a[i] * rho[i]).collect();
    let g_phi_psi: Vec<f64> = (0..n).map(|j| red.g[j] * phi[j] + psi[j]).collect();
    let x_terms = signed_transpose(xp, xn, &a_rho, &g_phi_psi);
    let mut rhs: Vec<f64> = (0..d).map(|c| -r.w[c] + x_terms[c]).collect();
    rhs.push(-r.t + g_phi_psi.iter().sum::<f64>());
    rhs.push(-r.h - a_rho.iter().sum::<f64>());
    let r2 = r.e - (0..n).map(|j| red.e[j] * phi[j]).sum::<f64>() / kf;
    let y1 = solve_s(&red.llt, &rhs);
    let d_nu = (dense_dot(&red.border, &y1) - r2) / red.schur;
    let z: Vec<f64> = y1
        .iter()
        .zip(&red.border_solved)
        .map(|(y, b)| y - b * d_nu)
        .collect();
    let (dw, dt, dh) = (z[..d].to_vec(), z[d], z[d + 1]);
    let xp_dw = scores(xp, &dw);
    let xn_dw = scores(xn, &dw);
    let d_lam: Vec<f64> = (0..m)
        .map(|i| red.a[i] * (rho[i] - xp_dw[i] + dh))
        .collect();
    let d_eta: Vec<f64> = (0..n)
        .map(|j| red.e[j] * (phi[j] + xn_dw[j] - dt - red.v[j] * d_nu / kf))
        .collect();
    let d_mu: Vec<f64> = (0..n)
        .map(|j| red.g[j] * (xn_dw[j] - dt + phi[j]) + red.e[j] * d_nu / kf + psi[j])
        .collect();
    Direction {
        zeta: (0..n)
            .map(|j| (c_z[j] - pt.zeta[j] * d_eta[j]) / pt.eta[j])
            .collect(),
        xi: (0..m).map(|i| half_m * (d_lam[i] - r.xi[i])).collect(),
        p: (0..m)
            .map(|i| (c_p[i] - pt.p[i] * d_lam[i]) / pt.lam[i])
            .collect(),
        q: (0..n)
            .map(|j| (c_q[j] - pt.q[j] * d_mu[j]) / pt.mu[j])
            .collect(),
        w: dw,
        t: dt,
        h: dh,
        eta: d_eta,
        lam: d_lam,
        mu: d_mu,
        nu: d_nu,
    }
}

/// The largest step in [0, 1] keeping every slack and multiplier non-negative.
fn max_step(pt: &Point, dir: &Direction) -> f64 {
    let mut step = 1.0f64;
    for (x, dx) in [
        (&pt.p, &dir.p),
        (&pt.q, &dir.q),
        (&pt.eta, &dir.eta),
        (&pt.lam, &dir.lam),
        (&pt.mu, &dir.mu),
        (&pt.zeta, &dir.zeta),
    ] {
        for (v, dv) in x.iter().zip(dx.iter()) {
            if *dv < 0.0 {
                step = step.min(-v / dv);
            }
        }
    }
    step
}

fn take_step(pt: &Point, dir: &Direction, step: f64) -> Point {
    let add = |x: &[f64], dx: &[f64]| -> Vec<f64> {
        x.iter().zip(dx).map(|(x, d)| x + step * d).collect()
    };
    Point {
        w: add(&pt.w, &dir.w),
        t: pt.t + step * dir.t,
        h: pt.h + step * dir.h,
        eta: add(&pt.eta, &dir.eta),
        xi: add(&pt.xi, &dir.xi),
        p: add(&pt.p, &dir.p),
        q: add(&pt.q, &dir.q),
        lam: add(&pt.lam, &dir.lam),
        mu: add(&pt.mu, &dir.mu),
        zeta: add(&pt.zeta, &dir.zeta),
        nu: pt.nu + step * dir.nu,
    }
}

impl Point {
    /// The complementarity pairs: p·λ, q·μ and η·ζ, m + 2n of them.
    fn pairs(&self) -> f64 {
        (self.xi.len() + 2 * self.eta.len()) as f64
    }

    /// The mean of the complementarity products over [`Point::pairs`].
    fn mean_complementarity(&self) -> f64 {
        (dense_dot(&self.p, &self.lam)
            + dense_dot(&self.q, &self.mu)
            + dense_dot(&self.eta, &self.zeta))
            / self.pairs()
    }

    /// Adds negatives with the given scores to the iterate, each pair's complementarity at the
    /// current average and μ + ζ at the kept negatives' mean, so that their η and q equations
    /// hold; the other residuals they change shrink with the rest.
    fn add_negatives(&mut self, scores: &[f64], kf: f64) {
        let n = self.eta.len() as f64;
        let c0 = self.mean_complementarity();
        let kappa = match self
            .mu
            .iter()
            .zip(&self.zeta)
            .map(|(u, z)| u + z)
            .sum::<f64>()
            / n
        {
            kappa if kappa > 0.0 && kappa.is_finite() => kappa,
            _ => self.nu / kf,
        };
        for s in scores {
            let (eta, q, mu, zeta) = negative_pair(s - self.t, kappa, c0);
            self.eta.push(eta);
            self.q.push(q);
            self.mu.push(mu);
            self.zeta.push(zeta);
        }
    }

    fn is_finite(&self) -> bool {
        [self.t, self.h, self.nu].iter().all(|v| v.is_finite())
            && [
                &self.w, &self.eta, &self.xi, &self.p, &self.q, &self.lam, &self.mu, &self.zeta,
            ]
            .iter()
            .all(|v| v.iter().all(|x| x.is_finite()))
    }
}
