//! The cost-sensitive linear SVM against an independent interior-point solve (clarabel) of the
//! same dual, min ½αᵀQα − Σα over the box 0 ≤ α_i ≤ C_i with Q_ij = y_i y_j (x_iᵀx_j + 1) (the
//! bias is a constant feature, so there is no equality constraint), on small random problems,
//! dense and sparse; and a property test that the solver never panics, stays dual feasible and
//! closes the duality gap when it reports convergence.

use std::sync::atomic::AtomicBool;

mod common;

use clarabel::algebra::CscMatrix;
use clarabel::solver::{DefaultSolver, IPSolver, SolverStatus, SupportedConeT::NonnegativeConeT};
use common::{settings_with_tol, to_sparse, SplitMix64};
use ndarray::Array2;
use neyman::data::Rows;
use neyman::learn::linsvm::{LinearSvm, LinearSvmParams};
use proptest::prelude::*;

/// Rows with about a third exact zeros; positives shifted by +0.7 in every coordinate, and
/// about 10% of the labels flipped so some margins are violated at any C.
fn problem(seed: u64, n: usize, d: usize) -> (Array2<f64>, Vec<bool>) {
    let mut rng = SplitMix64::new(seed);
    let positive: Vec<bool> = (0..n)
        .map(|i| if i < 2 { i == 0 } else { rng.next_f64() < 0.4 })
        .collect();
    let x = Array2::from_shape_fn((n, d), |(i, _)| {
        if rng.next_f64() < 0.33 {
            0.0
        } else {
            let flip = rng.next_f64() < 0.1;
            rng.next_normal() + if positive[i] != flip { 0.7 } else { 0.0 }
        }
    });
    (x, positive)
}

/// The reference: w̃* = Σ α*_i y_i (x_i, 1) from clarabel's α*.
struct Reference {
    /// Σα − ½‖w̃‖² at the clamped α.
    dual: f64,
    w: Vec<f64>,
    bias: f64,
}

fn clarabel_dual(x: &Array2<f64>, positive: &[bool], cp: f64, cn: f64) -> Reference {
    let n = x.nrows();
    let y: Vec<f64> = positive
        .iter()
        .map(|&p| if p { 1.0 } else { -1.0 })
        .collect();
    let cost: Vec<f64> = positive.iter().map(|&p| if p { cp } else { cn }).collect();
    // Scale α = C_max·a so the box is O(1); the objective is divided by C_max.
    let scale = cp.max(cn);
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    for j in 0..n {
        for i in 0..=j {
            let k: f64 = x.row(i).dot(&x.row(j)) + 1.0;
            rowval.push(i);
            nzval.push(scale * y[i] * y[j] * k);
        }
        colptr.push(rowval.len());
    }
    let p = CscMatrix::new(n, n, colptr, rowval, nzval);
    let q = vec![-1.0; n];
    // Rows: −a ≤ 0 (n rows), a ≤ C_i/scale (n rows).
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    for i in 0..n {
        rowval.extend([i, n + i]);
        nzval.extend([-1.0, 1.0]);
        colptr.push(rowval.len());
    }
    let a = CscMatrix::new(2 * n, n, colptr, rowval, nzval);
    let mut b = vec![0.0; 2 * n];
    for i in 0..n {
        b[n + i] = cost[i] / scale;
    }
    let cones = [NonnegativeConeT(2 * n)];
    let mut solver =
        DefaultSolver::new(&p, &q, &a, &b, &cones, settings_with_tol(1e-11)).expect("valid QP");
    solver.solve();
    assert_eq!(solver.solution.status, SolverStatus::Solved);
    let alpha: Vec<f64> = (0..n)
        .map(|i| (solver.solution.x[i] * scale).clamp(0.0, cost[i]))
        .collect();
    let mut w = vec![0.0; x.ncols()];
    let mut bias = 0.0;
    for i in 0..n {
        for (wj, xj) in w.iter_mut().zip(x.row(i)) {
            *wj += alpha[i] * y[i] * xj;
        }
        bias += alpha[i] * y[i];
    }
    let norm2 = w.iter().map(|v| v * v).sum::<f64>() + bias * bias;
    Reference {
        dual: alpha.iter().sum::<f64>() - 0.5 * norm2,
        w,
        bias,
    }
}

/// ½‖w̃‖² + Σ C_i [1 − y_i f(x_i)]₊, computed here independently of the solver's report.
fn primal(x: &Array2<f64>, positive: &[bool], cp: f64, cn: f64, w: &[f64], bias: f64) -> f64 {
    let norm2 = w.iter().map(|v| v * v).sum::<f64>() + bias * bias;
    let loss: f64 = x
        .outer_iter()
        .zip(positive)
        .map(|(r, &p)| {
            let f: f64 = r.iter().zip(w).map(|(a, b)| a * b).sum::<f64>() + bias;
            let (c, y) = if p { (cp, 1.0) } else { (cn, -1.0) };
            c * (1.0 - y * f).max(0.0)
        })
        .sum();
    0.5 * norm2 + loss
}

fn fit(rows: &Rows, positive: &[bool], cp: f64, cn: f64, tol: f64, shrinking: bool) -> LinearSvm {
    let mut params = LinearSvmParams::new(cp).with_costs(cp, cn);
    params.tol = tol;
    params.max_epochs = 100_000;
    params.shrinking = shrinking;
    params
        .check()
        .expect("valid")
        .fit(rows, positive, &AtomicBool::new(false))
        .expect("fit")
}

fn compare(seed: u64, n: usize, d: usize, cp: f64, cn: f64) {
    let (x, positive) = problem(seed, n, d);
    let reference = clarabel_dual(&x, &positive, cp, cn);
    let ref_primal = primal(&x, &positive, cp, cn, &reference.w, reference.bias);
    for (storage, rows) in [("dense", Rows::dense(x.clone())), ("sparse", to_sparse(&x))] {
        for shrinking in [true, false] {
            let label =
                format!("seed {seed} n {n} d {d} C+ {cp} C- {cn} {storage} shrinking {shrinking}");
            let m = fit(&rows, &positive, cp, cn, 1e-9, shrinking);
            let r = &m.report;
            assert!(r.converged, "{label}: {r:?}");
            let scale = reference.dual.abs().max(1.0);
            assert!(
                (r.dual_objective - reference.dual).abs() <= 1e-6 * scale,
                "{label}: dual {} vs clarabel {}",
                r.dual_objective,
                reference.dual
            );
            let own_primal = primal(&x, &positive, cp, cn, &m.w, m.bias);
            assert!(
                (own_primal - r.primal_objective).abs() <= 1e-9 * scale,
                "{label}: reported primal {} vs recomputed {own_primal}",
                r.primal_objective
            );
            let gap = r.primal_objective - r.dual_objective;
            assert!(
                gap >= -1e-9 * scale && gap <= 1e-6 * scale,
                "{label}: gap {gap}"
            );
            // P is 1-strongly convex in w̃, so ‖w̃ − w̃*‖ ≤ √(2(P(w̃) − P*)) ≤ √(2·gap) (ours)
            // + the same for the reference; both gaps are ~1e-8 here.
            let ref_gap = (ref_primal - reference.dual).max(0.0);
            let bound = (2.0 * gap.max(0.0)).sqrt() + (2.0 * ref_gap).sqrt() + 1e-9;
            let dist = (m.w.iter().zip(&reference.w))
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f64>()
                + (m.bias - reference.bias).powi(2);
            assert!(
                dist.sqrt() <= bound.min(1e-3),
                "{label}: ‖w̃ − w̃*‖ = {} > {bound}",
                dist.sqrt()
            );
            // α itself need not be unique (Q is singular when n > d + 1); only the box is
            // checked.
            for (i, &a) in m.alpha.iter().enumerate() {
                let cap = if positive[i] { cp } else { cn };
                assert!((0.0..=cap).contains(&a), "{label}: α_{i} = {a}");
            }
        }
    }
}

#[test]
fn balanced_costs_match_the_interior_point_dual() {
    for (seed, c) in (1..).zip([0.01, 0.1, 1.0, 10.0]) {
        compare(seed, 40, 5, c, c);
    }
}

#[test]
fn cost_ratios_match_the_interior_point_dual() {
    for (seed, (cp, cn)) in (20..).zip([(1.0, 10.0), (10.0, 1.0), (0.05, 2.0), (1.0, 100.0)]) {
        compare(seed, 50, 4, cp, cn);
    }
}

#[test]
fn edge_shapes_match() {
    // Few rows; more features than rows; a single feature.
    compare(40, 6, 3, 1.0, 1.0);
    compare(41, 12, 20, 1.0, 5.0);
    compare(42, 30, 1, 2.0, 1.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn never_panics_stays_feasible_and_converged_fits_close_the_gap(
        seed in 0u64..1000,
        n in 2usize..40,
        d in 1usize..6,
        log_cp in -3.0f64..3.0,
        log_cn in -3.0f64..3.0,
        log_tol in -8.0f64..-1.0,
        sparse in any::<bool>(),
        shrinking in any::<bool>(),
        max_epochs in 1u64..200,
    ) {
        let (x, positive) = problem(seed, n, d);
        let rows = if sparse { to_sparse(&x) } else { Rows::dense(x.clone()) };
        let (cp, cn, tol) = (10f64.powf(log_cp), 10f64.powf(log_cn), 10f64.powf(log_tol));
        let mut params = LinearSvmParams::new(cp).with_costs(cp, cn);
        params.tol = tol;
        params.max_epochs = max_epochs;
        params.shrinking = shrinking;
        params.seed = seed;
        let m = params.check().unwrap().fit(&rows, &positive, &AtomicBool::new(false)).unwrap();
        let r = &m.report;
        prop_assert!(r.epochs >= 1 && r.epochs <= max_epochs);
        prop_assert!(r.primal_objective.is_finite() && r.dual_objective.is_finite());
        for (i, &a) in m.alpha.iter().enumerate() {
            let cap = if positive[i] { cp } else { cn };
            prop_assert!((0.0..=cap).contains(&a), "α_{} = {} outside [0, {}]", i, a, cap);
        }
        let gap = r.primal_objective - r.dual_objective;
        let scale = r.primal_objective.abs().max(1.0);
        prop_assert!(gap >= -1e-10 * scale, "negative gap {}", gap);
        if r.converged {
            // Every term of the gap, α_i·G_i⁺ + (C_i − α_i)·G_i⁻, is at most C_i times a
            // projected gradient, and the stop leaves every |PG| within about tol (within, not
            // below: the PGs are measured before each step of the last epoch and the later
            // steps move them a little). Over 20,000 cases the largest gap/(tol·ΣC) was 1.3.
            let budget: f64 = positive.iter().map(|&p| if p { cp } else { cn }).sum();
            prop_assert!(gap <= 4.0 * tol * budget + 1e-10 * scale,
                "gap {} over 4·tol·ΣC = {}", gap, 4.0 * tol * budget);
        }
        let mut out = vec![0.0; n];
        m.decision_batch(&rows, &mut out);
        prop_assert!(out.iter().all(|v| v.is_finite()));
    }
}
