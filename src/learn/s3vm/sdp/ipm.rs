//! The primal–dual interior-point method for [`SdpProblem`] (an infeasible-start path
//! following method in the manner of SDPT3 and CSDP).
//!
//! Inequality rows get slacks: ⟨A_k, Y⟩ − s_q = b_k (≥) or ⟨A_k, Y⟩ + s_q = b_k (≤), s ≥ 0,
//! with dual slack w_q = ∓y_k ≥ 0, so the cone is PSD(N) × R^p_+. Each iteration:
//!
//! - **Direction**: HKM. The Newton step on Σ y_k A_k + Z = C̃, 𝒜(Y) ± s = b and
//!   YZ = σμI, s∘w = σμ, eliminated to the Schur complement
//!   `M Δy = r`, `M_kl = ⟨A_k, Y A_l Z⁻¹⟩ + [k = l]·s_q/w_q`, assembled entry by entry from
//!   the rows' few (i, j) entries, never from dense A_k: `M_kl = Σ v·w·Y_bc·Z⁻¹_da` over the
//!   entries (a, b, v) of A_k and (c, d, w) of A_l. M is symmetric positive definite; faer's
//!   Cholesky factors it once per iteration and serves both solves. Then
//!   ΔZ = R_d − Σ Δy_k A_k and ΔY = sym((σμI − YZ − YΔZ − corr)·Z⁻¹).
//! - **Mehrotra predictor–corrector**: the predictor (σ = 0) gives the affine steps and
//!   μ_aff; σ = (μ_aff/μ)³; the corrector adds the second-order term ΔY_aff ΔZ_aff.
//! - **Steps**: separate primal and dual lengths, each `step_fraction` of the largest step
//!   that keeps the cone: for Y = LLᵀ the largest α with Y + αΔY ⪰ 0 is −1/λ_min(L⁻¹ΔYL⁻ᵀ)
//!   (faer's self-adjoint eigenvalues), capped at 1.
//! - **Stop**: relative primal infeasibility ‖b − 𝒜(Y) ∓ s‖/(1 + ‖b‖), relative dual
//!   infeasibility ‖C̃ − Z − Σ y_k A_k‖/(1 + ‖C̃‖) (w's rows counted) and relative gap
//!   |pobj − dobj|/(1 + |pobj| + |dobj|) all ≤ `tol`; or [`SdpStatus::Stalled`] once the dual
//!   side has converged and the iterates stop improving.

use faer::linalg::solvers::Solve;
use faer::{Mat, Par, Side};

use super::{frobenius_dot, SdpError, SdpProblem, Sense};

/// How a solve ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SdpStatus {
    /// Primal and dual infeasibility and the relative gap are all ≤ `tol`.
    Optimal,
    /// `max_iterations` ran out first; the last iterate is returned.
    MaxIterations,
    /// The dual objective ran away (bᵀy beyond 1e8·(1 + ‖C̃‖) with the dual slack still
    /// positive definite): the rows admit no Y ⪰ 0, as in a pruned branch.
    Infeasible,
    /// A Cholesky factor failed or the steps became vanishingly short; the last iterate is
    /// returned, and its safe bound is still valid.
    NumericalTrouble,
    /// The dual infeasibility is ≤ `tol`, the gap and the primal infeasibility are small
    /// (≤ [`STALL_GAP`], ≤ [`STALL_PRIMAL`]), but the iterates stopped improving: the primal
    /// infeasibility rises once the gap is ≤ `tol`, or max(primal infeasibility, gap) has not
    /// halved in [`STALL_PATIENCE`] iterations (rounding in the Schur solves as μ → 0, seen
    /// with hundreds of RLT rows: docs/exact-s3vm.md §8). Further steps only lose accuracy;
    /// the dual side, which is all the safe bound reads, has converged.
    Stalled,
    /// The caller's stop test ([`SdpValidParams::solve_until`]: a time limit, a cancel) held
    /// before convergence; the last iterate is returned, and its safe bound is still valid.
    Interrupted,
}

impl SdpStatus {
    /// The name the reports and logs use (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            SdpStatus::Optimal => "optimal",
            SdpStatus::MaxIterations => "max_iterations",
            SdpStatus::Infeasible => "infeasible",
            SdpStatus::NumericalTrouble => "numerical_trouble",
            SdpStatus::Stalled => "stalled",
            SdpStatus::Interrupted => "interrupted",
        }
    }
}

/// The cap on the starting Y's scale, in units of max(10, √n).
const START_CAP: f64 = 3.0;

/// The largest primal infeasibility [`SdpStatus::Stalled`] accepts.
pub const STALL_PRIMAL: f64 = 1e-6;
/// The largest relative gap [`SdpStatus::Stalled`] accepts.
pub const STALL_GAP: f64 = 1e-6;
/// Iterations without progress before [`SdpStatus::Stalled`].
pub const STALL_PATIENCE: usize = 3;

/// The engine's settings (unchecked); [`SdpParams::check`] validates them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SdpParams {
    /// Stop when the relative primal and dual infeasibilities and the relative gap are ≤ this.
    pub tol: f64,
    pub max_iterations: usize,
    /// The share of the largest step to the cone's boundary taken (γ of SDPT3).
    pub step_fraction: f64,
}

impl Default for SdpParams {
    fn default() -> SdpParams {
        SdpParams {
            tol: Self::DEFAULT_TOL,
            max_iterations: Self::DEFAULT_MAX_ITERATIONS,
            step_fraction: Self::DEFAULT_STEP_FRACTION,
        }
    }
}

impl SdpParams {
    pub const DEFAULT_TOL: f64 = 1e-8;
    pub const DEFAULT_MAX_ITERATIONS: usize = 100;
    pub const DEFAULT_STEP_FRACTION: f64 = 0.95;

    pub fn check(self) -> Result<SdpValidParams, SdpError> {
        if !(self.tol > 0.0 && self.tol < 1.0) {
            return Err(SdpError::Param(format!(
                "the tolerance must be in (0, 1), got {}",
                self.tol
            )));
        }
        if !(self.step_fraction > 0.0 && self.step_fraction < 1.0) {
            return Err(SdpError::Param(format!(
                "the step fraction must be in (0, 1), got {}",
                self.step_fraction
            )));
        }
        Ok(SdpValidParams { params: self })
    }
}

/// Checked [`SdpParams`]; [`SdpValidParams::solve`] runs the method.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SdpValidParams {
    params: SdpParams,
}

/// The last iterate and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct SdpSolution {
    pub status: SdpStatus,
    pub iterations: usize,
    /// ⟨C̃, Y⟩.
    pub primal_objective: f64,
    /// bᵀy.
    pub dual_objective: f64,
    pub primal_infeasibility: f64,
    pub dual_infeasibility: f64,
    pub relative_gap: f64,
    /// Y, the primal matrix.
    pub primal: Mat<f64>,
    /// s, the slacks of the inequality rows, in row order.
    pub slacks: Vec<f64>,
    /// y, one multiplier per row.
    pub duals: Vec<f64>,
    /// Z, the dual slack matrix of the iterate.
    pub dual_slack: Mat<f64>,
}

/// A row's A_k in both triangles, b_k and its slack.
struct Row {
    /// (a, b, v): A_k[a, b] = v, each off-diagonal entry listed in both orders.
    sym: Vec<(usize, usize, f64)>,
    rhs: f64,
    /// The slack's index and g_k (−1 for ≥, +1 for ≤): ⟨A_k, Y⟩ + g_k s_q = b_k.
    slack: Option<(usize, f64)>,
}

/// One search direction.
struct Direction {
    dy: Vec<f64>,
    d_y: Mat<f64>,
    d_z: Mat<f64>,
    ds: Vec<f64>,
    dw: Vec<f64>,
}

/// The current iterate.
struct Iterate {
    y_mat: Mat<f64>,
    z: Mat<f64>,
    y: Vec<f64>,
    s: Vec<f64>,
    w: Vec<f64>,
}

impl SdpValidParams {
    /// Solves `problem` from the standard infeasible start (Y, s, Z, w positive multiples of
    /// the identity, y = 0). Never fails: trouble ends the solve with a status.
    pub fn solve(&self, problem: &SdpProblem) -> SdpSolution {
        self.solve_until(problem, &|| false)
    }

    /// [`SdpValidParams::solve`], asking `stop` before every step and ending with
    /// [`SdpStatus::Interrupted`] when it says so: a solve of a few thousand rows takes tens
    /// of seconds, too long to overrun a time limit or a Ctrl-C by.
    pub fn solve_until(&self, problem: &SdpProblem, stop: &dyn Fn() -> bool) -> SdpSolution {
        let n = problem.order();
        let c = problem.objective();
        let mut rows = Vec::with_capacity(problem.constraints().len());
        let mut slack_rows = Vec::new();
        for (k, row) in problem.constraints().iter().enumerate() {
            let mut sym = Vec::with_capacity(2 * row.entries.len());
            for &(i, j, v) in &row.entries {
                if i == j {
                    sym.push((i, i, v));
                } else {
                    sym.push((i, j, 0.5 * v));
                    sym.push((j, i, 0.5 * v));
                }
            }
            let slack = match row.sense {
                Sense::Eq => None,
                Sense::Ge => Some((slack_rows.len(), -1.0)),
                Sense::Le => Some((slack_rows.len(), 1.0)),
            };
            if slack.is_some() {
                slack_rows.push(k);
            }
            rows.push(Row {
                sym,
                rhs: row.rhs,
                slack,
            });
        }
        let (m, p) = (rows.len(), slack_rows.len());
        let norm_c = frobenius_dot(c, c).sqrt();
        let norm_b = rows.iter().map(|r| r.rhs * r.rhs).sum::<f64>().sqrt();
        let row_norm = |r: &Row| r.sym.iter().map(|e| e.2 * e.2).sum::<f64>().sqrt();
        // SDPT3's starting point: large enough that Y and Z stay well inside the cone while the
        // infeasibilities fall; Y's scale capped at START_CAP·max(10, √n), since one large box
        // bound (OBBT's, hundreds) made it 1e4 and the RLT rounds' solves 25–45 % longer
        // (docs/exact-s3vm.md §8).
        let dim = n as f64;
        let floor = 10f64.max(dim.sqrt());
        let xi = rows
            .iter()
            .map(|r| dim * (1.0 + r.rhs.abs()) / (1.0 + row_norm(r)))
            .fold(floor, f64::max)
            .min(START_CAP * floor);
        let eta = rows
            .iter()
            .map(row_norm)
            .fold(10f64.max(dim.sqrt()).max(norm_c), f64::max);
        let mut it = Iterate {
            y_mat: Mat::from_fn(n, n, |i, j| if i == j { xi } else { 0.0 }),
            z: Mat::from_fn(n, n, |i, j| if i == j { eta } else { 0.0 }),
            y: vec![0.0; m],
            s: vec![xi; p],
            w: vec![eta; p],
        };
        let mut iterations = 0;
        let mut last_pinf = f64::INFINITY;
        // The best max(pinf, gap) so far and the iterations since it halved.
        let (mut best, mut since_best) = (f64::INFINITY, 0usize);
        let status;
        let mut report;
        loop {
            // Residuals at the iterate.
            let ay = apply(&rows, &it.y_mat);
            let rp: Vec<f64> = rows
                .iter()
                .zip(&ay)
                .map(|(r, a)| r.rhs - a - r.slack.map_or(0.0, |(q, g)| g * it.s[q]))
                .collect();
            let mut rd = c - &it.z;
            subtract_adjoint(&rows, &it.y, &mut rd);
            let rw: Vec<f64> = slack_rows
                .iter()
                .enumerate()
                .map(|(q, &k)| -rows[k].slack.map_or(0.0, |(_, g)| g) * it.y[k] - it.w[q])
                .collect();
            let pobj = frobenius_dot(c, &it.y_mat);
            let dobj: f64 = rows.iter().zip(&it.y).map(|(r, y)| r.rhs * y).sum();
            let pinf = norm(&rp) / (1.0 + norm_b);
            let dinf = (frobenius_dot(&rd, &rd) + dot(&rw, &rw)).sqrt() / (1.0 + norm_c);
            let gap = (pobj - dobj).abs() / (1.0 + pobj.abs() + dobj.abs());
            report = (pobj, dobj, pinf, dinf, gap);
            if !(pobj.is_finite() && dobj.is_finite() && pinf.is_finite() && dinf.is_finite()) {
                status = SdpStatus::NumericalTrouble;
                break;
            }
            let tol = self.params.tol;
            if pinf <= tol && dinf <= tol && gap <= tol {
                status = SdpStatus::Optimal;
                break;
            }
            if pinf.max(gap) < 0.5 * best {
                (best, since_best) = (pinf.max(gap), 0);
            } else {
                since_best += 1;
            }
            let rising = gap <= tol && pinf > last_pinf;
            if dinf <= tol
                && gap <= STALL_GAP
                && pinf <= STALL_PRIMAL
                && (rising || since_best >= STALL_PATIENCE)
            {
                status = SdpStatus::Stalled;
                break;
            }
            last_pinf = pinf;
            if dobj > 1e8 * (1.0 + norm_c) {
                status = SdpStatus::Infeasible;
                break;
            }
            if iterations == self.params.max_iterations {
                status = SdpStatus::MaxIterations;
                break;
            }
            if stop() {
                status = SdpStatus::Interrupted;
                break;
            }
            let Some(step) = self.iterate(&rows, &slack_rows, &it, &rp, &rd, &rw) else {
                status = SdpStatus::NumericalTrouble;
                break;
            };
            let (dir, alpha_p, alpha_d) = step;
            if alpha_p.max(alpha_d) < 1e-12 {
                status = SdpStatus::NumericalTrouble;
                break;
            }
            axpy_mat(&mut it.y_mat, alpha_p, &dir.d_y);
            axpy_mat(&mut it.z, alpha_d, &dir.d_z);
            axpy(&mut it.s, alpha_p, &dir.ds);
            axpy(&mut it.y, alpha_d, &dir.dy);
            axpy(&mut it.w, alpha_d, &dir.dw);
            symmetrize(&mut it.y_mat);
            symmetrize(&mut it.z);
            iterations += 1;
        }
        let (primal_objective, dual_objective, primal_infeasibility, dual_infeasibility, gap) =
            report;
        SdpSolution {
            status,
            iterations,
            primal_objective,
            dual_objective,
            primal_infeasibility,
            dual_infeasibility,
            relative_gap: gap,
            primal: it.y_mat,
            slacks: it.s,
            duals: it.y,
            dual_slack: it.z,
        }
    }

    /// One predictor–corrector step from `it`: the corrector direction and its primal and
    /// dual step lengths, or `None` when a factorisation fails.
    fn iterate(
        &self,
        rows: &[Row],
        slack_rows: &[usize],
        it: &Iterate,
        rp: &[f64],
        rd: &Mat<f64>,
        rw: &[f64],
    ) -> Option<(Direction, f64, f64)> {
        let n = it.y_mat.nrows();
        let p = it.s.len();
        let mu = (frobenius_dot(&it.y_mat, &it.z) + dot(&it.s, &it.w)) / (n + p) as f64;
        let llt_y = it.y_mat.llt(Side::Lower).ok()?;
        let llt_z = it.z.llt(Side::Lower).ok()?;
        let g = faer::linalg::solvers::DenseSolveCore::inverse(&llt_z);
        let schur = schur_complement(rows, &it.y_mat, &g, &it.s, &it.w);
        let llt_m = factor_regularised(&schur)?;
        let y_rd_g = &(&it.y_mat * rd) * &g;
        let lp_ratio: Vec<f64> = it.s.iter().zip(&it.w).map(|(s, w)| s / w).collect();
        let solver = Newton {
            rows,
            slack_rows,
            it,
            rp,
            rd,
            rw,
            g: &g,
            y_rd_g: &y_rd_g,
            lp_ratio: &lp_ratio,
            llt_m: &llt_m,
        };
        let predictor = solver.direction(0.0, None)?;
        let gamma = self.params.step_fraction;
        let (ap, ad) = step_lengths(it, &predictor, llt_y.L(), llt_z.L(), gamma)?;
        let mut moved_y = it.y_mat.clone();
        axpy_mat(&mut moved_y, ap, &predictor.d_y);
        let mut moved_z = it.z.clone();
        axpy_mat(&mut moved_z, ad, &predictor.d_z);
        let lp: f64 = (0..p)
            .map(|q| (it.s[q] + ap * predictor.ds[q]) * (it.w[q] + ad * predictor.dw[q]))
            .sum();
        let mu_aff = (frobenius_dot(&moved_y, &moved_z) + lp) / (n + p) as f64;
        let sigma = (mu_aff / mu).clamp(0.0, 1.0).powi(3);
        let corrector = solver.direction(sigma * mu, Some(&predictor))?;
        let (ap, ad) = step_lengths(it, &corrector, llt_y.L(), llt_z.L(), gamma)?;
        Some((corrector, ap, ad))
    }
}

/// What the Newton system of one iteration is made of.
struct Newton<'a> {
    rows: &'a [Row],
    slack_rows: &'a [usize],
    it: &'a Iterate,
    rp: &'a [f64],
    rd: &'a Mat<f64>,
    rw: &'a [f64],
    /// Z⁻¹.
    g: &'a Mat<f64>,
    /// Y R_d Z⁻¹.
    y_rd_g: &'a Mat<f64>,
    /// s/w.
    lp_ratio: &'a [f64],
    llt_m: &'a faer::linalg::solvers::Llt<f64>,
}

impl Newton<'_> {
    /// The HKM direction for the target σμ = `target`, with the second-order term of
    /// `predictor` when given (the corrector).
    fn direction(&self, target: f64, predictor: Option<&Direction>) -> Option<Direction> {
        let it = self.it;
        let n = it.y_mat.nrows();
        // ΔY = σμZ⁻¹ − Y − corr − YΔZZ⁻¹ with ΔZ = R_d − 𝒜ᵀΔy: the part without Δy.
        let corr = predictor.map(|d| &(&d.d_y * &d.d_z) * self.g);
        let fixed = Mat::from_fn(n, n, |i, j| {
            target * self.g[(i, j)]
                - it.y_mat[(i, j)]
                - corr.as_ref().map_or(0.0, |c| c[(i, j)])
                - self.y_rd_g[(i, j)]
        });
        // Δs = σμ/w − s − corr/w − (s/w)Δw with Δw = r_w − gΔy: the part without Δy.
        let lp_fixed: Vec<f64> = (0..it.s.len())
            .map(|q| {
                let corr = predictor.map_or(0.0, |d| d.ds[q] * d.dw[q]);
                (target - corr) / it.w[q] - it.s[q] - self.lp_ratio[q] * self.rw[q]
            })
            .collect();
        let applied = apply(self.rows, &fixed);
        let rhs = Mat::from_fn(self.rows.len(), 1, |k, _| {
            let row = &self.rows[k];
            self.rp[k] - applied[k] - row.slack.map_or(0.0, |(q, g)| g * lp_fixed[q])
        });
        let solved = self.llt_m.solve(&rhs);
        let dy: Vec<f64> = (0..self.rows.len()).map(|k| solved[(k, 0)]).collect();
        if dy.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut d_z = self.rd.clone();
        subtract_adjoint(self.rows, &dy, &mut d_z);
        let y_dz_g = &(&it.y_mat * &d_z) * self.g;
        let mut d_y = Mat::from_fn(n, n, |i, j| {
            target * self.g[(i, j)]
                - it.y_mat[(i, j)]
                - corr.as_ref().map_or(0.0, |c| c[(i, j)])
                - y_dz_g[(i, j)]
        });
        symmetrize(&mut d_y);
        let mut dw = vec![0.0; it.w.len()];
        let mut ds = vec![0.0; it.s.len()];
        for (q, &k) in self.slack_rows.iter().enumerate() {
            let g = self.rows[k].slack.map_or(0.0, |(_, g)| g);
            dw[q] = self.rw[q] - g * dy[k];
            let corr = predictor.map_or(0.0, |d| d.ds[q] * d.dw[q]);
            ds[q] = (target - corr) / it.w[q] - it.s[q] - self.lp_ratio[q] * dw[q];
        }
        Some(Direction {
            dy,
            d_y,
            d_z,
            ds,
            dw,
        })
    }
}

/// M_kl = ⟨A_k, Y A_l G⟩ (G = Z⁻¹) over the rows' entries, plus s_q/w_q on the diagonal of
/// inequality rows. Symmetric, so only k ≤ l is computed.
fn schur_complement(rows: &[Row], y: &Mat<f64>, g: &Mat<f64>, s: &[f64], w: &[f64]) -> Mat<f64> {
    let n = y.nrows();
    // Dense copies indexed [row * n + col]; both matrices are symmetric.
    let yd: Vec<f64> = (0..n).flat_map(|j| y.col_as_slice(j).to_vec()).collect();
    let gd: Vec<f64> = (0..n).flat_map(|j| g.col_as_slice(j).to_vec()).collect();
    let m = rows.len();
    let mut out = Mat::zeros(m, m);
    for k in 0..m {
        for l in k..m {
            let mut sum = 0.0;
            for &(a, b, v) in &rows[k].sym {
                for &(c, d, wv) in &rows[l].sym {
                    sum += v * wv * yd[b * n + c] * gd[d * n + a];
                }
            }
            out[(k, l)] = sum;
            out[(l, k)] = sum;
        }
        if let Some((q, _)) = rows[k].slack {
            out[(k, k)] += s[q] / w[q];
        }
    }
    out
}

/// Cholesky of M; near the optimum M can lose definiteness to rounding, so a failed factor is
/// retried with a growing multiple of its largest diagonal entry added.
fn factor_regularised(m: &Mat<f64>) -> Option<faer::linalg::solvers::Llt<f64>> {
    if let Ok(llt) = m.llt(Side::Lower) {
        return Some(llt);
    }
    let largest = (0..m.nrows()).map(|k| m[(k, k)].abs()).fold(0.0, f64::max);
    for shift in [1e-14, 1e-12, 1e-10] {
        let shifted = Mat::from_fn(m.nrows(), m.ncols(), |i, j| {
            m[(i, j)] + if i == j { shift * largest } else { 0.0 }
        });
        if let Ok(llt) = shifted.llt(Side::Lower) {
            return Some(llt);
        }
    }
    None
}

/// The primal and dual step lengths of `dir`: `gamma` times the largest step keeping Y, s (and
/// Z, w) in the cone, capped at 1.
fn step_lengths(
    it: &Iterate,
    dir: &Direction,
    l_y: faer::MatRef<'_, f64>,
    l_z: faer::MatRef<'_, f64>,
    gamma: f64,
) -> Option<(f64, f64)> {
    let primal = max_step_psd(l_y, &dir.d_y)?.min(max_step_lp(&it.s, &dir.ds));
    let dual = max_step_psd(l_z, &dir.d_z)?.min(max_step_lp(&it.w, &dir.dw));
    Some(((gamma * primal).min(1.0), (gamma * dual).min(1.0)))
}

/// The largest α with LLᵀ + αD ⪰ 0: −1/λ_min(L⁻¹DL⁻ᵀ), or ∞ when that is ⪰ 0.
fn max_step_psd(l: faer::MatRef<'_, f64>, d: &Mat<f64>) -> Option<f64> {
    use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
    let mut half = d.clone();
    solve_lower_triangular_in_place(l, half.as_mut(), Par::Seq);
    let mut whole = half.transpose().to_owned();
    solve_lower_triangular_in_place(l, whole.as_mut(), Par::Seq);
    symmetrize(&mut whole);
    let eigenvalues = whole.self_adjoint_eigenvalues(Side::Lower).ok()?;
    let smallest = eigenvalues.iter().copied().fold(f64::INFINITY, f64::min);
    if !smallest.is_finite() {
        return None;
    }
    Some(if smallest >= 0.0 {
        f64::INFINITY
    } else {
        -1.0 / smallest
    })
}

/// The largest α with x + αd ≥ 0.
fn max_step_lp(x: &[f64], d: &[f64]) -> f64 {
    x.iter()
        .zip(d)
        .filter(|(_, &d)| d < 0.0)
        .map(|(x, d)| -x / d)
        .fold(f64::INFINITY, f64::min)
}

/// 𝒜(W) without the slacks: ⟨A_k, W⟩ per row (W need not be symmetric).
fn apply(rows: &[Row], w: &Mat<f64>) -> Vec<f64> {
    rows.iter()
        .map(|r| r.sym.iter().map(|&(a, b, v)| v * w[(a, b)]).sum())
        .collect()
}

/// out −= Σ_k y_k A_k.
fn subtract_adjoint(rows: &[Row], y: &[f64], out: &mut Mat<f64>) {
    for (r, &yk) in rows.iter().zip(y) {
        for &(a, b, v) in &r.sym {
            out[(a, b)] -= yk * v;
        }
    }
}

fn symmetrize(m: &mut Mat<f64>) {
    for j in 0..m.ncols() {
        for i in j + 1..m.nrows() {
            let mean = 0.5 * (m[(i, j)] + m[(j, i)]);
            m[(i, j)] = mean;
            m[(j, i)] = mean;
        }
    }
}

fn axpy_mat(x: &mut Mat<f64>, alpha: f64, d: &Mat<f64>) {
    for j in 0..x.ncols() {
        for (a, b) in x.col_as_slice_mut(j).iter_mut().zip(d.col_as_slice(j)) {
            *a += alpha * b;
        }
    }
}

fn axpy(x: &mut [f64], alpha: f64, d: &[f64]) {
    for (a, b) in x.iter_mut().zip(d) {
        *a += alpha * b;
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}
