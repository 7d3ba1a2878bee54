//! τ-FPL against an independent interior-point solve (clarabel) of dual (7), and the duality
//! gap of its own primal (6), on small linear and RBF problems.

use std::sync::atomic::AtomicBool;

mod common;

use clarabel::algebra::CscMatrix;
use clarabel::solver::{
    DefaultSolver, IPSolver, SolverStatus, SupportedConeT::NonnegativeConeT,
    SupportedConeT::ZeroConeT,
};
use common::settings_with_tol;
use ndarray::Array2;
use neyman::data::{Dataset, Label, Rows};
use neyman::learn::kernel::Kernel;
use neyman::learn::projection::k_for;
use neyman::learn::tfpl::{TfplParams, TfplSolver};

/// Deterministic N(0,1)-ish rows; positives shifted by +0.8.
fn problem(seed: u64, m: usize, n: usize, d: usize) -> Array2<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    let mut uniform = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    Array2::from_shape_fn((m + n, d), |(i, _)| {
        let z = (0..4).map(|_| uniform()).sum::<f64>() - 2.0;
        z + if i < m { 0.8 } else { 0.0 }
    }) / (d as f64).sqrt()
}

fn gram(x: &Array2<f64>, kernel: Kernel) -> Array2<f64> {
    let rows = Rows::dense(x.clone());
    Array2::from_shape_fn((x.nrows(), x.nrows()), |(i, j)| {
        kernel.eval(rows.row(i), rows.row(j))
    })
}

/// min over Γ_k of g(α, β) = (1/(2mR)) uᵀKu + Σ(α²/4 − α), u = (α, −β); returns g*.
fn clarabel_dual(k_mat: &Array2<f64>, m: usize, reg: f64, k: usize) -> f64 {
    let len = k_mat.nrows();
    let n = len - m;
    let sign = |i: usize| if i < m { 1.0 } else { -1.0 };
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    for j in 0..len {
        for i in 0..=j {
            let mut v = sign(i) * sign(j) * k_mat[[i, j]] / (m as f64 * reg);
            if i == j && i < m {
                v += 0.5;
            }
            rowval.push(i);
            nzval.push(v);
        }
        colptr.push(rowval.len());
    }
    let p = CscMatrix::new(len, len, colptr, rowval, nzval);
    let q: Vec<f64> = (0..len).map(|i| if i < m { -1.0 } else { 0.0 }).collect();
    // Rows: [Σα − Σβ = 0], [−x ≤ 0] (len rows), [β_j − Σα/k ≤ 0] (n rows).
    let rows = 1 + len + n;
    let mut dense = Array2::<f64>::zeros((rows, len));
    for i in 0..len {
        dense[[0, i]] = sign(i);
        dense[[1 + i, i]] = -1.0;
    }
    for j in 0..n {
        for i in 0..m {
            dense[[1 + len + j, i]] = -1.0 / k as f64;
        }
        dense[[1 + len + j, m + j]] = 1.0;
    }
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    for c in 0..len {
        for r in 0..rows {
            if dense[[r, c]] != 0.0 {
                rowval.push(r);
                nzval.push(dense[[r, c]]);
            }
        }
        colptr.push(rowval.len());
    }
    let a = CscMatrix::new(rows, len, colptr, rowval, nzval);
    let b = vec![0.0; rows];
    let cones = [ZeroConeT(1), NonnegativeConeT(len + n)];
    let mut solver =
        DefaultSolver::new(&p, &q, &a, &b, &cones, settings_with_tol(1e-10)).expect("valid QP");
    solver.solve();
    assert_eq!(solver.solution.status, SolverStatus::Solved);
    solver.solution.obj_val
}

fn dataset(x: &Array2<f64>, m: usize) -> Dataset {
    Dataset {
        rows: Rows::dense(x.clone()),
        labels: (0..x.nrows())
            .map(|i| {
                if i < m {
                    Label::Positive
                } else {
                    Label::Negative
                }
            })
            .collect(),
        ids: (0..x.nrows()).map(|i| format!("r{i}")).collect(),
    }
}

/// Both solvers for the linear kernel (the interior point and FISTA), FISTA for the others.
fn compare(seed: u64, m: usize, n: usize, tau: f64, reg: f64, kernel: Kernel) {
    let solvers: &[TfplSolver] = if kernel == Kernel::Linear {
        &[TfplSolver::Ipm, TfplSolver::Fista]
    } else {
        &[TfplSolver::Fista]
    };
    for &solver in solvers {
        compare_with(seed, m, n, tau, reg, kernel, solver);
    }
}

fn compare_with(
    seed: u64,
    m: usize,
    n: usize,
    tau: f64,
    reg: f64,
    kernel: Kernel,
    solver: TfplSolver,
) {
    let x = problem(seed, m, n, 5);
    let mut params = TfplParams::new(tau, reg);
    params.kernel = kernel;
    params.tol = 1e-9;
    params.solver = solver;
    let fit = params
        .check()
        .expect("valid")
        .fit(&dataset(&x, m), &AtomicBool::new(false))
        .expect("fit");
    let r = &fit.report;
    let label = format!("seed {seed} m {m} n {n} τ {tau} R {reg} {kernel:?} {solver:?}");
    assert!(r.converged, "{label}: {r:?}");
    assert_eq!(r.k, k_for(tau, n));
    let g_star = clarabel_dual(&gram(&x, kernel), m, reg, r.k);
    let reference = -g_star / m as f64;
    assert!(
        (r.dual_objective - reference).abs() <= 1e-6 * reference.abs().max(1.0),
        "{label}: dual {} vs clarabel {reference}",
        r.dual_objective
    );
    assert!(
        (r.primal_objective - reference).abs() <= 1e-6 * reference.abs().max(1.0),
        "{label}: primal {} vs clarabel dual {reference} (strong duality)",
        r.primal_objective
    );
}

#[test]
fn linear_tfpl_matches_the_interior_point_dual() {
    let mut seed = 1;
    for tau in [0.0, 0.05, 0.2] {
        for reg in [1e-4, 1e-2, 1e-1, 1.0, 100.0] {
            compare(seed, 15, 40, tau, reg, Kernel::Linear);
            seed += 1;
        }
    }
}

#[test]
fn rbf_tfpl_matches_the_interior_point_dual() {
    for (seed, tau) in [(50, 0.05), (51, 0.3)] {
        compare(seed, 12, 30, tau, 0.1, Kernel::Rbf { gamma: 0.5 });
    }
}

#[test]
fn edge_sizes_match() {
    compare(90, 1, 20, 0.1, 0.1, Kernel::Linear);
    compare(91, 10, 1, 0.1, 0.1, Kernel::Linear);
    compare(92, 10, 25, 0.99, 0.1, Kernel::Linear);
}
