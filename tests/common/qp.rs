//! Independent reference solver for the USMO dual (6) (see `docs/usmo.md` §1, §3.6, §8).
//!
//! This module is written independently of the production solver (`src/learn/usmo.rs`) and of the
//! production kernel code: it builds its own Gram matrices and solves the dual as a generic convex
//! QP with the interior-point solver `clarabel`. Test code compares the production solver against it.
//!
//! Problem (dual (6), minimisation form). With the Gram matrix `K` over `[P; U]` (p positives first,
//! then n unlabelled), `c1 = pi/(2 lambda p)`, `c2 = 1/(2 lambda n)`, `Q = K_UU`, `q = K_UP 1_p`:
//!
//! ```text
//!   min_{sigma, delta in R^n}  F = 1/2 sigma'Q sigma - c1 q'sigma - 1/2 1'delta
//!   s.t.  1'sigma = c1 p,   delta - 2 sigma <= 0,   delta + 2 sigma <= 2 c2,   0 <= delta (<= c2)
//! ```
//!
//! Representation handed to clarabel: the variables are scaled to `s = sigma/c2`, `d = delta/c2`
//! (so every bound is O(1)), and the objective is divided by `c2`:
//!
//! ```text
//!   min_{s,d}  1/2 s'(c2 Q)s - c1 q's - 1/2 1'd
//!   s.t. 1's = c1 p / c2 (= pi n);  d - 2s <= 0;  d + 2s <= 2;  -d <= 0
//! ```
//!
//! The constraint `d <= 1` (delta <= c2) is implied by the two sigma/delta rows
//! (2 d <= (2s) + (2 - 2s) = 2) and is deliberately NOT passed to clarabel: at a state-C point
//! (sigma = c2/2, delta = c2) it would make three constraints active at once, a degenerate vertex that
//! only slows the interior-point method down. No ridge on the delta block is needed (clarabel's
//! static/dynamic regularisation copes with the zero diagonal), so none is added.

use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSettings, DefaultSolver, IPSolver, SolverStatus, SupportedConeT::NonnegativeConeT,
    SupportedConeT::ZeroConeT,
};
use ndarray::{Array2, ArrayView1};

// ---------------------------------------------------------------------------------------------
// Solution type
// ---------------------------------------------------------------------------------------------

/// Reference solution of the USMO dual (6).
#[derive(Debug, Clone)]
pub struct QpSolution {
    /// Dual variables sigma_u, u in U (length n). Raw interior-point values, only clamped into
    /// `[0, c2]`; they are not snapped onto the bounds 0, c2/2, c2.
    pub sigma: Vec<f64>,
    /// delta_u (length n): the interior-point values clamped into `[0, min(2 sigma, 2 c2 - 2 sigma)]`,
    /// which makes (sigma, delta) satisfy every inequality of (6) exactly. At the optimum
    /// delta ≈ min(2 sigma, 2c2 - 2 sigma) (Lemma 1) up to the solver accuracy.
    pub delta: Vec<f64>,
    /// F(sigma, delta) of (6), evaluated at the returned `sigma` and `delta`.
    pub dual_objective: f64,
    /// beta = midpoint of `bias_interval`.
    pub bias: f64,
    /// [max_u l_u, min_u r_u] (docs/usmo.md §3.2, §3.6), computed from the returned sigma. A point
    /// counts as on a bound if it is within `BOUND_TOL_REL * c2` of it or if clarabel's
    /// slack/multiplier pair says the bound constraint is active. Because the interior-point
    /// solution is not exact, the interval can be inverted (lo > hi) by a tiny amount (~1e-9
    /// relative) when it is (nearly) a single point.
    pub bias_interval: (f64, f64),
    pub c1: f64,
    pub c2: f64,
    /// S_PP = sum_{i,j in P} K_ij.
    pub s_pp: f64,
    /// Primal (5) objective at alpha = [c1 1_p; -sigma], beta = `bias`,
    /// xi_u = max(0, f_u, (1 + f_u)/2).
    pub primal_objective: f64,
    /// Second, independent estimate of beta: minus the multiplier clarabel returns for the equality
    /// constraint 1'sigma = c1 p. Should lie inside `bias_interval` (up to solver accuracy).
    pub bias_from_equality_dual: f64,
    /// Number of interior-point iterations clarabel used (last solve).
    pub solver_iterations: u32,
    /// True if the 1e-12 solve did not reach `Solved` and a looser tolerance was used.
    pub used_fallback: bool,
}

/// Relative tolerance (times c2) used to decide that sigma_u is "at" 0, c2/2 or c2.
pub const BOUND_TOL_REL: f64 = 1e-7;

/// Clarabel settings with gap (abs and rel) and feasibility tolerances all equal to `tol`.
pub fn settings_with_tol(tol: f64) -> DefaultSettings<f64> {
    DefaultSettings {
        verbose: false,
        max_iter: 500,
        tol_gap_abs: tol,
        tol_gap_rel: tol,
        tol_feas: tol,
        ..DefaultSettings::default()
    }
}

/// Settings used for the reference solve: tolerances 1e-12. On the problems of the self-tests
/// (p <= 15, n <= 200, linear and RBF kernels, lambda 1e-3..1) clarabel reaches `Solved` with
/// them in <= ~20 iterations. Tolerance 1e-10 also always converges, but then points that are
/// on a bound can sit up to ~1e-6 c2 away from it, which is what makes the bias classification
/// below need the complementarity test.
pub fn reference_settings() -> DefaultSettings<f64> {
    settings_with_tol(1e-12)
}

/// Looser fallbacks, tried in order only if the previous solve did not reach `Solved`.
const FALLBACK_TOLS: [f64; 2] = [1e-10, 1e-8];

// ---------------------------------------------------------------------------------------------
// Constants and objectives
// ---------------------------------------------------------------------------------------------

/// (c1, c2) = (pi/(2 lambda p), 1/(2 lambda n)).
pub fn usmo_constants(p: usize, n: usize, lambda: f64, pi: f64) -> (f64, f64) {
    (
        pi / (2.0 * lambda * p as f64),
        1.0 / (2.0 * lambda * n as f64),
    )
}

fn check_problem(k: &Array2<f64>, p: usize) -> usize {
    assert_eq!(k.nrows(), k.ncols(), "K must be square");
    assert!(p >= 1, "need at least one positive");
    assert!(k.nrows() > p, "need at least one unlabelled sample");
    k.nrows() - p
}

/// q_u = sum_{i in P} K[p+u, i], u = 0..n.
pub fn q_vector(k: &Array2<f64>, p: usize) -> Vec<f64> {
    let n = check_problem(k, p);
    (0..n)
        .map(|u| (0..p).map(|i| k[[p + u, i]]).sum())
        .collect()
}

/// S_PP = sum_{i,j in P} K_ij.
pub fn s_pp(k: &Array2<f64>, p: usize) -> f64 {
    let mut s = 0.0;
    for i in 0..p {
        for j in 0..p {
            s += k[[i, j]];
        }
    }
    s
}

/// (Q sigma)_u = sum_v K[p+u, p+v] sigma_v.
fn q_times(k: &Array2<f64>, p: usize, sigma: &[f64]) -> Vec<f64> {
    let n = sigma.len();
    (0..n)
        .map(|u| (0..n).map(|v| k[[p + u, p + v]] * sigma[v]).sum())
        .collect()
}

/// G_u = c1 q_u - (Q sigma)_u  (= f(x_u) - beta).
pub fn bias_free_values(k: &Array2<f64>, p: usize, c1: f64, sigma: &[f64]) -> Vec<f64> {
    let q = q_vector(k, p);
    let qs = q_times(k, p, sigma);
    q.iter().zip(&qs).map(|(qu, qsu)| c1 * qu - qsu).collect()
}

/// F(sigma, delta) = 1/2 sigma'Q sigma - c1 q'sigma - 1/2 1'delta   (dual (6)).
pub fn dual_objective(k: &Array2<f64>, p: usize, c1: f64, sigma: &[f64], delta: &[f64]) -> f64 {
    let q = q_vector(k, p);
    let qs = q_times(k, p, sigma);
    let quad: f64 = sigma.iter().zip(&qs).map(|(s, v)| s * v).sum();
    let lin: f64 = sigma.iter().zip(&q).map(|(s, v)| s * v).sum();
    let dsum: f64 = delta.iter().sum();
    0.5 * quad - c1 * lin - 0.5 * dsum
}

/// Reduced dual (delta eliminated by Lemma 1):
/// F(sigma) = 1/2 sigma'Q sigma - c1 q'sigma + sum_u |sigma_u - c2/2| - n c2/2.
pub fn reduced_dual_objective(k: &Array2<f64>, p: usize, c1: f64, c2: f64, sigma: &[f64]) -> f64 {
    let delta: Vec<f64> = sigma
        .iter()
        .map(|&s| (2.0 * s).min(2.0 * c2 - 2.0 * s))
        .collect();
    dual_objective(k, p, c1, sigma, &delta)
}

/// alpha = [c1 1_p; -sigma].
pub fn alpha_from_sigma(p: usize, c1: f64, sigma: &[f64]) -> Vec<f64> {
    let mut a = vec![c1; p];
    a.extend(sigma.iter().map(|s| -s));
    a
}

/// Primal (5): 1/2 alpha'K alpha - c1 1~'K alpha - c1 p beta + c2 sum_u xi_u,
/// with alpha = [c1 1_p; -sigma] and xi_u = max(0, f_u, (1 + f_u)/2), f = (K alpha + beta) on U.
pub fn primal_objective(
    k: &Array2<f64>,
    p: usize,
    c1: f64,
    c2: f64,
    sigma: &[f64],
    beta: f64,
) -> f64 {
    let n = check_problem(k, p);
    assert_eq!(sigma.len(), n);
    let alpha = alpha_from_sigma(p, c1, sigma);
    let ka = k.dot(&ArrayView1::from(&alpha[..]));
    let quad: f64 = alpha.iter().zip(ka.iter()).map(|(a, b)| a * b).sum();
    let pos: f64 = ka.iter().take(p).sum();
    let xi: f64 = (0..n)
        .map(|u| {
            let f = ka[p + u] + beta;
            0.0f64.max(f).max(0.5 * (1.0 + f))
        })
        .sum();
    0.5 * quad - c1 * pos - c1 * p as f64 * beta + c2 * xi
}

/// Where sigma_u sits relative to the bounds 0 < c2/2 < c2 (the states A..E of docs/usmo.md §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigmaState {
    /// sigma = 0 (state A)
    AtZero,
    /// 0 < sigma < c2/2 (state B)
    Lower,
    /// sigma = c2/2 (state C)
    AtHalf,
    /// c2/2 < sigma < c2 (state D)
    Upper,
    /// sigma = c2 (state E)
    AtC2,
}

/// State of each sigma_u with an absolute "at the bound" tolerance `tol`.
pub fn sigma_states(sigma: &[f64], c2: f64, tol: f64) -> Vec<SigmaState> {
    sigma
        .iter()
        .map(|&s| {
            if s <= tol {
                SigmaState::AtZero
            } else if s >= c2 - tol {
                SigmaState::AtC2
            } else if (s - 0.5 * c2).abs() <= tol {
                SigmaState::AtHalf
            } else if s < 0.5 * c2 {
                SigmaState::Lower
            } else {
                SigmaState::Upper
            }
        })
        .collect()
}

/// [max l_u, min r_u] from explicit states; r_u = -G_u + (state in {AtHalf, Upper} ? 1 : -1) for
/// state != AtC2, l_u = -G_u + (state in {Upper, AtC2} ? 1 : -1) for state != AtZero.
pub fn bias_interval_from_states(g: &[f64], states: &[SigmaState]) -> (f64, f64) {
    use SigmaState::*;
    let mut lo = f64::NEG_INFINITY;
    let mut hi = f64::INFINITY;
    for (&gu, &st) in g.iter().zip(states) {
        if st != AtC2 {
            let r = -gu
                + if matches!(st, AtHalf | Upper) {
                    1.0
                } else {
                    -1.0
                };
            hi = hi.min(r);
        }
        if st != AtZero {
            let l = -gu
                + if matches!(st, Upper | AtC2) {
                    1.0
                } else {
                    -1.0
                };
            lo = lo.max(l);
        }
    }
    (lo, hi)
}

/// Bias interval [max_u l_u, min_u r_u] (docs/usmo.md §3.2) with
/// r_u = -G_u + (sigma_u >= c2/2 ? 1 : -1) over sigma_u < c2 and
/// l_u = -G_u + (sigma_u > c2/2 ? 1 : -1) over sigma_u > 0,
/// where "at the bound" is decided with an absolute tolerance `tol`.
/// An empty side is reported as -inf / +inf.
pub fn bias_interval(g: &[f64], sigma: &[f64], c2: f64, tol: f64) -> (f64, f64) {
    bias_interval_from_states(g, &sigma_states(sigma, c2, tol))
}

fn interval_midpoint((lo, hi): (f64, f64)) -> f64 {
    match (lo.is_finite(), hi.is_finite()) {
        (true, true) => 0.5 * (lo + hi),
        (true, false) => lo,
        (false, true) => hi,
        (false, false) => 0.0,
    }
}

// ---------------------------------------------------------------------------------------------
// The solve
// ---------------------------------------------------------------------------------------------

/// Solves dual (6) for the Gram matrix `k` over `[P; U]` (first `p` rows/cols are the positives).
/// Panics if clarabel does not report `Solved` even with the looser fallback tolerances.
pub fn solve_usmo_dual(k: &Array2<f64>, p: usize, lambda: f64, pi: f64) -> QpSolution {
    solve_usmo_dual_with(k, p, lambda, pi, reference_settings())
}

/// As [`solve_usmo_dual`] but with explicit clarabel settings (fallback still applies).
pub fn solve_usmo_dual_with(
    k: &Array2<f64>,
    p: usize,
    lambda: f64,
    pi: f64,
    settings: DefaultSettings<f64>,
) -> QpSolution {
    let n = check_problem(k, p);
    assert!(lambda > 0.0 && lambda.is_finite(), "lambda must be > 0");
    assert!(pi > 0.0 && pi < 1.0, "pi must be in (0,1)");
    for v in k.iter() {
        assert!(v.is_finite(), "K has non-finite entries");
    }
    let (c1, c2) = usmo_constants(p, n, lambda, pi);
    let q = q_vector(k, p);

    // ---- P = blkdiag(c2 Q, 0), upper triangle, CSC -------------------------------------------
    // Symmetrise Q explicitly (K may be symmetric only up to round-off).
    let mut colptr = Vec::with_capacity(2 * n + 1);
    let mut rowval = Vec::new();
    let mut nzval = Vec::new();
    colptr.push(0);
    for j in 0..n {
        for i in 0..=j {
            let qij = 0.5 * (k[[p + i, p + j]] + k[[p + j, p + i]]);
            rowval.push(i);
            nzval.push(c2 * qij);
        }
        colptr.push(rowval.len());
    }
    for _ in 0..n {
        colptr.push(rowval.len()); // delta block: all zero
    }
    let pmat = CscMatrix::new(2 * n, 2 * n, colptr, rowval, nzval);

    // ---- linear term: [-c1 q; -1/2 1] ----------------------------------------------------------
    let mut lin: Vec<f64> = q.iter().map(|qu| -c1 * qu).collect();
    lin.resize(2 * n, -0.5);

    // ---- constraints A x + s = b ----------------------------------------------------------------
    // row 0            : 1's            = pi n      (ZeroCone)
    // rows 1..=n       : d_u - 2 s_u   <= 0        (Nonneg)
    // rows n+1..=2n    : d_u + 2 s_u   <= 2
    // rows 2n+1..=3n   : -d_u          <= 0
    let (mut ri, mut ci, mut vv) = (Vec::new(), Vec::new(), Vec::new());
    let mut b = vec![0.0; 1 + 3 * n];
    for u in 0..n {
        let (s_col, d_col) = (u, n + u);
        ri.push(0);
        ci.push(s_col);
        vv.push(1.0);

        ri.push(1 + u);
        ci.push(d_col);
        vv.push(1.0);
        ri.push(1 + u);
        ci.push(s_col);
        vv.push(-2.0);

        ri.push(1 + n + u);
        ci.push(d_col);
        vv.push(1.0);
        ri.push(1 + n + u);
        ci.push(s_col);
        vv.push(2.0);
        b[1 + n + u] = 2.0;

        ri.push(1 + 2 * n + u);
        ci.push(d_col);
        vv.push(-1.0);
    }
    b[0] = c1 * p as f64 / c2; // = pi * n
    let amat = CscMatrix::new_from_triplets(1 + 3 * n, 2 * n, ri, ci, vv);
    let cones = [ZeroConeT(1), NonnegativeConeT(3 * n)];

    let run = |st: DefaultSettings<f64>| {
        let mut solver = DefaultSolver::new(&pmat, &lin, &amat, &b, &cones, st)
            .expect("clarabel rejected the problem data");
        solver.solve();
        solver.solution
    };
    let mut sol = run(settings);
    let mut history = vec![sol.status];
    for &tol in FALLBACK_TOLS.iter() {
        if sol.status == SolverStatus::Solved {
            break;
        }
        sol = run(settings_with_tol(tol));
        history.push(sol.status);
    }
    assert!(
        sol.status == SolverStatus::Solved,
        "clarabel failed on the USMO dual (statuses with decreasing accuracy: {history:?})"
    );
    let used_fallback = history.len() > 1;

    // ---- unscale and clean up ---------------------------------------------------------------------
    let sigma: Vec<f64> = sol.x[..n].iter().map(|s| (s * c2).clamp(0.0, c2)).collect();
    let delta: Vec<f64> = sol.x[n..]
        .iter()
        .zip(&sigma)
        .map(|(d, &s)| (d * c2).min(2.0 * s).min(2.0 * c2 - 2.0 * s).max(0.0))
        .collect();
    // Multiplier of 1's = b0 in  P x + q + A'z = 0:  -G_u + z0 + ... = 0  =>  beta = -z0.
    // (The s-gradient of the scaled objective equals dF/dsigma, so no rescaling of z0 is needed.)
    let bias_from_equality_dual = -sol.z[0];

    // States for the bias interval: sigma within BOUND_TOL_REL*c2 of a bound counts as on it, and
    // additionally a constraint row counts as active when its slack is below its multiplier
    // (the usual interior-point active-set identification; slack/multiplier -> 0 on active rows,
    // -> inf on inactive ones). Treating a near-bound point as on the bound can only widen the
    // interval; the converse mistake (a bound point taken as interior) adds a wrong two-sided
    // constraint and inverts the interval, which is what the complementarity test prevents.
    let tol = BOUND_TOL_REL * c2;
    let states: Vec<SigmaState> = (0..n)
        .map(|u| {
            let act = |row: usize| sol.s[row] < sol.z[row];
            let (a_low, a_up, a_d0) = (act(1 + u), act(1 + n + u), act(1 + 2 * n + u));
            let mut cands: Vec<(f64, SigmaState)> = Vec::new();
            let s = sigma[u];
            if s <= tol || (a_low && a_d0) {
                cands.push((s, SigmaState::AtZero));
            }
            if (s - 0.5 * c2).abs() <= tol || (a_low && a_up) {
                cands.push(((s - 0.5 * c2).abs(), SigmaState::AtHalf));
            }
            if s >= c2 - tol || (a_up && a_d0) {
                cands.push((c2 - s, SigmaState::AtC2));
            }
            // nearest flagged bound wins
            cands.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
            match cands.first() {
                Some(&(_, st)) => st,
                None if s < 0.5 * c2 => SigmaState::Lower,
                None => SigmaState::Upper,
            }
        })
        .collect();
    let g = bias_free_values(k, p, c1, &sigma);
    let interval = bias_interval_from_states(&g, &states);
    let bias = interval_midpoint(interval);
    let dual_obj = dual_objective(k, p, c1, &sigma, &delta);
    let primal_obj = primal_objective(k, p, c1, c2, &sigma, bias);

    QpSolution {
        sigma,
        delta,
        dual_objective: dual_obj,
        bias,
        bias_interval: interval,
        c1,
        c2,
        s_pp: s_pp(k, p),
        primal_objective: primal_obj,
        bias_from_equality_dual,
        solver_iterations: sol.iterations,
        used_fallback,
    }
}

/// P + F + c1^2 S_PP / 2 (≈ 0 by strong duality).
pub fn duality_residual(sol: &QpSolution) -> f64 {
    sol.primal_objective + sol.dual_objective + 0.5 * sol.c1 * sol.c1 * sol.s_pp
}

/// f(x) = K_test alpha + beta, with rows of `k_test` = test points and columns = [P; U] training
/// samples (same order as the Gram matrix that was solved). p is inferred as cols - n.
pub fn decision_values(sol: &QpSolution, k_test: &Array2<f64>) -> Vec<f64> {
    let n = sol.sigma.len();
    assert!(k_test.ncols() > n, "k_test must have p + n columns");
    let p = k_test.ncols() - n;
    let alpha = alpha_from_sigma(p, sol.c1, &sol.sigma);
    let f = k_test.dot(&ArrayView1::from(&alpha[..]));
    f.iter().map(|v| v + sol.bias).collect()
}

// ---------------------------------------------------------------------------------------------
// Gram matrices (independent of the production kernel code)
// ---------------------------------------------------------------------------------------------

fn sq_dist(a: ArrayView1<f64>, b: ArrayView1<f64>) -> f64 {
    a.iter().zip(b.iter()).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// K_ij = <a_i, b_j>.
pub fn cross_gram_linear(a: &Array2<f64>, b: &Array2<f64>) -> Array2<f64> {
    assert_eq!(a.ncols(), b.ncols());
    Array2::from_shape_fn((a.nrows(), b.nrows()), |(i, j)| {
        a.row(i)
            .iter()
            .zip(b.row(j).iter())
            .map(|(x, y)| x * y)
            .sum()
    })
}

/// K_ij = exp(-gamma ||a_i - b_j||^2).
pub fn cross_gram_rbf(a: &Array2<f64>, b: &Array2<f64>, gamma: f64) -> Array2<f64> {
    assert_eq!(a.ncols(), b.ncols());
    Array2::from_shape_fn((a.nrows(), b.nrows()), |(i, j)| {
        (-gamma * sq_dist(a.row(i), b.row(j))).exp()
    })
}

/// Linear Gram matrix of the rows of x (exactly symmetric).
pub fn gram_linear(x: &Array2<f64>) -> Array2<f64> {
    symmetrise(cross_gram_linear(x, x))
}

/// RBF Gram matrix exp(-gamma ||x_i - x_j||^2) of the rows of x (exactly symmetric, unit diagonal).
pub fn gram_rbf(x: &Array2<f64>, gamma: f64) -> Array2<f64> {
    symmetrise(cross_gram_rbf(x, x, gamma))
}

fn symmetrise(mut k: Array2<f64>) -> Array2<f64> {
    let m = k.nrows();
    for i in 0..m {
        for j in (i + 1)..m {
            let v = 0.5 * (k[[i, j]] + k[[j, i]]);
            k[[i, j]] = v;
            k[[j, i]] = v;
        }
    }
    k
}

// ---------------------------------------------------------------------------------------------
// Deterministic random PU problems (self-contained SplitMix64; no `rand` dependency)
// ---------------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood 2014), the seeding generator of xoshiro.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Standard normal (Box–Muller, one draw per call).
    pub fn next_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Rows [P; U] of a random PU problem: every positive is N(0, I_d) + 1 (all coordinates shifted
/// by +1), every negative is N(0, I_d). The first `p` rows are labelled positives; each of the
/// `n` unlabelled rows is positive with probability `pos_frac`. Returns the data and the hidden
/// labels of the unlabelled rows (true = positive). Deterministic in `seed`.
pub fn random_pu_problem_labeled(
    seed: u64,
    p: usize,
    n: usize,
    d: usize,
    pos_frac: f64,
) -> (Array2<f64>, Vec<bool>) {
    let mut rng = SplitMix64::new(seed);
    let mut x = Array2::<f64>::zeros((p + n, d));
    let mut labels = Vec::with_capacity(n);
    for r in 0..(p + n) {
        let positive = if r < p {
            true
        } else {
            let y = rng.next_f64() < pos_frac;
            labels.push(y);
            y
        };
        let shift = if positive { 1.0 } else { 0.0 };
        for c in 0..d {
            x[[r, c]] = rng.next_normal() + shift;
        }
    }
    (x, labels)
}

/// As [`random_pu_problem_labeled`] with half of the unlabelled rows positive (in expectation),
/// returning only the data matrix (rows [P; U]).
pub fn random_pu_problem(seed: u64, p: usize, n: usize, d: usize) -> Array2<f64> {
    random_pu_problem_labeled(seed, p, n, d, 0.5).0
}
