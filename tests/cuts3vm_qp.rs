//! CutS3VM against independent solves and its own optimality conditions:
//! - with no unlabeled rows, problem (1) is the linear SVM with b fixed at 2π − 1 and the slack
//!   sum divided by n, a convex QP solved here by clarabel in its primal form; CutS3VM's
//!   objective must lie in [optimum, optimum + ε] (Theorem 4);
//! - with unlabeled rows, at a converged stop ξ ≤ H(w) ≤ ξ + ε (Theorem 2, eq. 12) and the
//!   unlabeled rows' mean score is 2π − 1 (eq. 2), for any data (a property test);
//! - sparse and dense storage of the same rows give the same model.

use std::sync::atomic::AtomicBool;

mod common;

use clarabel::algebra::CscMatrix;
use clarabel::solver::{DefaultSolver, IPSolver, SolverStatus, SupportedConeT::NonnegativeConeT};
use common::{settings_with_tol, to_sparse, SplitMix64};
use ndarray::Array2;
use neyman::data::{Dataset, Label, Rows};
use neyman::learn::s3vm::cut::{CutS3vmModel, CutS3vmParams};
use proptest::prelude::*;

/// Rows with about a quarter exact zeros, positives shifted by +0.8 in every coordinate and
/// about 10 % of the labels flipped; the first `labelled` rows keep their label.
fn problem(seed: u64, n: usize, d: usize, labelled: usize) -> (Array2<f64>, Vec<Label>) {
    let mut rng = SplitMix64::new(seed);
    let positive: Vec<bool> = (0..n)
        .map(|i| if i < 2 { i == 0 } else { rng.next_f64() < 0.45 })
        .collect();
    let x = Array2::from_shape_fn((n, d), |(i, _)| {
        if rng.next_f64() < 0.25 {
            0.0
        } else {
            let flip = rng.next_f64() < 0.1;
            rng.next_normal() + if positive[i] != flip { 0.8 } else { 0.0 }
        }
    });
    let labels = positive
        .iter()
        .enumerate()
        .map(|(i, &p)| match (i < labelled, p) {
            (false, _) => Label::Unlabeled,
            (true, true) => Label::Positive,
            (true, false) => Label::Negative,
        })
        .collect();
    (x, labels)
}

fn dataset(rows: Rows, labels: Vec<Label>) -> Dataset {
    let ids = (0..labels.len()).map(|i| i.to_string()).collect();
    Dataset { rows, labels, ids }
}

fn fit(data: &Dataset, params: CutS3vmParams) -> CutS3vmModel {
    params
        .check()
        .expect("valid settings")
        .fit(data, &AtomicBool::new(false))
        .expect("a fit")
}

/// min ½‖w‖² + (C_l/n) Σ ξ_i, ξ_i ≥ 1 − y_i (w·x_i + b), ξ ≥ 0, over z = (w, ξ), by clarabel:
/// the optimum.
fn clarabel_fixed_bias_svm(x: &Array2<f64>, labels: &[Label], cl: f64, b: f64) -> f64 {
    let (n, d) = x.dim();
    let y: Vec<f64> = labels.iter().map(|l| f64::from(l.code())).collect();
    let weight = cl / n as f64;
    let p = CscMatrix::new(
        d + n,
        d + n,
        (0..=d + n).map(|j| j.min(d)).collect(),
        (0..d).collect(),
        vec![1.0; d],
    );
    let q: Vec<f64> = (0..d + n)
        .map(|j| if j < d { 0.0 } else { weight })
        .collect();
    // Rows 0..n: −y_i x_i·w − ξ_i ≤ −1 + y_i b; rows n..2n: −ξ_i ≤ 0. Column-major.
    let (mut colptr, mut rowval, mut nzval) = (vec![0], Vec::new(), Vec::new());
    for j in 0..d {
        for i in 0..n {
            if x[(i, j)] != 0.0 {
                rowval.push(i);
                nzval.push(-y[i] * x[(i, j)]);
            }
        }
        colptr.push(rowval.len());
    }
    for i in 0..n {
        rowval.extend([i, n + i]);
        nzval.extend([-1.0, -1.0]);
        colptr.push(rowval.len());
    }
    let a = CscMatrix::new(2 * n, d + n, colptr, rowval, nzval);
    let rhs: Vec<f64> = (0..2 * n)
        .map(|r| if r < n { -1.0 + y[r] * b } else { 0.0 })
        .collect();
    let cones = [NonnegativeConeT(2 * n)];
    let mut solver =
        DefaultSolver::new(&p, &q, &a, &rhs, &cones, settings_with_tol(1e-10)).expect("valid QP");
    solver.solve();
    assert_eq!(solver.solution.status, SolverStatus::Solved);
    let z = &solver.solution.x;
    let w = &z[..d];
    // The objective recomputed at clarabel's w with the exact hinge (no solver slack).
    let hinge: f64 = (0..n)
        .map(|i| {
            let f: f64 = (0..d).map(|j| w[j] * x[(i, j)]).sum::<f64>() + b;
            (1.0 - y[i] * f).max(0.0)
        })
        .sum();
    0.5 * w.iter().map(|v| v * v).sum::<f64>() + weight * hinge
}

/// Without unlabeled rows CutS3VM is the 1-slack cutting plane of the fixed-bias SVM: its
/// objective is within [optimum − 1e-7, optimum + ε] of clarabel's, on dense and sparse rows,
/// at C_l from 0.1 to 100 and priors that put b on either side of 0.
#[test]
fn without_unlabeled_rows_it_solves_the_fixed_bias_svm() {
    for (seed, n, d) in [(1, 30, 2), (2, 60, 4), (3, 45, 6), (4, 80, 3)] {
        let (x, labels) = problem(seed, n, d, n);
        for cl in [0.1, 1.0, 10.0, 100.0] {
            for prior in [0.3, 0.5, 0.7] {
                let optimum = clarabel_fixed_bias_svm(&x, &labels, cl, 2.0 * prior - 1.0);
                for rows in [Rows::dense(x.clone()), to_sparse(&x)] {
                    let mut params = CutS3vmParams::new(cl, 1.0, prior);
                    params.epsilon = 1e-4;
                    let model = fit(&dataset(rows, labels.clone()), params);
                    let r = &model.report;
                    let tag = format!("seed {seed} cl {cl} prior {prior}: {r:?}");
                    assert!(r.converged, "{tag}");
                    assert!(r.objective >= optimum - 1e-7, "{tag}: below {optimum}");
                    assert!(r.objective <= optimum + 1e-4 + 1e-9, "{tag}: {optimum}");
                }
            }
        }
    }
}

/// The same rows stored dense and sparse give the same w, labelling and report (up to the
/// summation order of dot products).
#[test]
fn sparse_and_dense_rows_give_the_same_model() {
    let (x, labels) = problem(7, 300, 8, 30);
    let params = CutS3vmParams::new(5.0, 1.0, 0.45);
    let dense = fit(
        &dataset(Rows::dense(x.clone()), labels.clone()),
        params.clone(),
    );
    let sparse = fit(&dataset(to_sparse(&x), labels), params);
    assert_eq!(dense.report.rounds, sparse.report.rounds);
    assert_eq!(dense.report.cccp_steps, sparse.report.cccp_steps);
    for (a, b) in dense.w.iter().zip(&sparse.w) {
        assert!((a - b).abs() <= 1e-9 * (1.0 + a.abs()), "{a} vs {b}");
    }
    let rows = Rows::dense(x);
    let (mut fd, mut fs) = (vec![0.0; 300], vec![0.0; 300]);
    dense.expansion.decision_batch(&rows, &mut fd);
    sparse.expansion.decision_batch(&rows, &mut fs);
    assert!(fd.iter().zip(&fs).all(|(a, b)| (a > &0.0) == (b > &0.0)));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any data, any settings: the fit never panics; a converged fit has ξ ≤ H(w) ≤ ξ + ε, the
    /// unlabeled rows' mean score is 2π − 1, and the report's objective is ½‖w‖² + H(w).
    #[test]
    fn converged_fits_meet_theorem_two_and_the_balance(
        seed in 0u64..10_000,
        n in 8usize..120,
        d in 1usize..6,
        labelled_share in 0.05f64..1.0,
        cl in 0.01f64..50.0,
        cu in 0.0f64..10.0,
        prior in 0.05f64..0.95,
        epsilon in 0.001f64..0.3,
    ) {
        let labelled = ((n as f64 * labelled_share) as usize).max(2);
        let (x, labels) = problem(seed, n, d, labelled);
        let mut params = CutS3vmParams::new(cl, cu, prior);
        params.epsilon = epsilon;
        let data = dataset(Rows::dense(x), labels);
        let model = fit(&data, params);
        let r = &model.report;
        prop_assert!(model.w.iter().all(|v| v.is_finite()));
        prop_assert!(r.xi <= r.hinge_sum + 1e-9, "{:?}", r);
        if r.converged {
            prop_assert!(r.hinge_sum <= r.xi + epsilon + 1e-12, "{:?}", r);
        }
        let unlabeled = data.indices_of(Label::Unlabeled);
        if !unlabeled.is_empty() {
            let mut scores = vec![0.0; unlabeled.len()];
            model.expansion.decision_batch(&data.rows.select(&unlabeled), &mut scores);
            let mean = scores.iter().sum::<f64>() / scores.len() as f64;
            prop_assert!((mean - (2.0 * prior - 1.0)).abs() < 1e-8 * (1.0 + mean.abs()), "mean {}", mean);
        }
        let norm = model.w.iter().map(|v| v * v).sum::<f64>();
        prop_assert!((r.objective - (0.5 * norm + r.hinge_sum)).abs() < 1e-9 * (1.0 + r.objective));
    }
}
