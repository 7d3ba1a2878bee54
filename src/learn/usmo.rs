//! USMO: sequential minimal optimisation for the positive-unlabeled double-hinge SVM.
//!
//! Paper: E. Sansone, F. G. B. De Natale, Z.-H. Zhou, "Efficient Training for Positive Unlabeled
//! Learning", TPAMI 41(11), 2019. The maths follows `docs/usmo.md`, which re-derives the paper
//! and corrects it. With p labelled positives P and n unlabeled samples U:
//!
//! - c1 = π/(2λp), c2 = 1/(2λn) (docs/usmo.md §1.2);
//! - dual (6): min F(σ,δ) = ½σ'Qσ − c1 q'σ − ½1'δ  s.t. 1'σ = c1 p, δ/2 ≤ σ ≤ c2 − δ/2,
//!   0 ≤ δ ≤ c2, with Q = K_UU and q_u = Σ_{i∈P} k(x_u, x_i) (docs/usmo.md §1.3); at any
//!   optimum δ_u = min(2σ_u, 2c2 − 2σ_u) (Lemma 1), so δ is never stored;
//! - f(x) = c1 Σ_P k(x, x_i) − Σ_U σ_u k(x, x_u) + β (eq. 7), and G_u = f(x_u) − β =
//!   c1 q_u − (Qσ)_u is the cached "bias-free" value.
//!
//! Working-set selection uses the complete optimality test of docs/usmo.md §3.2 (the paper's test
//! (13) misses condition (iv)): with r_u = −G_u + (σ_u ≥ c2/2 ? 1 : −1) for σ_u < c2 (the cost of
//! raising σ_u) and l_u = −G_u + (σ_u > c2/2 ? 1 : −1) for σ_u > 0 (the gain of lowering it), the
//! point is τ-optimal iff max l − min r ≤ τ (`tol`). The pair is j = argmin r (raised) and the i
//! with l_i > r_j that maximises the second-order gain (l_i − r_j)²/η_ij (lowered).
//!
//! Pair steps find which samples sit on a bound (0, c2/2, c2) quickly, but among the free ones
//! (strictly inside a piece, where F is an ordinary quadratic) they converge only linearly, and
//! on dense kernels that tail can be most of a solve. So when pair steps stop changing which
//! samples are free, and at the start (a warm start brings its free set along), a *free-set
//! Newton step* minimises F over the free samples exactly, the others held: the equality-
//! constrained quadratic on the face, solved by Cholesky, then an exact line search clipped to
//! the pieces. A sample that reaches the end of its piece leaves the free set and the step is
//! repeated (an active-set loop). Pair steps then carry on; the stopping test is the same.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use faer::linalg::solvers::Solve;
use serde::{Deserialize, Serialize};

use crate::data::{Dataset, Label, RowRef, Rows};
use crate::learn::kernel::{Kernel, KernelError, KernelExpansion, KernelRows};
use crate::learn::observe::{FitStep, Observer};
use crate::learn::positive_finite;

/// Unchecked USMO hyper-parameters; [`UsmoParams::check`] turns them into [`UsmoValidParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct UsmoParams {
    /// π: the class prior of the positives, in (0, 1).
    pub prior: f64,
    /// λ: the regularisation weight of J(f) = R_emp(f) + λ‖f‖² (eq. 4), > 0.
    pub lambda: f64,
    pub kernel: Kernel,
    /// τ: stop once max l − min r ≤ tol.
    pub tol: f64,
    /// Stop after this many pair steps (reported as `converged: false`).
    pub max_iter: Option<u64>,
    /// Stop after this much wall time (reported as `converged: false`).
    pub time_limit: Option<Duration>,
    /// Byte budget of the kernel-row cache.
    pub cache_bytes: usize,
    /// Told the pair steps and the KKT violation every [`OBSERVE_EVERY`] steps.
    pub observer: Observer,
}

impl UsmoParams {
    /// Parameters with the defaults: tol 1e-3, no iteration or time limit, 256 MiB cache.
    pub fn new(prior: f64, lambda: f64, kernel: Kernel) -> Self {
        UsmoParams {
            prior,
            lambda,
            kernel,
            tol: 1e-3,
            max_iter: None,
            time_limit: None,
            cache_bytes: 256 << 20,
            observer: Observer::default(),
        }
    }

    pub fn check(self) -> Result<UsmoValidParams, UsmoError> {
        if !(self.prior > 0.0 && self.prior < 1.0) {
            return Err(UsmoError::Param(format!(
                "prior must be in (0, 1), got {}",
                self.prior
            )));
        }
        positive_finite("lambda", self.lambda).map_err(UsmoError::Param)?;
        positive_finite("tol", self.tol).map_err(UsmoError::Param)?;
        self.kernel.check()?;
        Ok(UsmoValidParams(self))
    }
}

/// Checked USMO hyper-parameters; the only way to fit.
#[derive(Debug, Clone, PartialEq)]
pub struct UsmoValidParams(UsmoParams);

impl std::ops::Deref for UsmoValidParams {
    type Target = UsmoParams;
    fn deref(&self) -> &UsmoParams {
        &self.0
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UsmoError {
    #[error("invalid USMO parameter: {0}")]
    Param(String),
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("USMO needs at least one labelled positive (label 1); the data has none")]
    NoPositives,
    #[error("USMO needs at least one unlabeled sample (label 0); the data has none")]
    NoUnlabeled,
    #[error("sample {id:?} has a non-finite feature value")]
    NonFinite { id: String },
    #[error("sample id {0:?} occurs more than once")]
    DuplicateId(String),
    #[error("cannot warm-start: {0}")]
    WarmStart(String),
}

/// Per-unlabeled-sample warm-start state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnlabeledState {
    pub id: String,
    pub sigma: f64,
    /// q_u = Σ_{i∈P} k(x_u, x_i)
    pub q: f64,
    /// (Qσ)_u = Σ_{v∈U} σ_v k(x_u, x_v)
    pub q_sigma: f64,
}

/// What a later fit needs to start from this solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsmoState {
    pub prior: f64,
    pub lambda: f64,
    pub kernel: Kernel,
    pub n_features: usize,
    /// Ids of the support rows of the expansion: the positives first, then the unlabeled
    /// samples with σ > 0.
    pub support_ids: Vec<String>,
    pub n_positive: usize,
    /// One entry per unlabeled sample of the window, sorted by id.
    pub unlabeled: Vec<UnlabeledState>,
    /// S_PP = Σ_{i,j∈P} k(x_i, x_j), for the primal objective (docs/usmo.md §1.5).
    pub s_pp: f64,
}

/// The outcome of a fit (the `--report json` fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsmoReport {
    /// Pair steps taken.
    pub iterations: u64,
    /// Free-set Newton steps taken (linear solves on the free samples; see the module docs).
    pub newton_steps: u64,
    /// Scans of the whole unlabeled set for a working pair (one per pair step, plus the final
    /// optimality check).
    pub passes: u64,
    /// Kernel values computed (cache misses) during the fit, warm-start updates included;
    /// the objective diagnostics below are not counted.
    pub kernel_evaluations: u64,
    pub cache_hit_rate: f64,
    /// F(σ, δ) of dual (6), δ = min(2σ, 2c2 − 2σ).
    pub dual_objective: f64,
    /// P(α, β) of primal (5) with ξ_u = max(0, f_u, (1 + f_u)/2).
    pub primal_objective: f64,
    /// P + F + c1²·S_PP/2, zero at the optimum (strong duality, docs/usmo.md §1.5).
    pub duality_residual: f64,
    /// max l − min r at the end; ≤ tol when converged.
    pub max_violation: f64,
    pub bias: f64,
    pub converged: bool,
    pub cancelled: bool,
    pub warm_start: bool,
    pub train_seconds: f64,
    pub n_positive: usize,
    pub n_unlabeled: usize,
    pub n_support: usize,
}

/// A fitted USMO decision function with its warm-start state and report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsmoModel {
    pub expansion: KernelExpansion,
    pub state: UsmoState,
    pub report: UsmoReport,
}

/// The positives and unlabeled samples of a dataset, split (negatives are not used).
struct PuSplit {
    positives: Rows,
    positive_ids: Vec<String>,
    unlabeled: Rows,
    unlabeled_ids: Vec<String>,
}

impl PuSplit {
    fn new(data: &Dataset) -> Result<PuSplit, UsmoError> {
        let mut seen = BTreeSet::new();
        for (i, id) in data.ids.iter().enumerate() {
            if data.labels[i] != Label::Negative && !seen.insert(id.as_str()) {
                return Err(UsmoError::DuplicateId(id.clone()));
            }
        }
        if let Some(bad) = data.first_non_finite() {
            return Err(UsmoError::NonFinite {
                id: data.ids[bad].clone(),
            });
        }
        let p_idx = data.indices_of(Label::Positive);
        let u_idx = data.indices_of(Label::Unlabeled);
        if p_idx.is_empty() {
            return Err(UsmoError::NoPositives);
        }
        if u_idx.is_empty() {
            return Err(UsmoError::NoUnlabeled);
        }
        Ok(PuSplit {
            positives: data.rows.select(&p_idx),
            positive_ids: p_idx.iter().map(|&i| data.ids[i].clone()).collect(),
            unlabeled: data.rows.select(&u_idx),
            unlabeled_ids: u_idx.iter().map(|&i| data.ids[i].clone()).collect(),
        })
    }
}

/// Values within this fraction of c2 of 0, c2/2 or c2 are snapped onto them, so the state tests
/// (σ < c2/2, σ = c2, …) are exact despite round-off.
const SNAP: f64 = 1e-12;
/// η below this is treated as zero: the pair objective is then piecewise linear.
const TINY_ETA: f64 = 1e-12;

/// Pair steps between two reports to [`UsmoParams::observer`].
pub const OBSERVE_EVERY: u64 = 256;

fn snap(v: f64, c2: f64) -> f64 {
    let v = v.clamp(0.0, c2);
    for target in [0.0, 0.5 * c2, c2] {
        if (v - target).abs() <= SNAP * c2 {
            return target;
        }
    }
    v
}

/// The exact minimiser t ≥ 0 of the two-variable subproblem (8) along σ_i − t, σ_j + t.
///
/// φ(t) = (G_i − G_j)t + ηt²/2 + |σ_i − t − c2/2| − |σ_i − c2/2| + |σ_j + t − c2/2| − |σ_j − c2/2|
/// on [0, min(σ_i, c2 − σ_j)] (docs/usmo.md §2.5, as a difference from the current point so tiny
/// steps keep their precision). The breakpoints t = σ_i − c2/2 and t = c2/2 − σ_j split the segment
/// into at most three pieces; each piece is one of the paper's four cases (Table 1: i on the upper
/// or lower branch × j on the upper or lower branch), with κ the slope of the V-terms. Each piece's
/// minimiser is clipped to the piece (the per-case clipping), and the best of all candidates wins.
/// With η ≈ 0 each piece is linear, so only its ends are candidates.
pub fn pair_step(sigma_i: f64, sigma_j: f64, g_i: f64, g_j: f64, eta: f64, c2: f64) -> f64 {
    let half = 0.5 * c2;
    let t_max = sigma_i.min(c2 - sigma_j).max(0.0);
    let phi = |t: f64| {
        (g_i - g_j) * t
            + 0.5 * eta * t * t
            + ((sigma_i - t - half).abs() - (sigma_i - half).abs())
            + ((sigma_j + t - half).abs() - (sigma_j - half).abs())
    };
    let mut knots = vec![0.0, t_max];
    for b in [sigma_i - half, half - sigma_j] {
        if b > 0.0 && b < t_max {
            knots.push(b);
        }
    }
    knots.sort_by(f64::total_cmp);
    let mut best = (0.0, 0.0);
    let mut consider = |t: f64| {
        let value = phi(t);
        if value < best.1 {
            best = (t, value);
        }
    };
    for w in knots.windows(2) {
        let (a, b) = (w[0], w[1]);
        consider(b);
        if eta > TINY_ETA && b > a {
            let mid = 0.5 * (a + b);
            let kappa = -(sigma_i - mid - half).signum() + (sigma_j + mid - half).signum();
            consider((-(g_i - g_j + kappa) / eta).clamp(a, b));
        }
    }
    best.0
}

/// The solver's working state over the unlabeled samples.
struct Solver<'a> {
    kr: KernelRows<'a>,
    diag: Vec<f64>,
    sigma: Vec<f64>,
    /// G_u = c1 q_u − (Qσ)_u
    g: Vec<f64>,
    c2: f64,
    iterations: u64,
    passes: u64,
    newton_steps: u64,
    /// Consecutive pair steps that kept both of their samples free, on the same piece.
    free_pair_steps: u32,
}

/// The extreme values of the optimality test at one point.
struct Violation {
    /// argmin r (the sample to raise) and its r.
    j: usize,
    min_r: f64,
    max_l: f64,
}

enum Stop {
    Converged,
    Limit,
    Cancelled,
}

impl Solver<'_> {
    fn violation(&mut self) -> Violation {
        self.passes += 1;
        let half = 0.5 * self.c2;
        let (mut j, mut min_r, mut max_l) = (0, f64::INFINITY, f64::NEG_INFINITY);
        for (u, (&s, &g)) in self.sigma.iter().zip(&self.g).enumerate() {
            if s < self.c2 {
                let r = -g + if s >= half { 1.0 } else { -1.0 };
                if r < min_r {
                    min_r = r;
                    j = u;
                }
            }
            if s > 0.0 {
                max_l = max_l.max(-g + if s > half { 1.0 } else { -1.0 });
            }
        }
        Violation { j, min_r, max_l }
    }

    fn run(&mut self, params: &UsmoParams, cancel: &AtomicBool, start: Instant) -> Stop {
        let half = 0.5 * self.c2;
        self.newton_on_free_set();
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Stop::Cancelled;
            }
            let v = self.violation();
            if v.max_l - v.min_r <= params.tol {
                return Stop::Converged;
            }
            if self.iterations % OBSERVE_EVERY == 0 {
                params.observer.report(FitStep::Solver {
                    solver: "usmo",
                    iterations: self.iterations,
                    gap: v.max_l - v.min_r,
                    tol: params.tol,
                });
            }
            if params.max_iter.is_some_and(|m| self.iterations >= m)
                || (self.iterations % 64 == 0
                    && params.time_limit.is_some_and(|t| start.elapsed() >= t))
            {
                return Stop::Limit;
            }
            let j = v.j;
            let row_j = self.kr.row(j);
            let (mut i, mut best_gain) = (usize::MAX, f64::NEG_INFINITY);
            for (u, (&s, &g)) in self.sigma.iter().zip(&self.g).enumerate() {
                if s > 0.0 {
                    let l = -g + if s > half { 1.0 } else { -1.0 };
                    if l > v.min_r {
                        let b = l - v.min_r;
                        let eta = (self.diag[u] + self.diag[j] - 2.0 * row_j[u]).max(TINY_ETA);
                        let gain = b * b / eta;
                        if gain > best_gain {
                            best_gain = gain;
                            i = u;
                        }
                    }
                }
            }
            let row_i = self.kr.row(i);
            let eta = (self.diag[i] + self.diag[j] - 2.0 * row_j[i]).max(0.0);
            let t = pair_step(
                self.sigma[i],
                self.sigma[j],
                self.g[i],
                self.g[j],
                eta,
                self.c2,
            );
            let new_i = snap(self.sigma[i] - t, self.c2);
            let new_j = snap(self.sigma[j] + t, self.c2);
            let (d_i, d_j) = (new_i - self.sigma[i], new_j - self.sigma[j]);
            self.iterations += 1;
            if d_i == 0.0 && d_j == 0.0 {
                // Only round-off can get here (φ'(0+) = r_j − l_i < −tol); stop rather than spin.
                return Stop::Limit;
            }
            let c2 = self.c2;
            let stays_free = |old: f64, new: f64| {
                free_piece(old, c2).is_some_and(|p| free_piece(new, c2) == Some(p))
            };
            let free_pair = stays_free(self.sigma[i], new_i) && stays_free(self.sigma[j], new_j);
            self.sigma[i] = new_i;
            self.sigma[j] = new_j;
            for ((g, &ki), &kj) in self.g.iter_mut().zip(row_i.iter()).zip(row_j.iter()) {
                *g -= d_i * ki + d_j * kj;
            }
            self.free_pair_steps = if free_pair {
                self.free_pair_steps + 1
            } else {
                0
            };
            if self.free_pair_steps >= NEWTON_AFTER_FREE_PAIR_STEPS {
                self.free_pair_steps = 0;
                self.newton_on_free_set();
            }
        }
    }

    /// Free-set Newton steps until one ends inside every piece (the minimum on the face is
    /// reached) or [`NEWTON_REPEATS`] have run; each step that stops at a piece's end moves
    /// that sample to the bound, out of the free set.
    fn newton_on_free_set(&mut self) {
        for _ in 0..NEWTON_REPEATS {
            // Some(false): clipped at a piece's end, so the face changed; try the new one.
            if self.newton_step() != Some(false) {
                return;
            }
        }
    }

    /// One free-set Newton step; `None` if none was taken (fewer than two free samples, more
    /// than [`NEWTON_MAX_FREE`], a singular K_FF, or no descent), else whether it reached the
    /// minimum on the face.
    ///
    /// On the face (bound samples held, each free σ_u on its piece, where −½δ_u has slope
    /// κ_u = ±1), F is ½σ'Qσ − c1 q'σ + κ'σ + const with gradient ∇_F = −G_F + κ_F. The step d
    /// minimises ∇_F'd + ½d'K_FF d subject to 1'd = 0: d = μa − b with K_FF a = 1, K_FF b = ∇_F
    /// and μ = 1'b / 1'a. The step length is the exact minimiser along d, −∇'d / d'K_FF d
    /// (1 in exact arithmetic; computed so round-off in a poorly conditioned K_FF cannot raise
    /// F), clipped where the first free sample reaches the end of its piece.
    fn newton_step(&mut self) -> Option<bool> {
        let c2 = self.c2;
        let free: Vec<usize> = (0..self.sigma.len())
            .filter(|&u| free_piece(self.sigma[u], c2).is_some())
            .collect();
        let m = free.len();
        if !(2..=NEWTON_MAX_FREE).contains(&m) {
            return None;
        }
        let rows: Vec<Arc<[f64]>> = free.iter().map(|&u| self.kr.row(u)).collect();
        let k_ff = faer::Mat::from_fn(m, m, |a, b| rows[a][free[b]]);
        let grad: Vec<f64> = free
            .iter()
            .map(|&u| -self.g[u] + if self.sigma[u] > 0.5 * c2 { 1.0 } else { -1.0 })
            .collect();
        let rhs = faer::Mat::from_fn(m, 2, |a, col| if col == 0 { 1.0 } else { grad[a] });
        let solved = k_ff.llt(faer::Side::Lower).ok()?.solve(&rhs);
        let (sum_a, sum_b) = (0..m).fold((0.0, 0.0), |(sa, sb), a| {
            (sa + solved[(a, 0)], sb + solved[(a, 1)])
        });
        let mu = sum_b / sum_a;
        let mut d: Vec<f64> = (0..m)
            .map(|a| mu * solved[(a, 0)] - solved[(a, 1)])
            .collect();
        // 1'd = 0 up to round-off; remove it so the equality 1'σ = c1 p does not drift.
        let mean = d.iter().sum::<f64>() / m as f64;
        d.iter_mut().for_each(|v| *v -= mean);
        let slope: f64 = d.iter().zip(&grad).map(|(d, g)| d * g).sum();
        let curvature: f64 = (0..m)
            .map(|a| d[a] * (0..m).map(|b| k_ff[(a, b)] * d[b]).sum::<f64>())
            .sum();
        if !(slope < 0.0 && curvature > 0.0) {
            return None;
        }
        let mut step = -slope / curvature;
        let mut clipped = false;
        for (&u, &d_u) in free.iter().zip(&d) {
            let (lo, hi) = match free_piece(self.sigma[u], c2) {
                Some(Piece::Lower) => (0.0, 0.5 * c2),
                _ => (0.5 * c2, c2),
            };
            let room = if d_u > 0.0 {
                (hi - self.sigma[u]) / d_u
            } else if d_u < 0.0 {
                (lo - self.sigma[u]) / d_u
            } else {
                f64::INFINITY
            };
            if room <= step {
                step = room;
                clipped = true;
            }
        }
        self.newton_steps += 1;
        for (&u, (&d_u, row)) in free.iter().zip(d.iter().zip(&rows)) {
            let new = snap(self.sigma[u] + step * d_u, c2);
            let change = new - self.sigma[u];
            if change != 0.0 {
                self.sigma[u] = new;
                for (g, &k) in self.g.iter_mut().zip(row.iter()) {
                    *g -= change * k;
                }
            }
        }
        Some(!clipped)
    }
}

/// Pair steps in a row that leave the free set as it was before a free-set Newton step is
/// tried: enough to show the bound pattern has settled, few enough to skip the slow tail.
const NEWTON_AFTER_FREE_PAIR_STEPS: u32 = 3;
/// Newton steps per call at most (each one that stops at a piece's end puts one more sample on
/// a bound).
const NEWTON_REPEATS: usize = 16;
/// The largest free set a Newton step solves: K_FF then takes 2 MiB, and its Cholesky
/// factorisation ~4·10⁷ flops, what ~200 pair steps spend on their gradient updates at n = 10⁵.
const NEWTON_MAX_FREE: usize = 512;

/// Which piece of [0, c2] a free σ lies on (strictly inside); `None` on 0, c2/2 or c2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    Lower,
    Upper,
}

fn free_piece(sigma: f64, c2: f64) -> Option<Piece> {
    let half = 0.5 * c2;
    if sigma > 0.0 && sigma < half {
        Some(Piece::Lower)
    } else if sigma > half && sigma < c2 {
        Some(Piece::Upper)
    } else {
        None
    }
}

/// Σ_i Σ_j k(a_i, b_j) without caching (a diagnostic; its kernel values are not reported).
fn block_sum(kernel: Kernel, a: &Rows, b: &Rows) -> f64 {
    if a.n_rows() == 0 || b.n_rows() == 0 {
        return 0.0;
    }
    let mut kb = KernelRows::new(kernel, b, 0);
    let mut buf = vec![0.0; b.n_rows()];
    let mut total = 0.0;
    for i in 0..a.n_rows() {
        kb.cross_row(a.row(i), &mut buf);
        total += buf.iter().sum::<f64>();
    }
    total
}

impl UsmoValidParams {
    /// Cold start (docs/usmo.md §4.1): the unlabeled samples ranked by q_u, the top ⌊πn⌋ at σ = c2,
    /// the next one at (πn − ⌊πn⌋)·c2, the rest at 0.
    pub fn fit(&self, data: &Dataset, cancel: &AtomicBool) -> Result<UsmoModel, UsmoError> {
        self.fit_with(None, data, cancel)
    }

    /// Fits, starting from `previous` when given (docs/usmo.md §4.2): kept samples keep σ/c2, q and
    /// Qσ, updated with kernel values for the removed and added samples only; new samples start
    /// from the previous decision function; the equality 1'σ = c1 p is restored by moving new
    /// samples first, then as few kept ones as possible. Same optimum as a cold start.
    ///
    /// A sample id names one immutable sample: a kept id is assumed to carry the same features.
    /// The caller must pass data scaled the way the previous model's data was.
    pub fn fit_with(
        &self,
        previous: Option<&UsmoModel>,
        data: &Dataset,
        cancel: &AtomicBool,
    ) -> Result<UsmoModel, UsmoError> {
        let start = Instant::now();
        let split = PuSplit::new(data)?;
        let (p, n) = (split.positives.n_rows(), split.unlabeled.n_rows());
        let c1 = self.prior / (2.0 * self.lambda * p as f64);
        let c2 = 1.0 / (2.0 * self.lambda * n as f64);
        let target = c1 * p as f64;

        let mut kr = KernelRows::new(self.kernel, &split.unlabeled, self.cache_bytes);
        let mut extra_evaluations = 0u64;
        let (sigma, q, q_sigma, s_pp) = match previous {
            None => {
                let q = kr.sum_against(&split.positives);
                let sigma = ranked_start(&q, self.prior, c2);
                let mut q_sigma = vec![0.0; n];
                for (v, &s) in sigma.iter().enumerate() {
                    if s > 0.0 {
                        let row = kr.row(v);
                        q_sigma
                            .iter_mut()
                            .zip(row.iter())
                            .for_each(|(a, k)| *a += s * k);
                    }
                }
                let s_pp = block_sum(self.kernel, &split.positives, &split.positives);
                (sigma, q, q_sigma, s_pp)
            }
            Some(prev) => {
                let warm = self.warm_start(prev, &split, &mut kr, c1, c2, target)?;
                extra_evaluations = warm.extra_evaluations;
                (warm.sigma, warm.q, warm.q_sigma, warm.s_pp)
            }
        };
        let g: Vec<f64> = q.iter().zip(&q_sigma).map(|(q, qs)| c1 * q - qs).collect();
        let diag = kr.diagonal();
        let mut solver = Solver {
            kr,
            diag,
            sigma,
            g,
            c2,
            iterations: 0,
            passes: 0,
            newton_steps: 0,
            free_pair_steps: 0,
        };
        let stop = solver.run(self, cancel, start);
        let v = solver.violation();
        let bias = 0.5 * (v.max_l + v.min_r);

        let Solver {
            kr,
            sigma,
            g,
            iterations,
            passes,
            newton_steps,
            ..
        } = solver;
        // Objectives (docs/usmo.md §1.6), all from σ, q and G: Qσ = c1 q − G.
        let q_sigma: Vec<f64> = q.iter().zip(&g).map(|(q, g)| c1 * q - g).collect();
        let sqs: f64 = sigma.iter().zip(&q_sigma).map(|(s, qs)| s * qs).sum();
        let qs: f64 = sigma.iter().zip(&q).map(|(s, q)| s * q).sum();
        let delta_sum: f64 = sigma
            .iter()
            .map(|&s| (2.0 * s).min(2.0 * c2 - 2.0 * s))
            .sum();
        let dual = 0.5 * sqs - c1 * qs - 0.5 * delta_sum;
        let xi_sum: f64 = g
            .iter()
            .map(|&g| {
                let f = g + bias;
                f.max(0.0).max(0.5 * (1.0 + f))
            })
            .sum();
        let primal = -0.5 * c1 * c1 * s_pp + 0.5 * sqs - target * bias + c2 * xi_sum;

        let sv: Vec<usize> = (0..n).filter(|&u| sigma[u] > 0.0).collect();
        let support = Rows::concat(&[&split.positives, &split.unlabeled.select(&sv)]);
        let mut coef = vec![c1; p];
        coef.extend(sv.iter().map(|&u| -sigma[u]));
        let mut support_ids = split.positive_ids.clone();
        support_ids.extend(sv.iter().map(|&u| split.unlabeled_ids[u].clone()));
        let mut unlabeled: Vec<UnlabeledState> = (0..n)
            .map(|u| UnlabeledState {
                id: split.unlabeled_ids[u].clone(),
                sigma: sigma[u],
                q: q[u],
                q_sigma: q_sigma[u],
            })
            .collect();
        unlabeled.sort_by(|a, b| a.id.cmp(&b.id));

        let report = UsmoReport {
            iterations,
            newton_steps,
            passes,
            kernel_evaluations: kr.evaluations + extra_evaluations,
            cache_hit_rate: kr.hit_rate(),
            dual_objective: dual,
            primal_objective: primal,
            duality_residual: primal + dual + 0.5 * c1 * c1 * s_pp,
            max_violation: v.max_l - v.min_r,
            bias,
            converged: matches!(stop, Stop::Converged),
            cancelled: matches!(stop, Stop::Cancelled),
            warm_start: previous.is_some(),
            train_seconds: start.elapsed().as_secs_f64(),
            n_positive: p,
            n_unlabeled: n,
            n_support: support_ids.len(),
        };
        Ok(UsmoModel {
            expansion: KernelExpansion::new(self.kernel, support, coef, bias),
            state: UsmoState {
                prior: self.prior,
                lambda: self.lambda,
                kernel: self.kernel,
                n_features: split.unlabeled.n_features(),
                support_ids,
                n_positive: p,
                unlabeled,
                s_pp,
            },
            report,
        })
    }

    fn warm_start(
        &self,
        prev: &UsmoModel,
        split: &PuSplit,
        kr: &mut KernelRows<'_>,
        c1: f64,
        c2: f64,
        target: f64,
    ) -> Result<WarmStart, UsmoError> {
        let state = &prev.state;
        if state.kernel != self.kernel {
            return Err(UsmoError::WarmStart(format!(
                "the previous model's kernel {:?} differs from {:?}",
                state.kernel, self.kernel
            )));
        }
        if state.n_features != split.unlabeled.n_features() {
            return Err(UsmoError::WarmStart(format!(
                "the previous model has {} features, the data {}",
                state.n_features,
                split.unlabeled.n_features()
            )));
        }
        let n = split.unlabeled.n_rows();
        let support_row: BTreeMap<&str, usize> = state
            .support_ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        let old_support = &prev.expansion.support;
        let mut extra_evaluations = 0;

        // Positives: the kept ones carry no state (α = c1); added and removed ones change q.
        let old_pos: BTreeSet<&str> = state.support_ids[..state.n_positive]
            .iter()
            .map(String::as_str)
            .collect();
        let new_pos: BTreeSet<&str> = split.positive_ids.iter().map(String::as_str).collect();
        let added_pos: Vec<usize> = (0..split.positives.n_rows())
            .filter(|&i| !old_pos.contains(split.positive_ids[i].as_str()))
            .collect();
        let removed_pos: Vec<usize> = (0..state.n_positive)
            .filter(|&i| !new_pos.contains(state.support_ids[i].as_str()))
            .collect();

        // Unlabeled: kept samples bring their σ, q, Qσ.
        let old_u = |id: &str| {
            state
                .unlabeled
                .binary_search_by(|s| s.id.as_str().cmp(id))
                .ok()
                .map(|k| &state.unlabeled[k])
        };
        let kept: Vec<Option<&UnlabeledState>> = split
            .unlabeled_ids
            .iter()
            .map(|id| old_u(id.as_str()))
            .collect();
        let new_u: Vec<usize> = (0..n).filter(|&u| kept[u].is_none()).collect();
        let new_ids: BTreeSet<&str> = split.unlabeled_ids.iter().map(String::as_str).collect();

        let mut q: Vec<f64> = kept.iter().map(|k| k.map_or(0.0, |s| s.q)).collect();
        let mut q_sigma: Vec<f64> = kept.iter().map(|k| k.map_or(0.0, |s| s.q_sigma)).collect();
        // Added and removed samples change q and Qσ of the kept samples only (new samples are
        // computed in full below), so their kernel values are taken against the kept rows.
        let kept_index: Vec<usize> = (0..n).filter(|&u| kept[u].is_some()).collect();
        let kept_rows = split.unlabeled.select(&kept_index);
        let mut kk = KernelRows::new(self.kernel, &kept_rows, 0);
        let mut buf = vec![0.0; kept_index.len()];
        let mut apply_to_kept = |row: RowRef<'_>, weight: f64, into: &mut Vec<f64>| {
            kk.cross_row(row, &mut buf);
            for (&u, k) in kept_index.iter().zip(&buf) {
                into[u] += weight * k;
            }
        };
        for &a in &added_pos {
            apply_to_kept(split.positives.row(a), 1.0, &mut q);
        }
        for &r in &removed_pos {
            apply_to_kept(old_support.row(r), -1.0, &mut q);
        }
        let mut removed_sv: Vec<(usize, f64)> = Vec::new();
        for s in &state.unlabeled {
            if s.sigma > 0.0 && !new_ids.contains(s.id.as_str()) {
                let row = support_row.get(s.id.as_str()).copied().ok_or_else(|| {
                    UsmoError::WarmStart(format!(
                        "the previous model lacks the features of support sample {:?}",
                        s.id
                    ))
                })?;
                apply_to_kept(old_support.row(row), -s.sigma, &mut q_sigma);
                removed_sv.push((row, s.sigma));
            }
        }
        // New samples: kernel values against a small basis only: the new positives (for q), the
        // kept samples with σ > 0 (their share of Qσ), and the removed positives and support
        // samples (which, with the first two, give the previous decision function f_old exactly).
        // The rows of the samples whose σ changes below add the rest of Qσ.
        extra_evaluations += kk.evaluations;
        let kept_sv: Vec<usize> = (0..n)
            .filter(|&u| kept[u].is_some_and(|s| s.sigma > 0.0))
            .collect();
        let mut f_old = vec![0.0; n];
        if !new_u.is_empty() {
            let p = split.positives.n_rows();
            let old_c1 = state.prior / (2.0 * state.lambda * state.n_positive as f64);
            let mut weights_old = vec![0.0; p];
            for &a in &added_pos {
                weights_old[a] = -old_c1;
            }
            let mut weights_old_rest = Vec::new();
            let mut rest = Vec::new();
            for &u in &kept_sv {
                weights_old_rest.push(-kept[u].map_or(0.0, |s| s.sigma));
            }
            for &r in &removed_pos {
                rest.push(r);
                weights_old_rest.push(old_c1);
            }
            for &(row, sigma) in &removed_sv {
                rest.push(row);
                weights_old_rest.push(-sigma);
            }
            let basis = Rows::concat(&[
                &split.positives,
                &split.unlabeled.select(&kept_sv),
                &old_support.select(&rest),
            ]);
            let mut kb = KernelRows::new(self.kernel, &basis, 0);
            let mut buf = vec![0.0; basis.n_rows()];
            // A new sample guessed σ > 0 needs its whole row for Qσ below; its values against
            // the kept support samples are in `buf` already, so only the rest are computed.
            let rest_of_window: Vec<usize> = (0..n)
                .filter(|&u| !kept[u].is_some_and(|s| s.sigma > 0.0))
                .collect();
            let rest_rows = split.unlabeled.select(&rest_of_window);
            let mut kw = KernelRows::new(self.kernel, &rest_rows, 0);
            let mut rest_buf = vec![0.0; rest_of_window.len()];
            for &u in &new_u {
                kb.cross_row(split.unlabeled.row(u), &mut buf);
                let (pos, others) = buf.split_at(p);
                q[u] = pos.iter().sum();
                q_sigma[u] = others[..kept_sv.len()]
                    .iter()
                    .zip(&weights_old_rest)
                    .map(|(k, w)| -w * k)
                    .sum();
                // f_old = c1_old Σ_{P_old} k − Σ_{U_old} σ_old k + β_old, with
                // P_old = P_new − added + removed.
                f_old[u] = prev.expansion.bias
                    + old_c1 * q[u]
                    + pos
                        .iter()
                        .zip(&weights_old)
                        .map(|(k, w)| w * k)
                        .sum::<f64>()
                    + others
                        .iter()
                        .zip(&weights_old_rest)
                        .map(|(k, w)| w * k)
                        .sum::<f64>();
                if kkt_guess(f_old[u], c2) > 0.0 {
                    kw.cross_row(split.unlabeled.row(u), &mut rest_buf);
                    let mut full = vec![0.0; n];
                    for (&v, &k) in kept_sv.iter().zip(&others[..kept_sv.len()]) {
                        full[v] = k;
                    }
                    for (&v, &k) in rest_of_window.iter().zip(&rest_buf) {
                        full[v] = k;
                    }
                    kr.insert(u, full);
                }
            }
            extra_evaluations += kb.evaluations + kw.evaluations;
        }

        // σ: kept samples keep their place relative to the box, σ·c2/c2_old: c2 = 1/(2λn)
        // moves with every change of the window size, and a sample left at the old c2 or
        // c2/2 would sit strictly inside the new box, costing a pair step to put back on
        // its bound. Qσ over the kept samples scales by the same factor, so this costs no
        // kernel value. New samples take their KKT-consistent guess from f_old
        // ([`kkt_guess`]).
        let c2_old = 1.0 / (2.0 * state.lambda * state.unlabeled.len() as f64);
        let rho = c2 / c2_old;
        q_sigma.iter_mut().for_each(|qs| *qs *= rho);
        let before: Vec<f64> = kept
            .iter()
            .map(|k| k.map_or(0.0, |s| snap(rho * s.sigma, c2)))
            .collect();
        let mut g_estimate: Vec<f64> = (0..n).map(|u| c1 * q[u] - q_sigma[u]).collect();
        let mut sigma = before.clone();
        for &u in &new_u {
            g_estimate[u] = f_old[u] - prev.expansion.bias;
            sigma[u] = kkt_guess(f_old[u], c2);
        }
        let is_new: Vec<bool> = kept.iter().map(Option::is_none).collect();
        restore_equality(&mut sigma, &g_estimate, &is_new, target, c2);

        // Qσ += Δσ_v k(·, v) for every v whose σ changed (a new v has Δσ_v = σ_v).
        for v in 0..n {
            let delta = sigma[v] - before[v];
            if delta != 0.0 {
                let row = kr.row(v);
                q_sigma
                    .iter_mut()
                    .zip(row.iter())
                    .for_each(|(qs, k)| *qs += delta * k);
            }
        }

        // S_PP = S_old − (2 S(P_old, R) − S(R, R)) + (2 S(P_new, A) − S(A, A)).
        let removed_rows = old_support.select(&removed_pos);
        let added_rows = split.positives.select(&added_pos);
        let old_pos_rows = old_support.select(&(0..state.n_positive).collect::<Vec<_>>());
        let s_pp = state.s_pp
            - (2.0 * block_sum(self.kernel, &removed_rows, &old_pos_rows)
                - block_sum(self.kernel, &removed_rows, &removed_rows))
            + (2.0 * block_sum(self.kernel, &added_rows, &split.positives)
                - block_sum(self.kernel, &added_rows, &added_rows));
        Ok(WarmStart {
            sigma,
            q,
            q_sigma,
            s_pp,
            extra_evaluations,
        })
    }
}

/// The σ of a new sample consistent with the KKT conditions under the previous decision
/// function: 0 if f_old < −1, c2 if f_old > 1, c2/2 otherwise.
fn kkt_guess(f_old: f64, c2: f64) -> f64 {
    if f_old < -1.0 {
        0.0
    } else if f_old > 1.0 {
        c2
    } else {
        0.5 * c2
    }
}

struct WarmStart {
    sigma: Vec<f64>,
    q: Vec<f64>,
    q_sigma: Vec<f64>,
    s_pp: f64,
    extra_evaluations: u64,
}

/// The cold start of docs/usmo.md §4.1: rank by q_u, descending (ties by index), fill from the top.
fn ranked_start(q: &[f64], prior: f64, c2: f64) -> Vec<f64> {
    let n = q.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| q[b].total_cmp(&q[a]).then(a.cmp(&b)));
    let mass = prior * n as f64;
    let full = (mass.floor() as usize).min(n - 1);
    let mut sigma = vec![0.0; n];
    for &u in &order[..full] {
        sigma[u] = c2;
    }
    sigma[order[full]] = snap((mass - full as f64) * c2, c2);
    sigma
}

/// Restores 1'σ = target after a warm start by moving as few σ as possible: each moved sample
/// goes all the way to its bound before the next one moves. Samples are taken in order of their
/// estimated G (raised: most positive-like first; lowered: least), ties going to new samples, so
/// the repair follows the dual's first-order descent direction instead of undoing the KKT guess
/// of the new samples.
fn restore_equality(sigma: &mut [f64], g_estimate: &[f64], is_new: &[bool], target: f64, c2: f64) {
    let mut residual = target - sigma.iter().sum::<f64>();
    let raise = residual > 0.0;
    let mut order: Vec<usize> = (0..sigma.len()).collect();
    order.sort_by(|&a, &b| {
        let by_g = g_estimate[a].total_cmp(&g_estimate[b]);
        if raise { by_g.reverse() } else { by_g }
            .then(is_new[b].cmp(&is_new[a]))
            .then(a.cmp(&b))
    });
    let room = |s: f64| if raise { c2 - s } else { s };
    for u in order {
        if residual.abs() <= SNAP * c2 {
            break;
        }
        let step = residual.abs().min(room(sigma[u]));
        if raise {
            sigma[u] += step;
            residual -= step;
        } else {
            sigma[u] -= step;
            residual += step;
        }
    }
    for s in sigma.iter_mut() {
        *s = snap(*s, c2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use proptest::prelude::*;

    /// A synthetic PU set: `p` positives (shifted by +1) then `n` unlabeled of which `pos_u` are
    /// shifted positives; features from a fixed LCG.
    fn synthetic(seed: u64, p: usize, n: usize, pos_u: usize, d: usize) -> Dataset {
        let mut s = seed
            .wrapping_mul(2862933555777941757)
            .wrapping_add(3037000493);
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        let rows = Array2::from_shape_fn((p + n, d), |(i, _)| {
            next() + if i < p + pos_u { 1.0 } else { 0.0 }
        });
        Dataset {
            rows: Rows::dense(rows),
            labels: (0..p + n)
                .map(|i| {
                    if i < p {
                        Label::Positive
                    } else {
                        Label::Unlabeled
                    }
                })
                .collect(),
            ids: (0..p + n).map(|i| format!("s{seed}-{i}")).collect(),
        }
    }

    fn params(prior: f64, lambda: f64, kernel: Kernel, tol: f64) -> UsmoValidParams {
        let mut p = UsmoParams::new(prior, lambda, kernel);
        p.tol = tol;
        p.check().unwrap()
    }

    fn assert_feasible(m: &UsmoModel) {
        let (p, n) = (m.report.n_positive as f64, m.report.n_unlabeled as f64);
        let c1 = m.state.prior / (2.0 * m.state.lambda * p);
        let c2 = 1.0 / (2.0 * m.state.lambda * n);
        let sum: f64 = m.state.unlabeled.iter().map(|s| s.sigma).sum();
        assert!(
            (sum - c1 * p).abs() <= 1e-9 * c1 * p,
            "1'σ = {sum}, c1 p = {}",
            c1 * p
        );
        assert!(m
            .state
            .unlabeled
            .iter()
            .all(|s| s.sigma >= 0.0 && s.sigma <= c2));
    }

    fn brute_force_min(si: f64, sj: f64, gi: f64, gj: f64, eta: f64, c2: f64) -> f64 {
        let half = 0.5 * c2;
        let t_max = si.min(c2 - sj);
        let phi = |t: f64| {
            (gi - gj) * t
                + 0.5 * eta * t * t
                + ((si - t - half).abs() - (si - half).abs())
                + ((sj + t - half).abs() - (sj - half).abs())
        };
        (0..=20_000)
            .map(|k| phi(t_max * k as f64 / 20_000.0))
            .fold(0.0, f64::min)
    }

    /// A solver on the 12 samples of `synthetic(3, 0, 12, 0, 4)` (RBF γ = 0.5, c2 = 1), four of
    /// them free (two on each piece), with G = κ + `push`·(a fixed pattern) on the free
    /// samples: the face minimum is `push`-close.
    fn newton_case(rows: &Rows, push: f64) -> Solver<'_> {
        let sigma = vec![0.25, 0.3, 0.7, 0.75, 0.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0, 1.0];
        let g = (0..12)
            .map(|u| match free_piece(sigma[u], 1.0) {
                Some(Piece::Lower) => -1.0 + push * (u as f64).sin(),
                Some(Piece::Upper) => 1.0 + push * (u as f64).sin(),
                None => 0.3,
            })
            .collect();
        let mut kr = KernelRows::new(Kernel::Rbf { gamma: 0.5 }, rows, 1 << 20);
        let diag = kr.diagonal();
        Solver {
            kr,
            diag,
            sigma,
            g,
            c2: 1.0,
            iterations: 0,
            passes: 0,
            newton_steps: 0,
            free_pair_steps: 0,
        }
    }

    /// G after the step must be G − K Δσ, computed here from scratch.
    fn assert_gradient_follows(rows: &Rows, before: &Solver, after: &mut Solver) {
        let mut k = KernelRows::new(Kernel::Rbf { gamma: 0.5 }, rows, 0);
        for u in 0..12 {
            let row = k.row(u);
            let moved: f64 = (0..12)
                .map(|v| (after.sigma[v] - before.sigma[v]) * row[v])
                .sum();
            assert!((after.g[u] - (before.g[u] - moved)).abs() <= 1e-12, "G_{u}");
        }
        let sum = |s: &Solver| s.sigma.iter().sum::<f64>();
        assert!((sum(after) - sum(before)).abs() <= 1e-12, "1'σ kept");
    }

    #[test]
    fn a_free_set_newton_step_reaches_the_minimum_on_its_face() {
        let rows = synthetic(3, 0, 12, 0, 4).rows;
        let before = newton_case(&rows, 1e-3);
        let mut after = newton_case(&rows, 1e-3);
        assert_eq!(after.newton_step(), Some(true));
        assert_eq!(after.newton_steps, 1);
        assert_gradient_follows(&rows, &before, &mut after);
        // Stationary on the face: ∇_u = −G_u + κ_u is the same for every free sample, which
        // stay on their pieces; the bound samples do not move.
        let grads: Vec<f64> = (0..4)
            .map(|u| -after.g[u] + if after.sigma[u] > 0.5 { 1.0 } else { -1.0 })
            .collect();
        let spread = grads.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
            - grads.iter().cloned().fold(f64::INFINITY, f64::min);
        assert!(spread <= 1e-9, "free gradients {grads:?}");
        for u in 0..12 {
            assert_eq!(
                free_piece(after.sigma[u], 1.0),
                free_piece(before.sigma[u], 1.0)
            );
        }
        assert!((0..4).any(|u| after.sigma[u] != before.sigma[u]));
        assert_eq!(&after.sigma[4..], &before.sigma[4..]);
    }

    #[test]
    fn a_newton_step_that_leaves_a_piece_stops_on_its_end() {
        let rows = synthetic(3, 0, 12, 0, 4).rows;
        let before = newton_case(&rows, 2.0);
        let mut after = newton_case(&rows, 2.0);
        assert_eq!(after.newton_step(), Some(false));
        assert_gradient_follows(&rows, &before, &mut after);
        let left: Vec<usize> = (0..4)
            .filter(|&u| free_piece(after.sigma[u], 1.0).is_none())
            .collect();
        assert!(!left.is_empty(), "{:?}", after.sigma);
        for u in left {
            assert!(
                [0.0, 0.5, 1.0].contains(&after.sigma[u]),
                "{}",
                after.sigma[u]
            );
        }
        // A second call works on the smaller face.
        assert!(after.newton_step().is_some());
    }

    proptest! {
        #[test]
        fn pair_step_is_the_exact_minimiser(
            si in 0.0..1.0f64, sj in 0.0..1.0f64,
            gi in -3.0..3.0f64, gj in -3.0..3.0f64,
            eta in prop_oneof![Just(0.0), 0.0..4.0f64],
            on_half in 0..4u8,
        ) {
            let c2 = 1.0;
            let si = if on_half & 1 == 1 { 0.5 } else { si };
            let sj = if on_half & 2 == 2 { 0.5 } else { sj };
            let half = 0.5 * c2;
            let t = pair_step(si, sj, gi, gj, eta, c2);
            let t_max = si.min(c2 - sj);
            prop_assert!((0.0..=t_max).contains(&t));
            let phi = (gi - gj) * t + 0.5 * eta * t * t
                + ((si - t - half).abs() - (si - half).abs())
                + ((sj + t - half).abs() - (sj - half).abs());
            let best = brute_force_min(si, sj, gi, gj, eta, c2);
            prop_assert!(phi <= best + 1e-9, "phi {phi} > grid {best}");
        }

        #[test]
        fn random_problems_are_feasible_and_optimal(
            seed in 0u64..1000,
            p in 1usize..12,
            n in 1usize..40,
            prior in prop_oneof![Just(0.01), Just(0.99), 0.05..0.95f64],
            lambda in prop_oneof![Just(1e-6), 1e-4..1.0f64],
            duplicate in any::<bool>(),
            kernel in prop_oneof![
                Just(Kernel::Linear),
                Just(Kernel::Rbf { gamma: 0.5 }),
                Just(Kernel::Poly { degree: 2, gamma: 1.0, coef0: 1.0 }),
            ],
        ) {
            let mut data = synthetic(seed, p, n, n / 3, 3);
            if duplicate {
                // Duplicates and collinear points: make rows repeat exactly.
                let Rows::Dense(m) = &mut data.rows else { unreachable!() };
                for i in (1..m.nrows()).step_by(2) {
                    let prev = m.row(i - 1).to_owned();
                    m.row_mut(i).assign(&(&prev * 2.0));
                }
            }
            let fit = params(prior, lambda, kernel, 1e-6)
                .fit(&data, &AtomicBool::new(false))
                .unwrap();
            assert_feasible(&fit);
            // Tiny λ makes G ~ 1/λ, so an absolute tol of 1e-6 can be below float resolution:
            // the solver must then stop and say so, never loop or claim convergence.
            prop_assert!(fit.report.converged || lambda < 1e-4);
            if !fit.report.converged {
                return Ok(());
            }
            prop_assert!(fit.report.max_violation <= 1e-6);
            prop_assert!(fit.report.dual_objective.is_finite());
            // At a point whose violation is ≤ tol with the bias at the interval's midpoint, each
            // sample's complementary slackness is off by ≤ c2·tol, so the duality gap is at
            // most n·c2·tol = tol/(2λ) (plus round-off).
            let scale = fit.report.dual_objective.abs().max(1.0);
            let gap_bound = 1e-6 / (2.0 * lambda) + 1e-9 * scale;
            prop_assert!(fit.report.duality_residual.abs() <= gap_bound,
                "residual {} bound {gap_bound} dual {}", fit.report.duality_residual,
                fit.report.dual_objective);
        }
    }

    #[test]
    fn warm_start_reaches_the_cold_optimum_with_less_work() {
        let data = synthetic(11, 200, 2000, 600, 5);
        let prm = params(0.3, 1e-3, Kernel::Rbf { gamma: 0.5 }, 1e-6);
        let cancel = AtomicBool::new(false);
        // Rows 0..200 are positives, 200..2200 unlabeled. Window B drops 10 % of window A's
        // positives and unlabeled rows and adds as many new ones.
        let window_a: Vec<usize> = (0..180).chain(200..2000).collect();
        let window_b: Vec<usize> = (18..200).chain(380..2180).collect();
        let first = prm.fit(&data.select(&window_a), &cancel).unwrap();
        let b = data.select(&window_b);
        let warm = prm.fit_with(Some(&first), &b, &cancel).unwrap();
        let cold = prm.fit(&b, &cancel).unwrap();
        assert_feasible(&warm);
        assert!(warm.report.converged && cold.report.converged);
        let rel = (warm.report.dual_objective - cold.report.dual_objective).abs()
            / cold.report.dual_objective.abs();
        assert!(
            rel <= 1e-6,
            "warm {} cold {}",
            warm.report.dual_objective,
            cold.report.dual_objective
        );
        assert!(
            warm.report.iterations < cold.report.iterations,
            "warm {} cold {}",
            warm.report.iterations,
            cold.report.iterations
        );
        assert!(warm.report.kernel_evaluations < cold.report.kernel_evaluations);
        // The warm S_PP update matches a fresh one, so the primal objectives agree too.
        assert!((warm.state.s_pp - cold.state.s_pp).abs() <= 1e-9 * cold.state.s_pp.abs());
        let mut fw = vec![0.0; 2200];
        let mut fc = vec![0.0; 2200];
        warm.expansion.decision_batch(&data.rows, &mut fw);
        cold.expansion.decision_batch(&data.rows, &mut fc);
        let worst = fw
            .iter()
            .zip(&fc)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-3, "decision values differ by {worst}");
    }

    #[test]
    fn warm_start_handles_changed_lambda_prior_and_size() {
        let data = synthetic(5, 30, 200, 50, 3);
        let cancel = AtomicBool::new(false);
        let first = params(0.25, 1e-2, Kernel::Linear, 1e-6)
            .fit(&data.select(&(0..200).collect::<Vec<_>>()), &cancel)
            .unwrap();
        let grown = data.select(&(0..230).collect::<Vec<_>>());
        let prm = params(0.35, 3e-3, Kernel::Linear, 1e-6);
        let warm = prm.fit_with(Some(&first), &grown, &cancel).unwrap();
        let cold = prm.fit(&grown, &cancel).unwrap();
        assert_feasible(&warm);
        let rel = (warm.report.dual_objective - cold.report.dual_objective).abs()
            / cold.report.dual_objective.abs();
        assert!(rel <= 1e-6);
        let other_kernel = params(0.35, 3e-3, Kernel::Rbf { gamma: 1.0 }, 1e-6);
        assert!(matches!(
            other_kernel.fit_with(Some(&first), &grown, &cancel),
            Err(UsmoError::WarmStart(_))
        ));
    }

    #[test]
    fn limits_and_cancel_are_reported() {
        let data = synthetic(3, 20, 300, 80, 3);
        let mut p = UsmoParams::new(0.3, 1e-4, Kernel::Rbf { gamma: 1.0 });
        p.max_iter = Some(5);
        let fit = p
            .check()
            .unwrap()
            .fit(&data, &AtomicBool::new(false))
            .unwrap();
        assert_eq!(fit.report.iterations, 5);
        assert!(!fit.report.converged && !fit.report.cancelled);
        assert_feasible(&fit);
        let fit = params(0.3, 1e-4, Kernel::Linear, 1e-3)
            .fit(&data, &AtomicBool::new(true))
            .unwrap();
        assert!(fit.report.cancelled && !fit.report.converged);
        assert_eq!(fit.report.iterations, 0);
    }

    /// The observer hears the pair steps every [`OBSERVE_EVERY`], with the violation that
    /// the stopping test compares against tol, until it falls below it.
    #[test]
    fn the_observer_hears_the_steps_and_the_violation() {
        use std::sync::Mutex;
        let data = synthetic(3, 100, 1500, 500, 4);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&heard);
        let mut p = UsmoParams::new(0.3, 1e-3, Kernel::Rbf { gamma: 10.0 });
        p.observer = Observer::new(move |step| log.lock().unwrap().push(step));
        let fit = p
            .check()
            .unwrap()
            .fit(&data, &AtomicBool::new(false))
            .unwrap();
        assert!(
            fit.report.converged && fit.report.iterations > OBSERVE_EVERY,
            "{:?}",
            fit.report
        );
        let heard = heard.lock().unwrap();
        let expected = fit.report.iterations.div_ceil(OBSERVE_EVERY);
        assert_eq!(
            heard.len() as u64,
            expected,
            "{} steps",
            fit.report.iterations
        );
        for (n, step) in heard.iter().enumerate() {
            match *step {
                FitStep::Solver {
                    solver: "usmo",
                    iterations,
                    gap,
                    tol,
                } => {
                    assert_eq!(iterations, n as u64 * OBSERVE_EVERY);
                    assert!(gap > tol && tol == 1e-3, "{step:?}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn bad_data_and_parameters_are_errors() {
        let cancel = AtomicBool::new(false);
        let prm = params(0.3, 1e-2, Kernel::Linear, 1e-3);
        let mut data = synthetic(1, 3, 5, 1, 2);
        data.labels.iter_mut().for_each(|l| *l = Label::Unlabeled);
        assert_eq!(prm.fit(&data, &cancel).unwrap_err(), UsmoError::NoPositives);
        data.labels.iter_mut().for_each(|l| *l = Label::Positive);
        assert_eq!(prm.fit(&data, &cancel).unwrap_err(), UsmoError::NoUnlabeled);
        let mut data = synthetic(1, 3, 5, 1, 2);
        data.ids[4] = data.ids[1].clone();
        assert!(matches!(
            prm.fit(&data, &cancel),
            Err(UsmoError::DuplicateId(_))
        ));
        let mut data = synthetic(1, 3, 5, 1, 2);
        if let Rows::Dense(m) = &mut data.rows {
            m[[6, 1]] = f64::NAN;
        }
        assert_eq!(
            prm.fit(&data, &cancel).unwrap_err(),
            UsmoError::NonFinite {
                id: data.ids[6].clone()
            }
        );
        assert!(UsmoParams::new(1.0, 1e-2, Kernel::Linear).check().is_err());
        assert!(UsmoParams::new(0.5, 0.0, Kernel::Linear).check().is_err());
        assert!(UsmoParams::new(0.5, 1e-2, Kernel::Rbf { gamma: -1.0 })
            .check()
            .is_err());
    }

    #[test]
    fn cold_start_is_feasible_and_ranked() {
        let q = [0.5, 3.0, 1.0, 2.0, 0.0];
        let sigma = ranked_start(&q, 0.5, 1.0);
        assert_eq!(sigma, vec![0.0, 1.0, 0.5, 1.0, 0.0]);
        assert_eq!(sigma.iter().sum::<f64>(), 2.5);
    }
}
