//! The Γ_k projection against an independent interior-point solve (clarabel) of problem (9):
//!
//!   min ½‖α − a⁰‖² + ½‖β − b⁰‖²  s.t.  α ≥ 0, β ≥ 0, Σα − Σβ = 0, β_j − (1/k)Σα ≤ 0,
//!
//! on small random cases (m, n ≤ 30, k ∈ {1, ~n/3, n, random}, continuous and tied inputs).
//! Only the reference solve is generic here; the production path is `project`.

mod common;

use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSolver, IPSolver, SolverStatus, SupportedConeT::NonnegativeConeT,
    SupportedConeT::ZeroConeT,
};
use common::settings_with_tol;
use neyman::learn::projection::{project, ProjectionWorkspace};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Solves (9) with clarabel; x = (α, β).
fn solve_qp(a0: &[f64], b0: &[f64], k: usize) -> Vec<f64> {
    let (m, n) = (a0.len(), b0.len());
    let dim = m + n;
    let p = CscMatrix::identity(dim);
    let q: Vec<f64> = a0.iter().chain(b0).map(|x| -x).collect();
    // rows: 0 = Σα − Σβ (zero cone); 1..=dim: −x ≥ 0; then n rows β_j − Σα/k ≤ 0
    let (mut ri, mut ci, mut vv) = (Vec::new(), Vec::new(), Vec::new());
    for col in 0..dim {
        ri.push(0);
        ci.push(col);
        vv.push(if col < m { 1.0 } else { -1.0 });
        ri.push(1 + col);
        ci.push(col);
        vv.push(-1.0);
    }
    for j in 0..n {
        let row = 1 + dim + j;
        ri.push(row);
        ci.push(m + j);
        vv.push(1.0);
        for i in 0..m {
            ri.push(row);
            ci.push(i);
            vv.push(-1.0 / k as f64);
        }
    }
    let a = CscMatrix::new_from_triplets(1 + dim + n, dim, ri, ci, vv);
    let b = vec![0.0; 1 + dim + n];
    let cones = [ZeroConeT(1), NonnegativeConeT(dim + n)];
    // tight tolerances first; looser ones only if the interior point stalls
    let mut history = Vec::new();
    for tol in [1e-12, 1e-10, 1e-8] {
        let mut solver = DefaultSolver::new(&p, &q, &a, &b, &cones, settings_with_tol(tol))
            .expect("clarabel accepts (9)");
        solver.solve();
        let status = solver.solution.status;
        if status == SolverStatus::Solved {
            return solver.solution.x.clone();
        }
        history.push(status);
    }
    panic!("clarabel did not solve (9): {history:?}");
}

fn objective(x: &[f64], a0: &[f64], b0: &[f64]) -> f64 {
    0.5 * x
        .iter()
        .zip(a0.iter().chain(b0))
        .map(|(v, w)| (v - w) * (v - w))
        .sum::<f64>()
}

fn draw(rng: &mut ChaCha8Rng, len: usize, tied: bool) -> Vec<f64> {
    (0..len)
        .map(|_| {
            if tied {
                f64::from(rng.gen_range(-2i32..3)) * 0.5
            } else {
                rng.gen_range(-2.0..2.0)
            }
        })
        .collect()
}

#[test]
fn project_matches_clarabel_on_problem_9() {
    let mut rng = ChaCha8Rng::seed_from_u64(2018);
    let mut ws = ProjectionWorkspace::default();
    let mut worst = (0.0f64, 0.0f64);
    for case in 0..50 {
        let (m, n) = (rng.gen_range(1..=30), rng.gen_range(1..=30));
        let tied = case % 3 == 0;
        // a positive shift on some cases keeps most of them away from the zero solution
        let shift = if case % 2 == 0 { 0.5 } else { 0.0 };
        let a0: Vec<f64> = draw(&mut rng, m, tied).iter().map(|x| x + shift).collect();
        let b0 = draw(&mut rng, n, tied);
        let k = match case % 4 {
            0 => 1,
            1 => n,
            2 => (n / 3).max(1),
            _ => rng.gen_range(1..=n),
        };
        let (mut alpha, mut beta) = (vec![0.0; m], vec![0.0; n]);
        project(&a0, &b0, k, &mut alpha, &mut beta, &mut ws).expect("valid input");
        let ours: Vec<f64> = alpha.iter().chain(&beta).copied().collect();
        let reference = solve_qp(&a0, &b0, k);

        let (f_ours, f_ref) = (objective(&ours, &a0, &b0), objective(&reference, &a0, &b0));
        let rel = (f_ours - f_ref).abs() / f_ref.abs().max(1.0);
        let dist = ours
            .iter()
            .zip(&reference)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        let tag = format!("case {case}: m={m} n={n} k={k} tied={tied}");
        assert!(rel <= 1e-7, "{tag}: objective {f_ours} vs clarabel {f_ref}");
        assert!(dist <= 1e-5, "{tag}: max |x − x_qp| = {dist:e}");
        // the projection is the exact minimiser: never worse than the interior point
        assert!(
            f_ours <= f_ref + 1e-9 * f_ref.max(1.0),
            "{tag}: {f_ours} > {f_ref}"
        );
        worst = (worst.0.max(rel), worst.1.max(dist));
    }
    eprintln!(
        "worst objective rel. diff {:.1e}, worst max |x − x_qp| {:.1e}",
        worst.0, worst.1
    );
}
